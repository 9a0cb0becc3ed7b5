/*
 * driver_engine_files.c - the engine driver's file operations as sbx-helper
 * invocations: read, write, write_stream, list, du (status_usage) and
 * killall (recover), each a kind row (adr/0013, adr/0017, adr/0018, adr/0037).
 * It calls down into the invocation's core (driver_engine_run.c), the
 * runtime call layer and the op lifecycle; the driver's entry calls it.
 */
#include "driver_engine_int.h"

/* An entry's exact name: "name_b64" (the helper's form for bytes that are
 * not UTF-8) decoded, else "name". -1 for an entry without a usable name. */
static int
name_from_helper(json_t *o, char *out, size_t outsz)
{
	const char *b64 = json_string_value(json_object_get(o, "name_b64"));
	const char *name = json_string_value(json_object_get(o, "name"));
	size_t len = 0;

	if (b64 != NULL) {
		if (sodium_base642bin((unsigned char *)out, outsz - 1, b64,
		    strlen(b64), NULL, &len, NULL,
		    sodium_base64_VARIANT_ORIGINAL) != 0 || len == 0 ||
		    memchr(out, '\0', len) != NULL || memchr(out, '/', len) != NULL)
			return -1;
		out[len] = '\0';
		return 0;
	}
	/* '/' refused as for name_b64: a name is one path segment (fuzzing) */
	if (name == NULL || name[0] == '\0' || strlen(name) >= outsz ||
	    strchr(name, '/') != NULL)
		return -1;
	memcpy(out, name, strlen(name) + 1);
	/* readdir never gives these (the helper leaves out . and ..) */
	if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
		return -1;
	return 0;
}

/*
 * One line of `sbx-helper list` (sbx_helper_proto.h): an entry, or the end
 * line. Untrusted: a line that is not one of the two marks the listing bad;
 * entries beyond the page's limit or after the end line too.
 */
int
sbx_helper_list_line(const char *line, size_t len, struct sbx_dirent *d,
    int *truncated)
{
	json_t *o;
	const char *t;
	int rc = -1;

	memset(d, 0, sizeof(*d));
	if (line == NULL || len > LIST_LINE_MAX)
		return -1;
	o = json_loadb(line, len, 0, NULL);
	if (!json_is_object(o))
		goto done;
	if (json_object_get(o, "end") != NULL) {
		if (!json_is_true(json_object_get(o, "end")))
			goto done;
		*truncated = json_is_true(json_object_get(o, "truncated"));
		rc = 2;
		goto done;
	}
	rc = 0;
	if (name_from_helper(o, d->name, sizeof(d->name)) < 0)
		goto done;   /* an entry without a usable name: left out */
	t = eng_jstr(o, "type");
	d->type = strcmp(t, "file") == 0 ? "file" : strcmp(t, "dir") == 0 ?
	    "dir" : strcmp(t, "symlink") == 0 ? "symlink" : "other";
	d->size = json_integer_value(json_object_get(o, "size"));
	d->mode = (uint32_t)json_integer_value(json_object_get(o, "mode")) & 07777;
	d->mtime = json_integer_value(json_object_get(o, "mtime"));
	rc = 1;
done:
	json_decref(o);
	return rc;
}

/*
 * One line of `sbx-helper list` into op's page. Untrusted: a line that is
 * neither an entry nor the end line marks the listing bad; entries beyond
 * the page's limit or after the end line too.
 */
static void
list_line(struct eop *op, const char *line, size_t len)
{
	struct eop_list *l = lso(op);
	struct sbx_dirent d;
	int r, trunc = 0;

	if (l->list_bad)
		return;
	r = sbx_helper_list_line(line, len, &d, &trunc);
	if (r < 0 || l->list_end || (r == 1 && l->nents >= l->list_limit)) {
		l->list_bad = 1;
		return;
	}
	if (r == 2) {
		l->list_end = 1;
		l->list_trunc = trunc;
		return;
	}
	if (r == 0)
		return;
	if (l->nents == l->ents_cap) {
		size_t cap = l->ents_cap ? l->ents_cap * 2 : 256;
		struct sbx_dirent *n;

		if (cap > l->list_limit)
			cap = l->list_limit;
		if ((n = realloc(l->ents, cap * sizeof(*n))) == NULL) {
			l->list_bad = 1;
			return;
		}
		l->ents = n;
		l->ents_cap = cap;
	}
	l->ents[l->nents++] = d;
}

