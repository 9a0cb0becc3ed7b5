/* driver_engine_run.c - the engine driver's exec and its one sbx-helper invocation: the seam to the transport (agent channel or runtime exec), output, exit, kill, and sbx-helper exec --framed's frames (adr/0002, adr/0007, adr/0021). */
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "driver_engine_int.h"
#include "sbx_agent.h"
#include "sbx_helper_frame.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_usage.h"

/* A kill the runtime could not take (unreachable: a restarting daemon) is
 * tried again once a second this many times, so an exec cut off by the
 * runtime's crash does not run on until its timeout (test_faults.py). */
#define KILL_RETRIES 60

static void exec_after_kill(struct eop *op);

/*
 * One exec through this file: eng_exec (at the end) builds sbx-helper's
 * argv and calls eng_helper_run, which hands the invocation to its
 * transport: the agent channel (driver_engine_agent.c, the default) or a
 * runtime exec (driver_engine_rexec.c, agent: false). What comes back
 * enters here again: the exec's stdout through eng_helper_frames, each
 * chunk through eng_deliver to the sink, the end through eng_exec_recorded
 * (the helper's exit record) or cmd_exited.
 */

/* ---------- helper execs: exec, read, write, list, kill ---------- */

json_t *
eng_helper_cmd(const char *mode)
{
	return json_pack("[s,s]", SBX_HELPER_PATH, mode);
}

static void
new_exec_id(char *buf, size_t sz)
{
	unsigned char r[12];
	char hex[sizeof(r) * 2 + 1];

	randombytes_buf(r, sizeof(r));
	sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
	snprintf(buf, sz, "x%s", hex);
}

/* Frees what a helper op holds (its kind's part included). */
static void
exec_fini(struct eop *op)
{
	struct eop_exec *x = xop(op);

	eng_agent_stream_end(op);
	if (x->kill != NULL)
		xop(x->kill)->parent = NULL;  /* the kill runs on alone */
	if (x->parent != NULL)
		xop(x->parent)->kill = NULL;
	if (x->timer != NULL)
		event_free(x->timer);
	if (x->ftimer != NULL)
		event_free(x->ftimer);
	if (x->stdin_buf != NULL)
		evbuffer_free(x->stdin_buf);
	if (x->out != NULL)
		evbuffer_free(x->out);
	if (x->errtail != NULL)
		evbuffer_free(x->errtail);
	json_decref(x->cmd);
	json_decref(x->env);
	if (op->kind == OP_LIST)
		free(lso(op)->ents);
	if (op->kind == OP_KILL && kio(op)->retry != NULL)
		event_free(kio(op)->retry);
}

static void
kill_exited(struct eop *k, int code)
{
	struct sbx_err e;

	if (code != 0) {
		eng_helper_error(k, code, &e);
		eng_kill_ended(k, &e);
	} else {
		eng_kill_ended(k, NULL);
	}
}

/* A kill op of sandbox id for the helper exec exec_id in container cid. */
static struct eop *
kill_op_new(struct engine *e, const char *id, const char *cid,
    const char *exec_id, struct sbx_err *err)
{
	struct eop *k;

	if ((k = eng_op_new(e, OP_KILL, id, sizeof(struct eop_kill),
	    err)) == NULL)
		return NULL;
	k->fini = exec_fini;
	snprintf(k->cid, sizeof(k->cid), "%s", cid);
	xop(k)->cmd = eng_helper_cmd("kill");
	json_array_append_new(xop(k)->cmd, json_string(exec_id));
	xop(k)->timeout_ms = KILL_TIMEOUT_MS;
	xop(k)->cap = ERRTAIL_MAX;
	xop(k)->exited = kill_exited;
	return k;
}

int
eng_start_kill(struct engine *e, const char *id, const char *cid,
    const char *exec_id, struct eop *parent)
{
	struct eop *k;
	struct sbx_err err;

	if ((k = kill_op_new(e, id, cid, exec_id, &err)) == NULL) {
		if (parent != NULL)
			xop(parent)->kerr = err;
		return -1;
	}
	xop(k)->parent = parent;
	if (parent != NULL) {
		xop(parent)->kill = k;
		xop(parent)->killing = 1;
	}
	eng_helper_run(k);
	return 0;
}

