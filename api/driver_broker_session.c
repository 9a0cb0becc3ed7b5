/* driver_broker_session.c - the broker-client session (sbx_driver.h): POST /v1/sandboxes/{id}/session upgraded to "sbx-session/1", agent frames both ways on stream 1, credit each way (adr/0055); calls the op's life (driver_broker_op.c), the HTTP client and the frame and event codecs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "driver_broker_int.h"
#include "sbx_agent.h"
#include "sbx_http_client.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

#define LINK_STREAM 1u
#define PENDING_SIGNALS 8           /* signals asked for before the 101 */
#define HELD_REC 5                  /* held output record: u8 stream, u32 len */

/* A session's side of the link; b->kstate. */
struct bsess {
	struct bop *b;
	enum sbx_session_kind kind;
	struct sbx_agent_dec dec;
	unsigned char rec[SBX_AGENT_EVENT_MAX];
	uint64_t in_credit;         /* input bytes we may still send */
	uint64_t out_credit;        /* output bytes the broker may still send */
	uint64_t owed;              /* output delivered, credit not given back */
	struct evbuffer *held;      /* output that came while paused (records) */
	struct evbuffer *scratch;   /* one DATA frame's bytes, moved not copied */
	struct event *flush;        /* resume: held output from the loop */
	int upgraded, paused, want_room, eof, eof_sent;
	int pend_resize, pend_cols, pend_rows;
	int pend_viewers;             /* 0 none, else viewers + 1 */
	int pend_sig[PENDING_SIGNALS];
	size_t npend_sig;
	/* a terminal event that came behind held output (paused) */
	int end_held;               /* 1 exit, 2 error */
	struct sbx_err end_err;
};

/* ------------------------------------------------------------------ */
/* Sending                                                             */

static void
send_frame(struct bsess *s, int type, int flags, const unsigned char *p,
    uint32_t n)
{
	unsigned char h[SBX_AGENT_HDR];

	sbx_agent_hdr_put(h, type, flags, LINK_STREAM, n);
	sbx_http_req_write(s->b->http, h, sizeof(h));
	if (n > 0)
		sbx_http_req_write(s->b->http, p, n);
}

static void
send_ctrl(struct bsess *s, uint32_t kind, uint32_t a, uint32_t b)
{
	struct sbx_agent_ctrl c = { kind, a, b };
	unsigned char p[SBX_AGENT_CTRL_LEN];

	sbx_agent_ctrl_put(p, &c);
	send_frame(s, SBX_AGENT_T_CTRL, 0, p, sizeof(p));
}

/* Output credit back to the broker for what the sink took (not while
 * paused: withholding it is the pause, adr/0055). */
static void
give_credit(struct bsess *s)
{
	unsigned char p[SBX_AGENT_WINDOW_LEN];

	if (s->paused || s->owed == 0 || s->b->dead || s->b->http == NULL)
		return;
	/* In quarters, unless the broker runs short: small grants make small
	 * frames (RFC 813's silly window; adr/0055, amendment 2026-12-02). */
	if (s->owed < SBX_AGENT_STDIN_WINDOW / 4 &&
	    s->out_credit >= SBX_AGENT_STDIN_WINDOW / 4)
		return;
	sbx_agent_put32(p, (uint32_t)s->owed);
	send_frame(s, SBX_AGENT_T_WINDOW, 1, p, sizeof(p));
	s->out_credit += s->owed;
	s->owed = 0;
}

/* ------------------------------------------------------------------ */
/* Ending                                                              */

static void
end_error(struct bsess *s, const char *code, const char *fmt, const char *why)
{
	struct bop *b = s->b;
	struct sbx_err e;

	if (b->dead)
		return;
	sbx_err_set(&e, code, fmt, why);
	b->sink.error(b->sink.arg, &e);
	dbk_op_end(b);
}

/* A broker that breaks the link's rules: the session ends, nothing of
 * its bytes is believed. Returns -1 (the decoder's stop). */
static int
violation(struct bsess *s, const char *why)
{
	log_warn("the sandbox broker broke the session protocol", "id",
	    s->b->id, "why", why, NULL);
	end_error(s, SBX_E_RUNTIME, "The sandbox broker broke the session "
	    "protocol: %s.", why);
	return -1;
}

