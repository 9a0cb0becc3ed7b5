/* test_api_chain.c - player -> sandbox-api -> broker-client driver -> sandbox-broker HTTP layer -> fake driver, all real sockets. */
#include "api_testutil.h"

#include "broker.h"
#include "driver_broker.h"
#include "driver_fake.h"

#define TOKEN "canary-chain-token-0a1b2c3d4e5f"

static struct {
	struct sbx_driver *fake;
	struct broker_server *broker;
	struct broker_config cfg;
	char dir[64];
} C;

static char KA[64], KOP[64];

static const struct sbx_fake_stats *
stats(void)
{
	return sbx_fake_stats(C.fake);
}

static int
setup(void **state)
{
	const char *argv[] = { "test", "--listen", "127.0.0.1:0",
	    "--state-dir", NULL, "--image", "img-a", "--images", "img-b",
	    "--helper-path", "/nonexistent/sbx-helper" };
	struct sbx_broker_config bc;
	struct sbx_token tok;
	struct sbx_err err;
	struct sbx_driver *d;
	struct tu_res r = { 0 };
	char addr[64];

	(void)state;
	tu_setup_base();
	memset(&C, 0, sizeof(C));
	snprintf(C.dir, sizeof(C.dir), "/tmp/sbx-api-chain.XXXXXX");
	assert_non_null(mkdtemp(C.dir));
	argv[4] = C.dir;
	assert_int_equal(sbx_config_load(broker_config_keys, &C.cfg, 11,
	    (char **)argv, NULL, &err), 0);
	assert_int_equal(broker_config_finish(&C.cfg, "/x/sandbox-broker",
	    &err), 0);
	assert_int_equal(sbx_token_set(&tok, TOKEN, strlen(TOKEN), &err), 0);
	C.fake = sbx_fake_driver_new(T.base);
	assert_non_null(C.fake);
	C.broker = broker_server_new(T.base, &C.cfg, C.fake, &tok, &err);
	assert_non_null(C.broker);
	sbx_token_clear(&tok);
	assert_int_equal(broker_server_listen(C.broker, &err), 0);

	snprintf(addr, sizeof(addr), "127.0.0.1:%d",
	    broker_server_port(C.broker));
	memset(&bc, 0, sizeof(bc));
	bc.address = addr;
	bc.token = TOKEN;
	bc.token_len = strlen(TOKEN);
	bc.header_timeout_ms = 5000;
	d = sbx_broker_driver_new(T.base, &bc, &err);
	assert_non_null(d);
	tu_start(d);
	tu_principal("alice", API_ROLE_PLAYER, KA);
	tu_principal("op1", API_ROLE_OPERATOR, KOP);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KA,
	    "{\"name\":\"alpha\"}"), 201);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	tu_res_free(&r);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[128];

	(void)state;
	api_server_free(T.srv);
	T.srv = NULL;
	sbx_driver_free(T.drv);
	T.drv = NULL;
	broker_server_free(C.broker);
	sbx_driver_free(C.fake);
	sbx_config_free(broker_config_keys, &C.cfg);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", C.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", C.dir);
	tu_teardown();
	return 0;
}

static void
test_exec_streams_through_broker_as_sse(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "one\n" },
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 2,
		    .data = "\xff\x00\xfe", .len = 3 },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 7 },
	};
	struct tu_res r = { 0 };
	const char *t;

	(void)state;
	assert_int_equal(sbx_fake_set_exec_script(C.fake, script, 3), 0);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"sh\",\"-c\",\"x\"],\"stdin\":\"aGk=\","
	    "\"timeout_ms\":1000}"), 200);
	t = tu_text(&r);
	assert_non_null(strstr(t, "id: 1\nevent: start\ndata: "
	    "{\"exec_id\":\"fake-exec-1\",\"ts\":"));
	assert_non_null(strstr(t, "id: 2\nevent: stdout\ndata: "
	    "{\"data\":\"one\\n\"}\n\n"));
	assert_non_null(strstr(t, "id: 3\nevent: stderr\ndata: "
	    "{\"data_b64\":\"/wD+\"}\n\n"));
	assert_non_null(strstr(t, "id: 4\nevent: exit\ndata: {\"code\":7,"));
	assert_string_equal(sbx_fake_last_exec(C.fake)->argv, "sh -c x");
	assert_int_equal(sbx_fake_last_exec(C.fake)->stdin_len, 2);
	assert_int_equal(sbx_fake_last_exec(C.fake)->timeout_ms, 1000);
	assert_string_equal(sbx_fake_last_exec(C.fake)->id, "npc-alpha");
	tu_res_free(&r);
}

static int
exec_killed(void *arg)
{
	(void)arg;
	return stats()->exec_cancels == 1 && stats()->execs_live == 0;
}

static void
test_player_disconnect_kills_the_exec_at_the_broker(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "tick\n" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct tu_res r = { 0 };
	const char *body = "{\"argv\":[\"sleep\",\"1000\"]}";

	(void)state;
	assert_int_equal(sbx_fake_set_exec_script(C.fake, script, 2), 0);
	r.stop_when = "event: stdout";
	tu_start_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA, body,
	    strlen(body));
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	assert_true(r.stopped);
	assert_true(tu_loop_until(exec_killed, NULL, 5000));
	tu_res_free(&r);
}

