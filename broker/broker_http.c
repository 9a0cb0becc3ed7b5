/* broker_http.c - the broker API's route table and its sandbox, health and metrics handlers; the handlers reach the request layer through broker_int.h, the request layer reaches them only through the table (SPEC §4, proto/broker-api.md, adr/0036). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "agent.h"
#include "sbx_egress.h"
#include "broker_egress.h"
#include "broker_int.h"
#include "broker_metrics.h"
#include "broker_pool_metrics.h"
#include "broker_state.h"
#include "driver_engine.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_usage.h"
#include "sbx_wire.h"

static int h_list_sandboxes(struct breq *, struct sbx_err *);
static int h_ensure(struct breq *, struct sbx_err *);
static int h_status(struct breq *, struct sbx_err *);
static int h_destroy(struct breq *, struct sbx_err *);
static int h_stop(struct breq *, struct sbx_err *);
static int h_health(struct breq *, struct sbx_err *);
static int h_metrics(struct breq *, struct sbx_err *);
static int h_egress(struct breq *, struct sbx_err *);

/* The broker API (proto/broker-api.md); dispatch tries rows in this order. */
const struct route broker_routes[] = {
	{ { EVHTTP_REQ_GET, "/v1/sandboxes" }, "list_sandboxes",
	    h_list_sandboxes, 0 },
	{ { EVHTTP_REQ_PUT, "/v1/sandboxes/{id}" }, "ensure", h_ensure,
	    R_ID | R_JSON | R_SERIAL },
	{ { EVHTTP_REQ_GET, "/v1/sandboxes/{id}" }, "status", h_status, R_ID },
	{ { EVHTTP_REQ_DELETE, "/v1/sandboxes/{id}" }, "destroy", h_destroy,
	    R_ID | R_SERIAL },
	{ { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/exec" }, "exec", h_exec,
	    R_ID | R_JSON },
	{ { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/session" }, "session",
	    h_session, R_ID | R_JSON },
	{ { EVHTTP_REQ_GET, "/v1/sandboxes/{id}/files" }, "read", h_read, R_ID },
	{ { EVHTTP_REQ_PUT, "/v1/sandboxes/{id}/files" }, "write", h_write,
	    R_ID | R_RAW },
	{ { EVHTTP_REQ_GET, "/v1/sandboxes/{id}/list" }, "list", h_list, R_ID },
	{ { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/stop" }, "stop", h_stop,
	    R_ID | R_JSON | R_SERIAL },
	{ { EVHTTP_REQ_GET, "/v1/sandboxes/{id}/egress" }, "egress", h_egress, R_ID },
	/* Snapshots of /work (broker_snap.c, adr/0068). */
	{ { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/snapshots" }, "snapshot_create",
	    h_snap_create, R_ID | R_JSON | R_SERIAL },
	{ { EVHTTP_REQ_GET, "/v1/sandboxes/{id}/snapshots" }, "snapshot_list",
	    h_snap_list, R_ID },
	{ { EVHTTP_REQ_DELETE, "/v1/sandboxes/{id}/snapshots" }, "snapshot_delete",
	    h_snap_delete, R_ID | R_SERIAL },
	{ { EVHTTP_REQ_POST, "/v1/sandboxes/{id}/copy" }, "snapshot_copy",
	    h_snap_copy, R_ID | R_JSON | R_SERIAL },
	{ { EVHTTP_REQ_GET, "/v1/snapshots" }, "snapshot_list_all",
	    h_snap_list_all, 0 },
	{ { EVHTTP_REQ_GET, "/v1/health" }, "health", h_health, 0 },
	{ { EVHTTP_REQ_GET, "/metrics" }, "metrics", h_metrics, 0 },
};
const size_t broker_nroutes = sizeof(broker_routes) / sizeof(broker_routes[0]);


/* ------------------------------------------------------------------ */
/* A status: recorded by the operation that learnt it, then rendered     */

/* The state row of id into *row: row, or NULL when there is none (or it
 * cannot be read). */
static const struct broker_row *
state_row(struct broker_server *s, const char *id, struct broker_row *row)
{
	struct sbx_err err;

	return broker_state_get(s->state, id, row, &err) == 1 ? row : NULL;
}

/*
 * What the driver just reported (st) written where the state row of a
 * managed sandbox disagrees: stopped behind our back (oom, its init
 * exited), so status and the reaper's destroy_after see why; running or
 * gone behind our back (a start or remove a killed broker had asked for
 * ended after its restart's reconciliation, test_faults.py). A write that
 * fails is logged only. Returns the row as it was before (in *row), or
 * NULL when the broker keeps none.
 */
static const struct broker_row *
status_record(struct broker_server *s, const struct sbx_status *st,
    struct broker_row *row)
{
	struct sbx_err err;

	if (state_row(s, st->id, row) == NULL)
		return NULL;
	if (st->state == SBX_STATE_STOPPED &&
	    strcmp(row->state, "running") == 0 &&
	    broker_state_stopped(s->state, st->id, st->stop_reason[0] ?
	    st->stop_reason : "exited", sbx_wall_ms(), &err) == -1)
		log_error("state write failed", "id", st->id, "error",
		    err.message, NULL);
	if (st->state == SBX_STATE_RUNNING &&
	    strcmp(row->state, "running") != 0 &&
	    broker_state_adopt(s->state, st, row->volume, sbx_wall_ms(),
	    &err) == -1)
		log_error("state write failed", "id", st->id, "error",
		    err.message, NULL);
	if (st->state == SBX_STATE_ABSENT &&
	    strcmp(row->state, "absent") != 0 &&
	    broker_state_absent(s->state, st->id, &err) == -1)
		log_error("state write failed", "id", st->id, "error",
		    err.message, NULL);
	return row;
}

/*
 * The status object of st (sbx_wire.h) with what the broker knows better
 * than the driver, from row (NULL: none): the last use, and why it
 * stopped when the broker saw it stop, unless the driver says "lost"
 * (its node went after it stopped: newer news). Writes nothing.
 */
static json_t *
status_json(const struct sbx_status *st, const struct broker_row *row)
{
	struct sbx_status out = *st;

	if (row != NULL) {
		out.last_used_at_ms = row->last_used_at_ms;
		if (row->stop_reason[0] != '\0' &&
		    st->state == SBX_STATE_STOPPED &&
		    strcmp(row->state, "stopped") == 0 &&
		    strcmp(st->stop_reason, "lost") != 0)
			snprintf(out.stop_reason, sizeof(out.stop_reason), "%s",
			    row->stop_reason);
	}
	return sbx_wire_status_encode(&out, 0);
}

/* ------------------------------------------------------------------ */
/* Handlers                                                            */

static void
ensure_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct breq *b = arg;
	struct broker_row row;
	struct sbx_err serr;
	char volume[192];

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	sbx_engine_volume_name(b->s->cfg->name_prefix, st->id, volume,
	    sizeof(volume));
	if (broker_state_put(b->s->state, st, volume, sbx_wall_ms(), &serr) == -1) {
		/* Not recorded (a full state dir: storage_full, 503): the
		 * sandbox exists in the runtime, a retry records it. */
		log_error("state write failed", "id", b->id, "error",
		    serr.message, NULL);
		breq_fail(b, &serr);
		return;
	}
	broker_state_touch(b->s->state, b->id, sbx_wall_ms(), &serr);
	/* No proxy any more (egress off or full): its counts went with its
	 * volume (adr/0027). */
	if (b->spec.egress_allow == NULL || strcmp(b->spec.egress_allow, "*") == 0)
		broker_metrics_egress_forget(b->s->metrics, b->id);
	breq_reply_json(b, 200, status_json(st, state_row(b->s, st->id, &row)),
	    "ok");
}

static int
ensure_start(struct breq *b, struct sbx_err *err)
{
	struct broker_server *s = b->s;
	struct broker_row row;
	int found, n;

	b->sbx->ending = NULL;   /* a new life: its ends have their own reasons */
	if ((found = broker_state_get(s->state, b->id, &row, err)) == -1)
		return -1;
	/* An absent row (container gone while we were away) is a new one
	 * for the limit: it does not count in broker_state_count. */
	if (!found || strcmp(row.state, "absent") == 0) {
		if ((n = broker_state_count(s->state, err)) == -1)
			return -1;
		if ((long long)n + s->pending_new >= s->cfg->max_sandboxes)
			return sbx_err_set(err, SBX_E_TOO_MANY, "The broker "
			    "already keeps its maximum of %lld sandboxes.",
			    s->cfg->max_sandboxes);
		s->pending_new++;
		b->holds_new = 1;
	}
	b->op = sbx_call_ensure(s->driver, b->id, &b->spec, ensure_done,
	    b, err);
	return b->op == NULL ? -1 : 0;
}

/* "egress_allow" (adr/0026): with egress true only, checked with
 * common/sbx_egress.h, joined into b->egress_allow for the driver. */
static int
egress_allow_parse(struct breq *b, struct sbx_err *err)
{
	json_t *v = json_object_get(b->body, "egress_allow");

	if (v == NULL)
		return 0;
	if (!b->spec.egress)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"egress_allow\" "
		    "needs \"egress\": true.");
	if (egress_allow_check(v, "egress_allow", err) != 0)
		return -1;
	if ((b->egress_allow = egress_allow_join(v)) == NULL)
		return sbx_err_oom(err);
	b->spec.egress_allow = b->egress_allow;
	return 0;
}

/* The ensure body (proto/broker-api.md) into b->spec (sbx_wire.h), within
 * the broker's ceilings. */
static int
ensure_parse(struct breq *b, struct sbx_err *err)
{
	const struct broker_config *cfg = b->s->cfg;

	if (broker_body_object(b, sbx_wire_spec_fields, 1, &b->body,
	    err) == -1 ||
	    sbx_wire_spec_decode(b->body, (const char *const *)b->s->allowlist,
	    &b->spec, err) == -1 || egress_allow_parse(b, err) == -1 ||
	    broker_within(b->spec.memory_bytes, cfg->memory_max,
	    "memory_bytes", err) == -1 ||
	    broker_within(b->spec.nano_cpus, cfg->nano_cpus_max, "nano_cpus",
	    err) == -1 ||
	    broker_within(b->spec.pids, cfg->pids_max, "pids", err) == -1)
		return -1;
	return 0;
}

static int
h_ensure(struct breq *b, struct sbx_err *err)
{
	if (ensure_parse(b, err) == -1)
		return -1;
	breq_enqueue(b, ensure_start);
	return 0;
}

/* st with the broker's /work quota and figure of b's sandbox
 * (adr/0057), for a status reply. */
static struct sbx_status
status_with_quota(struct breq *b, const struct sbx_status *st)
{
	struct sbx_status out = *st;

	broker_quota_status(b->s->quota, b->id, sbx_mono_ms(), &out.quota);
	return out;
}

static void
status_done(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct breq *b = arg;
	struct broker_row row;
	struct sbx_status q;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	q = status_with_quota(b, st);
	breq_reply_json(b, 200, status_json(&q, status_record(b->s, st, &row)),
	    "ok");
}

/* GET /v1/sandboxes/{id}/egress (adr/0026): the proxy's counts and its
 * last denials, as the driver read them from its log. */
static void
egress_done(void *arg, const struct sbx_err *err, const char *text)
{
	struct breq *b = arg;
	json_t *obj;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if ((obj = json_loads(text, 0, NULL)) == NULL) {
		breq_fail_code(b, SBX_E_INTERNAL, SBX_MSG_OOM);
		return;
	}
	json_object_set_new(obj, "id", json_string(b->id));
	broker_egress_note(b->s->metrics, b->s->state, b->id, text);
	breq_reply_json(b, 200, obj, "ok");
}

static int
h_egress(struct breq *b, struct sbx_err *err)
{
	b->op = sbx_call_egress_stats(b->s->driver, b->id, egress_done, b, err);
	return b->op == NULL ? -1 : 0;
}

static void
status_usage_done(void *arg, const struct sbx_err *err,
    const struct sbx_status *st)
{
	struct breq *b = arg;
	struct broker_row row;
	struct sbx_status q;
	json_t *o;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	/* A count of /work is the quota's figure too (adr/0057). */
	if (st->usage.present)
		broker_quota_counted(b->s->quota, b->id, sbx_mono_ms(),
		    st->usage.bytes);
	q = status_with_quota(b, st);
	o = status_json(&q, status_record(b->s, st, &row));
	if (o != NULL)
		json_object_set_new(o, "usage", sbx_usage_json(&st->usage));
	breq_reply_json(b, 200, o, "ok");
}

/* ?usage=1: the status plus /work usage, one helper exec (adr/0017).
 * Returns 1 when it started, 0 without ?usage=1, -1 with err. */
static int
status_usage_start(struct breq *b, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->h.req);
	int on;

	if ((on = sbx_query_flag(evhttp_uri_get_query(uri), SBX_QUERY_USAGE,
	    err)) != 1)
		return on;
	if (!sbx_call_supports(b->s->driver, SBX_CALL_STATUS_USAGE))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "This broker's driver "
		    "cannot count /work usage.");
	b->op = sbx_call_status_usage(b->s->driver, b->id,
	    status_usage_done, b, err);
	return b->op == NULL ? -1 : 1;
}

