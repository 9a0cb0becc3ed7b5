/* api_store.c - sandbox-api state in sqlite: principals, keyed key hashes, NPCs, egress grants, audit. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <sodium.h>
#include <sqlite3.h>

#include "api_store.h"
#include "sbx_defer.h"
#include "sbx_sqlite.h"
#include "sbx_config.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_token.h"

#define KEY_BYTES 32
#define HASH_BYTES 32

enum {
	Q_PRINCIPAL_CREATE,
	Q_PRINCIPAL_REVOKE,
	Q_PRINCIPAL_LIST,
	Q_PRINCIPAL_GET,
	Q_AUTHENTICATE,
	Q_NPC_CREATE,
	Q_NPC_GET,
	Q_NPC_LIST,
	Q_NPC_SET_EGRESS,
	Q_NPC_SET_IMAGE,
	Q_SANDBOX_COUNT,
	Q_SANDBOX_CLAIM,
	Q_SANDBOX_CLAIM_2,
	Q_SANDBOX_RELEASE,
	Q_AUDIT,
	Q_AUDIT_LIST,
	Q_AUDIT_DETAIL,
	Q_EGRESS_ALLOW_SET,
	Q_EGRESS_ALLOW_DEL,
	Q_PRINCIPAL_GET_ID,
	Q_NPC_GET_ID,
	Q_N
};

struct api_store {
	sqlite3 *db;
	sqlite3_stmt *q[Q_N];
	unsigned char key[KEY_BYTES];
	struct sbx_defer *defer;  /* audit rows after the reply (adr/0033) */
};

#define NPC_SELECT "SELECT n.id, n.name, n.owner_id, p.name, n.sandbox_id, " \
	"n.egress, n.egress_by, n.egress_at, n.created_at, n.image, " \
	"(SELECT e.allow FROM egress_policies e WHERE e.npc_id = n.id) FROM npcs n " \
	"JOIN principals p ON p.id = n.owner_id "

/* Prepared once in api_store_open (after the schema), finalized in
 * api_store_close; each use ends in sbx_sqlite_done (as broker_state.c). */
