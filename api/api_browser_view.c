/* api_browser_view.c - watching a sandbox's browser (docs/api.md "Browser view", adr/0065): GET …/sandbox/browser/screenshot (a PNG of the first page, Page.captureScreenshot), POST …/sandbox/browser/view/tickets and the live view WebSocket GET …/sandbox/browser/view (Page.startScreencast frames relayed as binary JPEG messages, one held at most per viewer, acked only once sent). Over api_browser_cdp.h; touches its viewers and their sockets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <sodium.h>

#include "api_browser.h"
#include "api_browser_cdp.h"
#include "api_int.h"
#include "api_ports.h"
#include "sbx_log.h"
#include "sbx_msg.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_ws.h"

/* The live view's frames: JPEG at this quality, at most this size (CDP
 * Page.startScreencast scales the page down to fit). */
#define VIEW_QUALITY 70
#define VIEW_MAX_W 1280
#define VIEW_MAX_H 1024
/* The token's port field of a view ticket (its key is the view's own). */
#define VIEW_TICKET_PORT 1

/* CDP answers above the image itself: the JSON around the base64. */
#define CDP_SLACK ((size_t)64 * 1024)

/* ------------------------------------------------------------------ */
/* Screenshot                                                          */

struct shot {
	struct areq *a;
	struct api_cdp *c;
	int64_t call;              /* the captureScreenshot's id */
};

static void
shot_free(struct shot *sh)
{
	if (sh->a != NULL) {
		sh->a->on_end = NULL;
		sh->a->bview = NULL;
	}
	api_cdp_free(sh->c);
	free(sh);
}

/* The request ended before the answer (client gone, shutdown). */
static void
shot_request_ended(struct areq *a)
{
	struct shot *sh = a->bview;

	if (sh == NULL)
		return;
	sh->a = NULL;
	a->bview = NULL;
	shot_free(sh);
}

static void
shot_fail(struct shot *sh, const struct sbx_err *err)
{
	struct areq *a = sh->a;

	shot_free(sh);
	if (a != NULL)
		areq_fail(a, err);
}

static void
shot_ready(void *arg)
{
	struct shot *sh = arg;
	struct sbx_err err;

	sh->call = api_cdp_send(sh->c, "Page.captureScreenshot",
	    json_pack("{s:s}", "format", "png"));
	if (sh->call == -1) {
		sbx_err_set(&err, SBX_E_INTERNAL, SBX_MSG_OOM);
		shot_fail(sh, &err);
	}
}

static void
shot_message(void *arg, json_t *m)
{
	struct shot *sh = arg;
	const struct api_config *cfg = sh->a->s->cfg;
	struct evbuffer *out;
	struct sbx_err err;
	unsigned char *png;
	const char *data;
	json_t *id = json_object_get(m, "id"), *res;
	size_t len;
	unsigned w, h;
	char dim[32];

	if (!json_is_integer(id) || json_integer_value(id) != sh->call)
		return;    /* an event, or another answer */
	sbx_err_clear(&err);
	res = json_object_get(m, "result");
	data = json_string_value(json_object_get(res, "data"));
	if (data == NULL) {
		json_t *code = json_object_get(json_object_get(m, "error"),
		    "code");

		/* The browser's own message is the sandbox's text: not shown. */
		sbx_err_set(&err, SBX_E_RUNTIME, "The browser could not take a "
		    "screenshot (CDP error %lld).", json_is_integer(code) ?
		    (long long)json_integer_value(code) : 0LL);
		shot_fail(sh, &err);
		return;
	}
	if (api_cdp_image_decode(data, strlen(data),
	    (size_t)cfg->browser_shot_max, API_CDP_PNG, &png, &len, &w, &h,
	    &err) == -1) {
		if (strcmp(err.code, SBX_E_TOO_LARGE) == 0)
			sbx_err_set(&err, SBX_E_RUNTIME, "The browser's screenshot "
			    "is over browser_shot_max (%lld bytes).",
			    cfg->browser_shot_max);
		shot_fail(sh, &err);
		return;
	}
	if ((out = evbuffer_new()) == NULL || evbuffer_add(out, png, len) != 0) {
		free(png);
		if (out != NULL)
			evbuffer_free(out);
		sbx_err_set(&err, SBX_E_INTERNAL, SBX_MSG_OOM);
		shot_fail(sh, &err);
		return;
	}
	free(png);
	{
		struct areq *a = sh->a;

		shot_free(sh);
		snprintf(dim, sizeof(dim), "%ux%u", w, h);
		sbx_httpd_header(&a->h, "Sbx-Image-Size", dim);
		sbx_httpd_header(&a->h, "Cache-Control", "no-store");
		areq_reply_body(a, 200, "image/png", out);
	}
	evbuffer_free(out);
}

