/*
 * driver_engine_rexec.c - the engine driver's transport with the agent
 * off (and for kinds that keep a runtime exec): one runtime exec of
 * /.sbx/sbx-helper per invocation, its stdin, stream and exit (Engine API
 * v1.41 §Exec, adr/0002). Its row is eng_rexec_transport; it calls down
 * into the invocation's core (driver_engine_run.c), the runtime call layer
 * and the op lifecycle, and reaches the kind only through its row.
 */
#include "driver_engine_int.h"

/* The stream can end a moment before the runtime records the exit: the
 * exec is inspected again this often, this many times. */
#define EXIT_POLLS 50
#define EXIT_POLL_MS 20

static void exec_poll_exit(struct eop *op);

static void
poll_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	exec_poll_exit(arg);
}

static void
exec_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_exec *x = xop(op);
	struct sbx_err e;
	struct timeval tv = { 0, EXIT_POLL_MS * 1000 };

	if (err != NULL) {
		/* No exit record and no answer (the runtime died with the
		 * stream): the processes may live on; the kill is retried
		 * until the runtime is back (test_faults.py). */
		if (op->kind->flags & EK_FRAMED)
			eng_start_kill(op->e, op->id, op->cid, x->exec_id, NULL);
		eng_finish_err(op, err);
		return;
	}
	if (status != 200) {
		eng_runtime_err(&e, status, body, "inspect the exec");
		eng_finish_err(op, &e);
		return;
	}
	/* The stream can end a moment before the runtime records the exit. */
	if (json_is_true(json_object_get(body, "Running")) &&
	    x->polls++ < EXIT_POLLS) {
		event_free(x->timer);
		x->timer = evtimer_new(op->e->base.base, poll_timer_cb, op);
		if (x->timer != NULL && event_add(x->timer, &tv) == 0)
			return;
	}
	if (json_is_true(json_object_get(body, "Running"))) {
		/* The stream ended but the process did not: it must not
		 * outlive the operation. */
		if (op->kind->flags & EK_NO_KILL) {
			op->kind->expired(op);   /* a kill is not killed */
			return;
		}
		eng_start_kill(op->e, op->id, op->cid, x->exec_id, NULL);
		sbx_err_set(&e, SBX_E_RUNTIME, "exec output ended but the "
		    "process kept running; it was killed");
		eng_finish_err(op, &e);
	} else
		op->kind->exited(op, (int)json_integer_value(json_object_get(body,
		    "ExitCode")));
}

static void
exec_poll_exit(struct eop *op)
{

	eng_callf(op, "GET", NULL, exec_inspected, API "/exec/%s/json",
	    xop(op)->rexec);
}

static void
exec_after_stream(struct eop *op)
{
	if (xop(op)->timer != NULL)
		event_del(xop(op)->timer);
	exec_poll_exit(op);
}

/* ---------- stdin: the whole buffer, or a lent source pumped ---------- */

/* Bytes of a streamed write in the runtime connection's output at most:
 * with the gate's window, what one write costs the broker (adr/0018). */
#define WRITE_OUT_MAX (256 * 1024)

/* Moves what the source has to the runtime while its output has room;
 * closes the write side once every byte announced went. */
static void
src_pump(struct eop *op)
{
	struct eop_exec *x = xop(op);
	struct bufferevent *bev;
	struct evbuffer *out;
	size_t n, have, room;

	if (x->src == NULL || op->http == NULL || !x->got_stream ||
	    (bev = sbx_http_req_bufferevent(op->http)) == NULL)
		return;
	out = bufferevent_get_output(bev);
	while (x->src_left > 0 && (have = evbuffer_get_length(x->src)) > 0 &&
	    evbuffer_get_length(out) < WRITE_OUT_MAX) {
		room = WRITE_OUT_MAX - evbuffer_get_length(out);
		n = have < room ? have : room;
		if ((uint64_t)n > x->src_left)
			n = (size_t)x->src_left;
		if (evbuffer_remove_buffer(x->src, out, n) <= 0)
			break;
		x->src_left -= n;
	}
	if (x->src_left == 0) {
		eng_src_detach(op);
		sbx_http_req_close_write(op->http);
	}
}

/* Stdin leaving for the runtime is a file op's progress (and room for
 * more of a lent source). */
static void
stdin_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct eop *op = arg;

	if (info->n_deleted > 0) {
		eng_file_progress(op);
		if (xop(op)->src != NULL &&
		    evbuffer_get_length(buf) < WRITE_OUT_MAX / 2)
			src_pump(op);
	}
}

/* The runtime stream has started: stdin_buf, then the lent source (if
 * any), then the write side closed. */
static void
stdin_started(struct eop *op, struct sbx_http_req *req)
{
	struct eop_exec *x = xop(op);

	if (x->ftimer != NULL && sbx_http_req_bufferevent(req) != NULL)
		evbuffer_add_cb(bufferevent_get_output(
		    sbx_http_req_bufferevent(req)), stdin_drained, op);
	if (x->stdin_buf != NULL)
		sbx_http_req_write_buffer(req, x->stdin_buf);
	if (x->src != NULL)
		src_pump(op);     /* closes the write side at the end */
	else
		sbx_http_req_close_write(req);
}

/* Demultiplexes the 8-byte-framed stream (Engine API "Attach": byte 0 the
 * stream, bytes 4-7 the big-endian payload length). An exec's stdout holds
 * the helper's frames, its stderr only the helper's own words. */