static const char *const queries[Q_N] = {
	[Q_PRINCIPAL_CREATE] = "INSERT INTO principals (name, role, key_hash, created_at) "
	    "VALUES (?, ?, ?, ?)",
	[Q_PRINCIPAL_REVOKE] = "UPDATE principals SET revoked_at = ? WHERE name = ? AND "
	    "revoked_at IS NULL",
	[Q_PRINCIPAL_LIST] = "SELECT id, name, role, created_at, revoked_at FROM "
	    "principals ORDER BY name",
	[Q_PRINCIPAL_GET] = "SELECT id, name, role, created_at, revoked_at FROM "
	    "principals WHERE name = ?",
	[Q_AUTHENTICATE] = "SELECT id, name, role, created_at, revoked_at, key_hash "
	    "FROM principals WHERE key_hash = ?",
	[Q_NPC_CREATE] = "INSERT INTO npcs (name, owner_id, sandbox_id, created_at) "
	    "VALUES (?, ?, ?, ?)",
	[Q_NPC_GET] = NPC_SELECT "WHERE n.name = ?",
	[Q_NPC_GET_ID] = NPC_SELECT "WHERE n.id = ?",
	[Q_PRINCIPAL_GET_ID] = "SELECT id, name, role, created_at, revoked_at FROM "
	    "principals WHERE id = ?",
	[Q_NPC_LIST] = NPC_SELECT "WHERE ?1 = 0 OR n.owner_id = ?1 ORDER BY n.name",
	[Q_NPC_SET_EGRESS] = "UPDATE npcs SET egress = ?, egress_by = ?, egress_at = ? "
	    "WHERE name = ?",
	[Q_EGRESS_ALLOW_SET] = "INSERT OR REPLACE INTO egress_policies (npc_id, allow) "
	    "SELECT id, ?1 FROM npcs WHERE name = ?2",
	[Q_EGRESS_ALLOW_DEL] = "DELETE FROM egress_policies WHERE npc_id = "
	    "(SELECT id FROM npcs WHERE name = ?1)",
	[Q_NPC_SET_IMAGE] = "UPDATE npcs SET image = ? WHERE name = ?",
	[Q_SANDBOX_COUNT] = "SELECT COUNT(*) FROM sandboxes WHERE owner_id = ?",
	[Q_SANDBOX_CLAIM] = "INSERT OR IGNORE INTO sandboxes (npc_id, owner_id, since) "
	    "SELECT ?1, ?2, ?3 WHERE ?4 <= 0 OR EXISTS (SELECT 1 FROM "
	    "sandboxes WHERE npc_id = ?1) OR (SELECT COUNT(*) FROM "
	    "sandboxes WHERE owner_id = ?2) < ?4",
	[Q_SANDBOX_CLAIM_2] = "SELECT 1 FROM sandboxes WHERE npc_id = ?",
	[Q_SANDBOX_RELEASE] = "DELETE FROM sandboxes WHERE npc_id = ?",
	[Q_AUDIT] = "INSERT INTO audit (ts, principal, action, npc, outcome) "
	    "VALUES (?, ?, ?, ?, ?)",
	[Q_AUDIT_LIST] = "SELECT ts, principal, action, npc, outcome FROM audit "
	    "ORDER BY id",
	[Q_AUDIT_DETAIL] = "INSERT INTO audit_details (audit_id, detail) "
	    "VALUES (?, ?)",
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS principals ("
    " id INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL UNIQUE,"
    " role TEXT NOT NULL CHECK (role IN ('player','operator')),"
    " key_hash BLOB NOT NULL UNIQUE,"
    " created_at INTEGER NOT NULL,"
    " revoked_at INTEGER);"
    "CREATE TABLE IF NOT EXISTS npcs ("
    " id INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL UNIQUE,"
    " owner_id INTEGER NOT NULL REFERENCES principals(id),"
    " sandbox_id TEXT NOT NULL UNIQUE,"
    " egress INTEGER NOT NULL DEFAULT 0,"
    " egress_by TEXT,"
    " egress_at INTEGER,"
    " image TEXT,"
    " created_at INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS npcs_owner ON npcs(owner_id);"
    "CREATE TABLE IF NOT EXISTS audit ("
    " id INTEGER PRIMARY KEY,"
    " ts INTEGER NOT NULL,"
    " principal TEXT,"
    " action TEXT NOT NULL,"
    " npc TEXT,"
    " outcome TEXT NOT NULL);"
    /* One row per NPC whose sandbox the api ensured and has not destroyed:
     * what max_sandboxes_per_player counts. Its own table, so databases
     * made before it need no ALTER. */
    "CREATE TABLE IF NOT EXISTS sandboxes ("
    " npc_id INTEGER PRIMARY KEY REFERENCES npcs(id),"
    " owner_id INTEGER NOT NULL REFERENCES principals(id),"
    " since INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sandboxes_owner ON sandboxes(owner_id);"
    /* An egress grant's allowlist (adr/0026), '\n'-joined; no row: full
     * egress. Its own table, as sandboxes, so older databases need no ALTER. */
    "CREATE TABLE IF NOT EXISTS egress_policies ("
    " npc_id INTEGER PRIMARY KEY REFERENCES npcs(id),"
    " allow TEXT NOT NULL);"
    /* What an audited action asked for (an egress grant: its allowlist,
     * adr/0027), keyed by the audit row; its own table, so older
     * databases need no ALTER. */
    "CREATE TABLE IF NOT EXISTS audit_details ("
    " audit_id INTEGER PRIMARY KEY REFERENCES audit(id),"
    " detail TEXT NOT NULL);";

const char *
api_role_name(enum api_role r)
{
	return r == API_ROLE_OPERATOR ? "operator" : "player";
}

static int
name_valid(const char *name, size_t max, const char *extra)
{
	size_t i;

	if (name == NULL || name[0] == '\0')
		return 0;
	for (i = 0; name[i] != '\0'; i++) {
		if (i >= max)
			return 0;
		if ((name[i] >= 'a' && name[i] <= 'z') ||
		    (name[i] >= '0' && name[i] <= '9'))
			continue;
		if (i > 0 && strchr(extra, name[i]) != NULL)
			continue;
		return 0;
	}
	return 1;
}

int
api_principal_name_valid(const char *name)
{
	return name_valid(name, API_NAME_MAX, "-_.");
}

int
api_npc_name_valid(const char *name)
{
	return name_valid(name, API_NPC_NAME_MAX, "-");
}

static int
db_fail(struct api_store *st, struct sbx_err *err, const char *what)
{
	log_error("database error", "op", what, "error",
	    sqlite3_errmsg(st->db), NULL);
	/* A full disk is the operator's to fix and passes: 503, not 500. */
	if (sqlite3_errcode(st->db) == SQLITE_FULL)
		return sbx_err_set(err, SBX_E_STORAGE_FULL, "The api's state "
		    "directory is full; nothing was recorded (%s).", what);
	return sbx_err_set(err, SBX_E_INTERNAL, "The api's database failed "
	    "(%s).", what);
}

/* Steps stmt once: 1 a row is current (read it, then sbx_sqlite_done), 0
 * no (more) rows, -1 the database failed (err by db_fail, what names the
 * use). Every read and list below is this one step. */
static int
step_row(struct api_store *st, sqlite3_stmt *stmt, const char *what,
    struct sbx_err *err)
{
	int src = sqlite3_step(stmt);

	if (src == SQLITE_ROW)
		return 1;
	if (src == SQLITE_DONE)
		return 0;
	db_fail(st, err, what);
	return -1;
}

/* Steps a one-row read (or a write): 0 when it ended in want (SQLITE_DONE
 * or SQLITE_ROW); else -1, err by db_fail(what). */
static int
step_want(struct api_store *st, sqlite3_stmt *stmt, int want,
    const char *what, struct sbx_err *err)
{
	if (sqlite3_step(stmt) == want)
		return 0;
	db_fail(st, err, what);
	return -1;
}

/*
 * Binds the parameters 1, 2, ... of stmt from ap, one letter of fmt each:
 * 't' a const char * (copied; NULL binds NULL), 'i' an int64_t, 'b' a
 * const void * then its size_t length (copied).
 */
static void
db_vbind(sqlite3_stmt *stmt, const char *fmt, va_list ap)
{
	const void *blob;
	int i;

	for (i = 1; fmt[i - 1] != '\0'; i++) {
		switch (fmt[i - 1]) {
		case 't':
			sqlite3_bind_text(stmt, i, va_arg(ap, const char *), -1,
			    SQLITE_TRANSIENT);
			break;
		case 'i':
			sqlite3_bind_int64(stmt, i, va_arg(ap, int64_t));
			break;
		case 'b':
			blob = va_arg(ap, const void *);
			sqlite3_bind_blob(stmt, i, blob, (int)va_arg(ap, size_t),
			    SQLITE_TRANSIENT);
			break;
		}
	}
}

static void
db_bind(sqlite3_stmt *stmt, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	db_vbind(stmt, fmt, ap);
	va_end(ap);
}

/*
 * One write: binds fmt's values to stmt (db_vbind), steps it once and ends
 * the use (sbx_sqlite_done; sqlite3_changes still counts it). Returns 0
 * when it ran to SQLITE_DONE; 1 when conflict is set and a constraint
 * refused it (err untouched: the caller names what conflicts); else -1,
 * err by db_fail(what).
 */
static int
db_write(struct api_store *st, sqlite3_stmt *stmt, int conflict,
    const char *what, struct sbx_err *err, const char *fmt, ...)
{
	va_list ap;
	int src, rc = 0;

	va_start(ap, fmt);
	db_vbind(stmt, fmt, ap);
	va_end(ap);
	src = sqlite3_step(stmt);
	if (conflict && src == SQLITE_CONSTRAINT)
		rc = 1;
	else if (src != SQLITE_DONE)
		rc = db_fail(st, err, what);
	sbx_sqlite_done(stmt);
	return rc;
}

/* Reads or creates the 32-byte server key. */
static int
load_key(struct api_store *st, const char *path, struct sbx_err *err)
{
	struct stat sb;
	ssize_t n;
	int fd = -1, rc = -1;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd == -1 && errno == ENOENT) {
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
		    O_CLOEXEC, 0600);
		if (fd == -1) {
			sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_CREATE,
			    path, strerror(errno));
			goto done;
		}
		randombytes_buf(st->key, sizeof(st->key));
		if (write(fd, st->key, sizeof(st->key)) !=
		    (ssize_t)sizeof(st->key) || fsync(fd) == -1) {
			sbx_err_set(err, SBX_E_CONFIG, "Cannot write %s: %s.",
			    path, strerror(errno));
			unlink(path);
			goto done;
		}
		log_info("server key created", "file", path, NULL);
		rc = 0;
		goto done;
	}
	if (fd == -1) {
		sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_OPEN, path,
		    strerror(errno));
		goto done;
	}
	if (fstat(fd, &sb) == -1 || !S_ISREG(sb.st_mode)) {
		sbx_err_set(err, SBX_E_CONFIG, "%s is not a regular file.", path);
		goto done;
	}
	if ((sb.st_mode & 077) != 0) {
		sbx_err_set(err, SBX_E_CONFIG, "%s has mode %04o; it must be "
		    "0600.", path, (unsigned)(sb.st_mode & 07777));
		goto done;
	}
	n = read(fd, st->key, sizeof(st->key));
	if (n != (ssize_t)sizeof(st->key) || sb.st_size != KEY_BYTES) {
		sbx_err_set(err, SBX_E_CONFIG, "%s must hold exactly %d bytes.",
		    path, KEY_BYTES);
		goto done;
	}
	rc = 0;
