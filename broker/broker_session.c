/*
 * broker_session.c - POST /v1/sandboxes/{id}/session (proto/broker-api.md
 * "Sessions", adr/0050): the body checked within the broker's ceilings, the
 * session opened through the driver (sbx_session_open), and once it started
 * the connection upgraded to "sbx-session/1" (sbx_httpd_upgrade) and made a
 * link that carries the agent's frames (proto/sbx_agent.h) on stream 1 both
 * ways: input, EOF, control and output credit from the api; output, input
 * credit and the EVENT records (start, exit, error) to it. Memory per link
 * is constant: the api may send no more input than the credit given, the
 * broker sends no more output than the api's credit and pauses the session
 * while it has none. A handler: it reaches the request layer through
 * broker_int.h only (adr/0036).
 */
#include <sys/socket.h>
#include <sys/uio.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "broker_int.h"
#include "broker_metrics.h"
#include "sbx_agent.h"
#include "sbx_bev.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_wire.h"

#define LINK_STREAM 1
/* Input credit goes back in WINDOW frames of at least this many bytes,
 * or whatever was taken when the input ran dry while the api holds less
 * than this: small grants make small DATA frames, which make small grants
 * (the silly window of RFC 813; adr/0050, amendment 2026-12-02). */
#define GRANT_MIN (SBX_AGENT_STDIN_WINDOW / 4)
/* Output the session produced past the api's credit (what was in flight
 * when it was paused: the agent's window and one frame) is held here; more
 * breaks the driver's pause and ends the link. A port connection's window
 * is a bulk stream's 1 MiB (SBX_AGENT_STDIN_WINDOW's size; the engine
 * driver's DIRECT_OUT_WINDOW, adr/0053 amendment of session 11). */
#define HELD_MAX (2 * SBX_AGENT_STDIN_WINDOW + 2 * SBX_AGENT_DATA_MAX)
/* The last frames get this long to reach the api. */
#define FLUSH_TIMEOUT_S 10

struct blink {
	struct breq *b;
	struct sbx_wire_session ws;     /* the body, decoded (borrows b->body) */
	struct bufferevent *bev;        /* NULL until upgraded */
	struct sbx_agent_dec dec;
	unsigned char rec[16];          /* CTRL, WINDOW payloads */
	struct evbuffer *in;            /* input not yet taken by the session */
	struct evbuffer *held;          /* output records past the credit:
	                                 * [stream][u32 len][bytes] */
	size_t held_left;               /* bytes of the front record left */
	int held_stream;
	uint64_t in_avail;              /* credit the api holds for input */
	uint64_t grant;                 /* taken input not yet credited back */
	uint64_t out_credit;            /* output bytes the api will take */
	int paused;                     /* the session is paused by us */
	int eof_in, closed_in;          /* EOF came; told the session */
	int ending;                     /* last frame queued: flush, then end */
	int cancelled;                  /* the api sent CANCEL */
	int shut;                       /* ending: our side shut down */
	struct evbuffer *final;         /* the last EVENT, waiting for held output */
	char outcome[48];
};

static struct blink *
link_of(struct breq *b)
{
	return b->slink;
}

/* ---------- frames to the api ---------- */

static void
put_frame(struct blink *l, int type, int flags, const void *p, uint32_t len)
{
	unsigned char h[SBX_AGENT_HDR];
	struct iovec v[2] = { { h, sizeof(h) }, { (void *)p, len } };

	sbx_agent_hdr_put(h, type, flags, LINK_STREAM, len);
	/* Straight to the api's socket when nothing waits (no copy). */
	(void)sbx_bev_write(l->bev, v, len > 0 ? 2 : 1);
}

/* One EVENT: an exec event line of proto/broker-api.md without its '\n'. */
static void
put_event(struct blink *l, struct evbuffer *line)
{
	size_t n = evbuffer_get_length(line);

	if (n > 1 && n - 1 <= SBX_AGENT_EVENT_MAX)
		put_frame(l, SBX_AGENT_T_EVENT, 0, evbuffer_pullup(line, -1),
		    (uint32_t)(n - 1));
	evbuffer_drain(line, n);
}

static void
put_window(struct blink *l, uint32_t n)
{
	unsigned char p[SBX_AGENT_WINDOW_LEN];

	sbx_agent_put32(p, n);
	put_frame(l, SBX_AGENT_T_WINDOW, 0, p, sizeof(p));
}

