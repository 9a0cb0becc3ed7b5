/* driver_vm_sess.c - the vm driver's sessions: builds the pty and connect modes, carries their raw output and exit, and the input, close and control calls of every session on its agent stream; calls the io file for the stream and the op file for answers. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_vm_box.h"
#include "driver_vm_io.h"
#include "driver_vm_op.h"
#include "driver_vm_sess.h"
#include "sbx_helper_proto.h"
#include "sbx_msg.h"
#include "sbx_proto.h"
#include "sbx_time.h"

/* A pty's or connect's output: stream 1 raw (PTY: up to output_cap, 0 none). */
static void
raw_output(void *arg, int fd, const unsigned char *buf, size_t len)
{
	struct vmop *op = arg;

	if (fd != 1) {
		vm_io_keep_err(op, buf, len);
		return;
	}
	if (op->truncated)
		return;
	if (op->cap > 0 && op->sent + (int64_t)len > op->cap) {
		len = (size_t)(op->cap - op->sent);
		op->truncated = 1;
		if (op->st != NULL)
			sbx_agent_control(op->st, SBX_AGENT_CTRL_SIGNAL, SIGKILL, 0);
	}
	op->sent += (int64_t)len;
	if (len > 0)
		op->sink.output(op->sink.arg, 1, buf, len);
}

/* The mode ended: a failing one says why on its stderr (only codes about
 * the request are believed), else the status is the session's exit. */
static void
raw_exit(void *arg, const struct sbx_agent_exit *ax)
{
	static const char *const believed[] = {
		SBX_E_PATH_OUTSIDE_WORK, SBX_E_NOT_FOUND, SBX_E_BAD_REQUEST,
		SBX_E_FORBIDDEN, SBX_E_PORT_CLOSED, NULL,
	};
	struct vmop *op = arg;
	int code = ax->how == SBX_AGENT_EXIT_EXITED ? ax->status : 128 + ax->sig;
	struct sbx_exit ex;
	struct sbx_err e, h;
	size_t i;

	op->st = NULL;
	if (code != 0 && !op->truncated && vm_io_helper_line(op, &h) == 0) {
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper %s failed: %s",
		    op->session == SBX_SESSION_PTY ? "pty" : "connect", h.message);
		for (i = 0; believed[i] != NULL; i++)
			if (strcmp(h.code, believed[i]) == 0)
				e = h;
		vmop_fail(op, &e);
		return;
	}
	if (code == SBX_HELPER_EXIT_PORT_CLOSED && op->session == SBX_SESSION_PORT) {
		sbx_err_set(&e, SBX_E_PORT_CLOSED, "nothing listens on that port in the sandbox");
		vmop_fail(op, &e);
		return;
	}
	memset(&ex, 0, sizeof(ex));
	ex.code = code & 0xff;
	ex.duration_ms = sbx_mono_ms() - op->t0;
	ex.truncated = op->truncated;
	if (code > 128 && code < 128 + 65)
		ex.signal = sigabbrev_np(code - 128);
	if (op->truncated && ex.signal == NULL)
		ex.signal = "KILL";
	op->sink.exit(op->sink.arg, &ex);
	vmop_free(op);
}

static void
raw_begin(struct vmop *op)
{
	const char *argv[SBX_AGENT_ARGS_MAX / 2];
	char cols[16], rows[16], tmo[24], port[16];
	size_t n = 0, i;

	if (op->session == SBX_SESSION_PORT) {
		snprintf(port, sizeof(port), "%d", op->ftype);
		argv[n++] = SBX_HELPER_MODE_CONNECT;
		argv[n++] = "--port";
		argv[n++] = port;
	} else {
		snprintf(cols, sizeof(cols), "%d", (int)(op->limit >> 16));
		snprintf(rows, sizeof(rows), "%d", (int)(op->limit & 0xffff));
		argv[n++] = SBX_HELPER_MODE_PTY;
		argv[n++] = "--id";
		argv[n++] = op->exec_id;
		argv[n++] = "--cols";
		argv[n++] = cols;
		argv[n++] = "--rows";
		argv[n++] = rows;
		argv[n++] = "--term";
		argv[n++] = op->after;
		if (op->cap2 > 0) {
			snprintf(tmo, sizeof(tmo), "%lld", (long long)op->cap2);
			argv[n++] = "--timeout-ms";
			argv[n++] = tmo;
		}
		if (op->cwd[0] != '\0') {
			argv[n++] = "--cwd";
			argv[n++] = op->cwd;
		}
		if (op->argv != NULL && op->argv[0] != NULL) {
			argv[n++] = "--";
			for (i = 0; op->argv[i] != NULL && n < sizeof(argv) / sizeof(argv[0]) - 1; i++)
				argv[n++] = op->argv[i];
		}
	}
	argv[n] = NULL;
	{
		struct sbx_err err;

		sbx_err_clear(&err);
		if (vm_channel(op->d, op->id, &err) == NULL) {
			vmop_fail(op, &err);
			return;
		}
	}
	op->sink.start(op->sink.arg, op->session == SBX_SESSION_PORT ? "" : op->exec_id);
	vm_io_open(op, argv, (const char *const *)op->env,
	    op->session == SBX_SESSION_PORT ? SBX_AGENT_OPEN_STDIN :
	    SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL, raw_output, raw_exit);
}

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

