/* sbx_driver.c - the few functions every caller of the driver vtable uses. */
#include <stddef.h>

#include "sbx_driver.h"

/* sbx_state_name: proto/sbx_wire.c (the wire spells states). */

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
