/*
 * driver_kube_run.c - the kubernetes driver's exec, read, write and list:
 * each one stream of an sbx-helper mode on the sandbox's agent channel
 * (driver_kube_chan.c), its output checked as the engine driver checks it
 * (exec --framed frames, proto/sbx_helper_frame.h; list lines,
 * sbx_helper_list_line). Touches no API server itself.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <sodium.h>

#include "agent.h"
#include "driver_engine.h"
#include "driver_kube_int.h"
#include "sbx_helper_frame.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"

enum kind { K_EXEC, K_READ, K_WRITE, K_LIST };

struct kop {
	struct sbx_op op;             /* first */
	int cls;                      /* KUBE_OP_RUN */
	struct kube *k;
	enum kind kind;
	char id[64];
	char exec_id[40];
	struct sbx_sink sink;
	sbx_done_cb done;
	sbx_list_cb list;
	void *arg;
	struct sbx_agent_stream *st;
	struct event *kick;           /* deferred start / early error */
	struct event *timer;          /* exec timeout */
	struct sbx_err early;         /* an error to give at the kick */
	int started;
	int64_t t0;
	/* exec frames */
	unsigned char hdr[SBX_HELPER_FRAME_HDR];
	size_t hdr_have;
	int ftype;
	uint32_t fleft;
	unsigned char rec[SBX_HELPER_ERROR_REC_MAX];
	size_t rec_have;
	int have_exit, have_error;
	struct sbx_helper_exit hx;
	char err_code[64], err_msg[256];
	int64_t cap, total;
	int truncated;
	/* stdin (exec data, write body) */
	struct evbuffer *in;
	/* read / list / helper stderr */
	struct evbuffer *acc;
	struct evbuffer *errbuf;
	size_t limit;
};

static void
kop_free(struct kop *o)
{
	if (o->kick != NULL)
		event_free(o->kick);
	if (o->timer != NULL)
		event_free(o->timer);
	if (o->in != NULL)
		evbuffer_free(o->in);
	if (o->acc != NULL)
		evbuffer_free(o->acc);
	if (o->errbuf != NULL)
		evbuffer_free(o->errbuf);
	free(o);
}

/* Ends o with err (NULL: success of a done op). */
static void
end_err(struct kop *o, const struct sbx_err *err)
{
	if (o->st != NULL) {
		sbx_agent_cancel(o->st);
		o->st = NULL;
	}
	switch (o->kind) {
	case K_EXEC:
	case K_READ:
		o->sink.error(o->sink.arg, err);
		break;
	case K_WRITE:
		o->done(o->arg, err);
		break;
	case K_LIST:
		o->list(o->arg, err, NULL, 0, 0);
		break;
	}
	kop_free(o);
}

/* The helper's error for a mode that exited with code (sbx_helper_proto.h). */
static void
helper_err(struct kop *o, int code, struct sbx_err *e)
{
	const char *c;
	size_t n = o->errbuf != NULL ? evbuffer_get_length(o->errbuf) : 0;
	json_t *j = NULL, *er;
	const char *msg = NULL;

	switch (code) {
	case SBX_HELPER_EXIT_BAD_REQUEST: c = SBX_E_BAD_REQUEST; break;
	case SBX_HELPER_EXIT_PATH_OUTSIDE_WORK: c = SBX_E_PATH_OUTSIDE_WORK; break;
	case SBX_HELPER_EXIT_NOT_FOUND: c = SBX_E_NOT_FOUND; break;
	case SBX_HELPER_EXIT_TOO_LARGE: c = SBX_E_TOO_LARGE; break;
	case SBX_HELPER_EXIT_FORBIDDEN: c = SBX_E_FORBIDDEN; break;
	case SBX_HELPER_EXIT_CANCELLED: c = SBX_E_CANCELLED; break;
	default: c = SBX_E_RUNTIME; break;
	}
	if (n > 0 && n < 4096)
		j = json_loadb((const char *)evbuffer_pullup(o->errbuf, -1), n,
		    0, NULL);
	er = json_object_get(j, "error");
	msg = json_string_value(json_object_get(er, "message"));
	if (msg != NULL)
		sbx_err_set(e, c, "%.250s", msg);
	else
		sbx_err_set(e, c, "sbx-helper failed with status %d", code);
	json_decref(j);
}

/* ---- exec frames ---- */

