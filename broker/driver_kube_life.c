/*
 * driver_kube_life.c - the kubernetes driver's ensure, stop and destroy:
 * the sandbox's ServiceAccount, PVC, NetworkPolicy and Pod created or
 * deleted in order through the REST client, the pod and PVC found by
 * label sbx.dev/id, a warm pool member claimed by relabelling it, the
 * watch cache waited on (Running, gone), a pod stuck terminating
 * force-deleted after force_after_ms and one on a lost node at once
 * (lesson 2 of issue 27). Uses the spec builders, the REST client, the
 * watch, the pool and the channel registry.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "driver_kube_int.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"

enum lkind { L_ENSURE, L_STOP, L_DESTROY };

struct lop;
typedef void (*lstep)(struct lop *o, int status, json_t *body,
    const struct sbx_err *err);

struct lop {
	struct sbx_op op;             /* first */
	int cls;                      /* KUBE_OP_LIFE */
	struct kube *k;
	enum lkind kind;
	char id[64];
	char image[256];
	int egress;
	int64_t memory, mcpu;
	sbx_status_cb scb;
	sbx_done_cb dcb;
	void *arg;
	struct kube_http *h;
	struct kube_wait *w;
	struct event *timer;          /* start timeout, force delete */
	struct event *kick;
	lstep next;
	lstep after;                  /* find_pod, find_pvc: then this */
	char pod[128];                /* the sandbox's pod, found by label */
	char pvc[128];                /* its PVC, found by label or made */
	int member;                   /* a member being claimed: 1 before its
	                               * PVC's patch, 2 after (the PVC is the
	                               * id's), 0 once its pod is the id's */
	int tries;
	int restarts;                 /* pods that ended while starting */
	int forced;
	struct sbx_err early;
};

static void
lop_free(struct lop *o)
{
	if (o->member != 0)
		/* a claim that did not finish (an error, a cancel): the member
		 * goes rather than stay unlisted until the next start */
		kube_pool_discard(o->k, o->pod, o->pvc, o->member == 1);
	kube_http_cancel(o->h);
	if (o->w != NULL)
		kube_wait_cancel(o->k, o->w);
	if (o->timer != NULL)
		event_free(o->timer);
	if (o->kick != NULL)
		event_free(o->kick);
	free(o);
}

void
kube_life_cancel(struct sbx_op *op)
{
	lop_free((struct lop *)op);
}

static void
finish(struct lop *o, const struct sbx_err *err, const struct kube_pod *p)
{
	if (o->kind == L_ENSURE) {
		struct sbx_status st;

		memset(&st, 0, sizeof(st));
		snprintf(st.id, sizeof(st.id), "%s", o->id);
		if (p != NULL)
			kube_pod_status(p, &st);
		if (err == NULL)
			kube_lost_clear(o->k, o->id);
		o->scb(o->arg, err, err != NULL ? NULL : &st);
	} else {
		if (err == NULL)
			kube_lost_clear(o->k, o->id);
		o->dcb(o->arg, err);
	}
	lop_free(o);
}

static void
fail(struct lop *o, const char *code, const char *msg)
{
	struct sbx_err e;

	sbx_err_set(&e, code, "%s", msg);
	finish(o, &e, NULL);
}

/* Ends o unless the answer is one of ok (0-terminated): a transport error
 * as it came, another status as kube_status_err naming what was tried.
 * Returns 1 when o ended (the caller returns at once), else 0. */
static int
answer_bad(struct lop *o, const struct sbx_err *err, int status, json_t *body,
    const int *ok, const char *what)
{
	struct sbx_err e;

	if (err != NULL) {
		finish(o, err, NULL);
		return 1;
	}
	for (; *ok != 0; ok++)
		if (status == *ok)
			return 0;
	kube_status_err(&e, status, body, what);
	finish(o, &e, NULL);
	return 1;
}

static void
call_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct lop *o = arg;

	o->h = NULL;
	o->next(o, status, body, err);
}

/* Starts METHOD path with body (stolen) and goes on at next. */
static void
call(struct lop *o, const char *method, const char *path, json_t *body,
    const char *ctype, lstep next)
{
	struct kube_http_cbs cbs = { call_done, NULL, NULL, o };
	struct sbx_err e;

	o->next = next;
	o->h = kube_http_start(o->k, method, path, body, ctype, NULL,
	    o->k->req_to, &cbs, &e);
	json_decref(body);
	if (o->h == NULL)
		finish(o, &e, NULL);
}

