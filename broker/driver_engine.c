/*
 * driver_engine.c - the SandboxDriver on the Docker Engine API v1.41 over
 * the runtime's unix socket (Docker, Podman): the ops table, the driver's
 * configuration, creation and free, and the caller's handle (cancel, pause,
 * resume through the op's kind row). The entry of the engine driver: it
 * calls the job files (ensure, life, files, run, proxy, helper, agent) and
 * the op lifecycle; none of them calls it (adr/0037).
 */
#include <ctype.h>

#include "driver_engine_int.h"

#define RUN_SIZE_DEF (1024 * 1024)       /* SBX_HELPER_RUN_DIR tmpfs */

/* Host interface prefix: leaves at least 9 hex digits of the 15 bytes. */
static int
bridge_prefix_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 6 || !islower((unsigned char)s[0]))
		return 0;
	for (; *s != '\0'; s++)
		if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s))
			return 0;
	return 1;
}

static int
image_ok(const char *s)
{
	size_t n;

	if (s == NULL || (n = strlen(s)) == 0 || n > 255)
		return 0;
	for (; *s != '\0'; s++)
		if (!isgraph((unsigned char)*s) || *s == '?' || *s == '#' ||
		    *s == '%')
			return 0;
	return 1;
}

/* ---------- handle control ---------- */

/* The caller's handle: what each does is the kind's (its row). */
static void
eng_cancel(struct sbx_driver *d, struct sbx_op *o)
{
	struct eop *op = (struct eop *)o;

	(void)d;
	if (op == NULL || op->dead)
		return;
	if (op->kind->cancel != NULL)
		op->kind->cancel(op);
	else
		eng_op_release(op);
}

static void
eng_pause(struct sbx_driver *d, struct sbx_op *o)
{
	struct eop *op = (struct eop *)o;

	(void)d;
	if (op != NULL && !op->dead && op->kind->pause != NULL)
		op->kind->pause(op, 1);
}

static void
eng_resume(struct sbx_driver *d, struct sbx_op *o)
{
	struct eop *op = (struct eop *)o;

	(void)d;
	if (op != NULL && !op->dead && op->kind->pause != NULL)
		op->kind->pause(op, 0);
}

/* ---------- driver ---------- */

static void
eng_free(struct sbx_driver *d)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char **p;

	if (e == NULL)
		return;
	/* Callers must have ended their ops; kills still running are ours. */
	eng_agents_free(e);
	while ((op = TAILQ_FIRST(&e->ops)) != NULL)
		eng_op_free(op);
	eng_pool_free(e);
	free(e->address);
	free(e->default_image);
	for (p = e->images; p != NULL && *p != NULL; p++)
		free(*p);
	free(e->images);
	free(e->user);
	free(e->helper_path);
	free(e->helper_tar);
	free(e->oci_runtime);
	free(e->bridge_prefix);
	free(e->proxy_resolver);
	free(e->proxy_tar);
	free(e->prefix);
	free(e);
}

static int
set_limit(struct sbx_engine_limit *out, const struct sbx_engine_limit *in,
    int64_t def, int64_t ceiling, const char *what, struct sbx_err *err)
{
	*out = *in;
	if (out->def == 0)
		out->def = def;
	if (out->ceiling == 0)
		out->ceiling = out->def > ceiling ? out->def : ceiling;
	if (out->def < 0 || out->ceiling < out->def)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: %s "
		    "default must be positive and not above its ceiling", what);
	return 0;
}

struct sbx_driver *
sbx_engine_driver_new(struct event_base *base, const struct sbx_engine_config *c,
    struct sbx_err *err)
{
	struct engine *e = NULL;
	const char *sock, *user;
	const char *const *p;
	size_t n = 0, i = 0;
	unsigned uid, gid;
	char extra;

