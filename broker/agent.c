/* agent.c - the broker's end of a sandbox agent channel: streams, credit, bounds (contract in agent.h). Calls the frame codec (proto/sbx_agent.c), libevent and common/sbx_bev (large reads) only; its owners (the engine driver, the broker's metrics page) call it, never the reverse. */
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "agent.h"
#include "sbx_bev.h"
#include "sbx_proto.h"
#include "sbx_time.h"

#define REC_MAX 64   /* largest non-DATA payload the agent may send */

struct sbx_agent_stream {
	TAILQ_ENTRY(sbx_agent_stream) link;
	struct sbx_agent_chan *ch;
	uint32_t id;
	struct sbx_agent_stream_cbs cbs;
	uint32_t out_credit;   /* output bytes the agent may still send */
	uint32_t owed;         /* output consumed, credit not yet returned */
	uint32_t in_credit;    /* stdin bytes we may send */
	int has_stdin, stdin_closed, paused, detached, has_ctrl;
};

TAILQ_HEAD(stream_list, sbx_agent_stream);

struct sbx_agent_chan {
	struct event_base *base;
	struct sbx_agent_chan_cbs cbs;
	struct evbuffer *pending;   /* stream frames until the HELLO came on an output */
	struct evbuffer *out;       /* borrowed */
	struct bufferevent *bev;    /* borrowed, when attached */
	struct sbx_agent_dec dec;
	unsigned char rec[REC_MAX];
	struct stream_list streams;
	size_t nstreams;
	uint32_t next_id;
	struct sbx_agent_hello hello;
	int got_hello, failed, depth, freed;
	uint64_t rx;                /* bytes the agent sent */
	unsigned pings_out;
	uint64_t last_rx_ms, keep_ms, ping_sent_ms;
	uint64_t start_ms;          /* this transport's HELLO awaited since */
	struct event *keep;
};

static uint64_t agent_restarts;
static uint64_t channels_open;
static uint64_t direct_count[2];   /* fallbacks, direct connections (adr/0066) */

void
sbx_agent_count_direct(int connected)
{
	direct_count[connected != 0]++;
}

void
sbx_agent_count_restart(void)
{
	agent_restarts++;
}

int
sbx_agent_metrics_render(struct evbuffer *out)
{
	return evbuffer_add_printf(out,
	    "# HELP sbx_broker_agent_restarts_total Sandbox agents started again "
	    "after theirs was killed or crashed.\n"
	    "# TYPE sbx_broker_agent_restarts_total counter\n"
	    "sbx_broker_agent_restarts_total %llu\n"
	    "# HELP sbx_broker_agent_channels Sandbox agent channels open.\n"
	    "# TYPE sbx_broker_agent_channels gauge\n"
	    "sbx_broker_agent_channels %llu\n"
	    "# HELP sbx_broker_agent_direct_total Agent channels by transport chosen "
	    "at start: the direct socket, or the runtime stream after a failed try.\n"
	    "# TYPE sbx_broker_agent_direct_total counter\n"
	    "sbx_broker_agent_direct_total{result=\"connected\"} %llu\n"
	    "sbx_broker_agent_direct_total{result=\"fallback\"} %llu\n",
	    (unsigned long long)agent_restarts,
	    (unsigned long long)channels_open,
	    (unsigned long long)direct_count[1],
	    (unsigned long long)direct_count[0]) < 0 ? -1 : 0;
}

/* Where a stream's frames go: the output once the HELLO came on it, else
 * pending. So nothing of a stream is in a transport that may die before
 * its HELLO: sbx_agent_chan_restart keeps it all for the next one. */
static struct evbuffer *
chan_out(struct sbx_agent_chan *ch)
{
	return ch->out != NULL && ch->got_hello ? ch->out : ch->pending;
}

static void
frame_put(struct evbuffer *b, int type, int flags, uint32_t stream, const void *p, size_t n)
{
	unsigned char h[SBX_AGENT_HDR];

	sbx_agent_hdr_put(h, type, flags, stream, (uint32_t)n);
	evbuffer_add(b, h, sizeof(h));
	if (n > 0)
		evbuffer_add(b, p, n);
}

