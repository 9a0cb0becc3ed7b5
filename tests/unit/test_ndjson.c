/* test_ndjson.c - NDJSON exec event codec: byte-exact round trips, strict UTF-8, parser limits and order. */
#include <dirent.h>
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
#include <sodium.h>

#include "golden.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"

/* ------------------------------------------------------------------ */
/* helpers                                                             */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t
rnd(void)
{
	/* xorshift64*: deterministic, so a failure can be replayed. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static size_t
rnd_below(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

/* Appends code point cp as UTF-8 at b; returns bytes written. */
static size_t
put_cp(unsigned char *b, uint32_t cp)
{
	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		b[0] = (unsigned char)(0xC0 | (cp >> 6));
		b[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		b[0] = (unsigned char)(0xE0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		b[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	b[0] = (unsigned char)(0xF0 | (cp >> 18));
	b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
	b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
	b[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

static uint32_t
rnd_scalar(void)
{
	uint32_t cp;

	switch (rnd_below(5)) {
	case 0: return (uint32_t)rnd_below(0x80);           /* incl. NUL, CR */
	case 1: return 0x80 + (uint32_t)rnd_below(0x800 - 0x80);
	case 2:
		do
			cp = 0x800 + (uint32_t)rnd_below(0x10000 - 0x800);
		while (cp >= 0xD800 && cp <= 0xDFFF);
		return cp;
	case 3: return 0x10000 + (uint32_t)rnd_below(0x110000 - 0x10000);
	default: return 0x20 + (uint32_t)rnd_below(0x5F);    /* printable */
	}
}

/* Byte sequences that must never pass as UTF-8. */
static const char *const bad_seqs[] = {
	"\xED\xA0\x80", "\xED\xBF\xBF", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF",
	"\xF0\x80\x80\xAF", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF",
	"\xFE", "\x80", "\xBF", "\xE2\x82", "\xF0\x9F\x98",
};

/* Fills b[0..len) with one of several kinds of content. */
static void
fill(unsigned char *b, size_t len, int kind)
{
	static const char special[] = "\0\r\n\"\\\t\x01\x1f\x7f/ abc";
	unsigned char tmp[4];
	size_t i = 0, n, k;
	const char *s;

	switch (kind) {
	case 0: /* arbitrary bytes */
		for (i = 0; i < len; i++)
			b[i] = (unsigned char)rnd();
		return;
	case 1: /* ASCII with every character JSON must escape */
		for (i = 0; i < len; i++)
			b[i] = (unsigned char)special[rnd_below(sizeof(special) - 1)];
		return;
	case 4: /* NUL only: the worst case of escaping (\u0000) */
		memset(b, 0, len);
		return;
	default: /* valid UTF-8, kind 3: with bad sequences spliced in */
		while (i < len) {
			if (kind == 3 && rnd_below(16) == 0) {
				s = bad_seqs[rnd_below(sizeof(bad_seqs) /
				    sizeof(bad_seqs[0]))];
				n = strlen(s);
				for (k = 0; k < n && i < len; k++)
					b[i++] = (unsigned char)s[k];
				continue;
			}
			n = put_cp(tmp, rnd_scalar());
			if (n > len - i) {
				b[i++] = ' ';
				continue;
			}
			memcpy(b + i, tmp, n);
			i += n;
		}
		return;
	}
}

struct expect {
	const unsigned char *buf;
	size_t len;
	int stream;
	int seen;
};

static int
check_output_cb(void *arg, const struct sbx_event *ev, const char *line,
    size_t len)
{
	struct expect *x = arg;

	(void)line;
	(void)len;
	if (ev->type == SBX_EVENT_START || ev->type == SBX_EVENT_EXIT)
		return 0;
	assert_int_equal(ev->stream, x->stream);
	assert_int_equal(ev->len, x->len);
	if (x->len > 0)
		assert_memory_equal(ev->data, x->buf, x->len);
	x->seen++;
	return 0;
}

/* Feeds s[0..n) in up to three random pieces. */
static int
feed_split(struct sbx_ndjson_parser *p, const char *s, size_t n,
    struct sbx_err *err)
{
	size_t a = rnd_below(n + 1), b = a + rnd_below(n - a + 1);

	if (sbx_ndjson_parser_feed(p, s, a, err) != 0)
		return -1;
	if (sbx_ndjson_parser_feed(p, s + a, b - a, err) != 0)
		return -1;
	return sbx_ndjson_parser_feed(p, s + b, n - b, err);
}

/* The line jansson itself writes for {"type":T, MEMBER: string(buf)}. */
static char *
jansson_line(const char *type, const unsigned char *buf, size_t len)
{
	json_t *o = json_object();
	char *s;

	json_object_set_new(o, "type", json_string(type));
	json_object_set_new(o, "data", json_stringn((const char *)buf, len));
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

/* ------------------------------------------------------------------ */
/* tests                                                               */

/*
 * 10,000 buffers of random content and length (a few of 1 MiB) survive
 * encode -> parse byte for byte; each encoding is one valid JSON line; text
 * goes as "data" exactly when it is UTF-8 (jansson's own check agrees) and
 * then matches jansson's own serialisation byte for byte.
 */
static void
test_random_buffers_round_trip_exactly(void **state)
{
	struct expect x = { 0 };
	struct sbx_ndjson_parser *p;
	struct evbuffer *out = evbuffer_new();
	struct sbx_err err;
	unsigned char *buf;
	size_t maxlen = 1024 * 1024, len, n;
	json_t *j, *str;
	char *line, *ref;
	int i, kind, valid, big = 0;
	const int count = 10000;

	(void)state;
	buf = malloc(maxlen);
	assert_non_null(buf);
	p = sbx_ndjson_parser_new(0, check_output_cb, &x);
	assert_non_null(p);
	assert_int_equal(sbx_ndjson_start(out, "ex-r", 1), 0);
	line = take(out, &n);
	assert_int_equal(sbx_ndjson_parser_feed(p, line, n, &err), 0);
	free(line);

	for (i = 0; i < count; i++) {
		kind = (int)rnd_below(4);
		if (i % 2000 == 1999) {
			/* five 1 MiB buffers, one of them all NUL (6 MiB line) */
			len = maxlen;
			kind = big++ == 2 ? 4 : (int)rnd_below(4);
		} else if (rnd_below(50) == 0)
			len = rnd_below(65536);
		else
			len = rnd_below(600);
		fill(buf, len, kind);

		x.buf = buf;
		x.len = len;
		x.stream = 1 + (int)rnd_below(2);
		assert_int_equal(sbx_ndjson_output(out, x.stream, buf, len), 0);
		line = take(out, &n);
		/* exactly one '\n', at the end */
		assert_true(n >= 2 && line[n - 1] == '\n');
		assert_null(memchr(line, '\n', n - 1));
		/* valid JSON by itself */
		j = json_loadb(line, n - 1, JSON_ALLOW_NUL, NULL);
		assert_non_null(j);
		assert_string_equal(json_string_value(json_object_get(j, "type")),
		    x.stream == 1 ? "stdout" : "stderr");
		valid = sbx_utf8_valid(buf, len);
		str = json_stringn((const char *)buf, len);
		assert_int_equal(valid, str != NULL);   /* jansson agrees */
		/* the wire rule (adr/0028), with jansson's escaping as the
		 * reference length: text only when no longer than base64 */
		if (str != NULL)
			valid = json_dumpb(str, NULL, 0, JSON_ENCODE_ANY) - 2 <=
			    4 * ((len + 2) / 3);
		json_decref(str);
		assert_int_equal(json_object_get(j, "data") != NULL, valid);
		assert_int_equal(json_object_get(j, "data_b64") != NULL, !valid);
		json_decref(j);
		if (valid && len <= 65536) {
			ref = jansson_line(x.stream == 1 ? "stdout" : "stderr",
			    buf, len);
			assert_int_equal(strlen(ref), n - 1);
			assert_memory_equal(ref, line, n - 1);
			free(ref);
		}
		assert_int_equal(feed_split(p, line, n, &err), 0);
		free(line);
		assert_int_equal(x.seen, i + 1);
	}
	assert_int_equal(big, 5);
	assert_int_equal(sbx_ndjson_exit(out, 0, NULL, 1, 0), 0);
	line = take(out, &n);
	assert_int_equal(sbx_ndjson_parser_feed(p, line, n, &err), 0);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), 0);
	free(line);
	sbx_ndjson_parser_free(p);
	evbuffer_free(out);
	free(buf);
}

/* Decodes every output line in out into dst (appending); counts data_b64 events. */
static size_t
decode_lines(struct evbuffer *out, unsigned char *dst, size_t *b64s)
{
	size_t n, total = 0, len;
	char *all = take(out, &n), *line = all, *nl;
	json_t *j;
	const char *v;

	while (line < all + n && (nl = memchr(line, '\n', (size_t)(all + n - line))) != NULL) {
		j = json_loadb(line, (size_t)(nl - line), JSON_ALLOW_NUL, NULL);
		assert_non_null(j);
		if ((v = json_string_value(json_object_get(j, "data"))) != NULL) {
			len = json_string_length(json_object_get(j, "data"));
			memcpy(dst + total, v, len);
			total += len;
		} else {
			v = json_string_value(json_object_get(j, "data_b64"));
			assert_non_null(v);
			/* dst has room for every decoded byte (callers) */
			assert_int_equal(sodium_base642bin(dst + total, strlen(v),
			    v, strlen(v), NULL, &len, NULL,
			    sodium_base64_VARIANT_ORIGINAL), 0);
			total += len;
			(*b64s)++;
		}
		json_decref(j);
		line = nl + 1;
	}
	free(all);
	return total;
}

/*
 * SPEC §5: text cut anywhere by reads stays text. Every split of a text
 * holding 2-, 3- and 4-byte characters into two reads, and the text fed one
 * byte at a time, gives only "data" events; mixed with invalid bytes, only
 * the broken characters go as data_b64; bytes always come back exactly.
 */
static void
test_held_tail_keeps_split_characters_text(void **state)
{
	static const unsigned char text[] = "a\xE2\x82\xAC" "b\xC3\xA9\xF0\x9F\x98\x80z\xE2\x82\xAC";
	static const unsigned char mixed[] = "x\xE2\x82" "y\xFF\xE2\x82\xAC\xF0\x9F";
	struct sbx_utf8_hold h;
	struct evbuffer *out = evbuffer_new();
	unsigned char got[64];
	size_t tl = sizeof(text) - 1, ml = sizeof(mixed) - 1, cut, i, b64s, n;

	(void)state;
	for (cut = 0; cut <= tl; cut++) {
		memset(&h, 0, sizeof(h));
		assert_int_equal(sbx_ndjson_output_held(out, &h, 1, text, cut), 0);
		assert_int_equal(sbx_ndjson_output_held(out, &h, 1, text + cut, tl - cut), 0);
		assert_int_equal(h.len, 0);
		assert_int_equal(sbx_ndjson_output_flush(out, &h, 1), 0);
		b64s = 0;
		n = decode_lines(out, got, &b64s);
		assert_int_equal(n, tl);
		assert_memory_equal(got, text, tl);
		assert_int_equal(b64s, 0);
	}
	memset(&h, 0, sizeof(h));
	for (i = 0; i < tl; i++)
		assert_int_equal(sbx_ndjson_output_held(out, &h, 2, text + i, 1), 0);
	assert_int_equal(sbx_ndjson_output_flush(out, &h, 2), 0);
	b64s = 0;
	assert_int_equal(decode_lines(out, got, &b64s), tl);
	assert_memory_equal(got, text, tl);
	assert_int_equal(b64s, 0);
	/* Broken: E2 82 before 'y', FF, and F0 9F cut by the end of the stream. */
	for (cut = 0; cut <= ml; cut++) {
		memset(&h, 0, sizeof(h));
		assert_int_equal(sbx_ndjson_output_held(out, &h, 1, mixed, cut), 0);
		assert_int_equal(sbx_ndjson_output_held(out, &h, 1, mixed + cut, ml - cut), 0);
		assert_int_equal(h.len, 2);   /* F0 9F held */
		assert_int_equal(sbx_ndjson_output_flush(out, &h, 1), 0);
		assert_int_equal(sbx_ndjson_output_flush(out, &h, 1), 0); /* empty now */
		b64s = 0;
		assert_int_equal(decode_lines(out, got, &b64s), ml);
		assert_memory_equal(got, mixed, ml);
	}
	assert_int_equal(sbx_ndjson_output_held(out, &h, 3, text, 1), -1);
	assert_int_equal(sbx_ndjson_output_held(out, NULL, 1, text, 1), -1);
	assert_int_equal(evbuffer_get_length(out), 0);
	evbuffer_free(out);
}

/* A piece over SBX_NDJSON_MAX_CHUNK is cut between characters, not inside one. */
static void
test_held_output_cuts_big_pieces_on_character_boundaries(void **state)
{
	size_t len = SBX_NDJSON_MAX_CHUNK + 7, i, n;
	unsigned char *buf = malloc(len), *got = malloc(len + 8);
	struct sbx_utf8_hold h = { { 0 }, 0 };
	struct evbuffer *out = evbuffer_new();
	size_t b64s = 0;
	char *all, *nl;
	json_t *j;

	(void)state;
	assert_non_null(buf);
	assert_non_null(got);
	for (i = 0; i + 3 <= len; i += 3)
		memcpy(buf + i, "\xE2\x82\xAC", 3);
	len = i;
	assert_int_equal(sbx_ndjson_output_held(out, &h, 1, buf, len), 0);
	assert_int_equal(h.len, 0);
	/* every line is data */
	all = take(out, &n);
	for (char *l = all; l < all + n; l = nl + 1) {
		nl = memchr(l, '\n', (size_t)(all + n - l));
		assert_non_null(nl);
		j = json_loadb(l, (size_t)(nl - l), 0, NULL);
		assert_non_null(json_object_get(j, "data"));
		json_decref(j);
	}
	evbuffer_add(out, all, n);
	free(all);
	assert_int_equal(decode_lines(out, got, &b64s), len);
	assert_int_equal(b64s, 0);
	assert_memory_equal(got, buf, len);
	evbuffer_free(out);
	free(buf);
	free(got);
}

static void
test_utf8_validator_is_strict(void **state)
{
	static const struct {
		const char *s;
		size_t n;
		int ok;
	} cases[] = {
		{ "", 0, 1 },
		{ "a\0b", 3, 1 },                       /* NUL is text */
		{ "\xC2\x80", 2, 1 },                   /* U+0080 */
		{ "\xDF\xBF", 2, 1 },
		{ "\xE0\xA0\x80", 3, 1 },               /* U+0800 */
		{ "\xED\x9F\xBF", 3, 1 },               /* U+D7FF */
		{ "\xEE\x80\x80", 3, 1 },               /* U+E000 */
		{ "\xEF\xBF\xBF", 3, 1 },               /* U+FFFF */
		{ "\xF0\x90\x80\x80", 4, 1 },           /* U+10000 */
		{ "\xF4\x8F\xBF\xBF", 4, 1 },           /* U+10FFFF */
		{ "\xC0\x80", 2, 0 },                   /* overlong NUL */
		{ "\xC1\xBF", 2, 0 },
		{ "\xE0\x9F\xBF", 3, 0 },               /* overlong */
		{ "\xF0\x8F\xBF\xBF", 4, 0 },           /* overlong */
		{ "\xED\xA0\x80", 3, 0 },               /* U+D800 */
		{ "\xED\xBF\xBF", 3, 0 },               /* U+DFFF */
		{ "\xED\xA0\x80\xED\xB0\x80", 6, 0 },   /* CESU pair */
		{ "\xF4\x90\x80\x80", 4, 0 },           /* U+110000 */
		{ "\xF5\x80\x80\x80", 4, 0 },
		{ "\xFF", 1, 0 },
		{ "\x80", 1, 0 },
		{ "\xE2\x82", 2, 0 },                   /* truncated */
		{ "\xE2\x28\xA1", 3, 0 },
		{ "abcdefgh\xC3", 9, 0 },               /* after the ASCII fast path */
		{ "abcdefghijklmnop\xC3\xA9", 18, 1 },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (sbx_utf8_valid((const unsigned char *)cases[i].s,
		    cases[i].n) != cases[i].ok)
			fail_msg("case %zu: expected %d", i, cases[i].ok);
	}
}

static void
test_incomplete_tail_finds_split_characters(void **state)
{
	(void)state;
	assert_int_equal(sbx_utf8_incomplete_tail(NULL, 0), 0);
	assert_int_equal(sbx_utf8_incomplete_tail((const unsigned char *)"abc", 3), 0);
	assert_int_equal(sbx_utf8_incomplete_tail((const unsigned char *)"a\xE2\x82", 3), 2);
	assert_int_equal(sbx_utf8_incomplete_tail((const unsigned char *)"a\xE2", 2), 1);
	assert_int_equal(sbx_utf8_incomplete_tail((const unsigned char *)"\xF0\x9F\x98", 3), 3);
	assert_int_equal(sbx_utf8_incomplete_tail((const unsigned char *)"\xE2\x82\xAC", 3), 0);
	assert_int_equal(sbx_utf8_incomplete_tail((const unsigned char *)"\xED\xA0", 2), 0);
	assert_int_equal(sbx_utf8_incomplete_tail((const unsigned char *)"\xFF", 1), 0);
	assert_int_equal(sbx_utf8_incomplete_tail((const unsigned char *)"\x80\x80", 2), 0);
}

static void
test_encoder_refuses_bad_arguments_without_writing(void **state)
{
	struct evbuffer *out = evbuffer_new();
	unsigned char *big = calloc(1, SBX_NDJSON_MAX_CHUNK + 1);

	(void)state;
	assert_int_equal(sbx_ndjson_output(out, 3, (const unsigned char *)"x", 1), -1);
	assert_int_equal(sbx_ndjson_output(out, 0, (const unsigned char *)"x", 1), -1);
	assert_int_equal(sbx_ndjson_output(out, 1, NULL, 1), -1);
	assert_int_equal(sbx_ndjson_output(out, 1, big, SBX_NDJSON_MAX_CHUNK + 1), -1);
	assert_int_equal(sbx_ndjson_start(out, NULL, 0), -1);
	assert_int_equal(sbx_ndjson_start(out, "\xFF", 0), -1);
	assert_int_equal(sbx_ndjson_error(out, "timeout", NULL), -1);
	assert_int_equal(sbx_ndjson_exit(out, 0, "\xED\xA0\x80", 0, 0), -1);
	assert_int_equal(evbuffer_get_length(out), 0);
	/* an empty chunk is a valid (if useless) event */
	assert_int_equal(sbx_ndjson_output(out, 2, NULL, 0), 0);
	assert_int_equal(evbuffer_get_length(out), strlen("{\"type\":\"stderr\",\"data\":\"\"}\n"));
	free(big);
	evbuffer_free(out);
}

static void
test_encoder_writes_the_documented_lines(void **state)
{
	struct evbuffer *out = evbuffer_new();
	const unsigned char bin[] = { 0xFF, 0xFE, 0x00, 0x0D, 0x0A };
	char *s;
	size_t n;

	(void)state;
	assert_int_equal(sbx_ndjson_start(out, "e1", 1700000000123LL), 0);
	assert_int_equal(sbx_ndjson_output(out, 1, (const unsigned char *)
	    "x\"\\\n\0 and some plain words", 26), 0);
	assert_int_equal(sbx_ndjson_output(out, 1, (const unsigned char *)"a\"\\\n\0", 5), 0);
	assert_int_equal(sbx_ndjson_output(out, 2, bin, sizeof(bin)), 0);
	assert_int_equal(sbx_ndjson_exit(out, 137, "KILL", 20, 1), 0);
	assert_int_equal(sbx_ndjson_exit(out, 0, NULL, 3, 0), 0);
	assert_int_equal(sbx_ndjson_error(out, "timeout", "too slow"), 0);
	s = take(out, &n);
	assert_string_equal(s,
	    "{\"type\":\"start\",\"exec_id\":\"e1\",\"ts\":1700000000123}\n"
	    "{\"type\":\"stdout\",\"data\":\"x\\\"\\\\\\n\\u0000 and some plain words\"}\n"
	    "{\"type\":\"stdout\",\"data_b64\":\"YSJcCgA=\"}\n"
	    "{\"type\":\"stderr\",\"data_b64\":\"//4ADQo=\"}\n"
	    "{\"type\":\"exit\",\"code\":137,\"signal\":\"KILL\",\"duration_ms\":20,\"truncated\":true}\n"
	    "{\"type\":\"exit\",\"code\":0,\"signal\":null,\"duration_ms\":3,\"truncated\":false}\n"
	    "{\"type\":\"error\",\"code\":\"timeout\",\"message\":\"too slow\"}\n");
	free(s);
	evbuffer_free(out);
}

/* ---- parser over a fixed transcript --------------------------------- */

struct collect {
	struct evbuffer *data[3]; /* per stream */
	int types[64];
	int n;
	int stop_at;              /* return nonzero on this event (1-based) */
	char exec_id[32];
	int code, truncated;
	char signal[16];
	char err_code[32];
};

static int
collect_cb(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct collect *c = arg;
	json_t *j;

	/* the raw line is that event's JSON, without '\n' */
	assert_null(memchr(line, '\n', len));
	j = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
	assert_non_null(j);
	assert_true(json_equal(j, ev->raw));
	json_decref(j);
	if (c->n < 64)
		c->types[c->n] = ev->type;
	c->n++;
	switch (ev->type) {
	case SBX_EVENT_START:
		snprintf(c->exec_id, sizeof(c->exec_id), "%s", ev->exec_id);
		break;
	case SBX_EVENT_STDOUT:
	case SBX_EVENT_STDERR:
		evbuffer_add(c->data[ev->stream], ev->data, ev->len);
		break;
	case SBX_EVENT_EXIT:
		c->code = ev->code;
		c->truncated = ev->truncated;
		snprintf(c->signal, sizeof(c->signal), "%s",
		    ev->signal ? ev->signal : "(null)");
		break;
	case SBX_EVENT_QUOTA:   /* test_broker_quota.c */
		break;
	case SBX_EVENT_ERROR:
		snprintf(c->err_code, sizeof(c->err_code), "%s", ev->err_code);
		break;
	}
	return c->stop_at == c->n;
}

static void
collect_init(struct collect *c)
{
	memset(c, 0, sizeof(*c));
	c->data[1] = evbuffer_new();
	c->data[2] = evbuffer_new();
}

static void
collect_free(struct collect *c)
{
	evbuffer_free(c->data[1]);
	evbuffer_free(c->data[2]);
}

static const unsigned char out1[] = "caf\xC3\xA9 \"q\" \\ \r\n\0end";
static const unsigned char out2[] = { 0xFF, 0xFE, 0x00, 0x0D, 0x0A, 0xED, 0xA0, 0x80 };

/* start, text stdout, binary stderr, exit 137 KILL truncated, error. */
static char *
sample_transcript(size_t *n)
{
	struct evbuffer *out = evbuffer_new();
	char *s;

	sbx_ndjson_start(out, "ex-split", 42);
	sbx_ndjson_output(out, 1, out1, sizeof(out1) - 1);
	sbx_ndjson_output(out, 2, out2, sizeof(out2));
	sbx_ndjson_output(out, 1, out1, 3);
	sbx_ndjson_exit(out, 137, "KILL", 9, 1);
	sbx_ndjson_error(out, "timeout", "exec timed out");
	s = take(out, n);
	evbuffer_free(out);
	return s;
}

static void
check_sample(struct collect *c)
{
	unsigned char want1[sizeof(out1) - 1 + 3];

	memcpy(want1, out1, sizeof(out1) - 1);
	memcpy(want1 + sizeof(out1) - 1, out1, 3);
	assert_int_equal(c->n, 6);
	assert_int_equal(c->types[0], SBX_EVENT_START);
	assert_int_equal(c->types[2], SBX_EVENT_STDERR);
	assert_int_equal(c->types[4], SBX_EVENT_EXIT);
	assert_int_equal(c->types[5], SBX_EVENT_ERROR);
	assert_string_equal(c->exec_id, "ex-split");
	assert_int_equal(evbuffer_get_length(c->data[1]), sizeof(want1));
	assert_memory_equal(evbuffer_pullup(c->data[1], -1), want1, sizeof(want1));
	assert_int_equal(evbuffer_get_length(c->data[2]), sizeof(out2));
	assert_memory_equal(evbuffer_pullup(c->data[2], -1), out2, sizeof(out2));
	assert_int_equal(c->code, 137);
	assert_int_equal(c->truncated, 1);
	assert_string_equal(c->signal, "KILL");
	assert_string_equal(c->err_code, "timeout");
}

static void
test_parser_handles_lines_split_at_every_byte(void **state)
{
	struct sbx_ndjson_parser *p;
	struct collect c;
	struct sbx_err err;
	size_t n, k, i;
	char *s = sample_transcript(&n);

	(void)state;
	for (k = 0; k <= n; k++) {
		collect_init(&c);
		p = sbx_ndjson_parser_new(0, collect_cb, &c);
		assert_int_equal(sbx_ndjson_parser_feed(p, s, k, &err), 0);
		assert_int_equal(sbx_ndjson_parser_feed(p, s + k, n - k, &err), 0);
		assert_int_equal(sbx_ndjson_parser_finish(p, &err), 0);
		check_sample(&c);
		sbx_ndjson_parser_free(p);
		collect_free(&c);
	}
	/* and one byte at a time */
	collect_init(&c);
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	for (i = 0; i < n; i++)
		assert_int_equal(sbx_ndjson_parser_feed(p, s + i, 1, &err), 0);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), 0);
	check_sample(&c);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
	free(s);
}

static void
assert_protocol_error(const struct sbx_err *err)
{
	assert_string_equal(err->code, SBX_E_BAD_REQUEST);
	assert_memory_equal(err->message, SBX_PROTOCOL_ERROR ":",
	    strlen(SBX_PROTOCOL_ERROR ":"));
}

static void
test_parser_rejects_overlong_lines_and_stays_stopped(void **state)
{
	static const char start[] = "{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1}";
	struct sbx_ndjson_parser *p;
	struct collect c;
	struct sbx_err err;
	char line[128];
	size_t max = sizeof(start) - 1;

	(void)state;
	/* exactly max_line is fine */
	collect_init(&c);
	p = sbx_ndjson_parser_new(max, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_feed(p, start, max, &err), 0);
	assert_int_equal(sbx_ndjson_parser_feed(p, "\n", 1, &err), 0);
	assert_int_equal(c.n, 1);
	/* one byte more is refused as soon as it is seen, before any '\n' */
	memset(line, ' ', sizeof(line));
	assert_int_equal(sbx_ndjson_parser_feed(p, line, max, &err), 0);
	assert_int_equal(sbx_ndjson_parser_feed(p, line, 1, &err), -1);
	assert_protocol_error(&err);
	assert_non_null(strstr(err.message, "too long"));
	/* stopped: further input is refused, even a valid line */
	memset(&err, 0, sizeof(err));
	assert_int_equal(sbx_ndjson_parser_feed(p, "{}\n", 3, &err), -1);
	assert_protocol_error(&err);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), -1);
	assert_int_equal(c.n, 1);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
}

static void
test_parser_default_limit_is_8_mib(void **state)
{
	struct sbx_ndjson_parser *p;
	struct collect c;
	struct sbx_err err;
	size_t n = SBX_NDJSON_MAX_LINE_DEFAULT + 1;
	char *big = malloc(n);

	(void)state;
	assert_int_equal(SBX_NDJSON_MAX_LINE_DEFAULT, 8u * 1024 * 1024);
	memset(big, ' ', n);
	collect_init(&c);
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_feed(p, big, n - 1, &err), 0);
	assert_int_equal(sbx_ndjson_parser_feed(p, big, 1, &err), -1);
	assert_protocol_error(&err);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
	free(big);
}

