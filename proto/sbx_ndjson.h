/* sbx_ndjson.h - NDJSON exec event codec (SPEC §5, proto/broker-api.md "Exec events"). */
#ifndef SBX_NDJSON_H
#define SBX_NDJSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sbx_err.h"

struct evbuffer;

/*
 * Limits of the exec event stream.
 *
 * SBX_NDJSON_MAX_LINE_DEFAULT: the longest line (bytes, without its '\n') a
 * parser accepts when created with max_line 0: 8 MiB.
 * SBX_NDJSON_MAX_CHUNK: the most output bytes one sbx_ndjson_output() call
 * takes (1 MiB). Its worst case line is base64 of it, 4/3 MiB + 64 (text
 * goes as "data" only when its escaping is no longer than that, adr/0028),
 * under the default line limit, so whatever a producer encodes a default
 * parser accepts; the limit stays 8 MiB so an older producer's lines (up to
 * 6 bytes per control byte) are still read. Producers split larger reads
 * into chunks of at most this size.
 */
#define SBX_NDJSON_MAX_LINE_DEFAULT ((size_t)8 * 1024 * 1024)
#define SBX_NDJSON_MAX_CHUNK ((size_t)1024 * 1024)

/* Output streams, as in the Engine API multiplexed stream. */
#define SBX_STREAM_STDOUT 1
#define SBX_STREAM_STDERR 2

/* ------------------------------------------------------------------ */
/* UTF-8                                                               */

/*
 * Returns 1 when buf[0..len) is entirely valid UTF-8 (RFC 3629 strict:
 * no overlong forms, no surrogates U+D800..U+DFFF i.e. no ED A0..BF, nothing
 * above U+10FFFF, no bytes C0 C1 F5..FF), else 0. NUL bytes are valid.
 * len 0 is valid. buf may be NULL when len is 0.
 */
int sbx_utf8_valid(const unsigned char *buf, size_t len);

/*
 * For a producer that reads output in arbitrary pieces: returns how many
 * bytes (0..3) at the end of buf[0..len) are the start of a multi-byte
 * sequence that is valid so far but incomplete. A producer may hold them
 * back and prepend them to the next read so that characters split across
 * reads still go out as "data" text; at end of stream it sends them as is.
 * Returns 0 when the tail is complete or can never become valid.
 */
size_t sbx_utf8_incomplete_tail(const unsigned char *buf, size_t len);

/* ------------------------------------------------------------------ */
/* JSON string escaping, byte-identical to jansson's json_dumpb (2.14):
 * '"' and '\\' and \b \f \n \r \t as two-character escapes, every other
 * byte below 0x20 as \u00XX (upper-case hex), everything else (DEL, UTF-8)
 * as is. No quotes around the result.                                   */

/* Bytes sbx_json_escape writes for s[0..len). */
size_t sbx_json_escaped_len(const unsigned char *s, size_t len);

/* Writes the escaped form of s[0..len) at dst, which has room for
 * sbx_json_escaped_len(s, len) bytes; returns the end (no NUL written). */
char *sbx_json_escape(char *dst, const unsigned char *s, size_t len);

/* Standard padded base64 (RFC 4648 §4) of src[0..len) written at dst, which
 * has room for 4 * ((len + 2) / 3) bytes; returns the end (no NUL written).
 * Table-driven and not constant-time: for exec output and file bytes, never
 * for secrets (those use libsodium's sodium_bin2base64). Output is identical
 * to sodium_bin2base64(..., sodium_base64_VARIANT_ORIGINAL). */
char *sbx_base64_encode(char *dst, const unsigned char *src, size_t len);

/*
 * Recognises an output line exactly as sbx_ndjson_output writes it, so the
 * parser and the SSE mapping can skip general JSON parsing on the hot path.
 * line[0..len): one line without its '\n'. Returns 1 when it is
 * {"type":"stdout"|"stderr","data"|"data_b64":"S"} byte for byte, with S
 * valid UTF-8 escaped exactly as sbx_json_escape does (or, for data_b64,
 * only base64 alphabet characters); then *stream is 1 or 2, *b64 is 1 for
 * data_b64, and line[*val_off .. *val_off + *val_len) is S, still escaped.
 * Returns 0 otherwise: the line may still be a valid event in another
 * spelling (other member order, other escapes), which a JSON parser reads.
 */
int sbx_ndjson_canonical_output(const char *line, size_t len, int *stream,
    int *b64, size_t *val_off, size_t *val_len);

/*
 * The wire rule for one output chunk (proto/broker-api.md "Exec events",
 * adr/0028): returns 1 when buf[0..len) goes as "data", i.e. it is valid
 * UTF-8 (sbx_utf8_valid) and its JSON escaping (sbx_json_escaped_len) is
 * no longer than its padded base64, 4 * ceil(len / 3) bytes (equal counts
 * as text); then *escaped_len (when not NULL) is the escaped length.
 * Returns 0 when it goes as "data_b64" (*escaped_len untouched). len 0 is
 * text. buf may be NULL when len is 0. Pure.
 */
