/* test_broker_session.c - the broker's session link (broker/broker_session.c, adr/0050) over a real socket on 127.0.0.1:0 with a small echoing session driver of its own: the upgrade, credit both ways, the exit after the held output, CTRL, CANCEL, a client that goes, a protocol violation, a refusal before the upgrade. */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "broker.h"
#include "sbx_agent.h"
#include "sbx_driver.h"
#include "sbx_log.h"
#include "sbx_proto.h"

#define TOKEN "canary-token-5e1d2c3b4a596877"
#define ROOM (64 * 1024)      /* the echo driver's input room */

/* ------------------------------------------------------------------ */
/* An echoing session driver: input comes back as stdout, EOF exits 0   */

struct eop {
	struct sbx_op base;
	struct sbx_sink sink;
	struct evbuffer *pending;    /* taken, not yet echoed */
	struct event *ev;            /* start, then each echo turn */
	int started, paused, eof;
	const char *fail;            /* error code instead of a start */
};

static struct {
	struct sbx_driver d;
	struct eop *op;
	int opened, cancels, pauses, ctl_kind, ctl_a, ctl_b, stuck;
} D;

static void
op_free(struct eop *o)
{
	event_free(o->ev);
	evbuffer_free(o->pending);
	free(o);
	D.op = NULL;
}

static void
turn(evutil_socket_t fd, short what, void *arg)
{
	struct eop *o = arg;
	struct sbx_err err;
	unsigned char buf[16384];
	size_t n;

	(void)fd;
	(void)what;
	if (o->fail != NULL) {
		sbx_err_set(&err, o->fail, "sandbox t1 does not exist");
		o->sink.error(o->sink.arg, &err);
		op_free(o);
		return;
	}
	if (!o->started) {
		o->started = 1;
		o->sink.start(o->sink.arg, "xtest");
		if (D.op == NULL)
			return;
	}
	while (!o->paused && evbuffer_get_length(o->pending) > 0) {
		n = (size_t)evbuffer_remove(o->pending, buf, sizeof(buf));
		o->sink.output(o->sink.arg, 1, buf, n);
		if (D.op == NULL)
			return;
		if (o->sink.room != NULL)
			o->sink.room(o->sink.arg);
		if (D.op == NULL)
			return;
	}
	if (o->eof && evbuffer_get_length(o->pending) == 0) {
		struct sbx_exit ex = { .duration_ms = 1 };

		o->sink.exit(o->sink.arg, &ex);
		op_free(o);
	}
}

static struct sbx_op *
t_session(struct sbx_driver *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err)
{
	struct eop *o = calloc(1, sizeof(*o));

	(void)err;
	o->base.driver = d;
	o->sink = *sink;
	o->pending = evbuffer_new();
	o->ev = event_new(d->base, -1, 0, turn, o);
	if (strcmp(id, "absent") == 0)
		o->fail = SBX_E_NOT_FOUND;
	assert_true(req->kind == SBX_SESSION_EXEC || req->kind == SBX_SESSION_PORT);
	D.op = o;
	__atomic_add_fetch(&D.opened, 1, __ATOMIC_SEQ_CST);
	event_active(o->ev, EV_TIMEOUT, 0);
	return &o->base;
}

static ssize_t
t_write(struct sbx_driver *d, struct sbx_op *op, struct evbuffer *src,
    size_t max)
{
	struct eop *o = (struct eop *)op;
	size_t room = D.stuck ? 0 : ROOM - evbuffer_get_length(o->pending);

	(void)d;
	if (o->eof)
		return -1;
	if (max > room)
		max = room;
	if (max > evbuffer_get_length(src))
		max = evbuffer_get_length(src);
	evbuffer_remove_buffer(src, o->pending, max);
	if (max > 0)
		event_active(o->ev, EV_TIMEOUT, 0);
	return (ssize_t)max;
}

static size_t
t_room(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	return ROOM - evbuffer_get_length(((struct eop *)op)->pending);
}

static void
t_close_input(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	((struct eop *)op)->eof = 1;
	event_active(((struct eop *)op)->ev, EV_TIMEOUT, 0);
}

