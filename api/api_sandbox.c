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

#define API_PREFIX "/api/v1"
#define NPCS_PATH API_PREFIX "/npcs"
#define METRICS_PATH "/metrics"

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

	return json_pack("{s:s,s:s,s:s,s:s,s:o,s:b,s:b,s:o,s:o,s:o}",
	    "npc", a->npc.name, "owner", a->npc.owner, "sandbox_id",
	    a->npc.sandbox_id, "state", sbx_state_name(st->state),
	    "image", absent || st->image[0] == '\0' ? json_null() :
	    json_string(st->image), "egress", absent ? 0 : st->egress,
	    "egress_granted", a->npc.egress, "created_at",
	    opt_ms(st->created_at_ms), "last_used_at",
	    opt_ms(st->last_used_at_ms), "stop_reason",
	    st->stop_reason[0] != '\0' && !absent ?
	    json_string(st->stop_reason) : json_null());
}

/* 0 when every member of obj is in allowed; else fails a and returns -1. */
static int
only_members(struct areq *a, json_t *obj, const char *const *allowed)
{
	const char *k;
	json_t *v;
	size_t i;

	json_object_foreach(obj, k, v) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(allowed[i], k) == 0)
				break;
		if (allowed[i] == NULL) {
			areq_fail_code(a, SBX_E_UNKNOWN_FIELD, "Member \"%.64s\" "
			    "is not accepted here.", k);
			return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Handlers                                                            */

void
api_h_whoami(struct areq *a)
{
	areq_reply_json(a, 200, json_pack("{s:s,s:s}", "name", a->who.name,
	    "role", api_role_name(a->who.role)));
}

void
api_h_npc_create(struct areq *a)
{
	static const char *const allowed[] = { "name", "owner", NULL };
	struct api_principal owner;
	struct api_npc n;
	struct sbx_err err;
	json_t *name, *ow;
	int r;

	sbx_err_clear(&err);
	if (only_members(a, a->body, allowed) == -1)
		return;
	name = json_object_get(a->body, "name");
	if (!json_is_string(name)) {
		areq_fail_code(a, name == NULL ? SBX_E_BAD_REQUEST :
		    SBX_E_WRONG_TYPE, "Member \"name\" must be a string.");
		return;
	}
	owner = a->who;
	if ((ow = json_object_get(a->body, "owner")) != NULL) {
		if (!json_is_string(ow)) {
			areq_fail_code(a, SBX_E_WRONG_TYPE, "Member \"owner\" "
			    "must be a string.");
			return;
		}
		if (strcmp(json_string_value(ow), a->who.name) != 0) {
			if (a->who.role != API_ROLE_OPERATOR) {
				areq_fail_code(a, SBX_E_FORBIDDEN, "Only an "
				    "operator can create an NPC for someone "
				    "else.");
				return;
			}
			r = api_store_principal_get(a->s->store,
			    json_string_value(ow), &owner, &err);
			if (r == -1) {
				areq_fail(a, &err);
				return;
			}
			if (r == 0 || owner.revoked_at != 0) {
				areq_fail_code(a, SBX_E_NOT_FOUND, "No active "
				    "principal has that name.");
				return;
			}
		}
	}
	if (!api_npc_name_valid(json_string_value(name)) ||
	    strlen(json_string_value(name)) != json_string_length(name)) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, SBX_MSG_BAD_NPC_NAME);
		return;
	}
	if (api_store_npc_create(a->s->store, json_string_value(name),
	    owner.id, &n, &err) == -1) {
		areq_fail(a, &err);
		return;
	}
	a->npc = n;
	a->has_npc = 1;
	areq_reply_json(a, 201, npc_json(&n));
}

static void
npc_list_add(void *arg, const struct api_npc *n)
{
	json_array_append_new(arg, npc_json(n));
}