static void
pod_path(struct lop *o, char *buf, size_t n)
{
	if (o->pod[0] != '\0')
		snprintf(buf, n, "/api/v1/namespaces/%s/pods/%s", o->k->ns, o->pod);
	else
		snprintf(buf, n, "/api/v1/namespaces/%s/pods/sbx-%s", o->k->ns,
		    o->id);
}

/* ---- a sandbox's pod and PVC are found by label (a claimed pool member
 * keeps its names: adr/0072, amendment of session 11) ---- */

static void
found(struct lop *o, int status, json_t *body, const struct sbx_err *err,
    char *name, size_t n)
{
	json_t *it;
	const char *s;

	if (err != NULL || status != 200) {
		o->after(o, status, body, err);
		return;
	}
	if ((it = kube_list_pick(body)) == NULL) {
		o->after(o, 404, NULL, NULL);
		return;
	}
	s = json_string_value(json_object_get(json_object_get(it, "metadata"),
	    "name"));
	snprintf(name, n, "%s", s != NULL ? s : "");
	o->after(o, 200, it, NULL);
}

static void
found_pod(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	found(o, status, body, err, o->pod, sizeof(o->pod));
}

static void
found_pvc(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	found(o, status, body, err, o->pvc, sizeof(o->pvc));
}

/* Lists id's objects of collection (pods, persistentvolumeclaims) by
 * label; found_ notes the one to act on and goes on at after. */
static void
find_by_id(struct lop *o, const char *collection, lstep found_, lstep after)
{
	char path[256];

	o->after = after;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/%s?labelSelector="
	    "sbx.dev%%2Fid%%3D%s", o->k->ns, collection, o->id);
	call(o, "GET", path, NULL, NULL, found_);
}

/* Lists id's pods (PVCs) by label; after gets 200 and the one to act on
 * (its name in o->pod, o->pvc), 404 when none, or the list's failure. */
static void
find_pod(struct lop *o, lstep after)
{
	find_by_id(o, "pods", found_pod, after);
}

static void
find_pvc(struct lop *o, lstep after)
{
	find_by_id(o, "persistentvolumeclaims", found_pvc, after);
}

/* ---- shared: delete the pod and wait until it is gone ---- */

static void gone_cb(void *arg, const struct kube_pod *p);
static void after_gone(struct lop *o);

static void
force_cb(evutil_socket_t fd, short what, void *arg);

static void
deleted(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	struct kube_pod *p;

	if (answer_bad(o, err, status, body,
	    (const int[]){ 200, 202, 404, 0 }, "delete the pod"))
		return;
	p = kube_pod_find(o->k, o->id);
	if (p == NULL) {
		/* gone, or never seen by the watch: nothing to wait for */
		after_gone(o);
		return;
	}
	if (o->w == NULL &&
	    (o->w = kube_wait_pod(o->k, o->id, 1, gone_cb, o)) == NULL) {
		fail(o, SBX_E_INTERNAL, "out of memory");
		return;
	}
	if (!o->forced && o->timer == NULL) {
		struct timeval tv = { o->k->force_after / 1000,
		    (o->k->force_after % 1000) * 1000 };

		if ((o->timer = evtimer_new(o->k->drv.base, force_cb, o)) != NULL)
			evtimer_add(o->timer, &tv);
	}
}

static void
gone_cb(void *arg, const struct kube_pod *p)
{
	struct lop *o = arg;

	(void)p;
	o->w = NULL;
	if (o->timer != NULL) {
		event_free(o->timer);
		o->timer = NULL;
	}
	kube_http_cancel(o->h);   /* a force delete still on its way */
	o->h = NULL;
	after_gone(o);
}

static void
forced(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	(void)body;
	(void)err;
	if (status == 404 && o->w != NULL) {
		/* gone meanwhile: the watch will say so too */
		return;
	}
}

