/* sbx_gate_int.h - inside the request gate: its connection state (sbx_gate.c), shared with the streamed bodies (sbx_gate_body.c), and the parser's entry points the connection code uses besides sbx_gate_parse (sbx_gate_parse.c). */
#ifndef SBX_GATE_INT_H
#define SBX_GATE_INT_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdint.h>

#include "sbx_gate.h"

struct event;
struct evbuffer_cb_entry;
struct bufferevent;

/* The request header tying a streamed body to its request (adr/0018). */
#define HDR_BODY "X-Sbx-Body"

/* A connection's state: where its next input bytes go (sbx_gate.c says
 * how). */
enum conn_state { G_HEAD, G_BODY, G_SBODY, G_CHUNKED, G_SCHUNKED, G_CLOSED };
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
	int waiting;              /* a complete head held: evhttp has one (M3) */
	int counted;              /* counted in g->nconns */
	int keyless;              /* counted in g->nkeyless */
	size_t scanned;           /* G_HEAD: bytes of hold searched for the end */
	uint64_t left;            /* G_BODY: Content-Length bytes still to pass */
	size_t hlen, off;         /* G_CHUNKED: head length, parse offset */
	uint64_t total, cap, cleft;
	enum chunk_state cst;
	struct sbx_gate_body *body;  /* G_SBODY's body; NULL: released (discard) */
	/* Handed over by sbx_gate_upgrade: the caller's bufferevent on the
	 * socket; evcon is NULL, the gate reads nothing, the count stays
	 * until sbx_gate_upgraded_close. */
	struct bufferevent *upgraded;
	int64_t mark;             /* the daemon's (sbx_gate_conn_mark); 0: none */
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
	int chunked;              /* decoded from chunks: len unknown till done */
	int done;                 /* chunked: the last chunk and trailer came */
	enum sbx_gate_verdict failed;   /* chunked: refused mid-body */
	void (*ended)(struct sbx_gate_body *, void *);
	void *ended_arg;
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
	unsigned nkeyless;        /* of nconns, without a good credential yet */
	void (*unmark)(void *arg, int64_t mark);
};

/* The gate's record of evcon, or NULL (not gated, or gone). */
struct gconn *sbx_gate_conn_find(struct sbx_gate *g,
    struct evhttp_connection *evcon);

/* Whether the daemon streams h's body (its route's hook,
 * sbx_gate_set_stream). */
int sbx_gate_conn_streams(struct gconn *c, const struct sbx_gate_head *h);

/*
 * A head whose body streams: evhttp gets the head (p, h->len bytes at the
 * start of c->hold) without its framing and with HDR_BODY; the body's bytes
 * go to a new c->body from now on (state G_SBODY). Returns 0, or -1 (out of
 * memory, nothing changed) to let the body through as usual.
 */
int sbx_gate_conn_stream_head(struct gconn *c, struct evbuffer *in,
    const char *p, const struct sbx_gate_head *h);

/*
 * G_SCHUNKED: decodes the chunks at the start of c->hold into c->body (or
 * drops them when the body was released), consuming them. Returns 1 when
 * the body ended (state G_HEAD) or was refused (G_CLOSED, body->failed
 * set and its taker told), 0 when it needs more bytes.
 */
int sbx_gate_conn_schunked(struct gconn *c);

/* Reading on or off for b's window (only in G_SBODY, only while evhttp's
 * read callback is unset). */
void sbx_gate_body_flow(struct sbx_gate_body *b);

/* Lets go of c's body (its taker may still hold it; an untaken one is
 * freed). */
void sbx_gate_conn_body_detach(struct gconn *c);

/*
 * Fills h from the n bytes of a complete head (p, ending in its empty line,
 * as found by sbx_gate_parse_from): every field checked as sbx_gate_parse
 * documents; h->bad says what was refused.
 */
void sbx_gate_head_parse(const char *p, size_t n,
    const struct sbx_gate_limits *lim, struct sbx_gate_head *h);

/*
 * sbx_gate_parse with a resume offset: the search for the end of the head
 * starts at byte from (bytes before it were searched already; 0 at first).
 * Returns as sbx_gate_parse does.
 */
int sbx_gate_parse_from(const char *p, size_t n, size_t from,
    const struct sbx_gate_limits *lim, struct sbx_gate_head *h);

/* 1 when the n bytes at name are the field name want (ASCII case-insensitive,
 * RFC 9110 §5.1). */
int sbx_gate_hname_is(const char *name, size_t n, const char *want);

/*
 * The next line of a head in [*ls, end): 1 with *line at its start and *len
 * its bytes without the CR LF (or bare LF, RFC 9112 §2.2), *ls moved past
 * it; 0 at the empty line that ends the head or when no LF is left.
 */
int sbx_gate_line(const char **ls, const char *end, const char **line,
    size_t *len);

#endif
