/* api_store.h - sandbox-api state in sqlite: principals, keyed key hashes, NPCs, egress grants, audit (SPEC §8). */
#ifndef API_STORE_H
#define API_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "sbx_err.h"

/*
 * The store is cfg->state_dir/api.db (sqlite, WAL, mode 0600) plus
 * cfg->state_dir/api.key: 32 random bytes, mode 0600, made on first use.
 * API keys are never stored: only crypto_generichash(key, keyed with the
 * api.key bytes), 32 bytes. Without api.key a stolen api.db does not even
 * allow an offline guess of a key. All calls are synchronous and short.
 */
struct api_store;

#define API_NAME_MAX 63     /* principal name bytes */
#define API_NPC_NAME_MAX 41 /* NPC name bytes: [a-z0-9][a-z0-9-]{0,40} */
#define API_NPC_SANDBOX_PREFIX "npc-"

enum api_role {
	API_ROLE_PLAYER = 0,
	API_ROLE_OPERATOR = 1,
};

struct api_principal {
	int64_t id;
	char name[API_NAME_MAX + 1];
	enum api_role role;
	int64_t created_at;      /* Unix ms */
	int64_t revoked_at;      /* Unix ms, 0 when active */
};

/* Bytes of an NPC's '\n'-joined egress allowlist (docs/security.md). */
#define API_EGRESS_ALLOW_MAX 4096

struct api_npc {
	int64_t id;
	char name[API_NPC_NAME_MAX + 1];
	int64_t owner_id;
	char owner[API_NAME_MAX + 1];
	char sandbox_id[64];     /* "npc-" + name: satisfies sbx_id_valid */
	int egress;              /* 1: an operator granted egress */
	char egress_by[API_NAME_MAX + 1]; /* who granted or revoked last; "" never */
	int64_t egress_at;       /* Unix ms of that change, 0 never */
	int64_t created_at;      /* Unix ms */
	char image[256];         /* image asked for at the last ensure; "" default */
	/* With egress: the allowlist, entries joined by '\n' (adr/0026);
	 * "": full egress ("*"). At most API_EGRESS_ALLOW_MAX bytes. */
	char egress_allow[API_EGRESS_ALLOW_MAX + 1];
};

/* "player" / "operator". */
const char *api_role_name(enum api_role r);

/* 1 when name matches [a-z0-9][a-z0-9_.-]{0,62}. */
int api_principal_name_valid(const char *name);

/* 1 when name matches [a-z0-9][a-z0-9-]{0,40}. */
int api_npc_name_valid(const char *name);

/*
 * Opens (creating when absent) state_dir (0700), state_dir/api.db (0600)
 * and state_dir/api.key (0600). An existing api.key must be a regular file of
 * exactly 32 bytes whose mode grants nothing to group or others. Returns the
 * store, or NULL with err config_error naming the file and the reason.
 */
struct api_store *api_store_open(const char *state_dir, struct sbx_err *err);

/* The store's sqlite handle, for a layer that keeps its own table in
 * api.db (the E2B records, api_e2b_store.c): borrowed, valid until
 * api_store_close; that layer prepares and finalizes its own statements. */
struct sqlite3 *api_store_db(struct api_store *st);

/* Closes and frees; wipes the server key. NULL ok. */
void api_store_close(struct api_store *st);

/*
 * Creates principal name with role and a fresh random key (sbx_token_generate,
 * 43 chars) written to key (keylen >= SBX_TOKEN_GEN_LEN + 1). The key is
 * shown to the caller once; only its keyed hash is stored. Returns 0, or -1
 * with err: bad_request (bad name), conflict (the name exists, revoked or
 * not), internal.
 */
int api_store_principal_create(struct api_store *st, const char *name,
    enum api_role role, char *key, size_t keylen, struct sbx_err *err);

/* Revokes name's key (at once: the next request with it gets 401). Returns 0,
 * or -1 with err not_found (no such active principal) or internal. */
int api_store_principal_revoke(struct api_store *st, const char *name,
    struct sbx_err *err);

/* Calls cb for every principal, by name. Returns 0 or -1 (internal). */
int api_store_principal_list(struct api_store *st,
    void (*cb)(void *arg, const struct api_principal *p), void *arg,
    struct sbx_err *err);

/* Looks up by name (revoked ones too). 1 found, 0 absent, -1 error. */
int api_store_principal_get(struct api_store *st, const char *name,
    struct api_principal *out, struct sbx_err *err);
/* Looks up by id (revoked ones too). 1 found, 0 absent, -1 error. */
int api_store_principal_get_id(struct api_store *st, int64_t id,
    struct api_principal *out, struct sbx_err *err);

/*
 * Authenticates a presented key of len bytes (any bytes): hashes it keyed
 * with the server key, looks the digest up, and compares the stored digest
 * with sodium_memcmp. Returns 1 with *out filled for an active principal,
 * 0 for an unknown or revoked key, -1 on a database error.
 */
int api_store_authenticate(struct api_store *st, const char *key, size_t len,
    struct api_principal *out);

