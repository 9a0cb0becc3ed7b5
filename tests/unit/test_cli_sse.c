/* test_cli_sse.c - the sbx CLI's SSE parser: WHATWG rules, any split of the input, golden transcripts back to NDJSON. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "golden.h"
#include "sbx_ndjson.h"

/* proto/cli_sse.c is in libsbx. */
#include "cli_sse.h"

#define MAXEV 64

struct rx {
	int n;
	char *event[MAXEV];
	char *data[MAXEV];
	size_t len[MAXEV];
	char *id[MAXEV];
	int stop_after;   /* return nonzero after this many events; 0 never */
};

static int
rx_cb(void *arg, const char *event, const char *data, size_t len,
    const char *id)
{
	struct rx *r = arg;

	assert_true(r->n < MAXEV);
	assert_int_equal(data[len], '\0');
	r->event[r->n] = strdup(event);
	r->data[r->n] = malloc(len + 1);
	memcpy(r->data[r->n], data, len + 1);
	r->len[r->n] = len;
	r->id[r->n] = strdup(id);
	r->n++;
	return r->stop_after != 0 && r->n >= r->stop_after;
}

static void
rx_free(struct rx *r)
{
	int i;

	for (i = 0; i < r->n; i++) {
		free(r->event[i]);
		free(r->data[i]);
		free(r->id[i]);
	}
	memset(r, 0, sizeof(*r));
}

/* Feeds s in pieces of `step` bytes (0: all at once). */
static int
feed_split(struct rx *r, const char *s, size_t len, size_t step,
    int *pending)
{
	struct cli_sse *p = cli_sse_new(0, rx_cb, r);
	struct sbx_err err;
	size_t off = 0, n;
	int rc = 0;

	assert_non_null(p);
	if (step == 0)
		step = len > 0 ? len : 1;
	while (off < len) {
		n = len - off < step ? len - off : step;
		if (cli_sse_feed(p, s + off, n, &err) == -1) {
			rc = -1;
			break;
		}
		off += n;
	}
	if (pending != NULL)
		*pending = cli_sse_pending(p);
	cli_sse_free(p);
	return rc;
}

static void
test_fields_and_dispatch_follow_the_standard(void **state)
{
	/* The WHATWG examples plus the corner cases a CLI meets. */
	static const char in[] =
	    ": a comment, then an event without a type\n"
	    "data: first\n"
	    "\n"
	    "event: stdout\n"
	    "id: 7\n"
	    "data:no space\n"
	    "data:  two spaces keep one\n"
	    "data\n"
	    "\n"
	    "retry: 1000\n"
	    "unknown: field\n"
	    "\n"
	    "event: lost\n"
	    "\n"
	    "data: id persists\n"
	    "\n"
	    "id\n"
	    "data: id reset; a: colon: inside\n"
	    "\n";
	struct rx r;
	size_t step;

	(void)state;
	for (step = 0; step <= 9; step++) {
		memset(&r, 0, sizeof(r));
		assert_int_equal(feed_split(&r, in, sizeof(in) - 1, step, NULL), 0);
		assert_int_equal(r.n, 4);
		assert_string_equal(r.event[0], "message");
		assert_string_equal(r.data[0], "first");
		assert_string_equal(r.id[0], "");
		assert_string_equal(r.event[1], "stdout");
		assert_string_equal(r.data[1], "no space\n two spaces keep one\n");
		assert_string_equal(r.id[1], "7");
		/* A blank line with no data resets the type without dispatching. */
		assert_string_equal(r.event[2], "message");
		assert_string_equal(r.data[2], "id persists");
		assert_string_equal(r.id[2], "7");
		assert_string_equal(r.data[3], "id reset; a: colon: inside");
		assert_string_equal(r.id[3], "");
		rx_free(&r);
	}
}

