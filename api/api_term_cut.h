/* api_term_cut.h - where a terminal's output may be cut for a replay: never inside a UTF-8 sequence, never inside an ANSI/VT escape sequence (adr/0051). Pure functions over bytes; no I/O, no allocation. */
#ifndef API_TERM_CUT_H
#define API_TERM_CUT_H

#include <stddef.h>
#include <stdint.h>

/*
 * The parser state after some bytes of one output stream, enough to say
 * whether the next byte starts something new. It follows the DEC/ANSI
 * parser of ECMA-48 §5 as xterm implements it (ctlseqs: "C1 (8-Bit)
 * Control Characters" are not recognised in UTF-8 output, so only the
 * 7-bit ESC forms count):
 *   ESC Fe/Fp/Fs (two bytes, intermediates 0x20-0x2F allowed before the
 *   final 0x30-0x7E), CSI = ESC [ (parameters 0x30-0x3F, intermediates
 *   0x20-0x2F, final 0x40-0x7E), OSC = ESC ] up to BEL or ST (ESC \),
 *   DCS = ESC P, SOS = ESC X, PM = ESC ^, APC = ESC _ up to ST.
 * CAN (0x18) and SUB (0x1A) abort any sequence; ESC inside a control
 * sequence starts a new one; other C0 bytes inside a control sequence
 * are executed and leave it going. A byte >= 0x80 inside ESC or CSI
 * aborts it (xterm decodes UTF-8 first: such a character is no parameter);
 * inside a string (OSC, DCS...) it is part of the string.
 * UTF-8 (RFC 3629): a lead byte 0xC2-0xDF wants 1 more byte, 0xE0-0xEF 2,
 * 0xF0-0xF4 3; a byte that is not a continuation where one is wanted ends
 * the sequence (it is then read as itself).
 * Zeroed = the state before the first byte (ground, nothing pending).
 */
struct term_cut {
	uint8_t st;      /* TC_* of api_term_cut.c */
	uint8_t need;    /* UTF-8 continuation bytes still wanted */
};

/* Advances c over p[0..n). n 0: nothing. Feeding a then b equals
 * feeding a followed by b in one call. */
void term_cut_feed(struct term_cut *c, const unsigned char *p, size_t n);

/* 1 when a replay may start right after what c has seen: ground state,
 * no UTF-8 sequence pending. */
int term_cut_safe(const struct term_cut *c);

/*
 * The first safe cut in p[0..n) for a stream whose state before p[0] is
 * *c: returns k, the smallest index such that after feeding p[0..k) the
 * state is safe (0 when *c is safe already), and leaves *c at that state;
 * n when no index is safe (then *c is the state after all of p: the next
 * bytes may still reach one). An index is safe also when a UTF-8 sequence
 * is pending but p[k] is no continuation byte (the sequence is broken;
 * p[k] is read as itself): *c then forgets the broken sequence.
 */
size_t term_cut_find(struct term_cut *c, const unsigned char *p, size_t n);

/* The state as one 16-bit value (for the on-disk log) and back. A value
 * that is no state decodes to the zero state and returns -1. */
uint16_t term_cut_pack(const struct term_cut *c);
int term_cut_unpack(struct term_cut *c, uint16_t v);

#endif