void
api_h_npc_list(struct areq *a)
{
	struct sbx_err err;
	json_t *arr;

	sbx_err_clear(&err);
	if ((arr = json_array()) == NULL) {
		areq_fail_code(a, SBX_E_INTERNAL, SBX_MSG_OOM);
		return;
	}
	if (api_store_npc_list(a->s->store, a->who.role == API_ROLE_OPERATOR ?
	    0 : a->who.id, npc_list_add, arr, &err) == -1) {
		json_decref(arr);
		areq_fail(a, &err);
		return;
	}
	areq_reply_json(a, 200, arr);
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
	status_done(arg, err, st);
}

/*
 * max_sandboxes_per_player: the NPC's sandbox takes one of its owner's
 * slots before the broker is asked, so a burst of ensures cannot pass the
 * cap. Operators are exempt (their ensures are recorded, never refused).
 * Returns 0, or -1 having answered (429 too_many, 500).
 */
static int
claim_slot(struct areq *a)
{
	long long max = a->who.role == API_ROLE_OPERATOR ? 0 :
	    a->s->cfg->max_sandboxes_per_player;
	struct sbx_err err;
	int r;

	sbx_err_clear(&err);
	r = api_store_sandbox_claim(a->s->store, &a->npc, max,
	    &a->slot_claimed, &err);
	if (r == 1)
		return 0;
	if (r == 0)
		areq_fail_code(a, SBX_E_TOO_MANY, "%s already has %lld "
		    "sandboxes, the most one player may have "
		    "(max_sandboxes_per_player); delete one with DELETE "
		    "/api/v1/npcs/NPC/sandbox, or ask an operator.",
		    a->npc.owner, max);
	else
		areq_fail(a, &err);
	return -1;
}

void
api_h_ensure(struct areq *a)
{
	static const char *const allowed[] = { "image", NULL };
	struct sbx_spec spec;
	struct sbx_err err;
	json_t *img;

	sbx_err_clear(&err);
	memset(&spec, 0, sizeof(spec));
	if (a->body != NULL) {
		if (json_object_get(a->body, "egress") != NULL) {
			if (a->who.role != API_ROLE_OPERATOR)
				areq_fail_code(a, SBX_E_FORBIDDEN,
				    API_EGRESS_FORBIDDEN, a->npc.name);
			else
				areq_fail_code(a, SBX_E_UNKNOWN_FIELD, "Egress "
				    "is set with PUT /api/v1/npcs/%s/egress.",
				    a->npc.name);
			return;
		}
		if (only_members(a, a->body, allowed) == -1)
			return;
		img = json_object_get(a->body, "image");
		if (img != NULL && !json_is_string(img)) {
			areq_fail_code(a, SBX_E_WRONG_TYPE, "Member \"image\" "
			    "must be a string.");
			return;
		}
		if (img != NULL) {
			if (json_string_length(img) == 0 ||
			    json_string_length(img) >= sizeof(a->npc.image) ||
			    strlen(json_string_value(img)) !=
			    json_string_length(img)) {
				areq_fail_code(a, SBX_E_BAD_REQUEST, "Member "
				    "\"image\" must be an image name.");
				return;
			}
			snprintf(a->npc.image, sizeof(a->npc.image), "%s",
			    json_string_value(img));
			a->set_image = 1;
		}
	}
	/* The image asked for once stays the NPC's image: a later ensure
	 * without one (or an egress change) must not fall back to the
	 * default and replace the container. */
	spec.image = a->npc.image[0] != '\0' ? a->npc.image : NULL;
	/* Egress comes from the stored grant, never from the caller. */
	spec.egress = a->npc.egress;
	spec.egress_allow = a->npc.egress && a->npc.egress_allow[0] != '\0' ?
	    a->npc.egress_allow : NULL;
	if (claim_slot(a) == -1)
		return;
	a->op = sbx_call_ensure(a->s->driver, a->npc.sandbox_id,
	    &spec, ensure_done, a, &err);
	if (a->op == NULL) {
		if (a->slot_claimed)
			api_store_sandbox_release(a->s->store, a->npc.id, &err);
		areq_fail_broker(a, &err);
	}
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

/* ?usage=1: the broker counts /work (one helper exec, adr/0017); returns
 * 1 when started or answered, 0 when the flag is absent or 0. */
static int
status_usage_start(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct sbx_err err;
	int on;

	sbx_err_clear(&err);
	if ((on = sbx_query_flag(evhttp_uri_get_query(uri), SBX_QUERY_USAGE,
	    &err)) == 0)
		return 0;
	if (on < 0) {
		areq_fail(a, &err);
		return 1;
	}
	if (!sbx_call_supports(a->s->driver, SBX_CALL_STATUS_USAGE)) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, "This api's driver cannot "
		    "count /work usage.");
		return 1;
	}
	a->op = sbx_call_status_usage(a->s->driver,
	    a->npc.sandbox_id, status_usage_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
	return 1;
}

