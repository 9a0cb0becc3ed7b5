/* broker_check.h - sandbox-broker --check (a doctor: what would fail, nothing created) and --health (asks the running broker), SPEC §9, docs/broker.md. */
#ifndef BROKER_CHECK_H
#define BROKER_CHECK_H

#include "broker.h"

struct event_base;

/*
 * --check: prints the runtime socket, then one line per finding ("problem:
 * ..." for what would fail: the token (token_problem, NULL when good), the
 * helper binary, the runtime's health through driver, each allowlisted
 * image's presence and architecture), then "N problems". Runs base until
 * its requests end. Creates nothing. Returns BROKER_EXIT_OK,
 * BROKER_EXIT_UNAVAILABLE (a problem found) or BROKER_EXIT_INTERNAL (out
 * of memory).
 */
int broker_run_check(struct event_base *base, struct sbx_driver *driver,
    const struct broker_config *cfg, const char *token_problem);

/*
 * One finding of a --check that would fail: prints "problem: " and the
 * sentence fmt makes, then a newline, on stdout, and counts it in
 * *problems. The other drivers' checks (broker_vm_check.c) use it too.
 */
void broker_check_problem(int *problems, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * --health: GET /v1/health from the broker that serves cfg->listen, with the
 * token of token_file (or SBX_BROKER_TOKEN), within 5 s; one line on
 * stdout ("healthy: ..." / "unhealthy: ..."). Returns SBX_PROBE_HEALTHY (0)
 * or SBX_PROBE_UNHEALTHY (1), sbx_probe.h.
 */
int broker_run_health(const struct broker_config *cfg);

#endif
