/* api_execs_bounds.c - what the records of sandbox-api's resource execs may hold: the bounds on records and log bytes, per principal first and then in all, and the retention sweep (ADR 0015, ADR 0043). Above api_execs.c: it removes logs and records through api_execs_int.h, and nothing below calls it but the loader and the sweep timer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "api_int.h"
#include "api_execs_int.h"
#include "sbx_time.h"

/* One exec in ax_enforce_bounds' view: x (NULL once forgotten) and its
 * age rank (0: the oldest). */
struct slot {
	struct api_exec *x;
	size_t age;
};

/* One principal's share: its slots [first, first + n) of the sorted
 * array, oldest first, and what they hold. */
struct share {
	size_t first, n;
	long long records;
	uint64_t log_bytes;
};

static int
cmp_slot(const void *a, const void *b)
{
	const struct slot *p = a, *q = b;
	int c = strcmp(p->x->by, q->x->by);

	return c != 0 ? c : p->age < q->age ? -1 : p->age > q->age;
}

/* The slot of h's oldest exec that may be removed (ended, no viewer;
 * with need_log, a log left too); NULL when none. */
static struct slot *
share_oldest(struct slot *sl, const struct share *h, int need_log)
{
	size_t i;
	struct api_exec *x;

	for (i = h->first; i < h->first + h->n; i++) {
		x = sl[i].x;
		if (x != NULL && ax_ended(x) && x->viewers == NULL &&
		    (!need_log || x->segs != NULL))
			return &sl[i];
	}
	return NULL;
}

/* The share to take from for the global bounds: the one with the most
 * records (need_log 0) or log bytes (1) that has something to give;
 * ties go to the older exec. NULL when no share can give. */
static struct share *
share_heaviest(struct slot *sl, struct share *sh, size_t nsh, int need_log,
    struct slot **from)
{
	struct share *best = NULL;
	struct slot *o;
	size_t i;

	*from = NULL;
	for (i = 0; i < nsh; i++) {
		if ((o = share_oldest(sl, &sh[i], need_log)) == NULL)
			continue;
		if (best == NULL || (need_log ? sh[i].log_bytes >
		    best->log_bytes : sh[i].records > best->records) ||
		    ((need_log ? sh[i].log_bytes == best->log_bytes :
		    sh[i].records == best->records) && o->age < (*from)->age)) {
			best = &sh[i];
			*from = o;
		}
	}
	return best;
}

/* Forgets the exec of o, counted in h. */
static void
share_forget(struct share *h, struct slot *o)
{
	h->records--;
	h->log_bytes -= o->x->log_bytes;
	ax_exec_forget(o->x);
	o->x = NULL;
}

/* Removes the log of o's exec (why: its "removed"), counted in h. */
static void
share_drop_log(struct share *h, struct slot *o, const char *why)
{
	h->log_bytes -= o->x->log_bytes;
	ax_log_remove(o->x, why);
}

void
ax_enforce_bounds(struct api_server *s)
{
	const struct api_config *c = s->cfg;
	struct api_exec *x;
	struct slot *sl, *o;
	struct share *sh, *h;
	size_t n = 0, nsh = 0, i;
	int64_t now = sbx_wall_ms();

	for (x = s->execs; x != NULL && x->next != NULL; x = x->next)
		;
	/* x: the oldest. Retention first, walking towards the newest. */
	for (; x != NULL; x = x->prev, n++)
		if (ax_ended(x) && x->viewers == NULL && x->segs != NULL &&
		    now - x->ended_at > c->exec_retention)
			ax_log_remove(x, "retention");
	if (n == 0)
		return;
	sl = calloc(n, sizeof(*sl));
	sh = calloc(n, sizeof(*sh));
	if (sl == NULL || sh == NULL) {
		free(sl);
		free(sh);
		return;
	}
	for (x = s->execs, i = n; x != NULL; x = x->next) {
		sl[--i].x = x;
		sl[i].age = i;
	}
	qsort(sl, n, sizeof(*sl), cmp_slot);
	for (i = 0; i < n; i++) {
		if (i == 0 || strcmp(sl[i].x->by, sl[i - 1].x->by) != 0)
			sh[nsh++].first = i;
		h = &sh[nsh - 1];
		h->n++;
		h->records++;
		h->log_bytes += sl[i].x->log_bytes;
	}
	/* Each principal within its own share first. */
	for (h = sh; h < sh + nsh; h++) {
		while (h->records > c->exec_records_per_principal &&
		    (o = share_oldest(sl, h, 0)) != NULL)
			share_forget(h, o);
		while (h->log_bytes > (uint64_t)c->exec_log_per_principal &&
		    (o = share_oldest(sl, h, 1)) != NULL)
			share_drop_log(h, o, "principal_cap");
	}
	/* Then the pools of all, from the heaviest principal. */
	while ((long long)s->nexecs > c->exec_records_max &&
	    (h = share_heaviest(sl, sh, nsh, 0, &o)) != NULL)
		share_forget(h, o);
	while (s->log_total > (uint64_t)c->exec_log_total &&
	    (h = share_heaviest(sl, sh, nsh, 1, &o)) != NULL)
		share_drop_log(h, o, "total_cap");
	free(sl);
	free(sh);
}

void
ax_sweep_fire(evutil_socket_t fd, short what, void *arg)
{
	struct api_server *s = arg;
	struct timeval tv = { 1, 0 };

	(void)fd;
	(void)what;
	ax_enforce_bounds(s);
	if (s->cfg->exec_retention > 10000)
		tv.tv_sec = 10;
	evtimer_add(s->sweep_ev, &tv);
}
