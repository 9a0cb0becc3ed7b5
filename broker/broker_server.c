/* broker_server.c - the broker's HTTP server: made with its route table, bound, drained and freed over the core (sbx_httpd.h); the hooks the reaper and the egress poll use: jobs in the per-id queue, borrowed parts (SPEC §7, adr/0036). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/http.h>
#include <sodium.h>

#include "sbx_bev.h"
#include "broker_int.h"
#include "broker_metrics.h"
#include "broker_state.h"
#include "sbx_gate.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"

int
broker_server_draining(const struct broker_server *s)
{
	return s->draining || s->stopping;
}

struct broker_state *
broker_server_state(struct broker_server *s)
{
	return s->state;
}

struct broker_metrics *
broker_server_metrics(struct broker_server *s)
{
	return s->metrics;
}

struct sbx_driver *
broker_server_driver(struct broker_server *s)
{
	return s->driver;
}

const struct broker_config *
broker_server_config(const struct broker_server *s)
{
	return s->cfg;
}

struct event_base *
broker_server_base(struct broker_server *s)
{
	return s->base;
}

/* ------------------------------------------------------------------ */
/* Internal jobs (the reaper's), in the per-id queue                   */

static int
job_begin(struct breq *b, struct sbx_err *err)
{
	(void)err;
	b->job_start((struct broker_job *)b, b->job_arg);
	return 0;
}

int
broker_server_job(struct broker_server *s, const char *id,
    broker_job_fn start, void *arg, void (*arg_free)(void *),
    struct sbx_err *err)
{
	struct breq *b;

	if (!sbx_id_valid(id)) {
		if (arg_free != NULL)
			arg_free(arg);
		return sbx_err_bad_id(err);
	}
	if ((b = breq_new(s)) == NULL) {
		if (arg_free != NULL)
			arg_free(arg);
		return sbx_err_oom(err);
	}
	b->internal = 1;
	b->name = "job";
	b->job_start = start;
	b->job_arg = arg;
	b->job_free = arg_free;
	snprintf(b->id, sizeof(b->id), "%s", id);
	if ((b->sbx = bsbx_get(s, id)) == NULL) {
		breq_done(b, 500, SBX_E_INTERNAL);
		return sbx_err_oom(err);
	}
	breq_enqueue(b, job_begin);
	return 0;
}

const char *
broker_job_id(const struct broker_job *job)
{
	return ((const struct breq *)job)->id;
}

/* Requests of x in flight but skip that are use of the sandbox; those
 * parked behind a job's block wait for it and are not, nor are the quiet
 * sessions (broker_int.h), but the latest moment one of them moved bytes
 * goes into *quiet_ms (kept when none is later). */
static unsigned
uses(struct broker_server *s, const struct bsbx *x, const struct breq *skip,
    int64_t *quiet_ms)
{
	const struct breq *b;
	unsigned n = 0;

	TAILQ_FOREACH(b, &s->inflight, link) {
		if (b == skip || b->sbx != x || b->parked)
			continue;
		if (!b->sess_quiet)
			n++;
		else if (b->sess_active_ms > *quiet_ms)
			*quiet_ms = b->sess_active_ms;
	}
	return n;
}

unsigned
broker_job_others(const struct broker_job *job, int64_t *quiet_ms)
{
	const struct breq *j = (const struct breq *)job;

	*quiet_ms = 0;
	return uses(j->s, j->sbx, j, quiet_ms);
}

void
broker_job_end_quiet(struct broker_job *job, const char *code,
    const char *why)
{
	struct breq *j = (struct breq *)job, *b, *next;

	/* A session's end is deferred to the loop: the list stays. */
	for (b = TAILQ_FIRST(&j->s->inflight); b != NULL; b = next) {
		next = TAILQ_NEXT(b, link);
		if (b != j && b->sbx == j->sbx && b->sess_quiet &&
		    b->sess_reap != NULL)
			b->sess_reap(b, code, why);
	}
}

void
broker_job_block(struct broker_job *job)
{
	struct breq *b = (struct breq *)job;

	b->sbx->blocker = b;
}

void
broker_job_set_op(struct broker_job *job, struct sbx_op *op)
{
	((struct breq *)job)->op = op;
}

void
broker_job_done(struct broker_job *job, const char *outcome)
{
	struct breq *b = (struct breq *)job;

	b->op = NULL;
	breq_done(b, 200, outcome);
}

int
broker_server_busy(struct broker_server *s, const char *id,
    int64_t *quiet_ms)
{
	struct bsbx *x = bsbx_find(s, id);

	*quiet_ms = 0;
	return x != NULL && uses(s, x, NULL, quiet_ms) > 0;
}

/* ------------------------------------------------------------------ */
/* Server life                                                         */

/* A request's audit row or last_used_at, written after its reply. */
static void
state_write_failed(const struct sbx_err *err)
{
	log_error("audit write failed", "error", err->message, NULL);
}

struct broker_server *
broker_server_new(struct event_base *base, const struct broker_config *cfg,
    struct sbx_driver *driver, const struct sbx_token *token,
    struct sbx_err *err)
{
	struct broker_server *s = NULL;

