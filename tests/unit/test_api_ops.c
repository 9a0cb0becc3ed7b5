/* test_api_ops.c - sandbox-api operations: SIGTERM drain with shutdown_grace, /metrics (counts, auth, promtool), stop_reason pass-through. */
#include "api_testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "driver_broker.h"
#include "driver_fake.h"

#define PROMTOOL "/usr/bin/promtool"
#define EXEC_X "{\"argv\":[\"x\"]}"

static char KA[64], KB[64], KOP[64];   /* players alice and bob, operator op1 */

static const struct sbx_fake_stats *
stats(void)
{
	return sbx_fake_stats(T.drv);
}

/* Member k of j as a string; "(not a string)" otherwise. */
static const char *
str_member(json_t *j, const char *k)
{
	json_t *v = json_object_get(j, k);

	return json_is_string(v) ? json_string_value(v) : "(not a string)";
}

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
execs_live(void *arg)
{
	(void)arg;
	return stats()->execs_live > 0;
}

static int
body_has(void *arg)
{
	struct tu_res *r = arg;
	size_t n = evbuffer_get_length(r->body);

	return n > 0 && memmem(evbuffer_pullup(r->body, -1), n,
	    "event: stdout", 13) != NULL;
}

static int drain_called;
static int64_t drained_at;

static void
drain_done(void *arg)
{
	(void)arg;
	drain_called++;
	drained_at = mono_ms();
}

static int
drained(void *arg)
{
	(void)arg;
	return drain_called > 0;
}

/* ------------------------------------------------------------------ */
/* A raw keep-alive connection (the in-loop client opens one per request) */

/* Sends one request on fd and reads its answer (up to 3 s) into buf. */
static void
raw_request(int fd, const char *req, char *buf, size_t cap)
{
	size_t got = 0;
	ssize_t n;
	int waited = 0;

	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	buf[0] = '\0';
	while (waited < 3000 && got < cap - 1) {
		tu_spin(10);
		waited += 10;
		n = recv(fd, buf + got, cap - 1 - got, MSG_DONTWAIT);
		if (n > 0) {
			got += (size_t)n;
			buf[got] = '\0';
			if (strstr(buf, "\r\n\r\n") != NULL &&
			    strstr(buf, "}\n") != NULL)
				break;
		} else if (n == 0)
			break;
	}
}

/* ------------------------------------------------------------------ */
/* Metrics helpers                                                      */

/* GET /metrics as the operator; the text (owned by r). */
static const char *
scrape(struct tu_res *r)
{
	assert_int_equal(tu_req(r, "GET", "/metrics", KOP, NULL), 200);
	return tu_text(r);
}

/* Value of the sample named exactly series (name{labels}), -1 if absent. */
static double
metric(const char *text, const char *series)
{
	size_t n = strlen(series);
	const char *p = text;

	while (p != NULL && *p != '\0') {
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
		if ((p = strchr(p, '\n')) != NULL)
			p++;
	}
	return -1;
}

/* Runs promtool check metrics on text; returns its exit status, and its
 * complaints in out. */
static int
promtool_check(const char *text, char *out, size_t cap)
{
	char path[] = "/tmp/sbx-api-metrics.XXXXXX", cmd[256];
	FILE *p;
	size_t got;
	int fd, st;

	assert_int_equal(access(PROMTOOL, X_OK), 0);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	snprintf(cmd, sizeof(cmd), PROMTOOL " check metrics < %s 2>&1", path);
	p = popen(cmd, "r");
	assert_non_null(p);
	got = fread(out, 1, cap - 1, p);
	out[got] = '\0';
	st = pclose(p);
	unlink(path);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ------------------------------------------------------------------ */
/* Drain                                                                */

static void
test_grace_over_ends_an_open_exec_stream_with_shutting_down(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "up\n" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct tu_res r = { 0 };
	const char *t;
	int64_t t0;

	(void)state;
	tu_set("shutdown_grace", "300ms");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 2), 0);
	drain_called = 0;
	tu_start_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA,
	    EXEC_X, strlen(EXEC_X));
	assert_true(tu_loop_until(body_has, &r, 3000));
	t0 = mono_ms();
	api_server_drain(T.srv, drain_done, NULL);
	/* Within the grace period the stream stays open. */
	tu_spin(150);
	assert_false(r.done);
	assert_int_equal(drain_called, 0);
	assert_int_equal(stats()->exec_cancels, 0);
	/* Then it ends with the reason, and the exec is cancelled. */
	assert_true(tu_loop_until(tu_is_done, &r, 3000));
	assert_true(mono_ms() - t0 >= 290);
	assert_false(r.failed);
	t = tu_text(&r);
	assert_non_null(strstr(t, "id: 2\nevent: stdout\ndata: "
	    "{\"data\":\"up\\n\"}\n\n"));
	assert_non_null(strstr(t, "id: 3\nevent: error\ndata: "
	    "{\"code\":\"shutting_down\",\"message\":\"The api is shutting "
	    "down; the exec was cancelled.\"}\n\n"));
	assert_int_equal(stats()->exec_cancels, 1);
	assert_int_equal(stats()->execs_live, 0);
	assert_true(tu_loop_until(drained, NULL, 3000));
	assert_int_equal(drain_called, 1);
	assert_int_equal(api_server_inflight(T.srv), 0);
	tu_res_free(&r);
}

