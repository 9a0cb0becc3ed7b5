/* sbx_ws.c - RFC 6455 WebSocket connections on a bufferevent through libwslay's event API (adr/0052), and the opening handshake's checks; touches only the bufferevent it is given. */
#include <sys/queue.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <nettle/sha1.h>
#include <sodium.h>
#include <wslay/wslay.h>

#include "sbx_bev.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_ws.h"
#include "sbx_ws_fast.h"

#define DEF_MESSAGE_MAX ((size_t)1024 * 1024)
#define DEF_HIGH_WATER ((size_t)1024 * 1024)
/* Bytes read from the socket ahead of wslay: bounds the input buffer while
 * the owner has paused reading; read in one piece (sbx_bev_fill). */
#define READ_AHEAD ((size_t)SBX_BEV_IO_MAX)
/* How long a close this side started waits for the peer's. */
#define CLOSE_WAIT_MS 5000
/* A client's binary message at least this long is framed and masked by
 * sbx_ws_fast (8 bytes a step), not by libwslay (a byte a step). */
#define FAST_SEND_MIN 1024
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

struct sbx_ws {
	struct bufferevent *bev;      /* NULL once the connection ended */
	wslay_event_context_ptr ctx;
	enum sbx_ws_role role;
	struct sbx_ws_limits lim;
	const struct sbx_ws_ops *ops;
	void *arg;
	struct event *timer;          /* pings, silence, the close wait */
	struct event *kick;           /* process input on the next turn */
	struct evbuffer *msg;         /* the data message being received */
	struct sbx_ws_fast fast;      /* the server's input on its way to
	                               * libwslay (sbx_ws_fast.h) */
	struct evbuffer *pending;     /* a taken frame's unmasked payload */
	struct evbuffer *held;        /* whole messages libwslay parsed from
	                               * its own buffer after the owner paused
	                               * reading: [text byte][u64 len][bytes]... */
	int msg_text;                 /* its first frame was text */
	int rejecting;                /* a message over the cap: close 1009 sent */
	int in_ctrl;                  /* the frame being read is a control frame */
	int in_recv;                  /* inside wslay_event_recv */
	int64_t last_rx_ms;
	int64_t close_by_ms;          /* 0: no close of ours waits */
	int out_paused;               /* ops->pause(arg, 1) in force */
	int read_paused;              /* sbx_ws_read_pause(ws, 1) */
	int failed;                   /* we closed because the peer broke a rule:
	                               * do not wait for its close */
	int my_code;                  /* the code we sent first (0: none) */
	char my_reason[SBX_WS_REASON_MAX + 1];
	char peer_reason[SBX_WS_REASON_MAX + 1];
	int depth;                    /* inside our own processing */
	int dead;                     /* sbx_ws_free was called */
	int ended;
	int io_failed;                /* recv_cb failed (not a parse error) */
	int raw_closed;               /* our close went out beside libwslay
	                               * (close_raw) */
};

static void ws_end(struct sbx_ws *ws, int code, const char *reason);

static void
bev_release(struct sbx_ws *ws)
{
	if (ws->bev == NULL)
		return;
	if (ws->ops->release != NULL)
		ws->ops->release(ws->arg, ws->bev);
	bufferevent_free(ws->bev);
	ws->bev = NULL;
}
static void ws_flush(struct sbx_ws *ws);

/* ------------------------------------------------------------------ */
/* libwslay's callbacks                                                */

