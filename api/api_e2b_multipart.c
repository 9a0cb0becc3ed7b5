/* api_e2b_multipart.c - the streaming multipart/form-data parser of api_e2b_multipart.h: a state machine over one hold buffer. Pure: touches only its own state and its callbacks. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_e2b_multipart.h"
#include "sbx_proto.h"

/* The hold buffer: a part's headers and their blank line, or a delimiter's
 * worth of body not yet known to be data, plus room to read into. */
#define HOLD_CAP (MP_HEADERS_MAX + 4 + 4096)

enum mp_state { MP_PREAMBLE, MP_AFTER, MP_HEADERS, MP_BODY, MP_DONE, MP_FAILED };

struct mp_parser {
	struct mp_callbacks cb;
	enum mp_state st;
	char delim[4 + MP_BOUNDARY_MAX];   /* "\r\n--" boundary */
	size_t dlen;
	size_t hlen;
	unsigned char hold[HOLD_CAP];
	char name[256];
	char filename[MP_HEADERS_MAX + 1];
	char val[MP_HEADERS_MAX + 1];      /* a parameter's value being read */
};

static void
skip_ws(const char **s, const char *end)
{
	while (*s < end && (**s == ' ' || **s == '\t'))
		(*s)++;
}

/*
 * The next ";"-separated parameter of [*s, end): its key into key (kcap)
 * and its value, token or quoted-string (backslash escapes undone), into
 * val (vcap). Returns 1 with *s past it, 0 at the end, -1 malformed or too
 * long.
 */
static int
next_param(const char **s, const char *end, char *key, size_t kcap, char *val, size_t vcap)
{
	size_t k = 0, v = 0;

	skip_ws(s, end);
	while (*s < end && **s == ';') {
		(*s)++;
		skip_ws(s, end);
	}
	if (*s >= end)
		return 0;
	while (*s < end && **s != '=' && **s != ';' && **s != ' ' && **s != '\t') {
		if (k + 1 >= kcap)
			return -1;
		key[k++] = **s;
		(*s)++;
	}
	key[k] = '\0';
	skip_ws(s, end);
	if (*s >= end || **s != '=')
		return k > 0 ? (val[0] = '\0', 1) : -1;
	(*s)++;
	skip_ws(s, end);
	if (*s < end && **s == '"') {
		(*s)++;
		for (;;) {
			if (*s >= end)
				return -1;
			if (**s == '"') {
				(*s)++;
				break;
			}
			if (**s == '\\' && *s + 1 < end)
				(*s)++;
			if (v + 1 >= vcap)
				return -1;
			val[v++] = **s;
			(*s)++;
		}
	} else
		while (*s < end && **s != ';' && **s != ' ' && **s != '\t') {
			if (v + 1 >= vcap)
				return -1;
			val[v++] = **s;
			(*s)++;
		}
	val[v] = '\0';
	return 1;
}

struct mp_parser *
mp_new(const char *ct, const struct mp_callbacks *cb, struct sbx_err *err)
{
	static const char type[] = "multipart/form-data";
	struct mp_parser *p;
	char key[32], val[MP_BOUNDARY_MAX + 2];
	const char *s, *end;
	int r;

	if (ct == NULL || strncasecmp(ct, type, sizeof(type) - 1) != 0 ||
	    (ct[sizeof(type) - 1] != '\0' && ct[sizeof(type) - 1] != ';' &&
	    ct[sizeof(type) - 1] != ' '))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The body must be "
		    "multipart/form-data or application/octet-stream."), NULL;
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return sbx_err_oom(err), NULL;
	p->cb = *cb;
	s = ct + sizeof(type) - 1;
	end = ct + strlen(ct);
	while ((r = next_param(&s, end, key, sizeof(key), val, sizeof(val))) == 1)
		if (strcasecmp(key, "boundary") == 0 && p->dlen == 0) {
			size_t n = strlen(val);

			if (n == 0 || n > MP_BOUNDARY_MAX)
				break;
			memcpy(p->delim, "\r\n--", 4);
			memcpy(p->delim + 4, val, n);
			p->dlen = 4 + n;
		}
	if (p->dlen == 0) {
		free(p);
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The multipart body "
		    "needs a boundary of 1 to %d bytes in its Content-Type.",
		    MP_BOUNDARY_MAX), NULL;
	}
	/* The first delimiter has no CRLF before it: pretend one came. */
	memcpy(p->hold, "\r\n", 2);
	p->hlen = 2;
	p->st = MP_PREAMBLE;
	return p;
}

void
mp_free(struct mp_parser *p)
{
	free(p);
}

static void
consume(struct mp_parser *p, size_t n)
{
	memmove(p->hold, p->hold + n, p->hlen - n);
	p->hlen -= n;
}

/* The filename's %22 %0D %0A (what undici and browsers escape) undone. */
static void
unescape(char *s)
{
	char *o = s;

	for (; *s != '\0'; s++) {
		if (s[0] == '%' && s[1] == '2' && s[2] == '2') {
			*o++ = '"';
			s += 2;
		} else if (s[0] == '%' && s[1] == '0' && (s[2] == 'D' || s[2] == 'd')) {
			*o++ = '\r';
			s += 2;
		} else if (s[0] == '%' && s[1] == '0' && (s[2] == 'A' || s[2] == 'a')) {
			*o++ = '\n';
			s += 2;
		} else
			*o++ = *s;
	}
	*o = '\0';
}

