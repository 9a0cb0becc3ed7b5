/* sbx_gate.c - the request gate both listeners put in front of evhttp: heads checked before any body byte is read (adr/0008, adr/0012). */
#include <sys/queue.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sodium.h>

#include "sbx_gate.h"
#include "sbx_gate_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

/* The request header the gate uses to hand dispatch its verdict. */
#define HDR_REFUSED "X-Sbx-Refused"

/*
 * libevent 2.1.12 has no hook between a server request's headers and its
 * body (evhttp_set_newreqcb came in 2.2; evhttp_request_set_header_cb needs
 * the request before its headers are read, which a 2.1 server never hands
 * out), and evhttp_set_max_body_size answers with its own HTML 413 before
 * the request is authenticated. So each connection's input buffer carries a
 * callback that runs inside the socket read, before evhttp's read callback:
 * new bytes move to the gate's hold buffer, and only what was checked goes
 * back for evhttp to parse. A head that passes (the daemon's check says the
 * credential is good, Content-Length within the route's cap) goes through
 * unchanged and its body streams after it; a chunked body is held until it
 * is complete and within the cap. Anything else is replaced by a body-less
 * request carrying the verdict in HDR_REFUSED (with the gate's nonce, so a
 * client cannot plant one) and "Connection: close"; the rest of the
 * connection's input is thrown away. dispatch answers that request like any
 * other, in order behind earlier pipelined ones, then evhttp closes. The
 * gate is stricter than evhttp's parser (it refuses what evhttp would merely
 * tolerate), so both always agree on where a request ends.
 */

/* ------------------------------------------------------------------ */
/* Verdicts                                                            */

static const struct {
	enum sbx_gate_verdict v;
	const char *token;        /* in HDR_REFUSED */
	const char *code;
	const char *message;
} verdicts[] = {
	{ SBX_GATE_UNAUTHORIZED, "unauthorized", SBX_E_UNAUTHORIZED,
	    "A valid credential is required (Authorization: Bearer ...)." },
	{ SBX_GATE_BAD_REQUEST, "bad_request", SBX_E_BAD_REQUEST,
	    "The request's framing is not accepted (Content-Length, "
	    "Transfer-Encoding, chunk syntax, Expect, Authorization or header "
	    "syntax)." },
	{ SBX_GATE_TOO_LARGE, "too_large", SBX_E_TOO_LARGE,
	    "The body is larger than this route takes." },
	{ SBX_GATE_HEAD_TOO_LARGE, "head_too_large", SBX_E_HEAD_TOO_LARGE,
	    "The request head has too many header fields or too many bytes." },
	{ SBX_GATE_URI_TOO_LONG, "uri_too_long", SBX_E_URI_TOO_LONG,
	    "The request line is too long." },
	{ SBX_GATE_TIMEOUT, "timeout", SBX_E_REQUEST_TIMEOUT,
	    "The request head did not arrive within header_timeout." },
	{ SBX_GATE_OVERLOADED, "overloaded", SBX_E_OVERLOADED,
	    "Too many connections are open; try again shortly." },
	{ SBX_GATE_KEYLESS_FULL, "keyless_full", SBX_E_OVERLOADED,
	    "Too many connections without a credential are open; send the "
	    "key with the first request, or try again shortly." },
};
#define NVERDICTS (sizeof(verdicts) / sizeof(verdicts[0]))

int
sbx_gate_refusal(enum sbx_gate_verdict v, struct sbx_err *err)
{
	size_t i;

	for (i = 0; i < NVERDICTS; i++)
		if (verdicts[i].v == v) {
			sbx_err_set(err, verdicts[i].code, "%s",
			    verdicts[i].message);
			return sbx_err_http_status(err);
		}
	sbx_err_clear(err);
	return 0;
}

enum sbx_gate_verdict
sbx_gate_refused(const struct sbx_gate *g, struct evhttp_request *req)
{
	const char *v = evhttp_find_header(evhttp_request_get_input_headers(req),
	    HDR_REFUSED);
	size_t n = strlen(g->nonce), i;

	if (v == NULL || strlen(v) <= n || v[n] != ' ' ||
	    sodium_memcmp(v, g->nonce, n) != 0)
		return SBX_GATE_PASS;
	v += n + 1;
	for (i = 0; i < NVERDICTS; i++)
		if (strcmp(v, verdicts[i].token) == 0)
			return verdicts[i].v;
	return SBX_GATE_UNAUTHORIZED;
}

