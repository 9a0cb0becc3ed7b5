/* api_ports.c - the ports reverse proxy: a request for a sandbox port becomes one PORT session (sbx_session_open) carrying the rewritten head and the body read, then the client's connection is handed over and both directions are spliced raw, so HTTP/1.1, SSE and WebSocket upgrades pass (docs/api.md "Ports", adr/0053). Touches its tunnels, the driver's session ops and the client sockets it took. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <sodium.h>

#include "api_int.h"
#include "api_ports.h"
#include "sbx_bev.h"
#include "sbx_driver.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_ws.h"

/* Bytes queued towards either side above which the other is not read. */
#define SPLICE_HIGH ((size_t)256 * 1024)
/* Sandboxes whose byte counts /metrics names; more share "other". */
#define PORT_METRICS_MAX 256

struct port_bytes {
	char sandbox[64];
	uint64_t in, out;          /* client -> sandbox, sandbox -> client */
};

struct api_ports {
	struct api_port_conn *conns;
	unsigned nconns;
	struct port_bytes bytes[PORT_METRICS_MAX + 1]; /* last: "other" */
	unsigned nbytes;
	uint64_t refused_cap;      /* 429s of port_connections_per_sandbox */
	uint64_t idle_closed;      /* closed by port_idle_timeout */
};

/* One proxied connection: before the hand-off it belongs to its request
 * (a), after to the tunnel table. */
struct api_port_conn {
	struct api_server *s;
	struct api_port_conn *prev, *next;
	struct areq *a;            /* until the hand-off */
	struct sbx_op *op;         /* the PORT session; NULL once it ended */
	struct bufferevent *bev;   /* the client, after the hand-off */
	struct evbuffer *pending;  /* head + body not yet taken by the session */
	struct event *idle;
	struct port_bytes *bytes;
	int64_t npc_id;
	int64_t stream_of;         /* principal whose stream it holds, 0 none */
	struct sbx_ws *ws;         /* GET .../tcp: the WebSocket, after the
	                            * upgrade (it owns the client's socket) */
	int tcp;                   /* GET .../tcp: binary frames = TCP bytes */
	char accept[SBX_WS_ACCEPT_LEN + 1];
	int upgrade;               /* the client asked for an Upgrade */
	int started;
	int paused;                /* the session's output is paused */
	int closing;               /* flush what is queued, then free */
	int eof_asked;             /* the client half-closed (its EOF, or the
	                            * tcp WebSocket's {"type":"eof"}): the
	                            * session's input closes once what waits
	                            * went */
	int eof_done;              /* sbx_session_close_input was called */
};

/* ------------------------------------------------------------------ */
/* Tunnel table                                                        */

static struct port_bytes *
bytes_of(struct api_ports *P, const char *sandbox)
{
	unsigned i;

	for (i = 0; i < P->nbytes; i++)
		if (strcmp(P->bytes[i].sandbox, sandbox) == 0)
			return &P->bytes[i];
	if (P->nbytes == PORT_METRICS_MAX) {
		snprintf(P->bytes[PORT_METRICS_MAX].sandbox, 64, "other");
		return &P->bytes[PORT_METRICS_MAX];
	}
	snprintf(P->bytes[P->nbytes].sandbox, 64, "%s", sandbox);
	return &P->bytes[P->nbytes++];
}

static unsigned
conns_of(const struct api_ports *P, int64_t npc_id)
{
	const struct api_port_conn *c;
	unsigned n = 0;

	for (c = P->conns; c != NULL; c = c->next)
		if (c->npc_id == npc_id)
			n++;
	return n;
}

static void
pc_free(struct api_port_conn *pc)
{
	struct api_ports *P = pc->s->ports;
	struct sbx_op *op = pc->op;

	pc->op = NULL;
	sbx_op_cancel(op);
	if (pc->prev != NULL)
		pc->prev->next = pc->next;
	else
		P->conns = pc->next;
	if (pc->next != NULL)
		pc->next->prev = pc->prev;
	P->nconns--;
	if (pc->stream_of != 0)
		api_streams_put(pc->s, pc->stream_of);
	if (pc->a != NULL) {
		pc->a->pconn = NULL;
		pc->a->on_end = NULL;
	}
	if (pc->ws != NULL)
		sbx_ws_free(pc->ws);   /* its release gives the gate's count back */
	if (pc->bev != NULL) {
		sbx_gate_upgraded_close(pc->s->gate, pc->bev);
		bufferevent_free(pc->bev);
	}
	if (pc->pending != NULL)
		evbuffer_free(pc->pending);
	if (pc->idle != NULL)
		event_free(pc->idle);
	free(pc);
}

