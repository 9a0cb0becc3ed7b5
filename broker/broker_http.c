/* broker_http.c - the broker's HTTP API: route table, checks made once, handlers, NDJSON streams (SPEC §4, §5). */
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <netinet/in.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <jansson.h>
#include <sodium.h>

#include "agent.h"
#include "broker.h"
#include "broker_metrics.h"
#include "broker_reaper.h"
#include "broker_state.h"
#include "sbx_gate.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_usage.h"
#include "sbx_wire.h"
#include "sbx_proto.h"

/* Backpressure: pause the driver when this much is queued for the client. */
#define STREAM_HIGH_WATER ((size_t)1024 * 1024)
/* Idle keep-alive / request read timeout of ordinary requests, seconds. */
#define HTTP_TIMEOUT_S 60
#define MAX_ARGV 4096
#define MAX_ENV 1024

/* Route flags. */
#define R_ID      0x01  /* pattern has {id}: validated before the handler */
#define R_JSON    0x02  /* body is JSON (object), at most body_max bytes */
#define R_RAW     0x04  /* body is raw bytes, at most file_size_max */
#define R_SERIAL  0x08  /* runs in the id's queue (ensure, stop, destroy) */

struct breq;
typedef void (*handler_fn)(struct breq *);

struct route {
	enum evhttp_cmd_type method;
	const char *pattern;     /* "{id}" matches one segment */
	const char *name;        /* audit op and metrics label */
	handler_fn handler;
	unsigned flags;
};

/*
 * Per sandbox id while any request names it: the queue that serialises
 * ensure/stop/destroy and the reaper's jobs, the execs in flight, and the
 * requests parked while a reaper job stops or destroys the sandbox.
 */
struct bsbx {
	LIST_ENTRY(bsbx) link;
	char id[64];
	TAILQ_HEAD(, breq) queue;
	TAILQ_HEAD(, breq) parked;
	struct breq *running;
	struct breq *blocker;     /* a job that parks the other requests */
	unsigned execs;
	unsigned fileops;         /* reads, writes, lists in flight */
	unsigned refs;
	int kicking;
};

struct broker_server {
	struct event_base *base;
	const struct broker_config *cfg;
	struct sbx_driver *driver;
	struct sbx_token token;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	char *unix_path;          /* unlinked when the server goes */
	int port;
	struct broker_state *state;
	struct broker_metrics *metrics;
	const char **allowlist;
	TAILQ_HEAD(, breq) inflight;
	unsigned ninflight;
	LIST_HEAD(, bsbx) sbxs;
	struct sbx_gate *gate;    /* heads checked before bodies (sbx_gate.h) */
	unsigned pending_new;     /* ensures of new ids under way */
	int draining, stopping;
	struct event *grace_ev, *done_ev;
	void (*drain_done)(void *);
	void *drain_arg;
};

/* One request being answered. */
struct breq {
	TAILQ_ENTRY(breq) link;   /* server inflight */
	TAILQ_ENTRY(breq) qlink;  /* bsbx queue */
	struct broker_server *s;
	struct evhttp_request *req;
	const struct route *route;
	const char *name;         /* route name or "unknown" */
	int authed;               /* passed the bearer check: audited */
	char id[64];
	struct bsbx *sbx;
	struct sbx_op *op;
	struct sbx_gate_body *gbody;  /* write: its streamed body (adr/0018) */
	handler_fn serial_start;
	int queued;
	int64_t t0_mono, ts_ms;
	int holds_exec, holds_new, holds_fileop;
	int watching;             /* the connection's close is watched */
	int list_obj;             /* list: ?cursor= given, reply is the page object */
	char *after;              /* list: the cursor's name */
	/* parsed input, owned */
	json_t *body;
	struct sbx_spec spec;
	struct sbx_wire_exec x;   /* exec body (sbx_wire.h); x.req for the driver */
	char *path;
	uint32_t mode;
	size_t wsize;             /* bytes written */
	/* streams */
	int is_exec;
	int streaming;            /* reply started */
	int paused;
	int exec_counted;
	int64_t exec_t0;          /* monotonic ms of the exec's start event */
	int parked;               /* waits in sbx->parked */
	/* an internal job (the reaper's): no HTTP request, no reply */
	int internal;
	broker_job_fn job_start;
	void (*job_free)(void *);
	void *job_arg;
	struct evhttp_connection *conn;
	struct evbuffer *chunk;
	struct sbx_utf8_hold hold[2]; /* exec stdout/stderr split characters */
	char exec_id[64];
};

static void stream_closed(struct evhttp_connection *, void *);
static void stream_watch(struct breq *, struct evhttp_connection *, struct breq *);

static void h_list_sandboxes(struct breq *);
static void h_ensure(struct breq *);
static void h_status(struct breq *);
static void h_destroy(struct breq *);
static void h_exec(struct breq *);
static void h_read(struct breq *);
static void h_write(struct breq *);
static void h_list(struct breq *);
static void h_stop(struct breq *);
static void h_health(struct breq *);
static void h_metrics(struct breq *);

static void status_done(void *, const struct sbx_err *,
    const struct sbx_status *);

static const struct route routes[] = {
	{ EVHTTP_REQ_GET, "/v1/sandboxes", "list_sandboxes", h_list_sandboxes, 0 },
	{ EVHTTP_REQ_PUT, "/v1/sandboxes/{id}", "ensure", h_ensure,
	    R_ID | R_JSON | R_SERIAL },
	{ EVHTTP_REQ_GET, "/v1/sandboxes/{id}", "status", h_status,
	    R_ID },
	{ EVHTTP_REQ_DELETE, "/v1/sandboxes/{id}", "destroy", h_destroy,
	    R_ID | R_SERIAL },
	{ EVHTTP_REQ_POST, "/v1/sandboxes/{id}/exec", "exec", h_exec,
	    R_ID | R_JSON },
	{ EVHTTP_REQ_GET, "/v1/sandboxes/{id}/files", "read", h_read,
	    R_ID },
	{ EVHTTP_REQ_PUT, "/v1/sandboxes/{id}/files", "write", h_write,
	    R_ID | R_RAW },
	{ EVHTTP_REQ_GET, "/v1/sandboxes/{id}/list", "list", h_list,
	    R_ID },
	{ EVHTTP_REQ_POST, "/v1/sandboxes/{id}/stop", "stop", h_stop,
	    R_ID | R_JSON | R_SERIAL },
	{ EVHTTP_REQ_GET, "/v1/health", "health", h_health, 0 },
	{ EVHTTP_REQ_GET, "/metrics", "metrics", h_metrics, 0 },
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

static int64_t
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ */
/* Per-id serialisation                                                */

static struct bsbx *
bsbx_get(struct broker_server *s, const char *id)
{
	struct bsbx *x;

	LIST_FOREACH(x, &s->sbxs, link)
		if (strcmp(x->id, id) == 0) {
			x->refs++;
			return x;
		}
	if ((x = calloc(1, sizeof(*x))) == NULL)
		return NULL;
	snprintf(x->id, sizeof(x->id), "%s", id);
	TAILQ_INIT(&x->queue);
	TAILQ_INIT(&x->parked);
	x->refs = 1;
	LIST_INSERT_HEAD(&s->sbxs, x, link);
	return x;
}

static void
bsbx_put(struct bsbx *x)
{
	if (x == NULL || --x->refs > 0)
		return;
	LIST_REMOVE(x, link);
	free(x);
}

static void breq_fail(struct breq *b, const struct sbx_err *err);
static void breq_fail_code(struct breq *b, const char *code, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));