/* Each of these inputs, fed as the whole stream, must be refused. */
static void
test_parser_rejects_malformed_and_out_of_order_events(void **state)
{
#define START "{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1}\n"
#define EXIT "{\"type\":\"exit\",\"code\":0,\"signal\":null,\"duration_ms\":1,\"truncated\":false}\n"
#define ERR "{\"type\":\"error\",\"code\":\"timeout\",\"message\":\"m\"}\n"
	static const char *const bad[] = {
		"not json\n",
		"\n",
		"\r\n",
		"[1,2]\n",
		"\"start\"\n",
		"{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1} {}\n",
		"{\"type\":\"bogus\"}\n",
		"{\"exec_id\":\"x\",\"ts\":1}\n",
		"{\"type\":1}\n",
		"{\"type\":\"start\",\"ts\":1}\n",
		"{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":\"1\"}\n",
		"{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1.5}\n",
		"{\"type\":\"start\",\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1}\n",
		"{\"type\":\"start\",\"exec_id\":\"\xFF\",\"ts\":1}\n",
		START "{\"type\":\"stdout\"}\n",
		START "{\"type\":\"stdout\",\"data\":\"a\",\"data_b64\":\"YQ==\"}\n",
		START "{\"type\":\"stdout\",\"data\":5}\n",
		START "{\"type\":\"stdout\",\"data_b64\":\"YQ\"}\n",      /* no padding */
		START "{\"type\":\"stdout\",\"data_b64\":\"YR==\"}\n",    /* stray bits */
		START "{\"type\":\"stdout\",\"data_b64\":\"Y Q==\"}\n",
		START "{\"type\":\"stdout\",\"data_b64\":\"-_8=\"}\n",    /* url alphabet */
		START "{\"type\":\"stdout\",\"data\":\"\\ud800\"}\n",      /* lone surrogate escape */
		START "{\"type\":\"exit\",\"code\":0,\"signal\":null,\"duration_ms\":1}\n",
		START "{\"type\":\"exit\",\"code\":0,\"signal\":1,\"duration_ms\":1,\"truncated\":false}\n",
		START "{\"type\":\"exit\",\"code\":0,\"signal\":null,\"duration_ms\":1,\"truncated\":0}\n",
		START "{\"type\":\"exit\",\"code\":99999999999,\"signal\":null,\"duration_ms\":1,\"truncated\":false}\n",
		START "{\"type\":\"error\",\"code\":\"timeout\"}\n",
		"{\"type\":\"stdout\",\"data\":\"early\"}\n",
		EXIT,
		START START,
		START EXIT EXIT,
		START EXIT "{\"type\":\"stdout\",\"data\":\"late\"}\n",
		START ERR ERR,
		START ERR EXIT,
		START EXIT ERR ERR,
	};
	struct sbx_ndjson_parser *p;
	struct collect c;
	struct sbx_err err;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		collect_init(&c);
		p = sbx_ndjson_parser_new(0, collect_cb, &c);
		memset(&err, 0, sizeof(err));
		if (sbx_ndjson_parser_feed(p, bad[i], strlen(bad[i]), &err) != -1)
			fail_msg("case %zu accepted: %s", i, bad[i]);
		assert_protocol_error(&err);
		sbx_ndjson_parser_free(p);
		collect_free(&c);
	}