done:
	if (fd != -1)
		close(fd);
	return rc;
}

struct api_store *
api_store_open(const char *state_dir, struct sbx_err *err)
{
	struct api_store *st = NULL;
	char path[PATH_MAX];
	char *msg = NULL;
	struct stat sb;

	if (sodium_init() < 0) {
		sbx_err_set(err, SBX_E_INTERNAL, SBX_MSG_SODIUM);
		return NULL;
	}
	if (state_dir == NULL || state_dir[0] != '/') {
		sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_STATE_DIR_RELATIVE);
		return NULL;
	}
	if (mkdir(state_dir, 0700) == -1 && errno != EEXIST) {
		sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_STATE_DIR_CREATE,
		    state_dir, strerror(errno));
		return NULL;
	}
	if (stat(state_dir, &sb) == -1 || !S_ISDIR(sb.st_mode)) {
		sbx_err_set(err, SBX_E_CONFIG, "state_dir %s is not a "
		    "directory.", state_dir);
		return NULL;
	}
	if ((st = calloc(1, sizeof(*st))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/api.key", state_dir);
	if (load_key(st, path, err) == -1)
		goto fail;
	snprintf(path, sizeof(path), "%s/api.db", state_dir);
	if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
		sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_OPEN, path,
		    st->db != NULL ? sqlite3_errmsg(st->db) : "out of memory");
		goto fail;
	}
	chmod(path, 0600);
	sqlite3_busy_timeout(st->db, 2000);
	if (sqlite3_exec(st->db, "PRAGMA journal_mode=WAL;"
	    "PRAGMA foreign_keys=ON;", NULL, NULL, &msg) != SQLITE_OK ||
	    sqlite3_exec(st->db, schema, NULL, NULL, &msg) != SQLITE_OK) {
		sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_SET_UP, path,
		    msg != NULL ? msg : "unknown error");
		sqlite3_free(msg);
		goto fail;
	}
	if (sbx_sqlite_prepare_all(st->db, queries, Q_N, st->q, err) == -1)
		goto fail;
	return st;
