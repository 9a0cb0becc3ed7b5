/* sbx_ws.h - RFC 6455 WebSocket over a libevent bufferevent (Debian's libwslay does the framing, adr/0052): server and client roles, a message cap, ping/pong, close with code and reason, bounded output, and the opening handshake's checks. */
#ifndef SBX_WS_H
#define SBX_WS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sbx_err.h"

struct bufferevent;

/* Close codes (RFC 6455 §7.4.1; 4000-4999 are the subprotocol's own). */
#define SBX_WS_NORMAL      1000  /* done (sbx.v1: the command exited) */
#define SBX_WS_GOING_AWAY  1001  /* the server stops, or the peer stopped answering pings */
#define SBX_WS_PROTOCOL_ERROR 1002  /* a frame broke RFC 6455 (libwslay's verdict) */
#define SBX_WS_NO_STATUS   1005  /* reported only: a close frame without a code */
#define SBX_WS_ABNORMAL    1006  /* reported only: the connection ended without a close */
#define SBX_WS_BAD_DATA    1007  /* a text message that is not UTF-8 */
#define SBX_WS_POLICY      1008  /* refused (sbx.v1: not the writer, a bad control) */
#define SBX_WS_TOO_BIG     1009  /* a message over limits.message_max */
#define SBX_WS_INTERNAL    1011  /* the server failed */

/* A close reason is at most this many bytes (125 of a control frame less
 * the 2 of the code, RFC 6455 §5.5). */
#define SBX_WS_REASON_MAX 123

/* Sec-WebSocket-Key: base64 of 16 bytes; Sec-WebSocket-Accept: base64 of a
 * SHA-1 (RFC 6455 §4.1, §4.2.2). Buffers hold these plus the NUL. */
#define SBX_WS_KEY_LEN 24
#define SBX_WS_ACCEPT_LEN 28

enum sbx_ws_role { SBX_WS_SERVER = 0, SBX_WS_CLIENT = 1 };

/* The error code of a failed client handshake (the CLI's own
 * "protocol_error"). */
#define SBX_WS_E_HANDSHAKE "protocol_error"


/* Limits of one connection (config ws_message_max, ws_ping_interval,
 * ws_output_high; docs/security.md). */
struct sbx_ws_limits {
	size_t message_max;   /* bytes of one received message, fragments
	                       * joined; over it: close 1009 with a sentence.
	                       * 0: 1 MiB */
	int64_t ping_ms;      /* the server pings this often; a peer (either
	                       * role) from which nothing arrived for 2 of these
	                       * is closed (1001). 0: no pings, no silence check */
	size_t high_water;    /* output bytes queued above which the producer
	                       * is paused (ops->pause). 0: 1 MiB */
};

/*
 * What a connection tells its owner; every callback runs on the loop, may
 * be NULL, and may call any function below, sbx_ws_free included.
 *   message(arg, text, p, n): one whole message (fragments joined), text
 *     (already checked to be UTF-8 by libwslay, RFC 6455 §8.1) or binary;
 *     p is valid during the call only.
 *   pause(arg, 1): more than high_water bytes wait to be written: stop
 *     producing; pause(arg, 0): they drained to half of it.
 *   closed(arg, code, reason): the connection has ended and its socket is
 *     closed (the bufferevent freed): once, and nothing follows. code is
 *     the close code: the one this side sent when it closed first or
 *     failed the connection (1002, 1007, 1009, 1001), else the peer's
 *     (1005 when its close had none), or 1006 when the connection ended
 *     without a close frame. reason is NUL-terminated ("" for none).
 *   release(arg, bev): bev is about to be freed (the socket closes): the
 *     one callback that also runs inside sbx_ws_free and sbx_ws_new's
 *     failure, e.g. for the HTTP server's connection count of an upgraded
 *     socket. Must not call into ws.
 */
struct sbx_ws_ops {
	void (*message)(void *arg, int text, const unsigned char *p, size_t n);
	void (*pause)(void *arg, int on);
	void (*closed)(void *arg, int code, const char *reason);
	void (*release)(void *arg, struct bufferevent *bev);
};

struct sbx_ws;

/*
 * A WebSocket on bev (taken over: its callbacks and watermarks are
 * replaced, and it is freed, closing the socket, when the connection ends
 * or by sbx_ws_free). The opening handshake is done already (server: 101
 * sent; client: 101 checked with sbx_ws_client_check). Bytes already in
 * bev's input are read on the next turn of the loop. lim NULL: defaults.
 * The client masks every frame with keys from libsodium's randombytes
 * (RFC 6455 §5.3). Returns the connection, or NULL with err (internal: out
 * of memory; bev is then freed too).
 */
struct sbx_ws *sbx_ws_new(struct bufferevent *bev, enum sbx_ws_role role,
    const struct sbx_ws_limits *lim, const struct sbx_ws_ops *ops, void *arg,
    struct sbx_err *err);

/*
 * Queues one message (text: must be UTF-8, the caller's promise; binary
 * otherwise) of the bytes a (an bytes) followed by b (bn bytes; b may be
 * NULL when bn is 0) — two parts so a prefix byte needs no copy by the
 * caller. Never refuses for being over high_water: the producer is told by
 * ops->pause and is expected to stop. Returns 0, or -1 once a close was
 * queued or the connection ended, or out of memory.
 */
