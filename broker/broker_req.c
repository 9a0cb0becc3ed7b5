/* broker_req.c - the life of one broker request: dispatch (the checks every request passes, in order), the one way out (reply, fail, done), streams over the HTTP core, and the exec's NDJSON stream (adr/0008, adr/0022, SPEC §5). */
#include <inttypes.h>
#include <stdarg.h>
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
#include "broker_metrics.h"
#include "broker_state.h"
#include "sbx_gate.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_wire.h"

/* ------------------------------------------------------------------ */
/* The one way out of every request                                    */

static void
breq_free(struct breq *b)
{
	free(b->egress_allow);
	json_decref(b->body);
	sbx_wire_exec_free(&b->x);
	free(b->path);
	free(b->after);
	sbx_httpd_req_clear(&b->h);
	broker_files_detach(b);
	sbx_gate_body_free(b->gbody);
	if (b->job_free != NULL)
		b->job_free(b->job_arg);
	free(b);
}

/*
 * Ends b: audit, last_used_at, metrics, log, queue advance, free. The reply
 * itself has been sent by the caller (status is what was sent).
 */
void
breq_done(struct breq *b, int status, const char *outcome)
{
	struct broker_server *s = b->s;
	struct bsbx *x = b->sbx;
	struct sbx_err err;
	int64_t ms = sbx_mono_ms() - b->t0_mono;
	char st[16], dur[32];

	sbx_err_clear(&err);
	/*
	 * Every authenticated request is audited; strangers get no row. Each
	 * one naming a sandbox is use (last_used_at, which the reaper reads),
	 * except a status read: polling must not keep a sandbox alive
	 * (adr/0006-idle-reaper.md). Internal jobs audit themselves.
	 */
	if (b->authed && !b->internal &&
	    broker_state_request_done(s->state, b->ts_ms, b->name, b->id,
	    outcome, ms, strcmp(b->name, "status") != 0, sbx_wall_ms(),
	    &err) == -1)
		log_error("audit write failed", "error", err.message, NULL);
	if (!b->internal)
		broker_metrics_request(s->metrics, b->name, status, ms);
	if (b->exec_counted)
		broker_metrics_exec_finished(s->metrics,
		    sbx_mono_ms() - b->exec_t0);
	snprintf(st, sizeof(st), "%d", status);
	snprintf(dur, sizeof(dur), "%" PRId64, ms);
	if (!b->internal)
		log_info("request", "route", b->name, "id", b->id, "status", st,
		    "outcome", outcome, "ms", dur, NULL);
	TAILQ_REMOVE(&s->inflight, b, link);
	s->ninflight--;
	if (b->holds_new)
		s->pending_new--;
	if (x != NULL) {
		if (b->holds_exec)
			x->execs--;
		if (b->holds_fileop)
			x->fileops--;
		if (b->queued)
			TAILQ_REMOVE(&x->queue, b, qlink);
		if (b->parked)
			TAILQ_REMOVE(&x->parked, b, qlink);
		if (x->blocker == b) {
			x->blocker = NULL;
			x->refs++;
			bsbx_unpark(s, x);
			x->refs--;
		}
		if (x->running == b) {
			x->running = NULL;
			bsbx_kick(s, x);
		}
	}
	breq_free(b);
	bsbx_put(x);
	if (s->draining && s->ninflight == 0)
		sbx_httpd_drain_poke(&s->drain);
}

/* Reply flags of b: a draining broker closes every connection it answers;
 * a streamed body that stopped coming (504) ends its connection
 * (adr/0018); one not read to its end otherwise is read and dropped by the
 * gate after the reply, so the client can finish sending and read it. */
static unsigned
reply_flags(const struct breq *b, int status)
{
	if (b->s->draining || (b->gbody != NULL && status == 504 &&
	    !sbx_gate_body_complete(b->gbody)))
		return SBX_HTTPD_CLOSE;
	return 0;
}

