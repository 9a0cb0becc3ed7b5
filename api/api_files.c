/* api_files.c - a file write's body streamed from the client to the broker as it arrives (a chunked one through a spool file: adr/0056), the client watched meanwhile; a list page's reply in slices (adr/0030). */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "api_int.h"
#include "sbx_call.h"
#include "sbx_gate.h"
#include "sbx_httpd.h"
#include "sbx_list_out.h"
#include "sbx_log.h"
#include "sbx_proto.h"

/*
 * A chunked body (adr/0056): its length, which the broker's write needs
 * first (the helper's --size, adr/0018), is known only at its end. The
 * body goes to an unnamed file in state_dir as it arrives (the gate reads
 * the client only as fast as the file takes it, a window at a time), then
 * from that file to the broker a window at a time: memory per write stays
 * within two windows however big the body, and the file-op slot was taken
 * before the first byte was read.
 */
struct api_spool {
	struct areq *a;
	int fd;
	int werr;                   /* errno of a failed spool write, or 0 */
	int filling;
	size_t window;
	uint64_t left;              /* bytes of the file not yet in src */
	struct evbuffer *src;       /* the file towards the driver */
	struct evbuffer_cb_entry *in_ent, *out_ent;
	struct event *go;           /* the body ended: on from the loop */
	struct event *refill;       /* the driver took bytes: refill from the loop */
	sbx_done_cb done;
};

static void
spool_free(struct api_spool *sp)
{
	if (sp == NULL)
		return;
	if (sp->in_ent != NULL && sp->a->gbody != NULL)
		evbuffer_remove_cb_entry(sbx_gate_body_buffer(sp->a->gbody),
		    sp->in_ent);
	if (sp->go != NULL)
		event_free(sp->go);
	if (sp->refill != NULL)
		event_free(sp->refill);
	if (sp->src != NULL) {
		if (sp->out_ent != NULL)
			evbuffer_remove_cb_entry(sp->src, sp->out_ent);
		evbuffer_free(sp->src);
	}
	if (sp->fd >= 0)
		close(sp->fd);
	free(sp);
}

static void
spool_end(struct areq *a)
{
	/* The driver's op was cancelled before this (areq_finish). */
	spool_free(a->spool);
	a->spool = NULL;
}

/* Body bytes arrived: into the file, so the gate reads on. */
static void
spool_in(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct api_spool *sp = arg;
	int n = 0;

	if (info->n_added == 0 || sp->filling)
		return;
	sp->filling = 1;
	while (evbuffer_get_length(buf) > 0) {
		if (sp->werr != 0 || (n = evbuffer_write(buf, sp->fd)) <= 0) {
			if (sp->werr == 0)
				sp->werr = n < 0 ? errno : EIO;
			evbuffer_drain(buf, evbuffer_get_length(buf));
		}
	}
	sp->filling = 0;
}

/* The file's next bytes into src, up to a window. */
static void
spool_fill(struct api_spool *sp)
{
	struct evbuffer *buf = sp->src;
	size_t have;
	int n = 0;

	if (sp->filling)
		return;
	sp->filling = 1;
	while (sp->left > 0 && (have = evbuffer_get_length(buf)) < sp->window) {
		size_t want = sp->window - have;

		if ((uint64_t)want > sp->left)
			want = (size_t)sp->left;
		if ((n = evbuffer_read(buf, sp->fd, (int)want)) <= 0) {
			/* The file shrank under us: the broker's write gets
			 * fewer bytes than announced and fails (cancelled). */
			sp->left = 0;
			break;
		}
		sp->left -= (uint64_t)n;
	}
	sp->filling = 0;
}

static void
spool_refill(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	spool_fill(arg);
}

/* The driver took bytes. Not refilled here: it is inside its own move of
 * src's bytes, and bytes added now would overtake the ones it holds. */
static void
spool_out(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct api_spool *sp = arg;

	(void)buf;
	if (info->n_deleted > 0 && sp->left > 0)
		event_active(sp->refill, EV_TIMEOUT, 0);
}

/* The body ended (whole or refused), from the loop: the write goes on from
 * the file, or the request fails. */
