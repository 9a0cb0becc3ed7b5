/* sbx_call.h - the one way callers reach a driver: check id and path once, log, count (adr/0024). */
#ifndef SBX_CALL_H
#define SBX_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_driver.h"

/*
 * Every caller of the driver vtable (broker/, api/, tools) calls these
 * instead of d->ops->x(...). Each wrapper, in this order:
 *
 *   1. checks the sandbox id with sbx_id_valid() and every path (read,
 *      write, write_stream, list: path; exec: req->cwd when not NULL) with
 *      sbx_path_check() (SPEC §4; common/sbx_path.h), so the rules are
 *      applied once, here, for every caller;
 *   2. refuses an optional operation the driver does not implement
 *      (recover, reconcile, status_usage, egress_stats: NULL in the
 *      vtable) — callers that have their own answer for that ask
 *      sbx_call_supports() first; write_stream is never refused for
 *      that: this layer gathers the body and calls write instead;
 *   3. logs one debug line {"msg":"driver call","driver":..,"op":..,
 *      "id":..} (and "driver call refused" with "code" when 1 or 2 refuse
 *      or the driver returns NULL); never a path, body, env or argv;
 *   4. counts the call (and a refusal) for sbx_call_counts();
 *   5. calls the driver with the same arguments, unchanged.
 *
 * A refusal in 1 or 2 behaves exactly like a driver refusing to start: NULL
 * is returned, err is filled, no callback is ever made and the driver is not
 * called. Otherwise the return value, err, the callbacks, ownership of
 * arguments and the handle's life are the driver's, as documented in
 * sbx_driver.h (strings borrowed for the call; the handle freed by the
 * driver after its terminal callback; sbx_op_cancel at any time before).
 *
 * Drivers keep their own checks (sbx_driver.h rules block): a driver is a
 * trust boundary for code that does not use this layer (tests, tools), and
 * the conformance suite (tests/conform/) asserts them on the raw vtable.
 *
 * Thread: like the driver, only from the thread running d->base. The
 * counters are process-wide and not locked (each daemon calls its driver
 * from one thread).
 *
 * Errors set by this layer (besides the driver's own, see sbx_driver.h):
 *   SBX_E_INVALID_ID        id NULL or not [a-z0-9][a-z0-9-]{0,62};
 *   SBX_E_PATH_OUTSIDE_WORK path NULL or breaking a rule of sbx_path_check
 *                           (message names the rule, never the path);
 *   SBX_E_BAD_REQUEST       exec with req or req->argv[0] NULL, list
 *                           without page or with page->limit 0, sink /
 *                           body / src NULL, or an optional op the
 *                           driver lacks.
 * spec NULL in ensure is passed on (the driver's defaults).
 */

/* The operations, for counting and for sbx_call_supports(). */
enum sbx_call_op {
	SBX_CALL_ENSURE = 0,
	SBX_CALL_STATUS,
	SBX_CALL_STATUS_USAGE,
	SBX_CALL_EXEC,
	SBX_CALL_READ,
	SBX_CALL_WRITE,
	SBX_CALL_WRITE_STREAM,
	SBX_CALL_LIST,
	SBX_CALL_STOP,
	SBX_CALL_DESTROY,
	SBX_CALL_LIST_SANDBOXES,
	SBX_CALL_HEALTH,
	SBX_CALL_RECOVER,
	SBX_CALL_RECONCILE,
	SBX_CALL_EGRESS_STATS,
	SBX_CALL_SNAPSHOT_CREATE,  /* adr/0068: optional, unsupported (501) when NULL */
	SBX_CALL_SNAPSHOT_LIST,
	SBX_CALL_SNAPSHOT_DELETE,
	SBX_CALL_SNAPSHOT_COPY,
	SBX_CALL_NOPS
};

/* The driver's name (d->ops->name, static), "" for NULL d. */
const char *sbx_call_driver_name(const struct sbx_driver *d);

/* 1 when d implements op (every mandatory op: 1; recover, reconcile,
 * write_stream, status_usage: 1 only when not NULL in the vtable), else 0
 * (also for NULL d or op out of range). */
int sbx_call_supports(const struct sbx_driver *d, enum sbx_call_op op);

/* Counters since the process started. */
struct sbx_call_counts {
	uint64_t calls[SBX_CALL_NOPS];   /* every call, refused ones included */
	uint64_t refused[SBX_CALL_NOPS]; /* NULL returned (by this layer or the driver) */
	uint64_t checks_failed;          /* refused by step 1 or 2 above */
};
void sbx_call_counts(struct sbx_call_counts *out);

