/*
 * driver_engine_snap.c - the engine driver's snapshots of /work (adr/0068):
 * snapshot_create, snapshot_list, snapshot_delete, snapshot_copy. A
 * snapshot is a volume "<prefix><id>.snap.<name>" labelled io.sbx.managed,
 * io.sbx.snapshot (its name), io.sbx.snapshot-of (the sandbox), io.sbx.owner,
 * io.sbx.size, io.sbx.created, io.sbx.image; copies run in a short-lived
 * container of the sandbox's image that mounts the source read-only, while
 * a running source is paused (Engine API pause/unpause). Touches only
 * volumes and containers of those names; calls the runtime-call and op
 * lifecycle layers (driver_engine_call.c, driver_engine_op.c).
 */
#include "driver_engine_int.h"
#include "driver_engine_snap.h"

#define L_SNAPSHOT "io.sbx.snapshot"
#define L_SNAPSHOT_OF "io.sbx.snapshot-of"
#define L_OWNER "io.sbx.owner"
#define L_SIZE "io.sbx.size"
#define L_CREATED "io.sbx.created"
#define SNAP_WAITS 30          /* request_timeout waits for one copy */
#define SNAP_AUX_MEM (256 << 20)

/* What a copy runs (sh -c): reflink where cp and the filesystem can,
 * else a plain cp -a (busybox has no --reflink). */
#define COPY_SCRIPT "cp -a --reflink=auto /from/. /to/ 2>/dev/null || " \
	"cp -a /from/. /to/"
/* du's first field: KiB in use (coreutils and busybox). */
#define DU_SCRIPT "du -sk /from"

enum snap_mode { SM_CREATE, SM_COPY, SM_DELETE, SM_LIST };

struct eop_snap {
	struct eop op;
	enum snap_mode mode;
	char name[40];
	char owner[72];
	uint64_t max_bytes;
	char from[64];                /* copy: the source sandbox */
	int from_snap;                /* copy: from a snapshot, not live /work */
	char src_vol[140];            /* as op->vname */
	char dst_vol[140];
	char image[256];
	char paused_cid[80];          /* the container we paused ("" none) */
	char aux_cid[80];
	const char *aux_suffix;       /* ".snapdu", ".snapcp" */
	void (*aux_then)(struct eop *, int64_t code);
	int aux_stale;
	int waits;
	int made_dst;                 /* dst_vol was created by this op */
	int cleaning;
	int cancelled;                /* the caller left: end without a word */
	uint64_t size;
	int64_t created;
	struct sbx_err ferr;          /* the failure being cleaned up after */
};

static inline struct eop_snap *
sno(struct eop *op)
{
	return (struct eop_snap *)op;
}

static void snap_fail(struct eop *op, const struct sbx_err *err);
static void snap_cancel(struct eop *op);
static void cleanup_next(struct eop *op);
static void aux_create(struct eop *op);

/* A cancel never leaves the sandbox paused: the op runs on to its end
 * (the copy kept or cleaned up, the sandbox unpaused), telling no one. */
static const struct eng_kind snap_json_kind = {
	.name = "snapshot",
	.fail = snap_fail,
	.cancel = snap_cancel,
};
static const struct eng_kind snap_done_kind = {
	.name = "snapshot",
	.fail = snap_fail,
	.cancel = snap_cancel,
};

static void
snap_cancel(struct eop *op)
{
	sno(op)->cancelled = 1;
	memset(&op->cb, 0, sizeof(op->cb));
	if (op->http == NULL && (op->defer == NULL ||
	    !event_pending(op->defer, EV_TIMEOUT, NULL)))
		eng_op_release(op);
}

static void
snap_vol(const struct engine *e, const char *id, const char *name, char *buf,
    size_t sz)
{
	snprintf(buf, sz, "%s%s.snap.%s", e->prefix, id, name);
}

/* The caller hears the end: json (create, list) or done (delete, copy). */
static void
snap_end(struct eop *op, const struct sbx_err *err, const char *text)
{
	if (sno(op)->cancelled) {
		eng_op_release(op);
		return;
	}
	if (op->kind == &snap_json_kind) {
		if (op->cb.json != NULL)
			op->cb.json(op->arg, err, err != NULL ? NULL : text);
		eng_op_release(op);
		return;
	}
	eng_finish_done(op, err);
}