static void
shot_closed(void *arg, const struct sbx_err *err)
{
	shot_fail(arg, err);
}

static const struct api_cdp_ops shot_ops = {
	shot_ready, shot_message, shot_closed,
};

int
api_h_browser_screenshot(struct areq *a, struct sbx_err *err)
{
	const struct api_config *cfg = a->s->cfg;
	struct shot *sh;
	unsigned port = 0;

	if (api_browser_port(a->s, a->npc.name, &port, err) == -1)
		return -1;
	if ((sh = calloc(1, sizeof(*sh))) == NULL)
		return sbx_err_oom(err);
	sh->a = a;
	if ((sh->c = api_cdp_open(a->s, a->npc.sandbox_id, port,
	    (size_t)cfg->browser_shot_max / 3 * 4 + CDP_SLACK,
	    cfg->browser_cdp_timeout, &shot_ops, sh, err)) == NULL) {
		sh->a = NULL;
		shot_free(sh);
		return areq_broker_err(a);
	}
	a->bview = sh;
	a->on_end = shot_request_ended;
	areq_watch(a);
	return 0;
}

/* ------------------------------------------------------------------ */
/* View tickets                                                        */

/* The view's token key: its own purpose, so a port ticket or a preview
 * never opens a view and a view ticket never opens a port. */
static void
view_key(const struct api_server *s, unsigned char key[API_PORTS_KEY_BYTES])
{
	crypto_kdf_derive_from_key(key, API_PORTS_KEY_BYTES, 1, "sbxbview",
	    s->ticket_key);
}

int
api_h_browser_view_ticket(struct areq *a, struct sbx_err *err)
{
	unsigned char key[API_PORTS_KEY_BYTES];
	struct api_ports_token t;
	char tok[API_PORTS_TOKEN_LEN + 1], url[256];
	int64_t exp_ms;

	if (a->body != NULL && json_object_size(a->body) > 0)
		return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "A view ticket takes "
		    "no fields.");
	exp_ms = sbx_wall_ms() + a->s->cfg->ticket_ttl;
	memset(&t, 0, sizeof(t));
	t.kind = API_PORTS_TICKET;
	t.expires = (uint32_t)(exp_ms / 1000);
	t.port = VIEW_TICKET_PORT;
	t.npc_id = (uint32_t)a->npc.id;
	t.principal_id = (uint32_t)a->who.id;
	view_key(a->s, key);
	if (api_ports_token_make(key, &t, tok, sizeof(tok)) == -1) {
		sodium_memzero(key, sizeof(key));
		return sbx_err_set(err, SBX_E_INTERNAL, "The ticket could not be "
		    "made.");
	}
	sodium_memzero(key, sizeof(key));
	snprintf(url, sizeof(url), "/api/v1/npcs/%s/sandbox/browser/view?"
	    "ticket=%s", a->npc.name, tok);
	areq_reply_json(a, 200, json_pack("{s:s,s:I,s:s}", "ticket", tok,
	    "expires_at", (json_int_t)t.expires * 1000, "view_url", url));
	return 0;
}

int
api_browser_view_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, const char *authz, int final,
    struct api_principal *who)
{
	unsigned char key[API_PORTS_KEY_BYTES];
	struct api_ports_token t;
	struct api_npc n;
	struct evkeyvalq q;
	struct sbx_err err;
	const char *tok, *bearer;
	size_t keylen = 0;
	int r = 0;

