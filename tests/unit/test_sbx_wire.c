/* test_sbx_wire.c - proto/sbx_wire.c: every broker API body round-trips, the limits hold, malformed bodies are refused with the right code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbx_proto.h"
#include "sbx_wire.h"

/* body text -> decoded exec (0) or the error code it was refused with. */
static int
exec_from_text(const char *text, struct sbx_wire_exec *x, json_t **body,
    struct sbx_err *err)
{
	sbx_err_clear(err);
	*body = NULL;
	if (sbx_wire_body_object(text, strlen(text), sbx_wire_exec_fields, 0,
	    body, err) == -1)
		return -1;
	if (sbx_wire_exec_decode(*body, x, err) == -1) {
		json_decref(*body);
		*body = NULL;
		return -1;
	}
	return 0;
}

static void
assert_refused(const char *text, const char *code)
{
	struct sbx_wire_exec x;
	struct sbx_err err;
	json_t *body;

	if (exec_from_text(text, &x, &body, &err) == 0) {
		sbx_wire_exec_free(&x);
		json_decref(body);
		fail_msg("accepted: %.80s", text);
	}
	if (strcmp(err.code, code) != 0)
		fail_msg("%.80s: code %s (%s), want %s", text, err.code, err.message,
		    code);
	assert_true(strlen(err.message) > 5);
}

static void
test_exec_round_trip(void **state)
{
	static const char *const argv[] = { "sh", "-c", "echo \"$A\"", NULL };
	static const char *const env[] = { "A=hello world", "B_2=", NULL };
	static const unsigned char in[] = { 0, 1, 2, 0xff, 'x', '\n' };
	struct sbx_exec_req req = { argv, "/work/sub", env, in, sizeof(in),
	    1500, 4096 };
	struct sbx_wire_exec x;
	struct sbx_err err;
	json_t *o, *body;
	char *text;
	size_t i;

	(void)state;
	sbx_err_clear(&err);
	assert_non_null(o = sbx_wire_exec_encode(&req, &err));
	assert_non_null(text = json_dumps(o, JSON_COMPACT));
	json_decref(o);
	assert_int_equal(exec_from_text(text, &x, &body, &err), 0);
	free(text);
	for (i = 0; argv[i] != NULL; i++)
		assert_string_equal(x.req.argv[i], argv[i]);
	assert_null(x.req.argv[i]);
	assert_string_equal(x.req.cwd, "/work/sub");
	for (i = 0; env[i] != NULL; i++)
		assert_string_equal(x.req.env[i], env[i]);
	assert_null(x.req.env[i]);
	assert_int_equal(x.req.stdin_len, sizeof(in));
	assert_memory_equal(x.req.stdin_data, in, sizeof(in));
	assert_int_equal(x.req.timeout_ms, 1500);
	assert_int_equal(x.req.output_cap, 4096);
	sbx_wire_exec_free(&x);
	json_decref(body);
}

/* The broker's rule (the contract): env as an object too. */
static void
test_exec_env_object(void **state)
{
	struct sbx_wire_exec x;
	struct sbx_err err;
	json_t *body;

	(void)state;
	assert_int_equal(exec_from_text("{\"argv\":[\"env\"],\"env\":{\"A\":\"1\","
	    "\"_b\":\"x=y\"}}", &x, &body, &err), 0);
	assert_string_equal(x.req.env[0], "A=1");
	assert_string_equal(x.req.env[1], "_b=x=y");
	assert_null(x.req.env[2]);
	assert_null(x.req.cwd);
	assert_null(x.req.stdin_data);
	assert_int_equal(x.req.timeout_ms, 0);
	sbx_wire_exec_free(&x);
	json_decref(body);
}

/* A body of n strings in member name ("argv") or n env entries. */
static char *
body_with(const char *member, size_t n, int env)
{
	size_t cap = 64 + n * 16, i;
	char *s = malloc(cap), *p;

	assert_non_null(s);
	p = s + sprintf(s, "{%s\"%s\":[", env ? "\"argv\":[\"x\"]," : "",
	    member);
	for (i = 0; i < n; i++)
		p += sprintf(p, "%s\"%s%zu\"", i ? "," : "", env ? "V=" : "a", i);
	strcpy(p, "]}");
	return s;
}

