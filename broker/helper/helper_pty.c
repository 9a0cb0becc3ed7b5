/* helper_pty.c - sbx-helper pty mode: a command on a new pseudo terminal (size, TERM, resizes and signals to its foreground job from the agent's control records), run on exec mode's machinery through helper_exec_io's hooks; calls helper_exec.c and helper_util.c. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "helper.h"
#include "sbx_agent.h"

#define TERM_DEFAULT "xterm-256color"
#define TERM_MAX 64
#define DRAIN_QUIET_MS 100         /* after the exit: terminal quiet this long = done */
#define DRAIN_MAX (1024 * 1024)    /* after the exit: bytes read before giving up */
#define GIVE_UP_MS 1000            /* past the backstop: time left to write the output */
#define PASSWD "/etc/passwd"
#define SHELL_FALLBACK "/bin/sh"

/*
 * The terminal: the helper holds the master and relays it (fd 0 -> master,
 * master -> fd 1, both non-blocking, one buffer each way, so a reader that
 * stops stops the command through the terminal's own buffer); the command
 * gets the slave as its controlling terminal and 0-2.
 */
struct pty {
	const struct helper_ctx *ctx;
	int master, slave;
	const char *term;
};

static struct helper_pump pump_in, pump_out;   /* 64 KiB each: not for the stack */

