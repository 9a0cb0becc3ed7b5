/* test_vmux.c - the vm egress link (adr/0069 amendment "egress"): the frame codec's verdicts on good, partial and malformed bytes, and two links over a socketpair carrying a connection both ways with half-closes, flow control past the window, the connection cap and a broken peer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <event2/bufferevent.h>

#include "sbx_vmux.h"
#include "sbx_vmux_link.h"

/* ---------- codec ---------- */

static void
test_frames_round_trip_and_wait_for_their_end(void **state)
{
	unsigned char b[VMUX_HDR + 5];
	struct vmux_frame f;
	const char *why = NULL;

	(void)state;
	vmux_header(b, VMUX_DATA, 0x01020304, 5);
	memcpy(b + VMUX_HDR, "hello", 5);
	assert_int_equal(vmux_parse(b, sizeof(b), &f, &why), VMUX_HDR + 5);
	assert_int_equal(f.type, VMUX_DATA);
	assert_int_equal(f.id, 0x01020304);
	assert_int_equal(f.len, 5);
	assert_memory_equal(f.data, "hello", 5);
	for (size_t i = 0; i < sizeof(b); i++)     /* any prefix: wait */
		assert_int_equal(vmux_parse(b, i, &f, &why), 0);
	assert_int_equal(vmux_credit(b, 7, VMUX_WINDOW), VMUX_HDR + 4);
	assert_int_equal(vmux_parse(b, VMUX_HDR + 4, &f, &why), VMUX_HDR + 4);
	assert_int_equal(f.type, VMUX_CREDIT);
	assert_int_equal(f.credit, VMUX_WINDOW);
	vmux_header(b, VMUX_EOF, 9, 0);
	assert_int_equal(vmux_parse(b, VMUX_HDR, &f, &why), VMUX_HDR);
	assert_int_equal(f.type, VMUX_EOF);
	assert_int_equal(f.len, 0);
}

static void
test_malformed_headers_are_refused_before_their_payload(void **state)
{
	struct { unsigned char h[VMUX_HDR + 4]; size_t n; const char *why; } t[] = {
		{ { 0, 0, 0, 0, 0, 0, 0, 1 }, 8, "unknown frame type" },
		{ { 6, 0, 0, 0, 0, 0, 0, 1 }, 8, "unknown frame type" },
		{ { 2, 1, 0, 1, 0, 0, 0, 1 }, 8, "reserved byte not 0" },
		{ { 1, 0, 0, 0, 0, 0, 0, 0 }, 8, "connection id 0" },
		{ { 2, 0, 0x40, 1, 0, 0, 0, 1 }, 8, "payload too long" },
		{ { 2, 0, 0xff, 0xff, 0, 0, 0, 1 }, 8, "payload too long" },
		{ { 2, 0, 0, 0, 0, 0, 0, 1 }, 8, "empty DATA" },
		{ { 1, 0, 0, 1, 0, 0, 0, 1 }, 8, "payload on OPEN, EOF or CLOSE" },
		{ { 4, 0, 0, 2, 0, 0, 0, 1 }, 8, "payload on OPEN, EOF or CLOSE" },
		{ { 5, 0, 0, 3, 0, 0, 0, 1 }, 8, "CREDIT is not 4 bytes" },
		{ { 5, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0 }, 12, "CREDIT out of range" },
		{ { 5, 0, 0, 4, 0, 0, 0, 1, 0, 1, 0, 1 }, 12, "CREDIT out of range" },
	};
	struct vmux_frame f;
	const char *why;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		why = NULL;
		assert_int_equal(vmux_parse(t[i].h, t[i].n, &f, &why), -1);
		assert_string_equal(why, t[i].why);
	}
}

/* ---------- two links over a socketpair ---------- */

struct rig {
	struct event_base *base;
	struct vmux *g, *h;
	int proxy[8];            /* the test's ends of the proxy connections */
	int nproxy;
	const char *g_end, *h_end;
};

static struct rig R;

