/* test_proxy_policy.c - the egress proxy's allowlist entries, name matching, refused ranges, operator CIDRs and request-head parser as tables of verdicts (adr/0026). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "proxy_policy.h"
#include "proxy/proxy_req.h"

#define OK 1
#define NO 0

static struct proxy_policy pol;

static void
policy_of(const char *const *entries)
{
	char why[PROXY_WHY_MAX];

	memset(&pol, 0, sizeof(pol));
	for (; *entries != NULL; entries++) {
		if (proxy_policy_add_allow(&pol, *entries, why, sizeof(why)) != 0)
			fail_msg("entry %s refused: %s", *entries, why);
	}
}

struct entry_case {
	const char *entry;
	int ok;
	const char *word;   /* for NO: in the reason */
};

static const struct entry_case entry_cases[] = {
	{ "*", OK, NULL },
	{ "pypi.org", OK, NULL },
	{ "PyPI.ORG", OK, NULL },
	{ "*.pythonhosted.org", OK, NULL },
	{ "api.example.com:443", OK, NULL },
	{ "*.example.com:8443", OK, NULL },
	{ "*:443", OK, NULL },
	{ "203.0.113.5", OK, NULL },
	{ "203.0.113.5:80", OK, NULL },
	{ "a-b.c-d.e", OK, NULL },
	{ "xn--bcher-kva.example", OK, NULL },
	{ "", NO, "empty" },
	{ "pypi.org:", NO, "port" },
	{ "pypi.org:0", NO, "port" },
	{ "pypi.org:65536", NO, "port" },
	{ "pypi.org:08", NO, "port" },
	{ "pypi.org:44x", NO, "port" },
	{ "*.", NO, "empty" },
	{ "**.example.com", NO, "'*'" },
	{ "a.*.example.com", NO, "'*'" },
	{ "*example.com", NO, "'*'" },
	{ "example.com.", NO, "trailing dot" },
	{ "exa mple.com", NO, "[a-z0-9.-]" },
	{ "ex_ample.com", NO, "[a-z0-9.-]" },
	{ "-example.com", NO, "'-'" },
	{ "example-.com", NO, "'-'" },
	{ "a..b", NO, "empty label" },
	{ ".example.com", NO, "empty label" },
	{ "2130706433", NO, "all-digit" },
	{ "1.2.3", NO, "all-digit" },
	{ "example.123", NO, "all-digit" },
	{ "010.1.1.1", NO, "all-digit" },
	{ "*.10.0.0.1", NO, "address" },
	{ "[::1]", NO, "CIDR" },
	{ "exa%6dple.com", NO, "[a-z0-9.-]" },
	{ "user@example.com", NO, "[a-z0-9.-]" },
	{ "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", NO, "63" },
};

static void
test_allow_entries_are_checked_as_a_table(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(entry_cases) / sizeof(entry_cases[0]); i++) {
		const struct entry_case *c = &entry_cases[i];
		struct proxy_policy p;
		char why[PROXY_WHY_MAX] = "";
		int rc;

		memset(&p, 0, sizeof(p));
		rc = proxy_policy_add_allow(&p, c->entry, why, sizeof(why));
		if (c->ok && rc != 0)
			fail_msg("'%s' refused: %s", c->entry, why);
		if (!c->ok) {
			if (rc == 0)
				fail_msg("'%s' accepted", c->entry);
			if (strstr(why, c->word) == NULL)
				fail_msg("'%s': reason '%s' lacks '%s'", c->entry, why, c->word);
			assert_int_equal(p.nrules, 0);
		}
	}
}

struct match_case {
	const char *host;
	uint16_t port;
	int ok;
};

