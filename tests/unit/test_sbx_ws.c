/* test_sbx_ws.c - WebSocket connections over a socket pair: both roles, fragments joined, the message cap (1009 with a sentence), UTF-8 (1007), the close handshake, pings and a silent peer, bounded output; the handshake's checks. */
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

/* One side as the tests see it. */
struct side {
	struct sbx_ws *ws;
	char got[4096];
	size_t gotlen;
	int nmsg, last_text;
	int closed, code;
	char reason[128];
	int paused, unpaused;
	int free_on_msg;          /* sbx_ws_free from inside message() */
	int released;             /* ops->release ran */
	int pause_on_msg;         /* sbx_ws_read_pause(ws, 1) inside message() */
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
	if (n > sizeof(s->got) - s->gotlen)
		n = sizeof(s->got) - s->gotlen;
	memcpy(s->got + s->gotlen, p, n);
	s->gotlen += n;
	if (s->pause_on_msg)
		sbx_ws_read_pause(s->ws, 1);
	if (s->free_on_msg) {
		sbx_ws_free(s->ws);
		s->ws = NULL;
	}
}

static void
on_pause(void *arg, int on)
{
	struct side *s = arg;

	if (on)
		s->paused++;
	else
		s->unpaused++;
}

static void
on_closed(void *arg, int code, const char *reason)
{
	struct side *s = arg;

	s->closed++;
	s->code = code;
	snprintf(s->reason, sizeof(s->reason), "%s", reason);
}

static void
on_release(void *arg, struct bufferevent *bev)
{
	struct side *s = arg;

	assert_non_null(bev);
	s->released++;
}

static const struct sbx_ws_ops ops = { on_message, on_pause, on_closed,
    on_release };

static struct sbx_ws *
open_side(struct fx *f, int fd, enum sbx_ws_role role,
    const struct sbx_ws_limits *lim, struct side *s)
{
	struct bufferevent *bev;
	struct sbx_ws *ws;

	evutil_make_socket_nonblocking(fd);
	bev = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(bev);
	ws = sbx_ws_new(bev, role, lim, &ops, s, NULL);
	assert_non_null(ws);
	s->ws = ws;
	return ws;
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->base = event_base_new();
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f->fd), 0);
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
	free(f);
	return 0;
}

/* Runs the loop until *flag is non-zero or ms pass. */
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

/* A masked client frame (mask key 0: masked, bytes unchanged). */
static size_t
frame(unsigned char *out, int fin, int opcode, const void *p, size_t n)
{
	size_t h = 0;

	out[h++] = (unsigned char)((fin ? 0x80 : 0) | opcode);
	if (n < 126)
		out[h++] = (unsigned char)(0x80 | n);
	else {
		out[h++] = 0x80 | 126;
		out[h++] = (unsigned char)(n >> 8);
		out[h++] = (unsigned char)n;
	}
	memset(out + h, 0, 4);
	h += 4;
	if (n > 0)
		memcpy(out + h, p, n);
	return h + n;
}

static void
raw_write(int fd, const void *p, size_t n)
{
	assert_int_equal(write(fd, p, n), (ssize_t)n);
}

/* Reads what the server wrote to the raw peer within ms. */
static size_t
raw_read(struct fx *f, int fd, unsigned char *buf, size_t cap, int ms)
{
	size_t got = 0;
	ssize_t r;
	int i;

	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (i = 0; i < ms / 10 && got < cap; i++) {
		run_until(f, NULL, 10);
		while ((r = read(fd, buf + got, cap - got)) > 0)
			got += (size_t)r;
		if (r == 0)
			break;
	}
	return got;
}

static void
test_messages_both_ways_and_a_clean_close(void **state)
{
	struct fx *f = *state;
	unsigned char one = 1;

	open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
	open_side(f, f->fd[1], SBX_WS_CLIENT, NULL, &f->cli);
	assert_int_equal(sbx_ws_send(f->cli.ws, 1, "{\"type\":\"eof\"}", 14,
	    NULL, 0), 0);
	run_until(f, &f->srv.nmsg, 1000);
	assert_int_equal(f->srv.nmsg, 1);
	assert_int_equal(f->srv.last_text, 1);
	assert_memory_equal(f->srv.got, "{\"type\":\"eof\"}", 14);
	/* two parts: a stream byte and the bytes, one binary message */
	assert_int_equal(sbx_ws_send(f->srv.ws, 0, &one, 1, "hi\r\n", 4), 0);
	run_until(f, &f->cli.nmsg, 1000);
	assert_int_equal(f->cli.last_text, 0);
	assert_int_equal(f->cli.gotlen, 5);
	assert_memory_equal(f->cli.got, "\001hi\r\n", 5);
	sbx_ws_close(f->srv.ws, SBX_WS_NORMAL, "exit");
	assert_int_equal(sbx_ws_send(f->srv.ws, 0, "x", 1, NULL, 0), -1);
	run_until(f, &f->cli.closed, 1000);
	run_until(f, &f->srv.closed, 1000);
	assert_int_equal(f->cli.closed, 1);
	assert_int_equal(f->cli.code, SBX_WS_NORMAL);
	assert_string_equal(f->cli.reason, "exit");
	assert_int_equal(f->srv.closed, 1);
	assert_int_equal(f->srv.code, SBX_WS_NORMAL);
	assert_int_equal(f->srv.released, 1);
	assert_int_equal(f->cli.released, 1);
}

