/* test_agent.c - the broker's agent channel (broker/agent.c) against a real `sbx-helper agent` on a socketpair, and against a hostile one. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "agent.h"
#include "sbx_proto.h"
#include "sbx_helper_proto.h"

/* ------------------------------------------------------------------ */
/* a real agent child on a socketpair                                  */

struct rig {
	struct event_base *base;
	struct bufferevent *bev;
	struct sbx_agent_chan *ch;
	pid_t pid;
	int closed, ready;
	char root[64], state[64];
	char closed_code[48];
};

static const char *
helper_bin(void)
{
	static char path[4200];
	const char *e = getenv("SBX_HELPER_BIN");
	char self[4096], *slash;
	ssize_t n;

	if (e != NULL)
		return e;
	if (access("build/out/sbx-helper", X_OK) == 0)
		return "build/out/sbx-helper";
	/* build/<kind>/tests/test_agent -> build/out/sbx-helper */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		if ((slash = strstr(self, "/build/")) != NULL) {
			*slash = '\0';
			snprintf(path, sizeof(path), "%s/build/out/sbx-helper", self);
			return path;
		}
	}
	return "build/out/sbx-helper";
}

static void
on_closed(void *arg, const struct sbx_err *err)
{
	struct rig *r = arg;

	r->closed++;
	snprintf(r->closed_code, sizeof(r->closed_code), "%s", err->code);
}

static void
on_ready(void *arg, const struct sbx_agent_hello *h)
{
	struct rig *r = arg;

	(void)h;
	r->ready++;
}

