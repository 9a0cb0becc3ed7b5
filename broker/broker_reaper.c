/* broker_reaper.c - the idle reaper and start-up recovery: the broker's own work on sandboxes (SPEC §7). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "broker_metrics.h"
#include "broker_reaper.h"
#include "broker_state.h"
#include "driver_engine.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_time.h"

static void
audit(struct broker_server *s, int64_t ts, const char *op, const char *id,
    const char *outcome, int64_t ms, const char *reason)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	if (broker_state_audit(broker_server_state(s), ts, op, id, outcome, ms,
	    reason, &err) == -1)
		log_error("audit write failed", "error", err.message, NULL);
}

static void
volume_name(struct broker_server *s, const char *id, char *buf, size_t sz)
{
	sbx_engine_volume_name(broker_server_config(s)->name_prefix, id, buf,
	    sz);
}

/* ------------------------------------------------------------------ */
/* Recovery                                                            */

/* Per-sandbox callback argument of the recover op. */
struct kill_slot {
	struct broker_recovery *r;
	size_t i;
};

struct broker_recovery {
	struct broker_server *s;
	void (*done)(void *, const struct sbx_err *);
	void *arg;
	struct sbx_op *list_op;
	struct sbx_op *gc_op;         /* the driver's reconcile */
	struct sbx_op **kill_ops;     /* one per running sandbox */
	char (*kill_ids)[64];
	struct kill_slot *slots;
	size_t nkill, pending;
	unsigned adopted, recorded, absent, killed, failed;
	struct sbx_err first_err;
	struct event *finish_ev;
	int64_t t0;
};

static void
recovery_finish(evutil_socket_t fd, short what, void *arg)
{
	struct broker_recovery *r = arg;
	char a[16], rec[16], ab[16], k[16], f[16], ms[32];

	(void)fd;
	(void)what;
	snprintf(a, sizeof(a), "%u", r->adopted);
	snprintf(rec, sizeof(rec), "%u", r->recorded);
	snprintf(ab, sizeof(ab), "%u", r->absent);
	snprintf(k, sizeof(k), "%u", r->killed);
	snprintf(f, sizeof(f), "%u", r->failed);
	snprintf(ms, sizeof(ms), "%" PRId64, sbx_mono_ms() - r->t0);
	if (sbx_err_is_set(&r->first_err)) {
		log_warn("reconciliation with the runtime incomplete",
		    "adopted", a, "recorded", rec, "absent", ab, "cleaned", k,
		    "failed", f, "error", r->first_err.message, "ms", ms, NULL);
		r->done(r->arg, &r->first_err);
		return;
	}
	log_info("reconciled with the runtime", "adopted", a, "recorded", rec,
	    "absent", ab, "cleaned", k, "failed", f, "ms", ms, NULL);
	r->done(r->arg, NULL);
}

static void
recovery_step_done(struct broker_recovery *r)
{
	if (--r->pending == 0)
		event_active(r->finish_ev, 0, 0);
}

static void
slot_killed(void *arg, const struct sbx_err *err)
{
	struct kill_slot *ks = arg;
	struct broker_recovery *r = ks->r;
	const char *id = r->kill_ids[ks->i];

	r->kill_ops[ks->i] = NULL;
	if (err != NULL) {
		r->failed++;
		/* Only a runtime we cannot reach is worth a retry; a sandbox
		 * without a working helper (made by hand, or by an older sbx)
		 * must not keep the broker from serving the others. */
		if (!sbx_err_is_set(&r->first_err) &&
		    strcmp(err->code, SBX_E_RUNTIME_UNAVAILABLE) == 0)
			r->first_err = *err;
		log_warn("cannot kill execs left by an earlier broker", "id", id,
		    "code", err->code, "error", err->message, NULL);
		audit(r->s, sbx_wall_ms(), "recover", id, err->code, 0, "killed");
	} else {
		r->killed++;
		broker_metrics_recovered(broker_server_metrics(r->s), "killed");
		log_info("execs left by an earlier broker killed", "id", id,
		    NULL);
		audit(r->s, sbx_wall_ms(), "recover", id, "ok", 0, "killed");
	}
	recovery_step_done(r);
}

