/* test_sbx_daemon.c - common/sbx_daemon.c: --print-config, stray arguments and start-up failures end main with the output and exit status both daemons give. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <signal.h>

#include "sbx_config.h"
#include "sbx_daemon.h"
#include "sbx_proto.h"

struct tcfg {
	char *listen;
	long long n;
	char *secret;
};

static const struct sbx_config_key keys[] = {
	{ "listen", SBX_CFG_STRING, offsetof(struct tcfg, listen), NULL, 0,
	    "where" },
	{ "n", SBX_CFG_INT, offsetof(struct tcfg, n), NULL, 0, "how many" },
	{ "secret", SBX_CFG_STRING, offsetof(struct tcfg, secret), NULL, 1,
	    "never printed" },
	{ NULL, 0, 0, NULL, 0, NULL },
};

/* What fd (1 or 2) got while fn(arg) ran, NUL-terminated in out. */
static void
capture(int fd, void (*fn)(void *), void *arg, char *out, size_t cap)
{
	FILE *tmp = tmpfile();
	int saved;
	size_t n;

	assert_non_null(tmp);
	fflush(fd == 1 ? stdout : stderr);
	saved = dup(fd);
	assert_true(saved >= 0);
	assert_true(dup2(fileno(tmp), fd) >= 0);
	fn(arg);
	fflush(fd == 1 ? stdout : stderr);
	assert_true(dup2(saved, fd) >= 0);
	close(saved);
	rewind(tmp);
	n = fread(out, 1, cap - 1, tmp);
	out[n] = '\0';
	fclose(tmp);
}

struct call {
	struct sbx_config_opts opts;
	struct tcfg cfg;
	struct sbx_err err;
	int ret, rc;
};

static void
call_print(void *arg)
{
	struct call *c = arg;

	c->ret = sbx_daemon_print_config(&c->opts, keys, &c->cfg, &c->rc);
}

static void
call_no_args(void *arg)
{
	struct call *c = arg;

	c->ret = sbx_daemon_no_args("sandbox-test", &c->opts, &c->rc);
}

static void
call_config_error(void *arg)
{
	struct call *c = arg;

	c->ret = sbx_daemon_config_error("sandbox-test", &c->err);
}

static void
call_start_error(void *arg)
{
	struct call *c = arg;

	c->ret = sbx_daemon_start_error("sandbox-test", &c->err);
}

static void
test_print_config_prints_and_ends_main_only_when_asked(void **state)
{
	struct call c;
	char out[4096];

	(void)state;
	memset(&c, 0, sizeof(c));
	c.cfg.listen = "127.0.0.1:9";
	c.cfg.n = 42;
	c.cfg.secret = "canary-7f3e";
	c.rc = 99;
	capture(1, call_print, &c, out, sizeof(out));
	assert_int_equal(c.ret, 1);         /* not asked: main goes on */
	assert_int_equal(c.rc, 99);
	assert_string_equal(out, "");
	c.opts.print_config = 1;
	capture(1, call_print, &c, out, sizeof(out));
	assert_int_equal(c.ret, 0);
	assert_int_equal(c.rc, 0);
	assert_non_null(strstr(out, "127.0.0.1:9"));
	assert_non_null(strstr(out, "42"));
	assert_null(strstr(out, "canary-7f3e"));
}

static void
test_a_stray_argument_is_a_usage_error(void **state)
{
	char *args[] = { "admin", NULL };
	struct call c;
	char out[512];

	(void)state;
	memset(&c, 0, sizeof(c));
	c.rc = 99;
	capture(2, call_no_args, &c, out, sizeof(out));
	assert_int_equal(c.ret, 1);
	assert_int_equal(c.rc, 99);
	assert_string_equal(out, "");
	c.opts.args = args;
	c.opts.nargs = 1;
	capture(2, call_no_args, &c, out, sizeof(out));
	assert_int_equal(c.ret, 0);
	assert_int_equal(c.rc, SBX_EXIT_USAGE);
	assert_string_equal(out, "sandbox-test: unexpected argument admin\n");
}

static void
test_start_errors_say_why_and_map_to_exit_status(void **state)
{
	struct call c;
	char out[512];

	(void)state;
	memset(&c, 0, sizeof(c));
	sbx_err_set(&c.err, SBX_E_INTERNAL, "Out of memory.");
	capture(2, call_config_error, &c, out, sizeof(out));
	assert_int_equal(c.ret, SBX_EXIT_CONFIG);
	assert_string_equal(out, "sandbox-test: Out of memory.\n");
	capture(2, call_start_error, &c, out, sizeof(out));
	assert_int_equal(c.ret, 1);
	assert_string_equal(out, "sandbox-test: Out of memory.\n");
	sbx_err_set(&c.err, SBX_E_CONFIG, "listen is taken.");
	capture(2, call_start_error, &c, out, sizeof(out));
	assert_int_equal(c.ret, SBX_EXIT_CONFIG);
	assert_string_equal(out, "sandbox-test: listen is taken.\n");
}

struct stops {
	int n;
	char last[8];
	struct event_base *base;
};

static void
on_stop(void *arg, const char *sig)
{
	struct stops *st = arg;

	st->n++;
	snprintf(st->last, sizeof(st->last), "%s", sig);
	event_base_loopbreak(st->base);
}

/* Runs base until on_stop breaks it, or 2 s. */
static void
run_until_stop(struct event_base *base)
{
	struct timeval tv = { 2, 0 };

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

static void
test_term_and_int_stop_hup_does_not(void **state)
{
	struct event *sigs[SBX_DAEMON_NSIGS] = { NULL, NULL, NULL };
	struct stops st;

	(void)state;
	memset(&st, 0, sizeof(st));
	assert_non_null(st.base = event_base_new());
	assert_int_equal(sbx_daemon_signals("sandbox-test", st.base, on_stop,
	    &st, sigs), 0);
	raise(SIGHUP);          /* the log reopened; no stop */
	run_until_stop(st.base);
	assert_int_equal(st.n, 0);
	raise(SIGTERM);
	run_until_stop(st.base);
	assert_int_equal(st.n, 1);
	assert_string_equal(st.last, "TERM");
	raise(SIGINT);          /* a second one reaches the daemon too */
	run_until_stop(st.base);
	assert_int_equal(st.n, 2);
	assert_string_equal(st.last, "INT");
	sbx_daemon_signals_free(sigs);
	assert_null(sigs[0]);
	sbx_daemon_signals_free(sigs);  /* twice is fine */
	event_base_free(st.base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
		    test_print_config_prints_and_ends_main_only_when_asked),
		cmocka_unit_test(test_a_stray_argument_is_a_usage_error),
		cmocka_unit_test(test_start_errors_say_why_and_map_to_exit_status),
		cmocka_unit_test(test_term_and_int_stop_hup_does_not),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
