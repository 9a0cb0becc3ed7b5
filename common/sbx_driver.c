/* sbx_driver.c - the few functions every caller of the driver vtable uses. */
#include <stddef.h>

#include "sbx_driver.h"
#include "sbx_proto.h"

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

/*
 * Sessions (adr/0050). Every wrapper checks the optional member, so a
 * caller holding any driver gets an answer rather than a NULL call.
 */
struct sbx_op *
sbx_session_open(struct sbx_driver *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err)
{
	if (d == NULL || d->ops->session == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "this driver has no sessions");
		return NULL;
	}
	return d->ops->session(d, id, req, sink, err);
}

ssize_t
sbx_session_write(struct sbx_op *op, struct evbuffer *src, size_t max)
{
	if (op == NULL || op->driver->ops->session_write == NULL)
		return -1;
	return op->driver->ops->session_write(op->driver, op, src, max);
}

size_t
sbx_session_room(struct sbx_op *op)
{
	if (op == NULL || op->driver->ops->session_room == NULL)
		return 0;
	return op->driver->ops->session_room(op->driver, op);
}

void
sbx_session_close_input(struct sbx_op *op)
{
	if (op != NULL && op->driver->ops->session_close_input != NULL)
		op->driver->ops->session_close_input(op->driver, op);
}

int
sbx_session_control(struct sbx_op *op, const struct sbx_session_ctl *c,
    struct sbx_err *err)
{
	if (op == NULL || op->driver->ops->session_control == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    "this session takes no control messages");
	return op->driver->ops->session_control(op->driver, op, c, err);
}

int
sbx_snapshot_name_valid(const char *s)
{
	size_t i;

	if (s == NULL || s[0] == '\0' || s[0] == '-')
		return 0;
	for (i = 0; s[i] != '\0'; i++)
		if (i >= 32 || !((s[i] >= 'a' && s[i] <= 'z') ||
		    (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return 0;
	return 1;
}
