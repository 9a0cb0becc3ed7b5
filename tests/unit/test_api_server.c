/* test_api_server.c - sandbox-api over real sockets on 127.0.0.1:0 with the fake driver: auth, ownership, egress, SSE, limits. */
#include "api_testutil.h"

#include "driver_fake.h"
#include "sbx_ndjson.h"
#include "sbx_sse.h"
#include "sbx_token.h"

#define EXEC_SLEEP "{\"argv\":[\"sleep\",\"100\"]}"
#define EXEC_YES "{\"argv\":[\"yes\"]}"

static char KA[64], KB[64], KOP[64];   /* player alice, player bob, operator */

static const struct sbx_fake_stats *
stats(void)
{
	return sbx_fake_stats(T.drv);
}

/* ------------------------------------------------------------------ */

static void
test_missing_wrong_and_revoked_keys_get_401(void **state)
{
	struct tu_res r = { 0 };
	struct api_store *st;
	struct sbx_err err;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", NULL, NULL), 401);
	assert_string_equal(tu_code(&r), "unauthorized");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs",
	    "not-a-key-at-all-but-long-enough", NULL), 401);
	/* A key one character off. */
	KA[5] = KA[5] == 'A' ? 'B' : 'A';
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 401);
	KA[5] = 0;
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", NULL,
	    "{\"name\":\"x\"}"), 401);
	/* Unknown routes answer 401 too: nothing is revealed before auth. */
	assert_int_equal(tu_req(&r, "GET", "/api/v1/nope", NULL, NULL), 401);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KB, NULL), 200);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/whoami", KB, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"bob\""));

	st = api_store_open(T.dir, &err);
	assert_non_null(st);
	assert_int_equal(api_store_principal_revoke(st, "bob", &err), 0);
	api_store_close(st);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KB, NULL), 401);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KOP, NULL), 200);
	tu_res_free(&r);
}

/* Every route on another player's NPC answers exactly as for an absent NPC. */
static void
test_player_b_gets_404_on_every_route_of_player_a(void **state)
{
	static const struct {
		const char *method, *suffix, *body;
	} routes[] = {
		{ "PUT", "/sandbox", NULL },
		{ "GET", "/sandbox", NULL },
		{ "GET", "/sandbox?usage=1", NULL },
		{ "DELETE", "/sandbox", NULL },
		{ "POST", "/sandbox/exec", "{\"argv\":[\"true\"]}" },
		{ "GET", "/sandbox/files?path=/work/a", NULL },
		{ "PUT", "/sandbox/files?path=/work/a", "x" },
		{ "GET", "/sandbox/list?path=/work", NULL },
		{ "POST", "/sandbox/stop", NULL },
		{ "PUT", "/egress", "{\"enabled\":true}" },
	};
	struct tu_res r = { 0 }, absent = { 0 };
	unsigned before[SBX_FAKE_NOPS];
	char path[128];
	size_t i;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	memcpy(before, stats()->calls, sizeof(before));
	for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		snprintf(path, sizeof(path), "/api/v1/npcs/alpha%s",
		    routes[i].suffix);
		assert_int_equal(tu_req(&r, routes[i].method, path, KB,
		    routes[i].body), 404);
		snprintf(path, sizeof(path), "/api/v1/npcs/nosuch%s",
		    routes[i].suffix);
		assert_int_equal(tu_req(&absent, routes[i].method, path, KB,
		    routes[i].body), 404);
		assert_string_equal(tu_text(&r), tu_text(&absent));
	}
	/* Nothing reached the driver. */
	assert_memory_equal(before, stats()->calls, sizeof(before));
	/* bob's list does not show alpha; alice's and the operator's do. */
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KB, NULL), 200);
	assert_string_equal(tu_text(&r), "[]\n");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"alpha\""));
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KOP,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"running\""));
	tu_res_free(&r);
	tu_res_free(&absent);
}

struct audit_find {
	const char *principal, *action, *npc, *outcome;
	int found;
};

