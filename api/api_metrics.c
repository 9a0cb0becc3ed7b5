/* api_metrics.c - sandbox-api's counters in Prometheus text format (names follow sbx_broker_*). */
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "api_metrics.h"

void
api_metrics_request(struct api_metrics *m, const char *route, int status)
{
	sbx_req_series_count(m->req, &m->nreq, API_METRICS_MAX_REQ, route,
	    status);
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

	rc |= sbx_req_series_render(out, "sbx_api_http_requests_total",
	    "HTTP requests answered, by route and status (streams when they end).",
	    "route", m->req, m->nreq);
	rc |= sbx_metrics_one(out, "sbx_api_http_requests_in_flight", "gauge",
	    "Requests being answered now, open streams included.", inflight);
	rc |= sbx_metrics_one(out, "sbx_api_sse_clients", "gauge",
	    "Clients with an exec event stream (SSE) open now.",
	    (unsigned long long)m->sse_clients);
	rc |= sbx_metrics_one(out, "sbx_api_execs_started_total", "counter",
	    "Execs whose stream started (the broker's start event arrived).",
	    (unsigned long long)m->execs_started);
	rc |= sbx_metrics_one(out, "sbx_api_execs_finished_total", "counter",
	    "Started execs that ended: exit, error, timeout, client gone, shutdown.",
	    (unsigned long long)m->execs_finished);
	rc |= sbx_metrics_one(out, "sbx_api_execs_running", "gauge",
	    "Execs whose stream has started and not ended.",
	    (unsigned long long)(m->execs_started - m->execs_finished));
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
		rc |= sbx_metrics_label(out, "sbx_api_broker_errors_total",
		    "code", m->broker_err[i].code,
		    (unsigned long long)m->broker_err[i].count);
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
