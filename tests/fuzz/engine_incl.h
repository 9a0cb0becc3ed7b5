/* engine_incl.h - for the fuzz targets that reach the engine driver's internals (broker/driver_engine_int.h). */
#ifndef SBX_FUZZ_ENGINE_INCL_H
#define SBX_FUZZ_ENGINE_INCL_H

/*
 * The driver's files share their internals through driver_engine_int.h
 * (eng_helper_frames(), the op structs), so a target links
 * libsbxbroker.a as it is. fz_engine() makes a real engine driver aimed at
 * a socket that does not exist, so the kill execs a protocol error starts
 * fail at once ("runtime_unavailable") and end; fz_drain() runs the loop
 * until every op of the driver has ended (asserting that none leaks).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../broker/driver_engine_int.h"

#include "fuzz.h"

static struct event_base *fz_base;
static struct sbx_driver *fz_drv;

static __attribute__((unused)) struct engine *
fz_engine(void)
{
	struct sbx_engine_config cfg;
	struct sbx_err err;

	if (fz_drv != NULL)
		return (struct engine *)fz_drv;
	memset(&cfg, 0, sizeof(cfg));
	cfg.runtime_socket = "/nonexistent/sbx-fuzz/runtime.sock";
	cfg.default_image = "sbx-fuzz:latest";
	cfg.helper_path = "/nonexistent/sbx-fuzz/sbx-helper";
	cfg.agent_off = 1;   /* the targets feed runtime exec streams */
	fz_base = event_base_new();
	FUZZ_ASSERT(fz_base != NULL);
	fz_drv = sbx_engine_driver_new(fz_base, &cfg, &err);
	if (fz_drv == NULL)
		fprintf(stderr, "engine driver: %s\n", err.message);
	FUZZ_ASSERT(fz_drv != NULL);
	return (struct engine *)fz_drv;
}

static __attribute__((unused)) void
fz_drain(struct engine *e)
{
	struct eop *op, *next;
	int turns;

	for (turns = 0; turns < 10000; turns++) {
		TAILQ_FOREACH(op, &e->ops, link)
			if (!(op->kind == &eng_kind_kill && kio(op)->retry != NULL &&
			    evtimer_pending(kio(op)->retry, NULL)))
				break;
		if (op == NULL)
			break;
		event_base_loop(fz_base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	}
	/* what is left must be kills waiting to be tried again (the runtime
	 * is unreachable here by design); free them as the driver's free
	 * would, anything else is a leaked op */
	for (op = TAILQ_FIRST(&e->ops); op != NULL; op = next) {
		next = TAILQ_NEXT(op, link);
		FUZZ_ASSERT(op->kind == &eng_kind_kill && kio(op)->retry != NULL &&
		    evtimer_pending(kio(op)->retry, NULL));
		eng_op_free(op);
	}
}

#endif
