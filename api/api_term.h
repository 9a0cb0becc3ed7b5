/* api_term.h - sandbox-api terminals as resources (docs/api.md "Terminals", adr/0051): what a viewer transport (the SSE routes of api_term_http.c, the WebSocket attach of slice ws) calls to attach to a terminal, read its output from an offset, and write to it. Everything runs on the api's event loop. */
#ifndef API_TERM_H
#define API_TERM_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_err.h"
#include "sbx_types.h"

/* The sentence a viewer gets when the api drains (SIGTERM): the SSE
 * viewer's last error event shutting_down, the WebSocket's close 1001
 * reason. sbxctl recognises it by its start ("The api is shutting down"). */
#define TERM_MSG_SHUTDOWN "The api is shutting down; the terminal ends with it."

struct api_server;
struct api_principal;
struct api_term;
struct api_viewer;

/*
 * What a terminal tells one viewer. arg is the viewer's own (api_term_attach).
 * A callback may detach its viewer (api_viewer_detach) or pause it; it must
 * not free the terminal's server.
 *
 * output: bytes of stream (1: stdout or the pty, 2: stderr of a pty:false
 *   terminal) that start at absolute offset (bytes of output since the
 *   terminal started, both streams counted); p is valid during the call
 *   only. Offsets a viewer gets only grow; a gap (offset beyond the end of
 *   the previous call) was announced by skipped.
 * ended: once, after the last output this viewer gets: state is the
 *   terminal's final state ("exited", "killed", "ended", "failed"), code
 *   the exit status (-1 when it has none), signal the signal name or NULL,
 *   err the reason when the terminal did not end by itself (else NULL).
 *   The viewer stays attached (it may still be detached).
 * writer: the viewer's write permission changed (you 1: it is the writer
 *   now; adr/0051 "One writer"). Not called at attach: ask
 *   api_viewer_is_writer.
 * skipped (optional, may be NULL): the viewer was paused so long that the
 *   bytes [from, to) left the scrollback before it read them; the next
 *   output starts at to or after (a safe cut).
 * room (optional, may be NULL): input refused with too_many may be sent
 *   again now (the terminal's input queue drained).
 */
struct api_viewer_ops {
	void (*output)(void *arg, int stream, uint64_t offset, const unsigned char *p, size_t n);
	void (*ended)(void *arg, const char *state, int code, const char *signal, const struct sbx_err *err);
	void (*writer)(void *arg, int you);   /* write permission changed */
	void (*skipped)(void *arg, uint64_t from, uint64_t to);
	void (*room)(void *arg);
};

/*
 * Attaches a viewer to t that may write: replay from offset (0: from the
 * oldest byte kept; an offset older than what is kept starts at the oldest
 * kept byte), moved forward to a safe cut (never inside a UTF-8 sequence
 * or an ANSI/VT escape sequence, api_term_cut.h); *start gets where the
 * replay starts. The replay and then the live output arrive through
 * ops->output from the next turn of the loop on, never during this call.
 * The first viewer that may write is the writer; the others are
 * read-only until it detaches. Works on ended terminals too (replay, then
 * ended). ops must outlive the viewer. Returns the viewer (freed by
 * api_viewer_detach), or NULL with err: bad_request (offset beyond the
 * output so far), internal (out of memory, the log unreadable).
 */
struct api_viewer *api_term_attach(struct api_server *a, struct api_term *t, uint64_t offset,
    const struct api_viewer_ops *ops, void *arg, uint64_t *start, struct sbx_err *err);
/* Detaches and frees v (no callback of v runs afterwards). A writer that
 * goes hands the write permission to the oldest remaining viewer that may
 * write (its writer callback). NULL: nothing. */
void api_viewer_detach(struct api_viewer *v);
/* The viewer's output backed up (on 1) or drained (on 0). A paused viewer
 * gets nothing and costs the terminal nothing but its offset: when it
 * resumes it reads on from the scrollback, or, if it fell behind what is
 * kept, gets skipped and goes on from the oldest kept byte. */
