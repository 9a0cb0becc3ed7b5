/* ports_rig.h - what the ports proxy's unit tests share (test_api_ports_proxy.c, test_api_ports_tcp.c): the api on the fake driver whose PORT sessions are real TCP connections to servers the test runs on 127.0.0.1 (what sbx-helper's connect mode does in a sandbox), those servers, and a raw client. Static: each test binary includes it once. */
#ifndef PORTS_RIG_H
#define PORTS_RIG_H

#pragma GCC diagnostic ignored "-Wunused-function"
#include <sys/queue.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <sodium.h>

#include "api_ports.h"
#include "api_testutil.h"
#include "driver_fake.h"
#include "sbx_driver.h"
#include "sbx_httpd.h"
#include "sbx_msg.h"
#include "sbx_time.h"

/* ------------------------------------------------------------------ */
/* A driver: the fake, plus PORT sessions over loopback TCP            */

#define SESS_MAGIC 0x5e55u
#define SESS_ROOM ((size_t)64 * 1024)

struct sess {
	struct sbx_op op;          /* first: sbx_op_* find the driver */
	unsigned magic;
	struct bufferevent *bev;
	struct sbx_sink sink;
	int port, started, connected, eof_pending;
	int want_room;     /* a write took less than offered: room says when */
	struct event *start_ev;
};

static struct sbx_driver_ops wrapped;
static const struct sbx_driver_ops *fake_ops;
static unsigned sessions_open;
#define SESS_MAX 64
static struct sess *sess_live[SESS_MAX];   /* ours, told apart by address */

static int
is_sess(const struct sbx_op *op)
{
	int i;

	for (i = 0; i < SESS_MAX; i++)
		if (sess_live[i] != NULL && &sess_live[i]->op == op)
			return 1;
	return 0;
}

static void
sess_free(struct sess *s)
{
	if (s->bev != NULL)
		bufferevent_free(s->bev);
	if (s->start_ev != NULL)
		event_free(s->start_ev);
	s->magic = 0;
	sessions_open--;
	for (int i = 0; i < SESS_MAX; i++)
		if (sess_live[i] == s)
			sess_live[i] = NULL;
	free(s);
}

static void
sess_read(struct bufferevent *bev, void *arg)
{
	struct sess *s = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	unsigned char buf[16384];
	size_t n;

	while ((n = evbuffer_remove(in, buf, sizeof(buf))) > 0 && n != (size_t)-1)
		s->sink.output(s->sink.arg, 1, buf, n);
}

static void
sess_write(struct bufferevent *bev, void *arg)
{
	struct sess *s = arg;

	if (s->eof_pending) {
		s->eof_pending = 0;
		shutdown(bufferevent_getfd(bev), SHUT_WR);
	}
	/* As the broker client: room only for a writer that was cut short. */
	if (s->want_room && s->sink.room != NULL) {
		s->want_room = 0;
		s->sink.room(s->sink.arg);
	}
}

static void
sess_event(struct bufferevent *bev, short what, void *arg)
{
	struct sess *s = arg;
	struct sbx_sink sink = s->sink;
	struct sbx_exit ex;
	struct sbx_err err;

	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		s->connected = 1;
		return;
	}
	if (!s->connected) {
		/* As the engine driver: start came when the helper ran, the
		 * refusal after it. */
		if (!s->started) {
			s->started = 1;
			sink.start(sink.arg, "");
		}
		sbx_err_set(&err, SBX_E_PORT_CLOSED, SBX_MSG_PORT_CLOSED, s->port);
		sess_free(s);
		sink.error(sink.arg, &err);
		return;
	}
	sess_read(s->bev, s);
	memset(&ex, 0, sizeof(ex));
	sess_free(s);
	sink.exit(sink.arg, &ex);
}

/* The session's start, on the loop's next turn (EK_ANON_START: before the
 * connection is known to be up). */