#define REPEATS 3000

static int
paused_once(void *arg)
{
	(void)arg;
	return stats()->pauses > 0;
}

static void
test_slow_player_pauses_the_exec_at_the_broker(void **state)
{
	static struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .repeat = REPEATS },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	struct tu_res r = { 0 };
	const char *body = "{\"argv\":[\"yes\"]}";
	unsigned outputs;
	char *chunk;

	(void)state;
	chunk = malloc(16385);
	memset(chunk, 'y', 16384);
	chunk[16384] = '\0';
	script[0].data = chunk;
	assert_int_equal(sbx_fake_set_exec_script(C.fake, script, 2), 0);
	tu_start_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA, body,
	    strlen(body));
	r.pause_at_headers = 1;
	/* The api stops reading the broker, the broker pauses the driver. */
	assert_true(tu_loop_until(paused_once, NULL, 10000));
	tu_spin(800);
	outputs = stats()->outputs;
	tu_spin(300);
	assert_int_equal(stats()->outputs, outputs);
	assert_true(outputs < REPEATS);
	sbx_http_req_resume(r.req);
	assert_true(tu_loop_until(tu_is_done, &r, 20000));
	assert_false(r.failed);
	assert_non_null(strstr(tu_text(&r), "event: exit"));
	free(chunk);
	tu_res_free(&r);
}

static void
test_egress_grant_replaces_the_container_at_the_broker(void **state)
{
	struct tu_res r = { 0 };
	unsigned created = stats()->containers_created;

	(void)state;
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    "{\"image\":\"img-b\"}"), 200);
	assert_non_null(strstr(tu_text(&r), "\"image\":\"img-b\""));
	created = stats()->containers_created;
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KA,
	    "{\"enabled\":true}"), 403);
	assert_int_equal(stats()->containers_created, created);
	if (tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":true}") != 200)
		fail_msg("egress grant: %d %s", r.status, tu_text(&r));
	assert_int_equal(stats()->containers_created, created + 1);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"egress\":true"));
	/* The image chosen earlier survived the replacement. */
	assert_non_null(strstr(tu_text(&r), "\"image\":\"img-b\""));
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"image\":\"img-b\""));
	assert_int_equal(stats()->containers_created, created + 1);
	tu_res_free(&r);
}

static void
test_files_and_errors_through_the_broker(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/x/y.txt&mode=0600",
	    KA, "chain bytes"), 200);
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/x/z&mode=+644", KA,
	    "z"), 400);
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/x/y.txt", KA, NULL),
	    200);
	assert_string_equal(tu_text(&r), "chain bytes");
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/list?path=/work/x", KA, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"y.txt\""));
	assert_non_null(strstr(tu_text(&r), "\"mode\":384"));
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/none", KA, NULL), 404);
	assert_string_equal(tu_code(&r), "not_found");
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/stop",
	    KA, NULL), 200);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"true\"]}"), 409);
	assert_int_equal(tu_req(&r, "DELETE", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"state\":\"absent\""));
	tu_res_free(&r);
}

/* A page longer than one slice, with names that hold JSON's own bytes
 * ("}{,[]\) and one that is not UTF-8, goes player -> api -> broker and
 * back whole: the api decodes it entry by entry as it arrives and encodes
 * its reply in slices (adr/0030). */
static void
test_list_page_decoded_as_it_arrives(void **state)
{
	struct tu_res r = { 0 };
	char path[96];
	json_t *j, *ents, *e;
	size_t i, n = 1234;

	(void)state;
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/work/t/n\"}{,[]\\%05zu", i);
		assert_int_equal(sbx_fake_put_file(C.fake, "npc-alpha", path,
		    "x", 1), 0);
	}
	assert_int_equal(sbx_fake_put_file(C.fake, "npc-alpha", "/work/t/\xff",
	    "", 0), 0);
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/list?path=/work/t&cursor=", KA, NULL),
	    200);
	j = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(j);
	ents = json_object_get(j, "entries");
	assert_int_equal(json_array_size(ents), n + 1);
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "n\"}{,[]\\%05zu", i);
		assert_string_equal(json_string_value(json_object_get(
		    json_array_get(ents, i), "name")), path);
	}
	e = json_array_get(ents, n);
	assert_string_equal(json_string_value(json_object_get(e, "name_b64")),
	    "/w==");
	assert_true(json_is_false(json_object_get(j, "truncated")));
	json_decref(j);
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/list?path=/work/t", KA, NULL), 200);
	j = json_loads(tu_text(&r), 0, NULL);
	assert_int_equal(json_array_size(j), n + 1);
	json_decref(j);
	tu_res_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_exec_streams_through_broker_as_sse, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_player_disconnect_kills_the_exec_at_the_broker, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_slow_player_pauses_the_exec_at_the_broker, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_egress_grant_replaces_the_container_at_the_broker, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_files_and_errors_through_the_broker, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_list_page_decoded_as_it_arrives, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
