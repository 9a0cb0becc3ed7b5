/* sbx_sqlite.h - statements prepared once per database handle, from a daemon's table of queries (adr/0023). */
#ifndef SBX_SQLITE_H
#define SBX_SQLITE_H

#include <stddef.h>

#include <sqlite3.h>

#include "sbx_err.h"

/*
 * Prepares sql[0..n) on db into q[0..n) (q is the caller's array, e.g. a
 * member of its store struct; finalize with sbx_sqlite_finalize_all). A
 * NULL sql[i] leaves q[i] NULL. Returns 0; or -1 with every statement of q
 * finalized (q zeroed) and err config_error naming the index and
 * sqlite3_errmsg (a query the schema cannot take is a start-up error).
 * Behaviour: sqlite3_prepare_v2 (SQLite C API, "Compiling An SQL
 * Statement"), nothing stepped.
 */
int sbx_sqlite_prepare_all(sqlite3 *db, const char *const *sql, size_t n,
    sqlite3_stmt **q, struct sbx_err *err);

/*
 * Bounds db's page cache to bytes (PRAGMA cache_size with a negative
 * count: KiB, SQLite "PRAGMA cache_size"); at least 64 KiB is kept. The
 * default cache (2,000 KiB a connection) was most of a daemon's RSS growth
 * in the 30-minute soak (docs/bench.md). Returns 0, or -1 with err
 * config_error and SQLite's message.
 */
int sbx_sqlite_cache(sqlite3 *db, long long bytes, struct sbx_err *err);

/* Finalizes q[0..n) (NULL entries fine) and zeroes them. */
void sbx_sqlite_finalize_all(sqlite3_stmt **q, size_t n);

/*
 * A prepared-once statement is done for this use: sqlite3_reset (ends its
 * read or write, keeps it compiled) and sqlite3_clear_bindings (no bound
 * value, e.g. a key hash, outlives the call). NULL is fine.
 */
void sbx_sqlite_done(sqlite3_stmt *q);

#endif
