/* test_api_connect.c - the Connect protocol's bytes of the api (api/api_connect.c through api_connect_wire.h, adr/0060): content types, the timeout header, a body's one message (unary JSON, one streaming envelope), envelopes out, and the code tables (sbx code -> Connect code -> HTTP status). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <jansson.h>

#include "api_connect_wire.h"
#include "sbx_proto.h"

/* One envelope of flags and text, in buf; returns its length. */
static size_t
env(unsigned char *buf, unsigned flags, const char *text)
{
	size_t n = strlen(text);

	buf[0] = (unsigned char)flags;
	buf[1] = (unsigned char)(n >> 24);
	buf[2] = (unsigned char)(n >> 16);
	buf[3] = (unsigned char)(n >> 8);
	buf[4] = (unsigned char)n;
	memcpy(buf + 5, text, n);
	return n + 5;
}

static void
assert_refused(const unsigned char *p, size_t n, enum api_connect_kind kind,
    size_t max, const char *code)
{
	struct sbx_err err;
	json_t *m;

	sbx_err_clear(&err);
	m = api_connect_decode(p, n, kind, max, &err);
	assert_null(m);
	assert_string_equal(err.code, code);
	assert_true(err.message[0] != '\0');
}

static void
test_content_types_of_the_json_codec(void **state)
{
	(void)state;
	assert_int_equal(api_connect_ctype("application/json",
	    API_CONNECT_UNARY), 1);
	assert_int_equal(api_connect_ctype("Application/JSON; charset=utf-8",
	    API_CONNECT_UNARY), 1);
	assert_int_equal(api_connect_ctype("application/connect+json",
	    API_CONNECT_SERVER_STREAM), 1);
	/* The other codec: unimplemented (0); no type or a foreign one: 415. */
	assert_int_equal(api_connect_ctype("application/proto",
	    API_CONNECT_UNARY), 0);
	assert_int_equal(api_connect_ctype("application/connect+proto",
	    API_CONNECT_SERVER_STREAM), 0);
	assert_int_equal(api_connect_ctype("application/json",
	    API_CONNECT_SERVER_STREAM), 0);
	assert_int_equal(api_connect_ctype("application/jsonx",
	    API_CONNECT_UNARY), -1);
	assert_int_equal(api_connect_ctype("text/plain", API_CONNECT_UNARY), -1);
	assert_int_equal(api_connect_ctype(NULL, API_CONNECT_UNARY), -1);
}

static void
test_timeout_header_is_one_to_ten_digits(void **state)
{
	int64_t ms = 7;

	(void)state;
	assert_int_equal(api_connect_timeout_parse(NULL, &ms), 0);
	assert_int_equal(ms, 0);
	assert_int_equal(api_connect_timeout_parse("60000", &ms), 0);
	assert_int_equal(ms, 60000);
	assert_int_equal(api_connect_timeout_parse("9999999999", &ms), 0);
	assert_int_equal(ms, 9999999999LL);
	assert_int_equal(api_connect_timeout_parse("12345678901", &ms), -1);
	assert_int_equal(ms, 0);
	assert_int_equal(api_connect_timeout_parse("", &ms), -1);
	assert_int_equal(api_connect_timeout_parse("-1", &ms), -1);
	assert_int_equal(api_connect_timeout_parse("10 ", &ms), -1);
}

static void
test_unary_body_is_one_json_object(void **state)
{
	struct sbx_err err;
	json_t *m;

	(void)state;
	m = api_connect_decode((const unsigned char *)"{\"a\":1}", 7,
	    API_CONNECT_UNARY, 1024, &err);
	assert_non_null(m);
	assert_int_equal(json_integer_value(json_object_get(m, "a")), 1);
	json_decref(m);
	/* The empty message. */
	m = api_connect_decode(NULL, 0, API_CONNECT_UNARY, 1024, &err);
	assert_non_null(m);
	assert_int_equal(json_object_size(m), 0);
	json_decref(m);
	assert_refused((const unsigned char *)"[1]", 3, API_CONNECT_UNARY, 1024,
	    SBX_E_BAD_REQUEST);
	assert_refused((const unsigned char *)"{\"a\":1,\"a\":2}", 13,
	    API_CONNECT_UNARY, 1024, SBX_E_BAD_REQUEST);
	assert_refused((const unsigned char *)"{\"a\":1}", 7, API_CONNECT_UNARY,
	    6, SBX_E_TOO_LARGE);
}