/* Starts `sbx-helper agent` (or, with fake_fd, gives the test the other end). */
static void
rig_up(struct rig *r, int *fake_fd)
{
	struct sbx_agent_chan_cbs cbs = { on_ready, on_closed, r };
	int sv[2];

	memset(r, 0, sizeof(*r));
	snprintf(r->root, sizeof(r->root), "/tmp/sbx-agent-w-XXXXXX");
	snprintf(r->state, sizeof(r->state), "/tmp/sbx-agent-s-XXXXXX");
	assert_non_null(mkdtemp(r->root));
	assert_non_null(mkdtemp(r->state));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	if (fake_fd != NULL) {
		*fake_fd = sv[1];
		r->pid = -1;
	} else {
		assert_return_code(access(helper_bin(), X_OK), errno);
		r->pid = fork();
		assert_true(r->pid >= 0);
		if (r->pid == 0) {
			dup2(sv[1], 0);
			dup2(sv[1], 1);
			execl(helper_bin(), "sbx-helper", "--root", r->root, "--state-dir", r->state,
			    "agent", "--idle-ms", "60000", (char *)NULL);
			_exit(127);
		}
		close(sv[1]);
	}
	r->base = event_base_new();
	r->bev = bufferevent_socket_new(r->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	r->ch = sbx_agent_chan_new(r->base, &cbs);
	assert_non_null(r->ch);
	assert_int_equal(sbx_agent_chan_attach_bev(r->ch, r->bev), 0);
}

static void
run_until(struct rig *r, int *flag, int want, int ms)
{
	struct timeval tv = { 0, 10000 };
	int i;

	for (i = 0; i < ms / 10 && *flag < want; i++) {
		event_base_loopexit(r->base, &tv);
		event_base_dispatch(r->base);
	}
}

static void
rig_down(struct rig *r)
{
	char cmd[256];
	int st;

	sbx_agent_chan_free(r->ch);
	bufferevent_free(r->bev);
	event_base_free(r->base);
	if (r->pid > 0) {
		/* The channel closed: the agent must end by itself. */
		int i;

		for (i = 0; i < 500 && waitpid(r->pid, &st, WNOHANG) == 0; i++)
			usleep(10000);
		if (i == 500) {
			kill(r->pid, SIGKILL);
			waitpid(r->pid, &st, 0);
			fail_msg("the agent did not exit when its channel closed");
		}
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s %s", r->root, r->state);
	if (system(cmd) != 0)
		fail_msg("cannot remove %s", r->root);
}

/* What one stream got. */
struct got {
	unsigned char *out[3];
	size_t len[3];
	int exits, errors, status, sig, rooms;
	char code[48];
	struct sbx_agent_stream *st;
	int pause_after;   /* pause the stream once this much output came (0: never) */
	int count_only;    /* keep no bytes, count them */
};

static void
g_output(void *arg, int fd, const unsigned char *buf, size_t len)
{
	struct got *g = arg;

	assert_true(fd == 1 || fd == 2);
	if (g->count_only) {
		g->len[fd] += len;
		if (g->pause_after > 0 && g->len[fd] >= (size_t)g->pause_after)
			sbx_agent_pause(g->st, 1);
		return;
	}
	g->out[fd] = realloc(g->out[fd], g->len[fd] + len + 1);
	memcpy(g->out[fd] + g->len[fd], buf, len);
	g->len[fd] += len;
	g->out[fd][g->len[fd]] = '\0';
	if (g->pause_after > 0 && g->len[fd] >= (size_t)g->pause_after)
		sbx_agent_pause(g->st, 1);
}

static void
g_exit(void *arg, const struct sbx_agent_exit *ex)
{
	struct got *g = arg;

	g->exits++;
	g->status = ex->how == SBX_AGENT_EXIT_EXITED ? ex->status : -1;
	g->sig = ex->sig;
}

static void
g_error(void *arg, const struct sbx_err *err)
{
	struct got *g = arg;

	g->errors++;
	snprintf(g->code, sizeof(g->code), "%s", err->code);
}

static void
g_room(void *arg)
{
	struct got *g = arg;

	g->rooms++;
}

static void
got_free(struct got *g)
{
	int i;

	for (i = 0; i < 3; i++)
		free(g->out[i]);
}

static struct sbx_agent_stream *
open_got(struct rig *r, struct got *g, const char *const *argv, int with_stdin)
{
	struct sbx_agent_stream_cbs cbs = { g_output, g_exit, g_error, g_room, g };
	struct sbx_err err;

	memset(g, 0, sizeof(*g));
	g->st = sbx_agent_open(r->ch, argv, NULL, with_stdin, &cbs, &err);
	assert_non_null(g->st);
	return g->st;
}

/* Payloads of protocol 2 frames (exec --framed) of one type, concatenated. */
static size_t
p2_payload(const struct got *g, int type, char *out, size_t cap)
{
	size_t off = 0, n = 0, plen;
	const unsigned char *b = g->out[1];

	while (b != NULL && off + 8 <= g->len[1]) {
		plen = (size_t)b[off + 4] << 24 | (size_t)b[off + 5] << 16 |
		    (size_t)b[off + 6] << 8 | b[off + 7];
		if (b[off] == type && n + plen < cap) {
			memcpy(out + n, b + off + 8, plen);
			n += plen;
		}
		off += 8 + plen;
	}
	out[n] = '\0';
	return n;
}

/* ------------------------------------------------------------------ */
/* against the real agent                                              */

static void
test_agent_says_hello_and_runs_an_exec(void **state)
{
	static const char *const argv[] = { "exec", "--framed", "--id", "t1", "--", "sh", "-c",
		"echo out; echo err >&2; exit 3", NULL };
	struct rig r;
	struct got g;
	char text[256];
	struct sbx_agent_hello h;

	(void)state;
	rig_up(&r, NULL);
	open_got(&r, &g, argv, 0);   /* pipelined before the hello */
	run_until(&r, &g.exits, 1, 10000);
	assert_int_equal(r.ready, 1);
	assert_true(sbx_agent_chan_ready(r.ch, &h));
	assert_int_equal(h.proto, SBX_AGENT_PROTO);
	assert_int_equal(h.pid, r.pid);
	assert_int_equal(g.exits, 1);
	assert_int_equal(g.errors, 0);
	assert_int_equal(g.status, 3);   /* the helper exits with the command's status */
	p2_payload(&g, SBX_HELPER_FRAME_STDOUT, text, sizeof(text));
	assert_string_equal(text, "out\n");
	p2_payload(&g, SBX_HELPER_FRAME_STDERR, text, sizeof(text));
	assert_string_equal(text, "err\n");
	assert_int_equal(sbx_agent_chan_streams(r.ch), 0);
	got_free(&g);
	rig_down(&r);
}

static void
test_agent_writes_and_reads_a_file_with_flow_control(void **state)
{
	static const size_t size = 3 * 1024 * 1024 + 17;   /* > 10 windows */
	const char *wargv[] = { "write", NULL, "0640", "--size", "3145745", NULL };
	const char *rargv[] = { "read", NULL, NULL };
	struct evbuffer *src = evbuffer_new();
	unsigned char *data = malloc(size);
	char path[128];
	struct stat sb;
	struct rig r;
	struct got w, rd;
	size_t i;
	int spins;

	(void)state;
	for (i = 0; i < size; i++)
		data[i] = (unsigned char)(i * 131 + (i >> 9));
	evbuffer_add(src, data, size);
	rig_up(&r, NULL);
	snprintf(path, sizeof(path), "%s/d/f.bin", r.root);
	wargv[1] = path;
	rargv[1] = path;
	open_got(&r, &w, wargv, 1);
	/* Send only within the credit: the agent grants more as it writes. */
	for (spins = 0; spins < 100000 && evbuffer_get_length(src) > 0; spins++) {
		int before = w.rooms;

		assert_true(sbx_agent_write_buffer(w.st, src, evbuffer_get_length(src)) >= 0);
		if (evbuffer_get_length(src) > 0)
			run_until(&r, &w.rooms, before + 1, 5000);
		assert_int_equal(w.errors, 0);
	}
	assert_int_equal(evbuffer_get_length(src), 0);
	sbx_agent_close_stdin(w.st);
	run_until(&r, &w.exits, 1, 10000);
	assert_int_equal(w.exits, 1);
	assert_int_equal(w.status, 0);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, size);
	assert_int_equal(sb.st_mode & 0777, 0640);

	open_got(&r, &rd, rargv, 0);
	run_until(&r, &rd.exits, 1, 10000);
	assert_int_equal(rd.status, 0);
	assert_int_equal(rd.len[1], size);
	assert_memory_equal(rd.out[1], data, size);
	got_free(&w);
	got_free(&rd);
	rig_down(&r);
	evbuffer_free(src);
	free(data);
}

static void
test_a_paused_stream_does_not_stall_the_others(void **state)
{
	static const char *const big[] = { "exec", "--framed", "--id", "big", "--", "sh", "-c",
		"head -c 20000000 /dev/zero", NULL };
	char id[16];
	const char *small[] = { "exec", "--framed", "--id", id, "--", "echo", "quick", NULL };
	struct rig r;
	struct got gb, gs[10];
	int i;

	(void)state;
	rig_up(&r, NULL);
	open_got(&r, &gb, big, 0);
	gb.count_only = 1;
	gb.pause_after = 1;   /* a reader that never reads again */
	run_until(&r, &r.ready, 1, 5000);
	for (i = 0; i < 10; i++) {
		snprintf(id, sizeof(id), "s%d", i);
		open_got(&r, &gs[i], small, 0);
		run_until(&r, &gs[i].exits, 1, 10000);
		assert_int_equal(gs[i].exits, 1);
		assert_int_equal(gs[i].status, 0);
		got_free(&gs[i]);
	}
	/* The paused stream got no more than its window (plus the frame in flight). */
	assert_int_equal(gb.exits, 0);
	assert_true(gb.len[1] <= SBX_AGENT_WINDOW + SBX_AGENT_DATA_MAX);
	/* Resumed, it finishes. */
	gb.pause_after = 0;
	sbx_agent_pause(gb.st, 0);
	run_until(&r, &gb.exits, 1, 60000);
	assert_int_equal(gb.exits, 1);
	assert_int_equal(gb.status, 0);
	assert_true(gb.len[1] > 20000000);
	got_free(&gb);
	rig_down(&r);
}

/* Reads "PID\n" an exec printed (frames of protocol 2 in fd 1). */
static pid_t
printed_pid(struct rig *r, struct got *g)
{
	char text[64];
	int i;

	for (i = 0; i < 500; i++) {
		if (p2_payload(g, SBX_HELPER_FRAME_STDOUT, text, sizeof(text)) > 0 &&
		    strchr(text, '\n') != NULL)
			return (pid_t)atoi(text);
		run_until(r, &g->exits, 1, 10);
	}
	fail_msg("the exec printed no pid");
	return -1;
}

static int
gone(pid_t pid)
{
	int i;
	char path[64], buf[512];
	FILE *f;

	for (i = 0; i < 300; i++) {
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		if ((f = fopen(path, "r")) == NULL)
			return 1;
		/* a zombie is gone too (its parent reaps it) */
		if (fgets(buf, sizeof(buf), f) != NULL && strstr(buf, ") Z ") != NULL) {
			fclose(f);
			return 1;
		}
		fclose(f);
		usleep(10000);
	}
	return 0;
}

static void
test_cancel_kills_the_exec_group(void **state)
{
	static const char *const argv[] = { "exec", "--framed", "--id", "c1", "--", "sh", "-c",
		"sleep 100 & echo $!; wait", NULL };
	struct rig r;
	struct got g;
	pid_t pid;
	int zero = 0;

	(void)state;
	rig_up(&r, NULL);
	open_got(&r, &g, argv, 0);
	pid = printed_pid(&r, &g);
	assert_true(pid > 1);
	sbx_agent_cancel(g.st);
	/* No callback after a cancel; the record goes with the agent's EXIT. */
	run_until(&r, &zero, 1, 3000);
	assert_int_equal(g.exits + g.errors, 0);
	assert_int_equal(sbx_agent_chan_streams(r.ch), 0);
	assert_true(gone(pid));
	got_free(&g);
	rig_down(&r);
}

static void
test_channel_loss_kills_running_execs(void **state)
{
	static const char *const argv[] = { "exec", "--framed", "--id", "l1", "--", "sh", "-c",
		"sleep 100 & echo $!; wait", NULL };
	struct rig r;
	struct got g;
	pid_t pid;

	(void)state;
	rig_up(&r, NULL);
	open_got(&r, &g, argv, 0);
	pid = printed_pid(&r, &g);
	/* The broker's end goes away (a broker killed): the agent kills the tree. */
	sbx_agent_chan_free(r.ch);
	r.ch = NULL;
	assert_int_equal(g.errors, 1);
	assert_string_equal(g.code, SBX_E_CANCELLED);
	bufferevent_free(r.bev);
	r.bev = NULL;
	run_until(&r, &g.exits, 1, 100);   /* libevent closes the socket in its loop */
	if (!gone(pid)) {
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "ps -o pid,ppid,pgid,stat,args -e | grep -E 'sleep|sbx-helper' >&2");
		if (system(cmd) != 0)
			fail_msg("ps");
		fail_msg("exec %d survived the channel", (int)pid);
	}
	got_free(&g);
	r.bev = bufferevent_socket_new(r.base, -1, 0);
	r.ch = sbx_agent_chan_new(r.base, NULL);
	rig_down(&r);
}

