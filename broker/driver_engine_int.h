/*
 * driver_engine_int.h - private to broker/driver_engine*.c (and the fuzz
 * targets through tests/fuzz/engine_incl.h): the driver, its operations'
 * state, the kind table each operation carries, and the calls the files
 * share. Every engine file includes this one header for the common block
 * (libc, libevent, jansson, libsodium, the log and the SPEC §4 rules).
 */
#ifndef DRIVER_ENGINE_INT_H
#define DRIVER_ENGINE_INT_H

#include <sys/queue.h>
#include <sys/time.h>

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "driver_engine.h"
#include "sbx_helper_proto.h"
#include "sbx_http_client.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_usage.h"

/*
 * Layout (adr/0021, adr/0037), each file calling only the ones below it:
 *   driver_engine.c         the ops table, the driver; calls the job files
 *   driver_engine_life.c    status, stop, destroy, list, reconcile, health
 *   driver_engine_pool.c    the warm pool: members, claim, sweep (adr/0067)
 *   driver_engine_ensure.c  ensure (container, volume, init, network)
 *   driver_engine_proxy.c   the egress proxy of a sandbox
 *   driver_engine_snap.c    snapshots of /work and copies into a new one
 *   driver_engine_snap_rec.c  what a broker killed mid-copy left (start-up)
 *   driver_engine_helper.c  the helper volume
 *   driver_engine_files.c   read, write, list, du, killall
 *   driver_engine_agent.c   transport: the sandbox's agent channel
 *   driver_engine_rexec.c   transport: one runtime exec (agent: false)
 *   driver_engine_exec.c    exec: sbx-helper exec --framed, its frames
 *   driver_engine_run.c     one sbx-helper invocation (core), the kill
 *   driver_engine_call.c    one runtime call, inspect parsing
 *   driver_engine_op.c      the op lifecycle: new, enter, leave, finish, fail
 * Generic code branches on no kind: what differs per kind is a row of
 * struct eng_kind, defined in the kind's own file.
 */

#define API "/v1.41"                   /* Engine API version pinned (adr/0001) */
#define STREAM_CHUNK (64 * 1024)
#define RESP_MAX (8 * 1024 * 1024)     /* JSON answers of the runtime */
#define ERRTAIL_MAX 2048               /* stderr kept to read the helper's error */
#define LIST_LINE_MAX 4096             /* one entry line of sbx-helper list */
#define HELPER_GRACE_MS 2000           /* helper's own timeout trails ours */
#define KILL_TIMEOUT_MS 10000
#define ENSURE_RETRIES 5               /* create races lost before giving up */
#define GHOSTS_MAX 16                  /* Podman ghosts one op removes (adr/0058) */
#define L_MANAGED "io.sbx.managed"
#define L_ID "io.sbx.id"
#define L_EGRESS "io.sbx.egress"
#define L_IMAGE "io.sbx.image"
#define L_HELPER "io.sbx.helper"         /* the helper volume a container mounts */
#define L_HELPER_SHA "io.sbx.helper-sha256"
#define L_HELPER_STEM "io.sbx.helper-stem"
#define L_ROLE "io.sbx.role"             /* helper-fill, init, image-probe: not sandboxes */
#define L_POOL "io.sbx.pool"             /* born a warm pool member (adr/0067): its
                                        * sandbox id is its name, not io.sbx.id */
