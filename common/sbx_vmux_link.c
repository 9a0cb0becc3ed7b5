/* sbx_vmux_link.c - one vm sandbox's egress link (sbx_vmux_link.h, adr/0069): connections multiplexed over one stream with per-connection credit; touches only the bufferevents it was handed. */
#include <sys/socket.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "sbx_vmux.h"
#include "sbx_vmux_link.h"

struct vconn {
	struct vmux *m;
	uint32_t id;
	struct bufferevent *bev;
	struct evbuffer_cb_entry *drain;
	size_t credit;      /* bytes we may still send the other side */
	size_t inflight;    /* bytes the other side sent us, not credited back yet */
	size_t drained;     /* of those, written to our socket since the last CREDIT */
	int local_eof;      /* our socket ended its input */
	int eof_sent;
	int peer_eof;
	int shut;           /* shutdown(SHUT_WR) done after peer_eof */
};

struct vmux {
	struct bufferevent *link;
	vmux_open_cb open;
	vmux_end_cb end;
	void *arg;
	int max;
	size_t n;
	struct vconn **c;
	uint32_t next_id;
	int paused;         /* the peer's frames unread until it reads ours */
	double tokens;      /* OPENs this side may still dial now (VMUX_OPEN_RATE) */
	uint64_t tok_ms;    /* when tokens was last topped up (CLOCK_MONOTONIC) */
	struct event *rate; /* reads again once a token is there */
};

static void conn_read(struct bufferevent *bev, void *arg);
static void conn_write(struct bufferevent *bev, void *arg);
static void conn_event(struct bufferevent *bev, short what, void *arg);

static void
send_frame(struct vmux *m, enum vmux_type type, uint32_t id)
{
	unsigned char h[VMUX_HDR];

	vmux_header(h, type, id, 0);
	bufferevent_write(m->link, h, sizeof(h));
}

static struct vconn *
find(struct vmux *m, uint32_t id)
{
	int i;

	for (i = 0; i < m->max; i++)
		if (m->c[i] != NULL && m->c[i]->id == id)
			return m->c[i];
	return NULL;
}

static void
conn_free(struct vconn *c)
{
	struct vmux *m = c->m;
	int i;

	for (i = 0; i < m->max; i++)
		if (m->c[i] == c) {
			m->c[i] = NULL;
			m->n--;
		}
	if (c->drain != NULL)
		evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->drain);
	bufferevent_free(c->bev);
	free(c);
}

/* Both directions ended: nothing left to say. */
static void
maybe_done(struct vconn *c)
{
	if (c->eof_sent && c->peer_eof && c->shut)
		conn_free(c);
}

/* Abort: CLOSE to the other side, our socket closed. */
static void
conn_abort(struct vconn *c)
{
	send_frame(c->m, VMUX_CLOSE, c->id);
	conn_free(c);
}

/* Our socket's bytes to the other side, as far as its credit goes; then
 * EOF once the socket's input ended and all of it went. 1: c freed. */
static int
pump(struct vconn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	struct evbuffer *out = bufferevent_get_output(c->m->link);
	unsigned char h[VMUX_HDR];
	size_t have, n;

	while (c->credit > 0 && (have = evbuffer_get_length(in)) > 0) {
		n = have < c->credit ? have : c->credit;
		if (n > VMUX_DATA_MAX)
			n = VMUX_DATA_MAX;
		vmux_header(h, VMUX_DATA, c->id, n);
		evbuffer_add(out, h, sizeof(h));
		evbuffer_remove_buffer(in, out, n);
		c->credit -= n;
	}
	if (c->credit == 0)
		bufferevent_disable(c->bev, EV_READ);
	if (c->local_eof && !c->eof_sent && evbuffer_get_length(in) == 0) {
		send_frame(c->m, VMUX_EOF, c->id);
		c->eof_sent = 1;
		if (c->eof_sent && c->peer_eof && c->shut) {
			conn_free(c);
			return 1;
		}
	}
	return 0;
}

/* The other side's bytes left our socket's queue: credit them back in
 * quarters of the window, or all once the queue is empty. */
static void
on_drain(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct vconn *c = arg;
	unsigned char f[VMUX_HDR + 4];

	if (info->n_deleted == 0)
		return;
	c->drained += info->n_deleted;
	if (c->drained > c->inflight)
		c->drained = c->inflight;
	if (c->drained > 0 && (c->drained >= VMUX_WINDOW / 4 || evbuffer_get_length(buf) == 0)) {
		bufferevent_write(c->m->link, f, vmux_credit(f, c->id, (uint32_t)c->drained));
		c->inflight -= c->drained;
		c->drained = 0;
	}
}

