/* broker_config.c - every configuration key of sandbox-broker and the checks the table cannot make (SPEC §9). */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker.h"
#include "sbx_cred.h"
#include "sbx_log.h"
#include "sbx_proto.h"

#define K(name, type, field, def, help) \
	{ name, type, offsetof(struct broker_config, field), def, 0, help }

const struct sbx_config_key broker_config_keys[] = {
	K("listen", SBX_CFG_STRING, listen, "unix:/run/sbx/broker.sock",
	    "where to serve the API: unix:PATH or HOST:PORT"),
	K("runtime", SBX_CFG_STRING, runtime, NULL,
	    "Engine API socket unix:PATH (default: $DOCKER_HOST, else unix:/var/run/docker.sock)"),
	K("token_file", SBX_CFG_STRING, token_file, NULL,
	    "file (mode 0600) holding the bearer token (default: systemd credential "
	    "$CREDENTIALS_DIRECTORY/broker-token if present); else env SBX_BROKER_TOKEN"),
	K("state_dir", SBX_CFG_STRING, state_dir, "/var/lib/sbx",
	    "directory of broker.db (created 0700)"),
	K("image", SBX_CFG_STRING, image, "sbx-default:bookworm",
	    "default sandbox image (always allowlisted)"),
	K("images", SBX_CFG_STRLIST, images, NULL,
	    "further allowlisted images"),
	K("helper_path", SBX_CFG_STRING, helper_path, NULL,
	    "static sbx-helper binary (default: next to sandbox-broker, then ../libexec/sbx/)"),
	K("helper_volume", SBX_CFG_STRING, helper_volume, NULL,
	    "name stem of the read-only volume sbx-helper reaches sandboxes in; "
	    "the volume is STEM-<sha256 prefix> (default: <name_prefix>helper)"),
	K("user", SBX_CFG_STRING, user, "1000:1000",
	    "uid:gid that exec and file operations run as in the sandbox"),
	K("egress_bridge_prefix", SBX_CFG_STRING, egress_bridge_prefix, "sbxe",
	    "host interface name prefix of the per-sandbox egress networks "
	    "(matched by deploy/egress-firewall.sh)"),
	K("egress_proxy_resolver", SBX_CFG_STRING, egress_proxy_resolver, NULL,
	    "DNS server IP[:PORT] of the egress proxies (adr/0026; default: the "
	    "proxy container's /etc/resolv.conf)"),
	K("egress_proxy_memory", SBX_CFG_BYTES, egress_proxy_memory, "64m",
	    "memory limit of one sandbox's egress proxy container"),
	K("egress_stats_interval", SBX_CFG_DURATION_MS, egress_stats_interval, "15s",
	    "how often the broker reads the egress proxies' allowed/denied counts "
	    "for /metrics (adr/0027; 0: only on GET .../egress)"),
	K("oci_runtime", SBX_CFG_STRING, oci_runtime, NULL,
	    "OCI runtime for sandboxes, e.g. runsc (default: the runtime's)"),
	K("name_prefix", SBX_CFG_STRING, name_prefix, "sbx-",
	    "prefix of container and volume names"),
	K("memory", SBX_CFG_BYTES, memory, "512m",
	    "memory (and memory+swap) limit per sandbox"),
	K("memory_max", SBX_CFG_BYTES, memory_max, "2g",
	    "most memory a caller may ask for"),
	K("cpus", SBX_CFG_STRING, cpus, "1", "CPUs per sandbox (decimal)"),
	K("cpus_max", SBX_CFG_STRING, cpus_max, "2",
	    "most CPUs a caller may ask for"),
	K("pids", SBX_CFG_INT, pids, "256", "pids limit per sandbox"),
	K("pids_max", SBX_CFG_INT, pids_max, "1024",
	    "most pids a caller may ask for"),
	K("tmp_size", SBX_CFG_BYTES, tmp_size, "64m",
	    "size of the /tmp tmpfs (noexec)"),
	K("run_size", SBX_CFG_BYTES, run_size, "1m",
	    "size of the /run/sbx tmpfs holding the helper's exec state"),
	K("exec_timeout", SBX_CFG_DURATION_MS, exec_timeout, "60s",
	    "exec timeout when the caller gives none"),
	K("exec_timeout_max", SBX_CFG_DURATION_MS, exec_timeout_max, "10m",
	    "longest exec timeout a caller may ask for"),
	K("output_cap", SBX_CFG_BYTES, output_cap, "16m",
	    "stdout+stderr bytes per exec; beyond it the exec ends truncated"),
	K("file_size_max", SBX_CFG_BYTES, file_size_max, "64m",
	    "largest file read or written"),
	K("body_max", SBX_CFG_BYTES, body_max, "8m",
	    "largest JSON request body (exec stdin included)"),
	SBX_CONFIG_HTTP_ROWS(K),
	K("max_execs_per_sandbox", SBX_CFG_INT, max_execs_per_sandbox, "8",
	    "concurrent execs per sandbox; more: 429 too_many"),
	K("max_port_sessions_per_sandbox", SBX_CFG_INT,
	    max_port_sessions_per_sandbox, "32",
	    "port sessions (TCP connections to a sandbox's port) open at once "
	    "per sandbox, apart from its execs; more: 429 too_many"),
	K("file_timeout", SBX_CFG_DURATION_MS, file_timeout, "30s",
	    "read/write/list: longest time without progress; then 504 timeout and the helper is killed"),
	K("list_max_entries", SBX_CFG_INT, list_max_entries, "10000",
	    "directory entries per list reply; more: truncated with a cursor"),
	K("max_file_ops_per_sandbox", SBX_CFG_INT, max_file_ops_per_sandbox, "16",
	    "concurrent reads, writes and lists per sandbox; more: 429 too_many"),
	K("max_sandboxes", SBX_CFG_INT, max_sandboxes, "100",
	    "sandboxes the broker keeps; ensure of one more: 429 too_many"),
	K("idle_timeout", SBX_CFG_DURATION_MS, idle_timeout, "30m",
	    "reaper: stop sandboxes idle longer than this (0: never)"),
	K("reap_interval", SBX_CFG_DURATION_MS, reap_interval, "1m",
	    "reaper: how often to look"),
	K("destroy_after", SBX_CFG_DURATION_MS, destroy_after, "0",
	    "reaper: destroy sandboxes stopped longer than this (0: never)"),
	K("db_cache", SBX_CFG_BYTES, db_cache, "256k",
	    "bytes of broker.db's page cache at most (SQLite cache_size)"),
	K("usage_timeout", SBX_CFG_DURATION_MS, usage_timeout, "5s",
	    "status ?usage=1: longest walk of /work; then the figures say partial"),
	K("usage_max_entries", SBX_CFG_INT, usage_max_entries, "200000",
	    "status ?usage=1: most /work entries walked; then the figures say partial"),
	K("work_quota", SBX_CFG_BYTES, work_quota, "0",
	    "bytes /work may hold per sandbox, kept by the broker (adr/0057): "
	    "API writes past it 507 quota_exceeded, a quota event at an exec's "
	    "end; each exec's end then counts /work (0: no quota)"),
	K("work_quota_stale", SBX_CFG_DURATION_MS, work_quota_stale, "10s",
	    "work_quota: how old a count of /work may be for judging a write; "
	    "older, /work is counted again first"),
	K("agent", SBX_CFG_BOOL, agent, "true",
	    "run sbx-helper as one long-lived agent per sandbox (adr/0025); false: one runtime exec per operation"),
	K("agent_idle", SBX_CFG_DURATION_MS, agent_idle, "60s",
	    "an agent that hears nothing from the broker this long exits (its execs are killed)"),
	K("agent_ping", SBX_CFG_DURATION_MS, agent_ping, "5s",
	    "the broker pings each agent this often; unanswered for twice that, the channel is closed"),
	K("agent_fresh", SBX_CFG_DURATION_MS, agent_fresh, "15s",
	    "warm ensure answered from the agent's channel when the agent was heard within this (0: always inspect)"),
	K("agent_channel", SBX_CFG_STRING, agent_channel, "direct",
	    "direct: the broker reaches each agent through a unix socket in a per-sandbox volume "
	    "(adr/0066), the runtime exec stream when that is not reachable; runtime: always the stream"),
	K("warm_pool", SBX_CFG_INT, warm_pool, "0",
	    "sandboxes of the default image kept created, started and owned by no one; an ensure of a new sandbox claims one (adr/0067; driver = kubernetes: pods with their PVCs, adr/0072; 0: none, at most 64 and max_sandboxes)"),
	K("shutdown_grace", SBX_CFG_DURATION_MS, shutdown_grace, "10s",
	    "SIGTERM: how long in-flight requests may finish"),
	K("socket_mode", SBX_CFG_MODE, socket_mode, "0660",
	    "permission bits of the unix socket, octal as chmod writes them"),
	K("driver", SBX_CFG_STRING, driver, "engine",
	    "sandbox driver: engine (containers through the runtime), vm (a qemu microVM per sandbox, adr/0069) or kubernetes (adr/0072)"),
	K("vm_dir", SBX_CFG_STRING, vm_dir, "/var/lib/sbx/vm-boot",
	    "driver vm: vmlinuz, initrd.img and images/KEY.ext4 root disks (deploy/vm/build.sh)"),
	K("vm_accel", SBX_CFG_STRING, vm_accel, "auto",
	    "driver vm: auto (kvm when /dev/kvm works for stock kernels, else tcg; logged), kvm or tcg"),
	K("vm_qemu", SBX_CFG_STRING, vm_qemu, "qemu-system-x86_64",
	    "driver vm: the qemu binary"),
	K("vm_runas", SBX_CFG_STRING, vm_runas, "sbx-vm",
	    "driver vm: the dedicated unprivileged user qemu drops to (-runas) after opening its files (deploy/deps.sh creates sbx-vm: useradd --system --no-create-home --shell /usr/sbin/nologin sbx-vm); a root broker whose vm_runas is not a user of the host refuses to start (exit 78); a broker not running as root ignores it (qemu runs as the broker's user, logged); empty: none"),
	K("vm_egress_conns", SBX_CFG_INT, vm_egress_conns, "64",
	    "driver vm: connections one sandbox with an egress allowlist may have open through its relay at once (1..1024; the next is closed at accept)"),
	K("vm_boot_timeout", SBX_CFG_DURATION_MS, vm_boot_timeout, "120s",
	    "driver vm: a VM whose agent has not said HELLO within this is killed and ensure fails"),
	K("work_size", SBX_CFG_BYTES, work_size, "1g",
	    "driver vm: size of a sandbox's sparse /work disk image"),
	K("stop_timeout", SBX_CFG_DURATION_MS, stop_timeout, "10s",
	    "driver vm: a stop waits this long for the clean poweroff, then kills qemu"),
	K("kube_server", SBX_CFG_STRING, kube_server, NULL,
	    "driver kubernetes: the API server https://HOST:PORT"),
	K("kube_ca_file", SBX_CFG_STRING, kube_ca_file, NULL,
	    "driver kubernetes: PEM CA of the API server's certificate"),
	K("kube_token_file", SBX_CFG_STRING, kube_token_file, NULL,
	    "driver kubernetes: file holding the broker ServiceAccount's bearer token (never logged)"),
	K("kube_namespace", SBX_CFG_STRING, kube_namespace, "sbx",
	    "driver kubernetes: namespace of every sandbox object"),
	K("kube_helper_image", SBX_CFG_STRING, kube_helper_image, NULL,
	    "driver kubernetes: image holding /sbx-helper, copied into each pod by an init container"),
	K("kube_storage_class", SBX_CFG_STRING, kube_storage_class, NULL,
	    "driver kubernetes: storageClassName of the work-ID PVCs (default: the cluster's)"),
	K("kube_work_size", SBX_CFG_STRING, kube_work_size, "1Gi",
	    "driver kubernetes: storage request of each work-ID PVC (a quantity)"),
	K("kube_start_timeout", SBX_CFG_DURATION_MS, kube_start_timeout, "120s",
	    "driver kubernetes: ensure waits this long for a new pod to run"),
	K("kube_force_after", SBX_CFG_DURATION_MS, kube_force_after, "30s",
	    "driver kubernetes: a pod still terminating this long after its delete is deleted with grace 0"),
	K("kube_egress_cidrs", SBX_CFG_STRING, kube_egress_cidrs, NULL,
	    "driver kubernetes: comma-separated CIDRs an egress sandbox's NetworkPolicy allows (empty: egress refused)"),
	SBX_CONFIG_LOG_ROWS(K),
	{ NULL, 0, 0, NULL, 0, NULL },
};

