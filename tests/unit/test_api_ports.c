/* test_api_ports.c - the ports proxy's pure parts: the head a sandbox's server sees, the signed tokens, the preview Host and the port segment (api/api_ports.h, adr/0053). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <sodium.h>

#include "api_ports.h"
#include "sbx_proto.h"

/* The head built for in, as a string (owned), or NULL with *err. */
static char *
build(const struct api_ports_head_in *in, int *up, struct sbx_err *err)
{
	struct evbuffer *b = evbuffer_new();
	size_t n;
	char *s = NULL;

	assert_non_null(b);
	evbuffer_add(b, "X", 1);  /* what was there stays, untouched */
	if (api_ports_head_build(in, b, up, err) == 0) {
		n = evbuffer_get_length(b);
		s = calloc(1, n + 1);
		evbuffer_remove(b, s, n);
		assert_int_equal(s[0], 'X');
		memmove(s, s + 1, n);
	} else {
		assert_int_equal(evbuffer_get_length(b), 1);
	}
	evbuffer_free(b);
	return s;
}

static struct api_ports_head_in
base_in(const struct api_ports_hdr *h, size_t n)
{
	struct api_ports_head_in in = {
		.method = "GET", .path = "/a/b.txt", .query = NULL, .hdrs = h,
		.nhdrs = n, .body_len = 0, .port = 8000,
		.client_addr = "203.0.113.7", .proto = "https",
		.prefix = "/api/v1/npcs/al/sandbox/ports/8000",
	};
	return in;
}

static void
test_head_drops_credentials_and_hop_by_hop(void **state)
{
	const struct api_ports_hdr h[] = {
		{ "Host", "api.example.test" },
		{ "authorization", "Bearer sekrit-key" },
		{ "Connection", "keep-alive, X-Hop" },
		{ "Keep-Alive", "timeout=5" },
		{ "x-hop", "gone" },
		{ "Proxy-Authorization", "Basic eA==" },
		{ "TE", "trailers" },
		{ "Transfer-Encoding", "chunked" },
		{ "Accept", "text/html" },
		{ "Cookie", "a=1" },
		{ "Forwarded", "for=evil" },
		{ "X-Forwarded-Host", "evil" },
	};
	struct api_ports_head_in in = base_in(h, sizeof(h) / sizeof(h[0]));
	struct sbx_err err;
	int up = -1;
	char *s;

	(void)state;
	s = build(&in, &up, &err);
	assert_non_null(s);
	assert_int_equal(up, 0);
	assert_string_equal(s,
	    "GET /a/b.txt HTTP/1.1\r\n"
	    "Accept: text/html\r\n"
	    "Cookie: a=1\r\n"
	    "Host: 127.0.0.1:8000\r\n"
	    "X-Forwarded-For: 203.0.113.7\r\n"
	    "X-Forwarded-Host: api.example.test\r\n"
	    "X-Forwarded-Proto: https\r\n"
	    "X-Forwarded-Prefix: /api/v1/npcs/al/sandbox/ports/8000\r\n"
	    "Connection: close\r\n"
	    "\r\n");
	assert_null(strstr(s, "sekrit"));
	free(s);
}

static void
test_head_strips_only_the_ticket_parameter(void **state)
{
	struct api_ports_head_in in = base_in(NULL, 0);
	struct sbx_err err;
	const struct { const char *q, *want; } cases[] = {
		{ "sbx_ticket=abc", "GET /a/b.txt HTTP/1.1" },
		{ "a=1&sbx_ticket=abc&b=2", "GET /a/b.txt?a=1&b=2 HTTP/1.1" },
		{ "sbx_ticket&sbx_ticket=x&c", "GET /a/b.txt?c HTTP/1.1" },
		{ "sbx_ticketx=1&sbx_tick=2", "GET /a/b.txt?sbx_ticketx=1&sbx_tick=2 HTTP/1.1" },
		{ "&&a=%41&", "GET /a/b.txt?a=%41 HTTP/1.1" },
		{ "", "GET /a/b.txt HTTP/1.1" },
	};
	size_t i;
	int up;
	char *s;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		in.query = cases[i].q;
		s = build(&in, &up, &err);
		assert_non_null(s);
		*strstr(s, "\r\n") = '\0';
		assert_string_equal(s, cases[i].want);
		free(s);
	}
	/* An empty rest is the root. */
	in.query = NULL;
	in.path = "";
	s = build(&in, &up, &err);
	assert_non_null(s);
	assert_memory_equal(s, "GET / HTTP/1.1\r\n", 16);
	free(s);
}

