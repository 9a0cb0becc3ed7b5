/* cli_http.c - the sbx CLI's small blocking HTTP/1.1 client (RFC 9112): one request per connection, streamed bodies. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli_http.h"
#include "sbx_config.h"
#include "sbx_proto.h"

#define HDR_MAX (64 * 1024)
#define IO_CHUNK (64 * 1024)
#define CONNECT_TIMEOUT_MS 10000

struct cli_conn {
	int fd;
	char *in;             /* received bytes not yet consumed */
	size_t inoff, inlen, incap;
	int eof;
	int chunked;
	int64_t remaining;    /* bytes left in the current chunk or the body; -1 until close */
	int chunk_state;      /* 0 size line next, 1 in data, 2 CRLF after data, 3 done */
};

static volatile sig_atomic_t got_signal;
static int idle_timeout_ms = 300000;

static void
on_signal(int sig)
{
	got_signal = sig;
}

void
cli_http_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

int
cli_http_interrupted(void)
{
	return got_signal;
}

void
cli_http_clear_interrupt(void)
{
	got_signal = 0;
}

void
cli_http_set_idle_timeout(int ms)
{
	idle_timeout_ms = ms;
}

/* ------------------------------------------------------------------ */
/* URLs                                                                */

int
cli_url_parse(const char *url, struct cli_url *u, struct sbx_err *err)
{
	const char *p, *hend, *pstart, *colon = NULL;
	size_t hl, n;
	char *end;
	long port;

	memset(u, 0, sizeof(*u));
	if (url == NULL || url[0] == '\0')
		return sbx_err_set(err, SBX_E_USAGE, "No server URL: set SBX_URL "
		    "(e.g. http://127.0.0.1:8080).");
	if (strncasecmp(url, "https://", 8) == 0)
		return sbx_err_set(err, SBX_E_USAGE, "sbx speaks plain HTTP only; "
		    "reach an https server through a local tunnel or proxy and "
		    "set SBX_URL to its http:// address.");
	if (strncasecmp(url, "http://", 7) != 0)
		return sbx_err_set(err, SBX_E_USAGE, "SBX_URL must start with "
		    "http:// (e.g. http://127.0.0.1:8080).");
	p = url + 7;
	pstart = p + strcspn(p, "/?#");
	if (memchr(p, '@', (size_t)(pstart - p)) != NULL)
		return sbx_err_set(err, SBX_E_USAGE, "SBX_URL must not contain "
		    "credentials; put the key in SBX_KEY.");
	if (*p == '[') {
		if ((hend = memchr(p, ']', (size_t)(pstart - p))) == NULL)
			return sbx_err_set(err, SBX_E_USAGE, "SBX_URL has a bad "
			    "IPv6 address.");
		hl = (size_t)(hend - p - 1);
		p++;
		if (hend + 1 < pstart) {
			if (hend[1] != ':')
				return sbx_err_set(err, SBX_E_USAGE, "SBX_URL has "
				    "a bad host.");
			colon = hend + 1;
		}
	} else {
		colon = memchr(p, ':', (size_t)(pstart - p));
		hl = (size_t)((colon != NULL ? colon : pstart) - p);
	}
	if (hl == 0 || hl >= sizeof(u->host))
		return sbx_err_set(err, SBX_E_USAGE, "SBX_URL has no usable host.");
	memcpy(u->host, p, hl);
	u->host[hl] = '\0';
	if (colon != NULL) {
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (end != pstart || colon + 1 == pstart || errno != 0 ||
		    port < 1 || port > 65535)
			return sbx_err_set(err, SBX_E_USAGE, "SBX_URL has a bad "
			    "port.");
		snprintf(u->port, sizeof(u->port), "%ld", port);
	} else
		snprintf(u->port, sizeof(u->port), "80");
	if (*pstart == '?' || *pstart == '#')
		return sbx_err_set(err, SBX_E_USAGE, "SBX_URL must not have a "
		    "query or fragment.");
	n = strlen(pstart);
	while (n > 0 && pstart[n - 1] == '/')
		n--;
	if (n >= sizeof(u->prefix))
		return sbx_err_set(err, SBX_E_USAGE, "SBX_URL's path is too long.");
	memcpy(u->prefix, pstart, n);
	u->prefix[n] = '\0';
	return 0;
}

int
cli_url_encode(char *dst, size_t cap, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = strlen(dst);
	unsigned char c;

	for (; *s != '\0'; s++) {
		c = (unsigned char)*s;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '~' || c == '/') {
			if (o + 2 > cap)
				return -1;
			dst[o++] = (char)c;
		} else {
			if (o + 4 > cap)
				return -1;
			dst[o++] = '%';
			dst[o++] = hex[c >> 4];
			dst[o++] = hex[c & 15];
		}
	}
	dst[o] = '\0';
	return 0;
}

