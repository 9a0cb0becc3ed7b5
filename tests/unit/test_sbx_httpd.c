/* test_sbx_httpd.c - the HTTP server core's route lookup (captures, 405 Allow, 404), its one error-header table and reason phrases (adr/0022). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_route_found_with_its_captures),
		cmocka_unit_test(test_wrong_method_gives_allow_in_table_order),
		cmocka_unit_test(test_unknown_path_is_404_not_405),
		cmocka_unit_test(test_overlong_segment_captured_empty),
		cmocka_unit_test(test_reason_phrases_are_rfc9110),
		cmocka_unit_test(test_histogram_is_cumulative),
		cmocka_unit_test(
		    test_drain_ends_once_nothing_is_in_flight_or_grace_is_over),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
