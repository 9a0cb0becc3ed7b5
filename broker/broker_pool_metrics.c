/* broker_pool_metrics.c - the warm pool's figures, counted by the driver's pool (engine or kubernetes) and rendered for GET /metrics; touches only its own counters. */
#include <inttypes.h>

#include <event2/buffer.h>

#include "broker_pool_metrics.h"

static int64_t g_want, g_ready;
static uint64_t g_claims, g_miss[3], g_made, g_failed;

void
broker_pool_wanted(int64_t n)
{
	g_want = n > 0 ? n : 0;
}

void
broker_pool_ready(int64_t n)
{
	g_ready = n > 0 ? n : 0;
}

void
broker_pool_claimed(void)
{
	g_claims++;
}

void
broker_pool_missed(enum broker_pool_miss why)
{
	if ((unsigned)why < sizeof(g_miss) / sizeof(g_miss[0]))
		g_miss[why]++;
}

void
broker_pool_made(int ok)
{
	if (ok)
		g_made++;
	else
		g_failed++;
}

int
broker_pool_metrics_render(struct evbuffer *out)
{
	return evbuffer_add_printf(out,
	    "# HELP sbx_broker_warm_pool_members Warm pool members (adr/0067): "
	    "ready to be claimed, and wanted (warm_pool).\n"
	    "# TYPE sbx_broker_warm_pool_members gauge\n"
	    "sbx_broker_warm_pool_members{state=\"ready\"} %" PRId64 "\n"
	    "sbx_broker_warm_pool_members{state=\"wanted\"} %" PRId64 "\n"
	    "# HELP sbx_broker_warm_pool_claims_total Ensures of a new sandbox "
	    "answered with a warm pool member.\n"
	    "# TYPE sbx_broker_warm_pool_claims_total counter\n"
	    "sbx_broker_warm_pool_claims_total %" PRIu64 "\n"
	    "# HELP sbx_broker_warm_pool_misses_total Ensures of a new sandbox "
	    "made cold with the pool on: empty (no member ready, or the claim "
	    "lost), spec (egress, another image or limits), volume (the id's "
	    "/work exists).\n"
	    "# TYPE sbx_broker_warm_pool_misses_total counter\n"
	    "sbx_broker_warm_pool_misses_total{reason=\"empty\"} %" PRIu64 "\n"
	    "sbx_broker_warm_pool_misses_total{reason=\"spec\"} %" PRIu64 "\n"
	    "sbx_broker_warm_pool_misses_total{reason=\"volume\"} %" PRIu64 "\n"
	    "# HELP sbx_broker_warm_pool_made_total Warm pool members made.\n"
	    "# TYPE sbx_broker_warm_pool_made_total counter\n"
	    "sbx_broker_warm_pool_made_total{result=\"ok\"} %" PRIu64 "\n"
	    "sbx_broker_warm_pool_made_total{result=\"failed\"} %" PRIu64 "\n",
	    g_ready, g_want, g_claims, g_miss[BROKER_POOL_MISS_EMPTY],
	    g_miss[BROKER_POOL_MISS_SPEC], g_miss[BROKER_POOL_MISS_VOLUME],
	    g_made, g_failed) < 0 ? -1 : 0;
}