static int
t_control(struct sbx_driver *d, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err)
{
	(void)d;
	(void)op;
	(void)err;
	D.ctl_kind = c->kind;
	D.ctl_a = c->kind == SBX_SESSION_RESIZE ? c->cols : c->signo;
	D.ctl_b = c->rows;
	return 0;
}

static void
t_cancel(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	__atomic_add_fetch(&D.cancels, 1, __ATOMIC_SEQ_CST);
	op_free((struct eop *)op);
}

static void
t_pause(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	((struct eop *)op)->paused = 1;
	__atomic_add_fetch(&D.pauses, 1, __ATOMIC_SEQ_CST);
}

static void
t_resume(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	((struct eop *)op)->paused = 0;
	event_active(((struct eop *)op)->ev, EV_TIMEOUT, 0);
}

static void
t_free(struct sbx_driver *d)
{
	(void)d;
}

static const struct sbx_driver_ops t_ops = {
	.name = "echo",
	.cancel = t_cancel,
	.pause = t_pause,
	.resume = t_resume,
	.free = t_free,
	.session = t_session,
	.session_write = t_write,
	.session_room = t_room,
	.session_close_input = t_close_input,
	.session_control = t_control,
};

/* ------------------------------------------------------------------ */
/* The broker on its own thread; the test is the client                */

static struct {
	struct event_base *base;
	struct broker_server *server;
	struct broker_config cfg;
	char dir[64];
	int port;
	int wake[2];
	struct event *wake_ev;
	pthread_t th;
} F;

static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	event_base_loopbreak(F.base);
}