static void
test_names_match_exactly_by_suffix_and_by_port(void **state)
{
	static const char *const entries[] = { "allowed.test", "*.pythonhosted.org",
		"api.example.com:443", "203.0.113.5", NULL };
	static const struct match_case cases[] = {
		{ "allowed.test", 80, OK },
		{ "allowed.test", 443, OK },
		{ "allowed.test", 8080, OK },
		{ "www.allowed.test", 443, NO },        /* no wildcard: exact only */
		{ "allowed.test.evil.com", 443, NO },
		{ "xallowed.test", 443, NO },
		{ "denied.test", 443, NO },
		{ "files.pythonhosted.org", 443, OK },
		{ "a.b.pythonhosted.org", 443, OK },
		{ "pythonhosted.org", 443, NO },        /* "*." is not the apex */
		{ "evilpythonhosted.org", 443, NO },
		{ "pythonhosted.org.evil", 443, NO },
		{ "api.example.com", 443, OK },
		{ "api.example.com", 80, NO },
		{ "203.0.113.5", 80, OK },
		{ "203.0.113.6", 80, NO },
	};
	size_t i;

	(void)state;
	policy_of(entries);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (proxy_policy_allows(&pol, cases[i].host, cases[i].port) != cases[i].ok)
			fail_msg("%s:%u: expected %s", cases[i].host, cases[i].port,
			    cases[i].ok ? "allowed" : "denied");
}

static void
test_star_allows_every_name_and_empty_allows_none(void **state)
{
	static const char *const all[] = { "*", NULL };
	static const char *const tls[] = { "*:443", NULL };
	static const char *const none[] = { NULL };

	(void)state;
	policy_of(all);
	assert_true(proxy_policy_allows(&pol, "anything.example", 1));
	assert_true(proxy_policy_allows(&pol, "10.0.0.1", 22));
	policy_of(tls);
	assert_true(proxy_policy_allows(&pol, "anything.example", 443));
	assert_false(proxy_policy_allows(&pol, "anything.example", 80));
	policy_of(none);
	assert_false(proxy_policy_allows(&pol, "allowed.test", 443));
}

struct norm_case {
	const char *in;
	const char *out;    /* NULL: refused */
	int is_ip;
};

static void
test_client_hosts_are_folded_and_odd_forms_refused(void **state)
{
	static const struct norm_case cases[] = {
		{ "Allowed.TEST", "allowed.test", 0 },
		{ "allowed.test.", "allowed.test", 0 },   /* absolute form, same name */
		{ "allowed.test..", NULL, 0 },
		{ "198.51.100.10", "198.51.100.10", 1 },
		{ "[::1]", "::1", 1 },
		{ "[::FFFF:127.0.0.1]", "::ffff:127.0.0.1", 1 },
		{ "[fe80::1%eth0]", NULL, 0 },
		{ "0x7f.0.0.1", NULL, 0 },
		{ "0177.0.0.1", NULL, 0 },
		{ "127.1", NULL, 0 },
		{ "2130706433", NULL, 0 },
		{ "allowed.test%00", NULL, 0 },
		{ "a@allowed.test", NULL, 0 },
		{ "", NULL, 0 },
		{ ".", NULL, 0 },
		{ "[]", NULL, 0 },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[PROXY_HOST_MAX + 1], why[PROXY_WHY_MAX];
		int ip, v6, rc;

		rc = proxy_host_normalise(cases[i].in, strlen(cases[i].in), out, &ip, &v6, why,
		    sizeof(why));
		if (cases[i].out == NULL) {
			if (rc == 0)
				fail_msg("'%s' accepted as '%s'", cases[i].in, out);
			continue;
		}
		if (rc != 0)
			fail_msg("'%s' refused: %s", cases[i].in, why);
		assert_string_equal(out, cases[i].out);
		assert_int_equal(ip, cases[i].is_ip);
	}
}

static int
refused(const char *addr, const struct proxy_policy *p, const char **range)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		ss.ss_family = AF_INET;
	} else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		ss.ss_family = AF_INET6;
	} else {
		fail_msg("bad test address %s", addr);
	}
	return proxy_addr_refused((struct sockaddr *)&ss, p, range);
}

struct addr_case {
	const char *addr;
	int refused;
	const char *word;
};

