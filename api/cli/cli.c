/* cli.c - sbxctl: the command-line client of sandbox-api for players and operators (SPEC §8, §9; docs/cli.md). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "cli_http.h"
#include "cli_print.h"
#include "cli_sse.h"
#include "sbx_config.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"

#include "cli_int.h"

static int c_whoami(struct ctx *);
static int c_npc_create(struct ctx *);
static int c_npc_ls(struct ctx *);
static int c_up(struct ctx *);
static int c_status(struct ctx *);
static int c_stop(struct ctx *);
static int c_rm(struct ctx *);
static int c_egress_grant(struct ctx *);
static int c_egress_revoke(struct ctx *);
static int c_egress_show(struct ctx *);

static const struct cmd cmds[] = {
	{ "npc create", "NAME [--owner PLAYER]", "create an NPC (an operator "
	    "may create one for a player)", O_JSON | O_OWNER, 1, 1,
	    c_npc_create },
	{ "npc ls", "[--json]", "list your NPCs (an operator sees all)",
	    O_JSON, 0, 0, c_npc_ls },
	{ "up", "NPC [--image IMAGE] [--json]", "create or start the NPC's "
	    "sandbox (idempotent)", O_JSON | O_IMAGE, 1, 1, c_up },
	{ "status", "NPC [--usage] [--json]", "show the sandbox's state "
	    "(--usage: and what its /work holds)", O_JSON | O_USAGE, 1, 1,
	    c_status },
	{ "stop", "NPC", "stop the sandbox (its /work volume stays)", O_JSON,
	    1, 1, c_stop },
	{ "rm", "NPC", "remove the sandbox AND its /work volume "
	    "(irreversible)", O_JSON, 1, 1, c_rm },
	{ "exec", "[-w DIR] [-e NAME=VALUE]... [-t SECONDS] [-i] [-d] NPC -- "
	    "CMD [ARG...]", "run a command, streaming its output (resumed "
	    "when the connection drops); exits with its exit code; -d: print "
	    "the exec id and leave it running", O_CWD | O_ENV | O_TIMEOUT |
	    O_STDIN | O_DETACH | O_REST, 1, 1, c_exec },
	{ "shell", "[-w DIR] NPC [-- CMD [ARG...]]", "a terminal in the "
	    "sandbox (the login shell, or CMD) attached here; exits with its "
	    "exit code; Ctrl-] d detaches and leaves it running",
	    O_CWD | O_REST, 1, 1, c_shell },
	{ "attach", "NPC TERMINAL_ID", "attach to a running terminal (its "
	    "scrollback first); Ctrl-] d detaches again", 0, 2, 2, c_attach },
	{ "terminals", "NPC [list | kill ID] [--json]", "the NPC's terminals, "
	    "newest first (a detached one runs on and counts against the "
	    "sandbox's command limit), or one killed", O_JSON, 1, 3,
	    c_terminals },
	{ "port-forward", "NPC LOCAL:REMOTE", "forward 127.0.0.1:LOCAL to "
	    "port REMOTE inside the sandbox (no network needed; every "
	    "connection its own tunnel) until Ctrl-C", 0, 2, 2,
	    c_port_forward },
	{ "browser", "NPC start|stop|status [--json]", "the sandbox's headless "
	    "Chromium: start it (and print its CDP endpoint), stop it, or show "
	    "it", O_JSON, 2, 2, c_browser },
	{ "logs", "[-f] NPC EXEC_ID", "print an exec's output so far; -f: "
	    "follow it to its end (resumed when the connection drops)",
	    O_FOLLOW, 2, 2, c_logs },
	{ "cp", "[--mode OCTAL] LOCAL NPC:/work/PATH | NPC:/work/PATH LOCAL",
	    "copy a file into or out of the sandbox (LOCAL '-' is "
	    "stdin/stdout)", O_MODE, 2, 2, c_cp },
	{ "cat", "NPC:/work/PATH", "write a sandbox file to stdout", 0, 1, 1,
	    c_cat },
	{ "ls", "NPC:/work/DIR [--json]", "list a directory of the sandbox",
	    O_JSON, 1, 1, c_ls },
	{ "egress grant", "NPC [--allow HOST]...", "allow the sandbox network "
	    "egress, all of it or only to HOSTs (pypi.org, '*.pythonhosted.org', "
	    "api.example.com:443, 10.1.0.0/16; operators only)", O_JSON | O_ALLOW, 1, 1,
	    c_egress_grant },
	{ "egress show", "NPC", "the egress grant: policy, who and when, recent "
	    "denials (operators only)", O_JSON, 1, 1, c_egress_show },
	{ "egress revoke", "NPC", "take network egress away again "
	    "(operators only)", O_JSON, 1, 1, c_egress_revoke },
	{ "snapshot", "NPC create|list|delete [NAME] [--json]", "a read-only "
	    "copy of the sandbox's /work, kept until deleted (also after the "
	    "sandbox is removed)", O_JSON, 2, 3, c_snapshot },
	{ "fork", "NPC NEW [--json]", "a new sandbox for NPC NEW (made when "
	    "absent) whose /work is a copy of NPC's now", O_JSON, 2, 2, c_fork },
	{ "whoami", "[--json]", "show the principal the key belongs to",
	    O_JSON, 0, 0, c_whoami },
	{ NULL, NULL, NULL, 0, 0, 0, NULL },
};

static const char exit_codes[] =
    "Exit codes:\n"
    "  0    success\n"
    "  N    sbxctl exec, shell, attach, logs: the command's own exit code\n"
    "       (128+SIG when killed)\n"
    "  1    other error (the server's sentence is printed)\n"
    "  2    bad usage or configuration (also HTTP 400 from the server)\n"
    "  3    refused: bad or missing key (401), not allowed (403)\n"
    "  4    not found (404): no such NPC of yours, file or directory\n"
    "  5    server unavailable: connection failed, HTTP 502/503/504\n"
    "  124  sbxctl exec: the command hit its timeout\n"
    "  130  interrupted (Ctrl-C); a running exec is cancelled\n"
    "  141  sbxctl exec: stdout or stderr was closed (a pipe reader left)\n";


static void
main_help(FILE *f)
{
	const struct cmd *c;

	fprintf(f, "usage: sbxctl [--help] [--version] COMMAND [ARGS]\n\n"
	    "The command-line client of sandbox-api. It reads the server's "
	    "address from\nSBX_URL (default " DEFAULT_URL ") and the API key "
	    "from SBX_KEY, else from\n~/.config/sbxctl/config (or $SBX_CLI_CONFIG): "
	    "lines \"url = ...\" and \"key = ...\";\na file holding a key must "
	    "not be readable by others (chmod 600).\n\nCommands:\n");
	for (c = cmds; c->name != NULL; c++)
		fprintf(f, "  %-14s %s\n", c->name, c->help);
	fprintf(f, "\nUsage:\n");
	for (c = cmds; c->name != NULL; c++)
		usage_line(f, c);
	fprintf(f, "\n'sbxctl COMMAND --help' shows one command. --json prints "
	    "the server's JSON\n(npc ls, status, ls, up, whoami, ...).\n\n%s",
	    exit_codes);
}

/* ------------------------------------------------------------------ */
/* Commands: NPCs and sandboxes                                        */