/* "1", "0.5", "2.25" -> nano CPUs; at most 9 decimals, > 0. */
static int
parse_cpus(const char *s, int64_t *out)
{
	int64_t whole = 0, frac = 0, scale = 1000000000;
	const char *p = s;
	int digits = 0;

	if (s == NULL || *s == '\0')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		if (whole > 1000000)
			return -1;
		whole = whole * 10 + (*p - '0');
	}
	if (*p == '.') {
		p++;
		for (; *p >= '0' && *p <= '9'; p++, digits++) {
			if (scale == 1)
				return -1;
			scale /= 10;
			frac += (*p - '0') * scale;
		}
	}
	if (*p != '\0' || digits == 0)
		return -1;
	*out = whole * 1000000000 + frac;
	return *out > 0 ? 0 : -1;
}

static int
need_positive(long long v, const char *name, struct sbx_err *err)
{
	if (v <= 0)
		return sbx_err_set(err, SBX_E_CONFIG, "%s must be above 0.", name);
	return 0;
}

static int
not_above(long long def, long long max, const char *a, const char *b,
    struct sbx_err *err)
{
	if (def > max)
		return sbx_err_set(err, SBX_E_CONFIG,
		    "%s must not be above %s.", a, b);
	return 0;
}

static int
set_string(char **field, const char *value)
{
	char *v;

	if ((v = strdup(value)) == NULL)
		return -1;
	free(*field);
	*field = v;
	return 0;
}

