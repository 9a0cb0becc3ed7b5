/* sbx_http_client.c - a small HTTP/1.1 client on bufferevents (see sbx_http_client.h, adr/0003). */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>

#include "sbx_bev.h"
#include "sbx_http_client.h"
#include "sbx_proto.h"

#define LINE_MAX_BYTES 8192
#define CHUNK_LINE_MAX 1024
#define HEADERS_MAX 100
#define HEADER_BYTES_MAX (64 * 1024)
#define DELIVER_MAX (64 * 1024)

enum hstate {
	HS_CONNECTING,
	HS_STATUS,
	HS_HEADERS,
	HS_BODY_LEN,
	HS_CHUNK_SIZE,
	HS_CHUNK_DATA,
	HS_CHUNK_CRLF,
	HS_TRAILERS,
	HS_BODY_CLOSE,
	HS_RAW,
	HS_DONE,
};

struct hdr {
	char *name;
	char *value;
};

struct sbx_http_req {
	struct event_base *base;
	struct bufferevent *bev;
	struct event *kick;        /* deferred processing and start failures */
	struct event *hdr_timer;
	struct event *tot_timer;
	struct sbx_http_cbs cbs;
	char unavailable_code[48];
	char protocol_code[48];
	char cut_code[48];
	char hdr_timeout_code[48];
	char peer[64];
	char address[128];
	enum hstate state;
	int status;
	int is_head;
	int upgrade_req;
	int upgraded;
	int paused;
	int eof;
	int starting;
	int busy;
	int dead;
	int close_write_pending;
	int write_closed;
	int have_pending;
	int send_stream;           /* the caller writes the body (body_stream) */
	uint64_t send_left;        /* bytes of it not written yet */
	int64_t hdr_ms;            /* opts.header_timeout_ms */
	struct evbuffer_cb_entry *out_ent;  /* send_stream: output watched */
	struct sbx_err pending;
	uint64_t remaining;
	size_t header_bytes;
	struct hdr hdrs[HEADERS_MAX];
	size_t nhdrs;
};

static void req_free(struct sbx_http_req *);
static void process(struct sbx_http_req *);

static void
clear_headers(struct sbx_http_req *r)
{
	size_t i;

	for (i = 0; i < r->nhdrs; i++) {
		free(r->hdrs[i].name);
		free(r->hdrs[i].value);
	}
	r->nhdrs = 0;
	r->header_bytes = 0;
}

static void
req_free(struct sbx_http_req *r)
{
	if (r == NULL)
		return;
	if (r->out_ent != NULL)
		evbuffer_remove_cb_entry(bufferevent_get_output(r->bev),
		    r->out_ent);
	if (r->bev != NULL)
		bufferevent_free(r->bev);
	if (r->kick != NULL)
		event_free(r->kick);
	if (r->hdr_timer != NULL)
		event_free(r->hdr_timer);
	if (r->tot_timer != NULL)
		event_free(r->tot_timer);
	clear_headers(r);
	free(r);
}

/* Entry and exit of every libevent callback: a caller may cancel from inside
 * one of our callbacks, so freeing waits until the outermost frame ends. */
static void
enter(struct sbx_http_req *r)
{
	r->busy++;
}

static void
leave(struct sbx_http_req *r)
{
	if (--r->busy == 0 && r->dead)
		req_free(r);
}

static void
finish(struct sbx_http_req *r, const struct sbx_err *err)
{
	if (r->dead)
		return;
	r->state = HS_DONE;
	if (r->bev != NULL)
		bufferevent_disable(r->bev, EV_READ | EV_WRITE);
	event_del(r->hdr_timer);
	event_del(r->tot_timer);
	enter(r);
	if (r->cbs.done != NULL)
		r->cbs.done(r->cbs.arg, r, err);
	r->dead = 1;
	leave(r);
}

static void
fail(struct sbx_http_req *r, const char *code, const char *fmt, const char *what)
{
	struct sbx_err e;

	sbx_err_set(&e, code, fmt, r->peer, what != NULL ? what : "");
	finish(r, &e);
}

static void
protocol_fail(struct sbx_http_req *r, const char *what)
{
	fail(r, r->protocol_code, "bad HTTP response from %s: %s", what);
}

/* Delivers up to max bytes of the input buffer to body(). Returns bytes
 * consumed, 0 when nothing was available or the request ended. */
