/*
 * fuzz_browser_cdp.c - libFuzzer target: the checks of what a sandbox's
 * browser sends the api over CDP (api/api_browser_cdp_parse.c, adr/0065).
 *
 * The first byte picks the check and a bound, the rest is the browser's
 * bytes: 0 an HTTP answer head, 1 the JSON of /json/list, 2 a base64 PNG,
 * 3 a base64 JPEG.
 * Invariants asserted:
 *  - head: a verdict of 1 gives a head that ends in CRLF CRLF, within the
 *    bytes and the bound, a status 100..599, a Content-Length -1 or
 *    0..2^31-1, NUL-terminated values within their buffers; every shorter
 *    prefix of that head says "not whole yet" (0); bytes after the head
 *    change nothing;
 *  - page: an accepted id is [A-Za-z0-9_-]{1,64}; a refusal is
 *    runtime_error or not_found with a sentence;
 *  - image: an accepted image is at most the bound, starts with the PNG
 *    signature (width and height 1..32767) or the JPEG SOI; a refusal
 *    leaves no buffer and has a code; too_large only when the base64 is
 *    longer than the bound allows.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "api_browser_cdp.h"
#include "fuzz.h"
#include "sbx_proto.h"

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return sodium_init() < 0 ? -1 : 0;
}

static void
check_head(const char *p, size_t n, size_t max)
{
	char up[32], conn[32], acc[32];
	struct sbx_err err;
	size_t hl = 0, hl2 = 0, k;
	long clen = 0, clen2 = 0;
	int st = 0, st2 = 0, r;
	char *more;

	sbx_err_clear(&err);
	r = api_cdp_http_head(p, n, max, &st, &hl, &clen, up, conn, acc,
	    sizeof(up), &err);
	FUZZ_ASSERT(r >= -1 && r <= 1);
	if (r == -1)
		FUZZ_ASSERT(strcmp(err.code, SBX_E_RUNTIME) == 0);
	if (r == 0)
		FUZZ_ASSERT(n < max);
	if (r != 1)
		return;
	FUZZ_ASSERT(hl >= 4 && hl <= n && hl <= max);
	FUZZ_ASSERT(memcmp(p + hl - 4, "\r\n\r\n", 4) == 0);
	FUZZ_ASSERT(st >= 100 && st <= 599);
	FUZZ_ASSERT(clen >= -1 && clen < 0x7fffffffL);
	FUZZ_ASSERT(memchr(up, '\0', sizeof(up)) != NULL &&
	    memchr(conn, '\0', sizeof(conn)) != NULL &&
	    memchr(acc, '\0', sizeof(acc)) != NULL);
	for (k = 0; k < hl; k += 1 + k / 8)
		FUZZ_ASSERT(api_cdp_http_head(p, k, max, &st2, &hl2, &clen2,
		    NULL, NULL, NULL, 0, &err) == 0);
	/* A tail after the head changes nothing. */
	if ((more = malloc(hl + 8)) == NULL)
		return;
	memcpy(more, p, hl);
	memcpy(more + hl, "\r\n\r\nXYZW", 8);
	FUZZ_ASSERT(api_cdp_http_head(more, hl + 8, max + 8, &st2, &hl2,
	    &clen2, NULL, NULL, NULL, 0, &err) == 1);
	FUZZ_ASSERT(st2 == st && hl2 == hl && clen2 == clen);
	free(more);
}

static void
check_page(const char *p, size_t n)
{
	char id[API_CDP_ID_MAX + 1];
	struct sbx_err err;
	size_t l;

	sbx_err_clear(&err);
	if (api_cdp_pick_page(p, n, id, sizeof(id), &err) == 0) {
		l = strlen(id);
		FUZZ_ASSERT(l >= 1 && l <= API_CDP_ID_MAX);
		FUZZ_ASSERT(strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		    "abcdefghijklmnopqrstuvwxyz0123456789_-") == l);
		return;
	}
	FUZZ_ASSERT(strcmp(err.code, SBX_E_RUNTIME) == 0 ||
	    strcmp(err.code, SBX_E_NOT_FOUND) == 0);
	FUZZ_ASSERT(err.message[0] != '\0');
}

static void
check_image(const char *p, size_t n, size_t max, enum api_cdp_image kind)
{
	static const unsigned char sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n',
	    0x1a, '\n' };
	unsigned char *out = (unsigned char *)1;
	struct sbx_err err;
	unsigned w = 1, h = 1;
	size_t len = 1;

	sbx_err_clear(&err);
	if (api_cdp_image_decode(p, n, max, kind, &out, &len, &w, &h,
	    &err) == -1) {
		FUZZ_ASSERT(out == NULL && len == 0);
		FUZZ_ASSERT(err.code[0] != '\0');
		if (strcmp(err.code, SBX_E_TOO_LARGE) == 0)
			FUZZ_ASSERT(n / 4 * 3 > max);
		return;
	}
	FUZZ_ASSERT(out != NULL && len <= max && len <= n / 4 * 3);
	if (kind == API_CDP_PNG) {
		FUZZ_ASSERT(len >= 33 && memcmp(out, sig, 8) == 0);
		FUZZ_ASSERT(w >= 1 && w <= 32767 && h >= 1 && h <= 32767);
	} else {
		FUZZ_ASSERT(len >= 4 && out[0] == 0xff && out[1] == 0xd8);
		FUZZ_ASSERT(w <= 65535 && h <= 65535);
	}
	free(out);
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	const char *p = (const char *)data + 1;
	size_t n, max;

	if (size < 1)
		return 0;
	n = size - 1;
	max = 16 + (size_t)(data[0] >> 2) * 64;   /* 16 .. 4048 */
	switch (data[0] & 3) {
	case 0:
		check_head(p, n, max);
		break;
	case 1:
		check_page(p, n);
		break;
	case 2:
		check_image(p, n, max, API_CDP_PNG);
		break;
	default:
		check_image(p, n, max, API_CDP_JPEG);
		break;
	}
	return 0;
}
