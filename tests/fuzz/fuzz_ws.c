/*
 * fuzz_ws.c - libFuzzer target: the server's input path of a WebSocket
 * (common/sbx_ws.c over libwslay, adr/0052): the input's bytes are what a
 * client sends on a real socket pair, split into pieces of sizes the input
 * chooses; messages are echoed back, and a message beginning 'C' closes,
 * 'P' pauses reading for a turn. The rest of the input after a 0xff byte
 * (if any) is also read as a handshake head (Key, Protocol).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - every message delivered is at most message_max bytes, and a text one
 *    is valid UTF-8 (checked here independently of libwslay);
 *  - once the peer has gone, closed() runs exactly once within a bounded
 *    number of loop turns, with a code 1000..4999, and nothing after it;
 *  - the handshake check accepts only a 24-character key that is base64 of
 *    16 bytes, and then gives a 28-character accept value.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "fuzz.h"
#include "sbx_ws.h"

#define MSG_MAX 4096

static struct event_base *base;

struct st {
	struct sbx_ws *ws;
	int closed, code;
	int msgs;
	int pause_turns;
};

/* The UTF-8 of RFC 3629 §4, written out: no overlongs, no surrogates,
 * nothing above U+10FFFF. */
static int
utf8_ok(const unsigned char *p, size_t n)
{
	size_t i = 0, k, len;
	uint32_t c;

	while (i < n) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		if (p[i] >= 0xc2 && p[i] <= 0xdf)
			len = 2, c = p[i] & 0x1f;
		else if (p[i] >= 0xe0 && p[i] <= 0xef)
			len = 3, c = p[i] & 0x0f;
		else if (p[i] >= 0xf0 && p[i] <= 0xf4)
			len = 4, c = p[i] & 0x07;
		else
			return 0;
		if (i + len > n)
			return 0;
		for (k = 1; k < len; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
			c = (c << 6) | (p[i + k] & 0x3f);
		}
		if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
		    (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
			return 0;
		i += len;
	}
	return 1;
}

static void
on_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct st *s = arg;

	FUZZ_ASSERT(!s->closed);
	FUZZ_ASSERT(n <= MSG_MAX);
	if (text)
		FUZZ_ASSERT(utf8_ok(p, n));
	s->msgs++;
	if (n > 0 && p[0] == 'C')
		sbx_ws_close(s->ws, 1000, "bye \xc3\xa9");
	else if (n > 0 && p[0] == 'P') {
		sbx_ws_read_pause(s->ws, 1);
		s->pause_turns = 2;
	} else
		(void)sbx_ws_send(s->ws, text, "\x01", text ? 0 : 1, p, n);
}

static void
on_closed(void *arg, int code, const char *reason)
{
	struct st *s = arg;

	FUZZ_ASSERT(!s->closed);
	FUZZ_ASSERT(code >= 1000 && code <= 4999);
	FUZZ_ASSERT(strlen(reason) <= SBX_WS_REASON_MAX);
	s->closed++;
	s->code = code;
}

static const struct sbx_ws_ops ops = { on_message, NULL, on_closed, NULL };

static void
turn(struct st *s)
{
	event_base_loop(base, EVLOOP_NONBLOCK);
	if (s->pause_turns > 0 && --s->pause_turns == 0 && !s->closed)
		sbx_ws_read_pause(s->ws, 0);
}

static void
handshake(const unsigned char *p, size_t n)
{
	char key[64], proto[64], acc[SBX_WS_ACCEPT_LEN + 1];
	struct sbx_ws_head h = { 1, 1, "websocket", "Upgrade", "13", key,
	    proto, 1 };
	size_t kl = n < 32 ? n : 32, pl;
	int rc;

	memcpy(key, p, kl);
	key[kl] = '\0';
	pl = n - kl < 40 ? n - kl : 40;
	memcpy(proto, p + kl, pl);
	proto[pl] = '\0';
	if (strlen(key) != kl || strlen(proto) != pl)
		return;  /* a NUL inside: headers cannot carry one */
	rc = sbx_ws_handshake_check(&h, "sbx.v1", acc, NULL);
	if (rc == 0) {
		FUZZ_ASSERT(strlen(key) == SBX_WS_KEY_LEN);
		FUZZ_ASSERT(strlen(acc) == SBX_WS_ACCEPT_LEN);
		FUZZ_ASSERT(strstr(proto, "sbx.v1") != NULL);
	}
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	base = event_base_new();
	return 0;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct sbx_ws_limits lim = { MSG_MAX, 0, 4096 };
	struct bufferevent *bev;
	struct st s;
	const unsigned char *hs;
	size_t off = 0, piece, n;
	int fd[2], i;
	char sink[4096];

	if (size < 1 || size > 65536)
		return 0;
	hs = memchr(data + 1, 0xff, size - 1);
	if (hs != NULL) {
		handshake(hs + 1, size - (size_t)(hs + 1 - data));
		size = (size_t)(hs - data);
	}
	memset(&s, 0, sizeof(s));
	FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0,
	    fd) == 0);
	bev = bufferevent_socket_new(base, fd[0], BEV_OPT_CLOSE_ON_FREE);
	FUZZ_ASSERT(bev != NULL);
	s.ws = sbx_ws_new(bev, SBX_WS_SERVER, &lim, &ops, &s, NULL);
	FUZZ_ASSERT(s.ws != NULL);
	piece = (size_t)(data[0] % 64) + 1;
	off = 1;
	while (off < size) {
		n = size - off < piece ? size - off : piece;
		if (write(fd[1], data + off, n) != (ssize_t)n)
			break;
		off += n;
		turn(&s);
		while (read(fd[1], sink, sizeof(sink)) > 0)
			;
	}
	for (i = 0; i < 4; i++)
		turn(&s);
	if (!s.closed && s.pause_turns > 0) {
		s.pause_turns = 0;
		sbx_ws_read_pause(s.ws, 0);
	}
	close(fd[1]);
	/* Each 'P' message the owner takes pauses reading for 2 turns, and
	 * the EOF is seen only after the messages before it: a frame is at
	 * least 6 bytes (masked), so size / 3 turns and 64 more bound it. */
	for (i = 0; i < 64 + (int)(size / 3) && !s.closed; i++)
		turn(&s);
	FUZZ_ASSERT(s.closed == 1);
	sbx_ws_free(s.ws);
	return 0;
}