/* Stops talking to the runtime's stream and kills the exec's processes;
 * op continues in eng_kill_ended() -> exec_after_kill(). */
static void
kill_exec(struct eop *op)
{
	struct eop_exec *x = xop(op);
	sbx_http_req_cancel(op->http);
	op->http = NULL;
	x->streaming = 0;
	if (x->timer != NULL)
		event_del(x->timer);
	if (eng_start_kill(op->e, op->id, op->cid, x->exec_id, op) < 0)
		exec_after_kill(op);
}

/* The timeout's kill has ended: report the timeout. */
static void
exec_after_kill(struct eop *op)
{
	struct sbx_err e;

	sbx_err_set(&e, SBX_E_TIMEOUT, SBX_MSG_EXEC_TIMEOUT,
	    xop(op)->timeout_ms);
	eng_finish_err(op, &e);
}

static void
kill_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	eng_helper_run(arg);
}

/* Queues a fresh kill op like k (no parent: whoever waited has its answer)
 * for a second from now. Out of memory: the helper's backstop remains. */
static void
kill_later(struct eop *k)
{
	struct timeval tv = { 1, 0 };
	struct sbx_err err;
	struct eop *n;

	if ((n = kill_op_new(k->e, k->id, k->cid, "", &err)) == NULL)
		return;
	json_decref(xop(n)->cmd);
	xop(n)->cmd = json_deep_copy(xop(k)->cmd);
	kio(n)->retries = kio(k)->retries + 1;
	kio(n)->retry = evtimer_new(k->e->base.base, kill_retry_cb, n);
	if (xop(n)->cmd == NULL || kio(n)->retry == NULL ||
	    event_add(kio(n)->retry, &tv) < 0)
		eng_op_release(n);
}

void
eng_kill_ended(struct eop *k, const struct sbx_err *err)
{
	struct eop *p = xop(k)->parent;

	if (err != NULL && strcmp(err->code, SBX_E_RUNTIME_UNAVAILABLE) == 0 &&
	    kio(k)->retries < KILL_RETRIES)
		kill_later(k);

	if (p != NULL) {
		xop(k)->parent = NULL;
		xop(p)->kill = NULL;
		xop(p)->killing = 0;
		if (err != NULL)
			xop(p)->kerr = *err;
	}
	eng_op_release(k);
	if (p != NULL)
		exec_after_kill(p);
}

int
eng_helper_failed(struct eop *op, int code)
{
	struct sbx_err e;

	if (code == 0)
		return 0;
	eng_helper_error(op, code, &e);
	eng_finish_err(op, &e);
	return 1;
}

void
eng_exec_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;

	(void)fd;
	(void)what;
	if (op->kind == OP_KILL) {
		struct sbx_err e;

		sbx_err_set(&e, SBX_E_TIMEOUT, SBX_MSG_KILL_UNFINISHED);
		eng_kill_ended(op, &e);
		return;
	}
	if (xop(op)->killing)
		return;
	xop(op)->timed_out = 1;
	kill_exec(op);
}

int
eng_exec_clock(struct eop *op, struct sbx_err *e)
{
	struct eop_exec *x = xop(op);
	struct timeval tv;

	if (x->ftimer != NULL) {
		eng_file_progress(op);
		return 0;
	}
	if (x->timeout_ms <= 0)
		return 0;
	/* The driver's timer is authoritative (the helper's trails). */
	x->timer = evtimer_new(op->e->base.base, eng_exec_timer_cb, op);
	tv.tv_sec = x->timeout_ms / 1000;
	tv.tv_usec = (x->timeout_ms % 1000) * 1000;
	if (x->timer == NULL || event_add(x->timer, &tv) < 0)
		return sbx_err_set(e, SBX_E_INTERNAL, "cannot arm the exec timer");
	return 0;
}