static ssize_t
recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
    void *user)
{
	struct sbx_ws *ws = user;
	struct evbuffer *in;
	int n;

	(void)flags;
	if (ws->bev == NULL || ws->read_paused || ws->dead) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	in = bufferevent_get_input(ws->bev);
	if (ws->role == SBX_WS_SERVER) {
		/* binary payloads are unmasked there, a word at a time */
		size_t before = evbuffer_get_length(in);
		long r = sbx_ws_fast_recv(&ws->fast, in, ws->pending,
		    ws->lim.message_max, buf, len);

		/* a large frame's payload arriving is the peer alive too */
		if (evbuffer_get_length(in) != before)
			ws->last_rx_ms = sbx_mono_ms();
		if (r <= 0) {
			ws->io_failed = r < 0;
			wslay_event_set_error(ctx, r == 0 ? WSLAY_ERR_WOULDBLOCK :
			    WSLAY_ERR_NOMEM);
			return -1;
		}
		ws->last_rx_ms = sbx_mono_ms();
		return r;
	}
	if (evbuffer_get_length(in) == 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	n = evbuffer_remove(in, buf, len);
	if (n <= 0) {
		ws->io_failed = 1;
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	ws->last_rx_ms = sbx_mono_ms();
	return n;
}

static ssize_t
send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len,
    int flags, void *user)
{
	struct sbx_ws *ws = user;

	(void)flags;
	if (ws->bev == NULL || bufferevent_write(ws->bev, data, len) != 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return (ssize_t)len;
}

static int
genmask_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
	(void)ctx;
	(void)user;
	randombytes_buf(buf, len);
	return 0;
}

/* Queues our close (code + reason cut at a UTF-8 boundary). */
static void
queue_close(struct sbx_ws *ws, int code, const char *reason)
{
	size_t n = reason != NULL ? strlen(reason) : 0;

	if (n > SBX_WS_REASON_MAX) {
		n = SBX_WS_REASON_MAX;
		while (n > 0 && ((unsigned char)reason[n] & 0xc0) == 0x80)
			n--;
	}
	if (wslay_event_queue_close(ws->ctx, (uint16_t)code,
	    (const uint8_t *)reason, n) != 0)
		return;
	ws->my_code = code;
	if (n > 0)
		memcpy(ws->my_reason, reason, n);
	ws->my_reason[n] = '\0';
	ws->close_by_ms = sbx_mono_ms() + CLOSE_WAIT_MS;
}

/*
 * A close written beside libwslay, for when its parser refused a frame's
 * header (RFC 6455 §5.5: a control frame over 125 bytes or fragmented;
 * §5.2: a 64-bit length with its top bit set): it then queues a close
 * without a code and fails, and a second close cannot be queued. Its queue
 * is dropped and this one written instead (masked with a random key when we
 * are the client, §5.3), so the peer reads the code, as for the frames
 * libwslay judges after parsing; check_done ends once it is written.
 */
static void
close_raw(struct sbx_ws *ws, int code, const char *reason)
{
	unsigned char f[2 + 4 + 2 + SBX_WS_REASON_MAX], p[2 + SBX_WS_REASON_MAX];
	size_t n = strlen(reason), h = 2;

	if (n > SBX_WS_REASON_MAX)
		n = SBX_WS_REASON_MAX;
	p[0] = (unsigned char)(code >> 8);
	p[1] = (unsigned char)code;
	memcpy(p + 2, reason, n);
	f[0] = 0x88;
	f[1] = (unsigned char)(2 + n);
	if (ws->role == SBX_WS_CLIENT) {
		f[1] |= 0x80;
		randombytes_buf(f + 2, 4);
		sbx_ws_fast_mask(f + 6, p, 2 + n, f + 2, 0);
		h = 6;
	} else
		memcpy(f + 2, p, 2 + n);
	wslay_event_shutdown_read(ws->ctx);
	wslay_event_shutdown_write(ws->ctx);
	ws->failed = 1;
	ws->raw_closed = 1;
	ws->my_code = code;
	memcpy(ws->my_reason, reason, n);
	ws->my_reason[n] = '\0';
	ws->close_by_ms = sbx_mono_ms() + CLOSE_WAIT_MS;
	if (ws->bev == NULL ||
	    bufferevent_write(ws->bev, f, h + 2 + n) != 0)
		ws_end(ws, code, ws->my_reason);
}

static void
frame_start_cb(wslay_event_context_ptr ctx,
    const struct wslay_event_on_frame_recv_start_arg *a, void *user)
{
	struct sbx_ws *ws = user;
	char why[SBX_WS_REASON_MAX + 1];

	ws->in_ctrl = wslay_is_ctrl_frame(a->opcode);
	if (ws->in_ctrl || ws->rejecting)
		return;
	if (a->opcode != WSLAY_CONTINUATION_FRAME) {
		ws->msg_text = a->opcode == WSLAY_TEXT_FRAME;
		evbuffer_drain(ws->msg, evbuffer_get_length(ws->msg));
	}
	/* Checked per frame before its payload is read, so a message never
	 * holds more than the cap (RFC 6455 §10.4). */
	if (a->payload_length > ws->lim.message_max -
	    evbuffer_get_length(ws->msg)) {
		snprintf(why, sizeof(why), "A message is larger than "
		    "ws_message_max (%zu bytes).", ws->lim.message_max);
		ws->rejecting = 1;
		ws->failed = 1;
		queue_close(ws, SBX_WS_TOO_BIG, why);
		wslay_event_shutdown_read(ctx);
		return;
	}
	/* A frame sbx_ws_fast took: its payload, unmasked, joins here. */
	if (sbx_ws_fast_taken(&ws->fast, a->payload_length) &&
	    evbuffer_add_buffer(ws->msg, ws->pending) != 0) {
		ws->rejecting = 1;
		ws->failed = 1;
		queue_close(ws, SBX_WS_INTERNAL, "Out of memory.");
		wslay_event_shutdown_read(ctx);
	}
}

static void
frame_chunk_cb(wslay_event_context_ptr ctx,
    const struct wslay_event_on_frame_recv_chunk_arg *a, void *user)
{
	struct sbx_ws *ws = user;

	(void)ctx;
	/* Control frames wslay buffers itself (at most 125 bytes, §5.5). */
	if (ws->rejecting || ws->in_ctrl || a->data_length == 0)
		return;
	if (evbuffer_add(ws->msg, a->data, a->data_length) != 0) {
		ws->rejecting = 1;
		ws->failed = 1;
		queue_close(ws, SBX_WS_INTERNAL, "Out of memory.");
		wslay_event_shutdown_read(ctx);
	}
}

static void
msg_cb(wslay_event_context_ptr ctx,
    const struct wslay_event_on_msg_recv_arg *a, void *user)
{
	struct sbx_ws *ws = user;
	unsigned char *p;
	size_t n;

	(void)ctx;
	if (ws->dead || ws->rejecting)
		return;
	if (a->opcode == WSLAY_CONNECTION_CLOSE && a->msg_length > 2) {
		/* wslay answers it with the same code and reason (§5.5.1) */
		n = a->msg_length - 2;
		if (n > SBX_WS_REASON_MAX)
			n = SBX_WS_REASON_MAX;
		memcpy(ws->peer_reason, a->msg + 2, n);
		ws->peer_reason[n] = '\0';
	}
	if (a->opcode != WSLAY_TEXT_FRAME && a->opcode != WSLAY_BINARY_FRAME)
		return;  /* wslay answered a ping itself */
	n = evbuffer_get_length(ws->msg);
	if (ws->read_paused || evbuffer_get_length(ws->held) > 0) {
		/* libwslay reads ahead up to 4 KiB into a buffer of its own:
		 * what it parses from there after a pause waits here */
		unsigned char h[9];
		uint64_t len = n;

		h[0] = a->opcode == WSLAY_TEXT_FRAME;
		memcpy(h + 1, &len, 8);
		if (evbuffer_add(ws->held, h, 9) != 0 ||
		    evbuffer_add_buffer(ws->held, ws->msg) != 0) {
			ws->failed = 1;
			queue_close(ws, SBX_WS_INTERNAL, "Out of memory.");
			wslay_event_shutdown_read(ctx);
		}
		return;
	}
	p = n > 0 ? evbuffer_pullup(ws->msg, -1) : (unsigned char *)"";
	if (n > 0 && p == NULL) {
		ws->failed = 1;
		queue_close(ws, SBX_WS_INTERNAL, "Out of memory.");
		wslay_event_shutdown_read(ctx);
		return;
	}
	if (ws->ops->message != NULL)
		ws->ops->message(ws->arg, a->opcode == WSLAY_TEXT_FRAME, p, n);
	if (!ws->dead)
		evbuffer_drain(ws->msg, n);
}

/* ------------------------------------------------------------------ */
/* The connection                                                      */

static void
ws_end(struct sbx_ws *ws, int code, const char *reason)
{
	if (ws->ended)
		return;
	ws->ended = 1;
	bev_release(ws);
	if (ws->timer != NULL)
		evtimer_del(ws->timer);
	if (!ws->dead && ws->ops->closed != NULL)
		ws->ops->closed(ws->arg, code, reason != NULL ? reason : "");
}

/* The connection is over when both closes went, or ours went and we read
 * no more (we failed the connection: 1009, silence, or libwslay's 1002 and
 * 1007), and everything was written. */
static void
check_done(struct sbx_ws *ws)
{
	int recvd;

	if (ws->ended || ws->bev == NULL)
		return;
	if (!wslay_event_get_close_sent(ws->ctx) && !ws->raw_closed)
		return;
	/* Messages libwslay parsed before the peer's close, held while the
	 * owner paused reading, go first (deliver_held, on the resume). */
	if (evbuffer_get_length(ws->held) > 0)
		return;
	recvd = wslay_event_get_close_received(ws->ctx);
	if (!recvd && wslay_event_get_read_enabled(ws->ctx))
		return;  /* the peer's close is awaited (at most CLOSE_WAIT_MS) */
	if (evbuffer_get_length(bufferevent_get_output(ws->bev)) > 0)
		return;  /* the write callback comes back here */
	if (ws->my_code != 0)
		ws_end(ws, ws->my_code, ws->my_reason);
	else if (!recvd)
		ws_end(ws, wslay_event_get_status_code_sent(ws->ctx), "");
	else
		ws_end(ws, wslay_event_get_status_code_received(ws->ctx),
		    ws->peer_reason);
}

/* Hands what wslay queued to the bufferevent; tells the producer when
 * the output passed high water. */
static void
ws_flush(struct sbx_ws *ws)
{
	size_t out;

	if (ws->ended || ws->bev == NULL)
		return;
	if (wslay_event_want_write(ws->ctx) &&
	    wslay_event_send(ws->ctx) != 0) {
		ws_end(ws, SBX_WS_ABNORMAL, "");
		return;
	}
	out = evbuffer_get_length(bufferevent_get_output(ws->bev));
	if (!ws->out_paused && out > ws->lim.high_water) {
		ws->out_paused = 1;
		if (ws->ops->pause != NULL)
			ws->ops->pause(ws->arg, 1);
	}
}

/* Messages held while reading was paused, in order, until the owner
 * pauses again. */
static void
deliver_held(struct sbx_ws *ws)
{
	unsigned char h[9], *p;
	uint64_t len;

	while (!ws->read_paused && !ws->dead && !ws->ended &&
	    evbuffer_get_length(ws->held) >= 9) {
		evbuffer_remove(ws->held, h, 9);
		memcpy(&len, h + 1, 8);
		p = len > 0 ? evbuffer_pullup(ws->held, (ssize_t)len) :
		    (unsigned char *)"";
		if (p == NULL) {
			ws_end(ws, SBX_WS_ABNORMAL, "");
			return;
		}
		if (ws->ops->message != NULL)
			ws->ops->message(ws->arg, h[0], p, (size_t)len);
		if (!ws->dead)
			evbuffer_drain(ws->held, (size_t)len);
	}
}

static void
ws_process(struct sbx_ws *ws)
{
	int rc;

	if (ws->ended || ws->dead)
		return;
	ws->depth++;
	deliver_held(ws);
	if (wslay_event_want_read(ws->ctx) && !ws->read_paused &&
	    evbuffer_get_length(ws->held) == 0) {
		ws->in_recv = 1;
		rc = wslay_event_recv(ws->ctx);
		ws->in_recv = 0;
		if (rc != 0 && !ws->ended && !ws->dead && !ws->io_failed &&
		    ws->bev != NULL && !wslay_event_get_close_sent(ws->ctx))
			close_raw(ws, SBX_WS_PROTOCOL_ERROR,
			    "A frame broke RFC 6455.");
		else if (rc != 0 && !ws->ended) {
			ws->depth--;
			ws_end(ws, SBX_WS_ABNORMAL, "");
			return;
		}
	}
	if (!ws->ended && !ws->dead) {
		ws_flush(ws);
		check_done(ws);
	}
	ws->depth--;
	if (ws->dead && ws->depth == 0)
		sbx_ws_free(ws);
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
	(void)sbx_bev_fill(bev, READ_AHEAD);
	ws_process(arg);
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	struct sbx_ws *ws = arg;

	(void)bev;
	ws->depth++;
	if (ws->out_paused && evbuffer_get_length(bufferevent_get_output(
	    ws->bev)) <= ws->lim.high_water / 2) {
		ws->out_paused = 0;
		if (ws->ops->pause != NULL && !ws->dead)
			ws->ops->pause(ws->arg, 0);
	}
	if (!ws->dead)
		check_done(ws);
	ws->depth--;
	if (ws->dead && ws->depth == 0)
		sbx_ws_free(ws);
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct sbx_ws *ws = arg;
	char reason[SBX_WS_REASON_MAX + 1];
	int code = SBX_WS_ABNORMAL;

	(void)bev;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	ws->depth++;
	/* Frames that arrived with the EOF are read first. */
	ws_process(ws);
	if (!ws->ended && !ws->dead) {
		reason[0] = '\0';
		if (wslay_event_get_close_received(ws->ctx)) {
			code = wslay_event_get_status_code_received(ws->ctx);
			snprintf(reason, sizeof(reason), "%s", ws->peer_reason);
		}
		if (ws->my_code != 0 && (ws->raw_closed ||
		    wslay_event_get_close_sent(ws->ctx))) {
			code = ws->my_code;
			snprintf(reason, sizeof(reason), "%s", ws->my_reason);
		}
		ws_end(ws, code, reason);
	}
	ws->depth--;
	if (ws->dead && ws->depth == 0)
		sbx_ws_free(ws);
}

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	ws_process(arg);
}

