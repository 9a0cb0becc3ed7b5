/* sbx_config.c - resolves a key table from defaults, a JSON file, SBX_* env and flags. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx_config.h"
#include "sbx_log.h"
#include "sbx_token.h"

#define CONFIG_FILE_MAX (1 << 20) /* bytes; a config file is small */

#define FIELD(cfg, key, type) ((type *)(void *)((char *)(cfg) + (key)->offset))

/* Where a value came from, for error messages and the error code. */
struct source {
	const char *code; /* SBX_E_USAGE or SBX_E_CONFIG */
	char what[320];   /* "flag --idle-timeout", "environment variable SBX_X", ... */
};

static void
wipe_str(char *s, int secret)
{
	if (s == NULL)
		return;
	if (secret)
		sodium_memzero(s, strlen(s));
	free(s);
}

static void
free_list(char **list, int secret)
{
	size_t i;

	if (list == NULL)
		return;
	for (i = 0; list[i] != NULL; i++)
		wipe_str(list[i], secret);
	free(list);
}

/* Frees the field of key and sets it to zero/NULL. */
static void
clear_field(const struct sbx_config_key *k, void *cfg)
{
	switch (k->type) {
	case SBX_CFG_STRING:
		wipe_str(*FIELD(cfg, k, char *), k->secret);
		*FIELD(cfg, k, char *) = NULL;
		break;
	case SBX_CFG_STRLIST:
		free_list(*FIELD(cfg, k, char **), k->secret);
		*FIELD(cfg, k, char **) = NULL;
		break;
	case SBX_CFG_BOOL:
		*FIELD(cfg, k, int) = 0;
		break;
	case SBX_CFG_INT:
	case SBX_CFG_MODE:
	case SBX_CFG_DURATION_MS:
	case SBX_CFG_BYTES:
		*FIELD(cfg, k, long long) = 0;
		break;
	}
}

static void
zero_field(const struct sbx_config_key *k, void *cfg)
{
	switch (k->type) {
	case SBX_CFG_STRING:
		*FIELD(cfg, k, char *) = NULL;
		break;
	case SBX_CFG_STRLIST:
		*FIELD(cfg, k, char **) = NULL;
		break;
	default:
		clear_field(k, cfg);
		break;
	}
}

/* Parses "<digits><unit>" with unit looked up in units; -1 on any error. */
static int
parse_scaled(const char *s, long long *out, const char *const *names,
    const long long *mult)
{
	unsigned long long v;
	char *end = NULL;
	size_t i;

	if (s == NULL)
		return -1;
	while (isspace((unsigned char)*s))
		s++;
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || v > LLONG_MAX)
		return -1;
	while (isspace((unsigned char)*end))
		end++;
	for (i = 0; names[i] != NULL; i++) {
		size_t n = strlen(names[i]);
		const char *rest = end + n;

		if (strncasecmp(end, names[i], n) != 0)
			continue;
		while (isspace((unsigned char)*rest))
			rest++;
		if (*rest != '\0')
			continue;
		if (mult[i] != 0 && v > (unsigned long long)(LLONG_MAX / mult[i]))
			return -1;
		*out = (long long)v * mult[i];
		return 0;
	}
	return -1;
}

int
sbx_parse_duration_ms(const char *s, long long *out)
{
	/* Longest unit names first so "ms" is not read as "m" + "s". */
	static const char *const names[] = { "ms", "s", "m", "h", "d", "", NULL };
	static const long long mult[] = { 1, 1000, 60000, 3600000, 86400000, 1 };

	return parse_scaled(s, out, names, mult);
}

int
sbx_parse_bytes(const char *s, long long *out)
{
	static const char *const names[] = {
		"kib", "mib", "gib", "tib", "kb", "mb", "gb", "tb",
		"k", "m", "g", "t", "b", "", NULL
	};
	static const long long K = 1024, M = 1024 * 1024, G = 1024LL * 1024 * 1024,
	    T = 1024LL * 1024 * 1024 * 1024;
	const long long mult[] = { K, M, G, T, K, M, G, T, K, M, G, T, 1, 1 };

	return parse_scaled(s, out, names, mult);
}

