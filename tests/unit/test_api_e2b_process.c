/* test_api_e2b_process.c - envd's process.Process over Connect (api/api_envd.c, api_e2b_process.c, api_connect.c; adr/0060) through the api's real routes on the fake driver's sessions (EXEC is cat, PTY an echo): start, output and end events, stdin closed unless asked, a process outliving its stream then listed, found by tag and killed, a pty resized, what the driver is asked (argv, cwd, env, deadline), refusals and the session's own refusal, a deadline that ends the stream deadline_exceeded. */
#include "api_testutil.h"
#include "driver_fake.h"
#include "sbx_driver.h"
#include "sbx_http_client.h"

static char KA[SBX_TOKEN_GEN_LEN + 1];
static char KB[SBX_TOKEN_GEN_LEN + 1];
static char KOP[SBX_TOKEN_GEN_LEN + 1];
static char SID[64], TOKEN[128];

/* ------------------------------------------------------------------ */
/* A Connect client on the fixture's in-loop HTTP client               */

static void
on_response(void *arg, struct sbx_http_req *req, int status)
{
	struct tu_res *r = arg;
	const char *v;

	r->status = status;
	if ((v = sbx_http_req_header(req, "Content-Type")) != NULL)
		snprintf(r->ctype, sizeof(r->ctype), "%s", v);
}

static void
on_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	(void)req;
	evbuffer_add(((struct tu_res *)arg)->body, buf, len);
}

static void
on_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct tu_res *r = arg;

	(void)req;
	r->req = NULL;
	r->done = 1;
	if (err != NULL)
		r->failed = 1;
}

/* Starts a POST of body (blen bytes) to path with envd's headers plus
 * extra ("Name: value" or NULL) and Content-Type ctype. */
static void
post(struct tu_res *r, const char *path, const char *ctype, const void *body,
    size_t blen, const char *extra)
{
	struct sbx_http_request hr;
	struct sbx_http_cbs cbs;
	struct sbx_err err;
	char addr[64], id[128], tok[192];
	const char *hdrs[6];
	int n = 0;

	tu_res_free(r);
	r->body = evbuffer_new();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", T.port);
	snprintf(id, sizeof(id), "E2b-Sandbox-Id: %s", SID);
	snprintf(tok, sizeof(tok), "X-Access-Token: %s", TOKEN);
	hdrs[n++] = id;
	hdrs[n++] = "E2b-Sandbox-Port: 49983";
	hdrs[n++] = tok;
	hdrs[n++] = "Connect-Protocol-Version: 1";
	if (extra != NULL)
		hdrs[n++] = extra;
	hdrs[n] = NULL;
	memset(&hr, 0, sizeof(hr));
	hr.method = "POST";
	hr.path = path;
	hr.headers = hdrs;
	hr.body = body;
	hr.body_len = blen;
	hr.content_type = ctype;
	memset(&cbs, 0, sizeof(cbs));
	cbs.response = on_response;
	cbs.body = on_body;
	cbs.done = on_done;
	cbs.arg = r;
	r->req = sbx_http_request(T.base, addr, &hr, NULL, &cbs, &err);
	assert_non_null(r->req);
}

/* A unary call of process.Process; its status, the reply in *out. */
static int
unary(const char *method, const char *msg, json_t **out)
{
	struct tu_res r = { 0 };
	char path[128];
	int status;

	snprintf(path, sizeof(path), "/e2b/envd/process.Process/%s", method);
	post(&r, path, "application/json", msg, strlen(msg), NULL);
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	*out = json_loads(tu_text(&r), 0, NULL);
	status = r.status;
	tu_res_free(&r);
	return status;
}

/* Starts a server-stream call with msg enveloped. */
static void
stream(struct tu_res *r, const char *method, const char *msg,
    const char *extra)
{
	unsigned char buf[4096];
	size_t n = strlen(msg);
	char path[128];

	assert_true(n + 5 <= sizeof(buf));
	buf[0] = 0;
	buf[1] = (unsigned char)(n >> 24);
	buf[2] = (unsigned char)(n >> 16);
	buf[3] = (unsigned char)(n >> 8);
	buf[4] = (unsigned char)n;
	memcpy(buf + 5, msg, n);
	snprintf(path, sizeof(path), "/e2b/envd/process.Process/%s", method);
	post(r, path, "application/connect+json", buf, n + 5, extra);
}

