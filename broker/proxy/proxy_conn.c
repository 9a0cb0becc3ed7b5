/* proxy_conn.c - one client connection of sbx-proxy, from accept to close: the request head read and parsed (proxy_req.c), the policy asked (proxy_policy.c), the name resolved (evdns) and every address checked, the checked addresses dialled, then the bytes piped both ways or a refusal answered; in relay mode, each connection passed on unparsed to the proxy's unix socket. Calls the decision log (proxy_log.c), never the entry (sbx_proxy.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "proxy_int.h"
#include "proxy_policy.h"
#include "proxy_req.h"
#include "sbx_time.h"

#define PIPE_HIGH (256 * 1024)   /* stop reading a side whose peer has this much queued */
#define PIPE_LOW (64 * 1024)

enum cstate { C_HEAD, C_RESOLVE, C_CONNECT, C_PIPE, C_REPLY };

struct conn {
	struct px *px;
	struct bufferevent *c, *u;
	struct proxy_req req;
	enum cstate st;
	struct evutil_addrinfo *ai;       /* evdns's answer (owned) */
	struct evutil_addrinfo *list, *next; /* the checked addresses, next to dial */
	struct evutil_addrinfo lit;       /* an IP literal's one address */
	struct sockaddr_storage lit_sa;
	struct evdns_getaddrinfo_request *dreq;
	int eof;                          /* 1: client ended, 2: upstream ended */
	int shut;                         /* 1/2: that side's write shut down */
	struct event *retry;              /* relay: the next connect attempt */
	long long t0;                     /* sbx_mono_ms() at accept */
};

/* The relay tries the proxy's socket again every RELAY_RETRY_MS for the
 * first RELAY_GRACE_MS of each connection before a 502: its sandbox and the
 * proxy start together (ensure of a stopped sandbox), and a proxy that is
 * being started or replaced may not have bound its socket yet (adr/0027,
 * amended: a full make check on 2 loaded cores saw a 502 one second after
 * the relay's start). A proxy that is gone still answers within the grace. */
#define RELAY_GRACE_MS 2000
#define RELAY_RETRY_MS 50

static void
conn_free(struct conn *k)
{
	if (k->dreq != NULL) {
		struct evdns_getaddrinfo_request *d = k->dreq;

		k->dreq = NULL;
		evdns_getaddrinfo_cancel(d);
	}
	if (k->c != NULL)
		bufferevent_free(k->c);
	if (k->u != NULL)
		bufferevent_free(k->u);
	if (k->retry != NULL)
		event_free(k->retry);
	if (k->ai != NULL)
		evutil_freeaddrinfo(k->ai);
	proxy_req_clear(&k->req);
	k->px->conns--;
	free(k);
}

static void reply_written(struct bufferevent *bev, void *arg);
static void reply_event(struct bufferevent *bev, short what, void *arg);

/* Answers the client and closes once it is written. */
static void
reply(struct conn *k, int status, const char *why)
{
	const char *text = status == 403 ? "Forbidden" : status == 400 ? "Bad Request" :
	    status == 408 ? "Request Timeout" : status == 414 ? "URI Too Long" : status == 431 ? "Request Header Fields Too Large" :
	    status == 502 ? "Bad Gateway" : status == 503 ? "Service Unavailable" :
	    status == 504 ? "Gateway Timeout" : "Error";
	char body[PROXY_WHY_MAX + 32];
	int n = snprintf(body, sizeof(body), "sbx egress: %s\n", why);

	if (n < 0 || (size_t)n >= sizeof(body))
		n = (int)strlen(body);
	k->st = C_REPLY;
	if (k->u != NULL) {
		bufferevent_free(k->u);
		k->u = NULL;
	}
	bufferevent_disable(k->c, EV_READ);
	evbuffer_drain(bufferevent_get_input(k->c), (size_t)-1);
	evbuffer_add_printf(bufferevent_get_output(k->c),
	    "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
	    "Content-Length: %d\r\nConnection: close\r\nX-Sbx-Egress: %s\r\n\r\n%s",
	    status, text, n, status == 403 ? "denied" : "error", body);
	bufferevent_setcb(k->c, NULL, reply_written, reply_event, k);
	bufferevent_enable(k->c, EV_WRITE);
}

static void
deny(struct conn *k, int status, const char *why)
{
	k->px->denied++;
	proxy_emit(k->px, "deny", k->req.host[0] != '\0' ? k->req.host : NULL,
	    k->req.port, why, NULL);
	reply(k, status, why);
}

static void
linger_read(struct bufferevent *bev, void *arg)
{
	(void)arg;
	evbuffer_drain(bufferevent_get_input(bev), (size_t)-1);
}

