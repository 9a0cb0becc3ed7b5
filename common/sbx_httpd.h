/* sbx_httpd.h - the small HTTP server core both daemons use: route lookup with Allow, JSON replies and errors (one status table), streamed replies with backpressure and client-gone handling, listeners, drain (adr/0022). */
#ifndef SBX_HTTPD_H
#define SBX_HTTPD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sbx_err.h"
#include "sbx_gate.h"

struct event;
struct event_base;
struct evbuffer;
struct bufferevent;
struct evhttp;
struct evhttp_bound_socket;
struct evhttp_connection;
struct evhttp_request;

/*
 * What the core owns and what each daemon keeps (adr/0022): the core sends
 * bytes (JSON replies, error replies, stream chunks), finds routes, binds
 * listeners and times a drain. Each daemon keeps its route table (rows begin
 * with struct sbx_httpd_route), its checks and their order, its audit,
 * metrics and log line per request, and the end of a request (its own
 * "done" function, called after the core has sent the reply). The core never
 * frees the daemon's request; it only drops its borrowed evhttp pointers.
 */

/* ------------------------------------------------------------------ */
/* Routes                                                              */

/*
 * The first member of every row of a daemon's route table. method is an
 * enum evhttp_cmd_type value (one bit). pattern is a path where "{...}"
 * (any name between braces) or "*" stands for one non-empty segment (no
 * '/'); a last segment "**" (after a '/') matches the rest of the path
 * when that rest is empty or begins with '/' (a prefix route: the pattern
 * "/x/" + "**" takes "/x", "/x/" and "/x/a/b", not "/xy"; nothing
 * captured);
 * everything else matches byte for byte, and the whole path must be
 * consumed. Tables end at a row whose pattern is NULL or after n rows.
 */
struct sbx_httpd_route {
	int method;
	const char *pattern;
};

/* Segments a pattern may capture, and bytes kept of each (NUL included). */
#define SBX_HTTPD_CAPTURES 2
#define SBX_HTTPD_CAPTURE_MAX 128

/*
 * The captured segments of a match, in pattern order. A segment longer
 * than SBX_HTTPD_CAPTURE_MAX - 1 bytes is captured as "" (never a valid
 * id or name, so the daemon's id check refuses it). ncap segments were
 * captured.
 */
struct sbx_httpd_match {
	char cap[SBX_HTTPD_CAPTURES][SBX_HTTPD_CAPTURE_MAX];
	unsigned ncap;
};

/*
 * Finds the row of method + path in table (n rows of stride bytes each;
 * each row begins with struct sbx_httpd_route; a row with a NULL pattern
 * ends it sooner). Rows are tried in table order, the first that matches
 * both wins. m (may be NULL) gets the captures of the winning row. When no
 * row matches and allow is not NULL, allow gets the methods the path does
 * take, in table order, as an RFC 9110 §10.2.1 Allow value ("GET, PUT"),
 * or "" when no row matches the path at all (then: 404, not 405);
 * allowcap bytes, truncated if small (128 is ample). path NULL: no match.
 * Returns the row (inside table) or NULL.
 */
const void *sbx_httpd_route_find(const void *table, size_t n, size_t stride,
    int method, const char *path, struct sbx_httpd_match *m, char *allow,
    size_t allowcap);

/* "GET", "PUT", ... of an enum evhttp_cmd_type; "?" for none known. */
const char *sbx_httpd_method_name(int method);

/* ------------------------------------------------------------------ */
/* A request                                                           */

struct sbx_httpd_req;

/*
 * How a streamed reply talks back to the daemon. Both run on the event
 * loop and may be NULL.
 *   pause(r, 1): more than SBX_HTTPD_HIGH_WATER bytes wait in the
 *     connection's output buffer: stop producing; pause(r, 0): it drained
 *     to the point where libevent calls back: produce again.
 *   gone(r): the client went away while the reply streamed (or while a
 *     handler asked to be told, sbx_httpd_watch). By then the core has
 *     released the request (r->req and r->conn are NULL); the daemon stops
 *     its producer and ends its request. Called at most once per watch.
 */
struct sbx_httpd_ops {
	void (*pause)(struct sbx_httpd_req *r, int on);
	void (*gone)(struct sbx_httpd_req *r);
};

/* Bytes queued for a client above which a stream's producer is paused. */
#define SBX_HTTPD_HIGH_WATER ((size_t)1024 * 1024)

