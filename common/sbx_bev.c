/* sbx_bev.c - large reads and write-through for socket bufferevents (sbx_bev.h, adr/0063, adr/0053); touches only the socket and the buffers of the bufferevent it is given. */
#include <errno.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include "sbx_bev.h"

size_t
sbx_bev_fill(struct bufferevent *bev, size_t upto)
{
	struct evbuffer_iovec v[2];
	struct evbuffer *in;
	evutil_socket_t fd;
	size_t have, want, left, high = 0, got;
	ssize_t r;
	int avail = 0, nv, i;

	if (bev == NULL || !(bufferevent_get_enabled(bev) & EV_READ) ||
	    (fd = bufferevent_getfd(bev)) < 0)
		return 0;
	/* A TLS bufferevent's socket holds ciphertext: only libevent's own
	 * read decrypts (the kubernetes driver's pods/exec, adr/0072). */
	if (bufferevent_openssl_get_ssl(bev) != NULL)
		return 0;
	in = bufferevent_get_input(bev);
	have = evbuffer_get_length(in);
	if (bufferevent_getwatermark(bev, EV_READ, NULL, &high) == 0 &&
	    high != 0 && high < upto)
		upto = high;
	if (have >= upto || ioctl(fd, FIONREAD, &avail) != 0 || avail <= 0)
		return 0;
	want = upto - have;
	if ((size_t)avail < want)
		want = (size_t)avail;
	evbuffer_unfreeze(in, 0);
	nv = evbuffer_reserve_space(in, (ev_ssize_t)want, v, 2);
	if (nv <= 0) {
		evbuffer_freeze(in, 0);
		return 0;
	}
	for (i = 0, left = want; i < nv; i++) {
		if (v[i].iov_len > left)
			v[i].iov_len = left;
		left -= v[i].iov_len;
	}
	r = readv(fd, (struct iovec *)v, nv);
	got = r > 0 ? (size_t)r : 0;
	for (i = 0, left = got; i < nv; i++) {
		if (v[i].iov_len > left)
			v[i].iov_len = left;
		left -= v[i].iov_len;
	}
	/* Nothing read (EAGAIN, or a race with an error): commit nothing;
	 * the socket keeps whatever it has for libevent's own read. */
	evbuffer_commit_space(in, v, got > 0 ? nv : 0);
	evbuffer_freeze(in, 0);
	return got;
}

int
sbx_bev_write(struct bufferevent *bev, const struct iovec *iov, int n)
{
	struct evbuffer *out = bufferevent_get_output(bev);
	evutil_socket_t fd = bufferevent_getfd(bev);
	size_t done = 0, skip;
	ssize_t r = 0;
	int i;

	if (evbuffer_get_length(out) == 0 && fd >= 0 &&
	    (bufferevent_get_enabled(bev) & EV_WRITE) &&
	    bufferevent_openssl_get_ssl(bev) == NULL) {
		do
			r = writev(fd, iov, n);
		while (r < 0 && errno == EINTR);
		if (r > 0)
			done = (size_t)r;
	}
	for (i = 0; i < n; i++) {
		skip = done < iov[i].iov_len ? done : iov[i].iov_len;
		done -= skip;
		if (iov[i].iov_len > skip && evbuffer_add(out,
		    (const char *)iov[i].iov_base + skip, iov[i].iov_len - skip) != 0)
			return -1;
	}
	return 0;
}

void
sbx_bev_heap(void)
{
#ifdef __GLIBC__
	(void)mallopt(M_MMAP_THRESHOLD, SBX_HEAP_MMAP_MIN);
	(void)mallopt(M_TRIM_THRESHOLD, SBX_HEAP_KEEP);
#endif
}

static void
heap_quiet_fire(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}

void
sbx_heap_quiet(struct event_base *base, struct event **evp)
{
	struct timeval tv = { SBX_HEAP_QUIET_MS / 1000,
	    (SBX_HEAP_QUIET_MS % 1000) * 1000 };

	if (*evp == NULL &&
	    (*evp = evtimer_new(base, heap_quiet_fire, NULL)) == NULL)
		return;
	evtimer_add(*evp, &tv);   /* pending: pushed back to now + quiet */
}

void
sbx_heap_quiet_free(struct event **evp)
{
	if (*evp != NULL)
		event_free(*evp);
	*evp = NULL;
}
