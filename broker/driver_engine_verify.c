/*
 * driver_engine_verify.c - the engine driver's check of a failed
 * invocation against its sandbox's state (issue 24 item 10): an op that a
 * destroy or a stop overtook answers not_found or not_running, as one a
 * moment later would, never the runtime_error its lost channel or refused
 * call gave. Reached only through e->fail_hook (eng_finish_err); calls the
 * runtime call layer.
 */
#include "driver_engine_int.h"

static void
verify_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e = op->derr, ignored;
	struct sbx_status st;

	if (err == NULL && (status == 404 || eng_gone(status, body)))
		sbx_err_set(&e, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX, op->id);
	else if (err == NULL && status == 200 &&
	    eng_status_from_inspect(op, body, &st, &ignored) == 0 &&
	    st.state != SBX_STATE_RUNNING)
		sbx_err_set(&e, SBX_E_NOT_RUNNING, SBX_MSG_NOT_RUNNING, op->id);
	else if (eng_agent_going(op->e, op->id))
		/* Still running for the runtime, but a stop or destroy of it
		 * is under way here: it is what ended the op. */
		sbx_err_set(&e, SBX_E_NOT_RUNNING, SBX_MSG_NOT_RUNNING, op->id);
	if (strcmp(e.code, op->derr.code) != 0)
		log_info("an operation failed while its sandbox went", "id", op->id,
		    "kind", op->kind->name, "error", op->derr.message, NULL);
	eng_finish_err(op, &e);   /* op->verified: straight to the kind */
}

int
eng_verify_fail(struct eop *op, const struct sbx_err *err)
{
	char path[256];

	if (op->verified || op->dead || op->http != NULL ||
	    !(op->kind->flags & EK_RUN) || (op->kind->flags & EK_NO_INSPECT) ||
	    err == NULL || (strcmp(err->code, SBX_E_RUNTIME) != 0 &&
	    strcmp(err->code, SBX_E_RUNTIME_UNAVAILABLE) != 0))
		return 0;
	op->verified = 1;
	if (err != &op->derr)
		op->derr = *err;
	eng_inspect_path(op, path, sizeof(path));
	eng_call(op, "GET", path, NULL, verify_inspected);
	return 1;
}