static void
test_exec_limits(void **state)
{
	struct sbx_wire_exec x;
	struct sbx_err err;
	json_t *body;
	char *t;

	(void)state;
	t = body_with("argv", SBX_EXEC_ARGV_MAX, 0);
	assert_int_equal(exec_from_text(t, &x, &body, &err), 0);
	assert_non_null(x.req.argv[SBX_EXEC_ARGV_MAX - 1]);
	sbx_wire_exec_free(&x);
	json_decref(body);
	free(t);
	t = body_with("argv", SBX_EXEC_ARGV_MAX + 1, 0);
	assert_refused(t, SBX_E_BAD_REQUEST);
	free(t);
	t = body_with("env", SBX_EXEC_ENV_MAX, 1);
	assert_int_equal(exec_from_text(t, &x, &body, &err), 0);
	assert_string_equal(x.req.env[SBX_EXEC_ENV_MAX - 1], "V=1023");
	sbx_wire_exec_free(&x);
	json_decref(body);
	free(t);
	t = body_with("env", SBX_EXEC_ENV_MAX + 1, 1);
	assert_refused(t, SBX_E_LIMIT_EXCEEDED);
	free(t);
}

static void
test_exec_malformed(void **state)
{
	(void)state;
	assert_refused("", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":", SBX_E_BAD_REQUEST);
	assert_refused("[\"ls\"]", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"a\"],\"argv\":[\"b\"]}", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"ls\"],\"user\":\"root\"}", SBX_E_UNKNOWN_FIELD);
	assert_refused("{}", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":\"ls\"}", SBX_E_WRONG_TYPE);
	assert_refused("{\"argv\":[]}", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"\"]}", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[1]}", SBX_E_WRONG_TYPE);
	assert_refused("{\"argv\":[\"a\\u0000b\"]}", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"ls\"],\"cwd\":\"/etc\"}",
	    SBX_E_PATH_OUTSIDE_WORK);
	assert_refused("{\"argv\":[\"ls\"],\"cwd\":\"/work/../etc\"}",
	    SBX_E_PATH_OUTSIDE_WORK);
	assert_refused("{\"argv\":[\"ls\"],\"cwd\":7}", SBX_E_WRONG_TYPE);
	assert_refused("{\"argv\":[\"ls\"],\"env\":\"A=1\"}", SBX_E_WRONG_TYPE);
	assert_refused("{\"argv\":[\"ls\"],\"env\":[\"1A=x\"]}", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"ls\"],\"env\":[\"=x\"]}", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"ls\"],\"env\":[\"NOEQUALS\"]}",
	    SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"ls\"],\"env\":{\"A-B\":\"x\"}}",
	    SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"ls\"],\"env\":{\"A\":1}}", SBX_E_WRONG_TYPE);
	assert_refused("{\"argv\":[\"ls\"],\"stdin\":\"@@@\"}", SBX_E_BAD_REQUEST);
	assert_refused("{\"argv\":[\"ls\"],\"stdin\":12}", SBX_E_WRONG_TYPE);
	assert_refused("{\"argv\":[\"ls\"],\"timeout_ms\":-1}", SBX_E_WRONG_TYPE);
	assert_refused("{\"argv\":[\"ls\"],\"output_cap\":1.5}", SBX_E_WRONG_TYPE);
}

static void
test_exec_encode_refuses(void **state)
{
	static const char *const bad[] = { "\xff", NULL };
	static const char *const none[] = { NULL };
	struct sbx_exec_req req = { bad, NULL, NULL, NULL, 0, 0, 0 };
	struct sbx_err err;

	(void)state;
	sbx_err_clear(&err);
	assert_null(sbx_wire_exec_encode(&req, &err));
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	req.argv = none;
	assert_null(sbx_wire_exec_encode(&req, &err));
	assert_null(sbx_wire_exec_encode(NULL, &err));
}

