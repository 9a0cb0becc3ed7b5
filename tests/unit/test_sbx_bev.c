/* test_sbx_bev.c - sbx_bev_fill over a socket pair: what the socket holds arrives in one read callback (not libevent 2.1's 4 KiB a call), the bound and the read watermark hold, a paused bufferevent is not read, and the EOF after the bytes is still reported by libevent; sbx_bev_write writes through and keeps the order. */
#include <sys/socket.h>
#include <sys/uio.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "sbx_bev.h"

#define SENT (200 * 1024)

struct fx {
	struct event_base *base;
	struct bufferevent *bev;
	int peer;
	size_t upto;
	size_t first;     /* input length in the first read callback */
	size_t total;
	int calls, eof;
};

static void
rd(struct bufferevent *bev, void *arg)
{
	struct fx *f = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	(void)sbx_bev_fill(bev, f->upto);
	if (f->calls++ == 0)
		f->first = evbuffer_get_length(in);
	f->total += evbuffer_get_length(in);
	evbuffer_drain(in, evbuffer_get_length(in));
}

static void
ev(struct bufferevent *bev, short what, void *arg)
{
	struct fx *f = arg;

	(void)bev;
	if (what & BEV_EVENT_EOF) {
		f->eof = 1;
		event_base_loopbreak(f->base);
	}
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	int sv[2], sz = 1 << 20;

	assert_non_null(f);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	f->base = event_base_new();
	evutil_make_socket_nonblocking(sv[0]);
	f->bev = bufferevent_socket_new(f->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	f->peer = sv[1];
	f->upto = 256 * 1024;
	bufferevent_setcb(f->bev, rd, NULL, ev, f);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	bufferevent_free(f->bev);
	if (f->peer >= 0)
		close(f->peer);
	event_base_free(f->base);
	free(f);
	return 0;
}

/* Writes SENT bytes, then closes the peer: the EOF comes after them. */
static void
send_all(struct fx *f)
{
	static unsigned char buf[SENT];
	size_t off = 0;
	ssize_t w;

	memset(buf, 'x', sizeof(buf));
	while (off < sizeof(buf)) {
		w = write(f->peer, buf + off, sizeof(buf) - off);
		assert_true(w > 0);
		off += (size_t)w;
	}
	close(f->peer);
	f->peer = -1;
}

static void
test_one_callback_takes_what_is_queued(void **state)
{
	struct fx *f = *state;

	send_all(f);
	bufferevent_enable(f->bev, EV_READ);
	event_base_dispatch(f->base);
	/* libevent alone: 4 KiB a call, 50 calls; filled: one piece */
	assert_int_equal(f->first, SENT);
	assert_int_equal(f->total, SENT);
	assert_int_equal(f->eof, 1);
}

static void
test_bound_and_watermark(void **state)
{
	struct fx *f = *state;

	f->upto = 64 * 1024;
	send_all(f);
	bufferevent_enable(f->bev, EV_READ);
	event_base_dispatch(f->base);
	assert_int_equal(f->first, 64 * 1024);
	assert_int_equal(f->total, SENT);
	assert_int_equal(f->eof, 1);
}

static void
test_watermark_lower_than_bound(void **state)
{
	struct fx *f = *state;

	bufferevent_setwatermark(f->bev, EV_READ, 0, 16 * 1024);
	send_all(f);
	bufferevent_enable(f->bev, EV_READ);
	event_base_dispatch(f->base);
	assert_true(f->first <= 16 * 1024);
	assert_int_equal(f->total, SENT);
}

static void
test_paused_is_not_read(void **state)
{
	struct fx *f = *state;

	send_all(f);
	bufferevent_disable(f->bev, EV_READ);
	assert_int_equal(sbx_bev_fill(f->bev, 256 * 1024), 0);
	assert_int_equal(evbuffer_get_length(bufferevent_get_input(f->bev)), 0);
	bufferevent_enable(f->bev, EV_READ);
	assert_int_equal(sbx_bev_fill(f->bev, 256 * 1024), SENT);
}

/* sbx_bev_write: straight to the socket while nothing is queued, queued
 * once the socket is full, and every byte arrives once and in order. */
static void
test_write_through_keeps_the_order(void **state)
{
	enum { N = 4 * 1024 * 1024, PIECE = 65536 };
	struct fx *f = *state;
	unsigned char *data = malloc(N), *got = malloc(N);
	struct evbuffer *out = bufferevent_get_output(f->bev);
	struct iovec v[2];
	size_t off, have = 0;
	ssize_t r;
	int queued = 0, i;

	for (off = 0; off < N; off++)
		data[off] = (unsigned char)(off * 31 + off / 4093);
	evutil_make_socket_nonblocking(f->peer);
	bufferevent_enable(f->bev, EV_WRITE);
	for (off = 0; off < N; off += PIECE) {
		v[0].iov_base = data + off;
		v[0].iov_len = 100;
		v[1].iov_base = data + off + 100;
		v[1].iov_len = PIECE - 100;
		assert_int_equal(sbx_bev_write(f->bev, v, 2), 0);
		if (off == 0)   /* an empty socket took it: nothing queued */
			assert_int_equal(evbuffer_get_length(out), 0);
		if (evbuffer_get_length(out) > 0)
			queued = 1;
		/* The socket has room again while bytes still wait in the
		 * output (libevent has not run): the next write must queue
		 * behind them, not jump ahead. */
		if (queued && (r = read(f->peer, got + have, 256 * 1024)) > 0)
			have += (size_t)r;
	}
	assert_true(queued);   /* nobody read: the rest waited in the output */
	for (i = 0; i < 100000 && have < N; i++) {
		event_base_loop(f->base, EVLOOP_NONBLOCK);
		r = read(f->peer, got + have, N - have);
		if (r > 0)
			have += (size_t)r;
	}
	assert_int_equal(have, N);
	assert_memory_equal(got, data, N);
	free(data);
	free(got);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_one_callback_takes_what_is_queued, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bound_and_watermark, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_watermark_lower_than_bound,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_paused_is_not_read, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_write_through_keeps_the_order, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
