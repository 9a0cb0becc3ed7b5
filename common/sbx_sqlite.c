/* sbx_sqlite.c - statements prepared once per database handle (sbx_sqlite.h). */
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "sbx_proto.h"
#include "sbx_sqlite.h"

int
sbx_sqlite_prepare_all(sqlite3 *db, const char *const *sql, size_t n,
    sqlite3_stmt **q, struct sbx_err *err)
{
	size_t i;

	memset(q, 0, n * sizeof(*q));
	for (i = 0; i < n; i++) {
		if (sql[i] == NULL)
			continue;
		if (sqlite3_prepare_v2(db, sql[i], -1, &q[i], NULL) !=
		    SQLITE_OK) {
			sbx_err_set(err, SBX_E_CONFIG, "Cannot prepare query %zu: "
			    "%s.", i, sqlite3_errmsg(db));
			sbx_sqlite_finalize_all(q, n);
			return -1;
		}
	}
	return 0;
}

void
sbx_sqlite_finalize_all(sqlite3_stmt **q, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		sqlite3_finalize(q[i]);
		q[i] = NULL;
	}
}

void
sbx_sqlite_done(sqlite3_stmt *q)
{
	if (q == NULL)
		return;
	sqlite3_reset(q);
	sqlite3_clear_bindings(q);
}

int
sbx_sqlite_cache(sqlite3 *db, long long bytes, struct sbx_err *err)
{
	char sql[64];
	char *msg = NULL;
	long long kib = bytes / 1024;

	if (kib < 64)
		kib = 64;
	snprintf(sql, sizeof(sql), "PRAGMA cache_size=-%lld;", kib);
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		sbx_err_set(err, SBX_E_CONFIG, "Cannot bound the database's "
		    "cache: %s.", msg != NULL ? msg : "unknown error");
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}
