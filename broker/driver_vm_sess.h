/* driver_vm_sess.h - the vm driver's sessions (sbx_driver.h session ops, adr/0050): an exec with streamed stdin, a terminal, a connection to a port in the guest (adr/0069). */
#ifndef DRIVER_VM_SESS_H
#define DRIVER_VM_SESS_H

#include "driver_vm_int.h"

/*
 * The session ops of sbx_driver.h on the VM's agent channel, as the engine
 * driver's with the agent: EXEC is `sbx-helper exec --framed` with stdin
 * and a control pipe (vm_io_exec2), PTY `sbx-helper pty` (raw output on
 * stream 1), PORT `sbx-helper connect` (raw, in the guest's own loopback:
 * there is no other network). Refused at the call (NULL, err): bad_request
 * (cols/rows/term/port out of range, argv too long), limit_exceeded (as
 * exec). Through sink->error: not_found, not_running, port_closed, the
 * helper's refusals.
 */
struct sbx_op *vm_sess_open(struct vmdrv *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);
ssize_t vm_sess_write(struct vmop *op, struct evbuffer *src, size_t max);
size_t vm_sess_room(struct vmop *op);
void vm_sess_close_input(struct vmop *op);
int vm_sess_control(struct vmop *op, const struct sbx_session_ctl *c,
    struct sbx_err *err);

#endif
