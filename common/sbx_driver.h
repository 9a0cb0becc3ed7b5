/* sbx_driver.h - the SandboxDriver vtable (SPEC §3): one asynchronous interface, many runtimes. */
#ifndef SBX_DRIVER_H
#define SBX_DRIVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx_err.h"
#include "sbx_types.h"

struct event_base;
struct evbuffer;

/*
 * Rules that hold for every operation of every driver:
 *
 * - All calls are made from the thread running the driver's event_base; no
 *   driver blocks that thread.
 * - An operation that returns an sbx_op handle will call its callback (or,
 *   for streams, exactly one of sink->exit / sink->error) exactly once, and
 *   never before the starting call has returned. After that terminal call the
 *   handle is freed by the driver and must not be used.
 * - An operation that cannot start (bad argument) returns NULL, fills err and
 *   calls no callback.
 * - sbx_op_cancel() stops an operation at any time before its terminal
 *   callback: no callback is made afterwards, the handle is freed, and for an
 *   exec the process tree in the sandbox is killed (SPEC §6).
 * - Strings passed in are borrowed for the duration of the call only; the
 *   driver copies what it keeps. Pointers passed to callbacks are borrowed
 *   for the duration of the callback only.
 * - Sandbox ids satisfy sbx_id_valid() and paths sbx_path_check() (callers
 *   check; drivers check again and fail with invalid_id / path_outside_work).
 */

struct sbx_driver;
struct sbx_op;
struct sbx_snapshot_req;

/*
 * Consumer of a stream (exec output or file read). For a read, output()
 * always gets stream 1 and exit() has code 0.
 */
struct sbx_sink {
	void (*start)(void *arg, const char *exec_id);
	/* stream: 1 stdout, 2 stderr. buf borrowed, len > 0. */
	void (*output)(void *arg, int stream, const unsigned char *buf, size_t len);
	void (*exit)(void *arg, const struct sbx_exit *ex);         /* terminal */
	void (*error)(void *arg, const struct sbx_err *err);       /* terminal */
	void *arg;
	/* Optional, sessions only: more input may be written now (sbx_session_room grew). */
	void (*room)(void *arg);
};

typedef void (*sbx_status_cb)(void *arg, const struct sbx_err *err,
    const struct sbx_status *st);
typedef void (*sbx_done_cb)(void *arg, const struct sbx_err *err);
/* ents: one page of entries sorted by name (bytewise); truncated 1: more
 * names follow the last one (ask again with page.after = its name). */
typedef void (*sbx_list_cb)(void *arg, const struct sbx_err *err,
    const struct sbx_dirent *ents, size_t n, int truncated);
typedef void (*sbx_sandboxes_cb)(void *arg, const struct sbx_err *err,
    const struct sbx_status *sts, size_t n);
typedef void (*sbx_health_cb)(void *arg, const struct sbx_err *err,
    const struct sbx_health *h);
/* An answer that is a JSON text (NUL-terminated, borrowed for the call),
 * or NULL with err. */
typedef void (*sbx_json_cb)(void *arg, const struct sbx_err *err,
    const char *json);

/* The caller's callback of one operation, as a driver keeps it in its op
 * until the op ends: exactly the member of the op's kind is set (ensure and
 * status: status; write, stop, destroy: done; list: list; list of
 * sandboxes: sandboxes; health: health; a JSON answer: json). The arg
 * given with it is kept beside it by the driver. */
struct sbx_op_cb {
	sbx_status_cb status;
	sbx_done_cb done;
	sbx_list_cb list;
	sbx_sandboxes_cb sandboxes;
	sbx_health_cb health;
	sbx_json_cb json;
};
/*
 * An exec output event handed over as the line the driver received
 * (exec_lines, adr/0028), so the consumer can forward it without decoding
 * and re-encoding it (proto/sbx_sse.h sbx_sse_from_output_line). arg: the
 * sink's arg. line[0..len) (borrowed for the call, no '\n'): one
 * stdout/stderr event in the NDJSON encoder's exact spelling
 * (proto/broker-api.md "Exec events"), whose value the driver checked as
 * strictly as decoding would (sbx_ndjson_parser_undecoded); still bytes
 * from another process, so the consumer maps it with a function that
 * refuses what is not such a line. stream: 1 stdout, 2 stderr (the
 * line's "type"). nbytes: the output bytes it carries (> 0).
 */
typedef void (*sbx_line_cb)(void *arg, int stream, const char *line,
    size_t len, size_t nbytes);

/*
 * The operations. Each implementation is one file exporting one const
 * instance (broker/driver_engine.c, api/driver_broker.c, tests/driver_fake.c).
 * On success each returns a handle; on a refusal it returns NULL with err set.
 */
