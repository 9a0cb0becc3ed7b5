/* test_api_execs.c - resource execs of sandbox-api on the fake driver: durable log, resume, bounds, restart, tickets (ADR 0015). */
#include "api_testutil.h"

#include <sys/socket.h>

#include "driver_fake.h"

static char KA[SBX_TOKEN_GEN_LEN + 1];
static char KB[SBX_TOKEN_GEN_LEN + 1];

static void
start(void)
{
	struct sbx_driver *fake = sbx_fake_driver_new(T.base);
	struct tu_res r = { 0 };

	assert_non_null(fake);
	tu_start(fake);
	tu_principal("alice", API_ROLE_PLAYER, KA);
	tu_principal("bob", API_ROLE_PLAYER, KB);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KA,
	    "{\"name\":\"n1\"}"), 201);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/n1/sandbox", KA, NULL),
	    200);
	tu_res_free(&r);
}

/* The api again on the same state dir and driver (a restart). */
static void
restart(void)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	api_server_free(T.srv);
	T.srv = api_server_new(T.base, &T.cfg, T.drv, &err);
	if (T.srv == NULL)
		fail_msg("api_server_new: %s", err.message);
	T.port = api_server_port(T.srv);
}

/* POST .../execs; the exec id into id (>= 40 bytes). */
static void
create(char *id)
{
	struct tu_res r = { 0 };
	json_t *j;

	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/execs", KA,
	    "{\"argv\":[\"x\"]}"), 201);
	j = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(j);
	snprintf(id, 40, "%s", json_string_value(json_object_get(j, "exec_id")));
	assert_int_equal(strlen(id), 25);
	json_decref(j);
	tu_res_free(&r);
}

/* GET .../execs/ID; returns the parsed status (owned). */
static json_t *
status(const char *id)
{
	struct tu_res r = { 0 };
	char path[160];
	json_t *j;

	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/execs/%s", id);
	assert_int_equal(tu_req(&r, "GET", path, KA, NULL), 200);
	j = json_loads(tu_text(&r), 0, NULL);
	tu_res_free(&r);
	assert_non_null(j);
	return j;
}

static int
ended_cond(void *arg)
{
	json_t *j = status(arg);
	int e = strcmp(json_string_value(json_object_get(j, "state")),
	    "running") != 0;

	json_decref(j);
	return e;
}

/* The events body after query q ("" or "?last_event_id=N"), owned. */
static char *
events(const char *id, const char *q, const char *key, int *st)
{
	struct tu_res r = { 0 };
	char path[256], *out;

	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/execs/%s/events%s",
	    id, q);
	*st = tu_req(&r, "GET", path, key, NULL);
	out = strdup(tu_text(&r));
	tu_res_free(&r);
	return out;
}

static void
test_log_replays_resumes_and_survives_a_restart(void **state)
{
	struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "line\n",
		    .repeat = 30 },
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 2, .data = "\xff\xfe" },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 3 },
	};
	char id[40], *all, *tail, *again, *p;
	json_t *j;
	int st;

	(void)state;
	start();
	assert_int_equal(sbx_fake_set_exec_script(T.drv, steps, 3), 0);
	create(id);
	assert_true(tu_loop_until(ended_cond, id, 5000));
	all = events(id, "", KA, &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(all, "retry: 2000\n\n"));
	assert_non_null(strstr(all, "id: 1\nevent: start\n"));
	assert_non_null(strstr(all, "id: 33\nevent: exit\ndata: {\"code\":3,"));
	assert_null(strstr(all, "id: 34\n"));
	/* After id 31: exactly events 32 and 33. */
	tail = events(id, "?last_event_id=31", KA, &st);
	assert_int_equal(st, 200);
	p = strstr(all, "id: 32\n");
	assert_non_null(p);
	assert_string_equal(tail + strlen("retry: 2000\n\n"), p);
	free(tail);
	/* After the last: 204. Malformed, unknown: 400. */
	free(events(id, "?last_event_id=33", KA, &st));
	assert_int_equal(st, 204);
	free(events(id, "?last_event_id=34", KA, &st));
	assert_int_equal(st, 400);
	free(events(id, "?last_event_id=1x", KA, &st));
	assert_int_equal(st, 400);
	/* Another player: 404. */
	free(events(id, "", KB, &st));
	assert_int_equal(st, 404);
	restart();
	again = events(id, "", KA, &st);
	assert_int_equal(st, 200);
	assert_string_equal(again, all);
	j = status(id);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "exited");
	assert_int_equal(json_integer_value(json_object_get(j, "exit_code")), 3);
	assert_int_equal(json_integer_value(json_object_get(j, "bytes_out")),
	    30 * 5 + 2);
	json_decref(j);
	free(again);
	free(all);
}

static int
has_output(void *arg)
{
	json_t *j = status(arg);
	int ok = json_integer_value(json_object_get(j, "bytes_out")) > 0;

	json_decref(j);
	return ok;
}

static void
test_running_exec_ends_failed_when_the_api_stops(void **state)
{
	struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "up\n" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	char id[40], *all;
	json_t *j;
	int st;

	(void)state;
	start();
	assert_int_equal(sbx_fake_set_exec_script(T.drv, steps, 2), 0);
	create(id);
	assert_true(tu_loop_until(has_output, id, 5000));
	restart();
	j = status(id);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "failed");
	assert_non_null(strstr(json_string_value(json_object_get(j, "reason")),
	    "shutting_down"));
	json_decref(j);
	all = events(id, "", KA, &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(all, "id: 2\nevent: stdout\n"));
	assert_non_null(strstr(all, "id: 3\nevent: error\ndata: {\"code\":"
	    "\"shutting_down\""));
	free(all);
}

