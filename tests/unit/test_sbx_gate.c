/* test_sbx_gate.c - the shared request gate: its parser on plain buffers, its verdicts, and a gated evhttp server on 127.0.0.1:0. */
#include <sys/socket.h>
#include <poll.h>
#include <sys/time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "sbx_err.h"
#include "sbx_gate.h"
#include "sbx_proto.h"

static const struct sbx_gate_limits LIM = {
	.head_max = 16384, .headers_max = 100, .header_timeout_ms = 10000,
	.max_connections = 512,
};

/* Parses text (NUL-terminated) as one head; returns sbx_gate_parse's value. */
static int
parse(const char *text, struct sbx_gate_head *h)
{
	return sbx_gate_parse(text, strlen(text), &LIM, h);
}

static void
test_parse_accepts_one_framing(void **state)
{
	struct sbx_gate_head h;

	(void)state;
	assert_int_equal(parse("GET /a?b=c HTTP/1.1\r\nHost: x\r\n"
	    "Authorization: bEaReR k\r\n\r\nrest", &h), 1);
	assert_int_equal(h.bad, SBX_GATE_PASS);
	assert_int_equal(h.len, strlen("GET /a?b=c HTTP/1.1\r\nHost: x\r\n"
	    "Authorization: bEaReR k\r\n\r\n"));
	assert_int_equal(h.line_ok, 1);
	assert_int_equal(h.type, EVHTTP_REQ_GET);
	assert_int_equal(h.nheaders, 2);
	assert_int_equal(h.alen, strlen("bEaReR k"));
	assert_memory_equal(h.auth, "bEaReR k", h.alen);
	/* The first Host, for the api's preview Host (adr/0053). */
	assert_int_equal(h.hostlen, 1);
	assert_memory_equal(h.host, "x", 1);
	assert_int_equal(parse("PUT /f HTTP/1.1\r\nContent-Length: 12\r\n\r\n",
	    &h), 1);
	assert_null(h.host);
	assert_int_equal(h.bad, SBX_GATE_PASS);
	assert_int_equal(h.has_cl, 1);
	assert_int_equal(h.cl, 12);
	assert_int_equal(parse("PUT /f HTTP/1.1\r\ntransfer-encoding: Chunked"
	    "\r\n\r\n", &h), 1);
	assert_int_equal(h.bad, SBX_GATE_PASS);
	assert_int_equal(h.chunked, 1);
	/* Bare LF line ends are taken (RFC 9112 §2.2). */
	assert_int_equal(parse("GET / HTTP/1.0\nA: b\n\n", &h), 1);
	assert_int_equal(h.bad, SBX_GATE_PASS);
}

static void
test_parse_refuses_every_ambiguous_framing(void **state)
{
	static const char *const heads[] = {
		"PUT /f HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
		/* equal values too: RFC 9112 §6.3 lets us reject, and we do */
		"PUT /f HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
		"PUT /f HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
		"PUT /f HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
		"PUT /f HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n",
		"PUT /f HTTP/1.1\r\nContent-Length: 5\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n",
		"PUT /f HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"PUT /f HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n",
		"PUT /f HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n",
		/* obs-fold */
		"GET / HTTP/1.1\r\nX-A: b\r\n c\r\n\r\n",
		"GET / HTTP/1.1\r\nX-A: b\r\n\tc\r\n\r\n",
		"GET / HTTP/1.1\r\nContent-Length : 0\r\n\r\n",
		"GET / HTTP/1.1\r\nNoColon\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n",
		"GET / HTTP/1.1\r\nAuthorization: Bearer a\r\n"
		    "Authorization: Bearer a\r\n\r\n",
		"GET / HTTP/1.1\r\nExpect: something\r\n\r\n",
		"HEAD / HTTP/1.1\r\nContent-Length: 3\r\n\r\n",
		"get / HTTP/1.1\r\n\r\n",
		"GET / HTTP/2.0\r\n\r\n",
		"GET  / HTTP/1.1\r\n\r\n",
		"GARBAGE\r\n\r\n",
		"BREW /pot HTTP/1.1\r\n\r\n",
	};
	struct sbx_gate_head h;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		size_t n = strlen(heads[i]);

		if (i == 14)   /* holds a NUL: measure past it */
			n += 1 + strlen(heads[i] + n + 1);
		assert_int_equal(sbx_gate_parse(heads[i], n, &LIM, &h), 1);
		if (h.bad != SBX_GATE_BAD_REQUEST)
			fail_msg("head %zu not refused: %s", i, heads[i]);
		assert_non_null(h.why);
	}
	assert_int_equal(parse(heads[15], &h), 1);
	assert_int_equal(h.nauth, 2);
}

static void
test_parse_limits_headers_and_size(void **state)
{
	char *buf = malloc(32768);
	struct sbx_gate_head h;
	size_t n, i;

	(void)state;
	assert_non_null(buf);
	/* 100 fields pass, 101 are 431. */
	for (int count = 100; count <= 101; count++) {
		n = (size_t)sprintf(buf, "GET / HTTP/1.1\r\n");
		for (i = 0; i < (size_t)count; i++)
			n += (size_t)sprintf(buf + n, "X-%zu: v\r\n", i);
		n += (size_t)sprintf(buf + n, "\r\n");
		assert_int_equal(sbx_gate_parse(buf, n, &LIM, &h), 1);
		assert_int_equal(h.bad, count == 100 ? SBX_GATE_PASS :
		    SBX_GATE_HEAD_TOO_LARGE);
	}
	/* A 20 KiB request line: 414 once head_max bytes hold no line end. */
	n = (size_t)sprintf(buf, "GET /");
	memset(buf + n, 'a', 20480);
	n += 20480;
	assert_int_equal(sbx_gate_parse(buf, LIM.head_max - 1, &LIM, &h), 0);
	assert_int_equal(sbx_gate_parse(buf, n, &LIM, &h), 1);
	assert_int_equal(h.bad, SBX_GATE_URI_TOO_LONG);
	/* Headers past head_max without an end: 431. */
	n = (size_t)sprintf(buf, "GET / HTTP/1.1\r\nX: ");
	memset(buf + n, 'b', 20000);
	n += 20000;
	assert_int_equal(sbx_gate_parse(buf, n, &LIM, &h), 1);
	assert_int_equal(h.bad, SBX_GATE_HEAD_TOO_LARGE);
	free(buf);
}

