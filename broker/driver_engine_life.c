/*
 * driver_engine_life.c - the engine driver's sandbox lifecycle besides
 * ensure: status, stop, destroy, list_sandboxes, reconcile, health, each a
 * kind row. It calls down into ensure (the egress network's removal), the
 * egress proxy, the helper volume (gc), the agent records (forget), the
 * runtime call layer and the op lifecycle; the driver's entry calls it.
 */
#include "driver_engine_direct.h"

static void rec_next(struct eop *op);
static void rec_fini(struct eop *op);
static void sandboxes_fail(struct eop *op, const struct sbx_err *err);
static void health_fail(struct eop *op, const struct sbx_err *err);

static const struct eng_kind status_kind = {
	.name = "status",
	.fail = eng_fail_status,
};

static void going_fini(struct eop *op);

static const struct eng_kind stop_kind = {
	.name = "stop",
	.fail = eng_finish_done,
	.fini = going_fini,
};

static const struct eng_kind destroy_kind = {
	.name = "destroy",
	.fail = eng_finish_done,
	.fini = going_fini,
};

/* A stop or destroy ended: the sandbox no longer counts as going. */
static void
going_fini(struct eop *op)
{
	eng_agent_forget_end(op->e, op->id);
}

static const struct eng_kind sandboxes_kind = {
	.name = "list of sandboxes",
	.fail = sandboxes_fail,
};

static const struct eng_kind reconcile_kind = {
	.name = "reconcile",
	.fail = eng_finish_done,
	.fini = rec_fini,
};

static const struct eng_kind health_kind = {
	.name = "health",
	.fail = health_fail,
};

static void
sandboxes_fail(struct eop *op, const struct sbx_err *err)
{
	if (op->cb.sandboxes != NULL)
		op->cb.sandboxes(op->arg, err, NULL, 0);
	eng_op_release(op);
}

static void
health_fail(struct eop *op, const struct sbx_err *err)
{
	if (op->cb.health != NULL)
		op->cb.health(op->arg, err, NULL);
	eng_op_release(op);
}

/* GET API PATH filters={"label":["io.sbx.managed=true"]} (PATH ends in '?'
 * or '&'): only what sbx made; answered in cont (read with list_bad). */
static void
list_managed(struct eop *op, const char *path, cont_fn cont)
{
	char filt[256];

	eng_urlencode("{\"label\":[\"" L_MANAGED "=true\"]}", filt, sizeof(filt));
	snprintf(op->lpath, sizeof(op->lpath), API "%sfilters=%s", path, filt);
	op->lcont = cont;
	eng_call(op, "GET", op->lpath, NULL, cont);
}

/* A Podman ghost went (or was gone): the same list again. */
static void
ghost_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (REPLY_BAD(op, NULL, err, status, body,
	    "remove a container it keeps without storage", 200, 204, 404))
		return;
	eng_call(op, "GET", op->lpath, NULL, op->lcont);
}

/* The answer to a list: 1 when op has been ended (no answer, or anything
 * but 200 with a JSON array: runtime_error "... list WHAT") or goes on
 * elsewhere, else 0. A Podman ghost in a list of containers (adr/0058) is
 * force-removed by its id (its volumes stay: v=0) and the list asked
 * again, up to GHOSTS_MAX times: the list was filtered to io.sbx.managed,
 * so the ghost is one sbx made (a sandbox, or its probe, init or proxy
 * container), and its storage is gone already. */
static int
list_bad(struct eop *op, int status, json_t *body, const struct sbx_err *err,
    const char *what)
{
	struct sbx_err e;
	char doing[64], gid[72];

	if (eng_ended(op, err))
		return 1;
	if (status == 200 && json_is_array(body))
		return 0;
	if (eng_ghost(status, body, gid, sizeof(gid)) &&
	    op->ghosts < GHOSTS_MAX) {
		op->ghosts++;
		log_warn("removing a container the runtime lists without its "
		    "storage (a runtime crash cut its removal)", "container",
		    gid, "during", op->kind->name, NULL);
		eng_callf(op, "DELETE", NULL, ghost_removed,
		    API "/containers/%s?force=1&v=0", gid);
		return 1;
	}
	snprintf(doing, sizeof(doing), "list %s", what);
	eng_runtime_err(&e, status, body, doing);
	eng_finish_err(op, &e);
	return 1;
}

