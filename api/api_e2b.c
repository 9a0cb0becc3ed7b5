/* api_e2b.c - E2B's control plane at <api>/e2b (adr/0059, docs/e2b.md): the layer's life (records loaded, reaper armed), create, list, get, kill, timeout, pause, connect, metrics; each E2B sandbox is an NPC of the key's owner, made and ensured through the sbx API's own paths (quotas, audit, roles, reaper). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>
#include <sodium.h>

#include "api_e2b_int.h"
#include "api_int.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"

/* What the SDK's feature checks compare with (docs/e2b.md). */
#define ENVD_VERSION "0.5.7"
#define CLIENT_ID "sbx"

/* ------------------------------------------------------------------ */
/* The layer's life                                                    */

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
	/* Its own subkey of the api's ticket key (state_dir/ticket.key), so the
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

/* ------------------------------------------------------------------ */
/* Replies                                                             */

static json_t *
time_json(int64_t ms)
{
	char buf[40];

	api_e2b_time(ms, buf, sizeof(buf));
	return json_string(buf);
}

static json_t *
domain_json(const struct areq *a)
{
	const char *d = a->s->cfg->e2b_domain;

	return d != NULL && d[0] != '\0' ? json_string(d) : json_null();
}

/* The sandbox's access token for its owner only: an operator who may
 * see or connect another's sandbox gets null, so what envd does under
 * the owner's name is the owner's doing. */
static json_t *
token_json(const struct areq *a, const struct api_e2b_rec *r)
{
	return a->who.id == r->owner ? json_string(r->token) : json_null();
}

/* Sandbox (create, connect): what the SDK needs to reach envd. */
static json_t *
sandbox_json(const struct areq *a, const struct api_e2b_rec *r)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:o,s:n}", "sandboxID", r->id,
	    "templateID", r->template_id, "alias", r->template_id, "clientID",
	    CLIENT_ID, "envdVersion", ENVD_VERSION, "envdAccessToken",
	    token_json(a, r), "domain", domain_json(a), "trafficAccessToken");
}

/* ListedSandbox, and with detail 1 SandboxDetail. */
static json_t *
listed_json(const struct areq *a, const struct api_e2b_rec *r, int detail,
    int egress)
{
	const struct api_config *cfg = a->s->cfg;
	json_t *o, *md;

	md = json_loads(r->metadata, 0, NULL);
	o = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:o,s:s,s:o,s:o,s:s,s:[]}",
	    "sandboxID", r->id, "templateID", r->template_id, "alias",
	    r->template_id, "clientID", CLIENT_ID, "cpuCount",
	    (json_int_t)cfg->e2b_cpu_count, "memoryMB",
	    (json_int_t)cfg->e2b_memory_mb, "diskSizeMB",
	    (json_int_t)cfg->e2b_disk_mb, "endAt", time_json(r->deadline),
	    "envdVersion", ENVD_VERSION, "metadata", md != NULL ? md :
	    json_object(), "startedAt", time_json(r->started_at), "state",
	    r->paused ? "paused" : "running", "volumeMounts");
	if (o == NULL || !detail)
		return o;
	json_object_set_new(o, "domain", domain_json(a));
	json_object_set_new(o, "envdAccessToken", token_json(a, r));
	json_object_set_new(o, "allowInternetAccess", egress ? json_true() :
	    json_null());
	json_object_set_new(o, "lifecycle", json_pack("{s:b,s:s}",
	    "autoResume", 0, "onTimeout", r->auto_pause ? "pause" : "kill"));
	return o;
}

static void
reply_204(struct areq *a)
{
	areq_reply_body(a, 204, NULL, NULL);
}

/* The E2B record of a's NPC (R_NPC checked ownership), or NULL with err
 * not_found: an NPC that is no E2B sandbox, or one killed, is not found
 * here (the SDK's NotFoundError). */
static struct api_e2b_rec *
rec_of(struct areq *a, struct sbx_err *err)
{
	struct api_e2b_rec *r = api_e2b_find(a->s, a->npc.name);

	if (r == NULL)
		sbx_err_set(err, SBX_E_NOT_FOUND, "Sandbox %s not found.",
		    a->npc.name);
	return r;
}

