/* proxy_vmrelay.c - sbx-proxy vmrelay (proxy_vmrelay.h): inside a vm sandbox, each connection to 127.0.0.1:3128 carried over the egress virtio-serial port to the broker (common/sbx_vmux_link.c); touches only its listener and the port. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "proxy_vmrelay.h"
#include "sbx_time.h"
#include "sbx_vmux_link.h"

#define REOPEN_MS 200
#define GRACE_MS 2000            /* a client waits this long for a link */
#define PENDING_MAX 64

struct vr {
	struct event_base *base;
	const char *port;
	int max;
	struct vmux *m;          /* NULL while the port has no broker */
	struct event *reopen;
	int pend[PENDING_MAX];   /* clients accepted while there was no link */
	int64_t pend_ms[PENDING_MAX];
	int npend;
};

/* Clients that waited for a link: carried once there is one, closed once
 * they waited GRACE_MS (the broker connects the port only after the VM's
 * agent is up, so the first request of a fresh VM may come first). */
static void
pending(struct vr *r)
{
	struct bufferevent *bev;
	int i, k = 0;

	for (i = 0; i < r->npend; i++) {
		if (r->m != NULL) {
			if ((bev = bufferevent_socket_new(r->base, r->pend[i],
			    BEV_OPT_CLOSE_ON_FREE)) == NULL)
				close(r->pend[i]);
			else
				vmux_add(r->m, bev);
		} else if (sbx_mono_ms() - r->pend_ms[i] > GRACE_MS)
			close(r->pend[i]);
		else {
			r->pend[k] = r->pend[i];
			r->pend_ms[k++] = r->pend_ms[i];
		}
	}
	r->npend = k;
}

static void
vr_log(const char *msg, const char *detail)
{
	fprintf(stderr, "{\"level\":\"info\",\"msg\":\"sbx-proxy vmrelay: %s\",\"detail\":\"%s\"}\n",
	    msg, detail != NULL ? detail : "");
}

static void
later(struct vr *r)
{
	struct timeval tv = { 0, REOPEN_MS * 1000 };

	evtimer_add(r->reopen, &tv);
}

static void
on_end(void *arg, const char *why)
{
	struct vr *r = arg;

	/* The broker went (end of file), or its bytes made no sense: every
	 * connection ends with the link; a fresh link on a fresh open, so no
	 * half frame of the old one is ever read as the start of a new one. */
	if (why != NULL && strcmp(why, "the link ended") != 0)
		vr_log("link reset", why);
	vmux_free(r->m);
	r->m = NULL;
	later(r);
}

static void
on_reopen(evutil_socket_t fd, short what, void *arg)
{
	struct vr *r = arg;
	struct bufferevent *bev;
	struct pollfd q;
	int pfd;

	(void)fd;
	(void)what;
	pending(r);
	if ((pfd = open(r->port, O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0) {
		later(r);
		return;
	}
	/* No broker on the host side yet (virtio_console says POLLHUP): look
	 * again later, the clients still pending. */
	q.fd = pfd;
	q.events = POLLIN;
	if (poll(&q, 1, 0) == 1 && (q.revents & POLLHUP) && !(q.revents & POLLIN)) {
		close(pfd);
		later(r);
		return;
	}
	if ((bev = bufferevent_socket_new(r->base, pfd, BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		close(pfd);
		later(r);
		return;
	}
	if ((r->m = vmux_new(bev, r->max, NULL, on_end, r)) == NULL)
		later(r);
	pending(r);
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct vr *r = arg;
	struct bufferevent *bev;

	(void)l;
	(void)sa;
	(void)salen;
	evutil_make_socket_nonblocking(fd);
	if (r->m == NULL) {
		if (r->npend < PENDING_MAX) {
			r->pend[r->npend] = fd;
			r->pend_ms[r->npend++] = sbx_mono_ms();
		} else
			close(fd);   /* no broker on the port: no way out just now */
		return;
	}
	if ((bev = bufferevent_socket_new(r->base, fd, BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		close(fd);
		return;
	}
	vmux_add(r->m, bev);
}

static void
on_term(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	event_base_loopexit(arg, NULL);
}

static int
usage(void)
{
	fprintf(stderr, "usage: sbx-proxy vmrelay --port /dev/vportNpM "
	    "[--listen IPv4:PORT] [--max-conns N]\n");
	return 2;
}

int
proxy_vmrelay_main(int argc, char **argv)
{
	const char *listen = "127.0.0.1:3128";
	struct sockaddr_in sin;
	struct evconnlistener *lis;
	struct event *term;
	struct vr r;
	char host[32], *colon, *end;
	long v;
	int i;

	memset(&r, 0, sizeof(r));
	r.max = 64;
	for (i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--port") == 0)
			r.port = argv[i + 1];
		else if (strcmp(argv[i], "--listen") == 0)
			listen = argv[i + 1];
		else if (strcmp(argv[i], "--max-conns") == 0) {
			errno = 0;
			v = strtol(argv[i + 1], &end, 10);
			if (errno != 0 || *end != '\0' || v < 1 || v > 1024)
				return usage();
			r.max = (int)v;
		} else
			return usage();
	}
	if (i != argc || r.port == NULL || r.port[0] != '/')
		return usage();
	memset(&sin, 0, sizeof(sin));
	snprintf(host, sizeof(host), "%s", listen);
	if ((colon = strrchr(host, ':')) == NULL)
		return usage();
	*colon = '\0';
	v = strtol(colon + 1, &end, 10);
	if (*end != '\0' || v < 1 || v > 65535 || inet_pton(AF_INET, host, &sin.sin_addr) != 1)
		return usage();
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)v);
	signal(SIGPIPE, SIG_IGN);
	if ((r.base = event_base_new()) == NULL ||
	    (r.reopen = evtimer_new(r.base, on_reopen, &r)) == NULL ||
	    (term = evsignal_new(r.base, SIGTERM, on_term, r.base)) == NULL ||
	    evsignal_add(term, NULL) != 0)
		return 1;
	lis = evconnlistener_new_bind(r.base, on_accept, &r,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
	    (struct sockaddr *)&sin, sizeof(sin));
	if (lis == NULL) {
		fprintf(stderr, "sbx-proxy vmrelay: cannot listen on %s: %s\n", listen,
		    strerror(errno));
		return 1;
	}
	on_reopen(-1, 0, &r);
	event_base_dispatch(r.base);
	vmux_free(r.m);
	evconnlistener_free(lis);
	event_free(r.reopen);
	event_free(term);
	event_base_free(r.base);
	return 0;
}
