/* api_connect.c - the Connect protocol with the JSON codec (connectrpc.com/docs/protocol; api_connect.h, adr/0060): checks a request's head and body, decodes the one request message, and answers unary calls with a JSON body and server streams with 5-byte envelopes and an end-of-stream message. Touches only the request layer (api_req.c's areq_*) and the HTTP core; knows no method. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <jansson.h>

#include "api_connect.h"
#include "api_connect_wire.h"
#include "api_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

struct api_connect_call {
	struct areq *a;           /* NULL once a finished (replied or gone) */
	enum api_connect_kind kind;
	int64_t timeout_ms;       /* Connect-Timeout-Ms, 0: none */
	int answered;             /* the handler replied / ended */
	int cancel_ran;           /* the cancel hook ran (or there was none) */
	void (*cancel_fn)(void *);
	void *cancel_arg;
	void (*drain_fn)(void *);
	void *drain_arg;
};

/* ------------------------------------------------------------------ */
/* Codes                                                               */

/* Connect protocol "Error Codes": name and HTTP status. */
static const struct { const char *code; int status; } codes[] = {
	{ "canceled", 499 }, { "unknown", 500 }, { "invalid_argument", 400 },
	{ "deadline_exceeded", 504 }, { "not_found", 404 },
	{ "already_exists", 409 }, { "permission_denied", 403 },
	{ "resource_exhausted", 429 }, { "failed_precondition", 400 },
	{ "aborted", 409 }, { "out_of_range", 400 }, { "unimplemented", 501 },
	{ "internal", 500 }, { "unavailable", 503 }, { "data_loss", 500 },
	{ "unauthenticated", 401 },
};

int
api_connect_http_status(const char *code)
{
	size_t i;

	for (i = 0; code != NULL && i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strcmp(codes[i].code, code) == 0)
			return codes[i].status;
	return 500;
}

/* sbx's codes (proto/sbx_proto.h) to Connect's. */
static const struct { const char *sbx, *connect; } sbx_codes[] = {
	{ SBX_E_BAD_REQUEST, "invalid_argument" },
	{ SBX_E_INVALID_ID, "invalid_argument" },
	{ SBX_E_PATH_OUTSIDE_WORK, "permission_denied" },
	{ SBX_E_UNKNOWN_FIELD, "invalid_argument" },
	{ SBX_E_WRONG_TYPE, "invalid_argument" },
	{ SBX_E_IMAGE_NOT_ALLOWED, "permission_denied" },
	{ SBX_E_LIMIT_EXCEEDED, "invalid_argument" },
	{ SBX_E_UNAUTHORIZED, "unauthenticated" },
	{ SBX_E_FORBIDDEN, "permission_denied" },
	{ SBX_E_NOT_FOUND, "not_found" },
	{ SBX_E_METHOD_NOT_ALLOWED, "unimplemented" },
	{ SBX_E_CONFLICT, "failed_precondition" },
	{ SBX_E_NOT_RUNNING, "unavailable" },
	{ SBX_E_TOO_LARGE, "resource_exhausted" },
	{ SBX_E_RATE_LIMITED, "resource_exhausted" },
	{ SBX_E_TOO_MANY, "resource_exhausted" },
	{ SBX_E_INTERNAL, "internal" },
	{ SBX_E_RUNTIME, "internal" },
	{ SBX_E_PORT_CLOSED, "unavailable" },
	{ SBX_E_RUNTIME_UNAVAILABLE, "unavailable" },
	{ SBX_E_SHUTTING_DOWN, "unavailable" },
	{ SBX_E_BROKER_UNAVAILABLE, "unavailable" },
	{ SBX_E_STORAGE_FULL, "resource_exhausted" },
	{ SBX_E_OVERLOADED, "unavailable" },
	{ SBX_E_TIMEOUT, "deadline_exceeded" },
	{ SBX_E_CANCELLED, "canceled" },
};

const char *
api_connect_code_of(const struct sbx_err *err)
{
	size_t i;

	for (i = 0; err != NULL && i < sizeof(sbx_codes) / sizeof(sbx_codes[0]);
	    i++)
		if (strcmp(sbx_codes[i].sbx, err->code) == 0)
			return sbx_codes[i].connect;
	return "internal";
}

/* ------------------------------------------------------------------ */
/* The wire (api_connect_wire.h: pure functions, fuzzed)               */

int
api_connect_ctype(const char *v, enum api_connect_kind kind)
{
	const char *want = kind == API_CONNECT_UNARY ? "application/json" :
	    "application/connect+json";
	size_t n = strlen(want);

	if (v == NULL)
		return -1;
	while (*v == ' ')
		v++;
	if (strncasecmp(v, want, n) != 0)
		return strncasecmp(v, "application/", 12) == 0 ? 0 : -1;
	v += n;
	while (*v == ' ')
		v++;
	/* Parameters (charset=utf-8) are fine: JSON is UTF-8 anyway. */
	return *v == '\0' || *v == ';' ? 1 : -1;
}

