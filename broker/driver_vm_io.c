/* driver_vm_io.c - the vm driver's exec, read, write (whole or streamed) and list (adr/0069): each one sbx-helper mode run as a stream on the VM's agent channel; reads the VM registry, answers through the op file. */
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "driver_vm_box.h"
#include "driver_vm_io.h"
#include "driver_vm_op.h"
#include "sbx_helper_frame.h"
#include "sbx_msg.h"
#include "sbx_proto.h"
#include "sbx_time.h"

#define ERRLINE_MAX 4096
#define LIST_LINE_MAX 2048            /* bytes of one entry line, at most */

/* ---------------------------------------------------------------- shared */

static void
arm(struct vmop *op, int64_t ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (op->timer != NULL)
		evtimer_add(op->timer, &tv);
}

int
vm_io_helper_line(struct vmop *op, struct sbx_err *err)
{
	static const char *const believed[] = {
		SBX_E_PATH_OUTSIDE_WORK, SBX_E_NOT_FOUND, SBX_E_BAD_REQUEST,
		SBX_E_FORBIDDEN, SBX_E_TOO_LARGE, SBX_E_CANCELLED, SBX_E_TIMEOUT,
		SBX_E_CONFLICT, NULL,
	};
	const char *code = NULL, *msg = NULL;
	json_t *j, *e;
	size_t i, n;
	int ok = -1;

	if (op->errline == NULL || (n = evbuffer_get_length(op->errline)) == 0)
		return -1;
	j = json_loadb((const char *)evbuffer_pullup(op->errline, -1), n, 0, NULL);
	if (j != NULL && (e = json_object_get(j, "error")) != NULL) {
		code = json_string_value(json_object_get(e, "code"));
		msg = json_string_value(json_object_get(e, "message"));
	}
	for (i = 0; code != NULL && believed[i] != NULL; i++)
		if (strcmp(code, believed[i]) == 0) {
			sbx_err_set(err, believed[i], "%.200s",
			    msg != NULL && msg[0] != '\0' ? msg : SBX_MSG_HELPER_REFUSED);
			ok = 0;
		}
	json_decref(j);
	return ok;
}

/* A mode's exit status without a usable line (SBX_HELPER_EXIT_*). */
static void
exit_err(int status, struct sbx_err *err)
{
	switch (status) {
	case SBX_HELPER_EXIT_BAD_REQUEST:
		sbx_err_set(err, SBX_E_BAD_REQUEST, "sbx-helper refused the request");
		break;
	case SBX_HELPER_EXIT_PATH_OUTSIDE_WORK:
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "the path leaves /work");
		break;
	case SBX_HELPER_EXIT_NOT_FOUND:
		sbx_err_set(err, SBX_E_NOT_FOUND, "no such file or directory");
		break;
	case SBX_HELPER_EXIT_TOO_LARGE:
		sbx_err_set(err, SBX_E_TOO_LARGE, "the file is over the size cap");
		break;
	case SBX_HELPER_EXIT_FORBIDDEN:
		sbx_err_set(err, SBX_E_FORBIDDEN, "permission denied in the sandbox");
		break;
	default:
		sbx_err_set(err, SBX_E_RUNTIME, "sbx-helper failed (status %d)", status);
		break;
	}
}

static void
on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct vmop *op = arg;
	struct sbx_err err;

	(void)fd;
	(void)what;
	if (op->kind == VMOP_EXEC)
		sbx_err_set(&err, SBX_E_TIMEOUT, SBX_MSG_EXEC_TIMEOUT, op->cap2);
	else if (op->kind == VMOP_USAGE)
		sbx_err_set(&err, SBX_E_TIMEOUT, "sandbox %s: counting /work did not "
		    "end within %lld ms", op->id, (long long)op->d->cfg.usage_timeout_ms + 2000);
	else
		sbx_err_set(&err, SBX_E_TIMEOUT, "sandbox %s: the file operation made "
		    "no progress for %lld ms", op->id, (long long)op->d->cfg.file_timeout_ms);
	vmop_fail(op, &err);   /* cancels the stream: the agent kills the mode */
}

static void
on_stream_error(void *arg, const struct sbx_err *err)
{
	struct vmop *op = arg;

	op->st = NULL;   /* the channel ended it */
	vmop_fail(op, err);
}

