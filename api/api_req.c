/* api_req.c - the life of one sandbox-api request: start, JSON replies and errors, streamed replies, limits taken and given back, finish, drain. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <jansson.h>
#include <sodium.h>

#include "api_int.h"
#include "sbx_httpd.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_sse.h"
#include "sbx_time.h"

/* Bytes queued towards a client above which the producer is paused. */
#define STREAM_HIGH_WATER (256 * 1024)
/* A stream's connection timeout: the exec timeout belongs to the broker;
 * heartbeats keep writing, backpressure pauses the producer meanwhile. */
#define STREAM_TIMEOUT_S (24 * 3600)

/* Replies and the end of every request                                */

struct areq *
areq_new(struct api_server *s, struct evhttp_request *req)
{
	struct areq *a;

	if ((a = calloc(1, sizeof(*a))) == NULL)
		return NULL;
	a->s = s;
	a->req = req;
	a->started_ms = sbx_mono_ms();
	a->next = s->live;
	if (s->live != NULL)
		s->live->prev = a;
	s->live = a;
	s->inflight++;
	return a;
}

static void
areq_unlink(struct areq *a)
{
	struct api_server *s = a->s;

	if (a->prev != NULL)
		a->prev->next = a->next;
	else
		s->live = a->next;
	if (a->next != NULL)
		a->next->prev = a->prev;
	a->prev = a->next = NULL;
}

unsigned
api_req_in_flight(void *arg)
{
	return ((struct api_server *)arg)->inflight;
}

/*
 * shutdown_grace is over: cancel what still runs (the broker kills a
 * cancelled exec) and end each request with the reason (SPEC §9).
 */
void
api_req_grace_over(void *arg)
{
	struct api_server *s = arg;
	struct areq *a;
	struct sbx_op *op;
	char n[16];

	snprintf(n, sizeof(n), "%u", s->inflight);
	log_warn("shutdown grace period over; cancelling in-flight requests",
	    "in_flight", n, NULL);
	/* Each turn finishes (unlinks) the head, so this ends. */
	while ((a = s->live) != NULL) {
		op = a->op;
		a->op = NULL;
		sbx_op_cancel(op);
		if (a->streaming && a->req != NULL && a->on_shutdown != NULL)
			a->on_shutdown(a);
		else if (a->streaming && a->req != NULL)
			areq_stream_abort(a, SBX_E_SHUTTING_DOWN);
		else
			areq_fail_code(a, SBX_E_SHUTTING_DOWN,
			    SBX_MSG_API_DRAINING);
	}
}

/*
 * Every request ends here exactly once: audit (mutating routes), log, limit
 * bookkeeping, free. The reply has been sent (or the connection is gone).
 */
void
areq_finish(struct areq *a, int status, const char *outcome)
{
	struct api_server *s = a->s;
	char st[8], ms[24];

	if (a->route != NULL && (a->route->flags & R_MUTATING)) {
		const char *action = a->route->action;

		/* The row names the audit action; the handler only picks which
		 * of the row's variants happened. */
		if (a->audit_pick > 0 && a->audit_pick <= 2 &&
		    a->route->audit[a->audit_pick - 1] != NULL)
			action = a->route->audit[a->audit_pick - 1];
		api_store_audit_detail(s->store, a->authed ? a->who.name : NULL,
		    action, a->has_npc ? a->npc.name : NULL, outcome,
		    a->audit_detail);
	}
	api_metrics_request(&s->metrics, a->route != NULL ? a->route->action :
	    a->label != NULL ? a->label : "unknown", status);
	if (a->exec_started)
		api_metrics_exec_finished(&s->metrics,
		    sbx_mono_ms() - a->exec_started_ms);
	if (a->sse_counted)
		api_metrics_sse(&s->metrics, -1);
	snprintf(st, sizeof(st), "%d", status);
	snprintf(ms, sizeof(ms), "%lld",
	    (long long)(sbx_mono_ms() - a->started_ms));
	log_info("request", "action", a->route != NULL ? a->route->action :
	    "none", "principal", a->authed ? a->who.name : "-", "npc",
	    a->has_npc ? a->npc.name : "-", "status", st, "outcome", outcome,
	    "ms", ms, NULL);
	if (a->exec_counted && a->lim != NULL && a->lim->execs > 0)
		a->lim->execs--;
	if (a->fileop_counted && a->lim != NULL && a->lim->fileops > 0)
		a->lim->fileops--;
	if (a->on_end != NULL)
		a->on_end(a);
	api_write_release(a);
	if (a->ping != NULL)
		event_free(a->ping);
	if (a->chunk != NULL)
		evbuffer_free(a->chunk);
	json_decref(a->body);
	free(a->audit_detail);
	free(a->path);
	if (a->stdin_data != NULL) {
		sodium_memzero(a->stdin_data, a->stdin_len);
		free(a->stdin_data);
	}
	areq_unlink(a);
	s->inflight--;
	free(a);
	if (s->draining && s->inflight == 0)
		sbx_httpd_drain_poke(&s->drain);
}

