/* test_sbx_httpd.c - the HTTP server core's route lookup (captures, 405 Allow, 404), its one error-header table and reason phrases, non-JSON replies and a stream's high-water mark over a real socket (adr/0022, adr/0035). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "sbx_httpd.h"
#include "sbx_metrics.h"
#include "sbx_proto.h"

/* A daemon's row: the core's part first, then its own. */
struct row {
	struct sbx_httpd_route r;
	const char *name;
};

static const struct row rows[] = {
	{ { EVHTTP_REQ_GET, "/v1/sandboxes" }, "list" },
	{ { EVHTTP_REQ_PUT, "/v1/sandboxes/{id}" }, "ensure" },
	{ { EVHTTP_REQ_GET, "/v1/sandboxes/{id}" }, "status" },
	{ { EVHTTP_REQ_DELETE, "/v1/sandboxes/{id}" }, "destroy" },
	{ { EVHTTP_REQ_GET, "/npcs/{npc}/execs/*/events" }, "events" },
	{ { EVHTTP_REQ_GET, "/npcs/{npc}/ports/{port}/**" }, "proxy" },
	{ { EVHTTP_REQ_GET, "/static/**" }, "static" },
	{ { 0, NULL }, NULL },
	{ { EVHTTP_REQ_GET, "/after-the-end" }, "unreachable" },
};
#define N (sizeof(rows) / sizeof(rows[0]))

static const struct row *
find(int method, const char *path, struct sbx_httpd_match *m, char *allow)
{
	return sbx_httpd_route_find(rows, N, sizeof(rows[0]), method, path, m,
	    allow, 128);
}

static void
test_route_found_with_its_captures(void **state)
{
	struct sbx_httpd_match m;
	char allow[128];
	const struct row *r;

	(void)state;
	r = find(EVHTTP_REQ_GET, "/v1/sandboxes/abc-1", &m, allow);
	assert_non_null(r);
	assert_string_equal(r->name, "status");
	assert_int_equal(m.ncap, 1);
	assert_string_equal(m.cap[0], "abc-1");
	r = find(EVHTTP_REQ_GET, "/npcs/bob/execs/x9/events", &m, allow);
	assert_non_null(r);
	assert_string_equal(r->name, "events");
	assert_int_equal(m.ncap, 2);
	assert_string_equal(m.cap[0], "bob");
	assert_string_equal(m.cap[1], "x9");
}

static void
test_wrong_method_gives_allow_in_table_order(void **state)
{
	char allow[128];

	(void)state;
	assert_null(find(EVHTTP_REQ_POST, "/v1/sandboxes/abc", NULL, allow));
	assert_string_equal(allow, "PUT, GET, DELETE");
	assert_null(find(EVHTTP_REQ_DELETE, "/v1/sandboxes", NULL, allow));
	assert_string_equal(allow, "GET");
}

static void
test_unknown_path_is_404_not_405(void **state)
{
	char allow[128];

	(void)state;
	assert_null(find(EVHTTP_REQ_GET, "/v1/sandboxes/", NULL, allow));
	assert_string_equal(allow, "");
	assert_null(find(EVHTTP_REQ_GET, "/v1/sandboxes/a/b", NULL, allow));
	assert_string_equal(allow, "");
	/* The table ends at its NULL row. */
	assert_null(find(EVHTTP_REQ_GET, "/after-the-end", NULL, allow));
	assert_null(find(EVHTTP_REQ_GET, NULL, NULL, allow));
}

/* A last segment "**" takes the rest of the path at a segment boundary,
 * after its captures, and nothing shorter or glued to the last segment. */