/* Moves what stdin may take now (the stream's credit) from op->body, or
 * from a write_stream's source up to its length; EOF once all went. */
static void
feed(struct vmop *op)
{
	ssize_t n;

	if (op->st == NULL || op->stdin_done || (op->body == NULL && op->src == NULL))
		return;
	if (op->body != NULL) {
		n = sbx_agent_write_buffer(op->st, op->body, evbuffer_get_length(op->body));
	} else {
		n = sbx_agent_write_buffer(op->st, op->src, op->src_left > SIZE_MAX ?
		    SIZE_MAX : (size_t)op->src_left);
		if (n > 0)
			op->src_left -= (uint64_t)n;
	}
	if (n > 0 && op->kind != VMOP_EXEC)
		arm(op, op->d->cfg.file_timeout_ms);
	if (op->body != NULL ? evbuffer_get_length(op->body) == 0 : op->src_left == 0) {
		vmop_let_go(op);
		sbx_agent_close_stdin(op->st);
		op->stdin_done = 1;
	}
}

/* New bytes in a write_stream's source: on to the stream, within its
 * credit (before the stream opens they wait in the source). */
static void
src_added(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	(void)buf;
	if (info->n_added > 0)
		feed(arg);
}

static void
on_stdin_room(void *arg)
{
	struct vmop *op = arg;

	if (op->session) {
		if (op->sink.room != NULL)
			op->sink.room(op->sink.arg);
		return;
	}
	feed(op);
}

void
vm_io_keep_err(struct vmop *op, const unsigned char *buf, size_t len)
{
	size_t have;

	if (op->errline == NULL && (op->errline = evbuffer_new()) == NULL)
		return;
	have = evbuffer_get_length(op->errline);
	if (have < ERRLINE_MAX)
		evbuffer_add(op->errline, buf, len < ERRLINE_MAX - have ? len :
		    ERRLINE_MAX - have);
}

int
vm_io_open(struct vmop *op, const char *const *argv, const char *const *env,
    unsigned flags, void (*output)(void *, int, const unsigned char *, size_t),
    void (*exited)(void *, const struct sbx_agent_exit *))
{
	struct sbx_agent_stream_cbs cbs;
	struct sbx_agent_chan *ch;
	struct sbx_err err;

	sbx_err_clear(&err);
	if ((ch = vm_channel(op->d, op->id, &err)) == NULL) {
		vmop_fail(op, &err);
		return -1;
	}
	memset(&cbs, 0, sizeof(cbs));
	cbs.output = output;
	cbs.exit = exited;
	cbs.error = on_stream_error;
	cbs.stdin_room = on_stdin_room;
	cbs.arg = op;
	if ((op->timer = evtimer_new(op->d->base.base, on_timeout, op)) == NULL ||
	    (op->st = sbx_agent_open2(ch, argv, env, flags, &cbs, &err)) == NULL) {
		if (!sbx_err_is_set(&err))
			sbx_err_oom(&err);
		vmop_fail(op, &err);
		return -1;
	}
	op->t0 = sbx_mono_ms();
	return 0;
}

/* ---------------------------------------------------------------- exec */

/* Returns 1 when op ended (cap reached: freed). */
static int
exec_deliver(struct vmop *op, int stream, const unsigned char *buf, size_t len)
{
	struct sbx_exit ex;

	if (op->sent + (int64_t)len > op->cap) {
		len = (size_t)(op->cap - op->sent);
		op->truncated = 1;
	}
	if (len > 0) {
		op->sent += (int64_t)len;
		op->sink.output(op->sink.arg, stream, buf, len);
	}
	if (!op->truncated)
		return 0;
	/* Cap reached: the command is killed (the stream's cancel), the exit
	 * says truncated. */
	memset(&ex, 0, sizeof(ex));
	ex.code = 128 + SIGKILL;
	ex.signal = "KILL";
	ex.truncated = 1;
	ex.duration_ms = sbx_mono_ms() - op->t0;
	op->sink.exit(op->sink.arg, &ex);
	vmop_free(op);
	return 1;
}