static void
force_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lop *o = arg;
	char path[256];

	(void)fd;
	(void)what;
	o->forced = 1;
	log_warn("kubernetes pod still terminating: deleting it with grace 0",
	    "id", o->id, NULL);
	pod_path(o, path, sizeof(path));
	call(o, "DELETE", path, json_pack("{s:s,s:s,s:i}", "kind",
	    "DeleteOptions", "apiVersion", "v1", "gracePeriodSeconds", 0),
	    NULL, forced);
}

static void
delete_pod(struct lop *o, int grace0)
{
	char path[256];
	json_t *body = NULL;

	kube_chan_drop(o->k, o->id);
	kube_pod_ours(o->k, o->id);
	pod_path(o, path, sizeof(path));
	if (grace0)
		body = json_pack("{s:s,s:s,s:i}", "kind", "DeleteOptions",
		    "apiVersion", "v1", "gracePeriodSeconds", 0);
	call(o, "DELETE", path, body, NULL, deleted);
}

/* ---- ensure ---- */

static void ensure_sa(struct lop *o);
static void create_pvc(struct lop *o, int status, json_t *body,
    const struct sbx_err *err);
static void create_pod(struct lop *o, int status, json_t *body,
    const struct sbx_err *err);
static void wait_running(struct lop *o);

static void
running_cb(void *arg, const struct kube_pod *p)
{
	struct lop *o = arg;
	char msg[200];

	o->w = NULL;
	if (p == NULL) {
		fail(o, SBX_E_RUNTIME, "the sandbox's pod was deleted while it "
		    "was starting");
		return;
	}
	if (strcmp(p->phase, "Running") == 0 && !p->deleting && !p->lost) {
		finish(o, NULL, p);
		return;
	}
	if (p->stuck[0] == '\0' && !p->deleting && o->restarts++ < 2 &&
	    (strcmp(p->phase, "Succeeded") == 0 ||
	    strcmp(p->phase, "Failed") == 0)) {
		/* its container ended as it started (a node's hiccup): a new
		 * pod, same PVC, twice at most */
		log_warn("kubernetes: a sandbox pod ended while starting; "
		    "making it again", "id", o->id, "phase", p->phase, NULL);
		if (o->timer != NULL) {
			event_free(o->timer);
			o->timer = NULL;
		}
		delete_pod(o, 1);
		return;
	}
	snprintf(msg, sizeof(msg), "the sandbox's pod did not start (phase %s%s)",
	    p->phase, p->lost ? ", its node lost" : p->deleting ?
	    ", being deleted" : "");
	if (p->stuck[0] != '\0')
		snprintf(msg, sizeof(msg), "the sandbox's pod cannot start: %s "
		    "(is the image, or kube_helper_image, on the nodes?)", p->stuck);
	fail(o, SBX_E_RUNTIME, msg);
}

static void
start_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct lop *o = arg;
	struct kube_pod *p = kube_pod_find(o->k, o->id);
	char msg[320];

	(void)fd;
	(void)what;
	if (p != NULL && p->unsched[0] != '\0') {
		/* the real scheduler's words (docs/kube-real-run.md) */
		snprintf(msg, sizeof(msg), "the sandbox's pod was not scheduled "
		    "within kube_start_timeout: %s", p->unsched);
		fail(o, SBX_E_TIMEOUT, msg);
		return;
	}
	fail(o, SBX_E_TIMEOUT, "the sandbox's pod did not reach Running "
	    "within kube_start_timeout (unschedulable, or its image missing?)");
}

static void
wait_running(struct lop *o)
{
	struct kube_pod *p = kube_pod_find(o->k, o->id);
	struct timeval tv = { o->k->start_to / 1000,
	    (o->k->start_to % 1000) * 1000 };

	if (p != NULL && (strcmp(p->phase, "Pending") != 0 || p->deleting ||
	    p->stuck[0] != '\0')) {
		running_cb(o, p);
		return;
	}
	if ((o->w = kube_wait_pod(o->k, o->id, 0, running_cb, o)) == NULL ||
	    (o->timer = evtimer_new(o->k->drv.base, start_timeout, o)) == NULL) {
		fail(o, SBX_E_INTERNAL, "out of memory");
		return;
	}
	evtimer_add(o->timer, &tv);
}

static void inspect(struct lop *o);

