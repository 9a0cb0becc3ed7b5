/*
 * driver_kube_int.h - private to broker/driver_kube*.c: the driver's state,
 * the TLS REST client, the object specs, the exec channel and the watch
 * cache each file offers the others (adr/0072).
 */
#ifndef DRIVER_KUBE_INT_H
#define DRIVER_KUBE_INT_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <openssl/ssl.h>

#include "driver_kube.h"
#include "sbx_err.h"
#include "sbx_types.h"

struct bufferevent;
struct evbuffer;
struct kube_chan;
struct kube_pool;

#define KUBE_SA "sbx-sandbox"            /* the pods' ServiceAccount */
#define KUBE_L_ID "sbx.dev/id"
#define KUBE_L_MANAGED "sbx.dev/managed"
#define KUBE_L_POOL "sbx.dev/pool"       /* an unclaimed warm pool member */
/* Names of a member: "sbx-pool.HEX", "work-pool.HEX"; a '.' no sandbox id
 * holds, so they never meet "sbx-ID" or "work-ID". */
#define KUBE_POOL_TAG "pool."
/* labelSelector=sbx.dev/managed=true, escaped, for a printf format */
#define KUBE_SELECTOR "sbx.dev%%2Fmanaged%%3Dtrue"

/* One pod as the watch last saw it. */
struct kube_pod {
	TAILQ_ENTRY(kube_pod) link;
	char id[64];                  /* "" for a pool member */
	char name[128];               /* metadata.name: "sbx-ID", or the
	                               * member's "sbx-pool.HEX" once claimed */
	char pvc[128];                /* claimName of its volume "work" */
	char uid[64];
	char phase[16];               /* Pending, Running, Succeeded, Failed */
	char node[128];
	int deleting;                 /* metadata.deletionTimestamp set */
	int64_t created_ms;
	char image[256];
	int egress;
	char stuck[64];               /* a container waiting for a reason that
	                               * will not pass (ErrImagePull...), or "" */
	int lost;                     /* its node was lost: condition Ready not
	                               * True while ContainersReady is True (only
	                               * the node-lifecycle controller's
	                               * MarkPodsNotReady leaves them apart) */
	int ours;                     /* this driver asked for its delete */
	char unsched[192];            /* condition PodScheduled False: the
	                               * scheduler's message (truncated), or "" */
};

/* A sandbox whose pod went without this driver deleting it (its node
 * lost, then the pod force-deleted or garbage-collected): status says
 * stopped, stop_reason "lost", until the next ensure, stop or destroy. */
struct kube_lost {
	TAILQ_ENTRY(kube_lost) link;
	char id[64];
};

/* A waiter for a pod to reach Running (ensure), answered by the watch. */
struct kube_wait {
	TAILQ_ENTRY(kube_wait) link;
	char id[64];
	int gone_only;
	void (*cb)(void *arg, const struct kube_pod *p); /* p NULL: gone */
	void *arg;
};

struct kube {
	struct sbx_driver drv;        /* first */
	SSL_CTX *ssl;
	char host[256];
	char port[8];
	char *token;                  /* secret: never logged */
	char *token_file;
	char *ns;
	char *image;
	char **images;
	char *helper_image;
	char *storage_class;
	char *work_size;
	char *egress_cidrs;
	int64_t memory, mcpu, exec_to, exec_to_max, out_cap, file_max;
	int64_t req_to, start_to, force_after, ping_ms;
	struct kube_pool *pool;       /* driver_kube_pool.c; NULL: none wanted
	                               * (its start's sweep still runs) */
	int sa_ok;                    /* the ServiceAccount exists */
	/* watch cache (driver_kube_watch.c) */
	TAILQ_HEAD(, kube_pod) pods;
	TAILQ_HEAD(, kube_wait) waits;
	TAILQ_HEAD(, kube_lost) lost;   /* bounded by the sandboxes of the
	                                 * namespace: one per vanished pod */
	int synced;                   /* one list has been read */
	char rv[64];                  /* last resourceVersion seen */
	struct kube_http *watch;      /* the watch (or list) in flight */
	struct event *rewatch;        /* backoff timer */
	uint64_t relists, relists_410, rewatches, bookmarks; /* counters (tests, bench) */
	/* agent channels (driver_kube_chan.c) */
	TAILQ_HEAD(, kube_chan) chans;
	unsigned long execs_opened;   /* pods/exec streams ever opened */
};

/* ---- driver_kube_http.c: one REST call over TLS ---- */

struct kube_http;
/*
 * done: once, unless cancelled. status the HTTP status (0 with err when
 * no answer), body the parsed JSON (NULL when not JSON or empty;
 * borrowed). For a stream call (line set) done comes at the stream's end
 * and body is NULL; line gets each '\n'-terminated line of the body
 * (without it). upgraded: a 101 to an upgrade call; the connection's bev
 * is handed over (the caller owns it) with the bytes after the head left
 * in its input; done is not called then.
 */