/* A new op of kind (size bytes) for sandbox id whose first step is the
 * container's inspect, answered in cont. NULL with err. */
static struct eop *
inspect_first(struct sbx_driver *d, const struct eng_kind *kind, size_t size,
    const char *id, cont_fn cont, struct sbx_err *err)
{
	struct eop *op;
	char path[256];

	if ((op = eng_op_new((struct engine *)d, kind, id, size, err)) == NULL)
		return NULL;
	eng_inspect_path(op, path, sizeof(path));
	eng_call(op, "GET", path, NULL, cont);
	return op;
}

/* inspect_first for an op answered by a sbx_done_cb (stop, destroy); the
 * sandbox's agent channel is forgotten (adr/0025): its container goes. */
static struct sbx_op *
inspect_first_done(struct sbx_driver *d, const struct eng_kind *kind, size_t size,
    const char *id, cont_fn cont, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct eop *op;

	if ((op = inspect_first(d, kind, size, id, cont, err)) == NULL)
		return NULL;
	eng_agent_forget(op->e, id);
	op->cb.done = cb;
	op->arg = arg;
	return &op->base;
}

/* ---------- status ---------- */

static void
status_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status == 404 || eng_gone(status, body)) {
		eng_absent_status(op, &st);
		eng_finish_status(op, NULL, &st);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the container",
	    200))
		return;
	if (eng_status_from_inspect(op, body, &st, &e) < 0) {
		eng_finish_err(op, &e);
		return;
	}
	eng_finish_status(op, NULL, &st);
}

struct sbx_op *
eng_status(struct sbx_driver *d, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct eop *op;

	if ((op = inspect_first(d, &status_kind, sizeof(struct eop), id,
	    status_inspected, err)) == NULL)
		return NULL;
	op->cb.status = cb;
	op->arg = arg;
	return &op->base;
}

/* ---------- stop ---------- */

/* Last step of stop: the sandbox's egress proxy went with it (adr/0027). */
static void
stop_finish(struct eop *op)
{
	eng_finish_done(op, NULL);
}

static void
stop_done(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status == 404) {
		eng_not_found(op, &e);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "stop the container", 204,
	    304))
		return;
	eng_proxy_stop(op, stop_finish);
}

static void
stop_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	int r;

	if ((r = eng_inspect_running(op, status, body, err, &st)) < 0)
		return;
	if (eng_finish_if_absent(op, r, &st))
		return;
	if (r == 0) {
		/* Already stopped; its proxy may still run (adr/0027). */
		eng_proxy_stop(op, stop_finish);
		return;
	}
	eng_callf(op, "POST", NULL, stop_done, API "/containers/%s/stop?t=%d",
	    op->cid, op->e->stop_timeout_s);
}

struct sbx_op *
eng_stop(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return inspect_first_done(d, &stop_kind, sizeof(struct eop), id,
	    stop_inspected, cb, arg, err);
}

/* ---------- destroy ---------- */

/* Last step of destroy: container, volume, then the egress network gone. */
static void
destroy_finish(struct eop *op)
{
	eng_finish_done(op, NULL);
}

static void
destroy_volume_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (REPLY_BAD(op, NULL, err, status, body, "remove the volume", 204,
	    404))
		return;
	eng_net_drop(op, destroy_finish);
}

static void
destroy_volume_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status == 404) {
		eng_net_drop(op, destroy_finish);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the volume", 200))
		return;
	if (!eng_managed(json_object_get(body, "Labels"))) {
		eng_not_ours(&e, "volume", op->vname);
		eng_finish_err(op, &e);
		return;
	}
	eng_callf(op, "DELETE", NULL, destroy_volume_removed, API "/volumes/%s",
	    op->vname);
}

static void
destroy_init_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	(void)status;
	(void)body;
	if (eng_ended(op, err))
		return;
	eng_callf(op, "GET", NULL, destroy_volume_inspected, API "/volumes/%s",
	    op->vname);
}

/* First the init container a broker killed during an ensure may have left
 * (ours by its name: ids cannot hold a '.'; it holds the volume, found by
 * test_faults.py), then the volume. */
static void destroy_volume_now(struct eop *op);

