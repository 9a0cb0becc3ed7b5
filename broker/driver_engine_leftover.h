/*
 * driver_engine_leftover.h - the engine driver's handling of what a SIGKILL
 * of the runtime's service left of a sandbox's container (adr/0058),
 * for ensure. Defined in driver_engine_leftover.c.
 */
#ifndef SBX_DRIVER_ENGINE_LEFTOVER_H
#define SBX_DRIVER_ENGINE_LEFTOVER_H

#include "driver_engine_int.h"

/*
 * Podman 4.3's leftovers of a SIGKILL of its service in the middle of a
 * create or a start (adr/0058, amended): ENG_LEFT_STORAGE for a create
 * answered 500 "creating container storage: ... already in use" (the name
 * is held in containers/storage by a container its database never got;
 * the same answer as a concurrent create's, so the caller looks again
 * first), ENG_LEFT_OCI for a start answered 500 "... container with given
 * ID already exists" (the OCI runtime kept its state of a start Podman
 * never recorded), or by Docker 20.10 "failed to start shim: mkdir ...:
 * file exists" (containerd kept the task directory of a start a SIGKILL
 * of dockerd and containerd cut). A forced removal by name clears each:
 * Podman's removal with force also removes a container only its storage
 * knows, and Docker's next create has a new id. 0 for any other answer.
 */
#define ENG_LEFT_STORAGE 1
#define ENG_LEFT_OCI 2
int eng_leftover(int status, json_t *body);
/*
 * Clears the leftover eng_leftover named in an ensure (op, an eop_ensure):
 * logs a warning with why (the log's "state"), force-removes the container
 * name (a name or an id; v=0: its volume stays), counts one of the
 * ensure's retries and continues in again(op) (through op->then); a refused
 * removal ends op with runtime_error.
 */
void eng_leftover_clear(struct eop *op, const char *name, const char *why,
    void (*again)(struct eop *));
/*
 * Podman's ghost of the ensure's container (adr/0058): in its database
 * without storage (an inspect answered as eng_ghost says), or left
 * "removing" by a removal a crash cut (an inspect answer with that state).
 * Either is force-removed by name, its volume kept, and the ensure goes
 * on in again(op); 1 then, else 0 (also once the ensure's retries are
 * used up: the caller goes on as with any answer).
 */
int eng_leftover_ghost(struct eop *op, int status, json_t *body,
    void (*again)(struct eop *));

#endif