static void
held_put(struct bsess *s, int stream, const unsigned char *p, size_t n)
{
	unsigned char h[HELD_REC];

	h[0] = (unsigned char)stream;
	sbx_agent_put32(h + 1, (uint32_t)n);
	evbuffer_add(s->held, h, sizeof(h));
	evbuffer_add(s->held, p, n);
}

/* Delivers held output while not paused. Returns -1 when the op ended. */
static int
held_drain(struct bsess *s)
{
	struct bop *b = s->b;
	unsigned char h[HELD_REC], *p;
	size_t n;

	while (!s->paused && !b->dead &&
	    evbuffer_get_length(s->held) >= HELD_REC) {
		evbuffer_copyout(s->held, h, sizeof(h));
		n = sbx_agent_get32(h + 1);
		p = evbuffer_pullup(s->held, (ssize_t)(HELD_REC + n));
		b->sink.output(b->sink.arg, h[0], p + HELD_REC, n);
		evbuffer_drain(s->held, HELD_REC + n);
		s->owed += n;
	}
	return b->dead ? -1 : 0;
}

/* The terminal event: now, or after the resume (paused: the end of a
 * paused stream waits, as the exec's does in the unread connection). */
static void
terminal(struct bsess *s, int kind, const struct sbx_err *e)
{
	struct bop *b = s->b;

	if (s->paused || evbuffer_get_length(s->held) > 0) {
		s->end_held = kind;
		if (e != NULL)
			s->end_err = *e;
		sbx_http_req_pause(b->http);   /* its end waits, too */
		return;
	}
	if (kind == 1)
		b->sink.exit(b->sink.arg, &b->exit);
	else
		b->sink.error(b->sink.arg, e);
	dbk_op_end(b);
}

/* ------------------------------------------------------------------ */
/* Receiving                                                           */

/* One EVENT, decoded by the exec stream's own parser (SPEC §5 lines). */
static int
on_event(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct bsess *s = arg;
	struct bop *b = s->b;
	struct sbx_err e;

	(void)line;
	(void)len;
	switch (ev->type) {
	case SBX_EVENT_START:
		b->started = 1;
		b->sink.start(b->sink.arg, ev->exec_id);
		break;
	case SBX_EVENT_QUOTA:
		/* Goes out with the exit, just before it (adr/0057). */
		b->exit.work_bytes = ev->work_bytes;
		b->exit.work_quota = ev->work_quota;
		break;
	case SBX_EVENT_EXIT:
		dbk_op_keep_exit(b, ev);
		terminal(s, 1, NULL);
		break;
	case SBX_EVENT_ERROR:
		/* The broker's code and message, as the exec stream keeps them. */
		sbx_err_clear(&e);
		snprintf(e.code, sizeof(e.code), "%s", ev->err_code);
		snprintf(e.message, sizeof(e.message), "%s", ev->err_message);
		terminal(s, 2, &e);
		break;
	default:
		violation(s, "output in an event");
		break;
	}
	return b->dead || s->end_held ? 1 : 0;
}

static int
on_frame(void *arg, const struct sbx_agent_frame *f, const unsigned char *p,
    size_t n, int last)
{
	struct bsess *s = arg;
	struct bop *b = s->b;
	struct sbx_err e;
	uint32_t c;

	(void)last;
	if (b->dead || s->end_held)
		return -1;
	if (f->stream != LINK_STREAM)
		return violation(s, "a frame of another stream");
	switch (f->type) {
	case SBX_AGENT_T_EVENT:
		if (memchr(p, '\n', n) != NULL)
			return violation(s, "an event of more than one line");
		if (sbx_ndjson_parser_feed(b->parser, (const char *)p, n, &e) ==
		    -1 || sbx_ndjson_parser_feed(b->parser, "\n", 1, &e) == -1) {
			if (b->dead || s->end_held)
				return -1;
			return violation(s, "an event that does not decode");
		}
		return b->dead || s->end_held ? -1 : 0;
	case SBX_AGENT_T_DATA:
		if (!b->started)
			return violation(s, "output before the start event");
		if (n > s->out_credit)
			return violation(s, "output beyond its credit");
		s->out_credit -= n;
		if (s->paused || evbuffer_get_length(s->held) > 0) {
			held_put(s, f->flags, p, n);
			return 0;
		}
		b->sink.output(b->sink.arg, f->flags, p, n);
		s->owed += n;
		return b->dead ? -1 : 0;
	case SBX_AGENT_T_WINDOW:
		if ((c = sbx_agent_window_parse(p, n)) == 0)
			return violation(s, "a window out of bounds");
		if (s->in_credit + c > SBX_AGENT_WINDOW_MAX)
			return violation(s, "input credit beyond its bound");
		s->in_credit += c;
		if (s->want_room && b->sink.room != NULL && !s->eof) {
			s->want_room = 0;
			b->sink.room(b->sink.arg);
		}
		return b->dead ? -1 : 0;
	default:
		return violation(s, "a frame the broker may not send");
	}
}