static void
test_fragments_are_joined_and_pings_answered(void **state)
{
	struct fx *f = *state;
	unsigned char buf[256], in[256];
	size_t n = 0, got;

	open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
	n += frame(buf + n, 0, 0x1, "{\"type\":", 8);
	n += frame(buf + n, 1, 0x9, "pi", 2);          /* ping between */
	n += frame(buf + n, 0, 0x0, "\"eo", 3);
	n += frame(buf + n, 1, 0x0, "f\"}", 3);
	/* split anywhere: one byte at a time */
	for (size_t i = 0; i < n; i++) {
		raw_write(f->fd[1], buf + i, 1);
		run_until(f, NULL, 10);
	}
	run_until(f, &f->srv.nmsg, 500);
	assert_int_equal(f->srv.nmsg, 1);
	assert_int_equal(f->srv.gotlen, 14);
	assert_memory_equal(f->srv.got, "{\"type\":\"eof\"}", 14);
	got = raw_read(f, f->fd[1], in, 4, 300);
	assert_int_equal(got, 4);                       /* pong "pi", unmasked */
	assert_int_equal(in[0], 0x8a);
	assert_int_equal(in[1], 2);
	assert_memory_equal(in + 2, "pi", 2);
}

static void
test_a_message_over_the_cap_closes_1009(void **state)
{
	struct fx *f = *state;
	struct sbx_ws_limits lim = { 1000, 0, 0 };
	static unsigned char buf[2048], in[256];
	char big[600];
	size_t n = 0, got;

	memset(big, 'a', sizeof(big));
	open_side(f, f->fd[0], SBX_WS_SERVER, &lim, &f->srv);
	/* 600 + 600 in two fragments: each under the cap, the message over */
	n += frame(buf + n, 0, 0x2, big, sizeof(big));
	n += frame(buf + n, 1, 0x0, big, sizeof(big));
	raw_write(f->fd[1], buf, n);
	run_until(f, &f->srv.closed, 1000);
	assert_int_equal(f->srv.closed, 1);
	assert_int_equal(f->srv.code, SBX_WS_TOO_BIG);
	assert_non_null(strstr(f->srv.reason, "ws_message_max (1000 bytes)"));
	assert_int_equal(f->srv.nmsg, 0);
	got = raw_read(f, f->fd[1], in, sizeof(in), 300);
	assert_true(got > 4);
	assert_int_equal(in[0], 0x88);                  /* close */
	assert_int_equal((in[2] << 8) | in[3], 1009);
	assert_non_null(memmem(in, got, "ws_message_max", 14));
}

static void
test_one_frame_over_the_cap_is_refused_before_its_payload(void **state)
{
	struct fx *f = *state;
	struct sbx_ws_limits lim = { 1000, 0, 0 };
	/* a header announcing 2^32 bytes and the first of them */
	unsigned char hdr[15] = { 0x82, 0x80 | 127, 0, 0, 0, 1, 0, 0, 0, 0,
	    0, 0, 0, 0, 'x' };

	open_side(f, f->fd[0], SBX_WS_SERVER, &lim, &f->srv);
	raw_write(f->fd[1], hdr, sizeof(hdr));
	run_until(f, &f->srv.closed, 1000);
	assert_int_equal(f->srv.code, SBX_WS_TOO_BIG);
}

static void
test_text_that_is_not_utf8_closes_1007(void **state)
{
	struct fx *f = *state;
	unsigned char buf[64];
	size_t n;

	open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
	n = frame(buf, 1, 0x1, "a\xc3\x28", 3);
	raw_write(f->fd[1], buf, n);
	run_until(f, &f->srv.closed, 1000);
	assert_int_equal(f->srv.nmsg, 0);
	assert_int_equal(f->srv.closed, 1);
	assert_int_equal(f->srv.code, SBX_WS_BAD_DATA);
}

