/* api_config.c - every configuration key of sandbox-api and the checks the table cannot make (SPEC §9). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "sbx_cred.h"
#include "sbx_log.h"
#include "sbx_proto.h"

#define K(name, type, field, def, help) \
	{ name, type, offsetof(struct api_config, field), def, 0, help }

const struct sbx_config_key api_config_keys[] = {
	K("listen", SBX_CFG_STRING, listen, "127.0.0.1:8080",
	    "where to serve the public API: HOST:PORT"),
	K("broker", SBX_CFG_STRING, broker, "unix:/run/sbx/broker.sock",
	    "sandbox-broker address: unix:PATH or HOST:PORT"),
	K("broker_token_file", SBX_CFG_STRING, broker_token_file, NULL,
	    "file (mode 0600) holding the broker's bearer token (default: systemd "
	    "credential $CREDENTIALS_DIRECTORY/broker-token if present); else env SBX_BROKER_TOKEN"),
	K("state_dir", SBX_CFG_STRING, state_dir, "/var/lib/sbx-api",
	    "directory of api.db and api.key (created 0700)"),
	K("user", SBX_CFG_STRING, user, NULL,
	    "when started as root: user to switch to after binding and opening files; the state dir and everything in it is given to that user first"),
	K("max_execs_per_principal", SBX_CFG_INT, max_execs, "4",
	    "concurrent execs per principal; more: 429 too_many"),
	K("max_file_ops_per_principal", SBX_CFG_INT, max_file_ops, "8",
	    "concurrent file reads, writes and lists per principal; more: 429 too_many"),
	K("requests_per_minute", SBX_CFG_INT, rate_per_minute, "600",
	    "requests per minute per principal; more: 429 rate_limited"),
	K("max_sandboxes_per_player", SBX_CFG_INT, max_sandboxes_per_player, "10",
	    "sandboxes the NPCs of one player may hold (ensured, not yet destroyed); "
	    "a player's ensure of one more: 429 too_many; operators are exempt"),
	K("body_max", SBX_CFG_BYTES, body_max, "1m",
	    "largest JSON request body (exec stdin included); more: 413"),
	K("file_size_max", SBX_CFG_BYTES, file_size_max, "64m",
	    "largest file written with PUT .../files (streamed to the broker); more: 413"),
	K("file_write_buffer", SBX_CFG_BYTES, file_write_buffer, "256k",
	    "bytes of a file write's body held from the client, and again queued "
	    "towards the broker, at most; beyond, the client is not read"),
	SBX_CONFIG_HTTP_ROWS(K),
	K("max_connections_keyless", SBX_CFG_INT, max_connections_keyless, "64",
	    "of max_connections, those without a valid key yet; beyond, the oldest "
	    "idle one is closed with 503 overloaded (keyed clients keep the rest)"),
	K("connections_per_principal", SBX_CFG_INT, connections_per_principal,
	    "0", "of max_connections, those one principal's requests may hold "
	    "(0: max_connections/8); beyond, 429 too_many and the connection "
	    "closes (adr/0056)"),
	K("streams_per_principal", SBX_CFG_INT, streams_per_principal, "64",
	    "streams one principal may hold open at once (SSE viewers of execs, "
	    "terminals, port connections); beyond, 429 too_many (adr/0056)"),
	K("keyless_header_timeout", SBX_CFG_DURATION_MS, keyless_header_timeout,
	    "5s", "header_timeout of a connection without a valid key yet"),
	K("heartbeat", SBX_CFG_DURATION_MS, heartbeat, "15s",
	    "SSE: send a \": ping\" comment after this long without an event"),
	K("broker_timeout", SBX_CFG_DURATION_MS, broker_timeout, "30s",
	    "time to connect to the broker and get its response headers"),
	K("request_timeout", SBX_CFG_DURATION_MS, request_timeout, "60s",
	    "time a client may take to send its request"),
	K("shutdown_grace", SBX_CFG_DURATION_MS, shutdown_grace, "10s",
	    "SIGTERM: how long open requests and exec streams may run on before they are cancelled"),
	SBX_CONFIG_LOG_ROWS(K),
	K("exec_log_max", SBX_CFG_BYTES, exec_log_max, "64m",
	    "resource execs: bytes of one exec's event log on disk; beyond, its oldest events are dropped"),
	K("exec_log_total", SBX_CFG_BYTES, exec_log_total, "1g",
	    "resource execs: bytes of all event logs on disk; beyond, the logs of the "
	    "oldest ended execs of the principal with the most log bytes are dropped"),
	K("exec_log_per_principal", SBX_CFG_BYTES, exec_log_per_principal, "256m",
	    "resource execs: bytes of the event logs of the execs one principal started; "
	    "beyond, that principal's oldest ended execs' logs are dropped"),
	K("exec_retention", SBX_CFG_DURATION_MS, exec_retention, "24h",
	    "resource execs: how long an ended exec's event log is kept (its record stays)"),
	K("exec_records_max", SBX_CFG_INT, exec_records_max, "1000",
	    "resource execs: records kept; beyond, the oldest ended execs of the "
	    "principal with the most records are forgotten"),
	K("exec_records_per_principal", SBX_CFG_INT, exec_records_per_principal, "200",
	    "resource execs: records of the execs one principal started; beyond, "
	    "that principal's oldest ended execs are forgotten"),
	K("ticket_ttl", SBX_CFG_DURATION_MS, ticket_ttl, "5m",
	    "how long a browser ticket (POST .../execs/ID/ticket) is valid"),
	K("sse_retry", SBX_CFG_DURATION_MS, sse_retry, "2s",
	    "SSE retry: field sent to resource exec viewers (EventSource reconnect delay)"),
	K("viewer_stall", SBX_CFG_DURATION_MS, viewer_stall, "60s",
	    "a viewer of a resource exec that reads nothing this long while events wait is cut off (it can resume)"),
	K("terminal_scrollback", SBX_CFG_BYTES, terminal_scrollback, "1m",
	    "bytes of a terminal's output kept in memory for a replay (and about twice that on disk)"),
	K("terminal_idle", SBX_CFG_DURATION_MS, terminal_idle, "30m",
	    "a terminal without a viewer and without output this long is killed (state ended, reason idle)"),
	K("terminals_per_principal", SBX_CFG_INT, terminals_per_principal, "16",
	    "terminals one principal may have running; more: 429"),
	K("terminal_input_max", SBX_CFG_BYTES, terminal_input_max, "64k",
	    "largest POST .../terminals/ID/input body, and the input a terminal queues towards the broker"),
	K("terminal_records_per_principal", SBX_CFG_INT, terminal_records_per_principal, "32",
	    "ended terminals (and their scrollback logs) kept per principal; the oldest go first"),
	K("terminal_retention", SBX_CFG_DURATION_MS, terminal_retention, "24h",
	    "how long an ended terminal and its scrollback are kept"),
	/* The ports proxy (docs/api.md "Ports", adr/0053). */
	K("port_connections_per_sandbox", SBX_CFG_INT, port_connections_per_sandbox,
	    "32", "ports proxy: connections open at once to one sandbox's ports; "
	    "more: 429 too_many with Retry-After"),
	K("port_idle_timeout", SBX_CFG_DURATION_MS, port_idle_timeout, "5m",
	    "ports proxy: a connection with no byte either way this long is closed"),
	K("port_body_max", SBX_CFG_BYTES, port_body_max, "16m",
	    "ports proxy: largest request body read before it is forwarded; more: 413"),
	K("preview_ttl_max", SBX_CFG_DURATION_MS, preview_ttl_max, "24h",
	    "ports proxy: longest a preview link may live (its default is 1h)"),
	K("preview_domain", SBX_CFG_STRING, preview_domain, NULL,
	    "ports proxy: with it (e.g. preview.example.com) a request for "
	    "TOKEN.preview.example.com is that preview on its own origin; "
	    "unset: previews only at /p/TOKEN/"),
	/* The browser (api_browser.c, adr/0064). */
	K("browser_port", SBX_CFG_INT, browser_port, "9222",
	    "browser: the sandbox-local port Chromium's DevTools (CDP) server listens on (1..65535)"),
	K("browser_start_timeout", SBX_CFG_DURATION_MS, browser_start_timeout, "30s",
	    "browser: how long POST .../sandbox/browser waits for Chromium's DevTools port (1s..5m)"),
	K("cors_origins", SBX_CFG_STRLIST, cors_origins, NULL,
	    "Origins allowed to call the API from a browser (CORS); empty: CORS off"),
	/* The Connect protocol of envd (api_connect.h, adr/0060). */
	K("connect_message_max", SBX_CFG_BYTES, connect_message_max, "1m",
	    "largest Connect request message (an envd call's body); more: resource_exhausted (413)"),
	K("connect_stream_high", SBX_CFG_BYTES, connect_stream_high, "256k",
	    "bytes queued for one Connect stream's client above which its producer pauses"),
	K("ws_message_max", SBX_CFG_BYTES, ws_message_max, "1m",
	    "WebSocket attach: bytes of one message a client sends; more: close 1009"),
	K("ws_ping_interval", SBX_CFG_DURATION_MS, ws_ping_interval, "30s",
	    "WebSocket attach: the server pings this often; a client silent for two is closed"),
	K("db_cache", SBX_CFG_BYTES, db_cache, "256k",
	    "bytes of api.db's page cache at most (SQLite cache_size)"),
	K("ws_output_high", SBX_CFG_BYTES, ws_output_high, "1m",
	    "WebSocket attach: bytes queued for a viewer above which its terminal's output waits"),
	/* Watching a sandbox's browser (docs/api.md "Browser view", adr/0065). */
	K("browser_shot_max", SBX_CFG_BYTES, browser_shot_max, "8m",
	    "browser view: bytes of the PNG a screenshot may be; larger: 502"),
	K("browser_frame_max", SBX_CFG_BYTES, browser_frame_max, "1m",
	    "browser view: bytes of one live-view JPEG frame; larger frames are dropped"),
	K("browser_cdp_timeout", SBX_CFG_DURATION_MS, browser_cdp_timeout, "15s",
	    "browser view: how long the browser has to answer a screenshot or start a live view; then 504"),
	K("browser_viewers_per_sandbox", SBX_CFG_INT, browser_viewers_per_sandbox, "4",
	    "browser view: live views open at once on one sandbox's browser; more: 429"),
	/* The E2B layer (docs/e2b.md, adr/0059). */
	K("e2b_templates", SBX_CFG_STRLIST, e2b_templates, "base=",
	    "E2B: the templateIDs create accepts, as alias=image (alias=: the "
	    "broker's default image); any other templateID: 400"),
	K("e2b_domain", SBX_CFG_STRING, e2b_domain, NULL,
	    "E2B: with it (e.g. e2b.example.com) a request for "
	    "{port}-{sandboxID}.e2b.example.com is that sandbox's envd (port "
	    "49983) or port, and the control plane answers it as the sandbox's "
	    "domain; unset: envd only at <api>/e2b/envd"),
	K("e2b_timeout_default", SBX_CFG_DURATION_MS, e2b_timeout_default, "300s",
	    "E2B: a sandbox's deadline when create or connect names no timeout"),
	K("e2b_timeout_max", SBX_CFG_DURATION_MS, e2b_timeout_max, "24h",
	    "E2B: the furthest a deadline may lie ahead; a longer timeout: 400"),
	K("e2b_metadata_max", SBX_CFG_BYTES, e2b_metadata_max, "4k",
	    "E2B: bytes of one sandbox's metadata (compact JSON); more: 400"),
	K("e2b_envs_max", SBX_CFG_BYTES, e2b_envs_max, "16k",
	    "E2B: bytes of one sandbox's envVars (compact JSON); more: 400"),
	K("e2b_list_max", SBX_CFG_INT, e2b_list_max, "100",
	    "E2B: sandboxes in one GET /v2/sandboxes page at most, and its "
	    "default limit; a larger limit: 400"),
	K("e2b_reap_interval", SBX_CFG_DURATION_MS, e2b_reap_interval, "1s",
	    "E2B: how often the api looks for sandboxes past their deadline "
	    "(killed, or paused with autoPause)"),
	K("e2b_cpu_count", SBX_CFG_INT, e2b_cpu_count, "1",
	    "E2B: cpuCount the control plane reports (set it to the broker's cpu limit)"),
	K("e2b_memory_mb", SBX_CFG_INT, e2b_memory_mb, "512",
	    "E2B: memoryMB the control plane reports (set it to the broker's memory limit)"),
	K("e2b_disk_mb", SBX_CFG_INT, e2b_disk_mb, "1024",
	    "E2B: diskSizeMB the control plane reports, and diskTotal of metrics"),
	/* E2B's filesystem service (docs/e2b.md, adr/0061). */
	K("e2b_fs_list_max", SBX_CFG_INT, e2b_fs_list_max, "10000",
	    "E2B ListDir: entries one call answers at most (all depths); more: "
	    "resource_exhausted"),
	K("e2b_watchers_per_sandbox", SBX_CFG_INT, e2b_watchers_per_sandbox, "16",
	    "E2B WatchDir streams and CreateWatcher watchers open at once per "
	    "sandbox; more: resource_exhausted"),
	K("e2b_watcher_events_max", SBX_CFG_INT, e2b_watcher_events_max, "1000",
	    "E2B CreateWatcher: events held until GetWatcherEvents takes them; "
	    "beyond, the watcher reports resource_exhausted (events were lost)"),
	K("e2b_watch_timeout", SBX_CFG_DURATION_MS, e2b_watch_timeout, "10m",
	    "E2B WatchDir and watchers: longest life of one watch (its helper "
	    "runs as an exec; at most the broker's exec_timeout_max)"),
	K("e2b_files_parts_max", SBX_CFG_INT, e2b_files_parts_max, "64",
	    "E2B POST /files: files in one multipart upload; more: 400"),
	K("max_snapshots_per_player", SBX_CFG_INT, max_snapshots_per_player, "8",
	    "snapshots of /work the NPCs of one owner may keep (kept after their "
	    "sandbox is destroyed); one more: 429 too_many (adr/0068)"),
	K("snapshot_bytes_per_player", SBX_CFG_BYTES, snapshot_bytes_per_player,
	    "10g", "bytes those snapshots may take together (du of /work when "
	    "taken); one that would pass it: 507 quota_exceeded (adr/0068)"),
	{ NULL, 0, 0, NULL, 0, NULL },
};

