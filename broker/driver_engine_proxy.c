/*
 * driver_engine_proxy.c - the engine driver's egress proxy of a sandbox:
 * socket volume, proxy container (made, filled with sbx-proxy, started,
 * replaced when its policy changes), their stop and removal, reconcile's
 * proxy step, and egress_stats with its kind row (adr/0026, adr/0027). It
 * calls down into the helper volume's tar, the runtime call layer and the
 * op lifecycle; ensure and life call it.
 */
#include "broker_egress.h"

#include "driver_engine_int.h"

/*
 * Names: container "<prefix><id>-proxy", volume "<prefix><id>-egsock",
 * both labelled io.sbx.managed=true and io.sbx.proxy-of=<id> (not io.sbx.id:
 * the proxy is not a sandbox and must not be listed as one), the container
 * also io.sbx.role=proxy and io.sbx.egress-policy=<digest>.
 */
#define L_PROXY_OF "io.sbx.proxy-of"

static void egress_fail(struct eop *op, const struct sbx_err *err);

/* egress_stats: answered with the decision log's JSON */
static const struct eng_kind egress_kind = {
	.name = "egress stats",
	.fail = egress_fail,
};

static void
egress_fail(struct eop *op, const struct sbx_err *err)
{
	if (op->cb.json != NULL)
		op->cb.json(op->arg, err, NULL);
	eng_op_release(op);
}

static void
names(struct eop *op, char *px, size_t pxs, char *vol, size_t vols)
{
	snprintf(px, pxs, "%s%s-proxy", op->e->prefix, op->id);
	snprintf(vol, vols, "%s%s-egsock", op->e->prefix, op->id);
}

static int
ours(const struct eop *op, json_t *labels)
{
	const char *v = eng_label(labels, L_PROXY_OF);

	return eng_managed(labels) && v != NULL && strcmp(v, op->id) == 0;
}

/* GET /containers/<prefix><id>-proxy/json, answered in cb. */
static void
px_get(struct eop *op, cont_fn cb)
{
	char px[160], vol[160];

	names(op, px, sizeof(px), vol, sizeof(vol));
	eng_callf(op, "GET", NULL, cb, API "/containers/%s/json", px);
}

/* The id of the proxy an inspect answered (status 200), when it is ours
 * and the runtime's id is usable; else NULL. */
static const char *
px_ours_id(struct eop *op, int status, json_t *body)
{
	const char *cid = eng_jstr(body, "Id");

	if (status != 200 || !ours(op, json_object_get(json_object_get(body, "Config"),
	    "Labels")) || !eng_name_ok(cid, 128))
		return NULL;
	return cid;
}

/* The proxy's runtime id from a create or inspect answer into
 * ens(op)->px_cid: 0, or -1 with op ended (runtime_error) when it is not
 * usable. */
static int
px_keep_id(struct eop *op, json_t *body)
{
	struct eop_ensure *en = ens(op);
	struct sbx_err e;

	snprintf(en->px_cid, sizeof(en->px_cid), "%s", eng_jstr(body, "Id"));
	if (eng_name_ok(en->px_cid, sizeof(en->px_cid) - 1))
		return 0;
	sbx_err_set(&e, SBX_E_RUNTIME, "runtime gave no usable id for the "
	    "egress proxy of %s", op->id);
	eng_finish_err(op, &e);
	return -1;
}

/* sbx-proxy, beside sbx-helper, read once as a one-file tar. */
static int
proxy_load(struct engine *e, struct sbx_err *err)
{
	char path[4096], why[512], *slash;
	size_t len;

	if (e->proxy_tar != NULL)
		return 0;
	snprintf(path, sizeof(path), "%s", e->helper_path);
	slash = strrchr(path, '/');
	if (slash == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "no directory for sbx-proxy");
	snprintf(slash + 1, sizeof(path) - (size_t)(slash + 1 - path), "sbx-proxy");
	if (eng_file_tar(path, "sbx-proxy", &e->proxy_tar, &e->proxy_tar_len, &len,
	    why, sizeof(why)) != 0)
		return sbx_err_set(err, SBX_E_INTERNAL, "the egress proxy: %s", why);
	return 0;
}

/* ---------- ensure: volume, container, fill, start ---------- */

static void px_inspect(struct eop *op);

static void
px_done(struct eop *op)
{
	struct eop_ensure *en = ens(op);

	en->proxy_done = 1;
	en->proxy_then(op);
}

static void
px_started(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "start the egress proxy", 204, 304))
		return;
	log_info("egress proxy started", "id", op->id, NULL);
	px_done(op);
}

