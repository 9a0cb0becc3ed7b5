/* driver_engine_int.h - private to broker/driver_engine*.c: the driver, its operations' state and the calls the files share. */
#ifndef DRIVER_ENGINE_INT_H
#define DRIVER_ENGINE_INT_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "driver_engine.h"
#include "sbx_helper_proto.h"
#include "sbx_http_client.h"
#include "sbx_proto.h"
#include "sbx_time.h"

/*
 * Layout (adr/0020): driver_engine.c the ops table, the driver and the op
 * lifetime; _call.c one runtime call and inspect parsing; _ensure.c ensure
 * (container, volume, init container, egress network); _helper.c the
 * helper volume; _life.c status, stop, destroy, list, reconcile, health;
 * _run.c one sbx-helper invocation (the seam issue 13's agent replaces);
 * _exec.c exec and the helper's frames; _files.c read, write, list, du,
 * killall.
 */

#define API "/v1.41"                   /* Engine API version pinned (adr/0001) */
#define STREAM_CHUNK (64 * 1024)
#define RESP_MAX (8 * 1024 * 1024)     /* JSON answers of the runtime */
#define ERRTAIL_MAX 2048               /* stderr kept to read the helper's error */
#define LIST_LINE_MAX 4096             /* one entry line of sbx-helper list */
#define HELPER_GRACE_MS 2000           /* helper's own timeout trails ours */
#define KILL_TIMEOUT_MS 10000
#define ENSURE_RETRIES 5               /* create races lost before giving up */
#define L_MANAGED "io.sbx.managed"
#define L_ID "io.sbx.id"
#define L_EGRESS "io.sbx.egress"
#define L_IMAGE "io.sbx.image"
#define L_HELPER "io.sbx.helper"         /* the helper volume a container mounts */
#define L_HELPER_SHA "io.sbx.helper-sha256"
#define L_HELPER_STEM "io.sbx.helper-stem"
#define L_ROLE "io.sbx.role"             /* helper-fill, init: not sandboxes */

enum flavor { FLAVOR_UNKNOWN, FLAVOR_DOCKER, FLAVOR_PODMAN };
enum hstate { H_NONE, H_BUSY, H_READY };

struct eop;
struct eop_ensure;

struct engine {
	struct sbx_driver base;       /* first: callers hold a struct sbx_driver * */
	char *address;                /* "unix:/path" */
	char *default_image;
	char **images;                /* NULL-terminated, default included */
	char *user;
	struct sbx_engine_limit mem, cpus, pids, timeout;
	int64_t tmp_bytes, output_cap, file_max, file_timeout;
	char *helper_path;
	char *oci_runtime;
	char *bridge_prefix;          /* host interface names of egress networks */
	char *prefix;
	int stop_timeout_s;
	int64_t req_timeout_ms;
	int64_t usage_timeout_ms, usage_max; /* status_usage's walk */
	unsigned uid, gid;            /* of user */
	int64_t run_bytes;            /* SBX_HELPER_RUN_DIR tmpfs size */
	/* The helper, read once (adr/0009): its bytes as a one-file tar, the
	 * volume named after its hash, and whether that volume is filled. */
	unsigned char *helper_tar;
	size_t helper_tar_len, helper_len;
	char helper_sha[65];
	char helper_stem[64];
	char helper_vol[96];
	char helper_err[256];         /* why the helper could not be read */
	/* The egress proxy (adr/0026): sbx-proxy beside the helper, read once
	 * as a one-file tar; its resolver and memory limit. */
	unsigned char *proxy_tar;
	size_t proxy_tar_len;
	char *proxy_resolver;
	int64_t proxy_mem;
	enum flavor flavor;           /* learnt from /version before any create */
	enum hstate hstate;
	TAILQ_HEAD(, eop_ensure) hwait; /* ensures waiting for the helper volume */
	TAILQ_HEAD(, eop) ops;
	/* The sandboxes' agents (driver_engine_agent.c, adr/0025). */
	int agent_on;
	int64_t agent_idle_ms, agent_ping_ms, agent_fresh_ms;
	uint64_t agent_restarts;
	TAILQ_HEAD(, eng_agent) agents;
};