static void
send_frame(struct sbx_agent_chan *ch, int type, int flags, uint32_t stream,
    const void *p, size_t n)
{
	if (!ch->failed)
		frame_put(chan_out(ch), type, flags, stream, p, n);
}

static void
stream_drop(struct sbx_agent_stream *st)
{
	TAILQ_REMOVE(&st->ch->streams, st, link);
	st->ch->nstreams--;
	free(st);
}

static void chan_free_now(struct sbx_agent_chan *ch);

/* Every stream of ch goes; those still attached hear e (the caller is
 * inside enter/leave: a callback may free ch). */
static void
streams_fail(struct sbx_agent_chan *ch, const struct sbx_err *e)
{
	struct sbx_agent_stream *st;

	while ((st = TAILQ_FIRST(&ch->streams)) != NULL) {
		struct sbx_agent_stream_cbs cbs = st->cbs;
		int detached = st->detached;

		stream_drop(st);
		if (!detached && cbs.error != NULL)
			cbs.error(cbs.arg, e);
	}
}

static void
enter(struct sbx_agent_chan *ch)
{
	ch->depth++;
}

/* Returns 0 when ch was freed inside (do not touch it), else 1. */
static int
leave(struct sbx_agent_chan *ch)
{
	if (--ch->depth == 0 && ch->freed) {
		chan_free_now(ch);
		return 0;
	}
	return 1;
}

void
sbx_agent_chan_fail(struct sbx_agent_chan *ch, const struct sbx_err *err)
{
	struct sbx_err e;

	if (ch == NULL || ch->failed)
		return;
	ch->failed = 1;
	if (ch->keep != NULL)
		event_del(ch->keep);
	enter(ch);
	if (err != NULL)
		e = *err;
	else
		sbx_err_set(&e, SBX_E_RUNTIME, "the sandbox agent's channel ended");
	streams_fail(ch, &e);
	if (!ch->freed && ch->cbs.closed != NULL)
		ch->cbs.closed(ch->cbs.arg, &e);
	(void)leave(ch);
}

static int
proto_error(struct sbx_agent_chan *ch, const char *what)
{
	struct sbx_err e;

	sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper agent broke protocol %d (%s)",
	    SBX_AGENT_PROTO, what);
	sbx_agent_chan_fail(ch, &e);
	return -1;
}

static struct sbx_agent_stream *
stream_find(struct sbx_agent_chan *ch, uint32_t id)
{
	struct sbx_agent_stream *st;

	TAILQ_FOREACH(st, &ch->streams, link)
		if (st->id == id)
			return st;
	return NULL;
}

static void
give_credit(struct sbx_agent_stream *st)
{
	unsigned char w[SBX_AGENT_WINDOW_LEN];

	if (st->paused || st->owed == 0)
		return;
	/* Batched: a WINDOW per quarter window, or all of it when the agent
	 * has nothing left to send with. */
	if (st->owed < st->ch->hello.window / 4 && st->out_credit > 0)
		return;
	sbx_agent_put32(w, st->owed);
	send_frame(st->ch, SBX_AGENT_T_WINDOW, 1, st->id, w, sizeof(w));
	st->out_credit += st->owed;
	st->owed = 0;
}

static const char *
known_code(const char *c)
{
	static const char *const codes[] = {
		SBX_E_BAD_REQUEST, SBX_E_TOO_MANY, SBX_E_INTERNAL, NULL,
	};
	size_t i;

	for (i = 0; codes[i] != NULL; i++)
		if (strcmp(c, codes[i]) == 0)
			return codes[i];
	return SBX_E_RUNTIME;
}

