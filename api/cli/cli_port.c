/* cli_port.c - sbxctl port-forward: listens on 127.0.0.1:LOCAL and carries each accepted TCP connection to a port in the sandbox as one WebSocket to GET .../sandbox/ports/REMOTE/tcp (binary messages = the bytes, the text message {"type":"eof"} = the local client's half-close; docs/api.md "Ports", adr/0053), many at once, until Ctrl-C. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "cli_http.h"
#include "sbx_ws.h"

#include "cli_int.h"
#include "cli_print.h"

/* Bytes queued towards either side above which the other is not read. */
#define FWD_HIGH ((size_t)256 * 1024)
/* The tunnel's half-close: the local client's EOF (docs/api.md). */
#define EOF_MSG "{\"type\":\"eof\"}"

struct fwd;

/* One forwarded connection: the local client and its WebSocket. */
struct tunnel {
	struct fwd *f;
	struct tunnel *prev, *next;
	struct bufferevent *local;
	struct sbx_ws *ws;         /* freed by tunnel_free (also once closed) */
	int ws_ended;              /* its closed callback ran */
	int local_eof;             /* the local client sent its last byte, and
	                            * {"type":"eof"} went after it */
	int closing;               /* the WebSocket ended: flush local, close */
	int shut_wr;               /* ...and before closing, shutdown(SHUT_WR):
	                            * the sandbox's side ended normally */
};

struct fwd {
	struct ctx *x;
	struct event_base *base;
	struct evconnlistener *lis;
	struct event *sig[2];
	struct tunnel *tunnels;
	char target[512];
	unsigned open, total;
	int stop_sig;
};

static void
tunnel_free(struct tunnel *t)
{
	if (t->prev != NULL)
		t->prev->next = t->next;
	else
		t->f->tunnels = t->next;
	if (t->next != NULL)
		t->next->prev = t->prev;
	t->f->open--;
	if (t->ws != NULL)
		sbx_ws_free(t->ws);
	if (t->local != NULL)
		bufferevent_free(t->local);
	free(t);
}

/* ------------------------------------------------------------------ */
/* The local side                                                      */

static void
local_read(struct bufferevent *bev, void *arg)
{
	struct tunnel *t = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	unsigned char buf[16384];
	int n;

	while (!t->ws_ended && (n = evbuffer_remove(in, buf, sizeof(buf))) > 0)
		if (sbx_ws_send(t->ws, 0, buf, (size_t)n, NULL, 0) == -1)
			break;
}

static void
local_write(struct bufferevent *bev, void *arg)
{
	struct tunnel *t = arg;

	if (t->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
		if (t->shut_wr)
			(void)shutdown(bufferevent_getfd(bev), SHUT_WR);
		tunnel_free(t);
		return;
	}
	if (!t->ws_ended)
		sbx_ws_read_pause(t->ws, 0);
}

static void
local_event(struct bufferevent *bev, short what, void *arg)
{
	struct tunnel *t = arg;

	(void)bev;
	if ((what & BEV_EVENT_EOF) && !t->ws_ended && !t->closing &&
	    !t->local_eof) {
		/* A half-close (or a full close: the two look the same until
		 * a write to it fails): its last bytes go first, then the
		 * sandbox's server gets its EOF and the tunnel stays open for
		 * the rest of the answer, which ends with close 1000. An api
		 * older than the message refuses it with 1008: the tunnel
		 * ends there, as it did before (ws_closed). */
		local_read(t->local, t);
		t->local_eof = 1;
		bufferevent_disable(t->local, EV_READ);
		if (sbx_ws_send(t->ws, 1, EOF_MSG, sizeof(EOF_MSG) - 1, NULL,
		    0) == -1)
			sbx_ws_close(t->ws, SBX_WS_NORMAL, "the local client "
			    "closed");
		return;
	}
	/* A reset, or a write that failed (the client closed fully). */
	tunnel_free(t);
}

/* ------------------------------------------------------------------ */
/* The WebSocket side                                                  */

static void
ws_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct tunnel *t = arg;

	if (text || t->local == NULL)
		return;
	bufferevent_write(t->local, p, n);
	if (evbuffer_get_length(bufferevent_get_output(t->local)) > FWD_HIGH)
		sbx_ws_read_pause(t->ws, 1);
}

