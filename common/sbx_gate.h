/* sbx_gate.h - the request gate both listeners put in front of evhttp: heads checked (framing, size, time, credentials, body cap) before any body byte is read (adr/0008, adr/0012). */
#ifndef SBX_GATE_H
#define SBX_GATE_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_err.h"

struct event_base;
struct evhttp;
struct evhttp_connection;
struct evhttp_request;
struct evbuffer;
struct bufferevent;

/*
 * A gate's verdict on one request head. SBX_GATE_PASS lets the request
 * through unchanged; every other value replaces it by a body-less request
 * that the daemon's dispatch answers (sbx_gate_refused) with the JSON error
 * sbx_gate_refusal gives, after which evhttp closes the connection.
 */
enum sbx_gate_verdict {
	SBX_GATE_PASS = 0,
	SBX_GATE_UNAUTHORIZED,   /* 401: the daemon's check refused the credential */
	SBX_GATE_BAD_REQUEST,    /* 400: framing refused (see sbx_gate_parse) */
	SBX_GATE_TOO_LARGE,      /* 413: declared or chunked body over the route's cap */
	SBX_GATE_HEAD_TOO_LARGE, /* 431: more than head_max bytes or headers_max headers */
	SBX_GATE_URI_TOO_LONG,   /* 414: request line alone longer than head_max */
	SBX_GATE_TIMEOUT,        /* 408: head not complete within header_timeout */
	SBX_GATE_OVERLOADED,     /* 503: max_connections connections already open */
	/* 503 overloaded: this connection, without a credential yet, was the
	 * oldest idle one of a full max_connections_keyless pool */
	SBX_GATE_KEYLESS_FULL,
	/* Only from a check function: the credential is good (a pass that
	 * takes the connection out of the keyless pool, adr/0046). */
	SBX_GATE_KEYED,
};

/* Limits of one gate; every one has a config key in both daemons
 * (docs/security.md). */
/* Header fields a gate's check may ask for (sbx_gate_limits.fields). */
#define SBX_GATE_FIELDS_MAX 4

struct sbx_gate_limits {
	size_t head_max;           /* bytes of request line + headers + empty line (16 KiB) */
	unsigned headers_max;      /* header fields per request (100) */
	int64_t header_timeout_ms; /* whole head within this, however it trickles (10 s) */
	unsigned max_connections;  /* connections open at once on this server (512) */
	/*
	 * Connections no head of which has passed the check with a good
	 * credential (SBX_GATE_KEYED) yet, part of max_connections (api: 64;
	 * 0: no such pool, every connection counts as keyed). A new one over
	 * the pool pushes out the oldest idle keyless one (SBX_GATE_KEYLESS_FULL),
	 * or is refused so when none is idle (adr/0046).
	 */
	unsigned max_connections_keyless;
	/* header_timeout of a keyless connection's heads, ms (api: 5 s; 0 or
	 * more than header_timeout_ms: header_timeout_ms). */
	int64_t keyless_header_timeout_ms;
	/*
	 * Header fields the daemon's check needs besides Authorization and
	 * Host (a credential of another name, e.g. the api's X-API-Key of the
	 * E2B control plane): up to SBX_GATE_FIELDS_MAX names, the rest NULL,
	 * compared without case;
	 * the first value of each goes to h->field[i] and its count to
	 * h->nfield[i]. Unused entries NULL. Borrowed for the gate's life.
	 */
	const char *fields[SBX_GATE_FIELDS_MAX];
};

/*
 * One parsed request head. Pointers borrow the buffer given to
 * sbx_gate_parse and stay valid while it does; nothing is NUL-terminated.
 */
struct sbx_gate_head {
	size_t len;                /* bytes of the head, its empty line included */
	int line_ok;               /* "METHOD SP target SP HTTP/1.x" understood */
	const char *method, *target, *auth;
	size_t mlen, tlen, alen;
	int type;                  /* enum evhttp_cmd_type; 0: a method evhttp lacks */
	unsigned nheaders;
	unsigned nauth;            /* Authorization fields seen */
	int has_cl, chunked;
	uint64_t cl;               /* Content-Length, when has_cl */
	/* SBX_GATE_PASS, or BAD_REQUEST / HEAD_TOO_LARGE / URI_TOO_LONG */
	enum sbx_gate_verdict bad;
	const char *why;           /* static sentence saying what was refused */
	const char *host;          /* the first Host field's value, or NULL */
	size_t hostlen;
	/* lim->fields[i]'s first value (NULL: absent), its length, and how
	 * many such fields the head holds. */
	const char *field[SBX_GATE_FIELDS_MAX];
	size_t fieldlen[SBX_GATE_FIELDS_MAX];
	unsigned nfield[SBX_GATE_FIELDS_MAX];
};

