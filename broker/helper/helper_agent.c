/* helper_agent.c - sbx-helper agent mode (protocol 4, proto/sbx_agent.h): one process per sandbox multiplexing helper modes over one channel; calls the frame codec, helper_util/helper_exec (kill handles) and helper_listen (the direct channel, adr/0066), never the entry. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helper.h"
#include "sbx_agent.h"

/*
 * The agent reads frames from its stdin and writes frames to its stdout
 * (the runtime exec's attached streams, adr/0025). For each OPEN it forks
 * a child that runs one protocol 2 mode through the entry's main (handed
 * down as run_mode: the agent never calls up into sbx_helper.c) with three
 * pipes as its stdin, stdout and stderr; the agent moves bytes between
 * those pipes and the channel, within each stream's credit, and sends the
 * child's wait status as EXIT once its output is all sent. It never
 * blocks: one poll loop, non-blocking descriptors, a bounded output queue.
 * Nothing from the broker is trusted either: a malformed frame ends the
 * channel (and with it every stream: their process groups are killed).
 */

#define OUTQ_CAP (2u * 1024 * 1024)         /* frames waiting for the channel */
#define OUTQ_READ_ROOM (SBX_AGENT_HDR + SBX_AGENT_DATA_MAX + 64 * 1024)
#define OUTQ_INPUT_MAX (1024u * 1024)       /* above this, stop reading the channel */
#define DRAIN_AFTER_EXIT_MS 1000            /* child reaped: pipes must end within */
#define CLOSE_GRACE_MS 1000                 /* channel gone: wait this long for children */
#define IN_CHUNK 65536
#define READ_BURST 4                        /* stdout frames read per wakeup, at most */
#define SOFT_KILL_MS 1000                   /* a cancelled write: EOF first, SIGKILL after */
#define HANDLE_AGENT "agent"                /* the agent's own kill handle */
#define FLUSH_BYTES (64u * 1024)            /* output queued: write the channel now */
#define FLUSH_DELAY_MS 1                    /* else this long after the last write */
#define OUTQ_TRIM (256u * 1024)             /* idle with more touched: give it back */

struct astream {
	uint32_t id;
	pid_t pid;              /* the child (its own group), 0 once reaped */
	int in, out, err;       /* stdin write end, stdout/stderr read ends; -1 closed */
	int ctrl;               /* write end of the mode's fd 3 (OPEN_CTRL); -1 closed */
	int has_ctrl;           /* opened with SBX_AGENT_OPEN_CTRL */
	uint32_t credit;        /* output bytes we may still send */
	unsigned char *inbuf;   /* stdin bytes received, not yet written: */
	size_t inoff, inlen;    /* inlen of them at inbuf + inoff (<= SBX_AGENT_STDIN_WINDOW) */
	int in_eof;             /* EOF received: close stdin once inbuf is written */
	uint32_t in_owed;       /* stdin bytes written, credit not yet returned */
	uint32_t in_window;     /* stdin credit the broker holds */
	int status, reaped, cancelled;
	uint64_t reaped_ms;
	uint64_t kill_at;       /* soft cancel: SIGKILL at this time (0: none) */
	int is_exec;            /* exec or pty: --id is the command's kill handle */
	int soft_cancel;        /* write: EOF first on cancel (stream_cancel) */
	char exec_id[SBX_HELPER_EXEC_ID_MAX + 1]; /* --id: the mode's kill handle */
};

struct agent {
	const struct helper_ctx *ctx;
	helper_main_fn *run_mode;   /* what a stream's child runs (helper.h) */
	int cin, cout, sigfd;
	/* The direct channel (adr/0066): the listening socket until a
	 * channel is taken (chosen), then fd 0 as the lifeline when the
	 * socket was. */
	int lfd, lifeline, chosen;
	const char *listen_dir;
	int in_eof, failed;
	uint64_t idle_ms, last_rx_ms;
	uint32_t last_id;
	size_t nstreams;
	struct astream *streams[SBX_AGENT_STREAMS_MAX];
	struct sbx_agent_dec dec;
	size_t qhead, qlen;
	unsigned char *q;
	/* Output coalescing (adr/0033), Nagle-like: the channel is written
	 * at once when it has been quiet for FLUSH_DELAY_MS (the first
	 * output of an exec, an interactive reply), when a frame other than
	 * DATA is queued (urgent) or FLUSH_BYTES are; while output keeps
	 * coming, at most every FLUSH_DELAY_MS (last_write_ms). A read
	 * appends to the last queued DATA frame of the same stream and
	 * descriptor (tail_*) while it has room. */
	int urgent;
	uint64_t last_write_ms;
	size_t q_touched;       /* high-water mark of the queue's bytes */
	int tail_ok, tail_which;
	uint32_t tail_id, tail_len;
	size_t tail_rel;        /* its header, from qhead */
};

