/*
 * driver_kube_http.c - one REST call of the kubernetes driver to the API
 * server: a TLS connection (libevent's bufferevent_openssl, the CA of
 * kube_ca_file, host name or IP verified), one HTTP/1.1 request with the
 * bearer token, the response read whole (JSON), as lines (a watch), or
 * handed over after a 101 (pods/exec). Touches the network and the token
 * file only; calls nothing of the other driver_kube files.
 */
#include <arpa/inet.h>
#include <netinet/in.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "driver_kube_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

#define HEAD_MAX (64 * 1024)           /* status line + headers */
#define BODY_MAX (64 * 1024 * 1024)    /* a whole (list) body */
#define LINE_MAX_K (4 * 1024 * 1024)   /* one watch event */

enum hstate { H_HEAD, H_BODY, H_CHUNK_SIZE, H_CHUNK_DATA, H_CHUNK_CRLF, H_DONE };

struct kube_http {
	struct kube *k;
	struct bufferevent *bev;
	struct event *timer;
	struct kube_http_cbs cbs;
	enum hstate st;
	int status;
	int chunked;
	int64_t clen;                /* -1: until EOF */
	uint64_t chunk_left;
	struct evbuffer *body;       /* whole body, or the partial line */
	char upgrade[64], connection[64], accept[64], proto[64];
	int want_upgrade;
};

static void
h_free(struct kube_http *h)
{
	if (h == NULL)
		return;
	if (h->bev != NULL)
		bufferevent_free(h->bev);
	if (h->timer != NULL)
		event_free(h->timer);
	if (h->body != NULL)
		evbuffer_free(h->body);
	free(h);
}

void
kube_http_cancel(struct kube_http *h)
{
	h_free(h);
}

static void
h_end(struct kube_http *h, const struct sbx_err *err)
{
	json_t *body = NULL;
	struct kube_http_cbs cbs = h->cbs;
	int status = h->status;

	if (err == NULL && cbs.line == NULL && evbuffer_get_length(h->body) > 0) {
		size_t n = evbuffer_get_length(h->body);
		const char *p = (const char *)evbuffer_pullup(h->body, -1);

		body = json_loadb(p, n, 0, NULL);
	}
	/* the handle goes before the callback: it may start the next call */
	if (h->bev != NULL) {
		bufferevent_free(h->bev);
		h->bev = NULL;
	}
	h_free(h);
	if (cbs.done != NULL)
		cbs.done(cbs.arg, err != NULL ? 0 : status, body, err);
	json_decref(body);
}

static void
h_fail(struct kube_http *h, const char *code, const char *msg)
{
	struct sbx_err e;

	sbx_err_set(&e, code, "%s", msg);
	h_end(h, &e);
}

/* A line mode body: each complete line to cbs.line. */
static int
h_lines(struct kube_http *h)
{
	struct evbuffer_ptr p;
	size_t n;
	char *line;

	for (;;) {
		p = evbuffer_search(h->body, "\n", 1, NULL);
		if (p.pos < 0) {
			if (evbuffer_get_length(h->body) > LINE_MAX_K)
				return -1;
			return 0;
		}
		n = (size_t)p.pos;
		line = malloc(n + 1);
		if (line == NULL)
			return -1;
		evbuffer_remove(h->body, line, n);
		evbuffer_drain(h->body, 1);
		line[n] = '\0';
		if (n > 0 && h->cbs.line(h->cbs.arg, line, n) != 0) {
			free(line);
			h_free(h);
			return 1;
		}
		free(line);
	}
}

static void
hdr_copy(char *dst, size_t dsz, const char *v)
{
	while (*v == ' ' || *v == '\t')
		v++;
	snprintf(dst, dsz, "%s", v);
}

/* The head: -1 bad, 0 more needed, 1 parsed. */
static int
h_head(struct kube_http *h, struct evbuffer *in)
{
	struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	char *head, *line, *save = NULL;
	size_t n;

	if (end.pos < 0)
		return evbuffer_get_length(in) > HEAD_MAX ? -1 : 0;
	n = (size_t)end.pos + 4;
	if ((head = malloc(n + 1)) == NULL)
		return -1;
	evbuffer_remove(in, head, n);
	head[n] = '\0';
	line = strtok_r(head, "\r\n", &save);
	if (line == NULL || strncmp(line, "HTTP/1.", 7) != 0 ||
	    strlen(line) < 12) {
		free(head);
		return -1;
	}
	h->status = atoi(line + 9);
	h->clen = -1;
	while ((line = strtok_r(NULL, "\r\n", &save)) != NULL) {
		char *c = strchr(line, ':');

		if (c == NULL)
			continue;
		*c++ = '\0';
		if (strcasecmp(line, "Content-Length") == 0)
			h->clen = strtoll(c, NULL, 10);
		else if (strcasecmp(line, "Transfer-Encoding") == 0 &&
		    strcasestr(c, "chunked") != NULL)
			h->chunked = 1;
		else if (strcasecmp(line, "Upgrade") == 0)
			hdr_copy(h->upgrade, sizeof(h->upgrade), c);
		else if (strcasecmp(line, "Connection") == 0)
			hdr_copy(h->connection, sizeof(h->connection), c);
		else if (strcasecmp(line, "Sec-WebSocket-Accept") == 0)
			hdr_copy(h->accept, sizeof(h->accept), c);
		else if (strcasecmp(line, "Sec-WebSocket-Protocol") == 0)
			hdr_copy(h->proto, sizeof(h->proto), c);
	}
	free(head);
	if (h->status < 100 || h->status > 599)
		return -1;
	return 1;
}