static size_t
deliver(struct sbx_http_req *r, struct evbuffer *in, uint64_t max)
{
	struct evbuffer_iovec v;
	size_t n;

	if (max == 0 || evbuffer_peek(in, -1, NULL, &v, 1) < 1)
		return 0;
	n = v.iov_len;
	if (n > max)
		n = (size_t)max;
	if (n > DELIVER_MAX)
		n = DELIVER_MAX;
	if (n == 0)
		return 0;
	if (r->cbs.body != NULL)
		r->cbs.body(r->cbs.arg, r, v.iov_base, n);
	evbuffer_drain(in, n);
	return n;
}

static const char *
find_header(const struct sbx_http_req *r, const char *name)
{
	size_t i;

	for (i = 0; i < r->nhdrs; i++)
		if (strcasecmp(r->hdrs[i].name, name) == 0)
			return r->hdrs[i].value;
	return NULL;
}

static int
parse_status_line(struct sbx_http_req *r, const char *line)
{
	int st;

	if (strncmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1')
	    || line[8] != ' ')
		return -1;
	if (!isdigit((unsigned char)line[9]) || !isdigit((unsigned char)line[10])
	    || !isdigit((unsigned char)line[11]))
		return -1;
	if (line[12] != '\0' && line[12] != ' ')
		return -1;
	st = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
	if (st < 100 || st > 599)
		return -1;
	r->status = st;
	return 0;
}

static int
add_header(struct sbx_http_req *r, const char *line, size_t len)
{
	const char *colon, *v, *end;
	size_t i, nlen;

	if (r->nhdrs >= HEADERS_MAX)
		return -1;
	r->header_bytes += len;
	if (r->header_bytes > HEADER_BYTES_MAX)
		return -1;
	colon = memchr(line, ':', len);
	if (colon == NULL || colon == line)
		return -1;
	nlen = (size_t)(colon - line);
	for (i = 0; i < nlen; i++)
		if (!isgraph((unsigned char)line[i]))
			return -1;
	v = colon + 1;
	end = line + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	r->hdrs[r->nhdrs].name = strndup(line, nlen);
	r->hdrs[r->nhdrs].value = strndup(v, (size_t)(end - v));
	if (r->hdrs[r->nhdrs].name == NULL || r->hdrs[r->nhdrs].value == NULL) {
		free(r->hdrs[r->nhdrs].name);
		free(r->hdrs[r->nhdrs].value);
		return -1;
	}
	r->nhdrs++;
	return 0;
}

static int
has_token(const char *value, const char *token)
{
	size_t tl = strlen(token);
	const char *p = value;

	while (p != NULL && *p != '\0') {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (strncasecmp(p, token, tl) == 0 &&
		    (p[tl] == '\0' || p[tl] == ',' || p[tl] == ' ' || p[tl] == ';'))
			return 1;
		p = strchr(p, ',');
	}
	return 0;
}

/* Headers complete: choose how the body is framed, then tell the caller. */
static int
headers_done(struct sbx_http_req *r)
{
	const char *te, *cl;
	char *end;
	unsigned long long n;

	if (r->status >= 100 && r->status < 200 && r->status != 101) {
		clear_headers(r);       /* 100 Continue and friends */
		r->state = HS_STATUS;
		return 0;
	}
	event_del(r->hdr_timer);
	te = find_header(r, "Transfer-Encoding");
	cl = find_header(r, "Content-Length");
	if (r->status == 101) {
		if (!r->upgrade_req) {
			protocol_fail(r, "101 without an upgrade request");
			return -1;
		}
		r->upgraded = 1;
		r->state = HS_RAW;
		if (r->close_write_pending)
			bufferevent_enable(r->bev, EV_WRITE);
	} else if (r->is_head || r->status == 204 || r->status == 304) {
		r->state = HS_BODY_LEN;
		r->remaining = 0;
	} else if (te != NULL && has_token(te, "chunked")) {
		r->state = HS_CHUNK_SIZE;
	} else if (cl != NULL) {
		errno = 0;
		if (!isdigit((unsigned char)cl[0])) {
			protocol_fail(r, "bad Content-Length");
			return -1;
		}
		n = strtoull(cl, &end, 10);
		if (errno != 0 || *end != '\0') {
			protocol_fail(r, "bad Content-Length");
			return -1;
		}
		r->state = HS_BODY_LEN;
		r->remaining = n;
	} else {
		r->state = HS_BODY_CLOSE;
	}
	if (r->cbs.response != NULL)
		r->cbs.response(r->cbs.arg, r, r->status);
	if (r->dead)
		return -1;
	if (r->state == HS_BODY_LEN && r->remaining == 0) {
		finish(r, NULL);
		return -1;
	}
	return 0;
}

