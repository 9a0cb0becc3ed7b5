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
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_sse.h"
#include "sbx_time.h"
#include "sbx_wire.h"

/* Bytes queued towards a client above which the producer is paused. */
#define STREAM_HIGH_WATER ((size_t)256 * 1024)

/* ------------------------------------------------------------------ */
/* Exec -> SSE                                                         */

/* Maps the NDJSON lines in line (emptied) to SSE events in a->h.chunk. */
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
	if (p == NULL || sbx_sse_from_own_ndjson(a->h.chunk, ++a->sse_id, p,
	    len, &err) == -1) {
		log_error("cannot map an exec event to SSE", "code", err.code,
		    NULL);
		evbuffer_drain(line, len);
		return -1;
	}
	evbuffer_drain(line, len);
	areq_ping_arm(a);    /* the heartbeat is for silence only */
	return 0;
}

/* The last event of a started exec stream: an SSE error event (code,
 * message), then the stream ends with code as its outcome. */
static void
sse_end_error(struct areq *a, const char *code, const char *message)
{
	struct evbuffer *line;

	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_error(line, code, message) == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	areq_stream_end(a, code);
}

/* The exec started: the SSE head and its start event. Returns 0, or -1
 * when a has ended (the client went, or out of memory). */
static int
exec_begin(struct areq *a, const char *exec_id)
{
	struct evbuffer *line;

	if (areq_stream_begin(a, SBX_CT_SSE, STREAM_HIGH_WATER) == -1)
		return -1;
	log_debug("exec started", "npc", a->npc.name, "exec_id", exec_id, NULL);
	a->exec_started = 1;
	a->exec_started_ms = sbx_mono_ms();
	api_metrics_exec_started(&a->s->metrics);
	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_start(line, exec_id, a->s->now_ms()) == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	areq_stream_flush(a);
	return 0;
}

static void
exec_start(void *arg, const char *exec_id)
{
	exec_begin(arg, exec_id);
}

static void
exec_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct areq *a = arg;
	struct evbuffer *line;
	size_t n;

	/* Output before start breaks the vtable's order; keep the SSE
	 * stream well-formed anyway. */
	if (!a->h.streaming && a->h.req != NULL && exec_begin(a, "") == -1)
		return;
	if (!a->h.streaming || a->h.req == NULL || (line = evbuffer_new()) == NULL)
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
	areq_stream_flush(a);
}

/* An output event as the broker sent it (sbx_call_exec_lines, adr/0028):
 * copied into the SSE event, its data neither decoded nor re-encoded. */
static void
exec_output_line(void *arg, int stream, const char *line, size_t len,
    size_t nbytes)
{
	struct areq *a = arg;
	struct sbx_err err;

	if (!a->h.streaming && a->h.req != NULL && exec_begin(a, "") == -1)
		return;
	if (!a->h.streaming || a->h.req == NULL)
		return;
	api_metrics_stream_bytes(&a->s->metrics, stream, nbytes);
	sbx_err_clear(&err);
	if (sbx_sse_from_output_line(a->h.chunk, ++a->sse_id, line, len,
	    &err) == -1) {
		/* The driver checked it; refused again here, the stream ends
		 * as one from a broker that sent garbage. */
		log_warn("refused an exec event from the broker", "error",
		    err.message, NULL);
		a->sse_id--;
		sbx_op_cancel(a->op);
		a->op = NULL;
		api_metrics_broker_error(&a->s->metrics,
		    SBX_E_BROKER_UNAVAILABLE);
		sse_end_error(a, SBX_E_BROKER_UNAVAILABLE, "The sandbox "
		    "broker's exec stream broke off or was malformed.");
		return;
	}
	areq_ping_arm(a);
	areq_stream_flush(a);
}

