/* test_api_execs.c - resource execs of sandbox-api on the fake driver: durable log, resume, bounds, restart, tickets (ADR 0015). */
#include "api_testutil.h"

#include <sys/socket.h>

#include <malloc.h>

#include "driver_fake.h"

#if defined(__SANITIZE_ADDRESS__)
#define HEAP_COUNTED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAP_COUNTED 0
#endif
#endif
#ifndef HEAP_COUNTED
#define HEAP_COUNTED 1   /* mallinfo2() counts the heap (not under ASan) */
#endif

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

/* POST .../execs/ID/ticket as alice: the status; the ticket into tk
 * (>= 64 bytes) on 200. */
static int
ticket(const char *id, char *tk)
{
	struct tu_res r = { 0 };
	char path[160];
	json_t *j;
	int st;

	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/execs/%s/ticket",
	    id);
	st = tu_req(&r, "POST", path, KA, NULL);
	if (st == 200) {
		j = json_loads(tu_text(&r), 0, NULL);
		assert_non_null(j);
		snprintf(tk, 64, "%s", json_string_value(json_object_get(j,
		    "ticket")));
		json_decref(j);
	} else if (st == 429)
		assert_non_null(strstr(tu_text(&r), "\"too_many\""));
	tu_res_free(&r);
	return st;
}

/* Lines of file path (-1: no file). */
static int
lines_of(const char *path)
{
	size_t len, i;
	char *file = tu_slurp(path, &len);
	int n = 0;

	if (file == NULL)
		return -1;
	for (i = 0; i < len; i++)
		n += file[i] == '\n';
	free(file);
	return n;
}

