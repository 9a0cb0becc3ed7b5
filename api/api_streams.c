/* api_streams.c - a principal's shares of the api's shared pools (adr/0056): its limits record, its open streams (streams_per_principal) and the connections its requests hold (connections_per_principal); touches only the records in api_server and the gate's connection marks. */
#include <stdint.h>
#include <stdlib.h>

#include <event2/http.h>

#include "api_int.h"
#include "sbx_gate.h"
#include "sbx_proto.h"
#include "sbx_time.h"

struct api_limit *
api_limit_get(struct api_server *s, int64_t principal_id)
{
	struct api_limit *l;

	for (l = s->limits; l != NULL; l = l->next)
		if (l->principal_id == principal_id)
			return l;
	if ((l = calloc(1, sizeof(*l))) == NULL)
		return NULL;
	l->principal_id = principal_id;
	l->tokens = (double)s->cfg->rate_per_minute;
	l->refilled_ms = sbx_mono_ms();
	l->next = s->limits;
	s->limits = l;
	return l;
}

static struct api_limit *
limit_find(struct api_server *s, int64_t principal_id)
{
	struct api_limit *l;

	for (l = s->limits; l != NULL; l = l->next)
		if (l->principal_id == principal_id)
			return l;
	return NULL;
}

int
api_streams_take(struct api_server *s, int64_t principal_id,
    struct sbx_err *err)
{
	struct api_limit *l = api_limit_get(s, principal_id);

	if (l == NULL)
		return sbx_err_oom(err);
	if (l->streams >= (unsigned long long)s->cfg->streams_per_principal) {
		api_metrics_rejected(&s->metrics, 0);
		return sbx_err_set(err, SBX_E_TOO_MANY, "You already hold %lld "
		    "open streams (viewers, terminals, port connections); close "
		    "one, or try again when one has ended.",
		    s->cfg->streams_per_principal);
	}
	l->streams++;
	return 0;
}

void
api_streams_put(struct api_server *s, int64_t principal_id)
{
	struct api_limit *l = limit_find(s, principal_id);

	if (l != NULL && l->streams > 0)
		l->streams--;
}

static long long
conns_share(const struct api_config *cfg)
{
	if (cfg->connections_per_principal > 0)
		return cfg->connections_per_principal;
	return cfg->max_connections / 8 > 0 ? cfg->max_connections / 8 : 1;
}

int
api_conns_admit(struct areq *a, struct sbx_err *err)
{
	struct api_server *s = a->s;
	int64_t prev;
	struct api_limit *old;

	if (!a->authed || a->lim == NULL || a->h.req == NULL)
		return 0;
	prev = sbx_gate_conn_mark(s->gate, a->h.req);
	if (prev == a->who.id)
		return 0;
	if (a->lim->conns >= (unsigned long long)conns_share(s->cfg)) {
		/* Its slot goes back to the pool with this reply. */
		a->close_after = 1;
		api_metrics_rejected(&s->metrics, 0);
		return sbx_err_set(err, SBX_E_TOO_MANY, "You already hold %lld "
		    "connections to the api; reuse one (keep-alive) or close "
		    "some, then try again.", conns_share(s->cfg));
	}
	/* A connection another principal used before (a proxy's keep-alive
	 * connection): it counts for the one using it now. */
	if (prev != 0 && (old = limit_find(s, prev)) != NULL && old->conns > 0)
		old->conns--;
	if (sbx_gate_conn_set_mark(s->gate, a->h.req, a->who.id) == 0)
		a->lim->conns++;
	return 0;
}

void
api_conns_unmark(void *arg, int64_t principal_id)
{
	struct api_limit *l = limit_find(arg, principal_id);

	if (l != NULL && l->conns > 0)
		l->conns--;
}
