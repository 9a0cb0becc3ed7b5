/* test_api_ports_tcp.c - GET .../ports/{port}/tcp (raw TCP as WebSocket binary messages, the {"type":"eof"} half-close and its refusals) and a real sbxctl port-forward: three connections at once, a half-closing client that gets the whole answer, and an api older than the half-close; over ports_rig.h (adr/0053). */
#include "ports_rig.h"

#include "sbx_ws.h"

/* A masked client frame (RFC 6455 §5.2) of opcode op, n < 126. */
static size_t
ws_frame_op(unsigned char *out, int op, const char *p, size_t n)
{
	static const unsigned char mask[4] = { 0x11, 0x22, 0x33, 0x44 };
	size_t i;

	out[0] = (unsigned char)(0x80 | op);
	out[1] = (unsigned char)(0x80 | n);
	memcpy(out + 2, mask, 4);
	for (i = 0; i < n; i++)
		out[6 + i] = (unsigned char)p[i] ^ mask[i % 4];
	return 6 + n;
}

/* A masked binary frame of the client, n < 126. */
static size_t
ws_frame(unsigned char *out, const char *p, size_t n)
{
	return ws_frame_op(out, 2, p, n);
}

/* The sbxctl port-forward running (fwd_start), killed by the teardown
 * when a test failed before it stopped it. */
static pid_t fwd_running;

static int
tcp_stop(void **state)
{
	int st;

	if (fwd_running > 0) {
		kill(fwd_running, SIGKILL);
		waitpid(fwd_running, &st, 0);
		fwd_running = 0;
	}
	return up_stop(state);
}

/* ------------------------------------------------------------------ */
/* A server that answers after the client's EOF (what a half-close is   */
/* for): reads to EOF, then "got N\n" and DRAIN_ANSWER bytes, closes.   */

#define DRAIN_ANSWER ((size_t)2 * 1024 * 1024 + 17)
static unsigned char *drain_bytes;
static struct evconnlistener *drain_lis;
static int drain_port;
#define DRAIN_MAX 8
static struct bufferevent *drain_bev[DRAIN_MAX];
static size_t drain_got[DRAIN_MAX];
static int drain_answered[DRAIN_MAX];

static int
drain_slot(struct bufferevent *bev)
{
	int i;

	for (i = 0; i < DRAIN_MAX; i++)
		if (drain_bev[i] == bev)
			return i;
	fail_msg("not a drain connection");
	return -1;
}

static void
drain_read(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);

	(void)arg;
	drain_got[drain_slot(bev)] += evbuffer_get_length(in);
	evbuffer_drain(in, evbuffer_get_length(in));
}

static void
drain_write(struct bufferevent *bev, void *arg)
{
	int i = drain_slot(bev);

	(void)arg;
	if (drain_answered[i] && evbuffer_get_length(bufferevent_get_output(
	    bev)) == 0) {
		bufferevent_free(bev);   /* the answer is whole: close */
		drain_bev[i] = NULL;
	}
}

static void
drain_event(struct bufferevent *bev, short what, void *arg)
{
	int i = drain_slot(bev);
	char line[64];

	(void)arg;
	if ((what & BEV_EVENT_EOF) && !drain_answered[i]) {
		drain_read(bev, NULL);
		drain_answered[i] = 1;
		snprintf(line, sizeof(line), "got %zu\n", drain_got[i]);
		bufferevent_write(bev, line, strlen(line));
		bufferevent_write(bev, drain_bytes, DRAIN_ANSWER);
		return;
	}
	bufferevent_free(bev);
	drain_bev[i] = NULL;
}

static void
drain_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int len, void *arg)
{
	int i;

	(void)l;
	(void)sa;
	(void)len;
	(void)arg;
	for (i = 0; i < DRAIN_MAX && drain_bev[i] != NULL; i++)
		;
	assert_true(i < DRAIN_MAX);
	drain_bev[i] = bufferevent_socket_new(T.base, fd, BEV_OPT_CLOSE_ON_FREE);
	drain_got[i] = 0;
	drain_answered[i] = 0;
	bufferevent_setcb(drain_bev[i], drain_read, drain_write, drain_event, NULL);
	bufferevent_enable(drain_bev[i], EV_READ | EV_WRITE);
}

