/* api_e2b_store.c - the E2B records in the api's sqlite (table e2b_sandboxes): a record survives an api restart with its deadline (adr/0059). Touches only its own table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#include <sqlite3.h>

#include "api_e2b_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

/* The token is never stored: only the salt it is derived from with a
 * subkey of state_dir/ticket.key, so api.db alone opens no sandbox. */
static const char schema[] =
    "CREATE TABLE IF NOT EXISTS e2b_sandboxes ("
    " id TEXT PRIMARY KEY,"
    " owner_id INTEGER NOT NULL REFERENCES principals(id),"
    " template TEXT NOT NULL,"
    " image TEXT NOT NULL,"
    " metadata TEXT NOT NULL,"
    " envs TEXT NOT NULL,"
    " salt BLOB NOT NULL,"
    " started_at INTEGER NOT NULL,"
    " deadline INTEGER NOT NULL,"
    " paused INTEGER NOT NULL,"
    " auto_pause INTEGER NOT NULL);";

void
api_e2b_rec_free(struct api_e2b_rec *r)
{
	if (r == NULL)
		return;
	free(r->metadata);
	free(r->envs);
	sodium_memzero(r->token, sizeof(r->token));
	free(r);
}

static int
db_fail(sqlite3 *db, struct sbx_err *err, const char *what)
{
	log_warn("sqlite", "op", what, "error", sqlite3_errmsg(db), NULL);
	return sbx_err_set(err, SBX_E_INTERNAL, "The api's database failed.");
}

int
api_e2b_store_init(struct api_store *st, struct sbx_err *err)
{
	sqlite3 *db = api_store_db(st);

	if (sqlite3_exec(db, schema, NULL, NULL, NULL) != SQLITE_OK)
		return db_fail(db, err, "e2b schema");
	return 0;
}

int
api_e2b_store_put(struct api_store *st, const struct api_e2b_rec *r,
    struct sbx_err *err)
{
	sqlite3 *db = api_store_db(st);
	sqlite3_stmt *q = NULL;
	int rc;

	if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO e2b_sandboxes (id, "
	    "owner_id, template, image, metadata, envs, salt, started_at, "
	    "deadline, paused, auto_pause) VALUES (?,?,?,?,?,?,?,?,?,?,?)", -1,
	    &q, NULL) != SQLITE_OK)
		return db_fail(db, err, "e2b put");
	sqlite3_bind_text(q, 1, r->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 2, r->owner);
	sqlite3_bind_text(q, 3, r->template_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 4, r->image, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 5, r->metadata, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 6, r->envs, -1, SQLITE_STATIC);
	sqlite3_bind_blob(q, 7, r->salt, sizeof(r->salt), SQLITE_STATIC);
	sqlite3_bind_int64(q, 8, r->started_at);
	sqlite3_bind_int64(q, 9, r->deadline);
	sqlite3_bind_int(q, 10, r->paused);
	sqlite3_bind_int(q, 11, r->auto_pause);
	rc = sqlite3_step(q);
	sqlite3_finalize(q);
	return rc == SQLITE_DONE ? 0 : db_fail(db, err, "e2b put");
}

int
api_e2b_store_del(struct api_store *st, const char *id, struct sbx_err *err)
{
	sqlite3 *db = api_store_db(st);
	sqlite3_stmt *q = NULL;
	int rc;

	if (sqlite3_prepare_v2(db, "DELETE FROM e2b_sandboxes WHERE id = ?", -1,
	    &q, NULL) != SQLITE_OK)
		return db_fail(db, err, "e2b del");
	sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
	rc = sqlite3_step(q);
	sqlite3_finalize(q);
	return rc == SQLITE_DONE ? 0 : db_fail(db, err, "e2b del");
}

static void
col_text(char *dst, size_t cap, sqlite3_stmt *q, int col)
{
	const unsigned char *t = sqlite3_column_text(q, col);

	snprintf(dst, cap, "%s", t != NULL ? (const char *)t : "");
}

static char *
col_dup(sqlite3_stmt *q, int col)
{
	const unsigned char *t = sqlite3_column_text(q, col);

	return strdup(t != NULL ? (const char *)t : "{}");
}

int
api_e2b_store_load(struct api_store *st,
    int (*cb)(void *arg, struct api_e2b_rec *r), void *arg,
    struct sbx_err *err)
{
	sqlite3 *db = api_store_db(st);
	sqlite3_stmt *q = NULL;
	struct api_e2b_rec *r;
	int rc;

	if (sqlite3_prepare_v2(db, "SELECT id, owner_id, template, image, "
	    "metadata, envs, salt, started_at, deadline, paused, auto_pause "
	    "FROM e2b_sandboxes ORDER BY started_at", -1, &q, NULL) != SQLITE_OK)
		return db_fail(db, err, "e2b load");
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		if ((r = calloc(1, sizeof(*r))) == NULL) {
			sqlite3_finalize(q);
			return sbx_err_oom(err);
		}
		col_text(r->id, sizeof(r->id), q, 0);
		r->owner = sqlite3_column_int64(q, 1);
		col_text(r->template_id, sizeof(r->template_id), q, 2);
		col_text(r->image, sizeof(r->image), q, 3);
		r->metadata = col_dup(q, 4);
		r->envs = col_dup(q, 5);
		if (sqlite3_column_bytes(q, 6) == (int)sizeof(r->salt))
			memcpy(r->salt, sqlite3_column_blob(q, 6),
			    sizeof(r->salt));
		r->started_at = sqlite3_column_int64(q, 7);
		r->deadline = sqlite3_column_int64(q, 8);
		r->paused = sqlite3_column_int(q, 9);
		r->auto_pause = sqlite3_column_int(q, 10);
		if (r->metadata == NULL || r->envs == NULL) {
			api_e2b_rec_free(r);
			sqlite3_finalize(q);
			return sbx_err_oom(err);
		}
		if (cb(arg, r) == -1) {
			sqlite3_finalize(q);
			return sbx_err_oom(err);
		}
	}
	sqlite3_finalize(q);
	return rc == SQLITE_DONE ? 0 : db_fail(db, err, "e2b load");
}
