/* test_sbx_config.c - config precedence (default < file < env < flag), errors, parsers, redaction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>

#include <cmocka.h>

#include "sbx_config.h"
#include "sbx_log.h"

#define CANARY "CANARY-f00dfeed-never-print-me"

struct tcfg {
	char *listen;
	long long workers;
	int egress;
	long long idle_ms;
	long long memory;
	char **images;
	char *api_key;     /* secret */
	long long seed;    /* secret int: bad values must not be echoed */
	char **peers;      /* secret list */
};

static const struct sbx_config_key keys[] = {
	{ "listen", SBX_CFG_STRING, offsetof(struct tcfg, listen), "127.0.0.1:8080", 0,
	    "address to listen on" },
	{ "workers", SBX_CFG_INT, offsetof(struct tcfg, workers), "4", 0, "workers" },
	{ "egress", SBX_CFG_BOOL, offsetof(struct tcfg, egress), "false", 0, "egress" },
	{ "idle_timeout", SBX_CFG_DURATION_MS, offsetof(struct tcfg, idle_ms), "30m", 0,
	    "stop sandboxes idle longer than this" },
	{ "memory", SBX_CFG_BYTES, offsetof(struct tcfg, memory), "512m", 0, "memory" },
	{ "images", SBX_CFG_STRLIST, offsetof(struct tcfg, images), "busybox", 0,
	    "image allowlist" },
	{ "api_key", SBX_CFG_STRING, offsetof(struct tcfg, api_key), NULL, 1, "key" },
	{ "seed", SBX_CFG_INT, offsetof(struct tcfg, seed), NULL, 1, "seed" },
	{ "peers", SBX_CFG_STRLIST, offsetof(struct tcfg, peers), NULL, 1, "peers" },
	{ NULL, 0, 0, NULL, 0, NULL },
};

static char tmpdir[64];

static void
clear_env(void)
{
	static const char *vars[] = { "SBX_LISTEN", "SBX_WORKERS", "SBX_EGRESS",
		"SBX_IDLE_TIMEOUT", "SBX_MEMORY", "SBX_IMAGES", "SBX_API_KEY",
		"SBX_SEED", "SBX_PEERS", "SBX_CONFIG", NULL };
	size_t i;

	for (i = 0; vars[i] != NULL; i++)
		unsetenv(vars[i]);
}

static int
setup(void **state)
{
	(void)state;
	clear_env();
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	clear_env();
	return 0;
}

static int
group_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sbx-test-config-XXXXXX");
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int
group_teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static char *
write_file(const char *name, const char *content)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
	return path;
}

/* Loads with argv given as a NULL-terminated list after "prog". */
static int
load(struct tcfg *c, struct sbx_config_opts *opts, struct sbx_err *err, ...)
{
	char *argv[32];
	int argc = 0;
	va_list ap;
	char *a;

	argv[argc++] = "prog";
	va_start(ap, err);
	while ((a = va_arg(ap, char *)) != NULL && argc < 31)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	memset(c, 0x5a, sizeof(*c)); /* load must not rely on a zeroed struct */
	sbx_err_clear(err);
	return sbx_config_load(keys, c, argc, argv, opts, err);
}

static char *
print_to_string(const struct tcfg *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	sbx_config_print(f, keys, c);
	fclose(f);
	return buf;
}

static void
test_defaults_when_nothing_else_is_given(void **state)
{
	struct sbx_err err;
	struct tcfg c;

	(void)state;
	assert_int_equal(load(&c, NULL, &err, NULL), 0);
	assert_string_equal(c.listen, "127.0.0.1:8080");
	assert_int_equal(c.workers, 4);
	assert_int_equal(c.egress, 0);
	assert_int_equal(c.idle_ms, 30 * 60 * 1000);
	assert_int_equal(c.memory, 512LL * 1024 * 1024);
	assert_non_null(c.images);
	assert_string_equal(c.images[0], "busybox");
	assert_null(c.images[1]);
	assert_null(c.api_key);
	assert_int_equal(c.seed, 0);
	assert_null(c.peers);
	sbx_config_free(keys, &c);
	assert_null(c.listen);
	assert_null(c.images);
}

/*
 * One row per key: the value each layer gives. Loading with layers
 * 0..n must show the value of the highest layer present.
 */
