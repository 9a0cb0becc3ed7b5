/* driver_broker_int.h - internals shared by the broker-client driver's files (not a public header): the op, its kind row, the op's life (driver_broker_op.c), the error wording (driver_broker_err.c) and each kind's entry points. */
#ifndef DRIVER_BROKER_INT_H
#define DRIVER_BROKER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "sbx_driver.h"
#include "sbx_err.h"

/*
 * The layers, top down: driver_broker.c (the vtable, the driver) names the
 * kinds' entry points; driver_broker_plain.c, _exec.c and _files.c (one row
 * of struct bkind and the ops of each kind) call the op's life; the op's
 * life (driver_broker_op.c) reaches a kind only through b->kind, and the
 * error wording (driver_broker_err.c) calls nothing of the driver.
 */

struct evbuffer;
struct sbx_http_req;
struct sbx_ndjson_parser;
struct sbx_event;
struct bpump;
struct lscan;
struct bop;

/*
 * One row per kind of op: how its answer reaches the caller. The HTTP
 * client's callbacks (driver_broker_op.c) go through the op's row and know
 * no kind; each kind's functions stand beside its row, in its own file.
 */
struct bkind {
	/* The answer's head came (b->status set). A kind whose body is not
	 * one JSON document to buffer takes it over here: it sets
	 * b->streaming and feed gets the bytes. NULL: buffered for finish.
	 * b->busy is held around it: it may end the op (dbk_op_end), which
	 * is freed after it returns. */
	void (*begin)(struct bop *b);
	/* Bytes of a body begin took over (b->busy held around it, too). */
	void (*feed)(struct bop *b, const unsigned char *p, size_t n);
	/* The answer ended; terr is the transport's error, else NULL. Makes
	 * the caller's one terminal callback (b->busy held around it); the op
	 * ends after it. */
	void (*finish)(struct bop *b, const struct sbx_err *terr);
	/* Optional: the caller's pause (on 1) and resume (0) of a kind that
	 * keeps reading while paused (a session withholds credit instead,
	 * adr/0055). NULL: the connection stops being read. */
	void (*pause)(struct bop *b, int on);
	/* Optional: frees b->kstate (dbk_op_free, whatever ended the op). */
	void (*release)(struct bop *b);
};

struct bdriver {
	struct sbx_driver base;
	char *address;
	char *auth;                 /* "Authorization: Bearer TOKEN", sodium_malloc */
	int64_t header_timeout_ms;
	size_t write_out_max;       /* write_stream's output bound */
	struct bop *live;
};

struct bop {
	struct sbx_op op;           /* first: sbx_op_* find the driver here */
	struct bdriver *d;
	const struct bkind *kind;
	struct sbx_http_req *http;
	struct sbx_op_cb cb;          /* the caller's, of the op's kind */
	struct sbx_sink sink;
	sbx_line_cb line;           /* exec_lines: output lines as received */
	void *arg;
	char id[64];
	int status;                 /* HTTP status of the broker's answer */
	int streaming;              /* the kind's feed takes the body (begin) */
	struct evbuffer *body;      /* JSON answer or error body */
	struct sbx_ndjson_parser *parser;
	int started;
	int have_exit;
	struct sbx_exit exit;
	char exit_signal[32];
	int have_error;
	struct sbx_err error;
	int busy;                   /* inside one of our callbacks */
	int dead;                   /* cancelled or ended: free when not busy */
	struct bpump *pump;         /* write_stream's body (adr/0030) */
	struct lscan *lscan;        /* list: the page decoded as it arrives */
	size_t list_limit;          /* list: entries asked for (0: the ceiling) */
	struct bop *prev, *next;
	void *kstate;               /* the kind's own state (kind->release) */
	const char *upgrade;        /* set before start: an Upgrade request
	                             * with this value (a static string) */
};

/* ------------------------------------------------------------------ */
/* The op's life (driver_broker_op.c)                                  */