/* The answer's head: a 101 to our protocol starts the link; anything else
 * is a refusal whose body finish reads. */
static void
session_begin(struct bop *b)
{
	struct bsess *s = b->kstate;
	const char *up;
	size_t i;

	if (b->status != 101)
		return;
	up = sbx_http_req_header(b->http, "Upgrade");
	if (!sbx_http_req_upgraded(b->http) || up == NULL ||
	    strcasecmp(up, SBX_SESSION_UPGRADE) != 0) {
		end_error(s, SBX_E_BROKER_UNAVAILABLE, "%s", "The sandbox "
		    "broker answered the session in another protocol.");
		return;
	}
	b->streaming = 1;
	s->upgraded = 1;
	if ((b->parser = sbx_ndjson_parser_new(SBX_AGENT_EVENT_MAX + 1, on_event,
	    s)) == NULL) {
		end_error(s, SBX_E_INTERNAL, "%s", "Out of memory.");
		return;
	}
	/* The broker's output credit grows to SBX_AGENT_STDIN_WINDOW: one
	 * initial window in flight is a round trip per 256 KiB (adr/0055,
	 * amendment 2026-12-02). */
	{
		unsigned char w[SBX_AGENT_WINDOW_LEN];

		sbx_agent_put32(w, SBX_AGENT_STDIN_WINDOW - SBX_AGENT_WINDOW);
		send_frame(s, SBX_AGENT_T_WINDOW, 1, w, sizeof(w));
		s->out_credit += SBX_AGENT_STDIN_WINDOW - SBX_AGENT_WINDOW;
	}
	/* What the caller asked for before the link existed, in order. */
	if (s->pend_resize)
		send_ctrl(s, SBX_AGENT_CTRL_RESIZE, (uint32_t)s->pend_cols,
		    (uint32_t)s->pend_rows);
	for (i = 0; i < s->npend_sig; i++)
		send_ctrl(s, SBX_AGENT_CTRL_SIGNAL, (uint32_t)s->pend_sig[i], 0);
	if (s->pend_viewers)
		send_ctrl(s, SBX_AGENT_CTRL_VIEWERS,
		    (uint32_t)(s->pend_viewers - 1), 0);
	if (s->eof && !s->eof_sent) {
		send_frame(s, SBX_AGENT_T_EOF, 0, NULL, 0);
		s->eof_sent = 1;
	} else if (b->sink.room != NULL) {
		s->want_room = 0;
		b->sink.room(b->sink.arg);
	}
}

static void
session_feed(struct bop *b, const unsigned char *p, size_t n)
{
	struct bsess *s = b->kstate;

	if (s->end_held)
		return;
	if (sbx_agent_dec_feed(&s->dec, p, n, on_frame, s) == -1 &&
	    !b->dead && !s->end_held)
		violation(s, s->dec.why);
	if (!b->dead)
		give_credit(s);
}

static void
session_finish(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;

	if (!b->streaming && terr == NULL && b->status >= 100 &&
	    b->status <= 299) {
		dbk_error_malformed(&e);
		b->sink.error(b->sink.arg, &e);
		return;
	}
	if (!b->streaming) {
		dbk_op_stream_ended(b, terr);
		return;
	}
	/* The link broke before its last event: the broker went (a live
	 * broker always sends one, even draining). Whatever ran is gone
	 * with it: a broker kills a session whose link closes, and one that
	 * starts again kills what a dead one left (its recovery). WebSocket
	 * viewers are closed 4002 for this code (docs/api.md). */
	sbx_err_set(&e, SBX_E_BROKER_UNAVAILABLE, "The sandbox broker went away "
	    "during the session (it stopped or crashed); the session's "
	    "processes are killed.");
	b->sink.error(b->sink.arg, &e);
}