static void
test_each_layer_overrides_the_one_below(void **state)
{
	struct sbx_err err;
	struct sbx_config_opts opts;
	struct tcfg c;
	char *file;
	int layer;

	(void)state;
	file = write_file("layers.json",
	    "{\"listen\":\"file:1\",\"workers\":10,\"egress\":true,"
	    "\"idle_timeout\":\"2s\",\"memory\":\"1g\",\"images\":[\"f1\",\"f2\"]}");
	for (layer = 0; layer <= 3; layer++) {
		clear_env();
		if (layer >= 1)
			setenv("SBX_CONFIG", file, 1);
		if (layer >= 2) {
			setenv("SBX_LISTEN", "env:2", 1);
			setenv("SBX_WORKERS", "20", 1);
			setenv("SBX_EGRESS", "no", 1);
			setenv("SBX_IDLE_TIMEOUT", "3m", 1);
			setenv("SBX_MEMORY", "64k", 1);
			setenv("SBX_IMAGES", "e1, e2 ,e3", 1);
		}
		memset(&opts, 0, sizeof(opts));
		if (layer >= 3)
			assert_int_equal(load(&c, &opts, &err, "--listen", "flag:3",
			    "--workers=30", "--egress", "--idle-timeout", "1h",
			    "--memory=2t", "--images", "g1", NULL), 0);
		else
			assert_int_equal(load(&c, &opts, &err, NULL), 0);
		switch (layer) {
		case 0:
			assert_string_equal(c.listen, "127.0.0.1:8080");
			assert_int_equal(c.workers, 4);
			assert_int_equal(c.egress, 0);
			assert_int_equal(c.idle_ms, 1800000);
			assert_int_equal(c.memory, 536870912LL);
			assert_string_equal(c.images[0], "busybox");
			assert_null(opts.config_file);
			break;
		case 1:
			assert_string_equal(c.listen, "file:1");
			assert_int_equal(c.workers, 10);
			assert_int_equal(c.egress, 1);
			assert_int_equal(c.idle_ms, 2000);
			assert_int_equal(c.memory, 1073741824LL);
			assert_string_equal(c.images[0], "f1");
			assert_string_equal(c.images[1], "f2");
			assert_null(c.images[2]);
			assert_string_equal(opts.config_file, file);
			break;
		case 2:
			assert_string_equal(c.listen, "env:2");
			assert_int_equal(c.workers, 20);
			assert_int_equal(c.egress, 0);
			assert_int_equal(c.idle_ms, 180000);
			assert_int_equal(c.memory, 65536);
			assert_string_equal(c.images[0], "e1");
			assert_string_equal(c.images[1], "e2");
			assert_string_equal(c.images[2], "e3");
			assert_null(c.images[3]);
			break;
		case 3:
			assert_string_equal(c.listen, "flag:3");
			assert_int_equal(c.workers, 30);
			assert_int_equal(c.egress, 1);
			assert_int_equal(c.idle_ms, 3600000);
			assert_int_equal(c.memory, 2199023255552LL);
			assert_string_equal(c.images[0], "g1");
			assert_null(c.images[1]);
			break;
		}
		assert_int_equal(opts.nargs, 0);
		sbx_config_opts_free(&opts);
		sbx_config_free(keys, &c);
	}
}

