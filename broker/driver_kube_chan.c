/*
 * driver_kube_chan.c - each sandbox's ONE agent channel (adr/0025,
 * protocol 4 unchanged) carried over ONE long-lived pods/exec WebSocket
 * (subprotocol v4.channel.k8s.io: byte 0 of a binary message is the
 * stream, 0 stdin, 1 stdout, 2 stderr, 3 status) running
 * `/.sbx/sbx-helper agent`. Uses the REST client for the upgrade, the
 * WebSocket framing of common/sbx_ws.c and the channel of broker/agent.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "agent.h"
#include "driver_kube_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_ws.h"

#define KUBE_WS_PROTO "v4.channel.k8s.io"
#define PIECE (64 * 1024)      /* stdin bytes per WebSocket message */

struct kube_chan {
	TAILQ_ENTRY(kube_chan) link;
	struct kube *k;
	char id[64];
	char key[SBX_WS_KEY_LEN + 1];
	struct sbx_agent_chan *ch;
	struct evbuffer *out;         /* the agent's frames to send */
	struct kube_http *up;         /* the upgrade in flight */
	struct sbx_ws *ws;
	int dead;
};

static void chan_flush(struct kube_chan *c);

static void
chan_fail(struct kube_chan *c, const char *code, const char *msg)
{
	struct sbx_err e;

	c->dead = 1;
	sbx_err_set(&e, code, "%s", msg);
	if (c->ch != NULL)
		sbx_agent_chan_fail(c->ch, &e);
}

static void
ws_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct kube_chan *c = arg;
	char msg[300];

	if (text || n == 0)
		return;
	switch (p[0]) {
	case 1:
		if (n > 1)
			sbx_agent_chan_input(c->ch, p + 1, n - 1);
		break;
	case 2:
		/* the agent's own words: kept in the log, bounded */
		snprintf(msg, sizeof(msg), "%.*s", (int)(n - 1 > 200 ? 200 :
		    n - 1), (const char *)p + 1);
		log_warn("sandbox agent stderr", "id", c->id, "text", msg, NULL);
		break;
	case 3:
		snprintf(msg, sizeof(msg), "the sandbox agent's pods/exec ended: "
		    "%.*s", (int)(n - 1 > 200 ? 200 : n - 1), (const char *)p + 1);
		chan_fail(c, SBX_E_RUNTIME, msg);
		break;
	default:
		break;
	}
}

static void
ws_closed(void *arg, int code, const char *reason)
{
	struct kube_chan *c = arg;
	char msg[200];

	c->ws = NULL;
	snprintf(msg, sizeof(msg), "the sandbox agent's pods/exec stream "
	    "closed (%d %s); the next operation opens it again", code, reason);
	chan_fail(c, SBX_E_RUNTIME, msg);
}

static const struct sbx_ws_ops ws_ops = { ws_message, NULL, ws_closed, NULL };

static void
chan_flush(struct kube_chan *c)
{
	static const unsigned char zero = 0;
	unsigned char *p;
	size_t n;

	if (c->ws == NULL || c->dead)
		return;
	while ((n = evbuffer_get_length(c->out)) > 0) {
		if (n > PIECE)
			n = PIECE;
		p = evbuffer_pullup(c->out, (ev_ssize_t)n);
		if (p == NULL || sbx_ws_send(c->ws, 0, &zero, 1, p, n) != 0) {
			chan_fail(c, SBX_E_RUNTIME, "cannot write to the sandbox "
			    "agent's pods/exec stream");
			return;
		}
		evbuffer_drain(c->out, n);
	}
}

static void
out_cb(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
	(void)b;
	if (info->n_added > 0)
		chan_flush(arg);
}

static void
up_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct kube_chan *c = arg;
	struct sbx_err e;

	c->up = NULL;
	if (err != NULL)
		e = *err;
	else if (status == 404)
		sbx_err_set(&e, SBX_E_NOT_FOUND, "the sandbox's pod is gone");
	else
		kube_status_err(&e, status, body, "open pods/exec for the agent");
	c->dead = 1;
	if (c->ch != NULL)
		sbx_agent_chan_fail(c->ch, &e);
}

