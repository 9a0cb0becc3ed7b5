/* api_exec.c - sandbox-api streams: exec as Server-Sent Events, file reads as bytes, backpressure and cancel (SPEC §5). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "api_int.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_sse.h"
#include "sbx_wire.h"

/* Bytes queued towards a client above which the producer is paused. */
#define STREAM_HIGH_WATER (256 * 1024)
/* A stream's connection timeout: the exec timeout belongs to the broker;
 * heartbeats keep writing, backpressure pauses the producer meanwhile. */
#define STREAM_TIMEOUT_S (24 * 3600)

/* ------------------------------------------------------------------ */
/* Streams                                                             */

static void
stream_drained(struct evhttp_connection *conn, void *arg)
{
	struct areq *a = arg;

	(void)conn;
	if (a->paused && a->op != NULL) {
		a->paused = 0;
		sbx_op_resume(a->op);
	}
}

/* Sends what is in a->chunk; pauses the producer above the high-water mark. */
static void
stream_flush(struct areq *a)
{
	struct bufferevent *bev;

	if (a->req == NULL || evbuffer_get_length(a->chunk) == 0)
		return;
	evhttp_send_reply_chunk_with_cb(a->req, a->chunk, stream_drained, a);
	bev = evhttp_connection_get_bufferevent(a->conn);
	if (!a->paused && a->op != NULL && bev != NULL &&
	    evbuffer_get_length(bufferevent_get_output(bev)) >
	    STREAM_HIGH_WATER) {
		a->paused = 1;
		sbx_op_pause(a->op);
	}
}

/* The client went away mid-stream: cancel the producer; for an exec the
 * broker connection closes and the broker kills the process tree. */
static void
stream_closed(struct evhttp_connection *conn, void *arg)
{
	struct areq *a = arg;
	struct sbx_op *op = a->op;

	(void)conn;
	a->op = NULL;
	sbx_op_cancel(op);
	/* The request was detached from its connection: ending it frees it. */
	if (a->req != NULL)
		evhttp_send_reply_end(a->req);
	a->req = NULL;
	a->conn = NULL;
	areq_finish(a, 200, SBX_E_CANCELLED);
}

static void ping_fire(evutil_socket_t, short, void *);

static void
ping_arm(struct areq *a)
{
	struct timeval tv;

	if (a->ping == NULL)
		return;
	tv.tv_sec = a->s->cfg->heartbeat / 1000;
	tv.tv_usec = (a->s->cfg->heartbeat % 1000) * 1000;
	evtimer_add(a->ping, &tv);
}

static void
ping_fire(evutil_socket_t fd, short what, void *arg)
{
	struct areq *a = arg;

	(void)fd;
	(void)what;
	if (a->req == NULL)
		return;
	sbx_sse_comment(a->chunk, SBX_SSE_PING);
	stream_flush(a);
	ping_arm(a);
}

static int
stream_begin(struct areq *a, const char *ctype)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(a->req);
	struct timeval tv = { STREAM_TIMEOUT_S, 0 };

	if (a->chunk == NULL && (a->chunk = evbuffer_new()) == NULL)
		return -1;
	if (a->sse && (a->ping = evtimer_new(a->s->base, ping_fire, a)) == NULL)
		return -1;
	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "Cache-Control", "no-cache");
	evhttp_add_header(h, "X-Accel-Buffering", "no");
	a->conn = evhttp_request_get_connection(a->req);
	evhttp_connection_set_timeout_tv(a->conn, &tv);
	sbx_gate_watch(a->s->gate, a->conn, stream_closed, a);
	evhttp_send_reply_start(a->req, 200, "OK");
	a->streaming = 1;
	if (a->sse) {
		a->sse_counted = 1;
		api_metrics_sse(&a->s->metrics, 1);
	}
	ping_arm(a);
	return 0;
}

/* Ends a started stream normally and finishes a. */
static void
stream_end(struct areq *a, const char *outcome)
{
	struct timeval tv;

	if (a->req != NULL) {
		stream_flush(a);
		tv.tv_sec = (a->s->cfg->request_timeout + 999) / 1000;
		tv.tv_usec = 0;
		sbx_gate_watch(a->s->gate, a->conn, NULL, NULL);
		evhttp_connection_set_timeout_tv(a->conn, &tv);
		evhttp_send_reply_end(a->req);
		a->req = NULL;
	}
	areq_finish(a, 200, outcome);
}