/* ------------------------------------------------------------------ */
/* Socket I/O                                                          */

static int
interrupted(struct sbx_err *err)
{
	return sbx_err_set(err, CLI_E_INTERRUPTED, "Interrupted.");
}

/* Waits for fd to become ready for events; 0 ready, -1 err. */
static int
wait_fd(int fd, short events, int timeout_ms, struct sbx_err *err)
{
	struct pollfd pfd;
	int r;

	for (;;) {
		if (got_signal)
			return interrupted(err);
		pfd.fd = fd;
		pfd.events = events;
		pfd.revents = 0;
		r = poll(&pfd, 1, timeout_ms > 0 ? timeout_ms : -1);
		if (r > 0)
			return 0;
		if (r == 0)
			return sbx_err_set(err, CLI_E_IO, "The server did not "
			    "answer for %d seconds.", timeout_ms / 1000);
		if (errno != EINTR)
			return sbx_err_set(err, CLI_E_IO, "poll: %s.",
			    strerror(errno));
	}
}

static int
write_all(int fd, const char *p, size_t n, struct sbx_err *err)
{
	ssize_t w;

	while (n > 0) {
		if (wait_fd(fd, POLLOUT, idle_timeout_ms, err) == -1)
			return -1;
		w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return sbx_err_set(err, CLI_E_IO, "Sending to the server "
			    "failed: %s.", strerror(errno));
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads more bytes into c->in; 0 ok (maybe eof), -1 err. */
static int
fill(struct cli_conn *c, struct sbx_err *err)
{
	size_t ncap;
	ssize_t r;
	char *np;

	if (c->inoff > 0 && c->inoff == c->inlen)
		c->inoff = c->inlen = 0;
	if (c->inoff > 0 && c->incap - c->inlen < IO_CHUNK) {
		memmove(c->in, c->in + c->inoff, c->inlen - c->inoff);
		c->inlen -= c->inoff;
		c->inoff = 0;
	}
	if (c->incap - c->inlen < IO_CHUNK) {
		ncap = c->incap + IO_CHUNK;
		if ((np = realloc(c->in, ncap)) == NULL)
			return sbx_err_oom(err);
		c->in = np;
		c->incap = ncap;
	}
	for (;;) {
		if (wait_fd(c->fd, POLLIN, idle_timeout_ms, err) == -1)
			return -1;
		r = recv(c->fd, c->in + c->inlen, c->incap - c->inlen, 0);
		if (r >= 0)
			break;
		if (errno != EINTR && errno != EAGAIN)
			return sbx_err_set(err, CLI_E_IO, "Reading from the "
			    "server failed: %s.", strerror(errno));
	}
	if (r == 0)
		c->eof = 1;
	c->inlen += (size_t)r;
	return 0;
}

/* More bytes for a line (head or chunk size) that has no end yet: -1 with
 * too_long (protocol_error) past HDR_MAX, with cut (io_error) at eof. */
static int
fill_line(struct cli_conn *c, const char *too_long, const char *cut,
    struct sbx_err *err)
{
	if (c->inlen - c->inoff > HDR_MAX)
		return sbx_err_set(err, CLI_E_PROTOCOL, "%s", too_long);
	if (c->eof)
		return sbx_err_set(err, CLI_E_IO, "%s", cut);
	return fill(c, err);
}

static int
connect_to(const struct cli_url *u, struct sbx_err *err)
{
	struct addrinfo hints, *res = NULL, *ai;
	socklen_t sl;
	int fd = -1, r, soerr = 0, last = ECONNREFUSED;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if ((r = getaddrinfo(u->host, u->port, &hints, &res)) != 0)
		return sbx_err_set(err, CLI_E_UNAVAILABLE, "Cannot resolve %s: "
		    "%s.", u->host, gai_strerror(r));
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, ai->ai_protocol);
		if (fd == -1) {
			last = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			if (wait_fd(fd, POLLOUT, CONNECT_TIMEOUT_MS, err) == -1) {
				close(fd);
				freeaddrinfo(res);
				if (strcmp(err->code, CLI_E_INTERRUPTED) == 0)
					return -1;
				return sbx_err_set(err, CLI_E_UNAVAILABLE,
				    "Cannot connect to %s port %s: timed out.",
				    u->host, u->port);
			}
			sl = sizeof(soerr);
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr,
			    &sl) == 0 && soerr == 0)
				break;
			last = soerr != 0 ? soerr : errno;
		} else
			last = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd == -1)
		return sbx_err_set(err, CLI_E_UNAVAILABLE, "Cannot connect to "
		    "%s port %s: %s. Is sandbox-api running there (SBX_URL)?",
		    u->host, u->port, strerror(last));
	return fd;
}

