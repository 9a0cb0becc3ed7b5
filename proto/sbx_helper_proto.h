/* sbx_helper_proto.h - the sbx-helper command-line contract the broker speaks (modes, exit codes, error line). */
#ifndef SBX_HELPER_PROTO_H
#define SBX_HELPER_PROTO_H

#include "sbx_proto.h"

/*
 * sbx-helper is a static binary the broker delivers in a read-only named
 * volume mounted at SBX_HELPER_DIR (so SBX_HELPER_PATH) in every sandbox and
 * runs through the Engine API's exec as the sandbox user (SPEC §4, §6;
 * adr/0009). Everything it receives is untrusted.
 *
 * Protocol version 2 is one process per operation (version 1 was the
 * same without exec --framed; the broker of version 2 needs --framed):
 *
 *   sbx-helper version
 *       stdout "sbx-helper 2\n"; exit 0.
 *   sbx-helper read PATH [--max BYTES]
 *       stdout: the file's bytes. A file over BYTES (checked with fstat
 *       before the first byte, and again while streaming) -> too_large.
 *       Not a regular file -> bad_request.
 *   sbx-helper write PATH MODE [--max BYTES] [--size BYTES]
 *       --size: the exact count the caller will send (adr/0018); stdin
 *       ending before it -> cancelled, longer -> bad_request; either way
 *       the temporary file is removed and PATH is untouched.
 *       stdin -> temporary file in PATH's directory, fsync, fchmod MODE
 *       (octal, at most 0777: setuid/setgid/sticky refused), renameat over
 *       PATH (atomic), fsync of the directory. Missing parent directories are
 *       created (0755) one at a time beneath the root. Over BYTES -> too_large
 *       and the temporary file is removed. A PATH that is a symlink is
 *       written through when its target resolves beneath the root (the
 *       target is replaced), else path_outside_work. Nothing on stdout.
 *       On any error the rest of stdin (at most BYTES + 1) is read and
 *       dropped before exiting: podman 4.3's exec stream loses the error
 *       line when the process exits with input unread.
 *   sbx-helper list PATH [--limit N] [--after-hex HEX]
 *       stdout: one JSON object per line for each entry, sorted by name
 *       (bytewise, as strcmp), at most N of them (1..SBX_HELPER_LIST_MAX,
 *       default SBX_HELPER_LIST_MAX), only names after the one whose bytes
 *       HEX spells (lower-case hex, 1..255 bytes: the last name of the
 *       previous page), then the end line:
 *       {"name":S,"type":"file|dir|symlink|other","size":N,"mode":N,"mtime":N}
 *       ...
 *       {"end":true,"truncated":true|false}
 *       truncated: more names follow the last one printed. mode =
 *       permission bits (st_mode & 07777) as an integer, mtime = Unix
 *       seconds; types come from fstatat(AT_SYMLINK_NOFOLLOW). "." and ".."
 *       are left out. The helper holds at most N names however large the
 *       directory is, and stats only the N it prints. A name that is not
 *       valid UTF-8 is printed with each invalid byte as U+FFFD and the
 *       entry gets one more member "name_b64" holding the exact bytes
 *       (base64), so the name stays both displayable and recoverable.
 *       (Protocol 2 before the page options printed one JSON array.)
 *   sbx-helper exec --id ID [--framed] [--timeout-ms N] [--cwd DIR] -- ARGV...
 *       Runs ARGV (execvp) in its own session and process group. The kill
 *       handle is the file SBX_HELPER_EXEC_DIR/ID. When the command exits,
 *       whatever is left in its process group is SIGKILLed.
 *       Exit status: the command's, or 128+signal when a signal ended it;
 *       see the SBX_HELPER_EXEC_* codes for the helper's own outcomes.
 *       SIGTERM/SIGINT/SIGHUP sent to the helper go to the whole group.
 *       --timeout-ms absent or 0: no backstop (the broker's timer rules).
 *       --cwd absent: the cwd the helper was started in.
 *       stdin is passed through in both output modes.
 *       Passthrough (no --framed): stdout/stderr are the command's own; the
 *       helper writes nothing on stdout and its error line on stderr.
 *       --framed (protocol 2; the only mode the broker uses): the command's
 *       stdout and stderr are two pipes the helper reads in one loop
 *       (stdout first when both are readable, so output keeps the order the
 *       command produced it in) and the helper's stdout carries frames:
 *
 *         byte 0     type: SBX_HELPER_FRAME_STDOUT 1, _STDERR 2, _EXIT 3,
 *                    _ERROR 4
 *         byte 1     SBX_HELPER_PROTO (2)
 *         bytes 2-3  zero
 *         bytes 4-7  payload length, big-endian; 1..SBX_HELPER_FRAME_MAX
 *         payload    stdout/stderr: the command's bytes (the helper reads
 *                    at most 64 KiB at a time: one frame per read);
 *                    exit: SBX_HELPER_EXIT_REC_LEN bytes, below;
 *                    error: the JSON error line (below, with "\n"),
 *                    at most SBX_HELPER_ERROR_REC_MAX bytes.
 *
 *       Exit record payload (8 bytes): byte 0 how (1 exited, 2 killed by a
 *       signal), byte 1 exit status (how 1; else 0), byte 2 signal number
 *       (how 2, 1..64; else 0), byte 3 flags (bit 0: the --timeout-ms
 *       backstop fired; other bits zero), bytes 4-7 zero.
 *       The exit record is the last frame and is written only after the
 *       command has been reaped and its process group SIGKILLed and seen
 *       empty (waited for up to 1 s: init reaps the leftovers);
 *       an error record (a helper failure: the command did not run, exit
 *       status 125/126/127, or the backstop fired) comes just before it.
 *       After the command exits the helper reads its pipes until EOF, until
 *       they stay empty for 100 ms, or until 1 MiB more has come (a process
 *       that left the group may hold them open). Nothing the command runs
 *       can write frames: the pipes are framed by the helper, and the helper
 *       is not dumpable (PR_SET_DUMPABLE 0), so /proc/PID/fd/1 of the helper
 *       is closed to the sandbox user. It can still kill the helper (same
 *       user): a stream without an exit record means "ask the runtime".
 *       The helper does not write frames blocking: when its stdout stays
 *       full past the --timeout-ms backstop it gives up and exits, and when
 *       its stdout's reader is gone (EPIPE, or POLLERR while it has nothing
 *       to write) it kills the group and exits.
 *       With --ctrl (a stream of the agent opened with SBX_AGENT_OPEN_CTRL):
 *       a SIGNAL record sends its signal to the command's process group;
 *       a RESIZE record is ignored (no terminal).
 *   sbx-helper pty --id ID [--cols C] [--rows R] [--term T] [--timeout-ms N]
 *                  [--cwd DIR] [-- ARGV...]                    (adr/0049)
 *       ARGV on a new pseudo terminal (posix_openpt: libc alone) of C
 *       columns and R rows (1..10000 each; default 80x24) with TERM=T
 *       ([A-Za-z0-9._+-]{1,64}; default xterm-256color). No ARGV: the
 *       login shell of the user's entry in the image's /etc/passwd when
 *       it is executable, else /bin/sh (plain, not a login shell).
 *       Everything else is exec's: the kill handle ID, its own session
 *       (the terminal is its controlling terminal, set with TIOCSCTTY,
 *       and 0-2), --cwd beneath the root, --timeout-ms backstop (124 and
 *       the timeout error), signals sent to the helper passed on, exit
 *       status the command's or 128+signal; when it ends, what is left in
 *       its session (a shell's jobs have groups of their own) is
 *       SIGKILLed, and `kill ID` reaches the whole session too.
 *       stdin goes to the terminal as typed bytes (EOF on stdin only stops
 *       input: a terminal has no EOF, ^D is a byte); the terminal's output
 *       comes on stdout raw, not framed (one stream: the command's stdout
 *       and stderr are the same terminal); after the command exits the
 *       terminal is read until it hangs up, stays quiet 100 ms or gave
 *       1 MiB more, and written out as stdout's reader takes it (past the
 *       --timeout-ms backstop, 1 s more, as exec). With --ctrl: RESIZE sets the size (TIOCSWINSZ: the
 *       kernel sends SIGWINCH), SIGNAL goes to the terminal's foreground
 *       process group (tcgetpgrp; the command's group when it has none).
 *       Errors: the error line on stderr at the end, as passthrough exec.
 *   sbx-helper connect --port P                                 (adr/0049)
 *       Connects to 127.0.0.1:P, then [::1]:P, in the sandbox's own
 *       network namespace (no egress needed), and relays stdin to the
 *       socket and the socket to stdout, raw. EOF on stdin half-closes
 *       the connection (shutdown SHUT_WR); the socket's EOF (or a reset)
 *       ends it: what it sent is written out, exit 0. Nothing accepting
 *       on either address (refused, or no accept within 5 s): exit
 *       SBX_HELPER_EXIT_PORT_CLOSED and the error line with code
 *       port_closed, "nothing listens on port P in the sandbox".
 *   sbx-helper stat PATH                                        (adr/0061)
 *       stdout: one entry line for PATH itself (a symlink is described,
 *       not followed):
 *       {"name":S,"rel":"","type":"file|dir|symlink|other","size":N,
 *        "mode":N,"uid":N,"gid":N,"owner":S,"group":S,"mtime":N,
 *        "mtime_nsec":N[,"target":S]}
 *       mode = st_mode & 07777; owner/group from the image's /etc/passwd
 *       and /etc/group ("" when absent); target: a symlink's, raw.
 *   sbx-helper mkdir PATH
 *       Creates PATH (0755) and missing parents beneath the root; stdout
 *       its entry line. A directory there already -> conflict; something
 *       else there -> bad_request.
 *   sbx-helper move SRC DST
 *       renameat SRC to DST (DST's missing parents created; an existing
 *       DST file is replaced, as rename(2)); stdout DST's entry line. SRC
 *       absent -> not_found; /work itself -> bad_request; a non-empty
 *       directory at DST -> conflict.
 *   sbx-helper remove PATH
 *       Removes PATH; a directory with everything in it (no symlink is
 *       followed, at most SBX_HELPER_DU_DEPTH_MAX deep). /work itself ->
 *       bad_request. Nothing on stdout.
 *   sbx-helper walk PATH [--depth D] [--limit N]
 *       The entries below directory PATH down to D levels (1..256,
 *       default 1: its children), not through symlinks, at most N
 *       (1..SBX_HELPER_LIST_MAX, default that), in readdir order: one
 *       entry line each ("rel" the path below PATH), then
 *       {"end":true,"truncated":true|false}. Not a directory ->
 *       bad_request.
 *   sbx-helper watch PATH [--recursive]
 *       inotify on directory PATH (and, --recursive, each directory below
 *       it, also ones made later, at most SBX_HELPER_WATCH_DIRS_MAX), each
 *       added through /proc/self/fd of a descriptor resolved beneath the
 *       root. stdout: {"start":true[,"partial":true]} once the watches
 *       are in place (partial: the cap or the kernel's watch limit left
 *       some out), then one line per event until PATH itself is removed
 *       or moved ({"gone":true}, exit 0) or stdout's reader goes:
 *       {"name":REL,"op":"create|write|remove|rename|chmod"}
 *       (REL below PATH; create also for a name moved in, rename for one
 *       moved out; a write's temporary file (".sbx-helper-*.tmp") is not
 *       reported, its rename onto the target is "create" then "write" of
 *       the target), and {"overflow":true} when the kernel's queue
 *       overflowed (events were lost). Writes block: the kernel's queue
 *       (fs.inotify.max_queued_events) is the only buffer. Not dumpable.
 *   sbx-helper kill ID
 *       SIGKILLs the process group recorded for ID, then every process
 *       left in the session it leads (adr/0049). Exit 0 whether it was
 *       running, already gone or not started yet: a kill that arrives first
 *       leaves a tombstone, so an exec with that ID never runs (ids are
 *       single-use).
 *   sbx-helper killall
 *       SIGKILLs every group (and session) recorded in SBX_HELPER_EXEC_DIR and empties it
 *       (broker recovery after a crash, SPEC §7). Exit 0.
 *   sbx-helper idle
 *       The sandbox container's main process (under the runtime's init):
 *       waits for SIGTERM/SIGINT/SIGHUP, then exits 0. Needs nothing from
 *       the image, not even a shell.
 *   sbx-helper initwork UID:GID
 *       Run as root in the broker's init container (CAP_CHOWN, CAP_FOWNER
 *       only; never in a sandbox): makes the root (/work) itself owned by
 *       UID:GID with u+rwx; its contents are left alone. Exit 0, or an
 *       exit status and error line as for read.
 *   sbx-helper install DIR
 *       Copies itself (/proc/self/exe) to DIR/sbx-helper, mode 0555, via a
 *       temporary file and rename: a Kubernetes init container's job
 *       (adr/0072). Exit 0, or an error line.
 *   sbx-helper du [--max ENTRIES] [--timeout-ms N] [--id ID]
 *       How much /work holds (adr/0017): walks the root depth first with
 *       openat/fstatat beneath it, never following a symlink and never
 *       entering or counting another filesystem (st_dev differs from the
 *       root's). stdout: one line,
 *       {"bytes":N,"apparent_bytes":N,"files":N,"dirs":N,"entries":N,
 *        "skipped":N,"elapsed_ms":N,"partial":B[,"partial_reason":S]}
 *       bytes = st_blocks*512 of the root and of every entry counted (what
 *       the filesystem holds for /work, what a quota would count; a file
 *       with several hard links counts each time); apparent_bytes = st_size
 *       of the regular files; entries = every entry below the root, of any
 *       type. It stops after ENTRIES entries (default
 *       SBX_HELPER_DU_MAX_DEF) or N ms (absent/0: no bound) with
 *       "partial":true and partial_reason "max_entries" or "timeout"; a
 *       directory it cannot read or enter, an entry it cannot stat, a
 *       mount, or a directory deeper than SBX_HELPER_DU_DEPTH_MAX make it
 *       partial too ("unreadable"), counted in skipped. Not dumpable.
 *       --id ID: a kill handle for the helper itself, as for read.
 *
 * The kill handles live in SBX_HELPER_EXEC_DIR, created 0700 inside
 * SBX_HELPER_RUN_DIR, a small tmpfs the broker mounts owned by the sandbox
 * user: never in a directory whose mode the image decides.
 *
 * Global options, before or after the mode, for tests only:
 *   --root DIR       the directory standing for /work (absolute, canonical)
 *   --state-dir DIR  instead of SBX_HELPER_EXEC_DIR
 *   --no-openat2     resolve paths with the O_NOFOLLOW walk even where
 *                    openat2(2) exists (every symlink is then refused)
 * and one the agent gives a stream opened with SBX_AGENT_OPEN_CTRL
 * (proto/sbx_agent.h, adr/0049):
 *   --ctrl           descriptor SBX_HELPER_CTRL_FD (3) is a pipe carrying
 *                    the stream's CTRL records, SBX_AGENT_CTRL_LEN bytes
 *                    each, already checked by the agent; it is made
 *                    close-on-exec (no command inherits it). Absent: no
 *                    record ever comes.
 *
 * Paths must be absolute, equal to or under the root ("/work"), with no
 * ".", ".." or empty segment, no NUL, at most SBX_HELPER_PATH_MAX bytes and
 * each segment at most 255 bytes. They are resolved with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from a descriptor of the
 * root, so a symlink may be followed only while it stays beneath the root
 * (absolute symlinks are always refused); on kernels without openat2 each
 * component is opened with O_NOFOLLOW and any symlink is refused.
 *
 * Errors: exit status non-zero and exactly one line on stderr,
 *   {"sbx_helper":2,"error":{"code":"<SBX_E_*>","message":"<sentence>"}}
 * (in exec --framed, that line is the error record instead).
 * Outside exec the exit status alone names the code (SBX_HELPER_EXIT_*), so
 * the broker can answer even when a runtime dropped the line. Attach stdin
 * only to write and exec (with input): a runtime may drop the output of a
 * process that exits with its stdin still open and unread.
 * In passthrough exec that line is mixed into the command's own stderr and
 * the command can print a look-alike, so the broker must believe it only
 * together with a SBX_HELPER_EXEC_* status and never trust it further.
 * Frames are untrusted input too: the broker checks every header (type,
 * version, zero bytes, length within its type's bound, nothing after the
 * exit record) and treats anything else as a protocol error.
 */

