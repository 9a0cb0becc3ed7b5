/* driver_broker_plain.c - the broker-client ops answered by one JSON document or none (ensure, status, egress, stop, destroy, list_sandboxes, health): each kind's row and its decoding (sbx_wire.h); calls the op's life (driver_broker_op.c) and the error wording. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "driver_broker_int.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

/*
 * Each answer is decoded once by sbx_wire.h; a body the decoder refuses is
 * an answer the api cannot read (dbk_error_malformed).
 */

/* ensure, status, status_usage: cb.status. */
static void
finish_status(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;
	struct sbx_status st;
	json_t *root = dbk_op_answer_json(b, terr, &e);

	if (root != NULL && sbx_wire_status_decode(root, &st, &e) == -1)
		dbk_error_malformed(&e);
	b->cb.status(b->arg, dbk_err_or_null(&e), sbx_err_is_set(&e) ? NULL : &st);
	json_decref(root);
}

static const struct bkind kind_status = { .finish = finish_status };

/* stop, destroy, write, write_stream: cb.done; the body is not read. */
static void
finish_done(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;

	(void)dbk_op_answer_error(b, terr, &e);
	b->cb.done(b->arg, dbk_err_or_null(&e));
}

const struct bkind dbk_kind_done = { .finish = finish_done };

/* list_sandboxes: cb.sandboxes. */
static void
finish_sandboxes(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;
	struct sbx_status *sts = NULL;
	size_t n = 0;
	json_t *root = dbk_op_answer_json(b, terr, &e);
	int ok;

	if (root != NULL && sbx_wire_sandboxes_decode(root, &sts, &n, &e) == -1 &&
	    strcmp(e.code, SBX_E_INTERNAL) != 0)
		dbk_error_malformed(&e);
	ok = !sbx_err_is_set(&e);
	b->cb.sandboxes(b->arg, dbk_err_or_null(&e), ok ? sts : NULL, ok ? n : 0);
	free(sts);
	json_decref(root);
}

static const struct bkind kind_sandboxes = { .finish = finish_sandboxes };

/* health: cb.health. */
static void
finish_health(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;
	struct sbx_health h;
	json_t *root = dbk_op_answer_json(b, terr, &e);

	if (root != NULL && sbx_wire_health_decode(root, &h, &e) == -1)
		dbk_error_malformed(&e);
	b->cb.health(b->arg, dbk_err_or_null(&e), sbx_err_is_set(&e) ? NULL : &h);
	json_decref(root);
}

static const struct bkind kind_health = { .finish = finish_health };

/* egress_stats: cb.json with the answer's JSON text (adr/0026). */
static void
finish_json(struct bop *b, const struct sbx_err *terr)
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

static const struct bkind kind_json = { .finish = finish_json };

/*
 * The callbacks are stored before the request starts so a failing start
 * frees the op; a start never calls back synchronously (sbx_http_client.h).
 */
static struct sbx_op *
status_op(struct sbx_driver *drv, const char *method, const char *id,
    const char *suffix, json_t *obj, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b;

	if ((b = dbk_op_new((struct bdriver *)drv, &kind_status, id, arg, err)) ==
	    NULL) {
		json_decref(obj);
		return NULL;
	}
	b->cb.status = cb;
	return dbk_op_start_id(b, method, suffix, obj, err);
}

struct sbx_op *
dbk_ensure(struct sbx_driver *drv, const char *id, const struct sbx_spec *spec,
    sbx_status_cb cb, void *arg, struct sbx_err *err)
{
	return status_op(drv, "PUT", id, "", sbx_wire_spec_encode(spec), cb,
	    arg, err);
}

struct sbx_op *
dbk_status(struct sbx_driver *drv, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	return status_op(drv, "GET", id, "", NULL, cb, arg, err);
}

/* GET /v1/sandboxes/{id}?usage=1: the status with its "usage" member. */
struct sbx_op *
dbk_status_usage(struct sbx_driver *drv, const char *id, sbx_status_cb cb,
    void *arg, struct sbx_err *err)
{
	return status_op(drv, "GET", id, "?" SBX_QUERY_USAGE "=1", NULL, cb,
	    arg, err);
}

/* GET /v1/sandboxes/{id}/egress (adr/0026). */
struct sbx_op *
dbk_egress_stats(struct sbx_driver *drv, const char *id, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b;

	if ((b = dbk_op_new((struct bdriver *)drv, &kind_json, id, arg,
	    err)) == NULL)
		return NULL;
	b->cb.json = cb;
	return dbk_op_start_id(b, "GET", "/egress", NULL, err);
}

static struct sbx_op *
done_op(struct sbx_driver *drv, const char *method, const char *id,
    const char *suffix, sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct bop *b;

	if ((b = dbk_op_new((struct bdriver *)drv, &dbk_kind_done, id, arg,
	    err)) == NULL)
		return NULL;
	b->cb.done = cb;
	return dbk_op_start_id(b, method, suffix, NULL, err);
}

struct sbx_op *
dbk_stop(struct sbx_driver *drv, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return done_op(drv, "POST", id, SBX_PATH_STOP_SUFFIX, cb, arg, err);
}

struct sbx_op *
dbk_destroy(struct sbx_driver *drv, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return done_op(drv, "DELETE", id, "", cb, arg, err);
}

struct sbx_op *
dbk_list_sandboxes(struct sbx_driver *drv, sbx_sandboxes_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b = NULL;
	struct bdriver *d = (struct bdriver *)drv;

	if ((b = dbk_op_new(d, &kind_sandboxes, NULL, arg, err)) == NULL)
		return NULL;
	b->cb.sandboxes = cb;
	return dbk_op_start(b, "GET", SBX_PATH_SANDBOXES, NULL, NULL, 0, err);
}

struct sbx_op *
dbk_health(struct sbx_driver *drv, sbx_health_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b = NULL;
	struct bdriver *d = (struct bdriver *)drv;

	if ((b = dbk_op_new(d, &kind_health, NULL, arg, err)) == NULL)
		return NULL;
	b->cb.health = cb;
	return dbk_op_start(b, "GET", SBX_PATH_HEALTH, NULL, NULL, 0, err);
}