static void
test_config_flag_beats_sbx_config_env(void **state)
{
	struct sbx_config_opts opts;
	struct sbx_err err;
	struct tcfg c;
	char a[300], b[300];

	(void)state;
	snprintf(a, sizeof(a), "%s", write_file("a.json", "{\"listen\":\"from-a\"}"));
	snprintf(b, sizeof(b), "%s", write_file("b.json", "{\"listen\":\"from-b\"}"));
	setenv("SBX_CONFIG", a, 1);
	memset(&opts, 0, sizeof(opts));
	assert_int_equal(load(&c, &opts, &err, "--config", b, NULL), 0);
	assert_string_equal(c.listen, "from-b");
	assert_string_equal(opts.config_file, b);
	sbx_config_opts_free(&opts);
	sbx_config_free(keys, &c);
	/* --config=FILE spelling, after another flag's value. */
	memset(&opts, 0, sizeof(opts));
	{
		char eq[320];

		snprintf(eq, sizeof(eq), "--config=%s", b);
		assert_int_equal(load(&c, &opts, &err, "--workers", "7", eq, NULL), 0);
	}
	assert_string_equal(c.listen, "from-b");
	assert_int_equal(c.workers, 7);
	sbx_config_opts_free(&opts);
	sbx_config_free(keys, &c);
	/* A missing default config file is fine; a named missing one is not. */
	unsetenv("SBX_CONFIG");
	memset(&opts, 0, sizeof(opts));
	opts.default_config_file = "/nonexistent/sbx/config.json";
	assert_int_equal(load(&c, &opts, &err, NULL), 0);
	assert_null(opts.config_file);
	sbx_config_free(keys, &c);
	assert_int_equal(load(&c, &opts, &err, "--config", "/nonexistent/x.json", NULL), -1);
	assert_string_equal(err.code, SBX_E_CONFIG);
	assert_non_null(strstr(err.message, "/nonexistent/x.json"));
	assert_int_equal(sbx_config_exit_code(&err), 78);
	sbx_config_opts_free(&opts);
	sbx_config_free(keys, &c);
}

static void
test_unknown_key_in_file_is_a_config_error_naming_it(void **state)
{
	struct sbx_err err;
	struct tcfg c;
	char *file;

	(void)state;
	file = write_file("unknown.json", "{\"listen\":\"x\",\"idle_timout\":\"5m\"}");
	setenv("SBX_CONFIG", file, 1);
	assert_int_equal(load(&c, NULL, &err, NULL), -1);
	assert_string_equal(err.code, SBX_E_CONFIG);
	assert_non_null(strstr(err.message, "idle_timout"));
	assert_non_null(strstr(err.message, file));
	assert_int_equal(sbx_config_exit_code(&err), SBX_EXIT_CONFIG);
	sbx_config_free(keys, &c);

	file = write_file("notobj.json", "[1,2]");
	setenv("SBX_CONFIG", file, 1);
	assert_int_equal(load(&c, NULL, &err, NULL), -1);
	assert_non_null(strstr(err.message, "object"));
	sbx_config_free(keys, &c);

	file = write_file("wrongtype.json", "{\"workers\":\"many\"}");
	setenv("SBX_CONFIG", file, 1);
	assert_int_equal(load(&c, NULL, &err, NULL), -1);
	assert_non_null(strstr(err.message, "workers"));
	sbx_config_free(keys, &c);

	file = write_file("wrongtype2.json", "{\"images\":\"a,b\"}");
	setenv("SBX_CONFIG", file, 1);
	assert_int_equal(load(&c, NULL, &err, NULL), -1);
	assert_non_null(strstr(err.message, "images"));
	sbx_config_free(keys, &c);

	/* Broken JSON holding a secret: the message gives the place, not the text. */
	file = write_file("broken.json", "{\"api_key\":\"" CANARY "\" oops}");
	setenv("SBX_CONFIG", file, 1);
	assert_int_equal(load(&c, NULL, &err, NULL), -1);
	assert_string_equal(err.code, SBX_E_CONFIG);
	assert_non_null(strstr(err.message, "line 1"));
	assert_null(strstr(err.message, CANARY));
	sbx_config_free(keys, &c);

	file = write_file("dup.json", "{\"listen\":\"a\",\"listen\":\"b\"}");
	setenv("SBX_CONFIG", file, 1);
	assert_int_equal(load(&c, NULL, &err, NULL), -1);
	sbx_config_free(keys, &c);
}