static void
test_head_passes_an_upgrade_on(void **state)
{
	const struct api_ports_hdr h[] = {
		{ "Connection", "keep-alive, Upgrade" },
		{ "Upgrade", "websocket" },
		{ "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==" },
		{ "Sec-WebSocket-Version", "13" },
		{ "X-Forwarded-For", "198.51.100.1" },
	};
	struct api_ports_head_in in = base_in(h, sizeof(h) / sizeof(h[0]));
	struct sbx_err err;
	int up = 0;
	char *s;

	(void)state;
	in.prefix = NULL;
	s = build(&in, &up, &err);
	assert_non_null(s);
	assert_int_equal(up, 1);
	assert_string_equal(s,
	    "GET /a/b.txt HTTP/1.1\r\n"
	    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	    "Sec-WebSocket-Version: 13\r\n"
	    "Host: 127.0.0.1:8000\r\n"
	    "X-Forwarded-For: 198.51.100.1, 203.0.113.7\r\n"
	    "X-Forwarded-Proto: https\r\n"
	    "Connection: Upgrade\r\n"
	    "Upgrade: websocket\r\n"
	    "\r\n");
	free(s);
	/* Upgrade without Connection naming it is no upgrade (RFC 9110
	 * §7.8): the Upgrade field is dropped, the connection closes. */
	in.hdrs = h + 1;
	in.nhdrs = 1;
	s = build(&in, &up, &err);
	assert_non_null(s);
	assert_int_equal(up, 0);
	assert_null(strstr(s, "websocket"));
	assert_non_null(strstr(s, "Connection: close\r\n"));
	free(s);
}

static void
test_head_sets_the_length_of_the_body_read(void **state)
{
	const struct api_ports_hdr h[] = {
		{ "Transfer-Encoding", "chunked" },
		{ "Content-Length", "99" },
		{ "Expect", "100-continue" },
	};
	struct api_ports_head_in in = base_in(h, sizeof(h) / sizeof(h[0]));
	struct sbx_err err;
	int up;
	char *s;

	(void)state;
	in.method = "POST";
	in.body_len = 5u << 20;
	s = build(&in, &up, &err);
	assert_non_null(s);
	assert_non_null(strstr(s, "\r\nContent-Length: 5242880\r\n"));
	assert_null(strstr(s, "99"));
	assert_null(strstr(s, "chunked"));
	assert_null(strstr(s, "100-continue"));
	free(s);
	/* An empty POST says so; an empty GET says nothing. */
	in.body_len = 0;
	s = build(&in, &up, &err);
	assert_non_null(strstr(s, "\r\nContent-Length: 0\r\n"));
	free(s);
	in.method = "GET";
	s = build(&in, &up, &err);
	assert_null(strstr(s, "Content-Length"));
	free(s);
}

static void
test_head_refuses_bytes_http_forbids(void **state)
{
	struct api_ports_hdr h[1] = { { "X-A", "ok" } };
	struct api_ports_head_in in;
	struct sbx_err err;
	int up = 7;
	const char *bad_values[] = { "a\r\nInjected: 1", "a\nb", "a\rb",
	    "\x7f", "\x01" };
	const char *bad_names[] = { "", "X A", "X:A", "X\r\nB", "X\x80" };
	const char *bad_paths[] = { "a", "/a b", "/a\r\n", "/a#frag", "/a?b",
	    "/\x7f" };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++) {
		h[0].name = "X-A";
		h[0].value = bad_values[i];
		in = base_in(h, 1);
		assert_null(build(&in, &up, &err));
		assert_string_equal(err.code, SBX_E_BAD_REQUEST);
		assert_int_equal(up, 0);
	}
	for (i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		h[0].name = bad_names[i];
		h[0].value = "v";
		in = base_in(h, 1);
		assert_null(build(&in, &up, &err));
	}
	for (i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
		in = base_in(NULL, 0);
		in.path = bad_paths[i];
		assert_null(build(&in, &up, &err));
	}
	in = base_in(NULL, 0);
	in.query = "a=1 HTTP/1.1\r\nX: y";
	assert_null(build(&in, &up, &err));
	in = base_in(NULL, 0);
	in.method = "GE T";
	assert_null(build(&in, &up, &err));
	in = base_in(NULL, 0);
	in.port = 0;
	assert_null(build(&in, &up, &err));
	in.port = 65536;
	assert_null(build(&in, &up, &err));
	/* obs-text and HTAB in a value pass (RFC 9110 §5.5). */
	h[0].name = "X-A";
	h[0].value = "caf\xc3\xa9\tx";
	in = base_in(h, 1);
	free(build(&in, &up, &err));
}