struct sbx_driver_ops {
	const char *name;

	/* Creates volume + container and starts it if needed; idempotent. A
	 * changed egress replaces the container (same volume). cb gets the
	 * resulting status. Errors: invalid_id, image_not_allowed,
	 * limit_exceeded, conflict, too_many, runtime_unavailable, runtime_error. */
	struct sbx_op *(*ensure)(struct sbx_driver *d, const char *id,
	    const struct sbx_spec *spec, sbx_status_cb cb, void *arg,
	    struct sbx_err *err);
	/* Status; an unknown id is state absent, not an error. */
	struct sbx_op *(*status)(struct sbx_driver *d, const char *id,
	    sbx_status_cb cb, void *arg, struct sbx_err *err);
	/* Runs req->argv as the sandbox user; events go to sink. Errors (via
	 * sink->error): not_found, not_running, timeout, too_many, runtime_*. */
	struct sbx_op *(*exec)(struct sbx_driver *d, const char *id,
	    const struct sbx_exec_req *req, const struct sbx_sink *sink,
	    struct sbx_err *err);
	/* Streams the file's bytes to sink (stream 1). Errors: not_found,
	 * path_outside_work (also a symlink leaving /work), too_large. */
	struct sbx_op *(*read)(struct sbx_driver *d, const char *id,
	    const char *path, const struct sbx_sink *sink, struct sbx_err *err);
	/* Writes body (drained by the driver; the caller keeps ownership of
	 * the evbuffer object) to path with permission bits mode (0: 0644),
	 * creating parent directories, as the sandbox user, atomically. */
	struct sbx_op *(*write)(struct sbx_driver *d, const char *id,
	    const char *path, uint32_t mode, struct evbuffer *body,
	    sbx_done_cb cb, void *arg, struct sbx_err *err);
	/* One page of the directory's entries (page: which, see above),
	 * sorted by name, symlinks not followed. Errors: not_found,
	 * bad_request (not a directory), path_outside_work, timeout. */
	struct sbx_op *(*list)(struct sbx_driver *d, const char *id,
	    const char *path, const struct sbx_list_page *page,
	    sbx_list_cb cb, void *arg, struct sbx_err *err);
	/* Stops the container; the volume stays. Absent: not_found. */
	struct sbx_op *(*stop)(struct sbx_driver *d, const char *id,
	    sbx_done_cb cb, void *arg, struct sbx_err *err);
	/* Removes container and volume; irreversible. Absent: ok (idempotent). */
	struct sbx_op *(*destroy)(struct sbx_driver *d, const char *id,
	    sbx_done_cb cb, void *arg, struct sbx_err *err);
	/* All sandboxes this driver manages (labelled io.sbx.managed=true). */
	struct sbx_op *(*list_sandboxes)(struct sbx_driver *d,
	    sbx_sandboxes_cb cb, void *arg, struct sbx_err *err);
	struct sbx_op *(*health)(struct sbx_driver *d, sbx_health_cb cb,
	    void *arg, struct sbx_err *err);
	/* Crash recovery (SPEC §7): kills every exec process tree that an
	 * earlier instance of the caller started in sandbox id through this
	 * driver and can no longer cancel (its handles died with it). Called
	 * by the broker at start, before it serves requests, for each running
	 * sandbox. A stopped or absent sandbox has nothing left: ok. Errors:
	 * invalid_id, runtime_unavailable, runtime_error. Optional: NULL in a
	 * driver whose execs cannot outlive their caller (callers skip it). */
	struct sbx_op *(*recover)(struct sbx_driver *d, const char *id,
	    sbx_done_cb cb, void *arg, struct sbx_err *err);
	/* Start-up garbage collection (SPEC §7): removes what this driver made
	 * in the runtime for sandboxes that no longer need it, and nothing it
	 * did not make (engine: an egress network "<prefix><id>-egress"
	 * labelled io.sbx.managed=true whose sandbox has no egress container,
	 * running or stopped; ADR 0014). Called by the broker at start, after
	 * listing the sandboxes and before it serves requests, so no ensure
	 * of its own runs meanwhile. Errors: runtime_unavailable,
	 * runtime_error. Optional: NULL when a driver leaves nothing behind. */
	struct sbx_op *(*reconcile)(struct sbx_driver *d, sbx_done_cb cb,
	    void *arg, struct sbx_err *err);
	/* write with the body streamed (SPEC §3 write(id, path, source);
	 * adr/0018): len bytes (at most the driver's file cap, else
	 * too_large) arrive in src over time, added by the caller; the driver
	 * drains src only as fast as the sandbox takes them (the caller bounds
	 * what it buffers in src, and learns of room from src's n_deleted),
	 * and learns of new bytes through an evbuffer callback it puts on src
	 * and removes before cb runs or when the op is cancelled. src must
	 * live until then. The file is replaced only when exactly len bytes
	 * came; a source that stops ends with timeout (file_timeout) or is
	 * cancelled by its caller, the old file untouched. Errors as write.
	 * Optional: NULL in a driver that takes whole bodies only (callers
	 * then gather the body and use write). */
	struct sbx_op *(*write_stream)(struct sbx_driver *d, const char *id,
	    const char *path, uint32_t mode, struct evbuffer *src, uint64_t len,
	    sbx_done_cb cb, void *arg, struct sbx_err *err);

