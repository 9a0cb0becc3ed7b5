/* api_int.h - internals shared by the files of sandbox-api's HTTP server (not a public header). */
#ifndef API_INT_H
#define API_INT_H

#include <stddef.h>
#include <stdint.h>

#include <event2/util.h>
#include <jansson.h>

#include "api.h"
#include "api_metrics.h"
#include "api_store.h"
#include "sbx_driver.h"
#include "sbx_err.h"
#include "sbx_gate.h"
#include "sbx_httpd.h"

struct evhttp;
struct evhttp_request;
struct evhttp_connection;
struct evhttp_bound_socket;
struct evbuffer;
struct event;

/* Per-principal limit state, kept in memory (lost on restart, by design). */
struct api_limit {
	int64_t principal_id;
	double tokens;            /* token bucket for requests per minute */
	int64_t refilled_ms;      /* monotonic ms of the last refill */
	unsigned execs;           /* exec streams open now */
	unsigned fileops;         /* reads, writes, lists in flight */
	unsigned streams;         /* open streams (api_streams_take) */
	unsigned conns;           /* connections marked as its (api_conns_admit) */
	struct api_limit *next;
};

struct areq;
struct api_exec;
struct ax_viewer;
struct api_ports;
struct api_port_conn;
struct api_e2b;
struct api_viewer;
struct api_term;
struct ax_list_out;
struct api_connect_call;
struct e2b_proc;
struct api_e2b_watch;
struct api_e2b_upload;
struct api_browsers;
struct api_bcall;

/* Entries a list asks the broker for (its own list_max_entries may be lower). */
#define API_LIST_MAX_ENTRIES 10000

struct api_server {
	struct event_base *base;
	const struct api_config *cfg;
	struct sbx_driver *driver;
	struct api_store *store;
	struct evhttp *http;
	struct sbx_httpd_listener listener;   /* cfg->listen (sbx_httpd.h) */
	struct sbx_gate *gate;      /* heads checked before bodies (sbx_gate.h) */
	int port;
	struct api_limit *limits;
	struct areq *live;          /* requests being answered */
	unsigned inflight;
	int draining;
	struct sbx_httpd_drain drain;  /* the core's (sbx_httpd.h) */
	int64_t (*now_ms)(void);
	struct api_metrics metrics;
	/* Resource execs (api_execs.c). */
	struct api_exec *execs;     /* newest first */
	unsigned nexecs;
	uint64_t log_total;         /* bytes of all exec logs on disk */
	char *execs_dir;            /* state_dir/execs */
	unsigned char ticket_key[32];
	struct event *sweep_ev;     /* retention sweep */
	struct event *trim_ev;      /* freed heap back to the system (api_req.c) */
	struct event *heap_quiet;   /* the same once no request ended for a while (sbx_heap_quiet) */
	char *console_csp;          /* script-src of /console: the hash of its one script */
	/* Terminals (api_term*.c, adr/0051). */
	struct api_term *terms;     /* newest first */
	char *terms_dir;            /* state_dir/terms */
	struct event *terms_sweep;  /* retention and record bounds */
	/* The ports proxy (api_ports*.c, adr/0053). */
	unsigned char port_key[32]; /* signs previews and port tickets */
	struct api_ports *ports;    /* open tunnels, byte counts */
	/* The E2B layer (api_e2b*.c, adr/0059): records, deadline reaper. */
	struct api_e2b *e2b;
	/* E2B's processes (api_e2b_process.c, adr/0060). */
	struct e2b_proc *e2b_procs; /* newest first */
	uint32_t e2b_next_pid;      /* the pid the next one gets */
	/* E2B's watches: WatchDir streams and watchers (api_e2b_fs.c, adr/0061). */
	struct api_e2b_watch *e2b_watches;
	/* Browsers seen running (api_browser.c, adr/0064). */
	struct api_browsers *browsers;
};

/* The sentence a player gets when asking for egress (SPEC §8); %s: NPC. */
#define API_EGRESS_FORBIDDEN "Network egress is granted by an operator; " \
	"ask an operator to run `sbxctl egress grant %s`."