/* The messages of a stream's body so far (an array), and its end (the
 * end-of-stream message, or NULL when it has not come). */
static json_t *
messages(struct tu_res *r, json_t **end)
{
	size_t n = evbuffer_get_length(r->body), off = 0, len;
	const unsigned char *p = evbuffer_pullup(r->body, -1);
	json_t *all = json_array(), *m;

	*end = NULL;
	while (off + 5 <= n) {
		len = (size_t)p[off + 1] << 24 | (size_t)p[off + 2] << 16 |
		    (size_t)p[off + 3] << 8 | p[off + 4];
		if (off + 5 + len > n)
			break;
		m = json_loadb((const char *)p + off + 5, len, 0, NULL);
		assert_non_null(m);
		if (p[off] & 2) {
			json_decref(*end);
			*end = m;
		} else {
			json_array_append_new(all, m);
		}
		off += 5 + len;
	}
	return all;
}

/* Event kind kind (start, data, end, keepalive) of message m, or NULL. */
static json_t *
ev(json_t *m, const char *kind)
{
	return json_object_get(json_object_get(m, "event"), kind);
}

struct want { struct tu_res *r; const char *text; };

/* Stream condition: its body holds text (base64 of output, or JSON). */
static int
holds(void *arg)
{
	struct want *w = arg;
	size_t n = evbuffer_get_length(w->r->body);

	return n > 0 && memmem(evbuffer_pullup(w->r->body, -1), n, w->text,
	    strlen(w->text)) != NULL;
}

static void
wait_for(struct tu_res *r, const char *text)
{
	struct want w = { r, text };

	assert_true(tu_loop_until(holds, &w, 5000));
}

/* The pid of a stream's start event (waits for it). */
static long long
start_pid(struct tu_res *r)
{
	json_t *all, *end;
	long long pid;

	wait_for(r, "\"start\"");
	all = messages(r, &end);
	pid = json_integer_value(json_object_get(ev(json_array_get(all, 0),
	    "start"), "pid"));
	json_decref(all);
	json_decref(end);
	assert_true(pid >= 1000);
	return pid;
}

/* ------------------------------------------------------------------ */
/* Fixture                                                             */

static int
up(void **state)
{
	struct tu_res r = { 0 };
	json_t *o;
	const char *hdr[2];
	char key[128];

	tu_up(state);
	tu_start_fake(KA, KB, KOP);
	/* An E2B sandbox of alice, with envVars. */
	snprintf(key, sizeof(key), "X-API-Key: %s", KA);
	hdr[0] = key;
	hdr[1] = NULL;
	{
		struct sbx_http_request hr;
		struct sbx_http_cbs cbs;
		struct sbx_err err;
		char addr[64];
		const char *body = "{\"templateID\":\"base\",\"envVars\":"
		    "{\"SBOX\":\"s\",\"OVER\":\"sandbox\"}}";

		r.body = evbuffer_new();
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", T.port);
		memset(&hr, 0, sizeof(hr));
		hr.method = "POST";
		hr.path = "/e2b/v2/sandboxes";
		hr.headers = hdr;
		hr.body = body;
		hr.body_len = strlen(body);
		hr.content_type = "application/json";
		memset(&cbs, 0, sizeof(cbs));
		cbs.response = on_response;
		cbs.body = on_body;
		cbs.done = on_done;
		cbs.arg = &r;
		r.req = sbx_http_request(T.base, addr, &hr, NULL, &cbs, &err);
		assert_non_null(r.req);
		assert_true(tu_loop_until(tu_is_done, &r, 5000));
	}
	assert_int_equal(r.status, 201);
	o = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(o);
	snprintf(SID, sizeof(SID), "%s", json_string_value(json_object_get(o,
	    "sandboxID")));
	snprintf(TOKEN, sizeof(TOKEN), "%s", json_string_value(
	    json_object_get(o, "envdAccessToken")));
	json_decref(o);
	tu_res_free(&r);
	return 0;
}