/* The helper's stdout: exec --framed frames (untrusted). */
static void
exec_output(void *arg, int fd, const unsigned char *buf, size_t len)
{
	struct vmop *op = arg;
	struct sbx_helper_exit hx;
	struct sbx_err err;
	size_t take;

	if (fd != 1) {
		vm_io_keep_err(op, buf, len);
		return;
	}
	while (len > 0) {
		if (op->fhave < SBX_HELPER_FRAME_HDR) {
			take = SBX_HELPER_FRAME_HDR - op->fhave;
			take = take < len ? take : len;
			memcpy(op->fhdr + op->fhave, buf, take);
			op->fhave += take;
			buf += take;
			len -= take;
			if (op->fhave < SBX_HELPER_FRAME_HDR)
				return;
			if (op->have_exit ||
			    (op->ftype = sbx_helper_frame_check(op->fhdr, &op->fleft)) < 0)
				goto bad;
			op->fpos = 0;
			continue;
		}
		take = op->fleft < len ? op->fleft : len;
		switch (op->ftype) {
		case SBX_HELPER_FRAME_STDOUT:
		case SBX_HELPER_FRAME_STDERR:
			op->fleft -= (uint32_t)take;
			if (op->fleft == 0)
				op->fhave = 0;
			if (exec_deliver(op, op->ftype, buf, take))
				return;   /* op is gone */
			break;
		case SBX_HELPER_FRAME_EXIT:
			memcpy(op->frec + op->fpos, buf, take);
			op->fpos += take;
			op->fleft -= (uint32_t)take;
			if (op->fleft == 0) {
				op->fhave = 0;
				if (sbx_helper_exit_decode(op->frec, &hx) != 0)
					goto bad;
				op->have_exit = 1;
				op->hx_how = hx.how;
				op->hx_code = hx.code;
				op->hx_sig = hx.sig;
				op->hx_timeout = hx.timed_out;
			}
			break;
		default:   /* error record */
			vm_io_keep_err(op, buf, take);
			op->fleft -= (uint32_t)take;
			if (op->fleft == 0)
				op->fhave = 0;
			break;
		}
		buf += take;
		len -= take;
	}
	return;
bad:
	sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: sbx-helper broke the exec "
	    "frame protocol", op->id);
	vmop_fail(op, &err);
}

static void
exec_exit(void *arg, const struct sbx_agent_exit *ax)
{
	struct vmop *op = arg;
	static const char *const believed_125[] = {
		SBX_E_PATH_OUTSIDE_WORK, SBX_E_NOT_FOUND, SBX_E_BAD_REQUEST,
		SBX_E_FORBIDDEN, SBX_E_CANCELLED, NULL,
	};
	struct sbx_exit ex;
	struct sbx_err err;
	char line[300];
	int n;
	size_t i;

	op->st = NULL;
	(void)ax;
	if (!op->have_exit) {
		sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: sbx-helper ended without "
		    "an exit record (killed in the sandbox?)", op->id);
		vmop_fail(op, &err);
		return;
	}
	if (op->hx_timeout) {
		sbx_err_set(&err, SBX_E_TIMEOUT, SBX_MSG_EXEC_TIMEOUT, op->cap2);
		vmop_fail(op, &err);
		return;
	}
	if (op->hx_how == SBX_HELPER_EXIT_HOW_EXITED &&
	    op->hx_code == SBX_HELPER_EXEC_FAILED && op->errline != NULL) {
		struct sbx_err h;

		sbx_err_set(&err, SBX_E_RUNTIME, "sbx-helper could not start the command");
		if (vm_io_helper_line(op, &h) == 0)
			for (i = 0; believed_125[i] != NULL; i++)
				if (strcmp(h.code, believed_125[i]) == 0)
					err = h;
		vmop_fail(op, &err);
		return;
	}
	if (op->hx_how == SBX_HELPER_EXIT_HOW_EXITED && op->errline != NULL &&
	    (op->hx_code == SBX_HELPER_EXEC_NOEXEC ||
	    op->hx_code == SBX_HELPER_EXEC_NOTFOUND) && vm_io_helper_line(op, &err) == 0) {
		/* Like a shell: the reason on stderr, then the status. */
		n = snprintf(line, sizeof(line), "sbx-helper: %s\n", err.message);
		if (n > 0 && (size_t)n < sizeof(line) &&
		    op->sent + n <= op->cap) {
			op->sent += n;
			op->sink.output(op->sink.arg, 2, (const unsigned char *)line, (size_t)n);
		}
	}
	memset(&ex, 0, sizeof(ex));
	ex.duration_ms = sbx_mono_ms() - op->t0;
	if (op->hx_how == SBX_HELPER_EXIT_HOW_SIGNALED) {
		ex.code = 128 + op->hx_sig;
		ex.signal = sigabbrev_np(op->hx_sig);
	} else
		ex.code = op->hx_code;
	op->sink.exit(op->sink.arg, &ex);
	vmop_free(op);
}

