/* driver_broker_int.h - internals shared by the broker driver's files (not a public header). */
#ifndef DRIVER_BROKER_INT_H
#define DRIVER_BROKER_INT_H

#include <stdint.h>

#include "sbx_err.h"

/* "/v1/sandboxes/ID/SUFFIX?path=ENCODED[&mode=M]" (path checked by
 * sbx_path_check; mode 0: no &mode=, else "%04o" of it), malloc'ed, or NULL
 * with err (path_outside_work, internal). */
char *dbk_path_url(const char *id, const char *suffix, const char *path,
    uint32_t mode, struct sbx_err *err);

#endif