/* Flags of a route. */
#define R_AUTH     0x01  /* needs a principal (every /api/v1 route, /metrics) */
#define R_NPC      0x02  /* path has {npc}: loaded and ownership-checked */
#define R_JSON     0x04  /* body is a JSON object, at most body_max bytes */
#define R_JSON_OPT 0x08  /* like R_JSON, but an empty body is fine */
#define R_RAW      0x10  /* raw body up to file_size_max (file write) */
#define R_OPERATOR 0x20  /* operators only: players get 403 */
#define R_MUTATING 0x40  /* written to the audit table */
#define R_WAKES    0x80  /* uses the sandbox: a stopped one is started first */
#define R_EXEC     0x100 /* path has an exec id ("*"): [a-z0-9]{1,39}, else 404 */
#define R_BYTES    0x200 /* raw body gathered whole, at most terminal_input_max */
#define R_PORT     0x400 /* the ports proxy: "{port}" is the second capture
                          * (into exec_id); the body, up to port_body_max,
                          * is forwarded; no requests_per_minute (the
                          * connection cap governs) */
#define R_PREVIEW  0x800 /* the credential and the NPC come from a preview
                          * token (/p/{token}/ or a preview Host) */
#define R_E2B      0x1000 /* E2B's control plane (api_e2b.c): X-API-Key,
                           * errors in E2B's {"code","message"} shape */
#define R_ENVD     0x2000 /* an E2B sandbox's envd or port (api_e2b_route.c):
                           * the access token is the credential, the NPC
                           * and port come from E2b-Sandbox-Id/-Port or
                           * the Host {port}-{id}.{e2b_domain} */

/*
 * A handler (adr/0035, the broker's shape): returns 0 when the request goes
 * on (a driver op started) or was answered (a is freed then: the caller
 * does not touch it), or -1 with err set and nothing sent: areq_run then
 * fails a with err, the one way out of every handler.
 */
typedef int (*api_handler_fn)(struct areq *a, struct sbx_err *err);

/*
 * A route's own authentication, instead of "Authorization: Bearer KEY"
 * (e.g. a ticket in the query). npc and id are what the route's "{npc}"
 * and "*" matched ("" when absent or too long; not checked yet); query is
 * the request's query string (not decoded) or NULL; authorization is the
 * Authorization value or NULL. Runs twice per request: in the gate with final 0, before
 * any body byte is read (inside the socket read: no blocking work beyond an
 * indexed sqlite lookup), then in api_dispatch with final 1 — a single-use
 * credential is consumed only then. Returns 1 with *who filled, 0 when the
 * credential is absent or not good (401), -1 on a database error (500).
 */
typedef int (*api_auth_fn)(struct api_server *s, const char *npc,
    const char *id, const char *query, const char *authorization, int final,
    struct api_principal *who);

/* One row of the route table (api_http.c); rows begin with the core's. */
struct api_route {
	struct sbx_httpd_route r;  /* method (enum evhttp_cmd_type), pattern:
	                            * "{npc}" the NPC, "*" an exec id */
	api_handler_fn handler;
	unsigned flags;
	const char *action;        /* audit/log name, e.g. "sandbox.ensure" */
	/* Audit names of what the request turned out to do, picked by the
	 * handler with a->audit_pick 1 or 2 (e.g. "egress.revoke",
	 * "egress.grant"); NULL or pick 0: action. */
	const char *audit[2];
	/* Its own credential instead of the bearer key, or NULL. */
	api_auth_fn auth;
	/* R_OPERATOR: the 403 sentence for a player (%s: the NPC's name), or
	 * NULL for "Only an operator may do this." */
	const char *forbidden;
};

