/* sbx_helper.c - sbx-helper entry: argument parsing, the mode table and the dispatch to the modes (contract in sbx_helper_proto.h); it calls the modes, no mode calls it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "helper.h"
#include "sbx_agent.h"

#define TIMEOUT_MS_MAX (30ULL * 24 * 3600 * 1000)

/* Options a mode accepts besides the global ones. */
#define OPT_MAX 0x01
#define OPT_ID 0x02
#define OPT_SIZE 0x100 /* write --size: the exact byte count expected (adr/0018) */
#define OPT_TIMEOUT 0x04
#define OPT_CWD 0x08
#define OPT_ARGV 0x10 /* "--" then the command */
#define OPT_FRAMED 0x20
#define OPT_LIST 0x40   /* --limit, --after-hex */
#define OPT_IDLE 0x200  /* agent --idle-ms (adr/0025) */
#define OPT_PTY 0x400   /* pty --cols, --rows, --term (adr/0049) */
#define OPT_PORT 0x800  /* connect --port (adr/0049) */
#define OPT_DEPTH 0x1000 /* walk --depth, --limit (adr/0061) */
#define OPT_RECURSIVE 0x2000 /* watch --recursive (adr/0061) */

struct args {
	const char *pos[2];
	int npos;
	uint64_t max;
	uint64_t size;     /* write --size; UINT64_MAX: not given */
	const char *id;
	uint64_t timeout_ms;
	uint64_t idle_ms;
	const char *listen;   /* agent --listen DIR (adr/0066) */
	uint64_t cols, rows, port;
	const char *term;
	const char *cwd;
	char **argv;
	const char *root;
	const char *state_dir;
	int no_openat2;
	int ctrl;          /* --ctrl: fd 3 carries CTRL records */
	int framed;
	uint64_t limit;
	uint64_t depth;
	int recursive;
	char after[256];
	int has_after;
};

/* What the dispatch does around a mode (struct mode's flags). */
#define MODE_ROOT 0x01   /* opens the root (ctx->rootfd) before it runs */
/* The mode's result is the command's exit status (exec): SIGPIPE stays as
 * the command should inherit it, --id is the command's kill handle rather
 * than the helper's own, a framed error has gone as a record, and a
 * failure before the command ran exits SBX_HELPER_EXEC_FAILED. */
#define MODE_CMD_STATUS 0x02
/* "--" and the command may be left out (pty: the login shell). */
#define MODE_ARGV_OPTIONAL 0x04

struct mode {
	const char *name;
	int (*run)(struct helper_ctx *ctx, struct args *a, struct helper_err *err);
	int npos;     /* positional arguments, exactly */
	unsigned opts;
	unsigned flags;   /* MODE_* */
};

static int helper_main(int argc, char **argv);

static int
run_version(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	char line[32];

	(void)ctx;
	(void)a;
	snprintf(line, sizeof(line), "sbx-helper %d\n", SBX_HELPER_PROTO);
	if (helper_write_all(1, line, strlen(line)) < 0)
		return helper_err_errno(err, errno, "write");
	return 0;
}

static int
run_read(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_read_file(ctx, a->pos[0], a->max, 1, err);
}

static int
run_write(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_write_file(ctx, a->pos[0], a->pos[1], a->max, a->size, 0, err);
}

static int
run_list(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_list_dir(ctx, a->pos[0], a->has_after ? a->after : NULL,
	    a->limit != 0 ? a->limit : SBX_HELPER_LIST_MAX, 1, err);
}

static int
run_exec(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	if (a->id == NULL) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "exec needs --id");
		return SBX_HELPER_EXEC_FAILED;
	}
	return helper_exec(ctx, a->id, a->cwd, a->timeout_ms, a->framed, a->argv, err);
}

static int
run_pty(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	if (a->id == NULL) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "pty needs --id");
		return SBX_HELPER_EXEC_FAILED;
	}
	return helper_pty(ctx, a->id, a->cwd, a->timeout_ms, a->cols, a->rows, a->term, a->argv,
	    err);
}

static int
run_connect(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	(void)ctx;
	return helper_connect(a->port, err);
}