static const char *
verdict_token(enum sbx_gate_verdict v)
{
	size_t i;

	for (i = 0; i < NVERDICTS; i++)
		if (verdicts[i].v == v)
			return verdicts[i].token;
	return "unauthorized";
}

/* ------------------------------------------------------------------ */
/* Per connection                                                      */

/* Arms c's head deadline: header_timeout, shorter while keyless. */
static void
deadline_start(struct gconn *c)
{
	const struct sbx_gate_limits *lim = &c->g->lim;
	int64_t ms = lim->header_timeout_ms;
	struct timeval tv;

	if (c->keyless && lim->keyless_header_timeout_ms > 0 &&
	    lim->keyless_header_timeout_ms < ms)
		ms = lim->keyless_header_timeout_ms;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(c->deadline, &tv);
}

static void
deadline_stop(struct gconn *c)
{
	if (c->deadline != NULL)
		evtimer_del(c->deadline);
}

/*
 * Replaces the request whose head is h (NULL: not understood) by a body-less
 * one carrying v, hands it to evhttp (in), and throws away everything else
 * this connection sends. The credential goes along only when it verified,
 * so dispatch checks it again as for any request.
 */
static void
conn_refuse(struct gconn *c, struct evbuffer *in,
    const struct sbx_gate_head *h, int authed, enum sbx_gate_verdict v)
{
	/* evhttp keeps a connection open after answering a CONNECT whatever
	 * "Connection: close" says (libevent 2.1): the refusal goes as a GET. */
	if (h != NULL && h->line_ok && h->type == EVHTTP_REQ_CONNECT)
		evbuffer_add_printf(in, "GET / HTTP/1.1\r\n");
	else if (h != NULL && h->line_ok && h->type != 0)
		evbuffer_add_printf(in, "%.*s %.*s HTTP/1.1\r\n", (int)h->mlen,
		    h->method, (int)h->tlen, h->target);
	else if (h != NULL && h->line_ok)   /* a method evhttp would not parse */
		evbuffer_add_printf(in, "GET %.*s HTTP/1.1\r\n", (int)h->tlen,
		    h->target);
	else
		evbuffer_add_printf(in, "GET / HTTP/1.1\r\n");
	/* The Host too: a refusal is answered in the shape of what the Host
	 * names (an E2B sandbox's {port}-{id}.{domain}, adr/0059). */
	if (h != NULL && h->host != NULL && h->hostlen > 0)
		evbuffer_add_printf(in, "Host: %.*s\r\n", (int)h->hostlen,
		    h->host);
	if (authed && h != NULL && h->auth != NULL) {
		evbuffer_add_printf(in, "%s: ", SBX_HDR_AUTHORIZATION);
		evbuffer_add(in, h->auth, h->alen);
		evbuffer_add(in, "\r\n", 2);
	}
	/* The check's fields go along as the credential does (an E2B key or
	 * sandbox id, adr/0059): the daemon answers the refusal in the route's
	 * own shape. Each as often as it came, at most twice (two: ambiguous). */
	if (authed && h != NULL) {
		unsigned i, k;

		for (i = 0; i < SBX_GATE_FIELDS_MAX; i++)
			for (k = 0; c->g->lim.fields[i] != NULL &&
			    h->field[i] != NULL && k < h->nfield[i] && k < 2; k++) {
				evbuffer_add_printf(in, "%s: ", c->g->lim.fields[i]);
				evbuffer_add(in, h->field[i], h->fieldlen[i]);
				evbuffer_add(in, "\r\n", 2);
			}
	}
	evbuffer_add_printf(in, "Connection: close\r\n%s: %s %s\r\n\r\n",
	    HDR_REFUSED, c->g->nonce, verdict_token(v));
	evbuffer_drain(c->hold, evbuffer_get_length(c->hold));
	c->state = G_CLOSED;
	deadline_stop(c);
}

