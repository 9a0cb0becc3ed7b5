/* sbx_agent.h - helper protocol 4: the frame codec of the channel between the broker and a sandbox's sbx-helper agent. */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Protocol 4 (adr/0049; protocol 3, adr/0025, without CTRL and EVENT).
 * One long-lived `sbx-helper agent` per running
 * sandbox, started by the broker through one runtime exec whose stdin and
 * stdout are the channel (the broker opens it; the sandbox initiates
 * nothing). Over it the broker opens streams; each stream runs one
 * sbx-helper mode of protocol 2 (exec --framed, read, write, list, kill,
 * killall, du: broker/helper/sbx_helper_proto.h) in a child of the agent,
 * with that mode's stdin, stdout, stderr and exit status carried as frames.
 * So an exec costs a fork in the sandbox instead of a runtime exec, and
 * every rule of protocol 2 (process group, kill handle, backstop, output
 * framing, RESOLVE_BENEATH, atomic write, caps) holds unchanged.
 *
 * libc only: compiled into the static sbx-helper and into the broker.
 *
 * Frame: a 12-byte header, then the payload.
 *   byte 0      type (SBX_AGENT_T_*)
 *   byte 1      SBX_AGENT_PROTO (4)
 *   byte 2      flags: the descriptor for DATA/EOF/WINDOW (0 stdin,
 *               1 output, 2 stderr), OPEN bit 0 = stdin follows, bit 1 =
 *               CTRL follows (SBX_AGENT_OPEN_*); else 0
 *   byte 3      zero
 *   bytes 4-7   stream id, big-endian: 0 for the channel's own frames
 *               (HELLO, PING, PONG), 1..2^31-1 for a stream
 *   bytes 8-11  payload length, big-endian, within the type's bound
 *
 * Types, the direction each may travel (b = broker, a = agent), payload:
 *   HELLO   a->b  stream 0, 16 bytes: u32 proto (4), u32 agent pid,
 *                 u32 initial window, u32 streams at most. First frame.
 *   PING    b->a  stream 0, 8 bytes (opaque); PONG a->b echoes them.
 *   OPEN    b->a  a new stream (ids strictly increasing per channel):
 *                 u32 argc (1..SBX_AGENT_ARGS_MAX), u32 envc, then argc
 *                 argument strings (argv[0] is the mode) and envc
 *                 NAME=value strings, each NUL-terminated, nothing after;
 *                 at most SBX_AGENT_OPEN_MAX bytes.
 *   DATA    both  1..SBX_AGENT_DATA_MAX bytes. b->a: flags 0, the mode's
 *                 stdin. a->b: flags 1 (stdout) or 2 (stderr). The sender
 *                 must hold credit for every byte (below).
 *   EOF     b->a  flags 0, no payload: the mode's stdin is closed.
 *   WINDOW  both  4 bytes: u32 credit added, 1..SBX_AGENT_WINDOW_MAX.
 *                 b->a flags 1: for the stream's stdout+stderr; a->b
 *                 flags 0: for its stdin.
 *   CANCEL  b->a  no payload: kill the stream's process group (and, for
 *                 exec, the command's, through its kill handle).
 *   EXIT    a->b  4 bytes: how (1 exited: byte 1 status; 2 signal: byte 2
 *                 signal 1..64), byte 3 zero. The stream's last frame.
 *   REFUSE  a->b  1..SBX_AGENT_CODE_MAX bytes of [a-z_]: the stream was
 *                 not started (a SBX_E_* code). The stream's last frame.
 *   CTRL    b->a  flags 0, exactly SBX_AGENT_CTRL_LEN bytes, only on a
 *                 stream opened with SBX_AGENT_OPEN_CTRL (else a protocol
 *                 error): u32 kind, then for SBX_AGENT_CTRL_RESIZE u16
 *                 cols, u16 rows (1..SBX_AGENT_CTRL_DIM_MAX each), for
 *                 SBX_AGENT_CTRL_SIGNAL u32 signal number 1..64. The agent
 *                 checks it and writes the 8 bytes as received to the
 *                 mode's fd 3 (a pipe; the mode runs with --ctrl). Takes no
 *                 credit: at most a pipe's worth waits, later ones are
 *                 dropped while the mode does not read (it is stuck).
 *   EVENT   a->b  never on an agent channel (its receiver fails it): on
 *                 the broker<->api session link only (adr/0050), where the
 *                 broker plays the agent's side: 1..SBX_AGENT_EVENT_MAX
 *                 bytes, one JSON object (start/exit/error, SPEC §5), no
 *                 newline; accepted only by a decoder set up with
 *                 sbx_agent_dec_link.
 *
 * Flow control: each stream starts with SBX_AGENT_WINDOW bytes of credit
 * in each direction (the HELLO says how much); a DATA frame spends its
 * length; WINDOW gives credit back as the receiver consumes. A sender never
 * exceeds its credit, and credit never exceeds SBX_AGENT_WINDOW_MAX: a
 * paused reader stops one stream, never the channel.
 *
 * Everything the agent sends is untrusted at the broker (the sandbox's own
 * code runs as the same user): every header and payload is checked here
 * and by the channel (stream states, credit); any violation ends the
 * channel.
 */

