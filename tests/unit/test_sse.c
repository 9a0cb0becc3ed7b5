/* test_sse.c - SSE encoder and NDJSON -> SSE mapping: golden transcripts byte for byte, no field injection. */
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

#include "golden.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"
#include "sbx_sse.h"

/* ------------------------------------------------------------------ */
/* A receiver: WHATWG HTML §9.2.6 "Interpreting an event stream".      */

struct sse_ev {
	char type[64];
	char id[32];
	char *data;
	size_t len;
	int fields;        /* field lines that made up this event */
	int foreign;       /* of those, lines other than id/event/data */
	int data_before;   /* id/event lines after the first data line */
};

struct sse_rx {
	struct sse_ev ev[16];
	int n;
	int comments;
	/* buffers of the event being read */
	char type[64];
	char id[32];
	char *data;
	size_t len, cap;
	int fields, foreign, data_before, seen_data;
};

static void
rx_data_append(struct sse_rx *r, const char *s, size_t n)
{
	if (r->len + n + 1 > r->cap) {
		r->cap = (r->len + n + 1) * 2;
		r->data = realloc(r->data, r->cap);
		assert_non_null(r->data);
	}
	memcpy(r->data + r->len, s, n);
	r->len += n;
}

static void
rx_reset(struct sse_rx *r)
{
	r->type[0] = '\0';
	r->len = 0;
	r->fields = r->foreign = r->data_before = r->seen_data = 0;
}

static void
rx_dispatch(struct sse_rx *r)
{
	struct sse_ev *e;

	if (r->len == 0) {      /* empty data buffer: nothing dispatched */
		rx_reset(r);
		return;
	}
	r->len--;               /* strip the last LF */
	assert_true(r->n < 16);
	e = &r->ev[r->n++];
	snprintf(e->type, sizeof(e->type), "%s", r->type[0] ? r->type : "message");
	snprintf(e->id, sizeof(e->id), "%s", r->id);
	e->data = malloc(r->len + 1);
	memcpy(e->data, r->data, r->len);
	e->data[r->len] = '\0';
	e->len = r->len;
	e->fields = r->fields;
	e->foreign = r->foreign;
	e->data_before = r->data_before;
	rx_reset(r);
}

static void
rx_line(struct sse_rx *r, const char *l, size_t n)
{
	const char *colon, *v;
	size_t fn, vn;

	if (n == 0) {
		rx_dispatch(r);
		return;
	}
	if (l[0] == ':') {
		r->comments++;
		return;
	}
	colon = memchr(l, ':', n);
	fn = colon ? (size_t)(colon - l) : n;
	v = colon ? colon + 1 : l + n;
	vn = colon ? n - fn - 1 : 0;
	if (vn > 0 && v[0] == ' ') {
		v++;
		vn--;
	}
	r->fields++;
	if (fn == 4 && memcmp(l, "data", 4) == 0) {
		rx_data_append(r, v, vn);
		rx_data_append(r, "\n", 1);
		r->seen_data = 1;
	} else if (fn == 5 && memcmp(l, "event", 5) == 0) {
		snprintf(r->type, sizeof(r->type), "%.*s", (int)vn, v);
		r->data_before += r->seen_data;
	} else if (fn == 2 && memcmp(l, "id", 2) == 0) {
		snprintf(r->id, sizeof(r->id), "%.*s", (int)vn, v);
		r->data_before += r->seen_data;
	} else
		r->foreign++;
}

/* Parses a whole stream: lines end at CRLF, LF or CR. */
static void
rx_parse(struct sse_rx *r, const char *s, size_t n)
{
	size_t i = 0, j;

	memset(r, 0, sizeof(*r));
	while (i < n) {
		for (j = i; j < n && s[j] != '\r' && s[j] != '\n'; j++)
			;
		if (j == n)
			break;  /* an unterminated last line is discarded */
		rx_line(r, s + i, j - i);
		i = j + 1;
		if (s[j] == '\r' && i < n && s[i] == '\n')
			i++;
	}
}

