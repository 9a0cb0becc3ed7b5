/*
 * driver_kube_watch.c - the kubernetes driver's view of its pods: list
 * (labelSelector sbx.dev/managed=true) then watch from the list's
 * resourceVersion with allowWatchBookmarks; a cut stream re-watches from
 * the last version seen, a 410 (HTTP or an ERROR event, "Expired")
 * relists and replaces the cache. Answers kube_pod_find and wakes the
 * ensures waiting for Running; unclaimed warm pool members go to the
 * pool. Uses the REST client, the Pod reader and the pool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "driver_kube_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

static void watch_next(struct kube *k, int delay_ms);

struct kube_pod *
kube_pod_find(struct kube *k, const char *id)
{
	struct kube_pod *p;

	TAILQ_FOREACH(p, &k->pods, link)
		if (strcmp(p->id, id) == 0)
			return p;
	return NULL;
}

/* Waiters of id whose wait is over (p Running, ended, or gone). */
static void
wake(struct kube *k, const char *id, const struct kube_pod *p)
{
	struct kube_wait *w, *nw;

	int over = p == NULL || p->stuck[0] != '\0' ||
	    strcmp(p->phase, "Running") == 0 ||
	    strcmp(p->phase, "Failed") == 0 ||
	    strcmp(p->phase, "Succeeded") == 0 || p->deleting;

	if (!over)
		return;
	for (w = TAILQ_FIRST(&k->waits); w != NULL; w = nw) {
		nw = TAILQ_NEXT(w, link);
		if (strcmp(w->id, id) != 0 || (w->gone_only && p != NULL))
			continue;
		TAILQ_REMOVE(&k->waits, w, link);
		w->cb(w->arg, p);
		free(w);
		nw = TAILQ_FIRST(&k->waits);   /* the list may have changed */
	}
}

int
kube_lost_has(struct kube *k, const char *id)
{
	struct kube_lost *l;

	TAILQ_FOREACH(l, &k->lost, link)
		if (strcmp(l->id, id) == 0)
			return 1;
	return 0;
}

void
kube_lost_clear(struct kube *k, const char *id)
{
	struct kube_lost *l;

	TAILQ_FOREACH(l, &k->lost, link)
		if (strcmp(l->id, id) == 0) {
			TAILQ_REMOVE(&k->lost, l, link);
			free(l);
			return;
		}
}

void
kube_pod_ours(struct kube *k, const char *id)
{
	struct kube_pod *p = kube_pod_find(k, id);

	if (p != NULL)
		p->ours = 1;
}

static void
pod_remove(struct kube *k, const char *id)
{
	struct kube_pod *p = kube_pod_find(k, id);
	struct kube_lost *l;
	char idc[64];

	if (p == NULL)
		return;
	snprintf(idc, sizeof(idc), "%s", id);
	if (!p->ours && !kube_lost_has(k, id) &&
	    (l = calloc(1, sizeof(*l))) != NULL) {
		/* gone without our delete: its node lost, the pod evicted,
		 * garbage-collected or deleted by hand */
		snprintf(l->id, sizeof(l->id), "%s", id);
		TAILQ_INSERT_TAIL(&k->lost, l, link);
		log_warn("kubernetes: a sandbox's pod went without the broker "
		    "deleting it; status says lost until the next ensure", "id",
		    id, "node", p->node, NULL);
	}
	TAILQ_REMOVE(&k->pods, p, link);
	free(p);
	wake(k, idc, NULL);
}

static void
pod_upsert(struct kube *k, const struct kube_pod *np)
{
	struct kube_pod *p = kube_pod_find(k, np->id);

	if (p == NULL) {
		if ((p = malloc(sizeof(*p))) == NULL)
			return;
		*p = *np;
		TAILQ_INSERT_TAIL(&k->pods, p, link);
	} else {
		struct kube_pod keep = *p;

		*p = *np;
		p->link = keep.link;
		p->ours = keep.ours && strcmp(keep.uid, np->uid) == 0;
		if (p->lost && !keep.lost)
			log_warn("kubernetes: a sandbox's node is lost (its pod "
			    "is not Ready while its containers are)", "id", p->id,
			    "node", p->node, NULL);
	}
	wake(k, p->id, p);
}

