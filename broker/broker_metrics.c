/* broker_metrics.c - counters of the broker in Prometheus text format. */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "broker_metrics.h"

#define MAX_SERIES 128
#define MAX_OPS 16

/* Histogram bucket bounds in milliseconds (le= in seconds). */
static const int64_t bounds_ms[] = { 1, 5, 10, 50, 100, 500, 1000, 5000,
	30000, 300000 };
#define NBOUNDS (sizeof(bounds_ms) / sizeof(bounds_ms[0]))

struct series {
	const char *op;      /* static */
	int status;
	uint64_t count;
};

struct hist {
	const char *op;      /* static */
	uint64_t le[NBOUNDS];
	uint64_t count;
	int64_t sum_ms;
};

struct broker_metrics {
	struct series req[MAX_SERIES];
	size_t nreq;
	struct hist dur[MAX_OPS];
	size_t ndur;
	uint64_t execs_started, execs_finished, output_bytes;
	uint64_t runtime_errors, reaped;
};

struct broker_metrics *
broker_metrics_new(void)
{
	return calloc(1, sizeof(struct broker_metrics));
}

void
broker_metrics_free(struct broker_metrics *m)
{
	free(m);
}

static void
observe(struct broker_metrics *m, const char *op, int64_t ms)
{
	struct hist *h = NULL;
	size_t i;

	for (i = 0; i < m->ndur; i++)
		if (strcmp(m->dur[i].op, op) == 0)
			h = &m->dur[i];
	if (h == NULL) {
		if (m->ndur == MAX_OPS)
			return;
		h = &m->dur[m->ndur++];
		h->op = op;
	}
	for (i = 0; i < NBOUNDS; i++)
		if (ms <= bounds_ms[i])
			h->le[i]++;
	h->count++;
	h->sum_ms += ms;
}

void
broker_metrics_request(struct broker_metrics *m, const char *op, int status,
    int64_t duration_ms)
{
	size_t i;

	observe(m, op, duration_ms);
	for (i = 0; i < m->nreq; i++)
		if (m->req[i].status == status && strcmp(m->req[i].op, op) == 0) {
			m->req[i].count++;
			return;
		}
	if (m->nreq == MAX_SERIES)
		return;
	m->req[m->nreq].op = op;
	m->req[m->nreq].status = status;
	m->req[m->nreq++].count = 1;
}

void
broker_metrics_exec_started(struct broker_metrics *m)
{
	m->execs_started++;
}

void
broker_metrics_exec_finished(struct broker_metrics *m)
{
	m->execs_finished++;
}

void
broker_metrics_exec_output(struct broker_metrics *m, size_t bytes)
{
	m->output_bytes += bytes;
}

void
broker_metrics_runtime_error(struct broker_metrics *m)
{
	m->runtime_errors++;
}

void
broker_metrics_reaped(struct broker_metrics *m)
{
	m->reaped++;
}

int
broker_metrics_render(const struct broker_metrics *m, struct evbuffer *out,
    int sandboxes_running, int sandboxes_stopped)
{
	const struct hist *h;
	size_t i, k;
	int rc = 0;

	rc |= evbuffer_add_printf(out,
	    "# HELP sbx_broker_requests_total HTTP requests answered, by operation and status.\n"
	    "# TYPE sbx_broker_requests_total counter\n") < 0;
	for (i = 0; i < m->nreq; i++)
		rc |= evbuffer_add_printf(out,
		    "sbx_broker_requests_total{op=\"%s\",code=\"%d\"} %llu\n",
		    m->req[i].op, m->req[i].status,
		    (unsigned long long)m->req[i].count) < 0;
	rc |= evbuffer_add_printf(out,
	    "# HELP sbx_broker_request_duration_seconds Time to answer a request (streams: until their end).\n"
	    "# TYPE sbx_broker_request_duration_seconds histogram\n") < 0;
	for (i = 0; i < m->ndur; i++) {
		h = &m->dur[i];
		for (k = 0; k < NBOUNDS; k++)
			rc |= evbuffer_add_printf(out,
			    "sbx_broker_request_duration_seconds_bucket{op=\"%s\",le=\"%g\"} %llu\n",
			    h->op, (double)bounds_ms[k] / 1000.0,
			    (unsigned long long)h->le[k]) < 0;
		rc |= evbuffer_add_printf(out,
		    "sbx_broker_request_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %llu\n"
		    "sbx_broker_request_duration_seconds_sum{op=\"%s\"} %.3f\n"
		    "sbx_broker_request_duration_seconds_count{op=\"%s\"} %llu\n",
		    h->op, (unsigned long long)h->count, h->op,
		    (double)h->sum_ms / 1000.0, h->op,
		    (unsigned long long)h->count) < 0;
	}
	rc |= evbuffer_add_printf(out,
	    "# HELP sbx_broker_execs_running Execs running now.\n"
	    "# TYPE sbx_broker_execs_running gauge\n"
	    "sbx_broker_execs_running %llu\n"
	    "# HELP sbx_broker_execs_started_total Execs whose stream started.\n"
	    "# TYPE sbx_broker_execs_started_total counter\n"
	    "sbx_broker_execs_started_total %llu\n"
	    "# HELP sbx_broker_execs_finished_total Execs that ended (exit, error or cancel).\n"
	    "# TYPE sbx_broker_execs_finished_total counter\n"
	    "sbx_broker_execs_finished_total %llu\n"
	    "# HELP sbx_broker_exec_output_bytes_total Bytes of exec stdout and stderr streamed.\n"
	    "# TYPE sbx_broker_exec_output_bytes_total counter\n"
	    "sbx_broker_exec_output_bytes_total %llu\n"
	    "# HELP sbx_broker_reaped_total Sandboxes stopped or destroyed by the reaper.\n"
	    "# TYPE sbx_broker_reaped_total counter\n"
	    "sbx_broker_reaped_total %llu\n"
	    "# HELP sbx_broker_runtime_errors_total Driver operations that failed on the runtime.\n"
	    "# TYPE sbx_broker_runtime_errors_total counter\n"
	    "sbx_broker_runtime_errors_total %llu\n",
	    (unsigned long long)(m->execs_started - m->execs_finished),
	    (unsigned long long)m->execs_started,
	    (unsigned long long)m->execs_finished,
	    (unsigned long long)m->output_bytes,
	    (unsigned long long)m->reaped,
	    (unsigned long long)m->runtime_errors) < 0;
	if (sandboxes_running >= 0 && sandboxes_stopped >= 0)
		rc |= evbuffer_add_printf(out,
		    "# HELP sbx_broker_sandboxes Sandboxes in the broker's state, by state.\n"
		    "# TYPE sbx_broker_sandboxes gauge\n"
		    "sbx_broker_sandboxes{state=\"running\"} %d\n"
		    "sbx_broker_sandboxes{state=\"stopped\"} %d\n",
		    sandboxes_running, sandboxes_stopped) < 0;
	return rc ? -1 : 0;
}
