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

/* An exec's stream started (the driver reported start). */
void broker_metrics_exec_started(struct broker_metrics *m);
/* A started exec ended (exit, error, cancel, shutdown) after duration_ms
 * milliseconds counted from its start. */
void broker_metrics_exec_finished(struct broker_metrics *m,
    int64_t duration_ms);
/* Bytes an exec produced on stream (1 stdout, 2 stderr), before NDJSON
 * encoding; other streams are ignored. */
void broker_metrics_exec_output(struct broker_metrics *m, int stream,
    size_t bytes);
/* A driver operation failed with code (SBX_E_RUNTIME or
 * SBX_E_RUNTIME_UNAVAILABLE; others are ignored). */
void broker_metrics_runtime_error(struct broker_metrics *m, const char *code);
/* The reaper stopped (destroyed == 0) or destroyed (1) a sandbox. */
void broker_metrics_reaped(struct broker_metrics *m, int destroyed);
/* Start-up reconciliation: result is "adopted", "recorded", "absent" or
 * "killed" (execs left by an earlier broker killed in one sandbox). */
void broker_metrics_recovered(struct broker_metrics *m, const char *result);

/*
 * Egress proxy counts of sandbox id (adr/0027), as its proxy reported them
 * (totals kept across proxy restarts): each counter takes the larger of
 * what it had and the new value, so overlapping reads never make it go
 * back. id: a valid sandbox id (sbx_id_valid; it becomes a label value).
 * Returns 0 or -1 (out of memory, id too long).
 */
int broker_metrics_egress_set(struct broker_metrics *m, const char *id,
    uint64_t allowed, uint64_t denied);
/* Drops id's egress series (destroyed, or no proxy any more). */
void broker_metrics_egress_forget(struct broker_metrics *m, const char *id);
/* 1 when id has egress series. */
int broker_metrics_egress_known(const struct broker_metrics *m, const char *id);

/*
 * Appends the Prometheus text format (version 0.0.4), each family with
 * its HELP and TYPE lines (docs/operations.md lists them):
 *   sbx_broker_requests_total{op,code}            counter (code: HTTP status)
 *   sbx_broker_request_duration_seconds{op}       histogram
 *   sbx_broker_execs_running                      gauge
 *   sbx_broker_execs_started_total                counter
 *   sbx_broker_execs_finished_total               counter
 *   sbx_broker_exec_duration_seconds              histogram
 *   sbx_broker_exec_output_bytes_total{stream}    counter (stdout, stderr)
 *   sbx_broker_sandboxes{state}                   gauge (running, stopped,
 *                                                 absent: the caller's counts;
 *                                                 a negative count omits it)
 *   sbx_broker_reaped_total{action}               counter (stop, destroy)
 *   sbx_broker_runtime_errors_total{code}         counter
 *   sbx_broker_recovered_total{result}            counter
 *   sbx_broker_egress_connections_total{id,decision} counter (allowed,
 *                                                 denied; adr/0027)
 * Returns 0 or -1 when out of memory.
 */
int broker_metrics_render(const struct broker_metrics *m, struct evbuffer *out,
    int sandboxes_running, int sandboxes_stopped, int sandboxes_absent);

#endif