/* The egress proxy and its socket volume (adr/0026) before the rest. */
static void
destroy_agent_volume(struct eop *op)
{
	eng_direct_drop(op, destroy_volume_now);
}

static void
destroy_volume(struct eop *op)
{
	eng_proxy_drop(op, destroy_agent_volume);
}

static void
destroy_probe_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (eng_ended(op, err))
		return;
	eng_callf(op, "DELETE", NULL, destroy_init_removed,
	    API "/containers/%s.init?force=1&v=0", op->cname);
}

/* The image probe (adr/0045) a killed broker may have left, likewise. */
static void
destroy_volume_now(struct eop *op)
{

	eng_callf(op, "DELETE", NULL, destroy_probe_removed,
	    API "/containers/%s.probe?force=1&v=0", op->cname);
}

static void
destroy_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (REPLY_BAD(op, NULL, err, status, body, "remove the container", 204,
	    404))
		return;
	/* The last user of an old helper volume may have gone. */
	if (dst(op)->old_helper[0] != '\0' &&
	    strcmp(dst(op)->old_helper, op->e->helper_vol) != 0)
		eng_helper_gc(op->e);
	destroy_volume(op);
}

static void
destroy_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	const char *hl;
	int r;

	if (err == NULL && eng_ghost(status, body, NULL, 0)) {
		/* Podman's ghost (adr/0058): removed by name like any. */
		log_warn("removing a container the runtime keeps without its "
		    "storage (a runtime crash cut its removal)", "container",
		    op->cname, "during", "destroy", NULL);
		eng_callf(op, "DELETE", NULL, destroy_removed,
		    API "/containers/%s?force=1&v=0", op->cname);
		return;
	}
	if ((r = eng_inspect_found(op, status, body, err, &st, &hl)) < 0)
		return;
	if (r == 0) {
		destroy_volume(op);
		return;
	}
	snprintf(dst(op)->old_helper, sizeof(dst(op)->old_helper), "%s",
	    hl != NULL ? hl : "");
	/* A claimed pool member's /work keeps its member's name (adr/0067). */
	eng_work_volume(op, body);
	eng_callf(op, "DELETE", NULL, destroy_removed,
	    API "/containers/%s?force=1&v=0", op->cid);
}

struct sbx_op *
eng_destroy(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return inspect_first_done(d, &destroy_kind, sizeof(struct eop_destroy), id,
	    destroy_inspected, cb, arg, err);
}

/* ---------- list_sandboxes ---------- */

static void
sandboxes_listed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status *sts = NULL;
	struct sbx_err e;
	json_t *c, *labels;
	const char *v, *state;
	char id[sizeof(sts[0].id)];
	size_t i, n = 0;

	if (list_bad(op, status, body, err, "containers"))
		return;
	if (json_array_size(body) > 0 &&
	    (sts = calloc(json_array_size(body), sizeof(*sts))) == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	json_array_foreach(body, i, c) {
		labels = json_object_get(c, "Labels");
		/* The filter is the runtime's; check again ourselves. */
		if (!eng_sandbox_of(op->e, labels, json_string_value(json_array_get(
		    json_object_get(c, "Names"), 0)), id, sizeof(id)) ||
		    !sbx_id_valid(id))
			continue;
		snprintf(sts[n].id, sizeof(sts[n].id), "%s", id);
		state = eng_jstr(c, "State");
		sts[n].state = strcmp(state, "running") == 0 ?
		    SBX_STATE_RUNNING : SBX_STATE_STOPPED;
		v = eng_label(labels, L_IMAGE);
		snprintf(sts[n].image, sizeof(sts[n].image), "%s",
		    v != NULL ? v : eng_jstr(c, "Image"));
		v = eng_label(labels, L_EGRESS);
		sts[n].egress = v != NULL && (strcmp(v, "1") == 0 ||
		    strcmp(v, "proxy") == 0);
		sts[n].created_at_ms =
		    (int64_t)json_integer_value(json_object_get(c, "Created")) * 1000;
		if (sts[n].state == SBX_STATE_STOPPED)
			snprintf(sts[n].stop_reason, sizeof(sts[n].stop_reason),
			    "exited");
		snprintf(sts[n].container_id, sizeof(sts[n].container_id), "%s",
		    eng_jstr(c, "Id"));
		n++;
	}
	if (op->cb.sandboxes != NULL)
		op->cb.sandboxes(op->arg, NULL, sts, n);
	free(sts);
	eng_op_release(op);
}