fail:
	api_store_close(st);
	return NULL;
}

struct sqlite3 *
api_store_db(struct api_store *st)
{
	return st->db;
}

void
api_store_close(struct api_store *st)
{
	if (st == NULL)
		return;
	sbx_defer_free(st->defer);
	sbx_sqlite_finalize_all(st->q, Q_N);
	if (st->db != NULL)
		sqlite3_close(st->db);
	sodium_memzero(st->key, sizeof(st->key));
	free(st);
}

static void
key_hash(const struct api_store *st, const char *key, size_t len,
    unsigned char out[HASH_BYTES])
{
	crypto_generichash(out, HASH_BYTES, (const unsigned char *)key, len,
	    st->key, sizeof(st->key));
}

static void
copy_text(char *dst, size_t cap, sqlite3_stmt *stmt, int col)
{
	const unsigned char *t = sqlite3_column_text(stmt, col);

	snprintf(dst, cap, "%s", t != NULL ? (const char *)t : "");
}

static void
row_principal(sqlite3_stmt *stmt, struct api_principal *p)
{
	memset(p, 0, sizeof(*p));
	p->id = sqlite3_column_int64(stmt, 0);
	copy_text(p->name, sizeof(p->name), stmt, 1);
	p->role = strcmp((const char *)sqlite3_column_text(stmt, 2),
	    "operator") == 0 ? API_ROLE_OPERATOR : API_ROLE_PLAYER;
	p->created_at = sqlite3_column_int64(stmt, 3);
	p->revoked_at = sqlite3_column_int64(stmt, 4);
}