struct kube_http_cbs {
	void (*done)(void *arg, int status, json_t *body, const struct sbx_err *err);
	/* returns 0 to go on, 1 to end the call now (freed, no done) */
	int (*line)(void *arg, const char *line, size_t len);
	void (*upgraded)(void *arg, struct bufferevent *bev, const char *upgrade,
	    const char *connection, const char *accept, const char *protocol);
	void *arg;
};
/*
 * Starts METHOD path (origin-form, already escaped) with the bearer token;
 * body (borrowed, may be NULL) sent as content_type (NULL:
 * application/json). extra: more header lines "Name: value\r\n..." or
 * NULL. timeout_ms 0: none. Returns the handle or NULL with err internal.
 */
struct kube_http *kube_http_start(struct kube *k, const char *method,
    const char *path, json_t *body, const char *content_type,
    const char *extra, int64_t timeout_ms, const struct kube_http_cbs *cbs,
    struct sbx_err *err);
/* Stops and frees a call; no callback afterwards. NULL allowed. */
void kube_http_cancel(struct kube_http *h);
/* err from an API status: 403 forbidden, 404 not_found, 409 conflict,
 * 410 expired (runtime_error), else runtime_error; message = the
 * Status's "message" (or the HTTP status) prefixed by what. */
void kube_status_err(struct sbx_err *err, int status, json_t *body,
    const char *what);
/* Reads the token file again (after a 401); -1 when unreadable. */
int kube_token_reload(struct kube *k);

/* ---- driver_kube_spec.c: the objects (pure) ---- */

/* New JSON objects (NULL out of memory). */
json_t *kube_spec_sa(void);
/* id NULL: a warm pool member named "pool.HEX" by hex (labels
 * sbx.dev/managed and sbx.dev/pool, no sbx.dev/id); else sandbox id's.
 * pvc: the claimName of the pod's /work. */
json_t *kube_spec_pvc(const struct kube *k, const char *id, const char *hex);
json_t *kube_spec_netpol(const struct kube *k, const char *id, int egress);
/* The pool's one deny-all NetworkPolicy "sbx-pool" (podSelector
 * sbx.dev/pool=true): a member is under a policy from its create on. */
json_t *kube_spec_pool_netpol(void);
json_t *kube_spec_pod(const struct kube *k, const char *id, const char *hex,
    const char *pvc, const char *image, int egress, int64_t memory,
    int64_t mcpu);
/* A JSON patch claiming a member for id: test sbx.dev/pool is "true",
 * remove it, add sbx.dev/id (a member claimed twice fails the test, 422). */
json_t *kube_spec_claim(const char *id);
/* The sbx_status of pod p (id, state, image, egress, created, uid as
 * container_id); the caller zeroed st. */
void kube_pod_status(const struct kube_pod *p, struct sbx_status *st);
/* Reads a Pod object into *p; -1 when it is not one of ours (a sandbox's,
 * labelled sbx.dev/id). */
int kube_pod_read(json_t *pod, struct kube_pod *p);
/* The same for an unclaimed warm pool member (id ""); -1 when not one. */
int kube_member_read(json_t *pod, struct kube_pod *p);
/* The one item of a list answer (labelSelector sbx.dev/id=ID) to act on:
 * the first not being deleted, else the first; NULL when none. Borrowed. */
json_t *kube_list_pick(json_t *list);

/* ---- driver_kube_chan.c: the agent channel over pods/exec ---- */

/* The live channel of sandbox id (opened now when none), NULL with err. */
struct sbx_agent_chan *kube_chan_get(struct kube *k, const char *id,
    struct sbx_err *err);
/* Ends and frees id's channel (stop, destroy, pod gone). */
void kube_chan_drop(struct kube *k, const char *id);
/* Frees every channel (driver free). */
void kube_chans_free(struct kube *k);
/* Channels up now. */
size_t kube_chans_live(const struct kube *k);

/* ---- driver_kube_run.c: exec, read, write, list on the agent ---- */

/* Every op of the driver starts with its sbx_op then one of these. */
#define KUBE_OP_RUN 1
#define KUBE_OP_LIFE 2
struct kube_op_head {
	struct sbx_op op;
	int cls;
};
/* The vtable's exec, read, write and list (sbx_driver.h; driver_kube.h). */
struct sbx_op *kube_exec(struct sbx_driver *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);
struct sbx_op *kube_read(struct sbx_driver *d, const char *id,
    const char *path, const struct sbx_sink *sink, struct sbx_err *err);
