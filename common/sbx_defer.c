/* sbx_defer.c - store writes after this loop turn's replies, one transaction per turn (sbx_defer.h, adr/0033). */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sqlite3.h>

#include "sbx_defer.h"
#include "sbx_proto.h"

struct drow {
	sbx_defer_fn fn;
	void *store;
	size_t len;
	unsigned char rec[];
};

struct sbx_defer {
	sqlite3 *db;
	struct event *ev;
	sbx_defer_fail_fn fail;
	size_t max;
	size_t n;
	struct drow **rows;
};

static void
told(struct sbx_defer *d, const struct sbx_err *err)
{
	if (d->fail != NULL)
		d->fail(err);
}

static void
exec_sql(struct sbx_defer *d, const char *sql)
{
	struct sbx_err err;

	if (sqlite3_exec(d->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
		sbx_err_set(&err, SBX_E_INTERNAL, "%s: %s.", sql,
		    sqlite3_errmsg(d->db));
		told(d, &err);
	}
}

void
sbx_defer_flush(struct sbx_defer *d)
{
	struct sbx_err err;
	size_t i, n;
	int txn;

	if (d == NULL || d->n == 0)
		return;
	n = d->n;
	d->n = 0;
	/* One row needs no transaction of its own: its statement is one. */
	txn = n > 1 && sqlite3_get_autocommit(d->db);
	if (txn)
		exec_sql(d, "BEGIN IMMEDIATE");
	for (i = 0; i < n; i++) {
		sbx_err_clear(&err);
		if (d->rows[i]->fn(d->rows[i]->store, d->rows[i]->rec,
		    &err) == -1)
			told(d, &err);
		free(d->rows[i]);
		d->rows[i] = NULL;
	}
	if (txn)
		exec_sql(d, "COMMIT");
	event_del(d->ev);
}

static void
on_turn(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	sbx_defer_flush(arg);
}

struct sbx_defer *
sbx_defer_new(struct event_base *base, sqlite3 *db, size_t max_pending,
    sbx_defer_fail_fn fail, struct sbx_err *err)
{
	struct sbx_defer *d;

	if ((d = calloc(1, sizeof(*d))) == NULL ||
	    (d->rows = calloc(max_pending ? max_pending : 1,
	    sizeof(*d->rows))) == NULL ||
	    (d->ev = evtimer_new(base, on_turn, d)) == NULL) {
		if (d != NULL)
			free(d->rows);
		free(d);
		sbx_err_oom(err);
		return NULL;
	}
	d->db = db;
	d->fail = fail;
	d->max = max_pending ? max_pending : 1;
	return d;
}

int
sbx_defer_add(struct sbx_defer *d, sbx_defer_fn fn, void *store,
    const void *rec, size_t len, struct sbx_err *err)
{
	static const struct timeval now = { 0, 0 };
	struct drow *r;

	if (d == NULL)
		return fn(store, rec, err);
	if (d->n == d->max)
		sbx_defer_flush(d);
	if ((r = malloc(sizeof(*r) + len)) == NULL)
		return fn(store, rec, err);
	r->fn = fn;
	r->store = store;
	r->len = len;
	memcpy(r->rec, rec, len);
	d->rows[d->n++] = r;
	/* A zero timeout goes on the timer heap (event_add), so it runs after
	 * the socket events of the next dispatch, not in this turn's queue. */
	if (d->n == 1)
		event_add(d->ev, &now);
	return 0;
}

size_t
sbx_defer_pending(const struct sbx_defer *d)
{
	return d != NULL ? d->n : 0;
}

void
sbx_defer_free(struct sbx_defer *d)
{
	if (d == NULL)
		return;
	sbx_defer_flush(d);
	event_free(d->ev);
	free(d->rows);
	free(d);
}
