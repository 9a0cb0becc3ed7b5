/*
 * driver_engine_run.c - the core of one sbx-helper invocation of the
 * engine driver (adr/0021): its state and buffers, the seam to the
 * transport (through e->via, the table the driver picked: agent channel or
 * runtime exec), output to the kind, the write source, progress and exec
 * timers, the helper's errors, the end, and the kill by handle with its
 * kind row. The transports and the invocation kinds (exec, files) call
 * down into it; it calls only the runtime call layer and the op lifecycle,
 * and reaches kinds and transports through their rows (adr/0037).
 */
#include "agent.h"
#include "driver_engine_int.h"
#include "sbx_agent.h"

/* A kill the runtime could not take (unreachable: a restarting daemon) is
 * tried again once a second this many times, so an exec cut off by the
 * runtime's crash does not run on until its timeout (test_faults.py). */
#define KILL_RETRIES 60

static void exec_after_kill(struct eop *op);
static void kill_ended(struct eop *k, const struct sbx_err *err);
static void kill_exited(struct eop *k, int code);
static void kill_expired(struct eop *k);
static void kill_fini(struct eop *k);

/* A kill by handle (`sbx-helper kill EXEC_ID`): its end goes to the op
 * that waits for it (parent), if any; its container was checked. */
const struct eng_kind eng_kind_kill = {
	.name = "kill",
	.flags = EK_RUN | EK_KEEP_OUT | EK_NO_INSPECT | EK_NO_KILL,
	.fail = kill_ended,
	.let_go = eng_src_detach,
	.fini = kill_fini,
	.exited = kill_exited,
	.expired = kill_expired,
};

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

/* Frees what every helper op holds (a kind's fini adds its own part). */
void
eng_run_fini(struct eop *op)
{
	struct eop_exec *x = xop(op);

	if (x->via != NULL && x->via->end != NULL)
		x->via->end(op);
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
}

static void
kill_fini(struct eop *k)
{
	eng_run_fini(k);
	if (kio(k)->retry != NULL)
		event_free(kio(k)->retry);
}

void
eng_run_cancel(struct eop *op)
{
	/* An exec that may have been created is killed by its handle; the
	 * helper leaves a tombstone when the kill arrives first. */
	if (op->cid[0] != '\0' && !xop(op)->killing)
		eng_start_kill(op->e, op->id, op->cid, xop(op)->exec_id, NULL);
	eng_op_release(op);
}

void
eng_run_pause(struct eop *op, int on)
{
	struct eop_exec *x = xop(op);

	if (on) {
		x->paused = 1;
		if (x->ftimer != NULL)
			event_del(x->ftimer);   /* the reader's choice, not a stall */
	} else {
		if (!x->paused)
			return;
		x->paused = 0;
		eng_file_progress(op);
	}
	if (x->ast != NULL)
		sbx_agent_pause(x->ast, on);
	else if (x->streaming && on)
		sbx_http_req_pause(op->http);
	else if (x->streaming)
		sbx_http_req_resume(op->http);
}

void
eng_finish_sink_error(struct eop *op, const struct sbx_err *err)
{
	struct eop_exec *x = xop(op);

	if (x->sink.error != NULL)
		x->sink.error(x->sink.arg, err);
	eng_op_release(op);
}

/* ---------- the stdin source a write_stream lends (adr/0018) ---------- */

void
eng_src_detach(struct eop *op)
{
	struct eop_exec *x = xop(op);

	if (x->src != NULL && x->src_ent != NULL)
		evbuffer_remove_cb_entry(x->src, x->src_ent);
	x->src_ent = NULL;
	x->src = NULL;
}

/* New bytes in the source: the transport moves what it has room for. */
static void
src_added(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct eop *op = arg;

	(void)buf;
	if (info->n_added > 0 && xop(op)->via != NULL)
		xop(op)->via->pump(op);
}

int
eng_src_lend(struct eop *op, struct evbuffer *src, uint64_t len)
{
	struct eop_exec *x = xop(op);

	x->src = src;
	x->src_left = len;
	if ((x->src_ent = evbuffer_add_cb(src, src_added, op)) == NULL) {
		x->src = NULL;
		return -1;
	}
	return 0;
}

/* ---------- file operations: no progress for file_timeout ---------- */

static void
file_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;
	struct sbx_err e;

	(void)fd;
	(void)what;
	/* Answer now, whatever the sandbox does: the runtime connection goes
	 * (sbx_http_req_cancel in finish), the helper is killed by its handle
	 * on the side (that kill is bounded by its own timeout). */
	if (op->cid[0] != '\0')
		eng_start_kill(op->e, op->id, op->cid, xop(op)->exec_id, NULL);
	sbx_err_set(&e, SBX_E_TIMEOUT, "the %s made no progress for %" PRId64
	    " ms (file_timeout); it was cancelled and its helper killed",
	    op->kind->name, op->e->file_timeout);
	eng_finish_err(op, &e);
}

