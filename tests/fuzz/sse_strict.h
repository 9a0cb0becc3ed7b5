/* sse_strict.h - a strict Server-Sent Events parser for the fuzz targets, written from WHATWG HTML §9.2.6 "Interpreting an event stream". */
#ifndef SBX_SSE_STRICT_H
#define SBX_SSE_STRICT_H

/*
 * Included by the targets that compare against it (static functions only).
 * sse_parse(p, bytes, n) interprets a whole stream: one leading BOM skipped,
 * lines end at CRLF, CR or LF, comments, fields event/data/id (retry and
 * unknown ones ignored), a blank line dispatches; an event not ended by a
 * blank line is discarded at end of file. p->dispatched counts the events,
 * the first SSE_KEEP of which are kept in p->ev (owned; sse_free).
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define SSE_KEEP 64

struct sse_event {
	char *type;
	unsigned char *data;
	size_t len;
	char *id;
};

struct sse {
	unsigned char *data;   /* the data buffer */
	size_t len, cap;
	char *type;            /* the event type buffer */
	size_t type_len;       /* its bytes (it may hold a NUL) */
	char *last_id;         /* the last event ID buffer */
	struct sse_event ev[SSE_KEEP];
	size_t n, dispatched;
};

static char *
dupn(const unsigned char *s, size_t n)
{
	char *d = malloc(n + 1);

	FUZZ_ASSERT(d != NULL);
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

static void
data_append(struct sse *p, const unsigned char *s, size_t n)
{
	if (p->len + n + 1 > p->cap) {
		p->cap = (p->len + n + 1) * 2;
		p->data = realloc(p->data, p->cap);
		FUZZ_ASSERT(p->data != NULL);
	}
	memcpy(p->data + p->len, s, n);
	p->len += n;
}

/* "If the line is empty (a blank line): Dispatch the event." */
static void
dispatch(struct sse *p)
{
	struct sse_event *e;

	/* 1. set the last event ID string of the event source (kept). */
	/* 2. "If the data buffer is an empty string, set the data buffer and
	 * the event type buffer to the empty string and return." */
	if (p->len == 0) {
		free(p->type);
		p->type = NULL;
		return;
	}
	/* 3. "If the data buffer's last character is a U+000A LINE FEED (LF)
	 * character, then remove the last character from the data buffer." */
	if (p->data[p->len - 1] == '\n')
		p->len--;
	p->dispatched++;
	if (p->n < sizeof(p->ev) / sizeof(p->ev[0])) {
		e = &p->ev[p->n++];
		/* 5. type: the event type buffer, or "message" when empty */
		e->type = p->type != NULL && p->type_len > 0 ?
		    dupn((const unsigned char *)p->type, p->type_len) :
		    strdup("message");
		e->data = (unsigned char *)dupn(p->data, p->len);
		e->len = p->len;
		e->id = strdup(p->last_id != NULL ? p->last_id : "");
	}
	p->len = 0;
	free(p->type);
	p->type = NULL;
}

static void
field(struct sse *p, const unsigned char *name, size_t nlen,
    const unsigned char *value, size_t vlen)
{
	if (nlen == 5 && memcmp(name, "event", 5) == 0) {
		free(p->type);
		p->type = dupn(value, vlen);
		p->type_len = vlen;
	} else if (nlen == 4 && memcmp(name, "data", 4) == 0) {
		data_append(p, value, vlen);
		data_append(p, (const unsigned char *)"\n", 1);
	} else if (nlen == 2 && memcmp(name, "id", 2) == 0) {
		/* "If the field value does not contain U+0000 NULL, then set
		 * the last event ID buffer to the field value." */
		if (memchr(value, '\0', vlen) == NULL) {
			free(p->last_id);
			p->last_id = dupn(value, vlen);
		}
	}
	/* "retry" changes the reconnection time only; others are ignored */
}

static void
line(struct sse *p, const unsigned char *l, size_t n)
{
	const unsigned char *colon;
	const unsigned char *v;
	size_t vlen;

	if (n == 0) {
		dispatch(p);
		return;
	}
	if (l[0] == ':')
		return;  /* comment */
	colon = memchr(l, ':', n);
	if (colon == NULL) {
		field(p, l, n, (const unsigned char *)"", 0);
		return;
	}
	v = colon + 1;
	vlen = n - (size_t)(v - l);
	if (vlen > 0 && v[0] == ' ') {
		v++;
		vlen--;
	}
	field(p, l, (size_t)(colon - l), v, vlen);
}

/* The whole stream at once; an event not ended by a blank line is dropped
 * at end of file ("Once the end of the file is reached, any pending data
 * must be discarded"). */
static void
sse_parse(struct sse *p, const unsigned char *s, size_t n)
{
	size_t i = 0, start;

	memset(p, 0, sizeof(*p));
	/* one leading BOM is skipped */
	if (n >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0)
		i = 3;
	for (start = i; i < n; i++) {
		if (s[i] != '\r' && s[i] != '\n')
			continue;
		line(p, s + start, i - start);
		if (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n')
			i++;
		start = i + 1;
	}
}

static void
sse_free(struct sse *p)
{
	size_t i;

	for (i = 0; i < p->n; i++) {
		free(p->ev[i].type);
		free(p->ev[i].data);
		free(p->ev[i].id);
	}
	free(p->data);
	free(p->type);
	free(p->last_id);
}

#endif