static void
timer_tick(struct sbx_ws *ws)
{
	struct wslay_event_msg ping = { WSLAY_PING, NULL, 0 };
	int64_t now = sbx_mono_ms();

	if (ws->close_by_ms != 0 && now >= ws->close_by_ms)
		ws_end(ws, ws->my_code, ws->my_reason);
	else if (ws->lim.ping_ms > 0 &&
	    now - ws->last_rx_ms >= 2 * ws->lim.ping_ms) {
		ws->failed = 1;
		queue_close(ws, SBX_WS_GOING_AWAY,
		    "Nothing arrived for two ping intervals.");
		wslay_event_shutdown_read(ws->ctx);
		ws_flush(ws);
		/* a peer that does not answer pings does not read either */
		ws_end(ws, SBX_WS_GOING_AWAY, ws->my_reason);
	} else {
		if (ws->role == SBX_WS_SERVER && ws->lim.ping_ms > 0)
			(void)wslay_event_queue_msg(ws->ctx, &ping);
		ws_flush(ws);
	}
}

/* The timer fires every ping interval, or every second while a close of
 * ours waits (and without pings). */
static void
arm_timer(struct sbx_ws *ws)
{
	struct timeval tv;
	int64_t ms = ws->lim.ping_ms > 0 ? ws->lim.ping_ms : 1000;

	if (ws->close_by_ms != 0 && ms > 1000)
		ms = 1000;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(ws->timer, &tv);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_ws *ws = arg;

	(void)fd;
	(void)what;
	if (ws->ended || ws->dead)
		return;
	ws->depth++;
	timer_tick(ws);
	if (!ws->ended && !ws->dead)
		arm_timer(ws);
	ws->depth--;
	if (ws->dead && ws->depth == 0)
		sbx_ws_free(ws);
}