/* Any failure: the aux container, a volume this op made, a pause go back
 * first (cleanup_next), then the caller hears the first error. */
static void
snap_fail(struct eop *op, const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);

	if (s->cleaning) {
		/* A cleanup step failed: say so, keep the first error. */
		log_warn("snapshot cleanup step failed", "id", op->id, "error",
		    err->message, NULL);
		s->aux_cid[0] = '\0';
		s->made_dst = 0;
		s->paused_cid[0] = '\0';
		snap_end(op, &s->ferr, NULL);
		return;
	}
	s->cleaning = 1;
	s->ferr = *err;
	cleanup_next(op);
}

static void
cleanup_done(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (err != NULL) {
		snap_fail(op, err);
		return;
	}
	cleanup_next(op);
}

static void
cleanup_next(struct eop *op)
{
	struct eop_snap *s = sno(op);
	char id[80];

	if (s->aux_cid[0] != '\0') {
		snprintf(id, sizeof(id), "%s", s->aux_cid);
		s->aux_cid[0] = '\0';
		eng_callf(op, "DELETE", NULL, cleanup_done,
		    API "/containers/%s?force=1&v=0", id);
		return;
	}
	if (s->made_dst) {
		s->made_dst = 0;
		eng_callf(op, "DELETE", NULL, cleanup_done, API "/volumes/%s",
		    s->dst_vol);
		return;
	}
	if (s->paused_cid[0] != '\0') {
		snprintf(id, sizeof(id), "%s", s->paused_cid);
		s->paused_cid[0] = '\0';
		eng_callf(op, "POST", NULL, cleanup_done,
		    API "/containers/%s/unpause", id);
		return;
	}
	snap_end(op, &s->ferr, NULL);
}

static void
fail_msg(struct eop *op, const char *code, const char *msg)
{
	struct sbx_err e;

	sbx_err_set(&e, code, "%s", msg);
	eng_finish_err(op, &e);
}

/* ---------- the short-lived copy container ---------- */

static void
aux_removed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (err != NULL) {
		snap_fail(op, err);
		return;
	}
	sno(op)->aux_then(op, 0);
}

static void
aux_logs(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);
	char buf[80];
	size_t n;
	char *end;
	unsigned long long kib;

	(void)body;
	if (eng_ended(op, err))
		return;
	n = evbuffer_copyout(op->resp, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	kib = strtoull(buf, &end, 10);
	if (status != 200 || end == buf) {
		fail_msg(op, SBX_E_RUNTIME, "measuring /work for the snapshot "
		    "failed: the image needs du (coreutils or busybox)");
		return;
	}
	s->size = (uint64_t)kib * 1024;
	snprintf(buf, sizeof(buf), "%s", s->aux_cid);
	s->aux_cid[0] = '\0';
	eng_callf(op, "DELETE", NULL, aux_removed,
	    API "/containers/%s?force=1&v=0", buf);
}

static void aux_waited(struct eop *op, int status, json_t *body,
    const struct sbx_err *err);

static void
aux_wait(struct eop *op)
{
	eng_callf(op, "POST", NULL, aux_waited, API "/containers/%s/wait",
	    sno(op)->aux_cid);
}

static void
aux_waited(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);
	json_t *code;
	char m[160];

	/* A long copy outlives one request_timeout: wait again. */
	if (err != NULL && strcmp(err->code, SBX_E_TIMEOUT) == 0 &&
	    ++s->waits < SNAP_WAITS) {
		aux_wait(op);
		return;
	}
	if (eng_ended(op, err))
		return;
	code = json_object_get(body, "StatusCode");
	if (status != 200 || !json_is_integer(code)) {
		struct sbx_err e;

		eng_runtime_err(&e, status, body, "wait for the snapshot copy");
		eng_finish_err(op, &e);
		return;
	}
	if (json_integer_value(code) != 0) {
		snprintf(m, sizeof(m), "copying /work failed (exit status %"
		    PRId64 "); the image needs sh and cp",
		    (int64_t)json_integer_value(code));
		fail_msg(op, SBX_E_RUNTIME, m);
		return;
	}
	if (strcmp(s->aux_suffix, ".snapdu") == 0) {
		op->raw = 1;
		eng_callf(op, "GET", NULL, aux_logs,
		    API "/containers/%s/logs?stdout=1&stderr=0", s->aux_cid);
		return;
	}
	snprintf(m, sizeof(m), "%s", s->aux_cid);
	s->aux_cid[0] = '\0';
	eng_callf(op, "DELETE", NULL, aux_removed,
	    API "/containers/%s?force=1&v=0", m);
}

