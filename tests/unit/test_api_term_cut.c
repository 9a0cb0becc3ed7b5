/* test_api_term_cut.c - the safe cut of a terminal replay (api/api_term_cut.c, adr/0051): every cut position inside and around every kind of sequence, as tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api_term_cut.h"

/* One sequence between plain text: a replay asked to start at any byte
 * inside seq starts right after it; at its first byte or outside it, the
 * replay starts where asked. */
struct seq_case {
	const char *name;
	const char *seq;
};

static const struct seq_case seqs[] = {
	{ "utf8 2", "\xc3\xa9" },
	{ "utf8 3", "\xe6\x97\xa5" },
	{ "utf8 4", "\xf0\x9f\x98\x80" },
	{ "two-byte ESC", "\x1b" "7" },
	{ "ESC with intermediate", "\x1b(B" },
	{ "ESC two intermediates", "\x1b#%8" },
	{ "CSI", "\x1b[31m" },
	{ "CSI params", "\x1b[1;38;5;208m" },
	{ "CSI private", "\x1b[?1049h" },
	{ "CSI intermediate", "\x1b[2 q" },
	{ "CSI with C0 inside", "\x1b[1\r;2H" },
	{ "OSC BEL", "\x1b]0;title\x07" },
	{ "OSC ST", "\x1b]2;t\xc3\xa9tle\x1b\\" },
	{ "OSC 8 hyperlink", "\x1b]8;;http://x/\x1b\\" },
	{ "DCS", "\x1bPq#0;2;0;0;0#0~~@@\x1b\\" },
	{ "DCS with BEL inside", "\x1bP1\x07x\x1b\\" },
	{ "APC", "\x1b_Gf=24;AAAA\x1b\\" },
	{ "PM", "\x1b^private\x1b\\" },
	{ "SOS", "\x1bXstring\x1b\\" },
};

/* The cut asked at pos of buf (n bytes), with the state of buf[0..pos). */
static size_t
cut_at(const unsigned char *buf, size_t n, size_t pos)
{
	struct term_cut c = { 0 };

	term_cut_feed(&c, buf, pos);
	return pos + term_cut_find(&c, buf + pos, n - pos);
}

static void
test_every_position_of_every_sequence(void **state)
{
	const char *pre = "ab", *post = "cd";
	unsigned char buf[128];
	size_t i, pos, n, sl, want;

	(void)state;
	for (i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
		sl = strlen(seqs[i].seq);
		n = (size_t)snprintf((char *)buf, sizeof(buf), "%s%s%s", pre,
		    seqs[i].seq, post);
		for (pos = 0; pos <= n; pos++) {
			want = pos > 2 && pos < 2 + sl ? 2 + sl : pos;
			if (cut_at(buf, n, pos) != want)
				fail_msg("%s: a cut asked at %zu went to %zu, not "
				    "%zu", seqs[i].name, pos, cut_at(buf, n, pos),
				    want);
		}
	}
}

/* Two sequences back to back: a cut inside the first goes to the start
 * of the second (which is safe), not past it. */
static void
test_back_to_back_sequences_cut_between(void **state)
{
	const unsigned char b[] = "\x1b[1m\x1b[31mX";
	size_t pos;

	(void)state;
	for (pos = 1; pos < 4; pos++)
		assert_int_equal(cut_at(b, sizeof(b) - 1, pos), 4);
	for (pos = 5; pos < 9; pos++)
		assert_int_equal(cut_at(b, sizeof(b) - 1, pos), 9);
}

/* What ends or aborts a sequence. */
struct abort_case {
	const char *name;
	const char *bytes;
	size_t safe_after;   /* the first safe index >= 1 */
};

