/*
 * driver_engine_ensure.c - the engine driver's ensure: container, volume,
 * image probe, init container, egress network (adr/0009, adr/0014,
 * adr/0045), and its kind row.
 * It calls down into the egress proxy, the helper volume, the agent
 * records (warm ensure), the runtime call layer and the op lifecycle; the
 * driver's entry and life (eng_net_drop) call it.
 */
#include "driver_engine_direct.h"
#include "driver_engine_leftover.h"
#include "broker_egress.h"

static void ensure_inspect(struct eop *op);
static void init_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err);
static void init_create(struct eop *op);
static void ensure_init(struct eop *op);
static void ensure_volume(struct eop *op);
static void ensure_fini(struct eop *op);

/* ensure: answered with the sandbox's status */
static const struct eng_kind ensure_kind = {
	.name = "ensure",
	.fail = eng_fail_status,
	.fini = ensure_fini,
};

/* ---------- ensure ---------- */

static json_t *
labels_json(struct eop *op)
{
	/* A pool member's id is its name until a claim renames it (adr/0067). */
	if (ens(op)->pool)
		return json_pack("{s:s, s:s, s:s, s:s, s:s}", L_MANAGED, "true",
		    L_POOL, ens(op)->image, L_EGRESS, "0", L_IMAGE,
		    ens(op)->image, L_HELPER, op->e->helper_vol);
	return json_pack("{s:s, s:s, s:s, s:s, s:s}", L_MANAGED, "true", L_ID,
	    op->id, L_EGRESS, ens(op)->allow != NULL ? "proxy" : ens(op)->egress ?
	    "1" : "0", L_IMAGE, ens(op)->image,
	    L_HELPER, op->e->helper_vol);
}

/*
 * A tmpfs option string owned by the sandbox user: runc gives a tmpfs the
 * mode of an existing mount point (so an image's 0755 /tmp beats mode=),
 * hence the owner too. Docker takes uid=,gid=; Podman refuses them and
 * takes U (chown to the container's user), and copies the image's
 * directory into the tmpfs unless notmpcopyup. Measured: adr/0009.
 */
static void
tmpfs_opts(struct engine *e, char *buf, size_t sz, int64_t size,
    const char *mode)
{
	if (e->flavor == FLAVOR_PODMAN)
		snprintf(buf, sz, "rw,noexec,nosuid,nodev,size=%" PRId64
		    ",mode=%s,U,notmpcopyup", size, mode);
	else
		snprintf(buf, sz, "rw,noexec,nosuid,nodev,size=%" PRId64
		    ",mode=%s,uid=%u,gid=%u", size, mode, e->uid, e->gid);
}

/* /tmp (1777) and the helper's state directory (0700), both the user's. */
static json_t *
sandbox_tmpfs(struct engine *e)
{
	char tmp[160], run[160];

	tmpfs_opts(e, tmp, sizeof(tmp), e->tmp_bytes, "1777");
	tmpfs_opts(e, run, sizeof(run), e->run_bytes, "0700");
	return json_pack("{s:s, s:s}", "/tmp", tmp, SBX_HELPER_RUN_DIR, run);
}

/*
 * The sandbox's volume at /work and the helper volume read-only at /.sbx.
 * nocopy: Docker copies the image's /work into an empty volume, owner
 * included, at every create while it stays empty; the init container's
 * create has done that copy, so the sandbox container's must not undo
 * its chown (adr/0009).
 */
static json_t *
sandbox_mounts(struct eop *op, int nocopy)
{
	return json_pack("[{s:s, s:s, s:s, s:{s:b}}, {s:s, s:s, s:s, s:b}]",
	    "Type", "volume", "Source", op->vname, "Target", SBX_WORK_DIR,
	    "VolumeOptions", "NoCopy", nocopy,
	    "Type", "volume", "Source", op->e->helper_vol, "Target",
	    SBX_HELPER_DIR, "ReadOnly", 1);
}

