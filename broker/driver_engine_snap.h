/* driver_engine_snap.h - private to broker/driver_engine*.c: the engine driver's snapshot ops and its start-up hook (adr/0068), declared apart so driver_engine_int.h stays one seam under its size bound. Include after driver_engine_int.h. */
#ifndef DRIVER_ENGINE_SNAP_H
#define DRIVER_ENGINE_SNAP_H

/* The snapshot ops of the vtable (sbx_driver.h: arguments, callbacks,
 * errors); the volume names and labels are driver_engine_snap.c's. */
struct sbx_op *eng_snapshot_create(struct sbx_driver *d, const char *id,
    const struct sbx_snapshot_req *req, sbx_json_cb cb, void *arg,
    struct sbx_err *err);
struct sbx_op *eng_snapshot_list(struct sbx_driver *d, const char *id,
    const char *owner, sbx_json_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *eng_snapshot_delete(struct sbx_driver *d, const char *id,
    const char *name, sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *eng_snapshot_copy(struct sbx_driver *d, const char *id,
    const char *from, const char *name, sbx_done_cb cb, void *arg,
    struct sbx_err *err);

/* Reconcile's last step, on its op (an eop_reconcile whose proxy step is
 * over: its rvols, pi, rgone, pgone and rthen are reused): sandboxes left
 * paused by a broker killed mid-copy are unpaused; its copy containers and
 * the volumes they were filling are removed; snapshots stay. Then
 * then(op); a runtime failure is logged, never the op's end. */
void eng_snap_reconcile(struct eop *op, void (*then)(struct eop *));

#endif
