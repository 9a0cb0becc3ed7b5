/* broker_snap.c - the broker API's snapshot handlers (proto/broker-api.md "Snapshots", adr/0068): create, list, delete a snapshot of a sandbox's /work, copy one (or a live /work) into a new sandbox's; reached only through the route table (broker_http.c), calls the request layer and the driver through sbx_call. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>

#include "broker_int.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"

/* A JSON answer of the driver, sent with status ok_status. */
static void
json_done(struct breq *b, const struct sbx_err *err, const char *text,
    int ok_status)
{
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
	breq_reply_json(b, ok_status, obj, "ok");
}

static void
created(void *arg, const struct sbx_err *err, const char *text)
{
	json_done(arg, err, text, 201);
}

static void
listed(void *arg, const struct sbx_err *err, const char *text)
{
	json_done(arg, err, text, 200);
}

static void
done_empty(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;

	b->op = NULL;
	if (err != NULL) {
		breq_fail(b, err);
		return;
	}
	breq_reply_json(b, 200, json_pack("{s:s}", "id", b->id), "ok");
}

/* A string member of b->body, NULL when absent; -1 when not a string. */
static int
opt_str(struct breq *b, const char *key, const char **out, struct sbx_err *err)
{
	json_t *v = json_object_get(b->body, key);

	*out = NULL;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_string(v) || strlen(json_string_value(v)) !=
	    json_string_length(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"%s\" must be a "
		    "string.", key);
	*out = json_string_value(v);
	return 0;
}

static int
create_start(struct breq *b, struct sbx_err *err)
{
	struct sbx_snapshot_req req;
	json_t *mb = json_object_get(b->body, "max_bytes");

	memset(&req, 0, sizeof(req));
	if (opt_str(b, "name", &req.name, err) == -1 ||
	    opt_str(b, "owner", &req.owner, err) == -1)
		return -1;
	if (mb != NULL && (!json_is_integer(mb) || json_integer_value(mb) < 0))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"max_bytes\" "
		    "must be a non-negative integer.");
	req.max_bytes = mb != NULL ? (uint64_t)json_integer_value(mb) : 0;
	b->op = sbx_call_snapshot_create(b->s->driver, b->id, &req, created, b,
	    err);
	return b->op == NULL ? -1 : 0;
}

/* POST /v1/sandboxes/{id}/snapshots {"name","owner","max_bytes"}. */
int
h_snap_create(struct breq *b, struct sbx_err *err)
{
	static const char *const allowed[] = { "name", "owner", "max_bytes",
	    NULL };
	const char *name;

	if (broker_body_object(b, allowed, 0, &b->body, err) == -1 ||
	    opt_str(b, "name", &name, err) == -1)
		return -1;
	/* Refused before the queue: a bad name changes nothing. */
	if (!sbx_snapshot_name_valid(name))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s",
		    SBX_MSG_BAD_SNAPSHOT);
	breq_enqueue(b, create_start);
	return 0;
}

/* GET /v1/sandboxes/{id}/snapshots. */
int
h_snap_list(struct breq *b, struct sbx_err *err)
{
	b->op = sbx_call_snapshot_list(b->s->driver, b->id, NULL, listed, b,
	    err);
	return b->op == NULL ? -1 : 0;
}

/* GET /v1/snapshots?owner=NAME (absent: every owner). */
int
h_snap_list_all(struct breq *b, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->h.req);
	char *owner = NULL;
	int r;

	r = sbx_query_param(evhttp_uri_get_query(uri), "owner", &owner, NULL,
	    err);
	if (r == -1)
		return -1;
	b->op = sbx_call_snapshot_list(b->s->driver, NULL, owner, listed, b,
	    err);
	free(owner);
	return b->op == NULL ? -1 : 0;
}

static int
delete_start(struct breq *b, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(b->h.req);
	char *name = NULL;
	int r;

	r = sbx_query_param(evhttp_uri_get_query(uri), "name", &name, NULL,
	    err);
	if (r == -1)
		return -1;
	b->op = sbx_call_snapshot_delete(b->s->driver, b->id, name, done_empty,
	    b, err);
	free(name);
	return b->op == NULL ? -1 : 0;
}

/* DELETE /v1/sandboxes/{id}/snapshots?name=NAME. */
int
h_snap_delete(struct breq *b, struct sbx_err *err)
{
	(void)err;
	breq_enqueue(b, delete_start);
	return 0;
}

static int
copy_start(struct breq *b, struct sbx_err *err)
{
	const char *from, *snap;

	if (opt_str(b, "from", &from, err) == -1 ||
	    opt_str(b, "snapshot", &snap, err) == -1)
		return -1;
	b->op = sbx_call_snapshot_copy(b->s->driver, b->id, from, snap,
	    done_empty, b, err);
	return b->op == NULL ? -1 : 0;
}

/* POST /v1/sandboxes/{id}/copy {"from": ID, "snapshot": NAME|null}: id's
 * new /work from a snapshot of from, or (no snapshot) from's /work now. */
int
h_snap_copy(struct breq *b, struct sbx_err *err)
{
	static const char *const allowed[] = { "from", "snapshot", NULL };
	const char *from, *snap;

	if (broker_body_object(b, allowed, 0, &b->body, err) == -1 ||
	    opt_str(b, "from", &from, err) == -1 ||
	    opt_str(b, "snapshot", &snap, err) == -1)
		return -1;
	if (!sbx_id_valid(from))
		return sbx_err_bad_id(err);
	if (snap != NULL && !sbx_snapshot_name_valid(snap))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s",
		    SBX_MSG_BAD_SNAPSHOT);
	breq_enqueue(b, copy_start);
	return 0;
}
