/* helper.h - sbx-helper internals: context, errors, path resolution and the mode functions (the entry, sbx_helper.c, calls the modes; no mode calls the entry). */
#ifndef HELPER_H
#define HELPER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx_helper_frame.h"
#include "sbx_helper_proto.h"

/*
 * An error, the same shape as proto/sbx_err.h (the helper links nothing but
 * libc): a SBX_E_* code and one sentence. Owned by the caller.
 */
struct helper_err {
	const char *code; /* NULL when no error; else a SBX_E_* string literal */
	int errnum;       /* the errno behind it (helper_err_errno), else 0 */
	char message[256];
};

/* Sets err (code must be a string literal) and returns -1. */
int helper_err_set(struct helper_err *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Sets err from an errno value of a path operation: ENOENT/ENOTDIR ->
 * not_found, EXDEV -> path_outside_work, EACCES/EPERM/EROFS -> forbidden,
 * ENAMETOOLONG/EISDIR/ELOOP -> bad_request, else internal. what names the
 * operation for the message. Returns -1.
 */
int helper_err_errno(struct helper_err *err, int errnum, const char *what);

/*
 * err: set by opening rel (relative to /work, "" is /work itself). When the
 * errno behind it is one the caller can act on (ENOENT, ENOTDIR, EISDIR),
 * its message becomes one sentence naming /work/rel and what to do; the
 * code and errnum stay. Returns -1.
 */
int helper_err_name_path(struct helper_err *err, const char *rel);

/* Sets err to bad_request: /work/rel is a directory where a file is
 * needed, one sentence saying so and what to do. Returns -1. */
int helper_err_is_dir(struct helper_err *err, const char *rel);

/* The exit status for a mode other than exec that failed with err (SBX_HELPER_EXIT_*). */
int helper_err_exit_code(const struct helper_err *err);

/* Writes err as the one JSON error line of the protocol to fd 2. */
void helper_err_print(const struct helper_err *err);

/*
 * Formats err as that JSON error line (with its "\n") into buf of size
 * bytes (a message too long for size is shortened; 4096 always holds the
 * whole line). Returns the length written (no NUL), 0 when even the
 * shortest line does not fit.
 */
size_t helper_err_json(const struct helper_err *err, char *buf, size_t size);

/*
 * What every mode needs; filled by main (a future long-lived helper, SPEC
 * §11, fills it once and calls the modes from its loop). rootfd is an
 * O_PATH|O_DIRECTORY descriptor of root, owned by whoever filled the context.
 */
struct helper_ctx {
	const char *root;      /* canonical absolute path standing for /work */
	size_t root_len;
	int rootfd;
	const char *state_dir; /* kill handles (SBX_HELPER_EXEC_DIR) */
	int no_openat2;        /* 1: always use the O_NOFOLLOW walk */
	int ctrl_fd;           /* --ctrl: SBX_HELPER_CTRL_FD, where the agent writes the
	                        * stream's CTRL records (proto/sbx_agent.h); else -1 */
};

/*
 * Checks path against the rules of SPEC §4 relative to ctx->root: absolute,
 * equal to root or under root + "/", no "." ".." or empty segment, no
 * trailing "/", at most SBX_HELPER_PATH_MAX bytes, segments of at most 255
 * bytes. On success sets *rel to the part after the root ("" for the root
 * itself; borrowed from path) and returns 0; else path_outside_work, -1.
 */
int helper_path_check(const struct helper_ctx *ctx, const char *path, const char **rel,
    struct helper_err *err);

/*
 * Opens rel (relative to the root, from helper_path_check; "" is the root)
 * with open flags, following symlinks only while they stay beneath the root:
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), or where that is missing
 * (ENOSYS) or ctx->no_openat2 is set, a walk of O_NOFOLLOW opens that
 * refuses every symlink. O_CLOEXEC is always added; O_CREAT is not allowed.
 * Returns an owned descriptor, or -1 with err (path_outside_work for an
 * escape or, in the walk, any symlink; not_found; forbidden; ...).
 */
int helper_open(const struct helper_ctx *ctx, const char *rel, int flags, struct helper_err *err);

/*
 * Like helper_open of rel's parent directory, creating each missing
 * directory (mode 0755 before umask) one component at a time with mkdirat
 * in a descriptor resolved beneath the root. Returns an owned O_PATH
 * directory descriptor and sets *name to rel's last segment (borrowed);
 * -1 with err on failure. rel must not be "".
 */
int helper_open_parent(const struct helper_ctx *ctx, const char *rel, int create,
    const char **name, struct helper_err *err);

/* Buffered output to a descriptor (stdout, or a stream of a future multiplexer). */
struct helper_out {
	int fd;
	int failed; /* a write failed; errno saved in err_no */
	int err_no;
	size_t len;
	char buf[65536];
};

void helper_out_init(struct helper_out *o, int fd);
void helper_out_bytes(struct helper_out *o, const void *p, size_t n);
void helper_out_str(struct helper_out *o, const char *s);
void helper_out_u64(struct helper_out *o, uint64_t v);
void helper_out_i64(struct helper_out *o, int64_t v);

/*
 * Writes the bytes s[0..n) as one JSON string (with quotes): '"', '\\' and
 * control characters escaped, valid UTF-8 copied, and each byte that is not
 * part of valid UTF-8 (overlong forms, surrogates, > U+10FFFF, truncated
 * sequences) written as \ufffd. Returns 1 when s was valid UTF-8, else 0.
 */
int helper_out_json_str(struct helper_out *o, const char *s, size_t n);

/* Writes s[0..n) as a JSON string of its standard base64 (RFC 4648, padded). */
void helper_out_json_b64(struct helper_out *o, const unsigned char *s, size_t n);

/* Writes out what is buffered. Returns 0, or -1 (errno set) when any write failed. */
int helper_out_flush(struct helper_out *o);

/* Reads and writes that retry on EINTR and short counts. Return -1 with errno on error. */
ssize_t helper_read_full(int fd, void *buf, size_t n);
int helper_write_all(int fd, const void *buf, size_t n);

/* Milliseconds on CLOCK_MONOTONIC: the helper's one clock (deadlines,
 * quiet periods). The helper may include only proto/ (adr/0020), so it
 * cannot use common/sbx_time's sbx_mono_ms; this is the same reading. */
uint64_t helper_mono_ms(void);

/*
 * The modes. Each returns 0 on success or -1 with err; none calls exit().
 * max is a byte limit (UINT64_MAX for none). path is the PATH argument,
 * checked here. outfd/infd are where the bytes go/come from.
 */
int helper_read_file(const struct helper_ctx *ctx, const char *path, uint64_t max, int outfd,
    struct helper_err *err);
int helper_write_file(const struct helper_ctx *ctx, const char *path, const char *mode,
    uint64_t max,
    uint64_t size /* exact bytes expected (UINT64_MAX: until EOF), else no rename */, int infd, struct helper_err *err);
/* list: after NULL or a name (entries sorted bytewise after it only);
 * limit 1..SBX_HELPER_LIST_MAX entries (sbx_helper_proto.h). */
int helper_list_dir(const struct helper_ctx *ctx, const char *path, const char *after,
    uint64_t limit, int outfd, struct helper_err *err);

/* What du mode counted (sbx_helper_proto.h, du). */
struct helper_du_result {
	uint64_t bytes;          /* st_blocks * 512 of /work and every entry counted */
	uint64_t apparent_bytes; /* st_size of the regular files */
	uint64_t files, dirs;    /* regular files, directories (below /work) */
	uint64_t entries;        /* every entry counted, of any type */
	uint64_t skipped;        /* entries not counted or directories not entered */
	uint64_t elapsed_ms;
};

/*
 * du mode: walks ctx->root depth first with openat/fstatat
 * (AT_SYMLINK_NOFOLLOW, O_NOFOLLOW): no symlink is followed, an entry on
 * another device than the root (a mount) is neither counted nor entered,
 * directories deeper than SBX_HELPER_DU_DEPTH_MAX are counted but not
 * entered. Stops after max_entries entries or timeout_ms (0: no time
 * bound) and then says "partial":true. Makes itself non-dumpable first.
 * Writes one JSON line to outfd. Returns 0, or -1 with err when the root
 * cannot be opened or the line cannot be written.
 */
int helper_du(const struct helper_ctx *ctx, uint64_t max_entries, uint64_t timeout_ms, int outfd,
    struct helper_err *err);

/*
 * E2B's filesystem service (helper_e2bfs.c, helper_watch.c; adr/0061;
 * contracts in sbx_helper_proto.h): stat, mkdir, move and walk write entry
 * lines to outfd, remove writes nothing, watch writes event lines until the
 * watched directory goes (0) or outfd's reader does (-1). Each checks its
 * PATH arguments (helper_path_check) and reaches them beneath the root.
 * Return 0, or -1 with err (not_found, bad_request, conflict,
 * path_outside_work, forbidden, too_many for watch, internal).
 */
int helper_fs_stat(const struct helper_ctx *ctx, const char *path, int outfd,
    struct helper_err *err);
int helper_fs_mkdir(const struct helper_ctx *ctx, const char *path, int outfd,
    struct helper_err *err);
int helper_fs_move(const struct helper_ctx *ctx, const char *src, const char *dst, int outfd,
    struct helper_err *err);
int helper_fs_remove(const struct helper_ctx *ctx, const char *path, struct helper_err *err);
/* depth 1..SBX_HELPER_DU_DEPTH_MAX; limit: entries at most (then truncated). */
int helper_fs_walk(const struct helper_ctx *ctx, const char *path, uint64_t depth,
    uint64_t limit, int outfd, struct helper_err *err);
int helper_fs_watch(const struct helper_ctx *ctx, const char *path, int recursive, int outfd,
    struct helper_err *err);

/* 1 when id matches [A-Za-z0-9_-]{1,64}, else 0. */
int helper_exec_id_valid(const char *id);

/*
 * Runs argv (NULL-terminated, argv[0] looked up in PATH) as exec mode
 * describes (sbx_helper_proto.h) and waits for it. cwd may be NULL
 * (inherit); timeout_ms 0 means none. framed 0: stdout/stderr passed
 * through; 1: the command's output and the helper's records go as frames
 * to fd 1 (made non-blocking while it runs, then restored), including the
 * error record for err. Returns the exit status the helper should exit
 * with; on a helper failure also fills err (code set) and returns one of
 * SBX_HELPER_EXEC_*. Blocks signals while it runs and restores them.
 */
int helper_exec(const struct helper_ctx *ctx, const char *id, const char *cwd,
    uint64_t timeout_ms, int framed, char *const argv[], struct helper_err *err);

/*
 * How another mode runs a command on exec mode's machinery (id and kill
 * handle, cwd beneath the root, session and group, signals forwarded,
 * --timeout-ms backstop, exit status, leftovers killed): pty mode gives
 * the command a terminal (helper_pty.c). Hooks, all required but started:
 *   child    in the command's process after setsid and chdir, before
 *            execvp: its 0-2. 0, or -1 with errno (then the exec fails
 *            as a failed dup2 does: internal, SBX_HELPER_EXEC_FAILED).
 *   started  in the helper right after the fork (optional): drop what only
 *            the command needed.
 *   wait     in the helper once the command runs: relay until pid has
 *            been reaped (*status, waitpid's), or until deadline (0: none)
 *            passed, when it SIGKILLs pid's group, reaps it and sets
 *            *timed_out. sigfd is a non-blocking signalfd of SIGCHLD,
 *            SIGTERM, SIGINT, SIGHUP (the last three are to be passed to
 *            the group). It must reap pid before returning.
 */
struct helper_exec_io {
	int (*child)(void *arg);
	void (*started)(void *arg);
	void (*wait)(void *arg, pid_t pid, int sigfd, uint64_t deadline, int *status,
	    int *timed_out);
	void *arg;
};

/*
 * helper_exec with a terminal instead of pipes: as helper_exec with framed
 * 0, the command's stdio and the waiting done by io's hooks; when it ends,
 * every process left in its session is SIGKILLed too. Same return and
 * errors.
 */
int helper_exec_io(const struct helper_ctx *ctx, const char *id, const char *cwd,
    uint64_t timeout_ms, const struct helper_exec_io *io, char *const argv[],
    struct helper_err *err);

/*
 * pty mode (sbx_helper_proto.h, adr/0049): argv (NULL or empty: the login
 * shell of the user's /etc/passwd entry, else /bin/sh) on a new pseudo
 * terminal of cols x rows (1..SBX_AGENT_CTRL_DIM_MAX) with TERM=term
 * ([A-Za-z0-9._+-]{1,64}), run through helper_exec_io; fd 0 goes to the
 * terminal, the terminal's output to fd 1 (raw bytes), ctx->ctrl_fd's
 * records resize it and signal its foreground process group. Returns the
 * exit status as helper_exec does (bad_request and SBX_HELPER_EXEC_FAILED
 * for a bad size or term).
 */
int helper_pty(const struct helper_ctx *ctx, const char *id, const char *cwd,
    uint64_t timeout_ms, uint64_t cols, uint64_t rows, const char *term, char *const argv[],
    struct helper_err *err);

/*
 * connect mode (sbx_helper_proto.h, adr/0049): connects to 127.0.0.1:port,
 * then [::1]:port, and relays fd 0 to the socket and the socket to fd 1
 * until the socket's EOF (fd 0's EOF half-closes it). Returns 0, or -1
 * with err: port_closed when nothing accepts on either address,
 * bad_request for a port outside 1..65535, internal.
 */
int helper_connect(uint64_t port, struct helper_err *err);

/* Bytes moving one way between two descriptors (pty and connect modes). */
struct helper_pump {
	int from, to;           /* descriptors (non-blocking), borrowed */
	int eof;                /* from ended (EOF, an error, EIO of a pty) */
	size_t off, len;        /* buf[off..len) waits for to */
	unsigned char buf[65536];
};

/* Reads from p->from into an empty buffer: 1 bytes came, 0 none now (or
 * the buffer still holds some), -1 EOF or an error (p->eof set). */
int helper_pump_fill(struct helper_pump *p);

/* Writes what p holds to p->to: 1 all of it went, 0 it would block, -1 the
 * reader is gone (EPIPE, an error). */
int helper_pump_flush(struct helper_pump *p);

/* Writes buf[*off..len) to the non-blocking fd, advancing *off: 1 all of it
 * went, 0 it would block, -1 an error (errno; EPIPE: the reader is gone). */
int helper_write_some(int fd, const unsigned char *buf, size_t *off, size_t len);

/*
 * Reads one control record from fd (--ctrl, non-blocking) into *c: 1 one
 * came (kind 0 when it did not parse: skip it), 0 none now, -1 the agent
 * closed the pipe (or an error).
 */
struct sbx_agent_ctrl;
int helper_ctrl_read(int fd, struct sbx_agent_ctrl *c);

/*
 * Kill handles (helper_handle.c). helper_state_dir_open: opens (creating
 * it 0700 when create is set) ctx->state_dir, refusing one not private to
 * this user; an owned descriptor or -1 with err. helper_handle_link: links
 * the handle id in sfd naming group pgid (its leader's start time read
 * now) and this helper: 1 linked, 0 the id exists (*tombstone 1 when a
 * kill came first), -1 with err. helper_session_kill: SIGKILLs every
 * process of session sid (two passes over /proc); never the caller's own.
 */
int helper_state_dir_open(const struct helper_ctx *ctx, int create, struct helper_err *err);
int helper_handle_link(int sfd, const char *id, pid_t pgid, int *tombstone,
    struct helper_err *err);
void helper_session_kill(pid_t sid);

/*
 * read, write, list and du with --id: a kill handle naming the helper itself
 * (pgid = its own pid), so `kill ID` ends a file operation the broker gave
 * up on, stopped (SIGSTOP) or not. Returns 0, or -1 with err (cancelled
 * when ID is taken: a kill came first). helper_handle_drop removes it.
 */
int helper_handle_self(const struct helper_ctx *ctx, const char *id, struct helper_err *err);
void helper_handle_drop(const struct helper_ctx *ctx, const char *id);

/* kill and killall modes: 0 (also when nothing was running), -1 with err. */
int helper_kill(const struct helper_ctx *ctx, const char *id, struct helper_err *err);
int helper_killall(const struct helper_ctx *ctx, struct helper_err *err);

/*
 * idle mode: the sandbox container's main process (no shell needed in the
 * image). Waits for SIGTERM, SIGINT or SIGHUP and returns 0 (exit 0);
 * -1 with err only when the signal mask cannot be set.
 */
int helper_idle(struct helper_err *err);

/*
 * initwork mode (run as root by the broker's short-lived init container,
 * CAP_CHOWN and CAP_FOWNER only; adr/0009): makes ctx->root, not what is
 * in it, owned by owner ("UID:GID", UID not 0) and gives the owner rwx,
 * dropping setuid/setgid bits. A root that is a symlink is refused. Returns
 * 0 (also when nothing had to change) or -1 with err (bad_request for a bad
 * owner, forbidden without the capabilities, not_found).
 */
int helper_initwork(const struct helper_ctx *ctx, const char *owner, struct helper_err *err);

/*
 * install mode (a Kubernetes init container, adr/0072): copies this binary
 * (/proc/self/exe) to DIR/sbx-helper, mode 0555, through a temporary file
 * and a rename. dir: an absolute directory (bad_request otherwise).
 * Returns 0 or -1 with err (the errno's code: forbidden, not_found...).
 */
int helper_install(const char *dir, struct helper_err *err);

/*
 * One command line of sbx-helper run to its exit status: the argument
 * parsing and mode table of sbx_helper.c (helper_main). Returns the exit
 * status; never calls exit() itself.
 */
typedef int helper_main_fn(int argc, char **argv);

/*
 * agent mode (protocol 4, proto/sbx_agent.h, adr/0025, adr/0049): the sandbox's
 * long-lived helper. Reads frames on fd 0 and writes frames on fd 1 until
 * the channel ends, breaks the protocol, or nothing came from the broker
 * for idle_ms (0: no bound); then kills every stream's processes and
 * returns 0. Each stream's child runs run_mode with "sbx-helper", ctx's
 * --root, --state-dir (and --no-openat2), then the stream's arguments, and
 * exits with what it returns: the entry hands its own main down, so the
 * agent, itself one of the modes, never calls back up into the entry.
 * Kills a previous agent of the sandbox first (its kill handle "agent" in
 * ctx->state_dir). Not dumpable. -1 with err when it cannot start
 * (signalfd, descriptors, state directory).
 */
int helper_agent(const struct helper_ctx *ctx, uint64_t idle_ms, const char *listen_dir,
    helper_main_fn *run_mode, struct helper_err *err);

/*
 * The direct channel (helper_listen.c, adr/0066). listen_dir (not NULL) of
 * helper_agent: the agent also listens on the unix socket
 * listen_dir/SBX_AGENT_SOCK_NAME and takes as its channel whichever comes
 * first: a connection from outside the sandbox's pid namespace (the
 * broker, through the volume's host mountpoint), or a frame on fd 0 (the
 * broker fell back to the runtime exec stream). HELLO goes on the channel
 * taken. With the socket taken, fd 0 is the lifeline: its EOF ends the
 * agent as before, what comes on it is read and dropped; nothing goes to
 * fd 1. A socket that cannot be made leaves fd 0/1 as the channel.
 */

/* Makes dir/SBX_AGENT_SOCK_NAME (what was there is unlinked first) a
 * listening socket, mode 0600, non-blocking, close-on-exec. Returns the
 * descriptor (the caller closes it: helper_listen_close), or -1 with err
 * (path too long, socket/bind/listen failed). */
int helper_listen_open(const char *dir, struct helper_err *err);

/* Accepts pending connections on lfd; closes every one from inside the
 * agent's pid namespace (SO_PEERCRED pid != 0: a process of the sandbox)
 * and returns the first from outside (non-blocking, close-on-exec, 1 MiB
 * kernel buffers each way), or -1 when none is pending (errno as
 * accept4 left it). */
int helper_listen_accept(int lfd);

/* Closes lfd (-1 is fine) and unlinks dir/SBX_AGENT_SOCK_NAME. */
void helper_listen_close(int lfd, const char *dir);

#endif
