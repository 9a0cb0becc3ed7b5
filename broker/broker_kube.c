/* broker_kube.c - the broker's side of driver = kubernetes: the driver made from the broker's configuration, and --check's RBAC lines (adr/0072). Calls the kubernetes driver only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "broker_kube.h"
#include "driver_kube.h"
#include "sbx_proto.h"

struct sbx_driver *
broker_kube_driver_new(struct event_base *base, const struct broker_config *cfg,
    const char *const *allow, struct sbx_err *err)
{
	struct sbx_kube_config kc;
	struct sbx_driver *d;

	memset(&kc, 0, sizeof(kc));
	kc.server = cfg->kube_server;
	kc.ca_file = cfg->kube_ca_file;
	kc.token_file = cfg->kube_token_file;
	kc.namespace_ = cfg->kube_namespace;
	kc.default_image = cfg->image;
	kc.images = allow;
	kc.helper_image = cfg->kube_helper_image;
	kc.storage_class = cfg->kube_storage_class;
	kc.work_size = cfg->kube_work_size;
	kc.memory_bytes = cfg->memory;
	kc.milli_cpus = cfg->nano_cpus / 1000000;
	kc.exec_timeout_ms = cfg->exec_timeout;
	kc.exec_timeout_max_ms = cfg->exec_timeout_max;
	kc.exec_output_cap = cfg->output_cap;
	kc.file_max_bytes = cfg->file_size_max;
	kc.start_timeout_ms = cfg->kube_start_timeout;
	kc.force_after_ms = cfg->kube_force_after;
	kc.agent_ping_ms = cfg->agent_ping;
	kc.egress_cidrs = cfg->kube_egress_cidrs;
	kc.warm_pool = (int)cfg->warm_pool;
	if ((d = sbx_kube_driver_new(base, &kc, err)) == NULL &&
	    strcmp(err->code, SBX_E_BAD_REQUEST) == 0)
		snprintf(err->code, sizeof(err->code), "%s", SBX_E_CONFIG);
	return d;
}

struct chk {
	int problems;
	int waiting;
	struct evbuffer *out;
};

static void
health_cb(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	struct chk *c = arg;

	c->waiting--;
	if (err != NULL || h == NULL || !h->ok) {
		c->problems++;
		printf("problem: the API server cannot be used: %s\n",
		    err != NULL ? err->message : h != NULL ? h->reason : "?");
		return;
	}
	printf("api server: %s: ok\n", h->runtime);
}

static void
rbac_cb(void *arg, const struct sbx_err *err, int missing)
{
	struct chk *c = arg;
	char *line;
	size_t n;

	c->waiting--;
	if (err != NULL) {
		c->problems++;
		printf("problem: cannot ask the API server about RBAC: %s\n",
		    err->message);
		return;
	}
	while ((line = evbuffer_readln(c->out, &n, EVBUFFER_EOL_LF)) != NULL) {
		printf("problem: %s\n", line);
		free(line);
	}
	c->problems += missing;
	if (missing == 0)
		printf("rbac: every permission the driver needs is granted: ok\n");
}

int
broker_kube_check(struct event_base *base, struct sbx_driver *driver,
    const struct broker_config *cfg, const char *token_problem)
{
	struct chk c;
	struct sbx_err err;
	struct sbx_op *op;

	memset(&c, 0, sizeof(c));
	printf("kubernetes: %s namespace %s\n", cfg->kube_server,
	    cfg->kube_namespace);
	if (token_problem != NULL) {
		c.problems++;
		printf("problem: %s; the broker would not start (exit 78)\n",
		    token_problem);
	}
	if ((c.out = evbuffer_new()) == NULL)
		return BROKER_EXIT_INTERNAL;
	if ((op = driver->ops->health(driver, health_cb, &c, &err)) != NULL)
		c.waiting++;
	if (sbx_kube_check_rbac(driver, c.out, rbac_cb, &c, &err) == 0)
		c.waiting++;
	while (c.waiting > 0)
		event_base_loop(base, EVLOOP_ONCE);
	evbuffer_free(c.out);
	printf("%d problem%s\n", c.problems, c.problems == 1 ? "" : "s");
	return c.problems > 0 ? BROKER_EXIT_UNAVAILABLE : BROKER_EXIT_OK;
}