/*
 * The reply is out: half-close and read what the client still sends for a
 * moment before closing, so that unread bytes (the rest of an oversized
 * head) do not turn the close into a reset that eats the reply.
 */
static void
reply_written(struct bufferevent *bev, void *arg)
{
	struct timeval t = { 2, 0 };

	shutdown(bufferevent_getfd(bev), SHUT_WR);
	bufferevent_setcb(bev, linger_read, NULL, reply_event, arg);
	bufferevent_set_timeouts(bev, &t, NULL);
	bufferevent_disable(bev, EV_WRITE);
	bufferevent_enable(bev, EV_READ);
}

static void
reply_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	conn_free(arg);
}

/* ---------- the pipe: bytes both ways, bounded buffers ---------- */

static void pipe_read(struct bufferevent *bev, void *arg);
static void pipe_write(struct bufferevent *bev, void *arg);
static void pipe_event(struct bufferevent *bev, short what, void *arg);

static struct bufferevent *
peer_of(struct conn *k, struct bufferevent *bev)
{
	return bev == k->c ? k->u : k->c;
}

static void
pipe_read(struct bufferevent *bev, void *arg)
{
	struct conn *k = arg;
	struct bufferevent *o = peer_of(k, bev);

	evbuffer_add_buffer(bufferevent_get_output(o), bufferevent_get_input(bev));
	if (evbuffer_get_length(bufferevent_get_output(o)) >= PIPE_HIGH) {
		bufferevent_disable(bev, EV_READ);
		bufferevent_setwatermark(o, EV_WRITE, PIPE_LOW, 0);
	}
}

/* Bit of k->eof: the client (1) or upstream (2) has sent its last byte. */
static int
side(struct conn *k, struct bufferevent *bev)
{
	return bev == k->c ? 1 : 2;
}

/* Half-close: once everything one side sent is written to the other,
 * shut the other's write direction; free when both have ended. */
static void
pass_eof(struct conn *k, struct bufferevent *o)
{
	if (evbuffer_get_length(bufferevent_get_output(o)) > 0)
		return;
	if (!(k->shut & side(k, o))) {
		k->shut |= side(k, o);
		shutdown(bufferevent_getfd(o), SHUT_WR);
	}
	if (k->eof == 3)
		conn_free(k);
}

static void
pipe_write(struct bufferevent *bev, void *arg)
{
	struct conn *k = arg;
	struct bufferevent *o = peer_of(k, bev);

	/* bev's peer has ended and bev drained: pass the end on. */
	if (k->eof & side(k, o)) {
		pass_eof(k, bev);
		return;
	}
	/* Drained below the low mark: read the other side again. */
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_enable(o, EV_READ);
}

static void
pipe_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *k = arg;
	struct bufferevent *o = peer_of(k, bev);

	if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR)) {
		/* One side ended: pass on what it sent, then its end. */
		evbuffer_add_buffer(bufferevent_get_output(o), bufferevent_get_input(bev));
		bufferevent_disable(bev, EV_READ);
		k->eof |= side(k, bev);
		bufferevent_setwatermark(o, EV_WRITE, 0, 0);
		bufferevent_enable(o, EV_WRITE);
		pass_eof(k, o);
		return;
	}
	conn_free(k);
}

static void
start_pipe(struct conn *k)
{
	struct timeval idle = { k->px->idle_ms / 1000, (k->px->idle_ms % 1000) * 1000 };
	struct evbuffer *in = bufferevent_get_input(k->c);

	k->st = C_PIPE;
	if (k->px->relay) {
		/* relay: bytes as they come, nothing parsed */
	} else if (k->req.kind == PROXY_REQ_CONNECT) {
		evbuffer_drain(in, k->req.head_len);
		evbuffer_add_printf(bufferevent_get_output(k->c),
		    "HTTP/1.1 200 Connection established\r\n\r\n");
	} else {
		evbuffer_drain(in, k->req.head_len);
		bufferevent_write(k->u, k->req.out, k->req.out_len);
	}
	/* Bytes the client sent after its head (a TLS hello, a body) go on. */
	evbuffer_add_buffer(bufferevent_get_output(k->u), in);
	bufferevent_set_timeouts(k->c, &idle, NULL);
	bufferevent_set_timeouts(k->u, &idle, NULL);
	bufferevent_setcb(k->c, pipe_read, pipe_write, pipe_event, k);
	bufferevent_setcb(k->u, pipe_read, pipe_write, pipe_event, k);
	bufferevent_enable(k->c, EV_READ | EV_WRITE);
	bufferevent_enable(k->u, EV_READ | EV_WRITE);
}

/* ---------- connect to the checked addresses, in order ---------- */

static void try_connect(struct conn *k);
static void relay_connect(struct conn *k);

static void
relay_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	relay_connect(arg);
}