static void
audit_cb(void *arg, const struct api_audit_row *row)
{
	struct audit_find *f = arg;

	if (strcmp(row->principal, f->principal) == 0 &&
	    strcmp(row->action, f->action) == 0 &&
	    strcmp(row->npc, f->npc) == 0 &&
	    strcmp(row->outcome, f->outcome) == 0 && row->ts > 0)
		f->found++;
}

static int
audit_has(const char *principal, const char *action, const char *npc,
    const char *outcome)
{
	struct audit_find f = { principal, action, npc, outcome, 0 };
	struct api_store *st;
	struct sbx_err err;

	st = api_store_open(T.dir, &err);
	assert_non_null(st);
	assert_int_equal(api_store_audit_list(st, audit_cb, &f, &err), 0);
	api_store_close(st);
	return f.found;
}

static void
test_player_egress_is_403_and_changes_nothing(void **state)
{
	struct tu_res r = { 0 };
	unsigned ensures;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	ensures = stats()->calls[SBX_FAKE_ENSURE];
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KA,
	    "{\"enabled\":true}"), 403);
	assert_string_equal(tu_code(&r), "forbidden");
	assert_non_null(strstr(tu_text(&r), "granted by an operator"));
	assert_non_null(strstr(tu_text(&r), "sbxctl egress grant alpha"));
	/* Sneaking egress into ensure is refused the same way. */
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    "{\"egress\":true}"), 403);
	assert_non_null(strstr(tu_text(&r), "granted by an operator"));
	assert_int_equal(stats()->calls[SBX_FAKE_ENSURE], ensures);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"egress\":false"));
	assert_non_null(strstr(tu_text(&r), "\"egress_granted\":false"));
	assert_int_equal(audit_has("alice", "egress", "alpha", "forbidden"), 1);
	tu_res_free(&r);
}

static void
test_operator_grant_ensures_with_egress_and_is_audited(void **state)
{
	struct tu_res r = { 0 };
	unsigned created;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	created = stats()->containers_created;
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":true}"), 200);
	assert_non_null(strstr(tu_text(&r), "\"egress\":true"));
	assert_non_null(strstr(tu_text(&r), "\"applied\":true"));
	/* The container was replaced through ensure with egress on. */
	assert_int_equal(stats()->containers_created, created + 1);
	assert_non_null(strstr(tu_text(&r), "\"change\":\"replaced\""));
	/* Only the allowlist changes: the sandbox stays, only its proxy is
	 * started again, and the answer says so (a newcomer was told
	 * "sandbox replaced" for a vm sandbox that stayed). */
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":true,\"allow\":[\"a.test\"]}"), 200);
	assert_int_equal(stats()->containers_created, created + 1);
	assert_non_null(strstr(tu_text(&r), "\"change\":\"proxy\""));
	/* The same grant again: nothing to change. */
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":true,\"allow\":[\"a.test\"]}"), 200);
	assert_non_null(strstr(tu_text(&r), "\"change\":\"none\""));
	/* Full egress as ["*"] (the fake keeps its container where the
	 * engine would replace it), then absent: the same grant, stored as no
	 * allowlist both times. */
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":true,\"allow\":[\"*\"]}"), 200);
	assert_non_null(strstr(tu_text(&r), "\"change\":\"proxy\""));
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":true}"), 200);
	assert_non_null(strstr(tu_text(&r), "\"change\":\"none\""));
	assert_int_equal(audit_has("op1", "egress.grant", "alpha", "ok"), 5);
	/* The grant is stored with who and when, and later ensures keep it. */
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"egress\":true"));
	assert_non_null(strstr(tu_text(&r), "\"egress_by\":\"op1\""));
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"egress\":true"));
	assert_int_equal(stats()->containers_created, created + 1);
	/* Revoke. */
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":false}"), 200);
	assert_non_null(strstr(tu_text(&r), "\"egress\":false"));
	assert_non_null(strstr(tu_text(&r), "\"change\":\"replaced\""));
	assert_int_equal(audit_has("op1", "egress.revoke", "alpha", "ok"), 1);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":1}"), 400);
	assert_int_equal(audit_has("op1", "egress", "alpha", "wrong_type"), 1);
	tu_res_free(&r);
}

