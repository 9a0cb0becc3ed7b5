/* api_http.c - sandbox-api's public HTTP server: route table, auth, ownership, limits, audit, JSON handlers (SPEC §8). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <jansson.h>
#include <sodium.h>

#include "api_int.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_wire.h"
#include "sbx_usage.h"

#define API_PREFIX "/api/v1"
#define NPCS_PATH API_PREFIX "/npcs"
#define METRICS_PATH "/metrics"

/* The sentence a player gets when asking for egress (SPEC §8). */
#define EGRESS_FORBIDDEN "Network egress is granted by an operator; ask an " \
	"operator to run `sbxctl egress grant %s`."

static void h_npc_create(struct areq *);
static void h_npc_list(struct areq *);
static void h_whoami(struct areq *);
static void h_ensure(struct areq *);
static void h_status(struct areq *);
static void h_destroy(struct areq *);
static void h_write(struct areq *);
static void h_list(struct areq *);
static void h_stop(struct areq *);
static void h_egress(struct areq *);
static void h_metrics(struct areq *);

/*
 * The route table. Routes with R_NPC match "/api/v1/npcs/{npc}" + suffix;
 * the others match the full path. Checks run in api_dispatch in this order
 * before any handler: auth, route, method, rate limit, NPC existence and
 * ownership (404 either way), operator-only, body size, JSON syntax.
 */
static const struct api_route routes[] = {
	{ EVHTTP_REQ_POST, NPCS_PATH, h_npc_create,
	    R_AUTH | R_JSON | R_MUTATING, "npc.create" },
	{ EVHTTP_REQ_GET, NPCS_PATH, h_npc_list, R_AUTH, "npc.list" },
	{ EVHTTP_REQ_GET, API_PREFIX "/whoami", h_whoami, R_AUTH, "whoami" },
	{ EVHTTP_REQ_PUT, "/sandbox", h_ensure,
	    R_AUTH | R_NPC | R_JSON_OPT | R_MUTATING, "sandbox.ensure" },
	{ EVHTTP_REQ_GET, "/sandbox", h_status, R_AUTH | R_NPC,
	    "sandbox.status" },
	{ EVHTTP_REQ_DELETE, "/sandbox", h_destroy,
	    R_AUTH | R_NPC | R_MUTATING, "sandbox.destroy" },
	{ EVHTTP_REQ_POST, "/sandbox/exec", api_h_exec,
	    R_AUTH | R_NPC | R_JSON | R_MUTATING, "sandbox.exec" },
	{ EVHTTP_REQ_GET, "/sandbox/files", api_h_read, R_AUTH | R_NPC,
	    "files.read" },
	{ EVHTTP_REQ_PUT, "/sandbox/files", h_write,
	    R_AUTH | R_NPC | R_RAW | R_MUTATING, "files.write" },
	{ EVHTTP_REQ_GET, "/sandbox/list", h_list, R_AUTH | R_NPC,
	    "files.list" },
	{ EVHTTP_REQ_POST, "/sandbox/stop", h_stop,
	    R_AUTH | R_NPC | R_JSON_OPT | R_MUTATING, "sandbox.stop" },
	{ EVHTTP_REQ_PUT, "/egress", h_egress,
	    R_AUTH | R_NPC | R_JSON | R_OPERATOR | R_MUTATING, "egress" },
	/* Execs as resources (api_execs.c, ADR 0015); '*' is the exec id. */
	{ EVHTTP_REQ_POST, "/sandbox/execs", api_h_execs_create,
	    R_AUTH | R_NPC | R_JSON | R_MUTATING, "execs.create" },
	{ EVHTTP_REQ_GET, "/sandbox/execs", api_h_execs_list, R_AUTH | R_NPC,
	    "execs.list" },
	{ EVHTTP_REQ_GET, "/sandbox/execs/*", api_h_execs_get, R_AUTH | R_NPC,
	    "execs.get" },
	{ EVHTTP_REQ_DELETE, "/sandbox/execs/*", api_h_execs_delete,
	    R_AUTH | R_NPC | R_MUTATING, "execs.delete" },
	{ EVHTTP_REQ_GET, "/sandbox/execs/*/events", api_h_execs_events,
	    R_AUTH | R_NPC, "execs.events" },
	{ EVHTTP_REQ_POST, "/sandbox/execs/*/ticket", api_h_execs_ticket,
	    R_AUTH | R_NPC | R_JSON_OPT | R_MUTATING, "execs.ticket" },
	{ EVHTTP_REQ_GET, "/console", api_h_console, 0, "console" },
	/* Operators only: the figures are about every principal's use. */
	{ EVHTTP_REQ_GET, METRICS_PATH, h_metrics, R_AUTH | R_OPERATOR,
	    "metrics" },
	{ 0, NULL, NULL, 0, NULL },
};

static int events_auth(struct api_server *, const char *, const char *, int,
    struct api_principal *);

/* Routes whose credential is not the bearer key (api_auth_fn): checked by
 * the gate before the body and again by api_dispatch's step 1. */
static const struct api_route_auth route_auths[] = {
	/* A browser's EventSource cannot send a key: ?ticket= (ADR 0015). */
	{ api_h_execs_events, events_auth },
	{ NULL, NULL },
};

static api_auth_fn
route_auth(const struct api_route *r)
{
	const struct api_route_auth *ra;

	for (ra = route_auths; r != NULL && ra->handler != NULL; ra++)
		if (ra->handler == r->handler)
			return ra->auth;
	return NULL;
}

int64_t
api_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t
wall_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static const char *
method_name(int m)
{
	switch (m) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_HEAD: return "HEAD";
	case EVHTTP_REQ_PATCH: return "PATCH";
	case EVHTTP_REQ_OPTIONS: return "OPTIONS";
	default: return "OTHER";
	}
}

/* ------------------------------------------------------------------ */
/* Replies and the end of every request                                */

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

static void
drain_fire(evutil_socket_t fd, short what, void *arg)
{
	struct api_server *s = arg;

	(void)fd;
	(void)what;
	if (s->inflight > 0)
		return;
	if (s->grace_ev != NULL)
		event_del(s->grace_ev);
	if (s->drain_done != NULL) {
		void (*done)(void *) = s->drain_done;

		s->drain_done = NULL;
		done(s->drain_arg);
	}
}

static void
drain_check(struct api_server *s)
{
	struct timeval now = { 0, 0 };

	if (s->draining && s->inflight == 0 && s->drain_ev != NULL)
		evtimer_add(s->drain_ev, &now);
}

/*
 * shutdown_grace is over: cancel what still runs (the broker kills a
 * cancelled exec) and end each request with the reason (SPEC §9).
 */