/* Frees pc once what is queued for the client went (or at once). */
static void
pc_close(struct api_port_conn *pc)
{
	if (pc->ws != NULL) {
		/* The sandbox's side ended: a normal close after what is
		 * queued; ws_closed frees pc. */
		pc->closing = 1;
		sbx_ws_close(pc->ws, SBX_WS_NORMAL, "the connection in the "
		    "sandbox ended");
		return;
	}
	if (pc->bev == NULL || evbuffer_get_length(
	    bufferevent_get_output(pc->bev)) == 0) {
		pc_free(pc);
		return;
	}
	pc->closing = 1;
	bufferevent_disable(pc->bev, EV_READ);
}

static void
idle_arm(struct api_port_conn *pc)
{
	int64_t ms = pc->s->cfg->port_idle_timeout;
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) *
	    1000 };

	if (pc->idle != NULL)
		evtimer_add(pc->idle, &tv);
}

static void
idle_fire(evutil_socket_t fd, short what, void *arg)
{
	struct api_port_conn *pc = arg;

	struct areq *a = pc->a;
	int port = a != NULL ? a->port : 0;

	(void)fd;
	(void)what;
	pc->s->ports->idle_closed++;
	log_info("port connection idle; closed", NULL);
	if (a != NULL)
		a->op = NULL;   /* pc_free cancels it */
	pc_free(pc);
	/* Before the hand-off the request still answers, once. */
	if (a != NULL)
		areq_fail_code(a, SBX_E_TIMEOUT, "The server on port %d in the "
		    "sandbox sent nothing for port_idle_timeout.", port);
}

/* ------------------------------------------------------------------ */
/* Splice                                                              */

/* Moves what the session takes: the pending head and body first, then (an
 * upgrade) what the client sends. */
static void
pump(struct api_port_conn *pc)
{
	struct evbuffer *src;
	size_t len;
	ssize_t n;

	/* Offered whole: the driver takes what its room allows and, when it
	 * took less, says by sink->room when more fits (sbx_driver.h). */
	while (pc->op != NULL) {
		src = evbuffer_get_length(pc->pending) > 0 ? pc->pending :
		    pc->upgrade && pc->bev != NULL ?
		    bufferevent_get_input(pc->bev) : NULL;
		if (src == NULL || (len = evbuffer_get_length(src)) == 0)
			break;
		if ((n = sbx_session_write(pc->op, src, len)) <= 0)
			break;
		pc->bytes->in += (uint64_t)n;
		idle_arm(pc);
		if ((size_t)n < len)
			break;
	}
	/* A half-close goes on behind the last byte, never before it. */
	if (pc->eof_asked && !pc->eof_done && pc->op != NULL &&
	    evbuffer_get_length(pc->pending) == 0 && (!pc->upgrade ||
	    pc->bev == NULL ||
	    evbuffer_get_length(bufferevent_get_input(pc->bev)) == 0)) {
		pc->eof_done = 1;
		sbx_session_close_input(pc->op);
	}
	if (pc->ws != NULL)
		sbx_ws_read_pause(pc->ws, evbuffer_get_length(pc->pending) >=
		    SPLICE_HIGH);
}

static void
client_read(struct bufferevent *bev, void *arg)
{
	struct api_port_conn *pc = arg;

	if (pc->upgrade) {
		(void)sbx_bev_fill(bev, SPLICE_HIGH);
		pump(pc);
	}
	else    /* after its one request, a client's bytes go nowhere */
		evbuffer_drain(bufferevent_get_input(bev), (size_t)-1);
}