static json_t *
create_body(struct eop *op)
{
	struct eop_ensure *en = ens(op);
	struct engine *e = op->e;
	json_t *hc = NULL, *body = NULL, *mounts = NULL, *tmpfs = NULL;

	mounts = sandbox_mounts(op, e->flavor != FLAVOR_PODMAN);
	tmpfs = sandbox_tmpfs(e);
	if (mounts == NULL || tmpfs == NULL)
		goto fail;
	/* Egress by allowlist (adr/0026): no network; the proxy's socket
	 * volume read-only, where the relay (this container's main process)
	 * finds sbx-proxy and the socket. */
	if ((en->allow != NULL && json_array_append_new(mounts, json_pack("{s:s, s:s, "
	    "s:s, s:b}", "Type", "volume", "Source", en->px_vol, "Target",
	    EGRESS_SOCK_DIR, "ReadOnly", 1)) != 0) || eng_direct_mount(op, mounts) != 0)
		goto fail;
	hc = json_pack("{s:b, s:[s], s:[s], s:b, s:o, s:I, s:I, s:I, s:I,"
	    " s:o, s:s, s:{s:s}}",
	    "Init", 1,
	    "CapDrop", "ALL",
	    "SecurityOpt", "no-new-privileges",
	    "ReadonlyRootfs", 1,
	    "Tmpfs", tmpfs,
	    "Memory", (json_int_t)en->mem,
	    "MemorySwap", (json_int_t)en->mem,
	    "NanoCpus", (json_int_t)en->cpus,
	    "PidsLimit", (json_int_t)en->pids,
	    "Mounts", mounts,
	    "NetworkMode", en->egress && en->allow == NULL ? op->nname : "none",
	    "RestartPolicy", "Name", "no");
	mounts = tmpfs = NULL;
	if (hc == NULL)
		goto fail;
	if (e->oci_runtime != NULL)
		json_object_set_new(hc, "Runtime", json_string(e->oci_runtime));
	/* The helper is the idle main process: the image needs no shell, and
	 * an image's own ENTRYPOINT does not run. */
	body = json_pack("{s:s, s:s, s:o, s:[s], s:[s], s:[s,s], s:s, s:i, s:b,"
	    " s:b, s:o}",
	    "Image", en->image,
	    "User", e->user,
	    "Labels", labels_json(op),
	    "Entrypoint", SBX_HELPER_PATH,
	    "Cmd", SBX_HELPER_MODE_IDLE,
	    "Env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	    "HOME=" SBX_WORK_DIR,
	    "WorkingDir", SBX_WORK_DIR,
	    "StopTimeout", e->stop_timeout_s,
	    "Tty", 0,
	    "OpenStdin", 0,
	    "HostConfig", hc);
	hc = NULL;
	if (body != NULL && en->allow != NULL && (egress_sandbox_env(json_object_get(body,
	    "Env")) != 0 || json_object_set_new(body, "Entrypoint", json_pack("[s]",
	    EGRESS_SOCK_DIR "/sbx-proxy")) != 0 || json_object_set_new(body, "Cmd",
	    json_pack("[s,s,s]", "relay", "--to", EGRESS_SOCK)) != 0)) {
		json_decref(body);
		return NULL;
	}
	return body;
fail:
	json_decref(mounts);
	json_decref(tmpfs);
	json_decref(hc);
	return NULL;
}

static void
ensure_final(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;

	if (REPLY_BAD(op, NULL, err, status, body, "inspect the new container",
	    200))
		return;
	if (eng_status_from_inspect(op, body, &st, &e) < 0) {
		eng_finish_err(op, &e);
		return;
	}
	if (st.state != SBX_STATE_RUNNING) {
		sbx_err_set(&e, SBX_E_RUNTIME, "container %s stopped right after "
		    "it was started", op->cname);
		eng_finish_err(op, &e);
		return;
	}
	/* A pool member stays untouched: no agent until it is claimed. */
	if (!ens(op)->pool)
		eng_agent_note_status(op->e, &st, op->e->helper_vol);
	eng_finish_status(op, NULL, &st);
}