/* A new op of kind on d for sandbox id (NULL: none; else checked with
 * sbx_id_valid), linked into d->live; arg is the caller's callback
 * argument (the caller stores its callback in b->cb or b->sink). NULL with
 * err: invalid_id, internal (out of memory). */
struct bop *dbk_op_new(struct bdriver *d, const struct bkind *kind,
    const char *id, void *arg, struct sbx_err *err);

/* Unlinks and frees b now (its request cancelled); the driver's free. */
void dbk_op_free(struct bop *b);

/* The op ended (its terminal callback made, or cancelled): the request
 * is cancelled, b is freed once no callback of ours is on the stack. */
void dbk_op_end(struct bop *b);

/* Starts b's request: method on path (borrowed, copied), body_len bytes
 * of body copied (ctype NULL: no body). Returns &b->op; on failure frees
 * b and returns NULL with err (the HTTP client's: bad address, internal).
 * Never calls back before it returns. */
struct sbx_op *dbk_op_start(struct bop *b, const char *method,
    const char *path, const char *ctype, const void *body, size_t body_len,
    struct sbx_err *err);

/* Like dbk_op_start with a body of len bytes the caller streams into
 * b->http (write_stream's pump, adr/0030). */
struct sbx_op *dbk_op_start_stream(struct bop *b, const char *method,
    const char *path, const char *ctype, uint64_t len, struct sbx_err *err);

/* Starts method on SBX_PATH_SANDBOXES "/{b->id}{suffix}" with obj (owned;
 * NULL: no body) as its JSON body. On failure b is freed; NULL with err
 * (bad_request: obj cannot be encoded, or dbk_op_start's). */
struct sbx_op *dbk_op_start_id(struct bop *b, const char *method,
    const char *suffix, json_t *obj, struct sbx_err *err);

/* The buffered body parsed as JSON (new reference), NULL when empty or
 * not JSON. */
json_t *dbk_op_json(struct bop *b);

/* The error of a plain answer into e: the transport's (terr), else the
 * broker's for a status other than 2xx. Returns 0 for a 2xx answer (e
 * clear), else -1. */
int dbk_op_answer_error(struct bop *b, const struct sbx_err *terr,
    struct sbx_err *e);

/* A 2xx answer's JSON body (the caller decrefs), or NULL with e set
 * (dbk_op_answer_error's, or an answer the api cannot read). */
json_t *dbk_op_answer_json(struct bop *b, const struct sbx_err *terr,
    struct sbx_err *e);

/* The end of a stream op's answer before its kind's own ending: a
 * transport error, or an answer that was no stream (the broker's error),
 * goes to the sink as its error. Returns 0 when the stream came and the
 * kind ends it, -1 when the sink has had its terminal error. */
int dbk_op_stream_ended(struct bop *b, const struct sbx_err *terr);

/* An exit event (an exec's NDJSON line, a session's EVENT) kept in
 * b->exit, its signal name copied into b->exit_signal; have_exit set. */
void dbk_op_keep_exit(struct bop *b, const struct sbx_event *ev);

/* The vtable's cancel, pause and resume (sbx_driver.h): closing the
 * connection is the cancel (the broker then kills an exec's tree). */
void dbk_cancel(struct sbx_driver *drv, struct sbx_op *op);
void dbk_pause(struct sbx_driver *drv, struct sbx_op *op);
void dbk_resume(struct sbx_driver *drv, struct sbx_op *op);

/* e for the caller's callback: NULL when no error is set. */
static inline const struct sbx_err *
dbk_err_or_null(const struct sbx_err *e)
{
	return sbx_err_is_set(e) ? e : NULL;
}

/* ------------------------------------------------------------------ */
/* The broker's answer as an sbx_err (driver_broker_err.c)             */