static void
client_write(struct bufferevent *bev, void *arg)
{
	struct api_port_conn *pc = arg;

	if (pc->closing && evbuffer_get_length(bufferevent_get_output(bev)) ==
	    0) {
		pc_free(pc);
		return;
	}
	if (pc->paused && pc->op != NULL) {
		pc->paused = 0;
		sbx_op_resume(pc->op);
	}
}

static void
client_event(struct bufferevent *bev, short what, void *arg)
{
	struct api_port_conn *pc = arg;

	(void)bev;
	if ((what & BEV_EVENT_EOF) && pc->upgrade && pc->op != NULL &&
	    !pc->closing) {
		/* A half-close goes on to the sandbox's server (after what
		 * the session has not taken yet: pump); its answer still
		 * comes back. */
		pc->eof_asked = 1;
		bufferevent_disable(pc->bev, EV_READ);
		pump(pc);
		return;
	}
	pc_free(pc);
}

/* ------------------------------------------------------------------ */
/* The session's sink                                                  */

/*
 * The hand-off happened (bev, the client's socket, or NULL when it failed:
 * a 500 went, and the session goes with the request through on_end): the
 * request ends here for the api's books with status, the tunnel goes on.
 * Returns 0, or -1 after a failed hand-off (pc is gone).
 */
static int
request_done(struct api_port_conn *pc, struct bufferevent *bev, int status)
{
	struct areq *a = pc->a;

	a->op = NULL;
	if (bev == NULL) {
		sbx_op_cancel(pc->op);
		pc->op = NULL;
		areq_finish(a, 500, SBX_E_INTERNAL);
		return -1;
	}
	pc->a = NULL;
	a->pconn = NULL;
	a->on_end = NULL;
	areq_finish(a, status, "proxied");
	return 0;
}

/*
 * The first byte of the sandbox server's answer: now the connection is
 * handed over (a session's start says only that the helper runs; a port
 * where nothing listens ends before any output, and that is still the
 * api's 502). Returns 0, or -1 when the hand-off failed (a 500 went, the
 * session and pc are gone).
 */
static int
handoff(struct api_port_conn *pc)
{
	struct areq *a = pc->a;

	if (request_done(pc, pc->bev = sbx_httpd_takeover(&a->h),
	    pc->upgrade ? 101 : 200) == -1)
		return -1;
	bufferevent_setcb(pc->bev, client_read, client_write, client_event, pc);
	bufferevent_setwatermark(pc->bev, EV_READ, 0, SPLICE_HIGH);
	bufferevent_setwatermark(pc->bev, EV_WRITE, SPLICE_HIGH / 2, 0);
	bufferevent_enable(pc->bev, EV_READ | EV_WRITE);
	if (!pc->upgrade)
		evbuffer_drain(bufferevent_get_input(pc->bev), (size_t)-1);
	else if (evbuffer_get_length(bufferevent_get_input(pc->bev)) > 0)
		pump(pc);   /* sent behind the request: no read event is due */
	return 0;
}

/* Whether a text message is the half-close: a JSON object whose "type"
 * is "eof" (other members are ignored, for later versions). */
static int
is_eof_message(const unsigned char *p, size_t n)
{
	json_t *j = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	int r = type != NULL && strcmp(type, "eof") == 0;

	json_decref(j);
	return r;
}

/* GET .../tcp: the WebSocket's side of a tunnel. Binary messages are the
 * bytes; the one text message is {"type":"eof"}, the client's half-close
 * (adr/0053, amendment "half-close"): nothing may follow it. */
static void
ws_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct api_port_conn *pc = arg;

	if (pc->eof_asked) {
		sbx_ws_close(pc->ws, SBX_WS_POLICY, "input was closed: nothing "
		    "may follow {\"type\":\"eof\"}");
		return;
	}
	if (text) {
		if (!is_eof_message(p, n)) {
			sbx_ws_close(pc->ws, SBX_WS_POLICY, "binary frames carry "
			    "the TCP bytes; the one text message is "
			    "{\"type\":\"eof\"}");
			return;
		}
		pc->eof_asked = 1;
		pump(pc);   /* what waits goes first, then the half-close */
		return;
	}
	if (evbuffer_add(pc->pending, p, n) != 0) {
		sbx_ws_close(pc->ws, SBX_WS_INTERNAL, "out of memory");
		return;
	}
	pump(pc);
}

