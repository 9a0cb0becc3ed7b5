/* sbx_proxy.c - sbx-proxy, the egress proxy of one sandbox: CONNECT and plain HTTP checked against an allowlist, names resolved once and only checked addresses dialled (adr/0026). */
/*
 * One process per sandbox, in a container of its own that the broker runs on
 * two networks: the sandbox's internal one (no route out) and an egress one.
 * A client's request head is read (bounded, timed), parsed strictly
 * (proxy_req.c), its host checked against the policy (proxy_policy.c), then
 * resolved through evdns only (the NSS entry points are stubbed out in
 * proxy_nonss.c, so no other resolver path exists) and every address it
 * resolves to checked against the refused ranges; the proxy connects only to
 * those checked addresses, so a second answer of the same name (DNS
 * rebinding) never reaches a socket. Refusals answer at once: 403 with one
 * line of reason. Every decision is one JSON line on stdout with the running
 * allowed/denied counts: the broker reads them from the container's log
 * (GET /containers/{id}/logs) for metrics and the api's recent denials.
 * With --counts FILE the counts are kept in FILE (in the socket volume,
 * read-only to the sandbox) and read back at start, so they stay monotonic
 * across a restart or a replacement of the proxy (adr/0027).
 * Paths, query strings and header values are never printed.
 *
 * Usage: sbx-proxy [--listen HOST:PORT|unix:PATH] [--policy FILE] [--allow ENTRY]...
 *        [--cidr CIDR]... [--resolver IP[:PORT]]... [--hosts FILE]
 *        [--counts FILE] [--max-conns N] [--head-timeout-ms MS] [--connect-timeout-ms MS]
 *        [--idle-timeout-ms MS] [--dns-timeout-ms MS]
 *        sbx-proxy relay [--listen HOST:PORT] --to PATH
 * The relay runs in the sandbox (NetworkMode none: loopback only): it
 * passes each connection to 127.0.0.1:3128 unparsed to the proxy's unix
 * socket in a volume both containers mount; it decides nothing.
 * SIGHUP re-reads --policy FILE (a bad file allows nothing until fixed);
 * SIGTERM/SIGINT stop. Exit: 0 stopped, 2 usage, 1 start-up failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "proxy_counts.h"
#include "proxy_policy.h"
#include "proxy_req.h"
#include "sbx_msg.h"
#include "sbx_time.h"

#define PIPE_HIGH (256 * 1024)   /* stop reading a side whose peer has this much queued */
#define PIPE_LOW (64 * 1024)
#define POLICY_FILE_MAX (256 * 1024)

struct px {
	struct event_base *base;
	struct evdns_base *dns;
	struct proxy_policy *pol;
	const char *policy_file;
	unsigned long allowed, denied;
	int conns, max_conns;
	int head_ms, connect_ms, idle_ms, dns_ms;
	struct sockaddr_un relay_to;      /* relay mode: the proxy's socket */
	int relay;
	long long relay_t0;               /* relay: monotonic ms at start */
	int counts_fd;                    /* --counts FILE, or -1 */
	int counts_failed;                /* a write failed: said once */
};

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
};

/* A relay that started less than RELAY_GRACE_MS ago tries the proxy's
 * socket again every RELAY_RETRY_MS before a 502: its sandbox and the proxy
 * start together (ensure of a stopped sandbox), and the proxy may not have
 * bound its socket yet (adr/0027). After that a refusal is a 502 at once. */
#define RELAY_GRACE_MS 1000
#define RELAY_RETRY_MS 50

static struct px px;

/* ---------- output: one JSON line per decision ---------- */

static void
json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void logline(const char *msg, const char *detail);

static void
counts_save(void)
{
	if (proxy_counts_save(px.counts_fd, px.allowed, px.denied) != 0 &&
	    !px.counts_failed) {
		px.counts_failed = 1;
		logline("cannot write the counts file", strerror(errno));
	}
}