static void
nb(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static struct bufferevent *
bev_of(int fd)
{
	nb(fd);
	return bufferevent_socket_new(R.base, fd, BEV_OPT_CLOSE_ON_FREE);
}

static struct bufferevent *
open_cb(void *arg)
{
	int sp[2];

	(void)arg;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0)
		return NULL;
	nb(sp[1]);
	R.proxy[R.nproxy++] = sp[1];
	return bev_of(sp[0]);
}

static void
g_end(void *arg, const char *why)
{
	(void)arg;
	R.g_end = why;
	vmux_free(R.g);
	R.g = NULL;
}

static void
h_end(void *arg, const char *why)
{
	(void)arg;
	R.h_end = why;
	vmux_free(R.h);
	R.h = NULL;
}

static void
spin(int n)
{
	while (n-- > 0)
		event_base_loop(R.base, EVLOOP_NONBLOCK);
}

/* raw: 1 to leave the host side without a link (the test writes it). */
static int
rig_up(int host_max, int raw)
{
	int sp[2];

	memset(&R, 0, sizeof(R));
	R.base = event_base_new();
	assert_non_null(R.base);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	R.h = vmux_new(bev_of(sp[1]), host_max, open_cb, h_end, NULL);
	assert_non_null(R.h);
	if (raw) {
		nb(sp[0]);
		return sp[0];
	}
	R.g = vmux_new(bev_of(sp[0]), 4, NULL, g_end, NULL);
	assert_non_null(R.g);
	return -1;
}

static void
rig_down(void)
{
	int i;

	vmux_free(R.g);
	vmux_free(R.h);
	for (i = 0; i < R.nproxy; i++)
		close(R.proxy[i]);
	event_base_free(R.base);
}