static void
exec_begin(struct vmop *op)
{
	const char *argv[SBX_AGENT_ARGS_MAX / 2];
	struct sbx_err err;
	char tmo[24];
	size_t n = 0, i;

	snprintf(tmo, sizeof(tmo), "%" PRId64, op->cap2);
	argv[n++] = SBX_HELPER_MODE_EXEC;
	argv[n++] = "--id";
	argv[n++] = op->exec_id;
	argv[n++] = "--framed";
	argv[n++] = "--timeout-ms";
	argv[n++] = tmo;
	if (op->cwd[0] != '\0') {
		argv[n++] = "--cwd";
		argv[n++] = op->cwd;
	}
	argv[n++] = "--";
	for (i = 0; op->argv[i] != NULL && n < sizeof(argv) / sizeof(argv[0]) - 1; i++)
		argv[n++] = op->argv[i];
	argv[n] = NULL;
	sbx_err_clear(&err);
	if (vm_channel(op->d, op->id, &err) == NULL) {
		vmop_fail(op, &err);   /* absent or stopped: never started */
		return;
	}
	op->sink.start(op->sink.arg, op->exec_id);
	if (vm_io_open(op, argv, (const char *const *)op->env, op->session ?
	    SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL :
	    op->body != NULL ? SBX_AGENT_OPEN_STDIN : 0, exec_output, exec_exit) != 0)
		return;
	/* The broker's own deadline, past the helper's backstop. */
	arm(op, op->cap2 + 10000);
	feed(op);
}

struct sbx_op *
vm_io_exec(struct vmdrv *d, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	return vm_io_exec2(d, id, req, sink, 0, err);
}

