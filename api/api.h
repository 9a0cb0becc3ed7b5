/* api.h - sandbox-api: its configuration and its public HTTP server (SPEC §8, §9). */
#ifndef API_H
#define API_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_config.h"
#include "sbx_driver.h"
#include "sbx_err.h"

struct event_base;

#define API_VERSION "0.1.0"

/* Exit codes of sandbox-api (docs/api.md). */
#define API_EXIT_OK 0
#define API_EXIT_INTERNAL 1
#define API_EXIT_USAGE 64   /* EX_USAGE: bad command line */
#define API_EXIT_CONFIG 78  /* EX_CONFIG: bad config, missing broker token, state dir */

/*
 * The api's configuration (keys: api_config_keys). Strings are owned
 * (sbx_config_free). Sizes in bytes, durations in milliseconds. Tests may
 * fill one by hand: api_config_defaults() gives the built-in defaults.
 */
struct api_config {
	char *listen;               /* "HOST:PORT"; port 0 picks one (api_server_port) */
	char *broker;               /* "unix:PATH" or "HOST:PORT" of sandbox-broker */
	char *broker_token_file;    /* NULL: env SBX_BROKER_TOKEN */
	char *state_dir;            /* api.db and api.key live here (created 0700) */
	char *user;                 /* started as root: drop to this user after binding */
	long long max_execs;        /* concurrent execs per principal; more: 429 */
	long long max_file_ops;     /* concurrent reads/writes/lists per principal; more: 429 */
	long long rate_per_minute;  /* requests per minute per principal; more: 429 */
	long long max_sandboxes_per_player; /* sandboxes a player's NPCs hold; more: 429 (operators exempt) */
	long long body_max;         /* largest JSON request body, bytes; more: 413 */
	long long file_size_max;    /* largest file written through PUT files, bytes */
	long long file_write_buffer; /* a streamed write's bytes held from the
	                              * client, and again queued towards the
	                              * broker, at most (adr/0030) */
	long long heartbeat;        /* ms between ": ping" comments on an idle SSE stream */
	long long broker_timeout;   /* ms to connect and get response headers from the broker */
	long long request_timeout;  /* ms a client may take to send a request (evhttp timeout) */
	long long shutdown_grace;   /* ms a drain waits for in-flight requests before cancelling them */
	long long header_timeout;   /* ms for a whole request head (sbx_gate.h) */
	long long head_max;         /* bytes of a request head */
	long long headers_max;      /* header fields of a request */
	long long max_connections;  /* client connections open at once */
	long long max_connections_keyless; /* of those, without a good key yet */
	long long connections_per_principal; /* of those, one principal's (0: max_connections/8) */
	long long streams_per_principal;   /* open streams (SSE viewers, terminals, ports) of one principal */
	long long keyless_header_timeout;  /* ms for a head while keyless */
	char *log_level;
	char *log_file;             /* NULL: stderr */
	/* Resource execs (docs/api.md "Execs as resources", ADR 0015). */
	long long exec_log_max;     /* bytes of one exec's event log on disk; older events dropped */
	long long exec_log_total;   /* bytes of all exec logs; the heaviest principal's oldest ended logs dropped */
	long long exec_log_per_principal; /* bytes of one principal's exec logs; its oldest ended logs dropped */
	long long exec_retention;   /* ms an ended exec's log is kept */
	long long exec_records_max; /* exec records kept (all NPCs); the heaviest principal's oldest ended ones removed */
	long long exec_records_per_principal; /* exec records kept per principal who started them */
	long long ticket_ttl;       /* ms a browser ticket is valid */
	long long sse_retry;        /* ms sent as SSE "retry:" to viewers */
	long long viewer_stall;     /* ms a viewer may stop reading before it is cut off */
	char **cors_origins;        /* allowed Origins for CORS; NULL or empty: CORS off */
	/* Terminals (docs/api.md "Terminals", adr/0051). */
	long long terminal_scrollback; /* bytes kept per terminal for a replay */
	long long terminal_idle;    /* ms without viewer and output before a terminal is killed */
	long long terminals_per_principal; /* running terminals per principal; more: 429 */
	long long terminal_input_max; /* bytes of one input POST, and of input queued per terminal */
	long long terminal_records_per_principal; /* ended terminals kept per principal */
	long long terminal_retention; /* ms an ended terminal is kept */
	/* The ports proxy (adr/0053). */
	long long port_connections_per_sandbox; /* open at once per sandbox; more: 429 */
	long long port_idle_timeout; /* ms without a byte either way: closed */
	long long port_body_max;    /* bytes of a request body read before forwarding */
	long long preview_ttl_max;  /* ms a preview link may live at most */
	char *preview_domain;       /* NULL: no preview Host; else TOKEN.<it> */
	/* The browser (api_browser.c, adr/0064). */
	long long browser_port;     /* sandbox-local CDP port, 1..65535 */
	long long browser_start_timeout; /* ms a start waits for the CDP port */
	/* WebSocket attach (common/sbx_ws.h, adr/0052). */
	long long ws_message_max;   /* bytes of one received message; more: close 1009 */
	long long ws_ping_interval; /* ms between the server's pings; 2 silent: closed */
	long long db_cache;         /* bytes of api.db's page cache at most (sbx_sqlite_cache) */
	long long ws_output_high;   /* bytes queued for a viewer above which its terminal output pauses */
	/* Watching a sandbox's browser (adr/0065). */
	long long browser_shot_max; /* bytes of a screenshot PNG the browser may send */
	long long browser_frame_max; /* bytes of one live-view JPEG frame; larger ones are dropped */
	long long browser_cdp_timeout; /* ms the browser has to answer (screenshot, view start) */
	long long browser_viewers_per_sandbox; /* live views open at once per sandbox; more: 429 */
	/* The E2B layer (docs/e2b.md, adr/0059). */
	char **e2b_templates;       /* "alias=image"; "alias=": the broker's default image */
	char *e2b_domain;           /* NULL: no {port}-{id}.<it> Host; else the SDK's domain */
	long long e2b_timeout_default; /* ms of a deadline when create/connect names none */
	long long e2b_timeout_max;  /* ms a deadline may lie ahead at most */
	long long e2b_metadata_max; /* bytes of a sandbox's metadata as compact JSON */
	long long e2b_envs_max;     /* bytes of its envVars as compact JSON */
	long long e2b_list_max;     /* sandboxes in one list page at most (the default limit) */
	long long e2b_reap_interval; /* ms between two looks at the deadlines */
	long long e2b_cpu_count;    /* cpuCount the control plane reports */
	long long e2b_memory_mb;    /* memoryMB it reports */
	long long e2b_disk_mb;      /* diskSizeMB it reports (and diskTotal of metrics) */
	/* The Connect protocol of envd (api_connect.h, adr/0060). */
	long long connect_message_max; /* bytes of one Connect request message; more: resource_exhausted */
	long long connect_stream_high; /* bytes queued for a Connect stream above which its producer pauses */
	/* E2B's filesystem service (docs/e2b.md, adr/0061). */
	long long e2b_fs_list_max;  /* entries one ListDir answers at most; more: resource_exhausted */
	long long e2b_watchers_per_sandbox; /* WatchDir streams and watchers open per sandbox */
	long long e2b_watcher_events_max;   /* events a watcher holds for GetWatcherEvents */
	long long e2b_watch_timeout; /* ms a watch lives at most (its helper's exec timeout) */
	long long e2b_files_parts_max; /* files in one multipart POST /files */
};

