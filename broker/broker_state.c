/* broker_state.c - sqlite state of the broker: table sandboxes and the audit log. */
#include <sys/stat.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "broker_state.h"
#include "sbx_sqlite.h"
#include "sbx_defer.h"
#include "sbx_config.h"
#include "sbx_proto.h"

enum {
	Q_PUT,
	Q_STOPPED,
	Q_DELETE,
	Q_TOUCH,
	Q_GET,
	Q_COUNT,
	Q_COUNT_STATE,
	Q_AUDIT,
	Q_ADOPT,
	Q_ABSENT,
	Q_LIST,
	Q_N
};

/* Prepared once in broker_state_open, finalized in broker_state_close. */
static const char *const queries[Q_N] = {
	[Q_PUT] = "INSERT INTO sandboxes(id, container, volume, image, egress,"
	    " state, stop_reason, created_at, last_used_at)"
	    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, '', ?7, ?8)"
	    " ON CONFLICT(id) DO UPDATE SET container = ?2, volume = ?3,"
	    " image = ?4, egress = ?5, state = ?6, stop_reason = '',"
	    " created_at = ?7, stopped_at = 0",
	[Q_STOPPED] = "UPDATE sandboxes SET state = 'stopped', stop_reason = ?2,"
	    " stopped_at = ?3 WHERE id = ?1",
	[Q_DELETE] = "DELETE FROM sandboxes WHERE id = ?1",
	/* Never backwards: a quiet session's end touches with the time
	 * it last moved bytes (adr/0051 amendment). */
	[Q_TOUCH] = "UPDATE sandboxes SET last_used_at = MAX(last_used_at, ?2)"
	    " WHERE id = ?1",
	[Q_GET] = "SELECT id, container, volume, image, egress, state,"
	    " stop_reason, created_at, last_used_at, stopped_at FROM sandboxes"
	    " WHERE id = ?1",
	[Q_COUNT] = "SELECT count(*) FROM sandboxes WHERE state != 'absent'",
	[Q_COUNT_STATE] = "SELECT count(*) FROM sandboxes WHERE state = ?1",
	[Q_AUDIT] = "INSERT INTO audit(ts, op, id, outcome, duration_ms, reason)"
	    " VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
	/* SET expressions see the old row: a stop the row already explains
	 * keeps its reason and time; a new stop takes the runtime's. */
	[Q_ADOPT] = "INSERT INTO sandboxes(id, container, volume, image, egress,"
	    " state, stop_reason, created_at, last_used_at, stopped_at)"
	    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
	    "  CASE WHEN ?6 = 'stopped' THEN ?9 ELSE 0 END)"
	    " ON CONFLICT(id) DO UPDATE SET container = ?2, volume = ?3,"
	    " image = ?4, egress = ?5, created_at = ?8,"
	    " stop_reason = CASE WHEN ?6 = 'running' THEN ''"
	    "  WHEN state = 'stopped' AND stop_reason != '' THEN stop_reason"
	    "  ELSE ?7 END,"
	    " stopped_at = CASE WHEN ?6 = 'running' THEN 0"
	    "  WHEN state = 'stopped' AND stopped_at > 0 THEN stopped_at"
	    "  ELSE ?9 END,"
	    " state = ?6",
	[Q_ABSENT] = "UPDATE sandboxes SET state = 'absent', stop_reason = '',"
	    " stopped_at = 0 WHERE id = ?1",
	[Q_LIST] = "SELECT id, container, volume, image, egress, state,"
	    " stop_reason, created_at, last_used_at, stopped_at FROM sandboxes"
	    " ORDER BY id",
};

