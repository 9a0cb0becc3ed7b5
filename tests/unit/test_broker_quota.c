/* test_broker_quota.c - the soft /work quota (adr/0057): the write and tell decisions, the broker's table of figures, the status's "quota" object and the "quota" exec event on the wire. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "broker_quota.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"
#include "sbx_usage.h"
#include "sbx_wire.h"

#define MIB (1024 * 1024)

static void
test_verdict_allows_refuses_and_asks_for_a_count(void **state)
{
	(void)state;
	/* no quota: anything goes, never a walk */
	assert_int_equal(bq_write_verdict(0, 0, 0, 0, 0, 1LL << 40), BQ_ALLOW);
	/* never counted, or counted too long ago: walk first */
	assert_int_equal(bq_write_verdict(8 * MIB, 0, 0, 0, 10000, 1), BQ_COUNT);
	assert_int_equal(bq_write_verdict(8 * MIB, 1, 0, 10001, 10000, 1),
	    BQ_COUNT);
	/* a fresh figure: up to the quota exactly, not a byte more */
	assert_int_equal(bq_write_verdict(8 * MIB, 1, 6 * MIB, 10000, 10000,
	    2 * MIB), BQ_ALLOW);
	assert_int_equal(bq_write_verdict(8 * MIB, 1, 6 * MIB, 0, 10000,
	    2 * MIB + 1), BQ_REFUSE);
	/* already over: even an empty file is refused */
	assert_int_equal(bq_write_verdict(8 * MIB, 1, 9 * MIB, 0, 10000, 0),
	    BQ_REFUSE);
	/* a length not known yet (chunked) is judged by /work alone */
	assert_int_equal(bq_write_verdict(8 * MIB, 1, 8 * MIB, 0, 10000, -1),
	    BQ_ALLOW);
	/* no overflow near the top of int64 */
	assert_int_equal(bq_write_verdict(INT64_MAX, 1, INT64_MAX - 1, 0, 0,
	    INT64_MAX), BQ_REFUSE);
}

static void
test_the_owner_is_told_once_per_crossing(void **state)
{
	int told = 0;

	(void)state;
	assert_int_equal(bq_tell(8 * MIB, 8 * MIB, &told), 0);  /* at: fine */
	assert_int_equal(bq_tell(8 * MIB, 8 * MIB + 1, &told), 1);
	assert_int_equal(told, 1);
	assert_int_equal(bq_tell(8 * MIB, 20 * MIB, &told), 0); /* still over */
	assert_int_equal(bq_tell(8 * MIB, 1 * MIB, &told), 0);  /* cleaned up */
	assert_int_equal(told, 0);
	assert_int_equal(bq_tell(8 * MIB, 9 * MIB, &told), 1);  /* crossed again */
	assert_int_equal(bq_tell(0, 9 * MIB, &told), 0);        /* no quota */
	assert_int_equal(told, 0);
}

static void
test_table_counts_writes_between_walks(void **state)
{
	struct broker_quota *q = broker_quota_new(8 * MIB, 10000, 16);
	struct sbx_quota st;
	int64_t used;

	(void)state;
	assert_non_null(q);
	/* never counted: the first write asks for a walk */
	assert_int_equal(broker_quota_write(q, "a", 1000, MIB, &used), BQ_COUNT);
	assert_int_equal(used, -1);
	broker_quota_status(q, "a", 1000, &st);
	assert_int_equal(st.present, 1);
	assert_int_equal(st.bytes, 8 * MIB);
	assert_int_equal(st.used, -1);
	broker_quota_counted(q, "a", 1000, 5 * MIB);
	/* admitted writes add up: 5 + 2 + 1 = 8 fits, one byte more not */
	assert_int_equal(broker_quota_write(q, "a", 1001, 2 * MIB, &used),
	    BQ_ALLOW);
	assert_int_equal(broker_quota_write(q, "a", 1002, MIB, &used), BQ_ALLOW);
	assert_int_equal(broker_quota_write(q, "a", 1003, 1, &used), BQ_REFUSE);
	assert_int_equal(used, 8 * MIB);
	broker_quota_status(q, "a", 1500, &st);
	assert_int_equal(st.used, 8 * MIB);
	assert_int_equal(st.age_ms, 500);
	/* a refused write added nothing; staleness asks for a walk again */
	assert_int_equal(broker_quota_write(q, "a", 11001, 1, &used), BQ_COUNT);
	/* other sandboxes have figures of their own */
	assert_int_equal(broker_quota_write(q, "b", 1003, 1, NULL), BQ_COUNT);
	broker_quota_forget(q, "a");
	broker_quota_status(q, "a", 1500, &st);
	assert_int_equal(st.used, -1);
	broker_quota_free(q);
}