static void
aux_started(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "start the snapshot copy",
	    204, 304))
		return;
	sno(op)->waits = 0;
	aux_wait(op);
}

static void
aux_stale_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (eng_ended(op, err))
		return;
	aux_create(op);
}

static void
aux_created(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);
	const char *id;

	if (eng_ended(op, err))
		return;
	if (eng_name_taken(status, body) && !s->aux_stale) {
		/* Left by a broker that died mid-copy: remove it, once. */
		s->aux_stale = 1;
		eng_callf(op, "DELETE", NULL, aux_stale_removed,
		    API "/containers/%s%s?force=1&v=0", op->cname, s->aux_suffix);
		return;
	}
	if (status == 404) {
		struct sbx_err e;

		eng_image_missing(&e, s->image);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "create the snapshot copy",
	    201))
		return;
	id = eng_jstr(body, "Id");
	if (!eng_name_ok(id, 79)) {
		fail_msg(op, SBX_E_RUNTIME, "the runtime gave the snapshot copy "
		    "no usable id");
		return;
	}
	snprintf(s->aux_cid, sizeof(s->aux_cid), "%s", id);
	eng_callf(op, "POST", NULL, aux_started, API "/containers/%s/start",
	    s->aux_cid);
}

/* The copy container: the sandbox's image as root with only the file
 * capabilities cp -a needs, no network, read-only root, the source
 * read-only at /from and (copy) the destination at /to. */