/* Columns added after the first schema; "duplicate column" is expected. */
static const char *const migrations[] = {
	"ALTER TABLE sandboxes ADD COLUMN stopped_at INTEGER NOT NULL DEFAULT 0",
	"ALTER TABLE audit ADD COLUMN reason TEXT NOT NULL DEFAULT ''",
	NULL
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS sandboxes ("
    " id TEXT PRIMARY KEY,"
    " container TEXT NOT NULL DEFAULT '',"
    " volume TEXT NOT NULL DEFAULT '',"
    " image TEXT NOT NULL DEFAULT '',"
    " egress INTEGER NOT NULL DEFAULT 0,"
    " state TEXT NOT NULL DEFAULT 'running',"
    " stop_reason TEXT NOT NULL DEFAULT '',"
    " created_at INTEGER NOT NULL DEFAULT 0,"
    " last_used_at INTEGER NOT NULL DEFAULT 0,"
    " stopped_at INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS audit ("
    " ts INTEGER NOT NULL,"
    " op TEXT NOT NULL,"
    " id TEXT NOT NULL,"
    " outcome TEXT NOT NULL,"
    " duration_ms INTEGER NOT NULL,"
    " reason TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX IF NOT EXISTS audit_ts ON audit(ts);";

struct broker_state {
	sqlite3 *db;
	sqlite3_stmt *q[Q_N];
	struct sbx_defer *defer;  /* request rows after the reply (adr/0033) */
};

/* Writes the deferred rows first, so every statement sees (and orders
 * after) the requests already answered. */
static void
settle(struct broker_state *s)
{
	sbx_defer_flush(s->defer);
}

static int
db_fail(struct broker_state *s, struct sbx_err *err)
{
	/* A full disk is the operator's to fix and passes: 503, not 500. */
	if (sqlite3_errcode(s->db) == SQLITE_FULL)
		return sbx_err_set(err, SBX_E_STORAGE_FULL, "The broker's state "
		    "directory is full; nothing was recorded.");
	return sbx_err_set(err, SBX_E_INTERNAL, "State database error: %s.",
	    sqlite3_errmsg(s->db));
}

struct broker_state *
broker_state_open(const char *dir, struct sbx_err *err)
{
	struct broker_state *s = NULL;
	char *path = NULL;
	char *emsg = NULL;
	int i;

	if (mkdir(dir, 0700) == -1 && errno != EEXIST) {
		sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_STATE_DIR_CREATE,
		    dir, strerror(errno));
		goto fail;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    asprintf(&path, "%s/broker.db", dir) == -1) {
		path = NULL;
		sbx_err_oom(err);
		goto fail;
	}
	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_OPEN, path,
		    s->db ? sqlite3_errmsg(s->db) : "out of memory");
		goto fail;
	}
	sqlite3_busy_timeout(s->db, 5000);
	if (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL;"
	    "PRAGMA synchronous=NORMAL;", NULL, NULL, &emsg) != SQLITE_OK ||
	    sqlite3_exec(s->db, schema, NULL, NULL, &emsg) != SQLITE_OK) {
		sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_SET_UP, path,
		    emsg ? emsg : "unknown error");
		sqlite3_free(emsg);
		goto fail;
	}
	for (i = 0; migrations[i] != NULL; i++) {
		if (sqlite3_exec(s->db, migrations[i], NULL, NULL, &emsg) !=
		    SQLITE_OK && (emsg == NULL ||
		    strstr(emsg, "duplicate column") == NULL)) {
			sbx_err_set(err, SBX_E_CONFIG, "Cannot upgrade %s: %s.",
			    path, emsg ? emsg : "unknown error");
			sqlite3_free(emsg);
			goto fail;
		}
		sqlite3_free(emsg);
		emsg = NULL;
	}
	for (i = 0; i < Q_N; i++)
		if (sqlite3_prepare_v2(s->db, queries[i], -1, &s->q[i],
		    NULL) != SQLITE_OK) {
			db_fail(s, err);
			goto fail;
		}
	free(path);
	return s;
fail:
	free(path);
	broker_state_close(s);
	return NULL;
}

void
broker_state_close(struct broker_state *s)
{
	int i;

	if (s == NULL)
		return;
	sbx_defer_free(s->defer);
	for (i = 0; i < Q_N; i++)
		sqlite3_finalize(s->q[i]);
	sqlite3_close(s->db);
	free(s);
}