#define POOL_TAG "pool."                /* "<prefix>pool.<hex>": never an id (no '.') */

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
	/* How invocations run: the agent's or the runtime exec's transport,
	 * and the runtime exec's for kinds that always take it. */
	const struct eng_transport *via, *rexec_via;
	/* The sandboxes' agents (driver_engine_agent.c, adr/0025). */
	int agent_on;
	int64_t agent_idle_ms, agent_ping_ms, agent_fresh_ms;
	int agent_direct;             /* agent_channel = direct (adr/0066) */
	int direct_said;              /* the "not reachable" line was logged */
	TAILQ_HEAD(, eng_agent) agents;
	/* Asked first by eng_finish_err: 1 when it took the failure over
	 * (driver_engine_verify.c); NULL: none. */
	int (*fail_hook)(struct eop *op, const struct sbx_err *err);
	/* The warm pool (driver_engine_pool.c, adr/0067); NULL: none. */
	struct eng_pool *pool;
	/* Asked by an ensure that found no container for its id: 1 when it
	 * took op over and goes on in then(op, claimed): 1 a pool member now
	 * carries op's container name (inspect it), 0 create it cold; 0 when
	 * it did not (create cold at once). NULL: no pool. */
	int (*claim_hook)(struct eop *op, void (*then)(struct eop *, int));
};

struct sbx_status;

/* An op's kind is an sbx-helper invocation (its state embeds struct
 * eop_exec) ... */
#define EK_RUN 0x1
/* ... run as `sbx-helper exec --framed` (adr/0007): output in the helper's
 * frames, an exit record, the sink told of the start with the exec id */
#define EK_FRAMED 0x2
/* ... whose stdout is kept in x->out (x->cap bytes), not streamed */
#define EK_KEEP_OUT 0x4
/* ... always a runtime exec, also with the agent on (du: the status too) */
#define EK_RUNTIME_EXEC 0x8
/* ... started without an inspect (a kill: its parent checked) */
#define EK_NO_INSPECT 0x10
/* ... never killed by its handle (it is the kill): a stream lost, or a
 * helper still running after it, ends it at once (kind->fail, ->expired) */
#define EK_NO_KILL 0x20
/* ... a session (driver_engine_session.c, adr/0050): the stream is opened
 * with x->open_flags, its stdin is the caller's (sbx_session_write; the
 * transport neither sends nor closes it), its stdin room goes to
 * sink->room, and the sink hears the start as a framed exec's does */
#define EK_SESSION 0x40
#define EK_ANON_START 0x80   /* ... whose start has no exec id ("": a port, no handle) */
#define EK_BULK_OUT 0x100    /* ... a session with a bulk stream's output credit (adr/0053) */

/*
 * What differs between kinds of operation, one row per kind, defined
 * (static const, or extern where a test needs it) in the kind's own file
 * and set once by eng_op_new. Generic code calls these hooks and reads
 * these flags; it never asks which kind an op is (adr/0037).
 */
struct eng_kind {
	const char *name;             /* in sentences: "file read" */
	unsigned flags;               /* EK_* */
	/* Ends op with err through the caller's callback of this kind (or
	 * whatever the kind does on failure), then releases op. Required. */
	void (*fail)(struct eop *op, const struct sbx_err *err);
	/* Lets go of what the caller lent (a write's source) before the
	 * caller hears the end or cancels; idempotent. NULL: nothing lent. */
	void (*let_go)(struct eop *op);
	/* Frees the kind's own state when op is freed. NULL: none. */
	void (*fini)(struct eop *op);
	/* The caller cancels: NULL releases op; else the hook ends it. */
	void (*cancel)(struct eop *op);
	/* The caller pauses (on 1) or resumes (0). NULL: not pausable. */
	void (*pause)(struct eop *op, int on);
	/* sbx-helper invocations (EK_RUN) only, each NULL when unused: */
	/* the helper exited with status code (no exit record) */
	void (*exited)(struct eop *op, int code);
	/* new bytes were kept in x->out (EK_KEEP_OUT) */
	void (*got_out)(struct eop *op);
	/* the output reached x->cap (x->truncated is set) */
	void (*over_cap)(struct eop *op);
	/* what the transport read on stream 1 or 2 (NULL: eng_deliver) */
	void (*output)(struct eop *op, int stream, const unsigned char *buf,
	    size_t len);
	/* the stream ended: 1 when the helper's exit record came and the
	 * hook ended op with it, else 0 (NULL: no record, 0) */
	int (*recorded)(struct eop *op);
	/* the timeout fired (NULL: kill the exec, then report timeout) */
	void (*expired)(struct eop *op);
	/* the container's inspect answered r (1 running, 0 stopped or
	 * absent) with st: 1 when the hook ended op, 0 to go on (NULL:
	 * absent is not_found, stopped not_running) */
	int (*target)(struct eop *op, int r, const struct sbx_status *st);
};

