/* helper_connect.c - sbx-helper connect mode: one TCP connection to a port on the sandbox's own loopback, relayed to fd 0/1 (adr/0049; the socket's bytes spliced into a pipe at fd 1, adr/0053 amendment of session 11); libc only, calls helper_util.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helper.h"
#include "sbx_msg.h"

#define CONNECT_MS 5000   /* a listener whose backlog is full: give up after */
#define PIPE_SIZE (256 * 1024)   /* fd 1's pipe: fewer wakeups per byte */
#define SPLICE_MAX (1024 * 1024) /* one splice(2) moves at most this */

/*
 * The socket's bytes to fd 1 when fd 1 is a pipe (the agent's, always):
 * splice(2) moves the socket's pages into the pipe by reference, no copy
 * through this process (adr/0053 amendment of session 11). Returns 1 bytes
 * moved or nothing to do now (*wait_out: the pipe is full, wait for fd 1),
 * 0 the socket's EOF, -1 an error (errno; EINVAL: fd 1 is no pipe, the
 * caller falls back to read/write, nothing moved).
 */
static int
splice_down(int s, int *wait_out)
{
	struct pollfd pf[2];
	ssize_t n;

	*wait_out = 0;
	for (;;) {
		n = splice(s, NULL, 1, NULL, SPLICE_MAX, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0)
			continue;
		if (n == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -1;
		break;
	}
	/* EAGAIN: the socket is empty or the pipe full; which one decides
	 * what the next poll waits for. */
	pf[0].fd = s;
	pf[0].events = POLLIN;
	pf[1].fd = 1;
	pf[1].events = POLLOUT;
	if (poll(pf, 2, 0) > 0 && (pf[0].revents & POLLIN) &&
	    !(pf[1].revents & (POLLOUT | POLLERR | POLLHUP)))
		*wait_out = 1;
	return 1;
}

static struct helper_pump up, down;   /* 64 KiB each: not for the stack */

/* A connected socket to addr (non-blocking), or -1 with errno. */
static int
try_connect(const struct sockaddr *addr, socklen_t len)
{
	struct pollfd pf;
	socklen_t sl = sizeof(int);
	int fd, e = 0;

	if ((fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (connect(fd, addr, len) == 0)
		return fd;
	if (errno != EINPROGRESS)
		goto fail;
	pf.fd = fd;
	pf.events = POLLOUT;
	while ((e = poll(&pf, 1, CONNECT_MS)) < 0 && errno == EINTR)
		;
	if (e == 0) {
		errno = ETIMEDOUT;
		goto fail;
	}
	if (e < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0)
		goto fail;
	if (e == 0)
		return fd;
	errno = e;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

int
helper_connect(uint64_t port, struct helper_err *err)
{
	struct sockaddr_in a4;
	struct sockaddr_in6 a6;
	struct pollfd pf[4];
	int s, np, n, half = 0, ui, si, oi, sp = 1, wait_out = 0, r;

	if (port < 1 || port > 65535)
		return helper_err_set(err, SBX_E_BAD_REQUEST, "--port must be 1 to 65535");
	memset(&a4, 0, sizeof(a4));
	a4.sin_family = AF_INET;
	a4.sin_port = htons((uint16_t)port);
	a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	memset(&a6, 0, sizeof(a6));
	a6.sin6_family = AF_INET6;
	a6.sin6_port = htons((uint16_t)port);
	a6.sin6_addr = in6addr_loopback;
	if ((s = try_connect((struct sockaddr *)&a4, sizeof(a4))) < 0 &&
	    (s = try_connect((struct sockaddr *)&a6, sizeof(a6))) < 0)
		return helper_err_set(err, SBX_E_PORT_CLOSED, SBX_MSG_PORT_CLOSED, (int)port);
	memset(&up, 0, sizeof(up));
	memset(&down, 0, sizeof(down));
	up.from = 0;
	up.to = down.from = s;
	down.to = 1;
	(void)fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
	(void)fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
	/* Refused (not a pipe, above pipe-max-size): the default size. */
	(void)fcntl(1, F_SETPIPE_SZ, PIPE_SIZE);
	/* Until the socket's EOF and all it sent is written out. */
	while (!down.eof || down.len > down.off) {
		np = 0;
		oi = np;
		pf[np].fd = 1;
		pf[np++].events = down.len > down.off || wait_out ? POLLOUT : 0;
		/* Not polled with nothing to do: a closed connection polls HUP. */
		si = np;
		pf[np].events = (!down.eof && down.len == down.off && !wait_out ?
		    POLLIN : 0) | (up.len > up.off ? POLLOUT : 0);
		pf[np++].fd = pf[si].events != 0 ? s : -1;
		ui = -1;
		if (!up.eof && up.len == up.off) {
			ui = np;
			pf[np].fd = 0;
			pf[np++].events = POLLIN;
		}
		if ((n = poll(pf, (nfds_t)np, -1)) < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		if (down.len == down.off && (pf[oi].revents & (POLLERR | POLLHUP | POLLNVAL)))
			break;   /* nobody reads fd 1 any more */
		if (sp && !down.eof && down.len == down.off &&
		    ((pf[si].revents & ~POLLOUT) != 0 ||
		    (wait_out && pf[oi].revents != 0))) {
			if ((r = splice_down(s, &wait_out)) == 0)
				down.eof = 1;
			else if (r < 0 && errno == EINVAL)
				sp = 0;   /* fd 1 is no pipe: read and write */
			else if (r < 0)
				break;    /* a reset, or nobody reads fd 1 */
		}
		if (!sp && pf[si].revents != 0 && down.len == down.off)
			(void)helper_pump_fill(&down);   /* EOF or a reset ends it */
		if (down.len > down.off && helper_pump_flush(&down) < 0)
			break;
		if (ui >= 0 && pf[ui].revents != 0)
			(void)helper_pump_fill(&up);
		if (up.len > up.off && helper_pump_flush(&up) < 0) {
			up.eof = 1;   /* the peer stopped reading: input goes nowhere */
			up.off = up.len = 0;
		}
		if (up.eof && up.len == up.off && !half) {
			half = 1;
			(void)shutdown(s, SHUT_WR);
		}
	}
	close(s);
	return 0;
}
