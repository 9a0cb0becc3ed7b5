/* broker.c - sandbox-broker: main, configuration, token, signals, --check, event loop (SPEC §4, §9). */
#include <sys/stat.h>

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "broker.h"
#include "broker_check.h"
#include "broker_egress_poll.h"
#include "broker_reaper.h"
#include "driver_engine.h"
#include "driver_vm.h"
#include "broker_kube.h"
#include "broker_vm_check.h"
#include "sbx_http_client.h"
#include "sbx_daemon.h"
#include "sbx_log.h"
#include "sbx_probe.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_token.h"

static const char synopsis[] =
    "[--listen unix:PATH|HOST:PORT] [--runtime unix:PATH] [--token-file FILE]\n"
    "       [--state-dir DIR] [--image NAME] [--config FILE] [--check]\n"
    "       [--health] [--print-config] [--help] [--version]\n"
    "       [more --KEY VALUE below]\n"
    "\n"
    "The bearer token comes from --token-file (mode 0600), else the systemd\n"
    "credential $CREDENTIALS_DIRECTORY/broker-token, else SBX_BROKER_TOKEN;\n"
    "at least 16 characters, never printed.\n"
    "\n"
    "--health asks the running broker at its listen address for GET /v1/health\n"
    "with the token from the same token file (for a container or service\n"
    "health check: no token on any command line), prints one line and exits\n"
    "0 when the broker answers status ok, else 1.\n"
    "\n"
    "Exit codes: 0 ok (also after SIGTERM drained), 1 internal error or\n"
    "--health unhealthy, 64 usage (an unknown flag, or a bad value given\n"
    "as a flag), 69 --check found a problem (runtime, images, helper, or a\n"
    "configured token that cannot be used), 78 configuration (a bad value\n"
    "in the config file or the environment, missing or short token,\n"
    "unusable state dir or listen address).\n"
    "\n"
    "--check needs no token: it checks the runtime, the allowlisted images\n"
    "(their mount paths too) and the helper, leaves nothing behind, and\n"
    "exits 0 or 69 (64 or 78 for a bad value, as above).\n"
    "\n"
    "Signals: SIGTERM/SIGINT drain in-flight requests (shutdown_grace) and\n"
    "exit 0; SIGHUP reopens log_file.\n"
    "\n"
    "At start the broker reconciles its state with the runtime (and kills\n"
    "execs an earlier broker left running) before it listens; it retries\n"
    "every second while the runtime is unreachable.";

struct main_ctx {
	struct event_base *base;
	struct broker_server *server;
	struct broker_recovery *recovery;
	struct event *retry_ev;
	int recovering;           /* before listening: reconciliation runs */
	int recovered;
	int quit;                 /* a signal came while recovering */
	unsigned attempts;
};

static void
tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

/*
 * After the server is gone, cancelled execs may still have their kill
 * requests on the way to the runtime (the driver sends them
 * asynchronously): run the loop until nothing but our tick is left, or
 * max_ms, so no process tree outlives a SIGTERM. Idle agent channels
 * (driver d) would hold the loop until max_ms: each turn closes those
 * that carry no stream. Returns the events still registered besides the
 * tick (0: settled), -1 when the tick could not be set up.
 */
/* The running driver's close_idle (its row of broker_drivers), NULL: none. */
static size_t (*driver_close_idle)(struct sbx_driver *d);

static int
settle(struct event_base *base, struct sbx_driver *d, int64_t max_ms)
{
	struct timeval tv = { 0, 20 * 1000 };
	struct event *t = event_new(base, -1, EV_PERSIST, tick, NULL);
	int64_t end = sbx_mono_ms() + max_ms;
	int left;

	if (t == NULL || event_add(t, &tv) == -1) {
		if (t != NULL)
			event_free(t);
		return -1;
	}
	for (;;) {
		if (driver_close_idle != NULL)
			(void)driver_close_idle(d);
		left = event_base_get_num_events(base,
		    EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE) - 1;
		if (left <= 0 || sbx_mono_ms() >= end)
			break;
		event_base_loop(base, EVLOOP_ONCE);
	}
	event_free(t);
	return left;
}

