/* sbx_call.c - the call layer over the driver vtable: check once, log, count, call (adr/0024). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"

static struct sbx_call_counts counts;

static const char *const op_names[SBX_CALL_NOPS] = {
	[SBX_CALL_ENSURE] = "ensure",
	[SBX_CALL_STATUS] = "status",
	[SBX_CALL_STATUS_USAGE] = "status_usage",
	[SBX_CALL_EXEC] = "exec",
	[SBX_CALL_READ] = "read",
	[SBX_CALL_WRITE] = "write",
	[SBX_CALL_WRITE_STREAM] = "write_stream",
	[SBX_CALL_LIST] = "list",
	[SBX_CALL_STOP] = "stop",
	[SBX_CALL_DESTROY] = "destroy",
	[SBX_CALL_LIST_SANDBOXES] = "list_sandboxes",
	[SBX_CALL_HEALTH] = "health",
	[SBX_CALL_RECOVER] = "recover",
	[SBX_CALL_RECONCILE] = "reconcile",
	[SBX_CALL_EGRESS_STATS] = "egress_stats",
	[SBX_CALL_SNAPSHOT_CREATE] = "snapshot_create",
	[SBX_CALL_SNAPSHOT_LIST] = "snapshot_list",
	[SBX_CALL_SNAPSHOT_DELETE] = "snapshot_delete",
	[SBX_CALL_SNAPSHOT_COPY] = "snapshot_copy",
};

const char *
sbx_call_driver_name(const struct sbx_driver *d)
{
	if (d == NULL || d->ops == NULL || d->ops->name == NULL)
		return "";
	return d->ops->name;
}

int
sbx_call_supports(const struct sbx_driver *d, enum sbx_call_op op)
{
	if (d == NULL || d->ops == NULL || (int)op < 0 || op >= SBX_CALL_NOPS)
		return 0;
	switch (op) {
	case SBX_CALL_STATUS_USAGE:
		return d->ops->status_usage != NULL;
	case SBX_CALL_WRITE_STREAM:
		return d->ops->write_stream != NULL;
	case SBX_CALL_RECOVER:
		return d->ops->recover != NULL;
	case SBX_CALL_RECONCILE:
		return d->ops->reconcile != NULL;
	case SBX_CALL_EGRESS_STATS:
		return d->ops->egress_stats != NULL;
	case SBX_CALL_SNAPSHOT_CREATE:
		return d->ops->snapshot_create != NULL;
	case SBX_CALL_SNAPSHOT_LIST:
		return d->ops->snapshot_list != NULL;
	case SBX_CALL_SNAPSHOT_DELETE:
		return d->ops->snapshot_delete != NULL;
	case SBX_CALL_SNAPSHOT_COPY:
		return d->ops->snapshot_copy != NULL;
	default:
		return 1;
	}
}

void
sbx_call_counts(struct sbx_call_counts *out)
{
	if (out != NULL)
		*out = counts;
}

/*
 * Step 1 and 2 of sbx_call.h: returns 0 when the call may go to the
 * driver, else -1 with err set (and counted). id NULL means "no id" for the
 * ops that take none; path and cwd are checked when has_path/has_cwd.
 */
static int
check(struct sbx_driver *d, enum sbx_call_op op, const char *id, int has_id,
    const char *path, int has_path, struct sbx_err *err)
{
	counts.calls[op]++;
	log_debug("driver call", "driver", sbx_call_driver_name(d),
	    "op", op_names[op], "id", has_id && id != NULL ? id : "", NULL);
	/* write_stream without the driver's own: gathered here (below). */
	if (op >= SBX_CALL_SNAPSHOT_CREATE && !sbx_call_supports(d, op)) {
		sbx_err_set(err, SBX_E_UNSUPPORTED, "this sandbox driver (%s) "
		    "does not support snapshots", sbx_call_driver_name(d));
		goto refused;
	}
	if (op != SBX_CALL_WRITE_STREAM && !sbx_call_supports(d, op)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The %s driver has no %s "
		    "operation.", sbx_call_driver_name(d), op_names[op]);
		goto refused;
	}
	if (has_id && !sbx_id_valid(id)) {
		sbx_err_bad_id(err);
		goto refused;
	}
	if (has_path) {
		if (path == NULL) {
			sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "A path is "
			    "required.");
			goto refused;
		}
		if (sbx_path_check(path, strlen(path), err) == -1)
			goto refused;
	}
	return 0;
refused:
	counts.checks_failed++;
	return -1;
}

static int
refuse(struct sbx_driver *d, enum sbx_call_op op, struct sbx_err *err,
    const char *fmt)
{
	counts.calls[op]++;
	counts.checks_failed++;
	log_debug("driver call", "driver", sbx_call_driver_name(d),
	    "op", op_names[op], NULL);
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s", fmt);
}

