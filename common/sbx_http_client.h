/* sbx_http_client.h - a small HTTP/1.1 client on bufferevents: unix or TCP, streamed bodies, backpressure, upgrade. */
#ifndef SBX_HTTP_CLIENT_H
#define SBX_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_err.h"

struct event_base;
struct bufferevent;
struct evbuffer;

/*
 * One request on its own connection (no keep-alive, no pipelining): connect,
 * send, read the status line and headers, stream the body to the caller, close.
 * Written for the Engine API (unix socket, "101 UPGRADED" hijack) and reused by
 * the api to reach the broker. Why not evhttp's client: adr/0003.
 *
 * Callback rules:
 * - Nothing is called back before sbx_http_request() has returned.
 * - done() is called exactly once, last, unless the request was cancelled;
 *   after done() returns the request is freed.
 * - Any callback may call sbx_http_req_cancel() (except done, where the handle
 *   is already ending), _pause(), _resume(), _write() and _close_write().
 * - Pointers passed to callbacks are borrowed for the callback only.
 * - The process must ignore SIGPIPE (as every libevent server does): writing
 *   to a peer that went away then fails with EPIPE instead of killing it.
 */
struct sbx_http_req;

struct sbx_http_cbs {
	/* Status line and headers parsed. status is 100-599. Headers can be
	 * read with sbx_http_req_header() from here until done(). May be NULL. */
	void (*response)(void *arg, struct sbx_http_req *req, int status);
	/* Body bytes in arrival order, len > 0. Without Content-Length or
	 * chunking the body runs until the peer closes. After a 101 on an
	 * upgrade request these are the raw bytes of the hijacked stream. */
	void (*body)(void *arg, struct sbx_http_req *req,
	    const unsigned char *buf, size_t len);
	/* Terminal. err NULL: the whole body arrived (or the upgraded stream
	 * reached EOF). Else err->code is opts.unavailable_code when the
	 * connection could not be made, SBX_E_TIMEOUT on a timeout, or
	 * opts.protocol_code for a malformed response. A connection the
	 * peer closes or resets before sending any byte of a response (a
	 * daemon that died) is opts.unavailable_code too; one closed or reset
	 * after part of the response, before its end (a body shorter than
	 * announced, a chunked body without its last chunk), is
	 * opts.cut_code; a header timeout is opts.header_timeout_code. */
	void (*done)(void *arg, struct sbx_http_req *req,
	    const struct sbx_err *err);
	void *arg;
};

struct sbx_http_opts {
	const char *unavailable_code; /* connect failure [SBX_E_RUNTIME_UNAVAILABLE] */
	const char *protocol_code;    /* bad response [SBX_E_RUNTIME] */
	const char *cut_code;         /* response cut off by a close or a reset
	                               * before its end [protocol_code]; the
	                               * engine driver says runtime_unavailable:
	                               * Docker's and Podman's /wait send their
	                               * headers at once, so a daemon killed
	                               * during a wait cuts a started answer */
	const char *peer_name;        /* names the peer in messages ["the runtime"] */
	int64_t header_timeout_ms;    /* connect + send + response headers; 0: none */
	const char *header_timeout_code; /* err code when header_timeout_ms
	                                  * passes [SBX_E_TIMEOUT]; the api says
	                                  * broker_unavailable (a peer that does
	                                  * not answer at all is unavailable) */
	int64_t timeout_ms;           /* whole request until done(); 0: none */
};