/* Reads one CRLF/LF line of at most max bytes. 1: got one (*out owned),
 * 0: need more bytes, -1: too long. */
static int
read_line(struct evbuffer *in, size_t max, char **out, size_t *len)
{
	struct evbuffer_ptr p;

	p = evbuffer_search_eol(in, NULL, NULL, EVBUFFER_EOL_CRLF);
	if (p.pos < 0)
		return evbuffer_get_length(in) > max ? -1 : 0;
	if ((size_t)p.pos > max)
		return -1;
	*out = evbuffer_readln(in, len, EVBUFFER_EOL_CRLF);
	return *out != NULL ? 1 : -1;
}

static void
process(struct sbx_http_req *r)
{
	struct evbuffer *in;
	char *line = NULL, *end;
	size_t len, n;
	int rc;
	unsigned long long sz;

	if (r->bev == NULL)
		return;
	in = bufferevent_get_input(r->bev);
	while (!r->dead && !r->paused) {
		switch (r->state) {
		case HS_CONNECTING:
		case HS_DONE:
			return;
		case HS_STATUS:
		case HS_HEADERS:
		case HS_CHUNK_SIZE:
		case HS_CHUNK_CRLF:
		case HS_TRAILERS:
			rc = read_line(in, r->state == HS_CHUNK_SIZE ||
			    r->state == HS_CHUNK_CRLF ? CHUNK_LINE_MAX :
			    LINE_MAX_BYTES, &line, &len);
			if (rc < 0) {
				protocol_fail(r, "line too long");
				return;
			}
			if (rc == 0)
				goto more;
			if (r->state == HS_STATUS) {
				if (parse_status_line(r, line) < 0) {
					free(line);
					protocol_fail(r, "malformed status line");
					return;
				}
				r->state = HS_HEADERS;
			} else if (r->state == HS_HEADERS) {
				if (len == 0) {
					free(line);
					line = NULL;
					if (headers_done(r) < 0)
						return;
					continue;
				}
				if (add_header(r, line, len) < 0) {
					free(line);
					protocol_fail(r, "malformed or too many headers");
					return;
				}
			} else if (r->state == HS_CHUNK_SIZE) {
				errno = 0;
				sz = strtoull(line, &end, 16);
				if (!isxdigit((unsigned char)line[0]) || errno != 0 ||
				    (*end != '\0' && *end != ';' && *end != ' ')) {
					free(line);
					protocol_fail(r, "bad chunk size");
					return;
				}
				r->remaining = sz;
				r->state = sz == 0 ? HS_TRAILERS : HS_CHUNK_DATA;
			} else if (r->state == HS_CHUNK_CRLF) {
				if (len != 0) {
					free(line);
					protocol_fail(r, "chunk not followed by CRLF");
					return;
				}
				r->state = HS_CHUNK_SIZE;
			} else { /* HS_TRAILERS */
				if (len == 0) {
					free(line);
					finish(r, NULL);
					return;
				}
			}
			free(line);
			line = NULL;
			break;
		case HS_BODY_LEN:
		case HS_CHUNK_DATA:
			n = deliver(r, in, r->remaining);
			if (n == 0)
				goto more;
			r->remaining -= n;
			if (r->dead)
				return;
			if (r->remaining == 0) {
				if (r->state == HS_BODY_LEN) {
					finish(r, NULL);
					return;
				}
				r->state = HS_CHUNK_CRLF;
			}
			break;
		case HS_BODY_CLOSE:
		case HS_RAW:
			if (deliver(r, in, UINT64_MAX) == 0)
				goto more;
			break;
		}
	}
	return;
more:
	/* Everything buffered is consumed; at EOF the body either ended
	 * properly (read until close) or was cut short. */
	if (r->eof && !r->dead) {
		if (r->state == HS_BODY_CLOSE || r->state == HS_RAW)
			finish(r, NULL);
		else if (r->state == HS_STATUS && r->status == 0 &&
		    evbuffer_get_length(in) == 0)
			/* not one byte of an answer: the peer is gone (a
			 * daemon killed mid-request), not misbehaving */
			fail(r, r->unavailable_code,
			    "%s closed the connection without a response%s", NULL);
		else
			fail(r, r->cut_code, "%s closed the connection before "
			    "the response was complete%s", NULL);
	}
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
	struct sbx_http_req *r = arg;

	(void)sbx_bev_fill(bev, SBX_BEV_IO_MAX);
	enter(r);
	process(r);
	leave(r);
}