static void
aux_create(struct eop *op)
{
	struct eop_snap *s = sno(op);
	int du = strcmp(s->aux_suffix, ".snapdu") == 0;
	json_t *mounts, *body;
	struct sbx_err e;

	mounts = json_pack("[{s:s, s:s, s:s, s:b}]", "Type", "volume",
	    "Source", s->src_vol, "Target", "/from", "ReadOnly", 1);
	if (mounts != NULL && !du && json_array_append_new(mounts,
	    json_pack("{s:s, s:s, s:s}", "Type", "volume", "Source", s->dst_vol,
	    "Target", "/to")) != 0) {
		json_decref(mounts);
		mounts = NULL;
	}
	body = mounts == NULL ? NULL : json_pack("{s:s, s:s, s:[s], s:[s,s],"
	    " s:s, s:b, s:{s:s, s:s}, s:b, s:{s:s, s:[s], s:[s,s,s,s,s],"
	    " s:[s], s:b, s:o, s:I, s:I}}",
	    "Image", s->image,
	    "User", "0:0",
	    "Entrypoint", "/bin/sh",
	    "Cmd", "-c", du ? DU_SCRIPT : COPY_SCRIPT,
	    "WorkingDir", "/",
	    "Tty", du,
	    "Labels", L_MANAGED, "true", L_ROLE, "snapshot-copy",
	    "NetworkDisabled", 1,
	    "HostConfig",
	    "NetworkMode", "none",
	    "CapDrop", "ALL",
	    "CapAdd", "CHOWN", "FOWNER", "DAC_OVERRIDE", "DAC_READ_SEARCH",
	    "FSETID",
	    "SecurityOpt", "no-new-privileges",
	    "ReadonlyRootfs", 1,
	    "Mounts", mounts,
	    "Memory", (json_int_t)SNAP_AUX_MEM,
	    "PidsLimit", (json_int_t)32);
	if (body == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	if (op->e->oci_runtime != NULL)
		json_object_set_new(json_object_get(body, "HostConfig"), "Runtime",
		    json_string(op->e->oci_runtime));
	eng_callf(op, "POST", body, aux_created,
	    API "/containers/create?name=%s%s", op->cname, s->aux_suffix);
}

static void
aux_run(struct eop *op, const char *suffix, void (*then)(struct eop *, int64_t))
{
	sno(op)->aux_suffix = suffix;
	sno(op)->aux_then = then;
	sno(op)->aux_stale = 0;
	aux_create(op);
}

/* ---------- the end of a copy: unpause, answer ---------- */

static json_t *
snap_json(const char *name, const char *id, const char *owner, uint64_t size,
    int64_t created)
{
	return json_pack("{s:s, s:s, s:o, s:I, s:I}", "name", name,
	    "sandbox_id", id, "owner", owner[0] != '\0' ? json_string(owner) :
	    json_null(), "size_bytes", (json_int_t)size, "created_at",
	    (json_int_t)created);
}

static void
finish_ok(struct eop *op)
{
	struct eop_snap *s = sno(op);
	struct sbx_err e;
	json_t *o;
	char *text;

	if (op->kind != &snap_json_kind) {
		eng_finish_done(op, NULL);
		return;
	}
	o = snap_json(s->name, op->id, s->owner, s->size, s->created);
	text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (text == NULL) {
		sbx_err_oom(&e);
		snap_end(op, &e, NULL);
		return;
	}
	snap_end(op, NULL, text);
	free(text);
}

static void
unpaused(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	/* 404: the sandbox went meanwhile; nothing to give back. */
	if (REPLY_BAD(op, NULL, err, status, body, "unpause the sandbox", 204,
	    304, 404))
		return;
	finish_ok(op);
}

static void
copied(struct eop *op, int64_t code)
{
	struct eop_snap *s = sno(op);
	char cid[80];

	(void)code;
	s->made_dst = 0;       /* kept from now on */
	if (s->paused_cid[0] == '\0') {
		finish_ok(op);
		return;
	}
	snprintf(cid, sizeof(cid), "%s", s->paused_cid);
	s->paused_cid[0] = '\0';
	eng_callf(op, "POST", NULL, unpaused, API "/containers/%s/unpause", cid);
}

static void
dst_created(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (eng_ended(op, err))
		return;
	if (REPLY_BAD(op, NULL, NULL, status, body, "create the volume", 201))
		return;
	sno(op)->made_dst = 1;
	aux_run(op, ".snapcp", copied);
}

/* The destination volume: a snapshot (create) or the new sandbox's /work
 * (copy), labelled as ensure would label it. */
static void
dst_create(struct eop *op)
{
	struct eop_snap *s = sno(op);
	json_t *labels, *req;
	struct sbx_err e;
	char sz[24], ts[24];

	if (s->mode == SM_CREATE) {
		snprintf(sz, sizeof(sz), "%" PRIu64, s->size);
		snprintf(ts, sizeof(ts), "%" PRId64, s->created);
		labels = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}",
		    L_MANAGED, "true", L_SNAPSHOT, s->name, L_SNAPSHOT_OF,
		    op->id, L_OWNER, s->owner, L_SIZE, sz, L_CREATED, ts,
		    L_IMAGE, s->image);
	} else {
		labels = json_pack("{s:s, s:s}", L_MANAGED, "true", L_ID, op->id);
	}
	req = labels == NULL ? NULL : json_pack("{s:s, s:o}", "Name",
	    s->dst_vol, "Labels", labels);
	if (req == NULL) {
		sbx_err_oom(&e);
		eng_finish_err(op, &e);
		return;
	}
	eng_call(op, "POST", API "/volumes/create", req, dst_created);
}

static void
measured(struct eop *op, int64_t code)
{
	struct eop_snap *s = sno(op);
	char m[200];

	(void)code;
	if (s->max_bytes != 0 && s->size > s->max_bytes) {
		snprintf(m, sizeof(m), "/work holds %" PRIu64 " bytes; the "
		    "owner's snapshots may take %" PRIu64 " more "
		    "(snapshot_bytes_per_player)", s->size, s->max_bytes);
		fail_msg(op, SBX_E_QUOTA, m);
		return;
	}
	dst_create(op);
}

static void
paused(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);

	/* 409: paused already (a broker that died mid-copy left it so). */
	if (REPLY_BAD(op, NULL, err, status, body, "pause the sandbox", 204,
	    409))
		return;
	s->created = sbx_wall_ms();
	if (s->mode == SM_CREATE)
		aux_run(op, ".snapdu", measured);
	else
		dst_create(op);
}

/* The source sandbox inspected (create: op's own; copy: from): absent is
 * not_found, a running one is paused for the copy. */