/*
 * The operations: arguments, callbacks and errors as the sbx_driver_ops
 * member of the same name (sbx_driver.h, SPEC §3), plus the checks above.
 * d must not be NULL.
 */
struct sbx_op *sbx_call_ensure(struct sbx_driver *d, const char *id,
    const struct sbx_spec *spec, sbx_status_cb cb, void *arg,
    struct sbx_err *err);
struct sbx_op *sbx_call_status(struct sbx_driver *d, const char *id,
    sbx_status_cb cb, void *arg, struct sbx_err *err);
/* Optional op: bad_request when the driver lacks it (adr/0017). */
struct sbx_op *sbx_call_status_usage(struct sbx_driver *d, const char *id,
    sbx_status_cb cb, void *arg, struct sbx_err *err);
/* Checks id and req->cwd (NULL: /work); req->argv[0] required. */
struct sbx_op *sbx_call_exec(struct sbx_driver *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);
/* sbx_call_exec, with output lines handed to line as received when the
 * driver has exec_lines (adr/0028; sbx_driver.h), else exactly
 * sbx_call_exec (line never called). line must not be NULL. Same checks,
 * counted as an exec. */
struct sbx_op *sbx_call_exec_lines(struct sbx_driver *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    sbx_line_cb line, struct sbx_err *err);
struct sbx_op *sbx_call_read(struct sbx_driver *d, const char *id,
    const char *path, const struct sbx_sink *sink, struct sbx_err *err);
/* body: caller keeps the evbuffer object; the driver drains it. */
struct sbx_op *sbx_call_write(struct sbx_driver *d, const char *id,
    const char *path, uint32_t mode, struct evbuffer *body,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
/* write with the body streamed (adr/0018). A driver without write_stream
 * gets the body whole: this layer keeps an evbuffer callback on src until
 * len bytes are in it (src must live until cb or cancel), then calls
 * sbx_call_write with src (at once when they already are). The handle is
 * then the layer's own and behaves like a driver's: sbx_op_cancel stops
 * the gather or the write it started, cb runs once (with the write's
 * refusal when write refuses after this call returned), never after
 * cancel. The caller bounds what arrives in src; for such a driver it
 * must let all len bytes be buffered (sbx_call_supports says which).
 * Counted as a write_stream, plus a write when the write starts. */
struct sbx_op *sbx_call_write_stream(struct sbx_driver *d, const char *id,
    const char *path, uint32_t mode, struct evbuffer *src, uint64_t len,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
/* page->limit >= 1 (adr/0013). */
struct sbx_op *sbx_call_list(struct sbx_driver *d, const char *id,
    const char *path, const struct sbx_list_page *page, sbx_list_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *sbx_call_stop(struct sbx_driver *d, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *sbx_call_destroy(struct sbx_driver *d, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *sbx_call_list_sandboxes(struct sbx_driver *d,
    sbx_sandboxes_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *sbx_call_health(struct sbx_driver *d, sbx_health_cb cb,
    void *arg, struct sbx_err *err);
/* Optional ops (SPEC §7): bad_request when the driver lacks them; the
 * broker's start-up skips them then (sbx_call_supports). */
struct sbx_op *sbx_call_recover(struct sbx_driver *d, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *sbx_call_reconcile(struct sbx_driver *d, sbx_done_cb cb,
    void *arg, struct sbx_err *err);
/* Optional op (adr/0026): bad_request when the driver lacks it. */
struct sbx_op *sbx_call_egress_stats(struct sbx_driver *d, const char *id,
    sbx_json_cb cb, void *arg, struct sbx_err *err);
/* Snapshots (adr/0068): optional ops refused with unsupported (501, "this
 * sandbox driver (NAME) does not support snapshots") when the driver
 * lacks them; besides the id (list: when not NULL; copy: id and from), a
 * name (create: req->name; delete; copy: when not NULL) must satisfy
 * sbx_snapshot_name_valid (bad_request), req and req->name must be set. */
struct sbx_op *sbx_call_snapshot_create(struct sbx_driver *d, const char *id,
    const struct sbx_snapshot_req *req, sbx_json_cb cb, void *arg,
    struct sbx_err *err);
struct sbx_op *sbx_call_snapshot_list(struct sbx_driver *d, const char *id,
    const char *owner, sbx_json_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *sbx_call_snapshot_delete(struct sbx_driver *d, const char *id,
    const char *name, sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *sbx_call_snapshot_copy(struct sbx_driver *d, const char *id,
    const char *from, const char *name, sbx_done_cb cb, void *arg,
    struct sbx_err *err);

#endif