#define SBX_HELPER_PROTO 2
/* SBX_HELPER_DIR and SBX_HELPER_PATH: sbx_proto.h (the broker mounts them). */
#define SBX_HELPER_ROOT SBX_WORK_DIR         /* default --root */
#define SBX_HELPER_RUN_DIR "/run/sbx"        /* the broker's private tmpfs (adr/0009) */
#define SBX_HELPER_EXEC_DIR "/run/sbx/exec"  /* kill handles, one file per exec id */
#define SBX_HELPER_PATH_MAX 4096             /* bytes of a PATH argument */
#define SBX_HELPER_EXEC_ID_MAX 64            /* exec ids: [A-Za-z0-9_-]{1,64} */
#define SBX_HELPER_LIST_MAX 100000           /* list --limit ceiling and default */
#define SBX_HELPER_CTRL_FD 3                 /* --ctrl: the agent's CTRL records */
/* agent --listen DIR (adr/0066): the agent's direct channel, a unix socket
 * SBX_AGENT_SOCK_NAME in DIR, the root of a per-sandbox volume the broker
 * mounts at SBX_AGENT_LISTEN_DIR and reaches through its host mountpoint. */
#define SBX_AGENT_LISTEN_DIR "/run/sbx-agent"
#define SBX_AGENT_SOCK_NAME "agent.sock"

