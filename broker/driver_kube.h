/* driver_kube.h - the SandboxDriver on a Kubernetes API server (driver = kubernetes, adr/0072): its configuration, constructor and what it does. */
#ifndef DRIVER_KUBE_H
#define DRIVER_KUBE_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_driver.h"

/*
 * Kubernetes driver configuration (broker keys kube_*, docs/security.md).
 * Every pointer is borrowed for sbx_kube_driver_new() only. Zero or NULL
 * fields take the default in brackets.
 */
struct sbx_kube_config {
	const char *server;          /* "https://HOST:PORT" of the API server (required) */
	const char *ca_file;         /* PEM of the CA that signed the server's
	                              * certificate (required; verified, host
	                              * name or IP checked) */
	const char *token_file;      /* the ServiceAccount's bearer token
	                              * (required; read at start, again after a
	                              * 401; never logged) */
	const char *namespace_;      /* where every object lives ["sbx"] */
	const char *default_image;   /* image when a spec names none (required) */
	const char *const *images;   /* NULL-terminated allowlist [only the default] */
	const char *helper_image;    /* image holding /sbx-helper (static), copied
	                              * into an emptyDir at /.sbx by an init
	                              * container (adr/0072) (required) */
	const char *storage_class;   /* PVC storageClassName [NULL: the cluster's default] */
	const char *work_size;       /* PVC request, a quantity ["1Gi"] */
	int64_t memory_bytes;        /* limits.memory = requests.memory [512 MiB] */
	int64_t milli_cpus;          /* limits.cpu in millicores [1000] */
	int64_t exec_timeout_ms;     /* default exec timeout [30 s] */
	int64_t exec_timeout_max_ms; /* most a caller may ask for [10 min] */
	int64_t exec_output_cap;     /* stdout+stderr bytes per exec [16 MiB] */
	int64_t file_max_bytes;      /* read/write cap [64 MiB] */
	int64_t request_timeout_ms;  /* each non-watch API call [30 s] */
	int64_t start_timeout_ms;    /* ensure: pod created -> Running [120 s] */
	int64_t force_after_ms;      /* a pod still terminating this long after
	                              * its delete, on a node not Ready, is
	                              * deleted with gracePeriodSeconds=0 [30 s] */
	int64_t agent_ping_ms;       /* keepalive of each exec channel [5 s] */
	const char *egress_cidrs;    /* comma-separated CIDRs an egress sandbox's
	                              * NetworkPolicy allows [NULL: egress refused,
	                              * forbidden] */
	int warm_pool;               /* members made ahead (0..64) [0]; the
	                              * broker's start deletes unclaimed ones of
	                              * an earlier life whatever it is */
};

