/*
 * fuzz_agent.c - libFuzzer target: everything a sandbox agent can send the
 * broker (broker/agent.c over proto/sbx_agent.c, helper protocol 3), split
 * anywhere, and the OPEN parser the agent runs on what the broker sends.
 *
 * Input: byte 0 picks how many streams are open (1..4) and which are paused;
 * byte 1 seeds the split points; the rest is what the agent "sent".
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
	size_t off, n, i, ns;

	if (size < 2)
		return 0;
	check_open_parse(data + 2, size - 2);
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

		s[i].st = sbx_agent_open(ch, argv, NULL, (int)(i & 1), &cbs, &err);
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
		/* A stream with stdin writes what its credit allows. */
		if (!closed && !s[1].terminal && ns > 1 && sbx_agent_stdin_room(s[1].st) > 0)
			FUZZ_ASSERT(sbx_agent_write(s[1].st, "x", 1) == 1);
	}
	if (closed)
		for (i = 0; i < ns; i++)
			FUZZ_ASSERT(s[i].terminal || s[i].cancelled);
	/* Output the broker queued is bounded by its own frames: opens, windows,
	 * the stdin bytes, at most one ping. */
	FUZZ_ASSERT(evbuffer_get_length(out) < 64 * 1024 + size * 2);
	sbx_agent_chan_free(ch);
	evbuffer_free(out);
	event_base_free(base);
	return 0;
}