/* The loop's turn after a resume: held output, then a held end. */
static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bsess *s = arg;
	struct bop *b = s->b;

	(void)fd;
	(void)what;
	if (b->dead || s->paused)
		return;
	b->busy++;
	if (held_drain(s) == 0 && !s->paused) {
		if (s->end_held == 1)
			b->sink.exit(b->sink.arg, &b->exit);
		else if (s->end_held == 2)
			b->sink.error(b->sink.arg, &s->end_err);
		if (s->end_held)
			dbk_op_end(b);
		else
			give_credit(s);
	}
	b->busy--;
	if (b->dead && b->busy == 0)
		dbk_op_free(b);
}

static void
session_pause(struct bop *b, int on)
{
	struct bsess *s = b->kstate;

	s->paused = on;
	if (!on)
		event_active(s->flush, EV_TIMEOUT, 0);
}

static void
session_release(struct bop *b)
{
	struct bsess *s = b->kstate;

	if (s == NULL)
		return;
	if (s->flush != NULL)
		event_free(s->flush);
	if (s->held != NULL)
		evbuffer_free(s->held);
	if (s->scratch != NULL)
		evbuffer_free(s->scratch);
	free(s);
	b->kstate = NULL;
}

static const struct bkind kind_session = {
	.begin = session_begin,
	.feed = session_feed,
	.finish = session_finish,
	.pause = session_pause,
	.release = session_release,
};

/* ------------------------------------------------------------------ */
/* The request                                                         */

/* The cwd as exec checks it (the encoder checks kinds and ranges). */
static int
session_check(const struct sbx_session_req *req, struct sbx_err *err)
{
	if (req != NULL && req->kind != SBX_SESSION_PORT && req->exec.cwd != NULL &&
	    sbx_path_check(req->exec.cwd, strlen(req->exec.cwd), err) == -1)
		return -1;
	return 0;
}

struct sbx_op *
dbk_session(struct sbx_driver *drv, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err)
{
	struct bdriver *d = (struct bdriver *)drv;
	struct bsess *s;
	struct bop *b;
	json_t *o;

	/* The body first: it refuses a bad kind or range (bad_request). */
	if (session_check(req, err) == -1 ||
	    (o = sbx_wire_session_encode(req, err)) == NULL)
		return NULL;
	if ((b = dbk_op_new(d, &kind_session, id, NULL, err)) == NULL) {
		json_decref(o);
		return NULL;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    (b->kstate = s, (s->held = evbuffer_new()) == NULL) ||
	    (s->scratch = evbuffer_new()) == NULL ||
	    (s->flush = event_new(d->base.base, -1, 0, flush_cb, s)) == NULL) {
		json_decref(o);
		dbk_op_free(b);
		sbx_err_oom(err);
		return NULL;
	}
	s->b = b;
	s->kind = req->kind;
	s->in_credit = SBX_AGENT_WINDOW;
	s->out_credit = SBX_AGENT_WINDOW;
	sbx_agent_dec_init(&s->dec, 1, s->rec, sizeof(s->rec));
	sbx_agent_dec_link(&s->dec);
	b->sink = *sink;
	b->upgrade = SBX_SESSION_UPGRADE;
	return dbk_op_start_id(b, "POST", SBX_PATH_SESSION_SUFFIX, o, err);
}

/* ------------------------------------------------------------------ */
/* Input and controls                                                  */

size_t
dbk_session_room(struct sbx_driver *drv, struct sbx_op *op)
{
	struct bop *b = (struct bop *)op;
	struct bsess *s = b->kstate;

	(void)drv;
	if (b->dead || !s->upgraded || s->eof || s->end_held)
		return 0;
	return (size_t)s->in_credit;
}

ssize_t
dbk_session_write(struct sbx_driver *drv, struct sbx_op *op,
    struct evbuffer *src, size_t max)
{
	struct bop *b = (struct bop *)op;
	struct bsess *s = b->kstate;
	size_t n = dbk_session_room(drv, op), want, k, done = 0;
	unsigned char h[SBX_AGENT_HDR];