/* ------------------------------------------------------------------ */
/* Requests                                                            */

/* Copies len bytes of fd to the socket; 0 ok, -1 err. */
static int
send_file(struct cli_conn *c, int fd, size_t len, struct sbx_err *err)
{
	char *buf;
	ssize_t r;
	size_t want;
	int rc = -1;

	if ((buf = malloc(IO_CHUNK)) == NULL)
		return sbx_err_oom(err);
	while (len > 0) {
		want = len < IO_CHUNK ? len : IO_CHUNK;
		r = read(fd, buf, want);
		if (r < 0 && errno == EINTR) {
			if (got_signal) {
				interrupted(err);
				goto done;
			}
			continue;
		}
		if (r < 0) {
			sbx_err_set(err, SBX_E_INTERNAL, "Reading the local file "
			    "failed: %s.", strerror(errno));
			goto done;
		}
		if (r == 0) {
			sbx_err_set(err, SBX_E_INTERNAL, "The local file shrank "
			    "while it was being sent.");
			goto done;
		}
		if (write_all(c->fd, buf, (size_t)r, err) == -1)
			goto done;
		len -= (size_t)r;
	}
	rc = 0;
done:
	free(buf);
	return rc;
}

/* Parses the status line and headers once they are all in c->in. */
static int
parse_head(struct cli_conn *c, size_t hlen, struct cli_resp *resp,
    struct sbx_err *err)
{
	char *head, *line, *next, *colon, *v, *end;
	long long cl;
	int minor;

	if ((head = strndup(c->in + c->inoff, hlen)) == NULL)
		return sbx_err_oom(err);
	c->inoff += hlen + 4;
	if (sscanf(head, "HTTP/1.%d %3d", &minor, &resp->status) != 2 ||
	    resp->status < 100 || resp->status > 599) {
		free(head);
		return sbx_err_set(err, CLI_E_PROTOCOL, SBX_MSG_NOT_HTTP);
	}
	for (line = strstr(head, "\r\n"); line != NULL; line = next) {
		line += 2;
		next = strstr(line, "\r\n");
		if (next != NULL)
			*next = '\0';
		if ((colon = strchr(line, ':')) == NULL)
			continue;
		*colon = '\0';
		for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
			;
		end = v + strlen(v);
		while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		if (strcasecmp(line, "Content-Type") == 0)
			snprintf(resp->content_type, sizeof(resp->content_type),
			    "%s", v);
		else if (strcasecmp(line, "Content-Length") == 0) {
			errno = 0;
			cl = strtoll(v, &end, 10);
			if (*v == '\0' || *end != '\0' || cl < 0 || errno != 0) {
				free(head);
				return sbx_err_set(err, CLI_E_PROTOCOL, "The "
				    "server sent a bad Content-Length.");
			}
			resp->content_length = cl;
		} else if (strcasecmp(line, "Transfer-Encoding") == 0 &&
		    strcasestr(v, "chunked") != NULL)
			resp->chunked = 1;
		else if (strcasecmp(line, "Upgrade") == 0)
			snprintf(resp->upgrade, sizeof(resp->upgrade), "%s", v);
		else if (strcasecmp(line, "Connection") == 0)
			snprintf(resp->connection, sizeof(resp->connection),
			    "%s", v);
		else if (strcasecmp(line, "Sec-WebSocket-Accept") == 0)
			snprintf(resp->ws_accept, sizeof(resp->ws_accept), "%s",
			    v);
		else if (strcasecmp(line, "Sec-WebSocket-Protocol") == 0)
			snprintf(resp->ws_protocol, sizeof(resp->ws_protocol),
			    "%s", v);
	}
	free(head);
	if (resp->chunked)
		resp->content_length = -1;
	return 0;
}

static int
read_head(struct cli_conn *c, struct cli_resp *resp, struct sbx_err *err)
{
	const char *p;
	size_t scanned = 0;

	for (;;) {
		if (c->inlen - c->inoff >= 5 &&
		    memcmp(c->in + c->inoff, "HTTP/", 5) != 0)
			return sbx_err_set(err, CLI_E_PROTOCOL,
			    SBX_MSG_NOT_HTTP);
		if (c->inlen - c->inoff >= 4) {
			p = memmem(c->in + c->inoff + scanned,
			    c->inlen - c->inoff - scanned, "\r\n\r\n", 4);
			if (p != NULL) {
				if (parse_head(c, (size_t)(p - c->in - c->inoff),
				    resp, err) == -1)
					return -1;
				/* Interim 1xx answers precede the real one (101
				 * is the last answer of an upgrade). */
				if (resp->status < 200 && resp->status != 101) {
					memset(resp, 0, sizeof(*resp));
					resp->content_length = -1;
					scanned = 0;
					continue;
				}
				return 0;
			}
			scanned = c->inlen - c->inoff - 3;
		}
		if (fill_line(c, "The server's headers are too large.",
		    "The server closed the connection without an answer.",
		    err) == -1)
			return -1;
	}
}

