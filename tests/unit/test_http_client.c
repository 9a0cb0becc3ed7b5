/* test_http_client.c - sbx_http_client against local evhttp and raw servers on a unix socket and 127.0.0.1:0. */
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "sbx_http_client.h"
#include "sbx_proto.h"

#define BIG_BYTES (16 * 1024 * 1024)

struct fx {
	struct event_base *base;
	struct evhttp *http;
	struct evconnlistener *raw;
	char tmpdir[64];
	char unix_addr[128];
	char tcp_addr[64];
	char raw_addr[64];
	const char *raw_reply;        /* what the raw server answers */
	int raw_echo;                 /* raw server echoes after its reply */
	int raw_past_headers;         /* echo: the request's headers were skipped */
	struct bufferevent *raw_conn; /* the raw server's one connection */
	struct evhttp_request *endless; /* a reply /endless never ended */
	/* client side results */
	struct sbx_http_req *req;
	int started_returned;
	int early_callback;
	int done_calls;
	int status;
	struct sbx_err err;
	int have_err;
	struct evbuffer *got;
	size_t max_input_while_paused;
	int pause_each;
	int cancel_after_first;
	struct event *resume_ev;
	struct event *stop_ev;
};

/* ---------- servers ---------- */

static void
h_cl(struct evhttp_request *r, void *arg)
{
	struct evbuffer *b = evbuffer_new();

	(void)arg;
	evbuffer_add_printf(b, "hello world");
	evhttp_add_header(evhttp_request_get_output_headers(r), "X-Test", "yes");
	evhttp_send_reply(r, 200, "OK", b);
	evbuffer_free(b);
}

static void
h_chunked(struct evhttp_request *r, void *arg)
{
	static const char *parts[] = { "abc", "defg", "", "hij", NULL };
	struct evbuffer *b = evbuffer_new();
	int i;

	(void)arg;
	evhttp_send_reply_start(r, 200, "OK");
	for (i = 0; parts[i] != NULL; i++) {
		if (parts[i][0] == '\0')
			continue;
		evbuffer_add_printf(b, "%s", parts[i]);
		evhttp_send_reply_chunk(r, b);
	}
	evhttp_send_reply_end(r);
	evbuffer_free(b);
}

static void
h_big(struct evhttp_request *r, void *arg)
{
	struct evbuffer *b = evbuffer_new();
	unsigned char block[65536];
	size_t i, j;

	(void)arg;
	evhttp_send_reply_start(r, 200, "OK");
	for (i = 0; i < BIG_BYTES / sizeof(block); i++) {
		for (j = 0; j < sizeof(block); j++)
			block[j] = (unsigned char)((i * sizeof(block) + j) % 251);
		evbuffer_add(b, block, sizeof(block));
		evhttp_send_reply_chunk(r, b);
	}
	evhttp_send_reply_end(r);
	evbuffer_free(b);
}

static void
h_endless(struct evhttp_request *r, void *arg)
{
	struct fx *f = arg;
	struct evbuffer *b = evbuffer_new();

	/* One chunk, then the response never ends (until teardown: libevent
	 * wants reply_end even after the client went away). */
	f->endless = r;
	evhttp_send_reply_start(r, 200, "OK");
	evbuffer_add_printf(b, "first");
	evhttp_send_reply_chunk(r, b);
	evbuffer_free(b);
}

static void
h_post(struct evhttp_request *r, void *arg)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(r);
	struct evbuffer *b = evbuffer_new();
	const char *ct = evhttp_find_header(evhttp_request_get_input_headers(r),
	    "Content-Type");

	(void)arg;
	evbuffer_add_printf(b, "%s %s ", evhttp_request_get_command(r) ==
	    EVHTTP_REQ_POST ? "POST" : "?", ct != NULL ? ct : "-");
	evbuffer_add_buffer(b, in);
	evhttp_send_reply(r, 201, "Created", b);
	evbuffer_free(b);
}