static int
h_status(struct breq *b, struct sbx_err *err)
{
	int r;

	if ((r = status_usage_start(b, err)) != 0)
		return r < 0 ? -1 : 0;
	b->op = sbx_call_status(b->s->driver, b->id, status_done, b,
	    err);
	return b->op == NULL ? -1 : 0;
}

static void
destroy_done(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;
	struct sbx_status gone;
	struct sbx_err serr;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if (broker_state_delete(b->s->state, b->id, &serr) == -1) {
		/* Gone from the runtime, still recorded: say so (503 when the
		 * state dir is full); destroy is idempotent, a retry ends it. */
		log_error("state write failed", "id", b->id, "error",
		    serr.message, NULL);
		breq_fail(b, &serr);
		return;
	}
	broker_metrics_egress_forget(b->s->metrics, b->id);
	broker_quota_forget(b->s->quota, b->id);
	memset(&gone, 0, sizeof(gone));
	snprintf(gone.id, sizeof(gone.id), "%s", b->id);
	/* Its row is deleted: nothing the broker knows better. */
	breq_reply_json(b, 200, status_json(&gone, NULL), "ok");
}

static int
destroy_start(struct breq *b, struct sbx_err *err)
{
	b->sbx->ending = "The sandbox was destroyed while this ran.";
	b->op = sbx_call_destroy(b->s->driver, b->id, destroy_done, b,
	    err);
	return b->op == NULL ? -1 : 0;
}