static void
rx_free(struct sse_rx *r)
{
	int i;

	for (i = 0; i < r->n; i++)
		free(r->ev[i].data);
	free(r->data);
}

/* ------------------------------------------------------------------ */
/* helpers                                                             */

/* CR LF and lone CR become LF, as a receiver sees data. */
static size_t
normalise_breaks(const char *s, size_t n, char *dst)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++) {
		if (s[i] == '\r') {
			dst[k++] = '\n';
			if (i + 1 < n && s[i + 1] == '\n')
				i++;
		} else
			dst[k++] = s[i];
	}
	return k;
}

/* ------------------------------------------------------------------ */
/* golden transcripts                                                  */

struct via_parser {
	struct evbuffer *out;
	uint64_t id;
};

static int
via_parser_cb(void *arg, const struct sbx_event *ev, const char *line,
    size_t len)
{
	struct via_parser *v = arg;
	struct sbx_err err;

	(void)line;
	(void)len;
	assert_int_equal(sbx_sse_from_event(v->out, ++v->id, ev, &err), 0);
	return 0;
}

/* Maps one .ndjson both ways (line by line; parser + from_event) and
 * compares each result with the .sse. */
static void
check_golden(const char *ndjson_path, const char *sse_path)
{
	struct evbuffer *out = evbuffer_new();
	struct via_parser v = { evbuffer_new(), 0 };
	struct sbx_ndjson_parser *p;
	struct sbx_err err;
	char *in, *want, *got, *nl, *line;
	size_t in_n, want_n, got_n;
	uint64_t id = 1;

	in = slurp(ndjson_path, &in_n);
	want = slurp(sse_path, &want_n);
	assert_true(in_n > 0 && in[in_n - 1] == '\n');
	for (line = in; line < in + in_n; line = nl + 1) {
		nl = memchr(line, '\n', (size_t)(in + in_n - line));
		assert_non_null(nl);
		if (sbx_sse_from_ndjson(out, id++, line, (size_t)(nl - line),
		    &err) != 0)
			fail_msg("%s: %s", ndjson_path, err.message);
	}
	got = take(out, &got_n);
	if (got_n != want_n || memcmp(got, want, got_n) != 0)
		fail_msg("%s does not reproduce %s:\n--- got ---\n%s",
		    ndjson_path, sse_path, got);
	free(got);

	p = sbx_ndjson_parser_new(0, via_parser_cb, &v);
	assert_int_equal(sbx_ndjson_parser_feed(p, in, in_n, &err), 0);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), 0);
	sbx_ndjson_parser_free(p);
	got = take(v.out, &got_n);
	assert_int_equal(got_n, want_n);
	assert_memory_equal(got, want, want_n);
	free(got);

	free(in);
	free(want);
	evbuffer_free(out);
	evbuffer_free(v.out);
}

static void
test_golden_transcripts_reproduce_byte_for_byte(void **state)
{
	char np[1024], sp[1024];
	struct dirent *de;
	size_t nl;
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
		snprintf(np, sizeof(np), "%s/%s", golden_dir(), de->d_name);
		snprintf(sp, sizeof(sp), "%s/%.*s.sse", golden_dir(),
		    (int)(nl - 7), de->d_name);
		check_golden(np, sp);
		files++;
	}
	closedir(d);
	/* echo, stdout_stderr_exit3, binary, timeout x2, truncated, unicode */
	assert_true(files >= 7);
}

/* What an EventSource gets from the golden .sse files: one event per
 * NDJSON line, type = "type", data = JSON equal to the line minus "type". */
