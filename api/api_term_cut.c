/* api_term_cut.c - the safe-cut parser of a terminal's output (api_term_cut.h, adr/0051): a byte-at-a-time state machine, pure (no I/O, no allocation, no globals). */
#include "api_term_cut.h"

enum {
	TC_GROUND = 0,
	TC_ESC,        /* after ESC */
	TC_ESC_INTER,  /* ESC, intermediates 0x20-0x2F */
	TC_CSI,        /* ESC [ ... */
	TC_OSC,        /* ESC ] ... up to BEL or ST */
	TC_OSC_ESC,    /* ESC inside an OSC: "\" ends it */
	TC_STR,        /* DCS, SOS, PM, APC: up to ST */
	TC_STR_ESC,    /* ESC inside one of those */
	TC_NSTATES
};

#define CAN 0x18
#define SUB 0x1A
#define ESC 0x1B
#define BEL 0x07

/* The byte b read in ground state. */
static void
ground(struct term_cut *c, unsigned char b)
{
	if (c->need > 0) {
		if ((b & 0xC0) == 0x80) {
			c->need--;
			return;
		}
		c->need = 0;    /* a broken sequence ends; b is itself */
	}
	if (b == ESC)
		c->st = TC_ESC;
	else if (b >= 0xC2 && b <= 0xDF)
		c->need = 1;
	else if (b >= 0xE0 && b <= 0xEF)
		c->need = 2;
	else if (b >= 0xF0 && b <= 0xF4)
		c->need = 3;
}

/* One byte. */
static void
step(struct term_cut *c, unsigned char b)
{
	switch (c->st) {
	case TC_GROUND:
		ground(c, b);
		return;
	case TC_OSC:
	case TC_STR:
		if (b == CAN || b == SUB)
			c->st = TC_GROUND;
		else if (b == ESC)
			c->st = c->st == TC_OSC ? TC_OSC_ESC : TC_STR_ESC;
		else if (b == BEL && c->st == TC_OSC)
			c->st = TC_GROUND;
		return;
	case TC_OSC_ESC:
	case TC_STR_ESC:
		if (b == '\\') {
			c->st = TC_GROUND;
			return;
		}
		/* Not ST: the string is over and this ESC starts anew. */
		c->st = TC_ESC;
		break;
	default:
		break;
	}
	/* ESC, ESC_INTER, CSI (and ESC after an aborted string). */
	if (b == CAN || b == SUB) {
		c->st = TC_GROUND;
		return;
	}
	if (b == ESC) {
		c->st = TC_ESC;
		return;
	}
	if (b >= 0x80) {
		c->st = TC_GROUND;
		ground(c, b);
		return;
	}
	if (b < 0x20 || b == 0x7F)
		return;             /* executed or ignored; the sequence goes on */
	switch (c->st) {
	case TC_ESC:
		if (b == '[')
			c->st = TC_CSI;
		else if (b == ']')
			c->st = TC_OSC;
		else if (b == 'P' || b == 'X' || b == '^' || b == '_')
			c->st = TC_STR;
		else if (b <= 0x2F)
			c->st = TC_ESC_INTER;
		else
			c->st = TC_GROUND;
		return;
	case TC_ESC_INTER:
		if (b >= 0x30)
			c->st = TC_GROUND;
		return;
	case TC_CSI:
		if (b >= 0x40)
			c->st = TC_GROUND;
		return;
	default:
		return;
	}
}

void
term_cut_feed(struct term_cut *c, const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		step(c, p[i]);
}

int
term_cut_safe(const struct term_cut *c)
{
	return c->st == TC_GROUND && c->need == 0;
}

size_t
term_cut_find(struct term_cut *c, const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (term_cut_safe(c))
			return i;
		/* A UTF-8 sequence broken off by a byte that continues
		 * nothing: that byte is itself, and may start the replay. */
		if (c->st == TC_GROUND && (p[i] & 0xC0) != 0x80) {
			c->need = 0;
			return i;
		}
		step(c, p[i]);
	}
	return n;
}

uint16_t
term_cut_pack(const struct term_cut *c)
{
	return (uint16_t)(c->st << 8 | c->need);
}

int
term_cut_unpack(struct term_cut *c, uint16_t v)
{
	c->st = (uint8_t)(v >> 8);
	c->need = (uint8_t)(v & 0xFF);
	if (c->st >= TC_NSTATES || c->need > 3 ||
	    (c->need > 0 && c->st != TC_GROUND)) {
		c->st = c->need = 0;
		return -1;
	}
	return 0;
}
