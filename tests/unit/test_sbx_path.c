/* test_sbx_path.c - sandbox id rules and /work path rules as tables of verdicts (SPEC §4). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sbx_path.h"
#include "sbx_proto.h"

#define OK 1
#define NO 0

struct path_case {
	const char *path;
	size_t len;         /* 0: strlen(path) */
	int ok;
	const char *rule;   /* for NO: a word the error message must contain */
};

static const struct path_case path_cases[] = {
	/* accepted */
	{ "/work", 0, OK, NULL },
	{ "/work/a", 0, OK, NULL },
	{ "/work/a/b/c.txt", 0, OK, NULL },
	{ "/work/my file with spaces.txt", 0, OK, NULL },
	{ "/work/a..b", 0, OK, NULL },
	{ "/work/..a", 0, OK, NULL },
	{ "/work/a..", 0, OK, NULL },
	{ "/work/...", 0, OK, NULL },
	{ "/work/.hidden", 0, OK, NULL },
	{ "/work/dir/.config/x", 0, OK, NULL },
	{ "/work/caf\xc3\xa9/na\xc3\xafve", 0, OK, NULL },          /* café/naïve */
	{ "/work/\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", 0, OK, NULL }, /* 日本語 */
	{ "/work/\xf0\x9f\x98\x80.txt", 0, OK, NULL },              /* emoji */
	{ "/work/%2e%2e", 0, OK, NULL },       /* literal percent signs: a file name */
	{ "/work/a-b_c~d+e=f,g@h", 0, OK, NULL },
	{ "/work/work", 0, OK, NULL },
	{ "/work/a\\b", 0, OK, NULL },         /* backslash is a Linux file name byte */
	{ "/work/\xe3\x80\x82", 0, OK, NULL }, /* U+3002 ideographic full stop: a CJK letter */
	/* refused: shape */
	{ "", 0, NO, "empty" },
	{ "work/a", 0, NO, "absolute" },
	{ "a", 0, NO, "absolute" },
	{ "./work", 0, NO, "absolute" },
	{ "/", 0, NO, "/work" },
	{ "/workspace", 0, NO, "/work" },
	{ "/work2/a", 0, NO, "/work" },
	{ "/Work/a", 0, NO, "/work" },
	{ "/etc/passwd", 0, NO, "/work" },
	{ "//work/a", 0, NO, "/work" },
	{ "/work/", 0, NO, "empty segment" },
	{ "/work//a", 0, NO, "empty segment" },
	{ "/work/a/", 0, NO, "empty segment" },
	{ "/work/..", 0, NO, "'..'" },
	{ "/work/../etc/passwd", 0, NO, "'..'" },
	{ "/work/a/../../etc", 0, NO, "'..'" },
	{ "/work/.", 0, NO, "'.'" },
	{ "/work/./a", 0, NO, "'.'" },
	{ "/work/a/.", 0, NO, "'.'" },
	/* refused: bytes */
	{ "/work/a\0b", 9, NO, "NUL" },
	{ "/work\0/../etc", 13, NO, "NUL" },
	{ "/work/a\nb", 0, NO, "control" },
	{ "/work/a\tb", 0, NO, "control" },
	{ "/work/a\x7f", 0, NO, "control" },
	{ "/work/a\xc2\x85", 0, NO, "control" },          /* U+0085 NEL (C1) */
	{ "/work/\xff", 0, NO, "UTF-8" },
	{ "/work/\xc0\xae\xc0\xae", 0, NO, "UTF-8" },     /* overlong "..": classic bypass */
	{ "/work/\xe0\x80\xaf", 0, NO, "UTF-8" },         /* overlong "/" */
	{ "/work/\xed\xa0\x80", 0, NO, "UTF-8" },         /* surrogate U+D800 */
	{ "/work/\xc3", 0, NO, "UTF-8" },                 /* truncated */
	{ "/work/\xf4\x90\x80\x80", 0, NO, "UTF-8" },     /* above U+10FFFF */
	/* refused: Unicode look-alikes of '.' and '/' */
	{ "/work/\xe2\x80\xa4\xe2\x80\xa4", 0, NO, "look-alike" }, /* U+2024 ONE DOT LEADER x2 */
	{ "/work/\xe2\x80\xa5", 0, NO, "look-alike" },    /* U+2025 TWO DOT LEADER */
	{ "/work/\xe2\x80\xa6", 0, NO, "look-alike" },    /* U+2026 HORIZONTAL ELLIPSIS */
	{ "/work/\xef\xb9\x92\xef\xb9\x92", 0, NO, "look-alike" }, /* U+FE52 SMALL FULL STOP */
	{ "/work/\xef\xbc\x8e\xef\xbc\x8e", 0, NO, "look-alike" }, /* U+FF0E FULLWIDTH FULL STOP */
	{ "/work/a\xe2\x88\x95..", 0, NO, "look-alike" }, /* U+2215 DIVISION SLASH */
	{ "/work/a\xe2\x81\x84" "b", 0, NO, "look-alike" }, /* U+2044 FRACTION SLASH */
	{ "/work/a\xef\xbc\x8f" "b", 0, NO, "look-alike" }, /* U+FF0F FULLWIDTH SOLIDUS */
	{ "/work/a\xe2\xa7\xb8" "b", 0, NO, "look-alike" }, /* U+29F8 BIG SOLIDUS */
	{ "/work/\xe2\x92\x88", 0, NO, "look-alike" },    /* U+2488 DIGIT ONE FULL STOP "1." */
};

