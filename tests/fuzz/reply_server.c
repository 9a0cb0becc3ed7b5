/* reply_server.c - scripted reply server of the client-side fuzz targets (reply_server.h). */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz.h"
#include "reply_server.h"

static int lfd = -1;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *parts[REPLY_MAXPARTS];
static size_t plen[REPLY_MAXPARTS], nparts, served;

int
reply_listen(const char *name, int backlog, char *path, size_t pathsz)
{
	struct sockaddr_un sun;
	int fd;

	snprintf(path, pathsz, "/tmp/sbx-fuzz-%s-%d.sock", name, (int)getpid());
	FUZZ_ASSERT(strlen(path) < sizeof(sun.sun_path));
	unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	FUZZ_ASSERT(fd >= 0);
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	memcpy(sun.sun_path, path, strlen(path) + 1);
	FUZZ_ASSERT(bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0);
	FUZZ_ASSERT(listen(fd, backlog) == 0);
	return fd;
}

static void *
serve(void *arg)
{
	char buf[65536];
	struct pollfd pfd;
	int c;

	(void)arg;
	for (;;) {
		c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		pfd.fd = c;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, 100) > 0 && read(c, buf, sizeof(buf)) < 0)
			buf[0] = '\0';
		pthread_mutex_lock(&mu);
		if (served < nparts && plen[served] > 0 &&
		    write(c, parts[served], plen[served]) < 0)
			buf[0] = '\0';
		served++;
		pthread_mutex_unlock(&mu);
		shutdown(c, SHUT_WR);
		while (poll(&pfd, 1, 200) > 0 && read(c, buf, sizeof(buf)) > 0)
			;
		close(c);
	}
	return NULL;
}

void
reply_serve(int fd)
{
	pthread_t t;

	lfd = fd;
	FUZZ_ASSERT(pthread_create(&t, NULL, serve, NULL) == 0);
}

void
reply_load(const unsigned char *d, size_t n)
{
	const unsigned char *p;
	size_t k;

	pthread_mutex_lock(&mu);
	for (k = 0; k < nparts; k++)
		free(parts[k]);
	nparts = served = 0;
	while (nparts < REPLY_MAXPARTS) {
		p = memmem(d, n, REPLY_SEP, strlen(REPLY_SEP));
		k = p != NULL ? (size_t)(p - d) : n;
		parts[nparts] = malloc(k + 1);
		FUZZ_ASSERT(parts[nparts] != NULL);
		memcpy(parts[nparts], d, k);
		plen[nparts++] = k;
		if (p == NULL)
			break;
		d = p + strlen(REPLY_SEP);
		n -= k + strlen(REPLY_SEP);
	}
	pthread_mutex_unlock(&mu);
}