static void
maybe_shutdown(struct sbx_http_req *r)
{
	if (r->close_write_pending && !r->write_closed && r->upgraded &&
	    evbuffer_get_length(bufferevent_get_output(r->bev)) == 0) {
		r->write_closed = 1;
		r->close_write_pending = 0;
		shutdown(bufferevent_getfd(r->bev), SHUT_WR);
	}
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	struct sbx_http_req *r = arg;

	(void)bev;
	if (!r->dead)
		maybe_shutdown(r);
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct sbx_http_req *r = arg;
	struct sbx_err e;
	int dnserr;

	(void)bev;
	if (r->dead)
		return;
	if (what & BEV_EVENT_CONNECTED) {
		r->state = HS_STATUS;
		/* The response, or the peer's EOF, may have been read before
		 * the connect was reported (a unix socket peer that answered
		 * or closed at once): process it now, else nothing would until
		 * the next read, which may never come (found by fuzzing). */
		enter(r);
		process(r);
		leave(r);
		return;
	}
	if (r->state == HS_CONNECTING && (what & BEV_EVENT_ERROR)) {
		dnserr = bufferevent_socket_get_dns_error(bev);
		sbx_err_set(&e, r->unavailable_code, SBX_MSG_NO_CONNECT,
		    r->peer, r->address, dnserr != 0 ? evutil_gai_strerror(dnserr) :
		    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		if (r->starting) {
			/* Never call back before sbx_http_request() returns. */
			r->pending = e;
			r->have_pending = 1;
			return;
		}
		enter(r);
		finish(r, &e);
		leave(r);
		return;
	}
	enter(r);
	if ((what & BEV_EVENT_WRITING) && (what & BEV_EVENT_ERROR) &&
	    (r->upgraded || r->send_stream)) {
		/* The peer stopped reading what we send (an exec whose process
		 * exited without reading stdin, a server that answered a
		 * streamed body early): drop the rest, keep reading. */
		r->write_closed = 1;
		r->close_write_pending = 0;
		evbuffer_drain(bufferevent_get_output(bev),
		    evbuffer_get_length(bufferevent_get_output(bev)));
		bufferevent_disable(bev, EV_WRITE);
		leave(r);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		r->eof = 1;
		process(r);
	} else if (what & BEV_EVENT_ERROR) {
		/* A reset before any byte of the answer: unavailable, as above. */
		sbx_err_set(&e, r->state == HS_STATUS && r->status == 0 &&
		    evbuffer_get_length(bufferevent_get_input(bev)) == 0 ?
		    r->unavailable_code : r->cut_code,
		    "connection to %s failed: %s",
		    r->peer, evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		finish(r, &e);
	}
	leave(r);
}

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_http_req *r = arg;

	(void)fd;
	(void)what;
	enter(r);
	if (r->have_pending) {
		r->have_pending = 0;
		finish(r, &r->pending);
	} else {
		process(r);
	}
	leave(r);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_http_req *r = arg;
	struct sbx_err e;

	(void)fd;
	(void)what;
	enter(r);
	sbx_err_set(&e, SBX_E_TIMEOUT, SBX_MSG_NO_ANSWER, r->peer);
	finish(r, &e);
	leave(r);
}

/* The header timeout: its own code (opts.header_timeout_code). */
static void
hdr_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_http_req *r = arg;
	struct sbx_err e;

	(void)fd;
	(void)what;
	enter(r);
	sbx_err_set(&e, r->hdr_timeout_code, SBX_MSG_NO_ANSWER,
	    r->peer);
	finish(r, &e);
	leave(r);
}

static int
valid_token(const char *s, int allow_space)
{
	if (s == NULL || *s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (*s == '\r' || *s == '\n' || (!allow_space && *s == ' ') ||
		    (unsigned char)*s < 0x20)
			if (!(allow_space && *s == '\t'))
				return 0;
	return 1;
}

static void
ms_to_tv(int64_t ms, struct timeval *tv)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)((ms % 1000) * 1000);
}