static void
test_parse_needs_the_whole_head(void **state)
{
	static const char head[] = "POST /x HTTP/1.1\r\nContent-Length: 3\r\n"
	    "Authorization: Bearer k\r\n\r\n";
	struct sbx_gate_head h;
	size_t n;

	(void)state;
	for (n = 0; n < sizeof(head) - 1; n++)
		assert_int_equal(sbx_gate_parse(head, n, &LIM, &h), 0);
	assert_int_equal(sbx_gate_parse(head, n, &LIM, &h), 1);
	assert_int_equal(h.bad, SBX_GATE_PASS);
	assert_int_equal(h.cl, 3);
}

static void
test_refusals_are_json_codes_with_fitting_statuses(void **state)
{
	static const struct {
		enum sbx_gate_verdict v;
		int status;
		const char *code;
	} want[] = {
		{ SBX_GATE_UNAUTHORIZED, 401, SBX_E_UNAUTHORIZED },
		{ SBX_GATE_BAD_REQUEST, 400, SBX_E_BAD_REQUEST },
		{ SBX_GATE_TOO_LARGE, 413, SBX_E_TOO_LARGE },
		{ SBX_GATE_HEAD_TOO_LARGE, 431, SBX_E_HEAD_TOO_LARGE },
		{ SBX_GATE_URI_TOO_LONG, 414, SBX_E_URI_TOO_LONG },
		{ SBX_GATE_TIMEOUT, 408, SBX_E_REQUEST_TIMEOUT },
		{ SBX_GATE_OVERLOADED, 503, SBX_E_OVERLOADED },
	};
	struct sbx_err err;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_int_equal(sbx_gate_refusal(want[i].v, &err),
		    want[i].status);
		assert_string_equal(err.code, want[i].code);
		assert_true(strlen(err.message) > 10);
	}
	assert_int_equal(sbx_gate_refusal(SBX_GATE_PASS, &err), 0);
}

/* Every error code of proto/sbx_proto.h has its own row in sbx_err.c's
 * table: a code that falls through to 500 is a code nobody mapped. */
static void
test_every_proto_code_has_a_status(void **state)
{
	FILE *f = fopen("proto/sbx_proto.h", "r");
	char line[512], code[64];
	struct sbx_err err;
	int n = 0;

	(void)state;
	if (f == NULL)
		fail_msg("run from the repository root: proto/sbx_proto.h: %s",
		    strerror(errno));
	while (fgets(line, sizeof(line), f) != NULL) {
		/* the codes after this line are exit statuses, never HTTP */
		if (strstr(line, "never cross the wire") != NULL)
			break;
		if (sscanf(line, "#define SBX_E_%*s \"%63[^\"]\"", code) != 1)
			continue;
		sbx_err_set(&err, code, "x");
		if (strcmp(code, SBX_E_INTERNAL) != 0 &&
		    sbx_err_http_status(&err) == 500)
			fail_msg("error code %s has no HTTP status", code);
		n++;
	}
	fclose(f);
	assert_true(n >= 25);
	sbx_err_set(&err, SBX_E_FORBIDDEN, "x");
	assert_int_equal(sbx_err_http_status(&err), 403);
}

/* ------------------------------------------------------------------ */
/* A gated server on its own thread                                    */

static struct {
	struct event_base *base;
	struct evhttp *http;
	struct sbx_gate *gate;
	int port;
	pthread_t th;
	int handled;          /* requests that reached the handler, passed */
	int checks;           /* calls of the credential check */
	/* /stream: the streamed body being consumed (slowly, by a timer) */
	struct sbx_gate_body *body;
	struct evhttp_request *sreq;
	struct event *tick;
	size_t got, most;     /* bytes consumed; most ever buffered at once */
	int bad_byte, saw_cl, planted_taken;
	/* A second server: a keyless pool of 3, their heads within 1 s
	 * (others' within 3 s). */
	struct evhttp *http2;
	struct sbx_gate *gate2;
	int port2;
} S;

static enum sbx_gate_verdict
check(void *arg, const struct sbx_gate_head *h, const char *path,
    uint64_t *cap)
{
	(void)arg;
	__atomic_add_fetch(&S.checks, 1, __ATOMIC_SEQ_CST);
	*cap = path != NULL && strcmp(path, "/up") == 0 ? 1024 :
	    path != NULL && strcmp(path, "/stream") == 0 ? 64u << 20 : 0;
	if (h->auth != NULL && h->alen == strlen("Bearer good-token-0123") &&
	    strncasecmp(h->auth, "Bearer good-token-0123", h->alen) == 0)
		return SBX_GATE_KEYED;
	return SBX_GATE_UNAUTHORIZED;
}

static int
streams(void *arg, const struct sbx_gate_head *h, const char *path)
{
	(void)arg;
	(void)h;
	return strcmp(path, "/stream") == 0;
}

/* Consumes at most 64 KiB of the streamed body per millisecond; the body
 * is "0123456789" repeated, checked byte by byte. */