static const struct wslay_event_callbacks wslay_cbs = {
	recv_cb, send_cb, genmask_cb, frame_start_cb, frame_chunk_cb, NULL,
	msg_cb,
};

struct sbx_ws *
sbx_ws_new(struct bufferevent *bev, enum sbx_ws_role role,
    const struct sbx_ws_limits *lim, const struct sbx_ws_ops *ops, void *arg,
    struct sbx_err *err)
{
	static const struct sbx_ws_ops none;
	struct event_base *base = bufferevent_get_base(bev);
	struct sbx_ws *ws;
	int rc;

	if ((ws = calloc(1, sizeof(*ws))) == NULL)
		goto oom;
	ws->role = role;
	if (lim != NULL)
		ws->lim = *lim;
	if (ws->lim.message_max == 0)
		ws->lim.message_max = DEF_MESSAGE_MAX;
	if (ws->lim.high_water == 0)
		ws->lim.high_water = DEF_HIGH_WATER;
	ws->ops = ops != NULL ? ops : &none;
	ws->arg = arg;
	rc = role == SBX_WS_SERVER ?
	    wslay_event_context_server_init(&ws->ctx, &wslay_cbs, ws) :
	    wslay_event_context_client_init(&ws->ctx, &wslay_cbs, ws);
	if (rc != 0) {
		ws->ctx = NULL;
		goto oom;
	}
	/* Data frames come to frame_chunk_cb, joined in ws->msg under our
	 * cap; wslay's own cap then guards nothing we need. */
	wslay_event_config_set_no_buffering(ws->ctx, 1);
	wslay_event_config_set_max_recv_msg_length(ws->ctx, UINT64_MAX >> 1);
	sbx_ws_fast_init(&ws->fast);
	if ((ws->msg = evbuffer_new()) == NULL ||
	    (ws->pending = evbuffer_new()) == NULL ||
	    (ws->held = evbuffer_new()) == NULL ||
	    (ws->timer = event_new(base, -1, 0, timer_cb, ws)) == NULL ||
	    (ws->kick = event_new(base, -1, 0, kick_cb, ws)) == NULL)
		goto oom;
	ws->bev = bev;
	ws->last_rx_ms = sbx_mono_ms();
	bufferevent_setcb(bev, read_cb, write_cb, event_cb, ws);
	bufferevent_setwatermark(bev, EV_READ, 0, READ_AHEAD);
	bufferevent_setwatermark(bev, EV_WRITE, ws->lim.high_water / 2, 0);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	arm_timer(ws);
	event_active(ws->kick, 0, 0);
	return ws;
oom:
	if (ops != NULL && ops->release != NULL)
		ops->release(arg, bev);
	if (ws != NULL) {
		ws->bev = NULL;
		ws->ended = 1;
		ws->dead = 1;
		sbx_ws_free(ws);
	}
	bufferevent_free(bev);
	sbx_err_oom(err);
	return NULL;
}