static void
test_expired_tickets_are_pruned_and_live_ones_capped(void **state)
{
	char id[40], tk[64], first[64], path[256], q[128];
	int i, st;

	(void)state;
	tu_set("ticket_ttl", "3s");
	start();
	create(id);
	assert_true(tu_loop_until(ended_cond, id, 5000));
	snprintf(path, sizeof(path), "%s/execs/%s/tickets", T.dir, id);
	/* 64 live tickets per exec; the 65th waits for one to expire. */
	for (i = 0; i < 64; i++)
		assert_int_equal(ticket(id, i == 0 ? first : tk), 200);
	assert_int_equal(ticket(id, tk), 429);
	assert_int_equal(lines_of(path), 64);
	tu_spin(3200);
	/* Expired: refused, and the lookup dropped every expired one. */
	snprintf(q, sizeof(q), "?ticket=%s", first);
	free(events(id, q, NULL, &st));
	assert_int_equal(st, 401);
	assert_int_equal(lines_of(path), -1);
	/* The table shrank: a new ticket fits again, and it alone is kept. */
	assert_int_equal(ticket(id, tk), 200);
	assert_int_equal(lines_of(path), 1);
	snprintf(q, sizeof(q), "?ticket=%s", tk);
	free(events(id, q, NULL, &st));
	assert_int_equal(st, 200);
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

/* One exec of npc started with key (argv: a JSON array text) and run
 * to its end; its id into id (>= 40 bytes). */
static void
run_on(const char *npc, const char *key, const char *argv, char *id)
{
	struct tu_res r = { 0 };
	char path[160], *body;
	json_t *j;
	int i, st = 0;

	snprintf(path, sizeof(path), "/api/v1/npcs/%s/sandbox/execs", npc);
	if (asprintf(&body, "{\"argv\":%s}", argv) == -1)
		fail();
	assert_int_equal(tu_req(&r, "POST", path, key, body), 201);
	free(body);
	j = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(j);
	snprintf(id, 40, "%s", json_string_value(json_object_get(j, "exec_id")));
	json_decref(j);
	tu_res_free(&r);
	snprintf(path, sizeof(path), "/api/v1/npcs/%s/sandbox/execs/%s", npc, id);
	for (i = 0; i < 500; i++) {
		assert_int_equal(tu_req(&r, "GET", path, key, NULL), 200);
		j = json_loads(tu_text(&r), 0, NULL);
		st = strcmp(json_string_value(json_object_get(j, "state")),
		    "running") != 0;
		json_decref(j);
		tu_res_free(&r);
		if (st)
			break;
		tu_spin(5);
	}
	assert_true(st);
}

/* GET one exec of npc with key: the status, its body parsed into *out
 * (owned; NULL unless out). */
static int
get_on(const char *npc, const char *key, const char *id, json_t **out)
{
	struct tu_res r = { 0 };
	char path[160];
	int st;

	snprintf(path, sizeof(path), "/api/v1/npcs/%s/sandbox/execs/%s", npc, id);
	st = tu_req(&r, "GET", path, key, NULL);
	if (out != NULL)
		*out = json_loads(tu_text(&r), 0, NULL);
	tu_res_free(&r);
	return st;
}

/* The list of npc's execs (?limit=200), parsed (owned). */
static json_t *
list_on(const char *npc, const char *key)
{
	struct tu_res r = { 0 };
	char path[160];
	json_t *j;

	snprintf(path, sizeof(path), "/api/v1/npcs/%s/sandbox/execs?limit=200",
	    npc);
	assert_int_equal(tu_req(&r, "GET", path, key, NULL), 200);
	j = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(j);
	tu_res_free(&r);
	return j;
}

/* Bob's NPC m1 has nb execs, then alice's n1 runs na; bob's all answer
 * and list; of alice's, exactly the newest keep_a do. */
static void
crowd(int nb, int na, int keep_a)
{
	char bid[8][40], aid[64][40];
	json_t *l;
	int i;

	assert_true(nb <= 8 && na <= 64);
	tu_npc(KB, "m1");
	for (i = 0; i < nb; i++)
		run_on("m1", KB, "[\"b\"]", bid[i]);
	for (i = 0; i < na; i++)
		run_on("n1", KA, "[\"a\"]", aid[i]);
	tu_spin(50);   /* the bounds after the last end */
	for (i = 0; i < nb; i++)
		assert_int_equal(get_on("m1", KB, bid[i], NULL), 200);
	l = list_on("m1", KB);
	assert_int_equal(json_array_size(json_object_get(l, "execs")), nb);
	json_decref(l);
	for (i = 0; i < na; i++)
		assert_int_equal(get_on("n1", KA, aid[i], NULL),
		    i < na - keep_a ? 404 : 200);
	l = list_on("n1", KA);
	assert_int_equal(json_array_size(json_object_get(l, "execs")), keep_a);
	json_decref(l);
}

static void
test_the_records_cap_takes_the_heaviest_principals_oldest(void **state)
{
	(void)state;
	/* 3 + 20 records, 8 kept in all: alice, the heaviest, keeps 5. */
	tu_set("exec_records_max", "8");
	start();
	crowd(3, 20, 5);
}

static void
test_each_principal_keeps_its_own_share_of_records(void **state)
{
	(void)state;
	tu_set("exec_records_per_principal", "4");
	start();
	crowd(2, 10, 4);
}

/* Log bytes: bob's one exec of about 330 KiB of log, then alice's five;
 * bob's log is whole; alice's oldest lost theirs (why: "removed"),
 * the newest keep_a kept theirs. */
static void
crowd_logs(int keep_a, const char *why)
{
	static char big[65536];
	struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = big,
		    .len = sizeof(big), .repeat = 5 },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	char bid[40], aid[5][40];
	json_t *j, *log;
	int i;

	memset(big, 'b', sizeof(big));
	start();
	assert_int_equal(sbx_fake_set_exec_script(T.drv, steps, 2), 0);
	tu_npc(KB, "m1");
	run_on("m1", KB, "[\"b\"]", bid);
	for (i = 0; i < 5; i++)
		run_on("n1", KA, "[\"a\"]", aid[i]);
	tu_spin(50);
	assert_int_equal(get_on("m1", KB, bid, &j), 200);
	log = json_object_get(j, "log");
	assert_true(json_is_null(json_object_get(log, "removed")));
	assert_true(json_integer_value(json_object_get(log, "bytes")) >
	    5 * 65536);
	json_decref(j);
	for (i = 0; i < 5; i++) {
		assert_int_equal(get_on("n1", KA, aid[i], &j), 200);
		log = json_object_get(j, "log");
		if (i < 5 - keep_a)
			assert_string_equal(json_string_value(json_object_get(log,
			    "removed")), why);
		else
			assert_true(json_is_null(json_object_get(log, "removed")));
		json_decref(j);
	}
}