/* The container this ensure made is gone again: its start's error. */
static void
ensure_unmade(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e = ens(op)->aux_err;

	(void)status;
	(void)body;
	if (eng_ended(op, err))
		return;
	eng_finish_err(op, &e);
}

static void
ensure_started(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	char path[256];

	if (err == NULL && en->retries < ENSURE_RETRIES &&
	    eng_leftover(status, body) == ENG_LEFT_OCI) {
		en->fresh = 0;
		eng_leftover_clear(op, op->cid, "runtime state left",
		    ensure_inspect);
		return;
	}
	if (err == NULL && en->fresh && status != 204 && status != 304) {
		/* A container this ensure made that cannot start is removed:
		 * a failed create leaves nothing listed (issue 24 item 9). */
		en->fresh = 0;
		eng_runtime_err(&en->aux_err, status, body, "start the container");
		eng_callf(op, "DELETE", NULL, ensure_unmade,
		    API "/containers/%s?force=1&v=0", op->cid);
		return;
	}
	if (REPLY_BAD(op, NULL, err, status, body, "start the container", 204,
	    304))
		return;
	eng_inspect_path(op, path, sizeof(path));
	eng_call(op, "GET", path, NULL, ensure_final);
}

static void
ensure_start(struct eop *op)
{

	/* An agent channel left in the table runs in the container's last
	 * life (stopped, or the one this ensure replaced): the next exec
	 * starts a new one (adr/0045). */
	eng_agent_retire(op->e, op->id);
	eng_callf(op, "POST", NULL, ensure_started, API "/containers/%s/start",
	    op->cid);
}

static void
ensure_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	ensure_inspect(arg);
}

/* Starts the ensure over from its inspect after a short, growing pause. */
static void
ensure_retry_later(struct eop *op)
{
	struct eop_ensure *en = ens(op);
	struct timeval tv = { 0, 0 };
	struct sbx_err e;

	en->retries++;
	tv.tv_usec = 20000L * en->retries;
	if (en->retry == NULL)
		en->retry = evtimer_new(op->e->base.base, ensure_retry_cb, op);
	if (en->retry == NULL || event_add(en->retry, &tv) < 0) {
		sbx_err_set(&e, SBX_E_INTERNAL, "cannot arm a timer");
		eng_finish_err(op, &e);
	}
}

static void
ensure_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	/* The name still held in Podman's storage at a second look (a
	 * broker serialises an id's operations: no ensure of ours races
	 * it): what a runtime crash cut into a create left. */
	if (ens(op)->retries > 0 && ens(op)->retries < ENSURE_RETRIES &&
	    eng_leftover(status, body) == ENG_LEFT_STORAGE) {
		eng_leftover_clear(op, op->cname, "storage only",
		    ensure_inspect);
		return;
	}
	if (eng_name_taken(status, body) && ens(op)->retries < ENSURE_RETRIES) {
		/* A concurrent ensure made it: look again once it is visible. */
		ensure_retry_later(op);
		return;
	}
	if (status == 404) {
		eng_image_missing(&e, ens(op)->image);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "create the container",
	    201))
		return;
	snprintf(op->cid, sizeof(op->cid), "%s", eng_jstr(body, "Id"));
	if (!eng_name_ok(op->cid, sizeof(op->cid) - 1)) {
		sbx_err_set(&e, SBX_E_RUNTIME, "runtime gave no container id");
		eng_finish_err(op, &e);
		return;
	}
	ens(op)->fresh = 1;
	ensure_start(op);
}

