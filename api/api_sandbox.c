/* api_sandbox.c - sandbox-api JSON handlers: NPCs, sandbox life, file write and list, egress, metrics (SPEC §8). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <jansson.h>
#include <sodium.h>

#include "sbx_egress.h"
#include "api_int.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_wire.h"
#include "sbx_usage.h"

/* ------------------------------------------------------------------ */
static json_t *
opt_ms(int64_t v)
{
	return v != 0 ? json_integer(v) : json_null();
}

/* The grant's allowlist as the api shows it: ["*"] for full egress
 * (adr/0026), null without egress. */
static json_t *
allow_json(const struct api_npc *n)
{
	json_t *a;

	if (!n->egress)
		return json_null();
	if (n->egress_allow[0] == '\0' || (a = egress_allow_split(n->egress_allow)) == NULL)
		return json_pack("[s]", "*");
	return a;
}

static json_t *
npc_json(const struct api_npc *n)
{
	return json_pack("{s:s,s:s,s:s,s:o,s:b,s:o,s:o,s:o,s:I}", "name", n->name,
	    "owner", n->owner, "sandbox_id", n->sandbox_id, "image",
	    n->image[0] != '\0' ? json_string(n->image) : json_null(),
	    "egress", n->egress, "egress_allow", allow_json(n), "egress_by",
	    n->egress_by[0] != '\0' ? json_string(n->egress_by) : json_null(),
	    "egress_at", opt_ms(n->egress_at), "created_at", (json_int_t)n->created_at);
}

json_t *
api_status_json(const struct areq *a, const struct sbx_status *st)
{
	int absent = st->state == SBX_STATE_ABSENT;
	json_t *o;

	o = json_pack("{s:s,s:s,s:s,s:s,s:o,s:b,s:b,s:o,s:o,s:o}",
	    "npc", a->npc.name, "owner", a->npc.owner, "sandbox_id",
	    a->npc.sandbox_id, "state", sbx_state_name(st->state),
	    "image", absent || st->image[0] == '\0' ? json_null() :
	    json_string(st->image), "egress", absent ? 0 : st->egress,
	    "egress_granted", a->npc.egress, "created_at",
	    opt_ms(st->created_at_ms), "last_used_at",
	    opt_ms(st->last_used_at_ms), "stop_reason",
	    st->stop_reason[0] != '\0' && !absent ?
	    json_string(st->stop_reason) : json_null());
	/* The broker's /work quota and its figure (adr/0057). */
	if (o != NULL && st->quota.present &&
	    json_object_set_new(o, "quota", sbx_quota_json(&st->quota)) == -1) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* 0 when every member of obj is in allowed; else -1 with err. */
static int
only_members(json_t *obj, const char *const *allowed, struct sbx_err *err)
{
	const char *k;
	json_t *v;
	size_t i;

	json_object_foreach(obj, k, v) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(allowed[i], k) == 0)
				break;
		if (allowed[i] == NULL)
			return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "Member "
			    "\"%.64s\" is not accepted here.", k);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Handlers (api_handler_fn: 0 going on or answered, -1 with err)      */

int
api_h_whoami(struct areq *a, struct sbx_err *err)
{
	(void)err;
	areq_reply_json(a, 200, json_pack("{s:s,s:s}", "name", a->who.name,
	    "role", api_role_name(a->who.role)));
	return 0;
}

/* The owner of a new NPC: the caller, or (operators only) "owner". */
static int
npc_owner(struct areq *a, struct api_principal *owner, struct sbx_err *err)
{
	json_t *ow = json_object_get(a->body, "owner");
	int r;

	*owner = a->who;
	if (ow == NULL)
		return 0;
	if (!json_is_string(ow))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Member \"owner\" must "
		    "be a string.");
	if (strcmp(json_string_value(ow), a->who.name) == 0)
		return 0;
	if (a->who.role != API_ROLE_OPERATOR)
		return sbx_err_set(err, SBX_E_FORBIDDEN, "Only an operator can "
		    "create an NPC for someone else.");
	r = api_store_principal_get(a->s->store, json_string_value(ow), owner,
	    err);
	if (r == -1)
		return -1;
	if (r == 0 || owner->revoked_at != 0)
		return sbx_err_set(err, SBX_E_NOT_FOUND, "No active principal "
		    "has that name.");
	return 0;
}

