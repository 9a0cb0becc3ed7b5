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

#define SBX_CLI_VERSION "0.1.0"
#define API_BASE "/api/v1"
#define DEFAULT_URL "http://127.0.0.1:8080"

/* Exit codes (docs/cli.md, `sbxctl --help`). */
#define CX_OK 0
#define CX_ERR 1
#define CX_USAGE 2
#define CX_REFUSED 3
#define CX_NOTFOUND 4
#define CX_UNAVAIL 5
#define CX_TIMEOUT 124       /* exec: the server ended the command at its timeout */
#define CX_INTR 130   /* Ctrl-C: 128 + SIGINT */

#define JSON_MAX ((size_t)64 * 1024 * 1024)
#define STDIN_MAX ((size_t)64 * 1024 * 1024)
#define MAX_ENV 64
#define MAX_POS 4

/* Options a command may accept (bits of struct cmd.opts). */
#define O_JSON 0x01
#define O_CWD 0x02
#define O_ENV 0x04
#define O_TIMEOUT 0x08
#define O_STDIN 0x10
#define O_OWNER 0x20
#define O_IMAGE 0x40
#define O_MODE 0x80
#define O_DETACH 0x100
#define O_FOLLOW 0x200
#define O_USAGE 0x1000

/* Reconnects of an exec's event stream without progress before giving up;
 * the waits grow from 200 ms to 2 s (about 11 s in all). */
#define RESUME_TRIES 8

struct opts {
	int json, help, stdin_flag, detach, follow, usage;
	const char *cwd, *timeout, *owner, *image, *mode;
	const char *env[MAX_ENV];
	int nenv;
	char *pos[MAX_POS];
	int npos;
	char **rest;     /* exec: the command's argv (NULL-terminated) */
};

struct ctx {
	struct cli_url url;
	char *key;       /* owned, wiped on exit; never printed */
	struct opts o;
};

struct cmd {
	const char *name;   /* one or two words */
	const char *args;   /* usage after the name */
	const char *help;   /* one line */
	unsigned opts;      /* O_* accepted */
	int minpos, maxpos; /* positional arguments (exec: before the command) */
	int (*fn)(struct ctx *);
};

static int c_whoami(struct ctx *);
static int c_npc_create(struct ctx *);
static int c_npc_ls(struct ctx *);
static int c_up(struct ctx *);
static int c_status(struct ctx *);
static int c_stop(struct ctx *);
static int c_rm(struct ctx *);
static int c_exec(struct ctx *);
static int c_cp(struct ctx *);
static int c_cat(struct ctx *);
static int c_ls(struct ctx *);
static int c_egress_grant(struct ctx *);
static int c_egress_revoke(struct ctx *);
static int c_logs(struct ctx *);

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
	    O_STDIN | O_DETACH, 1, 1, c_exec },
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
	{ "egress grant", "NPC", "allow the sandbox network egress "
	    "(operators only)", O_JSON, 1, 1, c_egress_grant },
	{ "egress revoke", "NPC", "take network egress away again "
	    "(operators only)", O_JSON, 1, 1, c_egress_revoke },
	{ "whoami", "[--json]", "show the principal the key belongs to",
	    O_JSON, 0, 0, c_whoami },
	{ NULL, NULL, NULL, 0, 0, 0, NULL },
};

static const char exit_codes[] =
    "Exit codes:\n"
    "  0    success\n"
    "  N    sbxctl exec, sbxctl logs: the command's own exit code (128+SIG when killed)\n"
    "  1    other error (the server's sentence is printed)\n"
    "  2    bad usage or configuration (also HTTP 400 from the server)\n"
    "  3    refused: bad or missing key (401), not allowed (403)\n"
    "  4    not found (404): no such NPC of yours, file or directory\n"
    "  5    server unavailable: connection failed, HTTP 502/503/504\n"
    "  124  sbxctl exec: the command hit its timeout\n"
    "  130  interrupted (Ctrl-C); a running exec is cancelled\n"
    "  141  sbxctl exec: stdout or stderr was closed (a pipe reader left)\n";

