/* helper_init.c - sbx-helper's container-level modes: idle (a sandbox's main process) and initwork (/work's owner). Calls helper_util.c only. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helper.h"

int
helper_idle(struct helper_err *err)
{
	sigset_t set;
	int sig = 0;

	/* With the runtime's init as PID 1 we are its only child: a stop's
	 * SIGTERM reaches us and ends the container at once, status 0. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return helper_err_errno(err, errno, "sigprocmask");
	while (sigwait(&set, &sig) != 0)
		;
	return 0;
}

/* "UID:GID", both decimal, uid not 0. */
static int
parse_owner(const char *s, uid_t *uid, gid_t *gid)
{
	unsigned long u = 0, g = 0;
	const char *p = s;
	int nd = 0;

	for (; *p >= '0' && *p <= '9' && nd < 10; p++, nd++)
		u = u * 10 + (unsigned long)(*p - '0');
	if (nd == 0 || *p++ != ':')
		return -1;
	for (nd = 0; *p >= '0' && *p <= '9' && nd < 10; p++, nd++)
		g = g * 10 + (unsigned long)(*p - '0');
	if (nd == 0 || *p != '\0' || u == 0 || u > 0x7fffffffUL || g > 0x7fffffffUL)
		return -1;
	*uid = (uid_t)u;
	*gid = (gid_t)g;
	return 0;
}

int
helper_initwork(const struct helper_ctx *ctx, const char *owner, struct helper_err *err)
{
	char proc[64];
	struct stat st;
	uid_t uid;
	gid_t gid;
	int fd, rc = -1;

	if (parse_owner(owner, &uid, &gid) < 0)
		return helper_err_set(err, SBX_E_BAD_REQUEST, "owner must be UID:GID, UID not 0");
	/* O_PATH: needs no read permission on the directory itself, so
	 * CAP_DAC_OVERRIDE is not needed whoever owns it. */
	fd = open(ctx->root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return helper_err_errno(err, errno, "open /work");
	if (fstat(fd, &st) < 0) {
		helper_err_errno(err, errno, "stat /work");
		goto done;
	}
	if ((st.st_uid != uid || st.st_gid != gid) &&
	    fchownat(fd, "", uid, gid, AT_EMPTY_PATH) < 0) {
		helper_err_errno(err, errno, "chown /work");
		goto done;
	}
	/* The owner must be able to use it; nothing else changes. chmod via
	 * /proc: fchmod refuses an O_PATH descriptor. */
	if ((st.st_mode & 0700) != 0700) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		if (chmod(proc, (st.st_mode & 07777 & ~(mode_t)06000) | 0700) < 0) {
			helper_err_errno(err, errno, "chmod /work");
			goto done;
		}
	}
	rc = 0;
done:
	close(fd);
	return rc;
}
