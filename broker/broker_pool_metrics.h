/* broker_pool_metrics.h - the warm pool's figures for GET /metrics (adr/0067, adr/0072 amendment "metrics"): whichever driver's pool the broker runs (engine or kubernetes) counts here, the broker renders them; touches nothing else. */
#ifndef BROKER_POOL_METRICS_H
#define BROKER_POOL_METRICS_H

#include <stdint.h>

struct evbuffer;

/* Why an ensure of a new sandbox was made cold with the pool on. */
enum broker_pool_miss {
	BROKER_POOL_MISS_EMPTY,   /* no member ready, or the claim lost it */
	BROKER_POOL_MISS_SPEC,    /* egress, another image or other limits */
	BROKER_POOL_MISS_VOLUME   /* the id's /work exists */
};

/*
 * The figures are process-wide (one driver, so one pool, per broker) and
 * start at zero. broker_pool_wanted: the pool's size (warm_pool, >= 0);
 * broker_pool_ready: members ready to be claimed now (>= 0);
 * broker_pool_claimed: one ensure answered with a member;
 * broker_pool_missed: one ensure made cold for why; broker_pool_made: one
 * member's make ended, ok 1 (ready) or 0 (failed). None can fail.
 */
void broker_pool_wanted(int64_t n);
void broker_pool_ready(int64_t n);
void broker_pool_claimed(void);
void broker_pool_missed(enum broker_pool_miss why);
void broker_pool_made(int ok);

/*
 * Appends the figures in the Prometheus text format (version 0.0.4) to
 * out: sbx_broker_warm_pool_members{state} gauge (ready, wanted),
 * sbx_broker_warm_pool_claims_total counter,
 * sbx_broker_warm_pool_misses_total{reason} counter (empty, spec, volume),
 * sbx_broker_warm_pool_made_total{result} counter (ok, failed); zeros
 * without a pool. Returns 0, or -1 when out of memory.
 */
int broker_pool_metrics_render(struct evbuffer *out);

#endif