/* exec --framed: frame header, types and bounds (see above). */
#define SBX_HELPER_FRAME_HDR 8
#define SBX_HELPER_FRAME_STDOUT 1
#define SBX_HELPER_FRAME_STDERR 2
#define SBX_HELPER_FRAME_EXIT 3
#define SBX_HELPER_FRAME_ERROR 4
#define SBX_HELPER_FRAME_MAX (1024 * 1024)  /* any payload */
#define SBX_HELPER_EXIT_REC_LEN 8
#define SBX_HELPER_ERROR_REC_MAX 4096
#define SBX_HELPER_EXIT_HOW_EXITED 1
#define SBX_HELPER_EXIT_HOW_SIGNALED 2
#define SBX_HELPER_EXIT_FLAG_TIMEOUT 0x01

/* Modes (argv[1]). */
#define SBX_HELPER_MODE_VERSION "version"
#define SBX_HELPER_MODE_READ "read"
#define SBX_HELPER_MODE_WRITE "write"
#define SBX_HELPER_MODE_LIST "list"
#define SBX_HELPER_MODE_EXEC "exec"
#define SBX_HELPER_MODE_PTY "pty"
#define SBX_HELPER_MODE_CONNECT "connect"
#define SBX_HELPER_MODE_KILL "kill"
#define SBX_HELPER_MODE_KILLALL "killall"
#define SBX_HELPER_MODE_IDLE "idle"
#define SBX_HELPER_MODE_INITWORK "initwork"
#define SBX_HELPER_MODE_INSTALL "install"   /* install DIR: copy itself (adr/0072) */
#define SBX_HELPER_MODE_DU "du"
/* E2B's filesystem service (adr/0061). */
#define SBX_HELPER_MODE_STAT "stat"
#define SBX_HELPER_MODE_MKDIR "mkdir"
#define SBX_HELPER_MODE_MOVE "move"
#define SBX_HELPER_MODE_REMOVE "remove"
#define SBX_HELPER_MODE_WALK "walk"
#define SBX_HELPER_MODE_WATCH "watch"
/* watch: directories watched at most (a recursive watch stops adding there). */
#define SBX_HELPER_WATCH_DIRS_MAX 4096