/*
 * How an invocation reaches sbx-helper: the agent channel
 * (driver_engine_agent.c) or one runtime exec (driver_engine_rexec.c).
 * The driver picks them at creation (e->via, e->rexec_via), so the
 * invocation's core (driver_engine_run.c) calls a transport only through
 * this table.
 */
struct eng_transport {
	const char *name;
	/* Starts op's invocation; it ends as eng_helper_run says. */
	void (*run)(struct eop *op);
	/* The stdin source (x->src) has bytes, or the transport room. */
	void (*pump)(struct eop *op);
	/* op is being freed: drop the transport's hold on it. NULL: none. */
	void (*end)(struct eop *op);
};


/* A runtime call's continuation: the HTTP status and the parsed answer, or
 * err (transport, timeout, answer too large) with status 0 or the status. */
typedef void (*cont_fn)(struct eop *, int status, json_t *body,
    const struct sbx_err *err);

/*
 * What every operation has: the handle callers hold, the sandbox's names,
 * the one runtime call in flight and the caller's callback. Each kind
 * embeds this first in its own state struct below (op_new allocates the
 * kind's size); a kind's accessor casts to it; the kind's row (op->kind)
 * says how it ends, frees and is cancelled.
 */
struct eop {
	struct sbx_op base;           /* first */
	struct engine *e;
	TAILQ_ENTRY(eop) link;
	const struct eng_kind *kind;  /* set by eng_op_new, never NULL */
	int busy, dead;               /* a sink may cancel from inside output() */
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
	char *pstat;                  /* the last answer's X-Docker-Container-
	                               * Path-Stat (an archive HEAD), or NULL */
	cont_fn cont;

	/* The caller's callback: the one of the op's kind is set. */
	struct sbx_op_cb cb;          /* the caller's, of the op's kind */
	void *arg;

	struct event *defer;          /* reports a failure from the loop */
	struct sbx_err derr;
	int verified;                 /* its failure was checked against the
	                               * sandbox's state (eng_verify_fail) */
	/* A container list (driver_engine_life.c): asked again after each
	 * Podman ghost it removed (adr/0058). */
	char lpath[320];
	cont_fn lcont;
	int ghosts;                   /* ghosts removed by this op */
};

/* ensure */
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
	size_t probe_i;               /* the mount path the image probe stats */
	int fresh;                    /* the container was made by this ensure */
	void (*probe_then)(struct eop *); /* once the image passed (adr/0045) */
	int waiting;                  /* on e->hwait */
	void (*helper_then)(struct eop *); /* once the helper volume is ready */
	TAILQ_ENTRY(eop_ensure) wlink;
	char old_helper[96];          /* helper label of the container removed */
	char aux_cid[80];             /* the init container */
	int aux_tries;
	int64_t aux_code;             /* its exit status */
	struct sbx_err aux_err;       /* the failure reported after its removal */
	int agent_vol;                /* socket volume (adr/0066): 0 not yet, 1 ok, 2 none */
	/* The warm pool (adr/0067): this ensure makes a pool member (labels
	 * io.sbx.pool, no io.sbx.id, no agent), or claims one. */
	int pool;
	void (*claim_then)(struct eop *, int);
	char claim_cid[80];           /* the member being renamed */
	char claim_name[140];         /* its container name */
};

/* destroy */
struct eop_destroy {
	struct eop op;
	char old_helper[96];          /* helper label of the container removed */
};

/* the helper volume's fill */
struct eop_helper {
	struct eop op;
	char image[256];              /* of the ensure that asked first */
	char aux_cid[80];             /* the fill container */
	int aux_tries;
	struct sbx_err aux_err;       /* the failure reported after its removal */
};

