/* sbx_ws_fast.c - binary WebSocket payloads unmasked and masked a word at a time beside libwslay (sbx_ws_fast.h, adr/0063); touches only the buffers it is given. */
#include <string.h>

#include <event2/buffer.h>

#include "sbx_ws_fast.h"

enum { AT_HEAD, PASS, TAKE };

/* One frame header (RFC 6455 §5.2). */
struct head {
	int fin, rsv, opcode, masked, minimal;
	uint64_t len;
	unsigned char key[4];
};

void
sbx_ws_fast_init(struct sbx_ws_fast *f)
{
	memset(f, 0, sizeof(*f));
	f->state = AT_HEAD;
	f->msg = -1;
}

void
sbx_ws_fast_mask(unsigned char *dst, const unsigned char *src, size_t n,
    const unsigned char key[4], uint64_t off)
{
	unsigned char k[8];
	uint64_t w, k8;
	size_t i;

	for (i = 0; i < 8; i++)
		k[i] = key[(off + i) & 3];
	memcpy(&k8, k, 8);
	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&w, src + i, 8);
		w ^= k8;
		memcpy(dst + i, &w, 8);
	}
	for (; i < n; i++)
		dst[i] = src[i] ^ k[i & 7];
}

static uint64_t
sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The header at the front of h (have bytes): its length, or 0 when it is
 * not whole yet. */
static size_t
parse_head(const unsigned char *h, size_t have, struct head *d)
{
	size_t need = 2, i;
	unsigned len7;

	if (have < 2)
		return 0;
	d->fin = h[0] >> 7;
	d->rsv = (h[0] >> 4) & 7;
	d->opcode = h[0] & 0x0f;
	d->masked = h[1] >> 7;
	len7 = h[1] & 0x7f;
	need += len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
	need += d->masked ? 4 : 0;
	if (have < need)
		return 0;
	d->len = len7;
	d->minimal = 1;
	if (len7 == 126) {
		d->len = (uint64_t)h[2] << 8 | h[3];
		d->minimal = d->len >= 126;
	} else if (len7 == 127) {
		for (d->len = 0, i = 0; i < 8; i++)
			d->len = d->len << 8 | h[2 + i];
		d->minimal = d->len >= 65536 && !(d->len >> 63);
	}
	if (d->masked)
		memcpy(d->key, h + need - 4, 4);
	return need;
}

/* Decides what happens to the frame whose header is d (hl bytes), and
 * follows the data message it belongs to. */
static void
at_head(struct sbx_ws_fast *f, const struct head *d, size_t hl, uint64_t cap,
    struct evbuffer *in)
{
	int take;
	uint64_t before = d->opcode == 2 ? 0 : f->msg_len;

	take = d->masked && d->rsv == 0 && d->minimal && d->len > 0 &&
	    ((d->opcode == 2 && f->msg == -1) ||
	    (d->opcode == 0 && f->msg == 1)) &&
	    d->len <= cap && before <= cap - d->len;
	/* The message, as libwslay will see it (a frame out of order fails
	 * the connection there: what is followed after it does not matter). */
	if ((d->opcode == 1 || d->opcode == 2) && f->msg == -1) {
		f->msg = d->opcode == 2;
		f->msg_len = d->len;
	} else if (d->opcode == 0 && f->msg != -1)
		f->msg_len = sat_add(f->msg_len, d->len);
	if (d->opcode < 8 && d->fin) {
		f->msg = -1;
		f->msg_len = 0;
	}
	if (!take) {
		f->state = PASS;
		f->left = sat_add(hl, d->len);
		return;
	}
	evbuffer_drain(in, hl);
	f->state = TAKE;
	f->left = d->len;
	f->off = 0;
	memcpy(f->key, d->key, 4);
	/* the same first byte, masked, length 0, the same key */
	f->hdr[0] = (unsigned char)(d->fin << 7 | d->opcode);
	f->hdr[1] = 0x80;
	memcpy(f->hdr + 2, d->key, 4);
}

