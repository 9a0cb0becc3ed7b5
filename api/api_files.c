/* api_files.c - a file write's body streamed from the client to the broker as it arrives, the client watched meanwhile; a list page's reply in slices (adr/0030). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "api_int.h"
#include "sbx_call.h"
#include "sbx_gate.h"
#include "sbx_httpd.h"
#include "sbx_list_out.h"
#include "sbx_proto.h"

int
api_write_stream(struct areq *a, sbx_done_cb done, struct sbx_err *err)
{
	struct evbuffer *src = sbx_gate_body_buffer(a->gbody);

	a->wsize = sbx_gate_body_length(a->gbody);
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
	    a->path, a->mode, src, a->wsize, done, a, err);
	if (a->op == NULL)
		return areq_broker_err(a);
	/* The client leaving meanwhile cancels the write, or its gather
	 * (on_gone), 499. */
	areq_watch(a);
	sbx_gate_body_kick(a->gbody);
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
		sbx_httpd_header(&a->h, "Sbx-List-Truncated", "true");
		sbx_httpd_header(&a->h, "Sbx-List-Cursor", cursor);
	}
	areq_reply_json_text(a, 200, text);
}

void
api_list_reply(struct areq *a, const struct sbx_dirent *ents, size_t n,
    int truncated)
{
	struct sbx_err err;

	/* a->lout is freed with a (areq_finish) */
	if (sbx_list_out_start(&a->lout, a->s->base, ents, n, truncated,
	    a->list_obj, list_done, a, &err) == -1)
		areq_fail(a, &err);
}