static void
grace_over(evutil_socket_t fd, short what, void *arg)
{
	struct api_server *s = arg;
	struct areq *a;
	struct sbx_op *op;
	char n[16];

	(void)fd;
	(void)what;
	snprintf(n, sizeof(n), "%u", s->inflight);
	log_warn("shutdown grace period over; cancelling in-flight requests",
	    "in_flight", n, NULL);
	/* Each turn finishes (unlinks) the head, so this ends. */
	while ((a = s->live) != NULL) {
		op = a->op;
		a->op = NULL;
		sbx_op_cancel(op);
		if (a->streaming && a->req != NULL)
			api_stream_shutdown(a);
		else
			areq_fail_code(a, SBX_E_SHUTTING_DOWN, "The api is "
			    "shutting down.");
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

		if (a->route->handler == h_egress && a->egress_parsed)
			action = a->egress ? "egress.grant" : "egress.revoke";
		api_store_audit(s->store, a->authed ? a->who.name : NULL,
		    action, a->has_npc ? a->npc.name : NULL, outcome);
	}
	api_metrics_request(&s->metrics, a->route != NULL ? a->route->action :
	    a->label != NULL ? a->label : "unknown", status);
	if (a->exec_started)
		api_metrics_exec_finished(&s->metrics,
		    api_mono_ms() - a->exec_started_ms);
	if (a->sse_counted)
		api_metrics_sse(&s->metrics, -1);
	snprintf(st, sizeof(st), "%d", status);
	snprintf(ms, sizeof(ms), "%lld",
	    (long long)(api_mono_ms() - a->started_ms));
	log_info("request", "action", a->route != NULL ? a->route->action :
	    "none", "principal", a->authed ? a->who.name : "-", "npc",
	    a->has_npc ? a->npc.name : "-", "status", st, "outcome", outcome,
	    "ms", ms, NULL);
	if (a->exec_counted && a->lim != NULL && a->lim->execs > 0)
		a->lim->execs--;
	if (a->fileop_counted && a->lim != NULL && a->lim->fileops > 0)
		a->lim->fileops--;
	api_execs_areq_end(a);
	if (a->ping != NULL)
		event_free(a->ping);
	if (a->chunk != NULL)
		evbuffer_free(a->chunk);
	json_decref(a->body);
	free(a->path);
	if (a->stdin_data != NULL) {
		sodium_memzero(a->stdin_data, a->stdin_len);
		free(a->stdin_data);
	}
	areq_unlink(a);
	s->inflight--;
	free(a);
	drain_check(s);
}

static const char *
reason_phrase(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 414: return "URI Too Long";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return NULL;
	}
}

/* Sends obj (stolen) as the JSON reply; the request is not finished here. */
static void
send_json(struct evhttp_request *req, int status, json_t *obj)
{
	struct evbuffer *out = NULL;
	char *text = NULL;

	if (obj == NULL || (text = json_dumps(obj, JSON_COMPACT)) == NULL ||
	    (out = evbuffer_new()) == NULL) {
		evhttp_send_error(req, 500, NULL);
		goto done;
	}
	evbuffer_add(out, text, strlen(text));
	evbuffer_add(out, "\n", 1);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", SBX_CT_JSON);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Cache-Control", "no-store");
	evhttp_send_reply(req, status, reason_phrase(status), out);
done:
	free(text);
	if (out != NULL)
		evbuffer_free(out);
	json_decref(obj);
}

void
areq_reply_json(struct areq *a, int status, json_t *obj)
{
	if (a->req != NULL)
		send_json(a->req, status, obj);
	else
		json_decref(obj);
	a->req = NULL;
	areq_finish(a, status, "ok");
}

static json_t *
error_json(const char *code, const char *message)
{
	return sbx_wire_error_encode(code, message);
}

void
areq_fail(struct areq *a, const struct sbx_err *err)
{
	struct evkeyvalq *h;
	int status = sbx_err_http_status(err);

	if (status == 500 && sbx_err_is_set(err) &&
	    strcmp(err->code, SBX_E_INTERNAL) != 0)
		log_warn("unmapped error code", "code", err->code, NULL);
	if (a->req != NULL) {
		h = evhttp_request_get_output_headers(a->req);
		if (status == 401)
			evhttp_add_header(h, "WWW-Authenticate", "Bearer");
		if (strcmp(err->code, SBX_E_TOO_MANY) == 0)
			evhttp_add_header(h, "Retry-After", "1");
		send_json(a->req, status, error_json(err->code,
		    err->message[0] != '\0' ? err->message : err->code));
		a->req = NULL;
	}
	areq_finish(a, status, err->code);
}

void
areq_fail_broker(struct areq *a, const struct sbx_err *err)
{
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

static json_t *
opt_ms(int64_t v)
{
	return v != 0 ? json_integer(v) : json_null();
}

static json_t *
npc_json(const struct api_npc *n)
{
	return json_pack("{s:s,s:s,s:s,s:o,s:b,s:o,s:o,s:I}", "name", n->name,
	    "owner", n->owner, "sandbox_id", n->sandbox_id, "image",
	    n->image[0] != '\0' ? json_string(n->image) : json_null(),
	    "egress", n->egress, "egress_by", n->egress_by[0] != '\0' ?
	    json_string(n->egress_by) : json_null(), "egress_at",
	    opt_ms(n->egress_at), "created_at", (json_int_t)n->created_at);
}

json_t *
api_status_json(const struct areq *a, const struct sbx_status *st)
{
	int absent = st->state == SBX_STATE_ABSENT;

	return json_pack("{s:s,s:s,s:s,s:s,s:o,s:b,s:b,s:o,s:o,s:o}",
	    "npc", a->npc.name, "owner", a->npc.owner, "sandbox_id",
	    a->npc.sandbox_id, "state", sbx_state_name(st->state),
	    "image", absent || st->image[0] == '\0' ? json_null() :
	    json_string(st->image), "egress", absent ? 0 : st->egress,
	    "egress_granted", a->npc.egress, "created_at",
	    opt_ms(st->created_at_ms), "last_used_at",
	    opt_ms(st->last_used_at_ms), "stop_reason",
	    st->stop_reason[0] != '\0' && !absent ?
	    json_string(st->stop_reason) : json_null());
}

/* 0 when every member of obj is in allowed; else fails a and returns -1. */
static int
only_members(struct areq *a, json_t *obj, const char *const *allowed)
{
	const char *k;
	json_t *v;
	size_t i;

	json_object_foreach(obj, k, v) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(allowed[i], k) == 0)
				break;
		if (allowed[i] == NULL) {
			areq_fail_code(a, SBX_E_UNKNOWN_FIELD, "Member \"%.64s\" "
			    "is not accepted here.", k);
			return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Handlers                                                            */

static void
h_whoami(struct areq *a)
{
	areq_reply_json(a, 200, json_pack("{s:s,s:s}", "name", a->who.name,
	    "role", api_role_name(a->who.role)));
}

static void
h_npc_create(struct areq *a)
{
	static const char *const allowed[] = { "name", "owner", NULL };
	struct api_principal owner;
	struct api_npc n;
	struct sbx_err err;
	json_t *name, *ow;
	int r;

	sbx_err_clear(&err);
	if (only_members(a, a->body, allowed) == -1)
		return;
	name = json_object_get(a->body, "name");
	if (!json_is_string(name)) {
		areq_fail_code(a, name == NULL ? SBX_E_BAD_REQUEST :
		    SBX_E_WRONG_TYPE, "Member \"name\" must be a string.");
		return;
	}
	owner = a->who;
	if ((ow = json_object_get(a->body, "owner")) != NULL) {
		if (!json_is_string(ow)) {
			areq_fail_code(a, SBX_E_WRONG_TYPE, "Member \"owner\" "
			    "must be a string.");
			return;
		}
		if (strcmp(json_string_value(ow), a->who.name) != 0) {
			if (a->who.role != API_ROLE_OPERATOR) {
				areq_fail_code(a, SBX_E_FORBIDDEN, "Only an "
				    "operator can create an NPC for someone "
				    "else.");
				return;
			}
			r = api_store_principal_get(a->s->store,
			    json_string_value(ow), &owner, &err);
			if (r == -1) {
				areq_fail(a, &err);
				return;
			}
			if (r == 0 || owner.revoked_at != 0) {
				areq_fail_code(a, SBX_E_NOT_FOUND, "No active "
				    "principal has that name.");
				return;
			}
		}
	}
	if (!api_npc_name_valid(json_string_value(name)) ||
	    strlen(json_string_value(name)) != json_string_length(name)) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, "An NPC name must match "
		    "[a-z0-9][a-z0-9-]{0,40}.");
		return;
	}
	if (api_store_npc_create(a->s->store, json_string_value(name),
	    owner.id, &n, &err) == -1) {
		areq_fail(a, &err);
		return;
	}
	a->npc = n;
	a->has_npc = 1;
	areq_reply_json(a, 201, npc_json(&n));
}