static void
check_case(const struct path_case *c)
{
	struct sbx_err err;
	size_t len = c->len != 0 ? c->len : strlen(c->path);
	int rc;

	sbx_err_clear(&err);
	rc = sbx_path_check(c->path, len, &err);
	if (c->ok) {
		if (rc != 0)
			fail_msg("expected \"%s\" accepted, refused: %s", c->path,
			    err.message);
		assert_false(sbx_err_is_set(&err));
	} else {
		if (rc != -1)
			fail_msg("expected \"%s\" (len %zu) refused, accepted", c->path, len);
		assert_string_equal(err.code, SBX_E_PATH_OUTSIDE_WORK);
		if (strstr(err.message, c->rule) == NULL)
			fail_msg("\"%s\": message \"%s\" does not name the rule \"%s\"",
			    c->path, err.message, c->rule);
		assert_int_equal(sbx_err_http_status(&err), 400);
	}
}

static void
test_path_table_gives_each_expected_verdict(void **state)
{
	size_t i, nok = 0, nno = 0;

	(void)state;
	for (i = 0; i < sizeof(path_cases) / sizeof(path_cases[0]); i++) {
		check_case(&path_cases[i]);
		if (path_cases[i].ok)
			nok++;
		else
			nno++;
	}
	/* The table is the documentation: keep it large and two-sided. */
	assert_true(nok + nno >= 40);
	assert_true(nok >= 10 && nno >= 30);
}

static void
test_path_length_limits_are_4096_and_255(void **state)
{
	char *p = malloc(SBX_PATH_MAX + 2);
	struct sbx_err err;
	size_t len, i;

	(void)state;
	assert_non_null(p);
	/* Exactly 4096 bytes of 16 segments of 250: accepted. */
	memcpy(p, "/work", 5);
	len = 5;
	while (len + 251 <= SBX_PATH_MAX) {
		p[len++] = '/';
		memset(p + len, 'a', 250);
		len += 250;
	}
	p[len++] = '/';
	while (len < SBX_PATH_MAX)
		p[len++] = 'b';
	assert_int_equal(len, SBX_PATH_MAX);
	assert_int_equal(sbx_path_check(p, len, &err), 0);
	/* One byte more: refused for length. */
	p[len++] = 'b';
	assert_int_equal(sbx_path_check(p, len, &err), -1);
	assert_string_equal(err.code, SBX_E_PATH_OUTSIDE_WORK);
	assert_non_null(strstr(err.message, "4096"));

	/* A segment of 255 bytes is fine, 256 is not. */
	memcpy(p, "/work/", 6);
	memset(p + 6, 'x', 255);
	assert_int_equal(sbx_path_check(p, 6 + 255, &err), 0);
	p[6 + 255] = 'x';
	assert_int_equal(sbx_path_check(p, 6 + 256, &err), -1);
	assert_non_null(strstr(err.message, "255"));
	/* The last byte counts: a 256-byte last segment after a good one. */
	memcpy(p, "/work/ok/", 9);
	for (i = 0; i < 256; i++)
		p[9 + i] = 'y';
	assert_int_equal(sbx_path_check(p, 9 + 256, &err), -1);
	free(p);
}

