/* api_e2b.h - the E2B-compatible layer of sandbox-api (adr/0059, docs/e2b.md): the envd side's view of an E2B sandbox, and the E2B layer's entry points for the api's HTTP server. */
#ifndef API_E2B_H
#define API_E2B_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sbx_err.h"
#include "sbx_gate.h"

struct api_server;
struct api_route;
struct areq;

/* envd's port in every E2B sandbox (the SDK's ConnectionConfig.envdPort). */
#define API_E2B_ENVD_PORT 49983

/*
 * An E2B sandbox as an envd request sees it. id is its sandboxID (the NPC's
 * name, [a-z0-9][a-z0-9-]{0,40}); owner the principal id of its NPC's owner;
 * env_json the envVars given at create, a JSON object text ("{}" when none):
 * e2b-proc applies them to every process it starts, under the request's own
 * envs.
 */
struct api_e2b_sandbox {
	const char *id;
	int64_t owner;
	const char *env_json;
};

/*
 * The E2B record of sandbox id for an envd request. token: the
 * X-Access-Token header or NULL. Returns 0 and fills *out (strings owned by
 * the in-memory record: valid until the handler returns to the event loop;
 * copy what a later callback needs) when the sandbox exists, is E2B's, and
 * token matches (sodium_memcmp); -1 with err: SBX_E_NOT_FOUND (unknown id,
 * or not an E2B sandbox, or killed), SBX_E_UNAUTHORIZED (token wrong or
 * absent). Every sandbox has a token, whatever `secure` said at create
 * (docs/e2b.md).
 */
int api_e2b_lookup(struct api_server *s, const char *id, const char *token,
    struct api_e2b_sandbox *out, struct sbx_err *err);

/*
 * The envd method path of an envd request (R_ENVD): what follows
 * "/e2b/envd" in the path ("/process.Process/Start", "/files"), or the
 * whole path on a {port}-{id}.{e2b_domain} Host. Borrowed from the request;
 * never NULL for an R_ENVD request ("/" at least).
 */
const char *api_e2b_envd_path(const struct areq *a);

/*
 * envd itself (e2b-proc's api/api_envd.c): an R_ENVD request for port
 * 49983, a->npc loaded (the sandbox), a->who its owner (authenticated by
 * the access token). An api_handler_fn.
 */
int api_h_envd(struct areq *a, struct sbx_err *err);

/* ------------------------------------------------------------------ */
/* For the api's HTTP server (api_http.c)                              */

/* Loads the E2B records from the store and arms the deadline reaper.
 * Returns 0, or -1 with err (config_error: the database; internal). */
int api_e2b_open(struct api_server *s, struct sbx_err *err);
/* Stops the reaper and frees the records (what is in flight is cancelled;
 * deadlines stay stored). NULL state ok. */
void api_e2b_close(struct api_server *s);

/* The header fields the gate must keep for the E2B credentials
 * (sbx_gate_limits.fields): X-API-Key, X-Access-Token, E2b-Sandbox-Id, and
 * E2b-Sandbox-Port (which body streams: api_e2b_gate_streams). */
#define API_E2B_FIELD_KEY 0
#define API_E2B_FIELD_TOKEN 1
#define API_E2B_FIELD_ID 2
#define API_E2B_FIELD_PORT 3
extern const char *const api_e2b_gate_fields[4];

/* 1 when a head api_e2b_claims took is envd's POST /files (port 49983 by
 * the E2b-Sandbox-Port field, absent, or the Host form): its body, up to
 * file_size_max, is streamed to the handler as it arrives (adr/0061, as
 * PUT .../files, adr/0030) rather than gathered up to port_body_max. */
int api_e2b_gate_streams(const struct api_server *s, const struct sbx_gate_head *h,
    const char *path);

/* 1 when a request for path (NULL ok) with Host host (hostlen bytes, NULL
 * ok) is the E2B layer's: path under /e2b/, or, with e2b_domain set, a
 * Host {port}-{id}.{e2b_domain}. */
int api_e2b_claims(const struct api_server *s, const char *path,
    const char *host, size_t hostlen);

/* The gate's check of a head api_e2b_claims took (sbx_gate_check_fn):
 * the X-API-Key (control plane) or the access token of the sandbox the
 * head names (envd), and the route's body cap. */
enum sbx_gate_verdict api_e2b_gate(struct api_server *s,
    const struct sbx_gate_head *h, const char *path, uint64_t *cap);

/* The start of a request api_e2b_claims took, before any check: its
 * errors get E2B's shape from here on. Returns the 401 sentence for a
 * missing credential (key or access token). */
const char *api_e2b_begin(struct areq *a, const char *path);

/*
 * Steps 1 and 2 of dispatch for a request api_e2b_claims took: who asks
 * (X-API-Key: an sbx API key; envd: the sandbox's access token), the
 * route (a->route; NULL with allow filled as api_http.c's route_find), and
 * for envd the NPC (npc, npccap bytes) and port the headers or the Host
 * name. Errors from here on have E2B's shape (control plane:
 * {"code":N,"message":...}; envd: Connect's {"code":"name",...}).
 * Returns 0, or -1 with err.
 */
int api_e2b_route(struct areq *a, const char *path, char *npc, size_t npccap,
    char *allow, size_t allowcap, struct sbx_err *err);

#endif
