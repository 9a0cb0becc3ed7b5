/* agent.h - the broker's end of a sandbox agent channel (helper protocol 4, proto/sbx_agent.h, adr/0025, adr/0049). */
#ifndef AGENT_H
#define AGENT_H

#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "sbx_agent.h"
#include "sbx_err.h"

/*
 * One channel per running sandbox: the streams of sbx-helper modes the
 * agent runs, multiplexed with per-stream credit (proto/sbx_agent.h). The
 * channel knows no transport: its owner feeds it what the agent sent
 * (sbx_agent_chan_input, e.g. the stdout of the runtime exec that started
 * the agent, already taken out of the Engine API's 8-byte framing) and
 * drains the evbuffer it writes to (sbx_agent_chan_set_output). Tests
 * attach a bufferevent of a socketpair instead (sbx_agent_chan_attach_bev).
 *
 * Everything the agent sends is untrusted: a frame that breaks the
 * protocol (header, unknown or ended stream, more output than the credit
 * given, a second HELLO, a PONG nobody asked for, an EVENT: that type is
 * the session link's, never an agent's...) fails the channel:
 * every open stream gets its error callback (runtime_error) and the owner
 * its closed callback; nothing the agent sends after that is read. Memory
 * is bounded whatever the agent sends: a fixed decoder (no payload over
 * 64 bytes is buffered; DATA goes straight to the stream's callback),
 * at most SBX_AGENT_STREAMS_MAX streams, output per stream within its
 * window (SBX_AGENT_WINDOW, paused streams hold their credit back).
 *
 * Callbacks are called from sbx_agent_chan_input (or the bufferevent's
 * callbacks) and from sbx_agent_chan_fail; from inside any callback the
 * owner may cancel streams, open new ones or free the channel (deferred
 * until the callback returns).
 */

struct sbx_agent_chan;
struct sbx_agent_stream;

struct sbx_agent_chan_cbs {
	/* The agent's HELLO arrived (optional). */
	void (*ready)(void *arg, const struct sbx_agent_hello *hello);
	/* The channel ended: protocol error, the transport's EOF or error,
	 * a keepalive unanswered. Every stream has had its error callback.
	 * Called once; the owner still frees the channel. */
	void (*closed)(void *arg, const struct sbx_err *err);
	void *arg;
};

/*
 * A new channel on base (borrowed; must outlive the channel). cbs is
 * copied. Output goes nowhere until sbx_agent_chan_set_output or
 * sbx_agent_chan_attach_bev. The streams' frames (OPEN, DATA, EOF,
 * WINDOW, CANCEL, CTRL) are held in the channel until the agent's HELLO
 * came on an output, then go there in order; only PINGs go to an output
 * before (sbx_agent_chan_ping). So a transport that dies before the HELLO
 * holds nothing of a stream (sbx_agent_chan_restart). Returns NULL out of
 * memory.
 */
struct sbx_agent_chan *sbx_agent_chan_new(struct event_base *base,
    const struct sbx_agent_chan_cbs *cbs);

/* Where frames go from now on (borrowed; the frames held are moved there
 * once the HELLO came, at once when it has). */
void sbx_agent_chan_set_output(struct sbx_agent_chan *ch, struct evbuffer *out);

/*
 * Uses bev (borrowed; the caller frees it after the channel) as the
 * transport: its input is fed to the channel, its output takes the frames,
 * EOF or an error fails the channel. Returns 0.
 */
int sbx_agent_chan_attach_bev(struct sbx_agent_chan *ch, struct bufferevent *bev);

/*
 * The channel lets go of the bev given to sbx_agent_chan_attach_bev: no
 * callback of it reaches the channel after this and the channel never
 * touches it again (frames sent later wait as before an output was set),
 * so the owner may free it, e.g. once the channel failed (adr/0066). NULL
 * or a channel without a bev is fine.
 */
void sbx_agent_chan_detach_bev(struct sbx_agent_chan *ch);

/* Sends one PING now to the output, HELLO or not (its PONG is expected,
 * as the keepalive's are); a failed channel or no output: nothing. Used to
 * make the agent's first frame come on the transport just set (adr/0066). */
void sbx_agent_chan_ping(struct sbx_agent_chan *ch);