static void
src_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);
	json_t *state, *labels;
	const char *img, *cid;
	struct sbx_err e;
	char keep[sizeof(op->vname)];

	if (eng_ended(op, err))
		return;
	if (status == 404 || eng_gone(status, body)) {
		sbx_err_set(&e, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX,
		    s->mode == SM_COPY ? s->from : op->id);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the container",
	    200))
		return;
	labels = json_object_get(json_object_get(body, "Config"), "Labels");
	if (!eng_managed(labels)) {
		eng_not_ours(&e, "container", s->mode == SM_COPY ? s->from :
		    op->cname);
		eng_finish_err(op, &e);
		return;
	}
	img = eng_label(labels, L_IMAGE);
	if (img == NULL || img[0] == '\0')
		img = eng_jstr(json_object_get(body, "Config"), "Image");
	snprintf(s->image, sizeof(s->image), "%s", img);
	/* The volume the container mounts at /work: a claimed pool member
	 * keeps its own name (adr/0067); else the id's (s->src_vol). */
	snprintf(keep, sizeof(keep), "%s", op->vname);
	snprintf(op->vname, sizeof(op->vname), "%s", s->src_vol);
	eng_work_volume(op, body);
	snprintf(s->src_vol, sizeof(s->src_vol), "%s", op->vname);
	snprintf(op->vname, sizeof(op->vname), "%s", keep);
	cid = eng_jstr(body, "Id");
	state = json_object_get(body, "State");
	if (json_is_true(json_object_get(state, "Running")) &&
	    eng_name_ok(cid, 79)) {
		snprintf(s->paused_cid, sizeof(s->paused_cid), "%s", cid);
		/* Paused already: a broker died mid-copy; unpaused at the end. */
		if (json_is_true(json_object_get(state, "Paused"))) {
			paused(op, 204, NULL, NULL);
			return;
		}
		eng_callf(op, "POST", NULL, paused, API "/containers/%s/pause",
		    cid);
		return;
	}
	paused(op, 204, NULL, NULL);
}

/* copy from a snapshot: the source volume must be that snapshot. */
static void
src_vol_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);
	json_t *labels;
	const char *img;
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	labels = json_object_get(body, "Labels");
	if (status == 404 || (status == 200 && (!eng_managed(labels) ||
	    eng_label(labels, L_SNAPSHOT) == NULL ||
	    strcmp(eng_label(labels, L_SNAPSHOT), s->name) != 0))) {
		sbx_err_set(&e, SBX_E_NOT_FOUND, "sandbox %s has no snapshot "
		    "named %s", s->from, s->name);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the snapshot", 200))
		return;
	img = eng_label(labels, L_IMAGE);
	snprintf(s->image, sizeof(s->image), "%s", img != NULL ? img : "");
	if (s->image[0] == '\0')
		snprintf(s->image, sizeof(s->image), "%s", op->e->default_image);
	s->created = sbx_wall_ms();
	dst_create(op);
}

/* The source: a snapshot volume, or a sandbox's /work. */
static void
src_start(struct eop *op)
{
	struct eop_snap *s = sno(op);

	if (s->mode == SM_COPY && s->from_snap) {
		eng_callf(op, "GET", NULL, src_vol_inspected, API "/volumes/%s",
		    s->src_vol);
		return;
	}
	eng_callf(op, "GET", NULL, src_inspected, API "/containers/%s%s/json",
	    op->e->prefix, s->mode == SM_COPY ? s->from : op->id);
}

/* The destination must not exist yet. */
static void
dst_checked(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status == 200) {
		if (s->mode == SM_CREATE)
			sbx_err_set(&e, SBX_E_CONFLICT, "sandbox %s has a "
			    "snapshot named %s already", op->id, s->name);
		else
			sbx_err_set(&e, SBX_E_CONFLICT, "sandbox %s has a /work "
			    "already: a copy makes a new sandbox only", op->id);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the volume", 404))
		return;
	src_start(op);
}

static void
dst_container_checked(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status == 200) {
		sbx_err_set(&e, SBX_E_CONFLICT, "sandbox %s exists already: a "
		    "copy makes a new sandbox only", op->id);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the container",
	    404))
		return;
	eng_callf(op, "GET", NULL, dst_checked, API "/volumes/%s",
	    sno(op)->dst_vol);
}

