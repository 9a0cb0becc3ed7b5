/* test_agent_session.c - protocol 4 against a real `sbx-helper agent` (tests/unit/agent_rig.c): pty mode (size, TERM, resize, signal to the foreground job, exit status), stdin streamed into exec through a slow reader, connect mode (relay, half-close, port_closed, 8 MiB through a pause), control records for exec and refused without OPEN_CTRL. */
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
/* protocol 4: terminals, control records, stdin, ports                */

static void
test_pty_has_its_size_term_and_exit_status(void **state)
{
	static const char *const argv[] = { "pty", "--id", "pt1", "--cols", "100", "--rows", "30",
		"--term", "vt100", "--", "sh", "-c", "stty size; echo T=$TERM; exit 3", NULL };
	struct rig r;
	struct got g;

	(void)state;
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL);
	run_until(&r, &g.exits, 1, 10000);
	assert_int_equal(g.exits, 1);
	assert_int_equal(g.status, 3);
	/* one raw stream, the terminal's line endings */
	assert_non_null(g.out[1]);
	assert_null(g.out[2]);
	assert_non_null(strstr((char *)g.out[1], "30 100\r\n"));
	assert_non_null(strstr((char *)g.out[1], "T=vt100\r\n"));
	got_free(&g);
	rig_down(&r);
}

static void
test_pty_resize_then_stty_agrees(void **state)
{
	static const char *const argv[] = { "pty", "--id", "pt2", "--cols", "80", "--rows", "24",
		"--", "sh", "-c", "stty size; read x; stty size", NULL };
	struct rig r;
	struct got g;

	(void)state;
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL);
	assert_true(saw(&r, &g, 1, "24 80\r\n", 10000));
	assert_int_equal(sbx_agent_control(g.st, SBX_AGENT_CTRL_RESIZE, 132, 50), 0);
	assert_int_equal(sbx_agent_write(g.st, "go\r", 3), 3);
	run_until(&r, &g.exits, 1, 10000);
	assert_int_equal(g.status, 0);
	assert_non_null(strstr((char *)g.out[1], "50 132\r\n"));
	got_free(&g);
	rig_down(&r);
}

/* An interactive shell runs sleep as the terminal's foreground job: a
 * SIGNAL INT ends the sleep, not the shell, which then runs what follows. */
static void
test_pty_signal_reaches_the_foreground_job(void **state)
{
	static const char *const argv[] = { "pty", "--id", "pt3", "--", "sh", "-i", NULL };
	static const char typed[] = "echo go; sleep 100\r";
	struct timespec t0, t1;
	struct rig r;
	struct got g;

	(void)state;
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sbx_agent_write(g.st, typed, sizeof(typed) - 1), sizeof(typed) - 1);
	assert_true(saw(&r, &g, 1, "go\r\n", 10000));   /* the typed line has "go;" */
	usleep(200000);   /* sleep has started */
	assert_int_equal(sbx_agent_control(g.st, SBX_AGENT_CTRL_SIGNAL, SIGINT, 0), 0);
	assert_int_equal(sbx_agent_write(g.st, "echo alive; exit 4\r", 19), 19);
	run_until(&r, &g.exits, 1, 10000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(g.exits, 1);
	assert_int_equal(g.status, 4);
	assert_non_null(strstr((char *)g.out[1], "alive\r\n"));   /* typed: "alive;" */
	assert_true(t1.tv_sec - t0.tv_sec < 10);
	got_free(&g);
	rig_down(&r);
}

/* exec with stdin: a few MiB through cat, byte-exact, while the reader of
 * its output stops half of the time (the credit backs up both ways). */
static void
test_exec_stdin_streams_through_a_slow_reader(void **state)
{
	static const char *const argv[] = { "exec", "--framed", "--id", "cat1", "--", "cat", NULL };
	static const size_t size = 3 * 1024 * 1024 + 5;
	unsigned char *data = malloc(size);
	char *back = malloc(size + 1);
	struct evbuffer *src = evbuffer_new();
	struct rig r;
	struct got g;
	int i, zero = 0, closed = 0;
	size_t k;

	(void)state;
	for (k = 0; k < size; k++)
		data[k] = (unsigned char)(k * 7 + (k >> 11));
	evbuffer_add(src, data, size);
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, SBX_AGENT_OPEN_STDIN);
	for (i = 0; i < 20000 && g.exits + g.errors == 0; i++) {
		if (evbuffer_get_length(src) > 0)
			assert_true(sbx_agent_write_buffer(g.st, src, evbuffer_get_length(src)) >= 0);
		else if (!closed) {
			sbx_agent_close_stdin(g.st);   /* EOF ends cat */
			closed = 1;
		}
		/* paused 5 turns of 10, then the reader takes everything held back */
		sbx_agent_pause(g.st, closed ? 0 : (i / 5) % 2);
		run_until(&r, &zero, 1, 10);
	}
	assert_int_equal(g.exits, 1);
	assert_int_equal(g.status, 0);
	assert_int_equal(p2_payload(&g, SBX_HELPER_FRAME_STDOUT, back, size + 1), size);
	assert_memory_equal(back, data, size);
	got_free(&g);
	rig_down(&r);
	evbuffer_free(src);
	free(data);
	free(back);
}

