/* sbx_daemon.c - the start-up both daemons' mains share. */
#include <sys/stat.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx_bev.h"
#include "sbx_daemon.h"
#include "sbx_log.h"
#include "sbx_proto.h"

void
sbx_daemon_begin(const char *name)
{
	signal(SIGPIPE, SIG_IGN);
	umask(077);
	sbx_bev_heap();
	sbx_log_init(name, 2, SBX_LOG_INFO);
}

int
sbx_daemon_options(const char *name, const char *version,
    const char *synopsis, const struct sbx_config_key *keys, void *cfg,
    int argc, char **argv, struct sbx_config_opts *opts, int *exit_code)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	if (sbx_config_load(keys, cfg, argc, argv, opts, &err) == -1) {
		*exit_code = sbx_config_exit_code(&err);
		fprintf(stderr, "%s: %s\n", name, err.message);
		return 0;
	}
	if (opts->help) {
		sbx_config_usage(stdout, name, synopsis, keys);
		*exit_code = 0;
		return 0;
	}
	if (opts->version) {
		printf("%s %s (broker API v%s)\n", name, version,
		    SBX_PROTO_VERSION);
		*exit_code = 0;
		return 0;
	}
	return 1;
}

int
sbx_daemon_print_config(const struct sbx_config_opts *opts,
    const struct sbx_config_key *keys, const void *cfg, int *exit_code)
{
	if (!opts->print_config)
		return 1;
	sbx_config_print(stdout, keys, cfg);
	*exit_code = 0;
	return 0;
}

int
sbx_daemon_no_args(const char *name, const struct sbx_config_opts *opts,
    int *exit_code)
{
	if (opts->nargs == 0)
		return 1;
	fprintf(stderr, "%s: unexpected argument %s\n", name, opts->args[0]);
	*exit_code = SBX_EXIT_USAGE;
	return 0;
}

int
sbx_daemon_config_error(const char *name, const struct sbx_err *err)
{
	fprintf(stderr, "%s: %s\n", name, err->message);
	return SBX_EXIT_CONFIG;
}

int
sbx_daemon_start_error(const char *name, const struct sbx_err *err)
{
	fprintf(stderr, "%s: %s\n", name, err->message);
	return strcmp(err->code, SBX_E_CONFIG) == 0 ? SBX_EXIT_CONFIG : 1;
}

int
sbx_daemon_log_setup(const char *name, const char *level, const char *file)
{
	sbx_log_set_level(sbx_log_level_parse(level));
	if (file != NULL && sbx_log_reopen(file) == -1) {
		fprintf(stderr, "%s: cannot open log_file %s: %s\n", name, file,
		    strerror(errno));
		return -1;
	}
	return 0;
}

/* The stop callback of a daemon's signal events (one, shared by them;
 * freed with the events). */
struct daemon_sigs {
	sbx_daemon_stop_fn stop;
	void *arg;
};

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct daemon_sigs *ds = arg;

	(void)what;
	if (sbx_daemon_sighup(sig))
		return;
	ds->stop(ds->arg, sig == SIGTERM ? "TERM" : "INT");
}

int
sbx_daemon_signals(const char *name, struct event_base *base,
    sbx_daemon_stop_fn stop, void *arg, struct event **sigs)
{
	static const int signums[SBX_DAEMON_NSIGS] = { SIGTERM, SIGINT,
	    SIGHUP };
	struct daemon_sigs *ds;
	int i;

	if ((ds = malloc(sizeof(*ds))) == NULL) {
		fprintf(stderr, "%s: cannot set up signals\n", name);
		return -1;
	}
	ds->stop = stop;
	ds->arg = arg;
	for (i = 0; i < SBX_DAEMON_NSIGS; i++) {
		if ((sigs[i] = evsignal_new(base, signums[i], on_signal, ds)) ==
		    NULL || evsignal_add(sigs[i], NULL) == -1) {
			if (sigs[0] == NULL)    /* no event holds ds */
				free(ds);
			fprintf(stderr, "%s: cannot set up signals\n", name);
			return -1;
		}
	}
	return 0;
}

void
sbx_daemon_signals_free(struct event **sigs)
{
	void *ds = sigs[0] != NULL ? event_get_callback_arg(sigs[0]) : NULL;
	int i;

	for (i = 0; i < SBX_DAEMON_NSIGS; i++) {
		if (sigs[i] != NULL)
			event_free(sigs[i]);
		sigs[i] = NULL;
	}
	free(ds);
}

int
sbx_daemon_sighup(int sig)
{
	if (sig != SIGHUP)
		return 0;
	if (sbx_log_reopen(NULL) == -1)
		log_warn("log reopen failed", "error", strerror(errno), NULL);
	else
		log_info("logs reopened", NULL);
	return 1;
}

void
sbx_daemon_drained(void *base)
{
	struct timeval flush = { 0, 100 * 1000 };

	log_info("drained; exiting", NULL);
	event_base_loopexit(base, &flush);
}