static void
emit(const char *event, const char *host, unsigned port, const char *reason,
    const char *addr)
{
	char ts[40];
	struct timespec now;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	printf("{\"ts\":\"%s.%03ldZ\",\"event\":", ts, now.tv_nsec / 1000000);
	json_str(stdout, event);
	if (host != NULL) {
		printf(",\"host\":");
		json_str(stdout, host);
		printf(",\"port\":%u", port);
	}
	if (addr != NULL) {
		printf(",\"addr\":");
		json_str(stdout, addr);
	}
	if (reason != NULL) {
		printf(",\"reason\":");
		json_str(stdout, reason);
	}
	printf(",\"allowed\":%lu,\"denied\":%lu}\n", px.allowed, px.denied);
	fflush(stdout);
	counts_save();
}

static void
logline(const char *msg, const char *detail)
{
	fprintf(stderr, "{\"level\":\"info\",\"msg\":");
	json_str(stderr, msg);
	if (detail != NULL) {
		fprintf(stderr, ",\"detail\":");
		json_str(stderr, detail);
	}
	fprintf(stderr, "}\n");
}

/* ---------- connections ---------- */

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
	px.conns--;
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
	px.denied++;
	emit("deny", k->req.host[0] != '\0' ? k->req.host : NULL, k->req.port, why, NULL);
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
	struct timeval idle = { px.idle_ms / 1000, (px.idle_ms % 1000) * 1000 };
	struct evbuffer *in = bufferevent_get_input(k->c);

	k->st = C_PIPE;
	if (px.relay) {
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
 * again): within the relay's first RELAY_GRACE_MS try again shortly, else
 * (or then) 502. */
