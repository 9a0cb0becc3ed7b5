/*
 * fuzz_multipart.c - libFuzzer target: the streaming multipart/form-data
 * parser of E2B's POST /files (api/api_e2b_multipart.c, adr/0061).
 *
 * Input: byte 0 and 1 choose a split step (1..256) and a boundary (one of
 * four, the last one read from the input up to a NUL); the rest is the body.
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - the same calls and bytes (parts, names, filenames, data, ends) and the
 *    same verdict whether the body is fed at once or in pieces of the step;
 *  - no data call is empty or larger than the parser's hold; no part's data
 *    holds the delimiter "\r\n--BOUNDARY";
 *  - part and end alternate: end only after part, part never twice without
 *    an end between; a finish that succeeds saw every part ended;
 *  - names and filenames are NUL-terminated within the header bound.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api_e2b_multipart.h"
#include "fuzz.h"

struct rec {
	unsigned char *log;   /* every call, serialized */
	size_t len, cap;
	int open;             /* a part began and did not end */
	int parts;
	const char *delim;
	size_t dlen;
	unsigned char tail[MP_BOUNDARY_MAX + 8]; /* last bytes of the part's data */
	size_t tlen;
	uint64_t plen;        /* data bytes of the open part */
};

static void
put(struct rec *r, const void *p, size_t n)
{
	if (r->len + n > r->cap) {
		size_t c = (r->len + n) * 2 + 64;

		r->log = realloc(r->log, c);
		FUZZ_ASSERT(r->log != NULL);
		r->cap = c;
	}
	memcpy(r->log + r->len, p, n);
	r->len += n;
}

static int
c_part(void *arg, const char *name, const char *filename, struct sbx_err *err)
{
	struct rec *r = arg;

	(void)err;
	FUZZ_ASSERT(!r->open);
	FUZZ_ASSERT(strlen(name) < 256 && strlen(filename) <= MP_HEADERS_MAX);
	r->open = 1;
	r->parts++;
	r->tlen = 0;
	r->plen = 0;
	put(r, "P", 1);
	put(r, name, strlen(name) + 1);
	put(r, filename, strlen(filename) + 1);
	return 0;
}

static int
c_data(void *arg, const unsigned char *buf, size_t len, struct sbx_err *err)
{
	struct rec *r = arg;
	unsigned char *w;
	size_t keep;

	(void)err;
	FUZZ_ASSERT(r->open);
	FUZZ_ASSERT(len > 0 && len <= MP_HEADERS_MAX + 4 + 4096);
	/* The delimiter never inside the data, also across calls. */
	w = malloc(r->tlen + len);
	FUZZ_ASSERT(w != NULL);
	memcpy(w, r->tail, r->tlen);
	memcpy(w + r->tlen, buf, len);
	FUZZ_ASSERT(memmem(w, r->tlen + len, r->delim, r->dlen) == NULL);
	keep = r->tlen + len < r->dlen ? r->tlen + len : r->dlen;
	memcpy(r->tail, w + r->tlen + len - keep, keep);
	r->tlen = keep;
	free(w);
	/* Data bytes unframed: the log is the same however they were split. */
	put(r, buf, len);
	r->plen += len;
	return 0;
}

static int
c_end(void *arg, struct sbx_err *err)
{
	struct rec *r = arg;

	(void)err;
	FUZZ_ASSERT(r->open);
	r->open = 0;
	put(r, "E", 1);
	put(r, &r->plen, sizeof(r->plen));
	return 0;
}

static int
run(const char *ct, const unsigned char *body, size_t n, size_t step, struct rec *r,
    const char *delim, size_t dlen)
{
	const struct mp_callbacks cb = { c_part, c_data, c_end, r };
	struct mp_parser *p;
	struct sbx_err err;
	size_t off = 0, k;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	r->delim = delim;
	r->dlen = dlen;
	if ((p = mp_new(ct, &cb, &err)) == NULL)
		return -2;
	while (off < n && rc == 0) {
		k = step == 0 || n - off < step ? n - off : step;
		rc = mp_feed(p, body + off, k, &err);
		off += k;
	}
	if (rc == 0) {
		rc = mp_finish(p, &err);
		if (rc == 0)
			FUZZ_ASSERT(!r->open);
	}
	if (rc != 0)
		FUZZ_ASSERT(err.code[0] != '\0');
	mp_free(p);
	return rc;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static const char *bounds[] = { "b", "----formdata-undici-0123456789", "x y" };
	char ct[128], delim[4 + MP_BOUNDARY_MAX + 1], own[MP_BOUNDARY_MAX + 1];
	const unsigned char *body;
	const char *bd;
	struct rec whole, split;
	size_t n, step, dlen;
	int r1, r2;

	if (size < 2)
		return 0;
	step = (size_t)data[0] + 1;
	if (data[1] % 4 < 3) {
		bd = bounds[data[1] % 4];
		body = data + 2;
		n = size - 2;
	} else {
		const unsigned char *z = memchr(data + 2, 0, size - 2);
		size_t bl = z != NULL ? (size_t)(z - (data + 2)) : 0;

		if (z == NULL || bl == 0 || bl > MP_BOUNDARY_MAX || memchr(data + 2, '"', bl) ||
		    memchr(data + 2, '\\', bl))
			return 0;
		memcpy(own, data + 2, bl);
		own[bl] = '\0';
		bd = own;
		body = z + 1;
		n = size - (size_t)(body - data);
	}
	snprintf(ct, sizeof(ct), "multipart/form-data; boundary=\"%s\"", bd);
	dlen = (size_t)snprintf(delim, sizeof(delim), "\r\n--%s", bd);
	r1 = run(ct, body, n, 0, &whole, delim, dlen);
	r2 = run(ct, body, n, step, &split, delim, dlen);
	if (r1 == -2) {
		FUZZ_ASSERT(r2 == -2);
		return 0;
	}
	FUZZ_ASSERT(r1 == r2);
	if (r1 == 0)
		FUZZ_ASSERT(whole.len == split.len &&
		    (whole.len == 0 || memcmp(whole.log, split.log, whole.len) == 0));
	free(whole.log);
	free(split.log);
	return 0;
}
