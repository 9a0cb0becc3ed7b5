/* api_req.c - the life of one sandbox-api request over the HTTP core (sbx_httpd.h, adr/0035): start, the one way out of a handler, replies and errors, streams, limits given back, finish, drain. Reaches handlers only through the route table and the hooks of struct areq. */
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/util.h>
#include <jansson.h>
#include <sodium.h>

#include "sbx_bev.h"
#include "sbx_msg.h"
#include "api_int.h"
#include "sbx_httpd.h"
#include "sbx_list_out.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_sse.h"
#include "sbx_time.h"

/* A stream's connection timeout: the exec timeout belongs to the broker;
 * heartbeats keep writing, backpressure pauses the producer meanwhile. */
#define STREAM_TIMEOUT_S (24 * 3600)

/* Replies and the end of every request                                */

static const struct sbx_httpd_ops api_httpd_ops;

struct areq *
areq_new(struct api_server *s, struct evhttp_request *req)
{
	struct areq *a;

	if ((a = calloc(1, sizeof(*a))) == NULL)
		return NULL;
	a->s = s;
	a->h.req = req;
	a->h.gate = s->gate;
	a->h.ops = &api_httpd_ops;
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
		if (a->h.streaming && a->h.req != NULL && a->on_shutdown != NULL)
			a->on_shutdown(a);
		else if (a->h.streaming && a->h.req != NULL)
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
	if (a->stream_counted)
		api_streams_put(a->s, a->who.id);
	sbx_httpd_unwatch(&a->h);
	sbx_list_out_free(a->lout);
	if (a->gbody != NULL)
		areq_trim_later(a->s);
	sbx_heap_quiet(a->s->base, &a->s->heap_quiet);
	sbx_gate_body_free(a->gbody);
	if (a->ping != NULL)
		event_free(a->ping);
	sbx_httpd_req_clear(&a->h);
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

/* Reply flags of a: no-store always; a streamed body that stopped coming
 * (504) ends its connection (adr/0030); the rest of one answered early is
 * read and dropped by the gate. */
static unsigned
reply_flags(const struct areq *a, int status)
{
	if (a->gbody != NULL && status == 504 &&
	    !sbx_gate_body_complete(a->gbody))
		return SBX_HTTPD_NO_STORE | SBX_HTTPD_CLOSE;
	if (a->close_after)
		return SBX_HTTPD_NO_STORE | SBX_HTTPD_CLOSE;
	/* A chunked body the gate refused mid-way cannot be framed further. */
	if (a->gbody != NULL && sbx_gate_body_failed(a->gbody) != SBX_GATE_PASS)
		return SBX_HTTPD_NO_STORE | SBX_HTTPD_CLOSE;
	return SBX_HTTPD_NO_STORE;
}

void
areq_reply_json(struct areq *a, int status, json_t *obj)
{
	int sent = sbx_httpd_reply_json(&a->h, status, obj,
	    reply_flags(a, status));

	areq_finish(a, sent != 0 ? sent : status, "ok");
}

void
areq_reply_json_text(struct areq *a, int status, struct evbuffer *text)
{
	int sent = sbx_httpd_reply_json_text(&a->h, status, text,
	    reply_flags(a, status));

	areq_finish(a, sent != 0 ? sent : status, "ok");
}

void
areq_reply_body(struct areq *a, int status, const char *ctype,
    struct evbuffer *body)
{
	sbx_httpd_reply_body(&a->h, status, ctype, body, 0);
	areq_finish(a, status, "ok");
}

/* Status, body and the headers of the status or code (401's
 * WWW-Authenticate, too_many's Retry-After): the core's one table. */
void
areq_fail(struct areq *a, const struct sbx_err *err)
{
	int status;

	status = sbx_httpd_reply_error_as(&a->h, err, reply_flags(a,
	    err != NULL && sbx_err_is_set(err) ? sbx_err_http_status(err) :
	    500), a->err_encode);
	areq_finish(a, status, err != NULL && sbx_err_is_set(err) ? err->code :
	    SBX_E_INTERNAL);
}

void
areq_fail_broker(struct areq *a, const struct sbx_err *err)
{
	void (*wake)(struct areq *) = a->wake;

	if (wake != NULL && !a->h.streaming && a->h.req != NULL &&
	    strcmp(err->code, SBX_E_NOT_RUNNING) == 0) {
		a->wake = NULL;
		wake(a);
		return;
	}
	api_metrics_broker_error(&a->s->metrics, err->code);
	/* On the native routes the broker's sentences that name its id for
	 * the sandbox ("npc-alice") are said again in the player's words:
	 * the player asked about alice (E2B's routes keep their own). */
	if (a->has_npc && a->route != NULL &&
	    strncmp(a->route->r.pattern, "/api/v1/npcs/", 13) == 0) {
		char gone[sizeof(err->message)];
		size_t n = strlen(a->npc.sandbox_id);

		/* "sandbox npc-x does not exist" also says nothing of what to
		 * do; another not_found (a file) stays. */
		snprintf(gone, sizeof(gone), SBX_MSG_NO_SANDBOX, a->npc.sandbox_id);
		if (strcmp(err->code, SBX_E_NOT_FOUND) == 0 &&
		    strcmp(err->message, gone) == 0) {
			areq_fail_code(a, SBX_E_NOT_FOUND, "%s has no sandbox yet: start "
			    "it with PUT /api/v1/npcs/%s/sandbox (sbxctl up %s).",
			    a->npc.name, a->npc.name, a->npc.name);
			return;
		}
		/* "Sandbox npc-x already runs its maximum of ..." (its limits) */
		if (strncmp(err->message, "Sandbox ", 8) == 0 &&
		    strncmp(err->message + 8, a->npc.sandbox_id, n) == 0 &&
		    err->message[8 + n] == ' ') {
			areq_fail_code(a, err->code, "%s's sandbox%s", a->npc.name,
			    err->message + 8 + n);
			return;
		}
	}
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

int
areq_broker_err(struct areq *a)
{
	a->broker_err = 1;
	return -1;
}

void
areq_run(struct areq *a, api_handler_fn fn)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	a->broker_err = 0;
	if (fn(a, &err) == 0)
		return;
	if (a->broker_err)
		areq_fail_broker(a, &err);
	else
		areq_fail(a, &err);
}

/* ------------------------------------------------------------------ */
/* Limits                                                              */

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
/* Streams and watches over the core (sbx_httpd.h)                     */

#define A_OF(r) ((struct areq *)(void *)((char *)(r) - \
	offsetof(struct areq, h)))