/* A command that does not read for a while: the stdin credit runs out (a
 * write moves nothing), nothing is lost, EOF after the last byte ends it. */
static void
test_exec_stdin_waits_for_a_command_that_reads_late(void **state)
{
	static const char *const argv[] = { "exec", "--framed", "--id", "late1", "--", "sh", "-c",
		"sleep 1; wc -c", NULL };
	static const size_t size = 2 * 1024 * 1024;
	struct evbuffer *src = evbuffer_new();
	char text[64], *data = malloc(size);
	struct rig r;
	struct got g;
	int i, zero = 0, starved = 0;

	(void)state;
	memset(data, 'x', size);
	evbuffer_add(src, data, size);
	free(data);
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, SBX_AGENT_OPEN_STDIN);
	for (i = 0; i < 3000 && evbuffer_get_length(src) > 0 && g.exits + g.errors == 0; i++) {
		if (sbx_agent_stdin_room(g.st) == 0 && i > 10)
			starved++;
		assert_true(sbx_agent_write_buffer(g.st, src, evbuffer_get_length(src)) >= 0);
		run_until(&r, &zero, 1, 10);
	}
	assert_int_equal(evbuffer_get_length(src), 0);
	/* while sleep ran, the credit was spent and none came back */
	assert_true(starved >= 20);
	sbx_agent_close_stdin(g.st);
	run_until(&r, &g.exits, 1, 10000);
	assert_int_equal(g.status, 0);
	p2_payload(&g, SBX_HELPER_FRAME_STDOUT, text, sizeof(text));
	assert_int_equal(atoi(text), (int)size);
	got_free(&g);
	rig_down(&r);
	evbuffer_free(src);
}

/* A listener on 127.0.0.1 port 0; its port in *port. */
static int
listener(int *port)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	/* Non-blocking: the test polls accept between turns of its loop, which
	 * must run for the agent's HELLO to let the OPEN go (adr/0025,
	 * amendment session 11). */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* connect: bytes both ways, our EOF half-closes, the server's EOF ends it. */
static void
test_connect_relays_and_half_closes(void **state)
{
	char port_s[16];
	const char *argv[] = { "connect", "--port", port_s, NULL };
	char buf[64];
	struct rig r;
	struct got g;
	int lfd, port, c = -1, i, zero = 0;
	size_t have = 0;
	ssize_t n;

	(void)state;
	lfd = listener(&port);
	snprintf(port_s, sizeof(port_s), "%d", port);
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, SBX_AGENT_OPEN_STDIN);
	assert_int_equal(sbx_agent_write(g.st, "ping", 4), 4);
	sbx_agent_close_stdin(g.st);
	for (i = 0; i < 1000 && c < 0; i++) {
		run_until(&r, &zero, 1, 10);
		c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	}
	assert_true(c >= 0);
	/* read until the half-close: the stdin EOF reached the socket */
	for (i = 0; i < 1000; i++) {
		n = read(c, buf + have, sizeof(buf) - 1 - have);
		if (n == 0)
			break;
		if (n > 0)
			have += (size_t)n;
		run_until(&r, &zero, 1, 10);
	}
	assert_int_equal(n, 0);
	buf[have] = '\0';
	assert_string_equal(buf, "ping");
	assert_int_equal(write(c, "pong", 4), 4);
	close(c);
	run_until(&r, &g.exits, 1, 10000);
	assert_int_equal(g.exits, 1);
	assert_int_equal(g.status, 0);
	assert_int_equal(g.len[1], 4);
	assert_memory_equal(g.out[1], "pong", 4);
	got_free(&g);

	/* nothing listens any more: port_closed, its exit status */
	close(lfd);
	open_flags(&r, &g, argv, 0);
	run_until(&r, &g.exits, 1, 10000);
	assert_int_equal(g.status, SBX_HELPER_EXIT_PORT_CLOSED);
	assert_non_null(g.out[2]);
	assert_non_null(strstr((char *)g.out[2], "\"code\":\"" SBX_E_PORT_CLOSED "\""));
	got_free(&g);
	rig_down(&r);
}

/* connect: 8 MiB from the server arrive whole and in order, through a
 * pause long enough to fill every buffer on the way (the mode splices the
 * socket into its stdout pipe and then waits for the pipe, not the socket:
 * adr/0053 amendment of session 11). */