static int
on_frame(void *arg, const struct sbx_agent_frame *f, const unsigned char *p, size_t n,
    int last)
{
	struct sbx_agent_chan *ch = arg;
	struct sbx_agent_stream *st;
	struct sbx_agent_stream_cbs cbs;
	struct sbx_agent_exit ex;
	struct sbx_err e;
	const char *why;
	char code[SBX_AGENT_CODE_MAX + 1];
	uint32_t w;

	ch->last_rx_ms = (uint64_t)sbx_mono_ms();
	if (!ch->got_hello && f->type != SBX_AGENT_T_HELLO)
		return proto_error(ch, "a frame before the hello");
	switch (f->type) {
	case SBX_AGENT_T_HELLO:
		if (ch->got_hello)
			return proto_error(ch, "a second hello");
		if (sbx_agent_hello_parse(p, n, &ch->hello, &why) < 0)
			return proto_error(ch, why);
		ch->got_hello = 1;
		/* What the streams queued goes now, after the HELLO. */
		if (ch->out != NULL && evbuffer_get_length(ch->pending) > 0)
			evbuffer_add_buffer(ch->out, ch->pending);
		if (ch->cbs.ready != NULL)
			ch->cbs.ready(ch->cbs.arg, &ch->hello);
		return ch->failed || ch->freed ? -1 : 0;
	case SBX_AGENT_T_PONG:
		if (ch->pings_out == 0)
			return proto_error(ch, "a pong nobody asked for");
		ch->pings_out--;
		return 0;
	default:
		break;
	}
	if ((st = stream_find(ch, f->stream)) == NULL)
		return proto_error(ch, f->stream < ch->next_id ? "a frame for an ended stream" :
		    "a frame for a stream never opened");
	switch (f->type) {
	case SBX_AGENT_T_DATA:
		if (n > st->out_credit)
			return proto_error(ch, "output beyond its credit");
		st->out_credit -= (uint32_t)n;
		if (st->detached)
			return 0;
		if (st->cbs.output != NULL) {
			st->cbs.output(st->cbs.arg, f->flags, p, n);
			if (ch->failed || ch->freed)
				return -1;
		}
		/* The owner may have cancelled inside: the record stays (detached). */
		st->owed += (uint32_t)n;
		if (last || st->owed >= ch->hello.window / 4)
			give_credit(st);
		return 0;
	case SBX_AGENT_T_WINDOW:
		w = sbx_agent_window_parse(p, n);
		if (!st->has_stdin || w == 0 || w > SBX_AGENT_WINDOW_MAX - st->in_credit)
			return proto_error(ch, "a stdin window out of bounds");
		st->in_credit += w;
		if (!st->detached && !st->stdin_closed && st->cbs.stdin_room != NULL) {
			st->cbs.stdin_room(st->cbs.arg);
			if (ch->failed || ch->freed)
				return -1;
		}
		return 0;
	case SBX_AGENT_T_EXIT:
		if (sbx_agent_exit_parse(p, n, &ex, &why) < 0)
			return proto_error(ch, why);
		cbs = st->cbs;
		w = st->detached;
		stream_drop(st);
		if (!w && cbs.exit != NULL)
			cbs.exit(cbs.arg, &ex);
		return ch->failed || ch->freed ? -1 : 0;
	case SBX_AGENT_T_REFUSE:
		if (sbx_agent_refuse_parse(p, n, code) < 0)
			return proto_error(ch, "a malformed refusal");
		cbs = st->cbs;
		w = st->detached;
		stream_drop(st);
		sbx_err_set(&e, known_code(code), "the sandbox agent refused the operation (%s)",
		    code);
		if (!w && cbs.error != NULL)
			cbs.error(cbs.arg, &e);
		return ch->failed || ch->freed ? -1 : 0;
	default:
		return proto_error(ch, "a frame the broker does not take");
	}
}

int
sbx_agent_chan_input(struct sbx_agent_chan *ch, const unsigned char *buf, size_t len)
{
	int r;

	if (ch->failed)
		return -1;
	/* The version byte of the first frame (the HELLO): an agent of
	 * another protocol is an older helper in an older container. */
	if (ch->rx < 2 && ch->rx + len >= 2 && buf[1 - ch->rx] != SBX_AGENT_PROTO) {
		struct sbx_err e;

		sbx_err_set(&e, SBX_E_RUNTIME, "the sandbox's sbx-helper speaks agent protocol "
		    "%d, not %d (an older helper volume): ensure the sandbox to replace its "
		    "container", buf[1 - ch->rx], SBX_AGENT_PROTO);
		sbx_agent_chan_fail(ch, &e);
		return -1;
	}
	ch->rx += len;
	enter(ch);
	r = sbx_agent_dec_feed(&ch->dec, buf, len, on_frame, ch);
	if (r < 0 && !ch->failed && !ch->freed)
		(void)proto_error(ch, ch->dec.why);
	if (!leave(ch))
		return -1;
	return r < 0 || ch->failed ? -1 : 0;
}

