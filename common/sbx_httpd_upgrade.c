/* sbx_httpd_upgrade.c - taking a connection away from evhttp after its request was read: a raw hand-off (the ports proxy, whose upstream writes the reply) and a 101 upgrade on top of it (adr/0053; adr/0050 for the session link). Touches only the connection it is given. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "sbx_gate.h"
#include "sbx_httpd.h"
#include "sbx_log.h"
#include "sbx_proto.h"

/*
 * libevent 2.1.12 has no way to take a socket from an evhttp connection:
 * evhttp_connection_free calls shutdown(fd, SHUT_WR) on the connection's
 * fd whatever the bufferevent's options, and closes it. So the socket is
 * dup'ed to a new descriptor (the caller's bufferevent) and the old
 * descriptor number is pointed at /dev/null (dup3) after evhttp's
 * bufferevent stopped polling it: evhttp's shutdown then fails with
 * ENOTSOCK and its close closes /dev/null, while the socket lives on in the
 * caller's descriptor. The evhttp connection itself is freed on the next
 * turn of the loop (never inside evhttp's own callback), unless evhttp
 * frees it first (server shutdown): its close callback cancels the free.
 */
struct later {
	struct evhttp_connection *conn;
	struct sbx_gate *gate;
	struct event *ev;
};

static void
later_closed(struct evhttp_connection *conn, void *arg)
{
	struct later *l = arg;

	(void)conn;
	event_free(l->ev);
	free(l);
}

static void
later_run(evutil_socket_t fd, short what, void *arg)
{
	struct later *l = arg;
	struct evhttp_connection *conn = l->conn;

	(void)fd;
	(void)what;
	if (sbx_gate_watch(l->gate, conn, NULL, NULL) == -1)
		evhttp_connection_set_closecb(conn, NULL, NULL);
	event_free(l->ev);
	free(l);
	evhttp_connection_free(conn);
}

static struct bufferevent *
takeover(struct sbx_httpd_req *r, const char *head)
{
	struct evhttp_connection *conn;
	struct bufferevent *old, *nb = NULL;
	struct event_base *base;
	struct later *l = NULL;
	evutil_socket_t fd, nfd = -1;
	int hole = -1;
	struct sbx_err err;

	if (r->req == NULL)
		return NULL;
	conn = evhttp_request_get_connection(r->req);
	old = conn != NULL ? evhttp_connection_get_bufferevent(conn) : NULL;
	fd = old != NULL ? bufferevent_getfd(old) : -1;
	if (fd < 0)
		goto fail;
	base = evhttp_connection_get_base(conn);
	if ((nfd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0 ||
	    (hole = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 ||
	    (l = calloc(1, sizeof(*l))) == NULL ||
	    (l->ev = event_new(base, -1, 0, later_run, l)) == NULL ||
	    evutil_make_socket_nonblocking(nfd) != 0 ||
	    (nb = bufferevent_socket_new(base, nfd, BEV_OPT_CLOSE_ON_FREE)) ==
	    NULL)
		goto fail;
	nfd = -1;   /* nb's now */
	if (head != NULL && bufferevent_write(nb, head, strlen(head)) != 0)
		goto fail;
	/* From here nothing fails: evhttp lets go. */
	sbx_httpd_unwatch(r);
	bufferevent_disable(old, EV_READ | EV_WRITE);
	/* Bytes still queued for the client precede the new stream's. */
	evbuffer_prepend_buffer(bufferevent_get_output(nb),
	    bufferevent_get_output(old));
	if (sbx_gate_takeover(r->gate, conn, bufferevent_get_input(nb)) == -1)
		log_warn("lost bytes handing a connection over", NULL);
	if (dup3(hole, fd, O_CLOEXEC) < 0)
		log_warn("hand-off: dup3 failed", "errno", strerror(errno),
		    NULL);
	close(hole);
	l->conn = conn;
	l->gate = r->gate;
	if (sbx_gate_watch(r->gate, conn, later_closed, l) == -1)
		evhttp_connection_set_closecb(conn, later_closed, l);
	event_active(l->ev, EV_TIMEOUT, 1);
	r->req = NULL;
	r->conn = NULL;
	return nb;
fail:
	if (nb != NULL)
		bufferevent_free(nb);
	if (nfd >= 0)
		close(nfd);
	if (hole >= 0)
		close(hole);
	if (l != NULL && l->ev != NULL)
		event_free(l->ev);
	free(l);
	sbx_err_oom(&err);
	sbx_httpd_reply_error(r, &err, SBX_HTTPD_CLOSE);
	return NULL;
}

struct bufferevent *
sbx_httpd_takeover(struct sbx_httpd_req *r)
{
	return takeover(r, NULL);
}

struct bufferevent *
sbx_httpd_upgrade(struct sbx_httpd_req *r, const char *upgrade,
    const char *extra_headers)
{
	char *head = NULL;
	struct bufferevent *b;
	size_t n;

	if (r->req == NULL)
		return NULL;
	n = strlen(upgrade) + (extra_headers != NULL ?
	    strlen(extra_headers) : 0) + 96;
	if ((head = malloc(n)) == NULL) {
		struct sbx_err err;

		sbx_err_oom(&err);
		sbx_httpd_reply_error(r, &err, SBX_HTTPD_CLOSE);
		return NULL;
	}
	snprintf(head, n, "HTTP/1.1 101 Switching Protocols\r\n"
	    "Connection: Upgrade\r\nUpgrade: %s\r\n%s\r\n", upgrade,
	    extra_headers != NULL ? extra_headers : "");
	b = takeover(r, head);
	if (b != NULL)
		r->status = 101;
	free(head);
	return b;
}
