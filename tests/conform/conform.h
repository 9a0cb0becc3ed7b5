/* conform.h - the driver conformance suite (adr/0024): one set of tests of the rules of sbx_driver.h, run against every driver. */
#ifndef CONFORM_H
#define CONFORM_H

#include <stddef.h>

#include "driver_fake.h"
#include "sbx_driver.h"

/*
 * A driver under test. up() makes *base and *drv (owned by the target until
 * down()); returns 0 or -1. script, when not NULL, makes the next execs of
 * a fake (directly or behind a broker) act as argv would on a real runtime;
 * NULL for a driver that runs argv for real. image: the spec image (NULL:
 * the driver's default).
 */
struct conform_target {
	const char *name;
	int (*up)(struct event_base **base, struct sbx_driver **drv);
	void (*down)(void);
	void (*script)(const struct sbx_fake_step *steps, size_t n);
	int timeout_ms;      /* longest wait for one callback */
};

/* Runs every conformance test against t (cmocka group named t->name);
 * returns the number of failed tests. */
int conform_run(const struct conform_target *t);

#endif
