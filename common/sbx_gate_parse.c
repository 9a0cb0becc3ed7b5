/* sbx_gate_parse.c - the gate's request-head parser: no socket, no state, RFC 9112 framing checked strictly (adr/0008, adr/0012; the fuzzing entry point). */
#include <string.h>
#include <strings.h>

#include <event2/http.h>

#include "sbx_gate.h"
#include "sbx_gate_int.h"

static int
tchar(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || (c != '\0' &&
	    strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int
method_type(const char *m, size_t n)
{
	static const struct {
		const char *name;
		enum evhttp_cmd_type type;
	} ms[] = {
		{ "GET", EVHTTP_REQ_GET }, { "POST", EVHTTP_REQ_POST },
		{ "HEAD", EVHTTP_REQ_HEAD }, { "PUT", EVHTTP_REQ_PUT },
		{ "DELETE", EVHTTP_REQ_DELETE },
		{ "OPTIONS", EVHTTP_REQ_OPTIONS },
		{ "TRACE", EVHTTP_REQ_TRACE },
		{ "CONNECT", EVHTTP_REQ_CONNECT },
		{ "PATCH", EVHTTP_REQ_PATCH },
	};
	size_t i;

	for (i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
		if (strlen(ms[i].name) == n && memcmp(ms[i].name, m, n) == 0)
			return (int)ms[i].type;
	return 0;
}

/* As evhttp_method_may_have_body in libevent 2.1.12 http.c. */
static int
method_has_body(int t)
{
	return t == EVHTTP_REQ_POST || t == EVHTTP_REQ_PUT ||
	    t == EVHTTP_REQ_PATCH || t == EVHTTP_REQ_GET ||
	    t == EVHTTP_REQ_DELETE || t == EVHTTP_REQ_OPTIONS ||
	    t == EVHTTP_REQ_CONNECT;
}

static void
refuse(struct sbx_gate_head *h, enum sbx_gate_verdict v, const char *why)
{
	if (h->bad == SBX_GATE_PASS) {
		h->bad = v;
		h->why = why;
	}
}

/* "METHOD SP target SP HTTP/1.x", target visible ASCII (RFC 9112 §3). */
static void
head_request_line(const char *l, size_t n, struct sbx_gate_head *h)
{
	const char *sp1, *sp2, *c;

	if ((sp1 = memchr(l, ' ', n)) == NULL || sp1 == l || sp1 - l > 16)
		return;
	for (c = l; c < sp1; c++)
		if (*c < 'A' || *c > 'Z')
			return;
	if ((sp2 = memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - l))) == NULL ||
	    sp2 == sp1 + 1)
		return;
	for (c = sp1 + 1; c < sp2; c++)
		if ((unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e)
			return;
	if (l + n - (sp2 + 1) != 8 || (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 &&
	    memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))
		return;
	h->method = l;
	h->mlen = (size_t)(sp1 - l);
	h->target = sp1 + 1;
	h->tlen = (size_t)(sp2 - sp1 - 1);
	h->type = method_type(h->method, h->mlen);
	h->line_ok = 1;
}

int
sbx_gate_hname_is(const char *name, size_t n, const char *want)
{
	return strlen(want) == n && strncasecmp(name, want, n) == 0;
}

/* One header line (no EOL). */
static void
head_field(const char *l, size_t n, const struct sbx_gate_limits *lim,
    struct sbx_gate_head *h)
{
	const char *c = l, *v, *ve = l + n;
	size_t nl, i;

	while (c < ve && tchar((unsigned char)*c))
		c++;
	if (c == l || c == ve || *c != ':') {
		/* RFC 9112 §5.2: obs-fold is rejected; so is a line that is no
		 * field (§5.1: no whitespace before the colon either). */
		refuse(h, SBX_GATE_BAD_REQUEST, l[0] == ' ' || l[0] == '\t' ?
		    "A folded header line (obs-fold) is not accepted." :
		    "A header line is not NAME: VALUE.");
		return;
	}
	nl = (size_t)(c - l);
	for (v = c + 1; v < ve && (*v == ' ' || *v == '\t'); v++)
		;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	for (i = 0; i < SBX_GATE_FIELDS_MAX && lim->fields[i] != NULL; i++)
		if (sbx_gate_hname_is(l, nl, lim->fields[i]) &&
		    h->nfield[i]++ == 0) {
			h->field[i] = v;
			h->fieldlen[i] = (size_t)(ve - v);
		}
	if (sbx_gate_hname_is(l, nl, "Authorization")) {
		if (h->nauth++ == 0) {
			h->auth = v;
			h->alen = (size_t)(ve - v);
		} else
			refuse(h, SBX_GATE_BAD_REQUEST, "More than one "
			    "Authorization header.");
	} else if (sbx_gate_hname_is(l, nl, "Host")) {
		if (h->host == NULL) {
			h->host = v;
			h->hostlen = (size_t)(ve - v);
		}
	} else if (sbx_gate_hname_is(l, nl, "Content-Length")) {
		if (h->has_cl)
			refuse(h, SBX_GATE_BAD_REQUEST, "More than one "
			    "Content-Length header.");
		if (ve == v || ve - v > 18)
			refuse(h, SBX_GATE_BAD_REQUEST, "Content-Length is not "
			    "1 to 18 digits.");
		h->has_cl = 1;
		h->cl = 0;
		for (i = 0; v + i < ve && i < 18; i++) {
			if (v[i] < '0' || v[i] > '9') {
				refuse(h, SBX_GATE_BAD_REQUEST, "Content-Length "
				    "is not 1 to 18 digits.");
				break;
			}
			h->cl = h->cl * 10 + (uint64_t)(v[i] - '0');
		}
	} else if (sbx_gate_hname_is(l, nl, "Transfer-Encoding")) {
		if (h->chunked || !sbx_gate_hname_is(v, (size_t)(ve - v), "chunked"))
			refuse(h, SBX_GATE_BAD_REQUEST, "Transfer-Encoding must "
			    "be \"chunked\" alone.");
		h->chunked = 1;
	} else if (sbx_gate_hname_is(l, nl, "Expect")) {
		if (!sbx_gate_hname_is(v, (size_t)(ve - v), "100-continue"))
			refuse(h, SBX_GATE_BAD_REQUEST, "Only Expect: "
			    "100-continue is accepted.");
	}
}

/* Length of the head at the start of p (n bytes), or 0 when incomplete. */
static size_t
head_end(const char *p, size_t n, size_t from)
{
	size_t i;

	if (n >= 1 && p[0] == '\n')
		return 1;
	if (n >= 2 && p[0] == '\r' && p[1] == '\n')
		return 2;
	for (i = from > 2 ? from - 2 : 0; i < n; i++) {
		if (p[i] != '\n')
			continue;
		if (i + 1 < n && p[i + 1] == '\n')
			return i + 2;
		if (i + 2 < n && p[i + 1] == '\r' && p[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

int
sbx_gate_line(const char **ls, const char *end, const char **line,
    size_t *len)
{
	const char *le;

	if (*ls >= end ||
	    (le = memchr(*ls, '\n', (size_t)(end - *ls))) == NULL)
		return 0;
	*line = *ls;
	*len = (size_t)(le - *ls);
	if (*len > 0 && (*line)[*len - 1] == '\r')
		(*len)--;
	*ls = le + 1;
	return *len > 0;
}

void
sbx_gate_head_parse(const char *p, size_t n, const struct sbx_gate_limits *lim,
    struct sbx_gate_head *h)
{
	const char *ls = p, *end = p + n, *line, *c;
	size_t ll;
	int first = 1;

	memset(h, 0, sizeof(*h));
	h->len = n;
	while (sbx_gate_line(&ls, end, &line, &ll)) {
		for (c = line; c < line + ll; c++)
			if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
				refuse(h, SBX_GATE_BAD_REQUEST, "The head holds "
				    "a control character.");
		if (first)
			head_request_line(line, ll, h);
		else if (++h->nheaders > lim->headers_max)
			refuse(h, SBX_GATE_HEAD_TOO_LARGE, "Too many header "
			    "fields.");
		else
			head_field(line, ll, lim, h);
		first = 0;
	}
	if (!h->line_ok)
		refuse(h, SBX_GATE_BAD_REQUEST, "The request line is not "
		    "METHOD TARGET HTTP/1.1.");
	else if (h->type == 0)
		/* evhttp would answer an unknown method with its HTML 400. */
		refuse(h, SBX_GATE_BAD_REQUEST, "Unknown method.");
	if (h->has_cl && h->chunked)
		refuse(h, SBX_GATE_BAD_REQUEST, "Content-Length and "
		    "Transfer-Encoding together are not accepted.");
	if ((h->chunked || h->cl > 0) && !method_has_body(h->type))
		refuse(h, SBX_GATE_BAD_REQUEST, "This method takes no body.");
}

int
sbx_gate_parse_from(const char *p, size_t n, size_t from,
    const struct sbx_gate_limits *lim, struct sbx_gate_head *h)
{
	size_t m = n < lim->head_max ? n : lim->head_max, hl;

	if ((hl = head_end(p, m, from)) != 0) {
		sbx_gate_head_parse(p, hl, lim, h);
		return 1;
	}
	if (n < lim->head_max)
		return 0;
	memset(h, 0, sizeof(*h));
	if (memchr(p, '\n', m) == NULL)
		refuse(h, SBX_GATE_URI_TOO_LONG, "The request line is too "
		    "long.");
	else
		refuse(h, SBX_GATE_HEAD_TOO_LARGE, "The request head is too "
		    "large.");
	return 1;
}

int
sbx_gate_parse(const char *p, size_t n, const struct sbx_gate_limits *lim,
    struct sbx_gate_head *h)
{
	return sbx_gate_parse_from(p, n, 0, lim, h);
}

const char *
sbx_gate_bearer(const char *value, size_t *len)
{
	const char *k, *e;

	if (value == NULL)
		return NULL;
	while (*value == ' ' || *value == '\t')
		value++;
	if (strncasecmp(value, "Bearer", 6) != 0 ||
	    (value[6] != ' ' && value[6] != '\t'))
		return NULL;
	k = value + 6;
	while (*k == ' ' || *k == '\t')
		k++;
	e = k + strlen(k);
	while (e > k && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	if (e == k)
		return NULL;
	*len = (size_t)(e - k);
	return k;
}