static void
test_golden_sse_is_what_a_browser_sees(void **state)
{
	static const char *const names[] = { "echo", "binary", "unicode_escapes",
		"timeout_after_exit" };
	struct sse_rx r;
	char path[1024], *sse, *nd, *line, *nl;
	size_t sn, nn, i;
	json_t *a, *b;
	int k;

	(void)state;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s.sse", golden_dir(), names[i]);
		sse = slurp(path, &sn);
		snprintf(path, sizeof(path), "%s/%s.ndjson", golden_dir(), names[i]);
		nd = slurp(path, &nn);
		rx_parse(&r, sse, sn);
		for (k = 0, line = nd; line < nd + nn; line = nl + 1, k++) {
			nl = memchr(line, '\n', (size_t)(nd + nn - line));
			a = json_loadb(line, (size_t)(nl - line), JSON_ALLOW_NUL, NULL);
			assert_non_null(a);
			assert_true(k < r.n);
			assert_string_equal(r.ev[k].type,
			    json_string_value(json_object_get(a, "type")));
			assert_int_equal(atoi(r.ev[k].id), k + 1);
			assert_int_equal(r.ev[k].foreign, 0);
			json_object_del(a, "type");
			b = json_loadb(r.ev[k].data, r.ev[k].len, JSON_ALLOW_NUL, NULL);
			assert_non_null(b);
			assert_true(json_equal(a, b));
			json_decref(a);
			json_decref(b);
		}
		assert_int_equal(r.n, k);
		rx_free(&r);
		free(sse);
		free(nd);
	}
}

/* ------------------------------------------------------------------ */
/* encoder                                                             */

static void
check_single_event(const char *payload, size_t n)
{
	struct evbuffer *out = evbuffer_new();
	struct sse_rx r;
	char *s, *want;
	size_t sn, wn;

	assert_int_equal(sbx_sse_event(out, 7, "stdout", payload, n), 0);
	s = take(out, &sn);
	rx_parse(&r, s, sn);
	/* exactly one event, all its bytes consumed, nothing foreign */
	assert_int_equal(r.n, 1);
	assert_int_equal(r.len, 0);
	assert_int_equal(r.comments, 0);
	assert_string_equal(r.ev[0].type, "stdout");
	assert_string_equal(r.ev[0].id, "7");
	assert_int_equal(r.ev[0].foreign, 0);
	assert_int_equal(r.ev[0].data_before, 0);
	want = malloc(n + 1);
	wn = normalise_breaks(payload, n, want);
	assert_int_equal(r.ev[0].len, wn);
	assert_memory_equal(r.ev[0].data, want, wn);
	/* and the stream ends with exactly one blank line */
	assert_true(sn >= 2 && s[sn - 1] == '\n' && s[sn - 2] == '\n');
	free(want);
	free(s);
	rx_free(&r);
	evbuffer_free(out);
}

static void
test_line_breaks_in_data_cannot_start_fields_or_events(void **state)
{
	static const char *const payloads[] = {
		"plain",
		"a\nb",
		"a\rb",
		"a\r\nb",
		"\n\nevent: x",
		"\rid: 9",
		"\r\n\r\nretry: 1\r\n",
		"x\n\ndata: y\n\n",
		"\n",
		"\r",
		"\r\n",
		"\n\r",
		"trailing\n",
		":comment\n: ping\n\n",
		"data:\ndata:",
		" leading space",
		"\r\r\n\n",
	};
	static const char alphabet[] = "\r\n:ide vnta";
	char buf[64];
	size_t i, k, n;

	(void)state;
	for (i = 0; i < sizeof(payloads) / sizeof(payloads[0]); i++)
		check_single_event(payloads[i], strlen(payloads[i]));
	/* and 2,000 random payloads from the dangerous characters */
	srand(1);
	for (i = 0; i < 2000; i++) {
		n = (size_t)rand() % sizeof(buf);
		for (k = 0; k < n; k++)
			buf[k] = alphabet[(size_t)rand() % (sizeof(alphabet) - 1)];
		check_single_event(buf, n);
	}
}

