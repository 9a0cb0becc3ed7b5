/* api_browser_cdp.c - the api's CDP client (api_browser_cdp.h, adr/0065): GET /json/list over one PORT session to the browser's DevTools port in the sandbox, then the first page's WebSocket over a second one, spoken by sbx_ws on one end of a bufferevent pair whose other end is pumped to and from the session. Touches its own sessions, buffers and timer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>

#include "api_browser_cdp.h"
#include "api_int.h"
#include "sbx_driver.h"
#include "sbx_msg.h"
#include "sbx_proto.h"
#include "sbx_ws.h"

/* Bytes from the browser queued towards the WebSocket end above which its
 * session is paused. */
#define CDP_HIGH ((size_t)256 * 1024)

enum phase { P_LIST = 1, P_UPGRADE, P_OPEN, P_DONE };

struct api_cdp {
	struct api_server *s;
	char sandbox[64];
	unsigned port;
	enum phase phase;
	struct sbx_op *op;           /* the session of this phase */
	int started;                 /* the session started */
	struct evbuffer *in;         /* an HTTP answer being read */
	struct evbuffer *out;        /* an HTTP request not yet taken */
	struct bufferevent *pair[2]; /* [0]: sbx_ws's, [1]: the session's */
	struct sbx_ws *ws;
	char key[SBX_WS_KEY_LEN + 1];
	char page[API_CDP_ID_MAX + 1];
	size_t msg_max;
	struct event *timer;
	int64_t deadline_ms;
	const struct api_cdp_ops *ops;
	void *arg;
	int64_t next_id;
	int paused;                  /* the session is paused (pair full) */
	int busy;                    /* inside an owner's callback */
	int freed;                   /* api_cdp_free came while busy */
};

static int session_open(struct api_cdp *c, struct sbx_err *err);

static void
really_free(struct api_cdp *c)
{
	struct sbx_op *op = c->op;

	c->op = NULL;
	sbx_op_cancel(op);
	if (c->ws != NULL) {
		sbx_ws_free(c->ws);   /* frees pair[0] */
		c->pair[0] = NULL;
	}
	if (c->pair[0] != NULL)
		bufferevent_free(c->pair[0]);
	if (c->pair[1] != NULL)
		bufferevent_free(c->pair[1]);
	if (c->in != NULL)
		evbuffer_free(c->in);
	if (c->out != NULL)
		evbuffer_free(c->out);
	if (c->timer != NULL)
		event_free(c->timer);
	free(c);
}

void
api_cdp_free(struct api_cdp *c)
{
	if (c == NULL)
		return;
	if (c->busy > 0) {
		c->freed = 1;
		return;
	}
	really_free(c);
}

/* After an owner's callback: -1 when c is gone now. */
static int
unbusy(struct api_cdp *c)
{
	if (--c->busy == 0 && c->freed) {
		really_free(c);
		return -1;
	}
	return 0;
}

/* The end: once; the sessions stop, the owner hears err. */
static void
fail(struct api_cdp *c, const struct sbx_err *err)
{
	struct sbx_op *op = c->op;

	if (c->phase == P_DONE)
		return;
	c->phase = P_DONE;
	c->op = NULL;
	sbx_op_cancel(op);
	evtimer_del(c->timer);
	c->busy++;
	if (c->ops->closed != NULL)
		c->ops->closed(c->arg, err);
	(void)unbusy(c);
}

static void
fail_msg(struct api_cdp *c, const char *code, const char *msg)
{
	struct sbx_err err;

	sbx_err_set(&err, code, "%s", msg);
	fail(c, &err);
}

static void
timer_fire(evutil_socket_t fd, short what, void *arg)
{
	struct api_cdp *c = arg;
	struct sbx_err err;

	(void)fd;
	(void)what;
	sbx_err_set(&err, SBX_E_TIMEOUT, "The browser in the sandbox did not "
	    "answer within %lld ms (browser_cdp_timeout).",
	    (long long)c->deadline_ms);
	fail(c, &err);
}

void
api_cdp_deadline(struct api_cdp *c, int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) *
	    1000 };

	c->deadline_ms = ms;
	evtimer_del(c->timer);
	if (ms > 0)
		evtimer_add(c->timer, &tv);
}

/* ------------------------------------------------------------------ */
/* Towards the browser                                                 */