/* The daemon's check on h: its verdict, and the route's cap in *cap. */
static enum sbx_gate_verdict
conn_check(struct gconn *c, const struct sbx_gate_head *h, uint64_t *cap)
{
	struct evhttp_uri *uri = NULL;
	char *target = NULL;
	enum sbx_gate_verdict v;

	*cap = 0;
	if (h->line_ok && h->type != EVHTTP_REQ_CONNECT &&
	    (target = strndup(h->target, h->tlen)) != NULL)
		/* The parser evhttp_parse_request_line uses: the same path. */
		uri = evhttp_uri_parse_with_flags(target,
		    EVHTTP_URI_NONCONFORMANT);
	v = c->g->check(c->g->arg, h, uri != NULL ? evhttp_uri_get_path(uri) :
	    NULL, cap);
	if (uri != NULL)
		evhttp_uri_free(uri);
	free(target);
	if (v == SBX_GATE_KEYED && c->keyless) {
		c->keyless = 0;
		c->g->nkeyless--;
	}
	return v == SBX_GATE_PASS || v == SBX_GATE_KEYED ? SBX_GATE_PASS :
	    SBX_GATE_UNAUTHORIZED;
}


/*
 * Pipelining bounded (adr/0046): a complete head goes to evhttp only once
 * evhttp has taken everything let through before it, so its input holds at
 * most one request ahead. While one waits, the socket is not read: a read
 * high-water mark of 1 byte on evhttp's input (which then holds bytes)
 * suspends reading whatever enables it (evhttp turns reading on while it
 * writes a reply), and lifts when evhttp drains its input; conn_cb then lets
 * the next head through. So the held bytes stay within one head_max and one
 * socket read per connection.
 */
static void
conn_wait(struct gconn *c, int on)
{
	struct bufferevent *bev;

	if (c->waiting == on || c->evcon == NULL ||
	    (bev = evhttp_connection_get_bufferevent(c->evcon)) == NULL)
		return;
	c->waiting = on;
	bufferevent_setwatermark(bev, EV_READ, 0, on ? 1 : 0);
}

/* G_HEAD: returns 1 when it moved on, 0 when it needs more bytes. */
static int
conn_head(struct gconn *c, struct evbuffer *in)
{
	const struct sbx_gate_limits *lim = &c->g->lim;
	size_t len = evbuffer_get_length(c->hold), n;
	const char *p;
	struct sbx_gate_head h;
	uint64_t cap;

	if (len == 0) {
		conn_wait(c, 0);
		return 0;
	}
	if (c->deadline != NULL && !evtimer_pending(c->deadline, NULL))
		deadline_start(c);
	n = len < lim->head_max ? len : lim->head_max;
	if ((p = (const char *)evbuffer_pullup(c->hold, (ev_ssize_t)n)) == NULL)
		return 0;
	if (!sbx_gate_parse_from(p, n, c->scanned, lim, &h)) {
		c->scanned = n;
		conn_wait(c, 0);
		return 0;
	}
	c->scanned = 0;
	deadline_stop(c);
	if (evbuffer_get_length(in) > 0) {
		/* evhttp has not taken the last one yet: this one waits. */
		conn_wait(c, 1);
		return 0;
	}
	conn_wait(c, 0);
	if (h.bad == SBX_GATE_HEAD_TOO_LARGE || h.bad == SBX_GATE_URI_TOO_LONG ||
	    h.nauth > 1) {
		conn_refuse(c, in, &h, 0, h.bad);
		return 1;
	}
	/* The credential before anything that could tell a stranger anything. */
	if (conn_check(c, &h, &cap) != SBX_GATE_PASS) {
		conn_refuse(c, in, &h, 0, SBX_GATE_UNAUTHORIZED);
		return 1;
	}
	if (h.bad != SBX_GATE_PASS) {
		conn_refuse(c, in, &h, 1, h.bad);
		return 1;
	}
	if (h.chunked && c->g->stream != NULL && sbx_gate_conn_streams(c, &h)) {
		/* Streamed as it is decoded (M2): its handler runs, and may
		 * refuse it, before a byte of it is held. */
		c->cap = cap;
		if (sbx_gate_conn_stream_head(c, in, p, &h) == 0)
			return 1;
	}
	if (h.chunked) {
		c->state = G_CHUNKED;
		c->hlen = c->off = h.len;
		c->total = c->cleft = 0;
		c->cap = cap;
		c->cst = C_SIZE;
		return 1;
	}
	if (h.cl > cap) {
		conn_refuse(c, in, &h, 1, SBX_GATE_TOO_LARGE);
		return 1;
	}
	if (h.cl > 0 && c->g->stream != NULL && sbx_gate_conn_streams(c, &h) &&
	    sbx_gate_conn_stream_head(c, in, p, &h) == 0)
		return 1;
	evbuffer_remove_buffer(c->hold, in, h.len);
	if (h.cl > 0) {
		c->state = G_BODY;
		c->left = h.cl;
	}
	return 1;
}