void
api_h_status(struct areq *a)
{
	struct sbx_err err;

	if (status_usage_start(a))
		return;
	sbx_err_clear(&err);
	a->op = sbx_call_status(a->s->driver, a->npc.sandbox_id,
	    status_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
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

void
api_h_destroy(struct areq *a)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	a->op = sbx_call_destroy(a->s->driver, a->npc.sandbox_id,
	    destroy_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

static void
stop_done(void *arg, const struct sbx_err *err)
{
	done_reply(arg, err, "stopped");
}

void
api_h_stop(struct areq *a)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	if (a->body != NULL && json_object_size(a->body) != 0) {
		areq_fail_code(a, SBX_E_UNKNOWN_FIELD, "stop takes no members.");
		return;
	}
	a->op = sbx_call_stop(a->s->driver, a->npc.sandbox_id,
	    stop_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

/* ?path= decoded once and checked (SPEC §4 path rules). */
static int
query_path(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct sbx_err err;

	sbx_err_clear(&err);
	if (sbx_query_path(evhttp_uri_get_query(uri), SBX_QUERY_PATH, &a->path,
	    NULL, &err) == -1) {
		areq_fail(a, &err);
		return -1;
	}
	return 0;
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

void
api_h_write(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct evbuffer *in = evhttp_request_get_input_buffer(a->req);
	struct sbx_err err;
	char *mode = NULL;

	sbx_err_clear(&err);
	if (query_path(a) == -1)
		return;
	switch (sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_MODE,
	    &mode, NULL, &err)) {
	case -1:
		areq_fail(a, &err);
		return;
	case 1:
		if (sbx_wire_mode_decode(mode, &a->mode, &err) == -1) {
			free(mode);
			areq_fail(a, &err);
			return;
		}
		free(mode);
		break;
	default:
		break;
	}
	if (api_fileop_admit(a, &err) == -1) {
		areq_fail(a, &err);
		return;
	}
	if (a->gbody != NULL) {
		api_write_stream(a, write_done);   /* adr/0030 */
		return;
	}
	/* A chunked body was gathered by the gate (at most file_size_max
	 * bytes); the driver drains it towards the broker. */
	a->op = sbx_call_write(a->s->driver, a->npc.sandbox_id,
	    a->path, a->mode, in, write_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
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

void
api_h_list(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct sbx_list_page page;
	struct sbx_err err;
	unsigned char name[256];
	char *cur = NULL;
	size_t len = 0, nl = 0;
	int r;

	sbx_err_clear(&err);
	if (query_path(a) == -1)
		return;
	/* ?cursor= (adr/0013): present, even empty, asks for the page object. */
	r = sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_CURSOR, &cur,
	    &len, &err);
	if (r == -1) {
		areq_fail(a, &err);
		return;
	}
	a->list_obj = r == 1;
	if (len > 0 && (len > 344 || sodium_base642bin(name, sizeof(name) - 1,
	    cur, len, NULL, &nl, NULL, sodium_base64_VARIANT_URLSAFE_NO_PADDING) !=
	    0 || nl == 0 || memchr(name, '\0', nl) != NULL ||
	    memchr(name, '/', nl) != NULL)) {
		free(cur);
		areq_fail_code(a, SBX_E_BAD_REQUEST, SBX_MSG_BAD_CURSOR);
		return;
	}
	free(cur);
	name[nl] = '\0';
	page.after = nl > 0 ? (const char *)name : NULL;
	page.limit = API_LIST_MAX_ENTRIES;
	if (api_fileop_admit(a, &err) == -1) {
		areq_fail(a, &err);
		return;
	}
	a->op = sbx_call_list(a->s->driver, a->npc.sandbox_id,
	    a->path, &page, list_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
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
	 * and so /work, survives (SPEC §4). */
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

void
api_h_egress_get(struct areq *a)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	a->op = sbx_call_egress_stats(a->s->driver, a->npc.sandbox_id,
	    egress_stats_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

void
api_h_egress(struct areq *a)
{
	static const char *const allowed[] = { "enabled", "allow", NULL };
	struct sbx_err err;
	json_t *en, *allow;
	char *joined = NULL;

	sbx_err_clear(&err);
	if (only_members(a, a->body, allowed) == -1)
		return;
	en = json_object_get(a->body, "enabled");
	if (!json_is_boolean(en)) {
		areq_fail_code(a, en == NULL ? SBX_E_BAD_REQUEST :
		    SBX_E_WRONG_TYPE, "Member \"enabled\" must be true or "
		    "false.");
		return;
	}
	a->egress = json_is_true(en);
	/* adr/0026: "allow" narrows the grant; absent (or ["*"]) is full
	 * egress. Checked before anything is stored. */
	allow = json_object_get(a->body, "allow");
	if (allow != NULL && !a->egress) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, "Member \"allow\" needs "
		    "\"enabled\": true.");
		return;
	}
	if (allow != NULL) {
		if (egress_allow_check(allow, &err) != 0) {
			areq_fail(a, &err);
			return;
		}
		if ((joined = egress_allow_join(allow)) == NULL ||
		    strlen(joined) > API_EGRESS_ALLOW_MAX) {
			free(joined);
			areq_fail_code(a, SBX_E_BAD_REQUEST, "The allowlist is longer "
			    "than %d bytes.", API_EGRESS_ALLOW_MAX);
			return;
		}
	}
	a->audit_pick = a->egress ? 2 : 1;   /* the row's grant/revoke */
	/* What was granted, in the audit row (adr/0027): the checked list,
	 * ["*"] for full egress. */
	{
		json_t *d;

		if (!a->egress)
			d = json_pack("{s:b}", "enabled", 0);
		else if (allow != NULL)
			d = json_pack("{s:b, s:O}", "enabled", 1, "allow", allow);
		else
			d = json_pack("{s:b, s:[s]}", "enabled", 1, "allow", "*");
		a->audit_detail = d != NULL ? json_dumps(d, JSON_COMPACT) : NULL;
		json_decref(d);
	}
	if ((a->egress && api_store_npc_set_egress_allow(a->s->store, a->npc.name,
	    joined, &err) == -1) ||
	    api_store_npc_set_egress(a->s->store, a->npc.name, a->egress,
	    a->who.name, &err) == -1 ||
	    api_store_npc_get(a->s->store, a->npc.name, &a->npc, &err) != 1) {
		if (!sbx_err_is_set(&err))
			sbx_err_set(&err, SBX_E_NOT_FOUND, SBX_MSG_NO_NPC,
			    a->npc.name);
		free(joined);
		areq_fail(a, &err);
		return;
	}
	log_info(a->egress ? "egress granted" : "egress revoked", "npc",
	    a->npc.name, "by", a->who.name, "allow", a->egress ? (joined != NULL ?
	    joined : "*") : "-", NULL);
	free(joined);
	a->op = sbx_call_status(a->s->driver, a->npc.sandbox_id,
	    egress_status, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

void
api_h_metrics(struct areq *a)
{
	struct evbuffer *out = NULL;

	if ((out = evbuffer_new()) == NULL ||
	    api_metrics_render(&a->s->metrics, out, a->s->inflight) == -1) {
		if (out != NULL)
			evbuffer_free(out);
		areq_fail_code(a, SBX_E_INTERNAL, SBX_MSG_OOM);
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(a->req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	evhttp_add_header(evhttp_request_get_output_headers(a->req),
	    "Cache-Control", "no-store");
	evhttp_send_reply(a->req, 200, "OK", out);
	evbuffer_free(out);
	a->req = NULL;
	areq_finish(a, 200, "ok");
}