int
sbx_ws_send(struct sbx_ws *ws, int text, const void *a, size_t an,
    const void *b, size_t bn)
{
	struct wslay_event_msg m;
	unsigned char *buf = NULL;
	int rc;

	if (ws == NULL || ws->ended || ws->dead ||
	    !wslay_event_get_write_enabled(ws->ctx) || ws->my_code != 0)
		return -1;
	if (ws->role == SBX_WS_CLIENT && !text && an + bn >= FAST_SEND_MIN &&
	    !wslay_event_want_write(ws->ctx)) {
		/* Nothing of libwslay's is queued or half sent: this frame
		 * goes whole after what it wrote (§5.3 key, §5.2 header). */
		unsigned char key[4];

		randombytes_buf(key, sizeof(key));
		if (sbx_ws_fast_client_frame(bufferevent_get_output(ws->bev), key,
		    a, an, b, bn) != 0)
			return -1;
		if (!ws->in_recv)
			ws_flush(ws);
		return 0;
	}
	m.opcode = text ? WSLAY_TEXT_FRAME : WSLAY_BINARY_FRAME;
	if (bn == 0) {
		m.msg = a;
		m.msg_length = an;
	} else {
		if ((buf = malloc(an + bn)) == NULL)
			return -1;
		if (an > 0)
			memcpy(buf, a, an);
		memcpy(buf + an, b, bn);
		m.msg = buf;
		m.msg_length = an + bn;
	}
	rc = wslay_event_queue_msg(ws->ctx, &m);
	free(buf);
	if (rc != 0)
		return -1;
	/* Inside wslay's read the flush follows when it returns. */
	if (!ws->in_recv)
		ws_flush(ws);
	return 0;
}

