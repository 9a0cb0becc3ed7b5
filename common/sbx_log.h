/* sbx_log.h - JSON-lines logging on stderr with secret redaction (SPEC §9). */
#ifndef SBX_LOG_H
#define SBX_LOG_H

#include <stdarg.h>

/*
 * Every line is one compact JSON object followed by '\n', written with one
 * write(2) call:
 *   {"ts":"2026-11-30T12:58:16.123Z","level":"info","prog":"sandbox-broker",
 *    "msg":"sandbox created","id":"npc-1","ms":"12"}
 * ts is UTC with milliseconds. Fields are key/value string pairs given after
 * msg and ended by NULL. A field named like a fixed member (ts, level, prog,
 * msg) is written as "field_<name>" so it never hides the fixed one. Bytes
 * that are not valid UTF-8 are written as "\xNN" text, so every line is valid
 * JSON whatever the input.
 *
 * Before encoding, every registered secret (sbx_log_add_secret) is replaced
 * by "[redacted]" in msg and in every key and value: a last line of defence,
 * callers still must not log tokens, keys or request bodies.
 *
 * The module holds process-wide state guarded by a mutex; every function may
 * be called from any thread. Until sbx_log_init is called, lines go to fd 2
 * with prog "sbx" at level info.
 */

enum sbx_log_level {
	SBX_LOG_DEBUG = 0,
	SBX_LOG_INFO = 1,
	SBX_LOG_WARN = 2,
	SBX_LOG_ERROR = 3,
};

/*
 * Sets the program name written as "prog" (copied; NULL keeps the current
 * one), the fd lines are written to (borrowed: the module never closes it,
 * but sbx_log_reopen may dup2 onto it) and the lowest level written
 * (SBX_LOG_*; lower levels are dropped). Forgets any path of a previous
 * sbx_log_reopen. Never fails.
 */
void sbx_log_init(const char *prog, int fd, int min_level);

/* Changes the lowest level written (SBX_LOG_*). */
void sbx_log_set_level(int min_level);

/*
 * Parses "debug", "info", "warn"/"warning", "error" (case-insensitive).
 * Returns the SBX_LOG_* level, or -1 for anything else (including NULL).
 */
int sbx_log_level_parse(const char *name);

/* "debug", "info", "warn", "error"; "info" for an unknown level. */
const char *sbx_log_level_name(int level);

/*
 * For SIGHUP: (re)opens a log file and makes the log fd refer to it.
 * path non-NULL: opens path (O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC, mode 0640),
 * dup2()s it onto the fd given to sbx_log_init (so when that fd is 2, stderr
 * itself follows) and remembers path for later calls.
 * path NULL: reopens the remembered path, or when there is none keeps the fd
 * as it is and returns 0 (logging to a plain stderr needs no reopen).
 * Returns 0 on success, -1 with errno set when open/dup2 fails; the old fd
 * stays in use then.
 */
int sbx_log_reopen(const char *path);

/*
 * Registers a secret (copied into memory wiped with sodium_memzero when it is
 * removed): from now on every occurrence of it in msg, keys and values is
 * written as "[redacted]". Secrets shorter than SBX_LOG_SECRET_MIN bytes are
 * ignored (they would mangle ordinary words); NULL is ignored. Registering
 * the same secret twice is harmless. Never fails (out of memory: the secret
 * is not registered and a warning without it is logged).
 */
#define SBX_LOG_SECRET_MIN 4
void sbx_log_add_secret(const char *s);

/* Forgets and wipes every registered secret (tests, shutdown). */
void sbx_log_clear_secrets(void);

/*
 * Log at a level. Arguments after msg: key, value, key, value, ..., NULL.
 * Keys and values are borrowed C strings. A NULL value is written as JSON
 * null and also ends the list (so an odd pair never reads past the NULL).
 * msg NULL is written as "". Never fails visibly: when the line cannot be
 * built (out of memory) a fixed line saying so is written instead.
 */
void log_debug(const char *msg, ...) __attribute__((sentinel));
void log_info(const char *msg, ...) __attribute__((sentinel));
void log_warn(const char *msg, ...) __attribute__((sentinel));
void log_error(const char *msg, ...) __attribute__((sentinel));

/* The same with the level as an argument (SBX_LOG_*). */
void sbx_log(int level, const char *msg, ...) __attribute__((sentinel));
void sbx_logv(int level, const char *msg, va_list ap);

/*
 * Logs msg and fields at level error, then exit(exit_code). For startup
 * failures only (SPEC: public input never aborts). Exit codes: 64 usage,
 * 78 configuration, 69 unavailable, 70 internal (sysexits.h).
 */
__attribute__((noreturn)) void fatal(int exit_code, const char *msg, ...)
    __attribute__((sentinel));

#endif
