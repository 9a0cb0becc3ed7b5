/* broker_metrics.h - the broker's counters and their Prometheus text exposition (GET /metrics). */
#ifndef BROKER_METRICS_H
#define BROKER_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct broker_metrics;

/* New zeroed counters (owned; broker_metrics_free). NULL when out of memory. */
struct broker_metrics *broker_metrics_new(void);
void broker_metrics_free(struct broker_metrics *m); /* NULL ok */

/* One answered request: op is a static route name ("ensure", "exec", ...,
 * "unknown" before routing), status its HTTP status, duration_ms how long
 * it took (streams: until their end). Never a caller-supplied string. */
void broker_metrics_request(struct broker_metrics *m, const char *op,
    int status, int64_t duration_ms);

void broker_metrics_exec_started(struct broker_metrics *m);
void broker_metrics_exec_finished(struct broker_metrics *m);
/* Bytes of stdout+stderr an exec produced (before NDJSON encoding). */
void broker_metrics_exec_output(struct broker_metrics *m, size_t bytes);
/* A driver operation failed with runtime_error or runtime_unavailable. */
void broker_metrics_runtime_error(struct broker_metrics *m);
/* The reaper stopped or destroyed a sandbox. */
void broker_metrics_reaped(struct broker_metrics *m);

/*
 * Appends the Prometheus text format (version 0.0.4) to out (names of
 * proto/broker-api.md "GET /metrics"):
 *   sbx_broker_requests_total{op,code}            counter
 *   sbx_broker_request_duration_seconds{op}       histogram
 *   sbx_broker_execs_running                      gauge
 *   sbx_broker_execs_started_total, sbx_broker_execs_finished_total
 *   sbx_broker_exec_output_bytes_total            counter
 *   sbx_broker_sandboxes{state}                   gauge (running, stopped:
 *                                                 the caller's counts; -1 omits)
 *   sbx_broker_reaped_total, sbx_broker_runtime_errors_total
 * Returns 0 or -1 when out of memory.
 */
int broker_metrics_render(const struct broker_metrics *m, struct evbuffer *out,
    int sandboxes_running, int sandboxes_stopped);

#endif