int
sbx_ws_send_json(struct sbx_ws *ws, json_t *o)
{
	char *t;
	int rc;

	if (o == NULL)
		return -1;
	t = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (t == NULL)
		return -1;
	rc = sbx_ws_send(ws, 1, t, strlen(t), NULL, 0);
	free(t);
	return rc;
}

void
sbx_ws_close(struct sbx_ws *ws, int code, const char *reason)
{
	if (ws == NULL || ws->ended || ws->dead || ws->my_code != 0 ||
	    wslay_event_get_close_sent(ws->ctx))
		return;
	queue_close(ws, code, reason);
	if (ws->my_code == 0)
		return;
	ws_flush(ws);
	if (!ws->ended) {
		evtimer_del(ws->timer);
		arm_timer(ws);
		check_done(ws);
	}
}

void
sbx_ws_read_pause(struct sbx_ws *ws, int on)
{
	if (ws == NULL || ws->ended || ws->dead || ws->read_paused == !!on)
		return;
	ws->read_paused = !!on;
	if (on)
		bufferevent_disable(ws->bev, EV_READ);
	else {
		bufferevent_enable(ws->bev, EV_READ);
		event_active(ws->kick, 0, 0);
	}
}

size_t
sbx_ws_output_len(const struct sbx_ws *ws)
{
	if (ws == NULL || ws->bev == NULL)
		return 0;
	return evbuffer_get_length(bufferevent_get_output(ws->bev));
}