/* A listener on 127.0.0.1, any port: *port gets it. */
static struct evconnlistener *
listen_any(evconnlistener_cb cb, int *port)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	struct evconnlistener *l;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = evconnlistener_new_bind(T.base, cb, NULL, LEV_OPT_CLOSE_ON_FREE |
	    LEV_OPT_REUSEABLE, -1, (struct sockaddr *)&sin, sizeof(sin));
	assert_non_null(l);
	getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&sin, &sl);
	*port = ntohs(sin.sin_port);
	return l;
}

static int
drain_start(void **state)
{
	up_start(state);
	/* The drain server answers closed connections too (the refusals). */
	signal(SIGPIPE, SIG_IGN);
	drain_bytes = malloc(DRAIN_ANSWER);
	assert_non_null(drain_bytes);
	randombytes_buf(drain_bytes, DRAIN_ANSWER);
	drain_lis = listen_any(drain_accept, &drain_port);
	return 0;
}

static int
drain_stop(void **state)
{
	int i;

	for (i = 0; i < DRAIN_MAX; i++)
		if (drain_bev[i] != NULL) {
			bufferevent_free(drain_bev[i]);
			drain_bev[i] = NULL;
		}
	evconnlistener_free(drain_lis);
	free(drain_bytes);
	return tcp_stop(state);
}