static void
stream_tick(evutil_socket_t fd, short what, void *arg)
{
	struct evbuffer *buf = sbx_gate_body_buffer(S.body);
	struct timeval tv = { 0, 1000 };
	unsigned char chunk[65536];
	size_t n = evbuffer_get_length(buf), i;
	struct evbuffer *out;

	(void)fd;
	(void)what;
	(void)arg;
	if (n > S.most)
		S.most = n;
	n = (size_t)evbuffer_remove(buf, chunk, sizeof(chunk));
	for (i = 0; i < n; i++)
		if (chunk[i] != (unsigned char)('0' + (S.got + i) % 10))
			S.bad_byte = 1;
	S.got += n;
	/* A chunked body's length is known once complete (sbx_gate.h). */
	if (!sbx_gate_body_complete(S.body) || evbuffer_get_length(buf) > 0 ||
	    S.got < sbx_gate_body_length(S.body)) {
		evtimer_add(S.tick, &tv);
		return;
	}
	out = evbuffer_new();
	evbuffer_add_printf(out, "{\"got\":%zu,\"most\":%zu,\"bad\":%d,"
	    "\"cl\":%d}\n", S.got, S.most, S.bad_byte, S.saw_cl);
	sbx_gate_body_free(S.body);
	S.body = NULL;
	evhttp_send_reply(S.sreq, 200, NULL, out);
	evbuffer_free(out);
}

#define BIG (32u << 20)   /* bytes of the /big reply */

static void
handler(struct evhttp_request *req, void *arg)
{
	struct evbuffer *out = evbuffer_new();
	/* arg: the keyless-pool server's gate; NULL: the first server's. */
	enum sbx_gate_verdict v = sbx_gate_refused(arg != NULL ? arg : S.gate,
	    req);
	struct sbx_err err;
	int status = 200;

	if (v != SBX_GATE_PASS) {
		const char *f = evhttp_find_header(evhttp_request_get_input_headers(
		    req), "X-Sandbox");

		status = sbx_gate_refusal(v, &err);
		evbuffer_add_printf(out, "{\"error\":{\"code\":\"%s\","
		    "\"message\":\"%s\"},\"field\":\"%s\"}\n", err.code,
		    err.message, f != NULL ? f : "");
	} else if (strcmp(evhttp_request_get_uri(req), "/stream") == 0 &&
	    (S.body = sbx_gate_body_take(S.gate, req)) != NULL) {
		struct bufferevent *bev = evhttp_connection_get_bufferevent(
		    evhttp_request_get_connection(req));
		bufferevent_data_cb wcb = NULL;
		bufferevent_event_cb ecb = NULL;
		void *cbarg = NULL;
		struct timeval tv = { 0, 1000 };

		/* What broker_http.c fileop_watch does: no evhttp read callback
		 * while the body streams. */
		bufferevent_getcb(bev, NULL, &wcb, &ecb, &cbarg);
		bufferevent_setcb(bev, NULL, wcb, ecb, cbarg);
		bufferevent_enable(bev, EV_READ);
		sbx_gate_body_kick(S.body);
		S.sreq = req;
		S.got = S.most = 0;
		S.bad_byte = 0;
		S.saw_cl = evhttp_find_header(evhttp_request_get_input_headers(req),
		    "Content-Length") != NULL || evhttp_find_header(
		    evhttp_request_get_input_headers(req), "Transfer-Encoding") != NULL ||
		    evbuffer_get_length(evhttp_request_get_input_buffer(req)) > 0;
		/* taking it twice gives nothing */
		S.planted_taken = sbx_gate_body_take(S.gate, req) != NULL;
		if (S.tick == NULL)
			S.tick = evtimer_new(S.base, stream_tick, NULL);
		evtimer_add(S.tick, &tv);
		evbuffer_free(out);
		return;
	} else if (strcmp(evhttp_request_get_uri(req), "/big") == 0) {
		/* A reply far larger than the sockets' buffers: its write
		 * waits on a client that does not read. */
		static char chunk[65536];
		size_t i;

		memset(chunk, 'x', sizeof(chunk));
		for (i = 0; i < BIG / sizeof(chunk); i++)
			evbuffer_add(out, chunk, sizeof(chunk));
	} else if (strcmp(evhttp_request_get_uri(req), "/nodelay") == 0) {
		int on = 0;
		socklen_t ol = sizeof(on);

		getsockopt(bufferevent_getfd(evhttp_connection_get_bufferevent(
		    evhttp_request_get_connection(req))), IPPROTO_TCP, TCP_NODELAY,
		    &on, &ol);
		evbuffer_add_printf(out, "{\"nodelay\":%d}\n", on != 0);
	} else if (strncmp(evhttp_request_get_uri(req), "/echo/", 6) == 0) {
		evbuffer_add_printf(out, "{\"uri\":\"%s\"}\n",
		    evhttp_request_get_uri(req));
	} else {
		if (sbx_gate_body_take(S.gate, req) != NULL)
			S.planted_taken = 1;
		__atomic_add_fetch(&S.handled, 1, __ATOMIC_SEQ_CST);
		evbuffer_add_printf(out, "{\"len\":%zu}\n", evbuffer_get_length(
		    evhttp_request_get_input_buffer(req)));
	}
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "application/json");
	evhttp_send_reply(req, status, NULL, out);
	evbuffer_free(out);
}

static void *
loop(void *arg)
{
	(void)arg;
	event_base_dispatch(S.base);
	return NULL;
}

