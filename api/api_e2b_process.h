/* api_e2b_process.h - E2B's process.Process service (envd's proto process/process.proto as the e2b SDK ships it) on sbx's terminals (api_term.h): the Connect handlers api_envd.c's table names (adr/0060, docs/e2b.md "Processes"). */
#ifndef API_E2B_PROCESS_H
#define API_E2B_PROCESS_H

#include <jansson.h>

#include "api_connect.h"

struct areq;
struct api_server;

/*
 * The methods (api_connect_fn: a->npc is the E2B sandbox's NPC, a->who its
 * owner; msg the request message in proto3 JSON). A process is a terminal
 * of that NPC (pty or pipes) with a pid and an optional tag; it outlives
 * the stream that started it and is found by pid or tag until it ends.
 *
 * Start (server stream): runs process.cmd with process.args (user "root"
 *   refused permission_denied; cwd mapped to /work: E2B's home; envs: the
 *   sandbox's envVars, then the request's; pty: a terminal of that size;
 *   stdin false or absent: stdin closed at once; Connect-Timeout-Ms: the
 *   process is killed at that deadline, as envd does). Sends
 *   {"event":{"start":{"pid"}}}, then {"event":{"data":{"stdout"|"stderr"|
 *   "pty": base64}}} as output comes, {"event":{"keepalive":{}}} after
 *   Keepalive-Ping-Interval seconds (default 90) without data, and
 *   {"event":{"end":{"exitCode","exited","status","error"}}}; the stream
 *   then ends ok. A stream the client cancels leaves the process running.
 * Connect (server stream): the same events of a running process (selector
 *   process.pid or process.tag; not_found otherwise), from now on.
 * List (unary): {"processes":[{"config":{cmd,args,envs,cwd},"pid","tag"}]}
 *   of the sandbox's running processes.
 * SendInput (unary): input.stdin or input.pty (base64) to the process;
 *   resource_exhausted past terminal_input_max queued.
 * SendSignal (unary): SIGNAL_SIGKILL (the process tree killed) or
 *   SIGNAL_SIGTERM; others unimplemented.
 * CloseStdin (unary): end of stdin (nothing for a pty).
 * Update (unary): pty.size resizes a pty process.
 * Every error is a Connect code with one sentence (api_connect_code_of).
 */
void api_e2b_proc_start(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_proc_connect(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_proc_list(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_proc_send_input(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_proc_send_signal(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_proc_close_stdin(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_proc_update(struct areq *a, struct api_connect_call *c, json_t *msg);

/* The server is freed: forgets every process record (their terminals are
 * api_terms_close's; streams were ended by api_req_abandon_all). */
void api_e2b_procs_close(struct api_server *s);

#endif