static const struct cmd *
cmd_of(int (*fn)(struct ctx *))
{
	const struct cmd *c;

	for (c = cmds; c->name != NULL; c++)
		if (c->fn == fn)
			return c;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Output helpers                                                      */

static void
errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
errmsg(const char *fmt, ...)
{
	char msg[1024], esc[4 * sizeof(msg)];
	va_list ap;
	int n;

	fflush(stdout);
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	/* Messages carry server text: no control byte reaches the terminal. */
	cli_escape(msg, strnlen(msg, sizeof(msg)), esc, sizeof(esc));
	fprintf(stderr, "sbxctl: %s\n", esc);
}

static void
usage_line(FILE *f, const struct cmd *c)
{
	fprintf(f, "  sbxctl %s %s\n", c->name, c->args);
}

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

static int
usage_err(const struct cmd *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
usage_err(const struct cmd *c, const char *fmt, ...)
{
	va_list ap;

	fputs("sbxctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (c != NULL) {
		fprintf(stderr, "usage:\n");
		usage_line(stderr, c);
	} else
		fprintf(stderr, "Run 'sbxctl --help' for the commands.\n");
	return CX_USAGE;
}

static const char *
ms_time(json_t *v, char *buf, size_t cap)
{
	if (!json_is_integer(v) || json_integer_value(v) <= 0)
		return "-";
	return cli_time(json_integer_value(v) / 1000, 1, buf, cap);
}

/* A string member of a server reply, escaped for printing (cli_escape);
 * "-" when absent. Borrowed from a ring of buffers: valid for the next
 * seven calls, enough for one printf. */
static const char *
jstr(json_t *obj, const char *k)
{
	static char ring[8][2048];
	static unsigned next;
	json_t *v = json_object_get(obj, k);
	char *out;

	if (!json_is_string(v))
		return "-";
	out = ring[next++ % 8];
	cli_escape(json_string_value(v), json_string_length(v), out,
	    sizeof(ring[0]));
	return out;
}

/* The raw string member (for comparisons, never for printing). */
static const char *
jraw(json_t *obj, const char *k)
{
	const char *s = json_string_value(json_object_get(obj, k));

	return s != NULL ? s : "";
}

static int
print_json(json_t *v)
{
	if (json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == -1)
		return CX_ERR;
	fputc('\n', stdout);
	return CX_OK;
}

/* ------------------------------------------------------------------ */
/* Configuration                                                       */

static int
valid_key(const char *k)
{
	const unsigned char *p;

	if (k == NULL || *k == '\0')
		return 0;
	for (p = (const unsigned char *)k; *p != '\0'; p++)
		if (*p < 0x21 || *p > 0x7e)
			return 0;
	return 1;
}

/* Reads "url = ..." / "key = ..." from the config file, when there is one. */
static int
read_config_file(char **url, char **key)
{
	char path[PATH_MAX], old[PATH_MAX] = "", line[8192], *k, *v, *e;
	const char *cf = getenv("SBX_CLI_CONFIG"), *home, *xdg;
	struct stat st;
	FILE *f = NULL;
	int rc = CX_USAGE, lineno = 0;

	if (cf != NULL && *cf != '\0')
		snprintf(path, sizeof(path), "%s", cf);
	else if ((xdg = getenv("XDG_CONFIG_HOME")) != NULL && *xdg == '/') {
		snprintf(path, sizeof(path), "%s/sbxctl/config", xdg);
		snprintf(old, sizeof(old), "%s/sbx/config", xdg);
	} else if ((home = getenv("HOME")) != NULL && *home != '\0') {
		snprintf(path, sizeof(path), "%s/.config/sbxctl/config", home);
		snprintf(old, sizeof(old), "%s/.config/sbx/config", home);
	} else
		return CX_OK;
	/* The CLI was called sbx before (ADR 0011): read its old place too. */
	if ((f = fopen(path, "re")) == NULL && errno == ENOENT &&
	    old[0] != '\0') {
		if ((f = fopen(old, "re")) != NULL)
			fprintf(stderr, "sbxctl: warning: reading %s, the old "
			    "place (deprecated); move it to %s.\n", old, path);
		if (f != NULL || errno != ENOENT)
			snprintf(path, sizeof(path), "%s", old);
	}
	if (f == NULL) {
		if (errno == ENOENT && (cf == NULL || *cf == '\0'))
			return CX_OK;
		errmsg("cannot read %s: %s.", path, strerror(errno));
		return CX_USAGE;
	}
	if (fstat(fileno(f), &st) == -1) {
		errmsg("cannot stat %s: %s.", path, strerror(errno));
		goto done;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		lineno++;
		for (k = line; *k == ' ' || *k == '\t'; k++)
			;
		if (*k == '#' || *k == '\n' || *k == '\0')
			continue;
		if ((v = strchr(k, '=')) == NULL) {
			errmsg("%s line %d: expected \"url = ...\" or "
			    "\"key = ...\".", path, lineno);
			goto done;
		}
		e = v;
		while (e > k && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		*e = '\0';
		for (v++; *v == ' ' || *v == '\t'; v++)
			;
		e = v + strlen(v);
		while (e > v && (e[-1] == '\n' || e[-1] == '\r' ||
		    e[-1] == ' ' || e[-1] == '\t'))
			*--e = '\0';
		if (strcmp(k, "url") == 0) {
			free(*url);
			*url = strdup(v);
		} else if (strcmp(k, "key") == 0) {
			/* A key others can read is a key others have. */
			if ((st.st_mode & 077) != 0) {
				errmsg("%s holds an API key but is accessible by "
				    "others (mode %04o); run: chmod 600 %s", path,
				    (unsigned)(st.st_mode & 07777), path);
				goto done;
			}
			if (*key != NULL) {
				sodium_memzero(*key, strlen(*key));
				free(*key);
			}
			*key = strdup(v);
		} else {
			errmsg("%s line %d: unknown setting \"%.40s\" (only url "
			    "and key).", path, lineno, k);
			goto done;
		}
	}
	rc = CX_OK;
done:
	sodium_memzero(line, sizeof(line));
	fclose(f);
	return rc;
}

static int
load_config(struct ctx *x)
{
	struct sbx_err err;
	char *url = NULL, *key = NULL;
	const char *ev;
	int rc;

	sbx_err_clear(&err);
	if ((rc = read_config_file(&url, &key)) != CX_OK)
		goto done;
	if ((ev = getenv("SBX_URL")) != NULL && *ev != '\0') {
		free(url);
		url = strdup(ev);
	}
	if ((ev = getenv("SBX_KEY")) != NULL && *ev != '\0') {
		if (key != NULL) {
			sodium_memzero(key, strlen(key));
			free(key);
		}
		key = strdup(ev);
	}
	rc = CX_USAGE;
	if (cli_url_parse(url != NULL ? url : DEFAULT_URL, &x->url,
	    &err) == -1) {
		errmsg("%s", err.message);
		goto done;
	}
	if (key == NULL) {
		errmsg("no API key: set SBX_KEY, or put \"key = ...\" in "
		    "~/.config/sbxctl/config (chmod 600).");
		goto done;
	}
	if (!valid_key(key)) {
		errmsg("the API key has characters an sbx key never has "
		    "(spaces, line breaks or non-ASCII); check SBX_KEY.");
		goto done;
	}
	x->key = key;
	key = NULL;
	rc = CX_OK;
done:
	free(url);
	if (key != NULL) {
		sodium_memzero(key, strlen(key));
		free(key);
	}
	return rc;
}

/* ------------------------------------------------------------------ */
/* Requests                                                            */

static int
status_exit(int status)
{
	if (status == 401 || status == 403)
		return CX_REFUSED;
	if (status == 404)
		return CX_NOTFOUND;
	if (status == 400)
		return CX_USAGE;
	if (status == 502 || status == 503 || status == 504)
		return CX_UNAVAIL;
	return CX_ERR;
}

static int
err_exit(const struct sbx_err *err)
{
	if (strcmp(err->code, CLI_E_UNAVAILABLE) == 0)
		return CX_UNAVAIL;
	if (strcmp(err->code, CLI_E_INTERRUPTED) == 0)
		return CX_INTR;
	if (strcmp(err->code, SBX_E_USAGE) == 0)
		return CX_USAGE;
	return CX_ERR;
}

/* Prints a transport error and returns its exit code. */
static int
fail_err(const struct sbx_err *err)
{
	if (strcmp(err->code, CLI_E_INTERRUPTED) == 0)
		errmsg("interrupted.");
	else
		errmsg("%s", err->message);
	return err_exit(err);
}

/* The NPC the current command is about, for hints in error messages. */
static const char *hint_npc;

/* Reads an error answer, prints the server's sentence, returns the exit code. */
static int
fail_resp(struct cli_conn *c, const struct cli_resp *r)
{
	struct sbx_err err;
	json_t *j = NULL, *e;
	const char *msg = NULL, *code;
	char *body;
	size_t len = 0;

	sbx_err_clear(&err);
	body = cli_http_read_all(c, 1024 * 1024, &len, &err);
	if (body != NULL)
		j = json_loadb(body, len, 0, NULL);
	e = json_object_get(j, "error");
	if (json_is_object(e))
		msg = json_string_value(json_object_get(e, "message"));
	if (msg != NULL) {
		errmsg("%s", msg);
		code = json_string_value(json_object_get(e, "code"));
		if (code != NULL && strcmp(code, SBX_E_NOT_RUNNING) == 0 &&
		    hint_npc != NULL)
			errmsg("start it with: sbxctl up %s", hint_npc);
	} else if (r->status == 401)
		errmsg("the server refused the API key (HTTP 401).");
	else if (r->status == 413)
		errmsg("the request is larger than the server accepts (HTTP "
		    "413); see its file_size_max and body_max settings.");
	else if (r->status == 502 || r->status == 503 || r->status == 504)
		errmsg("the server or a proxy in front of it is unavailable "
		    "(HTTP %d).", r->status);
	else
		errmsg("the server answered HTTP %d.", r->status);
	json_decref(j);
	free(body);
	return status_exit(r->status);
}

/*
 * One JSON request: method, target (under the URL's prefix), optional JSON
 * body (borrowed). On 2xx *out gets the parsed answer (owned; may be NULL
 * for an empty body) and CX_OK returns; else the error is printed and its
 * exit code returned.
 */
static int
call_json(struct ctx *x, const char *method, const char *target,
    json_t *body, json_t **out)
{
	struct cli_body b = { NULL, NULL, 0, -1 };
	struct cli_resp r;
	struct cli_conn *c = NULL;
	struct sbx_err err;
	json_error_t jerr;
	char *req = NULL, *ans = NULL;
	size_t len = 0;
	int rc;

	sbx_err_clear(&err);
	*out = NULL;
	if (body != NULL) {
		if ((req = json_dumps(body, JSON_COMPACT)) == NULL) {
			errmsg("out of memory.");
			return CX_ERR;
		}
		b.content_type = SBX_CT_JSON;
		b.data = req;
		b.len = strlen(req);
	}
	if ((c = cli_http_request(&x->url, method, target, x->key, &b, &r,
	    &err)) == NULL) {
		rc = fail_err(&err);
		goto done;
	}
	if (r.status < 200 || r.status > 299) {
		rc = fail_resp(c, &r);
		goto done;
	}
	if ((ans = cli_http_read_all(c, JSON_MAX, &len, &err)) == NULL) {
		rc = fail_err(&err);
		goto done;
	}
	rc = CX_OK;
	if (len > 0 && (*out = json_loadb(ans, len, 0, &jerr)) == NULL) {
		errmsg("the server's answer is not JSON (%s).", jerr.text);
		rc = CX_ERR;
	}
done:
	free(req);
	free(ans);
	cli_http_close(c);
	return rc;
}

/* target = API_BASE "/npcs/" + npc + suffix [+ "?path=" + encoded path]. */
static int
npc_target(char *dst, size_t cap, const char *npc, const char *suffix,
    const char *path)
{
	int n;

	hint_npc = npc;
	n = snprintf(dst, cap, API_BASE "/npcs/");
	if (n < 0 || (size_t)n >= cap || cli_url_encode(dst, cap, npc) == -1 ||
	    strlen(dst) + strlen(suffix) + 7 >= cap)
		return -1;
	strcat(dst, suffix);
	if (path != NULL) {
		strcat(dst, "?path=");
		if (cli_url_encode(dst, cap, path) == -1)
			return -1;
	}
	return 0;
}

static int
npc_call(struct ctx *x, const char *method, const char *npc,
    const char *suffix, json_t *body, json_t **out)
{
	char target[8192];

	if (npc_target(target, sizeof(target), npc, suffix, NULL) == -1) {
		errmsg("the NPC name is too long.");
		return CX_USAGE;
	}
	return call_json(x, method, target, body, out);
}

/* Splits "NPC:/work/PATH"; returns 1 when spec has that form. */
static int
remote_spec(const char *spec, char *npc, size_t cap, const char **path)
{
	const char *colon = strchr(spec, ':');
	size_t n;

	if (colon == NULL || colon == spec || colon[1] != '/' ||
	    memchr(spec, '/', (size_t)(colon - spec)) != NULL)
		return 0;
	n = (size_t)(colon - spec);
	if (n >= cap)
		return 0;
	memcpy(npc, spec, n);
	npc[n] = '\0';
	*path = colon + 1;
	return 1;
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
	if (x->o.json)
		rc = print_json(j);
	else
		printf("%s (%s)\n", jstr(j, "name"), jstr(j, "role"));
	json_decref(j);
	return rc;
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
		errmsg("out of memory.");
		return CX_ERR;
	}
	rc = call_json(x, "POST", API_BASE "/npcs", body, &j);
	json_decref(body);
	if (rc != CX_OK)
		return rc;
	if (x->o.json)
		rc = print_json(j);
	else
		printf("created NPC %s (owner %s); start its sandbox with: sbxctl "
		    "up %s\n", jstr(j, "name"), jstr(j, "owner"), jstr(j,
		    "name"));
	json_decref(j);
	return rc;
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
		printf("stopped by: %s\n", jstr(j, "stop_reason"));
}

static int
c_up(struct ctx *x)
{
	json_t *body = NULL, *j = NULL;
	int rc;

	if (x->o.image != NULL &&
	    (body = json_pack("{s:s}", "image", x->o.image)) == NULL) {
		errmsg("out of memory.");
		return CX_ERR;
	}
	rc = npc_call(x, "PUT", x->o.pos[0], "/sandbox", body, &j);
	json_decref(body);
	if (rc != CX_OK)
		return rc;
	if (x->o.json)
		rc = print_json(j);
	else
		printf("%s: %s\n", x->o.pos[0], jstr(j, "state"));
	json_decref(j);
	return rc;
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
	if (x->o.json)
		rc = print_json(j);
	else
		printf("%s: %s\n", x->o.pos[0], done_word);
	json_decref(j);
	return rc;
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
	json_t *body = json_pack("{s:b}", "enabled", on), *j = NULL;
	int rc;

	if (body == NULL) {
		errmsg("out of memory.");
		return CX_ERR;
	}
	rc = npc_call(x, "PUT", x->o.pos[0], "/egress", body, &j);
	json_decref(body);
	if (rc != CX_OK)
		return rc;
	if (x->o.json)
		rc = print_json(j);
	else if (json_is_false(json_object_get(j, "applied")))
		printf("%s: egress %s; applies when its sandbox is next "
		    "created\n", x->o.pos[0], on ? "granted" : "revoked");
	else
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

/* ------------------------------------------------------------------ */
/* exec                                                                */

struct exec_state {
	struct sbx_ndjson_parser *nd;
	int exited, code, truncated;
	char err_code[48];
	char err_msg[256];
	int out_broken;  /* stdout or stderr closed (EPIPE) */
	struct sbx_err perr;
	char last_id[24];   /* id of the last event read: where a resume starts */
	int started;        /* a start event went into the decoder */
};

static int
write_fd(int fd, const unsigned char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int
on_event(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct exec_state *s = arg;

	(void)line;
	(void)len;
	switch (ev->type) {
	case SBX_EVENT_STDOUT:
	case SBX_EVENT_STDERR:
		if (write_fd(ev->type == SBX_EVENT_STDOUT ? 1 : 2, ev->data,
		    ev->len) == -1) {
			s->out_broken = 1;
			return 1;
		}
		break;
	case SBX_EVENT_EXIT:
		s->exited = 1;
		s->code = ev->code;
		s->truncated = ev->truncated;
		break;
	case SBX_EVENT_ERROR:
		snprintf(s->err_code, sizeof(s->err_code), "%s", ev->err_code);
		snprintf(s->err_msg, sizeof(s->err_msg), "%s", ev->err_message);
		break;
	default:
		break;
	}
	return 0;
}

/* One SSE event: known exec events go through the NDJSON decoder, which
 * decodes data/data_b64 and checks the order; others are skipped. */
static int
on_sse(void *arg, const char *event, const char *data, size_t len,
    const char *id)
{
	static const char *const known[] = { SBX_EV_START, SBX_EV_STDOUT,
		SBX_EV_STDERR, SBX_EV_EXIT, SBX_EV_ERROR, NULL };
	static const char start_line[] = "{\"type\":\"start\",\"exec_id\":\"\","
	    "\"ts\":0}\n";
	struct exec_state *s = arg;
	char *line;
	size_t n, i;
	int r;

	if (id != NULL && id[0] != '\0')
		snprintf(s->last_id, sizeof(s->last_id), "%s", id);
	if (strcmp(event, "reset") == 0) {
		/* The server no longer keeps some events: say so, go on. */
		json_t *j = json_loadb(data, len, 0, NULL);

		errmsg("some output is no longer kept by the server: %s",
		    json_string_value(json_object_get(j, "message")) ?
		    json_string_value(json_object_get(j, "message")) : "reset");
		json_decref(j);
		return 0;
	}
	for (i = 0; known[i] != NULL; i++)
		if (strcmp(known[i], event) == 0)
			break;
	if (known[i] == NULL)
		return 0;
	if (strcmp(event, SBX_EV_START) == 0) {
		if (s->started)
			return 0;
		s->started = 1;
	} else if (!s->started) {
		/* The log's start was dropped: the decoder wants one first. */
		s->started = 1;
		if (sbx_ndjson_parser_feed(s->nd, start_line,
		    sizeof(start_line) - 1, &s->perr) == -1)
			return 1;
	}
	if ((line = cli_sse_ndjson_line(event, data, len, &n)) == NULL) {
		sbx_err_set(&s->perr, SBX_E_BAD_REQUEST, "a malformed %s event "
		    "arrived.", event);
		return 1;
	}
	r = sbx_ndjson_parser_feed(s->nd, line, n, &s->perr);
	free(line);
	return r == -1 ? 1 : 0;
}

/* Reads the exec's stdin (-i) into memory, base64-encoded. */
static char *
stdin_b64(void)
{
	unsigned char *buf = NULL, *np;
	size_t used = 0, cap = 0, b64len;
	ssize_t r;
	char *out = NULL;

	for (;;) {
		if (cap - used < 65536) {
			cap += 65536 + cap;
			if (cap > STDIN_MAX + 65536 ||
			    (np = realloc(buf, cap)) == NULL)
				goto done;
			buf = np;
		}
		r = read(0, buf + used, cap - used);
		if (r < 0 && errno == EINTR && !cli_http_interrupted())
			continue;
		if (r < 0)
			goto done;
		if (r == 0)
			break;
		used += (size_t)r;
		if (used > STDIN_MAX)
			goto done;
	}
	b64len = sodium_base64_ENCODED_LEN(used, sodium_base64_VARIANT_ORIGINAL);
	if ((out = malloc(b64len)) != NULL)
		sodium_bin2base64(out, b64len, buf != NULL ? buf :
		    (const unsigned char *)"", used,
		    sodium_base64_VARIANT_ORIGINAL);
done:
	free(buf);
	return out;
}

static json_t *
exec_body(struct ctx *x, int *rc)
{
	json_t *body = NULL, *argv = NULL, *env = NULL;
	char *end, *in = NULL;
	double secs;
	int i;

	*rc = CX_ERR;
	if ((body = json_object()) == NULL || (argv = json_array()) == NULL)
		goto oom;
	for (i = 0; x->o.rest[i] != NULL; i++)
		if (json_array_append_new(argv, json_string(x->o.rest[i])) == -1) {
			errmsg("argument %d is not valid UTF-8.", i + 1);
			*rc = CX_USAGE;
			goto fail;
		}
	json_object_set_new(body, "argv", argv);
	argv = NULL;
	if (x->o.cwd != NULL)
		json_object_set_new(body, "cwd", json_string(x->o.cwd));
	if (x->o.nenv > 0) {
		if ((env = json_array()) == NULL)
			goto oom;
		for (i = 0; i < x->o.nenv; i++) {
			if (strchr(x->o.env[i], '=') == NULL ||
			    x->o.env[i][0] == '=') {
				*rc = usage_err(NULL, "-e wants NAME=VALUE, not "
				    "\"%.40s\".", x->o.env[i]);
				goto fail;
			}
			json_array_append_new(env, json_string(x->o.env[i]));
		}
		json_object_set_new(body, "env", env);
		env = NULL;
	}
	if (x->o.timeout != NULL) {
		errno = 0;
		secs = strtod(x->o.timeout, &end);
		if (end == x->o.timeout || *end != '\0' || errno != 0 ||
		    secs <= 0 || secs > 86400 * 7) {
			*rc = usage_err(NULL, "-t wants seconds, e.g. -t 30 or "
			    "-t 0.5.");
			goto fail;
		}
		json_object_set_new(body, "timeout_ms",
		    json_integer((json_int_t)(secs * 1000 + 0.5)));
	}
	if (x->o.stdin_flag) {
		if ((in = stdin_b64()) == NULL) {
			errmsg("cannot read standard input (at most %zu MiB for "
			    "-i).", STDIN_MAX >> 20);
			goto fail;
		}
		json_object_set_new(body, "stdin", json_string(in));
		free(in);
	}
	return body;
oom:
	errmsg("out of memory.");
fail:
	json_decref(body);
	json_decref(argv);
	json_decref(env);
	return NULL;
}

static int
retryable(const char *code)
{
	return strcmp(code, CLI_E_IO) == 0 || strcmp(code, CLI_E_UNAVAILABLE) == 0;
}

/* Waits before reconnect number tries (0-based): 200 ms doubling, at most
 * 2 s. Returns -1 when a signal arrived meanwhile. */
static int
backoff(int tries)
{
	long ms = 200L << (tries < 4 ? tries : 4);
	struct timespec ts;

	if (ms > 2000)
		ms = 2000;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000L;
	nanosleep(&ts, NULL);
	return cli_http_interrupted() ? -1 : 0;
}

/*
 * Reads exec id's events (GET .../execs/ID/events) into s, from where s
 * stopped (s->last_id, sent as ?last_event_id=), reconnecting when the
 * connection drops before the terminal event (docs/cli.md). follow 0: up
 * to the end of what the server has logged. Returns CX_OK once the stream
 * is complete, CX_INTR on a signal, 141 when our output was closed, or
 * another exit code after printing why.
 */
static int
follow_events(struct ctx *x, const char *npc, const char *id, int follow,
    struct exec_state *s)
{
	char target[8192], suffix[256], before[24], buf[65536];
	struct cli_resp r;
	struct cli_conn *c;
	struct cli_sse *sse;
	struct sbx_err err;
	ssize_t n;
	int tries = 0, rc;

	cli_http_set_idle_timeout(60000);   /* heartbeats come every 15 s */
	for (;;) {
		snprintf(suffix, sizeof(suffix), "/sandbox/execs/%s/events?"
		    "follow=%d%s%s", id, follow, s->last_id[0] != '\0' ?
		    "&last_event_id=" : "", s->last_id);
		if (npc_target(target, sizeof(target), npc, suffix, NULL) == -1) {
			errmsg("the NPC name or exec id is too long.");
			return CX_USAGE;
		}
		snprintf(before, sizeof(before), "%s", s->last_id);
		sbx_err_clear(&err);
		c = cli_http_request(&x->url, "GET", target, x->key, NULL, &r,
		    &err);
		if (c == NULL) {
			if (strcmp(err.code, CLI_E_INTERRUPTED) == 0)
				return CX_INTR;
			if (retryable(err.code) && tries < RESUME_TRIES) {
				if (backoff(tries++) == -1)
					return CX_INTR;
				continue;
			}
			return fail_err(&err);
		}
		if (r.status == 204) {      /* nothing after the last event */
			cli_http_close(c);
			return CX_OK;
		}
		if (r.status != 200) {
			if ((r.status == 502 || r.status == 503 ||
			    r.status == 504) && tries < RESUME_TRIES) {
				cli_http_close(c);
				if (backoff(tries++) == -1)
					return CX_INTR;
				continue;
			}
			rc = fail_resp(c, &r);
			cli_http_close(c);
			return rc;
		}
		if (strncmp(r.content_type, SBX_CT_SSE, strlen(SBX_CT_SSE)) != 0) {
			errmsg("the server answered with %s, not an event "
			    "stream.", r.content_type[0] != '\0' ?
			    r.content_type : "no type");
			cli_http_close(c);
			return CX_ERR;
		}
		if ((sse = cli_sse_new(0, on_sse, s)) == NULL) {
			cli_http_close(c);
			errmsg("out of memory.");
			return CX_ERR;
		}
		rc = -1;
		for (;;) {
			n = cli_http_read(c, buf, sizeof(buf), &err);
			if (n <= 0)
				break;
			if (cli_sse_feed(sse, buf, (size_t)n, &err) == -1) {
				if (s->out_broken)
					rc = 141;   /* like a shell's SIGPIPE death */
				else {
					errmsg("bad event stream from the server: "
					    "%s", sbx_err_is_set(&s->perr) ?
					    s->perr.message : err.message);
					rc = CX_ERR;
				}
				break;
			}
		}
		cli_sse_free(sse);
		cli_http_close(c);
		if (rc != -1)
			return rc;
		if (n < 0 && strcmp(err.code, CLI_E_INTERRUPTED) == 0)
			return CX_INTR;
		if (s->exited || s->err_code[0] != '\0' || (!follow && n == 0))
			return CX_OK;
		/* Cut before the end: resume after the last event read. */
		if (strcmp(before, s->last_id) != 0)
			tries = 0;
		if (tries >= RESUME_TRIES) {
			errmsg("the event stream broke %d times without progress; "
			    "giving up (resume with: sbxctl logs -f %s %s).",
			    RESUME_TRIES, npc, id);
			return CX_UNAVAIL;
		}
		if (backoff(tries++) == -1)
			return CX_INTR;
	}
}

/* The exit code for a complete exec stream (s), after printing why it
 * did not simply exit. */
static int
exec_outcome(const struct exec_state *s)
{
	if (s->err_code[0] != '\0') {
		errmsg("%s", s->err_msg[0] != '\0' ? s->err_msg : s->err_code);
		return strcmp(s->err_code, SBX_E_TIMEOUT) == 0 ? CX_TIMEOUT :
		    CX_ERR;
	}
	if (!s->exited) {
		errmsg("the event stream ended before the command's exit status "
		    "arrived.");
		return CX_ERR;
	}
	if (s->truncated)
		errmsg("the output reached the server's cap; the command was "
		    "ended and its output truncated.");
	return s->code;
}

static int
c_exec(struct ctx *x)
{
	struct exec_state s;
	char target[8192], suffix[256];
	const char *id;
	json_t *body = NULL, *ans = NULL, *gone = NULL;
	int rc = CX_ERR;

	memset(&s, 0, sizeof(s));
	if (x->o.rest == NULL || x->o.rest[0] == NULL)
		return usage_err(cmd_of(c_exec), "exec needs a command after the NPC "
		    "(sbxctl exec NPC -- CMD ...).");
	if (npc_target(target, sizeof(target), x->o.pos[0], "/sandbox/execs",
	    NULL) == -1)
		return usage_err(NULL, "the NPC name is too long.");
	if ((body = exec_body(x, &rc)) == NULL)
		return rc;
	/* A resource exec (docs/api.md): it outlives this connection, so a
	 * dropped connection is resumed, not fatal. */
	if ((rc = call_json(x, "POST", target, body, &ans)) != CX_OK)
		goto done;
	rc = CX_ERR;
	id = json_string_value(json_object_get(ans, "exec_id"));
	if (id == NULL || strlen(id) > 64 || strspn(id,
	    "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(id)) {
		errmsg("the server's answer has no exec id.");
		goto done;
	}
	if (x->o.detach) {
		printf("%s\n", id);
		rc = CX_OK;
		goto done;
	}
	if ((s.nd = sbx_ndjson_parser_new(0, on_event, &s)) == NULL) {
		errmsg("out of memory.");
		goto done;
	}
	rc = follow_events(x, x->o.pos[0], id, 1, &s);
	if (rc == CX_INTR || rc == 141) {
		/* We are going away: so does the command (DELETE kills its
		 * process tree). */
		cli_http_clear_interrupt();
		snprintf(suffix, sizeof(suffix), "/sandbox/execs/%s", id);
		(void)npc_call(x, "DELETE", x->o.pos[0], suffix, NULL, &gone);
		if (rc == CX_INTR)
			errmsg("interrupted; the command was cancelled.");
		goto done;
	}
	if (rc == CX_OK)
		rc = exec_outcome(&s);
done:
	sbx_ndjson_parser_free(s.nd);
	json_decref(body);
	json_decref(ans);
	json_decref(gone);
	return rc;
}

static int
c_logs(struct ctx *x)
{
	struct exec_state s;
	const char *id = x->o.pos[1];
	int rc;

	memset(&s, 0, sizeof(s));
	if (strlen(id) == 0 || strlen(id) > 64 || strspn(id,
	    "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(id))
		return usage_err(cmd_of(c_logs), "EXEC_ID is what 'sbxctl exec -d' "
		    "printed (letters and digits).");
	if ((s.nd = sbx_ndjson_parser_new(0, on_event, &s)) == NULL) {
		errmsg("out of memory.");
		return CX_ERR;
	}
	rc = follow_events(x, x->o.pos[0], id, x->o.follow, &s);
	if (rc == CX_INTR)
		errmsg("interrupted.");
	else if (rc == CX_OK && (s.exited || s.err_code[0] != '\0'))
		rc = exec_outcome(&s);   /* ended: its exit code, like exec */
	sbx_ndjson_parser_free(s.nd);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Files                                                               */

/* Streams the body of a GET files answer to fd. */
static int
download(struct ctx *x, const char *npc, const char *path, int fd)
{
	struct cli_resp r;
	struct cli_conn *c = NULL;
	struct sbx_err err;
	char target[8192], *buf = NULL;
	ssize_t n;
	int rc = CX_ERR;

	sbx_err_clear(&err);
	if (npc_target(target, sizeof(target), npc, "/sandbox/files",
	    path) == -1)
		return usage_err(NULL, "the NPC name or path is too long.");
	if ((buf = malloc(65536)) == NULL) {
		errmsg("out of memory.");
		return CX_ERR;
	}
	if ((c = cli_http_request(&x->url, "GET", target, x->key, NULL, &r,
	    &err)) == NULL) {
		rc = fail_err(&err);
		goto done;
	}
	if (r.status != 200) {
		rc = fail_resp(c, &r);
		goto done;
	}
	for (;;) {
		if ((n = cli_http_read(c, buf, 65536, &err)) < 0) {
			rc = fail_err(&err);
			goto done;
		}
		if (n == 0)
			break;
		if (write_fd(fd, (unsigned char *)buf, (size_t)n) == -1) {
			errmsg("writing the local file failed: %s.",
			    strerror(errno));
			goto done;
		}
	}
	rc = CX_OK;
done:
	free(buf);
	cli_http_close(c);
	return rc;
}

static int
c_cat(struct ctx *x)
{
	const char *path;
	char npc[128];

	if (!remote_spec(x->o.pos[0], npc, sizeof(npc), &path))
		return usage_err(cmd_of(c_cat), "expected NPC:/work/PATH, not "
		    "\"%.80s\".", x->o.pos[0]);
	return download(x, npc, path, 1);
}

/* Fills in the file name when the destination names a directory. */
static int
dest_path(char *dst, size_t cap, const char *dir_or_file, const char *src,
    int is_dir)
{
	char tmp[PATH_MAX];
	const char *base;
	size_t l = strlen(dir_or_file);

	if (!is_dir)
		return snprintf(dst, cap, "%s", dir_or_file) < (int)cap ? 0 : -1;
	snprintf(tmp, sizeof(tmp), "%s", src);
	base = basename(tmp);
	if (base[0] == '\0' || strcmp(base, "/") == 0 ||
	    strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return -1;
	return snprintf(dst, cap, "%s%s%s", dir_or_file,
	    l > 0 && dir_or_file[l - 1] == '/' ? "" : "/", base) < (int)cap ?
	    0 : -1;
}

static int
cp_from(struct ctx *x, const char *npc, const char *rpath, const char *local)
{
	char dst[PATH_MAX], tmp[PATH_MAX + 32], dir[PATH_MAX];
	const char *parent;
	struct stat st;
	mode_t um;
	int fd = -1, rc;

	if (strcmp(local, "-") == 0)
		return download(x, npc, rpath, 1);
	if (dest_path(dst, sizeof(dst), local, rpath, stat(local, &st) == 0 &&
	    S_ISDIR(st.st_mode)) == -1)
		return usage_err(NULL, "cannot name the local file for %s.", rpath);
	/* Into a temporary file beside the destination, renamed when the
	 * whole file arrived: a failed copy leaves the old file alone. */
	snprintf(dir, sizeof(dir), "%s", dst);
	parent = dirname(dir);
	snprintf(tmp, sizeof(tmp), "%s/.sbx-cp-XXXXXX", parent);
	if ((fd = mkstemp(tmp)) == -1) {
		errmsg("cannot create a file in %s: %s.", parent,
		    strerror(errno));
		return errno == ENOENT ? CX_NOTFOUND : CX_ERR;
	}
	um = umask(0);
	umask(um);
	fchmod(fd, 0666 & ~um);
	rc = download(x, npc, rpath, fd);
	if (close(fd) == -1 && rc == CX_OK) {
		errmsg("writing %s failed: %s.", dst, strerror(errno));
		rc = CX_ERR;
	}
	if (rc == CX_OK && rename(tmp, dst) == -1) {
		errmsg("cannot rename into %s: %s.", dst, strerror(errno));
		rc = CX_ERR;
	}
	if (rc != CX_OK)
		unlink(tmp);
	return rc;
}

/* Reads all of stdin into memory (for "sbxctl cp - NPC:/work/F"). */
static char *
slurp_stdin(size_t *len)
{
	char *buf = NULL, *np;
	size_t used = 0, cap = 0;
	ssize_t r;

	for (;;) {
		if (cap - used < 65536) {
			cap = cap * 2 + 65536;
			if ((np = realloc(buf, cap)) == NULL)
				goto fail;
			buf = np;
		}
		r = read(0, buf + used, cap - used);
		if (r < 0 && errno == EINTR && !cli_http_interrupted())
			continue;
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		used += (size_t)r;
		if (used > STDIN_MAX)
			goto fail;
	}
	*len = used;
	return buf != NULL ? buf : strdup("");
fail:
	free(buf);
	return NULL;
}

static int
cp_to(struct ctx *x, const char *local, const char *npc, const char *rpath)
{
	struct cli_body b = { SBX_CT_OCTET, NULL, 0, -1 };
	struct cli_resp r;
	struct cli_conn *c = NULL;
	struct sbx_err err;
	struct stat st;
	json_t *j = NULL;
	char dst[4096], target[16384], modeq[16], *mem = NULL, *ans = NULL,
	    *end;
	size_t rl = strlen(rpath), alen;
	unsigned long mode;
	int rc = CX_ERR;

	sbx_err_clear(&err);
	if (strcmp(local, "-") == 0) {
		if ((mem = slurp_stdin(&b.len)) == NULL) {
			errmsg("cannot read standard input (at most %zu MiB).",
			    STDIN_MAX >> 20);
			return CX_ERR;
		}
		b.data = mem;
		mode = 0644;
	} else {
		if ((b.fd = open(local, O_RDONLY | O_CLOEXEC)) == -1 ||
		    fstat(b.fd, &st) == -1) {
			errmsg("cannot open %s: %s.", local, strerror(errno));
			rc = errno == ENOENT ? CX_NOTFOUND : CX_ERR;
			goto done;
		}
		if (!S_ISREG(st.st_mode)) {
			rc = usage_err(NULL, "%s is not a regular file (sbxctl cp "
			    "copies one file).", local);
			goto done;
		}
		b.len = (size_t)st.st_size;
		mode = st.st_mode & 0777;
	}
	if (x->o.mode != NULL) {
		errno = 0;
		mode = strtoul(x->o.mode, &end, 8);
		if (*end != '\0' || end == x->o.mode || errno != 0 ||
		    mode > 0777) {
			rc = usage_err(NULL, "--mode wants octal permission bits "
			    "such as 0644.");
			goto done;
		}
	}
	if (dest_path(dst, sizeof(dst), rpath, local, rl > 0 &&
	    rpath[rl - 1] == '/') == -1) {
		rc = usage_err(NULL, "name the file in the sandbox: "
		    "NPC:/work/DIR/FILE.");
		goto done;
	}
	if (npc_target(target, sizeof(target) - 16, npc, "/sandbox/files",
	    dst) == -1) {
		rc = usage_err(NULL, "the NPC name or path is too long.");
		goto done;
	}
	snprintf(modeq, sizeof(modeq), "&mode=%04lo", mode);
	strcat(target, modeq);
	if ((c = cli_http_request(&x->url, "PUT", target, x->key, &b, &r,
	    &err)) == NULL) {
		rc = fail_err(&err);
		goto done;
	}
	if (r.status < 200 || r.status > 299) {
		rc = fail_resp(c, &r);
		goto done;
	}
	if ((ans = cli_http_read_all(c, JSON_MAX, &alen, &err)) == NULL) {
		rc = fail_err(&err);
		goto done;
	}
	rc = CX_OK;
done:
	json_decref(j);
	free(ans);
	free(mem);
	if (b.fd != -1)
		close(b.fd);
	cli_http_close(c);
	return rc;
}

static int
c_cp(struct ctx *x)
{
	const char *a = x->o.pos[0], *b = x->o.pos[1], *path;
	char npc[128];
	int ra, rb;

	ra = remote_spec(a, npc, sizeof(npc), &path);
	rb = !ra && remote_spec(b, npc, sizeof(npc), &path);
	if (ra == rb)
		return usage_err(cmd_of(c_cp), "exactly one side must be "
		    "NPC:/work/PATH.");
	if (ra && remote_spec(b, npc, sizeof(npc), &path))
		return usage_err(cmd_of(c_cp), "exactly one side must be "
		    "NPC:/work/PATH.");
	if (ra) {
		remote_spec(a, npc, sizeof(npc), &path);
		return cp_from(x, npc, path, b);
	}
	return cp_to(x, a, npc, path);
}

static void
mode_string(char *out, const char *type, long long mode)
{
	static const char rwx[] = "rwxrwxrwx";
	int i;

	out[0] = strcmp(type, "dir") == 0 ? 'd' : strcmp(type, "symlink") == 0 ?
	    'l' : strcmp(type, "file") == 0 ? '-' : '?';
	for (i = 0; i < 9; i++)
		out[i + 1] = (mode & (0400 >> i)) ? rwx[i] : '-';
	out[10] = '\0';
}

/* One directory entry as a line: mode, size, mtime, escaped name. */
static void
print_dirent(json_t *e)
{
	char ms[16], tb[40], name[1100], raw[300];
	json_t *nm = json_object_get(e, "name");
	const char *b64 = json_string_value(json_object_get(e, "name_b64"));
	json_t *mt = json_object_get(e, "mtime");
	size_t rl = 0;

	mode_string(ms, jraw(e, "type"),
	    json_integer_value(json_object_get(e, "mode")));
	if (json_is_integer(mt))
		cli_time(json_integer_value(mt), 0, tb, sizeof(tb));
	else
		snprintf(tb, sizeof(tb), "%-16s", "-");
	if (json_is_string(nm))
		cli_escape(json_string_value(nm), json_string_length(nm), name,
		    sizeof(name));
	else if (b64 != NULL && sodium_base642bin((unsigned char *)raw,
	    sizeof(raw), b64, strlen(b64), NULL, &rl, NULL,
	    sodium_base64_VARIANT_ORIGINAL) == 0)
		cli_escape(raw, rl, name, sizeof(name));
	else
		snprintf(name, sizeof(name), "(no name)");
	printf("%s %10lld %s %s%s\n", ms,
	    (long long)json_integer_value(json_object_get(e, "size")), tb, name,
	    strcmp(jraw(e, "type"), "dir") == 0 ? "/" : "");
}

/* Pages of a listing at most this many: 100 x list_max_entries. */
#define LS_PAGES_MAX 1000

static int
c_ls(struct ctx *x)
{
	const char *path, *cur;
	char npc[128], target[8192], *cursor = NULL, *enc;
	json_t *j = NULL, *e, *ents, *all = NULL;
	size_t i, pages = 0;
	int rc = CX_OK;

	if (!remote_spec(x->o.pos[0], npc, sizeof(npc), &path))
		return usage_err(cmd_of(c_ls), "expected NPC:/work/DIR, not "
		    "\"%.80s\".", x->o.pos[0]);
	if (npc_target(target, sizeof(target), npc, "/sandbox/list",
	    path) == -1)
		return usage_err(NULL, "the NPC name or path is too long.");
	if (x->o.json && (all = json_array()) == NULL) {
		errmsg("out of memory.");
		return CX_ERR;
	}
	/* Pages ({"entries","truncated","cursor"}, proto/broker-api.md)
	 * until the last one; sorted by the server, printed as they come. */
	for (;;) {
		size_t tl = strlen(target);

		enc = cursor != NULL ? cursor : "";
		if (snprintf(target + tl, sizeof(target) - tl, "&cursor=%s",
		    enc) >= (int)(sizeof(target) - tl)) {
			errmsg("the listing's cursor is too long.");
			rc = CX_ERR;
			break;
		}
		rc = call_json(x, "GET", target, NULL, &j);
		target[tl] = '\0';
		if (rc != CX_OK)
			break;
		ents = json_is_array(j) ? j : json_object_get(j, "entries");
		if (!json_is_array(ents)) {
			errmsg("the server's listing is not a list of entries.");
			rc = CX_ERR;
			break;
		}
		json_array_foreach(ents, i, e) {
			if (!json_is_object(e))
				continue;
			if (all != NULL)
				json_array_append(all, e);
			else
				print_dirent(e);
		}
		cur = json_string_value(json_object_get(j, "cursor"));
		free(cursor);
		cursor = NULL;
		if (!json_is_object(j) ||
		    !json_is_true(json_object_get(j, "truncated")) || cur == NULL ||
		    cur[0] == '\0' || ++pages >= LS_PAGES_MAX)
			break;
		/* base64url: nothing to percent-encode, but check it is that */
		if (strspn(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789-_") != strlen(cur) || (cursor = strdup(cur)) == NULL) {
			errmsg("the server sent a cursor sbxctl cannot use.");
			rc = CX_ERR;
			break;
		}
		json_decref(j);
		j = NULL;
	}
	if (rc == CX_OK && all != NULL)
		rc = print_json(all);
	free(cursor);
	json_decref(j);
	json_decref(all);
	return rc;
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
	};
	const char *a, *val;
	size_t i, ll;
	int k, is_exec = c->fn == c_exec, dashdash = 0;

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
			if (o->nenv >= MAX_ENV)
				return usage_err(c, "at most %d -e options.",
				    MAX_ENV);
			o->env[o->nenv++] = val;
			break;
		case O_TIMEOUT: o->timeout = val; break;
		case O_STDIN: o->stdin_flag = 1; break;
		case O_OWNER: o->owner = val; break;
		case O_IMAGE: o->image = val; break;
		case O_MODE: o->mode = val; break;
		case O_DETACH: o->detach = 1; break;
		case O_FOLLOW: o->follow = 1; break;
		case O_USAGE: o->usage = 1; break;
		default: break;
		}
	}
	if (o->npos < c->minpos)
		return usage_err(c, "missing argument%s.", c->minpos -
		    o->npos > 1 ? "s" : "");
	if (is_exec)
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
		if (strcmp(argv[i], "help") == 0) {
			main_help(stdout);
			return CX_OK;
		}
		return usage_err(NULL, "unknown command \"%.80s%s%.80s\".",
		    argv[i], i + 1 < argc && (strcmp(argv[i], "npc") == 0 ||
		    strcmp(argv[i], "egress") == 0) ? " " : "",
		    i + 1 < argc && (strcmp(argv[i], "npc") == 0 ||
		    strcmp(argv[i], "egress") == 0) ? argv[i + 1] : "");
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
	rc = c->fn(&x);
	fflush(stdout);
	if (x.key != NULL) {
		sodium_memzero(x.key, strlen(x.key));
		free(x.key);
	}
	return rc;
}
