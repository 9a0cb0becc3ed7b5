/* test_sbx_agent.c - protocol 4 of the agent codec (proto/sbx_agent.c: CTRL, EVENT, the link flag) and the broker's sending side of it (sbx_agent_open2, sbx_agent_control, frames held until the HELLO and sbx_agent_chan_restart in broker/agent.c), without an agent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "agent.h"
#include "sbx_agent.h"
#include "sbx_proto.h"

static int
ctrl_ok(uint32_t kind, uint32_t a, uint32_t b, struct sbx_agent_ctrl *out)
{
	struct sbx_agent_ctrl c = { kind, a, b };
	unsigned char p[SBX_AGENT_CTRL_LEN];
	const char *why = NULL;
	int r;

	sbx_agent_ctrl_put(p, &c);
	r = sbx_agent_ctrl_parse(p, sizeof(p), out, &why);
	if (r < 0)
		assert_non_null(why);
	return r;
}

/* A resize carries cols and rows as two u16, a signal its number as a u32;
 * every value outside the ranges of the contract is refused, none wraps. */
static void
test_ctrl_round_trip_and_ranges(void **state)
{
	static const unsigned char resize_80x24[SBX_AGENT_CTRL_LEN] = { 0, 0, 0, 1, 0, 80, 0, 24 };
	struct sbx_agent_ctrl c = { SBX_AGENT_CTRL_RESIZE, 80, 24 }, back;
	unsigned char p[SBX_AGENT_CTRL_LEN + 1];
	const char *why;

	(void)state;
	sbx_agent_ctrl_put(p, &c);
	assert_memory_equal(p, resize_80x24, SBX_AGENT_CTRL_LEN);
	assert_int_equal(sbx_agent_ctrl_parse(p, SBX_AGENT_CTRL_LEN, &back, &why), 0);
	assert_int_equal(back.kind, SBX_AGENT_CTRL_RESIZE);
	assert_int_equal(back.a, 80);
	assert_int_equal(back.b, 24);
	assert_int_equal(sbx_agent_ctrl_parse(p, SBX_AGENT_CTRL_LEN - 1, &back, &why), -1);
	assert_int_equal(sbx_agent_ctrl_parse(p, SBX_AGENT_CTRL_LEN + 1, &back, &why), -1);

	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_RESIZE, 1, 1, &back), 0);
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_RESIZE, 10000, 10000, &back), 0);
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_RESIZE, 0, 24, &back), -1);
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_RESIZE, 80, 0, &back), -1);
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_RESIZE, 10001, 24, &back), -1);
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_RESIZE, 80, 10001, &back), -1);
	/* 65536 + 80 must not arrive as 80 */
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_RESIZE, 65616, 24, &back), -1);

	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_SIGNAL, 2, 0, &back), 0);
	assert_int_equal(back.a, 2);
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_SIGNAL, 64, 0, &back), 0);
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_SIGNAL, 0, 0, &back), -1);
	assert_int_equal(ctrl_ok(SBX_AGENT_CTRL_SIGNAL, 65, 0, &back), -1);
	assert_int_equal(ctrl_ok(3, 1, 1, &back), -1);
	assert_int_equal(ctrl_ok(0, 1, 1, &back), -1);
}

static int
hdr_ok(int type, int flags, uint32_t stream, uint32_t len, int from_agent)
{
	unsigned char h[SBX_AGENT_HDR];
	struct sbx_agent_frame f;
	const char *why;

	sbx_agent_hdr_put(h, type, flags, stream, len);
	return sbx_agent_hdr_parse(h, from_agent, &f, &why);
}

