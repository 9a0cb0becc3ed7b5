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
	int64_t file_timeout_ms;      /* read/write/list: longest time without
	                               * progress before timeout and kill [30 s] */
	const char *proxy_resolver;   /* egress proxy's DNS "IP[:PORT]", NULL: the
	                               * proxy container's resolv.conf (adr/0026) */
	int64_t proxy_memory;         /* egress proxy's memory limit [64 MiB] */
	const char *helper_path;      /* path of the static sbx-helper binary as
	                               * the broker sees it (required; read once
	                               * by sbx_engine_driver_new, never mounted) */
	const char *helper_volume;    /* stem of the helper volume's name
	                               * ["<name_prefix>helper"] */
	int64_t run_bytes;            /* /run/sbx tmpfs (the helper's exec
	                               * state) size [1 MiB] */
	const char *oci_runtime;      /* HostConfig.Runtime, e.g. "runsc" [NULL: the
	                               * runtime's default] */
	const char *egress_bridge_prefix; /* host interface names of the egress
	                               * networks: "<this><hex>", 15 bytes; 1-6 of
	                               * [a-z0-9], a letter first ["sbxe"] */
	const char *name_prefix;      /* container "<prefix><id>", volume
	                               * "<prefix><id>-work" ["sbx-"] */
	int stop_timeout_s;           /* seconds between SIGTERM and SIGKILL on stop [2] */
	int64_t request_timeout_ms;   /* bound on each non-streaming runtime call [60 s] */
	int64_t usage_timeout_ms;     /* status_usage: the helper's walk [5 s] */
	int64_t usage_max_entries;    /* status_usage: entries walked at most [200000] */
	/* The sandbox agent (adr/0025): each sandbox's helper invocations go
	 * as streams over one long-lived `sbx-helper agent` exec. */
	int agent_off;                /* 1: one runtime exec per invocation
	                               * instead (protocol 2 only) [0: agent] */
	int64_t agent_idle_ms;        /* the agent exits after this long without
	                               * a frame from the broker [60 s] */
	int64_t agent_ping_ms;        /* the broker pings each channel this often;
	                               * unanswered for twice that, or no HELLO
	                               * within three times that: closed [5 s] */
	int64_t agent_fresh_ms;       /* warm ensure answered from the live
	                               * channel when the agent was heard from
	                               * within this [15 s]; -1: always inspect */
	int agent_runtime_only;       /* 1: the agent's channel is always its
	                               * runtime exec stream; 0: the direct
	                               * socket where reachable (adr/0066) [0] */
	int warm_pool;                /* sandboxes of the default image kept
	                               * started and owned by no one, claimed by
	                               * an ensure of a new id (adr/0067) [0] */
};

