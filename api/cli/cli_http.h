/* cli_http.h - the sbx CLI's small blocking HTTP/1.1 client: one request per connection, streamed bodies both ways. */
#ifndef CLI_HTTP_H
#define CLI_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx_err.h"

/* Error codes of this module, beyond the SBX_E_* ones. */
#define CLI_E_UNAVAILABLE "unavailable"   /* cannot connect: refused, no route, no such host */
#define CLI_E_INTERRUPTED "interrupted"   /* SIGINT/SIGTERM arrived (cli_http_interrupted) */
#define CLI_E_PROTOCOL "protocol_error"   /* the server's answer is not HTTP/1.x as expected */
#define CLI_E_IO "io_error"               /* the connection failed or timed out mid-way */

/* An http:// base URL: host, port and a path prefix without trailing '/'. */
struct cli_url {
	char host[256];
	char port[8];
	char prefix[512];
};

/*
 * Parses "http://HOST[:PORT][/PREFIX]" (HOST may be "[v6addr]"; PORT
 * defaults to 80; a trailing '/' is dropped). Returns 0, or -1 with err
 * code "usage" and a sentence (https is refused: put a TLS-terminating
 * proxy's plain-HTTP side or an ssh tunnel in front). Never stores or
 * prints credentials; "user:pass@" in the URL is refused.
 */
int cli_url_parse(const char *url, struct cli_url *u, struct sbx_err *err);

/*
 * Appends to dst (capacity cap, NUL-terminated) s percent-encoded for a
 * query value: every byte except A-Z a-z 0-9 - . _ ~ / becomes %XX.
 * Returns 0, or -1 when it does not fit.
 */
int cli_url_encode(char *dst, size_t cap, const char *s);

/* The answer's status line and the headers the CLI uses. */
struct cli_resp {
	int status;               /* e.g. 200 */
	char content_type[128];   /* "" when absent */
	int64_t content_length;   /* -1 when absent or chunked */
	int chunked;              /* Transfer-Encoding: chunked */
	/* The headers of a 101 (cli_http_upgrade); "" when absent. */
	char upgrade[32], connection[64], ws_accept[64], ws_protocol[64];
};

/* The request body: none, bytes in memory, or a file descriptor. */
struct cli_body {
	const char *content_type; /* NULL: no Content-Type header */
	const void *data;         /* in-memory body (borrowed), or NULL */
	size_t len;               /* its length */
	int fd;                   /* >= 0: read len bytes from fd instead */
};

struct cli_conn;

/*
 * Connects to u (10 s connect timeout), sends "METHOD u->prefix + target
 * HTTP/1.1" with Host, "Authorization: Bearer KEY" when key is non-NULL
 * (the key is written only to the socket), Connection: close, and the body
 * (Content-Length; a file body is copied in 64 KiB pieces, so files of any
 * size go out without being held in memory), then reads the status line
 * and headers into *resp. Returns the connection (owned: cli_http_close),
 * whose body cli_http_read delivers. Returns NULL with err set:
 * CLI_E_UNAVAILABLE when the connection cannot be made (refused, host
 * unknown or unreachable, connect timeout); CLI_E_IO when it breaks or
 * stalls longer than the idle timeout (cli_http_set_idle_timeout);
 * CLI_E_PROTOCOL for an answer that is not HTTP/1.x; CLI_E_INTERRUPTED on
 * SIGINT/SIGTERM. A server that answers before reading the whole body
 * (e.g. 401, 413) still gets its answer read.
 */
struct cli_conn *cli_http_request(const struct cli_url *u, const char *method,
    const char *target, const char *key, const struct cli_body *body,
    struct cli_resp *resp, struct sbx_err *err);

/*
 * Reads up to cap bytes of the answer's body (chunked transfer coding
 * removed) into buf. Returns the number of bytes (> 0) as soon as some
 * arrived, 0 at the body's regular end, -1 with err (CLI_E_IO when the
 * connection ends before the body is complete or stalls, CLI_E_PROTOCOL for
 * bad chunk framing, CLI_E_INTERRUPTED on a signal).
 */
ssize_t cli_http_read(struct cli_conn *c, void *buf, size_t cap,
    struct sbx_err *err);

/*
 * Reads the whole body into a new NUL-terminated buffer (owned: free) of
 * at most max bytes; *len gets its length. NULL with err on failure or
 * when the body is larger than max.
 */
char *cli_http_read_all(struct cli_conn *c, size_t max, size_t *len,
    struct sbx_err *err);

/*
 * cli_http_request for a GET that asks to switch protocols (RFC 9110
 * §7.8): "Connection: Upgrade" and headers ("Name: value\r\n"..., e.g.
 * Upgrade and the Sec-WebSocket-* of RFC 6455 §4.1) instead of
 * "Connection: close". A 101 fills resp's upgrade fields; take the socket
 * with cli_http_detach. Other answers are read as cli_http_request's.
 */
struct cli_conn *cli_http_upgrade(const struct cli_url *u, const char *target,
    const char *key, const char *headers, struct cli_resp *resp,
    struct sbx_err *err);

/*
 * Takes the socket out of c (after a 101) and frees c: returns the fd
 * (non-blocking, the caller's to close), *left the bytes the server sent
 * after the answer's head (owned: free; NULL when none) and *leftn their
 * count. -1 when out of memory (c freed, the socket closed).
 */
int cli_http_detach(struct cli_conn *c, char **left, size_t *leftn);

/* Closes the connection (which cancels whatever the server streams) and
 * frees c. NULL allowed. */
void cli_http_close(struct cli_conn *c);

/* Milliseconds a read may wait without any byte arriving; default 300000.
 * 0: no limit. */
void cli_http_set_idle_timeout(int ms);

/*
 * Installs SIGINT/SIGTERM handlers (without SA_RESTART) so a blocked
 * request returns CLI_E_INTERRUPTED instead of the process dying, and
 * ignores SIGPIPE. cli_http_interrupted returns the signal seen, or 0.
 */
void cli_http_signals(void);
int cli_http_interrupted(void);
/* Forgets a signal seen, so one more request (a cancel) can be made. */
void cli_http_clear_interrupt(void);

#endif