static void
test_event_encoding_is_exact(void **state)
{
	struct evbuffer *out = evbuffer_new();
	char *s;
	size_t n;

	(void)state;
	assert_int_equal(sbx_sse_event(out, 1, "exit", "{\"code\":0}", 10), 0);
	assert_int_equal(sbx_sse_event(out, 0, NULL, "a\r\nb\rc\nd", 8), 0);
	assert_int_equal(sbx_sse_event(out, UINT64_MAX, "e", NULL, 0), 0);
	assert_int_equal(sbx_sse_event(out, 2, "e", "x\n", 2), 0);
	s = take(out, &n);
	assert_string_equal(s,
	    "id: 1\nevent: exit\ndata: {\"code\":0}\n\n"
	    "data: a\ndata: b\ndata: c\ndata: d\n\n"
	    "id: 18446744073709551615\nevent: e\ndata: \n\n"
	    "id: 2\nevent: e\ndata: x\ndata: \n\n");
	free(s);
	evbuffer_free(out);
}

static void
test_empty_data_is_still_an_event(void **state)
{
	(void)state;
	check_single_event("", 0);
}

static void
test_bad_event_names_and_comments_are_refused(void **state)
{
	struct evbuffer *out = evbuffer_new();
	char *s;
	size_t n;

	(void)state;
	assert_int_equal(sbx_sse_event(out, 1, "a\nb", "x", 1), -1);
	assert_int_equal(sbx_sse_event(out, 1, "a\rb", "x", 1), -1);
	assert_int_equal(sbx_sse_event(out, 1, "", "x", 1), -1);
	assert_int_equal(sbx_sse_event(out, 1, "e", NULL, 1), -1);
	assert_int_equal(sbx_sse_comment(out, "a\nb"), -1);
	assert_int_equal(sbx_sse_comment(out, "\r"), -1);
	assert_int_equal(evbuffer_get_length(out), 0);
	assert_int_equal(sbx_sse_comment(out, SBX_SSE_PING), 0);
	assert_int_equal(sbx_sse_comment(out, NULL), 0);
	s = take(out, &n);
	assert_string_equal(s, ": ping\n\n:\n\n");
	free(s);
	evbuffer_free(out);
}

static void
test_heartbeat_is_ignored_by_receivers(void **state)
{
	struct evbuffer *out = evbuffer_new();
	struct sse_rx r;
	char *s;
	size_t n;

	(void)state;
	assert_int_equal(sbx_sse_event(out, 1, "stdout", "{\"data\":\"a\"}", 12), 0);
	assert_int_equal(sbx_sse_comment(out, SBX_SSE_PING), 0);
	assert_int_equal(sbx_sse_event(out, 2, "exit", "{}", 2), 0);
	s = take(out, &n);
	rx_parse(&r, s, n);
	assert_int_equal(r.n, 2);
	assert_int_equal(r.comments, 1);
	assert_string_equal(r.ev[1].type, "exit");
	rx_free(&r);
	free(s);
	evbuffer_free(out);
}

/* ------------------------------------------------------------------ */
/* mapping                                                             */

static void
expect_map(const char *line, const char *want)
{
	struct evbuffer *out = evbuffer_new();
	struct sbx_err err;
	char *s;
	size_t n;

	if (sbx_sse_from_ndjson(out, 3, line, strlen(line), &err) != 0)
		fail_msg("%s: %s", line, err.message);
	s = take(out, &n);
	assert_string_equal(s, want);
	free(s);
	evbuffer_free(out);
}

