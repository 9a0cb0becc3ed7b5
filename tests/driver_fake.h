/* driver_fake.h - in-memory SandboxDriver for unit tests of callers, plus its test hooks. */
#ifndef DRIVER_FAKE_H
#define DRIVER_FAKE_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_driver.h"

struct event_base;

/*
 * A new fake driver on base (owned; free with sbx_driver_free). It keeps
 * sandboxes and their files in memory and honours every rule of
 * common/sbx_driver.h: callbacks only from base's loop, never before the
 * starting call returned, exactly one terminal callback, none after cancel.
 * By default an exec emits: start, stdout "hello\n", exit 0. A read emits
 * the file as one output then exit, without start (as the engine driver
 * does; the header leaves start optional for reads). An exec's output_cap
 * (bytes, 0: none) is honoured: the output that fits, then exit 137 KILL
 * truncated 1, as the engine driver does. Returns NULL
 * only when out of memory.
 */
struct sbx_driver *sbx_fake_driver_new(struct event_base *base);

/* Operations, for counting calls. */
enum sbx_fake_op {
	SBX_FAKE_ENSURE = 0,
	SBX_FAKE_STATUS,
	SBX_FAKE_EXEC,
	SBX_FAKE_READ,
	SBX_FAKE_WRITE,
	SBX_FAKE_LIST,
	SBX_FAKE_STOP,
	SBX_FAKE_DESTROY,
	SBX_FAKE_LIST_SANDBOXES,
	SBX_FAKE_HEALTH,
	SBX_FAKE_RECOVER,
	SBX_FAKE_STATUS_USAGE,    /* status_usage: status + the files counted */
	SBX_FAKE_SESSION,         /* session (see "Sessions" below) */
	SBX_FAKE_SNAPSHOT,        /* snapshot_create/list/delete/copy (adr/0068):
	                           * a snapshot is the files of /work copied, kept
	                           * beside the sandbox; copy fills an absent one's */
	SBX_FAKE_NOPS
};

/* One step of a scripted exec. */
enum sbx_fake_step_kind {
	SBX_FAKE_STEP_OUTPUT = 1, /* sink->output(stream, data, len) */
	SBX_FAKE_STEP_EXIT,       /* sink->exit (terminal) */
	SBX_FAKE_STEP_ERROR,      /* sink->error (terminal; before start when first) */
	SBX_FAKE_STEP_HANG,       /* emit nothing more until cancelled */
};

struct sbx_fake_step {
	enum sbx_fake_step_kind kind;
	int stream;               /* OUTPUT: 1 stdout, 2 stderr */
	const char *data;         /* OUTPUT: bytes (copied) */
	size_t len;               /* OUTPUT: bytes at data; 0: strlen(data) */
	unsigned repeat;          /* OUTPUT: emitted this many times (0 = 1) */
	int code;                 /* EXIT: status */
	const char *signal;       /* EXIT: NULL or "KILL" */
	int truncated;            /* EXIT */
	const char *err_code;     /* ERROR: SBX_E_* */
	const char *err_message;  /* ERROR */
};

/*
 * Script of every later exec: the sink gets start (unless the first step is
 * ERROR), then one callback per step and repetition, one per loop turn (or
 * per delay, see below), each only while not paused. steps are copied;
 * the last step must be EXIT, ERROR or HANG. Returns 0, or -1 when the
 * script is empty, does not end so, or memory runs out.
 */
int sbx_fake_set_exec_script(struct sbx_driver *d,
    const struct sbx_fake_step *steps, size_t n);

/* Delay in milliseconds before every callback (default 0: next loop turn). */
void sbx_fake_set_delay_ms(struct sbx_driver *d, unsigned ms);

/* The next call of op fails: synchronously (returns NULL, err = code) when
 * sync is 1, else through its callback. One shot. */
void sbx_fake_fail_next(struct sbx_driver *d, enum sbx_fake_op op,
    const char *code, int sync);

/* What health() reports (default ok). reason NULL: ok. */
void sbx_fake_set_health(struct sbx_driver *d, const char *reason);

/* Counters since creation. */
struct sbx_fake_stats {
	unsigned calls[SBX_FAKE_NOPS]; /* every call, refused ones included */
	unsigned cancels;              /* sbx_op_cancel on a live op */
	unsigned exec_cancels;         /* of those, on an exec (process tree killed) */
	unsigned pauses, resumes;      /* on live stream ops */
	unsigned outputs;              /* sink->output calls made */
	unsigned containers_created;   /* ensure created or replaced a container */
	unsigned max_mutating_per_id;  /* most ensure/stop/destroy of one id in flight at once */
	unsigned ops_live;             /* handles not yet ended */
	unsigned execs_live;
};
const struct sbx_fake_stats *sbx_fake_stats(struct sbx_driver *d);