static void
test_agent_refuses_modes_it_must_not_run(void **state)
{
	static const char *const idle[] = { "idle", NULL };
	static const char *const agent[] = { "agent", NULL };
	struct rig r;
	struct got g;

	(void)state;
	rig_up(&r, NULL);
	open_got(&r, &g, idle, 0);
	run_until(&r, &g.errors, 1, 5000);
	assert_int_equal(g.errors, 1);
	assert_string_equal(g.code, SBX_E_BAD_REQUEST);
	open_got(&r, &g, agent, 0);
	run_until(&r, &g.errors, 1, 5000);
	assert_int_equal(g.errors, 1);
	assert_true(sbx_agent_chan_alive(r.ch));
	rig_down(&r);
}

static void
test_many_execs_round_trip(void **state)
{
	char id[16];
	const char *argv[] = { "exec", "--framed", "--id", id, "--", "true", NULL };
	struct rig r;
	struct got g[50];
	int i, done = 0;

	(void)state;
	rig_up(&r, NULL);
	for (i = 0; i < 50; i++) {
		snprintf(id, sizeof(id), "m%d", i);
		open_got(&r, &g[i], argv, 0);
	}
	for (i = 0; i < 2000 && done < 50; i++) {
		int j;

		run_until(&r, &g[0].exits, 100, 10);
		for (done = 0, j = 0; j < 50; j++)
			done += g[j].exits;
	}
	assert_int_equal(done, 50);
	for (i = 0; i < 50; i++) {
		assert_int_equal(g[i].status, 0);
		got_free(&g[i]);
	}
	rig_down(&r);
}

