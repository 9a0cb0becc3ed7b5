/* test_sbx_ws_fast.c - the WebSocket fast path for binary payloads (adr/0063): the word-wise mask against the byte-wise rule of RFC 6455 §5.3 at every offset, client frames as RFC 6455 §5.2 lays them out, and through sbx_ws over a socket pair: a client's 300 KiB message arrives byte for byte, fragments with a real mask key and a ping between them join, one byte at a time, a message over the cap still closes 1009, and a large frame arriving slowly keeps its peer alive. */
#include <sys/socket.h>

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "sbx_proto.h"
#include "sbx_ws.h"
#include "sbx_ws_fast.h"

#define BIG (300 * 1024)

struct side {
	struct sbx_ws *ws;
	unsigned char *got;
	size_t gotlen, cap;
	int nmsg, last_text, closed, code;
	char reason[128];
};

struct fx {
	struct event_base *base;
	int fd[2];
	struct side srv, cli;
};

static void
on_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct side *s = arg;

	s->nmsg++;
	s->last_text = text;
	if (n > s->cap - s->gotlen)
		n = s->cap - s->gotlen;
	memcpy(s->got + s->gotlen, p, n);
	s->gotlen += n;
}

static void
on_closed(void *arg, int code, const char *reason)
{
	struct side *s = arg;

	s->closed++;
	s->code = code;
	snprintf(s->reason, sizeof(s->reason), "%s", reason);
}

static const struct sbx_ws_ops ops = { on_message, NULL, on_closed, NULL };

static void
open_side(struct fx *f, int fd, enum sbx_ws_role role,
    const struct sbx_ws_limits *lim, struct side *s)
{
	struct bufferevent *bev;

	evutil_make_socket_nonblocking(fd);
	bev = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(bev);
	s->ws = sbx_ws_new(bev, role, lim, &ops, s, NULL);
	assert_non_null(s->ws);
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->base = event_base_new();
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f->fd), 0);
	f->srv.cap = f->cli.cap = 2 * BIG;
	f->srv.got = malloc(f->srv.cap);
	f->cli.got = malloc(f->cli.cap);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	sbx_ws_free(f->srv.ws);
	sbx_ws_free(f->cli.ws);
	event_base_free(f->base);
	free(f->srv.got);
	free(f->cli.got);
	free(f);
	return 0;
}

static void
run_until(struct fx *f, const int *flag, int ms)
{
	struct timeval tv = { 0, 10000 };
	int i;

	for (i = 0; i < ms / 10 && (flag == NULL || *flag == 0); i++) {
		event_base_loopexit(f->base, &tv);
		event_base_dispatch(f->base);
	}
}

/* A client frame masked byte by byte, the rule itself (§5.3). */
static size_t
frame_k(unsigned char *out, int fin, int opcode, const unsigned char *p,
    size_t n, const unsigned char key[4])
{
	size_t h = 0, i;

	out[h++] = (unsigned char)((fin ? 0x80 : 0) | opcode);
	if (n < 126)
		out[h++] = (unsigned char)(0x80 | n);
	else if (n < 65536) {
		out[h++] = 0x80 | 126;
		out[h++] = (unsigned char)(n >> 8);
		out[h++] = (unsigned char)n;
	} else {
		out[h++] = 0x80 | 127;
		for (i = 0; i < 8; i++)
			out[h++] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
	}
	memcpy(out + h, key, 4);
	h += 4;
	for (i = 0; i < n; i++)
		out[h + i] = p[i] ^ key[i % 4];
	return h + n;
}

static void
raw_write(int fd, const void *p, size_t n)
{
	const unsigned char *b = p;
	ssize_t w;

	while (n > 0) {
		w = write(fd, b, n);
		assert_true(w > 0);
		b += w;
		n -= (size_t)w;
	}
}

static void
fill(unsigned char *p, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 131 + seed) ^ (i >> 7));
}

static void
test_mask_matches_the_rule_at_every_offset(void **state)
{
	static const unsigned char key[4] = { 0x12, 0xa5, 0x3c, 0xff };
	unsigned char src[67], want[67], got[67];
	size_t n, i;
	uint64_t off;

	(void)state;
	fill(src, sizeof(src), 7);
	for (off = 0; off < 9; off++)
		for (n = 0; n <= sizeof(src); n++) {
			for (i = 0; i < n; i++)
				want[i] = src[i] ^ key[(off + i) % 4];
			sbx_ws_fast_mask(got, src, n, key, off);
			assert_memory_equal(got, want, n);
			memcpy(got, src, n);            /* in place */
			sbx_ws_fast_mask(got, got, n, key, off);
			assert_memory_equal(got, want, n);
		}
}

static void
test_client_frames_are_laid_out_as_the_rfc_says(void **state)
{
	static const unsigned char key[4] = { 1, 2, 3, 4 };
	static unsigned char p[70000], want[70016], got[70016];
	size_t sizes[] = { 0, 1, 125, 126, 65535, 65536, 70000 };
	struct evbuffer *out;
	size_t i, n, a;

	(void)state;
	fill(p, sizeof(p), 3);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		out = evbuffer_new();
		a = sizes[i] / 3;
		assert_int_equal(sbx_ws_fast_client_frame(out, key, p, a, p + a,
		    sizes[i] - a), 0);
		n = frame_k(want, 1, 2, p, sizes[i], key);
		assert_int_equal(evbuffer_get_length(out), n);
		evbuffer_remove(out, got, n);
		assert_memory_equal(got, want, n);
		evbuffer_free(out);
	}
}

