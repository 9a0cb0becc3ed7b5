/* test_api_ports_proxy.c - the ports proxy end to end in one process: the api on the fake driver whose PORT sessions are real TCP connections to servers this test runs on 127.0.0.1 (what sbx-helper's connect mode does inside a sandbox), and raw client sockets (adr/0053). */
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

/* ------------------------------------------------------------------ */
/* Tests                                                               */

static void
test_get_and_post_pass_byte_exact(void **state)
{
	char head[512];
	struct evbuffer *b;
	unsigned char *big;
	const unsigned char *body;
	size_t n, blen = (size_t)5 << 20;

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/file"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n",
	    up_port, ka);
	b = exchange(head, NULL, 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 200", 12);
	body = body_of(b, &n);
	assert_int_equal(n, sizeof(file_bytes));
	assert_memory_equal(body, file_bytes, n);
	evbuffer_free(b);
	/* What the sandbox's server saw: the path without the prefix, no
	 * key, the proxy's own fields. */
	assert_non_null(strstr(last_head, "GET /file\n"));
	assert_null(strstr(last_head, ka));
	assert_null(strcasestr(last_head, "Authorization"));
	assert_non_null(strstr(last_head, "X-Forwarded-Host: api.test\n"));
	assert_non_null(strstr(last_head, "X-Forwarded-For: 127.0.0.1\n"));
	assert_non_null(strstr(last_head, "X-Forwarded-Prefix: "
	    "/api/v1/npcs/n1/sandbox/ports/"));
	assert_non_null(strstr(last_head, "Connection: close\n"));
	/* 5 MiB echoed. */
	big = malloc(blen);
	randombytes_buf(big, blen);
	snprintf(head, sizeof(head), "POST /api/v1/npcs/n1/sandbox/ports/%d/echo"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Content-Length: %zu\r\n\r\n", up_port, ka, blen);
	b = exchange(head, big, blen);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 200", 12);
	body = body_of(b, &n);
	assert_int_equal(n, blen);
	assert_memory_equal(body, big, blen);
	evbuffer_free(b);
	free(big);
}

static int
sse_ready(void *arg)
{
	(void)arg;
	return sse_req != NULL;
}

static void
test_sse_events_arrive_one_by_one(void **state)
{
	char head[512];
	struct evbuffer *b = evbuffer_new(), *more = evbuffer_new();
	int fd = tu_raw_connect();

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/sse"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n",
	    up_port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "data: one", 5000), 0);
	assert_true(evbuffer_search(b, "data: one", 9, NULL).pos >= 0);
	/* The second event is sent only now: the first came alone. */
	assert_true(tu_loop_until(sse_ready, NULL, 2000));
	assert_true(evbuffer_search(b, "data: two", 9, NULL).pos < 0);
	evbuffer_add_printf(more, "data: two\n\n");
	evhttp_send_reply_chunk(sse_req, more);
	assert_int_equal(raw_read(fd, b, 0, "data: two", 5000), 0);
	evhttp_send_reply_end(sse_req);
	close(fd);
	evbuffer_free(b);
	evbuffer_free(more);
}

static void
test_upgrade_echoes_both_ways(void **state)
{
	char head[512];
	struct evbuffer *b = evbuffer_new();
	int fd = tu_raw_connect();

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/ws"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n", ws_port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "\r\n\r\n", 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 101", 12);
	evbuffer_drain(b, evbuffer_get_length(b));
	raw_send(fd, "ping-1", 6);
	assert_int_equal(raw_read(fd, b, 6, NULL, 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 6), "ping-1", 6);
	raw_send(fd, "ping-2", 6);
	assert_int_equal(raw_read(fd, b, 12, NULL, 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "ping-1ping-2", 12);
	close(fd);
	evbuffer_free(b);
}

static void
test_refusals(void **state)
{
	struct tu_res r = { 0 };
	char path[128];

	(void)state;
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/n1/sandbox/ports/0/",
	    ka, NULL), 400);
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/n1/sandbox/ports/70000/x", ka, NULL), 400);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/n1/sandbox/ports/x/",
	    ka, NULL), 400);
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/file",
	    up_port);
	assert_int_equal(tu_req(&r, "GET", path, kb, NULL), 404);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 401);
	/* Nothing listens on the port: 502 and the sentence. */
	evhttp_free(up_http);
	up_http = evhttp_new(T.base);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 502);
	assert_string_equal(tu_code(&r), SBX_E_PORT_CLOSED);
	assert_non_null(strstr(tu_text(&r), "nothing listens on port"));
	tu_res_free(&r);
}