/* Backpressure: the owner's hook, else the driver's producer. */
static void
on_pause(struct sbx_httpd_req *r, int on)
{
	struct areq *a = A_OF(r);

	if (a->on_pause != NULL)
		a->on_pause(a, on);
	else if (a->op != NULL && on)
		sbx_op_pause(a->op);
	else if (a->op != NULL)
		sbx_op_resume(a->op);
}

/* The client went away mid-stream or while watched: cancel the producer;
 * for an exec the broker connection closes and the broker kills the
 * process tree; a write leaves the file as it was (adr/0018). */
static void
on_gone(struct sbx_httpd_req *r)
{
	struct areq *a = A_OF(r);
	struct sbx_op *op = a->op;

	a->op = NULL;
	sbx_op_cancel(op);
	areq_finish(a, a->h.status != 0 ? a->h.status : 499, SBX_E_CANCELLED);
}

static const struct sbx_httpd_ops api_httpd_ops = { on_pause, on_gone };

void
areq_watch(struct areq *a)
{
	sbx_httpd_watch(&a->h);
}

void
areq_stream_flush(struct areq *a)
{
	sbx_httpd_stream_flush(&a->h);
}

void
areq_stream_bytes(struct areq *a, const unsigned char *buf, size_t len,
    size_t high_water)
{
	if (!a->h.streaming && a->h.req != NULL &&
	    areq_stream_begin(a, SBX_CT_OCTET, high_water) == -1)
		return;
	if (a->h.req == NULL)
		return;
	api_metrics_stream_bytes(&a->s->metrics, 0, len);
	evbuffer_add(a->h.chunk, buf, len);
	areq_stream_flush(a);
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
	if (a->h.req == NULL)
		return;
	sbx_sse_comment(a->h.chunk, SBX_SSE_PING);
	areq_stream_flush(a);
	areq_ping_arm(a);
}

int
areq_stream_begin(struct areq *a, const char *ctype, size_t high_water)
{
	struct sbx_op *op = a->op;

	if (a->sse && a->ping == NULL &&
	    (a->ping = evtimer_new(a->s->base, ping_fire, a)) == NULL) {
		a->op = NULL;
		sbx_op_cancel(op);
		areq_fail_code(a, SBX_E_INTERNAL, SBX_MSG_OOM);
		return -1;
	}
	a->h.high_water = high_water;
	if (sbx_httpd_stream_begin(&a->h, ctype, STREAM_TIMEOUT_S) == -1) {
		/* Gone already (nothing sent), or a 500 was sent. */
		a->op = NULL;
		sbx_op_cancel(op);
		areq_finish(a, a->h.status != 0 ? a->h.status : 499,
		    a->h.status != 0 ? SBX_E_INTERNAL : SBX_E_CANCELLED);
		return -1;
	}
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
	sbx_httpd_stream_end(&a->h, (a->s->cfg->request_timeout + 999) / 1000);
	areq_finish(a, 200, outcome);
}

/* Ends a started byte stream abnormally: the client sees a cut chunked body. */
void
areq_stream_abort(struct areq *a, const char *outcome)
{
	sbx_httpd_stream_abort(&a->h);
	areq_finish(a, 200, outcome);
}

void
api_req_abandon_all(struct api_server *s)
{
	struct areq *a;
	struct sbx_op *op;

	while ((a = s->live) != NULL) {
		op = a->op;
		a->op = NULL;
		sbx_op_cancel(op);
		sbx_httpd_release(&a->h);
		a->route = NULL;    /* no audit row for an abandoned request */
		areq_finish(a, 503, SBX_E_SHUTTING_DOWN);
	}
}

/* ---- the heap back to the system after big bodies ---- */

static void
trim_fire(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	/* glibc keeps freed arena memory mapped (a body's window buffers,
	 * evbuffer chains): RSS stayed at its high-water mark (issue 24 M2). */
	malloc_trim(0);
}

void
areq_trim_later(struct api_server *s)
{
	struct timeval tv = { 0, 200 * 1000 };

	if (s->trim_ev == NULL &&
	    (s->trim_ev = evtimer_new(s->base, trim_fire, s)) == NULL)
		return;
	if (!evtimer_pending(s->trim_ev, NULL))
		evtimer_add(s->trim_ev, &tv);
}

void
api_req_trim_close(struct api_server *s)
{
	if (s->trim_ev != NULL)
		event_free(s->trim_ev);
	s->trim_ev = NULL;
	sbx_heap_quiet_free(&s->heap_quiet);
}