/* Starts queued serialised operations of x, one at a time. */
static void
bsbx_kick(struct broker_server *s, struct bsbx *x)
{
	struct breq *b;

	if (x->kicking)
		return;
	x->kicking = 1;
	x->refs++;
	while (x->running == NULL && (b = TAILQ_FIRST(&x->queue)) != NULL) {
		TAILQ_REMOVE(&x->queue, b, qlink);
		b->queued = 0;
		x->running = b;
		if (s->stopping)
			breq_fail_code(b, SBX_E_SHUTTING_DOWN,
			    "The broker is shutting down.");
		else
			b->serial_start(b);
	}
	x->kicking = 0;
	bsbx_put(x);
}

/* Queues b's driver call behind the other ensure/stop/destroy of its id. */
static void
serial_enqueue(struct breq *b, handler_fn start)
{
	b->serial_start = start;
	b->queued = 1;
	TAILQ_INSERT_TAIL(&b->sbx->queue, b, qlink);
	bsbx_kick(b->s, b->sbx);
}

/* ------------------------------------------------------------------ */
/* The one way out of every request                                    */

static void gather_cb(struct evbuffer *, const struct evbuffer_cb_info *,
    void *);

static void
breq_free(struct breq *b)
{
	json_decref(b->body);
	sbx_wire_exec_free(&b->x);
	free(b->path);
	free(b->after);
	if (b->chunk != NULL)
		evbuffer_free(b->chunk);
	if (b->gbody != NULL) {
		evbuffer_remove_cb(sbx_gate_body_buffer(b->gbody), gather_cb, b);
		sbx_gate_body_free(b->gbody);
	}
	if (b->job_free != NULL)
		b->job_free(b->job_arg);
	free(b);
}

static void unpark(struct broker_server *s, struct bsbx *x);

/*
 * Ends b: audit, last_used_at, metrics, log, queue advance, free. The reply
 * itself has been sent by the caller (status is what was sent).
 */
static void
breq_done(struct breq *b, int status, const char *outcome)
{
	struct broker_server *s = b->s;
	struct bsbx *x = b->sbx;
	struct sbx_err err;
	int64_t ms = mono_ms() - b->t0_mono;
	char st[16], dur[32];

	sbx_err_clear(&err);
	/*
	 * Every authenticated request is audited; strangers get no row. Each
	 * one naming a sandbox is use (last_used_at, which the reaper reads),
	 * except a status read: polling must not keep a sandbox alive
	 * (adr/0006-idle-reaper.md). Internal jobs audit themselves.
	 */
	if (b->authed && !b->internal) {
		if ((b->id[0] != '\0' && strcmp(b->name, "status") != 0 &&
		    broker_state_touch(s->state, b->id, wall_ms(), &err) == -1) ||
		    broker_state_audit(s->state, b->ts_ms, b->name, b->id,
		    outcome, ms, NULL, &err) == -1)
			log_error("audit write failed", "error", err.message, NULL);
	}
	if (!b->internal)
		broker_metrics_request(s->metrics, b->name, status, ms);
	if (b->exec_counted)
		broker_metrics_exec_finished(s->metrics, mono_ms() - b->exec_t0);
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
			unpark(s, x);
			x->refs--;
		}
		if (x->running == b) {
			x->running = NULL;
			bsbx_kick(s, x);
		}
	}
	breq_free(b);
	bsbx_put(x);
	if (s->draining && s->ninflight == 0 && s->done_ev != NULL)
		event_active(s->done_ev, 0, 0);
}

/* Sends a JSON reply (steals obj) and ends b. */
static void
reply_json(struct breq *b, int status, json_t *obj, const char *outcome)
{
	struct evbuffer *out = NULL;
	char *text = NULL;

	if (b->watching && b->conn != NULL) {
		stream_watch(b, b->conn, NULL);
		b->watching = 0;
	}
	if (b->req != NULL) {
		text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
		if ((out = evbuffer_new()) == NULL) {
			evhttp_send_error(b->req, 500, NULL);
			b->req = NULL;
			status = 500;
			outcome = SBX_E_INTERNAL;
			goto done;
		}
		if (text == NULL) {
			status = 500;
			outcome = SBX_E_INTERNAL;
			evbuffer_add_printf(out, "{\"error\":{\"code\":\"internal\","
			    "\"message\":\"Out of memory.\"}}\n");
		} else
			evbuffer_add_printf(out, "%s\n", text);
		evhttp_add_header(evhttp_request_get_output_headers(b->req),
		    "Content-Type", SBX_CT_JSON);
		/* A streamed body not read to its end is read and dropped
		 * after the reply (the gate), so the client can finish sending
		 * and read it; one that stopped coming (504) ends here
		 * (adr/0018). */
		if (b->s->draining || (b->gbody != NULL && status == 504 &&
		    !sbx_gate_body_complete(b->gbody)))
			evhttp_add_header(evhttp_request_get_output_headers(
			    b->req), "Connection", "close");
		evhttp_send_reply(b->req, status, NULL, out);
		b->req = NULL;
	}
done:
	if (out != NULL)
		evbuffer_free(out);
	free(text);
	json_decref(obj);
	breq_done(b, status, outcome);
}

static int
is_runtime_code(const char *code)
{
	return strcmp(code, SBX_E_RUNTIME) == 0 ||
	    strcmp(code, SBX_E_RUNTIME_UNAVAILABLE) == 0;
}

/* Errors become HTTP statuses here, and only here. */
static void
breq_fail(struct breq *b, const struct sbx_err *err)
{
	struct sbx_err e = *err;
	int status;
	json_t *obj;

	if (!sbx_err_is_set(&e))
		sbx_err_set(&e, SBX_E_INTERNAL, "Internal error.");
	status = sbx_err_http_status(&e);
	if (is_runtime_code(e.code))
		broker_metrics_runtime_error(b->s->metrics, e.code);
	if (status == 401 && b->req != NULL)
		evhttp_add_header(evhttp_request_get_output_headers(b->req),
		    "WWW-Authenticate", "Bearer");
	/* A limit on what runs at once: worth trying again soon. */
	if (status == 429 && b->req != NULL)
		evhttp_add_header(evhttp_request_get_output_headers(b->req),
		    "Retry-After", "1");
	obj = sbx_wire_error_encode(e.code, e.message);
	reply_json(b, status, obj, e.code);
}

static void
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

/* ------------------------------------------------------------------ */
/* Streams (exec NDJSON, file read bytes)                              */

static void
stream_drained(struct evhttp_connection *conn, void *arg)
{
	struct breq *b = arg;

	(void)conn;
	if (b->paused && b->op != NULL) {
		b->paused = 0;
		sbx_op_resume(b->op);
	}
}

/* Sends what is in b->chunk; pauses the producer above the high-water mark. */
static void
stream_flush(struct breq *b)
{
	struct bufferevent *bev;

	if (b->req == NULL || evbuffer_get_length(b->chunk) == 0)
		return;
	evhttp_send_reply_chunk_with_cb(b->req, b->chunk, stream_drained, b);
	bev = evhttp_connection_get_bufferevent(b->conn);
	if (!b->paused && b->op != NULL && bev != NULL &&
	    evbuffer_get_length(bufferevent_get_output(bev)) >
	    STREAM_HIGH_WATER) {
		b->paused = 1;
		sbx_op_pause(b->op);
	}
}

/*
 * Watches conn for the client of b going away (w = b: stream_closed), or
 * stops watching (w NULL). The gate owns the connection's close callback when
 * there is one, so the watch goes through it.
 */
static void
stream_watch(struct breq *b, struct evhttp_connection *conn, struct breq *w)
{
	sbx_gate_watch(b->s->gate, conn, w ? stream_closed : NULL, w);
}

