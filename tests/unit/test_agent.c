/* test_agent.c - the broker's agent channel (broker/agent.c) against a real `sbx-helper agent` on a socketpair (exec, files, flow control, cancel, channel loss), and against a hostile one; protocol 4's sessions are in test_agent_session.c. */
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
#include <arpa/inet.h>
#include <netinet/in.h>
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
#include "agent_rig.h"
#include "sbx_proto.h"
#include "sbx_helper_proto.h"

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

int
main(void)
{
	const struct CMUnitTest tests[] = {
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
