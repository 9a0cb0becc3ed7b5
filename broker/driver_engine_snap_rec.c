/* driver_engine_snap_rec.c - the engine driver's start-up look for snapshot copies a killed broker cut (adr/0068): sandboxes left paused are unpaused, copy containers (io.sbx.role=snapshot-copy) and the volumes they were filling removed; snapshots are never touched. A step of reconcile (driver_engine_life.c), run on its op; calls the runtime-call and op lifecycle layers only. */
#include "driver_engine_int.h"
#include "driver_engine_snap.h"

/*
 * State kept in the reconcile op's fields that the proxy step has finished
 * with (driver_engine_proxy.c runs before): rvols holds the steps
 * [["POST"|"DELETE", path], ...], pi walks them, rgone and pgone count
 * unpauses and removals (their own logs were written already), rthen is
 * where reconcile goes on.
 */

static void snaprec_next(struct eop *op);

static void
snaprec_done(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_reconcile *rc = rco(op);
	json_t *step = json_array_get(rc->rvols, rc->pi);

	(void)body;
	if (err == NULL && status >= 200 && status < 300) {
		if (strcmp(json_string_value(json_array_get(step, 0)), "POST") == 0)
			rc->rgone++;
		else
			rc->pgone++;
	} else {
		log_warn("snapshot leftover not cleared", "path",
		    json_string_value(json_array_get(step, 1)), NULL);
	}
	rc->pi++;
	snaprec_next(op);
}

static void
snaprec_next(struct eop *op)
{
	struct eop_reconcile *rc = rco(op);
	json_t *step = json_array_get(rc->rvols, rc->pi);
	char a[16], b[16];

	if (step != NULL) {
		eng_call(op, json_string_value(json_array_get(step, 0)),
		    json_string_value(json_array_get(step, 1)), NULL, snaprec_done);
		return;
	}
	if (rc->rgone + rc->pgone > 0) {
		snprintf(a, sizeof(a), "%u", rc->rgone);
		snprintf(b, sizeof(b), "%u", rc->pgone);
		log_info("snapshot copies cut by a broker restart cleared",
		    "unpaused", a, "removed", b, NULL);
	}
	rc->rthen(op);
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
	struct eop_reconcile *rc = rco(op);
	json_t *c, *labels, *m, *todo, *vols;
	const char *id, *role;
	size_t i, j;

	if (err != NULL || status != 200 || !json_is_array(body)) {
		/* Not worth failing the start: the next start looks again. */
		log_warn("snapshot leftovers not looked for", "error",
		    err != NULL ? err->message : "container list refused", NULL);
		rc->rthen(op);
		return;
	}
	todo = json_array();
	vols = json_array();
	json_array_foreach(body, i, c) {
		labels = json_object_get(c, "Labels");
		id = eng_jstr(c, "Id");
		if (todo == NULL || vols == NULL || !eng_managed(labels) ||
		    !eng_name_ok(id, 128))
			continue;
		role = eng_label(labels, L_ROLE);
		if (role != NULL && strcmp(role, "snapshot-copy") == 0) {
			snaprec_add(todo, "DELETE", API "/containers/%s?force=1&v=0",
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
			snaprec_add(todo, "POST", API "/containers/%s/unpause", id);
	}
	/* The volumes after their containers (in use until then). */
	if (todo != NULL && vols != NULL)
		json_array_extend(todo, vols);
	json_decref(vols);
	json_decref(rc->rvols);
	rc->rvols = todo != NULL ? todo : json_array();
	rc->pi = 0;
	rc->rgone = rc->pgone = 0;
	snaprec_next(op);
}

void
eng_snap_reconcile(struct eop *op, void (*then)(struct eop *))
{
	char filt[128];

	rco(op)->rthen = then;
	eng_urlencode("{\"label\":[\"" L_MANAGED "=true\"]}", filt, sizeof(filt));
	eng_callf(op, "GET", NULL, snaprec_listed,
	    API "/containers/json?all=1&filters=%s", filt);
}