static void
pod_created(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish(o, err, NULL);
		return;
	}
	if (status == 409 && o->tries++ < 5) {
		inspect(o);
		return;
	}
	if (status != 201 && status != 200) {
		kube_status_err(&e, status, body, "create the sandbox's pod");
		finish(o, &e, NULL);
		return;
	}
	kube_pod_seen(o->k, body);
	wait_running(o);
}

static void
post_pod(struct lop *o)
{
	char path[256];

	snprintf(o->pod, sizeof(o->pod), "sbx-%s", o->id);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", o->k->ns);
	call(o, "POST", path, kube_spec_pod(o->k, o->id, NULL, o->pvc, o->image,
	    o->egress, o->memory, o->mcpu), NULL, pod_created);
}

static void create_netpol(struct lop *o, int status, json_t *body,
    const struct sbx_err *err);

/* The claimed member's pod now carries sbx.dev/id: the sandbox is it. */
static void
claimed_pod(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	if (err != NULL || status != 200) {
		/* the member went: its PVC is ours already (labelled, its
		 * /work untouched by anything but the member's own mount) */
		log_warn("kubernetes warm pool: a claim's pod patch failed; "
		    "making the sandbox's pod on the claimed PVC", "id", o->id,
		    "member", o->pod, "error", err != NULL ? err->message :
		    "status", NULL);
		kube_pool_discard(o->k, o->pod, o->pvc, 0);
		kube_pool_claim_end(o->k, 0);
		o->member = 0;
		post_pod(o);
		return;
	}
	o->member = 0;
	kube_pool_claim_end(o->k, 1);
	log_info("kubernetes warm pool: member claimed", "id", o->id, "member",
	    o->pod, NULL);
	kube_pod_seen(o->k, body);
	wait_running(o);
}

static void
claimed_pvc(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	char path[256];

	(void)body;
	if (err != NULL || status != 200) {
		log_warn("kubernetes warm pool: a claim's PVC patch failed; the "
		    "sandbox is made cold", "id", o->id, "member", o->pod,
		    "error", err != NULL ? err->message : "status", NULL);
		kube_pool_discard(o->k, o->pod, o->pvc, 1);
		kube_pool_claim_end(o->k, 0);
		o->member = 0;
		snprintf(o->pvc, sizeof(o->pvc), "work-%s", o->id);
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
		    "persistentvolumeclaims", o->k->ns);
		/* then the NetworkPolicy again (409: replaced), then the pod */
		call(o, "POST", path, kube_spec_pvc(o->k, o->id, NULL), NULL,
		    create_netpol);
		return;
	}
	o->member = 2;
	pod_path(o, path, sizeof(path));
	call(o, "PATCH", path, kube_spec_claim(o->id),
	    "application/json-patch+json", claimed_pod);
}

static void
create_pod(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	char path[256];

	if (answer_bad(o, err, status, body,
	    (const int[]){ 201, 200, 0 }, "create the sandbox's "
		    "NetworkPolicy"))
		return;
	if (o->member) {
		/* the sandbox's NetworkPolicy exists now: the member's labels
		 * change, PVC first (a broker that dies between the two leaves
		 * a PVC of the id and a member the next start sweeps) */
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
		    "persistentvolumeclaims/%s", o->k->ns, o->pvc);
		call(o, "PATCH", path, kube_spec_claim(o->id),
		    "application/json-patch+json", claimed_pvc);
		return;
	}
	post_pod(o);
}

/* POSTs the sandbox's NetworkPolicy (its egress: o->egress), then next. */
static void
post_netpol(struct lop *o, lstep next)
{
	char path[256];

	snprintf(path, sizeof(path), "/apis/networking.k8s.io/v1/namespaces/%s/"
	    "networkpolicies", o->k->ns);
	call(o, "POST", path, kube_spec_netpol(o->k, o->id, o->egress), NULL,
	    next);
}

/* The NetworkPolicy existed (an earlier life, maybe another egress): no
 * pod runs at this point, so it is deleted and made again (no patch
 * verb needed in the Role). */
static void
netpol_again(struct lop *o, int status, json_t *body,
    const struct sbx_err *err)
{
	if (answer_bad(o, err, status, body,
	    (const int[]){ 200, 202, 404, 0 }, "replace the sandbox's "
		    "NetworkPolicy"))
		return;
	post_netpol(o, create_pod);
}