/*
 * Parses the head at the start of p (n bytes received so far, no socket
 * needed: the fuzzing entry point). Returns 1 with h filled when the head
 * is complete (h->len bytes) or refused on size, 0 when more bytes are
 * needed. h->bad is set for (RFC 9112 / RFC 9110 sections in brackets):
 *   BAD_REQUEST: a request line not "METHOD SP target SP HTTP/1.0|1.1" with
 *     an upper-case method and a visible-ASCII target (§3); a control byte
 *     (NUL, bare CR, ...) anywhere; a field line without a token name and a
 *     colon, obs-fold included (§5.2: "reject the message"); a second
 *     Content-Length, even an equal one (§6.3 allows the server to reject a
 *     list of values; we do, so no two parsers can differ); a Content-Length
 *     not 1..18 digits; Transfer-Encoding other than exactly "chunked" (so
 *     "gzip, chunked" and a second Transfer-Encoding field are refused), or
 *     with a Content-Length (§6.3 item 3: "ought to be handled as an error");
 *     Expect other than 100-continue; a second Authorization field (which
 *     one would be the credential?); a body on a method without one.
 *   HEAD_TOO_LARGE: more than lim->headers_max fields, or no end of head in
 *     lim->head_max bytes while the request line did end.
 *   URI_TOO_LONG: no end of the request line in lim->head_max bytes.
 * The head ends at the first empty line (CRLF or bare LF line ends).
 */
int sbx_gate_parse(const char *p, size_t n, const struct sbx_gate_limits *lim,
    struct sbx_gate_head *h);

/*
 * The daemon's verdict on a head that parsed (bad or not): whether its
 * credential is good for its route, and the route's body cap. h is the
 * parsed head; path is the target's path as evhttp will see it
 * (NUL-terminated, NULL when the target does not parse). Must set *cap to
 * the largest body the route takes, bytes (0: none, or no such route) and
 * return SBX_GATE_PASS (credential good, or the route needs none) or
 * SBX_GATE_UNAUTHORIZED; SBX_GATE_KEYED instead of SBX_GATE_PASS when the
 * head carried a credential that verified (only those leave the keyless
 * pool). Runs synchronously inside the socket read, so it
 * may not block for long (an indexed sqlite lookup is fine). A route-level
 * hook (e.g. a ticket in the query instead of a key) lives here: the target
 * with its query is in h->target.
 */
typedef enum sbx_gate_verdict (*sbx_gate_check_fn)(void *arg,
    const struct sbx_gate_head *h, const char *path, uint64_t *cap);

struct sbx_gate;

/*
 * Puts a gate in front of every connection http accepts from now on
 * (evhttp_set_bevcb; the caller must not set its own). lim is copied; check
 * and arg must outlive the gate. Also sets evhttp's header size limit above
 * head_max (the gate decides first). Every TCP connection it takes gets
 * TCP_NODELAY (adr/0062: small replies and stream messages are not held
 * back by Nagle's algorithm). Returns the gate, or NULL with err
 * (internal: out of memory). Free it with sbx_gate_free before evhttp_free.
 */
struct sbx_gate *sbx_gate_new(struct event_base *base, struct evhttp *http,
    const struct sbx_gate_limits *lim, sbx_gate_check_fn check, void *arg,
    struct sbx_err *err);

/* Frees g. Call after evhttp_free (which closes every connection; their
 * close callbacks free the gate's per-connection state); connections still
 * open then lose their gate and their input is dropped. NULL ok. */
void sbx_gate_free(struct sbx_gate *g);

/*
 * The gate's verdict on req as dispatch sees it: SBX_GATE_PASS for a request
 * that passed, else the reason it was replaced. Only the gate's own marker
 * (a per-gate random nonce) counts, so a client cannot plant a verdict.
 */