static void
test_stream_body_is_exactly_one_envelope(void **state)
{
	unsigned char b[256];
	struct sbx_err err;
	size_t n;
	json_t *m;

	(void)state;
	n = env(b, 0, "{\"process\":{\"pid\":1000}}");
	m = api_connect_decode(b, n, API_CONNECT_SERVER_STREAM, 1024, &err);
	assert_non_null(m);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(m,
	    "process"), "pid")), 1000);
	json_decref(m);
	/* Short, a length that is not the rest, two envelopes, flags. */
	assert_refused(b, 4, API_CONNECT_SERVER_STREAM, 1024, SBX_E_BAD_REQUEST);
	assert_refused(b, n - 1, API_CONNECT_SERVER_STREAM, 1024,
	    SBX_E_BAD_REQUEST);
	n = env(b, 0, "{}");
	n += env(b + n, 0, "{}");
	assert_refused(b, n, API_CONNECT_SERVER_STREAM, 1024, SBX_E_BAD_REQUEST);
	n = env(b, 1, "{}");
	assert_refused(b, n, API_CONNECT_SERVER_STREAM, 1024,
	    SBX_E_METHOD_NOT_ALLOWED);
	n = env(b, 2, "{}");
	assert_refused(b, n, API_CONNECT_SERVER_STREAM, 1024, SBX_E_BAD_REQUEST);
	/* Over the cap: judged on the prefix, before the bytes. */
	n = env(b, 0, "{\"a\":\"0123456789\"}");
	assert_refused(b, n, API_CONNECT_SERVER_STREAM, 8, SBX_E_TOO_LARGE);
	/* The prefix claims 4 GiB; nothing is read past the body. */
	memcpy(b, "\x00\xff\xff\xff\xff{}", 7);
	assert_refused(b, 7, API_CONNECT_SERVER_STREAM, 1 << 20,
	    SBX_E_TOO_LARGE);
}

static void
test_envelopes_out_carry_flags_length_and_json(void **state)
{
	struct evbuffer *b = evbuffer_new();
	const unsigned char *p;
	json_t *m = json_pack("{s:{s:{s:i}}}", "event", "start", "pid", 1000);
	json_t *end = json_object();

	(void)state;
	assert_int_equal(api_connect_envelope(b, 0, m), 0);
	assert_int_equal(api_connect_envelope(b, 0x02, end), 0);
	p = evbuffer_pullup(b, -1);
	assert_int_equal(p[0], 0);
	assert_int_equal((p[1] << 24 | p[2] << 16 | p[3] << 8 | p[4]),
	    (int)strlen("{\"event\":{\"start\":{\"pid\":1000}}}"));
	assert_memory_equal(p + 5, "{\"event\":{\"start\":{\"pid\":1000}}}", 32);
	p += 5 + 32;
	assert_memory_equal(p, "\x02\x00\x00\x00\x02{}", 7);
	assert_int_equal(evbuffer_get_length(b), 5 + 32 + 7);
	json_decref(m);
	json_decref(end);
	evbuffer_free(b);
}

static void
test_codes_map_to_connect_and_http(void **state)
{
	static const struct { const char *sbx, *connect; int status; } t[] = {
		{ SBX_E_NOT_FOUND, "not_found", 404 },
		{ SBX_E_FORBIDDEN, "permission_denied", 403 },
		{ SBX_E_PATH_OUTSIDE_WORK, "permission_denied", 403 },
		{ SBX_E_BAD_REQUEST, "invalid_argument", 400 },
		{ SBX_E_TOO_MANY, "resource_exhausted", 429 },
		{ SBX_E_UNAUTHORIZED, "unauthenticated", 401 },
		{ SBX_E_TIMEOUT, "deadline_exceeded", 504 },
		{ SBX_E_NOT_RUNNING, "unavailable", 503 },
		{ SBX_E_CANCELLED, "canceled", 499 },
		{ SBX_E_CONFLICT, "failed_precondition", 400 },
		{ "no_such_code", "internal", 500 },
	};
	struct sbx_err e;
	json_t *o;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		sbx_err_clear(&e);
		sbx_err_set(&e, t[i].sbx, "x");
		assert_string_equal(api_connect_code_of(&e), t[i].connect);
		assert_int_equal(api_connect_http_status(t[i].connect),
		    t[i].status);
	}
	assert_int_equal(api_connect_http_status("unimplemented"), 501);
	assert_int_equal(api_connect_http_status("bogus"), 500);
	o = api_connect_error_json("not_found", "process with pid 1 not found");
	assert_string_equal(json_string_value(json_object_get(o, "code")),
	    "not_found");
	assert_string_equal(json_string_value(json_object_get(o, "message")),
	    "process with pid 1 not found");
	json_decref(o);
	o = api_connect_error_json("internal", "");
	assert_null(json_object_get(o, "message"));
	json_decref(o);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_content_types_of_the_json_codec),
		cmocka_unit_test(test_timeout_header_is_one_to_ten_digits),
		cmocka_unit_test(test_unary_body_is_one_json_object),
		cmocka_unit_test(test_stream_body_is_exactly_one_envelope),
		cmocka_unit_test(test_envelopes_out_carry_flags_length_and_json),
		cmocka_unit_test(test_codes_map_to_connect_and_http),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