static void
test_private_loopback_link_local_and_friends_are_refused(void **state)
{
	static const struct addr_case cases[] = {
		{ "169.254.169.254", 1, "metadata" },
		{ "169.254.0.1", 1, "link-local" },
		{ "127.0.0.1", 1, "loopback" },
		{ "127.255.255.254", 1, "loopback" },
		{ "10.0.0.1", 1, "private" },
		{ "10.255.255.255", 1, "private" },
		{ "172.16.0.1", 1, "private" },
		{ "172.31.255.255", 1, "private" },
		{ "192.168.1.1", 1, "private" },
		{ "100.64.0.1", 1, "CGNAT" },
		{ "100.127.255.255", 1, "CGNAT" },
		{ "0.0.0.0", 1, "this network" },
		{ "192.0.0.170", 1, "IETF" },
		{ "198.18.0.1", 1, "benchmarking" },
		{ "224.0.0.1", 1, "multicast" },
		{ "255.255.255.255", 1, "reserved" },
		{ "::1", 1, "loopback" },
		{ "::", 1, "unspecified" },
		{ "fc00::1", 1, "unique local" },
		{ "fd12:3456::1", 1, "unique local" },
		{ "fe80::1", 1, "link-local" },
		{ "febf::1", 1, "link-local" },
		{ "fec0::1", 1, "site-local" },
		{ "ff02::1", 1, "multicast" },
		{ "::ffff:169.254.169.254", 1, "metadata" },   /* IPv4-mapped */
		{ "::ffff:10.1.2.3", 1, "private" },
		{ "64:ff9b::a9fe:a9fe", 1, "metadata" },       /* NAT64 of 169.254.169.254 */
		{ "2002:a9fe:a9fe::1", 1, "metadata" },        /* 6to4 of it */
		{ "::ffff:0:a9fe:a9fe", 1, "metadata" },       /* SIIT IPv4-translated */
		{ "::ffff:0:10.1.2.3", 1, "private" },
		{ "2001:0:a9fe:a9fe::1", 1, "metadata" },      /* Teredo, server */
		{ "2001:0:c633:640a:0:0:5601:5601", 1, "metadata" }, /* Teredo, client ~ */
		{ "2001:0:c633:640a:0:0:f5ff:fffe", 1, "private" },  /* client 10.0.0.1 */
		{ "192.88.99.1", 1, "6to4 relay" },
		{ "2002:c058:6301::1", 1, "6to4 relay" },      /* 6to4 of the relay */
		{ "::127.0.0.1", 1, "loopback" },              /* IPv4-compatible */
		{ "64:ff9b:1::1", 1, "NAT64" },
		{ "100::1", 1, "discard" },
		/* the rest of the world */
		{ "198.51.100.10", 0, NULL },
		{ "8.8.8.8", 0, NULL },
		{ "172.15.255.255", 0, NULL },
		{ "172.32.0.0", 0, NULL },
		{ "100.63.255.255", 0, NULL },
		{ "100.128.0.0", 0, NULL },
		{ "169.253.255.255", 0, NULL },
		{ "11.0.0.1", 0, NULL },
		{ "2001:db8::1", 0, NULL },
		{ "2606:4700::1111", 0, NULL },
		{ "::ffff:198.51.100.10", 0, NULL },
		{ "2002:c633:640a::1", 0, NULL },
		{ "::ffff:0:198.51.100.10", 0, NULL },
		{ "2001:0:c633:640a:0:0:39cc:9bf5", 0, NULL }, /* both 198.51.100.10 */
		{ "192.88.98.255", 0, NULL },
		{ "192.88.100.0", 0, NULL },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *range = NULL;
		int r = refused(cases[i].addr, NULL, &range);

		if (r != cases[i].refused)
			fail_msg("%s: expected %s", cases[i].addr, cases[i].refused ? "refused" :
			    "allowed");
		if (r && strstr(range, cases[i].word) == NULL)
			fail_msg("%s: range '%s' lacks '%s'", cases[i].addr, range, cases[i].word);
	}
}