/* SSE bytes the api must send for a list of NDJSON lines (ids from 1). */
static char *
expected_sse(struct evbuffer *ndjson)
{
	struct evbuffer *out = evbuffer_new();
	struct sbx_err err;
	size_t n;
	char *line, *res;
	uint64_t id = 1;

	while ((line = evbuffer_readln(ndjson, &n, EVBUFFER_EOL_LF)) != NULL) {
		assert_int_equal(sbx_sse_from_ndjson(out, id++, line, n, &err), 0);
		free(line);
	}
	n = evbuffer_get_length(out);
	res = malloc(n + 1);
	evbuffer_remove(out, res, n);
	res[n] = '\0';
	evbuffer_free(out);
	return res;
}

static int64_t
fixed_clock(void)
{
	return 1764507600000LL;
}

static void
test_exec_streams_sse_with_headers_ids_and_events(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "out 1\n" },
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 2,
		    .data = "\xff\xfe bad utf8", .len = 11 },
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1,
		    .data = "data: fake\n\nevent: exit" },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 3 },
	};
	struct tu_res r = { 0 };
	struct evbuffer *nd = evbuffer_new();
	char *want;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	api_server_set_clock(T.srv, fixed_clock);
	tu_npc(KA, "alpha");
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 4), 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"sh\",\"-c\",\"x\"],\"cwd\":\"/work\","
	    "\"env\":[\"A=1\"],\"stdin\":\"aGk=\",\"timeout_ms\":5000}"), 200);
	assert_string_equal(r.ctype, "text/event-stream");
	assert_string_equal(r.cache, "no-cache");
	assert_string_equal(r.accel, "no");
	/* The request reached the driver as sent. */
	assert_string_equal(sbx_fake_last_exec(T.drv)->argv, "sh -c x");
	assert_string_equal(sbx_fake_last_exec(T.drv)->cwd, "/work");
	assert_string_equal(sbx_fake_last_exec(T.drv)->env, "A=1");
	assert_int_equal(sbx_fake_last_exec(T.drv)->stdin_len, 2);
	assert_int_equal(sbx_fake_last_exec(T.drv)->timeout_ms, 5000);
	assert_string_equal(sbx_fake_last_exec(T.drv)->id, "npc-alpha");
	/* What it must look like: the fake's events as NDJSON, then SPEC §5. */
	sbx_ndjson_start(nd, "fake-exec-1", fixed_clock());
	sbx_ndjson_output(nd, 1, (const unsigned char *)"out 1\n", 6);
	sbx_ndjson_output(nd, 2, (const unsigned char *)"\xff\xfe bad utf8", 11);
	sbx_ndjson_output(nd, 1, (const unsigned char *)
	    "data: fake\n\nevent: exit", 23);
	/* The fake reports its own duration: take it from the body. */
	{
		const char *body = tu_text(&r), *p = strstr(body, "duration_ms\":");
		long long ms;

		assert_non_null(p);
		ms = strtoll(p + 13, NULL, 10);
		sbx_ndjson_exit(nd, 3, NULL, ms, 0);
	}
	want = expected_sse(nd);
	assert_string_equal(tu_text(&r), want);
	assert_non_null(strstr(want, "id: 5\nevent: exit\n"));
	free(want);
	evbuffer_free(nd);
	assert_int_equal(audit_has("alice", "sandbox.exec", "alpha", "ok"), 1);
	tu_res_free(&r);
}

static void
test_exec_errors_before_start_are_json(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	/* Stopped on purpose: the broker's not_running, a status read (not
	 * stopped by the reaper: no wake), the handler again, the same 409. */
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/stop",
	    KA, NULL), 200);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"true\"]}"), 409);
	assert_string_equal(tu_code(&r), "not_running");
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[]}"), 400);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"ls\"],\"cwd\":\"/etc\"}"), 400);
	assert_string_equal(tu_code(&r), "path_outside_work");
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"ls\"],\"user\":\"root\"}"), 400);
	assert_string_equal(tu_code(&r), "unknown_field");
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"ls\"],\"stdin\":\"%%%\"}"), 400);
	tu_res_free(&r);
}