static void
test_header_rules_of_protocol_4(void **state)
{
	unsigned char h[SBX_AGENT_HDR];
	struct sbx_agent_frame f;
	const char *why;

	(void)state;
	assert_int_equal(SBX_AGENT_PROTO, 4);
	/* CTRL: the broker's, on a stream, exactly 8 bytes, no flags */
	assert_int_equal(hdr_ok(SBX_AGENT_T_CTRL, 0, 1, SBX_AGENT_CTRL_LEN, 0), 0);
	assert_int_equal(hdr_ok(SBX_AGENT_T_CTRL, 0, 1, SBX_AGENT_CTRL_LEN, 1), -1);
	assert_int_equal(hdr_ok(SBX_AGENT_T_CTRL, 0, 1, SBX_AGENT_CTRL_LEN - 1, 0), -1);
	assert_int_equal(hdr_ok(SBX_AGENT_T_CTRL, 0, 1, SBX_AGENT_CTRL_LEN + 1, 0), -1);
	assert_int_equal(hdr_ok(SBX_AGENT_T_CTRL, 1, 1, SBX_AGENT_CTRL_LEN, 0), -1);
	assert_int_equal(hdr_ok(SBX_AGENT_T_CTRL, 0, 0, SBX_AGENT_CTRL_LEN, 0), -1);
	/* EVENT: the agent's side, on a stream, 1..4096 bytes */
	assert_int_equal(hdr_ok(SBX_AGENT_T_EVENT, 0, 1, 1, 1), 0);
	assert_int_equal(hdr_ok(SBX_AGENT_T_EVENT, 0, 1, SBX_AGENT_EVENT_MAX, 1), 0);
	assert_int_equal(hdr_ok(SBX_AGENT_T_EVENT, 0, 1, SBX_AGENT_EVENT_MAX + 1, 1), -1);
	assert_int_equal(hdr_ok(SBX_AGENT_T_EVENT, 0, 1, 0, 1), -1);
	assert_int_equal(hdr_ok(SBX_AGENT_T_EVENT, 0, 1, 10, 0), -1);
	assert_int_equal(hdr_ok(SBX_AGENT_T_EVENT, 1, 1, 10, 1), -1);
	/* OPEN takes STDIN and CTRL, nothing else */
	assert_int_equal(hdr_ok(SBX_AGENT_T_OPEN, SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL,
	    1, 16, 0), 0);
	assert_int_equal(hdr_ok(SBX_AGENT_T_OPEN, 0x04, 1, 16, 0), -1);
	assert_int_equal(hdr_ok(13, 0, 1, 8, 0), -1);
	assert_int_equal(hdr_ok(13, 0, 1, 8, 1), -1);
	/* a protocol 3 agent's frames (its HELLO first) are another version */
	sbx_agent_hdr_put(h, SBX_AGENT_T_HELLO, 0, 0, SBX_AGENT_HELLO_LEN);
	h[1] = 3;
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);
}

struct seen {
	int frames;
	uint8_t type;
	uint32_t stream;
	unsigned char p[SBX_AGENT_EVENT_MAX];
	size_t n;
};

static int
on_frame(void *arg, const struct sbx_agent_frame *f, const unsigned char *p, size_t n, int last)
{
	struct seen *s = arg;

	s->type = f->type;
	s->stream = f->stream;
	if (n > 0 && s->n + n <= sizeof(s->p)) {
		memcpy(s->p + s->n, p, n);
		s->n += n;
	}
	s->frames += last;
	return 0;
}

/* An agent channel's decoder refuses EVENT; a session link's takes it
 * whole (fed a byte at a time, it still arrives once). */
