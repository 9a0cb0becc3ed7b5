/* test_sbx_log.c - JSON-lines log format, levels, secret redaction, reopen, fatal. */
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbx_log.h"

#define CANARY "CANARY-0ddba11-log-secret"

static int pipefd[2] = { -1, -1 };
static char captured[65536];

static int
setup(void **state)
{
	(void)state;
	if (pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) != 0)
		return -1;
	sbx_log_init("sandbox-broker", pipefd[1], SBX_LOG_DEBUG);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	sbx_log_clear_secrets();
	sbx_log_init("sbx", 2, SBX_LOG_INFO);
	close(pipefd[0]);
	close(pipefd[1]);
	return 0;
}

/* Everything written to the log since the last call. */
static const char *
drain(void)
{
	size_t len = 0;
	ssize_t n;

	while (len < sizeof(captured) - 1 &&
	    (n = read(pipefd[0], captured + len, sizeof(captured) - 1 - len)) > 0)
		len += (size_t)n;
	captured[len] = '\0';
	return captured;
}

/* Parses the single line drained, asserting it is one JSON object + '\n'. */
static json_t *
one_line(void)
{
	const char *s = drain();
	size_t len = strlen(s);
	json_error_t jerr;
	json_t *obj;

	if (len == 0 || s[len - 1] != '\n' || memchr(s, '\n', len - 1) != NULL)
		fail_msg("not exactly one line: \"%s\"", s);
	obj = json_loadb(s, len - 1, 0, &jerr);
	if (obj == NULL || !json_is_object(obj))
		fail_msg("not a JSON object (%s): %s", jerr.text, s);
	return obj;
}

static const char *
field(json_t *obj, const char *k)
{
	json_t *v = json_object_get(obj, k);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

static void
test_line_is_one_json_object_with_fixed_members(void **state)
{
	regex_t re;
	json_t *o;
	const char *line;

	(void)state;
	log_info("sandbox created", "id", "npc-1", "ms", "12", NULL);
	line = drain();
	/* Fixed members come first, in this order. */
	assert_true(strncmp(line, "{\"ts\":\"", 7) == 0);
	assert_non_null(strstr(line, "\"level\":\"info\",\"prog\":\"sandbox-broker\","
	    "\"msg\":\"sandbox created\",\"id\":\"npc-1\",\"ms\":\"12\"}\n"));

	log_warn("w", NULL);
	o = one_line();
	assert_int_equal(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
	    "[0-9]{2}\\.[0-9]{3}Z$", REG_EXTENDED | REG_NOSUB), 0);
	assert_int_equal(regexec(&re, field(o, "ts"), 0, NULL, 0), 0);
	regfree(&re);
	assert_string_equal(field(o, "level"), "warn");
	assert_string_equal(field(o, "msg"), "w");
	assert_int_equal(json_object_size(o), 4);
	json_decref(o);

	log_error("e", "k", "v", NULL);
	o = one_line();
	assert_string_equal(field(o, "level"), "error");
	json_decref(o);
	log_debug("d", NULL);
	o = one_line();
	assert_string_equal(field(o, "level"), "debug");
	json_decref(o);
}

static void
test_levels_below_minimum_are_dropped(void **state)
{
	json_t *o;

	(void)state;
	sbx_log_set_level(SBX_LOG_WARN);
	log_debug("no", NULL);
	log_info("no", NULL);
	assert_string_equal(drain(), "");
	log_warn("yes", NULL);
	o = one_line();
	assert_string_equal(field(o, "msg"), "yes");
	json_decref(o);
	assert_int_equal(sbx_log_level_parse("DEBUG"), SBX_LOG_DEBUG);
	assert_int_equal(sbx_log_level_parse("warning"), SBX_LOG_WARN);
	assert_int_equal(sbx_log_level_parse("loud"), -1);
	assert_int_equal(sbx_log_level_parse(NULL), -1);
	assert_string_equal(sbx_log_level_name(SBX_LOG_ERROR), "error");
}

static void
test_hostile_values_still_give_one_valid_line(void **state)
{
	json_t *o;

	(void)state;
	log_info("multi\nline \"quoted\" \\ msg", "bin", "\xff\xfe ok \xc3\xa9", "ctl",
	    "a\r\nb\x01", NULL);
	o = one_line();
	assert_string_equal(field(o, "msg"), "multi\nline \"quoted\" \\ msg");
	assert_string_equal(field(o, "bin"), "\\xff\\xfe ok \xc3\xa9");
	assert_string_equal(field(o, "ctl"), "a\r\nb\x01");
	json_decref(o);

	/* A field cannot hide a fixed member. */
	log_info("real", "msg", "fake", "level", "debug", NULL);
	o = one_line();
	assert_string_equal(field(o, "msg"), "real");
	assert_string_equal(field(o, "level"), "info");
	assert_string_equal(field(o, "field_msg"), "fake");
	assert_string_equal(field(o, "field_level"), "debug");
	json_decref(o);

	/* A NULL value is null and ends the list; NULL msg is "". */
	log_info(NULL, "a", "1", "b", (const char *)NULL, "c", "3", NULL);
	o = one_line();
	assert_string_equal(field(o, "msg"), "");
	assert_string_equal(field(o, "a"), "1");
	assert_true(json_is_null(json_object_get(o, "b")));
	assert_null(json_object_get(o, "c"));
	json_decref(o);
}