static void
test_path_check_uses_len_not_nul(void **state)
{
	struct sbx_err err;

	(void)state;
	/* strlen would stop at the NUL and see "/work/a": len must win. */
	assert_int_equal(sbx_path_check("/work/a\0/../../etc", 18, &err), -1);
	assert_non_null(strstr(err.message, "NUL"));
	/* And a shorter len checks only the prefix. */
	assert_int_equal(sbx_path_check("/work/a/..", 7, &err), 0);
	assert_int_equal(sbx_path_check(NULL, 0, &err), -1);
}

struct id_case {
	const char *id;
	int ok;
};

static const struct id_case id_cases[] = {
	{ "a", OK }, { "0", OK }, { "npc-1", OK }, { "abc123", OK },
	{ "a-", OK }, { "9-9-9", OK }, { "a--b", OK },
	{ "123456789012345678901234567890123456789012345678901234567890123", OK },
	{ "", NO }, { "-a", NO }, { "A", NO }, { "npc_1", NO }, { "a.b", NO },
	{ "a/b", NO }, { "..", NO }, { "a b", NO }, { " a", NO }, { "a\n", NO },
	{ "\xc3\xa9", NO }, { "a%2f", NO },
	{ "1234567890123456789012345678901234567890123456789012345678901234", NO },
};

static void
test_id_table_gives_each_expected_verdict(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(id_cases) / sizeof(id_cases[0]); i++)
		if (sbx_id_valid(id_cases[i].id) != id_cases[i].ok)
			fail_msg("id \"%s\": expected %s", id_cases[i].id,
			    id_cases[i].ok ? "valid" : "invalid");
	assert_int_equal(sbx_id_valid(NULL), 0);
}

struct query_case {
	const char *query;
	int ok;
	const char *want;   /* decoded path when ok; error code when not */
	size_t wantlen;     /* 0: strlen(want) */
};