/*
 * A streamed body's output changed (body_stream): the header timeout runs
 * while bytes wait for the peer and restarts whenever some leave; it stops
 * while the caller has nothing to send (a slow source is not a stalled
 * peer); after the last byte it counts to the response headers.
 */
static void
out_changed(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct sbx_http_req *r = arg;
	struct timeval tv;

	if (r->dead || r->hdr_ms <= 0 || (r->state != HS_CONNECTING &&
	    r->state != HS_STATUS && r->state != HS_HEADERS))
		return;
	if (evbuffer_get_length(buf) == 0 && r->send_left > 0) {
		event_del(r->hdr_timer);
		return;
	}
	if (info->n_deleted > 0 || info->orig_size == 0) {
		ms_to_tv(r->hdr_ms, &tv);
		event_add(r->hdr_timer, &tv);
	}
}

static int
write_request(struct sbx_http_req *r, struct evbuffer *out, const char *host,
    const struct sbx_http_request *q, struct sbx_err *err)
{
	const char *const *h;
	int needs_len;

	if (evbuffer_add_printf(out, "%s %s HTTP/1.1\r\nHost: %s\r\n",
	    q->method, q->path, host) < 0)
		goto oom;
	for (h = q->headers; h != NULL && *h != NULL; h++) {
		if (!valid_token(*h, 1) || strchr(*h, ':') == NULL)
			return sbx_err_set(err, SBX_E_BAD_REQUEST,
			    "bad request header line");
		if (evbuffer_add_printf(out, "%s\r\n", *h) < 0)
			goto oom;
	}
	if (q->content_type != NULL) {
		if (!valid_token(q->content_type, 1))
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "bad content type");
		if (evbuffer_add_printf(out, "Content-Type: %s\r\n",
		    q->content_type) < 0)
			goto oom;
	}
	needs_len = q->body_len > 0 || q->body_stream ||
	    strcmp(q->method, "POST") == 0 ||
	    strcmp(q->method, "PUT") == 0 || strcmp(q->method, "PATCH") == 0;
	if (needs_len && evbuffer_add_printf(out, "Content-Length: %" PRIu64
	    "\r\n", q->body_stream ? q->stream_len : (uint64_t)q->body_len) < 0)
		goto oom;
	if (r->upgrade_req ? evbuffer_add_printf(out, "Connection: Upgrade\r\n"
	    "Upgrade: %s\r\n\r\n", q->upgrade_proto != NULL ?
	    q->upgrade_proto : "tcp") < 0 :
	    evbuffer_add_printf(out, "Connection: close\r\n\r\n") < 0)
		goto oom;
	if (q->body_len > 0 && evbuffer_add(out, q->body, q->body_len) < 0)
		goto oom;
	return 0;
oom:
	return sbx_err_oom(err);
}