static void
gc_done(void *arg, const struct sbx_err *err)
{
	struct broker_recovery *r = arg;

	r->gc_op = NULL;
	if (err != NULL) {
		/* As for the kills: only an unreachable runtime is retried. */
		if (!sbx_err_is_set(&r->first_err) &&
		    strcmp(err->code, SBX_E_RUNTIME_UNAVAILABLE) == 0)
			r->first_err = *err;
		log_warn("cannot remove runtime objects no sandbox needs",
		    "code", err->code, "error", err->message, NULL);
	}
	recovery_step_done(r);
}

static int
status_by_id(const void *a, const void *b)
{
	return strcmp(((const struct sbx_status *)a)->id,
	    ((const struct sbx_status *)b)->id);
}

static void
listed(void *arg, const struct sbx_err *err, const struct sbx_status *sts,
    size_t n)
{
	struct broker_recovery *r = arg;
	struct broker_server *s = r->s;
	struct broker_state *state = broker_server_state(s);
	struct sbx_driver *d = broker_server_driver(s);
	struct broker_row *rows = NULL, row;
	struct sbx_status *sorted = NULL, key;
	struct kill_slot *ks;
	struct sbx_err e;
	char vol[192];
	size_t i, nrows = 0;
	int found;
	int64_t now = sbx_wall_ms();

	r->list_op = NULL;
	r->pending = 1;           /* this function's own step */
	sbx_err_clear(&e);
	if (err != NULL) {
		r->first_err = *err;
		goto out;
	}
	if ((n > 0 && (sorted = malloc(n * sizeof(*sorted))) == NULL) ||
	    (n > 0 && (r->kill_ops = calloc(n, sizeof(*r->kill_ops))) == NULL) ||
	    (n > 0 && (r->kill_ids = calloc(n, sizeof(*r->kill_ids))) == NULL) ||
	    (n > 0 && (r->slots = calloc(n, sizeof(*r->slots))) == NULL)) {
		sbx_err_oom(&r->first_err);
		goto out;
	}
	if (n > 0) {
		memcpy(sorted, sts, n * sizeof(*sorted));
		qsort(sorted, n, sizeof(*sorted), status_by_id);
	}
	/* Adopt what we know, record what we lost track of. */
	for (i = 0; i < n; i++) {
		if ((found = broker_state_get(state, sorted[i].id, &row,
		    &e)) == -1 || (volume_name(s, sorted[i].id, vol,
		    sizeof(vol)), broker_state_adopt(state, &sorted[i], vol, now,
		    &e)) == -1) {
			r->first_err = e;
			goto out;
		}
		if (found) {
			r->adopted++;
			broker_metrics_recovered(broker_server_metrics(s),
			    "adopted");
			log_info("sandbox adopted", "id", sorted[i].id, "state",
			    sbx_state_name(sorted[i].state), NULL);
			audit(s, now, "recover", sorted[i].id, "ok", 0,
			    "adopted");
		} else {
			r->recorded++;
			broker_metrics_recovered(broker_server_metrics(s),
			    "recorded");
			log_warn("labelled sandbox the state did not know; recorded",
			    "id", sorted[i].id, "state",
			    sbx_state_name(sorted[i].state), NULL);
			audit(s, now, "recover", sorted[i].id, "ok", 0,
			    "recorded");
		}
	}
	/* Rows whose container went away while we were not looking. */
	if (broker_state_list(state, &rows, &nrows, &e) == -1) {
		r->first_err = e;
		goto out;
	}
	for (i = 0; i < nrows; i++) {
		if (strcmp(rows[i].state, "absent") == 0)
			continue;
		snprintf(key.id, sizeof(key.id), "%s", rows[i].id);
		if (n > 0 && bsearch(&key, sorted, n, sizeof(*sorted),
		    status_by_id) != NULL)
			continue;
		if (broker_state_absent(state, rows[i].id, &e) == -1) {
			r->first_err = e;
			goto out;
		}
		r->absent++;
		broker_metrics_recovered(broker_server_metrics(s), "absent");
		log_warn("sandbox in the state has no container; marked absent",
		    "id", rows[i].id, NULL);
		audit(s, now, "recover", rows[i].id, "ok", 0, "absent");
	}
	/* Execs of the broker that died with them running: kill them. */
	for (i = 0; i < n && sbx_call_supports(d, SBX_CALL_RECOVER); i++) {
		if (sorted[i].state != SBX_STATE_RUNNING)
			continue;
		ks = &r->slots[r->nkill];
		ks->r = r;
		ks->i = r->nkill;
		snprintf(r->kill_ids[r->nkill], sizeof(r->kill_ids[0]), "%s",
		    sorted[i].id);
		r->pending++;
		r->kill_ops[r->nkill] = sbx_call_recover(d, sorted[i].id,
		    slot_killed, ks, &e);
		if (r->kill_ops[r->nkill] == NULL) {
			r->pending--;
			r->failed++;
			log_warn("cannot kill execs left by an earlier broker",
			    "id", sorted[i].id, "error", e.message, NULL);
		}
		r->nkill++;
	}
	/* Egress networks of sandboxes that no longer have egress (ADR 0014). */
	if (sbx_call_supports(d, SBX_CALL_RECONCILE)) {
		r->pending++;
		if ((r->gc_op = sbx_call_reconcile(d, gc_done, r, &e)) == NULL) {
			r->pending--;
			log_warn("cannot remove runtime objects no sandbox needs",
			    "error", e.message, NULL);
		}
	}
out:
	free(rows);
	free(sorted);
	recovery_step_done(r);
}