void
kube_pod_seen(struct kube *k, json_t *pod)
{
	struct kube_pod p;

	if (kube_pod_read(pod, &p) == 0 && kube_pod_find(k, p.id) == NULL)
		pod_upsert(k, &p);
}

static void
rv_take(struct kube *k, json_t *obj)
{
	const char *rv = json_string_value(json_object_get(json_object_get(obj,
	    "metadata"), "resourceVersion"));

	if (rv != NULL && strlen(rv) < sizeof(k->rv))
		snprintf(k->rv, sizeof(k->rv), "%s", rv);
}

static int
w_line(void *arg, const char *line, size_t len)
{
	struct kube *k = arg;
	json_t *ev = json_loadb(line, len, 0, NULL);
	const char *type = json_string_value(json_object_get(ev, "type"));
	json_t *obj = json_object_get(ev, "object");
	struct kube_pod p;

	if (type == NULL || !json_is_object(obj)) {
		json_decref(ev);
		return 0;
	}
	if (strcmp(type, "ERROR") == 0) {
		json_int_t code = json_integer_value(json_object_get(obj, "code"));

		if (code == 410) {
			/* too old: the next round lists again */
			k->rv[0] = '\0';
		}
		json_decref(ev);
		if (code == 410)
			k->relists_410++;
		k->watch = NULL;      /* the client frees it on our 1 */
		watch_next(k, code == 410 ? 0 : 500);
		return 1;
	}
	rv_take(k, obj);
	if (strcmp(type, "BOOKMARK") == 0)
		k->bookmarks++;
	else if (kube_pod_read(obj, &p) == 0) {
		if (strcmp(type, "DELETED") == 0)
			pod_remove(k, p.id);
		else
			pod_upsert(k, &p);
	} else if (kube_member_read(obj, &p) == 0)
		kube_pool_seen(k, &p, strcmp(type, "DELETED") == 0);
	json_decref(ev);
	return 0;
}

static void
w_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct kube *k = arg;

	(void)body;
	k->watch = NULL;
	if (err == NULL && status == 410) {
		k->rv[0] = '\0';
		k->relists_410++;
	}
	else if (err != NULL || status != 200)
		log_warn("kubernetes watch ended", "status",
		    err != NULL ? err->message : "http", NULL);
	k->rewatches++;
	watch_next(k, err == NULL && (status == 200 || status == 410) ? 0 : 1000);
}

/* One line per list: what the cache now holds (ids, each once), and
 * how the watch has fared (tests/integration/test_kube_driver.py). */
static void
log_pods(struct kube *k)
{
	char ids[1024], n[24], r[24], b[24], w[24];
	struct kube_pod *p;
	size_t len = 0, cnt = 0;

	ids[0] = '\0';
	TAILQ_FOREACH(p, &k->pods, link) {
		cnt++;
		if (len + strlen(p->id) + 2 < sizeof(ids))
			len += (size_t)snprintf(ids + len, sizeof(ids) - len, "%s%s",
			    len > 0 ? "," : "", p->id);
	}
	snprintf(n, sizeof(n), "%zu", cnt);
	snprintf(r, sizeof(r), "%llu", (unsigned long long)k->relists_410);
	snprintf(b, sizeof(b), "%llu", (unsigned long long)k->bookmarks);
	snprintf(w, sizeof(w), "%llu", (unsigned long long)k->rewatches);
	log_info("kubernetes pods listed", "pods", n, "ids", ids, "after_410", r,
	    "bookmarks", b, "rewatches", w, NULL);
}

