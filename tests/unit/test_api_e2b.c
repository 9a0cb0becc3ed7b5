/* test_api_e2b.c - what the E2B control plane reads and how its errors look: the SDK's metadata filter, states, members, templates, the {port}-{id}.{domain} Host (api/api_e2b_parse.c, adr/0059). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "api_e2b_int.h"
#include "sbx_proto.h"

static json_t *
filter_ok(const char *q)
{
	struct sbx_err err;
	json_t *o = NULL;

	sbx_err_clear(&err);
	assert_int_equal(api_e2b_metadata_filter(q, &o, &err), 0);
	assert_non_null(o);
	return o;
}

static void
filter_bad(const char *q)
{
	struct sbx_err err;
	json_t *o = (json_t *)1;

	sbx_err_clear(&err);
	assert_int_equal(api_e2b_metadata_filter(q, &o, &err), -1);
	assert_null(o);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
}

/* The SDK 2.51 (SandboxPaginator.nextItems): encodeURIComponent of each
 * key and value, then URLSearchParams; the query value arrives decoded
 * once. {"who": "a b&c=d%", "app": "t1"} becomes this text. */
static void
test_metadata_filter_reads_the_sdks_double_encoding(void **state)
{
	json_t *o = filter_ok("who=a%2520b%2526c%253Dd%2525&app=t1");

	(void)state;
	assert_int_equal(json_object_size(o), 2);
	assert_string_equal(json_string_value(json_object_get(o, "who")),
	    "a b&c=d%");
	assert_string_equal(json_string_value(json_object_get(o, "app")), "t1");
	assert_true(api_e2b_metadata_match("{\"app\":\"t1\",\"who\":\"a b&c=d%\","
	    "\"x\":\"y\"}", o));
	assert_false(api_e2b_metadata_match("{\"app\":\"t1\"}", o));
	assert_false(api_e2b_metadata_match("{\"app\":\"t2\",\"who\":"
	    "\"a b&c=d%\"}", o));
	json_decref(o);
}

static void
test_metadata_filter_plain_empty_and_broken(void **state)
{
	json_t *o;

	(void)state;
	o = filter_ok("user=abc&&app=prod");
	assert_int_equal(json_object_size(o), 2);
	json_decref(o);
	o = filter_ok("");
	assert_int_equal(json_object_size(o), 0);
	assert_true(api_e2b_metadata_match("{}", o));
	json_decref(o);
	filter_bad("novalue");
	filter_bad("=v");
	filter_bad("k=%zz");
	filter_bad("k=%00");
	filter_bad("k=%2");
	filter_bad("k=%25zz");   /* the second decoding is checked too */
}