static void
test_the_log_total_takes_the_heaviest_principals_oldest(void **state)
{
	(void)state;
	/* 6 logs of ~330 KiB, 1 MiB in all: bob's and alice's newest 2. */
	tu_set("exec_log_max", "1m");
	tu_set("exec_log_total", "1m");
	crowd_logs(2, "total_cap");
}

static void
test_each_principal_keeps_its_own_share_of_log_bytes(void **state)
{
	(void)state;
	tu_set("exec_log_max", "1m");
	tu_set("exec_log_per_principal", "1m");
	crowd_logs(3, "principal_cap");
}

static void
test_a_record_holds_an_argv_preview_and_get_one_the_whole_argv(void **state)
{
	static char arg[200001];
	size_t mem0 = 0, mem1;
	char id[40], *argv, path[256], *meta;
	const char *pv;
	json_t *l, *item, *j;
	size_t len;
	int i;

	(void)state;
	tu_set("requests_per_minute", "100000");
	start();
	/* "é" repeated: the 256-byte cut falls inside a character. */
	for (i = 0; i < 200000; i += 2) {
		arg[i] = (char)0xc3;
		arg[i + 1] = (char)0xa9;
	}
	if (asprintf(&argv, "[\"sh\",\"-c\",\"%s\"]", arg) == -1)
		fail();
	run_on("n1", KA, argv, id);
	l = list_on("n1", KA);
	item = json_array_get(json_object_get(l, "execs"), 0);
	assert_null(json_object_get(item, "argv"));
	assert_true(json_is_true(json_object_get(item, "argv_truncated")));
	pv = json_string_value(json_object_get(item, "argv_preview"));
	assert_non_null(pv);
	assert_true(strlen(pv) <= 256 && strlen(pv) >= 250);
	assert_int_equal(strncmp(pv, "sh -c \xc3\xa9", 8), 0);
	assert_int_equal((unsigned char)pv[strlen(pv) - 1], 0xa9);
	/* GET one: the same preview and the whole argv, also after a
	 * restart (read from the record on disk). */
	for (i = 0; i < 2; i++) {
		assert_int_equal(get_on("n1", KA, id, &j), 200);
		assert_string_equal(json_string_value(json_object_get(j,
		    "argv_preview")), pv);
		assert_int_equal(json_array_size(json_object_get(j, "argv")), 3);
		assert_string_equal(json_string_value(json_array_get(
		    json_object_get(j, "argv"), 2)), arg);
		json_decref(j);
		if (i == 0)
			restart();
	}
	json_decref(l);
	snprintf(path, sizeof(path), "%s/execs/%s/meta.json", T.dir, id);
	meta = tu_slurp(path, &len);
	assert_non_null(meta);
	assert_true(len < 4096);
	free(meta);
	/* 40 more such records grow the heap by their previews, not by
	 * their argv (40 x 200 KB = 8 MB before ADR 0043). */
	if (HEAP_COUNTED)
		mem0 = mallinfo2().uordblks;
	for (i = 0; i < 40; i++)
		run_on("n1", KA, argv, id);
	if (HEAP_COUNTED) {
		mem1 = mallinfo2().uordblks;
		print_message("# heap growth for 40 records: %zu bytes\n",
		    mem1 > mem0 ? mem1 - mem0 : 0);
		assert_true(mem1 < mem0 + 1024 * 1024);
	}
	free(argv);
}

/* Runs one turn of the loop; then, once, what fd has to read into buf
 * (cap bytes, NUL-terminated). */
static void
turn_and_read(int fd, char *buf, size_t cap, size_t *len)
{
	ssize_t n;

	event_base_loop(T.base, EVLOOP_ONCE);
	while (*len + 1 < cap && (n = recv(fd, buf + *len, cap - 1 - *len,
	    MSG_DONTWAIT)) > 0)
		*len += (size_t)n;
	buf[*len] = '\0';
}