/* ------------------------------------------------------------------ */
/* against a hostile agent                                             */

static struct rig *hostile_rig;
static int hostile_pause;   /* pause the stream after this much output (0: never) */

/* Writes all of p to the hostile end, running the broker's loop while the
 * socket is full (the broker keeps reading, even after it failed). */
static void
put_all(int fd, const void *p, size_t n)
{
	const unsigned char *b = p;
	int zero = 0;
	ssize_t w;

	while (n > 0) {
		w = send(fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			run_until(hostile_rig, &zero, 1, 10);
			continue;
		}
		if (w < 0)
			return;   /* the broker closed: fine */
		b += w;
		n -= (size_t)w;
	}
}

static void
put_frame(int fd, int type, int flags, uint32_t stream, const void *p, size_t n)
{
	unsigned char h[SBX_AGENT_HDR];

	sbx_agent_hdr_put(h, type, flags, stream, (uint32_t)n);
	put_all(fd, h, sizeof(h));
	if (n > 0)
		put_all(fd, p, n);
}

static void
put_hello(int fd)
{
	struct sbx_agent_hello h = { SBX_AGENT_PROTO, 4242, SBX_AGENT_WINDOW, 8 };
	unsigned char p[SBX_AGENT_HELLO_LEN];

	sbx_agent_hello_put(p, &h);
	put_frame(fd, SBX_AGENT_T_HELLO, 0, 0, p, sizeof(p));
}