enum op_kind {
	OP_ENSURE, OP_STATUS, OP_EXEC, OP_READ, OP_WRITE, OP_LIST, OP_STOP,
	OP_DESTROY, OP_SANDBOXES, OP_HEALTH, OP_KILL, OP_RECOVER, OP_RECONCILE,
	OP_HELPER, OP_HGC,            /* internal: fill the helper volume, drop old ones */
	OP_USAGE,                     /* status + sbx-helper du (adr/0017) */
	OP_AGENT,                     /* internal: the runtime calls starting an agent */
	OP_EGRESS,                    /* the egress proxy's log (adr/0026) */
};

/* A runtime call's continuation: the HTTP status and the parsed answer, or
 * err (transport, timeout, answer too large) with status 0 or the status. */
typedef void (*cont_fn)(struct eop *, int status, json_t *body,
    const struct sbx_err *err);

/*
 * What every operation has: the handle callers hold, the sandbox's names,
 * the one runtime call in flight and the caller's callback. Each kind
 * embeds this first in its own state struct below (op_new allocates the
 * kind's size); a kind's accessor casts to it.
 */
struct eop {
	struct sbx_op base;           /* first */
	struct engine *e;
	TAILQ_ENTRY(eop) link;
	enum op_kind kind;
	int busy, dead;               /* a sink may cancel from inside output() */
	void (*fini)(struct eop *);   /* frees the kind's own state, or NULL */
	char id[64];
	char cname[128];              /* container name */
	char vname[140];              /* volume name */
	char nname[140];              /* egress network name */
	char cid[80];                 /* runtime container id once inspected */
	void (*then)(struct eop *);   /* eng_net_drop's continuation */

	/* The runtime call in flight (one at a time). */
	struct sbx_http_req *http;
	struct evbuffer *resp;
	int resp_over;
	int raw;                      /* eng_call: the answer stays raw in resp */
	cont_fn cont;

	/* The caller's callback: the one of the op's kind is set. */
	struct sbx_op_cb cb;          /* the caller's, of the op's kind */
	void *arg;

	struct event *defer;          /* reports a failure from the loop */
	struct sbx_err derr;
};

/* OP_ENSURE */
struct eop_ensure {
	struct eop op;
	char image[256];
	int egress;
	int64_t mem, cpus, pids;
	int drop_net;                 /* egress revoked: remove its network */
	json_t *allow;                /* egress by allowlist (adr/0026), else NULL */
	int proxy_done;               /* the proxy checked in this ensure */
	int drop_proxy;               /* the old container had a proxy, this one not */
	int px_tries;
	char px_cid[80];
	char px_vol[160];             /* "<prefix><id>-egsock" */
	void (*proxy_then)(struct eop *);
	int retries;                  /* lost create races so far */
	struct event *retry;
	int need_init;                /* Docker: chown /work in an init container */
	int waiting;                  /* on e->hwait */
	TAILQ_ENTRY(eop_ensure) wlink;
	char old_helper[96];          /* helper label of the container removed */
	char aux_cid[80];             /* the init container */
	int aux_tries;
	int64_t aux_code;             /* its exit status */
	struct sbx_err aux_err;       /* the failure reported after its removal */
};

/* OP_DESTROY */
struct eop_destroy {
	struct eop op;
	char old_helper[96];          /* helper label of the container removed */
};

/* OP_HELPER: fills the helper volume */
struct eop_helper {
	struct eop op;
	char image[256];              /* of the ensure that asked first */
	char aux_cid[80];             /* the fill container */
	int aux_tries;
	struct sbx_err aux_err;       /* the failure reported after its removal */
};

/* OP_HGC: removes old helper volumes */
struct eop_gc {
	struct eop op;
	json_t *gc;                   /* volume names to remove */
	size_t gc_i;
};