void
sbx_ws_free(struct sbx_ws *ws)
{
	if (ws == NULL)
		return;
	ws->dead = 1;
	if (ws->depth > 0)
		return;  /* the outermost of our frames frees it */
	bev_release(ws);
	if (ws->timer != NULL)
		event_free(ws->timer);
	if (ws->kick != NULL)
		event_free(ws->kick);
	if (ws->msg != NULL)
		evbuffer_free(ws->msg);
	if (ws->pending != NULL)
		evbuffer_free(ws->pending);
	if (ws->held != NULL)
		evbuffer_free(ws->held);
	if (ws->ctx != NULL)
		wslay_event_context_free(ws->ctx);
	free(ws);
}

/* ------------------------------------------------------------------ */
/* Handshake                                                           */

/* 1 when the comma list v holds token, OWS around each element; case 1:
 * compared case-insensitively (Connection, Upgrade: RFC 9110 §7.6.1,
 * §7.8), 0: byte for byte (Sec-WebSocket-Protocol, RFC 6455 §4.1). */
static int
list_has(const char *v, const char *token, int nocase)
{
	size_t tl = strlen(token), n;
	const char *e;

	if (v == NULL)
		return 0;
	while (*v != '\0') {
		while (*v == ' ' || *v == '\t' || *v == ',')
			v++;
		for (e = v; *e != '\0' && *e != ','; e++)
			;
		n = (size_t)(e - v);
		while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
			n--;
		if (n == tl && (nocase ? strncasecmp(v, token, tl) :
		    memcmp(v, token, tl)) == 0)
			return 1;
		v = e;
	}
	return 0;
}

static int
has_token(const char *v, const char *token)
{
	return list_has(v, token, 1);
}

static int
has_exact(const char *v, const char *protocol)
{
	return list_has(v, protocol, 0);
}

int
sbx_ws_accept_value(const char *key, char out[SBX_WS_ACCEPT_LEN + 1])
{
	struct sha1_ctx c;
	uint8_t d[SHA1_DIGEST_SIZE];
	size_t kl = strlen(key);

	if (kl > 64)
		return -1;
	sha1_init(&c);
	sha1_update(&c, kl, (const uint8_t *)key);
	sha1_update(&c, sizeof(WS_GUID) - 1, (const uint8_t *)WS_GUID);
	sha1_digest(&c, sizeof(d), d);
	sodium_bin2base64(out, SBX_WS_ACCEPT_LEN + 1, d, sizeof(d),
	    sodium_base64_VARIANT_ORIGINAL);
	return 0;
}

