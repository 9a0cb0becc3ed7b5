/* broker_metrics.c - counters of the broker in Prometheus text format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "broker_metrics.h"
#include "sbx_metrics.h"
#include "sbx_proto.h"

#define MAX_SERIES 128
#define MAX_OPS 16


/* Label values of the fixed families: static strings only. */
static const char *const rt_codes[] = { SBX_E_RUNTIME,
	SBX_E_RUNTIME_UNAVAILABLE };
#define NRT (sizeof(rt_codes) / sizeof(rt_codes[0]))
static const char *const rec_results[] = { "adopted", "recorded", "absent",
	"killed" };
#define NREC (sizeof(rec_results) / sizeof(rec_results[0]))

struct hist {
	const char *op;      /* static; NULL for an unlabelled histogram */
	struct sbx_hist h;
};

/* One sandbox's egress proxy counts (adr/0027). */
struct egress_count {
	char id[64];
	uint64_t allowed, denied;
};

struct broker_metrics {
	struct sbx_req_series req[MAX_SERIES]; /* route: the op, static */
	size_t nreq;
	struct hist dur[MAX_OPS];
	size_t ndur;
	struct hist exec_dur;
	uint64_t execs_started, execs_finished, output_bytes[2];
	uint64_t runtime_errors[NRT], reaped[2], recovered[NREC];
	struct egress_count *eg;      /* sorted by id */
	size_t neg, caneg;
};

struct broker_metrics *
broker_metrics_new(void)
{
	return calloc(1, sizeof(struct broker_metrics));
}

void
broker_metrics_free(struct broker_metrics *m)
{
	if (m != NULL)
		free(m->eg);
	free(m);
}

