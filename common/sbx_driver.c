/* sbx_driver.c - the few functions every caller of the driver vtable uses. */
#include <stddef.h>

#include "sbx_driver.h"

const char *
sbx_state_name(enum sbx_state st)
{
	switch (st) {
	case SBX_STATE_RUNNING:
		return "running";
	case SBX_STATE_STOPPED:
		return "stopped";
	case SBX_STATE_ABSENT:
		break;
	}
	return "absent";
}

void
sbx_op_cancel(struct sbx_op *op)
{
	if (op != NULL)
		op->driver->ops->cancel(op->driver, op);
}

void
sbx_op_pause(struct sbx_op *op)
{
	if (op != NULL)
		op->driver->ops->pause(op->driver, op);
}

void
sbx_op_resume(struct sbx_op *op)
{
	if (op != NULL)
		op->driver->ops->resume(op->driver, op);
}

void
sbx_driver_free(struct sbx_driver *d)
{
	if (d != NULL)
		d->ops->free(d);
}
