/* sbx_msg.h - the user-facing error sentences written once, by name, beside the codes of sbx_proto.h (adr/0041). */
#ifndef SBX_MSG_H
#define SBX_MSG_H

#include <inttypes.h> /* PRId64 in rows that print an int64_t */

/*
 * Each row is one rule's sentence, a string literal so that a row with
 * conversions still goes through printf's format check where it is used
 * (sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_NPC, name)). The comment
 * names the code the sentence goes with and its conversions. A sentence
 * said in one place only may stay at that place; a sentence said in a
 * second place moves here first. Never a secret in a conversion (token,
 * key, body): ids, names, paths and sizes only.
 */

/* internal: memory ran out (sbx_err_oom). */
#define SBX_MSG_OOM "Out of memory."
/* internal: a failure with nothing more to say to the caller. */
#define SBX_MSG_INTERNAL "Internal error."
/* invalid_id: the sandbox id rule of SPEC §4 (sbx_id_valid, sbx_err_bad_id). */
#define SBX_MSG_BAD_ID "A sandbox id must match [a-z0-9][a-z0-9-]{0,62}."
/* not_found: %s the sandbox id. */
#define SBX_MSG_NO_SANDBOX "sandbox %s does not exist"
/* not_running: %s the sandbox id. */
#define SBX_MSG_NOT_RUNNING "sandbox %s is not running: ensure it first"
/* port_closed: %d the port (sbx-helper connect, adr/0049). */
#define SBX_MSG_PORT_CLOSED "nothing listens on port %d in the sandbox"
/* shutting_down: the broker drains after SIGTERM. */
#define SBX_MSG_BROKER_DRAINING "The broker is shutting down."
/* shutting_down: the api drains after SIGTERM. */
#define SBX_MSG_API_DRAINING "The api is shutting down."
/* too_large: %lld the cap in bytes (file_size_max). */
#define SBX_MSG_FILE_TOO_LARGE "The file is larger than %lld bytes."
/* not_found (api): %s the NPC name. */
#define SBX_MSG_NO_NPC "No NPC named %s."
/* bad_request (api): the NPC name rule. */
#define SBX_MSG_BAD_NPC_NAME "An NPC name must match [a-z0-9][a-z0-9-]{0,40}."
#define SBX_MSG_BAD_SNAPSHOT "A snapshot name must match [a-z0-9][a-z0-9-]{0,31}."
/* bad_request: an exec without a command. */
#define SBX_MSG_NO_ARGV "argv is required."
/* bad_request: a body that is valid JSON but no object. */
#define SBX_MSG_BODY_NOT_OBJECT "The body must be a JSON object."
/* bad_request: a list cursor that no listing gave out. */
#define SBX_MSG_BAD_CURSOR "Parameter \"cursor\" is not a cursor of a " \
    "listing (pass the \"cursor\" of the last page, or nothing to start)."
/* bad_request (api): a query string that does not decode. */
#define SBX_MSG_BAD_QUERY "Bad query string."
/* not_found (api): an exec id the NPC does not have. */
#define SBX_MSG_NO_EXEC "That NPC has no exec with that id."

/* The engine driver's exec and file errors. */
/* timeout: the exec's timeout in ms (PRId64). */
#define SBX_MSG_EXEC_TIMEOUT "exec ran longer than its timeout of %" PRId64 \
    " ms; its processes were killed"
/* timeout: the exec that kills an exec's processes did not end. */
#define SBX_MSG_KILL_UNFINISHED "kill exec did not finish"
/* runtime_error: the helper refused without saying why. */
#define SBX_MSG_HELPER_REFUSED "sbx-helper refused the exec"

/* Peers (sbx_http_client): %s the peer's name ("the broker"), %s its
 * address, %s the system's reason. */
#define SBX_MSG_NO_CONNECT "cannot connect to %s at %s: %s"
/* timeout: %s the peer's name. */
#define SBX_MSG_NO_ANSWER "%s did not answer in time"
/* bad_token: %d SBX_TOKEN_MAX_LEN. */
#define SBX_MSG_TOKEN_TOO_LONG "token is longer than %d bytes"

/* Configuration and start-up (config_error, internal; printed, not sent). */
#define SBX_MSG_STATE_DIR_RELATIVE "state_dir must be an absolute path."
/* %s the directory, %s strerror. */
#define SBX_MSG_STATE_DIR_CREATE "Cannot create state_dir %s: %s."
#define SBX_MSG_LOG_LEVEL "log_level must be debug, info, warn or error."
#define SBX_MSG_SODIUM "libsodium cannot initialise."
/* config_error: %s a user name. */
#define SBX_MSG_NO_USER "user %s does not exist."
/* config_error: %s a path, %s strerror or sqlite's message. */
#define SBX_MSG_CANNOT_CREATE "Cannot create %s: %s."
#define SBX_MSG_CANNOT_OPEN "Cannot open %s: %s."
#define SBX_MSG_CANNOT_SET_UP "Cannot set up %s: %s."

/* internal: a codec called without its state (a caller's bug). */
#define SBX_MSG_NO_PARSER "no parser"
#define SBX_MSG_NO_BUFFER "no buffer"

/* Egress rules and the proxy's request line (common/proxy_policy.c,
 * broker/proxy/): bad_request, or the proxy's 400 reason. */
#define SBX_MSG_BAD_IPV6 "bad IPv6 literal"
#define SBX_MSG_EMPTY_HOST "empty host name"
/* %d the longest host name in bytes. */
#define SBX_MSG_HOST_TOO_LONG "host name longer than %d bytes"
#define SBX_MSG_CIDR_ADDRESS "CIDR: bad address"
#define SBX_MSG_CIDR_PREFIX "CIDR: bad prefix length"
#define SBX_MSG_BAD_REQUEST_LINE "bad request line"

/* Sessions (adr/0050): %d SBX_SESSION_SIZE_MAX; %d SBX_SESSION_TERM_MAX. */
#define SBX_MSG_PTY_SIZE "A terminal's cols and rows must be 1 to %d."
#define SBX_MSG_PTY_TERM "A terminal's TERM must be 1 to %d of A-Z a-z 0-9 " \
    ". _ + -."
#define SBX_MSG_PORT_RANGE "A port must be 1 to 65535."

/* The CLI's reading of the api's answers (printed, exit 1). */
#define SBX_MSG_NOT_HTTP "The server's answer is not HTTP/1.x; is SBX_URL " \
    "the sandbox-api address?"
#define SBX_MSG_BAD_CHUNKED "Bad chunked framing from the server."
#define SBX_MSG_CUT_SHORT "The server closed the connection before the " \
    "answer was complete."

#endif
