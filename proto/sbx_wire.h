/* sbx_wire.h - every broker API body, encoded and decoded in both directions (proto/broker-api.md, SPEC §4). */
#ifndef SBX_WIRE_H
#define SBX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sbx_err.h"
#include "sbx_types.h"

/*
 * One module for the JSON bodies of the broker API, used by the broker
 * (broker/broker_http.c: decodes requests, encodes replies), by the
 * broker-client driver (api/driver_broker.c: encodes requests, decodes
 * replies), by the api for its own exec route (the same exec body, SPEC §4)
 * and by tests. The rules written here are the contract: where the broker and
 * the api used to differ, the broker's rule won (issue 12).
 *
 * Conventions for every function below:
 * - Decoders read untrusted input. They never abort, never read past a
 *   length, and on failure return -1 with err set (code from sbx_proto.h,
 *   a message naming the field but never quoting a value beyond 64
 *   printable bytes) and leave their outputs zeroed / freed.
 * - Encoders return a new jansson reference the caller owns (json_decref),
 *   or NULL only when out of memory, unless said otherwise.
 * - Strings decoded from a json_t are borrowed from it: the json_t must
 *   outlive the decoded struct.
 * - Limits that come from configuration (image allowlist, memory/cpu/pids/
 *   timeout/output ceilings, exec counts) are the caller's; the limits of
 *   the wire itself (SBX_EXEC_*_MAX, SBX_PATH_MAX in sbx_proto.h) are here.
 */

/* ------------------------------------------------------------------ */
/* Request bodies                                                      */

/*
 * Parses buf[0..len) as one JSON object (duplicate keys refused, as
 * JSON_REJECT_DUPLICATES) whose members are all named in allowed (a
 * NULL-terminated list). len 0: an empty object when empty_ok, else
 * bad_request "A JSON body is required.". buf need not be NUL-terminated.
 * On success *out is a new reference. Errors: bad_request (not JSON, with
 * line and column; not an object; empty), unknown_field (names the field,
 * at most 63 printable bytes of it). Source: proto/broker-api.md "Errors".
 */
int sbx_wire_body_object(const char *buf, size_t len, const char *const *allowed,
    int empty_ok, json_t **out, struct sbx_err *err);

/*
 * The member check of sbx_wire_body_object alone, for a body parsed
 * elsewhere: 0 when every member of obj is named in allowed, else -1 with
 * unknown_field (as above). obj must be an object (else bad_request).
 */
int sbx_wire_fields_check(const json_t *obj, const char *const *allowed,
    struct sbx_err *err);

/* The members an ensure body (PUT /v1/sandboxes/{id}) may hold. */
extern const char *const sbx_wire_spec_fields[];
/* The members an exec body (POST .../exec) may hold. */
extern const char *const sbx_wire_exec_fields[];

/*
 * Ensure body -> *spec (proto/broker-api.md "ensure"). body comes from
 * sbx_wire_body_object(..., sbx_wire_spec_fields, 1, ...). "egress"
 * (boolean) is required; "image" a string without NUL (spec->image borrows
 * it; NULL when absent); "memory_bytes", "nano_cpus", "pids" integers >= 0
 * (0 when absent). allowlist (NULL-terminated, or NULL: no check): an
 * image not in it is image_not_allowed, checked right after the image's
 * type so the error order is the broker's. Errors: bad_request (egress
 * missing, NUL in image), wrong_type (a member of the wrong JSON type or
 * negative), image_not_allowed. The ceilings (limit_exceeded) are the
 * caller's: they come from its configuration.
 */
int sbx_wire_spec_decode(const json_t *body, const char *const *allowlist,
    struct sbx_spec *spec, struct sbx_err *err);

/* *spec -> ensure body: {"egress":B} plus "image" when not NULL, each
 * limit when > 0 and, with egress, "egress_allow" (an array of the
 * '\n'-separated entries of spec->egress_allow, adr/0026). spec NULL:
 * {"egress":false}. The decoder leaves "egress_allow" to its caller (the
 * broker checks it with common/sbx_egress.h and owns the joined copy). */
