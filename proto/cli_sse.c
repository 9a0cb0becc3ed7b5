/* cli_sse.c - incremental Server-Sent Events parser of the sbx CLI (WHATWG HTML §9.2.6). */
#include <stdlib.h>
#include <string.h>

#include "cli_sse.h"
#include "sbx_proto.h"

/* A growable byte buffer; p is NUL-terminated when not NULL. */
struct cli_buf {
	char *p;
	size_t len, cap;
};

struct cli_sse {
	size_t max;
	cli_sse_cb cb;
	void *arg;
	struct cli_buf line;  /* the line being read, without its end */
	struct cli_buf data;  /* data buffer of the event being built */
	struct cli_buf event; /* event type buffer */
	struct cli_buf id;    /* last event id */
	int has_data;         /* at least one data field since the last dispatch */
	int after_cr;         /* the last byte seen was CR: an LF now is its pair */
	int bom;              /* bytes of the BOM (EF BB BF) matched so far; -1 done */
	int stopped;
	struct sbx_err err;   /* why it stopped */
};

static int
buf_add(struct cli_buf *b, const char *s, size_t n)
{
	size_t ncap;
	char *np;

	if (b->len + n + 1 > b->cap) {
		ncap = b->cap != 0 ? b->cap : 256;
		while (ncap < b->len + n + 1)
			ncap *= 2;
		if ((np = realloc(b->p, ncap)) == NULL)
			return -1;
		b->p = np;
		b->cap = ncap;
	}
	if (n > 0)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

static int
buf_set(struct cli_buf *b, const char *s, size_t n)
{
	b->len = 0;
	return buf_add(b, s, n);
}

static const char *
buf_str(const struct cli_buf *b)
{
	return b->p != NULL ? b->p : "";
}

struct cli_sse *
cli_sse_new(size_t max, cli_sse_cb cb, void *arg)
{
	struct cli_sse *p;

	if (cb == NULL || (p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	p->max = max != 0 ? max : CLI_SSE_MAX_DEFAULT;
	p->cb = cb;
	p->arg = arg;
	return p;
}

void
cli_sse_free(struct cli_sse *p)
{
	if (p == NULL)
		return;
	free(p->line.p);
	free(p->data.p);
	free(p->event.p);
	free(p->id.p);
	free(p);
}

static int
stop(struct cli_sse *p, const char *code, const char *msg)
{
	p->stopped = 1;
	return sbx_err_set(&p->err, code, "%s", msg);
}

static int
dispatch(struct cli_sse *p)
{
	int r;

	if (!p->has_data) {
		p->event.len = 0;
		return 0;
	}
	/* The data buffer ends with the "\n" of its last data line: drop it. */
	p->data.len--;
	p->data.p[p->data.len] = '\0';
	r = p->cb(p->arg, p->event.len > 0 ? buf_str(&p->event) : "message",
	    p->data.p, p->data.len, buf_str(&p->id));
	p->data.len = 0;
	p->event.len = 0;
	p->has_data = 0;
	if (r != 0)
		return stop(p, SBX_E_CANCELLED, "The event consumer stopped.");
	return 0;
}

/* Interprets one complete line (p->line, without its end). */
static int
process_line(struct cli_sse *p)
{
	const char *l = buf_str(&p->line), *colon, *val;
	size_t n = p->line.len, flen, vlen;

	if (n == 0)
		return dispatch(p);
	if (l[0] == ':')
		return 0;
	if ((colon = memchr(l, ':', n)) != NULL) {
		flen = (size_t)(colon - l);
		val = colon + 1;
		vlen = n - flen - 1;
		if (vlen > 0 && val[0] == ' ') {
			val++;
			vlen--;
		}
	} else {
		flen = n;
		val = "";
		vlen = 0;
	}
	if (flen == 5 && memcmp(l, "event", 5) == 0) {
		if (buf_set(&p->event, val, vlen) == -1)
			return stop(p, SBX_E_INTERNAL, SBX_MSG_OOM);
	} else if (flen == 4 && memcmp(l, "data", 4) == 0) {
		if (p->data.len + vlen + 1 > p->max)
			return stop(p, SBX_E_BAD_REQUEST, SBX_PROTOCOL_ERROR
			    ": event data too large");
		if (buf_add(&p->data, val, vlen) == -1 ||
		    buf_add(&p->data, "\n", 1) == -1)
			return stop(p, SBX_E_INTERNAL, SBX_MSG_OOM);
		p->has_data = 1;
	} else if (flen == 2 && memcmp(l, "id", 2) == 0) {
		if (memchr(val, '\0', vlen) == NULL &&
		    buf_set(&p->id, val, vlen) == -1)
			return stop(p, SBX_E_INTERNAL, SBX_MSG_OOM);
	}
	/* "retry" and unknown fields: nothing to do for a CLI. */
	return 0;
}

static int
line_add(struct cli_sse *p, const char *s, size_t n)
{
	if (p->line.len + n > p->max)
		return stop(p, SBX_E_BAD_REQUEST, SBX_PROTOCOL_ERROR
		    ": line too long");
	if (buf_add(&p->line, s, n) == -1)
		return stop(p, SBX_E_INTERNAL, SBX_MSG_OOM);
	return 0;
}

int
cli_sse_feed(struct cli_sse *p, const char *buf, size_t len,
    struct sbx_err *err)
{
	static const unsigned char bom[3] = { 0xef, 0xbb, 0xbf };
	size_t i = 0, start;

	if (p->stopped)
		goto fail;
	/* A BOM may arrive split over feeds: hold its bytes until decided. */
	while (p->bom >= 0 && i < len) {
		if ((unsigned char)buf[i] == bom[p->bom]) {
			i++;
			if (++p->bom == 3)
				p->bom = -1;
			continue;
		}
		if (p->bom > 0 && line_add(p, (const char *)bom,
		    (size_t)p->bom) == -1)
			goto fail;
		p->bom = -1;
	}
	while (i < len) {
		if (p->after_cr) {
			p->after_cr = 0;
			if (buf[i] == '\n') {
				i++;
				continue;
			}
		}
		start = i;
		while (i < len && buf[i] != '\n' && buf[i] != '\r')
			i++;
		if (line_add(p, buf + start, i - start) == -1)
			goto fail;
		if (i == len)
			break;
		p->after_cr = buf[i] == '\r';
		i++;
		if (process_line(p) == -1)
			goto fail;
		p->line.len = 0;
	}
	return 0;
fail:
	if (err != NULL)
		*err = p->err;
	return -1;
}

int
cli_sse_pending(const struct cli_sse *p)
{
	return p->line.len > 0 || p->has_data || p->bom > 0;
}

char *
cli_sse_ndjson_line(const char *event, const char *data, size_t len,
    size_t *outlen)
{
	size_t el = strlen(event), i, n;
	char *out, *o;
	int empty;

	if (el == 0 || el > 32 || event[0] < 'a' || event[0] > 'z')
		return NULL;
	for (i = 1; i < el; i++)
		if (!((event[i] >= 'a' && event[i] <= 'z') ||
		    (event[i] >= '0' && event[i] <= '9') || event[i] == '_'))
			return NULL;
	if (len < 2 || data[0] != '{' || data[len - 1] != '}')
		return NULL;
	for (i = 1; i < len - 1 && (data[i] == ' ' || data[i] == '\t' ||
	    data[i] == '\n'); i++)
		;
	empty = i == len - 1;
	/* {"type":" EVENT " ,|} rest-of-data \n */
	n = 9 + el + 1 + (empty ? 1 : len) + 1;
	if ((out = malloc(n + 1)) == NULL)
		return NULL;
	o = out;
	memcpy(o, "{\"type\":\"", 9);
	o += 9;
	memcpy(o, event, el);
	o += el;
	*o++ = '"';
	if (empty)
		*o++ = '}';
	else {
		*o++ = ',';
		/* Data sent on several "data:" lines comes back with '\n'
		 * between them; outside strings that is JSON whitespace, inside
		 * one it was never valid: a space keeps the meaning and the
		 * result one line. */
		for (i = 1; i < len; i++)
			*o++ = data[i] == '\n' ? ' ' : data[i];
	}
	*o++ = '\n';
	*o = '\0';
	*outlen = (size_t)(o - out);
	return out;
}