static void
ws_pause(void *arg, int on)
{
	struct api_port_conn *pc = arg;

	if (pc->op == NULL || pc->paused == on)
		return;
	pc->paused = on;
	if (on)
		sbx_op_pause(pc->op);
	else
		sbx_op_resume(pc->op);
}

static void
ws_closed(void *arg, int code, const char *reason)
{
	struct api_port_conn *pc = arg;

	(void)code;
	(void)reason;
	pc_free(pc);   /* sbx_ws_free is safe inside its callbacks */
}

static void
ws_release(void *arg, struct bufferevent *bev)
{
	struct api_port_conn *pc = arg;

	sbx_gate_upgraded_close(pc->s->gate, bev);
}

static const struct sbx_ws_ops ws_ops = {
	ws_message, ws_pause, ws_closed, ws_release,
};

/* The session started: 101 and the WebSocket (a closed port shows as a
 * close with its sentence: there is no answer byte to wait for).
 * Returns 0, or -1 when pc is gone. */
static int
ws_open(struct api_port_conn *pc)
{
	struct areq *a = pc->a;
	const struct api_config *cfg = pc->s->cfg;
	struct sbx_ws_limits lim;
	struct bufferevent *bev;
	struct sbx_err err;
	char hdr[64];

	snprintf(hdr, sizeof(hdr), "Sec-WebSocket-Accept: %s\r\n", pc->accept);
	if (request_done(pc, bev = sbx_httpd_upgrade(&a->h, "websocket", hdr),
	    101) == -1)
		return -1;
	memset(&lim, 0, sizeof(lim));
	lim.message_max = (size_t)cfg->ws_message_max;
	lim.ping_ms = cfg->ws_ping_interval;
	lim.high_water = SPLICE_HIGH;
	sbx_err_clear(&err);
	if ((pc->ws = sbx_ws_new(bev, SBX_WS_SERVER, &lim, &ws_ops, pc,
	    &err)) == NULL) {
		pc_free(pc);
		return -1;
	}
	return 0;
}

/* The helper runs: the head and body go in at once. */
static void
s_start(void *arg, const char *exec_id)
{
	struct api_port_conn *pc = arg;

	(void)exec_id;
	pc->started = 1;
	idle_arm(pc);
	if (pc->tcp && ws_open(pc) == -1)
		return;
	pump(pc);
}

static void
s_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct api_port_conn *pc = arg;

	(void)stream;
	if (pc->ws != NULL) {
		if (pc->closing || sbx_ws_send(pc->ws, 0, buf, len, NULL, 0) == -1)
			return;
		pc->bytes->out += len;
		idle_arm(pc);
		return;
	}
	if (pc->bev == NULL && pc->a != NULL && handoff(pc) == -1)
		return;
	if (pc->bev == NULL || pc->closing)
		return;
	{
		/* Straight to the client's socket when nothing waits (no copy). */
		struct iovec v = { (void *)buf, len };

		(void)sbx_bev_write(pc->bev, &v, 1);
	}
	pc->bytes->out += len;
	idle_arm(pc);
	if (!pc->paused && pc->op != NULL && evbuffer_get_length(
	    bufferevent_get_output(pc->bev)) > SPLICE_HIGH) {
		pc->paused = 1;
		sbx_op_pause(pc->op);
	}
}

/* The session ended. Before the hand-off (no answer byte yet) the request
 * answers (port_closed: 502; not_running wakes the sandbox once,
 * adr/0033); after it the client gets what is queued, then its connection
 * closes. */
static void
s_end(struct api_port_conn *pc, const struct sbx_err *err)
{
	struct areq *a = pc->a;
	int port = a != NULL ? a->port : 0;

	pc->op = NULL;
	if (pc->ws != NULL && err != NULL) {
		pc->closing = 1;
		sbx_ws_close(pc->ws, strcmp(err->code, SBX_E_PORT_CLOSED) == 0 ?
		    SBX_WS_GOING_AWAY : SBX_WS_INTERNAL, err->message);
		return;
	}
	if (a != NULL) {
		a->op = NULL;
		pc_free(pc);
		if (err != NULL)
			areq_fail_broker(a, err);
		else
			areq_fail_code(a, SBX_E_PORT_CLOSED, "The server on port "
			    "%d in the sandbox closed the connection without an "
			    "answer.", port);
		return;
	}
	pc_close(pc);
}

