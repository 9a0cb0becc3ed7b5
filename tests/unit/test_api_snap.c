/* test_api_snap.c - snapshots through the api with the fake driver (adr/0068): create, list, fork, from_snapshot, delete, the owner's count limit, another player's 404, bad input refused before the driver is asked; a driver without snapshot ops answers unsupported (501). */
#include "api_testutil.h"

#include "driver_fake.h"
#include "sbx_call.h"

static char KA[64], KB[64], KOP[64];   /* player alice, player bob, operator */

static unsigned
snap_calls(void)
{
	return sbx_fake_stats(T.drv)->calls[SBX_FAKE_SNAPSHOT];
}

static int
req(struct tu_res *r, const char *method, const char *path, const char *key,
    const char *body)
{
	tu_res_free(r);
	memset(r, 0, sizeof(*r));
	return tu_req(r, method, path, key, body);
}

static void
test_snapshot_fork_from_snapshot_delete(void **state)
{
	struct tu_res r = { 0 };
	unsigned before;

	(void)state;
	tu_set("max_snapshots_per_player", "2");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "src");
	assert_int_equal(req(&r, "PUT", "/api/v1/npcs/src/sandbox", KA, NULL), 200);
	assert_int_equal(sbx_fake_put_file(T.drv, "npc-src", "/work/a", "one", 3),
	    0);
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/snapshots", KA,
	    "{\"name\":\"s1\"}"), 201);
	assert_non_null(strstr(tu_text(&r), "\"size_bytes\":3"));
	assert_non_null(strstr(tu_text(&r), "\"owner\":\"alice\""));
	assert_non_null(strstr(tu_text(&r), "\"npc\":\"src\""));
	/* The same name again: 409, the NPC named as the player knows it. */
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/snapshots", KA,
	    "{\"name\":\"s1\"}"), 409);
	assert_non_null(strstr(tu_text(&r), "src's sandbox has a snapshot named s1"));
	assert_null(strstr(tu_text(&r), "npc-"));
	/* Later writes to the source are not in the snapshot. */
	assert_int_equal(sbx_fake_put_file(T.drv, "npc-src", "/work/b", "two", 3),
	    0);
	/* Bad names, another player, unknown members: nothing asked. */
	before = snap_calls();
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/snapshots", KA,
	    "{\"name\":\"Bad\"}"), 400);
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/snapshots", KA,
	    "{\"name\":\"ok\",\"more\":1}"), 400);
	assert_int_equal(req(&r, "DELETE", "/api/v1/npcs/src/sandbox/snapshots/"
	    "a_b", KA, NULL), 400);
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/snapshots", KB,
	    "{\"name\":\"s2\"}"), 404);
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/fork", KA,
	    "{\"npc\":\"Bad name\"}"), 400);
	assert_int_equal(snap_calls(), before);
	/* from_snapshot into another NPC of alice's. */
	assert_int_equal(req(&r, "POST", "/api/v1/npcs", KA, "{\"name\":\"dst\"}"),
	    201);
	assert_int_equal(req(&r, "PUT", "/api/v1/npcs/dst/sandbox", KA,
	    "{\"from_snapshot\":\"s1\",\"from_npc\":\"src\"}"), 200);
	assert_non_null(strstr(tu_text(&r), "\"state\":\"running\""));
	assert_int_equal(req(&r, "GET", "/api/v1/npcs/dst/sandbox/files?path="
	    "/work/a", KA, NULL), 200);
	assert_string_equal(tu_text(&r), "one");
	assert_int_equal(req(&r, "GET", "/api/v1/npcs/dst/sandbox/files?path="
	    "/work/b", KA, NULL), 404);
	/* ... not onto a sandbox that exists. */
	assert_int_equal(req(&r, "PUT", "/api/v1/npcs/dst/sandbox", KA,
	    "{\"from_snapshot\":\"s1\",\"from_npc\":\"src\"}"), 409);
	/* from_npc of another owner: 404. */
	assert_int_equal(req(&r, "POST", "/api/v1/npcs", KB,
	    "{\"name\":\"bobs\"}"), 201);
	assert_int_equal(req(&r, "PUT", "/api/v1/npcs/bobs/sandbox", KB,
	    "{\"from_snapshot\":\"s1\",\"from_npc\":\"src\"}"), 404);
	/* Fork: a new NPC of alice's with the source's /work now. */
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/fork", KA,
	    "{\"npc\":\"copy\"}"), 201);
	assert_non_null(strstr(tu_text(&r), "\"forked_from\":\"src\""));
	assert_int_equal(req(&r, "GET", "/api/v1/npcs/copy/sandbox/files?path="
	    "/work/b", KA, NULL), 200);
	assert_string_equal(tu_text(&r), "two");
	/* Bob's NPC name is taken for alice's fork. */
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/fork", KA,
	    "{\"npc\":\"bobs\"}"), 409);
	/* The count: 2 per owner here. */
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/src/sandbox/snapshots", KA,
	    "{\"name\":\"s2\"}"), 201);
	assert_int_equal(req(&r, "POST", "/api/v1/npcs/copy/sandbox/snapshots", KA,
	    "{\"name\":\"s3\"}"), 429);
	assert_non_null(strstr(tu_text(&r), "max_snapshots_per_player"));
	/* The owner's list, bob's empty one. */
	assert_int_equal(req(&r, "GET", "/api/v1/snapshots", KA, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"s1\""));
	assert_non_null(strstr(tu_text(&r), "\"s2\""));
	assert_int_equal(req(&r, "GET", "/api/v1/snapshots", KB, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "{\"snapshots\":[]}"));
	/* Destroy keeps them; delete removes them. */
	assert_int_equal(req(&r, "DELETE", "/api/v1/npcs/src/sandbox", KA, NULL),
	    200);
	assert_int_equal(req(&r, "GET", "/api/v1/npcs/src/sandbox/snapshots", KA,
	    NULL), 200);
	assert_non_null(strstr(tu_text(&r), "\"s1\""));
	assert_int_equal(req(&r, "DELETE", "/api/v1/npcs/src/sandbox/snapshots/s1",
	    KA, NULL), 200);
	assert_int_equal(req(&r, "DELETE", "/api/v1/npcs/src/sandbox/snapshots/s1",
	    KA, NULL), 404);
	assert_non_null(strstr(tu_text(&r), "src's sandbox has no snapshot named s1"));
	tu_res_free(&r);
}