static void
ws_pause(void *arg, int on)
{
	struct tunnel *t = arg;

	if (t->local == NULL || t->local_eof)
		return;
	if (on)
		bufferevent_disable(t->local, EV_READ);
	else
		bufferevent_enable(t->local, EV_READ);
}

static void
ws_closed(void *arg, int code, const char *reason)
{
	struct tunnel *t = arg;

	t->ws_ended = 1;   /* sbx_ws_free (in tunnel_free) still frees it */
	/* 1008 after {"type":"eof"}: an api that predates it refused it
	 * (nothing else is sent after it): the old end, said by nobody. */
	if (code != SBX_WS_NORMAL && reason[0] != '\0' &&
	    !(code == SBX_WS_POLICY && t->local_eof))
		errmsg("port %s: %s", t->f->x->o.pos[1], reason);
	/* The sandbox's side ended after the local client's half-close: it
	 * gets its EOF behind the last byte, as it gave one. */
	t->shut_wr = code == SBX_WS_NORMAL && t->local_eof;
	if (t->local == NULL || evbuffer_get_length(bufferevent_get_output(
	    t->local)) == 0) {
		if (t->local != NULL && t->shut_wr)
			(void)shutdown(bufferevent_getfd(t->local), SHUT_WR);
		tunnel_free(t);
		return;
	}
	t->closing = 1;
	bufferevent_disable(t->local, EV_READ);
}

static const struct sbx_ws_ops ws_ops = { ws_message, ws_pause, ws_closed,
	NULL };

/* The WebSocket of one tunnel: the upgrade (blocking, as every sbxctl
 * request), the 101 checked (RFC 6455 §4.1). Returns the connection, or
 * NULL after printing why. */
static struct sbx_ws *
ws_connect(struct fwd *f, void *arg)
{
	char key[SBX_WS_KEY_LEN + 1], hdrs[256], *left = NULL;
	struct cli_resp resp;
	struct cli_conn *c;
	struct bufferevent *bev;
	struct sbx_ws *ws;
	struct sbx_err err;
	size_t leftn = 0;
	int fd;

	sbx_ws_client_key(key);
	snprintf(hdrs, sizeof(hdrs), "Upgrade: websocket\r\n"
	    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n", key);
	sbx_err_clear(&err);
	if ((c = cli_http_upgrade(&f->x->url, f->target, f->x->key, hdrs, &resp,
	    &err)) == NULL) {
		fail_err(&err);
		return NULL;
	}
	if (resp.status != 101) {
		fail_resp(c, &resp);
		return NULL;
	}
	if (sbx_ws_client_check(resp.status, resp.upgrade, resp.connection,
	    resp.ws_accept, resp.ws_protocol, key, NULL, &err) == -1) {
		cli_http_close(c);
		fail_err(&err);
		return NULL;
	}
	if ((fd = cli_http_detach(c, &left, &leftn)) == -1) {
		errmsg("%s", "out of memory");
		return NULL;
	}
	if ((bev = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE)) ==
	    NULL) {
		close(fd);
		free(left);
		return NULL;
	}
	if (leftn > 0)
		evbuffer_add(bufferevent_get_input(bev), left, leftn);
	free(left);
	ws = sbx_ws_new(bev, SBX_WS_CLIENT, NULL, &ws_ops, arg, &err);
	if (ws == NULL)
		fail_err(&err);
	return ws;
}