/* One violation: the stream gets runtime_error, the channel closes, once. */
static void
hostile(void (*send)(int fd))
{
	static const char *const argv[] = { "exec", "--", "true", NULL };
	struct rig r;
	struct got g;
	int fd;

	rig_up(&r, &fd);
	hostile_rig = &r;
	open_got(&r, &g, argv, 0);
	g.pause_after = hostile_pause;
	send(fd);
	run_until(&r, &r.closed, 1, 3000);
	assert_int_equal(r.closed, 1);
	assert_string_equal(r.closed_code, SBX_E_RUNTIME);
	/* Exactly one terminal callback: the error, or the exit that came
	 * (valid) before the violation. */
	assert_int_equal(g.errors + g.exits, 1);
	if (g.errors == 1)
		assert_string_equal(g.code, SBX_E_RUNTIME);
	assert_false(sbx_agent_chan_alive(r.ch));
	/* Whatever comes after is not read. */
	put_hello(fd);
	run_until(&r, &r.closed, 2, 50);
	assert_int_equal(r.closed, 1);
	close(fd);
	got_free(&g);
	rig_down(&r);
}

static void
send_no_hello(int fd)
{
	put_frame(fd, SBX_AGENT_T_DATA, 1, 1, "x", 1);
}

static void
send_over_credit(int fd)
{
	static unsigned char chunk[SBX_AGENT_DATA_MAX];
	int i;

	put_hello(fd);
	for (i = 0; i <= SBX_AGENT_WINDOW / SBX_AGENT_DATA_MAX; i++)
		put_frame(fd, SBX_AGENT_T_DATA, 1, 1, chunk, sizeof(chunk));
}