/* What a whole tunnel's answer must be: "got N\n" and the drain bytes. */
static void
assert_drain_answer(struct evbuffer *got, size_t n_sent)
{
	char line[64];
	size_t ln = (size_t)snprintf(line, sizeof(line), "got %zu\n", n_sent);

	assert_int_equal(evbuffer_get_length(got), ln + DRAIN_ANSWER);
	assert_memory_equal(evbuffer_pullup(got, -1), line, ln);
	assert_true(memcmp(evbuffer_pullup(got, -1) + ln, drain_bytes,
	    DRAIN_ANSWER) == 0);
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

/* A raw WebSocket to GET .../tcp of port: the 101 read and checked;
 * returns the socket. */
static int
tcp_ws_open(int port)
{
	char head[768];
	struct evbuffer *b = evbuffer_new();
	struct evbuffer_ptr e;
	int fd = tu_raw_connect();

	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/tcp"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: websocket\r\n"
	    "Sec-WebSocket-Version: 13\r\n"
	    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "\r\n\r\n", 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 101", 12);
	e = evbuffer_search(b, "\r\n\r\n", 4, NULL);
	/* the server sends nothing before its first message */
	assert_int_equal(evbuffer_get_length(b), (size_t)e.pos + 4);
	evbuffer_free(b);
	return fd;
}

/* Reads the server's frames on fd until its close frame: binary payloads
 * into data, the close's code returned and its reason into reason. */
static int
ws_until_close(int fd, struct evbuffer *data, char *reason, size_t cap)
{
	struct evbuffer *b = evbuffer_new();
	const unsigned char *r;
	size_t have, len, hl;
	int code = -1, op, i;

	reason[0] = '\0';
	for (;;) {
		have = evbuffer_get_length(b);
		r = evbuffer_pullup(b, -1);
		if (have >= 2) {
			len = r[1] & 0x7f;
			hl = 2;
			if (len == 126) {
				hl = 4;
				len = have >= 4 ? (size_t)r[2] << 8 | r[3] : 0;
			} else if (len == 127) {
				hl = 10;
				for (len = 0, i = 0; i < 8 && have >= 10; i++)
					len = len << 8 | r[2 + i];
			}
			if (have >= hl && have >= hl + len) {
				op = r[0] & 0x0f;
				if (op == 2)
					evbuffer_add(data, r + hl, len);
				else if (op == 8) {
					assert_true(len >= 2);
					code = r[hl] << 8 | r[hl + 1];
					snprintf(reason, cap, "%.*s", (int)(len - 2),
					    (const char *)r + hl + 2);
					break;
				} else
					assert_true(op == 9);   /* a ping */
				evbuffer_drain(b, hl + len);
				continue;
			}
		}
		if (raw_read(fd, b, have + 1, NULL, 10000) != 0 &&
		    evbuffer_get_length(b) == have)
			break;   /* closed without a close frame */
		assert_true(evbuffer_get_length(b) > have);
	}
	evbuffer_free(b);
	return code;
}

/* {"type":"eof"} on GET .../tcp: the sandbox's server reads to its EOF
 * and its whole answer (2 MiB) still comes back, then close 1000. */
static void
test_tcp_eof_message_half_closes_and_the_answer_comes_whole(void **state)
{
	static const char eof[] = "{\"type\":\"eof\"}";
	unsigned char f[256];
	char reason[128];
	struct evbuffer *data = evbuffer_new();
	int fd;

	(void)state;
	fd = tcp_ws_open(drain_port);
	raw_send(fd, f, ws_frame(f, "request-bytes", 13));
	raw_send(fd, f, ws_frame(f, "-and-more", 9));
	raw_send(fd, f, ws_frame_op(f, 1, eof, strlen(eof)));
	assert_int_equal(ws_until_close(fd, data, reason, sizeof(reason)),
	    SBX_WS_NORMAL);
	assert_drain_answer(data, 22);
	close(fd);
	evbuffer_free(data);
}

/* After {"type":"eof"} nothing may come: a binary message (or a second
 * eof) is close 1008; any other text message is 1008 as it always was. */
static void
test_tcp_after_eof_a_message_and_other_text_are_1008(void **state)
{
	static const char eof[] = "{\"type\":\"eof\"}";
	static const char *bad_text[] = { "hello", "{\"type\":\"EOF\"}",
	    "{\"type\":\"eof\"", "[\"eof\"]" };
	unsigned char f[512];
	char reason[128];
	struct evbuffer *data = evbuffer_new();
	size_t n;
	int fd, i;

	(void)state;
	for (i = 0; i < 2; i++) {
		fd = tcp_ws_open(drain_port);
		/* One write: the api reads both before the server answers. */
		n = ws_frame_op(f, 1, eof, strlen(eof));
		n += i == 0 ? ws_frame(f + n, "late", 4) :
		    ws_frame_op(f + n, 1, eof, strlen(eof));
		raw_send(fd, f, n);
		assert_int_equal(ws_until_close(fd, data, reason, sizeof(reason)),
		    SBX_WS_POLICY);
		assert_non_null(strstr(reason, "input was closed"));
		close(fd);
	}
	for (i = 0; i < 4; i++) {
		fd = tcp_ws_open(drain_port);
		raw_send(fd, f, ws_frame_op(f, 1, bad_text[i], strlen(bad_text[i])));
		assert_int_equal(ws_until_close(fd, data, reason, sizeof(reason)),
		    SBX_WS_POLICY);
		assert_non_null(strstr(reason, "binary frames carry the TCP bytes"));
		close(fd);
	}
	/* none of them got a byte of an answer */
	assert_int_equal(evbuffer_get_length(data), 0);
	evbuffer_free(data);
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

/* A running `sbxctl port-forward n1 LOCAL:remote` against the api on
 * api_port; its stderr goes to errpath (NULL: /dev/null, unless
 * TU_DEBUG). */
struct fwd_proc {
	pid_t pid;
	int local;
};

static void
fwd_start(struct fwd_proc *p, int api_port, int remote, const char *errpath)
{
	char bin[600], url[64], spec[32];
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	int fd;

	sbxctl_path(bin, sizeof(bin));
	if (access(bin, X_OK) != 0)
		fail_msg("no sbxctl at %s: build it first (make all)", bin);
	/* a free port for LOCAL */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	getsockname(fd, (struct sockaddr *)&sin, &sl);
	p->local = ntohs(sin.sin_port);
	close(fd);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", api_port);
	snprintf(spec, sizeof(spec), "%d:%d", p->local, remote);
	p->pid = fork();
	assert_true(p->pid >= 0);
	if (p->pid > 0)
		fwd_running = p->pid;
	if (p->pid == 0) {
		int e = errpath != NULL ? open(errpath, O_WRONLY | O_CREAT |
		    O_TRUNC, 0600) : open("/dev/null", O_WRONLY);

		if (errpath != NULL || getenv("TU_DEBUG") == NULL)
			dup2(e, 2);
		setenv("SBX_URL", url, 1);
		setenv("SBX_KEY", ka, 1);
		setenv("HOME", "/nonexistent", 1);
		unsetenv("SBX_CLI_CONFIG");
		execl(bin, "sbxctl", "port-forward", "n1", spec, (char *)NULL);
		_exit(127);
	}
}

/* A connection to the forward's LOCAL port (it may still be starting). */
static int
fwd_connect(const struct fwd_proc *p)
{
	struct sockaddr_in sin;
	int fd, tries;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons((uint16_t)p->local);
	for (tries = 0; tries < 200; tries++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0)
			return fd;
		close(fd);
		tu_spin(20);
	}
	fail_msg("sbxctl port-forward did not listen on %d", p->local);
	return -1;
}

/* Ctrl-C: it exits 0. */
static void
fwd_stop(struct fwd_proc *p)
{
	int st = -1, tries;

	tu_spin(100);
	kill(p->pid, SIGINT);
	for (tries = 0; tries < 200 && waitpid(p->pid, &st, WNOHANG) == 0;
	    tries++)
		tu_spin(20);
	if (tries < 200)
		fwd_running = 0;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* sbxctl port-forward: a real sbxctl process, three local connections at
 * once, each its own tunnel to the upstream's echo; Ctrl-C ends it with 0. */
static void
test_sbxctl_port_forward_carries_many_connections(void **state)
{
	static const char up_head[] = "GET / HTTP/1.1\r\nConnection: "
	    "Upgrade\r\nUpgrade: echo\r\n\r\n";
	char msg[32];
	struct evbuffer *b[3];
	struct fwd_proc p;
	int fd[3], i;

	(void)state;
	fwd_start(&p, T.port, ws_port, NULL);
	for (i = 0; i < 3; i++) {
		fd[i] = fwd_connect(&p);
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
	fwd_stop(&p);
}

/* The reproduction of the half-close bug: a local client writes its
 * request, shutdown(SHUT_WR), reads to EOF — and gets the server's whole
 * answer (2 MiB), which the server sends only after its EOF, then EOF. */
static void
test_sbxctl_port_forward_half_close_gets_the_whole_answer(void **state)
{
	struct evbuffer *got = evbuffer_new();
	struct fwd_proc p;
	int fd;

	(void)state;
	fwd_start(&p, T.port, drain_port, NULL);
	fd = fwd_connect(&p);
	raw_send(fd, "a request of 25 bytes....", 25);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	assert_int_equal(raw_read(fd, got, 0, NULL, 20000), 1);   /* EOF */
	assert_drain_answer(got, 25);
	close(fd);
	evbuffer_free(got);
	fwd_stop(&p);
}

/* ------------------------------------------------------------------ */
/* An api older than {"type":"eof"}: its GET .../sandbox and a .../tcp  */
/* WebSocket that echoes binary messages and refuses text with 1008.    */

static struct evconnlistener *old_lis;
static int old_port;
static struct sbx_ws *old_ws;
static unsigned old_eofs_refused;

static void
old_message(void *arg, int text, const unsigned char *p, size_t n)
{
	(void)arg;
	if (text) {
		old_eofs_refused++;
		sbx_ws_close(old_ws, SBX_WS_POLICY, "binary frames only: they "
		    "carry the TCP bytes");
		return;
	}
	sbx_ws_send(old_ws, 0, p, n, NULL, 0);
}

static void
old_closed(void *arg, int code, const char *reason)
{
	(void)arg;
	(void)code;
	(void)reason;
	sbx_ws_free(old_ws);
	old_ws = NULL;
}

static const struct sbx_ws_ops old_ops = { old_message, NULL, old_closed,
	NULL };

static void
old_read(struct bufferevent *bev, void *arg)
{
	static const char st[] = "{\"state\":\"running\"}";
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr e = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	char head[2048], acc[SBX_WS_ACCEPT_LEN + 1], key[64], *k;
	struct sbx_err err;

	(void)arg;
	if (e.pos < 0 || (size_t)e.pos + 4 >= sizeof(head))
		return;
	evbuffer_remove(in, head, (size_t)e.pos + 4);
	head[e.pos + 4] = '\0';
	if (strstr(head, "/tcp HTTP/1.1") == NULL) {
		/* sbxctl's one look at the sandbox before it listens */
		evbuffer_add_printf(bufferevent_get_output(bev), "HTTP/1.1 200 "
		    "OK\r\nContent-Type: application/json\r\nContent-Length: "
		    "%zu\r\nConnection: close\r\n\r\n%s", strlen(st), st);
		return;   /* sbxctl closes; old_event frees */
	}
	k = strcasestr(head, "Sec-WebSocket-Key: ");
	assert_non_null(k);
	assert_int_equal(sscanf(k + 19, "%63[^\r]", key), 1);
	assert_int_equal(sbx_ws_accept_value(key, acc), 0);
	evbuffer_add_printf(bufferevent_get_output(bev), "HTTP/1.1 101 "
	    "Switching Protocols\r\nUpgrade: websocket\r\nConnection: "
	    "Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", acc);
	assert_null(old_ws);
	sbx_err_clear(&err);
	old_ws = sbx_ws_new(bev, SBX_WS_SERVER, NULL, &old_ops, NULL, &err);
	assert_non_null(old_ws);
}

static void
old_event(struct bufferevent *bev, short what, void *arg)
{
	(void)what;
	(void)arg;
	bufferevent_free(bev);
}

static void
old_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int len, void *arg)
{
	struct bufferevent *bev = bufferevent_socket_new(T.base, fd,
	    BEV_OPT_CLOSE_ON_FREE);

	(void)l;
	(void)sa;
	(void)len;
	(void)arg;
	bufferevent_setcb(bev, old_read, NULL, old_event, NULL);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* Against an older api, which refuses {"type":"eof"} with 1008: the local
 * client's half-close ends its tunnel as it did before (what came is
 * delivered, then EOF), nothing is printed, and the forward goes on. */
static void
test_sbxctl_port_forward_with_an_api_before_the_half_close(void **state)
{
	char errpath[] = "/tmp/sbx-fwd-err-XXXXXX", buf[4096];
	struct evbuffer *got = evbuffer_new();
	struct fwd_proc p;
	int64_t end;
	ssize_t n;
	int fd, efd, i;

	(void)state;
	old_lis = listen_any(old_accept, &old_port);
	old_ws = NULL;
	old_eofs_refused = 0;
	efd = mkstemp(errpath);
	assert_true(efd >= 0);
	fwd_start(&p, old_port, 9, errpath);
	for (i = 0; i < 2; i++) {
		fd = fwd_connect(&p);
		raw_send(fd, "ping", 4);
		assert_int_equal(raw_read(fd, got, 4, NULL, 10000), 0);
		assert_int_equal(shutdown(fd, SHUT_WR), 0);
		assert_int_equal(raw_read(fd, got, 0, NULL, 10000), 1);   /* EOF */
		assert_int_equal(evbuffer_get_length(got), 4);
		assert_memory_equal(evbuffer_pullup(got, -1), "ping", 4);
		evbuffer_drain(got, 4);
		close(fd);
		/* the close handshake ends */
		for (end = sbx_mono_ms() + 10000; old_ws != NULL &&
		    sbx_mono_ms() < end; )
			event_base_loop(T.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		assert_null(old_ws);
	}
	assert_int_equal(old_eofs_refused, 2);
	fwd_stop(&p);
	n = read(efd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	assert_null(strstr(buf, "binary frames only"));
	close(efd);
	unlink(errpath);
	evconnlistener_free(old_lis);
	evbuffer_free(got);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_tcp_websocket_carries_raw_bytes, up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_sbxctl_port_forward_carries_many_connections, up_start,
		    tcp_stop),
		cmocka_unit_test_setup_teardown(
		    test_tcp_eof_message_half_closes_and_the_answer_comes_whole,
		    drain_start, drain_stop),
		cmocka_unit_test_setup_teardown(
		    test_tcp_after_eof_a_message_and_other_text_are_1008,
		    drain_start, drain_stop),
		cmocka_unit_test_setup_teardown(
		    test_sbxctl_port_forward_half_close_gets_the_whole_answer,
		    drain_start, drain_stop),
		cmocka_unit_test_setup_teardown(
		    test_sbxctl_port_forward_with_an_api_before_the_half_close,
		    up_start, tcp_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