static void
s_exit(void *arg, const struct sbx_exit *ex)
{
	(void)ex;
	s_end(arg, NULL);
}

static void
s_error(void *arg, const struct sbx_err *err)
{
	s_end(arg, err);
}

static void
s_room(void *arg)
{
	pump(arg);
}

/* ------------------------------------------------------------------ */
/* The request                                                         */

/* a's request ended before the hand-off (client gone, shutdown): its op
 * was cancelled by the request layer. */
static void
pc_request_ended(struct areq *a)
{
	struct api_port_conn *pc = a->pconn;

	if (pc == NULL)
		return;
	pc->op = NULL;
	pc->a = NULL;
	a->pconn = NULL;
	pc_free(pc);
}

/* The client's address as text (X-Forwarded-For). */
static void
peer_text(struct evhttp_request *req, char *out, size_t cap)
{
	struct evhttp_connection *c = evhttp_request_get_connection(req);
	char *addr = NULL;
	ev_uint16_t port = 0;

	snprintf(out, cap, "unknown");
	if (c != NULL)
		evhttp_connection_get_peer(c, &addr, &port);
	if (addr != NULL && addr[0] != '\0')
		snprintf(out, cap, "%s", addr);
}

/* Appends a copy of src to dst. */
static int
body_copy(struct evbuffer *dst, struct evbuffer *src, struct sbx_err *err)
{
	struct evbuffer_iovec v[16];
	struct evbuffer_ptr at;
	int i, n;

	evbuffer_ptr_set(src, &at, 0, EVBUFFER_PTR_SET);
	while ((n = evbuffer_peek(src, -1, &at, v, 16)) > 0) {
		size_t moved = 0;

		for (i = 0; i < n && i < 16; i++) {
			if (evbuffer_add(dst, v[i].iov_base, v[i].iov_len) != 0)
				return sbx_err_oom(err);
			moved += v[i].iov_len;
		}
		if (evbuffer_ptr_set(src, &at, moved, EVBUFFER_PTR_ADD) != 0)
			break;
	}
	return 0;
}

/* The head the sandbox gets, and the body read, into pc->pending. */
static int
head_make(struct areq *a, struct api_port_conn *pc, struct sbx_err *err)
{
	struct evhttp_request *req = a->h.req;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	struct evbuffer *body = evhttp_request_get_input_buffer(req);
	struct api_ports_hdr *h = NULL;
	struct api_ports_head_in hi;
	struct evkeyval *kv;
	const char *path = evhttp_uri_get_path(uri), *xfp;
	char peer[64], prefix[256];
	size_t n = 0, skip;
	int r;

	TAILQ_FOREACH(kv, in, next)
		n++;
	if (n > 0 && (h = calloc(n, sizeof(*h))) == NULL)
		return sbx_err_oom(err);
	n = 0;
	TAILQ_FOREACH(kv, in, next) {
		h[n].name = kv->key;
		h[n++].value = kv->value;
	}
	/* The prefix the route matched: /api/v1/npcs/N/sandbox/ports/P,
	 * /p/TOKEN, or nothing on a preview Host. */
	if (a->port_route)
		skip = a->port_skip;   /* the E2B layer's envd route */
	else if (a->preview_host)
		skip = 0;
	else if (a->preview[0] != '\0')
		skip = 3 + strlen(a->preview);
	else
		skip = strlen("/api/v1/npcs//sandbox/ports/") +
		    strlen(a->npc.name) + strlen(a->exec_id);
	if (path == NULL || strlen(path) < skip) {
		free(h);
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Bad request target.");
	}
	/* The token of a preview path is a credential: not shown. */
	snprintf(prefix, sizeof(prefix), "%.*s", (int)skip,
	    a->preview[0] != '\0' && !a->preview_host ? "/p" : path);
	peer_text(req, peer, sizeof(peer));
	xfp = evhttp_find_header(in, "X-Forwarded-Proto");
	memset(&hi, 0, sizeof(hi));
	hi.method = sbx_httpd_method_name(evhttp_request_get_command(req));
	hi.path = path + skip;
	hi.query = evhttp_uri_get_query(uri);
	hi.hdrs = h;
	hi.nhdrs = n;
	hi.body_len = evbuffer_get_length(body);
	hi.port = a->port;
	hi.client_addr = peer;
	hi.proto = xfp != NULL && strcmp(xfp, "https") == 0 ? "https" : "http";
	hi.prefix = a->preview[0] != '\0' && !a->preview_host ? NULL : prefix;
	r = api_ports_head_build(&hi, pc->pending, &pc->upgrade, err);
	free(h);
	if (r == -1)
		return -1;
	/* Copied, not moved: a wake (not_running, adr/0033) runs this
	 * request again. */
	return body_copy(pc->pending, body, err);
}

