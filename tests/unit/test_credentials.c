/* test_credentials.c - systemd credentials ($CREDENTIALS_DIRECTORY/broker-token) as both daemons' default token file (ADR 0011). */
#include <sys/stat.h>

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api.h"
#include "broker.h"
#include "driver_broker.h"
#include "sbx_cred.h"
#include "sbx_token.h"

#define TOKEN "cred-token-0123456789abcdefXYZ"

static char dir[64];
static char cred[128];

/* A credentials directory as systemd makes it: 0500, a 0400 file per credential. */
static int
setup(void **state)
{
	int fd;

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/sbx-cred-XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(cred, sizeof(cred), "%s/%s", dir, SBX_CRED_BROKER_TOKEN);
	if ((fd = open(cred, O_WRONLY | O_CREAT | O_EXCL, 0400)) == -1)
		return -1;
	if (write(fd, TOKEN "\n", sizeof(TOKEN)) != (ssize_t)sizeof(TOKEN))
		return -1;
	close(fd);
	chmod(dir, 0500);
	unsetenv("DOCKER_HOST");
	unsetenv("SBX_TOKEN_FILE");
	unsetenv("SBX_BROKER_TOKEN_FILE");
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	unsetenv("CREDENTIALS_DIRECTORY");
	chmod(dir, 0700);
	unlink(cred);
	rmdir(dir);
	return 0;
}

static void
test_credential_path_only_for_an_absolute_dir_and_an_existing_name(void **state)
{
	char buf[256];

	(void)state;
	unsetenv("CREDENTIALS_DIRECTORY");
	assert_int_equal(sbx_credential_path("broker-token", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	setenv("CREDENTIALS_DIRECTORY", "", 1);
	assert_int_equal(sbx_credential_path("broker-token", buf, sizeof(buf)), 0);
	setenv("CREDENTIALS_DIRECTORY", dir + 1, 1);        /* relative */
	assert_int_equal(sbx_credential_path("broker-token", buf, sizeof(buf)), 0);
	setenv("CREDENTIALS_DIRECTORY", dir, 1);
	assert_int_equal(sbx_credential_path("broker-token", buf, sizeof(buf)), 1);
	assert_string_equal(buf, cred);
	assert_int_equal(sbx_credential_path("api-key", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	/* Names never leave the directory. */
	assert_int_equal(sbx_credential_path("../etc", buf, sizeof(buf)), 0);
	assert_int_equal(sbx_credential_path("..", buf, sizeof(buf)), 0);
	assert_int_equal(sbx_credential_path("a/b", buf, sizeof(buf)), 0);
	assert_int_equal(sbx_credential_path("", buf, sizeof(buf)), 0);
	assert_int_equal(sbx_credential_path(NULL, buf, sizeof(buf)), 0);
	/* Too small a buffer: not found rather than a cut path. */
	assert_int_equal(sbx_credential_path("broker-token", buf, 8), 0);
	assert_string_equal(buf, "");
}

static int
broker_load(struct broker_config *cfg, const char *const *args,
    struct sbx_err *err)
{
	const char *argv[8] = { "sandbox-broker" };
	int argc = 1;

	memset(cfg, 0, sizeof(*cfg));
	while (args != NULL && *args != NULL)
		argv[argc++] = *args++;
	if (sbx_config_load(broker_config_keys, cfg, argc, (char **)argv,
	    NULL, err) == -1)
		return -1;
	return broker_config_finish(cfg, "/opt/sbx/bin/sandbox-broker", err);
}

static void
test_broker_reads_its_token_from_the_credential(void **state)
{
	static const char *const flag[] = { "--token-file", "/etc/sbx/t", NULL };
	struct broker_config cfg;
	struct sbx_token tok;
	struct sbx_err err;

	(void)state;
	sbx_err_clear(&err);
	/* No credential: no token file, as before (env SBX_BROKER_TOKEN). */
	assert_int_equal(broker_load(&cfg, NULL, &err), 0);
	assert_null(cfg.token_file);
	sbx_config_free(broker_config_keys, &cfg);

	setenv("CREDENTIALS_DIRECTORY", dir, 1);
	assert_int_equal(broker_load(&cfg, NULL, &err), 0);
	assert_non_null(cfg.token_file);
	assert_string_equal(cfg.token_file, cred);
	/* The 0400 file systemd writes is a valid token file. */
	assert_int_equal(sbx_token_load(&tok, cfg.token_file, NULL, &err), 0);
	assert_int_equal(sbx_token_verify(&tok, TOKEN, strlen(TOKEN)), 1);
	assert_int_equal(sbx_token_verify(&tok, "cred-token-0123456789abcdefXY",
	    strlen(TOKEN) - 1), 0);
	sbx_token_clear(&tok);
	sbx_config_free(broker_config_keys, &cfg);

	/* A configured token_file wins over the credential. */
	assert_int_equal(broker_load(&cfg, flag, &err), 0);
	assert_string_equal(cfg.token_file, "/etc/sbx/t");
	sbx_config_free(broker_config_keys, &cfg);
	setenv("SBX_TOKEN_FILE", "/etc/sbx/env", 1);
	assert_int_equal(broker_load(&cfg, NULL, &err), 0);
	assert_string_equal(cfg.token_file, "/etc/sbx/env");
	sbx_config_free(broker_config_keys, &cfg);
	unsetenv("SBX_TOKEN_FILE");
}

static int
api_load(struct api_config *cfg, const char *const *args, struct sbx_err *err)
{
	const char *argv[8] = { "sandbox-api" };
	int argc = 1;

	memset(cfg, 0, sizeof(*cfg));
	while (args != NULL && *args != NULL)
		argv[argc++] = *args++;
	if (sbx_config_load(api_config_keys, cfg, argc, (char **)argv, NULL,
	    err) == -1 || api_config_check(cfg, err) == -1)
		return -1;
	return api_config_finish(cfg, err);
}

static void
test_api_reads_the_broker_token_from_the_credential(void **state)
{
	static const char *const flag[] = { "--broker-token-file", "/etc/sbx/t",
	    NULL };
	struct api_config cfg;
	struct sbx_err err;
	char *tok = NULL;
	size_t len = 0;

	(void)state;
	sbx_err_clear(&err);
	assert_int_equal(api_load(&cfg, NULL, &err), 0);
	assert_null(cfg.broker_token_file);
	sbx_config_free(api_config_keys, &cfg);

	setenv("CREDENTIALS_DIRECTORY", dir, 1);
	assert_int_equal(api_load(&cfg, NULL, &err), 0);
	assert_non_null(cfg.broker_token_file);
	assert_string_equal(cfg.broker_token_file, cred);
	/* What the api then sends to the broker, newline trimmed. */
	assert_int_equal(sbx_broker_token_read(cfg.broker_token_file,
	    "env-token-must-not-be-used-0123", &tok, &len, &err), 0);
	assert_int_equal(len, strlen(TOKEN));
	assert_memory_equal(tok, TOKEN, len);
	sbx_broker_token_free(tok);
	sbx_config_free(api_config_keys, &cfg);

	assert_int_equal(api_load(&cfg, flag, &err), 0);
	assert_string_equal(cfg.broker_token_file, "/etc/sbx/t");
	sbx_config_free(api_config_keys, &cfg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_credential_path_only_for_an_absolute_dir_and_an_existing_name,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_broker_reads_its_token_from_the_credential, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_api_reads_the_broker_token_from_the_credential, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