struct sbx_op *
vm_io_exec2(struct vmdrv *d, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, int session, struct sbx_err *err)
{
	struct vmop *op;
	int64_t tmo = req->timeout_ms, cap = req->output_cap;
	size_t i, n;

	if (tmo == 0)
		tmo = d->cfg.exec_timeout_ms;
	if (cap == 0)
		cap = d->cfg.exec_output_cap;
	if (tmo < 0 || tmo > d->cfg.exec_timeout_max_ms) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "timeout_ms is above the "
		    "configured ceiling of %lld ms", (long long)d->cfg.exec_timeout_max_ms);
		return NULL;
	}
	if (cap < 0 || cap > d->cfg.exec_output_cap) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "output_cap is above the "
		    "configured ceiling of %lld bytes", (long long)d->cfg.exec_output_cap);
		return NULL;
	}
	for (n = 0; req->argv[n] != NULL; n++)
		;
	if (n == 0 || n > SBX_AGENT_ARGS_MAX / 2 - 16) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "argv must have 1 to %d words",
		    SBX_AGENT_ARGS_MAX / 2 - 16);
		return NULL;
	}
	if ((op = vmop_new(d, VMOP_EXEC, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->sink = *sink;
	op->session = session;
	op->cap = cap;
	op->cap2 = tmo;
	snprintf(op->exec_id, sizeof(op->exec_id), "vm%" PRIu64 "x%llx", ++d->seq,
	    (unsigned long long)sbx_mono_ms());
	snprintf(op->cwd, sizeof(op->cwd), "%s", req->cwd != NULL ? req->cwd : "");
	op->argv = calloc(n + 1, sizeof(char *));
	for (i = 0; op->argv != NULL && i < n; i++)
		if ((op->argv[i] = strdup(req->argv[i])) == NULL)
			goto oom;
	if (op->argv == NULL)
		goto oom;
	if (req->env != NULL) {
		for (n = 0; req->env[n] != NULL; n++)
			;
		if ((op->env = calloc(n + 1, sizeof(char *))) == NULL)
			goto oom;
		for (i = 0; i < n; i++)
			if ((op->env[i] = strdup(req->env[i])) == NULL)
				goto oom;
	}
	if (req->stdin_data != NULL) {
		if ((op->body = evbuffer_new()) == NULL ||
		    evbuffer_add(op->body, req->stdin_data, req->stdin_len) != 0)
			goto oom;
	}
	if (vmop_later(op, exec_begin) != 0)
		goto oom;
	return &op->op;
oom:
	vmop_free(op);
	sbx_err_oom(err);
	return NULL;
}

/* ---------------------------------------------------------------- files */

static void
file_output(void *arg, int fd, const unsigned char *buf, size_t len)
{
	struct vmop *op = arg;

	arm(op, op->d->cfg.file_timeout_ms);
	if (fd != 1) {
		vm_io_keep_err(op, buf, len);
		return;
	}
	if (op->kind == VMOP_READ) {
		op->sink.output(op->sink.arg, 1, buf, len);
		return;
	}
	if (op->kind == VMOP_LIST || op->kind == VMOP_USAGE) {
		if (op->body == NULL && (op->body = evbuffer_new()) == NULL)
			return;
		if ((int64_t)(evbuffer_get_length(op->body) + len) > op->cap) {
			struct sbx_err err;

			sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: the listing is "
			    "longer than its bound", op->id);
			vmop_fail(op, &err);
			return;
		}
		evbuffer_add(op->body, buf, len);
	}
}

static const char *
type_of(const char *t)
{
	static const char *const types[] = { "file", "dir", "symlink", "other" };
	size_t i;

	for (i = 0; t != NULL && i < 4; i++)
		if (strcmp(t, types[i]) == 0)
			return types[i];
	return "other";
}

/* list's stdout: entry lines then the end line. 0, or -1 (malformed). */
static int
list_parse(struct vmop *op, struct sbx_dirent **ents, size_t *n, int *truncated)
{
	struct sbx_dirent *out;
	char *line;
	size_t len, have = 0;
	int ended = 0;

	*ents = NULL;
	*n = 0;
	*truncated = 0;
	if ((out = calloc(op->limit + 1, sizeof(*out))) == NULL)
		return -1;
	while (op->body != NULL &&
	    (line = evbuffer_readln(op->body, &len, EVBUFFER_EOL_LF)) != NULL) {
		json_t *j = json_loadb(line, len, 0, NULL);
		const char *name;

		free(line);
		if (j == NULL || ended)
			goto bad;
		if (json_is_true(json_object_get(j, "end"))) {
			*truncated = json_is_true(json_object_get(j, "truncated"));
			ended = 1;
		} else {
			name = json_string_value(json_object_get(j, "name"));
			if (name == NULL || strlen(name) >= sizeof(out->name) ||
			    have >= op->limit)
				goto bad;
			snprintf(out[have].name, sizeof(out[have].name), "%s", name);
			out[have].type = type_of(json_string_value(json_object_get(j, "type")));
			out[have].size = json_integer_value(json_object_get(j, "size"));
			out[have].mode = (uint32_t)json_integer_value(json_object_get(j, "mode")) & 07777;
			out[have].mtime = json_integer_value(json_object_get(j, "mtime"));
			have++;
		}
		json_decref(j);
		continue;
bad:
		json_decref(j);
		free(out);
		return -1;
	}
	if (!ended) {
		free(out);
		return -1;
	}
	*ents = out;
	*n = have;
	return 0;
}

static void
usage_answer(struct vmop *op)
{
	struct sbx_status st;
	struct sbx_err err;
	const char *why;
	json_t *j = NULL;
	size_t n;

	vm_fill_status(vm_get(op->d, op->id), op->id, &st);
	if (op->body != NULL && (n = evbuffer_get_length(op->body)) > 0)
		j = json_loadb((const char *)evbuffer_pullup(op->body, -1), n, 0, NULL);
	if (!json_is_integer(json_object_get(j, "bytes"))) {
		json_decref(j);
		sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: sbx-helper's /work count "
		    "is malformed", op->id);
		vmop_fail(op, &err);
		return;
	}
	st.usage.present = 1;
	st.usage.bytes = json_integer_value(json_object_get(j, "bytes"));
	st.usage.apparent_bytes = json_integer_value(json_object_get(j, "apparent_bytes"));
	st.usage.files = json_integer_value(json_object_get(j, "files"));
	st.usage.dirs = json_integer_value(json_object_get(j, "dirs"));
	st.usage.entries = json_integer_value(json_object_get(j, "entries"));
	st.usage.elapsed_ms = json_integer_value(json_object_get(j, "elapsed_ms"));
	st.usage.partial = json_is_true(json_object_get(j, "partial"));
	why = json_string_value(json_object_get(j, "partial_reason"));
	if (why != NULL && (strcmp(why, "max_entries") == 0 || strcmp(why, "timeout") == 0 ||
	    strcmp(why, "unreadable") == 0))
		snprintf(st.usage.partial_reason, sizeof(st.usage.partial_reason), "%s", why);
	json_decref(j);
	vmop_status(op, &st);
}

