/*
 * driver_engine_pool.c - the engine driver's warm pool (adr/0067): members
 * of the default image made ahead, one at a time in the background (an
 * ensure each, labelled io.sbx.pool, named "<prefix>pool.<hex>"); the
 * claim an ensure of a new sandbox makes (the member's container renamed
 * to the sandbox's name); the sweep of unclaimed members an earlier broker
 * left, after the first reconcile; the pool's figures (broker_pool_metrics.h).
 * It calls down into ensure (a member's make), the runtime call layer and
 * the op lifecycle; the driver's entry and life (reconcile) call it,
 * ensure only through e->claim_hook.
 */
#include "broker_pool_metrics.h"
#include "driver_engine_int.h"

#define POOL_RETRY_MS_MAX 30000        /* back-off after failed makes */

struct member {
	TAILQ_ENTRY(member) link;
	struct eng_pool *p;
	char hex[33];
	char cid[80];
};

struct eng_pool {
	struct engine *e;
	int want;                     /* warm_pool */
	int started;                  /* the sweep began */
	int sweeping;
	int failures;                 /* makes failed in a row */
	TAILQ_HEAD(, member) ready;
	size_t nready;
	struct member *making;        /* one make at a time */
	struct event *timer;          /* the next make after a failure */
};

/* the sweep: unclaimed members and their volumes */
struct eop_sweep {
	struct eop op;
	json_t *list;                 /* containers, then volumes */
	size_t i;
	unsigned gone;                /* containers and volumes removed */
};

static void pool_fill(struct eng_pool *p);
static void sweep_fini(struct eop *op);
static void sweep_fail(struct eop *op, const struct sbx_err *err);
static void drop_fail(struct eop *op, const struct sbx_err *err);

static const struct eng_kind sweep_kind = {
	.name = "warm pool sweep",
	.fail = sweep_fail,
	.fini = sweep_fini,
};

static const struct eng_kind drop_kind = {
	.name = "warm pool member removal",
	.fail = drop_fail,
};

static struct eop_sweep *
swp(struct eop *op)
{
	return (struct eop_sweep *)op;
}

/* 1 when name ("/name" or bare) is one of this broker's pool names. */
static int
pool_name(const struct engine *e, const char *name)
{
	size_t pl = strlen(e->prefix);

	if (name == NULL)
		return 0;
	if (name[0] == '/')
		name++;
	return strncmp(name, e->prefix, pl) == 0 &&
	    strncmp(name + pl, POOL_TAG, strlen(POOL_TAG)) == 0;
}

/* ---------- removal of one member (container, then volume) ---------- */

static void
drop_fail(struct eop *op, const struct sbx_err *err)
{
	log_warn("a warm pool member was not removed; the next start removes "
	    "it", "container", op->cname, "error", err->message, NULL);
	eng_op_release(op);
}

static void
drop_agent_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "remove the agent's socket "
	    "volume", 204, 404))
		return;
	eng_op_release(op);
}

/* The work volume went: the agent's socket volume next (adr/0066; absent
 * when the direct channel is off). */
static void
drop_volume_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	char vol[160];

	if (REPLY_BAD(op, NULL, err, status, body, "remove the volume", 204,
	    404))
		return;
	eng_agent_volume_name(op->e->prefix, op->id, vol, sizeof(vol));
	eng_callf(op, "DELETE", NULL, drop_agent_removed, API "/volumes/%s",
	    vol);
}

static void
drop_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "remove the container", 204,
	    404))
		return;
	eng_callf(op, "DELETE", NULL, drop_volume_removed, API "/volumes/%s",
	    op->vname);
}

/* Removes member hex's container (by cid when known, else by name) and
 * volume in the background; a failure is logged (the next start's sweep
 * removes what is left). */