/* Moves up to want bytes of in to the body (or lines). -1 too big. */
static int
h_take(struct kube_http *h, struct evbuffer *in, size_t want)
{
	evbuffer_remove_buffer(in, h->body, want);
	if (h->cbs.line != NULL)
		return h_lines(h);
	return evbuffer_get_length(h->body) > BODY_MAX ? -1 : 0;
}

static void
h_read(struct bufferevent *bev, void *arg)
{
	struct kube_http *h = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	int rc;

	for (;;) {
		switch (h->st) {
		case H_HEAD:
			if ((rc = h_head(h, in)) < 0) {
				h_fail(h, SBX_E_RUNTIME, "the API server's answer "
				    "is not HTTP/1.1");
				return;
			}
			if (rc == 0)
				return;
			if (h->status == 101 && h->want_upgrade &&
			    h->cbs.upgraded != NULL) {
				struct kube_http_cbs cbs = h->cbs;
				struct bufferevent *b = h->bev;

				h->bev = NULL;
				bufferevent_setcb(b, NULL, NULL, NULL, NULL);
				cbs.upgraded(cbs.arg, b, h->upgrade, h->connection,
				    h->accept, h->proto);
				h_free(h);
				return;
			}
			if (h->chunked)
				h->st = H_CHUNK_SIZE;
			else
				h->st = H_BODY;
			if (!h->chunked && h->clen == 0) {
				h_end(h, NULL);
				return;
			}
			break;
		case H_BODY: {
			size_t n = evbuffer_get_length(in);

			if (n == 0)
				return;
			if (h->clen >= 0) {
				int64_t have = (int64_t)evbuffer_get_length(h->body);

				(void)have;
				if ((int64_t)n > h->clen)
					n = (size_t)h->clen;
				h->clen -= (int64_t)n;
			}
			if ((rc = h_take(h, in, n)) < 0) {
				h_fail(h, SBX_E_RUNTIME, "the API server's answer "
				    "is too large");
				return;
			}
			if (rc == 1)
				return;
			if (h->clen == 0) {
				h_end(h, NULL);
				return;
			}
			break;
		}
		case H_CHUNK_SIZE: {
			size_t n;
			char *l = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF);

			if (l == NULL) {
				if (evbuffer_get_length(in) > 1024)
					goto bad;
				return;
			}
			if (!isxdigit((unsigned char)l[0])) {
				free(l);
				goto bad;
			}
			h->chunk_left = strtoull(l, NULL, 16);
			free(l);
			if (h->chunk_left == 0) {
				h_end(h, NULL);
				return;
			}
			h->st = H_CHUNK_DATA;
			break;
		}
		case H_CHUNK_DATA: {
			size_t n = evbuffer_get_length(in);

			if (n == 0)
				return;
			if (n > h->chunk_left)
				n = (size_t)h->chunk_left;
			h->chunk_left -= n;
			if ((rc = h_take(h, in, n)) < 0) {
				h_fail(h, SBX_E_RUNTIME, "the API server's answer "
				    "is too large");
				return;
			}
			if (rc == 1)
				return;
			if (h->chunk_left == 0)
				h->st = H_CHUNK_CRLF;
			break;
		}
		case H_CHUNK_CRLF:
			if (evbuffer_get_length(in) < 2)
				return;
			evbuffer_drain(in, 2);
			h->st = H_CHUNK_SIZE;
			break;
		default:
			return;
		}
	}
bad:
	h_fail(h, SBX_E_RUNTIME, "the API server sent a bad chunked body");
}