static void
exec_output(struct kop *o, int stream, const unsigned char *p, size_t n)
{
	if (o->truncated)
		return;
	if (o->cap > 0 && o->total + (int64_t)n > o->cap) {
		size_t left = (size_t)(o->cap - o->total);

		if (left > 0)
			o->sink.output(o->sink.arg, stream, p, left);
		o->total = o->cap;
		o->truncated = 1;
		return;
	}
	o->total += (int64_t)n;
	o->sink.output(o->sink.arg, stream, p, n);
}

/* Returns -1 on a protocol violation. */
static int
exec_frames(struct kop *o, const unsigned char *p, size_t n)
{
	while (n > 0) {
		if (o->fleft == 0 && o->ftype == 0) {
			size_t take = SBX_HELPER_FRAME_HDR - o->hdr_have;

			if (o->have_exit)
				return -1;    /* nothing after the exit record */
			if (take > n)
				take = n;
			memcpy(o->hdr + o->hdr_have, p, take);
			o->hdr_have += take;
			p += take;
			n -= take;
			if (o->hdr_have < SBX_HELPER_FRAME_HDR)
				return 0;
			o->hdr_have = 0;
			o->ftype = sbx_helper_frame_check(o->hdr, &o->fleft);
			if (o->ftype < 0)
				return -1;
			o->rec_have = 0;
			continue;
		}
		{
			size_t take = o->fleft < n ? o->fleft : n;

			if (o->ftype == SBX_HELPER_FRAME_STDOUT ||
			    o->ftype == SBX_HELPER_FRAME_STDERR)
				exec_output(o, o->ftype, p, take);
			else {
				if (o->rec_have + take > sizeof(o->rec))
					return -1;
				memcpy(o->rec + o->rec_have, p, take);
				o->rec_have += take;
			}
			p += take;
			n -= take;
			o->fleft -= (uint32_t)take;
			if (o->fleft > 0)
				continue;
			if (o->ftype == SBX_HELPER_FRAME_EXIT) {
				if (sbx_helper_exit_decode(o->rec, &o->hx) != 0)
					return -1;
				o->have_exit = 1;
			} else if (o->ftype == SBX_HELPER_FRAME_ERROR) {
				json_t *j = json_loadb((const char *)o->rec,
				    o->rec_have, JSON_DISABLE_EOF_CHECK, NULL);
				json_t *er = json_object_get(j, "error");
				const char *c = json_string_value(json_object_get(er,
				    "code"));
				const char *m = json_string_value(json_object_get(er,
				    "message"));

				snprintf(o->err_code, sizeof(o->err_code), "%s",
				    c != NULL ? c : SBX_E_RUNTIME);
				snprintf(o->err_msg, sizeof(o->err_msg), "%s",
				    m != NULL ? m : "sbx-helper failed");
				json_decref(j);
				o->have_error = 1;
			}
			o->ftype = 0;
		}
	}
	return 0;
}

static const char *
sig_name(int s)
{
	static const char *const names[] = { NULL, "HUP", "INT", "QUIT", "ILL",
	    "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
	    "PIPE", "ALRM", "TERM" };

	return s > 0 && s < 16 ? names[s] : "KILL";
}

/* ---- stream callbacks ---- */

static void
s_output(void *arg, int fd, const unsigned char *buf, size_t len)
{
	struct kop *o = arg;
	struct sbx_err e;

	if (fd == 2) {
		if (o->errbuf != NULL && evbuffer_get_length(o->errbuf) < 8192)
			evbuffer_add(o->errbuf, buf, len);
		return;
	}
	switch (o->kind) {
	case K_EXEC:
		if (exec_frames(o, buf, len) != 0) {
			sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper broke its "
			    "frame protocol");
			end_err(o, &e);
			return;
		}
		if (o->truncated) {
			struct sbx_exit ex = { 137, "KILL", 0, 1, 0, 0 };

			sbx_agent_cancel(o->st);
			o->st = NULL;
			ex.duration_ms = sbx_mono_ms() - o->t0;
			o->sink.exit(o->sink.arg, &ex);
			kop_free(o);
		}
		return;
	case K_READ:
		if (o->total + (int64_t)len > o->k->file_max) {
			sbx_err_set(&e, SBX_E_TOO_LARGE, "the file is larger than "
			    "file_size_max");
			end_err(o, &e);
			return;
		}
		o->total += (int64_t)len;
		o->sink.output(o->sink.arg, 1, buf, len);
		return;
	case K_LIST:
		if (evbuffer_get_length(o->acc) + len > 64 * 1024 * 1024) {
			sbx_err_set(&e, SBX_E_RUNTIME, "the list is too long");
			end_err(o, &e);
			return;
		}
		evbuffer_add(o->acc, buf, len);
		return;
	default:
		return;
	}
}