/* Client went away mid-stream: kill the producer (SPEC §5). */
static void
stream_closed(struct evhttp_connection *conn, void *arg)
{
	struct breq *b = arg;
	struct sbx_op *op = b->op;

	(void)conn;
	b->op = NULL;
	b->watching = 0;
	sbx_op_cancel(op);
	/* The request was detached from its connection: ending it frees it. */
	if (b->req != NULL)
		evhttp_send_reply_end(b->req);
	b->req = NULL;
	breq_done(b, 200, SBX_E_CANCELLED);
}

/*
 * Starts the 200 reply of a stream. Returns 0, or -1 when the client has
 * already gone (the request was detached from its connection): then the
 * producer is cancelled and b is finished.
 */
static int
stream_begin(struct breq *b, const char *ctype)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(b->req);
	struct sbx_op *op = b->op;
	struct timeval tv;
	int64_t secs;

	if (evhttp_request_get_connection(b->req) == NULL) {
		b->op = NULL;
		sbx_op_cancel(op);
		evhttp_send_reply_end(b->req);   /* frees a detached request */
		b->req = NULL;
		breq_done(b, 499, SBX_E_CANCELLED);
		return -1;
	}
	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "Cache-Control", "no-cache");
	evhttp_add_header(h, "X-Accel-Buffering", "no");
	b->conn = evhttp_request_get_connection(b->req);
	/* Reading stays on to notice a disconnect; a silent exec must not
	 * trip evhttp's idle timeout. */
	secs = b->s->cfg->exec_timeout_max / 1000 + HTTP_TIMEOUT_S;
	tv.tv_sec = secs;
	tv.tv_usec = 0;
	evhttp_connection_set_timeout_tv(b->conn, &tv);
	stream_watch(b, b->conn, b);
	b->watching = 1;
	evhttp_send_reply_start(b->req, 200, "OK");
	b->streaming = 1;
	return 0;
}

/* Ends a started stream normally and finishes b. */
static void
stream_end(struct breq *b, const char *outcome)
{
	struct timeval tv = { HTTP_TIMEOUT_S, 0 };

	if (b->req != NULL) {
		stream_flush(b);
		stream_watch(b, b->conn, NULL);
		b->watching = 0;
		evhttp_connection_set_timeout_tv(b->conn, &tv);
		evhttp_send_reply_end(b->req);
		b->req = NULL;
	}
	breq_done(b, 200, outcome);
}

/* Ends a started byte stream abnormally: the client sees a cut chunked body. */
static void
stream_abort(struct breq *b, const char *outcome)
{
	if (b->req != NULL) {
		stream_watch(b, b->conn, NULL);
		b->watching = 0;
		evhttp_connection_free(b->conn);   /* frees b->req too */
		b->req = NULL;
	}
	breq_done(b, 200, outcome);
}

static void
exec_start(void *arg, const char *exec_id)
{
	struct breq *b = arg;

	snprintf(b->exec_id, sizeof(b->exec_id), "%s", exec_id);
	if (stream_begin(b, SBX_CT_NDJSON) == -1)
		return;
	broker_metrics_exec_started(b->s->metrics);
	b->exec_counted = 1;
	b->exec_t0 = mono_ms();
	sbx_ndjson_start(b->chunk, exec_id, wall_ms());
	stream_flush(b);
}

static void
exec_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct breq *b = arg;

	if (!b->streaming)
		return;
	broker_metrics_exec_output(b->s->metrics, stream, len);
	if (stream == SBX_STREAM_STDOUT || stream == SBX_STREAM_STDERR)
		sbx_ndjson_output_held(b->chunk, &b->hold[stream - 1], stream, buf,
		    len);
	stream_flush(b);
}

/* The characters still held at the end of the output go as they are. */
static void
exec_output_end(struct breq *b)
{
	sbx_ndjson_output_flush(b->chunk, &b->hold[0], SBX_STREAM_STDOUT);
	sbx_ndjson_output_flush(b->chunk, &b->hold[1], SBX_STREAM_STDERR);
}

static void
exec_exit(void *arg, const struct sbx_exit *ex)
{
	struct breq *b = arg;

	b->op = NULL;
	if (!b->streaming) {
		/* An exit without start breaks the driver contract. */
		breq_fail_code(b, SBX_E_INTERNAL, "The driver ended the exec "
		    "before it started.");
		return;
	}
	exec_output_end(b);
	sbx_ndjson_exit(b->chunk, ex->code, ex->signal, ex->duration_ms,
	    ex->truncated);
	stream_end(b, "ok");
}

static void
exec_error(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;

	b->op = NULL;
	if (!b->streaming) {
		breq_fail(b, err);
		return;
	}
	if (is_runtime_code(err->code))
		broker_metrics_runtime_error(b->s->metrics, err->code);
	exec_output_end(b);
	sbx_ndjson_error(b->chunk, err->code, err->message);
	stream_end(b, err->code);
}

static void
read_start(void *arg, const char *exec_id)
{
	struct breq *b = arg;

	(void)exec_id;
	stream_begin(b, SBX_CT_OCTET);
}

static void
read_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct breq *b = arg;

	(void)stream;
	/* A driver need not call start for a read (the engine driver does
	 * not): the first bytes start the reply. */
	if (!b->streaming && stream_begin(b, SBX_CT_OCTET) == -1)
		return;
	evbuffer_add(b->chunk, buf, len);
	stream_flush(b);
}

static void
read_exit(void *arg, const struct sbx_exit *ex)
{
	struct breq *b = arg;

	(void)ex;
	b->op = NULL;
	if (!b->streaming && stream_begin(b, SBX_CT_OCTET) == -1)
		return;   /* the driver broke the contract: exit without start */
	stream_end(b, "ok");
}

static void
read_error(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;

	b->op = NULL;
	if (!b->streaming) {
		breq_fail(b, err);
		return;
	}
	log_warn("file read failed mid-stream", "id", b->id, "code",
	    err->code, NULL);
	stream_abort(b, err->code);
}

/* ------------------------------------------------------------------ */
/* JSON                                                                */

static json_t *
status_json(struct broker_server *s, const struct sbx_status *st)
{
	struct broker_row row;
	struct sbx_status out;
	struct sbx_err err;
	const char *reason = st->stop_reason;
	int64_t last_used = st->last_used_at_ms;
	int found;

	found = broker_state_get(s->state, st->id, &row, &err);
	if (found == 1) {
		last_used = row.last_used_at_ms;
		if (row.stop_reason[0] != '\0' && st->state == SBX_STATE_STOPPED &&
		    strcmp(row.state, "stopped") == 0)
			reason = row.stop_reason;
		/* Stopped behind our back (oom, its init exited): remember
		 * why, so status and the reaper's destroy_after see it. */
		if (st->state == SBX_STATE_STOPPED &&
		    strcmp(row.state, "running") == 0 &&
		    broker_state_stopped(s->state, st->id, reason[0] ? reason :
		    "exited", wall_ms(), &err) == -1)
			log_error("state write failed", "id", st->id, "error",
			    err.message, NULL);
		/* Running or gone behind our back (a start or remove a killed
		 * broker had asked for ended after its restart's
		 * reconciliation, test_faults.py): record what the runtime
		 * says. */
		if (st->state == SBX_STATE_RUNNING &&
		    strcmp(row.state, "running") != 0 &&
		    broker_state_adopt(s->state, st, row.volume, wall_ms(),
		    &err) == -1)
			log_error("state write failed", "id", st->id, "error",
			    err.message, NULL);
		if (st->state == SBX_STATE_ABSENT &&
		    strcmp(row.state, "absent") != 0 &&
		    broker_state_absent(s->state, st->id, &err) == -1)
			log_error("state write failed", "id", st->id, "error",
			    err.message, NULL);
	}
	/* What the broker knows better than the driver, then the one
	 * encoding of a status (sbx_wire.h). */
	out = *st;
	out.last_used_at_ms = last_used;
	snprintf(out.stop_reason, sizeof(out.stop_reason), "%s", reason);
	return sbx_wire_status_encode(&out, 0);
}