static char **
dupv(const char *const *v)
{
	char **out;
	size_t n, i;

	for (n = 0; v[n] != NULL; n++)
		;
	if ((out = calloc(n + 1, sizeof(char *))) == NULL)
		return NULL;
	for (i = 0; i < n; i++)
		if ((out[i] = strdup(v[i])) == NULL)
			return out;   /* freed with the op; the NULL ends it */
	return out;
}

struct sbx_op *
vm_sess_open(struct vmdrv *d, const char *id, const struct sbx_session_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	const char *term = req->term != NULL ? req->term : SBX_SESSION_TERM_DEFAULT;
	struct vmop *op;

	if (req->kind == SBX_SESSION_EXEC)
		return vm_io_exec2(d, id, &req->exec, sink, SBX_SESSION_EXEC, err);
	if (req->kind == SBX_SESSION_PORT && (req->port < 1 || req->port > 65535)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PORT_RANGE);
		return NULL;
	}
	if (req->kind == SBX_SESSION_PTY &&
	    (req->cols < 1 || req->cols > SBX_SESSION_SIZE_MAX || req->rows < 1 ||
	    req->rows > SBX_SESSION_SIZE_MAX)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PTY_SIZE, SBX_SESSION_SIZE_MAX);
		return NULL;
	}
	if (req->kind == SBX_SESSION_PTY && !term_ok(term)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PTY_TERM, SBX_SESSION_TERM_MAX);
		return NULL;
	}
	if (req->kind != SBX_SESSION_PTY && req->kind != SBX_SESSION_PORT) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "unknown session kind");
		return NULL;
	}
	if (req->kind == SBX_SESSION_PTY &&
	    (req->exec.timeout_ms < 0 || req->exec.timeout_ms > d->cfg.exec_timeout_max_ms)) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "timeout_ms is above the "
		    "configured ceiling of %lld ms", (long long)d->cfg.exec_timeout_max_ms);
		return NULL;
	}
	if ((op = vmop_new(d, VMOP_EXEC, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->sink = *sink;
	op->session = req->kind;
	if (req->kind == SBX_SESSION_PORT)
		op->ftype = req->port;   /* the port, until the stream opens */
	else {
		op->limit = ((size_t)req->cols << 16) | (size_t)req->rows;
		snprintf(op->after, sizeof(op->after), "%s", term);
		op->cap = req->exec.output_cap;
		op->cap2 = req->exec.timeout_ms;
		snprintf(op->cwd, sizeof(op->cwd), "%s", req->exec.cwd != NULL ? req->exec.cwd : "");
		snprintf(op->exec_id, sizeof(op->exec_id), "vmt%llux%llx",
		    (unsigned long long)++d->seq, (unsigned long long)sbx_mono_ms());
		if ((req->exec.argv != NULL && (op->argv = dupv(req->exec.argv)) == NULL) ||
		    (req->exec.env != NULL && (op->env = dupv(req->exec.env)) == NULL)) {
			vmop_free(op);
			return sbx_err_oom(err), NULL;
		}
	}
	if (vmop_later(op, raw_begin) != 0) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	return &op->op;
}

ssize_t
vm_sess_write(struct vmop *op, struct evbuffer *src, size_t max)
{
	if (op == NULL || op->st == NULL || op->input_closed)
		return -1;
	return sbx_agent_write_buffer(op->st, src, max);
}

size_t
vm_sess_room(struct vmop *op)
{
	if (op == NULL || op->st == NULL || op->input_closed)
		return 0;
	return sbx_agent_stdin_room(op->st);
}

void
vm_sess_close_input(struct vmop *op)
{
	if (op == NULL || op->st == NULL || op->input_closed ||
	    op->session == SBX_SESSION_PTY)
		return;
	op->input_closed = 1;
	sbx_agent_close_stdin(op->st);
}

int
vm_sess_control(struct vmop *op, const struct sbx_session_ctl *c, struct sbx_err *err)
{
	if (c->kind == SBX_SESSION_VIEWERS)
		return 0;
	if (op == NULL || op->st == NULL || op->session == SBX_SESSION_PORT ||
	    (c->kind == SBX_SESSION_RESIZE && op->session != SBX_SESSION_PTY)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "this session takes no such control");
		return -1;
	}
	if (c->kind == SBX_SESSION_RESIZE) {
		if (c->cols < 1 || c->cols > SBX_SESSION_SIZE_MAX || c->rows < 1 ||
		    c->rows > SBX_SESSION_SIZE_MAX ||
		    sbx_agent_control(op->st, SBX_AGENT_CTRL_RESIZE, (uint32_t)c->cols,
		    (uint32_t)c->rows) != 0) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PTY_SIZE, SBX_SESSION_SIZE_MAX);
			return -1;
		}
		return 0;
	}
	if (c->kind == SBX_SESSION_SIGNAL && c->signo >= 1 && c->signo <= 64 &&
	    sbx_agent_control(op->st, SBX_AGENT_CTRL_SIGNAL, (uint32_t)c->signo, 0) == 0)
		return 0;
	sbx_err_set(err, SBX_E_BAD_REQUEST, "a signal must be 1 to 64");
	return -1;
}