static void *
loop(void *arg)
{
	(void)arg;
	event_base_loop(F.base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

static int
setup(void **state)
{
	const char *argv[] = { "test", "--listen", "127.0.0.1:0",
	    "--state-dir", NULL, "--helper-path", "/nonexistent/sbx-helper" };
	struct sbx_token tok;
	struct sbx_err err;

	(void)state;
	memset(&F, 0, sizeof(F));
	memset(&D, 0, sizeof(D));
	signal(SIGPIPE, SIG_IGN);   /* as the daemons do */
	sbx_log_init("test", 2, SBX_LOG_ERROR);
	snprintf(F.dir, sizeof(F.dir), "/tmp/sbx-bsess-test.XXXXXX");
	assert_non_null(mkdtemp(F.dir));
	argv[4] = F.dir;
	assert_int_equal(sbx_config_load(broker_config_keys, &F.cfg, 7,
	    (char **)argv, NULL, &err), 0);
	assert_int_equal(broker_config_finish(&F.cfg, "/x/sandbox-broker",
	    &err), 0);
	assert_int_equal(sbx_token_set(&tok, TOKEN, strlen(TOKEN), &err), 0);
	F.base = event_base_new();
	D.d.ops = &t_ops;
	D.d.base = F.base;
	F.server = broker_server_new(F.base, &F.cfg, &D.d, &tok, &err);
	assert_non_null(F.server);
	sbx_token_clear(&tok);
	assert_int_equal(broker_server_listen(F.server, &err), 0);
	F.port = broker_server_port(F.server);
	assert_int_equal(pipe2(F.wake, O_NONBLOCK | O_CLOEXEC), 0);
	F.wake_ev = event_new(F.base, F.wake[0], EV_READ, wake_cb, NULL);
	event_add(F.wake_ev, NULL);
	assert_int_equal(pthread_create(&F.th, NULL, loop, NULL), 0);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[128];

	(void)state;
	assert_int_equal(write(F.wake[1], "x", 1), 1);
	pthread_join(F.th, NULL);
	broker_server_free(F.server);
	if (D.op != NULL)
		op_free(D.op);
	event_free(F.wake_ev);
	event_base_free(F.base);
	close(F.wake[0]);
	close(F.wake[1]);
	sbx_config_free(broker_config_keys, &F.cfg);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", F.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", F.dir);
	return 0;
}

/* ---------- the client ---------- */

struct cl {
	int fd;
	int status;
	char head[2048];
	uint64_t credit;              /* input credit the broker gave */
	size_t out;                   /* output bytes read */
	char last[512];               /* the last EVENT */
	int events;
};

static void
cl_frame(struct cl *c, int type, int flags, const void *p, uint32_t len)
{
	unsigned char h[SBX_AGENT_HDR];

	sbx_agent_hdr_put(h, type, flags, 1, len);
	assert_int_equal(write(c->fd, h, sizeof(h)), (ssize_t)sizeof(h));
	if (len > 0)
		assert_int_equal(write(c->fd, p, len), (ssize_t)len);
}

/* Output credit back; the broker may have closed after its last frame
 * (still being read here), so a failed send is fine. */
static void
cl_window(struct cl *c, uint32_t n)
{
	unsigned char f[SBX_AGENT_HDR + 4];
	ssize_t r;

	sbx_agent_hdr_put(f, SBX_AGENT_T_WINDOW, 1, 1, 4);
	sbx_agent_put32(f + SBX_AGENT_HDR, n);
	r = send(c->fd, f, sizeof(f), MSG_NOSIGNAL);
	(void)r;
}

static int
read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		if ((r = read(fd, (char *)buf + got, n - got)) <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* Opens a session with body; reads the head (and, not 101, the body into
 * c->last). */
static void
cl_open(struct cl *c, const char *id, const char *body)
{
	struct sockaddr_in sin;
	struct timeval tv = { 5, 0 };
	char req[1024];
	size_t n = 0;
	int len;

	memset(c, 0, sizeof(*c));
	c->credit = SBX_AGENT_WINDOW;
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)F.port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(c->fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	len = snprintf(req, sizeof(req), "POST /v1/sandboxes/%s/session HTTP/1.1\r\n"
	    "Host: b\r\nAuthorization: Bearer " TOKEN "\r\nConnection: Upgrade\r\n"
	    "Upgrade: sbx-session/1\r\nContent-Length: %zu\r\n\r\n%s", id,
	    strlen(body), body);
	assert_int_equal(write(c->fd, req, (size_t)len), len);
	/* One byte at a time up to the empty line: nothing of the frames. */
	while (n < sizeof(c->head) - 1 && read(c->fd, c->head + n, 1) == 1) {
		n++;
		if (n >= 4 && memcmp(c->head + n - 4, "\r\n\r\n", 4) == 0)
			break;
	}
	c->head[n] = '\0';
	assert_true(sscanf(c->head, "HTTP/1.1 %d", &c->status) == 1);
	if (c->status != 101) {
		n = (size_t)read(c->fd, c->last, sizeof(c->last) - 1);
		c->last[n] = '\0';
	}
}

/* Reads one frame: output is counted (and credited back when grant),
 * WINDOW adds input credit, EVENT is kept. Returns its type, 0 at EOF. */
static int
cl_read(struct cl *c, int grant)
{
	unsigned char h[SBX_AGENT_HDR], p[65536];
	struct sbx_agent_frame f;
	const char *why;

	if (read_full(c->fd, h, sizeof(h)) < 0)
		return 0;
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why) == 0 ||
	    h[0] == SBX_AGENT_T_EVENT, 1);
	f.type = h[0];
	f.flags = h[2];
	f.len = sbx_agent_get32(h + 8);
	assert_true(f.len <= sizeof(p));
	assert_int_equal(read_full(c->fd, p, f.len), 0);
	assert_int_equal(sbx_agent_get32(h + 4), 1);
	if (f.type == SBX_AGENT_T_DATA) {
		c->out += f.len;
		if (grant)
			cl_window(c, f.len);
	} else if (f.type == SBX_AGENT_T_WINDOW)
		c->credit += sbx_agent_get32(p);
	else if (f.type == SBX_AGENT_T_EVENT) {
		snprintf(c->last, sizeof(c->last), "%.*s", (int)f.len, p);
		c->events++;
	}
	return f.type;
}

/* Reads frames until an EVENT whose text holds what (or EOF). */
static int
cl_until_event(struct cl *c, const char *what, int grant)
{
	int t;

	while ((t = cl_read(c, grant)) != 0)
		if (t == SBX_AGENT_T_EVENT && strstr(c->last, what) != NULL)
			return 1;
	return 0;
}

static int
wait_count(int *v, int want)
{
	int i;

	for (i = 0; i < 300 && __atomic_load_n(v, __ATOMIC_SEQ_CST) < want; i++)
		usleep(10000);
	return __atomic_load_n(v, __ATOMIC_SEQ_CST) >= want;
}

