/* sbx_err.h - the error value every sbx function that can fail fills in. */
#ifndef SBX_ERR_H
#define SBX_ERR_H

#include <stdarg.h>

#include "sbx_msg.h"

/*
 * An error: a stable snake_case code (one of the SBX_E_* strings of
 * proto/sbx_proto.h) and one human sentence. Fixed-size and owned by whoever
 * declared it, so it can live on the stack and be copied with '='. Messages
 * never contain a secret (token, key, request body): callers that format a
 * message from input must pass only ids, paths and sizes.
 */
struct sbx_err {
	char code[48];     /* "" when no error; else e.g. "path_outside_work" */
	char message[256]; /* one sentence, no trailing newline */
};

/* Clears err (code and message become ""). err may be NULL. */
void sbx_err_clear(struct sbx_err *err);

/*
 * Sets err->code to code (truncated to fit) and err->message to the printf-
 * style fmt. err may be NULL (then nothing happens). Always returns -1 so a
 * caller can write 'return sbx_err_set(err, ...);'.
 */
int sbx_err_set(struct sbx_err *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * The one out-of-memory error: code internal, message SBX_MSG_OOM ("Out of
 * memory."). err may be NULL. Always returns -1, like sbx_err_set.
 */
int sbx_err_oom(struct sbx_err *err);

/*
 * The one sandbox-id error: code invalid_id, message SBX_MSG_BAD_ID (the
 * rule of sbx_id_valid, SPEC §4). err may be NULL. Always returns -1.
 */
int sbx_err_bad_id(struct sbx_err *err);

/* Returns 1 when err holds an error (non-empty code), 0 otherwise or for NULL. */
int sbx_err_is_set(const struct sbx_err *err);

/*
 * The HTTP status that fits err->code (SPEC §4), from the one table of
 * sbx_err.c that names every code of proto/sbx_proto.h: 400 bad input, 401,
 * 403, 404 absent, 408 head too slow, 409 conflict, 413 too large, 414 and
 * 431 head too long, 429 limit reached, 502 the runtime or the sandbox's
 * port answered badly (runtime_error, port_closed), 503 unavailable,
 * overloaded or cancelled, 504 timeout, 507 quota_exceeded (/work would
 * pass work_quota, adr/0057), 501 unsupported (an optional driver op the
 * driver lacks, adr/0068); 500 for internal, an unknown or
 * empty code.
 */
int sbx_err_http_status(const struct sbx_err *err);

#endif