static void
list_finish(struct kop *o)
{
	struct sbx_dirent *ents = NULL;
	size_t n = 0, cap = 0;
	int truncated = 0, end = 0;
	struct sbx_err e;
	char *line;
	size_t len;

	while ((line = evbuffer_readln(o->acc, &len, EVBUFFER_EOL_LF)) != NULL) {
		struct sbx_dirent d;
		int r = sbx_helper_list_line(line, len, &d, &truncated);

		free(line);
		if (r < 0 || end) {
			free(ents);
			sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper list printed "
			    "a bad line");
			end_err(o, &e);
			return;
		}
		if (r == 2) {
			end = 1;
			continue;
		}
		if (r == 0)
			continue;
		if (n == cap) {
			struct sbx_dirent *m = realloc(ents, (cap ? cap * 2 : 64) *
			    sizeof(*ents));

			if (m == NULL) {
				free(ents);
				sbx_err_oom(&e);
				end_err(o, &e);
				return;
			}
			ents = m;
			cap = cap ? cap * 2 : 64;
		}
		ents[n++] = d;
	}
	if (!end) {
		free(ents);
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper list ended early");
		end_err(o, &e);
		return;
	}
	o->list(o->arg, NULL, ents, n, truncated);
	free(ents);
	kop_free(o);
}

static void
s_exit(void *arg, const struct sbx_agent_exit *ax)
{
	struct kop *o = arg;
	struct sbx_err e;
	int code = ax->how == 1 ? ax->status : 128 + ax->sig;

	o->st = NULL;
	if (o->kind != K_EXEC) {
		if (code != 0) {
			helper_err(o, code, &e);
			end_err(o, &e);
			return;
		}
		if (o->kind == K_READ) {
			struct sbx_exit ex = { 0, NULL, 0, 0, 0, 0 };

			o->sink.exit(o->sink.arg, &ex);
			kop_free(o);
		} else if (o->kind == K_WRITE) {
			o->done(o->arg, NULL);
			kop_free(o);
		} else
			list_finish(o);
		return;
	}
	if (o->have_error && code == SBX_HELPER_EXEC_FAILED) {
		sbx_err_set(&e, o->err_code, "%s", o->err_msg);
		end_err(o, &e);
		return;
	}
	if (o->have_exit && o->hx.timed_out) {
		sbx_err_set(&e, SBX_E_TIMEOUT, "the command ran past its timeout "
		    "and was killed");
		end_err(o, &e);
		return;
	}
	if (!o->have_exit) {
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper ended without its exit "
		    "record (killed)");
		end_err(o, &e);
		return;
	}
	{
		struct sbx_exit ex = { 0, NULL, 0, 0, 0, 0 };

		if (o->hx.how == SBX_HELPER_EXIT_HOW_SIGNALED) {
			ex.code = 128 + o->hx.sig;
			ex.signal = sig_name(o->hx.sig);
		} else
			ex.code = o->hx.code;
		ex.duration_ms = sbx_mono_ms() - o->t0;
		o->sink.exit(o->sink.arg, &ex);
		kop_free(o);
	}
}

static void
s_error(void *arg, const struct sbx_err *err)
{
	struct kop *o = arg;

	o->st = NULL;
	end_err(o, err);
}

static void
pump_stdin(struct kop *o)
{
	ssize_t n;

	if (o->st == NULL || o->in == NULL)
		return;
	while (evbuffer_get_length(o->in) > 0) {
		n = sbx_agent_write_buffer(o->st, o->in, SBX_AGENT_DATA_MAX);
		if (n <= 0)
			return;
	}
	sbx_agent_close_stdin(o->st);
	evbuffer_free(o->in);
	o->in = NULL;
}

static void
s_room(void *arg)
{
	pump_stdin(arg);
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kop *o = arg;
	struct sbx_err e;

	(void)fd;
	(void)what;
	sbx_err_set(&e, SBX_E_TIMEOUT, "the command ran past its timeout and "
	    "was killed");
	end_err(o, &e);
}

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kop *o = arg;

	(void)fd;
	(void)what;
	if (o->early.code[0] != '\0') {
		struct sbx_err e = o->early;

		end_err(o, &e);
		return;
	}
	if (o->kind == K_EXEC && !o->started) {
		o->started = 1;
		if (o->sink.start != NULL)
			o->sink.start(o->sink.arg, o->exec_id);
	}
}

/* Opens the stream of argv for o; on a failure that must be reported
 * through the callbacks, o->early is set and the kick delivers it. */
