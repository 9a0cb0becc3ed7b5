/* helper_exec.c - sbx-helper exec control: a process group and session per exec, its kill handle (helper_handle.c), its output framed or passed through, or its terminal run by another mode's hooks (pty). Calls helper_handle.c, helper_path.c, helper_util.c and the frame codecs (proto/sbx_helper_frame.c, proto/sbx_agent.c for control records). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helper.h"
#include "sbx_agent.h"


/* What the helper waits for while the command runs. */
static const int waitsigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP };
#define NWAITSIGS ((int)(sizeof(waitsigs) / sizeof(waitsigs[0])))

#define READ_CHUNK 65536           /* one read of a pipe = one frame */
#define DRAIN_QUIET_MS 100         /* after the exit: pipes empty this long = done */
#define DRAIN_MAX (1024 * 1024)    /* after the exit: bytes read before giving up */
#define PIPE_SIZE (256 * 1024)     /* the command's stdout pipe */
#define GROUP_GONE_MS 1000         /* wait for SIGKILLed leftovers to be gone */
#define GIVE_UP_MS 1000            /* past the backstop: time left to write frames */

/* What the child tells the parent through the close-on-exec pipe when it fails. */
struct child_failure {
	int stage; /* 1 setsid, 2 chdir, 3 execvp, 4 dup2 */
	int errnum;
};

static void
child_fail(int fd, int stage, int errnum)
{
	struct child_failure f = { stage, errnum };

	(void)helper_write_all(fd, &f, sizeof(f));
	_exit(SBX_HELPER_EXEC_FAILED);
}

/*
 * exec --framed: the frame being written to the helper's stdout (a
 * non-blocking descriptor), header and payload in one buffer so one write
 * usually sends both. Static: 64 KiB is not for the stack.
 */
struct framer {
	int fd;
	size_t len, off;           /* len 0: nothing pending */
	unsigned char buf[SBX_HELPER_FRAME_HDR + READ_CHUNK];
};

static struct framer framer;

/* Headers and the exit record: proto/sbx_helper_frame.c (the broker
 * reads them with the same codec). */
#define frame_header sbx_helper_frame_header

/* Writes what is pending: 1 all written, 0 would block, -1 the reader is gone (errno). */
static int
framer_flush(struct framer *f)
{
	int r = helper_write_some(f->fd, f->buf, &f->off, f->len);

	if (r < 1)
		return r;
	f->len = f->off = 0;
	return 1;
}

/* Milliseconds from now until t for poll(2): -1 for no t, 0 when past. */
static int
ms_until(uint64_t t, uint64_t now)
{
	if (t == 0)
		return -1;
	if (t <= now)
		return 0;
	return t - now > 3600000 ? 3600000 : (int)(t - now);
}

/* The sooner of two poll timeouts (-1 = none). */
static int
ms_min(int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return a < b ? a : b;
}

/*
 * The framed exec's state while the command runs. deadline is the
 * backstop (0: none); after it fired once it is moved GIVE_UP_MS on, and
 * when that passes too the helper abandons its output.
 */
struct fwait {
	struct framer *fr;
	pid_t pid;
	int sigfd;
	int pipes[2];          /* read ends of the command's stdout, stderr; -1 at EOF */
	int ctrl;              /* --ctrl: the agent's control records (signals); -1 none */
	uint64_t deadline;
	int status, reaped, timed_out, gone, abandoned;
	uint64_t quiet_until;  /* after the exit: stop when nothing came before this */
	size_t after;          /* bytes read after the exit */
};

static void
close_pipes(struct fwait *w)
{
	int i;

	for (i = 0; i < 2; i++)
		if (w->pipes[i] >= 0) {
			close(w->pipes[i]);
			w->pipes[i] = -1;
		}
}

