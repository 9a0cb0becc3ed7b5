/* api_int.h - internals shared by the files of sandbox-api's HTTP server (not a public header). */
#ifndef API_INT_H
#define API_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api.h"
#include "api_metrics.h"
#include "api_store.h"
#include "sbx_driver.h"
#include "sbx_err.h"
#include "sbx_gate.h"

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
	struct api_limit *next;
};

struct areq;
struct api_exec;
struct api_viewer;

/* Entries a list asks the broker for (its own list_max_entries may be lower). */
#define API_LIST_MAX_ENTRIES 10000

struct api_server {
	struct event_base *base;
	const struct api_config *cfg;
	struct sbx_driver *driver;
	struct api_store *store;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	struct sbx_gate *gate;      /* heads checked before bodies (sbx_gate.h) */
	int port;
	struct api_limit *limits;
	struct areq *live;          /* requests being answered */
	unsigned inflight;
	int draining;
	void (*drain_done)(void *);
	void *drain_arg;
	struct event *drain_ev;
	struct event *grace_ev;     /* shutdown_grace over: cancel what runs */
	int64_t (*now_ms)(void);
	struct api_metrics metrics;
	/* Resource execs (api_execs.c). */
	struct api_exec *execs;     /* newest first */
	unsigned nexecs;
	uint64_t log_total;         /* bytes of all exec logs on disk */
	char *execs_dir;            /* state_dir/execs */
	unsigned char ticket_key[32];
	struct event *sweep_ev;     /* retention sweep */
	char *console_csp;          /* Content-Security-Policy of /console */
};

/* Flags of a route. */
#define R_AUTH     0x01  /* needs a principal (every /api/v1 route, /metrics) */
#define R_NPC      0x02  /* path has {npc}: loaded and ownership-checked */
#define R_JSON     0x04  /* body is a JSON object, at most body_max bytes */
#define R_JSON_OPT 0x08  /* like R_JSON, but an empty body is fine */
#define R_RAW      0x10  /* raw body up to file_size_max (file write) */
#define R_OPERATOR 0x20  /* operators only: players get 403 */
#define R_MUTATING 0x40  /* written to the audit table */

typedef void (*api_handler_fn)(struct areq *);

/*
 * A route's own authentication, instead of "Authorization: Bearer KEY"
 * (e.g. a ticket in the query). target is the request target with its
 * query (NUL-terminated, not decoded); authorization is the Authorization
 * value or NULL. Runs twice per request: in the gate with final 0, before
 * any body byte is read (inside the socket read: no blocking work beyond an
 * indexed sqlite lookup), then in api_dispatch with final 1 — a single-use
 * credential is consumed only then. Returns 1 with *who filled, 0 when the
 * credential is absent or not good (401), -1 on a database error (500).
 */
typedef int (*api_auth_fn)(struct api_server *s, const char *target,
    const char *authorization, int final, struct api_principal *who);

struct api_route {
	int method;                /* enum evhttp_cmd_type */
	const char *suffix;        /* after /api/v1/npcs/{npc}, or the full path */
	api_handler_fn handler;
	unsigned flags;
	const char *action;        /* audit/log name, e.g. "sandbox.ensure" */
};

/* A route (by its handler) that authenticates with its own hook instead of
 * the bearer key: a row of route_auths in api_http.c. */
struct api_route_auth {
	api_handler_fn handler;
	api_auth_fn auth;
};

/* One request being answered. */
struct areq {
	struct api_server *s;
	struct evhttp_request *req;         /* NULL once replied */
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
	char exec_id[40];                   /* {id} of .../execs/{id}... routes */
	struct api_viewer *viewer;          /* GET .../events being streamed */
	int sse_counted;                    /* counted in sse_clients */
	/* streams */
	struct evhttp_connection *conn;
	struct evbuffer *chunk;
	struct event *ping;
	int streaming;
	int paused;
	int sse;
	uint64_t sse_id;
	/* scratch */
	char *path;
	uint32_t mode;
	int egress;
	int egress_parsed;
	int set_image;
	int slot_claimed;                   /* this ensure took a sandbox slot */
	unsigned char *stdin_data;
	size_t stdin_len;
	struct areq *prev, *next;
};

/* api_http.c */
int64_t api_mono_ms(void);
void areq_reply_json(struct areq *a, int status, json_t *obj);  /* steals obj */
void areq_fail(struct areq *a, const struct sbx_err *err);
/*
 * A read, write or list of the principal may start: at most
 * max_file_ops_per_principal at once (api config), else 429 too_many with
 * Retry-After. Returns 0, or -1 after replying.
 */
int api_fileop_admit(struct areq *a);

void areq_fail_code(struct areq *a, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* areq_fail for an error the driver (the broker) gave: also counted in
 * sbx_api_broker_errors_total by its code. */
void areq_fail_broker(struct areq *a, const struct sbx_err *err);
void areq_finish(struct areq *a, int status, const char *outcome);
json_t *api_status_json(const struct areq *a, const struct sbx_status *st);

/* api_exec.c */
void api_h_exec(struct areq *a);
/*
 * Parses and checks an exec body (a->body) into er (its strings borrowed
 * from a->body; *argv and *env owned by the caller: free), also the
 * principal's concurrent exec limit. Returns 0, or -1 after failing a.
 */
int api_exec_parse(struct areq *a, struct sbx_exec_req *er,
    const char ***argv, const char ***env);

/* api_execs.c: execs as resources with a durable event log (ADR 0015). */
/* Loads state_dir/execs (execs running at a crash become failed) and the
 * ticket key. Returns 0, or -1 with err config_error. */
int api_execs_open(struct api_server *s, struct sbx_err *err);
/* Kills the execs still running (terminal event "shutting_down"), frees all. */
void api_execs_close(struct api_server *s);
/* Drain: ends every viewer stream at once (viewers resume elsewhere/later). */
void api_execs_drain(struct api_server *s);
/* A request ends (areq_finish): a viewer is detached from its exec and
 * freed; a POST waiting for its exec's start is forgotten by the exec. */
void api_execs_areq_end(struct areq *a);
void api_h_execs_create(struct areq *a);
void api_h_execs_list(struct areq *a);
void api_h_execs_get(struct areq *a);
void api_h_execs_delete(struct areq *a);
void api_h_execs_events(struct areq *a);
void api_h_execs_ticket(struct areq *a);
/*
 * api_auth_fn of the events route without a key: target is
 * "/api/v1/npcs/NPC/sandbox/execs/ID/events?...ticket=T...". Returns 1 with
 * *who = the ticket's principal when T is a live ticket of exec ID of NPC
 * (same owner) and that principal is active and still owns the NPC or
 * operates; 0 otherwise (401, one answer whatever is wrong); -1 when the
 * database fails.
 */
int api_execs_ticket_auth(struct api_server *s, const char *target,
    struct api_principal *who);
/* GET /console: the embedded page (api_console.c generated from api/console.html). */
void api_h_console(struct areq *a);
/* Builds s->console_csp (hashes of the page's inline script and style). */
int api_console_init(struct api_server *s);
void api_h_read(struct areq *a);

/*
 * Grace over (api_server_drain): ends a started stream whose driver
 * operation was cancelled. An exec stream gets a last SSE error event
 * shutting_down and ends normally; a file read is cut. Finishes a.
 */
void api_stream_shutdown(struct areq *a);

/* NDJSON line -> SSE event: sbx_sse_from_own_ndjson (proto/sbx_sse.h). */

#endif
