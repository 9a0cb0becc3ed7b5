/* broker_egress.h - what the broker needs to run a sandbox's egress proxy: allowlist checks, Engine API bodies, the proxy's decision log read back, its counts kept for /metrics (adr/0026, adr/0027). */
#ifndef SBX_BROKER_EGRESS_H
#define SBX_BROKER_EGRESS_H

#include <stddef.h>

#include <jansson.h>

#include "sbx_egress.h"
#include "sbx_err.h"

/* Where the proxy's socket lives: a per-sandbox volume mounted read-write
 * in the proxy and read-only in the sandbox. */
#define EGRESS_SOCK_DIR "/run/sbx-egress"
#define EGRESS_SOCK EGRESS_SOCK_DIR "/proxy.sock"
/* The proxy's allowed/denied totals, kept across its restarts (adr/0027). */
#define EGRESS_COUNTS EGRESS_SOCK_DIR "/counts"
/* What the sandbox's relay listens on, inside its own network namespace. */
#define EGRESS_RELAY_LISTEN "127.0.0.1:3128"
#define EGRESS_PROXY_URL "http://127.0.0.1:3128"
/* Denials kept for GET .../egress, newest last. */
#define EGRESS_DENIALS_MAX 20
/* Label on the proxy container: the SHA-256 of its policy (hex). */
#define EGRESS_L_POLICY "io.sbx.egress-policy"

/*
 * Writes the hex SHA-256 (64 chars + NUL, out must hold 65) of the policy
 * allow stands for: entries in order, each followed by "\n", then
 * "counts\n", "resolver=" resolver (NULL: "") — what the proxy's label records, so an
 * ensure sees a changed policy without asking the proxy.
 */
void egress_policy_digest(json_t *allow, const char *resolver, char out[65]);

/* What the broker needs to create one sandbox's proxy container. */
struct egress_proxy_spec {
	const char *image;        /* the sandbox's image (allowlisted, present) */
	const char *helper_vol;   /* a volume read-only at helper_dir, or NULL */
	const char *helper_dir;   /* e.g. "/.sbx" */
	const char *proxy_path;   /* sbx-proxy in the container, e.g.
	                           * EGRESS_SOCK_DIR "/sbx-proxy" */
	const char *sock_vol;     /* "<prefix><id>-egsock", read-write at EGRESS_SOCK_DIR */
	const char *network;      /* the sandbox's egress network (ADR 0014) */
	const char *resolver;     /* "IP[:PORT]" for --resolver, or NULL */
	const char *oci_runtime;  /* HostConfig.Runtime, or NULL */
	long long mem_bytes;      /* memory and swap limit */
	long long pids;           /* pids limit */
	json_t *allow;            /* the checked allowlist (borrowed) */
	json_t *labels;           /* io.sbx.* labels (stolen, also on NULL return) */
};

/*
 * The Engine API v1.41 POST /containers/create body of a proxy container:
 * Entrypoint proxy_path, Cmd "--listen unix:EGRESS_SOCK --counts
 * EGRESS_COUNTS" plus "--allow" /
 * "--cidr" per entry and "--resolver"; User "0:0" with CapDrop ALL,
 * no-new-privileges, read-only rootfs, no Init, the two mounts, the egress
 * network, RestartPolicy no; labels plus EGRESS_L_POLICY. Returns a new
 * reference or NULL (out of memory).
 */
json_t *egress_proxy_body(const struct egress_proxy_spec *s);

/*
 * The sandbox side in proxy mode: appends to env (a JSON array of
 * "K=V" strings) HTTP_PROXY, HTTPS_PROXY, http_proxy, https_proxy
 * (EGRESS_PROXY_URL) and NO_PROXY, no_proxy (localhost,127.0.0.1,::1).
 * Returns 0 or -1 (out of memory).
 */
int egress_sandbox_env(json_t *env);

/* Counts and recent denials read from a proxy's log. */
struct egress_stats {
	unsigned long allowed;    /* from the newest decision line */
	unsigned long denied;
	json_t *denials;          /* array of {"ts","host","port","reason"}, newest last, owned */
};

/*
 * Reads a proxy container's log as GET /containers/{id}/logs returns it
 * (Tty false: 8-byte frames, stream byte 1 or 2, big-endian length; an
 * input not starting with a frame header is read as plain lines) and
 * fills *st (initialised here: free with egress_stats_clear): the counts of
 * the newest "allow"/"deny"/"listening" line (a proxy's totals survive its
 * restarts, adr/0027), the last EGRESS_DENIALS_MAX "deny" lines
 * (only ts, host, port, reason copied; bounded strings). Lines that are
 * not JSON objects are skipped: the log is the proxy's, but its bytes are
 * treated as untrusted. Returns 0 or -1 (out of memory).
 */
int egress_log_scan(const unsigned char *buf, size_t len, struct egress_stats *st);

void egress_stats_clear(struct egress_stats *st);

struct broker_metrics;
struct broker_state;

/*
 * What a driver's egress_stats answer (JSON text: {"proxy":bool,
 * "allowed":N,"denied":M,...}) means for id's series in m: proxy true
 * sets the counts (broker_metrics_egress_set) while state has a row for
 * id, proxy false (or no row: destroyed meanwhile) forgets them. Text
 * that does not parse changes nothing; out of memory is logged. Used by
 * the egress poll and by GET /v1/sandboxes/{id}/egress (adr/0027).
 */
void broker_egress_note(struct broker_metrics *m, struct broker_state *state,
    const char *id, const char *text);

#endif