/* Signals that arrived: forward the graceful ones, reap the command. */
static void
fwait_signals(struct fwait *w)
{
	struct signalfd_siginfo si;
	int sig;

	while (read(w->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		sig = (int)si.ssi_signo;
		if (!w->reaped && w->pid > 0 && (sig == SIGTERM || sig == SIGINT || sig == SIGHUP)) {
			(void)kill(-w->pid, sig);
			(void)kill(w->pid, sig);
		}
	}
	if (!w->reaped && w->pid > 0 && waitpid(w->pid, &w->status, WNOHANG) == w->pid) {
		w->reaped = 1;
		/* The command is gone: whatever it left behind in its group goes too. */
		(void)kill(-w->pid, SIGKILL);
		w->quiet_until = helper_mono_ms() + DRAIN_QUIET_MS;
	}
}

/*
 * Runs the framed loop until the command has been reaped and its pipes are
 * drained (returns 0), or until nothing more can be written: the reader is
 * gone or the backstop's extra time ran out (-1, w->gone / w->abandoned).
 * With records set, it instead only writes what is pending.
 */
static int
fwait_run(struct fwait *w, int records)
{
	struct framer *fr = w->fr;
	struct pollfd pf[5];
	struct sbx_agent_ctrl c;
	uint64_t now;
	ssize_t r;
	int np, idx[2], i, tmo, n, outi, ci;

	for (;;) {
		now = helper_mono_ms();
		if (w->deadline != 0 && now >= w->deadline) {
			if (!w->reaped && !w->timed_out) {
				w->timed_out = 1;
				(void)kill(-w->pid, SIGKILL);
				(void)kill(w->pid, SIGKILL);
				w->deadline = now + GIVE_UP_MS;
			} else {
				w->abandoned = 1;
				return -1;
			}
		}
		if (fr->len == 0 && (records || (w->reaped && w->pipes[0] < 0 &&
		    w->pipes[1] < 0)))
			return 0;
		np = 0;
		pf[np].fd = w->sigfd;
		pf[np++].events = POLLIN;
		idx[0] = idx[1] = -1;
		/* Our stdout is polled even with nothing to write: a reader
		 * gone (the broker died, the runtime closed the stream) ends the
		 * exec now, not when the command next writes. */
		outi = np;
		pf[np].fd = fr->fd;
		pf[np++].events = fr->len > 0 ? POLLOUT : 0;
		ci = -1;
		if (w->ctrl >= 0 && !w->reaped) {
			ci = np;
			pf[np].fd = w->ctrl;
			pf[np++].events = POLLIN;
		}
		if (fr->len == 0) {
			for (i = 0; i < 2; i++)
				if (w->pipes[i] >= 0) {
					idx[i] = np;
					pf[np].fd = w->pipes[i];
					pf[np++].events = POLLIN;
				}
		}
		tmo = ms_until(w->deadline, now);
		if (w->reaped && fr->len == 0 && !records)
			tmo = ms_min(tmo, ms_until(w->quiet_until, now));
		n = poll(pf, (nfds_t)np, tmo);
		if (n < 0 && errno != EINTR)
			return -1;
		if (n <= 0) {
			/* Nothing for a while after the exit: the rest is not ours. */
			if (n == 0 && w->reaped && fr->len == 0 && helper_mono_ms() >= w->quiet_until)
				close_pipes(w);
			continue;
		}
		if (pf[0].revents != 0)
			fwait_signals(w);
		/* A signal the caller sends (a session's ^C): to the whole group. */
		if (ci >= 0 && pf[ci].revents != 0) {
			while ((r = helper_ctrl_read(w->ctrl, &c)) > 0)
				if (c.kind == SBX_AGENT_CTRL_SIGNAL && !w->reaped)
					(void)kill(-w->pid, (int)c.a);
			if (r < 0)
				w->ctrl = -1;   /* the agent closed it: no more come */
		}
		if (fr->len == 0 && (pf[outi].revents & (POLLERR | POLLHUP | POLLNVAL))) {
			w->gone = 1;
			return -1;
		}
		if (fr->len > 0) {
			if (pf[outi].revents != 0 && framer_flush(fr) < 0) {
				w->gone = 1;
				return -1;
			}
			continue;
		}
		/* stdout before stderr: the order the command most likely wrote in. */
		for (i = 0; i < 2 && fr->len == 0; i++) {
			if (idx[i] < 0 || pf[idx[i]].revents == 0)
				continue;
			r = read(w->pipes[i], fr->buf + SBX_HELPER_FRAME_HDR, READ_CHUNK);
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (r <= 0) {
				close(w->pipes[i]);
				w->pipes[i] = -1;
				continue;
			}
			frame_header(fr->buf, i == 0 ? SBX_HELPER_FRAME_STDOUT :
			    SBX_HELPER_FRAME_STDERR, (size_t)r);
			fr->len = SBX_HELPER_FRAME_HDR + (size_t)r;
			fr->off = 0;
			if (w->reaped) {
				w->quiet_until = helper_mono_ms() +
				    DRAIN_QUIET_MS;
				w->after += (size_t)r;
				if (w->after > DRAIN_MAX)
					close_pipes(w);
			}
			if (framer_flush(fr) < 0) {
				w->gone = 1;
				return -1;
			}
		}
	}
}

/*
 * Waits (at most GROUP_GONE_MS) until nothing is left in group pgid: a
 * SIGKILLed process takes a moment to die (and init to reap it), and the
 * exit record promises the tree is gone.
 */
static void
group_wait_gone(pid_t pgid)
{
	struct timespec ts = { 0, 2 * 1000000 };
	uint64_t until = helper_mono_ms() + GROUP_GONE_MS;

	while (kill(-pgid, 0) == 0 && helper_mono_ms() < until) {
		(void)kill(-pgid, SIGKILL);
		nanosleep(&ts, NULL);
	}
}

/*
 * Queues the error record (when err has a code) and the exit record, then
 * writes them within the backstop's bounds. Returns 0 or -1.
 */
static int
fwait_records(struct fwait *w, const struct helper_err *err, int how, int code,
    int sig)
{
	struct framer *fr = w->fr;
	struct sbx_helper_exit x;
	size_t n = 0;

	if (fr->len != 0)
		return -1;
	if (err != NULL && err->code != NULL) {
		n = helper_err_json(err, (char *)fr->buf + SBX_HELPER_FRAME_HDR,
		    SBX_HELPER_ERROR_REC_MAX);
		frame_header(fr->buf, SBX_HELPER_FRAME_ERROR, n);
		n += SBX_HELPER_FRAME_HDR;
	}
	frame_header(fr->buf + n, SBX_HELPER_FRAME_EXIT, SBX_HELPER_EXIT_REC_LEN);
	x.how = how;
	x.code = code;
	x.sig = sig;
	x.timed_out = w->timed_out;
	sbx_helper_exit_encode(fr->buf + n + SBX_HELPER_FRAME_HDR, &x);
	fr->len = n + SBX_HELPER_FRAME_HDR + SBX_HELPER_EXIT_REC_LEN;
	fr->off = 0;
	if (framer_flush(fr) < 0)
		return -1;
	return fwait_run(w, 1);
}

/*
 * exec mode's one body: framed or passthrough output (io NULL), or a
 * terminal that io's hooks set up and relay (framed 0). See helper.h.
 */
static int
exec_run(const struct helper_ctx *ctx, const char *id, const char *cwd,
    uint64_t timeout_ms, int framed, const struct helper_exec_io *io, char *const argv[],
    struct helper_err *err)
{
	const char *rel = NULL;
	struct child_failure f;
	struct fwait fw;
	sigset_t set, old;
	siginfo_t info;
	struct timespec ts;
	uint64_t deadline = 0, now;
	pid_t pid = -1, w;
	ssize_t n;
	int cwdfd = -1, sfd = -1, go[2] = { -1, -1 }, ep[2] = { -1, -1 };
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, sigfd = -1, fl1 = -1;
	int status = 0, rc = SBX_HELPER_EXEC_FAILED, linked = 0, timed_out = 0, sig, masked = 0;
	int restore = 0, i, ran = 0, tomb;
	struct sigaction dfl, ign, saved[NWAITSIGS], savedpipe;

	memset(&fw, 0, sizeof(fw));
	fw.pipes[0] = fw.pipes[1] = -1;
	fw.sigfd = -1;
	fw.ctrl = ctx->ctrl_fd;
	if (timeout_ms > 0)
		deadline = helper_mono_ms() + timeout_ms;
	if (framed) {
		/*
		 * Frames are written without blocking (the backstop must hold
		 * even when nobody reads); the flags are restored at the end.
		 * Not dumpable: the command (same user) cannot open our
		 * /proc/PID/fd/1 and write look-alike frames into it.
		 */
		framer.fd = 1;
		framer.len = framer.off = 0;
		fw.fr = &framer;
		if ((fl1 = fcntl(1, F_GETFL)) < 0 || fcntl(1, F_SETFL, fl1 | O_NONBLOCK) < 0) {
			fl1 = -1;
			helper_err_errno(err, errno, "stdout");
			goto done;
		}
		(void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	}
	if (!helper_exec_id_valid(id)) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "exec id must match [A-Za-z0-9_-]{1,64}");
		goto done;
	}
	if (argv == NULL || argv[0] == NULL) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "no command given after --");
		goto done;
	}
	if (cwd != NULL) {
		if (helper_path_check(ctx, cwd, &rel, err) < 0)
			goto done;
		if ((cwdfd = helper_open(ctx, rel, O_PATH | O_DIRECTORY, err)) < 0)
			goto done;
	}
	if ((sfd = helper_state_dir_open(ctx, 1, err)) < 0)
		goto done;

	sigemptyset(&set);
	for (i = 0; i < NWAITSIGS; i++)
		sigaddset(&set, waitsigs[i]);
	if (sigprocmask(SIG_BLOCK, &set, &old) < 0) {
		helper_err_errno(err, errno, "sigprocmask");
		goto done;
	}
	masked = 1;
	/*
	 * An inherited SIG_IGN would discard these even while blocked (and
	 * SIGCHLD ignored means no child to wait for): wait with SIG_DFL, give
	 * the command back what we inherited. SIGPIPE: a reader gone away is
	 * an outcome to act on, not a reason to die without killing the group.
	 */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	for (i = 0; i < NWAITSIGS; i++)
		sigaction(waitsigs[i], &dfl, &saved[i]);
	sigaction(SIGPIPE, framed || io != NULL ? &ign : &dfl, &savedpipe);
	restore = 1;
	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0) {
		helper_err_errno(err, errno, "pipe");
		goto done;
	}
	if (framed && (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0)) {
		helper_err_errno(err, errno, "pipe");
		goto done;
	}
	if ((framed || io != NULL) &&
	    (sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		helper_err_errno(err, errno, "signalfd");
		goto done;
	}
	if (framed)   /* fewer wakeups per byte; refused above pipe-max-size: fine */
		(void)fcntl(po[1], F_SETPIPE_SZ, PIPE_SIZE);
	if ((pid = fork()) < 0) {
		helper_err_errno(err, errno, "fork");
		goto done;
	}
	if (pid == 0) {
		char c;

		/*
		 * Wait until the kill handle names us: from then on a kill can
		 * reach everything we start. EOF means the helper gave up.
		 */
		close(go[1]);
		close(ep[0]);
		if (helper_read_full(go[0], &c, 1) != 1)
			_exit(SBX_HELPER_EXEC_FAILED);
		if (setsid() < 0)
			child_fail(ep[1], 1, errno);
		if (cwdfd >= 0 && fchdir(cwdfd) < 0)
			child_fail(ep[1], 2, errno);
		/* dup2 clears close-on-exec on 1 and 2; the originals close at exec. */
		if (framed && (dup2(po[1], 1) < 0 || dup2(pe[1], 2) < 0))
			child_fail(ep[1], 4, errno);
		if (io != NULL && io->child(io->arg) < 0)
			child_fail(ep[1], 4, errno);
		for (i = 0; i < NWAITSIGS; i++)
			sigaction(waitsigs[i], &saved[i], NULL);
		sigaction(SIGPIPE, &savedpipe, NULL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(argv[0], argv);
		child_fail(ep[1], 3, errno);
	}
	close(go[0]);
	go[0] = -1;
	close(ep[1]);
	ep[1] = -1;
	if (framed) {
		close(po[1]);
		po[1] = -1;
		close(pe[1]);
		pe[1] = -1;
	}

	if (io != NULL && io->started != NULL)
		io->started(io->arg);
	switch (helper_handle_link(sfd, id, pid, &tomb, err)) {
	case 1:
		linked = 1;
		break;
	case 0:
		if (tomb)
			helper_err_set(err, SBX_E_CANCELLED, "exec was killed before it started");
		else if (err->code == NULL)
			helper_err_set(err, SBX_E_BAD_REQUEST, "exec id already in use");
		/* FALLTHROUGH */
	default:
		goto done;
	}
	if (helper_write_all(go[1], "g", 1) < 0) {
		helper_err_errno(err, errno, "start command");
		goto done;
	}
	close(go[1]);
	go[1] = -1;

	n = helper_read_full(ep[0], &f, sizeof(f));
	if (n == (ssize_t)sizeof(f)) {
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		pid = -1;
		if (f.stage == 3 && (f.errnum == ENOENT || f.errnum == ENOTDIR)) {
			helper_err_set(err, SBX_E_NOT_FOUND, "command not found");
			rc = SBX_HELPER_EXEC_NOTFOUND;
		} else if (f.stage == 3) {
			helper_err_set(err, SBX_E_BAD_REQUEST, "cannot execute the command: %s",
			    strerror(f.errnum));
			rc = SBX_HELPER_EXEC_NOEXEC;
		} else
			helper_err_errno(err, f.errnum, f.stage == 1 ? "setsid" :
			    f.stage == 2 ? "chdir" : "dup2");
		goto done;
	}
	ran = 1;

	if (framed) {
		fw.pid = pid;
		fw.sigfd = sigfd;
		fw.pipes[0] = po[0];
		fw.pipes[1] = pe[0];
		po[0] = pe[0] = -1;
		fw.deadline = deadline;
		(void)fwait_run(&fw, 0);
		timed_out = fw.timed_out;
		if (!fw.reaped) {
			/* Output gone or abandoned: the command must not outlive us. */
			(void)kill(-pid, SIGKILL);
			(void)kill(pid, SIGKILL);
			while (waitpid(pid, &fw.status, 0) < 0 && errno == EINTR)
				;
		}
		status = fw.status;
		if (!fw.gone && !fw.abandoned)
			group_wait_gone(pid);
	} else if (io != NULL) {
		io->wait(io->arg, pid, sigfd, deadline, &status, &timed_out);
	} else {
		for (;;) {
			w = waitpid(pid, &status, WNOHANG);
			if (w == pid)
				break;
			if (w < 0 && errno != EINTR) {
				helper_err_errno(err, errno, "waitpid");
				goto done;
			}
			if (timeout_ms > 0) {
				now = helper_mono_ms();
				if (now >= deadline) {
					sig = -1;
					errno = EAGAIN;
				} else {
					ts.tv_sec = (time_t)((deadline - now) / 1000);
					ts.tv_nsec = (long)((deadline - now) % 1000) * 1000000;
					sig = sigtimedwait(&set, &info, &ts);
				}
			} else
				sig = sigwaitinfo(&set, &info);
			if (sig < 0 && errno == EAGAIN) {
				timed_out = 1;
				(void)kill(-pid, SIGKILL);
				(void)kill(pid, SIGKILL);
				while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
					;
				break;
			}
			if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
				(void)kill(-pid, sig);
				(void)kill(pid, sig);
			}
		}
	}
	/* The command is gone: whatever it left behind in its group (and,
	 * with its terminal, in its session) goes too. */
	(void)kill(-pid, SIGKILL);
	if (io != NULL)
		helper_session_kill(pid);
	pid = -1;
	if (timed_out) {
		helper_err_set(err, SBX_E_TIMEOUT, "command ran longer than %llu ms",
		    (unsigned long long)timeout_ms);
		rc = SBX_HELPER_EXEC_TIMEOUT;
	} else if (WIFEXITED(status))
		rc = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		rc = 128 + WTERMSIG(status);
	else
		rc = SBX_HELPER_EXEC_FAILED;
done:
	if (pid > 0) {
		/* Failed after fork: the child never ran the command, or must stop now. */
		(void)kill(pid, SIGKILL);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	if (linked)
		(void)unlinkat(sfd, id, 0);
	if (framed && fw.fr != NULL && !fw.gone && !fw.abandoned) {
		/* The last frames, after the group is dead and reaped. */
		fw.deadline = fw.deadline != 0 ? fw.deadline : deadline;
		fw.sigfd = sigfd;
		fw.reaped = 1;
		if (ran && !timed_out && WIFSIGNALED(status))
			(void)fwait_records(&fw, err, SBX_HELPER_EXIT_HOW_SIGNALED, 0,
			    WTERMSIG(status));
		else if (ran && timed_out)
			(void)fwait_records(&fw, err, SBX_HELPER_EXIT_HOW_SIGNALED, 0,
			    WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL);
		else
			(void)fwait_records(&fw, err, SBX_HELPER_EXIT_HOW_EXITED, rc, 0);
	}
	close_pipes(&fw);
	if (fl1 >= 0)
		(void)fcntl(1, F_SETFL, fl1);
	if (sigfd >= 0)
		close(sigfd);
	for (i = 0; i < 2; i++) {
		if (po[i] >= 0)
			close(po[i]);
		if (pe[i] >= 0)
			close(pe[i]);
	}
	if (go[0] >= 0)
		close(go[0]);
	if (go[1] >= 0)
		close(go[1]);
	if (ep[0] >= 0)
		close(ep[0]);
	if (ep[1] >= 0)
		close(ep[1]);
	if (sfd >= 0)
		close(sfd);
	if (cwdfd >= 0)
		close(cwdfd);
	if (masked) {
		/* Drop what we forwarded or reaped before unblocking. */
		ts.tv_sec = 0;
		ts.tv_nsec = 0;
		while (sigtimedwait(&set, &info, &ts) > 0)
			;
		if (restore) {
			for (i = 0; i < NWAITSIGS; i++)
				sigaction(waitsigs[i], &saved[i], NULL);
			sigaction(SIGPIPE, &savedpipe, NULL);
		}
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
	return rc;
}

int
helper_exec(const struct helper_ctx *ctx, const char *id, const char *cwd,
    uint64_t timeout_ms, int framed, char *const argv[], struct helper_err *err)
{
	return exec_run(ctx, id, cwd, timeout_ms, framed, NULL, argv, err);
}

int
helper_exec_io(const struct helper_ctx *ctx, const char *id, const char *cwd,
    uint64_t timeout_ms, const struct helper_exec_io *io, char *const argv[],
    struct helper_err *err)
{
	return exec_run(ctx, id, cwd, timeout_ms, 0, io, argv, err);
}