static void
test_exec_end_counts_unless_a_walk_ended_since_it_began(void **state)
{
	struct broker_quota *q = broker_quota_new(8 * MIB, 10000, 16);
	struct broker_quota *off = broker_quota_new(0, 10000, 16);

	(void)state;
	assert_int_equal(broker_quota_exit_needs_count(off, "a", 0), 0);
	assert_int_equal(broker_quota_exit_needs_count(q, "a", 100), 1);
	broker_quota_counted(q, "a", 200, MIB);
	assert_int_equal(broker_quota_exit_needs_count(q, "a", 100), 0);
	assert_int_equal(broker_quota_exit_needs_count(q, "a", 201), 1);
	/* the owner is told at the exec end whose count crossed, once */
	broker_quota_counted(q, "a", 300, 9 * MIB);
	assert_int_equal(broker_quota_tell(q, "a"), 1);
	broker_quota_counted(q, "a", 400, 10 * MIB);
	assert_int_equal(broker_quota_tell(q, "a"), 0);
	broker_quota_counted(q, "a", 500, MIB);
	broker_quota_counted(q, "a", 600, 9 * MIB);
	assert_int_equal(broker_quota_tell(q, "a"), 1);
	/* a quota that is off tells nothing and keeps nothing */
	broker_quota_counted(off, "a", 600, 9 * MIB);
	assert_int_equal(broker_quota_tell(off, "a"), 0);
	broker_quota_free(q);
	broker_quota_free(off);
}

static void
test_full_table_forgets_the_oldest_count(void **state)
{
	struct broker_quota *q = broker_quota_new(8 * MIB, 10000, 2);
	struct sbx_quota st;

	(void)state;
	broker_quota_counted(q, "a", 100, 1);
	broker_quota_counted(q, "b", 200, 2);
	broker_quota_counted(q, "c", 300, 3);   /* "a" makes room */
	broker_quota_status(q, "a", 300, &st);
	assert_int_equal(st.used, -1);
	broker_quota_status(q, "b", 300, &st);
	assert_int_equal(st.used, 2);
	broker_quota_status(q, "c", 300, &st);
	assert_int_equal(st.used, 3);
	broker_quota_free(q);
}

/* Member by member: the struct has padding after present. */
static void
assert_same_quota(const struct sbx_quota *a, const struct sbx_quota *b)
{
	assert_int_equal(a->present, b->present);
	assert_int_equal(a->bytes, b->bytes);
	assert_int_equal(a->used, b->used);
	assert_int_equal(a->age_ms, b->age_ms);
}

static void
test_status_quota_object_round_trip_and_strict(void **state)
{
	struct sbx_quota a = { 1, 8 * MIB, 5 * MIB, 42 }, b;
	struct sbx_status st, back;
	struct sbx_err e;
	json_t *o;

	(void)state;
	o = sbx_quota_json(&a);
	assert_int_equal(sbx_quota_from_json(o, &b, &e), 0);
	assert_same_quota(&a, &b);
	json_decref(o);
	a.used = a.age_ms = -1;   /* not counted yet: nulls */
	o = sbx_quota_json(&a);
	assert_true(json_is_null(json_object_get(o, "used")));
	assert_int_equal(sbx_quota_from_json(o, &b, &e), 0);
	assert_int_equal(b.used, -1);
	json_decref(o);
	o = json_pack("{s:i,s:i,s:n}", "bytes", 0, "used", 1, "age_ms");
	assert_int_equal(sbx_quota_from_json(o, &b, &e), -1);
	assert_int_equal(b.present, 0);
	json_decref(o);
	o = json_pack("{s:i,s:i,s:n}", "bytes", 5, "used", -2, "age_ms");
	assert_int_equal(sbx_quota_from_json(o, &b, &e), -1);
	json_decref(o);
	/* in a status object: only when present, and back the same */
	memset(&st, 0, sizeof(st));
	snprintf(st.id, sizeof(st.id), "q1");
	st.state = SBX_STATE_RUNNING;
	o = sbx_wire_status_encode(&st, 0);
	assert_null(json_object_get(o, "quota"));
	json_decref(o);
	st.quota = (struct sbx_quota){ 1, 8 * MIB, 3, 4 };
	o = sbx_wire_status_encode(&st, 0);
	assert_int_equal(sbx_wire_status_decode(o, &back, &e), 0);
	assert_same_quota(&st.quota, &back.quota);
	json_object_set_new(o, "quota", json_string("big"));
	assert_int_equal(sbx_wire_status_decode(o, &back, &e), -1);
	json_decref(o);
}