void api_viewer_pause(struct api_viewer *v, int on);
/* 1 when v is its terminal's writer. */
int api_viewer_is_writer(const struct api_viewer *v);
/*
 * Input from viewer v (its writer) to the terminal's stdin or pty: queued
 * whole, sent as fast as the broker takes it. Returns 0, or -1 with err:
 * forbidden (v is not the writer), conflict (the terminal has ended or
 * its input was closed), too_many (more than terminal_input_max bytes
 * would be queued: send again after ops->room).
 */
int api_term_input(struct api_viewer *v, const unsigned char *p, size_t n, struct sbx_err *err);
/* Resize (pty terminals: cols, rows 1..10000) or a signal (1..64) from
 * the writer v. Returns 0, or -1 with err: forbidden (not the writer),
 * bad_request (out of range, resize of a pty:false terminal), conflict
 * (ended). */
int api_term_control(struct api_viewer *v, const struct sbx_session_ctl *c, struct sbx_err *err);
/* End of input from the writer v: a pty:false terminal's stdin is closed
 * once the queued input went out; a pty terminal ignores it (send ^D as
 * a byte). Returns 0, or -1 when v is not the writer or t has ended. */
int api_term_eof(struct api_viewer *v);
/* Finds terminal id of the NPC named npc (the terminal of that NPC's
 * owner; the caller has checked that the requester may use the NPC, so
 * another player's terminal is never reached: 404). NULL with err
 * not_found. */
struct api_term *api_term_find(struct api_server *a, const char *npc, const char *id, struct sbx_err *err);

/*
 * Opens a terminal as POST .../terminals does (the same record, limits and
 * session; for a's NPC, counted against a->who), for a caller that is not
 * that POST (E2B's process.Process Start, adr/0060): instead of a reply,
 * started(arg, t, NULL) runs once when its session started (t running),
 * or started(arg, NULL, err) when the session was refused (no record is
 * kept; a not_running does not wake the sandbox). Never called during
 * this call. argv_preview: what lists show of the command. Returns 0, or
 * -1 with err and started never called: too_many (terminals_per_principal),
 * internal, or the driver's refusal.
 */
typedef void (*api_term_started_fn)(void *arg, struct api_term *t, const struct sbx_err *err);
struct areq;
int api_term_open(struct areq *a, const struct sbx_session_req *req, const char *argv_preview,
    api_term_started_fn started, void *arg, struct sbx_err *err);
/* 1 while t runs (its session is open). */
int api_term_running(const struct api_term *t);
/* The owner's requests on t without a viewer, as the owner's POST routes
 * do (input, control, end of input, DELETE): same returns as
 * api_term_input / _control / _eof minus forbidden; kill ends t killed
 * (reason cancelled, "Killed by who.") and does nothing to an ended t. */
int api_term_write(struct api_term *t, const unsigned char *p, size_t n, struct sbx_err *err);
int api_term_ctl(struct api_term *t, const struct sbx_session_ctl *c, struct sbx_err *err);
int api_term_close_input(struct api_term *t);
void api_term_kill(struct api_term *t, const char *who);

/* t's id ("t" and 24 hex digits), 1 when it runs a pty, its output so far
 * (the next byte's offset). */
const char *api_term_id(const struct api_term *t);
int api_term_is_pty(const struct api_term *t);
uint64_t api_term_offset(const struct api_term *t);

/*
 * A terminal route's credential without a key: npc and id name the
 * terminal, query holds "ticket=T" (NULL: none). Returns 1 with *who the
 * ticket's principal when T is a live ticket of that terminal and the
 * principal is active and still owns the NPC or operates; 0 otherwise
 * (401); -1 when the database fails. Tickets live in memory only
 * (adr/0051): an api restart ends every running terminal anyway.
 */
int api_term_ticket_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, struct api_principal *who);

#endif
