/* api_ports.h - the ports reverse proxy's pure parts: the request head the sandbox sees (rewritten from an untrusted one) and the signed preview/ticket tokens (adr/0053). No I/O, no server state: unit-tested and fuzzed alone. */
#ifndef API_PORTS_H
#define API_PORTS_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_err.h"

struct evbuffer;

/* ------------------------------------------------------------------ */
/* The request head the sandbox sees                                   */

/* One request header as the client sent it (borrowed, NUL-terminated). */
struct api_ports_hdr {
	const char *name, *value;
};

/*
 * What api_ports_head_build rewrites. Every string is borrowed and
 * NUL-terminated; those marked untrusted come from the client as evhttp
 * parsed them.
 */
struct api_ports_head_in {
	const char *method;      /* untrusted: an RFC 9110 §9 token */
	const char *path;        /* untrusted: the path AFTER the route's prefix,
	                          * raw (percent-coding kept): "" or "/..." */
	const char *query;       /* untrusted: raw query without '?', or NULL */
	const struct api_ports_hdr *hdrs; /* untrusted */
	size_t nhdrs;
	uint64_t body_len;       /* bytes of the body evhttp read, sent after
	                          * the head (Content-Length) */
	int port;                /* 1..65535: Host becomes 127.0.0.1:port */
	const char *client_addr; /* the peer's address: X-Forwarded-For */
	const char *proto;       /* "http" / "https": X-Forwarded-Proto */
	const char *prefix;      /* the part of the path the proxy took away:
	                          * X-Forwarded-Prefix ("" or NULL: not sent) */
};

/* Query parameters the api reads and never forwards (docs/api.md). */
#define API_PORTS_TICKET_PARAM "sbx_ticket"

/* The head the proxy writes is at most this many bytes larger than the
 * client's fields (the X-Forwarded-* and Host it adds). */
#define API_PORTS_HEAD_EXTRA 1024

/*
 * Writes to out the HTTP/1.1 request head the sandbox's server gets for
 * in (RFC 9112 §3, §5; a gateway's duties of RFC 9110 §7.6): the request
 * line "METHOD PATH[?QUERY] HTTP/1.1" with path "" made "/" and every
 * API_PORTS_TICKET_PARAM parameter removed from the query; then the
 * client's fields minus
 *   - Authorization (the api's credential, never the sandbox's),
 *   - the hop-by-hop ones (Connection, Keep-Alive, Proxy-Connection,
 *     Proxy-Authorization, TE, Trailer, Transfer-Encoding, Upgrade, and
 *     every field Connection names, RFC 9110 §7.6.1),
 *   - Content-Length and Expect (the body was read: its length is set
 *     again), Host, Forwarded, X-Forwarded-{Host,Proto,Prefix}
 *     (set again here);
 * then Host: 127.0.0.1:PORT, X-Forwarded-For (the client's chain, if any,
 * plus client_addr), X-Forwarded-Host (the client's Host),
 * X-Forwarded-Proto, X-Forwarded-Prefix, Content-Length when body_len > 0
 * or the method carries a body (POST, PUT, PATCH), and either
 * "Connection: Upgrade" + "Upgrade: V" (the client asked for an upgrade:
 * Connection lists "upgrade" and Upgrade is present; *upgrade = 1) or
 * "Connection: close" (*upgrade = 0); then the empty line.
 * Returns 0, or -1 with err bad_request (the sentence says which: a method,
 * path, query, field name or value with a byte HTTP forbids — CTL, space
 * or '#' in the target, '?' in the path, a name outside tchar) with nothing added to out; internal
 * when out of memory. Never reads beyond the strings given.
 */
int api_ports_head_build(const struct api_ports_head_in *in,
    struct evbuffer *out, int *upgrade, struct sbx_err *err);

/* ------------------------------------------------------------------ */
/* Signed tokens: previews and tickets                                 */

enum api_ports_token_kind {
	API_PORTS_PREVIEW = 1,   /* a link anyone holding it may use */
	API_PORTS_TICKET = 2,    /* a short-lived stand-in for the key */
};

/* What a token says. */
struct api_ports_token {
	enum api_ports_token_kind kind;
	uint32_t expires;        /* Unix seconds */
	uint16_t port;           /* 1..65535 */
	uint32_t npc_id;         /* api_npc.id */
	uint32_t principal_id;   /* who made it (api_principal.id) */
};

/* Bytes of a token's text: lowercase RFC 4648 base32 without padding of
 * 15 bytes of claims and a 16-byte MAC, so it fits one DNS label (at most
 * 63 octets, RFC 1035 §2.3.4) and survives a browser's lowercasing of a
 * Host. */
#define API_PORTS_TOKEN_LEN 50
#define API_PORTS_KEY_BYTES 32

/*
 * Derives the proxy's token key from the api's ticket key (libsodium
 * crypto_kdf, context "sbxports", subkey 1): tokens of the two uses
 * cannot stand in for each other. out gets API_PORTS_KEY_BYTES bytes.
 */
void api_ports_key_derive(const unsigned char master[32],
    unsigned char out[API_PORTS_KEY_BYTES]);

/*
 * Writes t as API_PORTS_TOKEN_LEN characters and a NUL into out (cap
 * bytes, at least API_PORTS_TOKEN_LEN + 1). The MAC is HMAC-SHA-512-256
 * (crypto_auth) over the 15 claim bytes under key, its first 16 bytes
 * kept. Returns 0, or -1 when cap is small or t is out of range (port 0,
 * kind unknown).
 */
int api_ports_token_make(const unsigned char key[API_PORTS_KEY_BYTES],
    const struct api_ports_token *t, char *out, size_t cap);

/*
 * Checks text (n bytes, untrusted; upper or lower case) against key:
 * exactly API_PORTS_TOKEN_LEN base32 characters, a MAC that verifies
 * (compared in constant time), a known kind, a port in 1..65535, not
 * expired at now_s (Unix seconds: expires > now_s). Returns 1 with *t
 * filled, 0 otherwise (*t zeroed). One answer whatever is wrong.
 */
int api_ports_token_check(const unsigned char key[API_PORTS_KEY_BYTES],
    const char *text, size_t n, int64_t now_s, struct api_ports_token *t);

/*
 * The token of a preview Host: host (untrusted, may carry ":port") is
 * "<label>.<domain>" with domain compared without case and label
 * exactly API_PORTS_TOKEN_LEN characters. Returns the label's start
 * (inside host) and *n its length, or NULL. domain NULL or "": NULL.
 */
const char *api_ports_preview_host(const char *host, const char *domain,
    size_t *n);

/*
 * Parses a port path segment: 1..65535 in decimal, no sign, no leading
 * zero, at most 5 digits. Returns the port, or 0 for anything else (the
 * route answers 400).
 */
int api_ports_port_parse(const char *seg);

#endif
