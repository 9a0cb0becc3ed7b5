/* driver_vm_op.h - the vm driver's op handles: made, answered (never inside the starting call) and freed in one place (adr/0069). */
#ifndef DRIVER_VM_OP_H
#define DRIVER_VM_OP_H

#include "driver_vm_int.h"

/* A new op of kind for sandbox id (may be "" for driver-wide ops); NULL out
 * of memory. Its callback members are set by the caller. */
struct vmop *vmop_new(struct vmdrv *d, enum vmop_kind kind, const char *id);

/* Frees op: off its vm's waiters, timers gone, its agent stream cancelled
 * (the agent kills the mode's processes). No callback. NULL ok. */
void vmop_free(struct vmop *op);

/* Lets go of a write_stream's source (its evbuffer callback removed; the
 * caller's again). vmop_fail, vmop_done and vmop_free call it before any
 * callback; nothing when op has none. */
void vmop_let_go(struct vmop *op);

/* Runs fn(op) from the event loop as soon as the current call returns;
 * 0, or -1 out of memory. */
int vmop_later(struct vmop *op, void (*fn)(struct vmop *op));

/* The op's terminal callback with err (its kind decides which: status,
 * done, list, sandboxes, health, sink->error), then vmop_free. */
void vmop_fail(struct vmop *op, const struct sbx_err *err);

/* Same, from the event loop after the current call returns (err copied);
 * returns op, so a starting call can `return vmop_fail_later(...)`. */
struct sbx_op *vmop_fail_later(struct vmop *op, const struct sbx_err *err);

/* Terminal callbacks with a result, then vmop_free. */
void vmop_status(struct vmop *op, const struct sbx_status *st);
void vmop_done(struct vmop *op);

#endif
