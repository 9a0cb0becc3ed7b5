/*
 * driver_engine_exec.c - the engine driver's exec: `sbx-helper exec
 * --framed` (adr/0002, adr/0007): its argv, the helper's frames inside the
 * transport's stdout (untrusted, checked strictly), the exit and error
 * records, and its kind row (eng_kind_exec). It calls down into the
 * invocation's core (driver_engine_run.c), the runtime call layer and the
 * op lifecycle; the transports reach it only through its row (output,
 * recorded, exited, over_cap).
 */
#include "driver_engine_int.h"
#include "sbx_helper_frame.h"

static void cmd_exited(struct eop *op, int code);
static void exec_over_cap(struct eop *op);
static void exec_output(struct eop *op, int stream,
    const unsigned char *buf, size_t len);
static int exec_recorded(struct eop *op);

/*
 * One exec through this file: eng_exec (at the end) builds sbx-helper's
 * argv and calls eng_helper_run, which hands the invocation to its
 * transport through e->via: the agent channel (driver_engine_agent.c, the
 * default) or a runtime exec (driver_engine_rexec.c, agent: false). What
 * comes back enters here again through the row: the transport's stdout
 * through exec_output to eng_helper_frames, each chunk through eng_deliver
 * to the sink, the end through exec_recorded (the helper's exit record) or
 * cmd_exited.
 */

/* The exec (EK_FRAMED): its sink hears start, output, exit or error. */
const struct eng_kind eng_kind_exec = {
	.name = "exec",
	.flags = EK_RUN | EK_FRAMED,
	.fail = eng_finish_sink_error,
	.let_go = eng_src_detach,
	.fini = eng_run_fini,
	.cancel = eng_run_cancel,
	.pause = eng_run_pause,
	.exited = cmd_exited,
	.output = exec_output,
	.recorded = exec_recorded,
	.over_cap = exec_over_cap,
};

/* The exec of a session (driver_engine_session.c): the same, with its
 * stdin the caller's (EK_SESSION). */
const struct eng_kind eng_kind_exec_session = {
	.name = "exec session",
	.flags = EK_RUN | EK_FRAMED | EK_SESSION,
	.fail = eng_finish_sink_error,
	.let_go = eng_src_detach,
	.fini = eng_run_fini,
	.cancel = eng_run_cancel,
	.pause = eng_run_pause,
	.exited = cmd_exited,
	.output = exec_output,
	.recorded = exec_recorded,
	.over_cap = exec_over_cap,
};

/* Keep reading (and dropping) until the killed exec's stream ends, so the
 * runtime records its real exit status; closing early makes Docker 20.10
 * report 126 ("attach failed"). */
static void
exec_over_cap(struct eop *op)
{
	eng_start_kill(op->e, op->id, op->cid, xop(op)->exec_id, NULL);
}

/* ---------- the helper's frames, the exit record ---------- */

/* An exec whose helper could not start the command (status 125): the
 * helper's line says why; only codes about the request are believed. */
static int
exec_refused(struct eop *op, struct sbx_err *e)
{
	static const char *const believed[] = {
		SBX_E_PATH_OUTSIDE_WORK, SBX_E_NOT_FOUND, SBX_E_BAD_REQUEST,
		SBX_E_FORBIDDEN, NULL,
	};
	char lcode[48], msg[256];
	size_t i;

	if (!eng_helper_line(op, lcode, sizeof(lcode), msg, sizeof(msg)))
		return 0;
	for (i = 0; believed[i] != NULL; i++)
		if (strcmp(lcode, believed[i]) == 0) {
			sbx_err_set(e, believed[i], "%s", msg[0] != '\0' ? msg :
			    SBX_MSG_HELPER_REFUSED);
			return 1;
		}
	return 0;
}

/* A framed exec ended with the helper's exit record (and maybe its error
 * record): no exec inspect needed. */