static struct cli_conn *
request(const struct cli_url *u, const char *method, const char *target,
    const char *key, const struct cli_body *body, const char *conn_headers,
    struct cli_resp *resp, struct sbx_err *err)
{
	struct cli_conn *c = NULL;
	struct sbx_err serr;
	char *req = NULL;
	size_t blen = body != NULL ? body->len : 0;
	int n, sent;

	memset(resp, 0, sizeof(*resp));
	resp->content_length = -1;
	sbx_err_clear(&serr);
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	c->fd = -1;
	if ((c->fd = connect_to(u, err)) == -1)
		goto fail;
	n = asprintf(&req, "%s %s%s HTTP/1.1\r\nHost: %s%s%s:%s\r\n"
	    "User-Agent: sbx\r\nAccept: */*\r\n%s"
	    "Content-Length: %zu\r\n%s%s%s%s%s%s\r\n", method, u->prefix, target,
	    strchr(u->host, ':') != NULL ? "[" : "", u->host,
	    strchr(u->host, ':') != NULL ? "]" : "", u->port, conn_headers, blen,
	    body != NULL && body->content_type != NULL ? "Content-Type: " : "",
	    body != NULL && body->content_type != NULL ? body->content_type : "",
	    body != NULL && body->content_type != NULL ? "\r\n" : "",
	    key != NULL ? SBX_HDR_AUTHORIZATION ": " SBX_AUTH_BEARER : "",
	    key != NULL ? key : "", key != NULL ? "\r\n" : "");
	if (n < 0) {
		req = NULL;
		sbx_err_oom(err);
		goto fail;
	}
	sent = write_all(c->fd, req, (size_t)n, &serr) == 0;
	explicit_bzero(req, (size_t)n);
	if (sent && blen > 0) {
		if (body->fd >= 0)
			sent = send_file(c, body->fd, blen, &serr) == 0;
		else
			sent = write_all(c->fd, body->data, blen, &serr) == 0;
	}
	if (!sent && (strcmp(serr.code, CLI_E_IO) != 0 || got_signal)) {
		*err = serr;
		goto fail;
	}
	/* Even when sending broke off, the server may have answered first
	 * (a refusal before reading the body): read that answer. */
	if (read_head(c, resp, err) == -1) {
		if (!sent)
			*err = serr;
		goto fail;
	}
	c->chunked = resp->chunked;
	c->remaining = resp->chunked ? 0 : resp->content_length;
	if (strcmp(method, "HEAD") == 0 || resp->status == 204 ||
	    resp->status == 304) {
		c->remaining = 0;
		c->chunked = 0;
	}
	free(req);
	return c;
fail:
	free(req);
	cli_http_close(c);
	return NULL;
}

struct cli_conn *
cli_http_request(const struct cli_url *u, const char *method,
    const char *target, const char *key, const struct cli_body *body,
    struct cli_resp *resp, struct sbx_err *err)
{
	return request(u, method, target, key, body, "Connection: close\r\n",
	    resp, err);
}

struct cli_conn *
cli_http_upgrade(const struct cli_url *u, const char *target,
    const char *key, const char *headers, struct cli_resp *resp,
    struct sbx_err *err)
{
	char *h = NULL;
	struct cli_conn *c;

	if (asprintf(&h, "Connection: Upgrade\r\n%s", headers) < 0) {
		sbx_err_oom(err);
		return NULL;
	}
	c = request(u, "GET", target, key, NULL, h, resp, err);
	free(h);
	return c;
}

int
cli_http_detach(struct cli_conn *c, char **left, size_t *leftn)
{
	int fd = c->fd;

	*leftn = c->inlen - c->inoff;
	*left = NULL;
	if (*leftn > 0 && (*left = malloc(*leftn)) != NULL)
		memcpy(*left, c->in + c->inoff, *leftn);
	if (*leftn > 0 && *left == NULL) {
		cli_http_close(c);
		return -1;
	}
	c->fd = -1;
	cli_http_close(c);
	return fd;
}