int
api_connect_timeout_parse(const char *v, int64_t *ms)
{
	int64_t n = 0;
	size_t i;

	*ms = 0;
	if (v == NULL)
		return 0;
	/* Connect protocol: Timeout -> "Connect-Timeout-Ms" 1*10DIGIT. */
	for (i = 0; v[i] != '\0'; i++) {
		if (i >= 10 || !isdigit((unsigned char)v[i]))
			return -1;
		n = n * 10 + (v[i] - '0');
	}
	if (i == 0)
		return -1;
	*ms = n;
	return 0;
}

json_t *
api_connect_decode(const unsigned char *p, size_t n,
    enum api_connect_kind kind, size_t max, struct sbx_err *err)
{
	json_error_t jerr;
	json_t *msg;
	uint32_t len;

	if (kind != API_CONNECT_UNARY) {
		/* One envelope: flags, length (big-endian), the message. */
		if (n < 5) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "A streaming call's "
			    "body is one enveloped message (5-byte prefix, then "
			    "the JSON).");
			return NULL;
		}
		len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 |
		    (uint32_t)p[3] << 8 | p[4];
		if (p[0] & 0x01) {
			sbx_err_set(err, SBX_E_METHOD_NOT_ALLOWED, "Compressed "
			    "messages are not served here; send identity.");
			return NULL;
		}
		if (p[0] != 0) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "A request envelope's "
			    "flags must be 0.");
			return NULL;
		}
		if (len > max) {
			sbx_err_set(err, SBX_E_TOO_LARGE, "A request message is at "
			    "most %zu bytes (connect_message_max).", max);
			return NULL;
		}
		if ((size_t)len != n - 5) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "The body must be "
			    "exactly one enveloped message: its length prefix "
			    "says %u bytes, %zu follow.", len, n - 5);
			return NULL;
		}
		p += 5;
		n = len;
	} else if (n > max) {
		sbx_err_set(err, SBX_E_TOO_LARGE, "A request message is at most "
		    "%zu bytes (connect_message_max).", max);
		return NULL;
	}
	if (n == 0)
		return json_object();   /* the empty message */
	msg = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, &jerr);
	if (msg == NULL || !json_is_object(msg)) {
		json_decref(msg);
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The request message must be "
		    "one JSON object (Connect's JSON codec).");
		return NULL;
	}
	return msg;
}

int
api_connect_envelope(struct evbuffer *out, unsigned flags, const json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	unsigned char head[5];
	size_t n;

	if (s == NULL)
		return -1;
	n = strlen(s);
	head[0] = (unsigned char)flags;
	head[1] = (unsigned char)(n >> 24);
	head[2] = (unsigned char)(n >> 16);
	head[3] = (unsigned char)(n >> 8);
	head[4] = (unsigned char)n;
	if (evbuffer_add(out, head, 5) == -1 || evbuffer_add(out, s, n) == -1) {
		free(s);
		return -1;
	}
	free(s);
	return 0;
}

json_t *
api_connect_error_json(const char *code, const char *message)
{
	json_t *o = json_object();

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "code", json_string(code));
	if (message != NULL && message[0] != '\0')
		json_object_set_new(o, "message", json_string(message));
	return o;
}

/* ------------------------------------------------------------------ */
/* A call's life                                                       */

static void
call_maybe_free(struct api_connect_call *c)
{
	if (c->a == NULL && c->answered && c->cancel_ran)
		free(c);
}

/* on_end of the request: the reply went or the client left. */
static void
call_req_end(struct areq *a)
{
	struct api_connect_call *c = a->connect;

	a->connect = NULL;
	if (c == NULL)
		return;
	c->a = NULL;
	if (!c->answered && !c->cancel_ran) {
		/* The client went before the handler ended the call. */
		c->cancel_ran = 1;
		if (c->cancel_fn != NULL) {
			c->cancel_fn(c->cancel_arg);
			/* After its cancel hook the handler forgets c. */
			c->answered = 1;
		}
	}
	call_maybe_free(c);
}

/* Backpressure from the core: over connect_stream_high (on 1), drained
 * (on 0: the handler's drain hook). */
static void
call_pause(struct areq *a, int on)
{
	struct api_connect_call *c = a->connect;

	if (c != NULL && !on && c->drain_fn != NULL && !c->answered)
		c->drain_fn(c->drain_arg);
}