static void
test_decoder_takes_events_only_on_a_link(void **state)
{
	static const char ev[] = "{\"type\":\"start\",\"exec_id\":\"e1\"}";
	unsigned char frame[SBX_AGENT_HDR + sizeof(ev)], rec[SBX_AGENT_EVENT_MAX];
	struct sbx_agent_dec d;
	struct seen s;
	size_t i;

	(void)state;
	sbx_agent_hdr_put(frame, SBX_AGENT_T_EVENT, 0, 1, sizeof(ev) - 1);
	memcpy(frame + SBX_AGENT_HDR, ev, sizeof(ev) - 1);

	memset(&s, 0, sizeof(s));
	sbx_agent_dec_init(&d, 1, rec, sizeof(rec));
	assert_int_equal(d.link, 0);
	assert_int_equal(sbx_agent_dec_feed(&d, frame, SBX_AGENT_HDR + sizeof(ev) - 1, on_frame,
	    &s), -1);
	assert_non_null(strstr(d.why, "event"));
	assert_int_equal(s.frames, 0);

	memset(&s, 0, sizeof(s));
	sbx_agent_dec_init(&d, 1, rec, sizeof(rec));
	sbx_agent_dec_link(&d);
	for (i = 0; i < SBX_AGENT_HDR + sizeof(ev) - 1; i++)
		assert_int_equal(sbx_agent_dec_feed(&d, frame + i, 1, on_frame, &s), 0);
	assert_int_equal(s.frames, 1);
	assert_int_equal(s.type, SBX_AGENT_T_EVENT);
	assert_int_equal(s.stream, 1);
	assert_int_equal(s.n, sizeof(ev) - 1);
	assert_memory_equal(s.p, ev, sizeof(ev) - 1);

	/* a link decoder whose record is small still bounds what it holds */
	memset(&s, 0, sizeof(s));
	sbx_agent_dec_init(&d, 1, rec, 16);
	sbx_agent_dec_link(&d);
	assert_int_equal(sbx_agent_dec_feed(&d, frame, sizeof(frame) - 1, on_frame, &s), -1);
}

/* ------------------------------------------------------------------ */
/* codec of protocol 3, unchanged                                       */

static void
test_open_round_trip_and_bounds(void **state)
{
	static const char *const argv[] = { "exec", "--id", "x", "--", "echo", "é", NULL };
	static const char *const env[] = { "A=1", "EMPTY=", NULL };
	static const char *const bad_env[] = { "NOEQUALS", NULL };
	unsigned char buf[512];
	char *av[16], *ev[16];
	const char *why;
	size_t n;

	(void)state;
	n = sbx_agent_open_put(buf, sizeof(buf), argv, env);
	assert_int_equal(n, sbx_agent_open_len(argv, env));
	assert_int_equal(sbx_agent_open_parse(buf, n, av, 16, ev, 16, &why), 0);
	assert_string_equal(av[5], "é");
	assert_null(av[6]);
	assert_string_equal(ev[1], "EMPTY=");
	assert_null(ev[2]);
	assert_int_equal(sbx_agent_open_len(argv, bad_env), 0);
	/* a missing NUL, bytes after the last string, too few slots */
	assert_int_equal(sbx_agent_open_parse(buf, n - 1, av, 16, ev, 16, &why), -1);
	buf[n] = 'x';
	assert_int_equal(sbx_agent_open_parse(buf, n + 1, av, 16, ev, 16, &why), -1);
	assert_int_equal(sbx_agent_open_parse(buf, n, av, 6, ev, 16, &why), -1);
}

/* sbx_agent_take: what fits, no more, and both sides advanced. */
static void
test_take_copies_what_fits_and_advances(void **state)
{
	static const unsigned char in[] = "abcdefgh";
	unsigned char dst[5];
	const unsigned char *src = in;
	size_t have = 2, len = 8;

	(void)state;
	memcpy(dst, "xy", 2);
	assert_int_equal(sbx_agent_take(dst, &have, sizeof(dst), &src, &len), 3);
	assert_memory_equal(dst, "xyabc", 5);
	assert_int_equal(have, 5);
	assert_ptr_equal(src, in + 3);
	assert_int_equal(len, 5);
	/* full: nothing moves */
	assert_int_equal(sbx_agent_take(dst, &have, sizeof(dst), &src, &len), 0);
	assert_ptr_equal(src, in + 3);
	assert_int_equal(len, 5);
	/* less input than room */
	have = 0;
	len = 2;
	assert_int_equal(sbx_agent_take(dst, &have, sizeof(dst), &src, &len), 2);
	assert_memory_equal(dst, "de", 2);
	assert_int_equal(have, 2);
	assert_int_equal(len, 0);
}