static void
test_an_unmasked_client_frame_is_a_protocol_error(void **state)
{
	struct fx *f = *state;
	unsigned char buf[16] = { 0x82, 0x01, 'x' };
	unsigned char in[16];
	size_t got;

	open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
	raw_write(f->fd[1], buf, 3);
	got = raw_read(f, f->fd[1], in, 4, 300);
	assert_int_equal(got, 4);
	assert_int_equal(in[0], 0x88);
	assert_int_equal((in[2] << 8) | in[3], 1002);
}

/* Frames libwslay's own parser refuses (RFC 6455 §5.5: a control frame of
 * more than 125 bytes or fragmented; §5.2: a 64-bit length with its top bit
 * set) get close 1002 too, as the frames it judges after parsing do; they
 * used to end the connection without a close frame (seen by a client as
 * 1006, "abnormal"). */
static void
test_frames_wslay_refuses_while_parsing_close_1002(void **state)
{
	static const unsigned char bad[][14] = {
		{ 0x89, 0x80 | 126, 0, 126, 0, 0, 0, 0 },         /* ping of 126 */
		{ 0x09, 0x81, 0, 0, 0, 0, 'a' },                   /* fin 0 ping */
		{ 0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1 },   /* 2^63 + 1 */
	};
	static const size_t badlen[] = { 8, 7, 14 };
	struct fx *f = *state;
	unsigned char in[64];
	size_t i, got;

	for (i = 0; i < sizeof(badlen) / sizeof(badlen[0]); i++) {
		if (i > 0) {
			sbx_ws_free(f->srv.ws);
			f->srv.ws = NULL;
			close(f->fd[1]);
			assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0,
			    f->fd), 0);
			memset(&f->srv, 0, sizeof(f->srv));
		}
		open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
		raw_write(f->fd[1], bad[i], badlen[i]);
		got = raw_read(f, f->fd[1], in, sizeof(in), 500);
		assert_true(got >= 4);
		assert_int_equal(in[0], 0x88);
		assert_int_equal((in[2] << 8) | in[3], SBX_WS_PROTOCOL_ERROR);
		run_until(f, &f->srv.closed, 1000);
		assert_int_equal(f->srv.closed, 1);
		assert_int_equal(f->srv.code, SBX_WS_PROTOCOL_ERROR);
		assert_int_equal(f->srv.nmsg, 0);
	}
	/* A client (sbxctl) answers a server's bad frame the same way, its
	 * close masked (§5.3). */
	sbx_ws_free(f->srv.ws);
	f->srv.ws = NULL;
	close(f->fd[1]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f->fd), 0);
	open_side(f, f->fd[0], SBX_WS_CLIENT, NULL, &f->cli);
	raw_write(f->fd[1], "\x89\x7e\x00\x7e", 4);
	got = raw_read(f, f->fd[1], in, sizeof(in), 500);
	assert_true(got >= 8);
	assert_int_equal(in[0], 0x88);
	assert_int_equal(in[1] & 0x80, 0x80);
	assert_int_equal(((in[6] ^ in[2]) << 8) | (in[7] ^ in[3]),
	    SBX_WS_PROTOCOL_ERROR);
	run_until(f, &f->cli.closed, 1000);
	assert_int_equal(f->cli.code, SBX_WS_PROTOCOL_ERROR);
}

static void
test_pings_keep_a_live_peer_and_a_silent_one_is_closed(void **state)
{
	struct fx *f = *state;
	/* 250 ms pings: two silent intervals are 500 ms, more than a loaded
	 * machine (load 30 on 2 cores) stalls this loop; 100 ms flaked there. */
	struct sbx_ws_limits lim = { 0, 250, 0 };
	unsigned char in[64];
	size_t got;
	int fd2[2];

	/* a live client answers the server's pings by itself */
	open_side(f, f->fd[0], SBX_WS_SERVER, &lim, &f->srv);
	open_side(f, f->fd[1], SBX_WS_CLIENT, NULL, &f->cli);
	run_until(f, &f->srv.closed, 1500);
	assert_int_equal(f->srv.closed, 0);
	assert_int_equal(f->cli.closed, 0);
	sbx_ws_free(f->srv.ws);
	sbx_ws_free(f->cli.ws);
	f->srv.ws = f->cli.ws = NULL;
	memset(&f->srv, 0, sizeof(f->srv));

	/* a silent peer sees a ping, then the close after 2 intervals */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fd2), 0);
	open_side(f, fd2[0], SBX_WS_SERVER, &lim, &f->srv);
	got = raw_read(f, fd2[1], in, 2, 1000);
	assert_int_equal(got, 2);
	assert_int_equal(in[0], 0x89);                  /* ping */
	run_until(f, &f->srv.closed, 3000);
	assert_int_equal(f->srv.closed, 1);
	assert_int_equal(f->srv.code, SBX_WS_GOING_AWAY);
	close(fd2[1]);
}

