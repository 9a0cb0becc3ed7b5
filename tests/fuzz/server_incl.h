/* server_incl.h - for the fuzz targets that send raw bytes to an in-process sbx HTTP server over loopback TCP. */
#ifndef SBX_FUZZ_SERVER_INCL_H
#define SBX_FUZZ_SERVER_INCL_H

/*
 * The server (broker or api) runs on base with the fake driver of
 * tests/driver_fake.c; fz_exchange() connects to 127.0.0.1:port, writes the
 * bytes as a client would (several requests may follow each other), runs
 * the loop while reading whatever comes back, half-closes once the server
 * has been quiet a while, and returns when the server has closed the
 * connection, or after a bound (a hang is an invariant broken: every
 * request is answered or the connection closed). The reply is left in resp.
 *
 * fz_subst() replaces each "@X@" placeholder of the input by a credential
 * only the target knows (a corpus file cannot hold a random key), so the
 * fuzzer gets past authentication.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "fuzz.h"

#define FZ_IDLE_TURNS 40        /* quiet loop turns before half-closing */
#define FZ_MAX_TURNS 200000     /* then the server is stuck */

static size_t
fz_subst(const unsigned char *in, size_t n, const char *const *marks,
    const char *const *values, struct evbuffer *out)
{
	size_t i = 0, k;

	while (i < n) {
		for (k = 0; marks[k] != NULL; k++)
			if (n - i >= strlen(marks[k]) &&
			    memcmp(in + i, marks[k], strlen(marks[k])) == 0)
				break;
		if (marks[k] != NULL) {
			evbuffer_add(out, values[k], strlen(values[k]));
			i += strlen(marks[k]);
		} else {
			evbuffer_add(out, in + i, 1);
			i++;
		}
	}
	return evbuffer_get_length(out);
}

static void
fz_exchange(struct event_base *base, int port, struct evbuffer *req,
    struct evbuffer *resp)
{
	struct sockaddr_in sin;
	char buf[16384];
	size_t off = 0, len = evbuffer_get_length(req);
	const unsigned char *p = evbuffer_pullup(req, -1);
	int fd, idle = 0, turns, closed = 0, halfclosed = 0;
	ssize_t n;

	struct linger lg = { 1, 0 };
	int tries;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* Hundreds of thousands of connections: close with RST (no
	 * TIME_WAIT) and retry a connect that fails (for a second). */
	for (tries = 0; ; tries++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		FUZZ_ASSERT(fd >= 0);
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0)
			break;
		/* no free local port, or a loaded machine's listen queue */
		if (tries >= 100)
			fprintf(stderr, "connect: %s\n", strerror(errno));
		FUZZ_ASSERT(tries < 100);
		close(fd);
		usleep(10000);
	}
	FUZZ_ASSERT(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
	for (turns = 0; !closed && turns < FZ_MAX_TURNS; turns++) {
		if (off < len) {
			n = write(fd, p + off, len - off);
			if (n > 0)
				off += (size_t)n;
			else if (n < 0 && errno != EAGAIN)
				off = len;  /* the server closed its side */
		}
		event_base_loop(base, EVLOOP_NONBLOCK);
		n = read(fd, buf, sizeof(buf));
		if (n > 0) {
			evbuffer_add(resp, buf, (size_t)n);
			idle = 0;
		} else if (n == 0 || (n < 0 && errno != EAGAIN)) {
			closed = 1;
		} else if (off == len && ++idle >= FZ_IDLE_TURNS &&
		    !halfclosed) {
			shutdown(fd, SHUT_WR);
			halfclosed = 1;
		} else if (halfclosed && idle > FZ_IDLE_TURNS) {
			usleep(50);   /* a timer (fake driver delay) may run */
		}
	}
	FUZZ_ASSERT(closed);
	close(fd);
	for (turns = 0; turns < 8; turns++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

/* The first reply is a well-formed status line and no 500 (an internal
 * error is a bug against the fake driver); no secret of the target is
 * echoed anywhere (checked unless the input used the file routes, whose
 * reads give back bytes the input itself wrote). */
static void
fz_check_replies(struct evbuffer *resp, const char *const *secrets,
    int files_used)
{
	size_t len = evbuffer_get_length(resp), k;
	const char *r = (const char *)evbuffer_pullup(resp, -1);

	if (len == 0)
		return;
	/* "HTTP/x.y NNN": evhttp echoes the request's version ("HTTP/1.10",
	 * "HTTP/0.1") where no gate refused the request line first */
	FUZZ_ASSERT(len >= 12 && memcmp(r, "HTTP/", 5) == 0);
	r = memchr(r, ' ', len);
	FUZZ_ASSERT(r != NULL && r[1] >= '1' && r[1] <= '5');
	FUZZ_ASSERT(memcmp(r + 1, "500", 3) != 0);
	r = (const char *)evbuffer_pullup(resp, -1);
	if (files_used)
		return;
	for (k = 0; secrets[k] != NULL; k++)
		FUZZ_ASSERT(memmem(r, len, secrets[k], strlen(secrets[k])) ==
		    NULL);
}

#endif
