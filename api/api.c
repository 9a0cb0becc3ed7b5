/* api.c - sandbox-api: main, configuration, admin commands, privilege drop, signals, event loop (SPEC §8, §9). */
#include <errno.h>
#include <ftw.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <sodium.h>

#include "api.h"
#include "api_store.h"
#include "driver_broker.h"
#include "sbx_daemon.h"
#include "sbx_log.h"
#include "sbx_probe.h"
#include "sbx_proto.h"
#include "sbx_token.h"

static const char synopsis[] =
    "[--listen HOST:PORT] [--broker unix:PATH|HOST:PORT]\n"
    "       [--broker-token-file FILE] [--state-dir DIR] [--config FILE]\n"
    "       [--print-config] [--help] [--version] [more --KEY VALUE below]\n"
    "   or: sandbox-api [--listen HOST:PORT] --health\n"
    "   or: sandbox-api [--state-dir DIR] admin create-operator NAME\n"
    "   or: sandbox-api [--state-dir DIR] admin create-player NAME\n"
    "   or: sandbox-api [--state-dir DIR] admin revoke NAME\n"
    "   or: sandbox-api [--state-dir DIR] admin list\n"
    "\n"
    "The broker token comes from --broker-token-file (mode 0600), else the\n"
    "systemd credential $CREDENTIALS_DIRECTORY/broker-token, else\n"
    "SBX_BROKER_TOKEN; it is never printed. create-* prints the new API key\n"
    "once on stdout; only a keyed hash of it is stored.\n"
    "\n"
    "--health asks the running api at its listen address for GET /healthz\n"
    "(for a container or service health check; needs no key), prints one\n"
    "line and exits 0 when it answers status ok, else 1.\n"
    "\n"
    "Exit codes: 0 ok (also after SIGTERM drained), 1 internal error, a\n"
    "refused admin command or --health unhealthy, 64 usage (an unknown\n"
    "flag, or a bad value given as a flag), 78 configuration (a bad value\n"
    "in the config file or the environment, missing or short broker token,\n"
    "unusable state dir, listen address in use).\n"
    "\n"
    "Signals: SIGTERM/SIGINT stop accepting, let open requests and exec\n"
    "streams finish for up to shutdown_grace, then cancel the rest (an exec\n"
    "stream ends with an SSE error shutting_down), exit 0; a second signal\n"
    "exits at once. SIGHUP reopens log_file.";

struct main_ctx {
	struct event_base *base;
	struct api_server *server;
	int stopping;
};

/* SIGTERM or SIGINT (sbx_daemon_signals): drain; a second one exits. */
static void
on_stop(void *arg, const char *sig)
{
	struct main_ctx *m = arg;

	if (m->stopping) {
		log_warn("second signal; exiting now", NULL);
		event_base_loopbreak(m->base);
		return;
	}
	m->stopping = 1;
	log_info("signal received; draining", "signal", sig, NULL);
	api_server_drain(m->server, sbx_daemon_drained, m->base);
}

static void
print_principal(void *arg, const struct api_principal *p)
{
	char created[32], revoked[32];
	time_t t;

	(void)arg;
	t = (time_t)(p->created_at / 1000);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
	if (p->revoked_at != 0) {
		t = (time_t)(p->revoked_at / 1000);
		strftime(revoked, sizeof(revoked), "%Y-%m-%dT%H:%M:%SZ",
		    gmtime(&t));
	} else
		snprintf(revoked, sizeof(revoked), "-");
	printf("%-24s %-9s %-21s %s\n", p->name, api_role_name(p->role),
	    created, revoked);
}

