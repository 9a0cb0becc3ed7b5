/*
 * fuzz_gate.c - libFuzzer target: the request gate both daemons put in
 * front of evhttp (common/sbx_gate.c, ADR 0008/0012), through its
 * buffer-driven entry sbx_gate_parse() (the whole server, gate included, is
 * also fuzzed by broker_http and api_http).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - a complete head has 0 < len <= the bytes given, and the same bytes
 *    with anything appended give the same verdict and length (the gate
 *    decides on the head alone, however the body or the next request
 *    arrives); fewer bytes than the head never give a different
 *    head (0 = "more bytes needed", or a size refusal);
 *  - bounded: no head is accepted longer than head_max or with more than
 *    headers_max fields; "need more" is never answered once head_max bytes
 *    are there;
 *  - an accepted head (bad == PASS) has a request line understood, its
 *    upper-case method, method/target/credential inside the head, never
 *    both Content-Length and chunked, at most one Authorization, and no
 *    control byte but TAB (and the CR of CRLF) anywhere in it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "sbx_gate.h"

static const struct sbx_gate_limits lim = { .head_max = 1024,
    .headers_max = 16, .header_timeout_ms = 10000, .max_connections = 64 };

static int
inside(const char *p, size_t n, const char *q, size_t qlen)
{
	return q == NULL ? qlen == 0 : q >= p && q + qlen <= p + n;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	const char *p = (const char *)data;
	struct sbx_gate_head h, h2;
	char *more;
	size_t i, k;
	int rc, rc2;

	memset(&h, 0, sizeof(h));
	rc = sbx_gate_parse(p, size, &lim, &h);
	FUZZ_ASSERT(rc == 0 || rc == 1);
	if (rc == 0) {
		/* need more: only while under the size limit */
		FUZZ_ASSERT(size < lim.head_max + 2);
		return 0;
	}
	if (h.bad == SBX_GATE_HEAD_TOO_LARGE || h.bad == SBX_GATE_URI_TOO_LONG) {
		/* refused on size (len says nothing): only once past a limit */
		FUZZ_ASSERT(size >= lim.head_max || h.nheaders > lim.headers_max);
		memset(&h2, 0, sizeof(h2));
		more = malloc(size + 64);
		FUZZ_ASSERT(more != NULL);
		memcpy(more, data, size);
		memset(more + size, 'x', 64);
		FUZZ_ASSERT(sbx_gate_parse(more, size + 64, &lim, &h2) == 1 &&
		    h2.bad == h.bad);
		free(more);
		return 0;
	}
	FUZZ_ASSERT(h.len > 0 && h.len <= size);
	if (h.bad == SBX_GATE_PASS) {
		FUZZ_ASSERT(h.len <= lim.head_max);
		FUZZ_ASSERT(h.nheaders <= lim.headers_max);
		FUZZ_ASSERT(h.line_ok);
		FUZZ_ASSERT(inside(p, h.len, h.method, h.mlen) && h.mlen > 0);
		FUZZ_ASSERT(inside(p, h.len, h.target, h.tlen) && h.tlen > 0);
		FUZZ_ASSERT(inside(p, h.len, h.auth, h.alen));
		FUZZ_ASSERT(h.nauth <= 1);
		FUZZ_ASSERT(!(h.has_cl && h.chunked));
		for (i = 0; i < h.len; i++) {
			unsigned char c = data[i];

			FUZZ_ASSERT(c >= 0x20 || c == '\t' || c == '\n' ||
			    (c == '\r' && i + 1 < h.len && data[i + 1] == '\n'));
			FUZZ_ASSERT(c != 0x7f);
		}
		for (i = 0; i < h.mlen; i++)
			FUZZ_ASSERT(h.method[i] >= 'A' && h.method[i] <= 'Z');
	}
	/* the verdict is the head's alone: append bytes */
	more = malloc(size + 64);
	FUZZ_ASSERT(more != NULL);
	memcpy(more, data, size);
	memset(more + size, 'x', 64);
	memset(&h2, 0, sizeof(h2));
	rc2 = sbx_gate_parse(more, size + 64, &lim, &h2);
	FUZZ_ASSERT(rc2 == 1 && h2.len == h.len && h2.bad == h.bad);
	FUZZ_ASSERT(h2.cl == h.cl && h2.has_cl == h.has_cl &&
	    h2.chunked == h.chunked);
	free(more);
	/* and a prefix never gives another head */
	k = size > 0 ? (size_t)data[0] % (h.len + 1) : 0;
	if (k < h.len) {
		memset(&h2, 0, sizeof(h2));
		rc2 = sbx_gate_parse(p, k, &lim, &h2);
		FUZZ_ASSERT(rc2 == 0 || h2.bad != SBX_GATE_PASS);
	}
	return 0;
}