static void
raw_read(struct bufferevent *bev, void *arg)
{
	struct fx *f = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr p;

	/* Answer once the whole request head is in, as a real server does
	 * (closing on unread bytes would reset the connection). */
	if (!f->raw_past_headers) {
		p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
		if (p.pos < 0)
			return;
		evbuffer_drain(in, (size_t)p.pos + 4);
		f->raw_past_headers = 1;
		if (f->raw_reply != NULL && f->raw_reply[0] != '\0')
			bufferevent_write(bev, f->raw_reply, strlen(f->raw_reply));
	}
	if (f->raw_echo)
		bufferevent_write_buffer(bev, in);
	else
		evbuffer_drain(in, evbuffer_get_length(in));
}

static void
raw_close(struct fx *f)
{
	if (f->raw_conn != NULL)
		bufferevent_free(f->raw_conn);
	f->raw_conn = NULL;
}

static void
raw_write(struct bufferevent *bev, void *arg)
{
	struct fx *f = arg;

	/* A non-echo reply is complete once flushed: close. */
	if (!f->raw_echo && f->raw_past_headers && f->raw_reply != NULL &&
	    f->raw_reply[0] != '\0' &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		raw_close(f);
}

static void
raw_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		raw_close(arg);
}

static void
raw_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int socklen, void *arg)
{
	struct fx *f = arg;
	struct bufferevent *bev;

	(void)l;
	(void)sa;
	(void)socklen;
	raw_close(f);
	bev = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
	f->raw_conn = bev;
	bufferevent_setcb(bev, raw_read, raw_write, raw_event, f);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct evhttp_bound_socket *bs;
	struct sockaddr_in sin;
	struct sockaddr_un sun;
	socklen_t len = sizeof(sin);
	evutil_socket_t fd;

	assert_non_null(f);
	f->base = event_base_new();
	f->http = evhttp_new(f->base);
	f->got = evbuffer_new();
	evhttp_set_cb(f->http, "/cl", h_cl, f);
	evhttp_set_cb(f->http, "/chunked", h_chunked, f);
	evhttp_set_cb(f->http, "/big", h_big, f);
	evhttp_set_cb(f->http, "/endless", h_endless, f);
	evhttp_set_cb(f->http, "/post", h_post, f);

	bs = evhttp_bind_socket_with_handle(f->http, "127.0.0.1", 0);
	assert_non_null(bs);
	fd = evhttp_bound_socket_get_fd(bs);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	snprintf(f->tcp_addr, sizeof(f->tcp_addr), "127.0.0.1:%d",
	    ntohs(sin.sin_port));

	snprintf(f->tmpdir, sizeof(f->tmpdir), "/tmp/sbx-httpc-XXXXXX");
	assert_non_null(mkdtemp(f->tmpdir));
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/s.sock", f->tmpdir);
	snprintf(f->unix_addr, sizeof(f->unix_addr), "unix:%s", sun.sun_path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(listen(fd, 16), 0);
	evutil_make_socket_nonblocking(fd);
	assert_non_null(evhttp_accept_socket_with_handle(f->http, fd));

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->raw = evconnlistener_new_bind(f->base, raw_accept, f,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
	    (struct sockaddr *)&sin, sizeof(sin));
	assert_non_null(f->raw);
	len = sizeof(sin);
	getsockname(evconnlistener_get_fd(f->raw), (struct sockaddr *)&sin, &len);
	snprintf(f->raw_addr, sizeof(f->raw_addr), "127.0.0.1:%d",
	    ntohs(sin.sin_port));
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;
	char path[160];

	if (f->resume_ev != NULL)
		event_free(f->resume_ev);
	if (f->stop_ev != NULL)
		event_free(f->stop_ev);
	raw_close(f);
	if (f->endless != NULL)
		evhttp_send_reply_end(f->endless);
	evconnlistener_free(f->raw);
	evhttp_free(f->http);
	evbuffer_free(f->got);
	event_base_free(f->base);
	snprintf(path, sizeof(path), "%s/s.sock", f->tmpdir);
	unlink(path);
	rmdir(f->tmpdir);
	free(f);
	return 0;
}

/* ---------- client callbacks ---------- */

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fx *f = arg;
	size_t n;

	(void)fd;
	(void)what;
	/* While paused nothing may be read: the input stays as it was. */
	n = evbuffer_get_length(bufferevent_get_input(
	    sbx_http_req_bufferevent(f->req)));
	if (n > f->max_input_while_paused)
		f->max_input_while_paused = n;
	sbx_http_req_resume(f->req);
}

