/*
 * fuzz_agent.c - libFuzzer target: everything a sandbox agent can send the
 * broker (broker/agent.c over proto/sbx_agent.c, helper protocol 4), split
 * anywhere; the OPEN and CTRL parsers the agent runs on what the broker
 * sends; the same bytes through a session link's decoder (EVENT allowed).
 *
 * Input: byte 0 picks how many streams are open (1..4), which are paused
 * (bits 4-7) and whether they take control records (bit 2: opened with
 * STDIN|CTRL, a resize or signal sent after each piece); byte 1 seeds the
 * split points; the rest is what the agent "sent".
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour, however the bytes are split;
 *  - each stream gets at most one terminal callback and nothing after it;
 *    a cancelled stream gets no callback at all;
 *  - output handed to a stream never exceeds the credit the broker gave:
 *    a paused stream gets at most its window; output comes only as fd 1/2;
 *  - the channel's closed callback comes at most once, and after it (the
 *    channel failed) no stream callback comes and input is refused;
 *  - sbx_agent_open_parse on the same bytes accepts only payloads whose
 *    strings it hands back NUL-terminated inside the buffer, env with '='.
 *  - sbx_agent_ctrl_parse accepts only a resize of 1..10000 x 1..10000 or a
 *    signal 1..64, and put(parse(x)) = x for what it accepts;
 *    sbx_agent_control sends only what that parser accepts;
 *  - a link's decoder (sbx_agent_dec_link) hands on only frames of the
 *    agent's direction, EVENTs of 1..4096 bytes whole, and an agent
 *    channel's decoder never an EVENT.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "agent.h"
#include "fuzz.h"

struct fs {
	struct sbx_agent_stream *st;
	int terminal, cancelled, paused, after;
	size_t out;
};

static int closed;

static void
f_output(void *arg, int fd, const unsigned char *buf, size_t len)
{
	struct fs *s = arg;

	(void)buf;
	FUZZ_ASSERT(!closed && !s->terminal && !s->cancelled);
	FUZZ_ASSERT(fd == 1 || fd == 2);
	FUZZ_ASSERT(len >= 1 && len <= SBX_AGENT_DATA_MAX);
	s->out += len;
	if (s->paused)
		FUZZ_ASSERT(s->out <= SBX_AGENT_WINDOW_MAX);
}

static void
f_exit(void *arg, const struct sbx_agent_exit *ex)
{
	struct fs *s = arg;

	FUZZ_ASSERT(!closed && !s->terminal && !s->cancelled);
	FUZZ_ASSERT(ex->how == SBX_AGENT_EXIT_EXITED || ex->how == SBX_AGENT_EXIT_SIGNALED);
	FUZZ_ASSERT(ex->status >= 0 && ex->status <= 255);
	s->terminal = 1;
}

static void
f_error(void *arg, const struct sbx_err *err)
{
	struct fs *s = arg;

	FUZZ_ASSERT(!s->terminal && !s->cancelled);
	FUZZ_ASSERT(err->code != NULL && err->code[0] != '\0');
	s->terminal = 1;
}

static void
f_room(void *arg)
{
	struct fs *s = arg;

	FUZZ_ASSERT(!s->terminal && !s->cancelled);
}

static void
f_closed(void *arg, const struct sbx_err *err)
{
	(void)arg;
	(void)err;
	FUZZ_ASSERT(!closed);
	closed = 1;
}

static void
check_open_parse(const unsigned char *data, size_t size)
{
	char *argv[32], *env[32];
	unsigned char *p;
	const char *why;
	size_t i;

	if (size > SBX_AGENT_OPEN_MAX)
		return;
	if ((p = malloc(size + 1)) == NULL)
		return;
	memcpy(p, data, size);
	if (sbx_agent_open_parse(p, size, argv, 32, env, 32, &why) == 0) {
		FUZZ_ASSERT(argv[0] != NULL && argv[0][0] != '\0');
		for (i = 0; argv[i] != NULL; i++)
			FUZZ_ASSERT((unsigned char *)argv[i] >= p &&
			    (unsigned char *)argv[i] + strlen(argv[i]) < p + size);
		for (i = 0; env[i] != NULL; i++) {
			FUZZ_ASSERT(strchr(env[i], '=') != NULL && env[i][0] != '=');
			FUZZ_ASSERT((unsigned char *)env[i] + strlen(env[i]) < p + size);
		}
	}
	free(p);
}

static void
check_ctrl_parse(const unsigned char *data, size_t size)
{
	struct sbx_agent_ctrl c;
	unsigned char back[SBX_AGENT_CTRL_LEN];
	const char *why;

	if (sbx_agent_ctrl_parse(data, size, &c, &why) < 0)
		return;
	FUZZ_ASSERT(size == SBX_AGENT_CTRL_LEN);
	if (c.kind == SBX_AGENT_CTRL_RESIZE)
		FUZZ_ASSERT(c.a >= 1 && c.a <= 10000 && c.b >= 1 && c.b <= 10000);
	else
		FUZZ_ASSERT(c.kind == SBX_AGENT_CTRL_SIGNAL && c.a >= 1 && c.a <= 64 && c.b == 0);
	sbx_agent_ctrl_put(back, &c);
	FUZZ_ASSERT(memcmp(back, data, SBX_AGENT_CTRL_LEN) == 0);
}

static int
link_frame(void *arg, const struct sbx_agent_frame *f, const unsigned char *p, size_t n,
    int last)
{
	int link = *(int *)arg;

	(void)p;
	FUZZ_ASSERT(f->type != SBX_AGENT_T_EVENT || link);
	if (f->type == SBX_AGENT_T_EVENT)
		FUZZ_ASSERT(last && n >= 1 && n <= SBX_AGENT_EVENT_MAX && n == f->len);
	FUZZ_ASSERT(f->type != SBX_AGENT_T_OPEN && f->type != SBX_AGENT_T_CTRL &&
	    f->type != SBX_AGENT_T_CANCEL && f->type != SBX_AGENT_T_PING &&
	    f->type != SBX_AGENT_T_EOF);
	return 0;
}

/* The same bytes as a link's decoder and an agent channel's decoder see them. */
static void
check_link_decoder(const unsigned char *data, size_t size)
{
	static unsigned char rec[SBX_AGENT_EVENT_MAX];
	struct sbx_agent_dec d;
	int link;

	for (link = 0; link < 2; link++) {
		sbx_agent_dec_init(&d, 1, rec, sizeof(rec));
		if (link)
			sbx_agent_dec_link(&d);
		if (sbx_agent_dec_feed(&d, data, size, link_frame, &link) < 0)
			FUZZ_ASSERT(d.why != NULL && d.failed);
	}
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static const char *const argv[] = { "exec", "--framed", "--id", "f", "--", "true", NULL };
	struct sbx_agent_chan_cbs ccbs = { NULL, f_closed, NULL };
	struct event_base *base;
	struct sbx_agent_chan *ch;
	struct evbuffer *out;
	struct fs s[4];
	struct sbx_err err;
	unsigned seed;
	size_t off, n, i, ns, ctrl_sent = 0;

	if (size < 2)
		return 0;
	check_open_parse(data + 2, size - 2);
	check_ctrl_parse(data + 2, size - 2 < SBX_AGENT_CTRL_LEN + 1 ? size - 2 :
	    SBX_AGENT_CTRL_LEN);
	check_link_decoder(data + 2, size - 2);
	closed = 0;
	memset(s, 0, sizeof(s));
	base = event_base_new();
	out = evbuffer_new();
	FUZZ_ASSERT(base != NULL && out != NULL);
	ch = sbx_agent_chan_new(base, &ccbs);
	FUZZ_ASSERT(ch != NULL);
	sbx_agent_chan_set_output(ch, out);
	ns = 1 + (data[0] & 3);
	for (i = 0; i < ns; i++) {
		struct sbx_agent_stream_cbs cbs = { f_output, f_exit, f_error, f_room, &s[i] };

		s[i].st = sbx_agent_open2(ch, argv, NULL, (data[0] & 0x04) ?
		    SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL : (i & 1) ? SBX_AGENT_OPEN_STDIN : 0,
		    &cbs, &err);
		FUZZ_ASSERT(s[i].st != NULL);
		if (data[0] & (0x10 << i)) {
			s[i].paused = 1;
			sbx_agent_pause(s[i].st, 1);
		}
	}
	seed = data[1];
	for (off = 2; off < size; off += n) {
		seed = seed * 1103515245u + 12345u;
		n = 1 + (seed >> 16) % 4096;
		if (n > size - off)
			n = size - off;
		if (sbx_agent_chan_input(ch, data + off, n) < 0) {
			FUZZ_ASSERT(!sbx_agent_chan_alive(ch));
			FUZZ_ASSERT(closed);
			FUZZ_ASSERT(sbx_agent_chan_input(ch, data + off, n) < 0);
			break;
		}
		/* Midway, cancel stream 0 if it is still open: no callback after. */
		if (off > size / 2 && !s[0].terminal && !s[0].cancelled && !closed) {
			sbx_agent_cancel(s[0].st);
			s[0].cancelled = 1;
		}
		/* Control records: sent only to a live CTRL stream, only in range. */
		for (i = 0; i < ns && !closed; i++) {
			uint32_t a = (seed >> 3) % 10002, b = (seed >> 17) % 10002;
			int kind = 1 + (int)(seed & 1), r;

			if (s[i].terminal || s[i].cancelled)
				continue;
			r = sbx_agent_control(s[i].st, kind, a, kind == 2 ? 0 : b);
			FUZZ_ASSERT(r == 0 || r == -1);
			ctrl_sent += r == 0;
			if (!(data[0] & 0x04))
				FUZZ_ASSERT(r == -1);
			else if (kind == 1)
				FUZZ_ASSERT((r == 0) == (a >= 1 && a <= 10000 && b >= 1 && b <= 10000));
			else
				FUZZ_ASSERT((r == 0) == (a >= 1 && a <= 64));
		}
		/* A stream with stdin writes what its credit allows. */
		if (!closed && !s[1].terminal && ns > 1 && sbx_agent_stdin_room(s[1].st) > 0)
			FUZZ_ASSERT(sbx_agent_write(s[1].st, "x", 1) == 1);
	}
	if (closed)
		for (i = 0; i < ns; i++)
			FUZZ_ASSERT(s[i].terminal || s[i].cancelled);
	/* Output the broker queued is bounded by its own frames: opens, windows,
	 * the stdin bytes, at most one ping, the control records sent. */
	FUZZ_ASSERT(evbuffer_get_length(out) < 64 * 1024 + size * 2 +
	    ctrl_sent * (SBX_AGENT_HDR + SBX_AGENT_CTRL_LEN));
	sbx_agent_chan_free(ch);
	evbuffer_free(out);
	event_base_free(base);
	return 0;
}