/*
 * The part of a request the core handles. Embedded (not pointed to) in
 * each daemon's own request struct; the daemon recovers its struct from
 * the pointer the callbacks get (offsetof). Zero it, then set req, gate
 * (NULL when the server has none) and ops before any call below, and
 * high_water before a stream begins if the daemon wants its own. Every
 * other field is the core's to change; the daemon reads them.
 */
struct sbx_httpd_req {
	struct evhttp_request *req;    /* borrowed; NULL once replied or gone */
	struct evhttp_connection *conn;/* borrowed; set while streaming/watched */
	struct sbx_gate *gate;         /* close callbacks go through it */
	const struct sbx_httpd_ops *ops;
	struct evbuffer *chunk;        /* owned; what the daemon adds to a stream */
	int status;                    /* HTTP status sent (0: none yet) */
	int streaming;                 /* 200 head sent, body chunks follow */
	int paused;                    /* ops->pause(r, 1) is in force */
	int watching;                  /* the connection's close is watched */
	size_t high_water;             /* the daemon's: bytes queued above which
	                                * a stream pauses (0: SBX_HTTPD_HIGH_WATER) */
};

/* Reply flags. */
#define SBX_HTTPD_CLOSE    0x01  /* "Connection: close": the connection ends after */
#define SBX_HTTPD_NO_STORE 0x02  /* "Cache-Control: no-store" (the api's replies) */

/*
 * Sends obj (stolen, even on failure; NULL counts as out of memory) as the
 * whole reply: status, "Content-Type: application/json", the compact JSON
 * and a newline, plus the headers of flags. Out of memory: a 500 with the
 * internal error body instead. Stops a watch first. Does nothing but free
 * obj when r->req is NULL (the client went). Sets r->req NULL. Returns the
 * status sent (500 on out of memory), or 0 when nothing was sent.
 */
int sbx_httpd_reply_json(struct sbx_httpd_req *r, int status, json_t *obj,
    unsigned flags);

/*
 * sbx_httpd_reply_json for a JSON text encoded already (e.g. in slices
 * over several turns of the loop, adr/0030): sends text's bytes (drained;
 * the evbuffer stays the caller's) and a newline. Returns the status
 * sent, or 0 when r->req is NULL.
 */
int sbx_httpd_reply_json_text(struct sbx_httpd_req *r, int status,
    struct evbuffer *text, unsigned flags);

/*
 * The reply of an error: {"error":{"code":...,"message":...}} (SPEC §3)
 * with the status of err's code (sbx_err_http_status: the one code->status
 * table) and the headers that status or code carries, from this file's one
 * table: 401 "WWW-Authenticate: Bearer" (RFC 9110 §11.6.1), too_many
 * "Retry-After: 1" (RFC 9110 §10.2.3). A message "" is sent as the code.
 * err unset: internal, SBX_MSG_INTERNAL ("Internal error."). A code
 * without a status is sent as 500 and logged as "unmapped error code".
 * Returns the status (also when r->req is NULL and nothing could be
 * sent). Like
 * sbx_httpd_reply_json otherwise.
 */
int sbx_httpd_reply_error(struct sbx_httpd_req *r, const struct sbx_err *err,
    unsigned flags);
/* sbx_httpd_reply_error with the body encode(e, status) makes (a new
 * reference; NULL: out of memory, the usual body then) instead of the
 * sbx error object: a protocol of another shape (the api's E2B layer)
 * keeps the one status and header table. encode NULL: the usual body. */
int sbx_httpd_reply_error_as(struct sbx_httpd_req *r,
    const struct sbx_err *err, unsigned flags,
    json_t *(*encode)(const struct sbx_err *e, int status));

/*
 * Sends body (drained; the evbuffer stays the caller's; NULL: no body) as
 * the whole reply of a non-JSON kind: status, "Content-Type: ctype" (NULL:
 * none, e.g. a 204), plus the headers of flags. Stops a watch first. Does
 * nothing when r->req is NULL (the client went). Sets r->req NULL.
 * Returns the status sent, or 0 when nothing was sent.
 */
int sbx_httpd_reply_body(struct sbx_httpd_req *r, int status,
    const char *ctype, struct evbuffer *body, unsigned flags);

/* The one reason-phrase table (RFC 9110 §15); NULL for other statuses
 * (then libevent picks its own). */
const char *sbx_httpd_reason(int status);

/* Adds a response header to r (before its reply); no-op once replied. */
void sbx_httpd_header(struct sbx_httpd_req *r, const char *name,
    const char *value);