static void
c_response(void *arg, struct sbx_http_req *req, int status)
{
	struct fx *f = arg;

	(void)req;
	if (!f->started_returned)
		f->early_callback = 1;
	f->status = status;
}

static void
c_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct fx *f = arg;
	struct timeval tv = { 0, 0 };

	assert_true(len > 0);
	evbuffer_add(f->got, buf, len);
	if (f->cancel_after_first) {
		sbx_http_req_cancel(req);
		f->req = NULL;
		return;
	}
	if (f->pause_each) {
		sbx_http_req_pause(req);
		event_add(f->resume_ev, &tv);
	}
}

static void
c_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct fx *f = arg;

	(void)req;
	if (!f->started_returned)
		f->early_callback = 1;
	f->done_calls++;
	if (err != NULL) {
		f->err = *err;
		f->have_err = 1;
		if (getenv("TEST_DEBUG") != NULL)
			fprintf(stderr, "done: %s: %s\n", err->code, err->message);
	}
	f->req = NULL;
	event_base_loopbreak(f->base);
}

static void
stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fx *f = arg;

	(void)fd;
	(void)what;
	event_base_loopbreak(f->base);
}

static void
run(struct fx *f, const char *addr, const struct sbx_http_request *q,
    const struct sbx_http_opts *o)
{
	struct sbx_http_cbs cbs = { c_response, c_body, c_done, f };
	struct sbx_err err;
	struct timeval limit = { 20, 0 };

	f->resume_ev = evtimer_new(f->base, resume_cb, f);
	f->stop_ev = evtimer_new(f->base, stop_cb, f);
	event_add(f->stop_ev, &limit);
	f->req = sbx_http_request(f->base, addr, q, o, &cbs, &err);
	assert_non_null(f->req);
	f->started_returned = 1;
	event_base_dispatch(f->base);
	assert_false(f->early_callback);
}

static void
get(struct fx *f, const char *addr, const char *path)
{
	struct sbx_http_request q = { 0 };

	q.method = "GET";
	q.path = path;
	run(f, addr, &q, NULL);
}

/* ---------- tests ---------- */

static void
test_content_length_body_over_unix_socket(void **state)
{
	struct fx *f = *state;

	get(f, f->unix_addr, "/cl");
	assert_int_equal(f->done_calls, 1);
	assert_false(f->have_err);
	assert_int_equal(f->status, 200);
	assert_int_equal(evbuffer_get_length(f->got), 11);
	assert_memory_equal(evbuffer_pullup(f->got, -1), "hello world", 11);
}

static void
test_content_length_body_over_tcp(void **state)
{
	struct fx *f = *state;

	get(f, f->tcp_addr, "/cl");
	assert_int_equal(f->done_calls, 1);
	assert_false(f->have_err);
	assert_int_equal(f->status, 200);
	assert_memory_equal(evbuffer_pullup(f->got, -1), "hello world", 11);
}

static void
headers_response(void *arg, struct sbx_http_req *req, int status)
{
	struct fx *f = arg;

	f->status = status;
	assert_string_equal(sbx_http_req_header(req, "x-test"), "yes");
	assert_null(sbx_http_req_header(req, "X-Absent"));
}

static void
test_headers_are_readable_case_insensitively(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	struct sbx_http_cbs cbs = { headers_response, c_body, c_done, f };
	struct sbx_err err;

	q.method = "GET";
	q.path = "/cl";
	f->req = sbx_http_request(f->base, f->tcp_addr, &q, NULL, &cbs, &err);
	assert_non_null(f->req);
	event_base_dispatch(f->base);
	assert_int_equal(f->status, 200);
	assert_false(f->have_err);
}