struct sbx_op *
eng_list_sandboxes(struct sbx_driver *d, sbx_sandboxes_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;

	if ((op = eng_op_new(e, &sandboxes_kind, NULL, sizeof(struct eop),
	    err)) == NULL)
		return NULL;
	op->cb.sandboxes = cb;
	op->arg = arg;
	list_managed(op, "/containers/json?all=1&", sandboxes_listed);
	return &op->base;
}

/* ---------- reconcile: egress networks nobody needs (ADR 0014) ---------- */


static void
rec_deleted(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_reconcile *rc = rco(op);
	json_t *n = json_array_get(rc->rnets, rc->ri);
	const char *name = eng_jstr(n, "Name");

	(void)body;
	if (eng_ended(op, err))
		return;
	if (status >= 200 && status < 300) {
		rc->rgone++;
		log_info("orphaned egress network removed", "network", name, NULL);
	} else if (status != 404) {
		/* In use (the pre-0014 shared network still has containers) or
		 * refused: left for the next start. */
		log_warn("egress network not removed", "network", name, "why",
		    json_string_value(json_object_get(body, "message")), NULL);
	}
	rc->ri++;
	rec_next(op);
}

/* 1 when managed network n is ours and no sandbox needs it any more. */
static int
rec_orphan(struct eop *op, json_t *n)
{
	json_t *labels = json_object_get(n, "Labels");
	const char *name = eng_jstr(n, "Name"), *id = eng_label(labels, L_ID);
	size_t pl = strlen(op->e->prefix);
	char want[160];

	if (!eng_managed(labels) || strncmp(name, op->e->prefix, pl) != 0)
		return 0;
	if (id == NULL)   /* the shared network of sbx before ADR 0014 */
		return strcmp(name + pl, "egress") == 0;
	if (!sbx_id_valid(id))
		return 0;
	snprintf(want, sizeof(want), "%s%s-egress", op->e->prefix, id);
	return strcmp(name, want) == 0 &&
	    json_object_get(rco(op)->rkeep, id) == NULL;
}

static void
rec_next(struct eop *op)
{
	struct eop_reconcile *rc = rco(op);
	json_t *n;
	char gone[16];

	for (; rc->ri < json_array_size(rc->rnets); rc->ri++) {
		n = json_array_get(rc->rnets, rc->ri);
		if (!rec_orphan(op, n) || !eng_name_ok(eng_jstr(n, "Id"), 128))
			continue;
		eng_callf(op, "DELETE", NULL, rec_deleted, API "/networks/%s",
		    eng_jstr(n, "Id"));
		return;
	}
	snprintf(gone, sizeof(gone), "%u", rc->rgone);
	if (rc->rgone > 0)
		log_info("egress networks reconciled", "removed", gone, NULL);
	/* The warm pool starts once (adr/0067): after the first reconcile. */
	eng_pool_reconciled(op->e);
	eng_finish_done(op, NULL);
}

static void
rec_networks(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (list_bad(op, status, body, err, "networks"))
		return;
	rco(op)->rnets = json_incref(body);
	rco(op)->ri = 0;
	rec_next(op);
}

static void
rec_networks_list(struct eop *op)
{

	list_managed(op, "/networks?", rec_networks);
}

/* The agents' socket volumes of sandboxes that are gone (adr/0066). */
static void
rec_agent_volumes(struct eop *op)
{
	eng_direct_reconcile(op, rec_networks_list);
}

