/* proxy_policy.h - the egress proxy's policy: allowlist entries, name matching, address ranges it never connects to (adr/0026, SPEC §8). */
#ifndef SBX_PROXY_POLICY_H
#define SBX_PROXY_POLICY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A host name as the proxy compares it: at most 253 bytes, lower case. */
#define PROXY_HOST_MAX 253
/* At most this many allow entries and CIDRs per policy (config: the api's
 * egress_allow_max refuses longer lists before they get here). */
#define PROXY_RULES_MAX 256
#define PROXY_CIDRS_MAX 64
/* Room for a refusal reason: one line, no CR/LF, never a request path. */
#define PROXY_WHY_MAX 512

struct proxy_rule {
	char host[PROXY_HOST_MAX + 1]; /* "" for the "*" rule */
	int any;                      /* "*": every name */
	int wildcard;                 /* "*.example.com": host is "example.com" */
	uint16_t port;                /* 0: any port */
};

struct proxy_cidr {
	int family;                   /* AF_INET or AF_INET6 */
	uint8_t addr[16];             /* network, host bits cleared */
	int plen;                     /* prefix length, 0..32 or 0..128 */
};

/* Value type, no heap: copy freely, zero it to empty (which allows nothing). */
struct proxy_policy {
	struct proxy_rule rules[PROXY_RULES_MAX];
	size_t nrules;
	struct proxy_cidr cidrs[PROXY_CIDRS_MAX];
	size_t ncidrs;
};

/*
 * Adds one allow entry: "*", "NAME", "*.NAME", each with an optional
 * ":PORT" (1..65535). NAME is a DNS name (labels of [a-z0-9-], 1..63 bytes,
 * no leading or trailing '-', at most 253 bytes, upper case folded, one
 * trailing dot dropped) or a dotted-quad IPv4 literal; a name whose last
 * label is all digits is refused (no TLD is, and "2130706433" must not mean
 * 127.0.0.1). "[v6]" literals are refused: name them as a CIDR.
 * Returns 0, or -1 with a one-line reason in why (why_len bytes, NUL-ended)
 * and the policy unchanged (also when it is full: PROXY_RULES_MAX).
 */
int proxy_policy_add_allow(struct proxy_policy *p, const char *entry, char *why,
    size_t why_len);

/*
 * Adds a CIDR ("10.1.0.0/16", "fd00::/8", a bare address = /32 or /128)
 * the proxy may connect to although it lies in a refused range (an
 * operator's explicit choice, SPEC §8). Host bits must be zero. Returns 0,
 * or -1 with a reason in why and the policy unchanged.
 */
int proxy_policy_add_cidr(struct proxy_policy *p, const char *cidr, char *why,
    size_t why_len);

/*
 * Parses the proxy's policy file: one entry per line, "allow ENTRY" or
 * "cidr CIDR"; blank lines and lines starting with '#' skipped. text is
 * len bytes (no NUL needed). Fills *p from empty. Returns 0, or -1 with
 * "line N: reason" in why and *p emptied (a bad file allows nothing).
 */
int proxy_policy_parse(struct proxy_policy *p, const char *text, size_t len,
    char *why, size_t why_len);

/* Formats a one-line reason into why (len bytes; why NULL or len 0:
 * nothing), for the policy's and the request parser's refusals. */
void proxy_vwhy(char *why, size_t len, const char *fmt, va_list ap);

/*
 * Parses a port of n bytes (no NUL needed): 1..65535 in decimal, no sign,
 * no leading zero (so "0443" cannot pass for 443 anywhere). Used by the
 * allow entries and the proxy's request authority (proxy_req.c). Returns 0
 * with *port set, or -1.
 */
int proxy_port_parse(const char *s, size_t n, uint16_t *port);

/*
 * Normalises a host as a client named it (request target or Host header):
 * len bytes, case folded into out (PROXY_HOST_MAX + 1 bytes), one trailing
 * dot dropped, IPv6 brackets kept off (is_v6 set). Refuses what
 * proxy_policy_add_allow would refuse for a name, plus empty, '%', '@' and
 * any byte outside [A-Za-z0-9.-]. Returns 0 (*is_ip set for an IPv4 or IPv6
 * literal) or -1 with a reason in why.
 */
int proxy_host_normalise(const char *host, size_t len, char *out, int *is_ip,
    int *is_v6, char *why, size_t why_len);

/*
 * 1 when the policy allows a normalised host (proxy_host_normalise) on
 * port, else 0. "*" matches all; "NAME" matches exactly NAME; "*.NAME"
 * matches any name ending in ".NAME" (not NAME itself); an entry with a
 * port matches only that port. An IP literal matches only "*", an entry
 * naming the same literal, or (any port) one of p's CIDRs.
 */
int proxy_policy_allows(const struct proxy_policy *p, const char *host, uint16_t port);

/*
 * 1 when the proxy must not connect to sa (an IPv4 or IPv6 socket
 * address; anything else counts as refused): unspecified, loopback,
 * RFC 1918, CGNAT 100.64/10, link-local 169.254/16 (cloud metadata),
 * IETF 192.0.0/24, 6to4 relay anycast 192.88.99/24, benchmarking
 * 198.18/15, multicast and reserved 224/3, ::1, ::, fc00::/7, fe80::/10,
 * fec0::/10, ff00::/8, discard 100::/64, 64:ff9b:1::/48; IPv4-mapped
 * (::ffff:0:0/96), SIIT IPv4-translated (::ffff:0:0:0/96), NAT64
 * (64:ff9b::/96) and 6to4 (2002::/16) addresses are judged by the IPv4
 * address they carry, Teredo (2001::/32) by both of its: the server's and
 * the client's (stored inverted).
 * Refused ranges are the ones deploy/egress-firewall.sh drops. An address
 * inside one of p's CIDRs is allowed whatever its range (p may be NULL).
 * On 1, *range (if not NULL) names the range (static string).
 */
int proxy_addr_refused(const struct sockaddr *sa, const struct proxy_policy *p,
    const char **range);

/* Formats sa's address (no port) into out; returns out. */
const char *proxy_addr_str(const struct sockaddr *sa, char *out, size_t len);

#endif