	(void)id;
	(void)final;
	if (authz != NULL) {
		bearer = sbx_gate_bearer(authz, &keylen);
		return bearer != NULL ? api_store_authenticate(s->store, bearer,
		    keylen, who) : 0;
	}
	if (query == NULL)
		return 0;
	memset(&q, 0, sizeof(q));
	TAILQ_INIT(&q);
	if (evhttp_parse_query_str(query, &q) != 0) {
		evhttp_clear_headers(&q);
		return 0;
	}
	view_key(s, key);
	tok = evhttp_find_header(&q, "ticket");
	if (tok != NULL && api_ports_token_check(key, tok, strlen(tok),
	    sbx_wall_ms() / 1000, &t) == 1 && t.kind == API_PORTS_TICKET &&
	    t.port == VIEW_TICKET_PORT &&
	    (r = api_store_npc_get_id(s->store, t.npc_id, &n, &err)) == 1 &&
	    (r = api_store_principal_get_id(s->store, t.principal_id, who,
	    &err)) == 1) {
		if (who->revoked_at != 0 || (who->role != API_ROLE_OPERATOR &&
		    n.owner_id != who->id) || strcmp(n.name, npc) != 0)
			r = 0;
	} else if (r == 1)
		r = 0;
	sodium_memzero(key, sizeof(key));
	evhttp_clear_headers(&q);
	if (r != 1)
		memset(who, 0, sizeof(*who));
	return r;
}

/* ------------------------------------------------------------------ */
/* The live view                                                       */

struct viewer {
	struct api_server *s;
	struct sbx_ws *ws;
	struct api_cdp *c;
	int64_t npc_id;
	int64_t stream_of;         /* principal whose stream it holds, 0 none */
	int64_t start_call;        /* Page.startScreencast's id */
	int busy;                  /* the client has not taken the last frame */
	unsigned char *held;       /* the newest frame not sent yet, or NULL */
	size_t heldlen;
	int64_t held_session;      /* its screencast session (for the ack) */
	uint64_t sent, dropped;
	int closing;
	struct viewer *prev, *next;
};

/* Every live view of the process (a drain closes them). */
static struct viewer *views;

static unsigned
views_of(int64_t npc_id)
{
	const struct viewer *v;
	unsigned n = 0;

	for (v = views; v != NULL; v = v->next)
		if (v->npc_id == npc_id)
			n++;
	return n;
}

static void
view_free(struct viewer *v)
{
	if (v->prev != NULL)
		v->prev->next = v->next;
	else if (views == v)
		views = v->next;
	if (v->next != NULL)
		v->next->prev = v->prev;
	api_cdp_free(v->c);
	sbx_ws_free(v->ws);
	free(v->held);
	if (v->stream_of != 0)
		api_streams_put(v->s, v->stream_of);
	free(v);
}

/* Tells the client why (a JSON message), then closes; the browser side
 * goes at once. */
static void
view_close(struct viewer *v, int code, const struct sbx_err *err)
{
	if (v->closing)
		return;
	v->closing = 1;
	api_cdp_free(v->c);
	v->c = NULL;
	if (err != NULL)
		(void)sbx_ws_send_json(v->ws, json_pack("{s:s,s:s,s:s}", "type",
		    "error", "code", err->code, "message", err->message));
	sbx_ws_close(v->ws, code, err != NULL ? err->message : NULL);
}

static void
ack(struct viewer *v, int64_t session)
{
	if (v->c != NULL)
		(void)api_cdp_send(v->c, "Page.screencastFrameAck",
		    json_pack("{s:I}", "sessionId", (json_int_t)session));
}

/* Sends frame p (n bytes) and acks it: the browser sends the next one
 * only then (CDP's pacing). */
static void
frame_send(struct viewer *v, const unsigned char *p, size_t n,
    int64_t session)
{
	v->busy = 1;
	if (sbx_ws_send(v->ws, 0, p, n, NULL, 0) == 0)
		v->sent++;
	ack(v, session);
}

