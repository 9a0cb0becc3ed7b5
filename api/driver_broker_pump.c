/* driver_broker_pump.c - write_stream's body pump: the caller's source to the broker connection, within a bound (adr/0030). Calls libevent and the HTTP client's bufferevent only. */
#include <stdlib.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "driver_broker_pump.h"
#include "sbx_http_client.h"

struct bpump {
	struct evbuffer *src;
	struct sbx_http_req *http;
	struct evbuffer_cb_entry *src_ent, *out_ent;
	uint64_t left;              /* bytes of the body not moved yet */
	size_t max;                 /* output bound */
};

/* Lets go of the source and the output: no more bytes are moved. */
static void
detach(struct bpump *p)
{
	struct bufferevent *bev;

	if (p->src_ent != NULL)
		evbuffer_remove_cb_entry(p->src, p->src_ent);
	if (p->out_ent != NULL &&
	    (bev = sbx_http_req_bufferevent(p->http)) != NULL)
		evbuffer_remove_cb_entry(bufferevent_get_output(bev), p->out_ent);
	p->src_ent = p->out_ent = NULL;
}

/* Moves what the source has to the broker while the connection's output
 * has room (backpressure: the source's owner reads its client only as
 * fast as this drains it). */
static void
pump(struct bpump *p)
{
	struct bufferevent *bev;
	struct evbuffer *out, *tmp;
	size_t have, n, queued;

	if (p->src_ent == NULL ||
	    (bev = sbx_http_req_bufferevent(p->http)) == NULL)
		return;
	out = bufferevent_get_output(bev);
	if (evbuffer_get_length(p->src) == 0 ||
	    evbuffer_get_length(out) >= p->max)
		return;
	/* Through a buffer of our own: the client counts what it sends
	 * (sbx_http_req_write_buffer); moving evbuffer chains copies little. */
	if ((tmp = evbuffer_new()) == NULL)
		return;
	while (p->left > 0 && (have = evbuffer_get_length(p->src)) > 0 &&
	    (queued = evbuffer_get_length(out)) < p->max) {
		n = p->max - queued;
		if (n > have)
			n = have;
		if ((uint64_t)n > p->left)
			n = (size_t)p->left;
		if (evbuffer_remove_buffer(p->src, tmp, n) != (int)n ||
		    sbx_http_req_write_buffer(p->http, tmp) == -1)
			break;
		p->left -= n;
	}
	evbuffer_free(tmp);
	if (p->left == 0)
		detach(p);
}

/* New bytes in the source. */
static void
src_added(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	(void)buf;
	if (info->n_added > 0)
		pump(arg);
}

/* The broker took bytes: room for more. */
static void
out_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct bpump *p = arg;

	if (info->n_deleted > 0 && evbuffer_get_length(buf) < p->max / 2)
		pump(p);
}

struct bpump *
bpump_new(struct evbuffer *src, uint64_t len, size_t max,
    struct sbx_http_req *http)
{
	struct bufferevent *bev;
	struct bpump *p;

	if ((p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	p->src = src;
	p->http = http;
	p->left = len;
	p->max = max > 0 ? max : 1;
	if (len == 0)
		return p;
	if ((bev = sbx_http_req_bufferevent(http)) == NULL ||
	    (p->src_ent = evbuffer_add_cb(src, src_added, p)) == NULL ||
	    (p->out_ent = evbuffer_add_cb(bufferevent_get_output(bev),
	    out_drained, p)) == NULL) {
		bpump_free(p);
		return NULL;
	}
	pump(p);   /* what arrived already */
	return p;
}

void
bpump_free(struct bpump *p)
{
	if (p == NULL)
		return;
	detach(p);
	free(p);
}
