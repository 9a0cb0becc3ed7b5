/*
 * test_driver_engine_agent.c - the engine driver's agent channel (adr/0025)
 * against a fake Engine API on a unix socket that plays the sandbox agent on
 * the agent's exec stream (HELLO, then an exec mode's output and EXIT per
 * OPEN). What it pins: an agent whose start fails before its HELLO — the
 * start's connection reset, the stream closed right after the upgrade, a
 * 500 — is started once more, with one warn line, and the execs queued on
 * its channel run once each (adr/0025, amendment session 11); a second
 * failure ends them with the runtime's error. Uses only driver_engine.h,
 * the agent codec (proto/sbx_agent.h) and the helper's frame codec.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>

#include "driver_engine.h"
#include "sbx_agent.h"
#include "sbx_helper_frame.h"
#include "sbx_log.h"
#include "sbx_proto.h"

/* How the fake answers one start of the agent's exec. */
enum plan {
	P_OK,       /* 101, then it plays the agent */
	P_RESET,    /* closed with the request unread: the broker's read is reset */
	P_CLOSED,   /* 101, then closed before any HELLO */
	P_500,      /* Podman's answer when conmon was too slow (session 10) */
};

#define MAX_EXECS 16
#define MAX_PLAN 4

struct fx {
	struct event_base *base;
	struct evconnlistener *lis;
	char dir[64], sock[96], logpath[96], helper[96];
	int logfd;
	struct sbx_driver *drv;
	enum plan plan[MAX_PLAN];
	int starts;                /* agent starts answered */
	char agent_execs[MAX_EXECS][16];
	int nexecs;
	int opens;                 /* OPEN frames every agent got */
	int pending;               /* execs not ended yet */
};

struct conn {
	struct fx *f;
	struct bufferevent *bev;
	int agent;                 /* plays an agent: input is the broker's frames */
	struct sbx_agent_dec dec;
	unsigned char rec[SBX_AGENT_OPEN_MAX];
};

/* What one exec got. */
struct res {
	struct fx *f;
	int terminal, have_err;
	struct sbx_err err;
	struct sbx_exit ex;
	struct evbuffer *out;
};

/* ---------- the fake runtime ---------- */

static void
conn_close(struct conn *c)
{
	struct bufferevent *bev = c->bev;

	free(c);
	bufferevent_free(bev);
}

static void
flushed_close(struct bufferevent *bev, void *arg)
{
	(void)arg;
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		bufferevent_free(bev);
}

/* Closes c once what it wrote is gone. */
static void
conn_done(struct conn *c)
{
	struct bufferevent *bev = c->bev;

	free(c);
	bufferevent_setcb(bev, NULL, flushed_close, NULL, NULL);
	bufferevent_enable(bev, EV_WRITE);
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		bufferevent_free(bev);
}

static void
reply(struct conn *c, int status, const char *reason, json_t *body)
{
	char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;

	evbuffer_add_printf(bufferevent_get_output(c->bev),
	    "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
	    "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", status, reason,
	    text != NULL ? strlen(text) : 0, text != NULL ? text : "");
	free(text);
	json_decref(body);
	conn_done(c);
}

/* One agent frame, inside the runtime's stdout frame. */
static void
agent_send(struct conn *c, int type, int flags, uint32_t stream, const void *p, size_t n)
{
	unsigned char h[8], a[SBX_AGENT_HDR];
	size_t len = SBX_AGENT_HDR + n;

	h[0] = 1;
	h[1] = h[2] = h[3] = 0;
	h[4] = (unsigned char)(len >> 24);
	h[5] = (unsigned char)(len >> 16);
	h[6] = (unsigned char)(len >> 8);
	h[7] = (unsigned char)len;
	sbx_agent_hdr_put(a, type, flags, stream, (uint32_t)n);
	bufferevent_write(c->bev, h, sizeof(h));
	bufferevent_write(c->bev, a, sizeof(a));
	if (n > 0)
		bufferevent_write(c->bev, p, n);
}

