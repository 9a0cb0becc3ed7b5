/* broker.h - sandbox-broker: its configuration and its HTTP server (SPEC §4, §9). */
#ifndef BROKER_H
#define BROKER_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_config.h"
#include "sbx_driver.h"
#include "sbx_err.h"
#include "sbx_token.h"

struct event_base;
struct evhttp;

#define BROKER_VERSION "0.1.0"

/* Exit codes of sandbox-broker (docs/broker.md). */
#define BROKER_EXIT_OK 0
#define BROKER_EXIT_INTERNAL 1
#define BROKER_EXIT_USAGE 64        /* EX_USAGE: bad command line */
#define BROKER_EXIT_UNAVAILABLE 69  /* EX_UNAVAILABLE: --check found a problem */
#define BROKER_EXIT_CONFIG 78       /* EX_CONFIG: bad config, missing/short token */

/*
 * The broker's configuration (keys: broker_config_keys). Strings and lists
 * are owned (sbx_config_free). Sizes in bytes, durations in milliseconds.
 * Fields after "derived" are filled by broker_config_finish, not by keys.
 */
struct broker_config {
	char *listen;             /* "unix:PATH" or "HOST:PORT" */
	char *runtime;            /* "unix:PATH" of the Engine API socket */
	char *token_file;         /* NULL: SBX_BROKER_TOKEN */
	char *state_dir;          /* broker.db lives here */
	char *image;              /* default image */
	char **images;            /* more allowlisted images */
	char *helper_path;        /* NULL/"": next to the binary (broker_config_finish) */
	char *helper_volume;      /* stem of the helper volume's name; NULL: "<name_prefix>helper" */
	char *user;               /* "uid:gid" of the sandbox user */
	char *egress_bridge_prefix;
	char *egress_proxy_resolver; /* "IP[:PORT]" the egress proxies ask (adr/0026) */
	long long egress_proxy_memory; /* memory limit of one egress proxy */
	long long egress_stats_interval; /* ms between reads of the proxies' counts (adr/0027); 0: off */
	char *oci_runtime;        /* NULL: runtime default */
	char *name_prefix;        /* container/volume name prefix */
	long long memory;         /* default memory limit, bytes */
	long long memory_max;     /* most a caller may ask for */
	char *cpus;               /* default CPUs, decimal ("1", "0.5") */
	char *cpus_max;
	long long pids, pids_max;
	long long tmp_size;
	long long run_size;       /* /run/sbx tmpfs: the helper's exec state */
	long long exec_timeout, exec_timeout_max; /* ms */
	long long output_cap;     /* stdout+stderr bytes per exec */
	long long file_size_max;  /* read/write cap, bytes */
	long long body_max;       /* JSON request body cap, bytes */
	long long header_timeout; /* ms for a whole request head (sbx_gate.h) */
	long long head_max;       /* bytes of a request head */
	long long headers_max;    /* header fields of a request */
	long long max_connections; /* client connections open at once */
	long long max_execs_per_sandbox;
	long long max_port_sessions_per_sandbox; /* PORT sessions open at once (not execs) */
	long long file_timeout;   /* ms without progress of a read/write/list */
	long long list_max_entries; /* entries per list reply (<= 100000) */
	long long max_file_ops_per_sandbox;
	long long max_sandboxes;
	long long idle_timeout, reap_interval, destroy_after; /* ms; reaper */
	long long shutdown_grace; /* ms SIGTERM waits for in-flight requests */
	long long usage_timeout;  /* ms a /work usage walk may take (adr/0017) */
	long long db_cache;       /* bytes of broker.db's page cache at most (sbx_sqlite_cache) */
	long long usage_max_entries; /* entries a /work usage walk counts at most */
	long long work_quota;     /* bytes of /work per sandbox, soft (adr/0057); 0: none */
	long long work_quota_stale; /* ms a /work figure is trusted for a write */
	int agent;                /* helper invocations through each sandbox's agent (adr/0025) */
	long long agent_idle, agent_ping, agent_fresh; /* ms (adr/0025) */
	char *agent_channel;      /* "direct" | "runtime" (adr/0066) */
	long long socket_mode;    /* unix socket permission bits, e.g. 0660 */
	long long warm_pool;      /* warm sandboxes of the default image (adr/0067); 0: none */
	char *log_level;
	char *log_file;           /* NULL: stderr */
	char *driver;             /* "engine", "vm" (adr/0069) or "kubernetes" (adr/0072) */
	char *vm_dir, *vm_accel, *vm_qemu, *vm_runas; /* driver vm */
	long long vm_boot_timeout, stop_timeout; /* ms, driver vm */
	long long vm_egress_conns; /* driver vm: relay connections per sandbox */
	long long work_size;      /* bytes of a vm sandbox's /work disk */
	char *kube_server, *kube_ca_file, *kube_token_file, *kube_namespace;
	char *kube_helper_image, *kube_storage_class, *kube_work_size;
	char *kube_egress_cidrs;
	long long kube_start_timeout, kube_force_after; /* ms */
	/* derived */
	int64_t nano_cpus, nano_cpus_max;
};