static void
test_output_over_high_water_pauses_the_producer(void **state)
{
	struct fx *f = *state;
	struct sbx_ws_limits lim = { 0, 0, 64 * 1024 };
	static char chunk[16 * 1024];
	int i;

	open_side(f, f->fd[0], SBX_WS_SERVER, &lim, &f->srv);
	open_side(f, f->fd[1], SBX_WS_CLIENT, NULL, &f->cli);
	sbx_ws_read_pause(f->cli.ws, 1);
	memset(chunk, 'x', sizeof(chunk));
	for (i = 0; i < 200 && f->srv.paused == 0; i++) {
		assert_int_equal(sbx_ws_send(f->srv.ws, 0, chunk, sizeof(chunk),
		    NULL, 0), 0);
		run_until(f, NULL, 10);
	}
	assert_int_equal(f->srv.paused, 1);
	assert_true(sbx_ws_output_len(f->srv.ws) <= 64 * 1024 + 16 * 1024 + 16);
	sbx_ws_read_pause(f->cli.ws, 0);
	run_until(f, &f->srv.unpaused, 2000);
	assert_int_equal(f->srv.unpaused, 1);
}

static void
test_free_inside_a_callback_and_eof_is_1006(void **state)
{
	struct fx *f = *state;
	unsigned char buf[64];
	size_t n = 0;
	int fd2[2];

	/* freed inside message(): the second message and close never come */
	f->srv.free_on_msg = 1;
	open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
	n += frame(buf + n, 1, 0x2, "a", 1);
	n += frame(buf + n, 1, 0x2, "b", 1);
	raw_write(f->fd[1], buf, n);
	close(f->fd[1]);
	run_until(f, NULL, 200);
	assert_int_equal(f->srv.nmsg, 1);
	assert_int_equal(f->srv.closed, 0);
	assert_int_equal(f->srv.released, 1);
	assert_null(f->srv.ws);

	memset(&f->srv, 0, sizeof(f->srv));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fd2), 0);
	open_side(f, fd2[0], SBX_WS_SERVER, NULL, &f->srv);
	close(fd2[1]);
	run_until(f, &f->srv.closed, 1000);
	assert_int_equal(f->srv.closed, 1);
	assert_int_equal(f->srv.code, SBX_WS_ABNORMAL);
}

static void
test_a_pause_inside_message_holds_what_was_read_ahead(void **state)
{
	struct fx *f = *state;
	unsigned char buf[256];
	size_t n = 0;

	f->srv.pause_on_msg = 1;
	open_side(f, f->fd[0], SBX_WS_SERVER, NULL, &f->srv);
	n += frame(buf + n, 1, 0x2, "one", 3);
	n += frame(buf + n, 1, 0x2, "two", 3);
	n += frame(buf + n, 1, 0x1, "{\"type\":\"eof\"}", 14);
	raw_write(f->fd[1], buf, n);   /* one read brings all three */
	run_until(f, NULL, 200);
	assert_int_equal(f->srv.nmsg, 1);
	sbx_ws_read_pause(f->srv.ws, 0);
	run_until(f, NULL, 100);
	assert_int_equal(f->srv.nmsg, 2);
	f->srv.pause_on_msg = 0;
	sbx_ws_read_pause(f->srv.ws, 0);
	run_until(f, NULL, 100);
	assert_int_equal(f->srv.nmsg, 3);
	assert_int_equal(f->srv.last_text, 1);
	assert_int_equal(f->srv.gotlen, 20);
	assert_memory_equal(f->srv.got, "onetwo{\"type\":\"eof\"}", 20);
}