enum sbx_gate_verdict sbx_gate_refused(const struct sbx_gate *g,
    struct evhttp_request *req);

/*
 * The JSON error for a refusal: sets err's code (proto/sbx_proto.h:
 * unauthorized, bad_request, too_large, head_too_large, uri_too_long,
 * request_timeout, overloaded) and a sentence. Returns the HTTP status
 * (sbx_err_http_status of that code), 0 for SBX_GATE_PASS and
 * SBX_GATE_KEYED.
 */
int sbx_gate_refusal(enum sbx_gate_verdict v, struct sbx_err *err);

/*
 * Calls closed(conn, arg) once when evhttp frees conn (the client went away
 * or the connection ended), instead of evhttp_connection_set_closecb, which
 * the gate owns. closed NULL stops watching. Returns 0, or -1 when conn has
 * no gate (then evhttp_connection_set_closecb was used instead).
 */
int sbx_gate_watch(struct sbx_gate *g, struct evhttp_connection *conn,
    void (*closed)(struct evhttp_connection *, void *), void *arg);

/*
 * Streamed bodies (adr/0018). For a head that passes with a Content-Length
 * above 0 and for which stream(arg, h, path) returns 1, the gate keeps the
 * body from evhttp: evhttp gets the head without Content-Length and Expect
 * (so it dispatches at once, with an empty input buffer) plus a marker
 * header, and the body's bytes go to a struct sbx_gate_body that the
 * handler takes. At most a window (SBX_GATE_BODY_WINDOW unless changed)
 * of unconsumed bytes is buffered: past it the gate stops reading the
 * socket until the consumer drains the buffer. Reading is only turned on
 * while evhttp's read callback is unset (the handler must set it to NULL,
 * as sbx_httpd_watch does: evhttp aborts on bytes it did not
 * expect). An Expect: 100-continue is answered by the gate. A chunked body
 * for which stream returns 1 streams too (issue 24 M2, adr/0056): evhttp
 * gets the head without Transfer-Encoding, the gate decodes the chunks
 * itself (the syntax G_CHUNKED accepts) and the body's length is known
 * only at its end (sbx_gate_body_chunked, sbx_gate_body_on_end); one over
 * the route's cap or with bad chunk syntax ends as failed and the
 * connection is closed after its reply. Other chunked bodies pass as
 * before, held until complete and within the cap.
 * stream runs like check (synchronously, path as there); NULL: none.
 */
#define SBX_GATE_BODY_WINDOW (256 * 1024)

typedef int (*sbx_gate_stream_fn)(void *arg, const struct sbx_gate_head *h,
    const char *path);

/* Sets g's streaming hook (arg is sbx_gate_new's). */
void sbx_gate_set_stream(struct sbx_gate *g, sbx_gate_stream_fn stream);

struct sbx_gate_body;

/*
 * The streamed body of req, once: NULL when req's body was not streamed
 * (then it is in evhttp's input buffer as usual), or was taken already.
 * Only the gate's marker with its nonce and this request's sequence number
 * counts. The caller owns the result and frees it with sbx_gate_body_free
 * (also after the connection is gone: it stays valid, just gets no more
 * bytes).
 */
struct sbx_gate_body *sbx_gate_body_take(struct sbx_gate *g,
    struct evhttp_request *req);

/* The bytes arrived and not consumed yet. The consumer drains it (an
 * evbuffer callback on it learns of new bytes: n_added); it must not add. */
struct evbuffer *sbx_gate_body_buffer(struct sbx_gate_body *b);

/* The body's Content-Length, bytes (within the route's cap). */
uint64_t sbx_gate_body_length(const struct sbx_gate_body *b);

/* 1 when every byte of the body has arrived (consumed or not); for a
 * chunked body, when its last chunk and trailer have. */
int sbx_gate_body_complete(const struct sbx_gate_body *b);

/* 1 when b is a chunked body: sbx_gate_body_length is 0 until it is
 * complete; the bytes arrived so far are not bounded by it but by the
 * route's cap (checked as chunk sizes arrive). */
int sbx_gate_body_chunked(const struct sbx_gate_body *b);