/* The proxy's socket refused (absent, or left by a proxy that is starting
 * again): within the connection's first RELAY_GRACE_MS try again shortly,
 * else (or then) 502. */
static void
relay_failed(struct conn *k)
{
	struct timeval tv = { 0, RELAY_RETRY_MS * 1000 };

	if (k->u != NULL) {
		bufferevent_free(k->u);
		k->u = NULL;
	}
	if (sbx_mono_ms() - k->t0 >= RELAY_GRACE_MS ||
	    (k->retry == NULL &&
	    (k->retry = evtimer_new(k->px->base, relay_retry_cb, k)) == NULL) ||
	    evtimer_add(k->retry, &tv) != 0) {
		reply(k, 502, "the egress proxy of this sandbox is not reachable");
		return;
	}
}

static void
up_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *k = arg;
	char a[64];

	(void)bev;
	if (k->px->relay) {
		if (what & BEV_EVENT_CONNECTED) {
			start_pipe(k);
			return;
		}
		relay_failed(k);
		return;
	}
	if (what & BEV_EVENT_CONNECTED) {
		proxy_addr_str(k->next->ai_addr, a, sizeof(a));
		k->px->allowed++;
		proxy_emit(k->px, "allow", k->req.host, k->req.port, NULL, a);
		start_pipe(k);
		return;
	}
	bufferevent_free(k->u);
	k->u = NULL;
	k->next = k->next->ai_next;
	try_connect(k);
}

static void
try_connect(struct conn *k)
{
	struct timeval ct = { k->px->connect_ms / 1000, (k->px->connect_ms % 1000) * 1000 };
	char why[PROXY_WHY_MAX];

	for (; k->next != NULL; k->next = k->next->ai_next) {
		struct sockaddr *sa = k->next->ai_addr;

		if (sa->sa_family == AF_INET)
			((struct sockaddr_in *)(void *)sa)->sin_port = htons(k->req.port);
		else if (sa->sa_family == AF_INET6)
			((struct sockaddr_in6 *)(void *)sa)->sin6_port = htons(k->req.port);
		else
			continue;
		k->u = bufferevent_socket_new(k->px->base, -1, BEV_OPT_CLOSE_ON_FREE);
		if (k->u == NULL)
			break;
		bufferevent_set_timeouts(k->u, NULL, &ct);
		bufferevent_setcb(k->u, NULL, NULL, up_event, k);
		k->st = C_CONNECT;
		if (bufferevent_socket_connect(k->u, sa, (int)k->next->ai_addrlen) == 0)
			return;
		bufferevent_free(k->u);
		k->u = NULL;
	}
	/* Allowed by the policy, but nothing answered: not a denial. */
	snprintf(why, sizeof(why), "could not connect to %s:%u", k->req.host,
	    (unsigned)k->req.port);
	proxy_emit(k->px, "fail", k->req.host, k->req.port, why, NULL);
	reply(k, 502, why);
}

/*
 * Every address must be outside the refused ranges: a name that answers a
 * public and a private address at once is refused whole (a client must not
 * be able to steer the proxy to the second by making the first fail).
 */
static int
check_addrs(struct conn *k, char *why, size_t len)
{
	struct evutil_addrinfo *a;
	const char *range;
	char s[64];

	for (a = k->list; a != NULL; a = a->ai_next) {
		if (proxy_addr_refused(a->ai_addr, k->px->pol, &range)) {
			if (k->req.host_is_ip)
				snprintf(why, len, "%s is in %s, which is never reached",
				    k->req.host, range);
			else
				snprintf(why, len, "%s resolves to %s in %s, which is never reached",
				    k->req.host, proxy_addr_str(a->ai_addr, s, sizeof(s)), range);
			return -1;
		}
	}
	return 0;
}

static void
resolved(int result, struct evutil_addrinfo *res, void *arg)
{
	struct conn *k = arg;
	char why[PROXY_WHY_MAX];

	if (result == EVUTIL_EAI_CANCEL) {
		if (res != NULL)
			evutil_freeaddrinfo(res);
		return;
	}
	k->dreq = NULL;
	if (result != 0 || res == NULL) {
		snprintf(why, sizeof(why), "could not resolve %s", k->req.host);
		if (res != NULL)
			evutil_freeaddrinfo(res);
		proxy_emit(k->px, "fail", k->req.host, k->req.port, why, NULL);
		reply(k, 502, why);
		return;
	}
	k->ai = res;
	k->list = res;
	k->next = res;
	if (check_addrs(k, why, sizeof(why)) != 0) {
		deny(k, 403, why);
		return;
	}
	try_connect(k);
}

