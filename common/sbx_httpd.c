/* sbx_httpd.c - the small HTTP server core both daemons use: routes, JSON and error replies, streamed replies, listeners, drain (adr/0022). */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "sbx_config.h"
#include "sbx_gate.h"
#include "sbx_httpd.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

/* ------------------------------------------------------------------ */
/* Routes                                                              */

/* Matches path against pattern; captures its "{...}" and "*" segments;
 * a last segment "**" matches any rest. */
static int
route_match(const char *pattern, const char *path, struct sbx_httpd_match *m)
{
	const char *p = pattern, *q = path, *close;
	size_t n;

	m->ncap = 0;
	while (*p != '\0') {
		/* A last segment "**": the rest of the path, "" or "/..."
		 * (the ports proxy's prefix routes). */
		if (strcmp(p, "/**") == 0)
			return *q == '\0' || *q == '/';
		close = NULL;
		if (*p == '{')
			close = strchr(p, '}');
		if (close != NULL || *p == '*') {
			n = strcspn(q, "/");
			if (n == 0)
				return 0;
			if (m->ncap < SBX_HTTPD_CAPTURES) {
				if (n < SBX_HTTPD_CAPTURE_MAX)
					snprintf(m->cap[m->ncap],
					    SBX_HTTPD_CAPTURE_MAX, "%.*s",
					    (int)n, q);
				else
					m->cap[m->ncap][0] = '\0';
				m->ncap++;
			}
			p = close != NULL ? close + 1 : p + 1;
			q += n;
			continue;
		}
		if (*p++ != *q++)
			return 0;
	}
	return *q == '\0';
}

const char *
sbx_httpd_method_name(int m)
{
	switch (m) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_HEAD: return "HEAD";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_OPTIONS: return "OPTIONS";
	case EVHTTP_REQ_TRACE: return "TRACE";
	case EVHTTP_REQ_CONNECT: return "CONNECT";
	case EVHTTP_REQ_PATCH: return "PATCH";
	default: return "?";
	}
}

const void *
sbx_httpd_route_find(const void *table, size_t n, size_t stride, int method,
    const char *path, struct sbx_httpd_match *m, char *allow, size_t allowcap)
{
	const struct sbx_httpd_route *r;
	struct sbx_httpd_match scratch;
	size_t i, len;

	if (m == NULL)
		m = &scratch;
	if (allow != NULL && allowcap > 0)
		allow[0] = '\0';
	for (i = 0; path != NULL && i < n; i++) {
		r = (const struct sbx_httpd_route *)(const void *)
		    ((const char *)table + i * stride);
		if (r->pattern == NULL)
			break;
		memset(m, 0, sizeof(*m));
		if (!route_match(r->pattern, path, m))
			continue;
		if (r->method == method)
			return r;
		if (allow == NULL || allowcap == 0)
			continue;
		len = strlen(allow);
		snprintf(allow + len, allowcap - len, "%s%s", len ? ", " : "",
		    sbx_httpd_method_name(r->method));
	}
	memset(m, 0, sizeof(*m));
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Replies                                                             */

const char *
sbx_httpd_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 414: return "URI Too Long";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 507: return "Insufficient Storage";
	default: return NULL;
	}
}

/*
 * The headers an error reply carries, and only here: by status (code
 * NULL) or by code (status 0).
 */
static const struct {
	int status;
	const char *code;
	const char *name, *value;
} error_headers[] = {
	{ 401, NULL, "WWW-Authenticate", "Bearer" },      /* RFC 9110 §11.6.1 */
	/* A limit on what runs at once: worth trying again soon. */
	{ 0, SBX_E_TOO_MANY, "Retry-After", "1" },        /* RFC 9110 §10.2.3 */
};

void
sbx_httpd_header(struct sbx_httpd_req *r, const char *name, const char *value)
{
	if (r->req != NULL)
		evhttp_add_header(evhttp_request_get_output_headers(r->req),
		    name, value);
}