static void
spool_go(evutil_socket_t fd, short what, void *arg)
{
	struct api_spool *sp = arg;
	struct areq *a = sp->a;
	enum sbx_gate_verdict v = sbx_gate_body_failed(a->gbody);
	struct sbx_err err;

	(void)fd;
	(void)what;
	if (v != SBX_GATE_PASS) {
		sbx_gate_refusal(v, &err);
		if (v == SBX_GATE_TOO_LARGE)
			sbx_err_set(&err, SBX_E_TOO_LARGE, SBX_MSG_FILE_TOO_LARGE,
			    a->s->cfg->file_size_max);
		areq_fail(a, &err);
		return;
	}
	if (sp->werr != 0) {
		log_warn("a chunked upload could not be spooled", "error",
		    strerror(sp->werr), NULL);
		sbx_err_set(&err, SBX_E_INTERNAL, "The api could not hold your "
		    "upload for the sandbox (its disk may be full); try again "
		    "later or send the file with a Content-Length.");
		areq_fail(a, &err);
		return;
	}
	a->wsize = sbx_gate_body_length(a->gbody);
	sp->left = a->wsize;
	if (lseek(sp->fd, 0, SEEK_SET) != 0 || (sp->src = evbuffer_new()) == NULL) {
		sbx_err_set(&err, SBX_E_INTERNAL, "The api could not read your "
		    "upload back; try again.");
		areq_fail(a, &err);
		return;
	}
	if (!sbx_call_supports(a->s->driver, SBX_CALL_WRITE_STREAM))
		sp->window = a->wsize > 0 ? (size_t)a->wsize : 1;
	spool_fill(sp);
	if ((sp->out_ent = evbuffer_add_cb(sp->src, spool_out, sp)) == NULL) {
		sbx_err_oom(&err);
		areq_fail(a, &err);
		return;
	}
	sbx_err_clear(&err);
	a->op = sbx_call_write_stream(a->s->driver, a->npc.sandbox_id,
	    a->path, a->mode, sp->src, a->wsize, sp->done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

/* From the gate's read: on from the loop (the reply may close the
 * connection the gate is reading). */
static void
spool_ended(struct sbx_gate_body *b, void *arg)
{
	struct api_spool *sp = arg;

	(void)b;
	event_active(sp->go, EV_TIMEOUT, 0);
}

int
api_spool_open(const char *dir)
{
	char path[4096];
	int fd;

	if ((fd = open(dir, O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600)) >= 0)
		return fd;
	/* A file system without O_TMPFILE: a named file, unlinked at once. */
	if (snprintf(path, sizeof(path), "%s/.upload-XXXXXX", dir) >=
	    (int)sizeof(path) || (fd = mkostemp(path, O_CLOEXEC)) < 0)
		return -1;
	unlink(path);
	return fd;
}

static int
write_spooled(struct areq *a, sbx_done_cb done, struct sbx_err *err)
{
	struct api_spool *sp;
	struct evbuffer *in = sbx_gate_body_buffer(a->gbody);
	struct evbuffer_cb_info added = { 0, 1, 0 };

	if ((sp = calloc(1, sizeof(*sp))) == NULL)
		return sbx_err_oom(err);
	sp->a = a;
	sp->done = done;
	sp->window = (size_t)a->s->cfg->file_write_buffer;
	if ((sp->fd = api_spool_open(a->s->cfg->state_dir)) < 0) {
		log_warn("cannot open a spool file", "dir", a->s->cfg->state_dir,
		    "error", strerror(errno), NULL);
		free(sp);
		return sbx_err_set(err, SBX_E_INTERNAL, "The api cannot take a "
		    "chunked upload now; send the file with a Content-Length.");
	}
	a->spool = sp;
	a->on_end = spool_end;
	if ((sp->go = event_new(a->s->base, -1, 0, spool_go, sp)) == NULL ||
	    (sp->refill = event_new(a->s->base, -1, 0, spool_refill, sp)) == NULL ||
	    (sp->in_ent = evbuffer_add_cb(in, spool_in, sp)) == NULL)
		return sbx_err_oom(err);
	sbx_gate_body_window(a->gbody, sp->window);
	sbx_gate_body_on_end(a->gbody, spool_ended, sp);
	/* What arrived with the head, and an end seen already. */
	spool_in(in, &added, sp);
	if (sbx_gate_body_complete(a->gbody) ||
	    sbx_gate_body_failed(a->gbody) != SBX_GATE_PASS)
		event_active(sp->go, EV_TIMEOUT, 0);
	/* The client leaving meanwhile finishes a (on_gone, 499). */
	areq_watch(a);
	sbx_gate_body_kick(a->gbody);
	return 0;
}

int
api_write_stream(struct areq *a, sbx_done_cb done, struct sbx_err *err)
{
	struct evbuffer *src = sbx_gate_body_buffer(a->gbody);

	if (sbx_gate_body_chunked(a->gbody))
		return write_spooled(a, done, err);

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