static int
run_kill(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_kill(ctx, a->pos[0], err);
}

static int
run_killall(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	(void)a;
	return helper_killall(ctx, err);
}

static int
run_idle(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	(void)ctx;
	(void)a;
	return helper_idle(err);
}

static int
run_initwork(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_initwork(ctx, a->pos[0], err);
}

static int
run_install(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	(void)ctx;
	return helper_install(a->pos[0], err);
}

static int
run_du(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_du(ctx, a->max == UINT64_MAX ? SBX_HELPER_DU_MAX_DEF : a->max,
	    a->timeout_ms, 1, err);
}

static int
run_stat(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_fs_stat(ctx, a->pos[0], 1, err);
}

static int
run_mkdir(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_fs_mkdir(ctx, a->pos[0], 1, err);
}

static int
run_move(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_fs_move(ctx, a->pos[0], a->pos[1], 1, err);
}

static int
run_remove(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_fs_remove(ctx, a->pos[0], err);
}

static int
run_walk(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_fs_walk(ctx, a->pos[0], a->depth != 0 ? a->depth : 1,
	    a->limit != 0 ? a->limit : SBX_HELPER_LIST_MAX, 1, err);
}

static int
run_watch(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_fs_watch(ctx, a->pos[0], a->recursive, 1, err);
}

static int
run_agent(struct helper_ctx *ctx, struct args *a, struct helper_err *err)
{
	return helper_agent(ctx, a->idle_ms, a->listen, helper_main, err);
}

static const struct mode modes[] = {
	{ SBX_HELPER_MODE_VERSION, run_version, 0, 0, 0 },
	{ SBX_HELPER_MODE_READ, run_read, 1, OPT_MAX | OPT_ID, MODE_ROOT },
	{ SBX_HELPER_MODE_WRITE, run_write, 2, OPT_MAX | OPT_ID | OPT_SIZE, MODE_ROOT },
	{ SBX_HELPER_MODE_LIST, run_list, 1, OPT_ID | OPT_LIST, MODE_ROOT },
	{ SBX_HELPER_MODE_EXEC, run_exec, 0, OPT_ID | OPT_TIMEOUT | OPT_CWD | OPT_ARGV | OPT_FRAMED,
	    MODE_ROOT | MODE_CMD_STATUS },
	{ SBX_HELPER_MODE_PTY, run_pty, 0, OPT_ID | OPT_TIMEOUT | OPT_CWD | OPT_ARGV | OPT_PTY,
	    MODE_ROOT | MODE_CMD_STATUS | MODE_ARGV_OPTIONAL },
	{ SBX_HELPER_MODE_CONNECT, run_connect, 0, OPT_PORT, 0 },
	{ SBX_HELPER_MODE_KILL, run_kill, 1, 0, 0 },
	{ SBX_HELPER_MODE_KILLALL, run_killall, 0, 0, 0 },
	{ SBX_HELPER_MODE_IDLE, run_idle, 0, 0, 0 },
	{ SBX_HELPER_MODE_INITWORK, run_initwork, 1, 0, 0 },
	{ SBX_HELPER_MODE_INSTALL, run_install, 1, 0, 0 },
	{ SBX_HELPER_MODE_DU, run_du, 0, OPT_MAX | OPT_TIMEOUT | OPT_ID, MODE_ROOT },
	{ SBX_HELPER_MODE_STAT, run_stat, 1, 0, MODE_ROOT },
	{ SBX_HELPER_MODE_MKDIR, run_mkdir, 1, 0, MODE_ROOT },
	{ SBX_HELPER_MODE_MOVE, run_move, 2, 0, MODE_ROOT },
	{ SBX_HELPER_MODE_REMOVE, run_remove, 1, 0, MODE_ROOT },
	{ SBX_HELPER_MODE_WALK, run_walk, 1, OPT_DEPTH, MODE_ROOT },
	{ SBX_HELPER_MODE_WATCH, run_watch, 1, OPT_RECURSIVE, MODE_ROOT },
	{ SBX_AGENT_MODE, run_agent, 0, OPT_IDLE, MODE_ROOT },
	{ NULL, NULL, 0, 0, 0 },
};

