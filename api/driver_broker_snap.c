/* driver_broker_snap.c - the broker-client's snapshot ops (adr/0068): snapshot_create, _list, _delete, _copy as the broker API's snapshot routes (proto/broker-api.md "Snapshots"); one JSON answer or none each; calls the op's life (driver_broker_op.c) only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "driver_broker_int.h"
#include "sbx_path.h"
#include "sbx_proto.h"

/* create, list: cb.json with the answer's JSON object as text. */
static void
finish_snap_json(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;
	json_t *root = dbk_op_answer_json(b, terr, &e);
	char *text = NULL;

	if (root != NULL && !json_is_object(root))
		dbk_error_malformed(&e);
	else if (root != NULL && (text = json_dumps(root, JSON_COMPACT)) == NULL)
		sbx_err_oom(&e);
	b->cb.json(b->arg, dbk_err_or_null(&e), text);
	free(text);
	json_decref(root);
}

static const struct bkind kind_snap_json = { .finish = finish_snap_json };

static struct bop *
json_op(struct sbx_driver *drv, const char *id, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b;

	if ((b = dbk_op_new((struct bdriver *)drv, &kind_snap_json, id, arg,
	    err)) == NULL)
		return NULL;
	b->cb.json = cb;
	return b;
}

static struct bop *
done_op(struct sbx_driver *drv, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b;

	if ((b = dbk_op_new((struct bdriver *)drv, &dbk_kind_done, id, arg,
	    err)) == NULL)
		return NULL;
	b->cb.done = cb;
	return b;
}

struct sbx_op *
dbk_snapshot_create(struct sbx_driver *drv, const char *id,
    const struct sbx_snapshot_req *req, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b;
	json_t *obj;

	obj = json_pack("{s:s, s:s, s:I}", "name", req->name, "owner",
	    req->owner != NULL ? req->owner : "", "max_bytes",
	    (json_int_t)req->max_bytes);
	if (obj == NULL)
		return sbx_err_oom(err), NULL;
	if ((b = json_op(drv, id, cb, arg, err)) == NULL) {
		json_decref(obj);
		return NULL;
	}
	return dbk_op_start_id(b, "POST", SBX_PATH_SNAPSHOTS_SUFFIX, obj, err);
}

struct sbx_op *
dbk_snapshot_list(struct sbx_driver *drv, const char *id, const char *owner,
    sbx_json_cb cb, void *arg, struct sbx_err *err)
{
	struct bop *b;
	char path[256], *enc = NULL;
	struct sbx_op *op;

	if ((b = json_op(drv, id, cb, arg, err)) == NULL)
		return NULL;
	if (id != NULL)
		return dbk_op_start_id(b, "GET", SBX_PATH_SNAPSHOTS_SUFFIX, NULL,
		    err);
	if (owner != NULL && (enc = sbx_query_encode(owner,
	    strnlen(owner, 64))) == NULL) {
		dbk_op_free(b);
		return sbx_err_oom(err), NULL;
	}
	snprintf(path, sizeof(path), SBX_PATH_SNAPSHOTS "%s%s",
	    enc != NULL ? "?owner=" : "", enc != NULL ? enc : "");
	free(enc);
	op = dbk_op_start(b, "GET", path, NULL, NULL, 0, err);
	return op;
}

struct sbx_op *
dbk_snapshot_delete(struct sbx_driver *drv, const char *id, const char *name,
    sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct bop *b;
	char suffix[80];

	if ((b = done_op(drv, id, cb, arg, err)) == NULL)
		return NULL;
	/* name: [a-z0-9-] (sbx_call checked it), nothing to encode. */
	snprintf(suffix, sizeof(suffix), SBX_PATH_SNAPSHOTS_SUFFIX "?name=%s",
	    name);
	return dbk_op_start_id(b, "DELETE", suffix, NULL, err);
}

struct sbx_op *
dbk_snapshot_copy(struct sbx_driver *drv, const char *id, const char *from,
    const char *name, sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct bop *b;
	json_t *obj;

	obj = json_pack("{s:s, s:o}", "from", from, "snapshot",
	    name != NULL ? json_string(name) : json_null());
	if (obj == NULL)
		return sbx_err_oom(err), NULL;
	if ((b = done_op(drv, id, cb, arg, err)) == NULL) {
		json_decref(obj);
		return NULL;
	}
	return dbk_op_start_id(b, "POST", SBX_PATH_COPY_SUFFIX, obj, err);
}
