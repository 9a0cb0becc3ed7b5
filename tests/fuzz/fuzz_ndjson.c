/*
 * fuzz_ndjson.c - libFuzzer target: the NDJSON exec event decoder and encoder
 * (proto/sbx_ndjson.c, SPEC §5).
 *
 * Invariants asserted:
 *  - no crash, no leak, no undefined behaviour (ASan + UBSan);
 *  - the decoder gives the same events and the same verdict however the
 *    bytes are split across feeds (byte at a time vs. pieces vs. all at once);
 *  - round trip exact: every decoded event, re-encoded by the encoder, decodes
 *    to the same event, and encoding that again gives the same bytes;
 *  - raw bytes through sbx_ndjson_output come back from the decoder byte for
 *    byte (text or base64 alike), as data exactly when the wire rule says
 *    (adr/0028);
 *  - undecoded mode (adr/0028) gives the same verdict and the same events
 *    (output by type and byte count) as decoding;
 *  - at most one terminal callback of each kind: at most one exit, at most one
 *    error, nothing after an error, and finish() succeeds only after a
 *    terminal event.
 * Bounded allocation: the parser's max_line is 4 KiB here, so any growth
 * beyond it is a bug ASan's allocation limit (-malloc_limit_mb) reports.
 */
#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "fuzz.h"
#include "sbx_ndjson.h"

#define MAX_LINE 4096
#define MAX_EVENTS 256

struct ev {
	int type, stream, code, truncated, has_signal;
	int64_t ts, duration_ms;
	char text[2][128];     /* exec_id/signal/err code, err message */
	unsigned char *data;   /* output bytes (owned; NULL when undecoded) */
	size_t len;
	int undecoded;         /* handed over as its line (adr/0028) */
};

/* parse() runs the parser in undecoded mode (sbx_ndjson_parser_undecoded). */
static int undecoded;

struct run {
	struct ev ev[MAX_EVENTS];
	size_t n;
	int exits, errors, after_error;
	struct evbuffer *reencoded;  /* the encoder's bytes for each event */
	size_t max_line;
};

static void
copy_text(char *dst, const char *s)
{
	snprintf(dst, 128, "%s", s != NULL ? s : "");
}

static int
on_event(void *arg, const struct sbx_event *e, const char *line, size_t len)
{
	struct run *r = arg;
	struct ev *v;

	(void)line;
	if (r->errors > 0)
		r->after_error = 1;
	if (e->type == SBX_EVENT_EXIT)
		r->exits++;
	if (e->type == SBX_EVENT_ERROR)
		r->errors++;
	if (r->n == MAX_EVENTS)
		return 0;
	v = &r->ev[r->n++];
	memset(v, 0, sizeof(*v));
	v->type = e->type;
	v->stream = e->stream;
	switch (e->type) {
	case SBX_EVENT_START:
		FUZZ_ASSERT(e->exec_id != NULL);
		copy_text(v->text[0], e->exec_id);
		v->ts = e->ts;
		if (r->reencoded != NULL)
			FUZZ_ASSERT(sbx_ndjson_start(r->reencoded, e->exec_id,
			    e->ts) == 0);
		break;
	case SBX_EVENT_STDOUT:
	case SBX_EVENT_STDERR:
		FUZZ_ASSERT(e->stream == (e->type == SBX_EVENT_STDOUT ? 1 : 2));
		if (e->undecoded) {
			/* only in undecoded mode, never with data or raw */
			FUZZ_ASSERT(undecoded && e->data == NULL &&
			    e->raw == NULL && e->len <= len);
			v->len = e->len;
			v->undecoded = 1;
			break;
		}
		FUZZ_ASSERT(e->len == 0 || e->data != NULL);
		FUZZ_ASSERT(e->len <= r->max_line);
		v->data = malloc(e->len + 1);
		FUZZ_ASSERT(v->data != NULL);
		if (e->len > 0)
			memcpy(v->data, e->data, e->len);
		v->len = e->len;
		if (r->reencoded != NULL)
			FUZZ_ASSERT(sbx_ndjson_output(r->reencoded, e->stream,
			    e->data, e->len) == 0);
		break;
	case SBX_EVENT_EXIT:
		v->code = e->code;
		v->has_signal = e->signal != NULL;
		copy_text(v->text[0], e->signal);
		v->duration_ms = e->duration_ms;
		v->truncated = e->truncated;
		FUZZ_ASSERT(e->truncated == 0 || e->truncated == 1);
		if (r->reencoded != NULL)
			FUZZ_ASSERT(sbx_ndjson_exit(r->reencoded, e->code,
			    e->signal, e->duration_ms, e->truncated) == 0);
		break;
	case SBX_EVENT_QUOTA:
		/* the numbers only: the encoder writes its own sentence */
		FUZZ_ASSERT(e->work_bytes >= 0 && e->work_quota >= 0);
		v->duration_ms = e->work_bytes;
		v->ts = e->work_quota;
		if (r->reencoded != NULL)
			FUZZ_ASSERT(sbx_ndjson_quota(r->reencoded, e->work_bytes,
			    e->work_quota) == 0);
		break;
	case SBX_EVENT_ERROR:
		FUZZ_ASSERT(e->err_code != NULL && e->err_message != NULL);
		copy_text(v->text[0], e->err_code);
		copy_text(v->text[1], e->err_message);
		if (r->reencoded != NULL)
			FUZZ_ASSERT(sbx_ndjson_error(r->reencoded, e->err_code,
			    e->err_message) == 0);
		break;
	default:
		FUZZ_ASSERT(!"unknown event type");
	}
	return 0;
}

