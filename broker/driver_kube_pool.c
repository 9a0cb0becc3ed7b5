/*
 * driver_kube_pool.c - the kubernetes driver's warm pool (warm_pool,
 * adr/0072 amendment of session 11; the engine's is adr/0067): N pods of
 * the default image with their own PVCs, made ahead one at a time,
 * labelled sbx.dev/pool (no sbx.dev/id), under the deny-all NetworkPolicy
 * "sbx-pool"; claimed by an ensure (driver_kube_life.c patches the
 * labels), refilled behind each claim; at the broker's start every
 * unclaimed member of an earlier life is deleted first, and with
 * warm_pool = 0 the "sbx-pool" NetworkPolicy too. Counts the pool's
 * figures (broker_pool_metrics.h, the engine pool's names). Uses the REST
 * client and the object specs; learns of its members from the watch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sodium.h>

#include "broker_pool_metrics.h"
#include "driver_kube_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

#define POOL_MAX 64
#define BACKOFF_MAX_S 30

struct member {
	TAILQ_ENTRY(member) link;
	char hex[24];
	char pod[128];
	char pvc[128];
	int ready;                    /* Running, not deleting, node not lost */
	int64_t t0;                   /* monotonic ms its make began */
};

/* A call nobody waits for (a delete of a member), freed when done. */
struct bg {
	TAILQ_ENTRY(bg) link;
	struct kube_pool *pool;
	struct kube_http *h;
};

enum pstate { P_IDLE, P_SWEEP_PODS, P_SWEEP_PVCS, P_SA, P_NETPOL, P_FILL,
	P_MAKE_PVC, P_MAKE_POD, P_DROP_NETPOL };

struct kube_pool {
	struct kube *k;
	int want;
	int started;
	enum pstate st;
	struct kube_http *h;          /* the pool's one call in flight */
	struct event *timer;          /* next step: backoff, start timeout */
	int backoff_s;
	struct member *making;        /* the member being made, or NULL */
	TAILQ_HEAD(, member) members;
	TAILQ_HEAD(, bg) bgs;
	json_t *doomed;               /* names to delete in the start's sweep */
	size_t di;
};

static void step(struct kube_pool *pl);

static void
later(struct kube_pool *pl, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (pl->timer != NULL)
		evtimer_add(pl->timer, &tv);
}

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
bg_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct bg *b = arg;

	(void)body;
	if (err != NULL || (status != 200 && status != 202 && status != 404))
		log_warn("kubernetes warm pool: a member's delete failed; the "
		    "next start sweeps it", "error", err != NULL ? err->message :
		    "status", NULL);
	TAILQ_REMOVE(&b->pool->bgs, b, link);
	free(b);
}

/* DELETE path (grace 0 for a pod: a member never ran anything of anyone). */
static void
bg_delete(struct kube_pool *pl, const char *path, int grace0)
{
	struct kube_http_cbs cbs = { bg_done, NULL, NULL, NULL };
	struct bg *b = calloc(1, sizeof(*b));
	json_t *opts = grace0 ? json_pack("{s:s,s:s,s:i}", "kind",
	    "DeleteOptions", "apiVersion", "v1", "gracePeriodSeconds", 0) : NULL;
	struct sbx_err e;

	if (b == NULL) {
		json_decref(opts);
		return;
	}
	b->pool = pl;
	cbs.arg = b;
	TAILQ_INSERT_TAIL(&pl->bgs, b, link);
	if ((b->h = kube_http_start(pl->k, "DELETE", path, opts, NULL, NULL,
	    pl->k->req_to, &cbs, &e)) == NULL) {
		TAILQ_REMOVE(&pl->bgs, b, link);
		free(b);
	}
	json_decref(opts);
}

static void
delete_member(struct kube_pool *pl, const char *pod, const char *pvc)
{
	char path[256];

	if (pod != NULL) {
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s",
		    pl->k->ns, pod);
		bg_delete(pl, path, 1);
	}
	if (pvc != NULL) {
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
		    "persistentvolumeclaims/%s", pl->k->ns, pvc);
		bg_delete(pl, path, 0);
	}
}

static struct member *
member_of(struct kube_pool *pl, const char *pod)
{
	struct member *m;

	TAILQ_FOREACH(m, &pl->members, link)
		if (strcmp(m->pod, pod) == 0)
			return m;
	return NULL;
}

/* The members ready to be claimed, for /metrics. */
static void
count_ready(struct kube_pool *pl)
{
	struct member *m;
	int64_t n = 0;

	TAILQ_FOREACH(m, &pl->members, link)
		n += m->ready;
	broker_pool_ready(n);
}