/* Index of id in m->eg, or where it would go (*found 0). */
static size_t
eg_find(const struct broker_metrics *m, const char *id, int *found)
{
	size_t lo = 0, hi = m->neg, mid;
	int c;

	*found = 0;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		c = strcmp(m->eg[mid].id, id);
		if (c == 0) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int
broker_metrics_egress_set(struct broker_metrics *m, const char *id,
    uint64_t allowed, uint64_t denied)
{
	struct egress_count *n;
	size_t i;
	int found;

	if (strlen(id) >= sizeof(m->eg[0].id))
		return -1;
	i = eg_find(m, id, &found);
	if (!found) {
		if (m->neg == m->caneg) {
			size_t cap = m->caneg ? m->caneg * 2 : 16;

			if ((n = realloc(m->eg, cap * sizeof(*n))) == NULL)
				return -1;
			m->eg = n;
			m->caneg = cap;
		}
		memmove(&m->eg[i + 1], &m->eg[i], (m->neg - i) * sizeof(*m->eg));
		memset(&m->eg[i], 0, sizeof(m->eg[i]));
		snprintf(m->eg[i].id, sizeof(m->eg[i].id), "%s", id);
		m->neg++;
	}
	/* The larger of the two: reads that overlap may end out of order. */
	if (allowed > m->eg[i].allowed)
		m->eg[i].allowed = allowed;
	if (denied > m->eg[i].denied)
		m->eg[i].denied = denied;
	return 0;
}

void
broker_metrics_egress_forget(struct broker_metrics *m, const char *id)
{
	size_t i;
	int found;

	i = eg_find(m, id, &found);
	if (!found)
		return;
	memmove(&m->eg[i], &m->eg[i + 1], (m->neg - i - 1) * sizeof(*m->eg));
	m->neg--;
}

int
broker_metrics_egress_known(const struct broker_metrics *m, const char *id)
{
	int found;

	eg_find(m, id, &found);
	return found;
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
	sbx_hist_add(&h->h, ms);
}

void
broker_metrics_request(struct broker_metrics *m, const char *op, int status,
    int64_t duration_ms)
{
	observe(m, op, duration_ms);
	sbx_req_series_count(m->req, &m->nreq, MAX_SERIES, op, status);
}

void
broker_metrics_exec_started(struct broker_metrics *m)
{
	m->execs_started++;
}

void
broker_metrics_exec_finished(struct broker_metrics *m, int64_t duration_ms)
{
	m->execs_finished++;
	sbx_hist_add(&m->exec_dur.h, duration_ms);
}

void
broker_metrics_exec_output(struct broker_metrics *m, int stream,
    size_t bytes)
{
	if (stream == 1 || stream == 2)
		m->output_bytes[stream - 1] += bytes;
}

void
broker_metrics_runtime_error(struct broker_metrics *m, const char *code)
{
	size_t i;

	for (i = 0; i < NRT; i++)
		if (code != NULL && strcmp(code, rt_codes[i]) == 0)
			m->runtime_errors[i]++;
}

void
broker_metrics_reaped(struct broker_metrics *m, int destroyed)
{
	m->reaped[destroyed ? 1 : 0]++;
}

void
broker_metrics_recovered(struct broker_metrics *m, const char *result)
{
	size_t i;

	for (i = 0; i < NREC; i++)
		if (strcmp(result, rec_results[i]) == 0)
			m->recovered[i]++;
}

int
broker_metrics_render(const struct broker_metrics *m, struct evbuffer *out,
    int sandboxes_running, int sandboxes_stopped, int sandboxes_absent)
{
	char lb[64];
	size_t i;
	int rc = 0;

	rc |= sbx_req_series_render(out, "sbx_broker_requests_total",
	    "HTTP requests answered, by route (op) and HTTP status (code).",
	    "op", m->req, m->nreq);
	rc |= sbx_metrics_family(out, "sbx_broker_request_duration_seconds",
	    "histogram",
	    "Time to answer a request, by route (streams: until their end).");
	for (i = 0; i < m->ndur; i++) {
		snprintf(lb, sizeof(lb), "op=\"%s\",", m->dur[i].op);
		rc |= sbx_metrics_hist(out, "sbx_broker_request_duration_seconds",
	    lb,
		    &m->dur[i].h);
	}
	rc |= sbx_metrics_one(out, "sbx_broker_execs_running", "gauge",
	    "Execs whose stream has started and not ended.",
	    (unsigned long long)(m->execs_started - m->execs_finished));
	rc |= sbx_metrics_one(out, "sbx_broker_execs_started_total", "counter",
	    "Execs whose stream started.",
	    (unsigned long long)m->execs_started);
	rc |= sbx_metrics_one(out, "sbx_broker_execs_finished_total", "counter",
	    "Started execs that ended (exit, error, cancel or shutdown).",
	    (unsigned long long)m->execs_finished);
	rc |= sbx_metrics_family(out, "sbx_broker_exec_duration_seconds",
	    "histogram",
	    "Run time of ended execs, from their start event to their end.");
	rc |= sbx_metrics_hist(out, "sbx_broker_exec_duration_seconds", "",
	    &m->exec_dur.h);
	rc |= sbx_metrics_family(out, "sbx_broker_exec_output_bytes_total",
	    "counter",
	    "Bytes of exec output streamed to clients, by stream.");
	rc |= sbx_metrics_label(out, "sbx_broker_exec_output_bytes_total",
	    "stream", "stdout", (unsigned long long)m->output_bytes[0]);
	rc |= sbx_metrics_label(out, "sbx_broker_exec_output_bytes_total",
	    "stream", "stderr", (unsigned long long)m->output_bytes[1]);
	if (sandboxes_running >= 0 && sandboxes_stopped >= 0 &&
	    sandboxes_absent >= 0) {
		rc |= sbx_metrics_family(out, "sbx_broker_sandboxes", "gauge",
		    "Sandboxes in the broker's state table, by state.");
		/* each >= 0 (checked above) */
		rc |= sbx_metrics_label(out, "sbx_broker_sandboxes", "state",
		    "running", (unsigned long long)sandboxes_running);
		rc |= sbx_metrics_label(out, "sbx_broker_sandboxes", "state",
		    "stopped", (unsigned long long)sandboxes_stopped);
		rc |= sbx_metrics_label(out, "sbx_broker_sandboxes", "state",
		    "absent", (unsigned long long)sandboxes_absent);
	}
	rc |= sbx_metrics_family(out, "sbx_broker_reaped_total", "counter",
	    "Sandboxes the idle reaper stopped or destroyed, by action.");
	rc |= sbx_metrics_label(out, "sbx_broker_reaped_total", "action",
	    "stop", (unsigned long long)m->reaped[0]);
	rc |= sbx_metrics_label(out, "sbx_broker_reaped_total", "action",
	    "destroy", (unsigned long long)m->reaped[1]);
	rc |= sbx_metrics_family(out, "sbx_broker_runtime_errors_total",
	    "counter",
	    "Driver operations that failed on the container runtime, by error code.");
	for (i = 0; i < NRT; i++)
		rc |= sbx_metrics_label(out, "sbx_broker_runtime_errors_total",
		    "code", rt_codes[i],
		    (unsigned long long)m->runtime_errors[i]);
	rc |= sbx_metrics_family(out, "sbx_broker_recovered_total", "counter",
	    "Start-up reconciliation with the runtime, by result.");
	for (i = 0; i < NREC; i++)
		rc |= sbx_metrics_label(out, "sbx_broker_recovered_total",
		    "result", rec_results[i],
		    (unsigned long long)m->recovered[i]);
	rc |= sbx_metrics_family(out, "sbx_broker_egress_connections_total",
	    "counter",
	    "Connections a sandbox's egress proxy allowed or denied (adr/0027), "
	    "by sandbox id and decision.");
	for (i = 0; i < m->neg; i++)
		rc |= evbuffer_add_printf(out,
		    "sbx_broker_egress_connections_total{id=\"%s\",decision=\"allowed\"} %llu\n"
		    "sbx_broker_egress_connections_total{id=\"%s\",decision=\"denied\"} %llu\n",
		    m->eg[i].id, (unsigned long long)m->eg[i].allowed, m->eg[i].id,
		    (unsigned long long)m->eg[i].denied) < 0;
	return rc ? -1 : 0;
}