static void
px_start(struct eop *op)
{

	eng_callf(op, "POST", NULL, px_started, API "/containers/%s/start",
	    ens(op)->px_cid);
}

static void
px_filled(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "put sbx-proxy into the egress "
	    "proxy's volume", 200))
		return;
	px_start(op);
}

static void
px_created(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	char path[256];

	if (err == NULL && eng_name_taken(status, body) && en->px_tries++ < 3) {
		/* A concurrent ensure made it: look again. */
		px_inspect(op);
		return;
	}
	if (REPLY_BAD(op, NULL, err, status, body, "create the egress proxy", 201))
		return;
	if (px_keep_id(op, body) < 0)
		return;
	/* Into the socket volume, mounted read-write here: the relay of the
	 * sandbox runs the same binary from it (read-only there). */
	snprintf(path, sizeof(path), API "/containers/%s/archive?path=%s", en->px_cid,
	    EGRESS_SOCK_DIR);
	eng_call_bytes(op, "PUT", path, "application/x-tar", op->e->proxy_tar,
	    op->e->proxy_tar_len, px_filled);
}

static void
px_create(struct eop *op)
{
	struct eop_ensure *en = ens(op);
	struct engine *e = op->e;
	char px[160], vol[160];
	struct sbx_err er;
	struct egress_proxy_spec s;
	json_t *body;

	names(op, px, sizeof(px), vol, sizeof(vol));
	memset(&s, 0, sizeof(s));
	s.image = en->image;
	s.helper_vol = NULL;
	s.proxy_path = EGRESS_SOCK_DIR "/sbx-proxy";
	s.sock_vol = vol;
	s.network = op->nname;
	s.resolver = e->proxy_resolver;
	s.oci_runtime = e->oci_runtime;
	s.mem_bytes = e->proxy_mem;
	s.pids = 64;
	s.allow = en->allow;
	s.labels = json_pack("{s:s, s:s, s:s}", L_MANAGED, "true", L_PROXY_OF, op->id,
	    L_ROLE, "proxy");
	if ((body = egress_proxy_body(&s)) == NULL) {
		sbx_err_oom(&er);
		eng_finish_err(op, &er);
		return;
	}
	eng_callf(op, "POST", body, px_created,
	    API "/containers/create?name=%s", px);
}

static void
px_stale_removed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "remove the old egress proxy", 204,
	    404))
		return;
	log_info("egress proxy replaced (policy changed)", "id", op->id, NULL);
	px_create(op);
}

static void
px_inspected(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	json_t *labels;
	const char *have;
	char want[65], px[160], vol[160];
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status == 404) {
		px_create(op);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the egress proxy", 200))
		return;
	labels = json_object_get(json_object_get(body, "Config"), "Labels");
	if (!ours(op, labels)) {
		names(op, px, sizeof(px), vol, sizeof(vol));
		eng_not_ours(&e, "container", px);
		eng_finish_err(op, &e);
		return;
	}
	if (px_keep_id(op, body) < 0)
		return;
	egress_policy_digest(en->allow, op->e->proxy_resolver, want);
	have = eng_label(labels, EGRESS_L_POLICY);
	if (have == NULL || strcmp(have, want) != 0) {
		/* Another policy: this proxy goes, the sandbox stays. */
		eng_callf(op, "DELETE", NULL, px_stale_removed,
		    API "/containers/%s?force=1&v=0", en->px_cid);
		return;
	}
	if (json_is_true(json_object_get(json_object_get(body, "State"), "Running"))) {
		px_done(op);
		return;
	}
	px_start(op);
}

static void
px_inspect(struct eop *op)
{
	px_get(op, px_inspected);
}

static void
px_volume(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (err == NULL && (status == 200 || status == 201 || eng_name_taken(status, body) ||
	    status == 409)) {
		px_inspect(op);
		return;
	}
	REPLY_BAD(op, NULL, err, status, body, "create the egress proxy's volume", 201);
}

void
eng_proxy_ensure(struct eop *op, void (*then)(struct eop *))
{
	struct eop_ensure *en = ens(op);
	char px[160], vol[160];
	struct sbx_err e;
	json_t *req;

	en->proxy_then = then;
	if (proxy_load(op->e, &e) != 0) {
		eng_finish_err(op, &e);
		return;
	}
	names(op, px, sizeof(px), vol, sizeof(vol));
	req = json_pack("{s:s, s:{s:s, s:s}}", "Name", vol, "Labels", L_MANAGED, "true",
	    L_PROXY_OF, op->id);
	if (req == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	eng_callf(op, "POST", req, px_volume, API "/volumes/create");
}

/* ---------- removal: container, then volume (never what is not ours) ---------- */

static void
drop_vol_removed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "remove the egress proxy's volume",
	    204, 404))
		return;
	op->then(op);
}