/* removal of old helper volumes */
struct eop_gc {
	struct eop op;
	json_t *gc;                   /* volume names to remove */
	size_t gc_i;
};

/* reconcile */
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
	json_t *rdvols;               /* agent socket volumes (adr/0066), walked by di */
	size_t di;
	void (*dthen)(struct eop *);
};

/* health */
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
 * One sbx-helper invocation (driver_engine_run.c): exec, read, write,
 * list, kill, recover, du (EK_RUN kinds). The helper's argv, env and
 * stdin, its bounds, and how its output and exit reach the kind.
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
	/* write_stream's body source (adr/0018), lent by the caller: src_left
	 * bytes of it still to send, moved by the transport's pump within
	 * its bound (the runtime connection's output, the stream's credit) */
	struct evbuffer *src;
	struct evbuffer_cb_entry *src_ent;
	uint64_t src_left;
	const struct eng_transport *via; /* the transport running it */
	/* Through the agent (driver_engine_agent.c): the stream, and the
	 * event that reports its start from the loop. */
	struct sbx_agent_stream *ast;
	struct event *astart;
	/* A session's OPEN flags beyond stdin (SBX_AGENT_OPEN_CTRL), 0 else. */
	unsigned open_flags;
};

/* exec: sbx-helper's frames inside the runtime's stdout stream
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

/* list: the page parsed line by line as it arrives */
struct eop_list {
	struct eop_exec x;
	struct sbx_dirent *ents;
	size_t nents, ents_cap, list_limit;
	int list_end, list_trunc, list_bad;
	char after_hex[2 * 255 + 1];
};

/* status_usage */
struct eop_usage {
	struct eop_exec x;
	struct sbx_status ust;        /* the status the walk adds to */
};

/* kill */
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
static inline struct eop_usage *uso(struct eop *op)
{
	return (struct eop_usage *)op;
}
static inline struct eop_kill *kio(struct eop *op)
{
	return (struct eop_kill *)op;
}

/* ---- driver_engine_op.c: the op lifecycle (calls no engine file) ---- */

/* A new op of kind (its row, borrowed: static) of size bytes (its state
 * struct) for sandbox id (NULL: none; else checked with sbx_id_valid:
 * invalid_id), on e's list. NULL with err invalid_id or internal. */
struct eop *eng_op_new(struct engine *e, const struct eng_kind *kind,
    const char *id, size_t size, struct sbx_err *err);
/* Frees op at once (NULL: no-op); only where no callback frame holds it. */
void eng_op_free(struct eop *op);
/* Lets go of what the caller lent (kind->let_go), cancels the runtime
 * call in flight, and frees op now or when the outermost callback frame
 * on it returns (eng_op_leave). */
void eng_op_release(struct eop *op);
/* A callback frame on op begins: op stays allocated until its leave. */
void eng_op_enter(struct eop *op);
/* The frame ends; returns 1 when op is still alive (0: freed now, or
 * released and freed by an outer frame). */
int eng_op_leave(struct eop *op);
/* Terminal callbacks of the caller's shapes: each lets go of what the
 * caller lent first and releases op after. */
void eng_finish_status(struct eop *op, const struct sbx_err *err,
    const struct sbx_status *st);
void eng_finish_done(struct eop *op, const struct sbx_err *err);
/* eng_finish_status(op, err, NULL): the fail of status-shaped kinds. */
void eng_fail_status(struct eop *op, const struct sbx_err *err);
/* The fail of internal ops no caller waits for: releases op. */
void eng_fail_quiet(struct eop *op, const struct sbx_err *err);
/* Any op's failure: op->kind->fail(op, err). */
void eng_finish_err(struct eop *op, const struct sbx_err *err);
/* Reports err from the event loop (a request that could not be sent), so
 * no callback runs before the call that started op has returned. */