static struct eop_snap *
snap_new(struct sbx_driver *d, int json, const char *id, const char *name,
    enum snap_mode mode, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;

	if (eng_id_check(id, err) < 0)
		return NULL;
	if (name != NULL && !sbx_snapshot_name_valid(name)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "%s", SBX_MSG_BAD_SNAPSHOT);
		return NULL;
	}
	if ((op = eng_op_new(e, json ? &snap_json_kind : &snap_done_kind, id,
	    sizeof(struct eop_snap), err)) == NULL)
		return NULL;
	sno(op)->mode = mode;
	if (name != NULL)
		snprintf(sno(op)->name, sizeof(sno(op)->name), "%s", name);
	return sno(op);
}

struct sbx_op *
eng_snapshot_create(struct sbx_driver *d, const char *id,
    const struct sbx_snapshot_req *req, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	struct eop_snap *s;

	if (req == NULL || (req->owner != NULL && req->owner[0] != '\0' &&
	    !eng_name_ok(req->owner, 64)))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "a snapshot's owner "
		    "must be 1 to 64 of [A-Za-z0-9_.-]"), NULL;
	if ((s = snap_new(d, 1, id, req->name, SM_CREATE, err)) == NULL)
		return NULL;
	snprintf(s->owner, sizeof(s->owner), "%s", req->owner != NULL ?
	    req->owner : "");
	s->max_bytes = req->max_bytes;
	s->op.cb.json = cb;
	s->op.arg = arg;
	snprintf(s->src_vol, sizeof(s->src_vol), "%s", s->op.vname);
	snap_vol(s->op.e, id, req->name, s->dst_vol, sizeof(s->dst_vol));
	eng_callf(&s->op, "GET", NULL, dst_checked, API "/volumes/%s",
	    s->dst_vol);
	return &s->op.base;
}

struct sbx_op *
eng_snapshot_copy(struct sbx_driver *d, const char *id, const char *from,
    const char *name, sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct eop_snap *s;

	if (eng_id_check(from, err) < 0)
		return NULL;
	if (name == NULL && strcmp(id, from) == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "a copy's source and "
		    "destination must differ"), NULL;
	if ((s = snap_new(d, 0, id, name, SM_COPY, err)) == NULL)
		return NULL;
	snprintf(s->from, sizeof(s->from), "%s", from);
	s->from_snap = name != NULL;
	s->op.cb.done = cb;
	s->op.arg = arg;
	if (name != NULL)
		snap_vol(s->op.e, from, name, s->src_vol, sizeof(s->src_vol));
	else
		sbx_engine_volume_name(s->op.e->prefix, from, s->src_vol,
		    sizeof(s->src_vol));
	snprintf(s->dst_vol, sizeof(s->dst_vol), "%s", s->op.vname);
	eng_callf(&s->op, "GET", NULL, dst_container_checked,
	    API "/containers/%s/json", s->op.cname);
	return &s->op.base;
}

/* ---------- delete ---------- */

static void
deleted(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status == 409) {
		sbx_err_set(&e, SBX_E_CONFLICT, "snapshot %s of sandbox %s is in "
		    "use by a copy; try again when it ends", sno(op)->name,
		    op->id);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "remove the snapshot", 204,
	    200))
		return;
	eng_finish_done(op, NULL);
}

static void
delete_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);
	json_t *labels = json_object_get(body, "Labels");
	const char *of;
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status == 404) {
		sbx_err_set(&e, SBX_E_NOT_FOUND, "sandbox %s has no snapshot "
		    "named %s", op->id, s->name);
		eng_finish_err(op, &e);
		return;
	}
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the snapshot", 200))
		return;
	of = eng_label(labels, L_SNAPSHOT_OF);
	if (!eng_managed(labels) || of == NULL || strcmp(of, op->id) != 0) {
		eng_not_ours(&e, "volume", s->dst_vol);
		eng_finish_err(op, &e);
		return;
	}
	eng_callf(op, "DELETE", NULL, deleted, API "/volumes/%s", s->dst_vol);
}

struct sbx_op *
eng_snapshot_delete(struct sbx_driver *d, const char *id, const char *name,
    sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct eop_snap *s;

	if (name == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s",
		    SBX_MSG_BAD_SNAPSHOT), NULL;
	if ((s = snap_new(d, 0, id, name, SM_DELETE, err)) == NULL)
		return NULL;
	s->op.cb.done = cb;
	s->op.arg = arg;
	snap_vol(s->op.e, id, name, s->dst_vol, sizeof(s->dst_vol));
	eng_callf(&s->op, "GET", NULL, delete_inspected, API "/volumes/%s",
	    s->dst_vol);
	return &s->op.base;
}