/* ------------------------------------------------------------------ */

/* 1 MiB echoed within the credit both ways; EOF, then the exit last. */
static void
test_echo_with_credit_both_ways(void **state)
{
	static unsigned char chunk[65536];
	struct cl c;
	size_t sent = 0, n;
	int t;

	(void)state;
	cl_open(&c, "t1", "{\"kind\":\"exec\",\"argv\":[\"cat\"]}");
	assert_int_equal(c.status, 101);
	assert_non_null(strstr(c.head, "Upgrade: sbx-session/1"));
	assert_int_equal(cl_read(&c, 1), SBX_AGENT_T_EVENT);
	assert_non_null(strstr(c.last, "\"type\":\"start\",\"exec_id\":\"xtest\""));
	memset(chunk, 'e', sizeof(chunk));
	while (sent < 1024 * 1024) {
		while (c.credit == 0)
			assert_int_not_equal(t = cl_read(&c, 1), 0);
		n = sizeof(chunk) < c.credit ? sizeof(chunk) : (size_t)c.credit;
		cl_frame(&c, SBX_AGENT_T_DATA, 0, chunk, (uint32_t)n);
		c.credit -= n;
		sent += n;
	}
	cl_frame(&c, SBX_AGENT_T_EOF, 0, NULL, 0);
	if (!cl_until_event(&c, "\"type\":\"exit\"", 1))
		fail_msg("no exit: %zu of %zu bytes back, %d events, last %s, "
		    "errno %d", c.out, sent, c.events, c.last, errno);
	assert_int_equal(c.out, sent);
	assert_non_null(strstr(c.last, "\"code\":0"));
	assert_int_equal(cl_read(&c, 1), 0);    /* then the broker closes */
	close(c.fd);
}

/* Without output credit: one window, the session paused; the exit waits
 * behind the rest until credit comes. */
static void
test_output_waits_for_credit(void **state)
{
	static unsigned char chunk[65536];
	struct cl c;
	int i;

	(void)state;
	cl_open(&c, "t1", "{\"kind\":\"exec\",\"argv\":[\"cat\"]}");
	assert_int_equal(c.status, 101);
	memset(chunk, 'w', sizeof(chunk));
	/* 4 x 64 KiB of input, EOF: 256 KiB of output owed, all of it one
	 * window; then 64 KiB more once the broker gave credit back. */
	for (i = 0; i < 4; i++)
		cl_frame(&c, SBX_AGENT_T_DATA, 0, chunk, sizeof(chunk));
	c.credit -= 4 * sizeof(chunk);
	while (c.credit < sizeof(chunk))
		assert_int_not_equal(cl_read(&c, 0), 0);
	cl_frame(&c, SBX_AGENT_T_DATA, 0, chunk, sizeof(chunk));
	cl_frame(&c, SBX_AGENT_T_EOF, 0, NULL, 0);
	while (c.out < SBX_AGENT_WINDOW)
		assert_int_not_equal(cl_read(&c, 0), 0);
	assert_int_equal(c.out, SBX_AGENT_WINDOW);
	assert_true(wait_count(&D.pauses, 1));
	assert_int_equal(c.events, 1);             /* the start only */
	cl_window(&c, 65536);
	assert_true(cl_until_event(&c, "\"type\":\"exit\"", 0));
	assert_int_equal(c.out, SBX_AGENT_WINDOW + 65536);
	close(c.fd);
}

/* CTRL reaches the driver; CANCEL cancels and closes. */
static void
test_ctrl_and_cancel(void **state)
{
	struct sbx_agent_ctrl ac = { SBX_AGENT_CTRL_RESIZE, 132, 43 };
	unsigned char p[SBX_AGENT_CTRL_LEN];
	struct cl c;

	(void)state;
	cl_open(&c, "t1", "{\"kind\":\"exec\",\"argv\":[\"cat\"]}");
	assert_int_equal(c.status, 101);
	assert_int_equal(cl_read(&c, 1), SBX_AGENT_T_EVENT);
	assert_int_equal(cl_read(&c, 1), SBX_AGENT_T_WINDOW);  /* input credit grown */
	sbx_agent_ctrl_put(p, &ac);
	cl_frame(&c, SBX_AGENT_T_CTRL, 0, p, sizeof(p));
	cl_frame(&c, SBX_AGENT_T_CANCEL, 0, NULL, 0);
	if (cl_read(&c, 1) != 0)
		fail_msg("after CANCEL: %s", c.last);
	assert_true(wait_count(&D.cancels, 1));
	assert_int_equal(D.ctl_kind, SBX_SESSION_RESIZE);
	assert_int_equal(D.ctl_a, 132);
	assert_int_equal(D.ctl_b, 43);
	close(c.fd);
}