/* SIGTERM or SIGINT (sbx_daemon_signals): drain, or exit before serving. */
static void
on_stop(void *arg, const char *sig)
{
	struct main_ctx *m = arg;

	if (m->recovering) {
		log_info("signal received before serving; exiting", "signal",
		    sig, NULL);
		m->quit = 1;
		event_base_loopbreak(m->base);
		return;
	}
	log_info("signal received; draining", "signal", sig, NULL);
	broker_server_drain(m->server, sbx_daemon_drained, m->base);
}

static void recovery_start(struct main_ctx *m);

static void
recovery_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	recovery_start(arg);
}

static void
recovery_done(void *arg, const struct sbx_err *err)
{
	struct main_ctx *m = arg;
	struct timeval tv = { 1, 0 };

	if (err == NULL) {
		m->recovered = 1;
		event_base_loopbreak(m->base);
		return;
	}
	/* The runtime may come up after us (compose, systemd): try again,
	 * without serving anything we could not account for. */
	if (m->attempts == 1 || m->attempts % 30 == 0)
		log_warn("cannot reconcile with the runtime yet; retrying every "
		    "second", "code", err->code, "error", err->message, NULL);
	if (m->retry_ev == NULL)
		m->retry_ev = evtimer_new(m->base, recovery_retry, m);
	if (m->retry_ev == NULL || evtimer_add(m->retry_ev, &tv) == -1) {
		log_error("cannot schedule a retry", NULL);
		m->quit = 1;
		event_base_loopbreak(m->base);
	}
}

static void
recovery_start(struct main_ctx *m)
{
	struct sbx_err err;

	broker_recovery_free(m->recovery);
	m->attempts++;
	sbx_err_clear(&err);
	if ((m->recovery = broker_recover(m->server, recovery_done, m,
	    &err)) == NULL)
		recovery_done(m, &err);
}

/* The vm driver's configuration from the broker's (adr/0069). */
static struct sbx_driver *
make_vm(struct event_base *base, const struct broker_config *cfg,
    const struct sbx_engine_config *ec, struct sbx_err *err)
{
	struct sbx_vm_config vc;
	char proxy[4200];
	const char *slash;

	memset(&vc, 0, sizeof(vc));
	vc.state_dir = cfg->state_dir;
	vc.vm_dir = cfg->vm_dir;
	vc.qemu = cfg->vm_qemu;
	vc.accel = cfg->vm_accel;
	vc.runas = cfg->vm_runas;
	vc.default_image = cfg->image;
	vc.images = ec->images;
	vc.user = cfg->user;
	vc.memory_bytes = cfg->memory;
	vc.cpus = (int)((cfg->nano_cpus + 999999999) / 1000000000);
	vc.pids = cfg->pids;
	vc.work_bytes = cfg->work_size;
	vc.boot_timeout_ms = cfg->vm_boot_timeout;
	vc.stop_timeout_ms = cfg->stop_timeout;
	vc.exec_timeout_ms = cfg->exec_timeout;
	vc.exec_timeout_max_ms = cfg->exec_timeout_max;
	vc.exec_output_cap = cfg->output_cap;
	vc.file_max_bytes = cfg->file_size_max;
	vc.file_timeout_ms = cfg->file_timeout;
	vc.usage_timeout_ms = cfg->usage_timeout;
	vc.usage_max_entries = cfg->usage_max_entries;
	/* sbx-proxy beside sbx-helper, as the engine driver finds it. */
	if (cfg->helper_path != NULL && (slash = strrchr(cfg->helper_path, '/')) != NULL)
		snprintf(proxy, sizeof(proxy), "%.*s/sbx-proxy",
		    (int)(slash - cfg->helper_path), cfg->helper_path);
	else
		snprintf(proxy, sizeof(proxy), "sbx-proxy");
	vc.proxy_path = proxy;
	vc.proxy_resolver = cfg->egress_proxy_resolver;
	if (cfg->vm_egress_conns < 1 || cfg->vm_egress_conns > 1024)
		return sbx_err_set(err, SBX_E_CONFIG, "vm_egress_conns must be 1..1024"), NULL;
	vc.egress_conns = (int)cfg->vm_egress_conns;
	return sbx_vm_driver_new(base, &vc, err);
}