static void
pool_drop(struct engine *e, const char *hex, const char *cid)
{
	struct sbx_err err;
	struct eop *op;

	if ((op = eng_op_new(e, &drop_kind, NULL, sizeof(struct eop),
	    &err)) == NULL) {
		log_warn("a warm pool member was not removed", "error",
		    err.message, NULL);
		return;
	}
	snprintf(op->id, sizeof(op->id), POOL_TAG "%s", hex);
	snprintf(op->cname, sizeof(op->cname), "%s%s", e->prefix, op->id);
	sbx_engine_volume_name(e->prefix, op->id, op->vname, sizeof(op->vname));
	eng_callf(op, "DELETE", NULL, drop_removed,
	    API "/containers/%s?force=1&v=0", cid != NULL && cid[0] != '\0' ?
	    cid : op->cname);
}

/* ---------- making members ---------- */

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	pool_fill(arg);
}

static void
member_made(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct member *m = arg;
	struct eng_pool *p = m->p;
	struct timeval tv;
	int64_t ms;

	p->making = NULL;
	if (err != NULL) {
		broker_pool_made(0);
		p->failures++;
		log_warn("a warm pool member could not be made", "member", m->hex,
		    "error", err->message, NULL);
		pool_drop(p->e, m->hex, NULL);
		free(m);
		ms = p->failures > 5 ? POOL_RETRY_MS_MAX :
		    (int64_t)1000 << p->failures;
		if (ms > POOL_RETRY_MS_MAX)
			ms = POOL_RETRY_MS_MAX;
		tv.tv_sec = ms / 1000;
		tv.tv_usec = (ms % 1000) * 1000;
		if (p->timer != NULL)
			evtimer_add(p->timer, &tv);
		return;
	}
	broker_pool_made(1);
	p->failures = 0;
	snprintf(m->cid, sizeof(m->cid), "%s", st->container_id);
	TAILQ_INSERT_TAIL(&p->ready, m, link);
	p->nready++;
	broker_pool_ready((int64_t)p->nready);
	pool_fill(p);
}

/* Starts the next member's make when the pool is short of want and none
 * is under way (nor a back-off pending). */
static void
pool_fill(struct eng_pool *p)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char rnd[8];
	struct member *m;
	struct sbx_err err;
	size_t i;

	if (!p->started || p->sweeping || p->making != NULL ||
	    p->nready >= (size_t)p->want ||
	    (p->timer != NULL && evtimer_pending(p->timer, NULL)))
		return;
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return;
	m->p = p;
	randombytes_buf(rnd, sizeof(rnd));
	for (i = 0; i < sizeof(rnd); i++) {
		m->hex[2 * i] = hex[rnd[i] >> 4];
		m->hex[2 * i + 1] = hex[rnd[i] & 15];
	}
	p->making = m;
	if (eng_ensure_member(p->e, m->hex, member_made, m, &err) == NULL) {
		p->making = NULL;
		free(m);
		log_warn("a warm pool member could not be made", "error",
		    err.message, NULL);
	}
}

/* ---------- the claim (e->claim_hook) ---------- */

static void
claim_renamed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	const char *hex = en->claim_name + strlen(op->e->prefix) +
	    strlen(POOL_TAG);
	char why[16];

	(void)body;
	if (err == NULL && (status == 204 || status == 200)) {
		broker_pool_claimed();
		log_info("sandbox claimed from the warm pool", "id", op->id,
		    "member", en->claim_name, NULL);
		en->claim_then(op, 1);
		return;
	}
	/* Taken by a concurrent ensure of the id (409), the member gone (404),
	 * or no answer: the member goes, the sandbox is made cold. */
	snprintf(why, sizeof(why), "%d", status);
	log_warn("a warm pool member could not be claimed; it is removed",
	    "id", op->id, "member", en->claim_name, "status", why, "error",
	    err != NULL ? err->message : "", NULL);
	pool_drop(op->e, hex, en->claim_cid);
	broker_pool_missed(BROKER_POOL_MISS_EMPTY);
	en->claim_then(op, 0);
}