#define SBX_AGENT_PROTO 4
#define SBX_AGENT_MODE "agent"           /* sbx-helper agent [--idle-ms N] */
#define SBX_AGENT_HDR 12
#define SBX_AGENT_DATA_MAX 65536            /* payload of one DATA frame */
#define SBX_AGENT_OPEN_MAX (256 * 1024)     /* payload of one OPEN */
#define SBX_AGENT_ARGS_MAX 4096             /* argc + envc of one OPEN */
#define SBX_AGENT_WINDOW (256 * 1024)       /* initial credit per stream and direction */
#define SBX_AGENT_WINDOW_MAX (4 * 1024 * 1024) /* credit held at most */
/* Credit a streaming receiver grows its sender's to with one WINDOW right
 * after the stream opens (stdin at the agent, both ways on the session
 * link): the initial window alone is one stop-and-wait round trip over
 * every hop per 256 KiB (adr/0050, amendment 2026-12-02). */
#define SBX_AGENT_STDIN_WINDOW (1024 * 1024)
#define SBX_AGENT_STREAMS_MAX 256           /* streams open at once on one channel */
#define SBX_AGENT_CODE_MAX 64               /* REFUSE payload */
#define SBX_AGENT_STREAM_MAX 0x7fffffffu    /* highest stream id */

#define SBX_AGENT_HELLO_LEN 16
#define SBX_AGENT_PING_LEN 8
#define SBX_AGENT_WINDOW_LEN 4
#define SBX_AGENT_EXIT_LEN 4
#define SBX_AGENT_CTRL_LEN 8
#define SBX_AGENT_EVENT_MAX 4096            /* payload of one EVENT (link only) */

enum sbx_agent_type {
	SBX_AGENT_T_HELLO = 1,
	SBX_AGENT_T_PING = 2,
	SBX_AGENT_T_PONG = 3,
	SBX_AGENT_T_OPEN = 4,
	SBX_AGENT_T_DATA = 5,
	SBX_AGENT_T_EOF = 6,
	SBX_AGENT_T_WINDOW = 7,
	SBX_AGENT_T_CANCEL = 8,
	SBX_AGENT_T_EXIT = 9,
	SBX_AGENT_T_REFUSE = 10,
	SBX_AGENT_T_CTRL = 11,
	SBX_AGENT_T_EVENT = 12,
};

#define SBX_AGENT_OPEN_STDIN 0x01           /* OPEN flag: DATA/EOF for stdin follow */
#define SBX_AGENT_OPEN_CTRL 0x02            /* OPEN flag: CTRL may follow; the mode gets fd 3 */
#define SBX_AGENT_CTRL_RESIZE 1             /* CTRL kind: a = cols, b = rows */
#define SBX_AGENT_CTRL_SIGNAL 2             /* CTRL kind: a = signal number, b = 0 */
/* CTRL kind on the broker<->api session link only (api -> broker, adr/0051
 * amendment): a = 1 while the api has a viewer of the session, 0 while it
 * has none. sbx_agent_ctrl_parse refuses it, so no agent ever gets it. */
#define SBX_AGENT_CTRL_VIEWERS 3
#define SBX_AGENT_CTRL_DIM_MAX 10000        /* cols and rows of a resize, at most */
#define SBX_AGENT_CTRL_SIG_MAX 64           /* signal numbers, at most */
#define SBX_AGENT_EXIT_EXITED 1
#define SBX_AGENT_EXIT_SIGNALED 2