int
api_store_principal_create(struct api_store *st, const char *name,
    enum api_role role, char *key, size_t keylen, struct sbx_err *err)
{
	unsigned char h[HASH_BYTES];
	int rc;

	if (!api_principal_name_valid(name))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A principal name "
		    "must match [a-z0-9][a-z0-9_.-]{0,62}.");
	if (keylen < SBX_TOKEN_GEN_LEN + 1 ||
	    sbx_token_generate(key, keylen) == -1)
		return sbx_err_set(err, SBX_E_INTERNAL, "Cannot generate a key.");
	key_hash(st, key, strlen(key), h);
	rc = db_write(st, st->q[Q_PRINCIPAL_CREATE], 1, "create principal", err,
	    "ttbi", name, api_role_name(role), (const void *)h, sizeof(h),
	    sbx_wall_ms());
	if (rc == 1)
		rc = sbx_err_set(err, SBX_E_CONFLICT, "A principal named %s "
		    "already exists (revoked names are not reused).", name);
	if (rc == -1)
		sodium_memzero(key, keylen);
	sodium_memzero(h, sizeof(h));
	return rc;
}

int
api_store_principal_revoke(struct api_store *st, const char *name,
    struct sbx_err *err)
{
	if (db_write(st, st->q[Q_PRINCIPAL_REVOKE], 0, "revoke principal", err,
	    "it", sbx_wall_ms(), name) == -1)
		return -1;
	if (sqlite3_changes(st->db) == 0)
		return sbx_err_set(err, SBX_E_NOT_FOUND, "No active principal "
		    "is named %s.", api_principal_name_valid(name) ? name : "so");
	return 0;
}

int
api_store_principal_list(struct api_store *st,
    void (*cb)(void *arg, const struct api_principal *p), void *arg,
    struct sbx_err *err)
{
	struct api_principal p;
	sqlite3_stmt *stmt = st->q[Q_PRINCIPAL_LIST];
	int rc = -1;

	while ((rc = step_row(st, stmt, "list principals", err)) == 1) {
		row_principal(stmt, &p);
		cb(arg, &p);
	}
	sbx_sqlite_done(stmt);
	return rc;
}

int
api_store_principal_get(struct api_store *st, const char *name,
    struct api_principal *out, struct sbx_err *err)
{
	sqlite3_stmt *stmt = st->q[Q_PRINCIPAL_GET];
	int rc;

	db_bind(stmt, "t", name);
	if ((rc = step_row(st, stmt, "get principal", err)) == 1)
		row_principal(stmt, out);
	sbx_sqlite_done(stmt);
	return rc;
}

int
api_store_principal_get_id(struct api_store *st, int64_t id,
    struct api_principal *out, struct sbx_err *err)
{
	sqlite3_stmt *stmt = st->q[Q_PRINCIPAL_GET_ID];
	int rc;

	db_bind(stmt, "i", id);
	if ((rc = step_row(st, stmt, "get principal", err)) == 1)
		row_principal(stmt, out);
	sbx_sqlite_done(stmt);
	return rc;
}

