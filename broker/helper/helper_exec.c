/* helper_exec.c - sbx-helper exec control: a process group per exec, its kill handle, kill and killall. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helper.h"

/*
 * A kill handle is the file STATE_DIR/ID holding one line, written whole
 * (a temporary file linked into place) so a reader never sees half of it:
 *   "sbx-helper-exec 1 pgid=G start=S helper=H\n"  G = the group (= the
 *       command's pid), S = its start time in clock ticks after boot from
 *       /proc/G/stat (0 if unknown), H = the helper's pid
 *   "sbx-helper-exec 1 killed\n"  a tombstone: kill came first
 */
#define HANDLE_MAGIC "sbx-helper-exec 1 "
#define HANDLE_TOMBSTONE HANDLE_MAGIC "killed\n"

struct handle {
	int tombstone;
	pid_t pgid;
	unsigned long long start;
	pid_t helper;
};

int
helper_exec_id_valid(const char *id)
{
	size_t i;

	if (id == NULL)
		return 0;
	for (i = 0; id[i] != '\0'; i++) {
		char c = id[i];

		if (i == SBX_HELPER_EXEC_ID_MAX)
			return 0;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '_' || c == '-'))
			return 0;
	}
	return i > 0;
}

/*
 * Start time (field 22 of /proc/PID/stat) of pid: 1 and *start when found,
 * 0 when no such process, -1 when /proc cannot tell.
 */
static int
proc_start_time(pid_t pid, unsigned long long *start)
{
	char path[64], buf[1024];
	char *p, *end;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return errno == ENOENT ? 0 : -1;
	n = helper_read_full(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n == 0 ? 0 : -1;
	buf[n] = '\0';
	/* The command name (field 2) may hold spaces and ')': skip to the last ')'. */
	if ((p = strrchr(buf, ')')) == NULL)
		return -1;
	p++;
	for (field = 3; field < 22; field++) {
		while (*p == ' ')
			p++;
		while (*p != ' ' && *p != '\0')
			p++;
	}
	while (*p == ' ')
		p++;
	errno = 0;
	*start = strtoull(p, &end, 10);
	if (errno != 0 || end == p)
		return -1;
	return 1;
}

/*
 * Opens (creating if missing, 0700) the directory of kill handles. It must
 * be a real directory owned by us: the sandbox's own code runs as the same
 * user and could have planted anything at that name.
 */
static int
state_dir_open(const struct helper_ctx *ctx, int create, struct helper_err *err)
{
	struct stat st;
	int fd;

	if (create && mkdir(ctx->state_dir, 0700) < 0 && errno != EEXIST)
		return helper_err_errno(err, errno, "mkdir exec state directory");
	fd = open(ctx->state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return helper_err_errno(err, errno, "open exec state directory");
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 0077) != 0) {
		close(fd);
		return helper_err_set(err, SBX_E_INTERNAL,
		    "exec state directory is not private to this user");
	}
	return fd;
}