static void
run_free(struct run *r)
{
	size_t i;

	for (i = 0; i < r->n; i++)
		free(r->ev[i].data);
	if (r->reencoded != NULL)
		evbuffer_free(r->reencoded);
}

/* Parses buf in pieces of step bytes (0: all at once). Returns the verdict:
 * 0 clean end, 1 refused while feeding, 2 refused at finish. */
static int
parse(const unsigned char *buf, size_t len, size_t step, struct run *r,
    int reencode, size_t max_line)
{
	struct sbx_ndjson_parser *p;
	struct sbx_err err;
	size_t off = 0, n;
	int verdict = 0;

	memset(r, 0, sizeof(*r));
	r->max_line = max_line;
	if (reencode)
		FUZZ_ASSERT((r->reencoded = evbuffer_new()) != NULL);
	p = sbx_ndjson_parser_new(max_line, on_event, r);
	FUZZ_ASSERT(p != NULL);
	sbx_ndjson_parser_undecoded(p, undecoded);
	while (off < len) {
		n = step == 0 || step > len - off ? len - off : step;
		if (sbx_ndjson_parser_feed(p, (const char *)buf + off, n,
		    &err) < 0) {
			FUZZ_ASSERT(err.code[0] != '\0');
			verdict = 1;
			/* stopped: every later feed fails too */
			FUZZ_ASSERT(sbx_ndjson_parser_feed(p, "\n", 1, &err) < 0);
			break;
		}
		off += n;
	}
	if (verdict == 0 && sbx_ndjson_parser_finish(p, &err) < 0)
		verdict = 2;
	if (verdict == 0)
		FUZZ_ASSERT(r->exits + r->errors >= 1);
	sbx_ndjson_parser_free(p);
	FUZZ_ASSERT(r->exits <= 1 && r->errors <= 1 && !r->after_error);
	return verdict;
}