/* ---------- list ---------- */

static int
by_id_name(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	int c = strcmp(eng_jstr(x, "sandbox_id"), eng_jstr(y, "sandbox_id"));

	return c != 0 ? c : strcmp(eng_jstr(x, "name"), eng_jstr(y, "name"));
}

static void
listed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_snap *s = sno(op);
	json_t *vols, *v, *labels, *out, **items = NULL;
	const char *name, *of, *own;
	char want[200], *text = NULL;
	struct sbx_err e;
	size_t i, n = 0;

	if (eng_ended(op, err))
		return;
	vols = json_object_get(body, "Volumes");
	if (status != 200 || (!json_is_array(vols) && !json_is_null(vols))) {
		eng_runtime_err(&e, status, body, "list volumes");
		eng_finish_err(op, &e);
		return;
	}
	if ((out = json_array()) == NULL ||
	    (items = calloc(json_array_size(vols) + 1, sizeof(*items))) == NULL)
		goto oom;
	json_array_foreach(vols, i, v) {
		labels = json_object_get(v, "Labels");
		name = eng_label(labels, L_SNAPSHOT);
		of = eng_label(labels, L_SNAPSHOT_OF);
		own = eng_label(labels, L_OWNER);
		if (!eng_managed(labels) || name == NULL || of == NULL ||
		    !sbx_snapshot_name_valid(name) || !sbx_id_valid(of))
			continue;
		snap_vol(op->e, of, name, want, sizeof(want));
		if (strcmp(eng_jstr(v, "Name"), want) != 0 ||
		    (op->id[0] != '\0' && strcmp(of, op->id) != 0) ||
		    (s->owner[0] != '\0' && (own == NULL ||
		    strcmp(own, s->owner) != 0)))
			continue;
		items[n] = snap_json(name, of, own != NULL ? own : "",
		    strtoull(eng_label(labels, L_SIZE) ? eng_label(labels, L_SIZE) :
		    "0", NULL, 10), strtoll(eng_label(labels, L_CREATED) ?
		    eng_label(labels, L_CREATED) : "0", NULL, 10));
		if (items[n] == NULL)
			goto oom;
		n++;
	}
	qsort(items, n, sizeof(*items), by_id_name);
	for (i = 0; i < n; i++) {
		json_array_append_new(out, items[i]);
		items[i] = NULL;
	}
	free(items);
	items = NULL;
	v = json_pack("{s:o}", "snapshots", out);
	out = NULL;
	if (v == NULL || (text = json_dumps(v, JSON_COMPACT)) == NULL) {
		json_decref(v);
		goto oom;
	}
	json_decref(v);
	snap_end(op, NULL, text);
	free(text);
	return;
oom:
	for (i = 0; items != NULL && i < n; i++)
		json_decref(items[i]);
	free(items);
	json_decref(out);
	sbx_err_oom(&e);
	eng_finish_err(op, &e);
}

struct sbx_op *
eng_snapshot_list(struct sbx_driver *d, const char *id, const char *owner,
    sbx_json_cb cb, void *arg, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char filt[256];

	if (id != NULL && eng_id_check(id, err) < 0)
		return NULL;
	if (owner != NULL && owner[0] != '\0' && !eng_name_ok(owner, 64))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "a snapshot's owner "
		    "must be 1 to 64 of [A-Za-z0-9_.-]"), NULL;
	if ((op = eng_op_new(e, &snap_json_kind, NULL,
	    sizeof(struct eop_snap), err)) == NULL)
		return NULL;
	sno(op)->mode = SM_LIST;
	if (id != NULL)
		snprintf(op->id, sizeof(op->id), "%s", id);
	if (owner != NULL)
		snprintf(sno(op)->owner, sizeof(sno(op)->owner), "%s", owner);
	op->cb.json = cb;
	op->arg = arg;
	eng_urlencode("{\"label\":[\"" L_SNAPSHOT_OF "\"]}", filt, sizeof(filt));
	eng_callf(op, "GET", NULL, listed, API "/volumes?filters=%s", filt);
	return &op->base;
}