/* Parses the complete lines of the op's out; a line over LIST_LINE_MAX
 * is bad. The list's got_out: parsed as it comes, never one big parse. */
static void
list_lines(struct eop *op)
{
	struct eop_exec *x = xop(op);
	struct evbuffer_ptr p;
	size_t n, eol;
	char line[LIST_LINE_MAX + 1];

	for (;;) {
		p = evbuffer_search_eol(x->out, NULL, &eol, EVBUFFER_EOL_LF);
		if (p.pos < 0) {
			if (evbuffer_get_length(x->out) > LIST_LINE_MAX) {
				lso(op)->list_bad = 1;
				evbuffer_drain(x->out, evbuffer_get_length(x->out));
			}
			return;
		}
		n = (size_t)p.pos;
		if (n > LIST_LINE_MAX) {
			lso(op)->list_bad = 1;
			evbuffer_drain(x->out, n + eol);
			continue;
		}
		evbuffer_remove(x->out, line, n);
		evbuffer_drain(x->out, eol);
		list_line(op, line, n);
	}
}

/* ---------- the kinds ---------- */

static void read_exited(struct eop *op, int code);
static void read_over_cap(struct eop *op);
static void done_exited(struct eop *op, int code);
static void list_exited(struct eop *op, int code);
static void list_fail(struct eop *op, const struct sbx_err *err);
static void list_fini(struct eop *op);
static void usage_exited(struct eop *op, int code);
static int usage_target(struct eop *op, int r, const struct sbx_status *st);
static int recover_target(struct eop *op, int r, const struct sbx_status *st);

/* read: the file streamed to the sink, pausable, within file_max */
static const struct eng_kind read_kind = {
	.name = "file read",
	.flags = EK_RUN,
	.fail = eng_finish_sink_error,
	.let_go = eng_src_detach,
	.fini = eng_run_fini,
	.cancel = eng_run_cancel,
	.pause = eng_run_pause,
	.exited = read_exited,
	.over_cap = read_over_cap,
};

/* write, write_stream: the body (or a lent source) as stdin */
static const struct eng_kind write_kind = {
	.name = "file write",
	.flags = EK_RUN | EK_KEEP_OUT,
	.fail = eng_finish_done,
	.let_go = eng_src_detach,
	.fini = eng_run_fini,
	.cancel = eng_run_cancel,
	.exited = done_exited,
};

/* list: a page of entries parsed line by line */
static const struct eng_kind list_kind = {
	.name = "directory listing",
	.flags = EK_RUN | EK_KEEP_OUT,
	.fail = list_fail,
	.let_go = eng_src_detach,
	.fini = list_fini,
	.cancel = eng_run_cancel,
	.exited = list_exited,
	.got_out = list_lines,
};

/* status_usage: a runtime exec also with the agent on, since the inspect
 * answers the status of a sandbox that is not running (adr/0017) */
static const struct eng_kind usage_kind = {
	.name = "usage walk",
	.flags = EK_RUN | EK_KEEP_OUT | EK_RUNTIME_EXEC,
	.fail = eng_fail_status,
	.let_go = eng_src_detach,
	.fini = eng_run_fini,
	.cancel = eng_run_cancel,
	.exited = usage_exited,
	.target = usage_target,
};

/* recover: killall; a sandbox not running has no process left */
static const struct eng_kind recover_kind = {
	.name = "killall",
	.flags = EK_RUN | EK_KEEP_OUT,
	.fail = eng_finish_done,
	.let_go = eng_src_detach,
	.fini = eng_run_fini,
	.exited = done_exited,
	.target = recover_target,
};

static void
list_fail(struct eop *op, const struct sbx_err *err)
{
	if (op->cb.list != NULL)
		op->cb.list(op->arg, err, NULL, 0, 0);
	eng_op_release(op);
}

static void
list_fini(struct eop *op)
{
	eng_run_fini(op);
	free(lso(op)->ents);
}

/* Appends a file op's path to its helper argv; on failure frees op. */
static int
cmd_path(struct eop *op, const char *path, struct sbx_err *err)
{
	if (json_array_append_new(xop(op)->cmd, json_string(path)) < 0) {
		eng_op_free(op);
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "path must be UTF-8");
		return -1;
	}
	return 0;
}

