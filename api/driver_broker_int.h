/* driver_broker_int.h - internals shared by the broker driver's files (not a public header). */
#ifndef DRIVER_BROKER_INT_H
#define DRIVER_BROKER_INT_H

#include <stdint.h>

#include "sbx_err.h"

struct evbuffer;

/* "/v1/sandboxes/ID/SUFFIX?path=ENCODED[&mode=M]" (path checked by
 * sbx_path_check; mode 0: no &mode=, else "%04o" of it), malloc'ed, or NULL
 * with err (path_outside_work, internal). */
char *dbk_path_url(const char *id, const char *suffix, const char *path,
    uint32_t mode, struct sbx_err *err);

/* The broker's answer of HTTP status with body (its JSON error, or just
 * the status) as an sbx_err for the api's callers: 401 and the broker's
 * unauthorized become broker_unavailable (the api's credential, never the
 * caller's); a body that is no error object: not_found (404),
 * broker_unavailable (5xx) or internal. body is read, not drained. */
void dbk_error_from_body(int status, struct evbuffer *body,
    struct sbx_err *e);

/* A transport error of the HTTP client (in) worded for the api's callers
 * into e: broker_unavailable gets "Sandbox broker unavailable: ..."; any
 * other is copied. */
void dbk_error_from_transport(const struct sbx_err *in, struct sbx_err *e);

#endif