/* A chunked body refused: the head is still at the start of hold. */
static void
conn_chunk_refuse(struct gconn *c, struct evbuffer *in,
    enum sbx_gate_verdict v)
{
	const char *p = (const char *)evbuffer_pullup(c->hold,
	    (ev_ssize_t)c->hlen);
	struct sbx_gate_head h;
	uint64_t cap;

	if (p == NULL) {
		conn_refuse(c, in, NULL, 0, SBX_GATE_UNAUTHORIZED);
		return;
	}
	sbx_gate_head_parse(p, c->hlen, &c->g->lim, &h);
	conn_refuse(c, in, &h, conn_check(c, &h, &cap) == SBX_GATE_PASS, v);
}

/*
 * G_CHUNKED: parses the chunked body from c->off, holding it. Chunk sizes
 * are plain hex (no extensions), each chunk ends in CRLF, no trailers: the
 * subset on which evhttp_handle_chunked_read agrees. Returns 1 when it
 * moved on (passed or refused), 0 when it needs more bytes.
 */
static int
conn_chunked(struct gconn *c, struct evbuffer *in)
{
	struct evbuffer_ptr pos, eol;
	size_t len, eollen, ll, i;
	char line[24];
	uint64_t v;

	for (;;) {
		len = evbuffer_get_length(c->hold);
		/* Framing may cost an eighth of the body: held bytes stay bounded. */
		if (c->off - c->hlen > c->cap + c->cap / 8 + 65536) {
			conn_chunk_refuse(c, in, SBX_GATE_TOO_LARGE);
			return 1;
		}
		if (c->cst == C_DATA) {
			if (len - c->off < c->cleft)
				return 0;
			c->off += c->cleft;
			c->cst = C_DATA_END;
			continue;
		}
		if (evbuffer_ptr_set(c->hold, &pos, c->off, EVBUFFER_PTR_SET) ==
		    -1)
			return 0;
		eol = evbuffer_search_eol(c->hold, &pos, &eollen, EVBUFFER_EOL_LF);
		if (eol.pos == -1) {
			if (len - c->off > sizeof(line)) {
				conn_chunk_refuse(c, in, SBX_GATE_BAD_REQUEST);
				return 1;
			}
			return 0;
		}
		ll = (size_t)eol.pos - c->off;
		if (ll > sizeof(line) - 1) {
			conn_chunk_refuse(c, in, SBX_GATE_BAD_REQUEST);
			return 1;
		}
		evbuffer_copyout_from(c->hold, &pos, line, ll);
		if (ll > 0 && line[ll - 1] == '\r')
			ll--;
		c->off = (size_t)eol.pos + 1;
		if (c->cst != C_SIZE) {   /* C_DATA_END, C_TRAILER: empty line */
			if (ll != 0) {
				conn_chunk_refuse(c, in, SBX_GATE_BAD_REQUEST);
				return 1;
			}
			if (c->cst == C_DATA_END) {
				c->cst = C_SIZE;
				continue;
			}
			evbuffer_remove_buffer(c->hold, in, c->off);
			c->state = G_HEAD;
			return 1;
		}
		for (i = 0, v = 0; i < ll; i++) {
			if (i >= 15 || !((line[i] >= '0' && line[i] <= '9') ||
			    (line[i] >= 'a' && line[i] <= 'f') ||
			    (line[i] >= 'A' && line[i] <= 'F')))
				break;
			v = v * 16 + (uint64_t)(line[i] <= '9' ? line[i] - '0' :
			    (line[i] | 0x20) - 'a' + 10);
		}
		if (ll == 0 || i != ll) {
			conn_chunk_refuse(c, in, SBX_GATE_BAD_REQUEST);
			return 1;
		}
		if (v == 0) {
			c->cst = C_TRAILER;
			continue;
		}
		if (v > c->cap - c->total) {
			conn_chunk_refuse(c, in, SBX_GATE_TOO_LARGE);
			return 1;
		}
		c->total += v;
		c->cleft = v;
		c->cst = C_DATA;
	}
}

