/* test_api_ports_tcp.c - GET .../ports/{port}/tcp (raw TCP as WebSocket binary messages) and a real sbxctl port-forward with three connections at once, over ports_rig.h (adr/0053). */
#include "ports_rig.h"

/* A masked binary frame of the client (RFC 6455 §5.2), n < 126. */
static size_t
ws_frame(unsigned char *out, const char *p, size_t n)
{
	static const unsigned char mask[4] = { 0x11, 0x22, 0x33, 0x44 };
	size_t i;

	out[0] = 0x82;
	out[1] = (unsigned char)(0x80 | n);
	memcpy(out + 2, mask, 4);
	for (i = 0; i < n; i++)
		out[6 + i] = (unsigned char)p[i] ^ mask[i % 4];
	return 6 + n;
}

/* The payloads of the server's binary frames in raw (unmasked, lengths
 * < 65536), appended to out; returns the bytes of raw used. */
static size_t
ws_payloads(const unsigned char *raw, size_t n, struct evbuffer *out)
{
	size_t at = 0, len, hl;

	while (n - at >= 2) {
		len = raw[at + 1] & 0x7f;
		hl = 2;
		if (len == 126) {
			if (n - at < 4)
				break;
			len = (size_t)raw[at + 2] << 8 | raw[at + 3];
			hl = 4;
		}
		assert_true(len < 127 || hl == 4);
		if (n - at < hl + len)
			break;
		assert_int_equal(raw[at] & 0x0f, 2);   /* binary */
		evbuffer_add(out, raw + at + hl, len);
		at += hl + len;
	}
	return at;
}

/* GET .../tcp: a WebSocket whose binary messages are the TCP bytes. */
static void
test_tcp_websocket_carries_raw_bytes(void **state)
{
	char head[768];
	struct evbuffer *b = evbuffer_new(), *pl = evbuffer_new();
	unsigned char f[256];
	const char *up = "GET / HTTP/1.1\r\nConnection: Upgrade\r\n"
	    "Upgrade: echo\r\n\r\n";
	struct tu_res r = { 0 };
	struct evbuffer_ptr e;
	size_t used;
	int fd = tu_raw_connect();

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/tcp"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: websocket\r\n"
	    "Sec-WebSocket-Version: 13\r\n"
	    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", ws_port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "\r\n\r\n", 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 101", 12);
	/* RFC 6455 §1.3's example key and its accept value. */
	assert_true(evbuffer_search(b, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", 28,
	    NULL).pos >= 0);
	e = evbuffer_search(b, "\r\n\r\n", 4, NULL);
	evbuffer_drain(b, (size_t)e.pos + 4);
	/* Raw TCP through frames: the upstream's own handshake, then echo. */
	raw_send(fd, f, ws_frame(f, up, strlen(up)));
	raw_send(fd, f, ws_frame(f, "tcp-bytes", 9));
	while (evbuffer_search(pl, "tcp-bytes", 9, NULL).pos < 0) {
		assert_int_equal(raw_read(fd, b, evbuffer_get_length(b) + 1, NULL,
		    5000), 0);
		used = ws_payloads(evbuffer_pullup(b, -1), evbuffer_get_length(b),
		    pl);
		evbuffer_drain(b, used);
	}
	assert_memory_equal(evbuffer_pullup(pl, 12), "HTTP/1.1 101", 12);
	close(fd);
	/* Not a handshake: 400 before anything is opened. */
	snprintf(head, sizeof(head), "/api/v1/npcs/n1/sandbox/ports/%d/tcp",
	    ws_port);
	assert_int_equal(tu_req(&r, "GET", head, ka, NULL), 400);
	tu_res_free(&r);
	evbuffer_free(b);
	evbuffer_free(pl);
}

/* sbxctl beside this test binary (BUILD/sbxctl for BUILD/tests/test_x),
 * else the plain build's (a sanitizer build makes tests only; run from the
 * repository root, as the runner does). */
static void
sbxctl_path(char *out, size_t cap)
{
	char self[512];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	assert_true(n > 0);
	self[n] = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	snprintf(out, cap, "%s/sbxctl", self);
	if (access(out, X_OK) != 0)
		snprintf(out, cap, "build/out/sbxctl");
}

/* sbxctl port-forward: a real sbxctl process, three local connections at
 * once, each its own tunnel to the upstream's echo; Ctrl-C ends it with 0. */
static void
test_sbxctl_port_forward_carries_many_connections(void **state)
{
	static const char up_head[] = "GET / HTTP/1.1\r\nConnection: "
	    "Upgrade\r\nUpgrade: echo\r\n\r\n";
	char bin[600], url[64], spec[32], msg[32];
	struct evbuffer *b[3];
	struct sockaddr_in sin;
	int local = 0, fd[3], i, st = -1, tries;
	pid_t pid;

	(void)state;
	sbxctl_path(bin, sizeof(bin));
	if (access(bin, X_OK) != 0)
		fail_msg("no sbxctl at %s: build it first (make all)", bin);
	/* a free port for LOCAL */
	fd[0] = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd[0], (struct sockaddr *)&sin, sizeof(sin)), 0);
	{
		socklen_t sl = sizeof(sin);

		getsockname(fd[0], (struct sockaddr *)&sin, &sl);
		local = ntohs(sin.sin_port);
	}
	close(fd[0]);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", T.port);
	snprintf(spec, sizeof(spec), "%d:%d", local, ws_port);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		if (getenv("TU_DEBUG") == NULL)
			dup2(nul, 2);
		setenv("SBX_URL", url, 1);
		setenv("SBX_KEY", ka, 1);
		setenv("HOME", "/nonexistent", 1);
		unsetenv("SBX_CLI_CONFIG");
		execl(bin, "sbxctl", "port-forward", "n1", spec, (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 3; i++) {
		for (tries = 0; tries < 200; tries++) {
			fd[i] = socket(AF_INET, SOCK_STREAM, 0);
			sin.sin_port = htons((uint16_t)local);
			if (connect(fd[i], (struct sockaddr *)&sin, sizeof(sin)) == 0)
				break;
			close(fd[i]);
			tu_spin(20);
		}
		assert_true(tries < 200);
		b[i] = evbuffer_new();
		raw_send(fd[i], up_head, strlen(up_head));
	}
	for (i = 0; i < 3; i++) {
		assert_int_equal(raw_read(fd[i], b[i], 0, "\r\n\r\n", 10000), 0);
		assert_memory_equal(evbuffer_pullup(b[i], 12), "HTTP/1.1 101", 12);
		evbuffer_drain(b[i], evbuffer_get_length(b[i]));
	}
	for (i = 0; i < 3; i++) {
		snprintf(msg, sizeof(msg), "tunnel-%d", i);
		raw_send(fd[i], msg, strlen(msg));
	}
	for (i = 0; i < 3; i++) {
		snprintf(msg, sizeof(msg), "tunnel-%d", i);
		assert_int_equal(raw_read(fd[i], b[i], strlen(msg), NULL, 10000), 0);
		assert_memory_equal(evbuffer_pullup(b[i], -1), msg, strlen(msg));
		close(fd[i]);
		evbuffer_free(b[i]);
	}
	tu_spin(100);
	kill(pid, SIGINT);
	for (tries = 0; tries < 200 && waitpid(pid, &st, WNOHANG) == 0; tries++)
		tu_spin(20);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_tcp_websocket_carries_raw_bytes, up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_sbxctl_port_forward_carries_many_connections, up_start,
		    up_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
