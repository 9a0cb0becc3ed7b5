/* api_term_ws.c - sandbox-api's WebSocket attach of a terminal, GET …/terminals/{id}/attach (subprotocol sbx.v1, docs/api.md, adr/0052): the handshake checked before the upgrade, then one viewer of the terminal (api_term.h) on one WebSocket (sbx_ws.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "api_int.h"
#include "api_term.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_ws.h"

/* sbx.v1's own close codes (docs/api.md). */
#define WS_BROKER_GONE 4002

/* One attached WebSocket. */
struct tws {
	struct api_server *s;
	struct sbx_ws *ws;
	struct api_viewer *v;
	int pty;
	unsigned char *held;      /* input the terminal had no room for */
	size_t heldlen;
	int closing;
	int64_t stream_of;        /* principal whose stream it holds, 0 none */
	struct tws *prev, *next;
};

/* Every attached WebSocket of the process (a drain closes them). */
static struct tws *live;

/* Frees w's own memory and gives its stream back. */
static void
tws_unmade(struct tws *w)
{
	if (w->stream_of != 0)
		api_streams_put(w->s, w->stream_of);
	free(w);
}

static void
tws_free(struct tws *w)
{
	if (w->prev != NULL)
		w->prev->next = w->next;
	else if (live == w)
		live = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	api_viewer_detach(w->v);
	sbx_ws_free(w->ws);
	free(w->held);
	tws_unmade(w);
}

/* Closes with code and a sentence; the viewer goes at once (the close
 * handshake finishes without it). */
static void
tws_close(struct tws *w, int code, const char *reason)
{
	if (w->closing)
		return;
	w->closing = 1;
	api_viewer_detach(w->v);
	w->v = NULL;
	sbx_ws_close(w->ws, code, reason);
}

/* ------------------------------------------------------------------ */
/* The terminal's side                                                 */

static void
v_output(void *arg, int stream, uint64_t offset, const unsigned char *p,
    size_t n)
{
	struct tws *w = arg;
	unsigned char sb = stream == 2 ? 2 : 1;

	(void)offset;
	(void)sbx_ws_send(w->ws, 0, &sb, 1, p, n);
}

static void
v_ended(void *arg, const char *state, int code, const char *signal,
    const struct sbx_err *err)
{
	struct tws *w = arg;

	if (err == NULL || !sbx_err_is_set(err)) {
		(void)sbx_ws_send_json(w->ws, json_pack("{s:s,s:s,s:o,s:o}",
		    "type", "exit", "state", state, "code", code >= 0 ?
		    json_integer(code) : json_null(), "signal", signal != NULL ?
		    json_string(signal) : json_null()));
		tws_close(w, SBX_WS_NORMAL, "The terminal's command exited.");
		return;
	}
	(void)sbx_ws_send_json(w->ws, json_pack("{s:s,s:s,s:s,s:s}", "type",
	    "error", "state", state, "code", err->code, "message",
	    err->message));
	if (strcmp(err->code, SBX_E_BROKER_UNAVAILABLE) == 0)
		tws_close(w, WS_BROKER_GONE, err->message);
	else if (strcmp(err->code, SBX_E_SHUTTING_DOWN) == 0)
		tws_close(w, SBX_WS_GOING_AWAY, err->message);
	else if (strcmp(err->code, SBX_E_CANCELLED) == 0)
		tws_close(w, SBX_WS_NORMAL, err->message);
	else
		tws_close(w, SBX_WS_INTERNAL, err->message);
}

static void
v_writer(void *arg, int you)
{
	struct tws *w = arg;

	(void)sbx_ws_send_json(w->ws, json_pack("{s:s,s:b}", "type", "writer",
	    "you", you));
}

static void
v_skipped(void *arg, uint64_t from, uint64_t to)
{
	struct tws *w = arg;

	(void)sbx_ws_send_json(w->ws, json_pack("{s:s,s:I,s:I}", "type",
	    "skipped", "from", (json_int_t)from, "to", (json_int_t)to));
}

