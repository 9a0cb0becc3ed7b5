/*
 * driver_kube_sweep.c - the kubernetes driver's reconcile (broker start):
 * PVCs labelled sbx.dev/managed that are being deleted but stay
 * (Terminating on a finalizer) while their pod is gone get their
 * finalizers removed, so they go (issue 27 lesson 2); a pod is the
 * PVC's when it carries the same sbx.dev/id. Then the warm pool's start
 * (its own sweep of unclaimed members, then its fill). Uses the REST
 * client and the pool; touches nothing without our label.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "driver_kube_int.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"

struct sweep {
	struct sbx_op op;             /* first */
	int cls;                      /* KUBE_OP_SWEEP */
	struct kube *k;
	sbx_done_cb cb;
	void *arg;
	struct kube_http *h;
	struct event *kick;
	json_t *ids;                  /* PVCs being deleted: [id, name] each */
	size_t i;
};

static void
sw_free(struct sweep *o)
{
	kube_http_cancel(o->h);
	if (o->kick != NULL)
		event_free(o->kick);
	json_decref(o->ids);
	free(o);
}

void
kube_sweep_cancel(struct sbx_op *op)
{
	sw_free((struct sweep *)op);
}

static void
sw_end(struct sweep *o, const struct sbx_err *err)
{
	if (err == NULL) {
		kube_watch_start(o->k);  /* the pool learns of its members there */
		kube_pool_start(o->k);   /* its own sweep, then its fill */
	}
	o->cb(o->arg, err);
	sw_free(o);
}

static void sw_next(struct sweep *o);

static int
sw_call(struct sweep *o, const char *method, const char *path, json_t *body,
    const char *ctype, void (*done)(void *, int, json_t *, const struct sbx_err *))
{
	struct kube_http_cbs cbs = { done, NULL, NULL, o };
	struct sbx_err e;

	o->h = kube_http_start(o->k, method, path, body, ctype, NULL,
	    o->k->req_to, &cbs, &e);
	json_decref(body);
	if (o->h == NULL) {
		sw_end(o, &e);
		return -1;
	}
	return 0;
}

static void
patched(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct sweep *o = arg;
	struct sbx_err e;

	o->h = NULL;
	if (err != NULL) {
		sw_end(o, err);
		return;
	}
	if (status != 200 && status != 404) {
		kube_status_err(&e, status, body, "remove the finalizers of a "
		    "Terminating PVC");
		sw_end(o, &e);
		return;
	}
	log_info("kubernetes: a Terminating PVC whose pod is gone had its "
	    "finalizers removed", "id", json_string_value(json_array_get(
	    json_array_get(o->ids, o->i), 0)), NULL);
	o->i++;
	sw_next(o);
}

static void
pod_checked(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct sweep *o = arg;
	char path[256];

	o->h = NULL;
	if (err != NULL) {
		sw_end(o, err);
		return;
	}
	if (status != 200 || json_array_size(json_object_get(body, "items")) > 0) {
		/* a pod still has it: it goes with the pod */
		o->i++;
		sw_next(o);
		return;
	}
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
	    "persistentvolumeclaims/%s", o->k->ns,
	    json_string_value(json_array_get(json_array_get(o->ids, o->i), 1)));
	sw_call(o, "PATCH", path, json_pack("{s:{s:n}}", "metadata",
	    "finalizers"), "application/merge-patch+json", patched);
}

static void
sw_next(struct sweep *o)
{
	char path[256];

	if (o->i >= json_array_size(o->ids)) {
		sw_end(o, NULL);
		return;
	}
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?labelSelector="
	    "sbx.dev%%2Fid%%3D%s", o->k->ns, json_string_value(json_array_get(
	    json_array_get(o->ids, o->i), 0)));
	sw_call(o, "GET", path, NULL, NULL, pod_checked);
}

static void
listed(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct sweep *o = arg;
	json_t *it;
	struct sbx_err e;
	size_t i;

	o->h = NULL;
	if (err != NULL) {
		sw_end(o, err);
		return;
	}
	if (status != 200) {
		kube_status_err(&e, status, body, "list the sandboxes' PVCs");
		sw_end(o, &e);
		return;
	}
	json_array_foreach(json_object_get(body, "items"), i, it) {
		json_t *md = json_object_get(it, "metadata");
		const char *id = json_string_value(json_object_get(
		    json_object_get(md, "labels"), KUBE_L_ID));

		const char *name = json_string_value(json_object_get(md, "name"));

		if (id != NULL && sbx_id_valid(id) && name != NULL &&
		    strlen(name) < 128 &&
		    json_object_get(md, "deletionTimestamp") != NULL)
			json_array_append_new(o->ids, json_pack("[s,s]", id, name));
	}
	sw_next(o);
}

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sweep *o = arg;
	char path[256];

	(void)fd;
	(void)what;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
	    "persistentvolumeclaims?labelSelector=" KUBE_SELECTOR, o->k->ns);
	sw_call(o, "GET", path, NULL, NULL, listed);
}

struct sbx_op *
kube_reconcile(struct sbx_driver *d, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct kube *k = (struct kube *)d;
	struct sweep *o = calloc(1, sizeof(*o));

	if (o == NULL || (o->ids = json_array()) == NULL ||
	    (o->kick = evtimer_new(k->drv.base, kick_cb, o)) == NULL) {
		if (o != NULL)
			sw_free(o);
		sbx_err_oom(err);
		return NULL;
	}
	o->op.driver = d;
	o->cls = KUBE_OP_SWEEP;
	o->k = k;
	o->cb = cb;
	o->arg = arg;
	event_active(o->kick, EV_TIMEOUT, 0);
	return &o->op;
}