/* The core's view of a (sbx_httpd.h) for one reply: JSON replies and
 * error statuses and headers come from its one table. text (not NULL):
 * the JSON text encoded already (drained), else obj. */
static int
reply_json(struct areq *a, int status, json_t *obj, struct evbuffer *text)
{
	struct sbx_httpd_req h;
	unsigned flags = SBX_HTTPD_NO_STORE | api_write_reply_flags(a, status);
	int sent;

	memset(&h, 0, sizeof(h));
	h.req = a->req;
	h.gate = a->s->gate;
	sent = text != NULL ? sbx_httpd_reply_json_text(&h, status, text, flags) :
	    sbx_httpd_reply_json(&h, status, obj, flags);
	a->req = NULL;
	return sent != 0 ? sent : status;
}

void
areq_reply_json(struct areq *a, int status, json_t *obj)
{
	areq_finish(a, reply_json(a, status, obj, NULL), "ok");
}

void
areq_reply_json_text(struct areq *a, int status, struct evbuffer *text)
{
	areq_finish(a, reply_json(a, status, NULL, text), "ok");
}

void
areq_fail(struct areq *a, const struct sbx_err *err)
{
	struct sbx_httpd_req h;
	int status;

	memset(&h, 0, sizeof(h));
	h.req = a->req;
	h.gate = a->s->gate;
	/* Status, body and the headers of the status or code (401's
	 * WWW-Authenticate, too_many's Retry-After): the core's one table. */
	status = sbx_httpd_reply_error(&h, err, SBX_HTTPD_NO_STORE |
	    api_write_reply_flags(a, sbx_err_is_set(err) ?
	    sbx_err_http_status(err) : 500));
	a->req = NULL;
	areq_finish(a, status, sbx_err_is_set(err) ? err->code : SBX_E_INTERNAL);
}

void
areq_fail_broker(struct areq *a, const struct sbx_err *err)
{
	if (a->wake_on_409 && !a->streaming && a->req != NULL &&
	    strcmp(err->code, SBX_E_NOT_RUNNING) == 0) {
		a->wake_on_409 = 0;
		api_wake_retry(a);
		return;
	}
	api_metrics_broker_error(&a->s->metrics, err->code);
	areq_fail(a, err);
}