static void
test_prefix_route_takes_the_rest_of_the_path(void **state)
{
	struct sbx_httpd_match m;
	char allow[128];
	const struct row *r;
	const char *yes[] = { "/npcs/al/ports/80", "/npcs/al/ports/80/",
	    "/npcs/al/ports/80/a/b.txt", "/npcs/al/ports/80//x/**" };
	const char *no[] = { "/npcs/al/ports", "/npcs/al/ports/",
	    "/npcs/al/ports//x", "/npcs/al/port/80", "/npcs//ports/80/x" };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		r = find(EVHTTP_REQ_GET, yes[i], &m, allow);
		assert_non_null(r);
		assert_string_equal(r->name, "proxy");
		assert_int_equal(m.ncap, 2);
		assert_string_equal(m.cap[0], "al");
		assert_string_equal(m.cap[1], "80");
	}
	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		assert_null(find(EVHTTP_REQ_GET, no[i], &m, allow));
	/* After a literal: the rest begins at a '/', never glued. */
	assert_non_null(find(EVHTTP_REQ_GET, "/static", &m, allow));
	assert_non_null(find(EVHTTP_REQ_GET, "/static/a", &m, allow));
	assert_int_equal(m.ncap, 0);
	assert_null(find(EVHTTP_REQ_GET, "/staticx", &m, allow));
	assert_null(find(EVHTTP_REQ_GET, "/stati", &m, allow));
	/* The method still counts: a POST gets the Allow of the prefix row. */
	assert_null(find(EVHTTP_REQ_POST, "/npcs/al/ports/80/x", NULL, allow));
	assert_string_equal(allow, "GET");
}

static void
test_overlong_segment_captured_empty(void **state)
{
	struct sbx_httpd_match m;
	char path[400], allow[128];

	(void)state;
	memset(path, 'a', sizeof(path));
	memcpy(path, "/v1/sandboxes/", 14);
	path[sizeof(path) - 1] = '\0';
	assert_non_null(find(EVHTTP_REQ_GET, path, &m, allow));
	assert_string_equal(m.cap[0], "");
}

static void
test_reason_phrases_are_rfc9110(void **state)
{
	(void)state;
	assert_string_equal(sbx_httpd_reason(405), "Method Not Allowed");
	assert_string_equal(sbx_httpd_reason(413), "Payload Too Large");
	assert_string_equal(sbx_httpd_reason(431),
	    "Request Header Fields Too Large");
	assert_null(sbx_httpd_reason(299));
}

static void
test_histogram_is_cumulative(void **state)
{
	struct sbx_hist h;

	(void)state;
	memset(&h, 0, sizeof(h));
	sbx_hist_add(&h, 3);
	sbx_hist_add(&h, -5);
	sbx_hist_add(&h, 400000);
	assert_int_equal(h.count, 3);
	assert_int_equal(h.le[0], 1);   /* -5 counts as 0 <= 1 ms */
	assert_int_equal(h.le[1], 2);   /* and 3 <= 5 ms */
	assert_int_equal(h.le[SBX_METRICS_NBOUNDS - 1], 2);  /* 400 s: +Inf */
	assert_int_equal(h.sum_ms, 400003);
}

/* A server for the drain: what is open, what ran. */
struct dsrv {
	unsigned open;
	int graces, dones;
	void *done_got;
};

static unsigned
d_in_flight(void *arg)
{
	return ((struct dsrv *)arg)->open;
}

static void
d_grace_over(void *arg)
{
	struct dsrv *s = arg;

	s->graces++;
	s->open = 0;            /* the daemon cancels what runs */
}

static void
d_done(void *done_arg)
{
	struct dsrv *s = *(struct dsrv **)done_arg;

	s->dones++;
	s->done_got = done_arg;
}

