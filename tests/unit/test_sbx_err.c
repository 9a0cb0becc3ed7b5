/* test_sbx_err.c - the fixed errors of proto/sbx_err.h: one out-of-memory and one sandbox-id sentence, and the statuses they map to. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sbx_err.h"
#include "sbx_proto.h"

/* What a client reads on a 500 for memory: the code, the one sentence. */
static void
test_oom_is_internal_with_the_one_sentence(void **state)
{
	struct sbx_err err;

	(void)state;
	sbx_err_clear(&err);
	assert_int_equal(sbx_err_oom(&err), -1);
	assert_string_equal(err.code, SBX_E_INTERNAL);
	assert_string_equal(err.message, "Out of memory.");
	assert_int_equal(sbx_err_http_status(&err), 500);
}

/* A bad id is a 400 with the rule of SPEC §4 spelled out. */
static void
test_bad_id_states_the_id_rule(void **state)
{
	struct sbx_err err;

	(void)state;
	sbx_err_clear(&err);
	assert_int_equal(sbx_err_bad_id(&err), -1);
	assert_string_equal(err.code, SBX_E_INVALID_ID);
	assert_string_equal(err.message,
	    "A sandbox id must match [a-z0-9][a-z0-9-]{0,62}.");
	assert_int_equal(sbx_err_http_status(&err), 400);
}

/* Like sbx_err_set: a NULL err is allowed and still returns -1. */
static void
test_fixed_errors_accept_null(void **state)
{
	(void)state;
	assert_int_equal(sbx_err_oom(NULL), -1);
	assert_int_equal(sbx_err_bad_id(NULL), -1);
}

/* A table row with a conversion is a format like the literal it replaced. */
static void
test_table_rows_format_like_literals(void **state)
{
	struct sbx_err err;

	(void)state;
	sbx_err_set(&err, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX, "abc");
	assert_string_equal(err.message, "sandbox abc does not exist");
	sbx_err_set(&err, SBX_E_TOO_LARGE, SBX_MSG_FILE_TOO_LARGE, 10LL);
	assert_string_equal(err.message, "The file is larger than 10 bytes.");
	assert_int_equal(sbx_err_http_status(&err), 413);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oom_is_internal_with_the_one_sentence),
		cmocka_unit_test(test_bad_id_states_the_id_rule),
		cmocka_unit_test(test_fixed_errors_accept_null),
		cmocka_unit_test(test_table_rows_format_like_literals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