void eng_fail_later(struct eop *op, const struct sbx_err *err);
/*
 * The one lookup of a sandbox's /work volume that is not its name
 * (adr/0067): a sandbox claimed from the warm pool keeps the volume its
 * member was made with ("<prefix>pool.<hex>-work"). Sets op->vname to the
 * volume container inspect answer c mounts at /work (Mounts[], Type
 * "volume", Destination SBX_WORK_DIR); leaves it (the name made from the
 * id, sbx_engine_volume_name) when c mounts none there or the name does
 * not fit [A-Za-z0-9_.-] (139 bytes at most).
 */
void eng_work_volume(struct eop *op, json_t *c);

/* ---- driver_engine_call.c: one runtime call, inspect parsing (calls the op lifecycle only) ---- */

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
/*
 * The sandbox id of a container sbx made (labels managed): its io.sbx.id
 * label, or for one born a warm pool member (io.sbx.pool, adr/0067) its
 * name (Docker's "/name" or bare) without e->prefix. 1 with id (sz bytes,
 * not checked with sbx_id_valid: an unclaimed member's is "pool.<hex>"),
 * 0 when neither applies (not ours, another prefix, too long).
 */
int eng_sandbox_of(const struct engine *e, json_t *labels, const char *name,
    char *id, size_t sz);
/* err = runtime_error "the container runtime refused to WHAT (HTTP n);
 * the broker's log has its answer"; the runtime's message (host paths,
 * its internals) goes to the log only, with what and the status. */
void eng_runtime_err(struct sbx_err *err, int status, json_t *body,
    const char *what);
/* err = runtime_error "image I is not present in the runtime ...". */
void eng_image_missing(struct sbx_err *err, const char *image);
/* A create that lost a race (Docker 409, Podman 500 "already ..."). */
int eng_name_taken(int status, json_t *body);
/* Podman's answer to the inspect of a container a removal is taking away
 * (500 "... does not exist in database: no such container"): as 404.
 * 1 when (status, body) is that answer. */
int eng_gone(int status, json_t *body);
/*
 * Podman 4.3's ghost (adr/0058): a container its database still holds
 * whose storage a SIGKILL of the service cut away mid-removal. Its inspect,
 * and every container list it is in, answers 500 `getting container from
 * store "ID": container not known`. Returns 1 when (status, body) is that
 * answer and copies ID (64 hex digits) into id (sz >= 65) when id is not
 * NULL; else 0. Docker never answers so.
 */
int eng_ghost(int status, json_t *body, char *id, size_t sz);
/* 1 when a container inspect answer shows Podman's state "removing": a
 * removal cut midway (start answers 500 "container state improper"). */
int eng_ghost_removing(json_t *inspect);
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

/* 1 found (st; *helper if not NULL: its L_HELPER label or NULL, in body),
 * 0 absent (404), -1 op already finished. */
int eng_inspect_found(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, struct sbx_status *st, const char **helper);

/* ---- driver_engine_direct.c (adr/0066): driver_engine_direct.h ---- */
/* "<prefix><id>-agent": the agent's socket volume (driver_engine_op.c). */
char *eng_agent_volume_name(const char *name_prefix, const char *id, char *buf,
    size_t size);

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

/* ---- driver_engine_snap*.c (adr/0068): driver_engine_snap.h ---- */

/* ---- driver_engine_ensure.c ---- */

/* The ensure op of the vtable (sbx_driver.h; driver_engine.h says how). */
struct sbx_op *eng_ensure(struct sbx_driver *d, const char *id,
    const struct sbx_spec *spec, sbx_status_cb cb, void *arg,
    struct sbx_err *err);
/* Removes op's egress network if sbx made it, then op->then(op). */
void eng_net_drop(struct eop *op, void (*after)(struct eop *));
/*
 * Makes a warm pool member (adr/0067): an ensure of the default image with
 * the default limits, no egress, whose container "<prefix>POOL_TAG<hex>"
 * and volume "<that>-work" carry io.sbx.managed and io.sbx.pool=<image>,
 * never io.sbx.id; no agent is started in it. hex: 1-32 of [0-9a-f]. cb
 * hears its status (id "pool.<hex>") or why it failed (as ensure's). NULL
 * with err (out of memory).
 */
