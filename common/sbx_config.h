/* sbx_config.h - table-driven configuration: defaults, JSON file, SBX_* env, flags (SPEC §9). */
#ifndef SBX_CONFIG_H
#define SBX_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "sbx_err.h"
#include "sbx_proto.h" /* SBX_E_USAGE, SBX_E_CONFIG */

/* Error codes of this module (sbx_err.code) and the exit codes they map to. */
#define SBX_EXIT_USAGE 64           /* sysexits EX_USAGE */
/* SBX_EXIT_CONFIG (sysexits EX_CONFIG, 78): sbx_proto.h. */

/*
 * The C type of the field at key->offset for each key type. The config
 * struct owns every string: fields are malloc'd, freed by sbx_config_free.
 */
enum sbx_config_type {
	SBX_CFG_STRING,      /* char *; NULL when unset */
	SBX_CFG_INT,         /* long long; decimal, optional sign */
	SBX_CFG_BOOL,        /* int 0/1; true/false, yes/no, on/off, 1/0 */
	SBX_CFG_DURATION_MS, /* long long milliseconds >= 0; "500ms" "2s" "30m" "1h" "1d" or plain ms */
	SBX_CFG_BYTES,       /* long long bytes >= 0; "64k" "512m" "1g" "1t" (powers of 1024, optional
	                        trailing "b"/"ib", any case) or plain bytes */
	SBX_CFG_STRLIST,     /* char **, NULL-terminated, NULL when unset; JSON array of strings
	                        in the file, comma-separated in env and flags ("" = empty list) */
	SBX_CFG_MODE,        /* long long permission bits; text with a leading 0 is octal as chmod(1)
	                        writes it ("0660"), without one decimal ("432", kept for configs written
	                        before; ADR 0019); a JSON integer is decimal (JSON has no octal) */
};

/*
 * One configurable key. A process describes its configuration as an array of
 * these ended by an entry whose name is NULL, e.g.
 *   { "idle_timeout", SBX_CFG_DURATION_MS, offsetof(struct cfg, idle_timeout_ms),
 *     "30m", 0, "stop sandboxes idle longer than this" },
 * name is the JSON key in the config file; the env variable is
 * "SBX_" + upper-case name; the flag is "--" + name with '_' turned to '-'.
 */
struct sbx_config_key {
	const char *name;          /* snake_case, e.g. "idle_timeout" */
	enum sbx_config_type type;
	size_t offset;             /* offsetof(field) in the process's config struct */
	const char *def;           /* default as text (parsed like an env value), NULL none */
	int secret;                /* 1: value never printed, wiped on free */
	const char *help;          /* one line for --help */
};

/* Standard bare flags a process may accept (bits of sbx_config_opts.accept). */
#define SBX_OPT_HELP 0x1         /* --help, -h */
#define SBX_OPT_VERSION 0x2      /* --version */
#define SBX_OPT_PRINT_CONFIG 0x4 /* --print-config */
#define SBX_OPT_CHECK 0x8        /* --check */
#define SBX_OPT_HEALTH 0x10      /* --health */

#define SBX_CONFIG_MAX_EXTRA 32

/*
 * Rows both daemons' K() tables list word for word, so the names, defaults
 * and help cannot drift: K is the table's own row macro (name, type, field,
 * def, help) and the daemon's config struct has the fields named here.
 * HTTP_ROWS are the request gate's limits (sbx_httpd.h, docs/security.md);
 * LOG_ROWS the logging (sbx_log.h, reopened on SIGHUP by sbx_daemon.h).
 * Used as "SBX_CONFIG_HTTP_ROWS(K)," in the table.
 */
#define SBX_CONFIG_HTTP_ROWS(K) \
	K("header_timeout", SBX_CFG_DURATION_MS, header_timeout, "10s", \
	    "a request head must arrive whole within this, however it trickles; else 408 and close"), \
	K("head_max", SBX_CFG_BYTES, head_max, "16k", \
	    "largest request head (request line + headers); more: 431 (a longer request line: 414)"), \
	K("headers_max", SBX_CFG_INT, headers_max, "100", \
	    "header fields per request; more: 431"), \
	K("max_connections", SBX_CFG_INT, max_connections, "512", \
	    "client connections open at once on the listener; more: 503 overloaded and close")

#define SBX_CONFIG_LOG_ROWS(K) \
	K("log_level", SBX_CFG_STRING, log_level, "info", \
	    "debug, info, warn or error"), \
	K("log_file", SBX_CFG_STRING, log_file, NULL, \
	    "append logs here instead of stderr (reopened on SIGHUP)")

/*
 * In/out options of sbx_config_load. Zero-initialise, fill the "in" part.
 */
struct sbx_config_opts {
	/* in */
	unsigned accept;                 /* SBX_OPT_* bits; --config FILE is always accepted */
	const char *const *extra_flags;  /* NULL-terminated bare flags the process also accepts,
	                                    e.g. {"--foreground", NULL}; at most
	                                    SBX_CONFIG_MAX_EXTRA; NULL none */
	const char *default_config_file; /* read when neither --config nor SBX_CONFIG names a file;
	                                    a missing default file is not an error; NULL none */
	int stop_at_first_arg;           /* 1: the first positional argument and all after it are
	                                    left as positional (for "sbx exec NPC ls -l");
	                                    0: flags and positionals may mix. "--" always ends flags */
	/* out */
	int help, version, print_config, check, health; /* 1 when the flag was given */
	unsigned extra_seen;             /* bit i set when extra_flags[i] was given */
	char **args;                     /* positional arguments, NULL-terminated; the array is
	                                    owned (sbx_config_opts_free), the strings are argv's */
	int nargs;
	char *config_file;               /* the config file that was read (owned), NULL none */
};