static void
exec_ended(struct eop *op)
{
	struct eop_exec *x = xop(op);
	struct eop_cmd *cm = cmo(op);
	static const char *const believed[] = {
		SBX_E_PATH_OUTSIDE_WORK, SBX_E_NOT_FOUND, SBX_E_BAD_REQUEST,
		SBX_E_FORBIDDEN, SBX_E_CANCELLED, NULL,
	};
	struct sbx_exit ex;
	struct sbx_err e;
	char line[300];
	int n;
	size_t i;

	if (x->timer != NULL)
		event_del(x->timer);
	if (cm->xtimeout && !x->truncated) {
		sbx_err_set(&e, SBX_E_TIMEOUT, SBX_MSG_EXEC_TIMEOUT,
		    x->timeout_ms);
		eng_finish_err(op, &e);
		return;
	}
	if (cm->got_herr && !x->truncated &&
	    cm->xhow == SBX_HELPER_EXIT_HOW_EXITED &&
	    cm->xcode == SBX_HELPER_EXEC_FAILED) {
		/* The command never ran: the helper's code if it is about the
		 * request, else the runtime side failed. */
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper could not start the "
		    "command: %s", cm->herr_msg);
		for (i = 0; believed[i] != NULL; i++)
			if (strcmp(cm->herr_code, believed[i]) == 0)
				sbx_err_set(&e, believed[i], "%s", cm->herr_msg[0] !=
				    '\0' ? cm->herr_msg : SBX_MSG_HELPER_REFUSED);
		eng_finish_err(op, &e);
		return;
	}
	if (cm->got_herr && cm->xhow == SBX_HELPER_EXIT_HOW_EXITED &&
	    (cm->xcode == SBX_HELPER_EXEC_NOEXEC ||
	    cm->xcode == SBX_HELPER_EXEC_NOTFOUND)) {
		/* Like a shell: the reason on stderr, then the status. */
		n = snprintf(line, sizeof(line), "sbx-helper: %s\n", cm->herr_msg);
		if (n > 0 && (size_t)n < sizeof(line)) {
			eng_op_enter(op);
			eng_deliver(op, 2, (const unsigned char *)line, (size_t)n);
			if (!eng_op_leave(op))
				return;
		}
	}
	memset(&ex, 0, sizeof(ex));
	ex.duration_ms = sbx_mono_ms() - x->started_ms;
	ex.truncated = x->truncated;
	if (cm->xhow == SBX_HELPER_EXIT_HOW_SIGNALED) {
		ex.code = 128 + cm->xsig;
		ex.signal = sigabbrev_np(cm->xsig);
	} else
		ex.code = cm->xcode;
	if (x->truncated && ex.signal == NULL)
		ex.signal = "KILL";
	if (x->sink.exit != NULL)
		x->sink.exit(x->sink.arg, &ex);
	eng_op_release(op);
}

/* The helper's own stderr in a framed exec (the command's is framed in
 * stdout): a tail kept for its error line when its frames never came. */
static void
keep_errtail(struct eop *op, const unsigned char *buf, size_t len)
{
	struct eop_exec *x = xop(op);
	if (evbuffer_get_length(x->errtail) + len > ERRTAIL_MAX)
		evbuffer_drain(x->errtail, evbuffer_get_length(x->errtail));
	if (len <= ERRTAIL_MAX)
		evbuffer_add(x->errtail, buf, len);
}

/* The helper broke its frame protocol: what it says can no longer be
 * told apart from what the command wrote, so the exec ends here. */
static void
helper_protocol_error(struct eop *op, const char *what)
{
	struct sbx_err e;

	sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper broke its output protocol "
	    "(%s); the exec was killed", what);
	xop(op)->streaming = 0;
	eng_start_kill(op->e, op->id, op->cid, xop(op)->exec_id, NULL);
	eng_finish_err(op, &e);
}

/* The exit record (sbx_helper_proto.h): -1 when malformed. */
static int
exit_record(struct eop *op)
{
	struct eop_cmd *cm = cmo(op);
	struct sbx_helper_exit x;

	if (sbx_helper_exit_decode(cm->hrec, &x) == -1)
		return -1;
	cm->xhow = x.how;
	cm->xcode = x.code;
	cm->xsig = x.sig;
	cm->xtimeout = x.timed_out;
	cm->got_exit = 1;
	return 0;
}

/* The error record: {"sbx_helper":2,"error":{"code":C,"message":M}} with
 * C of [a-z_]; -1 when malformed. */
