/* sbx_metrics.h - the Prometheus text writer both daemons' /metrics use: family lines and millisecond histograms (text format 0.0.4). */
#ifndef SBX_METRICS_H
#define SBX_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

/* Buckets of every duration histogram: bounds in milliseconds, exposed as
 * le= seconds (1 ms .. 300 s), the same in both daemons so their
 * histograms compare bucket by bucket. */
#define SBX_METRICS_NBOUNDS 10
extern const int64_t sbx_metrics_bounds_ms[SBX_METRICS_NBOUNDS];

/* One duration histogram (zeroed = empty): le[k] counts observations
 * <= sbx_metrics_bounds_ms[k] (cumulative, as Prometheus wants). */
struct sbx_hist {
	uint64_t le[SBX_METRICS_NBOUNDS];
	uint64_t count;
	int64_t sum_ms;
};

/* Counts one observation of ms milliseconds (negative counts as 0). */
void sbx_hist_add(struct sbx_hist *h, int64_t ms);

/* One counter of answered requests by (route, HTTP status); route is a
 * static name of ours (the route row's), never caller text. */
struct sbx_req_series {
	const char *route;
	int status;
	uint64_t count;
};

/*
 * Counts one request (route, status) in s[0..*n): the matching series goes
 * up by one, or a new one is appended when *n < max; a full table drops new
 * series (old ones keep counting).
 */
void sbx_req_series_count(struct sbx_req_series *s, size_t *n, size_t max,
    const char *route, int status);

/*
 * Appends the counter family name (sbx_metrics_family with help), then its
 * samples 'name{key="route",code="status"} count' of s[0..n). Returns 0,
 * or 1 when out of memory.
 */
int sbx_req_series_render(struct evbuffer *out, const char *name,
    const char *help, const char *key, const struct sbx_req_series *s,
    size_t n);

/*
 * A family of one unlabelled sample: sbx_metrics_family, then "name v".
 * Returns 0, or 1 when out of memory (so callers can OR results).
 */
int sbx_metrics_one(struct evbuffer *out, const char *name, const char *type,
    const char *help, unsigned long long v);

/*
 * One sample with one label: "name{key=\"value\"} v". key and value are
 * static text of ours or checked codes (no escaping done). Returns 0, or 1
 * when out of memory.
 */
int sbx_metrics_label(struct evbuffer *out, const char *name,
    const char *key, const char *value, unsigned long long v);

/*
 * Appends "# HELP name help" and "# TYPE name type" (type: counter, gauge,
 * histogram). name and help are static text of ours (no escaping done).
 * Returns 0, or 1 when out of memory (so callers can OR results).
 */
int sbx_metrics_family(struct evbuffer *out, const char *name,
    const char *type, const char *help);

/*
 * Appends the _bucket (every bound, then +Inf), _sum (seconds, 3 decimals)
 * and _count lines of h under name. labels is "" or label pairs each
 * followed by a comma (`op="exec",`), put before le= in buckets and,
 * without the last comma, in braces on _sum and _count.
 * Returns 0, or 1 when out of memory.
 */
int sbx_metrics_hist(struct evbuffer *out, const char *name,
    const char *labels, const struct sbx_hist *h);

#endif