static void
ensure_create(struct eop *op)
{
	struct sbx_err e;
	json_t *body;

	/* The proxy first: it puts sbx-proxy into the volume the relay runs. */
	if (ens(op)->allow != NULL && !ens(op)->proxy_done) {
		eng_proxy_ensure(op, ensure_create);
		return;
	}
	if (eng_direct_volume(op, ensure_create))   /* adr/0066: its socket volume */
		return;
	if ((body = create_body(op)) == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	eng_callf(op, "POST", body, ensure_created,
	    API "/containers/create?name=%s", op->cname);
}

/* ---------- the egress network of one sandbox (ADR 0014) ----------
 *
 * Each sandbox granted egress has a bridge network of its own,
 * "<prefix><id>-egress", labelled io.sbx.managed=true and io.sbx.id=<id>,
 * whose host interface is "<egress_bridge_prefix><hex>" (at most 15 bytes,
 * IFNAMSIZ - 1): no other sandbox shares its layer 2, and the host firewall
 * (deploy/egress-firewall.sh) matches every sandbox bridge by that prefix.
 */

static void
bridge_name(const struct eop *op, char *out, size_t sz)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char h[8];
	size_t i, o;

	crypto_generichash(h, sizeof(h), (const unsigned char *)op->nname,
	    strlen(op->nname), NULL, 0);
	o = (size_t)snprintf(out, sz, "%s", op->e->bridge_prefix);
	for (i = 0; i < 2 * sizeof(h) && o < 15 && o + 1 < sz; i++)
		out[o++] = hex[(h[i / 2] >> (i % 2 ? 0 : 4)) & 15];
	out[o] = '\0';
}

/* 1 when a network inspect answer is this sandbox's network. */
static int
net_ours(const struct eop *op, json_t *net)
{
	json_t *labels = json_object_get(net, "Labels");
	const char *v = eng_label(labels, L_ID);

	return eng_managed(labels) && v != NULL && strcmp(v, op->id) == 0;
}

static void
net_dropped(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (REPLY_BAD(op, NULL, err, status, body, "remove the egress network",
	    200, 204, 404))
		return;
	op->then(op);
}

static void
net_drop_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	/* Absent, or a network of that name sbx did not make: nothing of ours. */
	if (status == 404 || (status == 200 && !net_ours(op, body))) {
		op->then(op);
		return;
	}
	if (status != 200 || !eng_name_ok(eng_jstr(body, "Id"), 128)) {
		eng_runtime_err(&e, status, body, "inspect the egress network");
		eng_finish_err(op, &e);
		return;
	}
	eng_callf(op, "DELETE", NULL, net_dropped, API "/networks/%s",
	    eng_jstr(body, "Id"));
}

/* Removes the sandbox's egress network if sbx made it (its container must be
 * gone: a network in use is an error), then continues in after. */
void
eng_net_drop(struct eop *op, void (*after)(struct eop *))
{

	op->then = after;
	eng_callf(op, "GET", NULL, net_drop_inspected, API "/networks/%s",
	    op->nname);
}

static void
network_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	/* Taken: created by a concurrent ensure of the same id. */
	if (status != 201 && status != 200 && !eng_name_taken(status, body)) {
		eng_runtime_err(&e, status, body, "create the egress network");
		eng_finish_err(op, &e);
		return;
	}
	ensure_create(op);
}

static void
network_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	json_t *req;
	char bridge[32];

	if (eng_ended(op, err))
		return;
	if (status == 200) {
		if (!net_ours(op, body)) {
			eng_not_ours(&e, "network", op->nname);
			eng_finish_err(op, &e);
			return;
		}
		ensure_create(op);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body,
	    "inspect the egress network", 404))
		return;
	bridge_name(op, bridge, sizeof(bridge));
	req = json_pack("{s:s, s:s, s:b, s:b, s:{s:s, s:s}, s:{s:s}}",
	    "Name", op->nname, "Driver", "bridge", "CheckDuplicate", 1,
	    "Internal", 0, "Labels", L_MANAGED, "true", L_ID, op->id,
	    "Options", "com.docker.network.bridge.name", bridge);
	if (req == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	eng_callf(op, "POST", req, network_created, API "/networks/create");
}

static void
ensure_network(struct eop *op)
{

	if (ens(op)->drop_proxy) {
		/* The old container had a proxy and this one has none: it goes
		 * before its network can. */
		ens(op)->drop_proxy = 0;
		eng_proxy_drop(op, ensure_network);
		return;
	}
	if (!ens(op)->egress) {
		/* Egress revoked: the old container is gone, so is its network. */
		if (ens(op)->drop_net)
			eng_net_drop(op, ensure_create);
		else
			ensure_create(op);
		return;
	}
	eng_callf(op, "GET", NULL, network_inspected, API "/networks/%s",
	    op->nname);
}