static struct vconn *
conn_new(struct vmux *m, uint32_t id, struct bufferevent *bev)
{
	struct vconn *c;
	int i;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->m = m;
	c->id = id;
	c->bev = bev;
	c->credit = VMUX_WINDOW;
	if ((c->drain = evbuffer_add_cb(bufferevent_get_output(bev), on_drain, c)) == NULL) {
		free(c);
		return NULL;
	}
	for (i = 0; i < m->max; i++)
		if (m->c[i] == NULL) {
			m->c[i] = c;
			m->n++;
			break;
		}
	bufferevent_setcb(bev, conn_read, conn_write, conn_event, c);
	/* Never more than a window read ahead of the credit. */
	bufferevent_setwatermark(bev, EV_READ, 0, VMUX_WINDOW);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	return c;
}

static void
conn_read(struct bufferevent *bev, void *arg)
{
	(void)bev;
	pump(arg);
}

/* Output drained: the other side's EOF becomes our socket's shutdown. */
static void
conn_write(struct bufferevent *bev, void *arg)
{
	struct vconn *c = arg;

	if (c->peer_eof && !c->shut && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
		shutdown(bufferevent_getfd(bev), SHUT_WR);
		c->shut = 1;
		maybe_done(c);
	}
}

static void
conn_event(struct bufferevent *bev, short what, void *arg)
{
	struct vconn *c = arg;

	(void)bev;
	if (what & BEV_EVENT_ERROR) {
		conn_abort(c);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		c->local_eof = 1;
		pump(c);
	}
}

/* ---------- frames from the other side ---------- */

/* One frame; returns NULL, or why the link must end. */
static const char *
on_frame(struct vmux *m, const struct vmux_frame *f)
{
	struct vconn *c = find(m, f->id);
	struct bufferevent *bev;

	switch (f->type) {
	case VMUX_OPEN:
		if (m->open == NULL)
			return "OPEN from the broker side";
		if (c != NULL)
			return "OPEN of an open connection";
		if (m->n >= (size_t)m->max || (bev = m->open(m->arg)) == NULL) {
			send_frame(m, VMUX_CLOSE, f->id);
			return NULL;
		}
		if (conn_new(m, f->id, bev) == NULL) {
			bufferevent_free(bev);
			send_frame(m, VMUX_CLOSE, f->id);
		}
		return NULL;
	case VMUX_DATA:
		if (c == NULL || c->peer_eof)
			return NULL;   /* closed here already; its late bytes are dropped */
		if (c->inflight + f->len > VMUX_WINDOW) {
			conn_abort(c);  /* past the credit it was given */
			return NULL;
		}
		c->inflight += f->len;
		bufferevent_write(c->bev, f->data, f->len);
		return NULL;
	case VMUX_EOF:
		if (c == NULL || c->peer_eof)
			return NULL;
		c->peer_eof = 1;
		conn_write(c->bev, c);
		return NULL;
	case VMUX_CLOSE:
		if (c != NULL)
			conn_free(c);
		return NULL;
	case VMUX_CREDIT:
		if (c == NULL)
			return NULL;
		if (c->credit + f->credit > VMUX_WINDOW) {
			conn_abort(c);
			return NULL;
		}
		c->credit += f->credit;
		if (!c->local_eof)
			bufferevent_enable(c->bev, EV_READ);
		pump(c);
		return NULL;
	}
	return "unknown frame";
}

static uint64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Broker side, f an OPEN that would dial: 1 when a token is there (taken),
 * else 0 with the link's reading off until one comes (rate_due). */
static int
open_token(struct vmux *m)
{
	uint64_t now = mono_ms();
	struct timeval tv;
	double wait_ms;

	m->tokens += (double)(now - m->tok_ms) * VMUX_OPEN_RATE / 1000.0;
	if (m->tokens > VMUX_OPEN_BURST)
		m->tokens = VMUX_OPEN_BURST;
	m->tok_ms = now;
	if (m->tokens >= 1.0) {
		m->tokens -= 1.0;
		return 1;
	}
	wait_ms = (1.0 - m->tokens) * 1000.0 / VMUX_OPEN_RATE + 1;
	tv.tv_sec = 0;
	tv.tv_usec = (suseconds_t)(wait_ms * 1000);
	bufferevent_disable(m->link, EV_READ);
	evtimer_add(m->rate, &tv);
	return 0;
}