/* The broker's answer of HTTP status with body (its JSON error, or just
 * the status) as an sbx_err for the api's callers: 401 and the broker's
 * unauthorized become broker_unavailable (the api's credential, never the
 * caller's); a body that is no error object: not_found (404),
 * broker_unavailable (5xx) or internal. body is read, not drained. */
void dbk_error_from_body(int status, struct evbuffer *body,
    struct sbx_err *e);

/* A transport error of the HTTP client (in) worded for the api's callers
 * into e: broker_unavailable gets "Sandbox broker unavailable: ..."; any
 * other is copied. */
void dbk_error_from_transport(const struct sbx_err *in, struct sbx_err *e);

/* broker_unavailable, "The sandbox broker sent an answer the api cannot
 * read.": a 2xx body that does not decode. */
void dbk_error_malformed(struct sbx_err *e);

/* ------------------------------------------------------------------ */
/* The kinds' entry points: the vtable's operations (sbx_driver.h)      */

/* driver_broker_plain.c: one JSON answer, or none. */
extern const struct bkind dbk_kind_done;   /* cb.done; also write's */
/* driver_broker_snap.c (adr/0068): the snapshot ops of sbx_driver.h. */
struct sbx_op *dbk_snapshot_create(struct sbx_driver *drv, const char *id,
    const struct sbx_snapshot_req *req, sbx_json_cb cb, void *arg,
    struct sbx_err *err);
struct sbx_op *dbk_snapshot_list(struct sbx_driver *drv, const char *id,
    const char *owner, sbx_json_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_snapshot_delete(struct sbx_driver *drv, const char *id,
    const char *name, sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_snapshot_copy(struct sbx_driver *drv, const char *id,
    const char *from, const char *name, sbx_done_cb cb, void *arg,
    struct sbx_err *err);
struct sbx_op *dbk_ensure(struct sbx_driver *drv, const char *id,
    const struct sbx_spec *spec, sbx_status_cb cb, void *arg,
    struct sbx_err *err);
struct sbx_op *dbk_status(struct sbx_driver *drv, const char *id,
    sbx_status_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_status_usage(struct sbx_driver *drv, const char *id,
    sbx_status_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_egress_stats(struct sbx_driver *drv, const char *id,
    sbx_json_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_stop(struct sbx_driver *drv, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_destroy(struct sbx_driver *drv, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_list_sandboxes(struct sbx_driver *drv,
    sbx_sandboxes_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_health(struct sbx_driver *drv, sbx_health_cb cb,
    void *arg, struct sbx_err *err);

/* driver_broker_exec.c: the NDJSON event stream. */
struct sbx_op *dbk_exec(struct sbx_driver *drv, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);
struct sbx_op *dbk_exec_lines(struct sbx_driver *drv, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    sbx_line_cb line, struct sbx_err *err);

/* driver_broker_session.c: sessions over the broker link (adr/0055). */
struct sbx_op *dbk_session(struct sbx_driver *drv, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);
ssize_t dbk_session_write(struct sbx_driver *drv, struct sbx_op *op,
    struct evbuffer *src, size_t max);
size_t dbk_session_room(struct sbx_driver *drv, struct sbx_op *op);
void dbk_session_close_input(struct sbx_driver *drv, struct sbx_op *op);
int dbk_session_control(struct sbx_driver *drv, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err);

/* driver_broker_files.c: /files and /list. */
struct sbx_op *dbk_read(struct sbx_driver *drv, const char *id,
    const char *path, const struct sbx_sink *sink, struct sbx_err *err);
struct sbx_op *dbk_write(struct sbx_driver *drv, const char *id,
    const char *path, uint32_t mode, struct evbuffer *body, sbx_done_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *dbk_write_stream(struct sbx_driver *drv, const char *id,
    const char *path, uint32_t mode, struct evbuffer *src, uint64_t len,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *dbk_list(struct sbx_driver *drv, const char *id,
    const char *path, const struct sbx_list_page *page, sbx_list_cb cb,
    void *arg, struct sbx_err *err);

#endif