void
breq_reply_json(struct breq *b, int status, json_t *obj, const char *outcome)
{
	int sent = sbx_httpd_reply_json(&b->h, status, obj,
	    reply_flags(b, status));

	if (sent == 500 && status != 500) {
		status = 500;
		outcome = SBX_E_INTERNAL;
	}
	breq_done(b, status, outcome);
}

void
breq_reply_json_text(struct breq *b, int status, struct evbuffer *text,
    const char *outcome)
{
	int sent = sbx_httpd_reply_json_text(&b->h, status, text,
	    reply_flags(b, status));

	breq_done(b, sent != 0 ? sent : status, outcome);
}

int
broker_is_runtime_code(const char *code)
{
	return strcmp(code, SBX_E_RUNTIME) == 0 ||
	    strcmp(code, SBX_E_RUNTIME_UNAVAILABLE) == 0;
}

/* Errors become HTTP statuses in the core's one table (sbx_httpd.c). */
void
breq_fail(struct breq *b, const struct sbx_err *err)
{
	struct sbx_err e;
	int status;

	if (err != NULL && sbx_err_is_set(err))
		e = *err;
	else
		sbx_err_set(&e, SBX_E_INTERNAL, SBX_MSG_INTERNAL);
	if (broker_is_runtime_code(e.code))
		broker_metrics_runtime_error(b->s->metrics, e.code);
	status = sbx_err_http_status(&e);
	sbx_httpd_reply_error(&b->h, &e, reply_flags(b, status));
	breq_done(b, status, e.code);
}

void
breq_fail_code(struct breq *b, const char *code, const char *fmt, ...)
{
	struct sbx_err err;
	va_list ap;

	snprintf(err.code, sizeof(err.code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	breq_fail(b, &err);
}

void
breq_run(struct breq *b, handler_fn fn)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	if (fn(b, &err) == -1)
		breq_fail(b, &err);
}

/* ------------------------------------------------------------------ */
/* Streams (exec NDJSON, file read bytes) over sbx_httpd               */

#define B_OF(r) ((struct breq *)(void *)((char *)(r) - \
	offsetof(struct breq, h)))

/* Backpressure (sbx_httpd.h): pause or resume the driver's producer. */
static void
on_pause(struct sbx_httpd_req *r, int on)
{
	struct breq *b = B_OF(r);

	if (b->op == NULL)
		return;
	if (on)
		sbx_op_pause(b->op);
	else
		sbx_op_resume(b->op);
}

/* Client went away mid-stream or mid-file-op: kill the producer (SPEC §5). */
static void
on_gone(struct sbx_httpd_req *r)
{
	struct breq *b = B_OF(r);
	struct sbx_op *op = b->op;

	b->op = NULL;
	sbx_op_cancel(op);
	breq_done(b, 200, SBX_E_CANCELLED);
}

static const struct sbx_httpd_ops broker_httpd_ops = { on_pause, on_gone };

int
breq_stream_begin(struct breq *b, const char *ctype)
{
	struct sbx_op *op = b->op;
	int64_t secs;

	/* Reading stays on to notice a disconnect; a silent exec must not
	 * trip evhttp's idle timeout. */
	secs = b->s->cfg->exec_timeout_max / 1000 + HTTP_TIMEOUT_S;
	if (sbx_httpd_stream_begin(&b->h, ctype, secs) == -1) {
		b->op = NULL;
		sbx_op_cancel(op);
		breq_done(b, b->h.status ? b->h.status : 499, SBX_E_CANCELLED);
		return -1;
	}
	return 0;
}

void
breq_stream_flush(struct breq *b)
{
	sbx_httpd_stream_flush(&b->h);
}

/* Ends a started stream normally and finishes b. */
void
breq_stream_end(struct breq *b, const char *outcome)
{
	sbx_httpd_stream_end(&b->h, HTTP_TIMEOUT_S);
	breq_done(b, 200, outcome);
}

/* Ends a started byte stream abnormally: the client sees a cut chunked body. */
void
breq_stream_abort(struct breq *b, const char *outcome)
{
	sbx_httpd_stream_abort(&b->h);
	breq_done(b, 200, outcome);
}

