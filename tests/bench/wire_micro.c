/* wire_micro.c - `make bench` helper: CPU per GiB of the exec output wire path in one process, no runtime (adr/0028).
 *
 *   wire-micro zero|urandom|text MIB
 *
 * Feeds MIB MiB of output in 64 KiB reads through the broker's encoder
 * (sbx_ndjson_output_held) and then through the api's two ways of making
 * SSE of the broker's lines: "forward" (the parser's undecoded mode and
 * sbx_sse_from_output_line, what the api does) and "reencode" (decode,
 * sbx_ndjson_output again, sbx_sse_from_own_ndjson: the api before
 * adr/0028). Prints one JSON object: CPU seconds per GiB of output of each
 * (CLOCK_PROCESS_CPUTIME_ID) and the wire bytes per output byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

#include "sbx_ndjson.h"
#include "sbx_sse.h"

static struct evbuffer *sse, *re;
static unsigned long long next_id;

static int
on_event(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct sbx_err e;
	size_t n;

	(void)arg;
	if (ev->type != SBX_EVENT_STDOUT)
		return 0;
	if (ev->undecoded) {
		if (sbx_sse_from_output_line(sse, ++next_id, line, len, &e) != 0)
			return 1;
	} else {
		if (sbx_ndjson_output(re, ev->stream, ev->data, ev->len) != 0)
			return 1;
		n = evbuffer_get_length(re);
		if (sbx_sse_from_own_ndjson(sse, ++next_id,
		    (const char *)evbuffer_pullup(re, -1), n, &e) != 0)
			return 1;
		evbuffer_drain(re, n);
	}
	evbuffer_drain(sse, evbuffer_get_length(sse));
	return 0;
}

static double
cpu_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Runs the api side over lines[0..n) once; returns its CPU seconds. */
static double
api_side(const char *lines, size_t n, int fwd)
{
	struct sbx_ndjson_parser *p = sbx_ndjson_parser_new(0, on_event, NULL);
	struct sbx_err e;
	double t0 = cpu_now();

	sbx_ndjson_parser_undecoded(p, fwd);
	if (sbx_ndjson_parser_feed(p, lines, n, &e) != 0) {
		fprintf(stderr, "wire-micro: %s\n", e.message);
		exit(1);
	}
	sbx_ndjson_parser_free(p);
	return cpu_now() - t0;
}

int
main(int argc, char **argv)
{
	const size_t chunk = 65536;
	size_t total, done, i, n, wire = 0;
	unsigned char *buf = malloc(chunk);
	struct evbuffer *out = evbuffer_new(), *all = evbuffer_new();
	struct sbx_utf8_hold h = { { 0 }, 0 };
	double enc = 0, t0, fwd = 0, reenc = 0, gib;
	const char *src = argc > 1 ? argv[1] : "zero";
	FILE *f;

	total = (size_t)(argc > 2 ? atoi(argv[2]) : 64) << 20;
	sse = evbuffer_new();
	re = evbuffer_new();
	if (buf == NULL || out == NULL || all == NULL || total == 0)
		return 1;
	f = fopen(strcmp(src, "urandom") == 0 ? "/dev/urandom" : "/dev/zero", "rb");
	if (f == NULL || fread(buf, 1, chunk, f) != chunk)
		return 1;
	fclose(f);
	if (strcmp(src, "text") == 0)
		for (i = 0; i < chunk; i++)
			buf[i] = i % 64 == 63 ? '\n' : (unsigned char)('a' + i % 26);
	sbx_ndjson_start(all, "e", 1);
	/* The broker: encode; the lines are kept (up to 4/3 of the output). */
	for (done = 0; done < total; done += chunk) {
		t0 = cpu_now();
		sbx_ndjson_output_held(out, &h, 1, buf, chunk);
		enc += cpu_now() - t0;
		wire += evbuffer_get_length(out);
		evbuffer_add_buffer(all, out);
	}
	n = evbuffer_get_length(all);
	const char *lines = (const char *)evbuffer_pullup(all, -1);
	fwd = api_side(lines, n, 1);
	reenc = api_side(lines, n, 0);
	gib = (double)total / (1 << 30);
	printf("{\"source\":\"%s\",\"mib\":%zu,\"broker_encode_s_per_gib\":%.3f,"
	    "\"api_forward_s_per_gib\":%.3f,\"api_reencode_s_per_gib\":%.3f,"
	    "\"wire_per_byte\":%.3f}\n", src, total >> 20, enc / gib, fwd / gib,
	    reenc / gib, (double)wire / (double)total);
	return 0;
}