/* The api drains: a stream ends unavailable, as envd's would when it goes
 * away. The handler is told first (its cancel hook: it forgets c), so
 * nothing of it writes to the call after; a handler without a cancel hook
 * keeps c, so its stream is cut and c stays until it ends it. */
static void
call_shutdown(struct areq *a)
{
	struct api_connect_call *c = a->connect;

	if (c == NULL || c->answered || c->cancel_fn == NULL) {
		areq_stream_abort(a, SBX_E_SHUTTING_DOWN);
		return;
	}
	if (!c->cancel_ran) {
		c->cancel_ran = 1;
		c->cancel_fn(c->cancel_arg);
	}
	api_connect_end(c, "unavailable", "The api is shutting down.");
}

void
api_connect_drain(struct api_server *s)
{
	struct areq *a, *next;

	for (a = s->live; a != NULL; a = next) {
		next = a->next;
		if (a->connect != NULL && a->h.streaming && a->h.req != NULL &&
		    !a->connect->answered)
			call_shutdown(a);
	}
}

static void
unary_error_reply(struct areq *a, const char *code, const char *message)
{
	json_t *o = api_connect_error_json(code, message);

	areq_reply_json(a, api_connect_http_status(code), o);
}

/* Refuses a before any handler ran: unary shape (a stream's client reads
 * the status and the code of a unary-shaped error too: Connect's
 * validateResponse maps a non-200 to its code). */
static int
refuse(struct areq *a, const char *code, const char *message)
{
	unary_error_reply(a, code, message);
	return 0;
}

int
api_connect_serve(struct areq *a, enum api_connect_kind kind, api_connect_fn fn,
    struct sbx_err *err)
{
	struct evkeyvalq *hs = evhttp_request_get_input_headers(a->h.req);
	struct evbuffer *in = evhttp_request_get_input_buffer(a->h.req);
	struct api_connect_call *c;
	struct sbx_err e;
	const char *v;
	json_t *msg;
	int64_t tmo;
	size_t n;
	int ct;

	sbx_err_clear(&e);
	if (evhttp_request_get_command(a->h.req) != EVHTTP_REQ_POST)
		return refuse(a, "unimplemented", "Connect calls are POSTs.");
	if (kind == API_CONNECT_CLIENT_STREAM)
		return refuse(a, "unimplemented", "Client streaming needs a "
		    "request body that streams while the reply does; over "
		    "HTTP/1.1 fetch cannot send one, so sbx does not serve it: "
		    "use SendInput.");
	ct = api_connect_ctype(evhttp_find_header(hs, "Content-Type"), kind);
	if (ct == 0)
		return refuse(a, "unimplemented", kind == API_CONNECT_UNARY ?
		    "Only the JSON codec is served: Content-Type must be "
		    "application/json." : "Only the JSON codec is served: "
		    "Content-Type must be application/connect+json.");
	if (ct == -1) {
		/* Connect protocol: an unknown content type is HTTP 415. */
		json_t *o = api_connect_error_json("unknown", kind ==
		    API_CONNECT_UNARY ? "Content-Type must be application/json."
		    : "Content-Type must be application/connect+json.");

		areq_reply_json(a, 415, o);
		return 0;
	}
	v = evhttp_find_header(hs, "Connect-Protocol-Version");
	if (v != NULL && strcmp(v, "1") != 0)
		return refuse(a, "invalid_argument", "Connect-Protocol-Version "
		    "must be 1.");
	v = evhttp_find_header(hs, kind == API_CONNECT_UNARY ?
	    "Content-Encoding" : "Connect-Content-Encoding");
	if (v != NULL && strcasecmp(v, "identity") != 0)
		return refuse(a, "unimplemented", "Compressed requests are not "
		    "served here; send identity.");
	if (api_connect_timeout_parse(evhttp_find_header(hs,
	    "Connect-Timeout-Ms"), &tmo) == -1)
		return refuse(a, "invalid_argument", "Connect-Timeout-Ms must be "
		    "1 to 10 digits.");
	n = evbuffer_get_length(in);
	msg = api_connect_decode(n > 0 ? evbuffer_pullup(in, -1) : NULL, n,
	    kind, (size_t)a->s->cfg->connect_message_max, &e);
	if (msg == NULL)
		return refuse(a, api_connect_code_of(&e), e.message);
	if (kind == API_CONNECT_SERVER_STREAM) {
		/* One of the principal's long-lived streams (adr/0056). */
		if (a->authed && api_streams_take(a->s, a->who.id, &e) == -1) {
			json_decref(msg);
			return refuse(a, api_connect_code_of(&e), e.message);
		}
		a->stream_counted = a->authed;
		/* The head goes now: a stream's errors ride in its end. */
		if (areq_stream_begin(a, "application/connect+json",
		    (size_t)a->s->cfg->connect_stream_high) == -1) {
			/* Gone already: a is finished. */
			json_decref(msg);
			return 0;
		}
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		json_decref(msg);
		if (kind == API_CONNECT_SERVER_STREAM) {
			areq_stream_abort(a, SBX_E_INTERNAL);
			return 0;
		}
		return sbx_err_oom(err);
	}
	c->a = a;
	c->kind = kind;
	c->timeout_ms = tmo;
	a->connect = c;
	a->on_end = call_req_end;
	if (kind == API_CONNECT_SERVER_STREAM) {
		a->on_pause = call_pause;
		a->on_shutdown = call_shutdown;
	} else {
		areq_watch(a);
	}
	fn(a, c, msg);
	json_decref(msg);
	return 0;
}