/* One request being answered. */
struct areq {
	struct sbx_httpd_req h;             /* the core's part: evhttp request,
	                                     * stream, watch (sbx_httpd.h) */
	struct api_server *s;
	const struct api_route *route;
	struct api_principal who;
	int authed;
	struct api_npc npc;
	int has_npc;
	json_t *body;                       /* parsed JSON body or NULL */
	struct sbx_op *op;                  /* driver operation in flight */
	struct api_limit *lim;
	int exec_counted;
	int fileop_counted;
	int list_obj;             /* list: ?cursor= given, reply is the page object */
	int64_t started_ms;
	const char *label;                  /* metrics route when route is NULL */
	int exec_started;                   /* counted in execs_started */
	int64_t exec_started_ms;            /* monotonic */
	struct ax_viewer *viewer;          /* GET .../events being streamed */
	struct api_viewer *tviewer;         /* GET .../terminals/{id}/output */
	struct api_term *tcreate;           /* POST .../terminals waiting for start */
	char exec_id[40];                   /* {id} of .../execs/{id}... routes
	                                     * ({port} of ports routes) */
	int port;                           /* R_PORT, R_PREVIEW: 1..65535 */
	char preview[64];                   /* R_PREVIEW: the token ("" none) */
	int preview_host;                   /* R_PREVIEW: from the Host */
	struct api_port_conn *pconn;        /* the proxy's tunnel until hand-off */
	void *bview;                        /* a screenshot being taken (api_browser_view.c) */
	int sse_counted;                    /* counted in sse_clients */
	/* an SSE stream's heartbeat (areq_stream_begin with a->sse) */
	struct event *ping;
	int sse;
	uint64_t sse_id;
	/* scratch */
	char *path;
	uint32_t mode;
	int egress;
	/* PUT .../egress: the grant before it equals the new one; the
	 * sandbox before its ensure (created_at, egress, running), so the
	 * reply says what the ensure changed ("change", docs/api.md) */
	int same_grant;
	int64_t was_created_ms;
	int was_egress, was_running;
	int audit_pick;                     /* 0, or 1/2: route->audit[pick-1] */
	char *audit_detail;                 /* what the audit row records (owned), or NULL */
	int set_image;
	int slot_claimed;                   /* this ensure took a sandbox slot */
	int snap_turn;                      /* this snapshot create holds its
	                                     * owner's turn (api_snap.c) */
	int broker_err;                     /* the handler's err is the driver's
	                                     * (areq_broker_err) */
	unsigned char *stdin_data;
	size_t stdin_len;
	/*
	 * Hooks of the files that own a request's later life (NULL: none); the
	 * request layer calls only these, never a handler file by name.
	 * on_end runs in areq_finish before a is freed. on_shutdown ends a
	 * started stream when shutdown_grace is over (default: the stream is
	 * cut). on_pause(a, 1/0): the client's output is over/under the high
	 * water mark (default: a->op is paused/resumed). wake: set by dispatch
	 * for a request that ran before any status read; a not_running from
	 * the broker before its stream started goes there once instead of
	 * being the answer (adr/0033).
	 */
	void (*on_end)(struct areq *a);
	void (*on_shutdown)(struct areq *a);
	void (*on_pause)(struct areq *a, int on);
	void (*wake)(struct areq *a);
	/* Another protocol's error body (the E2B layer's): areq_fail sends
	 * encode(err, status) instead of sbx's error object (NULL: sbx's). */
	json_t *(*err_encode)(const struct sbx_err *e, int status);
	/* api_ensure_start's caller: gets the status once the slot and image
	 * bookkeeping of the ensure is done (NULL: the status reply). */
	void (*ensured)(struct areq *a, const struct sbx_err *err,
	    const struct sbx_status *st);
	/* The ports proxy reached by another route (R_ENVD): the path's
	 * first port_skip bytes are the route's, not the port's. */
	int port_route;
	size_t port_skip;
	int64_t e2b_ms;                     /* E2B connect: its timeout, ms */
	/* A file write's streamed body (sbx_gate.h) and what uses it
	 * (api_files.c, adr/0030). */
	struct sbx_gate_body *gbody;
	uint64_t wsize;                     /* its Content-Length, bytes */
	struct api_spool *spool;            /* a chunked one's file (api_files.c) */
	struct api_e2b_upload *upload;      /* E2B's POST /files (api_e2b_files.c) */
	int close_after;                    /* the reply closes the connection */
	int stream_counted;                 /* holds one of who's stream slots */
	struct sbx_list_out *lout;          /* a list reply being encoded */
	struct ax_list_out *xlist;          /* a list of execs being encoded
	                                     * (api_execs_view.c, adr/0048) */
	struct api_connect_call *connect;   /* the Connect call a answers
	                                     * (api_connect.c, adr/0060) */
	struct api_bcall *bcall;            /* a browser route's exec
	                                     * (api_browser.c, adr/0064) */
	struct areq *prev, *next;
};