/*
 * Strict body parsing (sbx_wire_body_object): one JSON object whose
 * members are all in allowed. Returns the object (owned) or NULL after
 * replying (b is freed then: callers store the result only when it is not
 * NULL).
 */
static json_t *
body_object(struct breq *b, const char *const *allowed, int empty_ok)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(b->req);
	size_t len = evbuffer_get_length(in);
	struct sbx_err err;
	json_t *obj;

	sbx_err_clear(&err);
	if (sbx_wire_body_object(len > 0 ? (const char *)evbuffer_pullup(in, -1) :
	    "", len, allowed, empty_ok, &obj, &err) == -1) {
		breq_fail(b, &err);
		return NULL;
	}
	return obj;
}

static int
within(struct breq *b, int64_t v, int64_t max, const char *name)
{
	if (v > max) {
		breq_fail_code(b, SBX_E_LIMIT_EXCEEDED, "Field \"%s\" asks for "
		    "more than the broker allows (%" PRId64 ").", name, max);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Handlers                                                            */

static void
ensure_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct breq *b = arg;
	struct sbx_err serr;
	char volume[192];

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	snprintf(volume, sizeof(volume), "%s%s-work", b->s->cfg->name_prefix,
	    st->id);
	if (broker_state_put(b->s->state, st, volume, wall_ms(), &serr) == -1) {
		/* Not recorded (a full state dir: storage_full, 503): the
		 * sandbox exists in the runtime, a retry records it. */
		log_error("state write failed", "id", b->id, "error",
		    serr.message, NULL);
		breq_fail(b, &serr);
		return;
	}
	broker_state_touch(b->s->state, b->id, wall_ms(), &serr);
	reply_json(b, 200, status_json(b->s, st), "ok");
}

static void
ensure_start(struct breq *b)
{
	struct broker_server *s = b->s;
	struct broker_row row;
	struct sbx_err err;
	int found, n;

	sbx_err_clear(&err);
	if ((found = broker_state_get(s->state, b->id, &row, &err)) == -1) {
		breq_fail(b, &err);
		return;
	}
	/* An absent row (container gone while we were away) is a new one
	 * for the limit: it does not count in broker_state_count. */
	if (!found || strcmp(row.state, "absent") == 0) {
		if ((n = broker_state_count(s->state, &err)) == -1) {
			breq_fail(b, &err);
			return;
		}
		if ((long long)n + s->pending_new >= s->cfg->max_sandboxes) {
			breq_fail_code(b, SBX_E_TOO_MANY, "The broker already "
			    "keeps its maximum of %lld sandboxes.",
			    s->cfg->max_sandboxes);
			return;
		}
		s->pending_new++;
		b->holds_new = 1;
	}
	b->op = s->driver->ops->ensure(s->driver, b->id, &b->spec, ensure_done,
	    b, &err);
	if (b->op == NULL)
		breq_fail(b, &err);
}

static void
h_ensure(struct breq *b)
{
	const struct broker_config *cfg = b->s->cfg;
	struct sbx_err err;
	json_t *body;

	sbx_err_clear(&err);
	if ((body = body_object(b, sbx_wire_spec_fields, 1)) == NULL)
		return;
	b->body = body;
	if (sbx_wire_spec_decode(b->body, (const char *const *)b->s->allowlist,
	    &b->spec, &err) == -1) {
		breq_fail(b, &err);
		return;
	}
	if (within(b, b->spec.memory_bytes, cfg->memory_max,
	    "memory_bytes") == -1 ||
	    within(b, b->spec.nano_cpus, cfg->nano_cpus_max, "nano_cpus") == -1 ||
	    within(b, b->spec.pids, cfg->pids_max, "pids") == -1)
		return;
	serial_enqueue(b, ensure_start);
}

static void
status_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct breq *b = arg;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	reply_json(b, 200, status_json(b->s, st), "ok");
}

static void
status_usage_done(void *arg, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct breq *b = arg;
	json_t *o;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	o = status_json(b->s, st);
	if (o != NULL)
		json_object_set_new(o, "usage", sbx_usage_json(&st->usage));
	reply_json(b, 200, o, "ok");
}

/* ?usage=1: the status plus /work usage, one helper exec (adr/0017). */
static int
status_usage_start(struct breq *b)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->req);
	struct sbx_err err;
	int on;

	sbx_err_clear(&err);
	if ((on = sbx_query_flag(evhttp_uri_get_query(uri), SBX_QUERY_USAGE,
	    &err)) != 1) {
		if (on < 0)
			breq_fail(b, &err);
		return on;
	}
	if (b->s->driver->ops->status_usage == NULL) {
		breq_fail_code(b, SBX_E_BAD_REQUEST, "This broker's driver cannot "
		    "count /work usage.");
		return -1;
	}
	b->op = b->s->driver->ops->status_usage(b->s->driver, b->id,
	    status_usage_done, b, &err);
	if (b->op == NULL)
		breq_fail(b, &err);
	return 1;
}

static void
h_status(struct breq *b)
{
	struct sbx_err err;

	if (status_usage_start(b) != 0)
		return;
	sbx_err_clear(&err);
	b->op = b->s->driver->ops->status(b->s->driver, b->id, status_done, b,
	    &err);
	if (b->op == NULL)
		breq_fail(b, &err);
}

static void
destroy_done(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;
	struct sbx_status gone;
	struct sbx_err serr;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if (broker_state_delete(b->s->state, b->id, &serr) == -1) {
		/* Gone from the runtime, still recorded: say so (503 when the
		 * state dir is full); destroy is idempotent, a retry ends it. */
		log_error("state write failed", "id", b->id, "error",
		    serr.message, NULL);
		breq_fail(b, &serr);
		return;
	}
	memset(&gone, 0, sizeof(gone));
	snprintf(gone.id, sizeof(gone.id), "%s", b->id);
	reply_json(b, 200, status_json(b->s, &gone), "ok");
}

static void
destroy_start(struct breq *b)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	b->op = b->s->driver->ops->destroy(b->s->driver, b->id, destroy_done, b,
	    &err);
	if (b->op == NULL)
		breq_fail(b, &err);
}

static void
h_destroy(struct breq *b)
{
	serial_enqueue(b, destroy_start);
}

static void
stop_done(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;
	struct sbx_err serr;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if (broker_state_stopped(b->s->state, b->id, "operator", wall_ms(),
	    &serr) == -1) {
		/* Stopped but not recorded: 503 storage_full when the state
		 * dir is full; a retry (stopped -> ok) records it. */
		log_error("state write failed", "id", b->id, "error",
		    serr.message, NULL);
		breq_fail(b, &serr);
		return;
	}
	/* The reply is the status object: ask the driver, still in our turn. */
	sbx_err_clear(&serr);
	b->op = b->s->driver->ops->status(b->s->driver, b->id, status_done, b,
	    &serr);
	if (b->op == NULL)
		breq_fail(b, &serr);
}

static void
stop_start(struct breq *b)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	b->op = b->s->driver->ops->stop(b->s->driver, b->id, stop_done, b,
	    &err);
	if (b->op == NULL)
		breq_fail(b, &err);
}

