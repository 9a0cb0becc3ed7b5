/* helper_handle.c - sbx-helper kill handles: the private state directory, one file per exec id naming a process group, kill, killall and the session sweep; libc only, calls helper_util.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
 * Field want (>= 3, numeric) of /proc/PID/stat for pid (its decimal name):
 * 1 and *v when found, 0 when no such process, -1 when /proc cannot tell.
 */
static int
stat_field(const char *pid, int want, unsigned long long *v)
{
	char path[64], buf[1024];
	char *p, *end;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
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
	for (field = 3; field < want; field++) {
		while (*p == ' ')
			p++;
		while (*p != ' ' && *p != '\0')
			p++;
	}
	while (*p == ' ')
		p++;
	errno = 0;
	*v = strtoull(p, &end, 10);
	if (errno != 0 || end == p)
		return -1;
	return 1;
}

/* Start time (field 22) of pid: 1 and *start, 0 gone, -1 unreadable. */
static int
proc_start_time(pid_t pid, unsigned long long *start)
{
	char name[16];

	snprintf(name, sizeof(name), "%d", (int)pid);
	return stat_field(name, 22, start);
}

/*
 * Opens (creating if missing, 0700) the directory of kill handles. It must
 * be a real directory owned by us: the sandbox's own code runs as the same
 * user and could have planted anything at that name.
 */
int
helper_state_dir_open(const struct helper_ctx *ctx, int create, struct helper_err *err)
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

/* The session id (field 6 of /proc/PID/stat) of the process named d, or -1. */
static pid_t
proc_session(const char *d)
{
	unsigned long long sid;

	return stat_field(d, 6, &sid) == 1 ? (pid_t)sid : -1;
}

void
helper_session_kill(pid_t sid)
{
	struct dirent *de;
	DIR *d;
	int pass;

	if (sid <= 1 || sid == getsid(0))
		return;
	/* Twice: a process forked while the first pass read /proc. */
	for (pass = 0; pass < 2; pass++) {
		if ((d = opendir("/proc")) == NULL)
			return;
		while ((de = readdir(d)) != NULL)
			if (de->d_name[0] >= '1' && de->d_name[0] <= '9' &&
			    proc_session(de->d_name) == sid)
				(void)kill((pid_t)strtol(de->d_name, NULL, 10), SIGKILL);
		closedir(d);
	}
}

/*
 * SIGKILLs the group of h, and its leader in case it has not called
 * setsid yet, then every process left in its session (a terminal's shell
 * puts each job in a group of its own, adr/0049). A leader that exists
 * with another start time means the pid was reused and the group is long
 * gone: nothing is sent then.
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
	helper_session_kill(h->pgid);
}

int
helper_handle_link(int sfd, const char *id, pid_t pgid, int *tombstone, struct helper_err *err)
{
	unsigned long long start = 0;
	struct handle h;
	char text[160];
	int r;

	*tombstone = 0;
	if (proc_start_time(pgid, &start) != 1)
		start = 0;
	snprintf(text, sizeof(text), HANDLE_MAGIC "pgid=%d start=%llu helper=%d\n", (int)pgid,
	    start, (int)getpid());
	if ((r = handle_create(sfd, id, text, err)) != 0)
		return r;
	if (handle_read(sfd, id, &h, err) == 1 && h.tombstone)
		*tombstone = 1;
	return 0;
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
	if ((sfd = helper_state_dir_open(ctx, 1, err)) < 0)
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

	if ((sfd = helper_state_dir_open(ctx, 0, err)) < 0) {
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
		    handle_read(dirfd(d), de->d_name, &h, &ignored) == 1) {
			/* killall run by the agent (adr/0025) spares that agent. */
			if (strcmp(de->d_name, "agent") == 0 && h.pgid == getppid())
				continue;
			handle_kill(&h);
		}
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

int
helper_handle_self(const struct helper_ctx *ctx, const char *id, struct helper_err *err)
{
	int sfd, r, tomb;

	if (!helper_exec_id_valid(id))
		return helper_err_set(err, SBX_E_BAD_REQUEST,
		    "--id must match [A-Za-z0-9_-]{1,64}");
	if ((sfd = helper_state_dir_open(ctx, 1, err)) < 0)
		return -1;
	/* The helper is its own group's leader (the runtime's exec makes it
	 * one); kill then reaches it, stopped or not. */
	r = helper_handle_link(sfd, id, getpid(), &tomb, err);
	close(sfd);
	if (r == 0)
		return helper_err_set(err, SBX_E_CANCELLED,
		    "cancelled before it started (id already used)");
	return r < 0 ? -1 : 0;
}

void
helper_handle_drop(const struct helper_ctx *ctx, const char *id)
{
	int sfd;

	if ((sfd = open(ctx->state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC)) < 0)
		return;
	(void)unlinkat(sfd, id, 0);
	close(sfd);
}