static const struct query_case query_cases[] = {
	{ "path=/work/a", OK, "/work/a", 0 },
	{ "path=%2Fwork%2Fa%20b", OK, "/work/a b", 0 },
	{ "mode=644&path=/work/x&z=1", OK, "/work/x", 0 },
	{ "path=/work/a+b", OK, "/work/a b", 0 },
	{ "path=/work/a%2Bb", OK, "/work/a+b", 0 },
	/* decoded once: "%25" becomes '%', and the result is never decoded again */
	{ "path=/work/%252e%252e", OK, "/work/%2e%2e", 0 },
	{ "path=/work/%252e%252e/%252e%252e/etc", OK, "/work/%2e%2e/%2e%2e/etc", 0 },
	{ "p%61th=/work/enc-name", OK, "/work/enc-name", 0 },
	/* ".." hidden by percent-encoding: decoded once, then refused */
	{ "path=/work/%2e%2e", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=/work/%2E%2E/etc/passwd", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=%2fwork%2f%2e%2e%2fetc", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=/work/.%2e", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=/work/%2e", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=/work/a%00b", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=/work/a%2f%2fb", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=/work/%E2%80%A4%E2%80%A4", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=/work/%C0%AE%C0%AE", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=/workspace", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path=", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	{ "path", NO, SBX_E_PATH_OUTSIDE_WORK, 0 },
	/* malformed or ambiguous query */
	{ "path=/work/a%2", NO, SBX_E_BAD_REQUEST, 0 },
	{ "path=/work/a%zz", NO, SBX_E_BAD_REQUEST, 0 },
	{ "path=/work/a&path=/work/b", NO, SBX_E_BAD_REQUEST, 0 },
	{ "mode=644", NO, SBX_E_BAD_REQUEST, 0 },
	{ "", NO, SBX_E_BAD_REQUEST, 0 },
	{ "pathx=/work/a", NO, SBX_E_BAD_REQUEST, 0 },
};

static void
test_query_path_decodes_exactly_once_then_checks(void **state)
{
	struct sbx_err err;
	size_t i, len;
	char *out;

	(void)state;
	for (i = 0; i < sizeof(query_cases) / sizeof(query_cases[0]); i++) {
		const struct query_case *c = &query_cases[i];
		int rc;

		out = (char *)1;
		len = 99;
		sbx_err_clear(&err);
		rc = sbx_query_path(c->query, "path", &out, &len, &err);
		if (c->ok) {
			if (rc != 0)
				fail_msg("query \"%s\" refused: %s", c->query, err.message);
			assert_int_equal(len, strlen(c->want));
			assert_memory_equal(out, c->want, len);
			assert_int_equal(out[len], '\0');
			free(out);
		} else {
			if (rc != -1)
				fail_msg("query \"%s\" accepted as \"%s\"", c->query, out);
			assert_null(out);
			if (strcmp(err.code, c->want) != 0)
				fail_msg("query \"%s\": code %s, want %s", c->query,
				    err.code, c->want);
		}
	}
	assert_int_equal(sbx_query_path(NULL, "path", &out, NULL, &err), -1);
	assert_null(out);
}

static void
test_query_param_sees_encoded_nul_as_embedded_byte(void **state)
{
	struct sbx_err err;
	size_t len = 0;
	char *out = NULL;

	(void)state;
	assert_int_equal(sbx_query_param("name=a%00b&x=1", "name", &out, &len, &err), 1);
	assert_int_equal(len, 3);
	assert_memory_equal(out, "a\0b", 3);
	/* The path check, given that length, refuses the NUL. */
	free(out);
	assert_int_equal(sbx_query_param("x=1", "name", &out, &len, &err), 0);
	assert_null(out);
	assert_int_equal(sbx_query_param("mode=", "mode", &out, &len, &err), 1);
	assert_int_equal(len, 0);
	assert_string_equal(out, "");
	free(out);
}

static void
test_query_encode_round_trips_through_decode(void **state)
{
	static const char raw[] = "/work/a b+c%2e\xc3\xa9&=?#\0z";
	size_t rawlen = sizeof(raw) - 1, len = 0;
	char *enc, *q, *dec = NULL;
	struct sbx_err err;

	(void)state;
	enc = sbx_query_encode(raw, rawlen);
	assert_non_null(enc);
	assert_null(strpbrk(enc, " +&=?#"));
	assert_non_null(q = malloc(strlen(enc) + 6));
	sprintf(q, "path=%s", enc);
	assert_int_equal(sbx_query_param(q, "path", &dec, &len, &err), 1);
	assert_int_equal(len, rawlen);
	assert_memory_equal(dec, raw, rawlen);
	free(enc);
	free(q);
	free(dec);
}


/* What a player reads when a path or its query parameter is refused: whole
 * sentences (capital, full stop) that say the rule, the same words whatever
 * the route. */
static void
test_refusals_are_whole_sentences(void **state)
{
	static const struct {
		const char *query, *message;
	} cases[] = {
		{ "path=%2Fetc", "The path must be /work or start with /work/." },
		{ "path=%2Fwork%2F..%2Fetc", "The path has a '.' or '..' segment." },
		{ "path=work", "The path must be absolute (start with /work)." },
		{ "x=1", "The query parameter 'path' is required." },
		{ "path=%2Fwork&path=%2Fwork", "The query parameter 'path' is given more than once." },
		{ "path=%zz", "The query string has a '%' not followed by two hex digits." },
	};
	struct sbx_err err;
	char *out = NULL;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sbx_err_clear(&err);
		assert_int_equal(sbx_query_path(cases[i].query, "path", &out, NULL,
		    &err), -1);
		if (strcmp(err.message, cases[i].message) != 0)
			fail_msg("\"%s\": \"%s\", want \"%s\"", cases[i].query,
			    err.message, cases[i].message);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path_table_gives_each_expected_verdict),
		cmocka_unit_test(test_path_length_limits_are_4096_and_255),
		cmocka_unit_test(test_path_check_uses_len_not_nul),
		cmocka_unit_test(test_id_table_gives_each_expected_verdict),
		cmocka_unit_test(test_query_path_decodes_exactly_once_then_checks),
		cmocka_unit_test(test_refusals_are_whole_sentences),
		cmocka_unit_test(test_query_param_sees_encoded_nul_as_embedded_byte),
		cmocka_unit_test(test_query_encode_round_trips_through_decode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