static void
test_connect_carries_a_large_answer_through_a_pause(void **state)
{
	static const size_t size = 8 * 1024 * 1024, pause_at = 1024 * 1024;
	char port_s[16];
	const char *argv[] = { "connect", "--port", port_s, NULL };
	unsigned char *data = malloc(size);
	struct rig r;
	struct got g;
	int lfd, port, c = -1, i, zero = 0, paused_turns = 0;
	size_t sent = 0, i2, at_pause = 0;
	ssize_t n;

	(void)state;
	for (i2 = 0; i2 < size; i2++)
		data[i2] = (unsigned char)((i2 * 7 + i2 / 65536) % 251);
	lfd = listener(&port);
	snprintf(port_s, sizeof(port_s), "%d", port);
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, 0);
	g.pause_after = (int)pause_at;
	for (i = 0; i < 1000 && c < 0; i++) {
		run_until(&r, &zero, 1, 10);
		c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	}
	assert_true(c >= 0);
	/* 10 ms turns, 30 s at most */
	for (i = 0; i < 3000 && sent < size; i++) {
		n = write(c, data + sent, size - sent);
		if (n > 0)
			sent += (size_t)n;
		run_until(&r, &zero, 1, 10);
		if (g.pause_after > 0 && g.len[1] >= pause_at && ++paused_turns == 30) {
			/* paused for 30 turns: what came is what was in flight */
			at_pause = g.len[1];
			g.pause_after = 0;
			sbx_agent_pause(g.st, 0);
		}
	}
	assert_int_equal(sent, size);
	assert_true(at_pause >= pause_at);
	assert_true(at_pause <= pause_at + SBX_AGENT_WINDOW + SBX_AGENT_DATA_MAX);
	close(c);
	run_until(&r, &g.exits, 1, 10000);
	assert_int_equal(g.exits, 1);
	assert_int_equal(g.status, 0);
	assert_int_equal(g.len[1], size);
	assert_memory_equal(g.out[1], data, size);
	got_free(&g);
	close(lfd);
	rig_down(&r);
	free(data);
}

/* A signal record for exec goes to the command's group. */
static void
test_exec_takes_a_signal_record(void **state)
{
	static const char *const argv[] = { "exec", "--framed", "--id", "sg1", "--", "sh", "-c",
		"echo ready; sleep 100", NULL };
	char text[64];
	struct rig r;
	struct got g;
	int i;

	(void)state;
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, SBX_AGENT_OPEN_CTRL);
	for (i = 0; i < 1000 && p2_payload(&g, SBX_HELPER_FRAME_STDOUT, text, sizeof(text)) == 0;
	    i++)
		run_until(&r, &g.exits, 1, 10);
	assert_string_equal(text, "ready\n");
	assert_int_equal(sbx_agent_control(g.st, SBX_AGENT_CTRL_SIGNAL, SIGTERM, 0), 0);
	run_until(&r, &g.exits, 1, 5000);
	assert_int_equal(g.exits, 1);
	assert_int_equal(g.status, 128 + SIGTERM);
	got_free(&g);
	rig_down(&r);
}

/* The agent takes a CTRL only on a stream opened with OPEN_CTRL: another
 * is a broken broker, and the channel ends (its streams are killed). */
static void
test_ctrl_without_the_flag_ends_the_channel(void **state)
{
	static const char *const argv[] = { "exec", "--framed", "--id", "nc1", "--", "sleep", "100",
		NULL };
	static const unsigned char rec[SBX_AGENT_CTRL_LEN] = { 0, 0, 0, 2, 0, 0, 0, 15 };
	unsigned char h[SBX_AGENT_HDR];
	struct rig r;
	struct got g;

	(void)state;
	rig_up(&r, NULL);
	open_flags(&r, &g, argv, 0);
	run_until(&r, &r.ready, 1, 5000);
	assert_int_equal(sbx_agent_control(g.st, SBX_AGENT_CTRL_SIGNAL, SIGTERM, 0), -1);
	sbx_agent_hdr_put(h, SBX_AGENT_T_CTRL, 0, 1, sizeof(rec));
	bufferevent_write(r.bev, h, sizeof(h));
	bufferevent_write(r.bev, rec, sizeof(rec));
	run_until(&r, &r.closed, 1, 5000);
	assert_int_equal(r.closed, 1);
	assert_int_equal(g.errors, 1);
	assert_string_equal(g.code, SBX_E_RUNTIME);
	got_free(&g);
	rig_down(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pty_has_its_size_term_and_exit_status),
		cmocka_unit_test(test_pty_resize_then_stty_agrees),
		cmocka_unit_test(test_pty_signal_reaches_the_foreground_job),
		cmocka_unit_test(test_exec_stdin_streams_through_a_slow_reader),
		cmocka_unit_test(test_exec_stdin_waits_for_a_command_that_reads_late),
		cmocka_unit_test(test_connect_relays_and_half_closes),
		cmocka_unit_test(test_connect_carries_a_large_answer_through_a_pause),
		cmocka_unit_test(test_exec_takes_a_signal_record),
		cmocka_unit_test(test_ctrl_without_the_flag_ends_the_channel),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
