/*
 * driver_engine_op.c - the engine driver's op lifecycle: new, enter,
 * leave, release, free, and the terminal callbacks of the caller's shapes;
 * the names an op's sandbox goes by (sbx_engine_volume_name, and the /work
 * volume a claimed pool member keeps: eng_work_volume, adr/0067).
 * What differs per kind comes from the op's row (struct eng_kind, set at
 * eng_op_new by the kind's own file): this file calls no other engine
 * file, only those hooks (adr/0037).
 */
#include "driver_engine_int.h"

/* The one place the work volume's name is built (driver_engine.h): here,
 * beside the op's other names, at the bottom of the engine's files. */
char *
sbx_engine_volume_name(const char *name_prefix, const char *id, char *buf,
    size_t size)
{
	snprintf(buf, size, "%s%s-work", name_prefix, id);
	return buf;
}

/* The agent's socket volume (adr/0066), beside the work volume's name. */
char *
eng_agent_volume_name(const char *name_prefix, const char *id, char *buf,
    size_t size)
{
	snprintf(buf, size, "%s%s-agent", name_prefix, id);
	return buf;
}

void
eng_work_volume(struct eop *op, json_t *c)
{
	json_t *m;
	const char *name;
	size_t i, n;

	json_array_foreach(json_object_get(c, "Mounts"), i, m) {
		if (!json_is_string(json_object_get(m, "Destination")) ||
		    strcmp(json_string_value(json_object_get(m, "Destination")),
		    SBX_WORK_DIR) != 0 ||
		    !json_is_string(json_object_get(m, "Type")) ||
		    strcmp(json_string_value(json_object_get(m, "Type")),
		    "volume") != 0 || !json_is_string(json_object_get(m, "Name")))
			continue;
		name = json_string_value(json_object_get(m, "Name"));
		n = strlen(name);
		if (n == 0 || n >= sizeof(op->vname) ||
		    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789_.-") != n)
			return;
		memcpy(op->vname, name, n + 1);
		return;
	}
}

struct eop *
eng_op_new(struct engine *e, const struct eng_kind *kind, const char *id,
    size_t size, struct sbx_err *err)
{
	struct eop *op;

	if (id != NULL && !sbx_id_valid(id)) {
		sbx_err_bad_id(err);
		return NULL;
	}
	if ((op = calloc(1, size)) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	op->base.driver = &e->base;
	op->e = e;
	op->kind = kind;
	if (id != NULL) {
		snprintf(op->id, sizeof(op->id), "%s", id);
		snprintf(op->cname, sizeof(op->cname), "%s%s", e->prefix, id);
		sbx_engine_volume_name(e->prefix, id, op->vname,
		    sizeof(op->vname));
		snprintf(op->nname, sizeof(op->nname), "%s%s-egress", e->prefix,
		    id);
	}
	TAILQ_INSERT_TAIL(&e->ops, op, link);
	return op;
}

void
eng_op_free(struct eop *op)
{
	if (op == NULL)
		return;
	TAILQ_REMOVE(&op->e->ops, op, link);
	sbx_http_req_cancel(op->http);
	if (op->kind->fini != NULL)
		op->kind->fini(op);
	if (op->defer != NULL)
		event_free(op->defer);
	if (op->resp != NULL)
		evbuffer_free(op->resp);
	free(op->pstat);
	free(op);
}

/* What the caller lent goes back before the caller hears the end. */
static void
let_go(struct eop *op)
{
	if (op->kind->let_go != NULL)
		op->kind->let_go(op);
}

void
eng_op_release(struct eop *op)
{
	let_go(op);
	op->dead = 1;
	sbx_http_req_cancel(op->http);
	op->http = NULL;
	if (op->busy == 0)
		eng_op_free(op);
}

void
eng_op_enter(struct eop *op)
{
	op->busy++;
}

int
eng_op_leave(struct eop *op)
{
	if (--op->busy == 0 && op->dead) {
		eng_op_free(op);
		return 0;
	}
	return !op->dead;
}

/* ---------- terminal callbacks: each releases the op ---------- */

void
eng_finish_status(struct eop *op, const struct sbx_err *err,
    const struct sbx_status *st)
{
	let_go(op);
	if (op->cb.status != NULL)
		op->cb.status(op->arg, err, err != NULL ? NULL : st);
	eng_op_release(op);
}

void
eng_fail_status(struct eop *op, const struct sbx_err *err)
{
	eng_finish_status(op, err, NULL);
}

void
eng_finish_done(struct eop *op, const struct sbx_err *err)
{
	let_go(op);
	if (op->cb.done != NULL)
		op->cb.done(op->arg, err);
	eng_op_release(op);
}

void
eng_fail_quiet(struct eop *op, const struct sbx_err *err)
{
	(void)err;
	eng_op_release(op);
}

void
eng_finish_err(struct eop *op, const struct sbx_err *err)
{
	if (op->e->fail_hook != NULL && op->e->fail_hook(op, err))
		return;
	op->kind->fail(op, err);
}

static void
defer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;

	(void)fd;
	(void)what;
	eng_finish_err(op, &op->derr);
}

void
eng_fail_later(struct eop *op, const struct sbx_err *err)
{
	op->derr = *err;
	if (op->defer == NULL)
		op->defer = event_new(op->e->base.base, -1, 0, defer_cb, op);
	if (op->defer == NULL) {
		/* Out of memory for even this: fail now rather than never. */
		defer_cb(-1, 0, op);
		return;
	}
	event_active(op->defer, EV_TIMEOUT, 0);
}