/*
 * The transport died before the agent's HELLO and its owner starts another
 * agent (adr/0025, amendment session 11): the channel forgets the output
 * and the bev (as sbx_agent_chan_detach_bev), what it had read of the old
 * transport and the PINGs sent on it, and keeps every stream with every
 * frame they queued, to go on the next output after its HELLO, once and in
 * order. No callback runs. Returns 0, or -1 with nothing changed when the
 * HELLO had come, the channel failed or was freed, or ch is NULL or inside
 * one of its own callbacks.
 */
int sbx_agent_chan_restart(struct sbx_agent_chan *ch);

/*
 * Bytes the agent sent (any split). Returns 0, or -1 when the channel has
 * failed (now or before; the callbacks have run).
 */
int sbx_agent_chan_input(struct sbx_agent_chan *ch, const unsigned char *buf, size_t len);

/* Fails the channel with err (e.g. the transport ended; every stream's error
 * callback gets err as it is, NULL: runtime_error); idempotent. */
void sbx_agent_chan_fail(struct sbx_agent_chan *ch, const struct sbx_err *err);

/*
 * Every stream still open gets its error callback (cancelled), the channel
 * is freed; called inside a callback, the free happens when it returns.
 * NULL is fine. No closed callback.
 */
void sbx_agent_chan_free(struct sbx_agent_chan *ch);

/* 1 while the channel has not failed (HELLO or not). */
int sbx_agent_chan_alive(const struct sbx_agent_chan *ch);

/* 1 once the HELLO arrived; *hello filled when hello is not NULL. */
int sbx_agent_chan_ready(const struct sbx_agent_chan *ch, struct sbx_agent_hello *hello);

/* sbx_mono_ms() of the last frame from the agent, 0 if none. */
uint64_t sbx_agent_chan_last_rx_ms(const struct sbx_agent_chan *ch);

/*
 * Sends a PING every interval_ms and fails the channel (runtime_error)
 * when one stays unanswered for interval_ms * 2; 0 stops. Before the HELLO
 * no PING goes: the channel fails when no HELLO came within interval_ms * 3
 * of its start (or of sbx_agent_chan_restart). Returns 0, -1 out of memory.
 */
int sbx_agent_chan_keepalive(struct sbx_agent_chan *ch, uint64_t interval_ms);

/* Streams open on ch now (cancelled ones awaiting their EXIT included). */
size_t sbx_agent_chan_streams(const struct sbx_agent_chan *ch);

struct sbx_agent_stream_cbs {
	/* Bytes of the mode's stdout (fd 1) or stderr (fd 2); len >= 1, buf
	 * borrowed. The credit comes back once this returns, unless paused. */
	void (*output)(void *arg, int fd, const unsigned char *buf, size_t len);
	/* The mode ended with ex (terminal: the stream is gone after it). */
	void (*exit)(void *arg, const struct sbx_agent_exit *ex);
	/* Terminal too: refused by the agent (err code from the REFUSE when it
	 * is one we know, else runtime_error), or the channel failed. */
	void (*error)(void *arg, const struct sbx_err *err);
	/* Optional: credit for stdin arrived (sbx_agent_stdin_room grew). */
	void (*stdin_room)(void *arg);
	void *arg;
};

/*
 * Opens a stream running the sbx-helper mode argv (argv[0] the mode, as
 * after "sbx-helper" on a command line: sbx_helper_proto.h) with env
 * (NAME=value, or NULL) added to the agent's environment. with_stdin 1:
 * the caller sends stdin (sbx_agent_write, then sbx_agent_close_stdin);
 * 0: the mode reads /dev/null. cbs is copied. Returns the stream (owned by
 * the channel; valid until its terminal callback or sbx_agent_cancel), or
 * NULL with err: bad_request (arguments over a bound of sbx_agent.h),
 * too_many (the agent's stream limit), runtime_error (channel failed).
 */
struct sbx_agent_stream *sbx_agent_open(struct sbx_agent_chan *ch, const char *const *argv,
    const char *const *env, int with_stdin, const struct sbx_agent_stream_cbs *cbs,
    struct sbx_err *err);