/* ---------- the link's end ---------- */

/* Frees what the link holds; b's detach (once, from breq_free). A link
 * that did not end (the broker stops, the drain's grace is over) sends its
 * error as far as the socket takes it now. */
static void
link_detach(struct breq *b)
{
	struct blink *l = link_of(b);
	struct evbuffer *ev;

	if (l == NULL)
		return;
	b->slink = NULL;
	if (l->bev != NULL) {
		if (!l->ending && (ev = evbuffer_new()) != NULL) {
			sbx_ndjson_error(ev, SBX_E_SHUTTING_DOWN,
			    SBX_MSG_BROKER_DRAINING);
			put_event(l, ev);
			evbuffer_free(ev);
		}
		/* A socket bufferevent keeps its output's start frozen
		 * between its own writes: thawed for this last one. */
		evbuffer_unfreeze(bufferevent_get_output(l->bev), 1);
		(void)evbuffer_write(bufferevent_get_output(l->bev),
		    bufferevent_getfd(l->bev));
		sbx_gate_upgraded_close(b->s->gate, l->bev);
		bufferevent_free(l->bev);
	}
	sbx_wire_session_free(&l->ws);
	if (l->in != NULL)
		evbuffer_free(l->in);
	if (l->held != NULL)
		evbuffer_free(l->held);
	if (l->final != NULL)
		evbuffer_free(l->final);
	free(l);
}

/* The request ends: audit, metrics, the link freed (detach). */
static void
link_finish(struct blink *l)
{
	breq_done(l->b, 101, l->outcome);
}

/* The api is gone, or broke the protocol: the session is cancelled (its
 * processes killed) and the link ends now. */
static void
link_cancel(struct blink *l, const char *outcome, const char *why)
{
	struct sbx_op *op = l->b->op;

	l->b->op = NULL;
	sbx_op_cancel(op);
	if (why != NULL)
		log_warn("session link ended", "id", l->b->id, "reason", why,
		    NULL);
	snprintf(l->outcome, sizeof(l->outcome), "%s", outcome);
	l->ending = 1;   /* nothing more to say: no last EVENT from detach */
	link_finish(l);
}

/* The last frame is queued: what the api still sends is read and dropped
 * (a client blocked in a write would not read the end otherwise). Once
 * the output has gone the broker shuts its side down for writing and
 * ends when the api closes its own (closing while the api's last credit
 * frames were unread would reset a TCP connection and lose the api's
 * unread output), or FLUSH_TIMEOUT_S after the last byte either way. */
static void
link_end(struct blink *l, const char *outcome)
{
	struct timeval tv = { FLUSH_TIMEOUT_S, 0 };

	l->ending = 1;
	if (outcome != l->outcome)
		snprintf(l->outcome, sizeof(l->outcome), "%s", outcome);
	/* The session is over: its place in max_execs_per_sandbox (or
	 * max_port_sessions_per_sandbox) is free while its last bytes go. */
	if (l->b->holds_exec) {
		l->b->holds_exec = 0;
		l->b->sbx->execs--;
	}
	if (l->b->holds_port) {
		l->b->holds_port = 0;
		l->b->sbx->ports--;
	}
	bufferevent_set_timeouts(l->bev, &tv, &tv);
	/* Never from here: the caller may be inside the decoder or a sink
	 * callback. The write callback comes from the loop once the output
	 * is empty (now, if it is already). */
	if (evbuffer_get_length(bufferevent_get_output(l->bev)) == 0)
		bufferevent_trigger(l->bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS |
		    BEV_TRIG_DEFER_CALLBACKS);
}

/* The session is cancelled (its processes killed) and the api hears why. */
static void
link_abort(struct blink *l, const char *code, const char *why)
{
	struct sbx_op *op = l->b->op;
	struct evbuffer *ev = evbuffer_new();

	l->b->op = NULL;
	sbx_op_cancel(op);
	if (ev != NULL) {
		sbx_ndjson_error(ev, code, why);
		put_event(l, ev);
		evbuffer_free(ev);
	}
	link_end(l, code);
}

/* The link broke (the api's frames, or memory). */
static void
link_fail(struct blink *l, const char *code, const char *why)
{
	log_warn("session link broken", "id", l->b->id, "reason", why, NULL);
	link_abort(l, code, why);
}

