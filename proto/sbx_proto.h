/* sbx_proto.h - the broker wire contract: paths, event types, error codes (proto/broker-api.md). */
#ifndef SBX_PROTO_H
#define SBX_PROTO_H

/* Version of the broker HTTP API; every path starts with SBX_API_PREFIX. */
#define SBX_PROTO_VERSION "1"
#define SBX_API_PREFIX "/v1"
/* Bytes a streaming bufferevent (exec I/O, the session link, WebSocket,
 * ports) reads or writes in one turn of the loop: libevent 2.1's default
 * is 16 KiB, a wakeup and a syscall per 16 KiB (adr/0050, amendment). */
#define SBX_BEV_IO_MAX (256 * 1024)

/* Paths of the broker API (SPEC §4). {id} is a sandbox id (sbx_id_valid). */
#define SBX_PATH_SANDBOXES "/v1/sandboxes"   /* GET list; /{id} PUT ensure, GET status, DELETE destroy */
#define SBX_PATH_EXEC_SUFFIX "/exec"        /* POST /v1/sandboxes/{id}/exec -> NDJSON */
#define SBX_PATH_SESSION_SUFFIX "/session"  /* POST, Upgrade sbx-session/1 -> agent frames (adr/0050) */
#define SBX_PATH_FILES_SUFFIX "/files"      /* GET read, PUT write; ?path=&mode= */
#define SBX_PATH_LIST_SUFFIX "/list"        /* GET ?path= */
#define SBX_PATH_STOP_SUFFIX "/stop"        /* POST */
#define SBX_PATH_SNAPSHOTS_SUFFIX "/snapshots" /* POST create, GET list, DELETE ?name= (adr/0068) */
#define SBX_PATH_COPY_SUFFIX "/copy"        /* POST {"from","snapshot"}: a new /work as a copy (adr/0068) */
#define SBX_PATH_SNAPSHOTS "/v1/snapshots"  /* GET ?owner=: every snapshot (adr/0068) */
#define SBX_PATH_HEALTH "/v1/health"
#define SBX_PATH_METRICS "/metrics"

/* Content types. */
#define SBX_CT_JSON "application/json"
#define SBX_CT_NDJSON "application/x-ndjson"
#define SBX_CT_OCTET "application/octet-stream"
#define SBX_CT_SSE "text/event-stream"

/* Exec event types (SPEC §5), the "type" member of each NDJSON line. */
#define SBX_EV_START "start"
#define SBX_EV_STDOUT "stdout"
#define SBX_EV_STDERR "stderr"
#define SBX_EV_EXIT "exit"
#define SBX_EV_ERROR "error"
#define SBX_EV_QUOTA "quota"   /* /work crossed work_quota (adr/0057) */

/* Request details (SPEC §4). Every route, /v1/health and /metrics included,
 * needs "Authorization: Bearer TOKEN"; the token has at least
 * SBX_TOKEN_MIN_LEN characters or the broker refuses to start (exit 78). */
#define SBX_HDR_AUTHORIZATION "Authorization"
#define SBX_AUTH_BEARER "Bearer "           /* scheme prefix, with its space */
#define SBX_TOKEN_MIN_LEN 16
#define SBX_EXIT_CONFIG 78                  /* EX_CONFIG: bad/missing token or config */
#define SBX_ID_MAX_LEN 63                   /* [a-z0-9][a-z0-9-]{0,62} */
#define SBX_QUERY_PATH "path"               /* ?path= of files and list */
#define SBX_QUERY_MODE "mode"               /* ?mode= of files PUT, octal, e.g. 0644 */
#define SBX_QUERY_CURSOR "cursor"           /* ?cursor= of list: "" or a page's cursor (adr/0013) */
#define SBX_QUERY_USAGE "usage"             /* ?usage=1 of status: add /work usage (adr/0017) */
#define SBX_WORK_DIR "/work"                /* the only tree file operations reach;
                                             * the one spelling of it (SPEC §4) */

/* Where the broker mounts sbx-helper in every sandbox (SPEC §6, adr/0009;
 * protocol in sbx_helper_proto.h). */
#define SBX_HELPER_DIR "/.sbx"               /* the read-only helper volume */
#define SBX_HELPER_PATH "/.sbx/sbx-helper"   /* the helper in it */

/* Shared limits of request bodies (proto/broker-api.md, exec). Both the
 * broker and the api decode exec bodies with sbx_wire_exec_decode, so these
 * are the one rule: argv 1..SBX_EXEC_ARGV_MAX strings, env at most
 * SBX_EXEC_ENV_MAX entries, a sandbox path at most SBX_PATH_MAX bytes, a segment
 * (an entry name; a list cursor names one) at most SBX_PATH_SEGMENT_MAX. */
#define SBX_EXEC_ARGV_MAX 4096
#define SBX_EXEC_ENV_MAX 1024
#define SBX_PATH_MAX 4096                   /* bytes of a sandbox path */
#define SBX_PATH_SEGMENT_MAX 255            /* bytes of one path segment / entry name */
/* Sessions (adr/0050): a terminal's columns and rows are 1..this each, a
 * TERM value 1..SBX_SESSION_TERM_MAX bytes of [A-Za-z0-9._+-]. */