static void
npc_list_add(void *arg, const struct api_npc *n)
{
	json_array_append_new(arg, npc_json(n));
}

static void
h_npc_list(struct areq *a)
{
	struct sbx_err err;
	json_t *arr;

	sbx_err_clear(&err);
	if ((arr = json_array()) == NULL) {
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	if (api_store_npc_list(a->s->store, a->who.role == API_ROLE_OPERATOR ?
	    0 : a->who.id, npc_list_add, arr, &err) == -1) {
		json_decref(arr);
		areq_fail(a, &err);
		return;
	}
	areq_reply_json(a, 200, arr);
}

static void
status_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	areq_reply_json(a, 200, api_status_json(a, st));
}

static void
ensure_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;
	struct sbx_err e2;

	sbx_err_clear(&e2);
	if (err != NULL && a->slot_claimed &&
	    api_store_sandbox_release(a->s->store, a->npc.id, &e2) == -1)
		log_warn("cannot give a sandbox slot back", "npc", a->npc.name,
		    NULL);
	if (err == NULL && a->set_image &&
	    api_store_npc_set_image(a->s->store, a->npc.name, a->npc.image,
	    &e2) == -1)
		log_warn("cannot remember the NPC's image", "npc", a->npc.name,
		    NULL);
	status_done(arg, err, st);
}

/*
 * max_sandboxes_per_player: the NPC's sandbox takes one of its owner's
 * slots before the broker is asked, so a burst of ensures cannot pass the
 * cap. Operators are exempt (their ensures are recorded, never refused).
 * Returns 0, or -1 having answered (429 too_many, 500).
 */
static int
claim_slot(struct areq *a)
{
	long long max = a->who.role == API_ROLE_OPERATOR ? 0 :
	    a->s->cfg->max_sandboxes_per_player;
	struct sbx_err err;
	int r;

	sbx_err_clear(&err);
	r = api_store_sandbox_claim(a->s->store, &a->npc, max,
	    &a->slot_claimed, &err);
	if (r == 1)
		return 0;
	if (r == 0)
		areq_fail_code(a, SBX_E_TOO_MANY, "%s already has %lld "
		    "sandboxes, the most one player may have "
		    "(max_sandboxes_per_player); delete one with DELETE "
		    "/api/v1/npcs/NPC/sandbox, or ask an operator.",
		    a->npc.owner, max);
	else
		areq_fail(a, &err);
	return -1;
}

static void
h_ensure(struct areq *a)
{
	static const char *const allowed[] = { "image", NULL };
	struct sbx_spec spec;
	struct sbx_err err;
	json_t *img;

	sbx_err_clear(&err);
	memset(&spec, 0, sizeof(spec));
	if (a->body != NULL) {
		if (json_object_get(a->body, "egress") != NULL) {
			if (a->who.role != API_ROLE_OPERATOR)
				areq_fail_code(a, SBX_E_FORBIDDEN,
				    EGRESS_FORBIDDEN, a->npc.name);
			else
				areq_fail_code(a, SBX_E_UNKNOWN_FIELD, "Egress "
				    "is set with PUT /api/v1/npcs/%s/egress.",
				    a->npc.name);
			return;
		}
		if (only_members(a, a->body, allowed) == -1)
			return;
		img = json_object_get(a->body, "image");
		if (img != NULL && !json_is_string(img)) {
			areq_fail_code(a, SBX_E_WRONG_TYPE, "Member \"image\" "
			    "must be a string.");
			return;
		}
		if (img != NULL) {
			if (json_string_length(img) == 0 ||
			    json_string_length(img) >= sizeof(a->npc.image) ||
			    strlen(json_string_value(img)) !=
			    json_string_length(img)) {
				areq_fail_code(a, SBX_E_BAD_REQUEST, "Member "
				    "\"image\" must be an image name.");
				return;
			}
			snprintf(a->npc.image, sizeof(a->npc.image), "%s",
			    json_string_value(img));
			a->set_image = 1;
		}
	}
	/* The image asked for once stays the NPC's image: a later ensure
	 * without one (or an egress change) must not fall back to the
	 * default and replace the container. */
	spec.image = a->npc.image[0] != '\0' ? a->npc.image : NULL;
	/* Egress comes from the stored grant, never from the caller. */
	spec.egress = a->npc.egress;
	if (claim_slot(a) == -1)
		return;
	a->op = a->s->driver->ops->ensure(a->s->driver, a->npc.sandbox_id,
	    &spec, ensure_done, a, &err);
	if (a->op == NULL) {
		if (a->slot_claimed)
			api_store_sandbox_release(a->s->store, a->npc.id, &err);
		areq_fail_broker(a, &err);
	}
}

static void
status_usage_done(void *arg, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct areq *a = arg;
	json_t *o;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	o = api_status_json(a, st);
	if (o != NULL)
		json_object_set_new(o, "usage", sbx_usage_json(&st->usage));
	areq_reply_json(a, 200, o);
}