static void
send_unknown_stream(int fd)
{
	put_hello(fd);
	put_frame(fd, SBX_AGENT_T_DATA, 1, 7, "x", 1);
}

static void
send_after_exit(int fd)
{
	unsigned char ex[4] = { 1, 0, 0, 0 };

	put_hello(fd);
	put_frame(fd, SBX_AGENT_T_EXIT, 0, 1, ex, 4);
	put_frame(fd, SBX_AGENT_T_DATA, 1, 1, "x", 1);
}

static void
send_bad_version(int fd)
{
	unsigned char h[SBX_AGENT_HDR];

	put_hello(fd);
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 1, 1);
	h[1] = 2;
	put_all(fd, h, sizeof(h));
}

static void
send_huge_refuse(int fd)
{
	static unsigned char p[SBX_AGENT_CODE_MAX + 1];

	memset(p, 'a', sizeof(p));
	put_hello(fd);
	put_frame(fd, SBX_AGENT_T_REFUSE, 0, 1, p, sizeof(p));
}

static void
send_broker_frame(int fd)
{
	put_hello(fd);
	put_frame(fd, SBX_AGENT_T_OPEN, 0, 1, "\0\0\0\1\0\0\0\0x\0", 10);
}

static void
send_eof(int fd)
{
	put_hello(fd);
	shutdown(fd, SHUT_WR);
}