static void
test_registered_secret_never_reaches_the_log(void **state)
{
	const char *line;
	json_t *o;

	(void)state;
	/* Without registration the canary would leak: the check below can fail. */
	log_info("token is " CANARY, NULL);
	assert_non_null(strstr(drain(), CANARY));

	sbx_log_add_secret(CANARY);
	sbx_log_add_secret(CANARY); /* twice is harmless */
	log_info("token is " CANARY ".", "auth", "Bearer " CANARY, CANARY, "as key",
	    "twice", CANARY CANARY, NULL);
	line = drain();
	if (strstr(line, CANARY) != NULL || strstr(line, "0ddba11") != NULL)
		fail_msg("secret in log line: %s", line);
	o = json_loads(line, 0, NULL);
	assert_non_null(o);
	assert_string_equal(field(o, "msg"), "token is [redacted].");
	assert_string_equal(field(o, "auth"), "Bearer [redacted]");
	assert_string_equal(field(o, "[redacted]"), "as key");
	assert_string_equal(field(o, "twice"), "[redacted][redacted]");
	json_decref(o);

	/* fatal and every level redact too (checked in a child for fatal). */
	log_error(CANARY, NULL);
	assert_null(strstr(drain(), CANARY));

	/* Too short to register: ordinary text is left alone. */
	sbx_log_add_secret("abc");
	sbx_log_add_secret(NULL);
	log_info("abc", NULL);
	o = one_line();
	assert_string_equal(field(o, "msg"), "abc");
	json_decref(o);

	sbx_log_clear_secrets();
	log_info(CANARY, NULL);
	assert_non_null(strstr(drain(), CANARY));
}

static void
test_fatal_logs_at_error_and_exits_with_code(void **state)
{
	int status = 0;
	pid_t pid;
	json_t *o;

	(void)state;
	sbx_log_add_secret(CANARY);
	fflush(NULL); /* the child's exit() must not print our buffered output again */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		fatal(78, "config broken", "key", "token_file", "value", CANARY, NULL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 78);
	o = one_line();
	assert_string_equal(field(o, "level"), "error");
	assert_string_equal(field(o, "msg"), "config broken");
	assert_string_equal(field(o, "key"), "token_file");
	assert_string_equal(field(o, "value"), "[redacted]");
	json_decref(o);
}

static char *
slurp(const char *path)
{
	static char buf[4096];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

static void
test_reopen_follows_a_rotated_file(void **state)
{
	char dir[] = "/tmp/sbx-test-log-XXXXXX", path[128], rotated[128], cmd[160];
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/log", dir);
	snprintf(rotated, sizeof(rotated), "%s/log.1", dir);
	/* A private fd standing for stderr; the module never closes it. */
	fd = dup(pipefd[1]);
	assert_true(fd > 2);
	sbx_log_init("sandbox-api", fd, SBX_LOG_INFO);
	assert_int_equal(sbx_log_reopen(NULL), 0); /* no path: keep the fd */
	log_info("to pipe", NULL);
	assert_non_null(strstr(drain(), "to pipe"));

	assert_int_equal(sbx_log_reopen(path), 0);
	log_info("first", NULL);
	assert_string_equal(drain(), "");
	assert_non_null(strstr(slurp(path), "\"msg\":\"first\""));

	/* logrotate: rename, then SIGHUP -> reopen(NULL) makes a new file. */
	assert_int_equal(rename(path, rotated), 0);
	assert_int_equal(sbx_log_reopen(NULL), 0);
	log_info("second", NULL);
	assert_null(strstr(slurp(path), "first"));
	assert_non_null(strstr(slurp(path), "\"msg\":\"second\""));
	assert_null(strstr(slurp(rotated), "second"));

	/* A failing reopen keeps the current file. */
	assert_int_equal(sbx_log_reopen("/nonexistent-dir/x/log"), -1);
	log_info("third", NULL);
	assert_non_null(strstr(slurp(path), "third"));

	close(fd);
	sbx_log_init("sandbox-broker", pipefd[1], SBX_LOG_DEBUG);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_line_is_one_json_object_with_fixed_members, setup, teardown),
		cmocka_unit_test_setup_teardown(test_levels_below_minimum_are_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_values_still_give_one_valid_line, setup, teardown),
		cmocka_unit_test_setup_teardown(test_registered_secret_never_reaches_the_log, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fatal_logs_at_error_and_exits_with_code, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reopen_follows_a_rotated_file, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
