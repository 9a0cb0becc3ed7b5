/* broker_metrics.h - the broker's counters and their Prometheus text exposition (GET /metrics). */
#ifndef BROKER_METRICS_H
#define BROKER_METRICS_H

#include <stdint.h>

struct evbuffer;
struct broker_metrics;

/* New zeroed counters (owned; broker_metrics_free). NULL when out of memory. */
struct broker_metrics *broker_metrics_new(void);
void broker_metrics_free(struct broker_metrics *m); /* NULL ok */

/* One answered request: route is a static name ("ensure", "exec", ...,
 * "unknown"), status its HTTP status. */
void broker_metrics_request(struct broker_metrics *m, const char *route,
    int status);

void broker_metrics_exec_started(struct broker_metrics *m);
void broker_metrics_exec_finished(struct broker_metrics *m);
/* A driver operation failed with runtime_error or runtime_unavailable. */
void broker_metrics_runtime_error(struct broker_metrics *m);

/*
 * Appends the Prometheus text format (version 0.0.4) to out:
 *   sbx_broker_requests_total{route,status}, sbx_broker_execs_started_total,
 *   sbx_broker_execs_finished_total, sbx_broker_execs_in_flight (gauge),
 *   sbx_broker_runtime_errors_total.
 * Returns 0 or -1 when out of memory.
 */
int broker_metrics_render(const struct broker_metrics *m, struct evbuffer *out);

#endif