json_t *sbx_wire_spec_encode(const struct sbx_spec *spec);

/*
 * A decoded exec body. req points into the members below and into the
 * json_t it was decoded from; free with sbx_wire_exec_free.
 */
struct sbx_wire_exec {
	struct sbx_exec_req req;   /* what to pass to the driver */
	const char **argv;         /* owned vector (free), strings borrowed from body */
	const char **env;          /* NULL, or ONE owned block (free) holding the
	                            * vector and its "K=V" strings */
	unsigned char *stdin_buf;  /* owned decoded stdin (free), NULL when none */
};

/*
 * Exec body -> *x (proto/broker-api.md "exec", SPEC §4). body comes from
 * sbx_wire_body_object(..., sbx_wire_exec_fields, 0, ...). Rules:
 * - "argv" required, an array of 1..SBX_EXEC_ARGV_MAX strings without NUL,
 *   argv[0] not empty;
 * - "cwd" a string that passes sbx_path_check (SPEC §4);
 * - "env" an object {"NAME":"value"} or an array ["NAME=value"] of at most
 *   SBX_EXEC_ENV_MAX entries, NAME [A-Za-z_][A-Za-z0-9_]*, values strings
 *   without NUL; x->req.env is then a NULL-terminated "NAME=value" list;
 * - "stdin" standard base64 with padding (RFC 4648 §4), decoded into
 *   x->stdin_buf / x->req.stdin_data, stdin_len bytes;
 * - "timeout_ms" (milliseconds) and "output_cap" (bytes) integers >= 0,
 *   0 when absent (the caller applies its default and ceiling).
 * Errors: bad_request (argv missing, empty, too long, argv[0] empty, NUL
 * in a string, bad env name, bad base64), wrong_type (wrong JSON type,
 * negative integer), limit_exceeded (env over SBX_EXEC_ENV_MAX),
 * path_outside_work (cwd), internal (out of memory). *x is zeroed first and
 * freed again on failure.
 */
int sbx_wire_exec_decode(const json_t *body, struct sbx_wire_exec *x,
    struct sbx_err *err);

/* sbx_wire_exec_decode with flags: SBX_WIRE_ARGV_OPTIONAL lets "argv" be
 * absent or [] (then x->req.argv stays NULL: a terminal's login shell). */
#define SBX_WIRE_ARGV_OPTIONAL 0x01
int sbx_wire_exec_decode_flags(const json_t *body, unsigned flags,
    struct sbx_wire_exec *x, struct sbx_err *err);

/* Frees what sbx_wire_exec_decode allocated (stdin wiped first: it may be
 * a secret) and zeroes *x; NULL allowed. A caller may take over argv, env
 * and stdin_buf instead (set them NULL here), each freed with free(). */
void sbx_wire_exec_free(struct sbx_wire_exec *x);

/*
 * *req -> exec body: "argv" always, "cwd" when not NULL, "env" as an array
 * of "K=V" when not NULL, "stdin" (base64) when stdin_data is not NULL,
 * "timeout_ms"/"output_cap" when > 0. Errors: bad_request (argv NULL or
 * empty; argv, cwd or env not UTF-8: JSON strings are text), internal (out
 * of memory). Returns the new body or NULL with err set.
 */
json_t *sbx_wire_exec_encode(const struct sbx_exec_req *req, struct sbx_err *err);

/*
 * A decoded session body (POST /v1/sandboxes/{id}/session, proto/broker-api.md
 * "Sessions", adr/0050). req points into x and into the json_t it was
 * decoded from; free with sbx_wire_session_free.
 */
struct sbx_wire_session {
	struct sbx_session_req req; /* what to pass to sbx_session_open */
	struct sbx_wire_exec x;     /* argv/env storage (req.exec is x.req) */
};

/* The members a session body may hold (which ones a kind takes: below). */
extern const char *const sbx_wire_session_fields[];

