/* sbx_metrics.c - the Prometheus text writer both daemons' /metrics use. */
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "sbx_metrics.h"

const int64_t sbx_metrics_bounds_ms[SBX_METRICS_NBOUNDS] = { 1, 5, 10, 50,
	100, 500, 1000, 5000, 30000, 300000 };

void
sbx_hist_add(struct sbx_hist *h, int64_t ms)
{
	size_t i;

	if (ms < 0)
		ms = 0;
	for (i = 0; i < SBX_METRICS_NBOUNDS; i++)
		if (ms <= sbx_metrics_bounds_ms[i])
			h->le[i]++;
	h->count++;
	h->sum_ms += ms;
}

int
sbx_metrics_family(struct evbuffer *out, const char *name, const char *type,
    const char *help)
{
	return evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name,
	    help, name, type) < 0;
}

int
sbx_metrics_one(struct evbuffer *out, const char *name, const char *type,
    const char *help, unsigned long long v)
{
	int rc = sbx_metrics_family(out, name, type, help);

	/* Two statements: the family lines must come first. */
	rc |= evbuffer_add_printf(out, "%s %llu\n", name, v) < 0;
	return rc;
}

int
sbx_metrics_label(struct evbuffer *out, const char *name, const char *key,
    const char *value, unsigned long long v)
{
	return evbuffer_add_printf(out, "%s{%s=\"%s\"} %llu\n", name, key,
	    value, v) < 0;
}

int
sbx_metrics_hist(struct evbuffer *out, const char *name, const char *labels,
    const struct sbx_hist *h)
{
	char lb[96];
	size_t k, n;
	int rc = 0;

	for (k = 0; k < SBX_METRICS_NBOUNDS; k++)
		rc |= evbuffer_add_printf(out, "%s_bucket{%sle=\"%g\"} %llu\n",
		    name, labels, (double)sbx_metrics_bounds_ms[k] / 1000.0,
		    (unsigned long long)h->le[k]) < 0;
	/* labels without the trailing comma for _sum and _count */
	n = strlen(labels);
	if (n > 0)
		snprintf(lb, sizeof(lb), "{%.*s}", (int)(n - 1), labels);
	else
		lb[0] = '\0';
	rc |= evbuffer_add_printf(out,
	    "%s_bucket{%sle=\"+Inf\"} %llu\n%s_sum%s %.3f\n%s_count%s %llu\n",
	    name, labels, (unsigned long long)h->count, name, lb,
	    (double)h->sum_ms / 1000.0, name, lb,
	    (unsigned long long)h->count) < 0;
	return rc;
}

void
sbx_req_series_count(struct sbx_req_series *s, size_t *n, size_t max,
    const char *route, int status)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if (s[i].status == status && strcmp(s[i].route, route) == 0) {
			s[i].count++;
			return;
		}
	if (*n == max)
		return;
	s[*n].route = route;
	s[*n].status = status;
	s[(*n)++].count = 1;
}

int
sbx_req_series_render(struct evbuffer *out, const char *name,
    const char *help, const char *key, const struct sbx_req_series *s,
    size_t n)
{
	size_t i;
	int rc = sbx_metrics_family(out, name, "counter", help);

	for (i = 0; i < n; i++)
		rc |= evbuffer_add_printf(out, "%s{%s=\"%s\",code=\"%d\"} "
		    "%llu\n", name, key, s[i].route, s[i].status,
		    (unsigned long long)s[i].count) < 0;
	return rc;
}