/* api_files.c (adr/0030): a->gbody (set; a->path, a->mode, a->npc too)
 * goes to the driver's write_stream as it arrives, the gate reading the
 * client only as fast as the broker takes it (a driver without
 * write_stream gets the body gathered by the call layer, sbx_call.h);
 * done is the driver's callback (done(a, err)); a client that leaves
 * meanwhile cancels the write, or its gather, and finishes a (499
 * cancelled). A handler's tail: returns 0
 * (started) or -1 with err, nothing sent. */
int api_write_stream(struct areq *a, sbx_done_cb done, struct sbx_err *err);
/* api_files.c: an unnamed file in dir for a body held on disk (O_TMPFILE,
 * else a file unlinked at once; adr/0056, adr/0061): an owned read-write
 * descriptor, or -1 with errno. */
int api_spool_open(const char *dir);
/*
 * api_streams.c (adr/0056): a principal's shares of the shared pools.
 *
 * api_limit_get: principal_id's limits record (made at first use, kept for
 * the api's life); NULL when out of memory.
 *
 * api_streams_take: takes one of principal_id's streams_per_principal
 * (64) slots for a stream that stays open (an SSE viewer of an exec, a
 * terminal, a port connection: every long-lived stream of a principal
 * calls it before it starts, and api_streams_put exactly once when it
 * ends). Returns 0, or -1 with err: too_many (429; the reply gets
 * Retry-After: 1 from the core's table) with a sentence, or internal (out
 * of memory). Counts only; the caller owns the stream.
 *
 * api_streams_put: gives one back (never below 0).
 *
 * api_conns_admit: a request of an authenticated principal (a->lim set):
 * its connection becomes one of the principal's (a mark on the gate's
 * connection, cleared when it closes: api_conns_unmark, the gate's unmark
 * hook). When the principal already holds connections_per_principal
 * (default max_connections/8) connections, -1 with err too_many and
 * a->close_after set (the reply closes the connection). A connection used
 * before by another principal (a proxy's keep-alive) moves to this one.
 */
struct api_limit *api_limit_get(struct api_server *s, int64_t principal_id);
int api_streams_take(struct api_server *s, int64_t principal_id,
    struct sbx_err *err);
void api_streams_put(struct api_server *s, int64_t principal_id);
int api_conns_admit(struct areq *a, struct sbx_err *err);
void api_conns_unmark(void *arg, int64_t principal_id);

/* api_req.c: a request that moved a file's body ended: the heap it freed
 * goes back to the system shortly (malloc_trim, at most once per 200 ms),
 * so RSS returns after big requests (issue 24 M2, adr/0056). */
void areq_trim_later(struct api_server *s);
/* api_req.c: frees what areq_trim_later armed (server free). */
void api_req_trim_close(struct api_server *s);
/* api_files.c: a list page's reply (a->list_obj: the page object, else the
 * v1 array with the Sbx-List-* headers), encoded in slices of
 * SBX_LIST_SLICE entries, one per turn of the event loop, then sent whole
 * (adr/0030, sbx_list_out.h). ents are copied. Ends in exactly one reply. */
void api_list_reply(struct areq *a, const struct sbx_dirent *ents, size_t n,
    int truncated);

/* api_req.c: the life of a request. Every request is made by areq_new and
 * ends exactly once in areq_finish, called by the reply functions below
 * (after them a is freed: do not touch it). */
/* A request of s for req, linked into s->live and counted in s->inflight;
 * NULL when out of memory. */
struct areq *areq_new(struct api_server *s, struct evhttp_request *req);
/* Runs fn on a; fails a with fn's error when it returns -1 (a driver's
 * error, areq_broker_err, through areq_fail_broker). */