static void
create_pod_or_replace(struct lop *o, int status, json_t *body,
    const struct sbx_err *err)
{
	char path[256];

	if (err == NULL && status == 409 && o->tries++ < 5) {
		snprintf(path, sizeof(path), "/apis/networking.k8s.io/v1/"
		    "namespaces/%s/networkpolicies/sbx-%s", o->k->ns, o->id);
		call(o, "DELETE", path, NULL, NULL, netpol_again);
		return;
	}
	create_pod(o, status, body, err);
}

static void
create_netpol(struct lop *o, int status, json_t *body,
    const struct sbx_err *err)
{
	o->tries = 0;
	if (answer_bad(o, err, status, body,
	    (const int[]){ 201, 200, 409, 0 }, "create the sandbox's "
		    "PersistentVolumeClaim"))
		return;
	post_netpol(o, create_pod_or_replace);
}

/* The id's PVC: its own (found by label: a stopped sandbox's /work, or
 * a claimed member's), else a warm pool member's when the spec is the
 * pool's, else a new "work-ID". */
static void
pvc_found(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	char path[256];
	struct kube *k = o->k;

	if (err == NULL && status == 200) {
		create_netpol(o, 201, NULL, NULL);
		return;
	}
	if (answer_bad(o, err, status, body, (const int[]){ 404, 0 },
	    "look up the sandbox's PersistentVolumeClaim"))
		return;
	if (kube_pool_claim(k, !o->egress && strcmp(o->image, k->image) == 0 &&
	    o->memory == k->memory && o->mcpu == k->mcpu, o->pod, o->pvc) == 0) {
		o->member = 1;
		create_netpol(o, 201, NULL, NULL);
		return;
	}
	snprintf(o->pvc, sizeof(o->pvc), "work-%s", o->id);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
	    "persistentvolumeclaims", k->ns);
	call(o, "POST", path, kube_spec_pvc(k, o->id, NULL), NULL, create_netpol);
}

static void
create_pvc(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	char path[256];
	struct sbx_err e;

	if (err != NULL) {
		finish(o, err, NULL);
		return;
	}
	if (status != 201 && status != 200 && status != 409) {
		kube_status_err(&e, status, body, "create the sandboxes' "
		    "ServiceAccount " KUBE_SA);
		finish(o, &e, NULL);
		return;
	}
	o->k->sa_ok = 1;
	(void)path;
	find_pvc(o, pvc_found);
}

/* The pods' ServiceAccount (lesson 1: without one, pod create is 403). */
static void
ensure_sa(struct lop *o)
{
	char path[256];

	if (o->k->sa_ok) {
		create_pvc(o, 200, NULL, NULL);
		return;
	}
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/serviceaccounts",
	    o->k->ns);
	call(o, "POST", path, kube_spec_sa(), NULL, create_pvc);
}

static void
inspected(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	struct kube_pod p;
	struct sbx_err e;

	if (err != NULL) {
		finish(o, err, NULL);
		return;
	}
	if (status == 404) {
		ensure_sa(o);
		return;
	}
	if (status != 200 || kube_pod_read(body, &p) != 0) {
		if (status == 200)
			sbx_err_set(&e, SBX_E_CONFLICT, "a pod named sbx-%s exists "
			    "without the sbx.dev labels; it is not ours", o->id);
		else
			kube_status_err(&e, status, body, "read the sandbox's pod");
		finish(o, &e, NULL);
		return;
	}
	kube_pod_seen(o->k, body);
	if (p.lost) {
		/* its node is lost (lesson 2: a graceful delete would wait for
		 * a kubelet that is gone): delete it with grace 0 and make a
		 * new pod on the same PVC */
		log_warn("kubernetes: replacing a sandbox's pod on a lost node",
		    "id", o->id, "node", p.node, NULL);
		delete_pod(o, 1);
		return;
	}
	if (p.deleting) {
		delete_pod(o, 0);           /* wait for it to go, then create */
		return;
	}
	if (strcmp(p.phase, "Failed") == 0 || strcmp(p.phase, "Succeeded") == 0 ||
	    strcmp(p.image, o->image) != 0 || p.egress != o->egress) {
		/* ended, or another image or egress: a new pod, same PVC */
		delete_pod(o, strcmp(p.phase, "Running") != 0 &&
		    strcmp(p.phase, "Pending") != 0);
		return;
	}
	wait_running(o);
}