/* Sends body (drained, may be NULL) as r's reply of type ctype (NULL:
 * none) with the headers of flags; r is replied (r->req NULL, r->status
 * set). */
static void
body_send(struct sbx_httpd_req *r, int status, const char *ctype,
    struct evbuffer *body, unsigned flags)
{
	if (ctype != NULL)
		sbx_httpd_header(r, "Content-Type", ctype);
	if (flags & SBX_HTTPD_NO_STORE)
		sbx_httpd_header(r, "Cache-Control", "no-store");
	if (flags & SBX_HTTPD_CLOSE)
		sbx_httpd_header(r, "Connection", "close");
	evhttp_send_reply(r->req, status, sbx_httpd_reason(status), body);
	r->req = NULL;
	r->status = status;
}

int
sbx_httpd_reply_json(struct sbx_httpd_req *r, int status, json_t *obj,
    unsigned flags)
{
	struct evbuffer *out = NULL;
	char *text = NULL;

	if (r->watching)
		sbx_httpd_unwatch(r);
	if (r->req == NULL) {
		json_decref(obj);
		return 0;
	}
	text = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
	json_decref(obj);
	if ((out = evbuffer_new()) == NULL) {
		evhttp_send_error(r->req, 500, NULL);
		r->req = NULL;
		free(text);
		return r->status = 500;
	}
	if (text == NULL) {
		status = 500;
		evbuffer_add_printf(out, "{\"error\":{\"code\":\"internal\","
		    "\"message\":\"" SBX_MSG_OOM "\"}}\n");
	} else
		evbuffer_add_printf(out, "%s\n", text);
	body_send(r, status, SBX_CT_JSON, out, flags);
	evbuffer_free(out);
	free(text);
	return r->status;
}

int
sbx_httpd_reply_json_text(struct sbx_httpd_req *r, int status,
    struct evbuffer *text, unsigned flags)
{
	if (r->watching)
		sbx_httpd_unwatch(r);
	if (r->req == NULL)
		return 0;
	if (evbuffer_add(text, "\n", 1) == -1)
		return sbx_httpd_reply_json(r, status, NULL, flags);
	body_send(r, status, SBX_CT_JSON, text, flags);
	return r->status;
}

int
sbx_httpd_reply_body(struct sbx_httpd_req *r, int status, const char *ctype,
    struct evbuffer *body, unsigned flags)
{
	if (r->watching)
		sbx_httpd_unwatch(r);
	if (r->req == NULL)
		return 0;
	body_send(r, status, ctype, body, flags);
	return r->status;
}

int
sbx_httpd_reply_error(struct sbx_httpd_req *r, const struct sbx_err *err,
    unsigned flags)
{
	return sbx_httpd_reply_error_as(r, err, flags, NULL);
}

int
sbx_httpd_reply_error_as(struct sbx_httpd_req *r, const struct sbx_err *err,
    unsigned flags, json_t *(*encode)(const struct sbx_err *e, int status))
{
	json_t *body = NULL;
	struct sbx_err e;
	size_t i;
	int status;

	if (err != NULL && sbx_err_is_set(err))
		e = *err;
	else
		sbx_err_set(&e, SBX_E_INTERNAL, SBX_MSG_INTERNAL);
	status = sbx_err_http_status(&e);
	if (status == 500 && strcmp(e.code, SBX_E_INTERNAL) != 0)
		log_warn("unmapped error code", "code", e.code, NULL);
	for (i = 0; i < sizeof(error_headers) / sizeof(error_headers[0]); i++)
		if (error_headers[i].status == status ||
		    (error_headers[i].code != NULL &&
		    strcmp(error_headers[i].code, e.code) == 0))
			sbx_httpd_header(r, error_headers[i].name,
			    error_headers[i].value);
	if (r->req == NULL) {
		if (r->watching)
			sbx_httpd_unwatch(r);
		return status;
	}
	if (encode != NULL)
		body = encode(&e, status);
	if (body == NULL)
		body = sbx_wire_error_encode(e.code, e.message[0] != '\0' ?
		    e.message : e.code);
	sbx_httpd_reply_json(r, status, body, flags);
	return status;
}