static void
test_an_operator_cidr_opens_exactly_that_range(void **state)
{
	struct proxy_policy p;
	char why[PROXY_WHY_MAX];

	(void)state;
	memset(&p, 0, sizeof(p));
	assert_int_equal(proxy_policy_add_cidr(&p, "10.77.0.0/16", why, sizeof(why)), 0);
	assert_int_equal(proxy_policy_add_cidr(&p, "fd00:1::/32", why, sizeof(why)), 0);
	assert_int_equal(proxy_policy_add_cidr(&p, "192.168.5.7", why, sizeof(why)), 0);
	assert_false(refused("10.77.1.2", &p, NULL));
	assert_false(refused("10.77.255.255", &p, NULL));
	assert_true(refused("10.78.0.1", &p, NULL));
	assert_true(refused("10.76.255.255", &p, NULL));
	assert_false(refused("::ffff:10.77.0.9", &p, NULL));
	assert_false(refused("fd00:1:2::3", &p, NULL));
	assert_true(refused("fd00:2::3", &p, NULL));
	assert_false(refused("192.168.5.7", &p, NULL));
	assert_true(refused("192.168.5.8", &p, NULL));
	assert_true(refused("169.254.169.254", &p, NULL));
	/* a CIDR names its addresses as hosts too (any port), nothing else */
	assert_true(proxy_policy_allows(&p, "10.77.3.4", 22));
	assert_true(proxy_policy_allows(&p, "fd00:1::5", 443));
	assert_false(proxy_policy_allows(&p, "10.78.3.4", 22));
	assert_false(proxy_policy_allows(&p, "allowed.test", 443));
	/* refused CIDRs: the list is unchanged */
	assert_int_equal(proxy_policy_add_cidr(&p, "10.77.0.1/16", why, sizeof(why)), -1);
	assert_non_null(strstr(why, "host bits"));
	assert_int_equal(proxy_policy_add_cidr(&p, "10.0.0.0/33", why, sizeof(why)), -1);
	assert_int_equal(proxy_policy_add_cidr(&p, "10.0.0.0/", why, sizeof(why)), -1);
	assert_int_equal(proxy_policy_add_cidr(&p, "10.0.0.0/08", why, sizeof(why)), -1);
	assert_int_equal(proxy_policy_add_cidr(&p, "10.0/8", why, sizeof(why)), -1);
	assert_int_equal(proxy_policy_add_cidr(&p, "fe80::1%eth0/128", why, sizeof(why)), -1);
	assert_int_equal(proxy_policy_add_cidr(&p, "example.com/8", why, sizeof(why)), -1);
	assert_int_equal(p.ncidrs, 3);
}

static void
test_policy_file_parses_and_a_bad_line_allows_nothing(void **state)
{
	static const char good[] = "# sbx egress policy\nallow allowed.test\r\n\n"
	    "allow *.pythonhosted.org:443\ncidr 10.77.0.0/16\n";
	static const char bad[] = "allow allowed.test\nallow bad..name\n";
	static const char verb[] = "allow allowed.test\ndeny x.test\n";
	struct proxy_policy p;
	char why[PROXY_WHY_MAX];

	(void)state;
	assert_int_equal(proxy_policy_parse(&p, good, sizeof(good) - 1, why, sizeof(why)), 0);
	assert_int_equal(p.nrules, 2);
	assert_int_equal(p.ncidrs, 1);
	assert_true(proxy_policy_allows(&p, "files.pythonhosted.org", 443));
	assert_int_equal(proxy_policy_parse(&p, bad, sizeof(bad) - 1, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "line 2"));
	assert_int_equal(p.nrules, 0);
	assert_false(proxy_policy_allows(&p, "allowed.test", 443));
	assert_int_equal(proxy_policy_parse(&p, verb, sizeof(verb) - 1, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "line 2"));
	assert_int_equal(proxy_policy_parse(&p, "allow a.test\0x", 14, why, sizeof(why)), -1);
}

static void
test_policy_rule_limit_is_enforced(void **state)
{
	struct proxy_policy p;
	char e[32], why[PROXY_WHY_MAX];
	int i;

	(void)state;
	memset(&p, 0, sizeof(p));
	for (i = 0; i < PROXY_RULES_MAX; i++) {
		snprintf(e, sizeof(e), "h%d.test", i);
		assert_int_equal(proxy_policy_add_allow(&p, e, why, sizeof(why)), 0);
	}
	assert_int_equal(proxy_policy_add_allow(&p, "one-more.test", why, sizeof(why)), -1);
	assert_int_equal(p.nrules, PROXY_RULES_MAX);
}

/* ---------- request heads ---------- */

struct req_case {
	const char *head;
	int status;         /* 0: accepted */
	int kind;
	const char *host;
	unsigned port;
	const char *out;    /* expected upstream head (HTTP), NULL: not checked */
};