/* ------------------------------------------------------------------ */
/* POST /v2/sandboxes                                                  */

/*
 * Network fields: egress is an operator's grant (SPEC §8). A player asking
 * for any is refused with sbx's sentence; an operator is told where egress
 * is set. allow_internet_access false and an empty network are no ask.
 */
static int
create_network(struct areq *a, const json_t *body, struct sbx_err *err)
{
	const json_t *net = json_object_get(body, "network");
	const json_t *inet = json_object_get(body, "allow_internet_access");

	if ((net == NULL || json_is_null(net) || (json_is_object(net) &&
	    json_object_size(net) == 0)) && (inet == NULL || json_is_null(inet) ||
	    json_is_false(inet)))
		return 0;
	if (a->who.role != API_ROLE_OPERATOR)
		return sbx_err_set(err, SBX_E_FORBIDDEN, API_EGRESS_FORBIDDEN,
		    "SANDBOX_ID");
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "Egress is set with PUT "
	    "/api/v1/npcs/SANDBOX_ID/egress once the sandbox exists.");
}

/* What sbx cannot give: a sentence instead of a silent difference. */
static int
create_refusals(const json_t *body, struct sbx_err *err)
{
	static const char *const none[] = { "mcp", "iam", "volumeMounts",
	    NULL };
	const json_t *ar = json_object_get(body, "autoResume");
	const json_t *v;
	size_t i;

	for (i = 0; none[i] != NULL; i++)
		if ((v = json_object_get(body, none[i])) != NULL &&
		    !json_is_null(v))
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "\"%s\" is not "
			    "available in an sbx sandbox.", none[i]);
	if (json_is_true(json_object_get(ar, "enabled")))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "autoResume is not "
		    "available in an sbx sandbox: a paused sandbox resumes with "
		    "connect.");
	v = json_object_get(body, "autoPause");
	if (v != NULL && !json_is_boolean(v) && !json_is_null(v))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"autoPause\" "
		    "must be true or false.");
	return 0;
}

/* Draws a new id: "e2b" + 17 of [a-z0-9] (no dash, so {port}-{id}
 * splits at the first dash). */
static void
new_id(char *id, size_t cap)
{
	static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char rnd[17];
	size_t i;

	randombytes_buf(rnd, sizeof(rnd));
	memcpy(id, "e2b", 3);
	for (i = 0; i < sizeof(rnd) && 3 + i + 1 < cap; i++)
		id[3 + i] = al[rnd[i] % 36];
	id[3 + i] = '\0';
}

/* The record of a create (not linked yet), from the checked body. */
static struct api_e2b_rec *
create_rec(struct areq *a, const char *image, size_t imagelen,
    struct sbx_err *err)
{
	const struct api_config *cfg = a->s->cfg;
	const json_t *b = a->body;
	struct api_e2b_rec *r;
	int64_t ms;