static int
error_record(struct eop *op)
{
	struct eop_cmd *cm = cmo(op);
	json_t *line, *err;
	const char *code, *msg;
	size_t i;
	int rc = -1;

	line = json_loadb((const char *)cm->hrec, cm->hrec_len, 0, NULL);
	err = json_object_get(line, "error");
	code = json_string_value(json_object_get(err, "code"));
	msg = json_string_value(json_object_get(err, "message"));
	if (json_integer_value(json_object_get(line, "sbx_helper")) !=
	    SBX_HELPER_PROTO || code == NULL || msg == NULL || code[0] == '\0' ||
	    strlen(code) >= sizeof(cm->herr_code))
		goto done;
	for (i = 0; code[i] != '\0'; i++)
		if (!(code[i] >= 'a' && code[i] <= 'z') && code[i] != '_')
			goto done;
	snprintf(cm->herr_code, sizeof(cm->herr_code), "%s", code);
	snprintf(cm->herr_msg, sizeof(cm->herr_msg), "%s", msg);
	cm->got_herr = 1;
	rc = 0;
done:
	json_decref(line);
	return rc;
}

/* Decodes sbx-helper's frames from the runtime's stdout stream of a framed
 * exec. Frames may be split anywhere, across runtime frames and reads. */
void
eng_helper_frames(struct eop *op, const unsigned char *buf, size_t len)
{
	struct eop_cmd *cm = cmo(op);
	const unsigned char *h = cm->hhdr;
	uint32_t plen;
	size_t n;
	int ok;

	while (len > 0 && !op->dead && xop(op)->streaming) {
		if (cm->htype == 0) {
			if (!eng_hdr_fill(cm->hhdr, &cm->hhdr_len,
			    SBX_HELPER_FRAME_HDR, &buf, &len))
				break;
			if (cm->got_exit) {
				helper_protocol_error(op, "a frame after the exit record");
				return;
			}
			/* proto/sbx_helper_frame.h, the helper's own codec */
			ok = sbx_helper_frame_check(h, &plen);
			if (ok == SBX_HELPER_FRAME_BAD_HEADER) {
				helper_protocol_error(op, "bad frame header");
				return;
			}
			if (ok < 0 || (ok == SBX_HELPER_FRAME_ERROR && cm->got_herr)) {
				helper_protocol_error(op, "bad frame type or length");
				return;
			}
			cm->htype = h[0];
			cm->hleft = plen;
			cm->hrec_len = 0;
			continue;
		}
		n = cm->hleft;
		if (n > len)
			n = len;
		if (cm->htype == SBX_HELPER_FRAME_STDOUT ||
		    cm->htype == SBX_HELPER_FRAME_STDERR) {
			if (n > STREAM_CHUNK)
				n = STREAM_CHUNK;
			eng_deliver(op, cm->htype, buf, n);
		} else {
			memcpy(cm->hrec + cm->hrec_len, buf, n);
			cm->hrec_len += n;
		}
		cm->hleft -= (uint32_t)n;
		buf += n;
		len -= n;
		if (op->dead)
			return;
		if (cm->hleft > 0)
			continue;
		if ((cm->htype == SBX_HELPER_FRAME_EXIT && exit_record(op) < 0) ||
		    (cm->htype == SBX_HELPER_FRAME_ERROR && error_record(op) < 0)) {
			helper_protocol_error(op, "malformed record");
			return;
		}
		cm->htype = 0;
	}
}


/* The exec's row: 1 and op ended when the stream brought the exit record. */
static int
exec_recorded(struct eop *op)
{
	if (!cmo(op)->got_exit)
		return 0;
	exec_ended(op);
	return 1;
}

/* What the transport read: stdout holds the helper's frames, stderr only
 * the helper's own words. */
static void
exec_output(struct eop *op, int stream, const unsigned char *buf, size_t len)
{
	if (stream == 1)
		eng_helper_frames(op, buf, len);
	else if (stream == 2)
		keep_errtail(op, buf, len);
}

/* An exec without an exit record ended with exit status code (the helper
 * was killed, or it refused the command: 125). */
static void
cmd_exited(struct eop *op, int code)
{
	struct eop_exec *x = xop(op);
	struct sbx_exit ex;
	struct sbx_err e;

	memset(&ex, 0, sizeof(ex));
	ex.code = code & 0xff;
	ex.duration_ms = sbx_mono_ms() - x->started_ms;
	ex.truncated = x->truncated;
	/* The helper exits 128+n when signal n ended the command. */
	if (code > 128 && code < 128 + 32)
		ex.signal = sigabbrev_np(code - 128);
	if (x->truncated && ex.signal == NULL)
		ex.signal = "KILL";
	if (!x->truncated && code == 125 && exec_refused(op, &e)) {
		eng_finish_err(op, &e);
		return;
	}
	if (x->sink.exit != NULL)
		x->sink.exit(x->sink.arg, &ex);
	eng_op_release(op);
}

