/* api_e2b_reap.c - E2B deadlines: every e2b_reap_interval the api kills (destroys) or, with autoPause, pauses (stops) each running E2B sandbox past its deadline, through the driver as DELETE and POST .../stop do, audited (adr/0059). */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "api_e2b_int.h"
#include "api_int.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_time.h"

/* One deadline being enforced. */
struct api_e2b_reap {
	struct api_server *s;
	char id[API_NPC_NAME_MAX + 1];
	int pause;
	struct sbx_op *op;
	struct api_e2b_reap *next;
};

static void
reap_unlink(struct api_e2b_reap *rp)
{
	struct api_e2b_reap **pp;

	for (pp = &rp->s->e2b->reaps; *pp != NULL; pp = &(*pp)->next)
		if (*pp == rp) {
			*pp = rp->next;
			break;
		}
}

/* The driver's answer: the record follows (paused, or gone with its
 * slot). A sandbox the broker no longer has is gone too. */
static void
reap_done(void *arg, const struct sbx_err *err)
{
	struct api_e2b_reap *rp = arg;
	struct api_server *s = rp->s;
	struct api_e2b_rec *r = api_e2b_find(s, rp->id);
	struct api_npc n;
	struct sbx_err e2;
	int gone = err != NULL && strcmp(err->code, SBX_E_NOT_FOUND) == 0;
	/* A pause of a sandbox the idle reaper stopped already is done. */
	int stopped = rp->pause && err != NULL &&
	    strcmp(err->code, SBX_E_NOT_RUNNING) == 0;

	sbx_err_clear(&e2);
	rp->op = NULL;
	reap_unlink(rp);
	if (r != NULL)
		r->busy = 0;
	if (stopped)
		err = NULL;
	api_store_audit(s->store, NULL, rp->pause ? "e2b.deadline.pause" :
	    "e2b.deadline.kill", rp->id, err == NULL ? "ok" : err->code);
	if (r != NULL && err != NULL && !gone) {
		/* Tried again a few looks later (a broker away). */
		r->retry_at = sbx_wall_ms() + 5 * s->cfg->e2b_reap_interval;
		log_warn("cannot enforce an E2B deadline", "sandbox", rp->id,
		    "code", err->code, NULL);
	} else if (r != NULL && rp->pause && !gone) {
		r->paused = 1;
		if (api_e2b_store_put(s->store, r, &e2) == -1)
			log_warn("cannot store an E2B pause", "sandbox", rp->id,
			    NULL);
	} else if (r != NULL) {
		if (api_store_npc_get(s->store, rp->id, &n, &e2) == 1 &&
		    api_store_sandbox_release(s->store, n.id, &e2) == -1)
			log_warn("cannot give a sandbox slot back", "npc", rp->id,
			    NULL);
		if (api_e2b_store_del(s->store, rp->id, &e2) == -1)
			log_warn("cannot forget an E2B sandbox", "sandbox",
			    rp->id, NULL);
		api_e2b_forget(s, r);
	}
	free(rp);
}

static void
reap_start(struct api_server *s, struct api_e2b_rec *r)
{
	struct api_e2b_reap *rp;
	struct api_npc n;
	struct sbx_err err;

	sbx_err_clear(&err);
	if (api_store_npc_get(s->store, r->id, &n, &err) != 1 ||
	    (rp = calloc(1, sizeof(*rp))) == NULL)
		return;
	rp->s = s;
	snprintf(rp->id, sizeof(rp->id), "%s", r->id);
	rp->pause = r->auto_pause;
	log_info(rp->pause ? "E2B deadline: pausing" : "E2B deadline: killing",
	    "sandbox", r->id, NULL);
	rp->op = rp->pause ? sbx_call_stop(s->driver, n.sandbox_id, reap_done,
	    rp, &err) : sbx_call_destroy(s->driver, n.sandbox_id, reap_done, rp,
	    &err);
	if (rp->op == NULL) {
		log_warn("cannot enforce an E2B deadline", "sandbox", r->id,
		    "code", err.code, NULL);
		free(rp);
		return;
	}
	r->busy = 1;
	rp->next = s->e2b->reaps;
	s->e2b->reaps = rp;
}

static void
reap_tick(evutil_socket_t fd, short what, void *arg)
{
	struct api_server *s = arg;
	struct api_e2b_rec *r, *next;
	int64_t now = sbx_wall_ms();

	(void)fd;
	(void)what;
	if (s->draining)
		return;
	for (r = s->e2b->recs; r != NULL; r = next) {
		next = r->next;
		if (!r->busy && !r->paused && r->deadline <= now &&
		    r->retry_at <= now)
			reap_start(s, r);
	}
}

int
api_e2b_reap_start(struct api_server *s, struct sbx_err *err)
{
	struct timeval tv;
	long long ms = s->cfg->e2b_reap_interval;

	if ((s->e2b->reap_ev = event_new(s->base, -1, EV_PERSIST, reap_tick,
	    s)) == NULL)
		return sbx_err_oom(err);
	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
	event_add(s->e2b->reap_ev, &tv);
	return 0;
}

void
api_e2b_reap_stop(struct api_server *s)
{
	struct api_e2b_reap *rp;

	if (s->e2b->reap_ev != NULL)
		event_free(s->e2b->reap_ev);
	s->e2b->reap_ev = NULL;
	while ((rp = s->e2b->reaps) != NULL) {
		s->e2b->reaps = rp->next;
		sbx_op_cancel(rp->op);
		free(rp);
	}
}