static void
test_header_rules(void **state)
{
	unsigned char h[SBX_AGENT_HDR];
	struct sbx_agent_frame f;
	const char *why;

	(void)state;
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 5, 10);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), 0);
	assert_int_equal(sbx_agent_hdr_parse(h, 0, &f, &why), -1);   /* fd 1 data is the agent's */
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 0, 10);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);   /* stream 0 */
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 5, SBX_AGENT_DATA_MAX + 1);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);
	sbx_agent_hdr_put(h, SBX_AGENT_T_DATA, 1, 5, 0);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);
	sbx_agent_hdr_put(h, SBX_AGENT_T_PING, 0, 0, 8);
	assert_int_equal(sbx_agent_hdr_parse(h, 1, &f, &why), -1);   /* the broker pings */
	assert_int_equal(sbx_agent_hdr_parse(h, 0, &f, &why), 0);
	sbx_agent_hdr_put(h, SBX_AGENT_T_CANCEL, 0, 3, 0);
	h[3] = 1;
	assert_int_equal(sbx_agent_hdr_parse(h, 0, &f, &why), -1);
}

/* ------------------------------------------------------------------ */
/* the broker's side: what sbx_agent_open2 and sbx_agent_control send   */

struct sent {
	int n;
	struct { uint8_t type, flags; uint32_t stream; unsigned char p[16]; size_t len; } f[8];
};

static int
on_sent(void *arg, const struct sbx_agent_frame *f, const unsigned char *p, size_t n, int last)
{
	struct sent *s = arg;

	(void)last;
	if (s->n < 8) {
		s->f[s->n].type = f->type;
		s->f[s->n].flags = f->flags;
		s->f[s->n].stream = f->stream;
		s->f[s->n].len = n < 16 ? n : 16;
		memcpy(s->f[s->n].p, p, s->f[s->n].len);
	}
	s->n++;
	return 0;
}

/* Decodes everything the channel wrote, as the agent would. */
static void
decode_out(struct evbuffer *out, struct sent *s)
{
	static unsigned char rec[SBX_AGENT_OPEN_MAX];
	struct sbx_agent_dec d;
	size_t n = evbuffer_get_length(out);
	unsigned char *p = evbuffer_pullup(out, (ev_ssize_t)n);

	memset(s, 0, sizeof(*s));
	sbx_agent_dec_init(&d, 0, rec, sizeof(rec));
	assert_int_equal(sbx_agent_dec_feed(&d, p, n, on_sent, s), 0);
	evbuffer_drain(out, n);
}

/* The agent's HELLO reaches ch (a stream's frames go out only after it). */
static void
feed_hello(struct sbx_agent_chan *ch)
{
	struct sbx_agent_hello hello = { SBX_AGENT_PROTO, 4242, SBX_AGENT_WINDOW, 8 };
	unsigned char buf[SBX_AGENT_HDR + SBX_AGENT_HELLO_LEN];

	sbx_agent_hdr_put(buf, SBX_AGENT_T_HELLO, 0, 0, SBX_AGENT_HELLO_LEN);
	sbx_agent_hello_put(buf + SBX_AGENT_HDR, &hello);
	assert_int_equal(sbx_agent_chan_input(ch, buf, sizeof(buf)), 0);
}