static void
on_frame(struct viewer *v, json_t *params)
{
	const struct api_config *cfg = v->s->cfg;
	const char *data = json_string_value(json_object_get(params, "data"));
	json_t *sid = json_object_get(params, "sessionId");
	unsigned char *jpg;
	struct sbx_err err;
	unsigned w, h;
	size_t len;

	if (data == NULL || !json_is_integer(sid))
		return;
	sbx_err_clear(&err);
	if (api_cdp_image_decode(data, strlen(data),
	    (size_t)cfg->browser_frame_max, API_CDP_JPEG, &jpg, &len, &w, &h,
	    &err) == -1) {
		/* A frame too big or not a JPEG is dropped; the next may do. */
		v->dropped++;
		ack(v, json_integer_value(sid));
		return;
	}
	if (!v->busy) {
		frame_send(v, jpg, len, json_integer_value(sid));
		free(jpg);
		return;
	}
	/* The client is still reading the last one: this one waits, in
	 * place of any that waited (dropped; acked so the browser goes on). */
	if (v->held != NULL) {
		free(v->held);
		v->dropped++;
		ack(v, v->held_session);
	}
	v->held = jpg;
	v->heldlen = len;
	v->held_session = json_integer_value(sid);
}

static void
view_ready(void *arg)
{
	struct viewer *v = arg;
	struct sbx_err err;

	v->start_call = api_cdp_send(v->c, "Page.startScreencast",
	    json_pack("{s:s,s:i,s:i,s:i,s:i}", "format", "jpeg", "quality",
	    VIEW_QUALITY, "maxWidth", VIEW_MAX_W, "maxHeight", VIEW_MAX_H,
	    "everyNthFrame", 1));
	if (v->start_call == -1) {
		sbx_err_set(&err, SBX_E_INTERNAL, SBX_MSG_OOM);
		view_close(v, SBX_WS_INTERNAL, &err);
	}
}

static void
view_message(void *arg, json_t *m)
{
	struct viewer *v = arg;
	const char *method = json_string_value(json_object_get(m, "method"));
	json_t *id = json_object_get(m, "id");
	struct sbx_err err;

	if (method != NULL && strcmp(method, "Page.screencastFrame") == 0) {
		on_frame(v, json_object_get(m, "params"));
		return;
	}
	if (!json_is_integer(id) || json_integer_value(id) != v->start_call)
		return;
	if (json_object_get(m, "error") != NULL) {
		sbx_err_set(&err, SBX_E_RUNTIME, "The browser would not start "
		    "its screencast.");
		view_close(v, SBX_WS_INTERNAL, &err);
		return;
	}
	/* Running: no deadline now (a page that does not change sends
	 * nothing for as long as it does not). */
	api_cdp_deadline(v->c, 0);
	(void)sbx_ws_send_json(v->ws, json_pack("{s:s}", "type", "started"));
}

static void
view_cdp_closed(void *arg, const struct sbx_err *err)
{
	struct viewer *v = arg;

	view_close(v, strcmp(err->code, SBX_E_PORT_CLOSED) == 0 ?
	    SBX_WS_NORMAL : SBX_WS_INTERNAL, err);
}

static const struct api_cdp_ops view_ops = {
	view_ready, view_message, view_cdp_closed,
};

/* The client's side. */
static void
ws_message(void *arg, int text, const unsigned char *p, size_t n)
{
	(void)arg;
	(void)text;
	(void)p;
	(void)n;   /* the view is read-only: what a client sends is dropped */
}

/* pause(1): a frame waits for the client; pause(0): it took it. */
static void
ws_pause(void *arg, int on)
{
	struct viewer *v = arg;
	unsigned char *p;

	if (on) {
		v->busy = 1;
		return;
	}
	v->busy = 0;
	if ((p = v->held) != NULL && !v->closing) {
		v->held = NULL;
		frame_send(v, p, v->heldlen, v->held_session);
		free(p);
	}
}

static void
ws_closed(void *arg, int code, const char *reason)
{
	struct viewer *v = arg;

	(void)code;
	(void)reason;
	view_free(v);   /* sbx_ws_free is safe in its callbacks, and due */
}

static void
ws_release(void *arg, struct bufferevent *bev)
{
	struct viewer *v = arg;

	sbx_gate_upgraded_close(v->s->gate, bev);
}