/* The reaper stops the sandbox under a quiet session (broker_int.h). */
static void
link_reap(struct breq *b, const char *code, const char *why)
{
	struct blink *l = link_of(b);

	if (l == NULL || l->bev == NULL || l->ending)
		return;
	log_info("session ended: its sandbox is stopped idle", "id", b->id,
	    NULL);
	link_abort(l, code, why);
}

/* ---------- output: the session's bytes within the api's credit ---------- */

static void
set_paused(struct blink *l, int on)
{
	if (l->paused == on || l->b->op == NULL)
		return;
	l->paused = on;
	if (on)
		sbx_op_pause(l->b->op);
	else
		sbx_op_resume(l->b->op);
}

static void link_end(struct blink *l, const char *outcome);

/* Sends held output as credit allows; once none is left, the session's
 * last EVENT if it ended meanwhile. */
static void
held_flush(struct blink *l)
{
	unsigned char rh[5], buf[SBX_AGENT_DATA_MAX];
	size_t n;

	while (l->out_credit > 0 && evbuffer_get_length(l->held) > 0) {
		if (l->held_left == 0) {
			evbuffer_remove(l->held, rh, sizeof(rh));
			l->held_stream = rh[0];
			l->held_left = sbx_agent_get32(rh + 1);
			continue;
		}
		n = l->held_left;
		if (n > l->out_credit)
			n = (size_t)l->out_credit;
		if (n > sizeof(buf))
			n = sizeof(buf);
		evbuffer_remove(l->held, buf, n);
		put_frame(l, SBX_AGENT_T_DATA, l->held_stream, buf, (uint32_t)n);
		l->held_left -= n;
		l->out_credit -= n;
	}
	if (l->final != NULL && evbuffer_get_length(l->held) == 0 &&
	    !l->ending) {
		put_event(l, l->final);
		link_end(l, l->outcome);
		return;
	}
	set_paused(l, evbuffer_get_length(l->held) > 0 || l->out_credit == 0);
}

static void
s_output(void *arg, int stream, const unsigned char *p, size_t len)
{
	struct blink *l = arg;
	unsigned char rh[5];
	size_t n;

	if (l->bev == NULL || l->ending || (stream != 1 && stream != 2))
		return;
	broker_metrics_exec_output(l->b->s->metrics, stream, len);
	l->b->sess_active_ms = sbx_wall_ms();
	while (len > 0 && l->out_credit > 0 &&
	    evbuffer_get_length(l->held) == 0) {
		n = len;
		if (n > l->out_credit)
			n = (size_t)l->out_credit;
		if (n > SBX_AGENT_DATA_MAX)
			n = SBX_AGENT_DATA_MAX;
		put_frame(l, SBX_AGENT_T_DATA, stream, p, (uint32_t)n);
		l->out_credit -= n;
		p += n;
		len -= n;
	}
	if (len > 0) {
		if (evbuffer_get_length(l->held) + len + sizeof(rh) > HELD_MAX) {
			link_fail(l, SBX_E_INTERNAL, "The session's output did "
			    "not stop when paused.");
			return;
		}
		rh[0] = (unsigned char)stream;
		sbx_agent_put32(rh + 1, (uint32_t)len);
		evbuffer_add(l->held, rh, sizeof(rh));
		evbuffer_add(l->held, p, len);
	}
	set_paused(l, evbuffer_get_length(l->held) > 0 || l->out_credit == 0);
}

/* ---------- input: the api's bytes within the session's room ---------- */

static void
pump_in(struct blink *l)
{
	ssize_t n;

	while (l->b->op != NULL && evbuffer_get_length(l->in) > 0) {
		n = sbx_session_write(l->b->op, l->in, evbuffer_get_length(l->in));
		if (n <= 0) {
			if (n < 0)   /* input closed or ended: dropped */
				evbuffer_drain(l->in, evbuffer_get_length(l->in));
			break;
		}
		l->grant += (uint64_t)n;
	}
	if (l->bev != NULL && !l->ending && l->grant > 0 &&
	    (l->grant >= GRANT_MIN || (evbuffer_get_length(l->in) == 0 &&
	    l->in_avail < GRANT_MIN))) {
		put_window(l, (uint32_t)l->grant);
		l->in_avail += l->grant;
		l->grant = 0;
	}
	if (l->eof_in && !l->closed_in && evbuffer_get_length(l->in) == 0 &&
	    l->b->op != NULL) {
		l->closed_in = 1;
		sbx_session_close_input(l->b->op);
	}
}