struct seen {
	int n, quotas, exits;
	int64_t bytes, quota;
	char message[200];
};

static int
on_ev(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct seen *s = arg;

	(void)line;
	(void)len;
	s->n++;
	if (ev->type == SBX_EVENT_QUOTA) {
		s->quotas++;
		s->bytes = ev->work_bytes;
		s->quota = ev->work_quota;
		snprintf(s->message, sizeof(s->message), "%s", ev->err_message);
	}
	if (ev->type == SBX_EVENT_EXIT)
		s->exits++;
	return 0;
}

/* Feeds text to a new parser; returns the feed's + finish's result. */
static int
parse(const char *text, struct seen *s)
{
	struct sbx_ndjson_parser *p = sbx_ndjson_parser_new(0, on_ev, s);
	struct sbx_err e;
	int rc;

	memset(s, 0, sizeof(*s));
	rc = sbx_ndjson_parser_feed(p, text, strlen(text), &e);
	if (rc == 0)
		rc = sbx_ndjson_parser_finish(p, &e);
	sbx_ndjson_parser_free(p);
	return rc;
}

static void
test_quota_event_on_the_wire(void **state)
{
	struct evbuffer *out = evbuffer_new();
	struct seen s;
	char *text;
	size_t len;

	(void)state;
	assert_int_equal(sbx_ndjson_start(out, "ex-1", 1), 0);
	assert_int_equal(sbx_ndjson_quota(out, 9 * MIB, 8 * MIB), 0);
	assert_int_equal(sbx_ndjson_exit(out, 0, NULL, 5, 0), 0);
	len = evbuffer_get_length(out);
	text = calloc(1, len + 1);
	evbuffer_remove(out, text, len);
	assert_non_null(strstr(text, "{\"type\":\"quota\",\"bytes\":9437184,"
	    "\"quota\":8388608,\"message\":\"/work holds 9437184 bytes, over "
	    "its quota of 8388608 bytes"));
	assert_int_equal(parse(text, &s), 0);
	assert_int_equal(s.quotas, 1);
	assert_int_equal(s.bytes, 9 * MIB);
	assert_int_equal(s.quota, 8 * MIB);
	assert_non_null(strstr(s.message, "writes through the API are refused"));
	free(text);
	/* between start and exit, once, with its members */
	assert_int_equal(parse("{\"type\":\"quota\",\"bytes\":1,\"quota\":1,"
	    "\"message\":\"m\"}\n", &s), -1);
	assert_int_equal(parse("{\"type\":\"start\",\"exec_id\":\"e\",\"ts\":1}\n"
	    "{\"type\":\"quota\",\"bytes\":2,\"quota\":1,\"message\":\"m\"}\n"
	    "{\"type\":\"quota\",\"bytes\":2,\"quota\":1,\"message\":\"m\"}\n",
	    &s), -1);
	assert_int_equal(parse("{\"type\":\"start\",\"exec_id\":\"e\",\"ts\":1}\n"
	    "{\"type\":\"quota\",\"bytes\":-2,\"quota\":1,\"message\":\"m\"}\n",
	    &s), -1);
	assert_int_equal(parse("{\"type\":\"start\",\"exec_id\":\"e\",\"ts\":1}\n"
	    "{\"type\":\"exit\",\"code\":0,\"signal\":null,\"duration_ms\":1,"
	    "\"truncated\":false}\n"
	    "{\"type\":\"quota\",\"bytes\":2,\"quota\":1,\"message\":\"m\"}\n",
	    &s), -1);
	assert_int_equal(sbx_ndjson_quota(out, -1, 1), -1);
	evbuffer_free(out);
}

static void
test_quota_exceeded_is_507(void **state)
{
	struct sbx_err e;

	(void)state;
	sbx_err_set(&e, SBX_E_QUOTA, "x");
	assert_int_equal(sbx_err_http_status(&e), 507);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verdict_allows_refuses_and_asks_for_a_count),
		cmocka_unit_test(test_the_owner_is_told_once_per_crossing),
		cmocka_unit_test(test_table_counts_writes_between_walks),
		cmocka_unit_test(test_exec_end_counts_unless_a_walk_ended_since_it_began),
		cmocka_unit_test(test_full_table_forgets_the_oldest_count),
		cmocka_unit_test(test_status_quota_object_round_trip_and_strict),
		cmocka_unit_test(test_quota_event_on_the_wire),
		cmocka_unit_test(test_quota_exceeded_is_507),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