static void
test_token_round_trip_and_refusals(void **state)
{
	unsigned char master[32], key[API_PORTS_KEY_BYTES],
	    other[API_PORTS_KEY_BYTES];
	struct api_ports_token t = { API_PORTS_PREVIEW, 2000000000u, 8000,
	    42, 7 }, got;
	char tok[API_PORTS_TOKEN_LEN + 1], bad[API_PORTS_TOKEN_LEN + 1];
	size_t i;

	(void)state;
	assert_true(sodium_init() >= 0);
	memset(master, 3, sizeof(master));
	api_ports_key_derive(master, key);
	/* The derived key is not the master (no cross-use with tickets). */
	assert_memory_not_equal(master, key, 32);
	assert_int_equal(api_ports_token_make(key, &t, tok, sizeof(tok)), 0);
	assert_int_equal(strlen(tok), API_PORTS_TOKEN_LEN);
	assert_int_equal(strspn(tok, "abcdefghijklmnopqrstuvwxyz234567"),
	    API_PORTS_TOKEN_LEN);
	assert_int_equal(api_ports_token_check(key, tok, strlen(tok),
	    1999999999, &got), 1);
	assert_int_equal(got.kind, API_PORTS_PREVIEW);
	assert_int_equal(got.expires, 2000000000u);
	assert_int_equal(got.port, 8000);
	assert_int_equal(got.npc_id, 42);
	assert_int_equal(got.principal_id, 7);
	/* A browser's lowercasing is harmless; uppercase is the same token. */
	for (i = 0; i < API_PORTS_TOKEN_LEN; i++)
		bad[i] = (char)(tok[i] >= 'a' && tok[i] <= 'z' ? tok[i] - 32 :
		    tok[i]);
	bad[API_PORTS_TOKEN_LEN] = '\0';
	assert_int_equal(api_ports_token_check(key, bad, API_PORTS_TOKEN_LEN,
	    0, &got), 1);
	/* Expired: at its second and after. */
	assert_int_equal(api_ports_token_check(key, tok, strlen(tok),
	    2000000000, &got), 0);
	assert_int_equal(got.port, 0);
	/* Another key. */
	memset(master, 4, sizeof(master));
	api_ports_key_derive(master, other);
	assert_int_equal(api_ports_token_check(other, tok, strlen(tok), 0,
	    &got), 0);
	/* Every single character changed is refused. */
	for (i = 0; i < API_PORTS_TOKEN_LEN; i++) {
		memcpy(bad, tok, sizeof(bad));
		bad[i] = bad[i] == 'a' ? 'b' : 'a';
		assert_int_equal(api_ports_token_check(key, bad,
		    API_PORTS_TOKEN_LEN, 0, &got), 0);
	}
	/* Short, long, foreign characters. */
	assert_int_equal(api_ports_token_check(key, tok, 49, 0, &got), 0);
	assert_int_equal(api_ports_token_check(key, "", 0, 0, &got), 0);
	memcpy(bad, tok, sizeof(bad));
	bad[3] = '1';
	assert_int_equal(api_ports_token_check(key, bad, 50, 0, &got), 0);
	/* Out of range claims cannot be made. */
	t.port = 0;
	assert_int_equal(api_ports_token_make(key, &t, tok, sizeof(tok)), -1);
	t.port = 1;
	assert_int_equal(api_ports_token_make(key, &t, tok, 50), -1);
}

static void
test_preview_host_and_port_segment(void **state)
{
	char host[128];
	const char *tok = "abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopq";
	const char *p;
	size_t n;

	(void)state;
	assert_int_equal(strlen(tok) + 1, API_PORTS_TOKEN_LEN);
	snprintf(host, sizeof(host), "%sr.Preview.Example.test:8443", tok);
	p = api_ports_preview_host(host, "preview.example.test", &n);
	assert_ptr_equal(p, host);
	assert_int_equal(n, API_PORTS_TOKEN_LEN);
	snprintf(host, sizeof(host), "%sr.preview.example.test", tok);
	assert_non_null(api_ports_preview_host(host, "preview.example.test",
	    &n));
	assert_null(api_ports_preview_host(host, "example.test", &n));
	assert_null(api_ports_preview_host(host, "", &n));
	assert_null(api_ports_preview_host(host, NULL, &n));
	snprintf(host, sizeof(host), "%sr.preview.example.test.evil", tok);
	assert_null(api_ports_preview_host(host, "preview.example.test", &n));
	snprintf(host, sizeof(host), "x.%sr.preview.example.test", tok);
	assert_null(api_ports_preview_host(host, "preview.example.test", &n));
	assert_null(api_ports_preview_host("preview.example.test",
	    "preview.example.test", &n));
	assert_int_equal(api_ports_port_parse("1"), 1);
	assert_int_equal(api_ports_port_parse("65535"), 65535);
	assert_int_equal(api_ports_port_parse("8000"), 8000);
	assert_int_equal(api_ports_port_parse("0"), 0);
	assert_int_equal(api_ports_port_parse("65536"), 0);
	assert_int_equal(api_ports_port_parse("70000"), 0);
	assert_int_equal(api_ports_port_parse("08000"), 0);
	assert_int_equal(api_ports_port_parse("-1"), 0);
	assert_int_equal(api_ports_port_parse("+80"), 0);
	assert_int_equal(api_ports_port_parse("80a"), 0);
	assert_int_equal(api_ports_port_parse("999999999999"), 0);
	assert_int_equal(api_ports_port_parse(""), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_head_drops_credentials_and_hop_by_hop),
		cmocka_unit_test(test_head_strips_only_the_ticket_parameter),
		cmocka_unit_test(test_head_passes_an_upgrade_on),
		cmocka_unit_test(test_head_sets_the_length_of_the_body_read),
		cmocka_unit_test(test_head_refuses_bytes_http_forbids),
		cmocka_unit_test(test_token_round_trip_and_refusals),
		cmocka_unit_test(test_preview_host_and_port_segment),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