static void
test_drain_ends_once_nothing_is_in_flight_or_grace_is_over(void **state)
{
	struct event_base *base = event_base_new();
	struct sbx_httpd_drain d;
	struct dsrv s;
	struct dsrv *main_arg = &s;     /* main's argument, not the server */

	(void)state;
	assert_non_null(base);
	/* Requests end in time: done(done_arg), no grace. */
	memset(&d, 0, sizeof(d));
	memset(&s, 0, sizeof(s));
	s.open = 2;
	assert_int_equal(sbx_httpd_drain_start(&d, base, 60000, d_in_flight,
	    d_grace_over, &s, d_done, &main_arg), 0);
	assert_int_equal(sbx_httpd_drain_start(&d, base, 60000, d_in_flight,
	    d_grace_over, &s, d_done, &main_arg), 0);  /* twice: nothing */
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(s.dones, 0);
	s.open = 0;
	sbx_httpd_drain_poke(&d);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(s.dones, 1);
	assert_ptr_equal(s.done_got, &main_arg);
	assert_int_equal(s.graces, 0);
	sbx_httpd_drain_poke(&d);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(s.dones, 1);           /* once */
	sbx_httpd_drain_free(&d);
	/* A request that never ends: grace_over(arg) after grace_ms. */
	memset(&d, 0, sizeof(d));
	memset(&s, 0, sizeof(s));
	s.open = 1;
	assert_int_equal(sbx_httpd_drain_start(&d, base, 20, d_in_flight,
	    d_grace_over, &s, d_done, &main_arg), 0);
	event_base_dispatch(base);      /* the grace timer, then nothing */
	assert_int_equal(s.graces, 1);
	sbx_httpd_drain_poke(&d);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(s.dones, 1);
	sbx_httpd_drain_free(&d);
	event_base_free(base);
}

/* ---- over a real socket: an evhttp on 127.0.0.1:0 and a raw client ---- */

/* What the test server's callback does with each request. */
struct tsrv {
	struct event_base *base;
	struct evhttp *http;
	struct sbx_httpd_listener l;
	struct sbx_httpd_req r;
	size_t high_water;      /* the stream test's r.high_water */
	int pauses, resumes;
	int sent;               /* what the reply call returned */
};

static void
t_pause(struct sbx_httpd_req *r, int on)
{
	struct tsrv *t = (struct tsrv *)(void *)((char *)r -
	    offsetof(struct tsrv, r));

	if (on)
		t->pauses++;
	else
		t->resumes++;
}

static const struct sbx_httpd_ops t_ops = { t_pause, NULL };

/* GET /text: "hello" as text/plain, no-store; GET /empty: a 204; GET
 * /stream: 64 KiB in one chunk of a stream, which stays open. */
static void
t_dispatch(struct evhttp_request *req, void *arg)
{
	struct tsrv *t = arg;
	const char *uri = evhttp_request_get_uri(req);
	struct evbuffer *b = evbuffer_new();
	static char big[64 * 1024];

	memset(&t->r, 0, sizeof(t->r));
	t->r.req = req;
	t->r.ops = &t_ops;
	if (strcmp(uri, "/text") == 0) {
		evbuffer_add(b, "hello", 5);
		t->sent = sbx_httpd_reply_body(&t->r, 200, "text/plain", b,
		    SBX_HTTPD_NO_STORE);
	} else if (strcmp(uri, "/empty") == 0) {
		t->sent = sbx_httpd_reply_body(&t->r, 204, NULL, NULL, 0);
	} else {
		t->r.high_water = t->high_water;
		assert_int_equal(sbx_httpd_stream_begin(&t->r, "text/plain",
		    60), 0);
		evbuffer_add(t->r.chunk, big, sizeof(big));
		sbx_httpd_stream_flush(&t->r);
	}
	evbuffer_free(b);
}

static void
t_up(struct tsrv *t)
{
	struct sbx_err err;

	memset(t, 0, sizeof(*t));
	assert_non_null(t->base = event_base_new());
	assert_non_null(t->http = evhttp_new(t->base));
	evhttp_set_gencb(t->http, t_dispatch, t);
	assert_int_equal(sbx_httpd_listen(t->http, t->base, "127.0.0.1:0", 0,
	    0, &t->l, &err), 0);
}

static void
t_down(struct tsrv *t)
{
	sbx_httpd_release(&t->r);
	sbx_httpd_req_clear(&t->r);
	evhttp_free(t->http);
	sbx_httpd_listener_free(&t->l);
	event_base_free(t->base);
}