/* Ends a started byte stream abnormally: the client sees a cut chunked body. */
static void
stream_abort(struct areq *a, const char *outcome)
{
	if (a->req != NULL) {
		sbx_gate_watch(a->s->gate, a->conn, NULL, NULL);
		evhttp_connection_free(a->conn);   /* frees a->req too */
		a->req = NULL;
	}
	areq_finish(a, 200, outcome);
}

/* ------------------------------------------------------------------ */
/* Exec -> SSE                                                         */

/* Maps the NDJSON lines in line (emptied) to SSE events in a->chunk. */
static int
sse_emit(struct areq *a, struct evbuffer *line)
{
	struct sbx_err err;
	size_t len = evbuffer_get_length(line);
	const char *p;

	sbx_err_clear(&err);
	if (len == 0)
		return -1;
	p = (const char *)evbuffer_pullup(line, -1);
	if (p == NULL || sbx_sse_from_own_ndjson(a->chunk, ++a->sse_id, p,
	    len, &err) == -1) {
		log_error("cannot map an exec event to SSE", "code", err.code,
		    NULL);
		evbuffer_drain(line, len);
		return -1;
	}
	evbuffer_drain(line, len);
	ping_arm(a);    /* the heartbeat is for silence only */
	return 0;
}

static void
exec_start(void *arg, const char *exec_id)
{
	struct areq *a = arg;
	struct evbuffer *line = evbuffer_new();

	if (line == NULL || stream_begin(a, SBX_CT_SSE) == -1) {
		if (line != NULL)
			evbuffer_free(line);
		/* Out of memory before anything was sent. */
		sbx_op_cancel(a->op);
		a->op = NULL;
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	log_debug("exec started", "npc", a->npc.name, "exec_id", exec_id, NULL);
	a->exec_started = 1;
	a->exec_started_ms = api_mono_ms();
	api_metrics_exec_started(&a->s->metrics);
	if (sbx_ndjson_start(line, exec_id, a->s->now_ms()) == 0)
		sse_emit(a, line);
	evbuffer_free(line);
	stream_flush(a);
}

static void
exec_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct areq *a = arg;
	struct evbuffer *line;
	size_t n;

	/* Output before start breaks the vtable's order; keep the SSE
	 * stream well-formed anyway. */
	if (!a->streaming && a->req != NULL)
		exec_start(a, "");
	if (!a->streaming || a->req == NULL || (line = evbuffer_new()) == NULL)
		return;
	api_metrics_stream_bytes(&a->s->metrics, stream, len);
	while (len > 0) {
		n = len < SBX_NDJSON_MAX_CHUNK ? len : SBX_NDJSON_MAX_CHUNK;
		if (sbx_ndjson_output(line, stream, buf, n) == 0)
			sse_emit(a, line);
		buf += n;
		len -= n;
	}
	evbuffer_free(line);
	stream_flush(a);
}

static void
exec_exit(void *arg, const struct sbx_exit *ex)
{
	struct areq *a = arg;
	struct evbuffer *line;

	a->op = NULL;
	if (!a->streaming) {
		areq_fail_code(a, SBX_E_INTERNAL, "The exec ended before it "
		    "started.");
		return;
	}
	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_exit(line, ex->code, ex->signal,
		    ex->duration_ms, ex->truncated) == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	stream_end(a, "ok");
}

static void
exec_error(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;
	struct evbuffer *line;

	a->op = NULL;
	if (!a->streaming) {
		areq_fail_broker(a, err);
		return;
	}
	api_metrics_broker_error(&a->s->metrics, err->code);
	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_error(line, err->code, err->message[0] != '\0' ?
		    err->message : err->code) == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	stream_end(a, err->code);
}

void
api_stream_shutdown(struct areq *a)
{
	struct evbuffer *line;

	if (!a->sse) {
		stream_abort(a, SBX_E_SHUTTING_DOWN);
		return;
	}
	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_error(line, SBX_E_SHUTTING_DOWN, "The api is "
		    "shutting down; the exec was cancelled.") == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	stream_end(a, SBX_E_SHUTTING_DOWN);
}