/* ------------------------------------------------------------------ */
/* Streams                                                             */

static void
drained(struct evhttp_connection *conn, void *arg)
{
	struct sbx_httpd_req *r = arg;

	(void)conn;
	if (r->paused) {
		r->paused = 0;
		if (r->ops != NULL && r->ops->pause != NULL)
			r->ops->pause(r, 0);
	}
}

/* Client went away: release the request and tell the daemon (SPEC §5). */
static void
closed(struct evhttp_connection *conn, void *arg)
{
	struct sbx_httpd_req *r = arg;

	(void)conn;
	r->watching = 0;
	/* The request was detached from its connection: ending it frees it. */
	if (r->req != NULL)
		evhttp_send_reply_end(r->req);
	r->req = NULL;
	r->conn = NULL;
	r->streaming = 0;
	if (r->ops != NULL && r->ops->gone != NULL)
		r->ops->gone(r);
}

/* The gate owns the connection's close callback when there is one. */
static void
watch_set(struct sbx_httpd_req *r, int on)
{
	if (r->conn == NULL)
		return;
	if (r->gate != NULL)
		sbx_gate_watch(r->gate, r->conn, on ? closed : NULL, r);
	else
		evhttp_connection_set_closecb(r->conn, on ? closed : NULL, r);
	r->watching = on;
}

/*
 * evhttp reads nothing between a request and its reply, so reading is
 * turned on here with no read callback (what evhttp does itself while it
 * writes a reply): a close is then seen at once (adr/0018 needs the read
 * callback unset for streamed bodies too).
 */
void
sbx_httpd_watch(struct sbx_httpd_req *r)
{
	struct evhttp_connection *conn;
	struct bufferevent *bev;
	bufferevent_data_cb wcb = NULL;
	bufferevent_event_cb ecb = NULL;
	void *cbarg = NULL;

	if (r->req == NULL ||
	    (conn = evhttp_request_get_connection(r->req)) == NULL ||
	    (bev = evhttp_connection_get_bufferevent(conn)) == NULL)
		return;
	bufferevent_getcb(bev, NULL, &wcb, &ecb, &cbarg);
	bufferevent_setcb(bev, NULL, wcb, ecb, cbarg);
	bufferevent_enable(bev, EV_READ);
	r->conn = conn;
	watch_set(r, 1);
}

void
sbx_httpd_unwatch(struct sbx_httpd_req *r)
{
	if (r->watching)
		watch_set(r, 0);
	r->watching = 0;
}

int
sbx_httpd_stream_begin(struct sbx_httpd_req *r, const char *ctype,
    int64_t timeout_s)
{
	struct timeval tv;

	if (r->req == NULL)
		return -1;
	if (evhttp_request_get_connection(r->req) == NULL) {
		evhttp_send_reply_end(r->req);   /* frees a detached request */
		r->req = NULL;
		return -1;
	}
	if (r->chunk == NULL && (r->chunk = evbuffer_new()) == NULL) {
		struct sbx_err err;

		sbx_err_oom(&err);
		sbx_httpd_reply_error(r, &err, 0);
		return -1;
	}
	sbx_httpd_header(r, "Content-Type", ctype);
	sbx_httpd_header(r, "Cache-Control", "no-cache");
	sbx_httpd_header(r, "X-Accel-Buffering", "no");
	r->conn = evhttp_request_get_connection(r->req);
	tv.tv_sec = timeout_s;
	tv.tv_usec = 0;
	evhttp_connection_set_timeout_tv(r->conn, &tv);
	watch_set(r, 1);
	evhttp_send_reply_start(r->req, 200, "OK");
	r->streaming = 1;
	r->status = 200;
	return 0;
}

