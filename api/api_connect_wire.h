/* api_connect_wire.h - the Connect protocol's bytes, without a request (api_connect.c; unit-tested and fuzzed, tests/fuzz/fuzz_connect.c): content types, the timeout header, a request body's one message, envelopes out (connectrpc.com/docs/protocol, adr/0060). */
#ifndef API_CONNECT_WIRE_H
#define API_CONNECT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api_connect.h"
#include "sbx_err.h"

struct evbuffer;

/* Content-Type value v (NULL: absent) of a call of kind: 1 the JSON codec's
 * ("application/json" unary, "application/connect+json" streaming; case
 * and parameters such as charset ignored), 0 another application/ type
 * (another codec: unimplemented), -1 anything else (HTTP 415). */
int api_connect_ctype(const char *v, enum api_connect_kind kind);

/* A Connect-Timeout-Ms value (NULL: absent -> *ms 0, none): 1 to 10 ASCII
 * digits, milliseconds. Returns 0, or -1 (malformed) with *ms 0. */
int api_connect_timeout_parse(const char *v, int64_t *ms);

/*
 * The request message of a body p[0..n) (p may be NULL when n is 0): unary,
 * the JSON object itself (empty: {}); streaming, exactly one envelope (flags
 * byte 0, 4-byte big-endian length, that many bytes of JSON). max: the
 * largest message (connect_message_max). Returns a new reference to a JSON
 * object, or NULL with err: bad_request (short, flags not 0, length not the
 * rest of the body, not one JSON object, duplicate keys), method_not_allowed
 * (the compressed flag: unimplemented), too_large (over max).
 */
json_t *api_connect_decode(const unsigned char *p, size_t n,
    enum api_connect_kind kind, size_t max, struct sbx_err *err);

/* Appends one envelope (flags: 0 a message, 0x02 the end of the stream)
 * holding msg's compact JSON to out. Returns 0, or -1 out of memory
 * (out may then hold part of it). */
int api_connect_envelope(struct evbuffer *out, unsigned flags, const json_t *msg);

/* Connect's error JSON {"code":code,"message":message} (message omitted
 * when NULL or ""); a new reference, NULL out of memory. */
json_t *api_connect_error_json(const char *code, const char *message);

#endif
