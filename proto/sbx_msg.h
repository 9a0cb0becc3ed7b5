/* sbx_msg.h - the user-facing error sentences written once, by name, beside the codes of sbx_proto.h (adr/0041). */
#ifndef SBX_MSG_H
#define SBX_MSG_H

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
/* bad_request: an exec without a command. */
#define SBX_MSG_NO_ARGV "argv is required."

/* Configuration and start-up (config_error, internal; printed, not sent). */
#define SBX_MSG_STATE_DIR_RELATIVE "state_dir must be an absolute path."
/* %s the directory, %s strerror. */
#define SBX_MSG_STATE_DIR_CREATE "Cannot create state_dir %s: %s."
#define SBX_MSG_LOG_LEVEL "log_level must be debug, info, warn or error."
#define SBX_MSG_SODIUM "libsodium cannot initialise."

#endif