struct broker_recovery *
broker_recover(struct broker_server *s,
    void (*done)(void *, const struct sbx_err *), void *arg,
    struct sbx_err *err)
{
	struct broker_recovery *r;
	struct sbx_driver *d = broker_server_driver(s);

	if ((r = calloc(1, sizeof(*r))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	r->s = s;
	r->done = done;
	r->arg = arg;
	r->t0 = sbx_mono_ms();
	sbx_err_clear(&r->first_err);
	if ((r->finish_ev = event_new(broker_server_base(s), -1, 0,
	    recovery_finish, r)) == NULL) {
		free(r);
		sbx_err_oom(err);
		return NULL;
	}
	if ((r->list_op = sbx_call_list_sandboxes(d, listed, r, err)) == NULL) {
		broker_recovery_free(r);
		return NULL;
	}
	return r;
}

void
broker_recovery_free(struct broker_recovery *r)
{
	size_t i;

	if (r == NULL)
		return;
	sbx_op_cancel(r->list_op);
	sbx_op_cancel(r->gc_op);
	for (i = 0; i < r->nkill; i++)
		if (r->kill_ops[i] != NULL)
			sbx_op_cancel(r->kill_ops[i]);
	free(r->kill_ops);
	free(r->kill_ids);
	free(r->slots);
	if (r->finish_ev != NULL)
		event_free(r->finish_ev);
	free(r);
}

/* ------------------------------------------------------------------ */
/* The reaper                                                          */

struct broker_reaper {
	struct broker_server *s;
	struct event *timer;
};

/* One stop or destroy of one sandbox, queued as a job. */
struct reap {
	struct broker_reaper *rp;
	int destroy;
	int64_t t0;
	int64_t ts;
	struct broker_job *job;
};

static void
reap_free(void *arg)
{
	free(arg);
}

static void
reap_end(struct reap *rp, const char *outcome, const struct sbx_err *err)
{
	struct broker_server *s = rp->rp->s;
	const char *id = broker_job_id(rp->job);
	const char *op = rp->destroy ? "reap_destroy" : "reap";
	const char *reason = rp->destroy ? "destroy_after" : "idle";
	int64_t ms = sbx_mono_ms() - rp->t0;

	audit(s, rp->ts, op, id, outcome, ms, reason);
	if (err != NULL)
		log_warn(rp->destroy ? "reaper could not destroy a sandbox" :
		    "reaper could not stop a sandbox", "id", id, "code",
		    err->code, "error", err->message, NULL);
	broker_job_done(rp->job, outcome);   /* frees rp */
}

static void
reap_stopped(void *arg, const struct sbx_err *err)
{
	struct reap *rp = arg;
	struct broker_server *s = rp->rp->s;
	const char *id = broker_job_id(rp->job);
	struct sbx_err serr;
	char idle[32];

	broker_job_set_op(rp->job, NULL);
	if (err != NULL) {
		reap_end(rp, err->code, err);
		return;
	}
	if (broker_state_stopped(broker_server_state(s), id, "idle", sbx_wall_ms(),
	    &serr) == -1)
		log_error("state write failed", "id", id, "error", serr.message,
		    NULL);
	broker_metrics_reaped(broker_server_metrics(s), 0);
	snprintf(idle, sizeof(idle), "%lld",
	    broker_server_config(s)->idle_timeout);
	log_info("reaped: idle sandbox stopped", "id", id, "reason", "idle",
	    "idle_timeout_ms", idle, NULL);
	reap_end(rp, "ok", NULL);
}

static void
reap_destroyed(void *arg, const struct sbx_err *err)
{
	struct reap *rp = arg;
	struct broker_server *s = rp->rp->s;
	const char *id = broker_job_id(rp->job);
	struct sbx_err serr;

	broker_job_set_op(rp->job, NULL);
	if (err != NULL) {
		reap_end(rp, err->code, err);
		return;
	}
	if (broker_state_delete(broker_server_state(s), id, &serr) == -1)
		log_error("state write failed", "id", id, "error", serr.message,
		    NULL);
	broker_metrics_reaped(broker_server_metrics(s), 1);
	broker_metrics_egress_forget(broker_server_metrics(s), id);
	log_info("reaped: stopped sandbox destroyed", "id", id, "reason",
	    "destroy_after", NULL);
	reap_end(rp, "ok", NULL);
}

/* The sandbox of rp's job is running and unused for idle_timeout: no
 * request but quiet sessions (broker_reaper.h), none of which moved bytes
 * within it either. */
static int
reap_idle(struct reap *rp, const char *id)
{
	struct broker_server *s = rp->rp->s;
	struct broker_row row;
	struct sbx_err e;
	int64_t quiet, last;

	if (broker_job_others(rp->job, &quiet) > 0 ||
	    broker_state_get(broker_server_state(s), id, &row, &e) != 1 ||
	    strcmp(row.state, "running") != 0)
		return 0;
	last = row.last_used_at_ms > quiet ? row.last_used_at_ms : quiet;
	return sbx_wall_ms() - last >= broker_server_config(s)->idle_timeout;
}

/* The runtime's view, just before stopping: it may have stopped itself. */
static void
reap_status(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct reap *rp = arg;
	struct broker_server *s = rp->rp->s;
	struct sbx_driver *d = broker_server_driver(s);
	const char *id = broker_job_id(rp->job);
	struct sbx_err e;
	struct sbx_op *op;

	broker_job_set_op(rp->job, NULL);
	sbx_err_clear(&e);
	if (err != NULL) {
		reap_end(rp, err->code, err);
		return;
	}
	if (st->state == SBX_STATE_STOPPED) {
		broker_state_stopped(broker_server_state(s), id,
		    st->stop_reason[0] ? st->stop_reason : "exited", sbx_wall_ms(),
		    &e);
		log_info("sandbox had stopped by itself", "id", id, "reason",
		    st->stop_reason, NULL);
		broker_job_done(rp->job, "ok");
		return;
	}
	if (st->state == SBX_STATE_ABSENT) {
		broker_state_absent(broker_server_state(s), id, &e);
		log_warn("sandbox has no container any more; marked absent",
		    "id", id, NULL);
		broker_job_done(rp->job, "ok");
		return;
	}
	/* A session may have moved bytes, or got a viewer, meanwhile. */
	if (!reap_idle(rp, id)) {
		broker_job_done(rp->job, "ok");
		return;
	}
	broker_job_end_quiet(rp->job, SBX_E_NOT_RUNNING, "The sandbox was "
	    "stopped by the idle reaper: this session had no viewer and moved "
	    "no byte for idle_timeout.");
	if ((op = sbx_call_stop(d, id, reap_stopped, rp, &e)) == NULL) {
		reap_end(rp, e.code, &e);
		return;
	}
	broker_job_set_op(rp->job, op);
}

/* The job's turn: is the sandbox still idle (or long stopped)? */
static void
reap_turn(struct broker_job *job, void *arg)
{
	struct reap *rp = arg;
	struct broker_server *s = rp->rp->s;
	const struct broker_config *cfg = broker_server_config(s);
	struct sbx_driver *d = broker_server_driver(s);
	const char *id = broker_job_id(job);
	struct broker_row row;
	struct sbx_err e;
	struct sbx_op *op;
	int64_t now = sbx_wall_ms(), since, quiet;

	rp->job = job;
	rp->t0 = sbx_mono_ms();
	rp->ts = now;
	sbx_err_clear(&e);
	if (broker_server_draining(s) || broker_job_others(job, &quiet) > 0 ||
	    broker_state_get(broker_server_state(s), id, &row, &e) != 1) {
		broker_job_done(job, "ok");   /* in use, or gone: not ours */
		return;
	}
	if (rp->destroy) {
		since = row.stopped_at_ms > 0 ? row.stopped_at_ms :
		    row.last_used_at_ms;
		if (strcmp(row.state, "stopped") != 0 ||
		    now - since < cfg->destroy_after) {
			broker_job_done(job, "ok");
			return;
		}
		broker_job_block(job);
		if ((op = sbx_call_destroy(d, id, reap_destroyed, rp, &e)) ==
		    NULL) {
			reap_end(rp, e.code, &e);
			return;
		}
		broker_job_set_op(job, op);
		return;
	}
	if (!reap_idle(rp, id)) {
		broker_job_done(job, "ok");
		return;
	}
	broker_job_block(job);
	if ((op = sbx_call_status(d, id, reap_status, rp, &e)) == NULL) {
		reap_end(rp, e.code, &e);
		return;
	}
	broker_job_set_op(job, op);
}

static void
reap_queue(struct broker_reaper *r, const char *id, int destroy)
{
	struct reap *rp;
	struct sbx_err e;

	if ((rp = calloc(1, sizeof(*rp))) == NULL) {
		log_error("reaper: out of memory", NULL);
		return;
	}
	rp->rp = r;
	rp->destroy = destroy;
	sbx_err_clear(&e);
	if (broker_server_job(r->s, id, reap_turn, rp, reap_free, &e) == -1)
		log_error("reaper cannot queue a job", "id", id, "error",
		    e.message, NULL);
}

void
broker_reaper_scan(struct broker_reaper *r)
{
	struct broker_server *s = r->s;
	const struct broker_config *cfg = broker_server_config(s);
	struct broker_row *rows = NULL;
	struct sbx_err e;
	size_t i, n = 0;
	int64_t now = sbx_wall_ms(), since, quiet, last;

	if (broker_server_draining(s))
		return;
	sbx_err_clear(&e);
	if (broker_state_list(broker_server_state(s), &rows, &n, &e) == -1) {
		log_error("reaper cannot read the state", "error", e.message,
		    NULL);
		return;
	}
	for (i = 0; i < n; i++) {
		/* Anything in flight for it (an exec still running, a queued
		 * ensure) means it is in use: leave it for a later scan. */
		if (broker_server_busy(s, rows[i].id, &quiet))
			continue;
		/* A session whose api has no viewer is use only while
		 * it moves bytes (adr/0051 amendment). */
		last = rows[i].last_used_at_ms > quiet ?
		    rows[i].last_used_at_ms : quiet;
		if (cfg->idle_timeout > 0 &&
		    strcmp(rows[i].state, "running") == 0 &&
		    now - last >= cfg->idle_timeout)
			reap_queue(r, rows[i].id, 0);
		since = rows[i].stopped_at_ms > 0 ? rows[i].stopped_at_ms :
		    rows[i].last_used_at_ms;
		if (cfg->destroy_after > 0 &&
		    strcmp(rows[i].state, "stopped") == 0 &&
		    now - since >= cfg->destroy_after)
			reap_queue(r, rows[i].id, 1);
	}
	free(rows);
}

static void
reaper_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	broker_reaper_scan(arg);
}

struct broker_reaper *
broker_reaper_new(struct broker_server *s, struct sbx_err *err)
{
	const struct broker_config *cfg = broker_server_config(s);
	struct broker_reaper *r;
	struct timeval tv;
	char idle[32], every[32], destroy[32];

	if ((r = calloc(1, sizeof(*r))) == NULL)
		goto oom;
	r->s = s;
	if ((r->timer = event_new(broker_server_base(s), -1, EV_PERSIST,
	    reaper_tick, r)) == NULL)
		goto oom;
	tv.tv_sec = cfg->reap_interval / 1000;
	tv.tv_usec = (cfg->reap_interval % 1000) * 1000;
	if (event_add(r->timer, &tv) == -1)
		goto oom;
	snprintf(idle, sizeof(idle), "%lld", cfg->idle_timeout);
	snprintf(every, sizeof(every), "%lld", cfg->reap_interval);
	snprintf(destroy, sizeof(destroy), "%lld", cfg->destroy_after);
	log_info("reaper started", "idle_timeout_ms", idle, "reap_interval_ms",
	    every, "destroy_after_ms", destroy, NULL);
	return r;
oom:
	broker_reaper_free(r);
	sbx_err_oom(err);
	return NULL;
}

void
broker_reaper_free(struct broker_reaper *r)
{
	if (r == NULL)
		return;
	if (r->timer != NULL)
		event_free(r->timer);
	free(r);
}