/* Reads and parses the handle ID in sfd: 1 and *h, 0 when absent, -1 with err. */
static int
handle_read(int sfd, const char *id, struct handle *h, struct helper_err *err)
{
	char buf[256];
	long long g = 0, hp = 0;
	unsigned long long s = 0;
	ssize_t n;
	int fd, used = 0;

	memset(h, 0, sizeof(*h));
	if ((fd = openat(sfd, id, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0) {
		if (errno == ENOENT)
			return 0;
		return helper_err_errno(err, errno, "open kill handle");
	}
	n = helper_read_full(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return helper_err_errno(err, errno, "read kill handle");
	buf[n] = '\0';
	if (strcmp(buf, HANDLE_TOMBSTONE) == 0) {
		h->tombstone = 1;
		return 1;
	}
	if (sscanf(buf, HANDLE_MAGIC "pgid=%lld start=%llu helper=%lld\n%n", &g, &s, &hp,
	    &used) != 3 || used != n || g <= 1 || g > 0x7fffffff || hp <= 0 || hp > 0x7fffffff)
		return helper_err_set(err, SBX_E_INTERNAL, "kill handle is malformed");
	h->pgid = (pid_t)g;
	h->start = s;
	h->helper = (pid_t)hp;
	return 1;
}

/*
 * Links a new handle holding text at ID in sfd; never replaces one.
 * Returns 1 when linked, 0 when ID already exists, -1 with err.
 */
static int
handle_create(int sfd, const char *id, const char *text, struct helper_err *err)
{
	char tmp[SBX_HELPER_EXEC_ID_MAX + 48];
	int fd = -1, rc = -1;

	snprintf(tmp, sizeof(tmp), ".tmp-%d-%s", (int)getpid(), id);
	(void)unlinkat(sfd, tmp, 0);
	fd = openat(sfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		helper_err_errno(err, errno, "create kill handle");
		goto done;
	}
	if (helper_write_all(fd, text, strlen(text)) < 0) {
		helper_err_errno(err, errno, "write kill handle");
		goto done;
	}
	if (linkat(sfd, tmp, sfd, id, 0) < 0) {
		if (errno == EEXIST)
			rc = 0;
		else
			helper_err_errno(err, errno, "link kill handle");
		goto done;
	}
	rc = 1;
done:
	if (fd >= 0) {
		close(fd);
		(void)unlinkat(sfd, tmp, 0);
	}
	return rc;
}

/*
 * SIGKILLs the group of h, and its leader in case it has not called
 * setsid yet. A leader that exists with another start time means the pid
 * was reused and the group is long gone: nothing is sent then.
 */
static void
handle_kill(const struct handle *h)
{
	unsigned long long now = 0;
	int r;

	if (h->tombstone || h->pgid <= 1)
		return;
	r = proc_start_time(h->pgid, &now);
	if (r == 1 && h->start != 0 && now != h->start)
		return;
	(void)kill(-h->pgid, SIGKILL);
	if (r != 0)
		(void)kill(h->pgid, SIGKILL);
}

/* What the helper waits for while the command runs. */
static const int waitsigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP };
#define NWAITSIGS ((int)(sizeof(waitsigs) / sizeof(waitsigs[0])))

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* What the child tells the parent through the close-on-exec pipe when it fails. */
struct child_failure {
	int stage; /* 1 setsid, 2 chdir, 3 execvp */
	int errnum;
};

static void
child_fail(int fd, int stage, int errnum)
{
	struct child_failure f = { stage, errnum };

	(void)helper_write_all(fd, &f, sizeof(f));
	_exit(SBX_HELPER_EXEC_FAILED);
}

int
helper_exec(const struct helper_ctx *ctx, const char *id, const char *cwd,
    uint64_t timeout_ms, char *const argv[], struct helper_err *err)
{
	char text[160];
	const char *rel = NULL;
	struct child_failure f;
	struct handle h;
	sigset_t set, old;
	siginfo_t info;
	struct timespec ts;
	uint64_t deadline = 0, now;
	unsigned long long start = 0;
	pid_t pid = -1, w;
	ssize_t n;
	int cwdfd = -1, sfd = -1, go[2] = { -1, -1 }, ep[2] = { -1, -1 };
	int status = 0, rc = SBX_HELPER_EXEC_FAILED, linked = 0, timed_out = 0, sig, masked = 0;
	int restore = 0, i;
	struct sigaction dfl, saved[NWAITSIGS];

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
	if ((sfd = state_dir_open(ctx, 1, err)) < 0)
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
	 * the command back what we inherited.
	 */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (i = 0; i < NWAITSIGS; i++)
		sigaction(waitsigs[i], &dfl, &saved[i]);
	restore = 1;
	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0) {
		helper_err_errno(err, errno, "pipe");
		goto done;
	}
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
		for (i = 0; i < NWAITSIGS; i++)
			sigaction(waitsigs[i], &saved[i], NULL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(argv[0], argv);
		child_fail(ep[1], 3, errno);
	}
	close(go[0]);
	go[0] = -1;
	close(ep[1]);
	ep[1] = -1;

	if (proc_start_time(pid, &start) != 1)
		start = 0;
	snprintf(text, sizeof(text), HANDLE_MAGIC "pgid=%d start=%llu helper=%d\n", (int)pid,
	    start, (int)getpid());
	switch (handle_create(sfd, id, text, err)) {
	case 1:
		linked = 1;
		break;
	case 0:
		if (handle_read(sfd, id, &h, err) == 1 && h.tombstone)
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
			helper_err_errno(err, f.errnum, f.stage == 1 ? "setsid" : "chdir");
		goto done;
	}

	if (timeout_ms > 0)
		deadline = now_ms() + timeout_ms;
	for (;;) {
		w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			helper_err_errno(err, errno, "waitpid");
			goto done;
		}
		if (timeout_ms > 0) {
			now = now_ms();
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
	/* The command is gone: whatever it left behind in its group goes too. */
	(void)kill(-pid, SIGKILL);
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
		if (restore)
			for (i = 0; i < NWAITSIGS; i++)
				sigaction(waitsigs[i], &saved[i], NULL);
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
	return rc;
}

int
helper_kill(const struct helper_ctx *ctx, const char *id, struct helper_err *err)
{
	struct handle h;
	unsigned long long hstart;
	int sfd = -1, rc = -1, tries, r;

	if (!helper_exec_id_valid(id)) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "exec id must match [A-Za-z0-9_-]{1,64}");
		goto done;
	}
	if ((sfd = state_dir_open(ctx, 1, err)) < 0)
		goto done;
	for (tries = 0; tries < 4; tries++) {
		if ((r = handle_read(sfd, id, &h, err)) < 0)
			goto done;
		if (r == 1) {
			handle_kill(&h);
			/* A helper that died (SIGKILL) leaves its handle: retire it. */
			if (!h.tombstone && proc_start_time(h.helper, &hstart) == 0)
				(void)unlinkat(sfd, id, 0);
			rc = 0;
			goto done;
		}
		/* Not started yet (or long finished): make sure it never starts. */
		if ((r = handle_create(sfd, id, HANDLE_TOMBSTONE, err)) < 0)
			goto done;
		if (r == 1) {
			rc = 0;
			goto done;
		}
	}
	helper_err_set(err, SBX_E_INTERNAL, "kill handle keeps changing");
done:
	if (sfd >= 0)
		close(sfd);
	return rc;
}

int
helper_killall(const struct helper_ctx *ctx, struct helper_err *err)
{
	struct handle h;
	struct helper_err ignored;
	struct dirent *de;
	DIR *d = NULL;
	int sfd = -1, rc = -1;

	if ((sfd = state_dir_open(ctx, 0, err)) < 0) {
		if (err->errnum == ENOENT) { /* nothing ever ran */
			err->code = NULL;
			rc = 0;
		}
		goto done;
	}
	if ((d = fdopendir(sfd)) == NULL) {
		helper_err_errno(err, errno, "fdopendir");
		goto done;
	}
	sfd = -1;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (helper_exec_id_valid(de->d_name) &&
		    handle_read(dirfd(d), de->d_name, &h, &ignored) == 1)
			handle_kill(&h);
		(void)unlinkat(dirfd(d), de->d_name, 0);
	}
	rc = 0;
done:
	if (d != NULL)
		closedir(d);
	if (sfd >= 0)
		close(sfd);
	return rc;
}