static void
h_stop(struct breq *b)
{
	static const char *const allowed[] = { NULL };
	json_t *body;

	if ((body = body_object(b, allowed, 1)) == NULL)
		return;
	b->body = body;
	serial_enqueue(b, stop_start);
}

static void
h_exec(struct breq *b)
{
	const struct broker_config *cfg = b->s->cfg;
	struct sbx_sink sink = { exec_start, exec_output, exec_exit, exec_error,
	    b };
	struct sbx_err err;
	json_t *body;

	sbx_err_clear(&err);
	if ((body = body_object(b, sbx_wire_exec_fields, 0)) == NULL)
		return;
	b->body = body;
	if (sbx_wire_exec_decode(b->body, &b->x, &err) == -1) {
		breq_fail(b, &err);
		return;
	}
	if (within(b, b->x.req.timeout_ms, cfg->exec_timeout_max,
	    "timeout_ms") == -1 ||
	    within(b, b->x.req.output_cap, cfg->output_cap, "output_cap") == -1)
		return;
	if (b->x.req.timeout_ms == 0)
		b->x.req.timeout_ms = cfg->exec_timeout;
	if (b->x.req.output_cap == 0)
		b->x.req.output_cap = cfg->output_cap;
	if (b->sbx->execs >= (unsigned long long)cfg->max_execs_per_sandbox) {
		breq_fail_code(b, SBX_E_TOO_MANY, "Sandbox %s already runs its "
		    "maximum of %lld execs.", b->id, cfg->max_execs_per_sandbox);
		return;
	}
	if ((b->chunk = evbuffer_new()) == NULL) {
		breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	b->sbx->execs++;
	b->holds_exec = 1;
	b->is_exec = 1;
	b->op = b->s->driver->ops->exec(b->s->driver, b->id, &b->x.req, &sink,
	    &err);
	if (b->op == NULL)
		breq_fail(b, &err);
}

/*
 * A file operation may start: at most max_file_ops_per_sandbox of them run
 * at once per sandbox (429 too_many with Retry-After). Returns 0, or -1
 * after replying.
 */
static int
fileop_admit(struct breq *b)
{
	if (b->sbx->fileops >= (unsigned long long)
	    b->s->cfg->max_file_ops_per_sandbox) {
		breq_fail_code(b, SBX_E_TOO_MANY, "Sandbox %s already runs its "
		    "maximum of %lld file operations; try again shortly.", b->id,
		    b->s->cfg->max_file_ops_per_sandbox);
		return -1;
	}
	b->sbx->fileops++;
	b->holds_fileop = 1;
	return 0;
}

/*
 * From dispatch on, a client that goes away ends its file operation (the
 * helper is killed), also before any reply byte: evhttp reads nothing
 * between a request and its reply, so reading is turned on here with no
 * read callback — what evhttp does itself while it writes a reply — and
 * the close reaches stream_closed through the gate.
 */
static void
fileop_watch(struct breq *b)
{
	struct evhttp_connection *conn = evhttp_request_get_connection(b->req);
	struct bufferevent *bev;
	bufferevent_data_cb wcb = NULL;
	bufferevent_event_cb ecb = NULL;
	void *cbarg = NULL;

	if (conn == NULL || (bev = evhttp_connection_get_bufferevent(conn)) ==
	    NULL)
		return;
	bufferevent_getcb(bev, NULL, &wcb, &ecb, &cbarg);
	bufferevent_setcb(bev, NULL, wcb, ecb, cbarg);
	bufferevent_enable(bev, EV_READ);
	b->conn = conn;
	stream_watch(b, conn, b);
	b->watching = 1;
}

/* ?path= checked by sbx_query_path; returns 0 or -1 after replying. */
static int
query_path(struct breq *b)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->req);
	struct sbx_err err;

	sbx_err_clear(&err);
	if (sbx_query_path(evhttp_uri_get_query(uri), SBX_QUERY_PATH, &b->path,
	    NULL, &err) == -1) {
		breq_fail(b, &err);
		return -1;
	}
	return 0;
}

static void
h_read(struct breq *b)
{
	struct sbx_sink sink = { read_start, read_output, read_exit, read_error,
	    b };
	struct sbx_err err;

	sbx_err_clear(&err);
	if (query_path(b) == -1)
		return;
	if ((b->chunk = evbuffer_new()) == NULL) {
		breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	if (fileop_admit(b) == -1)
		return;
	b->op = b->s->driver->ops->read(b->s->driver, b->id, b->path, &sink,
	    &err);
	if (b->op == NULL)
		breq_fail(b, &err);
	else
		fileop_watch(b);
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
	reply_json(b, 200, sbx_wire_written_encode(b->path, (int64_t)b->wsize),
	    "ok");
}

/* A driver without write_stream: the whole body, then write (bounded by
 * file_size_max as before adr/0018). */
static void
gather_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct breq *b = arg;
	struct sbx_err err;

	if (info->n_added == 0 || b->op != NULL ||
	    (uint64_t)evbuffer_get_length(buf) < b->wsize)
		return;
	evbuffer_remove_cb(buf, gather_cb, b);
	sbx_err_clear(&err);
	b->op = b->s->driver->ops->write(b->s->driver, b->id, b->path, b->mode,
	    buf, write_done, b, &err);
	if (b->op == NULL) {
		if (b->watching && b->conn != NULL) {
			stream_watch(b, b->conn, NULL);
			b->watching = 0;
		}
		breq_fail(b, &err);
	}
}

/* The body streams from the gate to the driver (adr/0018): the broker holds
 * at most the gate's window of it, the driver WRITE_OUT_MAX. */
static void
write_streamed(struct breq *b)
{
	struct evbuffer *src = sbx_gate_body_buffer(b->gbody);
	struct sbx_err err;

	sbx_err_clear(&err);
	b->wsize = sbx_gate_body_length(b->gbody);
	if (b->s->driver->ops->write_stream == NULL) {
		sbx_gate_body_window(b->gbody, (size_t)b->wsize);
		if (evbuffer_add_cb(src, gather_cb, b) == NULL) {
			breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
			return;
		}
		fileop_watch(b);
		sbx_gate_body_kick(b->gbody);
		if ((uint64_t)evbuffer_get_length(src) >= b->wsize) {
			struct evbuffer_cb_info info = { 0, 1, 0 };

			gather_cb(src, &info, b);
		}
		return;
	}
	b->op = b->s->driver->ops->write_stream(b->s->driver, b->id, b->path,
	    b->mode, src, b->wsize, write_done, b, &err);
	if (b->op == NULL) {
		breq_fail(b, &err);
		return;
	}
	fileop_watch(b);
	sbx_gate_body_kick(b->gbody);
}

static void
h_write(struct breq *b)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->req);
	struct evbuffer *in = evhttp_request_get_input_buffer(b->req);
	struct sbx_err err;
	char *mode = NULL;

	sbx_err_clear(&err);
	if (query_path(b) == -1)
		return;
	if (strcmp(b->path, SBX_WORK_DIR) == 0) {
		breq_fail_code(b, SBX_E_BAD_REQUEST, "A file path under /work is "
		    "needed, not /work itself.");
		return;
	}
	switch (sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_MODE,
	    &mode, NULL, &err)) {
	case -1:
		breq_fail(b, &err);
		return;
	case 1:
		if (sbx_wire_mode_decode(mode, &b->mode, &err) == -1) {
			free(mode);
			breq_fail(b, &err);
			return;
		}
		free(mode);
		break;
	default:
		break;
	}
	if (fileop_admit(b) == -1)
		return;
	if (b->gbody != NULL) {
		write_streamed(b);
		return;
	}
	/* Kept for the reply: the driver drains the body. */
	b->wsize = evbuffer_get_length(in);
	b->op = b->s->driver->ops->write(b->s->driver, b->id, b->path, b->mode,
	    in, write_done, b, &err);
	if (b->op == NULL)
		breq_fail(b, &err);
	else
		fileop_watch(b);
}

