/* driver_engine.h - the SandboxDriver on the Docker Engine API v1.41 (Docker and Podman) over a unix socket. */
#ifndef DRIVER_ENGINE_H
#define DRIVER_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_driver.h"

/*
 * A limit: the value used when a caller asks for 0 (def) and the most a
 * caller may ask for (ceiling). A request above the ceiling is refused with
 * limit_exceeded, never clamped (SPEC §4). def must not exceed ceiling.
 */
struct sbx_engine_limit {
	int64_t def;
	int64_t ceiling;
};

/*
 * Engine driver configuration. Every pointer is borrowed for the duration of
 * sbx_engine_driver_new() only (the driver copies what it keeps). Zero or
 * NULL fields take the default given in brackets.
 */
struct sbx_engine_config {
	const char *runtime_socket;   /* path of the runtime's unix socket, with or
	                               * without a "unix:" prefix (required) */
	const char *default_image;    /* image when a spec names none (required) */
	const char *const *images;    /* NULL-terminated allowlist; the default
	                               * image is always allowed [NULL: only it] */
	const char *user;             /* "uid:gid" of the sandbox user ["1000:1000"] */
	struct sbx_engine_limit memory_bytes;  /* Memory and MemorySwap [512 MiB / 2 GiB] */
	struct sbx_engine_limit nano_cpus;     /* NanoCpus [1e9 / 2e9] */
	struct sbx_engine_limit pids;          /* PidsLimit [256 / 1024] */
	int64_t tmp_bytes;            /* /tmp tmpfs size, noexec,nosuid,nodev [64 MiB] */
	struct sbx_engine_limit exec_timeout_ms; /* [30 s / 10 min] */
	int64_t exec_output_cap;      /* stdout+stderr bytes per exec, default and
	                               * ceiling [16 MiB] */
	int64_t file_max_bytes;       /* read and write size cap [64 MiB] */
	const char *helper_path;      /* host path of the static sbx-helper binary,
	                               * bind-mounted read-only at /.sbx/sbx-helper
	                               * (required) */
	const char *oci_runtime;      /* HostConfig.Runtime, e.g. "runsc" [NULL: the
	                               * runtime's default] */
	const char *egress_network;   /* bridge network for egress ["sbx-egress"] */
	const char *name_prefix;      /* container "<prefix><id>", volume
	                               * "<prefix><id>-work" ["sbx-"] */
	int stop_timeout_s;           /* seconds between SIGTERM and SIGKILL on stop [2] */
	int64_t request_timeout_ms;   /* bound on each non-streaming runtime call [60 s] */
};

/*
 * Creates an engine driver on base. Checks the configuration (required fields,
 * defaults not above ceilings, names short enough) but does not contact the
 * runtime: health() does. Returns the driver (free with sbx_driver_free) or
 * NULL with err set to bad_request naming the bad field, or internal when out
 * of memory. Source: Docker Engine API v1.41 (both Docker 20.10 and Podman
 * 4.3's compatible service).
 */
struct sbx_driver *sbx_engine_driver_new(struct event_base *base,
    const struct sbx_engine_config *cfg, struct sbx_err *err);

extern const struct sbx_driver_ops sbx_engine_driver_ops;

#endif