/* Runs a statement that returns no row; resets it whatever happens. */
static int
step_done(struct broker_state *s, sqlite3_stmt *q, struct sbx_err *err)
{
	int rc;

	settle(s);
	rc = sqlite3_step(q);

	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	if (rc != SQLITE_DONE)
		return db_fail(s, err);
	return 0;
}

/* Parameters 1-6 of put and adopt: the sandbox's row as the driver sees it. */
static void
bind_row(sqlite3_stmt *q, const struct sbx_status *st, const char *volume)
{
	sqlite3_bind_text(q, 1, st->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(q, 2, st->container_id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(q, 3, volume ? volume : "", -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(q, 4, st->image, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(q, 5, st->egress ? 1 : 0);
	sqlite3_bind_text(q, 6, sbx_state_name(st->state), -1, SQLITE_STATIC);
}

int
broker_state_put(struct broker_state *s, const struct sbx_status *st,
    const char *volume, int64_t now_ms, struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_PUT];

	bind_row(q, st, volume);
	sqlite3_bind_int64(q, 7, st->created_at_ms);
	sqlite3_bind_int64(q, 8, now_ms);
	return step_done(s, q, err);
}

int
broker_state_stopped(struct broker_state *s, const char *id,
    const char *reason, int64_t now_ms, struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_STOPPED];

	sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(q, 2, reason, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(q, 3, now_ms);
	return step_done(s, q, err);
}

int
broker_state_adopt(struct broker_state *s, const struct sbx_status *st,
    const char *volume, int64_t now_ms, struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_ADOPT];
	const char *reason = st->stop_reason[0] ? st->stop_reason : "exited";

	bind_row(q, st, volume);
	sqlite3_bind_text(q, 7, st->state == SBX_STATE_STOPPED ? reason : "", -1,
	    SQLITE_TRANSIENT);
	sqlite3_bind_int64(q, 8, st->created_at_ms);
	sqlite3_bind_int64(q, 9, now_ms);
	return step_done(s, q, err);
}

/* A statement whose one parameter is the id, run to its end. */
static int
step_id(struct broker_state *s, sqlite3_stmt *q, const char *id,
    struct sbx_err *err)
{
	sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
	return step_done(s, q, err);
}

int
broker_state_absent(struct broker_state *s, const char *id,
    struct sbx_err *err)
{
	return step_id(s, s->q[Q_ABSENT], id, err);
}

int
broker_state_delete(struct broker_state *s, const char *id,
    struct sbx_err *err)
{
	return step_id(s, s->q[Q_DELETE], id, err);
}

int
broker_state_touch(struct broker_state *s, const char *id, int64_t now_ms,
    struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_TOUCH];

	sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(q, 2, now_ms);
	return step_done(s, q, err);
}

static void
col_text(sqlite3_stmt *q, int col, char *dst, size_t cap)
{
	const unsigned char *t = sqlite3_column_text(q, col);

	snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

/* The current row of a Q_GET / Q_LIST statement. */
static void
row_fill(sqlite3_stmt *q, struct broker_row *row)
{
	memset(row, 0, sizeof(*row));
	col_text(q, 0, row->id, sizeof(row->id));
	col_text(q, 1, row->container, sizeof(row->container));
	col_text(q, 2, row->volume, sizeof(row->volume));
	col_text(q, 3, row->image, sizeof(row->image));
	row->egress = sqlite3_column_int(q, 4);
	col_text(q, 5, row->state, sizeof(row->state));
	col_text(q, 6, row->stop_reason, sizeof(row->stop_reason));
	row->created_at_ms = sqlite3_column_int64(q, 7);
	row->last_used_at_ms = sqlite3_column_int64(q, 8);
	row->stopped_at_ms = sqlite3_column_int64(q, 9);
}

int
broker_state_list(struct broker_state *s, struct broker_row **rows,
    size_t *n, struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_LIST];
	struct broker_row *v = NULL, *nv;
	size_t len = 0, cap = 0;
	int rc;

	settle(s);
	*rows = NULL;
	*n = 0;
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		if (len == cap) {
			cap = cap ? cap * 2 : 16;
			if ((nv = realloc(v, cap * sizeof(*v))) == NULL) {
				sqlite3_reset(q);
				free(v);
				return sbx_err_oom(err);
			}
			v = nv;
		}
		row_fill(q, &v[len++]);
	}
	sqlite3_reset(q);
	if (rc != SQLITE_DONE) {
		free(v);
		return db_fail(s, err);
	}
	*rows = v;
	*n = len;
	return 0;
}

