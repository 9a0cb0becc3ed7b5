/* api_term_int.h - internals shared by the files of sandbox-api's terminals (api_term*.c, adr/0051); not a public header. */
#ifndef API_TERM_INT_H
#define API_TERM_INT_H

#include <stdint.h>

#include <jansson.h>

#include "api_int.h"
#include "api_term.h"
#include "api_term_cut.h"

/*
 * On disk, state_dir/terms/ID/ holds:
 *   meta.json   the terminal's record (tmp + rename at start and end);
 *   N.log       segments of its output, N (20 digits) the offset of the
 *               segment's first byte: records of a 16-byte head (u8
 *               stream, u8 0, u16 the safe-cut state of that stream before
 *               the record, u32 length, u64 offset; big-endian) and the
 *               bytes. A new segment starts when the current one holds
 *               terminal_scrollback bytes; then the one before it goes, so
 *               a terminal keeps at most two (adr/0051).
 * Written with write() before any viewer gets the bytes.
 */

#define TERM_ID_LEN 25               /* "t" + 24 hex digits */
#define TERM_BLOCK 4096              /* output bytes per ring block */
#define TERM_REC_HEAD 16
#define TERM_TICKETS_MAX 16          /* live tickets per terminal */
#define TERM_CATCHUP ((size_t)256 * 1024) /* replay bytes per loop turn and viewer */

/* A block of the in-memory scrollback: bytes of one stream. */
struct tblock {
	uint64_t off;                /* offset of data[0] */
	uint32_t len;
	uint8_t stream;
	struct tblock *next;         /* newer */
	unsigned char data[TERM_BLOCK];
};

struct tticket {
	unsigned char hash[32];
	int64_t expires_ms;
	char principal[API_NAME_MAX + 1];
	struct tticket *next;
};

struct api_viewer {
	struct api_term *t;          /* NULL once detached */
	const struct api_viewer_ops *ops;
	void *arg;
	uint64_t pos;                /* next offset it gets */
	int paused;
	int can_write;
	int ended_sent;
	int dead;                    /* detached during a delivery: freed after */
	struct event *catchup;       /* replay from the ring (next turn) */
	struct api_viewer *next;     /* t->viewers, oldest first */
};

struct api_term {
	struct api_server *s;
	char id[TERM_ID_LEN + 1];
	char npc[API_NPC_NAME_MAX + 1];
	int64_t owner_id;
	char sandbox_id[64];
	char by[API_NAME_MAX + 1];   /* principal who made it */
	char argv_preview[257];
	int pty, cols, rows;
	char term[65];
	char state[16];              /* running exited killed ended failed */
	char reason[256];            /* why it ended, when not by itself */
	char reason_code[32];        /* its error code ("" when none) */
	int code;                    /* exit status, -1 none */
	char signal[16];
	int64_t created_at, ended_at;   /* Unix ms */
	int64_t active_ms;           /* monotonic: last output or viewer leaving */
	uint64_t total;              /* output bytes so far: the next offset */
	/* The scrollback in memory (may be absent for an ended terminal
	 * without viewers: then read back from disk on attach). */
	int ring_in;
	struct tblock *head, *tail;
	size_t nblocks;
	struct term_cut cut_head[2]; /* state of each stream before head */
	int seen[2];                 /* the ring holds bytes of that stream */
	struct term_cut cut_live[2]; /* state after every byte so far */
	/* The on-disk log. */
	int fd;                      /* current segment, running only */
	uint64_t seg_cur, seg_prev;  /* first offsets; seg_prev UINT64_MAX: none */
	uint64_t seg_bytes;          /* bytes in the current segment */
	/* The session. */
	struct sbx_op *op;
	struct areq *creator;        /* POST waiting for the start */
	api_term_started_fn started; /* or an api_term_open caller waiting */
	void *started_arg;
	struct evbuffer *inq;        /* input queued towards the broker */
	int eof_asked;               /* close input once inq is empty */
	struct api_viewer *viewers;  /* oldest first */
	struct api_viewer *writer;
	int told_viewers;            /* what the session was told (VIEWERS), -1 nothing */
	int delivering;              /* viewers are being called */
	struct event *idle_ev;
	struct tticket *tickets;
	struct api_term *prev, *next;   /* s->terms, newest first */
};