static int
exists_exec(const char *path)
{
	return access(path, X_OK) == 0;
}

int
broker_config_finish(struct broker_config *cfg, const char *exe_path,
    struct sbx_err *err)
{
	const char *dh;
	char buf[PATH_MAX], *slash;

	if (cfg->driver != NULL && strcmp(cfg->driver, "engine") != 0 &&
	    strcmp(cfg->driver, "vm") != 0 && strcmp(cfg->driver, "kubernetes") != 0)
		return sbx_err_set(err, SBX_E_CONFIG, "driver must be engine, vm or "
		    "kubernetes.");

	if (cfg->listen == NULL || cfg->listen[0] == '\0' ||
	    (strncmp(cfg->listen, "unix:", 5) != 0 &&
	    strrchr(cfg->listen, ':') == NULL))
		return sbx_err_set(err, SBX_E_CONFIG,
		    "listen must be unix:PATH or HOST:PORT.");
	if (strncmp(cfg->listen, "unix:", 5) == 0 && cfg->listen[5] != '/')
		return sbx_err_set(err, SBX_E_CONFIG,
		    "listen unix:PATH needs an absolute path.");
	if (cfg->runtime == NULL || cfg->runtime[0] == '\0') {
		dh = getenv("DOCKER_HOST");
		if (dh != NULL && strncmp(dh, "unix://", 7) == 0) {
			snprintf(buf, sizeof(buf), "unix:%s", dh + 7);
			dh = buf;
		} else if (dh == NULL || dh[0] == '\0')
			dh = "unix:/var/run/docker.sock";
		if (set_string(&cfg->runtime, dh) == -1)
			return sbx_err_oom(err);
	}
	if (strncmp(cfg->runtime, "unix:", 5) != 0 || cfg->runtime[5] != '/')
		return sbx_err_set(err, SBX_E_CONFIG,
		    "runtime must be unix:/ABSOLUTE/PATH (DOCKER_HOST unix:// too).");
	if (cfg->state_dir == NULL || cfg->state_dir[0] != '/')
		return sbx_err_set(err, SBX_E_CONFIG,
		    SBX_MSG_STATE_DIR_RELATIVE);
	if (cfg->image == NULL || cfg->image[0] == '\0')
		return sbx_err_set(err, SBX_E_CONFIG, "image must be set.");
	if (parse_cpus(cfg->cpus, &cfg->nano_cpus) == -1)
		return sbx_err_set(err, SBX_E_CONFIG,
		    "cpus must be a positive decimal such as 1 or 0.5.");
	if (parse_cpus(cfg->cpus_max, &cfg->nano_cpus_max) == -1)
		return sbx_err_set(err, SBX_E_CONFIG,
		    "cpus_max must be a positive decimal such as 2 or 1.5.");
	if (cfg->nano_cpus > cfg->nano_cpus_max)
		return sbx_err_set(err, SBX_E_CONFIG,
		    "cpus must not be above cpus_max.");
	if (need_positive(cfg->memory, "memory", err) == -1 ||
	    need_positive(cfg->pids, "pids", err) == -1 ||
	    need_positive(cfg->tmp_size, "tmp_size", err) == -1 ||
	    need_positive(cfg->run_size, "run_size", err) == -1 ||
	    need_positive(cfg->exec_timeout, "exec_timeout", err) == -1 ||
	    need_positive(cfg->output_cap, "output_cap", err) == -1 ||
	    need_positive(cfg->file_size_max, "file_size_max", err) == -1 ||
	    need_positive(cfg->body_max, "body_max", err) == -1 ||
	    need_positive(cfg->header_timeout, "header_timeout", err) == -1 ||
	    need_positive(cfg->head_max, "head_max", err) == -1 ||
	    need_positive(cfg->headers_max, "headers_max", err) == -1 ||
	    need_positive(cfg->max_connections, "max_connections", err) == -1 ||
	    need_positive(cfg->max_execs_per_sandbox, "max_execs_per_sandbox",
	    err) == -1 ||
	    need_positive(cfg->max_port_sessions_per_sandbox,
	    "max_port_sessions_per_sandbox", err) == -1 ||
	    need_positive(cfg->max_sandboxes, "max_sandboxes", err) == -1 ||
	    need_positive(cfg->file_timeout, "file_timeout", err) == -1 ||
	    need_positive(cfg->list_max_entries, "list_max_entries", err) == -1 ||
	    need_positive(cfg->max_file_ops_per_sandbox,
	    "max_file_ops_per_sandbox", err) == -1 ||
	    need_positive(cfg->reap_interval, "reap_interval", err) == -1 ||
	    not_above(cfg->memory, cfg->memory_max, "memory", "memory_max",
	    err) == -1 ||
	    not_above(cfg->pids, cfg->pids_max, "pids", "pids_max", err) == -1 ||
	    not_above(cfg->exec_timeout, cfg->exec_timeout_max, "exec_timeout",
	    "exec_timeout_max", err) == -1)
		return -1;
	if (cfg->warm_pool < 0 || cfg->warm_pool > 64 ||
	    cfg->warm_pool > cfg->max_sandboxes)
		return sbx_err_set(err, SBX_E_CONFIG,
		    "warm_pool must be 0..64 and not above max_sandboxes.");
	if (cfg->list_max_entries > 100000)
		return sbx_err_set(err, SBX_E_CONFIG,
		    "list_max_entries must be at most 100000.");
	if (need_positive(cfg->usage_timeout, "usage_timeout", err) == -1 ||
	    need_positive(cfg->usage_max_entries, "usage_max_entries", err) == -1)
		return -1;
	if (cfg->socket_mode < 0 || cfg->socket_mode > 0777)
		return sbx_err_set(err, SBX_E_CONFIG,
		    "socket_mode must be permission bits 0000..0777, e.g. 0660.");
	if (cfg->agent_channel == NULL || (strcmp(cfg->agent_channel, "direct") != 0 &&
	    strcmp(cfg->agent_channel, "runtime") != 0))
		return sbx_err_set(err, SBX_E_CONFIG,
		    "agent_channel must be direct or runtime.");
	if (sbx_log_level_parse(cfg->log_level) == -1)
		return sbx_err_set(err, SBX_E_CONFIG,
		    SBX_MSG_LOG_LEVEL);
	/* Under systemd the token is a credential (LoadCredential=broker-token,
	 * ADR 0011): the default token_file when none is configured. */
	if (sbx_credential_default(&cfg->token_file, SBX_CRED_BROKER_TOKEN) ==
	    -1)
		return sbx_err_oom(err);
	if ((cfg->helper_path == NULL || cfg->helper_path[0] == '\0') &&
	    exe_path != NULL) {
		/* Next to the binary (build/out/), then the installed layout
		 * $(PREFIX)/bin -> $(PREFIX)/libexec/sbx (Makefile install). */
		snprintf(buf, sizeof(buf), "%s", exe_path);
		if ((slash = strrchr(buf, '/')) != NULL)
			*slash = '\0';
		else
			snprintf(buf, sizeof(buf), ".");
		{
			char cand[PATH_MAX + 32];
			snprintf(cand, sizeof(cand), "%s/sbx-helper", buf);
			if (!exists_exec(cand))
				snprintf(cand, sizeof(cand),
				    "%s/../libexec/sbx/sbx-helper", buf);
			if (set_string(&cfg->helper_path, cand) == -1)
				return sbx_err_oom(err);
		}
	}
	return 0;
}

const char **
broker_config_allowlist(const struct broker_config *cfg)
{
	const char **list;
	size_t n = 0, i;

	while (cfg->images != NULL && cfg->images[n] != NULL)
		n++;
	if ((list = calloc(n + 2, sizeof(*list))) == NULL)
		return NULL;
	list[0] = cfg->image;
	for (i = 0; i < n; i++)
		list[i + 1] = cfg->images[i];
	return list;
}
