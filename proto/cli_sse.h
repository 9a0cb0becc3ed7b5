/* cli_sse.h - incremental Server-Sent Events parser of the sbx CLI (WHATWG HTML §9.2.6). */
#ifndef CLI_SSE_H
#define CLI_SSE_H

#include <stddef.h>

#include "sbx_err.h"

/* Default bound on one event's data (bytes) and on one line: 16 MiB. */
#define CLI_SSE_MAX_DEFAULT ((size_t)16 * 1024 * 1024)

/*
 * Called once per dispatched event, in stream order. event: the "event"
 * field, or "message" when the event had none. data[0..len): the "data"
 * lines joined with "\n" (no trailing "\n"); data[len] is a NUL byte, but
 * data may contain NULs itself. id: the last event id seen so far on the
 * stream ("" when none). All three are borrowed and valid only during the
 * call. Return 0 to go on; any other value stops the parser (feed then
 * returns -1 with err code "cancelled").
 */
typedef int (*cli_sse_cb)(void *arg, const char *event, const char *data,
    size_t len, const char *id);

struct cli_sse;

/*
 * A new parser (owned; cli_sse_free). max: longest accepted line and
 * largest accepted event data in bytes; 0 means CLI_SSE_MAX_DEFAULT.
 * Returns NULL when out of memory or cb is NULL.
 */
struct cli_sse *cli_sse_new(size_t max, cli_sse_cb cb, void *arg);

/*
 * Feeds the next len bytes of the stream, split anywhere (even between a
 * CR and its LF, or inside a UTF-8 character). Interprets it as the WHATWG
 * "event stream interpretation" does: one leading UTF-8 BOM is skipped;
 * lines end with CRLF, LF or CR; a line starting with ':' is a comment and
 * ignored; "name: value" (one space after the colon dropped) or "name"
 * alone (empty value); fields "event", "data" (appended, then "\n"), "id"
 * (ignored when it contains NUL), "retry" (ignored here); unknown fields
 * ignored; a blank line dispatches the event when its data buffer is not
 * empty and then resets data and event type (the id stays).
 * Returns 0, or -1 with err set, after which every feed returns -1:
 *  - bad_request "protocol_error: ...": a line or event data over max;
 *  - cancelled: cb returned nonzero;
 *  - internal: out of memory.
 */
int cli_sse_feed(struct cli_sse *p, const char *buf, size_t len,
    struct sbx_err *err);

/*
 * The stream ended. Per the standard an event not followed by a blank line
 * is discarded. Returns 1 when bytes of an unfinished line or event were
 * pending (the caller may treat it as a truncated stream), else 0.
 */
int cli_sse_pending(const struct cli_sse *p);

/* Frees p; NULL allowed. */
void cli_sse_free(struct cli_sse *p);

/*
 * The inverse of the api's SPEC §5 mapping: rebuilds the NDJSON line of
 * one exec event from its SSE event name and data (the JSON object without
 * "type"): '{"type":"EVENT"' + (',' + the members after data's '{', or '}'
 * when data is "{}") + '\n', with each '\n' inside data (the joint of
 * several data lines) turned into a space. For events the api sent, the result is the
 * broker's line byte for byte, ready for sbx_ndjson_parser_feed, which
 * then decodes and checks it. event must match [a-z][a-z0-9_]{0,31};
 * data[0..len) must start with '{' and end with '}'. Returns a new buffer
 * (owned: free) of *outlen bytes, or NULL when the input does not fit
 * those rules or memory runs out.
 */
char *cli_sse_ndjson_line(const char *event, const char *data, size_t len,
    size_t *outlen);

#endif