/* api_term.c */
/* 1 when t no longer runs. */
int term_ended(const struct api_term *t);
/* state_dir/terms/ID[/file] into buf. */
void term_path(char *buf, size_t cap, const struct api_term *t, const char *file);
/* What every reply about t shows (owned; NULL when out of memory). */
json_t *term_json(const struct api_term *t);
/* Makes a terminal for a (body checked by the caller: req), opens its
 * session; the POST is answered on the session's start (201) or error.
 * Returns 0, or -1 with err (nothing sent). */
int term_create(struct areq *a, const struct sbx_session_req *req,
    const char *argv_preview, struct sbx_err *err);
/* term_create, and api_term_open's (api_term_open.c): a new running
 * record for a's NPC whose session is opening; the start goes to the POST
 * (started NULL: a is the creator, answered 201) or to started(arg, ...).
 * Returns 0, or -1 with err (nothing sent; a POST's driver refusal marked
 * areq_broker_err). */
int term_open(struct areq *a, const struct sbx_session_req *req,
    const char *argv_preview, api_term_started_fn started, void *arg,
    struct sbx_err *err);
/* Kills t (DELETE): state killed, reason cancelled by who. */
void term_kill(struct api_term *t, const char *who);
/* Input, control, eof without a viewer (the owner's POST routes). Same
 * returns as api_term_input / _control / _eof, minus forbidden. */
int term_input(struct api_term *t, const unsigned char *p, size_t n,
    struct sbx_err *err);
int term_control(struct api_term *t, const struct sbx_session_ctl *c,
    struct sbx_err *err);
int term_eof(struct api_term *t);
/* Attach with or without write permission (api_term_attach: 1). */
struct api_viewer *term_attach(struct api_term *t, uint64_t offset,
    int can_write, const struct api_viewer_ops *ops, void *arg,
    uint64_t *start, struct sbx_err *err);
/* Running terminals made by principal name. */
unsigned term_running_of(struct api_server *s, const char *by);
/* The terminal of a's route ({id}) of a's NPC; NULL with err not_found. */
struct api_term *term_of(struct areq *a, struct sbx_err *err);

/* The rest of api_term.c, for the loader (api_term_load.c). */
/* Ends t: state, reason (code NULL: by itself), ended_at; its log is
 * closed, its record written, viewers told once they have every byte. */
void term_end(struct api_term *t, const char *state, const char *code,
    const char *message);
/* Removes t's files and record (viewers told and left detached). */
void term_forget(struct api_term *t);
/* A new record (not linked; NULL when out of memory), and its freeing. */
struct api_term *term_alloc(struct api_server *s);
void term_free(struct api_term *t);
/* Links t into s->terms (newest first) / takes it out. */
void term_link(struct api_term *t);
void term_unlink(struct api_term *t);
/* Viewers of t not detached. */
int viewers_live(const struct api_term *t);

/* api_term_ring.c: the scrollback in memory and on disk. */
/* Frees the ring (the log stays). */
void ring_free(struct api_term *t);
/* Offset of the oldest byte in memory (t->total when none). */
uint64_t ring_start(const struct api_term *t);
/* Appends n bytes of stream at offset off (the ring's end) whose stream
 * state before them was before; the oldest blocks go past
 * terminal_scrollback. 0, or -1 out of memory (the bytes are then missing
 * from the ring: a replay skips them). */
int ring_append(struct api_term *t, int stream, uint64_t off,
    const unsigned char *p, size_t n, const struct term_cut *before);
/* The first safe cut at or after want (>= ring_start): every stream's
 * parser state there is safe (api_term_cut.h); t->total when none. */
uint64_t ring_cut(const struct api_term *t, uint64_t want);
/* Logs one record (stream, n bytes at t->total, the stream's state
 * before); a new segment after terminal_scrollback bytes, the one before
 * the current removed. A failure is logged; the ring still gets them. */
void log_append(struct api_term *t, int stream, const unsigned char *p,
    size_t n, const struct term_cut *before);
/* Reads the ring back from the log when it is not in memory; sets
 * t->total and t->cut_live from it. */
void ring_load(struct api_term *t);

/* api_term_http.c: the route handlers (api_int.h names them). */

#endif