	/* status plus, for a running sandbox, st->usage (present 1): /work
	 * walked inside the sandbox, bounded by the driver's configuration
	 * (engine: usage_max_entries entries, usage_timeout ms; a bound hit
	 * is partial 1, not an error). Costs a runtime exec, so callers ask
	 * for it only when their caller did (adr/0017). A stopped or absent
	 * sandbox answers like status, usage.present 0. Errors: those of
	 * status, and timeout / runtime_error / forbidden when the walk
	 * itself fails. Optional: NULL when a driver cannot count (callers
	 * answer bad_request). */
	struct sbx_op *(*status_usage)(struct sbx_driver *d, const char *id,
	    sbx_status_cb cb, void *arg, struct sbx_err *err);

	/* What the sandbox's egress proxy decided (adr/0026): cb gets
	 * {"proxy":bool (one runs), "allowed":N, "denied":N, "denials":[{"ts",
	 * "host","port","reason"}, ...newest last, at most 20]}; counts 0 and
	 * no denials without a proxy. Errors: invalid_id, runtime_error,
	 * runtime_unavailable. Optional: NULL when a driver runs no proxy. */
	struct sbx_op *(*egress_stats)(struct sbx_driver *d, const char *id,
	    sbx_json_cb cb, void *arg, struct sbx_err *err);

	/* exec, except that output events the driver receives as NDJSON
	 * lines in the encoder's spelling go to line (with sink->arg) as
	 * received instead of to sink->output decoded (adr/0028); events in
	 * any other spelling still go to sink->output, so a caller handles
	 * both. Same errors and terminal calls as exec. Optional: NULL in a
	 * driver that has no lines (engine, fake); sbx_call_exec_lines then
	 * uses exec. */
	struct sbx_op *(*exec_lines)(struct sbx_driver *d, const char *id,
	    const struct sbx_exec_req *req, const struct sbx_sink *sink,
	    sbx_line_cb line, struct sbx_err *err);

	/* Handle control (see rules above). pause/resume apply to streams:
	 * a paused stream stops reading from its producer, so memory stays
	 * bounded; on other operations they do nothing. */
	void (*cancel)(struct sbx_driver *d, struct sbx_op *op);
	void (*pause)(struct sbx_driver *d, struct sbx_op *op);
	void (*resume)(struct sbx_driver *d, struct sbx_op *op);

	/* Frees the driver; every operation must have ended or been cancelled. */
	void (*free)(struct sbx_driver *d);
	/* Sessions (proto/sbx_types.h, adr/0050). Optional members: NULL in
	 * drivers without sessions (sbx_session_open then refuses with
	 * bad_request). */
	/* Opens a session (proto/sbx_types.h). Output goes to sink->output (PTY and PORT: stream 1
	 * only), start once with the session's exec id (PORT: ""), then exactly one of exit/error.
	 * pause/resume/cancel as for exec (cancel kills the process tree / closes the connection).
	 * Errors: those of exec, plus bad_request (cols/rows/term/port out of range), port_closed
	 * (PORT: nothing listens; via sink->error). */
	struct sbx_op *(*session)(struct sbx_driver *d, const char *id,
	    const struct sbx_session_req *req, const struct sbx_sink *sink, struct sbx_err *err);
	/* Input: moves up to max bytes of src (and at most the room) to the session's stdin /
	 * pty / socket. Returns bytes moved (0: no room; sink->room will say when), -1 after
	 * session_close_input or when the op has ended. */
	ssize_t (*session_write)(struct sbx_driver *d, struct sbx_op *op, struct evbuffer *src, size_t max);
	/* Bytes session_write would take now. */
	size_t (*session_room)(struct sbx_driver *d, struct sbx_op *op);
	/* EOF on stdin (EXEC), half-close (PORT), nothing (PTY). Idempotent. */
	void (*session_close_input)(struct sbx_driver *d, struct sbx_op *op);
	/* Resize (PTY only) or signal to the foreground process group (PTY) / the process group
	 * (EXEC). Returns 0, or -1 with err bad_request (wrong kind, out of range). */
	int (*session_control)(struct sbx_driver *d, struct sbx_op *op,
	    const struct sbx_session_ctl *c, struct sbx_err *err);