int64_t
api_connect_timeout_ms(const struct api_connect_call *c)
{
	return c->timeout_ms;
}

void
api_connect_reply(struct api_connect_call *c, json_t *msg)
{
	struct areq *a = c->a;

	if (c->answered || a == NULL) {
		json_decref(msg);
		return;
	}
	if (msg == NULL)
		msg = json_object();
	if (c->kind != API_CONNECT_UNARY) {
		/* A stream's one message, then its end. */
		if (api_connect_send(c, msg) == 0)
			api_connect_end(c, NULL, NULL);
		return;
	}
	c->answered = c->cancel_ran = 1;
	areq_reply_json(a, 200, msg);
}

void
api_connect_error(struct api_connect_call *c, const char *code,
    const char *message)
{
	struct areq *a = c->a;

	if (c->answered || a == NULL)
		return;
	if (c->kind != API_CONNECT_UNARY) {
		api_connect_end(c, code, message);
		return;
	}
	c->answered = c->cancel_ran = 1;
	unary_error_reply(a, code, message);
}

void
api_connect_fail(struct api_connect_call *c, const struct sbx_err *err)
{
	api_connect_error(c, api_connect_code_of(err), err->message[0] != '\0' ?
	    err->message : err->code);
}

int
api_connect_send(struct api_connect_call *c, json_t *msg)
{
	struct areq *a = c->a;
	int rc;

	if (a == NULL || c->answered || a->h.req == NULL) {
		json_decref(msg);
		return -1;
	}
	rc = msg != NULL ? api_connect_envelope(a->h.chunk, 0, msg) : -1;
	json_decref(msg);
	if (rc == -1) {
		/* Out of memory: the stream is cut; the cancel hook runs (the
		 * handler cleans up there, as for a client gone). */
		areq_stream_abort(a, SBX_E_INTERNAL);
		return -1;
	}
	areq_stream_flush(a);
	return c->a != NULL ? 0 : -1;
}

size_t
api_connect_queued(const struct api_connect_call *c)
{
	const struct areq *a = c->a;
	struct bufferevent *bev;
	size_t n;

	if (a == NULL || a->h.conn == NULL)
		return 0;
	n = a->h.chunk != NULL ? evbuffer_get_length(a->h.chunk) : 0;
	bev = evhttp_connection_get_bufferevent(a->h.conn);
	if (bev != NULL)
		n += evbuffer_get_length(bufferevent_get_output(bev));
	return n;
}

int
api_connect_paused(const struct api_connect_call *c)
{
	return c->a != NULL && c->a->h.paused;
}

void
api_connect_on_drain(struct api_connect_call *c, void (*fn)(void *), void *arg)
{
	c->drain_fn = fn;
	c->drain_arg = arg;
}

void
api_connect_on_cancel(struct api_connect_call *c, void (*fn)(void *), void *arg)
{
	c->cancel_fn = fn;
	c->cancel_arg = arg;
}

void
api_connect_end(struct api_connect_call *c, const char *code,
    const char *message)
{
	struct areq *a = c->a;
	json_t *end, *e;

	if (c->answered)
		return;
	if (c->kind == API_CONNECT_UNARY) {
		if (code != NULL)
			api_connect_error(c, code, message);
		else
			api_connect_reply(c, json_object());
		return;
	}
	c->answered = c->cancel_ran = 1;
	if (a == NULL) {
		call_maybe_free(c);
		return;
	}
	/* Connect protocol "Error end-stream": {"error":{code,message}}; an
	 * ok end is {}. */
	end = json_object();
	if (end != NULL && code != NULL) {
		e = api_connect_error_json(code, message);
		json_object_set_new(end, "error", e);
	}
	if (end != NULL && a->h.req != NULL &&
	    api_connect_envelope(a->h.chunk, 0x02, end) == 0) {
		json_decref(end);
		areq_stream_end(a, code != NULL ? code : "ok");
		return;
	}
	json_decref(end);
	areq_stream_abort(a, code != NULL ? code : "ok");
}