void areq_run(struct areq *a, api_handler_fn fn);
/* For a handler whose driver call did not start (err set by the driver):
 * marks err as the broker's. Returns -1. */
int areq_broker_err(struct areq *a);
void areq_reply_json(struct areq *a, int status, json_t *obj);  /* steals obj */
/* areq_reply_json for a JSON text encoded already (drained). */
void areq_reply_json_text(struct areq *a, int status, struct evbuffer *text);
/* A whole non-JSON reply (sbx_httpd_reply_body): body drained, may be
 * NULL; ctype NULL: no Content-Type. Then finishes a ("ok"). */
void areq_reply_body(struct areq *a, int status, const char *ctype,
    struct evbuffer *body);
/* Replies with the JSON error of err (status from sbx_err_http_status),
 * then finishes a. The one error replier. */
void areq_fail(struct areq *a, const struct sbx_err *err);
void areq_fail_code(struct areq *a, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* areq_fail for an error the driver (the broker) gave: also counted in
 * sbx_api_broker_errors_total by its code. Except once, for a request
 * with a->wake: not_running before its stream started goes to a->wake
 * instead. */
void areq_fail_broker(struct areq *a, const struct sbx_err *err);
/* Audit (R_MUTATING rows, action from the row), metrics, log, limits
 * given back, the on_end hook, free. The reply has been sent (or the
 * connection is gone). */
void areq_finish(struct areq *a, int status, const char *outcome);
/*
 * A read, write or list of the principal may start: at most
 * max_file_ops_per_principal at once (api config). Returns 0 (counted,
 * given back by areq_finish), or -1 with err too_many (429, Retry-After).
 */
int api_fileop_admit(struct areq *a, struct sbx_err *err);
/* Streamed replies (200, chunked) over the core (sbx_httpd.h): begin sends
 * the head with Content-Type ctype; a->sse adds heartbeats; high_water is
 * the bytes queued for the client above which a->op is paused (on_pause).
 * It returns -1 after ending a (the client went: 499; out of memory: 500),
 * a->op cancelled. flush sends a->h.chunk; a client gone cancels a->op and
 * finishes a (cancelled). end closes the body normally, abort cuts it;
 * both finish a. */
int areq_stream_begin(struct areq *a, const char *ctype, size_t high_water);
void areq_stream_flush(struct areq *a);
/* A file's bytes as an octet-stream reply: begins the stream (high_water as
 * above) before the first bytes, counts them in the stream metrics, queues
 * and flushes them. A client gone, or a failed begin, ends a as begin and
 * flush say; the bytes are then dropped. */
void areq_stream_bytes(struct areq *a, const unsigned char *buf, size_t len,
    size_t high_water);
void areq_stream_end(struct areq *a, const char *outcome);
void areq_stream_abort(struct areq *a, const char *outcome);
/* Watches a's connection until its reply: a client that goes away
 * meanwhile cancels a->op and finishes a (499 cancelled). */
void areq_watch(struct areq *a);
/* Re-arms the SSE heartbeat: it is sent after heartbeat ms of silence. */
void areq_ping_arm(struct areq *a);
/* Server drain (api_server_drain, over the core's sbx_httpd_drain):
 * in_flight counts what is open, grace_over (shutdown_grace is over)
 * cancels what runs and ends each request shutting_down (SPEC §9); arg is
 * the struct api_server. */
unsigned api_req_in_flight(void *arg);
void api_req_grace_over(void *arg);
/* The server is freed: ends every live request without a reply or an
 * audit row (its op cancelled, its connection left to evhttp_free). */
void api_req_abandon_all(struct api_server *s);

/* The handlers (api_handler_fn, rows of the route table in api_http.c).
 * api_sandbox.c: NPCs, sandboxes, file write and list, egress, metrics. */
int api_h_npc_create(struct areq *a, struct sbx_err *err);
int api_h_npc_list(struct areq *a, struct sbx_err *err);
int api_h_whoami(struct areq *a, struct sbx_err *err);
int api_h_ensure(struct areq *a, struct sbx_err *err);
int api_h_status(struct areq *a, struct sbx_err *err);
int api_h_destroy(struct areq *a, struct sbx_err *err);
int api_h_write(struct areq *a, struct sbx_err *err);
int api_h_list(struct areq *a, struct sbx_err *err);
int api_h_stop(struct areq *a, struct sbx_err *err);
int api_h_egress(struct areq *a, struct sbx_err *err);
/* GET .../egress (adr/0026): the grant, its allowlist, the proxy's counts
 * and last denials (operators only). */
int api_h_egress_get(struct areq *a, struct sbx_err *err);
int api_h_metrics(struct areq *a, struct sbx_err *err);
/*
 * The ensure of PUT .../sandbox for a->npc (a->npc and a->who set): the
 * owner's sandbox slot claimed (max_sandboxes_per_player), the spec from
 * the stored NPC (its image, its egress grant), then a->ensured (or the
 * status reply when NULL) with the broker's answer, after a failed
 * ensure's slot went back and a->set_image's image was stored. Returns 0
 * (started), or -1 with err (too_many, the driver's: a->broker_err set).
 */
int api_ensure_start(struct areq *a, struct sbx_err *err);
/* api_sandbox.c: PUT …/sandbox's body rules (absent is fine): "image"
 * (into a->npc.image, a->set_image), "from_snapshot" and "from_npc" let
 * through for api_snap.c; "egress" refused (forbidden for a player). 0,
 * or -1 with err (unknown_field, wrong_type, bad_request, forbidden). */
int api_ensure_body(struct areq *a, struct sbx_err *err);
/* The status object of docs/api.md for st of a's NPC (new reference). */
json_t *api_status_json(const struct areq *a, const struct sbx_status *st);

/* api_snap.c (docs/api.md "Snapshots", adr/0068): POST/GET
 * …/sandbox/snapshots, DELETE …/sandbox/snapshots/{name} (the name in
 * a->exec_id), GET /api/v1/snapshots, POST …/sandbox/fork. */
int api_h_snap_create(struct areq *a, struct sbx_err *err);
int api_h_snap_list(struct areq *a, struct sbx_err *err);
int api_h_snap_delete(struct areq *a, struct sbx_err *err);
int api_h_snap_all(struct areq *a, struct sbx_err *err);
int api_h_snap_fork(struct areq *a, struct sbx_err *err);
/* E2B's POST /e2b/sandboxes/{id}/snapshots and …/fork: 501 unsupported
 * with a sentence naming sbx's routes (E2B's snapshot is a template, not
 * mapped; docs/e2b.md). */
int api_h_e2b_snap_refuse(struct areq *a, struct sbx_err *err);
/* PUT …/sandbox (the route's handler): with "from_snapshot" the body's
 * checks (api_ensure_body), the copy, then api_ensure_start; without,
 * api_h_ensure. Returns 0 (started) or -1 with err (bad_request,
 * not_found, the driver's: a->broker_err). */
int api_h_sandbox_put(struct areq *a, struct sbx_err *err);

/* api_envd.c: an envd request (adr/0060; the route rows and the sandbox's
 * authentication are api_http.c's: a->npc is the E2B sandbox's NPC, a->who
 * its owner): the method of the request's path, served over Connect
 * (api_connect.h) or as plain HTTP; an unknown one 404 with Connect's error
 * JSON (code unimplemented). */
int api_h_envd(struct areq *a, struct sbx_err *err);

/* api_exec.c: POST .../exec as SSE, GET .../files as bytes (SPEC §5). */
int api_h_exec(struct areq *a, struct sbx_err *err);
int api_h_read(struct areq *a, struct sbx_err *err);
/*
 * Parses and checks an exec body (a->body) into er (its strings borrowed
 * from a->body; *argv and *env owned by the caller: free), also the
 * principal's concurrent exec limit. Never replies. Returns 0, or -1 with
 * err (wrong_type, unknown_field, bad_request, too_many, internal) and
 * *argv, *env NULL.
 */
int api_exec_parse(struct areq *a, struct sbx_exec_req *er,
    const char ***argv, const char ***env, struct sbx_err *err);

/* api_execs.c: execs as resources with a durable event log (ADR 0015). */
/* Loads state_dir/execs (execs running at a crash become failed) and the
 * ticket key. Returns 0, or -1 with err config_error. */
int api_execs_open(struct api_server *s, struct sbx_err *err);
/* Kills the execs still running (terminal event "shutting_down"), frees all. */
void api_execs_close(struct api_server *s);
/* Drain: ends every viewer stream at once (viewers resume elsewhere/later). */
void api_execs_drain(struct api_server *s);
int api_h_execs_create(struct areq *a, struct sbx_err *err);
int api_h_execs_list(struct areq *a, struct sbx_err *err);
int api_h_execs_get(struct areq *a, struct sbx_err *err);
int api_h_execs_delete(struct areq *a, struct sbx_err *err);
int api_h_execs_events(struct areq *a, struct sbx_err *err);
int api_h_execs_ticket(struct areq *a, struct sbx_err *err);
/*
 * The events route's credential without a key: npc and id are what its
 * path names, query holds "ticket=T" (NULL: none). Returns 1 with *who =
 * the ticket's principal when T is a live ticket of exec id of npc (same
 * owner) and that principal is active and still owns the NPC or operates;
 * 0 otherwise (401, one answer whatever is wrong); -1 when the database
 * fails.
 */
int api_execs_ticket_auth(struct api_server *s, const char *npc,
    const char *id, const char *query, struct api_principal *who);
/* api_term*.c: terminals as resources (adr/0051, api_term.h). */
/* Loads state_dir/terms (terminals running at a crash or restart become
 * failed, api_restarted). Returns 0, or -1 with err config_error. */
int api_terms_open(struct api_server *s, struct sbx_err *err);
/* Kills the terminals still running (failed, shutting_down), frees all. */
void api_terms_close(struct api_server *s);
/* Drain: ends every SSE viewer of a terminal at once. */
void api_terms_drain(struct api_server *s);
int api_h_terms_create(struct areq *a, struct sbx_err *err);
int api_h_terms_list(struct areq *a, struct sbx_err *err);
int api_h_terms_get(struct areq *a, struct sbx_err *err);
int api_h_terms_delete(struct areq *a, struct sbx_err *err);
int api_h_terms_output(struct areq *a, struct sbx_err *err);
int api_h_terms_input(struct areq *a, struct sbx_err *err);
int api_h_terms_control(struct areq *a, struct sbx_err *err);
int api_h_terms_ticket(struct areq *a, struct sbx_err *err);
/* api_term_http.c, for every transport of a terminal: a's ?offset= (or
 * Last-Event-ID), 0 when absent; -1 with err bad_request. */
int api_term_offset_query(struct areq *a, uint64_t *off, struct sbx_err *err);
/* A control object {"type":"resize","cols","rows"} | {"type":"signal",
 * "signal": name or 1..64} | {"type":"eof"} (docs/api.md) into *c, or
 * *eof 1. Returns 0, or -1 with err bad_request and the sentence. */
int api_term_ctl_parse(const json_t *o, struct sbx_session_ctl *c, int *eof,
    struct sbx_err *err);
/* api_ports.c, api_ports_auth.c: the ports reverse proxy, its tickets and
 * preview links (docs/api.md "Ports", adr/0053). */
/* Derives the token key from the ticket key (after api_execs_open) and
 * makes the tunnel table. Returns 0, or -1 with err internal. */
int api_ports_open(struct api_server *s, struct sbx_err *err);
/* Closes every tunnel (drain: a proxied connection is cut, the browser
 * reconnects elsewhere/later). */
void api_ports_drain(struct api_server *s);
/* Closes every tunnel and frees the table. */
void api_ports_close(struct api_server *s);
/* ANY .../sandbox/ports/{port}/..., /p/{token}/..., a preview Host. */
int api_h_port_proxy(struct areq *a, struct sbx_err *err);
/* GET .../sandbox/ports/{port}/tcp: a WebSocket whose binary messages are
 * the raw bytes of one TCP connection to the port (sbxctl port-forward). */
int api_h_port_tcp(struct areq *a, struct sbx_err *err);
/* POST .../sandbox/ports/{port}/tickets and .../previews. */
int api_h_port_ticket(struct areq *a, struct sbx_err *err);
int api_h_port_preview(struct areq *a, struct sbx_err *err);
/*
 * The proxy route's credential (api_auth_fn): the bearer key when an
 * Authorization header is present, else ?sbx_ticket= (a live ticket of
 * this NPC and port, made by a principal still active). id is the port
 * segment. Returns 1 with *who, 0 (401), -1 (database error).
 */
int api_ports_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, const char *authorization, int final,
    struct api_principal *who);