void
sbx_httpd_stream_flush(struct sbx_httpd_req *r)
{
	struct bufferevent *bev;

	if (r->req == NULL || r->chunk == NULL ||
	    evbuffer_get_length(r->chunk) == 0)
		return;
	evhttp_send_reply_chunk_with_cb(r->req, r->chunk, drained, r);
	bev = evhttp_connection_get_bufferevent(r->conn);
	if (!r->paused && bev != NULL &&
	    evbuffer_get_length(bufferevent_get_output(bev)) >
	    (r->high_water != 0 ? r->high_water : SBX_HTTPD_HIGH_WATER)) {
		r->paused = 1;
		if (r->ops != NULL && r->ops->pause != NULL)
			r->ops->pause(r, 1);
	}
}

void
sbx_httpd_stream_end(struct sbx_httpd_req *r, int64_t timeout_s)
{
	struct timeval tv = { timeout_s, 0 };

	if (r->req == NULL)
		return;
	sbx_httpd_stream_flush(r);
	sbx_httpd_unwatch(r);
	evhttp_connection_set_timeout_tv(r->conn, &tv);
	evhttp_send_reply_end(r->req);
	r->req = NULL;
	r->streaming = 0;
}

void
sbx_httpd_stream_abort(struct sbx_httpd_req *r)
{
	if (r->req != NULL) {
		sbx_httpd_unwatch(r);
		evhttp_connection_free(r->conn);   /* frees r->req too */
	}
	r->req = NULL;
	r->conn = NULL;
	r->streaming = 0;
}

void
sbx_httpd_release(struct sbx_httpd_req *r)
{
	if (r->req != NULL || r->watching)
		sbx_httpd_unwatch(r);
	r->req = NULL;   /* freed with the connection by evhttp_free */
	r->conn = NULL;
}

/* ------------------------------------------------------------------ */
/* HTTP/1.1 Upgrade: the connection leaves evhttp (adr/0050)           */

/*
 * libevent 2.1.12 has no hand-over of a server connection: evhttp keeps
 * the socket in its connection (evcon->fd, set at accept), and
 * evhttp_connection_free shuts it down for writing (shutdown(fd, SHUT_WR))
 * and closes it, whatever became of its bufferevent. So the socket is
 * dup'ed for the caller's bufferevent, and the descriptor number evhttp
 * holds is pointed at /dev/null (dup3 onto it, atomic: no other thread
 * opens files in a daemon) after evhttp's bufferevent stopped reading and
 * writing it (its epoll registration goes while the number still names the
 * socket). evhttp then frees its connection on the next turn of the loop:
 * its shutdown fails on /dev/null (ENOTSOCK) and its close closes
 * /dev/null; the socket lives on in the caller's descriptor alone.
 */
struct upgraded {
	struct evhttp_connection *evcon;
	struct event *ev;
	int firing;
};

/* evhttp frees the connection (our event, or evhttp_free first). */
static void
upgraded_gone(struct evhttp_connection *evcon, void *arg)
{
	struct upgraded *u = arg;

	(void)evcon;
	if (u->firing)
		return;
	event_free(u->ev);
	free(u);
}

static void
upgraded_free(evutil_socket_t fd, short what, void *arg)
{
	struct upgraded *u = arg;

	(void)fd;
	(void)what;
	u->firing = 1;
	evhttp_connection_free(u->evcon);
	event_free(u->ev);
	free(u);
}