void
breq_watch(struct breq *b)
{
	sbx_httpd_watch(&b->h);
}

void
breq_unwatch(struct breq *b)
{
	sbx_httpd_unwatch(&b->h);
}


/* ------------------------------------------------------------------ */
/* Dispatch: the checks every request passes once, before any handler  */

/*
 * Finds the route of method + path; copies its {id} into id. When none
 * matches and allow is not NULL, allow gets the methods the path takes
 * ("" when the path is unknown).
 */
static const struct route *
route_find(int method, const char *path, char *id, size_t idcap,
    char *allow, size_t allowcap)
{
	struct sbx_httpd_match m;
	const struct route *r;

	r = sbx_httpd_route_find(broker_routes, broker_nroutes,
	    sizeof(broker_routes[0]), method, path, &m, allow, allowcap);
	/* A segment too long for an id is captured as "": invalid. */
	snprintf(id, idcap, "%s", m.ncap > 0 && strlen(m.cap[0]) < idcap ?
	    m.cap[0] : "");
	return r;
}

/* Largest body a route takes, bytes (0: none). */
static uint64_t
route_cap(const struct broker_server *s, const struct route *r)
{
	if (r != NULL && (r->flags & R_JSON))
		return (uint64_t)s->cfg->body_max;
	if (r != NULL && (r->flags & R_RAW))
		return (uint64_t)s->cfg->file_size_max;
	return 0;
}

/* ------------------------------------------------------------------ */
/* The gate's check (common/sbx_gate.c): token and body cap of a head  */

enum sbx_gate_verdict
broker_gate_check(void *arg, const struct sbx_gate_head *h, const char *path,
    uint64_t *cap)
{
	struct broker_server *s = arg;
	const struct route *r = NULL;
	char buf[SBX_TOKEN_MAX_LEN + 64], id[64];
	int ok;

	*cap = 0;
	if (h->auth == NULL || h->alen >= sizeof(buf))
		return SBX_GATE_UNAUTHORIZED;
	memcpy(buf, h->auth, h->alen);
	buf[h->alen] = '\0';
	ok = sbx_bearer_verify(&s->token, buf);
	sodium_memzero(buf, sizeof(buf));
	if (!ok)
		return SBX_GATE_UNAUTHORIZED;
	if (path != NULL)
		r = route_find(h->type, path, id,
		    sizeof(id), NULL, 0);
	*cap = route_cap(s, r);
	return SBX_GATE_PASS;
}

/* The gate's streaming hook: a file write's body goes to the handler as
 * it arrives (adr/0018). */
int
broker_gate_stream(void *arg, const struct sbx_gate_head *h, const char *path)
{
	const struct route *r;
	char id[64];

	(void)arg;
	r = route_find(h->type, path, id, sizeof(id),
	    NULL, 0);
	return r != NULL && (r->flags & R_RAW);
}