#define SBX_SESSION_SIZE_MAX 10000
#define SBX_SESSION_TERM_MAX 64
#define SBX_SESSION_TERM_DEFAULT "xterm-256color"
/* The Upgrade token of the broker's session route (proto/broker-api.md). */
#define SBX_SESSION_UPGRADE "sbx-session/1"

/* SSE response headers the api sends on exec streams (SPEC §5). */
#define SBX_SSE_CACHE_CONTROL "no-cache"    /* Cache-Control */
#define SBX_SSE_ACCEL_BUFFERING "no"        /* X-Accel-Buffering (nginx) */

/* Members of exec events (SPEC §5, proto/broker-api.md). */
#define SBX_EVF_TYPE "type"
#define SBX_EVF_EXEC_ID "exec_id"
#define SBX_EVF_TS "ts"
#define SBX_EVF_DATA "data"
#define SBX_EVF_DATA_B64 "data_b64"
#define SBX_EVF_CODE "code"
#define SBX_EVF_SIGNAL "signal"
#define SBX_EVF_DURATION_MS "duration_ms"
#define SBX_EVF_TRUNCATED "truncated"
#define SBX_EVF_MESSAGE "message"
#define SBX_EVF_BYTES "bytes"
#define SBX_EVF_QUOTA "quota"

/* Message prefix of errors about a malformed exec event stream (code
 * bad_request): "protocol_error: line too long" etc. */
#define SBX_PROTOCOL_ERROR "protocol_error"

/* The WebSocket subprotocol of terminal attach (docs/api.md, adr/0052). */
#define SBX_WS_PROTOCOL "sbx.v1"

/* Error codes: {"error":{"code":...,"message":...}}. HTTP status in brackets. */
#define SBX_E_BAD_REQUEST "bad_request"             /* [400] malformed input */
#define SBX_E_INVALID_ID "invalid_id"               /* [400] id not [a-z0-9][a-z0-9-]{0,62} */
#define SBX_E_PATH_OUTSIDE_WORK "path_outside_work" /* [400] path rules of SPEC §4 */
#define SBX_E_UNKNOWN_FIELD "unknown_field"         /* [400] body has a field we do not accept */
#define SBX_E_WRONG_TYPE "wrong_type"               /* [400] body field has the wrong JSON type */
#define SBX_E_IMAGE_NOT_ALLOWED "image_not_allowed" /* [400] image outside the allowlist */
#define SBX_E_LIMIT_EXCEEDED "limit_exceeded"       /* [400] asked for more than the config allows */
#define SBX_E_UNAUTHORIZED "unauthorized"           /* [401] */
#define SBX_E_FORBIDDEN "forbidden"                 /* [403] */
#define SBX_E_NOT_FOUND "not_found"                 /* [404] sandbox, file or route absent */
#define SBX_E_METHOD_NOT_ALLOWED "method_not_allowed" /* [405] */
#define SBX_E_CONFLICT "conflict"                   /* [409] e.g. unlabelled container with our name */
#define SBX_E_NOT_RUNNING "not_running"             /* [409] sandbox stopped: ensure it first */
#define SBX_E_TOO_LARGE "too_large"                 /* [413] body or file over the cap */
#define SBX_E_URI_TOO_LONG "uri_too_long"           /* [414] request line longer than head_max */
#define SBX_E_HEAD_TOO_LARGE "head_too_large"       /* [431] over head_max bytes or headers_max fields */
#define SBX_E_REQUEST_TIMEOUT "request_timeout"     /* [408] head not complete within header_timeout */
#define SBX_E_RATE_LIMITED "rate_limited"           /* [429] */
#define SBX_E_TOO_MANY "too_many"                   /* [429] concurrent execs / sandboxes cap */
#define SBX_E_INTERNAL "internal"                   /* [500] */
#define SBX_E_RUNTIME "runtime_error"               /* [502] runtime answered with an error */
#define SBX_E_PORT_CLOSED "port_closed"             /* [502] nothing listens on a sandbox port (adr/0049) */
#define SBX_E_PAUSED "paused"                       /* [502] (api) an E2B sandbox is paused: connect first (adr/0059) */
#define SBX_E_RUNTIME_UNAVAILABLE "runtime_unavailable" /* [503] runtime socket unreachable */
#define SBX_E_SHUTTING_DOWN "shutting_down"         /* [503] draining after SIGTERM */
#define SBX_E_BROKER_UNAVAILABLE "broker_unavailable" /* [503] (api) broker unreachable */
#define SBX_E_STORAGE_FULL "storage_full"           /* [503] state dir's filesystem full (SQLITE_FULL) */
#define SBX_E_OVERLOADED "overloaded"               /* [503] max_connections open on the listener */
#define SBX_E_QUOTA "quota_exceeded"          /* [507] the write would take /work past work_quota (adr/0057) */
#define SBX_E_TIMEOUT "timeout"                     /* [504] exec or operation timed out */
#define SBX_E_CANCELLED "cancelled"                 /* [503] operation cancelled by its caller */
#define SBX_E_UNSUPPORTED "unsupported"             /* [501] the sandbox driver lacks an optional op (snapshots, adr/0068) */

/* Codes that never cross the wire (exit statuses of the daemons, the CLI). */
#define SBX_E_USAGE "usage"         /* bad command line: unknown flag, missing value */
#define SBX_E_CONFIG "config_error" /* bad config file or environment, bad value */
#define SBX_E_BAD_TOKEN "bad_token" /* token absent, too short, unreadable or unsafe file */

#endif