/* Lets through to in whatever of hold can be decided now. */
static void
conn_run(struct gconn *c, struct evbuffer *in)
{
	size_t n;

	for (;;) {
		switch (c->state) {
		case G_CLOSED:
			evbuffer_drain(c->hold, evbuffer_get_length(c->hold));
			return;
		case G_BODY:
			n = evbuffer_get_length(c->hold);
			if (n > c->left)
				n = (size_t)c->left;
			evbuffer_remove_buffer(c->hold, in, n);
			if ((c->left -= n) > 0)
				return;
			c->state = G_HEAD;
			break;
		case G_SBODY:
			n = evbuffer_get_length(c->hold);
			if (n > c->left)
				n = (size_t)c->left;
			c->left -= n;
			if (c->body != NULL) {
				c->body->got += n;
				evbuffer_remove_buffer(c->hold, c->body->buf, n);
				sbx_gate_body_flow(c->body);
			} else
				evbuffer_drain(c->hold, n);   /* released */
			if (c->left > 0)
				return;
			c->state = G_HEAD;
			break;
		case G_HEAD:
			if (!conn_head(c, in))
				return;
			break;
		case G_CHUNKED:
			if (!conn_chunked(c, in))
				return;
			break;
		case G_SCHUNKED:
			if (!sbx_gate_conn_schunked(c))
				return;
			break;
		}
	}
}

/*
 * Input buffer callback: runs inside evbuffer_read, before evhttp's read
 * callback. The n_added newest bytes move to hold (older bytes were let
 * through already); then conn_run decides.
 */
static void
conn_cb(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
	struct gconn *c = arg;
	size_t len = evbuffer_get_length(in), keep;

	if (c->busy)
		return;
	if (info->n_added == 0) {
		/* evhttp took its input: a waiting head may go (outside a
		 * socket read, so the input's end is frozen: see
		 * conn_refuse_now). */
		if (c->waiting && info->n_deleted > 0 && len == 0) {
			int frozen = evbuffer_add(in, "", 0) == -1;

			if (frozen)
				evbuffer_unfreeze(in, 0);
			c->busy = 1;
			conn_run(c, in);
			c->busy = 0;
			if (frozen)
				evbuffer_freeze(in, 0);
		}
		return;
	}
	if (info->n_added > len)
		return;
	c->busy = 1;   /* our own moves below call back here */
	if (c->state == G_BODY && evbuffer_get_length(c->hold) == 0 &&
	    info->n_added <= c->left) {
		/* The common case, body bytes: they stay where they are. */
		c->left -= info->n_added;
		if (c->left == 0)
			c->state = G_HEAD;
		c->busy = 0;
		return;
	}
	keep = len - info->n_added;
	evbuffer_remove_buffer(in, c->tmp, keep);
	evbuffer_add_buffer(c->hold, in);
	evbuffer_add_buffer(in, c->tmp);
	conn_run(c, in);
	c->busy = 0;
}

/* Input callback of a connection whose gate could not be made. */
static void
conn_drop(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
	(void)arg;
	if (info->n_added > 0)
		evbuffer_drain(in, evbuffer_get_length(in));
}

static void
conn_free(struct gconn *c)
{
	if (c == NULL)
		return;
	LIST_REMOVE(c, link);
	sbx_gate_conn_body_detach(c);
	if (c->mark != 0 && c->g->unmark != NULL)
		c->g->unmark(c->g->arg, c->mark);
	if (c->counted)
		c->g->nconns--;
	if (c->keyless)
		c->g->nkeyless--;
	if (c->bind_ev != NULL)
		event_free(c->bind_ev);
	if (c->deadline != NULL)
		event_free(c->deadline);
	if (c->bev != NULL)
		bufferevent_decref(c->bev);   /* the reference held until bound */
	if (c->hold != NULL)
		evbuffer_free(c->hold);
	if (c->tmp != NULL)
		evbuffer_free(c->tmp);
	free(c);
}