/*
 * What the driver does (Kubernetes REST API v1 and networking.k8s.io/v1;
 * every call over TLS with the bearer token, one connection per call):
 *
 * Objects of sandbox ID, all in the namespace, all labelled
 * sbx.dev/managed=true and sbx.dev/id=ID: Pod "sbx-ID", PVC "work-ID"
 * (ReadWriteOnce, work_size, storage_class), NetworkPolicy "sbx-ID"
 * (podSelector sbx.dev/id=ID; Ingress+Egress with no rule: deny all; an
 * egress sandbox gets one egress rule to egress_cidrs). One
 * ServiceAccount "sbx-sandbox" (automountServiceAccountToken false) the
 * pods run as, created by the first ensure when missing.
 *
 * The pod: restartPolicy Never, runAsNonRoot, uid/gid/fsGroup 1000,
 * seccomp RuntimeDefault, every container with capabilities drop ALL,
 * allowPrivilegeEscalation false, readOnlyRootFilesystem true; an init
 * container of helper_image copying /sbx-helper into the emptyDir "sbx"
 * (read-only at /.sbx in the sandbox); emptyDirs at /tmp and /run/sbx;
 * the PVC at /work; the container runs `/.sbx/sbx-helper idle` with
 * limits memory and cpu.
 *
 * ensure: image and limits checked before any call; the pod (by label):
 * Running -> its status; absent (or Succeeded/Failed: deleted first; on
 * a lost node: deleted with gracePeriodSeconds 0) -> SA, the id's PVC
 * (by label; none: a warm pool member claimed, else "work-ID" made),
 * NetworkPolicy (409 AlreadyExists: replaced), Pod create, then the pod is
 * watched (through the driver's list+watch) until Running
 * (start_timeout_ms: timeout). A pod being deleted is waited for.
 * status: the pod's phase: Running -> running, Pending -> creating,
 * Succeeded/Failed -> stopped (stop_reason "exited"), absent -> absent
 * (stopped "stopped" when its PVC is there, "lost" when the pod went
 * without this driver deleting it); a Running pod whose condition Ready
 * is not True while ContainersReady is (the node-lifecycle controller's
 * mark of a lost node) is stopped, stop_reason "lost", and exec on it
 * answers not_running.
 *
 * exec / read / write / list: streams of sbx-helper modes over the
 * sandbox's ONE agent channel (adr/0025, protocol 4 unchanged): a
 * pods/exec WebSocket (v4.channel.k8s.io: byte 0 of each binary message
 * the stream: 0 stdin, 1 stdout, 2 stderr, 3 status) running
 * `/.sbx/sbx-helper agent`, opened by the first op and kept, pinged every
 * agent_ping_ms. Never one pods/exec per operation.
 *
 * stop: DELETE pod (the PVC stays); absent -> not_found. destroy: DELETE
 * pod, NetworkPolicy, PVC; absent -> ok. A pod whose node is not Ready and
 * that still exists force_after_ms after the delete is deleted again with
 * gracePeriodSeconds 0. reconcile (broker start): a PVC labelled managed
 * that is being deleted while its pod is absent (stuck on a finalizer)
 * gets its finalizers removed (merge patch), so it goes.
 *
 * A sandbox's pod and PVC are found by label sbx.dev/id, not by name: a
 * claimed warm pool member keeps its names "sbx-pool.HEX" and
 * "work-pool.HEX" (pod names cannot change).
 *
 * Warm pool (warm_pool > 0; adr/0072 amendment of session 11): members are
 * pods of the default image with the default limits, no egress, each with
 * its own PVC, labelled sbx.dev/managed and sbx.dev/pool (no sbx.dev/id),
 * under one deny-all NetworkPolicy "sbx-pool"; made one at a time after
 * the start's sweep (reconcile) deleted every unclaimed member of an
 * earlier life. An ensure of an id with no pod and no PVC, with that
 * spec, claims a Running member: creates the id's NetworkPolicy, then
 * JSON-patches the PVC's and the pod's labels (test sbx.dev/pool, remove
 * it, add sbx.dev/id). Nothing ever execs into a member before its
 * claim; its /work and /tmp are its own. The pool refills behind.
 *
 * Watch (driver_kube_watch.c): list pods with the label selector, then
 * watch from its resourceVersion with allowWatchBookmarks; a 410 (or an
 * ERROR event with code 410) relists; a cut stream re-watches from the
 * last version seen. The cache answers status and list_sandboxes.
 *
 * Errors: the API server unreachable -> runtime_unavailable; 403 ->
 * forbidden with the server's message; other statuses -> runtime_error
 * with the server's message; each call bounded by request_timeout_ms.
 */

/*
 * A kubernetes driver on base. Checks the configuration, reads the token
 * and the CA (SSL_CTX), contacts nothing (health does). Returns the driver
 * or NULL with err bad_request (naming the field: a missing required one,
 * a server not https://HOST:PORT, an unreadable CA or token file), or
 * internal (out of memory).
 */
struct sbx_driver *sbx_kube_driver_new(struct event_base *base,
    const struct sbx_kube_config *cfg, struct sbx_err *err);

extern const struct sbx_driver_ops sbx_kube_driver_ops;

/*
 * --check: asks the server (SelfSubjectAccessReview, authorization.k8s.io/v1)
 * for each verb the driver needs in the namespace and writes one sentence
 * per missing permission into out ("the broker cannot VERB RESOURCE in
 * namespace NS: add it to its Role"), nothing when all are granted. cb gets
 * err NULL and the number of missing permissions, or err when the server
 * cannot be asked.
 */
typedef void (*sbx_kube_check_cb)(void *arg, const struct sbx_err *err,
    int missing);
int sbx_kube_check_rbac(struct sbx_driver *d, struct evbuffer *out,
    sbx_kube_check_cb cb, void *arg, struct sbx_err *err);

#endif
