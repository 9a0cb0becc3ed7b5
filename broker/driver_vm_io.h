/* driver_vm_io.h - exec, read, write (whole or streamed) and list of the vm driver: sbx-helper modes as streams on the VM's agent channel (adr/0069). */
#ifndef DRIVER_VM_IO_H
#define DRIVER_VM_IO_H

#include "driver_vm_int.h"

/*
 * The driver ops of sbx_driver.h with id and paths already checked by the
 * caller (driver_vm.c). The stream opens from the event loop after the
 * call returns: a sandbox that is absent answers not_found, one stopped or
 * booting not_running, through the sink or callback. Refused at the call
 * (NULL, err): exec limit_exceeded (timeout_ms or output_cap above the
 * ceiling), bad_request (argv empty or too long); write too_large (body
 * over file_max_bytes), bad_request (mode over 0777); list bad_request
 * (after empty or over 255 bytes); internal (out of memory).
 * Semantics are the engine driver's with the agent (exec --framed: exit
 * code, 128+signal, timeout, truncation at output_cap with the command
 * killed; the helper's error line believed only for its known codes).
 */
struct sbx_op *vm_io_exec(struct vmdrv *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink, struct sbx_err *err);
struct sbx_op *vm_io_read(struct vmdrv *d, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err);
struct sbx_op *vm_io_write(struct vmdrv *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err);
/* write with the body streamed from src (sbx_driver.h write_stream,
 * adr/0018): src's bytes go to the helper's stdin only as the stream's
 * credit allows (the guest's pace), up to len; the helper replaces the file
 * only when exactly len came. src's callback is removed before cb runs or at
 * cancel. A source that stops ends with timeout after file_timeout_ms.
 * Refused at the call as write (too_large: len over file_max_bytes). */
struct sbx_op *vm_io_write_stream(struct vmdrv *d, const char *id,
    const char *path, uint32_t mode, struct evbuffer *src, uint64_t len,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *vm_io_list(struct vmdrv *d, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err);

/*
 * status_usage: a running VM's status with usage counted by `sbx-helper du`
 * as the sandbox user (bounded by usage_max_entries and usage_timeout_ms: a
 * bound hit is partial, not an error); a stopped or absent one answers as
 * status (usage.present 0). Errors: runtime_error (the walk failed or its
 * line is malformed), timeout (no answer 2 s past usage_timeout_ms).
 */
struct sbx_op *vm_io_usage(struct vmdrv *d, const char *id, sbx_status_cb cb,
    void *arg, struct sbx_err *err);

/* exec, or (session SBX_SESSION_EXEC) an exec whose stdin the caller
 * streams (sbx_session_write) and that takes signals (CTRL): the stream
 * opens with stdin and a control pipe, sink->room says when stdin has
 * room. */
struct sbx_op *vm_io_exec2(struct vmdrv *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink, int session,
    struct sbx_err *err);

/* For driver_vm_sess.c: opens the helper mode argv on op's sandbox's
 * channel (flags SBX_AGENT_OPEN_*) with these callbacks, a timer for
 * op->timer and op->st; 0, or -1 after failing op (not_found,
 * not_running, too_many, runtime_error). */
int vm_io_open(struct vmop *op, const char *const *argv, const char *const *env,
    unsigned flags, void (*output)(void *, int, const unsigned char *, size_t),
    void (*exited)(void *, const struct sbx_agent_exit *));

/* Keeps at most 4 KiB of the mode's stderr (its error line) in op->errline. */
void vm_io_keep_err(struct vmop *op, const unsigned char *buf, size_t len);

/* The helper's error line {"sbx_helper":2,"error":{"code","message"}} in
 * op->errline, as err; 0, or -1 when there is none that parses (the
 * sandbox user can kill the helper: untrusted, so only known codes). */
int vm_io_helper_line(struct vmop *op, struct sbx_err *err);

/* pause (1) / resume (0) a stream op's output; other ops: nothing. */
void vm_io_pause(struct vmop *op, int paused);

#endif