/* The helper's error line, {"sbx_helper":1,"error":{"code":..,"message":..}},
 * the last line of stderr. Returns 1 with code and msg filled, else 0. */
int
eng_helper_line(struct eop *op, char *code, size_t csz, char *msg, size_t msz)
{
	struct eop_exec *x = xop(op);
	const char *nl, *start, *text;
	json_t *line, *err;
	size_t n;
	int ok = 0;

	n = x->errtail != NULL ? evbuffer_get_length(x->errtail) : 0;
	if (n == 0)
		return 0;
	text = (const char *)evbuffer_pullup(x->errtail, -1);
	start = text;
	while ((nl = memchr(start, '\n', n - (size_t)(start - text))) != NULL &&
	    (size_t)(nl + 1 - text) < n)
		start = nl + 1;
	line = json_loadb(start, n - (size_t)(start - text),
	    JSON_DISABLE_EOF_CHECK, NULL);
	err = json_object_get(line, "error");
	if (json_integer_value(json_object_get(line, "sbx_helper")) ==
	    SBX_HELPER_PROTO &&
	    json_string_value(json_object_get(err, "code")) != NULL) {
		snprintf(code, csz, "%s", eng_jstr(err, "code"));
		snprintf(msg, msz, "%s", eng_jstr(err, "message"));
		ok = 1;
	}
	json_decref(line);
	return ok;
}

/* The error of a helper mode that exited with status code: the code comes
 * from the exit status (sbx_helper_proto.h), the sentence from the helper's
 * line when that line agrees. */
void
eng_helper_error(struct eop *op, int code, struct sbx_err *e)
{
	static const struct { int exit; const char *code, *say; } map[] = {
		{ 1, SBX_E_INTERNAL, "sbx-helper failed inside the sandbox" },
		{ 2, SBX_E_BAD_REQUEST, "not a regular file or directory, or a "
		    "bad mode" },
		{ 3, SBX_E_PATH_OUTSIDE_WORK, "the path leaves /work (through a "
		    "symlink or mount) or breaks the path rules" },
		{ 4, SBX_E_NOT_FOUND, "no such file or directory" },
		{ 5, SBX_E_TOO_LARGE, "the file is larger than the configured cap" },
		{ 6, SBX_E_FORBIDDEN, "permission denied for the sandbox user" },
		{ 7, SBX_E_CANCELLED, "cancelled" },
	};
	const char *ecode = SBX_E_RUNTIME, *say = NULL;
	char lcode[48], msg[256];
	size_t i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].exit == code) {
			ecode = map[i].code;
			say = map[i].say;
		}
	/* Podman sometimes loses the helper's stderr line (adr/0002); the
	 * exit status alone names the code. */
	if (eng_helper_line(op, lcode, sizeof(lcode), msg, sizeof(msg)) &&
	    strcmp(lcode, ecode) == 0 && msg[0] != '\0')
		sbx_err_set(e, ecode, "%s", msg);
	else if (say != NULL)
		sbx_err_set(e, ecode, "%s", say);
	else
		sbx_err_set(e, ecode, "sbx-helper failed with exit status %d", code);
}