/* A client connection added on the guest side; returns the test's end. */
static int
client(void)
{
	int sp[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	nb(sp[1]);
	assert_int_equal(vmux_add(R.g, bev_of(sp[0])), 0);
	return sp[1];
}

static void
test_a_connection_carries_a_megabyte_and_both_half_closes(void **state)
{
	static unsigned char big[1 << 20], got[1 << 20];
	size_t sent = 0, have = 0;
	char buf[64];
	ssize_t r;
	int c, p, i, eof = 0;

	(void)state;
	for (i = 0; i < (int)sizeof(big); i++)
		big[i] = (unsigned char)(i * 7 + i / 251);
	rig_up(4, 0);
	c = client();
	assert_int_equal(write(c, "GET / HTTP/1.0\r\n\r\n", 18), 18);
	shutdown(c, SHUT_WR);                 /* busybox nc's way */
	spin(20);
	assert_int_equal(R.nproxy, 1);
	p = R.proxy[0];
	r = read(p, buf, sizeof(buf));
	assert_int_equal(r, 18);
	assert_int_equal(read(p, buf, sizeof(buf)), 0);   /* the half-close arrived */
	/* 1 MiB back, 16 windows: only flows if credit comes back. */
	for (i = 0; i < 100000 && !eof; i++) {
		if (sent < sizeof(big) && (r = write(p, big + sent, sizeof(big) - sent)) > 0)
			sent += (size_t)r;
		if (sent == sizeof(big) && sent != (size_t)-1) {
			shutdown(p, SHUT_WR);
			sent = (size_t)-1;
		}
		spin(1);
		while ((r = read(c, got + have, sizeof(got) - have)) > 0)
			have += (size_t)r;
		if (r == 0 && have == sizeof(got))
			eof = 1;
	}
	assert_int_equal(have, sizeof(big));
	assert_memory_equal(got, big, sizeof(big));
	assert_true(eof);
	spin(10);
	assert_int_equal(vmux_count(R.g), 0);   /* both directions ended: gone */
	assert_int_equal(vmux_count(R.h), 0);
	close(c);
	rig_down();
}

static void
test_opens_past_the_cap_are_closed(void **state)
{
	char b[8];
	int c1, c2, i;
	ssize_t r = -1;

	(void)state;
	rig_up(1, 0);
	c1 = client();
	c2 = client();
	for (i = 0; i < 50 && r != 0; i++) {
		spin(1);
		r = read(c2, b, sizeof(b));
	}
	assert_int_equal(r, 0);                 /* the second: closed */
	assert_int_equal(R.nproxy, 1);
	assert_int_equal(vmux_count(R.h), 1);
	assert_int_equal(write(c1, "x", 1), 1);
	spin(10);
	assert_int_equal(read(R.proxy[0], b, sizeof(b)), 1);
	close(c1);
	close(c2);
	rig_down();
}

static void
test_bytes_past_the_window_abort_only_that_connection(void **state)
{
	static unsigned char chunk[VMUX_HDR + VMUX_DATA_MAX];
	unsigned char h[VMUX_HDR], in[256];
	int raw, i, n, closed = 0;
	ssize_t r;

	(void)state;
	raw = rig_up(4, 1);
	vmux_header(h, VMUX_OPEN, 5, 0);
	assert_int_equal(write(raw, h, VMUX_HDR), VMUX_HDR);
	vmux_header(chunk, VMUX_DATA, 5, VMUX_DATA_MAX);
	/* Nothing reads the proxy's end and the credits are ignored: once its
	 * socket is full, the window runs out and one more chunk is too many. */
	for (n = 0; n < 400 && !closed; n++) {
		if (write(raw, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk))
			fail_msg("the link socket is full: %s", strerror(errno));
		spin(3);
		/* CREDITs (12 bytes) and at last the CLOSE (8) come back. */
		while ((r = read(raw, in, sizeof(in))) > 0)
			for (i = 0; i + VMUX_HDR <= r; i++)
				if (in[i] == VMUX_CLOSE && in[i + 7] == 5 && in[i + 3] == 0)
					closed = 1;
	}
	assert_true(closed);
	assert_int_equal(vmux_count(R.h), 0);
	assert_non_null(R.h);                   /* the link itself lives on */
	assert_null(R.h_end);
	close(raw);
	rig_down();
}

/*
 * A guest that never reads its port and keeps sending frames the broker
 * must answer (OPENs past the cap: a CLOSE each) must not grow the broker's
 * queue without bound: the broker stops reading its frames (the guest's
 * writes then block) until it reads what waits, and then carries on.
 */
static void
test_a_guest_that_never_reads_is_not_read_either(void **state)
{
	static unsigned char frames[64 * 1024];
	unsigned char in[4096], h[VMUX_HDR];
	size_t took = 0, i, got = 0;
	int raw, k;
	ssize_t r;

	(void)state;
	raw = rig_up(1, 1);
	vmux_header(h, VMUX_OPEN, 1, 0);
	assert_int_equal(write(raw, h, VMUX_HDR), VMUX_HDR);
	spin(3);
	assert_int_equal(vmux_count(R.h), 1);     /* at the cap from now on */
	for (k = 0; k < 4000 && took < (16u << 20); k++) {
		/* The stream of OPENs 100, 101, ... from byte took on (a write
		 * may take part of a frame). */
		for (i = 0; i < sizeof(frames); i++) {
			vmux_header(h, VMUX_OPEN, (uint32_t)(100 + (took + i) / VMUX_HDR), 0);
			frames[i] = h[(took + i) % VMUX_HDR];
		}
		if ((r = write(raw, frames, sizeof(frames))) > 0)
			took += (size_t)r;
		spin(2);
	}
	/* A socketpair's buffers hold a few hundred KiB; 16 MiB of OPENs taken
	 * means the broker queued 16 MiB of CLOSEs for a guest that reads none. */
	if (took >= (4u << 20))
		fail_msg("the broker took %zu bytes of frames from a guest that reads nothing", took);
	assert_non_null(R.h);
	/* The guest reads: every OPEN past the cap gets its CLOSE, the link lives. */
	for (k = 0; k < 20000 && got < took - took % VMUX_HDR; k++) {
		spin(1);
		while ((r = read(raw, in, sizeof(in))) > 0)
			got += (size_t)r;
	}
	assert_int_equal(got, took - took % VMUX_HDR);
	assert_non_null(R.h);
	assert_null(R.h_end);
	assert_int_equal(vmux_count(R.h), 1);
	close(raw);
	rig_down();
}

static int opens;

/* Counts the dials; the proxy's end is closed at once (the guest's CLOSE
 * frees the connection anyway). */
static struct bufferevent *
count_open(void *arg)
{
	int sp[2];

	(void)arg;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0)
		return NULL;
	close(sp[1]);
	opens++;
	return bev_of(sp[0]);
}

