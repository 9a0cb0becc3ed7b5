/* cli_int.h - internals shared by the files of sbxctl (not a public header). */
#ifndef CLI_INT_H
#define CLI_INT_H

#include <stdio.h>

#include <jansson.h>

#include "cli_http.h"
#include "sbx_err.h"

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
#define O_ALLOW 0x4000   /* egress grant: --allow HOST (repeatable, adr/0026) */
#define O_REST 0x2000    /* the command's own argv follows the positionals */

/* Reconnects of an exec's event stream without progress before giving up;
 * the waits grow from 200 ms to 2 s (about 11 s in all). */
#define RESUME_TRIES 8

struct opts {
	int json, help, stdin_flag, detach, follow, usage;
	const char *cwd, *timeout, *owner, *image, *mode;
	const char *env[MAX_ENV];
	int nenv;
	const char *allow[MAX_ENV];   /* egress grant --allow, in order */
	int nallow;
	char *pos[MAX_POS];
	int npos;
	char **rest;     /* exec: the command's argv (NULL-terminated) */
};

struct ctx {
	const struct cmd *cmd;   /* the command being run (its usage line) */
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


/* cli_util.c */
/* The NPC the current command is about, for hints in error messages
 * (set by npc_target; NULL: none). */
extern const char *hint_npc;
/* Prints "sbxctl: MSG" to stderr, control bytes escaped (cli_escape). */
void errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The usage line of c to f. */
void usage_line(FILE *f, const struct cmd *c);
/* Prints the message and c's usage (or a pointer to --help when c is
 * NULL) to stderr; returns CX_USAGE. */
int usage_err(const struct cmd *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Unix ms v as local time "YYYY-MM-DD HH:MM:SS" into buf, or "-". */
const char *ms_time(json_t *v, char *buf, size_t cap);
/* A string member of a server reply, escaped for printing (borrowed,
 * valid until the next call); "-" when absent. */
const char *jstr(json_t *obj, const char *k);
/* The raw string member (for comparisons, never for printing); "" when
 * absent. */
const char *jraw(json_t *obj, const char *k);
/* v as indented JSON on stdout (cli_json_text: C1 controls escaped too);
 * CX_OK or CX_ERR. */
int print_json(json_t *v);
/* A command's answer j (owned, freed here): with --json (x->o.json) j as
 * print_json prints it, else the text of fmt (printf; its arguments are
 * read before j is freed) on stdout. CX_OK or CX_ERR. */
int print_answer(const struct ctx *x, json_t *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* x->url and x->key from SBX_URL, SBX_KEY and the config file; returns
 * CX_OK or the exit code after printing why. */
int load_config(struct ctx *x);
/* The exit code of an HTTP status / a transport error (docs/cli.md). */
int status_exit(int status);
int err_exit(const struct sbx_err *err);
/* Prints a transport error and returns its exit code. */
int fail_err(const struct sbx_err *err);
/* Reads an error answer, prints the server's sentence, returns the exit
 * code. */
int fail_resp(struct cli_conn *c, const struct cli_resp *r);
/* One JSON request: method, target (under the URL's prefix), optional JSON
 * body (borrowed). On 2xx *out gets the parsed answer (owned; may be NULL
 * for an empty body) and CX_OK returns; else the error is printed and its
 * exit code returned. */
int call_json(struct ctx *x, const char *method, const char *target,
    json_t *body, json_t **out);
/* "/api/v1/npcs/NPC" + suffix (+ "?path=" + the escaped path when path is
 * not NULL) into dst; -1 when it does not fit. Remembers npc for hints. */
int npc_target(char *dst, size_t cap, const char *npc, const char *suffix,
    const char *path);
/* The same with any body (b: its type, bytes or fd, as cli_http.h);
 * out NULL: the answer is read and dropped. */
int call_body(struct ctx *x, const char *method, const char *target,
    const struct cli_body *b, json_t **out);
/* call_json on an NPC's target (npc_target without a path). */
int npc_call(struct ctx *x, const char *method, const char *npc,
    const char *suffix, json_t *body, json_t **out);
/* npc_call without a body for a command with --json: with it the answer is
 * printed as it came and *out is NULL; without it *out gets the answer
 * (owned) to print in words. CX_OK or the exit code (the error printed). */
int npc_view(struct ctx *x, const char *method, const char *npc,
    const char *suffix, json_t **out);
/* Splits "NPC:/work/PATH" into npc (cap bytes) and *path (borrowed);
 * returns 1 when spec has that form. */
int remote_spec(const char *spec, char *npc, size_t cap, const char **path);
/* Writes all of p[0..n) to fd (EINTR retried); 0 or -1 with errno. */
int write_fd(int fd, const unsigned char *p, size_t n);

/* cli_term_ws.c: one terminal attached by WebSocket (docs/api.md,
 * subprotocol sbx.v1). */
struct term_attach {
	const char *npc, *id;
	unsigned long long offset;  /* replay from this output offset */
	int raw;        /* the local terminal in raw mode (restored on every
	                 * way out), the detach key Ctrl-] d, SIGWINCH sent as
	                 * resize */
	int input;      /* stdin streamed (its end sent as eof) */
	int cancel_on_signal; /* SIGINT/SIGTERM/SIGHUP: return CX_INTR (the
	                 * caller deletes the terminal); else the terminal
	                 * is left running and how to reattach is printed */
};
/* Attaches to t and runs until the terminal exits (its exit code), the
 * user detaches (CX_OK), a signal (see cancel_on_signal) or an error (its
 * exit code, the reason printed). */
int cli_term_run(struct ctx *x, const struct term_attach *t);
/* cli_port.c: sbxctl port-forward NPC LOCAL:REMOTE (docs/cli.md). */
int c_port_forward(struct ctx *x);
/* The local terminal's size (stdout, else stdin), 80x24 when none. */
void cli_term_size(int *cols, int *rows);

/* cli_browser.c: sbxctl browser NPC start|stop|status (adr/0064). */
int c_browser(struct ctx *x);

/* cli_term.c: shell, attach, terminals (list, kill), and exec -i streamed
 * through a terminal. Each returns the process's exit code (CX_*). */
int c_shell(struct ctx *x);
int c_attach(struct ctx *x);
int c_terminals(struct ctx *x);
/* sbxctl exec -i (not -d): body (stolen) is the exec's (argv, cwd, env,
 * timeout_ms), made a pty:false terminal. CX_NO_TERMINALS (nothing
 * printed, stdin untouched): the api has no terminals (an older one). */
#define CX_NO_TERMINALS (-2)
int cli_exec_stream(struct ctx *x, json_t *body);

/* cli_exec.c, cli_files.c: commands of the table in cli.c (CX_* or the
 * command's exit code). */
int c_exec(struct ctx *x);
int c_logs(struct ctx *x);
int c_cp(struct ctx *x);
int c_cat(struct ctx *x);
int c_ls(struct ctx *x);
/* cli_snap.c (adr/0068) */
int c_snapshot(struct ctx *x);
int c_fork(struct ctx *x);

#endif