/*
 * A preview's token (tok, n bytes, untrusted; from /p/{token}/ or a
 * preview Host): when it is a live preview whose NPC exists and whose
 * maker is active and still owns the NPC or operates, *who gets the maker,
 * npc (npccap bytes) the NPC's name and *port the port; returns 1. 0 when
 * not (one answer: 404 at dispatch), -1 on a database error.
 */
int api_ports_preview_resolve(struct api_server *s, const char *tok,
    size_t n, struct api_principal *who, char *npc, size_t npccap,
    int *port);
/* The token of a request's Host when preview_domain is set and Host is
 * TOKEN.<preview_domain> (api_ports_preview_host); NULL otherwise. */
const char *api_ports_host_token(const struct api_server *s,
    const char *host, size_t *n);
/* Appends the ports families to /metrics' text (sbx_api_port_*). */
int api_ports_metrics(const struct api_server *s, struct evbuffer *out);

/*
 * api_execs_view.c: the frame of every ticket check (exec events,
 * terminals): ?ticket=T of query (not decoded; NULL: none) for the NPC
 * named npc; find(s, npc, owner_id, id, T, principal, cap) says whether T
 * is a live ticket of resource id of that NPC's owner (1, with the
 * ticket's principal name copied to principal) or not (0); then that
 * principal must be active and still own the NPC or operate. Returns 1
 * with *who, 0 (401, one answer whatever is wrong), -1 (database).
 */