static void
drop_vol_inspected(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	char px[160], vol[160];

	if (eng_ended(op, err))
		return;
	if (status != 200 || !ours(op, json_object_get(body, "Labels"))) {
		op->then(op);
		return;
	}
	names(op, px, sizeof(px), vol, sizeof(vol));
	eng_callf(op, "DELETE", NULL, drop_vol_removed, API "/volumes/%s", vol);
}

static void
drop_volume(struct eop *op)
{
	char px[160], vol[160];

	names(op, px, sizeof(px), vol, sizeof(vol));
	eng_callf(op, "GET", NULL, drop_vol_inspected, API "/volumes/%s", vol);
}

static void
drop_removed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "remove the egress proxy", 204, 404))
		return;
	drop_volume(op);
}

/*
 * After px_get: when the proxy is ours (and runs, if need_running), calls
 * method on API "/containers/<id>" suffix answered in next; else none(op).
 * A transport error ends op.
 */
static void
px_act(struct eop *op, int status, json_t *body, const struct sbx_err *err,
    int need_running, const char *method, const char *suffix, cont_fn next,
    void (*none)(struct eop *))
{
	const char *cid;
	char path[300];

	if (eng_ended(op, err))
		return;
	if ((cid = px_ours_id(op, status, body)) == NULL || (need_running &&
	    !json_is_true(json_object_get(json_object_get(body, "State"), "Running")))) {
		none(op);
		return;
	}
	snprintf(path, sizeof(path), API "/containers/%s%s", cid, suffix);
	eng_call(op, method, path, NULL, next);
}

static void
drop_inspected(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	px_act(op, status, body, err, 0, "DELETE", "?force=1&v=0", drop_removed,
	    drop_volume);
}

void
eng_proxy_drop(struct eop *op, void (*then)(struct eop *))
{
	op->then = then;
	px_get(op, drop_inspected);
}

/* ---------- stop: the proxy with its sandbox (adr/0027) ---------- */

static void
stop_px_done(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "stop the egress proxy", 204, 304,
	    404))
		return;
	log_info("egress proxy stopped", "id", op->id, NULL);
	op->then(op);
}

static void
stop_px_then(struct eop *op)
{
	op->then(op);
}

static void
stop_px_inspected(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	px_act(op, status, body, err, 1, "POST", "/stop?t=5", stop_px_done, stop_px_then);
}

void
eng_proxy_stop(struct eop *op, void (*then)(struct eop *))
{
	op->then = then;
	px_get(op, stop_px_inspected);
}

/* ---------- reconcile: proxies and volumes nobody needs (adr/0027) ---------- */

int
eng_proxy_listed(json_t *c)
{
	json_t *labels = json_object_get(c, "Labels");
	const char *id = eng_label(labels, L_PROXY_OF), *role = eng_label(labels, L_ROLE);

	return eng_managed(labels) && id != NULL && sbx_id_valid(id) && role != NULL &&
	    strcmp(role, "proxy") == 0;
}

static void rec_px_next(struct eop *op);
static void rec_vol_next(struct eop *op);

static void
rec_px_done(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_reconcile *rc = rco(op);

	if (REPLY_BAD(op, NULL, err, status, body, "reconcile an egress proxy", 204,
	    304, 404))
		return;
	rc->pgone++;
	rc->pi++;
	rec_px_next(op);
}

static void
rec_px_next(struct eop *op)
{
	struct eop_reconcile *rc = rco(op);
	json_t *c, *has;
	const char *id, *cid;

	for (; rc->pi < json_array_size(rc->rpx); rc->pi++) {
		c = json_array_get(rc->rpx, rc->pi);
		id = eng_label(json_object_get(c, "Labels"), L_PROXY_OF);
		cid = eng_jstr(c, "Id");
		has = json_object_get(rc->rsbx, id);
		if (!eng_name_ok(cid, 128))
			continue;
		if (has == NULL) {
			/* Its sandbox is gone (a crash between the two, or a
			 * container removed by hand): so goes its proxy. */
			log_info("orphaned egress proxy removed", "id", id, NULL);
			eng_callf(op, "DELETE", NULL, rec_px_done,
			    API "/containers/%s?force=1&v=0", cid);
			return;
		}
		if (json_is_false(has) && strcmp(eng_jstr(c, "State"), "running") == 0) {
			log_info("egress proxy of a stopped sandbox stopped", "id", id, NULL);
			eng_callf(op, "POST", NULL, rec_px_done,
			    API "/containers/%s/stop?t=5", cid);
			return;
		}
	}
	rc->pi = 0;
	rec_vol_next(op);
}