int
api_exec_parse(struct areq *a, struct sbx_exec_req *er, const char ***argvp,
    const char ***envp)
{
	struct sbx_wire_exec x;
	struct sbx_err err;

	sbx_err_clear(&err);
	memset(er, 0, sizeof(*er));
	*argvp = *envp = NULL;
	/* The broker's body rules are the contract (sbx_wire.h). */
	if (sbx_wire_fields_check(a->body, sbx_wire_exec_fields, &err) == -1 ||
	    sbx_wire_exec_decode(a->body, &x, &err) == -1) {
		areq_fail(a, &err);
		return -1;
	}
	/* Concurrent execs of this principal (streams and resource execs). */
	if (a->lim != NULL && a->lim->execs >= (unsigned)a->s->cfg->max_execs) {
		sbx_wire_exec_free(&x);
		api_metrics_rejected(&a->s->metrics, 1);
		areq_fail_code(a, SBX_E_TOO_MANY, "You already run %lld execs; "
		    "wait for one to end.", a->s->cfg->max_execs);
		return -1;
	}
	/* argv and env are the caller's to free; stdin is a's (wiped when a
	 * is freed). */
	*er = x.req;
	*argvp = x.argv;
	*envp = x.env;
	a->stdin_data = x.stdin_buf;
	a->stdin_len = x.req.stdin_len;
	return 0;
}

void
api_h_exec(struct areq *a)
{
	struct sbx_exec_req er;
	struct sbx_sink sink;
	struct sbx_err err;
	const char **argv = NULL, **env = NULL;

	sbx_err_clear(&err);
	if (api_exec_parse(a, &er, &argv, &env) == -1)
		return;
	if (a->lim != NULL) {
		a->lim->execs++;
		a->exec_counted = 1;
	}
	a->sse = 1;
	memset(&sink, 0, sizeof(sink));
	sink.start = exec_start;
	sink.output = exec_output;
	sink.exit = exec_exit;
	sink.error = exec_error;
	sink.arg = a;
	a->op = a->s->driver->ops->exec(a->s->driver, a->npc.sandbox_id, &er,
	    &sink, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
	free(argv);
	free(env);
}

/* ------------------------------------------------------------------ */
/* File read -> bytes                                                  */

static void
read_start(void *arg, const char *exec_id)
{
	struct areq *a = arg;

	(void)exec_id;
	if (stream_begin(a, SBX_CT_OCTET) == -1) {
		sbx_op_cancel(a->op);
		a->op = NULL;
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
	}
}

static void
read_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct areq *a = arg;

	(void)stream;
	/* A driver may skip start for reads (the engine driver does). */
	if (!a->streaming && a->req != NULL &&
	    stream_begin(a, SBX_CT_OCTET) == -1) {
		sbx_op_cancel(a->op);
		a->op = NULL;
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	if (a->req == NULL)
		return;
	api_metrics_stream_bytes(&a->s->metrics, 0, len);
	evbuffer_add(a->chunk, buf, len);
	stream_flush(a);
}

static void
read_exit(void *arg, const struct sbx_exit *ex)
{
	struct areq *a = arg;

	(void)ex;
	a->op = NULL;
	if (!a->streaming && stream_begin(a, SBX_CT_OCTET) == -1) {
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	stream_end(a, "ok");
}

static void
read_error(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	a->op = NULL;
	if (!a->streaming) {
		areq_fail_broker(a, err);
		return;
	}
	api_metrics_broker_error(&a->s->metrics, err->code);
	log_warn("file read failed mid-stream", "npc", a->npc.name, "code",
	    err->code, NULL);
	stream_abort(a, err->code);
}

void
api_h_read(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct sbx_sink sink;
	struct sbx_err err;

	sbx_err_clear(&err);
	if (sbx_query_path(evhttp_uri_get_query(uri), SBX_QUERY_PATH, &a->path,
	    NULL, &err) == -1) {
		areq_fail(a, &err);
		return;
	}
	memset(&sink, 0, sizeof(sink));
	sink.start = read_start;
	sink.output = read_output;
	sink.exit = read_exit;
	sink.error = read_error;
	sink.arg = a;
	if (api_fileop_admit(a) == -1)
		return;
	a->op = a->s->driver->ops->read(a->s->driver, a->npc.sandbox_id,
	    a->path, &sink, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}