static void
test_mapping_drops_type_and_keeps_member_order(void **state)
{
	(void)state;
	expect_map("{\"type\":\"exit\",\"z\":1,\"a\":2,\"m\":null}\n",
	    "id: 3\nevent: exit\ndata: {\"z\":1,\"a\":2,\"m\":null}\n\n");
	expect_map("{\"a\":1,\"type\":\"stdout\",\"b\":\"x\"}",
	    "id: 3\nevent: stdout\ndata: {\"a\":1,\"b\":\"x\"}\n\n");
	/* whitespace in the input does not survive: compact output */
	expect_map("  { \"type\" : \"start\" , \"exec_id\" : \"e\" , \"ts\" : 5 }\r\n",
	    "id: 3\nevent: start\ndata: {\"exec_id\":\"e\",\"ts\":5}\n\n");
	/* a JSON-escaped line break stays escaped, in one data line */
	expect_map("{\"type\":\"stdout\",\"data\":\"a\\n\\r\\u2028b\"}",
	    "id: 3\nevent: stdout\ndata: {\"data\":\"a\\n\\r\xE2\x80\xA8" "b\"}\n\n");
	expect_map("{\"type\":\"future_event\"}",
	    "id: 3\nevent: future_event\ndata: {}\n\n");
}

static void
test_mapping_refuses_non_events(void **state)
{
	static const char *const bad[] = {
		"", "not json", "[1]", "\"x\"", "{}", "{\"type\":1}",
		"{\"type\":\"\"}", "{\"type\":\"Exit\"}", "{\"type\":\"a b\"}",
		"{\"type\":\"a\\nevent: x\"}", "{\"type\":\"x\",\"type\":\"y\"}",
		"{\"type\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
		"{\"type\":\"x\"} trailing",
	};
	struct evbuffer *out = evbuffer_new();
	struct sbx_err err;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&err, 0, sizeof(err));
		if (sbx_sse_from_ndjson(out, 1, bad[i], strlen(bad[i]), &err) != -1)
			fail_msg("accepted: %s", bad[i]);
		assert_string_equal(err.code, SBX_E_BAD_REQUEST);
		assert_memory_equal(err.message, SBX_PROTOCOL_ERROR ":",
		    strlen(SBX_PROTOCOL_ERROR ":"));
	}
	assert_int_equal(evbuffer_get_length(out), 0);
	evbuffer_free(out);
}

/* Output bytes -> NDJSON -> SSE -> receiver -> JSON -> the same bytes. */
static void
test_output_survives_the_whole_pipeline(void **state)
{
	static const unsigned char bin[] = { 'a', 0xFF, 0xFE, 0x00, 0x0D, 0x0A, 0xED, 0xA0, 0x80 };
	/* text with escapes, long enough to stay "data" (adr/0028) */
	static const char text[] = "line1\r\nline2\n\n\"q\"\\ \x01 \xF0\x9F\x98\x80"
	    " and a plain tail of words";
	struct evbuffer *nd = evbuffer_new(), *sse = evbuffer_new();
	struct sbx_err err;
	struct sse_rx r;
	unsigned char dec[64];
	size_t n, dn;
	char *line, *s;
	json_t *j;
	const char *b64;

	(void)state;
	assert_int_equal(sbx_ndjson_output(nd, 1, (const unsigned char *)text,
	    sizeof(text) - 1), 0);
	assert_int_equal(sbx_ndjson_output(nd, 2, bin, sizeof(bin)), 0);
	line = take(nd, &n);
	s = memchr(line, '\n', n);
	assert_int_equal(sbx_sse_from_ndjson(sse, 1, line, (size_t)(s - line) + 1, &err), 0);
	assert_int_equal(sbx_sse_from_ndjson(sse, 2, s + 1, n - (size_t)(s + 1 - line), &err), 0);
	free(line);
	s = take(sse, &n);
	rx_parse(&r, s, n);
	assert_int_equal(r.n, 2);
	j = json_loadb(r.ev[0].data, r.ev[0].len, JSON_ALLOW_NUL, NULL);
	assert_non_null(j);
	assert_int_equal(json_string_length(json_object_get(j, "data")), sizeof(text) - 1);
	assert_memory_equal(json_string_value(json_object_get(j, "data")), text, sizeof(text) - 1);
	json_decref(j);
	j = json_loadb(r.ev[1].data, r.ev[1].len, 0, NULL);
	assert_non_null(j);
	assert_string_equal(r.ev[1].type, "stderr");
	b64 = json_string_value(json_object_get(j, "data_b64"));
	assert_non_null(b64);
	/* decode with a table, independent of libsodium */
	{
		static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
		uint32_t acc = 0;
		int bits = 0;
		const char *c;

		dn = 0;
		for (c = b64; *c && *c != '='; c++) {
			acc = (acc << 6) | (uint32_t)(strchr(al, *c) - al);
			bits += 6;
			if (bits >= 8) {
				bits -= 8;
				dec[dn++] = (unsigned char)(acc >> bits);
			}
		}
	}
	assert_int_equal(dn, sizeof(bin));
	assert_memory_equal(dec, bin, sizeof(bin));
	json_decref(j);
	rx_free(&r);
	free(s);
	evbuffer_free(nd);
	evbuffer_free(sse);
}