static void
test_ticket_and_preview_without_key(void **state)
{
	struct tu_res r = { 0 };
	char path[256], tok[64], url[128];
	json_t *o;
	struct evbuffer *b;
	char head[512];

	(void)state;
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/tickets",
	    up_port);
	assert_int_equal(tu_req(&r, "POST", path, ka, NULL), 200);
	o = json_loads(tu_text(&r), 0, NULL);
	snprintf(tok, sizeof(tok), "%s", json_string_value(json_object_get(o,
	    "ticket")));
	json_decref(o);
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/x?a=1&"
	    "sbx_ticket=%s", up_port, tok);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 200);
	assert_non_null(strstr(last_head, "GET /x?a=1\n"));
	/* A ticket of another port is no credential here. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/x?"
	    "sbx_ticket=%s", ws_port, tok);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 401);
	/* A preview: 1 s, no key, then gone. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/previews",
	    up_port);
	assert_int_equal(tu_req(&r, "POST", path, kb, "{\"ttl_s\":1}"), 404);
	assert_int_equal(tu_req(&r, "POST", path, ka, "{\"ttl_s\":90000}"), 400);
	assert_int_equal(tu_req(&r, "POST", path, ka, "{\"ttl_s\":2}"), 201);
	o = json_loads(tu_text(&r), 0, NULL);
	snprintf(url, sizeof(url), "%s", json_string_value(json_object_get(o,
	    "path")));
	assert_non_null(strstr(json_string_value(json_object_get(o, "url")),
	    ".preview.example.test/"));
	json_decref(o);
	snprintf(path, sizeof(path), "%sfile", url);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 200);
	assert_int_equal(evbuffer_get_length(r.body), sizeof(file_bytes));
	assert_non_null(strstr(last_head, "GET /file\n"));
	/* The same preview on its own origin: the Host names it. */
	snprintf(head, sizeof(head), "GET /file HTTP/1.1\r\nHost: %.*s."
	    "preview.example.test\r\n\r\n", (int)API_PORTS_TOKEN_LEN, url + 3);
	b = exchange(head, NULL, 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 200", 12);
	evbuffer_free(b);
	/* ... and the api itself is not served there. */
	snprintf(head, sizeof(head), "GET /api/v1/whoami HTTP/1.1\r\nHost: "
	    "%.*s.preview.example.test\r\nAuthorization: Bearer %s\r\n\r\n",
	    (int)API_PORTS_TOKEN_LEN, url + 3, ka);
	b = exchange(head, NULL, 0);
	assert_null(strstr(last_head, ka));
	evbuffer_free(b);
	tu_spin(2100);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 404);
	tu_res_free(&r);
}

static void
test_connection_cap_and_idle_timeout(void **state)
{
	char head[512];
	struct evbuffer *b = evbuffer_new();
	struct tu_res r = { 0 };
	char path[128];
	int fd[3], i;

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/ws"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n", ws_port, ka);
	for (i = 0; i < 3; i++) {
		fd[i] = tu_raw_connect();
		raw_send(fd[i], head, strlen(head));
		evbuffer_drain(b, evbuffer_get_length(b));
		assert_int_equal(raw_read(fd[i], b, 0, "\r\n\r\n", 5000), 0);
	}
	/* The 4th of port_connections_per_sandbox 3. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/file",
	    up_port);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 429);
	assert_string_equal(r.retry_after, "1");
	assert_non_null(strstr(tu_text(&r), "port_connections_per_sandbox"));
	for (i = 0; i < 3; i++)
		close(fd[i]);
	tu_spin(100);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 200);
	/* Bytes counted per sandbox. */
	assert_int_equal(tu_req(&r, "GET", "/metrics", kop, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "sbx_api_port_bytes_total{sandbox="
	    "\"npc-n1\",direction=\"out\"}"));
	tu_res_free(&r);
	evbuffer_free(b);
}

