/* test_broker_config.c - sandbox-broker configuration: defaults, derived values and refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "broker.h"

static struct broker_config cfg;
static struct sbx_err err;

/* Loads argv (after the program name) and finishes; returns the result. */
static int
load(const char *const *args)
{
	const char *argv[32] = { "sandbox-broker" };
	int argc = 1;

	sbx_config_free(broker_config_keys, &cfg);
	memset(&cfg, 0, sizeof(cfg));
	while (args != NULL && *args != NULL)
		argv[argc++] = *args++;
	if (sbx_config_load(broker_config_keys, &cfg, argc, (char **)argv,
	    NULL, &err) == -1)
		return -1;
	return broker_config_finish(&cfg, "/opt/sbx/bin/sandbox-broker", &err);
}

static int
teardown(void **state)
{
	(void)state;
	sbx_config_free(broker_config_keys, &cfg);
	unsetenv("DOCKER_HOST");
	return 0;
}

static void
test_defaults_match_the_spec(void **state)
{
	(void)state;
	unsetenv("DOCKER_HOST");
	assert_int_equal(load(NULL), 0);
	assert_string_equal(cfg.listen, "unix:/run/sbx/broker.sock");
	assert_string_equal(cfg.runtime, "unix:/var/run/docker.sock");
	assert_null(cfg.token_file);
	assert_int_equal(cfg.nano_cpus, 1000000000);
	assert_int_equal(cfg.nano_cpus_max, 2000000000);
	assert_int_equal(cfg.memory, 512LL * 1024 * 1024);
	assert_int_equal(cfg.exec_timeout, 60000);
	assert_int_equal(cfg.idle_timeout, 30LL * 60 * 1000);
	assert_int_equal(cfg.socket_mode, 0660);
	assert_int_equal(cfg.warm_pool, 0);  /* adr/0067: no pool unless asked */
	/* Not next to the binary in /opt/sbx/bin: the installed layout. */
	assert_string_equal(cfg.helper_path,
	    "/opt/sbx/bin/../libexec/sbx/sbx-helper");
}

static void
test_runtime_defaults_to_docker_host(void **state)
{
	static const char *const flag[] = { "--runtime", "unix:/b.sock", NULL };

	(void)state;
	setenv("DOCKER_HOST", "unix:///tmp/p/podman.sock", 1);
	assert_int_equal(load(NULL), 0);
	assert_string_equal(cfg.runtime, "unix:/tmp/p/podman.sock");
	assert_int_equal(load(flag), 0);     /* a flag wins over DOCKER_HOST */
	assert_string_equal(cfg.runtime, "unix:/b.sock");
	setenv("DOCKER_HOST", "tcp://10.0.0.1:2375", 1);
	assert_int_equal(load(NULL), -1);    /* only unix sockets */
	assert_string_equal(err.code, SBX_E_CONFIG);
}

static void
test_bad_values_are_refused_naming_the_key(void **state)
{
	static const struct {
		const char *args[5];
		const char *word;
	} cases[] = {
		{ { "--cpus", "abc", NULL }, "cpus" },
		{ { "--cpus", "0", NULL }, "cpus" },
		{ { "--cpus", "3", NULL }, "cpus_max" },
		{ { "--memory", "4g", NULL }, "memory_max" },
		{ { "--pids", "0", NULL }, "pids" },
		{ { "--exec-timeout", "1h", NULL }, "exec_timeout_max" },
		{ { "--listen", "nowhere", NULL }, "listen" },
		{ { "--listen", "unix:relative.sock", NULL }, "listen" },
		{ { "--state-dir", "relative", NULL }, "state_dir" },
		{ { "--log-level", "loud", NULL }, "log_level" },
		{ { "--socket-mode", "4096", NULL }, "socket_mode" },
		{ { "--max-sandboxes", "0", NULL }, "max_sandboxes" },
		{ { "--warm-pool", "-1", NULL }, "warm_pool" },
		{ { "--warm-pool", "65", NULL }, "warm_pool" },
		{ { "--warm-pool", "3", "--max-sandboxes", "2" }, "warm_pool" },
	};
	size_t i;

	(void)state;
	unsetenv("DOCKER_HOST");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(load(cases[i].args), -1);
		assert_string_equal(err.code, SBX_E_CONFIG);
		assert_non_null(strstr(err.message, cases[i].word));
	}
	assert_int_equal(load((const char *const[]){ "--cpus", "0.25",
	    "--listen", "127.0.0.1:0", NULL }), 0);
	assert_int_equal(cfg.nano_cpus, 250000000);
}

/* --socket-mode is written as chmod writes it (0660); the decimal form the
 * docs gave before (432) still means the same bits. */
static void
test_socket_mode_is_octal_as_written(void **state)
{
	(void)state;
	unsetenv("DOCKER_HOST");
	assert_int_equal(load((const char *const[]){ "--socket-mode", "0660",
	    NULL }), 0);
	assert_int_equal(cfg.socket_mode, 0660);
	assert_int_equal(load((const char *const[]){ "--socket-mode", "0600",
	    NULL }), 0);
	assert_int_equal(cfg.socket_mode, 0600);
	assert_int_equal(load((const char *const[]){ "--socket-mode", "432",
	    NULL }), 0);
	assert_int_equal(cfg.socket_mode, 0660);
	setenv("SBX_SOCKET_MODE", "0640", 1);
	assert_int_equal(load(NULL), 0);
	unsetenv("SBX_SOCKET_MODE");
	assert_int_equal(cfg.socket_mode, 0640);
	/* not octal digits, or not a number at all: refused naming the key */
	assert_int_equal(load((const char *const[]){ "--socket-mode", "0680",
	    NULL }), -1);
	assert_non_null(strstr(err.message, "socket_mode"));
	assert_int_equal(load((const char *const[]){ "--socket-mode", "rw",
	    NULL }), -1);
	assert_non_null(strstr(err.message, "socket_mode"));
	assert_int_equal(load((const char *const[]){ "--socket-mode", "01777",
	    NULL }), -1);
	assert_string_equal(err.code, SBX_E_CONFIG);
}

static void
test_default_image_is_the_one_the_tree_builds(void **state)
{
	(void)state;
	unsetenv("DOCKER_HOST");
	assert_int_equal(load(NULL), 0);
	/* deploy/image/build.sh's IMAGE default */
	assert_string_equal(cfg.image, "sbx-default:bookworm");
}

static void
test_allowlist_is_image_then_images(void **state)
{
	const char **l;

	(void)state;
	assert_int_equal(load((const char *const[]){ "--image", "a:1",
	    "--images", "b:2,c:3", NULL }), 0);
	l = broker_config_allowlist(&cfg);
	assert_non_null(l);
	assert_string_equal(l[0], "a:1");
	assert_string_equal(l[1], "b:2");
	assert_string_equal(l[2], "c:3");
	assert_null(l[3]);
	free(l);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_defaults_match_the_spec, teardown),
		cmocka_unit_test_teardown(test_runtime_defaults_to_docker_host, teardown),
		cmocka_unit_test_teardown(test_bad_values_are_refused_naming_the_key, teardown),
		cmocka_unit_test_teardown(test_socket_mode_is_octal_as_written,
		    teardown),
		cmocka_unit_test_teardown(test_default_image_is_the_one_the_tree_builds,
		    teardown),
		cmocka_unit_test_teardown(test_allowlist_is_image_then_images, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