static void ws_input(struct tws *w, const unsigned char *p, size_t n);

static void
v_room(void *arg)
{
	struct tws *w = arg;
	unsigned char *p = w->held;
	size_t n = w->heldlen;

	if (p == NULL)
		return;
	w->held = NULL;
	w->heldlen = 0;
	ws_input(w, p, n);
	free(p);
	if (w->held == NULL && !w->closing)
		sbx_ws_read_pause(w->ws, 0);
}

static const struct api_viewer_ops vops = {
	.output = v_output,
	.ended = v_ended,
	.writer = v_writer,
	.skipped = v_skipped,
	.room = v_room,
};

/* ------------------------------------------------------------------ */
/* The client's side                                                   */

static void
ws_input(struct tws *w, const unsigned char *p, size_t n)
{
	struct sbx_err err;

	if (w->v == NULL || n == 0)
		return;
	sbx_err_clear(&err);
	if (api_term_input(w->v, p, n, &err) == 0)
		return;
	if (strcmp(err.code, SBX_E_TOO_MANY) == 0) {
		/* Held (one message, at most ws_message_max) until room;
		 * meanwhile nothing more is read: TCP backpressure. */
		if ((w->held = malloc(n)) == NULL) {
			tws_close(w, SBX_WS_INTERNAL, SBX_MSG_OOM);
			return;
		}
		memcpy(w->held, p, n);
		w->heldlen = n;
		sbx_ws_read_pause(w->ws, 1);
		return;
	}
	if (strcmp(err.code, SBX_E_FORBIDDEN) == 0)
		tws_close(w, SBX_WS_POLICY, err.message);
	/* conflict: the terminal has ended; its exit message follows */
}

/* A text message: one JSON control (docs/api.md), parsed as the control
 * route's body. Refusals close 1008 with the sentence. */
static void
ws_control(struct tws *w, const unsigned char *p, size_t n)
{
	struct sbx_session_ctl c;
	struct sbx_err err;
	json_t *o;
	int eof;

	if (w->v == NULL)
		return;
	sbx_err_clear(&err);
	o = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, NULL);
	if (api_term_ctl_parse(o, &c, &eof, &err) == -1)
		tws_close(w, SBX_WS_POLICY, err.message);
	else if (eof) {
		/* its refusal has no reason: the writer check gives it */
		if (api_term_eof(w->v) == -1 && api_term_input(w->v, p, 0,
		    &err) == -1 && strcmp(err.code, SBX_E_FORBIDDEN) == 0)
			tws_close(w, SBX_WS_POLICY, err.message);
	} else if (api_term_control(w->v, &c, &err) == -1 &&
	    strcmp(err.code, SBX_E_CONFLICT) != 0)
		tws_close(w, SBX_WS_POLICY, err.message);
	json_decref(o);
}

static void
ws_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct tws *w = arg;

	if (w->closing)
		return;
	if (text)
		ws_control(w, p, n);
	else
		ws_input(w, p, n);
}

static void
ws_pause(void *arg, int on)
{
	struct tws *w = arg;

	if (w->v != NULL)
		api_viewer_pause(w->v, on);
}

static void
ws_closed(void *arg, int code, const char *reason)
{
	struct tws *w = arg;
	char c[8];

	(void)reason;
	snprintf(c, sizeof(c), "%d", code);
	log_debug("terminal websocket closed", "code", c, NULL);
	tws_free(w);
}

static void
ws_release(void *arg, struct bufferevent *bev)
{
	struct tws *w = arg;

	sbx_gate_upgraded_close(w->s->gate, bev);
}

static const struct sbx_ws_ops wops = {
	ws_message, ws_pause, ws_closed, ws_release,
};

/* ------------------------------------------------------------------ */
/* The route                                                           */