extern const struct sbx_config_key broker_config_keys[];

/*
 * Checks values that the table cannot (cpus syntax, defaults above maxima,
 * listen syntax, positive limits, log level) and fills the derived fields and
 * defaults that depend on the environment: runtime from $DOCKER_HOST when
 * unset, token_file = $CREDENTIALS_DIRECTORY/broker-token when unset and
 * that systemd credential exists (sbx_cred.h), helper_path next to the
 * executable (argv0_path, e.g. /proc/self/exe resolved) when unset.
 * Returns 0, or -1 with err
 * config_error naming the key.
 */
int broker_config_finish(struct broker_config *cfg, const char *exe_path,
    struct sbx_err *err);

/* NULL-terminated allowlist: cfg->image then cfg->images (owned array,
 * borrowed strings; free() the array). NULL when out of memory. */
const char **broker_config_allowlist(const struct broker_config *cfg);

/* ------------------------------------------------------------------ */
/* Server                                                              */

struct broker_server;

/*
 * A broker HTTP server on base, using driver (borrowed; must outlive the
 * server) and cfg (borrowed; must outlive the server), accepting requests
 * that carry token (copied), answering the routes of proto/broker-api.md.
 * Opens (creates) cfg->state_dir/broker.db. Does not listen yet: see
 * broker_server_listen. Returns the server or NULL with err (config_error:
 * state dir/database, internal).
 */
struct broker_server *broker_server_new(struct event_base *base,
    const struct broker_config *cfg, struct sbx_driver *driver,
    const struct sbx_token *token, struct sbx_err *err);

/*
 * Starts listening on cfg->listen: "unix:PATH" (parent made 0750 if absent,
 * socket chmod socket_mode; an existing socket file is replaced only when
 * nothing answers on it, else config_error "in use") or "HOST:PORT" (port 0
 * picks a free one: broker_server_port). Returns 0 or -1 with err.
 */
int broker_server_listen(struct broker_server *s, struct sbx_err *err);

/* Bound TCP port (host order), 0 when listening on a unix socket. */
int broker_server_port(const struct broker_server *s);

/*
 * Graceful stop (SIGTERM): stop accepting, answer new requests on open
 * connections 503 shutting_down, let in-flight requests finish for up to
 * cfg->shutdown_grace ms, then cancel the rest. done(arg) is called once
 * when nothing is in flight any more (possibly from within this call's
 * loop turn, never synchronously).
 */
void broker_server_drain(struct broker_server *s, void (*done)(void *),
    void *arg);

/* Number of requests being answered (streams included). */
unsigned broker_server_inflight(const struct broker_server *s);

/* Frees s: closes listeners and the database, cancels driver ops. NULL ok. */
void broker_server_free(struct broker_server *s);

#endif
