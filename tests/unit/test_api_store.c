/* test_api_store.c - sandbox-api's sqlite store: principals and keyed key hashes, NPCs, egress grants, the server key file. */
#include <sys/stat.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <sqlite3.h>

#include "api_store.h"
#include "sbx_sqlite.h"
#include "sbx_log.h"
#include "sbx_token.h"

static char dir[64];

static int
setup(void **state)
{
	(void)state;
	sbx_log_init("test", 2, SBX_LOG_ERROR);
	snprintf(dir, sizeof(dir), "/tmp/sbx-api-store.XXXXXX");
	assert_non_null(mkdtemp(dir));
	return 0;
}

static int
teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	return 0;
}

static void
test_names(void **state)
{
	(void)state;
	assert_true(api_npc_name_valid("a"));
	assert_true(api_npc_name_valid("npc-1"));
	assert_false(api_npc_name_valid(""));
	assert_false(api_npc_name_valid("-a"));
	assert_false(api_npc_name_valid("A"));
	assert_false(api_npc_name_valid("a_b"));
	assert_false(api_npc_name_valid("a/b"));
	assert_true(api_npc_name_valid("a2345678901234567890123456789012345678901"));
	assert_false(api_npc_name_valid("a23456789012345678901234567890123456789012"));
	assert_true(api_principal_name_valid("alice.b_c-d"));
	assert_false(api_principal_name_valid(".alice"));
	assert_false(api_principal_name_valid("Alice"));
}

static void
test_keys_verify_only_while_active_and_survive_reopen(void **state)
{
	struct api_principal p;
	struct api_store *st;
	struct sbx_err err;
	char k1[SBX_TOKEN_GEN_LEN + 1], k2[SBX_TOKEN_GEN_LEN + 1];

	(void)state;
	st = api_store_open(dir, &err);
	assert_non_null(st);
	assert_int_equal(api_store_principal_create(st, "alice",
	    API_ROLE_PLAYER, k1, sizeof(k1), &err), 0);
	assert_int_equal(strlen(k1), SBX_TOKEN_GEN_LEN);
	assert_int_equal(api_store_principal_create(st, "root",
	    API_ROLE_OPERATOR, k2, sizeof(k2), &err), 0);
	assert_string_not_equal(k1, k2);
	assert_int_equal(api_store_principal_create(st, "alice",
	    API_ROLE_PLAYER, k2, sizeof(k2), &err), -1);
	assert_string_equal(err.code, "conflict");
	assert_int_equal(api_store_principal_create(st, "Bad Name",
	    API_ROLE_PLAYER, k2, sizeof(k2), &err), -1);
	assert_string_equal(err.code, "bad_request");
	api_store_close(st);

	/* Another process (or a restart) reads the same server key. */
	st = api_store_open(dir, &err);
	assert_non_null(st);
	assert_int_equal(api_store_authenticate(st, k1, strlen(k1), &p), 1);
	assert_string_equal(p.name, "alice");
	assert_int_equal(p.role, API_ROLE_PLAYER);
	assert_int_equal(api_store_authenticate(st, k1, strlen(k1) - 1, &p), 0);
	assert_int_equal(api_store_authenticate(st, "", 0, &p), 0);
	assert_int_equal(api_store_principal_revoke(st, "alice", &err), 0);
	assert_int_equal(api_store_authenticate(st, k1, strlen(k1), &p), 0);
	assert_int_equal(api_store_principal_revoke(st, "alice", &err), -1);
	assert_string_equal(err.code, "not_found");
	api_store_close(st);
}