/*
 * OPEN flags for sbx_agent_open2 (with_stdin of sbx_agent_open is SBX_AGENT_OPEN_STDIN).
 * sbx_agent_open with the OPEN flags spelled out: open_flags is a mask of
 * SBX_AGENT_OPEN_STDIN (as with_stdin 1) and SBX_AGENT_OPEN_CTRL (the mode
 * gets a control pipe as fd 3 and runs with --ctrl; sbx_agent_control
 * then sends to it: pty mode, exec --framed). Other bits: bad_request.
 * Everything else as sbx_agent_open.
 */
struct sbx_agent_stream *sbx_agent_open2(struct sbx_agent_chan *ch, const char *const *argv,
    const char *const *env, unsigned open_flags, const struct sbx_agent_stream_cbs *cbs,
    struct sbx_err *err);

/*
 * Sends a CTRL frame (resize: a = cols, b = rows; signal: a = signo, b = 0). Returns 0, -1 when
 * the stream was not opened with SBX_AGENT_OPEN_CTRL, has ended, or the values are out of range.
 * kind is SBX_AGENT_CTRL_RESIZE (cols and rows 1..SBX_AGENT_CTRL_DIM_MAX;
 * the mode sets the terminal's size, the kernel sends SIGWINCH) or
 * SBX_AGENT_CTRL_SIGNAL (1..64; pty: to the terminal's foreground process
 * group, exec: to the command's process group). "Ended": cancelled, or
 * its channel failed (after its terminal callback st is gone: do not
 * call). Takes no credit and never blocks (proto/sbx_agent.h, CTRL).
 */
int sbx_agent_control(struct sbx_agent_stream *st, int kind, uint32_t a, uint32_t b);

/*
 * Gives the agent extra bytes of output credit on st now (one WINDOW; the
 * protocol's bound SBX_AGENT_WINDOW_MAX holds): a bulk stream's window is
 * then more than one round trip's worth (adr/0066). A paused stream may
 * then hold up to its whole window. Returns 0, -1 when st has ended or the
 * credit would pass SBX_AGENT_WINDOW_MAX (nothing sent).
 */
int sbx_agent_grow_output(struct sbx_agent_stream *st, uint32_t extra);

/* Bytes of stdin that may be sent now (the credit the agent gave). */
size_t sbx_agent_stdin_room(const struct sbx_agent_stream *st);

/*
 * Moves up to max bytes (and at most the room) from src to the stream's
 * stdin. Returns the bytes moved (0 when no room), -1 when the stream has
 * no stdin or it was closed.
 */
ssize_t sbx_agent_write_buffer(struct sbx_agent_stream *st, struct evbuffer *src, size_t max);

/* Same from memory. */
ssize_t sbx_agent_write(struct sbx_agent_stream *st, const void *buf, size_t len);

/* Sends EOF for stdin (once; later writes fail). */
void sbx_agent_close_stdin(struct sbx_agent_stream *st);

/* paused 1: no more output credit goes back (the agent stops after what
 * is in flight, at most the window); 0: what was held back goes now. */
void sbx_agent_pause(struct sbx_agent_stream *st, int paused);

/*
 * Sends CANCEL (the agent kills the mode's process group and, for exec,
 * the command's) and detaches the caller: no callback comes after this and
 * st must not be used again. The channel keeps the stream until the
 * agent's EXIT. NULL is fine.
 */
void sbx_agent_cancel(struct sbx_agent_stream *st);

/*
 * Process-wide counters of the agents (one engine driver per broker):
 * sbx_agent_count_restart() when an agent had to be started again in a
 * container where one had run; channels open now are counted by
 * sbx_agent_chan_new/free. sbx_agent_metrics_render appends, in the
 * Prometheus text format 0.0.4 (docs/operations.md):
 *   sbx_broker_agent_restarts_total   counter
 *   sbx_broker_agent_channels         gauge
 * Returns 0, -1 out of memory.
 */
void sbx_agent_count_restart(void);
/* One agent channel's transport was chosen (adr/0066): connected 1 the
 * direct socket, 0 the runtime stream after a try failed. Rendered as
 *   sbx_broker_agent_direct_total{result="connected"|"fallback"}  counter */
void sbx_agent_count_direct(int connected);
int sbx_agent_metrics_render(struct evbuffer *out);

#endif