static int
h_destroy(struct breq *b, struct sbx_err *err)
{
	(void)err;
	breq_enqueue(b, destroy_start);
	return 0;
}

static void
stop_done(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;
	struct sbx_err serr;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if (broker_state_stopped(b->s->state, b->id, "operator", sbx_wall_ms(),
	    &serr) == -1) {
		/* Stopped but not recorded: 503 storage_full when the state
		 * dir is full; a retry (stopped -> ok) records it. */
		log_error("state write failed", "id", b->id, "error",
		    serr.message, NULL);
		breq_fail(b, &serr);
		return;
	}
	/* The reply is the status object: ask the driver, still in our turn. */
	sbx_err_clear(&serr);
	b->op = sbx_call_status(b->s->driver, b->id, status_done, b,
	    &serr);
	if (b->op == NULL)
		breq_fail(b, &serr);
}

static int
stop_start(struct breq *b, struct sbx_err *err)
{
	b->sbx->ending = "The sandbox was stopped by a stop request while this "
	    "ran; what ran in it ended with it.";
	b->op = sbx_call_stop(b->s->driver, b->id, stop_done, b, err);
	return b->op == NULL ? -1 : 0;
}

static int
h_stop(struct breq *b, struct sbx_err *err)
{
	static const char *const allowed[] = { NULL };

	if (broker_body_object(b, allowed, 1, &b->body, err) == -1)
		return -1;
	breq_enqueue(b, stop_start);
	return 0;
}

