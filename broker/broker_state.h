/* broker_state.h - the broker's sqlite state: managed sandboxes and the audit log (SPEC §4, §7). */
#ifndef BROKER_STATE_H
#define BROKER_STATE_H

#include <stdint.h>

#include <event2/event.h>

#include "sbx_driver.h"
#include "sbx_err.h"

struct broker_state;

/* One row of table sandboxes. */
struct broker_row {
	char id[64];
	char container[72];
	char volume[128];
	char image[256];
	int egress;
	char state[16];           /* "running", "stopped", "absent" (container
	                           * gone while the broker was away) */
	char stop_reason[16];     /* "", "idle", "operator", "oom", "exited",
	                           * "lost" (driver = kubernetes: its node) */
	int64_t created_at_ms;
	int64_t last_used_at_ms;  /* last operation (status reads do not count) */
	int64_t stopped_at_ms;    /* when the broker saw it stop; 0 when running */
};

/*
 * Opens (creating) DIR/broker.db: WAL journal, 5 s busy timeout, schema
 * created if absent, statements prepared once here and finalized by
 * broker_state_close. dir is created 0700 when missing. Returns the handle
 * or NULL with err config_error (cannot create/open, naming the path) or
 * internal.
 */
struct broker_state *broker_state_open(const char *dir, struct sbx_err *err);

/* Finalizes every statement and closes the database. NULL ok. */
void broker_state_close(struct broker_state *s);

/* Bounds the database's page cache to bytes (config db_cache;
 * sbx_sqlite_cache). Returns 0, or -1 with err config_error. */
int broker_state_cache(struct broker_state *s, long long bytes,
    struct sbx_err *err);

/*
 * Records the result of an ensure: inserts or replaces the row of st->id
 * with state st->state, container st->container_id, volume, image, egress,
 * created_at, clears stop_reason, keeps last_used_at (now_ms for a new row).
 * Returns 0 or -1 with err internal.
 */
int broker_state_put(struct broker_state *s, const struct sbx_status *st,
    const char *volume, int64_t now_ms, struct sbx_err *err);

/* Marks id stopped with reason ("operator", "idle", "oom", "exited") at
 * now_ms (Unix ms; destroy_after counts from it). Absent row: no-op. */
int broker_state_stopped(struct broker_state *s, const char *id,
    const char *reason, int64_t now_ms, struct sbx_err *err);

/*
 * Recovery (SPEC §7): records what the runtime reports for a labelled
 * sandbox st (state running or stopped). A new row gets last_used_at =
 * now_ms; an existing row keeps last_used_at, takes container, image,
 * egress and state from st, and keeps its own stop_reason and stopped_at
 * when it already knew the sandbox was stopped (else st->stop_reason, or
 * "exited", and now_ms). Returns 0 or -1 with err internal.
 */
int broker_state_adopt(struct broker_state *s, const struct sbx_status *st,
    const char *volume, int64_t now_ms, struct sbx_err *err);

/* Marks id absent (its container vanished while the broker was away);
 * absent rows do not count towards max_sandboxes. Absent row: no-op. */
int broker_state_absent(struct broker_state *s, const char *id,
    struct sbx_err *err);

/* Every row, sorted by id, into *rows (owned: free()) and *n. Returns 0 or
 * -1 with err internal. */
int broker_state_list(struct broker_state *s, struct broker_row **rows,
    size_t *n, struct sbx_err *err);

/* Removes the row of id (destroy). Absent row: no-op. */
int broker_state_delete(struct broker_state *s, const char *id,
    struct sbx_err *err);

/* Sets last_used_at of id to now_ms unless it is later already. Absent
 * row: no-op. */
int broker_state_touch(struct broker_state *s, const char *id, int64_t now_ms,
    struct sbx_err *err);

/* Fills row for id. Returns 1 found, 0 absent, -1 with err. */
int broker_state_get(struct broker_state *s, const char *id,
    struct broker_row *row, struct sbx_err *err);

/* Number of rows in sandboxes that are not absent, or -1 with err. */
int broker_state_count(struct broker_state *s, struct sbx_err *err);

/* Rows whose state is state ("running", "stopped", "absent"), or -1. */
int broker_state_count_state(struct broker_state *s, const char *state,
    struct sbx_err *err);

/*
 * Appends an audit row: ts_ms (Unix ms), op ("ensure", "exec", ...,
 * "health", "unknown" for an unrouted request, "reap" and "reap_destroy"
 * for the reaper, "recover" for start-up reconciliation), id ("" when
 * none), outcome ("ok" or an SBX_E_* code), duration_ms, reason (NULL or
 * "": none; "idle", "destroy_after", "adopted", "recorded", "absent").
 * Returns 0 or -1 with err internal.
 */
int broker_state_audit(struct broker_state *s, int64_t ts_ms, const char *op,
    const char *id, const char *outcome, int64_t duration_ms,
    const char *reason, struct sbx_err *err);

/* Rows a broker holds before it writes them at once (sbx_defer_add). */
#define BROKER_STATE_DEFER_MAX 4096

/*
 * From now on broker_state_request_done's rows wait for the end of the
 * loop turn on base (sbx_defer.h, adr/0033); every other call of this
 * file writes them first, so the order of writes is unchanged. fail is
 * told of a deferred write that failed (for the log; NULL: silent).
 * Already on: no-op. Returns 0, or -1 with err internal (out of memory).
 * broker_state_close writes what is pending.
 */
int broker_state_defer_on(struct broker_state *s, struct event_base *base,
    void (*fail)(const struct sbx_err *), struct sbx_err *err);

/*
 * The rows of one answered request: when touch (and id is not ""),
 * last_used_at of id = now_ms (broker_state_touch); then its audit row
 * (broker_state_audit, reason ""). op and outcome longer than 31/47
 * bytes and ids over 63 are cut (the broker's names and SBX_E_* codes
 * are shorter). Deferred once broker_state_defer_on ran, else written
 * at once. Returns 0, or -1 with err when written at once and failed.
 */
int broker_state_request_done(struct broker_state *s, int64_t ts_ms,
    const char *op, const char *id, const char *outcome, int64_t duration_ms,
    int touch, int64_t now_ms, struct sbx_err *err);

#endif