static void
sess_start(evutil_socket_t fd, short what, void *arg)
{
	struct sess *s = arg;

	(void)fd;
	(void)what;
	if (!s->started) {
		s->started = 1;
		s->sink.start(s->sink.arg, "");
	}
}

static struct sbx_op *
sess_open(struct sbx_driver *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err)
{
	struct sockaddr_in sin;
	struct sess *s;

	(void)id;
	if (req->kind != SBX_SESSION_PORT || req->port < 1 || req->port > 65535) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "bad session");
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	assert_non_null(s);
	s->op.driver = d;
	s->magic = SESS_MAGIC;
	s->sink = *sink;
	s->port = req->port;
	s->bev = bufferevent_socket_new(d->base, -1, BEV_OPT_CLOSE_ON_FREE);
	bufferevent_setcb(s->bev, sess_read, sess_write, sess_event, s);
	bufferevent_setwatermark(s->bev, EV_WRITE, SESS_ROOM / 2, 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)req->port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->start_ev = event_new(d->base, -1, 0, sess_start, s);
	event_active(s->start_ev, EV_TIMEOUT, 1);
	sessions_open++;
	for (int i = 0; i < SESS_MAX; i++)
		if (sess_live[i] == NULL) {
			sess_live[i] = s;
			break;
		}
	bufferevent_enable(s->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(s->bev, (struct sockaddr *)&sin,
	    sizeof(sin)) != 0) {
		/* Refused at once: said from the loop, never inside open. */
		bufferevent_free(s->bev);
		s->bev = bufferevent_socket_new(d->base, -1, BEV_OPT_CLOSE_ON_FREE);
		bufferevent_setcb(s->bev, NULL, NULL, sess_event, s);
		bufferevent_trigger_event(s->bev, BEV_EVENT_ERROR,
		    BEV_TRIG_DEFER_CALLBACKS);
	}
	return &s->op;
}

static size_t
sess_room(struct sbx_driver *d, struct sbx_op *op)
{
	struct sess *s = (struct sess *)op;
	size_t q = evbuffer_get_length(bufferevent_get_output(s->bev));

	(void)d;
	return q >= SESS_ROOM ? 0 : SESS_ROOM - q;
}

static ssize_t
sess_write_in(struct sbx_driver *d, struct sbx_op *op, struct evbuffer *src,
    size_t max)
{
	struct sess *s = (struct sess *)op;
	size_t room = sess_room(d, op), n = evbuffer_get_length(src);

	if (n > max)
		n = max;
	if (n > room) {
		n = room;
		s->want_room = 1;
	}
	return evbuffer_remove_buffer(src, bufferevent_get_output(s->bev), n);
}

static void
sess_close_input(struct sbx_driver *d, struct sbx_op *op)
{
	struct sess *s = (struct sess *)op;

	(void)d;
	if (evbuffer_get_length(bufferevent_get_output(s->bev)) == 0)
		shutdown(bufferevent_getfd(s->bev), SHUT_WR);
	else
		s->eof_pending = 1;
}

static void
w_cancel(struct sbx_driver *d, struct sbx_op *op)
{
	if (is_sess(op))
		sess_free((struct sess *)op);
	else
		fake_ops->cancel(d, op);
}

static void
w_pause(struct sbx_driver *d, struct sbx_op *op)
{
	if (is_sess(op))
		bufferevent_disable(((struct sess *)op)->bev, EV_READ);
	else
		fake_ops->pause(d, op);
}

static void
w_resume(struct sbx_driver *d, struct sbx_op *op)
{
	if (is_sess(op))
		bufferevent_enable(((struct sess *)op)->bev, EV_READ);
	else
		fake_ops->resume(d, op);
}

static char ka[64], kb[64], kop[64];