#undef START
#undef EXIT
#undef ERR
}

static void
test_parser_accepts_lone_error_crlf_and_unknown_members(void **state)
{
	static const char ok[] =
	    "{\"type\":\"error\",\"code\":\"not_running\",\"message\":\"m\"}\r\n";
	static const char ext[] =
	    "{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1,\"future\":[1]}\n"
	    "{\"type\":\"stdout\",\"data\":\"\",\"x\":null}\n"
	    "{\"truncated\":false,\"type\":\"exit\",\"code\":0,\"signal\":null,\"duration_ms\":1}\n";
	struct sbx_ndjson_parser *p;
	struct collect c;
	struct sbx_err err;

	(void)state;
	collect_init(&c);
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_feed(p, ok, strlen(ok), &err), 0);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), 0);
	assert_string_equal(c.err_code, "not_running");
	sbx_ndjson_parser_free(p);
	collect_free(&c);

	collect_init(&c);
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_feed(p, ext, strlen(ext), &err), 0);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), 0);
	assert_int_equal(c.n, 3);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
}

static void
test_parser_finish_detects_cut_streams(void **state)
{
	static const char start[] = "{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1}\n";
	struct sbx_ndjson_parser *p;
	struct collect c;
	struct sbx_err err;

	(void)state;
	/* no terminal event */
	collect_init(&c);
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_feed(p, start, strlen(start), &err), 0);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), -1);
	assert_protocol_error(&err);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
	/* partial line (no '\n') */
	collect_init(&c);
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_feed(p, start, strlen(start) - 1, &err), 0);
	assert_int_equal(c.n, 0);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), -1);
	assert_protocol_error(&err);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
	/* empty stream */
	collect_init(&c);
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), -1);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
	sbx_ndjson_parser_free(NULL);
}