void
broker_dispatch(struct evhttp_request *req, void *arg)
{
	struct broker_server *s = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	const struct route *r = NULL;
	enum sbx_gate_verdict refused;
	struct sbx_err gerr;
	char id[64], allow[128] = "";
	size_t len;
	struct breq *b;

	if ((b = calloc(1, sizeof(*b))) == NULL) {
		evhttp_send_error(req, 500, NULL);
		return;
	}
	b->s = s;
	b->h.req = req;
	b->h.gate = s->gate;
	b->h.ops = &broker_httpd_ops;
	b->name = "unknown";
	b->t0_mono = sbx_mono_ms();
	b->ts_ms = sbx_wall_ms();
	TAILQ_INSERT_TAIL(&s->inflight, b, link);
	s->ninflight++;
	refused = sbx_gate_refused(s->gate, req);

	/* What the gate refused before it knew who asks (head too long or too
	 * slow, too many connections, an ambiguous credential), and framing
	 * it refused after the token verified: nothing to look up. */
	if (refused != SBX_GATE_PASS && refused != SBX_GATE_UNAUTHORIZED &&
	    refused != SBX_GATE_TOO_LARGE) {
		sbx_gate_refusal(refused, &gerr);
		breq_fail(b, &gerr);
		return;
	}
	/* Authentication before anything that could tell a stranger anything. */
	if (refused == SBX_GATE_UNAUTHORIZED ||
	    !sbx_bearer_verify(&s->token, evhttp_find_header(
	    evhttp_request_get_input_headers(req), SBX_HDR_AUTHORIZATION))) {
		breq_fail_code(b, SBX_E_UNAUTHORIZED, "unauthorized");
		return;
	}
	b->authed = 1;
	r = route_find(method, path, id, sizeof(id), allow, sizeof(allow));
	if (r == NULL && allow[0] != '\0') {
		sbx_httpd_header(&b->h, "Allow", allow);
		breq_fail_code(b, SBX_E_METHOD_NOT_ALLOWED, "Method not allowed "
		    "here; allowed: %s.", allow);
		return;
	}
	if (r == NULL) {
		breq_fail_code(b, SBX_E_NOT_FOUND, "No such endpoint.");
		return;
	}
	b->route = r;
	b->name = r->name;
	if (s->draining) {
		breq_fail_code(b, SBX_E_SHUTTING_DOWN, SBX_MSG_BROKER_DRAINING);
		return;
	}
	if (r->flags & R_ID) {
		if (!sbx_id_valid(id)) {
			breq_fail_code(b, SBX_E_INVALID_ID, SBX_MSG_BAD_ID);
			return;
		}
		snprintf(b->id, sizeof(b->id), "%s", id);
		if ((b->sbx = bsbx_get(s, id)) == NULL) {
			breq_fail_code(b, SBX_E_INTERNAL, SBX_MSG_OOM);
			return;
		}
	}
	/* The gate refused the body unread (refused) or let it through
	 * within the cap; the lengths are checked again all the same. */
	len = evhttp_request_get_input_buffer(req) != NULL ?
	    evbuffer_get_length(evhttp_request_get_input_buffer(req)) : 0;
	if ((r->flags & R_RAW) &&
	    (b->gbody = sbx_gate_body_take(s->gate, req)) != NULL)
		len = (size_t)sbx_gate_body_length(b->gbody);
	if (refused == SBX_GATE_TOO_LARGE)
		len = SIZE_MAX;
	if ((r->flags & R_JSON) && len > (size_t)s->cfg->body_max) {
		breq_fail_code(b, SBX_E_TOO_LARGE, "The body is larger than "
		    "%lld bytes.", s->cfg->body_max);
		return;
	}
	if ((r->flags & R_RAW) && len > (size_t)s->cfg->file_size_max) {
		breq_fail_code(b, SBX_E_TOO_LARGE, SBX_MSG_FILE_TOO_LARGE,
		    s->cfg->file_size_max);
		return;
	}
	if (!(r->flags & (R_JSON | R_RAW)) && len > 0) {
		breq_fail_code(b, SBX_E_BAD_REQUEST, "This endpoint takes no "
		    "body.");
		return;
	}
	/* A reaper job is stopping this sandbox: wait for it to finish
	 * (serialised routes wait in the queue anyway). */
	if (b->sbx != NULL && b->sbx->blocker != NULL && !(r->flags & R_SERIAL)) {
		b->parked = 1;
		TAILQ_INSERT_TAIL(&b->sbx->parked, b, qlink);
		return;
	}
	/* Content-Type is not enforced (proto/broker-api.md): the body is. */
	breq_run(b, r->handler);
}

/* The blocking job of x has ended: run what waited for it. */

/* ------------------------------------------------------------------ */
/* POST /v1/sandboxes/{id}/exec: the body checked, the exec started,    */
/* its NDJSON stream (SPEC §5, proto/broker-api.md). Here, beside the   */
/* dispatch that runs it, so the walk of one exec stays short           */
/* (docs/architecture.md).                                              */