	/* Snapshots of /work (adr/0068). Optional: NULL in a driver without
	 * them (sbx_call_snapshot_* then refuses with unsupported, 501).
	 * Names satisfy sbx_snapshot_name_valid (callers check; drivers
	 * check again: bad_request). */
	/* A read-only copy of id's /work named req->name, taken while the
	 * sandbox is frozen (running) or as it lies (stopped). cb gets the
	 * snapshot object {"name","sandbox_id","owner","size_bytes",
	 * "created_at" (ms)}. Errors: not_found (no sandbox), conflict (the
	 * name is taken), quota_exceeded (size over req->max_bytes),
	 * timeout, runtime_*. */
	struct sbx_op *(*snapshot_create)(struct sbx_driver *d, const char *id,
	    const struct sbx_snapshot_req *req, sbx_json_cb cb, void *arg,
	    struct sbx_err *err);
	/* {"snapshots":[snapshot object...]} of sandbox id (NULL: every
	 * sandbox), only those labelled with owner (NULL: any owner),
	 * sorted by sandbox id then name. Errors: runtime_*. */
	struct sbx_op *(*snapshot_list)(struct sbx_driver *d, const char *id,
	    const char *owner, sbx_json_cb cb, void *arg, struct sbx_err *err);
	/* Removes snapshot name of id. Errors: not_found, conflict (in use
	 * by a copy under way), runtime_*. */
	struct sbx_op *(*snapshot_delete)(struct sbx_driver *d, const char *id,
	    const char *name, sbx_done_cb cb, void *arg, struct sbx_err *err);
	/* Makes id's /work (id must have no container and no /work yet:
	 * conflict) a copy of snapshot name of sandbox from, or, name NULL,
	 * of from's /work now (frozen while copied, as snapshot_create). An
	 * ensure of id then starts on it. Errors: not_found (no such
	 * snapshot or sandbox), conflict, timeout, runtime_*. */
	struct sbx_op *(*snapshot_copy)(struct sbx_driver *d, const char *id,
	    const char *from, const char *name, sbx_done_cb cb, void *arg,
	    struct sbx_err *err);
};

/* What snapshot_create is asked (adr/0068). Strings borrowed for the call. */
struct sbx_snapshot_req {
	const char *name;     /* sbx_snapshot_name_valid */
	const char *owner;    /* recorded as a label ("" or NULL: none); a
	                       * principal's name, [A-Za-z0-9_.-]{1,64} */
	uint64_t max_bytes;   /* refuse when /work holds more (0: no bound) */
};
/* 1 when s is a snapshot name: 1..32 bytes of [a-z0-9-], not starting
 * with '-' (adr/0068); else 0 (NULL: 0). */
int sbx_snapshot_name_valid(const char *s);

/*
 * A driver instance. Implementations embed this as their first member and
 * fill ops; callers only ever use the functions below.
 */
struct sbx_driver {
	const struct sbx_driver_ops *ops;
	struct event_base *base;
};

/* Every op handle starts with this so sbx_op_* can find its driver. */
struct sbx_op {
	struct sbx_driver *driver;
};

void sbx_op_cancel(struct sbx_op *op);  /* NULL allowed */
void sbx_op_pause(struct sbx_op *op);
void sbx_op_resume(struct sbx_op *op);
void sbx_driver_free(struct sbx_driver *d); /* NULL allowed */

/*
 * Session wrappers (the members above, found through op->driver). open:
 * as the session member; a driver without sessions refuses with
 * bad_request "this driver has no sessions" (NULL, no callback). The
 * others take a handle the open returned and not yet ended; a driver
 * without the member answers as an ended session would: write -1, room
 * 0, control -1 with bad_request; close_input does nothing. op NULL:
 * write -1, room 0, close_input nothing, control -1 with bad_request.
 */
struct sbx_op *sbx_session_open(struct sbx_driver *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);
ssize_t sbx_session_write(struct sbx_op *op, struct evbuffer *src, size_t max);
size_t sbx_session_room(struct sbx_op *op);
void sbx_session_close_input(struct sbx_op *op);
int sbx_session_control(struct sbx_op *op, const struct sbx_session_ctl *c,
    struct sbx_err *err);

#endif