static void
relay_failed(struct conn *k)
{
	struct timeval tv = { 0, RELAY_RETRY_MS * 1000 };

	if (k->u != NULL) {
		bufferevent_free(k->u);
		k->u = NULL;
	}
	if (sbx_mono_ms() - px.relay_t0 >= RELAY_GRACE_MS ||
	    (k->retry == NULL &&
	    (k->retry = evtimer_new(px.base, relay_retry_cb, k)) == NULL) ||
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
	if (px.relay) {
		if (what & BEV_EVENT_CONNECTED) {
			start_pipe(k);
			return;
		}
		relay_failed(k);
		return;
	}
	if (what & BEV_EVENT_CONNECTED) {
		proxy_addr_str(k->next->ai_addr, a, sizeof(a));
		px.allowed++;
		emit("allow", k->req.host, k->req.port, NULL, a);
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
	struct timeval ct = { px.connect_ms / 1000, (px.connect_ms % 1000) * 1000 };
	char why[PROXY_WHY_MAX];

	for (; k->next != NULL; k->next = k->next->ai_next) {
		struct sockaddr *sa = k->next->ai_addr;

		if (sa->sa_family == AF_INET)
			((struct sockaddr_in *)(void *)sa)->sin_port = htons(k->req.port);
		else if (sa->sa_family == AF_INET6)
			((struct sockaddr_in6 *)(void *)sa)->sin6_port = htons(k->req.port);
		else
			continue;
		k->u = bufferevent_socket_new(px.base, -1, BEV_OPT_CLOSE_ON_FREE);
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
	emit("fail", k->req.host, k->req.port, why, NULL);
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
		if (proxy_addr_refused(a->ai_addr, px.pol, &range)) {
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
		emit("fail", k->req.host, k->req.port, why, NULL);
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
	if (!proxy_policy_allows(px.pol, k->req.host, k->req.port)) {
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
	d = evdns_getaddrinfo(px.dns, k->req.host, NULL, &hints, resolved, k);
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

static void
accepted(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
    void *arg)
{
	struct timeval ht = { px.head_ms / 1000, (px.head_ms % 1000) * 1000 };
	struct conn *k;

	(void)l;
	(void)sa;
	(void)salen;
	(void)arg;
	k = calloc(1, sizeof(*k));
	if (k == NULL) {
		evutil_closesocket(fd);
		return;
	}
	px.conns++;
	k->px = &px;
	k->st = C_HEAD;
	k->c = bufferevent_socket_new(px.base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (k->c == NULL) {
		evutil_closesocket(fd);
		px.conns--;
		free(k);
		return;
	}
	if (px.conns > px.max_conns) {
		px.denied++;
		emit("deny", NULL, 0, "too many connections", NULL);
		reply(k, 503, "too many connections through this proxy");
		return;
	}
	if (px.relay) {
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
	struct timeval ct = { px.connect_ms / 1000, (px.connect_ms % 1000) * 1000 };

	k->u = bufferevent_socket_new(px.base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (k->u == NULL) {
		conn_free(k);
		return;
	}
	bufferevent_set_timeouts(k->u, NULL, &ct);
	bufferevent_setcb(k->u, NULL, NULL, up_event, k);
	if (bufferevent_socket_connect(k->u, (struct sockaddr *)&px.relay_to,
	    sizeof(px.relay_to)) != 0)
		relay_failed(k);
}

/* ---------- policy, signals, main ---------- */

static int
load_policy_file(const char *path, struct proxy_policy *p, char *why, size_t len)
{
	char *buf = NULL;
	ssize_t n;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0) {
		snprintf(why, len, "cannot open the policy file: %s", strerror(errno));
		memset(p, 0, sizeof(*p));
		return -1;
	}
	buf = malloc(POLICY_FILE_MAX);
	if (buf == NULL) {
		close(fd);
		snprintf(why, len, "%s", SBX_MSG_OOM);
		return -1;
	}
	while (got < POLICY_FILE_MAX && (n = read(fd, buf + got, POLICY_FILE_MAX - got)) > 0)
		got += (size_t)n;
	close(fd);
	if (got >= POLICY_FILE_MAX) {
		free(buf);
		snprintf(why, len, "policy file larger than %d bytes", POLICY_FILE_MAX);
		memset(p, 0, sizeof(*p));
		return -1;
	}
	rc = proxy_policy_parse(p, buf, got, why, len);
	free(buf);
	return rc;
}

static void
on_hup(evutil_socket_t fd, short what, void *arg)
{
	char why[PROXY_WHY_MAX];

	(void)fd;
	(void)what;
	(void)arg;
	if (px.policy_file == NULL)
		return;
	/* A policy that does not parse allows nothing: fail closed. */
	if (load_policy_file(px.policy_file, px.pol, why, sizeof(why)) != 0) {
		memset(px.pol, 0, sizeof(*px.pol));
		emit("policy", NULL, 0, why, NULL);
		return;
	}
	emit("policy", NULL, 0, "reloaded", NULL);
}

static void
on_term(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	event_base_loopexit(arg, NULL);
}

static void
usage(void)
{
	fprintf(stderr, "usage: sbx-proxy [--listen HOST:PORT|unix:PATH] [--policy FILE] [--allow ENTRY]...\n"
	    "       [--cidr CIDR]... [--resolver IP[:PORT]]... [--hosts FILE] [--max-conns N]\n"
	    "       [--head-timeout-ms MS] [--connect-timeout-ms MS] [--idle-timeout-ms MS]\n"
	    "       [--dns-timeout-ms MS] [--counts FILE]\n"
	    "       sbx-proxy relay [--listen HOST:PORT] --to /PATH\n");
	exit(2);
}

static int
unix_addr(const char *path, struct sockaddr_un *un)
{
	memset(un, 0, sizeof(*un));
	if (path[0] != '/' || strlen(path) >= sizeof(un->sun_path))
		return -1;
	un->sun_family = AF_UNIX;
	strcpy(un->sun_path, path);
	return 0;
}

/* "IPv4:PORT", "[IPv6]:PORT" (PORT 0..65535, 0: any free port) or
 * "unix:/PATH". */
static int
parse_listen(const char *s, struct sockaddr_storage *ss, int *sl)
{
	char host[64];
	const char *colon = strrchr(s, ':'), *h = s;
	size_t hn;
	char *end;
	long port;

	memset(ss, 0, sizeof(*ss));
	if (strncmp(s, "unix:", 5) == 0) {
		if (unix_addr(s + 5, (struct sockaddr_un *)ss) != 0)
			return -1;
		*sl = sizeof(struct sockaddr_un);
		return 0;
	}
	if (colon == NULL || colon[1] == '\0')
		return -1;
	hn = (size_t)(colon - s);
	if (hn >= 2 && s[0] == '[' && s[hn - 1] == ']') {
		h = s + 1;
		hn -= 2;
	}
	if (hn == 0 || hn >= sizeof(host))
		return -1;
	memcpy(host, h, hn);
	host[hn] = '\0';
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno != 0 || *end != '\0' || port < 0 || port > 65535)
		return -1;
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		((struct sockaddr_in *)ss)->sin_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		*sl = sizeof(struct sockaddr_in);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
		*sl = sizeof(struct sockaddr_in6);
		return 0;
	}
	return -1;
}

static int
num_arg(const char *s, int lo, int hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		usage();
	return (int)v;
}

int
main(int argc, char **argv)
{
	static struct proxy_policy pol;
	const char *listen = "0.0.0.0:3128", *hosts = NULL, *counts = NULL;
	const char *resolvers[16];
	int nres = 0, i, sl = sizeof(struct sockaddr_storage), stdin_policy = 0;
	char why[PROXY_WHY_MAX], opt[32];
	struct sockaddr_storage ss;
	struct evconnlistener *lis;
	struct event *ev_hup, *ev_term, *ev_int;
	socklen_t len = sizeof(ss);

	px.pol = &pol;
	px.counts_fd = -1;
	px.max_conns = 256;
	px.head_ms = 10000;
	px.connect_ms = 10000;
	px.idle_ms = 600000;
	px.dns_ms = 3000;
	i = 1;
	if (argc > 1 && strcmp(argv[1], "relay") == 0) {
		px.relay = 1;
		px.relay_t0 = sbx_mono_ms();
		listen = "127.0.0.1:3128";
		i = 2;
	}
	for (; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (v == NULL)
			usage();
		i++;
		if (strcmp(a, "--listen") == 0)
			listen = v;
		else if (strcmp(a, "--to") == 0 && px.relay) {
			if (unix_addr(v, &px.relay_to) != 0)
				usage();
		}
		else if (strcmp(a, "--policy") == 0)
			px.policy_file = v;
		else if (strcmp(a, "--allow") == 0) {
			if (proxy_policy_add_allow(&pol, v, why, sizeof(why)) != 0) {
				fprintf(stderr, "sbx-proxy: --allow: %s\n", why);
				return 2;
			}
			stdin_policy = 1;
		} else if (strcmp(a, "--cidr") == 0) {
			if (proxy_policy_add_cidr(&pol, v, why, sizeof(why)) != 0) {
				fprintf(stderr, "sbx-proxy: --cidr: %s\n", why);
				return 2;
			}
		} else if (strcmp(a, "--resolver") == 0) {
			if (nres >= 16)
				usage();
			resolvers[nres++] = v;
		} else if (strcmp(a, "--hosts") == 0)
			hosts = v;
		else if (strcmp(a, "--counts") == 0 && !px.relay)
			counts = v;
		else if (strcmp(a, "--max-conns") == 0)
			px.max_conns = num_arg(v, 1, 65536);
		else if (strcmp(a, "--head-timeout-ms") == 0)
			px.head_ms = num_arg(v, 1, 3600000);
		else if (strcmp(a, "--connect-timeout-ms") == 0)
			px.connect_ms = num_arg(v, 1, 3600000);
		else if (strcmp(a, "--idle-timeout-ms") == 0)
			px.idle_ms = num_arg(v, 1, 86400000);
		else if (strcmp(a, "--dns-timeout-ms") == 0)
			px.dns_ms = num_arg(v, 100, 60000);
		else
			usage();
	}
	if (px.relay && px.relay_to.sun_family != AF_UNIX)
		usage();
	if (px.policy_file != NULL && stdin_policy) {
		fprintf(stderr, "sbx-proxy: --policy and --allow exclude each other\n");
		return 2;
	}
	if (px.policy_file != NULL && load_policy_file(px.policy_file, &pol, why,
	    sizeof(why)) != 0) {
		fprintf(stderr, "sbx-proxy: %s: %s\n", px.policy_file, why);
		return 1;
	}
	if (counts != NULL &&
	    (px.counts_fd = proxy_counts_open(counts, &px.allowed, &px.denied)) < 0) {
		fprintf(stderr, "sbx-proxy: --counts %s: %s\n", counts, strerror(errno));
		return 1;
	}
	if (parse_listen(listen, &ss, &sl) != 0) {
		fprintf(stderr, "sbx-proxy: --listen: not HOST:PORT\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	px.base = event_base_new();
	if (px.base == NULL)
		return 1;
	px.dns = evdns_base_new(px.base, 0);
	if (px.dns == NULL)
		return 1;
	if (nres == 0) {
		if (evdns_base_resolv_conf_parse(px.dns, DNS_OPTIONS_ALL, "/etc/resolv.conf") != 0)
			logline("no usable /etc/resolv.conf", NULL);
	} else {
		for (i = 0; i < nres; i++) {
			if (evdns_base_nameserver_ip_add(px.dns, resolvers[i]) != 0) {
				fprintf(stderr, "sbx-proxy: --resolver: not IP[:PORT]\n");
				return 2;
			}
		}
	}
	/* Names are looked up as given: no search list turns "x" into "x.corp". */
	evdns_base_search_clear(px.dns);
	snprintf(opt, sizeof(opt), "%d.%03d", px.dns_ms / 1000, px.dns_ms % 1000);
	evdns_base_set_option(px.dns, "timeout:", opt);
	evdns_base_set_option(px.dns, "attempts:", "2");
	if (hosts != NULL && evdns_base_load_hosts(px.dns, hosts) != 0) {
		fprintf(stderr, "sbx-proxy: --hosts: cannot read the file\n");
		return 1;
	}
	if (ss.ss_family == AF_UNIX)
		unlink(((struct sockaddr_un *)&ss)->sun_path);   /* a previous proxy's */
	lis = evconnlistener_new_bind(px.base, accepted, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
	    (struct sockaddr *)&ss, sl);
	if (lis == NULL) {
		fprintf(stderr, "sbx-proxy: cannot listen on %s: %s\n", listen, strerror(errno));
		return 1;
	}
	/* The socket's volume is the sandbox's alone (adr/0026): its users,
	 * whatever their uid, may connect. */
	if (ss.ss_family == AF_UNIX && chmod(((struct sockaddr_un *)&ss)->sun_path, 0666) != 0) {
		fprintf(stderr, "sbx-proxy: chmod %s: %s\n", listen, strerror(errno));
		return 1;
	}
	ev_hup = evsignal_new(px.base, SIGHUP, on_hup, NULL);
	ev_term = evsignal_new(px.base, SIGTERM, on_term, px.base);
	ev_int = evsignal_new(px.base, SIGINT, on_term, px.base);
	if (ev_hup == NULL || ev_term == NULL || ev_int == NULL || evsignal_add(ev_hup, NULL) != 0 ||
	    evsignal_add(ev_term, NULL) != 0 || evsignal_add(ev_int, NULL) != 0)
		return 1;
	if (ss.ss_family == AF_UNIX) {
		printf("{\"event\":\"listening\",\"addr\":");
		json_str(stdout, listen);
		printf(",\"relay\":%s,\"rules\":%zu,\"cidrs\":%zu,\"allowed\":%lu,"
		    "\"denied\":%lu}\n", px.relay ? "true" : "false", pol.nrules, pol.ncidrs,
		    px.allowed, px.denied);
		fflush(stdout);
	} else if (getsockname(evconnlistener_get_fd(lis), (struct sockaddr *)&ss, &len) == 0) {
		char a[64];
		unsigned port = ss.ss_family == AF_INET6 ?
		    ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) :
		    ntohs(((struct sockaddr_in *)&ss)->sin_port);

		proxy_addr_str((struct sockaddr *)&ss, a, sizeof(a));
		printf("{\"event\":\"listening\",\"addr\":\"%s\",\"port\":%u,\"relay\":%s,"
		    "\"rules\":%zu,\"cidrs\":%zu}\n", a, port, px.relay ? "true" : "false",
		    pol.nrules, pol.ncidrs);
		fflush(stdout);
	}
	event_base_dispatch(px.base);
	evconnlistener_free(lis);
	event_free(ev_hup);
	event_free(ev_term);
	event_free(ev_int);
	evdns_base_free(px.dns, 1);
	event_base_free(px.base);
	return 0;
}