static void
claim_volume(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	struct eng_pool *p = op->e->pool;
	struct member *m;

	(void)body;
	if (eng_ended(op, err))
		return;
	if (status != 404) {
		/* The id's /work is there (its container was lost): the cold
		 * path mounts it again; a pool member would hide it. */
		broker_pool_missed(BROKER_POOL_MISS_VOLUME);
		en->claim_then(op, 0);
		return;
	}
	if ((m = TAILQ_FIRST(&p->ready)) == NULL) {
		broker_pool_missed(BROKER_POOL_MISS_EMPTY);
		en->claim_then(op, 0);
		return;
	}
	TAILQ_REMOVE(&p->ready, m, link);
	p->nready--;
	broker_pool_ready((int64_t)p->nready);
	snprintf(en->claim_cid, sizeof(en->claim_cid), "%s", m->cid);
	snprintf(en->claim_name, sizeof(en->claim_name), "%s" POOL_TAG "%s",
	    op->e->prefix, m->hex);
	free(m);
	pool_fill(p);
	eng_callf(op, "POST", NULL, claim_renamed,
	    API "/containers/%s/rename?name=%s", en->claim_cid, op->cname);
}

static int
pool_claim(struct eop *op, void (*then)(struct eop *, int))
{
	struct engine *e = op->e;
	struct eng_pool *p = e->pool;
	struct eop_ensure *en = ens(op);

	if (p == NULL || p->want == 0)
		return 0;
	/* Members are of the default image with the default limits and no
	 * network: anything else is made cold. */
	if (en->egress || en->allow != NULL ||
	    strcmp(en->image, e->default_image) != 0 || en->mem != e->mem.def ||
	    en->cpus != e->cpus.def || en->pids != e->pids.def) {
		broker_pool_missed(BROKER_POOL_MISS_SPEC);
		return 0;
	}
	if (TAILQ_EMPTY(&p->ready)) {
		broker_pool_missed(BROKER_POOL_MISS_EMPTY);
		return 0;
	}
	en->claim_then = then;
	eng_callf(op, "GET", NULL, claim_volume, API "/volumes/%s", op->vname);
	return 1;
}

/* ---------- the sweep after the first reconcile ---------- */

static void
sweep_end(struct eop *op)
{
	struct eng_pool *p = op->e->pool;
	char n[16];

	snprintf(n, sizeof(n), "%u", swp(op)->gone);
	if (swp(op)->gone > 0)
		log_info("unclaimed warm pool members of an earlier start removed",
		    "containers_and_volumes", n, NULL);
	p->sweeping = 0;
	eng_op_release(op);
	pool_fill(p);
}

static void
sweep_fail(struct eop *op, const struct sbx_err *err)
{
	log_warn("the warm pool's sweep failed; the next start sweeps again",
	    "error", err->message, NULL);
	sweep_end(op);
}

static void
sweep_fini(struct eop *op)
{
	json_decref(swp(op)->list);
}

/* GET API PATH filters={"label":["io.sbx.managed=true"]} answered in
 * cont: members, and the image probe and init containers
 * ("<member>.probe", ".init") a broker killed during a make left. */
static void
sweep_list(struct eop *op, const char *path, cont_fn cont)
{
	char filt[128];

	eng_urlencode("{\"label\":[\"" L_MANAGED "=true\"]}", filt, sizeof(filt));
	eng_callf(op, "GET", NULL, cont, API "%sfilters=%s", path, filt);
}

static void vol_next(struct eop *op);

static void
vol_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)body;
	if (eng_ended(op, err))
		return;
	/* 409: in use by a sandbox that claimed it: it stays. */
	if (status == 204)
		swp(op)->gone++;
	swp(op)->i++;
	vol_next(op);
}