/* ------------------------------------------------------------------ */
/* Streamed replies (exec NDJSON, file bytes, SSE)                     */

/*
 * Starts a 200 reply whose body follows in chunks: Content-Type ctype,
 * "Cache-Control: no-cache", "X-Accel-Buffering: no"; the connection's
 * timeout becomes timeout_s seconds (a silent producer must not trip
 * evhttp's idle timeout; reading stays on so a disconnect is noticed) and
 * its close is watched (ops->gone). Allocates r->chunk when NULL.
 * Returns 0; -1 when the client has already gone (the request was detached
 * from its connection): then the core has ended and released r->req, no
 * callback runs, and the daemon ends its request (the broker logs 499).
 * -1 too when r->chunk cannot be allocated (a 500 was sent).
 */
int sbx_httpd_stream_begin(struct sbx_httpd_req *r, const char *ctype,
    int64_t timeout_s);

/*
 * Sends what the daemon added to r->chunk as one chunk; pauses the
 * producer (ops->pause(r, 1)) when the output buffer is over r->high_water
 * (0: SBX_HTTPD_HIGH_WATER), resumes it when that chunk has been written.
 * No-op when nothing is queued or the client went.
 */
void sbx_httpd_stream_flush(struct sbx_httpd_req *r);

/*
 * Ends a stream normally: flushes r->chunk, stops the watch, sets the
 * connection's timeout back to timeout_s (keep-alive), sends the last
 * chunk. r->req becomes NULL. No-op when the client went.
 */
void sbx_httpd_stream_end(struct sbx_httpd_req *r, int64_t timeout_s);

/*
 * Ends a stream abnormally: the connection is closed, so the client sees a
 * cut chunked body (RFC 9112 §7.1: incomplete) rather than a clean end.
 * r->req and r->conn become NULL.
 */
void sbx_httpd_stream_abort(struct sbx_httpd_req *r);

/*
 * Watches r's connection for the client going away before a reply
 * (ops->gone), e.g. while a file operation runs; sbx_httpd_unwatch stops.
 * To see a close at once, reading is turned on with evhttp's read callback
 * unset (what evhttp does while it writes a reply; a streamed body of the
 * gate needs it unset too, sbx_gate.h). No-op when the request has no
 * connection. Replies and stream ends stop watching by themselves.
 */
void sbx_httpd_watch(struct sbx_httpd_req *r);
void sbx_httpd_unwatch(struct sbx_httpd_req *r);

/*
 * The server is freeing everything (evhttp_free follows, which frees the
 * connections and their requests): drops r's borrowed pointers and its
 * watch without sending anything.
 */
void sbx_httpd_release(struct sbx_httpd_req *r);

/*
 * HTTP/1.1 Upgrade (RFC 9110 §7.8; adr/0050). Answers r with "101 Switching
 * Protocols", "Connection: Upgrade", "Upgrade: <upgrade>" and the given
 * extra headers, and hands the connection over: returns a bufferevent (owned
 * by the caller, BEV_OPT_CLOSE_ON_FREE) on the same socket, with any bytes
 * the client sent after the request already in its input, or NULL (out of
 * memory; then a 500 went). evhttp forgets the connection (freed on the next
 * turn of the loop without touching the socket); the gate's connection count
 * drops when the caller frees the bufferevent (sbx_gate_upgraded_close).
 * r->req is NULL after. upgrade: a token ("sbx-session/1", "websocket");
 * extra_headers: "Name: value\r\n"... or NULL (borrowed).
 */
struct bufferevent *sbx_httpd_upgrade(struct sbx_httpd_req *r, const char *upgrade,
    const char *extra_headers /* "Name: value\r\n"... or NULL */);

/*
 * sbx_httpd_upgrade without a status line (adr/0053): the caller's peer
 * writes the whole reply (the ports proxy's upstream). Hands the connection
 * over as sbx_httpd_upgrade does (the same bufferevent, the same bytes in
 * its input, the same sbx_gate_upgraded_close before the caller frees it,
 * the same NULL and 500 on out of memory). r->req is NULL after, so the
 * request's body must be copied out of it before.
 */
struct bufferevent *sbx_httpd_takeover(struct sbx_httpd_req *r);

/* Frees what the core allocated in r (r->chunk). r itself is the daemon's. */
void sbx_httpd_req_clear(struct sbx_httpd_req *r);

/* ------------------------------------------------------------------ */
/* The server                                                          */

