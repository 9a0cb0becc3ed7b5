/* test_driver_fake_session.c - the fake driver's sessions (tests/driver_fake.h "Sessions"), which the term, ws and ports unit tests stand on: cat, pty echo, port echo, room, pause, controls, hooks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "driver_fake.h"
#include "sbx_proto.h"

#define ID "npc-alpha"

static struct {
	struct event_base *base;
	struct sbx_driver *d;
	struct sbx_op *op;
	int starts, exits, errors, rooms, ended;
	char exec_id[32];
	struct sbx_exit ex;
	char signal[16];
	struct sbx_err err;
	struct evbuffer *out, *err_out, *src;
	int pause_on_output;
} F;

static void
f_start(void *arg, const char *exec_id)
{
	(void)arg;
	F.starts++;
	snprintf(F.exec_id, sizeof(F.exec_id), "%s", exec_id);
}

static void
f_output(void *arg, int stream, const unsigned char *p, size_t n)
{
	(void)arg;
	evbuffer_add(stream == 1 ? F.out : F.err_out, p, n);
	if (F.pause_on_output)
		sbx_op_pause(F.op);
}

static void
f_exit(void *arg, const struct sbx_exit *ex)
{
	(void)arg;
	F.exits++;
	F.ex = *ex;
	snprintf(F.signal, sizeof(F.signal), "%s", ex->signal ? ex->signal : "");
	F.op = NULL;
	F.ended = 1;
}

static void
f_error(void *arg, const struct sbx_err *e)
{
	(void)arg;
	F.errors++;
	F.err = *e;
	F.op = NULL;
	F.ended = 1;
}

static void
f_room(void *arg)
{
	(void)arg;
	F.rooms++;
	if (F.op != NULL && evbuffer_get_length(F.src) > 0)
		assert_true(sbx_session_write(F.op, F.src, SIZE_MAX) >= 0);
}

static const struct sbx_sink SINK = {
	.start = f_start, .output = f_output, .exit = f_exit, .error = f_error,
	.room = f_room,
};

static void
ensured(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	(void)arg;
	(void)st;
	assert_null(err);
}

static void
spin(int turns)
{
	while (turns-- > 0)
		event_base_loop(F.base, EVLOOP_NONBLOCK);
}

static void
spin_until_end(void)
{
	int i;

	for (i = 0; i < 100000 && !F.ended; i++)
		event_base_loop(F.base, EVLOOP_NONBLOCK);
	assert_true(F.ended);
}

static int
setup(void **state)
{
	struct sbx_err err;

	(void)state;
	memset(&F, 0, sizeof(F));
	F.base = event_base_new();
	F.d = sbx_fake_driver_new(F.base);
	F.out = evbuffer_new();
	F.err_out = evbuffer_new();
	F.src = evbuffer_new();
	assert_non_null(F.d->ops->ensure(F.d, ID, NULL, ensured, NULL, &err));
	spin(3);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	sbx_op_cancel(F.op);
	sbx_driver_free(F.d);
	evbuffer_free(F.out);
	evbuffer_free(F.err_out);
	evbuffer_free(F.src);
	event_base_free(F.base);
	return 0;
}

static void
open_kind(enum sbx_session_kind kind)
{
	static const char *const argv[] = { "cat", NULL };
	struct sbx_session_req req;
	struct sbx_err err;

	memset(&req, 0, sizeof(req));
	req.kind = kind;
	req.exec.argv = argv;
	req.cols = 80;
	req.rows = 24;
	req.term = "xterm";
	req.port = 3000;
	F.op = sbx_session_open(F.d, ID, &req, &SINK, &err);
	assert_non_null(F.op);
}

static int
out_is(struct evbuffer *b, const char *s)
{
	return evbuffer_get_length(b) == strlen(s) &&
	    memcmp(evbuffer_pullup(b, -1), s, strlen(s)) == 0;
}

static void
test_exec_is_cat(void **state)
{
	(void)state;
	open_kind(SBX_SESSION_EXEC);
	evbuffer_add(F.src, "one\rtwo\n", 8);
	assert_int_equal(sbx_session_write(F.op, F.src, SIZE_MAX), 8);
	sbx_session_close_input(F.op);
	assert_int_equal(sbx_session_write(F.op, F.src, SIZE_MAX), -1);
	spin_until_end();
	assert_int_equal(F.starts, 1);
	assert_string_equal(F.exec_id, "fake-exec-1");
	assert_int_equal(F.exits, 1);
	assert_int_equal(F.ex.code, 0);
	assert_true(out_is(F.out, "one\rtwo\n"));
	assert_string_equal(sbx_fake_session_seen(F.d)->argv, "cat");
	assert_int_equal(sbx_fake_session_seen(F.d)->eofs, 1);
}

static void
test_pty_echoes_cr_as_crlf_and_records_controls(void **state)
{
	struct sbx_session_ctl c = { SBX_SESSION_RESIZE, 132, 43, 0, 0 };
	struct sbx_err err;

	(void)state;
	open_kind(SBX_SESSION_PTY);
	evbuffer_add(F.src, "ls\r", 3);
	assert_int_equal(sbx_session_write(F.op, F.src, SIZE_MAX), 3);
	sbx_session_close_input(F.op);   /* a terminal has no EOF */
	spin(20);
	assert_false(F.ended);
	assert_true(out_is(F.out, "ls\r\n"));
	assert_int_equal(sbx_session_control(F.op, &c, &err), 0);
	assert_int_equal(sbx_fake_session_seen(F.d)->last_cols, 132);
	assert_int_equal(sbx_fake_session_seen(F.d)->last_rows, 43);
	c.kind = SBX_SESSION_SIGNAL;
	c.signo = 2;
	assert_int_equal(sbx_session_control(F.op, &c, &err), 0);
	assert_int_equal(sbx_fake_session_seen(F.d)->last_signo, 2);
	c.signo = 65;
	assert_int_equal(sbx_session_control(F.op, &c, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	assert_int_equal(sbx_fake_session_seen(F.d)->cols, 80);
	assert_string_equal(sbx_fake_session_seen(F.d)->term, "xterm");
	assert_ptr_equal(sbx_fake_session_latest(F.d), F.op);
	/* The test ends it with a code. */
	assert_int_equal(sbx_fake_session_exit(F.op, 130, "INT"), 0);
	spin_until_end();
	assert_int_equal(F.ex.code, 130);
	assert_string_equal(F.signal, "INT");
}

static void
test_port_echoes_without_exec_id(void **state)
{
	struct sbx_session_ctl c = { SBX_SESSION_RESIZE, 80, 24, 0, 0 };
	struct sbx_err err;

	(void)state;
	open_kind(SBX_SESSION_PORT);
	assert_int_equal(sbx_session_control(F.op, &c, &err), -1);
	evbuffer_add(F.src, "GET / HTTP/1.0\r\n\r\n", 18);
	sbx_session_write(F.op, F.src, SIZE_MAX);
	sbx_session_close_input(F.op);
	spin_until_end();
	assert_string_equal(F.exec_id, "");
	assert_true(out_is(F.out, "GET / HTTP/1.0\r\n\r\n"));
	assert_int_equal(sbx_fake_session_seen(F.d)->port, 3000);
}

static void
test_window_bounds_input_and_room_says_when(void **state)
{
	char buf[1000];

	(void)state;
	sbx_fake_set_session_window(F.d, 100);
	open_kind(SBX_SESSION_EXEC);
	memset(buf, 'x', sizeof(buf));
	evbuffer_add(F.src, buf, sizeof(buf));
	assert_int_equal(sbx_session_room(F.op), 100);
	assert_int_equal(sbx_session_write(F.op, F.src, SIZE_MAX), 100);
	assert_int_equal(sbx_session_room(F.op), 0);
	assert_int_equal(sbx_session_write(F.op, F.src, SIZE_MAX), 0);
	/* The room callback writes the rest as the echo drains. */
	spin(200);
	assert_int_equal(evbuffer_get_length(F.src), 0);
	assert_true(F.rooms >= 9);
	assert_int_equal(evbuffer_get_length(F.out), sizeof(buf));
}

static void
test_paused_session_stops_echo_and_room(void **state)
{
	(void)state;
	sbx_fake_set_session_window(F.d, 10);
	open_kind(SBX_SESSION_EXEC);
	spin(3);
	sbx_op_pause(F.op);
	evbuffer_add(F.src, "0123456789abc", 13);
	assert_int_equal(sbx_session_write(F.op, F.src, SIZE_MAX), 10);
	spin(50);
	assert_int_equal(evbuffer_get_length(F.out), 0);
	assert_int_equal(sbx_session_room(F.op), 0);
	/* The writer gives up on the rest and closes. */
	evbuffer_drain(F.src, evbuffer_get_length(F.src));
	sbx_op_resume(F.op);
	sbx_session_close_input(F.op);
	spin(50);
	assert_true(F.ended);
	assert_true(out_is(F.out, "0123456789"));
	assert_int_equal(sbx_fake_session_seen(F.d)->pauses, 1);
}

static void
test_hooks_stderr_and_fail(void **state)
{
	(void)state;
	open_kind(SBX_SESSION_EXEC);
	assert_int_equal(sbx_fake_session_output(F.op, 2, "oops\n", 5), 0);
	assert_int_equal(sbx_fake_session_fail(F.op, SBX_E_TIMEOUT, "Too slow."),
	    0);
	assert_int_equal(sbx_fake_session_exit(F.op, 0, NULL), -1);
	spin_until_end();
	assert_true(out_is(F.err_out, "oops\n"));
	assert_int_equal(F.errors, 1);
	assert_string_equal(F.err.code, SBX_E_TIMEOUT);
	assert_string_equal(F.err.message, "Too slow.");
}

static void
test_output_cap_kills_as_exec(void **state)
{
	static const char *const argv[] = { "cat", NULL };
	struct sbx_session_req req;
	struct sbx_err err;

	(void)state;
	memset(&req, 0, sizeof(req));
	req.kind = SBX_SESSION_EXEC;
	req.exec.argv = argv;
	req.exec.output_cap = 4;
	F.op = sbx_session_open(F.d, ID, &req, &SINK, &err);
	evbuffer_add(F.src, "abcdefgh", 8);
	sbx_session_write(F.op, F.src, SIZE_MAX);
	spin_until_end();
	assert_true(out_is(F.out, "abcd"));
	assert_int_equal(F.ex.code, 137);
	assert_int_equal(F.ex.truncated, 1);
}

static void
test_refusals(void **state)
{
	struct sbx_session_req req;
	struct sbx_err err;

	(void)state;
	memset(&req, 0, sizeof(req));
	req.kind = SBX_SESSION_PTY;
	req.cols = 0;
	req.rows = 24;
	assert_null(sbx_session_open(F.d, ID, &req, &SINK, &err));
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	req.cols = 80;
	req.term = "x term";
	assert_null(sbx_session_open(F.d, ID, &req, &SINK, &err));
	req.kind = SBX_SESSION_PORT;
	req.port = 65536;
	assert_null(sbx_session_open(F.d, ID, &req, &SINK, &err));
	req.kind = SBX_SESSION_EXEC;
	assert_null(sbx_session_open(F.d, ID, &req, &SINK, &err));
	/* An absent sandbox: not_found through the sink. */
	req.kind = SBX_SESSION_PORT;
	req.port = 80;
	F.op = sbx_session_open(F.d, "npc-nobody", &req, &SINK, &err);
	assert_non_null(F.op);
	spin_until_end();
	assert_string_equal(F.err.code, SBX_E_NOT_FOUND);
	assert_int_equal(F.starts, 0);
	assert_int_equal(sbx_fake_stats(F.d)->calls[SBX_FAKE_SESSION], 5);
}

static void
test_cancel_from_output(void **state)
{
	(void)state;
	open_kind(SBX_SESSION_EXEC);
	evbuffer_add(F.src, "x", 1);
	sbx_session_write(F.op, F.src, SIZE_MAX);
	F.pause_on_output = 0;
	spin(10);
	sbx_op_cancel(F.op);
	F.op = NULL;
	spin(10);
	assert_int_equal(sbx_fake_session_seen(F.d)->cancels, 1);
	assert_int_equal(sbx_fake_session_seen(F.d)->live, 0);
	assert_int_equal(F.exits + F.errors, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_exec_is_cat, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pty_echoes_cr_as_crlf_and_records_controls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_port_echoes_without_exec_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_window_bounds_input_and_room_says_when, setup, teardown),
		cmocka_unit_test_setup_teardown(test_paused_session_stops_echo_and_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hooks_stderr_and_fail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_output_cap_kills_as_exec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_from_output, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