static void
keep_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sbx_agent_chan *ch = arg;
	struct sbx_err e;
	struct timeval tv;
	uint64_t now = (uint64_t)sbx_mono_ms();

	(void)fd;
	(void)what;
	if (!ch->got_hello) {
		/* No PING before the HELLO (it would be one more frame in a
		 * transport that may be replaced): the HELLO is awaited as a
		 * PING's PONG was, the first PING going after one interval. */
		if (now - ch->start_ms >= ch->keep_ms * 3) {
			sbx_err_set(&e, SBX_E_RUNTIME, "the sandbox agent did not say hello "
			    "within %llu ms", (unsigned long long)(now - ch->start_ms));
			sbx_agent_chan_fail(ch, &e);
			return;
		}
		goto again;
	}
	if (ch->pings_out > 0 && now - ch->ping_sent_ms >= ch->keep_ms * 2) {
		sbx_err_set(&e, SBX_E_RUNTIME, "the agent did not answer a ping for %llu ms",
		    (unsigned long long)(now - ch->ping_sent_ms));
		sbx_agent_chan_fail(ch, &e);
		return;
	}
	if (ch->pings_out == 0) {
		unsigned char p[SBX_AGENT_PING_LEN] = { 's', 'b', 'x', 'p', 'i', 'n', 'g', 0 };

		send_frame(ch, SBX_AGENT_T_PING, 0, 0, p, sizeof(p));
		ch->pings_out++;
		ch->ping_sent_ms = now;
	}
again:
	tv.tv_sec = (time_t)(ch->keep_ms / 1000);
	tv.tv_usec = (suseconds_t)(ch->keep_ms % 1000) * 1000;
	event_add(ch->keep, &tv);
}

int
sbx_agent_chan_keepalive(struct sbx_agent_chan *ch, uint64_t interval_ms)
{
	struct timeval tv;

	ch->keep_ms = interval_ms;
	if (interval_ms == 0) {
		if (ch->keep != NULL)
			event_del(ch->keep);
		return 0;
	}
	if (ch->keep == NULL && (ch->keep = evtimer_new(ch->base, keep_cb, ch)) == NULL)
		return -1;
	tv.tv_sec = (time_t)(interval_ms / 1000);
	tv.tv_usec = (suseconds_t)(interval_ms % 1000) * 1000;
	return event_add(ch->keep, &tv);
}

struct sbx_agent_chan *
sbx_agent_chan_new(struct event_base *base, const struct sbx_agent_chan_cbs *cbs)
{
	struct sbx_agent_chan *ch;

	if ((ch = calloc(1, sizeof(*ch))) == NULL)
		return NULL;
	if ((ch->pending = evbuffer_new()) == NULL) {
		free(ch);
		return NULL;
	}
	ch->base = base;
	if (cbs != NULL)
		ch->cbs = *cbs;
	TAILQ_INIT(&ch->streams);
	ch->next_id = 1;
	ch->start_ms = (uint64_t)sbx_mono_ms();
	channels_open++;
	sbx_agent_dec_init(&ch->dec, 1, ch->rec, sizeof(ch->rec));
	return ch;
}

void
sbx_agent_chan_set_output(struct sbx_agent_chan *ch, struct evbuffer *out)
{
	ch->out = out;
	if (out != NULL && ch->got_hello && evbuffer_get_length(ch->pending) > 0)
		evbuffer_add_buffer(out, ch->pending);
}

static void
bev_read(struct bufferevent *bev, void *arg)
{
	struct sbx_agent_chan *ch = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v[4];
	int i, nv;

	/* What the socket holds in one read, not libevent 2.1's 4 KiB
	 * (adr/0063): the direct channel's bulk frames (adr/0066). */
	(void)sbx_bev_fill(bev, SBX_BEV_IO_MAX);
	while (evbuffer_get_length(in) > 0) {
		nv = evbuffer_peek(in, -1, NULL, v, 4);
		if (nv > 4)
			nv = 4;
		enter(ch);
		for (i = 0; i < nv; i++) {
			if (sbx_agent_chan_input(ch, v[i].iov_base, v[i].iov_len) < 0)
				break;
		}
		if (!leave(ch))
			return;   /* freed: the bev may be gone with it */
		if (ch->failed) {
			evbuffer_drain(in, evbuffer_get_length(in));
			return;
		}
		for (i = 0; i < nv; i++)
			evbuffer_drain(in, v[i].iov_len);
	}
}