static struct sbx_driver *
make_engine(struct event_base *base, const struct broker_config *cfg,
    const struct sbx_engine_config *ec, struct sbx_err *err)
{
	(void)cfg;
	return sbx_engine_driver_new(base, ec, err);
}

static struct sbx_driver *
make_kube(struct event_base *base, const struct broker_config *cfg,
    const struct sbx_engine_config *ec, struct sbx_err *err)
{
	return broker_kube_driver_new(base, cfg, ec->images, err);
}

/* The sandbox drivers (config key driver): one row each; close_idle: what
 * a stopping broker calls so idle channels leave the loop (settle). */
static const struct {
	const char *name;
	struct sbx_driver *(*make)(struct event_base *base,
	    const struct broker_config *cfg, const struct sbx_engine_config *ec,
	    struct sbx_err *err);
	size_t (*close_idle)(struct sbx_driver *d);
} broker_drivers[] = {
	{ "engine", make_engine, sbx_engine_agents_close_idle },
	{ "vm", make_vm, sbx_vm_close_idle },
	{ "kubernetes", make_kube, NULL },
};

static struct sbx_driver *
driver_new(struct event_base *base, const struct broker_config *cfg,
    const struct sbx_engine_config *ec, struct sbx_err *err)
{
	const char *want = cfg->driver != NULL ? cfg->driver : "engine";
	size_t i;

	for (i = 0; i < sizeof(broker_drivers) / sizeof(broker_drivers[0]); i++)
		if (strcmp(broker_drivers[i].name, want) == 0) {
			driver_close_idle = broker_drivers[i].close_idle;
			return broker_drivers[i].make(base, cfg, ec, err);
		}
	sbx_err_set(err, SBX_E_CONFIG, "driver: unknown driver \"%.64s\" "
	    "(engine, vm or kubernetes)", want);
	return NULL;
}

/* The "listening" line names the driver and what it talks to: the Engine
 * API socket (engine), the VM directory (vm), the kube-apiserver and
 * namespace (kubernetes); never another driver's setting. */
static void
log_listening(const struct broker_config *cfg)
{
	const char *drv = cfg->driver != NULL ? cfg->driver : "engine";
	/* the driver's own pairs, last: a NULL key ends the list early */
	const char *k1 = "runtime", *v1 = cfg->runtime, *k2 = NULL, *v2 = NULL;

	if (strcmp(drv, "vm") == 0) {
		k1 = "vm_dir";
		v1 = cfg->vm_dir != NULL ? cfg->vm_dir : "";
	} else if (strcmp(drv, "kubernetes") == 0) {
		k1 = "kube_server";
		v1 = cfg->kube_server != NULL ? cfg->kube_server : "";
		k2 = "kube_namespace";
		v2 = cfg->kube_namespace != NULL ? cfg->kube_namespace : "";
	}
	log_info("listening", "listen", cfg->listen, "driver", drv, "state_dir",
	    cfg->state_dir, "version", BROKER_VERSION, k1, v1, k2, v2, NULL);
}

