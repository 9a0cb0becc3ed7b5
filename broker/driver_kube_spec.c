/*
 * driver_kube_spec.c - the Kubernetes objects of one sandbox (Pod, PVC
 * "work-ID", NetworkPolicy, the pods' ServiceAccount) as JSON, and a Pod
 * read back. Pure: no I/O, calls nothing of the other driver_kube files
 * (adr/0072 says why each field is what it is).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "driver_kube_int.h"
#include "sbx_proto.h"

/* A sandbox's labels, or a pool member's (id NULL). */
static json_t *
labels(const char *id)
{
	if (id == NULL)
		return json_pack("{s:s,s:s}", KUBE_L_POOL, "true", KUBE_L_MANAGED,
		    "true");
	return json_pack("{s:s,s:s}", KUBE_L_ID, id, KUBE_L_MANAGED, "true");
}

json_t *
kube_spec_pool_netpol(void)
{
	return json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:{s:{s:s}},s:[s,s],"
	    "s:[],s:[]}}", "apiVersion", "networking.k8s.io/v1", "kind",
	    "NetworkPolicy", "metadata", "name", "sbx-pool", "labels",
	    KUBE_L_MANAGED, "true", "spec", "podSelector", "matchLabels",
	    KUBE_L_POOL, "true", "policyTypes", "Ingress", "Egress", "ingress",
	    "egress");
}

json_t *
kube_spec_claim(const char *id)
{
	return json_pack("[{s:s,s:s,s:s},{s:s,s:s},{s:s,s:s,s:s}]",
	    "op", "test", "path", "/metadata/labels/sbx.dev~1pool", "value",
	    "true", "op", "remove", "path", "/metadata/labels/sbx.dev~1pool",
	    "op", "add", "path", "/metadata/labels/sbx.dev~1id", "value", id);
}

json_t *
kube_list_pick(json_t *list)
{
	json_t *it;
	size_t i;

	json_array_foreach(json_object_get(list, "items"), i, it)
		if (json_object_get(json_object_get(it, "metadata"),
		    "deletionTimestamp") == NULL)
			return it;
	return json_array_get(json_object_get(list, "items"), 0);
}

json_t *
kube_spec_sa(void)
{
	return json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:b}", "apiVersion", "v1",
	    "kind", "ServiceAccount", "metadata", "name", KUBE_SA, "labels",
	    KUBE_L_MANAGED, "true", "automountServiceAccountToken", 0);
}

json_t *
kube_spec_pvc(const struct kube *k, const char *id, const char *hex)
{
	char name[96];
	json_t *o, *spec;

	if (id == NULL)
		snprintf(name, sizeof(name), "work-" KUBE_POOL_TAG "%s", hex);
	else
		snprintf(name, sizeof(name), "work-%s", id);
	o = json_pack("{s:s,s:s,s:{s:s,s:o},s:{s:[s],s:{s:{s:s}}}}",
	    "apiVersion", "v1", "kind", "PersistentVolumeClaim",
	    "metadata", "name", name, "labels", labels(id),
	    "spec", "accessModes", "ReadWriteOnce", "resources", "requests",
	    "storage", k->work_size);
	if (o != NULL && k->storage_class != NULL && *k->storage_class != '\0' &&
	    (spec = json_object_get(o, "spec")) != NULL)
		json_object_set_new(spec, "storageClassName",
		    json_string(k->storage_class));
	return o;
}