int
api_store_authenticate(struct api_store *st, const char *key, size_t len,
    struct api_principal *out)
{
	unsigned char h[HASH_BYTES];
	sqlite3_stmt *stmt = st->q[Q_AUTHENTICATE];
	const void *stored;
	int rc = -1, src;

	key_hash(st, key, len, h);
	sqlite3_bind_blob(stmt, 1, h, sizeof(h), SQLITE_STATIC);
	src = sqlite3_step(stmt);
	if (src == SQLITE_DONE) {
		rc = 0;
		goto done;
	}
	if (src != SQLITE_ROW) {
		log_error("database error", "op", "authenticate", "error",
		    sqlite3_errmsg(st->db), NULL);
		goto done;
	}
	/* The index found the row; the digest compare itself is constant-time
	 * and guards against any collation surprise in the lookup. */
	stored = sqlite3_column_blob(stmt, 5);
	if (stored == NULL || sqlite3_column_bytes(stmt, 5) != HASH_BYTES ||
	    sodium_memcmp(stored, h, HASH_BYTES) != 0) {
		rc = 0;
		goto done;
	}
	row_principal(stmt, out);
	rc = out->revoked_at != 0 ? 0 : 1;
done:
	sodium_memzero(h, sizeof(h));
	sbx_sqlite_done(stmt);
	return rc;
}

static void
row_npc(sqlite3_stmt *stmt, struct api_npc *n)
{
	memset(n, 0, sizeof(*n));
	n->id = sqlite3_column_int64(stmt, 0);
	copy_text(n->name, sizeof(n->name), stmt, 1);
	n->owner_id = sqlite3_column_int64(stmt, 2);
	copy_text(n->owner, sizeof(n->owner), stmt, 3);
	copy_text(n->sandbox_id, sizeof(n->sandbox_id), stmt, 4);
	n->egress = sqlite3_column_int(stmt, 5);
	copy_text(n->egress_by, sizeof(n->egress_by), stmt, 6);
	n->egress_at = sqlite3_column_int64(stmt, 7);
	n->created_at = sqlite3_column_int64(stmt, 8);
	copy_text(n->image, sizeof(n->image), stmt, 9);
	copy_text(n->egress_allow, sizeof(n->egress_allow), stmt, 10);
}

int
api_store_npc_create(struct api_store *st, const char *name,
    int64_t owner_id, struct api_npc *out, struct sbx_err *err)
{
	char sid[64];
	int rc;

	if (!api_npc_name_valid(name))
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    SBX_MSG_BAD_NPC_NAME);
	snprintf(sid, sizeof(sid), API_NPC_SANDBOX_PREFIX "%s", name);
	rc = db_write(st, st->q[Q_NPC_CREATE], 1, "create npc", err, "titi",
	    name, owner_id, sid, sbx_wall_ms());
	if (rc == 1)
		return sbx_err_set(err, SBX_E_CONFLICT, "The NPC name %s is "
		    "taken.", name);
	if (rc == -1)
		return -1;
	if (api_store_npc_get(st, name, out, err) != 1) {
		if (!sbx_err_is_set(err))
			sbx_err_set(err, SBX_E_INTERNAL, "The NPC vanished.");
		return -1;
	}
	return 0;
}

int
api_store_npc_get(struct api_store *st, const char *name, struct api_npc *out,
    struct sbx_err *err)
{
	sqlite3_stmt *stmt = st->q[Q_NPC_GET];
	int rc;

	db_bind(stmt, "t", name);
	if ((rc = step_row(st, stmt, "get npc", err)) == 1)
		row_npc(stmt, out);
	sbx_sqlite_done(stmt);
	return rc;
}

int
api_store_npc_get_id(struct api_store *st, int64_t id, struct api_npc *out,
    struct sbx_err *err)
{
	sqlite3_stmt *stmt = st->q[Q_NPC_GET_ID];
	int rc;

	db_bind(stmt, "i", id);
	if ((rc = step_row(st, stmt, "get npc", err)) == 1)
		row_npc(stmt, out);
	sbx_sqlite_done(stmt);
	return rc;
}