int
api_h_terms_attach(struct areq *a, struct sbx_err *err)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(a->h.req);
	struct sbx_ws_limits lim;
	struct sbx_ws_head head;
	struct bufferevent *bev;
	struct api_term *t;
	struct tws *w = NULL;
	char accept[SBX_WS_ACCEPT_LEN + 1], extra[160];
	uint64_t off, start;

	memset(&head, 0, sizeof(head));
	head.is_get = evhttp_request_get_command(a->h.req) == EVHTTP_REQ_GET;
	head.http11 = a->h.req->major == 1 && a->h.req->minor >= 1;
	sbx_ws_head_fields(&head, h, SBX_WS_PROTOCOL);
	/* The terminal first: another player's is 404 whatever the head. */
	if ((t = api_term_find(a->s, a->npc.name, a->exec_id, err)) == NULL)
		return -1;
	if (sbx_ws_handshake_check(&head, SBX_WS_PROTOCOL, accept, err) == -1) {
		if (head.version == NULL || strcmp(head.version, "13") != 0)
			sbx_httpd_header(&a->h, "Sec-WebSocket-Version", "13");
		return -1;
	}
	if (api_term_offset_query(a, &off, err) == -1)
		return -1;
	/* One of its principal's open streams (adr/0056) while attached. */
	if (a->authed && api_streams_take(a->s, a->who.id, err) == -1)
		return -1;
	if ((w = calloc(1, sizeof(*w))) == NULL) {
		if (a->authed)
			api_streams_put(a->s, a->who.id);
		return sbx_err_oom(err);
	}
	w->s = a->s;
	w->stream_of = a->authed ? a->who.id : 0;
	w->pty = api_term_is_pty(t);
	if ((w->v = api_term_attach(a->s, t, off, &vops, w, &start, err)) ==
	    NULL) {
		tws_unmade(w);
		return -1;
	}
	snprintf(extra, sizeof(extra), "Sec-WebSocket-Accept: %s\r\n"
	    "Sec-WebSocket-Protocol: " SBX_WS_PROTOCOL "\r\n", accept);
	if ((bev = sbx_httpd_upgrade(&a->h, "websocket", extra)) == NULL) {
		api_viewer_detach(w->v);
		tws_unmade(w);
		areq_finish(a, 500, "error");
		return 0;
	}
	memset(&lim, 0, sizeof(lim));
	lim.message_max = (size_t)a->s->cfg->ws_message_max;
	lim.ping_ms = a->s->cfg->ws_ping_interval;
	lim.high_water = (size_t)a->s->cfg->ws_output_high;
	if ((w->ws = sbx_ws_new(bev, SBX_WS_SERVER, &lim, &wops, w, err)) ==
	    NULL) {
		api_viewer_detach(w->v);
		tws_unmade(w);
		areq_finish(a, 101, "error");
		return 0;
	}
	w->next = live;
	if (live != NULL)
		live->prev = w;
	live = w;
	(void)sbx_ws_send_json(w->ws, json_pack("{s:s,s:s,s:I,s:b}", "type",
	    "hello", "id", api_term_id(t), "offset", (json_int_t)start, "pty",
	    w->pty));
	(void)sbx_ws_send_json(w->ws, json_pack("{s:s,s:b}", "type", "writer",
	    "you",
	    api_viewer_is_writer(w->v)));
	areq_finish(a, 101, "ok");
	return 0;
}

void
api_term_ws_drain(struct api_server *s)
{
	struct tws *w, *next;

	for (w = live; w != NULL; w = next) {
		next = w->next;
		if (w->s == s)
			tws_close(w, SBX_WS_GOING_AWAY, TERM_MSG_SHUTDOWN);
	}
}

void
api_term_ws_free_all(struct api_server *s)
{
	struct tws *w, *next;

	for (w = live; w != NULL; w = next) {
		next = w->next;
		if (w->s == s)
			tws_free(w);
	}
}