static void
test_log_cap_drops_the_oldest_events_with_a_reset(void **state)
{
	static char big[65536];
	struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = big,
		    .len = sizeof(big), .repeat = 40 },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	char id[40], *all;
	json_t *j, *log;
	int st;

	(void)state;
	memset(big, 'b', sizeof(big));
	tu_set("exec_log_max", "1m");
	start();
	assert_int_equal(sbx_fake_set_exec_script(T.drv, steps, 2), 0);
	create(id);
	assert_true(tu_loop_until(ended_cond, id, 10000));
	j = status(id);
	log = json_object_get(j, "log");
	assert_true(json_integer_value(json_object_get(log, "bytes")) <=
	    1024 * 1024);
	assert_true(json_integer_value(json_object_get(log, "dropped_bytes")) >
	    40 * 65536 - 1024 * 1024);
	assert_true(json_is_true(json_object_get(log, "output_dropped")));
	assert_int_equal(json_integer_value(json_object_get(j, "bytes_out")),
	    40 * 65536);
	json_decref(j);
	all = events(id, "?last_event_id=1", KA, &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(all, "event: reset\ndata: {\"reason\":\"dropped\""));
	assert_non_null(strstr(all, "event: exit\n"));
	free(all);
}

static void
test_tickets_are_per_exec_and_never_stored_plain(void **state)
{
	char id[40], id2[40], path[256], *body, *file;
	struct tu_res r = { 0 };
	json_t *j;
	const char *tk;
	size_t len;
	int st;

	(void)state;
	start();
	create(id);
	create(id2);
	assert_true(tu_loop_until(ended_cond, id, 5000));
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/execs/%s/ticket",
	    id);
	assert_int_equal(tu_req(&r, "POST", path, KA, NULL), 200);
	j = json_loads(tu_text(&r), 0, NULL);
	tk = json_string_value(json_object_get(j, "ticket"));
	assert_non_null(tk);
	snprintf(path, sizeof(path), "?ticket=%s", tk);
	body = events(id, path, NULL, &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(body, "event: exit"));
	free(body);
	free(events(id2, path, NULL, &st));
	assert_int_equal(st, 401);
	free(events(id, "?ticket=nope", NULL, &st));
	assert_int_equal(st, 401);
	snprintf(path, sizeof(path), "%s/execs/%s/tickets", T.dir, id);
	file = tu_slurp(path, &len);
	assert_non_null(file);
	assert_null(memmem(file, len, tk, strlen(tk)));
	free(file);
	json_decref(j);
	tu_res_free(&r);
}

static void
test_long_utf8_output_is_split_between_characters(void **state)
{
	static char text[70001];
	struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = text,
		    .len = 70000 },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	char id[40], *all;
	size_t i;
	int st;

	(void)state;
	/* 'a' then "é" (2 bytes) repeated: a 64 KiB cut falls inside one. */
	text[0] = 'a';
	for (i = 1; i + 1 < 70000; i += 2) {
		text[i] = (char)0xc3;
		text[i + 1] = (char)0xa9;
	}
	text[69999] = 'z';
	start();
	assert_int_equal(sbx_fake_set_exec_script(T.drv, steps, 2), 0);
	create(id);
	assert_true(tu_loop_until(ended_cond, id, 5000));
	all = events(id, "", KA, &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(all, "id: 2\nevent: stdout\ndata: {\"data\":\"a"));
	assert_non_null(strstr(all, "id: 3\nevent: stdout\ndata: {\"data\":\""));
	assert_null(strstr(all, "data_b64"));
	free(all);
}

static void
test_a_viewer_that_stops_reading_is_cut_off_alone(void **state)
{
	static char chunk[64 * 1024];
	struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = chunk,
		    .len = sizeof(chunk), .repeat = 64 },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	char id[40], req[512], buf[4096], *all, *log;
	size_t len;
	ssize_t n;
	int fd, st, i, gone = 0;

	(void)state;
	memset(chunk, 'a', sizeof(chunk));
	tu_set("viewer_stall", "1s");
	start();
	assert_int_equal(sbx_fake_set_exec_script(T.drv, steps, 2), 0);
	create(id);
	assert_true(tu_loop_until(ended_cond, id, 10000));
	/* A viewer of the 4 MiB log that reads nothing: once its queue is
	 * over the high-water mark for viewer_stall, it is cut off. */
	fd = tu_raw_connect();
	snprintf(req, sizeof(req), "GET /api/v1/npcs/n1/sandbox/execs/%s/events"
	    " HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n\r\n", id, KA);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	tu_spin(2500);
	log = tu_slurp(T.logpath, &len);
	assert_non_null(log);
	assert_non_null(strstr(log, "exec viewer stalled; cut off"));
	free(log);
	/* What it gets now is what was queued, then the end: far less than
	 * the log. */
	for (i = 0, len = 0; i < 500 && !gone; i++) {
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0)
			len += (size_t)n;
		else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			gone = 1;
		else
			tu_spin(10);
	}
	assert_true(gone);
	assert_true(len < (size_t)2 * 1024 * 1024);
	close(fd);
	/* Another viewer that reads gets every event up to the exit. */
	all = events(id, "?follow=0", KA, &st);
	assert_int_equal(st, 200);
	assert_non_null(strstr(all, "event: exit\n"));
	free(all);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_a_viewer_that_stops_reading_is_cut_off_alone, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_log_replays_resumes_and_survives_a_restart, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_running_exec_ends_failed_when_the_api_stops, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_log_cap_drops_the_oldest_events_with_a_reset, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_tickets_are_per_exec_and_never_stored_plain, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_long_utf8_output_is_split_between_characters, tu_up,
		    tu_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