/* OP_RECONCILE */
struct eop_reconcile {
	struct eop op;
	json_t *rkeep;                /* ids whose egress network stays */
	json_t *rnets;                /* managed networks, walked by ri */
	size_t ri;
	unsigned rgone;
	/* egress proxies (adr/0026, adr/0027) */
	json_t *rsbx;                 /* sandbox id -> true running / false stopped */
	json_t *rpx;                  /* managed proxy containers, walked by pi */
	json_t *rvols;                /* managed socket volumes, walked by pi */
	size_t pi;
	unsigned pgone;
	void (*rthen)(struct eop *);
};

/* OP_HEALTH */
struct eop_health {
	struct eop op;
	struct sbx_health health;
};

/* Where the demultiplexer of a runtime's attach stream is (eng_demux_next). */
struct eng_demux {
	unsigned char hdr[8];
	size_t hdr_len;
	uint32_t left;                /* payload bytes left in this frame */
	int stream;                   /* 0 stdin, 1 stdout, 2 stderr */
};

/*
 * One sbx-helper invocation (driver_engine_run.c): OP_EXEC, OP_READ,
 * OP_WRITE, OP_LIST, OP_KILL, OP_RECOVER, OP_USAGE. The helper's argv,
 * env and stdin, its bounds, and how its output and exit reach the kind.
 */
struct eop_exec {
	struct eop op;
	json_t *cmd;                  /* helper argv */
	json_t *env;
	char exec_id[40];             /* ours, the helper's kill handle */
	char rexec[80];               /* the runtime's exec id */
	struct evbuffer *stdin_buf;
	int has_stdin;
	int64_t timeout_ms, cap, delivered, started_ms;
	struct event *timer;
	struct eng_demux demux;       /* the runtime's 8-byte stream frames */
	struct evbuffer *out;         /* stdout kept (list, write, du, kill) */
	/* read, write, list: no progress for file_timeout ends the op */
	struct event *ftimer;
	struct evbuffer *errtail;     /* stderr kept (helper error line) */
	int paused, streaming, stream_started, got_stream;
	int timed_out, truncated, killing;
	int polls;
	struct eop *kill;             /* kill exec run on our behalf */
	struct eop *parent;           /* for a kill: who waits for it */
	struct sbx_err kerr;
	struct sbx_sink sink;         /* exec, read */
	/* The helper exited with status code (runtime's exit status). */
	void (*exited)(struct eop *, int code);
	/* Through the agent (driver_engine_agent.c): the stream, and the
	 * event that reports its start from the loop. */
	struct sbx_agent_stream *ast;
	struct event *astart;
};

/* OP_EXEC: sbx-helper's frames inside the runtime's stdout stream
 * (sbx_helper_proto.h, exec --framed); untrusted, checked strictly */
struct eop_cmd {
	struct eop_exec x;
	unsigned char hhdr[SBX_HELPER_FRAME_HDR];
	size_t hhdr_len;
	int htype;                    /* frame being read; 0: a header */
	uint32_t hleft;               /* its payload bytes still to come */
	unsigned char hrec[SBX_HELPER_ERROR_REC_MAX]; /* a record's payload */
	size_t hrec_len;
	int got_exit, got_herr;
	int xhow, xcode, xsig, xtimeout; /* the exit record */
	char herr_code[48], herr_msg[256]; /* the error record */
};

/* OP_LIST: the page parsed line by line as it arrives */
struct eop_list {
	struct eop_exec x;
	struct sbx_dirent *ents;
	size_t nents, ents_cap, list_limit;
	int list_end, list_trunc, list_bad;
	char after_hex[2 * 255 + 1];
};

/* OP_WRITE: write_stream's body source (adr/0018); src_left bytes of it
 * still to send, sent only while the runtime connection's output holds
 * less than WRITE_OUT_MAX */
struct eop_write {
	struct eop_exec x;
	struct evbuffer *src;
	struct evbuffer_cb_entry *src_ent;
	uint64_t src_left;
};