/* The api runs an exec before any status read (adr/0033). A not_running
 * answer is read as "maybe the reaper stopped it": one status read; the
 * sandbox turned out running (it was started meanwhile), so the exec runs
 * again and succeeds, and what the first run counted is given back. */
static void
test_exec_not_running_once_is_retried_after_a_status_read(void **state)
{
	struct tu_res r = { 0 };
	char *m;

	(void)state;
	tu_set("max_execs_per_principal", "1");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	sbx_fake_fail_next(T.drv, SBX_FAKE_EXEC, SBX_E_NOT_RUNNING, 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"true\"],\"stdin\":\"aGk=\"}"), 200);
	assert_non_null(strstr(tu_text(&r), "event: exit"));
	/* No broker error was counted: the retry answered. */
	assert_int_equal(tu_req(&r, "GET", "/metrics", KOP, NULL), 200);
	m = strdup(tu_text(&r));
	assert_null(strstr(m, "sbx_api_broker_errors_total{code=\"not_running\"}"));
	free(m);
	/* The principal's exec count was given back: a cap of 1 still admits. */
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"true\"]}"), 200);
	tu_res_free(&r);
}

static void
test_heartbeat_comment_on_a_silent_stream(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "a" },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	struct tu_res r = { 0 };
	const char *body, *ping, *out;

	(void)state;
	tu_set("heartbeat", "20ms");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 2), 0);
	/* Each step of the fake waits 150 ms: silence on the stream. */
	sbx_fake_set_delay_ms(T.drv, 150);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"sleep\",\"1\"]}"), 200);
	body = tu_text(&r);
	ping = strstr(body, "\n\n: ping\n\n");
	out = strstr(body, "event: stdout");
	assert_non_null(ping);
	assert_non_null(out);
	assert_true(ping < out);
	assert_non_null(strstr(body, "event: exit"));
	tu_res_free(&r);
}

static int
execs_live(void *arg)
{
	(void)arg;
	return stats()->execs_live == 1;
}

static int
exec_cancelled(void *arg)
{
	(void)arg;
	return stats()->exec_cancels == 1 && api_server_inflight(T.srv) == 0;
}

static void
test_concurrent_execs_over_limit_get_429_and_disconnect_cancels(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "running\n" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct tu_res first = { 0 }, r = { 0 };

	(void)state;
	tu_set("max_execs_per_principal", "1");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 2), 0);
	tu_start_req(&first, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA,
	    EXEC_SLEEP, strlen(EXEC_SLEEP));
	assert_true(tu_loop_until(execs_live, NULL, 3000));
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"true\"]}"), 429);
	assert_string_equal(tu_code(&r), "too_many");
	assert_string_equal(r.retry_after, "1");
	/* Another principal is not limited by alice's execs. */
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KOP,
	    NULL), 200);
	/* alice hangs up: the exec is cancelled (the broker would kill it). */
	tu_res_free(&first);
	assert_true(tu_loop_until(exec_cancelled, NULL, 3000));
	/* And her slot is free again. */
	assert_int_equal(sbx_fake_set_exec_script(T.drv, (const struct
	    sbx_fake_step[]){ { .kind = SBX_FAKE_STEP_EXIT } }, 1), 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"true\"]}"), 200);
	tu_res_free(&r);
}

/* No output, no heartbeat due: the hang-up is still noticed at once. */
static void
test_disconnect_of_a_silent_exec_cancels_it(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct tu_res r = { 0 };

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 1), 0);
	r.stop_when = "event: start";
	tu_start_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA,
	    EXEC_SLEEP, strlen(EXEC_SLEEP));
	assert_true(tu_loop_until(tu_is_done, &r, 3000));
	assert_true(r.stopped);
	assert_true(tu_loop_until(exec_cancelled, NULL, 2000));
	tu_res_free(&r);
}

