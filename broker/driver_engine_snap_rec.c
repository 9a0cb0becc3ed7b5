/* driver_engine_snap_rec.c - the engine driver's start-up look for snapshot copies a killed broker cut (adr/0068): sandboxes left paused are unpaused, copy containers (io.sbx.role=snapshot-copy) and the volumes they were filling removed; snapshots are never touched. Calls the runtime-call and op lifecycle layers only. */
#include "driver_engine_int.h"
#include "driver_engine_snap.h"

/* ---------- broker start: what a broker that died mid-copy left ---------- */

/* A background op (no caller): sandboxes left paused are unpaused, copy
 * containers left behind are removed with the volume they were filling
 * (a snapshot or a new /work that never completed: its op never answered
 * success). Snapshots themselves are never touched here. */
struct eop_snaprec {
	struct eop op;
	json_t *todo;                 /* [["POST"|"DELETE", path], ...] */
	size_t i;
	unsigned unpaused, removed;
};

static void snaprec_next(struct eop *op);

static void
snaprec_fini(struct eop *op)
{
	json_decref(((struct eop_snaprec *)op)->todo);
}

static const struct eng_kind snaprec_kind = {
	.name = "snapshot reconcile",
	.fail = eng_fail_quiet,
	.fini = snaprec_fini,
};

static void
snaprec_done(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_snaprec *r = (struct eop_snaprec *)op;
	json_t *step = json_array_get(r->todo, r->i);

	(void)body;
	if (err == NULL && status >= 200 && status < 300) {
		if (strcmp(json_string_value(json_array_get(step, 0)), "POST") == 0)
			r->unpaused++;
		else
			r->removed++;
	} else {
		log_warn("snapshot leftover not cleared", "path",
		    json_string_value(json_array_get(step, 1)), NULL);
	}
	r->i++;
	snaprec_next(op);
}

static void
snaprec_next(struct eop *op)
{
	struct eop_snaprec *r = (struct eop_snaprec *)op;
	json_t *step = json_array_get(r->todo, r->i);
	char a[16], b[16];

	if (step != NULL) {
		eng_call(op, json_string_value(json_array_get(step, 0)),
		    json_string_value(json_array_get(step, 1)), NULL, snaprec_done);
		return;
	}
	if (r->unpaused + r->removed > 0) {
		snprintf(a, sizeof(a), "%u", r->unpaused);
		snprintf(b, sizeof(b), "%u", r->removed);
		log_info("snapshot copies cut by a broker restart cleared",
		    "unpaused", a, "removed", b, NULL);
	}
	eng_op_release(op);
}

static void
snaprec_add(json_t *todo, const char *method, const char *fmt, const char *name)
{
	char path[320];

	snprintf(path, sizeof(path), fmt, name);
	json_array_append_new(todo, json_pack("[s,s]", method, path));
}

static void
snaprec_listed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_snaprec *r = (struct eop_snaprec *)op;
	json_t *c, *labels, *m, *vols;
	const char *id, *role;
	size_t i, j;

	if (err != NULL || status != 200 || !json_is_array(body)) {
		log_warn("snapshot leftovers not looked for", "error",
		    err != NULL ? err->message : "container list refused", NULL);
		eng_op_release(op);
		return;
	}
	if ((r->todo = json_array()) == NULL || (vols = json_array()) == NULL) {
		eng_op_release(op);
		return;
	}
	json_array_foreach(body, i, c) {
		labels = json_object_get(c, "Labels");
		id = eng_jstr(c, "Id");
		if (!eng_managed(labels) || !eng_name_ok(id, 128))
			continue;
		role = eng_label(labels, L_ROLE);
		if (role != NULL && strcmp(role, "snapshot-copy") == 0) {
			snaprec_add(r->todo, "DELETE", API "/containers/%s?force=1&v=0",
			    id);
			json_array_foreach(json_object_get(c, "Mounts"), j, m)
				if (strcmp(eng_jstr(m, "Destination"), "/to") == 0 &&
				    eng_name_ok(eng_jstr(m, "Name"), 190))
					snaprec_add(vols, "DELETE", API "/volumes/%s",
					    eng_jstr(m, "Name"));
			continue;
		}
		/* Nothing else of sbx pauses a container (E2B's pause stops). */
		if (strcmp(eng_jstr(c, "State"), "paused") == 0)
			snaprec_add(r->todo, "POST", API "/containers/%s/unpause", id);
	}
	/* The volumes after their containers (in use until then). */
	json_array_extend(r->todo, vols);
	json_decref(vols);
	r->i = 0;
	snaprec_next(op);
}

void
eng_snap_reconcile(struct engine *e)
{
	struct sbx_err err;
	struct eop *op;
	char filt[128];

	if ((op = eng_op_new(e, &snaprec_kind, NULL, sizeof(struct eop_snaprec),
	    &err)) == NULL) {
		log_warn("snapshot leftovers not looked for", "error", err.message,
		    NULL);
		return;
	}
	eng_urlencode("{\"label\":[\"" L_MANAGED "=true\"]}", filt, sizeof(filt));
	eng_callf(op, "GET", NULL, snaprec_listed,
	    API "/containers/json?all=1&filters=%s", filt);
}
