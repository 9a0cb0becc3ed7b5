/* broker_files.c - file read, write and list of /work: admission, the client watched, bodies streamed to the driver; handlers that reach the request layer through broker_int.h only (SPEC §6, adr/0018, adr/0036). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <sodium.h>

#include "broker_int.h"
#include "sbx_call.h"
#include "sbx_gate.h"
#include "sbx_list_out.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_wire.h"

static void
read_start(void *arg, const char *exec_id)
{
	struct breq *b = arg;

	(void)exec_id;
	breq_stream_begin(b, SBX_CT_OCTET);
}

static void
read_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct breq *b = arg;

	(void)stream;
	/* A driver need not call start for a read (the engine driver does
	 * not): the first bytes start the reply. */
	if (!b->h.streaming && breq_stream_begin(b, SBX_CT_OCTET) == -1)
		return;
	evbuffer_add(b->h.chunk, buf, len);
	breq_stream_flush(b);
}

static void
read_exit(void *arg, const struct sbx_exit *ex)
{
	struct breq *b = arg;

	(void)ex;
	b->op = NULL;
	if (!b->h.streaming && breq_stream_begin(b, SBX_CT_OCTET) == -1)
		return;   /* the driver broke the contract: exit without start */
	breq_stream_end(b, "ok");
}

static void
read_error(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;

	b->op = NULL;
	if (!b->h.streaming) {
		breq_fail(b, err);
		return;
	}
	log_warn("file read failed mid-stream", "id", b->id, "code",
	    err->code, NULL);
	breq_stream_abort(b, err->code);
}

/*
 * A file operation may start: at most max_file_ops_per_sandbox of them run
 * at once per sandbox (429 too_many with Retry-After). Returns 0, or -1
 * with err.
 */
static int
fileop_admit(struct breq *b, struct sbx_err *err)
{
	if (b->sbx->fileops >= (unsigned long long)
	    b->s->cfg->max_file_ops_per_sandbox)
		return sbx_err_set(err, SBX_E_TOO_MANY, "Sandbox %s already runs "
		    "its maximum of %lld file operations; try again shortly.",
		    b->id, b->s->cfg->max_file_ops_per_sandbox);
	b->sbx->fileops++;
	b->holds_fileop = 1;
	return 0;
}

/* ?path= checked by sbx_query_path into b->path. */
static int
query_path(struct breq *b, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->h.req);

	return sbx_query_path(evhttp_uri_get_query(uri), SBX_QUERY_PATH,
	    &b->path, NULL, err);
}

/*
 * From dispatch on, a client that goes away ends its file operation (the
 * helper is killed), also before any reply byte (sbx_httpd_watch).
 */
int
h_read(struct breq *b, struct sbx_err *err)
{
	struct sbx_sink sink = { read_start, read_output, read_exit, read_error,
	    b, NULL };

	if (query_path(b, err) == -1)
		return -1;
	if ((b->h.chunk = evbuffer_new()) == NULL)
		return sbx_err_oom(err);
	if (fileop_admit(b, err) == -1)
		return -1;
	b->op = sbx_call_read(b->s->driver, b->id, b->path, &sink,
	    err);
	if (b->op == NULL)
		return -1;
	breq_watch(b);
	return 0;
}

static void
write_done(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	breq_reply_json(b, 200, sbx_wire_written_encode(b->path,
	    (int64_t)b->wsize), "ok");
}

/* b's detach hook (broker_int.h): a streamed write still under way (or
 * the call layer's gather of it) is cancelled, and a list reply still
 * being encoded (adr/0030) is freed. */
static void
files_detach(struct breq *b)
{
	if (b->gbody != NULL && b->op != NULL) { /* a write or its gather */
		sbx_op_cancel(b->op);
		b->op = NULL;
	}
	sbx_list_out_free(b->lout);
	b->lout = NULL;
}

/* The body streams from the gate to the driver (adr/0018): the broker holds
 * at most the gate's window of it, the driver WRITE_OUT_MAX. */
static int
write_streamed(struct breq *b, struct sbx_err *err)
{
	struct evbuffer *src = sbx_gate_body_buffer(b->gbody);

	b->wsize = sbx_gate_body_length(b->gbody);
	/* A driver without write_stream gets the whole body, gathered by
	 * the call layer (bounded by file_size_max as before adr/0018). */
	if (!sbx_call_supports(b->s->driver, SBX_CALL_WRITE_STREAM))
		sbx_gate_body_window(b->gbody, (size_t)b->wsize);
	b->op = sbx_call_write_stream(b->s->driver, b->id, b->path,
	    b->mode, src, b->wsize, write_done, b, err);
	if (b->op == NULL)
		return -1;
	breq_watch(b);
	sbx_gate_body_kick(b->gbody);
	return 0;
}

/* ?mode= octal permission bits into b->mode (0 when absent). */
static int
query_mode(struct breq *b, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->h.req);
	char *mode = NULL;
	int r;

	r = sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_MODE, &mode,
	    NULL, err);
	if (r != 1)
		return r;
	r = sbx_wire_mode_decode(mode, &b->mode, err);
	free(mode);
	return r;
}

/* The write itself, once the quota let it through. */
static int
write_go(struct breq *b, struct sbx_err *err)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(b->h.req);

	if (b->gbody != NULL)
		return write_streamed(b, err);
	/* Kept for the reply: the driver drains the body. */
	b->wsize = evbuffer_get_length(in);
	b->op = sbx_call_write(b->s->driver, b->id, b->path, b->mode,
	    in, write_done, b, err);
	if (b->op == NULL)
		return -1;
	breq_watch(b);
	return 0;
}

