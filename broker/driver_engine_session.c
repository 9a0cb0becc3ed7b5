/*
 * driver_engine_session.c - the engine driver's sessions (sbx_driver.h
 * session ops, adr/0050): an exec whose stdin the caller streams
 * (`sbx-helper exec --framed`, the exec's row with EK_SESSION), a terminal
 * (`sbx-helper pty`, raw bytes) and one TCP connection to a port in the
 * sandbox (`sbx-helper connect`, raw bytes), each one stream on the
 * sandbox's agent channel (adr/0025, protocol 4: adr/0049). It builds the
 * invocation (eng_exec_build), its kind rows (pty, port) and the input,
 * close and control calls on the stream; the transport reaches it only
 * through the rows. It calls down into the exec file, the invocation's
 * core and the op lifecycle, and into broker/agent.h for the stream.
 */
#include "agent.h"
#include "driver_engine_int.h"

static void sess_exited(struct eop *op, int code);
static void sess_over_cap(struct eop *op);
static void port_cancel(struct eop *op);

/* A terminal (raw output on stream 1, the status of the agent's EXIT). */
static const struct eng_kind kind_pty = {
	.name = "terminal",
	.flags = EK_RUN | EK_SESSION,
	.fail = eng_finish_sink_error,
	.let_go = eng_src_detach,
	.fini = eng_run_fini,
	.cancel = eng_run_cancel,
	.pause = eng_run_pause,
	.exited = sess_exited,
	.over_cap = sess_over_cap,
};

/* A port connection: no kill handle (the agent's CANCEL ends the mode,
 * which holds no process but itself), no timeout, no cap. */
static const struct eng_kind kind_port = {
	.name = "port connection",
	.flags = EK_RUN | EK_SESSION | EK_ANON_START | EK_BULK_OUT,
	.fail = eng_finish_sink_error,
	.let_go = eng_src_detach,
	.fini = eng_run_fini,
	.cancel = port_cancel,
	.pause = eng_run_pause,
	.exited = sess_exited,
};

/* Every session's state: the invocation (an exec's frames for EXEC). */
struct eop_sess {
	struct eop_cmd c;
	enum sbx_session_kind skind;
	int input_closed;
};

static struct eop_sess *
sso(struct eop *op)
{
	return (struct eop_sess *)op;
}

static void
port_cancel(struct eop *op)
{
	eng_op_release(op);   /* agent_end: CANCEL, the agent ends the mode */
}

/* The output cap reached: the terminal's processes are killed by handle;
 * the stream's end reports the exit (truncated). */
static void
sess_over_cap(struct eop *op)
{
	eng_start_kill(op->e, op->id, op->cid, xop(op)->exec_id, NULL);
}

/* A pty or connect mode ended with status code. A failing mode says why
 * in its error line (its own stderr: the terminal's output is the pty);
 * only codes about the request are believed. */
static void
sess_exited(struct eop *op, int code)
{
	static const char *const believed[] = {
		SBX_E_PATH_OUTSIDE_WORK, SBX_E_NOT_FOUND, SBX_E_BAD_REQUEST,
		SBX_E_FORBIDDEN, SBX_E_PORT_CLOSED, NULL,
	};
	struct eop_exec *x = xop(op);
	struct sbx_exit ex;
	struct sbx_err e;
	char lcode[48], msg[256];
	size_t i;

	if (x->timer != NULL)
		event_del(x->timer);
	if (code != 0 && !x->truncated &&
	    eng_helper_line(op, lcode, sizeof(lcode), msg, sizeof(msg))) {
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper %s failed: %s",
		    op->kind->name, msg);
		for (i = 0; believed[i] != NULL; i++)
			if (strcmp(lcode, believed[i]) == 0)
				sbx_err_set(&e, believed[i], "%s", msg[0] != '\0' ?
				    msg : SBX_MSG_HELPER_REFUSED);
		eng_finish_err(op, &e);
		return;
	}
	memset(&ex, 0, sizeof(ex));
	ex.code = code & 0xff;
	ex.duration_ms = sbx_mono_ms() - x->started_ms;
	ex.truncated = x->truncated;
	if (code > 128 && code < 128 + 65)
		ex.signal = sigabbrev_np(code - 128);
	if (x->truncated && ex.signal == NULL)
		ex.signal = "KILL";
	if (x->sink.exit != NULL)
		x->sink.exit(x->sink.arg, &ex);
	eng_op_release(op);
}

/* 1 when t is a TERM value: [A-Za-z0-9._+-]{1,SBX_SESSION_TERM_MAX}. */
static int
term_ok(const char *t)
{
	size_t i;

	for (i = 0; t[i] != '\0'; i++)
		if (i >= SBX_SESSION_TERM_MAX ||
		    !((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
		    (t[i] >= '0' && t[i] <= '9') || strchr("._+-", t[i]) != NULL))
			return 0;
	return i > 0;
}

/* A PORT session: `sbx-helper connect --port P`, nothing else. */
static struct eop *
port_build(struct engine *e, const char *id, const struct sbx_session_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct eop *op;
	char num[16];

	if (req->port < 1 || req->port > 65535) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PORT_RANGE);
		return NULL;
	}
	if ((op = eng_helper_op(e, &kind_port, id, sizeof(struct eop_sess),
	    err)) == NULL)
		return NULL;
	snprintf(num, sizeof(num), "%d", req->port);
	xop(op)->sink = *sink;
	xop(op)->cap = INT64_MAX;
	if ((xop(op)->cmd = json_pack("[s,s,s,s]", SBX_HELPER_PATH, "connect",
	    "--port", num)) == NULL) {
		sbx_err_oom(err);
		eng_op_free(op);
		return NULL;
	}
	return op;
}