/* Sends a GET of path and runs the loop for ms, reading what comes into
 * buf (cap bytes, NUL-terminated); reading stops after read_max bytes.
 * The connection is left open (returned) for the caller to close. */
static int
t_get(struct tsrv *t, const char *path, char *buf, size_t cap,
    size_t read_max, int ms)
{
	struct sockaddr_in sin;
	char req[128];
	size_t got = 0;
	ssize_t n;
	int fd, i;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)t->l.port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	buf[0] = '\0';
	for (i = 0; i < ms; i++) {
		event_base_loop(t->base, EVLOOP_NONBLOCK);
		if (got < read_max && got < cap - 1 && (n = recv(fd, buf + got,
		    (read_max < cap - 1 ? read_max : cap - 1) - got,
		    MSG_DONTWAIT)) > 0) {
			got += (size_t)n;
			buf[got] = '\0';
		}
		usleep(1000);
	}
	return fd;
}

static void
test_reply_body_sends_its_type_and_flags(void **state)
{
	struct tsrv t;
	char buf[2048];

	(void)state;
	t_up(&t);
	close(t_get(&t, "/text", buf, sizeof(buf), sizeof(buf), 100));
	assert_int_equal(t.sent, 200);
	assert_null(t.r.req);
	assert_memory_equal(buf, "HTTP/1.1 200 OK\r\n", 17);
	assert_non_null(strstr(buf, "Content-Type: text/plain\r\n"));
	assert_non_null(strstr(buf, "Cache-Control: no-store\r\n"));
	assert_non_null(strstr(buf, "\r\n\r\nhello"));
	close(t_get(&t, "/empty", buf, sizeof(buf), sizeof(buf), 100));
	assert_int_equal(t.sent, 204);
	assert_memory_equal(buf, "HTTP/1.1 204 No Content\r\n", 25);
	assert_null(strstr(buf, "Content-Type"));
	/* Nothing is sent for a request already answered. */
	assert_int_equal(sbx_httpd_reply_body(&t.r, 200, "text/plain", NULL,
	    0), 0);
	t_down(&t);
}

static void
test_stream_pauses_at_the_requests_high_water(void **state)
{
	struct tsrv t;
	char buf[2048];
	int fd, i;

	(void)state;
	/* The default mark (1 MiB): 64 KiB queued pauses nothing. */
	t_up(&t);
	fd = t_get(&t, "/stream", buf, sizeof(buf), sizeof(buf), 50);
	assert_int_equal(t.pauses, 0);
	close(fd);
	t_down(&t);
	/* A request's own mark of 1000 bytes: paused at once, resumed once
	 * the client has read what was queued. */
	t_up(&t);
	t.high_water = 1000;
	fd = t_get(&t, "/stream", buf, sizeof(buf), 0, 50);
	assert_int_equal(t.pauses, 1);
	for (i = 0; i < 2000 && t.resumes == 0; i++) {
		while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
			;
		event_base_loop(t.base, EVLOOP_NONBLOCK);
		usleep(1000);
	}
	assert_int_equal(t.resumes, 1);
	assert_int_equal(t.pauses, 1);
	close(fd);
	t_down(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_route_found_with_its_captures),
		cmocka_unit_test(test_wrong_method_gives_allow_in_table_order),
		cmocka_unit_test(test_unknown_path_is_404_not_405),
		cmocka_unit_test(test_prefix_route_takes_the_rest_of_the_path),
		cmocka_unit_test(test_overlong_segment_captured_empty),
		cmocka_unit_test(test_reason_phrases_are_rfc9110),
		cmocka_unit_test(test_histogram_is_cumulative),
		cmocka_unit_test(
		    test_drain_ends_once_nothing_is_in_flight_or_grace_is_over),
		cmocka_unit_test(test_reply_body_sends_its_type_and_flags),
		cmocka_unit_test(test_stream_pauses_at_the_requests_high_water),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