/*
 * What the engine driver does for each operation (SPEC §4, §6; Engine API
 * v1.41, the same requests on Docker 20.10 and Podman 4.3):
 *
 * Names and labels. Container "<prefix><id>", volume "<prefix><id>-work",
 * both labelled io.sbx.managed=true, io.sbx.id=<id> (the container also
 * io.sbx.egress=0|1 and io.sbx.image=<image>). A sandbox granted egress
 * has a bridge network of its own, "<prefix><id>-egress", labelled
 * io.sbx.managed=true, io.sbx.id=<id>, on the host interface
 * "<egress_bridge_prefix><hex>" (ADR 0014). Anything with our name but
 * without our labels is never touched: conflict.
 *
 * ensure: checks image (allowlist: image_not_allowed) and limits (above a
 * ceiling: limit_exceeded) before any runtime call, then inspects: running
 * with the same egress, image and helper volume (label io.sbx.helper) -> its
 * status (one inspect); stopped -> start; different egress, image or helper,
 * or an egress sandbox not on its own network (made before ADR 0014) ->
 * remove the container (never the volume) and create again, removing its
 * egress network when egress was revoked; absent ->
 * create again. Creating: the helper volume first, once per driver
 * (adr/0009: "<helper_volume>-<sha256 prefix>", filled through a
 * never-started container and the archive API unless it already holds the
 * helper's bytes; ensures wait for it; old helper volumes of the stem are
 * removed in the background when unused), the volume (Podman: owned by the
 * user through the volume option o=uid=,gid=; idempotent), on Docker when
 * the container was absent (or made before adr/0009) an init container
 * "<prefix><id>.init" of the same image running `sbx-helper initwork
 * UID:GID` as root with CAP_CHOWN and CAP_FOWNER only (its exit status
 * checked, then removed), the sandbox's egress network if needed, the container,
 * start. The container: User, Init, CapDrop ALL, no-new-privileges,
 * read-only root, /tmp (mode 1777) and /run/sbx (0700, the helper's exec
 * state) tmpfs noexec,nosuid,nodev owned by the user, Memory = MemorySwap,
 * NanoCpus, PidsLimit, the volume at /work (NoCopy on Docker: the init
 * container's create made the copy-up), the helper volume read-only at
 * /.sbx, NetworkMode "none" (loopback only) or the egress network, optional
 * Runtime, `/.sbx/sbx-helper idle` as entrypoint (no shell needed),
 * StopTimeout.
 * Limits apply when the container is created: a running sandbox is not
 * replaced because an ensure asks for other limits. A create that lost a race
 * with another ensure (Docker 409, Podman 500 "already in use") starts over
 * from the inspect, up to 5 times with a growing 20 ms pause.
 *
 * status: inspect; 404 -> absent; stop_reason "oom" (State.OOMKilled) or
 * "exited" for a stopped one (the broker overrides with its own reasons).
 *
 * status_usage (adr/0017): the same inspect; running -> an exec of
 * `sbx-helper du --id EXEC_ID --max usage_max_entries --timeout-ms
 * usage_timeout` as the sandbox user, its one JSON line read strictly
 * (proto/sbx_usage.h) into st->usage; stopped or absent -> the plain status,
 * usage.present 0. Timer usage_timeout + 2 s (then the helper is killed by
 * its handle, timeout); a helper failure is its exit status's code.
 *
 * exec: inspect (not_found, not_running, conflict), then an Engine API exec of
 * `sbx-helper exec --framed --id EXEC_ID --timeout-ms T+2000 --cwd CWD --
 * argv` as the sandbox user, started hijacked (Upgrade: tcp) and
 * demultiplexed twice: the runtime's 8-byte frames, then inside its stdout
 * the helper's frames (sbx_helper_proto.h; split anywhere, checked strictly:
 * type, version, zero bytes, length within the type's bound, nothing after
 * the exit record; anything else ends the exec with runtime_error and kills
 * it). stdout/stderr reach sink->output in the order the helper read them
 * (one pipe each, stdout first when both are ready), pieces of at most
 * 64 KiB; the runtime's stderr holds only the helper's own words and is
 * kept, not delivered. sink->start gets EXEC_ID (random, ours, the helper's
 * kill handle) once the runtime has started the exec. stdin, when given, is
 * written then half-closed. At EOF the exit code and signal come from the
 * helper's exit record (signal = the name of signal n, "KILL", "TERM"; an
 * `exit 137` stays code 137 without a signal); only a stream without one
 * (the helper was killed) asks GET /exec/{id}/json, where 128+n is read as
 * signal n. Timeout (the driver's timer is authoritative):
 * `sbx-helper kill EXEC_ID` as a second exec, the stream closed, then
 * sink->error timeout once the kill has run; an exit record saying the
 * helper's own backstop fired is reported as timeout too. Output cap: output
 * stops at exactly the cap, the kill runs, the stream is drained to its end
 * and sink->exit has truncated=1 (code 137, signal "KILL"). Cancel: kill,
 * close, no callback. A helper that refused to start the command (error
 * record and status 125: cwd outside /work, id in use) ends in sink->error
 * with its code (path_outside_work, not_found, bad_request, forbidden,
 * cancelled; others as runtime_error); a command not found or not
 * executable (126/127) exits with that status after "sbx-helper: REASON" on
 * stderr.
 *
 * read / write / list: execs of `sbx-helper read PATH --max N`,
 * `write PATH MODE --max N` (body as stdin) and `list PATH` as the sandbox
 * user; errors come from the helper's exit status (sbx_helper_proto.h) as
 * bad_request, path_outside_work, not_found, too_large, forbidden. read does
 * not call sink->start; it has no timeout (a paused reader may take its
 * time); write and list use the exec timeout ceiling. list gives exact names
 * (the helper's name_b64 decoded back to bytes).
 *
 * stop: inspect, POST stop?t=stop_timeout_s; absent -> not_found; already
 * stopped -> ok. destroy: remove the container (force), then the volume,
 * then its egress network if sbx made it; absent -> ok. The helper volume is
 * shared and stays. reconcile: removes labelled "<prefix><id>-egress"
 * networks whose id has no labelled egress container (running or stopped)
 * and the pre-0014 "<prefix>egress". list_sandboxes: GET /containers/json?all=1 filtered by
 * io.sbx.managed=true (and checked again). health: /_ping, /version (runtime
 * name and version, ApiVersion >= 1.41), default image present, helper file
 * read at creation; any failure gives ok=0, status "degraded" and the
 * reason (the callback's err stays NULL).
 *
 * Errors: a runtime that cannot be reached -> runtime_unavailable; a runtime
 * 4xx/5xx we do not map -> runtime_error with the runtime's own message;
 * every non-streaming call is bounded by request_timeout_ms (-> timeout).
 * Pause/resume apply to exec and read: reading from the runtime stops, so a
 * slow consumer holds at most one socket read.
 */

