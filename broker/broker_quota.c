/* broker_quota.c - the soft /work quota's figures and decisions (adr/0057); touches only its own table, never the driver or a request. */
#include <stdlib.h>
#include <string.h>

#include "broker_quota.h"

struct bq_ent {
	char id[64];
	int64_t used;     /* last walk's bytes + writes admitted since */
	int64_t at_ms;    /* monotonic ms the last walk ended */
	int told;         /* the owner was told it is over */
};

struct broker_quota {
	int64_t quota, stale_ms;
	unsigned max, n, cap;
	struct bq_ent *ents;
};

enum bq_verdict
bq_write_verdict(int64_t quota, int have, int64_t used, int64_t age_ms,
    int64_t stale_ms, int64_t incoming)
{
	if (quota <= 0)
		return BQ_ALLOW;
	if (!have || age_ms > stale_ms || age_ms < 0)
		return BQ_COUNT;
	if (incoming < 0)
		incoming = 0;
	/* used and incoming are each below 2^62 in practice; compare
	 * without adding to stay clear of overflow all the same */
	if (used > quota || incoming > quota - used)
		return BQ_REFUSE;
	return BQ_ALLOW;
}

int
bq_tell(int64_t quota, int64_t used, int *told)
{
	if (quota <= 0 || used <= quota) {
		*told = 0;
		return 0;
	}
	if (*told)
		return 0;
	*told = 1;
	return 1;
}

struct broker_quota *
broker_quota_new(int64_t quota, int64_t stale_ms, unsigned max_ids)
{
	struct broker_quota *q;

	if ((q = calloc(1, sizeof(*q))) == NULL)
		return NULL;
	q->quota = quota > 0 ? quota : 0;
	q->stale_ms = stale_ms > 0 ? stale_ms : 0;
	q->max = max_ids > 0 ? max_ids : 1;
	return q;
}

void
broker_quota_free(struct broker_quota *q)
{
	if (q == NULL)
		return;
	free(q->ents);
	free(q);
}

int64_t
broker_quota_bytes(const struct broker_quota *q)
{
	return q != NULL ? q->quota : 0;
}

static struct bq_ent *
find(const struct broker_quota *q, const char *id)
{
	unsigned i;

	for (i = 0; i < q->n; i++)
		if (strcmp(q->ents[i].id, id) == 0)
			return &q->ents[i];
	return NULL;
}

/* id's entry, made (zeroed, never counted) when absent; NULL: out of
 * memory. A full table gives up the entry counted longest ago. */
static struct bq_ent *
get(struct broker_quota *q, const char *id, int64_t now_ms)
{
	struct bq_ent *e, *ne;
	unsigned i, old = 0;

	if ((e = find(q, id)) != NULL)
		return e;
	if (q->n == q->max) {
		for (i = 1; i < q->n; i++)
			if (q->ents[i].at_ms < q->ents[old].at_ms)
				old = i;
		e = &q->ents[old];
	} else {
		if (q->n == q->cap) {
			unsigned cap = q->cap == 0 ? 8 : q->cap * 2;

			if (cap > q->max || cap < q->cap)
				cap = q->max;
			ne = realloc(q->ents, (size_t)cap * sizeof(*ne));
			if (ne == NULL)
				return NULL;
			q->ents = ne;
			q->cap = cap;
		}
		e = &q->ents[q->n++];
	}
	memset(e, 0, sizeof(*e));
	strncpy(e->id, id, sizeof(e->id) - 1);
	e->used = -1;
	e->at_ms = now_ms;
	return e;
}

enum bq_verdict
broker_quota_write(struct broker_quota *q, const char *id, int64_t now_ms,
    int64_t n, int64_t *used)
{
	struct bq_ent *e;
	enum bq_verdict v;

	if (used != NULL)
		*used = -1;
	if (q == NULL || q->quota == 0)
		return BQ_ALLOW;
	e = find(q, id);
	if (e != NULL && used != NULL)
		*used = e->used;
	v = bq_write_verdict(q->quota, e != NULL && e->used >= 0,
	    e != NULL ? e->used : 0, e != NULL ? now_ms - e->at_ms : 0,
	    q->stale_ms, n);
	if (v == BQ_ALLOW && n > 0)
		e->used += n;
	return v;
}

void
broker_quota_counted(struct broker_quota *q, const char *id, int64_t now_ms,
    int64_t bytes)
{
	struct bq_ent *e;

	if (q == NULL || q->quota == 0 || bytes < 0 ||
	    (e = get(q, id, now_ms)) == NULL)
		return;
	e->used = bytes;
	e->at_ms = now_ms;
	if (bytes <= q->quota)
		e->told = 0;
}

int
broker_quota_tell(struct broker_quota *q, const char *id)
{
	struct bq_ent *e;

	if (q == NULL || q->quota == 0 || (e = find(q, id)) == NULL ||
	    e->used < 0)
		return 0;
	return bq_tell(q->quota, e->used, &e->told);
}

int
broker_quota_exit_needs_count(const struct broker_quota *q, const char *id,
    int64_t began_ms)
{
	const struct bq_ent *e;

	if (q == NULL || q->quota == 0)
		return 0;
	e = find(q, id);
	return e == NULL || e->used < 0 || e->at_ms < began_ms;
}

void
broker_quota_forget(struct broker_quota *q, const char *id)
{
	struct bq_ent *e;

	if (q == NULL || (e = find(q, id)) == NULL)
		return;
	*e = q->ents[--q->n];
}

void
broker_quota_status(const struct broker_quota *q, const char *id,
    int64_t now_ms, struct sbx_quota *out)
{
	const struct bq_ent *e;

	memset(out, 0, sizeof(*out));
	if (q == NULL || q->quota == 0)
		return;
	out->present = 1;
	out->bytes = q->quota;
	out->used = -1;
	out->age_ms = -1;
	if ((e = find(q, id)) != NULL && e->used >= 0) {
		out->used = e->used;
		out->age_ms = now_ms - e->at_ms;
	}
}