/* The checks of a .../tcp request's WebSocket handshake (RFC 6455
 * §4.2.1); pc->accept gets the answer's key. */
static int
ws_check(struct areq *a, struct api_port_conn *pc, struct sbx_err *err)
{
	struct evhttp_request *req = a->h.req;
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	struct sbx_ws_head h;

	memset(&h, 0, sizeof(h));
	h.is_get = evhttp_request_get_command(req) == EVHTTP_REQ_GET;
	/* libevent 2.1 has no getter for the version (http_struct.h). */
	h.http11 = req->major > 1 || (req->major == 1 && req->minor >= 1);
	sbx_ws_head_fields(&h, in, NULL);
	if (sbx_ws_handshake_check(&h, NULL, pc->accept, err) == -1) {
		if (h.version != NULL && strcmp(h.version, "13") != 0)
			sbx_httpd_header(&a->h, "Sec-WebSocket-Version", "13");
		return -1;
	}
	return 0;
}

static int port_open(struct areq *a, int tcp, struct sbx_err *err);

int
api_h_port_proxy(struct areq *a, struct sbx_err *err)
{
	return port_open(a, 0, err);
}

int
api_h_port_tcp(struct areq *a, struct sbx_err *err)
{
	return port_open(a, 1, err);
}

/* A request for a port: the tunnel, its session. tcp: GET .../tcp. */
static int
port_open(struct areq *a, int tcp, struct sbx_err *err)
{
	struct api_server *s = a->s;
	struct api_ports *P = s->ports;
	struct api_port_conn *pc = NULL;
	struct sbx_session_req sr;
	struct sbx_sink sink;

	if (a->preview[0] == '\0' &&
	    (a->port = api_ports_port_parse(a->exec_id)) == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The port must be a "
		    "number from 1 to 65535.");
	if (conns_of(P, a->npc.id) >= (unsigned)s->cfg->port_connections_per_sandbox) {
		P->refused_cap++;
		sbx_httpd_header(&a->h, "Retry-After", "1");
		return sbx_err_set(err, SBX_E_TOO_MANY, "%s already has %lld "
		    "connections open to its ports; try again when one has "
		    "ended (port_connections_per_sandbox).", a->npc.name,
		    s->cfg->port_connections_per_sandbox);
	}
	if ((pc = calloc(1, sizeof(*pc))) == NULL ||
	    (pc->pending = evbuffer_new()) == NULL ||
	    (pc->idle = evtimer_new(s->base, idle_fire, pc)) == NULL) {
		if (pc != NULL && pc->pending != NULL)
			evbuffer_free(pc->pending);
		free(pc);
		return sbx_err_oom(err);
	}
	pc->s = s;
	pc->npc_id = a->npc.id;
	/* A connection is one of its principal's open streams (adr/0056)
	 * until it is freed (a preview's visitor is nobody's: the cap per
	 * sandbox bounds those). */
	if (a->authed) {
		if (api_streams_take(s, a->who.id, err) == -1) {
			evbuffer_free(pc->pending);
			event_free(pc->idle);
			free(pc);
			return -1;
		}
		pc->stream_of = a->who.id;
	}
	pc->bytes = bytes_of(P, a->npc.sandbox_id);
	/* Counted from now, so the cap holds while sessions open. */
	pc->next = P->conns;
	if (P->conns != NULL)
		P->conns->prev = pc;
	P->conns = pc;
	P->nconns++;
	pc->tcp = tcp;
	if ((tcp ? ws_check(a, pc, err) : head_make(a, pc, err)) == -1) {
		pc_free(pc);
		return -1;
	}
	memset(&sr, 0, sizeof(sr));
	sr.kind = SBX_SESSION_PORT;
	sr.port = a->port;
	memset(&sink, 0, sizeof(sink));
	sink.start = s_start;
	sink.output = s_output;
	sink.exit = s_exit;
	sink.error = s_error;
	sink.room = s_room;
	sink.arg = pc;
	pc->a = a;
	a->pconn = pc;
	a->on_end = pc_request_ended;
	if ((pc->op = sbx_session_open(s->driver, a->npc.sandbox_id, &sr,
	    &sink, err)) == NULL) {
		pc_free(pc);
		return areq_broker_err(a);
	}
	a->op = pc->op;
	areq_watch(a);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Server life and metrics                                             */

int
api_ports_open(struct api_server *s, struct sbx_err *err)
{
	if ((s->ports = calloc(1, sizeof(*s->ports))) == NULL)
		return sbx_err_oom(err);
	api_ports_key_derive(s->ticket_key, s->port_key);
	return 0;
}

void
api_ports_drain(struct api_server *s)
{
	struct api_ports *P = s->ports;
	struct api_port_conn *pc, *next;

	if (P == NULL)
		return;
	/* Requests before their hand-off end with the request layer. */
	for (pc = P->conns; pc != NULL; pc = next) {
		next = pc->next;
		if (pc->a == NULL)
			pc_free(pc);
	}
}

void
api_ports_close(struct api_server *s)
{
	api_ports_drain(s);
	free(s->ports);
	s->ports = NULL;
	sodium_memzero(s->port_key, sizeof(s->port_key));
}

int
api_ports_metrics(const struct api_server *s, struct evbuffer *out)
{
	const struct api_ports *P = s->ports;
	unsigned i, n;
	int r = 0;

	if (P == NULL)
		return 0;
	r |= evbuffer_add_printf(out, "# HELP sbx_api_port_connections Ports "
	    "proxy connections open now.\n# TYPE sbx_api_port_connections "
	    "gauge\nsbx_api_port_connections %u\n", P->nconns) < 0;
	r |= evbuffer_add_printf(out, "# HELP sbx_api_port_refused_total Port "
	    "connections refused by port_connections_per_sandbox.\n# TYPE "
	    "sbx_api_port_refused_total counter\nsbx_api_port_refused_total "
	    "%llu\n", (unsigned long long)P->refused_cap) < 0;
	r |= evbuffer_add_printf(out, "# HELP sbx_api_port_idle_closed_total "
	    "Port connections closed by port_idle_timeout.\n# TYPE "
	    "sbx_api_port_idle_closed_total counter\n"
	    "sbx_api_port_idle_closed_total %llu\n",
	    (unsigned long long)P->idle_closed) < 0;
	r |= evbuffer_add_printf(out, "# HELP sbx_api_port_bytes_total Bytes "
	    "through the ports proxy per sandbox (in: client to sandbox).\n"
	    "# TYPE sbx_api_port_bytes_total counter\n") < 0;
	n = P->nbytes + (P->bytes[PORT_METRICS_MAX].sandbox[0] != '\0');
	for (i = 0; i <= PORT_METRICS_MAX && n > 0; i++) {
		const struct port_bytes *b = &P->bytes[i];

		if (b->sandbox[0] == '\0')
			continue;
		n--;
		/* A sandbox id is [a-z0-9-] (sbx_id_valid): safe as a label. */
		r |= evbuffer_add_printf(out, "sbx_api_port_bytes_total{sandbox="
		    "\"%s\",direction=\"in\"} %llu\nsbx_api_port_bytes_total{"
		    "sandbox=\"%s\",direction=\"out\"} %llu\n", b->sandbox,
		    (unsigned long long)b->in, b->sandbox,
		    (unsigned long long)b->out) < 0;
	}
	return r ? -1 : 0;
}