int
api_config_defaults(struct api_config *cfg, struct sbx_err *err)
{
	const struct sbx_config_key *k;

	memset(cfg, 0, sizeof(*cfg));
	for (k = api_config_keys; k->name != NULL; k++)
		if (k->def != NULL &&
		    sbx_config_set(api_config_keys, cfg, k->name, k->def,
		    err) == -1)
			return -1;
	return 0;
}

static int
host_port(const char *s)
{
	const char *colon;
	char *end;
	long port;

	if (s == NULL || (colon = strrchr(s, ':')) == NULL || colon == s)
		return 0;
	port = strtol(colon + 1, &end, 10);
	return colon[1] != '\0' && *end == '\0' && port >= 0 && port <= 65535;
}

int
api_config_finish(struct api_config *cfg, struct sbx_err *err)
{
	if (sbx_credential_default(&cfg->broker_token_file,
	    SBX_CRED_BROKER_TOKEN) == -1)
		return sbx_err_oom(err);
	/* A reserve for everyone else: one principal holds an eighth. */
	if (cfg->connections_per_principal == 0)
		cfg->connections_per_principal = cfg->max_connections / 8 > 0 ?
		    cfg->max_connections / 8 : 1;
	return 0;
}

int
api_config_check(const struct api_config *cfg, struct sbx_err *err)
{
	if (!host_port(cfg->listen))
		return sbx_err_set(err, SBX_E_CONFIG,
		    "listen must be HOST:PORT, e.g. 127.0.0.1:8080.");
	if (cfg->broker == NULL || (strncmp(cfg->broker, "unix:", 5) == 0 ?
	    cfg->broker[5] != '/' : !host_port(cfg->broker)))
		return sbx_err_set(err, SBX_E_CONFIG,
		    "broker must be unix:/ABSOLUTE/PATH or HOST:PORT.");
	if (cfg->state_dir == NULL || cfg->state_dir[0] != '/')
		return sbx_err_set(err, SBX_E_CONFIG,
		    SBX_MSG_STATE_DIR_RELATIVE);
	if (cfg->max_execs <= 0 || cfg->max_file_ops <= 0 ||
	    cfg->rate_per_minute <= 0 ||
	    cfg->max_sandboxes_per_player <= 0 ||
	    cfg->body_max <= 0 || cfg->file_size_max <= 0 ||
	    cfg->file_write_buffer <= 0 ||
	    cfg->heartbeat <= 0 || cfg->broker_timeout <= 0 ||
	    cfg->request_timeout <= 0 || cfg->header_timeout <= 0 ||
	    cfg->head_max <= 0 || cfg->headers_max <= 0 ||
	    cfg->max_connections <= 0 || cfg->keyless_header_timeout <= 0 ||
	    cfg->max_connections_keyless <= 0 ||
	    cfg->max_connections_keyless > cfg->max_connections)
		return sbx_err_set(err, SBX_E_CONFIG, "max_execs_per_principal, "
		    "max_file_ops_per_principal, "
		    "requests_per_minute, max_sandboxes_per_player, body_max, "
		    "file_size_max, heartbeat, broker_timeout, request_timeout, "
		    "header_timeout, head_max, headers_max, max_connections, "
		    "max_connections_keyless and keyless_header_timeout must be "
		    "above 0, and max_connections_keyless at most "
		    "max_connections.");
	if (cfg->connections_per_principal < 0 ||
	    cfg->connections_per_principal > cfg->max_connections ||
	    cfg->streams_per_principal <= 0)
		return sbx_err_set(err, SBX_E_CONFIG, "connections_per_principal "
		    "must be 0 (max_connections/8) or 1..max_connections, and "
		    "streams_per_principal above 0.");
	if (cfg->exec_log_max < 1024 * 1024 ||
	    cfg->exec_log_total < cfg->exec_log_max ||
	    cfg->exec_log_per_principal < cfg->exec_log_max)
		return sbx_err_set(err, SBX_E_CONFIG, "exec_log_max must be at "
		    "least 1m (a logged event is up to about 90k), and "
		    "exec_log_total and exec_log_per_principal at least "
		    "exec_log_max.");
	if (cfg->exec_retention <= 0 || cfg->exec_records_max <= 0 ||
	    cfg->exec_records_per_principal <= 0 ||
	    cfg->ticket_ttl <= 0 || cfg->sse_retry <= 0 ||
	    cfg->viewer_stall <= 0)
		return sbx_err_set(err, SBX_E_CONFIG, "exec_retention, "
		    "exec_records_max, exec_records_per_principal, ticket_ttl, sse_retry and viewer_stall "
		    "must be above 0.");
	if (cfg->terminal_scrollback < 64 * 1024 ||
	    cfg->terminal_scrollback > 64LL * 1024 * 1024 ||
	    cfg->terminal_idle <= 0 || cfg->terminals_per_principal <= 0 ||
	    cfg->terminal_input_max < 1024 ||
	    cfg->terminal_input_max > cfg->terminal_scrollback ||
	    cfg->terminal_records_per_principal < 0 ||
	    cfg->terminal_retention <= 0)
		return sbx_err_set(err, SBX_E_CONFIG, "terminal_scrollback must "
		    "be 64k to 64m, terminal_input_max 1k to terminal_scrollback, "
		    "terminal_idle, terminals_per_principal and "
		    "terminal_retention above 0, terminal_records_per_principal "
		    "0 or more.");
	if (cfg->port_connections_per_sandbox <= 0 ||
	    cfg->port_idle_timeout <= 0 || cfg->port_body_max < 0 ||
	    cfg->preview_ttl_max < 1000)
		return sbx_err_set(err, SBX_E_CONFIG, "port_connections_per_sandbox "
		    "and port_idle_timeout must be above 0, port_body_max 0 or "
		    "more, preview_ttl_max at least 1s.");
	if (cfg->browser_port < 1 || cfg->browser_port > 65535 ||
	    cfg->browser_start_timeout < 1000 ||
	    cfg->browser_start_timeout > 300000)
		return sbx_err_set(err, SBX_E_CONFIG, "browser_port must be 1 to "
		    "65535 and browser_start_timeout 1s to 5m.");
	if (cfg->e2b_fs_list_max <= 0 || cfg->e2b_fs_list_max > 100000 ||
	    cfg->e2b_watchers_per_sandbox <= 0 ||
	    cfg->e2b_watcher_events_max <= 0 || cfg->e2b_watch_timeout <= 0 ||
	    cfg->e2b_files_parts_max <= 0)
		return sbx_err_set(err, SBX_E_CONFIG, "e2b_fs_list_max must be 1 to "
		    "100000, e2b_watchers_per_sandbox, e2b_watcher_events_max, "
		    "e2b_watch_timeout and e2b_files_parts_max above 0.");
	if (cfg->max_snapshots_per_player <= 0 ||
	    cfg->snapshot_bytes_per_player <= 0)
		return sbx_err_set(err, SBX_E_CONFIG, "max_snapshots_per_player "
		    "and snapshot_bytes_per_player must be above 0.");
	if (cfg->preview_domain != NULL && cfg->preview_domain[0] != '\0' &&
	    (strspn(cfg->preview_domain, "abcdefghijklmnopqrstuvwxyz"
	    "0123456789.-") != strlen(cfg->preview_domain) ||
	    cfg->preview_domain[0] == '.' || strchr(cfg->preview_domain, '.') ==
	    NULL))
		return sbx_err_set(err, SBX_E_CONFIG, "preview_domain must be a "
		    "lowercase DNS name with a dot, e.g. preview.example.com.");
	if (cfg->connect_message_max < 1024 || cfg->connect_stream_high < 65536)
		return sbx_err_set(err, SBX_E_CONFIG, "connect_message_max must "
		    "be at least 1k and connect_stream_high at least 64k.");
	if (cfg->ws_message_max < 1024 || cfg->ws_ping_interval < 1000 ||
	    cfg->ws_output_high < 65536)
		return sbx_err_set(err, SBX_E_CONFIG, "ws_message_max must be "
		    "at least 1k, ws_ping_interval at least 1s and "
		    "ws_output_high at least 64k.");
	if (cfg->browser_shot_max < 1024 || cfg->browser_shot_max > 268435456 ||
	    cfg->browser_frame_max < 1024 || cfg->browser_frame_max > 67108864 ||
	    cfg->browser_cdp_timeout < 100 ||
	    cfg->browser_viewers_per_sandbox <= 0)
		return sbx_err_set(err, SBX_E_CONFIG, "browser_shot_max must be "
		    "1k to 256m, browser_frame_max 1k to 64m, browser_cdp_timeout "
		    "at least 100ms, browser_viewers_per_sandbox above 0.");
	if (cfg->shutdown_grace < 0)
		return sbx_err_set(err, SBX_E_CONFIG,
		    "shutdown_grace must be 0 or more.");
	if (cfg->e2b_timeout_default < 1000 || cfg->e2b_timeout_max <
	    cfg->e2b_timeout_default || cfg->e2b_metadata_max < 2 ||
	    cfg->e2b_envs_max < 2 || cfg->e2b_list_max <= 0 ||
	    cfg->e2b_reap_interval < 100 || cfg->e2b_cpu_count <= 0 ||
	    cfg->e2b_memory_mb <= 0 || cfg->e2b_disk_mb <= 0)
		return sbx_err_set(err, SBX_E_CONFIG, "e2b_timeout_default must "
		    "be at least 1s and at most e2b_timeout_max, "
		    "e2b_metadata_max and e2b_envs_max at least 2, "
		    "e2b_reap_interval at least 100ms, e2b_list_max, "
		    "e2b_cpu_count, e2b_memory_mb and e2b_disk_mb above 0.");
	if (cfg->log_level != NULL && sbx_log_level_parse(cfg->log_level) < 0)
		return sbx_err_set(err, SBX_E_CONFIG,
		    SBX_MSG_LOG_LEVEL);
	return 0;
}