/* The last exec request seen, flattened (strings owned by the fake). */
struct sbx_fake_exec_seen {
	char argv[1024];          /* argv joined with single spaces */
	char cwd[256];            /* "" when NULL */
	char env[1024];           /* env joined with ';' */
	size_t stdin_len;
	char stdin_data[256];     /* first bytes of stdin */
	int64_t timeout_ms;
	int64_t output_cap;
	char id[64];
};
const struct sbx_fake_exec_seen *sbx_fake_last_exec(struct sbx_driver *d);

/* Files of a sandbox (the sandbox must exist). Returns 0 or -1. */
int sbx_fake_put_file(struct sbx_driver *d, const char *id, const char *path,
    const void *data, size_t len);
/* Copy of a file's bytes into buf (up to cap); returns its full length or -1. */
long sbx_fake_get_file(struct sbx_driver *d, const char *id, const char *path,
    void *buf, size_t cap);

/*
 * Sessions (sbx_driver.h session ops), so callers' unit tests need no
 * runtime. The sandbox must be running (else not_found / not_running via
 * sink->error, as exec); sbx_fake_fail_next(SBX_FAKE_SESSION) works as for
 * the other ops. A session emits start (exec id "fake-exec-N"; PORT: ""),
 * then, one callback per loop turn and only while not paused:
 *  - EXEC: "cat": every input byte comes back on stdout (pieces of at most
 *    16 KiB); EOF on input (session_close_input) -> exit 0 once the input
 *    was echoed. output_cap honoured as exec's (exit 137 KILL truncated).
 *  - PTY: echo with each "\r" sent back as "\r\n"; EOF changes nothing;
 *    resize and signal are recorded (sbx_fake_session_seen), nothing else.
 *  - PORT: echo; EOF -> exit 0 once the input was echoed.
 * Input: session_write takes at most the window (sbx_fake_set_session_window)
 * minus what is not echoed yet; a paused session echoes nothing, so its
 * room stays 0 (backpressure reaches the writer). sink->room (when set) is
 * called each time echoing freed room. Tests drive the rest with
 * sbx_fake_session_output/_exit/_fail on a handle (sbx_fake_session_latest).
 */
#define SBX_FAKE_SESSION_WINDOW ((size_t)64 * 1024)

/* What the fake's sessions saw (strings owned by the fake). */
struct sbx_fake_session_seen {
	unsigned opened;          /* sessions that started (refusals not counted) */
	unsigned live;            /* not ended yet */
	unsigned cancels;         /* sbx_op_cancel on a live session */
	unsigned pauses, resumes;
	/* the last session request */
	enum sbx_session_kind kind;
	char id[64];
	char argv[1024];          /* argv joined with single spaces */
	char cwd[256];
	char env[1024];           /* env joined with ';' */
	int64_t timeout_ms, output_cap;
	int cols, rows;           /* PTY, as opened */
	char term[80];            /* "" when NULL */
	int port;
	/* controls and input, over all sessions */
	int last_cols, last_rows; /* the last resize (0 before any) */
	unsigned resizes;
	int last_signo;           /* the last signal (0 before any) */
	unsigned signals;
	uint64_t bytes_in;        /* taken by session_write */
	unsigned eofs;            /* session_close_input calls (first per session) */
	int last_viewers;         /* the last VIEWERS control (0 before any) */
	unsigned viewer_changes;  /* VIEWERS controls */
};
const struct sbx_fake_session_seen *sbx_fake_session_seen(struct sbx_driver *d);

/* Input bytes a session holds before its room is 0 (default
 * SBX_FAKE_SESSION_WINDOW; 0 restores it). Applies to later sessions. */
void sbx_fake_set_session_window(struct sbx_driver *d, size_t bytes);

/* The newest live session (borrowed; NULL when none). */
struct sbx_op *sbx_fake_session_latest(struct sbx_driver *d);

/* On a live session handle: queue len bytes of output on stream (1 stdout,
 * 2 stderr), copied; emitted before any more echo. Returns 0, -1 (bad
 * stream, ended, out of memory). */
int sbx_fake_session_output(struct sbx_op *op, int stream, const void *data,
    size_t len);
/* Once the queued output went: exit with code (signal NULL or a name such
 * as "KILL"), or sink->error with code and message. Returns 0, -1 when
 * the session has ended or a terminal was queued already. */
int sbx_fake_session_exit(struct sbx_op *op, int code, const char *signal);
int sbx_fake_session_fail(struct sbx_op *op, const char *code,
    const char *message);

/* State of id as the fake sees it. */
enum sbx_state sbx_fake_state(struct sbx_driver *d, const char *id);

#endif