static void
test_unknown_flag_is_a_usage_error_naming_it(void **state)
{
	struct sbx_config_opts opts;
	struct sbx_err err;
	struct tcfg c;

	(void)state;
	assert_int_equal(load(&c, NULL, &err, "--lisen", "x", NULL), -1);
	assert_string_equal(err.code, SBX_E_USAGE);
	assert_non_null(strstr(err.message, "--lisen"));
	assert_int_equal(sbx_config_exit_code(&err), SBX_EXIT_USAGE);
	sbx_config_free(keys, &c);

	/* The value after '=' is not echoed. */
	assert_int_equal(load(&c, NULL, &err, "--token=" CANARY, NULL), -1);
	assert_non_null(strstr(err.message, "--token"));
	assert_null(strstr(err.message, CANARY));
	sbx_config_free(keys, &c);

	/* Underscore spelling, single dash, standard flags not accepted. */
	assert_int_equal(load(&c, NULL, &err, "--idle_timeout", "1s", NULL), -1);
	sbx_config_free(keys, &c);
	assert_int_equal(load(&c, NULL, &err, "-x", NULL), -1);
	sbx_config_free(keys, &c);
	memset(&opts, 0, sizeof(opts));
	opts.accept = SBX_OPT_HELP;
	assert_int_equal(load(&c, &opts, &err, "--check", NULL), -1);
	assert_string_equal(err.code, SBX_E_USAGE);
	sbx_config_free(keys, &c);
	/* A flag missing its value; --no- on a non-bool. */
	assert_int_equal(load(&c, NULL, &err, "--listen", NULL), -1);
	assert_non_null(strstr(err.message, "--listen"));
	sbx_config_free(keys, &c);
	assert_int_equal(load(&c, NULL, &err, "--no-listen", NULL), -1);
	sbx_config_free(keys, &c);
	assert_int_equal(load(&c, NULL, &err, "--config", NULL), -1);
	assert_string_equal(err.code, SBX_E_USAGE);
	sbx_config_free(keys, &c);
	/* Positionals when the process takes none. */
	assert_int_equal(load(&c, NULL, &err, "stray", NULL), -1);
	assert_string_equal(err.code, SBX_E_USAGE);
	sbx_config_free(keys, &c);
	sbx_config_opts_free(&opts);
}

static void
test_bad_values_name_the_key_and_never_a_secret(void **state)
{
	struct sbx_err err;
	struct tcfg c;

	(void)state;
	assert_int_equal(load(&c, NULL, &err, "--idle-timeout", "5x", NULL), -1);
	assert_string_equal(err.code, SBX_E_USAGE);
	assert_non_null(strstr(err.message, "idle_timeout"));
	assert_non_null(strstr(err.message, "5x"));
	sbx_config_free(keys, &c);

	setenv("SBX_WORKERS", "abc", 1);
	assert_int_equal(load(&c, NULL, &err, NULL), -1);
	assert_string_equal(err.code, SBX_E_CONFIG);
	assert_non_null(strstr(err.message, "SBX_WORKERS"));
	sbx_config_free(keys, &c);
	unsetenv("SBX_WORKERS");

	setenv("SBX_SEED", CANARY, 1);
	assert_int_equal(load(&c, NULL, &err, NULL), -1);
	assert_non_null(strstr(err.message, "seed"));
	assert_null(strstr(err.message, CANARY));
	sbx_config_free(keys, &c);
	unsetenv("SBX_SEED");

	assert_int_equal(load(&c, NULL, &err, "--seed=" CANARY, NULL), -1);
	assert_string_equal(err.code, SBX_E_USAGE);
	assert_null(strstr(err.message, CANARY));
	sbx_config_free(keys, &c);

	assert_int_equal(load(&c, NULL, &err, "--egress=maybe", NULL), -1);
	sbx_config_free(keys, &c);
	assert_int_equal(load(&c, NULL, &err, "--memory", "-1k", NULL), -1);
	sbx_config_free(keys, &c);
	assert_int_equal(load(&c, NULL, &err, "--workers", "99999999999999999999", NULL), -1);
	sbx_config_free(keys, &c);
}