	if ((r = calloc(1, sizeof(*r))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	if (api_e2b_timeout(json_object_get(b, "timeout"),
	    cfg->e2b_timeout_default, cfg->e2b_timeout_max, &ms, err) == -1 ||
	    api_e2b_string_map(json_object_get(b, "metadata"), "metadata",
	    cfg->e2b_metadata_max, &r->metadata, err) == -1 ||
	    api_e2b_string_map(json_object_get(b, "envVars"), "envVars",
	    cfg->e2b_envs_max, &r->envs, err) == -1) {
		api_e2b_rec_free(r);
		return NULL;
	}
	snprintf(r->template_id, sizeof(r->template_id), "%s",
	    json_string_value(json_object_get(b, "templateID")));
	snprintf(r->image, sizeof(r->image), "%.*s", (int)imagelen, image);
	r->owner = a->who.id;
	r->auto_pause = json_is_true(json_object_get(b, "autoPause"));
	randombytes_buf(r->salt, sizeof(r->salt));
	r->started_at = sbx_wall_ms();
	r->deadline = r->started_at + ms;
	return r;
}

static void
create_ensured(struct areq *a, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct api_e2b_rec *r = api_e2b_find(a->s, a->npc.name);
	struct sbx_err e2;

	(void)st;
	sbx_err_clear(&e2);
	if (err != NULL) {
		/* Never made: no record, no deadline (the NPC stays, without
		 * a sandbox, as after a failed PUT .../sandbox). */
		if (r != NULL) {
			api_e2b_store_del(a->s->store, r->id, &e2);
			api_e2b_forget(a->s, r);
		}
		areq_fail_broker(a, err);
		return;
	}
	if (r == NULL) {
		areq_fail_code(a, SBX_E_NOT_FOUND, "Sandbox %s was killed while "
		    "it started.", a->npc.name);
		return;
	}
	areq_reply_json(a, 201, sandbox_json(a, r));
}

int
api_h_e2b_create(struct areq *a, struct sbx_err *err)
{
	struct api_server *s = a->s;
	const json_t *t = json_object_get(a->body, "templateID");
	struct api_e2b_rec *r;
	const char *image = NULL;
	size_t imagelen = 0;
	struct api_npc n;

	if (create_network(a, a->body, err) == -1 ||
	    create_refusals(a->body, err) == -1)
		return -1;
	if (!json_is_string(t) || json_string_length(t) == 0 ||
	    json_string_length(t) > API_E2B_TEMPLATE_MAX ||
	    strlen(json_string_value(t)) != json_string_length(t))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"templateID\" "
		    "must name a template.");
	if (!api_e2b_template(s->cfg->e2b_templates, json_string_value(t),
	    &image, &imagelen))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Template %s is not "
		    "offered here; an operator lists templates in "
		    "e2b_templates.", json_string_value(t));
	if ((r = create_rec(a, image, imagelen, err)) == NULL)
		return -1;
	new_id(r->id, sizeof(r->id));
	if (api_store_npc_create(s->store, r->id, a->who.id, &n, err) == -1) {
		api_e2b_rec_free(r);
		return -1;
	}
	api_e2b_token(s->e2b, r);
	/* Stored before the broker is asked: a restart meanwhile still
	 * finds the deadline. */
	if (api_e2b_store_put(s->store, r, err) == -1) {
		api_e2b_rec_free(r);
		return -1;
	}
	r->next = s->e2b->recs;
	s->e2b->recs = r;
	s->e2b->nrecs++;
	a->npc = n;
	a->has_npc = 1;
	if (r->image[0] != '\0') {
		snprintf(a->npc.image, sizeof(a->npc.image), "%s", r->image);
		a->set_image = 1;
	}
	a->ensured = create_ensured;
	if (api_ensure_start(a, err) == 0)
		return 0;
	{
		struct sbx_err e2;

		sbx_err_clear(&e2);
		api_e2b_store_del(s->store, r->id, &e2);
		api_e2b_forget(s, r);
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* GET /v2/sandboxes                                                   */

struct list_q {
	json_t *md;                 /* metadata filter (object) */
	int states;                 /* 1 running, 2 paused */
	char *template;             /* or NULL */
	long long limit;
	int asc;
	int64_t after_ts;           /* cursor: the last one sent */
	char after_id[API_NPC_NAME_MAX + 1];
};

static int
query_get(struct areq *a, const char *name, char **out, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	size_t len = 0;
	int r;

	*out = NULL;
	r = sbx_query_param(evhttp_uri_get_query(uri), name, out, &len, err);
	if (r == 1 && strlen(*out) != len) {
		free(*out);
		*out = NULL;
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Query parameter %s "
		    "holds a NUL.", name);
	}
	return r;
}

/* nextToken: base64url of "MS.ID" of the last sandbox of the page. */
static int
list_cursor(struct list_q *q, const char *tok, struct sbx_err *err)
{
	char raw[96];
	size_t n = 0;
	char *dot, *end;

	if (strlen(tok) > 128 || sodium_base642bin((unsigned char *)raw,
	    sizeof(raw) - 1, tok, strlen(tok), NULL, &n, NULL,
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0)
		goto bad;
	raw[n] = '\0';
	if ((dot = strchr(raw, '.')) == NULL)
		goto bad;
	*dot = '\0';
	q->after_ts = strtoll(raw, &end, 10);
	if (*end != '\0' || !api_npc_name_valid(dot + 1))
		goto bad;
	snprintf(q->after_id, sizeof(q->after_id), "%s", dot + 1);
	return 0;
bad:
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "nextToken is not one this "
	    "api gave.");
}

static int
list_query(struct areq *a, struct list_q *q, struct sbx_err *err)
{
	char *v = NULL;
	int r;

	memset(q, 0, sizeof(*q));
	q->limit = a->s->cfg->e2b_list_max;
	if ((r = query_get(a, "metadata", &v, err)) == -1 ||
	    api_e2b_metadata_filter(r == 1 ? v : "", &q->md, err) == -1)
		goto fail;
	free(v);
	if ((r = query_get(a, "state", &v, err)) == -1 ||
	    (q->states = api_e2b_state_filter(v, err)) == -1)
		goto fail;
	free(v);
	if ((r = query_get(a, "template", &q->template, err)) == -1)
		goto fail;
	if ((r = query_get(a, "order", &v, err)) == -1)
		goto fail;
	if (r == 1 && strcmp(v, "asc") != 0 && strcmp(v, "desc") != 0) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "order is asc or desc.");
		goto fail;
	}
	q->asc = r == 1 && strcmp(v, "asc") == 0;
	free(v);
	if ((r = query_get(a, "limit", &v, err)) == -1)
		goto fail;
	if (r == 1) {
		char *end;

		q->limit = strtoll(v, &end, 10);
		if (v[0] == '\0' || *end != '\0' || q->limit < 1 ||
		    q->limit > a->s->cfg->e2b_list_max) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "limit is 1 to %lld "
			    "here (e2b_list_max).", a->s->cfg->e2b_list_max);
			goto fail;
		}
	}
	free(v);
	if ((r = query_get(a, "nextToken", &v, err)) == -1 ||
	    (r == 1 && list_cursor(q, v, err) == -1))
		goto fail;
	free(v);
	return 0;