static int
same_event(const struct ev *a, const struct ev *b)
{
	return a->type == b->type && a->stream == b->stream &&
	    a->code == b->code && a->truncated == b->truncated &&
	    a->has_signal == b->has_signal && a->ts == b->ts &&
	    a->duration_ms == b->duration_ms &&
	    strcmp(a->text[0], b->text[0]) == 0 &&
	    strcmp(a->text[1], b->text[1]) == 0 && a->len == b->len &&
	    (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static void
same_runs(const struct run *a, const struct run *b)
{
	size_t i;

	FUZZ_ASSERT(a->n == b->n);
	for (i = 0; i < a->n; i++)
		FUZZ_ASSERT(same_event(&a->ev[i], &b->ev[i]));
}

/* Undecoded mode sees the same events (output by type and byte count) and
 * gives the same verdict: it checks as strictly as decoding does. */
static void
same_as_undecoded(const struct run *a, const struct run *u)
{
	size_t i;

	FUZZ_ASSERT(a->n == u->n);
	for (i = 0; i < a->n; i++) {
		FUZZ_ASSERT(a->ev[i].type == u->ev[i].type);
		FUZZ_ASSERT(a->ev[i].len == u->ev[i].len);
		if (!u->ev[i].undecoded)
			FUZZ_ASSERT(same_event(&a->ev[i], &u->ev[i]));
	}
}

/* Mode 0: raw bytes through the encoder must decode to the same bytes. */
static void
output_round_trip(const unsigned char *data, size_t size)
{
	struct evbuffer *out = evbuffer_new();
	struct run r;
	size_t len;
	const unsigned char *bytes;

	FUZZ_ASSERT(out != NULL);
	FUZZ_ASSERT(sbx_ndjson_start(out, "ex-fuzz", 1) == 0);
	FUZZ_ASSERT(sbx_ndjson_output(out, 1 + (size & 1), data, size) == 0);
	FUZZ_ASSERT(sbx_ndjson_exit(out, 0, NULL, 5, 0) == 0);
	len = evbuffer_get_length(out);
	bytes = evbuffer_pullup(out, -1);
	/* the encoder's line may be longer than MAX_LINE: parse with room */
	{
		struct sbx_ndjson_parser *p;
		struct sbx_err err;

		memset(&r, 0, sizeof(r));
		r.max_line = len + 1;
		p = sbx_ndjson_parser_new(len + 1, on_event, &r);
		FUZZ_ASSERT(p != NULL);
		FUZZ_ASSERT(sbx_ndjson_parser_feed(p, (const char *)bytes, len,
		    &err) == 0);
		FUZZ_ASSERT(sbx_ndjson_parser_finish(p, &err) == 0);
		sbx_ndjson_parser_free(p);
	}
	FUZZ_ASSERT(r.n == 3);
	FUZZ_ASSERT(r.ev[1].len == size);
	FUZZ_ASSERT(size == 0 || memcmp(r.ev[1].data, data, size) == 0);
	{
		const char *l = (const char *)bytes;
		const char *o = memchr(l, '\n', len);

		FUZZ_ASSERT(o != NULL);
		/* text when valid UTF-8 and its escaping is no longer than
		 * base64, base64 otherwise (adr/0028) */
		FUZZ_ASSERT((strncmp(o + 1 + 17, "\"data_b64\"", 10) == 0) ==
		    !(sbx_utf8_valid(data, size) && sbx_json_escaped_len(data,
		    size) <= 4 * ((size + 2) / 3)));
	}
	run_free(&r);
	evbuffer_free(out);
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct run whole, bytewise, pieces, again;
	int v1, v2, v3;
	size_t step;

	if (size > 0 && data[0] == 0xfe) {
		output_round_trip(data + 1, size - 1);
		return 0;
	}
	step = size > 0 ? (size_t)(data[0] % 17) + 1 : 1;
	v1 = parse(data, size, 0, &whole, 1, MAX_LINE);
	v2 = parse(data, size, 1, &bytewise, 0, MAX_LINE);
	v3 = parse(data, size, step, &pieces, 0, MAX_LINE);
	FUZZ_ASSERT(v1 == v2 && v1 == v3);
	same_runs(&whole, &bytewise);
	same_runs(&whole, &pieces);
	{
		struct run u;

		undecoded = 1;
		FUZZ_ASSERT(parse(data, size, step, &u, 0, MAX_LINE) == v1);
		undecoded = 0;
		same_as_undecoded(&whole, &u);
		run_free(&u);
	}
	if (v1 == 0 && whole.n < MAX_EVENTS) {
		/* decode(encode(decode(x))) == decode(x), and the encoding is a
		 * fixed point. */
		struct evbuffer *enc = whole.reencoded;
		size_t elen = evbuffer_get_length(enc);
		unsigned char *ebytes = malloc(elen + 1);

		FUZZ_ASSERT(ebytes != NULL);
		evbuffer_copyout(enc, ebytes, elen);
		FUZZ_ASSERT(parse(ebytes, elen, 0, &again, 1, elen + 1) == 0);
		same_runs(&whole, &again);
		FUZZ_ASSERT(evbuffer_get_length(again.reencoded) == elen);
		FUZZ_ASSERT(memcmp(evbuffer_pullup(again.reencoded, -1), ebytes,
		    elen) == 0);
		run_free(&again);
		free(ebytes);
	}
	run_free(&whole);
	run_free(&bytewise);
	run_free(&pieces);
	return 0;
}