/*
 * Creates an engine driver on base. Checks the configuration (required fields,
 * defaults not above ceilings, names short enough) and reads the helper file
 * once (an unreadable one is not an error here: health says why and ensures
 * that must create a container fail with that sentence), but does not
 * contact the runtime: health() does. Returns the driver (free with sbx_driver_free) or
 * NULL with err set to bad_request naming the bad field, or internal when out
 * of memory. Source: Docker Engine API v1.41 (both Docker 20.10 and Podman
 * 4.3's compatible service).
 */
struct sbx_driver *sbx_engine_driver_new(struct event_base *base,
    const struct sbx_engine_config *cfg, struct sbx_err *err);

/*
 * Parses one line (len bytes, no '\n') of `sbx-helper list` output
 * (sbx_helper_proto.h): an entry into *d (name decoded from "name_b64" when
 * present), or the end line {"end":true,"truncated":B} into *truncated.
 * The line is untrusted: at most 4096 bytes, one JSON object. Returns 1 for
 * an entry, 0 for an entry without a usable name (empty, NUL, '/', too
 * long: to be left out), 2 for the end line, -1 for anything else. Pure (no
 * driver, no I/O): the fuzz target of the list parser.
 */
int sbx_helper_list_line(const char *line, size_t len, struct sbx_dirent *d,
    int *truncated);

/*
 * The name of sandbox id's work volume under name_prefix (the
 * sbx_engine_config field): "<name_prefix><id>-work", the one place this
 * name is built (see "Names and labels" above). Writes it NUL-terminated
 * into buf (size bytes, truncated to fit; 192 hold any valid prefix and
 * id) and returns buf. Pure: callers that record or show the volume (the
 * broker's state rows, its reaper) ask here instead of spelling it.
 */
char *sbx_engine_volume_name(const char *name_prefix, const char *id,
    char *buf, size_t size);

/*
 * The paths of an image the runtime mounts on (adr/0045): /.sbx, /work,
 * /tmp, /run, /run/sbx and /run/sbx-egress, a parent before its child;
 * NULL-terminated. The runtime follows a symbolic link at a mount target
 * inside the image, so each must be a directory or absent.
 */
extern const char *const sbx_engine_mount_paths[];

/*
 * The verdict on one mount path (sbx_engine_mount_paths) of image: stat is
 * the runtime's X-Docker-Container-Path-Stat header of an archive HEAD on
 * a created, never started container of the image with no mount (base64
 * of the JSON {"name","size","mode","mtime","linkTarget"}, mode a Go
 * os.FileMode; Docker and Podman alike), or NULL when that HEAD answered
 * 404 (absent). Returns 0 when the runtime may mount there (a directory,
 * or absent; an absent path is created), -1 with err set to
 * image_not_allowed and one sentence naming the image, the path, what it
 * is and the fix (a symbolic link, a file, or anything but a directory;
 * a header that cannot be read). Pure; both ensure and --check use it.
 */
int sbx_engine_mount_path_judge(const char *image, const char *path,
    const char *stat, struct sbx_err *err);

extern const struct sbx_driver_ops sbx_engine_driver_ops;

/* Agents whose channel is up now. */
size_t sbx_engine_agents_live(const struct sbx_driver *d);

/*
 * For a broker that is stopping (d: the engine driver): closes every agent
 * channel that carries no stream and is not being started, so its socket
 * and keepalive timer leave the event loop (the agent inside the sandbox
 * sees the end and exits, as at sbx_driver_free). Returns how many agents
 * are still busy (a stream, e.g. a cancelled exec's kill, or a start on the
 * way); call again once the loop has run. No error.
 */
size_t sbx_engine_agents_close_idle(struct sbx_driver *d);

#endif
