/* api_metrics.h - sandbox-api's counters and their Prometheus text exposition (GET /metrics, docs/api.md). */
#ifndef API_METRICS_H
#define API_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_metrics.h"

struct evbuffer;

#define API_METRICS_MAX_REQ 128     /* route x status series kept */
#define API_METRICS_MAX_CODES 32    /* broker error codes kept */

/*
 * The api's counters, embedded in the server (zeroed = empty). Every label
 * value is a static string or a checked error code: never an NPC, a path,
 * a principal or anything else a caller sent. When a table is full, new
 * series are dropped (old ones keep counting).
 */
struct api_metrics {
	struct sbx_req_series req[API_METRICS_MAX_REQ]; /* route: static */
	size_t nreq;
	struct {
		char code[32];
		uint64_t count;
	} broker_err[API_METRICS_MAX_CODES];
	size_t nbroker_err;
	uint64_t sse_clients;
	uint64_t execs_started, execs_finished;
	struct sbx_hist exec_dur;   /* run time of ended execs */
	uint64_t bytes_stdout, bytes_stderr, bytes_file;
	uint64_t rejected_rate, rejected_execs;
};

/* One answered request: route a static name ("sandbox.exec", "healthz",
 * "unknown" before routing), status its HTTP status (streams: 200). */
void api_metrics_request(struct api_metrics *m, const char *route,
    int status);

/* An SSE stream opened (delta 1) or ended (delta -1). */
void api_metrics_sse(struct api_metrics *m, int delta);

/* An exec's stream started (the broker's start event arrived). */
void api_metrics_exec_started(struct api_metrics *m);

/* A started exec ended (exit, error, client gone, shutdown) after
 * duration_ms milliseconds from its start. */
void api_metrics_exec_finished(struct api_metrics *m, int64_t duration_ms);

/* len bytes sent towards a client: stream 1 stdout, 2 stderr (exec output,
 * raw bytes before SSE encoding), 0 a file read. */
void api_metrics_stream_bytes(struct api_metrics *m, int stream, size_t len);

/* The broker (the driver) reported an error with this code. A code that is
 * not [a-z0-9_]{1,31} is counted as "other". */
void api_metrics_broker_error(struct api_metrics *m, const char *code);

/* A request refused by a per-principal limit: execs 1 for
 * max_execs_per_principal (429 too_many), 0 for requests_per_minute
 * (429 rate_limited). */
void api_metrics_rejected(struct api_metrics *m, int execs);

/*
 * Appends the Prometheus text format 0.0.4 of m to out: every family with
 * # HELP and # TYPE, then its samples. inflight is the number of requests
 * being answered now. Returns 0, or -1 when out of memory.
 */
int api_metrics_render(const struct api_metrics *m, struct evbuffer *out,
    unsigned inflight);

#endif