/* Page-aligned so that an idle agent can give the pages back (q_trim). */
static unsigned char outq[OUTQ_CAP] __attribute__((aligned(4096)));
static unsigned char rec[SBX_AGENT_OPEN_MAX];

static size_t
q_free(const struct agent *a)
{
	return OUTQ_CAP - a->qhead - a->qlen;
}

/* Room for n more bytes at the end of the queue (compacting); 0 or -1. */
static int
q_reserve(struct agent *a, size_t n)
{
	if (q_free(a) < n && a->qhead > 0) {
		memmove(a->q, a->q + a->qhead, a->qlen);
		a->qhead = 0;
	}
	if (q_free(a) < n)
		return -1;
	if (a->qhead + a->qlen + n > a->q_touched)
		a->q_touched = a->qhead + a->qlen + n;
	return 0;
}

/* An idle agent (no stream, nothing queued) gives back the queue's pages
 * that a stream's output touched: RSS back to its start (~0.8 MiB; the
 * queue's bound is 2 MiB). MADV_DONTNEED on private anonymous memory:
 * the pages read as zeros when touched again. */
static void
q_trim(struct agent *a)
{
	if (a->nstreams > 0 || a->qlen > 0 || a->q_touched <= OUTQ_TRIM)
		return;
	(void)madvise(a->q, OUTQ_CAP, MADV_DONTNEED);
	a->q_touched = 0;
}

/* Queues one frame; a queue full of control frames means a broker that
 * does not read: the channel fails. */
static void
q_frame(struct agent *a, int type, int flags, uint32_t stream, const void *p, size_t n)
{
	unsigned char *h;

	if (a->failed || q_reserve(a, SBX_AGENT_HDR + n) < 0) {
		a->failed = 1;
		return;
	}
	h = a->q + a->qhead + a->qlen;
	sbx_agent_hdr_put(h, type, flags, stream, (uint32_t)n);
	if (n > 0)
		memcpy(h + SBX_AGENT_HDR, p, n);
	a->qlen += SBX_AGENT_HDR + n;
	a->urgent = 1;
	a->tail_ok = 0;
}

/* Whether the queue is to be written now (see struct agent). */
static int
q_due(const struct agent *a, uint64_t now)
{
	return a->qlen > 0 && (a->urgent || a->qlen >= FLUSH_BYTES ||
	    now - a->last_write_ms >= FLUSH_DELAY_MS);
}

static void
q_flush(struct agent *a)
{
	ssize_t n;

	while (a->qlen > 0) {
		n = write(a->cout, a->q + a->qhead, a->qlen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			a->failed = 1;
			return;
		}
		a->qhead += (size_t)n;
		a->qlen -= (size_t)n;
		a->tail_ok = 0;   /* part of it may be on the wire */
		a->last_write_ms = helper_mono_ms();
	}
	a->qhead = 0;
	a->urgent = 0;
}

static struct astream *
stream_find(struct agent *a, uint32_t id)
{
	size_t i;

	for (i = 0; i < a->nstreams; i++)
		if (a->streams[i]->id == id)
			return a->streams[i];
	return NULL;
}

static void
close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* Kills what the stream runs: the child's group, and an exec's command
 * group through its kill handle (the command has a session of its own). */
static void
stream_kill(struct agent *a, struct astream *s)
{
	struct helper_err err;

	memset(&err, 0, sizeof(err));
	if (s->is_exec && s->exec_id[0] != '\0')
		(void)helper_kill(a->ctx, s->exec_id, &err);
	if (s->pid > 0) {
		(void)kill(-s->pid, SIGKILL);
		(void)kill(s->pid, SIGKILL);
	}
}

/*
 * Ends a stream the broker gave up on. A mode reading stdin (write) gets
 * EOF first: short of its --size it removes its temporary file and exits
 * cancelled, leaving the old file (sbx_helper_proto.h); SIGKILL follows
 * only if it is still there SOFT_KILL_MS later. Anything else is killed.
 */
static void
stream_cancel(struct agent *a, struct astream *s)
{
	if (s->cancelled)
		return;
	s->cancelled = 1;
	if (s->soft_cancel && s->inbuf != NULL && s->pid > 0) {
		s->inlen = 0;
		close_fd(&s->in);
		s->kill_at = helper_mono_ms() + SOFT_KILL_MS;
		return;
	}
	stream_kill(a, s);
}

