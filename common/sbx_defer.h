/* sbx_defer.h - store writes that wait until this loop turn's replies are on the wire, then commit as one transaction (adr/0033). */
#ifndef SBX_DEFER_H
#define SBX_DEFER_H

#include <stddef.h>

#include <event2/event.h>
#include <sqlite3.h>

#include "sbx_err.h"

/*
 * A request's bookkeeping rows (audit, last_used_at) are not part of its
 * answer: written before the reply, they put a sqlite commit (two WAL
 * page writes, more when the disk is busy) between the exec's last byte
 * and the client. A deferral queue holds such writes and runs them from a
 * zero-delay timer: libevent runs timers of a loop turn after the socket
 * events of the same turn (event_base_loop: dispatch, then
 * timeout_process, then the active queue in activation order), so the
 * replies queued by this turn's callbacks are written first. All rows
 * pending at that moment commit in one transaction (BEGIN IMMEDIATE ...
 * COMMIT, SQLite "Transaction" docs): one commit per loop turn, not two
 * per request.
 *
 * Durability: a row waits at most one loop turn. A daemon that is killed
 * in that window loses it (the request's reply has gone out); a daemon
 * that stops normally calls sbx_defer_free, which writes what is pending.
 * Readers in the same process (an audit list route) call
 * sbx_defer_flush first, so they see every row of an answered request.
 */
struct sbx_defer;

/*
 * Writes one row: store is the daemon's store handle given to
 * sbx_defer_add, rec the bytes copied there. Runs inside the batch's
 * transaction. Returns 0, or -1 with err (logged by the queue's fail
 * callback; the other rows of the batch are still written).
 */
typedef int (*sbx_defer_fn)(void *store, const void *rec,
    struct sbx_err *err);

/* Told about a write that failed (err from the row's fn or from BEGIN/
 * COMMIT); for the daemon's log. Must not call back into the queue. */
typedef void (*sbx_defer_fail_fn)(const struct sbx_err *err);

/*
 * Creates a queue on base for writes to db (the caller's handle; it must
 * outlive the queue). max_pending (rows, >= 1) bounds the memory: the
 * add that would exceed it first writes the pending batch at once.
 * fail may be NULL. Returns the queue, or NULL with err internal (out of
 * memory, or libevent could not make the timer).
 */
struct sbx_defer *sbx_defer_new(struct event_base *base, sqlite3 *db,
    size_t max_pending, sbx_defer_fail_fn fail, struct sbx_err *err);

/*
 * Queues fn(store, copy of rec[0..len)) for the end of this loop turn.
 * rec is copied (len bytes, any alignment of the copy suits a struct:
 * malloc's). Out of memory: the row is written at once instead (never
 * lost for lack of memory). d NULL: written at once. Returns what the
 * write returned when it ran at once, otherwise 0.
 */
int sbx_defer_add(struct sbx_defer *d, sbx_defer_fn fn, void *store,
    const void *rec, size_t len, struct sbx_err *err);

/* Writes every pending row now, in one transaction. NULL is fine. */
void sbx_defer_flush(struct sbx_defer *d);

/* Rows waiting (for tests and metrics). */
size_t sbx_defer_pending(const struct sbx_defer *d);

/* Flushes, then frees d. NULL is fine. */
void sbx_defer_free(struct sbx_defer *d);

#endif