static void
list_done(void *arg, const struct sbx_err *err, const struct sbx_dirent *ents,
    size_t n, int truncated)
{
	struct breq *b = arg;
	char cursor[SBX_WIRE_CURSOR_MAX + 1];
	json_t *o;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if (!b->list_obj) {
		/* The array of v1: its first page only; the headers say so. */
		if ((o = sbx_wire_dirents_encode(ents, n)) == NULL) {
			breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
			return;
		}
		if (truncated && b->req != NULL) {
			cursor[0] = '\0';
			if (n > 0)
				sbx_wire_cursor_encode(ents[n - 1].name, cursor,
				    sizeof(cursor));
			evhttp_add_header(evhttp_request_get_output_headers(b->req),
			    "Sbx-List-Truncated", "true");
			evhttp_add_header(evhttp_request_get_output_headers(b->req),
			    "Sbx-List-Cursor", cursor);
		}
		reply_json(b, 200, o, "ok");
		return;
	}
	if ((o = sbx_wire_list_encode(ents, n, truncated)) == NULL) {
		breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	reply_json(b, 200, o, "ok");
}

/* ?cursor=: absent (0), empty or a cursor of list_done (1; b->after set),
 * or -1 after replying 400. */
static int
list_cursor(struct breq *b)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->req);
	struct sbx_err err;
	char name[SBX_PATH_SEGMENT_MAX + 1];
	char *cur = NULL;
	size_t len = 0;
	int r;

	sbx_err_clear(&err);
	r = sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_CURSOR, &cur,
	    &len, &err);
	if (r == -1) {
		breq_fail(b, &err);
		return -1;
	}
	if (r == 0)
		return 0;
	b->list_obj = 1;
	r = sbx_wire_cursor_decode(cur, len, name, &err);
	free(cur);
	if (r == -1) {
		breq_fail(b, &err);
		return -1;
	}
	if (name[0] != '\0' && (b->after = strdup(name)) == NULL) {
		breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
		return -1;
	}
	return 1;
}

static void
h_list(struct breq *b)
{
	struct sbx_list_page page;
	struct sbx_err err;

	sbx_err_clear(&err);
	if (query_path(b) == -1 || list_cursor(b) == -1)
		return;
	if (fileop_admit(b) == -1)
		return;
	page.after = b->after;
	page.limit = (size_t)b->s->cfg->list_max_entries;
	b->op = b->s->driver->ops->list(b->s->driver, b->id, b->path, &page,
	    list_done, b, &err);
	if (b->op == NULL)
		breq_fail(b, &err);
	else
		fileop_watch(b);
}

static int
status_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sbx_status *)a)->id,
	    ((const struct sbx_status *)b)->id);
}

static void
sandboxes_done(void *arg, const struct sbx_err *err,
    const struct sbx_status *sts, size_t n)
{
	struct breq *b = arg;
	struct sbx_status *sorted = NULL;
	json_t *arr;
	size_t i;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if ((arr = json_array()) == NULL) {
		breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	if (n > 0 && (sorted = malloc(n * sizeof(*sorted))) == NULL) {
		json_decref(arr);
		breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	if (n > 0) {
		memcpy(sorted, sts, n * sizeof(*sorted));
		qsort(sorted, n, sizeof(*sorted), status_cmp);
	}
	for (i = 0; i < n; i++)
		json_array_append_new(arr, status_json(b->s, &sorted[i]));
	free(sorted);
	reply_json(b, 200, arr, "ok");
}

static void
h_list_sandboxes(struct breq *b)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	b->op = b->s->driver->ops->list_sandboxes(b->s->driver, sandboxes_done,
	    b, &err);
	if (b->op == NULL)
		breq_fail(b, &err);
}

static void
health_done(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	struct breq *b = arg;
	struct sbx_health hv;
	int ok = err == NULL && h != NULL && h->ok;

	b->op = NULL;
	memset(&hv, 0, sizeof(hv));
	if (h != NULL)
		hv = *h;
	hv.ok = ok;
	if (err != NULL)
		snprintf(hv.reason, sizeof(hv.reason), "%s", err->message);
	if (err != NULL && is_runtime_code(err->code))
		broker_metrics_runtime_error(b->s->metrics, err->code);
	reply_json(b, 200, sbx_wire_health_encode(&hv, BROKER_VERSION,
	    b->s->driver->ops->name), ok ? "ok" : "degraded");
}

static void
h_health(struct breq *b)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	b->op = b->s->driver->ops->health(b->s->driver, health_done, b, &err);
	if (b->op == NULL)
		health_done(b, &err, NULL);
}