	if (sodium_init() < 0) {
		sbx_err_set(err, SBX_E_INTERNAL, SBX_MSG_SODIUM);
		return NULL;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL)
		goto oom;
	s->base = base;
	s->cfg = cfg;
	s->driver = driver;
	s->token = *token;
	s->routes = broker_routes;
	s->nroutes = broker_nroutes;
	TAILQ_INIT(&s->inflight);
	LIST_INIT(&s->sbxs);
	if ((s->state = broker_state_open(cfg->state_dir, err)) == NULL ||
	    broker_state_defer_on(s->state, base, state_write_failed,
	    err) == -1 ||
	    broker_state_cache(s->state, cfg->db_cache, err) == -1)
		goto fail;
	/* Twice max_sandboxes: figures of sandboxes destroyed behind the
	 * broker's back age out (adr/0057). */
	if ((s->metrics = broker_metrics_new()) == NULL ||
	    (s->allowlist = broker_config_allowlist(cfg)) == NULL ||
	    (s->quota = broker_quota_new(cfg->work_quota, cfg->work_quota_stale,
	    cfg->max_sandboxes > 0 && cfg->max_sandboxes < 100000 ?
	    (unsigned)cfg->max_sandboxes * 2 : 200000)) == NULL)
		goto oom;
	{
		/* Every method reaches dispatch, so even a 405 needs the
		 * token; the body cap is a backstop only: the gate refuses
		 * bodies over the route's cap with JSON, after
		 * authentication, before they are read. */
		struct sbx_httpd_config hc = {
			.max_body = cfg->file_size_max > cfg->body_max ?
			    cfg->file_size_max : cfg->body_max,
			.timeout_s = HTTP_TIMEOUT_S,
			.gate = {
				.head_max = (size_t)cfg->head_max,
				.headers_max = (unsigned)cfg->headers_max,
				.header_timeout_ms = cfg->header_timeout,
				.max_connections =
				    (unsigned)cfg->max_connections,
			},
			.check = broker_gate_check,
			.stream = broker_gate_stream,
			.dispatch = broker_dispatch,
			.arg = s,
		};

		if ((s->http = sbx_httpd_server_new(base, &hc, &s->gate,
		    err)) == NULL)
			goto fail;
	}
	return s;
oom:
	sbx_err_oom(err);
fail:
	broker_server_free(s);
	return NULL;
}

int
broker_server_listen(struct broker_server *s, struct sbx_err *err)
{
	return sbx_httpd_listen(s->http, s->base, s->cfg->listen, 1,
	    (unsigned)s->cfg->socket_mode, &s->listener, err);
}

int
broker_server_port(const struct broker_server *s)
{
	return s->listener.port;
}

unsigned
broker_server_inflight(const struct broker_server *s)
{
	return s->ninflight;
}

/* Grace period over: cancel whatever still runs (SPEC §7). */
static void
grace_over(void *arg)
{
	struct broker_server *s = arg;
	struct breq *b, *next;
	struct sbx_op *op;

	s->stopping = 1;
	log_warn("shutdown grace period over; cancelling in-flight requests",
	    NULL);
	for (b = TAILQ_FIRST(&s->inflight); b != NULL; b = next) {
		next = TAILQ_NEXT(b, link);
		if (b->queued)
			continue;   /* failed at its turn (breq_enqueue) */
		op = b->op;
		b->op = NULL;
		sbx_op_cancel(op);
		if (b->h.streaming && b->is_exec) {
			sbx_ndjson_error(b->h.chunk, SBX_E_SHUTTING_DOWN,
			    SBX_MSG_BROKER_DRAINING);
			breq_stream_end(b, SBX_E_SHUTTING_DOWN);
		} else if (b->h.streaming)
			breq_stream_abort(b, SBX_E_SHUTTING_DOWN);
		else
			breq_fail_code(b, SBX_E_SHUTTING_DOWN,
			    SBX_MSG_BROKER_DRAINING);
		/* Finishing b may have started/failed queued ones: restart. */
		next = TAILQ_FIRST(&s->inflight);
	}
}

static unsigned
in_flight(void *arg)
{
	return ((struct broker_server *)arg)->ninflight;
}

void
broker_server_drain(struct broker_server *s, void (*done)(void *), void *arg)
{
	if (s->draining)
		return;
	s->draining = 1;
	sbx_httpd_unlisten(s->http, &s->listener);
	log_info("draining", "in_flight", s->ninflight ? "yes" : "no", NULL);
	/* Cannot wait politely (no memory for the events): cancelled now. */
	sbx_httpd_drain_start(&s->drain, s->base, s->cfg->shutdown_grace,
	    in_flight, grace_over, s, done, arg);
}

void
broker_server_free(struct broker_server *s)
{
	struct breq *b;
	struct sbx_op *op;

	if (s == NULL)
		return;
	s->stopping = 1;
	/* Any request still here is abandoned: cancel its driver op. */
	while ((b = TAILQ_FIRST(&s->inflight)) != NULL) {
		op = b->op;
		b->op = NULL;
		sbx_op_cancel(op);
		/* freed with the connection by evhttp_free */
		sbx_httpd_release(&b->h);
		breq_done(b, 503, SBX_E_SHUTTING_DOWN);
	}
	if (s->http != NULL)
		evhttp_free(s->http);   /* frees every bound gate (gate_closed) */
	sbx_gate_free(s->gate);
	sbx_httpd_listener_free(&s->listener);
	sbx_httpd_drain_free(&s->drain);
	sbx_heap_quiet_free(&s->heap_quiet);
	broker_state_close(s->state);
	broker_metrics_free(s->metrics);
	broker_quota_free(s->quota);
	free(s->allowlist);
	sbx_token_clear(&s->token);
	free(s);
}