/* sandbox-api admin ...: works on api.db directly; needs no broker. */
static int
run_admin(const struct api_config *cfg, char **args, int nargs)
{
	struct api_store *st = NULL;
	struct sbx_err err;
	char key[SBX_TOKEN_GEN_LEN + 1];
	const char *cmd = nargs > 1 ? args[1] : "";
	int rc = API_EXIT_INTERNAL;

	sbx_err_clear(&err);
	if (!((strcmp(cmd, "create-operator") == 0 ||
	    strcmp(cmd, "create-player") == 0 || strcmp(cmd, "revoke") == 0) &&
	    nargs == 3) && !(strcmp(cmd, "list") == 0 && nargs == 2)) {
		fprintf(stderr, "usage: sandbox-api admin create-operator NAME | "
		    "create-player NAME | revoke NAME | list\n");
		return API_EXIT_USAGE;
	}
	if ((st = api_store_open(cfg->state_dir, &err)) == NULL) {
		fprintf(stderr, "sandbox-api: %s\n", err.message);
		return API_EXIT_CONFIG;
	}
	if (strcmp(cmd, "list") == 0) {
		printf("%-24s %-9s %-21s %s\n", "NAME", "ROLE", "CREATED",
		    "REVOKED");
		if (api_store_principal_list(st, print_principal, NULL,
		    &err) == -1)
			goto fail;
	} else if (strcmp(cmd, "revoke") == 0) {
		if (api_store_principal_revoke(st, args[2], &err) == -1)
			goto fail;
		api_store_audit(st, "admin", "principal.revoke", NULL, "ok");
		fprintf(stderr, "revoked %s\n", args[2]);
	} else {
		enum api_role role = strcmp(cmd, "create-operator") == 0 ?
		    API_ROLE_OPERATOR : API_ROLE_PLAYER;

		if (api_store_principal_create(st, args[2], role, key,
		    sizeof(key), &err) == -1)
			goto fail;
		api_store_audit(st, "admin", role == API_ROLE_OPERATOR ?
		    "principal.create_operator" : "principal.create_player",
		    NULL, "ok");
		/* The only time the key exists outside its owner's hands. */
		printf("%s\n", key);
		fflush(stdout);
		sodium_memzero(key, sizeof(key));
		fprintf(stderr, "created %s %s; the key printed on standard "
		    "output is shown only once\n", api_role_name(role), args[2]);
	}
	rc = API_EXIT_OK;
	goto done;
fail:
	fprintf(stderr, "sandbox-api: %s\n", err.message);
done:
	api_store_close(st);
	return rc;
}

/* give_state_dir's walk: the owner to give, and the first failure. */
static uid_t give_uid;
static gid_t give_gid;
static struct sbx_err *give_err;
static int give_failed;

static int
give_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (lchown(path, give_uid, give_gid) == -1 && errno != ENOENT) {
		sbx_err_set(give_err, SBX_E_CONFIG, "Cannot give %s to the api's "
		    "user: %s.", path, strerror(errno));
		give_failed = 1;
		return 1;
	}
	return 0;
}

/*
 * Started as root with user set: the state dir and everything in it
 * (api.db and its journals, the keys, execs/ and terms/ that the server
 * made as root by now) are made the user's, so sqlite can still create its
 * -wal/-shm files after the switch, a resource exec or terminal can make
 * its directory, and a later start as that user works. Symlinks are not
 * followed (FTW_PHYS, lchown).
 */
static int
give_state_dir(const char *user, const char *dir, struct sbx_err *err)
{
	struct passwd *pw;

	if (user == NULL || user[0] == '\0' || getuid() != 0)
		return 0;
	if ((pw = getpwnam(user)) == NULL)
		return sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_NO_USER,
		    user);
	if (mkdir(dir, 0700) == -1 && errno != EEXIST)
		return sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_STATE_DIR_CREATE,
		    dir, strerror(errno));
	give_uid = pw->pw_uid;
	give_gid = pw->pw_gid;
	give_err = err;
	give_failed = 0;
	if (nftw(dir, give_one, 16, FTW_PHYS) != 0) {
		if (!give_failed)
			sbx_err_set(err, SBX_E_CONFIG, "Cannot give %s to %s: %s.",
			    dir, user, strerror(errno));
		return -1;
	}
	return 0;
}

/* Started as root with user set: switch to it for good. */
static int
drop_privileges(const char *user, struct sbx_err *err)
{
	struct passwd *pw;

	if (user == NULL || user[0] == '\0')
		return 0;
	if ((pw = getpwnam(user)) == NULL)
		return sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_NO_USER,
		    user);
	if (getuid() != 0) {
		if (getuid() != pw->pw_uid)
			log_warn("not root: user setting ignored", "user", user,
			    NULL);
		return 0;
	}
	if (setgroups(1, &pw->pw_gid) == -1 || setgid(pw->pw_gid) == -1 ||
	    setuid(pw->pw_uid) == -1)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot switch to user "
		    "%s: %s.", user, strerror(errno));
	if (setuid(0) != -1)
		return sbx_err_set(err, SBX_E_CONFIG, "Dropping privileges to "
		    "%s did not stick.", user);
	log_info("privileges dropped", "user", user, NULL);
	return 0;
}

