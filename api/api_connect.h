/* api_connect.h - the Connect protocol (connectrpc.com/docs/protocol) with the JSON codec, as E2B's SDK speaks it to envd over HTTP/1.1 (adr/0060): unary and server-streaming calls answered by the api's handlers (api_envd.c's method table). Everything runs on the api's event loop. */
#ifndef API_CONNECT_H
#define API_CONNECT_H

#include <stddef.h>

#include <jansson.h>

#include "sbx_err.h"

struct areq;

/* A method's kind (Connect protocol "Unary-Request", "Streaming-Request"). */
enum api_connect_kind { API_CONNECT_UNARY, API_CONNECT_SERVER_STREAM,
                        API_CONNECT_CLIENT_STREAM /* StreamInput, if HTTP/1.1 allows */ };
struct api_connect_call;   /* one RPC being answered; owned by api_connect.c */
/* A method's handler: msg is the decoded request message (borrowed, valid until the
 * handler returns; json_incref to keep). The handler answers exactly once (unary) or
 * sends 0..n messages then ends (server stream), now or later from a callback. */
typedef void (*api_connect_fn)(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_connect_reply(struct api_connect_call *c, json_t *msg /* stolen */);
/* code: a Connect code name ("not_found", "invalid_argument", "permission_denied",
 * "unauthenticated", "deadline_exceeded", "unavailable", "internal", "resource_exhausted",
 * "failed_precondition", "already_exists", "canceled", "unknown", "unimplemented");
 * message: one sentence (sbx's). Unary: HTTP status per the Connect spec + JSON body;
 * stream: the end-of-stream message carries it. */
void api_connect_error(struct api_connect_call *c, const char *code, const char *message);
/* Server stream: one message (stolen). 0 sent/queued, -1 the client is gone (the call
 * is then cancelled: the cancel hook has run or runs). Backpressure: */
int api_connect_send(struct api_connect_call *c, json_t *msg);
size_t api_connect_queued(const struct api_connect_call *c); /* bytes not yet written */
void api_connect_on_drain(struct api_connect_call *c, void (*fn)(void *), void *arg);
void api_connect_end(struct api_connect_call *c, const char *code /* NULL: ok */,
    const char *message);
/* Called once if the client goes away before the handler ended the call. */
void api_connect_on_cancel(struct api_connect_call *c, void (*fn)(void *), void *arg);

/* ---- added by api_connect.c's owner (the contract above is unchanged) ---- */

/*
 * Answers a (an envd request routed to a method of kind with handler fn):
 * checks the request per the Connect protocol (POST; unary: Content-Type
 * application/json, the body one JSON object; server stream: Content-Type
 * application/connect+json, the body one enveloped message, flags 0), then
 * calls fn once with the decoded message. A request that fails those checks
 * is answered here with the Connect error (invalid_argument, unimplemented
 * for a binary codec or a client stream, resource_exhausted for a body over
 * connect_message_max) and fn is not called. Always answers a exactly once,
 * now or later; returns 0 (the areq_run convention: a is then owned by the
 * call), or -1 with err internal (out of memory) and nothing sent.
 */
int api_connect_serve(struct areq *a, enum api_connect_kind kind, api_connect_fn fn,
    struct sbx_err *err);

/* The Connect code name of an sbx error code (sbx_err.h), e.g. not_found ->
 * "not_found", forbidden -> "permission_denied", too_many ->
 * "resource_exhausted"; an unknown one -> "internal". Never NULL. */
const char *api_connect_code_of(const struct sbx_err *err);

/* api_connect_error with err's code (api_connect_code_of) and message. */
void api_connect_fail(struct api_connect_call *c, const struct sbx_err *err);

/* The api drains (SIGTERM): every Connect stream still open ends now with
 * unavailable "The api is shutting down." (its handler's cancel hook runs
 * first); unary calls finish as usual within shutdown_grace. */
struct api_server;
void api_connect_drain(struct api_server *s);

/* The call's Connect-Timeout-Ms (ms; 0: the client set none). Where envd
 * takes a process's deadline from (its Start). */
int64_t api_connect_timeout_ms(const struct api_connect_call *c);

/* 1 while a server stream's client has more than connect_stream_high bytes
 * queued (the producer should wait for the drain hook). */
int api_connect_paused(const struct api_connect_call *c);

/* The HTTP status a unary error of Connect code code answers with (Connect
 * protocol "Error Codes": not_found 404, invalid_argument 400, ...; unknown
 * names 500). */
int api_connect_http_status(const char *code);

#endif
