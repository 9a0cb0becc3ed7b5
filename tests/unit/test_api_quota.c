/* test_api_quota.c - max_sandboxes_per_player over real sockets with the fake driver: the 11th sandbox is 429, operators are exempt, destroy and failures give slots back. */
#include "api_testutil.h"

#include "driver_fake.h"

static char KA[64], KB[64], KOP[64];   /* player alice, player bob, operator */

static void
npc(const char *key, const char *name)
{
	struct tu_res r = { 0 };
	char body[128];

	snprintf(body, sizeof(body), "{\"name\":\"%s\"}", name);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", key, body), 201);
	tu_res_free(&r);
}

static int
ensure(struct tu_res *r, const char *key, const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), "/api/v1/npcs/%s/sandbox", name);
	return tu_req(r, "PUT", path, key, NULL);
}

static unsigned
ensures(void)
{
	return sbx_fake_stats(T.drv)->calls[SBX_FAKE_ENSURE];
}

static void
test_eleventh_sandbox_of_a_player_is_429_with_a_sentence(void **state)
{
	struct tu_res r = { 0 };
	char name[32];
	unsigned before;
	int i;

	(void)state;
	tu_start_fake(KA, KB, KOP);
	for (i = 0; i < 11; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		npc(KA, name);
	}
	for (i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		assert_int_equal(ensure(&r, KA, name), 200);
	}
	before = ensures();
	assert_int_equal(ensure(&r, KA, "n10"), 429);
	assert_string_equal(tu_code(&r), "too_many");
	assert_non_null(strstr(tu_text(&r), "alice already has 10 sandboxes"));
	assert_non_null(strstr(tu_text(&r), "max_sandboxes_per_player"));
	/* Refused before the broker was asked; nothing was created. */
	assert_int_equal(ensures(), before);
	assert_int_equal(sbx_fake_state(T.drv, "npc-n10"), SBX_STATE_ABSENT);
	/* Re-ensuring a sandbox alice already has is no new one. */
	assert_int_equal(ensure(&r, KA, "n3"), 200);
	/* Another player has slots of its own. */
	npc(KB, "b0");
	assert_int_equal(ensure(&r, KB, "b0"), 200);
	/* A destroy gives the slot back. */
	assert_int_equal(tu_req(&r, "DELETE", "/api/v1/npcs/n0/sandbox", KA,
	    NULL), 200);
	assert_int_equal(ensure(&r, KA, "n10"), 200);
	assert_int_equal(ensure(&r, KA, "n0"), 429);
	tu_res_free(&r);
}

static void
test_operator_ensures_are_exempt(void **state)
{
	struct tu_res r = { 0 };
	char name[32];
	int i;

	(void)state;
	tu_set("max_sandboxes_per_player", "2");
	tu_start_fake(KA, KB, KOP);
	for (i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "o%d", i);
		npc(KOP, name);
		assert_int_equal(ensure(&r, KOP, name), 200);
	}
	npc(KA, "a0");
	npc(KA, "a1");
	npc(KA, "a2");
	assert_int_equal(ensure(&r, KA, "a0"), 200);
	assert_int_equal(ensure(&r, KA, "a1"), 200);
	assert_int_equal(ensure(&r, KA, "a2"), 429);
	assert_non_null(strstr(tu_text(&r), "alice already has 2 sandboxes"));
	/* An operator may still give alice's NPC its sandbox. */
	assert_int_equal(ensure(&r, KOP, "a2"), 200);
	assert_int_equal(sbx_fake_state(T.drv, "npc-a2"), SBX_STATE_RUNNING);
	/* That one counts for alice: her next new one is still refused. */
	npc(KA, "a3");
	assert_int_equal(ensure(&r, KA, "a3"), 429);
	tu_res_free(&r);
}

static void
test_a_failed_ensure_gives_its_slot_back(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	tu_set("max_sandboxes_per_player", "1");
	tu_start_fake(KA, KB, KOP);
	npc(KA, "f0");
	npc(KA, "f1");
	sbx_fake_fail_next(T.drv, SBX_FAKE_ENSURE, SBX_E_RUNTIME_UNAVAILABLE, 0);
	assert_true(ensure(&r, KA, "f0") >= 500);
	sbx_fake_fail_next(T.drv, SBX_FAKE_ENSURE, SBX_E_RUNTIME_UNAVAILABLE, 1);
	assert_true(ensure(&r, KA, "f0") >= 500);
	/* Neither failure kept the one slot. */
	assert_int_equal(ensure(&r, KA, "f1"), 200);
	assert_int_equal(ensure(&r, KA, "f0"), 429);
	tu_res_free(&r);
}

static void
test_store_claim_counts_per_owner_and_is_idempotent(void **state)
{
	struct api_store *st;
	struct api_npc a, b;
	struct sbx_err err;
	char key[64];
	int64_t n = -1;
	int claimed = -1;

	(void)state;
	tu_principal("carol", API_ROLE_PLAYER, key);
	st = api_store_open(T.dir, &err);
	assert_non_null(st);
	assert_int_equal(api_store_npc_create(st, "c0", 1, &a, &err), 0);
	assert_int_equal(api_store_npc_create(st, "c1", 1, &b, &err), 0);
	assert_int_equal(api_store_sandbox_claim(st, &a, 1, &claimed, &err), 1);
	assert_int_equal(claimed, 1);
	assert_int_equal(api_store_sandbox_claim(st, &a, 1, &claimed, &err), 1);
	assert_int_equal(claimed, 0);
	assert_int_equal(api_store_sandbox_claim(st, &b, 1, &claimed, &err), 0);
	assert_int_equal(claimed, 0);
	assert_int_equal(api_store_sandbox_count(st, 1, &n, &err), 0);
	assert_int_equal(n, 1);
	/* No cap: recorded all the same. */
	assert_int_equal(api_store_sandbox_claim(st, &b, 0, &claimed, &err), 1);
	assert_int_equal(api_store_sandbox_count(st, 1, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(api_store_sandbox_release(st, a.id, &err), 0);
	assert_int_equal(api_store_sandbox_release(st, a.id, &err), 0);
	assert_int_equal(api_store_sandbox_count(st, 1, &n, &err), 0);
	assert_int_equal(n, 1);
	api_store_close(st);
	/* The count survives a restart of the api. */
	st = api_store_open(T.dir, &err);
	assert_non_null(st);
	assert_int_equal(api_store_sandbox_count(st, 1, &n, &err), 0);
	assert_int_equal(n, 1);
	api_store_close(st);
}

static void
test_config_refuses_a_cap_of_zero(void **state)
{
	struct sbx_err err;

	(void)state;
	assert_int_equal(api_config_check(&T.cfg, &err), 0);
	assert_int_equal(T.cfg.max_sandboxes_per_player, 10);
	tu_set("max_sandboxes_per_player", "0");
	assert_int_equal(api_config_check(&T.cfg, &err), -1);
	assert_non_null(strstr(err.message, "max_sandboxes_per_player"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_eleventh_sandbox_of_a_player_is_429_with_a_sentence,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(test_operator_ensures_are_exempt,
		    tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_a_failed_ensure_gives_its_slot_back, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_store_claim_counts_per_owner_and_is_idempotent, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(test_config_refuses_a_cap_of_zero,
		    tu_up, tu_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