/* Deny all in and out; egress: one rule to each configured CIDR. */
json_t *
kube_spec_netpol(const struct kube *k, const char *id, int egress)
{
	char name[80];
	json_t *o, *rules, *to;
	char cidrs[1024], *save = NULL, *c;

	snprintf(name, sizeof(name), "sbx-%s", id);
	rules = json_array();
	if (egress && k->egress_cidrs != NULL && rules != NULL) {
		to = json_array();
		snprintf(cidrs, sizeof(cidrs), "%s", k->egress_cidrs);
		for (c = strtok_r(cidrs, ",", &save); c != NULL && to != NULL;
		    c = strtok_r(NULL, ",", &save))
			json_array_append_new(to, json_pack("{s:{s:s}}", "ipBlock",
			    "cidr", c));
		json_array_append_new(rules, json_pack("{s:o}", "to", to));
	}
	o = json_pack("{s:s,s:s,s:{s:s,s:o},s:{s:{s:{s:s}},s:[s,s],s:[],s:o}}",
	    "apiVersion", "networking.k8s.io/v1", "kind", "NetworkPolicy",
	    "metadata", "name", name, "labels", labels(id),
	    "spec", "podSelector", "matchLabels", KUBE_L_ID, id,
	    "policyTypes", "Ingress", "Egress", "ingress", "egress", rules);
	return o;
}

static json_t *
ctr_security(void)
{
	return json_pack("{s:b,s:b,s:b,s:{s:[s]}}", "runAsNonRoot", 1,
	    "allowPrivilegeEscalation", 0, "readOnlyRootFilesystem", 1,
	    "capabilities", "drop", "ALL");
}

json_t *
kube_spec_pod(const struct kube *k, const char *id, const char *hex,
    const char *pvc, const char *image, int egress, int64_t memory,
    int64_t mcpu)
{
	char name[96], mem[32], cpu[32];
	json_t *lab = labels(id);

	if (id == NULL)
		snprintf(name, sizeof(name), "sbx-" KUBE_POOL_TAG "%s", hex);
	else
		snprintf(name, sizeof(name), "sbx-%s", id);
	snprintf(mem, sizeof(mem), "%lld", (long long)memory);
	snprintf(cpu, sizeof(cpu), "%lldm", (long long)mcpu);
	if (lab != NULL)
		json_object_set_new(lab, "sbx.dev/egress", json_string(egress ?
		    "1" : "0"));
	return json_pack("{s:s,s:s,"
	    "s:{s:s,s:o,s:{s:s}},"
	    "s:{s:s,s:b,s:s,s:b,"
	    "s:{s:b,s:i,s:i,s:i,s:{s:s}},"
	    "s:[{s:s,s:s,s:[s,s,s],s:o,s:[{s:s,s:s},{s:s,s:s}]}],"
	    "s:[{s:s,s:s,s:[s],s:[s],s:s,s:o,"
	    "s:{s:{s:s,s:s},s:{s:s,s:s}},"
	    "s:[{s:s,s:s,s:b},{s:s,s:s},{s:s,s:s},{s:s,s:s}]}],"
	    "s:[{s:s,s:{s:s}},{s:s,s:{}},{s:s,s:{s:s}},{s:s,s:{s:s}}]}}",
	    "apiVersion", "v1", "kind", "Pod",
	    "metadata", "name", name, "labels", lab,
	    "annotations", "sbx.dev/image", image,
	    "spec", "serviceAccountName", KUBE_SA,
	    "automountServiceAccountToken", 0, "restartPolicy", "Never",
	    "enableServiceLinks", 0,
	    "securityContext", "runAsNonRoot", 1, "runAsUser", 1000,
	    "runAsGroup", 1000, "fsGroup", 1000, "seccompProfile", "type",
	    "RuntimeDefault",
	    "initContainers", "name", "sbx-helper", "image", k->helper_image,
	    "command", "/sbx-helper", "install", SBX_HELPER_DIR,
	    "securityContext", ctr_security(),
	    "volumeMounts", "name", "sbx", "mountPath", SBX_HELPER_DIR,
	    "name", "work", "mountPath", SBX_WORK_DIR,
	    "containers", "name", "sandbox", "image", image,
	    "command", SBX_HELPER_PATH, "args", "idle", "workingDir", SBX_WORK_DIR,
	    "securityContext", ctr_security(),
	    "resources", "limits", "memory", mem, "cpu", cpu,
	    "requests", "memory", mem, "cpu", cpu,
	    "volumeMounts", "name", "sbx", "mountPath", SBX_HELPER_DIR,
	    "readOnly", 1, "name", "work", "mountPath", SBX_WORK_DIR,
	    "name", "tmp", "mountPath", "/tmp", "name", "run", "mountPath",
	    "/run/sbx",
	    "volumes", "name", "work", "persistentVolumeClaim", "claimName", pvc,
	    "name", "sbx", "emptyDir", "name", "tmp", "emptyDir", "medium",
	    "Memory", "name", "run", "emptyDir", "medium", "Memory");
}