/* The volume existed and its create answer showed no labels: inspect's. */
static void
volume_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status != 200 || !eng_managed(json_object_get(body, "Labels"))) {
		eng_not_ours(&e, "volume", op->vname);
		eng_finish_err(op, &e);
		return;
	}
	ensure_init(op);
}

static void
volume_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (eng_ended(op, err))
		return;
	if (eng_name_taken(status, body) && ens(op)->retries < ENSURE_RETRIES) {
		ensure_retry_later(op);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "create the volume", 201,
	    200))
		return;
	/* An existing volume is returned as is: it must be ours. Docker
	 * 20.10 answers a create of an existing volume after a daemon
	 * restart without its labels ("Labels":null): ask inspect. */
	if (!eng_managed(json_object_get(body, "Labels"))) {

		eng_callf(op, "GET", NULL, volume_inspected, API "/volumes/%s",
		    op->vname);
		return;
	}
	ensure_init(op);
}

/* The helper volume is ready: the sandbox's volume next. */
static void
ensure_volume(struct eop *op)
{
	struct engine *en = op->e;
	struct sbx_err e;
	json_t *req;
	char o[64];

	req = json_pack("{s:s, s:o}", "Name", op->vname, "Labels",
	    ens(op)->pool ? json_pack("{s:s, s:s}", L_MANAGED, "true", L_POOL,
	    ens(op)->image) : json_pack("{s:s, s:s}", L_MANAGED, "true", L_ID,
	    op->id));
	/* Podman's local driver sets the new volume's owner itself, also
	 * when the image's /work is root's (adr/0009); Docker's refuses the
	 * option without a device: there an init container does it. */
	if (req != NULL && en->flavor == FLAVOR_PODMAN) {
		snprintf(o, sizeof(o), "uid=%u,gid=%u", en->uid, en->gid);
		json_object_set_new(req, "DriverOpts", json_pack("{s:s}", "o", o));
	}
	if (req == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	eng_call(op, "POST", API "/volumes/create", req, volume_created);
}

static void
ensure_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (REPLY_BAD(op, NULL, err, status, body, "remove the old container",
	    204, 404))
		return;
	op->cid[0] = '\0';
	if (ens(op)->old_helper[0] != '\0' &&
	    strcmp(ens(op)->old_helper, op->e->helper_vol) != 0)
		eng_helper_gc(op->e);
	eng_ensure_helper(op, ensure_volume);
}

/* The image passed: the old container goes (the volume stays). */
static void
ensure_replace(struct eop *op)
{

	eng_callf(op, "DELETE", NULL, ensure_removed,
	    API "/containers/%s?force=1&v=0", op->cid);
}

/* The image passed and no container exists: a new volume, or one left
 * without its container: its root is made the user's (never what is in
 * it). */
static void
ensure_new(struct eop *op)
{

	ens(op)->need_init = 1;
	eng_ensure_helper(op, ensure_volume);
}

/* 1 when a container inspect answer shows it attached to the sandbox's own
 * egress network; 0 for one made before ADR 0014 on the shared one, which
 * ensure replaces (the volume stays). */
static int
on_own_network(const struct eop *op, json_t *c)
{
	json_t *nets = json_object_get(json_object_get(c, "NetworkSettings"),
	    "Networks");

	return json_object_get(nets, op->nname) != NULL;
}

/* The claim hook's answer (adr/0067): a renamed member is inspected as an
 * existing sandbox is (started if it stopped); else op creates one cold. */
static void
ensure_claimed(struct eop *op, int claimed)
{
	if (claimed)
		ensure_inspect(op);
	else
		eng_image_probe(op, ensure_new);
}

