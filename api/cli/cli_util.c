/* cli_util.c - sbxctl's shared parts: messages and usage errors, JSON members for printing, configuration (SBX_URL, SBX_KEY, the config file), requests and their exit codes. */
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

/* ------------------------------------------------------------------ */
/* Output helpers                                                      */

void
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

void
usage_line(FILE *f, const struct cmd *c)
{
	fprintf(f, "  sbxctl %s %s\n", c->name, c->args);
}

int
usage_err(const struct cmd *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

int
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

const char *
ms_time(json_t *v, char *buf, size_t cap)
{
	if (!json_is_integer(v) || json_integer_value(v) <= 0)
		return "-";
	return cli_time(json_integer_value(v) / 1000, 1, buf, cap);
}

/* A string member of a server reply, escaped for printing (cli_escape);
 * "-" when absent. Borrowed from a ring of buffers: valid for the next
 * seven calls, enough for one printf. */
const char *
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
const char *
jraw(json_t *obj, const char *k)
{
	const char *s = json_string_value(json_object_get(obj, k));

	return s != NULL ? s : "";
}

int
print_json(json_t *v)
{
	char *text = cli_json_text(v);
	int ok;

	if (text == NULL)
		return CX_ERR;
	ok = fputs(text, stdout) >= 0 && fputc('\n', stdout) != EOF;
	free(text);
	return ok ? CX_OK : CX_ERR;
}

int
print_answer(const struct ctx *x, json_t *j, const char *fmt, ...)
{
	va_list ap;
	int rc = CX_OK;

	if (x->o.json)
		rc = print_json(j);
	else {
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
	}
	json_decref(j);
	return rc;
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

int
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

int
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

int
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
int
fail_err(const struct sbx_err *err)
{
	if (strcmp(err->code, CLI_E_INTERRUPTED) == 0)
		errmsg("interrupted.");
	else
		errmsg("%s", err->message);
	return err_exit(err);
}

/* The NPC the current command is about, for hints in error messages. */
const char *hint_npc;

/* Reads an error answer, prints the server's sentence, returns the exit code. */
int
fail_resp(struct cli_conn *c, const struct cli_resp *r)
{
	struct sbx_err err;
	json_t *j = NULL, *e;
	const char *msg = NULL, *code, *max;
	long long ms;
	char *body;
	size_t len = 0;

	sbx_err_clear(&err);
	body = cli_http_read_all(c, 1024 * 1024, &len, &err);
	if (body != NULL)
		j = json_loadb(body, len, 0, NULL);
	e = json_object_get(j, "error");
	if (json_is_object(e))
		msg = json_string_value(json_object_get(e, "message"));
	code = json_string_value(json_object_get(e, "code"));
	if (msg != NULL && code != NULL && strcmp(code, SBX_E_NOT_RUNNING) == 0 &&
	    hint_npc != NULL)
		/* The server's sentence names its own sandbox id and verbs
		 * ("ensure"): the player gets his NPC's name and our command. */
		errmsg("%s's sandbox is not running (start it with: sbxctl "
		    "up %s).", hint_npc, hint_npc);
	else if (msg != NULL && code != NULL && strcmp(code,
	    SBX_E_LIMIT_EXCEEDED) == 0 && strstr(msg, "\"timeout_ms\"") != NULL &&
	    (max = strrchr(msg, '(')) != NULL && sscanf(max, "(%lld)", &ms) == 1)
		/* The broker names its wire field in milliseconds (broker_within);
		 * the player typed -t in seconds. */
		errmsg("-t asks for more than the server allows: at most %lld s "
		    "(its exec_timeout_max).", ms / 1000);
	else if (msg != NULL)
		errmsg("%s", msg);
	else if (r->status == 401)
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
int
call_body(struct ctx *x, const char *method, const char *target,
    const struct cli_body *body, json_t **out)
{
	struct cli_body b = *body;
	struct cli_resp r;
	struct cli_conn *c = NULL;
	struct sbx_err err;
	json_error_t jerr;
	char *ans = NULL;
	size_t len = 0;
	int rc;

	sbx_err_clear(&err);
	if (out != NULL)
		*out = NULL;
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
	if (out != NULL && len > 0 &&
	    (*out = json_loadb(ans, len, 0, &jerr)) == NULL) {
		errmsg("the server's answer is not JSON (%s).", jerr.text);
		rc = CX_ERR;
	}
done:
	free(ans);
	cli_http_close(c);
	return rc;
}

int
call_json(struct ctx *x, const char *method, const char *target,
    json_t *body, json_t **out)
{
	struct cli_body b = { NULL, NULL, 0, -1 };
	char *req = NULL;
	int rc;

	if (body != NULL) {
		if ((req = json_dumps(body, JSON_COMPACT)) == NULL) {
			*out = NULL;
			errmsg(SBX_MSG_OOM);
			return CX_ERR;
		}
		b.content_type = SBX_CT_JSON;
		b.data = req;
		b.len = strlen(req);
	}
	rc = call_body(x, method, target, &b, out);
	free(req);
	return rc;
}

/* target = API_BASE "/npcs/" + npc + suffix [+ "?path=" + encoded path]. */
int
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

int
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

int
npc_view(struct ctx *x, const char *method, const char *npc,
    const char *suffix, json_t **out)
{
	int rc;

	*out = NULL;
	if ((rc = npc_call(x, method, npc, suffix, NULL, out)) != CX_OK ||
	    !x->o.json)
		return rc;
	rc = print_json(*out);
	json_decref(*out);
	*out = NULL;
	return rc;
}

/* Splits "NPC:/work/PATH"; returns 1 when spec has that form. */
int
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
/* Files descriptors                                                   */

int
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
