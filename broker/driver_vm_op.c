/* driver_vm_op.c - makes, answers and frees the vm driver's op handles; touches nothing but the op, its vm's waiter list and the callback it put on a write_stream's lent source. */
#include <stdlib.h>
#include <string.h>

#include "driver_vm_op.h"
#include "sbx_proto.h"

struct vmop *
vmop_new(struct vmdrv *d, enum vmop_kind kind, const char *id)
{
	struct vmop *op = calloc(1, sizeof(*op));

	if (op == NULL)
		return NULL;
	op->op.driver = &d->base;
	op->d = d;
	op->kind = kind;
	snprintf(op->id, sizeof(op->id), "%s", id != NULL ? id : "");
	sbx_err_clear(&op->err);
	return op;
}

void
vmop_let_go(struct vmop *op)
{
	if (op->src != NULL && op->src_ent != NULL)
		evbuffer_remove_cb_entry(op->src, op->src_ent);
	op->src_ent = NULL;
	op->src = NULL;
}

void
vmop_free(struct vmop *op)
{
	size_t i;

	if (op == NULL)
		return;
	vmop_let_go(op);
	if (op->waiting != NULL)
		TAILQ_REMOVE(&op->waiting->waiters, op, wlink);
	if (op->defer != NULL)
		event_free(op->defer);
	if (op->timer != NULL)
		event_free(op->timer);
	if (op->st != NULL)
		sbx_agent_cancel(op->st);
	if (op->errline != NULL)
		evbuffer_free(op->errline);
	if (op->body != NULL)
		evbuffer_free(op->body);
	for (i = 0; op->argv != NULL && op->argv[i] != NULL; i++)
		free(op->argv[i]);
	for (i = 0; op->env != NULL && op->env[i] != NULL; i++)
		free(op->env[i]);
	free(op->argv);
	free(op->env);
	free(op->allow);
	free(op);
}

static void
on_later(evutil_socket_t fd, short what, void *arg)
{
	struct vmop *op = arg;

	(void)fd;
	(void)what;
	op->later(op);
}

int
vmop_later(struct vmop *op, void (*fn)(struct vmop *op))
{
	struct timeval zero = { 0, 0 };

	op->later = fn;
	if (op->defer == NULL &&
	    (op->defer = evtimer_new(op->d->base.base, on_later, op)) == NULL)
		return -1;
	return evtimer_add(op->defer, &zero);
}

void
vmop_fail(struct vmop *op, const struct sbx_err *err)
{
	vmop_let_go(op);   /* the caller may free its source in the callback */
	switch (op->kind) {
	case VMOP_STATUS:
	case VMOP_ENSURE:
	case VMOP_USAGE:
		op->cb.status(op->arg, err, NULL);
		break;
	case VMOP_STOP:
	case VMOP_DESTROY:
	case VMOP_WRITE:
		op->cb.done(op->arg, err);
		break;
	case VMOP_LIST_SBX:
		op->cb.sandboxes(op->arg, err, NULL, 0);
		break;
	case VMOP_HEALTH:
		op->cb.health(op->arg, err, NULL);
		break;
	case VMOP_LIST:
		op->cb.list(op->arg, err, NULL, 0, 0);
		break;
	case VMOP_EXEC:
	case VMOP_READ:
		op->sink.error(op->sink.arg, err);
		break;
	case VMOP_EGRESS:
		op->cb.json(op->arg, err, NULL);
		break;
	}
	vmop_free(op);
}

static void
fail_now(struct vmop *op)
{
	struct sbx_err err = op->err;

	vmop_fail(op, &err);
}

struct sbx_op *
vmop_fail_later(struct vmop *op, const struct sbx_err *err)
{
	op->err = *err;
	if (vmop_later(op, fail_now) != 0) {
		vmop_free(op);
		return NULL;
	}
	return &op->op;
}

void
vmop_status(struct vmop *op, const struct sbx_status *st)
{
	op->cb.status(op->arg, NULL, st);
	vmop_free(op);
}

void
vmop_done(struct vmop *op)
{
	vmop_let_go(op);
	op->cb.done(op->arg, NULL);
	vmop_free(op);
}