static int
server_setup(void **state)
{
	struct sbx_gate_limits lim = LIM;
	struct evhttp_bound_socket *b;
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	struct sbx_err err;

	(void)state;
	lim.header_timeout_ms = 1500;
	lim.max_connections = 4;
	lim.fields[0] = "X-Sandbox";
	memset(&S, 0, sizeof(S));
	S.base = event_base_new();
	S.http = evhttp_new(S.base);
	evhttp_set_max_body_size(S.http, 1 << 20);
	S.gate = sbx_gate_new(S.base, S.http, &lim, check, NULL, &err);
	assert_non_null(S.gate);
	sbx_gate_set_stream(S.gate, streams);
	evhttp_set_gencb(S.http, handler, NULL);
	b = evhttp_bind_socket_with_handle(S.http, "127.0.0.1", 0);
	assert_non_null(b);
	getsockname(evhttp_bound_socket_get_fd(b), (struct sockaddr *)&sin, &sl);
	S.port = ntohs(sin.sin_port);
	lim.header_timeout_ms = 3000;
	lim.max_connections = 16;
	lim.max_connections_keyless = 3;
	lim.keyless_header_timeout_ms = 1000;
	S.http2 = evhttp_new(S.base);
	S.gate2 = sbx_gate_new(S.base, S.http2, &lim, check, NULL, &err);
	assert_non_null(S.gate2);
	evhttp_set_gencb(S.http2, handler, S.gate2);
	b = evhttp_bind_socket_with_handle(S.http2, "127.0.0.1", 0);
	assert_non_null(b);
	sl = sizeof(sin);
	getsockname(evhttp_bound_socket_get_fd(b), (struct sockaddr *)&sin, &sl);
	S.port2 = ntohs(sin.sin_port);
	assert_int_equal(pthread_create(&S.th, NULL, loop, NULL), 0);
	return 0;
}

static int
server_teardown(void **state)
{
	(void)state;
	/* The loop thread runs until the process ends: the fixture is one
	 * server for the whole group. */
	return 0;
}

