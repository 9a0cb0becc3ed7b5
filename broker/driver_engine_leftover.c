/*
 * driver_engine_leftover.c - what a SIGKILL of the runtime's service left
 * of one sandbox's container, met by its ensure (adr/0058): Podman's ghost
 * (in its database without storage, or left "removing"), a name only its
 * storage holds, the OCI runtime's state of a start it never recorded.
 * Each is force-removed with its volume kept, then the ensure starts over
 * through the continuation it passed. It calls the runtime call layer and
 * the agent records; ensure calls it.
 */
#include "driver_engine_leftover.h"

int
eng_leftover(int status, json_t *body)
{
	const char *m = json_string_value(json_object_get(body, "message"));

	if (status != 500 || m == NULL)
		return 0;
	if (strstr(m, "creating container storage") != NULL &&
	    strstr(m, "already in use") != NULL)
		return ENG_LEFT_STORAGE;
	if (strstr(m, "container with given ID already exists") != NULL)
		return ENG_LEFT_OCI;
	/* Docker's: containerd's task directory of a start a SIGKILL cut. */
	if (strstr(m, "failed to start shim") != NULL &&
	    strstr(m, "file exists") != NULL)
		return ENG_LEFT_OCI;
	return 0;
}

/* The leftover went (or was gone already): the ensure looks again. */
static void
leftover_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body,
	    "remove what a runtime crash left of the container", 200, 204, 404))
		return;
	op->then(op);
}

static void
leftover_remove(struct eop *op, const char *name, void (*again)(struct eop *))
{
	ens(op)->retries++;
	/* Its agent channel (if any) ran in that container's life. */
	eng_agent_retire(op->e, op->id);
	op->then = again;
	eng_callf(op, "DELETE", NULL, leftover_removed,
	    API "/containers/%s?force=1&v=0", name);
}

void
eng_leftover_clear(struct eop *op, const char *name, const char *why,
    void (*again)(struct eop *))
{
	log_warn("removing what a runtime crash left of a container (its "
	    "create or start was cut); its volume stays", "container",
	    op->cname, "state", why, NULL);
	leftover_remove(op, name, again);
}

int
eng_leftover_ghost(struct eop *op, int status, json_t *body,
    void (*again)(struct eop *))
{
	int removing;

	removing = status == 200 && eng_ghost_removing(body);
	if ((!removing && !eng_ghost(status, body, NULL, 0)) ||
	    ens(op)->retries >= ENSURE_RETRIES)
		return 0;
	log_warn("removing a container the runtime keeps without its storage "
	    "(a runtime crash cut its removal); its volume stays", "container",
	    op->cname, "state", removing ? "removing" : "no storage", NULL);
	leftover_remove(op, op->cname, again);
	return 1;
}
