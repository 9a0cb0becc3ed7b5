/* broker_kube.h - the broker's side of driver = kubernetes (adr/0072): its driver made from the broker configuration, and --check's lines for it. */
#ifndef BROKER_KUBE_H
#define BROKER_KUBE_H

#include "broker.h"

struct event_base;
struct sbx_driver;

/*
 * The kubernetes driver (broker/driver_kube.h) from cfg's kube_* keys and
 * the shared limits (image/images, memory, cpus, exec_timeout(_max),
 * output_cap, file_size_max, agent_ping). allow: the allowlist
 * (broker_config_allowlist, borrowed for the call). Returns the driver or
 * NULL with err (config_error naming the key, as sbx_kube_driver_new's
 * bad_request says; internal out of memory).
 */
struct sbx_driver *broker_kube_driver_new(struct event_base *base,
    const struct broker_config *cfg, const char *const *allow,
    struct sbx_err *err);

/*
 * --check for driver = kubernetes: prints "kubernetes: SERVER namespace NS",
 * the API server's health line, one "problem: ..." sentence per missing
 * RBAC permission (SelfSubjectAccessReview) and "N problems". Runs base
 * until its requests end. Returns BROKER_EXIT_OK or BROKER_EXIT_UNAVAILABLE
 * (a problem found).
 */
int broker_kube_check(struct event_base *base, struct sbx_driver *driver,
    const struct broker_config *cfg, const char *token_problem);

#endif