static const struct abort_case aborts[] = {
	{ "CAN aborts CSI", "\x1b[12\x18z", 5 },
	{ "SUB aborts OSC", "\x1b]0;t\x1az", 6 },
	{ "CAN aborts DCS", "\x1bPab\x18z", 5 },
	{ "ESC restarts CSI", "\x1b[12\x1b[m" "z", 7 },
	{ "ESC not-ST ends OSC, starts ESC", "\x1b]0;t\x1b" "7z", 7 },
	{ "BEL does not end DCS", "\x1bPa\x07" "b\x1b\\z", 7 },
	{ "non-ASCII aborts CSI", "\x1b[1\xc3\xa9z", 5 },
	{ "broken UTF-8 lead then ASCII", "\xe6z", 1 },
	{ "broken UTF-8 lead then ESC", "\xe6\x1b[mz", 1 },
	{ "stray continuation is no sequence", "\x80z", 1 },
	{ "C0 inside ESC keeps it", "\x1b\n7z", 3 },
	{ "DEL inside CSI ignored", "\x1b[1\x7fmz", 5 },
	{ "overlong lead C0 is one byte", "\xc0\x80z", 1 },
	{ "F5 is no lead", "\xf5\x80z", 1 },
};

static void
test_aborts_and_resynchronisation(void **state)
{
	size_t i, n, k;
	struct term_cut c;

	(void)state;
	for (i = 0; i < sizeof(aborts) / sizeof(aborts[0]); i++) {
		n = strlen(aborts[i].bytes);
		memset(&c, 0, sizeof(c));
		term_cut_feed(&c, (const unsigned char *)aborts[i].bytes, 1);
		k = 1 + term_cut_find(&c, (const unsigned char *)aborts[i].bytes
		    + 1, n - 1);
		if (k != aborts[i].safe_after)
			fail_msg("%s: first safe index %zu, not %zu",
			    aborts[i].name, k, aborts[i].safe_after);
	}
}

/* An unterminated string never becomes safe: the cut is the end. */
static void
test_unterminated_string_cuts_at_the_end(void **state)
{
	const unsigned char b[] = "\x1b]0;never ends \x07";
	struct term_cut c = { 0 };

	(void)state;
	term_cut_feed(&c, b, 1);
	assert_int_equal(term_cut_find(&c, b + 1, sizeof(b) - 3),
	    sizeof(b) - 3);
	assert_false(term_cut_safe(&c));
	/* ... and the BEL that comes later ends it. */
	assert_int_equal(term_cut_find(&c, b + sizeof(b) - 2, 1), 1);
	assert_true(term_cut_safe(&c));
}

/* Feeding in pieces equals feeding at once, for every split. */
static void
test_feed_is_splittable(void **state)
{
	const unsigned char b[] = "a\xc3\xa9\x1b]0;x\x1b\\\x1b[1;2H\xf0\x9f\x98\x80z";
	struct term_cut whole = { 0 }, parts;
	size_t split, n = sizeof(b) - 1;

	(void)state;
	term_cut_feed(&whole, b, n);
	for (split = 0; split <= n; split++) {
		memset(&parts, 0, sizeof(parts));
		term_cut_feed(&parts, b, split);
		term_cut_feed(&parts, b + split, n - split);
		assert_int_equal(term_cut_pack(&parts), term_cut_pack(&whole));
	}
}

static void
test_pack_round_trips_and_refuses_garbage(void **state)
{
	const unsigned char b[] = "\x1b[1;\xe6";
	struct term_cut c = { 0 }, d;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(b) - 1; i++) {
		term_cut_feed(&c, b + i, 1);
		assert_int_equal(term_cut_unpack(&d, term_cut_pack(&c)), 0);
		assert_int_equal(term_cut_pack(&d), term_cut_pack(&c));
	}
	assert_int_equal(term_cut_unpack(&d, 0xFF00), -1);
	assert_true(term_cut_safe(&d));
	assert_int_equal(term_cut_unpack(&d, 0x0104), -1);   /* ESC + need */
	assert_int_equal(term_cut_unpack(&d, 0x0004), -1);   /* need 4 */
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_position_of_every_sequence),
		cmocka_unit_test(test_back_to_back_sequences_cut_between),
		cmocka_unit_test(test_aborts_and_resynchronisation),
		cmocka_unit_test(test_unterminated_string_cuts_at_the_end),
		cmocka_unit_test(test_feed_is_splittable),
		cmocka_unit_test(test_pack_round_trips_and_refuses_garbage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