static void
h_metrics(struct breq *b)
{
	struct evbuffer *out = evbuffer_new();
	struct sbx_err err;
	int running, stopped, absent;

	running = broker_state_count_state(b->s->state, "running", &err);
	stopped = broker_state_count_state(b->s->state, "stopped", &err);
	absent = broker_state_count_state(b->s->state, "absent", &err);
	if (out == NULL || broker_metrics_render(b->s->metrics, out, running,
	    stopped, absent) == -1 || sbx_agent_metrics_render(out) < 0) {
		if (out != NULL)
			evbuffer_free(out);
		breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(b->req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(b->req, 200, "OK", out);
	b->req = NULL;
	evbuffer_free(out);
	breq_done(b, 200, "ok");
}

/* ------------------------------------------------------------------ */
/* Dispatch: the checks every request passes once, before any handler  */

/* Matches path against pattern; copies the {id} segment into id. */
static int
route_match(const char *pattern, const char *path, char *id, size_t idcap)
{
	const char *p = pattern, *q = path;
	size_t n;

	while (*p != '\0') {
		if (strncmp(p, "{id}", 4) == 0) {
			n = strcspn(q, "/");
			if (n == 0)
				return 0;
			if (n < idcap)
				snprintf(id, idcap, "%.*s", (int)n, q);
			else
				id[0] = '\0';   /* too long: invalid */
			p += 4;
			q += n;
			continue;
		}
		if (*p++ != *q++)
			return 0;
	}
	return *q == '\0';
}

static const char *
method_name(enum evhttp_cmd_type m)
{
	return m == EVHTTP_REQ_GET ? "GET" : m == EVHTTP_REQ_PUT ? "PUT" :
	    m == EVHTTP_REQ_POST ? "POST" : "DELETE";
}

/*
 * Finds the route of method + path; copies its {id} into id. When none
 * matches and allow is not NULL, allow gets the methods the path takes
 * ("" when the path is unknown).
 */
static const struct route *
route_find(enum evhttp_cmd_type method, const char *path, char *id,
    size_t idcap, char *allow, size_t allowcap)
{
	size_t i, len;

	if (allow != NULL)
		allow[0] = '\0';
	for (i = 0; path != NULL && i < NROUTES; i++) {
		memset(id, 0, idcap);
		if (!route_match(routes[i].pattern, path, id, idcap))
			continue;
		if (routes[i].method == method)
			return &routes[i];
		if (allow == NULL)
			continue;
		len = strlen(allow);
		snprintf(allow + len, allowcap - len, "%s%s", len ? ", " : "",
		    method_name(routes[i].method));
	}
	return NULL;
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

static enum sbx_gate_verdict
gate_check(void *arg, const struct sbx_gate_head *h, const char *path,
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
		r = route_find((enum evhttp_cmd_type)h->type, path, id,
		    sizeof(id), NULL, 0);
	*cap = route_cap(s, r);
	return SBX_GATE_PASS;
}

/* The gate's streaming hook: a file write's body goes to the handler as
 * it arrives (adr/0018). */
static int
gate_stream(void *arg, const struct sbx_gate_head *h, const char *path)
{
	const struct route *r;
	char id[64];

	(void)arg;
	r = route_find((enum evhttp_cmd_type)h->type, path, id, sizeof(id),
	    NULL, 0);
	return r != NULL && (r->flags & R_RAW);
}

static void
dispatch(struct evhttp_request *req, void *arg)
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
	b->req = req;
	b->name = "unknown";
	b->t0_mono = mono_ms();
	b->ts_ms = wall_ms();
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
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
		    allow);
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
		breq_fail_code(b, SBX_E_SHUTTING_DOWN, "The broker is shutting "
		    "down.");
		return;
	}
	if (r->flags & R_ID) {
		if (!sbx_id_valid(id)) {
			breq_fail_code(b, SBX_E_INVALID_ID, "Sandbox ids are 1 "
			    "to 63 of a-z, 0-9 and '-', starting with a letter "
			    "or digit.");
			return;
		}
		snprintf(b->id, sizeof(b->id), "%s", id);
		if ((b->sbx = bsbx_get(s, id)) == NULL) {
			breq_fail_code(b, SBX_E_INTERNAL, "Out of memory.");
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
		breq_fail_code(b, SBX_E_TOO_LARGE, "The file is larger than "
		    "%lld bytes.", s->cfg->file_size_max);
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
	r->handler(b);
}

/* The blocking job of x has ended: run what waited for it. */
static void
unpark(struct broker_server *s, struct bsbx *x)
{
	struct breq *b;

	while (x->blocker == NULL && (b = TAILQ_FIRST(&x->parked)) != NULL) {
		TAILQ_REMOVE(&x->parked, b, qlink);
		b->parked = 0;
		if (s->stopping || s->draining)
			breq_fail_code(b, SBX_E_SHUTTING_DOWN,
			    "The broker is shutting down.");
		else
			b->route->handler(b);
	}
}

/* ------------------------------------------------------------------ */
/* Internal jobs (the reaper's), in the per-id queue                   */

static void
job_begin(struct breq *b)
{
	b->job_start((struct broker_job *)b, b->job_arg);
}

int
broker_server_job(struct broker_server *s, const char *id,
    broker_job_fn start, void *arg, void (*arg_free)(void *),
    struct sbx_err *err)
{
	struct breq *b;

	if (!sbx_id_valid(id)) {
		if (arg_free != NULL)
			arg_free(arg);
		return sbx_err_set(err, SBX_E_INVALID_ID, "Invalid sandbox id.");
	}
	if ((b = calloc(1, sizeof(*b))) == NULL) {
		if (arg_free != NULL)
			arg_free(arg);
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	}
	b->s = s;
	b->internal = 1;
	b->name = "job";
	b->t0_mono = mono_ms();
	b->ts_ms = wall_ms();
	b->job_start = start;
	b->job_arg = arg;
	b->job_free = arg_free;
	snprintf(b->id, sizeof(b->id), "%s", id);
	TAILQ_INSERT_TAIL(&s->inflight, b, link);
	s->ninflight++;
	if ((b->sbx = bsbx_get(s, id)) == NULL) {
		breq_done(b, 500, SBX_E_INTERNAL);
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	}
	serial_enqueue(b, job_begin);
	return 0;
}

const char *
broker_job_id(const struct broker_job *job)
{
	return ((const struct breq *)job)->id;
}

unsigned
broker_job_others(const struct broker_job *job)
{
	const struct breq *j = (const struct breq *)job, *b;
	unsigned n = 0;

	TAILQ_FOREACH(b, &j->s->inflight, link)
		if (b != j && b->sbx == j->sbx)
			n++;
	return n;
}

void
broker_job_block(struct broker_job *job)
{
	struct breq *b = (struct breq *)job;

	b->sbx->blocker = b;
}

void
broker_job_set_op(struct broker_job *job, struct sbx_op *op)
{
	((struct breq *)job)->op = op;
}

void
broker_job_done(struct broker_job *job, const char *outcome)
{
	struct breq *b = (struct breq *)job;

	b->op = NULL;
	breq_done(b, 200, outcome);
}

int
broker_server_busy(struct broker_server *s, const char *id)
{
	struct bsbx *x;

	LIST_FOREACH(x, &s->sbxs, link)
		if (strcmp(x->id, id) == 0)
			return 1;
	return 0;
}

int
broker_server_draining(const struct broker_server *s)
{
	return s->draining || s->stopping;
}

struct broker_state *
broker_server_state(struct broker_server *s)
{
	return s->state;
}

struct broker_metrics *
broker_server_metrics(struct broker_server *s)
{
	return s->metrics;
}

struct sbx_driver *
broker_server_driver(struct broker_server *s)
{
	return s->driver;
}

const struct broker_config *
broker_server_config(const struct broker_server *s)
{
	return s->cfg;
}

struct event_base *
broker_server_base(struct broker_server *s)
{
	return s->base;
}

/* ------------------------------------------------------------------ */
/* Server life                                                         */

struct broker_server *
broker_server_new(struct event_base *base, const struct broker_config *cfg,
    struct sbx_driver *driver, const struct sbx_token *token,
    struct sbx_err *err)
{
	struct broker_server *s = NULL;
	long long maxbody;

	if (sodium_init() < 0) {
		sbx_err_set(err, SBX_E_INTERNAL, "libsodium cannot initialise.");
		return NULL;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL)
		goto oom;
	s->base = base;
	s->cfg = cfg;
	s->driver = driver;
	s->token = *token;
	TAILQ_INIT(&s->inflight);
	LIST_INIT(&s->sbxs);
	if ((s->state = broker_state_open(cfg->state_dir, err)) == NULL)
		goto fail;
	if ((s->metrics = broker_metrics_new()) == NULL ||
	    (s->allowlist = broker_config_allowlist(cfg)) == NULL ||
	    (s->http = evhttp_new(base)) == NULL)
		goto oom;
	maxbody = cfg->file_size_max > cfg->body_max ? cfg->file_size_max :
	    cfg->body_max;
	/* A backstop only: the gate refuses bodies over the route's cap with
	 * JSON, after authentication, before they are read. */
	evhttp_set_max_body_size(s->http, maxbody);
	{
		struct sbx_gate_limits lim = {
			.head_max = (size_t)cfg->head_max,
			.headers_max = (unsigned)cfg->headers_max,
			.header_timeout_ms = cfg->header_timeout,
			.max_connections = (unsigned)cfg->max_connections,
		};

		if ((s->gate = sbx_gate_new(base, s->http, &lim, gate_check, s,
		    err)) == NULL)
			goto fail;
		sbx_gate_set_stream(s->gate, gate_stream);
	}
	evhttp_set_timeout(s->http, HTTP_TIMEOUT_S);
	/* Every method reaches dispatch, so even a 405 needs the token. */
	evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
	    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT |
	    EVHTTP_REQ_PATCH);
	evhttp_set_gencb(s->http, dispatch, s);
	return s;
oom:
	sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
fail:
	broker_server_free(s);
	return NULL;
}

/* connect() to an existing unix socket: 1 when something answers. */
static int
unix_alive(const struct sockaddr_un *sun)
{
	int fd, alive;

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return 0;
	alive = connect(fd, (const struct sockaddr *)sun, sizeof(*sun)) == 0;
	close(fd);
	return alive;
}

static int
mkdir_parents(const char *path, mode_t mode)
{
	char buf[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *p;

	snprintf(buf, sizeof(buf), "%s", path);
	if ((p = strrchr(buf, '/')) == NULL || p == buf)
		return 0;
	*p = '\0';
	for (p = buf + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) == -1 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, mode) == -1 && errno != EEXIST)
		return -1;
	return 0;
}