/* The end of read and list: "--id EXEC_ID" (the kill handle), the progress
 * timer, then the helper run; on failure frees op and returns NULL. */
static struct sbx_op *
file_op_start(struct eop *op, struct sbx_err *err)
{
	json_array_append_new(xop(op)->cmd, json_string("--id"));
	json_array_append_new(xop(op)->cmd, json_string(xop(op)->exec_id));
	if (eng_progress_new(op) < 0) {
		eng_op_free(op);
		sbx_err_oom(err);
		return NULL;
	}
	eng_helper_run(op);
	return &op->base;
}

static void
read_exited(struct eop *op, int code)
{
	struct eop_exec *x = xop(op);
	struct sbx_exit ex;

	if (eng_helper_failed(op, code))
		return;
	memset(&ex, 0, sizeof(ex));
	ex.duration_ms = sbx_mono_ms() - x->started_ms;
	if (x->sink.exit != NULL)
		x->sink.exit(x->sink.arg, &ex);
	eng_op_release(op);
}

/* The file is larger than the cap: too_large, and its helper killed. */
static void
read_over_cap(struct eop *op)
{
	struct sbx_err e;

	sbx_err_set(&e, SBX_E_TOO_LARGE, SBX_MSG_FILE_TOO_LARGE,
	    (long long)(xop(op)->cap - 1));
	eng_start_kill(op->e, op->id, op->cid, xop(op)->exec_id, NULL);
	eng_finish_err(op, &e);
}

/* recover's inspect: no container, or a stop killed everything. */
static int
recover_target(struct eop *op, int r, const struct sbx_status *st)
{
	(void)st;
	if (r != 0)
		return 0;
	eng_finish_done(op, NULL);
	return 1;
}

/* write, killall: the exit status is the answer. */
static void
done_exited(struct eop *op, int code)
{
	if (!eng_helper_failed(op, code))
		eng_finish_done(op, NULL);
}

/* A write or killall op: answered by cb with the exit status, timeout_ms
 * for the helper run, ERRTAIL_MAX of error tail. NULL with err set. */
static struct eop *
done_op_new(struct engine *e, const struct eng_kind *kind, const char *id, size_t size,
    int64_t timeout_ms, sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct eop *op;

	if ((op = eng_helper_op(e, kind, id, size, err)) == NULL)
		return NULL;
	op->cb.done = cb;
	op->arg = arg;
	xop(op)->cap = ERRTAIL_MAX;
	xop(op)->timeout_ms = timeout_ms;
	return op;
}

static void
list_exited(struct eop *op, int code)
{
	struct eop_list *l = lso(op);
	struct sbx_err e;

	if (eng_helper_failed(op, code))
		return;
	list_lines(op);
	if (l->x.truncated || l->list_bad || !l->list_end ||
	    evbuffer_get_length(l->x.out) > 0) {
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper list gave "
		    "no well-formed page");
		eng_finish_err(op, &e);
		return;
	}
	if (op->cb.list != NULL)
		op->cb.list(op->arg, NULL, l->ents, l->nents, l->list_trunc);
	eng_op_release(op);
}

struct sbx_op *
eng_read(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char num[32];

	if (eng_id_check(id, err) < 0)
		return NULL;
	if (sink == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "read needs a sink");
		return NULL;
	}
	if (eng_path_check(path, err) < 0)
		return NULL;
	if ((op = eng_helper_op(e, &read_kind, id, sizeof(struct eop_exec),
	    err)) == NULL)
		return NULL;
	xop(op)->sink = *sink;
	xop(op)->cap = e->file_max + 1;   /* the helper refuses above file_max */
	xop(op)->cmd = eng_helper_cmd("read");
	snprintf(num, sizeof(num), "%" PRId64, e->file_max);
	if (cmd_path(op, path, err) < 0)
		return NULL;
	json_array_append_new(xop(op)->cmd, json_string("--max"));
	json_array_append_new(xop(op)->cmd, json_string(num));
	/* A timer on progress, not on the whole read: a slow reader may hold
	 * a paused stream (the timer stops while paused), a stalled helper
	 * may not. */
	return file_op_start(op, err);
}