/* Reads a chunk-size line; 0 ok with c->remaining set, -1 err. */
static int
chunk_size(struct cli_conn *c, struct sbx_err *err)
{
	const char *nl;
	char *end;
	unsigned long long v;

	for (;;) {
		nl = memchr(c->in + c->inoff, '\n', c->inlen - c->inoff);
		if (nl != NULL)
			break;
		if (c->inlen - c->inoff > 1024)
			return sbx_err_set(err, CLI_E_PROTOCOL,
			    SBX_MSG_BAD_CHUNKED);
		if (c->eof)
			return sbx_err_set(err, CLI_E_IO, SBX_MSG_CUT_SHORT);
		if (fill(c, err) == -1)
			return -1;
	}
	errno = 0;
	v = strtoull(c->in + c->inoff, &end, 16);
	if (end == c->in + c->inoff || errno != 0 || v > (1ULL << 40) ||
	    (*end != '\r' && *end != '\n' && *end != ';' && *end != ' '))
		return sbx_err_set(err, CLI_E_PROTOCOL, SBX_MSG_BAD_CHUNKED);
	c->inoff = (size_t)(nl - c->in) + 1;
	c->remaining = (int64_t)v;
	return 0;
}

/* Skips the CRLF after chunk data, or the trailer section after the last
 * chunk (lines up to an empty one). */
static int
skip_line(struct cli_conn *c, int *empty, struct sbx_err *err)
{
	const char *nl;

	for (;;) {
		nl = memchr(c->in + c->inoff, '\n', c->inlen - c->inoff);
		if (nl != NULL)
			break;
		if (fill_line(c, SBX_MSG_BAD_CHUNKED,
		    SBX_MSG_CUT_SHORT, err) == -1)
			return -1;
	}
	*empty = nl == c->in + c->inoff ||
	    (nl == c->in + c->inoff + 1 && c->in[c->inoff] == '\r');
	c->inoff = (size_t)(nl - c->in) + 1;
	return 0;
}

ssize_t
cli_http_read(struct cli_conn *c, void *buf, size_t cap,
    struct sbx_err *err)
{
	size_t avail, n;
	int empty;

	for (;;) {
		if (c->chunked) {
			if (c->chunk_state == 3)
				return 0;
			if (c->chunk_state == 0) {
				if (chunk_size(c, err) == -1)
					return -1;
				if (c->remaining == 0) {
					do {
						if (skip_line(c, &empty, err) == -1)
							return -1;
					} while (!empty);
					c->chunk_state = 3;
					return 0;
				}
				c->chunk_state = 1;
			}
			if (c->chunk_state == 2) {
				if (skip_line(c, &empty, err) == -1)
					return -1;
				c->chunk_state = 0;
				continue;
			}
		} else if (c->remaining == 0)
			return 0;
		avail = c->inlen - c->inoff;
		if (avail == 0) {
			if (c->eof) {
				if (!c->chunked && c->remaining < 0)
					return 0;
				return sbx_err_set(err, CLI_E_IO,
				    SBX_MSG_CUT_SHORT);
			}
			if (fill(c, err) == -1)
				return -1;
			continue;
		}
		n = avail < cap ? avail : cap;
		if (c->remaining >= 0 && (int64_t)n > c->remaining)
			n = (size_t)c->remaining;
		memcpy(buf, c->in + c->inoff, n);
		c->inoff += n;
		if (c->remaining > 0)
			c->remaining -= (int64_t)n;
		if (c->chunked && c->remaining == 0)
			c->chunk_state = 2;
		return (ssize_t)n;
	}
}

char *
cli_http_read_all(struct cli_conn *c, size_t max, size_t *len,
    struct sbx_err *err)
{
	char *out = NULL, *np;
	size_t used = 0, cap = 0;
	ssize_t r;

	for (;;) {
		if (cap - used < IO_CHUNK + 1) {
			if ((np = realloc(out, cap + IO_CHUNK + 1)) == NULL) {
				sbx_err_oom(err);
				goto fail;
			}
			out = np;
			cap += IO_CHUNK + 1;
		}
		r = cli_http_read(c, out + used, cap - used - 1, err);
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		used += (size_t)r;
		if (used > max) {
			sbx_err_set(err, CLI_E_PROTOCOL, "The server's answer is "
			    "larger than %zu bytes.", max);
			goto fail;
		}
	}
	out[used] = '\0';
	*len = used;
	return out;
fail:
	free(out);
	return NULL;
}

void
cli_http_close(struct cli_conn *c)
{
	if (c == NULL)
		return;
	if (c->fd != -1)
		close(c->fd);
	free(c->in);
	free(c);
}