/* m failed or went: deleted with its PVC, the next make after a backoff. */
static void
member_fail(struct kube_pool *pl, struct member *m, const char *why)
{
	log_warn("kubernetes warm pool: a member is dropped", "member", m->pod,
	    "why", why, NULL);
	delete_member(pl, m->pod, m->pvc);
	TAILQ_REMOVE(&pl->members, m, link);
	count_ready(pl);
	if (pl->making == m) {
		broker_pool_made(0);
		pl->making = NULL;
		pl->backoff_s = pl->backoff_s == 0 ? 2 : pl->backoff_s * 2;
		if (pl->backoff_s > BACKOFF_MAX_S)
			pl->backoff_s = BACKOFF_MAX_S;
		pl->st = P_FILL;
		later(pl, pl->backoff_s * 1000);
	}
	free(m);
}

static void
call_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct kube_pool *pl = arg;
	json_t *it;
	size_t i;

	pl->h = NULL;
	switch (pl->st) {
	case P_SWEEP_PODS:
	case P_SWEEP_PVCS:
		if (pl->doomed == NULL) {
			/* the list's answer */
			if (err != NULL || status != 200) {
				log_warn("kubernetes warm pool: cannot list "
				    "members to sweep; again in 5 s", "error",
				    err != NULL ? err->message : "status", NULL);
				later(pl, 5000);
				return;
			}
			pl->doomed = json_array();
			json_array_foreach(json_object_get(body, "items"), i, it) {
				const char *n = json_string_value(json_object_get(
				    json_object_get(it, "metadata"), "name"));
				struct kube_pod p;

				/* a pod already claimed is a sandbox */
				if (n != NULL && (pl->st == P_SWEEP_PVCS ||
				    kube_member_read(it, &p) == 0))
					json_array_append_new(pl->doomed,
					    json_string(n));
			}
			pl->di = 0;
			if (json_array_size(pl->doomed) > 0)
				log_info("kubernetes warm pool: unclaimed members "
				    "of an earlier start deleted", "what",
				    pl->st == P_SWEEP_PODS ? "pods" : "pvcs", NULL);
		}
		step(pl);
		return;
	case P_SA:
	case P_NETPOL:
		if (err != NULL || (status != 201 && status != 200 &&
		    status != 409)) {
			log_warn("kubernetes warm pool: cannot make the pool's "
			    "ServiceAccount or NetworkPolicy; again in 5 s",
			    "error", err != NULL ? err->message : "status", NULL);
			later(pl, 5000);
			return;
		}
		if (pl->st == P_SA)
			pl->k->sa_ok = 1;
		pl->st = pl->st == P_SA ? P_NETPOL : P_FILL;
		step(pl);
		return;
	case P_DROP_NETPOL:
		if (err != NULL || (status != 200 && status != 202 &&
		    status != 404)) {
			log_warn("kubernetes warm pool: cannot delete the pool's "
			    "NetworkPolicy sbx-pool; again in 5 s", "error",
			    err != NULL ? err->message : "status", NULL);
			later(pl, 5000);
			return;
		}
		if (status != 404)
			log_info("kubernetes warm pool: NetworkPolicy sbx-pool "
			    "deleted (warm_pool is 0)", NULL);
		pl->st = P_IDLE;
		return;
	case P_MAKE_PVC:
	case P_MAKE_POD:
		if (pl->making == NULL) {
			step(pl);
			return;
		}
		if (err != NULL || (status != 201 && status != 200)) {
			member_fail(pl, pl->making, err != NULL ? err->message :
			    "the API server refused its create");
			return;
		}
		if (pl->st == P_MAKE_PVC) {
			pl->st = P_MAKE_POD;
			step(pl);
			return;
		}
		/* made: the watch says when it runs (kube_pool_seen) */
		later(pl, (int)pl->k->start_to);
		return;
	default:
		/* the watch moved the machine on while this call was out */
		step(pl);
		return;
	}
}

static void
pool_call(struct kube_pool *pl, const char *method, const char *path,
    json_t *body)
{
	struct kube_http_cbs cbs = { call_done, NULL, NULL, pl };
	struct sbx_err e;

	pl->h = kube_http_start(pl->k, method, path, body, NULL, NULL,
	    pl->k->req_to, &cbs, &e);
	json_decref(body);
	if (pl->h == NULL) {
		log_warn("kubernetes warm pool: a call could not start; again "
		    "in 5 s", "error", e.message, NULL);
		later(pl, 5000);
	}
}

static size_t
count(struct kube_pool *pl)
{
	struct member *m;
	size_t n = 0;

	TAILQ_FOREACH(m, &pl->members, link)
		n++;
	return n;
}

