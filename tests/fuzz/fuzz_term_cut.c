/*
 * fuzz_term_cut.c - libFuzzer target: the safe cut of a terminal replay
 * (api/api_term_cut.c, adr/0051).
 *
 * The first byte picks a split point, the rest is terminal output.
 * Invariants asserted:
 *  - feeding in two pieces gives the state of feeding at once;
 *  - term_cut_find(c, p, n) returns k <= n; every index before k is not
 *    a cut (not safe, and not a broken UTF-8 sequence before a
 *    non-continuation byte); when k < n, the returned state is safe;
 *  - a found cut never lands inside a UTF-8 sequence: when the state
 *    before k has a sequence pending, p[k] is no continuation byte;
 *  - pack/unpack round-trips every reachable state.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "api_term_cut.h"

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct term_cut whole = { 0 }, parts = { 0 }, c, d, e;
	const unsigned char *p;
	size_t n, split, k, j;

	if (size < 1)
		return 0;
	p = data + 1;
	n = size - 1;
	split = n > 0 ? data[0] % (n + 1) : 0;
	term_cut_feed(&whole, p, n);
	term_cut_feed(&parts, p, split);
	term_cut_feed(&parts, p + split, n - split);
	FUZZ_ASSERT(term_cut_pack(&whole) == term_cut_pack(&parts));
	FUZZ_ASSERT(term_cut_unpack(&d, term_cut_pack(&whole)) == 0);
	FUZZ_ASSERT(term_cut_pack(&d) == term_cut_pack(&whole));

	/* A cut asked at split, with the true state before it. */
	memset(&c, 0, sizeof(c));
	term_cut_feed(&c, p, split);
	e = c;
	k = term_cut_find(&c, p + split, n - split);
	FUZZ_ASSERT(k <= n - split);
	for (j = 0; j < k; j++) {
		FUZZ_ASSERT(!term_cut_safe(&e));
		FUZZ_ASSERT(!(e.need > 0 && (p[split + j] & 0xC0) != 0x80));
		FUZZ_ASSERT(term_cut_unpack(&d, term_cut_pack(&e)) == 0);
		term_cut_feed(&e, p + split + j, 1);
	}
	if (k < n - split) {
		FUZZ_ASSERT(term_cut_safe(&c));
		/* Inside a sequence e may be only when p[k] breaks it. */
		FUZZ_ASSERT(term_cut_safe(&e) ||
		    (e.need > 0 && (p[split + k] & 0xC0) != 0x80));
	}
	return 0;
}