static void
inspect(struct lop *o)
{
	find_pod(o, inspected);
}

static void destroy_pvc(struct lop *o, int status, json_t *body,
    const struct sbx_err *err);

/* Each PVC labelled with the id not yet being deleted goes; then done. */
static void
pvc_to_destroy(struct lop *o, int status, json_t *body,
    const struct sbx_err *err)
{
	char path[256];

	if (err == NULL && (status == 404 || (status == 200 &&
	    json_object_get(json_object_get(body, "metadata"),
	    "deletionTimestamp") != NULL))) {
		finish(o, NULL, NULL);
		return;
	}
	if (answer_bad(o, err, status, body, (const int[]){ 200, 0 },
	    "look up the sandbox's PersistentVolumeClaim"))
		return;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
	    "persistentvolumeclaims/%s", o->k->ns, o->pvc);
	call(o, "DELETE", path, NULL, NULL, destroy_pvc);
}

static void
destroy_pvc(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	if (answer_bad(o, err, status, body,
	    (const int[]){ 200, 202, 404, 0 }, "delete the sandbox's "
		    "NetworkPolicy or PersistentVolumeClaim"))
		return;
	if (o->tries++ > 8) {
		fail(o, SBX_E_RUNTIME, "the sandbox's PersistentVolumeClaims "
		    "keep coming back");
		return;
	}
	find_pvc(o, pvc_to_destroy);
}

static void
destroy_found(struct lop *o, int status, json_t *body,
    const struct sbx_err *err)
{
	if (err == NULL && status == 404) {
		after_gone(o);
		return;
	}
	if (answer_bad(o, err, status, body, (const int[]){ 200, 0 },
	    "look up the sandbox's pod"))
		return;
	kube_pod_seen(o->k, body);
	delete_pod(o, 0);   /* on a lost node: forced after force_after */
}

static void
after_gone(struct lop *o)
{
	char path[256];

	o->forced = 0;
	switch (o->kind) {
	case L_ENSURE:
		o->member = 0;
		o->pod[0] = '\0';
		ensure_sa(o);
		return;
	case L_STOP:
		finish(o, NULL, NULL);
		return;
	case L_DESTROY:
		snprintf(path, sizeof(path), "/apis/networking.k8s.io/v1/"
		    "namespaces/%s/networkpolicies/sbx-%s", o->k->ns, o->id);
		call(o, "DELETE", path, NULL, NULL, destroy_pvc);
		return;
	}
}

static void
stop_inspected(struct lop *o, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish(o, err, NULL);
		return;
	}
	if (status == 404) {
		sbx_err_set(&e, SBX_E_NOT_FOUND, "no sandbox %s", o->id);
		finish(o, &e, NULL);
		return;
	}
	if (status != 200) {
		kube_status_err(&e, status, body, "read the sandbox's PVC");
		finish(o, &e, NULL);
		return;
	}
	if (json_object_get(json_object_get(body, "metadata"),
	    "deletionTimestamp") != NULL) {
		/* being destroyed: no sandbox to stop */
		sbx_err_set(&e, SBX_E_NOT_FOUND, "no sandbox %s", o->id);
		finish(o, &e, NULL);
		return;
	}
	delete_pod(o, 0);
}

/* stop: the pod goes, the PVC stays; no pod: stopped already when the
 * PVC is there, else not_found. */
static void
stop_pvc(struct lop *o, int status, json_t *body, const struct sbx_err *err)
{
	char path[256];

	if (err == NULL && status == 404) {
		/* no pod: is there a PVC (a stopped sandbox)? */
		(void)path;
		find_pvc(o, stop_inspected);
		return;
	}
	if (err == NULL && status == 200) {
		struct kube_pod p;

		kube_pod_seen(o->k, body);
		/* on a lost node no kubelet ends a graceful delete */
		delete_pod(o, kube_pod_read(body, &p) == 0 && p.lost);
		return;
	}
	stop_inspected(o, status, body, err);
}