static void
l_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct kube *k = arg;
	json_t *items = json_object_get(body, "items"), *it;
	struct kube_pod *p, *np;
	size_t i;

	k->watch = NULL;
	if (err != NULL || status != 200) {
		log_warn("kubernetes list of pods failed", "error",
		    err != NULL ? err->message : "status", NULL);
		watch_next(k, 1000);
		return;
	}
	k->relists++;
	/* the list is the truth: what it lacks is gone */
	for (p = TAILQ_FIRST(&k->pods); p != NULL; p = np) {
		int found = 0;

		np = TAILQ_NEXT(p, link);
		json_array_foreach(items, i, it) {
			struct kube_pod q;

			if (kube_pod_read(it, &q) == 0 && strcmp(q.id, p->id) == 0)
				found = 1;
		}
		if (!found) {
			pod_remove(k, p->id);
			np = TAILQ_FIRST(&k->pods);
		}
	}
	json_array_foreach(items, i, it) {
		struct kube_pod q;

		if (kube_pod_read(it, &q) == 0)
			pod_upsert(k, &q);
	}
	kube_pool_relisted(k, items);
	rv_take(k, body);
	k->synced = 1;
	log_pods(k);
	watch_next(k, 0);
}

static void
next_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kube *k = arg;
	struct kube_http_cbs cbs = { NULL, NULL, NULL, k };
	struct sbx_err err;
	char path[512];

	(void)fd;
	(void)what;
	if (k->watch != NULL)
		return;
	if (k->rv[0] == '\0') {
		cbs.done = l_done;
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?"
		    "labelSelector=" KUBE_SELECTOR, k->ns);
		k->watch = kube_http_start(k, "GET", path, NULL, NULL, NULL,
		    k->req_to, &cbs, &err);
	} else {
		cbs.done = w_done;
		cbs.line = w_line;
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?"
		    "labelSelector=" KUBE_SELECTOR "&watch=1&"
		    "allowWatchBookmarks=true&resourceVersion=%s", k->ns, k->rv);
		k->watch = kube_http_start(k, "GET", path, NULL, NULL, NULL, 0,
		    &cbs, &err);
	}
	if (k->watch == NULL)
		watch_next(k, 1000);
}

static void
watch_next(struct kube *k, int delay_ms)
{
	struct timeval tv = { delay_ms / 1000, (delay_ms % 1000) * 1000 };

	if (k->rewatch == NULL &&
	    (k->rewatch = evtimer_new(k->drv.base, next_cb, k)) == NULL)
		return;
	evtimer_add(k->rewatch, &tv);
}

void
kube_watch_start(struct kube *k)
{
	if (k->watch == NULL && (k->rewatch == NULL ||
	    !evtimer_pending(k->rewatch, NULL)))
		watch_next(k, 0);
}

struct kube_wait *
kube_wait_pod(struct kube *k, const char *id, int gone_only,
    void (*cb)(void *arg, const struct kube_pod *p), void *arg)
{
	struct kube_wait *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return NULL;
	snprintf(w->id, sizeof(w->id), "%s", id);
	w->gone_only = gone_only;
	w->cb = cb;
	w->arg = arg;
	TAILQ_INSERT_TAIL(&k->waits, w, link);
	return w;
}

void
kube_wait_cancel(struct kube *k, struct kube_wait *w)
{
	struct kube_wait *x;

	TAILQ_FOREACH(x, &k->waits, link)
		if (x == w) {
			TAILQ_REMOVE(&k->waits, w, link);
			free(w);
			return;
		}
}

void
kube_watch_free(struct kube *k)
{
	struct kube_pod *p;
	struct kube_wait *w;
	struct kube_lost *l;

	while ((l = TAILQ_FIRST(&k->lost)) != NULL) {
		TAILQ_REMOVE(&k->lost, l, link);
		free(l);
	}
	kube_http_cancel(k->watch);
	k->watch = NULL;
	if (k->rewatch != NULL)
		event_free(k->rewatch);
	k->rewatch = NULL;
	while ((p = TAILQ_FIRST(&k->pods)) != NULL) {
		TAILQ_REMOVE(&k->pods, p, link);
		free(p);
	}
	while ((w = TAILQ_FIRST(&k->waits)) != NULL) {
		TAILQ_REMOVE(&k->waits, w, link);
		free(w);
	}
}