/* The general route: parse, drop "type", jansson compact dump, encoder. */
static char *
reference_sse(uint64_t id, const char *line, size_t len, size_t *n)
{
	struct evbuffer *out = evbuffer_new();
	json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
	char *d, *s, type[16];

	assert_non_null(o);
	snprintf(type, sizeof(type), "%s", json_string_value(json_object_get(o, "type")));
	json_object_del(o, "type");
	d = json_dumps(o, JSON_COMPACT);
	assert_int_equal(sbx_sse_event(out, id, type, d, strlen(d)), 0);
	s = take(out, n);
	free(d);
	json_decref(o);
	evbuffer_free(out);
	return s;
}

struct agree {
	const char *want;
	size_t want_n;
	uint64_t id;
	int seen;
};

static int
agree_cb(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct agree *a = arg;
	struct evbuffer *out = evbuffer_new();
	struct sbx_err err;
	char *s;
	size_t n;

	(void)line;
	(void)len;
	if (ev->type != SBX_EVENT_STDOUT && ev->type != SBX_EVENT_STDERR)
		goto done;
	assert_int_equal(sbx_sse_from_event(out, a->id, ev, &err), 0);
	s = take(out, &n);
	assert_int_equal(n, a->want_n);
	assert_memory_equal(s, a->want, n);
	free(s);
	a->seen++;
done:
	evbuffer_free(out);
	return 0;
}

/* The hot paths (canonical line copied, decoded event re-escaped) give
 * the same bytes as the general jansson route, for text and binary. */
static void
test_fast_and_general_mapping_agree(void **state)
{
	static const char start[] = "{\"type\":\"start\",\"exec_id\":\"x\",\"ts\":1}\n";
	struct evbuffer *nd = evbuffer_new(), *out = evbuffer_new();
	struct sbx_ndjson_parser *p;
	struct agree a = { 0 };
	struct sbx_err err;
	unsigned char buf[512];
	char *line, *got, *want;
	size_t n, gn, wn, len, k;
	int i;

	(void)state;
	p = sbx_ndjson_parser_new(0, agree_cb, &a);
	assert_int_equal(sbx_ndjson_parser_feed(p, start, strlen(start), &err), 0);
	srand(7);
	for (i = 0; i < 3000; i++) {
		len = (size_t)rand() % sizeof(buf);
		for (k = 0; k < len; k++) {
			/* text-heavy: every 4th buffer gets raw random bytes */
			buf[k] = (unsigned char)(i % 4 == 0 ? rand() :
			    " \"\\\n\r\t\x01\x7f" "abc\xC3\xA9"[rand() % 14]);
		}
		if (i % 4 != 0 && len > 0 && buf[len - 1] == 0xC3)
			buf[len - 1] = 'z';
		assert_int_equal(sbx_ndjson_output(nd, 1 + i % 2, buf, len), 0);
		line = take(nd, &n);
		want = reference_sse((uint64_t)i + 1, line, n - 1, &wn);
		assert_int_equal(sbx_sse_from_ndjson(out, (uint64_t)i + 1, line, n,
		    &err), 0);
		got = take(out, &gn);
		assert_int_equal(gn, wn);
		assert_memory_equal(got, want, wn);
		a.want = want;
		a.want_n = wn;
		a.id = (uint64_t)i + 1;
		assert_int_equal(sbx_ndjson_parser_feed(p, line, n, &err), 0);
		assert_int_equal(a.seen, i + 1);
		free(got);
		free(want);
		free(line);
	}
	sbx_ndjson_parser_free(p);
	evbuffer_free(nd);
	evbuffer_free(out);
}

