/*
 * fuzz_ports_head.c - libFuzzer target: the head the ports proxy writes for
 * a sandbox's server from a client's untrusted one (api/api_ports_head.c),
 * and the token checker (api/api_ports_token.c).
 *
 * Input: '\n'-separated fields: method, path, query ("-" for none), then
 * header name and value lines in turns.
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - a refusal adds nothing to the output;
 *  - an accepted head is one request line, "Name: value" lines and an
 *    empty line: it ends in "\r\n\r\n", holds that sequence only there,
 *    and no bare CR or LF; its request line is METHOD SP /... SP HTTP/1.1;
 *  - no Authorization and no sbx_ticket parameter reaches the sandbox;
 *  - exactly one Host, one Connection (close, or Upgrade with *upgrade);
 *  - the token checker accepts no input that is not a token it made.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <sodium.h>

#include "api_ports.h"
#include "fuzz.h"

#define MAXH 64

static size_t
count(const char *hay, const char *needle)
{
	size_t n = 0;
	const char *p = hay;

	while ((p = strcasestr(p, needle)) != NULL) {
		n++;
		p++;
	}
	return n;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return sodium_init() < 0 ? -1 : 0;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	char *buf, *f[3 + 2 * MAXH], *p, *s, *line, *q;
	struct api_ports_hdr h[MAXH];
	struct api_ports_head_in in;
	struct api_ports_token t;
	unsigned char key[API_PORTS_KEY_BYTES] = { 1 };
	struct evbuffer *out;
	struct sbx_err err;
	size_t nf = 0, i, n;
	int up = -1, r;

	if (size > 65536)
		return 0;
	FUZZ_ASSERT(api_ports_token_check(key, (const char *)data, size, 0,
	    &t) == 0 || size == API_PORTS_TOKEN_LEN);
	if ((buf = malloc(size + 1)) == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (p = buf; nf < sizeof(f) / sizeof(f[0]); ) {
		f[nf++] = p;
		if ((p = strchr(p, '\n')) == NULL)
			break;
		*p++ = '\0';
	}
	if (nf < 3) {
		free(buf);
		return 0;
	}
	for (i = 0; 3 + 2 * i + 1 < nf; i++) {
		h[i].name = f[3 + 2 * i];
		h[i].value = f[3 + 2 * i + 1];
	}
	memset(&in, 0, sizeof(in));
	in.method = f[0];
	in.path = f[1];
	in.query = strcmp(f[2], "-") == 0 ? NULL : f[2];
	in.hdrs = h;
	in.nhdrs = i;
	in.body_len = size;
	in.port = 1 + (int)(size % 65535);
	in.client_addr = "192.0.2.1";
	in.proto = "http";
	in.prefix = "/p/x";
	out = evbuffer_new();
	FUZZ_ASSERT(out != NULL);
	r = api_ports_head_build(&in, out, &up, &err);
	n = evbuffer_get_length(out);
	if (r == -1) {
		FUZZ_ASSERT(n == 0 && up == 0);
	} else {
		s = (char *)evbuffer_pullup(out, -1);
		FUZZ_ASSERT(n >= 4 && memchr(s, '\0', n) == NULL);
		s = strndup(s, n);
		FUZZ_ASSERT(s != NULL);
		FUZZ_ASSERT(strcmp(s + n - 4, "\r\n\r\n") == 0);
		FUZZ_ASSERT(strstr(s, "\r\n\r\n") == s + n - 4);
		for (i = 0; i < n; i++) {
			if (s[i] == '\r')
				FUZZ_ASSERT(s[i + 1] == '\n');
			if (s[i] == '\n')
				FUZZ_ASSERT(i > 0 && s[i - 1] == '\r');
		}
		line = strndup(s, strcspn(s, "\r"));
		FUZZ_ASSERT(line != NULL);
		FUZZ_ASSERT(strncmp(line, in.method, strlen(in.method)) == 0);
		FUZZ_ASSERT(line[strlen(in.method)] == ' ' &&
		    line[strlen(in.method) + 1] == '/');
		FUZZ_ASSERT(strchr(line + strlen(in.method) + 1, ' ') ==
		    line + strlen(line) - 9);
		FUZZ_ASSERT(strcmp(line + strlen(line) - 9, " HTTP/1.1") == 0);
		line[strlen(line) - 9] = '\0';
		if ((q = strchr(line, '?')) != NULL)
			for (q++; *q != '\0'; q += *q == '&') {
				n = strcspn(q, "&");
				FUZZ_ASSERT(n > 0);
				FUZZ_ASSERT(!(n >= 10 && strncmp(q, "sbx_ticket",
				    10) == 0 && (n == 10 || q[10] == '=')));
				q += n;
			}
		free(line);
		FUZZ_ASSERT(count(s, "\r\nauthorization:") == 0);
		FUZZ_ASSERT(count(s, "\r\nhost:") == 1);
		FUZZ_ASSERT(count(s, "\r\nconnection:") == 1);
		FUZZ_ASSERT(up ? strstr(s, "\r\nConnection: Upgrade\r\n") != NULL :
		    strstr(s, "\r\nConnection: close\r\n") != NULL);
		free(s);
	}
	evbuffer_free(out);
	free(buf);
	return 0;
}