/* A PTY session: `sbx-helper pty --cols C --rows R --term T --id ...`. */
static struct eop *
pty_build(struct engine *e, const char *id, const struct sbx_session_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	const char *term = req->term != NULL ? req->term : SBX_SESSION_TERM_DEFAULT;
	char cols[16], rows[16];

	if (req->cols < 1 || req->cols > SBX_SESSION_SIZE_MAX ||
	    req->rows < 1 || req->rows > SBX_SESSION_SIZE_MAX) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PTY_SIZE,
		    SBX_SESSION_SIZE_MAX);
		return NULL;
	}
	if (!term_ok(term)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PTY_TERM,
		    SBX_SESSION_TERM_MAX);
		return NULL;
	}
	snprintf(cols, sizeof(cols), "%d", req->cols);
	snprintf(rows, sizeof(rows), "%d", req->rows);
	return eng_exec_build(e, &kind_pty, sizeof(struct eop_sess), id,
	    &req->exec, sink, "pty", json_pack("[s,s,s,s,s,s]", "--cols", cols,
	    "--rows", rows, "--term", term), EXB_ARGV_OPTIONAL | EXB_NO_DEFAULTS,
	    err);
}

struct sbx_op *
eng_session(struct sbx_driver *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op = NULL;

	if (eng_id_check(id, err) < 0)
		return NULL;
	if (req == NULL || sink == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "a session needs a request");
		return NULL;
	}
	if (!e->agent_on) {
		/* A runtime exec has no credit, resize or control pipe. */
		sbx_err_set(err, SBX_E_BAD_REQUEST, "sessions need the sandbox "
		    "agent (the broker runs with agent: false)");
		return NULL;
	}
	switch (req->kind) {
	case SBX_SESSION_EXEC:
		op = eng_exec_build(e, &eng_kind_exec_session,
		    sizeof(struct eop_sess), id, &req->exec, sink, "exec",
		    json_pack("[s]", "--framed"), 0, err);
		break;
	case SBX_SESSION_PTY:
		op = pty_build(e, id, req, sink, err);
		break;
	case SBX_SESSION_PORT:
		op = port_build(e, id, req, sink, err);
		break;
	default:
		sbx_err_set(err, SBX_E_BAD_REQUEST, "A session's kind must be "
		    "exec, pty or port.");
		return NULL;
	}
	if (op == NULL)
		return NULL;
	sso(op)->skind = req->kind;
	xop(op)->has_stdin = 1;
	if (req->kind != SBX_SESSION_PORT)
		xop(op)->open_flags = SBX_AGENT_OPEN_CTRL;
	eng_helper_run(op);
	return &op->base;
}

ssize_t
eng_session_write(struct sbx_driver *d, struct sbx_op *o, struct evbuffer *src,
    size_t max)
{
	struct eop *op = (struct eop *)o;
	struct eop_exec *x = xop(op);

	(void)d;
	if (op->dead || sso(op)->input_closed)
		return -1;
	if (x->ast == NULL)
		return 0;     /* not open yet, or its end is on the way */
	return sbx_agent_write_buffer(x->ast, src, max);
}

size_t
eng_session_room(struct sbx_driver *d, struct sbx_op *o)
{
	struct eop *op = (struct eop *)o;

	(void)d;
	if (op->dead || sso(op)->input_closed || xop(op)->ast == NULL)
		return 0;
	return sbx_agent_stdin_room(xop(op)->ast);
}

void
eng_session_close_input(struct sbx_driver *d, struct sbx_op *o)
{
	struct eop *op = (struct eop *)o;

	(void)d;
	/* A terminal has no end of input: the viewer sends ^D as a byte. */
	if (op->dead || sso(op)->skind == SBX_SESSION_PTY)
		return;
	if (sso(op)->input_closed)
		return;
	sso(op)->input_closed = 1;
	if (xop(op)->ast != NULL)
		sbx_agent_close_stdin(xop(op)->ast);
}

int
eng_session_control(struct sbx_driver *d, struct sbx_op *o,
    const struct sbx_session_ctl *c, struct sbx_err *err)
{
	struct eop *op = (struct eop *)o;
	enum sbx_session_kind k = sso(op)->skind;

	(void)d;
	if (c == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "no control message");
	if (c->kind == SBX_SESSION_RESIZE && k != SBX_SESSION_PTY)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Only a terminal can "
		    "be resized.");
	if (c->kind == SBX_SESSION_SIGNAL && k == SBX_SESSION_PORT)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A port connection "
		    "takes no signal.");
	if (c->kind == SBX_SESSION_RESIZE && (c->cols < 1 || c->rows < 1 ||
	    c->cols > SBX_SESSION_SIZE_MAX || c->rows > SBX_SESSION_SIZE_MAX))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PTY_SIZE,
		    SBX_SESSION_SIZE_MAX);
	if (c->kind == SBX_SESSION_SIGNAL && (c->signo < 1 || c->signo > 64))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A signal must be 1 "
		    "to 64.");
	if (c->kind != SBX_SESSION_RESIZE && c->kind != SBX_SESSION_SIGNAL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Unknown control "
		    "message.");
	if (op->dead || xop(op)->ast == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The session has "
		    "ended.");
	if (sbx_agent_control(xop(op)->ast, c->kind == SBX_SESSION_RESIZE ?
	    SBX_AGENT_CTRL_RESIZE : SBX_AGENT_CTRL_SIGNAL,
	    c->kind == SBX_SESSION_RESIZE ? (uint32_t)c->cols :
	    (uint32_t)c->signo, c->kind == SBX_SESSION_RESIZE ?
	    (uint32_t)c->rows : 0) < 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The session has "
		    "ended.");
	return 0;
}