static int
term_valid(const char *t)
{
	size_t i;

	for (i = 0; t[i] != '\0'; i++)
		if (i == TERM_MAX || !((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
		    (t[i] >= '0' && t[i] <= '9') || t[i] == '.' || t[i] == '_' || t[i] == '+' ||
		    t[i] == '-'))
			return 0;
	return i > 0;
}

/* The user's login shell from the image's /etc/passwd when it names an
 * executable, else /bin/sh. out holds at least 256 bytes. */
static void
login_shell(char *out, size_t cap)
{
	char line[1024], *f[7], *p;
	FILE *pw;
	int i;

	snprintf(out, cap, "%s", SHELL_FALLBACK);
	if ((pw = fopen(PASSWD, "re")) == NULL)
		return;
	while (fgets(line, sizeof(line), pw) != NULL) {
		line[strcspn(line, "\n")] = '\0';
		for (i = 0, p = line; i < 7 && p != NULL; i++) {
			f[i] = p;
			if ((p = strchr(p, ':')) != NULL)
				*p++ = '\0';
		}
		if (i < 7 || strtoul(f[2], NULL, 10) != (unsigned long)getuid() ||
		    f[6][0] != '/' || access(f[6], X_OK) != 0)
			continue;
		snprintf(out, cap, "%s", f[6]);
		break;
	}
	fclose(pw);
}

static int
pty_child(void *arg)
{
	struct pty *t = arg;

	if (ioctl(t->slave, TIOCSCTTY, 0) < 0)
		return -1;
	if (dup2(t->slave, 0) < 0 || dup2(t->slave, 1) < 0 || dup2(t->slave, 2) < 0)
		return -1;
	return setenv("TERM", t->term, 1);
}

static void
pty_started(void *arg)
{
	struct pty *t = arg;

	/* Only the command holds the slave now: its last close ends our reads. */
	close(t->slave);
	t->slave = -1;
}

/* One control record: a resize (the kernel sends SIGWINCH to the
 * foreground group) or a signal to the foreground group (the command's
 * own when it has none). */
static void
pty_control(struct pty *t, pid_t pid, const struct sbx_agent_ctrl *c)
{
	struct winsize ws;
	pid_t fg;

	if (c->kind == SBX_AGENT_CTRL_RESIZE) {
		memset(&ws, 0, sizeof(ws));
		ws.ws_col = (unsigned short)c->a;
		ws.ws_row = (unsigned short)c->b;
		(void)ioctl(t->master, TIOCSWINSZ, &ws);
	} else if (c->kind == SBX_AGENT_CTRL_SIGNAL) {
		fg = tcgetpgrp(t->master);
		(void)kill(fg > 1 ? -fg : -pid, (int)c->a);
	}
}

static void
kill_reap(pid_t pid, int *status)
{
	(void)kill(-pid, SIGKILL);
	(void)kill(pid, SIGKILL);
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
}

/* Milliseconds from now until t for poll: -1 none, 0 past. */
static int
until(uint64_t t, uint64_t now)
{
	if (t == 0)
		return -1;
	return t <= now ? 0 : t - now > 3600000 ? 3600000 : (int)(t - now);
}

static void
pty_wait(void *arg, pid_t pid, int sigfd, uint64_t deadline, int *status, int *timed_out)
{
	struct pty *t = arg;
	struct helper_pump *in = &pump_in, *out = &pump_out;
	struct signalfd_siginfo si;
	struct sbx_agent_ctrl c;
	struct pollfd pf[5];
	uint64_t now, quiet_until = 0, give_up = 0;
	size_t after = 0;
	int reaped = 0, ctrl = t->ctx->ctrl_fd, np, tmo, n, r, fi, mi, ci, oi;

	memset(in, 0, sizeof(*in));
	memset(out, 0, sizeof(*out));
	in->from = 0;
	in->to = out->from = t->master;
	out->to = 1;
	(void)fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
	(void)fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
	for (;;) {
		now = helper_mono_ms();
		if (!reaped && deadline != 0 && now >= deadline) {
			*timed_out = 1;
			kill_reap(pid, status);
			return;
		}
		/* Done: the command reaped, the terminal drained (or quiet, or
		 * past what we read after the exit), its output written. */
		if (reaped && out->len == out->off && (out->eof || now >= quiet_until))
			return;
		/* As exec: a reader that does not read holds the output until
		 * the backstop (if any) and GIVE_UP_MS more, then it is lost. */
		if (reaped && give_up == 0 && deadline != 0)
			give_up = (now > deadline ? now : deadline) + GIVE_UP_MS;
		if (give_up != 0 && now >= give_up)
			return;
		np = 0;
		pf[np].fd = sigfd;
		pf[np++].events = POLLIN;
		/* Polled even with nothing to write: a reader gone ends it now. */
		oi = np;
		pf[np].fd = 1;
		pf[np++].events = out->len > out->off ? POLLOUT : 0;
		/* A terminal whose every slave closed polls HUP for ever: not
		 * polled while there is nothing to read from or write to it. */
		mi = np;
		pf[np].events = (!out->eof && out->len == out->off ? POLLIN : 0) |
		    (in->len > in->off ? POLLOUT : 0);
		pf[np++].fd = pf[mi].events != 0 ? t->master : -1;
		fi = ci = -1;
		if (!reaped && !in->eof && in->len == in->off) {
			fi = np;
			pf[np].fd = 0;
			pf[np++].events = POLLIN;
		}
		if (!reaped && ctrl >= 0) {
			ci = np;
			pf[np].fd = ctrl;
			pf[np++].events = POLLIN;
		}
		tmo = until(reaped ? 0 : deadline, now);
		if (reaped)
			tmo = out->len > out->off ? until(give_up, now) : until(quiet_until, now);
		n = poll(pf, (nfds_t)np, tmo);
		if (n < 0 && errno != EINTR) {
			if (!reaped)
				kill_reap(pid, status);
			return;
		}
		if (n <= 0)
			continue;
		if (pf[0].revents != 0) {
			while (read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
				if (!reaped && (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT ||
				    si.ssi_signo == SIGHUP))
					(void)kill(-pid, (int)si.ssi_signo);
			if (!reaped && waitpid(pid, status, WNOHANG) == pid) {
				reaped = 1;
				quiet_until = helper_mono_ms() + DRAIN_QUIET_MS;
			}
		}
		if (out->len == out->off && (pf[oi].revents & (POLLERR | POLLHUP | POLLNVAL))) {
			if (!reaped)
				kill_reap(pid, status);
			return;   /* nobody reads the terminal any more */
		}
		if (pf[mi].revents != 0 && (r = helper_pump_fill(out)) > 0 && reaped) {
			quiet_until = helper_mono_ms() + DRAIN_QUIET_MS;
			after += out->len;
			if (after > DRAIN_MAX)
				out->eof = 1;   /* something left behind keeps writing */
		}
		if (out->len > out->off && helper_pump_flush(out) < 0) {
			if (!reaped)
				kill_reap(pid, status);
			return;
		}
		/* Records before input: a resize sent before a keystroke lands first. */
		if (ci >= 0 && pf[ci].revents != 0) {
			while ((r = helper_ctrl_read(ctrl, &c)) > 0)
				pty_control(t, pid, &c);
			if (r < 0)
				ctrl = -1;
		}
		/* EOF on fd 0 only stops input: a terminal has no EOF (^D is a byte). */
		if (fi >= 0 && pf[fi].revents != 0)
			(void)helper_pump_fill(in);
		if (in->len > in->off && helper_pump_flush(in) < 0)
			in->off = in->len = 0;   /* the terminal is gone: input dropped */
	}
}

int
helper_pty(const struct helper_ctx *ctx, const char *id, const char *cwd,
    uint64_t timeout_ms, uint64_t cols, uint64_t rows, const char *term, char *const argv[],
    struct helper_err *err)
{
	struct pty t = { ctx, -1, -1, term != NULL ? term : TERM_DEFAULT };
	const struct helper_exec_io io = { pty_child, pty_started, pty_wait, &t };
	char shell[256], name[128], *shell_argv[2] = { shell, NULL };
	struct winsize ws;
	int rc = SBX_HELPER_EXEC_FAILED;

	if (cols < 1 || cols > SBX_AGENT_CTRL_DIM_MAX || rows < 1 || rows > SBX_AGENT_CTRL_DIM_MAX) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "--cols and --rows must be 1 to %d",
		    SBX_AGENT_CTRL_DIM_MAX);
		return rc;
	}
	if (!term_valid(t.term)) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "--term must match [A-Za-z0-9._+-]{1,64}");
		return rc;
	}
	if (argv == NULL || argv[0] == NULL) {
		login_shell(shell, sizeof(shell));
		argv = shell_argv;
	}
	/* posix_openpt and friends: libc alone (the helper is static). */
	if ((t.master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 ||
	    grantpt(t.master) < 0 || unlockpt(t.master) < 0 ||
	    ptsname_r(t.master, name, sizeof(name)) != 0 ||
	    (t.slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
		helper_err_errno(err, errno, "open a pseudo terminal");
		goto done;
	}
	memset(&ws, 0, sizeof(ws));
	ws.ws_col = (unsigned short)cols;
	ws.ws_row = (unsigned short)rows;
	if (ioctl(t.master, TIOCSWINSZ, &ws) < 0) {
		helper_err_errno(err, errno, "set the terminal size");
		goto done;
	}
	(void)fcntl(t.master, F_SETFL, O_RDWR | O_NONBLOCK);
	rc = helper_exec_io(ctx, id, cwd, timeout_ms, &io, argv, err);
done:
	if (t.slave >= 0)
		close(t.slave);
	if (t.master >= 0)
		close(t.master);
	return rc;
}