struct sbx_http_request {
	const char *method;              /* "GET", "POST", ... (required) */
	const char *path;                /* origin-form target "/v1.41/_ping" (required) */
	const char *const *headers;      /* NULL-terminated "Name: value" lines or NULL;
	                                  * Host, Content-Length and Connection are
	                                  * added by the client */
	const char *content_type;        /* set with a body; NULL: none */
	const void *body;                /* copied before the call returns */
	size_t body_len;
	/* 1: a body of stream_len bytes (Content-Length: stream_len) that the
	 * caller writes after the call, as it arrives, with
	 * sbx_http_req_write/_write_buffer (body must be NULL, body_len 0).
	 * Then opts.header_timeout_ms runs only while bytes wait in the
	 * connection's output (the peer does not take them) and, once every
	 * byte was written, until the response headers: a slow source is the
	 * caller's to bound, not a stalled peer. adr/0030. */
	int body_stream;
	uint64_t stream_len;
	int upgrade;                     /* 1: send "Connection: Upgrade" and
	                                  * "Upgrade: tcp"; a 101 hijacks the
	                                  * connection (raw bytes both ways) */
	const char *upgrade_proto;       /* with upgrade: the Upgrade value
	                                  * (a token, RFC 9110 §7.8: the
	                                  * broker's "sbx-session/1"); NULL:
	                                  * "tcp" (the Engine API's hijack) */
};

/*
 * Starts req against address, "unix:/path/to.sock" (also a bare absolute path)
 * or "host:port" (numeric host or a name, resolved by getaddrinfo). opts may be
 * NULL. Returns the request handle, or NULL with err set (bad_request for a bad
 * address or request, internal when out of memory); a connect failure is
 * reported through done(), never synchronously. Bounded: status line and each
 * header line 8 KiB, at most 100 headers, chunk-size lines 1 KiB.
 */
struct sbx_http_req *sbx_http_request(struct event_base *base,
    const char *address, const struct sbx_http_request *req,
    const struct sbx_http_opts *opts, const struct sbx_http_cbs *cbs,
    struct sbx_err *err);

/* Stops and frees req; no callback is made afterwards. NULL allowed. */
void sbx_http_req_cancel(struct sbx_http_req *req);

/*
 * Backpressure: pause stops reading from the socket (and stops delivering
 * bytes already buffered) until resume; memory held is at most
 * SBX_BEV_IO_MAX (256 KiB, what one turn reads: sbx_bev_fill) plus one
 * socket read of libevent's (4 KiB) beyond what was delivered. Either may be called any time
 * before done(), also from body(). Timeouts keep running while paused.
 */
void sbx_http_req_pause(struct sbx_http_req *req);
void sbx_http_req_resume(struct sbx_http_req *req);

/* Response status (0 before the headers) and a header value by case-
 * insensitive name (borrowed until done(); NULL when absent). */
int sbx_http_req_status(const struct sbx_http_req *req);
const char *sbx_http_req_header(const struct sbx_http_req *req,
    const char *name);

/* 1 when the connection was hijacked by a 101 response. */
int sbx_http_req_upgraded(const struct sbx_http_req *req);

/*
 * Writing on a hijacked connection (after a 101), or a request's streamed
 * body (body_stream: at most the stream_len bytes announced, in total,
 * until done(); else -1). write copies len bytes; write_buffer moves all of
 * buf's bytes without copying (buf stays the caller's, emptied). The
 * caller bounds what waits in the output (sbx_http_req_bufferevent's
 * output buffer; an evbuffer callback there sees it drain). A peer that
 * stops reading a streamed body (it answered early and closed) is not an
 * error: the rest is dropped and its response still read. close_write
 * half-closes (shutdown SHUT_WR) once everything queued has been sent,
 * which is how the peer sees stdin's EOF (upgraded only). Return 0, or -1
 * when not upgraded nor streaming, past stream_len, or out of memory.
 */
int sbx_http_req_write(struct sbx_http_req *req, const void *buf, size_t len);
int sbx_http_req_write_buffer(struct sbx_http_req *req, struct evbuffer *buf);
int sbx_http_req_close_write(struct sbx_http_req *req);

/* The connection's bufferevent, borrowed (for the caller's own watermarks
 * or fd); NULL before the connection exists. Do not free it or replace its
 * callbacks. */
struct bufferevent *sbx_http_req_bufferevent(struct sbx_http_req *req);

#endif