static void
test_control_goes_only_to_ctrl_streams(void **state)
{
	static const char *const argv[] = { "pty", "--cols", "80", "--rows", "24", NULL };
	struct event_base *base = event_base_new();
	struct evbuffer *out = evbuffer_new();
	struct sbx_agent_chan *ch = sbx_agent_chan_new(base, NULL);
	struct sbx_agent_stream *pty, *plain;
	struct sbx_err err;
	struct sent s;

	(void)state;
	sbx_agent_chan_set_output(ch, out);
	feed_hello(ch);
	pty = sbx_agent_open2(ch, argv, NULL, SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL, NULL,
	    &err);
	assert_non_null(pty);
	plain = sbx_agent_open(ch, argv, NULL, 1, NULL, &err);
	assert_non_null(plain);
	assert_null(sbx_agent_open2(ch, argv, NULL, 0x04, NULL, &err));
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);

	assert_int_equal(sbx_agent_control(pty, SBX_AGENT_CTRL_RESIZE, 132, 50), 0);
	assert_int_equal(sbx_agent_control(pty, SBX_AGENT_CTRL_SIGNAL, 2, 0), 0);
	/* refused before anything is sent */
	assert_int_equal(sbx_agent_control(plain, SBX_AGENT_CTRL_SIGNAL, 2, 0), -1);
	assert_int_equal(sbx_agent_control(pty, SBX_AGENT_CTRL_RESIZE, 0, 0), -1);
	assert_int_equal(sbx_agent_control(pty, SBX_AGENT_CTRL_RESIZE, 10001, 5), -1);
	assert_int_equal(sbx_agent_control(pty, SBX_AGENT_CTRL_SIGNAL, 65, 0), -1);
	assert_int_equal(sbx_agent_control(pty, SBX_AGENT_CTRL_SIGNAL, 2, 1), -1);
	assert_int_equal(sbx_agent_control(pty, 7, 1, 1), -1);

	decode_out(out, &s);
	assert_int_equal(s.n, 4);
	assert_int_equal(s.f[0].type, SBX_AGENT_T_OPEN);
	assert_int_equal(s.f[0].flags, SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL);
	assert_int_equal(s.f[1].type, SBX_AGENT_T_OPEN);
	assert_int_equal(s.f[1].flags, SBX_AGENT_OPEN_STDIN);
	assert_int_equal(s.f[2].type, SBX_AGENT_T_CTRL);
	assert_int_equal(s.f[2].stream, s.f[0].stream);
	assert_int_equal(s.f[2].len, SBX_AGENT_CTRL_LEN);
	assert_memory_equal(s.f[2].p, "\0\0\0\1\0\204\0\062", SBX_AGENT_CTRL_LEN);
	assert_int_equal(s.f[3].type, SBX_AGENT_T_CTRL);
	assert_memory_equal(s.f[3].p, "\0\0\0\2\0\0\0\2", SBX_AGENT_CTRL_LEN);

	/* a cancelled stream takes no more */
	sbx_agent_cancel(pty);
	assert_int_equal(sbx_agent_control(pty, SBX_AGENT_CTRL_SIGNAL, 15, 0), -1);
	decode_out(out, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.f[0].type, SBX_AGENT_T_CANCEL);
	assert_int_equal(sbx_agent_control(NULL, SBX_AGENT_CTRL_SIGNAL, 2, 0), -1);

	sbx_agent_chan_free(ch);
	evbuffer_free(out);
	event_base_free(base);
}

/*
 * A transport that dies before the HELLO (Podman dropping the attach of the
 * agent's exec, adr/0025 amendment session 11) holds nothing of a stream:
 * OPEN, stdin, EOF, WINDOW and CANCEL wait in the channel (only a PING goes
 * before the HELLO); after sbx_agent_chan_restart the next transport gets
 * each of them once, in order, after its HELLO. After a HELLO no restart.
 */