static void
stream_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct eop *op = arg;
	struct eop_exec *x = xop(op);
	const unsigned char *p;
	size_t n;
	int stream;

	if (sbx_http_req_status(req) >= 300) {
		eng_call_body(op, req, buf, len);
		return;
	}
	eng_op_enter(op);
	while (!op->dead && x->streaming &&
	    (p = eng_demux_next(&x->demux, &buf, &len, STREAM_CHUNK, &n,
	    &stream)) != NULL)
		eng_run_output(op, stream, p, n);
	eng_op_leave(op);
}

static void
stream_response(void *arg, struct sbx_http_req *req, int status)
{
	struct eop *op = arg;
	struct eop_exec *x = xop(op);
	struct sbx_err e;

	if (status != 101 && status != 200)
		return;          /* error answer: collected, reported at done */
	x->streaming = 1;
	x->got_stream = 1;
	if (x->has_stdin) {
		if (!sbx_http_req_upgraded(req)) {
			sbx_err_set(&e, SBX_E_RUNTIME, "runtime did not upgrade "
			    "the exec connection, so stdin cannot be sent");
			eng_start_kill(op->e, op->id, op->cid, x->exec_id, NULL);
			eng_finish_err(op, &e);
			return;
		}
		stdin_started(op, req);
	}
	if (op->kind->flags & EK_FRAMED)
		eng_exec_announce(op);
}

static void
stream_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct eop *op = arg;
	struct eop_exec *x = xop(op);
	struct sbx_err e;
	json_t *body = NULL;
	int status = sbx_http_req_status(req);

	op->http = NULL;
	x->streaming = 0;
	if (err != NULL) {
		/* A kill's own stream broke: its fail says so to its parent. */
		if (op->kind->flags & EK_NO_KILL) {
			eng_finish_err(op, err);
			return;
		}
		/* The exit record came: the command is reaped, its group dead;
		 * a stream broken after that loses nothing. */
		if (eng_run_recorded(op))
			return;
		/* Podman 4.3 resets the exec connection when the process exits
		 * while stdin is still being sent (measured: 5 of 5 runs of
		 * `exit 3` with 3 MB of stdin); the exit status is still
		 * there, so a reset of a running stream with stdin ends it. */
		if (x->got_stream && x->has_stdin &&
		    strcmp(err->code, SBX_E_RUNTIME) == 0) {
			exec_after_stream(op);
			return;
		}
		/* The stream broke: the processes may live on. */
		e = *err;
		eng_start_kill(op->e, op->id, op->cid, x->exec_id, NULL);
		eng_finish_err(op, &e);
		return;
	}
	if (status != 101 && status != 200) {
		if (evbuffer_get_length(op->resp) > 0)
			body = json_loadb((const char *)evbuffer_pullup(op->resp, -1),
			    evbuffer_get_length(op->resp), 0, NULL);
		if (status == 404)
			eng_not_found(op, &e);
		else if (status == 409)
			sbx_err_set(&e, SBX_E_NOT_RUNNING, "sandbox %s is not "
			    "running", op->id);
		else
			eng_runtime_err(&e, status, body, "start the exec");
		json_decref(body);
		eng_finish_err(op, &e);
		return;
	}
	if (!eng_run_recorded(op))
		exec_after_stream(op);   /* no record: the helper was killed */
}

static void
exec_start(struct eop *op)
{
	const struct sbx_http_cbs cbs = { .response = stream_response,
	    .body = stream_body, .done = stream_done, .arg = op };
	struct sbx_err err;

	evbuffer_drain(op->resp, evbuffer_get_length(op->resp));
	op->http = eng_exec_start_stream(op->e, xop(op)->rexec, &cbs, &err);
	if (op->http == NULL) {
		eng_fail_later(op, &err);
		return;
	}
	if (xop(op)->paused)
		sbx_http_req_pause(op->http);
}

static void
exec_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_exec *x = xop(op);
	struct sbx_err e;

	if (eng_exec_created_id(op, status, body, err, "create the exec",
	    x->rexec, sizeof(x->rexec), &e) < 0) {
		eng_finish_err(op, &e);
		return;
	}
	x->started_ms = sbx_mono_ms();
	if (eng_exec_clock(op, &e) < 0) {
		eng_finish_err(op, &e);
		return;
	}
	exec_start(op);
}

static void
exec_create(struct eop *op)
{
	struct eop_exec *x = xop(op);
	struct sbx_err e;

	if (eng_exec_create(op, x->has_stdin, x->env, x->cmd,
	    exec_created) < 0) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
	}
}

static void
exec_target_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;
	int r;

	if ((r = eng_inspect_running(op, status, body, err, &st)) < 0)
		return;
	if (op->kind->target != NULL && op->kind->target(op, r, &st))
		return;
	if (eng_finish_if_absent(op, r, &st))
		return;
	if (r == 0) {
		sbx_err_set(&e, SBX_E_NOT_RUNNING, SBX_MSG_NOT_RUNNING, op->id);
		eng_finish_err(op, &e);
		return;
	}
	exec_create(op);
}

static void
rexec_run(struct eop *op)
{
	char path[256];

	if (op->kind->flags & EK_NO_INSPECT) {
		exec_create(op);   /* the parent checked the container */
		return;
	}
	eng_inspect_path(op, path, sizeof(path));
	eng_call(op, "GET", path, NULL, exec_target_inspected);
}

const struct eng_transport eng_rexec_transport = {
	.name = "runtime exec",
	.run = rexec_run,
	.pump = src_pump,
};