/* Strict decimal: digits only, no sign, no overflow, at most limit. */
static int
parse_u64(const char *s, uint64_t limit, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (s == NULL || s[0] == '\0')
		return -1;
	for (i = 0; s[i] != '\0'; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > limit)
		return -1;
	*out = v;
	return 0;
}

/* Lower-case hex of 1..255 bytes, none NUL or '/': a name. */
static int
parse_hex_name(const char *s, char *out, size_t cap)
{
	size_t n = strlen(s), i;
	int hi, lo;

	if (n == 0 || n % 2 != 0 || n / 2 >= cap || n / 2 > 255)
		return -1;
	for (i = 0; i < n / 2; i++) {
		hi = s[2 * i] >= '0' && s[2 * i] <= '9' ? s[2 * i] - '0' :
		    s[2 * i] >= 'a' && s[2 * i] <= 'f' ? s[2 * i] - 'a' + 10 : -1;
		lo = s[2 * i + 1] >= '0' && s[2 * i + 1] <= '9' ? s[2 * i + 1] - '0' :
		    s[2 * i + 1] >= 'a' && s[2 * i + 1] <= 'f' ? s[2 * i + 1] - 'a' + 10 : -1;
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0) || (hi * 16 + lo) == '/')
			return -1;
		out[i] = (char)(hi * 16 + lo);
	}
	out[n / 2] = '\0';
	return 0;
}

/* The root must be absolute and canonical; it is trusted (tests only) but checked anyway. */
static int
root_valid(const char *r)
{
	const char *p;

	if (r == NULL || r[0] != '/' || r[1] == '\0' || strlen(r) >= SBX_HELPER_PATH_MAX)
		return 0;
	for (p = r; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		if (p[1] == '/' || p[1] == '\0')
			return 0;
		if (p[1] == '.' && (p[2] == '/' || p[2] == '\0'))
			return 0;
		if (p[1] == '.' && p[2] == '.' && (p[3] == '/' || p[3] == '\0'))
			return 0;
	}
	return 1;
}

/*
 * Parses argv into the mode and its arguments. Global options may come
 * anywhere before "--"; everything after "--" is the command of exec.
 */
static int
parse_args(int argc, char **argv, const struct mode **mp, struct args *a,
    struct helper_err *err)
{
	const struct mode *m = NULL;
	const char *opt, *val;
	int i;