/*
 * A refusal the gate decides outside a socket read (header_timeout, too many
 * connections): the replacement request goes into the input buffer and
 * evhttp is told to read it — but only while evhttp is reading a request
 * (its read callback set and reading enabled). Otherwise an earlier request
 * is being answered; evhttp reads what waits in the buffer when it starts
 * reading again (evhttp_start_read_). c may be gone when this returns.
 */
static void
conn_refuse_now(struct gconn *c, enum sbx_gate_verdict v)
{
	struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
	bufferevent_data_cb readcb = NULL;
	struct evbuffer *in;
	int frozen;

	if (c->state == G_CLOSED || bev == NULL)
		return;
	in = bufferevent_get_input(bev);
	/* A socket bufferevent keeps its input's end frozen between reads
	 * (bufferevent_sock.c unfreezes it around evbuffer_read): do the
	 * same around our addition. An empty add fails only when frozen. */
	frozen = evbuffer_add(in, "", 0) == -1;
	if (frozen)
		evbuffer_unfreeze(in, 0);
	c->busy = 1;
	conn_refuse(c, in, NULL, 0, v);
	c->busy = 0;
	if (frozen)
		evbuffer_freeze(in, 0);
	bufferevent_getcb(bev, &readcb, NULL, NULL, NULL);
	if (readcb != NULL && (bufferevent_get_enabled(bev) & EV_READ))
		bufferevent_trigger(bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS);
}

static void
conn_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct gconn *c = arg;

	(void)fd;
	(void)what;
	if (c->evcon != NULL && c->state == G_HEAD)
		conn_refuse_now(c, SBX_GATE_TIMEOUT);
}

/* evhttp is freeing the connection: tell a watcher, then go. */
static void
conn_closed(struct evhttp_connection *evcon, void *arg)
{
	struct gconn *c = arg;
	struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
	void (*closed)(struct evhttp_connection *, void *) = c->closed;

	c->closed = NULL;
	if (closed != NULL)
		closed(evcon, c->closed_arg);
	if (bev != NULL)
		evbuffer_remove_cb_entry(bufferevent_get_input(bev), c->ent);
	conn_free(c);
}

/*
 * The keyless pool is full and c would join it: the oldest keyless
 * connection that is idle (reading a head, nothing let through, no request
 * in flight) is refused with SBX_GATE_KEYLESS_FULL and leaves the pool.
 * Returns 0, or -1 when none is idle.
 */
static int
keyless_evict(struct sbx_gate *g, struct gconn *c)
{
	struct gconn *o, *victim = NULL;
	struct bufferevent *bev;
	bufferevent_data_cb readcb;

	LIST_FOREACH(o, &g->conns, link) {   /* newest first */
		readcb = NULL;
		if (o == c || !o->keyless || o->state != G_HEAD || o->waiting ||
		    o->evcon == NULL ||
		    (bev = evhttp_connection_get_bufferevent(o->evcon)) == NULL ||
		    evbuffer_get_length(bufferevent_get_input(bev)) > 0)
			continue;
		bufferevent_getcb(bev, &readcb, NULL, NULL, NULL);
		if (readcb != NULL)
			victim = o;
	}
	if (victim == NULL)
		return -1;
	victim->keyless = 0;
	g->nkeyless--;
	conn_refuse_now(victim, SBX_GATE_KEYLESS_FULL);
	return 0;
}

/*
 * A reply's small writes leave at once (adr/0062): without TCP_NODELAY a
 * second small segment (a stream's next message, the rest of a reply) waits
 * for the ACK of the first, which a keep-alive client delays up to 40 ms.
 * A unix socket has no Nagle: the call fails there, harmlessly.
 */