static void
test_drain_answers_503_on_an_open_connection_and_refuses_new_ones(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct tu_res r = { 0 }, s2 = { 0 };
	char buf[2048], req[256];
	int fd;

	(void)state;
	tu_set("shutdown_grace", "5s");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 1), 0);
	fd = tu_raw_connect();
	tu_start_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA,
	    EXEC_X, strlen(EXEC_X));
	assert_true(tu_loop_until(execs_live, NULL, 3000));
	drain_called = 0;
	api_server_drain(T.srv, drain_done, NULL);
	api_server_drain(T.srv, drain_done, NULL);   /* a second call: nothing */
	/* A request on a connection accepted before the drain: 503. */
	snprintf(req, sizeof(req), "GET /api/v1/npcs HTTP/1.1\r\nHost: x\r\n"
	    "Authorization: Bearer %s\r\n\r\n", KA);
	raw_request(fd, req, buf, sizeof(buf));
	assert_non_null(strstr(buf, "HTTP/1.1 503"));
	assert_non_null(strstr(buf, "\"code\":\"shutting_down\""));
	close(fd);
	/* A new connection is not accepted. */
	tu_start_req(&s2, "GET", "/healthz", NULL, NULL, 0);
	assert_true(tu_loop_until(tu_is_done, &s2, 3000));
	assert_true(s2.failed);
	assert_int_equal(drain_called, 0);
	/* The exec still runs (grace 5 s): end it from the client side. */
	assert_false(r.done);
	tu_res_free(&r);
	assert_true(tu_loop_until(drained, NULL, 3000));
	assert_int_equal(stats()->exec_cancels, 1);
	tu_res_free(&s2);
}

static void
test_grace_over_answers_a_request_waiting_for_the_broker_503(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	tu_set("shutdown_grace", "100ms");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	sbx_fake_set_delay_ms(T.drv, 10000);
	tu_start_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA, NULL, 0);
	tu_spin(50);
	assert_false(r.done);
	drain_called = 0;
	api_server_drain(T.srv, drain_done, NULL);
	assert_true(tu_loop_until(tu_is_done, &r, 3000));
	assert_int_equal(r.status, 503);
	assert_string_equal(tu_code(&r), "shutting_down");
	assert_int_equal(stats()->cancels, 1);
	assert_true(tu_loop_until(drained, NULL, 3000));
	tu_res_free(&r);
}

static void
test_drain_with_nothing_in_flight_is_done_at_once(void **state)
{
	int64_t t0;

	(void)state;
	tu_set("shutdown_grace", "10s");
	tu_start_fake(KA, KB, KOP);
	drain_called = 0;
	t0 = mono_ms();
	api_server_drain(T.srv, drain_done, NULL);
	assert_int_equal(drain_called, 0);    /* never synchronously */
	assert_true(tu_loop_until(drained, NULL, 3000));
	assert_true(drained_at - t0 < 1000);
}

/* ------------------------------------------------------------------ */
/* Metrics                                                              */

