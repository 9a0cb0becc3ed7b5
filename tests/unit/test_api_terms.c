/* test_api_terms.c - terminals of sandbox-api on the fake driver with a scripted session (adr/0051): create/list/get/delete, SSE output from an offset, input, control, scrollback ring and safe cut, one writer, idle kill, restart replay, limits, wake. */
#include "api_testutil.h"
#include "api_term.h"
#include "driver_fake.h"
#include "sbx_driver.h"

static char KA[SBX_TOKEN_GEN_LEN + 1];
static char KB[SBX_TOKEN_GEN_LEN + 1];

/* ------------------------------------------------------------------ */
/* A scripted session on top of the fake driver                        */

struct tsess {
	struct sbx_op op;            /* first: sbx_op_* find the driver */
	struct sbx_sink sink;
	struct sbx_session_req req;
	int ended, started, not_running, input_closed;
	struct evbuffer *in;         /* every input byte received */
	struct evbuffer *echo;       /* PTY: echoed on the next turn */
	struct sbx_session_ctl ctl;  /* the last control */
	int nctl;
	int viewers, nviewers;    /* the last VIEWERS control, how many came */
	struct event *ev;
	struct tsess *next;
};

static struct tsess *sessions;   /* newest first */
static const struct sbx_driver_ops *fake_ops;
static struct sbx_driver_ops my_ops;
static size_t room = 1 << 20;
static int status_idle;          /* status says stopped by the reaper */
static unsigned nsessions;

static struct tsess *
mine(struct sbx_op *op)
{
	struct tsess *s;

	for (s = sessions; s != NULL; s = s->next)
		if (&s->op == op)
			return s;
	return NULL;
}

static void
ts_turn(evutil_socket_t fd, short what, void *arg)
{
	struct tsess *s = arg;
	struct sbx_err e;
	size_t n;
	unsigned char buf[4096];

	(void)fd;
	(void)what;
	if (s->ended)
		return;
	if (!s->started) {
		s->started = 1;
		if (s->not_running) {
			s->ended = 1;
			sbx_err_clear(&e);
			sbx_err_set(&e, SBX_E_NOT_RUNNING, "Sandbox is stopped.");
			s->sink.error(s->sink.arg, &e);
			return;
		}
		s->sink.start(s->sink.arg, "e1");
	}
	while ((n = evbuffer_remove(s->echo, buf, sizeof(buf))) > 0 &&
	    n != (size_t)-1 && !s->ended)
		s->sink.output(s->sink.arg, 1, buf, n);
}

static void
ts_soon(struct tsess *s)
{
	static const struct timeval now = { 0, 0 };

	evtimer_add(s->ev, &now);
}

static struct sbx_op *
ts_open(struct sbx_driver *d, const char *id, const struct sbx_session_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct tsess *s = calloc(1, sizeof(*s));

	(void)err;
	assert_non_null(s);
	s->op.driver = d;
	s->sink = *sink;
	s->req = *req;
	s->req.exec.argv = NULL;
	s->req.exec.env = NULL;
	s->req.exec.cwd = NULL;
	s->req.term = NULL;
	s->in = evbuffer_new();
	s->echo = evbuffer_new();
	s->ev = evtimer_new(d->base, ts_turn, s);
	s->not_running = sbx_fake_state(d, id) != SBX_STATE_RUNNING;
	s->next = sessions;
	sessions = s;
	nsessions++;
	ts_soon(s);
	return &s->op;
}

static ssize_t
ts_write(struct sbx_driver *d, struct sbx_op *op, struct evbuffer *src,
    size_t max)
{
	struct tsess *s = mine(op);
	unsigned char *p;
	size_t n, i;

	(void)d;
	if (s == NULL || s->ended || s->input_closed)
		return -1;
	n = evbuffer_get_length(src);
	if (n > max)
		n = max;
	if (n > room)
		n = room;
	if (n == 0)
		return 0;
	room -= n;
	p = evbuffer_pullup(src, (ssize_t)n);
	evbuffer_add(s->in, p, n);
	if (s->req.kind == SBX_SESSION_PTY)
		for (i = 0; i < n; i++)
			evbuffer_add(s->echo, p[i] == '\r' ? "\r\n" : (char *)p + i,
			    p[i] == '\r' ? 2 : 1);
	evbuffer_drain(src, n);
	ts_soon(s);
	return (ssize_t)n;
}

