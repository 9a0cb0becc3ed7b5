/*
 * fuzz_http_client.c - libFuzzer target: the HTTP/1.1 client's response
 * parser (common/sbx_http_client.c: status line, headers, Content-Length,
 * chunked coding, read-until-close, 101 upgrade), driven through its public
 * entry point over a real unix socket: the target accepts the client's
 * connection and answers with the fuzz bytes, in pieces whose size the
 * first byte chooses, then closes. No change to the client was needed.
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - at most one terminal callback: done() exactly once per request;
 *  - response() at most once, before any body byte, with status 100..599
 *    and never an interim 1xx (those are skipped) other than 101 when an
 *    upgrade was asked for;
 *  - a clean done() came after response(); body bytes never exceed the
 *    bytes sent, and with a Content-Length (not chunked, not 1xx/204/304)
 *    a clean end delivered exactly that many;
 *  - bounded allocation: the client holds at most a bounded header set
 *    (ASan's -malloc_limit_mb catches growth with the input).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "fuzz.h"
#include "reply_server.h"
#include "sbx_http_client.h"

static struct event_base *base;
static int lfd = -1;
static char sock_path[108];

struct seen {
	int responses, dones, status, ok, body_before_response;
	size_t body;
	char cl[32];
	int chunked;
};

static void
on_response(void *arg, struct sbx_http_req *req, int status)
{
	struct seen *s = arg;
	const char *cl, *te;

	s->responses++;
	s->status = status;
	FUZZ_ASSERT(sbx_http_req_status(req) == status);
	cl = sbx_http_req_header(req, "content-length");
	te = sbx_http_req_header(req, "transfer-encoding");
	if (cl != NULL)
		snprintf(s->cl, sizeof(s->cl), "%s", cl);
	s->chunked = te != NULL && strcasestr(te, "chunked") != NULL;
}

static void
on_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct seen *s = arg;

	(void)req;
	FUZZ_ASSERT(len > 0 && buf != NULL);
	if (s->responses == 0)
		s->body_before_response = 1;
	s->body += len;
}

static void
on_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct seen *s = arg;

	(void)req;
	s->dones++;
	s->ok = err == NULL;
	if (err != NULL)
		FUZZ_ASSERT(err->code[0] != '\0');
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	base = event_base_new();
	FUZZ_ASSERT(base != NULL);
	lfd = reply_listen("http", 16, sock_path, sizeof(sock_path));
	return 0;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct sbx_http_request q = { .method = "GET",
	    .path = "/v1.41/_ping" };
	struct sbx_http_cbs cbs;
	struct sbx_http_req *req;
	struct sbx_err err;
	struct seen s;
	size_t off = 0, n, step;
	int cfd, turns;
	char cl_text[32];

	if (size == 0)
		return 0;
	step = (size_t)(data[0] & 0x3f);  /* 0: all at once */
	q.upgrade = (data[0] & 0x40) != 0;
	if (data[0] & 0x80)
		q.method = "HEAD";
	data++;
	size--;
	memset(&s, 0, sizeof(s));
	cbs.response = on_response;
	cbs.body = on_body;
	cbs.done = on_done;
	cbs.arg = &s;
	req = sbx_http_request(base, sock_path, &q, NULL, &cbs, &err);
	FUZZ_ASSERT(req != NULL);
	cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	FUZZ_ASSERT(cfd >= 0);
	while (off < size && s.dones == 0) {
		n = step == 0 || step > size - off ? size - off : step;
		if (write(cfd, data + off, n) != (ssize_t)n)
			break;  /* the client closed: it refused the response */
		off += n;
		event_base_loop(base, EVLOOP_NONBLOCK);
	}
	shutdown(cfd, SHUT_WR);
	for (turns = 0; s.dones == 0 && turns < 1000; turns++)
		event_base_loop(base, EVLOOP_ONCE);
	close(cfd);
	FUZZ_ASSERT(s.dones == 1);
	FUZZ_ASSERT(s.responses <= 1);
	FUZZ_ASSERT(!s.body_before_response);
	FUZZ_ASSERT(s.body <= size);
	if (s.responses == 1) {
		FUZZ_ASSERT(s.status >= 100 && s.status <= 599);
		FUZZ_ASSERT(s.status >= 200 || (s.status == 101 && q.upgrade));
	}
	if (s.ok) {
		FUZZ_ASSERT(s.responses == 1);
		if (s.cl[0] != '\0' && !s.chunked && s.status >= 200 &&
		    s.status != 204 && s.status != 304 && !(data[-1] & 0x80)) {
			snprintf(cl_text, sizeof(cl_text), "%zu", s.body);
			FUZZ_ASSERT(strtoull(s.cl, NULL, 10) == s.body);
		}
	}
	return 0;
}