/* port_idle_timeout (1 s here): an idle tunnel is closed, a busy one is
 * not. */
static void
test_idle_connection_is_closed(void **state)
{
	char head[512];
	struct evbuffer *b = evbuffer_new();
	int fd = tu_raw_connect(), i;

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/ws"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n", ws_port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "\r\n\r\n", 5000), 0);
	for (i = 0; i < 4; i++) {   /* 2 s of traffic every 0.5 s */
		evbuffer_drain(b, evbuffer_get_length(b));
		raw_send(fd, "x", 1);
		assert_int_equal(raw_read(fd, b, 1, NULL, 2000), 0);
		tu_spin(500);
	}
	/* Then silence: closed within about a second. */
	assert_int_equal(raw_read(fd, b, 1000000, NULL, 2500), 1);
	close(fd);
	evbuffer_free(b);
}

/* A masked binary frame of the client (RFC 6455 §5.2), n < 126. */
static size_t
ws_frame(unsigned char *out, const char *p, size_t n)
{
	static const unsigned char mask[4] = { 0x11, 0x22, 0x33, 0x44 };
	size_t i;

	out[0] = 0x82;
	out[1] = (unsigned char)(0x80 | n);
	memcpy(out + 2, mask, 4);
	for (i = 0; i < n; i++)
		out[6 + i] = (unsigned char)p[i] ^ mask[i % 4];
	return 6 + n;
}

/* The payloads of the server's binary frames in raw (unmasked, lengths
 * < 65536), appended to out; returns the bytes of raw used. */
static size_t
ws_payloads(const unsigned char *raw, size_t n, struct evbuffer *out)
{
	size_t at = 0, len, hl;

	while (n - at >= 2) {
		len = raw[at + 1] & 0x7f;
		hl = 2;
		if (len == 126) {
			if (n - at < 4)
				break;
			len = (size_t)raw[at + 2] << 8 | raw[at + 3];
			hl = 4;
		}
		assert_true(len < 127 || hl == 4);
		if (n - at < hl + len)
			break;
		assert_int_equal(raw[at] & 0x0f, 2);   /* binary */
		evbuffer_add(out, raw + at + hl, len);
		at += hl + len;
	}
	return at;
}

/* GET .../tcp: a WebSocket whose binary messages are the TCP bytes. */
static void
test_tcp_websocket_carries_raw_bytes(void **state)
{
	char head[768];
	struct evbuffer *b = evbuffer_new(), *pl = evbuffer_new();
	unsigned char f[256];
	const char *up = "GET / HTTP/1.1\r\nConnection: Upgrade\r\n"
	    "Upgrade: echo\r\n\r\n";
	struct tu_res r = { 0 };
	struct evbuffer_ptr e;
	size_t used;
	int fd = tu_raw_connect();

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/tcp"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: websocket\r\n"
	    "Sec-WebSocket-Version: 13\r\n"
	    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", ws_port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "\r\n\r\n", 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 101", 12);
	/* RFC 6455 §1.3's example key and its accept value. */
	assert_true(evbuffer_search(b, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", 28,
	    NULL).pos >= 0);
	e = evbuffer_search(b, "\r\n\r\n", 4, NULL);
	evbuffer_drain(b, (size_t)e.pos + 4);
	/* Raw TCP through frames: the upstream's own handshake, then echo. */
	raw_send(fd, f, ws_frame(f, up, strlen(up)));
	raw_send(fd, f, ws_frame(f, "tcp-bytes", 9));
	while (evbuffer_search(pl, "tcp-bytes", 9, NULL).pos < 0) {
		assert_int_equal(raw_read(fd, b, evbuffer_get_length(b) + 1, NULL,
		    5000), 0);
		used = ws_payloads(evbuffer_pullup(b, -1), evbuffer_get_length(b),
		    pl);
		evbuffer_drain(b, used);
	}
	assert_memory_equal(evbuffer_pullup(pl, 12), "HTTP/1.1 101", 12);
	close(fd);
	/* Not a handshake: 400 before anything is opened. */
	snprintf(head, sizeof(head), "/api/v1/npcs/n1/sandbox/ports/%d/tcp",
	    ws_port);
	assert_int_equal(tu_req(&r, "GET", head, ka, NULL), 400);
	tu_res_free(&r);
	evbuffer_free(b);
	evbuffer_free(pl);
}

