/* test_browser_cdp.c - the pure checks of what a sandbox's browser sends over CDP (api/api_browser_cdp_parse.c, adr/0065): HTTP answer heads, the page of /json/list, base64 PNG and JPEG with their bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "api_browser_cdp.h"
#include "sbx_proto.h"

static void
test_http_head(void **state)
{
	char up[32], conn[32], acc[40];
	struct sbx_err err;
	size_t hl = 0;
	long clen = 0;
	int status = 0;
	const char *ok = "HTTP/1.1 200 OK\r\nContent-Length:12\r\n"
	    "Content-Type:application/json\r\n\r\n[]";
	const char *ws = "HTTP/1.1 101 WebSocket Protocol Handshake\r\n"
	    "Upgrade: WebSocket\r\nConnection: Upgrade\r\n"
	    "Sec-WebSocket-Accept: abc=\r\n\r\n\x81\x02{}";

	(void)state;
	assert_int_equal(api_cdp_http_head(ok, strlen(ok), 1024, &status, &hl,
	    &clen, up, conn, acc, sizeof(up), &err), 1);
	assert_int_equal(status, 200);
	assert_int_equal(clen, 12);
	assert_int_equal(hl, strlen(ok) - 2);
	assert_string_equal(up, "");
	assert_int_equal(api_cdp_http_head(ws, strlen(ws), 1024, &status, &hl,
	    &clen, up, conn, acc, sizeof(up), &err), 1);
	assert_int_equal(status, 101);
	assert_int_equal(clen, -1);
	assert_string_equal(up, "WebSocket");
	assert_string_equal(conn, "Upgrade");
	assert_string_equal(acc, "abc=");
	/* not whole yet; whole never within the bound */
	assert_int_equal(api_cdp_http_head(ok, 20, 1024, &status, &hl, &clen,
	    NULL, NULL, NULL, 0, &err), 0);
	assert_int_equal(api_cdp_http_head(ok, 20, 20, &status, &hl, &clen,
	    NULL, NULL, NULL, 0, &err), -1);
	assert_string_equal(err.code, SBX_E_RUNTIME);
	/* not HTTP, a bad length */
	assert_int_equal(api_cdp_http_head("SSH-2.0\r\n\r\n", 11, 1024, &status,
	    &hl, &clen, NULL, NULL, NULL, 0, &err), -1);
	assert_int_equal(api_cdp_http_head("HTTP/1.1 200 OK\r\nContent-Length: "
	    "-1\r\n\r\n", 39, 1024, &status, &hl, &clen, NULL, NULL, NULL, 0,
	    &err), -1);
	assert_int_equal(api_cdp_http_head("HTTP/1.1 200 OK\r\nContent-Length: "
	    "99999999999\r\n\r\n", 48, 1024, &status, &hl, &clen, NULL, NULL,
	    NULL, 0, &err), -1);
}

static void
test_pick_page(void **state)
{
	char id[API_CDP_ID_MAX + 1];
	struct sbx_err err;
	const char *list = "[{\"type\":\"service_worker\",\"id\":\"AA\"},"
	    "{\"type\":\"page\",\"id\":\"0123ABCDEF\",\"url\":\"about:blank\"},"
	    "{\"type\":\"page\",\"id\":\"second\"}]";
	const char *bad = "[{\"type\":\"page\",\"id\":\"../../x\"}]";

	(void)state;
	assert_int_equal(api_cdp_pick_page(list, strlen(list), id, sizeof(id),
	    &err), 0);
	assert_string_equal(id, "0123ABCDEF");
	assert_int_equal(api_cdp_pick_page("[]", 2, id, sizeof(id), &err), -1);
	assert_string_equal(err.code, SBX_E_NOT_FOUND);
	assert_int_equal(api_cdp_pick_page(bad, strlen(bad), id, sizeof(id),
	    &err), -1);
	assert_string_equal(err.code, SBX_E_RUNTIME);
	assert_int_equal(api_cdp_pick_page("{}", 2, id, sizeof(id), &err), -1);
	assert_string_equal(err.code, SBX_E_RUNTIME);
	assert_int_equal(api_cdp_pick_page("[{\"type\":\"page\"", 15, id,
	    sizeof(id), &err), -1);
}

/* base64 of n bytes of p, into a new string. */
static char *
b64(const unsigned char *p, size_t n)
{
	size_t cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
	char *s = malloc(cap);

	assert_non_null(s);
	sodium_bin2base64(s, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
	return s;
}

static void
test_images(void **state)
{
	/* The head of a 640x480 PNG: signature, IHDR. */
	unsigned char png[40] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
	    0, 0, 0, 13, 'I', 'H', 'D', 'R', 0, 0, 2, 0x80, 0, 0, 1, 0xe0, 8, 6 };
	/* SOI, an APP0 of 4 bytes, SOF0 of 200x100 (height first). */
	unsigned char jpg[] = { 0xff, 0xd8, 0xff, 0xe0, 0, 4, 1, 2, 0xff, 0xc0,
	    0, 11, 8, 0, 100, 0, 200, 3, 1, 0x11, 0, 0xff, 0xd9 };
	unsigned char *out;
	struct sbx_err err;
	unsigned w, h;
	size_t len;
	char *s;

	(void)state;
	s = b64(png, sizeof(png));
	assert_int_equal(api_cdp_image_decode(s, strlen(s), 1024, API_CDP_PNG,
	    &out, &len, &w, &h, &err), 0);
	assert_int_equal(len, sizeof(png));
	assert_int_equal(w, 640);
	assert_int_equal(h, 480);
	free(out);
	/* over the bound: refused before decoding */
	assert_int_equal(api_cdp_image_decode(s, strlen(s), 16, API_CDP_PNG,
	    &out, &len, &w, &h, &err), -1);
	assert_string_equal(err.code, SBX_E_TOO_LARGE);
	assert_null(out);
	/* a PNG is not a JPEG */
	assert_int_equal(api_cdp_image_decode(s, strlen(s), 1024, API_CDP_JPEG,
	    &out, &len, &w, &h, &err), -1);
	assert_string_equal(err.code, SBX_E_RUNTIME);
	free(s);
	/* a PNG of width 0 */
	png[18] = png[19] = 0;
	s = b64(png, sizeof(png));
	assert_int_equal(api_cdp_image_decode(s, strlen(s), 1024, API_CDP_PNG,
	    &out, &len, &w, &h, &err), -1);
	free(s);
	s = b64(jpg, sizeof(jpg));
	assert_int_equal(api_cdp_image_decode(s, strlen(s), 1024, API_CDP_JPEG,
	    &out, &len, &w, &h, &err), 0);
	assert_int_equal(w, 200);
	assert_int_equal(h, 100);
	free(out);
	free(s);
	/* not base64 */
	assert_int_equal(api_cdp_image_decode("!!!!", 4, 1024, API_CDP_PNG,
	    &out, &len, &w, &h, &err), -1);
	assert_string_equal(err.code, SBX_E_RUNTIME);
	assert_int_equal(api_cdp_image_decode("abc", 3, 1024, API_CDP_PNG,
	    &out, &len, &w, &h, &err), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_http_head),
		cmocka_unit_test(test_pick_page),
		cmocka_unit_test(test_images),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
