/* broker_queue.c - the per-id queues, a layer below the request layer: one entry per sandbox id while a request names it, its serialised operations in order, the requests parked behind a blocking job; it runs nothing itself (adr/0006, adr/0036). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"

struct bsbx *
bsbx_find(struct broker_server *s, const char *id)
{
	struct bsbx *x;

	LIST_FOREACH(x, &s->sbxs, link)
		if (strcmp(x->id, id) == 0)
			return x;
	return NULL;
}

struct bsbx *
bsbx_get(struct broker_server *s, const char *id)
{
	struct bsbx *x;

	if ((x = bsbx_find(s, id)) != NULL) {
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

void
bsbx_push(struct bsbx *x, struct breq *b)
{
	b->queued = 1;
	TAILQ_INSERT_TAIL(&x->queue, b, qlink);
}

struct breq *
bsbx_next(struct bsbx *x)
{
	struct breq *b;

	if (x->running != NULL || (b = TAILQ_FIRST(&x->queue)) == NULL)
		return NULL;
	TAILQ_REMOVE(&x->queue, b, qlink);
	b->queued = 0;
	x->running = b;
	return b;
}

void
bsbx_park(struct bsbx *x, struct breq *b)
{
	b->parked = 1;
	TAILQ_INSERT_TAIL(&x->parked, b, qlink);
}

struct breq *
bsbx_next_parked(struct bsbx *x)
{
	struct breq *b;

	if (x->blocker != NULL || (b = TAILQ_FIRST(&x->parked)) == NULL)
		return NULL;
	TAILQ_REMOVE(&x->parked, b, qlink);
	b->parked = 0;
	return b;
}

unsigned
bsbx_leave(struct bsbx *x, struct breq *b)
{
	unsigned gave = 0;

	if (b->queued)
		TAILQ_REMOVE(&x->queue, b, qlink);
	if (b->parked)
		TAILQ_REMOVE(&x->parked, b, qlink);
	b->queued = b->parked = 0;
	if (x->blocker == b) {
		x->blocker = NULL;
		gave |= BSBX_BLOCK;
	}
	if (x->running == b) {
		x->running = NULL;
		gave |= BSBX_TURN;
	}
	return gave;
}
