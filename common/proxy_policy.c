/* proxy_policy.c - allowlist entries, name matching and refused address ranges of the egress proxy (adr/0026). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy_policy.h"
#include "sbx_msg.h"

void
proxy_vwhy(char *why, size_t len, const char *fmt, va_list ap)
{
	if (why != NULL && len > 0)
		vsnprintf(why, len, fmt, ap);
}

static int
fail(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	proxy_vwhy(why, len, fmt, ap);
	va_end(ap);
	return -1;
}

static int
is_digit(int c)
{
	return c >= '0' && c <= '9';
}

/* Strict dotted quad: four 0..255 decimal parts, no leading zeros. */
static int
ipv4_literal(const char *s, size_t n, uint8_t out[4])
{
	size_t i = 0;
	int part;

	for (part = 0; part < 4; part++) {
		unsigned v = 0;
		size_t start = i;

		while (i < n && is_digit(s[i]) && i - start < 4)
			v = v * 10 + (unsigned)(s[i++] - '0');
		if (i == start || i - start > 3 || v > 255 ||
		    (i - start > 1 && s[start] == '0'))
			return 0;
		if (out != NULL)
			out[part] = (uint8_t)v;
		if (part < 3) {
			if (i >= n || s[i] != '.')
				return 0;
			i++;
		}
	}
	return i == n;
}

/* A DNS name already folded to lower case: labels [a-z0-9-]{1,63}. */
static int
dns_name(const char *s, size_t n, char *why, size_t why_len)
{
	size_t i, lab = 0, last = 0;
	int all_digits = 1;

	if (n == 0)
		return fail(why, why_len, SBX_MSG_EMPTY_HOST);
	if (n > PROXY_HOST_MAX)
		return fail(why, why_len, SBX_MSG_HOST_TOO_LONG, PROXY_HOST_MAX);
	for (i = 0; i <= n; i++) {
		int c = i < n ? (unsigned char)s[i] : '.';

		if (c == '.') {
			if (lab == 0)
				return fail(why, why_len, "empty label in host name");
			if (lab > 63)
				return fail(why, why_len, "label longer than 63 bytes in host name");
			if (s[i - 1] == '-' || s[i - lab] == '-')
				return fail(why, why_len, "label starts or ends with '-'");
			last = i - lab;
			lab = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || is_digit(c) || c == '-'))
			return fail(why, why_len, "host name holds a byte outside [a-z0-9.-]");
		lab++;
	}
	for (i = last; i < n; i++)
		if (!is_digit(s[i]))
			all_digits = 0;
	if (all_digits)
		return fail(why, why_len, "host name ends in an all-digit label");
	return 0;
}

int
proxy_host_normalise(const char *host, size_t len, char *out, int *is_ip, int *is_v6,
    char *why, size_t why_len)
{
	size_t i;
	uint8_t a6[16];
	char tmp[64];

	*is_ip = 0;
	*is_v6 = 0;
	if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
		if (len - 2 >= sizeof(tmp) || len == 2)
			return fail(why, why_len, SBX_MSG_BAD_IPV6);
		memcpy(tmp, host + 1, len - 2);
		tmp[len - 2] = '\0';
		for (i = 0; tmp[i] != '\0'; i++)
			tmp[i] = (char)((tmp[i] >= 'A' && tmp[i] <= 'F') ? tmp[i] + 32 : tmp[i]);
		if (strchr(tmp, '%') != NULL || inet_pton(AF_INET6, tmp, a6) != 1)
			return fail(why, why_len, SBX_MSG_BAD_IPV6);
		if (inet_ntop(AF_INET6, a6, out, PROXY_HOST_MAX + 1) == NULL)
			return fail(why, why_len, SBX_MSG_BAD_IPV6);
		*is_ip = 1;
		*is_v6 = 1;
		return 0;
	}
	if (len > 0 && host[len - 1] == '.')
		len--;
	if (len == 0)
		return fail(why, why_len, SBX_MSG_EMPTY_HOST);
	if (len > PROXY_HOST_MAX)
		return fail(why, why_len, SBX_MSG_HOST_TOO_LONG, PROXY_HOST_MAX);
	for (i = 0; i < len; i++) {
		int c = (unsigned char)host[i];

		if (c >= 'A' && c <= 'Z')
			c += 32;
		out[i] = (char)c;
	}
	out[len] = '\0';
	if (ipv4_literal(out, len, NULL)) {
		*is_ip = 1;
		return 0;
	}
	return dns_name(out, len, why, why_len);
}

