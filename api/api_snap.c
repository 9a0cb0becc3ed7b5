/* api_snap.c - sandbox-api snapshot handlers (docs/api.md "Snapshots", adr/0068): create, list, delete a snapshot of an NPC's /work, the owner-level list, fork into another NPC, and PUT …/sandbox's from_snapshot; the owner's snapshot limits (max_snapshots_per_player, snapshot_bytes_per_player). Calls the driver through sbx_call, the store for NPCs, and api_ensure_start (api_sandbox.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api_int.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_proto.h"

/* The NPC of a sandbox id ("npc-" + name, api_store.h), or NULL. */
static json_t *
npc_of(const char *sandbox_id)
{
	if (sandbox_id != NULL && strncmp(sandbox_id, "npc-", 4) == 0)
		return json_string(sandbox_id + 4);
	return json_null();
}

/* Each snapshot of text's {"snapshots":[...]} with its "npc" added;
 * NULL when text is not such an object. */
static json_t *
with_npcs(const char *text)
{
	json_t *root = json_loads(text, 0, NULL), *arr, *v;
	size_t i;

	arr = json_object_get(root, "snapshots");
	if (!json_is_array(arr)) {
		json_decref(root);
		return NULL;
	}
	json_array_foreach(arr, i, v)
		json_object_set_new(v, "npc", npc_of(json_string_value(
		    json_object_get(v, "sandbox_id"))));
	return root;
}

static int
name_member(struct areq *a, const char *key, const char **out,
    struct sbx_err *err)
{
	json_t *v = json_object_get(a->body, key);

	if (v == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"%s\" is "
		    "required.", key);
	if (!json_is_string(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Member \"%s\" must be "
		    "a string.", key);
	*out = json_string_value(v);
	if (strlen(*out) != json_string_length(v))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"%s\" holds a "
		    "NUL.", key);
	return 0;
}

static int
only(struct areq *a, const char *const *allowed, struct sbx_err *err)
{
	const char *k;
	json_t *v;
	size_t i;

	json_object_foreach(a->body, k, v) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(allowed[i], k) == 0)
				break;
		if (allowed[i] == NULL)
			return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "Member "
			    "\"%.64s\" is not accepted here.", k);
	}
	return 0;
}

/* The broker's err, with "sandbox npc-NAME" in its message said as a
 * player knows it, "NAME's sandbox" (the broker names sandboxes by id). */
static void
fail_named(struct areq *a, const struct sbx_err *err)
{
	static const char pre[] = "sandbox " API_NPC_SANDBOX_PREFIX;
	struct sbx_err e = *err;
	const char *p = strstr(err->message, pre), *name;
	size_t n;

	if (p != NULL) {
		name = p + sizeof(pre) - 1;
		n = strcspn(name, " :,;");
		snprintf(e.message, sizeof(e.message), "%.*s%.*s's sandbox%s",
		    (int)(p - err->message), err->message, (int)n, name, name + n);
	}
	areq_fail_broker(a, &e);
}

/* ---------- POST …/sandbox/snapshots {"name"} ---------- */

/*
 * One owner's snapshot create under way (adr/0068, "one at a time per
 * owner"): the owner's count and bytes are checked against the broker's
 * list, then the snapshot is made; a second create of the same owner
 * meanwhile would check the same list and could pass a limit with it, so
 * it is refused (429) before anything is asked. The turn is a's flag
 * snap_turn: it ends with its request (the reply sent, or the client
 * gone). 1 when another live request of owner holds it.
 */
static int
turn_held(const struct areq *a, const char *owner)
{
	const struct areq *x;

	for (x = a->s->live; x != NULL; x = x->next)
		if (x != a && x->snap_turn && strcmp(x->npc.owner, owner) == 0)
			return 1;
	return 0;
}

static void
created(void *arg, const struct sbx_err *err, const char *text)
{
	struct areq *a = arg;
	json_t *o;

	a->op = NULL;
	if (err != NULL) {
		fail_named(a, err);
		return;
	}
	if ((o = json_loads(text, 0, NULL)) == NULL) {
		areq_fail_code(a, SBX_E_INTERNAL, "%s", SBX_MSG_OOM);
		return;
	}
	json_object_set_new(o, "npc", json_string(a->npc.name));
	areq_reply_json(a, 201, o);
}

/* The owner's snapshots counted: one more within the limits, then the
 * create with what bytes are left (the broker refuses a bigger /work). */