static size_t
ts_room(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	return mine(op) != NULL ? room : 0;
}

static void
ts_close_input(struct sbx_driver *d, struct sbx_op *op)
{
	struct tsess *s = mine(op);

	(void)d;
	if (s != NULL)
		s->input_closed = 1;
}

static int
ts_control(struct sbx_driver *d, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err)
{
	struct tsess *s = mine(op);

	(void)d;
	(void)err;
	assert_non_null(s);
	if (c->kind == SBX_SESSION_VIEWERS) {
		s->viewers = c->viewers;
		s->nviewers++;
		return 0;
	}
	s->ctl = *c;
	s->nctl++;
	return 0;
}

static void
ts_cancel(struct sbx_driver *d, struct sbx_op *op)
{
	struct tsess *s = mine(op);

	if (s == NULL) {
		fake_ops->cancel(d, op);
		return;
	}
	s->ended = 2;   /* 2: cancelled */
}

static void
ts_pause(struct sbx_driver *d, struct sbx_op *op)
{
	if (mine(op) == NULL)
		fake_ops->pause(d, op);
}

static void
ts_resume(struct sbx_driver *d, struct sbx_op *op)
{
	if (mine(op) == NULL)
		fake_ops->resume(d, op);
}

struct status_wrap {
	sbx_status_cb cb;
	void *arg;
};

static void
status_patch(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct status_wrap w = *(struct status_wrap *)arg;
	struct sbx_status copy;

	free(arg);
	if (st != NULL && status_idle && st->state == SBX_STATE_STOPPED) {
		copy = *st;
		snprintf(copy.stop_reason, sizeof(copy.stop_reason), "idle");
		w.cb(w.arg, err, &copy);
		return;
	}
	w.cb(w.arg, err, st);
}

static struct sbx_op *
ts_status(struct sbx_driver *d, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct status_wrap *w = malloc(sizeof(*w));

	assert_non_null(w);
	w->cb = cb;
	w->arg = arg;
	return fake_ops->status(d, id, status_patch, w, err);
}

/* The output of session s (stream 1), now. */
static void
ts_out(struct tsess *s, const char *p, size_t n)
{
	s->sink.output(s->sink.arg, 1, (const unsigned char *)p,
	    n ? n : strlen(p));
}

static void
ts_exit(struct tsess *s, int code)
{
	struct sbx_exit ex = { .code = code };

	s->ended = 1;
	s->sink.exit(s->sink.arg, &ex);
}

static void
sessions_free(void)
{
	struct tsess *s;

	while ((s = sessions) != NULL) {
		sessions = s->next;
		event_free(s->ev);
		evbuffer_free(s->in);
		evbuffer_free(s->echo);
		free(s);
	}
	nsessions = 0;
}

/* ------------------------------------------------------------------ */
/* Fixture                                                             */

static void
start(void)
{
	struct sbx_driver *fake = sbx_fake_driver_new(T.base);
	struct tu_res r = { 0 };

	assert_non_null(fake);
	fake_ops = fake->ops;
	my_ops = *fake->ops;
	my_ops.session = ts_open;
	my_ops.session_write = ts_write;
	my_ops.session_room = ts_room;
	my_ops.session_close_input = ts_close_input;
	my_ops.session_control = ts_control;
	my_ops.cancel = ts_cancel;
	my_ops.pause = ts_pause;
	my_ops.resume = ts_resume;
	my_ops.status = ts_status;
	fake->ops = &my_ops;
	room = 1 << 20;
	status_idle = 0;
	tu_start(fake);
	tu_principal("alice", API_ROLE_PLAYER, KA);
	tu_principal("bob", API_ROLE_PLAYER, KB);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KA,
	    "{\"name\":\"n1\"}"), 201);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/n1/sandbox", KA, NULL),
	    200);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KB,
	    "{\"name\":\"n2\"}"), 201);
	tu_res_free(&r);
}

static int
up(void **state)
{
	tu_up(state);
	return 0;
}

static int
down(void **state)
{
	tu_down(state);
	sessions_free();
	return 0;
}