static int
status_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sbx_status *)a)->id,
	    ((const struct sbx_status *)b)->id);
}

static void
sandboxes_done(void *arg, const struct sbx_err *err,
    const struct sbx_status *sts, size_t n)
{
	struct breq *b = arg;
	struct sbx_status *sorted = NULL;
	struct broker_row row;
	json_t *arr;
	size_t i;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	if ((arr = json_array()) == NULL) {
		breq_fail_code(b, SBX_E_INTERNAL, SBX_MSG_OOM);
		return;
	}
	if (n > 0 && (sorted = malloc(n * sizeof(*sorted))) == NULL) {
		json_decref(arr);
		breq_fail_code(b, SBX_E_INTERNAL, SBX_MSG_OOM);
		return;
	}
	if (n > 0) {
		memcpy(sorted, sts, n * sizeof(*sorted));
		qsort(sorted, n, sizeof(*sorted), status_cmp);
	}
	for (i = 0; i < n; i++)
		json_array_append_new(arr, status_json(&sorted[i],
		    status_record(b->s, &sorted[i], &row)));
	free(sorted);
	breq_reply_json(b, 200, arr, "ok");
}

static int
h_list_sandboxes(struct breq *b, struct sbx_err *err)
{
	b->op = sbx_call_list_sandboxes(b->s->driver, sandboxes_done,
	    b, err);
	return b->op == NULL ? -1 : 0;
}