int
main(int argc, char **argv)
{
	struct broker_config cfg;
	struct sbx_config_opts opts;
	struct sbx_engine_config ec;
	struct sbx_token token;
	struct sbx_err err;
	struct main_ctx m;
	struct sbx_driver *driver = NULL;
	struct broker_reaper *reaper = NULL;
	struct broker_egress_poll *egress_poll = NULL;
	struct event *sigs[SBX_DAEMON_NSIGS] = { NULL, NULL, NULL };
	const char **allow = NULL;
	char exe[PATH_MAX], token_problem[256], left_s[16];
	ssize_t n;
	int rc = BROKER_EXIT_INTERNAL, left;

	memset(&cfg, 0, sizeof(cfg));
	memset(&opts, 0, sizeof(opts));
	memset(&token, 0, sizeof(token));
	memset(&m, 0, sizeof(m));
	token_problem[0] = '\0';
	sbx_err_clear(&err);
	/* SIGPIPE ignored, umask 077 (what we create is ours alone), log. */
	sbx_daemon_begin("sandbox-broker");

	opts.accept = SBX_OPT_HELP | SBX_OPT_VERSION | SBX_OPT_PRINT_CONFIG |
	    SBX_OPT_CHECK | SBX_OPT_HEALTH;
	if (!sbx_daemon_options("sandbox-broker", BROKER_VERSION, synopsis,
	    broker_config_keys, &cfg, argc, argv, &opts, &rc))
		goto done;
	if (!sbx_daemon_no_args("sandbox-broker", &opts, &rc))
		goto done;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	if (broker_config_finish(&cfg, n > 0 ? exe : argv[0], &err) == -1) {
		rc = sbx_daemon_config_error("sandbox-broker", &err);
		goto done;
	}
	if (!sbx_daemon_print_config(&opts, broker_config_keys, &cfg, &rc))
		goto done;
	if (opts.health) {
		rc = broker_run_health(&cfg);
		goto done;
	}
	if (sbx_daemon_log_setup("sandbox-broker", cfg.log_level,
	    cfg.log_file) == -1) {
		rc = BROKER_EXIT_CONFIG;
		goto done;
	}

	/* The token: refused unless present and long enough; never echoed.
	 * --check needs none; a configured one that cannot be used is one of
	 * its problems (said after the runtime socket line). */
	if (sbx_token_load(&token, cfg.token_file, getenv("SBX_BROKER_TOKEN"),
	    &err) == -1) {
		int configured = (cfg.token_file != NULL &&
		    cfg.token_file[0] != '\0') || getenv("SBX_BROKER_TOKEN") != NULL;

		sbx_env_scrub("SBX_BROKER_TOKEN");
		if (opts.check) {
			if (configured)
				snprintf(token_problem, sizeof(token_problem),
				    "%s", err.message);
			sbx_err_clear(&err);
		} else {
			rc = sbx_daemon_config_error("sandbox-broker", &err);
			goto done;
		}
	}
	if (getenv("SBX_BROKER_TOKEN") != NULL) {
		sbx_log_add_secret(getenv("SBX_BROKER_TOKEN"));
		/* Out of /proc/PID/environ too, not only out of environ(7). */
		sbx_env_scrub("SBX_BROKER_TOKEN");
	}

	if ((m.base = event_base_new()) == NULL) {
		fprintf(stderr, "sandbox-broker: cannot create an event base\n");
		goto done;
	}
	if ((allow = broker_config_allowlist(&cfg)) == NULL)
		goto done;
	memset(&ec, 0, sizeof(ec));
	ec.runtime_socket = cfg.runtime;
	ec.default_image = cfg.image;
	ec.images = allow;
	ec.user = cfg.user;
	ec.memory_bytes.def = cfg.memory;
	ec.memory_bytes.ceiling = cfg.memory_max;
	ec.nano_cpus.def = cfg.nano_cpus;
	ec.nano_cpus.ceiling = cfg.nano_cpus_max;
	ec.pids.def = cfg.pids;
	ec.pids.ceiling = cfg.pids_max;
	ec.tmp_bytes = cfg.tmp_size;
	ec.exec_timeout_ms.def = cfg.exec_timeout;
	ec.exec_timeout_ms.ceiling = cfg.exec_timeout_max;
	ec.exec_output_cap = cfg.output_cap;
	ec.file_max_bytes = cfg.file_size_max;
	ec.file_timeout_ms = cfg.file_timeout;
	ec.usage_timeout_ms = cfg.usage_timeout;
	ec.usage_max_entries = cfg.usage_max_entries;
	ec.agent_off = !cfg.agent;
	ec.agent_idle_ms = cfg.agent_idle;
	ec.agent_ping_ms = cfg.agent_ping;
	ec.agent_fresh_ms = cfg.agent_fresh > 0 ? cfg.agent_fresh : -1;
	ec.agent_runtime_only = cfg.agent_channel != NULL &&
	    strcmp(cfg.agent_channel, "runtime") == 0;
	ec.helper_path = cfg.helper_path;
	ec.helper_volume = cfg.helper_volume;
	ec.run_bytes = cfg.run_size;
	ec.oci_runtime = cfg.oci_runtime;
	ec.egress_bridge_prefix = cfg.egress_bridge_prefix;
	ec.proxy_resolver = cfg.egress_proxy_resolver;
	ec.proxy_memory = cfg.egress_proxy_memory;
	ec.name_prefix = cfg.name_prefix;
	ec.warm_pool = (int)cfg.warm_pool;
	/* driver = vm: checked without a driver, which would adopt and kill
	 * the state dir's VMs. */
	if (opts.check && cfg.driver != NULL && strcmp(cfg.driver, "vm") == 0) {
		rc = broker_vm_check(&cfg, allow,
		    token_problem[0] != '\0' ? token_problem : NULL);
		goto done;
	}
	if ((driver = driver_new(m.base, &cfg, &ec, &err)) == NULL) {
		rc = sbx_daemon_config_error("sandbox-broker", &err);
		goto done;
	}
	if (opts.check && cfg.driver != NULL &&
	    strcmp(cfg.driver, "kubernetes") == 0) {
		rc = broker_kube_check(m.base, driver, &cfg,
		    token_problem[0] != '\0' ? token_problem : NULL);
		goto done;
	}
	if (opts.check) {
		rc = broker_run_check(m.base, driver, &cfg,
		    token_problem[0] != '\0' ? token_problem : NULL);
		goto done;
	}
	if ((m.server = broker_server_new(m.base, &cfg, driver, &token,
	    &err)) == NULL) {
		rc = sbx_daemon_start_error("sandbox-broker", &err);
		goto done;
	}
	sbx_token_clear(&token);
	if (sbx_daemon_signals("sandbox-broker", m.base, on_stop, &m,
	    sigs) == -1)
		goto done;
	/* SPEC §7: account for every labelled container and kill orphaned
	 * execs before the first request can start a new one. */
	m.recovering = 1;
	recovery_start(&m);
	if (!m.recovered && !m.quit && event_base_dispatch(m.base) == -1) {
		log_error("event loop failed", NULL);
		goto done;
	}
	m.recovering = 0;
	broker_recovery_free(m.recovery);
	m.recovery = NULL;
	if (m.retry_ev != NULL)
		event_del(m.retry_ev);
	if (m.quit || !m.recovered) {
		rc = m.quit ? BROKER_EXIT_OK : BROKER_EXIT_INTERNAL;
		goto done;
	}
	if ((reaper = broker_reaper_new(m.server, &err)) == NULL) {
		fprintf(stderr, "sandbox-broker: %s\n", err.message);
		goto done;
	}
	if ((egress_poll = broker_egress_poll_new(m.server, &err)) == NULL &&
	    sbx_err_is_set(&err)) {
		fprintf(stderr, "sandbox-broker: %s\n", err.message);
		goto done;
	}
	if (broker_server_listen(m.server, &err) == -1) {
		rc = sbx_daemon_start_error("sandbox-broker", &err);
		goto done;
	}
	log_listening(&cfg);
	if (event_base_dispatch(m.base) == -1) {
		log_error("event loop failed", NULL);
		goto done;
	}
	rc = BROKER_EXIT_OK;
done:
	sbx_daemon_signals_free(sigs);
	broker_egress_poll_free(egress_poll);
	broker_reaper_free(reaper);
	broker_recovery_free(m.recovery);
	if (m.retry_ev != NULL)
		event_free(m.retry_ev);
	broker_server_free(m.server);
	/* "events_left": what the loop still held when we stopped waiting
	 * ("0": it settled; the kills the runtime had to get went out). */
	left = m.base != NULL && driver != NULL ? settle(m.base, driver, 3000) : 0;
	snprintf(left_s, sizeof(left_s), "%d", left);
	if (rc == BROKER_EXIT_OK && m.server != NULL)
		log_info("stopped", "events_left", left_s, NULL);
	sbx_driver_free(driver);
	if (m.base != NULL)
		event_base_free(m.base);
	free(allow);
	sbx_token_clear(&token);
	sbx_config_free(broker_config_keys, &cfg);
	sbx_config_opts_free(&opts);
	return rc;
}