static int
down(void **state)
{
	return tu_down(state);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */

static void
test_start_streams_start_output_and_end(void **state)
{
	struct tu_res r = { 0 };
	json_t *all, *end, *reply, *e;
	long long pid;
	char msg[256];

	(void)state;
	stream(&r, "Start", "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":"
	    "[\"-l\",\"-c\",\"cat\"]},\"stdin\":true}", NULL);
	pid = start_pid(&r);
	assert_string_equal(r.ctype, "application/connect+json");
	assert_int_equal(r.status, 200);
	/* stdin bytes come back on stdout (the fake's cat). */
	snprintf(msg, sizeof(msg), "{\"process\":{\"pid\":%lld},\"input\":"
	    "{\"stdin\":\"aGVsbG8K\"}}", pid);
	assert_int_equal(unary("SendInput", msg, &reply), 200);
	json_decref(reply);
	wait_for(&r, "aGVsbG8K");
	snprintf(msg, sizeof(msg), "{\"process\":{\"pid\":%lld}}", pid);
	assert_int_equal(unary("CloseStdin", msg, &reply), 200);
	json_decref(reply);
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	all = messages(&r, &end);
	assert_non_null(end);
	assert_null(json_object_get(end, "error"));
	assert_non_null(ev(json_array_get(all, 0), "start"));
	assert_string_equal(json_string_value(json_object_get(ev(
	    json_array_get(all, 1), "data"), "stdout")), "aGVsbG8K");
	e = ev(json_array_get(all, json_array_size(all) - 1), "end");
	assert_non_null(e);
	assert_int_equal(json_integer_value(json_object_get(e, "exitCode")), 0);
	assert_true(json_is_true(json_object_get(e, "exited")));
	assert_string_equal(json_string_value(json_object_get(e, "status")),
	    "exit status 0");
	assert_null(json_object_get(e, "error"));
	json_decref(all);
	json_decref(end);
	tu_res_free(&r);
}

static void
test_driver_gets_sh_fallback_cwd_envs_and_deadline(void **state)
{
	const struct sbx_fake_session_seen *seen = sbx_fake_session_seen(T.drv);
	struct tu_res r = { 0 };
	unsigned eofs = seen->eofs;

	(void)state;
	stream(&r, "Start", "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":"
	    "[\"-l\",\"-c\",\"echo hi\"],\"envs\":{\"OVER\":\"request\"},"
	    "\"cwd\":\"/home/user/d1\"}}", "Connect-Timeout-Ms: 60000");
	start_pid(&r);
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	assert_int_equal(seen->kind, SBX_SESSION_EXEC);
	assert_string_equal(seen->cwd, "/work/d1");
	assert_int_equal(seen->timeout_ms, 60000);
	/* /bin/bash, or /bin/sh in an image without it, same arguments. */
	assert_non_null(strstr(seen->argv, "/bin/sh -c "));
	assert_non_null(strstr(seen->argv, " /bin/bash -l -c echo hi"));
	/* The sandbox's envVars, then the request's (a later value wins). */
	assert_non_null(strstr(seen->env, "SBOX=s"));
	assert_non_null(strstr(seen->env, "OVER=request"));
	assert_null(strstr(seen->env, "OVER=sandbox"));
	/* No stdin asked: it is closed at once (cat ended by itself). */
	assert_int_equal(seen->eofs, eofs + 1);
	tu_res_free(&r);
}

static void
test_background_process_is_listed_found_by_tag_and_killed(void **state)
{
	struct tu_res r = { 0 }, c = { 0 };
	json_t *reply, *all, *end, *e, *p;
	long long pid;
	char msg[256];

	(void)state;
	stream(&r, "Start", "{\"process\":{\"cmd\":\"/bin/sleep\",\"args\":"
	    "[\"60\"]},\"tag\":\"srv\",\"stdin\":true}", NULL);
	pid = start_pid(&r);
	tu_res_free(&r);   /* the client goes; the process stays */
	tu_spin(50);
	assert_int_equal(unary("List", "{}", &reply), 200);
	p = json_array_get(json_object_get(reply, "processes"), 0);
	assert_int_equal(json_array_size(json_object_get(reply, "processes")),
	    1);
	assert_int_equal(json_integer_value(json_object_get(p, "pid")), pid);
	assert_string_equal(json_string_value(json_object_get(p, "tag")), "srv");
	assert_string_equal(json_string_value(json_object_get(json_object_get(p,
	    "config"), "cmd")), "/bin/sleep");
	json_decref(reply);
	stream(&c, "Connect", "{\"process\":{\"tag\":\"srv\"}}", NULL);
	assert_int_equal(start_pid(&c), pid);
	snprintf(msg, sizeof(msg), "{\"process\":{\"pid\":%lld},\"signal\":"
	    "\"SIGNAL_SIGKILL\"}", pid);
	assert_int_equal(unary("SendSignal", msg, &reply), 200);
	json_decref(reply);
	assert_true(tu_loop_until(tu_is_done, &c, 5000));
	all = messages(&c, &end);
	e = ev(json_array_get(all, json_array_size(all) - 1), "end");
	assert_non_null(e);
	assert_int_equal(json_integer_value(json_object_get(e, "exitCode")), -1);
	assert_string_equal(json_string_value(json_object_get(e, "status")),
	    "signal: killed");
	json_decref(all);
	json_decref(end);
	tu_res_free(&c);
	/* Gone from the list; a second kill finds nothing (the SDK: false). */
	assert_int_equal(unary("List", "{}", &reply), 200);
	assert_int_equal(json_array_size(json_object_get(reply, "processes")),
	    0);
	json_decref(reply);
	assert_int_equal(unary("SendSignal", msg, &reply), 404);
	assert_string_equal(json_string_value(json_object_get(reply, "code")),
	    "not_found");
	json_decref(reply);
}

static void
test_pty_echo_and_resize(void **state)
{
	const struct sbx_fake_session_seen *seen = sbx_fake_session_seen(T.drv);
	struct tu_res r = { 0 };
	json_t *reply;
	long long pid;
	char msg[256];

	(void)state;
	stream(&r, "Start", "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":"
	    "[\"-i\",\"-l\"]},\"pty\":{\"size\":{\"cols\":80,\"rows\":24}}}",
	    NULL);
	pid = start_pid(&r);
	assert_int_equal(seen->kind, SBX_SESSION_PTY);
	assert_int_equal(seen->cols, 80);
	assert_int_equal(seen->rows, 24);
	/* "a\r" echoed as "a\r\n": YQ0K in the pty field. */
	snprintf(msg, sizeof(msg), "{\"process\":{\"pid\":%lld},\"input\":"
	    "{\"pty\":\"YQ0=\"}}", pid);
	assert_int_equal(unary("SendInput", msg, &reply), 200);
	json_decref(reply);
	wait_for(&r, "{\"pty\":\"YQ0K\"}");
	snprintf(msg, sizeof(msg), "{\"process\":{\"pid\":%lld},\"pty\":"
	    "{\"size\":{\"cols\":100,\"rows\":30}}}", pid);
	assert_int_equal(unary("Update", msg, &reply), 200);
	json_decref(reply);
	assert_int_equal(seen->last_cols, 100);
	assert_int_equal(seen->last_rows, 30);
	snprintf(msg, sizeof(msg), "{\"process\":{\"pid\":%lld},\"signal\":"
	    "\"SIGNAL_SIGKILL\"}", pid);
	assert_int_equal(unary("SendSignal", msg, &reply), 200);
	json_decref(reply);
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	tu_res_free(&r);
}

static void
test_refusals_in_connects_shapes(void **state)
{
	struct tu_res r = { 0 };
	json_t *reply, *all, *end;

	(void)state;
	/* A cwd outside /work, user root: permission_denied in the end. */
	stream(&r, "Start", "{\"process\":{\"cmd\":\"pwd\",\"cwd\":\"/etc\"}}",
	    NULL);
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	assert_int_equal(r.status, 200);
	all = messages(&r, &end);
	assert_int_equal(json_array_size(all), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    end, "error"), "code")), "permission_denied");
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    end, "error"), "message")), "Only /work is reachable in an sbx "
	    "sandbox (E2B's home directory is /work).");
	json_decref(all);
	json_decref(end);
	stream(&r, "Start", "{\"process\":{\"cmd\":\"id\"}}",
	    "Authorization: Basic cm9vdDo=");
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	all = messages(&r, &end);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    end, "error"), "message")), "sbx runs every command as the sandbox "
	    "user.");
	json_decref(all);
	json_decref(end);
	/* The session refused by the driver: its code, mapped. */
	sbx_fake_fail_next(T.drv, SBX_FAKE_SESSION, SBX_E_NOT_RUNNING, 0);
	stream(&r, "Start", "{\"process\":{\"cmd\":\"id\"}}", NULL);
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	all = messages(&r, &end);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    end, "error"), "code")), "unavailable");
	json_decref(all);
	json_decref(end);
	/* A message that is not one: invalid_argument, 400, unary shape. */
	assert_int_equal(unary("SendInput", "[1]", &reply), 400);
	assert_string_equal(json_string_value(json_object_get(reply, "code")),
	    "invalid_argument");
	json_decref(reply);
	assert_int_equal(unary("StreamInput", "{}", &reply), 501);
	assert_string_equal(json_string_value(json_object_get(reply, "code")),
	    "unimplemented");
	json_decref(reply);
	assert_int_equal(unary("Nope", "{}", &reply), 404);
	json_decref(reply);
	assert_int_equal(unary("SendSignal", "{\"process\":{\"pid\":1000},"
	    "\"signal\":\"SIGNAL_SIGHUP\"}", &reply), 501);
	json_decref(reply);
	tu_res_free(&r);
}