void
sbx_ws_head_fields(struct sbx_ws_head *h, const struct evkeyvalq *hd,
    const char *want)
{
	const struct evkeyval *kv;

	h->upgrade = h->connection = h->version = h->key = h->protocol = NULL;
	h->keys = 0;
	TAILQ_FOREACH(kv, hd, next) {
		if (strcasecmp(kv->key, "Upgrade") == 0 && h->upgrade == NULL)
			h->upgrade = kv->value;
		else if (strcasecmp(kv->key, "Connection") == 0 &&
		    h->connection == NULL)
			h->connection = kv->value;
		else if (strcasecmp(kv->key, "Sec-WebSocket-Version") == 0 &&
		    h->version == NULL)
			h->version = kv->value;
		else if (strcasecmp(kv->key, "Sec-WebSocket-Key") == 0) {
			if (h->keys++ == 0)
				h->key = kv->value;
		} else if (strcasecmp(kv->key, "Sec-WebSocket-Protocol") == 0 &&
		    (h->protocol == NULL || (want != NULL &&
		    !has_exact(h->protocol, want) &&
		    has_exact(kv->value, want))))
			h->protocol = kv->value;
	}
}

int
sbx_ws_handshake_check(const struct sbx_ws_head *h, const char *protocol,
    char accept[SBX_WS_ACCEPT_LEN + 1], struct sbx_err *err)
{
	unsigned char raw[32];
	size_t rawlen = 0;

	if (!h->is_get || !h->http11)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A WebSocket "
		    "opens with a GET on HTTP/1.1 (RFC 6455 section 4.1).");
	if (!has_token(h->upgrade, "websocket"))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "This route speaks "
		    "only WebSocket: send 'Upgrade: websocket'.");
	if (!has_token(h->connection, "upgrade"))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A WebSocket "
		    "request needs 'Connection: Upgrade'.");
	if (h->version == NULL || strcmp(h->version, "13") != 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Only WebSocket "
		    "version 13 is spoken: send 'Sec-WebSocket-Version: 13'.");
	if (h->keys > 1)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Send "
		    "Sec-WebSocket-Key once (RFC 6455 section 11.3.1).");
	if (h->key == NULL || strlen(h->key) != SBX_WS_KEY_LEN ||
	    sodium_base642bin(raw, sizeof(raw), h->key, SBX_WS_KEY_LEN, NULL,
	    &rawlen, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    rawlen != 16)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Sec-WebSocket-Key "
		    "must be 16 random bytes in base64 (24 characters).");
	if (protocol != NULL && !has_exact(h->protocol, protocol))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Offer the "
		    "subprotocol '%s' in Sec-WebSocket-Protocol.", protocol);
	if (sbx_ws_accept_value(h->key, accept) != 0)
		return sbx_err_set(err, SBX_E_INTERNAL, "%s", SBX_MSG_INTERNAL);
	return 0;
}

void
sbx_ws_client_key(char key[SBX_WS_KEY_LEN + 1])
{
	unsigned char raw[16];

	randombytes_buf(raw, sizeof(raw));
	sodium_bin2base64(key, SBX_WS_KEY_LEN + 1, raw, sizeof(raw),
	    sodium_base64_VARIANT_ORIGINAL);
}

int
sbx_ws_client_check(int status, const char *upgrade, const char *connection,
    const char *accept, const char *protocol_got, const char *key,
    const char *protocol, struct sbx_err *err)
{
	char want[SBX_WS_ACCEPT_LEN + 1];

	if (status != 101)
		return sbx_err_set(err, SBX_WS_E_HANDSHAKE, "The server did "
		    "not switch to WebSocket (HTTP %d).", status);
	if (!has_token(upgrade, "websocket") ||
	    !has_token(connection, "upgrade"))
		return sbx_err_set(err, SBX_WS_E_HANDSHAKE, "The server's "
		    "answer lacks 'Upgrade: websocket' or 'Connection: "
		    "Upgrade'.");
	if (sbx_ws_accept_value(key, want) != 0 || accept == NULL ||
	    strcmp(accept, want) != 0)
		return sbx_err_set(err, SBX_WS_E_HANDSHAKE, "The server's "
		    "Sec-WebSocket-Accept does not match the key sent.");
	if (protocol != NULL && (protocol_got == NULL ||
	    strcmp(protocol_got, protocol) != 0))
		return sbx_err_set(err, SBX_WS_E_HANDSHAKE, "The server did "
		    "not choose the subprotocol '%s'.", protocol);
	return 0;
}