static void
file_exit(void *arg, const struct sbx_agent_exit *ax)
{
	struct vmop *op = arg;
	struct sbx_dirent *ents;
	struct sbx_exit ex;
	struct sbx_err err;
	size_t n;
	int truncated;

	op->st = NULL;
	if (ax->how != SBX_AGENT_EXIT_EXITED || ax->status != 0) {
		if (vm_io_helper_line(op, &err) != 0)
			exit_err(ax->how == SBX_AGENT_EXIT_EXITED ? ax->status : -1, &err);
		vmop_fail(op, &err);
		return;
	}
	switch (op->kind) {
	case VMOP_READ:
		memset(&ex, 0, sizeof(ex));
		ex.duration_ms = sbx_mono_ms() - op->t0;
		op->sink.exit(op->sink.arg, &ex);
		vmop_free(op);
		return;
	case VMOP_WRITE:
		vmop_done(op);
		return;
	case VMOP_USAGE:
		usage_answer(op);
		return;
	default:
		if (list_parse(op, &ents, &n, &truncated) != 0) {
			sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: sbx-helper's "
			    "listing is malformed", op->id);
			vmop_fail(op, &err);
			return;
		}
		op->cb.list(op->arg, NULL, ents, n, truncated);
		free(ents);
		vmop_free(op);
		return;
	}
}

static void
file_begin(struct vmop *op)
{
	const char *argv[12];
	char max[24], size[24], mode[16], limit[24], hex[2 * 255 + 1];
	size_t n = 0, i;

	snprintf(max, sizeof(max), "%lld", (long long)op->d->cfg.file_max_bytes);
	switch (op->kind) {
	case VMOP_READ:
		argv[n++] = SBX_HELPER_MODE_READ;
		argv[n++] = op->cwd;
		argv[n++] = "--max";
		argv[n++] = max;
		break;
	case VMOP_WRITE:
		snprintf(mode, sizeof(mode), "%o", (unsigned)op->mode);
		snprintf(size, sizeof(size), "%" PRIu64, op->src != NULL ? op->src_left :
		    (uint64_t)evbuffer_get_length(op->body));
		argv[n++] = SBX_HELPER_MODE_WRITE;
		argv[n++] = op->cwd;
		argv[n++] = mode;
		argv[n++] = "--max";
		argv[n++] = max;
		argv[n++] = "--size";
		argv[n++] = size;
		break;
	default:
		snprintf(limit, sizeof(limit), "%zu", op->limit);
		argv[n++] = SBX_HELPER_MODE_LIST;
		argv[n++] = op->cwd;
		argv[n++] = "--limit";
		argv[n++] = limit;
		if (op->after[0] != '\0') {
			for (i = 0; op->after[i] != '\0' && i < 255; i++)
				snprintf(hex + 2 * i, 3, "%02x", (unsigned char)op->after[i]);
			argv[n++] = "--after-hex";
			argv[n++] = hex;
		}
		break;
	}
	argv[n] = NULL;
	if (vm_io_open(op, argv, NULL, op->kind == VMOP_WRITE ? SBX_AGENT_OPEN_STDIN : 0,
	    file_output, file_exit) != 0)
		return;
	arm(op, op->d->cfg.file_timeout_ms);
	feed(op);
}

struct sbx_op *
vm_io_read(struct vmdrv *d, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct vmop *op = vmop_new(d, VMOP_READ, id);

	if (op == NULL)
		return sbx_err_oom(err), NULL;
	op->sink = *sink;
	snprintf(op->cwd, sizeof(op->cwd), "%s", path);
	if (vmop_later(op, file_begin) != 0) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	return &op->op;
}