/* Moves the request, then what sbx_ws wrote, into the session. */
static void
pump(struct api_cdp *c)
{
	struct evbuffer *src;
	size_t len;
	ssize_t n;

	while (c->op != NULL && c->started) {
		src = evbuffer_get_length(c->out) > 0 ? c->out :
		    c->pair[1] != NULL ? bufferevent_get_input(c->pair[1]) :
		    NULL;
		if (src == NULL || (len = evbuffer_get_length(src)) == 0)
			break;
		if ((n = sbx_session_write(c->op, src, len)) <= 0 ||
		    (size_t)n < len)
			break;
	}
}

static void
pair_read(struct bufferevent *bev, void *arg)
{
	(void)bev;
	pump(arg);
}

/* What waited for the WebSocket end drained: the browser may send on. */
static void
pair_write(struct bufferevent *bev, void *arg)
{
	struct api_cdp *c = arg;

	(void)bev;
	if (c->paused && c->op != NULL) {
		c->paused = 0;
		sbx_op_resume(c->op);
	}
}

static void
pair_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	(void)arg;   /* the WebSocket's own close tells the end */
}

int64_t
api_cdp_send(struct api_cdp *c, const char *method, json_t *params)
{
	json_t *o;
	int64_t id;

	if (params == NULL)
		params = json_object();
	if (c->phase != P_OPEN || c->ws == NULL || params == NULL) {
		json_decref(params);
		return -1;
	}
	id = ++c->next_id;
	o = json_pack("{s:I,s:s,s:o}", "id", (json_int_t)id, "method", method,
	    "params", params);
	if (o == NULL || sbx_ws_send_json(c->ws, o) == -1)
		return -1;
	return id;
}

size_t
api_cdp_output_len(const struct api_cdp *c)
{
	return (c->phase == P_OPEN ? sbx_ws_output_len(c->ws) : 0) +
	    evbuffer_get_length(c->out) + (c->pair[1] != NULL ?
	    evbuffer_get_length(bufferevent_get_input(c->pair[1])) : 0);
}

/* ------------------------------------------------------------------ */
/* The WebSocket                                                       */

static void
ws_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct api_cdp *c = arg;
	json_t *m;

	if (c->phase != P_OPEN)
		return;
	m = text ? json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES,
	    NULL) : NULL;
	if (!json_is_object(m)) {
		json_decref(m);
		fail_msg(c, SBX_E_RUNTIME, "The browser sent a DevTools message "
		    "that is not a JSON object.");
		return;
	}
	c->busy++;
	if (c->ops->message != NULL)
		c->ops->message(c->arg, m);
	json_decref(m);
	(void)unbusy(c);
}

static void
ws_closed(void *arg, int code, const char *reason)
{
	struct api_cdp *c = arg;
	struct sbx_err err;

	(void)reason;
	c->pair[0] = NULL;     /* it freed pair[0]; c->ws is freed with c */
	if (code == SBX_WS_TOO_BIG)
		sbx_err_set(&err, SBX_E_RUNTIME, "The browser sent a DevTools "
		    "message over %zu bytes (browser_shot_max).", c->msg_max);
	else
		sbx_err_set(&err, SBX_E_PORT_CLOSED, "The browser closed its "
		    "DevTools connection (WebSocket close %d).", code);
	fail(c, &err);
}

static const struct sbx_ws_ops ws_ops = {
	ws_message, NULL, ws_closed, NULL,
};

/* The upgrade's answer head is whole (hl bytes of c->in): checked, then
 * sbx_ws runs on the pair. Returns 0, or -1 after fail (c may be gone). */