static void
head_read(struct bufferevent *bev, void *arg)
{
	struct conn *k = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t have = evbuffer_get_length(in);
	size_t look = have < PROXY_HEAD_MAX ? have : PROXY_HEAD_MAX;
	const char *buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
	long hl = proxy_req_head_len(buf, look);
	char why[PROXY_WHY_MAX];
	int status = 400, is_ip = 0;
	struct evutil_addrinfo hints;
	struct evdns_getaddrinfo_request *d;

	if (hl == 0)
		return;
	if (hl == -2) {
		deny(k, 400, "bare LF in the request head");
		return;
	}
	if (hl < 0) {
		deny(k, 431, "request head longer than 8192 bytes");
		return;
	}
	if (proxy_req_parse(buf, (size_t)hl, &k->req, &status, why, sizeof(why)) != 0) {
		deny(k, status, why);
		return;
	}
	if (!proxy_policy_allows(k->px->pol, k->req.host, k->req.port)) {
		snprintf(why, sizeof(why), "%s:%u is not in this sandbox's allowlist",
		    k->req.host, (unsigned)k->req.port);
		deny(k, 403, why);
		return;
	}
	bufferevent_disable(bev, EV_READ);
	bufferevent_set_timeouts(bev, NULL, NULL);
	k->st = C_RESOLVE;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	is_ip = k->req.host_is_ip;
	if (is_ip) {
		/* An address literal: no lookup (the NSS stubs would refuse it). */
		struct sockaddr_in *s4 = (struct sockaddr_in *)&k->lit_sa;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&k->lit_sa;

		memset(&k->lit, 0, sizeof(k->lit));
		if (k->req.host_is_v6) {
			s6->sin6_family = AF_INET6;
			inet_pton(AF_INET6, k->req.host, &s6->sin6_addr);
			k->lit.ai_addrlen = sizeof(*s6);
		} else {
			s4->sin_family = AF_INET;
			inet_pton(AF_INET, k->req.host, &s4->sin_addr);
			k->lit.ai_addrlen = sizeof(*s4);
		}
		k->lit.ai_family = k->lit_sa.ss_family;
		k->lit.ai_addr = (struct sockaddr *)&k->lit_sa;
		k->list = k->next = &k->lit;
		if (check_addrs(k, why, sizeof(why)) != 0) {
			deny(k, 403, why);
			return;
		}
		try_connect(k);
		return;
	}
	/* The callback may run before this returns (the hosts file). */
	d = evdns_getaddrinfo(k->px->dns, k->req.host, NULL, &hints, resolved, k);
	if (d != NULL && k->st == C_RESOLVE && k->ai == NULL)
		k->dreq = d;
}

static void
head_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *k = arg;

	(void)bev;
	if (what & BEV_EVENT_TIMEOUT) {
		deny(k, 408, "no complete request head in time");
		return;
	}
	conn_free(k);
}

void
proxy_accepted(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
    void *arg)
{
	struct px *px = arg;
	struct timeval ht = { px->head_ms / 1000, (px->head_ms % 1000) * 1000 };
	struct conn *k;

	(void)l;
	(void)sa;
	(void)salen;
	k = calloc(1, sizeof(*k));
	if (k == NULL) {
		evutil_closesocket(fd);
		return;
	}
	px->conns++;
	k->px = px;
	k->t0 = sbx_mono_ms();
	k->st = C_HEAD;
	k->c = bufferevent_socket_new(px->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (k->c == NULL) {
		evutil_closesocket(fd);
		px->conns--;
		free(k);
		return;
	}
	if (px->conns > px->max_conns) {
		px->denied++;
		proxy_emit(px, "deny", NULL, 0, "too many connections", NULL);
		reply(k, 503, "too many connections through this proxy");
		return;
	}
	if (px->relay) {
		/* The sandbox's side: on to the proxy's unix socket, unparsed. */
		bufferevent_setcb(k->c, NULL, NULL, head_event, k);
		relay_connect(k);
		return;
	}
	bufferevent_set_timeouts(k->c, &ht, NULL);
	bufferevent_setcb(k->c, head_read, NULL, head_event, k);
	bufferevent_enable(k->c, EV_READ);
}

/* The relay's connect to the proxy's unix socket (again after a refusal). */
static void
relay_connect(struct conn *k)
{
	struct timeval ct = { k->px->connect_ms / 1000, (k->px->connect_ms % 1000) * 1000 };

	k->u = bufferevent_socket_new(k->px->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (k->u == NULL) {
		conn_free(k);
		return;
	}
	bufferevent_set_timeouts(k->u, NULL, &ct);
	bufferevent_setcb(k->u, NULL, NULL, up_event, k);
	if (bufferevent_socket_connect(k->u, (struct sockaddr *)&k->px->relay_to,
	    sizeof(k->px->relay_to)) != 0)
		relay_failed(k);
}