static void
conn_nodelay(evutil_socket_t fd)
{
	int one = 1;

	if (fd >= 0)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/*
 * Runs once, right after evhttp made the connection around the bufferevent
 * conn_bev_new returned (in the same accept callback, before any read).
 * evhttp passes its connection as the bufferevent's callback argument
 * (bufferevent_getcb), which is the only way a 2.1 server learns it before a
 * request completes; its close callback then frees the gate with it.
 */
static void
conn_bind(evutil_socket_t fd, short what, void *arg)
{
	struct gconn *c = arg;
	struct bufferevent *bev = c->bev;
	void *cbarg = NULL;

	(void)fd;
	(void)what;
	bufferevent_getcb(bev, NULL, NULL, NULL, &cbarg);
	if (cbarg == NULL || evhttp_connection_get_bufferevent(cbarg) != bev) {
		/* evhttp gave the connection up before it started. */
		evbuffer_remove_cb_entry(bufferevent_get_input(bev), c->ent);
		conn_free(c);
		return;
	}
	c->evcon = cbarg;
	conn_nodelay(bufferevent_getfd(bev));
	evhttp_connection_set_closecb(c->evcon, conn_closed, c);
	c->bev = NULL;
	bufferevent_decref(bev);
	if (c->g->nconns >= c->g->lim.max_connections) {
		conn_refuse_now(c, SBX_GATE_OVERLOADED);
		return;
	}
	c->counted = 1;
	c->g->nconns++;
	if (c->g->lim.max_connections_keyless > 0) {
		if (c->g->nkeyless >= c->g->lim.max_connections_keyless &&
		    keyless_evict(c->g, c) == -1) {
			conn_refuse_now(c, SBX_GATE_KEYLESS_FULL);
			return;
		}
		c->keyless = 1;
		c->g->nkeyless++;
	}
	/* The first head is due within header_timeout of the connection. */
	deadline_start(c);
}

/* evhttp_set_bevcb: each accepted connection's bufferevent, gated. */
static struct bufferevent *
conn_bev_new(struct event_base *base, void *arg)
{
	struct sbx_gate *g = arg;
	struct bufferevent *bev = NULL;
	struct gconn *c = NULL;

	if ((bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE)) ==
	    NULL || (c = calloc(1, sizeof(*c))) == NULL)
		goto fail;
	c->g = g;
	LIST_INSERT_HEAD(&g->conns, c, link);
	if ((c->hold = evbuffer_new()) == NULL ||
	    (c->tmp = evbuffer_new()) == NULL ||
	    (c->bind_ev = evtimer_new(base, conn_bind, c)) == NULL ||
	    (c->deadline = evtimer_new(base, conn_deadline, c)) == NULL ||
	    (c->ent = evbuffer_add_cb(bufferevent_get_input(bev), conn_cb,
	    c)) == NULL)
		goto fail;
	bufferevent_incref(bev);
	c->bev = bev;
	event_active(c->bind_ev, EV_TIMEOUT, 1);
	return bev;
fail:
	/* NULL would make evhttp use an ungated bufferevent of its own: keep
	 * ours, and let nothing it reads through (the request times out). */
	log_error("out of memory accepting a connection", NULL);
	if (c != NULL)
		conn_free(c);
	if (bev != NULL && evbuffer_add_cb(bufferevent_get_input(bev),
	    conn_drop, NULL) == NULL) {
		bufferevent_free(bev);
		bev = NULL;
	}
	return bev;
}

/* ------------------------------------------------------------------ */
/* Per server                                                          */

struct sbx_gate *
sbx_gate_new(struct event_base *base, struct evhttp *http,
    const struct sbx_gate_limits *lim, sbx_gate_check_fn check, void *arg,
    struct sbx_err *err)
{
	struct sbx_gate *g;
	unsigned char nonce[16];