static void
test_requests_per_minute_over_limit_get_429_with_retry_after(void **state)
{
	struct tu_res r = { 0 };
	int i;

	(void)state;
	tu_set("requests_per_minute", "3");
	tu_start_fake(KA, KB, KOP);
	for (i = 0; i < 3; i++)
		assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL),
		    200);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 429);
	assert_string_equal(tu_code(&r), "rate_limited");
	assert_true(atoi(r.retry_after) >= 1 && atoi(r.retry_after) <= 21);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KB, NULL), 200);
	tu_res_free(&r);
}

static void
test_body_over_limit_gets_413(void **state)
{
	struct tu_res r = { 0 };
	char *big;

	(void)state;
	tu_set("body_max", "1k");
	tu_set("file_size_max", "4k");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	big = malloc(8192);
	memset(big, ' ', 8191);
	big[8191] = '\0';
	memcpy(big, "{\"argv\":[\"true\"]", 16);
	big[2000] = '}';
	big[2001] = '\0';
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, big), 413);
	assert_string_equal(tu_code(&r), "too_large");
	/* A file may be larger than a JSON body, up to file_size_max. */
	big[2001] = ' ';
	big[3000] = '\0';
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/a", KA, big), 200);
	big[3000] = ' ';
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/a", KA, big), 413);
	free(big);
	tu_res_free(&r);
}

static void
test_files_write_read_list(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/d/n.txt&mode=0600", KA,
	    "hello\nworld"), 200);
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/d/n.txt", KA, NULL),
	    200);
	assert_string_equal(r.ctype, "application/octet-stream");
	assert_string_equal(tu_text(&r), "hello\nworld");
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/list?path=/work/d", KA, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"name\":\"n.txt\""));
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/../etc/passwd", KA,
	    NULL), 400);
	assert_string_equal(tu_code(&r), "path_outside_work");
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/none", KA, NULL), 404);
	assert_int_equal(audit_has("alice", "files.write", "alpha", "ok"), 1);
	tu_res_free(&r);
}

#define REPEATS 2000

static int
paused_once(void *arg)
{
	(void)arg;
	return stats()->pauses > 0;
}

static void
test_slow_client_pauses_the_exec_and_gets_every_byte(void **state)
{
	static struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .repeat = REPEATS },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	struct tu_res r = { 0 };
	char *chunk;
	size_t got, n;
	unsigned outputs;
	const char *p;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	chunk = malloc(16384 + 1);
	memset(chunk, 'x', 16384);
	chunk[16384] = '\0';
	script[0].data = chunk;
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 2), 0);
	memset(&r, 0, sizeof(r));
	tu_start_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA,
	    EXEC_YES, strlen(EXEC_YES));
	/* Do not read: the api's queue fills and it pauses the producer. */
	r.pause_at_headers = 1;
	assert_true(tu_loop_until(paused_once, NULL, 5000));
	/* Once the kernel's socket buffers are full too, the producer stays
	 * paused for as long as the client does not read. */
	tu_spin(500);
	outputs = stats()->outputs;
	tu_spin(300);
	assert_int_equal(stats()->outputs, outputs);
	assert_true(outputs < REPEATS);
	sbx_http_req_resume(r.req);
	assert_true(tu_loop_until(tu_is_done, &r, 10000));
	assert_false(r.failed);
	assert_true(stats()->resumes > 0);
	/* Every byte arrived: count the x's in the data lines. */
	got = 0;
	p = tu_text(&r);
	while ((p = strchr(p, 'x')) != NULL) {
		n = strspn(p, "x");
		if (n >= 64)    /* not the x of "exec" or "exit" */
			got += n;
		p += n;
	}
	assert_int_equal(got, (size_t)REPEATS * 16384);
	free(chunk);
	tu_res_free(&r);
}