/* Hands r's connection over; upgrade NULL: no status line (takeover). */
static struct bufferevent *
handover(struct sbx_httpd_req *r, const char *upgrade,
    const char *extra_headers)
{
	struct evhttp_connection *evcon;
	struct bufferevent *obev, *bev = NULL;
	struct event_base *base;
	struct upgraded *u = NULL;
	struct sbx_err err;
	evutil_socket_t fd;
	int nfd = -1, ph = -1;

	if (r->req == NULL)
		return NULL;
	if ((evcon = evhttp_request_get_connection(r->req)) == NULL ||
	    (obev = evhttp_connection_get_bufferevent(evcon)) == NULL ||
	    (fd = bufferevent_getfd(obev)) < 0) {
		sbx_httpd_unwatch(r);
		evhttp_send_reply_end(r->req);   /* frees a detached request */
		r->req = NULL;
		return NULL;
	}
	base = bufferevent_get_base(obev);
	if ((u = calloc(1, sizeof(*u))) == NULL ||
	    (u->ev = event_new(base, -1, 0, upgraded_free, u)) == NULL ||
	    (nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0 ||
	    (ph = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 ||
	    evutil_make_socket_nonblocking(nfd) < 0 ||
	    (bev = bufferevent_socket_new(base, nfd, BEV_OPT_CLOSE_ON_FREE)) ==
	    NULL)
		goto fail;
	nfd = -1;   /* bev's now */
	/* Upgraded connections stream (session link, WebSocket, ports):
	 * more than libevent's 16 KiB a turn (sbx_http_client.h). */
	bufferevent_set_max_single_read(bev, SBX_BEV_IO_MAX);
	bufferevent_set_max_single_write(bev, SBX_BEV_IO_MAX);
	if (upgrade != NULL && evbuffer_add_printf(bufferevent_get_output(bev),
	    "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
	    "Upgrade: %s\r\n%s\r\n", upgrade, extra_headers != NULL ?
	    extra_headers : "") < 0)
		goto fail;
	sbx_httpd_unwatch(r);
	/* evhttp stops: no read, write or timeout on its bufferevent again. */
	bufferevent_disable(obev, EV_READ | EV_WRITE);
	bufferevent_setcb(obev, NULL, NULL, NULL, NULL);
	bufferevent_set_timeouts(obev, NULL, NULL);
	/* What the client sent after the request: evhttp's unread input,
	 * then what the gate held back. A socket bufferevent keeps its
	 * input's end frozen between its own reads: thawed for the moves. */
	evbuffer_unfreeze(bufferevent_get_input(bev), 0);
	evbuffer_add_buffer(bufferevent_get_input(bev),
	    bufferevent_get_input(obev));
	(void)sbx_gate_upgrade(r->gate, evcon, bev, bufferevent_get_input(bev));
	evbuffer_freeze(bufferevent_get_input(bev), 0);
	evhttp_connection_set_closecb(evcon, upgraded_gone, u);
	if (dup3(ph, fd, O_CLOEXEC) < 0)
		log_warn("upgrade: cannot take the socket from evhttp", "errno",
		    strerror(errno), NULL);
	close(ph);
	u->evcon = evcon;
	event_active(u->ev, EV_TIMEOUT, 0);
	r->req = NULL;
	r->conn = NULL;
	r->status = upgrade != NULL ? 101 : 200;
	return bev;
fail:
	if (bev != NULL)
		bufferevent_free(bev);
	if (nfd >= 0)
		close(nfd);
	if (ph >= 0)
		close(ph);
	if (u != NULL && u->ev != NULL)
		event_free(u->ev);
	free(u);
	sbx_err_oom(&err);
	sbx_httpd_reply_error(r, &err, SBX_HTTPD_CLOSE);
	return NULL;
}

struct bufferevent *
sbx_httpd_upgrade(struct sbx_httpd_req *r, const char *upgrade,
    const char *extra_headers)
{
	return handover(r, upgrade, extra_headers);
}

struct bufferevent *
sbx_httpd_takeover(struct sbx_httpd_req *r)
{
	return handover(r, NULL, NULL);
}

void
sbx_httpd_req_clear(struct sbx_httpd_req *r)
{
	if (r->chunk != NULL)
		evbuffer_free(r->chunk);
	r->chunk = NULL;
}

/* ------------------------------------------------------------------ */
/* The server                                                          */

struct evhttp *
sbx_httpd_server_new(struct event_base *base, const struct sbx_httpd_config *c,
    struct sbx_gate **gate, struct sbx_err *err)
{
	struct evhttp *http;

	*gate = NULL;
	if ((http = evhttp_new(base)) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	evhttp_set_max_body_size(http, c->max_body);
	if ((*gate = sbx_gate_new(base, http, &c->gate, c->check, c->arg,
	    err)) == NULL) {
		evhttp_free(http);
		return NULL;
	}
	if (c->stream != NULL)
		sbx_gate_set_stream(*gate, c->stream);
	evhttp_set_timeout(http, c->timeout_s);
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
	    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT |
	    EVHTTP_REQ_PATCH);
	evhttp_set_gencb(http, c->dispatch, c->arg);
	return http;
}

/* ------------------------------------------------------------------ */
/* Listeners                                                           */

/* connect() to an existing unix socket: 1 when something answers. */
static int
unix_alive(const struct sockaddr_un *sun)
{
	int fd, alive;

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return 0;
	alive = connect(fd, (const struct sockaddr *)sun, sizeof(*sun)) == 0;
	close(fd);
	return alive;
}

static int
mkdir_parents(const char *path, mode_t mode)
{
	char buf[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *p;

	snprintf(buf, sizeof(buf), "%s", path);
	if ((p = strrchr(buf, '/')) == NULL || p == buf)
		return 0;
	*p = '\0';
	for (p = buf + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) == -1 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, mode) == -1 && errno != EEXIST)
		return -1;
	return 0;
}

static int
listen_unix(struct evhttp *http, struct event_base *base, const char *path,
    unsigned socket_mode, struct sbx_httpd_listener *l, struct sbx_err *err)
{
	struct sockaddr_un sun;
	struct evconnlistener *lev;
	struct stat st;
	mode_t old;
	int fd = -1;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun.sun_path))
		return sbx_err_set(err, SBX_E_CONFIG, "listen path is longer "
		    "than %zu bytes.", sizeof(sun.sun_path) - 1);
	memcpy(sun.sun_path, path, strlen(path));
	if (mkdir_parents(path, 0750) == -1)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot create the "
		    "directory of %s: %s.", path, strerror(errno));
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return sbx_err_set(err, SBX_E_CONFIG, "%s exists and is "
			    "not a socket; not replacing it.", path);
		if (unix_alive(&sun))
			return sbx_err_set(err, SBX_E_CONFIG, "%s is in use by "
			    "another process.", path);
		unlink(path);   /* stale: nothing answers */
	}
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
	    0)) == -1)
		return sbx_err_set(err, SBX_E_INTERNAL, "socket: %s.",
		    strerror(errno));
	old = umask(0777 & ~(mode_t)socket_mode);
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		umask(old);
		sbx_err_set(err, SBX_E_CONFIG, "Cannot bind %s: %s.", path,
		    strerror(errno));
		close(fd);
		return -1;
	}
	umask(old);
	chmod(path, (mode_t)socket_mode);
	if ((l->unix_path = strdup(path)) == NULL) {
		close(fd);
		unlink(path);
		return sbx_err_oom(err);
	}
	lev = evconnlistener_new(base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE |
	    LEV_OPT_CLOSE_ON_EXEC, 128, fd);
	if (lev == NULL || (l->bound = evhttp_bind_listener(http,
	    lev)) == NULL) {
		if (lev != NULL)
			evconnlistener_free(lev);
		else
			close(fd);
		return sbx_err_set(err, SBX_E_INTERNAL, "Cannot listen on %s.",
		    path);
	}
	return 0;
}