void
areq_fail_code(struct areq *a, const char *code, const char *fmt, ...)
{
	struct sbx_err err;
	va_list ap;

	sbx_err_clear(&err);
	snprintf(err.code, sizeof(err.code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	areq_fail(a, &err);
}

/* ------------------------------------------------------------------ */
/* JSON views                                                          */


int
api_fileop_admit(struct areq *a, struct sbx_err *err)
{
	if (a->lim == NULL)
		return 0;
	if (a->lim->fileops >= (unsigned long long)a->s->cfg->max_file_ops) {
		sbx_err_set(err, SBX_E_TOO_MANY, "You already run %lld file "
		    "operations; try again when one has ended.",
		    a->s->cfg->max_file_ops);
		return -1;
	}
	a->lim->fileops++;
	a->fileop_counted = 1;
	return 0;
}


/* ------------------------------------------------------------------ */
/* Streams                                                             */

static void
stream_drained(struct evhttp_connection *conn, void *arg)
{
	struct areq *a = arg;

	(void)conn;
	if (a->paused && a->op != NULL) {
		a->paused = 0;
		sbx_op_resume(a->op);
	}
}

/* Sends what is in a->chunk; pauses the producer above the high-water mark. */
void
areq_stream_flush(struct areq *a)
{
	struct bufferevent *bev;

	if (a->req == NULL || evbuffer_get_length(a->chunk) == 0)
		return;
	evhttp_send_reply_chunk_with_cb(a->req, a->chunk, stream_drained, a);
	bev = evhttp_connection_get_bufferevent(a->conn);
	if (!a->paused && a->op != NULL && bev != NULL &&
	    evbuffer_get_length(bufferevent_get_output(bev)) >
	    STREAM_HIGH_WATER) {
		a->paused = 1;
		sbx_op_pause(a->op);
	}
}

/* The client went away mid-stream: cancel the producer; for an exec the
 * broker connection closes and the broker kills the process tree. */
static void
stream_closed(struct evhttp_connection *conn, void *arg)
{
	struct areq *a = arg;
	struct sbx_op *op = a->op;

	(void)conn;
	a->op = NULL;
	sbx_op_cancel(op);
	/* The request was detached from its connection: ending it frees it. */
	if (a->req != NULL)
		evhttp_send_reply_end(a->req);
	a->req = NULL;
	a->conn = NULL;
	areq_finish(a, 200, SBX_E_CANCELLED);
}

static void ping_fire(evutil_socket_t, short, void *);

void
areq_ping_arm(struct areq *a)
{
	struct timeval tv;

	if (a->ping == NULL)
		return;
	tv.tv_sec = a->s->cfg->heartbeat / 1000;
	tv.tv_usec = (a->s->cfg->heartbeat % 1000) * 1000;
	evtimer_add(a->ping, &tv);
}

static void
ping_fire(evutil_socket_t fd, short what, void *arg)
{
	struct areq *a = arg;

	(void)fd;
	(void)what;
	if (a->req == NULL)
		return;
	sbx_sse_comment(a->chunk, SBX_SSE_PING);
	areq_stream_flush(a);
	areq_ping_arm(a);
}

int
areq_stream_begin(struct areq *a, const char *ctype)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(a->req);
	struct timeval tv = { STREAM_TIMEOUT_S, 0 };

	if (a->chunk == NULL && (a->chunk = evbuffer_new()) == NULL)
		return -1;
	if (a->sse && (a->ping = evtimer_new(a->s->base, ping_fire, a)) == NULL)
		return -1;
	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "Cache-Control", "no-cache");
	evhttp_add_header(h, "X-Accel-Buffering", "no");
	a->conn = evhttp_request_get_connection(a->req);
	evhttp_connection_set_timeout_tv(a->conn, &tv);
	sbx_gate_watch(a->s->gate, a->conn, stream_closed, a);
	evhttp_send_reply_start(a->req, 200, "OK");
	a->streaming = 1;
	if (a->sse) {
		a->sse_counted = 1;
		api_metrics_sse(&a->s->metrics, 1);
	}
	areq_ping_arm(a);
	return 0;
}

/* Ends a started stream normally and finishes a. */
void
areq_stream_end(struct areq *a, const char *outcome)
{
	struct timeval tv;

	if (a->req != NULL) {
		areq_stream_flush(a);
		tv.tv_sec = (a->s->cfg->request_timeout + 999) / 1000;
		tv.tv_usec = 0;
		sbx_gate_watch(a->s->gate, a->conn, NULL, NULL);
		evhttp_connection_set_timeout_tv(a->conn, &tv);
		evhttp_send_reply_end(a->req);
		a->req = NULL;
	}
	areq_finish(a, 200, outcome);
}

/* Ends a started byte stream abnormally: the client sees a cut chunked body. */
void
areq_stream_abort(struct areq *a, const char *outcome)
{
	if (a->req != NULL) {
		sbx_gate_watch(a->s->gate, a->conn, NULL, NULL);
		evhttp_connection_free(a->conn);   /* frees a->req too */
		a->req = NULL;
	}
	areq_finish(a, 200, outcome);
}