static void
test_metrics_needs_an_operator_key(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	tu_start_fake(KA, KB, KOP);
	assert_int_equal(tu_req(&r, "GET", "/metrics", NULL, NULL), 401);
	assert_string_equal(tu_code(&r), "unauthorized");
	assert_int_equal(tu_req(&r, "GET", "/metrics", "wrong-key-0123456789",
	    NULL), 401);
	assert_int_equal(tu_req(&r, "GET", "/metrics", KA, NULL), 403);
	assert_string_equal(tu_code(&r), "forbidden");
	assert_int_equal(tu_req(&r, "POST", "/metrics", KOP, "{}"), 405);
	assert_int_equal(tu_req(&r, "GET", "/metrics", KOP, NULL), 200);
	assert_string_equal(r.ctype, "text/plain; version=0.0.4; charset=utf-8");
	assert_non_null(strstr(tu_text(&r), "# TYPE sbx_api_http_requests_total "
	    "counter\n"));
	tu_res_free(&r);
}

static void
test_metrics_move_by_the_expected_amounts(void **state)
{
	static const struct sbx_fake_step ok[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "abc" },
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 2, .data = "de" },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	static const struct sbx_fake_step timeout[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "1234567" },
		{ .kind = SBX_FAKE_STEP_ERROR, .err_code = "timeout",
		    .err_message = "The exec ran out of time." },
	};
	static const struct sbx_fake_step hang[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "x" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct tu_res m0 = { 0 }, m1 = { 0 }, m2 = { 0 }, r = { 0 }, h = { 0 };
	const char *a, *b;
	double before_sum;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	a = scrape(&m0);
	assert_true(metric(a, "sbx_api_execs_started_total") == 0);
	assert_true(metric(a, "sbx_api_sse_clients") == 0);
	/* The scrape itself is in flight while it renders. */
	assert_true(metric(a, "sbx_api_http_requests_in_flight") == 1);
	assert_true(metric(a, "sbx_api_http_requests_total{route=\"npc.create\","
	    "code=\"201\"}") == 1);
	assert_true(metric(a, "sbx_api_http_requests_total{route=\"sandbox."
	    "ensure\",code=\"200\"}") == 1);
	before_sum = metric(a, "sbx_api_exec_duration_seconds_count");
	assert_true(before_sum == 0);

	/* Two execs with output, one that times out, one refused before
	 * it started, one 401, one 404, one file read of 10 bytes. */
	assert_int_equal(sbx_fake_set_exec_script(T.drv, ok, 3), 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, EXEC_X), 200);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, EXEC_X), 200);
	assert_int_equal(sbx_fake_set_exec_script(T.drv, timeout, 2), 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, EXEC_X), 200);
	assert_non_null(strstr(tu_text(&r), "event: error"));
	/* (conflict: a not_running would be woken and retried, adr/0033) */
	sbx_fake_fail_next(T.drv, SBX_FAKE_EXEC, SBX_E_CONFLICT, 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, EXEC_X), 409);
	sbx_fake_fail_next(T.drv, SBX_FAKE_STATUS, SBX_E_BROKER_UNAVAILABLE, 1);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 503);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", NULL, NULL), 401);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/ghost/sandbox", KA,
	    NULL), 404);
	assert_int_equal(tu_req(&r, "GET", "/nothing", NULL, NULL), 404);
	assert_int_equal(tu_req(&r, "GET", "/healthz", NULL, NULL), 200);
	assert_int_equal(sbx_fake_put_file(T.drv, "npc-alpha", "/work/f",
	    "0123456789", 10), 0);
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/f", KA, NULL), 200);

	/* One exec left open: gauges. */
	assert_int_equal(sbx_fake_set_exec_script(T.drv, hang, 2), 0);
	tu_start_req(&h, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA,
	    EXEC_X, strlen(EXEC_X));
	assert_true(tu_loop_until(body_has, &h, 3000));
	b = scrape(&m1);
	assert_true(metric(b, "sbx_api_execs_started_total") == 4);
	assert_true(metric(b, "sbx_api_execs_finished_total") == 3);
	assert_true(metric(b, "sbx_api_execs_running") == 1);
	assert_true(metric(b, "sbx_api_sse_clients") == 1);
	assert_true(metric(b, "sbx_api_http_requests_in_flight") == 2);
	assert_true(metric(b, "sbx_api_exec_duration_seconds_count") == 3);
	assert_true(metric(b, "sbx_api_exec_duration_seconds_bucket"
	    "{le=\"+Inf\"}") == 3);
	assert_true(metric(b, "sbx_api_exec_duration_seconds_bucket"
	    "{le=\"300\"}") == 3);
	assert_true(metric(b, "sbx_api_stream_bytes_total{stream=\"stdout\"}") ==
	    2 * 3 + 7 + 1);
	assert_true(metric(b, "sbx_api_stream_bytes_total{stream=\"stderr\"}") ==
	    2 * 2);
	assert_true(metric(b, "sbx_api_stream_bytes_total{stream=\"file\"}") ==
	    10);
	assert_true(metric(b, "sbx_api_broker_errors_total{code=\"timeout\"}") ==
	    1);
	assert_true(metric(b, "sbx_api_broker_errors_total{code=\"conflict\"}")
	    == 1);
	assert_true(metric(b, "sbx_api_broker_errors_total{code="
	    "\"broker_unavailable\"}") == 1);
	/* Streams count when they end: 3 execs of 200 so far, 1 refused. */
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"sandbox.exec\","
	    "code=\"200\"}") == 3);
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"sandbox.exec\","
	    "code=\"409\"}") == 1);
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"sandbox."
	    "status\",code=\"503\"}") == 1);
	/* 401 (before routing) and /nothing are "unknown"; an NPC not found
	 * has its route. */
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"unknown\","
	    "code=\"401\"}") == 1);
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"unknown\","
	    "code=\"404\"}") == 1);
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"sandbox."
	    "status\",code=\"404\"}") == 1);
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"healthz\","
	    "code=\"200\"}") == 1);
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"files.read\","
	    "code=\"200\"}") == 1);
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"metrics\","
	    "code=\"200\"}") == 1);
	/* No NPC name, path or principal in any label. */
	assert_null(strstr(b, "alpha"));
	assert_null(strstr(b, "/work"));
	assert_null(strstr(b, "alice"));

	/* The client goes away: the open exec is finished and cancelled. */
	tu_res_free(&h);
	tu_spin(50);
	b = scrape(&m2);
	assert_true(metric(b, "sbx_api_execs_finished_total") == 4);
	assert_true(metric(b, "sbx_api_execs_running") == 0);
	assert_true(metric(b, "sbx_api_sse_clients") == 0);
	assert_true(metric(b, "sbx_api_http_requests_total{route=\"sandbox.exec\","
	    "code=\"200\"}") == 4);
	assert_int_equal(stats()->exec_cancels, 1);
	tu_res_free(&m0);
	tu_res_free(&m1);
	tu_res_free(&m2);
	tu_res_free(&r);
}