/* A part's header block [h, h+n): its Content-Disposition into name, filename. */
static int
part_headers(struct mp_parser *p, const char *h, size_t n, struct sbx_err *err)
{
	static const char cd[] = "content-disposition:";
	const char *line = h, *end = h + n, *eol, *s;
	char key[32];
	int seen = 0, r;

	p->name[0] = p->filename[0] = '\0';
	/* Names are handed on NUL-terminated: a NUL inside would cut a
	 * filename short and write another file than the one named. */
	if (memchr(h, '\0', n) != NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A part's headers "
		    "hold a NUL byte.");
	while (line < end) {
		eol = line;
		while (eol + 1 < end && !(eol[0] == '\r' && eol[1] == '\n'))
			eol++;
		if (eol + 1 >= end)
			eol = end;
		if ((size_t)(eol - line) >= sizeof(cd) - 1 &&
		    strncasecmp(line, cd, sizeof(cd) - 1) == 0 && !seen) {
			s = line + sizeof(cd) - 1;
			skip_ws(&s, eol);
			if ((size_t)(eol - s) < 9 || strncasecmp(s, "form-data", 9) != 0)
				break;
			s += 9;
			seen = 1;
			while ((r = next_param(&s, eol, key, sizeof(key), p->val,
			    sizeof(p->val))) == 1) {
				size_t k = strlen(p->val);

				if (strcasecmp(key, "name") == 0) {
					if (k >= sizeof(p->name))
						k = sizeof(p->name) - 1;
					memcpy(p->name, p->val, k);
					p->name[k] = '\0';
				} else if (strcasecmp(key, "filename") == 0)
					memcpy(p->filename, p->val, k + 1);
			}
			if (r == -1)
				return sbx_err_set(err, SBX_E_BAD_REQUEST, "A part's "
				    "Content-Disposition does not parse.");
			unescape(p->filename);
		}
		line = eol + 2;
	}
	if (!seen)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A part has no "
		    "Content-Disposition: form-data header.");
	return 0;
}

static int
fail(struct mp_parser *p)
{
	p->st = MP_FAILED;
	return -1;
}

static int
process(struct mp_parser *p, struct sbx_err *err)
{
	unsigned char *at;
	size_t pos;

	for (;;) {
		switch (p->st) {
		case MP_PREAMBLE:
		case MP_BODY:
			at = memmem(p->hold, p->hlen, p->delim, p->dlen);
			if (at != NULL) {
				pos = (size_t)(at - p->hold);
				if (p->st == MP_BODY) {
					if (pos > 0 && p->cb.data(p->cb.arg, p->hold, pos,
					    err) == -1)
						return fail(p);
					if (p->cb.end(p->cb.arg, err) == -1)
						return fail(p);
				}
				consume(p, pos + p->dlen);
				p->st = MP_AFTER;
				continue;
			}
			if (p->hlen >= p->dlen) {
				pos = p->hlen - (p->dlen - 1);
				if (p->st == MP_BODY && p->cb.data(p->cb.arg, p->hold, pos,
				    err) == -1)
					return fail(p);
				consume(p, pos);
			}
			return 0;
		case MP_AFTER:
			if (p->hlen < 2)
				return 0;
			if (p->hold[0] == '-' && p->hold[1] == '-') {
				p->st = MP_DONE;
				p->hlen = 0;
				return 0;
			}
			if (p->hold[0] == '\r' && p->hold[1] == '\n') {
				consume(p, 2);
				p->st = MP_HEADERS;
				continue;
			}
			if (p->hold[0] == ' ' || p->hold[0] == '\t') {
				consume(p, 1);
				continue;
			}
			sbx_err_set(err, SBX_E_BAD_REQUEST, "The multipart body has "
			    "bytes after a boundary that are neither CRLF nor --.");
			return fail(p);
		case MP_HEADERS:
			if (p->hlen >= 2 && p->hold[0] == '\r' && p->hold[1] == '\n')
				at = p->hold;   /* no header at all */
			else if ((at = memmem(p->hold, p->hlen, "\r\n\r\n", 4)) != NULL)
				at += 2;
			/* The bound holds however the bytes were split: with
			 * MAX + 2 held and no blank line, none can end in time. */
			if ((at == NULL && p->hlen >= MP_HEADERS_MAX + 2) ||
			    (at != NULL && (size_t)(at - p->hold) > MP_HEADERS_MAX)) {
				sbx_err_set(err, SBX_E_BAD_REQUEST, "A part's "
				    "headers are longer than %d bytes.", MP_HEADERS_MAX);
				return fail(p);
			}
			if (at == NULL)
				return 0;
			pos = (size_t)(at - p->hold);
			if (part_headers(p, (const char *)p->hold, pos, err) == -1 ||
			    p->cb.part(p->cb.arg, p->name, p->filename, err) == -1)
				return fail(p);
			consume(p, pos + 2);
			p->st = MP_BODY;
			continue;
		case MP_DONE:
			p->hlen = 0;
			return 0;
		case MP_FAILED:
		default:
			sbx_err_set(err, SBX_E_BAD_REQUEST, "The multipart body was "
			    "refused already.");
			return -1;
		}
	}
}

int
mp_feed(struct mp_parser *p, const unsigned char *buf, size_t len, struct sbx_err *err)
{
	size_t take;

	while (len > 0) {
		if (p->st == MP_FAILED)
			return process(p, err);
		if (p->st == MP_DONE)
			return 0;   /* the epilogue: ignored */
		take = HOLD_CAP - p->hlen;
		if (take > len)
			take = len;
		memcpy(p->hold + p->hlen, buf, take);
		p->hlen += take;
		buf += take;
		len -= take;
		if (process(p, err) == -1)
			return -1;
	}
	return 0;
}

int
mp_finish(struct mp_parser *p, struct sbx_err *err)
{
	if (p->st == MP_DONE)
		return 0;
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "The multipart body ended "
	    "before its closing boundary.");
}