static void
link_read(struct bufferevent *bev, void *arg)
{
	struct vmux *m = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer *out = bufferevent_get_output(bev);
	struct vmux_frame f;
	const char *why = NULL;
	unsigned char *p;
	size_t have;
	long r;

	while ((have = evbuffer_get_length(in)) > 0) {
		/* Broker side: a peer that does not read what it is answered
		 * (CLOSE, CREDIT, the DATA its credit asked for) is not read
		 * either until it has, so it cannot grow our queue (link_write
		 * resumes). Not on the guest side: both waiting would be a
		 * deadlock, and the broker always reads. */
		if (m->open != NULL && evbuffer_get_length(out) > VMUX_OUT_PAUSE) {
			m->paused = 1;
			bufferevent_disable(bev, EV_READ);
			return;
		}
		if (have > VMUX_HDR + VMUX_DATA_MAX)
			have = VMUX_HDR + VMUX_DATA_MAX;
		if ((p = evbuffer_pullup(in, (ssize_t)have)) == NULL) {
			m->end(m->arg, "out of memory");
			return;
		}
		r = vmux_parse(p, have, &f, &why);
		if (r == 0)
			return;
		/* An OPEN that would dial waits for its token, unread. */
		if (r > 0 && f.type == VMUX_OPEN && m->open != NULL &&
		    m->n < (size_t)m->max && find(m, f.id) == NULL && !open_token(m))
			return;
		if (r < 0 || (why = on_frame(m, &f)) != NULL) {
			m->end(m->arg, why);
			return;
		}
		evbuffer_drain(in, (size_t)r);
	}
}

/* Our queue to the peer fell to VMUX_OUT_PAUSE / 2: read its frames again,
 * those that waited first. */
static void
link_write(struct bufferevent *bev, void *arg)
{
	struct vmux *m = arg;

	if (!m->paused)
		return;
	m->paused = 0;
	bufferevent_enable(bev, EV_READ);
	link_read(bev, m);      /* may end (free) the link: nothing after */
}

/* A token is there again: read the OPEN that waited, and what follows. */
static void
rate_due(evutil_socket_t fd, short what, void *arg)
{
	struct vmux *m = arg;

	(void)fd;
	(void)what;
	if (m->paused)
		return;          /* link_write resumes, and meets the bucket again */
	bufferevent_enable(m->link, EV_READ);
	link_read(m->link, m);  /* may end (free) the link: nothing after */
}

static void
link_event(struct bufferevent *bev, short what, void *arg)
{
	struct vmux *m = arg;

	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		m->end(m->arg, what & BEV_EVENT_EOF ? "the link ended" : "the link failed");
}

struct vmux *
vmux_new(struct bufferevent *link, int max_conns, vmux_open_cb open, vmux_end_cb end,
    void *arg)
{
	struct vmux *m = calloc(1, sizeof(*m));

	if (m == NULL || max_conns < 1 ||
	    (m->c = calloc((size_t)max_conns, sizeof(*m->c))) == NULL ||
	    (m->rate = evtimer_new(bufferevent_get_base(link), rate_due, m)) == NULL) {
		if (m != NULL)
			free(m->c);
		free(m);
		bufferevent_free(link);
		return NULL;
	}
	m->tokens = VMUX_OPEN_BURST;
	m->tok_ms = mono_ms();
	m->link = link;
	m->max = max_conns;
	m->open = open;
	m->end = end;
	m->arg = arg;
	m->next_id = 1;
	bufferevent_setcb(link, link_read, link_write, link_event, m);
	bufferevent_setwatermark(link, EV_WRITE, VMUX_OUT_PAUSE / 2, 0);
	bufferevent_enable(link, EV_READ | EV_WRITE);
	return m;
}

int
vmux_add(struct vmux *m, struct bufferevent *bev)
{
	struct vconn *c;

	if (m->n >= (size_t)m->max) {
		bufferevent_free(bev);
		return -1;
	}
	/* Ids only grow (0 skipped): a late frame of an ended connection can
	 * never be taken for a new one's. */
	while (m->next_id == 0 || find(m, m->next_id) != NULL)
		m->next_id++;
	if ((c = conn_new(m, m->next_id++, bev)) == NULL) {
		bufferevent_free(bev);
		return -1;
	}
	send_frame(m, VMUX_OPEN, c->id);
	return 0;
}

size_t
vmux_count(const struct vmux *m)
{
	return m->n;
}

void
vmux_free(struct vmux *m)
{
	int i;

	if (m == NULL)
		return;
	for (i = 0; i < m->max; i++)
		if (m->c[i] != NULL)
			conn_free(m->c[i]);
	bufferevent_free(m->link);
	event_free(m->rate);
	free(m->c);
	free(m);
}