static void
exec_exit(void *arg, const struct sbx_exit *ex)
{
	struct areq *a = arg;
	struct evbuffer *line;

	a->op = NULL;
	if (!a->h.streaming) {
		areq_fail_code(a, SBX_E_INTERNAL, "The exec ended before it "
		    "started.");
		return;
	}
	if ((line = evbuffer_new()) != NULL) {
		/* /work crossed its quota: the owner is told (adr/0057) */
		if (ex->work_quota > 0 && sbx_ndjson_quota(line, ex->work_bytes,
		    ex->work_quota) == 0)
			sse_emit(a, line);
		if (sbx_ndjson_exit(line, ex->code, ex->signal,
		    ex->duration_ms, ex->truncated) == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	areq_stream_end(a, "ok");
}

/* The head of a driver error callback: the op is over; before the stream
 * started the request fails with err (1: nothing left to do); mid-stream
 * the broker error is counted (0: the caller ends its stream). */
static int
op_failed(struct areq *a, const struct sbx_err *err)
{
	a->op = NULL;
	if (!a->h.streaming) {
		areq_fail_broker(a, err);
		return 1;
	}
	api_metrics_broker_error(&a->s->metrics, err->code);
	return 0;
}

static void
exec_error(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	if (op_failed(a, err))
		return;
	sse_end_error(a, err->code, err->message[0] != '\0' ? err->message :
	    err->code);
}

/* on_shutdown of an exec stream: a last SSE error event shutting_down,
 * then the stream ends normally. */
static void
exec_shutdown(struct areq *a)
{
	sse_end_error(a, SBX_E_SHUTTING_DOWN, "The api is shutting down; the "
	    "exec was cancelled.");
}

int
api_exec_parse(struct areq *a, struct sbx_exec_req *er, const char ***argvp,
    const char ***envp, struct sbx_err *err)
{
	struct sbx_wire_exec x;

	memset(er, 0, sizeof(*er));
	*argvp = *envp = NULL;
	/* The broker's body rules are the contract (sbx_wire.h). */
	if (sbx_wire_fields_check(a->body, sbx_wire_exec_fields, err) == -1 ||
	    sbx_wire_exec_decode(a->body, &x, err) == -1)
		return -1;
	/* Concurrent execs of this principal (streams and resource execs). */
	if (a->lim != NULL && a->lim->execs >= (unsigned)a->s->cfg->max_execs) {
		sbx_wire_exec_free(&x);
		api_metrics_rejected(&a->s->metrics, 1);
		sbx_err_set(err, SBX_E_TOO_MANY, "You already run %lld execs; "
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

int
api_h_exec(struct areq *a, struct sbx_err *err)
{
	struct sbx_exec_req er;
	struct sbx_sink sink;
	const char **argv = NULL, **env = NULL;

	if (api_exec_parse(a, &er, &argv, &env, err) == -1)
		return -1;
	if (a->lim != NULL) {
		a->lim->execs++;
		a->exec_counted = 1;
	}
	a->sse = 1;
	a->on_shutdown = exec_shutdown;
	memset(&sink, 0, sizeof(sink));
	sink.start = exec_start;
	sink.output = exec_output;
	sink.exit = exec_exit;
	sink.error = exec_error;
	sink.arg = a;
	a->op = sbx_call_exec_lines(a->s->driver, a->npc.sandbox_id, &er,
	    &sink, exec_output_line, err);
	free(argv);
	free(env);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

/* ------------------------------------------------------------------ */
/* File read -> bytes                                                  */

/* A driver may skip start for reads (the engine driver does): the head
 * goes with the first bytes or the end. Returns 0, or -1 when a ended. */
static int
read_begin(struct areq *a)
{
	if (a->h.streaming || a->h.req == NULL)
		return 0;
	return areq_stream_begin(a, SBX_CT_OCTET, STREAM_HIGH_WATER);
}

static void
read_start(void *arg, const char *exec_id)
{
	(void)exec_id;
	read_begin(arg);
}

static void
read_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct areq *a = arg;

	(void)stream;
	areq_stream_bytes(a, buf, len, STREAM_HIGH_WATER);
}

static void
read_exit(void *arg, const struct sbx_exit *ex)
{
	struct areq *a = arg;

	(void)ex;
	a->op = NULL;
	if (read_begin(a) == -1)
		return;
	areq_stream_end(a, "ok");
}

static void
read_error(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	if (op_failed(a, err))
		return;
	log_warn("file read failed mid-stream", "npc", a->npc.name, "code",
	    err->code, NULL);
	areq_stream_abort(a, err->code);
}

int
api_h_read(struct areq *a, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	const struct sbx_sink sink = { .start = read_start,
	    .output = read_output, .exit = read_exit, .error = read_error,
	    .arg = a };

	if (sbx_query_path(evhttp_uri_get_query(uri), SBX_QUERY_PATH, &a->path,
	    NULL, err) == -1 || api_fileop_admit(a, err) == -1)
		return -1;
	a->op = sbx_call_read(a->s->driver, a->npc.sandbox_id,
	    a->path, &sink, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}