static void
exec_start(void *arg, const char *exec_id)
{
	struct breq *b = arg;

	snprintf(b->exec_id, sizeof(b->exec_id), "%s", exec_id);
	if (breq_stream_begin(b, SBX_CT_NDJSON) == -1)
		return;
	broker_metrics_exec_started(b->s->metrics);
	b->exec_counted = 1;
	b->exec_t0 = sbx_mono_ms();
	sbx_ndjson_start(b->h.chunk, exec_id, sbx_wall_ms());
	breq_stream_flush(b);
}

static void
exec_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct breq *b = arg;

	if (!b->h.streaming)
		return;
	broker_metrics_exec_output(b->s->metrics, stream, len);
	if (stream == SBX_STREAM_STDOUT || stream == SBX_STREAM_STDERR)
		sbx_ndjson_output_held(b->h.chunk, &b->hold[stream - 1], stream, buf,
		    len);
	breq_stream_flush(b);
}

/* The characters still held at the end of the output go as they are. */
static void
exec_output_end(struct breq *b)
{
	sbx_ndjson_output_flush(b->h.chunk, &b->hold[0], SBX_STREAM_STDOUT);
	sbx_ndjson_output_flush(b->h.chunk, &b->hold[1], SBX_STREAM_STDERR);
}

static void
exec_exit(void *arg, const struct sbx_exit *ex)
{
	struct breq *b = arg;

	b->op = NULL;
	if (!b->h.streaming) {
		/* An exit without start breaks the driver contract. */
		breq_fail_code(b, SBX_E_INTERNAL, "The driver ended the exec "
		    "before it started.");
		return;
	}
	exec_output_end(b);
	sbx_ndjson_exit(b->h.chunk, ex->code, ex->signal, ex->duration_ms,
	    ex->truncated);
	breq_stream_end(b, "ok");
}

static void
exec_error(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;

	b->op = NULL;
	if (!b->h.streaming) {
		breq_fail(b, err);
		return;
	}
	if (broker_is_runtime_code(err->code))
		broker_metrics_runtime_error(b->s->metrics, err->code);
	exec_output_end(b);
	sbx_ndjson_error(b->h.chunk, err->code, err->message);
	breq_stream_end(b, err->code);
}

/* The exec body (proto/broker-api.md, sbx_wire.h) into b->x, within the
 * broker's ceilings, defaults applied. */
static int
exec_parse(struct breq *b, struct sbx_err *err)
{
	const struct broker_config *cfg = b->s->cfg;

	if (broker_body_object(b, sbx_wire_exec_fields, 0, &b->body,
	    err) == -1 ||
	    sbx_wire_exec_decode(b->body, &b->x, err) == -1 ||
	    broker_within(b->x.req.timeout_ms, cfg->exec_timeout_max,
	    "timeout_ms", err) == -1 ||
	    broker_within(b->x.req.output_cap, cfg->output_cap, "output_cap",
	    err) == -1)
		return -1;
	if (b->x.req.timeout_ms == 0)
		b->x.req.timeout_ms = cfg->exec_timeout;
	if (b->x.req.output_cap == 0)
		b->x.req.output_cap = cfg->output_cap;
	return 0;
}

int
h_exec(struct breq *b, struct sbx_err *err)
{
	const struct broker_config *cfg = b->s->cfg;
	const struct sbx_sink sink = { .start = exec_start,
	    .output = exec_output, .exit = exec_exit, .error = exec_error,
	    .arg = b };

	if (exec_parse(b, err) == -1)
		return -1;
	if (b->sbx->execs >= (unsigned long long)cfg->max_execs_per_sandbox)
		return sbx_err_set(err, SBX_E_TOO_MANY, "Sandbox %s already runs "
		    "its maximum of %lld execs.", b->id,
		    cfg->max_execs_per_sandbox);
	if ((b->h.chunk = evbuffer_new()) == NULL)
		return sbx_err_oom(err);
	b->sbx->execs++;
	b->holds_exec = 1;
	b->is_exec = 1;
	b->op = sbx_call_exec(b->s->driver, b->id, &b->x.req, &sink,
	    err);
	return b->op == NULL ? -1 : 0;
}
