/*
 * fuzz_sse.c - libFuzzer target: the SSE encoder (proto/sbx_sse.c) against a
 * strict Server-Sent Events parser written here from the WHATWG HTML Living
 * Standard §9.2.6 "Interpreting an event stream" (the parser a browser's
 * EventSource runs), and the SPEC §5 NDJSON -> SSE mapping.
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - sbx_sse_event(): all or nothing; when it succeeds the strict parser sees
 *    exactly one event, of the given type ("message" when NULL), with the
 *    given id as last event id (none for 0) and the data back exactly, each
 *    CRLF/CR/LF normalised to LF — whatever bytes data holds, it cannot end
 *    the event early, start a second one or set another field;
 *  - sbx_sse_comment(): the parser sees no event at all;
 *  - sbx_sse_from_ndjson(): when it succeeds, exactly one event whose type is
 *    the line's "type" and whose data is a JSON object equal to the line's
 *    object without "type"; when it fails, nothing was appended;
 *  - bounded allocation: output is at most a constant times the input.
 */
#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "fuzz.h"
#include "sbx_sse.h"

#include "sse_strict.h"

/* ---------------------------------------------------------------- checks */

/* data with each CRLF, CR and LF turned into LF. */
static unsigned char *
normalise(const unsigned char *s, size_t n, size_t *outlen)
{
	unsigned char *o = malloc(n + 1);
	size_t i, k = 0;

	FUZZ_ASSERT(o != NULL);
	for (i = 0; i < n; i++) {
		if (s[i] == '\r') {
			o[k++] = '\n';
			if (i + 1 < n && s[i + 1] == '\n')
				i++;
		} else {
			o[k++] = s[i];
		}
	}
	*outlen = k;
	return o;
}

static void
check_event(const unsigned char *data, size_t size)
{
	struct evbuffer *out = evbuffer_new();
	size_t elen, dlen, nlen, olen;
	char *event = NULL, idtext[32];
	const unsigned char *d;
	unsigned char *norm;
	uint64_t id;
	struct sse p;
	int rc, bad;

	FUZZ_ASSERT(out != NULL);
	/* layout: [id byte][event length][event bytes][data...] */
	id = size > 0 ? data[0] : 0;
	if (id == 255)
		id = UINT64_MAX;
	elen = size > 1 ? data[1] % 40 : 0;
	if (size < 2 + elen)
		elen = 0;
	if (elen > 0)
		event = dupn(data + 2, elen);
	d = data + (size >= 2 ? 2 + elen : size);
	dlen = size - (size_t)(d - data);
	rc = sbx_sse_event(out, id, elen > 0 ? event : NULL,
	    (const char *)d, dlen);
	/* a NUL ends the C string: the event name is the part before it */
	bad = event != NULL && (event[0] == '\0' ||
	    strpbrk(event, "\r\n") != NULL);
	FUZZ_ASSERT((rc < 0) == bad);
	if (rc < 0) {
		FUZZ_ASSERT(evbuffer_get_length(out) == 0);
	} else {
		olen = evbuffer_get_length(out);
		/* bounded: one "data: " prefix per line break at most */
		FUZZ_ASSERT(olen <= 64 + elen + dlen * 7);
		sse_parse(&p, evbuffer_pullup(out, -1), olen);
		FUZZ_ASSERT(p.dispatched == 1);
		FUZZ_ASSERT(p.len == 0 && p.type == NULL);  /* nothing pending */
		FUZZ_ASSERT(strcmp(p.ev[0].type, event != NULL ? event :
		    "message") == 0);
		if (id != 0) {
			snprintf(idtext, sizeof(idtext), "%llu",
			    (unsigned long long)id);
			FUZZ_ASSERT(strcmp(p.ev[0].id, idtext) == 0);
		} else {
			FUZZ_ASSERT(p.ev[0].id[0] == '\0');
		}
		norm = normalise(d, dlen, &nlen);
		FUZZ_ASSERT(p.ev[0].len == nlen);
		FUZZ_ASSERT(nlen == 0 || memcmp(p.ev[0].data, norm, nlen) == 0);
		free(norm);
		sse_free(&p);
	}
	free(event);
	evbuffer_free(out);
}

static void
check_comment(const unsigned char *data, size_t size)
{
	struct evbuffer *out = evbuffer_new();
	char *text = dupn(data, size);
	struct sse p;
	int rc;

	rc = sbx_sse_comment(out, text);
	FUZZ_ASSERT((rc < 0) == (strpbrk(text, "\r\n") != NULL));
	if (rc < 0) {
		FUZZ_ASSERT(evbuffer_get_length(out) == 0);
	} else {
		sse_parse(&p, evbuffer_pullup(out, -1), evbuffer_get_length(out));
		FUZZ_ASSERT(p.dispatched == 0 && p.len == 0);
		sse_free(&p);
	}
	free(text);
	evbuffer_free(out);
}

static void
check_mapping(const unsigned char *data, size_t size)
{
	struct evbuffer *out = evbuffer_new();
	json_t *line, *rest, *got;
	struct sbx_err err;
	const char *type;
	struct sse p;
	int rc;

	FUZZ_ASSERT(out != NULL);
	rc = sbx_sse_from_ndjson(out, 7, (const char *)data, size, &err);
	if (rc < 0) {
		FUZZ_ASSERT(evbuffer_get_length(out) == 0);
		FUZZ_ASSERT(err.code[0] != '\0');
		evbuffer_free(out);
		return;
	}
	/* the line was one JSON object with a string "type" */
	line = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
	FUZZ_ASSERT(json_is_object(line));
	type = json_string_value(json_object_get(line, "type"));
	FUZZ_ASSERT(type != NULL);
	sse_parse(&p, evbuffer_pullup(out, -1), evbuffer_get_length(out));
	FUZZ_ASSERT(p.dispatched == 1 && p.len == 0);
	FUZZ_ASSERT(strcmp(p.ev[0].type, type) == 0);
	FUZZ_ASSERT(strcmp(p.ev[0].id, "7") == 0);
	got = json_loadb((const char *)p.ev[0].data, p.ev[0].len,
	    JSON_ALLOW_NUL, NULL);
	FUZZ_ASSERT(json_is_object(got));
	rest = json_deep_copy(line);
	json_object_del(rest, "type");
	FUZZ_ASSERT(json_equal(rest, got));
	json_decref(rest);
	json_decref(got);
	json_decref(line);
	sse_free(&p);
	evbuffer_free(out);
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	if (size == 0)
		return 0;
	switch (data[0] % 3) {
	case 0:
		check_event(data + 1, size - 1);
		break;
	case 1:
		check_comment(data + 1, size - 1);
		break;
	default:
		check_mapping(data + 1, size - 1);
		break;
	}
	return 0;
}