int sbx_ws_send(struct sbx_ws *ws, int text, const void *a, size_t an,
    const void *b, size_t bn);

/*
 * sbx_ws_send of o (stolen, decref'd here; NULL: nothing, out of memory
 * upstream) as one compact JSON text message. Returns as sbx_ws_send, -1
 * for o NULL.
 */
int sbx_ws_send_json(struct sbx_ws *ws, json_t *o);

/*
 * Starts the closing handshake (RFC 6455 §7.1.2): sends a close frame with
 * code (1000..4999, not 1005/1006/1015) and reason (NUL-terminated, cut to
 * SBX_WS_REASON_MAX bytes at a UTF-8 boundary; NULL = none) after what is
 * queued, then waits at most 5 s for the peer's close before the socket is
 * closed; ops->closed follows with code. No-op once a close was queued or
 * the connection ended.
 */
void sbx_ws_close(struct sbx_ws *ws, int code, const char *reason);

/*
 * Stops (on = 1) or resumes delivering messages: while stopped nothing more
 * is read from the socket beyond a bounded input buffer, so the peer sees
 * TCP backpressure (the owner's consumer is full). Resuming delivers what
 * waits on the next turn of the loop.
 */
void sbx_ws_read_pause(struct sbx_ws *ws, int on);

/* Bytes queued for the peer (not yet handed to the kernel). */
size_t sbx_ws_output_len(const struct sbx_ws *ws);

/*
 * Frees ws and, if the connection has not ended, closes its socket at
 * once without a close frame; no callback runs after this call. NULL
 * allowed. Safe inside any of ws's callbacks.
 */
void sbx_ws_free(struct sbx_ws *ws);

/* ------------------------------------------------------------------ */
/* The opening handshake (RFC 6455 §4)                                 */

/*
 * The request head fields the server checks, as found (NULL: absent).
 * The caller passes the whole value of each header (evhttp joins none of
 * these; sbx_ws_head_fields picks them from a request's list).
 */
struct sbx_ws_head {
	int is_get;               /* the method is GET */
	int http11;               /* HTTP/1.1 or later */
	const char *upgrade;      /* Upgrade */
	const char *connection;   /* Connection */
	const char *version;      /* Sec-WebSocket-Version */
	const char *key;          /* Sec-WebSocket-Key */
	const char *protocol;     /* Sec-WebSocket-Protocol */
	int keys;                 /* how many Sec-WebSocket-Key fields came
	                           * (0: not counted, taken as one) */
};

struct evkeyvalq;

/*
 * Fills h's fields (not is_get, http11) from a request's header list hd
 * (borrowed: the values stay valid while hd does): the first field of each
 * name, matched case-insensitively, and keys = the number of
 * Sec-WebSocket-Key fields (RFC 6455 §11.3.1: exactly one). Several
 * Sec-WebSocket-Protocol fields are one list (§11.3.4): protocol is the
 * first of them that lists want (byte for byte), else the first; want may
 * be NULL.
 */
void sbx_ws_head_fields(struct sbx_ws_head *h, const struct evkeyvalq *hd,
    const char *want);

/*
 * The server's check of an opening handshake (RFC 6455 §4.2.1): GET on
 * HTTP/1.1, Upgrade holding the token "websocket" and Connection the token
 * "upgrade" (both case-insensitive, in comma lists), Sec-WebSocket-Version
 * 13, one Sec-WebSocket-Key (h->keys <= 1) that is base64 of exactly 16
 * bytes, and, when
 * protocol is not NULL, Sec-WebSocket-Protocol listing protocol exactly.
 * accept gets the Sec-WebSocket-Accept value (§4.2.2). Returns 0, or -1
 * with err bad_request and a sentence naming the header and what it must
 * be (a wrong version: the reply should carry "Sec-WebSocket-Version: 13",
 * §4.4); internal when the hash is unavailable.
 */
int sbx_ws_handshake_check(const struct sbx_ws_head *h, const char *protocol,
    char accept[SBX_WS_ACCEPT_LEN + 1], struct sbx_err *err);

/* base64(SHA-1(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")) into out
 * (RFC 6455 §4.2.2, SHA-1 by Debian's nettle, adr/0052). Returns 0, or -1
 * when key is longer than 64 bytes. */
int sbx_ws_accept_value(const char *key, char out[SBX_WS_ACCEPT_LEN + 1]);

/* A new random Sec-WebSocket-Key (16 bytes from randombytes, base64). */
void sbx_ws_client_key(char key[SBX_WS_KEY_LEN + 1]);

/*
 * The client's check of the server's answer (RFC 6455 §4.1, the server's
 * handshake): status 101, Upgrade "websocket", Connection "upgrade",
 * Sec-WebSocket-Accept the value of key, and, when protocol is not NULL,
 * Sec-WebSocket-Protocol exactly protocol. Header values as received (NULL:
 * absent). Returns 0, or -1 with err SBX_WS_E_HANDSHAKE and a sentence.
 */
int sbx_ws_client_check(int status, const char *upgrade,
    const char *connection, const char *accept, const char *protocol_got,
    const char *key, const char *protocol, struct sbx_err *err);

#endif