/*
 * Creates NPC name owned by owner_id, sandbox id "npc-" + name. NPC names are
 * unique across all owners (an operator addresses any NPC by name). Returns 0
 * with *out filled, or -1 with err: bad_request (bad name), conflict (taken),
 * internal.
 */
int api_store_npc_create(struct api_store *st, const char *name,
    int64_t owner_id, struct api_npc *out, struct sbx_err *err);

/* 1 found (*out filled), 0 absent, -1 error (err). */
int api_store_npc_get(struct api_store *st, const char *name,
    struct api_npc *out, struct sbx_err *err);
/* By id (api_npc.id; a preview link names its NPC so): as api_store_npc_get. */
int api_store_npc_get_id(struct api_store *st, int64_t id,
    struct api_npc *out, struct sbx_err *err);

/* Calls cb for each NPC of owner_id (0: all), by name. Returns 0 or -1. */
int api_store_npc_list(struct api_store *st, int64_t owner_id,
    void (*cb)(void *arg, const struct api_npc *n), void *arg,
    struct sbx_err *err);

/*
 * Stores the allowlist of an NPC's egress grant (adr/0026): allow is the
 * '\n'-joined checked list (sbx_egress.h), NULL or "*" for full egress.
 * Applies whenever egress is granted (api_store_npc_set_egress). Returns 0,
 * or -1 with err (not_found: no such NPC; internal: sqlite).
 */
int api_store_npc_set_egress_allow(struct api_store *st, const char *name,
    const char *allow, struct sbx_err *err);

/* Stores the egress grant of NPC name: enabled, by whom, now. Returns 0, or
 * -1 with err not_found / internal. */
int api_store_npc_set_egress(struct api_store *st, const char *name,
    int enabled, const char *by, struct sbx_err *err);

/* Remembers the image of NPC name's sandbox ("" or NULL: the broker's
 * default), so a later ensure (egress change) keeps it. Returns 0 or -1. */
int api_store_npc_set_image(struct api_store *st, const char *name,
    const char *image, struct sbx_err *err);

/*
 * Sandbox quota (max_sandboxes_per_player, docs/security.md). A sandbox
 * counts for the NPC's owner from the api's first ensure of it until the api
 * destroys it, stopped or not: the api knows only what it asked for, so one
 * the broker's destroy_after removed keeps counting until DELETE.
 *
 * api_store_sandbox_claim: takes a slot for NPC n (n->id, n->owner_id) when
 * it holds none yet and its owner holds fewer than max (max <= 0: no cap,
 * the slot is still recorded). Count and insert are one statement. Returns 1
 * (n holds a slot now; *claimed 1 when this call took it, so a failed ensure
 * can give it back), 0 when the owner already holds max (nothing changed),
 * -1 with err internal.
 */
int api_store_sandbox_claim(struct api_store *st, const struct api_npc *n,
    long long max, int *claimed, struct sbx_err *err);

/* Gives NPC npc_id's slot back (its sandbox was destroyed, or the ensure
 * that claimed it failed); none held is fine. Returns 0 or -1 (internal). */
int api_store_sandbox_release(struct api_store *st, int64_t npc_id,
    struct sbx_err *err);

/* Slots owner_id holds, in *out. Returns 0 or -1 (internal). */
int api_store_sandbox_count(struct api_store *st, int64_t owner_id,
    int64_t *out, struct sbx_err *err);

/*
 * Appends an audit row (ts now, principal, action, npc, outcome). Strings may
 * be NULL (stored as NULL). A failure is logged, never returned: the request
 * it describes has already happened.
 */
void api_store_audit(struct api_store *st, const char *principal,
    const char *action, const char *npc, const char *outcome);
/*
 * api_store_audit plus, when detail is not NULL, what the action asked for
 * (a short JSON text, e.g. an egress grant's {"enabled":true,"allow":[...]};
 * never a secret) in table audit_details, keyed by the new audit row's id
 * (adr/0027). Failures are logged, never returned.
 */
void api_store_audit_detail(struct api_store *st, const char *principal,
    const char *action, const char *npc, const char *outcome,
    const char *detail);

/* Audit rows an api holds before it writes them at once. */
#define API_STORE_DEFER_MAX 4096

/*
 * From now on api_store_audit(_detail) rows wait for the end of the loop
 * turn on base and commit together (sbx_defer.h, adr/0033): the reply of
 * the request they describe goes out first. Each row keeps the time of
 * the call; api_store_audit_list and api_store_close write what is
 * pending first. Already on: no-op. Returns 0, or -1 with err internal.
 */
int api_store_defer_on(struct api_store *st, struct event_base *base,
    struct sbx_err *err);

/* One audit row, for tests and operators. */
struct api_audit_row {
	int64_t ts;
	char principal[API_NAME_MAX + 1];
	char action[64];
	char npc[API_NPC_NAME_MAX + 1];
	char outcome[64];
};

/* Calls cb for each audit row, oldest first. Returns 0 or -1. */
int api_store_audit_list(struct api_store *st,
    void (*cb)(void *arg, const struct api_audit_row *r), void *arg,
    struct sbx_err *err);

#endif