/* RFC 3339 "2026-12-02T10:00:00Z" -> ms, 0 when unreadable. */
static int64_t
rfc3339_ms(const char *s)
{
	struct tm tm;

	if (s == NULL)
		return 0;
	memset(&tm, 0, sizeof(tm));
	if (strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) == NULL)
		return 0;
	return (int64_t)timegm(&tm) * 1000;
}

/* A waiting reason no retry cures soon: the ensure fails with it rather
 * than wait for kube_start_timeout. */
static void
stuck_reason(json_t *statuses, struct kube_pod *p)
{
	static const char *const stuck[] = { "ErrImagePull", "ImagePullBackOff",
	    "InvalidImageName", "CreateContainerConfigError",
	    "CreateContainerError", NULL };
	json_t *cs;
	size_t i, j;

	json_array_foreach(statuses, i, cs) {
		const char *r = json_string_value(json_object_get(json_object_get(
		    json_object_get(cs, "state"), "waiting"), "reason"));

		for (j = 0; r != NULL && stuck[j] != NULL; j++)
			if (strcmp(r, stuck[j]) == 0 && p->stuck[0] == '\0')
				snprintf(p->stuck, sizeof(p->stuck), "%s", r);
	}
}

/* PodScheduled False (the scheduler found no node: "0/1 nodes are
 * available: 1 Insufficient cpu. ..."): its message, or its reason. */
static void
unsched_reason(json_t *conds, struct kube_pod *p)
{
	size_t i;
	json_t *c;

	json_array_foreach(conds, i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));
		const char *st = json_string_value(json_object_get(c, "status"));
		const char *m = json_string_value(json_object_get(c, "message"));

		if (m == NULL)
			m = json_string_value(json_object_get(c, "reason"));
		if (t != NULL && strcmp(t, "PodScheduled") == 0 &&
		    st != NULL && strcmp(st, "False") == 0 && m != NULL)
			snprintf(p->unsched, sizeof(p->unsched), "%s", m);
	}
}

static int pod_fill(json_t *pod, struct kube_pod *p);

/* 1 when pod's condition type has status st. */
static int
cond_is(json_t *pod, const char *type, const char *st)
{
	json_t *c;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(pod, "status"),
	    "conditions"), i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));
		const char *s = json_string_value(json_object_get(c, "status"));

		if (t != NULL && s != NULL && strcmp(t, type) == 0)
			return strcmp(s, st) == 0;
	}
	return 0;
}

int
kube_pod_read(json_t *pod, struct kube_pod *p)
{
	json_t *md = json_object_get(pod, "metadata");
	json_t *lab = json_object_get(md, "labels");
	const char *id = json_string_value(json_object_get(lab, KUBE_L_ID));
	const char *m = json_string_value(json_object_get(lab, KUBE_L_MANAGED));
	const char *kind = json_string_value(json_object_get(pod, "kind"));

	memset(p, 0, sizeof(*p));
	if ((kind != NULL && strcmp(kind, "Pod") != 0) || id == NULL || m == NULL || strcmp(m, "true") != 0 ||
	    strlen(id) >= sizeof(p->id))
		return -1;
	snprintf(p->id, sizeof(p->id), "%s", id);
	return pod_fill(pod, p);
}

int
kube_member_read(json_t *pod, struct kube_pod *p)
{
	json_t *lab = json_object_get(json_object_get(pod, "metadata"), "labels");
	const char *m = json_string_value(json_object_get(lab, KUBE_L_MANAGED));
	const char *pool = json_string_value(json_object_get(lab, KUBE_L_POOL));
	const char *kind = json_string_value(json_object_get(pod, "kind"));

	memset(p, 0, sizeof(*p));
	if ((kind != NULL && strcmp(kind, "Pod") != 0) ||
	    json_object_get(lab, KUBE_L_ID) != NULL || m == NULL ||
	    strcmp(m, "true") != 0 || pool == NULL || strcmp(pool, "true") != 0)
		return -1;
	return pod_fill(pod, p);
}