static void
restart(void)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	api_server_free(T.srv);
	T.srv = api_server_new(T.base, &T.cfg, T.drv, &err);
	if (T.srv == NULL)
		fail_msg("api_server_new: %s", err.message);
	T.port = api_server_port(T.srv);
}

/* POST .../terminals with body; the id into id (>= 32 bytes); returns
 * the new session. */
static struct tsess *
create(const char *body, char *id)
{
	struct tu_res r = { 0 };
	json_t *j;

	if (tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/terminals", KA, body)
	    != 201)
		fail_msg("create: %d %s", r.status, tu_text(&r));
	j = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(j);
	snprintf(id, 32, "%s", json_string_value(json_object_get(j, "id")));
	assert_int_equal(strlen(id), 25);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "running");
	json_decref(j);
	tu_res_free(&r);
	return sessions;
}

static json_t *
get(const char *id)
{
	struct tu_res r = { 0 };
	char path[160];
	json_t *j;

	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s", id);
	assert_int_equal(tu_req(&r, "GET", path, KA, NULL), 200);
	j = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(j);
	tu_res_free(&r);
	return j;
}

static const char *
sget(const json_t *j, const char *k)
{
	const char *v = json_string_value(json_object_get(j, k));

	return v != NULL ? v : "";
}

/* GET .../output?query until the body holds until (or the stream ends);
 * the body into r. */
static void
output(struct tu_res *r, const char *id, const char *query, const char *until,
    const char *key)
{
	char path[256];

	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s/"
	    "output%s%s", id, query != NULL ? "?" : "", query != NULL ? query :
	    "");
	tu_res_free(r);
	r->stop_when = until;
	tu_start_req(r, "GET", path, key, NULL, 0);
	if (!tu_loop_until(tu_is_done, r, 3000))
		fail_msg("output of %s never held %s: %s", id, until, tu_text(r));
}

static int
post(const char *id, const char *what, const char *body, size_t n,
    struct tu_res *r)
{
	char path[256];

	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s/%s",
	    id, what);
	tu_res_free(r);
	tu_start_req(r, "POST", path, KA, body, n ? n : strlen(body));
	tu_loop_until(tu_is_done, r, 3000);
	return r->status;
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */

static void
test_create_list_get_delete_and_another_players_404(void **state)
{
	struct tu_res r = { 0 };
	char id[32], path[160];
	struct tsess *s;
	json_t *j;

	(void)state;
	start();
	s = create("{\"cols\":120,\"rows\":40,\"term\":\"xterm\"}", id);
	assert_int_equal(s->req.kind, SBX_SESSION_PTY);
	assert_int_equal(s->req.cols, 120);
	assert_int_equal(s->req.rows, 40);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/n1/sandbox/terminals",
	    KA, NULL), 200);
	assert_non_null(strstr(tu_text(&r), id));
	j = get(id);
	assert_string_equal(sget(j, "state"), "running");
	assert_int_equal(json_integer_value(json_object_get(j, "cols")), 120);
	assert_string_equal(sget(j, "term"), "xterm");
	json_decref(j);
	/* Bob: alice's NPC, hence her terminal, does not exist for him. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s", id);
	assert_int_equal(tu_req(&r, "GET", path, KB, NULL), 404);
	snprintf(path, sizeof(path), "/api/v1/npcs/n2/sandbox/terminals/%s", id);
	assert_int_equal(tu_req(&r, "GET", path, KB, NULL), 404);
	/* Bad bodies. */
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/terminals",
	    KA, "{\"cols\":0,\"rows\":24}"), 400);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/terminals",
	    KA, "{\"cols\":80,\"rows\":10001}"), 400);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/terminals",
	    KA, "{\"pty\":false}"), 400);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/terminals",
	    KA, "{\"term\":\"x y\"}"), 400);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/terminals",
	    KA, "{\"shell\":1}"), 400);
	/* DELETE kills it: the session is cancelled. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s", id);
	assert_int_equal(tu_req(&r, "DELETE", path, KA, NULL), 200);
	assert_int_equal(s->ended, 2);
	j = get(id);
	assert_string_equal(sget(j, "state"), "killed");
	json_decref(j);
	tu_res_free(&r);
}

static void
test_sse_output_from_an_offset_and_a_safe_cut(void **state)
{
	struct tu_res r = { 0 };
	char id[32], path[160];
	struct tsess *s;

	(void)state;
	start();
	s = create(NULL, id);
	ts_out(s, "hello ", 0);
	ts_out(s, "w\xc3\xa9rld\x1b[31mred", 0);
	output(&r, id, "offset=0", "red", KA);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(tu_text(&r), "\"offset\":0"));
	assert_non_null(strstr(tu_text(&r), "id: 20\n"));
	/* From 6: the second piece only. */
	output(&r, id, "offset=6", "red", KA);
	assert_null(strstr(tu_text(&r), "\"data\":\"hello"));
	assert_non_null(strstr(tu_text(&r), "\"offset\":6"));
	/* Inside the é (offset 8): the replay starts after it. */
	output(&r, id, "offset=8", "red", KA);
	assert_non_null(strstr(tu_text(&r), "\"offset\":9,"));
	/* Inside the CSI (offset 15 of ESC at 12): after it, at "red". */
	output(&r, id, "offset=15", "red", KA);
	assert_non_null(strstr(tu_text(&r), "\"offset\":17,"));
	assert_null(strstr(tu_text(&r), "31m"));
	/* Beyond the end: 400. */
	output(&r, id, "offset=99", NULL, KA);
	assert_int_equal(r.status, 400);
	/* Last-Event-ID wins over ?offset= (an EventSource's resume). */
	ts_out(s, "more", 0);
	output(&r, id, "offset=0", "more", KA);
	assert_non_null(strstr(tu_text(&r), "hello"));
	/* A character split between two live outputs goes out whole, as
	 * text. */
	tu_res_free(&r);
	r.stop_when = "!\"";
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s/"
	    "output?offset=24", id);
	tu_start_req(&r, "GET", path, KA, NULL, 0);
	tu_spin(50);
	ts_out(s, "caf\xc3", 0);
	tu_spin(20);
	ts_out(s, "\xa9!", 0);
	assert_true(tu_loop_until(tu_is_done, &r, 3000));
	assert_non_null(strstr(tu_text(&r), "{\"offset\":24,\"stream\":1,\"data\":"
	    "\"caf\"}"));
	assert_non_null(strstr(tu_text(&r), "id: 27\n"));
	assert_non_null(strstr(tu_text(&r), "\"offset\":27,\"stream\":1,\"data\":"
	    "\"\xc3\xa9!\"}"));
	assert_null(strstr(tu_text(&r), "data_b64"));
	/* The end: an exit event, then the stream closes. */
	ts_exit(s, 3);
	output(&r, id, "offset=30", "event: exit", KA);
	assert_non_null(strstr(tu_text(&r), "\"code\":3"));
	tu_res_free(&r);
}

static void
test_input_reaches_the_session_and_echo_comes_back(void **state)
{
	struct tu_res r = { 0 }, o = { 0 };
	char id[32], *big;
	struct tsess *s;

	(void)state;
	start();
	s = create(NULL, id);
	assert_int_equal(post(id, "input", "echo hi\r", 0, &r), 200);
	tu_spin(50);
	assert_int_equal(evbuffer_get_length(s->in), 8);
	assert_memory_equal(evbuffer_pullup(s->in, -1), "echo hi\r", 8);
	output(&o, id, "offset=0", "echo hi\\r\\n", KA);
	/* Over terminal_input_max: 413, nothing queued. */
	big = malloc(65537);
	memset(big, 'a', 65537);
	assert_int_equal(post(id, "input", big, 65537, &r), 413);
	/* The session takes nothing: queued up to the cap, then 429. */
	room = 0;
	assert_int_equal(post(id, "input", big, 60000, &r), 200);
	assert_int_equal(post(id, "input", big, 6000, &r), 429);
	assert_string_equal(r.retry_after, "1");
	free(big);
	/* The sink's room callback sends what waits. */
	room = 1 << 20;
	s->sink.room(s->sink.arg);
	assert_int_equal(evbuffer_get_length(s->in), 8 + 60000);
	/* Ended: 409. */
	ts_exit(s, 0);
	assert_int_equal(post(id, "input", "x", 1, &r), 409);
	tu_res_free(&r);
	tu_res_free(&o);
}