struct sbx_http_req *
sbx_http_request(struct event_base *base, const char *address,
    const struct sbx_http_request *q, const struct sbx_http_opts *opts,
    const struct sbx_http_cbs *cbs, struct sbx_err *err)
{
	struct sbx_http_req *r = NULL;
	struct sockaddr_storage ss;
	struct sockaddr_un *sun;
	const char *path = NULL, *colon;
	char host[300], port[16];
	int sslen = (int)sizeof(ss), rc;
	struct timeval tv;
	struct evbuffer *reqbuf = NULL;

	if (base == NULL || address == NULL || q == NULL || cbs == NULL ||
	    cbs->done == NULL || !valid_token(q->method, 0) ||
	    !valid_token(q->path, 0) || q->path[0] != '/' ||
	    (q->body_len > 0 && q->body == NULL) || (q->upgrade &&
	    q->upgrade_proto != NULL && !valid_token(q->upgrade_proto, 0)) ||
	    (q->body_stream &&
	    (q->body != NULL || q->body_len > 0 || q->upgrade))) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "bad HTTP request arguments");
		return NULL;
	}
	if ((r = calloc(1, sizeof(*r))) == NULL)
		goto oom;
	r->base = base;
	r->cbs = *cbs;
	snprintf(r->unavailable_code, sizeof(r->unavailable_code), "%s",
	    opts != NULL && opts->unavailable_code != NULL ?
	    opts->unavailable_code : SBX_E_RUNTIME_UNAVAILABLE);
	snprintf(r->protocol_code, sizeof(r->protocol_code), "%s",
	    opts != NULL && opts->protocol_code != NULL ?
	    opts->protocol_code : SBX_E_RUNTIME);
	snprintf(r->cut_code, sizeof(r->cut_code), "%s",
	    opts != NULL && opts->cut_code != NULL ? opts->cut_code :
	    r->protocol_code);
	snprintf(r->hdr_timeout_code, sizeof(r->hdr_timeout_code), "%s",
	    opts != NULL && opts->header_timeout_code != NULL ?
	    opts->header_timeout_code : SBX_E_TIMEOUT);
	snprintf(r->peer, sizeof(r->peer), "%s",
	    opts != NULL && opts->peer_name != NULL ? opts->peer_name :
	    "the runtime");
	snprintf(r->address, sizeof(r->address), "%s", address);
	r->is_head = strcmp(q->method, "HEAD") == 0;
	r->send_stream = q->body_stream != 0;
	r->send_left = q->body_stream ? q->stream_len : 0;
	r->hdr_ms = opts != NULL ? opts->header_timeout_ms : 0;
	r->upgrade_req = q->upgrade != 0;
	r->kick = event_new(base, -1, 0, kick_cb, r);
	r->hdr_timer = evtimer_new(base, hdr_timer_cb, r);
	r->tot_timer = evtimer_new(base, timer_cb, r);
	r->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (r->kick == NULL || r->hdr_timer == NULL || r->tot_timer == NULL ||
	    r->bev == NULL)
		goto oom;
	bufferevent_setcb(r->bev, read_cb, write_cb, event_cb, r);
	/* Streams (exec output, the session link, the agent's channel) go
	 * in pieces of up to SBX_BEV_IO_MAX a turn, not libevent's 16 KiB
	 * writes and 4 KiB reads (read_cb, adr/0063). */
	bufferevent_set_max_single_write(r->bev, SBX_BEV_IO_MAX);
	/* The request is built here and queued once the socket exists. */
	if ((reqbuf = evbuffer_new()) == NULL)
		goto oom;

	memset(&ss, 0, sizeof(ss));
	if (strncmp(address, "unix:", 5) == 0)
		path = address + 5;
	else if (address[0] == '/')
		path = address;
	host[0] = '\0';
	if (path != NULL) {
		sun = (struct sockaddr_un *)&ss;
		if (path[0] == '\0' || strlen(path) >= sizeof(sun->sun_path)) {
			sbx_err_set(err, SBX_E_BAD_REQUEST,
			    "bad unix socket path for %s", r->peer);
			goto fail;
		}
		sun->sun_family = AF_UNIX;
		memcpy(sun->sun_path, path, strlen(path) + 1);
		sslen = (int)sizeof(*sun);
		rc = write_request(r, reqbuf, "localhost",
		    q, err);
	} else if (evutil_parse_sockaddr_port(address, (struct sockaddr *)&ss,
	    &sslen) == 0) {
		rc = write_request(r, reqbuf, address, q,
		    err);
	} else {
		colon = strrchr(address, ':');
		if (colon == NULL || colon == address ||
		    (size_t)(colon - address) >= sizeof(host) ||
		    strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(port) ||
		    strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
			sbx_err_set(err, SBX_E_BAD_REQUEST,
			    "bad address for %s (want unix:PATH or HOST:PORT)",
			    r->peer);
			goto fail;
		}
		memcpy(host, address, (size_t)(colon - address));
		host[colon - address] = '\0';
		snprintf(port, sizeof(port), "%s", colon + 1);
		rc = write_request(r, reqbuf, address, q,
		    err);
	}
	if (rc < 0)
		goto fail;

	r->state = HS_CONNECTING;
	r->starting = 1;
	if (host[0] != '\0')
		rc = bufferevent_socket_connect_hostname(r->bev, NULL, AF_UNSPEC,
		    host, atoi(port));
	else
		rc = bufferevent_socket_connect(r->bev, (struct sockaddr *)&ss,
		    sslen);
	r->starting = 0;
	if (rc < 0 && !r->have_pending) {
		sbx_err_set(&r->pending, r->unavailable_code,
		    SBX_MSG_NO_CONNECT, r->peer, r->address,
		    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		r->have_pending = 1;
	}
	if (r->have_pending) {
		bufferevent_disable(r->bev, EV_READ | EV_WRITE);
		event_active(r->kick, EV_TIMEOUT, 0);
		evbuffer_free(reqbuf);
		return r;
	}
	if (bufferevent_write_buffer(r->bev, reqbuf) < 0) {
		sbx_http_req_cancel(r);
		evbuffer_free(reqbuf);
		sbx_err_oom(err);
		return NULL;
	}
	evbuffer_free(reqbuf);
	if (r->send_stream && (r->out_ent = evbuffer_add_cb(
	    bufferevent_get_output(r->bev), out_changed, r)) == NULL) {
		sbx_http_req_cancel(r);
		sbx_err_oom(err);
		return NULL;
	}
	bufferevent_enable(r->bev, EV_READ | EV_WRITE);
	if (opts != NULL && opts->header_timeout_ms > 0) {
		ms_to_tv(opts->header_timeout_ms, &tv);
		event_add(r->hdr_timer, &tv);
	}
	if (opts != NULL && opts->timeout_ms > 0) {
		ms_to_tv(opts->timeout_ms, &tv);
		event_add(r->tot_timer, &tv);
	}
	return r;
oom:
	sbx_err_oom(err);
fail:
	if (reqbuf != NULL)
		evbuffer_free(reqbuf);
	req_free(r);
	return NULL;
}