int
sbx_parse_bool(const char *s, int *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1", NULL };
	static const char *const no[] = { "false", "no", "off", "0", NULL };
	size_t i;

	if (s == NULL)
		return -1;
	for (i = 0; yes[i] != NULL; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

/* Permission bits: "0660" octal (leading 0), "432" decimal; >= 0 (the
 * process checks the range). */
static int
parse_mode(const char *s, long long *out)
{
	long long v;
	char *end = NULL;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, s[0] == '0' ? 8 : 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

static int
parse_int(const char *s, long long *out)
{
	long long v;
	char *end = NULL;

	if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* Splits a comma-separated list; items are trimmed, empty items skipped. */
static char **
split_list(const char *s)
{
	char **list = NULL;
	const char *p, *e, *comma;
	size_t n = 1, i = 0;

	for (p = s; *p != '\0'; p++)
		if (*p == ',')
			n++;
	if ((list = calloc(n + 1, sizeof(*list))) == NULL)
		return NULL;
	for (p = s;; p = comma + 1) {
		if ((comma = strchr(p, ',')) == NULL)
			comma = p + strlen(p);
		e = comma;
		while (p < e && isspace((unsigned char)*p))
			p++;
		while (e > p && isspace((unsigned char)e[-1]))
			e--;
		if (e > p && (list[i++] = strndup(p, (size_t)(e - p))) == NULL) {
			free_list(list, 1);
			return NULL;
		}
		if (*comma == '\0')
			break;
	}
	return list;
}

static const char *
type_hint(enum sbx_config_type t)
{
	switch (t) {
	case SBX_CFG_STRING:
		return "a string";
	case SBX_CFG_INT:
		return "an integer";
	case SBX_CFG_MODE:
		return "permission bits, octal with a leading 0 such as 0660";
	case SBX_CFG_BOOL:
		return "true or false";
	case SBX_CFG_DURATION_MS:
		return "a duration such as 500ms, 2s, 30m, 1h or plain milliseconds";
	case SBX_CFG_BYTES:
		return "a size such as 64k, 512m, 1g or plain bytes";
	case SBX_CFG_STRLIST:
		return "a list (a JSON array of strings in the file, comma-separated "
		    "elsewhere)";
	}
	return "a value";
}

static int
bad_value(const struct sbx_config_key *k, const struct source *src,
    const char *text, struct sbx_err *err)
{
	if (k->secret || text == NULL)
		return sbx_err_set(err, src->code, "%s: %s must be %s", src->what,
		    k->name, type_hint(k->type));
	return sbx_err_set(err, src->code, "%s: %s must be %s (got \"%.64s\")",
	    src->what, k->name, type_hint(k->type), text);
}

static int
oom(struct sbx_err *err)
{
	return sbx_err_set(err, SBX_E_CONFIG, "out of memory reading the configuration");
}

/* Sets the field of k from text (env/flag syntax), replacing the old value. */
static int
set_text(const struct sbx_config_key *k, void *cfg, const char *text,
    const struct source *src, struct sbx_err *err)
{
	long long v = 0;
	char *s = NULL;
	char **list = NULL;
	int b = 0;

	switch (k->type) {
	case SBX_CFG_STRING:
		if ((s = strdup(text)) == NULL)
			return oom(err);
		clear_field(k, cfg);
		*FIELD(cfg, k, char *) = s;
		return 0;
	case SBX_CFG_STRLIST:
		if ((list = split_list(text)) == NULL)
			return oom(err);
		clear_field(k, cfg);
		*FIELD(cfg, k, char **) = list;
		return 0;
	case SBX_CFG_BOOL:
		if (sbx_parse_bool(text, &b) != 0)
			return bad_value(k, src, text, err);
		*FIELD(cfg, k, int) = b;
		return 0;
	case SBX_CFG_INT:
		if (parse_int(text, &v) != 0)
			return bad_value(k, src, text, err);
		break;
	case SBX_CFG_MODE:
		if (parse_mode(text, &v) != 0)
			return bad_value(k, src, text, err);
		break;
	case SBX_CFG_DURATION_MS:
		if (sbx_parse_duration_ms(text, &v) != 0)
			return bad_value(k, src, text, err);
		break;
	case SBX_CFG_BYTES:
		if (sbx_parse_bytes(text, &v) != 0)
			return bad_value(k, src, text, err);
		break;
	}
	*FIELD(cfg, k, long long) = v;
	return 0;
}

/* Sets the field of k from a JSON value of the config file. */
static int
set_json(const struct sbx_config_key *k, void *cfg, json_t *v,
    const struct source *src, struct sbx_err *err)
{
	char **list = NULL;
	size_t i, n;

	if (json_is_null(v)) {
		clear_field(k, cfg);
		return 0;
	}
	if (json_is_string(v)) {
		if (strlen(json_string_value(v)) != json_string_length(v))
			return bad_value(k, src, NULL, err);
		if (k->type == SBX_CFG_STRLIST)
			return bad_value(k, src, NULL, err);
		return set_text(k, cfg, json_string_value(v), src, err);
	}
	switch (k->type) {
	case SBX_CFG_BOOL:
		if (!json_is_boolean(v))
			return bad_value(k, src, NULL, err);
		*FIELD(cfg, k, int) = json_is_true(v);
		return 0;
	case SBX_CFG_INT:
	case SBX_CFG_MODE:
	case SBX_CFG_DURATION_MS:
	case SBX_CFG_BYTES:
		if (!json_is_integer(v) ||
		    (k->type != SBX_CFG_INT && json_integer_value(v) < 0))
			return bad_value(k, src, NULL, err);
		*FIELD(cfg, k, long long) = (long long)json_integer_value(v);
		return 0;
	case SBX_CFG_STRLIST:
		if (!json_is_array(v))
			return bad_value(k, src, NULL, err);
		n = json_array_size(v);
		if ((list = calloc(n + 1, sizeof(*list))) == NULL)
			return oom(err);
		for (i = 0; i < n; i++) {
			json_t *e = json_array_get(v, i);

			if (!json_is_string(e) ||
			    strlen(json_string_value(e)) != json_string_length(e)) {
				free_list(list, k->secret);
				return bad_value(k, src, NULL, err);
			}
			if ((list[i] = strdup(json_string_value(e))) == NULL) {
				free_list(list, k->secret);
				return oom(err);
			}
		}
		clear_field(k, cfg);
		*FIELD(cfg, k, char **) = list;
		return 0;
	case SBX_CFG_STRING:
		break;
	}
	return bad_value(k, src, NULL, err);
}

const struct sbx_config_key *
sbx_config_find(const struct sbx_config_key *keys, const char *name)
{
	if (keys == NULL || name == NULL)
		return NULL;
	for (; keys->name != NULL; keys++)
		if (strcmp(keys->name, name) == 0)
			return keys;
	return NULL;
}

/* The key whose flag spelling ('-' for '_') is the n bytes at flag. */
static const struct sbx_config_key *
find_flag(const struct sbx_config_key *keys, const char *flag, size_t n)
{
	size_t i;

	for (; keys->name != NULL; keys++) {
		if (strlen(keys->name) != n)
			continue;
		for (i = 0; i < n; i++) {
			char c = keys->name[i] == '_' ? '-' : keys->name[i];

			if (flag[i] != c)
				break;
		}
		if (i == n)
			return keys;
	}
	return NULL;
}

int
sbx_config_set(const struct sbx_config_key *keys, void *cfg,
    const char *name, const char *value, struct sbx_err *err)
{
	const struct sbx_config_key *k;
	struct source src = { SBX_E_CONFIG, "" };

	if ((k = sbx_config_find(keys, name)) == NULL)
		return sbx_err_set(err, SBX_E_CONFIG, "unknown configuration key %.64s",
		    name != NULL ? name : "(null)");
	if (value == NULL) {
		clear_field(k, cfg);
		return 0;
	}
	snprintf(src.what, sizeof(src.what), "setting %s", k->name);
	return set_text(k, cfg, value, &src, err);
}

static void
env_name(const struct sbx_config_key *k, char *buf, size_t len)
{
	size_t i, o;

	o = (size_t)snprintf(buf, len, "SBX_");
	for (i = 0; k->name[i] != '\0' && o + 1 < len; i++)
		buf[o++] = (char)toupper((unsigned char)k->name[i]);
	buf[o] = '\0';
}

static int
load_file(const struct sbx_config_key *keys, void *cfg, const char *path,
    int missing_ok, struct sbx_err *err)
{
	const struct sbx_config_key *k;
	struct source src = { SBX_E_CONFIG, "" };
	json_error_t jerr;
	json_t *root = NULL, *v;
	const char *name;
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	ssize_t n;
	int fd = -1, rc = -1;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1) {
		if (missing_ok && errno == ENOENT) {
			rc = 1;
			goto done;
		}
		sbx_err_set(err, SBX_E_CONFIG, "cannot open config file %s: %s",
		    path, strerror(errno));
		goto done;
	}
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) ||
	    st.st_size > CONFIG_FILE_MAX) {
		sbx_err_set(err, SBX_E_CONFIG,
		    "config file %s is not a regular file of at most 1 MiB", path);
		goto done;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		oom(err);
		goto done;
	}
	while (len < (size_t)st.st_size) {
		n = read(fd, buf + len, (size_t)st.st_size - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			sbx_err_set(err, SBX_E_CONFIG, "cannot read config file %s: %s",
			    path, n == 0 ? "file shrank while reading" : strerror(errno));
			goto done;
		}
		len += (size_t)n;
	}
	if ((root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
		/* jerr.text may quote file content (a secret): give the place only. */
		sbx_err_set(err, SBX_E_CONFIG,
		    "config file %s is not valid JSON (line %d, column %d)", path,
		    jerr.line, jerr.column);
		goto done;
	}
	if (!json_is_object(root)) {
		sbx_err_set(err, SBX_E_CONFIG, "config file %s must hold a JSON object",
		    path);
		goto done;
	}
	json_object_foreach(root, name, v) {
		if ((k = sbx_config_find(keys, name)) == NULL) {
			sbx_err_set(err, SBX_E_CONFIG, "config file %s: unknown key "
			    "\"%.64s\"", path, name);
			goto done;
		}
		snprintf(src.what, sizeof(src.what), "config file %s", path);
		if (set_json(k, cfg, v, &src, err) != 0)
			goto done;
	}
	rc = 0;
done:
	if (fd != -1)
		close(fd);
	if (buf != NULL) {
		sodium_memzero(buf, len);
		free(buf);
	}
	json_decref(root);
	return rc;
}

/* Adds a positional argument to opts->args. */
static int
push_arg(struct sbx_config_opts *opts, char *arg, int argno, struct sbx_err *err)
{
	char **grown;

	if (opts == NULL)
		return sbx_err_set(err, SBX_E_USAGE,
		    "unexpected argument #%d: this program takes only flags", argno);
	if ((grown = realloc(opts->args, ((size_t)opts->nargs + 2) *
	    sizeof(*grown))) == NULL)
		return sbx_err_set(err, SBX_E_USAGE, SBX_MSG_OOM);
	opts->args = grown;
	opts->args[opts->nargs++] = arg;
	opts->args[opts->nargs] = NULL;
	return 0;
}

/* Handles --help/--version/--print-config/--check/--health and extra flags. 1 = consumed. */
static int
bare_flag(struct sbx_config_opts *opts, const char *a)
{
	static const struct {
		const char *flag;
		unsigned bit;
		size_t off;
	} std[] = {
		{ "--help", SBX_OPT_HELP, offsetof(struct sbx_config_opts, help) },
		{ "-h", SBX_OPT_HELP, offsetof(struct sbx_config_opts, help) },
		{ "--version", SBX_OPT_VERSION, offsetof(struct sbx_config_opts, version) },
		{ "--print-config", SBX_OPT_PRINT_CONFIG,
		    offsetof(struct sbx_config_opts, print_config) },
		{ "--check", SBX_OPT_CHECK, offsetof(struct sbx_config_opts, check) },
		{ "--health", SBX_OPT_HEALTH, offsetof(struct sbx_config_opts, health) },
	};
	size_t i;

	if (opts == NULL)
		return 0;
	for (i = 0; opts->extra_flags != NULL && opts->extra_flags[i] != NULL &&
	    i < SBX_CONFIG_MAX_EXTRA; i++) {
		if (strcmp(opts->extra_flags[i], a) == 0) {
			opts->extra_seen |= 1u << i;
			return 1;
		}
	}
	for (i = 0; i < sizeof(std) / sizeof(std[0]); i++) {
		if ((opts->accept & std[i].bit) && strcmp(std[i].flag, a) == 0) {
			*(int *)(void *)((char *)opts + std[i].off) = 1;
			return 1;
		}
	}
	return 0;
}

/*
 * Finds the --config value in argv without applying anything else, so the
 * file layer can go in before the env and flag layers. NULL when absent.
 */
static int
find_config_flag(const struct sbx_config_key *keys, int argc, char **argv,
    const struct sbx_config_opts *opts, const char **file, struct sbx_err *err)
{
	const struct sbx_config_key *k;
	int i;

	*file = NULL;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--") == 0)
			break;
		if (a[0] != '-' || a[1] == '\0') {
			if (opts != NULL && opts->stop_at_first_arg)
				break;
			continue;
		}
		if (strcmp(a, "--config") == 0) {
			if (i + 1 >= argc)
				return sbx_err_set(err, SBX_E_USAGE,
				    "flag --config needs a value (a file)");
			*file = argv[++i];
		} else if (strncmp(a, "--config=", 9) == 0)
			*file = a + 9;
		else if (a[1] == '-' && strchr(a, '=') == NULL &&
		    (k = find_flag(keys, a + 2, strlen(a + 2))) != NULL &&
		    k->type != SBX_CFG_BOOL)
			i++; /* skip this flag's value, whatever it looks like */
	}
	return 0;
}

static int
parse_flags(const struct sbx_config_key *keys, void *cfg, int argc, char **argv,
    struct sbx_config_opts *opts, struct sbx_err *err)
{
	const struct sbx_config_key *k;
	struct source src = { SBX_E_USAGE, "" };
	const char *a, *name, *eq, *value;
	size_t nlen;
	int i, only_args = 0, negate;

	for (i = 1; i < argc; i++) {
		a = argv[i];
		if (only_args || a[0] != '-' || a[1] == '\0') {
			if (opts != NULL && opts->stop_at_first_arg)
				only_args = 1;
			if (push_arg(opts, argv[i], i, err) != 0)
				return -1;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_args = 1;
			continue;
		}
		if (bare_flag(opts, a))
			continue;
		if (a[1] != '-')
			return sbx_err_set(err, SBX_E_USAGE, "unknown flag %.64s "
			    "(flags are spelled --name)", a);
		name = a + 2;
		eq = strchr(name, '=');
		nlen = eq != NULL ? (size_t)(eq - name) : strlen(name);
		if (nlen == 6 && strncmp(name, "config", 6) == 0) {
			if (eq == NULL)
				i++; /* checked by find_config_flag */
			continue;
		}
		negate = 0;
		if ((k = find_flag(keys, name, nlen)) == NULL && eq == NULL &&
		    nlen > 3 && strncmp(name, "no-", 3) == 0) {
			const struct sbx_config_key *kb;

			kb = find_flag(keys, name + 3, nlen - 3);
			if (kb != NULL && kb->type == SBX_CFG_BOOL) {
				k = kb;
				negate = 1;
			}
		}
		if (k == NULL)
			return sbx_err_set(err, SBX_E_USAGE, "unknown flag --%.*s",
			    (int)(nlen > 64 ? 64 : nlen), name);
		snprintf(src.what, sizeof(src.what), "flag --%.*s",
		    (int)(nlen > 64 ? 64 : nlen), name);
		if (k->type == SBX_CFG_BOOL && eq == NULL) {
			*FIELD(cfg, k, int) = !negate;
			continue;
		}
		if (eq != NULL)
			value = eq + 1;
		else if (i + 1 < argc)
			value = argv[++i];
		else
			return sbx_err_set(err, SBX_E_USAGE, "%s needs a value (%s)",
			    src.what, type_hint(k->type));
		if (set_text(k, cfg, value, &src, err) != 0)
			return -1;
	}
	return 0;
}

int
sbx_config_load(const struct sbx_config_key *keys, void *cfg, int argc,
    char **argv, struct sbx_config_opts *opts, struct sbx_err *err)
{
	const struct sbx_config_key *k;
	struct source src = { SBX_E_CONFIG, "" };
	const char *file = NULL, *v;
	char env[128];
	int r, missing_ok = 0;

	sbx_err_clear(err);
	if (sodium_init() < 0)
		return sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_SODIUM);
	for (k = keys; k->name != NULL; k++)
		zero_field(k, cfg);
	for (k = keys; k->name != NULL; k++) {
		if (k->def == NULL)
			continue;
		snprintf(src.what, sizeof(src.what), "built-in default");
		if (set_text(k, cfg, k->def, &src, err) != 0)
			return -1;
	}

	if (find_config_flag(keys, argc, argv, opts, &file, err) != 0)
		return -1;
	if (file == NULL && (v = getenv("SBX_CONFIG")) != NULL && *v != '\0')
		file = v;
	if (file == NULL && opts != NULL && opts->default_config_file != NULL) {
		file = opts->default_config_file;
		missing_ok = 1;
	}
	if (file != NULL) {
		if ((r = load_file(keys, cfg, file, missing_ok, err)) < 0)
			return -1;
		if (r == 0 && opts != NULL && (opts->config_file = strdup(file)) == NULL)
			return oom(err);
	}

	for (k = keys; k->name != NULL; k++) {
		env_name(k, env, sizeof(env));
		if ((v = getenv(env)) == NULL)
			continue;
		snprintf(src.what, sizeof(src.what), "environment variable %s", env);
		if (set_text(k, cfg, v, &src, err) != 0)
			return -1;
		/* A secret given in the environment leaves the process's
		 * environment block too (set_text copied it). */
		if (k->secret)
			sbx_env_scrub(env);
	}

	return parse_flags(keys, cfg, argc, argv, opts, err);
}

