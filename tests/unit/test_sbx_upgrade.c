/* test_sbx_upgrade.c - sbx_httpd_upgrade over a real gated evhttp server on 127.0.0.1:0 (adr/0050): the 101 head, the bytes a client sent behind its request, both directions after evhttp freed its connection (its shutdown no longer reaches the socket), and the gate counting the connection until the upgraded side closes it. */
#include <sys/socket.h>
#include <sys/time.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "sbx_gate.h"
#include "sbx_httpd.h"
#include "sbx_proto.h"

static struct {
	struct event_base *base;
	struct evhttp *http;
	struct sbx_gate *gate;
	struct sbx_httpd_req r;
	int port;
	int upgraded, closed;
} S;

static enum sbx_gate_verdict
check(void *arg, const struct sbx_gate_head *h, const char *path,
    uint64_t *cap)
{
	(void)arg;
	(void)h;
	(void)path;
	*cap = 1024;
	return SBX_GATE_PASS;
}

/* The upgraded side echoes; at EOF it closes (and tells the gate). */
static void
echo_read(struct bufferevent *bev, void *arg)
{
	(void)arg;
	evbuffer_add_buffer(bufferevent_get_output(bev),
	    bufferevent_get_input(bev));
}

static void
echo_event(struct bufferevent *bev, short what, void *arg)
{
	(void)what;
	(void)arg;
	sbx_gate_upgraded_close(S.gate, bev);
	bufferevent_free(bev);
	__atomic_store_n(&S.closed, 1, __ATOMIC_SEQ_CST);
}

static void
handler(struct evhttp_request *req, void *arg)
{
	struct bufferevent *bev;

	(void)arg;
	memset(&S.r, 0, sizeof(S.r));
	S.r.req = req;
	S.r.gate = S.gate;
	/* /raw: the hand-off without a status line (the ports proxy's). */
	if (strncmp(evhttp_request_get_uri(req), "/raw", 4) == 0)
		bev = sbx_httpd_takeover(&S.r);
	else
		bev = sbx_httpd_upgrade(&S.r, "echo/1", "X-Test: yes\r\n");
	assert_non_null(bev);
	assert_null(S.r.req);
	bufferevent_setcb(bev, echo_read, NULL, echo_event, NULL);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	if (evbuffer_get_length(bufferevent_get_input(bev)) > 0)
		echo_read(bev, NULL);
	__atomic_store_n(&S.upgraded, 1, __ATOMIC_SEQ_CST);
}

static void *
loop(void *arg)
{
	(void)arg;
	event_base_dispatch(S.base);
	return NULL;
}

static int
setup(void **state)
{
	struct sbx_gate_limits lim;
	struct evhttp_bound_socket *b;
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	struct sbx_err err;
	pthread_t th;

	(void)state;
	memset(&S, 0, sizeof(S));
	memset(&lim, 0, sizeof(lim));
	lim.head_max = 8192;
	lim.headers_max = 64;
	lim.header_timeout_ms = 1000;
	lim.max_connections = 8;
	S.base = event_base_new();
	S.http = evhttp_new(S.base);
	S.gate = sbx_gate_new(S.base, S.http, &lim, check, NULL, &err);
	assert_non_null(S.gate);
	evhttp_set_gencb(S.http, handler, NULL);
	b = evhttp_bind_socket_with_handle(S.http, "127.0.0.1", 0);
	assert_non_null(b);
	getsockname(evhttp_bound_socket_get_fd(b), (struct sockaddr *)&sin, &sl);
	S.port = ntohs(sin.sin_port);
	assert_int_equal(pthread_create(&th, NULL, loop, NULL), 0);
	pthread_detach(th);
	return 0;
}

static int
dial(void)
{
	struct sockaddr_in sin;
	struct timeval tv = { 5, 0 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)S.port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Reads until want bytes or the peer closes. */
static size_t
read_n(int fd, char *buf, size_t want)
{
	size_t n = 0;
	ssize_t r;

	while (n < want && (r = read(fd, buf + n, want - n)) > 0)
		n += (size_t)r;
	buf[n] = '\0';
	return n;
}

static int
wait_flag(int *flag)
{
	int i;

	for (i = 0; i < 200 && !__atomic_load_n(flag, __ATOMIC_SEQ_CST); i++)
		usleep(10000);
	return __atomic_load_n(flag, __ATOMIC_SEQ_CST);
}

static void
test_upgrade_hands_the_connection_over(void **state)
{
	static const char req[] = "POST /up HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 2\r\nConnection: Upgrade\r\nUpgrade: echo/1\r\n"
	    "\r\n{}early";
	static const char head[] = "HTTP/1.1 101 Switching Protocols\r\n"
	    "Connection: Upgrade\r\nUpgrade: echo/1\r\nX-Test: yes\r\n\r\n";
	char buf[512];
	int fd = dial(), i;

	(void)state;
	assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
	/* The head, then the bytes sent behind the request, echoed. */
	assert_int_equal(read_n(fd, buf, strlen(head) + 5), strlen(head) + 5);
	assert_memory_equal(buf, head, strlen(head));
	assert_string_equal(buf + strlen(head), "early");
	assert_true(wait_flag(&S.upgraded));
	/* Well after evhttp freed its connection: still both ways. */
	usleep(100000);
	for (i = 0; i < 3; i++) {
		assert_int_equal(write(fd, "ping", 4), 4);
		assert_int_equal(read_n(fd, buf, 4), 4);
		assert_string_equal(buf, "ping");
	}
	assert_int_equal(sbx_gate_connections(S.gate), 1);
	close(fd);
	assert_true(wait_flag(&S.closed));
	for (i = 0; i < 100 && sbx_gate_connections(S.gate) != 0; i++)
		usleep(10000);
	assert_int_equal(sbx_gate_connections(S.gate), 0);
}

/* sbx_httpd_takeover: the same hand-off, and not one byte of its own. */
static void
test_takeover_sends_nothing_of_its_own(void **state)
{
	static const char req[] = "GET /raw HTTP/1.1\r\nHost: x\r\n\r\nearly";
	char buf[64];
	int fd, i;

	(void)state;
	__atomic_store_n(&S.upgraded, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&S.closed, 0, __ATOMIC_SEQ_CST);
	fd = dial();
	assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
	/* The first bytes back are the echo of what followed the request. */
	assert_int_equal(read_n(fd, buf, 5), 5);
	assert_string_equal(buf, "early");
	assert_true(wait_flag(&S.upgraded));
	usleep(100000);
	assert_int_equal(write(fd, "ping", 4), 4);
	assert_int_equal(read_n(fd, buf, 4), 4);
	assert_string_equal(buf, "ping");
	assert_int_equal(sbx_gate_connections(S.gate), 1);
	close(fd);
	assert_true(wait_flag(&S.closed));
	for (i = 0; i < 100 && sbx_gate_connections(S.gate) != 0; i++)
		usleep(10000);
	assert_int_equal(sbx_gate_connections(S.gate), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_upgrade_hands_the_connection_over),
		cmocka_unit_test(test_takeover_sends_nothing_of_its_own),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
