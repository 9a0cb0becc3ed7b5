/*
 * fuzz_proxy_req.c - libFuzzer target: the egress proxy's request-head
 * parser and host rules (broker/proxy/proxy_req.c, proxy_policy.c; adr/0026).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - proxy_req_head_len never reports a head longer than PROXY_HEAD_MAX or
 *    than the input, and a head it reports ends in CRLFCRLF with no earlier
 *    CRLFCRLF; bytes appended after a head change neither its length nor
 *    the parser's verdict;
 *  - a refusal has a 4xx/5xx status, a one-line reason, no output head;
 *  - an accepted request names a host that proxy_host_normalise accepts
 *    again unchanged (normalisation is a fixed point), a port 1..65535 and
 *    a kind; a CONNECT has no output head; an HTTP request's output head
 *    starts with "METHOD /", holds exactly one Host line (the checked
 *    authority), ends with "Connection: close" CRLFCRLF, no bare CR or LF,
 *    and no Proxy-Authorization;
 *  - the allowlist answer for that host under "*" is yes and under an
 *    empty policy no.
 */
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "proxy_policy.h"
#include "proxy/proxy_req.h"

static int
count_host_lines(const char *o, size_t n)
{
	size_t i;
	int c = 0;

	for (i = 0; i + 7 < n; i++)
		if ((i == 0 || o[i - 1] == '\n') && strncasecmp(o + i, "host:", 5) == 0)
			c++;
	return c;
}

static void
check_accepted(const struct proxy_req *r)
{
	char again[PROXY_HOST_MAX + 1], why[PROXY_WHY_MAX], br[PROXY_HOST_MAX + 3];
	int ip, v6;
	size_t i;
	static struct proxy_policy all, none;
	static int init;

	FUZZ_ASSERT(r->port >= 1);
	FUZZ_ASSERT(r->kind == PROXY_REQ_CONNECT || r->kind == PROXY_REQ_HTTP);
	if (r->host_is_v6) {
		snprintf(br, sizeof(br), "[%s]", r->host);
		FUZZ_ASSERT(proxy_host_normalise(br, strlen(br), again, &ip, &v6, why,
		    sizeof(why)) == 0);
	} else {
		FUZZ_ASSERT(proxy_host_normalise(r->host, strlen(r->host), again, &ip, &v6, why,
		    sizeof(why)) == 0);
	}
	FUZZ_ASSERT(strcmp(again, r->host) == 0);
	FUZZ_ASSERT(ip == r->host_is_ip && v6 == r->host_is_v6);
	if (!init) {
		FUZZ_ASSERT(proxy_policy_add_allow(&all, "*", why, sizeof(why)) == 0);
		init = 1;
	}
	FUZZ_ASSERT(proxy_policy_allows(&all, r->host, r->port) == 1);
	FUZZ_ASSERT(proxy_policy_allows(&none, r->host, r->port) == 0);
	if (r->kind == PROXY_REQ_CONNECT) {
		FUZZ_ASSERT(r->out == NULL);
		return;
	}
	FUZZ_ASSERT(r->out != NULL && r->out_len > 0);
	FUZZ_ASSERT(strncmp(r->out, r->method, strlen(r->method)) == 0);
	FUZZ_ASSERT(r->out[strlen(r->method)] == ' ' && r->out[strlen(r->method) + 1] == '/');
	FUZZ_ASSERT(r->out_len >= 21 && memcmp(r->out + r->out_len - 21,
	    "Connection: close\r\n\r\n", 21) == 0);
	FUZZ_ASSERT(count_host_lines(r->out, r->out_len) == 1);
	for (i = 0; i < r->out_len; i++) {
		if (r->out[i] == '\n')
			FUZZ_ASSERT(i > 0 && r->out[i - 1] == '\r');
		if (r->out[i] == '\r')
			FUZZ_ASSERT(i + 1 < r->out_len && r->out[i + 1] == '\n');
		FUZZ_ASSERT(r->out[i] != '\0');
	}
	FUZZ_ASSERT(memmem(r->out, r->out_len, "\nProxy-Authorization:", 21) == NULL);
	FUZZ_ASSERT(memmem(r->out, r->out_len, "\nproxy-authorization:", 21) == NULL);
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	const char *buf = (const char *)data;
	struct proxy_req r, r2;
	char why[PROXY_WHY_MAX], why2[PROXY_WHY_MAX], *ext;
	int status = 0, status2 = 0, rc, rc2;
	long hl;

	hl = proxy_req_head_len(buf, size);
	FUZZ_ASSERT(hl >= -2 && hl <= (long)size && hl <= PROXY_HEAD_MAX);
	if (hl <= 0) {
		/* Not a head: the parser must refuse it as one anyway. */
		if (size <= PROXY_HEAD_MAX) {
			rc = proxy_req_parse(buf, size, &r, &status, why, sizeof(why));
			if (rc == 0) {
				FUZZ_ASSERT(size >= 4 && memcmp(buf + size - 4, "\r\n\r\n", 4) == 0);
				check_accepted(&r);
				proxy_req_clear(&r);
			}
		}
		return 0;
	}
	FUZZ_ASSERT(memcmp(buf + hl - 4, "\r\n\r\n", 4) == 0);
	FUZZ_ASSERT(memmem(buf, (size_t)hl - 1, "\r\n\r\n", 4) == NULL);
	rc = proxy_req_parse(buf, (size_t)hl, &r, &status, why, sizeof(why));
	if (rc != 0) {
		FUZZ_ASSERT(status >= 400 && status <= 599);
		FUZZ_ASSERT(strlen(why) > 0 && strpbrk(why, "\r\n") == NULL);
		FUZZ_ASSERT(r.out == NULL);
	} else {
		check_accepted(&r);
	}
	/* The same head followed by more bytes: same length, same verdict. */
	ext = malloc((size_t)hl + 8);
	FUZZ_ASSERT(ext != NULL);
	memcpy(ext, buf, (size_t)hl);
	memcpy(ext + hl, "GET / HT", 8);
	FUZZ_ASSERT(proxy_req_head_len(ext, (size_t)hl + 8) == hl);
	rc2 = proxy_req_parse(ext, (size_t)hl, &r2, &status2, why2, sizeof(why2));
	FUZZ_ASSERT(rc2 == rc);
	if (rc == 0) {
		FUZZ_ASSERT(strcmp(r.host, r2.host) == 0 && r.port == r2.port);
		FUZZ_ASSERT(r.out_len == r2.out_len);
	}
	free(ext);
	proxy_req_clear(&r);
	proxy_req_clear(&r2);
	return 0;
}
