/* sbx_types.h - the value types the driver vtable (sbx_driver.h) and the broker wire (sbx_wire.h) carry (SPEC §3, §4). */
#ifndef SBX_TYPES_H
#define SBX_TYPES_H

#include <stddef.h>
#include <stdint.h>

/*
 * Plain values, no behaviour: what a caller asks of a driver (spec, exec
 * request, list page) and what it answers (status, usage, dirent, exit,
 * health). They are the in-memory form of the broker API bodies of
 * proto/broker-api.md; proto/sbx_wire.h converts them to and from JSON.
 * Pointer members are borrowed (see each type); fixed arrays are owned by
 * the struct, so values can be copied with '='.
 */

enum sbx_state {
	SBX_STATE_ABSENT = 0,
	SBX_STATE_RUNNING,
	SBX_STATE_STOPPED,
};

/* "absent", "running", "stopped". */
const char *sbx_state_name(enum sbx_state st);

/*
 * What a caller asks for in ensure. Zero in a limit field means "the
 * configured default"; a value above the configured ceiling is refused with
 * limit_exceeded, never clamped silently (SPEC §4: callers may only lower).
 */
struct sbx_spec {
	const char *image;       /* NULL: the default image; must be allowlisted */
	int egress;              /* 1: egress network; 0: no route out (default) */
	int64_t memory_bytes;    /* memory (and memory+swap) limit, bytes */
	int64_t nano_cpus;       /* CPU quota in 1e-9 CPUs (Engine API NanoCpus) */
	int64_t pids;            /* pids limit */
	/* With egress: the allowlist, entries joined by '\n' (adr/0026);
	 * NULL or "*": full egress (ADR 0014). Checked by the caller with
	 * egress_allow_check (common/sbx_egress.h); borrowed for the call. */
	const char *egress_allow;
};

/*
 * How much a running sandbox's /work holds (status_usage, adr/0017),
 * counted inside the sandbox as its user without following symlinks or
 * crossing mounts. present 0: not counted (the sandbox is not running, or
 * the op was status); every other member is then 0.
 */
struct sbx_usage {
	int present;
	int64_t bytes;           /* allocated: st_blocks * 512, /work included */
	int64_t apparent_bytes;  /* st_size of the regular files */
	int64_t files;           /* regular files */
	int64_t dirs;
	int64_t entries;         /* entries of any type below /work */
	int64_t elapsed_ms;      /* how long the walk took */
	int partial;             /* 1: a bound was hit; the figures are lower bounds */
	char partial_reason[16]; /* "", "max_entries", "timeout", "unreadable" */
};

/*
 * The /work quota of a sandbox as the broker sees it (adr/0057), in a
 * status: present 0 when the broker has no work_quota (or the status did
 * not come through a broker). bytes: the quota; used: the broker's figure
 * of /work (its last walk's `bytes` plus what the api wrote since), -1
 * when it has not counted this sandbox yet; age_ms: how old the walk
 * under that figure is, -1 with used.
 */
struct sbx_quota {
	int present;
	int64_t bytes;
	int64_t used;
	int64_t age_ms;
};

/* What status() and list_sandboxes() report. Times in Unix milliseconds. */
struct sbx_status {
	char id[64];
	enum sbx_state state;
	char image[256];
	int egress;
	int64_t created_at_ms;    /* 0 when absent */
	int64_t last_used_at_ms;  /* 0 when unknown (filled by the broker) */
	char stop_reason[16];     /* "", "idle", "operator", "oom", "exited",
	                           * "lost" (driver = kubernetes: its node) */
	char container_id[72];    /* runtime's container id, "" when absent */
	struct sbx_usage usage;   /* filled by status_usage only */
	struct sbx_quota quota;   /* filled by the broker (adr/0057) */
};