static void
make_one(struct kube_pool *pl)
{
	unsigned char rnd[8];
	struct member *m = calloc(1, sizeof(*m));
	char path[256];
	size_t i;

	if (m == NULL) {
		later(pl, 5000);
		return;
	}
	randombytes_buf(rnd, sizeof(rnd));
	for (i = 0; i < sizeof(rnd); i++)
		snprintf(m->hex + 2 * i, 3, "%02x", rnd[i]);
	snprintf(m->pod, sizeof(m->pod), "sbx-" KUBE_POOL_TAG "%s", m->hex);
	snprintf(m->pvc, sizeof(m->pvc), "work-" KUBE_POOL_TAG "%s", m->hex);
	m->t0 = mono_ms();
	TAILQ_INSERT_TAIL(&pl->members, m, link);
	pl->making = m;
	pl->st = P_MAKE_PVC;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
	    "persistentvolumeclaims", pl->k->ns);
	pool_call(pl, "POST", path, kube_spec_pvc(pl->k, NULL, m->hex));
}

/* One step of the pool's machine, as its state says. */
static void
step(struct kube_pool *pl)
{
	struct kube *k = pl->k;
	char path[256];

	if (pl->h != NULL)
		return;
	switch (pl->st) {
	case P_IDLE:
		return;
	case P_SWEEP_PODS:
	case P_SWEEP_PVCS:
		if (pl->doomed == NULL) {
			snprintf(path, sizeof(path), "/api/v1/namespaces/%s/%s?"
			    "labelSelector=sbx.dev%%2Fpool%%3Dtrue", k->ns,
			    pl->st == P_SWEEP_PODS ? "pods" :
			    "persistentvolumeclaims");
			pool_call(pl, "GET", path, NULL);
			return;
		}
		while (pl->di < json_array_size(pl->doomed)) {
			const char *n = json_string_value(json_array_get(
			    pl->doomed, pl->di++));

			if (pl->st == P_SWEEP_PODS)
				delete_member(pl, n, NULL);
			else
				delete_member(pl, NULL, n);
		}
		json_decref(pl->doomed);
		pl->doomed = NULL;
		if (pl->st == P_SWEEP_PODS) {
			pl->st = P_SWEEP_PVCS;
			step(pl);
			return;
		}
		/* no pool wanted: its NetworkPolicy goes with its members */
		pl->st = pl->want > 0 ? P_SA : P_DROP_NETPOL;
		step(pl);
		return;
	case P_SA:
		if (k->sa_ok) {
			pl->st = P_NETPOL;
			step(pl);
			return;
		}
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
		    "serviceaccounts", k->ns);
		pool_call(pl, "POST", path, kube_spec_sa());
		return;
	case P_NETPOL:
		snprintf(path, sizeof(path), "/apis/networking.k8s.io/v1/"
		    "namespaces/%s/networkpolicies", k->ns);
		pool_call(pl, "POST", path, kube_spec_pool_netpol());
		return;
	case P_DROP_NETPOL:
		snprintf(path, sizeof(path), "/apis/networking.k8s.io/v1/"
		    "namespaces/%s/networkpolicies/sbx-pool", k->ns);
		pool_call(pl, "DELETE", path, NULL);
		return;
	case P_FILL:
		if (pl->making == NULL && count(pl) < (size_t)pl->want)
			make_one(pl);
		return;
	case P_MAKE_PVC:
		return;
	case P_MAKE_POD:
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", k->ns);
		pool_call(pl, "POST", path, kube_spec_pod(k, NULL,
		    pl->making->hex, pl->making->pvc, k->image, 0, k->memory,
		    k->mcpu));
		return;
	}
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kube_pool *pl = arg;

	(void)fd;
	(void)what;
	if ((pl->st == P_MAKE_POD || pl->st == P_MAKE_PVC) && pl->h == NULL &&
	    pl->making != NULL) {
		/* made, never Running within kube_start_timeout */
		member_fail(pl, pl->making, "not Running within "
		    "kube_start_timeout");
		return;
	}
	step(pl);
}

int
kube_pool_new(struct kube *k, int want)
{
	struct kube_pool *pl = calloc(1, sizeof(*pl));

	if (pl == NULL || (pl->timer = evtimer_new(k->drv.base, timer_cb,
	    pl)) == NULL) {
		free(pl);
		return -1;
	}
	pl->k = k;
	pl->want = want < 0 ? 0 : want > POOL_MAX ? POOL_MAX : want;
	broker_pool_wanted(pl->want);
	broker_pool_ready(0);
	TAILQ_INIT(&pl->members);
	TAILQ_INIT(&pl->bgs);
	k->pool = pl;
	return 0;
}