static void
test_spec_round_trip(void **state)
{
	static const char *const allow[] = { "debian:12", "alpine:3", NULL };
	struct sbx_spec in = { "alpine:3", 1, 1 << 30, 500000000, 64 }, out;
	struct sbx_err err;
	json_t *o, *body;
	char *t;

	(void)state;
	assert_non_null(o = sbx_wire_spec_encode(&in));
	assert_non_null(t = json_dumps(o, JSON_COMPACT));
	json_decref(o);
	assert_int_equal(sbx_wire_body_object(t, strlen(t), sbx_wire_spec_fields,
	    1, &body, &err), 0);
	free(t);
	assert_int_equal(sbx_wire_spec_decode(body, allow, &out, &err), 0);
	assert_string_equal(out.image, "alpine:3");
	assert_int_equal(out.egress, 1);
	assert_int_equal(out.memory_bytes, 1 << 30);
	assert_int_equal(out.nano_cpus, 500000000);
	assert_int_equal(out.pids, 64);
	/* not in the allowlist; the error order is the broker's */
	json_object_set_new(body, "image", json_string("evil:1"));
	json_object_del(body, "egress");
	assert_int_equal(sbx_wire_spec_decode(body, allow, &out, &err), -1);
	assert_string_equal(err.code, SBX_E_IMAGE_NOT_ALLOWED);
	assert_null(out.image);
	assert_int_equal(sbx_wire_spec_decode(body, NULL, &out, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);   /* egress required */
	json_object_set_new(body, "egress", json_string("yes"));
	assert_int_equal(sbx_wire_spec_decode(body, NULL, &out, &err), -1);
	assert_string_equal(err.code, SBX_E_WRONG_TYPE);
	json_object_set_new(body, "egress", json_false());
	json_object_set_new(body, "pids", json_integer(-3));
	assert_int_equal(sbx_wire_spec_decode(body, NULL, &out, &err), -1);
	assert_string_equal(err.code, SBX_E_WRONG_TYPE);
	json_decref(body);
	/* an empty ensure body is an empty object, then egress is missing */
	assert_int_equal(sbx_wire_body_object("", 0, sbx_wire_spec_fields, 1,
	    &body, &err), 0);
	assert_int_equal(sbx_wire_spec_decode(body, NULL, &out, &err), -1);
	json_decref(body);
	/* NULL spec: egress false only */
	assert_non_null(o = sbx_wire_spec_encode(NULL));
	assert_int_equal(json_object_size(o), 1);
	assert_true(json_is_false(json_object_get(o, "egress")));
	json_decref(o);
}

static void
test_status_round_trip(void **state)
{
	struct sbx_status st, back;
	struct sbx_err err;
	json_t *o;

	(void)state;
	memset(&st, 0, sizeof(st));
	strcpy(st.id, "box-1");
	st.state = SBX_STATE_STOPPED;
	strcpy(st.image, "debian:12");
	st.egress = 1;
	st.created_at_ms = 1700000000123;
	st.last_used_at_ms = 1700000009999;
	strcpy(st.stop_reason, "idle");
	st.usage.present = 1;
	st.usage.bytes = 8192;
	st.usage.files = 2;
	st.usage.partial = 1;
	strcpy(st.usage.partial_reason, "timeout");
	assert_non_null(o = sbx_wire_status_encode(&st, 1));
	assert_int_equal(sbx_wire_status_decode(o, &back, &err), 0);
	json_decref(o);
	assert_string_equal(back.id, "box-1");
	assert_int_equal(back.state, SBX_STATE_STOPPED);
	assert_string_equal(back.image, "debian:12");
	assert_int_equal(back.egress, 1);
	assert_int_equal(back.created_at_ms, 1700000000123);
	assert_int_equal(back.last_used_at_ms, 1700000009999);
	assert_string_equal(back.stop_reason, "idle");
	assert_int_equal(back.usage.present, 1);
	assert_int_equal(back.usage.bytes, 8192);
	assert_string_equal(back.usage.partial_reason, "timeout");
	/* absent: no image, egress false, created_at null, no reason */
	st.state = SBX_STATE_ABSENT;
	assert_non_null(o = sbx_wire_status_encode(&st, 0));
	assert_true(json_is_null(json_object_get(o, "image")));
	assert_null(json_object_get(o, "usage"));
	assert_true(json_is_null(json_object_get(o, "stop_reason")));
	assert_true(json_is_null(json_object_get(o, "created_at")));
	assert_true(json_is_false(json_object_get(o, "egress")));
	assert_string_equal(json_string_value(json_object_get(o, "state")),
	    "absent");
	json_decref(o);
	/* malformed */
	o = json_pack("{s:i}", "state", 3);
	assert_int_equal(sbx_wire_status_decode(o, &back, &err), -1);
	json_decref(o);
	o = json_pack("{s:s,s:s}", "state", "running", "usage", "lots");
	assert_int_equal(sbx_wire_status_decode(o, &back, &err), -1);
	json_decref(o);
}

static void
test_sandboxes_decode(void **state)
{
	struct sbx_status *sts;
	struct sbx_err err;
	json_t *a;
	size_t n;

	(void)state;
	a = json_pack("[{s:s,s:s},{s:s,s:s}]", "id", "a", "state", "running",
	    "id", "b-2", "state", "stopped");
	assert_int_equal(sbx_wire_sandboxes_decode(a, &sts, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(sts[1].id, "b-2");
	free(sts);
	json_decref(a);
	/* an id the rule refuses makes the whole answer malformed */
	a = json_pack("[{s:s,s:s}]", "id", "../x", "state", "running");
	assert_int_equal(sbx_wire_sandboxes_decode(a, &sts, &n, &err), -1);
	assert_null(sts);
	assert_int_equal(n, 0);
	json_decref(a);
	a = json_object();
	assert_int_equal(sbx_wire_sandboxes_decode(a, &sts, &n, &err), -1);
	json_decref(a);
}

static void
test_list_round_trip(void **state)
{
	struct sbx_dirent ents[3], *back;
	char cur[SBX_WIRE_CURSOR_MAX + 1], name[SBX_PATH_SEGMENT_MAX + 1];
	struct sbx_err err;
	json_t *o;
	size_t n;
	int trunc;

	(void)state;
	memset(ents, 0, sizeof(ents));
	strcpy(ents[0].name, "a.txt");
	ents[0].type = "file";
	ents[0].size = 12;
	ents[0].mode = 0644;
	ents[0].mtime = 1700000000;
	strcpy(ents[1].name, "caf\xc3\xa9");
	ents[1].type = "dir";
	strcpy(ents[2].name, "bad\xff\xfe");     /* not UTF-8 */
	ents[2].type = NULL;
	assert_non_null(o = sbx_wire_list_encode(ents, 3, 1));
	assert_true(json_is_true(json_object_get(o, "truncated")));
	assert_non_null(json_object_get(json_array_get(json_object_get(o,
	    "entries"), 2), "name_b64"));
	assert_int_equal(sbx_wire_list_decode(o, &back, &n, &trunc, &err), 0);
	assert_int_equal(n, 3);
	assert_int_equal(trunc, 1);
	assert_string_equal(back[0].name, "a.txt");
	assert_string_equal(back[0].type, "file");
	assert_int_equal(back[0].mode, 0644);
	assert_int_equal(back[0].size, 12);
	assert_int_equal(back[0].mtime, 1700000000);
	assert_string_equal(back[1].name, "caf\xc3\xa9");
	assert_string_equal(back[2].name, "bad\xff\xfe");
	assert_string_equal(back[2].type, "other");
	/* the cursor names the last entry */
	assert_int_equal(sbx_wire_cursor_decode(json_string_value(
	    json_object_get(o, "cursor")), json_string_length(json_object_get(o,
	    "cursor")), name, &err), 0);
	assert_string_equal(name, "bad\xff\xfe");
	free(back);
	json_decref(o);
	/* not truncated: no cursor; the bare v1 array decodes too */
	assert_non_null(o = sbx_wire_list_encode(ents, 1, 0));
	assert_true(json_is_null(json_object_get(o, "cursor")));
	json_decref(o);
	assert_non_null(o = sbx_wire_dirents_encode(ents, 2));
	assert_int_equal(sbx_wire_list_decode(o, &back, &n, &trunc, &err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(trunc, 0);
	free(back);
	json_decref(o);
	o = json_pack("{s:s}", "entries", "x");
	assert_int_equal(sbx_wire_list_decode(o, &back, &n, &trunc, &err), -1);
	json_decref(o);
	/* cursors */
	assert_int_equal(sbx_wire_cursor_encode("x/y", cur, sizeof(cur)), 4);
	assert_int_equal(sbx_wire_cursor_decode(cur, strlen(cur), name, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	assert_int_equal(sbx_wire_cursor_decode("", 0, name, &err), 0);
	assert_string_equal(name, "");
	assert_int_equal(sbx_wire_cursor_decode("!!", 2, name, &err), -1);
	assert_int_equal(sbx_wire_cursor_decode("AA", 2, name, &err), -1); /* NUL */
	assert_int_equal(sbx_wire_cursor_encode("", cur, sizeof(cur)), 0);
}

static void
test_mode(void **state)
{
	struct sbx_err err;
	uint32_t m = 1;
	char out[8];

	(void)state;
	assert_int_equal(sbx_wire_mode_decode("0644", &m, &err), 0);
	assert_int_equal(m, 0644);
	assert_int_equal(sbx_wire_mode_decode("755", &m, &err), 0);
	assert_int_equal(m, 0755);
	assert_string_equal(sbx_wire_mode_encode(0640, out), "0640");
	assert_int_equal(sbx_wire_mode_decode(out, &m, &err), 0);
	assert_int_equal(m, 0640);
	assert_int_equal(sbx_wire_mode_decode("4755", &m, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	assert_int_equal(sbx_wire_mode_decode("08", &m, &err), -1);
	assert_int_equal(sbx_wire_mode_decode("", &m, &err), -1);
	assert_int_equal(sbx_wire_mode_decode("00644", &m, &err), -1);
	assert_int_equal(sbx_wire_mode_decode("-1", &m, &err), -1);
	assert_int_equal(sbx_wire_mode_decode("+644", &m, &err), -1);
}

static void
test_error_and_health(void **state)
{
	struct sbx_health h, back;
	struct sbx_err e;
	json_t *o;
	char *t;

	(void)state;
	assert_non_null(o = sbx_wire_error_encode(SBX_E_NOT_FOUND, "No such box."));
	assert_non_null(t = json_dumps(o, JSON_COMPACT));
	assert_int_equal(sbx_wire_error_decode(t, strlen(t), &e), 0);
	assert_string_equal(e.code, SBX_E_NOT_FOUND);
	assert_string_equal(e.message, "No such box.");
	free(t);
	json_decref(o);
	assert_int_equal(sbx_wire_error_decode("{\"error\":{}}", 12, &e), -1);
	assert_false(sbx_err_is_set(&e));
	assert_int_equal(sbx_wire_error_decode("<html>", 6, &e), -1);
	assert_int_equal(sbx_wire_error_decode("", 0, &e), -1);
	assert_int_equal(sbx_wire_error_decode("{\"error\":{\"code\":\"x\"}}", 22,
	    &e), 0);
	assert_string_equal(e.message, "x");
	memset(&h, 0, sizeof(h));
	h.ok = 0;
	strcpy(h.reason, "helper missing");
	strcpy(h.runtime, "Docker Engine 20.10.24");
	strcpy(h.api_version, "1.41");
	assert_non_null(o = sbx_wire_health_encode(&h, "0.9", "engine"));
	assert_string_equal(json_string_value(json_object_get(o, "driver")),
	    "engine");
	assert_int_equal(sbx_wire_health_decode(o, &back, &e), 0);
	assert_int_equal(back.ok, 0);
	assert_string_equal(back.status, "degraded");
	assert_string_equal(back.reason, "helper missing");
	assert_string_equal(back.api_version, "1.41");
	json_decref(o);
	h.ok = 1;
	assert_non_null(o = sbx_wire_health_encode(&h, "0.9", "engine"));
	assert_true(json_is_null(json_object_get(o, "reason")));
	assert_int_equal(sbx_wire_health_decode(o, &back, &e), 0);
	assert_int_equal(back.ok, 1);
	json_decref(o);
	assert_non_null(o = sbx_wire_written_encode("/work/a", 3));
	assert_int_equal(json_integer_value(json_object_get(o, "size")), 3);
	json_decref(o);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exec_round_trip),
		cmocka_unit_test(test_exec_env_object),
		cmocka_unit_test(test_exec_limits),
		cmocka_unit_test(test_exec_malformed),
		cmocka_unit_test(test_exec_encode_refuses),
		cmocka_unit_test(test_spec_round_trip),
		cmocka_unit_test(test_status_round_trip),
		cmocka_unit_test(test_sandboxes_decode),
		cmocka_unit_test(test_list_round_trip),
		cmocka_unit_test(test_mode),
		cmocka_unit_test(test_error_and_health),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