int sbx_ndjson_output_is_text(const unsigned char *buf, size_t len,
    size_t *escaped_len);

/* ------------------------------------------------------------------ */
/* Encoder. Each call appends exactly one compact JSON object followed by
 * one '\n' to out and returns 0, or returns -1 with nothing appended
 * (invalid arguments or allocation failure). The
 * member order is fixed and is the one shown; the bytes are identical to
 * jansson's json_dumpb(JSON_COMPACT) of the same object.                */

/* {"type":"start","exec_id":EXEC_ID,"ts":TS_MS}
 * exec_id: non-NULL valid UTF-8 string (copied). ts_ms: Unix milliseconds. */
int sbx_ndjson_start(struct evbuffer *out, const char *exec_id, int64_t ts_ms);

/*
 * One piece of output. stream: SBX_STREAM_STDOUT (1) or SBX_STREAM_STDERR
 * (2); it gives the "type". buf[0..len): the bytes (borrowed; may be NULL
 * when len is 0; len <= SBX_NDJSON_MAX_CHUNK). When the bytes are valid
 * UTF-8 and their escaping is no longer than base64
 * (sbx_ndjson_output_is_text) the line is {"type":"stdout","data":"TEXT"}
 * with the text JSON-escaped (NUL as \u0000); otherwise
 * {"type":"stdout","data_b64":"BASE64"} (RFC 4648 §4 standard alphabet
 * with padding). Likewise "stderr". Errors: stream not 1/2, len too large,
 * buf NULL with len > 0, allocation failure.
 */
int sbx_ndjson_output(struct evbuffer *out, int stream,
    const unsigned char *buf, size_t len);

/*
 * A stream's held UTF-8 tail (SPEC §5: text cut by a read boundary stays
 * text): at most 3 bytes that start a character the last piece did not
 * finish. One per stream of an exec; zero-initialise it.
 */
struct sbx_utf8_hold {
	unsigned char tail[4];
	size_t len;              /* 0..3 */
};

/*
 * Like sbx_ndjson_output for buf[0..len) of any length, with hold h of
 * that stream: the bytes held from the previous call go first, a
 * character split at the end of buf is held back (at most 3 bytes) for the
 * next call, and pieces longer than SBX_NDJSON_MAX_CHUNK are cut on
 * character boundaries. When the held bytes are completed by buf they go
 * out as one short event of their own, so the bytes of buf are not copied.
 * Appends zero or more lines to out; returns 0, or -1 (bad stream, buf
 * NULL with len > 0, allocation failure). Decoding every event of the
 * stream plus sbx_ndjson_output_flush gives back exactly the bytes given.
 * Pure: works on plain buffers (fuzzed).
 */
int sbx_ndjson_output_held(struct evbuffer *out, struct sbx_utf8_hold *h,
    int stream, const unsigned char *buf, size_t len);

/* At the end of a stream (exit, error): the held bytes, as they are (data_b64
 * since they are incomplete), then h is empty. Nothing when h is empty.
 * Returns 0 or -1 as sbx_ndjson_output. */
int sbx_ndjson_output_flush(struct evbuffer *out, struct sbx_utf8_hold *h,
    int stream);

/*
 * {"type":"exit","code":CODE,"signal":SIGNAL|null,"duration_ms":MS,
 *  "truncated":true|false}
 * code: exit status (0..255; 128+N when ended by signal N). signal: NULL
 * gives null, else the signal name without "SIG" ("KILL"), valid UTF-8.
 * duration_ms: wall time of the exec. truncated: nonzero when the output cap
 * was reached and the exec was ended because of it.
 */
int sbx_ndjson_exit(struct evbuffer *out, int code, const char *signal,
    int64_t duration_ms, int truncated);

/*
 * {"type":"quota","bytes":BYTES,"quota":QUOTA,"message":MESSAGE}
 * (adr/0057): /work holds BYTES (st_blocks x 512, as the usage walk counts
 * them), more than the broker's work_quota QUOTA; sent once per crossing,
 * just before the exit event of the exec whose end found it. Both >= 0;
 * the message is built here ("/work holds N bytes, over its quota of Q
 * bytes: writes through the API are refused until files are removed.").
 */
int sbx_ndjson_quota(struct evbuffer *out, int64_t bytes, int64_t quota);

/* {"type":"error","code":CODE,"message":MESSAGE}. code: an SBX_E_* string
 * (e.g. SBX_E_TIMEOUT); message: one human sentence, never a secret. Both
 * non-NULL valid UTF-8. */
int sbx_ndjson_error(struct evbuffer *out, const char *code,
    const char *message);

/* ------------------------------------------------------------------ */
/* Decoder                                                             */

enum sbx_event_type {
	SBX_EVENT_START = 1,
	SBX_EVENT_STDOUT,
	SBX_EVENT_STDERR,
	SBX_EVENT_EXIT,
	SBX_EVENT_ERROR,
	SBX_EVENT_QUOTA,   /* between start and exit, at most once (adr/0057) */
};

/* "start", "stdout", ... (SBX_EV_*); "" for anything else. */
const char *sbx_event_type_name(enum sbx_event_type t);