/* Bytes the write brings: its Content-Length, -1 for a chunked body
 * whose length is not known yet (then /work alone is judged). */
static int64_t
write_incoming(struct breq *b)
{
	if (b->gbody != NULL)
		return sbx_gate_body_chunked(b->gbody) &&
		    !sbx_gate_body_complete(b->gbody) ? -1 :
		    (int64_t)sbx_gate_body_length(b->gbody);
	return (int64_t)evbuffer_get_length(
	    evhttp_request_get_input_buffer(b->h.req));
}

static void write_counted(void *arg, const struct sbx_err *err,
    const struct sbx_status *st);

/*
 * The soft quota (adr/0057): 0 the write may go on, 1 /work is being
 * counted first (write_counted goes on), -1 with err: quota_exceeded
 * (507), nothing written. counted: a walk just ended; a figure still
 * missing then (a sandbox not running, a driver that cannot count) lets
 * the write go on: the write itself then answers.
 */
static int
write_judge(struct breq *b, int counted, struct sbx_err *err)
{
	int64_t n = write_incoming(b), used;

	switch (broker_quota_write(b->s->quota, b->id, sbx_mono_ms(), n,
	    &used)) {
	case BQ_ALLOW:
		return 0;
	case BQ_REFUSE:
		return sbx_err_set(err, SBX_E_QUOTA, "/work holds %lld bytes; "
		    "writing %lld more would pass its quota of %lld bytes. Remove "
		    "files from /work, then try again.", (long long)used,
		    (long long)(n > 0 ? n : 0),
		    (long long)broker_quota_bytes(b->s->quota));
	case BQ_COUNT:
		break;
	}
	if (counted || !sbx_call_supports(b->s->driver, SBX_CALL_STATUS_USAGE))
		return 0;
	b->op = sbx_call_status_usage(b->s->driver, b->id, write_counted, b,
	    err);
	if (b->op == NULL)
		return -1;
	breq_watch(b);
	if (b->gbody != NULL)
		sbx_gate_body_kick(b->gbody);
	return 1;
}

static void
write_counted(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct breq *b = arg;
	struct sbx_err e;

	b->op = NULL;
	if (err == NULL && st->usage.present)
		broker_quota_counted(b->s->quota, b->id, sbx_mono_ms(),
		    st->usage.bytes);
	else if (err != NULL)
		log_warn("work quota: /work not counted, the write goes on",
		    "id", b->id, "code", err->code, NULL);
	sbx_err_clear(&e);
	if (write_judge(b, 1, &e) == -1 || write_go(b, &e) == -1)
		breq_fail(b, &e);
}

int
h_write(struct breq *b, struct sbx_err *err)
{
	int r;

	if (query_path(b, err) == -1)
		return -1;
	if (strcmp(b->path, SBX_WORK_DIR) == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A file path under "
		    "/work is needed, not /work itself.");
	if (query_mode(b, err) == -1 || fileop_admit(b, err) == -1)
		return -1;
	if (b->gbody != NULL)
		b->detach = files_detach;
	if ((r = write_judge(b, 0, err)) != 0)
		return r < 0 ? -1 : 0;
	return write_go(b, err);
}

/* A page's reply is encoded in slices, one per turn of the event loop,
 * then sent whole (adr/0030, sbx_list_out.h). */
static void
list_out_done(void *arg, const struct sbx_err *err, struct evbuffer *text,
    int truncated, const char *cursor)
{
	struct breq *b = arg;

	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if (!b->list_obj && truncated) {
		/* The array of v1: its first page only; the headers say so. */
		sbx_httpd_header(&b->h, "Sbx-List-Truncated", "true");
		sbx_httpd_header(&b->h, "Sbx-List-Cursor", cursor);
	}
	breq_reply_json_text(b, 200, text, "ok");
}

static void
list_done(void *arg, const struct sbx_err *err, const struct sbx_dirent *ents,
    size_t n, int truncated)
{
	struct breq *b = arg;
	struct sbx_err e;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	/* b->lout is freed with b (files_detach) */
	if (sbx_list_out_start(&b->lout, b->s->base, ents, n, truncated,
	    b->list_obj, list_out_done, b, &e) == -1)
		breq_fail(b, &e);
}

/* ?cursor=: absent (0), empty or a cursor of list_done (1; b->after set),
 * or -1 with err (400). */
static int
list_cursor(struct breq *b, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->h.req);
	char name[SBX_PATH_SEGMENT_MAX + 1];
	char *cur = NULL;
	size_t len = 0;
	int r;

	r = sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_CURSOR, &cur,
	    &len, err);
	if (r != 1)
		return r;
	b->list_obj = 1;
	r = sbx_wire_cursor_decode(cur, len, name, err);
	free(cur);
	if (r == -1)
		return -1;
	if (name[0] != '\0' && (b->after = strdup(name)) == NULL)
		return sbx_err_oom(err);
	return 1;
}

int
h_list(struct breq *b, struct sbx_err *err)
{
	struct sbx_list_page page;

	if (query_path(b, err) == -1 || list_cursor(b, err) == -1 ||
	    fileop_admit(b, err) == -1)
		return -1;
	b->detach = files_detach;
	page.after = b->after;
	page.limit = (size_t)b->s->cfg->list_max_entries;
	b->op = sbx_call_list(b->s->driver, b->id, b->path, &page,
	    list_done, b, err);
	if (b->op == NULL)
		return -1;
	breq_watch(b);
	return 0;
}