static int
ws_start(struct api_cdp *c, int status, size_t hl, const char *upgrade,
    const char *connection, const char *accept)
{
	struct sbx_ws_limits lim;
	struct sbx_err err;

	sbx_err_clear(&err);
	if (sbx_ws_client_check(status, upgrade, connection, accept, NULL,
	    c->key, NULL, &err) == -1) {
		sbx_err_set(&err, SBX_E_RUNTIME, "The browser refused the "
		    "DevTools WebSocket of its page (HTTP %d).", status);
		fail(c, &err);
		return -1;
	}
	evbuffer_drain(c->in, hl);
	if (bufferevent_pair_new(c->s->base, BEV_OPT_DEFER_CALLBACKS,
	    c->pair) != 0) {
		c->pair[0] = c->pair[1] = NULL;
		fail_msg(c, SBX_E_INTERNAL, SBX_MSG_OOM);
		return -1;
	}
	bufferevent_setcb(c->pair[1], pair_read, pair_write, pair_event, c);
	bufferevent_setwatermark(c->pair[1], EV_READ, 0, CDP_HIGH);
	bufferevent_setwatermark(c->pair[1], EV_WRITE, CDP_HIGH / 2, 0);
	bufferevent_enable(c->pair[1], EV_READ | EV_WRITE);
	memset(&lim, 0, sizeof(lim));
	lim.message_max = c->msg_max;
	lim.high_water = CDP_HIGH;
	if ((c->ws = sbx_ws_new(c->pair[0], SBX_WS_CLIENT, &lim, &ws_ops, c,
	    &err)) == NULL) {
		c->pair[0] = NULL;
		fail(c, &err);
		return -1;
	}
	c->phase = P_OPEN;
	/* Bytes that came with the head are the first frames. */
	if (evbuffer_get_length(c->in) > 0)
		bufferevent_write_buffer(c->pair[1], c->in);
	c->busy++;
	if (c->ops->ready != NULL)
		c->ops->ready(c->arg);
	return unbusy(c);
}

/* ------------------------------------------------------------------ */
/* The sessions                                                        */

/* /json/list was read whole (body: blen bytes after hl). */
static void
list_done(struct api_cdp *c, size_t hl, size_t blen)
{
	struct sbx_op *op = c->op;
	struct sbx_err err;
	char *body;

	c->op = NULL;
	sbx_op_cancel(op);
	sbx_err_clear(&err);
	body = (char *)evbuffer_pullup(c->in, -1) + hl;
	if (api_cdp_pick_page(body, blen, c->page, sizeof(c->page), &err) ==
	    -1) {
		fail(c, &err);
		return;
	}
	evbuffer_drain(c->in, evbuffer_get_length(c->in));
	c->phase = P_UPGRADE;
	if (session_open(c, &err) == -1)
		fail(c, &err);
}

/* What the answer so far says; 1 when the phase moved on or ended. */
static int
answer(struct api_cdp *c, int ended)
{
	char up[64], conn[64], acc[64];
	struct sbx_err err;
	size_t len = evbuffer_get_length(c->in), hl = 0;
	const char *p;
	long clen = -1;
	int status = 0, r;

	sbx_err_clear(&err);
	p = (const char *)evbuffer_pullup(c->in, -1);
	r = api_cdp_http_head(p != NULL ? p : "", len, c->phase == P_LIST ?
	    API_CDP_LIST_MAX : API_CDP_HEAD_MAX, &status, &hl, &clen, up, conn,
	    acc, sizeof(up), &err);
	if (r == -1) {
		fail(c, &err);
		return 1;
	}
	if (r == 0)
		return 0;
	if (c->phase == P_UPGRADE) {
		(void)ws_start(c, status, hl, up, conn, acc);
		return 1;
	}
	if (status != 200) {
		sbx_err_set(&err, SBX_E_RUNTIME, "The browser answered HTTP %d "
		    "to GET /json/list.", status);
		fail(c, &err);
		return 1;
	}
	if (clen >= 0 && (size_t)clen > API_CDP_LIST_MAX - hl) {
		fail_msg(c, SBX_E_RUNTIME, "The browser's list of targets is too "
		    "long.");
		return 1;
	}
	if (clen >= 0 && len - hl >= (size_t)clen) {
		list_done(c, hl, (size_t)clen);
		return 1;
	}
	if (clen < 0 && ended) {
		list_done(c, hl, len - hl);
		return 1;
	}
	return 0;
}

static void
s_start(void *arg, const char *exec_id)
{
	struct api_cdp *c = arg;

	(void)exec_id;
	c->started = 1;
	pump(c);
}

