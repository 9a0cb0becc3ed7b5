/* test_sbx_token.c - token loading rules, digest-only storage, fixed-size constant-time verify. */
#include <sys/stat.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "sbx_token.h"

#define TOKEN16 "0123456789abcdef"
#define TOKEN "s3cr3t-Token-For-Tests-0123456789"

/*
 * Interposes libsodium's sodium_memcmp (the executable's definition wins over
 * the shared library's) to record how sbx_token_verify compares: how many
 * calls, with which length, on which buffers. Constant time like the real one.
 */
static int memcmp_calls;
static size_t memcmp_last_len;
static const void *memcmp_last_a, *memcmp_last_b;

int
sodium_memcmp(const void *const b1_, const void *const b2_, size_t len)
{
	const volatile unsigned char *b1 = b1_, *b2 = b2_;
	unsigned char d = 0;
	size_t i;

	memcmp_calls++;
	memcmp_last_len = len;
	memcmp_last_a = b1_;
	memcmp_last_b = b2_;
	for (i = 0; i < len; i++)
		d |= b1[i] ^ b2[i];
	return (1 & ((d - 1) >> 8)) - 1;
}

static char tmpdir[64];

static int
setup_dir(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sbx-test-token-XXXXXX");
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int
teardown_dir(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Writes content to tmpdir/name with mode; returns the path (static buffer). */
static const char *
write_file(const char *name, const char *content, mode_t mode)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	unlink(path);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
	assert_int_equal(chmod(path, mode), 0);
	return path;
}

static void
assert_no_token_in(const struct sbx_err *err, const char *tok)
{
	if (strstr(err->message, tok) != NULL || strstr(err->code, tok) != NULL)
		fail_msg("error message contains the token: %s", err->message);
}

static void
test_env_token_of_15_chars_refused_16_accepted(void **state)
{
	struct sbx_token t;
	struct sbx_err err;

	(void)state;
	sbx_err_clear(&err);
	assert_int_equal(sbx_token_load(&t, NULL, "0123456789abcde", &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_TOKEN);
	assert_non_null(strstr(err.message, "16"));
	assert_no_token_in(&err, "0123456789abcde");
	assert_int_equal(t.set, 0);
	assert_int_equal(sbx_token_verify(&t, "0123456789abcde", 15), 0);

	sbx_err_clear(&err);
	assert_int_equal(sbx_token_load(&t, NULL, TOKEN16, &err), 0);
	assert_false(sbx_err_is_set(&err));
	assert_int_equal(t.set, 1);
	assert_int_equal(sbx_token_verify(&t, TOKEN16, 16), 1);
}

static void
test_absent_or_odd_token_refused_without_echo(void **state)
{
	static const char *bad[] = {
		"", "   \n", "has a space in it!!", "tab\there-0123456789",
		"nul-free-but-\x01-ctl-0123", "caf\xc3\xa9-0123456789abcdef",
	};
	struct sbx_token t;
	struct sbx_err err;
	size_t i;

	(void)state;
	assert_int_equal(sbx_token_load(&t, NULL, NULL, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_TOKEN);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sbx_err_clear(&err);
		if (sbx_token_load(&t, NULL, bad[i], &err) != -1)
			fail_msg("token #%zu accepted", i);
		assert_string_equal(err.code, SBX_E_BAD_TOKEN);
		if (*bad[i] != '\0' && strspn(bad[i], " \n") != strlen(bad[i]))
			assert_no_token_in(&err, bad[i]);
		assert_int_equal(t.set, 0);
	}
}

static void
test_wrong_token_refused(void **state)
{
	struct sbx_token t;
	struct sbx_err err;

	(void)state;
	assert_int_equal(sbx_token_load(&t, NULL, TOKEN, &err), 0);
	assert_int_equal(sbx_token_verify(&t, TOKEN, strlen(TOKEN)), 1);
	assert_int_equal(sbx_token_verify(&t, "s3cr3t-Token-For-Tests-0123456780",
	    strlen(TOKEN)), 0);
	assert_int_equal(sbx_token_verify(&t, "S3cr3t-Token-For-Tests-0123456789",
	    strlen(TOKEN)), 0);
	assert_int_equal(sbx_token_verify(&t, NULL, 0), 0);
	assert_int_equal(sbx_token_verify(NULL, TOKEN, strlen(TOKEN)), 0);
	sbx_token_clear(&t);
	assert_int_equal(sbx_token_verify(&t, TOKEN, strlen(TOKEN)), 0);
}

static void
test_verify_compares_fixed_size_digests_only(void **state)
{
	unsigned char want[32];
	struct sbx_token t;
	struct sbx_err err;
	static const size_t lens[] = { 0, 1, 16, 31, 32 }; /* TOKEN is 33 */
	char longer[128];
	size_t i;

	(void)state;
	assert_int_equal(sbx_token_load(&t, NULL, TOKEN, &err), 0);
	/* Only the BLAKE2b-256 digest of the token is kept. */
	crypto_generichash(want, sizeof(want), (const unsigned char *)TOKEN,
	    strlen(TOKEN), NULL, 0);
	assert_memory_equal(t.digest, want, 32);

	/* A prefix of the token, or the token plus more: refused. */
	assert_int_equal(strlen(TOKEN), 33);
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		memcmp_calls = 0;
		assert_int_equal(sbx_token_verify(&t, TOKEN, lens[i]), 0);
		assert_int_equal(memcmp_calls, 1);
		assert_int_equal(memcmp_last_len, 32);
	}
	snprintf(longer, sizeof(longer), "%sX", TOKEN);
	memcmp_calls = 0;
	assert_int_equal(sbx_token_verify(&t, longer, strlen(longer)), 0);
	snprintf(longer, sizeof(longer), "%s%s", TOKEN, TOKEN);
	assert_int_equal(sbx_token_verify(&t, longer, strlen(longer)), 0);
	/* Every length went through exactly one 32-byte compare with the digest. */
	assert_int_equal(memcmp_calls, 2);
	assert_int_equal(memcmp_last_len, 32);
	assert_true(memcmp_last_a == t.digest || memcmp_last_b == t.digest);

	memcmp_calls = 0;
	assert_int_equal(sbx_token_verify(&t, TOKEN, strlen(TOKEN)), 1);
	assert_int_equal(memcmp_calls, 1);
	assert_int_equal(memcmp_last_len, 32);
}

static void
test_token_file_0600_loaded_and_trimmed(void **state)
{
	struct sbx_token t;
	struct sbx_err err;
	const char *p;
	char link[300];

	(void)state;
	p = write_file("tok", TOKEN " \t\r\n\n", 0600);
	assert_int_equal(sbx_token_load(&t, p, "ignored-env-value-1234", &err), 0);
	assert_int_equal(sbx_token_verify(&t, TOKEN, strlen(TOKEN)), 1);
	assert_int_equal(sbx_token_verify(&t, "ignored-env-value-1234", 22), 0);
	/* 0400 is stricter: fine. A symlink to the file (Docker/k8s secrets) too. */
	assert_int_equal(chmod(p, 0400), 0);
	assert_int_equal(sbx_token_load(&t, p, NULL, &err), 0);
	snprintf(link, sizeof(link), "%s/link", tmpdir);
	unlink(link);
	assert_int_equal(symlink(p, link), 0);
	assert_int_equal(sbx_token_load(&t, link, NULL, &err), 0);
	assert_int_equal(sbx_token_verify(&t, TOKEN, strlen(TOKEN)), 1);
}

static void
test_token_file_0644_refused_naming_file_and_0600(void **state)
{
	static const mode_t modes[] = { 0644, 0640, 0604, 0660, 0606, 0610 };
	struct sbx_token t;
	struct sbx_err err;
	const char *p;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		p = write_file("open-tok", TOKEN "\n", modes[i]);
		sbx_err_clear(&err);
		t.set = 1;
		assert_int_equal(sbx_token_load(&t, p, TOKEN16, &err), -1);
		assert_int_equal(t.set, 0);
		assert_string_equal(err.code, SBX_E_BAD_TOKEN);
		assert_non_null(strstr(err.message, p));
		assert_non_null(strstr(err.message, "0600"));
		assert_no_token_in(&err, TOKEN);
	}
}