static void
test_callback_can_stop_the_parser(void **state)
{
	struct sbx_ndjson_parser *p;
	struct collect c;
	struct sbx_err err;
	size_t n;
	char *s = sample_transcript(&n);

	(void)state;
	collect_init(&c);
	c.stop_at = 2;
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_feed(p, s, n, &err), -1);
	assert_string_equal(err.code, SBX_E_CANCELLED);
	assert_int_equal(c.n, 2);
	assert_int_equal(sbx_ndjson_parser_feed(p, s, n, &err), -1);
	assert_int_equal(c.n, 2);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
	free(s);
	assert_null(sbx_ndjson_parser_new(0, NULL, NULL));
}


/* One output event line decoded by a fresh parser; returns 0 and the bytes
 * in *got (malloc'd) / *n, or -1 when the parser refuses it. */
static int
decode_one(const char *line, unsigned char **got, size_t *n)
{
	static const char start[] = "{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1}\n";
	struct sbx_ndjson_parser *p;
	struct collect c;
	struct sbx_err err;
	int rc;

	collect_init(&c);
	p = sbx_ndjson_parser_new(0, collect_cb, &c);
	assert_int_equal(sbx_ndjson_parser_feed(p, start, strlen(start), &err), 0);
	rc = sbx_ndjson_parser_feed(p, line, strlen(line), &err);
	if (rc == 0) {
		assert_int_equal(c.n, 2);
		*n = evbuffer_get_length(c.data[1]) + evbuffer_get_length(c.data[2]);
		*got = malloc(*n + 1);
		evbuffer_remove(c.data[1], *got, *n);
		evbuffer_remove(c.data[2], *got, *n);
	} else
		assert_protocol_error(&err);
	sbx_ndjson_parser_free(p);
	collect_free(&c);
	return rc;
}

