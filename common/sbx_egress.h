/* sbx_egress.h - the egress allowlist as the api and the broker accept it (adr/0026, SPEC §8). */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <jansson.h>

#include "sbx_err.h"

/* Allow entries per grant (docs/security.md "Limits"). */
#define EGRESS_ALLOW_MAX 64
/*
 * Checks an allowlist as the api and the broker accept it: a JSON array of
 * 1..EGRESS_ALLOW_MAX strings; each "*" (alone only), a host entry that
 * proxy_policy_add_allow accepts ("NAME", "*.NAME", optional ":PORT") or a
 * CIDR ("10.1.0.0/16", "fd00::/8") that proxy_policy_add_cidr accepts.
 * field: the member's name as the caller's body spells it ("allow" for the
 * api, "egress_allow" for the broker), used in every message. Returns 0,
 * or -1 with err set: SBX_E_WRONG_TYPE (not an array of strings),
 * SBX_E_BAD_REQUEST (empty, too long, a bad entry: the message names the
 * field, the index and the rule, one sentence ending in '.').
 */
int egress_allow_check(json_t *allow, const char *field, struct sbx_err *err);

/* 1 when allow is NULL or ["*"]: full egress, ADR 0014's network, no proxy. */
int egress_allow_full(json_t *allow);

/*
 * The checked allowlist as the driver spec carries it (struct sbx_spec
 * egress_allow): entries joined by '\n', malloc'd (free()), NULL when out
 * of memory. egress_allow_split is the inverse: a new JSON array, NULL for
 * NULL, "" or out of memory.
 */
char *egress_allow_join(json_t *allow);
json_t *egress_allow_split(const char *joined);

#endif