static int
listen_unix(struct broker_server *s, const char *path, struct sbx_err *err)
{
	struct sockaddr_un sun;
	struct evconnlistener *lev;
	struct stat st;
	mode_t old;
	int fd = -1;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun.sun_path))
		return sbx_err_set(err, SBX_E_CONFIG, "listen path is longer "
		    "than %zu bytes.", sizeof(sun.sun_path) - 1);
	memcpy(sun.sun_path, path, strlen(path));
	if (mkdir_parents(path, 0750) == -1)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot create the "
		    "directory of %s: %s.", path, strerror(errno));
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return sbx_err_set(err, SBX_E_CONFIG, "%s exists and is "
			    "not a socket; not replacing it.", path);
		if (unix_alive(&sun))
			return sbx_err_set(err, SBX_E_CONFIG, "%s is in use by "
			    "another process.", path);
		unlink(path);   /* stale: nothing answers */
	}
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
	    0)) == -1)
		return sbx_err_set(err, SBX_E_INTERNAL, "socket: %s.",
		    strerror(errno));
	old = umask(0777 & ~(mode_t)s->cfg->socket_mode);
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		umask(old);
		sbx_err_set(err, SBX_E_CONFIG, "Cannot bind %s: %s.", path,
		    strerror(errno));
		close(fd);
		return -1;
	}
	umask(old);
	chmod(path, (mode_t)s->cfg->socket_mode);
	if ((s->unix_path = strdup(path)) == NULL) {
		close(fd);
		unlink(path);
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	}
	lev = evconnlistener_new(s->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE |
	    LEV_OPT_CLOSE_ON_EXEC, 128, fd);
	if (lev == NULL || (s->bound = evhttp_bind_listener(s->http,
	    lev)) == NULL) {
		if (lev != NULL)
			evconnlistener_free(lev);
		else
			close(fd);
		return sbx_err_set(err, SBX_E_INTERNAL, "Cannot listen on %s.",
		    path);
	}
	return 0;
}

static int
listen_tcp(struct broker_server *s, const char *spec, struct sbx_err *err)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char *end;
	long port;
	size_t hl;

	if (colon == NULL || colon == spec)
		return sbx_err_set(err, SBX_E_CONFIG, "listen must be "
		    "HOST:PORT or unix:PATH.");
	hl = (size_t)(colon - spec);
	if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']') {
		spec++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return sbx_err_set(err, SBX_E_CONFIG, "listen host is too long.");
	memcpy(host, spec, hl);
	host[hl] = '\0';
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535)
		return sbx_err_set(err, SBX_E_CONFIG, "listen port must be "
		    "0..65535.");
	if ((s->bound = evhttp_bind_socket_with_handle(s->http, host,
	    (unsigned short)port)) == NULL)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot listen on %s:%ld: "
		    "%s.", host, port, strerror(errno));
	if (getsockname(evhttp_bound_socket_get_fd(s->bound),
	    (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return 0;
}

int
broker_server_listen(struct broker_server *s, struct sbx_err *err)
{
	const char *l = s->cfg->listen;

	if (strncmp(l, "unix:", 5) == 0)
		return listen_unix(s, l + 5, err);
	return listen_tcp(s, l, err);
}

int
broker_server_port(const struct broker_server *s)
{
	return s->port;
}

unsigned
broker_server_inflight(const struct broker_server *s)
{
	return s->ninflight;
}

/* Grace period over: cancel whatever still runs (SPEC §7). */
static void
grace_over(evutil_socket_t fd, short what, void *arg)
{
	struct broker_server *s = arg;
	struct breq *b, *next;
	struct sbx_op *op;

	(void)fd;
	(void)what;
	s->stopping = 1;
	log_warn("shutdown grace period over; cancelling in-flight requests",
	    NULL);
	for (b = TAILQ_FIRST(&s->inflight); b != NULL; b = next) {
		next = TAILQ_NEXT(b, link);
		if (b->queued)
			continue;   /* failed by bsbx_kick when its turn comes */
		op = b->op;
		b->op = NULL;
		sbx_op_cancel(op);
		if (b->streaming && b->is_exec) {
			sbx_ndjson_error(b->chunk, SBX_E_SHUTTING_DOWN,
			    "The broker is shutting down.");
			stream_end(b, SBX_E_SHUTTING_DOWN);
		} else if (b->streaming)
			stream_abort(b, SBX_E_SHUTTING_DOWN);
		else
			breq_fail_code(b, SBX_E_SHUTTING_DOWN,
			    "The broker is shutting down.");
		/* Finishing b may have started/failed queued ones: restart. */
		next = TAILQ_FIRST(&s->inflight);
	}
}

static void
drain_finished(evutil_socket_t fd, short what, void *arg)
{
	struct broker_server *s = arg;

	(void)fd;
	(void)what;
	if (s->ninflight > 0 || s->drain_done == NULL)
		return;
	if (s->grace_ev != NULL)
		event_del(s->grace_ev);
	s->drain_done(s->drain_arg);
	s->drain_done = NULL;
}

void
broker_server_drain(struct broker_server *s, void (*done)(void *), void *arg)
{
	struct timeval tv;

	if (s->draining)
		return;
	s->draining = 1;
	s->drain_done = done;
	s->drain_arg = arg;
	if (s->bound != NULL) {
		evhttp_del_accept_socket(s->http, s->bound);
		s->bound = NULL;
	}
	if (s->unix_path != NULL)
		unlink(s->unix_path);
	log_info("draining", "in_flight", s->ninflight ? "yes" : "no", NULL);
	s->done_ev = event_new(s->base, -1, 0, drain_finished, s);
	s->grace_ev = evtimer_new(s->base, grace_over, s);
	if (s->done_ev == NULL || s->grace_ev == NULL) {
		/* Cannot wait politely: cancel now. */
		grace_over(-1, 0, s);
		if (done != NULL)
			done(arg);
		s->drain_done = NULL;
		return;
	}
	tv.tv_sec = s->cfg->shutdown_grace / 1000;
	tv.tv_usec = (s->cfg->shutdown_grace % 1000) * 1000;
	evtimer_add(s->grace_ev, &tv);
	event_active(s->done_ev, 0, 0);
}

void
broker_server_free(struct broker_server *s)
{
	struct breq *b;
	struct sbx_op *op;

	if (s == NULL)
		return;
	s->stopping = 1;
	/* Any request still here is abandoned: cancel its driver op. */
	while ((b = TAILQ_FIRST(&s->inflight)) != NULL) {
		op = b->op;
		b->op = NULL;
		sbx_op_cancel(op);
		if (b->streaming && b->req != NULL) {
			stream_watch(b, b->conn, NULL);
			b->req = NULL;   /* freed with the connection by evhttp_free */
		}
		b->req = NULL;
		breq_done(b, 503, SBX_E_SHUTTING_DOWN);
	}
	if (s->http != NULL)
		evhttp_free(s->http);   /* frees every bound gate (gate_closed) */
	sbx_gate_free(s->gate);
	if (s->unix_path != NULL && !s->draining)
		unlink(s->unix_path);
	free(s->unix_path);
	if (s->grace_ev != NULL)
		event_free(s->grace_ev);
	if (s->done_ev != NULL)
		event_free(s->done_ev);
	broker_state_close(s->state);
	broker_metrics_free(s->metrics);
	free(s->allowlist);
	sbx_token_clear(&s->token);
	free(s);
}