/* The table-driven encoder used for output (not constant-time: output is
 * not secret) writes exactly what libsodium's encoder writes, for every
 * length remainder, all byte values, and a 1 MiB buffer. */
static void
test_base64_encoder_agrees_with_libsodium(void **state)
{
	static unsigned char src[1 << 20];
	static char got[(1 << 20) / 3 * 4 + 8], want[(1 << 20) / 3 * 4 + 8];
	size_t lens[] = { 0, 1, 2, 3, 4, 5, 6, 7, 63, 64, 65, 255, 256, 257,
	    4095, 4096, 65535, 65536, 65537, sizeof(src) };
	size_t i, j, n;
	char *end;

	(void)state;
	for (j = 0; j < sizeof(src); j++)
		src[j] = (unsigned char)(j < 256 ? j : rnd_below(256));
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		n = lens[i];
		sodium_bin2base64(want, sizeof(want), src, n,
		    sodium_base64_VARIANT_ORIGINAL);
		end = sbx_base64_encode(got, src, n);
		assert_int_equal((size_t)(end - got), strlen(want));
		assert_memory_equal(got, want, strlen(want));
	}
	for (i = 0; i < 2000; i++) {
		n = rnd_below(300);
		for (j = 0; j < n; j++)
			src[j] = (unsigned char)rnd_below(256);
		sodium_bin2base64(want, sizeof(want), src, n,
		    sodium_base64_VARIANT_ORIGINAL);
		end = sbx_base64_encode(got, src, n);
		assert_int_equal((size_t)(end - got), strlen(want));
		assert_memory_equal(got, want, strlen(want));
	}
}