/* What sbx_httpd_server_new sets up; check, dispatch and arg outlive it. */
struct sbx_httpd_config {
	int64_t max_body;          /* evhttp's backstop body cap, bytes (the
	                            * gate refuses over-cap bodies first) */
	int timeout_s;             /* evhttp's idle/read timeout, seconds */
	struct sbx_gate_limits gate; /* the request gate's limits */
	sbx_gate_check_fn check;   /* the gate's credential + cap hook */
	sbx_gate_stream_fn stream; /* streamed bodies (adr/0018); NULL: none */
	void (*dispatch)(struct evhttp_request *, void *);
	void *arg;                 /* for check, stream and dispatch */
};

/*
 * A new evhttp behind a request gate (sbx_gate_new, adr/0008): body cap and
 * timeout of c, EVERY method let through to c->dispatch (so even a 405 or
 * 404 is the daemon's JSON after its checks, never libevent's HTML 501),
 * c->dispatch as the generic callback. *gate gets the gate (free it after
 * evhttp_free). Returns the evhttp, or NULL with err (internal: out of
 * memory) and nothing left allocated.
 */
struct evhttp *sbx_httpd_server_new(struct event_base *base,
    const struct sbx_httpd_config *c, struct sbx_gate **gate,
    struct sbx_err *err);

/* ------------------------------------------------------------------ */
/* Listeners                                                           */

/* One bound listener. Zero it before sbx_httpd_listen. */
struct sbx_httpd_listener {
	struct evhttp_bound_socket *bound;  /* NULL once closed */
	char *unix_path;    /* owned; the socket file, unlinked when it goes */
	int port;           /* TCP: the port bound (0 asked: the one chosen) */
};

/*
 * Binds http to spec: "unix:PATH" (allow_unix only) or "HOST:PORT" with
 * HOST a name, an IPv4 address or [IPv6], PORT 0..65535 (0: any free one,
 * read back into l->port). A unix socket's parent directories are made
 * (0750); an existing socket file nothing answers on is replaced, one that
 * answers or a file that is not a socket is refused; the socket gets mode
 * socket_mode (an octal number, adr/0019) from the moment it is bound.
 * Returns 0, or -1 with err: config (malformed spec, path longer than
 * sun_path, in use, bind refused, port out of range) or internal.
 */
int sbx_httpd_listen(struct evhttp *http, struct event_base *base,
    const char *spec, int allow_unix, unsigned socket_mode,
    struct sbx_httpd_listener *l, struct sbx_err *err);

/*
 * Stops accepting (connections already open stay) and unlinks the socket
 * file: what a drain does first (SPEC §7). Safe to call twice.
 */
void sbx_httpd_unlisten(struct evhttp *http, struct sbx_httpd_listener *l);

/* Frees l's path; unlinks the socket file unless sbx_httpd_unlisten did.
 * Call after evhttp_free. */
void sbx_httpd_listener_free(struct sbx_httpd_listener *l);

/* ------------------------------------------------------------------ */
/* Drain (SPEC §7)                                                     */

/*
 * A drain: wait until nothing is in flight, but at most grace_ms; then
 * grace_over runs once (the daemon cancels what still runs, which must end
 * its requests), and done runs once when in_flight(arg) is 0. Zero it
 * before use.
 */
struct sbx_httpd_drain {
	struct event *grace_ev, *done_ev;
	unsigned (*in_flight)(void *arg);
	void (*grace_over)(void *arg);
	void *arg;                     /* the server's, for the two above */
	void (*done)(void *done_arg);  /* main's: the drain is over */
	void *done_arg;
	int started;
};

/*
 * Starts d: done(done_arg) runs once (from the loop, never inside this call
 * unless events cannot be made) when in_flight(arg) is 0, grace_over(arg)
 * after grace_ms milliseconds if that has not happened. When events cannot
 * be allocated, grace_over and done run at once. done may be NULL. A second
 * call does nothing. Returns 0, or -1 when it had to run them at once.
 */
int sbx_httpd_drain_start(struct sbx_httpd_drain *d, struct event_base *base,
    int64_t grace_ms, unsigned (*in_flight)(void *),
    void (*grace_over)(void *), void *arg, void (*done)(void *),
    void *done_arg);

/* A request ended: lets a started drain check again (no-op otherwise). */
void sbx_httpd_drain_poke(struct sbx_httpd_drain *d);

/* Frees d's events (done does not run any more). */
void sbx_httpd_drain_free(struct sbx_httpd_drain *d);

#endif