/* Everything but the id of a pod of ours into *p; 0. */
static int
pod_fill(json_t *pod, struct kube_pod *p)
{
	json_t *md = json_object_get(pod, "metadata");
	json_t *lab = json_object_get(md, "labels");
	json_t *v;
	const char *s;
	size_t i;

	s = json_string_value(json_object_get(md, "name"));
	snprintf(p->name, sizeof(p->name), "%s", s != NULL ? s : "");
	json_array_foreach(json_object_get(json_object_get(pod, "spec"),
	    "volumes"), i, v) {
		const char *vn = json_string_value(json_object_get(v, "name"));

		s = json_string_value(json_object_get(json_object_get(v,
		    "persistentVolumeClaim"), "claimName"));
		if (s != NULL && vn != NULL && strcmp(vn, "work") == 0)
			snprintf(p->pvc, sizeof(p->pvc), "%s", s);
	}
	s = json_string_value(json_object_get(md, "uid"));
	snprintf(p->uid, sizeof(p->uid), "%s", s != NULL ? s : "");
	s = json_string_value(json_object_get(json_object_get(pod, "status"),
	    "phase"));
	snprintf(p->phase, sizeof(p->phase), "%s", s != NULL ? s : "Pending");
	s = json_string_value(json_object_get(json_object_get(pod, "spec"),
	    "nodeName"));
	snprintf(p->node, sizeof(p->node), "%s", s != NULL ? s : "");
	p->deleting = json_object_get(md, "deletionTimestamp") != NULL &&
	    !json_is_null(json_object_get(md, "deletionTimestamp"));
	p->created_ms = rfc3339_ms(json_string_value(json_object_get(md,
	    "creationTimestamp")));
	s = json_string_value(json_object_get(json_object_get(md,
	    "annotations"), "sbx.dev/image"));
	snprintf(p->image, sizeof(p->image), "%s", s != NULL ? s : "");
	s = json_string_value(json_object_get(lab, "sbx.dev/egress"));
	p->egress = s != NULL && strcmp(s, "1") == 0;
	p->lost = strcmp(p->phase, "Running") == 0 &&
	    cond_is(pod, "ContainersReady", "True") &&
	    (cond_is(pod, "Ready", "False") || cond_is(pod, "Ready", "Unknown"));
	unsched_reason(json_object_get(json_object_get(pod, "status"),
	    "conditions"), p);
	stuck_reason(json_object_get(json_object_get(pod, "status"),
	    "initContainerStatuses"), p);
	stuck_reason(json_object_get(json_object_get(pod, "status"),
	    "containerStatuses"), p);
	return 0;
}

void
kube_pod_status(const struct kube_pod *p, struct sbx_status *st)
{
	snprintf(st->id, sizeof(st->id), "%s", p->id);
	snprintf(st->image, sizeof(st->image), "%s", p->image);
	snprintf(st->container_id, sizeof(st->container_id), "%s", p->uid);
	st->egress = p->egress;
	st->created_at_ms = p->created_ms;
	if (p->lost) {
		/* its node stopped answering: whatever it ran is out of reach
		 * (adr/0072, amendment of session 11) */
		st->state = SBX_STATE_STOPPED;
		snprintf(st->stop_reason, sizeof(st->stop_reason), "lost");
	} else if (strcmp(p->phase, "Running") == 0 && !p->deleting)
		st->state = SBX_STATE_RUNNING;
	else {
		st->state = SBX_STATE_STOPPED;
		snprintf(st->stop_reason, sizeof(st->stop_reason), "%s",
		    p->deleting ? "stopping" : strcmp(p->phase, "Pending") == 0 ?
		    "starting" : "exited");
	}
}
