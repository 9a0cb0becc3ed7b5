/* sbx_vmux.c - the egress frames of a vm sandbox's virtio-serial port (sbx_vmux.h, adr/0069): header writer and a strict parser of untrusted bytes; libc only, touches nothing but its arguments. */
#include <string.h>

#include "sbx_vmux.h"

static void
put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static uint32_t
get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

size_t
vmux_header(unsigned char out[VMUX_HDR], enum vmux_type type, uint32_t id, size_t len)
{
	out[0] = (unsigned char)type;
	out[1] = 0;
	out[2] = (unsigned char)(len >> 8);
	out[3] = (unsigned char)len;
	put32(out + 4, id);
	return VMUX_HDR;
}

size_t
vmux_credit(unsigned char out[VMUX_HDR + 4], uint32_t id, uint32_t n)
{
	vmux_header(out, VMUX_CREDIT, id, 4);
	put32(out + VMUX_HDR, n);
	return VMUX_HDR + 4;
}

static long
bad(const char **why, const char *what)
{
	if (why != NULL)
		*why = what;
	return -1;
}

long
vmux_parse(const unsigned char *buf, size_t len, struct vmux_frame *f, const char **why)
{
	size_t plen;
	uint32_t id;

	/* Judge the header as soon as it is whole: a bad one never waits for
	 * a payload it announces. */
	if (len < VMUX_HDR)
		return 0;
	if (buf[0] < VMUX_OPEN || buf[0] > VMUX_CREDIT)
		return bad(why, "unknown frame type");
	if (buf[1] != 0)
		return bad(why, "reserved byte not 0");
	plen = (size_t)buf[2] << 8 | buf[3];
	id = get32(buf + 4);
	if (id == 0)
		return bad(why, "connection id 0");
	if (plen > VMUX_DATA_MAX)
		return bad(why, "payload too long");
	switch (buf[0]) {
	case VMUX_DATA:
		if (plen == 0)
			return bad(why, "empty DATA");
		break;
	case VMUX_CREDIT:
		if (plen != 4)
			return bad(why, "CREDIT is not 4 bytes");
		break;
	default:
		if (plen != 0)
			return bad(why, "payload on OPEN, EOF or CLOSE");
	}
	if (len - VMUX_HDR < plen)
		return 0;
	memset(f, 0, sizeof(*f));
	f->type = (enum vmux_type)buf[0];
	f->id = id;
	if (f->type == VMUX_DATA) {
		f->data = buf + VMUX_HDR;
		f->len = plen;
	} else if (f->type == VMUX_CREDIT) {
		f->credit = get32(buf + VMUX_HDR);
		if (f->credit == 0 || f->credit > VMUX_WINDOW)
			return bad(why, "CREDIT out of range");
	}
	return (long)(VMUX_HDR + plen);
}
