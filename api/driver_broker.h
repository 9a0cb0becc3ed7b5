/* driver_broker.h - the broker-client SandboxDriver: common/sbx_driver.h over HTTP + NDJSON to sandbox-broker (SPEC §3, §4). */
#ifndef DRIVER_BROKER_H
#define DRIVER_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_driver.h"
#include "sbx_err.h"

struct event_base;

struct sbx_broker_config {
	const char *address;        /* "unix:/path" or "host:port" (copied) */
	const char *token;          /* bearer token plaintext, >= 16 visible ASCII
	                             * chars (copied into locked memory, wiped on
	                             * free; never logged) */
	size_t token_len;
	int64_t header_timeout_ms;  /* connect + response headers; 0: none */
	size_t write_out_max;       /* write_stream: body bytes queued towards
	                             * the broker at most; 0: 256 KiB (adr/0030) */
};

/*
 * A driver that forwards every operation to sandbox-broker (proto/broker-api.md)
 * with "Authorization: Bearer TOKEN", one connection per operation (so
 * sbx_op_cancel closes the connection, which makes the broker cancel the
 * operation and kill an exec's process tree). Exec streams are parsed
 * incrementally (sbx_ndjson_parser); pausing a stream stops reading the
 * broker connection, so memory stays bounded by one socket read plus one
 * event line. The broker's JSON error bodies become struct sbx_err with the
 * broker's code and message. A broker that cannot be reached gives
 * broker_unavailable ("Sandbox broker unavailable: ..."); a broken or
 * malformed response gives broker_unavailable too, a timeout timeout.
 *
 * Limits of the vtable this driver cannot carry: sink->start has no
 * timestamp (the broker's "ts" is dropped), and a stream "exit then error"
 * delivers only the error (sink->exit and sink->error are both terminal).
 *
 * Returns the driver (free with sbx_driver_free), or NULL with err:
 * bad_request (bad address or token), internal (out of memory).
 */
struct sbx_driver *sbx_broker_driver_new(struct event_base *base,
    const struct sbx_broker_config *cfg, struct sbx_err *err);

/*
 * Reads a bearer token from file with the rules of sbx_token_load (regular
 * file, mode & 077 == 0, at most SBX_TOKEN_MAX_LEN bytes, trailing
 * whitespace trimmed, >= 16 visible ASCII chars), or takes env_value when
 * file is NULL. On success returns 0 and *out is a sodium_malloc'd
 * NUL-terminated copy (free with sbx_broker_token_free) and *outlen its
 * length. Else -1 with err bad_token (message never contains the token).
 */
int sbx_broker_token_read(const char *file, const char *env_value, char **out,
    size_t *outlen, struct sbx_err *err);

/* Wipes and frees a token from sbx_broker_token_read. NULL ok. */
void sbx_broker_token_free(char *tok);

#endif