/* The client goes: the session is cancelled. */
static void
test_client_gone_cancels(void **state)
{
	struct cl c;

	(void)state;
	cl_open(&c, "t1", "{\"kind\":\"exec\",\"argv\":[\"cat\"]}");
	assert_int_equal(c.status, 101);
	assert_int_equal(cl_read(&c, 1), SBX_AGENT_T_EVENT);
	close(c.fd);
	assert_true(wait_count(&D.cancels, 1));
}

/* Input past the credit while the session takes none: an error EVENT,
 * the session cancelled, the connection closed. */
static void
test_input_past_credit_is_a_violation(void **state)
{
	static unsigned char chunk[65536];
	struct cl c;
	int i;

	(void)state;
	D.stuck = 1;
	cl_open(&c, "t1", "{\"kind\":\"exec\",\"argv\":[\"cat\"]}");
	assert_int_equal(c.status, 101);
	for (i = 0; i < SBX_AGENT_STDIN_WINDOW / 65536 + 1; i++)
		cl_frame(&c, SBX_AGENT_T_DATA, 0, chunk, sizeof(chunk));
	assert_true(cl_until_event(&c, "runtime_error", 1));
	assert_int_equal(cl_read(&c, 1), 0);
	assert_true(wait_count(&D.cancels, 1));
	close(c.fd);
}

/* A driver error before the start is an ordinary HTTP error; a bad body
 * never reaches the driver. */
static void
test_refusals_before_the_upgrade(void **state)
{
	struct cl c;

	(void)state;
	cl_open(&c, "absent", "{\"kind\":\"exec\",\"argv\":[\"cat\"]}");
	assert_int_equal(c.status, 404);
	assert_non_null(strstr(c.last, "not_found"));
	close(c.fd);
	cl_open(&c, "t1", "{\"kind\":\"pty\",\"cols\":0,\"rows\":1}");
	assert_int_equal(c.status, 400);
	close(c.fd);
	assert_int_equal(D.opened, 1);
}

/* Port sessions have their own limit (max_port_sessions_per_sandbox, 32),
 * apart from the execs' (max_execs_per_sandbox, 8): the api's
 * port_connections_per_sandbox (32) is reachable by default. */
static void
test_port_sessions_have_their_own_limit(void **state)
{
	struct cl c[34];
	int i;

	(void)state;
	for (i = 0; i < 32; i++) {
		cl_open(&c[i], "t1", "{\"kind\":\"port\",\"port\":8080}");
		assert_int_equal(c[i].status, 101);
	}
	cl_open(&c[32], "t1", "{\"kind\":\"port\",\"port\":8080}");
	assert_int_equal(c[32].status, 429);
	assert_non_null(strstr(c[32].last, "too_many"));
	close(c[32].fd);
	/* execs are counted apart: one still opens */
	cl_open(&c[33], "t1", "{\"kind\":\"exec\",\"argv\":[\"cat\"]}");
	assert_int_equal(c[33].status, 101);
	close(c[33].fd);
	/* a port connection that ends frees its place */
	close(c[0].fd);
	assert_true(wait_count(&D.cancels, 2));
	cl_open(&c[0], "t1", "{\"kind\":\"port\",\"port\":8080}");
	assert_int_equal(c[0].status, 101);
	for (i = 0; i < 32; i++)
		close(c[i].fd);
	assert_true(wait_count(&D.cancels, 34));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_echo_with_credit_both_ways,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_output_waits_for_credit,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctrl_and_cancel, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_client_gone_cancels, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_input_past_credit_is_a_violation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals_before_the_upgrade,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_port_sessions_have_their_own_limit, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