/* du: entries walked when --max is absent; directories entered at most. */
#define SBX_HELPER_DU_MAX_DEF 1000000
#define SBX_HELPER_DU_DEPTH_MAX 256

/* Exit status of every mode except exec; the JSON line carries the code. */
#define SBX_HELPER_EXIT_OK 0
#define SBX_HELPER_EXIT_INTERNAL 1          /* internal: unexpected errno, I/O error */
#define SBX_HELPER_EXIT_BAD_REQUEST 2       /* bad_request: usage, not a regular file/dir, bad mode */
#define SBX_HELPER_EXIT_PATH_OUTSIDE_WORK 3 /* path_outside_work: path rules or a symlink leaving the root */
#define SBX_HELPER_EXIT_NOT_FOUND 4         /* not_found: a component does not exist */
#define SBX_HELPER_EXIT_TOO_LARGE 5         /* too_large: over --max */
#define SBX_HELPER_EXIT_FORBIDDEN 6         /* forbidden: EACCES/EPERM for the sandbox user */
#define SBX_HELPER_EXIT_CANCELLED 7         /* cancelled (only used inside exec, as 125) */
#define SBX_HELPER_EXIT_PORT_CLOSED 8       /* port_closed: connect found nothing listening */

/*
 * Exit status of exec for the helper's own outcomes. They overlap with what
 * a command may return itself (as they do for timeout(1) and docker run);
 * the broker is authoritative for timeouts and knows when it killed.
 */
#define SBX_HELPER_EXEC_TIMEOUT 124  /* --timeout-ms expired; group SIGKILLed; code timeout */
#define SBX_HELPER_EXEC_FAILED 125   /* helper error before the command ran (bad args,
                                      * cwd refused, id in use, cancelled, internal) */
#define SBX_HELPER_EXEC_NOEXEC 126   /* command found but not executable; code bad_request */
#define SBX_HELPER_EXEC_NOTFOUND 127 /* command not found; code not_found */

#endif