static void
test_a_clients_large_message_arrives_byte_for_byte(void **state)
{
	struct fx *f = *state;
	unsigned char *p = malloc(BIG);

	fill(p, BIG, 11);
	open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
	open_side(f, f->fd[1], SBX_WS_CLIENT, NULL, &f->cli);
	/* two parts, as sbxctl's stdin chunks; then a small one and text */
	assert_int_equal(sbx_ws_send(f->cli.ws, 0, p, 1000, p + 1000,
	    BIG - 1000), 0);
	assert_int_equal(sbx_ws_send(f->cli.ws, 0, p, 3, NULL, 0), 0);
	assert_int_equal(sbx_ws_send(f->cli.ws, 1, "{\"type\":\"eof\"}", 14,
	    NULL, 0), 0);
	for (int i = 0; i < 300 && f->srv.nmsg < 3; i++)
		run_until(f, NULL, 10);
	assert_int_equal(f->srv.nmsg, 3);
	assert_int_equal(f->srv.gotlen, BIG + 3 + 14);
	assert_memory_equal(f->srv.got, p, BIG);
	assert_memory_equal(f->srv.got + BIG, p, 3);
	assert_memory_equal(f->srv.got + BIG + 3, "{\"type\":\"eof\"}", 14);
	assert_int_equal(f->srv.closed, 0);
	free(p);
}

static void
test_masked_fragments_join_one_byte_at_a_time(void **state)
{
	struct fx *f = *state;
	static const unsigned char k1[4] = { 0x9e, 0x01, 0x77, 0x30 };
	static const unsigned char k2[4] = { 0x00, 0xff, 0x10, 0x42 };
	static unsigned char p[70300], buf[70400];
	unsigned char in[16];
	size_t n = 0, i, got = 0;
	ssize_t r;

	fill(p, sizeof(p), 5);
	open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
	n += frame_k(buf + n, 0, 0x2, p, 1, k1);
	n += frame_k(buf + n, 1, 0x9, (const unsigned char *)"pi", 2, k2);
	n += frame_k(buf + n, 0, 0x0, p + 1, 299, k2);
	n += frame_k(buf + n, 1, 0x0, p + 300, 70000, k1);
	/* the small frames a byte at a time, the large one in pieces */
	for (i = 0; i < n; i += i < 400 ? 1 : 4093) {
		raw_write(f->fd[1], buf + i, i < 400 ? 1 : (n - i < 4093 ?
		    n - i : 4093));
		run_until(f, NULL, 10);
	}
	run_until(f, &f->srv.nmsg, 1000);
	assert_int_equal(f->srv.nmsg, 1);
	assert_int_equal(f->srv.last_text, 0);
	assert_int_equal(f->srv.gotlen, sizeof(p));
	assert_memory_equal(f->srv.got, p, sizeof(p));
	fcntl(f->fd[1], F_SETFL, O_NONBLOCK);
	for (i = 0; i < 30 && got < 4; i++) {
		run_until(f, NULL, 10);
		while ((r = read(f->fd[1], in + got, 4 - got)) > 0)
			got += (size_t)r;
	}
	assert_int_equal(got, 4);                   /* the pong, "pi" */
	assert_int_equal(in[0], 0x8a);
	assert_memory_equal(in + 2, "pi", 2);
}

static void
test_taken_fragments_still_count_against_the_cap(void **state)
{
	struct fx *f = *state;
	struct sbx_ws_limits lim = { 1000, 0, 0 };
	static const unsigned char k[4] = { 5, 6, 7, 8 };
	unsigned char p[600], buf[1400];
	size_t n = 0;

	fill(p, sizeof(p), 9);
	open_side(f, f->fd[0], SBX_WS_SERVER, &lim, &f->srv);
	n += frame_k(buf + n, 0, 0x2, p, 600, k);   /* taken */
	n += frame_k(buf + n, 1, 0x0, p, 600, k);   /* 1200 > 1000 */
	raw_write(f->fd[1], buf, n);
	run_until(f, &f->srv.closed, 1000);
	assert_int_equal(f->srv.closed, 1);
	assert_int_equal(f->srv.code, SBX_WS_TOO_BIG);
	assert_non_null(strstr(f->srv.reason, "ws_message_max (1000 bytes)"));
	assert_int_equal(f->srv.nmsg, 0);
}

static void
test_a_slow_large_frame_is_a_live_peer(void **state)
{
	struct fx *f = *state;
	struct sbx_ws_limits lim = { 0, 100, 0 };   /* pings every 100 ms */
	static const unsigned char k[4] = { 0x31, 0x41, 0x59, 0x26 };
	static unsigned char p[64 * 1024], buf[64 * 1024 + 16];
	size_t n, i, step;

	fill(p, sizeof(p), 13);
	open_side(f, f->fd[0], SBX_WS_SERVER, &lim, &f->srv);
	n = frame_k(buf, 1, 0x2, p, sizeof(p), k);
	/* one frame over ~600 ms, longer than two ping intervals: its
	 * payload arriving keeps the peer alive (the client's pong cannot
	 * come inside a frame) */
	step = n / 12 + 1;
	for (i = 0; i < n; i += step) {
		raw_write(f->fd[1], buf + i, n - i < step ? n - i : step);
		run_until(f, NULL, 50);
		assert_int_equal(f->srv.closed, 0);
	}
	run_until(f, &f->srv.nmsg, 500);
	assert_int_equal(f->srv.nmsg, 1);
	assert_int_equal(f->srv.gotlen, sizeof(p));
	assert_memory_equal(f->srv.got, p, sizeof(p));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mask_matches_the_rule_at_every_offset),
		cmocka_unit_test(test_client_frames_are_laid_out_as_the_rfc_says),
		cmocka_unit_test_setup_teardown(
		    test_a_clients_large_message_arrives_byte_for_byte, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_masked_fragments_join_one_byte_at_a_time, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_taken_fragments_still_count_against_the_cap, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_slow_large_frame_is_a_live_peer, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
