/* sbx_usage.h - /work usage (struct sbx_usage) as JSON, the one form the helper, broker and api share (adr/0017). */
#ifndef SBX_USAGE_H
#define SBX_USAGE_H

#include <jansson.h>

#include "sbx_types.h"
#include "sbx_err.h"

/*
 * The "usage" member of a status object (proto/broker-api.md):
 * {"bytes":N,"apparent_bytes":N,"files":N,"dirs":N,"entries":N,
 *  "elapsed_ms":N,"partial":B[,"partial_reason":S]} for u->present, else
 * JSON null. Returns a new reference (NULL only when out of memory).
 */
json_t *sbx_usage_json(const struct sbx_usage *u);

/*
 * Reads that object (borrowed; untrusted: it may come from a sandbox or
 * over the wire) into *u with present 1. Every integer member must be
 * there, >= 0; "partial" a boolean; when true "partial_reason" one of
 * "max_entries", "timeout", "unreadable". Other members are ignored.
 * JSON null gives present 0 and returns 0. Returns 0, or -1 with err
 * (SBX_E_RUNTIME: "not a usage object") and *u zeroed.
 */
int sbx_usage_from_json(const json_t *o, struct sbx_usage *u, struct sbx_err *err);

/*
 * The "quota" member of a status object (adr/0057): {"bytes":Q,
 * "used":N|null,"age_ms":A|null} for q->present (used -1 and age_ms -1
 * give null: not counted yet), else JSON null. Returns a new reference
 * (NULL only when out of memory).
 */
json_t *sbx_quota_json(const struct sbx_quota *q);

/*
 * That object (borrowed; untrusted: it comes over the wire) into *q with
 * present 1: "bytes" an integer > 0, "used" and "age_ms" integers >= 0
 * or null (-1); other members ignored. JSON null gives present 0 and
 * returns 0. Returns 0, or -1 with err (SBX_E_BAD_REQUEST: "not a quota
 * object") and *q zeroed.
 */
int sbx_quota_from_json(const json_t *o, struct sbx_quota *q,
    struct sbx_err *err);

/*
 * Query flag ?name=1 / ?name=0 (query may be NULL). Returns 1 (on), 0 (off
 * or absent), or -1 with SBX_E_BAD_REQUEST for any other value or a
 * parameter given twice.
 */
int sbx_query_flag(const char *query, const char *name, struct sbx_err *err);

#endif