fail:
	free(v);
	return -1;
}

/* -1, 0, 1: x before, equal to, after y in the list's order. */
static int
list_cmp(const struct list_q *q, int64_t xts, const char *xid, int64_t yts,
    const char *yid)
{
	int c = xts < yts ? -1 : xts > yts ? 1 : strcmp(xid, yid);

	c = c < 0 ? -1 : c > 0 ? 1 : 0;
	return q->asc ? c : -c;
}

static int
list_keep(const struct areq *a, const struct list_q *q,
    const struct api_e2b_rec *r)
{
	if (a->who.role != API_ROLE_OPERATOR && r->owner != a->who.id)
		return 0;
	if (!(q->states & (r->paused ? 2 : 1)))
		return 0;
	if (q->template != NULL && strcmp(q->template, r->template_id) != 0)
		return 0;
	if (q->after_id[0] != '\0' && list_cmp(q, r->started_at, r->id,
	    q->after_ts, q->after_id) <= 0)
		return 0;
	return api_e2b_metadata_match(r->metadata, q->md);
}

int
api_h_e2b_list(struct areq *a, struct sbx_err *err)
{
	struct api_e2b_rec *r, **page = NULL;
	struct list_q q;
	json_t *arr = NULL;
	size_t n = 0, i, j;
	int more = 0;
	char raw[96], tok[140];

	if (list_query(a, &q, err) == -1)
		goto fail;
	if ((page = calloc((size_t)q.limit + 1, sizeof(*page))) == NULL ||
	    (arr = json_array()) == NULL) {
		sbx_err_oom(err);
		goto fail;
	}
	/* The first limit + 1 in order, by insertion into a sorted page. */
	for (r = a->s->e2b->recs; r != NULL; r = r->next) {
		if (!list_keep(a, &q, r))
			continue;
		for (i = n; i > 0 && list_cmp(&q, r->started_at, r->id,
		    page[i - 1]->started_at, page[i - 1]->id) < 0; i--)
			;
		if (i > (size_t)q.limit)
			continue;
		for (j = n < (size_t)q.limit + 1 ? n : (size_t)q.limit; j > i; j--)
			page[j] = page[j - 1];
		page[i] = r;
		if (n < (size_t)q.limit + 1)
			n++;
	}
	if (n > (size_t)q.limit) {
		more = 1;
		n = (size_t)q.limit;
	}
	for (i = 0; i < n; i++)
		json_array_append_new(arr, listed_json(a, page[i], 0, 0));
	if (more) {
		snprintf(raw, sizeof(raw), "%lld.%s",
		    (long long)page[n - 1]->started_at, page[n - 1]->id);
		sodium_bin2base64(tok, sizeof(tok), (const unsigned char *)raw,
		    strlen(raw), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
		sbx_httpd_header(&a->h, "X-Next-Token", tok);
	}
	free(page);
	json_decref(q.md);
	free(q.template);
	areq_reply_json(a, 200, arr);
	return 0;
fail:
	free(page);
	json_decref(arr);
	json_decref(q.md);
	free(q.template);
	return -1;
}

/* ------------------------------------------------------------------ */
/* One sandbox                                                         */

int
api_h_e2b_get(struct areq *a, struct sbx_err *err)
{
	struct api_e2b_rec *r = rec_of(a, err);

	if (r == NULL)
		return -1;
	areq_reply_json(a, 200, listed_json(a, r, 1, a->npc.egress));
	return 0;
}

static void
kill_done(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;
	struct api_e2b_rec *r;
	struct sbx_err e2;

	a->op = NULL;
	sbx_err_clear(&e2);
	if (err != NULL && strcmp(err->code, SBX_E_NOT_FOUND) != 0) {
		areq_fail_broker(a, err);
		return;
	}
	if (api_store_sandbox_release(a->s->store, a->npc.id, &e2) == -1)
		log_warn("cannot give a sandbox slot back", "npc", a->npc.name,
		    NULL);
	if ((r = api_e2b_find(a->s, a->npc.name)) != NULL) {
		if (api_e2b_store_del(a->s->store, r->id, &e2) == -1)
			log_warn("cannot forget an E2B sandbox", "sandbox",
			    r->id, NULL);
		api_e2b_forget(a->s, r);
	}
	reply_204(a);
}

int
api_h_e2b_kill(struct areq *a, struct sbx_err *err)
{
	if (rec_of(a, err) == NULL)
		return -1;
	a->op = sbx_call_destroy(a->s->driver, a->npc.sandbox_id, kill_done, a,
	    err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

int
api_h_e2b_timeout(struct areq *a, struct sbx_err *err)
{
	struct api_e2b_rec *r = rec_of(a, err);
	int64_t ms;

	if (r == NULL)
		return -1;
	if (a->body == NULL || json_object_get(a->body, "timeout") == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"timeout\" "
		    "(seconds) is required.");
	if (api_e2b_timeout(json_object_get(a->body, "timeout"), 0,
	    a->s->cfg->e2b_timeout_max, &ms, err) == -1)
		return -1;
	r->deadline = sbx_wall_ms() + ms;
	if (api_e2b_store_put(a->s->store, r, err) == -1)
		return -1;
	reply_204(a);
	return 0;
}

static void
pause_done(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;
	struct api_e2b_rec *r;
	struct sbx_err e2;

	a->op = NULL;
	sbx_err_clear(&e2);
	if (err != NULL && strcmp(err->code, SBX_E_NOT_RUNNING) != 0) {
		areq_fail_broker(a, err);
		return;
	}
	if ((r = api_e2b_find(a->s, a->npc.name)) == NULL) {
		areq_fail_code(a, SBX_E_NOT_FOUND, "Sandbox %s not found.",
		    a->npc.name);
		return;
	}
	r->paused = 1;
	if (api_e2b_store_put(a->s->store, r, &e2) == -1) {
		areq_fail(a, &e2);
		return;
	}
	reply_204(a);
}

/* Pause stops the container: /work (its volume) is kept, memory and
 * processes are not (docs/e2b.md). */
int
api_h_e2b_pause(struct areq *a, struct sbx_err *err)
{
	struct api_e2b_rec *r = rec_of(a, err);

	if (r == NULL)
		return -1;
	if (r->paused)
		return sbx_err_set(err, SBX_E_CONFLICT, "Sandbox %s is already "
		    "paused.", r->id);
	a->op = sbx_call_stop(a->s->driver, a->npc.sandbox_id, pause_done, a,
	    err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

static void
connect_ensured(struct areq *a, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct api_e2b_rec *r = api_e2b_find(a->s, a->npc.name);
	int64_t until = sbx_wall_ms() + a->e2b_ms;
	int was_paused;
	struct sbx_err e2;

	(void)st;
	sbx_err_clear(&e2);
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	if (r == NULL) {
		areq_fail_code(a, SBX_E_NOT_FOUND, "Sandbox %s not found.",
		    a->npc.name);
		return;
	}
	was_paused = r->paused;
	r->paused = 0;
	/* E2B: "TTL is only extended". */
	if (until > r->deadline || was_paused)
		r->deadline = until;
	if (api_e2b_store_put(a->s->store, r, &e2) == -1) {
		areq_fail(a, &e2);
		return;
	}
	areq_reply_json(a, was_paused ? 201 : 200, sandbox_json(a, r));
}

/* Resume: the sandbox is ensured again (the same path as create), its
 * deadline now + timeout. */
int
api_h_e2b_connect(struct areq *a, struct sbx_err *err)
{
	struct api_e2b_rec *r = rec_of(a, err);
	int64_t ms;

	if (r == NULL)
		return -1;
	if (api_e2b_timeout(json_object_get(a->body, "timeout"),
	    a->s->cfg->e2b_timeout_default, a->s->cfg->e2b_timeout_max, &ms,
	    err) == -1)
		return -1;
	a->e2b_ms = ms;
	a->ensured = connect_ensured;
	return api_ensure_start(a, err);
}

static void
metrics_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;
	const struct api_config *cfg = a->s->cfg;
	int64_t now = sbx_wall_ms();
	json_t *arr;

	a->op = NULL;
	if (err != NULL && strcmp(err->code, SBX_E_NOT_RUNNING) != 0 &&
	    strcmp(err->code, SBX_E_NOT_FOUND) != 0) {
		areq_fail_broker(a, err);
		return;
	}
	if (err != NULL || st->state != SBX_STATE_RUNNING) {
		areq_reply_json(a, 200, json_array());
		return;
	}
	/* One sample, now: CPU and memory are not measured (0); disk is
	 * /work's allocated bytes when the driver counts it. */
	arr = json_pack("[{s:o,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I}]", "timestamp",
	    time_json(now), "timestampUnix", (json_int_t)(now / 1000),
	    "cpuUsedPct", 0.0, "cpuCount", (json_int_t)cfg->e2b_cpu_count,
	    "memUsed", (json_int_t)0, "memTotal",
	    (json_int_t)cfg->e2b_memory_mb << 20, "memCache", (json_int_t)0,
	    "diskUsed", (json_int_t)(st->usage.present ? st->usage.bytes : 0),
	    "diskTotal", (json_int_t)cfg->e2b_disk_mb << 20);
	areq_reply_json(a, 200, arr);
}

int
api_h_e2b_metrics(struct areq *a, struct sbx_err *err)
{
	struct api_e2b_rec *r = rec_of(a, err);
	int usage = sbx_call_supports(a->s->driver, SBX_CALL_STATUS_USAGE);

	if (r == NULL)
		return -1;
	if (r->paused) {
		areq_reply_json(a, 200, json_array());
		return 0;
	}
	a->op = usage ? sbx_call_status_usage(a->s->driver, a->npc.sandbox_id,
	    metrics_done, a, err) : sbx_call_status(a->s->driver,
	    a->npc.sandbox_id, metrics_done, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

/* PUT /sandboxes/{id}/network: egress is an operator's grant. */
int
api_h_e2b_refuse(struct areq *a, struct sbx_err *err)
{
	if (rec_of(a, err) == NULL)
		return -1;
	if (a->who.role != API_ROLE_OPERATOR)
		return sbx_err_set(err, SBX_E_FORBIDDEN, API_EGRESS_FORBIDDEN,
		    a->npc.name);
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "Egress is set with PUT "
	    "/api/v1/npcs/%s/egress.", a->npc.name);
}