/* Step 3 and 4 after the driver answered (or check refused). */
static struct sbx_op *
done(struct sbx_driver *d, enum sbx_call_op op, struct sbx_op *h,
    const struct sbx_err *err)
{
	if (h == NULL) {
		counts.refused[op]++;
		log_debug("driver call refused", "driver",
		    sbx_call_driver_name(d), "op", op_names[op], "code",
		    err != NULL ? err->code : "", NULL);
	}
	return h;
}

struct sbx_op *
sbx_call_ensure(struct sbx_driver *d, const char *id,
    const struct sbx_spec *spec, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	if (check(d, SBX_CALL_ENSURE, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_ENSURE, NULL, err);
	return done(d, SBX_CALL_ENSURE,
	    d->ops->ensure(d, id, spec, cb, arg, err), err);
}

struct sbx_op *
sbx_call_status(struct sbx_driver *d, const char *id, sbx_status_cb cb,
    void *arg, struct sbx_err *err)
{
	if (check(d, SBX_CALL_STATUS, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_STATUS, NULL, err);
	return done(d, SBX_CALL_STATUS, d->ops->status(d, id, cb, arg, err),
	    err);
}

struct sbx_op *
sbx_call_status_usage(struct sbx_driver *d, const char *id,
    sbx_status_cb cb, void *arg, struct sbx_err *err)
{
	if (check(d, SBX_CALL_STATUS_USAGE, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_STATUS_USAGE, NULL, err);
	return done(d, SBX_CALL_STATUS_USAGE,
	    d->ops->status_usage(d, id, cb, arg, err), err);
}

struct sbx_op *
sbx_call_exec(struct sbx_driver *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    struct sbx_err *err)
{
	return sbx_call_exec_lines(d, id, req, sink, NULL, err);
}

struct sbx_op *
sbx_call_exec_lines(struct sbx_driver *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    sbx_line_cb line, struct sbx_err *err)
{
	if (req == NULL || req->argv == NULL || req->argv[0] == NULL ||
	    sink == NULL) {
		refuse(d, SBX_CALL_EXEC, err, req == NULL || sink == NULL ?
		    "An exec needs a request and a sink." :
		    "An exec needs argv[0].");
		return done(d, SBX_CALL_EXEC, NULL, err);
	}
	if (check(d, SBX_CALL_EXEC, id, 1, req->cwd, req->cwd != NULL,
	    err) == -1)
		return done(d, SBX_CALL_EXEC, NULL, err);
	if (line != NULL && d->ops->exec_lines != NULL)
		return done(d, SBX_CALL_EXEC, d->ops->exec_lines(d, id, req,
		    sink, line, err), err);
	return done(d, SBX_CALL_EXEC, d->ops->exec(d, id, req, sink, err),
	    err);
}

struct sbx_op *
sbx_call_read(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	if (sink == NULL) {
		refuse(d, SBX_CALL_READ, err, "A read needs a sink.");
		return done(d, SBX_CALL_READ, NULL, err);
	}
	if (check(d, SBX_CALL_READ, id, 1, path, 1, err) == -1)
		return done(d, SBX_CALL_READ, NULL, err);
	return done(d, SBX_CALL_READ, d->ops->read(d, id, path, sink, err),
	    err);
}

struct sbx_op *
sbx_call_write(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	if (body == NULL) {
		refuse(d, SBX_CALL_WRITE, err, "A write needs a body.");
		return done(d, SBX_CALL_WRITE, NULL, err);
	}
	if (check(d, SBX_CALL_WRITE, id, 1, path, 1, err) == -1)
		return done(d, SBX_CALL_WRITE, NULL, err);
	return done(d, SBX_CALL_WRITE,
	    d->ops->write(d, id, path, mode, body, cb, arg, err), err);
}

/*
 * write_stream on a driver without one (the unit tests' fake): the len
 * bytes are gathered in src, then go to write whole. The handle the caller
 * holds is the gather's: its driver is gather_drv, whose cancel stops the
 * gather or the write it started, so the caller cannot tell the two paths
 * apart (sbx_driver.h rules: one terminal callback, none after cancel).
 */
struct gather {
	struct sbx_op op;        /* first: what the caller holds */
	struct sbx_driver self;  /* op.driver: ops = gather_ops */
	struct sbx_driver *d;    /* the driver the write goes to */
	struct sbx_op *write;    /* the write, once started; NULL before */
	struct evbuffer *src;
	uint64_t len;
	uint32_t mode;
	sbx_done_cb cb;
	void *arg;
	char id[SBX_ID_MAX_LEN + 1];
	char *path;
};

static void gather_cb(struct evbuffer *buf,
    const struct evbuffer_cb_info *info, void *arg);

static void
gather_free(struct gather *g)
{
	free(g->path);
	free(g);
}

static void
gather_cancel(struct sbx_driver *self, struct sbx_op *op)
{
	struct gather *g = (struct gather *)op;

	(void)self;
	if (g->write != NULL)
		sbx_op_cancel(g->write);
	else
		evbuffer_remove_cb(g->src, gather_cb, g);
	gather_free(g);
}

static void
gather_pause(struct sbx_driver *self, struct sbx_op *op)
{
	(void)self;
	sbx_op_pause(((struct gather *)op)->write);
}

static void
gather_resume(struct sbx_driver *self, struct sbx_op *op)
{
	(void)self;
	sbx_op_resume(((struct gather *)op)->write);
}

static const struct sbx_driver_ops gather_ops = {
	.name = "gather",
	.cancel = gather_cancel,
	.pause = gather_pause,
	.resume = gather_resume,
};

static void
gather_done(void *arg, const struct sbx_err *err)
{
	struct gather *g = arg;

	g->write = NULL;
	g->cb(g->arg, err);
	gather_free(g);
}

static void
gather_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct gather *g = arg;
	struct sbx_err err;

	if (info->n_added == 0 || (uint64_t)evbuffer_get_length(buf) < g->len)
		return;
	evbuffer_remove_cb(buf, gather_cb, g);
	sbx_err_clear(&err);
	g->write = sbx_call_write(g->d, g->id, g->path, g->mode, buf,
	    gather_done, g, &err);
	if (g->write == NULL) {
		/* Refused after the call returned: the terminal callback. */
		g->cb(g->arg, &err);
		gather_free(g);
	}
}

static struct sbx_op *
gather_start(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *src, uint64_t len, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	struct gather *g;

	if ((uint64_t)evbuffer_get_length(src) >= len)
		return sbx_call_write(d, id, path, mode, src, cb, arg, err);
	if ((g = calloc(1, sizeof(*g))) == NULL ||
	    (g->path = strdup(path)) == NULL) {
		free(g);
		sbx_err_oom(err);
		return NULL;
	}
	g->self.ops = &gather_ops;
	g->self.base = d->base;
	g->op.driver = &g->self;
	g->d = d;
	g->src = src;
	g->len = len;
	g->mode = mode;
	g->cb = cb;
	g->arg = arg;
	snprintf(g->id, sizeof(g->id), "%s", id);
	if (evbuffer_add_cb(src, gather_cb, g) == NULL) {
		gather_free(g);
		sbx_err_oom(err);
		return NULL;
	}
	return &g->op;
}

struct sbx_op *
sbx_call_write_stream(struct sbx_driver *d, const char *id,
    const char *path, uint32_t mode, struct evbuffer *src, uint64_t len,
    sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	if (src == NULL) {
		refuse(d, SBX_CALL_WRITE_STREAM, err, "A write needs a source.");
		return done(d, SBX_CALL_WRITE_STREAM, NULL, err);
	}
	if (check(d, SBX_CALL_WRITE_STREAM, id, 1, path, 1, err) == -1)
		return done(d, SBX_CALL_WRITE_STREAM, NULL, err);
	if (d->ops->write_stream == NULL)
		return done(d, SBX_CALL_WRITE_STREAM, gather_start(d, id, path,
		    mode, src, len, cb, arg, err), err);
	return done(d, SBX_CALL_WRITE_STREAM,
	    d->ops->write_stream(d, id, path, mode, src, len, cb, arg, err),
	    err);
}

struct sbx_op *
sbx_call_list(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err)
{
	if (page == NULL || page->limit == 0) {
		refuse(d, SBX_CALL_LIST, err, "A list needs a page of at "
		    "least one entry.");
		return done(d, SBX_CALL_LIST, NULL, err);
	}
	if (check(d, SBX_CALL_LIST, id, 1, path, 1, err) == -1)
		return done(d, SBX_CALL_LIST, NULL, err);
	return done(d, SBX_CALL_LIST,
	    d->ops->list(d, id, path, page, cb, arg, err), err);
}

struct sbx_op *
sbx_call_stop(struct sbx_driver *d, const char *id, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	if (check(d, SBX_CALL_STOP, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_STOP, NULL, err);
	return done(d, SBX_CALL_STOP, d->ops->stop(d, id, cb, arg, err), err);
}

struct sbx_op *
sbx_call_destroy(struct sbx_driver *d, const char *id, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	if (check(d, SBX_CALL_DESTROY, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_DESTROY, NULL, err);
	return done(d, SBX_CALL_DESTROY, d->ops->destroy(d, id, cb, arg, err),
	    err);
}

struct sbx_op *
sbx_call_list_sandboxes(struct sbx_driver *d, sbx_sandboxes_cb cb, void *arg,
    struct sbx_err *err)
{
	if (check(d, SBX_CALL_LIST_SANDBOXES, NULL, 0, NULL, 0, err) == -1)
		return done(d, SBX_CALL_LIST_SANDBOXES, NULL, err);
	return done(d, SBX_CALL_LIST_SANDBOXES,
	    d->ops->list_sandboxes(d, cb, arg, err), err);
}

struct sbx_op *
sbx_call_health(struct sbx_driver *d, sbx_health_cb cb, void *arg,
    struct sbx_err *err)
{
	if (check(d, SBX_CALL_HEALTH, NULL, 0, NULL, 0, err) == -1)
		return done(d, SBX_CALL_HEALTH, NULL, err);
	return done(d, SBX_CALL_HEALTH, d->ops->health(d, cb, arg, err), err);
}

struct sbx_op *
sbx_call_recover(struct sbx_driver *d, const char *id, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	if (check(d, SBX_CALL_RECOVER, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_RECOVER, NULL, err);
	return done(d, SBX_CALL_RECOVER, d->ops->recover(d, id, cb, arg, err),
	    err);
}

struct sbx_op *
sbx_call_reconcile(struct sbx_driver *d, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	if (check(d, SBX_CALL_RECONCILE, NULL, 0, NULL, 0, err) == -1)
		return done(d, SBX_CALL_RECONCILE, NULL, err);
	return done(d, SBX_CALL_RECONCILE, d->ops->reconcile(d, cb, arg, err),
	    err);
}

struct sbx_op *
sbx_call_egress_stats(struct sbx_driver *d, const char *id, sbx_json_cb cb,
    void *arg, struct sbx_err *err)
{
	if (check(d, SBX_CALL_EGRESS_STATS, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_EGRESS_STATS, NULL, err);
	return done(d, SBX_CALL_EGRESS_STATS, d->ops->egress_stats(d, id, cb, arg,
	    err), err);
}

/* ---------- snapshots (adr/0068) ---------- */

static int
snap_name_check(const char *name, struct sbx_err *err)
{
	if (sbx_snapshot_name_valid(name))
		return 0;
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s", SBX_MSG_BAD_SNAPSHOT);
}

struct sbx_op *
sbx_call_snapshot_create(struct sbx_driver *d, const char *id,
    const struct sbx_snapshot_req *req, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	if (check(d, SBX_CALL_SNAPSHOT_CREATE, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_SNAPSHOT_CREATE, NULL, err);
	if (req == NULL || snap_name_check(req->name, err) == -1) {
		if (req == NULL)
			sbx_err_set(err, SBX_E_BAD_REQUEST, "A snapshot needs a "
			    "request.");
		counts.checks_failed++;
		return done(d, SBX_CALL_SNAPSHOT_CREATE, NULL, err);
	}
	return done(d, SBX_CALL_SNAPSHOT_CREATE,
	    d->ops->snapshot_create(d, id, req, cb, arg, err), err);
}

struct sbx_op *
sbx_call_snapshot_list(struct sbx_driver *d, const char *id,
    const char *owner, sbx_json_cb cb, void *arg, struct sbx_err *err)
{
	if (check(d, SBX_CALL_SNAPSHOT_LIST, id, id != NULL, NULL, 0, err) == -1)
		return done(d, SBX_CALL_SNAPSHOT_LIST, NULL, err);
	return done(d, SBX_CALL_SNAPSHOT_LIST,
	    d->ops->snapshot_list(d, id, owner, cb, arg, err), err);
}

struct sbx_op *
sbx_call_snapshot_delete(struct sbx_driver *d, const char *id,
    const char *name, sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	if (check(d, SBX_CALL_SNAPSHOT_DELETE, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_SNAPSHOT_DELETE, NULL, err);
	if (snap_name_check(name, err) == -1) {
		counts.checks_failed++;
		return done(d, SBX_CALL_SNAPSHOT_DELETE, NULL, err);
	}
	return done(d, SBX_CALL_SNAPSHOT_DELETE,
	    d->ops->snapshot_delete(d, id, name, cb, arg, err), err);
}

struct sbx_op *
sbx_call_snapshot_copy(struct sbx_driver *d, const char *id,
    const char *from, const char *name, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	if (check(d, SBX_CALL_SNAPSHOT_COPY, id, 1, NULL, 0, err) == -1)
		return done(d, SBX_CALL_SNAPSHOT_COPY, NULL, err);
	if (!sbx_id_valid(from) || (name != NULL &&
	    snap_name_check(name, err) == -1)) {
		if (!sbx_id_valid(from))
			sbx_err_bad_id(err);
		counts.checks_failed++;
		return done(d, SBX_CALL_SNAPSHOT_COPY, NULL, err);
	}
	return done(d, SBX_CALL_SNAPSHOT_COPY,
	    d->ops->snapshot_copy(d, id, from, name, cb, arg, err), err);
}