/* The broker's frames at the agent: an exec mode says "hi" and exits 0. */
static int
agent_frame(void *arg, const struct sbx_agent_frame *fr, const unsigned char *p, size_t n,
    int last)
{
	struct conn *c = arg;
	struct sbx_agent_exit ex = { SBX_AGENT_EXIT_EXITED, 0, 0 };
	unsigned char out[64], e[4];
	size_t at = 0;

	(void)last;
	if (fr->type == SBX_AGENT_T_PING) {
		agent_send(c, SBX_AGENT_T_PONG, 0, 0, p, n);
		return 0;
	}
	if (fr->type != SBX_AGENT_T_OPEN)
		return 0;
	assert_true(n > 8 && memcmp(p + 8, "exec", 5) == 0);
	c->f->opens++;
	sbx_helper_frame_header(out, SBX_HELPER_FRAME_STDOUT, 3);
	memcpy(out + SBX_HELPER_FRAME_HDR, "hi\n", 3);
	at = SBX_HELPER_FRAME_HDR + 3;
	sbx_helper_frame_header(out + at, SBX_HELPER_FRAME_EXIT, SBX_HELPER_EXIT_REC_LEN);
	at += SBX_HELPER_FRAME_HDR;
	memset(out + at, 0, SBX_HELPER_EXIT_REC_LEN);
	out[at] = SBX_HELPER_EXIT_HOW_EXITED;
	at += SBX_HELPER_EXIT_REC_LEN;
	agent_send(c, SBX_AGENT_T_DATA, 1, fr->stream, out, at);
	sbx_agent_exit_put(e, &ex);
	agent_send(c, SBX_AGENT_T_EXIT, 0, fr->stream, e, sizeof(e));
	return 0;
}

static int
is_agent_exec(struct fx *f, const char *id)
{
	int i;

	for (i = 0; i < f->nexecs; i++)
		if (strcmp(f->agent_execs[i], id) == 0)
			return 1;
	return 0;
}

static void
start_agent(struct conn *c, enum plan plan)
{
	struct sbx_agent_hello h = { SBX_AGENT_PROTO, 4242, SBX_AGENT_WINDOW, 16 };
	unsigned char p[SBX_AGENT_HELLO_LEN];

	if (plan == P_500) {
		reply(c, 500, "Internal Server Error", json_pack("{s:s}", "message",
		    "attaching to container c0ffee exec session e0: timed out waiting "
		    "for file /x/userdata/e0/exit/c0ffee: internal libpod error"));
		return;
	}
	evbuffer_add_printf(bufferevent_get_output(c->bev),
	    "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/"
	    "vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n");
	if (plan == P_CLOSED) {
		conn_done(c);
		return;
	}
	c->agent = 1;
	sbx_agent_dec_init(&c->dec, 0, c->rec, sizeof(c->rec));
	sbx_agent_hello_put(p, &h);
	agent_send(c, SBX_AGENT_T_HELLO, 0, 0, p, sizeof(p));
}

static void
route(struct conn *c, const char *method, const char *path, json_t *body)
{
	struct fx *f = c->f;
	char id[32];

	(void)method;
	if (strcmp(path, "/v1.41/containers/sbx-t1/json") == 0) {
		reply(c, 200, "OK", json_pack("{s:s, s:s, s:{s:b, s:b, s:s}, "
		    "s:{s:s, s:{s:s, s:s, s:s, s:s}}, s:{s:{s:{}}}}",
		    "Id", "c0ffee0123456789", "Created", "2026-11-30T12:00:00.250Z",
		    "State", "Running", 1, "OOMKilled", 0, "Status", "running",
		    "Config", "Image", "img:1", "Labels", "io.sbx.managed", "true",
		    "io.sbx.id", "t1", "io.sbx.egress", "0", "io.sbx.image", "img:1",
		    "NetworkSettings", "Networks", "none"));
	} else if (strcmp(path, "/v1.41/containers/c0ffee0123456789/exec") == 0) {
		const char *mode = json_string_value(json_array_get(json_object_get(body,
		    "Cmd"), 1));

		assert_true(f->nexecs < MAX_EXECS);
		/* Every invocation rides the agent: only agents are exec'd. */
		assert_string_equal(mode, "agent");
		snprintf(f->agent_execs[f->nexecs], sizeof(f->agent_execs[0]), "e%d", f->nexecs);
		reply(c, 201, "Created", json_pack("{s:s}", "Id", f->agent_execs[f->nexecs++]));
	} else if (sscanf(path, "/v1.41/exec/%31[^/]/start", id) == 1 &&
	    is_agent_exec(f, id)) {
		start_agent(c, f->starts < MAX_PLAN ? f->plan[f->starts] : P_OK);
		f->starts++;
	} else {
		reply(c, 500, "Internal", json_pack("{s:s}", "message",
		    "fake: unexpected request"));
	}
}

/* 1 when the request line in buf is the start of an agent exec the plan
 * resets: the connection then goes with the rest of the request unread. */
static int
reset_now(struct fx *f, const char *line)
{
	char id[32];

	return sscanf(line, "POST /v1.41/exec/%31[^/]/start", id) == 1 &&
	    is_agent_exec(f, id) && f->starts < MAX_PLAN && f->plan[f->starts] == P_RESET;
}