static void
test_state_filter(void **state)
{
	struct sbx_err err;

	(void)state;
	sbx_err_clear(&err);
	assert_int_equal(api_e2b_state_filter(NULL, &err), 3);
	assert_int_equal(api_e2b_state_filter("", &err), 3);
	assert_int_equal(api_e2b_state_filter("running", &err), 1);
	assert_int_equal(api_e2b_state_filter("paused", &err), 2);
	assert_int_equal(api_e2b_state_filter("running,paused", &err), 3);
	assert_int_equal(api_e2b_state_filter("killed", &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	assert_int_equal(api_e2b_state_filter("running,", &err), 1);
	assert_int_equal(api_e2b_state_filter("runningx", &err), -1);
}

static void
test_string_maps_are_objects_of_strings_within_their_cap(void **state)
{
	struct sbx_err err;
	json_t *v;
	char *out = NULL;

	(void)state;
	sbx_err_clear(&err);
	assert_int_equal(api_e2b_string_map(NULL, "metadata", 10, &out, &err), 0);
	assert_string_equal(out, "{}");
	free(out);
	v = json_pack("{s:s,s:s}", "b", "2", "a", "1");
	assert_int_equal(api_e2b_string_map(v, "envVars", 100, &out, &err), 0);
	assert_string_equal(out, "{\"a\":\"1\",\"b\":\"2\"}");
	free(out);
	assert_int_equal(api_e2b_string_map(v, "envVars", 10, &out, &err), -1);
	assert_null(out);
	assert_non_null(strstr(err.message, "e2b_envs_max"));
	json_decref(v);
	v = json_pack("{s:i}", "n", 1);
	assert_int_equal(api_e2b_string_map(v, "metadata", 100, &out, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	json_decref(v);
	v = json_pack("[s]", "x");
	assert_int_equal(api_e2b_string_map(v, "metadata", 100, &out, &err), -1);
	json_decref(v);
}

static void
test_timeout_is_seconds_up_to_the_max(void **state)
{
	struct sbx_err err;
	int64_t ms = 0;
	json_t *v;

	(void)state;
	sbx_err_clear(&err);
	assert_int_equal(api_e2b_timeout(NULL, 300000, 3600000, &ms, &err), 0);
	assert_int_equal(ms, 300000);
	v = json_integer(15);
	assert_int_equal(api_e2b_timeout(v, 1, 3600000, &ms, &err), 0);
	assert_int_equal(ms, 15000);
	json_decref(v);
	v = json_integer(3601);
	assert_int_equal(api_e2b_timeout(v, 1, 3600000, &ms, &err), -1);
	assert_non_null(strstr(err.message, "e2b_timeout_max"));
	json_decref(v);
	v = json_integer(-1);
	assert_int_equal(api_e2b_timeout(v, 1, 3600000, &ms, &err), -1);
	json_decref(v);
	v = json_string("10");
	assert_int_equal(api_e2b_timeout(v, 1, 3600000, &ms, &err), -1);
	json_decref(v);
}

static void
test_templates_name_images(void **state)
{
	char *list[] = { "base=", "py=python:3.12", "bad", NULL };
	const char *img = NULL;
	size_t n = 99;

	(void)state;
	assert_int_equal(api_e2b_template(list, "base", &img, &n), 1);
	assert_int_equal(n, 0);
	assert_int_equal(api_e2b_template(list, "py", &img, &n), 1);
	assert_string_equal(img, "python:3.12");
	assert_int_equal(api_e2b_template(list, "p", &img, &n), 0);
	assert_int_equal(api_e2b_template(list, "bad", &img, &n), 0);
	assert_int_equal(api_e2b_template(NULL, "base", &img, &n), 0);
}

static int
host(const char *h, const char *domain, int *port, char *id)
{
	return api_e2b_host_parse(h, strlen(h), domain, port, id, 64);
}

static void
test_host_form_is_port_dash_id_dot_domain(void **state)
{
	char id[64];
	int port = 0;

	(void)state;
	assert_int_equal(host("49983-e2babc.e2b.example.com", "e2b.example.com",
	    &port, id), 1);
	assert_int_equal(port, 49983);
	assert_string_equal(id, "e2babc");
	/* A port on either side is not part of the name. */
	assert_int_equal(host("3000-e2babc.E2B.example.com:8080",
	    "e2b.example.com:8080", &port, id), 1);
	assert_int_equal(port, 3000);
	/* An NPC name may hold dashes: the port ends at the first. */
	assert_int_equal(host("8000-my-npc.e2b.example.com", "e2b.example.com",
	    &port, id), 1);
	assert_string_equal(id, "my-npc");
	assert_int_equal(host("e2b.example.com", "e2b.example.com", &port,
	    id), 0);
	assert_int_equal(host("0-x.e2b.example.com", "e2b.example.com", &port,
	    id), 0);
	assert_int_equal(host("65536-x.e2b.example.com", "e2b.example.com",
	    &port, id), 0);
	assert_int_equal(host("80-x.other.com", "e2b.example.com", &port, id),
	    0);
	assert_int_equal(host("80-x.xe2b.example.com", "e2b.example.com",
	    &port, id), 0);
	assert_int_equal(host("80x.e2b.example.com", "e2b.example.com", &port,
	    id), 0);
	assert_int_equal(host("80-X_Y.e2b.example.com", "e2b.example.com",
	    &port, id), 0);
	assert_int_equal(host("80-a.b.e2b.example.com", "e2b.example.com",
	    &port, id), 0);
	assert_int_equal(host("80-x.e2b.example.com", NULL, &port, id), 0);
	assert_int_equal(host("80-x.e2b.example.com", "", &port, id), 0);
}

static void
test_errors_have_e2bs_shapes(void **state)
{
	struct sbx_err err;
	json_t *o;
	char t[40];

	(void)state;
	sbx_err_set(&err, SBX_E_NOT_FOUND, "Sandbox x not found.");
	o = api_e2b_error_json(&err, 404);
	assert_int_equal(json_integer_value(json_object_get(o, "code")), 404);
	assert_string_equal(json_string_value(json_object_get(o, "message")),
	    "Sandbox x not found.");
	json_decref(o);
	o = api_e2b_envd_error_json(&err, 401);
	assert_string_equal(json_string_value(json_object_get(o, "code")),
	    "unauthenticated");
	json_decref(o);
	o = api_e2b_envd_error_json(&err, 502);
	assert_string_equal(json_string_value(json_object_get(o, "code")),
	    "unavailable");
	json_decref(o);
	o = api_e2b_envd_error_json(&err, 418);
	assert_string_equal(json_string_value(json_object_get(o, "code")),
	    "internal");
	json_decref(o);
	api_e2b_time(1764658922345LL, t, sizeof(t));
	assert_string_equal(t, "2025-12-02T07:02:02.345Z");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metadata_filter_reads_the_sdks_double_encoding),
		cmocka_unit_test(test_metadata_filter_plain_empty_and_broken),
		cmocka_unit_test(test_state_filter),
		cmocka_unit_test(test_string_maps_are_objects_of_strings_within_their_cap),
		cmocka_unit_test(test_timeout_is_seconds_up_to_the_max),
		cmocka_unit_test(test_templates_name_images),
		cmocka_unit_test(test_host_form_is_port_dash_id_dot_domain),
		cmocka_unit_test(test_errors_have_e2bs_shapes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