/* The parser's own base64 decoder accepts exactly what libsodium's strict
 * decoder accepts (padded standard alphabet, zero unused bits), with the
 * same bytes, on both the fast path and the general JSON path. */
static void
test_base64_decoder_agrees_with_libsodium(void **state)
{
	static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
	char b64[32], line[128];
	unsigned char want[32], *got;
	size_t n, k, wn, gn;
	int i, path, ok, accepted = 0;

	(void)state;
	for (i = 0; i < 20000; i++) {
		n = rnd_below(13);
		for (k = 0; k < n; k++) {
			/* mostly valid characters, '=' near the end */
			b64[k] = k + 2 >= n && rnd_below(2) ? '=' :
			    al[rnd_below(sizeof(al) - (rnd_below(8) ? 2 : 1))];
		}
		b64[n] = '\0';
		ok = sodium_base642bin(want, sizeof(want), b64, n, NULL, &wn,
		    NULL, sodium_base64_VARIANT_ORIGINAL) == 0;
		for (path = 0; path < 2; path++) {
			snprintf(line, sizeof(line), path == 0 ?
			    "{\"type\":\"stdout\",\"data_b64\":\"%s\"}\n" :
			    "{\"data_b64\":\"%s\",\"type\":\"stdout\"}\n", b64);
			got = NULL;
			if ((decode_one(line, &got, &gn) == 0) != ok)
				fail_msg("%s: libsodium %d, parser %d", line, ok, !ok);
			if (ok) {
				assert_int_equal(gn, wn);
				if (wn > 0)
					assert_memory_equal(got, want, wn);
			}
			free(got);
		}
		accepted += ok;
	}
	assert_true(accepted > 1000);   /* the generator hits both sides */
	assert_true(accepted < 19000);
}

/* Other spellings of the same event (member order, escapes, whitespace)
 * are not "canonical" but decode to the same bytes. */
static void
test_other_spellings_decode_the_same(void **state)
{
	static const struct {
		const char *line;
		const char *bytes;
		size_t n;
	} cases[] = {
		{ "{\"data\":\"a\\\"b\",\"type\":\"stdout\"}", "a\"b", 3 },
		{ "{\"type\":\"stdout\",\"data\":\"\\u0041\\/\"}", "A/", 2 },
		{ "{\"type\":\"stdout\",\"data\":\"\\u001b\"}", "\x1b", 1 },
		{ "{\"type\":\"stdout\",\"data\":\"\\u000A\"}", "\n", 1 },
		{ "{\"type\":\"stdout\",\"data\":\"\\u00e9\\ud83d\\ude00\"}", "\xC3\xA9\xF0\x9F\x98\x80", 6 },
		{ "{ \"type\" : \"stdout\" , \"data\" : \"x\" }", "x", 1 },
		{ "{\"type\":\"stdout\",\"data\":\"x\"}\r", "x", 1 },
		{ "{\"type\":\"stdout\",\"data\":\"x\",\"extra\":1}", "x", 1 },
		{ "{\"type\":\"stdout\",\"data\":\"\\u0000\"}", "\0", 1 },
	};
	struct evbuffer *out = evbuffer_new();
	unsigned char *got;
	char line[256], *enc;
	size_t i, n, gn, off, vlen;
	int stream, b64;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		n = strlen(cases[i].line);
		if (i + 1 < sizeof(cases) / sizeof(cases[0]))
			assert_int_equal(sbx_ndjson_canonical_output(cases[i].line,
			    n, &stream, &b64, &off, &vlen), 0);
		snprintf(line, sizeof(line), "%s\n", cases[i].line);
		if (decode_one(line, &got, &gn) != 0)
			fail_msg("refused: %s", cases[i].line);
		assert_int_equal(gn, cases[i].n);
		assert_memory_equal(got, cases[i].bytes, gn);
		free(got);
		/* and what the encoder writes for those bytes is canonical */
		assert_int_equal(sbx_ndjson_output(out, 2,
		    (const unsigned char *)cases[i].bytes, cases[i].n), 0);
		enc = take(out, &n);
		assert_int_equal(sbx_ndjson_canonical_output(enc, n - 1, &stream,
		    &b64, &off, &vlen), 1);
		assert_int_equal(stream, 2);
		free(enc);
	}
	evbuffer_free(out);
}

/* ---- golden transcripts --------------------------------------------- */

/* Re-encodes each decoded event and expects the identical line. */
static int
reencode_cb(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct evbuffer *out = arg;
	char *s;
	size_t n;

	switch (ev->type) {
	case SBX_EVENT_START:
		assert_int_equal(sbx_ndjson_start(out, ev->exec_id, ev->ts), 0);
		break;
	case SBX_EVENT_STDOUT:
	case SBX_EVENT_STDERR:
		assert_int_equal(sbx_ndjson_output(out, ev->stream, ev->data,
		    ev->len), 0);
		break;
	case SBX_EVENT_EXIT:
		assert_int_equal(sbx_ndjson_exit(out, ev->code, ev->signal,
		    ev->duration_ms, ev->truncated), 0);
		break;
	case SBX_EVENT_QUOTA:
		assert_int_equal(sbx_ndjson_quota(out, ev->work_bytes,
		    ev->work_quota), 0);
		break;
	case SBX_EVENT_ERROR:
		assert_int_equal(sbx_ndjson_error(out, ev->err_code,
		    ev->err_message), 0);
		break;
	}
	s = take(out, &n);
	assert_int_equal(n, len + 1);
	assert_memory_equal(s, line, len);
	free(s);
	return 0;
}