int
api_h_npc_create(struct areq *a, struct sbx_err *err)
{
	static const char *const allowed[] = { "name", "owner", NULL };
	struct api_principal owner;
	struct api_npc n;
	json_t *name;

	if (only_members(a->body, allowed, err) == -1)
		return -1;
	name = json_object_get(a->body, "name");
	if (!json_is_string(name))
		return sbx_err_set(err, name == NULL ? SBX_E_BAD_REQUEST :
		    SBX_E_WRONG_TYPE, "Member \"name\" must be a string.");
	if (npc_owner(a, &owner, err) == -1)
		return -1;
	if (!api_npc_name_valid(json_string_value(name)) ||
	    strlen(json_string_value(name)) != json_string_length(name))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_BAD_NPC_NAME);
	if (api_store_npc_create(a->s->store, json_string_value(name),
	    owner.id, &n, err) == -1)
		return -1;
	a->npc = n;
	a->has_npc = 1;
	areq_reply_json(a, 201, npc_json(&n));
	return 0;
}

static void
npc_list_add(void *arg, const struct api_npc *n)
{
	json_array_append_new(arg, npc_json(n));
}

int
api_h_npc_list(struct areq *a, struct sbx_err *err)
{
	json_t *arr;

	if ((arr = json_array()) == NULL)
		return sbx_err_oom(err);
	if (api_store_npc_list(a->s->store, a->who.role == API_ROLE_OPERATOR ?
	    0 : a->who.id, npc_list_add, arr, err) == -1) {
		json_decref(arr);
		return -1;
	}
	areq_reply_json(a, 200, arr);
	return 0;
}

static void
status_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	areq_reply_json(a, 200, api_status_json(a, st));
}

static void
ensure_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;
	struct sbx_err e2;

	sbx_err_clear(&e2);
	if (err != NULL && a->slot_claimed &&
	    api_store_sandbox_release(a->s->store, a->npc.id, &e2) == -1)
		log_warn("cannot give a sandbox slot back", "npc", a->npc.name,
		    NULL);
	if (err == NULL && a->set_image &&
	    api_store_npc_set_image(a->s->store, a->npc.name, a->npc.image,
	    &e2) == -1)
		log_warn("cannot remember the NPC's image", "npc", a->npc.name,
		    NULL);
	if (a->ensured != NULL) {
		a->op = NULL;
		a->ensured(a, err, st);
		return;
	}
	status_done(arg, err, st);
}

/*
 * max_sandboxes_per_player: the NPC's sandbox takes one of its owner's
 * slots before the broker is asked, so a burst of ensures cannot pass the
 * cap. Operators are exempt (their ensures are recorded, never refused).
 * Returns 0, or -1 with err (too_many, internal).
 */
static int
claim_slot(struct areq *a, struct sbx_err *err)
{
	long long max = a->who.role == API_ROLE_OPERATOR ? 0 :
	    a->s->cfg->max_sandboxes_per_player;
	int r;

	r = api_store_sandbox_claim(a->s->store, &a->npc, max,
	    &a->slot_claimed, err);
	if (r == 1)
		return 0;
	if (r == 0)
		sbx_err_set(err, SBX_E_TOO_MANY, "%s already has %lld "
		    "sandboxes, the most one player may have "
		    "(max_sandboxes_per_player); delete one with DELETE "
		    "/api/v1/npcs/NPC/sandbox, or ask an operator.",
		    a->npc.owner, max);
	return -1;
}

/* The body of PUT .../sandbox (may be absent): "image", and the members
 * of a copy (api_snap.c reads them, adr/0068). */