/* sbxctl beside this test binary (BUILD/sbxctl for BUILD/tests/test_x). */
static void
sbxctl_path(char *out, size_t cap)
{
	char self[512];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	assert_true(n > 0);
	self[n] = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	snprintf(out, cap, "%s/sbxctl", self);
}

/* sbxctl port-forward: a real sbxctl process, three local connections at
 * once, each its own tunnel to the upstream's echo; Ctrl-C ends it with 0. */
static void
test_sbxctl_port_forward_carries_many_connections(void **state)
{
	static const char up_head[] = "GET / HTTP/1.1\r\nConnection: "
	    "Upgrade\r\nUpgrade: echo\r\n\r\n";
	char bin[600], url[64], spec[32], msg[32];
	struct evbuffer *b[3];
	struct sockaddr_in sin;
	int local = 0, fd[3], i, st = -1, tries;
	pid_t pid;

	(void)state;
	sbxctl_path(bin, sizeof(bin));
	if (access(bin, X_OK) != 0)
		skip();
	/* a free port for LOCAL */
	fd[0] = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd[0], (struct sockaddr *)&sin, sizeof(sin)), 0);
	{
		socklen_t sl = sizeof(sin);

		getsockname(fd[0], (struct sockaddr *)&sin, &sl);
		local = ntohs(sin.sin_port);
	}
	close(fd[0]);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", T.port);
	snprintf(spec, sizeof(spec), "%d:%d", local, ws_port);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		if (getenv("TU_DEBUG") == NULL)
			dup2(nul, 2);
		setenv("SBX_URL", url, 1);
		setenv("SBX_KEY", ka, 1);
		setenv("HOME", "/nonexistent", 1);
		unsetenv("SBX_CLI_CONFIG");
		execl(bin, "sbxctl", "port-forward", "n1", spec, (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 3; i++) {
		for (tries = 0; tries < 200; tries++) {
			fd[i] = socket(AF_INET, SOCK_STREAM, 0);
			sin.sin_port = htons((uint16_t)local);
			if (connect(fd[i], (struct sockaddr *)&sin, sizeof(sin)) == 0)
				break;
			close(fd[i]);
			tu_spin(20);
		}
		assert_true(tries < 200);
		b[i] = evbuffer_new();
		raw_send(fd[i], up_head, strlen(up_head));
	}
	for (i = 0; i < 3; i++) {
		assert_int_equal(raw_read(fd[i], b[i], 0, "\r\n\r\n", 10000), 0);
		assert_memory_equal(evbuffer_pullup(b[i], 12), "HTTP/1.1 101", 12);
		evbuffer_drain(b[i], evbuffer_get_length(b[i]));
	}
	for (i = 0; i < 3; i++) {
		snprintf(msg, sizeof(msg), "tunnel-%d", i);
		raw_send(fd[i], msg, strlen(msg));
	}
	for (i = 0; i < 3; i++) {
		snprintf(msg, sizeof(msg), "tunnel-%d", i);
		assert_int_equal(raw_read(fd[i], b[i], strlen(msg), NULL, 10000), 0);
		assert_memory_equal(evbuffer_pullup(b[i], -1), msg, strlen(msg));
		close(fd[i]);
		evbuffer_free(b[i]);
	}
	tu_spin(100);
	kill(pid, SIGINT);
	for (tries = 0; tries < 200 && waitpid(pid, &st, WNOHANG) == 0; tries++)
		tu_spin(20);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_get_and_post_pass_byte_exact,
		    up_start, up_stop),
		cmocka_unit_test_setup_teardown(test_sse_events_arrive_one_by_one,
		    up_start, up_stop),
		cmocka_unit_test_setup_teardown(test_upgrade_echoes_both_ways,
		    up_start, up_stop),
		cmocka_unit_test_setup_teardown(test_refusals, up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_ticket_and_preview_without_key, up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_connection_cap_and_idle_timeout, up_start, up_stop),
		cmocka_unit_test_setup_teardown(test_idle_connection_is_closed,
		    up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_tcp_websocket_carries_raw_bytes, up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_sbxctl_port_forward_carries_many_connections, up_start,
		    up_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