/*
 * Resolves the configuration described by keys into cfg, layer by layer:
 * built-in defaults (key->def) -> config file (a JSON object; the file named
 * by "--config FILE" / "--config=FILE", else env SBX_CONFIG, else
 * opts->default_config_file) -> environment SBX_<NAME> -> command-line flags
 * "--name-with-dashes VALUE" or "--name-with-dashes=VALUE" (bool flags:
 * "--flag" alone means true, "--no-flag" false, "--flag=VALUE" otherwise).
 * A later layer replaces the value of an earlier one (a list is replaced,
 * not appended to).
 *
 * cfg: the process's config struct. Every field named in keys is first set to
 * zero/NULL without being freed: call sbx_config_free before loading again.
 * argv[0] is skipped; argv is not modified. opts may be NULL (then no
 * standard flag is accepted and positionals are refused).
 *
 * Returns 0 on success. Returns -1 with err set (the message names the key,
 * flag, env variable or file, never the value of a secret key) for:
 *   SBX_E_USAGE: unknown flag, flag without its value, a bad value given by
 *     a flag, positional arguments when opts is NULL;
 *   SBX_E_CONFIG: config file unreadable, not a JSON object, unknown key in it,
 *     value of the wrong JSON type, bad value in the file or environment, or
 *     a bad default in the table (a programming error).
 * sbx_config_exit_code maps these to 64 / 78. On failure cfg and opts may be
 * partly filled: sbx_config_free and sbx_config_opts_free still must be called.
 */
int sbx_config_load(const struct sbx_config_key *keys, void *cfg, int argc,
    char **argv, struct sbx_config_opts *opts, struct sbx_err *err);

/* Frees opts->args and opts->config_file (not the strings of args). NULL ok. */
void sbx_config_opts_free(struct sbx_config_opts *opts);

/* SBX_EXIT_USAGE for SBX_E_USAGE, else SBX_EXIT_CONFIG. */
int sbx_config_exit_code(const struct sbx_err *err);

/*
 * Sets one key of cfg from text (the env/flag syntax), freeing (and wiping,
 * if secret) the old value. Returns 0, or -1 with SBX_E_CONFIG when name is
 * not in keys or value does not parse (the message names the key, not a
 * secret value). value NULL resets the field to zero/NULL.
 */
int sbx_config_set(const struct sbx_config_key *keys, void *cfg,
    const char *name, const char *value, struct sbx_err *err);

/* The key named name (snake_case), or NULL. */
const struct sbx_config_key *sbx_config_find(const struct sbx_config_key *keys,
    const char *name);

/*
 * Writes the resolved configuration as a pretty-printed JSON object, keys in
 * table order, followed by '\n': strings as strings (null when unset),
 * ints/durations (ms)/bytes as integers, bools as true/false, lists as arrays.
 * A secret key that is set prints "[redacted]" (unset, or a secret number or
 * bool that is 0: null). The output can
 * be fed back as a config file (null in a file means unset) except for
 * redacted values.
 */
void sbx_config_print(FILE *out, const struct sbx_config_key *keys, const void *cfg);

/*
 * --help text: "usage: PROG SYNOPSIS", then one entry per key: the flag with
 * a value placeholder (STRING, N, DURATION, BYTES, LIST; bools bare), its env
 * variable, default and help; then --config FILE. The standard flags
 * themselves are for the caller to describe in synopsis. synopsis may be NULL.
 */
void sbx_config_usage(FILE *out, const char *prog, const char *synopsis,
    const struct sbx_config_key *keys);

/*
 * Registers the value of every set secret STRING and STRLIST key of cfg with
 * sbx_log_add_secret, so a slip that logs one is redacted. Call after a
 * successful sbx_config_load (and again after any reload).
 */
void sbx_config_redact_in_logs(const struct sbx_config_key *keys, const void *cfg);

/*
 * Frees every owned string and list of cfg named in keys, wiping the bytes of
 * secret keys with sodium_memzero first, and sets the fields to NULL. Safe
 * to call twice.
 */
void sbx_config_free(const struct sbx_config_key *keys, void *cfg);

/*
 * Value parsers (also used for defaults). Each returns 0 and stores the
 * result, or -1 (and stores nothing) on an empty string, trailing garbage,
 * a negative number or overflow of long long.
 *   sbx_parse_duration_ms: "250" "250ms" "2s" "30m" "1h" "1d" -> ms.
 *   sbx_parse_bytes: "4096" "64k" "512m" "1g" "2t" (also "kb" "KiB" ...) -> bytes.
 *   sbx_parse_bool: true/false yes/no on/off 1/0, any case -> 1/0.
 */
int sbx_parse_duration_ms(const char *s, long long *out);
int sbx_parse_bytes(const char *s, long long *out);
int sbx_parse_bool(const char *s, int *out);

#endif