static void
test_deadline_ends_the_stream_deadline_exceeded(void **state)
{
	struct tu_res r = { 0 };
	json_t *all, *end;

	(void)state;
	stream(&r, "Start", "{\"process\":{\"cmd\":\"sleep\",\"args\":[\"9\"]},"
	    "\"stdin\":true}", "Connect-Timeout-Ms: 1000");
	start_pid(&r);
	/* The broker ends a session past its timeout_ms with timeout. */
	assert_int_equal(sbx_fake_session_fail(sbx_fake_session_latest(T.drv),
	    SBX_E_TIMEOUT, "The exec ran past its timeout."), 0);
	assert_true(tu_loop_until(tu_is_done, &r, 5000));
	all = messages(&r, &end);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    end, "error"), "code")), "deadline_exceeded");
	json_decref(all);
	json_decref(end);
	tu_res_free(&r);
}

static int drained;

static void
drain_done(void *arg)
{
	(void)arg;
	drained = 1;
}

static void
test_drain_ends_streams_unavailable_at_once(void **state)
{
	struct tu_res r = { 0 };
	json_t *all, *end;

	(void)state;
	stream(&r, "Start", "{\"process\":{\"cmd\":\"cat\"},\"stdin\":true}",
	    NULL);
	start_pid(&r);
	drained = 0;
	api_server_drain(T.srv, drain_done, NULL);
	/* Not after shutdown_grace: now. */
	assert_true(tu_loop_until(tu_is_done, &r, 1000));
	all = messages(&r, &end);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    end, "error"), "code")), "unavailable");
	json_decref(all);
	json_decref(end);
	tu_res_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_start_streams_start_output_and_end, up, down),
		cmocka_unit_test_setup_teardown(
		    test_driver_gets_sh_fallback_cwd_envs_and_deadline, up, down),
		cmocka_unit_test_setup_teardown(
		    test_background_process_is_listed_found_by_tag_and_killed, up,
		    down),
		cmocka_unit_test_setup_teardown(test_pty_echo_and_resize, up, down),
		cmocka_unit_test_setup_teardown(test_refusals_in_connects_shapes,
		    up, down),
		cmocka_unit_test_setup_teardown(
		    test_deadline_ends_the_stream_deadline_exceeded, up, down),
		cmocka_unit_test_setup_teardown(
		    test_drain_ends_streams_unavailable_at_once, up, down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