int
api_ensure_body(struct areq *a, struct sbx_err *err)
{
	static const char *const allowed[] = { "image", "from_snapshot",
	    "from_npc", NULL };
	json_t *img;

	if (a->body == NULL)
		return 0;
	if (json_object_get(a->body, "egress") != NULL) {
		if (a->who.role != API_ROLE_OPERATOR)
			return sbx_err_set(err, SBX_E_FORBIDDEN,
			    API_EGRESS_FORBIDDEN, a->npc.name);
		return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "Egress is set "
		    "with PUT /api/v1/npcs/%s/egress.", a->npc.name);
	}
	if (only_members(a->body, allowed, err) == -1)
		return -1;
	if ((img = json_object_get(a->body, "image")) == NULL)
		return 0;
	if (!json_is_string(img))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Member \"image\" must "
		    "be a string.");
	if (json_string_length(img) == 0 ||
	    json_string_length(img) >= sizeof(a->npc.image) ||
	    strlen(json_string_value(img)) != json_string_length(img))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"image\" must "
		    "be an image name.");
	snprintf(a->npc.image, sizeof(a->npc.image), "%s",
	    json_string_value(img));
	a->set_image = 1;
	return 0;
}

int
api_h_ensure(struct areq *a, struct sbx_err *err)
{
	if (api_ensure_body(a, err) == -1)
		return -1;
	return api_ensure_start(a, err);
}

int
api_ensure_start(struct areq *a, struct sbx_err *err)
{
	struct sbx_spec spec;
	struct sbx_err e2;

	memset(&spec, 0, sizeof(spec));
	/* The image asked for once stays the NPC's image: a later ensure
	 * without one (or an egress change) must not fall back to the
	 * default and replace the container. */
	spec.image = a->npc.image[0] != '\0' ? a->npc.image : NULL;
	/* Egress comes from the stored grant, never from the caller. */
	spec.egress = a->npc.egress;
	spec.egress_allow = a->npc.egress && a->npc.egress_allow[0] != '\0' ?
	    a->npc.egress_allow : NULL;
	if (claim_slot(a, err) == -1)
		return -1;
	a->op = sbx_call_ensure(a->s->driver, a->npc.sandbox_id,
	    &spec, ensure_done, a, err);
	if (a->op != NULL)
		return 0;
	if (a->slot_claimed)
		api_store_sandbox_release(a->s->store, a->npc.id, &e2);
	return areq_broker_err(a);
}

static void
status_usage_done(void *arg, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct areq *a = arg;
	json_t *o;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	o = api_status_json(a, st);
	if (o != NULL)
		json_object_set_new(o, "usage", sbx_usage_json(&st->usage));
	areq_reply_json(a, 200, o);
}

