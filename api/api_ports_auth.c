/* api_ports_auth.c - who may use a sandbox port: port tickets and preview links (signed tokens, api_ports_token.c), their routes, and the proxy route's credential hook (docs/api.md "Ports", adr/0053). */
#include <sys/queue.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <sodium.h>

#include "api_int.h"
#include "api_ports.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_time.h"

/* Default life of a preview link when the body names none, seconds. */
#define PREVIEW_TTL_DEFAULT_S 3600

/* An NPC and a principal by the ids a token names, the principal active
 * and still the NPC's owner or an operator. 1, 0 (not so), -1 (database). */
static int
token_parties(struct api_server *s, const struct api_ports_token *t,
    struct api_principal *who, struct api_npc *n)
{
	struct sbx_err err;
	int r;

	if ((r = api_store_npc_get_id(s->store, t->npc_id, n, &err)) != 1 ||
	    (r = api_store_principal_get_id(s->store, t->principal_id, who,
	    &err)) != 1)
		return r;
	if (who->revoked_at != 0 || (who->role != API_ROLE_OPERATOR &&
	    n->owner_id != who->id))
		return 0;
	return 1;
}

int
api_ports_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, const char *authz, int final,
    struct api_principal *who)
{
	struct api_ports_token t;
	struct api_npc n;
	struct evkeyvalq q;
	const char *tok, *key;
	size_t keylen = 0;
	int r = 0;

	(void)final;
	if (authz != NULL) {
		key = sbx_gate_bearer(authz, &keylen);
		return key != NULL ? api_store_authenticate(s->store, key,
		    keylen, who) : 0;
	}
	if (query == NULL)
		return 0;
	memset(&q, 0, sizeof(q));
	TAILQ_INIT(&q);
	if (evhttp_parse_query_str(query, &q) != 0) {
		evhttp_clear_headers(&q);
		return 0;
	}
	tok = evhttp_find_header(&q, API_PORTS_TICKET_PARAM);
	if (tok != NULL && api_ports_token_check(s->port_key, tok, strlen(tok),
	    sbx_wall_ms() / 1000, &t) == 1 && t.kind == API_PORTS_TICKET &&
	    t.port == api_ports_port_parse(id) &&
	    (r = token_parties(s, &t, who, &n)) == 1 &&
	    strcmp(n.name, npc) != 0)
		r = 0;
	evhttp_clear_headers(&q);
	if (r != 1)
		memset(who, 0, sizeof(*who));
	return r;
}

int
api_ports_preview_resolve(struct api_server *s, const char *tok, size_t n,
    struct api_principal *who, char *npc, size_t npccap, int *port)
{
	struct api_ports_token t;
	struct api_npc np;
	int r;

	*port = 0;
	if (api_ports_token_check(s->port_key, tok, n, sbx_wall_ms() / 1000,
	    &t) != 1 || t.kind != API_PORTS_PREVIEW)
		return 0;
	if ((r = token_parties(s, &t, who, &np)) != 1) {
		memset(who, 0, sizeof(*who));
		return r;
	}
	snprintf(npc, npccap, "%s", np.name);
	*port = t.port;
	return 1;
}

const char *
api_ports_host_token(const struct api_server *s, const char *host, size_t *n)
{
	return api_ports_preview_host(host, s->cfg->preview_domain, n);
}

/* The port of a's path, or -1 with err bad_request. */
static int
port_of(struct areq *a, struct sbx_err *err)
{
	int port = api_ports_port_parse(a->exec_id);

	if (port == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The port must be a "
		    "number from 1 to 65535.");
	return port;
}

int
api_h_port_ticket(struct areq *a, struct sbx_err *err)
{
	struct api_ports_token t = { API_PORTS_TICKET, 0, 0, 0, 0 };
	char tok[API_PORTS_TOKEN_LEN + 1], url[512];
	int64_t exp_ms;
	int port;

	if ((port = port_of(a, err)) == -1)
		return -1;
	if (a->body != NULL && json_object_size(a->body) > 0)
		return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "A port ticket "
		    "takes no fields.");
	exp_ms = sbx_wall_ms() + a->s->cfg->ticket_ttl;
	t.expires = (uint32_t)((exp_ms + 999) / 1000);
	t.port = (uint16_t)port;
	t.npc_id = (uint32_t)a->npc.id;
	t.principal_id = (uint32_t)a->who.id;
	if (api_ports_token_make(a->s->port_key, &t, tok, sizeof(tok)) == -1)
		return sbx_err_oom(err);
	snprintf(url, sizeof(url), "/api/v1/npcs/%s/sandbox/ports/%d/?"
	    API_PORTS_TICKET_PARAM "=%s", a->npc.name, port, tok);
	areq_reply_json(a, 200, json_pack("{s:s,s:I,s:s}", "ticket", tok,
	    "expires_at", (json_int_t)t.expires * 1000, "url", url));
	sodium_memzero(tok, sizeof(tok));
	sodium_memzero(url, sizeof(url));
	return 0;
}

int
api_h_port_preview(struct areq *a, struct sbx_err *err)
{
	const struct api_config *cfg = a->s->cfg;
	struct api_ports_token t = { API_PORTS_PREVIEW, 0, 0, 0, 0 };
	char tok[API_PORTS_TOKEN_LEN + 1], url[512], path[80];
	json_t *ttl = a->body != NULL ? json_object_get(a->body, "ttl_s") : NULL;
	long long ttl_s = PREVIEW_TTL_DEFAULT_S;
	int port;

	if ((port = port_of(a, err)) == -1)
		return -1;
	if (a->body != NULL && json_object_size(a->body) > (ttl != NULL))
		return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "A preview takes "
		    "only ttl_s.");
	if (ttl != NULL && !json_is_integer(ttl))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "ttl_s must be an "
		    "integer number of seconds.");
	if (ttl != NULL)
		ttl_s = (long long)json_integer_value(ttl);
	if (ttl_s < 1 || ttl_s > cfg->preview_ttl_max / 1000)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "ttl_s must be from 1 "
		    "to %lld seconds (preview_ttl_max).",
		    cfg->preview_ttl_max / 1000);
	/* Whole seconds, rounded up: a link lives at least ttl_s (a ttl of 1
	 * made at x.999 s would otherwise die 1 ms later). */
	t.expires = (uint32_t)((sbx_wall_ms() + ttl_s * 1000 + 999) / 1000);
	t.port = (uint16_t)port;
	t.npc_id = (uint32_t)a->npc.id;
	t.principal_id = (uint32_t)a->who.id;
	if (api_ports_token_make(a->s->port_key, &t, tok, sizeof(tok)) == -1)
		return sbx_err_oom(err);
	/* A path on the api's own origin unless a preview domain gives the
	 * link its own origin (its own storage and cookies). */
	snprintf(path, sizeof(path), "/p/%s/", tok);
	if (cfg->preview_domain != NULL && cfg->preview_domain[0] != '\0')
		snprintf(url, sizeof(url), "https://%s.%s/", tok,
		    cfg->preview_domain);
	else
		snprintf(url, sizeof(url), "%s", path);
	if (asprintf(&a->audit_detail, "port %d, %lld s", port, ttl_s) < 0)
		a->audit_detail = NULL;
	areq_reply_json(a, 201, json_pack("{s:s,s:s,s:I}", "url", url,
	    "path", path, "expires_at", (json_int_t)t.expires * 1000));
	return 0;
}
