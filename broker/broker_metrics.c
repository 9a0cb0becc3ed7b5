/* broker_metrics.c - counters of the broker in Prometheus text format. */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "broker_metrics.h"

#define MAX_SERIES 128

struct series {
	const char *route;   /* static */
	int status;
	uint64_t count;
};

struct broker_metrics {
	struct series req[MAX_SERIES];
	size_t nreq;
	uint64_t req_dropped;        /* series beyond MAX_SERIES */
	uint64_t execs_started, execs_finished, runtime_errors;
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

void
broker_metrics_request(struct broker_metrics *m, const char *route, int status)
{
	size_t i;

	for (i = 0; i < m->nreq; i++)
		if (m->req[i].status == status &&
		    strcmp(m->req[i].route, route) == 0) {
			m->req[i].count++;
			return;
		}
	if (m->nreq == MAX_SERIES) {
		m->req_dropped++;
		return;
	}
	m->req[m->nreq].route = route;
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
broker_metrics_runtime_error(struct broker_metrics *m)
{
	m->runtime_errors++;
}

int
broker_metrics_render(const struct broker_metrics *m, struct evbuffer *out)
{
	size_t i;
	int rc = 0;

	rc |= evbuffer_add_printf(out,
	    "# HELP sbx_broker_requests_total HTTP requests answered, by route and status.\n"
	    "# TYPE sbx_broker_requests_total counter\n") < 0;
	for (i = 0; i < m->nreq; i++)
		rc |= evbuffer_add_printf(out,
		    "sbx_broker_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
		    m->req[i].route, m->req[i].status,
		    (unsigned long long)m->req[i].count) < 0;
	rc |= evbuffer_add_printf(out,
	    "# HELP sbx_broker_execs_started_total Execs whose stream started.\n"
	    "# TYPE sbx_broker_execs_started_total counter\n"
	    "sbx_broker_execs_started_total %llu\n"
	    "# HELP sbx_broker_execs_finished_total Execs that ended (exit, error or cancel).\n"
	    "# TYPE sbx_broker_execs_finished_total counter\n"
	    "sbx_broker_execs_finished_total %llu\n"
	    "# HELP sbx_broker_execs_in_flight Execs running now.\n"
	    "# TYPE sbx_broker_execs_in_flight gauge\n"
	    "sbx_broker_execs_in_flight %llu\n"
	    "# HELP sbx_broker_runtime_errors_total Driver operations that failed on the runtime.\n"
	    "# TYPE sbx_broker_runtime_errors_total counter\n"
	    "sbx_broker_runtime_errors_total %llu\n",
	    (unsigned long long)m->execs_started,
	    (unsigned long long)m->execs_finished,
	    (unsigned long long)(m->execs_started - m->execs_finished),
	    (unsigned long long)m->runtime_errors) < 0;
	return rc ? -1 : 0;
}