void
eng_deliver(struct eop *op, int stream, const unsigned char *buf, size_t len)
{
	struct eop_exec *x = xop(op);
	size_t room;

	if (stream != 1 && stream != 2)
		return;  /* 0 is stdin echo: never sent with Tty false */
	if (x->ftimer != NULL)
		eng_file_progress(op);
	if (stream == 2 && op->kind != OP_EXEC) {
		/* stderr of a helper mode: only its error line matters */
		if (evbuffer_get_length(x->errtail) + len <= ERRTAIL_MAX)
			evbuffer_add(x->errtail, buf, len);
		return;
	}
	if (op->kind == OP_LIST || op->kind == OP_KILL || op->kind == OP_WRITE ||
	    op->kind == OP_RECOVER || op->kind == OP_USAGE) {
		if (evbuffer_get_length(x->out) + len > (size_t)x->cap) {
			x->truncated = 1;
			return;
		}
		evbuffer_add(x->out, buf, len);
		if (op->kind == OP_LIST)
			eng_list_lines(op);   /* parsed as it comes: never one big parse */
		return;
	}
	room = (size_t)(x->cap - x->delivered);
	if (len > room)
		len = room;
	if (len > 0) {
		x->delivered += (int64_t)len;
		if (x->sink.output != NULL)
			x->sink.output(x->sink.arg, stream, buf, len);
		if (op->dead)
			return;
	}
	if (x->delivered < x->cap || x->truncated)
		return;
	x->truncated = 1;
	if (op->kind == OP_EXEC) {
		/* Keep reading (and dropping) until the killed exec's stream
		 * ends, so the runtime records its real exit status; closing
		 * early makes Docker 20.10 report 126 ("attach failed"). */
		eng_start_kill(op->e, op->id, op->cid, x->exec_id, NULL);
	} else if (op->kind == OP_READ) {
		struct sbx_err e;

		sbx_err_set(&e, SBX_E_TOO_LARGE, SBX_MSG_FILE_TOO_LARGE,
		    (long long)(x->cap - 1));
		eng_start_kill(op->e, op->id, op->cid, x->exec_id, NULL);
		eng_finish_err(op, &e);
	}
}

void
eng_helper_run(struct eop *op)
{
	struct eop_exec *x = xop(op);

	if (x->errtail == NULL)
		x->errtail = evbuffer_new();
	if (x->out == NULL)
		x->out = evbuffer_new();
	if (op->resp == NULL)
		op->resp = evbuffer_new();
	if (x->exec_id[0] == '\0')
		new_exec_id(x->exec_id, sizeof(x->exec_id));
	/* The usage walk answers the container's status too, running or not
	 * (adr/0017), so it keeps its runtime exec after an inspect. */
	if (op->e->agent_on && op->kind != OP_USAGE)
		(void)eng_agent_run(op);   /* adr/0025 */
	else
		eng_rexec_run(op);         /* agent: false */
}

/* A helper exec op for sandbox id with mode and its arguments. */
struct eop *
eng_helper_op(struct engine *e, enum op_kind kind, const char *id,
    size_t size, struct sbx_err *err)
{
	struct eop *op;

	if ((op = eng_op_new(e, kind, id, size, err)) == NULL)
		return NULL;
	op->fini = exec_fini;
	xop(op)->errtail = evbuffer_new();
	xop(op)->out = evbuffer_new();
	op->resp = evbuffer_new();
	if (xop(op)->errtail == NULL || xop(op)->out == NULL || op->resp == NULL) {
		eng_op_free(op);
		sbx_err_oom(err);
		return NULL;
	}
	new_exec_id(xop(op)->exec_id, sizeof(xop(op)->exec_id));
	return op;
}

/* ---------- the bytes of an invocation: the runtime's attach frames ---------- */

/* A frame header split anywhere across reads (the runtime's stream frames,
 * sbx-helper's frames): see driver_engine_int.h. */
int
eng_hdr_fill(unsigned char *hdr, size_t *have, size_t want,
    const unsigned char **buf, size_t *len)
{
	sbx_agent_take(hdr, have, want, buf, len);
	if (*have < want)
		return 0;
	*have = 0;
	return 1;
}

const unsigned char *
eng_demux_next(struct eng_demux *d, const unsigned char **buf, size_t *len,
    size_t max, size_t *n, int *stream)
{
	const unsigned char *piece;

	while (d->left == 0) {
		if (!eng_hdr_fill(d->hdr, &d->hdr_len, sizeof(d->hdr), buf, len))
			return NULL;
		d->stream = d->hdr[0];
		d->left = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16 |
		    (uint32_t)d->hdr[6] << 8 | d->hdr[7];
	}
	if (*len == 0)
		return NULL;
	*n = d->left < *len ? d->left : *len;
	if (*n > max)
		*n = max;
	d->left -= (uint32_t)*n;
	*stream = d->stream;
	piece = *buf;
	*buf += *n;
	*len -= *n;
	return piece;
}