static void
test_control_is_checked_and_reaches_the_session(void **state)
{
	struct tu_res r = { 0 };
	char id[32], id2[32];
	struct tsess *s, *x;
	json_t *j;

	(void)state;
	start();
	s = create(NULL, id);
	assert_int_equal(post(id, "control", "{\"type\":\"resize\",\"cols\":0,"
	    "\"rows\":0}", 0, &r), 400);
	assert_int_equal(post(id, "control", "{\"type\":\"resize\",\"cols\":"
	    "10001,\"rows\":5}", 0, &r), 400);
	assert_int_equal(post(id, "control", "{\"type\":\"resize\",\"cols\":"
	    "\"80\",\"rows\":5}", 0, &r), 400);
	assert_int_equal(post(id, "control", "{\"type\":\"signal\",\"signal\":"
	    "\"FOO\"}", 0, &r), 400);
	assert_int_equal(post(id, "control", "{\"type\":\"signal\",\"signal\":"
	    "65}", 0, &r), 400);
	assert_int_equal(post(id, "control", "{\"type\":\"dance\"}", 0, &r),
	    400);
	assert_int_equal(s->nctl, 0);
	assert_int_equal(post(id, "control", "{\"type\":\"resize\",\"cols\":"
	    "132,\"rows\":50}", 0, &r), 200);
	assert_int_equal(s->ctl.kind, SBX_SESSION_RESIZE);
	assert_int_equal(s->ctl.cols, 132);
	assert_int_equal(s->ctl.rows, 50);
	j = get(id);
	assert_int_equal(json_integer_value(json_object_get(j, "cols")), 132);
	json_decref(j);
	assert_int_equal(post(id, "control", "{\"type\":\"signal\",\"signal\":"
	    "\"SIGINT\"}", 0, &r), 200);
	assert_int_equal(s->ctl.kind, SBX_SESSION_SIGNAL);
	assert_int_equal(s->ctl.signo, 2);
	/* pty:false: no size; eof closes stdin. */
	x = create("{\"pty\":false,\"argv\":[\"cat\"]}", id2);
	assert_int_equal(x->req.kind, SBX_SESSION_EXEC);
	assert_int_equal(post(id2, "control", "{\"type\":\"resize\",\"cols\":"
	    "80,\"rows\":24}", 0, &r), 400);
	assert_int_equal(post(id2, "control", "{\"type\":\"eof\"}", 0, &r), 200);
	assert_int_equal(x->input_closed, 1);
	assert_int_equal(post(id2, "input", "x", 1, &r), 409);
	tu_res_free(&r);
}

/* A viewer through api_term.h, recording what it gets. */
struct rec {
	struct evbuffer *got;
	uint64_t first, next;
	int writer_calls, you, ended, skipped;
	uint64_t skip_from, skip_to;
	char state[16];
};

static void
rec_output(void *arg, int stream, uint64_t off, const unsigned char *p,
    size_t n)
{
	struct rec *c = arg;

	(void)stream;
	if (evbuffer_get_length(c->got) == 0 && c->skipped == 0)
		c->first = off;
	assert_true(off >= c->next);
	c->next = off + n;
	evbuffer_add(c->got, p, n);
}

static void
rec_ended(void *arg, const char *state, int code, const char *signal,
    const struct sbx_err *err)
{
	struct rec *c = arg;

	(void)code;
	(void)signal;
	(void)err;
	c->ended++;
	snprintf(c->state, sizeof(c->state), "%s", state);
}

static void
rec_writer(void *arg, int you)
{
	struct rec *c = arg;

	c->writer_calls++;
	c->you = you;
}

static void
rec_skipped(void *arg, uint64_t from, uint64_t to)
{
	struct rec *c = arg;

	c->skipped++;
	c->skip_from = from;
	c->skip_to = to;
	c->next = to;
}

static const struct api_viewer_ops rec_ops = {
	rec_output, rec_ended, rec_writer, rec_skipped, NULL,
};

static struct api_viewer *
attach(const char *id, uint64_t off, struct rec *c, uint64_t *start)
{
	struct sbx_err err;
	struct api_term *t;
	struct api_viewer *v;

	sbx_err_clear(&err);
	memset(c, 0, sizeof(*c));
	c->got = evbuffer_new();
	t = api_term_find(T.srv, "n1", id, &err);
	assert_non_null(t);
	v = api_term_attach(T.srv, t, off, &rec_ops, c, start, &err);
	assert_non_null(v);
	return v;
}