static void
test_database_holds_no_plaintext_key(void **state)
{
	struct tu_res r = { 0 };
	static const char *const files[] = { "api.db", "api.db-wal",
	    "api.db-shm", "api.key" };
	char path[128];
	struct stat sb;
	size_t i, len;
	char *buf;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 200);
	for (i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s", T.dir, files[i]);
		if ((buf = tu_slurp(path, &len)) == NULL)
			continue;
		assert_null(memmem(buf, len, KA, strlen(KA)));
		assert_null(memmem(buf, len, KOP, strlen(KOP)));
		/* Nor a 16-character piece of it. */
		assert_null(memmem(buf, len, KA + 10, 16));
		free(buf);
	}
	snprintf(path, sizeof(path), "%s/api.key", T.dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(sb.st_size, 32);
	snprintf(path, sizeof(path), "%s/api.db", T.dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 077, 0);
	tu_res_free(&r);
}

static void
test_api_key_never_appears_in_logs(void **state)
{
	struct tu_res r = { 0 };
	char wrong[96], *log;
	size_t len;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	snprintf(wrong, sizeof(wrong), "canary-%s", KA);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", wrong, NULL), 401);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", wrong,
	    "{\"name\":\"z\"}"), 401);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"echo\",\"secret-body-canary\"]}"), 200);
	log = tu_slurp(T.logpath, &len);
	assert_non_null(log);
	assert_true(len > 0);
	assert_non_null(strstr(log, "\"action\":\"sandbox.exec\""));
	assert_null(memmem(log, len, KA, strlen(KA)));
	assert_null(memmem(log, len, "canary-", 7));
	assert_null(memmem(log, len, "secret-body-canary", 18));
	free(log);
	tu_res_free(&r);
}

static void
test_npc_names_routes_and_methods(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	tu_start_fake(KA, KB, KOP);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KA,
	    "{\"name\":\"Bad_Name\"}"), 400);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KA,
	    "{\"name\":\"ok-1\"}"), 201);
	assert_non_null(strstr(tu_text(&r), "\"sandbox_id\":\"npc-ok-1\""));
	/* Names are unique across owners. */
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KB,
	    "{\"name\":\"ok-1\"}"), 409);
	/* A player cannot create an NPC for someone else; an operator can. */
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KB,
	    "{\"name\":\"b2\",\"owner\":\"alice\"}"), 403);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KOP,
	    "{\"name\":\"b2\",\"owner\":\"bob\"}"), 201);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/b2/sandbox", KB,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"state\":\"absent\""));
	assert_int_equal(tu_req(&r, "PATCH", "/api/v1/npcs", KA, NULL), 405);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/nothing", KA, NULL), 404);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KA, "[1]"), 400);
	assert_int_equal(tu_req(&r, "GET", "/healthz", NULL, NULL), 200);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/b2/sandbox/stop",
	    KB, NULL), 404);
	tu_res_free(&r);
}

static int drain_called;

static void
drain_done(void *arg)
{
	(void)arg;
	drain_called++;
}

static int
drained(void *arg)
{
	(void)arg;
	return drain_called > 0;
}

static void
test_drain_lets_open_streams_finish_and_refuses_new_connections(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "a\n" },
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "b\n" },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	struct tu_res first = { 0 }, r = { 0 };

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(sbx_fake_set_exec_script(T.drv, script, 3), 0);
	sbx_fake_set_delay_ms(T.drv, 100);
	drain_called = 0;
	tu_start_req(&first, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA,
	    EXEC_YES, strlen(EXEC_YES));
	assert_true(tu_loop_until(execs_live, NULL, 3000));
	api_server_drain(T.srv, drain_done, NULL);
	tu_spin(20);
	assert_int_equal(drain_called, 0);
	/* No new connection is accepted. */
	memset(&r, 0, sizeof(r));
	tu_start_req(&r, "GET", "/api/v1/npcs", KA, NULL, 0);
	assert_true(tu_loop_until(tu_is_done, &r, 3000));
	assert_true(r.failed);
	/* The open stream ends normally, then the drain completes. */
	assert_true(tu_loop_until(tu_is_done, &first, 5000));
	assert_false(first.failed);
	assert_non_null(strstr(tu_text(&first), "event: exit"));
	assert_true(tu_loop_until(drained, NULL, 3000));
	assert_int_equal(api_server_inflight(T.srv), 0);
	tu_res_free(&first);
	tu_res_free(&r);
}

