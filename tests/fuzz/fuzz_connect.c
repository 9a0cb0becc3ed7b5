/*
 * fuzz_connect.c - libFuzzer target: the Connect protocol's request parser
 * of the api (api/api_connect.c through api_connect_wire.h, adr/0060): a
 * request body read as a unary call's JSON and as a streaming call's one
 * envelope, and the head values it judges (Content-Type, Connect-Timeout-Ms).
 *
 * The first byte picks the kind and a message cap, the rest is the body;
 * the body's first line is also read as the two header values.
 * Invariants asserted:
 *  - a refusal has a code and no message; a message is a JSON object;
 *  - a streaming body is accepted only as exactly one envelope: flags 0,
 *    a length equal to the bytes that follow, at most the cap; a unary one
 *    only at most the cap;
 *  - what was accepted, enveloped again, is accepted again as the same
 *    object (the encoder and the decoder agree);
 *  - a timeout is accepted only as 1 to 10 digits and then is their value;
 *    a Content-Type verdict is -1, 0 or 1.
 */
#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "fuzz.h"
#include "api_connect_wire.h"

static void
heads(const unsigned char *p, size_t n)
{
	char line[64];
	size_t k = 0, i;
	int64_t ms;
	int ct;

	while (k < n && k < sizeof(line) - 1 && p[k] != '\n' && p[k] != '\0')
		k++;
	memcpy(line, p, k);
	line[k] = '\0';
	if (api_connect_timeout_parse(line, &ms) == 0) {
		int64_t v = 0;

		FUZZ_ASSERT(k >= 1 && k <= 10);
		for (i = 0; i < k; i++) {
			FUZZ_ASSERT(line[i] >= '0' && line[i] <= '9');
			v = v * 10 + (line[i] - '0');
		}
		FUZZ_ASSERT(v == ms);
	} else {
		FUZZ_ASSERT(ms == 0);
	}
	ct = api_connect_ctype(line, API_CONNECT_UNARY);
	FUZZ_ASSERT(ct >= -1 && ct <= 1);
	ct = api_connect_ctype(line, API_CONNECT_SERVER_STREAM);
	FUZZ_ASSERT(ct >= -1 && ct <= 1);
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	enum api_connect_kind kind;
	struct evbuffer *b;
	struct sbx_err err;
	json_t *msg, *again;
	size_t max, n;
	const unsigned char *p;

	if (size < 1)
		return 0;
	kind = (data[0] & 1) ? API_CONNECT_SERVER_STREAM : API_CONNECT_UNARY;
	max = (data[0] & 2) ? 64 : 1 << 20;
	p = data + 1;
	n = size - 1;
	heads(p, n);
	sbx_err_clear(&err);
	msg = api_connect_decode(n > 0 ? p : NULL, n, kind, max, &err);
	if (msg == NULL) {
		FUZZ_ASSERT(err.code[0] != '\0' && err.message[0] != '\0');
		return 0;
	}
	FUZZ_ASSERT(json_is_object(msg));
	if (kind == API_CONNECT_SERVER_STREAM) {
		FUZZ_ASSERT(n >= 5 && p[0] == 0);
		FUZZ_ASSERT(((size_t)p[1] << 24 | (size_t)p[2] << 16 |
		    (size_t)p[3] << 8 | p[4]) == n - 5);
		FUZZ_ASSERT(n - 5 <= max);
	} else {
		FUZZ_ASSERT(n <= max);
	}
	/* Round trip through the encoder, as a stream's envelope. */
	b = evbuffer_new();
	FUZZ_ASSERT(b != NULL);
	FUZZ_ASSERT(api_connect_envelope(b, 0, msg) == 0);
	n = evbuffer_get_length(b);
	again = api_connect_decode(evbuffer_pullup(b, -1), n,
	    API_CONNECT_SERVER_STREAM, 1 << 24, &err);
	FUZZ_ASSERT(again != NULL && json_equal(msg, again));
	json_decref(again);
	evbuffer_free(b);
	json_decref(msg);
	return 0;
}
