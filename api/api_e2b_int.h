/* api_e2b_int.h - internals shared by the E2B layer's files (api_e2b*.c; adr/0059), not a public header. */
#ifndef API_E2B_INT_H
#define API_E2B_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api_e2b.h"
#include "api_store.h"
#include "sbx_err.h"

struct api_server;
struct event;
struct sbx_op;

#define API_E2B_ID_LEN 20          /* "e2b" + 17 of [a-z0-9] */
#define API_E2B_SALT 16            /* bytes a token is drawn from */
#define API_E2B_TOKEN_LEN 43       /* base64url of 32 bytes, no padding */
#define API_E2B_TEMPLATE_MAX 127   /* bytes of a templateID */

/* One E2B sandbox (the design of session 8: its NPC's name is its id). */
struct api_e2b_rec {
	char id[API_NPC_NAME_MAX + 1];
	int64_t owner;                 /* the NPC owner's principal id */
	char template_id[API_E2B_TEMPLATE_MAX + 1];
	char image[256];               /* what the alias named ("" default) */
	char *metadata;                /* compact JSON object text (owned) */
	char *envs;                    /* compact JSON object text (owned) */
	unsigned char salt[API_E2B_SALT];
	char token[API_E2B_TOKEN_LEN + 1]; /* derived: key, salt, id */
	int64_t started_at;            /* Unix ms of create, or the last resume */
	int64_t deadline;              /* Unix ms; the reaper acts past it */
	int paused;                    /* 1: stopped by pause or autoPause */
	int auto_pause;                /* the deadline pauses instead of kills */
	int busy;                      /* the reaper's op is in flight */
	int64_t retry_at;              /* Unix ms: a failed enforce waits */
	struct api_e2b_rec *next;
};

struct api_e2b_reap;

/* The layer's state (s->e2b). */
struct api_e2b {
	struct api_e2b_rec *recs;      /* newest first */
	unsigned nrecs;
	unsigned char key[32];         /* derives the access tokens */
	struct event *reap_ev;
	struct api_e2b_reap *reaps;    /* driver ops of the reaper in flight */
};

/* api_e2b_store.c: the records in the api's sqlite (table e2b_sandboxes,
 * made on open). put inserts or replaces r; del removes id (absent: fine);
 * load calls cb for every stored record (r filled, its strings then
 * owned by cb). Return 0, or -1 with err internal. */
int api_e2b_store_init(struct api_store *st, struct sbx_err *err);
int api_e2b_store_put(struct api_store *st, const struct api_e2b_rec *r,
    struct sbx_err *err);
int api_e2b_store_del(struct api_store *st, const char *id,
    struct sbx_err *err);
int api_e2b_store_load(struct api_store *st,
    int (*cb)(void *arg, struct api_e2b_rec *r), void *arg,
    struct sbx_err *err);

/* api_e2b_rec.c: records in memory. */
/* The record of id, or NULL. */
struct api_e2b_rec *api_e2b_find(struct api_server *s, const char *id);
/* Fills r->token from the layer's key, r->salt and r->id. */
void api_e2b_token(const struct api_e2b *E, struct api_e2b_rec *r);
/* Unlinks and frees r (its strings wiped of nothing secret; the token is). */
void api_e2b_forget(struct api_server *s, struct api_e2b_rec *r);
void api_e2b_rec_free(struct api_e2b_rec *r);

/* api_e2b_parse.c: what the control plane reads (pure: unit-tested). */
/*
 * A metadata or envVars member: absent or null -> "{}"; else an object of
 * string values, at most max bytes as compact JSON. *out owned. Returns 0,
 * or -1 with err bad_request naming the member.
 */
int api_e2b_string_map(const json_t *v, const char *member, long long max,
    char **out, struct sbx_err *err);
/*
 * A timeout member (seconds, an integer 0..): absent or null -> def_ms;
 * over max_ms -> bad_request. *ms gets milliseconds.
 */
int api_e2b_timeout(const json_t *v, long long def_ms, long long max_ms,
    int64_t *ms, struct sbx_err *err);
/*
 * The metadata filter of GET /v2/sandboxes as the SDK sends it: the query
 * value (decoded once by the caller) is "k=v&k2=v2" whose keys and values
 * are URL-encoded again (E2B: "Each key and values must be URL encoded").
 * Fills *out with an object of the pairs (new reference). Returns 0, or -1
 * with err bad_request.
 */
int api_e2b_metadata_filter(const char *q, json_t **out, struct sbx_err *err);
/* 1 when the metadata JSON text has every pair of filter (an object). */
int api_e2b_metadata_match(const char *metadata, const json_t *filter);
/*
 * The state filter: "running", "paused" or both, comma-separated (the
 * SDK's form style, explode false) or repeated. Bits: 1 running, 2 paused;
 * NULL or "": both. Returns the bits, or -1 with err bad_request.
 */
int api_e2b_state_filter(const char *v, struct sbx_err *err);
/* The image alias of templateID t in the e2b_templates list: 1 with *image
 * ("" default) when listed, 0 when not. */
int api_e2b_template(char *const *list, const char *t, const char **image,
    size_t *imagelen);
/* The {port}-{id} of a Host name under domain (the port part of either
 * ignored): 1 with *port and id (idcap bytes), 0 when host is not one. */
int api_e2b_host_parse(const char *host, size_t hostlen, const char *domain,
    int *port, char *id, size_t idcap);
/* E2B's error body {"code": status, "message": e->message}. */
json_t *api_e2b_error_json(const struct sbx_err *e, int status);
/* Connect's error body {"code": name, "message": ...} for envd requests
 * answered before their handler (the name from the HTTP status). */
json_t *api_e2b_envd_error_json(const struct sbx_err *e, int status);
/* ISO 8601 UTC with milliseconds ("2026-12-02T07:01:02.345Z") of Unix ms. */
void api_e2b_time(int64_t ms, char *buf, size_t cap);

/* api_e2b_reap.c: the deadlines. */
int api_e2b_reap_start(struct api_server *s, struct sbx_err *err);
void api_e2b_reap_stop(struct api_server *s);

/* api_e2b.c: the control plane's handlers (rows of api_e2b_route.c). */
int api_h_e2b_create(struct areq *a, struct sbx_err *err);
int api_h_e2b_list(struct areq *a, struct sbx_err *err);
int api_h_e2b_get(struct areq *a, struct sbx_err *err);
int api_h_e2b_kill(struct areq *a, struct sbx_err *err);
int api_h_e2b_timeout(struct areq *a, struct sbx_err *err);
int api_h_e2b_pause(struct areq *a, struct sbx_err *err);
int api_h_e2b_connect(struct areq *a, struct sbx_err *err);
int api_h_e2b_metrics(struct areq *a, struct sbx_err *err);
int api_h_e2b_refuse(struct areq *a, struct sbx_err *err);
/* api_e2b_route.c: an envd request's port (envd, or the ports proxy). */
int api_h_e2b_envd(struct areq *a, struct sbx_err *err);

#endif