/* Two creates of one owner at once (adr/0068): the second is refused (429,
 * nothing asked of the driver) while the first is under way, so the two
 * cannot both pass the count; once the first ends, the owner's next create
 * is let through, and another owner's is never held up. */
static void
test_an_owners_snapshot_creates_take_turns(void **state)
{
	struct tu_res r1 = { 0 }, r2 = { 0 }, r3 = { 0 };
	unsigned before;

	(void)state;
	tu_set("max_snapshots_per_player", "2");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "one");
	tu_npc(KA, "two");
	tu_npc(KB, "bobs");
	assert_int_equal(req(&r1, "PUT", "/api/v1/npcs/one/sandbox", KA, NULL), 200);
	assert_int_equal(req(&r1, "PUT", "/api/v1/npcs/two/sandbox", KA, NULL), 200);
	assert_int_equal(req(&r1, "PUT", "/api/v1/npcs/bobs/sandbox", KB, NULL), 200);
	assert_int_equal(req(&r1, "POST", "/api/v1/npcs/one/sandbox/snapshots", KA,
	    "{\"name\":\"s1\"}"), 201);
	/* One left of alice's 2: two creates at once, the driver slow. */
	sbx_fake_set_delay_ms(T.drv, 300);
	tu_res_free(&r1);
	memset(&r1, 0, sizeof(r1));
	tu_start_req(&r1, "POST", "/api/v1/npcs/one/sandbox/snapshots", KA,
	    "{\"name\":\"s2\"}", 13);
	tu_spin(50);
	before = snap_calls();
	assert_int_equal(req(&r2, "POST", "/api/v1/npcs/two/sandbox/snapshots", KA,
	    "{\"name\":\"s3\"}"), 429);
	assert_string_equal(tu_code(&r2), "too_many");
	assert_non_null(strstr(tu_text(&r2), "one at a time"));
	assert_int_equal(snap_calls(), before);
	/* Bob is not held up by alice's turn. */
	tu_start_req(&r3, "POST", "/api/v1/npcs/bobs/sandbox/snapshots", KB,
	    "{\"name\":\"b1\"}", 13);
	assert_true(tu_loop_until(tu_is_done, &r1, 5000));
	assert_int_equal(r1.status, 201);
	assert_true(tu_loop_until(tu_is_done, &r3, 5000));
	assert_int_equal(r3.status, 201);
	/* Alice's turn is free again: the count now says no. */
	sbx_fake_set_delay_ms(T.drv, 0);
	assert_int_equal(req(&r2, "POST", "/api/v1/npcs/two/sandbox/snapshots", KA,
	    "{\"name\":\"s3\"}"), 429);
	assert_non_null(strstr(tu_text(&r2), "max_snapshots_per_player"));
	/* ... and a delete makes room for one more. */
	assert_int_equal(req(&r2, "DELETE", "/api/v1/npcs/one/sandbox/snapshots/s1",
	    KA, NULL), 200);
	assert_int_equal(req(&r2, "POST", "/api/v1/npcs/two/sandbox/snapshots", KA,
	    "{\"name\":\"s3\"}"), 201);
	tu_res_free(&r1);
	tu_res_free(&r2);
	tu_res_free(&r3);
}

static const struct sbx_driver_ops bare_ops = { .name = "bare" };

static void
test_a_driver_without_snapshots_is_unsupported_501(void **state)
{
	struct sbx_driver d = { .ops = &bare_ops };
	struct sbx_snapshot_req q = { .name = "s1" };
	struct sbx_err err;

	(void)state;
	sbx_err_clear(&err);
	assert_null(sbx_call_snapshot_create(&d, "a", &q, NULL, NULL, &err));
	assert_string_equal(err.code, "unsupported");
	assert_int_equal(sbx_err_http_status(&err), 501);
	assert_non_null(strstr(err.message, "(bare) does not support snapshots"));
	assert_null(sbx_call_snapshot_list(&d, NULL, NULL, NULL, NULL, &err));
	assert_string_equal(err.code, "unsupported");
	assert_null(sbx_call_snapshot_delete(&d, "a", "s1", NULL, NULL, &err));
	assert_null(sbx_call_snapshot_copy(&d, "a", "b", NULL, NULL, NULL, &err));
	assert_string_equal(err.code, "unsupported");
	assert_true(sbx_snapshot_name_valid("a-1"));
	assert_true(sbx_snapshot_name_valid("abcdefghijklmnopqrstuvwxyz012345"));
	assert_false(sbx_snapshot_name_valid("abcdefghijklmnopqrstuvwxyz0123456"));
	assert_false(sbx_snapshot_name_valid("-a"));
	assert_false(sbx_snapshot_name_valid("A"));
	assert_false(sbx_snapshot_name_valid(""));
	assert_false(sbx_snapshot_name_valid(NULL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_snapshot_fork_from_snapshot_delete, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_an_owners_snapshot_creates_take_turns, tu_up, tu_down),
		cmocka_unit_test(test_a_driver_without_snapshots_is_unsupported_501),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