static void
test_metrics_count_limit_rejections(void **state)
{
	static const struct sbx_fake_step hang[] = {
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct tu_res m = { 0 }, r = { 0 }, h = { 0 };
	const char *t;

	(void)state;
	tu_set("requests_per_minute", "5");
	tu_set("max_execs_per_principal", "1");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");                       /* 2 of alice's 5 */
	assert_int_equal(sbx_fake_set_exec_script(T.drv, hang, 1), 0);
	tu_start_req(&h, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA,
	    EXEC_X, strlen(EXEC_X));              /* 3 */
	assert_true(tu_loop_until(execs_live, NULL, 3000));
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, EXEC_X), 429);                    /* 4 */
	assert_string_equal(tu_code(&r), "too_many");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 200);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 429);
	assert_string_equal(tu_code(&r), "rate_limited");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 429);
	/* bob has his own bucket. */
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KB, NULL), 200);
	t = scrape(&m);
	assert_true(metric(t, "sbx_api_rate_limit_rejections_total"
	    "{limit=\"requests_per_minute\"}") == 2);
	assert_true(metric(t, "sbx_api_rate_limit_rejections_total"
	    "{limit=\"max_execs_per_principal\"}") == 1);
	assert_true(metric(t, "sbx_api_http_requests_total{route=\"npc.list\","
	    "code=\"429\"}") == 2);
	assert_true(metric(t, "sbx_api_http_requests_total{route=\"sandbox.exec\","
	    "code=\"429\"}") == 1);
	tu_res_free(&h);
	tu_res_free(&m);
	tu_res_free(&r);
}