void
kube_pool_start(struct kube *k)
{
	struct kube_pool *pl = k->pool;

	if (pl == NULL || pl->started)
		return;
	pl->started = 1;
	pl->st = P_SWEEP_PODS;
	step(pl);
}

int
kube_pool_claim(struct kube *k, int fits, char *pod, char *pvc)
{
	struct kube_pool *pl = k->pool;
	struct member *m;

	if (pl == NULL || pl->want == 0)
		return -1;
	if (!fits) {
		broker_pool_missed(BROKER_POOL_MISS_SPEC);
		return -1;
	}
	TAILQ_FOREACH(m, &pl->members, link)
		if (m->ready)
			break;
	if (m == NULL) {
		broker_pool_missed(BROKER_POOL_MISS_EMPTY);
		return -1;
	}
	snprintf(pod, 128, "%s", m->pod);
	snprintf(pvc, 128, "%s", m->pvc);
	TAILQ_REMOVE(&pl->members, m, link);
	free(m);
	count_ready(pl);
	if (pl->st == P_FILL)
		later(pl, 0);
	return 0;
}

void
kube_pool_claim_end(struct kube *k, int ok)
{
	if (k->pool == NULL)
		return;
	if (ok)
		broker_pool_claimed();
	else
		broker_pool_missed(BROKER_POOL_MISS_EMPTY);
}

void
kube_pool_discard(struct kube *k, const char *pod, const char *pvc,
    int pvc_too)
{
	if (k->pool != NULL)
		delete_member(k->pool, pod, pvc_too ? pvc : NULL);
}

void
kube_pool_seen(struct kube *k, const struct kube_pod *p, int gone)
{
	struct kube_pool *pl = k->pool;
	struct member *m;

	if (pl == NULL || (m = member_of(pl, p->name)) == NULL)
		return;       /* not of this start: the sweep has it */
	if (gone || p->deleting || p->lost || p->stuck[0] != '\0' ||
	    strcmp(p->phase, "Failed") == 0 ||
	    strcmp(p->phase, "Succeeded") == 0) {
		member_fail(pl, m, gone ? "its pod went" : p->lost ?
		    "its node is lost" : p->stuck[0] != '\0' ? p->stuck :
		    "its pod ended or is being deleted");
		if (pl->making == NULL && pl->st == P_FILL)
			later(pl, pl->backoff_s * 1000);
		return;
	}
	if (strcmp(p->phase, "Running") != 0 || m->ready)
		return;
	m->ready = 1;
	count_ready(pl);
	log_info("kubernetes warm pool: member ready", "member", m->pod, NULL);
	if (pl->making == m) {
		broker_pool_made(1);
		pl->making = NULL;
		pl->backoff_s = 0;
		pl->st = P_FILL;
		evtimer_del(pl->timer);
		later(pl, 0);
	}
}

void
kube_pool_relisted(struct kube *k, json_t *items)
{
	struct kube_pool *pl = k->pool;
	struct member *m, *nm;
	struct kube_pod p;
	json_t *it;
	size_t i;

	if (pl == NULL)
		return;
	for (m = TAILQ_FIRST(&pl->members); m != NULL; m = nm) {
		int there = 0;

		nm = TAILQ_NEXT(m, link);
		json_array_foreach(items, i, it)
			if (kube_member_read(it, &p) == 0 &&
			    strcmp(p.name, m->pod) == 0) {
				there = 1;
				kube_pool_seen(k, &p, 0);
				break;
			}
		/* a member being created may not be listed yet */
		if (!there && m != pl->making) {
			memset(&p, 0, sizeof(p));
			snprintf(p.name, sizeof(p.name), "%s", m->pod);
			kube_pool_seen(k, &p, 1);
			nm = TAILQ_FIRST(&pl->members);
		}
	}
}

void
kube_pool_free(struct kube *k)
{
	struct kube_pool *pl = k->pool;
	struct member *m;
	struct bg *b;

	if (pl == NULL)
		return;
	kube_http_cancel(pl->h);
	if (pl->timer != NULL)
		event_free(pl->timer);
	while ((m = TAILQ_FIRST(&pl->members)) != NULL) {
		TAILQ_REMOVE(&pl->members, m, link);
		free(m);
	}
	while ((b = TAILQ_FIRST(&pl->bgs)) != NULL) {
		TAILQ_REMOVE(&pl->bgs, b, link);
		kube_http_cancel(b->h);
		free(b);
	}
	json_decref(pl->doomed);
	free(pl);
	k->pool = NULL;
}