int
api_store_npc_list(struct api_store *st, int64_t owner_id,
    void (*cb)(void *arg, const struct api_npc *n), void *arg,
    struct sbx_err *err)
{
	struct api_npc n;
	sqlite3_stmt *stmt = st->q[Q_NPC_LIST];
	int rc = -1;

	db_bind(stmt, "i", owner_id);
	while ((rc = step_row(st, stmt, "list npcs", err)) == 1) {
		row_npc(stmt, &n);
		cb(arg, &n);
	}
	sbx_sqlite_done(stmt);
	return rc;
}

int
api_store_npc_set_egress_allow(struct api_store *st, const char *name,
    const char *allow, struct sbx_err *err)
{
	int full = allow == NULL || strcmp(allow, "*") == 0;

	if ((full ? db_write(st, st->q[Q_EGRESS_ALLOW_DEL], 0,
	    "set the egress allowlist", err, "t", name) :
	    db_write(st, st->q[Q_EGRESS_ALLOW_SET], 0,
	    "set the egress allowlist", err, "tt", allow, name)) == -1)
		return -1;
	if (!full && sqlite3_changes(st->db) == 0)
		return sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_NPC,
		    name);
	return 0;
}

int
api_store_npc_set_egress(struct api_store *st, const char *name, int enabled,
    const char *by, struct sbx_err *err)
{
	if (db_write(st, st->q[Q_NPC_SET_EGRESS], 0, "set egress", err, "itit",
	    (int64_t)(enabled ? 1 : 0), by, sbx_wall_ms(), name) == -1)
		return -1;
	if (sqlite3_changes(st->db) == 0)
		return sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_NPC,
		    name);
	return 0;
}

int
api_store_npc_set_image(struct api_store *st, const char *name,
    const char *image, struct sbx_err *err)
{
	/* "" clears the image: NULL in the table */
	return db_write(st, st->q[Q_NPC_SET_IMAGE], 0, "set image", err, "tt",
	    image != NULL && image[0] != '\0' ? image : NULL, name);
}

int
api_store_sandbox_count(struct api_store *st, int64_t owner_id,
    int64_t *out, struct sbx_err *err)
{
	sqlite3_stmt *stmt = st->q[Q_SANDBOX_COUNT];
	int rc = -1;

	db_bind(stmt, "i", owner_id);
	if (step_want(st, stmt, SQLITE_ROW, "count sandboxes", err) == -1)
		goto done;
	*out = sqlite3_column_int64(stmt, 0);
	rc = 0;
done:
	sbx_sqlite_done(stmt);
	return rc;
}

int
api_store_sandbox_claim(struct api_store *st, const struct api_npc *n,
    long long max, int *claimed, struct sbx_err *err)
{
	sqlite3_stmt *stmt = st->q[Q_SANDBOX_CLAIM_2];
	int rc;

	*claimed = 0;
	/* One statement: the count and the insert cannot be split by a
	 * concurrent claim, even from another process on the same file. */
	if (db_write(st, st->q[Q_SANDBOX_CLAIM], 0, "claim a sandbox", err,
	    "iiii", n->id, n->owner_id, sbx_wall_ms(), (int64_t)max) == -1)
		return -1;
	if (sqlite3_changes(st->db) > 0) {
		*claimed = 1;
		return 1;
	}
	/* Nothing inserted: the NPC holds its slot already, or none is free. */
	db_bind(stmt, "i", n->id);
	rc = step_row(st, stmt, "claim a sandbox", err);
	sbx_sqlite_done(stmt);
	return rc;
}

int
api_store_sandbox_release(struct api_store *st, int64_t npc_id,
    struct sbx_err *err)
{
	return db_write(st, st->q[Q_SANDBOX_RELEASE], 0, "release a sandbox",
	    err, "i", npc_id);
}

void
api_store_audit(struct api_store *st, const char *principal,
    const char *action, const char *npc, const char *outcome)
{
	api_store_audit_detail(st, principal, action, npc, outcome, NULL);
}

