/*
 * fuzz_path.c - libFuzzer target: sandbox id, /work path and query rules
 * (proto/sbx_path.c, SPEC §4).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - sbx_id_valid() is exactly [a-z0-9][a-z0-9-]{0,62} (checked against a
 *    reference written here);
 *  - an accepted path obeys every structural rule, checked here again
 *    independently: 1..4096 bytes, no NUL, valid UTF-8, no C0/C1 control or
 *    DEL, "/work" or under "/work/", no empty, "." or ".." segment, segments
 *    of at most 255 bytes; a refusal is path_outside_work and its message
 *    never echoes the path;
 *  - percent coding round trip exact: decode(encode(x)) == x, and
 *    sbx_query_param finds x again in "a=1&name=" + encode(x);
 *  - sbx_query_path never returns a path sbx_path_check refuses.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"

static int
ref_id(const unsigned char *s, size_t n)
{
	size_t i;

	if (n < 1 || n > 63)
		return 0;
	for (i = 0; i < n; i++) {
		int c = s[i];

		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
			continue;
		if (c == '-' && i > 0)
			continue;
		return 0;
	}
	return 1;
}

/* The structural rules (not the look-alike table, which only refuses more). */
static void
check_accepted(const unsigned char *p, size_t n)
{
	size_t i, seg = 0, start;

	FUZZ_ASSERT(n >= 5 && n <= SBX_PATH_MAX);
	FUZZ_ASSERT(memchr(p, '\0', n) == NULL);
	FUZZ_ASSERT(sbx_utf8_valid(p, n));
	for (i = 0; i < n; i++) {
		FUZZ_ASSERT(p[i] >= 0x20 && p[i] != 0x7f);
		/* C1 controls U+0080..U+009F are C2 80..C2 9F in UTF-8 */
		if (p[i] == 0xc2 && i + 1 < n)
			FUZZ_ASSERT(p[i + 1] < 0x80 || p[i + 1] > 0x9f);
	}
	FUZZ_ASSERT(memcmp(p, "/work", 5) == 0 && (n == 5 || p[5] == '/'));
	for (start = 1, i = 1; i <= n; i++) {
		if (i < n && p[i] != '/')
			continue;
		seg = i - start;
		FUZZ_ASSERT(seg >= 1 && seg <= SBX_PATH_SEGMENT_MAX);
		FUZZ_ASSERT(!(seg == 1 && p[start] == '.'));
		FUZZ_ASSERT(!(seg == 2 && p[start] == '.' && p[start + 1] == '.'));
		start = i + 1;
	}
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct sbx_err err;
	char *s, *enc, *dec, *q, *out;
	size_t dlen, olen;
	int rc;

	/* ids */
	s = malloc(size + 1);
	FUZZ_ASSERT(s != NULL);
	memcpy(s, data, size);
	s[size] = '\0';
	FUZZ_ASSERT(sbx_id_valid(s) == ref_id((const unsigned char *)s,
	    strlen(s)));

	/* paths */
	rc = sbx_path_check((const char *)data, size, &err);
	if (rc == 0) {
		check_accepted(data, size);
	} else {
		FUZZ_ASSERT(rc == -1);
		FUZZ_ASSERT(strcmp(err.code, SBX_E_PATH_OUTSIDE_WORK) == 0);
		if (size >= 8 && memchr(data, '\0', size) == NULL)
			FUZZ_ASSERT(strstr(err.message, s) == NULL);
	}

	/* percent coding round trip */
	enc = sbx_query_encode((const char *)data, size);
	FUZZ_ASSERT(enc != NULL);
	dec = sbx_percent_decode(enc, strlen(enc), 1, &dlen);
	FUZZ_ASSERT(dec != NULL && dlen == size);
	FUZZ_ASSERT(memcmp(dec, data, size) == 0);
	free(dec);
	q = malloc(strlen(enc) + 16);
	FUZZ_ASSERT(q != NULL);
	sprintf(q, "a=1&name=%s", enc);
	FUZZ_ASSERT(sbx_query_param(q, "name", &out, &olen, &err) == 1);
	FUZZ_ASSERT(olen == size && memcmp(out, data, size) == 0);
	free(out);
	/* the same through sbx_query_path: accepted exactly when the path is */
	sprintf(q, "path=%s", enc);
	rc = sbx_query_path(q, "path", &out, &olen, &err);
	FUZZ_ASSERT((rc == 0) == (sbx_path_check((const char *)data, size,
	    &err) == 0));
	free(out);
	free(q);
	free(enc);

	/* the raw bytes as a query string */
	out = NULL;
	rc = sbx_query_path(s, "path", &out, &olen, &err);
	if (rc == 0) {
		FUZZ_ASSERT(out != NULL);
		FUZZ_ASSERT(sbx_path_check(out, olen, &err) == 0);
		free(out);
	} else {
		FUZZ_ASSERT(out == NULL);
	}
	rc = sbx_query_param(s, "mode", &out, &olen, &err);
	FUZZ_ASSERT(rc >= -1 && rc <= 1);
	if (rc == 1) {
		FUZZ_ASSERT(out[olen] == '\0');
		free(out);
	}
	free(s);
	return 0;
}
