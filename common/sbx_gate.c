/* sbx_gate.c - the request gate both listeners put in front of evhttp: heads checked before any body byte is read (adr/0008, adr/0012). */
#include <sys/queue.h>

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
/* The request header tying a streamed body to its request (adr/0018). */
#define HDR_BODY "X-Sbx-Body"

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
enum conn_state { G_HEAD, G_BODY, G_SBODY, G_CHUNKED, G_CLOSED };
enum chunk_state { C_SIZE, C_DATA, C_DATA_END, C_TRAILER };

struct gconn {
	LIST_ENTRY(gconn) link;
	struct sbx_gate *g;
	struct evhttp_connection *evcon;  /* NULL until conn_bind */
	struct bufferevent *bev;          /* referenced until conn_bind */
	struct event *bind_ev;
	struct event *deadline;           /* header_timeout of the head being read */
	struct evbuffer_cb_entry *ent;
	struct evbuffer *hold;    /* read, not yet let through to evhttp */
	struct evbuffer *tmp;
	void (*closed)(struct evhttp_connection *, void *);
	void *closed_arg;
	enum conn_state state;
	int busy;
	int counted;              /* counted in g->nconns */
	size_t scanned;           /* G_HEAD: bytes of hold searched for the end */
	uint64_t left;            /* G_BODY: Content-Length bytes still to pass */
	size_t hlen, off;         /* G_CHUNKED: head length, parse offset */
	uint64_t total, cap, cleft;
	enum chunk_state cst;
	struct sbx_gate_body *body;  /* G_SBODY's body; NULL: released (discard) */
};

/* A streamed body (adr/0018): the gate keeps it from evhttp and hands it to
 * whoever takes it, at most window bytes buffered at a time. */
struct sbx_gate_body {
	struct gconn *c;          /* NULL once the connection is gone */
	struct evbuffer *buf;     /* arrived, not yet taken by the consumer */
	struct evbuffer_cb_entry *ent;
	uint64_t len, got;        /* Content-Length; bytes arrived so far */
	uint64_t seq;
	size_t window;
	int taken;
};

struct sbx_gate {
	struct event_base *base;
	struct evhttp *http;
	struct sbx_gate_limits lim;
	sbx_gate_check_fn check;
	void *arg;
	char nonce[33];
	sbx_gate_stream_fn stream;
	uint64_t body_seq;
	LIST_HEAD(, gconn) conns;
	unsigned nconns;
};

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
	if (authed && h != NULL && h->auth != NULL) {
		evbuffer_add_printf(in, "%s: ", SBX_HDR_AUTHORIZATION);
		evbuffer_add(in, h->auth, h->alen);
		evbuffer_add(in, "\r\n", 2);
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
	return v == SBX_GATE_PASS ? SBX_GATE_PASS : SBX_GATE_UNAUTHORIZED;
}

/* Whether the daemon streams h's body (its route's hook). */
static int
conn_streams(struct gconn *c, const struct sbx_gate_head *h)
{
	struct evhttp_uri *uri = NULL;
	char *target;
	int r = 0;

	if (!h->line_ok || h->type == EVHTTP_REQ_CONNECT ||
	    (target = strndup(h->target, h->tlen)) == NULL)
		return 0;
	if ((uri = evhttp_uri_parse_with_flags(target,
	    EVHTTP_URI_NONCONFORMANT)) != NULL &&
	    evhttp_uri_get_path(uri) != NULL)
		r = c->g->stream(c->g->arg, h, evhttp_uri_get_path(uri));
	if (uri != NULL)
		evhttp_uri_free(uri);
	free(target);
	return r;
}

/* Reading on while the consumer has room (and evhttp is not reading a
 * request: its read callback would see bytes in a state it aborts on). */
static void
body_flow(struct sbx_gate_body *b)
{
	struct bufferevent *bev;
	bufferevent_data_cb readcb = NULL;

	if (b == NULL || b->c == NULL || b->c->body != b ||
	    b->c->state != G_SBODY || b->c->evcon == NULL ||
	    (bev = evhttp_connection_get_bufferevent(b->c->evcon)) == NULL)
		return;
	if (evbuffer_get_length(b->buf) >= b->window) {
		bufferevent_disable(bev, EV_READ);
		return;
	}
	bufferevent_getcb(bev, &readcb, NULL, NULL, NULL);
	if (b->taken && readcb == NULL)
		bufferevent_enable(bev, EV_READ);
}