/* A decoded header (already checked by sbx_agent_hdr_parse). */
struct sbx_agent_frame {
	uint8_t type;     /* enum sbx_agent_type */
	uint8_t flags;
	uint32_t stream;  /* 0 or 1..SBX_AGENT_STREAM_MAX */
	uint32_t len;     /* payload bytes */
};

/*
 * Writes the header of a frame into h[SBX_AGENT_HDR]. No checks: the
 * caller builds only frames it may send. Never fails.
 */
void sbx_agent_hdr_put(unsigned char *h, int type, int flags, uint32_t stream, uint32_t len);

/*
 * Checks the header h[SBX_AGENT_HDR] as sent by the agent (from_agent 1,
 * what the broker reads) or by the broker (0, what the agent reads): known
 * type travelling in that direction (EVENT counts as the agent's: whether
 * a receiver takes it at all is its decoder's link flag), version 4, zero
 * byte 3, flags allowed
 * for the type, stream id 0 exactly for HELLO/PING/PONG and in
 * 1..SBX_AGENT_STREAM_MAX otherwise, length within the type's bound.
 * Returns 0 and fills *f, or -1 with *why set to a static sentence.
 */
int sbx_agent_hdr_parse(const unsigned char *h, int from_agent, struct sbx_agent_frame *f,
    const char **why);

/*
 * Called by sbx_agent_dec_feed for each frame. DATA payloads come in
 * pieces as they arrive (p, n >= 1) with last set on the final piece, so
 * the decoder never holds a DATA payload; other types come once, whole,
 * with last 1. p is borrowed for the call. Return
 * 0 to go on, -1 to stop decoding (the consumer found a semantic error:
 * sbx_agent_dec_feed then returns -1 with why "refused by the receiver").
 */
typedef int (*sbx_agent_frame_cb)(void *arg, const struct sbx_agent_frame *f,
    const unsigned char *p, size_t n, int last);

/*
 * An incremental decoder: frames may be split anywhere across feeds.
 * rec is a caller-owned buffer for non-DATA payloads, rec_cap bytes
 * (the largest such payload the direction allows: SBX_AGENT_OPEN_MAX at
 * the agent, SBX_AGENT_HELLO_LEN.. SBX_AGENT_CODE_MAX at the broker,
 * SBX_AGENT_EVENT_MAX at the api's end of a session link; a frame longer
 * than rec_cap is a protocol error). link 0 (every agent channel): an
 * EVENT is a protocol error; 1 (sbx_agent_dec_link): accepted from the
 * side that plays the agent.
 */
struct sbx_agent_dec {
	int from_agent;
	unsigned char *rec;
	size_t rec_cap;
	/* private */
	unsigned char hdr[SBX_AGENT_HDR];
	size_t hlen;
	int in_frame;
	struct sbx_agent_frame f;
	uint32_t left;
	size_t rec_len;
	int failed;
	const char *why;
	int link;   /* public: set by sbx_agent_dec_link only */
};

/* Sets up d (no allocation) with link 0. from_agent as for sbx_agent_hdr_parse. */
void sbx_agent_dec_init(struct sbx_agent_dec *d, int from_agent, unsigned char *rec,
    size_t rec_cap);

/*
 * Marks d (after sbx_agent_dec_init) as the decoder of a broker<->api
 * session link (adr/0050): EVENT frames from the agent's side are handed
 * to the callback like any other non-DATA frame (rec_cap must then be
 * SBX_AGENT_EVENT_MAX to take the largest). Decoders of agent channels
 * never call it. Never fails.
 */
void sbx_agent_dec_link(struct sbx_agent_dec *d);

/*
 * Feeds len bytes. Returns 0 when every byte was consumed without error,
 * -1 at the first protocol violation or when cb returned -1; d->why then
 * says what (a static sentence) and every later feed returns -1 at once.
 */
int sbx_agent_dec_feed(struct sbx_agent_dec *d, const unsigned char *buf, size_t len,
    sbx_agent_frame_cb cb, void *arg);

/* Big-endian u32 at p / into p. */
uint32_t sbx_agent_get32(const unsigned char *p);
void sbx_agent_put32(unsigned char *p, uint32_t v);
/*
 * Appends to an accumulating buffer: copies n = min(cap - *have, *len)
 * bytes from *src to dst + *have and advances *have, *src and *len by n
 * (*have <= cap on entry); returns n (0 when dst is full or *len is 0).
 * The frame decoder's header and record and sbx-helper's output buffer
 * fill with it; libc only.
 */