struct eop *eng_ensure_member(struct engine *e, const char *hex,
    sbx_status_cb cb, void *arg, struct sbx_err *err);

/* ---- driver_engine_helper.c ---- */

/* Waits ensure op for the helper volume (filling it once), then then(op);
 * a helper that cannot be read or filled ends op with why. */
void eng_ensure_helper(struct eop *op, void (*then)(struct eop *));
/* Checks ensure op's image (adr/0045): a container of it with no mount,
 * created, never started, an archive HEAD per sbx_engine_mount_paths entry,
 * removed; then then(op). A mount path that is no directory ends op with
 * image_not_allowed and sbx_engine_mount_path_judge's sentence (logged);
 * a missing image or a runtime failure ends it as the init step's do. */
void eng_image_probe(struct eop *op, void (*then)(struct eop *));
/*
 * The create answer of ensure op's short-lived container "<cname><suffix>"
 * (".probe", ".init"; what names it in an error): 0 with its id in
 * aux_cid; 1 when op went on or ended: a stale one of that name (left by a
 * broker that died there) is being removed, once, and stale_removed goes
 * on; a missing image or any other answer ended op.
 */
int eng_aux_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, const char *suffix, cont_fn stale_removed,
    const char *what);
/* The removal answer of that container (what names the step in an error):
 * clears aux_cid; 1 when op ended (with the failure kept in aux_err, or a
 * removal that failed), 0 to go on. */
int eng_aux_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, const char *what);
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

/* ---- driver_engine_pool.c: the warm pool (adr/0067) ---- */

/* Sets up e's pool of want members (0: none, nothing set) and its claim
 * hook (e->claim_hook); nothing is made before eng_pool_reconciled. -1
 * with err when out of memory. */
int eng_pool_new(struct engine *e, int want, struct sbx_err *err);
/* The first reconcile ended: unclaimed members of an earlier broker (any
 * image, helper or count) are removed with their volumes, then the pool
 * fills in the background. Later calls do nothing. */
void eng_pool_reconciled(struct engine *e);
/* Frees the pool's records (driver free); members stay in the runtime
 * until the next start's eng_pool_reconciled. */
void eng_pool_free(struct engine *e);

/* ---- driver_engine_life.c ---- */

/* The vtable's status, stop, destroy, list_sandboxes, reconcile and health
 * (sbx_driver.h: arguments, callbacks, errors; driver_engine.h says how). */

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

/* ---- driver_engine_run.c: one sbx-helper invocation (adr/0021), and the kill ---- */

/* The kill's row: a fuzz target recognises the kills left to retry. */
extern const struct eng_kind eng_kind_kill;

/*
 * A helper op of kind (an EK_RUN row; size: its state struct) for sandbox
 * id with a fresh exec id and its buffers; the caller sets cmd
 * (eng_helper_cmd), cap, timeout_ms and the rest it needs, then calls
 * eng_helper_run. NULL with err invalid_id or internal.
 */
struct eop *eng_helper_op(struct engine *e, const struct eng_kind *kind,
    const char *id, size_t size, struct sbx_err *err);
/* ["/.sbx/sbx-helper", mode] */
json_t *eng_helper_cmd(const char *mode);
/*
 * The one way sbx-helper runs in a sandbox: through the transport the
 * driver picked (e->via, or e->rexec_via for EK_RUNTIME_EXEC kinds), which
 * checks the container (not for EK_NO_INSPECT), execs cmd as the sandbox
 * user, sends stdin, hands output to eng_run_output, and ends in
 * kind->exited(op, status), kind->recorded (the helper's exit record) or
 * an error.
 */
void eng_helper_run(struct eop *op);
/* The state every invocation frees (the kinds' fini call it first). */
void eng_run_fini(struct eop *op);
/* An invocation's cancel: its exec, if it may have been created, is
 * killed by its handle; op is released. */