static void
ensure_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	struct sbx_status st;
	const char *hl, *mode;
	int r, was_proxy;

	if (err == NULL && eng_leftover_ghost(op, status, body, ensure_inspect))
		return;
	if ((r = eng_inspect_found(op, status, body, err, &st, &hl)) < 0)
		return;
	if (r == 0) {
		/* A new sandbox: a warm pool member if one fits (adr/0067). */
		if (!en->pool && op->e->claim_hook != NULL &&
		    op->e->claim_hook(op, ensure_claimed))
			return;
		eng_image_probe(op, ensure_new);
		return;
	}
	eng_work_volume(op, body);     /* a claimed member's (adr/0067) */
	snprintf(en->old_helper, sizeof(en->old_helper), "%s",
	    hl != NULL ? hl : "");
	/* Egress revoked: its network goes once the container has. */
	en->drop_net = st.egress && !en->egress;
	mode = eng_label(json_object_get(json_object_get(body, "Config"), "Labels"),
	    L_EGRESS);
	was_proxy = mode != NULL && strcmp(mode, "proxy") == 0;
	en->drop_proxy = was_proxy && en->allow == NULL;
	if (st.egress != en->egress || was_proxy != (en->allow != NULL) ||
	    strcmp(st.image, en->image) != 0 ||
	    strcmp(en->old_helper, op->e->helper_vol) != 0 ||
	    (en->egress && en->allow == NULL && !on_own_network(op, body))) {
		/* Replace the container; the volume (the sandbox's data) stays.
		 * A helper other than ours (rebuilt, or the bind mount before
		 * adr/0009) is replaced too, and so is an egress sandbox not on
		 * its own network (before adr/0014). Without our helper label
		 * the volume was made before /work got its owner: prepare it. */
		en->need_init = hl == NULL;
		eng_image_probe(op, ensure_replace);
		return;
	}
	/* The same mode: a changed policy replaces the proxy only, the
	 * sandbox and its processes stay (adr/0026). */
	if (en->allow != NULL && !en->proxy_done) {
		eng_proxy_ensure(op, ensure_inspect);
		return;
	}
	if (st.state == SBX_STATE_RUNNING) {
		eng_agent_note_status(op->e, &st, en->old_helper);
		eng_finish_status(op, NULL, &st);
		return;
	}
	ensure_start(op);
}

/* A warm ensure answered from the agent's live channel (adr/0025), from
 * the loop; if the channel went meanwhile, the runtime is asked. */
static void
ensure_warm_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;
	struct sbx_status st;

	(void)fd;
	(void)what;
	if (eng_agent_warm(op->e, op->id, ens(op)->image, ens(op)->egress, &st))
		eng_finish_status(op, NULL, &st);
	else
		ensure_inspect(op);
}

static void
ensure_inspect(struct eop *op)
{
	char path[256];

	eng_inspect_path(op, path, sizeof(path));
	eng_call(op, "GET", path, NULL, ensure_inspected);
}

/* ---------- /work's owner: the init container (Docker) ---------- */

/*
 * On Docker a new volume takes the owner of the image's /work (root when
 * the image has none): before the sandbox container exists, a short-lived
 * container of the same image (so the volume's copy-up is the image's, as
 * before) runs `sbx-helper initwork UID:GID` as root with CAP_CHOWN and
 * CAP_FOWNER only, no network, read-only root, and is removed. The sandbox
 * container itself never holds a capability (adr/0009).
 */

static void
init_remove(struct eop *op)
{

	eng_callf(op, "DELETE", NULL, init_removed,
	    API "/containers/%s?force=1&v=0", ens(op)->aux_cid);
}

/* Ends the init step with e (NULL: success) once its container is gone. */
static void
init_fail(struct eop *op, const struct sbx_err *e)
{
	ens(op)->aux_err = *e;
	if (ens(op)->aux_cid[0] == '\0') {
		eng_finish_err(op, e);
		return;
	}
	init_remove(op);
}