static int
listen_tcp(struct evhttp *http, const char *spec, struct sbx_httpd_listener *l,
    struct sbx_err *err)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char *end;
	long port;
	size_t hl;

	if (colon == NULL || colon == spec)
		return sbx_err_set(err, SBX_E_CONFIG, "listen must be "
		    "HOST:PORT or unix:PATH.");
	hl = (size_t)(colon - spec);
	if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']') {
		spec++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return sbx_err_set(err, SBX_E_CONFIG, "listen host is too long.");
	memcpy(host, spec, hl);
	host[hl] = '\0';
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535)
		return sbx_err_set(err, SBX_E_CONFIG, "listen port must be "
		    "0..65535.");
	if ((l->bound = evhttp_bind_socket_with_handle(http, host,
	    (unsigned short)port)) == NULL)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot listen on %s:%ld: "
		    "%s.", host, port, strerror(errno));
	if (getsockname(evhttp_bound_socket_get_fd(l->bound),
	    (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			l->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			l->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return 0;
}

int
sbx_httpd_listen(struct evhttp *http, struct event_base *base,
    const char *spec, int allow_unix, unsigned socket_mode,
    struct sbx_httpd_listener *l, struct sbx_err *err)
{
	if (allow_unix && strncmp(spec, "unix:", 5) == 0)
		return listen_unix(http, base, spec + 5, socket_mode, l, err);
	return listen_tcp(http, spec, l, err);
}

void
sbx_httpd_unlisten(struct evhttp *http, struct sbx_httpd_listener *l)
{
	if (l->bound != NULL)
		evhttp_del_accept_socket(http, l->bound);
	l->bound = NULL;
	if (l->unix_path != NULL) {
		unlink(l->unix_path);
		free(l->unix_path);
		l->unix_path = NULL;
	}
}

void
sbx_httpd_listener_free(struct sbx_httpd_listener *l)
{
	if (l->unix_path != NULL)
		unlink(l->unix_path);
	free(l->unix_path);
	l->unix_path = NULL;
	l->bound = NULL;
}

/* ------------------------------------------------------------------ */
/* Drain                                                               */

static void
grace_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_httpd_drain *d = arg;

	(void)fd;
	(void)what;
	d->grace_over(d->arg);
}

static void
done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_httpd_drain *d = arg;
	void (*done)(void *) = d->done;

	(void)fd;
	(void)what;
	if (d->in_flight(d->arg) > 0 || done == NULL)
		return;
	if (d->grace_ev != NULL)
		event_del(d->grace_ev);
	d->done = NULL;
	done(d->done_arg);
}

