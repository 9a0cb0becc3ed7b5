/* broker_queue.c - the per-id queues: ensure/stop/destroy and the reaper's jobs one at a time per sandbox, requests parked behind a blocking job (adr/0006). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"

/* ------------------------------------------------------------------ */
/* Per-id serialisation                                                */

struct bsbx *
bsbx_get(struct broker_server *s, const char *id)
{
	struct bsbx *x;

	LIST_FOREACH(x, &s->sbxs, link)
		if (strcmp(x->id, id) == 0) {
			x->refs++;
			return x;
		}
	if ((x = calloc(1, sizeof(*x))) == NULL)
		return NULL;
	snprintf(x->id, sizeof(x->id), "%s", id);
	TAILQ_INIT(&x->queue);
	TAILQ_INIT(&x->parked);
	x->refs = 1;
	LIST_INSERT_HEAD(&s->sbxs, x, link);
	return x;
}

void
bsbx_put(struct bsbx *x)
{
	if (x == NULL || --x->refs > 0)
		return;
	LIST_REMOVE(x, link);
	free(x);
}

/* Starts queued serialised operations of x, one at a time. */
void
bsbx_kick(struct broker_server *s, struct bsbx *x)
{
	struct breq *b;

	if (x->kicking)
		return;
	x->kicking = 1;
	x->refs++;
	while (x->running == NULL && (b = TAILQ_FIRST(&x->queue)) != NULL) {
		TAILQ_REMOVE(&x->queue, b, qlink);
		b->queued = 0;
		x->running = b;
		if (s->stopping)
			breq_fail_code(b, SBX_E_SHUTTING_DOWN,
			    SBX_MSG_BROKER_DRAINING);
		else
			breq_run(b, b->serial_start);
	}
	x->kicking = 0;
	bsbx_put(x);
}

/* Queues b's driver call behind the other ensure/stop/destroy of its id. */
void
serial_enqueue(struct breq *b, handler_fn start)
{
	b->serial_start = start;
	b->queued = 1;
	TAILQ_INSERT_TAIL(&b->sbx->queue, b, qlink);
	bsbx_kick(b->s, b->sbx);
}

/* ------------------------------------------------------------------ */
/* The one way out of every request                                    */

void
bsbx_unpark(struct broker_server *s, struct bsbx *x)
{
	struct breq *b;

	while (x->blocker == NULL && (b = TAILQ_FIRST(&x->parked)) != NULL) {
		TAILQ_REMOVE(&x->parked, b, qlink);
		b->parked = 0;
		if (s->stopping || s->draining)
			breq_fail_code(b, SBX_E_SHUTTING_DOWN,
			    SBX_MSG_BROKER_DRAINING);
		else
			breq_run(b, b->route->handler);
	}
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
	if ((b = calloc(1, sizeof(*b))) == NULL) {
		if (arg_free != NULL)
			arg_free(arg);
		return sbx_err_oom(err);
	}
	b->s = s;
	b->internal = 1;
	b->name = "job";
	b->t0_mono = sbx_mono_ms();
	b->ts_ms = sbx_wall_ms();
	b->job_start = start;
	b->job_arg = arg;
	b->job_free = arg_free;
	snprintf(b->id, sizeof(b->id), "%s", id);
	TAILQ_INSERT_TAIL(&s->inflight, b, link);
	s->ninflight++;
	if ((b->sbx = bsbx_get(s, id)) == NULL) {
		breq_done(b, 500, SBX_E_INTERNAL);
		return sbx_err_oom(err);
	}
	serial_enqueue(b, job_begin);
	return 0;
}

const char *
broker_job_id(const struct broker_job *job)
{
	return ((const struct breq *)job)->id;
}

unsigned
broker_job_others(const struct broker_job *job)
{
	const struct breq *j = (const struct breq *)job, *b;
	unsigned n = 0;

	TAILQ_FOREACH(b, &j->s->inflight, link)
		if (b != j && b->sbx == j->sbx)
			n++;
	return n;
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
broker_server_busy(struct broker_server *s, const char *id)
{
	struct bsbx *x;

	LIST_FOREACH(x, &s->sbxs, link)
		if (strcmp(x->id, id) == 0)
			return 1;
	return 0;
}