/*
 * Session body -> *s. body comes from sbx_wire_body_object(...,
 * sbx_wire_session_fields, 0, ...). Rules:
 * - "kind" required: "exec", "pty" or "port";
 * - exec: "argv" (required), "cwd", "env", "timeout_ms", "output_cap" as
 *   sbx_wire_exec_decode ("stdin" is not a member: input is streamed);
 * - pty: the same, "argv" optional (absent or []: the login shell), plus
 *   "cols" and "rows" (required integers 1..SBX_SESSION_SIZE_MAX) and
 *   "term" (optional, [A-Za-z0-9._+-]{1,64}; NULL: the driver's default);
 * - port: "port" alone (required integer 1..65535);
 * - a member of another kind is bad_request (it names the member).
 * Errors: bad_request (kind missing or unknown, a range, a member of
 * another kind, the exec rules), wrong_type, limit_exceeded,
 * path_outside_work, internal. *s is zeroed first and freed on failure.
 */
int sbx_wire_session_decode(const json_t *body, struct sbx_wire_session *s,
    struct sbx_err *err);

/* Frees what sbx_wire_session_decode allocated and zeroes *s; NULL allowed. */
void sbx_wire_session_free(struct sbx_wire_session *s);

/*
 * *req -> session body, the members of its kind only: exec and pty as
 * sbx_wire_exec_encode (stdin_data ignored; pty's argv only when not NULL
 * and not empty) plus "cols", "rows" and "term" (when not NULL); port
 * "port". Ranges are checked as the decoder does, so a body this encodes
 * decodes. Errors: bad_request (unknown kind, a range, argv missing for
 * exec, text not UTF-8), internal. Returns the new body or NULL with err.
 */
json_t *sbx_wire_session_encode(const struct sbx_session_req *req,
    struct sbx_err *err);

/*
 * ?mode= of a file PUT (proto/broker-api.md "files"): 1..4 octal digits,
 * value at most 0777 (no setuid/setgid/sticky). Returns 0 with *mode, or
 * -1 with bad_request. s NUL-terminated.
 */
int sbx_wire_mode_decode(const char *s, uint32_t *mode, struct sbx_err *err);

/* mode -> "%04o" into out (at least 8 bytes). Returns out. */
char *sbx_wire_mode_encode(uint32_t mode, char out[8]);

/* ------------------------------------------------------------------ */
/* Replies                                                             */

/*
 * {"error":{"code":C,"message":M}} (proto/broker-api.md "Errors"). code
 * NULL or "": "internal"; message NULL: "". */
json_t *sbx_wire_error_encode(const char *code, const char *message);

/*
 * Reads an error reply body (buf[0..len), untrusted) into *out: returns 0
 * when it is {"error":{"code":S,...}} with a code of 1..47 bytes (message
 * defaults to the code), else -1 and *out cleared (the caller then maps the
 * HTTP status itself). Never sets a code the body did not carry.
 */
int sbx_wire_error_decode(const char *buf, size_t len, struct sbx_err *out);

/*
 * Status object (proto/broker-api.md "status"):
 * {"id","state","image","egress","created_at","last_used_at",
 *  "stop_reason"[,"usage"][,"quota"]}. "quota" only when
 * st->quota.present (sbx_quota_json, adr/0057). For state absent image is null, egress
 * false, created_at null; times are Unix ms or null when 0; stop_reason
 * null when "" or absent. with_usage 1 adds "usage" (sbx_usage_json:
 * null when st->usage.present is 0).
 */
json_t *sbx_wire_status_encode(const struct sbx_status *st, int with_usage);

/*
 * Status object (untrusted) -> *st (zeroed first). Needs an object with a
 * string "state" ("running", "stopped", anything else absent); other
 * members optional with defaults ""/0/false; strings truncated to their
 * fields. A "usage" member must pass sbx_usage_from_json, a "quota"
 * member sbx_quota_from_json. Errors:
 * bad_request (not a status object, bad usage).
 */
int sbx_wire_status_decode(const json_t *o, struct sbx_status *st,
    struct sbx_err *err);