static void
stream_free(struct agent *a, struct astream *s)
{
	size_t i;

	for (i = 0; i < a->nstreams; i++)
		if (a->streams[i] == s) {
			a->streams[i] = a->streams[--a->nstreams];
			break;
		}
	close_fd(&s->in);
	close_fd(&s->out);
	close_fd(&s->err);
	close_fd(&s->ctrl);
	free(s->inbuf);
	free(s);
}

/* The id (--id) of a mode's arguments, its kill handle. */
static void
exec_id_of(char **argv, char *out)
{
	int i;

	out[0] = '\0';
	for (i = 1; argv[i] != NULL && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--id") == 0 && argv[i + 1] != NULL &&
		    helper_exec_id_valid(argv[i + 1])) {
			snprintf(out, SBX_HELPER_EXEC_ID_MAX + 1, "%s", argv[i + 1]);
			return;
		}
}

/* The modes a stream may run: everything a runtime exec of the helper
 * ran for the broker, never agent, idle or initwork. */
static int
mode_allowed(const char *m)
{
	static const char *const ok[] = {
		SBX_HELPER_MODE_VERSION, SBX_HELPER_MODE_READ, SBX_HELPER_MODE_WRITE,
		SBX_HELPER_MODE_LIST, SBX_HELPER_MODE_EXEC, SBX_HELPER_MODE_KILL,
		SBX_HELPER_MODE_KILLALL, SBX_HELPER_MODE_DU, SBX_HELPER_MODE_PTY,
		SBX_HELPER_MODE_CONNECT, NULL,
	};
	size_t i;

	for (i = 0; ok[i] != NULL; i++)
		if (strcmp(m, ok[i]) == 0)
			return 1;
	return 0;
}

static void
refuse(struct agent *a, uint32_t id, const char *code)
{
	q_frame(a, SBX_AGENT_T_REFUSE, 0, id, code, strlen(code));
}

/* In the child: the stream's pipes become 0-2 (and its control pipe 3,
 * ctrl >= 0: the mode runs with --ctrl), nothing else stays open, signals
 * as a fresh process has them, then the mode runs. */