static void
test_line_ends_crlf_cr_lf_even_split_between_cr_and_lf(void **state)
{
	static const char in[] = "event: a\r\ndata: 1\r\rdata: 2\r\n\r\n"
	    "data: 3\n\ndata: 4\r\r";
	struct rx r;
	size_t step;

	(void)state;
	for (step = 0; step <= 5; step++) {
		memset(&r, 0, sizeof(r));
		assert_int_equal(feed_split(&r, in, sizeof(in) - 1, step, NULL), 0);
		assert_int_equal(r.n, 4);
		assert_string_equal(r.event[0], "a");
		assert_string_equal(r.data[0], "1");
		assert_string_equal(r.event[1], "message");
		assert_string_equal(r.data[1], "2");
		assert_string_equal(r.data[2], "3");
		assert_string_equal(r.data[3], "4");
		rx_free(&r);
	}
}

static void
test_bom_is_skipped_once_even_when_split(void **state)
{
	static const char in[] = "\xef\xbb\xbf" "data: x\n\n\xef\xbb\xbf" "data: y\n\n";
	static const char almost[] = "\xef\xbb" "data: z\n\n";
	struct rx r;
	size_t step;

	(void)state;
	for (step = 0; step <= 3; step++) {
		memset(&r, 0, sizeof(r));
		assert_int_equal(feed_split(&r, in, sizeof(in) - 1, step, NULL), 0);
		/* The second BOM is not at the stream start: it makes an
		 * unknown field name, so "y" is never data. */
		assert_int_equal(r.n, 1);
		assert_string_equal(r.data[0], "x");
		rx_free(&r);
		memset(&r, 0, sizeof(r));
		assert_int_equal(feed_split(&r, almost, sizeof(almost) - 1, step,
		    NULL), 0);
		assert_int_equal(r.n, 0);
		rx_free(&r);
	}
}

static void
test_unterminated_event_is_not_dispatched_but_reported_pending(void **state)
{
	static const char in[] = "data: done\n\ndata: half";
	struct rx r;
	int pending = 0;

	(void)state;
	memset(&r, 0, sizeof(r));
	assert_int_equal(feed_split(&r, in, sizeof(in) - 1, 0, &pending), 0);
	assert_int_equal(r.n, 1);
	assert_int_equal(pending, 1);
	rx_free(&r);
	memset(&r, 0, sizeof(r));
	assert_int_equal(feed_split(&r, in, 12, 0, &pending), 0);
	assert_int_equal(pending, 0);
	rx_free(&r);
}

static void
test_limits_and_cancel_stop_the_parser(void **state)
{
	struct cli_sse *p;
	struct sbx_err err;
	struct rx r;
	char big[200];

	(void)state;
	memset(&r, 0, sizeof(r));
	memset(big, 'x', sizeof(big));
	p = cli_sse_new(100, rx_cb, &r);
	assert_int_equal(cli_sse_feed(p, "data: ", 6, &err), 0);
	assert_int_equal(cli_sse_feed(p, big, sizeof(big), &err), -1);
	assert_string_equal(err.code, "bad_request");
	assert_non_null(strstr(err.message, "protocol_error"));
	assert_int_equal(cli_sse_feed(p, "\n\n", 2, &err), -1);
	cli_sse_free(p);
	assert_int_equal(r.n, 0);

	/* Many short data lines adding up over the limit. */
	p = cli_sse_new(100, rx_cb, &r);
	for (;;)
		if (cli_sse_feed(p, "data: 0123456789\n", 17, &err) == -1)
			break;
	assert_string_equal(err.code, "bad_request");
	cli_sse_free(p);

	r.stop_after = 1;
	p = cli_sse_new(0, rx_cb, &r);
	assert_int_equal(cli_sse_feed(p, "data: a\n\ndata: b\n\n", 18, &err), -1);
	assert_string_equal(err.code, "cancelled");
	assert_int_equal(r.n, 1);
	cli_sse_free(p);
	rx_free(&r);
	assert_null(cli_sse_new(0, NULL, NULL));
}