/* adr/0028: an output line forwarded as received maps to the same bytes as
 * sbx_sse_from_ndjson, by copying; anything else is refused, appending nothing. */
static void
test_output_line_is_copied_or_refused(void **state)
{
	static const char *ok[] = {
		"{\"type\":\"stdout\",\"data\":\"a\\u0000b \\\"q\\\" caf\xC3\xA9\"}",
		"{\"type\":\"stderr\",\"data_b64\":\"//4ADQo=\"}",
		"{\"type\":\"stdout\",\"data\":\"\"}",
	};
	static const char *bad[] = {
		"{\"type\":\"exit\",\"code\":0,\"signal\":null}",
		"{\"type\":\"stdoutx\",\"data\":\"a\"}",
		"{\"data\":\"a\",\"type\":\"stdout\"}",
		"{\"type\":\"stdout\",\"data\":\"a\nevent: exit\"}",
		"{\"type\":\"stdout\",\"data\":\"a\rb\"}",
		"{\"type\":\"stdout\",\"data\":\"a\"",
		"{\"type\":\"stdout\"}",
		"{\"type\": \"stdout\",\"data\":\"a\"}",
		"",
	};
	struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();
	struct sbx_err err;
	char *x, *y;
	size_t i, n, m;

	(void)state;
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(sbx_sse_from_output_line(a, i + 1, ok[i],
		    strlen(ok[i]), &err), 0);
		assert_int_equal(sbx_sse_from_ndjson(b, i + 1, ok[i],
		    strlen(ok[i]), &err), 0);
		x = take(a, &n);
		y = take(b, &m);
		assert_int_equal(n, m);
		assert_memory_equal(x, y, n);
		free(x);
		free(y);
	}
	/* with a NUL inside (len counts it) */
	assert_int_equal(sbx_sse_from_output_line(a, 1,
	    "{\"type\":\"stdout\",\"data\":\"a\0b\"}", 30, &err), -1);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sbx_err_clear(&err);
		if (sbx_sse_from_output_line(a, 1, bad[i], strlen(bad[i]),
		    &err) != -1)
			fail_msg("accepted: %s", bad[i]);
		assert_string_equal(err.code, "bad_request");
		assert_int_equal(evbuffer_get_length(a), 0);
	}
	evbuffer_free(a);
	evbuffer_free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden_transcripts_reproduce_byte_for_byte),
		cmocka_unit_test(test_golden_sse_is_what_a_browser_sees),
		cmocka_unit_test(test_line_breaks_in_data_cannot_start_fields_or_events),
		cmocka_unit_test(test_event_encoding_is_exact),
		cmocka_unit_test(test_empty_data_is_still_an_event),
		cmocka_unit_test(test_bad_event_names_and_comments_are_refused),
		cmocka_unit_test(test_heartbeat_is_ignored_by_receivers),
		cmocka_unit_test(test_mapping_drops_type_and_keeps_member_order),
		cmocka_unit_test(test_mapping_refuses_non_events),
		cmocka_unit_test(test_output_survives_the_whole_pipeline),
		cmocka_unit_test(test_fast_and_general_mapping_agree),
		cmocka_unit_test(test_output_line_is_copied_or_refused),
	};

	return cmocka_run_group_tests_name("sse", tests, NULL, NULL);
}