static void
accepted(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int len, void *arg)
{
	struct fwd *f = arg;
	struct tunnel *t;

	(void)l;
	(void)sa;
	(void)len;
	if ((t = calloc(1, sizeof(*t))) == NULL) {
		close(fd);
		return;
	}
	t->f = f;
	t->next = f->tunnels;
	if (f->tunnels != NULL)
		f->tunnels->prev = t;
	f->tunnels = t;
	f->open++;
	f->total++;
	if ((t->local = bufferevent_socket_new(f->base, fd,
	    BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		close(fd);
		tunnel_free(t);
		return;
	}
	if ((t->ws = ws_connect(f, t)) == NULL) {
		tunnel_free(t);   /* the local client sees its connection close */
		return;
	}
	bufferevent_setcb(t->local, local_read, local_write, local_event, t);
	bufferevent_setwatermark(t->local, EV_WRITE, FWD_HIGH / 2, 0);
	bufferevent_enable(t->local, EV_READ | EV_WRITE);
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct fwd *f = arg;

	(void)what;
	f->stop_sig = (int)sig;
	event_base_loopbreak(f->base);
}

/* "LOCAL:REMOTE", each 1..65535. */
static int
ports_parse(const char *spec, int *local, int *remote)
{
	char *end;
	long a, b;

	a = strtol(spec, &end, 10);
	if (end == spec || *end != ':' || a < 1 || a > 65535)
		return -1;
	spec = end + 1;
	b = strtol(spec, &end, 10);
	if (end == spec || *end != '\0' || b < 1 || b > 65535)
		return -1;
	*local = (int)a;
	*remote = (int)b;
	return 0;
}

/*
 * Whether the NPC's sandbox can take connections: asked once before
 * listening, so that a typo or a sandbox nobody started fails here and
 * not at the first connection. An idle-reaped sandbox passes (the ports
 * route wakes it, SPEC §13); absent or stopped for another reason is
 * refused with the command that starts it. CX_OK or the exit code (the
 * server's sentence or the reason printed).
 */
static int
sandbox_check(struct ctx *x, const char *npc)
{
	json_t *j = NULL;
	const char *state, *why;
	int rc;

	if ((rc = npc_call(x, "GET", npc, "/sandbox", NULL, &j)) != CX_OK)
		return rc;
	state = json_string_value(json_object_get(j, "state"));
	why = json_string_value(json_object_get(j, "stop_reason"));
	rc = CX_OK;
	if (state != NULL && strcmp(state, "absent") == 0) {
		errmsg("%s has no sandbox yet: start it with sbxctl up %s", npc, npc);
		rc = CX_ERR;
	} else if (state != NULL && strcmp(state, "stopped") == 0 &&
	    (why == NULL || strcmp(why, "idle") != 0)) {
		errmsg("%s's sandbox is stopped, %s: start it with sbxctl up %s",
		    npc, why != NULL ? cli_stop_words(why) : "for no reason given",
		    npc);
		rc = CX_ERR;
	}
	json_decref(j);
	return rc;
}

int
c_port_forward(struct ctx *x)
{
	struct fwd f;
	struct sockaddr_in sin;
	char suffix[64];
	int local, remote, rc = CX_OK, i;

	if (ports_parse(x->o.pos[1], &local, &remote) == -1)
		return usage_err(x->cmd, "LOCAL:REMOTE are two ports, 1 to 65535 "
		    "each (e.g. 8000:8000).");
	memset(&f, 0, sizeof(f));
	f.x = x;
	snprintf(suffix, sizeof(suffix), "/sandbox/ports/%d/tcp", remote);
	if (npc_target(f.target, sizeof(f.target), x->o.pos[0], suffix,
	    NULL) == -1)
		return usage_err(NULL, "the NPC name is too long.");
	if ((rc = sandbox_check(x, x->o.pos[0])) != CX_OK)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	if ((f.base = event_base_new()) == NULL) {
		errmsg("%s", "out of memory");
		return CX_ERR;
	}
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)local);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f.lis = evconnlistener_new_bind(f.base, accepted, &f,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 64,
	    (struct sockaddr *)&sin, sizeof(sin));
	if (f.lis == NULL) {
		errmsg("cannot listen on 127.0.0.1:%d: %s", local, strerror(errno));
		event_base_free(f.base);
		return CX_ERR;
	}
	f.sig[0] = evsignal_new(f.base, SIGINT, on_signal, &f);
	f.sig[1] = evsignal_new(f.base, SIGTERM, on_signal, &f);
	for (i = 0; i < 2; i++)
		if (f.sig[i] != NULL)
			event_add(f.sig[i], NULL);
	fprintf(stderr, "Forwarding 127.0.0.1:%d -> %s port %d (Ctrl-C ends "
	    "it)\n", local, x->o.pos[0], remote);
	event_base_dispatch(f.base);
	while (f.tunnels != NULL)
		tunnel_free(f.tunnels);
	evconnlistener_free(f.lis);
	for (i = 0; i < 2; i++)
		if (f.sig[i] != NULL)
			event_free(f.sig[i]);
	event_base_free(f.base);
	/* Ctrl-C is how it ends: not a failure. */
	if (f.stop_sig != 0)
		rc = CX_OK;
	return rc;
}