static int
dial_port(int port)
{
	struct sockaddr_in sin;
	struct timeval tv = { 10, 0 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static int
dial(void)
{
	return dial_port(S.port);
}

/* Reads until the server closes (or 10 s pass); returns what came. */
static char *
read_all(int fd, int *closed)
{
	static char buf[65536];
	size_t n = 0;
	ssize_t r;

	*closed = 0;
	while (n < sizeof(buf) - 1 && (r = read(fd, buf + n,
	    sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	if (r == 0)
		*closed = 1;
	buf[n] = '\0';
	return buf;
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sends text on a new connection; returns the whole answer, closed or not. */
static char *
exchange(const char *text, size_t len, int *closed)
{
	int fd = dial();
	char *r;

	assert_int_equal(write(fd, text, len), (ssize_t)len);
	r = read_all(fd, closed);
	close(fd);
	return r;
}

#define GOOD "Authorization: Bearer good-token-0123\r\n"

static void
test_server_refuses_before_the_body(void **state)
{
	const char *r;
	int closed;

	(void)state;
	/* A stranger's 60 MiB announcement: 401 with nothing of it sent. */
	r = exchange("PUT /up HTTP/1.1\r\nContent-Length: 62914560\r\n\r\n",
	    strlen("PUT /up HTTP/1.1\r\nContent-Length: 62914560\r\n\r\n"),
	    &closed);
	assert_non_null(strstr(r, "HTTP/1.1 401"));
	assert_non_null(strstr(r, "\"unauthorized\""));
	assert_int_equal(closed, 1);
	/* Authenticated but over the route's cap: 413 JSON, unread. */
	r = exchange("PUT /up HTTP/1.1\r\n" GOOD "Content-Length: 4096\r\n\r\n",
	    strlen("PUT /up HTTP/1.1\r\n" GOOD "Content-Length: 4096\r\n\r\n"),
	    &closed);
	assert_non_null(strstr(r, "HTTP/1.1 413"));
	assert_non_null(strstr(r, "\"too_large\""));
	assert_null(strstr(r, "<html"));
	assert_int_equal(closed, 1);
	/* The check's fields reach the daemon with the refusal, as the
	 * credential does (an E2B route answers in its own shape). */
	r = exchange("PUT /up HTTP/1.1\r\n" GOOD "X-Sandbox: e2bs1\r\n"
	    "Content-Length: 4096\r\n\r\n", strlen("PUT /up HTTP/1.1\r\n" GOOD
	    "X-Sandbox: e2bs1\r\nContent-Length: 4096\r\n\r\n"), &closed);
	assert_non_null(strstr(r, "HTTP/1.1 413"));
	assert_non_null(strstr(r, "\"field\":\"e2bs1\""));
	/* A stranger's refusal carries none of it. */
	r = exchange("PUT /up HTTP/1.1\r\nX-Sandbox: e2bs1\r\n"
	    "Content-Length: 4096\r\n\r\n", strlen("PUT /up HTTP/1.1\r\n"
	    "X-Sandbox: e2bs1\r\nContent-Length: 4096\r\n\r\n"), &closed);
	assert_non_null(strstr(r, "HTTP/1.1 401"));
	assert_non_null(strstr(r, "\"field\":\"\""));
	/* Within the cap: through, body and all. */
	r = exchange("PUT /up HTTP/1.1\r\n" GOOD "Content-Length: 5\r\n"
	    "Connection: close\r\n\r\nhello", strlen("PUT /up HTTP/1.1\r\n" GOOD
	    "Content-Length: 5\r\nConnection: close\r\n\r\nhello"), &closed);
	assert_non_null(strstr(r, "HTTP/1.1 200"));
	assert_non_null(strstr(r, "{\"len\":5}"));
}


/* adr/0062: the connection a request came on has Nagle off, so a keep-alive
 * client's delayed ACK does not hold a reply's second write back 40 ms. */
static void
test_server_connections_have_nodelay(void **state)
{
	const char *r;
	int closed;

	(void)state;
	r = exchange("GET /nodelay HTTP/1.1\r\n" GOOD "Connection: close\r\n\r\n",
	    strlen("GET /nodelay HTTP/1.1\r\n" GOOD "Connection: close\r\n\r\n"),
	    &closed);
	assert_non_null(strstr(r, "HTTP/1.1 200"));
	assert_non_null(strstr(r, "{\"nodelay\":1}"));
}

/* Writes the whole of p (blocking). */
static void
write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		w = write(fd, p, n);
		assert_true(w > 0);
		p += w;
		n -= (size_t)w;
	}
}

static void
test_server_streams_a_body_within_its_window(void **state)
{
	size_t n = 8u << 20, i, hl;
	char head[256], *body = malloc(n), *r;
	int fd, closed;
	unsigned long got = 0, most = 0;
	int bad = -1, cl = -1;

	(void)state;
	assert_non_null(body);
	for (i = 0; i < n; i++)
		body[i] = (char)('0' + i % 10);
	/* A streamed PUT with Expect, then a pipelined GET on the same
	 * connection carrying a planted body marker. */
	hl = (size_t)snprintf(head, sizeof(head), "PUT /stream HTTP/1.1\r\n" GOOD
	    "Expect: 100-continue\r\nX-Sbx-Body: 00 1\r\n"
	    "Content-Length: %zu\r\n\r\n", n);
	fd = dial();
	write_all(fd, head, hl);
	write_all(fd, body, n);
	write_all(fd, "GET /x HTTP/1.1\r\n" GOOD "X-Sbx-Body: 00 1\r\n"
	    "Connection: close\r\n\r\n", strlen("GET /x HTTP/1.1\r\n" GOOD
	    "X-Sbx-Body: 00 1\r\nConnection: close\r\n\r\n"));
	r = read_all(fd, &closed);
	close(fd);
	free(body);
	assert_non_null(strstr(r, "HTTP/1.1 100 Continue"));
	assert_non_null(r = strstr(r, "HTTP/1.1 200"));
	assert_non_null(r = strstr(r, "{\"got\":"));
	assert_int_equal(sscanf(r, "{\"got\":%lu,\"most\":%lu,\"bad\":%d,\"cl\":%d}",
	    &got, &most, &bad, &cl), 4);
	assert_int_equal(got, n);
	assert_int_equal(bad, 0);
	assert_int_equal(cl, 0);         /* evhttp saw no body framing */
	/* Buffered at most the window plus one socket read (the gate stops
	 * reading once the window is full). */
	assert_true(most <= SBX_GATE_BODY_WINDOW + 65536);
	assert_true(most > 0);
	/* The pipelined request after the body was answered, unstreamed. */
	assert_non_null(strstr(r, "HTTP/1.1 200"));
	assert_non_null(strstr(r, "{\"len\":0}"));
	assert_int_equal(S.planted_taken, 0);
	assert_int_equal(closed, 1);
}

/* issue 24 M2 (adr/0056): a chunked body streams as a Content-Length one
 * does, decoded by the gate, a window at a time. */
static void
test_server_streams_a_chunked_body_within_its_window(void **state)
{
	size_t n = 8u << 20, i, off, hl, csz = 100000;
	char head[256], *body = malloc(n), *r, line[32];
	struct evbuffer *wire = evbuffer_new();
	int fd, closed;
	unsigned long got = 0, most = 0;
	int bad = -1, cl = -1;

	(void)state;
	assert_non_null(body);
	for (i = 0; i < n; i++)
		body[i] = (char)('0' + i % 10);
	for (off = 0; off < n; off += csz) {
		size_t k = n - off < csz ? n - off : csz;

		snprintf(line, sizeof(line), "%zx\r\n", k);
		evbuffer_add(wire, line, strlen(line));
		evbuffer_add(wire, body + off, k);
		evbuffer_add(wire, "\r\n", 2);
	}
	evbuffer_add(wire, "0\r\n\r\n", 5);
	hl = (size_t)snprintf(head, sizeof(head), "PUT /stream HTTP/1.1\r\n" GOOD
	    "Transfer-Encoding: chunked\r\n\r\n");
	fd = dial();
	write_all(fd, head, hl);
	write_all(fd, (const char *)evbuffer_pullup(wire, -1),
	    evbuffer_get_length(wire));
	write_all(fd, "GET /x HTTP/1.1\r\n" GOOD "Connection: close\r\n\r\n",
	    strlen("GET /x HTTP/1.1\r\n" GOOD "Connection: close\r\n\r\n"));
	r = read_all(fd, &closed);
	close(fd);
	free(body);
	evbuffer_free(wire);
	assert_non_null(r = strstr(r, "HTTP/1.1 200"));
	assert_non_null(r = strstr(r, "{\"got\":"));
	assert_int_equal(sscanf(r, "{\"got\":%lu,\"most\":%lu,\"bad\":%d,\"cl\":%d}",
	    &got, &most, &bad, &cl), 4);
	assert_int_equal(got, n);
	assert_int_equal(bad, 0);
	assert_int_equal(cl, 0);         /* evhttp saw no body framing */
	/* Held whole before (the gate's G_CHUNKED): 8 MiB. */
	assert_true(most <= SBX_GATE_BODY_WINDOW + 65536);
	assert_true(most > 0);
	assert_non_null(strstr(r, "{\"len\":0}"));   /* the GET after it */
	assert_int_equal(closed, 1);
}

static void
test_server_smuggling_is_400_and_close(void **state)
{
	static const char *const heads[] = {
		"PUT /up HTTP/1.1\r\n" GOOD "Content-Length: 5\r\n"
		    "Content-Length: 40\r\n\r\n",
		"PUT /up HTTP/1.1\r\n" GOOD "Content-Length: 5\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n",
		"PUT /up HTTP/1.1\r\n" GOOD "Transfer-Encoding: gzip, chunked"
		    "\r\n\r\n",
		"PUT /up HTTP/1.1\r\n" GOOD "X-A: b\r\n  folded\r\n"
		    "Content-Length: 5\r\n\r\n",
		"GET /x HTTP/1.1\r\n" GOOD GOOD "\r\n",
		"BREW /x HTTP/1.1\r\n" GOOD "\r\n",
	};
	char buf[1024];
	const char *r;
	int closed, before;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		before = __atomic_load_n(&S.handled, __ATOMIC_SEQ_CST);
		/* The body holds a whole second request: it must never run. */
		snprintf(buf, sizeof(buf), "%s0\r\n\r\nGET /smuggled HTTP/1.1\r\n"
		    GOOD "\r\n", heads[i]);
		r = exchange(buf, strlen(buf), &closed);
		if (strstr(r, "HTTP/1.1 400") == NULL)
			fail_msg("head %zu: %s", i, r);
		assert_non_null(strstr(r, "\"bad_request\""));
		assert_null(strstr(r, "HTTP/1.1 200"));
		assert_int_equal(closed, 1);
		assert_int_equal(__atomic_load_n(&S.handled, __ATOMIC_SEQ_CST),
		    before);
	}
}

/* Two Authorization headers, one good and one not, in either order: 400
 * before any credential is looked at (a 401 would tell which one the
 * gate read; a pass would let the other one reach the daemon). */
static void
test_server_two_credentials_400_unchecked(void **state)
{
	static const char *const heads[] = {
		"GET /x HTTP/1.1\r\n" GOOD
		    "Authorization: Bearer wrong-token-0123\r\n\r\n",
		"GET /x HTTP/1.1\r\nAuthorization: Bearer wrong-token-0123\r\n"
		    GOOD "\r\n",
	};
	const char *r;
	int closed, handled, checks;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		handled = __atomic_load_n(&S.handled, __ATOMIC_SEQ_CST);
		checks = __atomic_load_n(&S.checks, __ATOMIC_SEQ_CST);
		r = exchange(heads[i], strlen(heads[i]), &closed);
		if (strstr(r, "HTTP/1.1 400") == NULL)
			fail_msg("order %zu: %s", i, r);
		assert_non_null(strstr(r, "\"bad_request\""));
		assert_int_equal(closed, 1);
		assert_int_equal(__atomic_load_n(&S.checks, __ATOMIC_SEQ_CST),
		    checks);
		assert_int_equal(__atomic_load_n(&S.handled, __ATOMIC_SEQ_CST),
		    handled);
	}
}

static void
test_server_head_limits(void **state)
{
	char *buf = malloc(32768);
	const char *r;
	size_t n, i;
	int closed;

	(void)state;
	n = (size_t)sprintf(buf, "GET /x HTTP/1.1\r\n" GOOD);
	for (i = 0; i < 101; i++)
		n += (size_t)sprintf(buf + n, "X-%zu: v\r\n", i);
	n += (size_t)sprintf(buf + n, "\r\n");
	r = exchange(buf, n, &closed);
	assert_non_null(strstr(r, "HTTP/1.1 431"));
	assert_non_null(strstr(r, "\"head_too_large\""));
	assert_int_equal(closed, 1);
	n = (size_t)sprintf(buf, "GET /");
	memset(buf + n, 'a', 20480);
	n += 20480;
	n += (size_t)sprintf(buf + n, " HTTP/1.1\r\n" GOOD "\r\n");
	r = exchange(buf, n, &closed);
	assert_non_null(strstr(r, "HTTP/1.1 414"));
	assert_non_null(strstr(r, "\"uri_too_long\""));
	assert_int_equal(closed, 1);
	free(buf);
}

static void
test_server_trickled_head_meets_header_timeout(void **state)
{
	static const char head[] = "GET /x HTTP/1.1\r\n" GOOD "X-Slow: "
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
	int fd = dial(), closed;
	int64_t t0 = now_ms(), took;
	const char *r;
	size_t i;

	(void)state;
	/* One byte every 200 ms: each read resets an inactivity timer, never
	 * the head's deadline (1.5 s here). */
	for (i = 0; i < sizeof(head) - 1 && now_ms() - t0 < 4000; i++) {
		struct pollfd pfd = { fd, POLLIN, 0 };

		if (write(fd, head + i, 1) != 1 || poll(&pfd, 1, 200) != 0)
			break;   /* answered: stop before a reset loses it */
	}
	r = read_all(fd, &closed);
	took = now_ms() - t0;
	close(fd);
	assert_non_null(strstr(r, "HTTP/1.1 408"));
	assert_non_null(strstr(r, "\"request_timeout\""));
	assert_int_equal(closed, 1);
	assert_true(took < 4500);
	assert_true(i < sizeof(head) - 1);
}

static void
test_server_caps_open_connections(void **state)
{
	int fds[4], extra, closed, other;
	const char *r;
	size_t i;

	(void)state;
	for (i = 0; i < 4; i++) {
		fds[i] = dial();
		assert_int_equal(write(fds[i], "G", 1), 1);
	}
	usleep(200 * 1000);
	/* A fifth: 503 overloaded at once, JSON, closed. */
	extra = dial();
	r = read_all(extra, &closed);
	close(extra);
	assert_non_null(strstr(r, "HTTP/1.1 503"));
	assert_non_null(strstr(r, "\"overloaded\""));
	assert_int_equal(closed, 1);
	for (i = 0; i < 4; i++)
		close(fds[i]);
	/* Closed ones free their slots. */
	usleep(300 * 1000);
	other = dial();
	assert_int_equal(write(other, "GET /x HTTP/1.1\r\n" GOOD
	    "Connection: close\r\n\r\n", strlen("GET /x HTTP/1.1\r\n" GOOD
	    "Connection: close\r\n\r\n")), (ssize_t)strlen("GET /x HTTP/1.1\r\n"
	    GOOD "Connection: close\r\n\r\n"));
	r = read_all(other, &closed);
	close(other);
	assert_non_null(strstr(r, "HTTP/1.1 200"));
	assert_int_equal(sbx_gate_connections(S.gate) <= 1, 1);
}

/*
 * M1, keyless: idle connections that never send a key cannot take the
 * slots keyed clients need. Three idle sockets fill the pool; each further
 * one pushes out the oldest idle keyless one (503 overloaded with its
 * sentence, closed); a keyed request on a new connection gets 200 and
 * leaves the pool; a keyless connection's head is due within 1 s, not
 * header_timeout (3 s).
 */
static void
test_server_keyless_pool(void **state)
{
	const char *keyed = "GET /x HTTP/1.1\r\n" GOOD "\r\n";
	int idle[9], fd, closed, pushed = 0;
	struct pollfd pfd;
	char buf[4096];
	const char *r;
	int64_t t0;
	ssize_t n;
	size_t i;

	(void)state;
	for (i = 0; i < 9; i++) {
		idle[i] = dial_port(S.port2);
		usleep(30 * 1000);
	}
	assert_true(sbx_gate_keyless(S.gate2) <= 3);
	/* A keyed client still gets in and is answered. */
	fd = dial_port(S.port2);
	assert_int_equal(write(fd, keyed, strlen(keyed)), (ssize_t)strlen(keyed));
	pfd.fd = fd;
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, 3000), 1);
	n = read(fd, buf, sizeof(buf) - 1);
	assert_true(n > 0);
	buf[n] = '\0';
	if (strstr(buf, "HTTP/1.1 200") == NULL)
		fail_msg("keyed request refused: %s", buf);
	/* It left the pool: three idle ones were there, one was pushed. */
	assert_int_equal(sbx_gate_keyless(S.gate2), 2);
	/* The oldest idle ones were pushed out, with the sentence. */
	for (i = 0; i < 6; i++) {
		r = read_all(idle[i], &closed);
		if (strstr(r, "HTTP/1.1 503") != NULL &&
		    strstr(r, "without a credential") != NULL && closed)
			pushed++;
		close(idle[i]);
	}
	assert_int_equal(pushed, 6);
	for (i = 6; i < 9; i++)
		close(idle[i]);
	close(fd);
	usleep(200 * 1000);
	/* Alone in the pool: 408 after keyless_header_timeout. */
	fd = dial_port(S.port2);
	t0 = now_ms();
	r = read_all(fd, &closed);
	close(fd);
	assert_non_null(strstr(r, "HTTP/1.1 408"));
	if (now_ms() - t0 >= 2500)
		fail_msg("keyless head deadline took %lld ms",
		    (long long)(now_ms() - t0));
}