static const struct req_case req_cases[] = {
	{ "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n", 0,
	  PROXY_REQ_CONNECT, "allowed.test", 443, NULL },
	{ "CONNECT Allowed.Test.:8443 HTTP/1.0\r\n\r\n", 0, PROXY_REQ_CONNECT,
	  "allowed.test", 8443, NULL },
	{ "CONNECT 198.51.100.10:443 HTTP/1.1\r\n\r\n", 0, PROXY_REQ_CONNECT,
	  "198.51.100.10", 443, NULL },
	{ "CONNECT [::1]:443 HTTP/1.1\r\n\r\n", 0, PROXY_REQ_CONNECT, "::1", 443, NULL },
	{ "GET http://allowed.test/a/b?c=d HTTP/1.1\r\nHost: evil.test\r\nUser-Agent: x\r\n"
	  "Proxy-Authorization: Basic Zm9v\r\nProxy-Connection: keep-alive\r\n"
	  "Connection: keep-alive\r\n\r\n", 0, PROXY_REQ_HTTP, "allowed.test", 80,
	  "GET /a/b?c=d HTTP/1.1\r\nUser-Agent: x\r\nHost: allowed.test\r\n"
	  "Connection: close\r\n\r\n" },
	{ "GET http://allowed.test:8080 HTTP/1.0\r\n\r\n", 0, PROXY_REQ_HTTP, "allowed.test",
	  8080, "GET / HTTP/1.0\r\nHost: allowed.test:8080\r\nConnection: close\r\n\r\n" },
	{ "GET HTTP://allowed.test?x HTTP/1.1\r\n\r\n", 0, PROXY_REQ_HTTP, "allowed.test", 80,
	  "GET /?x HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n" },
	{ "POST /upload HTTP/1.1\r\nHost: allowed.test:81\r\nContent-Length:5\r\n\r\n", 0,
	  PROXY_REQ_HTTP, "allowed.test", 81,
	  "POST /upload HTTP/1.1\r\nContent-Length: 5\r\nHost: allowed.test:81\r\n"
	  "Connection: close\r\n\r\n" },
	/* refused */
	{ "CONNECT allowed.test HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "CONNECT allowed.test:0 HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "CONNECT allowed.test:65536 HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "CONNECT allowed.test:-1 HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "CONNECT allowed.test:0443 HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "CONNECT user@allowed.test:443 HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "CONNECT allowed.test:443 HTTP/2.0\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "CONNECT allowed.test:443 HTTP/1.1\n\n", 400, 0, NULL, 0, NULL },
	{ "CONNECT allowed.test:443  HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "connect allowed.test:443 HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET https://allowed.test/ HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET http://evil.test@allowed.test/ HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET http://allowed.test/#frag HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET ftp://allowed.test/ HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET * HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET / HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET / HTTP/1.1\r\nHost : a.test\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET / HTTP/1.1\r\nHost: a.test\r\n folded\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET / HTTP/1.1\r\nHost: a.test\r\nX\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET / HTTP/1.1\r\nHost: a.test\rX: y\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET / HTTP/1.1\r\nHost: a.test\r\nX: \x01\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n"
	  "Transfer-Encoding: chunked\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
	  400, 0, NULL, 0, NULL },
	{ "GET http://2130706433/ HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET http://0x7f.1/ HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "GET http:///x HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, 0, NULL, 0, NULL },
	{ "AVERYVERYLONGMETHODNAME http://a.test/ HTTP/1.1\r\n\r\n", 400, 0, NULL, 0, NULL },
};

static void
test_request_heads_are_parsed_as_a_table(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(req_cases) / sizeof(req_cases[0]); i++) {
		const struct req_case *c = &req_cases[i];
		struct proxy_req r;
		char why[PROXY_WHY_MAX] = "";
		int status = 0, rc;
		size_t n = strlen(c->head);

		rc = proxy_req_parse(c->head, n, &r, &status, why, sizeof(why));
		if (c->status != 0) {
			if (rc == 0)
				fail_msg("case %zu accepted: %s", i, c->head);
			if (status != c->status)
				fail_msg("case %zu: status %d, expected %d", i, status, c->status);
			assert_true(strlen(why) > 0);
			assert_null(strpbrk(why, "\r\n"));
			assert_null(r.out);
			continue;
		}
		if (rc != 0)
			fail_msg("case %zu refused (%d %s): %s", i, status, why, c->head);
		assert_int_equal(proxy_req_head_len(c->head, n), (long)n);
		assert_int_equal(r.kind, c->kind);
		assert_string_equal(r.host, c->host);
		assert_int_equal(r.port, c->port);
		assert_int_equal(r.head_len, n);
		if (c->out != NULL) {
			assert_int_equal(r.out_len, strlen(c->out));
			assert_memory_equal(r.out, c->out, r.out_len);
		}
		proxy_req_clear(&r);
	}
}

static void
test_refusal_reasons_never_quote_path_or_header_values(void **state)
{
	static const char *const heads[] = {
		"GET http://allowed.test/CANARYPATH#x HTTP/1.1\r\n\r\n",
		"GET /CANARYPATH HTTP/1.1\r\nHost: a.test\r\nHost: CANARYHOST\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nX-Token: CANARYVALUE\x01\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: CANARY\r\n\r\n",
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		struct proxy_req r;
		char why[PROXY_WHY_MAX];
		int status;

		assert_int_equal(proxy_req_parse(heads[i], strlen(heads[i]), &r, &status, why,
		    sizeof(why)), -1);
		if (strstr(why, "CANARY") != NULL)
			fail_msg("reason quotes the request: %s", why);
	}
}

static void
test_head_length_is_bounded(void **state)
{
	char *big = malloc(PROXY_HEAD_MAX + 16);
	struct proxy_req r;
	char why[PROXY_WHY_MAX];
	int status, i;

	(void)state;
	assert_non_null(big);
	memset(big, 'a', PROXY_HEAD_MAX + 16);
	assert_int_equal(proxy_req_head_len(big, 100), 0);
	assert_int_equal(proxy_req_head_len(big, PROXY_HEAD_MAX - 1), 0);
	assert_int_equal(proxy_req_head_len(big, PROXY_HEAD_MAX), -1);
	assert_int_equal(proxy_req_head_len(big, PROXY_HEAD_MAX + 16), -1);
	/* a bare LF is refused as soon as it arrives */
	assert_int_equal(proxy_req_head_len("GET / HTTP/1.1\nHost", 19), -2);
	assert_int_equal(proxy_req_head_len("GET / HTTP/1.1\r\nHost: a\r\n\n", 26), -2);
	assert_int_equal(proxy_req_head_len("GET / HTTP/1.1\r\nHost: a\r\n", 25), 0);
	/* 101 headers: 431 */
	{
		char *h = malloc(4096), *o = h;

		assert_non_null(h);
		o += sprintf(o, "GET http://a.test/ HTTP/1.1\r\n");
		for (i = 0; i <= PROXY_HEADERS_MAX; i++)
			o += sprintf(o, "X%d: y\r\n", i);
		o += sprintf(o, "\r\n");
		assert_int_equal(proxy_req_parse(h, (size_t)(o - h), &r, &status, why,
		    sizeof(why)), -1);
		assert_int_equal(status, 431);
		free(h);
	}
	/* a 4097-byte target: 414 */
	{
		char *h = malloc(8000), *o = h;

		assert_non_null(h);
		o += sprintf(o, "GET http://a.test/");
		memset(o, 'p', 4083);      /* 14 + 4083 = 4097 bytes of target */
		o += 4083;
		o += sprintf(o, " HTTP/1.1\r\n\r\n");
		assert_int_equal(proxy_req_parse(h, (size_t)(o - h), &r, &status, why,
		    sizeof(why)), -1);
		assert_int_equal(status, 414);
		free(h);
	}
	free(big);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allow_entries_are_checked_as_a_table),
		cmocka_unit_test(test_names_match_exactly_by_suffix_and_by_port),
		cmocka_unit_test(test_star_allows_every_name_and_empty_allows_none),
		cmocka_unit_test(test_client_hosts_are_folded_and_odd_forms_refused),
		cmocka_unit_test(test_private_loopback_link_local_and_friends_are_refused),
		cmocka_unit_test(test_an_operator_cidr_opens_exactly_that_range),
		cmocka_unit_test(test_policy_file_parses_and_a_bad_line_allows_nothing),
		cmocka_unit_test(test_policy_rule_limit_is_enforced),
		cmocka_unit_test(test_request_heads_are_parsed_as_a_table),
		cmocka_unit_test(test_refusal_reasons_never_quote_path_or_header_values),
		cmocka_unit_test(test_head_length_is_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
