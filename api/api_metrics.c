/* api_metrics.c - sandbox-api's counters in Prometheus text format (names follow sbx_broker_*). */
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "api_metrics.h"

void
api_metrics_request(struct api_metrics *m, const char *route, int status)
{
	size_t i;

	for (i = 0; i < m->nreq; i++)
		if (m->req[i].status == status &&
		    strcmp(m->req[i].route, route) == 0) {
			m->req[i].count++;
			return;
		}
	if (m->nreq == API_METRICS_MAX_REQ)
		return;
	m->req[m->nreq].route = route;
	m->req[m->nreq].status = status;
	m->req[m->nreq++].count = 1;
}

void
api_metrics_sse(struct api_metrics *m, int delta)
{
	if (delta > 0)
		m->sse_clients++;
	else if (m->sse_clients > 0)
		m->sse_clients--;
}

void
api_metrics_exec_started(struct api_metrics *m)
{
	m->execs_started++;
}

void
api_metrics_exec_finished(struct api_metrics *m, int64_t duration_ms)
{
	m->execs_finished++;
	sbx_hist_add(&m->exec_dur, duration_ms);
}

void
api_metrics_stream_bytes(struct api_metrics *m, int stream, size_t len)
{
	if (stream == 1)
		m->bytes_stdout += len;
	else if (stream == 2)
		m->bytes_stderr += len;
	else
		m->bytes_file += len;
}

void
api_metrics_broker_error(struct api_metrics *m, const char *code)
{
	size_t i, n = code != NULL ? strlen(code) : 0;

	/* The code comes from the broker's answer: only snake_case becomes a
	 * label value, so nothing needs escaping and nobody can add series
	 * with arbitrary text. */
	if (n == 0 || n >= sizeof(m->broker_err[0].code) ||
	    strspn(code, "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
		code = "other";
	for (i = 0; i < m->nbroker_err; i++)
		if (strcmp(m->broker_err[i].code, code) == 0) {
			m->broker_err[i].count++;
			return;
		}
	if (m->nbroker_err == API_METRICS_MAX_CODES)
		return;
	snprintf(m->broker_err[m->nbroker_err].code,
	    sizeof(m->broker_err[0].code), "%s", code);
	m->broker_err[m->nbroker_err++].count = 1;
}

void
api_metrics_rejected(struct api_metrics *m, int execs)
{
	if (execs)
		m->rejected_execs++;
	else
		m->rejected_rate++;
}

int
api_metrics_render(const struct api_metrics *m, struct evbuffer *out,
    unsigned inflight)
{
	size_t i;
	int rc = 0;

	rc |= sbx_metrics_family(out, "sbx_api_http_requests_total", "counter",
	    "HTTP requests answered, by route and status (streams when they end).");
	for (i = 0; i < m->nreq; i++)
		rc |= evbuffer_add_printf(out,
		    "sbx_api_http_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
		    m->req[i].route, m->req[i].status,
		    (unsigned long long)m->req[i].count) < 0;
	rc |= sbx_metrics_family(out, "sbx_api_http_requests_in_flight",
	    "gauge",
	    "Requests being answered now, open streams included.");
	rc |= evbuffer_add_printf(out, "sbx_api_http_requests_in_flight %u\n",
	    inflight) < 0;
	rc |= sbx_metrics_family(out, "sbx_api_sse_clients", "gauge",
	    "Clients with an exec event stream (SSE) open now.");
	rc |= evbuffer_add_printf(out, "sbx_api_sse_clients %llu\n",
	    (unsigned long long)m->sse_clients) < 0;
	rc |= sbx_metrics_family(out, "sbx_api_execs_started_total", "counter",
	    "Execs whose stream started (the broker's start event arrived).");
	rc |= evbuffer_add_printf(out, "sbx_api_execs_started_total %llu\n",
	    (unsigned long long)m->execs_started) < 0;
	rc |= sbx_metrics_family(out, "sbx_api_execs_finished_total", "counter",
	    "Started execs that ended: exit, error, timeout, client gone, shutdown.");
	rc |= evbuffer_add_printf(out, "sbx_api_execs_finished_total %llu\n",
	    (unsigned long long)m->execs_finished) < 0;
	rc |= sbx_metrics_family(out, "sbx_api_execs_running", "gauge",
	    "Execs whose stream has started and not ended.");
	rc |= evbuffer_add_printf(out, "sbx_api_execs_running %llu\n",
	    (unsigned long long)(m->execs_started - m->execs_finished)) < 0;
	rc |= sbx_metrics_family(out, "sbx_api_exec_duration_seconds",
	    "histogram",
	    "Run time of ended execs, from their start event to their end.");
	rc |= sbx_metrics_hist(out, "sbx_api_exec_duration_seconds", "",
	    &m->exec_dur);
	rc |= sbx_metrics_family(out, "sbx_api_stream_bytes_total", "counter",
	    "Bytes streamed to clients: exec stdout and stderr (raw, before SSE encoding) and file reads.");
	rc |= evbuffer_add_printf(out,
	    "sbx_api_stream_bytes_total{stream=\"stdout\"} %llu\n"
	    "sbx_api_stream_bytes_total{stream=\"stderr\"} %llu\n"
	    "sbx_api_stream_bytes_total{stream=\"file\"} %llu\n",
	    (unsigned long long)m->bytes_stdout,
	    (unsigned long long)m->bytes_stderr,
	    (unsigned long long)m->bytes_file) < 0;
	rc |= sbx_metrics_family(out, "sbx_api_broker_errors_total", "counter",
	    "Errors the broker reported (or that reaching it gave), by error code.");
	for (i = 0; i < m->nbroker_err; i++)
		rc |= evbuffer_add_printf(out,
		    "sbx_api_broker_errors_total{code=\"%s\"} %llu\n",
		    m->broker_err[i].code,
		    (unsigned long long)m->broker_err[i].count) < 0;
	rc |= sbx_metrics_family(out, "sbx_api_rate_limit_rejections_total",
	    "counter",
	    "Requests refused with 429 by a per-principal limit, by limit.");
	rc |= evbuffer_add_printf(out,
	    "sbx_api_rate_limit_rejections_total{limit=\"requests_per_minute\"} %llu\n"
	    "sbx_api_rate_limit_rejections_total{limit=\"max_execs_per_principal\"} %llu\n",
	    (unsigned long long)m->rejected_rate,
	    (unsigned long long)m->rejected_execs) < 0;
	return rc ? -1 : 0;
}