static void
test_an_open_close_loop_dials_at_the_open_rate(void **state)
{
	unsigned char frames[2 * VMUX_HDR * 150];
	struct timespec t0, t1;
	int raw, i, sp[2];
	long ms;

	(void)state;
	memset(&R, 0, sizeof(R));
	opens = 0;
	R.base = event_base_new();
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	R.h = vmux_new(bev_of(sp[1]), 4, count_open, h_end, NULL);
	raw = sp[0];
	nb(raw);
	/* 150 OPEN/CLOSE pairs at once, each under the cap: each would dial */
	for (i = 0; i < 150; i++) {
		vmux_header(frames + 2 * VMUX_HDR * i, VMUX_OPEN, (uint32_t)(i + 1), 0);
		vmux_header(frames + 2 * VMUX_HDR * i + VMUX_HDR, VMUX_CLOSE, (uint32_t)(i + 1), 0);
	}
	assert_int_equal(write(raw, frames, sizeof(frames)), (ssize_t)sizeof(frames));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	spin(50);
	/* the burst, and no more until tokens come */
	assert_in_range(opens, VMUX_OPEN_BURST, VMUX_OPEN_BURST + 5);
	do {
		event_base_loop(R.base, EVLOOP_ONCE);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	} while (opens < 150 && ms < 5000);
	/* the other 50 at 100 a second: half a second, not at once */
	assert_int_equal(opens, 150);
	assert_true(ms >= 400);
	assert_non_null(R.h);      /* throttled, not ended */
	assert_int_equal(vmux_count(R.h), 0);
	close(raw);
	rig_down();
}

static void
test_garbage_ends_the_link_with_the_reason(void **state)
{
	int raw;

	(void)state;
	raw = rig_up(4, 1);
	assert_int_equal(write(raw, "GET / HTTP/1.1\r\n", 16), 16);
	spin(10);
	assert_null(R.h);
	assert_string_equal(R.h_end, "unknown frame type");
	close(raw);
	rig_down();
}

static void
test_the_guest_side_refuses_an_open(void **state)
{
	unsigned char h[VMUX_HDR];
	int sp[2];

	(void)state;
	memset(&R, 0, sizeof(R));
	R.base = event_base_new();
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	R.g = vmux_new(bev_of(sp[0]), 4, NULL, g_end, NULL);
	vmux_header(h, VMUX_OPEN, 1, 0);
	assert_int_equal(write(sp[1], h, VMUX_HDR), VMUX_HDR);
	spin(10);
	assert_null(R.g);
	assert_string_equal(R.g_end, "OPEN from the broker side");
	close(sp[1]);
	rig_down();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frames_round_trip_and_wait_for_their_end),
		cmocka_unit_test(test_malformed_headers_are_refused_before_their_payload),
		cmocka_unit_test(test_a_connection_carries_a_megabyte_and_both_half_closes),
		cmocka_unit_test(test_opens_past_the_cap_are_closed),
		cmocka_unit_test(test_bytes_past_the_window_abort_only_that_connection),
		cmocka_unit_test(test_a_guest_that_never_reads_is_not_read_either),
		cmocka_unit_test(test_an_open_close_loop_dials_at_the_open_rate),
		cmocka_unit_test(test_garbage_ends_the_link_with_the_reason),
		cmocka_unit_test(test_the_guest_side_refuses_an_open),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