void
sbx_http_req_cancel(struct sbx_http_req *r)
{
	if (r == NULL || r->dead)
		return;
	r->dead = 1;
	if (r->busy == 0)
		req_free(r);
	else if (r->bev != NULL)
		bufferevent_disable(r->bev, EV_READ | EV_WRITE);
}

void
sbx_http_req_pause(struct sbx_http_req *r)
{
	if (r == NULL || r->dead || r->paused)
		return;
	r->paused = 1;
	if (r->state != HS_CONNECTING)
		bufferevent_disable(r->bev, EV_READ);
}

void
sbx_http_req_resume(struct sbx_http_req *r)
{
	if (r == NULL || r->dead || !r->paused)
		return;
	r->paused = 0;
	if (!r->eof)
		bufferevent_enable(r->bev, EV_READ);
	/* Bytes (or an EOF) may be waiting already; process them from the
	 * loop, not from inside the caller. */
	event_active(r->kick, EV_TIMEOUT, 0);
}

int
sbx_http_req_status(const struct sbx_http_req *r)
{
	return r != NULL ? r->status : 0;
}

const char *
sbx_http_req_header(const struct sbx_http_req *r, const char *name)
{
	if (r == NULL || name == NULL)
		return NULL;
	return find_header(r, name);
}

int
sbx_http_req_upgraded(const struct sbx_http_req *r)
{
	return r != NULL && r->upgraded;
}

/* 1: len more bytes may go, 0: not (see sbx_http_req_write). A streamed
 * body's bytes are counted here. */
static int
may_send(struct sbx_http_req *r, size_t len)
{
	if (r == NULL || r->dead)
		return 0;
	if (r->upgraded)
		return !r->write_closed && !r->close_write_pending;
	if (!r->send_stream || (uint64_t)len > r->send_left)
		return 0;
	r->send_left -= len;
	return 1;
}

int
sbx_http_req_write(struct sbx_http_req *r, const void *buf, size_t len)
{
	if (!may_send(r, len))
		return -1;
	if (r->write_closed)
		return 0;   /* a streamed body the peer no longer reads */
	return bufferevent_write(r->bev, buf, len);
}

int
sbx_http_req_write_buffer(struct sbx_http_req *r, struct evbuffer *buf)
{
	if (buf == NULL || !may_send(r, evbuffer_get_length(buf)))
		return -1;
	if (r->write_closed)
		return evbuffer_drain(buf, evbuffer_get_length(buf));
	return bufferevent_write_buffer(r->bev, buf);
}

int
sbx_http_req_close_write(struct sbx_http_req *r)
{
	if (r == NULL || r->dead || !r->upgraded)
		return -1;
	if (r->write_closed)
		return 0;
	r->close_write_pending = 1;
	maybe_shutdown(r);
	return 0;
}

struct bufferevent *
sbx_http_req_bufferevent(struct sbx_http_req *r)
{
	return r != NULL ? r->bev : NULL;
}