/* OP_USAGE */
struct eop_usage {
	struct eop_exec x;
	struct sbx_status ust;        /* the status the walk adds to */
};

/* OP_KILL */
struct eop_kill {
	struct eop_exec x;
	int retries;                  /* runtime unreachable so far */
	struct event *retry;
};

/* The kinds' accessors: op must be of a kind the struct belongs to. */
static inline struct eop_ensure *ens(struct eop *op)
{
	return (struct eop_ensure *)op;
}
static inline struct eop_destroy *dst(struct eop *op)
{
	return (struct eop_destroy *)op;
}
static inline struct eop_helper *hlp(struct eop *op)
{
	return (struct eop_helper *)op;
}
static inline struct eop_gc *gco(struct eop *op)
{
	return (struct eop_gc *)op;
}
static inline struct eop_reconcile *rco(struct eop *op)
{
	return (struct eop_reconcile *)op;
}
static inline struct eop_health *hlt(struct eop *op)
{
	return (struct eop_health *)op;
}
static inline struct eop_exec *xop(struct eop *op)
{
	return (struct eop_exec *)op;
}
static inline struct eop_cmd *cmo(struct eop *op)
{
	return (struct eop_cmd *)op;
}
static inline struct eop_list *lso(struct eop *op)
{
	return (struct eop_list *)op;
}
static inline struct eop_write *wro(struct eop *op)
{
	return (struct eop_write *)op;
}
static inline struct eop_usage *uso(struct eop *op)
{
	return (struct eop_usage *)op;
}
static inline struct eop_kill *kio(struct eop *op)
{
	return (struct eop_kill *)op;
}

/* ---- driver_engine.c: op lifetime ---- */

/* A new op of kind (size bytes, its state struct) for sandbox id (NULL:
 * none; else checked with sbx_id_valid: invalid_id), on e's list. NULL
 * with err invalid_id or internal. */
struct eop *eng_op_new(struct engine *e, enum op_kind kind, const char *id,
    size_t size, struct sbx_err *err);
/* Frees op at once (NULL: no-op); only where no callback frame holds it. */
void eng_op_free(struct eop *op);
/* Frees op now, or when the outermost callback frame on it returns. */
void eng_op_release(struct eop *op);
void eng_op_enter(struct eop *op);
/* Returns 1 when op is still alive. */
int eng_op_leave(struct eop *op);
/* Terminal callbacks: each releases op. */
void eng_finish_status(struct eop *op, const struct sbx_err *err,
    const struct sbx_status *st);
void eng_finish_done(struct eop *op, const struct sbx_err *err);
void eng_finish_sink_error(struct eop *op, const struct sbx_err *err);
/* Any op's failure, routed to the callback its kind has. */
void eng_finish_err(struct eop *op, const struct sbx_err *err);
/* Reports err from the event loop (a request that could not be sent). */
void eng_fail_later(struct eop *op, const struct sbx_err *err);

/* ---- driver_engine_call.c: one runtime call, inspect parsing ---- */

/* 0 when id follows SPEC §4 (sbx_id_valid), else -1 with err invalid_id. */
int eng_id_check(const char *id, struct sbx_err *err);
/* 1 when s is 1..max bytes of [A-Za-z0-9_.-]. */
int eng_name_ok(const char *s, size_t max);
/* sbx_path_check (SPEC §4) of NUL-terminated p (NULL refused): 0, or -1
 * with err path_outside_work. */
int eng_path_check(const char *p, struct sbx_err *err);
void eng_urlencode(const char *in, char *out, size_t outsz);
/* "" when key is absent or not a string. */
const char *eng_jstr(json_t *o, const char *key);
const char *eng_label(json_t *labels, const char *key);
int eng_managed(json_t *labels);
/* err = runtime_error "runtime refused to WHAT (HTTP n): message". */
void eng_runtime_err(struct sbx_err *err, int status, json_t *body,
    const char *what);