static void
send_garbage(int fd)
{
	unsigned char junk[4096];
	size_t i;

	for (i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(i * 7 + 3);
	put_all(fd, junk, sizeof(junk));
}

static void
test_hostile_frame_before_hello(void **s) { (void)s; hostile(send_no_hello); }
static void
test_hostile_output_beyond_credit(void **s)
{
	(void)s;
	hostile_pause = 1;   /* a paused reader gives no credit back */
	hostile(send_over_credit);
	hostile_pause = 0;
}
static void
test_hostile_unknown_stream(void **s) { (void)s; hostile(send_unknown_stream); }
static void
test_hostile_frame_after_exit(void **s) { (void)s; hostile(send_after_exit); }
static void
test_hostile_bad_version(void **s) { (void)s; hostile(send_bad_version); }
static void
test_hostile_refusal_too_long(void **s) { (void)s; hostile(send_huge_refuse); }
static void
test_hostile_sends_a_broker_frame(void **s) { (void)s; hostile(send_broker_frame); }
static void
test_hostile_closes(void **s) { (void)s; hostile(send_eof); }
static void
test_hostile_garbage(void **s) { (void)s; hostile(send_garbage); }

/* ------------------------------------------------------------------ */
/* codec                                                               */

static void
test_open_round_trip_and_bounds(void **state)
{
	static const char *const argv[] = { "exec", "--id", "x", "--", "echo", "é", NULL };
	static const char *const env[] = { "A=1", "EMPTY=", NULL };
	static const char *const bad_env[] = { "NOEQUALS", NULL };
	unsigned char buf[512];
	char *av[16], *ev[16];
	const char *why;
	size_t n;

	(void)state;
	n = sbx_agent_open_put(buf, sizeof(buf), argv, env);
	assert_int_equal(n, sbx_agent_open_len(argv, env));
	assert_int_equal(sbx_agent_open_parse(buf, n, av, 16, ev, 16, &why), 0);
	assert_string_equal(av[5], "é");
	assert_null(av[6]);
	assert_string_equal(ev[1], "EMPTY=");
	assert_null(ev[2]);
	assert_int_equal(sbx_agent_open_len(argv, bad_env), 0);
	/* a missing NUL, bytes after the last string, too few slots */
	assert_int_equal(sbx_agent_open_parse(buf, n - 1, av, 16, ev, 16, &why), -1);
	buf[n] = 'x';
	assert_int_equal(sbx_agent_open_parse(buf, n + 1, av, 16, ev, 16, &why), -1);
	assert_int_equal(sbx_agent_open_parse(buf, n, av, 6, ev, 16, &why), -1);
}

/* sbx_agent_take: what fits, no more, and both sides advanced. */
static void
test_take_copies_what_fits_and_advances(void **state)
{
	static const unsigned char in[] = "abcdefgh";
	unsigned char dst[5];
	const unsigned char *src = in;
	size_t have = 2, len = 8;

	(void)state;
	memcpy(dst, "xy", 2);
	assert_int_equal(sbx_agent_take(dst, &have, sizeof(dst), &src, &len), 3);
	assert_memory_equal(dst, "xyabc", 5);
	assert_int_equal(have, 5);
	assert_ptr_equal(src, in + 3);
	assert_int_equal(len, 5);
	/* full: nothing moves */
	assert_int_equal(sbx_agent_take(dst, &have, sizeof(dst), &src, &len), 0);
	assert_ptr_equal(src, in + 3);
	assert_int_equal(len, 5);
	/* less input than room */
	have = 0;
	len = 2;
	assert_int_equal(sbx_agent_take(dst, &have, sizeof(dst), &src, &len), 2);
	assert_memory_equal(dst, "de", 2);
	assert_int_equal(have, 2);
	assert_int_equal(len, 0);
}

static void
test_header_rules(void **state)
{
	unsigned char h[SBX_AGENT_HDR];
	struct sbx_agent_frame f;
	const char *why;

	(void)state;
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 5, 10);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), 0);
	assert_int_equal(sbx_agent_hdr_parse(h, 0, &f, &why), -1);   /* fd 1 data is the agent's */
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 0, 10);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);   /* stream 0 */
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 5, SBX_AGENT_DATA_MAX + 1);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 5, 0);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);
	sbx_agent_hdr_put(h, SBX_AGENT_T_PING, 0, 0, 8);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);   /* the broker pings */
	assert_int_equal(sbx_agent_hdr_parse(h, 0, &f, &why), 0);
	sbx_agent_hdr_put(h, SBX_AGENT_T_CANCEL, 0, 3, 0);
	h[3] = 1;
	assert_int_equal(sbx_agent_hdr_parse(h, 0, &f, &why), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_round_trip_and_bounds),
		cmocka_unit_test(test_header_rules),
		cmocka_unit_test(test_take_copies_what_fits_and_advances),
		cmocka_unit_test(test_agent_says_hello_and_runs_an_exec),
		cmocka_unit_test(test_agent_writes_and_reads_a_file_with_flow_control),
		cmocka_unit_test(test_a_paused_stream_does_not_stall_the_others),
		cmocka_unit_test(test_cancel_kills_the_exec_group),
		cmocka_unit_test(test_channel_loss_kills_running_execs),
		cmocka_unit_test(test_agent_refuses_modes_it_must_not_run),
		cmocka_unit_test(test_many_execs_round_trip),
		cmocka_unit_test(test_hostile_frame_before_hello),
		cmocka_unit_test(test_hostile_output_beyond_credit),
		cmocka_unit_test(test_hostile_unknown_stream),
		cmocka_unit_test(test_hostile_frame_after_exit),
		cmocka_unit_test(test_hostile_bad_version),
		cmocka_unit_test(test_hostile_refusal_too_long),
		cmocka_unit_test(test_hostile_sends_a_broker_frame),
		cmocka_unit_test(test_hostile_closes),
		cmocka_unit_test(test_hostile_garbage),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