/* write (body: moved into the op) or write_stream (src lent, len bytes). */
static struct sbx_op *
write_common(struct vmdrv *d, const char *id, const char *path, uint32_t mode,
    struct evbuffer *body, struct evbuffer *src, uint64_t len, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	struct vmop *op;

	if (body != NULL)
		len = evbuffer_get_length(body);
	if (len > (uint64_t)d->cfg.file_max_bytes) {
		sbx_err_set(err, SBX_E_TOO_LARGE, "the file is over the cap of %lld bytes",
		    (long long)d->cfg.file_max_bytes);
		return NULL;
	}
	if (mode > 0777) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "mode must be at most 0777");
		return NULL;
	}
	if ((op = vmop_new(d, VMOP_WRITE, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.done = cb;
	op->arg = arg;
	op->mode = mode != 0 ? mode : 0644;
	snprintf(op->cwd, sizeof(op->cwd), "%s", path);
	if (src != NULL) {
		op->src = src;
		op->src_left = len;
		if ((op->src_ent = evbuffer_add_cb(src, src_added, op)) == NULL)
			goto oom;
	} else if ((op->body = evbuffer_new()) == NULL ||
	    evbuffer_add_buffer(op->body, body) != 0) {
		goto oom;
	}
	if (vmop_later(op, file_begin) != 0)
		goto oom;
	return &op->op;
oom:
	vmop_free(op);
	return sbx_err_oom(err), NULL;
}

struct sbx_op *
vm_io_write(struct vmdrv *d, const char *id, const char *path, uint32_t mode,
    struct evbuffer *body, sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	return write_common(d, id, path, mode, body, NULL, 0, cb, arg, err);
}

struct sbx_op *
vm_io_write_stream(struct vmdrv *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *src, uint64_t len, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return write_common(d, id, path, mode, NULL, src, len, cb, arg, err);
}

struct sbx_op *
vm_io_list(struct vmdrv *d, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err)
{
	struct vmop *op;

	if (page->after != NULL && (page->after[0] == '\0' || strlen(page->after) > 255)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "after must be a name of 1 to 255 bytes");
		return NULL;
	}
	if ((op = vmop_new(d, VMOP_LIST, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.list = cb;
	op->arg = arg;
	op->limit = page->limit >= 1 && page->limit <= SBX_HELPER_LIST_MAX ?
	    page->limit : SBX_HELPER_LIST_MAX;
	op->cap = (int64_t)(op->limit + 1) * LIST_LINE_MAX;
	snprintf(op->cwd, sizeof(op->cwd), "%s", path);
	snprintf(op->after, sizeof(op->after), "%s", page->after != NULL ? page->after : "");
	if (vmop_later(op, file_begin) != 0) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	return &op->op;
}

static void
usage_begin(struct vmop *op)
{
	struct vm *v = vm_get(op->d, op->id);
	const char *argv[8];
	char max[24], tmo[24];
	struct sbx_status st;

	if (v == NULL || v->state != VM_RUNNING) {
		vm_fill_status(v, op->id, &st);   /* not running: status, no usage */
		vmop_status(op, &st);
		return;
	}
	snprintf(max, sizeof(max), "%lld", (long long)op->d->cfg.usage_max_entries);
	snprintf(tmo, sizeof(tmo), "%lld", (long long)op->d->cfg.usage_timeout_ms);
	argv[0] = SBX_HELPER_MODE_DU;
	argv[1] = "--max";
	argv[2] = max;
	argv[3] = "--timeout-ms";
	argv[4] = tmo;
	argv[5] = NULL;
	if (vm_io_open(op, argv, NULL, 0, file_output, file_exit) != 0)
		return;
	arm(op, op->d->cfg.usage_timeout_ms + 2000);
}

struct sbx_op *
vm_io_usage(struct vmdrv *d, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct vmop *op = vmop_new(d, VMOP_USAGE, id);

	if (op == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.status = cb;
	op->arg = arg;
	op->cap = 4096;   /* one line */
	if (vmop_later(op, usage_begin) != 0) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	return &op->op;
}

void
vm_io_pause(struct vmop *op, int paused)
{
	if (op->st != NULL)
		sbx_agent_pause(op->st, paused);
}