	if (sodium_init() < 0 || (g = calloc(1, sizeof(*g))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	g->base = base;
	g->http = http;
	g->lim = *lim;
	if (g->lim.head_max < 64)
		g->lim.head_max = 64;
	if (g->lim.header_timeout_ms <= 0)
		g->lim.header_timeout_ms = 10000;
	g->check = check;
	g->arg = arg;
	LIST_INIT(&g->conns);
	randombytes_buf(nonce, sizeof(nonce));
	sodium_bin2hex(g->nonce, sizeof(g->nonce), nonce, sizeof(nonce));
	/* The gate decides on size first; evhttp's own limit is a backstop
	 * that its (small) replacement requests never reach. */
	evhttp_set_max_headers_size(http, (ev_ssize_t)g->lim.head_max + 4096);
	evhttp_set_bevcb(http, conn_bev_new, g);
	return g;
}

void
sbx_gate_free(struct sbx_gate *g)
{
	struct gconn *c;

	if (g == NULL)
		return;
	while ((c = LIST_FIRST(&g->conns)) != NULL) {
		if (c->evcon != NULL) {
			struct bufferevent *bev =
			    evhttp_connection_get_bufferevent(c->evcon);

			evhttp_connection_set_closecb(c->evcon, NULL, NULL);
			if (bev != NULL) {
				evbuffer_remove_cb_entry(
				    bufferevent_get_input(bev), c->ent);
				evbuffer_add_cb(bufferevent_get_input(bev),
				    conn_drop, NULL);
			}
		} else if (c->bev != NULL)
			evbuffer_remove_cb_entry(bufferevent_get_input(c->bev),
			    c->ent);
		conn_free(c);
	}
	free(g);
}

int
sbx_gate_watch(struct sbx_gate *g, struct evhttp_connection *conn,
    void (*closed)(struct evhttp_connection *, void *), void *arg)
{
	struct gconn *c = g != NULL ? sbx_gate_conn_find(g, conn) : NULL;

	if (c == NULL) {
		evhttp_connection_set_closecb(conn, closed, arg);
		return -1;
	}
	c->closed = closed;
	c->closed_arg = closed != NULL ? arg : NULL;
	return 0;
}

int
sbx_gate_upgrade(struct sbx_gate *g, struct evhttp_connection *conn,
    struct bufferevent *bev, struct evbuffer *held)
{
	struct gconn *c = g != NULL && conn != NULL ?
	    sbx_gate_conn_find(g, conn) : NULL;
	struct bufferevent *obev;

	if (c == NULL)
		return -1;
	if ((obev = evhttp_connection_get_bufferevent(conn)) != NULL &&
	    c->ent != NULL)
		evbuffer_remove_cb_entry(bufferevent_get_input(obev), c->ent);
	c->ent = NULL;
	evhttp_connection_set_closecb(conn, NULL, NULL);
	c->closed = NULL;
	deadline_stop(c);
	sbx_gate_conn_body_detach(c);
	if (c->state != G_CLOSED)
		evbuffer_add_buffer(held, c->hold);
	evbuffer_drain(c->hold, evbuffer_get_length(c->hold));
	c->state = G_CLOSED;
	c->evcon = NULL;
	c->upgraded = bev;
	return 0;
}

void
sbx_gate_upgraded_close(struct sbx_gate *g, struct bufferevent *bev)
{
	struct gconn *c;

	if (g == NULL || bev == NULL)
		return;
	LIST_FOREACH(c, &g->conns, link)
		if (c->upgraded == bev) {
			conn_free(c);
			return;
		}
}

unsigned
sbx_gate_connections(const struct sbx_gate *g)
{
	return g != NULL ? g->nconns : 0;
}

unsigned
sbx_gate_keyless(const struct sbx_gate *g)
{
	return g != NULL ? g->nkeyless : 0;
}

size_t
sbx_gate_buffered(const struct sbx_gate *g)
{
	const struct gconn *c;
	struct bufferevent *bev;
	size_t n = 0;

	if (g == NULL)
		return 0;
	LIST_FOREACH(c, &g->conns, link) {
		n += evbuffer_get_length(c->hold);
		if (c->evcon != NULL && (bev =
		    evhttp_connection_get_bufferevent(c->evcon)) != NULL)
			n += evbuffer_get_length(bufferevent_get_input(bev));
	}
	return n;
}

int64_t
sbx_gate_conn_mark(struct sbx_gate *g, struct evhttp_request *req)
{
	struct evhttp_connection *conn = evhttp_request_get_connection(req);
	struct gconn *c = g != NULL && conn != NULL ?
	    sbx_gate_conn_find(g, conn) : NULL;

	return c != NULL ? c->mark : 0;
}

int
sbx_gate_conn_set_mark(struct sbx_gate *g, struct evhttp_request *req,
    int64_t mark)
{
	struct evhttp_connection *conn = evhttp_request_get_connection(req);
	struct gconn *c = g != NULL && conn != NULL ?
	    sbx_gate_conn_find(g, conn) : NULL;

	if (c == NULL)
		return -1;
	c->mark = mark;
	return 0;
}

void
sbx_gate_set_unmark(struct sbx_gate *g, void (*unmark)(void *arg,
    int64_t mark))
{
	g->unmark = unmark;
}
