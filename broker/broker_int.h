/* broker_int.h - inside the broker's HTTP server: the server, a request, the per-id queues, and the request layer that handlers call; one direction only: broker_server.c -> broker_http.c (routes) -> handlers -> broker_req.c -> broker_queue.c (adr/0022, adr/0036). */
#ifndef BROKER_INT_H
#define BROKER_INT_H

#include <sys/queue.h>

#include <stdint.h>

#include <jansson.h>

#include "broker.h"
#include "broker_quota.h"
#include "broker_reaper.h"
#include "sbx_gate.h"
#include "sbx_httpd.h"
#include "sbx_ndjson.h"
#include "sbx_wire.h"

struct broker_state;
struct broker_metrics;

/* Idle keep-alive / request read timeout of ordinary requests, seconds. */
#define HTTP_TIMEOUT_S 60

/* Route flags. */
#define R_ID      0x01  /* pattern has {id}: validated before the handler */
#define R_JSON    0x02  /* body is JSON (object), at most body_max bytes */
#define R_RAW     0x04  /* body is raw bytes, at most file_size_max */
#define R_SERIAL  0x08  /* runs in the id's queue (ensure, stop, destroy) */

struct breq;
struct blink;
struct sbx_list_out;

/*
 * A handler, or a serialised start. Returns 0 when the request goes on
 * (queued, a driver op started, or it was answered already: b may be freed
 * then, so the caller does not touch it), or -1 with err set and nothing
 * sent: the caller fails b with err (breq_run). The one way out of every
 * handler is its return.
 */
typedef int (*handler_fn)(struct breq *b, struct sbx_err *err);

/* One row of the route table (broker_http.c); rows begin with the core's. */
struct route {
	struct sbx_httpd_route r;  /* method (enum evhttp_cmd_type), pattern */
	const char *name;          /* audit op and metrics label */
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
	unsigned ports;           /* PORT sessions open (max_port_sessions_per_sandbox) */
	unsigned refs;
	int kicking;
	/* Set by a stop or destroy request when it starts, cleared by the next
	 * ensure: the sentence an exec or session of this sandbox that ends
	 * with not_running or not_found meanwhile reports instead of the
	 * driver's (static; NULL: none). */
	const char *ending;
};

struct broker_server {
	struct event_base *base;
	const struct broker_config *cfg;
	struct sbx_driver *driver;
	struct sbx_token token;
	struct evhttp *http;
	struct sbx_httpd_listener listener;
	struct broker_state *state;
	struct broker_metrics *metrics;
	struct broker_quota *quota;  /* /work figures, soft quota (adr/0057) */
	const char **allowlist;
	/* The route table (broker_http.c), set by broker_server_new: the
	 * request layer reaches a handler only through it. */
	const struct route *routes;
	size_t nroutes;
	TAILQ_HEAD(, breq) inflight;
	unsigned ninflight;
	LIST_HEAD(, bsbx) sbxs;
	struct sbx_gate *gate;    /* heads checked before bodies (sbx_gate.h) */
	unsigned pending_new;     /* ensures of new ids under way */
	int draining, stopping;
	struct sbx_httpd_drain drain;
	struct event *heap_quiet;  /* freed heap back when quiet (sbx_heap_quiet) */
};

/* The refusal of a command past max_execs_per_sandbox (execs and
 * sessions count together): %s the sandbox id, %lld the limit. */
#define BROKER_MSG_COMMANDS_FULL "Sandbox %s already runs its maximum of " \
    "%lld commands (execs and terminals together); one has to end first."