static void
bev_event(struct bufferevent *bev, short what, void *arg)
{
	struct sbx_agent_chan *ch = arg;
	struct sbx_err e;

	(void)bev;
	if (what & BEV_EVENT_EOF)
		sbx_err_set(&e, SBX_E_RUNTIME, "the agent closed its channel");
	else
		sbx_err_set(&e, SBX_E_RUNTIME, "the agent's channel failed");
	sbx_agent_chan_fail(ch, &e);
}

int
sbx_agent_chan_attach_bev(struct sbx_agent_chan *ch, struct bufferevent *bev)
{
	ch->bev = bev;
	bufferevent_setcb(bev, bev_read, NULL, bev_event, ch);
	sbx_agent_chan_set_output(ch, bufferevent_get_output(bev));
	return bufferevent_enable(bev, EV_READ | EV_WRITE);
}

void
sbx_agent_chan_detach_bev(struct sbx_agent_chan *ch)
{
	if (ch == NULL || ch->bev == NULL)
		return;
	bufferevent_setcb(ch->bev, NULL, NULL, NULL, NULL);
	if (ch->out == bufferevent_get_output(ch->bev))
		ch->out = NULL;
	ch->bev = NULL;
}

int
sbx_agent_chan_restart(struct sbx_agent_chan *ch)
{
	if (ch == NULL || ch->failed || ch->freed || ch->got_hello || ch->depth > 0)
		return -1;
	/* Only PINGs went to the old output (chan_out): they go with it. */
	sbx_agent_chan_detach_bev(ch);
	ch->out = NULL;
	ch->rx = 0;
	ch->pings_out = 0;
	ch->start_ms = (uint64_t)sbx_mono_ms();
	sbx_agent_dec_init(&ch->dec, 1, ch->rec, sizeof(ch->rec));
	return 0;
}

void
sbx_agent_chan_ping(struct sbx_agent_chan *ch)
{
	unsigned char p[SBX_AGENT_PING_LEN] = { 's', 'b', 'x', 'p', 'i', 'n', 'g', 0 };

	/* Before the HELLO too (it may be what makes the agent take this
	 * transport, adr/0066): straight to the output, never pending. */
	if (ch->failed || ch->out == NULL)
		return;
	frame_put(ch->out, SBX_AGENT_T_PING, 0, 0, p, sizeof(p));
	ch->pings_out++;
	ch->ping_sent_ms = (uint64_t)sbx_mono_ms();
}

static void
chan_free_now(struct sbx_agent_chan *ch)
{
	struct sbx_agent_stream *st;

	while ((st = TAILQ_FIRST(&ch->streams)) != NULL)
		stream_drop(st);
	if (ch->bev != NULL)
		bufferevent_setcb(ch->bev, NULL, NULL, NULL, NULL);
	if (ch->keep != NULL)
		event_free(ch->keep);
	evbuffer_free(ch->pending);
	channels_open--;
	free(ch);
}

void
sbx_agent_chan_free(struct sbx_agent_chan *ch)
{
	struct sbx_err e;

	if (ch == NULL || ch->freed)
		return;
	ch->freed = 1;
	enter(ch);
	sbx_err_set(&e, SBX_E_CANCELLED, "the sandbox agent's channel was closed");
	streams_fail(ch, &e);
	ch->failed = 1;
	(void)leave(ch);
}

int
sbx_agent_chan_alive(const struct sbx_agent_chan *ch)
{
	return ch != NULL && !ch->failed && !ch->freed;
}

int
sbx_agent_chan_ready(const struct sbx_agent_chan *ch, struct sbx_agent_hello *hello)
{
	if (ch == NULL || !ch->got_hello)
		return 0;
	if (hello != NULL)
		*hello = ch->hello;
	return 1;
}