static void
test_durations_and_bytes_parse(void **state)
{
	static const struct {
		const char *s;
		long long ms; /* -1: refused */
	} durs[] = {
		{ "0", 0 }, { "250", 250 }, { "500ms", 500 }, { "2s", 2000 },
		{ "30m", 1800000 }, { "1h", 3600000 }, { "1d", 86400000 },
		{ "2S", 2000 }, { " 5 s ", 5000 }, { "", -1 }, { "ms", -1 },
		{ "5x", -1 }, { "-1s", -1 }, { "1.5s", -1 }, { "1h30m", -1 },
		{ "99999999999999999999", -1 }, { "9223372036854775807d", -1 },
	};
	static const struct {
		const char *s;
		long long b;
	} sizes[] = {
		{ "0", 0 }, { "4096", 4096 }, { "64k", 65536 }, { "64K", 65536 },
		{ "512m", 536870912LL }, { "1g", 1073741824LL }, { "1G", 1073741824LL },
		{ "2t", 2199023255552LL }, { "1kb", 1024 }, { "1KiB", 1024 },
		{ "3MiB", 3145728 }, { "10b", 10 }, { "", -1 }, { "k", -1 },
		{ "1p", -1 }, { "-5", -1 }, { "1e3", -1 }, { "9999999999999t", -1 },
	};
	long long v;
	size_t i;
	int b;

	(void)state;
	for (i = 0; i < sizeof(durs) / sizeof(durs[0]); i++) {
		v = -7;
		if (durs[i].ms < 0) {
			if (sbx_parse_duration_ms(durs[i].s, &v) != -1 || v != -7)
				fail_msg("duration \"%s\" accepted", durs[i].s);
		} else if (sbx_parse_duration_ms(durs[i].s, &v) != 0 || v != durs[i].ms)
			fail_msg("duration \"%s\": got %lld want %lld", durs[i].s, v,
			    durs[i].ms);
	}
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		v = -7;
		if (sizes[i].b < 0) {
			if (sbx_parse_bytes(sizes[i].s, &v) != -1 || v != -7)
				fail_msg("size \"%s\" accepted", sizes[i].s);
		} else if (sbx_parse_bytes(sizes[i].s, &v) != 0 || v != sizes[i].b)
			fail_msg("size \"%s\": got %lld want %lld", sizes[i].s, v,
			    sizes[i].b);
	}
	assert_int_equal(sbx_parse_bool("Yes", &b), 0);
	assert_int_equal(b, 1);
	assert_int_equal(sbx_parse_bool("off", &b), 0);
	assert_int_equal(b, 0);
	assert_int_equal(sbx_parse_bool("2", &b), -1);
	assert_int_equal(sbx_parse_duration_ms(NULL, &v), -1);
}

static void
test_bool_and_list_flag_forms(void **state)
{
	struct sbx_config_opts opts;
	struct sbx_err err;
	struct tcfg c;

	(void)state;
	setenv("SBX_EGRESS", "true", 1);
	assert_int_equal(load(&c, NULL, &err, "--no-egress", NULL), 0);
	assert_int_equal(c.egress, 0);
	sbx_config_free(keys, &c);
	assert_int_equal(load(&c, NULL, &err, "--egress=off", NULL), 0);
	assert_int_equal(c.egress, 0);
	sbx_config_free(keys, &c);
	unsetenv("SBX_EGRESS");
	assert_int_equal(load(&c, NULL, &err, "--egress", NULL), 0);
	assert_int_equal(c.egress, 1);
	sbx_config_free(keys, &c);
	/* A bare bool never eats the next word: it stays positional. */
	memset(&opts, 0, sizeof(opts));
	assert_int_equal(load(&c, &opts, &err, "--egress", "false", NULL), 0);
	assert_int_equal(c.egress, 1);
	assert_int_equal(opts.nargs, 1);
	assert_string_equal(opts.args[0], "false");
	sbx_config_opts_free(&opts);
	sbx_config_free(keys, &c);
	/* Empty list from a flag; a later flag replaces an earlier one. */
	assert_int_equal(load(&c, NULL, &err, "--images", "", NULL), 0);
	assert_non_null(c.images);
	assert_null(c.images[0]);
	sbx_config_free(keys, &c);
	assert_int_equal(load(&c, NULL, &err, "--images=a,b", "--images", "c", NULL), 0);
	assert_string_equal(c.images[0], "c");
	assert_null(c.images[1]);
	sbx_config_free(keys, &c);
}