int
broker_state_get(struct broker_state *s, const char *id,
    struct broker_row *row, struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_GET];
	int rc, found = 0;

	settle(s);
	memset(row, 0, sizeof(*row));
	sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(q);
	if (rc == SQLITE_ROW) {
		found = 1;
		row_fill(q, row);
	} else if (rc != SQLITE_DONE)
		found = -1;
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	if (found == -1)
		return db_fail(s, err);
	return found;
}

int
broker_state_count(struct broker_state *s, struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_COUNT];
	int n = -1;

	settle(s);
	if (sqlite3_step(q) == SQLITE_ROW)
		n = sqlite3_column_int(q, 0);
	sqlite3_reset(q);
	if (n < 0)
		return db_fail(s, err);
	return n;
}

int
broker_state_count_state(struct broker_state *s, const char *state,
    struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_COUNT_STATE];
	int n = -1;

	settle(s);
	sqlite3_bind_text(q, 1, state, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(q) == SQLITE_ROW)
		n = sqlite3_column_int(q, 0);
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
	if (n < 0)
		return db_fail(s, err);
	return n;
}

int
broker_state_audit(struct broker_state *s, int64_t ts_ms, const char *op,
    const char *id, const char *outcome, int64_t duration_ms,
    const char *reason, struct sbx_err *err)
{
	sqlite3_stmt *q = s->q[Q_AUDIT];

	sqlite3_bind_int64(q, 1, ts_ms);
	sqlite3_bind_text(q, 2, op, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(q, 3, id ? id : "", -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(q, 4, outcome, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(q, 5, duration_ms);
	sqlite3_bind_text(q, 6, reason ? reason : "", -1, SQLITE_TRANSIENT);
	return step_done(s, q, err);
}

/* One answered request's rows, as sbx_defer copies them. */
struct used_rec {
	int64_t ts_ms, duration_ms, now_ms;
	int touch;
	char op[32], id[64], outcome[48];
};

static int
used_write(void *store, const void *rec, struct sbx_err *err)
{
	struct broker_state *s = store;
	const struct used_rec *u = rec;
	int rc = 0;

	if (u->touch && broker_state_touch(s, u->id, u->now_ms, err) == -1)
		rc = -1;
	if (broker_state_audit(s, u->ts_ms, u->op, u->id, u->outcome,
	    u->duration_ms, NULL, err) == -1)
		rc = -1;
	return rc;
}

int
broker_state_defer_on(struct broker_state *s, struct event_base *base,
    void (*fail)(const struct sbx_err *), struct sbx_err *err)
{
	if (s->defer != NULL)
		return 0;
	s->defer = sbx_defer_new(base, s->db, BROKER_STATE_DEFER_MAX, fail,
	    err);
	return s->defer != NULL ? 0 : -1;
}

int
broker_state_request_done(struct broker_state *s, int64_t ts_ms,
    const char *op, const char *id, const char *outcome, int64_t duration_ms,
    int touch, int64_t now_ms, struct sbx_err *err)
{
	struct used_rec u;

	memset(&u, 0, sizeof(u));
	u.ts_ms = ts_ms;
	u.duration_ms = duration_ms;
	u.now_ms = now_ms;
	u.touch = touch && id != NULL && id[0] != '\0';
	snprintf(u.op, sizeof(u.op), "%s", op);
	snprintf(u.id, sizeof(u.id), "%s", id ? id : "");
	snprintf(u.outcome, sizeof(u.outcome), "%s", outcome);
	return sbx_defer_add(s->defer, used_write, s, &u, sizeof(u), err);
}

int
broker_state_cache(struct broker_state *s, long long bytes,
    struct sbx_err *err)
{
	return sbx_sqlite_cache(s->db, bytes, err);
}
