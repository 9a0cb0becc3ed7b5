/* test_sbx_defer.c - deferred store writes: after the loop turn's socket writes, one transaction, bounded, flushed on free, failures reported. */
#include <sys/socket.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <sqlite3.h>

#include "sbx_defer.h"
#include "sbx_proto.h"

struct fx {
	struct event_base *base;
	sqlite3 *db;
	int peer;                 /* the client's end of the socket pair */
	int seen_reply;           /* a row found the reply already readable */
	int rows_run;
	int fails;
	int64_t commits;          /* transactions, through the commit hook */
	struct sbx_defer *d;
	struct bufferevent *bev;
};

static struct fx *cur;

static int
on_commit(void *arg)
{
	((struct fx *)arg)->commits++;
	return 0;
}

static void
on_fail(const struct sbx_err *err)
{
	(void)err;
	cur->fails++;
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->base = event_base_new();
	assert_non_null(f->base);
	assert_int_equal(sqlite3_open(":memory:", &f->db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(f->db, "CREATE TABLE t(v INTEGER)", NULL,
	    NULL, NULL), SQLITE_OK);
	sqlite3_commit_hook(f->db, on_commit, f);
	f->peer = -1;
	cur = f;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	if (f->peer >= 0)
		close(f->peer);
	sqlite3_close(f->db);
	event_base_free(f->base);
	free(f);
	return 0;
}

static int64_t
count_rows(sqlite3 *db)
{
	sqlite3_stmt *q;
	int64_t n = -1;

	assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1,
	    &q, NULL), SQLITE_OK);
	if (sqlite3_step(q) == SQLITE_ROW)
		n = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	return n;
}

/* The row writer: inserts rec's value; value < 0 fails. Also records
 * whether the peer could already read the reply. */
static int
put_row(void *store, const void *rec, struct sbx_err *err)
{
	struct fx *f = store;
	int v;
	char c;
	char sql[64];

	memcpy(&v, rec, sizeof(v));
	f->rows_run++; fprintf(stderr, "row %d peek=%zd\n", v, recv(f->peer, &c, 1, MSG_PEEK | MSG_DONTWAIT));
	if (f->peer >= 0 && recv(f->peer, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1)
		f->seen_reply = 1;
	if (v < 0)
		return sbx_err_set(err, SBX_E_INTERNAL, "row %d refused", v);
	snprintf(sql, sizeof(sql), "INSERT INTO t VALUES(%d)", v);
	if (sqlite3_exec(f->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return sbx_err_set(err, SBX_E_INTERNAL, "%s",
		    sqlite3_errmsg(f->db));
	return 0;
}

static int
add(struct sbx_defer *d, struct fx *f, int v)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	return sbx_defer_add(d, put_row, f, &v, sizeof(v), &err);
}

/* Rows wait for the loop turn, then go in one transaction. */
static void
test_rows_wait_for_the_turn_and_commit_once(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	struct sbx_defer *d;
	int i;

	d = sbx_defer_new(f->base, f->db, 16, on_fail, &err);
	assert_non_null(d);
	for (i = 0; i < 5; i++)
		assert_int_equal(add(d, f, i), 0);
	assert_int_equal(sbx_defer_pending(d), 5);
	assert_int_equal(count_rows(f->db), 0);
	f->commits = 0;
	event_base_loop(f->base, EVLOOP_ONCE);
	assert_int_equal(sbx_defer_pending(d), 0);
	assert_int_equal(count_rows(f->db), 5);
	assert_int_equal(f->commits, 1);
	/* Nothing pending: the timer is gone, the loop has no event left. */
	assert_int_equal(event_base_loop(f->base, EVLOOP_NONBLOCK), 1);
	sbx_defer_free(d);
}

/* A reply queued on a bufferevent in the same turn is on the socket
 * before the deferred row runs (the point of deferring). */
static void
on_request(evutil_socket_t fd, short what, void *arg)
{
	struct fx *f = arg;

	(void)fd;
	(void)what;
	bufferevent_write(f->bev, "{\"type\":\"exit\"}\n", 16);
	assert_int_equal(add(f->d, f, 7), 0);
}

static void
test_reply_is_written_before_the_row(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	struct sbx_defer *d;
	struct bufferevent *bev;
	struct event *req;
	int sv[2], turns;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	evutil_make_socket_nonblocking(sv[0]);
	f->peer = sv[1];
	d = sbx_defer_new(f->base, f->db, 16, on_fail, &err);
	assert_non_null(d);
	bev = bufferevent_socket_new(f->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(bev);
	bufferevent_enable(bev, EV_WRITE);
	f->d = d;
	f->bev = bev;
	/* As between requests: nothing to write, the write event is off
	 * (its first run finds the output empty and deletes it). */
	event_base_loop(f->base, EVLOOP_NONBLOCK);
	req = event_new(f->base, -1, 0, on_request, f);
	event_active(req, 0, 1);
	for (turns = 0; turns < 10 && f->rows_run == 0; turns++)
		event_base_loop(f->base, EVLOOP_ONCE);
	assert_int_equal(f->rows_run, 1);
	assert_int_equal(f->seen_reply, 1);
	assert_int_equal(count_rows(f->db), 1);
	event_free(req);
	bufferevent_free(bev);
	sbx_defer_free(d);
}

/* At the bound the pending batch is written at once; free writes the
 * rest; a NULL queue writes at once. */
static void
test_bound_free_and_null(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	struct sbx_defer *d;
	int i;

	d = sbx_defer_new(f->base, f->db, 3, on_fail, &err);
	assert_non_null(d);
	for (i = 0; i < 3; i++)
		add(d, f, i);
	assert_int_equal(count_rows(f->db), 0);
	add(d, f, 3);
	assert_int_equal(count_rows(f->db), 3);
	assert_int_equal(sbx_defer_pending(d), 1);
	sbx_defer_free(d);
	assert_int_equal(count_rows(f->db), 4);
	assert_int_equal(add(NULL, f, 5), 0);
	assert_int_equal(count_rows(f->db), 5);
	assert_int_equal(add(NULL, f, -1), -1);
}

/* A failing row is reported; the other rows of its batch still land. */
static void
test_a_failing_row_is_reported_the_rest_land(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	struct sbx_defer *d;

	d = sbx_defer_new(f->base, f->db, 16, on_fail, &err);
	assert_non_null(d);
	add(d, f, 1);
	add(d, f, -2);
	add(d, f, 3);
	sbx_defer_flush(d);
	assert_int_equal(f->fails, 1);
	assert_int_equal(count_rows(f->db), 2);
	sbx_defer_free(d);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_rows_wait_for_the_turn_and_commit_once, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_reply_is_written_before_the_row, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bound_free_and_null, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_failing_row_is_reported_the_rest_land, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