static void
init_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	struct sbx_err e;

	if (eng_aux_removed(op, status, body, err, "remove the init container"))
		return;
	if (en->aux_code != 0) {
		sbx_err_set(&e, SBX_E_RUNTIME, "making /work of %s belong to the "
		    "sandbox user failed (sbx-helper initwork exit status %" PRId64
		    ")", op->cname, en->aux_code);
		eng_finish_err(op, &e);
		return;
	}
	en->need_init = 0;
	ensure_network(op);
}

static void
init_waited(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		init_fail(op, err);
		return;
	}
	if (status != 200 || !json_is_integer(json_object_get(body,
	    "StatusCode"))) {
		eng_runtime_err(&e, status, body, "wait for the init container");
		init_fail(op, &e);
		return;
	}
	ens(op)->aux_code = json_integer_value(json_object_get(body, "StatusCode"));
	init_remove(op);
}

static void
init_started(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (REPLY_BAD(op, init_fail, err, status, body,
	    "start the init container", 204, 304))
		return;
	eng_callf(op, "POST", NULL, init_waited, API "/containers/%s/wait",
	    ens(op)->aux_cid);
}

static void
init_stale_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (eng_ended(op, err))
		return;
	init_create(op);
}

static void
init_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (eng_aux_created(op, status, body, err, ".init", init_stale_removed,
	    "init container"))
		return;
	eng_callf(op, "POST", NULL, init_started, API "/containers/%s/start",
	    ens(op)->aux_cid);
}

static void
init_create(struct eop *op)
{
	struct engine *e = op->e;
	struct sbx_err err;
	json_t *body;
	char owner[32];

	snprintf(owner, sizeof(owner), "%u:%u", e->uid, e->gid);
	body = json_pack("{s:s, s:s, s:[s], s:[s,s], s:s, s:{s:s, s:s},"
	    " s:b, s:{s:s, s:[s], s:[s,s], s:[s], s:b, s:o, s:I, s:I}}",
	    "Image", ens(op)->image,
	    "User", "0:0",
	    "Entrypoint", SBX_HELPER_PATH,
	    "Cmd", SBX_HELPER_MODE_INITWORK, owner,
	    "WorkingDir", "/",
	    "Labels", L_MANAGED, "true", L_ROLE, "init",
	    "NetworkDisabled", 1,
	    "HostConfig",
	    "NetworkMode", "none",
	    "CapDrop", "ALL",
	    "CapAdd", "CHOWN", "FOWNER",
	    "SecurityOpt", "no-new-privileges",
	    "ReadonlyRootfs", 1,
	    "Mounts", sandbox_mounts(op, 0),
	    "Memory", (json_int_t)(64 << 20),
	    "PidsLimit", (json_int_t)16);
	if (body == NULL) {
		sbx_err_oom(&err);
		eng_finish_err(op, &err);
		return;
	}
	if (e->oci_runtime != NULL)
		json_object_set_new(json_object_get(body, "HostConfig"), "Runtime",
		    json_string(e->oci_runtime));
	eng_callf(op, "POST", body, init_created,
	    API "/containers/create?name=%s.init", op->cname);
}

static void
ensure_init(struct eop *op)
{
	struct eop_ensure *en = ens(op);
	if (!en->need_init || op->e->flavor == FLAVOR_PODMAN) {
		ensure_network(op);
		return;
	}
	sbx_err_clear(&en->aux_err);
	en->aux_tries = 0;
	init_create(op);
}


static int
pick_limit(const char *what, int64_t asked, const struct sbx_engine_limit *l,
    int64_t *out, struct sbx_err *err)
{
	if (asked < 0)
		return sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "%s must not be "
		    "negative", what);
	if (asked > l->ceiling)
		return sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "%s of %" PRId64
		    " is above the configured ceiling of %" PRId64, what, asked,
		    l->ceiling);
	*out = asked > 0 ? asked : l->def;
	return 0;
}

static int
image_allowed(struct engine *e, const char *image)
{
	char **p;

	for (p = e->images; *p != NULL; p++)
		if (strcmp(*p, image) == 0)
			return 1;
	return 0;
}