static void
test_standard_flags_extra_flags_and_positionals(void **state)
{
	static const char *const extra[] = { "--foreground", "-v", NULL };
	struct sbx_config_opts opts;
	struct sbx_err err;
	struct tcfg c;

	(void)state;
	memset(&opts, 0, sizeof(opts));
	opts.accept = SBX_OPT_HELP | SBX_OPT_VERSION | SBX_OPT_PRINT_CONFIG | SBX_OPT_CHECK;
	opts.extra_flags = extra;
	assert_int_equal(load(&c, &opts, &err, "admin", "--print-config", "-v",
	    "create-operator", "--check", "alice", "--", "--help", NULL), 0);
	assert_int_equal(opts.print_config, 1);
	assert_int_equal(opts.check, 1);
	assert_int_equal(opts.help, 0);
	assert_int_equal(opts.version, 0);
	assert_int_equal(opts.extra_seen, 2u);
	assert_int_equal(opts.nargs, 4);
	assert_string_equal(opts.args[0], "admin");
	assert_string_equal(opts.args[1], "create-operator");
	assert_string_equal(opts.args[2], "alice");
	assert_string_equal(opts.args[3], "--help");
	assert_null(opts.args[4]);
	sbx_config_opts_free(&opts);
	sbx_config_free(keys, &c);

	/* stop_at_first_arg: everything from the first word on is positional. */
	memset(&opts, 0, sizeof(opts));
	opts.accept = SBX_OPT_HELP;
	opts.stop_at_first_arg = 1;
	assert_int_equal(load(&c, &opts, &err, "--listen", "l", "exec", "npc", "ls",
	    "-l", "--help", "--config", "nothing", NULL), 0);
	assert_string_equal(c.listen, "l");
	assert_int_equal(opts.help, 0);
	assert_int_equal(opts.nargs, 7);
	assert_string_equal(opts.args[3], "-l");
	assert_string_equal(opts.args[5], "--config");
	sbx_config_opts_free(&opts);
	sbx_config_free(keys, &c);

	memset(&opts, 0, sizeof(opts));
	opts.accept = SBX_OPT_HELP;
	assert_int_equal(load(&c, &opts, &err, "-h", NULL), 0);
	assert_int_equal(opts.help, 1);
	sbx_config_opts_free(&opts);
	sbx_config_free(keys, &c);
}

static void
test_canary_secret_never_printed_from_any_layer(void **state)
{
	struct sbx_err err;
	struct tcfg c;
	char *out, *file;
	int layer;

	(void)state;
	file = write_file("secret.json", "{\"api_key\":\"" CANARY "\",\"peers\":[\""
	    CANARY "\"],\"seed\":42}");
	for (layer = 0; layer < 3; layer++) {
		clear_env();
		if (layer == 0)
			setenv("SBX_CONFIG", file, 1);
		if (layer == 1) {
			setenv("SBX_API_KEY", CANARY, 1);
			setenv("SBX_PEERS", "a," CANARY, 1);
			setenv("SBX_SEED", "42", 1);
		}
		if (layer == 2)
			assert_int_equal(load(&c, NULL, &err, "--api-key", CANARY,
			    "--peers=" CANARY, "--seed", "42", NULL), 0);
		else
			assert_int_equal(load(&c, NULL, &err, NULL), 0);
		assert_string_equal(c.api_key, CANARY);
		assert_int_equal(c.seed, 42);
		out = print_to_string(&c);
		if (strstr(out, CANARY) != NULL)
			fail_msg("layer %d: canary printed:\n%s", layer, out);
		assert_null(strstr(out, "42"));
		assert_non_null(strstr(out, "\"api_key\": \"[redacted]\""));
		assert_non_null(strstr(out, "\"peers\": \"[redacted]\""));
		assert_non_null(strstr(out, "\"listen\": \"127.0.0.1:8080\""));
		assert_non_null(strstr(out, "\"idle_timeout\": 1800000"));
		free(out);
		sbx_config_free(keys, &c);
		assert_null(c.api_key);
	}
	/* Unset secret prints null, not "[redacted]". */
	clear_env();
	assert_int_equal(load(&c, NULL, &err, NULL), 0);
	out = print_to_string(&c);
	assert_non_null(strstr(out, "\"api_key\": null"));
	free(out);
	sbx_config_free(keys, &c);
}

static void
test_print_output_is_a_valid_config_file(void **state)
{
	struct sbx_err err;
	struct tcfg c, d;
	char *out, *file;

	(void)state;
	assert_int_equal(load(&c, NULL, &err, "--idle-timeout", "90s", "--images",
	    "x,y", "--egress", "--memory", "3k", NULL), 0);
	out = print_to_string(&c);
	file = write_file("printed.json", out);
	free(out);
	/* Unset values print as null, and null in a file means unset. */
	setenv("SBX_CONFIG", file, 1);
	assert_int_equal(load(&d, NULL, &err, NULL), 0);
	assert_string_equal(d.listen, c.listen);
	assert_int_equal(d.idle_ms, 90000);
	assert_int_equal(d.memory, 3072);
	assert_int_equal(d.egress, 1);
	assert_string_equal(d.images[0], "x");
	assert_string_equal(d.images[1], "y");
	assert_null(d.images[2]);
	assert_null(d.api_key);
	sbx_config_free(keys, &d);
	sbx_config_free(keys, &c);
}