/* One request being answered. */
struct breq {
	struct sbx_httpd_req h;   /* the core's part: evhttp request, stream */
	TAILQ_ENTRY(breq) link;   /* server inflight */
	TAILQ_ENTRY(breq) qlink;  /* bsbx queue */
	struct broker_server *s;
	const struct route *route;
	const char *name;         /* route name or "unknown" */
	char *egress_allow;       /* ensure: the allowlist, '\n'-joined (adr/0026) */
	int authed;               /* passed the bearer check: audited */
	char id[64];
	struct bsbx *sbx;
	struct sbx_op *op;
	struct sbx_gate_body *gbody;  /* write: its streamed body (adr/0018) */
	/* What a handler hung on b's body or reply lets go (a streamed
	 * write under way, a list page being encoded): called once,
	 * before b is freed. NULL: nothing. */
	void (*detach)(struct breq *b);
	handler_fn serial_start;
	int queued;
	int64_t t0_mono, ts_ms;
	int holds_exec, holds_new, holds_fileop;
	int holds_port;           /* counted in its sandbox's ports */
	int list_obj;             /* list: ?cursor= given, reply is the page object */
	char *after;              /* list: the cursor's name */
	struct sbx_list_out *lout;/* list: its reply being encoded (adr/0030) */
	/* parsed input, owned */
	json_t *body;
	struct sbx_spec spec;
	struct sbx_wire_exec x;   /* exec body (sbx_wire.h); x.req for the driver */
	char *path;
	uint32_t mode;
	size_t wsize;             /* bytes written */
	/* streams */
	int is_exec;
	int exec_counted;
	int64_t exec_t0;          /* monotonic ms of the exec's start event */
	/* exec: its exit, held while /work is counted at its end (adr/0057) */
	struct sbx_exit held_exit;
	char held_signal[16];
	int parked;               /* waits in sbx->parked */
	/* an internal job (the reaper's): no HTTP request, no reply */
	int internal;
	broker_job_fn job_start;
	void (*job_free)(void *);
	void *job_arg;
	struct sbx_utf8_hold hold[2]; /* exec stdout/stderr split characters */
	char exec_id[64];
	struct blink *slink;      /* session: its link (broker_session.c) */
	/* A session whose api said whether it has a viewer (CTRL viewers,
	 * adr/0051 amendment): while it has none, the session is use of the
	 * sandbox for the reaper only as of sess_active_ms (wall ms of the
	 * last byte either way, or of the last viewer leaving), and its end
	 * touches last_used_at with that time, not now. */
	int sess_quiet;           /* upgraded, told "no viewer" */
	int64_t sess_active_ms;
	/* Ends a quiet session because the reaper stops its sandbox: the api
	 * gets the error event (code, why), the process tree is killed. */
	void (*sess_reap)(struct breq *b, const char *code, const char *why);
};

/* ---- broker_req.c: the request layer, what handlers call ---- */

/*
 * A new request of s, in flight from now until breq_done ends it (the
 * drain waits for it): name "unknown", clocks started. NULL: out of
 * memory.
 */
struct breq *breq_new(struct broker_server *s);

/* Ends b: audit, metrics, log, queue advance, free. The reply has been
 * sent (status is what was sent). */
void breq_done(struct breq *b, int status, const char *outcome);

/* Sends obj (stolen) as b's JSON reply, then ends b. */
void breq_reply_json(struct breq *b, int status, json_t *obj,
    const char *outcome);
/* breq_reply_json for a JSON text encoded already (drained; the evbuffer
 * stays the caller's), e.g. a list page encoded in slices (adr/0030). */
void breq_reply_json_text(struct breq *b, int status, struct evbuffer *text,
    const char *outcome);

/*
 * The error an exec or session of b's sandbox that was running (streaming,
 * upgraded; the caller checks: a request refused before it ran keeps the
 * driver's sentence) reports: err itself, or, when err is not_running or
 * not_found and a stop or destroy request of the sandbox is why
 * (bsbx.ending), a copy in *tmp with that sentence and the same code.
 * Returns err or tmp (borrowed; tmp is the caller's).
 */
const struct sbx_err *breq_err_why(const struct breq *b,
    const struct sbx_err *err, struct sbx_err *tmp);