struct eop *
eng_exec_build(struct engine *e, const struct eng_kind *kind, size_t size,
    const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, const char *mode, json_t *opts,
    unsigned flags, struct sbx_err *err)
{
	struct eop *op = NULL;
	const char *const *p;
	const char *cwd;
	int64_t timeout, cap;
	char num[32];
	int no_argv;
	size_t i;

	if (eng_id_check(id, err) < 0)
		goto out;
	no_argv = req != NULL && (req->argv == NULL || req->argv[0] == NULL) &&
	    (flags & EXB_ARGV_OPTIONAL);
	if (req == NULL || sink == NULL || (!no_argv && (req->argv == NULL ||
	    req->argv[0] == NULL || req->argv[0][0] == '\0'))) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "exec needs a non-empty argv");
		goto out;
	}
	cwd = req->cwd != NULL ? req->cwd : SBX_WORK_DIR;
	if (eng_path_check(cwd, err) < 0)
		goto out;
	if (req->timeout_ms < 0 || req->timeout_ms > e->timeout.ceiling) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "timeout_ms must be between "
		    "0 and %" PRId64, e->timeout.ceiling);
		goto out;
	}
	if (req->output_cap < 0 || req->output_cap > e->output_cap) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "output cap must be between "
		    "0 and %" PRId64 " bytes", e->output_cap);
		goto out;
	}
	for (p = req->env; p != NULL && *p != NULL; p++) {
		if (strchr(*p, '=') == NULL || **p == '=') {
			sbx_err_set(err, SBX_E_BAD_REQUEST,
			    "env entries must be NAME=value");
			goto out;
		}
	}
	timeout = req->timeout_ms > 0 ? req->timeout_ms :
	    (flags & EXB_NO_DEFAULTS) ? 0 : e->timeout.def;
	cap = req->output_cap > 0 ? req->output_cap :
	    (flags & EXB_NO_DEFAULTS) ? INT64_MAX : e->output_cap;
	if ((op = eng_helper_op(e, kind, id, size, err)) == NULL)
		goto out;
	xop(op)->sink = *sink;
	xop(op)->timeout_ms = timeout;
	xop(op)->cap = cap;
	xop(op)->cmd = eng_helper_cmd(mode);
	for (i = 0; i < json_array_size(opts); i++)
		json_array_append(xop(op)->cmd, json_array_get(opts, i));
	json_array_append_new(xop(op)->cmd, json_string("--id"));
	json_array_append_new(xop(op)->cmd, json_string(xop(op)->exec_id));
	if (timeout > 0) {
		snprintf(num, sizeof(num), "%" PRId64, timeout + HELPER_GRACE_MS);
		json_array_append_new(xop(op)->cmd, json_string("--timeout-ms"));
		json_array_append_new(xop(op)->cmd, json_string(num));
	}
	json_array_append_new(xop(op)->cmd, json_string("--cwd"));
	json_array_append_new(xop(op)->cmd, json_string(cwd));
	json_array_append_new(xop(op)->cmd, json_string("--"));
	for (p = no_argv ? NULL : req->argv; p != NULL && *p != NULL; p++)
		if (json_array_append_new(xop(op)->cmd, json_string(*p)) < 0)
			goto bad;
	if (req->env != NULL) {
		xop(op)->env = json_array();
		for (p = req->env; *p != NULL; p++)
			if (json_array_append_new(xop(op)->env, json_string(*p)) < 0)
				goto bad;
	}
	json_decref(opts);
	return op;
bad:
	/* json_string() refuses what is not UTF-8. */
	sbx_err_set(err, SBX_E_BAD_REQUEST, "argv and env must be valid UTF-8");
	eng_op_free(op);
	op = NULL;
out:
	json_decref(opts);
	return op;
}

struct sbx_op *
eng_exec(struct sbx_driver *d, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct eop *op;

	if ((op = eng_exec_build((struct engine *)d, &eng_kind_exec,
	    sizeof(struct eop_cmd), id, req, sink, "exec",
	    json_pack("[s]", "--framed"), 0, err)) == NULL)
		return NULL;
	if (req->stdin_data != NULL) {
		xop(op)->has_stdin = 1;
		if ((xop(op)->stdin_buf = evbuffer_new()) == NULL ||
		    evbuffer_add(xop(op)->stdin_buf, req->stdin_data, req->stdin_len) < 0) {
			sbx_err_oom(err);
			eng_op_free(op);
			return NULL;
		}
	}
	eng_helper_run(op);
	return &op->base;
}