/*
 * GET /v1/sandboxes answer: a JSON array of status objects -> *sts
 * (calloc'ed, n + 1 entries, caller frees) and *n. Every entry must decode
 * and carry an id that passes sbx_id_valid. Errors: bad_request (not an
 * array, a bad entry), internal (out of memory); *sts NULL then.
 */
int sbx_wire_sandboxes_decode(const json_t *arr, struct sbx_status **sts,
    size_t *n, struct sbx_err *err);

/*
 * Directory entries -> a JSON array of {"name":S|"name_b64":B64,"type",
 * "size","mode","mtime"} (proto/broker-api.md "list"): a name that is not
 * UTF-8 cannot be a JSON string and goes as "name_b64" (standard base64,
 * RFC 4648 §4). type NULL reads "other". The v1 answer without ?cursor=
 * is this array alone (its truncation in the Sbx-List-Truncated and
 * Sbx-List-Cursor headers, which the caller adds).
 */
json_t *sbx_wire_dirents_encode(const struct sbx_dirent *ents, size_t n);

/*
 * A list page (adr/0013): {"entries":[...],"truncated":B,"cursor":S|null};
 * truncated only when n > 0; cursor = sbx_wire_cursor_encode of the last
 * name when truncated, else null.
 */
json_t *sbx_wire_list_encode(const struct sbx_dirent *ents, size_t n,
    int truncated);

/*
 * A list answer (untrusted) -> *ents (calloc'ed, n + 1 entries, caller
 * frees), *n and *truncated. Accepts the page object or the bare array of
 * a broker before adr/0013 (truncated 0). Entry type other than file, dir,
 * symlink reads "other"; "name" or else "name_b64" (decoded; a bad one
 * leaves the name ""). Errors: bad_request (no entries array), internal.
 */
int sbx_wire_list_decode(const json_t *root, struct sbx_dirent **ents,
    size_t *n, int *truncated, struct sbx_err *err);

/* One entry object of a list answer (untrusted) into *e, as
 * sbx_wire_list_decode reads each (for a page decoded entry by entry as it
 * arrives, adr/0030). Never fails: what is missing reads 0 / "" / other. */
void sbx_wire_dirent_decode(const json_t *v, struct sbx_dirent *e);

/*
 * The text of n entries as sbx_wire_dirents_encode would give them, without
 * the brackets ("" for n 0): a page's reply encoded in slices is the
 * opening, the slices joined by commas, the closing (adr/0030). Returns a
 * malloc'ed NUL-terminated string, NULL when out of memory.
 */
char *sbx_wire_dirents_text(const struct sbx_dirent *ents, size_t n);

/*
 * List cursor (adr/0013): base64url without padding of name (1..255 bytes)
 * into out (cap >= SBX_WIRE_CURSOR_MAX). name NULL or "": out "". Returns
 * the length written.
 */
#define SBX_WIRE_CURSOR_MAX 344
size_t sbx_wire_cursor_encode(const char *name, char *out, size_t cap);

/*
 * ?cursor= value (cur[0..len), untrusted) -> name (NUL-terminated, name
 * has at least SBX_PATH_SEGMENT_MAX + 1 bytes). len 0: name "" (first
 * page), returns 0. Errors: bad_request when it is not a cursor this
 * module made (too long, not base64url, empty, holds NUL or '/').
 */
int sbx_wire_cursor_decode(const char *cur, size_t len, char *name,
    struct sbx_err *err);

/*
 * Health object (proto/broker-api.md "health"): {"status","reason",
 * "runtime","api_version","version","driver"}; reason null when ok,
 * runtime and api_version null when "" (h NULL: all three null).
 * version and driver are the broker's (not in struct sbx_health).
 */
json_t *sbx_wire_health_encode(const struct sbx_health *h, const char *version,
    const char *driver);

/* Health object (untrusted) -> *h (zeroed first): ok = status "ok". Members
 * missing read "". Never fails for an object; -1 bad_request otherwise. */
int sbx_wire_health_decode(const json_t *o, struct sbx_health *h,
    struct sbx_err *err);

/* File PUT answer: {"path":S,"size":N} (size in bytes). */
json_t *sbx_wire_written_encode(const char *path, int64_t size);

#endif