static void
owner_counted(void *arg, const struct sbx_err *err, const char *text)
{
	struct areq *a = arg;
	const struct api_config *cfg = a->s->cfg;
	struct sbx_snapshot_req req;
	struct sbx_err e;
	json_t *root, *arr, *v;
	long long used = 0;
	size_t i, n;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	root = json_loads(text, 0, NULL);
	arr = json_object_get(root, "snapshots");
	n = json_array_size(arr);
	json_array_foreach(arr, i, v)
		used += json_integer_value(json_object_get(v, "size_bytes"));
	json_decref(root);
	if ((long long)n >= cfg->max_snapshots_per_player) {
		areq_fail_code(a, SBX_E_TOO_MANY, "%s already keeps %zu "
		    "snapshots, the most one owner may (max_snapshots_per_"
		    "player); delete one with DELETE /api/v1/npcs/NPC/sandbox/"
		    "snapshots/NAME.", a->npc.owner, n);
		return;
	}
	if (used >= cfg->snapshot_bytes_per_player) {
		areq_fail_code(a, SBX_E_QUOTA, "%s's snapshots take %lld bytes, "
		    "the most one owner may (snapshot_bytes_per_player); delete "
		    "one first.", a->npc.owner, used);
		return;
	}
	memset(&req, 0, sizeof(req));
	req.name = a->path;
	req.owner = a->npc.owner;
	req.max_bytes = (uint64_t)(cfg->snapshot_bytes_per_player - used);
	sbx_err_clear(&e);
	a->op = sbx_call_snapshot_create(a->s->driver, a->npc.sandbox_id, &req,
	    created, a, &e);
	if (a->op == NULL)
		areq_fail_broker(a, &e);
}

