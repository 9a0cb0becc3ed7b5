/* broker_quota.h - the soft /work quota (adr/0057): what the broker last counted of each sandbox's /work, and the decisions made from it (a write refused, a walk needed, the owner told); no I/O, no driver calls: the handlers count and act. */
#ifndef BROKER_QUOTA_H
#define BROKER_QUOTA_H

#include <stdint.h>

#include "sbx_types.h"

/*
 * Why soft: neither runtime can bound a volume on this machine's storage
 * (adr/0014, remeasured in adr/0057), so the broker counts /work with the
 * usage walk of adr/0017 and judges from that figure.
 *
 * The figure of a sandbox: `used` = the bytes its last walk counted
 * (st_blocks x 512, sbx_usage.bytes) plus every byte a write through the
 * broker admitted since; `at` = the monotonic ms that walk ended. Commands
 * run in the sandbox write behind the broker's back, so a figure is
 * trusted for a write only while it is younger than stale_ms
 * (work_quota_stale); an exec's end counts again unless a walk ended after
 * that exec began.
 */

/* What a write of n bytes may do. */
enum bq_verdict {
	BQ_ALLOW = 0,   /* used + n <= quota (or no quota) */
	BQ_REFUSE,      /* used + n > quota: 507 quota_exceeded */
	BQ_COUNT,       /* no figure younger than stale_ms: walk first */
};

/*
 * The decision itself, pure (unit-tested): quota 0 allows everything;
 * have 0 (never counted) or age_ms > stale_ms asks for a walk; else
 * used + incoming > quota refuses. incoming < 0 counts as 0 (a chunked
 * body whose length is not known yet: judged by what /work holds).
 */
enum bq_verdict bq_write_verdict(int64_t quota, int have, int64_t used,
    int64_t age_ms, int64_t stale_ms, int64_t incoming);

/*
 * After a walk: 1 when the owner must be told now that /work is over the
 * quota (used > quota and not told since it last was at or under it),
 * else 0. *told is the sandbox's flag: set when this returns 1, cleared
 * when used <= quota. quota 0: always 0 (and *told cleared).
 */
int bq_tell(int64_t quota, int64_t used, int *told);

struct broker_quota;

/*
 * A table for quota bytes (0: off, then every call below allows and
 * counts nothing) and stale_ms (>= 0). Holds at most max_ids sandboxes
 * (>= 1): beyond that the one counted longest ago is forgotten (it is
 * counted again when next judged). NULL: out of memory. Free with
 * broker_quota_free (NULL ok).
 */
struct broker_quota *broker_quota_new(int64_t quota, int64_t stale_ms,
    unsigned max_ids);
void broker_quota_free(struct broker_quota *q);

/* The configured quota in bytes (0: off). q may be NULL (0). */
int64_t broker_quota_bytes(const struct broker_quota *q);

/*
 * A write of n bytes (n < 0: not known yet) to sandbox id at monotonic
 * now_ms: bq_write_verdict on id's figure. BQ_ALLOW also adds n (when
 * > 0) to the figure, so writes admitted one after another are judged
 * together. *used (may be NULL) gets the figure judged, -1 when none.
 */
enum bq_verdict broker_quota_write(struct broker_quota *q, const char *id,
    int64_t now_ms, int64_t n, int64_t *used);

/*
 * A walk of id's /work ended at now_ms with bytes counted: the figure is
 * replaced; at or under the quota, the owner counts as not told. Any walk
 * (a write's, an exec end's, a status ?usage=1) reports here.
 */
void broker_quota_counted(struct broker_quota *q, const char *id,
    int64_t now_ms, int64_t bytes);

/*
 * At an exec's end, after broker_quota_counted: 1 when that exec's stream
 * tells the owner /work is over the quota (bq_tell on id's figure: once
 * per crossing), else 0.
 */
int broker_quota_tell(struct broker_quota *q, const char *id);

/* 1 when an exec of id that began at monotonic began_ms must count /work
 * at its end (quota on, and no walk ended since it began), else 0. */
int broker_quota_exit_needs_count(const struct broker_quota *q,
    const char *id, int64_t began_ms);

/* The sandbox is gone (destroyed): its figure is dropped. */
void broker_quota_forget(struct broker_quota *q, const char *id);

/* *out for id's status at now_ms (struct sbx_quota, sbx_types.h):
 * present 0 when the quota is off. */
void broker_quota_status(const struct broker_quota *q, const char *id,
    int64_t now_ms, struct sbx_quota *out);

#endif