static void
s_room(void *arg)
{
	pump_in(arg);
}

/*
 * The api has a viewer of the session (1) or none (0). Until it first says,
 * the session is use of its sandbox, as a link of an api that never says
 * (ports, an older api) always is; told "none", it is use only as of the
 * last byte that moved or the last viewer leaving (adr/0051 amendment).
 */
static int
link_viewers(struct blink *l, uint32_t a)
{
	if (a > 1)
		return -1;
	l->b->sess_quiet = a == 0;
	l->b->sess_active_ms = sbx_wall_ms();
	return 0;
}

/* One frame (or a DATA piece) from the api. */
static int
link_frame(void *arg, const struct sbx_agent_frame *f, const unsigned char *p,
    size_t n, int last)
{
	struct blink *l = arg;
	struct sbx_session_ctl c;
	struct sbx_agent_ctrl ac;
	struct sbx_err err;
	const char *why;
	uint32_t w;

	(void)last;
	if (f->stream != LINK_STREAM)
		return -1;
	switch (f->type) {
	case SBX_AGENT_T_DATA:
		if (l->eof_in || n > l->in_avail)
			return -1;         /* after EOF, or past the credit */
		l->in_avail -= n;
		evbuffer_add(l->in, p, n);
		l->b->sess_active_ms = sbx_wall_ms();
		return 0;
	case SBX_AGENT_T_EOF:
		l->eof_in = 1;
		return 0;
	case SBX_AGENT_T_WINDOW:
		if ((w = sbx_agent_window_parse(p, n)) == 0 ||
		    l->out_credit + w > SBX_AGENT_WINDOW_MAX)
			return -1;
		l->out_credit += w;
		held_flush(l);
		return 0;
	case SBX_AGENT_T_CANCEL:
		l->cancelled = 1;       /* link_read ends the link */
		return -1;
	case SBX_AGENT_T_CTRL:
		if (n == SBX_AGENT_CTRL_LEN &&
		    sbx_agent_get32(p) == SBX_AGENT_CTRL_VIEWERS)
			return link_viewers(l, sbx_agent_get32(p + 4));
		if (sbx_agent_ctrl_parse(p, n, &ac, &why) < 0)
			return -1;
		memset(&c, 0, sizeof(c));
		if (ac.kind == SBX_AGENT_CTRL_RESIZE) {
			c.kind = SBX_SESSION_RESIZE;
			c.cols = (int)ac.a;
			c.rows = (int)ac.b;
		} else {
			c.kind = SBX_SESSION_SIGNAL;
			c.signo = (int)ac.a;
		}
		/* A control the session cannot take (it ended, a resize of an
		 * exec) changes nothing; the api checked the ranges. */
		if (l->b->op != NULL && sbx_session_control(l->b->op, &c,
		    &err) < 0)
			log_debug("session control refused", "id", l->b->id,
			    "reason", err.message, NULL);
		return 0;
	default:
		return -1;
	}
}

static void
link_read(struct bufferevent *bev, void *arg)
{
	struct blink *l = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v;

	if (l->ending) {
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}
	(void)sbx_bev_fill(bev, SBX_BEV_IO_MAX);
	while (!l->ending && evbuffer_peek(in, -1, NULL, &v,
	    1) > 0 && v.iov_len > 0) {
		size_t len = v.iov_len;

		if (sbx_agent_dec_feed(&l->dec, v.iov_base, len, link_frame,
		    l) < 0) {
			if (l->ending)
				return;
			if (l->cancelled) {
				link_cancel(l, SBX_E_CANCELLED, NULL);
				return;
			}
			link_fail(l, SBX_E_RUNTIME, "The api broke the session "
			    "link's protocol.");
			return;
		}
		evbuffer_drain(in, len);
	}
	if (!l->ending)
		pump_in(l);
}

static void
link_written(struct bufferevent *bev, void *arg)
{
	struct blink *l = arg;

	if (!l->ending || l->shut ||
	    evbuffer_get_length(bufferevent_get_output(bev)) > 0)
		return;
	l->shut = 1;
	if (shutdown(bufferevent_getfd(bev), SHUT_WR) < 0)
		link_finish(l);   /* the api is gone already */
}