static void
health_done(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	struct breq *b = arg;
	struct sbx_health hv;
	int ok = err == NULL && h != NULL && h->ok;

	b->op = NULL;
	memset(&hv, 0, sizeof(hv));
	if (h != NULL)
		hv = *h;
	hv.ok = ok;
	if (err != NULL)
		snprintf(hv.reason, sizeof(hv.reason), "%s", err->message);
	if (err != NULL && broker_is_runtime_code(err->code))
		broker_metrics_runtime_error(b->s->metrics, err->code);
	breq_reply_json(b, 200, sbx_wire_health_encode(&hv, BROKER_VERSION,
	    sbx_call_driver_name(b->s->driver)), ok ? "ok" : "degraded");
}

/* A driver that cannot even start a health check is degraded: still 200. */
static int
h_health(struct breq *b, struct sbx_err *err)
{
	b->op = sbx_call_health(b->s->driver, health_done, b, err);
	if (b->op == NULL)
		health_done(b, err, NULL);
	return 0;
}

static int
h_metrics(struct breq *b, struct sbx_err *err)
{
	struct evbuffer *out = evbuffer_new();
	struct sbx_err serr;
	int running, stopped, absent;

	running = broker_state_count_state(b->s->state, "running", &serr);
	stopped = broker_state_count_state(b->s->state, "stopped", &serr);
	absent = broker_state_count_state(b->s->state, "absent", &serr);
	if (out == NULL || broker_metrics_render(b->s->metrics, out, running,
	    stopped, absent) == -1 || sbx_agent_metrics_render(out) < 0 ||
	    broker_pool_metrics_render(out) < 0) {
		if (out != NULL)
			evbuffer_free(out);
		return sbx_err_oom(err);
	}
	sbx_httpd_header(&b->h, "Content-Type",
	    "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(b->h.req, 200, "OK", out);
	b->h.req = NULL;
	evbuffer_free(out);
	breq_done(b, 200, "ok");
	return 0;
}
