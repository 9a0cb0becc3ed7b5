/*
 * driver_kube_query.c - the kubernetes driver's status, list_sandboxes and
 * health: lists by label sbx.dev/id of the pod (and the PVC, for a stopped
 * sandbox), the
 * labelled pods and PVCs, and /version. Uses the REST client and the Pod
 * reader; changes nothing on the server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "driver_kube_int.h"
#include "sbx_path.h"
#include "sbx_proto.h"

enum qkind { Q_STATUS, Q_LIST, Q_HEALTH };

struct qop {
	struct sbx_op op;             /* first */
	int cls;                      /* KUBE_OP_QUERY */
	struct kube *k;
	enum qkind kind;
	char id[64];
	sbx_status_cb scb;
	sbx_sandboxes_cb lcb;
	sbx_health_cb hcb;
	void *arg;
	struct kube_http *h;
	struct event *kick;
	json_t *pods;                 /* list: the pods' answer */
};

static void
qop_free(struct qop *o)
{
	kube_http_cancel(o->h);
	if (o->kick != NULL)
		event_free(o->kick);
	json_decref(o->pods);
	free(o);
}

void
kube_query_cancel(struct sbx_op *op)
{
	qop_free((struct qop *)op);
}

static void
q_fail(struct qop *o, const struct sbx_err *e)
{
	if (o->kind == Q_STATUS)
		o->scb(o->arg, e, NULL);
	else if (o->kind == Q_LIST)
		o->lcb(o->arg, e, NULL, 0);
	else {
		struct sbx_health h;

		memset(&h, 0, sizeof(h));
		snprintf(h.status, sizeof(h.status), "degraded");
		snprintf(h.reason, sizeof(h.reason), "%s", e->message);
		snprintf(h.runtime, sizeof(h.runtime), "Kubernetes");
		o->hcb(o->arg, NULL, &h);
	}
	qop_free(o);
}

static int
q_call(struct qop *o, const char *path,
    void (*done)(void *, int, json_t *, const struct sbx_err *))
{
	struct kube_http_cbs cbs = { done, NULL, NULL, o };
	struct sbx_err e;

	if ((o->h = kube_http_start(o->k, "GET", path, NULL, NULL, NULL,
	    o->k->req_to, &cbs, &e)) == NULL) {
		q_fail(o, &e);
		return -1;
	}
	return 0;
}

/* status: no pod; a PVC that is not being deleted is a stopped sandbox. */
static void
pvc_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct qop *o = arg;
	struct sbx_status st;
	struct sbx_err e;

	o->h = NULL;
	if (err != NULL) {
		q_fail(o, err);
		return;
	}
	if (status != 200 && status != 404) {
		kube_status_err(&e, status, body, "read the sandbox's PVC");
		q_fail(o, &e);
		return;
	}
	memset(&st, 0, sizeof(st));
	snprintf(st.id, sizeof(st.id), "%s", o->id);
	body = status == 200 ? kube_list_pick(body) : NULL;
	if (body != NULL && json_object_get(json_object_get(body, "metadata"),
	    "deletionTimestamp") == NULL) {
		st.state = SBX_STATE_STOPPED;
		snprintf(st.stop_reason, sizeof(st.stop_reason), "%s",
		    kube_lost_has(o->k, o->id) ? "lost" : "stopped");
	}
	o->scb(o->arg, NULL, &st);
	qop_free(o);
}

static void
pod_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct qop *o = arg;
	struct sbx_status st;
	struct kube_pod p;
	struct sbx_err e;
	char path[256];

	o->h = NULL;
	if (err != NULL) {
		q_fail(o, err);
		return;
	}
	if (status != 200) {
		kube_status_err(&e, status, body, "read the sandbox's pod");
		q_fail(o, &e);
		return;
	}
	/* found by label: a claimed pool member keeps its name */
	if ((body = kube_list_pick(body)) == NULL) {
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
		    "persistentvolumeclaims?labelSelector=sbx.dev%%2Fid%%3D%s",
		    o->k->ns, o->id);
		q_call(o, path, pvc_done);
		return;
	}
	memset(&st, 0, sizeof(st));
	snprintf(st.id, sizeof(st.id), "%s", o->id);
	if (kube_pod_read(body, &p) == 0)
		kube_pod_status(&p, &st);
	o->scb(o->arg, NULL, &st);
	qop_free(o);
}