/* Counts "HTTP/1.1 200" in the n bytes at r and checks that the /echo/I
 * replies come in order, I from 0; returns the count of 200s. */
static size_t
replies_in_order(const char *r, size_t n, size_t *echoes)
{
	const char *p = r, *end = r + n, *q;
	size_t ok = 0;

	*echoes = 0;
	while ((q = memmem(p, (size_t)(end - p), "HTTP/1.1 ", 9)) != NULL) {
		if (end - q > 12 && memcmp(q + 9, "200", 3) == 0)
			ok++;
		p = q + 9;
	}
	p = r;
	while ((q = memmem(p, (size_t)(end - p), "\"uri\":\"/echo/", 13)) !=
	    NULL) {
		if ((size_t)strtoul(q + 13, NULL, 10) != *echoes)
			fail_msg("reply %zu out of order", *echoes);
		(*echoes)++;
		p = q + 13;
	}
	return ok;
}

/* HTTP/1.1 pipelining: five requests in one write, five replies in order. */
static void
test_server_pipelining_keeps_order(void **state)
{
	char req[2048];
	size_t n = 0, echoes;
	int i, closed;
	const char *r;

	(void)state;
	for (i = 0; i < 5; i++)
		n += (size_t)snprintf(req + n, sizeof(req) - n,
		    "GET /echo/%d HTTP/1.1\r\n" GOOD "%s\r\n", i,
		    i == 4 ? "Connection: close\r\n" : "");
	r = exchange(req, n, &closed);
	assert_int_equal(replies_in_order(r, strlen(r), &echoes), 5);
	assert_int_equal(echoes, 5);
	assert_int_equal(closed, 1);
}