static void
vol_next(struct eop *op)
{
	struct eop_sweep *s = swp(op);
	json_t *v;
	const char *name;

	for (; s->i < json_array_size(s->list); s->i++) {
		v = json_array_get(s->list, s->i);
		name = eng_jstr(v, "Name");
		if (!eng_managed(json_object_get(v, "Labels")) ||
		    !pool_name(op->e, name) || !eng_name_ok(name, 139))
			continue;
		eng_callf(op, "DELETE", NULL, vol_removed, API "/volumes/%s",
		    name);
		return;
	}
	sweep_end(op);
}

static void
vols_listed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status != 200 || !json_is_array(json_object_get(body, "Volumes"))) {
		eng_runtime_err(&e, status, body, "list volumes");
		eng_finish_err(op, &e);
		return;
	}
	json_decref(swp(op)->list);
	swp(op)->list = json_incref(json_object_get(body, "Volumes"));
	swp(op)->i = 0;
	vol_next(op);
}

static void ctr_next(struct eop *op);

static void
ctr_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "remove a warm pool member",
	    204, 404))
		return;
	if (status == 204)
		swp(op)->gone++;
	swp(op)->i++;
	ctr_next(op);
}

static void
ctr_next(struct eop *op)
{
	struct eop_sweep *s = swp(op);
	json_t *c;

	for (; s->i < json_array_size(s->list); s->i++) {
		c = json_array_get(s->list, s->i);
		/* Unclaimed only: a claimed member has a sandbox's name. A
		 * "<prefix>pool." name is only ever a member's or its make's
		 * (ids hold no '.'). */
		if (!eng_managed(json_object_get(c, "Labels")) ||
		    !pool_name(op->e, json_string_value(json_array_get(
		    json_object_get(c, "Names"), 0))) ||
		    !eng_name_ok(eng_jstr(c, "Id"), 79))
			continue;
		eng_callf(op, "DELETE", NULL, ctr_removed,
		    API "/containers/%s?force=1&v=0", eng_jstr(c, "Id"));
		return;
	}
	sweep_list(op, "/volumes?", vols_listed);
}

static void
ctrs_listed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (eng_ended(op, err))
		return;
	if (status != 200 || !json_is_array(body)) {
		eng_runtime_err(&e, status, body, "list containers");
		eng_finish_err(op, &e);
		return;
	}
	swp(op)->list = json_incref(body);
	swp(op)->i = 0;
	ctr_next(op);
}

void
eng_pool_reconciled(struct engine *e)
{
	struct eng_pool *p = e->pool;
	struct sbx_err err;
	struct eop *op;

	if (p == NULL || p->started)
		return;
	p->started = 1;
	if ((op = eng_op_new(e, &sweep_kind, NULL, sizeof(struct eop_sweep),
	    &err)) == NULL) {
		log_warn("the warm pool's sweep could not start", "error",
		    err.message, NULL);
		pool_fill(p);
		return;
	}
	p->sweeping = 1;
	sweep_list(op, "/containers/json?all=1&", ctrs_listed);
}

int
eng_pool_new(struct engine *e, int want, struct sbx_err *err)
{
	struct eng_pool *p;

	broker_pool_wanted(want);
	broker_pool_ready(0);
	/* The sweep runs also with no pool: a restart with warm_pool = 0
	 * drains what an earlier start left. */
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return sbx_err_oom(err);
	p->e = e;
	p->want = want > 0 ? want : 0;
	TAILQ_INIT(&p->ready);
	if ((p->timer = evtimer_new(e->base.base, retry_cb, p)) == NULL) {
		free(p);
		return sbx_err_oom(err);
	}
	e->pool = p;
	if (p->want > 0)
		e->claim_hook = pool_claim;
	return 0;
}

void
eng_pool_free(struct engine *e)
{
	struct eng_pool *p = e->pool;
	struct member *m;

	if (p == NULL)
		return;
	while ((m = TAILQ_FIRST(&p->ready)) != NULL) {
		TAILQ_REMOVE(&p->ready, m, link);
		free(m);
	}
	free(p->making);
	if (p->timer != NULL)
		event_free(p->timer);
	free(p);
	e->pool = NULL;
}
