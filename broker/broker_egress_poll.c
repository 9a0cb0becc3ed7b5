/* broker_egress_poll.c - the egress poll: each sandbox's proxy read on a timer, what it reports kept by broker_egress_note for /metrics (adr/0027). */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "broker_egress.h"
#include "broker_egress_poll.h"
#include "broker_metrics.h"
#include "broker_reaper.h"
#include "broker_state.h"
#include "sbx_call.h"
#include "sbx_log.h"

struct broker_egress_poll {
	struct broker_server *s;
	struct event *timer;
	struct sbx_op *op;        /* the read in flight, or NULL */
	char (*ids)[64];          /* this pass's sandboxes */
	size_t nids, next;
};

static void poll_next(struct broker_egress_poll *p);

static void
poll_read(void *arg, const struct sbx_err *err, const char *text)
{
	struct broker_egress_poll *p = arg;
	const char *id = p->ids[p->next];

	p->op = NULL;
	if (err != NULL)
		log_warn("cannot read an egress proxy's counts", "id", id, "code",
		    err->code, "error", err->message, NULL);
	else
		broker_egress_note(broker_server_metrics(p->s),
		    broker_server_state(p->s), id, text);
	p->next++;
	poll_next(p);
}

static void
poll_next(struct broker_egress_poll *p)
{
	struct sbx_err e;

	for (; p->next < p->nids && !broker_server_draining(p->s); p->next++) {
		sbx_err_clear(&e);
		p->op = sbx_call_egress_stats(broker_server_driver(p->s),
		    p->ids[p->next], poll_read, p, &e);
		if (p->op != NULL)
			return;
		log_warn("cannot read an egress proxy's counts", "id",
		    p->ids[p->next], "error", e.message, NULL);
	}
	free(p->ids);
	p->ids = NULL;
	p->nids = p->next = 0;
}

static void
poll_tick(evutil_socket_t fd, short what, void *arg)
{
	struct broker_egress_poll *p = arg;
	struct broker_metrics *m = broker_server_metrics(p->s);
	struct broker_row *rows = NULL;
	struct sbx_err e;
	size_t i, n = 0;

	(void)fd;
	(void)what;
	if (p->ids != NULL || broker_server_draining(p->s))
		return;           /* the last pass goes on */
	sbx_err_clear(&e);
	if (broker_state_list(broker_server_state(p->s), &rows, &n, &e) == -1) {
		log_error("egress poll cannot read the state", "error", e.message,
		    NULL);
		return;
	}
	if (n > 0 && (p->ids = calloc(n, sizeof(*p->ids))) == NULL) {
		free(rows);
		log_error("egress poll: out of memory", NULL);
		return;
	}
	/* A stopped proxy counts nothing: once cached, it is not read again. */
	for (i = 0; i < n; i++)
		if (rows[i].egress && (strcmp(rows[i].state, "running") == 0 ||
		    (strcmp(rows[i].state, "stopped") == 0 &&
		    !broker_metrics_egress_known(m, rows[i].id))))
			memcpy(p->ids[p->nids++], rows[i].id, sizeof(p->ids[0]));
	free(rows);
	p->next = 0;
	if (p->nids == 0) {
		free(p->ids);
		p->ids = NULL;
		return;
	}
	poll_next(p);
}

struct broker_egress_poll *
broker_egress_poll_new(struct broker_server *s, struct sbx_err *err)
{
	const struct broker_config *cfg = broker_server_config(s);
	struct broker_egress_poll *p;
	struct timeval tv;

	sbx_err_clear(err);
	if (cfg->egress_stats_interval <= 0 ||
	    !sbx_call_supports(broker_server_driver(s), SBX_CALL_EGRESS_STATS))
		return NULL;
	if ((p = calloc(1, sizeof(*p))) == NULL)
		goto oom;
	p->s = s;
	if ((p->timer = event_new(broker_server_base(s), -1, EV_PERSIST,
	    poll_tick, p)) == NULL)
		goto oom;
	tv.tv_sec = cfg->egress_stats_interval / 1000;
	tv.tv_usec = (cfg->egress_stats_interval % 1000) * 1000;
	if (event_add(p->timer, &tv) == -1)
		goto oom;
	/* The first pass at once: counts survive a broker restart. */
	event_active(p->timer, EV_TIMEOUT, 0);
	return p;
oom:
	broker_egress_poll_free(p);
	sbx_err_oom(err);
	return NULL;
}

void
broker_egress_poll_free(struct broker_egress_poll *p)
{
	if (p == NULL)
		return;
	sbx_op_cancel(p->op);
	if (p->timer != NULL)
		event_free(p->timer);
	free(p->ids);
	free(p);
}
