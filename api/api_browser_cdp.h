/* api_browser_cdp.h - the api's Chrome DevTools Protocol client for a browser in a sandbox (adr/0065): one page target's WebSocket reached through two PORT sessions of the driver (GET /json/list, then the upgrade), and the pure checks of what the browser sends (every byte is untrusted). */
#ifndef API_BROWSER_CDP_H
#define API_BROWSER_CDP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sbx_err.h"

struct api_server;

/* ------------------------------------------------------------------ */
/* Pure parts (no I/O): unit-tested alone                              */

/* Bytes of the browser's answer to GET /json/list read at most (head and
 * body); more: the answer is refused. */
#define API_CDP_LIST_MAX ((size_t)256 * 1024)
/* Bytes of the browser's WebSocket handshake answer head at most. */
#define API_CDP_HEAD_MAX ((size_t)8192)
/* A target id: [A-Za-z0-9_-]{1,API_CDP_ID_MAX} (Chromium's are 32 hex). */
#define API_CDP_ID_MAX 64

/*
 * The head of an HTTP/1.1 answer in buf (len bytes, untrusted, need not
 * be NUL-terminated): when the empty line ending the head is within the
 * first max bytes, *status gets the status code (100..599), *head_len the
 * bytes of the head including the empty line, and *clen the
 * Content-Length (or -1: none); the header values the WebSocket check
 * needs go to upgrade/connection/accept (each cap bytes, "" when absent,
 * cut at cap-1; NULL: not wanted). Returns 1 (a head), 0 (not whole yet,
 * len < max), or -1 with err runtime_error and a sentence (no empty line
 * within max bytes, a bad status line, a Content-Length that is not a
 * decimal below 2^31).
 */
int api_cdp_http_head(const char *buf, size_t len, size_t max, int *status,
    size_t *head_len, long *clen, char *upgrade, char *connection,
    char *accept, size_t cap, struct sbx_err *err);

/*
 * The first target of type "page" in body (len bytes: the JSON array of
 * GET /json/list, untrusted): its "id", checked to be
 * [A-Za-z0-9_-]{1,API_CDP_ID_MAX}, into id (cap bytes, at least
 * API_CDP_ID_MAX + 1). Returns 0, or -1 with err: runtime_error (not a
 * JSON array, a page whose id is not so) or not_found ("the browser has no
 * page open").
 */
int api_cdp_pick_page(const char *body, size_t len, char *id, size_t cap,
    struct sbx_err *err);

/* Kinds of image the browser sends base64-encoded. */
enum api_cdp_image { API_CDP_PNG = 1, API_CDP_JPEG = 2 };

/*
 * Decodes b64 (n bytes of RFC 4648 base64 with padding, untrusted) into a
 * new buffer (*out, *outlen; free() it) and checks it is an image of kind:
 * PNG: the 8-byte signature and an IHDR chunk first whose width and
 * height (*w, *h) are 1..32767 (RFC 2083 §3.1, §4.1.1); JPEG: starts with
 * SOI (FF D8 FF) and (*w, *h) from its first SOF0..SOF15 marker (except
 * DHT/JPG/DAC), 0 when none is found within the data. Returns 0, or -1
 * with err: too_large (the decoded size would exceed max bytes; nothing
 * is decoded), runtime_error (not base64, not that image kind, a bad
 * size), internal (out of memory).
 */
int api_cdp_image_decode(const char *b64, size_t n, size_t max,
    enum api_cdp_image kind, unsigned char **out, size_t *outlen,
    unsigned *w, unsigned *h, struct sbx_err *err);

/* ------------------------------------------------------------------ */
/* The client                                                          */

/*
 * What a connection tells its owner (on the loop; each may be NULL):
 *   ready(arg): the page's WebSocket is open: api_cdp_send may be called.
 *   message(arg, m): one message from the browser, a JSON object (a
 *     command's answer with "id", or an event with "method"), borrowed
 *     for the call; not otherwise checked.
 *   closed(arg, err): the connection ended (err says why: port_closed
 *     502 when nothing listens on the port, timeout 504 when the browser
 *     did not answer within the deadline, runtime_error 502 for an answer
 *     that is not CDP, not_found 404 for a browser without a page, or the
 *     driver's error); once, nothing follows. The owner frees c (in the
 *     callback or later).
 * Every callback may call api_cdp_free.
 */
struct api_cdp_ops {
	void (*ready)(void *arg);
	void (*message)(void *arg, json_t *m);
	void (*closed)(void *arg, const struct sbx_err *err);
};

struct api_cdp;

/*
 * Opens a CDP connection to the first page of the browser whose
 * DevTools port is port (1..65535) inside sandbox (an id sbx_id_valid
 * holds), through s's driver: one PORT session for GET /json/list, then
 * one for the page's WebSocket (RFC 6455 client, sbx_ws.h). msg_max
 * bounds one message from the browser (over it: closed, runtime_error);
 * deadline_ms (> 0) bounds the time until ready, and stays armed until
 * api_cdp_deadline changes it. Returns the connection, or NULL with err
 * (the driver's refusal to open a session; internal: out of memory); no
 * callback then.
 */
struct api_cdp *api_cdp_open(struct api_server *s, const char *sandbox,
    unsigned port, size_t msg_max, int64_t deadline_ms,
    const struct api_cdp_ops *ops, void *arg, struct sbx_err *err);

/* Rearms the deadline: closed(timeout) after ms from now (0: none). */
void api_cdp_deadline(struct api_cdp *c, int64_t ms);

/*
 * Sends {"id":N,"method":method,"params":params} (params stolen, NULL:
 * {}). Returns N (> 0), or -1 before ready, after closed, or out of
 * memory.
 */
int64_t api_cdp_send(struct api_cdp *c, const char *method, json_t *params);

/* Bytes queued towards the browser not yet taken by the session. */
size_t api_cdp_output_len(const struct api_cdp *c);

/* Ends the connection (sessions cancelled, sockets freed); no callback
 * follows. NULL allowed; safe inside c's callbacks. */
void api_cdp_free(struct api_cdp *c);

#endif
