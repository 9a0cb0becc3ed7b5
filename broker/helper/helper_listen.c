/* helper_listen.c - the agent's direct channel (adr/0066): the listening unix socket in the agent's socket volume and the check of who connects; libc only, called by helper_agent.c, calls nothing of the helper's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "helper.h"

#define LISTEN_BACKLOG 8
#define CHAN_SOCKBUF (1024 * 1024)   /* bytes each way in the kernel (bulk frames) */

int
helper_listen_open(const char *dir, struct helper_err *err)
{
	struct sockaddr_un sa;
	mode_t old;
	int fd, rc;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir,
	    SBX_AGENT_SOCK_NAME) >= sizeof(sa.sun_path))
		return helper_err_set(err, SBX_E_BAD_REQUEST, "--listen directory is too long");
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return helper_err_errno(err, errno, "socket");
	/* What a previous agent (or anything else) left under the name goes;
	 * the directory is the sandbox user's, so is whatever is in it. */
	(void)unlink(sa.sun_path);
	old = umask(077);   /* the socket is 0600: only its owner (and root) connect */
	rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
		helper_err_errno(err, errno, "listen on the direct channel's socket");
		close(fd);
		return -1;
	}
	return fd;
}

int
helper_listen_accept(int lfd)
{
	struct ucred cr;
	socklen_t len;
	int fd, sz = CHAN_SOCKBUF;

	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return -1;
		len = sizeof(cr);
		/* The kernel gives the peer's pid as seen from our pid
		 * namespace: 0 for a process outside it. Every process of the
		 * sandbox is inside it, so 0 is the broker (or another host
		 * process that could reach the volume's mountpoint). */
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 &&
		    len == sizeof(cr) && cr.pid == 0) {
			(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
			(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
			return fd;
		}
		close(fd);
	}
}

void
helper_listen_close(int lfd, const char *dir)
{
	char path[SBX_HELPER_PATH_MAX + 16];

	if (lfd < 0)
		return;
	close(lfd);
	snprintf(path, sizeof(path), "%s/%s", dir, SBX_AGENT_SOCK_NAME);
	(void)unlink(path);
}