/* The row written: ts is when the request ended, not when it is written. */
static void
audit_write(struct api_store *st, int64_t ts, const char *principal,
    const char *action, const char *npc, const char *outcome,
    const char *detail)
{
	sqlite3_stmt *stmt = st->q[Q_AUDIT];

	db_bind(stmt, "itttt", ts, principal, action != NULL ? action : "?",
	    npc, outcome != NULL ? outcome : "?");
	if (sqlite3_step(stmt) != SQLITE_DONE)
		goto fail;
	sbx_sqlite_done(stmt);
	if (detail == NULL)
		return;
	stmt = st->q[Q_AUDIT_DETAIL];
	db_bind(stmt, "it", (int64_t)sqlite3_last_insert_rowid(st->db), detail);
	if (sqlite3_step(stmt) != SQLITE_DONE)
		goto fail;
	sbx_sqlite_done(stmt);
	return;
fail:
	log_error("audit write failed", "action", action, "error",
	    sqlite3_errmsg(st->db), NULL);
	sbx_sqlite_done(stmt);
}

/* A deferred audit row as sbx_defer copies it: the five strings follow
 * the header, each NUL-terminated; off[i] 0 means NULL. */
struct audit_rec {
	int64_t ts;
	size_t off[5];
	char text[];
};

static int
audit_run(void *store, const void *rec, struct sbx_err *err)
{
	const struct audit_rec *r = rec;
	const char *v[5];
	int i;

	(void)err;
	for (i = 0; i < 5; i++)
		v[i] = r->off[i] ? r->text + r->off[i] - 1 : NULL;
	audit_write(store, r->ts, v[0], v[1], v[2], v[3], v[4]);
	return 0;
}

void
api_store_audit_detail(struct api_store *st, const char *principal,
    const char *action, const char *npc, const char *outcome,
    const char *detail)
{
	const char *v[5] = { principal, action, npc, outcome, detail };
	struct audit_rec *r;
	struct sbx_err err;
	size_t len = 0, at = 0;
	int i;

	if (st->defer == NULL) {
		audit_write(st, sbx_wall_ms(), principal, action, npc, outcome,
		    detail);
		return;
	}
	for (i = 0; i < 5; i++)
		len += v[i] != NULL ? strlen(v[i]) + 1 : 0;
	if ((r = calloc(1, sizeof(*r) + len)) == NULL) {
		audit_write(st, sbx_wall_ms(), principal, action, npc, outcome,
		    detail);
		return;
	}
	r->ts = sbx_wall_ms();
	for (i = 0; i < 5; i++) {
		if (v[i] == NULL)
			continue;
		r->off[i] = at + 1;
		memcpy(r->text + at, v[i], strlen(v[i]) + 1);
		at += strlen(v[i]) + 1;
	}
	sbx_err_clear(&err);
	(void)sbx_defer_add(st->defer, audit_run, st, r, sizeof(*r) + len,
	    &err);
	free(r);
}

int
api_store_defer_on(struct api_store *st, struct event_base *base,
    struct sbx_err *err)
{
	if (st->defer != NULL)
		return 0;
	st->defer = sbx_defer_new(base, st->db, API_STORE_DEFER_MAX, NULL,
	    err);
	return st->defer != NULL ? 0 : -1;
}

int
api_store_audit_list(struct api_store *st,
    void (*cb)(void *arg, const struct api_audit_row *r), void *arg,
    struct sbx_err *err)
{
	struct api_audit_row r;
	sqlite3_stmt *stmt = st->q[Q_AUDIT_LIST];
	int rc = -1;

	sbx_defer_flush(st->defer);
	while ((rc = step_row(st, stmt, "list audit", err)) == 1) {
		memset(&r, 0, sizeof(r));
		r.ts = sqlite3_column_int64(stmt, 0);
		copy_text(r.principal, sizeof(r.principal), stmt, 1);
		copy_text(r.action, sizeof(r.action), stmt, 2);
		copy_text(r.npc, sizeof(r.npc), stmt, 3);
		copy_text(r.outcome, sizeof(r.outcome), stmt, 4);
		cb(arg, &r);
	}
	sbx_sqlite_done(stmt);
	return rc;
}