static void
conn_read(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr p;
	char *head, method[16], path[512], *cl;
	size_t hlen, blen = 0, n;
	json_t *body = NULL;

	if (c->agent) {
		n = evbuffer_get_length(in);
		assert_int_equal(sbx_agent_dec_feed(&c->dec, evbuffer_pullup(in, -1), n,
		    agent_frame, c), 0);
		evbuffer_drain(in, n);
		return;
	}
	p = evbuffer_search(in, "\r\n", 2, NULL);
	if (p.pos < 0)
		return;
	head = calloc(1, (size_t)p.pos + 1);
	evbuffer_copyout(in, head, (size_t)p.pos);
	if (reset_now(c->f, head)) {
		free(head);
		c->f->starts++;
		conn_close(c);   /* unread bytes: the peer's next read is reset */
		return;
	}
	free(head);
	p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (p.pos < 0)
		return;
	hlen = (size_t)p.pos + 4;
	head = calloc(1, hlen + 1);
	evbuffer_copyout(in, head, hlen);
	if ((cl = strcasestr(head, "Content-Length:")) != NULL)
		blen = strtoul(cl + 15, NULL, 10);
	if (evbuffer_get_length(in) < hlen + blen) {
		free(head);
		return;
	}
	evbuffer_drain(in, hlen);
	if (blen > 0) {
		char *b = malloc(blen);

		evbuffer_remove(in, b, blen);
		body = json_loadb(b, blen, 0, NULL);
		free(b);
	}
	sscanf(head, "%15s %511s", method, path);
	free(head);
	route(c, method, path, body);
	json_decref(body);
}