	a->max = UINT64_MAX;
	a->size = UINT64_MAX;
	a->cols = 80;
	a->rows = 24;
	for (i = 1; i < argc; i++) {
		opt = argv[i];
		if (strcmp(opt, "--") == 0) {
			if (m == NULL || !(m->opts & OPT_ARGV))
				return helper_err_set(err, SBX_E_BAD_REQUEST, "unexpected '--'");
			a->argv = argv + i + 1;
			break;
		}
		if (strcmp(opt, "--no-openat2") == 0) {
			a->no_openat2 = 1;
			continue;
		}
		if (strcmp(opt, "--ctrl") == 0) {
			a->ctrl = 1;
			continue;
		}
		if (m != NULL && (m->opts & OPT_RECURSIVE) && strcmp(opt, "--recursive") == 0) {
			a->recursive = 1;
			continue;
		}
		if (m != NULL && (m->opts & OPT_FRAMED) && strcmp(opt, "--framed") == 0) {
			a->framed = 1;
			continue;
		}
		if (strncmp(opt, "--", 2) == 0) {
			if (i + 1 >= argc)
				return helper_err_set(err, SBX_E_BAD_REQUEST, "option %.32s needs a value",
				    opt);
			val = argv[++i];
			if (strcmp(opt, "--root") == 0)
				a->root = val;
			else if (strcmp(opt, "--state-dir") == 0)
				a->state_dir = val;
			else if (m != NULL && (m->opts & OPT_MAX) && strcmp(opt, "--max") == 0) {
				if (parse_u64(val, UINT64_MAX - 1, &a->max) < 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--max must be a byte count");
			} else if (m != NULL && (m->opts & OPT_SIZE) &&
			    strcmp(opt, "--size") == 0) {
				if (parse_u64(val, UINT64_MAX - 1, &a->size) < 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--size must be a byte count");
			} else if (m != NULL && (m->opts & OPT_LIST) &&
			    strcmp(opt, "--limit") == 0) {
				if (parse_u64(val, SBX_HELPER_LIST_MAX, &a->limit) < 0 ||
				    a->limit == 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--limit must be 1 to %d", SBX_HELPER_LIST_MAX);
			} else if (m != NULL && (m->opts & OPT_LIST) &&
			    strcmp(opt, "--after-hex") == 0) {
				if (parse_hex_name(val, a->after, sizeof(a->after)) < 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--after-hex must be 1 to 255 bytes of a name in hex");
				a->has_after = 1;
			} else if (m != NULL && (m->opts & OPT_DEPTH) &&
			    strcmp(opt, "--depth") == 0) {
				if (parse_u64(val, SBX_HELPER_DU_DEPTH_MAX, &a->depth) < 0 ||
				    a->depth == 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--depth must be 1 to %d", SBX_HELPER_DU_DEPTH_MAX);
			} else if (m != NULL && (m->opts & OPT_DEPTH) &&
			    strcmp(opt, "--limit") == 0) {
				if (parse_u64(val, SBX_HELPER_LIST_MAX, &a->limit) < 0 ||
				    a->limit == 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--limit must be 1 to %d", SBX_HELPER_LIST_MAX);
			} else if (m != NULL && (m->opts & OPT_ID) && strcmp(opt, "--id") == 0)
				a->id = val;
			else if (m != NULL && (m->opts & OPT_TIMEOUT) &&
			    strcmp(opt, "--timeout-ms") == 0) {
				if (parse_u64(val, TIMEOUT_MS_MAX, &a->timeout_ms) < 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--timeout-ms must be milliseconds up to 30 days");
			} else if (m != NULL && (m->opts & OPT_IDLE) &&
			    strcmp(opt, "--idle-ms") == 0) {
				if (parse_u64(val, TIMEOUT_MS_MAX, &a->idle_ms) < 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--idle-ms must be milliseconds up to 30 days");
			} else if (m != NULL && (m->opts & OPT_IDLE) &&
			    strcmp(opt, "--listen") == 0) {
				if (val[0] != '/')
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--listen must be an absolute directory");
				a->listen = val;
			} else if (m != NULL && (m->opts & OPT_PTY) &&
			    (strcmp(opt, "--cols") == 0 || strcmp(opt, "--rows") == 0)) {
				if (parse_u64(val, SBX_AGENT_CTRL_DIM_MAX, opt[2] == 'c' ? &a->cols :
				    &a->rows) < 0 || (opt[2] == 'c' ? a->cols : a->rows) == 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "%s must be 1 to %d", opt, SBX_AGENT_CTRL_DIM_MAX);
			} else if (m != NULL && (m->opts & OPT_PTY) && strcmp(opt, "--term") == 0)
				a->term = val;
			else if (m != NULL && (m->opts & OPT_PORT) && strcmp(opt, "--port") == 0) {
				if (parse_u64(val, 65535, &a->port) < 0 || a->port == 0)
					return helper_err_set(err, SBX_E_BAD_REQUEST,
					    "--port must be 1 to 65535");
			} else if (m != NULL && (m->opts & OPT_CWD) && strcmp(opt, "--cwd") == 0)
				a->cwd = val;
			else
				return helper_err_set(err, SBX_E_BAD_REQUEST, "unknown option %.32s",
				    opt);
			continue;
		}
		if (m == NULL) {
			for (m = modes; m->name != NULL; m++)
				if (strcmp(m->name, opt) == 0)
					break;
			if (m->name == NULL)
				return helper_err_set(err, SBX_E_BAD_REQUEST, "unknown mode %.32s", opt);
			continue;
		}
		if (a->npos >= m->npos)
			return helper_err_set(err, SBX_E_BAD_REQUEST, "too many arguments for %s",
			    m->name);
		a->pos[a->npos++] = opt;
	}
	if (m == NULL)
		return helper_err_set(err, SBX_E_BAD_REQUEST,
		    "usage: sbx-helper version|read|write|list|exec|pty|connect|kill|killall|idle|"
		    "initwork|du|stat|mkdir|move|remove|walk|watch|agent ...");
	if (a->npos != m->npos)
		return helper_err_set(err, SBX_E_BAD_REQUEST, "%s needs %d argument(s)", m->name,
		    m->npos);
	if ((m->opts & OPT_ARGV) && a->argv == NULL && !(m->flags & MODE_ARGV_OPTIONAL))
		return helper_err_set(err, SBX_E_BAD_REQUEST, "%s needs '--' and a command",
		    m->name);
	*mp = m;
	return 0;
}

/*
 * One command line run to its exit status (helper.h, helper_main_fn):
 * main's whole body, and what each agent stream's child runs.
 */
static int
helper_main(int argc, char **argv)
{
	struct helper_ctx ctx;
	struct helper_err err;
	struct args a;
	const struct mode *m = NULL;
	int rc, cmd_status, fd;

	memset(&ctx, 0, sizeof(ctx));
	memset(&err, 0, sizeof(err));
	memset(&a, 0, sizeof(a));
	ctx.rootfd = -1;
	ctx.ctrl_fd = -1;
	/* A closed 0-2 would let a pipe land there and confuse who owns what. */
	for (fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
			return SBX_HELPER_EXIT_INTERNAL;
	if (parse_args(argc, argv, &m, &a, &err) < 0)
		goto fail;
	cmd_status = (m->flags & MODE_CMD_STATUS) != 0;
	ctx.root = a.root != NULL ? a.root : SBX_HELPER_ROOT;
	ctx.root_len = strlen(ctx.root);
	ctx.state_dir = a.state_dir != NULL ? a.state_dir : SBX_HELPER_EXEC_DIR;
	ctx.no_openat2 = a.no_openat2;
	if (!root_valid(ctx.root) || (a.state_dir != NULL && !root_valid(a.state_dir))) {
		helper_err_set(&err, SBX_E_BAD_REQUEST, "--root and --state-dir must be canonical");
		goto fail;
	}
	if (a.ctrl) {
		/* The agent's pipe of CTRL records: never the command's. */
		if (fcntl(SBX_HELPER_CTRL_FD, F_SETFD, FD_CLOEXEC) < 0 ||
		    fcntl(SBX_HELPER_CTRL_FD, F_SETFL, O_RDONLY | O_NONBLOCK) < 0) {
			helper_err_set(&err, SBX_E_BAD_REQUEST, "--ctrl needs descriptor %d open",
			    SBX_HELPER_CTRL_FD);
			goto fail;
		}
		ctx.ctrl_fd = SBX_HELPER_CTRL_FD;
	}
	if (m->flags & MODE_ROOT) {
		ctx.rootfd = open(ctx.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (ctx.rootfd < 0) {
			helper_err_errno(&err, errno, "open /work");
			goto fail;
		}
	}
	/* Every mode, not only exec: the sandbox's own code (same user) must
	 * not reach into the helper through /proc/PID (fds, memory). */
	(void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	/* A reader gone away is an error to report, not a reason to die silently. */
	if (!cmd_status)
		signal(SIGPIPE, SIG_IGN);
	if (!cmd_status && a.id != NULL && helper_handle_self(&ctx, a.id, &err) < 0)
		goto fail;
	rc = m->run(&ctx, &a, &err);
	if (!cmd_status && a.id != NULL)
		helper_handle_drop(&ctx, a.id);
	if (cmd_status) {
		/* Framed: the error record has carried it. */
		if (err.code != NULL && !a.framed)
			helper_err_print(&err);
		return rc;
	}
	if (rc < 0)
		goto fail;
	return SBX_HELPER_EXIT_OK;
fail:
	helper_err_print(&err);
	if (m != NULL && (m->flags & MODE_CMD_STATUS))
		return SBX_HELPER_EXEC_FAILED;
	return helper_err_exit_code(&err);
}

int
main(int argc, char **argv)
{
	return helper_main(argc, argv);
}