static void
ensure_fini(struct eop *op)
{
	struct eop_ensure *en = ens(op);

	json_decref(en->allow);
	if (en->waiting)
		TAILQ_REMOVE(&op->e->hwait, en, wlink);
	if (en->retry != NULL)
		event_free(en->retry);
}

struct sbx_op *
eng_ensure(struct sbx_driver *d, const char *id, const struct sbx_spec *spec,
    sbx_status_cb cb, void *arg, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct sbx_spec none;
	struct sbx_status wst;
	const char *image;
	int64_t mem, cpus, pids;
	struct eop *op;
	json_t *allow = NULL;

	if (eng_id_check(id, err) < 0)
		return NULL;
	if (spec == NULL) {
		memset(&none, 0, sizeof(none));
		spec = &none;
	}
	image = spec->image != NULL ? spec->image : e->default_image;
	if (!image_allowed(e, image)) {
		sbx_err_set(err, SBX_E_IMAGE_NOT_ALLOWED,
		    "image is not in the broker's allowlist");
		return NULL;
	}
	if (pick_limit("memory_bytes", spec->memory_bytes, &e->mem, &mem, err) < 0 ||
	    pick_limit("nano_cpus", spec->nano_cpus, &e->cpus, &cpus, err) < 0 ||
	    pick_limit("pids", spec->pids, &e->pids, &pids, err) < 0)
		return NULL;
	if (spec->egress && spec->egress_allow != NULL &&
	    strcmp(spec->egress_allow, "*") != 0) {
		/* adr/0026: the entries, one per line, checked by the caller. */
		allow = egress_allow_split(spec->egress_allow);
		if (allow == NULL || json_array_size(allow) == 0) {
			json_decref(allow);
			sbx_err_set(err, SBX_E_BAD_REQUEST, "egress allowlist is empty");
			return NULL;
		}
	}
	if ((op = eng_op_new(e, &ensure_kind, id, sizeof(struct eop_ensure),
	    err)) == NULL) {
		json_decref(allow);
		return NULL;
	}
	op->cb.status = cb;
	op->arg = arg;
	snprintf(ens(op)->image, sizeof(ens(op)->image), "%s", image);
	ens(op)->egress = spec->egress != 0;
	ens(op)->allow = allow;
	if (allow != NULL)
		snprintf(ens(op)->px_vol, sizeof(ens(op)->px_vol), "%s%s-egsock",
		    e->prefix, id);
	ens(op)->mem = mem;
	ens(op)->cpus = cpus;
	ens(op)->pids = pids;
	/* Not for egress sandboxes: the agent's view knows egress on/off, not
	 * full vs allowlist nor the policy, which only the inspect path (and
	 * the proxy's label) checks (adr/0026). */
	if (!ens(op)->egress && eng_agent_warm(e, id, image, ens(op)->egress, &wst) &&
	    (ens(op)->retry = event_new(e->base.base, -1, 0, ensure_warm_cb, op)) != NULL) {
		event_active(ens(op)->retry, EV_TIMEOUT, 0);
		return &op->base;
	}
	ensure_inspect(op);
	return &op->base;
}

struct eop *
eng_ensure_member(struct engine *e, const char *hex, sbx_status_cb cb,
    void *arg, struct sbx_err *err)
{
	struct eop *op;

	if ((op = eng_op_new(e, &ensure_kind, NULL, sizeof(struct eop_ensure),
	    err)) == NULL)
		return NULL;
	op->cb.status = cb;
	op->arg = arg;
	snprintf(op->id, sizeof(op->id), POOL_TAG "%s", hex);
	snprintf(op->cname, sizeof(op->cname), "%s%s", e->prefix, op->id);
	sbx_engine_volume_name(e->prefix, op->id, op->vname, sizeof(op->vname));
	ens(op)->pool = 1;
	snprintf(ens(op)->image, sizeof(ens(op)->image), "%s", e->default_image);
	ens(op)->mem = e->mem.def;
	ens(op)->cpus = e->cpus.def;
	ens(op)->pids = e->pids.def;
	ensure_inspect(op);
	return op;
}