static const struct sbx_ws_ops ws_ops = {
	ws_message, ws_pause, ws_closed, ws_release,
};

int
api_h_browser_view(struct areq *a, struct sbx_err *err)
{
	const struct api_config *cfg = a->s->cfg;
	struct evkeyvalq *hd = evhttp_request_get_input_headers(a->h.req);
	struct sbx_ws_limits lim;
	struct sbx_ws_head head;
	struct bufferevent *bev;
	struct viewer *v;
	char accept[SBX_WS_ACCEPT_LEN + 1], extra[96];
	unsigned port = 0;

	memset(&head, 0, sizeof(head));
	head.is_get = evhttp_request_get_command(a->h.req) == EVHTTP_REQ_GET;
	head.http11 = a->h.req->major > 1 || (a->h.req->major == 1 &&
	    a->h.req->minor >= 1);
	sbx_ws_head_fields(&head, hd, NULL);
	if (sbx_ws_handshake_check(&head, NULL, accept, err) == -1) {
		if (head.version == NULL || strcmp(head.version, "13") != 0)
			sbx_httpd_header(&a->h, "Sec-WebSocket-Version", "13");
		return -1;
	}
	/* No browser: a plain 404 before the upgrade. */
	if (api_browser_port(a->s, a->npc.name, &port, err) == -1)
		return -1;
	if (views_of(a->npc.id) >= (unsigned)cfg->browser_viewers_per_sandbox) {
		sbx_httpd_header(&a->h, "Retry-After", "1");
		return sbx_err_set(err, SBX_E_TOO_MANY, "%s already has %lld live "
		    "views of its browser open (browser_viewers_per_sandbox).",
		    a->npc.name, cfg->browser_viewers_per_sandbox);
	}
	if (a->authed && api_streams_take(a->s, a->who.id, err) == -1)
		return -1;
	if ((v = calloc(1, sizeof(*v))) == NULL) {
		if (a->authed)
			api_streams_put(a->s, a->who.id);
		return sbx_err_oom(err);
	}
	v->s = a->s;
	v->npc_id = a->npc.id;
	v->stream_of = a->authed ? a->who.id : 0;
	if ((v->c = api_cdp_open(a->s, a->npc.sandbox_id, port,
	    (size_t)cfg->browser_frame_max / 3 * 4 + CDP_SLACK,
	    cfg->browser_cdp_timeout, &view_ops, v, err)) == NULL) {
		view_free(v);
		return areq_broker_err(a);
	}
	snprintf(extra, sizeof(extra), "Sec-WebSocket-Accept: %s\r\n", accept);
	if ((bev = sbx_httpd_upgrade(&a->h, "websocket", extra)) == NULL) {
		view_free(v);
		areq_finish(a, 500, "error");
		return 0;
	}
	memset(&lim, 0, sizeof(lim));
	lim.message_max = 4096;
	lim.ping_ms = cfg->ws_ping_interval;
	lim.high_water = 1;   /* pause(1) while any frame waits for the client */
	if ((v->ws = sbx_ws_new(bev, SBX_WS_SERVER, &lim, &ws_ops, v, err)) ==
	    NULL) {
		view_free(v);
		areq_finish(a, 101, "error");
		return 0;
	}
	v->next = views;
	if (views != NULL)
		views->prev = v;
	views = v;
	(void)sbx_ws_send_json(v->ws, json_pack("{s:s,s:s}", "type", "hello",
	    "npc", a->npc.name));
	areq_finish(a, 101, "ok");
	return 0;
}

void
api_browser_view_drain(struct api_server *s)
{
	struct viewer *v, *next;
	struct sbx_err err;

	sbx_err_set(&err, SBX_E_SHUTTING_DOWN, "The api is shutting down; "
	    "open the view again.");
	for (v = views; v != NULL; v = next) {
		next = v->next;
		if (v->s == s)
			view_close(v, SBX_WS_GOING_AWAY, &err);
	}
}

void
api_browser_view_free_all(struct api_server *s)
{
	struct viewer *v, *next;

	for (v = views; v != NULL; v = next) {
		next = v->next;
		if (v->s == s)
			view_free(v);
	}
}