static void
test_server_key_file_must_be_private_and_32_bytes(void **state)
{
	struct api_store *st;
	struct sbx_err err;
	char path[128];
	FILE *f;

	(void)state;
	st = api_store_open(dir, &err);
	assert_non_null(st);
	api_store_close(st);
	snprintf(path, sizeof(path), "%s/api.key", dir);
	chmod(path, 0644);
	assert_null(api_store_open(dir, &err));
	assert_string_equal(err.code, "config_error");
	assert_non_null(strstr(err.message, "0600"));
	chmod(path, 0600);
	f = fopen(path, "a");
	fputs("x", f);
	fclose(f);
	assert_null(api_store_open(dir, &err));
	assert_non_null(strstr(err.message, "32 bytes"));
	assert_null(api_store_open("relative/dir", &err));
}

static void
npc_count(void *arg, const struct api_npc *n)
{
	(void)n;
	(*(int *)arg)++;
}

static void
test_npcs_are_unique_and_listed_by_owner(void **state)
{
	struct api_store *st;
	struct api_npc n;
	struct sbx_err err;
	char k[SBX_TOKEN_GEN_LEN + 1];
	struct api_principal a, b;
	int count;

	(void)state;
	st = api_store_open(dir, &err);
	assert_non_null(st);
	assert_int_equal(api_store_principal_create(st, "a", API_ROLE_PLAYER,
	    k, sizeof(k), &err), 0);
	assert_int_equal(api_store_principal_create(st, "b", API_ROLE_PLAYER,
	    k, sizeof(k), &err), 0);
	assert_int_equal(api_store_principal_get(st, "a", &a, &err), 1);
	assert_int_equal(api_store_principal_get(st, "b", &b, &err), 1);
	assert_int_equal(api_store_npc_create(st, "x1", a.id, &n, &err), 0);
	assert_string_equal(n.sandbox_id, "npc-x1");
	assert_string_equal(n.owner, "a");
	assert_int_equal(api_store_npc_create(st, "x1", b.id, &n, &err), -1);
	assert_string_equal(err.code, "conflict");
	assert_int_equal(api_store_npc_create(st, "y1", b.id, &n, &err), 0);
	count = 0;
	assert_int_equal(api_store_npc_list(st, a.id, npc_count, &count,
	    &err), 0);
	assert_int_equal(count, 1);
	count = 0;
	assert_int_equal(api_store_npc_list(st, 0, npc_count, &count, &err), 0);
	assert_int_equal(count, 2);
	assert_int_equal(api_store_npc_set_egress(st, "x1", 1, "root", &err), 0);
	assert_int_equal(api_store_npc_get(st, "x1", &n, &err), 1);
	assert_int_equal(n.egress, 1);
	assert_string_equal(n.egress_by, "root");
	assert_true(n.egress_at > 0);
	assert_int_equal(api_store_npc_set_egress(st, "zz", 1, "root", &err),
	    -1);
	assert_int_equal(api_store_npc_get(st, "zz", &n, &err), 0);
	api_store_close(st);
}

/* db_cache bounds api.db's page cache (sbx_sqlite_cache): the soak's RSS
 * growth was SQLite's default 2,000 KiB cache filling (docs/bench.md). */
static int
cache_pragma(struct api_store *st)
{
	sqlite3_stmt *q = NULL;
	int v = 0;

	assert_int_equal(sqlite3_prepare_v2(api_store_db(st),
	    "PRAGMA cache_size;", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	v = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	return v;
}

static void
test_db_cache_bounds_the_page_cache(void **state)
{
	struct api_store *st;
	struct sbx_err err;

	(void)state;
	st = api_store_open(dir, &err);
	assert_non_null(st);
	assert_int_equal(sbx_sqlite_cache(api_store_db(st), 256 * 1024, &err), 0);
	assert_int_equal(cache_pragma(st), -256);
	/* Below the floor: 64 KiB. */
	assert_int_equal(sbx_sqlite_cache(api_store_db(st), 1000, &err), 0);
	assert_int_equal(cache_pragma(st), -64);
	api_store_close(st);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test_setup_teardown(
		    test_keys_verify_only_while_active_and_survive_reopen, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_server_key_file_must_be_private_and_32_bytes, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_npcs_are_unique_and_listed_by_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_db_cache_bounds_the_page_cache, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