static void
up_upgraded(void *arg, struct bufferevent *bev, const char *upgrade,
    const char *connection, const char *accept, const char *protocol)
{
	struct kube_chan *c = arg;
	struct sbx_err e;

	c->up = NULL;
	sbx_err_clear(&e);
	if (sbx_ws_client_check(101, upgrade, connection, accept, protocol,
	    c->key, KUBE_WS_PROTO, &e) != 0) {
		bufferevent_free(bev);
		c->dead = 1;
		sbx_agent_chan_fail(c->ch, &e);
		return;
	}
	if ((c->ws = sbx_ws_new(bev, SBX_WS_CLIENT, NULL, &ws_ops, c, &e)) ==
	    NULL) {
		c->dead = 1;
		sbx_agent_chan_fail(c->ch, &e);
		return;
	}
	c->k->execs_opened++;
	chan_flush(c);
}

static void
ch_closed(void *arg, const struct sbx_err *err)
{
	struct kube_chan *c = arg;

	(void)err;
	c->dead = 1;
}

static void
chan_free(struct kube_chan *c)
{
	TAILQ_REMOVE(&c->k->chans, c, link);
	kube_http_cancel(c->up);
	sbx_ws_free(c->ws);
	sbx_agent_chan_free(c->ch);
	if (c->out != NULL)
		evbuffer_free(c->out);
	free(c);
}

static struct kube_chan *
chan_find(struct kube *k, const char *id)
{
	struct kube_chan *c;

	TAILQ_FOREACH(c, &k->chans, link)
		if (strcmp(c->id, id) == 0)
			return c;
	return NULL;
}

struct sbx_agent_chan *
kube_chan_get(struct kube *k, const char *id, struct sbx_err *err)
{
	struct sbx_agent_chan_cbs cbs = { NULL, ch_closed, NULL };
	struct kube_http_cbs hc = { up_done, NULL, up_upgraded, NULL };
	struct kube_chan *c = chan_find(k, id);
	const struct kube_pod *p = kube_pod_find(k, id);
	char path[512], hdrs[256], idle[32], pod[128];

	if (c != NULL && !c->dead && sbx_agent_chan_alive(c->ch))
		return c->ch;
	if (c != NULL)
		chan_free(c);
	if ((c = calloc(1, sizeof(*c))) == NULL)
		goto oom;
	c->k = k;
	snprintf(c->id, sizeof(c->id), "%s", id);
	TAILQ_INSERT_TAIL(&k->chans, c, link);
	cbs.arg = c;
	if ((c->ch = sbx_agent_chan_new(k->drv.base, &cbs)) == NULL ||
	    (c->out = evbuffer_new()) == NULL)
		goto oom_free;
	evbuffer_defer_callbacks(c->out, k->drv.base);
	if (evbuffer_add_cb(c->out, out_cb, c) == NULL)
		goto oom_free;
	sbx_agent_chan_set_output(c->ch, c->out);
	if (k->ping_ms > 0)
		sbx_agent_chan_keepalive(c->ch, (uint64_t)k->ping_ms);
	snprintf(idle, sizeof(idle), "%" PRId64, k->ping_ms > 0 ?
	    k->ping_ms * 6 : 60000);
	/* the pod's name as the watch saw it (a claimed member keeps its own) */
	if (p != NULL && p->name[0] != '\0')
		snprintf(pod, sizeof(pod), "%s", p->name);
	else
		snprintf(pod, sizeof(pod), "sbx-%s", id);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/exec?"
	    "command=%%2F.sbx%%2Fsbx-helper&command=" SBX_AGENT_MODE
	    "&command=--idle-ms&command=%s&container=sandbox&stdin=true&"
	    "stdout=true&stderr=true", k->ns, pod, idle);
	sbx_ws_client_key(c->key);
	snprintf(hdrs, sizeof(hdrs), "Connection: Upgrade\r\nUpgrade: websocket\r\n"
	    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n"
	    "Sec-WebSocket-Protocol: " KUBE_WS_PROTO "\r\n", c->key);
	hc.arg = c;
	if ((c->up = kube_http_start(k, "GET", path, NULL, NULL, hdrs,
	    k->req_to, &hc, err)) == NULL) {
		chan_free(c);
		return NULL;
	}
	return c->ch;
oom_free:
	chan_free(c);
oom:
	sbx_err_oom(err);
	return NULL;
}

void
kube_chan_drop(struct kube *k, const char *id)
{
	struct kube_chan *c = chan_find(k, id);

	if (c != NULL)
		chan_free(c);
}

void
kube_chans_free(struct kube *k)
{
	while (!TAILQ_EMPTY(&k->chans))
		chan_free(TAILQ_FIRST(&k->chans));
}

size_t
kube_chans_live(const struct kube *k)
{
	const struct kube_chan *c;
	size_t n = 0;

	TAILQ_FOREACH(c, &k->chans, link)
		if (!c->dead && c->ws != NULL)
			n++;
	return n;
}
