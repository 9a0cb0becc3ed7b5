/*
 * fuzz_cli_sse.c - libFuzzer target: the CLI's incremental SSE decoder
 * (proto/cli_sse.c) and its SSE -> NDJSON inverse mapping.
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - the decoder dispatches exactly the events (type, data, last event id)
 *    the strict WHATWG parser of sse_strict.h finds in the same bytes,
 *    however the stream is split across feeds (also between CR and LF);
 *  - bounded allocation: with max 4 KiB it refuses ("protocol_error") a
 *    line or event data over 4 KiB instead of growing, and only then;
 *  - cli_sse_ndjson_line(): NULL, or one line '{"type":"EVENT"...}\n' with
 *    no other raw line break.
 */
#include <stdint.h>
#include <string.h>

#include "cli_sse.h"
#include "fuzz.h"
#include "sse_strict.h"

#define MAX 4096

struct got {
	struct sse_event ev[SSE_KEEP];
	size_t n, dispatched;
};

static int
on_event(void *arg, const char *event, const char *data, size_t len,
    const char *id)
{
	struct got *g = arg;
	struct sse_event *e;
	size_t olen;
	char *line;

	FUZZ_ASSERT(event != NULL && data != NULL && id != NULL);
	FUZZ_ASSERT(data[len] == '\0');
	FUZZ_ASSERT(len <= MAX);
	g->dispatched++;
	if (g->n < SSE_KEEP) {
		e = &g->ev[g->n++];
		e->type = strdup(event);
		e->data = (unsigned char *)dupn((const unsigned char *)data, len);
		e->len = len;
		e->id = strdup(id);
	}
	line = cli_sse_ndjson_line(event, data, len, &olen);
	if (line != NULL) {
		FUZZ_ASSERT(olen >= 10 + strlen(event));
		FUZZ_ASSERT(memcmp(line, "{\"type\":\"", 9) == 0);
		FUZZ_ASSERT(line[olen - 1] == '\n' && line[olen - 2] == '}');
		FUZZ_ASSERT(memchr(line, '\n', olen - 1) == NULL);
		free(line);
	}
	return 0;
}

/* Longest line and longest event data of the stream (as the strict parser
 * splits it), to know when the decoder must refuse. */
static int
over_max(const unsigned char *s, size_t n)
{
	size_t i, start = 0, data = 0;

	if (n >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0)
		start = 3;
	for (i = start; i <= n; i++) {
		if (i < n && s[i] != '\r' && s[i] != '\n')
			continue;
		if (i - start > MAX)
			return 1;
		if (i == n)
			break;
		if (i == start) {
			data = 0;
		} else if (i - start >= 4 && memcmp(s + start, "data", 4) == 0 &&
		    (i - start == 4 || s[start + 4] == ':')) {
			size_t v = i - start > 4 ? i - start - 5 : 0;

			if (v > 0 && s[start + 5] == ' ')
				v--;
			data += v + 1;
			if (data > MAX + 1)
				return 1;
		}
		if (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n')
			i++;
		start = i + 1;
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct cli_sse *c;
	struct got g;
	struct sse p;
	struct sbx_err err;
	size_t off = 0, n, step, i;
	int failed = 0;

	if (size == 0)
		return 0;
	step = data[0] % 11;  /* 0: all at once */
	data++;
	size--;
	memset(&g, 0, sizeof(g));
	c = cli_sse_new(MAX, on_event, &g);
	FUZZ_ASSERT(c != NULL);
	while (off < size) {
		n = step == 0 || step > size - off ? size - off : step;
		if (cli_sse_feed(c, (const char *)data + off, n, &err) < 0) {
			FUZZ_ASSERT(strcmp(err.code, "bad_request") == 0);
			failed = 1;
			FUZZ_ASSERT(cli_sse_feed(c, "\n\n", 2, &err) < 0);
			break;
		}
		off += n;
	}
	(void)cli_sse_pending(c);
	cli_sse_free(c);
	/* the strict parser on the same bytes */
	sse_parse(&p, data, size);
	if (failed) {
		FUZZ_ASSERT(over_max(data, size));
	} else {
		FUZZ_ASSERT(g.dispatched == p.dispatched);
		for (i = 0; i < g.n; i++) {
			FUZZ_ASSERT(strcmp(g.ev[i].type, p.ev[i].type) == 0);
			FUZZ_ASSERT(g.ev[i].len == p.ev[i].len);
			FUZZ_ASSERT(memcmp(g.ev[i].data, p.ev[i].data,
			    g.ev[i].len) == 0);
			FUZZ_ASSERT(strcmp(g.ev[i].id, p.ev[i].id) == 0);
		}
	}
	for (i = 0; i < g.n; i++) {
		free(g.ev[i].type);
		free(g.ev[i].data);
		free(g.ev[i].id);
	}
	sse_free(&p);
	return 0;
}