static void
test_usage_lists_every_flag_env_and_default(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct tcfg c;
	struct sbx_err err;

	(void)state;
	assert_non_null(f);
	sbx_config_usage(f, "sandbox-test", "[--help] [--check]", keys);
	fclose(f);
	assert_non_null(strstr(buf, "usage: sandbox-test [--help] [--check]"));
	assert_non_null(strstr(buf, "--idle-timeout DURATION"));
	assert_non_null(strstr(buf, "SBX_IDLE_TIMEOUT"));
	assert_non_null(strstr(buf, "default 30m"));
	assert_non_null(strstr(buf, "stop sandboxes idle longer than this"));
	assert_non_null(strstr(buf, "--egress\n"));
	assert_non_null(strstr(buf, "--no-egress"));
	assert_non_null(strstr(buf, "--images LIST"));
	assert_non_null(strstr(buf, "--api-key STRING"));
	assert_non_null(strstr(buf, "--config FILE"));
	free(buf);

	/* sbx_config_set: text syntax, unknown key, reset. */
	assert_int_equal(load(&c, NULL, &err, NULL), 0);
	assert_int_equal(sbx_config_set(keys, &c, "memory", "1m", &err), 0);
	assert_int_equal(c.memory, 1048576);
	assert_int_equal(sbx_config_set(keys, &c, "api_key", CANARY, &err), 0);
	assert_int_equal(sbx_config_set(keys, &c, "api_key", NULL, &err), 0);
	assert_null(c.api_key);
	assert_int_equal(sbx_config_set(keys, &c, "nope", "1", &err), -1);
	assert_int_equal(sbx_config_set(keys, &c, "seed", CANARY, &err), -1);
	assert_null(strstr(err.message, CANARY));
	assert_non_null(sbx_config_find(keys, "images"));
	assert_null(sbx_config_find(keys, "image"));
	sbx_config_free(keys, &c);
	sbx_config_free(keys, &c);
}

static void
test_secrets_from_config_are_redacted_in_logs(void **state)
{
	struct sbx_err err;
	struct tcfg c;
	char buf[4096];
	ssize_t n;
	int p[2];

	(void)state;
	assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
	sbx_log_init("test", p[1], SBX_LOG_DEBUG);
	setenv("SBX_PEERS", "peer-secret-one," CANARY, 1);
	assert_int_equal(load(&c, NULL, &err, "--api-key", CANARY "-key", NULL), 0);
	sbx_config_redact_in_logs(keys, &c);
	log_info("oops", "key", c.api_key, "peer", c.peers[0], "other", c.peers[1], NULL);
	n = read(p[0], buf, sizeof(buf) - 1);
	assert_true(n > 0);
	buf[n] = '\0';
	if (strstr(buf, CANARY) != NULL || strstr(buf, "peer-secret-one") != NULL)
		fail_msg("secret in log: %s", buf);
	assert_non_null(strstr(buf, "\"key\":\"[redacted]\""));
	sbx_config_free(keys, &c);
	sbx_log_clear_secrets();
	sbx_log_init("sbx", 2, SBX_LOG_INFO);
	close(p[0]);
	close(p[1]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_defaults_when_nothing_else_is_given, setup, teardown),
		cmocka_unit_test_setup_teardown(test_each_layer_overrides_the_one_below, setup, teardown),
		cmocka_unit_test_setup_teardown(test_config_flag_beats_sbx_config_env, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_key_in_file_is_a_config_error_naming_it, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_flag_is_a_usage_error_naming_it, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_values_name_the_key_and_never_a_secret, setup, teardown),
		cmocka_unit_test_setup_teardown(test_durations_and_bytes_parse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bool_and_list_flag_forms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_standard_flags_extra_flags_and_positionals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_canary_secret_never_printed_from_any_layer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_print_output_is_a_valid_config_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_usage_lists_every_flag_env_and_default, setup, teardown),
		cmocka_unit_test_setup_teardown(test_secrets_from_config_are_redacted_in_logs, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