typedef int (*api_ticket_find_fn)(struct api_server *s, const char *npc,
    int64_t owner_id, const char *id, const char *tok, char *principal,
    size_t cap);
int api_ticket_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, api_ticket_find_fn find, struct api_principal *who);
/* api_term_ws.c: GET …/terminals/{id}/attach, the WebSocket of sbx.v1
 * (adr/0052); the drain closes every attached one (1001), the server's
 * free frees them. */
int api_h_terms_attach(struct areq *a, struct sbx_err *err);
void api_term_ws_drain(struct api_server *s);
void api_term_ws_free_all(struct api_server *s);
/* api_browser_view.c: watching a sandbox's browser (adr/0065). GET
 * …/sandbox/browser/screenshot (image/png), POST …/browser/view/tickets,
 * GET …/browser/view (WebSocket of JPEG frames); the view route's
 * credential (api_auth_fn: the bearer key, else ?ticket= of a view ticket
 * of that NPC made by a principal still active and owning it or
 * operating); the drain closes every view (1001), the free frees them. */
int api_h_browser_screenshot(struct areq *a, struct sbx_err *err);
int api_h_browser_view_ticket(struct areq *a, struct sbx_err *err);
int api_h_browser_view(struct areq *a, struct sbx_err *err);
int api_browser_view_auth(struct api_server *s, const char *npc,
    const char *id, const char *query, const char *authorization, int final,
    struct api_principal *who);
void api_browser_view_drain(struct api_server *s);
void api_browser_view_free_all(struct api_server *s);
/* GET /console: the embedded page (api/console.html + xterm.js, adr/0054), a fresh style nonce each reply. */
int api_h_console(struct areq *a, struct sbx_err *err);
/* Builds s->console_csp (the hash of the page's one inline script) and finds
 * its style nonce mark. Returns 0, or -1 when the page is not as built
 * (no or two scripts, no or two marks) or memory is out. */
int api_console_init(struct api_server *s);

/* NDJSON line -> SSE event: sbx_sse_from_own_ndjson (proto/sbx_sse.h). */

#endif
