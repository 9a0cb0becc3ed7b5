/* test_sbx_session.c - sessions below the broker: the wrappers of common/sbx_driver.h reach a driver's session members through the handle (a driver without them answers with a sentence instead of a NULL call), and the session body of proto/sbx_wire.h round-trips and refuses what is out of range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <jansson.h>

#include "sbx_driver.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

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
	struct sbx_session_ctl c = { SBX_SESSION_RESIZE, 80, 24, 0, 0 };
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
	struct sbx_session_ctl c = { SBX_SESSION_SIGNAL, 0, 0, 2, 0 };
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

/* text -> decoded session (0), or -1 with err. */
static int
session_from_text(const char *text, struct sbx_wire_session *s,
    json_t **body, struct sbx_err *err)
{
	sbx_err_clear(err);
	*body = NULL;
	if (sbx_wire_body_object(text, strlen(text), sbx_wire_session_fields, 0,
	    body, err) == -1)
		return -1;
	if (sbx_wire_session_decode(*body, s, err) == -1) {
		json_decref(*body);
		*body = NULL;
		return -1;
	}
	return 0;
}

static void
session_refused(const char *text, const char *code)
{
	struct sbx_wire_session s;
	struct sbx_err err;
	json_t *body;

	if (session_from_text(text, &s, &body, &err) == 0) {
		sbx_wire_session_free(&s);
		json_decref(body);
		fail_msg("accepted: %.80s", text);
	}
	if (strcmp(err.code, code) != 0)
		fail_msg("%.80s: code %s (%s), want %s", text, err.code,
		    err.message, code);
}

/* Encode -> text -> decode gives the request back, for each kind. */
static void
test_session_body_round_trip(void **state)
{
	static const char *const argv[] = { "sh", "-c", "cat", NULL };
	static const char *const env[] = { "A=1", NULL };
	struct sbx_session_req req;
	struct sbx_wire_session s;
	struct sbx_err err;
	json_t *o, *body;
	char *text;

	(void)state;
	memset(&req, 0, sizeof req);
	req.kind = SBX_SESSION_PTY;
	req.exec.argv = argv;
	req.exec.cwd = "/work/x";
	req.exec.env = env;
	req.exec.timeout_ms = 500;
	req.cols = 132;
	req.rows = 43;
	req.term = "xterm-256color";
	assert_non_null(o = sbx_wire_session_encode(&req, &err));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	assert_int_equal(session_from_text(text, &s, &body, &err), 0);
	free(text);
	assert_int_equal(s.req.kind, SBX_SESSION_PTY);
	assert_string_equal(s.req.exec.argv[2], "cat");
	assert_null(s.req.exec.argv[3]);
	assert_string_equal(s.req.exec.cwd, "/work/x");
	assert_string_equal(s.req.exec.env[0], "A=1");
	assert_int_equal(s.req.exec.timeout_ms, 500);
	assert_int_equal(s.req.cols, 132);
	assert_int_equal(s.req.rows, 43);
	assert_string_equal(s.req.term, "xterm-256color");
	sbx_wire_session_free(&s);
	json_decref(body);

	/* A terminal without argv: the login shell, argv NULL both ways. */
	req.exec.argv = NULL;
	req.term = NULL;
	assert_non_null(o = sbx_wire_session_encode(&req, &err));
	assert_null(json_object_get(o, "argv"));
	assert_null(json_object_get(o, "term"));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	assert_int_equal(session_from_text(text, &s, &body, &err), 0);
	free(text);
	assert_null(s.req.exec.argv);
	assert_null(s.req.term);
	sbx_wire_session_free(&s);
	json_decref(body);

	memset(&req, 0, sizeof req);
	req.kind = SBX_SESSION_PORT;
	req.port = 8080;
	assert_non_null(o = sbx_wire_session_encode(&req, &err));
	text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	assert_string_equal(text, "{\"kind\":\"port\",\"port\":8080}");
	assert_int_equal(session_from_text(text, &s, &body, &err), 0);
	free(text);
	assert_int_equal(s.req.kind, SBX_SESSION_PORT);
	assert_int_equal(s.req.port, 8080);
	sbx_wire_session_free(&s);
	json_decref(body);

	memset(&req, 0, sizeof req);
	req.kind = SBX_SESSION_EXEC;
	req.exec.argv = argv;
	assert_non_null(o = sbx_wire_session_encode(&req, &err));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	assert_int_equal(session_from_text(text, &s, &body, &err), 0);
	free(text);
	assert_int_equal(s.req.kind, SBX_SESSION_EXEC);
	assert_string_equal(s.req.exec.argv[0], "sh");
	sbx_wire_session_free(&s);
	json_decref(body);
}

/* Out of range, a member of another kind, a missing one: refused. */
static void
test_session_body_refusals(void **state)
{
	struct sbx_session_req req;
	struct sbx_err err;

	(void)state;
	session_refused("{}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"shell\"}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"exec\\u0000x\",\"argv\":[\"a\"]}",
	    SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":3}", SBX_E_WRONG_TYPE);
	session_refused("{\"kind\":\"exec\"}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"exec\",\"argv\":[\"a\"],\"stdin\":\"\"}",
	    SBX_E_UNKNOWN_FIELD);
	session_refused("{\"kind\":\"exec\",\"argv\":[\"a\"],\"port\":80}",
	    SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"exec\",\"argv\":[\"a\"],\"cwd\":\"/etc\"}",
	    SBX_E_PATH_OUTSIDE_WORK);
	session_refused("{\"kind\":\"pty\",\"rows\":24}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"pty\",\"cols\":0,\"rows\":24}",
	    SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"pty\",\"cols\":10001,\"rows\":24}",
	    SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"pty\",\"cols\":80,\"rows\":\"24\"}",
	    SBX_E_WRONG_TYPE);
	session_refused("{\"kind\":\"pty\",\"cols\":80,\"rows\":24,"
	    "\"term\":\"x y\"}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"pty\",\"cols\":80,\"rows\":24,"
	    "\"term\":\"\"}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"port\"}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"port\",\"port\":0}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"port\",\"port\":65536}", SBX_E_BAD_REQUEST);
	session_refused("{\"kind\":\"port\",\"port\":80,\"argv\":[\"a\"]}",
	    SBX_E_BAD_REQUEST);

	memset(&req, 0, sizeof req);
	req.kind = SBX_SESSION_PTY;
	req.cols = 80;
	assert_null(sbx_wire_session_encode(&req, &err));
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	req.kind = SBX_SESSION_PORT;
	assert_null(sbx_wire_session_encode(&req, &err));
	req.kind = (enum sbx_session_kind)9;
	assert_null(sbx_wire_session_encode(&req, &err));
	assert_null(sbx_wire_session_encode(NULL, &err));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wrappers_reach_the_members),
		cmocka_unit_test(test_driver_without_sessions_refuses),
		cmocka_unit_test(test_session_body_round_trip),
		cmocka_unit_test(test_session_body_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