static void
link_event(struct bufferevent *bev, short what, void *arg)
{
	struct blink *l = arg;

	(void)bev;
	if (l->ending) {
		link_finish(l);
		return;
	}
	log_info("session link closed by the api", "id", l->b->id, "what",
	    what & BEV_EVENT_EOF ? "eof" : what & BEV_EVENT_TIMEOUT ?
	    "timeout" : "error", NULL);
	link_cancel(l, SBX_E_CANCELLED, NULL);   /* the api went */
}

/* ---------- the session's sink ---------- */

static void
s_start(void *arg, const char *exec_id)
{
	struct blink *l = arg;
	struct breq *b = l->b;
	struct evbuffer *ev;

	if (l->bev != NULL)
		return;
	snprintf(b->exec_id, sizeof(b->exec_id), "%s", exec_id);
	if ((l->bev = sbx_httpd_upgrade(&b->h, SBX_SESSION_UPGRADE,
	    NULL)) == NULL) {
		/* The client went (or no memory: a 500 went). */
		struct sbx_op *op = b->op;

		b->op = NULL;
		sbx_op_cancel(op);
		breq_done(b, b->h.status ? b->h.status : 499, SBX_E_CANCELLED);
		return;
	}
	broker_metrics_exec_started(b->s->metrics);
	b->exec_counted = 1;
	b->exec_t0 = sbx_mono_ms();
	b->sess_active_ms = sbx_wall_ms();
	bufferevent_setcb(l->bev, link_read, link_written, link_event, l);
	bufferevent_enable(l->bev, EV_READ | EV_WRITE);
	if ((ev = evbuffer_new()) == NULL) {
		link_cancel(l, SBX_E_INTERNAL, "out of memory");
		return;
	}
	sbx_ndjson_start(ev, exec_id, sbx_wall_ms());
	put_event(l, ev);
	evbuffer_free(ev);
	/* The api's input credit grows to SBX_AGENT_STDIN_WINDOW (held in
	 * l->in at most): with the initial window alone every 256 KiB waits
	 * for a round trip to the agent (adr/0050, amendment 2026-12-02). */
	put_window(l, SBX_AGENT_STDIN_WINDOW - SBX_AGENT_WINDOW);
	l->in_avail += SBX_AGENT_STDIN_WINDOW - SBX_AGENT_WINDOW;
	/* Bytes the client sent right behind the request. */
	if (evbuffer_get_length(bufferevent_get_input(l->bev)) > 0)
		link_read(l->bev, l);
}

/* The session ended with the EVENT in ev (taken): it goes after the output
 * still held, which waits for the api's credit like any other. */
static void
link_last(struct blink *l, struct evbuffer *ev, const char *outcome)
{
	snprintf(l->outcome, sizeof(l->outcome), "%s", outcome);
	l->final = ev;
	held_flush(l);
}

/* The session ended: the held output, then the exit, then the end. */
static void
s_exit(void *arg, const struct sbx_exit *ex)
{
	struct blink *l = arg;
	struct evbuffer *ev;

	l->b->op = NULL;
	if (l->bev == NULL) {
		breq_fail_code(l->b, SBX_E_INTERNAL, "The driver ended the "
		    "session before it started.");
		return;
	}
	if ((ev = evbuffer_new()) == NULL) {
		link_cancel(l, SBX_E_INTERNAL, "out of memory");
		return;
	}
	sbx_ndjson_exit(ev, ex->code, ex->signal, ex->duration_ms,
	    ex->truncated);
	link_last(l, ev, "ok");
}

static void
s_error(void *arg, const struct sbx_err *err)
{
	struct blink *l = arg;
	struct evbuffer *ev;
	struct sbx_err tmp;

	l->b->op = NULL;
	if (l->bev == NULL) {
		breq_fail(l->b, err);   /* before the upgrade: an HTTP error */
		return;
	}
	err = breq_err_why(l->b, err, &tmp);   /* it ran: a stop may be why */
	if (broker_is_runtime_code(err->code))
		broker_metrics_runtime_error(l->b->s->metrics, err->code);
	if ((ev = evbuffer_new()) == NULL) {
		link_cancel(l, SBX_E_INTERNAL, "out of memory");
		return;
	}
	sbx_ndjson_error(ev, err->code, err->message);
	link_last(l, ev, err->code);
}