void
sbx_config_opts_free(struct sbx_config_opts *opts)
{
	if (opts == NULL)
		return;
	free(opts->args);
	opts->args = NULL;
	opts->nargs = 0;
	free(opts->config_file);
	opts->config_file = NULL;
}

int
sbx_config_exit_code(const struct sbx_err *err)
{
	if (err != NULL && strcmp(err->code, SBX_E_USAGE) == 0)
		return SBX_EXIT_USAGE;
	return SBX_EXIT_CONFIG;
}

/* A JSON string for s, or a note when s is not valid UTF-8. */
static json_t *
printable(const char *s)
{
	json_t *v = json_string(s);

	return v != NULL ? v : json_string("(not valid UTF-8)");
}

void
sbx_config_print(FILE *out, const struct sbx_config_key *keys, const void *cfg)
{
	const struct sbx_config_key *k;
	json_t *root = NULL, *v = NULL, *arr;
	char **list;
	char *s = NULL;
	size_t i;

	if ((root = json_object()) == NULL)
		goto fail;
	for (k = keys; k->name != NULL; k++) {
		switch (k->type) {
		case SBX_CFG_STRING:
			s = *FIELD(cfg, k, char *);
			v = s == NULL ? json_null() :
			    k->secret ? json_string("[redacted]") : printable(s);
			break;
		case SBX_CFG_STRLIST:
			list = *FIELD(cfg, k, char **);
			if (list == NULL)
				v = json_null();
			else if (k->secret)
				v = json_string("[redacted]");
			else if ((v = arr = json_array()) != NULL)
				for (i = 0; list[i] != NULL; i++)
					json_array_append_new(arr, printable(list[i]));
			break;
		case SBX_CFG_BOOL:
			if (k->secret)
				v = *FIELD(cfg, k, int) ? json_string("[redacted]") :
				    json_null();
			else
				v = json_boolean(*FIELD(cfg, k, int));
			break;
		case SBX_CFG_MODE:
			/* as written: "0660" reads back the same (octal) */
			v = k->secret ? json_string("[redacted]") :
			    json_sprintf("0%03llo", *FIELD(cfg, k, long long));
			break;
		default:
			if (k->secret)
				v = *FIELD(cfg, k, long long) ?
				    json_string("[redacted]") : json_null();
			else
				v = json_integer(*FIELD(cfg, k, long long));
			break;
		}
		if (v == NULL || json_object_set_new(root, k->name, v) != 0)
			goto fail;
	}
	if ((s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) == NULL)
		goto fail;
	fprintf(out, "%s\n", s);
	free(s);
	json_decref(root);
	return;
fail:
	json_decref(root);
	fprintf(out, "{\"error\":\"out of memory printing the configuration\"}\n");
}