void eng_run_cancel(struct eop *op);
/* An invocation's pause (on 1) and resume (0): the transport stops
 * reading, the progress timer stops (the reader's choice, not a stall). */
void eng_run_pause(struct eop *op, int on);
/* Lets go of a write_stream's source (the caller's): the kinds' let_go. */
void eng_src_detach(struct eop *op);
/* Lends src (len bytes to come) to op as its stdin: each addition pumps
 * through the transport. -1 when out of memory (nothing lent). */
int eng_src_lend(struct eop *op, struct evbuffer *src, uint64_t len);
/* The exec (EK_FRAMED) and the read: err to the sink, then release. */
void eng_finish_sink_error(struct eop *op, const struct sbx_err *err);
/* Kills the helper exec exec_id in cid by its handle; parent (or NULL: fire
 * and forget) hears the end in its kill_ended. -1 when it cannot start. */
int eng_start_kill(struct engine *e, const char *id, const char *cid,
    const char *exec_id, struct eop *parent);
/* What a transport read from the helper on stream 1 or 2: to the kind's
 * output (exec: its frames), else to eng_deliver. */
void eng_run_output(struct eop *op, int stream, const unsigned char *buf,
    size_t len);
/* Output of the helper on stream 1 or 2 for the kind: kept in x->out
 * (EK_KEEP_OUT) or to the sink, within x->cap (kind->over_cap at it). */
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
/* A transport has started op's invocation: a file op's progress timer
 * restarts, else the exec timeout (x->timeout_ms, 0: none) is armed.
 * 0, or -1 with e internal (cannot arm the timer). */
int eng_exec_clock(struct eop *op, struct sbx_err *e);
/* Arms a file op's progress timer: no progress for file_timeout ends op
 * with timeout naming kind->name, and kills its helper. -1 out of memory. */
int eng_progress_new(struct eop *op);
/* Restarts a file op's progress timer (none, or paused: no-op). */
void eng_file_progress(struct eop *op);
/* The sink hears the start with the exec id (EK_FRAMED), once. */
void eng_exec_announce(struct eop *op);
/* 1 when the stream brought the helper's exit record and the kind ended
 * op with it (kind->recorded); 0 to end it another way. */
int eng_run_recorded(struct eop *op);

/* ---- driver_engine_exec.c: exec (sbx-helper exec --framed, adr/0007) ---- */

/* The exec's row; a fuzz target builds an exec op by hand. */
extern const struct eng_kind eng_kind_exec;
/* The exec of a session: eng_kind_exec with EK_SESSION. */
extern const struct eng_kind eng_kind_exec_session;
/*
 * The op of an exec-like invocation of kind (size: its state struct) for
 * sandbox id: req checked as exec checks it (argv, cwd, timeout and cap
 * within the ceilings, env NAME=value), the sink copied, cmd built as
 * `sbx-helper MODE OPTS... --id EXEC_ID [--timeout-ms T+grace] --cwd CWD
 * -- ARGV...` (opts: a JSON array of strings, stolen, NULL: none), env
 * kept for the transport. flags: EXB_ARGV_OPTIONAL (an empty argv is
 * passed as none: the mode's default), EXB_NO_DEFAULTS (timeout 0 is
 * none, not the configured default; cap 0 is none). Not started: the
 * caller sets what else it needs and calls eng_helper_run. NULL with err
 * invalid_id, bad_request, path_outside_work, limit_exceeded, internal.
 */
#define EXB_ARGV_OPTIONAL 0x1
#define EXB_NO_DEFAULTS 0x2
struct eop *eng_exec_build(struct engine *e, const struct eng_kind *kind,
    size_t size, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, const char *mode, json_t *opts,
    unsigned flags, struct sbx_err *err);
/* sbx-helper's frames in the transport's stdout of an exec op: stdout and
 * stderr payloads to eng_deliver, the exit and error records kept; a
 * violation of the protocol ends op with runtime_error and kills it. */