static struct sbx_op *
kop_start(struct kop *o, const char *const *argv, const char *const *env,
    int with_stdin, struct sbx_err *err)
{
	struct sbx_agent_stream_cbs cbs = { s_output, s_exit, s_error, s_room, o };
	const struct kube_pod *p = kube_pod_find(o->k, o->id);
	struct sbx_agent_chan *ch;

	if ((o->kick = evtimer_new(o->k->drv.base, kick_cb, o)) == NULL ||
	    (o->errbuf = evbuffer_new()) == NULL) {
		kop_free(o);
		sbx_err_oom(err);
		return NULL;
	}
	o->t0 = sbx_mono_ms();
	sbx_err_clear(&o->early);
	if (p == NULL)
		sbx_err_set(&o->early, SBX_E_NOT_FOUND, "no sandbox %s", o->id);
	else if (p->lost)
		sbx_err_set(&o->early, SBX_E_NOT_RUNNING, "sandbox %s is lost "
		    "(its node stopped answering): ensure it again; /work "
		    "stays", o->id);
	else if (p->deleting || strcmp(p->phase, "Running") != 0)
		sbx_err_set(&o->early, SBX_E_NOT_RUNNING, "sandbox %s is not "
		    "running: ensure it first", o->id);
	else if ((ch = kube_chan_get(o->k, o->id, &o->early)) != NULL &&
	    (o->st = sbx_agent_open(ch, argv, env, with_stdin, &cbs,
	    &o->early)) != NULL)
		pump_stdin(o);
	event_active(o->kick, EV_TIMEOUT, 0);
	return &o->op;
}

static struct kop *
kop_new(struct sbx_driver *d, enum kind kind, const char *id,
    struct sbx_err *err)
{
	struct kop *o;

	if (!sbx_id_valid(id)) {
		sbx_err_bad_id(err);
		return NULL;
	}
	if ((o = calloc(1, sizeof(*o))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	o->op.driver = d;
	o->cls = KUBE_OP_RUN;
	o->k = (struct kube *)d;
	o->kind = kind;
	snprintf(o->id, sizeof(o->id), "%s", id);
	return o;
}

static int
path_ok(const char *path, struct sbx_err *err)
{
	return path != NULL && sbx_path_check(path, strlen(path), err) == 0;
}

struct sbx_op *
kube_exec(struct sbx_driver *d, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct kube *k = (struct kube *)d;
	const char **argv = NULL;
	char tms[32], idb[16];
	unsigned char rnd[12];
	struct sbx_op *r;
	struct kop *o;
	int64_t to;
	size_t n = 0, i, j = 0;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (req->cwd != NULL && !path_ok(req->cwd, err))
		return NULL;
	if (req->argv == NULL || req->argv[0] == NULL || req->argv[0][0] == '\0') {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "argv must name a command");
		return NULL;
	}
	to = req->timeout_ms > 0 ? req->timeout_ms : k->exec_to;
	if (req->timeout_ms > k->exec_to_max) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "timeout_ms is above the "
		    "ceiling %" PRId64, k->exec_to_max);
		return NULL;
	}
	if (req->output_cap > k->out_cap) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "output_cap is above the "
		    "ceiling %" PRId64, k->out_cap);
		return NULL;
	}
	if ((o = kop_new(d, K_EXEC, id, err)) == NULL)
		return NULL;
	o->sink = *sink;
	o->cap = req->output_cap > 0 ? req->output_cap : k->out_cap;
	randombytes_buf(rnd, sizeof(rnd));
	for (i = 0; i < sizeof(rnd); i++)
		snprintf(o->exec_id + 2 * i, 3, "%02x", rnd[i]);
	(void)idb;
	while (req->argv[n] != NULL)
		n++;
	if ((argv = calloc(n + 12, sizeof(*argv))) == NULL) {
		kop_free(o);
		return sbx_err_oom(err), NULL;
	}
	snprintf(tms, sizeof(tms), "%" PRId64, to + 2000);
	argv[j++] = SBX_HELPER_MODE_EXEC;
	argv[j++] = "--framed";
	argv[j++] = "--id";
	argv[j++] = o->exec_id;
	argv[j++] = "--timeout-ms";
	argv[j++] = tms;
	argv[j++] = "--cwd";
	argv[j++] = req->cwd != NULL ? req->cwd : SBX_WORK_DIR;
	argv[j++] = "--";
	for (i = 0; i < n; i++)
		argv[j++] = req->argv[i];
	argv[j] = NULL;
	if (req->stdin_data != NULL && ((o->in = evbuffer_new()) == NULL ||
	    evbuffer_add(o->in, req->stdin_data, req->stdin_len) != 0)) {
		free(argv);
		kop_free(o);
		return sbx_err_oom(err), NULL;
	}
	if ((o->timer = evtimer_new(k->drv.base, timeout_cb, o)) == NULL) {
		free(argv);
		kop_free(o);
		return sbx_err_oom(err), NULL;
	} else {
		struct timeval tv = { to / 1000, (to % 1000) * 1000 };

		evtimer_add(o->timer, &tv);
	}
	r = kop_start(o, argv, req->env, req->stdin_data != NULL, err);
	free(argv);
	return r;
}