static void
test_one_writer_handed_to_the_oldest_remaining(void **state)
{
	struct rec c1, c2, c3;
	struct api_viewer *v1, *v2, *v3;
	struct sbx_err err;
	uint64_t st;
	char id[32];
	struct tsess *s;

	(void)state;
	start();
	s = create(NULL, id);
	v1 = attach(id, 0, &c1, &st);
	v2 = attach(id, 0, &c2, &st);
	v3 = attach(id, 0, &c3, &st);
	assert_true(api_viewer_is_writer(v1));
	assert_false(api_viewer_is_writer(v2));
	sbx_err_clear(&err);
	assert_int_equal(api_term_input(v2, (const unsigned char *)"x", 1,
	    &err), -1);
	assert_string_equal(err.code, SBX_E_FORBIDDEN);
	assert_int_equal(api_term_input(v1, (const unsigned char *)"ab", 2,
	    &err), 0);
	tu_spin(20);
	/* Both viewers see the same bytes (the echo). */
	assert_int_equal(evbuffer_get_length(c1.got), 2);
	assert_int_equal(evbuffer_get_length(c2.got), 2);
	api_viewer_detach(v1);
	assert_int_equal(c2.writer_calls, 1);
	assert_int_equal(c2.you, 1);
	assert_int_equal(c3.writer_calls, 0);
	assert_true(api_viewer_is_writer(v2));
	assert_int_equal(api_term_input(v2, (const unsigned char *)"c", 1,
	    &err), 0);
	assert_int_equal(evbuffer_get_length(s->in), 3);
	ts_exit(s, 0);
	tu_spin(10);
	assert_int_equal(c2.ended, 1);
	assert_string_equal(c2.state, "exited");
	api_viewer_detach(v2);
	api_viewer_detach(v3);
	evbuffer_free(c1.got);
	evbuffer_free(c2.got);
	evbuffer_free(c3.got);
}

static void
test_scrollback_ring_skip_notice_and_bounded_paused_viewer(void **state)
{
	struct rec c;
	struct api_viewer *v;
	char id[32], block[4096];
	uint64_t st, kept;
	struct tsess *s;
	int i;
	json_t *j;

	(void)state;
	tu_set("terminal_scrollback", "64k");
	start();
	s = create(NULL, id);
	v = attach(id, 0, &c, &st);
	tu_spin(10);
	api_viewer_pause(v, 1);
	memset(block, 'x', sizeof(block));
	/* 400 KiB while paused: the terminal keeps 64 KiB, not more. */
	for (i = 0; i < 100; i++)
		ts_out(s, block, sizeof(block));
	ts_out(s, "\x1b[1;2Hend", 0);
	j = get(id);
	assert_int_equal(json_integer_value(json_object_get(j, "offset")),
	    100 * 4096 + 9);
	json_decref(j);
	assert_int_equal(evbuffer_get_length(c.got), 0);
	api_viewer_pause(v, 0);
	tu_spin(50);
	/* Told what it missed, then from the oldest kept byte to the end. */
	assert_int_equal(c.skipped, 1);
	assert_int_equal(c.skip_from, 0);
	assert_true(c.skip_to > 300 * 1024);
	assert_int_equal(c.next, 100 * 4096 + 9);
	assert_true(evbuffer_get_length(c.got) <= 64 * 1024);
	/* A new viewer from 0 starts at the oldest kept byte; one asked to
	 * start inside the CSI starts after it. */
	kept = c.skip_to;
	api_viewer_detach(v);
	evbuffer_free(c.got);
	v = attach(id, 0, &c, &st);
	assert_int_equal(st, kept);
	api_viewer_detach(v);
	evbuffer_free(c.got);
	v = attach(id, 100 * 4096 + 2, &c, &st);
	assert_int_equal(st, 100 * 4096 + 6);
	tu_spin(10);
	assert_int_equal(evbuffer_get_length(c.got), 3);
	api_viewer_detach(v);
	evbuffer_free(c.got);
}

static int
has_status(void *arg)
{
	return ((struct tu_res *)arg)->status != 0;
}

/* streams_per_principal (adr/0056) holds for terminal viewers: the second
 * open viewer of a principal with a share of 1 is 429 + Retry-After, and
 * the share comes back when the first goes. */