static void
test_ndjson_line_rebuild(void **state)
{
	char *l;
	size_t n;

	(void)state;
	l = cli_sse_ndjson_line("exit", "{\"code\":0}", 10, &n);
	assert_string_equal(l, "{\"type\":\"exit\",\"code\":0}\n");
	assert_int_equal(n, strlen(l));
	free(l);
	l = cli_sse_ndjson_line("start", "{}", 2, &n);
	assert_string_equal(l, "{\"type\":\"start\"}\n");
	free(l);
	l = cli_sse_ndjson_line("start", "{\n}", 3, &n);
	assert_string_equal(l, "{\"type\":\"start\"}\n");
	free(l);
	/* JSON split over several data lines stays one NDJSON line. */
	l = cli_sse_ndjson_line("stderr", "{\"data_b64\":\n\"/w==\"}", 20, &n);
	assert_string_equal(l, "{\"type\":\"stderr\",\"data_b64\": \"/w==\"}\n");
	free(l);
	assert_null(cli_sse_ndjson_line("Bad", "{}", 2, &n));
	assert_null(cli_sse_ndjson_line("x\"y", "{}", 2, &n));
	assert_null(cli_sse_ndjson_line("", "{}", 2, &n));
	assert_null(cli_sse_ndjson_line("stdout", "[1]", 3, &n));
	assert_null(cli_sse_ndjson_line("stdout", "{", 1, &n));
	assert_null(cli_sse_ndjson_line("stdout", "", 0, &n));
}

/* ------------------------------------------------------------------ */
/* golden transcripts                                                  */

struct rebuild {
	char *out;
	size_t len, cap;
	uint64_t want_id;
	int bad;
};

static int
rebuild_cb(void *arg, const char *event, const char *data, size_t len,
    const char *id)
{
	struct rebuild *b = arg;
	char *line;
	size_t n;

	b->want_id++;
	if ((uint64_t)strtoull(id, NULL, 10) != b->want_id)
		b->bad = 1;
	line = cli_sse_ndjson_line(event, data, len, &n);
	assert_non_null(line);
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->out = realloc(b->out, b->cap);
	}
	memcpy(b->out + b->len, line, n);
	b->len += n;
	free(line);
	return 0;
}

struct decoded {
	unsigned char bytes[2][4096];
	size_t n[2];
	int events, code, exited;
	char err[48];
};

static int
decode_cb(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct decoded *d = arg;

	(void)line;
	(void)len;
	d->events++;
	if (ev->type == SBX_EVENT_STDOUT || ev->type == SBX_EVENT_STDERR) {
		assert_true(d->n[ev->stream - 1] + ev->len <= 4096);
		memcpy(d->bytes[ev->stream - 1] + d->n[ev->stream - 1], ev->data,
		    ev->len);
		d->n[ev->stream - 1] += ev->len;
	} else if (ev->type == SBX_EVENT_EXIT) {
		d->exited = 1;
		d->code = ev->code;
	} else if (ev->type == SBX_EVENT_ERROR)
		snprintf(d->err, sizeof(d->err), "%s", ev->err_code);
	return 0;
}

static void
decode_all(const char *nd, size_t len, struct decoded *d)
{
	struct sbx_ndjson_parser *p = sbx_ndjson_parser_new(0, decode_cb, d);
	struct sbx_err err;

	memset(d, 0, sizeof(*d));
	assert_int_equal(sbx_ndjson_parser_feed(p, nd, len, &err), 0);
	assert_int_equal(sbx_ndjson_parser_finish(p, &err), 0);
	sbx_ndjson_parser_free(p);
}

/* Every .sse transcript, fed in pieces of every size from 1 byte up, gives
 * back the .ndjson lines byte for byte, and so the same decoded output. */
