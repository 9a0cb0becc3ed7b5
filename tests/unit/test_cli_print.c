/* test_cli_print.c - sbxctl's printing of server text, --json output and times: no raw control byte, no crash on any int64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/cli_print.h"

/* Nothing below 0x20, no DEL, no C1 (C2 80..9F) in what goes to a terminal. */
static void
assert_no_controls(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	for (; *p != '\0'; p++) {
		assert_true(*p >= 0x20 && *p != 0x7f);
		if (p[0] == 0xC2 && p[1] != '\0')
			assert_true(p[1] > 0x9F);
	}
}

static void
test_escape_turns_controls_into_visible_escapes(void **state)
{
	static const struct {
		const char *in;
		size_t n;
		const char *out;
	} cases[] = {
		{ "plain.txt", 9, "plain.txt" },
		{ "\x1b[31mred\x1b[0m", 12, "\\x1b[31mred\\x1b[0m" },
		{ "a\nb\rc\td", 7, "a\\x0ab\\x0dc\\x09d" },
		{ "nul\0x", 5, "nul\\x00x" },
		{ "back\\slash", 10, "back\\\\slash" },
		{ "del\x7f", 4, "del\\x7f" },
		{ "c1\xC2\x9B" "2J", 6, "c1\\xc2\\x9b2J" },     /* CSI as C1 */
		{ "\xE2\x82\xAC caf\xC3\xA9", 9, "\xE2\x82\xAC caf\xC3\xA9" },
		{ "bad\xFF\xC3", 5, "bad\\xff\\xc3" },
		{ "\xED\xA0\x80", 3, "\\xed\\xa0\\x80" },       /* surrogate */
		{ "\xF0\x9F\x98\x80", 4, "\xF0\x9F\x98\x80" },
	};
	char out[256];
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		n = cli_escape(cases[i].in, cases[i].n, out, sizeof(out));
		assert_string_equal(out, cases[i].out);
		assert_int_equal(n, strlen(cases[i].out));
		assert_no_controls(out);
	}
}

static void
test_escape_cuts_on_whole_escapes_and_terminates(void **state)
{
	char in[600], out[64];
	size_t i, n;
	unsigned seed = 7;

	(void)state;
	memset(in, 0x1b, sizeof(in));
	n = cli_escape(in, sizeof(in), out, sizeof(out));
	assert_true(n < sizeof(out));
	assert_int_equal(out[n], '\0');
	assert_string_equal(out + n - 3, "...");
	/* every escape kept is whole: the cut is after a "\x1b" */
	assert_int_equal((n - 3) % 4, 0);
	/* random bytes of every kind never print a control */
	for (i = 0; i < 20000; i++) {
		size_t len = (size_t)(rand_r(&seed) % sizeof(in)), k;

		for (k = 0; k < len; k++)
			in[k] = (char)rand_r(&seed);
		n = cli_escape(in, len, out, sizeof(out));
		assert_true(n < sizeof(out));
		assert_no_controls(out);
	}
	assert_int_equal(cli_escape("x", 1, out, 4), 0);   /* cap too small */
}

static void
test_json_output_escapes_c1_and_del_as_well_as_c0(void **state)
{
	/* A name a player chose: ESC, CSI as C1 (U+009B), NEL, DEL, then
	 * text that must stay as it is (é, €, U+00A0). */
	static const char name[] = "a\x1b[2J\xC2\x9B" "31m\xC2\x85\x7f"
	    "caf\xC3\xA9 \xE2\x82\xAC\xC2\xA0";
	json_t *v = json_pack("{s:s,s:[s]}", "name", name, "list", name);
	char *text;
	const unsigned char *p;

	(void)state;
	assert_non_null(v);
	text = cli_json_text(v);
	assert_non_null(text);
	/* No raw control but the indent's line breaks. */
	for (p = (const unsigned char *)text; *p != '\0'; p++) {
		assert_true((*p >= 0x20 || *p == '\n') && *p != 0x7f);
		if (p[0] == 0xC2)
			assert_true(p[1] > 0x9F);
	}
	assert_non_null(strstr(text, "\"a\\u001B[2J\\u009B31m\\u0085\\u007F"
	    "caf\xC3\xA9 \xE2\x82\xAC\xC2\xA0\""));
	/* The same JSON: it reads back as the very same string. */
	json_decref(v);
	v = json_loads(text, 0, NULL);
	assert_non_null(v);
	assert_string_equal(json_string_value(json_object_get(v, "name")), name);
	assert_string_equal(json_string_value(json_array_get(json_object_get(v,
	    "list"), 0)), name);
	json_decref(v);
	free(text);
}

static void
test_time_never_crashes_on_any_int64(void **state)
{
	static const int64_t odd[] = { INT64_MAX, INT64_MIN, INT64_MIN + 1,
	    253402300800LL, -62167219201LL, 67767976233532799LL };
	char buf[64];
	size_t i;

	(void)state;
	assert_string_equal(cli_time(0, 0, buf, sizeof(buf)), "1970-01-01 00:00");
	assert_string_equal(cli_time(1764507600, 1, buf, sizeof(buf)),
	    "2025-11-30 13:00:00 UTC");
	assert_string_equal(cli_time(253402300799LL, 0, buf, sizeof(buf)),
	    "9999-12-31 23:59");
	assert_string_equal(cli_time(INT64_MAX, 0, buf, sizeof(buf)),
	    "@9223372036854775807");
	for (i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		cli_time(odd[i], 1, buf, sizeof(buf));
		assert_int_equal(buf[0], '@');
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape_turns_controls_into_visible_escapes),
		cmocka_unit_test(test_escape_cuts_on_whole_escapes_and_terminates),
		cmocka_unit_test(test_json_output_escapes_c1_and_del_as_well_as_c0),
		cmocka_unit_test(test_time_never_crashes_on_any_int64),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