static void
test_token_file_short_missing_dir_or_huge_refused(void **state)
{
	struct sbx_token t;
	struct sbx_err err;
	const char *p;
	char missing[300], *big;

	(void)state;
	p = write_file("short", "0123456789abcde\n", 0600);
	assert_int_equal(sbx_token_load(&t, p, NULL, &err), -1);
	assert_no_token_in(&err, "0123456789abcde");
	assert_non_null(strstr(err.message, p));

	p = write_file("empty", "\n", 0600);
	assert_int_equal(sbx_token_load(&t, p, TOKEN, &err), -1);

	snprintf(missing, sizeof(missing), "%s/nope", tmpdir);
	assert_int_equal(sbx_token_load(&t, missing, NULL, &err), -1);
	assert_non_null(strstr(err.message, missing));

	assert_int_equal(chmod(tmpdir, 0700), 0);
	assert_int_equal(sbx_token_load(&t, tmpdir, NULL, &err), -1);
	assert_non_null(strstr(err.message, "regular file"));

	big = malloc(SBX_TOKEN_MAX_LEN + 2);
	assert_non_null(big);
	memset(big, 'a', SBX_TOKEN_MAX_LEN + 1);
	big[SBX_TOKEN_MAX_LEN + 1] = '\0';
	p = write_file("big", big, 0600);
	assert_int_equal(sbx_token_load(&t, p, NULL, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_TOKEN);
	free(big);
}

static void
test_bearer_header_parsing(void **state)
{
	static const struct {
		const char *h;
		int ok;
	} cases[] = {
		{ "Bearer " TOKEN, 1 },
		{ "bearer " TOKEN, 1 },
		{ "BEARER " TOKEN, 1 },
		{ "Bearer  " TOKEN, 1 },
		{ "Bearer\t" TOKEN, 1 },
		{ " Bearer " TOKEN " ", 1 },
		{ "Bearer " TOKEN "x", 0 },
		{ "Bearer " "s3cr3t-Token-For-Tests-012345678", 0 },
		{ "Bearer" TOKEN, 0 },
		{ "Bearer ", 0 },
		{ "Bearer", 0 },
		{ "", 0 },
		{ "Basic " TOKEN, 0 },
		{ "Token " TOKEN, 0 },
		{ TOKEN, 0 },
		{ "Bearer " TOKEN " extra", 0 },
	};
	struct sbx_token t;
	struct sbx_err err;
	size_t i;

	(void)state;
	assert_int_equal(sbx_token_load(&t, NULL, TOKEN, &err), 0);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (sbx_bearer_verify(&t, cases[i].h) != cases[i].ok)
			fail_msg("header \"%s\": expected %d", cases[i].h, cases[i].ok);
	assert_int_equal(sbx_bearer_verify(&t, NULL), 0);
}

static void
test_generate_gives_43_urlsafe_chars_that_load(void **state)
{
	char a[SBX_TOKEN_GEN_LEN + 1], b[64], small[43];
	struct sbx_token t;
	struct sbx_err err;

	(void)state;
	assert_int_equal(sbx_token_generate(a, sizeof(a)), 0);
	assert_int_equal(sbx_token_generate(b, sizeof(b)), 0);
	assert_int_equal(strlen(a), 43);
	assert_int_equal(strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789-_"), 43);
	assert_string_not_equal(a, b);
	assert_int_equal(sbx_token_generate(small, sizeof(small)), -1);
	assert_int_equal(sbx_token_load(&t, NULL, a, &err), 0);
	assert_int_equal(sbx_bearer_verify(&t, "Bearer x"), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_env_token_of_15_chars_refused_16_accepted),
		cmocka_unit_test(test_absent_or_odd_token_refused_without_echo),
		cmocka_unit_test(test_wrong_token_refused),
		cmocka_unit_test(test_verify_compares_fixed_size_digests_only),
		cmocka_unit_test(test_token_file_0600_loaded_and_trimmed),
		cmocka_unit_test(test_token_file_0644_refused_naming_file_and_0600),
		cmocka_unit_test(test_token_file_short_missing_dir_or_huge_refused),
		cmocka_unit_test(test_bearer_header_parsing),
		cmocka_unit_test(test_generate_gives_43_urlsafe_chars_that_load),
	};

	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