/*
 * M3: a client pipelines 1,000 heads behind a request whose reply it does
 * not read. The server's buffered request bytes stay within one head and
 * one socket read (not the 400 KB sent); once the client reads, every
 * request is answered, in order.
 */
static void
test_server_pipelined_heads_stay_bounded(void **state)
{
	const size_t heads = 1000, bound = LIM.head_max + 16384;
	size_t cap = BIG + heads * 256, got = 0, len = 0, off = 0, echoes,
	    most = 0, b;
	char *out = malloc(heads * 512 + 512), *in = malloc(cap), pad[301];
	struct pollfd pfd;
	int fd = dial(), stalls = 0;
	int64_t t0;
	ssize_t r;
	size_t i;

	(void)state;
	assert_non_null(out);
	assert_non_null(in);
	memset(pad, 'p', sizeof(pad) - 1);
	pad[sizeof(pad) - 1] = '\0';
	len = (size_t)sprintf(out, "GET /big HTTP/1.1\r\n" GOOD "\r\n");
	for (i = 0; i < heads; i++)
		len += (size_t)sprintf(out + len, "GET /echo/%zu HTTP/1.1\r\n"
		    GOOD "X-Pad: %s\r\n%s\r\n", i, pad,
		    i == heads - 1 ? "Connection: close\r\n" : "");
	/* Write without reading until the sockets are full. */
	pfd.fd = fd;
	pfd.events = POLLOUT;
	while (off < len && stalls < 5) {
		if (poll(&pfd, 1, 100) <= 0) {
			stalls++;
			continue;
		}
		r = send(fd, out + off, len - off > 4096 ? 4096 : len - off,
		    MSG_DONTWAIT);
		if (r > 0)
			off += (size_t)r;
	}
	usleep(300 * 1000);
	b = sbx_gate_buffered(S.gate);
	if (b > bound)
		fail_msg("%zu request bytes buffered (%zu sent), bound %zu", b,
		    off, bound);
	/* Now read: everything is answered, in order, and stays bounded. */
	t0 = now_ms();
	for (;;) {
		pfd.events = POLLIN | (off < len ? POLLOUT : 0);
		if (now_ms() - t0 > 60000)
			fail_msg("replies stalled at %zu bytes", got);
		if (poll(&pfd, 1, 1000) <= 0)
			continue;
		if ((pfd.revents & POLLOUT) && off < len &&
		    (r = send(fd, out + off, len - off, MSG_DONTWAIT)) > 0)
			off += (size_t)r;
		if (pfd.revents & (POLLIN | POLLHUP)) {
			if (got == cap)
				fail_msg("more reply bytes than expected");
			if ((r = recv(fd, in + got, cap - got, MSG_DONTWAIT)) == 0)
				break;
			if (r > 0)
				got += (size_t)r;
		}
		if ((b = sbx_gate_buffered(S.gate)) > most)
			most = b;
	}
	close(fd);
	assert_int_equal(replies_in_order(in, got, &echoes), heads + 1);
	assert_int_equal(echoes, heads);
	if (most > bound)
		fail_msg("%zu request bytes buffered while replying", most);
	free(out);
	free(in);
}