void eng_helper_frames(struct eop *op, const unsigned char *buf, size_t len);
/* The exec op of the vtable (sbx_driver.h; driver_engine.h says how). */
struct sbx_op *eng_exec(struct sbx_driver *d, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);

/* ---- driver_engine_session.c: sessions (adr/0050) ---- */

/* The vtable's session ops (sbx_driver.h; driver_engine.h says how). */
struct sbx_op *eng_session(struct sbx_driver *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err);
ssize_t eng_session_write(struct sbx_driver *d, struct sbx_op *op,
    struct evbuffer *src, size_t max);
size_t eng_session_room(struct sbx_driver *d, struct sbx_op *op);
void eng_session_close_input(struct sbx_driver *d, struct sbx_op *op);
int eng_session_control(struct sbx_driver *d, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err);

/* ---- driver_engine_rexec.c: invocations as runtime execs (agent: false) ---- */

/*
 * Runs an invocation as one runtime exec (Engine API v1.41: inspect the
 * container, POST /containers/{id}/exec, POST /exec/{id}/start attached,
 * GET /exec/{id}/json for the exit); EK_NO_INSPECT skips the inspect.
 */
extern const struct eng_transport eng_rexec_transport;

/* ---- driver_engine_verify.c: a failure checked against the sandbox ---- */

/*
 * An invocation in a sandbox (EK_RUN, inspected first) that failed with
 * runtime_error or runtime_unavailable may have lost its sandbox
 * meanwhile: a destroy or a stop racing it ends its agent channel, its
 * exec's start (Podman resets the connection) or its container's inspect
 * (Podman answers 500 for a container being removed). The hook
 * (e->fail_hook, asked by eng_finish_err) inspects the container once and
 * fails op with not_found (gone) or not_running (stopped, removing, or a
 * stop or destroy of it under way here: eng_agent_going), as an op a
 * moment later would be answered, else with the original err (the
 * broker's log keeps it). Returns 1 when it took op over (op then ends
 * from the inspect's answer), 0 when op fails at once (another code, an
 * op already checked, dead, or with a runtime call in flight). Issue 24
 * item 10.
 */
int eng_verify_fail(struct eop *op, const struct sbx_err *err);

/* ---- driver_engine_agent.c: invocations through the agent (adr/0025) ---- */

struct eng_agent;
/* Runs an invocation as a stream on its sandbox's agent channel (the
 * agent started first when needed). */
extern const struct eng_transport eng_agent_transport;
/* The sandbox is being stopped or removed through the driver: no warm
 * ensure from its agent, its next start is not counted as a restart, and
 * until the matching eng_agent_forget_end (the op's end) it counts as
 * going (eng_agent_going: an op failing meanwhile answers not_running,
 * eng_verify_fail). */
void eng_agent_forget(struct engine *e, const char *id);
void eng_agent_forget_end(struct engine *e, const char *id);
int eng_agent_going(struct engine *e, const char *id);
/* The sandbox's container is (re)started by an ensure: the next stream
 * starts a new agent rather than open on the old channel, which the
 * runtime may not have ended yet (its streams then end as a killed
 * exec's, adr/0045). */
void eng_agent_retire(struct engine *e, const char *id);
/* Frees every agent record (driver free). */
void eng_agents_free(struct engine *e);
/* An ensure found st (running, on the helper volume helper_vol). */
void eng_agent_note_status(struct engine *e, const struct sbx_status *st,
    const char *helper_vol);
/* 1 and *st when a warm ensure of id with image and egress can be answered
 * from the live channel (fresh within agent_fresh_ms), else 0. */
int eng_agent_warm(struct engine *e, const char *id, const char *image,
    int egress, struct sbx_status *st);

/* ---- driver_engine_files.c ---- */

/* The vtable's read, write, write_stream, list, status_usage and recover
 * (sbx_driver.h: arguments, callbacks, errors; driver_engine.h says how). */

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

#endif