/* write (body whole) or write_stream (src, len bytes, arriving). */
static struct sbx_op *
write_common(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, struct evbuffer *src, uint64_t len,
    sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char num[32], mstr[16], snum[32];

	if (eng_id_check(id, err) < 0)
		return NULL;
	if (eng_path_check(path, err) < 0)
		return NULL;
	if (mode == 0)
		mode = 0644;
	if (mode > 0777) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "mode must be at most 0777");
		return NULL;
	}
	if (body != NULL)
		len = evbuffer_get_length(body);
	if (len > (uint64_t)e->file_max) {
		sbx_err_set(err, SBX_E_TOO_LARGE, SBX_MSG_FILE_TOO_LARGE,
		    (long long)e->file_max);
		return NULL;
	}
	if ((op = done_op_new(e, &write_kind, id, sizeof(struct eop_exec),
	    e->timeout.ceiling, cb, arg, err)) == NULL)
		return NULL;
	xop(op)->has_stdin = 1;
	if ((xop(op)->stdin_buf = evbuffer_new()) == NULL) {
		eng_op_free(op);
		sbx_err_oom(err);
		return NULL;
	}
	if (body != NULL)
		evbuffer_add_buffer(xop(op)->stdin_buf, body);
	xop(op)->cmd = eng_helper_cmd("write");
	snprintf(num, sizeof(num), "%" PRId64, e->file_max);
	snprintf(mstr, sizeof(mstr), "0%o", (unsigned)mode);
	if (cmd_path(op, path, err) < 0)
		return NULL;
	json_array_append_new(xop(op)->cmd, json_string(mstr));
	json_array_append_new(xop(op)->cmd, json_string("--max"));
	json_array_append_new(xop(op)->cmd, json_string(num));
	json_array_append_new(xop(op)->cmd, json_string("--id"));
	json_array_append_new(xop(op)->cmd, json_string(xop(op)->exec_id));
	/* The helper renames only when exactly len bytes came (a body cut
	 * short never replaces the file). */
	snprintf(snum, sizeof(snum), "%" PRIu64, len);
	json_array_append_new(xop(op)->cmd, json_string("--size"));
	json_array_append_new(xop(op)->cmd, json_string(snum));
	if (eng_progress_new(op) < 0) {
		eng_op_free(op);
		sbx_err_oom(err);
		return NULL;
	}
	if (src != NULL) {
		if (eng_src_lend(op, src, len) < 0) {
			eng_op_free(op);
			sbx_err_oom(err);
			return NULL;
		}
	}
	eng_helper_run(op);
	return &op->base;
}

struct sbx_op *
eng_write(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return write_common(d, id, path, mode, body, NULL, 0, cb, arg, err);
}

struct sbx_op *
eng_write_stream(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *src, uint64_t len, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	return write_common(d, id, path, mode, NULL, src, len, cb, arg, err);
}

struct sbx_op *
eng_list(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	size_t limit = page != NULL && page->limit > 0 ? page->limit :
	    SBX_HELPER_LIST_MAX, i, an;
	char num[32];

	if (eng_id_check(id, err) < 0)
		return NULL;
	if (eng_path_check(path, err) < 0)
		return NULL;
	if (limit > SBX_HELPER_LIST_MAX)
		limit = SBX_HELPER_LIST_MAX;
	an = page != NULL && page->after != NULL ? strlen(page->after) : 0;
	if (page != NULL && page->after != NULL && (an == 0 || an > 255 ||
	    strchr(page->after, '/') != NULL)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "the cursor does not name a "
		    "directory entry");
		return NULL;
	}
	if ((op = eng_helper_op(e, &list_kind, id, sizeof(struct eop_list),
	    err)) == NULL)
		return NULL;
	op->cb.list = cb;
	op->arg = arg;
	lso(op)->list_limit = limit;
	/* An entry line is at most ~1.4 KiB (255-byte name, escaped, and
	 * its base64): the page's output has a bound. */
	xop(op)->cap = (int64_t)limit * 1536 + 4096;
	xop(op)->cmd = eng_helper_cmd("list");
	if (cmd_path(op, path, err) < 0)
		return NULL;
	snprintf(num, sizeof(num), "%zu", limit);
	json_array_append_new(xop(op)->cmd, json_string("--limit"));
	json_array_append_new(xop(op)->cmd, json_string(num));
	if (an > 0) {
		for (i = 0; i < an; i++)
			snprintf(lso(op)->after_hex + 2 * i, 3, "%02x",
			    (unsigned char)page->after[i]);
		json_array_append_new(xop(op)->cmd, json_string("--after-hex"));
		json_array_append_new(xop(op)->cmd, json_string(lso(op)->after_hex));
	}
	return file_op_start(op, err);
}

