/* test_sbx_usage.c - /work usage JSON (strict reading of untrusted input, round trip) and the ?usage= flag (adr/0017). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sbx_proto.h"
#include "sbx_usage.h"

static const char good[] = "{\"bytes\":4448256,\"apparent_bytes\":322001,\"files\":1003,"
    "\"dirs\":1,\"entries\":1005,\"skipped\":0,\"elapsed_ms\":4,\"partial\":false}";

static void
test_helper_line_is_read_and_written_back_the_same(void **state)
{
	struct sbx_usage u;
	struct sbx_err e;
	json_t *in, *out;

	(void)state;
	in = json_loads(good, 0, NULL);
	assert_non_null(in);
	assert_int_equal(sbx_usage_from_json(in, &u, &e), 0);
	assert_int_equal(u.present, 1);
	assert_int_equal(u.bytes, 4448256);
	assert_int_equal(u.apparent_bytes, 322001);
	assert_int_equal(u.files, 1003);
	assert_int_equal(u.entries, 1005);
	assert_int_equal(u.partial, 0);
	out = sbx_usage_json(&u);
	/* "skipped" is the helper's own; the rest goes out unchanged. */
	json_object_del(in, "skipped");
	assert_true(json_equal(in, out));
	json_decref(in);
	json_decref(out);
}

static void
test_partial_needs_a_known_reason(void **state)
{
	static const char *const bad[] = {
		"{\"bytes\":1,\"apparent_bytes\":1,\"files\":1,\"dirs\":0,\"entries\":1,"
		    "\"elapsed_ms\":1,\"partial\":true}",
		"{\"bytes\":1,\"apparent_bytes\":1,\"files\":1,\"dirs\":0,\"entries\":1,"
		    "\"elapsed_ms\":1,\"partial\":true,\"partial_reason\":\"\\u001b[31m\"}",
		"{\"bytes\":-1,\"apparent_bytes\":1,\"files\":1,\"dirs\":0,\"entries\":1,"
		    "\"elapsed_ms\":1,\"partial\":false}",
		"{\"bytes\":1.5,\"apparent_bytes\":1,\"files\":1,\"dirs\":0,\"entries\":1,"
		    "\"elapsed_ms\":1,\"partial\":false}",
		"{\"apparent_bytes\":1,\"files\":1,\"dirs\":0,\"entries\":1,"
		    "\"elapsed_ms\":1,\"partial\":false}",
		"{\"bytes\":1,\"apparent_bytes\":1,\"files\":1,\"dirs\":0,\"entries\":1,"
		    "\"elapsed_ms\":1,\"partial\":\"no\"}",
		"[1,2]", "\"usage\"", "7",
	};
	struct sbx_usage u;
	struct sbx_err e;
	json_t *j;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		j = json_loads(bad[i], JSON_DECODE_ANY, NULL);
		assert_non_null(j);
		sbx_err_clear(&e);
		assert_int_equal(sbx_usage_from_json(j, &u, &e), -1);
		assert_string_equal(e.code, SBX_E_RUNTIME);
		assert_int_equal(u.present, 0);
		json_decref(j);
	}
	j = json_loads("{\"bytes\":1,\"apparent_bytes\":1,\"files\":1,\"dirs\":0,"
	    "\"entries\":1,\"elapsed_ms\":1,\"partial\":true,\"partial_reason\":"
	    "\"timeout\"}", 0, NULL);
	assert_int_equal(sbx_usage_from_json(j, &u, &e), 0);
	assert_int_equal(u.partial, 1);
	assert_string_equal(u.partial_reason, "timeout");
	json_decref(j);
}

static void
test_null_is_not_counted(void **state)
{
	struct sbx_usage u;
	struct sbx_err e;
	json_t *j;

	(void)state;
	memset(&u, 0x55, sizeof(u));
	assert_int_equal(sbx_usage_from_json(json_null(), &u, &e), 0);
	assert_int_equal(u.present, 0);
	assert_int_equal(u.bytes, 0);
	j = sbx_usage_json(&u);
	assert_true(json_is_null(j));
	json_decref(j);
}

static void
test_query_flag_accepts_1_and_0_only(void **state)
{
	struct sbx_err e;

	(void)state;
	assert_int_equal(sbx_query_flag(NULL, "usage", &e), 0);
	assert_int_equal(sbx_query_flag("", "usage", &e), 0);
	assert_int_equal(sbx_query_flag("path=%2Fwork", "usage", &e), 0);
	assert_int_equal(sbx_query_flag("usage=1", "usage", &e), 1);
	assert_int_equal(sbx_query_flag("x=2&usage=1", "usage", &e), 1);
	assert_int_equal(sbx_query_flag("usage=0", "usage", &e), 0);
	assert_int_equal(sbx_query_flag("us%61ge=1", "usage", &e), 1);
	assert_int_equal(sbx_query_flag("usage=true", "usage", &e), -1);
	assert_string_equal(e.code, SBX_E_BAD_REQUEST);
	assert_int_equal(sbx_query_flag("usage=", "usage", &e), -1);
	assert_int_equal(sbx_query_flag("usage=1&usage=1", "usage", &e), -1);
	assert_int_equal(sbx_query_flag("usage=%31%00", "usage", &e), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_helper_line_is_read_and_written_back_the_same),
		cmocka_unit_test(test_partial_needs_a_known_reason),
		cmocka_unit_test(test_null_is_not_counted),
		cmocka_unit_test(test_query_flag_accepts_1_and_0_only),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
