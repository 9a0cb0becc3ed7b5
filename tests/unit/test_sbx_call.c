/* test_sbx_call.c - the call layer's write gather: write_stream on a driver without one (the fake) writes the whole body once it has arrived, and cancels like any op. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "driver_fake.h"
#include "sbx_call.h"
#include "sbx_proto.h"

struct fx {
	struct event_base *base;
	struct sbx_driver *d;
	struct evbuffer *src;
	int calls;                /* terminal callbacks */
	char code[48];            /* of the last one; "" when ok */
};

static void
done_cb(void *arg, const struct sbx_err *err)
{
	struct fx *f = arg;

	f->calls++;
	snprintf(f->code, sizeof(f->code), "%s", err != NULL ? err->code : "");
}

static void
status_cb(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	(void)arg;
	(void)st;
	assert_null(err);
}

static void
spin(struct fx *f)
{
	int i;

	for (i = 0; i < 20; i++)
		event_base_loop(f->base, EVLOOP_NONBLOCK);
}

static int
setup(void **state)
{
	static struct fx f;
	struct sbx_err err;

	memset(&f, 0, sizeof(f));
	f.base = event_base_new();
	f.d = sbx_fake_driver_new(f.base);
	f.src = evbuffer_new();
	if (f.base == NULL || f.d == NULL || f.src == NULL ||
	    sbx_call_ensure(f.d, "s1", NULL, status_cb, NULL, &err) == NULL)
		return -1;
	spin(&f);
	*state = &f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	evbuffer_free(f->src);
	sbx_driver_free(f->d);
	event_base_free(f->base);
	return 0;
}

static long
file(struct fx *f, char *buf, size_t cap)
{
	return sbx_fake_get_file(f->d, "s1", "/work/f", buf, cap);
}

/* A body arriving in pieces is written once, whole, when the last byte came. */
static void
test_gathered_body_is_written_whole_when_complete(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	struct sbx_op *op;
	char buf[16];

	assert_int_equal(sbx_call_supports(f->d, SBX_CALL_WRITE_STREAM), 0);
	op = sbx_call_write_stream(f->d, "s1", "/work/f", 0644, f->src, 10,
	    done_cb, f, &err);
	assert_non_null(op);
	evbuffer_add(f->src, "hello", 5);
	spin(f);
	assert_int_equal(sbx_fake_stats(f->d)->calls[SBX_FAKE_WRITE], 0);
	assert_int_equal(file(f, buf, sizeof(buf)), -1);
	evbuffer_add(f->src, "world", 5);
	spin(f);
	assert_int_equal(f->calls, 1);
	assert_string_equal(f->code, "");
	assert_int_equal(sbx_fake_stats(f->d)->calls[SBX_FAKE_WRITE], 1);
	assert_int_equal(file(f, buf, sizeof(buf)), 10);
	assert_memory_equal(buf, "helloworld", 10);
}

/* Cancelled before the body completed: no write, no callback, ever. */
static void
test_cancelled_gather_never_writes(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	struct sbx_op *op;

	op = sbx_call_write_stream(f->d, "s1", "/work/f", 0644, f->src, 4,
	    done_cb, f, &err);
	assert_non_null(op);
	evbuffer_add(f->src, "ab", 2);
	sbx_op_cancel(op);
	evbuffer_add(f->src, "cd", 2);
	spin(f);
	assert_int_equal(f->calls, 0);
	assert_int_equal(sbx_fake_stats(f->d)->calls[SBX_FAKE_WRITE], 0);
}

/* A body already there goes to write at once; a refusal then is the call's. */
static void
test_complete_body_writes_at_once_and_refusals_are_sync(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	struct sbx_op *op;
	char buf[4];

	evbuffer_add(f->src, "xyz", 3);
	op = sbx_call_write_stream(f->d, "s1", "/work/f", 0644, f->src, 3,
	    done_cb, f, &err);
	assert_non_null(op);
	spin(f);
	assert_int_equal(f->calls, 1);
	assert_int_equal(file(f, buf, sizeof(buf)), 3);
	sbx_fake_fail_next(f->d, SBX_FAKE_WRITE, SBX_E_RUNTIME, 1);
	evbuffer_add(f->src, "xyz", 3);
	op = sbx_call_write_stream(f->d, "s1", "/work/f", 0644, f->src, 3,
	    done_cb, f, &err);
	assert_null(op);
	assert_string_equal(err.code, SBX_E_RUNTIME);
	assert_int_equal(f->calls, 1);
}

/* The write refusing after the call returned is the one terminal callback. */
static void
test_late_refusal_is_the_terminal_callback(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	struct sbx_op *op;

	op = sbx_call_write_stream(f->d, "s1", "/work/f", 0644, f->src, 2,
	    done_cb, f, &err);
	assert_non_null(op);
	sbx_fake_fail_next(f->d, SBX_FAKE_WRITE, SBX_E_RUNTIME, 1);
	evbuffer_add(f->src, "ok", 2);
	spin(f);
	assert_int_equal(f->calls, 1);
	assert_string_equal(f->code, SBX_E_RUNTIME);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_gathered_body_is_written_whole_when_complete, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_cancelled_gather_never_writes, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_complete_body_writes_at_once_and_refusals_are_sync,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_late_refusal_is_the_terminal_callback, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