static void
s_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct api_cdp *c = arg;

	(void)stream;
	if (c->phase == P_OPEN) {
		if (c->pair[1] == NULL || bufferevent_write(c->pair[1], buf,
		    len) != 0) {
			fail_msg(c, SBX_E_INTERNAL, SBX_MSG_OOM);
			return;
		}
		if (!c->paused && c->op != NULL && evbuffer_get_length(
		    bufferevent_get_output(c->pair[1])) > CDP_HIGH) {
			c->paused = 1;
			sbx_op_pause(c->op);
		}
		return;
	}
	if (c->phase != P_LIST && c->phase != P_UPGRADE)
		return;
	if (evbuffer_get_length(c->in) + len > API_CDP_LIST_MAX) {
		fail_msg(c, SBX_E_RUNTIME, "The browser's answer is too long.");
		return;
	}
	if (evbuffer_add(c->in, buf, len) != 0) {
		fail_msg(c, SBX_E_INTERNAL, SBX_MSG_OOM);
		return;
	}
	(void)answer(c, 0);
}

static void
s_end(struct api_cdp *c, const struct sbx_err *err)
{
	struct sbx_err e;

	c->op = NULL;
	if (c->phase == P_LIST && evbuffer_get_length(c->in) > 0 &&
	    answer(c, 1))
		return;
	if (c->phase == P_DONE)
		return;
	if (err != NULL && strcmp(err->code, SBX_E_PORT_CLOSED) != 0) {
		fail(c, err);
		return;
	}
	if (c->phase == P_OPEN)
		sbx_err_set(&e, SBX_E_PORT_CLOSED, "The browser closed its "
		    "DevTools connection.");
	else
		sbx_err_set(&e, SBX_E_PORT_CLOSED, "No browser answers on its "
		    "DevTools port %u in the sandbox.", c->port);
	fail(c, &e);
}

static void
s_exit(void *arg, const struct sbx_exit *ex)
{
	(void)ex;
	s_end(arg, NULL);
}

static void
s_error(void *arg, const struct sbx_err *err)
{
	s_end(arg, err);
}

static void
s_room(void *arg)
{
	pump(arg);
}

/* The session of c's phase, its request queued in c->out. */
static int
session_open(struct api_cdp *c, struct sbx_err *err)
{
	struct sbx_session_req sr;
	struct sbx_sink sink;
	int r;

	evbuffer_drain(c->out, evbuffer_get_length(c->out));
	if (c->phase == P_LIST)
		r = evbuffer_add_printf(c->out, "GET /json/list HTTP/1.1\r\n"
		    "Host: 127.0.0.1:%u\r\nAccept: application/json\r\n"
		    "Connection: close\r\n\r\n", c->port);
	else {
		sbx_ws_client_key(c->key);
		r = evbuffer_add_printf(c->out, "GET /devtools/page/%s "
		    "HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nUpgrade: websocket\r\n"
		    "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
		    "Sec-WebSocket-Version: 13\r\n\r\n", c->page, c->port,
		    c->key);
	}
	if (r < 0)
		return sbx_err_oom(err);
	memset(&sr, 0, sizeof(sr));
	sr.kind = SBX_SESSION_PORT;
	sr.port = (int)c->port;
	memset(&sink, 0, sizeof(sink));
	sink.start = s_start;
	sink.output = s_output;
	sink.exit = s_exit;
	sink.error = s_error;
	sink.room = s_room;
	sink.arg = c;
	c->started = 0;
	if ((c->op = sbx_session_open(c->s->driver, c->sandbox, &sr, &sink,
	    err)) == NULL)
		return -1;
	return 0;
}

struct api_cdp *
api_cdp_open(struct api_server *s, const char *sandbox, unsigned port,
    size_t msg_max, int64_t deadline_ms, const struct api_cdp_ops *ops,
    void *arg, struct sbx_err *err)
{
	struct api_cdp *c;

	if (port == 0 || port > 65535 || strlen(sandbox) >= 64) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The browser's DevTools "
		    "port or sandbox is out of range.");
		return NULL;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL ||
	    (c->in = evbuffer_new()) == NULL ||
	    (c->out = evbuffer_new()) == NULL ||
	    (c->timer = evtimer_new(s->base, timer_fire, c)) == NULL) {
		if (c != NULL)
			really_free(c);
		sbx_err_oom(err);
		return NULL;
	}
	c->s = s;
	snprintf(c->sandbox, sizeof(c->sandbox), "%s", sandbox);
	c->port = port;
	c->msg_max = msg_max;
	c->ops = ops;
	c->arg = arg;
	c->phase = P_LIST;
	if (session_open(c, err) == -1) {
		really_free(c);
		return NULL;
	}
	api_cdp_deadline(c, deadline_ms);
	return c;
}