/*
 * The one Authorization grammar both daemons accept (sbx_gate_bearer):
 * what is the credential, byte for byte, and what is no credential at all.
 */
static void
test_bearer_credential_is_cut_exactly(void **state)
{
	static const struct {
		const char *value;
		const char *cred; /* NULL: refused */
	} cases[] = {
		{ "Bearer abc", "abc" },
		{ "bearer abc", "abc" },
		{ "BEARER abc", "abc" },
		{ " \tBearer \t abc \t", "abc" },
		{ "Bearer\tabc", "abc" },
		{ "Bearer a b", "a b" },     /* inner spaces are the credential's */
		{ "Bearer abc ", "abc" },
		{ "Bearerabc", NULL },
		{ "Bearer", NULL },
		{ "Bearer ", NULL },
		{ "Bearer \t ", NULL },
		{ "Basic abc", NULL },
		{ "abc", NULL },
		{ "", NULL },
		{ NULL, NULL },
	};
	const char *k;
	size_t i, len;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		len = 12345;
		k = sbx_gate_bearer(cases[i].value, &len);
		if (cases[i].cred == NULL) {
			if (k != NULL || len != 12345)
				fail_msg("\"%s\": accepted", cases[i].value);
			continue;
		}
		if (k == NULL || len != strlen(cases[i].cred) ||
		    memcmp(k, cases[i].cred, len) != 0)
			fail_msg("\"%s\": got \"%.*s\"", cases[i].value,
			    k != NULL ? (int)len : 0, k != NULL ? k : "");
		/* Borrowed: a pointer into the value, nothing allocated. */
		assert_true(k > cases[i].value &&
		    k + len <= cases[i].value + strlen(cases[i].value));
	}
}

int
main(void)
{
	const struct CMUnitTest parser[] = {
		cmocka_unit_test(test_parse_accepts_one_framing),
		cmocka_unit_test(test_parse_refuses_every_ambiguous_framing),
		cmocka_unit_test(test_parse_limits_headers_and_size),
		cmocka_unit_test(test_parse_needs_the_whole_head),
		cmocka_unit_test(test_refusals_are_json_codes_with_fitting_statuses),
		cmocka_unit_test(test_every_proto_code_has_a_status),
		cmocka_unit_test(test_bearer_credential_is_cut_exactly),
	};
	const struct CMUnitTest server[] = {
		cmocka_unit_test(test_server_refuses_before_the_body),
		cmocka_unit_test(test_server_connections_have_nodelay),
		cmocka_unit_test(test_server_streams_a_body_within_its_window),
		cmocka_unit_test(test_server_streams_a_chunked_body_within_its_window),
		cmocka_unit_test(test_server_smuggling_is_400_and_close),
		cmocka_unit_test(test_server_two_credentials_400_unchecked),
		cmocka_unit_test(test_server_head_limits),
		cmocka_unit_test(test_server_trickled_head_meets_header_timeout),
		cmocka_unit_test(test_server_caps_open_connections),
		cmocka_unit_test(test_server_pipelining_keeps_order),
		cmocka_unit_test(test_server_pipelined_heads_stay_bounded),
		cmocka_unit_test(test_server_keyless_pool),
	};
	int rc = cmocka_run_group_tests_name("parser", parser, NULL, NULL);

	return rc + cmocka_run_group_tests_name("server", server, server_setup,
	    server_teardown);
}