static void
test_an_sse_viewer_is_one_of_its_principals_streams(void **state)
{
	struct tu_res a = { 0 }, b = { 0 };
	char id[32], path[160];

	(void)state;
	tu_set("streams_per_principal", "1");
	start();
	create(NULL, id);
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s/"
	    "output", id);
	a.pause_at_headers = 1;
	tu_start_req(&a, "GET", path, KA, NULL, 0);
	assert_true(tu_loop_until(has_status, &a, 3000));
	assert_int_equal(a.status, 200);
	assert_int_equal(tu_req(&b, "GET", path, KA, NULL), 429);
	assert_string_equal(tu_code(&b), "too_many");
	assert_string_equal(b.retry_after, "1");
	tu_res_free(&a);
	tu_res_free(&b);
	tu_spin(100);
	memset(&b, 0, sizeof(b));
	b.pause_at_headers = 1;
	tu_start_req(&b, "GET", path, KA, NULL, 0);
	assert_true(tu_loop_until(has_status, &b, 3000));
	assert_int_equal(b.status, 200);
	tu_res_free(&b);
}

static void
test_idle_terminal_is_killed_a_viewer_keeps_it_and_the_session_hears_of_it(void **state)
{
	struct rec c;
	struct api_viewer *v;
	char id[32], id2[32];
	struct tsess *s, *s2;
	uint64_t st;
	json_t *j;

	(void)state;
	tu_set("terminal_idle", "300ms");
	start();
	s = create(NULL, id);
	s2 = create(NULL, id2);
	/* The session hears whether the terminal has a viewer, for the
	 * broker's reaper (adr/0051 amendment): none at the start, one on
	 * attach, none when it leaves; once each. */
	assert_int_equal(s2->nviewers, 1);
	assert_int_equal(s2->viewers, 0);
	v = attach(id2, 0, &c, &st);
	assert_int_equal(s2->nviewers, 2);
	assert_int_equal(s2->viewers, 1);
	tu_spin(500);
	assert_int_equal(s->nviewers, 1);
	j = get(id);
	assert_string_equal(sget(j, "state"), "ended");
	assert_string_equal(sget(j, "reason"), "idle");
	json_decref(j);
	assert_int_equal(s->ended, 2);
	/* The viewed one still runs; after its viewer leaves, it goes too. */
	j = get(id2);
	assert_string_equal(sget(j, "state"), "running");
	json_decref(j);
	api_viewer_detach(v);
	assert_int_equal(s2->nviewers, 3);
	assert_int_equal(s2->viewers, 0);
	tu_spin(200);
	j = get(id2);
	assert_string_equal(sget(j, "state"), "running");
	json_decref(j);
	tu_spin(250);
	j = get(id2);
	assert_string_equal(sget(j, "state"), "ended");
	json_decref(j);
	assert_int_equal(s2->ended, 2);
	evbuffer_free(c.got);
}

static void
test_restart_ends_running_failed_and_replays_from_disk(void **state)
{
	struct tu_res r = { 0 };
	char id[32];
	struct tsess *s;
	json_t *j;

	(void)state;
	start();
	s = create(NULL, id);
	ts_out(s, "before \xe2\x9c\x93 restart\r\n", 0);
	restart();
	j = get(id);
	assert_string_equal(sget(j, "state"), "failed");
	assert_string_equal(sget(j, "reason"), "api_restarted");
	assert_int_equal(json_integer_value(json_object_get(j, "offset")), 20);
	json_decref(j);
	output(&r, id, "offset=0", "event: error", KA);
	assert_non_null(strstr(tu_text(&r), "before \xe2\x9c\x93 restart"));
	assert_non_null(strstr(tu_text(&r), "api_restarted"));
	/* And again after a second restart: the log stays. */
	restart();
	output(&r, id, "offset=7", "event: error", KA);
	assert_non_null(strstr(tu_text(&r), "\"data\":\"\xe2\x9c\x93 restart"));
	tu_res_free(&r);
}