int
main(int argc, char **argv)
{
	struct api_config cfg;
	struct sbx_config_opts opts;
	struct sbx_broker_config bc;
	struct sbx_err err;
	struct main_ctx m;
	struct sbx_driver *driver = NULL;
	struct event *sigs[SBX_DAEMON_NSIGS] = { NULL, NULL, NULL };
	char *token = NULL;
	size_t token_len = 0;
	char port[16];
	int rc = API_EXIT_INTERNAL;

	memset(&cfg, 0, sizeof(cfg));
	memset(&opts, 0, sizeof(opts));
	memset(&m, 0, sizeof(m));
	sbx_err_clear(&err);
	/* SIGPIPE ignored, umask 077 (what we create is ours alone), log. */
	sbx_daemon_begin("sandbox-api");

	opts.accept = SBX_OPT_HELP | SBX_OPT_VERSION | SBX_OPT_PRINT_CONFIG |
	    SBX_OPT_HEALTH;
	if (!sbx_daemon_options("sandbox-api", API_VERSION, synopsis,
	    api_config_keys, &cfg, argc, argv, &opts, &rc))
		goto done;
	if (api_config_check(&cfg, &err) == -1 ||
	    api_config_finish(&cfg, &err) == -1) {
		rc = sbx_daemon_config_error("sandbox-api", &err);
		goto done;
	}
	if (!sbx_daemon_print_config(&opts, api_config_keys, &cfg, &rc))
		goto done;
	if (opts.health) {
		char detail[512];

		rc = sbx_probe_health(cfg.listen, "/healthz", NULL, 0, 5000,
		    detail, sizeof(detail));
		printf("%s: %s\n", rc == SBX_PROBE_HEALTHY ? "healthy" :
		    "unhealthy", detail);
		goto done;
	}
	if (opts.nargs > 0 && strcmp(opts.args[0], "admin") == 0) {
		rc = run_admin(&cfg, opts.args, opts.nargs);
		goto done;
	}
	if (!sbx_daemon_no_args("sandbox-api", &opts, &rc))
		goto done;
	if (sbx_daemon_log_setup("sandbox-api", cfg.log_level,
	    cfg.log_file) == -1) {
		rc = API_EXIT_CONFIG;
		goto done;
	}

	/* The broker token: required, never echoed, kept in locked memory. */
	if (sbx_broker_token_read(cfg.broker_token_file,
	    getenv("SBX_BROKER_TOKEN"), &token, &token_len, &err) == -1) {
		sbx_env_scrub("SBX_BROKER_TOKEN");
		rc = sbx_daemon_config_error("sandbox-api", &err);
		goto done;
	}
	/* Out of /proc/PID/environ too, not only out of environ(7). */
	sbx_env_scrub("SBX_BROKER_TOKEN");
	sbx_log_add_secret(token);

	if ((m.base = event_base_new()) == NULL) {
		fprintf(stderr, "sandbox-api: cannot create an event base\n");
		goto done;
	}
	memset(&bc, 0, sizeof(bc));
	bc.address = cfg.broker;
	bc.token = token;
	bc.token_len = token_len;
	bc.header_timeout_ms = cfg.broker_timeout;
	bc.write_out_max = (size_t)cfg.file_write_buffer;
	if ((driver = sbx_broker_driver_new(m.base, &bc, &err)) == NULL) {
		rc = sbx_daemon_config_error("sandbox-api", &err);
		goto done;
	}
	sbx_broker_token_free(token);
	token = NULL;
	if ((m.server = api_server_new(m.base, &cfg, driver, &err)) == NULL) {
		rc = sbx_daemon_start_error("sandbox-api", &err);
		goto done;
	}
	/* Bound and opened: nothing below needs root. */
	if (give_state_dir(cfg.user, cfg.state_dir, &err) == -1 ||
	    drop_privileges(cfg.user, &err) == -1) {
		rc = sbx_daemon_config_error("sandbox-api", &err);
		goto done;
	}
	if (sbx_daemon_signals("sandbox-api", m.base, on_stop, &m,
	    sigs) == -1)
		goto done;
	snprintf(port, sizeof(port), "%d", api_server_port(m.server));
	log_info("listening", "listen", cfg.listen, "port", port, "broker",
	    cfg.broker, "state_dir", cfg.state_dir, "version", API_VERSION,
	    NULL);
	if (event_base_dispatch(m.base) == -1) {
		log_error("event loop failed", NULL);
		goto done;
	}
	log_info("stopped", NULL);
	rc = API_EXIT_OK;
done:
	sbx_daemon_signals_free(sigs);
	api_server_free(m.server);
	sbx_driver_free(driver);
	if (m.base != NULL)
		event_base_free(m.base);
	sbx_broker_token_free(token);
	sbx_config_free(api_config_keys, &cfg);
	sbx_config_opts_free(&opts);
	return rc;
}