/* ?usage=1: the broker counts /work (one helper exec, adr/0017); returns
 * 1 when started or answered, 0 when the flag is absent or 0. */
static int
status_usage_start(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct sbx_err err;
	int on;

	sbx_err_clear(&err);
	if ((on = sbx_query_flag(evhttp_uri_get_query(uri), SBX_QUERY_USAGE,
	    &err)) == 0)
		return 0;
	if (on < 0) {
		areq_fail(a, &err);
		return 1;
	}
	if (a->s->driver->ops->status_usage == NULL) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, "This api's driver cannot "
		    "count /work usage.");
		return 1;
	}
	a->op = a->s->driver->ops->status_usage(a->s->driver,
	    a->npc.sandbox_id, status_usage_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
	return 1;
}

static void
h_status(struct areq *a)
{
	struct sbx_err err;

	if (status_usage_start(a))
		return;
	sbx_err_clear(&err);
	a->op = a->s->driver->ops->status(a->s->driver, a->npc.sandbox_id,
	    status_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

static void
done_reply(struct areq *a, const struct sbx_err *err, const char *state)
{
	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	areq_reply_json(a, 200, json_pack("{s:s,s:s,s:s}", "npc", a->npc.name,
	    "sandbox_id", a->npc.sandbox_id, "state", state));
}

static void
destroy_done(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;
	struct sbx_err e2;

	sbx_err_clear(&e2);
	if (err == NULL &&
	    api_store_sandbox_release(a->s->store, a->npc.id, &e2) == -1)
		log_warn("cannot give a sandbox slot back", "npc", a->npc.name,
		    NULL);
	done_reply(arg, err, "absent");
}

static void
h_destroy(struct areq *a)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	a->op = a->s->driver->ops->destroy(a->s->driver, a->npc.sandbox_id,
	    destroy_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

static void
stop_done(void *arg, const struct sbx_err *err)
{
	done_reply(arg, err, "stopped");
}

static void
h_stop(struct areq *a)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	if (a->body != NULL && json_object_size(a->body) != 0) {
		areq_fail_code(a, SBX_E_UNKNOWN_FIELD, "stop takes no members.");
		return;
	}
	a->op = a->s->driver->ops->stop(a->s->driver, a->npc.sandbox_id,
	    stop_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

/* ?path= decoded once and checked (SPEC §4 path rules). */
static int
query_path(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct sbx_err err;

	sbx_err_clear(&err);
	if (sbx_query_path(evhttp_uri_get_query(uri), SBX_QUERY_PATH, &a->path,
	    NULL, &err) == -1) {
		areq_fail(a, &err);
		return -1;
	}
	return 0;
}

static void
write_done(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	areq_reply_json(a, 200, json_pack("{s:s,s:s}", "npc", a->npc.name,
	    "path", a->path));
}

int
api_fileop_admit(struct areq *a)
{
	if (a->lim == NULL)
		return 0;
	if (a->lim->fileops >= (unsigned long long)a->s->cfg->max_file_ops) {
		areq_fail_code(a, SBX_E_TOO_MANY, "You already run %lld file "
		    "operations; try again when one has ended.",
		    a->s->cfg->max_file_ops);
		return -1;
	}
	a->lim->fileops++;
	a->fileop_counted = 1;
	return 0;
}

static void
h_write(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct evbuffer *in = evhttp_request_get_input_buffer(a->req);
	struct sbx_err err;
	char *mode = NULL;

	sbx_err_clear(&err);
	if (query_path(a) == -1)
		return;
	switch (sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_MODE,
	    &mode, NULL, &err)) {
	case -1:
		areq_fail(a, &err);
		return;
	case 1:
		if (sbx_wire_mode_decode(mode, &a->mode, &err) == -1) {
			free(mode);
			areq_fail(a, &err);
			return;
		}
		free(mode);
		break;
	default:
		break;
	}
	if (api_fileop_admit(a) == -1)
		return;
	/* The body was buffered by evhttp (at most file_size_max bytes); the
	 * driver drains it towards the broker. */
	a->op = a->s->driver->ops->write(a->s->driver, a->npc.sandbox_id,
	    a->path, a->mode, in, write_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

static void
list_done(void *arg, const struct sbx_err *err, const struct sbx_dirent *ents,
    size_t n, int truncated)
{
	struct areq *a = arg;
	char cursor[SBX_WIRE_CURSOR_MAX + 1];
	json_t *o;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	/* As the broker (sbx_wire.h): the cursor is the base64url of the
	 * last name. */
	if (!a->list_obj) {
		if ((o = sbx_wire_dirents_encode(ents, n)) == NULL) {
			areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
			return;
		}
		if (truncated && n > 0 && sbx_wire_cursor_encode(
		    ents[n - 1].name, cursor, sizeof(cursor)) > 0) {
			evhttp_add_header(evhttp_request_get_output_headers(a->req),
			    "Sbx-List-Truncated", "true");
			evhttp_add_header(evhttp_request_get_output_headers(a->req),
			    "Sbx-List-Cursor", cursor);
		}
		areq_reply_json(a, 200, o);
		return;
	}
	if ((o = sbx_wire_list_encode(ents, n, truncated)) == NULL) {
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	areq_reply_json(a, 200, o);
}

static void
h_list(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct sbx_list_page page;
	struct sbx_err err;
	unsigned char name[256];
	char *cur = NULL;
	size_t len = 0, nl = 0;
	int r;

	sbx_err_clear(&err);
	if (query_path(a) == -1)
		return;
	/* ?cursor= (adr/0013): present, even empty, asks for the page object. */
	r = sbx_query_param(evhttp_uri_get_query(uri), SBX_QUERY_CURSOR, &cur,
	    &len, &err);
	if (r == -1) {
		areq_fail(a, &err);
		return;
	}
	a->list_obj = r == 1;
	if (len > 0 && (len > 344 || sodium_base642bin(name, sizeof(name) - 1,
	    cur, len, NULL, &nl, NULL, sodium_base64_VARIANT_URLSAFE_NO_PADDING) !=
	    0 || nl == 0 || memchr(name, '\0', nl) != NULL ||
	    memchr(name, '/', nl) != NULL)) {
		free(cur);
		areq_fail_code(a, SBX_E_BAD_REQUEST, "Parameter \"cursor\" is not a "
		    "cursor of a listing (pass the \"cursor\" of the last page, or "
		    "nothing to start).");
		return;
	}
	free(cur);
	name[nl] = '\0';
	page.after = nl > 0 ? (const char *)name : NULL;
	page.limit = API_LIST_MAX_ENTRIES;
	if (api_fileop_admit(a) == -1)
		return;
	a->op = a->s->driver->ops->list(a->s->driver, a->npc.sandbox_id,
	    a->path, &page, list_done, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

static void
egress_ensured(void *arg, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct areq *a = arg;
	json_t *obj;

	a->op = NULL;
	if (err != NULL) {
		/* The grant is stored and applies at the next ensure. */
		areq_fail_broker(a, err);
		return;
	}
	obj = api_status_json(a, st);
	json_object_set_new(obj, "applied", json_true());
	areq_reply_json(a, 200, obj);
}

static void
egress_status(void *arg, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct areq *a = arg;
	struct sbx_spec spec;
	struct sbx_err e2;
	json_t *obj;

	a->op = NULL;
	sbx_err_clear(&e2);
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	if (st->state == SBX_STATE_ABSENT) {
		obj = api_status_json(a, st);
		json_object_set_new(obj, "applied", json_false());
		areq_reply_json(a, 200, obj);
		return;
	}
	/* Changing egress replaces the container through ensure; the volume,
	 * and so /work, survives (SPEC §4). */
	memset(&spec, 0, sizeof(spec));
	spec.egress = a->egress;
	spec.image = a->npc.image[0] != '\0' ? a->npc.image : NULL;
	a->op = a->s->driver->ops->ensure(a->s->driver, a->npc.sandbox_id,
	    &spec, egress_ensured, a, &e2);
	if (a->op == NULL)
		areq_fail_broker(a, &e2);
}

static void
h_egress(struct areq *a)
{
	static const char *const allowed[] = { "enabled", NULL };
	struct sbx_err err;
	json_t *en;

	sbx_err_clear(&err);
	if (only_members(a, a->body, allowed) == -1)
		return;
	en = json_object_get(a->body, "enabled");
	if (!json_is_boolean(en)) {
		areq_fail_code(a, en == NULL ? SBX_E_BAD_REQUEST :
		    SBX_E_WRONG_TYPE, "Member \"enabled\" must be true or "
		    "false.");
		return;
	}
	a->egress = json_is_true(en);
	a->egress_parsed = 1;
	if (api_store_npc_set_egress(a->s->store, a->npc.name, a->egress,
	    a->who.name, &err) == -1 ||
	    api_store_npc_get(a->s->store, a->npc.name, &a->npc, &err) != 1) {
		if (!sbx_err_is_set(&err))
			sbx_err_set(&err, SBX_E_NOT_FOUND, "No NPC named %s.",
			    a->npc.name);
		areq_fail(a, &err);
		return;
	}
	log_info(a->egress ? "egress granted" : "egress revoked", "npc",
	    a->npc.name, "by", a->who.name, NULL);
	a->op = a->s->driver->ops->status(a->s->driver, a->npc.sandbox_id,
	    egress_status, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

static void
h_metrics(struct areq *a)
{
	struct evbuffer *out = NULL;

	if ((out = evbuffer_new()) == NULL ||
	    api_metrics_render(&a->s->metrics, out, a->s->inflight) == -1) {
		if (out != NULL)
			evbuffer_free(out);
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(a->req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	evhttp_add_header(evhttp_request_get_output_headers(a->req),
	    "Cache-Control", "no-store");
	evhttp_send_reply(a->req, 200, "OK", out);
	evbuffer_free(out);
	a->req = NULL;
	areq_finish(a, 200, "ok");
}

/* ------------------------------------------------------------------ */
/* Limits                                                              */

static struct api_limit *
limit_get(struct api_server *s, int64_t principal_id)
{
	struct api_limit *l;

	for (l = s->limits; l != NULL; l = l->next)
		if (l->principal_id == principal_id)
			return l;
	if ((l = calloc(1, sizeof(*l))) == NULL)
		return NULL;
	l->principal_id = principal_id;
	l->tokens = (double)s->cfg->rate_per_minute;
	l->refilled_ms = api_mono_ms();
	l->next = s->limits;
	s->limits = l;
	return l;
}

/*
 * Token bucket: rate_per_minute tokens, refilled continuously. Returns 0
 * when the request may go on, else the seconds until one token is back.
 */
static long
limit_take(struct api_server *s, struct api_limit *l)
{
	double cap = (double)s->cfg->rate_per_minute;
	double per_ms = cap / 60000.0;
	int64_t now = api_mono_ms();
	long wait;

	l->tokens += (double)(now - l->refilled_ms) * per_ms;
	if (l->tokens > cap)
		l->tokens = cap;
	l->refilled_ms = now;
	if (l->tokens >= 1.0) {
		l->tokens -= 1.0;
		return 0;
	}
	wait = (long)((1.0 - l->tokens) / per_ms / 1000.0) + 1;
	return wait > 0 ? wait : 1;
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                            */

/* The key of an Authorization value "Bearer KEY" (scheme in any case,
 * RFC 9110 §11.1), or NULL. */
static const char *
bearer_key(const char *h, size_t *len)
{
	const char *k, *e;

	if (h == NULL)
		return NULL;
	while (*h == ' ' || *h == '\t')
		h++;
	if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
		return NULL;
	k = h + 6;
	while (*k == ' ' || *k == '\t')
		k++;
	e = k + strlen(k);
	while (e > k && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	if (e == k)
		return NULL;
	*len = (size_t)(e - k);
	return k;
}

/*
 * The events route's credential: the bearer key when an Authorization
 * header is present (then a ticket is not looked at), else ?ticket= of
 * that exec (api_execs_ticket_auth). Cheap enough for the gate.
 */
static int
events_auth(struct api_server *s, const char *target, const char *authz,
    int final, struct api_principal *who)
{
	const char *key;
	size_t keylen = 0;

	(void)final;
	if (authz != NULL) {
		key = bearer_key(authz, &keylen);
		return key != NULL ? api_store_authenticate(s->store, key,
		    keylen, who) : 0;
	}
	return api_execs_ticket_auth(s, target, who);
}

/*
 * 1 when rest matches a route suffix; a '*' segment of the pattern matches
 * one path segment of [a-z0-9]{1,39}, copied to id (capacity 40) when id is
 * not NULL.
 */
static int
suffix_match(const char *pat, const char *rest, char *id)
{
	const char *star = strchr(pat, '*');
	size_t pre, n;

	if (star == NULL)
		return strcmp(pat, rest) == 0;
	pre = (size_t)(star - pat);
	if (strncmp(pat, rest, pre) != 0)
		return 0;
	rest += pre;
	for (n = 0; (rest[n] >= 'a' && rest[n] <= 'z') ||
	    (rest[n] >= '0' && rest[n] <= '9'); n++)
		;
	if (n == 0 || n > 39 || strcmp(star + 1, rest + n) != 0)
		return 0;
	if (id != NULL) {
		memcpy(id, rest, n);
		id[n] = '\0';
	}
	return 1;
}

/* Splits path into an NPC name and a suffix; NULL route when none matches. */
static const struct api_route *
route_find(const char *path, int method, char *npc, size_t npccap,
    int *path_known, char *id)
{
	const struct api_route *r;
	const char *rest = NULL, *slash;
	size_t n;

	*path_known = 0;
	npc[0] = '\0';
	if (strncmp(path, NPCS_PATH "/", sizeof(NPCS_PATH)) == 0) {
		rest = path + sizeof(NPCS_PATH);
		slash = strchr(rest, '/');
		if (slash == NULL)
			return NULL;
		n = (size_t)(slash - rest);
		if (n == 0 || n >= npccap)
			n = 0;
		memcpy(npc, rest, n);
		npc[n] = '\0';
		rest = slash;
	}
	for (r = routes; r->suffix != NULL; r++) {
		if (rest != NULL ? !(r->flags & R_NPC) ||
		    !suffix_match(r->suffix, rest, id) :
		    (r->flags & R_NPC) || strcmp(r->suffix, path) != 0)
			continue;
		*path_known = 1;
		if (r->method == method)
			return r;
	}
	return NULL;
}

static void
allow_header(struct evhttp_request *req, const char *path)
{
	const struct api_route *r;
	const char *rest = NULL;
	char allow[64] = "";
	size_t used;

	if (strncmp(path, NPCS_PATH "/", sizeof(NPCS_PATH)) == 0 &&
	    (rest = strchr(path + sizeof(NPCS_PATH), '/')) == NULL)
		return;
	for (r = routes; r->suffix != NULL; r++) {
		if (rest != NULL ? !(r->flags & R_NPC) ||
		    !suffix_match(r->suffix, rest, NULL) :
		    (r->flags & R_NPC) || strcmp(r->suffix, path) != 0)
			continue;
		used = strlen(allow);
		snprintf(allow + used, sizeof(allow) - used, "%s%s",
		    used > 0 ? ", " : "", method_name(r->method));
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
	    allow);
}

/*
 * CORS (Fetch standard §3.2), off unless cors_origins lists the request's
 * Origin: then the answer names it. Returns 1 when req was a preflight
 * and has been answered.
 */
static int
cors(struct api_server *s, struct evhttp_request *req)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	const char *origin = evhttp_find_header(in, "Origin");
	char **o;

	if (origin == NULL || s->cfg->cors_origins == NULL)
		return 0;
	for (o = s->cfg->cors_origins; *o != NULL; o++)
		if (strcmp(*o, origin) == 0)
			break;
	if (*o == NULL)
		return 0;
	evhttp_add_header(out, "Access-Control-Allow-Origin", origin);
	evhttp_add_header(out, "Vary", "Origin");
	evhttp_add_header(out, "Access-Control-Expose-Headers", "Location");
	if (evhttp_request_get_command(req) != EVHTTP_REQ_OPTIONS ||
	    evhttp_find_header(in, "Access-Control-Request-Method") == NULL)
		return 0;
	evhttp_add_header(out, "Access-Control-Allow-Methods",
	    "GET, POST, PUT, DELETE");
	evhttp_add_header(out, "Access-Control-Allow-Headers",
	    "Authorization, Content-Type, Last-Event-ID");
	evhttp_add_header(out, "Access-Control-Max-Age", "600");
	evhttp_send_reply(req, 204, "No Content", NULL);
	return 1;
}

/* Everything under /api/v1 and /metrics needs a principal. */
static int
path_needs_auth(const char *path)
{
	return strncmp(path, API_PREFIX "/", sizeof(API_PREFIX)) == 0 ||
	    strcmp(path, METRICS_PATH) == 0;
}

/*
 * Who asks on method + path: the route's own hook (api_auth_fn) when the
 * route has one, else the bearer API key of authz. target is the request
 * target with its query; final 0 in the gate, 1 in api_dispatch. Returns 1
 * with *who, 0 when not authenticated, -1 on a database error.
 */
static int
api_authenticate(struct api_server *s, int method, const char *path,
    const char *target, const char *authz, int final,
    struct api_principal *who)
{
	const struct api_route *r;
	char npc[API_NPC_NAME_MAX + 2];
	const char *key;
	size_t keylen = 0;
	api_auth_fn hook;
	int known;

	r = route_find(path, method, npc, sizeof(npc), &known, NULL);
	if ((hook = route_auth(r)) != NULL)
		return hook(s, target != NULL ? target : "", authz, final, who);
	key = bearer_key(authz, &keylen);
	return key != NULL ? api_store_authenticate(s->store, key, keylen,
	    who) : 0;
}

/*
 * The gate's check (common/sbx_gate.h), before any body byte is read: the
 * credential (the same lookup as api_dispatch's step 1) and the route's
 * body cap. A database error lets the head through with cap 0, so a body
 * is still refused unread and dispatch answers 500.
 */
static enum sbx_gate_verdict
gate_check(void *arg, const struct sbx_gate_head *h, const char *path,
    uint64_t *cap)
{
	struct api_server *s = arg;
	const struct api_route *r;
	struct api_principal who;
	char npc[API_NPC_NAME_MAX + 2], *target = NULL, *authz = NULL;
	int known, ok = 1;

	*cap = 0;
	if (path == NULL)
		return SBX_GATE_PASS;   /* api_dispatch: 400 */
	/* A CORS preflight carries no credential by design (Fetch §4.8);
	 * api_dispatch answers it (cors) or asks for a key; no body. */
	if (h->type == EVHTTP_REQ_OPTIONS)
		return SBX_GATE_PASS;
	r = route_find(path, h->type, npc, sizeof(npc), &known, NULL);
	if (path_needs_auth(path)) {
		target = strndup(h->target, h->tlen);
		/* A copy of exactly alen bytes: the value may hold a NUL, and
		 * strndup would then allocate less than the alen bytes the
		 * memzero below clears (a heap overrun fuzz_api_http found). */
		if (h->auth != NULL && (authz = malloc(h->alen + 1)) != NULL) {
			memcpy(authz, h->auth, h->alen);
			authz[h->alen] = '\0';
		}
		ok = target == NULL || (h->auth != NULL && authz == NULL) ? 0 :
		    api_authenticate(s, h->type, path, target, authz, 0, &who);
		sodium_memzero(&who, sizeof(who));
		if (authz != NULL)
			sodium_memzero(authz, h->alen + 1);
		free(authz);
		free(target);
		if (ok == 0)
			return SBX_GATE_UNAUTHORIZED;
		if (ok == -1)
			return SBX_GATE_PASS;
	}
	if (r != NULL && (r->flags & R_RAW))
		*cap = (uint64_t)s->cfg->file_size_max;
	else if (r != NULL && (r->flags & (R_JSON | R_JSON_OPT)))
		*cap = (uint64_t)s->cfg->body_max;
	return SBX_GATE_PASS;
}

/* ------------------------------------------------------------------ */
/* Wake on use: a stopped sandbox is started before it is used         */

/* Exec, file read, write and list use a sandbox; the others do not. */
static int
route_wakes(const struct api_route *r)
{
	return r->handler == api_h_exec || r->handler == api_h_read ||
	    r->handler == h_write || r->handler == h_list;
}

static void
wake_ensured(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;

	(void)st;
	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	a->route->handler(a);
}

/* The sandbox's state: stopped by the idle reaper (stop_reason "idle") is
 * ensured first, as adr/0006 says the api does, so an idle NPC's next exec
 * runs. Running, absent, or stopped on purpose (POST .../stop, oom, exited)
 * goes straight on: the handler's broker call answers 404 or 409. */
static void
wake_status(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;
	struct sbx_spec spec;
	struct sbx_err e2;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	if (st == NULL || st->state != SBX_STATE_STOPPED ||
	    strcmp(st->stop_reason, "idle") != 0) {
		a->route->handler(a);
		return;
	}
	sbx_err_clear(&e2);
	memset(&spec, 0, sizeof(spec));
	/* The same spec as PUT .../sandbox without a body: the NPC's image
	 * and its stored egress grant, so nothing is replaced. */
	spec.image = a->npc.image[0] != '\0' ? a->npc.image : NULL;
	spec.egress = a->npc.egress;
	log_info("waking a stopped sandbox", "npc", a->npc.name, "reason",
	    st->stop_reason, NULL);
	a->op = a->s->driver->ops->ensure(a->s->driver, a->npc.sandbox_id,
	    &spec, wake_ensured, a, &e2);
	if (a->op == NULL)
		areq_fail_broker(a, &e2);
}

static void
wake_then_run(struct areq *a)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	a->op = a->s->driver->ops->status(a->s->driver, a->npc.sandbox_id,
	    wake_status, a, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}

static void
api_dispatch(struct evhttp_request *req, void *arg)
{
	struct api_server *s = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	enum sbx_gate_verdict refused;
	struct sbx_err err;
	json_error_t jerr;
	struct areq *a;
	char npc[API_NPC_NAME_MAX + 2], ra[24];
	size_t blen;
	long wait;
	int known, r;

	if (cors(s, req))
		return;
	if ((a = calloc(1, sizeof(*a))) == NULL) {
		evhttp_send_error(req, 500, NULL);
		return;
	}
	sbx_err_clear(&err);
	a->s = s;
	a->req = req;
	a->started_ms = api_mono_ms();
	a->next = s->live;
	if (s->live != NULL)
		s->live->prev = a;
	s->live = a;
	s->inflight++;

	/* What the gate refused before any body byte was read: a head too
	 * long or too slow, too many connections, framing (after the
	 * credential verified), an ambiguous or a bad credential. A body over
	 * the cap is answered at step 6, in order. */
	refused = sbx_gate_refused(s->gate, req);
	if (refused != SBX_GATE_PASS && refused != SBX_GATE_TOO_LARGE) {
		sbx_gate_refusal(refused, &err);
		if (refused == SBX_GATE_UNAUTHORIZED)
			snprintf(err.message, sizeof(err.message), "A valid API "
			    "key is required (Authorization: Bearer KEY).");
		areq_fail(a, &err);
		return;
	}
	if (path == NULL) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, "Bad request target.");
		return;
	}
	if (strcmp(path, "/healthz") == 0 &&
	    evhttp_request_get_command(req) == EVHTTP_REQ_GET) {
		a->label = "healthz";
		areq_reply_json(a, 200, json_pack("{s:s}", "status",
		    s->draining ? "draining" : "ok"));
		return;
	}
	if (s->draining) {
		areq_fail_code(a, SBX_E_SHUTTING_DOWN, "The api is shutting "
		    "down.");
		return;
	}
	/* 1. Authentication first, so nobody unauthenticated learns which
	 * routes or NPCs exist. */
	if (path_needs_auth(path)) {
		r = api_authenticate(s, evhttp_request_get_command(req), path,
		    evhttp_request_get_uri(req), evhttp_find_header(
		    evhttp_request_get_input_headers(req), SBX_HDR_AUTHORIZATION),
		    1, &a->who);
		if (r == -1) {
			areq_fail_code(a, SBX_E_INTERNAL, "The api's database "
			    "failed.");
			return;
		}
		if (r == 0) {
			/* Logged, not audited: without a key anybody could
			 * grow the audit table. */
			areq_fail_code(a, SBX_E_UNAUTHORIZED, "A valid API key "
			    "is required (Authorization: Bearer KEY).");
			return;
		}
		a->authed = 1;
	}
	/* 2. Route and method. */
	a->route = route_find(path, evhttp_request_get_command(req), npc,
	    sizeof(npc), &known, a->exec_id);
	if (a->route == NULL) {
		if (known) {
			allow_header(req, path);
			areq_fail_code(a, SBX_E_METHOD_NOT_ALLOWED, "Method not "
			    "allowed on this path.");
		} else
			areq_fail_code(a, SBX_E_NOT_FOUND, "No such route.");
		return;
	}
	if ((a->route->flags & R_AUTH) && !a->authed) {
		areq_fail_code(a, SBX_E_UNAUTHORIZED, "A valid API key is "
		    "required.");
		return;
	}
	/* 3. Requests per minute. */
	if (a->authed) {
		if ((a->lim = limit_get(s, a->who.id)) == NULL) {
			areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
			return;
		}
		if ((wait = limit_take(s, a->lim)) > 0) {
			snprintf(ra, sizeof(ra), "%ld", wait);
			evhttp_add_header(evhttp_request_get_output_headers(req),
			    "Retry-After", ra);
			api_metrics_rejected(&s->metrics, 0);
			areq_fail_code(a, SBX_E_RATE_LIMITED, "Too many "
			    "requests: at most %lld per minute.",
			    s->cfg->rate_per_minute);
			return;
		}
	}
	/* 4. The NPC exists and is the caller's (or the caller operates):
	 * another player's NPC answers exactly like an absent one. */
	if (a->route->flags & R_NPC) {
		r = api_npc_name_valid(npc) ? api_store_npc_get(s->store, npc,
		    &a->npc, &err) : 0;
		if (r == -1) {
			areq_fail(a, &err);
			return;
		}
		if (r == 0 || (a->who.role != API_ROLE_OPERATOR &&
		    a->npc.owner_id != a->who.id)) {
			memset(&a->npc, 0, sizeof(a->npc));
			areq_fail_code(a, SBX_E_NOT_FOUND, "You have no NPC "
			    "with that name.");
			return;
		}
		a->has_npc = 1;
	}
	/* 5. Operator-only actions. */
	if ((a->route->flags & R_OPERATOR) &&
	    a->who.role != API_ROLE_OPERATOR) {
		if (a->route->handler == h_egress)
			areq_fail_code(a, SBX_E_FORBIDDEN, EGRESS_FORBIDDEN,
			    a->npc.name);
		else
			areq_fail_code(a, SBX_E_FORBIDDEN, "Only an operator "
			    "may do this.");
		return;
	}
	/* 6. Body size and syntax. The gate refused a body over the cap
	 * unread. */
	blen = refused == SBX_GATE_TOO_LARGE ? SIZE_MAX :
	    evbuffer_get_length(in);
	if (!(a->route->flags & (R_JSON | R_JSON_OPT | R_RAW)) && blen > 0) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, "This route takes no "
		    "body.");
		return;
	}
	if (!(a->route->flags & R_RAW) && blen > (size_t)s->cfg->body_max) {
		areq_fail_code(a, SBX_E_TOO_LARGE, "The request body is larger "
		    "than %lld bytes.", s->cfg->body_max);
		return;
	}
	if ((a->route->flags & R_RAW) && blen > (size_t)s->cfg->file_size_max) {
		areq_fail_code(a, SBX_E_TOO_LARGE, "The file is larger than "
		    "%lld bytes.", s->cfg->file_size_max);
		return;
	}
	if ((a->route->flags & (R_JSON | R_JSON_OPT)) &&
	    (blen > 0 || (a->route->flags & R_JSON))) {
		a->body = json_loadb((const char *)evbuffer_pullup(in, -1), blen,
		    JSON_REJECT_DUPLICATES, &jerr);
		if (a->body == NULL || !json_is_object(a->body)) {
			areq_fail_code(a, SBX_E_BAD_REQUEST, "The body must be "
			    "one JSON object.");
			return;
		}
	}
	/* 7. A stopped sandbox is started before it is used. */
	if (a->has_npc && route_wakes(a->route)) {
		wake_then_run(a);
		return;
	}
	a->route->handler(a);
}

/* ------------------------------------------------------------------ */
/* Server life                                                         */

struct api_server *
api_server_new(struct event_base *base, const struct api_config *cfg,
    struct sbx_driver *driver, struct sbx_err *err)
{
	struct api_server *s = NULL;
	struct sockaddr_storage ss;
	ev_socklen_t sl = sizeof(ss);
	char host[256];
	const char *colon;
	long long maxbody;
	evutil_socket_t fd;

	if (api_config_check(cfg, err) == -1)
		return NULL;
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		return NULL;
	}
	s->base = base;
	s->cfg = cfg;
	s->driver = driver;
	s->now_ms = wall_ms;
	if ((s->store = api_store_open(cfg->state_dir, err)) == NULL)
		goto fail;
	if (api_execs_open(s, err) == -1)
		goto fail;
	if (api_console_init(s) == -1) {
		sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		goto fail;
	}
	if ((s->http = evhttp_new(base)) == NULL ||
	    (s->drain_ev = evtimer_new(base, drain_fire, s)) == NULL ||
	    (s->grace_ev = evtimer_new(base, grace_over, s)) == NULL) {
		sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		goto fail;
	}
	maxbody = cfg->file_size_max > cfg->body_max ? cfg->file_size_max :
	    cfg->body_max;
	/* A backstop only: the gate refuses bodies over the route's cap with
	 * JSON, after authentication, before they are read. */
	evhttp_set_max_body_size(s->http, maxbody);
	{
		struct sbx_gate_limits lim = {
			.head_max = (size_t)cfg->head_max,
			.headers_max = (unsigned)cfg->headers_max,
			.header_timeout_ms = cfg->header_timeout,
			.max_connections = (unsigned)cfg->max_connections,
		};

		if ((s->gate = sbx_gate_new(base, s->http, &lim, gate_check, s,
		    err)) == NULL)
			goto fail;
	}
	evhttp_set_timeout(s->http, (int)((cfg->request_timeout + 999) / 1000));
	/* Every method reaches api_dispatch (JSON 404/405), never libevent's
	 * HTML 501. */
	evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
	    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH | EVHTTP_REQ_TRACE |
	    EVHTTP_REQ_CONNECT);
	evhttp_set_gencb(s->http, api_dispatch, s);
	colon = strrchr(cfg->listen, ':');
	snprintf(host, sizeof(host), "%.*s", (int)(colon - cfg->listen),
	    cfg->listen);
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	if ((s->bound = evhttp_bind_socket_with_handle(s->http, host,
	    (ev_uint16_t)atoi(colon + 1))) == NULL) {
		sbx_err_set(err, SBX_E_CONFIG, "Cannot listen on %s: %s.",
		    cfg->listen, strerror(errno));
		goto fail;
	}
	fd = evhttp_bound_socket_get_fd(s->bound);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return s;
fail:
	api_server_free(s);
	return NULL;
}

int
api_server_port(const struct api_server *s)
{
	return s->port;
}

unsigned
api_server_inflight(const struct api_server *s)
{
	return s->inflight;
}

void
api_server_set_clock(struct api_server *s, int64_t (*now)(void))
{
	s->now_ms = now != NULL ? now : wall_ms;
}

void
api_server_drain(struct api_server *s, void (*done)(void *), void *arg)
{
	struct timeval tv;
	char n[16];

	if (s->draining)
		return;
	s->draining = 1;
	s->drain_done = done;
	s->drain_arg = arg;
	if (s->bound != NULL) {
		evhttp_del_accept_socket(s->http, s->bound);
		s->bound = NULL;
	}
	/* Viewers of resource execs end now: they resume later. */
	api_execs_drain(s);
	snprintf(n, sizeof(n), "%u", s->inflight);
	log_info("draining", "in_flight", n, NULL);
	tv.tv_sec = s->cfg->shutdown_grace / 1000;
	tv.tv_usec = (s->cfg->shutdown_grace % 1000) * 1000;
	if (s->inflight > 0)
		evtimer_add(s->grace_ev, &tv);
	drain_check(s);
}

void
api_server_free(struct api_server *s)
{
	struct api_limit *l;
	struct areq *a;

	if (s == NULL)
		return;
	/* Requests still open: stop their driver work; evhttp_free below
	 * closes their connections. */
	while ((a = s->live) != NULL) {
		struct sbx_op *op = a->op;

		a->op = NULL;
		sbx_op_cancel(op);
		if (a->conn != NULL)
			sbx_gate_watch(s->gate, a->conn, NULL, NULL);
		a->req = NULL;
		a->route = NULL;    /* no audit row for an abandoned request */
		areq_finish(a, 503, SBX_E_SHUTTING_DOWN);
	}
	api_execs_close(s);
	free(s->console_csp);
	if (s->http != NULL)
		evhttp_free(s->http);   /* frees every bound gate connection */
	sbx_gate_free(s->gate);
	if (s->drain_ev != NULL)
		event_free(s->drain_ev);
	if (s->grace_ev != NULL)
		event_free(s->grace_ev);
	while ((l = s->limits) != NULL) {
		s->limits = l->next;
		free(l);
	}
	api_store_close(s->store);
	free(s);
}