static void
test_a_close_behind_held_messages_waits_for_them(void **state)
{
	struct fx *f = *state;
	/* the server's side, raw and unmasked: two messages and a close in
	 * one write, so libwslay parses all three after the pause */
	static const unsigned char srv[] = { 0x82, 3, 'o', 'n', 'e', 0x82, 3,
	    't', 'w', 'o', 0x88, 2, 0x03, 0xe8 };

	f->cli.pause_on_msg = 1;
	open_side(f, f->fd[1], SBX_WS_CLIENT, NULL, &f->cli);
	raw_write(f->fd[0], srv, sizeof(srv));
	run_until(f, NULL, 200);
	assert_int_equal(f->cli.nmsg, 1);
	/* "two" is held: the close must not end the connection without it */
	assert_int_equal(f->cli.closed, 0);
	f->cli.pause_on_msg = 0;
	sbx_ws_read_pause(f->cli.ws, 0);
	run_until(f, &f->cli.closed, 1000);
	assert_int_equal(f->cli.nmsg, 2);
	assert_int_equal(f->cli.gotlen, 6);
	assert_memory_equal(f->cli.got, "onetwo", 6);
	assert_int_equal(f->cli.closed, 1);
	assert_int_equal(f->cli.code, SBX_WS_NORMAL);
}

static void
test_handshake_checks(void **state)
{
	struct sbx_ws_head h = { 1, 1, "websocket", "keep-alive, Upgrade", "13",
	    "dGhlIHNhbXBsZSBub25jZQ==", "other, sbx.v1", 1 };
	char acc[SBX_WS_ACCEPT_LEN + 1], key[SBX_WS_KEY_LEN + 1];
	struct sbx_err err;

	(void)state;
	/* RFC 6455 §1.3's example */
	assert_int_equal(sbx_ws_handshake_check(&h, "sbx.v1", acc, &err), 0);
	assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	h.protocol = "sbx.v2, SBX.V1";
	assert_int_equal(sbx_ws_handshake_check(&h, "sbx.v1", acc, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	assert_non_null(strstr(err.message, "sbx.v1"));
	assert_int_equal(sbx_ws_handshake_check(&h, NULL, acc, &err), 0);
	h.keys = 2;     /* §11.3.1: the key once */
	assert_int_equal(sbx_ws_handshake_check(&h, NULL, acc, &err), -1);
	assert_non_null(strstr(err.message, "Sec-WebSocket-Key once"));
	h.keys = 1;
	h.version = "8";
	assert_int_equal(sbx_ws_handshake_check(&h, NULL, acc, &err), -1);
	assert_non_null(strstr(err.message, "Sec-WebSocket-Version: 13"));
	h.version = "13";
	h.key = "dGhlIHNhbXBsZSBub25jZQ";           /* 22 chars */
	assert_int_equal(sbx_ws_handshake_check(&h, NULL, acc, &err), -1);
	h.key = "dGhlIHNhbXBsZSBub25jZXh4eA==";     /* 18 bytes */
	assert_int_equal(sbx_ws_handshake_check(&h, NULL, acc, &err), -1);
	h.key = "dGhlIHNhbXBsZSBub25jZQ==";
	h.connection = "close";
	assert_int_equal(sbx_ws_handshake_check(&h, NULL, acc, &err), -1);
	h.connection = "upgrade";
	h.upgrade = "h2c";
	assert_int_equal(sbx_ws_handshake_check(&h, NULL, acc, &err), -1);
	h.upgrade = "WebSocket";
	h.is_get = 0;
	assert_int_equal(sbx_ws_handshake_check(&h, NULL, acc, &err), -1);

	sbx_ws_client_key(key);
	assert_int_equal(strlen(key), SBX_WS_KEY_LEN);
	assert_int_equal(sbx_ws_accept_value(key, acc), 0);
	assert_int_equal(sbx_ws_client_check(101, "websocket", "Upgrade", acc,
	    "sbx.v1", key, "sbx.v1", &err), 0);
	assert_int_equal(sbx_ws_client_check(101, "websocket", "Upgrade",
	    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "sbx.v1", key, "sbx.v1", &err), -1);
	assert_string_equal(err.code, SBX_WS_E_HANDSHAKE);
	assert_int_equal(sbx_ws_client_check(404, NULL, NULL, NULL, NULL, key,
	    NULL, &err), -1);
	assert_int_equal(sbx_ws_client_check(101, "websocket", "Upgrade", acc,
	    NULL, key, "sbx.v1", &err), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_messages_both_ways_and_a_clean_close, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_fragments_are_joined_and_pings_answered, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_message_over_the_cap_closes_1009, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_one_frame_over_the_cap_is_refused_before_its_payload,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_text_that_is_not_utf8_closes_1007, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_an_unmasked_client_frame_is_a_protocol_error, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_frames_wslay_refuses_while_parsing_close_1002, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_pings_keep_a_live_peer_and_a_silent_one_is_closed,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_output_over_high_water_pauses_the_producer, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_free_inside_a_callback_and_eof_is_1006, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_pause_inside_message_holds_what_was_read_ahead, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_close_behind_held_messages_waits_for_them, setup,
		    teardown),
		cmocka_unit_test(test_handshake_checks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