static void
test_golden_ndjson_is_exactly_what_the_encoder_writes(void **state)
{
	struct evbuffer *out = evbuffer_new();
	struct sbx_ndjson_parser *p;
	struct sbx_err err;
	struct dirent *de;
	char path[1024], *s;
	size_t n, nl;
	DIR *d;
	int files = 0;

	(void)state;
	d = opendir(golden_dir());
	if (d == NULL)
		fail_msg("no golden dir %s", golden_dir());
	while ((de = readdir(d)) != NULL) {
		nl = strlen(de->d_name);
		if (nl < 7 || strcmp(de->d_name + nl - 7, ".ndjson") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", golden_dir(), de->d_name);
		s = slurp(path, &n);
		p = sbx_ndjson_parser_new(0, reencode_cb, out);
		if (sbx_ndjson_parser_feed(p, s, n, &err) != 0 ||
		    sbx_ndjson_parser_finish(p, &err) != 0)
			fail_msg("%s: %s", path, err.message);
		sbx_ndjson_parser_free(p);
		free(s);
		files++;
	}
	closedir(d);
	assert_true(files >= 7);
	evbuffer_free(out);
}

/* ---- the wire rule (adr/0028) ---------------------------------------- */

/* 1 when the one line in out is "data" (then not "data_b64"); empties out. */
static int
line_is_data(struct evbuffer *out)
{
	char *l;
	size_t n;
	json_t *j;
	int d;

	l = take(out, &n);
	assert_true(n > 0 && l[n - 1] == '\n');
	j = json_loadb(l, n - 1, JSON_ALLOW_NUL, NULL);
	assert_non_null(j);
	d = json_object_get(j, "data") != NULL;
	assert_int_equal(json_object_get(j, "data_b64") != NULL, !d);
	json_decref(j);
	free(l);
	return d;
}

/* NUL-heavy output (valid UTF-8, 6 bytes a byte as text) goes as data_b64,
 * plain text as data; what a client decodes is the same bytes either way. */
static void
test_wire_rule_nul_heavy_is_base64_text_is_data(void **state)
{
	size_t len = SBX_NDJSON_MAX_CHUNK, n, b64s = 0;
	unsigned char *zero = calloc(1, len), *got = malloc(len + 8);
	struct evbuffer *out = evbuffer_new();
	char *l;

	(void)state;
	assert_non_null(zero);
	assert_non_null(got);
	assert_int_equal(sbx_utf8_valid(zero, len), 1);
	assert_int_equal(sbx_ndjson_output(out, 1, zero, len), 0);
	/* base64's 4/3, not the 6 bytes a byte of \u0000 */
	assert_int_equal(evbuffer_get_length(out), strlen(
	    "{\"type\":\"stdout\",\"data_b64\":\"\"}\n") + 4 * ((len + 2) / 3));
	assert_int_equal(decode_lines(out, got, &b64s), len);
	assert_int_equal(b64s, 1);
	assert_memory_equal(got, zero, len);
	/* a short run of NULs too */
	assert_int_equal(sbx_ndjson_output(out, 2, zero, 3), 0);
	l = take(out, &n);
	assert_string_equal(l, "{\"type\":\"stderr\",\"data_b64\":\"AAAA\"}\n");
	free(l);
	/* plain text, and text with a few escapes, stay data */
	assert_int_equal(sbx_ndjson_output(out, 1, (const unsigned char *)
	    "total 8\ndrwxr-xr-x 2 sbx sbx 4096 .\n", 36), 0);
	assert_true(line_is_data(out));
	assert_int_equal(sbx_ndjson_output(out, 1, (const unsigned char *)
	    "caf\xC3\xA9 \xE2\x82\xAC \"q\"\t\x1B[0m\n", 19), 0);   /* 28 = 28 */
	assert_true(line_is_data(out));
	/* empty output is text */
	assert_int_equal(sbx_ndjson_output(out, 1, NULL, 0), 0);
	assert_true(line_is_data(out));
	evbuffer_free(out);
	free(zero);
	free(got);
}

/*
 * The boundary: for every length 1..40 and every count k of line breaks
 * (2 bytes each escaped) or NULs (6 bytes) in it, data exactly when
 * len + extra <= 4 * ceil(len / 3); equal is data.
 */
static void
test_wire_rule_boundary_equal_is_data(void **state)
{
	struct evbuffer *out = evbuffer_new();
	unsigned char buf[64];
	size_t len, k, el, b64, got_el;
	int kind, want;
	char *l;
	size_t n;

	(void)state;
	for (kind = 0; kind < 2; kind++)
		for (len = 1; len <= 40; len++)
			for (k = 0; k <= len; k++) {
				memset(buf, 'a', len);
				memset(buf, kind ? 0 : '\n', k);
				el = len + k * (kind ? 5 : 1);
				b64 = 4 * ((len + 2) / 3);
				want = el <= b64;
				got_el = 0;
				assert_int_equal(sbx_ndjson_output_is_text(buf,
				    len, &got_el), want);
				if (want)
					assert_int_equal(got_el, el);
				assert_int_equal(sbx_ndjson_output(out, 1, buf,
				    len), 0);
				assert_int_equal(line_is_data(out), want);
			}
	/* the two sides of the line, spelled out: 6 bytes are 8 in base64 */
	assert_int_equal(sbx_ndjson_output(out, 1, (const unsigned char *)
	    "abcd\n\n", 6), 0);   /* escaped: 8 */
	assert_int_equal(sbx_ndjson_output(out, 1, (const unsigned char *)
	    "abc\n\n\n", 6), 0);  /* escaped: 9 */
	l = take(out, &n);
	assert_string_equal(l,
	    "{\"type\":\"stdout\",\"data\":\"abcd\\n\\n\"}\n"
	    "{\"type\":\"stdout\",\"data_b64\":\"YWJjCgoK\"}\n");
	free(l);
	/* invalid UTF-8 is never text, however short its escaping */
	assert_int_equal(sbx_ndjson_output_is_text((const unsigned char *)
	    "abc\xFF", 4, NULL), 0);
	evbuffer_free(out);
}

/*
 * Issue 11's rule still holds under the new one: `dd bs=8192` of text cuts
 * a euro sign between two reads; it arrives inside "data", every event is
 * data, and a NUL-heavy read before it (data_b64) does not change that.
 */
static void
test_wire_rule_keeps_split_characters_in_data(void **state)
{
	size_t len = 3 * 8192, i, n, b64s = 0;
	unsigned char *buf = malloc(len), *got = malloc(len + 8);
	struct sbx_utf8_hold h = { { 0 }, 0 };
	struct evbuffer *out = evbuffer_new();
	static const unsigned char zero[64];
	char *all, *nl, *l;
	json_t *j;

	(void)state;
	assert_non_null(buf);
	assert_non_null(got);
	for (i = 0; i < len; i++)
		buf[i] = (unsigned char)('a' + i % 26);
	memcpy(buf + 8191, "\xE2\x82\xAC", 3);         /* E2 | 82 AC */
	memcpy(buf + 2 * 8192 - 2, "\xE2\x82\xAC", 3); /* E2 82 | AC */
	for (i = 0; i < len; i += 8192)
		assert_int_equal(sbx_ndjson_output_held(out, &h, 1, buf + i,
		    8192), 0);
	assert_int_equal(sbx_ndjson_output_flush(out, &h, 1), 0);
	all = take(out, &n);
	for (l = all; l < all + n; l = nl + 1) {
		nl = memchr(l, '\n', (size_t)(all + n - l));
		assert_non_null(nl);
		j = json_loadb(l, (size_t)(nl - l), 0, NULL);
		assert_non_null(json_object_get(j, "data"));
		json_decref(j);
	}
	assert_non_null(memmem(all, n, "\xE2\x82\xAC", 3));
	evbuffer_add(out, all, n);
	free(all);
	assert_int_equal(decode_lines(out, got, &b64s), len);
	assert_int_equal(b64s, 0);
	assert_memory_equal(got, buf, len);
	/* NULs, then the first byte of a euro sign: the NULs go as base64,
	 * the held byte joins the next read and the character is text */
	memset(&h, 0, sizeof(h));
	memcpy(buf, zero, sizeof(zero));
	buf[sizeof(zero)] = 0xE2;
	assert_int_equal(sbx_ndjson_output_held(out, &h, 1, buf,
	    sizeof(zero) + 1), 0);
	assert_int_equal(h.len, 1);
	assert_false(line_is_data(out));
	assert_int_equal(sbx_ndjson_output_held(out, &h, 1, (const unsigned char *)
	    "\x82\xAC ok\n", 6), 0);
	l = take(out, &n);
	assert_string_equal(l, "{\"type\":\"stdout\",\"data\":\"\xE2\x82\xAC\"}\n"
	    "{\"type\":\"stdout\",\"data\":\" ok\\n\"}\n");
	free(l);
	evbuffer_free(out);
	free(buf);
	free(got);
}

/* ---- undecoded mode (adr/0028) --------------------------------------- */

struct undec {
	size_t bytes, undecoded, decoded;
};

static int
undec_cb(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct undec *u = arg;

	(void)line;
	(void)len;
	if (ev->type != SBX_EVENT_STDOUT && ev->type != SBX_EVENT_STDERR)
		return 0;
	u->bytes += ev->len;
	if (ev->undecoded) {
		assert_null(ev->data);
		assert_null(ev->raw);
		u->undecoded++;
	} else
		u->decoded++;
	return 0;
}

/* Every line the encoder writes is handed over undecoded with its byte
 * count; other spellings are decoded; a line either mode refuses, the
 * other refuses with the same error. */
static void
test_undecoded_mode_checks_like_decoding(void **state)
{
	static const char *bad[] = {
		"{\"type\":\"stdout\",\"data_b64\":\"QUJ=\"}",
		"{\"type\":\"stdout\",\"data_b64\":\"QQ=A\"}",
		"{\"type\":\"stdout\",\"data_b64\":\"QUJDR===\"}",
		"{\"type\":\"stdout\",\"data_b64\":\"QUJ\"}",
		"{\"type\":\"stdout\",\"data_b64\":\"====\"}",
		"{\"type\":\"stdout\",\"data\":\"\\u00zz\"}",
		"{\"type\":\"stdout\",\"data\":\"\xED\xA0\x80\"}",
	};
	struct evbuffer *out = evbuffer_new();
	struct sbx_ndjson_parser *p;
	struct sbx_err e1, e2;
	struct undec u = { 0, 0, 0 };
	unsigned char buf[4096];
	char *all, line[256];
	size_t i, n, len, total = 0;
	int mode;

	(void)state;
	p = sbx_ndjson_parser_new(0, undec_cb, &u);
	sbx_ndjson_parser_undecoded(p, 1);
	assert_int_equal(sbx_ndjson_start(out, "e", 1), 0);
	for (i = 0; i < 400; i++) {
		len = rnd_below(sizeof(buf));
		fill(buf, len, (int)rnd_below(4));
		total += len;
		assert_int_equal(sbx_ndjson_output(out, 1 + (int)(i & 1), buf,
		    len), 0);
	}
	all = take(out, &n);
	assert_int_equal(sbx_ndjson_parser_feed(p, all, n, &e1), 0);
	free(all);
	assert_int_equal(u.bytes, total);
	assert_int_equal(u.undecoded, 400);
	assert_int_equal(u.decoded, 0);
	/* another spelling: decoded as before */
	snprintf(line, sizeof(line), "{\"data\":\"ab\",\"type\":\"stdout\"}\n");
	assert_int_equal(sbx_ndjson_parser_feed(p, line, strlen(line), &e1), 0);
	assert_int_equal(u.decoded, 1);
	sbx_ndjson_parser_free(p);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		for (mode = 0; mode < 2; mode++) {
			p = sbx_ndjson_parser_new(0, undec_cb, &u);
			sbx_ndjson_parser_undecoded(p, mode);
			snprintf(line, sizeof(line), "{\"type\":\"start\","
			    "\"exec_id\":\"e\",\"ts\":1}\n%s\n", bad[i]);
			if (sbx_ndjson_parser_feed(p, line, strlen(line),
			    mode ? &e2 : &e1) != -1)
				fail_msg("mode %d accepted %s", mode, bad[i]);
			sbx_ndjson_parser_free(p);
		}
		assert_string_equal(e1.code, e2.code);
		assert_string_equal(e1.code, "bad_request");
	}
	/* out of order is out of order undecoded too */
	p = sbx_ndjson_parser_new(0, undec_cb, &u);
	sbx_ndjson_parser_undecoded(p, 1);
	snprintf(line, sizeof(line), "{\"type\":\"stdout\",\"data\":\"a\"}\n");
	assert_int_equal(sbx_ndjson_parser_feed(p, line, strlen(line), &e1), -1);
	assert_non_null(strstr(e1.message, "output outside start..exit"));
	sbx_ndjson_parser_free(p);
	evbuffer_free(out);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_utf8_validator_is_strict),
		cmocka_unit_test(test_incomplete_tail_finds_split_characters),
		cmocka_unit_test(test_held_tail_keeps_split_characters_text),
		cmocka_unit_test(test_held_output_cuts_big_pieces_on_character_boundaries),
		cmocka_unit_test(test_encoder_refuses_bad_arguments_without_writing),
		cmocka_unit_test(test_encoder_writes_the_documented_lines),
		cmocka_unit_test(test_random_buffers_round_trip_exactly),
		cmocka_unit_test(test_parser_handles_lines_split_at_every_byte),
		cmocka_unit_test(test_parser_rejects_overlong_lines_and_stays_stopped),
		cmocka_unit_test(test_parser_default_limit_is_8_mib),
		cmocka_unit_test(test_parser_rejects_malformed_and_out_of_order_events),
		cmocka_unit_test(test_parser_accepts_lone_error_crlf_and_unknown_members),
		cmocka_unit_test(test_parser_finish_detects_cut_streams),
		cmocka_unit_test(test_callback_can_stop_the_parser),
		cmocka_unit_test(test_base64_decoder_agrees_with_libsodium),
		cmocka_unit_test(test_base64_encoder_agrees_with_libsodium),
		cmocka_unit_test(test_other_spellings_decode_the_same),
		cmocka_unit_test(test_golden_ndjson_is_exactly_what_the_encoder_writes),
		cmocka_unit_test(test_wire_rule_nul_heavy_is_base64_text_is_data),
		cmocka_unit_test(test_wire_rule_boundary_equal_is_data),
		cmocka_unit_test(test_wire_rule_keeps_split_characters_in_data),
		cmocka_unit_test(test_undecoded_mode_checks_like_decoding),
	};

	return cmocka_run_group_tests_name("ndjson", tests, NULL, NULL);
}