struct sbx_op *kube_write(struct sbx_driver *d, const char *id,
    const char *path, uint32_t mode, struct evbuffer *body, sbx_done_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *kube_list(struct sbx_driver *d, const char *id,
    const char *path, const struct sbx_list_page *page, sbx_list_cb cb,
    void *arg, struct sbx_err *err);
/* Cancel (no callback after) and pause of a run op. */
void kube_run_cancel(struct sbx_op *op);
void kube_run_pause(struct sbx_op *op, int on);

/* ---- driver_kube_life.c: ensure, stop, destroy ---- */

struct sbx_op *kube_ensure(struct sbx_driver *d, const char *id,
    const struct sbx_spec *spec, sbx_status_cb cb, void *arg,
    struct sbx_err *err);
struct sbx_op *kube_stop(struct sbx_driver *d, const char *id, sbx_done_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *kube_destroy(struct sbx_driver *d, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
void kube_life_cancel(struct sbx_op *op);

/* ---- driver_kube_query.c: status, list_sandboxes, health ---- */

struct sbx_op *kube_status(struct sbx_driver *d, const char *id,
    sbx_status_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *kube_list_sandboxes(struct sbx_driver *d, sbx_sandboxes_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *kube_health(struct sbx_driver *d, sbx_health_cb cb, void *arg,
    struct sbx_err *err);
void kube_query_cancel(struct sbx_op *op);
#define KUBE_OP_QUERY 3

/* ---- driver_kube_sweep.c: reconcile ---- */

#define KUBE_OP_SWEEP 4
/* The vtable's reconcile (driver_kube.h says what it sweeps). */
struct sbx_op *kube_reconcile(struct sbx_driver *d, sbx_done_cb cb, void *arg,
    struct sbx_err *err);
void kube_sweep_cancel(struct sbx_op *op);

/* ---- driver_kube_pool.c: the warm pool (adr/0072, session 11) ---- */

/* Makes k->pool for want members (0..64; 0: none made, the sweep still
 * runs). Returns 0 or -1 out of memory. */
int kube_pool_new(struct kube *k, int want);
/* After the broker's first reconcile: deletes every unclaimed member
 * (pods and PVCs labelled sbx.dev/pool) of an earlier life, then fills
 * to want in the background, one member at a time (the caller started
 * the watch, which reports members through kube_pool_seen). Idempotent. */
void kube_pool_start(struct kube *k);
/* Takes a Running member for a new sandbox: its pod and PVC names into
 * pod/pvc (each at least 128 bytes). fits: the ensure's spec is a
 * member's (default image, memory and CPU, no egress). Returns 0, or -1
 * when the pool is off (warm_pool 0), the spec does not fit (counted as a
 * "spec" miss) or none is ready (an "empty" miss). The pool refills
 * behind it. */
int kube_pool_claim(struct kube *k, int fits, char *pod, char *pvc);
/* A claim's end: ok 1 the sandbox is the member (counted as a claim), 0
 * a patch failed and the sandbox is made cold (an "empty" miss, as the
 * engine's lost claim). */
void kube_pool_claim_end(struct kube *k, int ok);
/* A claim whose patch failed: the member's pod is deleted (and its PVC
 * with pvc_too). */
void kube_pool_discard(struct kube *k, const char *pod, const char *pvc,
    int pvc_too);
/* From the watch: member p (kube_member_read) changed, or went (gone). */
void kube_pool_seen(struct kube *k, const struct kube_pod *p, int gone);
/* From a relist: members not among items (PodList items) went. */
void kube_pool_relisted(struct kube *k, json_t *items);
/* Frees the pool (members and the sbx-pool NetworkPolicy stay on the
 * server: the next start sweeps them, the policy when warm_pool is 0). */
void kube_pool_free(struct kube *k);

/* ---- driver_kube_watch.c: list+watch cache ---- */

/* Starts the list+watch (idempotent). */
void kube_watch_start(struct kube *k);
/* Stops it and frees the cache and waiters. */
void kube_watch_free(struct kube *k);
struct kube_pod *kube_pod_find(struct kube *k, const char *id);
/* Calls cb (from the watch, never inside this call) when id's pod is
 * gone (p NULL) or, unless gone_only, Running, ended or being deleted;
 * returns the waiter (free with kube_wait_cancel unless it was called)
 * or NULL out of memory. */
struct kube_wait *kube_wait_pod(struct kube *k, const char *id, int gone_only,
    void (*cb)(void *arg, const struct kube_pod *p), void *arg);
void kube_wait_cancel(struct kube *k, struct kube_wait *w);
/* Apply one Pod object seen outside the watch (a GET, a create). */
void kube_pod_seen(struct kube *k, json_t *pod);
/* Marks id's cached pod as deleted by this driver (its going is no loss). */
void kube_pod_ours(struct kube *k, const char *id);
/* 1 when id's pod went without this driver deleting it (struct kube_lost). */
int kube_lost_has(struct kube *k, const char *id);
/* Forgets id's loss (ensure made a new pod, stop, destroy). */
void kube_lost_clear(struct kube *k, const char *id);

#endif
