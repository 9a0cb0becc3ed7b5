/* test_sbx_session.c - the session wrappers of common/sbx_driver.h: they reach a driver's session members through the handle, and a driver without them answers with a sentence instead of a NULL call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "sbx_driver.h"
#include "sbx_proto.h"

/* A driver whose session members record what reached them. */
struct rec {
	struct sbx_driver d;
	struct sbx_op op;
	int opened, closed, ctl_kind;
	size_t moved;
};

static struct sbx_op *
rec_session(struct sbx_driver *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err)
{
	struct rec *r = (struct rec *)d;

	(void)sink;
	(void)err;
	assert_string_equal(id, "box");
	r->opened = req->kind;
	return &r->op;
}

static ssize_t
rec_write(struct sbx_driver *d, struct sbx_op *op, struct evbuffer *src,
    size_t max)
{
	struct rec *r = (struct rec *)d;
	size_t n = evbuffer_get_length(src);

	assert_ptr_equal(op, &r->op);
	if (n > max)
		n = max;
	if (n > 3)
		n = 3;                  /* room of 3 */
	evbuffer_drain(src, n);
	r->moved += n;
	return (ssize_t)n;
}

static size_t
rec_room(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	(void)op;
	return 3;
}

static void
rec_close(struct sbx_driver *d, struct sbx_op *op)
{
	(void)op;
	((struct rec *)d)->closed++;
}

static int
rec_control(struct sbx_driver *d, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err)
{
	(void)op;
	if (c->kind == SBX_SESSION_RESIZE && (c->cols < 1 || c->rows < 1))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "bad size");
	((struct rec *)d)->ctl_kind = c->kind;
	return 0;
}

static const struct sbx_driver_ops rec_ops = {
	.name = "rec",
	.session = rec_session,
	.session_write = rec_write,
	.session_room = rec_room,
	.session_close_input = rec_close,
	.session_control = rec_control,
};

static const struct sbx_driver_ops bare_ops = { .name = "bare" };

/* Each wrapper reaches its member with the handle's driver. */
static void
test_wrappers_reach_the_members(void **state)
{
	struct rec r;
	struct sbx_session_req req;
	struct sbx_session_ctl c = { SBX_SESSION_RESIZE, 80, 24, 0 };
	struct sbx_sink sink;
	struct sbx_err err;
	struct evbuffer *b = evbuffer_new();
	struct sbx_op *op;

	(void)state;
	memset(&r, 0, sizeof r);
	memset(&req, 0, sizeof req);
	memset(&sink, 0, sizeof sink);
	r.d.ops = &rec_ops;
	r.op.driver = &r.d;
	req.kind = SBX_SESSION_PTY;
	sbx_err_clear(&err);
	op = sbx_session_open(&r.d, "box", &req, &sink, &err);
	assert_ptr_equal(op, &r.op);
	assert_int_equal(r.opened, SBX_SESSION_PTY);
	evbuffer_add(b, "hello", 5);
	assert_int_equal(sbx_session_room(op), 3);
	assert_int_equal(sbx_session_write(op, b, 2), 2);
	assert_int_equal(sbx_session_write(op, b, 100), 3);
	assert_int_equal(evbuffer_get_length(b), 0);
	assert_int_equal(r.moved, 5);
	sbx_session_close_input(op);
	assert_int_equal(r.closed, 1);
	assert_int_equal(sbx_session_control(op, &c, &err), 0);
	assert_int_equal(r.ctl_kind, SBX_SESSION_RESIZE);
	c.cols = 0;
	assert_int_equal(sbx_session_control(op, &c, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	evbuffer_free(b);
}

/* A driver without sessions refuses the open with a sentence, and the
 * other wrappers answer as for an ended session. */
static void
test_driver_without_sessions_refuses(void **state)
{
	struct sbx_driver d = { &bare_ops, NULL };
	struct sbx_op op = { &d };
	struct sbx_session_req req;
	struct sbx_session_ctl c = { SBX_SESSION_SIGNAL, 0, 0, 2 };
	struct sbx_sink sink;
	struct sbx_err err;
	struct evbuffer *b = evbuffer_new();

	(void)state;
	memset(&req, 0, sizeof req);
	memset(&sink, 0, sizeof sink);
	req.kind = SBX_SESSION_EXEC;
	sbx_err_clear(&err);
	assert_null(sbx_session_open(&d, "box", &req, &sink, &err));
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	assert_string_equal(err.message, "this driver has no sessions");
	evbuffer_add(b, "x", 1);
	assert_int_equal(sbx_session_write(&op, b, 1), -1);
	assert_int_equal(evbuffer_get_length(b), 1);
	assert_int_equal(sbx_session_room(&op), 0);
	sbx_session_close_input(&op);
	sbx_err_clear(&err);
	assert_int_equal(sbx_session_control(&op, &c, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	/* NULL handles too. */
	assert_int_equal(sbx_session_write(NULL, b, 1), -1);
	assert_int_equal(sbx_session_room(NULL), 0);
	sbx_session_close_input(NULL);
	assert_int_equal(sbx_session_control(NULL, &c, NULL), -1);
	evbuffer_free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wrappers_reach_the_members),
		cmocka_unit_test(test_driver_without_sessions_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