static void
child_run(const struct agent *a, int in, int out, int err, int ctrl, char **argv, char **env)
{
	const struct helper_ctx *ctx = a->ctx;
	char *args[SBX_AGENT_ARGS_MAX + 8];
	struct sigaction dfl;
	sigset_t none;
	int n = 0, i, fd;
	char *eq;

	(void)setsid();
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		_exit(SBX_HELPER_EXIT_INTERNAL);
	if (ctrl >= 0 && (ctrl == 3 ? fcntl(3, F_SETFD, 0) : dup2(ctrl, 3)) < 0)
		_exit(SBX_HELPER_EXIT_INTERNAL);
	if (syscall(SYS_close_range, ctrl >= 0 ? 4 : 3, ~0U, 0) < 0)
		for (fd = ctrl >= 0 ? 4 : 3; fd < 4096; fd++)
			(void)close(fd);
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (i = 1; i < 65; i++)
		(void)sigaction(i, &dfl, NULL);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	for (i = 0; env[i] != NULL; i++) {
		eq = strchr(env[i], '=');
		*eq = '\0';
		(void)setenv(env[i], eq + 1, 1);
		*eq = '=';
	}
	args[n++] = "sbx-helper";
	args[n++] = "--root";
	args[n++] = (char *)ctx->root;
	args[n++] = "--state-dir";
	args[n++] = (char *)ctx->state_dir;
	if (ctx->no_openat2)
		args[n++] = "--no-openat2";
	if (ctrl >= 0)
		args[n++] = "--ctrl";
	for (i = 0; argv[i] != NULL; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	_exit(a->run_mode(n, args));
}

static int
pipe_nb(int p[2])
{
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	return 0;
}

static void
stream_open(struct agent *a, const struct sbx_agent_frame *f, unsigned char *p, size_t n)
{
	static char *argv[SBX_AGENT_ARGS_MAX + 1], *env[SBX_AGENT_ARGS_MAX + 1];
	const char *why;
	struct astream *s = NULL;
	int pi[2] = { -1, -1 }, po[2] = { -1, -1 }, pe[2] = { -1, -1 }, pc[2] = { -1, -1 };
	pid_t pid;

	if (f->stream <= a->last_id) {
		a->failed = 1;   /* ids strictly increase: a replay or a bug */
		return;
	}
	a->last_id = f->stream;
	if (sbx_agent_open_parse(p, n, argv, SBX_AGENT_ARGS_MAX + 1, env,
	    SBX_AGENT_ARGS_MAX + 1, &why) < 0) {
		refuse(a, f->stream, SBX_E_BAD_REQUEST);
		return;
	}
	if (!mode_allowed(argv[0])) {
		refuse(a, f->stream, SBX_E_BAD_REQUEST);
		return;
	}
	if (a->nstreams >= SBX_AGENT_STREAMS_MAX) {
		refuse(a, f->stream, SBX_E_TOO_MANY);
		return;
	}
	/* `kill ID` of a file operation this agent runs: cancel it here (a
	 * write first gets EOF, so its temporary file goes) and answer at once. */
	if (strcmp(argv[0], SBX_HELPER_MODE_KILL) == 0 && argv[1] != NULL && argv[2] == NULL) {
		size_t i;

		for (i = 0; i < a->nstreams; i++)
			if (!a->streams[i]->is_exec && strcmp(a->streams[i]->exec_id, argv[1]) == 0) {
				unsigned char ex[SBX_AGENT_EXIT_LEN] = { SBX_AGENT_EXIT_EXITED, 0, 0, 0 };

				stream_cancel(a, a->streams[i]);
				q_frame(a, SBX_AGENT_T_EXIT, 0, f->stream, ex, sizeof(ex));
				return;
			}
	}
	if ((s = calloc(1, sizeof(*s))) == NULL)
		goto fail;
	s->id = f->stream;
	s->in = s->out = s->err = s->ctrl = -1;
	s->has_ctrl = (f->flags & SBX_AGENT_OPEN_CTRL) != 0;
	s->credit = SBX_AGENT_WINDOW;
	s->is_exec = strcmp(argv[0], SBX_HELPER_MODE_EXEC) == 0 ||
	    strcmp(argv[0], SBX_HELPER_MODE_PTY) == 0;
	s->soft_cancel = strcmp(argv[0], SBX_HELPER_MODE_WRITE) == 0;
	exec_id_of(argv, s->exec_id);
	if ((f->flags & SBX_AGENT_OPEN_STDIN) &&
	    (s->inbuf = malloc(SBX_AGENT_STDIN_WINDOW)) == NULL)
		goto fail;
	s->in_window = (f->flags & SBX_AGENT_OPEN_STDIN) ? SBX_AGENT_WINDOW : 0;
	if ((f->flags & SBX_AGENT_OPEN_STDIN) ? pipe_nb(pi) < 0 :
	    (pi[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		goto fail;
	if (pipe_nb(po) < 0 || pipe_nb(pe) < 0 || (s->has_ctrl && pipe_nb(pc) < 0))
		goto fail;
	if ((pid = fork()) < 0)
		goto fail;
	if (pid == 0)
		child_run(a, pi[0], po[1], pe[1], pc[0], argv, env);
	s->pid = pid;
	close(pi[0]);
	close(po[1]);
	close(pe[1]);
	close_fd(&pc[0]);
	s->ctrl = pc[1];
	if (s->ctrl >= 0)
		(void)fcntl(s->ctrl, F_SETFL, O_NONBLOCK);
	s->in = pi[1];
	s->out = po[0];
	s->err = pe[0];
	if (s->in >= 0)
		(void)fcntl(s->in, F_SETFL, O_NONBLOCK);
	(void)fcntl(s->out, F_SETFL, O_NONBLOCK);
	(void)fcntl(s->err, F_SETFL, O_NONBLOCK);
	a->streams[a->nstreams++] = s;
	/* stdin's credit grows from the protocol's initial window to what
	 * inbuf holds: one window in flight over the runtime's exec stream
	 * is a stop-and-wait round trip per window (adr/0050 amendment). */
	if (s->inbuf != NULL) {
		unsigned char w[SBX_AGENT_WINDOW_LEN];

		sbx_agent_put32(w, SBX_AGENT_STDIN_WINDOW - SBX_AGENT_WINDOW);
		q_frame(a, SBX_AGENT_T_WINDOW, 0, s->id, w, sizeof(w));
		s->in_window = SBX_AGENT_STDIN_WINDOW;
	}
	return;
fail:
	close_fd(&pi[0]);
	close_fd(&pi[1]);
	close_fd(&po[0]);
	close_fd(&po[1]);
	close_fd(&pe[0]);
	close_fd(&pe[1]);
	close_fd(&pc[0]);
	close_fd(&pc[1]);
	if (s != NULL) {
		free(s->inbuf);
		free(s);
	}
	refuse(a, f->stream, SBX_E_INTERNAL);
}

/* Writes buffered stdin to the child; returns credit as it goes. */
static void
stdin_pump(struct agent *a, struct astream *s)
{
	unsigned char w[SBX_AGENT_WINDOW_LEN];
	ssize_t n;

	while (s->in >= 0 && s->inlen > 0) {
		n = write(s->in, s->inbuf + s->inoff, s->inlen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			/* The mode stopped reading (it exited): drop the rest. */
			s->in_owed += (uint32_t)s->inlen;
			s->inlen = 0;
			close_fd(&s->in);
			break;
		}
		s->inoff += (size_t)n;
		s->inlen -= (size_t)n;
		if (s->inlen == 0)
			s->inoff = 0;
		s->in_owed += (uint32_t)n;
	}
	if (s->in_eof && s->inlen == 0)
		close_fd(&s->in);
	/* Credit back in batches: one WINDOW per quarter window, not per
	 * write; early only when the broker is short of credit and nothing
	 * waits here. Returning each write's bytes as they go makes the
	 * broker send frames the size of a pipe read, whose credit comes
	 * back as small again: the silly window of RFC 813 (adr/0050,
	 * amendment 2026-12-02). */
	if (s->in_owed >= SBX_AGENT_STDIN_WINDOW / 4 || (s->in_owed > 0 &&
	    s->inlen == 0 && s->in_window < SBX_AGENT_STDIN_WINDOW / 4)) {
		sbx_agent_put32(w, s->in_owed);
		q_frame(a, SBX_AGENT_T_WINDOW, 0, s->id, w, sizeof(w));
		s->in_window += s->in_owed;
		s->in_owed = 0;
	}
}

/*
 * A CTRL record for s: checked, then written whole (8 bytes < PIPE_BUF:
 * atomic) to the mode's fd 3. A full pipe means a mode that stopped
 * reading it: the record is dropped, as are records for a mode that
 * closed it or was cancelled. Returns -1 (a protocol error) for a stream
 * opened without SBX_AGENT_OPEN_CTRL or a record out of its bounds.
 */
static int
stream_ctrl(struct astream *s, const unsigned char *p, size_t n)
{
	struct sbx_agent_ctrl c;
	const char *why;
	ssize_t w;

	if (!s->has_ctrl || sbx_agent_ctrl_parse(p, n, &c, &why) < 0)
		return -1;
	if (s->ctrl < 0 || s->cancelled)
		return 0;
	do
		w = write(s->ctrl, p, n);
	while (w < 0 && errno == EINTR);
	if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
		close_fd(&s->ctrl);   /* the mode is gone */
	return 0;
}

/* One frame (or DATA piece) from the broker. */
static int
on_frame(void *arg, const struct sbx_agent_frame *f, const unsigned char *p, size_t n,
    int last)
{
	struct agent *a = arg;
	struct astream *s;
	uint32_t w;

	(void)last;
	a->last_rx_ms = helper_mono_ms();
	switch (f->type) {
	case SBX_AGENT_T_PING:
		q_frame(a, SBX_AGENT_T_PONG, 0, 0, p, n);
		return a->failed ? -1 : 0;
	case SBX_AGENT_T_OPEN:
		stream_open(a, f, (unsigned char *)p, n);
		return a->failed ? -1 : 0;
	default:
		break;
	}
	if ((s = stream_find(a, f->stream)) == NULL) {
		/* A stream that ended while the broker was still sending to
		 * it: ids it never opened are an error, ended ones are not. */
		return f->stream <= a->last_id ? 0 : -1;
	}
	switch (f->type) {
	case SBX_AGENT_T_DATA:
		if (s->inbuf == NULL || s->in_eof || n > s->in_window)
			return -1;   /* no stdin, or over its credit */
		s->in_window -= (uint32_t)n;
		if (s->in < 0 || s->cancelled) {
			s->in_owed += (uint32_t)n;   /* nobody reads: dropped */
			stdin_pump(a, s);
			return 0;
		}
		if (s->inoff + s->inlen + n > SBX_AGENT_STDIN_WINDOW) {
			memmove(s->inbuf, s->inbuf + s->inoff, s->inlen);
			s->inoff = 0;
		}
		memcpy(s->inbuf + s->inoff + s->inlen, p, n);
		s->inlen += n;
		stdin_pump(a, s);
		return 0;
	case SBX_AGENT_T_EOF:
		if (s->inbuf == NULL)
			return -1;
		s->in_eof = 1;
		stdin_pump(a, s);
		return 0;
	case SBX_AGENT_T_WINDOW:
		w = sbx_agent_window_parse(p, n);
		if (w == 0 || w > SBX_AGENT_WINDOW_MAX - s->credit)
			return -1;
		s->credit += w;
		return 0;
	case SBX_AGENT_T_CANCEL:
		stream_cancel(a, s);
		return 0;
	case SBX_AGENT_T_CTRL:
		return stream_ctrl(s, p, n);
	default:
		return -1;
	}
}

/* Reads one chunk of fd (1 stdout, 2 stderr) of s into a DATA frame:
 * 1 when it filled all the room it had (more may be waiting), else 0. */
static int
stream_read(struct agent *a, struct astream *s, int which)
{
	static unsigned char drop[IN_CHUNK];
	int *fd = which == 1 ? &s->out : &s->err;
	size_t want;
	ssize_t n;
	int append;

	if (s->cancelled) {
		n = read(*fd, drop, sizeof(drop));
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			close_fd(fd);
		return 0;
	}
	/* More of the same output goes into the queued frame; else a new one. */
	append = a->tail_ok && a->tail_id == s->id && a->tail_which == which &&
	    a->tail_len < SBX_AGENT_DATA_MAX;
	want = SBX_AGENT_DATA_MAX - (append ? a->tail_len : 0);
	if (want > s->credit)
		want = s->credit;
	if (want == 0 || q_reserve(a, (append ? 0 : SBX_AGENT_HDR) + want) < 0)
		return 0;
	n = read(*fd, a->q + a->qhead + a->qlen + (append ? 0 : SBX_AGENT_HDR),
	    want);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (n <= 0) {
		close_fd(fd);
		return 0;
	}
	if (!append) {
		a->tail_ok = 1;
		a->tail_id = s->id;
		a->tail_which = which;
		a->tail_len = 0;
		a->tail_rel = a->qlen;
		a->qlen += SBX_AGENT_HDR;
	}
	a->tail_len += (uint32_t)n;
	sbx_agent_hdr_put(a->q + a->qhead + a->tail_rel, SBX_AGENT_T_DATA, which,
	    s->id, a->tail_len);
	a->qlen += (size_t)n;
	s->credit -= (uint32_t)n;
	if (s->credit == 0)
		a->urgent = 1;   /* the broker's WINDOW needs these bytes */
	return (size_t)n == want;
}

/* Children that ended. */
static void
reap(struct agent *a)
{
	struct signalfd_siginfo si;
	struct astream *s;
	int status;
	pid_t pid;

	while (read(a->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		size_t i;

		for (i = 0; i < a->nstreams; i++) {
			s = a->streams[i];
			if (s->pid == pid) {
				s->pid = 0;
				s->reaped = 1;
				s->status = status;
				s->reaped_ms = helper_mono_ms();
			}
		}
	}
}

/* Streams whose child is reaped and whose output is all queued end with EXIT. */
static void
streams_finish(struct agent *a)
{
	unsigned char p[SBX_AGENT_EXIT_LEN];
	struct sbx_agent_exit ex;
	struct astream *s;
	size_t i = 0;

	while (i < a->nstreams) {
		s = a->streams[i];
		if (s->kill_at != 0 && s->pid > 0 &&
		    helper_mono_ms() >= s->kill_at) {
			s->kill_at = 0;
			stream_kill(a, s);
		}
		if (s->reaped && (s->out >= 0 || s->err >= 0) &&
		    helper_mono_ms() - s->reaped_ms > DRAIN_AFTER_EXIT_MS &&
		    s->credit > 0) {
			/* Something the mode left behind holds the pipes. */
			close_fd(&s->out);
			close_fd(&s->err);
		}
		if (!s->reaped || s->out >= 0 || s->err >= 0) {
			i++;
			continue;
		}
		memset(&ex, 0, sizeof(ex));
		if (WIFSIGNALED(s->status)) {
			ex.how = SBX_AGENT_EXIT_SIGNALED;
			ex.sig = WTERMSIG(s->status);
		} else {
			ex.how = SBX_AGENT_EXIT_EXITED;
			ex.status = WEXITSTATUS(s->status);
		}
		sbx_agent_exit_put(p, &ex);
		q_frame(a, SBX_AGENT_T_EXIT, 0, s->id, p, sizeof(p));
		stream_free(a, s);
	}
}

static void
hello(struct agent *a)
{
	struct sbx_agent_hello h = { SBX_AGENT_PROTO, (uint32_t)getpid(), SBX_AGENT_WINDOW,
		SBX_AGENT_STREAMS_MAX };
	unsigned char p[SBX_AGENT_HELLO_LEN];

	sbx_agent_hello_put(p, &h);
	q_frame(a, SBX_AGENT_T_HELLO, 0, 0, p, sizeof(p));
}

/* The channel is gone: every stream's processes die, children are reaped. */
static void
shutdown_streams(struct agent *a)
{
	struct timespec ts = { 0, 5 * 1000000 };
	uint64_t until = helper_mono_ms() + CLOSE_GRACE_MS;
	size_t i;

	for (i = 0; i < a->nstreams; i++)
		stream_cancel(a, a->streams[i]);
	while (helper_mono_ms() < until) {
		int live = 0;

		reap(a);
		for (i = 0; i < a->nstreams; i++)
			live += a->streams[i]->pid > 0;
		if (live == 0)
			break;
		nanosleep(&ts, NULL);
	}
	for (i = 0; i < a->nstreams; i++)   /* a write that did not end on EOF */
		stream_kill(a, a->streams[i]);
	reap(a);
	while (a->nstreams > 0)
		stream_free(a, a->streams[0]);
}

/* Moves fd to a close-on-exec descriptor above 2 and puts /dev/null at fd. */
static int
park_fd(int fd, int flags)
{
	int n = fcntl(fd, F_DUPFD_CLOEXEC, 3), z;

	if (n < 0)
		return -1;
	if ((z = open("/dev/null", O_RDWR)) < 0 || dup2(z, fd) < 0)
		return -1;
	if (z != fd)
		close(z);
	(void)fcntl(n, F_SETFL, flags | O_NONBLOCK);
	return n;
}

/* Takes over the sandbox's agent slot: a previous agent (its broker gone,
 * its channel dead) is killed; its streams die with it (their pipes). */
static int
take_slot(const struct helper_ctx *ctx, struct helper_err *err)
{
	char path[SBX_HELPER_PATH_MAX + 16];

	(void)helper_kill(ctx, HANDLE_AGENT, err);
	memset(err, 0, sizeof(*err));
	snprintf(path, sizeof(path), "%s/%s", ctx->state_dir, HANDLE_AGENT);
	(void)unlink(path);
	return helper_handle_self(ctx, HANDLE_AGENT, err);
}

/* The channel is taken: the socket's connection (fd >= 0) or fd 0/1
 * (fd -1); the listening socket goes, HELLO goes first on the channel. */
static void
take_channel(struct agent *a, int fd)
{
	helper_listen_close(a->lfd, a->listen_dir);
	a->lfd = -1;
	if (fd >= 0) {
		a->lifeline = a->cin;
		a->cin = a->cout = fd;
	}
	a->chosen = 1;
	hello(a);
}

int
helper_agent(const struct helper_ctx *ctx, uint64_t idle_ms, const char *listen_dir,
    helper_main_fn *run_mode, struct helper_err *err)
{
	struct pollfd pf[5 + 3 * SBX_AGENT_STREAMS_MAX];
	struct astream *who[5 + 3 * SBX_AGENT_STREAMS_MAX];
	int what[5 + 3 * SBX_AGENT_STREAMS_MAX];
	struct agent a;
	sigset_t set;
	size_t i;
	nfds_t np;
	int tmo, r, k, rc = -1;
	unsigned char buf[IN_CHUNK];
	ssize_t n;

	memset(&a, 0, sizeof(a));
	a.ctx = ctx;
	a.run_mode = run_mode;
	a.q = outq;
	a.idle_ms = idle_ms;
	a.cin = a.cout = a.sigfd = a.lfd = a.lifeline = -1;
	a.listen_dir = listen_dir;
	(void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	(void)setsid();   /* its own group: the kill handle names it */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0 ||
	    (a.sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		helper_err_errno(err, errno, "signalfd");
		goto done;
	}
	/* The channel must not be inherited by anything a stream runs. */
	if ((a.cin = park_fd(0, O_RDONLY)) < 0 || (a.cout = park_fd(1, O_WRONLY)) < 0) {
		helper_err_errno(err, errno, "channel descriptors");
		goto done;
	}
	if (take_slot(ctx, err) < 0)
		goto done;
	sbx_agent_dec_init(&a.dec, 0, rec, sizeof(rec));
	a.last_rx_ms = helper_mono_ms();
	if (listen_dir != NULL && (a.lfd = helper_listen_open(listen_dir, err)) < 0) {
		/* No socket: the runtime stream is the channel (the broker's
		 * connect fails and it falls back, adr/0066). */
		(void)fprintf(stderr, "sbx-helper agent: %s\n", err->message);
		memset(err, 0, sizeof(*err));
	}
	if (a.lfd < 0)
		take_channel(&a, -1);
	while (!a.failed) {
		np = 0;
		if (a.lfd >= 0) {
			pf[np].fd = a.lfd;
			pf[np].events = POLLIN;
			who[np] = NULL;
			what[np++] = 6;
		}
		if (a.lifeline >= 0) {
			pf[np].fd = a.lifeline;
			pf[np].events = POLLIN;
			who[np] = NULL;
			what[np++] = 7;
		}
		if (!a.in_eof && a.qlen < OUTQ_INPUT_MAX) {
			pf[np].fd = a.cin;
			pf[np].events = POLLIN;
			who[np] = NULL;
			what[np++] = 0;
		}
		pf[np].fd = a.cout;
		pf[np].events = q_due(&a, helper_mono_ms()) ? POLLOUT : 0;
		who[np] = NULL;
		what[np++] = 1;
		pf[np].fd = a.sigfd;
		pf[np].events = POLLIN;
		who[np] = NULL;
		what[np++] = 2;
		for (i = 0; i < a.nstreams; i++) {
			struct astream *s = a.streams[i];
			int room = s->cancelled || (s->credit > 0 &&
			    OUTQ_CAP - a.qlen >= OUTQ_READ_ROOM);

			if (s->out >= 0 && room) {
				pf[np].fd = s->out;
				pf[np].events = POLLIN;
				who[np] = s;
				what[np++] = 3;
			}
			if (s->err >= 0 && room) {
				pf[np].fd = s->err;
				pf[np].events = POLLIN;
				who[np] = s;
				what[np++] = 4;
			}
			if (s->in >= 0 && s->inlen > 0) {
				pf[np].fd = s->in;
				pf[np].events = POLLOUT;
				who[np] = s;
				what[np++] = 5;
			}
		}
		tmo = a.nstreams > 0 ? 250 : -1;
		if (a.qlen > 0 && !q_due(&a, helper_mono_ms()))
			tmo = FLUSH_DELAY_MS;   /* the coalescing delay ends */
		if (a.idle_ms > 0) {
			uint64_t now = helper_mono_ms();
			uint64_t until = a.last_rx_ms + a.idle_ms;
			int left = until <= now ? 0 : until - now > 3600000 ? 3600000 :
			    (int)(until - now);

			if (left == 0)
				break;   /* the broker has been silent: it is gone */
			tmo = tmo < 0 || left < tmo ? left : tmo;
		}
		r = poll(pf, np, tmo);
		if (r < 0 && errno != EINTR) {
			helper_err_errno(err, errno, "poll");
			goto done;
		}
		for (i = 0; r > 0 && i < np; i++) {
			if (pf[i].revents == 0)
				continue;
			switch (what[i]) {
			case 0:
				n = read(a.cin, buf, sizeof(buf));
				if (n < 0 && (errno == EINTR || errno == EAGAIN))
					break;
				if (n <= 0) {
					a.in_eof = 1;
					a.failed = 1;
					break;
				}
				if (!a.chosen)   /* the broker fell back to the stream */
					take_channel(&a, -1);
				if (sbx_agent_dec_feed(&a.dec, buf, (size_t)n, on_frame, &a) < 0)
					a.failed = 1;
				break;
			case 1:
				if (pf[i].revents & (POLLERR | POLLHUP | POLLNVAL))
					a.failed = 1;
				break;
			case 2:
				reap(&a);
				break;
			case 3:
				/* Earlier streams' frames first; a stream freed in
				 * this round is not touched (who[] holds no freed
				 * stream: frees happen in streams_finish only). */
				/* A full frame: more may wait (a pipe of 256 KiB,
				 * the connect mode's): up to READ_BURST frames a
				 * wakeup, one write of the channel for them. */
				for (k = 0; k < READ_BURST && who[i]->out >= 0 &&
				    stream_read(&a, who[i], 1) &&
				    a.qlen + OUTQ_READ_ROOM <= OUTQ_CAP; k++)
					;
				break;
			case 4:
				/* stdout before stderr of one stream: only when
				 * stdout had nothing this time. */
				if (!(i > 0 && what[i - 1] == 3 && who[i - 1] == who[i] &&
				    (pf[i - 1].revents & POLLIN)))
					stream_read(&a, who[i], 2);
				break;
			case 5:
				stdin_pump(&a, who[i]);
				break;
			case 6:
				if ((n = helper_listen_accept(a.lfd)) >= 0)
					take_channel(&a, (int)n);
				break;
			case 7:
				/* The lifeline: nothing is expected on it; its
				 * end is the broker's (as the stream's was). */
				n = read(a.lifeline, buf, sizeof(buf));
				if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
					a.failed = 1;
				break;
			}
		}
		reap(&a);
		streams_finish(&a);
		if (q_due(&a, helper_mono_ms()))
			q_flush(&a);
		q_trim(&a);
	}
	rc = 0;
done:
	shutdown_streams(&a);
	helper_listen_close(a.lfd, a.listen_dir);
	helper_handle_drop(ctx, HANDLE_AGENT);
	if (a.sigfd >= 0)
		close(a.sigfd);
	return rc;
}