extern const struct sbx_config_key api_config_keys[];

/*
 * Fills cfg (zeroed first, nothing freed) with the built-in defaults of
 * api_config_keys. Returns 0, or -1 with err when out of memory. Free with
 * sbx_config_free(api_config_keys, cfg).
 */
int api_config_defaults(struct api_config *cfg, struct sbx_err *err);

/*
 * Checks what the table cannot: listen is HOST:PORT, broker is unix:/PATH or
 * HOST:PORT, state_dir absolute, limits above 0, log_level known. Returns 0
 * or -1 with err config_error naming the key.
 */
int api_config_check(const struct api_config *cfg, struct sbx_err *err);

/*
 * Fills defaults that depend on the environment: broker_token_file =
 * $CREDENTIALS_DIRECTORY/broker-token when it is unset (NULL or "") and that
 * systemd credential exists (sbx_cred.h; LoadCredential=broker-token in
 * deploy/systemd/sandbox-api.service, ADR 0011). A configured
 * broker_token_file always wins; without either, SBX_BROKER_TOKEN is used
 * as before. Returns 0, or -1 with err internal when out of memory.
 */
int api_config_finish(struct api_config *cfg, struct sbx_err *err);

/* ------------------------------------------------------------------ */
/* Server                                                              */

struct api_server;

/*
 * A sandbox-api HTTP server on base using driver (borrowed; must outlive
 * the server; any implementation of common/sbx_driver.h) and cfg (borrowed;
 * must outlive the server). Opens (creates) cfg->state_dir/api.db and
 * cfg->state_dir/api.key (0600, 32 random bytes, made on first use).
 * Binds cfg->listen at once (port 0: a free port, see api_server_port).
 * Returns the server, or NULL with err: config_error (state dir, database,
 * key file, listen address in use or invalid), internal (out of memory).
 */
struct api_server *api_server_new(struct event_base *base,
    const struct api_config *cfg, struct sbx_driver *driver,
    struct sbx_err *err);

/* Bound TCP port (host order). */
int api_server_port(const struct api_server *s);

/* Requests being answered, streams included. */
unsigned api_server_inflight(const struct api_server *s);

/*
 * Graceful stop (SIGTERM): stop accepting, answer new requests on open
 * connections 503 shutting_down, let in-flight requests (exec streams too)
 * finish for up to cfg->shutdown_grace ms. Then whatever still runs is
 * cancelled (its driver operation too, so the broker kills an exec): an
 * open exec stream gets a last SSE event `error` with code shutting_down,
 * a file read stream is cut, a request still waiting for the broker gets
 * 503 shutting_down. done(arg) is called once nothing is in flight (from
 * the loop, never synchronously). A second call does nothing.
 */
void api_server_drain(struct api_server *s, void (*done)(void *), void *arg);

/*
 * For tests: the clock that stamps "ts" of SSE start events (Unix ms).
 * NULL restores the wall clock. The driver vtable's start callback carries
 * no timestamp, so the api stamps it when the start arrives.
 */
void api_server_set_clock(struct api_server *s, int64_t (*now_ms)(void));

/* Frees s: closes the listener and database, cancels driver operations. NULL ok. */
void api_server_free(struct api_server *s);

#endif