/* The consumer took bytes: maybe room to read again. */
static void
body_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	(void)buf;
	if (info->n_deleted > 0)
		body_flow(arg);
}

/* Lets go of c's body (the consumer may still hold it). */
static void
conn_body_detach(struct gconn *c)
{
	struct sbx_gate_body *b = c->body;

	c->body = NULL;
	if (b == NULL)
		return;
	b->c = NULL;
	if (!b->taken)
		sbx_gate_body_free(b);
}

/*
 * A head whose body streams: evhttp gets the head without its framing
 * (no Content-Length, no Expect: it dispatches at once, body-less) and a
 * HDR_BODY naming the body; the body's bytes go to c->body. Returns 0, or
 * -1 (out of memory) to let the body through as usual.
 */
static int
conn_stream_head(struct gconn *c, struct evbuffer *in, const char *p,
    const struct sbx_gate_head *h)
{
	const char *ls = p, *end = p + h->len, *line, *colon;
	struct sbx_gate_body *b;
	struct bufferevent *bev;
	size_t ll, nl;
	int first = 1, expect = 0;

	if ((b = calloc(1, sizeof(*b))) == NULL ||
	    (b->buf = evbuffer_new()) == NULL ||
	    (b->ent = evbuffer_add_cb(b->buf, body_drained, b)) == NULL) {
		if (b != NULL && b->buf != NULL)
			evbuffer_free(b->buf);
		free(b);
		return -1;
	}
	b->len = h->cl;
	b->window = SBX_GATE_BODY_WINDOW;
	b->seq = ++c->g->body_seq;
	while (sbx_gate_line(&ls, end, &line, &ll)) {
		colon = first ? NULL : memchr(line, ':', ll);
		nl = colon != NULL ? (size_t)(colon - line) : 0;
		if (colon != NULL && (sbx_gate_hname_is(line, nl,
		    "Content-Length") || sbx_gate_hname_is(line, nl,
		    HDR_BODY) || sbx_gate_hname_is(line, nl, "Expect"))) {
			expect |= sbx_gate_hname_is(line, nl, "Expect");
		} else {
			evbuffer_add(in, line, ll);
			evbuffer_add(in, "\r\n", 2);
		}
		first = 0;
	}
	evbuffer_add_printf(in, "%s: %s %llu\r\n\r\n", HDR_BODY, c->g->nonce,
	    (unsigned long long)b->seq);
	evbuffer_drain(c->hold, h->len);
	conn_body_detach(c);
	c->body = b;
	b->c = c;
	c->state = G_SBODY;
	c->left = h->cl;
	/* evhttp would have said it; without Expect it does not. */
	if (expect && c->evcon != NULL &&
	    (bev = evhttp_connection_get_bufferevent(c->evcon)) != NULL)
		bufferevent_write(bev, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	return 0;
}

/* G_HEAD: returns 1 when it moved on, 0 when it needs more bytes. */
static int
conn_head(struct gconn *c, struct evbuffer *in)
{
	const struct sbx_gate_limits *lim = &c->g->lim;
	size_t len = evbuffer_get_length(c->hold), n;
	const char *p;
	struct sbx_gate_head h;
	struct timeval tv;
	uint64_t cap;

	if (len == 0)
		return 0;
	if (c->deadline != NULL && !evtimer_pending(c->deadline, NULL)) {
		tv.tv_sec = lim->header_timeout_ms / 1000;
		tv.tv_usec = (lim->header_timeout_ms % 1000) * 1000;
		evtimer_add(c->deadline, &tv);
	}
	n = len < lim->head_max ? len : lim->head_max;
	if ((p = (const char *)evbuffer_pullup(c->hold, (ev_ssize_t)n)) == NULL)
		return 0;
	if (!sbx_gate_parse_from(p, n, c->scanned, lim, &h)) {
		c->scanned = n;
		return 0;
	}
	c->scanned = 0;
	deadline_stop(c);
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
	if (h.cl > 0 && c->g->stream != NULL && conn_streams(c, &h) &&
	    conn_stream_head(c, in, p, &h) == 0)
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
				body_flow(c->body);
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

	if (c->busy || info->n_added == 0 || info->n_added > len)
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
	conn_body_detach(c);
	if (c->counted)
		c->g->nconns--;
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

static struct gconn *
conn_find(struct sbx_gate *g, struct evhttp_connection *evcon)
{
	struct gconn *c;

	LIST_FOREACH(c, &g->conns, link)
		if (c->evcon == evcon)
			return c;
	return NULL;
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
	struct timeval tv;

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
	evhttp_connection_set_closecb(c->evcon, conn_closed, c);
	c->bev = NULL;
	bufferevent_decref(bev);
	if (c->g->nconns >= c->g->lim.max_connections) {
		conn_refuse_now(c, SBX_GATE_OVERLOADED);
		return;
	}
	c->counted = 1;
	c->g->nconns++;
	/* The first head is due within header_timeout of the connection. */
	tv.tv_sec = c->g->lim.header_timeout_ms / 1000;
	tv.tv_usec = (c->g->lim.header_timeout_ms % 1000) * 1000;
	evtimer_add(c->deadline, &tv);
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
	struct gconn *c = g != NULL ? conn_find(g, conn) : NULL;

	if (c == NULL) {
		evhttp_connection_set_closecb(conn, closed, arg);
		return -1;
	}
	c->closed = closed;
	c->closed_arg = closed != NULL ? arg : NULL;
	return 0;
}

void
sbx_gate_set_stream(struct sbx_gate *g, sbx_gate_stream_fn stream)
{
	g->stream = stream;
}

struct sbx_gate_body *
sbx_gate_body_take(struct sbx_gate *g, struct evhttp_request *req)
{
	struct evhttp_connection *conn = evhttp_request_get_connection(req);
	const char *v = evhttp_find_header(evhttp_request_get_input_headers(req),
	    HDR_BODY);
	struct gconn *c = g != NULL && conn != NULL ? conn_find(g, conn) : NULL;
	size_t n = strlen(g != NULL ? g->nonce : "");
	char want[32];

	if (c == NULL || c->body == NULL || c->body->taken || v == NULL ||
	    strlen(v) <= n || v[n] != ' ' || sodium_memcmp(v, g->nonce, n) != 0)
		return NULL;
	snprintf(want, sizeof(want), "%llu", (unsigned long long)c->body->seq);
	if (strcmp(v + n + 1, want) != 0)
		return NULL;
	c->body->taken = 1;
	return c->body;
}

struct evbuffer *
sbx_gate_body_buffer(struct sbx_gate_body *b)
{
	return b->buf;
}

uint64_t
sbx_gate_body_length(const struct sbx_gate_body *b)
{
	return b->len;
}

int
sbx_gate_body_complete(const struct sbx_gate_body *b)
{
	return b->got == b->len;
}

void
sbx_gate_body_window(struct sbx_gate_body *b, size_t window)
{
	b->window = window > 0 ? window : 1;
	body_flow(b);
}

void
sbx_gate_body_kick(struct sbx_gate_body *b)
{
	body_flow(b);
}

void
sbx_gate_body_free(struct sbx_gate_body *b)
{
	if (b == NULL)
		return;
	if (b->c != NULL) {
		/* The rest of the body is read and thrown away. */
		b->c->body = NULL;
		if (b->c->state == G_SBODY && b->c->evcon != NULL &&
		    b->taken) {
			struct bufferevent *bev =
			    evhttp_connection_get_bufferevent(b->c->evcon);
			bufferevent_data_cb readcb = NULL;

			if (bev != NULL) {
				bufferevent_getcb(bev, &readcb, NULL, NULL, NULL);
				if (readcb == NULL)
					bufferevent_enable(bev, EV_READ);
			}
		}
	}
	evbuffer_remove_cb_entry(b->buf, b->ent);
	evbuffer_free(b->buf);
	free(b);
}

unsigned
sbx_gate_connections(const struct sbx_gate *g)
{
	return g != NULL ? g->nconns : 0;
}
