/* proxy_req.h - the egress proxy's request-head parser: CONNECT host:port and plain HTTP by URI or Host (RFC 9110 §9.3.6, RFC 9112 §3). */
#ifndef SBX_PROXY_REQ_H
#define SBX_PROXY_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "proxy_policy.h"

/* A request head longer than this is refused (431) before it is parsed. */
#define PROXY_HEAD_MAX 8192
#define PROXY_HEADERS_MAX 100

enum proxy_req_kind {
	PROXY_REQ_CONNECT = 1,   /* CONNECT host:port: a tunnel after "200" */
	PROXY_REQ_HTTP = 2,      /* any other method: forwarded head + body */
};

struct proxy_req {
	enum proxy_req_kind kind;
	char method[17];
	char host[PROXY_HOST_MAX + 1];   /* normalised (proxy_host_normalise) */
	int host_is_ip;
	int host_is_v6;
	uint16_t port;
	/*
	 * PROXY_REQ_HTTP only: the head to send upstream (owned, NUL-ended,
	 * out_len bytes): the request line in origin form, the client's
	 * headers minus Host, Connection, Keep-Alive, Proxy-Connection,
	 * Proxy-Authorization and Upgrade, then "Host: <authority>" and
	 * "Connection: close", then CRLF. NULL for CONNECT.
	 */
	char *out;
	size_t out_len;
	size_t head_len;                 /* bytes of the client's head, CRLFCRLF included */
};

/*
 * Finds the end of a request head in buf (len bytes): returns the head's
 * length including the final CRLFCRLF, 0 when more bytes are needed (and
 * len < PROXY_HEAD_MAX), -1 when no head ends within PROXY_HEAD_MAX, or -2
 * at a bare LF before the head's end (refused at once, not waited out).
 */
long proxy_req_head_len(const char *buf, size_t len);

/*
 * Parses one request head (buf, len bytes exactly as proxy_req_head_len
 * returned). Accepted: "CONNECT host:port HTTP/1.x" (authority form, port
 * required), "METHOD http://authority[/...] HTTP/1.x" (absolute form; the
 * authority's host wins over any Host header, RFC 9112 §3.2.2) and
 * "METHOD /path HTTP/1.x" with exactly one Host header. Lines end in CRLF;
 * refused: bare LF or CR, obsolete line folding, whitespace before a
 * header's colon, a NUL or control byte, more than PROXY_HEADERS_MAX
 * headers, two Host headers, userinfo ("@") in an authority, "https://"
 * (use CONNECT), a port outside 1..65535, a host proxy_host_normalise
 * refuses, Transfer-Encoding together with Content-Length.
 * Returns 0 with *r filled (free with proxy_req_clear), or -1 with *r
 * cleared, *status the HTTP status to answer (400, 405, 414, 431, 501) and a
 * one-line reason in why that never quotes the path or a header value.
 */
int proxy_req_parse(const char *buf, size_t len, struct proxy_req *r, int *status,
    char *why, size_t why_len);

/* Frees r->out and zeroes *r (NULL is fine). */
void proxy_req_clear(struct proxy_req *r);

#endif