static void
test_chunked_body_is_reassembled(void **state)
{
	struct fx *f = *state;

	get(f, f->unix_addr, "/chunked");
	assert_int_equal(f->done_calls, 1);
	assert_false(f->have_err);
	assert_int_equal(evbuffer_get_length(f->got), 10);
	assert_memory_equal(evbuffer_pullup(f->got, -1), "abcdefghij", 10);
}

static void
test_post_body_and_content_type_are_sent(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	const char *want = "POST application/json {\"a\":1}";

	q.method = "POST";
	q.path = "/post";
	q.content_type = "application/json";
	q.body = "{\"a\":1}";
	q.body_len = 7;
	run(f, f->tcp_addr, &q, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->status, 201);
	assert_int_equal(evbuffer_get_length(f->got), strlen(want));
	assert_memory_equal(evbuffer_pullup(f->got, -1), want, strlen(want));
}

static void
test_large_body_with_pause_resume_keeps_memory_bounded(void **state)
{
	struct fx *f = *state;
	const unsigned char *p;
	size_t i;

	f->pause_each = 1;
	get(f, f->unix_addr, "/big");
	assert_int_equal(f->done_calls, 1);
	assert_false(f->have_err);
	assert_int_equal(evbuffer_get_length(f->got), BIG_BYTES);
	p = evbuffer_pullup(f->got, -1);
	for (i = 0; i < BIG_BYTES; i++)
		if (p[i] != (unsigned char)(i % 251))
			fail_msg("byte %zu differs", i);
	/* 16 MiB went through, yet a paused client never held more than a
	 * couple of socket reads. */
	assert_true(f->max_input_while_paused > 0);
	assert_true(f->max_input_while_paused <= 128 * 1024);
}

static void
test_connect_refused_unix_is_runtime_unavailable(void **state)
{
	struct fx *f = *state;
	char addr[160];

	snprintf(addr, sizeof(addr), "unix:%s/absent.sock", f->tmpdir);
	get(f, addr, "/cl");
	assert_int_equal(f->done_calls, 1);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_RUNTIME_UNAVAILABLE);
}

