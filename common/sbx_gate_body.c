/* sbx_gate_body.c - the request gate's streamed bodies (adr/0018): a body kept from evhttp and handed to its handler at most a window at a time; touches only the gate's connection state (sbx_gate_int.h) and the connection's bufferevent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <sodium.h>

#include "sbx_gate.h"
#include "sbx_gate_int.h"

/* The gate's record of a connection (sbx_gate_int.h). */
struct gconn *
sbx_gate_conn_find(struct sbx_gate *g, struct evhttp_connection *evcon)
{
	struct gconn *c;

	LIST_FOREACH(c, &g->conns, link)
		if (c->evcon == evcon)
			return c;
	return NULL;
}

/* Whether the daemon streams h's body (its route's hook). */
int
sbx_gate_conn_streams(struct gconn *c, const struct sbx_gate_head *h)
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
void
sbx_gate_body_flow(struct sbx_gate_body *b)
{
	struct bufferevent *bev;
	bufferevent_data_cb readcb = NULL;

	if (b == NULL || b->c == NULL || b->c->body != b ||
	    (b->c->state != G_SBODY && b->c->state != G_SCHUNKED) ||
	    b->c->evcon == NULL ||
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
		sbx_gate_body_flow(arg);
}

/* Lets go of c's body (the consumer may still hold it). */
void
sbx_gate_conn_body_detach(struct gconn *c)
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
int
sbx_gate_conn_stream_head(struct gconn *c, struct evbuffer *in, const char *p,
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
		    "Transfer-Encoding") || sbx_gate_hname_is(line, nl,
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
	sbx_gate_conn_body_detach(c);
	c->body = b;
	b->c = c;
	if (h->chunked) {
		/* Decoded here as it comes (sbx_gate_conn_schunked); c->cap
		 * is the route's, set by the caller. */
		b->chunked = 1;
		b->len = 0;
		c->state = G_SCHUNKED;
		c->total = c->cleft = 0;
		c->cst = C_SIZE;
	} else {
		c->state = G_SBODY;
		c->left = h->cl;
	}
	/* evhttp would have said it; without Expect it does not. */
	if (expect && c->evcon != NULL &&
	    (bev = evhttp_connection_get_bufferevent(c->evcon)) != NULL)
		bufferevent_write(bev, "HTTP/1.1 100 Continue\r\n\r\n", 25);
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
	struct gconn *c = g != NULL && conn != NULL ?
	    sbx_gate_conn_find(g, conn) : NULL;
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
	return b->chunked ? b->done : b->got == b->len;
}

int
sbx_gate_body_chunked(const struct sbx_gate_body *b)
{
	return b->chunked;
}

enum sbx_gate_verdict
sbx_gate_body_failed(const struct sbx_gate_body *b)
{
	return b->failed;
}

void
sbx_gate_body_on_end(struct sbx_gate_body *b,
    void (*ended)(struct sbx_gate_body *, void *), void *arg)
{
	b->ended = ended;
	b->ended_arg = arg;
}

/* A chunked body ended (whole, or refused with v): its taker is told. */
static void
schunk_end(struct gconn *c, enum sbx_gate_verdict v)
{
	struct sbx_gate_body *b = c->body;

	if (v != SBX_GATE_PASS) {
		/* The rest of the connection's bytes cannot be framed: its
		 * reply closes it (the taker's). */
		c->state = G_CLOSED;
		evbuffer_drain(c->hold, evbuffer_get_length(c->hold));
	} else
		c->state = G_HEAD;
	if (b == NULL)
		return;
	/* It stays c's until taken or the connection goes (a small body may
	 * end in the read that brought its head, before dispatch takes it). */
	if (v != SBX_GATE_PASS)
		b->failed = v;
	else {
		b->done = 1;
		b->len = b->got;
	}
	if (b->ended != NULL)
		b->ended(b, b->ended_arg);
}

/*
 * The chunk syntax G_CHUNKED accepts (plain hex sizes, no extensions, CRLF
 * or LF line ends, no trailer fields: RFC 9112 §7.1 as far as evhttp and
 * the gate agree), decoded as it arrives: at most a size line (24 bytes)
 * and one socket read are held, the data goes to the body's window.
 */
int
sbx_gate_conn_schunked(struct gconn *c)
{
	struct evbuffer_ptr eol;
	size_t len, eollen, ll, i, n;
	char line[24];
	uint64_t v;

	for (;;) {
		len = evbuffer_get_length(c->hold);
		if (c->cst == C_DATA) {
			if (len == 0)
				return 0;
			n = (uint64_t)len < c->cleft ? len : (size_t)c->cleft;
			c->cleft -= n;
			if (c->body != NULL) {
				c->body->got += n;
				evbuffer_remove_buffer(c->hold, c->body->buf, n);
				sbx_gate_body_flow(c->body);
			} else
				evbuffer_drain(c->hold, n);   /* released */
			if (c->cleft == 0)
				c->cst = C_DATA_END;
			continue;
		}
		eol = evbuffer_search_eol(c->hold, NULL, &eollen, EVBUFFER_EOL_LF);
		if (eol.pos == -1) {
			if (len > sizeof(line)) {
				schunk_end(c, SBX_GATE_BAD_REQUEST);
				return 1;
			}
			return 0;
		}
		ll = (size_t)eol.pos;
		if (ll > sizeof(line) - 1) {
			schunk_end(c, SBX_GATE_BAD_REQUEST);
			return 1;
		}
		evbuffer_remove(c->hold, line, ll);
		evbuffer_drain(c->hold, eollen);
		if (ll > 0 && line[ll - 1] == '\r')
			ll--;
		if (c->cst != C_SIZE) {   /* C_DATA_END, C_TRAILER: empty line */
			if (ll != 0) {
				schunk_end(c, SBX_GATE_BAD_REQUEST);
				return 1;
			}
			if (c->cst == C_DATA_END) {
				c->cst = C_SIZE;
				continue;
			}
			schunk_end(c, SBX_GATE_PASS);
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
			schunk_end(c, SBX_GATE_BAD_REQUEST);
			return 1;
		}
		if (v == 0) {
			c->cst = C_TRAILER;
			continue;
		}
		if (v > c->cap - c->total) {
			schunk_end(c, SBX_GATE_TOO_LARGE);
			return 1;
		}
		c->total += v;
		c->cleft = v;
		c->cst = C_DATA;
	}
}

void
sbx_gate_body_window(struct sbx_gate_body *b, size_t window)
{
	b->window = window > 0 ? window : 1;
	sbx_gate_body_flow(b);
}

void
sbx_gate_body_kick(struct sbx_gate_body *b)
{
	sbx_gate_body_flow(b);
}

void
sbx_gate_body_free(struct sbx_gate_body *b)
{
	if (b == NULL)
		return;
	if (b->c != NULL) {
		/* The rest of the body is read and thrown away. */
		b->c->body = NULL;
		if ((b->c->state == G_SBODY || b->c->state == G_SCHUNKED) &&
		    b->c->evcon != NULL &&
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