static void
rec_containers(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	json_t *c, *labels;
	const char *id, *eg;
	size_t i;

	if (list_bad(op, status, body, err, "containers"))
		return;
	if ((rco(op)->rkeep = json_object()) == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	if ((rco(op)->rsbx = json_object()) == NULL ||
	    (rco(op)->rpx = json_array()) == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	/* Stopped ones count: starting them again needs their network. */
	json_array_foreach(body, i, c) {
		labels = json_object_get(c, "Labels");
		if (eng_proxy_listed(c)) {
			json_array_append(rco(op)->rpx, c);
			continue;
		}
		id = eng_label(labels, L_ID);
		if (eng_managed(labels) && id != NULL && sbx_id_valid(id))
			json_object_set_new(rco(op)->rsbx, id, json_boolean(
			    strcmp(eng_jstr(c, "State"), "running") == 0));
		eg = eng_label(labels, L_EGRESS);
		if (eng_managed(labels) && id != NULL && eg != NULL &&
		    (strcmp(eg, "1") == 0 || strcmp(eg, "proxy") == 0))
			json_object_set_new(rco(op)->rkeep, id, json_true());
	}
	/* Proxies of sandboxes that are gone or stopped, first: a network
	 * in use by one cannot go (adr/0027). */
	eng_proxy_reconcile(op, rec_agent_volumes);
}

static void
rec_fini(struct eop *op)
{
	json_decref(rco(op)->rkeep);
	json_decref(rco(op)->rnets);
	json_decref(rco(op)->rsbx);
	json_decref(rco(op)->rpx);
	json_decref(rco(op)->rvols);
	json_decref(rco(op)->rdvols);
}

struct sbx_op *
eng_reconcile(struct sbx_driver *d, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;

	if ((op = eng_op_new(e, &reconcile_kind, NULL,
	    sizeof(struct eop_reconcile), err)) == NULL)
		return NULL;
	op->cb.done = cb;
	op->arg = arg;
	list_managed(op, "/containers/json?all=1&", rec_containers);
	return &op->base;
}

/* ---------- health ---------- */

static void
health_report(struct eop *op, const char *reason)
{
	struct sbx_health *h = &hlt(op)->health;

	if (reason == NULL && op->e->helper_tar == NULL)
		reason = op->e->helper_err;
	h->ok = reason == NULL;
	snprintf(h->status, sizeof(h->status), "%s", h->ok ? "ok" : "degraded");
	snprintf(h->reason, sizeof(h->reason), "%s", reason != NULL ? reason : "");
	if (op->cb.health != NULL)
		op->cb.health(op->arg, NULL, h);
	eng_op_release(op);
}

/* The answer of a health step: 1 when op has been answered (err's
 * sentence, or why for a status other than 200), else 0. */
static int
health_bad(struct eop *op, int status, const struct sbx_err *err,
    const char *why)
{
	if (err != NULL)
		health_report(op, err->message);
	else if (status != 200)
		health_report(op, why);
	else
		return 0;
	return 1;
}

static void
health_image(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	char reason[256];

	(void)body;
	snprintf(reason, sizeof(reason), "default image %s is not present in "
	    "the runtime", op->e->default_image);
	if (health_bad(op, status, err, reason))
		return;
	health_report(op, NULL);
}

static void
health_version(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_health *h = &hlt(op)->health;
	json_t *comp;
	const char *api, *name = "Docker Engine";
	char reason[256];
	size_t i;
	int maj = 0, min = 0;

	if (health_bad(op, status, err, "runtime /version failed"))
		return;
	json_array_foreach(json_object_get(body, "Components"), i, comp) {
		if (strstr(eng_jstr(comp, "Name"), "Podman") != NULL)
			name = "Podman Engine";
	}
	snprintf(h->runtime, sizeof(h->runtime), "%s %s", name,
	    eng_jstr(body, "Version"));
	api = eng_jstr(body, "ApiVersion");
	snprintf(h->api_version, sizeof(h->api_version), "1.41");
	if (sscanf(api, "%d.%d", &maj, &min) != 2 || maj < 1 ||
	    (maj == 1 && min < 41)) {
		snprintf(reason, sizeof(reason), "runtime speaks Engine API %s, "
		    "sbx needs 1.41 or later", api);
		health_report(op, reason);
		return;
	}
	eng_callf(op, "GET", NULL, health_image, API "/images/%s/json",
	    op->e->default_image);
}

static void
health_pinged(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)body;
	if (health_bad(op, status, err, "runtime /_ping did not answer OK"))
		return;
	eng_call(op, "GET", API "/version", NULL, health_version);
}

struct sbx_op *
eng_health(struct sbx_driver *d, sbx_health_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;

	if ((op = eng_op_new(e, &health_kind, NULL, sizeof(struct eop_health),
	    err)) == NULL)
		return NULL;
	op->cb.health = cb;
	op->arg = arg;
	eng_call(op, "GET", "/_ping", NULL, health_pinged);
	return &op->base;
}