/* Unmasks what `in` has of the taken payload into pending. */
static int
take(struct sbx_ws_fast *f, struct evbuffer *in, struct evbuffer *pending)
{
	struct evbuffer_iovec src, dst;
	size_t n;

	while (f->left > 0 && evbuffer_peek(in, -1, NULL, &src, 1) > 0 &&
	    src.iov_len > 0) {
		n = src.iov_len < f->left ? src.iov_len : (size_t)f->left;
		if (evbuffer_reserve_space(pending, (ev_ssize_t)n, &dst, 1) < 1)
			return -1;
		sbx_ws_fast_mask(dst.iov_base, src.iov_base, n, f->key, f->off);
		dst.iov_len = n;
		if (evbuffer_commit_space(pending, &dst, 1) != 0)
			return -1;
		evbuffer_drain(in, n);
		f->off += n;
		f->left -= n;
	}
	return 0;
}

long
sbx_ws_fast_recv(struct sbx_ws_fast *f, struct evbuffer *in,
    struct evbuffer *pending, uint64_t cap, unsigned char *buf, size_t len)
{
	unsigned char h[14];
	struct head d;
	size_t n, hl;

	for (;;) {
		if (f->hdr_len > 0) {
			n = f->hdr_len - f->hdr_off;
			if (n > len)
				n = len;
			memcpy(buf, f->hdr + f->hdr_off, n);
			f->hdr_off += n;
			if (f->hdr_off == f->hdr_len)
				f->hdr_len = f->hdr_off = 0;
			return (long)n;
		}
		if (f->state == PASS) {
			n = evbuffer_get_length(in);
			if (n > len)
				n = len;
			if (n > f->left)
				n = (size_t)f->left;
			if (n == 0)
				return 0;
			evbuffer_remove(in, buf, n);
			f->left -= n;
			if (f->left == 0)
				f->state = AT_HEAD;
			return (long)n;
		}
		if (f->state == TAKE) {
			if (take(f, in, pending) == -1)
				return -1;
			if (f->left > 0)
				return 0;
			f->state = AT_HEAD;
			f->hdr_len = sizeof(f->hdr);
			f->hdr_off = 0;
			f->taken = 1;
			continue;
		}
		n = evbuffer_copyout(in, h, sizeof(h));
		if ((hl = parse_head(h, n > 0 ? (size_t)n : 0, &d)) == 0)
			return 0;
		at_head(f, &d, hl, cap, in);
	}
}

int
sbx_ws_fast_taken(struct sbx_ws_fast *f, uint64_t payload_length)
{
	if (!f->taken || payload_length != 0)
		return 0;
	f->taken = 0;
	return 1;
}

int
sbx_ws_fast_client_frame(struct evbuffer *out, const unsigned char key[4],
    const void *a, size_t an, const void *b, size_t bn)
{
	struct evbuffer_iovec v;
	unsigned char h[14], *p;
	uint64_t n = (uint64_t)an + bn;
	size_t hl = 2;
	int i;

	h[0] = 0x82;
	if (n < 126)
		h[1] = (unsigned char)(0x80 | n);
	else if (n < 65536) {
		h[1] = 0x80 | 126;
		h[2] = (unsigned char)(n >> 8);
		h[3] = (unsigned char)n;
		hl = 4;
	} else {
		h[1] = 0x80 | 127;
		for (i = 0; i < 8; i++)
			h[2 + i] = (unsigned char)(n >> (56 - 8 * i));
		hl = 10;
	}
	memcpy(h + hl, key, 4);
	hl += 4;
	if (evbuffer_reserve_space(out, (ev_ssize_t)(hl + n), &v, 1) < 1)
		return -1;
	p = v.iov_base;
	memcpy(p, h, hl);
	if (an > 0)
		sbx_ws_fast_mask(p + hl, a, an, key, 0);
	if (bn > 0)
		sbx_ws_fast_mask(p + hl + an, b, bn, key, an);
	v.iov_len = hl + n;
	return evbuffer_commit_space(out, &v, 1) == 0 ? 0 : -1;
}
