/* sbx_sse.h - Server-Sent Events encoder and the NDJSON -> SSE mapping (SPEC §5). */
#ifndef SBX_SSE_H
#define SBX_SSE_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_err.h"

struct evbuffer;
struct sbx_event;

/* Seconds between heartbeat comments on an idle SSE stream (SPEC §5). */
#define SBX_SSE_HEARTBEAT_SEC 15
/* The heartbeat comment's text: sbx_sse_comment(out, SBX_SSE_PING). */
#define SBX_SSE_PING "ping"

/*
 * Appends one event (WHATWG HTML Living Standard §9.2 "Server-sent events",
 * "Interpreting an event stream") to out, all or nothing:
 *
 *   id: ID\n            (omitted when id is 0)
 *   event: EVENT\n      (omitted when event is NULL: type "message")
 *   data: LINE\n        (one per line of data, at least one)
 *   \n
 *
 * data[0..len) (borrowed; NULL allowed when len is 0) is split at every
 * "\r\n", "\r" and "\n"; each piece goes on its own "data: " line, so no
 * byte of data can end the event or start another field. A receiver joins
 * the pieces with "\n": it gets data back with each line break normalised to
 * "\n" (JSON from sbx_sse_from_ndjson never contains a raw line break, so it
 * comes back unchanged). len 0 gives one empty "data: " line (an event with
 * empty data, still dispatched by EventSource).
 *
 * Returns 0, or -1 with nothing appended when event contains CR, LF or NUL,
 * or is empty, or on allocation failure.
 */
int sbx_sse_event(struct evbuffer *out, uint64_t id, const char *event,
    const char *data, size_t len);

/*
 * Appends the comment ": TEXT\n\n" (text NULL or "": ":\n\n"); receivers
 * ignore it, it keeps proxies from timing the stream out. Heartbeats use
 * sbx_sse_comment(out, SBX_SSE_PING) every SBX_SSE_HEARTBEAT_SEC. Returns 0,
 * or -1 with nothing appended when text contains CR, LF or NUL, or on
 * allocation failure.
 */
int sbx_sse_comment(struct evbuffer *out, const char *text);

/*
 * The SPEC §5 mapping of one NDJSON exec event line to one SSE event:
 * "id: ID", "event: " the line's "type" member, "data: " the same JSON
 * object without "type", compact (JSON_COMPACT), the remaining members in
 * their original order, strings with jansson's escaping (non-ASCII kept as
 * UTF-8, control characters escaped).
 *
 * line[0..len): one JSON object (a trailing "\n" or "\r\n" is allowed),
 * borrowed. id: the SSE id (the api numbers events 1, 2, ... per stream).
 * Returns 0, or -1 with nothing appended and err set: bad_request
 * "protocol_error: ..." when line is not a JSON object or its "type" is
 * missing, not a string, or not [a-z][a-z0-9_]{0,31}; internal on
 * allocation failure. It does not check the event's other members (the
 * NDJSON parser does).
 *
 * Speed: an output line exactly as the encoder writes it is mapped by
 * copying ('{' + the line after its "type" member), without parsing; this
 * is the cheapest way to forward a stream (call it from the NDJSON parser
 * callback with the line it gets). Other lines go through jansson.
 */
int sbx_sse_from_ndjson(struct evbuffer *out, uint64_t id, const char *line,
    size_t len, struct sbx_err *err);

/*
 * Same mapping and bytes for a line this process's own sbx_ndjson encoder
 * wrote (proto/sbx_ndjson.h; e.g. the api re-encoding the broker's events):
 * any line with "type" first and compact is mapped by copying without
 * parsing JSON; other lines as sbx_sse_from_ndjson. Never use it for bytes
 * from elsewhere: it does not check that the rest is valid JSON. Same
 * returns and errors. (The one NDJSON -> SSE path: sbx_sse_from_ndjson,
 * this and sbx_sse_from_event share one mapping in sbx_sse.c.)
 */
int sbx_sse_from_own_ndjson(struct evbuffer *out, uint64_t id,
    const char *line, size_t len, struct sbx_err *err);

/*
 * The same mapping for an output line forwarded as received (struct
 * sbx_sink output_line, adr/0028), without decoding or re-encoding its
 * data: line[0..len) (borrowed, no '\n') must be
 * {"type":"stdout"|"stderr",M...} with "type" first and compact, and holds
 * no CR, LF or NUL; the event is "id: ID", "event: " that type, "data: {"
 * + M... (the line after its type member), byte for byte what
 * sbx_sse_from_ndjson gives for it. Only the type is parsed: the rest is
 * the caller's to have checked (the NDJSON parser's undecoded mode checks
 * all of it), but nothing in it can break the SSE framing. Returns 0, or
 * -1 with nothing appended and err set: bad_request "protocol_error: ..."
 * when line is not of that shape; internal on allocation failure.
 */
int sbx_sse_from_output_line(struct evbuffer *out, uint64_t id,
    const char *line, size_t len, struct sbx_err *err);

/*
 * Same mapping from an event the NDJSON parser already decoded, without
 * parsing the line again (uses ev->raw, which is not modified; ev->type
 * gives the event name). Same result bytes and errors as
 * sbx_sse_from_ndjson on the event's line. Output events whose raw object
 * has only "type" and "data"/"data_b64" are re-escaped directly, others
 * dumped by jansson.
 */
int sbx_sse_from_event(struct evbuffer *out, uint64_t id,
    const struct sbx_event *ev, struct sbx_err *err);

#endif