static void
test_per_principal_limit_and_wake_of_a_stopped_sandbox(void **state)
{
	struct tu_res r = { 0 };
	char id[32];

	(void)state;
	tu_set("terminals_per_principal", "2");
	start();
	create(NULL, id);
	create(NULL, id);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/terminals",
	    KA, NULL), 429);
	assert_non_null(strstr(tu_text(&r), "terminals_per_principal"));
	/* A reaped sandbox is woken by a new terminal. */
	tu_res_free(&r);
	tu_teardown();
	sessions_free();
	tu_setup_base();
	start();
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/stop", KA,
	    NULL), 200);
	assert_int_equal(sbx_fake_state(T.drv, "npc-n1") == SBX_STATE_RUNNING, 0);
	status_idle = 1;
	create(NULL, id);
	assert_int_equal(nsessions, 2);   /* refused, then after the wake */
	assert_int_equal(sbx_fake_state(T.drv, "npc-n1"), SBX_STATE_RUNNING);
	tu_res_free(&r);
}

static void
test_tickets_authorise_one_terminal_only(void **state)
{
	struct tu_res r = { 0 };
	char id[32], id2[32], path[256], tok[128];
	struct tsess *s;
	json_t *j;

	(void)state;
	start();
	s = create(NULL, id);
	create(NULL, id2);
	ts_out(s, "secret-free output", 0);
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s/"
	    "tickets", id);
	assert_int_equal(tu_req(&r, "POST", path, KA, NULL), 200);
	j = json_loads(tu_text(&r), 0, NULL);
	snprintf(tok, sizeof(tok), "ticket=%s", sget(j, "ticket"));
	assert_non_null(strstr(sget(j, "output_url"), "/output?ticket="));
	json_decref(j);
	output(&r, id, tok, "output\"", NULL);
	assert_int_equal(r.status, 200);
	output(&r, id2, tok, NULL, NULL);
	assert_int_equal(r.status, 401);
	tu_res_free(&r);
}

static void
test_ended_terminals_beyond_the_records_bound_are_forgotten(void **state)
{
	struct tu_res r = { 0 };
	char id1[32], id2[32], id3[32], path[160];
	struct tsess *s1, *s2;
	struct rec c;
	struct api_viewer *v;
	uint64_t st;

	(void)state;
	tu_set("terminal_records_per_principal", "1");
	start();
	s1 = create(NULL, id1);
	s2 = create(NULL, id2);
	v = attach(id1, 0, &c, &st);
	ts_exit(s1, 0);
	ts_exit(s2, 0);
	tu_spin(50);
	/* id1 is older, but a viewer keeps it. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/terminals/%s", id1);
	assert_int_equal(tu_req(&r, "GET", path, KA, NULL), 200);
	api_viewer_detach(v);
	evbuffer_free(c.got);
	/* Once unviewed it goes at the next sweep; the newer one stays. */
	s2 = create(NULL, id3);
	ts_exit(s2, 0);
	tu_spin(50);
	assert_int_equal(tu_req(&r, "GET", path, KA, NULL), 404);
	tu_res_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_create_list_get_delete_and_another_players_404, up, down),
		cmocka_unit_test_setup_teardown(
		    test_sse_output_from_an_offset_and_a_safe_cut, up, down),
		cmocka_unit_test_setup_teardown(
		    test_input_reaches_the_session_and_echo_comes_back, up, down),
		cmocka_unit_test_setup_teardown(
		    test_control_is_checked_and_reaches_the_session, up, down),
		cmocka_unit_test_setup_teardown(
		    test_one_writer_handed_to_the_oldest_remaining, up, down),
		cmocka_unit_test_setup_teardown(
		    test_scrollback_ring_skip_notice_and_bounded_paused_viewer,
		    up, down),
		cmocka_unit_test_setup_teardown(
		    test_idle_terminal_is_killed_a_viewer_keeps_it_and_the_session_hears_of_it,
		    up, down),
		cmocka_unit_test_setup_teardown(
		    test_an_sse_viewer_is_one_of_its_principals_streams, up,
		    down),
		cmocka_unit_test_setup_teardown(
		    test_restart_ends_running_failed_and_replays_from_disk, up,
		    down),
		cmocka_unit_test_setup_teardown(
		    test_per_principal_limit_and_wake_of_a_stopped_sandbox, up,
		    down),
		cmocka_unit_test_setup_teardown(
		    test_tickets_authorise_one_terminal_only, up, down),
		cmocka_unit_test_setup_teardown(
		    test_ended_terminals_beyond_the_records_bound_are_forgotten,
		    up, down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