int
api_h_status(struct areq *a, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	int usage;

	/* ?usage=1: the broker counts /work (one helper exec, adr/0017). */
	if ((usage = sbx_query_flag(evhttp_uri_get_query(uri), SBX_QUERY_USAGE,
	    err)) < 0)
		return -1;
	if (usage && !sbx_call_supports(a->s->driver, SBX_CALL_STATUS_USAGE))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "This api's driver "
		    "cannot count /work usage.");
	a->op = usage ? sbx_call_status_usage(a->s->driver, a->npc.sandbox_id,
	    status_usage_done, a, err) : sbx_call_status(a->s->driver,
	    a->npc.sandbox_id, status_done, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

static void
done_reply(struct areq *a, const struct sbx_err *err, const char *state)
{
	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	areq_reply_json(a, 200, json_pack("{s:s,s:s,s:s}", "npc", a->npc.name,
	    "sandbox_id", a->npc.sandbox_id, "state", state));
}

static void
destroy_done(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;
	struct sbx_err e2;

	sbx_err_clear(&e2);
	if (err == NULL &&
	    api_store_sandbox_release(a->s->store, a->npc.id, &e2) == -1)
		log_warn("cannot give a sandbox slot back", "npc", a->npc.name,
		    NULL);
	done_reply(arg, err, "absent");
}

int
api_h_destroy(struct areq *a, struct sbx_err *err)
{
	a->op = sbx_call_destroy(a->s->driver, a->npc.sandbox_id,
	    destroy_done, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

static void
stop_done(void *arg, const struct sbx_err *err)
{
	done_reply(arg, err, "stopped");
}

int
api_h_stop(struct areq *a, struct sbx_err *err)
{
	if (a->body != NULL && json_object_size(a->body) != 0)
		return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "stop takes no "
		    "members.");
	a->op = sbx_call_stop(a->s->driver, a->npc.sandbox_id,
	    stop_done, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

/* ?path= decoded once and checked (SPEC §4 path rules). */
static int
query_path(struct areq *a, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);

	return sbx_query_path(evhttp_uri_get_query(uri), SBX_QUERY_PATH,
	    &a->path, NULL, err);
}

static void
write_done(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	areq_reply_json(a, 200, json_pack("{s:s,s:s}", "npc", a->npc.name,
	    "path", a->path));
}

/* ?mode= (octal) into a->mode when given. */
static int
query_mode(struct areq *a, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	char *mode = NULL;
	int r;

	switch (sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_MODE,
	    &mode, NULL, err)) {
	case -1:
		return -1;
	case 1:
		r = sbx_wire_mode_decode(mode, &a->mode, err);
		free(mode);
		return r;
	default:
		return 0;
	}
}

int
api_h_write(struct areq *a, struct sbx_err *err)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(a->h.req);

	if (query_path(a, err) == -1 || query_mode(a, err) == -1 ||
	    api_fileop_admit(a, err) == -1)
		return -1;
	if (a->gbody != NULL)
		return api_write_stream(a, write_done, err);   /* adr/0030 */
	/* A chunked body was gathered by the gate (at most file_size_max
	 * bytes); the driver drains it towards the broker. */
	a->op = sbx_call_write(a->s->driver, a->npc.sandbox_id,
	    a->path, a->mode, in, write_done, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

static void
list_done(void *arg, const struct sbx_err *err, const struct sbx_dirent *ents,
    size_t n, int truncated)
{
	struct areq *a = arg;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	/* As the broker (sbx_wire.h): the cursor is the base64url of the
	 * last name; the reply encoded in slices (adr/0030). */
	api_list_reply(a, ents, n, truncated);
}

/* ?cursor= (adr/0013): present, even empty, asks for the page object
 * (a->list_obj); its name (name, cap bytes) is where the page starts. */
static int
query_cursor(struct areq *a, unsigned char *name, size_t cap,
    struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	char *cur = NULL;
	size_t len = 0, nl = 0;
	int r;

	r = sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_CURSOR, &cur,
	    &len, err);
	if (r == -1)
		return -1;
	a->list_obj = r == 1;
	if (len > 0 && (len > 344 || sodium_base642bin(name, cap - 1, cur, len,
	    NULL, &nl, NULL, sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
	    nl == 0 || memchr(name, '\0', nl) != NULL ||
	    memchr(name, '/', nl) != NULL)) {
		free(cur);
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_BAD_CURSOR);
	}
	free(cur);
	name[nl] = '\0';
	return 0;
}

int
api_h_list(struct areq *a, struct sbx_err *err)
{
	struct sbx_list_page page;
	unsigned char name[256];

	if (query_path(a, err) == -1 ||
	    query_cursor(a, name, sizeof(name), err) == -1)
		return -1;
	page.after = name[0] != '\0' ? (const char *)name : NULL;
	page.limit = API_LIST_MAX_ENTRIES;
	if (api_fileop_admit(a, err) == -1)
		return -1;
	a->op = sbx_call_list(a->s->driver, a->npc.sandbox_id,
	    a->path, &page, list_done, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}
/*
 * What the ensure of a grant or revoke did to the sandbox, from its status
 * before and after: "replaced" (a new container, pod or VM; /work kept),
 * "started" (it was stopped and now runs with the new setting), "restarted"
 * (the same one, rebooted onto or off egress: driver vm), "proxy" (only its
 * egress proxy was started again with the new allowlist: the sandbox and
 * its processes stay, adr/0026, adr/0069), "none" (the grant was already so).
 */
static const char *
egress_change(const struct areq *a, const struct sbx_status *st)
{
	if (st->created_at_ms != a->was_created_ms)
		return "replaced";
	if (!a->was_running)
		return "started";
	if ((st->egress != 0) != a->was_egress)
		return "restarted";
	return a->egress && !a->same_grant ? "proxy" : "none";
}

static void
egress_ensured(void *arg, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct areq *a = arg;
	json_t *obj;

	a->op = NULL;
	if (err != NULL) {
		/* The grant is stored and applies at the next ensure. */
		areq_fail_broker(a, err);
		return;
	}
	obj = api_status_json(a, st);
	json_object_set_new(obj, "applied", json_true());
	json_object_set_new(obj, "change", json_string(egress_change(a, st)));
	areq_reply_json(a, 200, obj);
}

static void
egress_status(void *arg, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct areq *a = arg;
	struct sbx_spec spec;
	struct sbx_err e2;
	json_t *obj;

	a->op = NULL;
	sbx_err_clear(&e2);
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	if (st->state == SBX_STATE_ABSENT) {
		obj = api_status_json(a, st);
		json_object_set_new(obj, "applied", json_false());
		areq_reply_json(a, 200, obj);
		return;
	}
	/* Changing egress replaces the container through ensure; the volume,
	 * and so /work, survives (SPEC §4). A changed allowlist alone replaces
	 * only the egress proxy (adr/0026): egress_change tells which. */
	a->was_created_ms = st->created_at_ms;
	a->was_egress = st->egress != 0;
	a->was_running = st->state == SBX_STATE_RUNNING;
	memset(&spec, 0, sizeof(spec));
	spec.egress = a->egress;
	spec.egress_allow = a->egress && a->npc.egress_allow[0] != '\0' ?
	    a->npc.egress_allow : NULL;
	spec.image = a->npc.image[0] != '\0' ? a->npc.image : NULL;
	a->op = sbx_call_ensure(a->s->driver, a->npc.sandbox_id,
	    &spec, egress_ensured, a, &e2);
	if (a->op == NULL)
		areq_fail_broker(a, &e2);
}

static void
egress_stats_done(void *arg, const struct sbx_err *err, const char *text)
{
	struct areq *a = arg;
	json_t *obj, *st = NULL, *den;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	st = json_loads(text, 0, NULL);
	den = json_object_get(st, "denials");
	obj = json_pack("{s:s, s:b, s:o, s:o, s:o, s:{s:b, s:I, s:I}, s:o}",
	    "npc", a->npc.name, "enabled", a->npc.egress, "allow", allow_json(&a->npc),
	    "granted_by", a->npc.egress_by[0] != '\0' ? json_string(a->npc.egress_by) :
	    json_null(), "granted_at", opt_ms(a->npc.egress_at), "proxy",
	    "running", json_is_true(json_object_get(st, "proxy")),
	    "allowed", json_integer_value(json_object_get(st, "allowed")),
	    "denied", json_integer_value(json_object_get(st, "denied")),
	    "denials", json_is_array(den) ? json_incref(den) : json_array());
	json_decref(st);
	if (obj == NULL) {
		areq_fail_code(a, SBX_E_INTERNAL, SBX_MSG_OOM);
		return;
	}
	areq_reply_json(a, 200, obj);
}

int
api_h_egress_get(struct areq *a, struct sbx_err *err)
{
	a->op = sbx_call_egress_stats(a->s->driver, a->npc.sandbox_id,
	    egress_stats_done, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

/*
 * The body of PUT .../egress: "enabled" into a->egress; "allow" (adr/0026)
 * narrows the grant, checked before anything is stored, '\n'-joined into
 * *joined (owned; NULL: absent, full egress). What was granted goes to the
 * audit row (adr/0027): the checked list, ["*"] for full egress.
 */
static int
egress_body(struct areq *a, char **joined, struct sbx_err *err)
{
	static const char *const allowed[] = { "enabled", "allow", NULL };
	json_t *en, *allow, *d;

	*joined = NULL;
	if (only_members(a->body, allowed, err) == -1)
		return -1;
	en = json_object_get(a->body, "enabled");
	if (!json_is_boolean(en))
		return sbx_err_set(err, en == NULL ? SBX_E_BAD_REQUEST :
		    SBX_E_WRONG_TYPE, "Member \"enabled\" must be true or "
		    "false.");
	a->egress = json_is_true(en);
	allow = json_object_get(a->body, "allow");
	if (allow != NULL && !a->egress)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"allow\" "
		    "needs \"enabled\": true.");
	if (allow != NULL) {
		if (egress_allow_check(allow, "allow", err) != 0)
			return -1;
		if ((*joined = egress_allow_join(allow)) == NULL ||
		    strlen(*joined) > API_EGRESS_ALLOW_MAX) {
			free(*joined);
			*joined = NULL;
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "The allowlist "
			    "is longer than %d bytes.", API_EGRESS_ALLOW_MAX);
		}
	}
	a->audit_pick = a->egress ? 2 : 1;   /* the row's grant/revoke */
	if (!a->egress)
		d = json_pack("{s:b}", "enabled", 0);
	else if (allow != NULL)
		d = json_pack("{s:b, s:O}", "enabled", 1, "allow", allow);
	else
		d = json_pack("{s:b, s:[s]}", "enabled", 1, "allow", "*");
	a->audit_detail = d != NULL ? json_dumps(d, JSON_COMPACT) : NULL;
	json_decref(d);
	return 0;
}

int
api_h_egress(struct areq *a, struct sbx_err *err)
{
	char *joined = NULL;

	if (egress_body(a, &joined, err) == -1)
		return -1;
	/* as stored: full egress (absent or ["*"]) is no allowlist */
	a->same_grant = a->npc.egress == a->egress && (!a->egress ||
	    strcmp(a->npc.egress_allow, joined == NULL ||
	    strcmp(joined, "*") == 0 ? "" : joined) == 0);
	if ((a->egress && api_store_npc_set_egress_allow(a->s->store,
	    a->npc.name, joined, err) == -1) ||
	    api_store_npc_set_egress(a->s->store, a->npc.name, a->egress,
	    a->who.name, err) == -1 ||
	    api_store_npc_get(a->s->store, a->npc.name, &a->npc, err) != 1) {
		if (!sbx_err_is_set(err))
			sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_NPC,
			    a->npc.name);
		free(joined);
		return -1;
	}
	log_info(a->egress ? "egress granted" : "egress revoked", "npc",
	    a->npc.name, "by", a->who.name, "allow", a->egress ? (joined != NULL ?
	    joined : "*") : "-", NULL);
	free(joined);
	a->op = sbx_call_status(a->s->driver, a->npc.sandbox_id,
	    egress_status, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

int
api_h_metrics(struct areq *a, struct sbx_err *err)
{
	struct evbuffer *out = NULL;

	if ((out = evbuffer_new()) == NULL ||
	    api_metrics_render(&a->s->metrics, out, a->s->inflight) == -1 ||
	    api_ports_metrics(a->s, out) == -1) {
		if (out != NULL)
			evbuffer_free(out);
		return sbx_err_oom(err);
	}
	sbx_httpd_header(&a->h, "Cache-Control", "no-store");
	areq_reply_body(a, 200, "text/plain; version=0.0.4; charset=utf-8",
	    out);
	evbuffer_free(out);
	return 0;
}