static void
test_connect_refused_tcp_is_runtime_unavailable(void **state)
{
	struct fx *f = *state;
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	char addr[64];
	int fd;

	/* A port that was just free: bound, read back, closed. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	getsockname(fd, (struct sockaddr *)&sin, &len);
	close(fd);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sin.sin_port));
	get(f, addr, "/cl");
	assert_int_equal(f->done_calls, 1);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_RUNTIME_UNAVAILABLE);
}

static void
test_unavailable_code_is_configurable(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	struct sbx_http_opts o = { 0 };
	char addr[160];

	snprintf(addr, sizeof(addr), "unix:%s/absent.sock", f->tmpdir);
	q.method = "GET";
	q.path = "/";
	o.unavailable_code = SBX_E_BROKER_UNAVAILABLE;
	o.peer_name = "the broker";
	run(f, addr, &q, &o);
	assert_string_equal(f->err.code, SBX_E_BROKER_UNAVAILABLE);
	assert_non_null(strstr(f->err.message, "the broker"));
}

static void
test_malformed_status_line_is_an_error(void **state)
{
	struct fx *f = *state;

	f->raw_reply = "HTTX/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
	get(f, f->raw_addr, "/");
	assert_int_equal(f->done_calls, 1);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_RUNTIME);
	assert_non_null(strstr(f->err.message, "malformed status line"));
	assert_int_equal(f->status, 0);
}

static void
test_truncated_content_length_body_is_an_error(void **state)
{
	struct fx *f = *state;

	f->raw_reply = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
	get(f, f->raw_addr, "/");
	assert_int_equal(f->done_calls, 1);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_RUNTIME);
	assert_non_null(strstr(f->err.message, "before the response was complete"));
	assert_int_equal(f->status, 200);
}

static void
test_body_until_close(void **state)
{
	struct fx *f = *state;

	f->raw_reply = "HTTP/1.1 200 OK\r\nContent-Type: application/"
	    "vnd.docker.raw-stream\r\n\r\nraw bytes";
	get(f, f->raw_addr, "/");
	assert_false(f->have_err);
	assert_int_equal(evbuffer_get_length(f->got), 9);
	assert_memory_equal(evbuffer_pullup(f->got, -1), "raw bytes", 9);
}

/* A streamed request body (adr/0030): written after the call in pieces,
 * slower than the header timeout, which must not fire while the caller
 * has nothing to send; no byte beyond stream_len is taken. */
static int piece_no;
static struct event *piece_ev;

static void
piece_cb(evutil_socket_t fd, short what, void *arg)
{
	static const char *const pieces[] = { "abc", "defg", "hi" };
	struct fx *f = arg;
	struct timeval tv = { 0, 150 * 1000 };

	(void)fd;
	(void)what;
	assert_int_equal(sbx_http_req_write(f->req, pieces[piece_no],
	    strlen(pieces[piece_no])), 0);
	if (++piece_no < 3) {
		event_add(piece_ev, &tv);
		return;
	}
	/* all 9 announced bytes went: one more is refused */
	assert_int_equal(sbx_http_req_write(f->req, "x", 1), -1);
}

static void
test_streamed_request_body_slower_than_header_timeout(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	struct sbx_http_opts o = { 0 };
	struct timeval tv = { 0, 150 * 1000 };
	const char *want = "? application/octet-stream abcdefghi";

	q.method = "PUT";
	q.path = "/post";
	q.content_type = "application/octet-stream";
	q.body_stream = 1;
	q.stream_len = 9;
	o.header_timeout_ms = 100;
	piece_no = 0;
	piece_ev = evtimer_new(f->base, piece_cb, f);
	event_add(piece_ev, &tv);
	run(f, f->tcp_addr, &q, &o);
	event_free(piece_ev);
	assert_false(f->have_err);
	assert_int_equal(piece_no, 3);
	assert_int_equal(f->status, 201);
	assert_int_equal(evbuffer_get_length(f->got), strlen(want));
	assert_memory_equal(evbuffer_pullup(f->got, -1), want, strlen(want));
}

static void
test_header_timeout(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	struct sbx_http_opts o = { 0 };

	f->raw_reply = "";   /* accepts, never answers */
	q.method = "GET";
	q.path = "/";
	o.header_timeout_ms = 100;
	run(f, f->raw_addr, &q, &o);
	assert_int_equal(f->done_calls, 1);
	assert_string_equal(f->err.code, SBX_E_TIMEOUT);
}

static void
up_response(void *arg, struct sbx_http_req *req, int status)
{
	struct fx *f = arg;

	f->status = status;
	assert_true(sbx_http_req_upgraded(req));
	assert_int_equal(sbx_http_req_write(req, "ping", 4), 0);
	assert_int_equal(sbx_http_req_close_write(req), 0);
	/* After close_write nothing more may be queued. */
	assert_int_equal(sbx_http_req_write(req, "x", 1), -1);
}

static void
test_upgrade_hijacks_both_ways_and_half_closes(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	struct sbx_http_cbs cbs = { up_response, c_body, c_done, f };
	struct sbx_err err;

	f->raw_reply = "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\n"
	    "Upgrade: tcp\r\n\r\n";
	f->raw_echo = 1;
	q.method = "POST";
	q.path = "/exec/x/start";
	q.upgrade = 1;
	f->req = sbx_http_request(f->base, f->raw_addr, &q, NULL, &cbs, &err);
	assert_non_null(f->req);
	event_base_dispatch(f->base);
	/* The echo server closes when it sees our EOF: done without error. */
	assert_int_equal(f->status, 101);
	assert_false(f->have_err);
	assert_int_equal(evbuffer_get_length(f->got), 4);
	assert_memory_equal(evbuffer_pullup(f->got, -1), "ping", 4);
}

static void
noup_response(void *arg, struct sbx_http_req *req, int status)
{
	struct fx *f = arg;

	f->status = status;
	assert_false(sbx_http_req_upgraded(req));
	assert_int_equal(sbx_http_req_write(req, "x", 1), -1);
	assert_int_equal(sbx_http_req_close_write(req), -1);
}

static void
test_write_refused_without_upgrade(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	struct sbx_http_cbs cbs = { noup_response, c_body, c_done, f };
	struct sbx_err err;

	q.method = "GET";
	q.path = "/cl";
	q.upgrade = 1;   /* asked, but evhttp answers 200 */
	f->req = sbx_http_request(f->base, f->tcp_addr, &q, NULL, &cbs, &err);
	assert_non_null(f->req);
	event_base_dispatch(f->base);
	assert_int_equal(f->status, 200);
	assert_int_equal(f->done_calls, 1);
	assert_false(f->have_err);
}

static void
test_cancel_mid_body_makes_no_callback(void **state)
{
	struct fx *f = *state;
	struct timeval settle = { 0, 200000 };

	f->cancel_after_first = 1;
	f->resume_ev = evtimer_new(f->base, resume_cb, f);
	f->stop_ev = evtimer_new(f->base, stop_cb, f);
	{
		struct sbx_http_request q = { 0 };
		struct sbx_http_cbs cbs = { c_response, c_body, c_done, f };
		struct sbx_err err;

		q.method = "GET";
		q.path = "/endless";
		f->req = sbx_http_request(f->base, f->unix_addr, &q, NULL, &cbs,
		    &err);
		assert_non_null(f->req);
	}
	event_add(f->stop_ev, &settle);
	event_base_dispatch(f->base);
	assert_int_equal(f->status, 200);
	assert_int_equal(evbuffer_get_length(f->got), 5);
	assert_int_equal(f->done_calls, 0);
	assert_null(f->req);
}

static void
test_cancel_before_connect_makes_no_callback(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	struct sbx_http_cbs cbs = { c_response, c_body, c_done, f };
	struct sbx_err err;
	struct timeval settle = { 0, 100000 };
	char addr[160];

	snprintf(addr, sizeof(addr), "unix:%s/absent.sock", f->tmpdir);
	q.method = "GET";
	q.path = "/";
	f->req = sbx_http_request(f->base, addr, &q, NULL, &cbs, &err);
	assert_non_null(f->req);
	sbx_http_req_cancel(f->req);
	f->stop_ev = evtimer_new(f->base, stop_cb, f);
	event_add(f->stop_ev, &settle);
	event_base_dispatch(f->base);
	assert_int_equal(f->done_calls, 0);
}

static void
test_bad_arguments_are_refused_synchronously(void **state)
{
	struct fx *f = *state;
	struct sbx_http_request q = { 0 };
	struct sbx_http_cbs cbs = { c_response, c_body, c_done, f };
	const char *bad_headers[] = { "X-A: b\r\nX-Injected: 1", NULL };
	struct sbx_err err;

	q.method = "GET";
	q.path = "/a b";
	assert_null(sbx_http_request(f->base, f->tcp_addr, &q, NULL, &cbs, &err));
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	q.path = "/";
	assert_null(sbx_http_request(f->base, "no-port", &q, NULL, &cbs, &err));
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	q.headers = bad_headers;
	assert_null(sbx_http_request(f->base, f->tcp_addr, &q, NULL, &cbs, &err));
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	assert_int_equal(f->done_calls, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_content_length_body_over_unix_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_streamed_request_body_slower_than_header_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_content_length_body_over_tcp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_headers_are_readable_case_insensitively, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunked_body_is_reassembled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_post_body_and_content_type_are_sent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_body_with_pause_resume_keeps_memory_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_refused_unix_is_runtime_unavailable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_refused_tcp_is_runtime_unavailable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unavailable_code_is_configurable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_status_line_is_an_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated_content_length_body_is_an_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_body_until_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upgrade_hijacks_both_ways_and_half_closes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_refused_without_upgrade, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_mid_body_makes_no_callback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_before_connect_makes_no_callback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_arguments_are_refused_synchronously, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