	if (base == NULL || c == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config missing");
		return NULL;
	}
	if (sodium_init() < 0) {
		sbx_err_set(err, SBX_E_INTERNAL, SBX_MSG_SODIUM);
		return NULL;
	}
	if ((e = calloc(1, sizeof(*e))) == NULL)
		goto oom;
	e->base.ops = &sbx_engine_driver_ops;
	e->base.base = base;
	TAILQ_INIT(&e->ops);
	TAILQ_INIT(&e->hwait);
	TAILQ_INIT(&e->agents);
	e->agent_on = !c->agent_off;
	e->fail_hook = eng_verify_fail;
	e->rexec_via = &eng_rexec_transport;
	e->via = e->agent_on ? &eng_agent_transport : &eng_rexec_transport;
	e->agent_idle_ms = c->agent_idle_ms > 0 ? c->agent_idle_ms : 60000;
	e->agent_ping_ms = c->agent_ping_ms > 0 ? c->agent_ping_ms : 5000;
	e->agent_fresh_ms = c->agent_fresh_ms != 0 ? c->agent_fresh_ms : 15000;
	e->agent_direct = e->agent_on && !c->agent_runtime_only;
	sock = c->runtime_socket;
	if (sock != NULL && strncmp(sock, "unix://", 7) == 0)
		sock += 6;
	else if (sock != NULL && strncmp(sock, "unix:", 5) == 0)
		sock += 5;
	if (sock == NULL || sock[0] != '/' || strlen(sock) > 100) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: runtime socket "
		    "must be an absolute unix socket path");
		goto fail;
	}
	if (asprintf(&e->address, "unix:%s", sock) < 0) {
		e->address = NULL;
		goto oom;
	}
	if (!image_ok(c->default_image)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: default image "
		    "missing or malformed");
		goto fail;
	}
	for (p = c->images; p != NULL && *p != NULL; p++) {
		if (!image_ok(*p)) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: malformed "
			    "image in the allowlist");
			goto fail;
		}
		n++;
	}
	if ((e->images = calloc(n + 2, sizeof(*e->images))) == NULL)
		goto oom;
	if ((e->images[i++] = strdup(c->default_image)) == NULL)
		goto oom;
	for (p = c->images; p != NULL && *p != NULL; p++)
		if ((e->images[i++] = strdup(*p)) == NULL)
			goto oom;
	if ((e->default_image = strdup(c->default_image)) == NULL)
		goto oom;
	user = c->user != NULL ? c->user : "1000:1000";
	if (sscanf(user, "%u:%u%c", &uid, &gid, &extra) != 2 || uid == 0) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: user must be "
		    "a non-root uid:gid");
		goto fail;
	}
	if ((e->user = strdup(user)) == NULL)
		goto oom;
	e->uid = uid;
	e->gid = gid;
	if (set_limit(&e->mem, &c->memory_bytes, 512LL << 20, 2LL << 30,
	    "memory", err) < 0 ||
	    set_limit(&e->cpus, &c->nano_cpus, 1000000000LL, 2000000000LL,
	    "nano_cpus", err) < 0 ||
	    set_limit(&e->pids, &c->pids, 256, 1024, "pids", err) < 0 ||
	    set_limit(&e->timeout, &c->exec_timeout_ms, 30000, 600000,
	    "exec timeout", err) < 0)
		goto fail;
	e->tmp_bytes = c->tmp_bytes > 0 ? c->tmp_bytes : 64LL << 20;
	e->output_cap = c->exec_output_cap > 0 ? c->exec_output_cap : 16LL << 20;
	e->file_max = c->file_max_bytes > 0 ? c->file_max_bytes : 64LL << 20;
	e->file_timeout = c->file_timeout_ms > 0 ? c->file_timeout_ms : 30000;
	if (c->helper_path == NULL || c->helper_path[0] != '/' ||
	    strchr(c->helper_path, ':') != NULL ||
	    strchr(c->helper_path, ',') != NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: helper path "
		    "must be absolute (no ':' or ',')");
		goto fail;
	}
	if ((e->helper_path = strdup(c->helper_path)) == NULL)
		goto oom;
	if (c->helper_volume != NULL && c->helper_volume[0] != '\0')
		snprintf(e->helper_stem, sizeof(e->helper_stem), "%s",
		    c->helper_volume);
	else
		snprintf(e->helper_stem, sizeof(e->helper_stem), "%shelper",
		    c->name_prefix != NULL ? c->name_prefix : "sbx-");
	if (!eng_name_ok(e->helper_stem, 48) ||
	    !isalnum((unsigned char)e->helper_stem[0])) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: helper volume "
		    "name must be 1-48 of [A-Za-z0-9_.-], starting with a letter "
		    "or digit");
		goto fail;
	}
	e->run_bytes = c->run_bytes > 0 ? c->run_bytes : RUN_SIZE_DEF;
	if (eng_helper_load(e) < 0 && strcmp(e->helper_err, SBX_MSG_OOM) == 0)
		goto oom;
	if (c->oci_runtime != NULL && c->oci_runtime[0] != '\0') {
		if (!eng_name_ok(c->oci_runtime, 64)) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: bad OCI "
			    "runtime name");
			goto fail;
		}
		if ((e->oci_runtime = strdup(c->oci_runtime)) == NULL)
			goto oom;
	}
	e->proxy_mem = c->proxy_memory > 0 ? c->proxy_memory : 64 << 20;
	if (c->proxy_resolver != NULL && c->proxy_resolver[0] != '\0') {
		if (strspn(c->proxy_resolver, "0123456789abcdefABCDEF.:[]") !=
		    strlen(c->proxy_resolver) || strlen(c->proxy_resolver) > 64) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: egress "
			    "proxy resolver must be IP or IP:PORT");
			goto fail;
		}
		if ((e->proxy_resolver = strdup(c->proxy_resolver)) == NULL)
			goto oom;
	}
	e->bridge_prefix = strdup(c->egress_bridge_prefix != NULL ?
	    c->egress_bridge_prefix : "sbxe");
	e->prefix = strdup(c->name_prefix != NULL ? c->name_prefix : "sbx-");
	if (e->bridge_prefix == NULL || e->prefix == NULL)
		goto oom;
	if (!eng_name_ok(e->prefix,
	    32) || !isalnum((unsigned char)e->prefix[0])) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: name prefix "
		    "must be [A-Za-z0-9_.-], starting with a letter or digit");
		goto fail;
	}
	if (!bridge_prefix_ok(e->bridge_prefix)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: egress bridge "
		    "prefix must be 1 to 6 of [a-z0-9], starting with a letter");
		goto fail;
	}
	e->stop_timeout_s = c->stop_timeout_s > 0 ? c->stop_timeout_s : 2;
	e->usage_timeout_ms = c->usage_timeout_ms > 0 ? c->usage_timeout_ms : 5000;
	e->usage_max = c->usage_max_entries > 0 ? c->usage_max_entries : 200000;
	e->req_timeout_ms = c->request_timeout_ms > 0 ? c->request_timeout_ms :
	    60000;
	if (eng_pool_new(e, c->warm_pool, err) < 0)
		goto fail;
	return &e->base;
oom:
	sbx_err_oom(err);
fail:
	eng_free(e != NULL ? &e->base : NULL);
	return NULL;
}

const struct sbx_driver_ops sbx_engine_driver_ops = {
	.name = "engine",
	.ensure = eng_ensure,
	.status = eng_status,
	.exec = eng_exec,
	.read = eng_read,
	.write = eng_write,
	.write_stream = eng_write_stream,
	.list = eng_list,
	.stop = eng_stop,
	.destroy = eng_destroy,
	.list_sandboxes = eng_list_sandboxes,
	.health = eng_health,
	.recover = eng_recover,
	.reconcile = eng_reconcile,
	.status_usage = eng_status_usage,
	.egress_stats = eng_egress_stats,
	.cancel = eng_cancel,
	.pause = eng_pause,
	.resume = eng_resume,
	.free = eng_free,
	.session = eng_session,
	.session_write = eng_session_write,
	.session_room = eng_session_room,
	.session_close_input = eng_session_close_input,
	.session_control = eng_session_control,
};
