/* sbx_probe.h - `--health`: one GET to a daemon's own listener, for container and service health checks. */
#ifndef SBX_PROBE_H
#define SBX_PROBE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Exit status of `sandbox-broker --health` / `sandbox-api --health`, the
 * values a Docker HEALTHCHECK (Engine API v1.41, HealthConfig) reads: 0
 * healthy, 1 unhealthy (Docker reserves 2).
 */
#define SBX_PROBE_HEALTHY 0
#define SBX_PROBE_UNHEALTHY 1

/*
 * Sends "GET path" (origin-form, e.g. "/v1/health") to address, a daemon's
 * own listen setting: "unix:/PATH", or "HOST:PORT" where a wildcard host
 * (0.0.0.0, [::]) is probed on its loopback (127.0.0.1, [::1]); port 0 is
 * refused (nothing to probe). When token is non-NULL the request carries
 * "Authorization: Bearer <token>" (token_len bytes, visible ASCII); the
 * header is built in a buffer that is wiped after sending. The probe runs its
 * own event loop and blocks for at most timeout_ms (milliseconds, > 0) for the
 * whole reply (connect included), via sbx_http_client.
 *
 * Healthy means: status 200 and a body that is a JSON object whose "status"
 * member is the string "ok" (sandbox-broker GET /v1/health, SPEC §4;
 * sandbox-api GET /healthz, SPEC §8).
 *
 * detail (detailsz bytes, may be NULL/0) receives one line for the health log:
 * "ok", or what failed, e.g. "HTTP 401", "status degraded: <the daemon's
 * reason>", "cannot connect: ...", "timed out after 5000 ms". Only the
 * "status" and "reason" members of the body are copied (each cut to 200
 * bytes, control characters replaced), and nothing of a body that contains
 * the token: detail never holds the token.
 *
 * Returns SBX_PROBE_HEALTHY or SBX_PROBE_UNHEALTHY; never aborts.
 */
int sbx_probe_health(const char *address, const char *path, const char *token,
    size_t token_len, int64_t timeout_ms, char *detail, size_t detailsz);

#endif
