/*
 * driver_checks.h - what the driver fuzz targets (fuzz_broker_reply,
 * fuzz_engine_reply) share: the callbacks they give every driver operation
 * (sbx_driver.h), each asserting the rules of that header with FUZZ_ASSERT:
 * exactly one terminal callback per op, never before the starting call
 * returned; states absent/running/stopped only; listed ids pass the id rule
 * (SPEC §4); exec output only on streams 1 and 2 and before the end; exit
 * codes 0..255; errors carry a code. Test code: failures abort.
 */
#ifndef SBX_FUZZ_DRIVER_CHECKS_H
#define SBX_FUZZ_DRIVER_CHECKS_H

#include <stddef.h>

#include "sbx_driver.h"

/* The arg of every callback below: what one op did. Zero it before the op;
 * set started_returned once the starting call has returned. */
struct dc_got {
	int terminal, started_returned, early;
};

/* A secret that must not appear in an error message (NULL: no check), unless
 * dc_secret_in_reply is set (a reply carried it: the driver may relay it). */
extern const char *dc_secret;
extern int dc_secret_in_reply;

/* Callbacks of the sbx_driver ops; ARG is a struct dc_got. */
void dc_status(void *arg, const struct sbx_err *err, const struct sbx_status *st);
void dc_done(void *arg, const struct sbx_err *err);
void dc_list(void *arg, const struct sbx_err *err, const struct sbx_dirent *e,
    size_t n, int truncated);
void dc_sandboxes(void *arg, const struct sbx_err *err,
    const struct sbx_status *sts, size_t n);
void dc_health(void *arg, const struct sbx_err *err, const struct sbx_health *h);
/* The exec sink's callbacks (struct sbx_sink). */
void dc_start(void *arg, const char *exec_id);
void dc_output(void *arg, int stream, const unsigned char *buf, size_t len);
void dc_exit(void *arg, const struct sbx_exit *ex);
void dc_error(void *arg, const struct sbx_err *err);

#endif