/*
 * One decoded event. Every pointer is borrowed: valid only during the
 * callback. Members not used by an event type are 0 / NULL.
 */
struct sbx_event {
	enum sbx_event_type type;
	int stream;                /* stdout/stderr: 1 or 2; else 0 */
	const unsigned char *data; /* stdout/stderr: decoded bytes of "data"
	                            * or "data_b64"; not NUL-terminated */
	size_t len;                /* number of bytes at data (may be 0) */
	const char *exec_id;       /* start */
	int64_t ts;                /* start: Unix milliseconds */
	int code;                  /* exit: exit status */
	const char *signal;        /* exit: NULL (JSON null) or name */
	int64_t duration_ms;       /* exit */
	int truncated;             /* exit: 0 or 1 */
	const char *err_code;      /* error: "code" */
	const char *err_message;   /* error: "message"; quota: "message" */
	int64_t work_bytes;        /* quota: "bytes" */
	int64_t work_quota;        /* quota: "quota" */
	json_t *raw;               /* the parsed object (borrowed; the caller
	                            * may json_incref it to keep it) */
	int undecoded;             /* 1: an output event handed over as its
	                            * line only (sbx_ndjson_parser_undecoded):
	                            * data and raw are NULL, len is the
	                            * number of bytes the line carries */
};

/*
 * Called once per complete line, in stream order. ev: the decoded event;
 * line/len: the line's raw bytes without the terminating '\n' (so it can be
 * handed to sbx_sse_from_ndjson). Return 0 to go on; any other value stops
 * the parser: sbx_ndjson_parser_feed then returns -1 with err code
 * "cancelled". The callback must not free the parser.
 */
typedef int (*sbx_ndjson_cb)(void *arg, const struct sbx_event *ev,
    const char *line, size_t len);

struct sbx_ndjson_parser;

/*
 * A new incremental parser (owned; free with sbx_ndjson_parser_free).
 * max_line: longest accepted line in bytes without its '\n'; 0 means
 * SBX_NDJSON_MAX_LINE_DEFAULT. cb/arg: see sbx_ndjson_cb. Returns NULL only
 * when out of memory or cb is NULL.
 */
struct sbx_ndjson_parser *sbx_ndjson_parser_new(size_t max_line,
    sbx_ndjson_cb cb, void *arg);

/*
 * Feeds the next len bytes of the stream (lines may be split anywhere,
 * several lines may come in one call). Calls cb for each complete line.
 * Returns 0, or -1 with err set, after which the parser is stopped and every
 * later feed returns -1 again:
 *  - bad_request, message starting "protocol_error:": a line longer than
 *    max_line; a line that is not one JSON object; an object whose "type" is
 *    not one of the five events; a known event with a missing or mistyped
 *    member (stdout/stderr need exactly one of "data"/"data_b64", the latter
 *    valid padded standard base64); an event out of order (start first, or a
 *    lone error; stdout/stderr only between start and exit; after exit only
 *    one error; nothing after error); an exit "code" outside 0..255. An
 *    empty line ("\n") is an error too.
 *    Unknown extra members are accepted (forward compatibility).
 *  - cancelled: cb returned nonzero.
 *  - internal: out of memory.
 * A '\r' before '\n' is accepted (JSON whitespace) and kept in line.
 * Lines exactly as sbx_ndjson_output writes them skip the general JSON
 * parser (sbx_ndjson_canonical_output); the event, including raw, is the
 * same either way. cb must not call feed/finish/free on p (no reentrancy).
 */
int sbx_ndjson_parser_feed(struct sbx_ndjson_parser *p, const char *buf,
    size_t len, struct sbx_err *err);

/*
 * The stream has ended (EOF). Returns 0 when it ended cleanly: no partial
 * line buffered and a terminal event (exit or error) seen. Else -1 with err
 * bad_request "protocol_error: ..." (truncated line, stream ended before
 * exit/error) or the error that stopped the parser earlier.
 */
int sbx_ndjson_parser_finish(struct sbx_ndjson_parser *p, struct sbx_err *err);

/*
 * Undecoded mode (on nonzero; off by default), for a consumer that
 * forwards output lines as received (the api's broker-client driver,
 * adr/0028): an output line in the encoder's exact spelling
 * (sbx_ndjson_canonical_output) whose value is also strictly valid (the
 * escapes and UTF-8 of "data", or padded base64 with zero unused bits for
 * "data_b64": every check decoding makes) and which is in order is handed
 * to cb without being decoded: ev->undecoded 1, ev->data and ev->raw NULL,
 * ev->len the number of output bytes it carries, line/len the line. Any
 * other line is parsed and decoded as usual (ev->undecoded 0), so cb must
 * handle both. Errors are those of feed: an invalid line is refused the
 * same way in either mode. p NULL: nothing.
 */
void sbx_ndjson_parser_undecoded(struct sbx_ndjson_parser *p, int on);

/* Frees p; NULL allowed. */
void sbx_ndjson_parser_free(struct sbx_ndjson_parser *p);

#endif