static const char *
placeholder(enum sbx_config_type t)
{
	switch (t) {
	case SBX_CFG_STRING:
		return " STRING";
	case SBX_CFG_INT:
		return " N";
	case SBX_CFG_MODE:
		return " MODE";
	case SBX_CFG_BOOL:
		return "";
	case SBX_CFG_DURATION_MS:
		return " DURATION";
	case SBX_CFG_BYTES:
		return " BYTES";
	case SBX_CFG_STRLIST:
		return " LIST";
	}
	return "";
}

void
sbx_config_usage(FILE *out, const char *prog, const char *synopsis,
    const struct sbx_config_key *keys)
{
	const struct sbx_config_key *k;
	char env[128], flag[128];
	size_t i;

	fprintf(out, "usage: %s%s%s\n\noptions (each also settable in the config "
	    "file as \"name\" and as SBX_NAME in the environment):\n", prog,
	    synopsis != NULL ? " " : "", synopsis != NULL ? synopsis : "");
	for (k = keys; k->name != NULL; k++) {
		for (i = 0; k->name[i] != '\0' && i + 1 < sizeof(flag); i++)
			flag[i] = k->name[i] == '_' ? '-' : k->name[i];
		flag[i] = '\0';
		env_name(k, env, sizeof(env));
		fprintf(out, "  --%s%s\n      %s\n      env %s", flag,
		    placeholder(k->type), k->help != NULL ? k->help : "", env);
		if (k->def != NULL)
			fprintf(out, ", default %s", k->secret ? "[redacted]" :
			    *k->def == '\0' ? "\"\"" : k->def);
		if (k->type == SBX_CFG_BOOL)
			fprintf(out, "; --no-%s sets false", flag);
		fputc('\n', out);
	}
	fprintf(out, "  --config FILE\n      JSON object of the options above\n"
	    "      env SBX_CONFIG\n");
}

void
sbx_config_redact_in_logs(const struct sbx_config_key *keys, const void *cfg)
{
	const struct sbx_config_key *k;
	char **list;
	size_t i;

	for (k = keys; k->name != NULL; k++) {
		if (!k->secret)
			continue;
		if (k->type == SBX_CFG_STRING)
			sbx_log_add_secret(*FIELD(cfg, k, char *));
		else if (k->type == SBX_CFG_STRLIST &&
		    (list = *FIELD(cfg, k, char **)) != NULL)
			for (i = 0; list[i] != NULL; i++)
				sbx_log_add_secret(list[i]);
	}
}

void
sbx_config_free(const struct sbx_config_key *keys, void *cfg)
{
	const struct sbx_config_key *k;

	if (keys == NULL || cfg == NULL)
		return;
	for (k = keys; k->name != NULL; k++)
		if (k->type == SBX_CFG_STRING || k->type == SBX_CFG_STRLIST)
			clear_field(k, cfg);
}