size_t sbx_agent_take(unsigned char *dst, size_t *have, size_t cap,
    const unsigned char **src, size_t *len);

/* HELLO payload. */
struct sbx_agent_hello {
	uint32_t proto, pid, window, streams;
};

/* Writes hello's payload into p[SBX_AGENT_HELLO_LEN]. */
void sbx_agent_hello_put(unsigned char *p, const struct sbx_agent_hello *hello);

/*
 * Parses a HELLO payload: proto must be SBX_AGENT_PROTO, pid > 1, window
 * in 1..SBX_AGENT_WINDOW_MAX, streams in 1..SBX_AGENT_STREAMS_MAX.
 * Returns 0, or -1 with *why.
 */
int sbx_agent_hello_parse(const unsigned char *p, size_t n, struct sbx_agent_hello *hello,
    const char **why);

/* WINDOW payload: the credit, 0 when n is not 4 or the credit is out of 1..WINDOW_MAX. */
uint32_t sbx_agent_window_parse(const unsigned char *p, size_t n);

/* EXIT payload. */
struct sbx_agent_exit {
	int how;    /* SBX_AGENT_EXIT_EXITED or _SIGNALED */
	int status; /* exited: 0..255 */
	int sig;    /* signaled: 1..64 */
};

void sbx_agent_exit_put(unsigned char *p, const struct sbx_agent_exit *ex);

/* Parses an EXIT payload (rules above). Returns 0, or -1 with *why. */
int sbx_agent_exit_parse(const unsigned char *p, size_t n, struct sbx_agent_exit *ex,
    const char **why);

/* CTRL payload (SBX_AGENT_CTRL_LEN bytes): kind SBX_AGENT_CTRL_*; resize:
 * a = cols, b = rows; signal: a = the signal number, b = 0. */
struct sbx_agent_ctrl { uint32_t kind, a, b; };

/*
 * Writes c's payload into p[SBX_AGENT_CTRL_LEN], big-endian: u32 kind, then
 * resize u16 a, u16 b (a value over 65535 is written as 0), anything else
 * u32 a. No checks: sbx_agent_ctrl_parse of the result says whether it is
 * valid (so a size over 65535 is refused, not wrapped).
 * Never fails.
 */
void sbx_agent_ctrl_put(unsigned char *p, const struct sbx_agent_ctrl *c);

/* Checks kind and ranges (resize 1..10000 each, signal 1..64). Returns 0, or -1 with *why. */
int sbx_agent_ctrl_parse(const unsigned char *p, size_t n, struct sbx_agent_ctrl *c, const char **why);

/*
 * Parses a REFUSE payload into code[SBX_AGENT_CODE_MAX + 1] (NUL-terminated).
 * Returns 0, or -1 when empty, too long or not [a-z_].
 */
int sbx_agent_refuse_parse(const unsigned char *p, size_t n, char *code);

/*
 * The bytes an OPEN payload of argv (NULL-terminated, at least one) and env
 * (NULL-terminated or NULL) takes, or 0 when it would break a bound (count,
 * SBX_AGENT_OPEN_MAX, an env entry without '=' or starting with '=').
 */
size_t sbx_agent_open_len(const char *const *argv, const char *const *env);

/*
 * Writes that payload into p (sbx_agent_open_len bytes). Returns the length
 * written, 0 under the same conditions as sbx_agent_open_len.
 */
size_t sbx_agent_open_put(unsigned char *p, size_t cap, const char *const *argv,
    const char *const *env);

/*
 * Parses an OPEN payload in place: p (n bytes, writable; unchanged, the
 * strings end in its own NULs) stays owned by the caller; argv and env get
 * pointers into it and a NULL terminator, at most cap entries each
 * including the terminator. Returns 0, or -1 with *why (counts out of
 * bounds or over cap, a string missing its NUL, bytes after the last,
 * an env entry without '=' or starting with '=', an empty argv[0]).
 */
int sbx_agent_open_parse(unsigned char *p, size_t n, char **argv, size_t argv_cap,
    char **env, size_t env_cap, const char **why);

#endif