int
sbx_httpd_drain_start(struct sbx_httpd_drain *d, struct event_base *base,
    int64_t grace_ms, unsigned (*in_flight)(void *),
    void (*grace_over)(void *), void *arg, void (*done)(void *),
    void *done_arg)
{
	struct timeval tv;

	if (d->started)
		return 0;
	d->started = 1;
	d->in_flight = in_flight;
	d->grace_over = grace_over;
	d->done = done;
	d->arg = arg;
	d->done_arg = done_arg;
	d->done_ev = event_new(base, -1, 0, done_cb, d);
	d->grace_ev = evtimer_new(base, grace_cb, d);
	if (d->done_ev == NULL || d->grace_ev == NULL) {
		/* Cannot wait politely: cancel now. */
		d->done = NULL;
		grace_over(arg);
		if (done != NULL)
			done(done_arg);
		return -1;
	}
	tv.tv_sec = grace_ms / 1000;
	tv.tv_usec = (grace_ms % 1000) * 1000;
	evtimer_add(d->grace_ev, &tv);
	event_active(d->done_ev, 0, 0);
	return 0;
}

void
sbx_httpd_drain_poke(struct sbx_httpd_drain *d)
{
	if (d->started && d->done_ev != NULL)
		event_active(d->done_ev, 0, 0);
}

void
sbx_httpd_drain_free(struct sbx_httpd_drain *d)
{
	if (d->grace_ev != NULL)
		event_free(d->grace_ev);
	if (d->done_ev != NULL)
		event_free(d->done_ev);
	d->grace_ev = d->done_ev = NULL;
	d->done = NULL;
}