static int
up(void **state)
{
	struct sbx_driver *d;

	tu_up(state);
	tu_set("port_connections_per_sandbox", "3");
	tu_set("preview_domain", "preview.example.test");
	tu_set("port_idle_timeout", "1s");
	d = sbx_fake_driver_new(T.base);
	assert_non_null(d);
	fake_ops = d->ops;
	wrapped = *d->ops;
	wrapped.session = sess_open;
	wrapped.session_write = sess_write_in;
	wrapped.session_room = sess_room;
	wrapped.session_close_input = sess_close_input;
	wrapped.cancel = w_cancel;
	wrapped.pause = w_pause;
	wrapped.resume = w_resume;
	d->ops = &wrapped;
	tu_start(d);
	tu_principal("alice", API_ROLE_PLAYER, ka);
	tu_principal("bob", API_ROLE_PLAYER, kb);
	tu_principal("op1", API_ROLE_OPERATOR, kop);
	tu_npc(ka, "n1");
	return 0;
}

/* ------------------------------------------------------------------ */
/* The servers "inside the sandbox"                                    */

static struct evhttp *up_http;
static int up_port;
static unsigned char file_bytes[300000];
static char last_head[4096];   /* the last request's line and headers */
static struct evhttp_request *sse_req;

static void
up_cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer *out = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	struct evkeyval *kv;
	const char *uri = evhttp_request_get_uri(req);
	size_t n;

	(void)arg;
	n = (size_t)snprintf(last_head, sizeof(last_head), "%s %s\n",
	    sbx_httpd_method_name(evhttp_request_get_command(req)), uri);
	TAILQ_FOREACH(kv, h, next)
		if (n < sizeof(last_head))
			n += (size_t)snprintf(last_head + n, sizeof(last_head) - n,
			    "%s: %s\n", kv->key, kv->value);
	if (strncmp(uri, "/file", 5) == 0) {
		evbuffer_add(out, file_bytes, sizeof(file_bytes));
		evhttp_send_reply(req, 200, "OK", out);
	} else if (strcmp(uri, "/echo") == 0) {
		evbuffer_add_buffer(out, evhttp_request_get_input_buffer(req));
		evhttp_send_reply(req, 200, "OK", out);
	} else if (strcmp(uri, "/never") == 0) {
		/* answers nothing (evhttp_free at the teardown frees it) */
	} else if (strcmp(uri, "/sse") == 0) {
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "Content-Type", "text/event-stream");
		evhttp_send_reply_start(req, 200, "OK");
		evbuffer_add_printf(out, "data: one\n\n");
		evhttp_send_reply_chunk(req, out);
		sse_req = req;
	} else {
		evbuffer_add_printf(out, "head");
		evhttp_send_reply(req, 200, "OK", out);
	}
	evbuffer_free(out);
}

/* A raw server: answers an Upgrade with 101, then echoes every byte. */
static struct evconnlistener *ws_lis;
static int ws_port;

static void
ws_read(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	int *upgraded = arg;
	struct evbuffer_ptr p;

	if (!*upgraded) {
		p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
		if (p.pos < 0)
			return;
		evbuffer_drain(in, (size_t)p.pos + 4);
		static const char ok[] = "HTTP/1.1 101 Switching Protocols\r\n"
		    "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n";

		bufferevent_write(bev, ok, sizeof(ok) - 1);
		*upgraded = 1;
	}
	bufferevent_write_buffer(bev, in);
}

/* Its connections, freed by the teardown when still open. */
#define WS_MAX 16
static struct bufferevent *ws_bev[WS_MAX];
static int *ws_state[WS_MAX];

static void
ws_drop(int i)
{
	bufferevent_free(ws_bev[i]);
	free(ws_state[i]);
	ws_bev[i] = NULL;
	ws_state[i] = NULL;
}

static void
ws_event(struct bufferevent *bev, short what, void *arg)
{
	int i;

	(void)what;
	(void)arg;
	for (i = 0; i < WS_MAX; i++)
		if (ws_bev[i] == bev)
			ws_drop(i);
}

