/* api_ports_head.c - the request head a sandbox's server gets through the ports proxy, rewritten from the client's untrusted one (RFC 9110 §7.6, RFC 9112 §3; adr/0053). Pure: touches only the evbuffer it is given. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "api_ports.h"
#include "sbx_proto.h"

/* RFC 9110 §5.6.2 tchar. */
static int
tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int
token_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	if (*p == '\0')
		return 0;
	for (; *p != '\0'; p++)
		if (!tchar(*p))
			return 0;
	return 1;
}

/* A field value (RFC 9110 §5.5): no CTL but HTAB, obs-text allowed. */
static int
value_ok(const char *s)
{
	const unsigned char *p;

	for (p = (const unsigned char *)s; *p != '\0'; p++)
		if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
			return 0;
	return 1;
}

/* A target's bytes: visible ASCII or obs-text, no space, no CTL, no '#'. */
static int
target_ok(const char *s)
{
	const unsigned char *p;

	for (p = (const unsigned char *)s; *p != '\0'; p++)
		if (*p <= 0x20 || *p == 0x7f || *p == '#')
			return 0;
	return 1;
}

/* 1 when list (a comma-separated field value) holds token tok, any case. */
static int
list_has(const char *list, const char *tok)
{
	size_t tl = strlen(tok), n;
	const char *p = list;

	while (*p != '\0') {
		p += strspn(p, " \t,");
		n = strcspn(p, ",");
		while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n == tl && strncasecmp(p, tok, tl) == 0)
			return 1;
		p += strcspn(p, ",");
	}
	return 0;
}

/* The fields the proxy never passes on (it sets some of them again). */
static const char *const dropped[] = {
	"Authorization", "Connection", "Keep-Alive", "Proxy-Connection",
	"Proxy-Authorization", "TE", "Trailer", "Transfer-Encoding",
	"Upgrade", "Content-Length", "Expect", "Host", "Forwarded",
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
	"X-Forwarded-Prefix",
};

/* Dropped: one of the list above, or named by any Connection field. */
static int
is_dropped(const struct api_ports_head_in *in, const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
		if (strcasecmp(name, dropped[i]) == 0)
			return 1;
	for (i = 0; i < in->nhdrs; i++)
		if (strcasecmp(in->hdrs[i].name, "Connection") == 0 &&
		    list_has(in->hdrs[i].value, name))
			return 1;
	return 0;
}

/* The first field called name (any case), or NULL. */
static const char *
field(const struct api_ports_head_in *in, const char *name)
{
	size_t i;

	for (i = 0; i < in->nhdrs; i++)
		if (strcasecmp(in->hdrs[i].name, name) == 0)
			return in->hdrs[i].value;
	return NULL;
}

/* The query without API_PORTS_TICKET_PARAM parameters ("name" or
 * "name=..."), '&'-joined as it came. */
static int
query_add(struct evbuffer *out, const char *q)
{
	const size_t pl = sizeof(API_PORTS_TICKET_PARAM) - 1;
	int first = 1;
	size_t n;

	while (*q != '\0') {
		n = strcspn(q, "&");
		if (!(n >= pl && strncmp(q, API_PORTS_TICKET_PARAM, pl) == 0 &&
		    (n == pl || q[pl] == '=')) && n > 0) {
			if (evbuffer_add_printf(out, "%s%.*s", first ? "?" : "&",
			    (int)n, q) < 0)
				return -1;
			first = 0;
		}
		q += n;
		if (*q == '&')
			q++;
	}
	return 0;
}

static int
head_write(const struct api_ports_head_in *in, struct evbuffer *out, int up)
{
	const char *xff = field(in, "X-Forwarded-For");
	const char *host = field(in, "Host");
	const char *m = in->method;
	size_t i;
	int r = 0;

	r |= evbuffer_add_printf(out, "%s %s", m, in->path[0] != '\0' ?
	    in->path : "/") < 0;
	if (in->query != NULL)
		r |= query_add(out, in->query);
	r |= evbuffer_add_printf(out, " HTTP/1.1\r\n") < 0;
	for (i = 0; i < in->nhdrs; i++)
		if (!is_dropped(in, in->hdrs[i].name))
			r |= evbuffer_add_printf(out, "%s: %s\r\n",
			    in->hdrs[i].name, in->hdrs[i].value) < 0;
	r |= evbuffer_add_printf(out, "Host: 127.0.0.1:%d\r\n", in->port) < 0;
	if (xff != NULL && xff[0] != '\0')
		r |= evbuffer_add_printf(out, "X-Forwarded-For: %s, %s\r\n", xff,
		    in->client_addr) < 0;
	else
		r |= evbuffer_add_printf(out, "X-Forwarded-For: %s\r\n",
		    in->client_addr) < 0;
	if (host != NULL)
		r |= evbuffer_add_printf(out, "X-Forwarded-Host: %s\r\n",
		    host) < 0;
	r |= evbuffer_add_printf(out, "X-Forwarded-Proto: %s\r\n",
	    in->proto) < 0;
	if (in->prefix != NULL && in->prefix[0] != '\0')
		r |= evbuffer_add_printf(out, "X-Forwarded-Prefix: %s\r\n",
		    in->prefix) < 0;
	if (in->body_len > 0 || strcmp(m, "POST") == 0 ||
	    strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0)
		r |= evbuffer_add_printf(out, "Content-Length: %llu\r\n",
		    (unsigned long long)in->body_len) < 0;
	if (up)
		r |= evbuffer_add_printf(out, "Connection: Upgrade\r\n"
		    "Upgrade: %s\r\n", field(in, "Upgrade")) < 0;
	else
		r |= evbuffer_add_printf(out, "Connection: close\r\n") < 0;
	r |= evbuffer_add(out, "\r\n", 2) != 0;
	return r ? -1 : 0;
}

int
api_ports_head_build(const struct api_ports_head_in *in, struct evbuffer *out,
    int *upgrade, struct sbx_err *err)
{
	struct evbuffer *tmp = NULL;
	const char *connection, *upg;
	size_t i;
	int up;

	*upgrade = 0;
	if (!token_ok(in->method))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The request method "
		    "is not an HTTP token.");
	if ((in->path[0] != '\0' && in->path[0] != '/') ||
	    !target_ok(in->path) || strchr(in->path, '?') != NULL ||
	    (in->query != NULL &&
	    !target_ok(in->query)))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The request target "
		    "holds a byte HTTP forbids.");
	if (in->port < 1 || in->port > 65535)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The port must be "
		    "1..65535.");
	for (i = 0; i < in->nhdrs; i++)
		if (!token_ok(in->hdrs[i].name) || !value_ok(in->hdrs[i].value))
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "A header "
			    "field holds a byte HTTP forbids.");
	if (!value_ok(in->client_addr) || !token_ok(in->proto) ||
	    (in->prefix != NULL && !target_ok(in->prefix)))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The proxy's own "
		    "fields hold a byte HTTP forbids.");
	connection = field(in, "Connection");
	upg = field(in, "Upgrade");
	up = connection != NULL && list_has(connection, "upgrade") &&
	    upg != NULL && upg[0] != '\0';
	/* Built aside so a failure adds nothing to out. */
	if ((tmp = evbuffer_new()) == NULL ||
	    head_write(in, tmp, up) == -1 ||
	    evbuffer_add_buffer(out, tmp) != 0) {
		if (tmp != NULL)
			evbuffer_free(tmp);
		return sbx_err_oom(err);
	}
	evbuffer_free(tmp);
	*upgrade = up;
	return 0;
}