uint64_t
sbx_agent_chan_last_rx_ms(const struct sbx_agent_chan *ch)
{
	return ch->last_rx_ms;
}

size_t
sbx_agent_chan_streams(const struct sbx_agent_chan *ch)
{
	return ch->nstreams;
}

struct sbx_agent_stream *
sbx_agent_open(struct sbx_agent_chan *ch, const char *const *argv, const char *const *env,
    int with_stdin, const struct sbx_agent_stream_cbs *cbs, struct sbx_err *err)
{
	return sbx_agent_open2(ch, argv, env, with_stdin ? SBX_AGENT_OPEN_STDIN : 0, cbs, err);
}

struct sbx_agent_stream *
sbx_agent_open2(struct sbx_agent_chan *ch, const char *const *argv, const char *const *env,
    unsigned open_flags, const struct sbx_agent_stream_cbs *cbs, struct sbx_err *err)
{
	int with_stdin = (open_flags & SBX_AGENT_OPEN_STDIN) != 0;
	struct sbx_agent_stream *st;
	unsigned char h[SBX_AGENT_HDR], *p;
	struct evbuffer_iovec v;
	size_t n;
	uint32_t max = ch->got_hello ? ch->hello.streams : SBX_AGENT_STREAMS_MAX;

	if (ch->failed) {
		sbx_err_set(err, SBX_E_RUNTIME, "the sandbox agent's channel has ended");
		return NULL;
	}
	if ((open_flags & ~(unsigned)(SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL)) != 0) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "unknown agent open flags 0x%x", open_flags);
		return NULL;
	}
	if ((n = sbx_agent_open_len(argv, env)) == 0) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "arguments or environment over the agent's "
		    "bounds (%d strings, %d bytes)", SBX_AGENT_ARGS_MAX, SBX_AGENT_OPEN_MAX);
		return NULL;
	}
	if (ch->nstreams >= max || ch->next_id > SBX_AGENT_STREAM_MAX) {
		sbx_err_set(err, SBX_E_TOO_MANY, "the sandbox agent runs %zu operations "
		    "already", ch->nstreams);
		return NULL;
	}
	if ((st = calloc(1, sizeof(*st))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	/* Into the output directly: no second copy of a large argv. */
	if (evbuffer_reserve_space(chan_out(ch), (ev_ssize_t)(SBX_AGENT_HDR + n), &v, 1) < 1 ||
	    v.iov_len < SBX_AGENT_HDR + n) {
		free(st);
		sbx_err_oom(err);
		return NULL;
	}
	p = v.iov_base;
	st->ch = ch;
	st->id = ch->next_id++;
	if (sbx_agent_open_put(p + SBX_AGENT_HDR, n, argv, env) != n) {
		free(st);
		sbx_err_set(err, SBX_E_INTERNAL, "cannot encode the open");
		return NULL;
	}
	sbx_agent_hdr_put(h, SBX_AGENT_T_OPEN, (int)open_flags, st->id, (uint32_t)n);
	memcpy(p, h, sizeof(h));
	v.iov_len = SBX_AGENT_HDR + n;
	evbuffer_commit_space(chan_out(ch), &v, 1);
	if (cbs != NULL)
		st->cbs = *cbs;
	st->out_credit = ch->got_hello ? ch->hello.window : SBX_AGENT_WINDOW;
	st->in_credit = with_stdin ? st->out_credit : 0;
	st->has_stdin = with_stdin;
	st->has_ctrl = (open_flags & SBX_AGENT_OPEN_CTRL) != 0;
	TAILQ_INSERT_TAIL(&ch->streams, st, link);
	ch->nstreams++;
	return st;
}

int
sbx_agent_grow_output(struct sbx_agent_stream *st, uint32_t extra)
{
	unsigned char w[SBX_AGENT_WINDOW_LEN];

	if (st == NULL || st->ch->failed || st->detached || extra == 0 ||
	    (uint64_t)st->out_credit + st->owed + extra > SBX_AGENT_WINDOW_MAX)
		return -1;
	sbx_agent_put32(w, extra);
	send_frame(st->ch, SBX_AGENT_T_WINDOW, 1, st->id, w, sizeof(w));
	st->out_credit += extra;
	return 0;
}

/* 1 while st takes stdin: opened with it, not closed, its channel up. */
static int
stdin_open(const struct sbx_agent_stream *st)
{
	return st->has_stdin && !st->stdin_closed && !st->ch->failed;
}

size_t
sbx_agent_stdin_room(const struct sbx_agent_stream *st)
{
	return stdin_open(st) ? st->in_credit : 0;
}

/* Sends up to len bytes of stdin on st as DATA frames, each within st's
 * credit and SBX_AGENT_DATA_MAX: from buf, or (buf NULL) moved out of src.
 * The bytes sent, or -1. */
static ssize_t
send_stdin(struct sbx_agent_stream *st, const unsigned char *buf,
    struct evbuffer *src, size_t len)
{
	unsigned char h[SBX_AGENT_HDR];
	size_t n, done = 0;

	if (!stdin_open(st))
		return -1;
	while (done < len && st->in_credit > 0) {
		n = len - done;
		if (n > st->in_credit)
			n = st->in_credit;
		if (n > SBX_AGENT_DATA_MAX)
			n = SBX_AGENT_DATA_MAX;
		if (buf != NULL)
			send_frame(st->ch, SBX_AGENT_T_DATA, 0, st->id, buf + done, n);
		else {
			sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 0, st->id, (uint32_t)n);
			evbuffer_add(chan_out(st->ch), h, sizeof(h));
			if (evbuffer_remove_buffer(src, chan_out(st->ch), n) != (int)n)
				return -1;
		}
		st->in_credit -= (uint32_t)n;
		done += n;
	}
	return (ssize_t)done;
}