/* SBX_GATE_PASS, or why a chunked body was refused mid-way
 * (SBX_GATE_TOO_LARGE: past the route's cap; SBX_GATE_BAD_REQUEST: chunk
 * syntax). The connection is then closed after the reply, and
 * sbx_gate_refusal gives the error. */
enum sbx_gate_verdict sbx_gate_body_failed(const struct sbx_gate_body *b);

/* Calls ended(b, arg) once when a chunked body completes or fails (from
 * the socket read that saw it; b stays the caller's). NULL: no call. A
 * Content-Length body never calls it (its length is known). */
void sbx_gate_body_on_end(struct sbx_gate_body *b,
    void (*ended)(struct sbx_gate_body *, void *), void *arg);

/* Bytes buffered before the gate stops reading (0 counts as 1); a consumer
 * that needs the whole body at once sets the length. */
void sbx_gate_body_window(struct sbx_gate_body *b, size_t window);

/* Re-decides reading (call after setting evhttp's read callback to NULL). */
void sbx_gate_body_kick(struct sbx_gate_body *b);

/* Frees b; the rest of its body is read and thrown away (the connection
 * then serves its next request), unless the reply closes the connection.
 * NULL ok. */
void sbx_gate_body_free(struct sbx_gate_body *b);

/*
 * An HTTP/1.1 Upgrade (sbx_httpd_upgrade, adr/0050): conn leaves evhttp for
 * bev, the caller's bufferevent on the same socket. The gate stops reading
 * conn (its input callback and head deadline go, a watch is dropped, a
 * streamed body is let go), appends to held the bytes it read and had not
 * let through yet (the client's first bytes of the new protocol, if it
 * sent them early: they are not a head), and forgets conn; the connection
 * stays counted (max_connections) until sbx_gate_upgraded_close(g, bev).
 * Returns 0, or -1 when conn has no gate (nothing done). g NULL: -1.
 */
int sbx_gate_upgrade(struct sbx_gate *g, struct evhttp_connection *conn,
    struct bufferevent *bev, struct evbuffer *held);

/* The upgraded connection of bev ends (call before freeing bev): it stops
 * counting. Unknown bev or g NULL: nothing. */
void sbx_gate_upgraded_close(struct sbx_gate *g, struct bufferevent *bev);

/*
 * The daemon's mark on a request's connection (the api: the principal its
 * requests came from, for connections_per_principal, adr/0056): the mark,
 * 0 for none or a connection without a gate. set_mark sets it (0 clears)
 * and returns 0, or -1 when the connection has no gate (nothing counted
 * then). When a connection with a mark ends, g's unmark(arg, mark) is
 * called once (arg is sbx_gate_new's), also from evhttp_free.
 */
int64_t sbx_gate_conn_mark(struct sbx_gate *g, struct evhttp_request *req);
int sbx_gate_conn_set_mark(struct sbx_gate *g, struct evhttp_request *req,
    int64_t mark);
void sbx_gate_set_unmark(struct sbx_gate *g, void (*unmark)(void *arg,
    int64_t mark));

/* Connections open through g now (for tests and metrics). */
unsigned sbx_gate_connections(const struct sbx_gate *g);

/* Of those, the ones in the keyless pool (for tests and metrics). */
unsigned sbx_gate_keyless(const struct sbx_gate *g);

/* Request bytes read from the sockets of g's connections and not yet taken
 * by evhttp, bytes: the gate's held input plus evhttp's input buffers
 * (streamed bodies not counted; they have their own window). Pipelined
 * heads keep it within about head_max + one socket read per connection
 * (adr/0046). For tests and metrics; loop thread. */
size_t sbx_gate_buffered(const struct sbx_gate *g);

/*
 * The credential of an Authorization field value (SPEC §4): "Bearer CRED",
 * the scheme in any case (RFC 9110 §11.1), spaces and tabs allowed before
 * it, one or more required after it, trailing ones ignored. Returns a
 * pointer into value (borrowed) at CRED with its length in *len, or NULL
 * (*len untouched) for NULL, another scheme, a scheme not followed by a
 * space or tab, or an empty CRED. Pure: both daemons' credential checks
 * (sbx_bearer_verify, the api's key lookup) parse the field only here.
 */
const char *sbx_gate_bearer(const char *value, size_t *len);

#endif