static void
ws_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int len, void *arg)
{
	struct bufferevent *bev = bufferevent_socket_new(T.base, fd,
	    BEV_OPT_CLOSE_ON_FREE);
	int *upgraded = calloc(1, sizeof(int));

	(void)l;
	(void)sa;
	(void)len;
	(void)arg;
	int i;

	for (i = 0; i < WS_MAX && ws_bev[i] != NULL; i++)
		;
	assert_true(i < WS_MAX);
	ws_bev[i] = bev;
	ws_state[i] = upgraded;
	bufferevent_setcb(bev, ws_read, NULL, ws_event, upgraded);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static int
up_start(void **state)
{
	struct evhttp_bound_socket *b;
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);

	up(state);
	randombytes_buf(file_bytes, sizeof(file_bytes));
	up_http = evhttp_new(T.base);
	evhttp_set_gencb(up_http, up_cb, NULL);
	evhttp_set_max_body_size(up_http, 64 << 20);
	b = evhttp_bind_socket_with_handle(up_http, "127.0.0.1", 0);
	assert_non_null(b);
	getsockname(evhttp_bound_socket_get_fd(b), (struct sockaddr *)&sin, &sl);
	up_port = ntohs(sin.sin_port);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ws_lis = evconnlistener_new_bind(T.base, ws_accept, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, -1,
	    (struct sockaddr *)&sin, sizeof(sin));
	assert_non_null(ws_lis);
	sl = sizeof(sin);
	getsockname(evconnlistener_get_fd(ws_lis), (struct sockaddr *)&sin, &sl);
	ws_port = ntohs(sin.sin_port);
	sse_req = NULL;
	return 0;
}

static int
up_stop(void **state)
{
	int i;

	for (i = 0; i < WS_MAX; i++)
		if (ws_bev[i] != NULL)
			ws_drop(i);
	evconnlistener_free(ws_lis);
	evhttp_free(up_http);
	return tu_down(state);
}

/* ------------------------------------------------------------------ */
/* A raw client                                                        */

/* Sends all n bytes while the loop runs. */
static void
raw_send(int fd, const void *p, size_t n)
{
	const char *c = p;
	ssize_t w;

	while (n > 0) {
		w = send(fd, c, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w > 0) {
			c += w;
			n -= (size_t)w;
			continue;
		}
		assert_true(w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
		event_base_loop(T.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	}
}

/* Reads into out while the loop runs until out holds at least want bytes,
 * or holds needle, or the peer closed (returns 1), or timeout_ms passed. */
static int
raw_read(int fd, struct evbuffer *out, size_t want, const char *needle,
    int timeout_ms)
{
	int64_t end = sbx_mono_ms() + timeout_ms;
	char buf[65536];
	ssize_t r;

	while (sbx_mono_ms() < end) {
		if (want > 0 && evbuffer_get_length(out) >= want)
			return 0;
		if (needle != NULL && evbuffer_search(out, needle, strlen(needle),
		    NULL).pos >= 0)
			return 0;
		r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r > 0) {
			evbuffer_add(out, buf, (size_t)r);
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			return 1;
		event_base_loop(T.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		usleep(200);
	}
	return 0;
}

/* One request on a new connection; the whole answer (until close) into a
 * new evbuffer. */
static struct evbuffer *
exchange(const char *head, const void *body, size_t blen)
{
	struct evbuffer *out = evbuffer_new();
	int fd = tu_raw_connect();

	raw_send(fd, head, strlen(head));
	if (blen > 0)
		raw_send(fd, body, blen);
	raw_read(fd, out, 0, NULL, 10000);
	close(fd);
	return out;
}

/* The body after the head of a whole answer. */
static const unsigned char *
body_of(struct evbuffer *b, size_t *n)
{
	struct evbuffer_ptr p = evbuffer_search(b, "\r\n\r\n", 4, NULL);
	const unsigned char *all = evbuffer_pullup(b, -1);

	assert_true(p.pos >= 0);
	*n = evbuffer_get_length(b) - (size_t)p.pos - 4;
	return all + p.pos + 4;
}

#endif
