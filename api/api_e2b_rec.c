/* api_e2b_rec.c - the E2B records in memory: loaded at start, found by id, their access tokens derived and checked (api_e2b_lookup, the envd side's contract; adr/0059). */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "api_e2b_int.h"
#include "api_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

void
api_e2b_rec_free(struct api_e2b_rec *r)
{
	if (r == NULL)
		return;
	free(r->metadata);
	free(r->envs);
	sodium_memzero(r->token, sizeof(r->token));
	free(r);
}

void
api_e2b_token(const struct api_e2b *E, struct api_e2b_rec *r)
{
	unsigned char tok[32];
	crypto_generichash_state st;

	crypto_generichash_init(&st, E->key, sizeof(E->key), sizeof(tok));
	crypto_generichash_update(&st, r->salt, sizeof(r->salt));
	crypto_generichash_update(&st, (const unsigned char *)r->id,
	    strlen(r->id));
	crypto_generichash_final(&st, tok, sizeof(tok));
	sodium_bin2base64(r->token, sizeof(r->token), tok, sizeof(tok),
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(tok, sizeof(tok));
}

struct api_e2b_rec *
api_e2b_find(struct api_server *s, const char *id)
{
	struct api_e2b_rec *r;

	if (s->e2b == NULL || id == NULL)
		return NULL;
	for (r = s->e2b->recs; r != NULL; r = r->next)
		if (strcmp(r->id, id) == 0)
			return r;
	return NULL;
}

void
api_e2b_forget(struct api_server *s, struct api_e2b_rec *r)
{
	struct api_e2b_rec **pp;

	for (pp = &s->e2b->recs; *pp != NULL; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			s->e2b->nrecs--;
			break;
		}
	api_e2b_rec_free(r);
}

int
api_e2b_lookup(struct api_server *s, const char *id, const char *token,
    struct api_e2b_sandbox *out, struct sbx_err *err)
{
	struct api_e2b_rec *r = api_e2b_find(s, id);

	memset(out, 0, sizeof(*out));
	if (r == NULL)
		return sbx_err_set(err, SBX_E_NOT_FOUND, "No E2B sandbox has "
		    "that id.");
	if (token == NULL || strlen(token) != API_E2B_TOKEN_LEN ||
	    sodium_memcmp(token, r->token, API_E2B_TOKEN_LEN) != 0)
		return sbx_err_set(err, SBX_E_UNAUTHORIZED, "The sandbox's access "
		    "token is required (X-Access-Token, envdAccessToken of "
		    "create or connect).");
	out->id = r->id;
	out->owner = r->owner;
	out->env_json = r->envs;
	return 0;
}

/* A stored record back in memory. */
static int
loaded(void *arg, struct api_e2b_rec *r)
{
	struct api_server *s = arg;

	api_e2b_token(s->e2b, r);
	r->next = s->e2b->recs;
	s->e2b->recs = r;
	s->e2b->nrecs++;
	return 0;
}

/* Every e2b_templates entry is alias=image with an alias. */
static int
templates_ok(char *const *list)
{
	const char *eq;

	for (; list != NULL && *list != NULL; list++)
		if ((eq = strchr(*list, '=')) == NULL || eq == *list ||
		    (size_t)(eq - *list) > API_E2B_TEMPLATE_MAX ||
		    strlen(eq + 1) >= sizeof(((struct api_e2b_rec *)0)->image))
			return 0;
	return 1;
}

int
api_e2b_open(struct api_server *s, struct sbx_err *err)
{
	const char *d = s->cfg->e2b_domain;

	if (!templates_ok(s->cfg->e2b_templates))
		return sbx_err_set(err, SBX_E_CONFIG, "e2b_templates entries "
		    "must be alias=image (alias=: the broker's default image).");
	if (d != NULL && d[0] != '\0' && (strspn(d, "abcdefghijklmnopqrstuvwxyz"
	    "0123456789.-:") != strlen(d) || d[0] == '.' || d[0] == ':'))
		return sbx_err_set(err, SBX_E_CONFIG, "e2b_domain must be a "
		    "lowercase DNS name, with a :port if clients need one "
		    "(e.g. e2b.example.com).");
	if ((s->e2b = calloc(1, sizeof(*s->e2b))) == NULL)
		return sbx_err_oom(err);
	/* Its own subkey of the api's ticket key (api.key-derived), so the
	 * tokens are stable across restarts and nothing secret is in api.db. */
	crypto_kdf_derive_from_key(s->e2b->key, sizeof(s->e2b->key), 2,
	    "sbxe2btk", s->ticket_key);
	if (api_e2b_store_init(s->store, err) == -1 ||
	    api_e2b_store_load(s->store, loaded, s, err) == -1 ||
	    api_e2b_reap_start(s, err) == -1)
		return -1;
	return 0;
}

void
api_e2b_close(struct api_server *s)
{
	struct api_e2b_rec *r;

	if (s->e2b == NULL)
		return;
	api_e2b_reap_stop(s);
	while ((r = s->e2b->recs) != NULL) {
		s->e2b->recs = r->next;
		api_e2b_rec_free(r);
	}
	sodium_memzero(s->e2b->key, sizeof(s->e2b->key));
	free(s->e2b);
	s->e2b = NULL;
}