ssize_t
sbx_agent_write_buffer(struct sbx_agent_stream *st, struct evbuffer *src, size_t max)
{
	if (max > evbuffer_get_length(src))
		max = evbuffer_get_length(src);
	return send_stdin(st, NULL, src, max);
}

ssize_t
sbx_agent_write(struct sbx_agent_stream *st, const void *buf, size_t len)
{
	return send_stdin(st, buf, NULL, len);
}

void
sbx_agent_close_stdin(struct sbx_agent_stream *st)
{
	if (!st->has_stdin || st->stdin_closed)
		return;
	st->stdin_closed = 1;
	send_frame(st->ch, SBX_AGENT_T_EOF, 0, st->id, NULL, 0);
}

void
sbx_agent_pause(struct sbx_agent_stream *st, int paused)
{
	st->paused = paused != 0;
	if (!st->paused) {
		/* Everything held back goes now, whatever its size. */
		unsigned char w[SBX_AGENT_WINDOW_LEN];

		if (st->owed == 0 || st->detached)
			return;
		sbx_agent_put32(w, st->owed);
		send_frame(st->ch, SBX_AGENT_T_WINDOW, 1, st->id, w, sizeof(w));
		st->out_credit += st->owed;
		st->owed = 0;
	}
}

void
sbx_agent_cancel(struct sbx_agent_stream *st)
{
	if (st == NULL || st->detached)
		return;
	st->detached = 1;
	send_frame(st->ch, SBX_AGENT_T_CANCEL, 0, st->id, NULL, 0);
	/* Credit for whatever is still on its way, so the agent can drain
	 * the killed mode's pipes and reach its EXIT. */
	st->paused = 0;
}

int
sbx_agent_control(struct sbx_agent_stream *st, int kind, uint32_t a, uint32_t b)
{
	struct sbx_agent_ctrl c = { (uint32_t)kind, a, b }, back;
	unsigned char p[SBX_AGENT_CTRL_LEN];
	const char *why;

	if (st == NULL || !st->has_ctrl || st->detached || st->ch->failed)
		return -1;
	if (kind == SBX_AGENT_CTRL_SIGNAL && b != 0)
		return -1;
	/* The codec's own check: what the agent would refuse never goes. */
	sbx_agent_ctrl_put(p, &c);
	if (sbx_agent_ctrl_parse(p, sizeof(p), &back, &why) < 0)
		return -1;
	send_frame(st->ch, SBX_AGENT_T_CTRL, 0, st->id, p, sizeof(p));
	return 0;
}
