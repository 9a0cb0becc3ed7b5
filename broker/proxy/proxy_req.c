/* proxy_req.c - request-head parser of the egress proxy: strict, bounded, never quotes what it refuses (RFC 9112 §2-§3, RFC 9110 §9.3.6). Calls the policy grammar (common/proxy_policy.c) only. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy_req.h"
#include "sbx_msg.h"

#define TARGET_MAX 4096

static int
fail(int *status, int code, char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	*status = code;
	va_start(ap, fmt);
	proxy_vwhy(why, len, fmt, ap);
	va_end(ap);
	return -1;
}

long
proxy_req_head_len(const char *buf, size_t len)
{
	size_t i, n = len < PROXY_HEAD_MAX ? len : PROXY_HEAD_MAX;

	for (i = 0; i < n; i++) {
		if (buf[i] != '\n')
			continue;
		if (i == 0 || buf[i - 1] != '\r')
			return -2;
		if (i >= 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r')
			return (long)(i + 1);
	}
	return len >= PROXY_HEAD_MAX ? -1 : 0;
}

/* RFC 9110 §5.6.2 tchar */
static int
tchar(int c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return 1;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* host[:port] or [v6][:port]; port required when need_port, else dflt. */
static int
authority(const char *a, size_t n, int need_port, uint16_t dflt, struct proxy_req *r,
    int *status, char *why, size_t why_len)
{
	const char *hp = a, *colon = NULL;
	size_t hn = n;
	char sub[PROXY_WHY_MAX];

	if (n == 0)
		return fail(status, 400, why, why_len, "empty host");
	if (memchr(a, '@', n) != NULL)
		return fail(status, 400, why, why_len, "user information in the authority is refused");
	if (a[0] == '[') {
		const char *end = memchr(a, ']', n);

		if (end == NULL)
			return fail(status, 400, why, why_len, SBX_MSG_BAD_IPV6);
		hn = (size_t)(end - a) + 1;
		if (hn < n) {
			if (a[hn] != ':')
				return fail(status, 400, why, why_len, "bad authority");
			colon = a + hn;
		}
	} else {
		colon = memchr(a, ':', n);
		if (colon != NULL)
			hn = (size_t)(colon - a);
	}
	if (colon != NULL) {
		if (proxy_port_parse(colon + 1, n - (size_t)(colon + 1 - a), &r->port) != 0)
			return fail(status, 400, why, why_len, "port must be 1..65535");
	} else if (need_port) {
		return fail(status, 400, why, why_len, "CONNECT needs host:port");
	} else {
		r->port = dflt;
	}
	if (proxy_host_normalise(hp, hn, r->host, &r->host_is_ip, &r->host_is_v6, sub,
	    sizeof(sub)) != 0)
		return fail(status, 400, why, why_len, "%s", sub);
	return 0;
}

struct hdr {
	const char *name;
	size_t nlen;
	const char *val;
	size_t vlen;
};

static int
drop_header(const struct hdr *h)
{
	static const char *const drop[] = { "host", "connection", "keep-alive",
		"proxy-connection", "proxy-authorization", "upgrade", "te", NULL };
	int i;

	for (i = 0; drop[i] != NULL; i++)
		if (strlen(drop[i]) == h->nlen && strncasecmp(h->name, drop[i], h->nlen) == 0)
			return 1;
	return 0;
}

static int
is_header(const struct hdr *h, const char *name)
{
	return strlen(name) == h->nlen && strncasecmp(h->name, name, h->nlen) == 0;
}

int
proxy_req_parse(const char *buf, size_t len, struct proxy_req *r, int *status, char *why,
    size_t why_len)
{
	struct hdr hs[PROXY_HEADERS_MAX];
	size_t nh = 0, i, line_end, pos, mlen, tlen, plen = 0, cap;
	const char *target, *path = NULL, *host_val = NULL, *vers;
	size_t host_vlen = 0;
	int nhost = 0, ncl = 0, nte = 0;
	char *o;

	memset(r, 0, sizeof(*r));
	if (len < 4 || len > PROXY_HEAD_MAX || buf[len - 1] != '\n' || buf[len - 2] != '\r' ||
	    buf[len - 3] != '\n' || buf[len - 4] != '\r')
		return fail(status, len > PROXY_HEAD_MAX ? 431 : 400, why, why_len,
		    "incomplete or oversized request head");
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)buf[i];

		if (c == '\n' && (i == 0 || buf[i - 1] != '\r'))
			return fail(status, 400, why, why_len, "bare LF in the request head");
		if (c == '\r' && (i + 1 >= len || buf[i + 1] != '\n'))
			return fail(status, 400, why, why_len, "bare CR in the request head");
		if ((c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f)
			return fail(status, 400, why, why_len, "control byte in the request head");
	}
	/* request line */
	line_end = (size_t)((const char *)memchr(buf, '\r', len) - buf);
	for (mlen = 0; mlen < line_end && buf[mlen] >= 'A' && buf[mlen] <= 'Z'; mlen++)
		;
	if (mlen == 0 || mlen >= sizeof(r->method) || mlen >= line_end || buf[mlen] != ' ')
		return fail(status, 400, why, why_len, SBX_MSG_BAD_REQUEST_LINE);
	memcpy(r->method, buf, mlen);
	target = buf + mlen + 1;
	vers = memchr(target, ' ', line_end - mlen - 1);
	if (vers == NULL || vers == target)
		return fail(status, 400, why, why_len, SBX_MSG_BAD_REQUEST_LINE);
	tlen = (size_t)(vers - target);
	if (tlen > TARGET_MAX)
		return fail(status, 414, why, why_len, "request target longer than %d bytes",
		    TARGET_MAX);
	for (i = 0; i < tlen; i++)
		if ((unsigned char)target[i] <= 0x20 || (unsigned char)target[i] >= 0x7f)
			return fail(status, 400, why, why_len, "bad byte in the request target");
	vers++;
	if ((size_t)(buf + line_end - vers) != 8 ||
	    (memcmp(vers, "HTTP/1.1", 8) != 0 && memcmp(vers, "HTTP/1.0", 8) != 0))
		return fail(status, 400, why, why_len, "only HTTP/1.0 and HTTP/1.1");
	/* headers */
	pos = line_end + 2;
	while (pos < len - 2) {
		const char *l = buf + pos, *colon;
		size_t ll = (size_t)((const char *)memchr(l, '\r', len - pos) - l), nn, vs, ve;

		if (l[0] == ' ' || l[0] == '\t')
			return fail(status, 400, why, why_len, "obsolete line folding");
		colon = memchr(l, ':', ll);
		if (colon == NULL || colon == l)
			return fail(status, 400, why, why_len, "header line without a name");
		nn = (size_t)(colon - l);
		for (i = 0; i < nn; i++)
			if (!tchar((unsigned char)l[i]))
				return fail(status, 400, why, why_len, "bad header name");
		if (nh >= PROXY_HEADERS_MAX)
			return fail(status, 431, why, why_len, "more than %d headers",
			    PROXY_HEADERS_MAX);
		vs = nn + 1;
		while (vs < ll && (l[vs] == ' ' || l[vs] == '\t'))
			vs++;
		ve = ll;
		while (ve > vs && (l[ve - 1] == ' ' || l[ve - 1] == '\t'))
			ve--;
		hs[nh].name = l;
		hs[nh].nlen = nn;
		hs[nh].val = l + vs;
		hs[nh].vlen = ve - vs;
		if (is_header(&hs[nh], "host")) {
			nhost++;
			host_val = hs[nh].val;
			host_vlen = hs[nh].vlen;
		}
		if (is_header(&hs[nh], "content-length"))
			ncl++;
		if (is_header(&hs[nh], "transfer-encoding"))
			nte++;
		nh++;
		pos += ll + 2;
	}
	if (nhost > 1)
		return fail(status, 400, why, why_len, "more than one Host header");
	if (ncl > 1 || (ncl > 0 && nte > 0) || nte > 1)
		return fail(status, 400, why, why_len,
		    "ambiguous body length (Content-Length and Transfer-Encoding)");
	r->head_len = len;
	if (strcmp(r->method, "CONNECT") == 0) {
		r->kind = PROXY_REQ_CONNECT;
		if (authority(target, tlen, 1, 0, r, status, why, why_len) != 0)
			goto bad;
		return 0;
	}
	r->kind = PROXY_REQ_HTTP;
	if (tlen >= 8 && strncasecmp(target, "https://", 8) == 0) {
		fail(status, 400, why, why_len, "https:// through the proxy: use CONNECT");
		goto bad;
	}
	if (tlen >= 7 && strncasecmp(target, "http://", 7) == 0) {
		const char *a = target + 7, *end = target + tlen, *e = a;

		while (e < end && *e != '/' && *e != '?' && *e != '#')
			e++;
		if (authority(a, (size_t)(e - a), 0, 80, r, status, why, why_len) != 0)
			goto bad;
		path = e;
		plen = (size_t)(end - e);
	} else if (target[0] == '/') {
		if (nhost != 1) {
			fail(status, 400, why, why_len, "origin-form request without a Host header");
			goto bad;
		}
		if (authority(host_val, host_vlen, 0, 80, r, status, why, why_len) != 0)
			goto bad;
		path = target;
		plen = tlen;
	} else {
		fail(status, 400, why, why_len, "request target is neither http://... nor /...");
		goto bad;
	}
	if (memchr(path, '#', plen) != NULL) {
		fail(status, 400, why, why_len, "fragment in the request target");
		goto bad;
	}
	/* Upstream head: line, kept headers, Host, Connection: close. */
	/* headers may grow by " " each; Host and Connection lines bounded */
	cap = mlen + 1 + plen + 1 + 11 + len + PROXY_HEADERS_MAX + PROXY_HOST_MAX + 64;
	r->out = malloc(cap);
	if (r->out == NULL) {
		fail(status, 503, why, why_len, SBX_MSG_OOM);
		goto bad;
	}
	o = r->out;
	memcpy(o, r->method, mlen);
	o += mlen;
	*o++ = ' ';
	if (plen == 0 || path[0] == '?')
		*o++ = '/';
	memcpy(o, path, plen);
	o += plen;
	*o++ = ' ';
	memcpy(o, buf + line_end - 8, 8);
	o += 8;
	*o++ = '\r';
	*o++ = '\n';
	for (i = 0; i < nh; i++) {
		if (drop_header(&hs[i]))
			continue;
		memcpy(o, hs[i].name, hs[i].nlen);
		o += hs[i].nlen;
		*o++ = ':';
		*o++ = ' ';
		memcpy(o, hs[i].val, hs[i].vlen);
		o += hs[i].vlen;
		*o++ = '\r';
		*o++ = '\n';
	}
	o += snprintf(o, (size_t)(r->out + cap - o), "Host: %s%s%s", r->host_is_v6 ? "[" : "",
	    r->host, r->host_is_v6 ? "]" : "");
	if (r->port != 80)
		o += snprintf(o, (size_t)(r->out + cap - o), ":%u", (unsigned)r->port);
	o += snprintf(o, (size_t)(r->out + cap - o), "\r\nConnection: close\r\n\r\n");
	r->out_len = (size_t)(o - r->out);
	return 0;
bad:
	proxy_req_clear(r);
	return -1;
}

void
proxy_req_clear(struct proxy_req *r)
{
	if (r == NULL)
		return;
	free(r->out);
	memset(r, 0, sizeof(*r));
}