int
proxy_port_parse(const char *s, size_t n, uint16_t *port)
{
	unsigned long v = 0;
	size_t i;

	if (n == 0 || n > 5 || s[0] == '0')
		return -1;
	for (i = 0; i < n; i++) {
		if (!is_digit(s[i]))
			return -1;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

int
proxy_policy_add_allow(struct proxy_policy *p, const char *entry, char *why, size_t why_len)
{
	struct proxy_rule r;
	const char *colon, *host;
	size_t n, hn;
	int is_ip, is_v6;
	char sub[PROXY_WHY_MAX];

	memset(&r, 0, sizeof(r));
	if (p->nrules >= PROXY_RULES_MAX)
		return fail(why, why_len, "more than %d allow entries", PROXY_RULES_MAX);
	n = strlen(entry);
	if (n == 0 || n > PROXY_HOST_MAX + 8)
		return fail(why, why_len, "allow entry is empty or too long");
	if (entry[0] == '[')
		return fail(why, why_len, "allow entry: name an IPv6 address as a CIDR");
	colon = memchr(entry, ':', n);
	hn = colon != NULL ? (size_t)(colon - entry) : n;
	if (colon != NULL && proxy_port_parse(colon + 1, n - hn - 1, &r.port) != 0)
		return fail(why, why_len, "allow entry: port must be 1..65535");
	host = entry;
	if (hn == 1 && host[0] == '*') {
		r.any = 1;
		p->rules[p->nrules++] = r;
		return 0;
	}
	if (hn >= 2 && host[0] == '*' && host[1] == '.') {
		r.wildcard = 1;
		host += 2;
		hn -= 2;
	}
	if (memchr(host, '*', hn) != NULL)
		return fail(why, why_len, "allow entry: '*' only as a whole entry or a leading '*.'");
	if (hn > 0 && host[hn - 1] == '.')
		return fail(why, why_len, "allow entry: no trailing dot");
	if (proxy_host_normalise(host, hn, r.host, &is_ip, &is_v6, sub, sizeof(sub)) != 0)
		return fail(why, why_len, "allow entry: %s", sub);
	if (is_ip && r.wildcard)
		return fail(why, why_len, "allow entry: '*.' before an address");
	p->rules[p->nrules++] = r;
	return 0;
}

static int
mask_ok(const uint8_t *a, int bytes, int plen)
{
	int i;

	for (i = 0; i < bytes * 8; i++)
		if (i >= plen && (a[i / 8] & (0x80 >> (i % 8))) != 0)
			return 0;
	return 1;
}

int
proxy_policy_add_cidr(struct proxy_policy *p, const char *cidr, char *why, size_t why_len)
{
	struct proxy_cidr c;
	char buf[64];
	const char *slash;
	size_t an;
	int max;

	memset(&c, 0, sizeof(c));
	if (p->ncidrs >= PROXY_CIDRS_MAX)
		return fail(why, why_len, "more than %d CIDRs", PROXY_CIDRS_MAX);
	slash = strchr(cidr, '/');
	an = slash != NULL ? (size_t)(slash - cidr) : strlen(cidr);
	if (an == 0 || an >= sizeof(buf))
		return fail(why, why_len, SBX_MSG_CIDR_ADDRESS);
	memcpy(buf, cidr, an);
	buf[an] = '\0';
	if (ipv4_literal(buf, an, c.addr)) {
		c.family = AF_INET;
		max = 32;
	} else if (strchr(buf, ':') != NULL && strchr(buf, '%') == NULL &&
	    inet_pton(AF_INET6, buf, c.addr) == 1) {
		c.family = AF_INET6;
		max = 128;
	} else {
		return fail(why, why_len, SBX_MSG_CIDR_ADDRESS);
	}
	c.plen = max;
	if (slash != NULL) {
		const char *s = slash + 1;
		size_t n = strlen(s), i;
		int v = 0;

		if (n == 0 || n > 3 || (n > 1 && s[0] == '0'))
			return fail(why, why_len, SBX_MSG_CIDR_PREFIX);
		for (i = 0; i < n; i++) {
			if (!is_digit(s[i]))
				return fail(why, why_len, SBX_MSG_CIDR_PREFIX);
			v = v * 10 + (s[i] - '0');
		}
		if (v > max)
			return fail(why, why_len, "CIDR: prefix length above %d", max);
		c.plen = v;
	}
	if (!mask_ok(c.addr, max / 8, c.plen))
		return fail(why, why_len, "CIDR: host bits set");
	p->cidrs[p->ncidrs++] = c;
	return 0;
}

int
proxy_policy_parse(struct proxy_policy *p, const char *text, size_t len, char *why,
    size_t why_len)
{
	size_t i = 0, line = 0;
	char buf[PROXY_HOST_MAX + 64], sub[PROXY_WHY_MAX];

	memset(p, 0, sizeof(*p));
	while (i < len) {
		size_t s = i, n;
		const char *arg;
		int rc;

		while (i < len && text[i] != '\n')
			i++;
		n = i - s;
		i++;
		line++;
		if (n > 0 && text[s + n - 1] == '\r')
			n--;
		if (n == 0 || text[s] == '#')
			continue;
		if (n >= sizeof(buf) || memchr(text + s, '\0', n) != NULL) {
			memset(p, 0, sizeof(*p));
			return fail(why, why_len, "line %zu: too long or holds a NUL", line);
		}
		memcpy(buf, text + s, n);
		buf[n] = '\0';
		if (strncmp(buf, "allow ", 6) == 0) {
			arg = buf + 6;
			rc = proxy_policy_add_allow(p, arg, sub, sizeof(sub));
		} else if (strncmp(buf, "cidr ", 5) == 0) {
			arg = buf + 5;
			rc = proxy_policy_add_cidr(p, arg, sub, sizeof(sub));
		} else {
			snprintf(sub, sizeof(sub), "expected 'allow ENTRY' or 'cidr CIDR'");
			rc = -1;
		}
		if (rc != 0) {
			memset(p, 0, sizeof(*p));
			return fail(why, why_len, "line %zu: %s", line, sub);
		}
	}
	return 0;
}

static int in_cidrs(const struct proxy_policy *p, int family, const uint8_t *a);

int
proxy_policy_allows(const struct proxy_policy *p, const char *host, uint16_t port)
{
	size_t i, hl = strlen(host);
	uint8_t a[16];

	/* An address literal inside an operator's CIDR is named by it. */
	if ((inet_pton(AF_INET, host, a) == 1 && in_cidrs(p, AF_INET, a)) ||
	    (inet_pton(AF_INET6, host, a) == 1 && in_cidrs(p, AF_INET6, a)))
		return 1;

	for (i = 0; i < p->nrules; i++) {
		const struct proxy_rule *r = &p->rules[i];
		size_t rl = strlen(r->host);

		if (r->port != 0 && r->port != port)
			continue;
		if (r->any)
			return 1;
		if (!r->wildcard) {
			if (strcmp(r->host, host) == 0)
				return 1;
			continue;
		}
		if (hl > rl + 1 && host[hl - rl - 1] == '.' &&
		    strcmp(host + hl - rl, r->host) == 0)
			return 1;
	}
	return 0;
}

struct range {
	uint8_t net[16];
	int plen;
	const char *name;
};

static const struct range ranges4[] = {
	{ { 0, 0, 0, 0 }, 8, "0.0.0.0/8 (this network)" },
	{ { 10, 0, 0, 0 }, 8, "10.0.0.0/8 (private)" },
	{ { 100, 64, 0, 0 }, 10, "100.64.0.0/10 (CGNAT)" },
	{ { 127, 0, 0, 0 }, 8, "127.0.0.0/8 (loopback)" },
	{ { 169, 254, 0, 0 }, 16, "169.254.0.0/16 (link-local, cloud metadata)" },
	{ { 172, 16, 0, 0 }, 12, "172.16.0.0/12 (private)" },
	{ { 192, 0, 0, 0 }, 24, "192.0.0.0/24 (IETF protocol assignments)" },
	{ { 192, 88, 99, 0 }, 24, "192.88.99.0/24 (6to4 relay anycast)" },
	{ { 192, 168, 0, 0 }, 16, "192.168.0.0/16 (private)" },
	{ { 198, 18, 0, 0 }, 15, "198.18.0.0/15 (benchmarking)" },
	{ { 224, 0, 0, 0 }, 3, "224.0.0.0/3 (multicast, reserved)" },
};

static const struct range ranges6[] = {
	{ { 0 }, 128, "::/128 (unspecified)" },
	{ { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 }, 128, "::1/128 (loopback)" },
	{ { 0x01, 0x00 }, 64, "100::/64 (discard)" },
	{ { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 }, 48, "64:ff9b:1::/48 (local NAT64)" },
	{ { 0xfc }, 7, "fc00::/7 (unique local)" },
	{ { 0xfe, 0x80 }, 10, "fe80::/10 (link-local)" },
	{ { 0xfe, 0xc0 }, 10, "fec0::/10 (site-local)" },
	{ { 0xff }, 8, "ff00::/8 (multicast)" },
};

static int
prefix_match(const uint8_t *a, const uint8_t *net, int plen)
{
	int full = plen / 8, rest = plen % 8;

	if (memcmp(a, net, (size_t)full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	return ((a[full] ^ net[full]) & (0xff << (8 - rest)) & 0xff) == 0;
}

static int
in_cidrs(const struct proxy_policy *p, int family, const uint8_t *a)
{
	size_t i;

	if (p == NULL)
		return 0;
	for (i = 0; i < p->ncidrs; i++)
		if (p->cidrs[i].family == family && prefix_match(a, p->cidrs[i].addr,
		    p->cidrs[i].plen))
			return 1;
	return 0;
}

static int
refused4(const uint8_t *a, const struct proxy_policy *p, const char **range)
{
	size_t i;

	if (in_cidrs(p, AF_INET, a))
		return 0;
	for (i = 0; i < sizeof(ranges4) / sizeof(ranges4[0]); i++) {
		if (prefix_match(a, ranges4[i].net, ranges4[i].plen)) {
			if (range != NULL)
				*range = ranges4[i].name;
			return 1;
		}
	}
	return 0;
}

int
proxy_addr_refused(const struct sockaddr *sa, const struct proxy_policy *p,
    const char **range)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const uint8_t translated[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0 };
	static const uint8_t nat64[12] = { 0x00, 0x64, 0xff, 0x9b };
	static const uint8_t teredo[4] = { 0x20, 0x01, 0x00, 0x00 };
	const uint8_t *a;
	size_t i;

	if (range != NULL)
		*range = "not an IP address";
	if (sa == NULL)
		return 1;
	if (sa->sa_family == AF_INET) {
		a = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
		return refused4(a, p, range);
	}
	if (sa->sa_family != AF_INET6)
		return 1;
	a = (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
	if (in_cidrs(p, AF_INET6, a))
		return 0;
	if (memcmp(a, mapped, 12) == 0 || memcmp(a, translated, 12) == 0 ||
	    memcmp(a, nat64, 12) == 0)
		return refused4(a + 12, p, range);
	if (a[0] == 0x20 && a[1] == 0x02 && refused4(a + 2, p, range))
		return 1;
	/* Teredo: the server's IPv4 as is, the client's inverted (RFC 4380 §4). */
	if (memcmp(a, teredo, 4) == 0) {
		uint8_t client[4];

		for (i = 0; i < 4; i++)
			client[i] = (uint8_t)~a[12 + i];
		if (refused4(a + 4, p, range) || refused4(client, p, range))
			return 1;
	}
	for (i = 0; i < sizeof(ranges6) / sizeof(ranges6[0]); i++) {
		if (prefix_match(a, ranges6[i].net, ranges6[i].plen)) {
			if (range != NULL)
				*range = ranges6[i].name;
			return 1;
		}
	}
	/* ::/96 IPv4-compatible (deprecated): judged by the IPv4 it carries. */
	if (memcmp(a, ranges6[0].net, 12) == 0)
		return refused4(a + 12, p, range);
	return 0;
}

const char *
proxy_addr_str(const struct sockaddr *sa, char *out, size_t len)
{
	const void *a = NULL;

	if (sa != NULL && sa->sa_family == AF_INET)
		a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
	else if (sa != NULL && sa->sa_family == AF_INET6)
		a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
	if (a == NULL || inet_ntop(sa->sa_family, a, out, (socklen_t)len) == NULL)
		snprintf(out, len, "?");
	return out;
}