static void
test_a_long_list_lets_others_through_and_keeps_its_bytes(void **state)
{
	/* A preview with bytes JSON escapes, UTF-8 and a '/' */
	static const char argv[] = "[\"sh\",\"-c\",\"say \\\"hi\\\" \\\\ "
	    "\\u0001 \\u00e9 </b>\"]";
	static char ids[201][40];
	struct tu_res l = { 0 }, r = { 0 };
	struct evbuffer *exp;
	char req[256], got[4096];
	size_t len = 0;
	int b, i, turns, bob_first = 0;
	json_t *j;
	char *t;

	(void)state;
	tu_set("requests_per_minute", "100000");
	tu_set("exec_records_per_principal", "300");
	start();
	for (i = 0; i < 201; i++)
		run_on("n1", KA, argv, ids[i]);
	tu_spin(50);   /* the bounds after the last end */
	b = tu_raw_connect();
	/* The list of 200 is in flight after the turn that took it: its
	 * first slice is encoded, nothing is sent yet. */
	tu_start_req(&l, "GET", "/api/v1/npcs/n1/sandbox/execs?limit=200", KA,
	    NULL, 0);
	for (turns = 0; !l.done && api_server_inflight(T.srv) == 0 &&
	    turns < 100000; turns++)
		event_base_loop(T.base, EVLOOP_ONCE);
	assert_false(l.done);
	assert_int_equal(api_server_inflight(T.srv), 1);
	/* Bob asks on his own connection: answered between two slices, before
	 * the list is done. */
	snprintf(req, sizeof(req), "GET /api/v1/whoami HTTP/1.1\r\nHost: t\r\n"
	    "Authorization: Bearer %s\r\n\r\n", KB);
	assert_int_equal(write(b, req, strlen(req)), (ssize_t)strlen(req));
	for (turns = 0; !l.done && turns < 100000; turns++) {
		turn_and_read(b, got, sizeof(got), &len);
		if (strstr(got, "\"bob\"") != NULL && !l.done)
			bob_first = 1;
	}
	assert_true(tu_loop_until(tu_is_done, &l, 5000));
	print_message("# bob answered before the list ended: %d; %d turns\n",
	    bob_first, turns);
	assert_int_equal(strncmp(got, "HTTP/1.1 200", 12), 0);
	assert_true(bob_first);
	assert_int_equal(l.status, 200);
	/* The same bytes as the one-piece encoding: each item as GET one
	 * encodes the exec, less its argv; newest first; next names the
	 * 200th, since one more follows. */
	exp = evbuffer_new();
	evbuffer_add_printf(exp, "{\"execs\":[");
	for (i = 200; i >= 1; i--) {
		assert_int_equal(get_on("n1", KA, ids[i], &j), 200);
		assert_int_equal(json_object_del(j, "argv"), 0);
		t = json_dumps(j, JSON_COMPACT);
		evbuffer_add_printf(exp, "%s%s", i < 200 ? "," : "", t);
		free(t);
		json_decref(j);
	}
	evbuffer_add_printf(exp, "],\"next\":\"%s\"}\n", ids[1]);
	evbuffer_add(exp, "", 1);
	assert_string_equal(tu_text(&l), (const char *)evbuffer_pullup(exp,
	    -1));
	evbuffer_free(exp);
	tu_res_free(&l);
	/* A client that leaves mid-list: its request ends, the api goes on. */
	tu_start_req(&l, "GET", "/api/v1/npcs/n1/sandbox/execs?limit=200", KA,
	    NULL, 0);
	for (turns = 0; api_server_inflight(T.srv) == 0 && turns < 100000;
	    turns++)
		event_base_loop(T.base, EVLOOP_ONCE);
	tu_res_free(&l);
	tu_spin(50);
	assert_int_equal(api_server_inflight(T.srv), 0);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/whoami", KA, NULL), 200);
	tu_res_free(&r);
	close(b);
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
		    test_expired_tickets_are_pruned_and_live_ones_capped, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_long_utf8_output_is_split_between_characters, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_the_records_cap_takes_the_heaviest_principals_oldest,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_each_principal_keeps_its_own_share_of_records, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_the_log_total_takes_the_heaviest_principals_oldest,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_each_principal_keeps_its_own_share_of_log_bytes, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_a_record_holds_an_argv_preview_and_get_one_the_whole_argv,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_a_long_list_lets_others_through_and_keeps_its_bytes,
		    tu_up, tu_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
