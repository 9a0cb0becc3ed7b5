/* broker_req.c - the request layer: the life of one broker request (new, the one way out: reply, fail, done), the per-id turns it runs from the queue below it, streams over the HTTP core, the validators handlers use, and dispatch (the checks every request passes, in order, then the handler of its row in the route table it is given) (adr/0008, adr/0022, adr/0036, SPEC §5). */
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

#include "sbx_bev.h"
#include "broker_int.h"
#include "broker_metrics.h"
#include "broker_state.h"
#include "sbx_gate.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_wire.h"

/* ------------------------------------------------------------------ */
/* A request made, and the one way out of every request                */

static void
breq_free(struct breq *b)
{
	free(b->egress_allow);
	json_decref(b->body);
	sbx_wire_exec_free(&b->x);
	free(b->path);
	free(b->after);
	sbx_httpd_req_clear(&b->h);
	if (b->detach != NULL)
		b->detach(b);
	sbx_gate_body_free(b->gbody);
	if (b->job_free != NULL)
		b->job_free(b->job_arg);
	free(b);
}

struct breq *
breq_new(struct broker_server *s)
{
	struct breq *b;

	if ((b = calloc(1, sizeof(*b))) == NULL)
		return NULL;
	b->s = s;
	b->name = "unknown";
	b->t0_mono = sbx_mono_ms();
	b->ts_ms = sbx_wall_ms();
	TAILQ_INSERT_TAIL(&s->inflight, b, link);
	s->ninflight++;
	return b;
}

/* ------------------------------------------------------------------ */
/* Turns in the per-id queue (broker_queue.c)                          */

/* Starts queued serialised operations of x, one at a time. */
static void
breq_kick(struct broker_server *s, struct bsbx *x)
{
	struct breq *b;

	if (x->kicking)
		return;
	x->kicking = 1;
	x->refs++;
	while ((b = bsbx_next(x)) != NULL) {
		if (s->stopping)
			breq_fail_code(b, SBX_E_SHUTTING_DOWN,
			    SBX_MSG_BROKER_DRAINING);
		else
			breq_run(b, b->serial_start);
	}
	x->kicking = 0;
	bsbx_put(x);
}

void
breq_enqueue(struct breq *b, handler_fn start)
{
	b->serial_start = start;
	bsbx_push(b->sbx, b);
	breq_kick(b->s, b->sbx);
}

/* The blocking job of x has ended: run what waited for it. */
static void
breq_unpark(struct broker_server *s, struct bsbx *x)
{
	struct breq *b;

	while ((b = bsbx_next_parked(x)) != NULL) {
		if (s->stopping || s->draining)
			breq_fail_code(b, SBX_E_SHUTTING_DOWN,
			    SBX_MSG_BROKER_DRAINING);
		else
			breq_run(b, b->route->handler);
	}
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
	unsigned gave;
	int64_t ms = sbx_mono_ms() - b->t0_mono;
	char st[16], dur[32];

	sbx_err_clear(&err);
	sbx_heap_quiet(s->base, &s->heap_quiet);
	/*
	 * Every authenticated request is audited; strangers get no row. Each
	 * one naming a sandbox is use (last_used_at, which the reaper reads),
	 * except a status read: polling must not keep a sandbox alive
	 * (adr/0006-idle-reaper.md), and a session that ends with no
	 * viewer counts as use until it last moved bytes, not until now
	 * (adr/0051 amendment). Internal jobs audit themselves.
	 */
	if (b->authed && !b->internal &&
	    broker_state_request_done(s->state, b->ts_ms, b->name, b->id,
	    outcome, ms, strcmp(b->name, "status") != 0, b->sess_quiet ?
	    b->sess_active_ms : sbx_wall_ms(), &err) == -1)
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
		if (b->holds_port)
			x->ports--;
		if (b->holds_fileop)
			x->fileops--;
		gave = bsbx_leave(x, b);
		if (gave & BSBX_BLOCK) {
			x->refs++;
			breq_unpark(s, x);
			x->refs--;
		}
		if (gave & BSBX_TURN)
			breq_kick(s, x);
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

const struct sbx_err *
breq_err_why(const struct breq *b, const struct sbx_err *err,
    struct sbx_err *tmp)
{
	if (b->sbx == NULL || b->sbx->ending == NULL ||
	    (strcmp(err->code, SBX_E_NOT_RUNNING) != 0 &&
	    strcmp(err->code, SBX_E_NOT_FOUND) != 0))
		return err;
	sbx_err_set(tmp, err->code, "%s", b->sbx->ending);
	return tmp;
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

/* ------------------------------------------------------------------ */
/* Validators: 0, or -1 with err set; they never reply, never free b    */

int
broker_body_object(struct breq *b, const char *const *allowed, int empty_ok,
    json_t **out, struct sbx_err *err)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(b->h.req);
	size_t len = evbuffer_get_length(in);

	return sbx_wire_body_object(len > 0 ?
	    (const char *)evbuffer_pullup(in, -1) : "", len, allowed, empty_ok,
	    out, err);
}

int
broker_within(int64_t v, int64_t max, const char *name, struct sbx_err *err)
{
	if (v > max)
		return sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "Field \"%s\" asks "
		    "for more than the broker allows (%" PRId64 ").", name, max);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Dispatch: the checks every request passes once, before any handler  */

/*
 * Finds the route of method + path in s's table; copies its {id} into id.
 * When none matches and allow is not NULL, allow gets the methods the path
 * takes ("" when the path is unknown).
 */
static const struct route *
route_find(const struct broker_server *s, int method, const char *path,
    char *id, size_t idcap, char *allow, size_t allowcap)
{
	struct sbx_httpd_match m;
	const struct route *r;

	r = sbx_httpd_route_find(s->routes, s->nroutes, sizeof(s->routes[0]),
	    method, path, &m, allow, allowcap);
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
		r = route_find(s, h->type, path, id, sizeof(id), NULL, 0);
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

	/* A chunked body is gathered (the helper's write needs its length
	 * first); the api sends Content-Length. */
	if (h->chunked)
		return 0;
	r = route_find(arg, h->type, path, id, sizeof(id), NULL, 0);
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

	if ((b = breq_new(s)) == NULL) {
		evhttp_send_error(req, 500, NULL);
		return;
	}
	b->h.req = req;
	b->h.gate = s->gate;
	b->h.ops = &broker_httpd_ops;
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
	r = route_find(s, method, path, id, sizeof(id), allow, sizeof(allow));
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
		bsbx_park(b->sbx, b);
		return;
	}
	/* Content-Type is not enforced (proto/broker-api.md): the body is. */
	breq_run(b, r->handler);
}