void
eng_file_progress(struct eop *op)
{
	struct eop_exec *x = xop(op);
	struct timeval tv;

	if (x->ftimer == NULL || x->paused)
		return;
	tv.tv_sec = op->e->file_timeout / 1000;
	tv.tv_usec = (op->e->file_timeout % 1000) * 1000;
	event_add(x->ftimer, &tv);
}

int
eng_progress_new(struct eop *op)
{
	if ((xop(op)->ftimer = evtimer_new(op->e->base.base, file_timer_cb,
	    op)) == NULL)
		return -1;
	eng_file_progress(op);
	return 0;
}

/* ---------- kill by handle ---------- */

static void
kill_exited(struct eop *k, int code)
{
	struct sbx_err e;

	if (code != 0) {
		eng_helper_error(k, code, &e);
		kill_ended(k, &e);
	} else {
		kill_ended(k, NULL);
	}
}

/* A kill op of sandbox id for the helper exec exec_id in container cid. */
static struct eop *
kill_op_new(struct engine *e, const char *id, const char *cid,
    const char *exec_id, struct sbx_err *err)
{
	struct eop *k;

	if ((k = eng_op_new(e, &eng_kind_kill, id, sizeof(struct eop_kill),
	    err)) == NULL)
		return NULL;
	snprintf(k->cid, sizeof(k->cid), "%s", cid);
	xop(k)->cmd = eng_helper_cmd("kill");
	json_array_append_new(xop(k)->cmd, json_string(exec_id));
	xop(k)->timeout_ms = KILL_TIMEOUT_MS;
	xop(k)->cap = ERRTAIL_MAX;
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
 * op continues in kill_ended() -> exec_after_kill(). */
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

/* A kill op ended (err NULL: done): its parent goes on; an unreachable
 * runtime gets the kill again later. The kill kind's fail. */
static void
kill_ended(struct eop *k, const struct sbx_err *err)
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

/* A kill is not killed: it ends with timeout. */
static void
kill_expired(struct eop *k)
{
	struct sbx_err e;

	sbx_err_set(&e, SBX_E_TIMEOUT, SBX_MSG_KILL_UNFINISHED);
	kill_ended(k, &e);
}

static void
exec_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;

	(void)fd;
	(void)what;
	if (op->kind->expired != NULL) {
		op->kind->expired(op);
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
	x->timer = evtimer_new(op->e->base.base, exec_timer_cb, op);
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
eng_run_output(struct eop *op, int stream, const unsigned char *buf,
    size_t len)
{
	if (op->kind->output != NULL)
		op->kind->output(op, stream, buf, len);
	else
		eng_deliver(op, stream, buf, len);
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
	if (stream == 2 && !(op->kind->flags & EK_FRAMED)) {
		/* stderr of a helper mode: only its error line matters */
		if (evbuffer_get_length(x->errtail) + len <= ERRTAIL_MAX)
			evbuffer_add(x->errtail, buf, len);
		return;
	}
	if (op->kind->flags & EK_KEEP_OUT) {
		if (evbuffer_get_length(x->out) + len > (size_t)x->cap) {
			x->truncated = 1;
			return;
		}
		evbuffer_add(x->out, buf, len);
		if (op->kind->got_out != NULL)
			op->kind->got_out(op);
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
	if (op->kind->over_cap != NULL)
		op->kind->over_cap(op);
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
	/* The agent (adr/0025) unless agent: false, or the kind keeps its
	 * runtime exec (the usage walk answers the container's status too,
	 * running or not, adr/0017). */
	x->via = op->kind->flags & EK_RUNTIME_EXEC ? op->e->rexec_via :
	    op->e->via;
	x->via->run(op);
}

/* A helper exec op for sandbox id with mode and its arguments. */
struct eop *
eng_helper_op(struct engine *e, const struct eng_kind *kind, const char *id,
    size_t size, struct sbx_err *err)
{
	struct eop *op;

	if ((op = eng_op_new(e, kind, id, size, err)) == NULL)
		return NULL;
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

/* ---------- the end: the sink hears the start, the exit record ---------- */

void
eng_exec_announce(struct eop *op)
{
	struct eop_exec *x = xop(op);

	if (op->dead || x->stream_started)
		return;
	x->stream_started = 1;
	eng_op_enter(op);
	if (x->sink.start != NULL)
		x->sink.start(x->sink.arg, op->kind->flags & EK_ANON_START ? "" :
		    x->exec_id);
	eng_op_leave(op);
}

int
eng_run_recorded(struct eop *op)
{
	return op->kind->recorded != NULL && op->kind->recorded(op);
}