static void
stop_inspect(struct lop *o)
{
	find_pod(o, stop_pvc);
}

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lop *o = arg;
	struct kube_pod *p;

	(void)fd;
	(void)what;
	if (o->early.code[0] != '\0') {
		struct sbx_err e = o->early;

		finish(o, &e, NULL);
		return;
	}
	switch (o->kind) {
	case L_ENSURE:
		/* warm: the watch saw it Running with this image and egress */
		p = kube_pod_find(o->k, o->id);
		if (o->k->synced && p != NULL && !p->deleting && !p->lost &&
		    strcmp(p->phase, "Running") == 0 &&
		    strcmp(p->image, o->image) == 0 && p->egress == o->egress) {
			finish(o, NULL, p);
			return;
		}
		inspect(o);
		return;
	case L_STOP:
		stop_inspect(o);
		return;
	case L_DESTROY:
		find_pod(o, destroy_found);
		return;
	}
}

static struct lop *
lop_new(struct sbx_driver *d, enum lkind kind, const char *id,
    struct sbx_err *err)
{
	struct kube *k = (struct kube *)d;
	struct lop *o;

	if (!sbx_id_valid(id)) {
		sbx_err_bad_id(err);
		return NULL;
	}
	if ((o = calloc(1, sizeof(*o))) == NULL ||
	    (o->kick = evtimer_new(k->drv.base, kick_cb, o)) == NULL) {
		free(o);
		sbx_err_oom(err);
		return NULL;
	}
	o->op.driver = d;
	o->cls = KUBE_OP_LIFE;
	o->k = k;
	o->kind = kind;
	snprintf(o->id, sizeof(o->id), "%s", id);
	sbx_err_clear(&o->early);
	kube_watch_start(k);
	return o;
}

struct sbx_op *
kube_ensure(struct sbx_driver *d, const char *id, const struct sbx_spec *spec,
    sbx_status_cb cb, void *arg, struct sbx_err *err)
{
	struct kube *k = (struct kube *)d;
	const char *image = spec->image != NULL && *spec->image != '\0' ?
	    spec->image : k->image;
	int64_t mcpu = spec->nano_cpus > 0 ? spec->nano_cpus / 1000000 : k->mcpu;
	struct lop *o;
	size_t i;
	int ok = strcmp(image, k->image) == 0;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	for (i = 0; !ok && k->images != NULL && k->images[i] != NULL; i++)
		ok = strcmp(image, k->images[i]) == 0;
	if (!ok) {
		sbx_err_set(err, SBX_E_IMAGE_NOT_ALLOWED, "image %.200s is not in "
		    "the allowlist", image);
		return NULL;
	}
	if (spec->memory_bytes > k->memory || mcpu > k->mcpu ||
	    (spec->nano_cpus > 0 && mcpu < 1)) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "memory or cpus above the "
		    "driver's limits (memory %" PRId64 " bytes, %" PRId64
		    " millicpus)", k->memory, k->mcpu);
		return NULL;
	}
	if (spec->egress && (k->egress_cidrs == NULL || *k->egress_cidrs == '\0')) {
		sbx_err_set(err, SBX_E_FORBIDDEN, "egress is not granted on this "
		    "kubernetes driver (kube_egress_cidrs is empty)");
		return NULL;
	}
	if ((o = lop_new(d, L_ENSURE, id, err)) == NULL)
		return NULL;
	snprintf(o->image, sizeof(o->image), "%s", image);
	o->egress = spec->egress != 0;
	o->memory = spec->memory_bytes > 0 ? spec->memory_bytes : k->memory;
	o->mcpu = mcpu;
	o->scb = cb;
	o->arg = arg;
	event_active(o->kick, EV_TIMEOUT, 0);
	return &o->op;
}

/* stop and destroy: an op of kind that ends in cb, started on the next turn. */
static struct sbx_op *
done_op(struct sbx_driver *d, enum lkind kind, const char *id, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	struct lop *o = lop_new(d, kind, id, err);

	if (o == NULL)
		return NULL;
	o->dcb = cb;
	o->arg = arg;
	event_active(o->kick, EV_TIMEOUT, 0);
	return &o->op;
}

struct sbx_op *
kube_stop(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return done_op(d, L_STOP, id, cb, arg, err);
}

struct sbx_op *
kube_destroy(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return done_op(d, L_DESTROY, id, cb, arg, err);
}
