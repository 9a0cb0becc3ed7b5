/* api_e2b_rec.c - the E2B records in memory: found by id, forgotten, their access tokens derived and checked (api_e2b_lookup, the envd side's contract; adr/0059). */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "api_e2b_int.h"
#include "api_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

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