struct sbx_op *
kube_read(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct kube *k = (struct kube *)d;
	const char *argv[5];
	char max[32];
	struct kop *o;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (!path_ok(path, err))
		return NULL;
	if ((o = kop_new(d, K_READ, id, err)) == NULL)
		return NULL;
	o->sink = *sink;
	snprintf(max, sizeof(max), "%" PRId64, k->file_max);
	argv[0] = SBX_HELPER_MODE_READ;
	argv[1] = path;
	argv[2] = "--max";
	argv[3] = max;
	argv[4] = NULL;
	return kop_start(o, argv, NULL, 0, err);
}

struct sbx_op *
kube_write(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct kube *k = (struct kube *)d;
	const char *argv[9];
	char max[32], size[32], m[8];
	struct kop *o;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (!path_ok(path, err))
		return NULL;
	if (mode > 0777) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "mode must be at most 0777");
		return NULL;
	}
	if ((int64_t)evbuffer_get_length(body) > k->file_max) {
		sbx_err_set(err, SBX_E_TOO_LARGE, "the body is larger than "
		    "file_size_max");
		return NULL;
	}
	if ((o = kop_new(d, K_WRITE, id, err)) == NULL)
		return NULL;
	o->done = cb;
	o->arg = arg;
	if ((o->in = evbuffer_new()) == NULL) {
		kop_free(o);
		return sbx_err_oom(err), NULL;
	}
	snprintf(size, sizeof(size), "%zu", evbuffer_get_length(body));
	evbuffer_add_buffer(o->in, body);
	snprintf(max, sizeof(max), "%" PRId64, k->file_max);
	snprintf(m, sizeof(m), "%o", mode != 0 ? mode : 0644);
	argv[0] = SBX_HELPER_MODE_WRITE;
	argv[1] = path;
	argv[2] = m;
	argv[3] = "--max";
	argv[4] = max;
	argv[5] = "--size";
	argv[6] = size;
	argv[7] = NULL;
	return kop_start(o, argv, NULL, 1, err);
}

struct sbx_op *
kube_list(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err)
{
	const char *argv[8];
	char lim[32], hex[2 * 255 + 1];
	struct kop *o;
	size_t j = 0, i, n;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (!path_ok(path, err))
		return NULL;
	if ((o = kop_new(d, K_LIST, id, err)) == NULL)
		return NULL;
	o->list = cb;
	o->arg = arg;
	if ((o->acc = evbuffer_new()) == NULL) {
		kop_free(o);
		return sbx_err_oom(err), NULL;
	}
	snprintf(lim, sizeof(lim), "%zu", page != NULL && page->limit > 0 &&
	    page->limit < SBX_HELPER_LIST_MAX ? page->limit : SBX_HELPER_LIST_MAX);
	argv[j++] = SBX_HELPER_MODE_LIST;
	argv[j++] = path;
	argv[j++] = "--limit";
	argv[j++] = lim;
	if (page != NULL && page->after != NULL && *page->after != '\0') {
		n = strlen(page->after);
		if (n > 255) {
			kop_free(o);
			sbx_err_set(err, SBX_E_BAD_REQUEST, "after is longer than "
			    "a name");
			return NULL;
		}
		for (i = 0; i < n; i++)
			snprintf(hex + 2 * i, 3, "%02x",
			    (unsigned char)page->after[i]);
		argv[j++] = "--after-hex";
		argv[j++] = hex;
	}
	argv[j] = NULL;
	return kop_start(o, argv, NULL, 0, err);
}

void
kube_run_cancel(struct sbx_op *op)
{
	struct kop *o = (struct kop *)op;

	if (o->st != NULL)
		sbx_agent_cancel(o->st);
	kop_free(o);
}

void
kube_run_pause(struct sbx_op *op, int on)
{
	struct kop *o = (struct kop *)op;

	if (o->st != NULL)
		sbx_agent_pause(o->st, on);
}