/* list: pods, then PVCs without a pod (stopped sandboxes). */
static void
pvcs_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct qop *o = arg;
	json_t *pods = json_object_get(o->pods, "items");
	json_t *pvcs = json_object_get(body, "items"), *it;
	struct sbx_status *sts;
	struct sbx_err e;
	size_t i, n = 0;

	o->h = NULL;
	if (err != NULL) {
		q_fail(o, err);
		return;
	}
	if (status != 200) {
		kube_status_err(&e, status, body, "list the sandboxes' PVCs");
		q_fail(o, &e);
		return;
	}
	sts = calloc(json_array_size(pods) + json_array_size(pvcs) + 1,
	    sizeof(*sts));
	if (sts == NULL) {
		sbx_err_oom(&e);
		q_fail(o, &e);
		return;
	}
	json_array_foreach(pods, i, it) {
		struct kube_pod p;

		if (kube_pod_read(it, &p) == 0)
			kube_pod_status(&p, &sts[n++]);
	}
	json_array_foreach(pvcs, i, it) {
		const char *id = json_string_value(json_object_get(json_object_get(
		    json_object_get(it, "metadata"), "labels"), KUBE_L_ID));
		size_t j;
		int seen = 0;

		if (id == NULL || !sbx_id_valid(id))
			continue;
		for (j = 0; j < n; j++)
			if (strcmp(sts[j].id, id) == 0)
				seen = 1;
		if (seen)
			continue;
		snprintf(sts[n].id, sizeof(sts[n].id), "%s", id);
		sts[n].state = SBX_STATE_STOPPED;
		snprintf(sts[n].stop_reason, sizeof(sts[n].stop_reason), "%s",
		    kube_lost_has(o->k, id) ? "lost" : "stopped");
		n++;
	}
	o->lcb(o->arg, NULL, sts, n);
	free(sts);
	qop_free(o);
}

static void
pods_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct qop *o = arg;
	struct sbx_err e;
	char path[256];

	o->h = NULL;
	if (err != NULL) {
		q_fail(o, err);
		return;
	}
	if (status != 200) {
		kube_status_err(&e, status, body, "list the sandboxes' pods");
		q_fail(o, &e);
		return;
	}
	o->pods = json_incref(body);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/"
	    "persistentvolumeclaims?labelSelector=" KUBE_SELECTOR, o->k->ns);
	q_call(o, path, pvcs_done);
}

static void
version_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct qop *o = arg;
	const char *v = json_string_value(json_object_get(body, "gitVersion"));
	struct sbx_health h;
	struct sbx_err e;

	o->h = NULL;
	if (err != NULL) {
		q_fail(o, err);
		return;
	}
	if (status != 200) {
		kube_status_err(&e, status, body, "GET /version");
		q_fail(o, &e);
		return;
	}
	memset(&h, 0, sizeof(h));
	h.ok = 1;
	snprintf(h.status, sizeof(h.status), "ok");
	snprintf(h.runtime, sizeof(h.runtime), "Kubernetes %s", v != NULL ? v :
	    "(unknown)");
	snprintf(h.api_version, sizeof(h.api_version), "v1");
	o->hcb(o->arg, NULL, &h);
	qop_free(o);
}

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct qop *o = arg;
	char path[256];

	(void)fd;
	(void)what;
	switch (o->kind) {
	case Q_STATUS:
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?"
		    "labelSelector=sbx.dev%%2Fid%%3D%s", o->k->ns, o->id);
		q_call(o, path, pod_done);
		break;
	case Q_LIST:
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?"
		    "labelSelector=" KUBE_SELECTOR, o->k->ns);
		q_call(o, path, pods_done);
		break;
	case Q_HEALTH:
		q_call(o, "/version", version_done);
		break;
	}
}

static struct qop *
qop_new(struct sbx_driver *d, enum qkind kind, void *arg, struct sbx_err *err)
{
	struct kube *k = (struct kube *)d;
	struct qop *o = calloc(1, sizeof(*o));

	if (o == NULL || (o->kick = evtimer_new(k->drv.base, kick_cb, o)) ==
	    NULL) {
		free(o);
		sbx_err_oom(err);
		return NULL;
	}
	o->op.driver = d;
	o->cls = KUBE_OP_QUERY;
	o->k = k;
	o->kind = kind;
	o->arg = arg;
	kube_watch_start(k);
	event_active(o->kick, EV_TIMEOUT, 0);
	return o;
}

struct sbx_op *
kube_status(struct sbx_driver *d, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct qop *o;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if ((o = qop_new(d, Q_STATUS, arg, err)) == NULL)
		return NULL;
	snprintf(o->id, sizeof(o->id), "%s", id);
	o->scb = cb;
	return &o->op;
}

struct sbx_op *
kube_list_sandboxes(struct sbx_driver *d, sbx_sandboxes_cb cb, void *arg,
    struct sbx_err *err)
{
	struct qop *o = qop_new(d, Q_LIST, arg, err);

	if (o == NULL)
		return NULL;
	o->lcb = cb;
	return &o->op;
}

struct sbx_op *
kube_health(struct sbx_driver *d, sbx_health_cb cb, void *arg,
    struct sbx_err *err)
{
	struct qop *o = qop_new(d, Q_HEALTH, arg, err);

	if (o == NULL)
		return NULL;
	o->hcb = cb;
	return &o->op;
}