/* ---------- status with /work usage (adr/0017) ---------- */

/* The container inspected (r: 1 running, 0 stopped or absent): keeps its
 * status for the walk; a sandbox not running is answered here, uncounted.
 * Returns 1 when op has been finished. The usage kind's target. */
static int
usage_target(struct eop *op, int r, const struct sbx_status *st)
{
	struct sbx_status a;

	if (r == 1) {
		uso(op)->ust = *st;
		return 0;
	}
	if (st->state == SBX_STATE_ABSENT) {
		eng_absent_status(op, &a);
		st = &a;
	}
	eng_finish_status(op, NULL, st);
	return 1;
}

/* The helper's one line (sbx_helper_proto.h, du) into u; untrusted. */
static int
usage_parse(struct eop *op, struct sbx_usage *u)
{
	struct sbx_err e;
	json_t *o;
	int rc;

	o = json_loadb((const char *)evbuffer_pullup(xop(op)->out, -1),
	    evbuffer_get_length(xop(op)->out), 0, NULL);
	rc = o != NULL && !json_is_null(o) ? sbx_usage_from_json(o, u, &e) : -1;
	json_decref(o);
	return rc;
}

static void
usage_exited(struct eop *op, int code)
{
	struct sbx_err e;

	if (code != 0) {
		eng_helper_error(op, code, &e);
		eng_finish_err(op, &e);
		return;
	}
	if (xop(op)->truncated || usage_parse(op, &uso(op)->ust.usage) < 0) {
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper du gave no usable "
		    "answer");
		eng_finish_err(op, &e);
		return;
	}
	eng_finish_status(op, NULL, &uso(op)->ust);
}

/* `sbx-helper du --max N --timeout-ms T`: the helper stops itself at T and
 * says partial; the driver's timer (T + grace) only catches a helper that
 * does not answer. */
struct sbx_op *
eng_status_usage(struct sbx_driver *d, const char *id, sbx_status_cb cb,
    void *arg, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char num[32];

	if (eng_id_check(id, err) < 0)
		return NULL;
	if ((op = eng_helper_op(e, &usage_kind, id, sizeof(struct eop_usage),
	    err)) == NULL)
		return NULL;
	op->cb.status = cb;
	op->arg = arg;
	xop(op)->cap = ERRTAIL_MAX;
	xop(op)->timeout_ms = e->usage_timeout_ms + HELPER_GRACE_MS;
	xop(op)->cmd = eng_helper_cmd(SBX_HELPER_MODE_DU);
	/* A kill handle: a cancel or the timer ends the walk too. */
	json_array_append_new(xop(op)->cmd, json_string("--id"));
	json_array_append_new(xop(op)->cmd, json_string(xop(op)->exec_id));
	snprintf(num, sizeof(num), "%" PRId64, e->usage_max);
	json_array_append_new(xop(op)->cmd, json_string("--max"));
	json_array_append_new(xop(op)->cmd, json_string(num));
	snprintf(num, sizeof(num), "%" PRId64, e->usage_timeout_ms);
	json_array_append_new(xop(op)->cmd, json_string("--timeout-ms"));
	json_array_append_new(xop(op)->cmd, json_string(num));
	eng_helper_run(op);
	return &op->base;
}

/* ---------- recover ---------- */

/* `sbx-helper killall`: SIGKILLs every exec group the helper recorded in
 * the sandbox's /tmp (sbx_helper_proto.h), i.e. execs of a broker that
 * died without cancelling them. */
struct sbx_op *
eng_recover(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;

	if ((op = done_op_new(e, &recover_kind, id, sizeof(struct eop_exec),
	    KILL_TIMEOUT_MS, cb, arg, err)) == NULL)
		return NULL;
	if ((xop(op)->cmd = eng_helper_cmd("killall")) == NULL) {
		eng_op_free(op);
		sbx_err_oom(err);
		return NULL;
	}
	eng_helper_run(op);
	return &op->base;
}