/* One entry of list(). */
struct sbx_dirent {
	char name[256];
	const char *type;        /* "file", "dir", "symlink", "other" (static) */
	int64_t size;            /* bytes */
	uint32_t mode;           /* permission bits, e.g. 0644 */
	int64_t mtime;           /* Unix seconds */
};

/* Which page of a directory list() returns (adr/0013). */
struct sbx_list_page {
	const char *after;       /* NULL: from the first name; else only names
	                          * sorting after this one (bytewise) */
	size_t limit;            /* entries at most, >= 1 (the broker's
	                          * list_max_entries; a driver may have a lower
	                          * ceiling and then reports truncated) */
};

/* Exec request (SPEC §4). */
struct sbx_exec_req {
	const char *const *argv; /* NULL-terminated, argv[0] required */
	const char *cwd;         /* NULL: /work; else must pass sbx_path_check */
	const char *const *env;  /* NULL-terminated "K=V" list or NULL */
	const unsigned char *stdin_data; /* bytes fed to stdin then EOF; NULL: none */
	size_t stdin_len;
	int64_t timeout_ms;      /* 0: configured default; above ceiling: refused */
	int64_t output_cap;      /* bytes of stdout+stderr; 0: configured default */
};

/*
 * Sessions (adr/0050, proto/broker-api.md "Sessions"): an exec whose stdin
 * is streamed, a terminal, or one TCP connection to a port in the sandbox.
 * Opened with sbx_session_open (common/sbx_driver.h); input, resize and
 * signals go in while output comes out.
 */
enum sbx_session_kind { SBX_SESSION_EXEC = 1, SBX_SESSION_PTY = 2, SBX_SESSION_PORT = 3 };
/* A session: an exec whose stdin is streamed, a terminal, or one TCP connection to a port. */
struct sbx_session_req {
	enum sbx_session_kind kind;
	struct sbx_exec_req exec; /* EXEC, PTY: argv (PTY: NULL or empty = login shell), cwd, env,
	                           * timeout_ms (0: the configured default; PTY 0: no timeout),
	                           * output_cap (EXEC: as exec; PTY: 0 = no cap); stdin_data unused */
	int cols, rows;           /* PTY: 1..10000 each */
	const char *term;         /* PTY: NULL = "xterm-256color"; [A-Za-z0-9._+-]{1,64} */
	int port;                 /* PORT: 1..65535 */
};
/* A control message of a session: RESIZE (PTY only: cols, rows 1..10000)
 * or SIGNAL (signo 1..64: PTY the foreground process group, EXEC the
 * process group), or VIEWERS (viewers 1 while the caller has a viewer of
 * the session, 0 while none: the broker then counts the session as use of
 * the sandbox only while bytes move, adr/0051 amendment; a driver without
 * a reaper accepts and ignores it). */
enum sbx_session_ctl_kind { SBX_SESSION_RESIZE = 1, SBX_SESSION_SIGNAL = 2,
	SBX_SESSION_VIEWERS = 3 };
struct sbx_session_ctl { enum sbx_session_ctl_kind kind; int cols, rows; int signo;
	int viewers; };

/* How an exec ended. */
struct sbx_exit {
	int code;                /* exit status 0-255 */
	const char *signal;      /* NULL or signal name ("KILL") when killed by one */
	int64_t duration_ms;
	int truncated;           /* 1: output cap reached, exec was killed */
	/* adr/0057: work_quota > 0 when the exec's end found /work past the
	 * quota (crossed since the owner was last told): a "quota" event
	 * goes before the exit event. work_bytes: /work's bytes then. */
	int64_t work_bytes, work_quota;
};

struct sbx_health {
	int ok;                  /* 1: runtime reachable and helper ready */
	char status[16];         /* "ok" or "degraded" */
	char reason[256];        /* why degraded, "" when ok */
	char runtime[64];        /* e.g. "Docker Engine 20.10.24", "Podman Engine 4.3.1" */
	char api_version[16];    /* Engine API version in use, e.g. "1.41" */
};

#endif
