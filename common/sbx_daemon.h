/* sbx_daemon.h - the start-up both daemons' mains share: process setup before the configuration is read (SPEC §9). */
#ifndef SBX_DAEMON_H
#define SBX_DAEMON_H

#include <event2/event.h>

#include "sbx_config.h"

/*
 * Process setup every daemon does first: SIGPIPE ignored (a client gone
 * mid-write is an EPIPE the code handles, not a death), umask 077 (its
 * databases, sockets before chmod, and files are its own), the heap kept
 * for stream buffers (sbx_bev_heap), logging to stderr as name at info
 * level (sbx_log.h). name is static.
 */
void sbx_daemon_begin(const char *name);

/*
 * The command line every daemon reads the same way: sbx_config_load of keys
 * into cfg with opts (the caller fills opts->accept), then --help (usage
 * from synopsis on stdout) and --version ("NAME VERSION (broker API vN)" on
 * stdout). Returns 1 when main goes on (*exit_code untouched); 0 when main
 * is to return *exit_code:
 * 0 after --help or --version, or 64/78 (sbx_config_exit_code) after a load
 * error printed to stderr as "NAME: message". cfg and opts are the caller's
 * to free either way (sbx_config_free, sbx_config_opts_free).
 */
int sbx_daemon_options(const char *name, const char *version,
    const char *synopsis, const struct sbx_config_key *keys, void *cfg,
    int argc, char **argv, struct sbx_config_opts *opts, int *exit_code);

/*
 * --print-config: when opts->print_config is set, prints the effective
 * configuration, keys of cfg (sbx_config_print), on stdout, sets
 * *exit_code to 0 and returns 0 (main returns it); else returns 1, nothing
 * done.
 */
int sbx_daemon_print_config(const struct sbx_config_opts *opts,
    const struct sbx_config_key *keys, const void *cfg, int *exit_code);

/*
 * Refuses positional arguments of a daemon that takes none: when
 * opts->nargs > 0, prints "NAME: unexpected argument ARG" (the first) to
 * stderr, sets *exit_code to SBX_EXIT_USAGE (64) and returns 0; else
 * returns 1.
 */
int sbx_daemon_no_args(const char *name, const struct sbx_config_opts *opts,
    int *exit_code);

/*
 * A start-up failure main exits on: prints "NAME: MESSAGE" of err to
 * stderr. sbx_daemon_config_error returns SBX_EXIT_CONFIG (78): the
 * configuration (or a file or token it names) cannot be used.
 * sbx_daemon_start_error returns SBX_EXIT_CONFIG when err's code is
 * config_error, else 1 (an internal failure, e.g. out of memory).
 */
int sbx_daemon_config_error(const char *name, const struct sbx_err *err);
int sbx_daemon_start_error(const char *name, const struct sbx_err *err);

/*
 * Sets the log level from level (sbx_log_level_parse) and, when file is
 * not NULL, reopens logging onto it. Returns 0; or -1 after printing
 * "NAME: cannot open log_file FILE: strerror" to stderr (main exits 78).
 */
int sbx_daemon_log_setup(const char *name, const char *level,
    const char *file);

#define SBX_DAEMON_NSIGS 3 /* SIGTERM, SIGINT, SIGHUP */

/*
 * What SIGTERM or SIGINT asks of a daemon, on its loop: stop(arg, "TERM"
 * or "INT"); a second signal calls it again (the daemon decides what that
 * means). SIGHUP never reaches it (sbx_daemon_sighup: the log reopened).
 */
typedef void (*sbx_daemon_stop_fn)(void *arg, const char *signame);

/*
 * Adds one libevent signal event (EV_SIGNAL|EV_PERSIST) on base for each of
 * SIGTERM, SIGINT and SIGHUP into sigs[0..SBX_DAEMON_NSIGS) (zeroed by the
 * caller; freed with sbx_daemon_signals_free, also after a failure):
 * SIGHUP does sbx_daemon_sighup, the others call stop(arg, name of the
 * signal). Returns 0; or -1 after printing "NAME: cannot set up signals"
 * to stderr.
 */
int sbx_daemon_signals(const char *name, struct event_base *base,
    sbx_daemon_stop_fn stop, void *arg, struct event **sigs);

/*
 * SIGHUP's job in every daemon: when sig is SIGHUP, reopens the log file
 * (sbx_log_reopen(NULL)) and logs "logs reopened" or a warning with
 * strerror, and returns 1 (handled); any other sig: 0, nothing done.
 */
int sbx_daemon_sighup(int sig);

/*
 * The drain-done callback of both servers (api_server_drain,
 * broker_server_drain): logs "drained; exiting" and leaves the loop of
 * base (a struct event_base *) after 100 ms, so the last replies leave
 * the socket buffers.
 */
void sbx_daemon_drained(void *base);

/* Frees sigs[0..SBX_DAEMON_NSIGS) (NULL entries fine) and zeroes them. */
void sbx_daemon_signals_free(struct event **sigs);

#endif