/* Sends err as b's JSON error (sbx_httpd_reply_error), then ends b. */
void breq_fail(struct breq *b, const struct sbx_err *err);
void breq_fail_code(struct breq *b, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Runs fn on b; fails b with fn's error when it returns -1. */
void breq_run(struct breq *b, handler_fn fn);

/*
 * Runs start on b (as breq_run) once no other serialised operation of
 * b's sandbox runs: ensure, stop, destroy and the broker's own jobs go
 * one at a time per id, in the order they came (adr/0006). b->sbx is
 * set. When its turn comes after the drain's grace period, b fails
 * shutting_down instead.
 */
void breq_enqueue(struct breq *b, handler_fn start);

/* Streams of b (sbx_httpd.h): begin returns -1 after ending b (the client
 * went already). */
int breq_stream_begin(struct breq *b, const char *ctype);
void breq_stream_flush(struct breq *b);
void breq_stream_end(struct breq *b, const char *outcome);
void breq_stream_abort(struct breq *b, const char *outcome);

/* From now on a client that goes away ends b (its op is cancelled). */
void breq_watch(struct breq *b);

/* 1 for the codes counted as runtime errors in /metrics. */
int broker_is_runtime_code(const char *code);

/*
 * Validators: 0, or -1 with err set; they never reply and never free b.
 * body_object: b's body is one JSON object whose members are all in
 * allowed (NULL-ended); *out gets it (owned by the caller).
 */
int broker_body_object(struct breq *b, const char *const *allowed,
    int empty_ok, json_t **out, struct sbx_err *err);
/* v within max (limit_exceeded naming the field). */
int broker_within(int64_t v, int64_t max, const char *name,
    struct sbx_err *err);

/* ---- broker_req.c: what the server hands to the HTTP core ---- */

/* evhttp's callback for every request: the checks in dispatch order, then
 * the handler of the route's row in s->routes. */
void broker_dispatch(struct evhttp_request *req, void *arg);

/* The gate's hooks (sbx_gate.h): token and body cap; streamed bodies. */
enum sbx_gate_verdict broker_gate_check(void *arg,
    const struct sbx_gate_head *h, const char *path, uint64_t *cap);
int broker_gate_stream(void *arg, const struct sbx_gate_head *h,
    const char *path);

/* ---- broker_queue.c: per-id queues, below the request layer ---- */

/* The entry of id while a request names it, or NULL; not referenced. */
struct bsbx *bsbx_find(struct broker_server *s, const char *id);
/* The entry of id (made on first use), referenced; NULL: out of memory. */
struct bsbx *bsbx_get(struct broker_server *s, const char *id);
/* Drops a reference; frees x at the last. NULL ok. */
void bsbx_put(struct bsbx *x);
/* b waits at the end of x's queue (b->queued). */
void bsbx_push(struct bsbx *x, struct breq *b);
/* The first of x's queue, taken out and made x's running operation; NULL
 * while one runs or none waits. */
struct breq *bsbx_next(struct bsbx *x);
/* b waits for x's blocking job to end (b->parked). */
void bsbx_park(struct bsbx *x, struct breq *b);
/* The first parked request of x, taken out; NULL while a job blocks x or
 * none waits. */
struct breq *bsbx_next_parked(struct bsbx *x);

/* What b gave up when it left x (bsbx_leave). */
#define BSBX_BLOCK 0x01   /* it was x's blocking job: parked ones may run */
#define BSBX_TURN  0x02   /* it was x's running operation: the next may */
/* b ends: it leaves x's queue or parked list and gives up x's block and
 * turn when it held them. Returns BSBX_* of what it gave up (0: none). */
unsigned bsbx_leave(struct bsbx *x, struct breq *b);

/* ---- the handlers, for the route table only ---- */

/* broker_exec.c */
int h_exec(struct breq *b, struct sbx_err *err);
/* broker_session.c */
int h_session(struct breq *b, struct sbx_err *err);
/* broker_files.c */
int h_read(struct breq *b, struct sbx_err *err);
int h_write(struct breq *b, struct sbx_err *err);
int h_list(struct breq *b, struct sbx_err *err);
/* broker_snap.c (adr/0068) */
int h_snap_create(struct breq *b, struct sbx_err *err);
int h_snap_list(struct breq *b, struct sbx_err *err);
int h_snap_list_all(struct breq *b, struct sbx_err *err);
int h_snap_delete(struct breq *b, struct sbx_err *err);
int h_snap_copy(struct breq *b, struct sbx_err *err);

/* ---- broker_http.c: the route table, for broker_server_new ---- */

extern const struct route broker_routes[];
extern const size_t broker_nroutes;

#endif