	if (b->dead || s->eof || s->end_held)
		return -1;
	want = evbuffer_get_length(src) < max ? evbuffer_get_length(src) : max;
	if (n > want)
		n = want;
	if (n < want)
		s->want_room = 1;   /* sink->room when credit comes */
	while (done < n) {
		k = n - done < SBX_AGENT_DATA_MAX ? n - done : SBX_AGENT_DATA_MAX;
		sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 0, LINK_STREAM,
		    (uint32_t)k);
		if (evbuffer_remove_buffer(src, s->scratch, k) != (int)k ||
		    sbx_http_req_write(b->http, h, sizeof(h)) == -1 ||
		    sbx_http_req_write_buffer(b->http, s->scratch) == -1)
			return -1;
		done += k;
	}
	s->in_credit -= n;
	return (ssize_t)n;
}

void
dbk_session_close_input(struct sbx_driver *drv, struct sbx_op *op)
{
	struct bop *b = (struct bop *)op;
	struct bsess *s = b->kstate;

	(void)drv;
	if (b->dead || s->eof)
		return;
	s->eof = 1;
	if (s->upgraded) {
		send_frame(s, SBX_AGENT_T_EOF, 0, NULL, 0);
		s->eof_sent = 1;
	}
}

/* The kinds of control a session kind takes (the ranges are the frame's:
 * sbx_agent_ctrl_parse). NULL when it takes c's kind. */
static const char *
ctrl_refusal(enum sbx_session_kind kind, const struct sbx_session_ctl *c)
{
	if (c->kind == SBX_SESSION_RESIZE)
		return kind == SBX_SESSION_PTY ? NULL : "Only a terminal has a size.";
	if (c->kind == SBX_SESSION_SIGNAL)
		return kind != SBX_SESSION_PORT ? NULL : "A port connection takes "
		    "no signal.";
	if (c->kind == SBX_SESSION_VIEWERS)
		return NULL;
	return "Unknown control.";
}

int
dbk_session_control(struct sbx_driver *drv, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err)
{
	struct bop *b = (struct bop *)op;
	struct bsess *s = b->kstate;
	struct sbx_agent_ctrl ac;
	unsigned char p[SBX_AGENT_CTRL_LEN];
	const char *why;

	(void)drv;
	if (c == NULL || b->dead)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The session has "
		    "ended.");
	if ((why = ctrl_refusal(s->kind, c)) != NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s", why);
	if (c->kind == SBX_SESSION_VIEWERS) {
		/* For the broker's reaper, not the agent (adr/0051). */
		if (s->upgraded)
			send_ctrl(s, SBX_AGENT_CTRL_VIEWERS, c->viewers > 0, 0);
		else
			s->pend_viewers = 1 + (c->viewers > 0);
		return 0;
	}
	memset(&ac, 0, sizeof(ac));
	ac.kind = c->kind == SBX_SESSION_RESIZE ? SBX_AGENT_CTRL_RESIZE :
	    SBX_AGENT_CTRL_SIGNAL;
	/* Out of range stays out of range through the u16/u32 casts. */
	ac.a = c->kind == SBX_SESSION_RESIZE ? (uint32_t)(c->cols < 0 ? 0 :
	    c->cols > 65535 ? 65535 : c->cols) : (uint32_t)(c->signo < 0 ? 0 :
	    c->signo);
	ac.b = c->kind == SBX_SESSION_RESIZE ? (uint32_t)(c->rows < 0 ? 0 :
	    c->rows > 65535 ? 65535 : c->rows) : 0;
	sbx_agent_ctrl_put(p, &ac);
	if (sbx_agent_ctrl_parse(p, sizeof(p), &ac, &why) == -1)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s",
		    c->kind == SBX_SESSION_RESIZE ? "cols and rows must be 1 "
		    "to 10000." : "signal must be 1 to 64.");
	if (s->upgraded)
		send_frame(s, SBX_AGENT_T_CTRL, 0, p, sizeof(p));
	else if (c->kind == SBX_SESSION_RESIZE) {
		s->pend_resize = 1;     /* the last size is the size */
		s->pend_cols = c->cols;
		s->pend_rows = c->rows;
	} else if (s->npend_sig < PENDING_SIGNALS)
		s->pend_sig[s->npend_sig++] = c->signo;
	else
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Too many signals "
		    "before the session started.");
	return 0;
}