static void
test_golden_sse_parses_back_to_the_ndjson(void **state)
{
	struct dirent *de;
	struct rebuild b;
	struct decoded want, got;
	struct cli_sse *p;
	struct sbx_err err;
	char np[1024], sp[1024], *nd, *sse;
	size_t nl, ndn, ssen, step, off, n;
	int files = 0;
	DIR *d;

	(void)state;
	d = opendir(golden_dir());
	if (d == NULL)
		fail_msg("no golden dir %s", golden_dir());
	while ((de = readdir(d)) != NULL) {
		nl = strlen(de->d_name);
		if (nl < 5 || strcmp(de->d_name + nl - 4, ".sse") != 0)
			continue;
		snprintf(sp, sizeof(sp), "%s/%s", golden_dir(), de->d_name);
		snprintf(np, sizeof(np), "%s/%.*s.ndjson", golden_dir(),
		    (int)(nl - 4), de->d_name);
		sse = slurp(sp, &ssen);
		nd = slurp(np, &ndn);
		decode_all(nd, ndn, &want);
		for (step = 1; step <= ssen; step = step < 16 ? step + 1 :
		    step * 3) {
			memset(&b, 0, sizeof(b));
			p = cli_sse_new(0, rebuild_cb, &b);
			for (off = 0; off < ssen; off += n) {
				n = ssen - off < step ? ssen - off : step;
				assert_int_equal(cli_sse_feed(p, sse + off, n,
				    &err), 0);
			}
			assert_int_equal(cli_sse_pending(p), 0);
			cli_sse_free(p);
			assert_int_equal(b.bad, 0);
			if (b.len != ndn || memcmp(b.out, nd, ndn) != 0)
				fail_msg("%s: rebuilt NDJSON differs (step %zu)",
				    de->d_name, step);
			decode_all(b.out, b.len, &got);
			assert_int_equal(got.events, want.events);
			assert_int_equal(got.n[0], want.n[0]);
			assert_int_equal(got.n[1], want.n[1]);
			assert_memory_equal(got.bytes[0], want.bytes[0], want.n[0]);
			assert_memory_equal(got.bytes[1], want.bytes[1], want.n[1]);
			assert_int_equal(got.code, want.code);
			assert_string_equal(got.err, want.err);
			free(b.out);
		}
		free(sse);
		free(nd);
		files++;
	}
	closedir(d);
	assert_true(files >= 7);
}

/* The binary transcript's bytes, decoded: what `sbx exec` writes. */
static void
test_binary_golden_decodes_to_exact_bytes(void **state)
{
	static const unsigned char want_out[] = { 0xff, 0xfe, 0x00, 0x0d, 0x0a };
	struct rebuild b;
	struct decoded got;
	struct cli_sse *p;
	struct sbx_err err;
	char path[1024], *sse;
	size_t n;

	(void)state;
	snprintf(path, sizeof(path), "%s/binary.sse", golden_dir());
	sse = slurp(path, &n);
	memset(&b, 0, sizeof(b));
	p = cli_sse_new(0, rebuild_cb, &b);
	assert_int_equal(cli_sse_feed(p, sse, n, &err), 0);
	cli_sse_free(p);
	decode_all(b.out, b.len, &got);
	assert_memory_equal(got.bytes[0], want_out, sizeof(want_out));
	/* ED A0 80 on stderr: a lone surrogate stays bytes, not U+FFFD. */
	assert_true(got.n[1] >= 3);
	assert_int_equal(got.bytes[1][0], 0xed);
	assert_int_equal(got.bytes[1][1], 0xa0);
	assert_int_equal(got.bytes[1][2], 0x80);
	free(b.out);
	free(sse);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fields_and_dispatch_follow_the_standard),
		cmocka_unit_test(test_line_ends_crlf_cr_lf_even_split_between_cr_and_lf),
		cmocka_unit_test(test_bom_is_skipped_once_even_when_split),
		cmocka_unit_test(test_unterminated_event_is_not_dispatched_but_reported_pending),
		cmocka_unit_test(test_limits_and_cancel_stop_the_parser),
		cmocka_unit_test(test_ndjson_line_rebuild),
		cmocka_unit_test(test_golden_sse_parses_back_to_the_ndjson),
		cmocka_unit_test(test_binary_golden_decodes_to_exact_bytes),
	};

	return cmocka_run_group_tests_name("cli_sse", tests, NULL, NULL);
}
