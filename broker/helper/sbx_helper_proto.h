/* sbx_helper_proto.h - the sbx-helper command-line contract the broker speaks (modes, exit codes, error line). */
#ifndef SBX_HELPER_PROTO_H
#define SBX_HELPER_PROTO_H

#include "../../proto/sbx_proto.h"

/*
 * sbx-helper is a static binary the broker bind-mounts read-only at
 * SBX_HELPER_PATH in every sandbox and runs through the Engine API's exec as
 * the sandbox user (SPEC §4, §6). Everything it receives is untrusted.
 *
 * Protocol version 1 is one process per operation:
 *
 *   sbx-helper version
 *       stdout "sbx-helper 1\n"; exit 0.
 *   sbx-helper read PATH [--max BYTES]
 *       stdout: the file's bytes. A file over BYTES (checked with fstat
 *       before the first byte, and again while streaming) -> too_large.
 *       Not a regular file -> bad_request.
 *   sbx-helper write PATH MODE [--max BYTES]
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
 *   sbx-helper list PATH
 *       stdout: one JSON array, then "\n":
 *       [{"name":S,"type":"file|dir|symlink|other","size":N,"mode":N,"mtime":N}]
 *       mode = permission bits (st_mode & 07777) as an integer, mtime = Unix
 *       seconds; types come from fstatat(AT_SYMLINK_NOFOLLOW). "." and ".."
 *       are left out; order is the directory's. A name that is not valid
 *       UTF-8 is printed with each invalid byte as U+FFFD and the entry gets
 *       one more member "name_b64" holding the exact bytes (base64), so the
 *       name stays both displayable and recoverable.
 *   sbx-helper exec --id ID [--timeout-ms N] [--cwd DIR] -- ARGV...
 *       Runs ARGV (execvp) in its own session and process group, with
 *       stdin/stdout/stderr passed through; the helper writes nothing on
 *       stdout. The kill handle is the file SBX_HELPER_EXEC_DIR/ID. When the
 *       command exits, whatever is left in its process group is SIGKILLed.
 *       Exit status: the command's, or 128+signal when a signal ended it;
 *       see the SBX_HELPER_EXEC_* codes for the helper's own outcomes.
 *       SIGTERM/SIGINT/SIGHUP sent to the helper go to the whole group.
 *       --timeout-ms absent or 0: no backstop (the broker's timer rules).
 *       --cwd absent: the cwd the helper was started in.
 *   sbx-helper kill ID
 *       SIGKILLs the process group recorded for ID. Exit 0 whether it was
 *       running, already gone or not started yet: a kill that arrives first
 *       leaves a tombstone, so an exec with that ID never runs (ids are
 *       single-use).
 *   sbx-helper killall
 *       SIGKILLs every group recorded in SBX_HELPER_EXEC_DIR and empties it
 *       (broker recovery after a crash, SPEC §7). Exit 0.
 *
 * Global options, before or after the mode, for tests only:
 *   --root DIR       the directory standing for /work (absolute, canonical)
 *   --state-dir DIR  instead of SBX_HELPER_EXEC_DIR
 *   --no-openat2     resolve paths with the O_NOFOLLOW walk even where
 *                    openat2(2) exists (every symlink is then refused)
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
 *   {"sbx_helper":1,"error":{"code":"<SBX_E_*>","message":"<sentence>"}}
 * Outside exec the exit status alone names the code (SBX_HELPER_EXIT_*), so
 * the broker can answer even when a runtime dropped the line. Attach stdin
 * only to write and exec (with input): a runtime may drop the output of a
 * process that exits with its stdin still open and unread.
 * In exec mode that line is mixed into the command's own stderr and the
 * command can print a look-alike, so the broker must believe it only
 * together with a SBX_HELPER_EXEC_* status and never trust it further.
 */

#define SBX_HELPER_PROTO 1
#define SBX_HELPER_PATH "/.sbx/sbx-helper"   /* where the broker mounts it */
#define SBX_HELPER_ROOT "/work"              /* default --root */
#define SBX_HELPER_EXEC_DIR "/tmp/.sbx-exec" /* kill handles, one file per exec id */
#define SBX_HELPER_PATH_MAX 4096             /* bytes of a PATH argument */
#define SBX_HELPER_EXEC_ID_MAX 64            /* exec ids: [A-Za-z0-9_-]{1,64} */

/* Modes (argv[1]). */
#define SBX_HELPER_MODE_VERSION "version"
#define SBX_HELPER_MODE_READ "read"
#define SBX_HELPER_MODE_WRITE "write"
#define SBX_HELPER_MODE_LIST "list"
#define SBX_HELPER_MODE_EXEC "exec"
#define SBX_HELPER_MODE_KILL "kill"
#define SBX_HELPER_MODE_KILLALL "killall"

/* Exit status of every mode except exec; the JSON line carries the code. */
#define SBX_HELPER_EXIT_OK 0
#define SBX_HELPER_EXIT_INTERNAL 1          /* internal: unexpected errno, I/O error */
#define SBX_HELPER_EXIT_BAD_REQUEST 2       /* bad_request: usage, not a regular file/dir, bad mode */
#define SBX_HELPER_EXIT_PATH_OUTSIDE_WORK 3 /* path_outside_work: path rules or a symlink leaving the root */
#define SBX_HELPER_EXIT_NOT_FOUND 4         /* not_found: a component does not exist */
#define SBX_HELPER_EXIT_TOO_LARGE 5         /* too_large: over --max */
#define SBX_HELPER_EXIT_FORBIDDEN 6         /* forbidden: EACCES/EPERM for the sandbox user */
#define SBX_HELPER_EXIT_CANCELLED 7         /* cancelled (only used inside exec, as 125) */

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