static void
test_metrics_text_passes_promtool(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "abc" },
		{ .kind = SBX_FAKE_STEP_ERROR, .err_code = "timeout",
		    .err_message = "The exec ran out of time." },
	};
	struct tu_res m = { 0 }, r = { 0 };
	char out[4096];
	const char *t;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	/* Empty families first (only HELP and TYPE for some). */
	t = scrape(&m);
	if (promtool_check(t, out, sizeof(out)) != 0)
		fail_msg("promtool on a fresh server: %s\n%s", out, t);
	/* Then every family with samples. */
	tu_npc(KA, "alpha");
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 2), 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, EXEC_X), 200);
	sbx_fake_fail_next(T.drv, SBX_FAKE_STOP, SBX_E_BROKER_UNAVAILABLE, 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/stop",
	    KA, NULL), 503);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", NULL, NULL), 401);
	t = scrape(&m);
	assert_true(metric(t, "sbx_api_broker_errors_total{code=\"timeout\"}") ==
	    1);
	if (promtool_check(t, out, sizeof(out)) != 0)
		fail_msg("promtool: %s\n%s", out, t);
	/* promtool does fail on broken text (the check above means something). */
	assert_int_not_equal(promtool_check("# TYPE x counter\nx{a=\"1} 1\n",
	    out, sizeof(out)), 0);
	tu_res_free(&m);
	tu_res_free(&r);
}

/* ------------------------------------------------------------------ */
/* stop_reason                                                          */

static void
test_status_shows_stop_reason_operator_after_stop(void **state)
{
	struct tu_res r = { 0 };
	json_t *j;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"stop_reason\":null"));
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/stop",
	    KA, NULL), 200);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	j = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(j);
	assert_string_equal(str_member(j, "state"), "stopped");
	assert_string_equal(str_member(j, "stop_reason"), "operator");
	json_decref(j);
	/* Running again: no reason. */
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"stop_reason\":null"));
	tu_res_free(&r);
}

/* A scripted broker: every GET of a sandbox answers stopped, stop_reason
 * from the query of the test (broker_reason). */
static const char *broker_reason;
static int broker_hits;

static void
broker_cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer *out = evbuffer_new();

	(void)arg;
	broker_hits++;
	evbuffer_add_printf(out, "{\"id\":\"npc-alpha\",\"state\":\"stopped\","
	    "\"image\":\"img-a\",\"egress\":false,\"created_at\":1,"
	    "\"last_used_at\":2,\"stop_reason\":\"%s\"}", broker_reason);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "application/json");
	evhttp_send_reply(req, 200, "OK", out);
	evbuffer_free(out);
}

static void
test_status_passes_the_brokers_stop_reason_through(void **state)
{
	static const char *const reasons[] = { "idle", "oom", "exited",
	    "operator" };
	struct sbx_broker_config bc;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	struct sbx_driver *d;
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	struct sbx_err err;
	struct tu_res r = { 0 };
	char addr[64];
	json_t *j;
	size_t i;

	(void)state;
	http = evhttp_new(T.base);
	assert_non_null(http);
	evhttp_set_gencb(http, broker_cb, NULL);
	bound = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
	assert_non_null(bound);
	assert_int_equal(getsockname(evhttp_bound_socket_get_fd(bound),
	    (struct sockaddr *)&sin, &sl), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sin.sin_port));
	memset(&bc, 0, sizeof(bc));
	bc.address = addr;
	bc.token = "scripted-broker-token-0123";
	bc.token_len = strlen(bc.token);
	bc.header_timeout_ms = 3000;
	d = sbx_broker_driver_new(T.base, &bc, &err);
	assert_non_null(d);
	tu_start(d);
	tu_principal("alice", API_ROLE_PLAYER, KA);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KA,
	    "{\"name\":\"alpha\"}"), 201);
	broker_hits = 0;
	for (i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
		broker_reason = reasons[i];
		assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox",
		    KA, NULL), 200);
		j = json_loads(tu_text(&r), 0, NULL);
		assert_non_null(j);
		assert_string_equal(str_member(j, "state"), "stopped");
		assert_string_equal(str_member(j, "stop_reason"), reasons[i]);
		json_decref(j);
	}
	assert_int_equal(broker_hits, 4);
	tu_res_free(&r);
	api_server_free(T.srv);
	T.srv = NULL;
	evhttp_free(http);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_grace_over_ends_an_open_exec_stream_with_shutting_down,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_drain_answers_503_on_an_open_connection_and_refuses_new_ones,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_grace_over_answers_a_request_waiting_for_the_broker_503,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_drain_with_nothing_in_flight_is_done_at_once, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(test_metrics_needs_an_operator_key,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_metrics_move_by_the_expected_amounts, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_metrics_count_limit_rejections, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(test_metrics_text_passes_promtool,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_status_shows_stop_reason_operator_after_stop, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_status_passes_the_brokers_stop_reason_through, tu_up,
		    tu_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