static int
c_whoami(struct ctx *x)
{
	json_t *j = NULL;
	int rc;

	if ((rc = call_json(x, "GET", API_BASE "/whoami", NULL, &j)) != CX_OK)
		return rc;
	return print_answer(x, j, "%s (%s)\n", jstr(j, "name"),
	    jstr(j, "role"));
}

static int
c_npc_create(struct ctx *x)
{
	json_t *body, *j = NULL;
	int rc;

	body = json_pack("{s:s}", "name", x->o.pos[0]);
	if (body != NULL && x->o.owner != NULL)
		json_object_set_new(body, "owner", json_string(x->o.owner));
	if (body == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	rc = call_json(x, "POST", API_BASE "/npcs", body, &j);
	json_decref(body);
	if (rc != CX_OK)
		return rc;
	return print_answer(x, j, "created NPC %s (owner %s); start its sandbox "
	    "with: sbxctl up %s\n", jstr(j, "name"), jstr(j, "owner"),
	    jstr(j, "name"));
}

static int
c_npc_ls(struct ctx *x)
{
	json_t *j = NULL, *n;
	char tb[64];
	size_t i;
	int rc;

	if ((rc = call_json(x, "GET", API_BASE "/npcs", NULL, &j)) != CX_OK)
		return rc;
	if (x->o.json) {
		rc = print_json(j);
		json_decref(j);
		return rc;
	}
	printf("%-24s %-16s %-7s %s\n", "NAME", "OWNER", "EGRESS", "CREATED");
	json_array_foreach(j, i, n)
		printf("%-24s %-16s %-7s %s\n", jstr(n, "name"), jstr(n, "owner"),
		    json_is_true(json_object_get(n, "egress")) ? "yes" : "no",
		    ms_time(json_object_get(n, "created_at"), tb, sizeof(tb)));
	json_decref(j);
	return CX_OK;
}

/* A server word printed raw only when it is [a-z_]{1,32}; else "?". */
static const char *
cli_safe_word(json_t *v)
{
	const char *s = json_string_value(v);
	size_t i;

	if (s == NULL || s[0] == '\0' || strlen(s) > 32)
		return "?";
	for (i = 0; s[i] != '\0'; i++)
		if ((s[i] < 'a' || s[i] > 'z') && s[i] != '_')
			return "?";
	return s;
}

static void
print_status(json_t *j)
{
	char tb[64];

	printf("npc:        %s\n", jstr(j, "npc"));
	printf("owner:      %s\n", jstr(j, "owner"));
	printf("state:      %s\n", jstr(j, "state"));
	printf("image:      %s\n", jstr(j, "image"));
	printf("egress:     %s (granted: %s)\n",
	    json_is_true(json_object_get(j, "egress")) ? "on" : "off",
	    json_is_true(json_object_get(j, "egress_granted")) ? "yes" : "no");
	printf("created:    %s\n", ms_time(json_object_get(j, "created_at"),
	    tb, sizeof(tb)));
	printf("last used:  %s\n", ms_time(json_object_get(j, "last_used_at"),
	    tb, sizeof(tb)));
	if (json_is_string(json_object_get(j, "stop_reason")))
		printf("stopped:    %s\n", cli_stop_words(jstr(j, "stop_reason")));
}

static int
c_up(struct ctx *x)
{
	json_t *body = NULL, *j = NULL;
	int rc;

	if (x->o.image != NULL &&
	    (body = json_pack("{s:s}", "image", x->o.image)) == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	rc = npc_call(x, "PUT", x->o.pos[0], "/sandbox", body, &j);
	json_decref(body);
	if (rc != CX_OK)
		return rc;
	return print_answer(x, j, "%s: %s\n", x->o.pos[0], jstr(j, "state"));
}

/* The "usage" member of status --usage (docs/api.md); null: not running. */
static void
print_usage(json_t *j)
{
	json_t *u = json_object_get(j, "usage");

	if (u == NULL)
		return;
	if (!json_is_object(u)) {
		printf("/work:      not counted (the sandbox is not running)\n");
		return;
	}
	printf("/work:      %" JSON_INTEGER_FORMAT " bytes on disk, %"
	    JSON_INTEGER_FORMAT " bytes in %" JSON_INTEGER_FORMAT " files, %"
	    JSON_INTEGER_FORMAT " entries (%" JSON_INTEGER_FORMAT " ms)%s%s\n",
	    json_integer_value(json_object_get(u, "bytes")),
	    json_integer_value(json_object_get(u, "apparent_bytes")),
	    json_integer_value(json_object_get(u, "files")),
	    json_integer_value(json_object_get(u, "entries")),
	    json_integer_value(json_object_get(u, "elapsed_ms")),
	    json_is_true(json_object_get(u, "partial")) ? ", PARTIAL: " : "",
	    json_is_true(json_object_get(u, "partial")) ?
	    cli_safe_word(json_object_get(u, "partial_reason")) : "");
}

static int
c_status(struct ctx *x)
{
	json_t *j = NULL;
	int rc;

	if ((rc = npc_call(x, "GET", x->o.pos[0], x->o.usage ?
	    "/sandbox?usage=1" : "/sandbox", NULL, &j)) != CX_OK)
		return rc;
	if (x->o.json)
		rc = print_json(j);
	else {
		print_status(j);
		print_usage(j);
	}
	json_decref(j);
	return rc;
}

static int
simple_state(struct ctx *x, const char *method, const char *suffix,
    json_t *body, const char *done_word)
{
	json_t *j = NULL;
	int rc;

	if ((rc = npc_call(x, method, x->o.pos[0], suffix, body, &j)) != CX_OK)
		return rc;
	return print_answer(x, j, "%s: %s\n", x->o.pos[0], done_word);
}

static int
c_stop(struct ctx *x)
{
	return simple_state(x, "POST", "/sandbox/stop", NULL,
	    "stopped (its /work volume stays)");
}

static int
c_rm(struct ctx *x)
{
	return simple_state(x, "DELETE", "/sandbox", NULL,
	    "sandbox and its /work volume removed");
}

static int
egress(struct ctx *x, int on)
{
	json_t *body = json_pack("{s:b}", "enabled", on), *j = NULL, *allow;
	const char *change;
	int rc, i;

	if (body == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	/* --allow narrows the grant to those hosts (adr/0026); the api checks
	 * each entry. */
	if (on && x->o.nallow > 0) {
		if ((allow = json_array()) == NULL ||
		    json_object_set_new(body, "allow", allow) != 0) {
			json_decref(body);
			errmsg(SBX_MSG_OOM);
			return CX_ERR;
		}
		for (i = 0; i < x->o.nallow; i++)
			json_array_append_new(allow, json_string(x->o.allow[i]));
	}
	rc = npc_call(x, "PUT", x->o.pos[0], "/egress", body, &j);
	json_decref(body);
	if (rc != CX_OK)
		return rc;
	change = json_string_value(json_object_get(j, "change"));
	if (x->o.json)
		rc = print_json(j);
	else if (json_is_false(json_object_get(j, "applied")))
		printf("%s: egress %s; applies when its sandbox is next "
		    "created\n", x->o.pos[0], on ? "granted" : "revoked");
	else if (change != NULL && strcmp(change, "proxy") == 0)
		printf("%s: egress allowlist applied; the sandbox's proxy was "
		    "restarted (sandbox and /work kept)\n", x->o.pos[0]);
	else if (change != NULL && strcmp(change, "none") == 0)
		printf("%s: egress %s; nothing to change (the sandbox already "
		    "had it)\n", x->o.pos[0], on ? "granted" : "revoked");
	else if (change != NULL && (strcmp(change, "started") == 0 ||
	    strcmp(change, "restarted") == 0))
		printf("%s: egress %s (sandbox %s, /work kept)\n", x->o.pos[0],
		    on ? "granted" : "revoked", change);
	else   /* "replaced", or an api from before "change" */
		printf("%s: egress %s (sandbox replaced, /work kept)\n",
		    x->o.pos[0], on ? "granted" : "revoked");
	json_decref(j);
	return rc;
}

static int
c_egress_grant(struct ctx *x)
{
	return egress(x, 1);
}

static int
c_egress_revoke(struct ctx *x)
{
	return egress(x, 0);
}

/* GET .../egress: the grant, its allowlist and the proxy's recent denials. */
static int
c_egress_show(struct ctx *x)
{
	json_t *j = NULL, *v, *d;
	size_t i;
	int rc;

	rc = npc_call(x, "GET", x->o.pos[0], "/egress", NULL, &j);
	if (rc != CX_OK)
		return rc;
	if (x->o.json) {
		rc = print_json(j);
		json_decref(j);
		return rc;
	}
	printf("egress:     %s\n", json_is_true(json_object_get(j, "enabled")) ? "on" : "off");
	v = json_object_get(j, "allow");
	printf("allow:     ");
	for (i = 0; i < json_array_size(v); i++)
		printf(" %s", json_string_value(json_array_get(v, i)));
	printf("%s\n", json_array_size(v) == 0 ? " -" : "");
	v = json_object_get(j, "granted_by");
	if (json_is_string(v) && json_is_integer(json_object_get(j, "granted_at"))) {
		char when[32];

		printf("granted by: %s at %s\n", json_string_value(v),
		    ms_time(json_object_get(j, "granted_at"), when, sizeof(when)));
	} else
		printf("granted by: %s\n", json_is_string(v) ? json_string_value(v) : "-");
	v = json_object_get(j, "proxy");
	if (json_is_object(v))
		printf("proxy:      %" JSON_INTEGER_FORMAT " allowed, %" JSON_INTEGER_FORMAT
		    " denied\n", json_integer_value(json_object_get(v, "allowed")),
		    json_integer_value(json_object_get(v, "denied")));
	v = json_object_get(j, "denials");
	/* The proxy's reason names the host and port already ("h:443 is not
	 * in the allowlist"); host:port only when it gave none. */
	json_array_foreach(v, i, d) {
		const char *why = json_string_value(json_object_get(d, "reason"));

		if (why != NULL && why[0] != '\0')
			printf("denied:     %s %s\n", json_string_value(json_object_get(d,
			    "ts")) ?: "-", why);
		else
			printf("denied:     %s %s:%" JSON_INTEGER_FORMAT "\n",
			    json_string_value(json_object_get(d, "ts")) ?: "-",
			    json_string_value(json_object_get(d, "host")) ?: "-",
			    json_integer_value(json_object_get(d, "port")));
	}
	json_decref(j);
	return CX_OK;
}

/* ------------------------------------------------------------------ */
/* Command line                                                        */

static const struct cmd *
find_cmd(int argc, char **argv, int *words)
{
	const struct cmd *c;
	size_t l;

	for (c = cmds; c->name != NULL; c++) {
		l = strcspn(c->name, " ");
		if (strncmp(c->name, argv[0], l) != 0 || argv[0][l] != '\0')
			continue;
		if (c->name[l] == '\0') {
			*words = 1;
			return c;
		}
		if (argc > 1 && strcmp(c->name + l + 1, argv[1]) == 0) {
			*words = 2;
			return c;
		}
	}
	return NULL;
}

/* Appends val to a repeatable option's list (-e, --allow), at most MAX_ENV
 * of them; CX_OK or CX_USAGE naming the option. */
static int
push_opt(const struct cmd *c, const char **list, int *n, const char *val,
    const char *what)
{
	if (*n >= MAX_ENV)
		return usage_err(c, "at most %d %s options.", MAX_ENV, what);
	list[(*n)++] = val;
	return CX_OK;
}

/* Parses the command's options and positionals; returns CX_OK or CX_USAGE. */
static int
parse_args(const struct cmd *c, int argc, char **argv, struct opts *o)
{
	static const struct {
		const char *lng;
		char shrt;
		unsigned bit;
		int has_arg;
	} table[] = {
		{ "--json", 0, O_JSON, 0 },
		{ "--cwd", 'w', O_CWD, 1 },
		{ "--env", 'e', O_ENV, 1 },
		{ "--timeout", 't', O_TIMEOUT, 1 },
		{ "--stdin", 'i', O_STDIN, 0 },
		{ "--owner", 0, O_OWNER, 1 },
		{ "--image", 0, O_IMAGE, 1 },
		{ "--mode", 0, O_MODE, 1 },
		{ "--detach", 'd', O_DETACH, 0 },
		{ "--follow", 'f', O_FOLLOW, 0 },
		{ "--usage", 0, O_USAGE, 0 },
		{ "--allow", 0, O_ALLOW, 1 },
	};
	const char *a, *val;
	size_t i, ll;
	int k, is_exec = (c->opts & O_REST) != 0, dashdash = 0;

	for (k = 0; k < argc; k++) {
		a = argv[k];
		if (is_exec && o->npos == 1) {
			/* Everything after the NPC is the command. */
			if (strcmp(a, "--") == 0)
				k++;
			o->rest = argv + k;
			return CX_OK;
		}
		if (!dashdash && strcmp(a, "--") == 0) {
			dashdash = 1;
			continue;
		}
		if (dashdash || a[0] != '-' || strcmp(a, "-") == 0) {
			if (o->npos >= c->maxpos)
				return usage_err(c, "unexpected argument "
				    "\"%.80s\".", a);
			o->pos[o->npos++] = argv[k];
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			o->help = 1;
			return CX_OK;
		}
		for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
			ll = strlen(table[i].lng);
			if ((c->opts & table[i].bit) == 0)
				continue;
			if (strncmp(a, table[i].lng, ll) == 0 &&
			    (a[ll] == '\0' || (a[ll] == '=' && table[i].has_arg)))
				break;
			if (table[i].shrt != 0 && a[1] == table[i].shrt &&
			    a[2] == '\0')
				break;
		}
		if (i == sizeof(table) / sizeof(table[0]))
			return usage_err(c, "unknown option \"%.80s\".", a);
		val = NULL;
		if (table[i].has_arg) {
			ll = strlen(table[i].lng);
			if (strncmp(a, table[i].lng, ll) == 0 && a[ll] == '=')
				val = a + ll + 1;
			else if (k + 1 < argc)
				val = argv[++k];
			else
				return usage_err(c, "%s needs a value.", a);
		}
		switch (table[i].bit) {
		case O_JSON: o->json = 1; break;
		case O_CWD: o->cwd = val; break;
		case O_ENV:
			if (push_opt(c, o->env, &o->nenv, val, "-e") != CX_OK)
				return CX_USAGE;
			break;
		case O_TIMEOUT: o->timeout = val; break;
		case O_STDIN: o->stdin_flag = 1; break;
		case O_OWNER: o->owner = val; break;
		case O_IMAGE: o->image = val; break;
		case O_MODE: o->mode = val; break;
		case O_DETACH: o->detach = 1; break;
		case O_FOLLOW: o->follow = 1; break;
		case O_USAGE: o->usage = 1; break;
		case O_ALLOW:
			if (push_opt(c, o->allow, &o->nallow, val, "--allow") !=
			    CX_OK)
				return CX_USAGE;
			break;
		default: break;
		}
	}
	if (o->npos < c->minpos)
		return usage_err(c, "missing argument%s.", c->minpos -
		    o->npos > 1 ? "s" : "");
	/* shell's command is optional (the login shell); exec's is not. */
	if (is_exec && c->fn != c_shell)
		return usage_err(c, "exec needs a command after the NPC "
		    "(sbxctl exec NPC -- CMD ...).");
	return CX_OK;
}

int
main(int argc, char **argv)
{
	const struct cmd *c;
	struct ctx x;
	int words = 0, rc, i;

	memset(&x, 0, sizeof(x));
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			main_help(stdout);
			return CX_OK;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("sbxctl " SBX_CLI_VERSION " (api v1)\n");
			return CX_OK;
		}
		return usage_err(NULL, "unknown option \"%.80s\".", argv[i]);
	}
	if (i >= argc) {
		main_help(stderr);
		return CX_USAGE;
	}
	if ((c = find_cmd(argc - i, argv + i, &words)) == NULL) {
		/* "npc X" and "egress X" are two-word commands: name both. */
		int two = i + 1 < argc && (strcmp(argv[i], "npc") == 0 ||
		    strcmp(argv[i], "egress") == 0);

		if (strcmp(argv[i], "help") == 0) {
			main_help(stdout);
			return CX_OK;
		}
		/* "sbxctl egress --help": the usage of each of its commands. */
		if (two && (strcmp(argv[i + 1], "--help") == 0 ||
		    strcmp(argv[i + 1], "-h") == 0)) {
			size_t l = strlen(argv[i]);

			for (c = cmds; c->name != NULL; c++)
				if (strncmp(c->name, argv[i], l) == 0 &&
				    c->name[l] == ' ')
					printf("usage: sbxctl %s %s\n    %s.\n",
					    c->name, c->args, c->help);
			return CX_OK;
		}
		return usage_err(NULL, "unknown command \"%.80s%s%.80s\".",
		    argv[i], two ? " " : "", two ? argv[i + 1] : "");
	}
	if ((rc = parse_args(c, argc - i - words, argv + i + words, &x.o)) !=
	    CX_OK)
		return rc;
	if (x.o.help) {
		printf("usage: sbxctl %s %s\n\n%s.\n\n%s", c->name, c->args,
		    c->help, exit_codes);
		return CX_OK;
	}
	if (sodium_init() == -1) {
		errmsg("libsodium failed to initialise.");
		return CX_ERR;
	}
	if ((rc = load_config(&x)) != CX_OK)
		return rc;
	cli_http_signals();
	x.cmd = c;
	rc = c->fn(&x);
	fflush(stdout);
	if (x.key != NULL) {
		sodium_memzero(x.key, strlen(x.key));
		free(x.key);
	}
	return rc;
}