int
api_h_snap_create(struct areq *a, struct sbx_err *err)
{
	static const char *const allowed[] = { "name", NULL };
	const char *name;

	if (only(a, allowed, err) == -1 ||
	    name_member(a, "name", &name, err) == -1)
		return -1;
	if (!sbx_snapshot_name_valid(name))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s",
		    SBX_MSG_BAD_SNAPSHOT);
	if ((a->path = strdup(name)) == NULL)
		return sbx_err_oom(err);
	if (turn_held(a, a->npc.owner))
		return sbx_err_set(err, SBX_E_TOO_MANY, "A snapshot of %s's is "
		    "being made; one owner's snapshots are made one at a time. "
		    "Try again when it is done.", a->npc.owner);
	a->snap_turn = 1;
	a->op = sbx_call_snapshot_list(a->s->driver, NULL, a->npc.owner,
	    owner_counted, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

/* ---------- GET …/sandbox/snapshots, GET /api/v1/snapshots ---------- */

static void
listed(void *arg, const struct sbx_err *err, const char *text)
{
	struct areq *a = arg;
	json_t *o;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	if ((o = with_npcs(text)) == NULL) {
		areq_fail_code(a, SBX_E_INTERNAL, "The broker's snapshot list "
		    "could not be read.");
		return;
	}
	areq_reply_json(a, 200, o);
}

int
api_h_snap_list(struct areq *a, struct sbx_err *err)
{
	a->op = sbx_call_snapshot_list(a->s->driver, a->npc.sandbox_id, NULL,
	    listed, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

/* Every snapshot of the caller's NPCs (an operator: of everyone), also
 * those whose sandbox is gone. */
int
api_h_snap_all(struct areq *a, struct sbx_err *err)
{
	a->op = sbx_call_snapshot_list(a->s->driver, NULL,
	    a->who.role == API_ROLE_OPERATOR ? NULL : a->who.name, listed, a,
	    err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

/* ---------- DELETE …/sandbox/snapshots/{name} ---------- */

static void
deleted(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	a->op = NULL;
	if (err != NULL) {
		fail_named(a, err);
		return;
	}
	areq_reply_json(a, 200, json_pack("{s:s, s:s, s:s}", "npc", a->npc.name,
	    "name", a->exec_id, "state", "deleted"));
}

int
api_h_snap_delete(struct areq *a, struct sbx_err *err)
{
	/* The route's second segment is the name (not an exec id). */
	if (!sbx_snapshot_name_valid(a->exec_id))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s",
		    SBX_MSG_BAD_SNAPSHOT);
	a->op = sbx_call_snapshot_delete(a->s->driver, a->npc.sandbox_id,
	    a->exec_id, deleted, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

/* ---------- a new sandbox on a copy: from_snapshot, fork ---------- */

/* The copy is in place: the ensure of a->npc starts on it. */
static void
copied(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;
	struct sbx_err e;

	a->op = NULL;
	if (err != NULL) {
		fail_named(a, err);
		return;
	}
	sbx_err_clear(&e);
	if (api_ensure_start(a, &e) == -1) {
		if (a->broker_err)
			areq_fail_broker(a, &e);
		else
			areq_fail(a, &e);
	}
}

/* The NPC named name as a source or target of a copy: it must exist and
 * have owner_id's owner (else one 404 whatever is wrong, as R_NPC says). */
static int
same_owner_npc(struct areq *a, const char *name, struct api_npc *n,
    struct sbx_err *err)
{
	int r;

	if (!api_npc_name_valid(name))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_BAD_NPC_NAME);
	if ((r = api_store_npc_get(a->s->store, name, n, err)) == -1)
		return -1;
	if (r == 0 || n->owner_id != a->npc.owner_id)
		return sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_NPC, name);
	return 0;
}

/* PUT …/sandbox {"from_snapshot": NAME, "from_npc": NPC?, "image"?}
 * (api_sandbox.c's ensure after its body checks): the NPC's new /work is
 * a copy of snapshot NAME of its own sandbox, or of NPC's (same owner),
 * then the ensure as usual. The broker refuses (409) when the sandbox or
 * its /work exist already. */
int
api_h_sandbox_put(struct areq *a, struct sbx_err *err)
{
	struct api_npc from;
	const char *name, *fnpc = NULL;

	if (a->body == NULL || json_object_get(a->body, "from_snapshot") == NULL) {
		if (a->body != NULL && json_object_get(a->body, "from_npc") != NULL)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member "
			    "\"from_npc\" needs \"from_snapshot\".");
		return api_h_ensure(a, err);
	}
	if (api_ensure_body(a, err) == -1)
		return -1;
	if (name_member(a, "from_snapshot", &name, err) == -1)
		return -1;
	if (!sbx_snapshot_name_valid(name))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s",
		    SBX_MSG_BAD_SNAPSHOT);
	from = a->npc;
	if (json_object_get(a->body, "from_npc") != NULL &&
	    (name_member(a, "from_npc", &fnpc, err) == -1 ||
	    same_owner_npc(a, fnpc, &from, err) == -1))
		return -1;
	a->op = sbx_call_snapshot_copy(a->s->driver, a->npc.sandbox_id,
	    from.sandbox_id, name, copied, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

static void
forked(struct areq *a, const struct sbx_err *err, const struct sbx_status *st)
{
	json_t *o;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	o = api_status_json(a, st);
	if (o != NULL)
		json_object_set_new(o, "forked_from", json_string(
		    a->audit_detail != NULL ? a->audit_detail : ""));
	areq_reply_json(a, 201, o);
}

/* POST …/sandbox/fork {"npc": NEW}: NEW (made for the same owner when
 * absent, with the source's image; an existing one must be the same
 * owner's and have no sandbox) gets a sandbox whose /work is a copy of
 * the source's now (paused for the copy), with no snapshot left behind.
 * Egress is not copied: it stays an operator's grant per NPC. */
int
api_h_snap_fork(struct areq *a, struct sbx_err *err)
{
	static const char *const allowed[] = { "npc", NULL };
	struct api_npc dst;
	const char *name;
	char src_id[64];
	int r;

	if (only(a, allowed, err) == -1 ||
	    name_member(a, "npc", &name, err) == -1)
		return -1;
	if (!api_npc_name_valid(name))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_BAD_NPC_NAME);
	if (strcmp(name, a->npc.name) == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A fork needs another "
		    "NPC's name.");
	if ((r = api_store_npc_get(a->s->store, name, &dst, err)) == -1)
		return -1;
	if (r == 1 && dst.owner_id != a->npc.owner_id)
		return sbx_err_set(err, SBX_E_CONFLICT, "The NPC name %s is "
		    "taken.", name);
	if (r == 0 && api_store_npc_create(a->s->store, name, a->npc.owner_id,
	    &dst, err) == -1)
		return -1;
	if (r == 0 && a->npc.image[0] != '\0') {
		snprintf(dst.image, sizeof(dst.image), "%s", a->npc.image);
		if (api_store_npc_set_image(a->s->store, dst.name, dst.image,
		    err) == -1)
			return -1;
	}
	if ((a->audit_detail = strdup(a->npc.name)) == NULL)
		return sbx_err_oom(err);
	snprintf(src_id, sizeof(src_id), "%s", a->npc.sandbox_id);
	a->npc = dst;
	a->ensured = forked;
	a->op = sbx_call_snapshot_copy(a->s->driver, dst.sandbox_id, src_id,
	    NULL, copied, a, err);
	return a->op != NULL ? 0 : areq_broker_err(a);
}

int
api_h_e2b_snap_refuse(struct areq *a, struct sbx_err *err)
{
	return sbx_err_set(err, SBX_E_UNSUPPORTED, "sbx does not map E2B "
	    "snapshots or forks; use POST /api/v1/npcs/%s/sandbox/snapshots or "
	    "POST /api/v1/npcs/%s/sandbox/fork (docs/api.md).", a->npc.name,
	    a->npc.name);
}