static void
test_stream_frames_wait_for_the_hello_and_survive_a_restart(void **state)
{
	static const char *const argv[] = { "exec", "--", "cat", NULL };
	static const char *const argv2[] = { "exec", "--", "true", NULL };
	struct event_base *base = event_base_new();
	struct evbuffer *dead = evbuffer_new(), *out = evbuffer_new();
	struct sbx_agent_chan *ch = sbx_agent_chan_new(base, NULL);
	struct sbx_agent_stream *st, *st2;
	struct sbx_err err;
	struct sent s;

	(void)state;
	st = sbx_agent_open(ch, argv, NULL, 1, NULL, &err);
	assert_non_null(st);
	assert_int_equal(sbx_agent_write(st, "hello", 5), 5);
	sbx_agent_chan_set_output(ch, dead);
	sbx_agent_close_stdin(st);
	assert_int_equal(sbx_agent_grow_output(st, 4096), 0);
	st2 = sbx_agent_open(ch, argv2, NULL, 0, NULL, &err);
	assert_non_null(st2);
	sbx_agent_cancel(st2);
	sbx_agent_chan_ping(ch);
	/* the old transport got the PING alone */
	decode_out(dead, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.f[0].type, SBX_AGENT_T_PING);

	assert_int_equal(sbx_agent_chan_restart(ch), 0);
	assert_true(sbx_agent_chan_alive(ch));
	assert_int_equal(sbx_agent_chan_streams(ch), 2);
	sbx_agent_chan_set_output(ch, out);
	assert_int_equal(evbuffer_get_length(out), 0);
	feed_hello(ch);
	decode_out(out, &s);
	assert_int_equal(s.n, 6);
	assert_int_equal(s.f[0].type, SBX_AGENT_T_OPEN);
	assert_int_equal(s.f[0].stream, 1);
	assert_int_equal(s.f[1].type, SBX_AGENT_T_DATA);
	assert_int_equal(s.f[1].len, 5);
	assert_memory_equal(s.f[1].p, "hello", 5);
	assert_int_equal(s.f[2].type, SBX_AGENT_T_EOF);
	assert_int_equal(s.f[3].type, SBX_AGENT_T_WINDOW);
	assert_int_equal(s.f[4].type, SBX_AGENT_T_OPEN);
	assert_int_equal(s.f[4].stream, 2);
	assert_int_equal(s.f[5].type, SBX_AGENT_T_CANCEL);
	assert_int_equal(s.f[5].stream, 2);
	assert_int_equal(evbuffer_get_length(dead), 0);
	/* after the HELLO a frame goes out at once, and there is no restart */
	sbx_agent_pause(st, 1);
	assert_int_equal(sbx_agent_grow_output(st, 4096), 0);
	decode_out(out, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(sbx_agent_chan_restart(ch), -1);
	sbx_agent_chan_free(ch);
	assert_int_equal(sbx_agent_chan_restart(NULL), -1);
	evbuffer_free(dead);
	evbuffer_free(out);
	event_base_free(base);
}

/* An agent that sends an EVENT (the link's type) breaks the protocol: the
 * channel fails and its streams hear runtime_error. */
static int closed_n;
static char stream_code[48], closed_msg[256];

static void
on_closed(void *arg, const struct sbx_err *err)
{
	(void)arg;
	snprintf(closed_msg, sizeof(closed_msg), "%s", err->message);
	closed_n++;
}

static void
on_error(void *arg, const struct sbx_err *err)
{
	(void)arg;
	snprintf(stream_code, sizeof(stream_code), "%s", err->code);
}

static void
test_channel_refuses_an_event_from_the_agent(void **state)
{
	static const char *const argv[] = { "exec", "--", "true", NULL };
	struct sbx_agent_chan_cbs ccbs = { NULL, on_closed, NULL };
	struct sbx_agent_stream_cbs scbs = { .error = on_error };
	struct sbx_agent_hello hello = { SBX_AGENT_PROTO, 4242, SBX_AGENT_WINDOW, 8 };
	struct event_base *base = event_base_new();
	struct evbuffer *out = evbuffer_new();
	struct sbx_agent_chan *ch = sbx_agent_chan_new(base, &ccbs);
	unsigned char buf[SBX_AGENT_HDR + SBX_AGENT_HELLO_LEN + SBX_AGENT_HDR + 2];
	struct sbx_err err;

	(void)state;
	closed_n = 0;
	stream_code[0] = '\0';
	sbx_agent_chan_set_output(ch, out);
	assert_non_null(sbx_agent_open(ch, argv, NULL, 0, &scbs, &err));
	sbx_agent_hdr_put(buf, SBX_AGENT_T_HELLO, 0, 0, SBX_AGENT_HELLO_LEN);
	sbx_agent_hello_put(buf + SBX_AGENT_HDR, &hello);
	sbx_agent_hdr_put(buf + SBX_AGENT_HDR + SBX_AGENT_HELLO_LEN, SBX_AGENT_T_EVENT, 0, 1, 2);
	memcpy(buf + 2 * SBX_AGENT_HDR + SBX_AGENT_HELLO_LEN, "{}", 2);
	assert_int_equal(sbx_agent_chan_input(ch, buf, sizeof(buf)), -1);
	assert_int_equal(closed_n, 1);
	assert_string_equal(stream_code, SBX_E_RUNTIME);
	assert_false(sbx_agent_chan_alive(ch));
	sbx_agent_chan_free(ch);
	evbuffer_free(out);
	event_base_free(base);
}

/* An agent of protocol 3 (an old helper) fails the channel at its HELLO,
 * before any stream: the engine driver starts a new agent for the next
 * operation, as after any channel failure (adr/0049). */
static void
test_a_protocol_3_hello_fails_the_channel(void **state)
{
	struct sbx_agent_chan_cbs ccbs = { NULL, on_closed, NULL };
	struct sbx_agent_hello hello = { 3, 4242, SBX_AGENT_WINDOW, 8 };
	struct event_base *base = event_base_new();
	struct sbx_agent_chan *ch = sbx_agent_chan_new(base, &ccbs);
	unsigned char buf[SBX_AGENT_HDR + SBX_AGENT_HELLO_LEN];

	(void)state;
	closed_n = 0;
	sbx_agent_hdr_put(buf, SBX_AGENT_T_HELLO, 0, 0, SBX_AGENT_HELLO_LEN);
	buf[1] = 3;
	sbx_agent_put32(buf + SBX_AGENT_HDR, hello.proto);
	sbx_agent_put32(buf + SBX_AGENT_HDR + 4, hello.pid);
	sbx_agent_put32(buf + SBX_AGENT_HDR + 8, hello.window);
	sbx_agent_put32(buf + SBX_AGENT_HDR + 12, hello.streams);
	/* split after the version byte: still seen */
	assert_int_equal(sbx_agent_chan_input(ch, buf, 1), 0);
	assert_int_equal(sbx_agent_chan_input(ch, buf + 1, sizeof(buf) - 1), -1);
	assert_int_equal(closed_n, 1);
	assert_non_null(strstr(closed_msg, "protocol 3, not 4"));
	assert_non_null(strstr(closed_msg, "ensure the sandbox"));
	assert_false(sbx_agent_chan_ready(ch, NULL));
	assert_false(sbx_agent_chan_alive(ch));
	sbx_agent_chan_free(ch);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_round_trip_and_bounds),
		cmocka_unit_test(test_header_rules),
		cmocka_unit_test(test_take_copies_what_fits_and_advances),
		cmocka_unit_test(test_ctrl_round_trip_and_ranges),
		cmocka_unit_test(test_header_rules_of_protocol_4),
		cmocka_unit_test(test_decoder_takes_events_only_on_a_link),
		cmocka_unit_test(test_control_goes_only_to_ctrl_streams),
		cmocka_unit_test(test_stream_frames_wait_for_the_hello_and_survive_a_restart),
		cmocka_unit_test(test_channel_refuses_an_event_from_the_agent),
		cmocka_unit_test(test_a_protocol_3_hello_fails_the_channel),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
