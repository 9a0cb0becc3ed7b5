/* api_e2b_multipart.h - a streaming multipart/form-data parser (RFC 7578 over RFC 2046 §5.1) for E2B's POST /files (adr/0061): bytes in as they arrive, parts out through callbacks, memory bounded by its own hold buffer. Pure: no I/O, no allocation after mp_new. */
#ifndef API_E2B_MULTIPART_H
#define API_E2B_MULTIPART_H

#include <stddef.h>

#include "sbx_err.h"

/* Bytes of one part's header block at most (then bad_request). */
#define MP_HEADERS_MAX 8192
/* Bytes of a boundary (RFC 2046 §5.1.1: 1..70). */
#define MP_BOUNDARY_MAX 70

/*
 * What the parser calls, in order, for each part: part once its headers
 * are read (name: the Content-Disposition's name, filename: its filename
 * with the %22 %0D %0A escapes of browsers and undici undone; "" when
 * absent; both NUL-terminated, borrowed for the call), data for its bytes
 * (0..n calls, len > 0), end when its closing delimiter came. Each returns
 * 0 to go on, or -1 with err set to stop the parse (mp_feed then returns
 * -1 with that err).
 */
struct mp_callbacks {
	int (*part)(void *arg, const char *name, const char *filename, struct sbx_err *err);
	int (*data)(void *arg, const unsigned char *buf, size_t len, struct sbx_err *err);
	int (*end)(void *arg, struct sbx_err *err);
	void *arg;
};

struct mp_parser;

/*
 * A parser for a body whose Content-Type is content_type (untrusted):
 * multipart/form-data with a boundary parameter (token or quoted,
 * 1..MP_BOUNDARY_MAX bytes). cb is copied. Returns the parser (free with
 * mp_free), or NULL with err: bad_request (not multipart/form-data, no or
 * a bad boundary), internal (out of memory).
 */
struct mp_parser *mp_new(const char *content_type, const struct mp_callbacks *cb,
    struct sbx_err *err);
void mp_free(struct mp_parser *p);

/*
 * Feeds len more bytes of the body. Returns 0, or -1 with err: bad_request
 * (a part's headers over MP_HEADERS_MAX, holding a NUL, or without
 * Content-Disposition: form-data, bytes after the boundary that are
 * neither "--" nor CRLF), or
 * a callback's error. After -1 the parser takes nothing more.
 */
int mp_feed(struct mp_parser *p, const unsigned char *buf, size_t len, struct sbx_err *err);

/* The body ended: 0 when the closing delimiter came, else -1 with err
 * bad_request ("the multipart body ended early"). */
int mp_finish(struct mp_parser *p, struct sbx_err *err);

#endif