/* ---------- exec: argv, the helper's frames, the exit record ---------- */

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
void
eng_exec_recorded(struct eop *op)
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
				sbx_err_set(&e, believed[i], "%s",
				    cm->herr_msg[0] != '\0' ? cm->herr_msg :
				    SBX_MSG_HELPER_REFUSED);
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
void
eng_keep_errtail(struct eop *op, const unsigned char *buf, size_t len)
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

int
eng_exec_got_exit(struct eop *op)
{
	return op->kind == OP_EXEC && cmo(op)->got_exit;
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

struct sbx_op *
eng_exec(struct sbx_driver *d, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op = NULL;
	const char *const *p;
	const char *cwd;
	int64_t timeout, cap;
	char num[32];

	if (eng_id_check(id, err) < 0)
		return NULL;
	if (req == NULL || sink == NULL || req->argv == NULL ||
	    req->argv[0] == NULL || req->argv[0][0] == '\0') {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "exec needs a non-empty argv");
		return NULL;
	}
	cwd = req->cwd != NULL ? req->cwd : SBX_WORK_DIR;
	if (eng_path_check(cwd, err) < 0)
		return NULL;
	if (req->timeout_ms < 0 || req->timeout_ms > e->timeout.ceiling) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "timeout_ms must be between "
		    "0 and %" PRId64, e->timeout.ceiling);
		return NULL;
	}
	if (req->output_cap < 0 || req->output_cap > e->output_cap) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "output cap must be between "
		    "0 and %" PRId64 " bytes", e->output_cap);
		return NULL;
	}
	for (p = req->env; p != NULL && *p != NULL; p++) {
		if (strchr(*p, '=') == NULL || **p == '=') {
			sbx_err_set(err, SBX_E_BAD_REQUEST,
			    "env entries must be NAME=value");
			return NULL;
		}
	}
	timeout = req->timeout_ms > 0 ? req->timeout_ms : e->timeout.def;
	cap = req->output_cap > 0 ? req->output_cap : e->output_cap;
	if ((op = eng_helper_op(e, OP_EXEC, id, sizeof(struct eop_cmd),
	    err)) == NULL)
		return NULL;
	xop(op)->sink = *sink;
	xop(op)->exited = cmd_exited;
	xop(op)->timeout_ms = timeout;
	xop(op)->cap = cap;
	xop(op)->cmd = eng_helper_cmd("exec");
	snprintf(num, sizeof(num), "%" PRId64, timeout + HELPER_GRACE_MS);
	json_array_append_new(xop(op)->cmd, json_string("--framed"));
	json_array_append_new(xop(op)->cmd, json_string("--id"));
	json_array_append_new(xop(op)->cmd, json_string(xop(op)->exec_id));
	json_array_append_new(xop(op)->cmd, json_string("--timeout-ms"));
	json_array_append_new(xop(op)->cmd, json_string(num));
	json_array_append_new(xop(op)->cmd, json_string("--cwd"));
	json_array_append_new(xop(op)->cmd, json_string(cwd));
	json_array_append_new(xop(op)->cmd, json_string("--"));
	for (p = req->argv; *p != NULL; p++)
		if (json_array_append_new(xop(op)->cmd, json_string(*p)) < 0)
			goto bad;
	if (req->env != NULL) {
		xop(op)->env = json_array();
		for (p = req->env; *p != NULL; p++)
			if (json_array_append_new(xop(op)->env, json_string(*p)) < 0)
				goto bad;
	}
	if (req->stdin_data != NULL) {
		xop(op)->has_stdin = 1;
		if ((xop(op)->stdin_buf = evbuffer_new()) == NULL ||
		    evbuffer_add(xop(op)->stdin_buf, req->stdin_data, req->stdin_len) < 0)
			goto oom;
	}
	eng_helper_run(op);
	return &op->base;
bad:
	/* json_string() refuses what is not UTF-8. */
	sbx_err_set(err, SBX_E_BAD_REQUEST, "argv and env must be valid UTF-8");
	eng_op_free(op);
	return NULL;
oom:
	sbx_err_oom(err);
	eng_op_free(op);
	return NULL;
}