static void
h_event(struct bufferevent *bev, short what, void *arg)
{
	struct kube_http *h = arg;
	char msg[512];
	unsigned long e;

	if (what & BEV_EVENT_CONNECTED)
		return;
	if (what & BEV_EVENT_EOF) {
		h_read(bev, h);   /* whatever is left */
		if (h->st == H_BODY && h->clen < 0) {
			h_end(h, NULL);
			return;
		}
		if (h->st == H_HEAD && h->status == 0) {
			h_fail(h, SBX_E_RUNTIME_UNAVAILABLE, "the API server "
			    "closed the connection before answering");
			return;
		}
		h_fail(h, SBX_E_RUNTIME, "the API server's answer was cut off");
		return;
	}
	e = bufferevent_get_openssl_error(bev);
	if (e != 0) {
		char buf[160];

		ERR_error_string_n(e, buf, sizeof(buf));
		snprintf(msg, sizeof(msg), "TLS with the API server %s:%s "
		    "failed: %s", h->k->host, h->k->port, buf);
	} else
		snprintf(msg, sizeof(msg), "cannot reach the API server %s:%s: %s",
		    h->k->host, h->k->port,
		    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
	h_fail(h, h->st == H_HEAD && h->status == 0 ?
	    SBX_E_RUNTIME_UNAVAILABLE : SBX_E_RUNTIME, msg);
}

static void
h_timeout(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	h_fail(arg, SBX_E_TIMEOUT, "the API server did not answer in time");
}

/* A new TLS bufferevent connecting to the server; NULL out of memory. */
static struct bufferevent *
tls_connect(struct kube *k)
{
	struct in6_addr a6;
	struct in_addr a4;
	struct bufferevent *bev;
	SSL *ssl = SSL_new(k->ssl);
	int is_ip;

	if (ssl == NULL)
		return NULL;
	is_ip = inet_pton(AF_INET, k->host, &a4) == 1 ||
	    inet_pton(AF_INET6, k->host, &a6) == 1;
	if (is_ip)
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), k->host);
	else {
		SSL_set_tlsext_host_name(ssl, k->host);
		SSL_set1_host(ssl, k->host);
	}
	bev = bufferevent_openssl_socket_new(k->drv.base, -1, ssl,
	    BUFFEREVENT_SSL_CONNECTING,
	    BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (bev == NULL) {
		SSL_free(ssl);
		return NULL;
	}
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	if (bufferevent_socket_connect_hostname(bev, NULL, AF_UNSPEC, k->host,
	    atoi(k->port)) != 0) {
		bufferevent_free(bev);
		return NULL;
	}
	return bev;
}

struct kube_http *
kube_http_start(struct kube *k, const char *method, const char *path,
    json_t *body, const char *content_type, const char *extra,
    int64_t timeout_ms, const struct kube_http_cbs *cbs, struct sbx_err *err)
{
	struct kube_http *h = calloc(1, sizeof(*h));
	struct evbuffer *out;
	char *text = NULL;
	size_t tlen = 0;

	if (h == NULL || (h->body = evbuffer_new()) == NULL)
		goto oom;
	h->k = k;
	h->cbs = *cbs;
	h->want_upgrade = cbs->upgraded != NULL;
	if (body != NULL) {
		if ((text = json_dumps(body, JSON_COMPACT)) == NULL)
			goto oom;
		tlen = strlen(text);
	}
	if ((h->bev = tls_connect(k)) == NULL)
		goto oom;
	out = bufferevent_get_output(h->bev);
	if (evbuffer_add_printf(out, "%s %s HTTP/1.1\r\nHost: %s:%s\r\n"
	    "Authorization: Bearer %s\r\nAccept: application/json\r\n"
	    "User-Agent: sbx-broker\r\n%s", method, path, k->host, k->port,
	    k->token, h->want_upgrade ? "" : "Connection: close\r\n") < 0)
		goto oom;
	if (extra != NULL)
		evbuffer_add(out, extra, strlen(extra));
	if (text != NULL)
		evbuffer_add_printf(out, "Content-Type: %s\r\nContent-Length: "
		    "%zu\r\n\r\n", content_type != NULL ? content_type :
		    "application/json", tlen);
	else
		evbuffer_add(out, "\r\n", 2);
	if (text != NULL)
		evbuffer_add(out, text, tlen);
	free(text);
	text = NULL;
	bufferevent_setcb(h->bev, h_read, NULL, h_event, h);
	bufferevent_enable(h->bev, EV_READ | EV_WRITE);
	if (timeout_ms > 0) {
		struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };

		if ((h->timer = evtimer_new(k->drv.base, h_timeout, h)) == NULL)
			goto oom;
		evtimer_add(h->timer, &tv);
	}
	return h;
oom:
	free(text);
	h_free(h);
	sbx_err_oom(err);
	return NULL;
}

void
kube_status_err(struct sbx_err *err, int status, json_t *body,
    const char *what)
{
	const char *msg = json_string_value(json_object_get(body, "message"));
	const char *code = SBX_E_RUNTIME;

	if (status == 403 || status == 401)
		code = SBX_E_FORBIDDEN;
	else if (status == 404)
		code = SBX_E_NOT_FOUND;
	else if (status == 409)
		code = SBX_E_CONFLICT;
	if (msg != NULL)
		sbx_err_set(err, code, "%s: the API server said %d: %.300s", what,
		    status, msg);
	else
		sbx_err_set(err, code, "%s: the API server said %d", what, status);
}

int
kube_token_reload(struct kube *k)
{
	FILE *f = fopen(k->token_file, "r");
	char buf[8192];
	size_t n;
	char *t;

	if (f == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
	    buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	if (n == 0 || strpbrk(buf, "\r\n") != NULL)
		return -1;
	if ((t = strdup(buf)) == NULL)
		return -1;
	if (k->token != NULL) {
		explicit_bzero(k->token, strlen(k->token));
		free(k->token);
	}
	k->token = t;
	explicit_bzero(buf, sizeof(buf));
	return 0;
}