static void
rec_vol_done(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_reconcile *rc = rco(op);

	(void)body;
	if (eng_ended(op, err))
		return;
	if (status >= 200 && status < 300)
		rc->pgone++;
	else if (status != 404)   /* in use: left for the next start */
		log_warn("egress proxy volume not removed", "volume",
		    eng_jstr(json_array_get(rc->rvols, rc->pi), "Name"), NULL);
	rc->pi++;
	rec_vol_next(op);
}

static void
rec_vol_next(struct eop *op)
{
	struct eop_reconcile *rc = rco(op);
	size_t pl = strlen(op->e->prefix);
	json_t *v, *labels;
	const char *id, *name;
	char want[160], gone[16];

	for (; rc->pi < json_array_size(rc->rvols); rc->pi++) {
		v = json_array_get(rc->rvols, rc->pi);
		labels = json_object_get(v, "Labels");
		id = eng_label(labels, L_PROXY_OF);
		name = eng_jstr(v, "Name");
		if (!eng_managed(labels) || id == NULL || !sbx_id_valid(id) ||
		    strncmp(name, op->e->prefix, pl) != 0)
			continue;
		snprintf(want, sizeof(want), "%s%s-egsock", op->e->prefix, id);
		if (strcmp(name, want) != 0 || json_object_get(rc->rsbx, id) != NULL)
			continue;
		log_info("orphaned egress proxy volume removed", "volume", name, NULL);
		eng_callf(op, "DELETE", NULL, rec_vol_done, API "/volumes/%s",
		    name);
		return;
	}
	snprintf(gone, sizeof(gone), "%u", rc->pgone);
	if (rc->pgone > 0)
		log_info("egress proxies reconciled", "changed", gone, NULL);
	rc->rthen(op);
}

static void
rec_vols_listed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status != 200 || (!json_is_array(json_object_get(body, "Volumes")) &&
	    !json_is_null(json_object_get(body, "Volumes")))) {
		eng_runtime_err(&e, status, body, "list volumes");
		eng_finish_err(op, &e);
		return;
	}
	rco(op)->rvols = json_is_array(json_object_get(body, "Volumes")) ?
	    json_incref(json_object_get(body, "Volumes")) : json_array();
	rco(op)->pi = 0;
	rec_px_next(op);
}

void
eng_proxy_reconcile(struct eop *op, void (*then)(struct eop *))
{
	char filt[256];

	rco(op)->rthen = then;
	eng_urlencode("{\"label\":[\"" L_PROXY_OF "\"]}", filt, sizeof(filt));
	eng_callf(op, "GET", NULL, rec_vols_listed, API "/volumes?filters=%s",
	    filt);
}

/* ---------- the decision log (egress_stats) ---------- */

static void
px_logs(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct egress_stats st;
	struct sbx_err e;
	json_t *out;
	char *text = NULL;

	(void)body;
	if (eng_ended(op, err))
		return;
	memset(&st, 0, sizeof(st));
	if (status == 404) {
		st.denials = json_array();
	} else if (status != 200) {
		eng_runtime_err(&e, status, NULL, "read the egress proxy's log");
		eng_finish_err(op, &e);
		return;
	} else if (egress_log_scan(evbuffer_pullup(op->resp, -1),
	    evbuffer_get_length(op->resp), &st) != 0) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	out = json_pack("{s:b, s:I, s:I, s:o}", "proxy", status == 200,
	    "allowed", (json_int_t)st.allowed, "denied", (json_int_t)st.denied,
	    "denials", st.denials);
	st.denials = NULL;
	if (out == NULL || (text = json_dumps(out, JSON_COMPACT)) == NULL) {
		json_decref(out);
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	json_decref(out);
	if (op->cb.json != NULL)
		op->cb.json(op->arg, NULL, text);
	free(text);
	eng_op_release(op);
}

struct sbx_op *
eng_egress_stats(struct sbx_driver *d, const char *id, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;

	if (eng_id_check(id, err) < 0)
		return NULL;
	if ((op = eng_op_new(e, &egress_kind, id, sizeof(struct eop), err)) == NULL)
		return NULL;
	op->cb.json = cb;
	op->arg = arg;
	op->raw = 1;
	/* stdout only: the decision lines (stderr holds start-up errors). */
	eng_callf(op, "GET", NULL, px_logs,
	    API "/containers/%s%s-proxy/logs?stdout=1&stderr=0&tail=500",
	    e->prefix, id);
	return &op->base;
}