static void
conn_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	conn_close(arg);
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
    void *arg)
{
	struct conn *c = calloc(1, sizeof(*c));

	(void)l;
	(void)sa;
	(void)len;
	c->f = arg;
	c->bev = bufferevent_socket_new(c->f->base, fd, BEV_OPT_CLOSE_ON_FREE);
	/* Small reads: a request line is seen while the rest of the request
	 * still sits in the socket (P_RESET). */
	bufferevent_set_max_single_read(c->bev, 16);
	bufferevent_setcb(c->bev, conn_read, NULL, conn_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* ---------- fixture ---------- */

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct sbx_engine_config cfg;
	struct sockaddr_un sun;
	struct sbx_err err;
	FILE *fp;

	f->base = event_base_new();
	snprintf(f->dir, sizeof(f->dir), "/tmp/sbx-engine-agent-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->sock, sizeof(f->sock), "%s/engine.sock", f->dir);
	snprintf(f->logpath, sizeof(f->logpath), "%s/log", f->dir);
	snprintf(f->helper, sizeof(f->helper), "%s/sbx-helper", f->dir);
	fp = fopen(f->helper, "w");
	assert_non_null(fp);
	fputs("a fake sbx-helper\n", fp);
	fclose(fp);
	f->logfd = open(f->logpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(f->logfd >= 0);
	sbx_log_init("test", f->logfd, SBX_LOG_WARN);
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", f->sock);
	f->lis = evconnlistener_new_bind(f->base, on_accept, f, LEV_OPT_CLOSE_ON_FREE, 16,
	    (struct sockaddr *)&sun, sizeof(sun));
	assert_non_null(f->lis);
	memset(&cfg, 0, sizeof(cfg));
	cfg.runtime_socket = f->sock;
	cfg.default_image = "img:1";
	cfg.helper_path = f->helper;
	cfg.memory_bytes.def = 256 << 20;
	cfg.memory_bytes.ceiling = 512 << 20;
	cfg.exec_timeout_ms.def = 5000;
	cfg.exec_timeout_ms.ceiling = 10000;
	cfg.exec_output_cap = 1000;
	cfg.file_timeout_ms = 300;
	cfg.agent_runtime_only = 1;   /* the exec stream is the channel (session 10's case) */
	f->drv = sbx_engine_driver_new(f->base, &cfg, &err);
	assert_non_null(f->drv);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;
	struct timeval tv = { 0, 50000 };

	sbx_driver_free(f->drv);
	/* The fake's agents hear their streams' end. */
	event_base_loopexit(f->base, &tv);
	event_base_dispatch(f->base);
	evconnlistener_free(f->lis);
	event_base_free(f->base);
	sbx_log_init("test", 2, SBX_LOG_INFO);
	close(f->logfd);
	unlink(f->logpath);
	unlink(f->helper);
	unlink(f->sock);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Lines of the log holding every one of a and b. */
static int
log_lines(struct fx *f, const char *a, const char *b)
{
	char buf[8192], *line, *save = NULL;
	ssize_t n = pread(f->logfd, buf, sizeof(buf) - 1, 0);
	int count = 0;

	assert_true(n >= 0);
	buf[n] = '\0';
	for (line = strtok_r(buf, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save))
		count += strstr(line, a) != NULL && strstr(line, b) != NULL;
	return count;
}

/* ---------- execs ---------- */

static void
s_start(void *arg, const char *exec_id)
{
	(void)arg;
	(void)exec_id;
}

static void
s_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct res *r = arg;

	if (stream == 1)
		evbuffer_add(r->out, buf, len);
}

static void
s_exit(void *arg, const struct sbx_exit *ex)
{
	struct res *r = arg;

	r->terminal++;
	r->ex = *ex;
	if (--r->f->pending == 0)
		event_base_loopbreak(r->f->base);
}

static void
s_error(void *arg, const struct sbx_err *err)
{
	struct res *r = arg;

	r->terminal++;
	r->have_err = 1;
	r->err = *err;
	if (getenv("TEST_DEBUG") != NULL)
		fprintf(stderr, "exec error: %s: %s\n", err->code, err->message);
	if (--r->f->pending == 0)
		event_base_loopbreak(r->f->base);
}

/* Starts `echo hi` in t1 with r's callbacks (it waits for the agent). */
static void
exec_start(struct fx *f, struct res *r)
{
	static const char *const argv[] = { "echo", "hi", NULL };
	struct sbx_sink sink = { s_start, s_output, s_exit, s_error, r, NULL };
	struct sbx_exec_req req;
	struct sbx_err err;

	memset(r, 0, sizeof(*r));
	r->f = f;
	r->out = evbuffer_new();
	memset(&req, 0, sizeof(req));
	req.argv = argv;
	assert_non_null(f->drv->ops->exec(f->drv, "t1", &req, &sink, &err));
	f->pending++;
}

static void
run(struct fx *f)
{
	struct timeval limit = { 10, 0 };

	event_base_loopexit(f->base, &limit);
	event_base_dispatch(f->base);
	assert_int_equal(f->pending, 0);
}

/* r ended as `echo hi` does. */
static void
ran_once(struct res *r)
{
	assert_false(r->have_err);
	assert_int_equal(r->terminal, 1);
	assert_int_equal(r->ex.code, 0);
	assert_int_equal(evbuffer_get_length(r->out), 3);
	assert_memory_equal(evbuffer_pullup(r->out, -1), "hi\n", 3);
	evbuffer_free(r->out);
}

/* Both execs were queued before the agent's first start, whose request was
 * reset before any answer (the flake's runtime_unavailable): the second start
 * takes them, each OPEN goes once. */
static void
test_agent_start_reset_is_tried_again(void **state)
{
	struct fx *f = *state;
	struct res a, b;

	f->plan[0] = P_RESET;
	exec_start(f, &a);
	exec_start(f, &b);
	run(f);
	ran_once(&a);
	ran_once(&b);
	assert_int_equal(f->starts, 2);
	assert_int_equal(f->opens, 2);
	assert_int_equal(log_lines(f, "starting it once more", "\"t1\""), 1);
	/* The channel lives on: the next exec takes it without a start. */
	exec_start(f, &a);
	run(f);
	ran_once(&a);
	assert_int_equal(f->starts, 2);
	assert_int_equal(f->opens, 3);
}

/* The stream closed right after its upgrade, before the HELLO: what was
 * queued had not gone into that stream; it goes once on the next. */
static void
test_agent_stream_closed_before_hello_is_tried_again(void **state)
{
	struct fx *f = *state;
	struct res a, b;

	f->plan[0] = P_CLOSED;
	exec_start(f, &a);
	exec_start(f, &b);
	run(f);
	ran_once(&a);
	ran_once(&b);
	assert_int_equal(f->starts, 2);
	assert_int_equal(f->opens, 2);
	assert_int_equal(log_lines(f, "starting it once more", "\"t1\""), 1);
}

/* Podman's 500 first, then a reset: the exec ends with the second cause
 * (runtime_unavailable) and says the agent was tried twice; one warn line.
 * The next exec starts a new agent and runs. */
static void
test_agent_start_failing_twice_ends_the_exec(void **state)
{
	struct fx *f = *state;
	struct res a;

	f->plan[0] = P_500;
	f->plan[1] = P_RESET;
	exec_start(f, &a);
	run(f);
	assert_int_equal(a.terminal, 1);
	assert_true(a.have_err);
	assert_string_equal(a.err.code, SBX_E_RUNTIME_UNAVAILABLE);
	assert_non_null(strstr(a.err.message, "the sandbox agent did not start, twice: "));
	assert_non_null(strstr(a.err.message, "container runtime"));
	assert_int_equal(f->opens, 0);
	assert_int_equal(f->starts, 2);
	assert_int_equal(log_lines(f, "starting it once more", "HTTP 500"), 1);
	assert_int_equal(log_lines(f, "runtime refused", "timed out waiting"), 1);
	evbuffer_free(a.out);
	exec_start(f, &a);
	run(f);
	ran_once(&a);
	assert_int_equal(f->starts, 3);
	assert_int_equal(log_lines(f, "starting it once more", "\"t1\""), 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_agent_start_reset_is_tried_again,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_stream_closed_before_hello_is_tried_again,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_start_failing_twice_ends_the_exec,
		    setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);   /* as the broker: a write to a closed stream fails */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
