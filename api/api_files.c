/* api_files.c - a file write's body streamed from the client to the broker as it arrives, the client watched meanwhile (adr/0030). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "api_int.h"
#include "sbx_call.h"
#include "sbx_gate.h"
#include "sbx_httpd.h"
#include "sbx_list_out.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

#define A_OF(r) ((struct areq *)(void *)((char *)(r) - \
	offsetof(struct areq, watch)))

/* The client left mid-body (or before the answer): the broker connection
 * closes, so the broker cancels its write and the helper, having less than
 * --size bytes, leaves the file as it was (adr/0018). */
static void
write_gone(struct sbx_httpd_req *r)
{
	struct areq *a = A_OF(r);
	struct sbx_op *op = a->op;

	a->op = NULL;
	sbx_op_cancel(op);
	a->req = NULL;       /* released by the core (sbx_httpd.c closed) */
	areq_finish(a, 499, SBX_E_CANCELLED);
}

static const struct sbx_httpd_ops write_watch_ops = { NULL, write_gone };

void
api_write_stream(struct areq *a, sbx_done_cb done)
{
	struct evbuffer *src = sbx_gate_body_buffer(a->gbody);
	struct sbx_err err;

	sbx_err_clear(&err);
	a->wsize = sbx_gate_body_length(a->gbody);
	a->watch.req = a->req;
	a->watch.gate = a->s->gate;
	a->watch.ops = &write_watch_ops;
	/* The gate holds at most this much of the body not yet taken. */
	sbx_gate_body_window(a->gbody, (size_t)a->s->cfg->file_write_buffer);
	/* A driver without write_stream (the fake of the unit tests) gets
	 * the whole body, gathered by the call layer (bounded by
	 * file_size_max): the gate holds all of it then. */
	if (!sbx_call_supports(a->s->driver, SBX_CALL_WRITE_STREAM))
		sbx_gate_body_window(a->gbody, (size_t)a->wsize);
	/* The gate holds at most file_write_buffer of the body, the driver
	 * as much again towards the broker: a small constant per write. */
	a->op = sbx_call_write_stream(a->s->driver, a->npc.sandbox_id,
	    a->path, a->mode, src, a->wsize, done, a, &err);
	if (a->op == NULL) {
		areq_fail_broker(a, &err);
		return;
	}
	sbx_httpd_watch(&a->watch);
	sbx_gate_body_kick(a->gbody);
}

unsigned
api_write_reply_flags(struct areq *a, int status)
{
	/* Stop watching before the reply (its core call knows nothing of
	 * this watch). A body that stopped coming (504) ends its connection;
	 * the rest of one answered early is read and dropped by the gate. */
	if (a->watch.watching)
		sbx_httpd_unwatch(&a->watch);
	if (a->gbody != NULL && status == 504 &&
	    !sbx_gate_body_complete(a->gbody))
		return SBX_HTTPD_CLOSE;
	return 0;
}

/* ---- a list page's reply in slices (adr/0030, sbx_list_out.h) ---- */

static void
list_done(void *arg, const struct sbx_err *err, struct evbuffer *text,
    int truncated, const char *cursor)
{
	struct areq *a = arg;

	(void)truncated;
	if (err != NULL) {
		areq_fail(a, err);
		return;
	}
	if (!a->list_obj && cursor[0] != '\0') {
		evhttp_add_header(evhttp_request_get_output_headers(a->req),
		    "Sbx-List-Truncated", "true");
		evhttp_add_header(evhttp_request_get_output_headers(a->req),
		    "Sbx-List-Cursor", cursor);
	}
	areq_reply_json_text(a, 200, text);
}

void
api_list_reply(struct areq *a, const struct sbx_dirent *ents, size_t n,
    int truncated)
{
	struct sbx_err err;

	/* a->lout is freed with a (api_write_release) */
	if (sbx_list_out_start(&a->lout, a->s->base, ents, n, truncated,
	    a->list_obj, list_done, a, &err) == -1)
		areq_fail(a, &err);
}

void
api_write_release(struct areq *a)
{
	sbx_list_out_free(a->lout);
	a->lout = NULL;
	if (a->watch.watching)
		sbx_httpd_unwatch(&a->watch);
	if (a->gbody == NULL)
		return;
	if (a->op != NULL) {        /* a write, or its gather, under way */
		sbx_op_cancel(a->op);
		a->op = NULL;
	}
	sbx_gate_body_free(a->gbody);
	a->gbody = NULL;
}