/* ---------- the handler ---------- */

/* 1 when the comma-separated header value v holds token (any case). */
static int
has_token(const char *v, const char *token)
{
	size_t n = strlen(token);

	while (v != NULL && *v != '\0') {
		while (*v == ' ' || *v == '\t' || *v == ',')
			v++;
		if (strncasecmp(v, token, n) == 0 && (v[n] == '\0' ||
		    v[n] == ',' || v[n] == ' ' || v[n] == '\t'))
			return 1;
		v = strchr(v, ',');
	}
	return 0;
}

/* The body into l->ws within the broker's ceilings; an exec's defaults
 * applied (a terminal's 0s mean none). */
static int
session_parse(struct breq *b, struct blink *l, struct sbx_err *err)
{
	const struct broker_config *cfg = b->s->cfg;
	struct evkeyvalq *hs = evhttp_request_get_input_headers(b->h.req);
	struct sbx_exec_req *x = &l->ws.req.exec;

	if (!has_token(evhttp_find_header(hs, "Connection"), "upgrade") ||
	    !has_token(evhttp_find_header(hs, "Upgrade"), SBX_SESSION_UPGRADE))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "This route needs "
		    "\"Connection: Upgrade\" and \"Upgrade: %s\".",
		    SBX_SESSION_UPGRADE);
	if (broker_body_object(b, sbx_wire_session_fields, 0, &b->body,
	    err) == -1 ||
	    sbx_wire_session_decode(b->body, &l->ws, err) == -1 ||
	    broker_within(x->timeout_ms, cfg->exec_timeout_max, "timeout_ms",
	    err) == -1 ||
	    broker_within(x->output_cap, cfg->output_cap, "output_cap",
	    err) == -1)
		return -1;
	if (l->ws.req.kind == SBX_SESSION_EXEC) {
		if (x->timeout_ms == 0)
			x->timeout_ms = cfg->exec_timeout;
		if (x->output_cap == 0)
			x->output_cap = cfg->output_cap;
	}
	return 0;
}

int
h_session(struct breq *b, struct sbx_err *err)
{
	const struct broker_config *cfg = b->s->cfg;
	const struct sbx_sink sink = { .start = s_start, .output = s_output,
	    .exit = s_exit, .error = s_error, .room = s_room };
	struct sbx_sink sk = sink;
	struct blink *l;

	if ((l = calloc(1, sizeof(*l))) == NULL)
		return sbx_err_oom(err);
	l->b = b;
	b->slink = l;
	b->detach = link_detach;
	b->sess_reap = link_reap;
	if ((l->in = evbuffer_new()) == NULL ||
	    (l->held = evbuffer_new()) == NULL)
		return sbx_err_oom(err);
	if (session_parse(b, l, err) == -1)
		return -1;
	/* A port session is a connection, not a process: it has its own
	 * count, so the api's port_connections_per_sandbox (32) is reachable
	 * with the default max_execs_per_sandbox (8). */
	if (l->ws.req.kind == SBX_SESSION_PORT) {
		if (b->sbx->ports >=
		    (unsigned long long)cfg->max_port_sessions_per_sandbox)
			return sbx_err_set(err, SBX_E_TOO_MANY, "Sandbox %s already "
			    "has its maximum of %lld port connections open.",
			    b->id, cfg->max_port_sessions_per_sandbox);
	} else if (b->sbx->execs >=
	    (unsigned long long)cfg->max_execs_per_sandbox)
		return sbx_err_set(err, SBX_E_TOO_MANY, BROKER_MSG_COMMANDS_FULL,
		    b->id, cfg->max_execs_per_sandbox);
	sbx_agent_dec_init(&l->dec, 0, l->rec, sizeof(l->rec));
	l->in_avail = SBX_AGENT_WINDOW;
	l->out_credit = SBX_AGENT_WINDOW;
	if (l->ws.req.kind == SBX_SESSION_PORT) {
		b->sbx->ports++;
		b->holds_port = 1;
	} else {
		b->sbx->execs++;
		b->holds_exec = 1;
	}
	sk.arg = l;
	b->op = sbx_session_open(b->s->driver, b->id, &l->ws.req, &sk, err);
	if (b->op == NULL)
		return -1;
	/* Until the upgrade, a client that goes cancels the session. */
	breq_watch(b);
	return 0;
}