/* ?usage=1 asks the driver's status_usage (and only then); the figures
 * come back as the "usage" member; a bad flag is 400 before the driver. */
static void
test_status_usage_is_opt_in_and_passed_through(void **state)
{
	struct tu_res r = { 0 };
	unsigned before;
	json_t *j, *u;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/a", KA, "12345"), 200);
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/d/b", KA, "xyz"), 200);
	before = stats()->calls[SBX_FAKE_STATUS_USAGE];
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_null(strstr(tu_text(&r), "\"usage\""));
	assert_int_equal(stats()->calls[SBX_FAKE_STATUS_USAGE], before);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox?usage=2",
	    KA, NULL), 400);
	assert_string_equal(tu_code(&r), "bad_request");
	assert_int_equal(stats()->calls[SBX_FAKE_STATUS_USAGE], before);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox?usage=1",
	    KA, NULL), 200);
	assert_int_equal(stats()->calls[SBX_FAKE_STATUS_USAGE], before + 1);
	j = json_loads(tu_text(&r), 0, NULL);
	u = json_object_get(j, "usage");
	assert_true(json_is_object(u));
	assert_int_equal(json_integer_value(json_object_get(u, "files")), 2);
	assert_int_equal(json_integer_value(json_object_get(u,
	    "apparent_bytes")), 8);
	assert_true(json_is_false(json_object_get(u, "partial")));
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "running");
	json_decref(j);
	/* Stopped: usage null, still 200. */
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/stop", KA,
	    NULL), 200);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox?usage=1",
	    KA, NULL), 200);
	j = json_loads(tu_text(&r), 0, NULL);
	assert_true(json_is_null(json_object_get(j, "usage")));
	json_decref(j);
	tu_res_free(&r);
}

/*
 * A driver without write_stream (the fake) still takes a file body larger
 * than file_write_buffer: the gate's window opens to the whole body and
 * the call layer gathers it, then writes (sbx_call_write_stream, adr/0041).
 * A window left at file_write_buffer would stall the gather until the
 * request's timeout.
 */
static void
test_a_body_above_the_write_buffer_reaches_a_driver_without_write_stream(
    void **state)
{
	struct tu_res r = { 0 };
	const size_t n = 64 * 1024;
	char *body, *got;

	(void)state;
	tu_set("file_write_buffer", "4k");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "alpha");
	body = malloc(n + 1);
	got = malloc(n + 1);
	assert_non_null(body);
	assert_non_null(got);
	memset(body, 'w', n);
	body[n] = '\0';
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/big", KA, body), 200);
	assert_int_equal(sbx_fake_get_file(T.drv, "npc-alpha", "/work/big", got,
	    n + 1), (long)n);
	assert_memory_equal(got, body, n);
	free(got);
	free(body);
	tu_res_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_a_body_above_the_write_buffer_reaches_a_driver_without_write_stream,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_missing_wrong_and_revoked_keys_get_401, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_player_b_gets_404_on_every_route_of_player_a, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_player_egress_is_403_and_changes_nothing, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_operator_grant_ensures_with_egress_and_is_audited, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_exec_streams_sse_with_headers_ids_and_events, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_exec_errors_before_start_are_json, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_exec_not_running_once_is_retried_after_a_status_read,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_heartbeat_comment_on_a_silent_stream, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_concurrent_execs_over_limit_get_429_and_disconnect_cancels,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_disconnect_of_a_silent_exec_cancels_it, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_requests_per_minute_over_limit_get_429_with_retry_after,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(test_body_over_limit_gets_413,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(test_files_write_read_list, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_slow_client_pauses_the_exec_and_gets_every_byte, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_database_holds_no_plaintext_key, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_api_key_never_appears_in_logs, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(test_npc_names_routes_and_methods,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_status_usage_is_opt_in_and_passed_through, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_drain_lets_open_streams_finish_and_refuses_new_connections,
		    tu_up, tu_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