/* err = runtime_error "image I is not present in the runtime ...". */
void eng_image_missing(struct sbx_err *err, const char *image);
/* A create that lost a race (Docker 409, Podman 500 "already ..."). */
int eng_name_taken(int status, json_t *body);
/*
 * The common check of a continuation: err, or a status not in ok (a list
 * ending in 0) -> the op ends through fail (NULL: eng_finish_err) with err
 * or "runtime refused to WHAT"; returns 1 then, else 0.
 */
int eng_reply_bad(struct eop *op, void (*fail)(struct eop *,
    const struct sbx_err *), const struct sbx_err *err, int status,
    json_t *body, const char *what, const int *ok);
#define REPLY_BAD(op, fail, err, status, body, what, ...) \
	eng_reply_bad(op, fail, err, status, body, what, \
	    (const int[]){ __VA_ARGS__, 0 })
/* One JSON call: body stolen (NULL: none); continues in cont. */
void eng_call(struct eop *op, const char *method, const char *path,
    json_t *body, cont_fn cont);
/*
 * eng_call with the path printed from fmt and its arguments (API "/..."
 * and the names it holds; at most 511 bytes, the rest cut): the one
 * runtime call of a step, body stolen (NULL: none), answered in cont.
 */
void eng_callf(struct eop *op, const char *method, json_t *body, cont_fn cont,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* One call with len bytes of data of ctype; with op->raw set the answer
 * stays raw in op->resp. */
void eng_call_bytes(struct eop *op, const char *method, const char *path,
    const char *ctype, const void *data, size_t len, cont_fn cont);
/* The body callback of eng_call (an error answer of a stream too). */
void eng_call_body(void *arg, struct sbx_http_req *req,
    const unsigned char *buf, size_t len);
/* A container inspect answer -> st (and op->cid); conflict when not ours. */
int eng_status_from_inspect(struct eop *op, json_t *c, struct sbx_status *st,
    struct sbx_err *err);
void eng_absent_status(struct eop *op, struct sbx_status *st);
void eng_inspect_path(struct eop *op, char *path, size_t sz);
/* 1 running, 0 absent or stopped (st filled), -1 op already finished. */
int eng_inspect_running(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, struct sbx_status *st);
/* A continuation's first check: when err is not NULL (the call got no
 * answer: transport, timeout), ends op with it and returns 1 (op is gone
 * then); else 0. */
int eng_ended(struct eop *op, const struct sbx_err *err);
/* e = conflict "a KIND named NAME exists that sbx does not manage; it was
 * left alone" (docs/security.md: what lacks io.sbx.managed=true is a 409
 * and never touched); returns -1. */
int eng_not_ours(struct sbx_err *e, const char *kind, const char *name);
/* e = not_found "sandbox ID does not exist" for op's sandbox (sbx_driver.h:
 * an operation on an id with no container); returns -1. */
int eng_not_found(const struct eop *op, struct sbx_err *e);
/*
 * After eng_inspect_running answered r (0 or 1) with st: when the container
 * is absent, ends op with eng_not_found's error and returns 1 (op is gone
 * then); a stopped or running one returns 0 and op goes on.
 */
int eng_finish_if_absent(struct eop *op, int r, const struct sbx_status *st);
/* 1 found (st; *helper if not NULL: its L_HELPER label or NULL, in body),
 * 0 absent (404), -1 op already finished. */
/*
 * Creates a runtime exec of cmd (a JSON array, borrowed) with env (array
 * of NAME=value, borrowed; NULL: none) in op's container op->cid, as the
 * sandbox user in SBX_WORK_DIR, stdout and stderr attached, stdin too when
 * with_stdin (POST /containers/{id}/exec, Engine API v1.41); the answer
 * goes to cont (read it with eng_exec_created_id). -1 when the body cannot
 * be built (out of memory): nothing was sent.
 */
int eng_exec_create(struct eop *op, int with_stdin, json_t *env, json_t *cmd,
    cont_fn cont);
/*
 * The answer to eng_exec_create: 0 with the runtime's exec id in rexec (sz
 * bytes), or -1 with e: err's copy (no answer), not_found (404),
 * not_running (409), runtime_error (another status, with what in its
 * sentence, or an answer without a usable id).
 */
int eng_exec_created_id(const struct eop *op, int status, json_t *body,
    const struct sbx_err *err, const char *what, char *rexec, size_t sz,
    struct sbx_err *e);
/* Starts runtime exec rexec attached (POST /exec/{id}/start, Detach and Tty
 * false, upgraded: Engine API v1.41 hijack) with cbs on e's runtime socket.
 * Returns the request (the caller owns it until cbs->done), or NULL with err
 * set (internal, runtime_unavailable) and nothing called back. */
struct sbx_http_req *eng_exec_start_stream(struct engine *e, const char *rexec,
    const struct sbx_http_cbs *cbs, struct sbx_err *err);

int eng_inspect_found(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, struct sbx_status *st, const char **helper);

/* ---- driver_engine_proxy.c (adr/0026) ---- */
/* Makes sure op's egress proxy runs with ens(op)->allow (its socket volume,
 * its container replaced when the policy differs), then then(op); a
 * failure ends op. */
void eng_proxy_ensure(struct eop *op, void (*then)(struct eop *));
/* Removes op's egress proxy container and socket volume if sbx made them
 * (absent is fine), then then(op) (uses op->then). */
void eng_proxy_drop(struct eop *op, void (*then)(struct eop *));
/* Stops op's egress proxy if sbx made it and it runs (absent is fine),
 * then then(op) (uses op->then); a failure ends op. */
void eng_proxy_stop(struct eop *op, void (*then)(struct eop *));
/* Reconcile (adr/0027): 1 when a container of the list
 * GET /containers/json answered is an egress proxy sbx made. */
int eng_proxy_listed(json_t *c);
/* Reconcile's proxy step: removes each proxy in rco(op)->rpx whose sandbox
 * (rco(op)->rsbx) is gone and stops each running one whose sandbox is
 * stopped, then each socket volume whose sandbox is gone, then
 * then(op); a runtime failure ends op. */
void eng_proxy_reconcile(struct eop *op, void (*then)(struct eop *));
/* The egress_stats op of the vtable (sbx_driver.h). */
struct sbx_op *eng_egress_stats(struct sbx_driver *d, const char *id,
    sbx_json_cb cb, void *arg, struct sbx_err *err);

/* ---- driver_engine_ensure.c ---- */

struct sbx_op *eng_ensure(struct sbx_driver *d, const char *id,
    const struct sbx_spec *spec, sbx_status_cb cb, void *arg,
    struct sbx_err *err);
/* The ensure continues once the helper volume is ready. */
void eng_ensure_volume(struct eop *op);
/* Removes op's egress network if sbx made it, then op->then(op). */
void eng_net_drop(struct eop *op, void (*after)(struct eop *));

/* ---- driver_engine_helper.c ---- */

/* Waits ensure op for the helper volume (filling it once). */
void eng_ensure_helper(struct eop *op);
/* The helper volume's fill ended (err NULL: ready): wakes the waiters. */
void eng_helper_settle(struct engine *e, const struct sbx_err *err);
/* Removes unused old helper volumes of the stem, in the background. */
void eng_helper_gc(struct engine *e);
/*
 * Reads the executable regular file at path (at most 64 MiB) into a new
 * one-file ustar archive holding it as name (mode 0755, root's), what
 * PUT /containers/{id}/archive takes (Engine API v1.41): *tar (owned, free())
 * and *tar_len, *file_len the file's size. Returns 0, or -1 with why
 * (a sentence naming name and path) and nothing allocated.
 */
int eng_file_tar(const char *path, const char *name, unsigned char **tar,
    size_t *tar_len, size_t *file_len, char *why, size_t whylen);
/* Reads the helper file once; -1 with e->helper_err set. */
int eng_helper_load(struct engine *e);

/* ---- driver_engine_life.c ---- */

struct sbx_op *eng_status(struct sbx_driver *d, const char *id,
    sbx_status_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *eng_stop(struct sbx_driver *d, const char *id, sbx_done_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *eng_destroy(struct sbx_driver *d, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *eng_list_sandboxes(struct sbx_driver *d, sbx_sandboxes_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *eng_reconcile(struct sbx_driver *d, sbx_done_cb cb, void *arg,
    struct sbx_err *err);
struct sbx_op *eng_health(struct sbx_driver *d, sbx_health_cb cb, void *arg,
    struct sbx_err *err);

/* ---- driver_engine_run.c: one sbx-helper invocation (the seam, adr/0021) ---- */

/*
 * A helper op of kind (size: its state struct) for sandbox id with a fresh
 * exec id and its buffers; the caller sets cmd (eng_helper_cmd), cap,
 * timeout_ms, exited, and the rest it needs, then calls eng_helper_run.
 * NULL with err invalid_id or internal.
 */
struct eop *eng_helper_op(struct engine *e, enum op_kind kind,
    const char *id, size_t size, struct sbx_err *err);
/* ["/.sbx/sbx-helper", mode] */
json_t *eng_helper_cmd(const char *mode);
/*
 * The one way sbx-helper runs in a sandbox: checks the container (not for
 * a kill), execs cmd as the sandbox user, sends stdin, delivers output to
 * the kind (eng_deliver; OP_EXEC's stdout to eng_helper_frames), then
 * calls x->exited(op, status), or ends op with an error.
 */
void eng_helper_run(struct eop *op);
/* Kills the helper exec exec_id in cid by its handle; parent (or NULL: fire
 * and forget) hears the end in its kill_ended. -1 when it cannot start. */
int eng_start_kill(struct engine *e, const char *id, const char *cid,
    const char *exec_id, struct eop *parent);
/* A kill op ended (err NULL: done). */
void eng_kill_ended(struct eop *k, const struct sbx_err *err);
/* Output of the helper on stream 1 or 2 for the kind. */
void eng_deliver(struct eop *op, int stream, const unsigned char *buf,
    size_t len);
/* The helper's error line (last of stderr): 1 with code and msg. */
int eng_helper_line(struct eop *op, char *code, size_t csz, char *msg,
    size_t msz);
/* The error of a helper mode that exited with status code. */
void eng_helper_error(struct eop *op, int code, struct sbx_err *e);
/* Ends op with the helper's error when code != 0 and returns 1. */
int eng_helper_failed(struct eop *op, int code);
/* Moves bytes of *buf (*len of them; both advanced) into hdr until *have
 * reaches want: 1 when hdr is whole (*have back to 0), 0 when *buf ran out
 * first (the rest comes with the next read). */
int eng_hdr_fill(unsigned char *hdr, size_t *have, size_t want,
    const unsigned char **buf, size_t *len);
/*
 * The next piece of an attached exec's stream (Engine API v1.41 "Attach":
 * 8-byte frame headers, byte 0 the stream, bytes 4-7 the big-endian payload
 * length), headers split anywhere across reads. Takes headers off *buf
 * (*len bytes; both advanced past the piece too) and returns the piece, at
 * most max bytes of one frame's payload, with *n and *stream; NULL when
 * *buf ran out (the rest comes with the next read).
 */
const unsigned char *eng_demux_next(struct eng_demux *d,
    const unsigned char **buf, size_t *len, size_t max, size_t *n,
    int *stream);
/* The exec timeout's timer callback (op: the helper op). */
void eng_exec_timer_cb(evutil_socket_t fd, short what, void *arg);
/* A transport has started op's invocation: a file op's progress timer
 * restarts, else the exec timeout (x->timeout_ms, 0: none) is armed.
 * 0, or -1 with e internal (cannot arm the timer). */
int eng_exec_clock(struct eop *op, struct sbx_err *e);

/* ---- driver_engine_rexec.c: invocations as runtime execs (agent: false) ---- */

/*
 * Runs op's invocation as one runtime exec (Engine API v1.41: inspect the
 * container, POST /containers/{id}/exec, POST /exec/{id}/start attached,
 * GET /exec/{id}/json for the exit); a kill skips the inspect (its parent
 * checked the container). Ends as eng_helper_run says.
 */
void eng_rexec_run(struct eop *op);
/* The helper's stream ended without an exit record: ask the runtime. */
void eng_exec_after_stream(struct eop *op);

/* ---- driver_engine_agent.c: invocations through the agent (adr/0025) ---- */

struct eng_agent;
/* Runs op's invocation as a stream on its sandbox's agent channel (the
 * agent started first when needed); 0, or -1 when op was failed (later). */
int eng_agent_run(struct eop *op);
/* op ends: its stream (if any) is cancelled. */
void eng_agent_stream_end(struct eop *op);
/* Moves op's stdin (stdin_buf, a write's source) within the stream's credit. */
void eng_agent_pump(struct eop *op);
/* The sandbox is being stopped or removed through the driver: no warm
 * ensure from its agent, and its next start is not counted as a restart. */
void eng_agent_forget(struct engine *e, const char *id);
/* Frees every agent record (driver free). */
void eng_agents_free(struct engine *e);
/* An ensure found st (running, on the helper volume helper_vol). */
void eng_agent_note_status(struct engine *e, const struct sbx_status *st,
    const char *helper_vol);
/* 1 and *st when a warm ensure of id with image and egress can be answered
 * from the live channel (fresh within agent_fresh_ms), else 0. */
int eng_agent_warm(struct engine *e, const char *id, const char *image,
    int egress, struct sbx_status *st);

/* ---- driver_engine_run.c: exec (sbx-helper exec --framed, adr/0007) ---- */

struct sbx_op *eng_exec(struct sbx_driver *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);
/* sbx-helper's frames in the runtime's stdout of an OP_EXEC. */
void eng_helper_frames(struct eop *op, const unsigned char *buf, size_t len);
/* The helper's own stderr of an OP_EXEC: a tail kept. */
void eng_keep_errtail(struct eop *op, const unsigned char *buf, size_t len);
/* An OP_EXEC ended with its exit record. */
void eng_exec_recorded(struct eop *op);
/* 1 when an OP_EXEC's stream brought the exit record. */
int eng_exec_got_exit(struct eop *op);

/* ---- driver_engine_files.c ---- */

struct sbx_op *eng_read(struct sbx_driver *d, const char *id,
    const char *path, const struct sbx_sink *sink, struct sbx_err *err);
struct sbx_op *eng_write(struct sbx_driver *d, const char *id,
    const char *path, uint32_t mode, struct evbuffer *body, sbx_done_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *eng_write_stream(struct sbx_driver *d, const char *id,
    const char *path, uint32_t mode, struct evbuffer *src, uint64_t len,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *eng_list(struct sbx_driver *d, const char *id,
    const char *path, const struct sbx_list_page *page, sbx_list_cb cb,
    void *arg, struct sbx_err *err);
struct sbx_op *eng_status_usage(struct sbx_driver *d, const char *id,
    sbx_status_cb cb, void *arg, struct sbx_err *err);
struct sbx_op *eng_recover(struct sbx_driver *d, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err);
/* An OP_USAGE's inspect: 1 when op was finished (not running). */
int eng_usage_target(struct eop *op, int r, const struct sbx_status *st);
/* Lets go of an OP_WRITE's source (no-op for other kinds). */
void eng_src_detach(struct eop *op);
/* An OP_WRITE's runtime stream has started: its stdin, then the write
 * side closed. */
void eng_write_started(struct eop *op, struct sbx_http_req *req);
/* Restarts a file op's progress timer. */
void eng_file_progress(struct eop *op);
/* Parses the complete lines an OP_LIST holds in out. */
void eng_list_lines(struct eop *op);

#endif
