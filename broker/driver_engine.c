/* driver_engine.c - the SandboxDriver on the Docker Engine API v1.41 over the runtime's unix socket (Docker, Podman). */
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "driver_engine.h"
#include "sbx_usage.h"
#include "sbx_helper_proto.h"
#include "sbx_http_client.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"

#define API "/v1.41"
#define WORK SBX_WORK_DIR
#define STREAM_CHUNK (64 * 1024)
#define RESP_MAX (8 * 1024 * 1024)     /* JSON answers of the runtime */
#define ERRTAIL_MAX 2048               /* stderr kept to read the helper's error */
#define LIST_MAX (16 * 1024 * 1024)    /* a directory listing */
#define LIST_LINE_MAX 4096             /* one entry line of sbx-helper list */
#define HELPER_GRACE_MS 2000           /* helper's own timeout trails ours */
#define KILL_TIMEOUT_MS 10000
/* A kill the runtime could not take (unreachable: a restarting daemon) is
 * tried again once a second this many times, so an exec cut off by the
 * runtime's crash does not run on until its timeout (test_faults.py). */
#define KILL_RETRIES 60
#define EXIT_POLLS 50
#define EXIT_POLL_MS 20
#define ENSURE_RETRIES 5               /* create races lost before giving up */
#define L_MANAGED "io.sbx.managed"
#define L_ID "io.sbx.id"
#define L_EGRESS "io.sbx.egress"
#define L_IMAGE "io.sbx.image"
#define L_HELPER "io.sbx.helper"         /* the helper volume a container mounts */
#define L_HELPER_SHA "io.sbx.helper-sha256"
#define L_HELPER_STEM "io.sbx.helper-stem"
#define L_ROLE "io.sbx.role"             /* helper-fill, init: not sandboxes */
#define HELPER_MAX (64 * 1024 * 1024)    /* the helper file we read */
#define RUN_SIZE_DEF (1024 * 1024)       /* SBX_HELPER_RUN_DIR tmpfs */

enum flavor { FLAVOR_UNKNOWN, FLAVOR_DOCKER, FLAVOR_PODMAN };
enum hstate { H_NONE, H_BUSY, H_READY };

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
	enum flavor flavor;           /* learnt from /version before any create */
	enum hstate hstate;
	TAILQ_HEAD(, eop) hwait;      /* ensures waiting for the helper volume */
	TAILQ_HEAD(, eop) ops;
};

enum op_kind {
	OP_ENSURE, OP_STATUS, OP_EXEC, OP_READ, OP_WRITE, OP_LIST, OP_STOP,
	OP_DESTROY, OP_SANDBOXES, OP_HEALTH, OP_KILL, OP_RECOVER, OP_RECONCILE,
	OP_HELPER, OP_HGC,            /* internal: fill the helper volume, drop old ones */
	OP_USAGE,                     /* status + sbx-helper du (adr/0017) */
};

struct eop;
typedef void (*cont_fn)(struct eop *, int status, json_t *body,
    const struct sbx_err *err);

struct eop {
	struct sbx_op base;           /* first */
	struct engine *e;
	TAILQ_ENTRY(eop) link;
	enum op_kind kind;
	int busy, dead;               /* a sink may cancel from inside output() */
	char id[64];
	char cname[128];              /* container name */
	char vname[140];              /* volume name */
	char nname[140];              /* egress network name */
	void (*after_net)(struct eop *); /* net_drop's continuation */
	char cid[80];                 /* runtime container id once inspected */

	/* The runtime call in flight (one at a time). */
	struct sbx_http_req *http;
	struct evbuffer *resp;
	int resp_over;
	cont_fn cont;

	/* Callers' callbacks. */
	sbx_status_cb status_cb;
	sbx_done_cb done_cb;
	sbx_list_cb list_cb;
	sbx_sandboxes_cb sandboxes_cb;
	sbx_health_cb health_cb;
	void *arg;
	struct sbx_sink sink;

	/* ensure */
	char image[256];
	int egress;
	int64_t mem, cpus, pids;
	int drop_net;                 /* egress revoked: remove its network */
	int retries;                  /* lost create races so far */
	struct event *retry;
	int need_init;                /* Docker: chown /work in an init container */
	int waiting;                  /* on e->hwait */
	TAILQ_ENTRY(eop) wlink;
	char old_helper[96];          /* helper label of the container removed */
	char aux_cid[80];             /* init / fill container */
	int aux_tries;
	int64_t aux_code;             /* its exit status */
	struct sbx_err aux_err;       /* the failure reported after its removal */
	json_t *gc;                   /* OP_HGC: volume names to remove */
	size_t gc_i;
	int raw;                      /* call(): the answer stays raw in resp */

	/* exec, read, write, list, kill */
	json_t *cmd;                  /* helper argv */
	json_t *env;
	char exec_id[40];             /* ours, the helper's kill handle */
	char rexec[80];               /* the runtime's exec id */
	struct evbuffer *stdin_buf;
	int has_stdin;
	/* write_stream: the caller's body source (adr/0018); src_left bytes
	 * of it still to send; sent only while the runtime connection's
	 * output holds less than WRITE_OUT_MAX */
	struct evbuffer *src;
	struct evbuffer_cb_entry *src_ent;
	uint64_t src_left;
	int64_t timeout_ms, cap, delivered, started_ms;
	struct event *timer;
	unsigned char fhdr[8];
	size_t fhdr_len;
	uint32_t frame_left;
	int frame_stream;
	/* exec: sbx-helper's frames inside the runtime's stdout stream
	 * (sbx_helper_proto.h, exec --framed); untrusted, checked strictly */
	unsigned char hhdr[SBX_HELPER_FRAME_HDR];
	size_t hhdr_len;
	int htype;                    /* frame being read; 0: a header */
	uint32_t hleft;               /* its payload bytes still to come */
	unsigned char hrec[SBX_HELPER_ERROR_REC_MAX]; /* a record's payload */
	size_t hrec_len;
	int got_exit, got_herr;
	int xhow, xcode, xsig, xtimeout; /* the exit record */
	char herr_code[48], herr_msg[256]; /* the error record */
	struct evbuffer *out;         /* stdout kept (list) */
	/* list: the page parsed line by line as it arrives */
	struct sbx_dirent *ents;
	size_t nents, ents_cap, list_limit;
	int list_end, list_trunc, list_bad;
	char after_hex[2 * 255 + 1];
	/* read, write, list: no progress for file_timeout ends the op */
	struct event *ftimer;
	struct evbuffer_cb_entry *drain_ent;
	struct evbuffer *errtail;     /* stderr kept (helper error line) */
	int paused, streaming, stream_started, got_stream;
	int timed_out, truncated, killing;
	int polls;
	struct eop *kill;             /* kill exec run on our behalf */
	struct eop *parent;           /* for a kill: who waits for it */
	struct sbx_err kerr;

	/* reconcile */
	json_t *rkeep;                /* ids whose egress network stays */
	json_t *rnets;                /* managed networks, walked by ri */
	size_t ri;
	unsigned rgone;

	struct sbx_status ust;        /* OP_USAGE: the status the walk adds to */

	struct sbx_health health;
	struct event *defer;          /* reports a failure from the loop */
	struct sbx_err derr;
};

static void op_free(struct eop *);
static void helper_settle(struct engine *, const struct sbx_err *);
static void exec_begin(struct eop *);
static void exec_after_stream(struct eop *);
static void exec_poll_exit(struct eop *);
static void exec_recorded(struct eop *);
static void deliver(struct eop *, int, const unsigned char *, size_t);
static void ensure_inspect(struct eop *);
static void usage_exited(struct eop *, int);
static int usage_target(struct eop *, int, const struct sbx_status *);

/* ---------- small utilities ---------- */

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
id_valid(const char *id)
{
	size_t i, n;

	if (id == NULL)
		return 0;
	n = strlen(id);
	if (n == 0 || n > 63)
		return 0;
	for (i = 0; i < n; i++) {
		if (islower((unsigned char)id[i]) || isdigit((unsigned char)id[i]))
			continue;
		if (id[i] == '-' && i > 0)
			continue;
		return 0;
	}
	return 1;
}

/* The structural rules of SPEC §4; the helper enforces them again, with
 * symlinks, at use time (openat2 RESOLVE_BENEATH). */
static int
path_ok(const char *p, struct sbx_err *err)
{
	const char *seg, *end;
	size_t n;

	if (p != NULL && sbx_path_check(p, strlen(p), err) != 0)
		return -1;      /* SPEC §4 in full (look-alikes, UTF-8) */
	if (p == NULL || (n = strlen(p)) == 0 || n > 4096)
		goto bad;
	if (strcmp(p, WORK) != 0 && strncmp(p, WORK "/", 6) != 0)
		goto bad;
	for (seg = p + 1; ; seg = end + 1) {
		end = strchr(seg, '/');
		if (end == NULL)
			end = seg + strlen(seg);
		if (end == seg || (end - seg == 1 && seg[0] == '.') ||
		    (end - seg == 2 && seg[0] == '.' && seg[1] == '.') ||
		    end - seg > 255)
			goto bad;
		if (*end == '\0')
			break;
	}
	for (; *p != '\0'; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			goto bad;
	return 0;
bad:
	return sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
	    "path must be absolute under /work with no empty, '.' or '..' segment");
}

static int
name_ok(const char *s, size_t max)
{
	size_t n;

	if (s == NULL || (n = strlen(s)) == 0 || n > max)
		return 0;
	for (; *s != '\0'; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' &&
		    *s != '.')
			return 0;
	return 1;
}

/* Host interface prefix: leaves at least 9 hex digits of the 15 bytes. */
static int
bridge_prefix_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 6 || !islower((unsigned char)s[0]))
		return 0;
	for (; *s != '\0'; s++)
		if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s))
			return 0;
	return 1;
}

static int
image_ok(const char *s)
{
	size_t n;

	if (s == NULL || (n = strlen(s)) == 0 || n > 255)
		return 0;
	for (; *s != '\0'; s++)
		if (!isgraph((unsigned char)*s) || *s == '?' || *s == '#' ||
		    *s == '%')
			return 0;
	return 1;
}

static void
urlencode(const char *in, char *out, size_t outsz)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *in != '\0' && o + 4 < outsz; in++) {
		unsigned char c = (unsigned char)*in;

		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
}

/* RFC 3339 with optional fraction and a Z or +hh:mm offset -> Unix ms. */
static int64_t
parse_time_ms(const char *s)
{
	struct tm tm;
	const char *p;
	int64_t ms = 0, scale = 100, t;
	int sign, oh, om;

	if (s == NULL)
		return 0;
	memset(&tm, 0, sizeof(tm));
	p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (p == NULL)
		return 0;
	if (*p == '.') {
		for (p++; isdigit((unsigned char)*p); p++) {
			ms += (*p - '0') * scale;
			scale /= 10;
		}
	}
	t = (int64_t)timegm(&tm) * 1000 + ms;
	if (*p == '+' || *p == '-') {
		sign = *p == '-' ? -1 : 1;
		if (sscanf(p + 1, "%2d:%2d", &oh, &om) == 2)
			t -= sign * ((int64_t)oh * 3600 + om * 60) * 1000;
	}
	return t;
}

static const char *
jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "";
}

static const char *
label(json_t *labels, const char *key)
{
	return json_string_value(json_object_get(labels, key));
}

static int
managed(json_t *labels)
{
	const char *v = label(labels, L_MANAGED);

	return v != NULL && strcmp(v, "true") == 0;
}

/* A runtime error answer: {"message":"..."} (Docker and Podman). */
static void
runtime_err(struct sbx_err *err, int status, json_t *body, const char *what)
{
	const char *m = json_string_value(json_object_get(body, "message"));

	sbx_err_set(err, SBX_E_RUNTIME, "runtime refused to %s (HTTP %d): %s",
	    what, status, m != NULL ? m : "no message");
}

/* A create that lost a race with a concurrent one: Docker answers 409,
 * Podman 4.3 answers 500 "... is already in use" / "already exists". */
static int
name_taken(int status, json_t *body)
{
	const char *m = json_string_value(json_object_get(body, "message"));

	return status == 409 || (status == 500 && m != NULL &&
	    (strstr(m, "already in use") != NULL ||
	    strstr(m, "already exists") != NULL));
}

/* ---------- op lifetime ---------- */

static struct eop *
op_new(struct engine *e, enum op_kind kind, const char *id, struct sbx_err *err)
{
	struct eop *op;

	if (id != NULL && !id_valid(id)) {
		sbx_err_set(err, SBX_E_INVALID_ID,
		    "sandbox id must match [a-z0-9][a-z0-9-]{0,62}");
		return NULL;
	}
	if ((op = calloc(1, sizeof(*op))) == NULL) {
		sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
		return NULL;
	}
	op->base.driver = &e->base;
	op->e = e;
	op->kind = kind;
	if (id != NULL) {
		snprintf(op->id, sizeof(op->id), "%s", id);
		snprintf(op->cname, sizeof(op->cname), "%s%s", e->prefix, id);
		snprintf(op->vname, sizeof(op->vname), "%s%s-work", e->prefix, id);
		snprintf(op->nname, sizeof(op->nname), "%s%s-egress", e->prefix,
		    id);
	}
	TAILQ_INSERT_TAIL(&e->ops, op, link);
	return op;
}

static void
op_free(struct eop *op)
{
	if (op == NULL)
		return;
	TAILQ_REMOVE(&op->e->ops, op, link);
	if (op->waiting)
		TAILQ_REMOVE(&op->e->hwait, op, wlink);
	sbx_http_req_cancel(op->http);
	if (op->kill != NULL)
		op->kill->parent = NULL;  /* the kill runs on alone */
	if (op->parent != NULL)
		op->parent->kill = NULL;
	if (op->timer != NULL)
		event_free(op->timer);
	if (op->ftimer != NULL)
		event_free(op->ftimer);
	free(op->ents);
	if (op->defer != NULL)
		event_free(op->defer);
	if (op->retry != NULL)
		event_free(op->retry);
	if (op->resp != NULL)
		evbuffer_free(op->resp);
	if (op->stdin_buf != NULL)
		evbuffer_free(op->stdin_buf);
	if (op->out != NULL)
		evbuffer_free(op->out);
	if (op->errtail != NULL)
		evbuffer_free(op->errtail);
	json_decref(op->cmd);
	json_decref(op->env);
	json_decref(op->rkeep);
	json_decref(op->rnets);
	json_decref(op->gc);
	free(op);
}

/* Lets go of a write_stream's source (before its owner hears the end). */
static void
src_detach(struct eop *op)
{
	if (op->src != NULL && op->src_ent != NULL)
		evbuffer_remove_cb_entry(op->src, op->src_ent);
	op->src_ent = NULL;
	op->src = NULL;
}

/* Frees op now, or when the outermost callback frame on it returns. */
static void
op_release(struct eop *op)
{
	src_detach(op);
	op->dead = 1;
	sbx_http_req_cancel(op->http);
	op->http = NULL;
	if (op->busy == 0)
		op_free(op);
}

static void
op_enter(struct eop *op)
{
	op->busy++;
}

/* Returns 1 when op is still alive. */
static int
op_leave(struct eop *op)
{
	if (--op->busy == 0 && op->dead) {
		op_free(op);
		return 0;
	}
	return !op->dead;
}

/* ---------- terminal callbacks: each frees the op ---------- */

static void
finish_status(struct eop *op, const struct sbx_err *err,
    const struct sbx_status *st)
{
	if (op->status_cb != NULL)
		op->status_cb(op->arg, err, err != NULL ? NULL : st);
	op_release(op);
}

static void
finish_done(struct eop *op, const struct sbx_err *err)
{
	src_detach(op);
	if (op->done_cb != NULL)
		op->done_cb(op->arg, err);
	op_release(op);
}

static void
finish_sink_error(struct eop *op, const struct sbx_err *err)
{
	if (op->sink.error != NULL)
		op->sink.error(op->sink.arg, err);
	op_release(op);
}

/* Any op's failure, routed to the callback its kind has. */
static void
finish_err(struct eop *op, const struct sbx_err *err)
{
	switch (op->kind) {
	case OP_ENSURE:
	case OP_STATUS:
	case OP_USAGE:
		finish_status(op, err, NULL);
		break;
	case OP_EXEC:
	case OP_READ:
		finish_sink_error(op, err);
		break;
	case OP_LIST:
		if (op->list_cb != NULL)
			op->list_cb(op->arg, err, NULL, 0, 0);
		op_release(op);
		break;
	case OP_SANDBOXES:
		if (op->sandboxes_cb != NULL)
			op->sandboxes_cb(op->arg, err, NULL, 0);
		op_release(op);
		break;
	case OP_HEALTH:
		if (op->health_cb != NULL)
			op->health_cb(op->arg, err, NULL);
		op_release(op);
		break;
	case OP_WRITE:
	case OP_STOP:
	case OP_DESTROY:
	case OP_RECOVER:
	case OP_RECONCILE:
		finish_done(op, err);
		break;
	case OP_KILL:
	case OP_HGC:
		op_release(op);
		break;
	case OP_HELPER:
		helper_settle(op->e, err);
		op_release(op);
		break;
	}
}

static void kill_ended(struct eop *k, const struct sbx_err *err);

static void
defer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;

	(void)fd;
	(void)what;
	if (op->kind == OP_KILL)
		kill_ended(op, &op->derr);
	else
		finish_err(op, &op->derr);
}

/* A request that could not even be sent: report it from the event loop, so
 * no callback ever runs before the call that started the op has returned. */
static void
fail_later(struct eop *op, const struct sbx_err *err)
{
	op->derr = *err;
	if (op->defer == NULL)
		op->defer = event_new(op->e->base.base, -1, 0, defer_cb, op);
	if (op->defer == NULL) {
		/* Out of memory for even this: fail now rather than never. */
		defer_cb(-1, 0, op);
		return;
	}
	event_active(op->defer, EV_TIMEOUT, 0);
}

/* ---------- one JSON call to the runtime ---------- */

static void
call_response(void *arg, struct sbx_http_req *req, int status)
{
	(void)arg;
	(void)req;
	(void)status;
}

static void
call_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct eop *op = arg;

	(void)req;
	if (op->resp_over || evbuffer_get_length(op->resp) + len > RESP_MAX) {
		op->resp_over = 1;
		return;
	}
	evbuffer_add(op->resp, buf, len);
}

static void
call_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct eop *op = arg;
	json_t *body = NULL;
	json_error_t jerr;
	struct sbx_err e;
	size_t n;
	int status = sbx_http_req_status(req);
	cont_fn cont = op->cont;

	op->http = NULL;
	op->cont = NULL;
	if (err != NULL) {
		e = *err;
		if (strcmp(e.code, SBX_E_RUNTIME_UNAVAILABLE) == 0)
			snprintf(e.message, sizeof(e.message),
			    "container runtime unreachable at %s: is dockerd or "
			    "the podman service running?", op->e->address);
		cont(op, 0, NULL, &e);
		return;
	}
	if (op->resp_over) {
		sbx_err_set(&e, SBX_E_RUNTIME, "runtime answer too large");
		cont(op, status, NULL, &e);
		return;
	}
	n = evbuffer_get_length(op->resp);
	if (op->raw) {
		/* The continuation reads op->resp itself (a tar, not JSON). */
		op->raw = 0;
		cont(op, status, NULL, NULL);
		if (op->resp != NULL)
			evbuffer_drain(op->resp, evbuffer_get_length(op->resp));
		return;
	}
	if (n > 0) {
		body = json_loadb((const char *)evbuffer_pullup(op->resp, -1), n,
		    JSON_DECODE_ANY, &jerr);
		/* Some answers are text ("OK", plain errors): keep the text. */
		if (body == NULL)
			body = json_pack("{s:s%}", "message",
			    (const char *)evbuffer_pullup(op->resp, -1),
			    n > 200 ? (size_t)200 : n);
	}
	evbuffer_drain(op->resp, n);
	cont(op, status, body, NULL);
	json_decref(body);
}

/* Sends method path with len bytes of data (ctype; data may be NULL) and
 * continues in cont with the status and the answer: parsed JSON, or with
 * op->raw set the raw bytes left in op->resp. Failing to start ends the op. */
static void
call_bytes(struct eop *op, const char *method, const char *path,
    const char *ctype, const void *data, size_t len, cont_fn cont)
{
	struct sbx_http_request q;
	struct sbx_http_opts o;
	struct sbx_http_cbs cbs;
	struct sbx_err err;

	memset(&q, 0, sizeof(q));
	memset(&o, 0, sizeof(o));
	memset(&cbs, 0, sizeof(cbs));
	sbx_err_clear(&err);
	if (op->resp == NULL && (op->resp = evbuffer_new()) == NULL) {
		sbx_err_set(&err, SBX_E_INTERNAL, "out of memory");
		fail_later(op, &err);
		return;
	}
	op->resp_over = 0;
	evbuffer_drain(op->resp, evbuffer_get_length(op->resp));
	q.method = method;
	q.path = path;
	if (data != NULL) {
		q.content_type = ctype;
		q.body = data;
		q.body_len = len;
	}
	o.peer_name = "the container runtime";
	o.timeout_ms = op->e->req_timeout_ms;
	cbs.response = call_response;
	cbs.body = call_body;
	cbs.done = call_done;
	cbs.arg = op;
	op->cont = cont;
	op->http = sbx_http_request(op->e->base.base, op->e->address, &q, &o,
	    &cbs, &err);
	if (op->http == NULL)
		fail_later(op, &err);
}

/* Sends method path (with body, stolen, or NULL) and continues in cont with
 * the status and parsed answer, or with err. Failing to start ends the op. */
static void
call(struct eop *op, const char *method, const char *path, json_t *body,
    cont_fn cont)
{
	struct sbx_err err;
	char *text = NULL;

	if (body != NULL) {
		text = json_dumps(body, JSON_COMPACT);
		json_decref(body);
		if (text == NULL) {
			sbx_err_set(&err, SBX_E_INTERNAL, "out of memory");
			fail_later(op, &err);
			return;
		}
	}
	call_bytes(op, method, path, "application/json", text,
	    text != NULL ? strlen(text) : 0, cont);
	free(text);
}

/* ---------- status from an inspect answer ---------- */

static int
status_from_inspect(struct eop *op, json_t *c, struct sbx_status *st,
    struct sbx_err *err)
{
	json_t *cfg = json_object_get(c, "Config");
	json_t *labels = json_object_get(cfg, "Labels");
	json_t *state = json_object_get(c, "State");
	const char *v;

	if (!managed(labels) || (v = label(labels, L_ID)) == NULL ||
	    strcmp(v, op->id) != 0)
		return sbx_err_set(err, SBX_E_CONFLICT, "a container named %s "
		    "exists that sbx does not manage; it was left alone",
		    op->cname);
	memset(st, 0, sizeof(*st));
	snprintf(st->id, sizeof(st->id), "%s", op->id);
	st->state = json_is_true(json_object_get(state, "Running")) ?
	    SBX_STATE_RUNNING : SBX_STATE_STOPPED;
	v = label(labels, L_IMAGE);
	snprintf(st->image, sizeof(st->image), "%s",
	    v != NULL ? v : jstr(cfg, "Image"));
	v = label(labels, L_EGRESS);
	st->egress = v != NULL && strcmp(v, "1") == 0;
	st->created_at_ms = parse_time_ms(jstr(c, "Created"));
	if (st->state == SBX_STATE_STOPPED)
		snprintf(st->stop_reason, sizeof(st->stop_reason), "%s",
		    json_is_true(json_object_get(state, "OOMKilled")) ? "oom" :
		    "exited");
	snprintf(st->container_id, sizeof(st->container_id), "%s",
	    jstr(c, "Id"));
	snprintf(op->cid, sizeof(op->cid), "%s", jstr(c, "Id"));
	if (op->cid[0] == '\0' || !name_ok(op->cid, sizeof(op->cid) - 1))
		return sbx_err_set(err, SBX_E_RUNTIME,
		    "runtime gave no usable container id for %s", op->cname);
	return 0;
}

static void
absent_status(struct eop *op, struct sbx_status *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->id, sizeof(st->id), "%s", op->id);
	st->state = SBX_STATE_ABSENT;
}

static void
inspect_path(struct eop *op, char *path, size_t sz)
{
	snprintf(path, sz, API "/containers/%s/json", op->cname);
}

/* ---------- status ---------- */

static void
status_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status == 404) {
		absent_status(op, &st);
		finish_status(op, NULL, &st);
		return;
	}
	if (status != 200) {
		runtime_err(&e, status, body, "inspect the container");
		finish_err(op, &e);
		return;
	}
	if (status_from_inspect(op, body, &st, &e) < 0) {
		finish_err(op, &e);
		return;
	}
	finish_status(op, NULL, &st);
}

static struct sbx_op *
eng_status(struct sbx_driver *d, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char path[256];

	if ((op = op_new(e, OP_STATUS, id, err)) == NULL)
		return NULL;
	op->status_cb = cb;
	op->arg = arg;
	inspect_path(op, path, sizeof(path));
	call(op, "GET", path, NULL, status_inspected);
	return &op->base;
}

/* ---------- ensure ---------- */

static json_t *
labels_json(struct eop *op)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s}", L_MANAGED, "true", L_ID,
	    op->id, L_EGRESS, op->egress ? "1" : "0", L_IMAGE, op->image,
	    L_HELPER, op->e->helper_vol);
}

/*
 * A tmpfs option string owned by the sandbox user: runc gives a tmpfs the
 * mode of an existing mount point (so an image's 0755 /tmp beats mode=),
 * hence the owner too. Docker takes uid=,gid=; Podman refuses them and
 * takes U (chown to the container's user), and copies the image's
 * directory into the tmpfs unless notmpcopyup. Measured: adr/0009.
 */
static void
tmpfs_opts(struct engine *e, char *buf, size_t sz, int64_t size,
    const char *mode)
{
	if (e->flavor == FLAVOR_PODMAN)
		snprintf(buf, sz, "rw,noexec,nosuid,nodev,size=%" PRId64
		    ",mode=%s,U,notmpcopyup", size, mode);
	else
		snprintf(buf, sz, "rw,noexec,nosuid,nodev,size=%" PRId64
		    ",mode=%s,uid=%u,gid=%u", size, mode, e->uid, e->gid);
}

/* /tmp (1777) and the helper's state directory (0700), both the user's. */
static json_t *
sandbox_tmpfs(struct engine *e)
{
	char tmp[160], run[160];

	tmpfs_opts(e, tmp, sizeof(tmp), e->tmp_bytes, "1777");
	tmpfs_opts(e, run, sizeof(run), e->run_bytes, "0700");
	return json_pack("{s:s, s:s}", "/tmp", tmp, SBX_HELPER_RUN_DIR, run);
}

/*
 * The sandbox's volume at /work and the helper volume read-only at /.sbx.
 * nocopy: Docker copies the image's /work into an empty volume, owner
 * included, at every create while it stays empty; the init container's
 * create has done that copy, so the sandbox container's must not undo
 * its chown (adr/0009).
 */
static json_t *
sandbox_mounts(struct eop *op, int nocopy)
{
	return json_pack("[{s:s, s:s, s:s, s:{s:b}}, {s:s, s:s, s:s, s:b}]",
	    "Type", "volume", "Source", op->vname, "Target", WORK,
	    "VolumeOptions", "NoCopy", nocopy,
	    "Type", "volume", "Source", op->e->helper_vol, "Target",
	    SBX_HELPER_DIR, "ReadOnly", 1);
}

static json_t *
create_body(struct eop *op)
{
	struct engine *e = op->e;
	json_t *hc = NULL, *body = NULL, *mounts = NULL, *tmpfs = NULL;

	mounts = sandbox_mounts(op, e->flavor != FLAVOR_PODMAN);
	tmpfs = sandbox_tmpfs(e);
	if (mounts == NULL || tmpfs == NULL)
		goto fail;
	hc = json_pack("{s:b, s:[s], s:[s], s:b, s:o, s:I, s:I, s:I, s:I,"
	    " s:o, s:s, s:{s:s}}",
	    "Init", 1,
	    "CapDrop", "ALL",
	    "SecurityOpt", "no-new-privileges",
	    "ReadonlyRootfs", 1,
	    "Tmpfs", tmpfs,
	    "Memory", (json_int_t)op->mem,
	    "MemorySwap", (json_int_t)op->mem,
	    "NanoCpus", (json_int_t)op->cpus,
	    "PidsLimit", (json_int_t)op->pids,
	    "Mounts", mounts,
	    "NetworkMode", op->egress ? op->nname : "none",
	    "RestartPolicy", "Name", "no");
	mounts = tmpfs = NULL;
	if (hc == NULL)
		goto fail;
	if (e->oci_runtime != NULL)
		json_object_set_new(hc, "Runtime", json_string(e->oci_runtime));
	/* The helper is the idle main process: the image needs no shell, and
	 * an image's own ENTRYPOINT does not run. */
	body = json_pack("{s:s, s:s, s:o, s:[s], s:[s], s:[s,s], s:s, s:i, s:b,"
	    " s:b, s:o}",
	    "Image", op->image,
	    "User", e->user,
	    "Labels", labels_json(op),
	    "Entrypoint", SBX_HELPER_PATH,
	    "Cmd", SBX_HELPER_MODE_IDLE,
	    "Env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	    "HOME=" WORK,
	    "WorkingDir", WORK,
	    "StopTimeout", e->stop_timeout_s,
	    "Tty", 0,
	    "OpenStdin", 0,
	    "HostConfig", hc);
	hc = NULL;
	return body;
fail:
	json_decref(mounts);
	json_decref(tmpfs);
	json_decref(hc);
	return NULL;
}

static void ensure_volume(struct eop *op);
static void ensure_helper(struct eop *op);
static void ensure_init(struct eop *op);
static void helper_gc(struct engine *e);
static void ensure_network(struct eop *op);
static void ensure_create(struct eop *op);
static void ensure_start(struct eop *op);

static void
ensure_final(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 200) {
		runtime_err(&e, status, body, "inspect the new container");
		finish_err(op, &e);
		return;
	}
	if (status_from_inspect(op, body, &st, &e) < 0) {
		finish_err(op, &e);
		return;
	}
	if (st.state != SBX_STATE_RUNNING) {
		sbx_err_set(&e, SBX_E_RUNTIME, "container %s stopped right after "
		    "it was started", op->cname);
		finish_err(op, &e);
		return;
	}
	finish_status(op, NULL, &st);
}

static void
ensure_started(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	char path[256];

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 204 && status != 304) {
		runtime_err(&e, status, body, "start the container");
		finish_err(op, &e);
		return;
	}
	inspect_path(op, path, sizeof(path));
	call(op, "GET", path, NULL, ensure_final);
}

static void
ensure_start(struct eop *op)
{
	char path[256];

	snprintf(path, sizeof(path), API "/containers/%s/start", op->cid);
	call(op, "POST", path, NULL, ensure_started);
}

static void
ensure_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	ensure_inspect(arg);
}

/* Starts the ensure over from its inspect after a short, growing pause. */
static void
ensure_retry_later(struct eop *op)
{
	struct timeval tv = { 0, 0 };
	struct sbx_err e;

	op->retries++;
	tv.tv_usec = 20000L * op->retries;
	if (op->retry == NULL)
		op->retry = evtimer_new(op->e->base.base, ensure_retry_cb, op);
	if (op->retry == NULL || event_add(op->retry, &tv) < 0) {
		sbx_err_set(&e, SBX_E_INTERNAL, "cannot arm a timer");
		finish_err(op, &e);
	}
}

static void
ensure_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (name_taken(status, body) && op->retries < ENSURE_RETRIES) {
		/* A concurrent ensure made it: look again once it is visible. */
		ensure_retry_later(op);
		return;
	}
	if (status == 404) {
		sbx_err_set(&e, SBX_E_RUNTIME, "image %s is not present in the "
		    "runtime (nothing can be pulled here: build or import it)",
		    op->image);
		finish_err(op, &e);
		return;
	}
	if (status != 201) {
		runtime_err(&e, status, body, "create the container");
		finish_err(op, &e);
		return;
	}
	snprintf(op->cid, sizeof(op->cid), "%s", jstr(body, "Id"));
	if (!name_ok(op->cid, sizeof(op->cid) - 1)) {
		sbx_err_set(&e, SBX_E_RUNTIME, "runtime gave no container id");
		finish_err(op, &e);
		return;
	}
	ensure_start(op);
}

static void
ensure_create(struct eop *op)
{
	struct sbx_err e;
	json_t *body;
	char path[256];

	if ((body = create_body(op)) == NULL) {
		sbx_err_set(&e, SBX_E_INTERNAL, "out of memory");
		finish_err(op, &e);
		return;
	}
	snprintf(path, sizeof(path), API "/containers/create?name=%s", op->cname);
	call(op, "POST", path, body, ensure_created);
}

/* ---------- the egress network of one sandbox (ADR 0014) ----------
 *
 * Each sandbox granted egress has a bridge network of its own,
 * "<prefix><id>-egress", labelled io.sbx.managed=true and io.sbx.id=<id>,
 * whose host interface is "<egress_bridge_prefix><hex>" (at most 15 bytes,
 * IFNAMSIZ - 1): no other sandbox shares its layer 2, and the host firewall
 * (deploy/egress-firewall.sh) matches every sandbox bridge by that prefix.
 */

static void
bridge_name(const struct eop *op, char *out, size_t sz)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char h[8];
	size_t i, o;

	crypto_generichash(h, sizeof(h), (const unsigned char *)op->nname,
	    strlen(op->nname), NULL, 0);
	o = (size_t)snprintf(out, sz, "%s", op->e->bridge_prefix);
	for (i = 0; i < 2 * sizeof(h) && o < 15 && o + 1 < sz; i++)
		out[o++] = hex[(h[i / 2] >> (i % 2 ? 0 : 4)) & 15];
	out[o] = '\0';
}

/* 1 when a network inspect answer is this sandbox's network. */
static int
net_ours(const struct eop *op, json_t *net)
{
	json_t *labels = json_object_get(net, "Labels");
	const char *v = label(labels, L_ID);

	return managed(labels) && v != NULL && strcmp(v, op->id) == 0;
}

static void
net_dropped(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 200 && status != 204 && status != 404) {
		runtime_err(&e, status, body, "remove the egress network");
		finish_err(op, &e);
		return;
	}
	op->after_net(op);
}

static void
net_drop_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	char path[256];

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	/* Absent, or a network of that name sbx did not make: nothing of ours. */
	if (status == 404 || (status == 200 && !net_ours(op, body))) {
		op->after_net(op);
		return;
	}
	if (status != 200 || !name_ok(jstr(body, "Id"), 128)) {
		runtime_err(&e, status, body, "inspect the egress network");
		finish_err(op, &e);
		return;
	}
	snprintf(path, sizeof(path), API "/networks/%s", jstr(body, "Id"));
	call(op, "DELETE", path, NULL, net_dropped);
}

/* Removes the sandbox's egress network if sbx made it (its container must be
 * gone: a network in use is an error), then continues in after. */
static void
net_drop(struct eop *op, void (*after)(struct eop *))
{
	char path[256];

	op->after_net = after;
	snprintf(path, sizeof(path), API "/networks/%s", op->nname);
	call(op, "GET", path, NULL, net_drop_inspected);
}

static void
network_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	/* Taken: created by a concurrent ensure of the same id. */
	if (status != 201 && status != 200 && !name_taken(status, body)) {
		runtime_err(&e, status, body, "create the egress network");
		finish_err(op, &e);
		return;
	}
	ensure_create(op);
}

static void
network_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	json_t *req;
	char path[256], bridge[32];

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status == 200) {
		if (!net_ours(op, body)) {
			sbx_err_set(&e, SBX_E_CONFLICT, "a network named %s "
			    "exists that sbx does not manage; it was left alone",
			    op->nname);
			finish_err(op, &e);
			return;
		}
		ensure_create(op);
		return;
	}
	if (status != 404) {
		runtime_err(&e, status, body, "inspect the egress network");
		finish_err(op, &e);
		return;
	}
	bridge_name(op, bridge, sizeof(bridge));
	req = json_pack("{s:s, s:s, s:b, s:b, s:{s:s, s:s}, s:{s:s}}",
	    "Name", op->nname, "Driver", "bridge", "CheckDuplicate", 1,
	    "Internal", 0, "Labels", L_MANAGED, "true", L_ID, op->id,
	    "Options", "com.docker.network.bridge.name", bridge);
	if (req == NULL) {
		sbx_err_set(&e, SBX_E_INTERNAL, "out of memory");
		finish_err(op, &e);
		return;
	}
	snprintf(path, sizeof(path), API "/networks/create");
	call(op, "POST", path, req, network_created);
}

static void
ensure_network(struct eop *op)
{
	char path[256];

	if (!op->egress) {
		/* Egress revoked: the old container is gone, so is its network. */
		if (op->drop_net)
			net_drop(op, ensure_create);
		else
			ensure_create(op);
		return;
	}
	snprintf(path, sizeof(path), API "/networks/%s", op->nname);
	call(op, "GET", path, NULL, network_inspected);
}

/* The volume existed and its create answer showed no labels: inspect's. */
static void
volume_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 200 || !managed(json_object_get(body, "Labels"))) {
		sbx_err_set(&e, SBX_E_CONFLICT, "a volume named %s exists that "
		    "sbx does not manage; it was left alone", op->vname);
		finish_err(op, &e);
		return;
	}
	ensure_init(op);
}

static void
volume_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (name_taken(status, body) && op->retries < ENSURE_RETRIES) {
		ensure_retry_later(op);
		return;
	}
	if (status != 201 && status != 200) {
		runtime_err(&e, status, body, "create the volume");
		finish_err(op, &e);
		return;
	}
	/* An existing volume is returned as is: it must be ours. Docker
	 * 20.10 answers a create of an existing volume after a daemon
	 * restart without its labels ("Labels":null): ask inspect. */
	if (!managed(json_object_get(body, "Labels"))) {
		char path[256];

		snprintf(path, sizeof(path), API "/volumes/%s", op->vname);
		call(op, "GET", path, NULL, volume_inspected);
		return;
	}
	ensure_init(op);
}

static void
ensure_volume(struct eop *op)
{
	struct engine *en = op->e;
	struct sbx_err e;
	json_t *req;
	char o[64];

	req = json_pack("{s:s, s:o}", "Name", op->vname, "Labels",
	    json_pack("{s:s, s:s}", L_MANAGED, "true", L_ID, op->id));
	/* Podman's local driver sets the new volume's owner itself, also
	 * when the image's /work is root's (adr/0009); Docker's refuses the
	 * option without a device: there an init container does it. */
	if (req != NULL && en->flavor == FLAVOR_PODMAN) {
		snprintf(o, sizeof(o), "uid=%u,gid=%u", en->uid, en->gid);
		json_object_set_new(req, "DriverOpts", json_pack("{s:s}", "o", o));
	}
	if (req == NULL) {
		sbx_err_set(&e, SBX_E_INTERNAL, "out of memory");
		finish_err(op, &e);
		return;
	}
	call(op, "POST", API "/volumes/create", req, volume_created);
}

static void
ensure_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 204 && status != 404) {
		runtime_err(&e, status, body, "remove the old container");
		finish_err(op, &e);
		return;
	}
	op->cid[0] = '\0';
	if (op->old_helper[0] != '\0' &&
	    strcmp(op->old_helper, op->e->helper_vol) != 0)
		helper_gc(op->e);
	ensure_helper(op);
}

/* 1 when a container inspect answer shows it attached to the sandbox's own
 * egress network; 0 for one made before ADR 0014 on the shared one, which
 * ensure replaces (the volume stays). */
static int
on_own_network(const struct eop *op, json_t *c)
{
	json_t *nets = json_object_get(json_object_get(c, "NetworkSettings"),
	    "Networks");

	return json_object_get(nets, op->nname) != NULL;
}

static void
ensure_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;
	const char *hl;
	char path[256];

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status == 404) {
		/* A new volume, or one left without its container: its root is
		 * made the user's (never what is in it). */
		op->need_init = 1;
		ensure_helper(op);
		return;
	}
	if (status != 200) {
		runtime_err(&e, status, body, "inspect the container");
		finish_err(op, &e);
		return;
	}
	if (status_from_inspect(op, body, &st, &e) < 0) {
		finish_err(op, &e);
		return;
	}
	hl = label(json_object_get(json_object_get(body, "Config"), "Labels"),
	    L_HELPER);
	snprintf(op->old_helper, sizeof(op->old_helper), "%s",
	    hl != NULL ? hl : "");
	/* Egress revoked: its network goes once the container has. */
	op->drop_net = st.egress && !op->egress;
	if (st.egress != op->egress || strcmp(st.image, op->image) != 0 ||
	    strcmp(op->old_helper, op->e->helper_vol) != 0 ||
	    (op->egress && !on_own_network(op, body))) {
		/* Replace the container; the volume (the sandbox's data) stays.
		 * A helper other than ours (rebuilt, or the bind mount before
		 * adr/0009) is replaced too, and so is an egress sandbox not on
		 * its own network (before adr/0014). Without our helper label
		 * the volume was made before /work got its owner: prepare it. */
		op->need_init = hl == NULL;
		snprintf(path, sizeof(path), API "/containers/%s?force=1&v=0",
		    op->cid);
		call(op, "DELETE", path, NULL, ensure_removed);
		return;
	}
	if (st.state == SBX_STATE_RUNNING) {
		finish_status(op, NULL, &st);
		return;
	}
	ensure_start(op);
}

static void
ensure_inspect(struct eop *op)
{
	char path[256];

	inspect_path(op, path, sizeof(path));
	call(op, "GET", path, NULL, ensure_inspected);
}

/* ---------- /work's owner: the init container (Docker) ---------- */

/*
 * On Docker a new volume takes the owner of the image's /work (root when
 * the image has none): before the sandbox container exists, a short-lived
 * container of the same image (so the volume's copy-up is the image's, as
 * before) runs `sbx-helper initwork UID:GID` as root with CAP_CHOWN and
 * CAP_FOWNER only, no network, read-only root, and is removed. The sandbox
 * container itself never holds a capability (adr/0009).
 */
static void init_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err);

static void
init_remove(struct eop *op)
{
	char path[256];

	snprintf(path, sizeof(path), API "/containers/%s?force=1&v=0",
	    op->aux_cid);
	call(op, "DELETE", path, NULL, init_removed);
}

/* Ends the init step with e (NULL: success) once its container is gone. */
static void
init_fail(struct eop *op, const struct sbx_err *e)
{
	op->aux_err = *e;
	if (op->aux_cid[0] == '\0') {
		finish_err(op, e);
		return;
	}
	init_remove(op);
}

static void
init_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	op->aux_cid[0] = '\0';
	if (op->aux_err.code[0] != '\0') {
		e = op->aux_err;
		finish_err(op, &e);
		return;
	}
	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 204 && status != 404) {
		runtime_err(&e, status, body, "remove the init container");
		finish_err(op, &e);
		return;
	}
	if (op->aux_code != 0) {
		sbx_err_set(&e, SBX_E_RUNTIME, "making /work of %s belong to the "
		    "sandbox user failed (sbx-helper initwork exit status %" PRId64
		    ")", op->cname, op->aux_code);
		finish_err(op, &e);
		return;
	}
	op->need_init = 0;
	ensure_network(op);
}

static void
init_waited(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		init_fail(op, err);
		return;
	}
	if (status != 200 || !json_is_integer(json_object_get(body,
	    "StatusCode"))) {
		runtime_err(&e, status, body, "wait for the init container");
		init_fail(op, &e);
		return;
	}
	op->aux_code = json_integer_value(json_object_get(body, "StatusCode"));
	init_remove(op);
}

static void
init_started(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	char path[256];

	if (err != NULL) {
		init_fail(op, err);
		return;
	}
	if (status != 204 && status != 304) {
		runtime_err(&e, status, body, "start the init container");
		init_fail(op, &e);
		return;
	}
	snprintf(path, sizeof(path), API "/containers/%s/wait", op->aux_cid);
	call(op, "POST", path, NULL, init_waited);
}

static void init_create(struct eop *op);

static void
init_stale_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	init_create(op);
}

static void
init_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	char path[300];

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (name_taken(status, body) && op->aux_tries++ == 0) {
		/* Left by a broker that died here: ours by its name (ids
		 * cannot hold a '.'). */
		snprintf(path, sizeof(path), API "/containers/%s.init?force=1&v=0",
		    op->cname);
		call(op, "DELETE", path, NULL, init_stale_removed);
		return;
	}
	if (status == 404) {
		sbx_err_set(&e, SBX_E_RUNTIME, "image %s is not present in the "
		    "runtime (nothing can be pulled here: build or import it)",
		    op->image);
		finish_err(op, &e);
		return;
	}
	if (status != 201 || !name_ok(jstr(body, "Id"), sizeof(op->aux_cid) - 1)) {
		runtime_err(&e, status, body, "create the init container");
		finish_err(op, &e);
		return;
	}
	snprintf(op->aux_cid, sizeof(op->aux_cid), "%s", jstr(body, "Id"));
	snprintf(path, sizeof(path), API "/containers/%s/start", op->aux_cid);
	call(op, "POST", path, NULL, init_started);
}

static void
init_create(struct eop *op)
{
	struct engine *e = op->e;
	struct sbx_err err;
	json_t *body;
	char path[300], owner[32];

	snprintf(owner, sizeof(owner), "%u:%u", e->uid, e->gid);
	body = json_pack("{s:s, s:s, s:[s], s:[s,s], s:s, s:{s:s, s:s},"
	    " s:b, s:{s:s, s:[s], s:[s,s], s:[s], s:b, s:o, s:I, s:I}}",
	    "Image", op->image,
	    "User", "0:0",
	    "Entrypoint", SBX_HELPER_PATH,
	    "Cmd", SBX_HELPER_MODE_INITWORK, owner,
	    "WorkingDir", "/",
	    "Labels", L_MANAGED, "true", L_ROLE, "init",
	    "NetworkDisabled", 1,
	    "HostConfig",
	    "NetworkMode", "none",
	    "CapDrop", "ALL",
	    "CapAdd", "CHOWN", "FOWNER",
	    "SecurityOpt", "no-new-privileges",
	    "ReadonlyRootfs", 1,
	    "Mounts", sandbox_mounts(op, 0),
	    "Memory", (json_int_t)(64 << 20),
	    "PidsLimit", (json_int_t)16);
	if (body == NULL) {
		sbx_err_set(&err, SBX_E_INTERNAL, "out of memory");
		finish_err(op, &err);
		return;
	}
	if (e->oci_runtime != NULL)
		json_object_set_new(json_object_get(body, "HostConfig"), "Runtime",
		    json_string(e->oci_runtime));
	snprintf(path, sizeof(path), API "/containers/create?name=%s.init",
	    op->cname);
	call(op, "POST", path, body, init_created);
}

static void
ensure_init(struct eop *op)
{
	if (!op->need_init || op->e->flavor == FLAVOR_PODMAN) {
		ensure_network(op);
		return;
	}
	sbx_err_clear(&op->aux_err);
	op->aux_tries = 0;
	init_create(op);
}

/* ---------- the helper volume ---------- */

/*
 * The helper reaches sandboxes as a read-only named volume the broker
 * fills through the Engine API, so it works wherever the broker runs (also
 * in a container, where a bind source would be resolved on the host):
 * volume <stem>-<16 hex of sha256>, labelled io.sbx.managed, io.sbx.helper-
 * stem and io.sbx.helper-sha256. Once per broker process, before its first
 * container: /version (Docker or Podman), create the volume, create (never
 * start) a container of the ensure's image with it at /.sbx, GET the file
 * back and, unless it is already our bytes, PUT the one-file tar, remove
 * the container. Ensures that need a container wait for it; afterwards old
 * helper volumes of the stem that no container uses are removed.
 */
static void hp_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err);

static void
helper_settle(struct engine *e, const struct sbx_err *err)
{
	struct eop *w;

	e->hstate = err == NULL ? H_READY : H_NONE;
	while ((w = TAILQ_FIRST(&e->hwait)) != NULL) {
		TAILQ_REMOVE(&e->hwait, w, wlink);
		w->waiting = 0;
		if (err != NULL)
			finish_err(w, err);
		else
			ensure_volume(w);
	}
	if (err == NULL)
		helper_gc(e);
}

static void
hp_finish(struct eop *op, const struct sbx_err *err)
{
	if (err != NULL)
		log_warn("helper volume not ready", "volume", op->e->helper_vol,
		    "error", err->message, NULL);
	helper_settle(op->e, err);
	op_release(op);
}

/* Removes the fill container (if any), then ends with err (NULL: ready). */
static void
hp_end(struct eop *op, const struct sbx_err *err)
{
	char path[256];

	if (err != NULL)
		op->aux_err = *err;
	if (op->aux_cid[0] == '\0') {
		hp_finish(op, err);
		return;
	}
	snprintf(path, sizeof(path), API "/containers/%s?force=1&v=0",
	    op->aux_cid);
	call(op, "DELETE", path, NULL, hp_removed);
}

static void
hp_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	op->aux_cid[0] = '\0';
	if (op->aux_err.code[0] != '\0') {
		e = op->aux_err;
		hp_finish(op, &e);
		return;
	}
	if (err != NULL) {
		hp_finish(op, err);
		return;
	}
	if (status != 204 && status != 404) {
		runtime_err(&e, status, body, "remove the helper fill container");
		hp_finish(op, &e);
		return;
	}
	hp_finish(op, NULL);
}

static void
hp_put(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	if (status != 200) {
		runtime_err(&e, status, body, "copy sbx-helper into its volume");
		hp_end(op, &e);
		return;
	}
	hp_end(op, NULL);
}

/* 1 when the tar in buf[0..n) starts with a regular file holding exactly
 * the helper's bytes. */
static int
tar_holds_helper(struct engine *e, const unsigned char *buf, size_t n)
{
	unsigned long long size = 0;
	size_t i;

	if (n < 512 || (buf[156] != '0' && buf[156] != '\0'))
		return 0;
	for (i = 124; i < 136 && buf[i] >= '0' && buf[i] <= '7'; i++)
		size = size * 8 + (unsigned)(buf[i] - '0');
	return size == e->helper_len && n >= 512 + size &&
	    memcmp(buf + 512, e->helper_tar + 512, e->helper_len) == 0;
}

static void
hp_got(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct engine *e = op->e;
	char path[256];
	size_t n;

	(void)body;
	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	n = evbuffer_get_length(op->resp);
	/* Already filled (an earlier broker, or another one sharing the
	 * runtime): never rewrite a file running sandboxes may be executing. */
	if (status == 200 && !op->resp_over &&
	    tar_holds_helper(e, evbuffer_pullup(op->resp, -1), n)) {
		hp_end(op, NULL);
		return;
	}
	snprintf(path, sizeof(path), API "/containers/%s/archive?path=%s",
	    op->aux_cid, SBX_HELPER_DIR);
	call_bytes(op, "PUT", path, "application/x-tar", e->helper_tar,
	    e->helper_tar_len, hp_put);
}

static void hp_fill(struct eop *op);

static void
hp_stale_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	hp_fill(op);
}

static void
hp_created(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct engine *e = op->e;
	struct sbx_err er;
	char path[300];

	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	if (name_taken(status, body) && op->aux_tries++ == 0) {
		snprintf(path, sizeof(path), API "/containers/%s.fill?force=1&v=0",
		    e->helper_vol);
		call(op, "DELETE", path, NULL, hp_stale_removed);
		return;
	}
	if (status == 404) {
		sbx_err_set(&er, SBX_E_RUNTIME, "image %s is not present in the "
		    "runtime (nothing can be pulled here: build or import it)",
		    op->image);
		hp_end(op, &er);
		return;
	}
	if (status != 201 || !name_ok(jstr(body, "Id"), sizeof(op->aux_cid) - 1)) {
		runtime_err(&er, status, body, "create the helper fill container");
		hp_end(op, &er);
		return;
	}
	snprintf(op->aux_cid, sizeof(op->aux_cid), "%s", jstr(body, "Id"));
	snprintf(path, sizeof(path), API "/containers/%s/archive?path=%s",
	    op->aux_cid, SBX_HELPER_PATH);
	op->raw = 1;
	call(op, "GET", path, NULL, hp_got);
}

static void
hp_fill(struct eop *op)
{
	struct engine *e = op->e;
	struct sbx_err err;
	json_t *body;
	char path[300];

	/* Never started: any image will do, and the ensure's is present. */
	body = json_pack("{s:s, s:[s], s:[s], s:{s:s, s:s}, s:b,"
	    " s:{s:s, s:[s], s:[{s:s, s:s, s:s, s:{s:b}}]}}",
	    "Image", op->image,
	    "Entrypoint", SBX_HELPER_PATH,
	    "Cmd", SBX_HELPER_MODE_VERSION,
	    "Labels", L_MANAGED, "true", L_ROLE, "helper-fill",
	    "NetworkDisabled", 1,
	    "HostConfig",
	    "NetworkMode", "none",
	    "CapDrop", "ALL",
	    "Mounts", "Type", "volume", "Source", e->helper_vol, "Target",
	    SBX_HELPER_DIR, "VolumeOptions", "NoCopy", 1);
	if (body == NULL) {
		sbx_err_set(&err, SBX_E_INTERNAL, "out of memory");
		hp_end(op, &err);
		return;
	}
	snprintf(path, sizeof(path), API "/containers/create?name=%s.fill",
	    e->helper_vol);
	call(op, "POST", path, body, hp_created);
}

static void
hp_volume_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	if (status != 200 || !managed(json_object_get(body, "Labels"))) {
		sbx_err_set(&e, SBX_E_CONFLICT, "a volume named %s exists that "
		    "sbx does not manage; it was left alone", op->e->helper_vol);
		hp_end(op, &e);
		return;
	}
	hp_fill(op);
}

static void
hp_volume(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	if (status != 201 && status != 200 && !name_taken(status, body)) {
		runtime_err(&e, status, body, "create the helper volume");
		hp_end(op, &e);
		return;
	}
	if (status != 409 && status != 500 &&
	    !managed(json_object_get(body, "Labels"))) {
		/* Docker 20.10 after a restart: labels only in inspect. */
		char path[256];

		snprintf(path, sizeof(path), API "/volumes/%s",
		    op->e->helper_vol);
		call(op, "GET", path, NULL, hp_volume_inspected);
		return;
	}
	hp_fill(op);
}

static void
hp_version(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct engine *e = op->e;
	struct sbx_err er;
	json_t *comp, *req;
	size_t i;

	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	if (status != 200) {
		runtime_err(&er, status, body, "tell its version");
		hp_end(op, &er);
		return;
	}
	e->flavor = FLAVOR_DOCKER;
	json_array_foreach(json_object_get(body, "Components"), i, comp)
		if (strstr(jstr(comp, "Name"), "Podman") != NULL)
			e->flavor = FLAVOR_PODMAN;
	req = json_pack("{s:s, s:{s:s, s:s, s:s}}", "Name", e->helper_vol,
	    "Labels", L_MANAGED, "true", L_HELPER_STEM, e->helper_stem,
	    L_HELPER_SHA, e->helper_sha);
	if (req == NULL) {
		sbx_err_set(&er, SBX_E_INTERNAL, "out of memory");
		hp_end(op, &er);
		return;
	}
	call(op, "POST", API "/volumes/create", req, hp_volume);
}

/* Waits op (an ensure about to create a container) for the helper volume. */
static void
ensure_helper(struct eop *op)
{
	struct engine *e = op->e;
	struct sbx_err err;
	struct eop *hp;

	if (e->helper_tar == NULL) {
		sbx_err_set(&err, SBX_E_RUNTIME, "%s", e->helper_err);
		finish_err(op, &err);
		return;
	}
	if (e->hstate == H_READY) {
		ensure_volume(op);
		return;
	}
	TAILQ_INSERT_TAIL(&e->hwait, op, wlink);
	op->waiting = 1;
	if (e->hstate == H_BUSY)
		return;
	if ((hp = op_new(e, OP_HELPER, NULL, &err)) == NULL) {
		helper_settle(e, &err);
		return;
	}
	e->hstate = H_BUSY;
	snprintf(hp->image, sizeof(hp->image), "%s", op->image);
	sbx_err_clear(&hp->aux_err);
	call(hp, "GET", API "/version", NULL, hp_version);
}

/* ---------- old helper volumes ---------- */

static void gc_next(struct eop *op);

static void
gc_removed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	(void)status;
	(void)body;
	(void)err;
	/* 409: still mounted by a container; it goes when that one does. */
	gc_next(op);
}

static void
gc_next(struct eop *op)
{
	char path[256];
	const char *name;

	if (op->gc_i >= json_array_size(op->gc)) {
		op_release(op);
		return;
	}
	name = json_string_value(json_array_get(op->gc, op->gc_i++));
	snprintf(path, sizeof(path), API "/volumes/%s", name);
	call(op, "DELETE", path, NULL, gc_removed);
}

static void
gc_listed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	json_t *v;
	const char *name;
	size_t i;

	if (err != NULL || status != 200) {
		op_release(op);
		return;
	}
	json_array_foreach(json_object_get(body, "Volumes"), i, v) {
		name = jstr(v, "Name");
		/* The filter is the runtime's; check again ourselves. */
		if (!managed(json_object_get(v, "Labels")) ||
		    label(json_object_get(v, "Labels"), L_HELPER_STEM) == NULL ||
		    strcmp(label(json_object_get(v, "Labels"), L_HELPER_STEM),
		    op->e->helper_stem) != 0 ||
		    strcmp(name, op->e->helper_vol) == 0 || !name_ok(name, 128))
			continue;
		json_array_append_new(op->gc, json_string(name));
	}
	gc_next(op);
}

/* Removes (in the background) this stem's helper volumes other than ours
 * that no container mounts any more. */
static void
helper_gc(struct engine *e)
{
	struct sbx_err err;
	struct eop *op;
	char path[512], filt[256], raw[160];

	if ((op = op_new(e, OP_HGC, NULL, &err)) == NULL)
		return;
	if ((op->gc = json_array()) == NULL) {
		op_release(op);
		return;
	}
	snprintf(raw, sizeof(raw), "{\"label\":[\"" L_HELPER_STEM "=%s\"]}",
	    e->helper_stem);
	urlencode(raw, filt, sizeof(filt));
	snprintf(path, sizeof(path), API "/volumes?filters=%s", filt);
	call(op, "GET", path, NULL, gc_listed);
}

static int
pick_limit(const char *what, int64_t asked, const struct sbx_engine_limit *l,
    int64_t *out, struct sbx_err *err)
{
	if (asked < 0)
		return sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "%s must not be "
		    "negative", what);
	if (asked > l->ceiling)
		return sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "%s of %" PRId64
		    " is above the configured ceiling of %" PRId64, what, asked,
		    l->ceiling);
	*out = asked > 0 ? asked : l->def;
	return 0;
}

static int
image_allowed(struct engine *e, const char *image)
{
	char **p;

	for (p = e->images; *p != NULL; p++)
		if (strcmp(*p, image) == 0)
			return 1;
	return 0;
}

static struct sbx_op *
eng_ensure(struct sbx_driver *d, const char *id, const struct sbx_spec *spec,
    sbx_status_cb cb, void *arg, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct sbx_spec none;
	const char *image;
	int64_t mem, cpus, pids;
	struct eop *op;

	if (!id_valid(id)) {
		sbx_err_set(err, SBX_E_INVALID_ID,
		    "sandbox id must match [a-z0-9][a-z0-9-]{0,62}");
		return NULL;
	}
	if (spec == NULL) {
		memset(&none, 0, sizeof(none));
		spec = &none;
	}
	image = spec->image != NULL ? spec->image : e->default_image;
	if (!image_allowed(e, image)) {
		sbx_err_set(err, SBX_E_IMAGE_NOT_ALLOWED,
		    "image is not in the broker's allowlist");
		return NULL;
	}
	if (pick_limit("memory_bytes", spec->memory_bytes, &e->mem, &mem, err) < 0 ||
	    pick_limit("nano_cpus", spec->nano_cpus, &e->cpus, &cpus, err) < 0 ||
	    pick_limit("pids", spec->pids, &e->pids, &pids, err) < 0)
		return NULL;
	if ((op = op_new(e, OP_ENSURE, id, err)) == NULL)
		return NULL;
	op->status_cb = cb;
	op->arg = arg;
	snprintf(op->image, sizeof(op->image), "%s", image);
	op->egress = spec->egress != 0;
	op->mem = mem;
	op->cpus = cpus;
	op->pids = pids;
	ensure_inspect(op);
	return &op->base;
}

/* ---------- stop ---------- */

static void
stop_done(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status == 404) {
		sbx_err_set(&e, SBX_E_NOT_FOUND, "sandbox %s does not exist", op->id);
		finish_err(op, &e);
		return;
	}
	if (status != 204 && status != 304) {
		runtime_err(&e, status, body, "stop the container");
		finish_err(op, &e);
		return;
	}
	finish_done(op, NULL);
}

/*
 * Classifies a container inspect answer for an operation that acts on a
 * running sandbox: 1 running, 0 absent (st->state ABSENT) or not running,
 * -1 when op has already been finished with the error (transport, runtime
 * or label). st is filled for 0 and 1.
 */
static int
inspect_running(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, struct sbx_status *st)
{
	struct sbx_err e;

	memset(st, 0, sizeof(*st));
	if (err != NULL) {
		finish_err(op, err);
		return -1;
	}
	if (status == 404)
		return 0;
	if (status != 200) {
		runtime_err(&e, status, body, "inspect the container");
		finish_err(op, &e);
		return -1;
	}
	if (status_from_inspect(op, body, st, &e) < 0) {
		finish_err(op, &e);
		return -1;
	}
	return st->state == SBX_STATE_RUNNING;
}

static void
stop_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;
	char path[256];
	int r;

	if ((r = inspect_running(op, status, body, err, &st)) < 0)
		return;
	if (r == 0 && st.state == SBX_STATE_ABSENT) {
		sbx_err_set(&e, SBX_E_NOT_FOUND, "sandbox %s does not exist", op->id);
		finish_err(op, &e);
		return;
	}
	if (r == 0) {
		finish_done(op, NULL);   /* already stopped */
		return;
	}
	snprintf(path, sizeof(path), API "/containers/%s/stop?t=%d", op->cid,
	    op->e->stop_timeout_s);
	call(op, "POST", path, NULL, stop_done);
}

static struct sbx_op *
eng_stop(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char path[256];

	if ((op = op_new(e, OP_STOP, id, err)) == NULL)
		return NULL;
	op->done_cb = cb;
	op->arg = arg;
	inspect_path(op, path, sizeof(path));
	call(op, "GET", path, NULL, stop_inspected);
	return &op->base;
}

/* ---------- destroy ---------- */

/* Last step of destroy: container, volume, then the egress network gone. */
static void
destroy_finish(struct eop *op)
{
	finish_done(op, NULL);
}

static void
destroy_volume_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 204 && status != 404) {
		runtime_err(&e, status, body, "remove the volume");
		finish_err(op, &e);
		return;
	}
	net_drop(op, destroy_finish);
}

static void
destroy_volume_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	char path[256];

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status == 404) {
		net_drop(op, destroy_finish);
		return;
	}
	if (status != 200) {
		runtime_err(&e, status, body, "inspect the volume");
		finish_err(op, &e);
		return;
	}
	if (!managed(json_object_get(body, "Labels"))) {
		sbx_err_set(&e, SBX_E_CONFLICT, "a volume named %s exists that "
		    "sbx does not manage; it was left alone", op->vname);
		finish_err(op, &e);
		return;
	}
	snprintf(path, sizeof(path), API "/volumes/%s", op->vname);
	call(op, "DELETE", path, NULL, destroy_volume_removed);
}

static void
destroy_init_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	char path[256];

	(void)status;
	(void)body;
	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	snprintf(path, sizeof(path), API "/volumes/%s", op->vname);
	call(op, "GET", path, NULL, destroy_volume_inspected);
}

/* First the init container a broker killed during an ensure may have left
 * (ours by its name: ids cannot hold a '.'; it holds the volume, found by
 * test_faults.py), then the volume. */
static void
destroy_volume(struct eop *op)
{
	char path[300];

	snprintf(path, sizeof(path), API "/containers/%s.init?force=1&v=0",
	    op->cname);
	call(op, "DELETE", path, NULL, destroy_init_removed);
}

static void
destroy_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 204 && status != 404) {
		runtime_err(&e, status, body, "remove the container");
		finish_err(op, &e);
		return;
	}
	/* The last user of an old helper volume may have gone. */
	if (op->old_helper[0] != '\0' &&
	    strcmp(op->old_helper, op->e->helper_vol) != 0)
		helper_gc(op->e);
	destroy_volume(op);
}

static void
destroy_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;
	char path[256];

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status == 404) {
		destroy_volume(op);
		return;
	}
	if (status != 200) {
		runtime_err(&e, status, body, "inspect the container");
		finish_err(op, &e);
		return;
	}
	if (status_from_inspect(op, body, &st, &e) < 0) {
		finish_err(op, &e);
		return;
	}
	snprintf(op->old_helper, sizeof(op->old_helper), "%s",
	    label(json_object_get(json_object_get(body, "Config"), "Labels"),
	    L_HELPER) != NULL ? label(json_object_get(json_object_get(body,
	    "Config"), "Labels"), L_HELPER) : "");
	snprintf(path, sizeof(path), API "/containers/%s?force=1&v=0", op->cid);
	call(op, "DELETE", path, NULL, destroy_removed);
}

static struct sbx_op *
eng_destroy(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char path[256];

	if ((op = op_new(e, OP_DESTROY, id, err)) == NULL)
		return NULL;
	op->done_cb = cb;
	op->arg = arg;
	inspect_path(op, path, sizeof(path));
	call(op, "GET", path, NULL, destroy_inspected);
	return &op->base;
}

/* ---------- list_sandboxes ---------- */

static void
sandboxes_listed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status *sts = NULL;
	struct sbx_err e;
	json_t *c, *labels;
	const char *v, *state;
	size_t i, n = 0;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 200 || !json_is_array(body)) {
		runtime_err(&e, status, body, "list containers");
		finish_err(op, &e);
		return;
	}
	if (json_array_size(body) > 0 &&
	    (sts = calloc(json_array_size(body), sizeof(*sts))) == NULL) {
		sbx_err_set(&e, SBX_E_INTERNAL, "out of memory");
		finish_err(op, &e);
		return;
	}
	json_array_foreach(body, i, c) {
		labels = json_object_get(c, "Labels");
		/* The filter is the runtime's; check again ourselves. */
		if (!managed(labels) || (v = label(labels, L_ID)) == NULL ||
		    !id_valid(v))
			continue;
		snprintf(sts[n].id, sizeof(sts[n].id), "%s", v);
		state = jstr(c, "State");
		sts[n].state = strcmp(state, "running") == 0 ?
		    SBX_STATE_RUNNING : SBX_STATE_STOPPED;
		v = label(labels, L_IMAGE);
		snprintf(sts[n].image, sizeof(sts[n].image), "%s",
		    v != NULL ? v : jstr(c, "Image"));
		v = label(labels, L_EGRESS);
		sts[n].egress = v != NULL && strcmp(v, "1") == 0;
		sts[n].created_at_ms =
		    (int64_t)json_integer_value(json_object_get(c, "Created")) * 1000;
		if (sts[n].state == SBX_STATE_STOPPED)
			snprintf(sts[n].stop_reason, sizeof(sts[n].stop_reason),
			    "exited");
		snprintf(sts[n].container_id, sizeof(sts[n].container_id), "%s",
		    jstr(c, "Id"));
		n++;
	}
	if (op->sandboxes_cb != NULL)
		op->sandboxes_cb(op->arg, NULL, sts, n);
	free(sts);
	op_release(op);
}

static struct sbx_op *
eng_list_sandboxes(struct sbx_driver *d, sbx_sandboxes_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char path[512], filt[256];

	if ((op = op_new(e, OP_SANDBOXES, NULL, err)) == NULL)
		return NULL;
	op->sandboxes_cb = cb;
	op->arg = arg;
	urlencode("{\"label\":[\"" L_MANAGED "=true\"]}", filt, sizeof(filt));
	snprintf(path, sizeof(path), API "/containers/json?all=1&filters=%s",
	    filt);
	call(op, "GET", path, NULL, sandboxes_listed);
	return &op->base;
}

/* ---------- reconcile: egress networks nobody needs (ADR 0014) ---------- */

static void rec_next(struct eop *op);

static void
rec_deleted(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	json_t *n = json_array_get(op->rnets, op->ri);
	const char *name = jstr(n, "Name");

	(void)body;
	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status >= 200 && status < 300) {
		op->rgone++;
		log_info("orphaned egress network removed", "network", name, NULL);
	} else if (status != 404) {
		/* In use (the pre-0014 shared network still has containers) or
		 * refused: left for the next start. */
		log_warn("egress network not removed", "network", name, "why",
		    json_string_value(json_object_get(body, "message")), NULL);
	}
	op->ri++;
	rec_next(op);
}

/* 1 when managed network n is ours and no sandbox needs it any more. */
static int
rec_orphan(struct eop *op, json_t *n)
{
	json_t *labels = json_object_get(n, "Labels");
	const char *name = jstr(n, "Name"), *id = label(labels, L_ID);
	size_t pl = strlen(op->e->prefix);
	char want[160];

	if (!managed(labels) || strncmp(name, op->e->prefix, pl) != 0)
		return 0;
	if (id == NULL)   /* the shared network of sbx before ADR 0014 */
		return strcmp(name + pl, "egress") == 0;
	if (!id_valid(id))
		return 0;
	snprintf(want, sizeof(want), "%s%s-egress", op->e->prefix, id);
	return strcmp(name, want) == 0 &&
	    json_object_get(op->rkeep, id) == NULL;
}

static void
rec_next(struct eop *op)
{
	json_t *n;
	char path[256];
	char gone[16];

	for (; op->ri < json_array_size(op->rnets); op->ri++) {
		n = json_array_get(op->rnets, op->ri);
		if (!rec_orphan(op, n) || !name_ok(jstr(n, "Id"), 128))
			continue;
		snprintf(path, sizeof(path), API "/networks/%s", jstr(n, "Id"));
		call(op, "DELETE", path, NULL, rec_deleted);
		return;
	}
	snprintf(gone, sizeof(gone), "%u", op->rgone);
	if (op->rgone > 0)
		log_info("egress networks reconciled", "removed", gone, NULL);
	finish_done(op, NULL);
}

static void
rec_networks(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 200 || !json_is_array(body)) {
		runtime_err(&e, status, body, "list networks");
		finish_err(op, &e);
		return;
	}
	op->rnets = json_incref(body);
	op->ri = 0;
	rec_next(op);
}

static void
rec_containers(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	json_t *c, *labels;
	const char *id, *eg;
	char path[512], filt[256];
	size_t i;

	if (err != NULL) {
		finish_err(op, err);
		return;
	}
	if (status != 200 || !json_is_array(body)) {
		runtime_err(&e, status, body, "list containers");
		finish_err(op, &e);
		return;
	}
	if ((op->rkeep = json_object()) == NULL) {
		sbx_err_set(&e, SBX_E_INTERNAL, "out of memory");
		finish_err(op, &e);
		return;
	}
	/* Stopped ones count: starting them again needs their network. */
	json_array_foreach(body, i, c) {
		labels = json_object_get(c, "Labels");
		id = label(labels, L_ID);
		eg = label(labels, L_EGRESS);
		if (managed(labels) && id != NULL && eg != NULL &&
		    strcmp(eg, "1") == 0)
			json_object_set_new(op->rkeep, id, json_true());
	}
	urlencode("{\"label\":[\"" L_MANAGED "=true\"]}", filt, sizeof(filt));
	snprintf(path, sizeof(path), API "/networks?filters=%s", filt);
	call(op, "GET", path, NULL, rec_networks);
}

static struct sbx_op *
eng_reconcile(struct sbx_driver *d, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char path[512], filt[256];

	if ((op = op_new(e, OP_RECONCILE, NULL, err)) == NULL)
		return NULL;
	op->done_cb = cb;
	op->arg = arg;
	urlencode("{\"label\":[\"" L_MANAGED "=true\"]}", filt, sizeof(filt));
	snprintf(path, sizeof(path), API "/containers/json?all=1&filters=%s",
	    filt);
	call(op, "GET", path, NULL, rec_containers);
	return &op->base;
}

/* ---------- health ---------- */

static void
health_report(struct eop *op, const char *reason)
{
	struct sbx_health *h = &op->health;

	if (reason == NULL && op->e->helper_tar == NULL)
		reason = op->e->helper_err;
	h->ok = reason == NULL;
	snprintf(h->status, sizeof(h->status), "%s", h->ok ? "ok" : "degraded");
	snprintf(h->reason, sizeof(h->reason), "%s", reason != NULL ? reason : "");
	if (op->health_cb != NULL)
		op->health_cb(op->arg, NULL, h);
	op_release(op);
}

static void
health_image(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	char reason[256];

	(void)body;
	if (err != NULL) {
		health_report(op, err->message);
		return;
	}
	if (status != 200) {
		snprintf(reason, sizeof(reason), "default image %s is not present "
		    "in the runtime", op->e->default_image);
		health_report(op, reason);
		return;
	}
	health_report(op, NULL);
}

static void
health_version(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_health *h = &op->health;
	json_t *comp;
	const char *api, *name = "Docker Engine";
	char path[512], reason[256];
	size_t i;
	int maj = 0, min = 0;

	if (err != NULL) {
		health_report(op, err->message);
		return;
	}
	if (status != 200) {
		health_report(op, "runtime /version failed");
		return;
	}
	json_array_foreach(json_object_get(body, "Components"), i, comp) {
		if (strstr(jstr(comp, "Name"), "Podman") != NULL)
			name = "Podman Engine";
	}
	snprintf(h->runtime, sizeof(h->runtime), "%s %s", name,
	    jstr(body, "Version"));
	api = jstr(body, "ApiVersion");
	snprintf(h->api_version, sizeof(h->api_version), "1.41");
	if (sscanf(api, "%d.%d", &maj, &min) != 2 || maj < 1 ||
	    (maj == 1 && min < 41)) {
		snprintf(reason, sizeof(reason), "runtime speaks Engine API %s, "
		    "sbx needs 1.41 or later", api);
		health_report(op, reason);
		return;
	}
	snprintf(path, sizeof(path), API "/images/%s/json",
	    op->e->default_image);
	call(op, "GET", path, NULL, health_image);
}

static void
health_pinged(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)body;
	if (err != NULL) {
		health_report(op, err->message);
		return;
	}
	if (status != 200) {
		health_report(op, "runtime /_ping did not answer OK");
		return;
	}
	call(op, "GET", API "/version", NULL, health_version);
}

static struct sbx_op *
eng_health(struct sbx_driver *d, sbx_health_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;

	if ((op = op_new(e, OP_HEALTH, NULL, err)) == NULL)
		return NULL;
	op->health_cb = cb;
	op->arg = arg;
	call(op, "GET", "/_ping", NULL, health_pinged);
	return &op->base;
}

/* ---------- helper execs: exec, read, write, list, kill ---------- */

static json_t *
helper_cmd(const char *mode)
{
	return json_pack("[s,s]", SBX_HELPER_PATH, mode);
}

static void
new_exec_id(char *buf, size_t sz)
{
	unsigned char r[12];
	char hex[sizeof(r) * 2 + 1];

	randombytes_buf(r, sizeof(r));
	sodium_bin2hex(hex, sizeof(hex), r, sizeof(r));
	snprintf(buf, sz, "x%s", hex);
}

/* A kill exec for parent's helper exec id (parent may be NULL: fire and
 * forget, used on cancel). */
static int
start_kill(struct engine *e, const char *id, const char *cid,
    const char *exec_id, struct eop *parent)
{
	struct eop *k;
	struct sbx_err err;

	if ((k = op_new(e, OP_KILL, id, &err)) == NULL) {
		if (parent != NULL)
			parent->kerr = err;
		return -1;
	}
	snprintf(k->cid, sizeof(k->cid), "%s", cid);
	k->cmd = helper_cmd("kill");
	json_array_append_new(k->cmd, json_string(exec_id));
	k->timeout_ms = KILL_TIMEOUT_MS;
	k->cap = ERRTAIL_MAX;
	k->parent = parent;
	if (parent != NULL) {
		parent->kill = k;
		parent->killing = 1;
	}
	exec_begin(k);
	return 0;
}

static void exec_after_kill(struct eop *op);

/* Stops talking to the runtime's stream and kills the exec's processes;
 * op continues in kill_ended() -> exec_after_kill(). */
static void
kill_exec(struct eop *op)
{
	sbx_http_req_cancel(op->http);
	op->http = NULL;
	op->streaming = 0;
	if (op->timer != NULL)
		event_del(op->timer);
	if (start_kill(op->e, op->id, op->cid, op->exec_id, op) < 0)
		exec_after_kill(op);
}

/* The timeout's kill has ended: report the timeout. */
static void
exec_after_kill(struct eop *op)
{
	struct sbx_err e;

	sbx_err_set(&e, SBX_E_TIMEOUT, "exec ran longer than its timeout "
	    "of %" PRId64 " ms; its processes were killed", op->timeout_ms);
	finish_err(op, &e);
}

static void
kill_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	exec_begin(arg);
}

/* Queues a fresh kill op like k (no parent: whoever waited has its answer)
 * for a second from now. Out of memory: the helper's backstop remains. */
static void
kill_later(struct eop *k)
{
	struct timeval tv = { 1, 0 };
	struct sbx_err err;
	struct eop *n;

	if ((n = op_new(k->e, OP_KILL, k->id, &err)) == NULL)
		return;
	snprintf(n->cid, sizeof(n->cid), "%s", k->cid);
	n->cmd = json_deep_copy(k->cmd);
	n->timeout_ms = k->timeout_ms;
	n->cap = k->cap;
	n->retries = k->retries + 1;
	n->retry = evtimer_new(k->e->base.base, kill_retry_cb, n);
	if (n->cmd == NULL || n->retry == NULL || event_add(n->retry, &tv) < 0)
		op_release(n);
}

static void
kill_ended(struct eop *k, const struct sbx_err *err)
{
	struct eop *p = k->parent;

	if (err != NULL && strcmp(err->code, SBX_E_RUNTIME_UNAVAILABLE) == 0 &&
	    k->retries < KILL_RETRIES)
		kill_later(k);

	if (p != NULL) {
		k->parent = NULL;
		p->kill = NULL;
		p->killing = 0;
		if (err != NULL)
			p->kerr = *err;
	}
	op_release(k);
	if (p != NULL)
		exec_after_kill(p);
}

static void
exec_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;

	(void)fd;
	(void)what;
	if (op->kind == OP_KILL) {
		struct sbx_err e;

		sbx_err_set(&e, SBX_E_TIMEOUT, "kill exec did not finish");
		kill_ended(op, &e);
		return;
	}
	if (op->killing)
		return;
	op->timed_out = 1;
	kill_exec(op);
}

/* The helper's error line, {"sbx_helper":1,"error":{"code":..,"message":..}},
 * the last line of stderr. Returns 1 with code and msg filled, else 0. */
static int
helper_line(struct eop *op, char *code, size_t csz, char *msg, size_t msz)
{
	const char *nl, *start, *text;
	json_t *line, *err;
	size_t n;
	int ok = 0;

	n = op->errtail != NULL ? evbuffer_get_length(op->errtail) : 0;
	if (n == 0)
		return 0;
	text = (const char *)evbuffer_pullup(op->errtail, -1);
	start = text;
	while ((nl = memchr(start, '\n', n - (size_t)(start - text))) != NULL &&
	    (size_t)(nl + 1 - text) < n)
		start = nl + 1;
	line = json_loadb(start, n - (size_t)(start - text),
	    JSON_DISABLE_EOF_CHECK, NULL);
	err = json_object_get(line, "error");
	if (json_integer_value(json_object_get(line, "sbx_helper")) ==
	    SBX_HELPER_PROTO &&
	    json_string_value(json_object_get(err, "code")) != NULL) {
		snprintf(code, csz, "%s", jstr(err, "code"));
		snprintf(msg, msz, "%s", jstr(err, "message"));
		ok = 1;
	}
	json_decref(line);
	return ok;
}

/* The error of a helper mode that exited with status code: the code comes
 * from the exit status (sbx_helper_proto.h), the sentence from the helper's
 * line when that line agrees. */
static void
helper_error(struct eop *op, int code, struct sbx_err *e)
{
	static const struct { int exit; const char *code, *say; } map[] = {
		{ 1, SBX_E_INTERNAL, "sbx-helper failed inside the sandbox" },
		{ 2, SBX_E_BAD_REQUEST, "not a regular file or directory, or a "
		    "bad mode" },
		{ 3, SBX_E_PATH_OUTSIDE_WORK, "the path leaves /work (through a "
		    "symlink or mount) or breaks the path rules" },
		{ 4, SBX_E_NOT_FOUND, "no such file or directory" },
		{ 5, SBX_E_TOO_LARGE, "the file is larger than the configured cap" },
		{ 6, SBX_E_FORBIDDEN, "permission denied for the sandbox user" },
		{ 7, SBX_E_CANCELLED, "cancelled" },
	};
	const char *ecode = SBX_E_RUNTIME, *say = NULL;
	char lcode[48], msg[256];
	size_t i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].exit == code) {
			ecode = map[i].code;
			say = map[i].say;
		}
	/* Podman sometimes loses the helper's stderr line (adr/0002); the
	 * exit status alone names the code. */
	if (helper_line(op, lcode, sizeof(lcode), msg, sizeof(msg)) &&
	    strcmp(lcode, ecode) == 0 && msg[0] != '\0')
		sbx_err_set(e, ecode, "%s", msg);
	else if (say != NULL)
		sbx_err_set(e, ecode, "%s", say);
	else
		sbx_err_set(e, ecode, "sbx-helper failed with exit status %d", code);
}

/* An exec whose helper could not start the command (status 125): the
 * helper's line says why; only codes about the request are believed. */
static int
exec_refused(struct eop *op, struct sbx_err *e)
{
	static const char *const believed[] = {
		SBX_E_PATH_OUTSIDE_WORK, SBX_E_NOT_FOUND, SBX_E_BAD_REQUEST,
		SBX_E_FORBIDDEN, NULL,
	};
	char lcode[48], msg[256];
	size_t i;

	if (!helper_line(op, lcode, sizeof(lcode), msg, sizeof(msg)))
		return 0;
	for (i = 0; believed[i] != NULL; i++)
		if (strcmp(lcode, believed[i]) == 0) {
			sbx_err_set(e, believed[i], "%s", msg[0] != '\0' ? msg :
			    "sbx-helper refused the exec");
			return 1;
		}
	return 0;
}

/* An entry's exact name: "name_b64" (the helper's form for bytes that are
 * not UTF-8) decoded, else "name". -1 for an entry without a usable name. */
static int
name_from_helper(json_t *o, char *out, size_t outsz)
{
	const char *b64 = json_string_value(json_object_get(o, "name_b64"));
	const char *name = json_string_value(json_object_get(o, "name"));
	size_t len = 0;

	if (b64 != NULL) {
		if (sodium_base642bin((unsigned char *)out, outsz - 1, b64,
		    strlen(b64), NULL, &len, NULL,
		    sodium_base64_VARIANT_ORIGINAL) != 0 || len == 0 ||
		    memchr(out, '\0', len) != NULL || memchr(out, '/', len) != NULL)
			return -1;
		out[len] = '\0';
		return 0;
	}
	/* '/' refused as for name_b64: a name is one path segment (fuzzing) */
	if (name == NULL || name[0] == '\0' || strlen(name) >= outsz ||
	    strchr(name, '/') != NULL)
		return -1;
	memcpy(out, name, strlen(name) + 1);
	/* readdir never gives these (the helper leaves out . and ..) */
	if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
		return -1;
	return 0;
}

/*
 * One line of `sbx-helper list` (sbx_helper_proto.h): an entry, or the end
 * line. Untrusted: a line that is not one of the two marks the listing bad;
 * entries beyond the page's limit or after the end line too.
 */
int
sbx_helper_list_line(const char *line, size_t len, struct sbx_dirent *d,
    int *truncated)
{
	json_t *o;
	const char *t;
	int rc = -1;

	memset(d, 0, sizeof(*d));
	if (line == NULL || len > LIST_LINE_MAX)
		return -1;
	o = json_loadb(line, len, 0, NULL);
	if (!json_is_object(o))
		goto done;
	if (json_object_get(o, "end") != NULL) {
		if (!json_is_true(json_object_get(o, "end")))
			goto done;
		*truncated = json_is_true(json_object_get(o, "truncated"));
		rc = 2;
		goto done;
	}
	rc = 0;
	if (name_from_helper(o, d->name, sizeof(d->name)) < 0)
		goto done;   /* an entry without a usable name: left out */
	t = jstr(o, "type");
	d->type = strcmp(t, "file") == 0 ? "file" : strcmp(t, "dir") == 0 ?
	    "dir" : strcmp(t, "symlink") == 0 ? "symlink" : "other";
	d->size = json_integer_value(json_object_get(o, "size"));
	d->mode = (uint32_t)json_integer_value(json_object_get(o, "mode")) & 07777;
	d->mtime = json_integer_value(json_object_get(o, "mtime"));
	rc = 1;
done:
	json_decref(o);
	return rc;
}

/*
 * One line of `sbx-helper list` into op's page. Untrusted: a line that is
 * neither an entry nor the end line marks the listing bad; entries beyond
 * the page's limit or after the end line too.
 */
static void
list_line(struct eop *op, const char *line, size_t len)
{
	struct sbx_dirent d;
	int r, trunc = 0;

	if (op->list_bad)
		return;
	r = sbx_helper_list_line(line, len, &d, &trunc);
	if (r < 0 || op->list_end || (r == 1 && op->nents >= op->list_limit)) {
		op->list_bad = 1;
		return;
	}
	if (r == 2) {
		op->list_end = 1;
		op->list_trunc = trunc;
		return;
	}
	if (r == 0)
		return;
	if (op->nents == op->ents_cap) {
		size_t cap = op->ents_cap ? op->ents_cap * 2 : 256;
		struct sbx_dirent *n;

		if (cap > op->list_limit)
			cap = op->list_limit;
		if ((n = realloc(op->ents, cap * sizeof(*n))) == NULL) {
			op->list_bad = 1;
			return;
		}
		op->ents = n;
		op->ents_cap = cap;
	}
	op->ents[op->nents++] = d;
}

/* Parses the complete lines of op->out; a line over LIST_LINE_MAX is bad. */
static void
list_lines(struct eop *op)
{
	struct evbuffer_ptr p;
	size_t n, eol;
	char line[LIST_LINE_MAX + 1];

	for (;;) {
		p = evbuffer_search_eol(op->out, NULL, &eol, EVBUFFER_EOL_LF);
		if (p.pos < 0) {
			if (evbuffer_get_length(op->out) > LIST_LINE_MAX) {
				op->list_bad = 1;
				evbuffer_drain(op->out, evbuffer_get_length(op->out));
			}
			return;
		}
		n = (size_t)p.pos;
		if (n > LIST_LINE_MAX) {
			op->list_bad = 1;
			evbuffer_drain(op->out, n + eol);
			continue;
		}
		evbuffer_remove(op->out, line, n);
		evbuffer_drain(op->out, eol);
		list_line(op, line, n);
	}
}

/* ---------- file operations: no progress for file_timeout ---------- */

static void
file_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;
	struct sbx_err e;

	(void)fd;
	(void)what;
	/* Answer now, whatever the sandbox does: the runtime connection goes
	 * (sbx_http_req_cancel in finish), the helper is killed by its handle
	 * on the side (that kill is bounded by its own timeout). */
	if (op->cid[0] != '\0')
		start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
	sbx_err_set(&e, SBX_E_TIMEOUT, "the %s made no progress for %" PRId64
	    " ms (file_timeout); it was cancelled and its helper killed",
	    op->kind == OP_READ ? "file read" : op->kind == OP_WRITE ?
	    "file write" : "directory listing", op->e->file_timeout);
	finish_err(op, &e);
}

/* (Re)starts the progress timer of a file operation. */
static void
file_progress(struct eop *op)
{
	struct timeval tv;

	if (op->ftimer == NULL || op->paused)
		return;
	tv.tv_sec = op->e->file_timeout / 1000;
	tv.tv_usec = (op->e->file_timeout % 1000) * 1000;
	event_add(op->ftimer, &tv);
}

static int
file_timer_new(struct eop *op)
{
	if ((op->ftimer = evtimer_new(op->e->base.base, file_timer_cb, op)) == NULL)
		return -1;
	file_progress(op);
	return 0;
}

/* Bytes of a streamed write in the runtime connection's output at most:
 * with the gate's window, what one write costs the broker (adr/0018). */
#define WRITE_OUT_MAX (256 * 1024)

/* Moves what the source has to the runtime while its output has room;
 * closes the write side once every byte announced went. */
static void
src_pump(struct eop *op)
{
	struct bufferevent *bev;
	struct evbuffer *out;
	size_t n, have, room;

	if (op->src == NULL || op->http == NULL || !op->got_stream ||
	    (bev = sbx_http_req_bufferevent(op->http)) == NULL)
		return;
	out = bufferevent_get_output(bev);
	while (op->src_left > 0 && (have = evbuffer_get_length(op->src)) > 0 &&
	    evbuffer_get_length(out) < WRITE_OUT_MAX) {
		room = WRITE_OUT_MAX - evbuffer_get_length(out);
		n = have < room ? have : room;
		if ((uint64_t)n > op->src_left)
			n = (size_t)op->src_left;
		if (evbuffer_remove_buffer(op->src, out, n) <= 0)
			break;
		op->src_left -= n;
	}
	if (op->src_left == 0) {
		src_detach(op);
		sbx_http_req_close_write(op->http);
	}
}

/* New bytes in a write_stream's source. */
static void
src_added(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	(void)buf;
	if (info->n_added > 0)
		src_pump(arg);
}

/* A write's stdin leaving for the runtime is progress (and room for more). */
static void
write_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct eop *op = arg;

	(void)buf;
	if (info->n_deleted > 0) {
		file_progress(op);
		if (op->src != NULL && evbuffer_get_length(buf) < WRITE_OUT_MAX / 2)
			src_pump(op);
	}
}

/* The exec has ended with exit status code. */
static void
exec_exited(struct eop *op, int code)
{
	struct sbx_exit ex;
	struct sbx_err e;

	switch (op->kind) {
	case OP_EXEC:
		memset(&ex, 0, sizeof(ex));
		ex.code = code & 0xff;
		ex.duration_ms = now_ms() - op->started_ms;
		ex.truncated = op->truncated;
		/* The helper exits 128+n when signal n ended the command. */
		if (code > 128 && code < 128 + 32)
			ex.signal = sigabbrev_np(code - 128);
		if (op->truncated && ex.signal == NULL)
			ex.signal = "KILL";
		if (!op->truncated && code == 125 && exec_refused(op, &e)) {
			finish_err(op, &e);
			return;
		}
		if (op->sink.exit != NULL)
			op->sink.exit(op->sink.arg, &ex);
		op_release(op);
		return;
	case OP_READ:
		if (code != 0) {
			helper_error(op, code, &e);
			finish_err(op, &e);
			return;
		}
		memset(&ex, 0, sizeof(ex));
		ex.duration_ms = now_ms() - op->started_ms;
		if (op->sink.exit != NULL)
			op->sink.exit(op->sink.arg, &ex);
		op_release(op);
		return;
	case OP_WRITE:
		if (code != 0) {
			helper_error(op, code, &e);
			finish_err(op, &e);
			return;
		}
		finish_done(op, NULL);
		return;
	case OP_LIST:
		if (code != 0) {
			helper_error(op, code, &e);
			finish_err(op, &e);
			return;
		}
		list_lines(op);
		if (op->truncated || op->list_bad || !op->list_end ||
		    evbuffer_get_length(op->out) > 0) {
			sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper list gave "
			    "no well-formed page");
			finish_err(op, &e);
			return;
		}
		if (op->list_cb != NULL)
			op->list_cb(op->arg, NULL, op->ents, op->nents,
			    op->list_trunc);
		op_release(op);
		return;
	case OP_RECOVER:
		if (code != 0) {
			helper_error(op, code, &e);
			finish_err(op, &e);
			return;
		}
		finish_done(op, NULL);
		return;
	case OP_USAGE:
		usage_exited(op, code);
		return;
	case OP_KILL:
		if (code != 0) {
			helper_error(op, code, &e);
			kill_ended(op, &e);
		} else {
			kill_ended(op, NULL);
		}
		return;
	default:
		break;
	}
}

/* A framed exec ended with the helper's exit record (and maybe its error
 * record): no exec inspect needed. */
static void
exec_recorded(struct eop *op)
{
	static const char *const believed[] = {
		SBX_E_PATH_OUTSIDE_WORK, SBX_E_NOT_FOUND, SBX_E_BAD_REQUEST,
		SBX_E_FORBIDDEN, SBX_E_CANCELLED, NULL,
	};
	struct sbx_exit ex;
	struct sbx_err e;
	char line[300];
	int n;
	size_t i;

	if (op->timer != NULL)
		event_del(op->timer);
	if (op->xtimeout && !op->truncated) {
		sbx_err_set(&e, SBX_E_TIMEOUT, "exec ran longer than its timeout "
		    "of %" PRId64 " ms; its processes were killed", op->timeout_ms);
		finish_err(op, &e);
		return;
	}
	if (op->got_herr && !op->truncated &&
	    op->xhow == SBX_HELPER_EXIT_HOW_EXITED &&
	    op->xcode == SBX_HELPER_EXEC_FAILED) {
		/* The command never ran: the helper's code if it is about the
		 * request, else the runtime side failed. */
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper could not start the "
		    "command: %s", op->herr_msg);
		for (i = 0; believed[i] != NULL; i++)
			if (strcmp(op->herr_code, believed[i]) == 0)
				sbx_err_set(&e, believed[i], "%s", op->herr_msg[0] !=
				    '\0' ? op->herr_msg : "sbx-helper refused the exec");
		finish_err(op, &e);
		return;
	}
	if (op->got_herr && op->xhow == SBX_HELPER_EXIT_HOW_EXITED &&
	    (op->xcode == SBX_HELPER_EXEC_NOEXEC ||
	    op->xcode == SBX_HELPER_EXEC_NOTFOUND)) {
		/* Like a shell: the reason on stderr, then the status. */
		n = snprintf(line, sizeof(line), "sbx-helper: %s\n", op->herr_msg);
		if (n > 0 && (size_t)n < sizeof(line)) {
			op_enter(op);
			deliver(op, 2, (const unsigned char *)line, (size_t)n);
			if (!op_leave(op))
				return;
		}
	}
	memset(&ex, 0, sizeof(ex));
	ex.duration_ms = now_ms() - op->started_ms;
	ex.truncated = op->truncated;
	if (op->xhow == SBX_HELPER_EXIT_HOW_SIGNALED) {
		ex.code = 128 + op->xsig;
		ex.signal = sigabbrev_np(op->xsig);
	} else
		ex.code = op->xcode;
	if (op->truncated && ex.signal == NULL)
		ex.signal = "KILL";
	if (op->sink.exit != NULL)
		op->sink.exit(op->sink.arg, &ex);
	op_release(op);
}

static void
poll_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	exec_poll_exit(arg);
}

static void
exec_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	struct timeval tv = { 0, EXIT_POLL_MS * 1000 };

	if (err != NULL) {
		if (op->kind == OP_KILL) {
			kill_ended(op, err);
			return;
		}
		/* No exit record and no answer (the runtime died with the
		 * stream): the processes may live on; the kill is retried
		 * until the runtime is back (test_faults.py). */
		if (op->kind == OP_EXEC)
			start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
		finish_err(op, err);
		return;
	}
	if (status != 200) {
		runtime_err(&e, status, body, "inspect the exec");
		if (op->kind == OP_KILL)
			kill_ended(op, &e);
		else
			finish_err(op, &e);
		return;
	}
	/* The stream can end a moment before the runtime records the exit. */
	if (json_is_true(json_object_get(body, "Running")) &&
	    op->polls++ < EXIT_POLLS) {
		event_free(op->timer);
		op->timer = evtimer_new(op->e->base.base, poll_timer_cb, op);
		if (op->timer != NULL && event_add(op->timer, &tv) == 0)
			return;
	}
	if (json_is_true(json_object_get(body, "Running"))) {
		/* The stream ended but the process did not: it must not
		 * outlive the operation. */
		start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
		if (op->kind == OP_KILL) {
			sbx_err_set(&e, SBX_E_TIMEOUT, "kill exec did not finish");
			kill_ended(op, &e);
			return;
		}
		sbx_err_set(&e, SBX_E_RUNTIME, "exec output ended but the "
		    "process kept running; it was killed");
		finish_err(op, &e);
	} else
		exec_exited(op, (int)json_integer_value(json_object_get(body,
		    "ExitCode")));
}

static void
exec_poll_exit(struct eop *op)
{
	char path[256];

	snprintf(path, sizeof(path), API "/exec/%s/json", op->rexec);
	call(op, "GET", path, NULL, exec_inspected);
}

static void
exec_after_stream(struct eop *op)
{
	if (op->timer != NULL)
		event_del(op->timer);
	exec_poll_exit(op);
}

static void
deliver(struct eop *op, int stream, const unsigned char *buf, size_t len)
{
	size_t room;

	if (stream != 1 && stream != 2)
		return;  /* 0 is stdin echo: never sent with Tty false */
	if (op->ftimer != NULL)
		file_progress(op);
	if (stream == 2 && op->kind != OP_EXEC) {
		/* stderr of a helper mode: only its error line matters */
		if (evbuffer_get_length(op->errtail) + len <= ERRTAIL_MAX)
			evbuffer_add(op->errtail, buf, len);
		return;
	}
	if (op->kind == OP_LIST || op->kind == OP_KILL || op->kind == OP_WRITE ||
	    op->kind == OP_RECOVER || op->kind == OP_USAGE) {
		if (evbuffer_get_length(op->out) + len > (size_t)op->cap) {
			op->truncated = 1;
			return;
		}
		evbuffer_add(op->out, buf, len);
		if (op->kind == OP_LIST)
			list_lines(op);   /* parsed as it comes: never one big parse */
		return;
	}
	room = (size_t)(op->cap - op->delivered);
	if (len > room)
		len = room;
	if (len > 0) {
		op->delivered += (int64_t)len;
		if (op->sink.output != NULL)
			op->sink.output(op->sink.arg, stream, buf, len);
		if (op->dead)
			return;
	}
	if (op->delivered < op->cap || op->truncated)
		return;
	op->truncated = 1;
	if (op->kind == OP_EXEC) {
		/* Keep reading (and dropping) until the killed exec's stream
		 * ends, so the runtime records its real exit status; closing
		 * early makes Docker 20.10 report 126 ("attach failed"). */
		start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
	} else if (op->kind == OP_READ) {
		struct sbx_err e;

		sbx_err_set(&e, SBX_E_TOO_LARGE, "file is larger than the cap of "
		    "%" PRId64 " bytes", op->cap - 1);
		start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
		finish_err(op, &e);
	}
}

/* The helper's own stderr in a framed exec (the command's is framed in
 * stdout): a tail kept for its error line when its frames never came. */
static void
keep_errtail(struct eop *op, const unsigned char *buf, size_t len)
{
	if (evbuffer_get_length(op->errtail) + len > ERRTAIL_MAX)
		evbuffer_drain(op->errtail, evbuffer_get_length(op->errtail));
	if (len <= ERRTAIL_MAX)
		evbuffer_add(op->errtail, buf, len);
}

/* The helper broke its frame protocol: what it says can no longer be
 * told apart from what the command wrote, so the exec ends here. */
static void
helper_protocol_error(struct eop *op, const char *what)
{
	struct sbx_err e;

	sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper broke its output protocol "
	    "(%s); the exec was killed", what);
	op->streaming = 0;
	start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
	finish_err(op, &e);
}

/* The exit record (sbx_helper_proto.h): -1 when malformed. */
static int
exit_record(struct eop *op)
{
	const unsigned char *r = op->hrec;

	if ((r[3] & ~SBX_HELPER_EXIT_FLAG_TIMEOUT) != 0 || r[4] != 0 ||
	    r[5] != 0 || r[6] != 0 || r[7] != 0)
		return -1;
	if (r[0] == SBX_HELPER_EXIT_HOW_EXITED && r[2] == 0)
		op->xcode = r[1];
	else if (r[0] == SBX_HELPER_EXIT_HOW_SIGNALED && r[1] == 0 &&
	    r[2] >= 1 && r[2] <= 64)
		op->xsig = r[2];
	else
		return -1;
	op->xhow = r[0];
	op->xtimeout = (r[3] & SBX_HELPER_EXIT_FLAG_TIMEOUT) != 0;
	op->got_exit = 1;
	return 0;
}

/* The error record: {"sbx_helper":2,"error":{"code":C,"message":M}} with
 * C of [a-z_]; -1 when malformed. */
static int
error_record(struct eop *op)
{
	json_t *line, *err;
	const char *code, *msg;
	size_t i;
	int rc = -1;

	line = json_loadb((const char *)op->hrec, op->hrec_len, 0, NULL);
	err = json_object_get(line, "error");
	code = json_string_value(json_object_get(err, "code"));
	msg = json_string_value(json_object_get(err, "message"));
	if (json_integer_value(json_object_get(line, "sbx_helper")) !=
	    SBX_HELPER_PROTO || code == NULL || msg == NULL || code[0] == '\0' ||
	    strlen(code) >= sizeof(op->herr_code))
		goto done;
	for (i = 0; code[i] != '\0'; i++)
		if (!(code[i] >= 'a' && code[i] <= 'z') && code[i] != '_')
			goto done;
	snprintf(op->herr_code, sizeof(op->herr_code), "%s", code);
	snprintf(op->herr_msg, sizeof(op->herr_msg), "%s", msg);
	op->got_herr = 1;
	rc = 0;
done:
	json_decref(line);
	return rc;
}

/* Decodes sbx-helper's frames from the runtime's stdout stream of a framed
 * exec. Frames may be split anywhere, across runtime frames and reads. */
static void
helper_frames(struct eop *op, const unsigned char *buf, size_t len)
{
	const unsigned char *h = op->hhdr;
	uint32_t plen;
	size_t n;
	int ok;

	while (len > 0 && !op->dead && op->streaming) {
		if (op->htype == 0) {
			n = SBX_HELPER_FRAME_HDR - op->hhdr_len;
			if (n > len)
				n = len;
			memcpy(op->hhdr + op->hhdr_len, buf, n);
			op->hhdr_len += n;
			buf += n;
			len -= n;
			if (op->hhdr_len < SBX_HELPER_FRAME_HDR)
				break;
			op->hhdr_len = 0;
			plen = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 |
			    (uint32_t)h[6] << 8 | h[7];
			if (op->got_exit) {
				helper_protocol_error(op, "a frame after the exit record");
				return;
			}
			if (h[1] != SBX_HELPER_PROTO || h[2] != 0 || h[3] != 0) {
				helper_protocol_error(op, "bad frame header");
				return;
			}
			switch (h[0]) {
			case SBX_HELPER_FRAME_STDOUT:
			case SBX_HELPER_FRAME_STDERR:
				ok = plen >= 1 && plen <= SBX_HELPER_FRAME_MAX;
				break;
			case SBX_HELPER_FRAME_EXIT:
				ok = plen == SBX_HELPER_EXIT_REC_LEN;
				break;
			case SBX_HELPER_FRAME_ERROR:
				ok = plen >= 1 && plen <= SBX_HELPER_ERROR_REC_MAX &&
				    !op->got_herr;
				break;
			default:
				ok = 0;
			}
			if (!ok) {
				helper_protocol_error(op, "bad frame type or length");
				return;
			}
			op->htype = h[0];
			op->hleft = plen;
			op->hrec_len = 0;
			continue;
		}
		n = op->hleft;
		if (n > len)
			n = len;
		if (op->htype == SBX_HELPER_FRAME_STDOUT ||
		    op->htype == SBX_HELPER_FRAME_STDERR) {
			if (n > STREAM_CHUNK)
				n = STREAM_CHUNK;
			deliver(op, op->htype, buf, n);
		} else {
			memcpy(op->hrec + op->hrec_len, buf, n);
			op->hrec_len += n;
		}
		op->hleft -= (uint32_t)n;
		buf += n;
		len -= n;
		if (op->dead)
			return;
		if (op->hleft > 0)
			continue;
		if ((op->htype == SBX_HELPER_FRAME_EXIT && exit_record(op) < 0) ||
		    (op->htype == SBX_HELPER_FRAME_ERROR && error_record(op) < 0)) {
			helper_protocol_error(op, "malformed record");
			return;
		}
		op->htype = 0;
	}
}

/* Demultiplexes the 8-byte-framed stream (Engine API "Attach": byte 0 the
 * stream, bytes 4-7 the big-endian payload length). An exec's stdout holds
 * the helper's frames, its stderr only the helper's own words. */
static void
stream_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct eop *op = arg;
	size_t n;

	(void)req;
	if (sbx_http_req_status(req) >= 300) {
		call_body(op, req, buf, len);
		return;
	}
	op_enter(op);
	while (len > 0 && !op->dead && op->streaming) {
		if (op->frame_left == 0) {
			n = 8 - op->fhdr_len;
			if (n > len)
				n = len;
			memcpy(op->fhdr + op->fhdr_len, buf, n);
			op->fhdr_len += n;
			buf += n;
			len -= n;
			if (op->fhdr_len < 8)
				break;
			op->fhdr_len = 0;
			op->frame_stream = op->fhdr[0];
			op->frame_left = (uint32_t)op->fhdr[4] << 24 |
			    (uint32_t)op->fhdr[5] << 16 | (uint32_t)op->fhdr[6] << 8 |
			    op->fhdr[7];
			continue;
		}
		n = op->frame_left;
		if (n > len)
			n = len;
		if (n > STREAM_CHUNK)
			n = STREAM_CHUNK;
		op->frame_left -= (uint32_t)n;
		if (op->kind != OP_EXEC)
			deliver(op, op->frame_stream, buf, n);
		else if (op->frame_stream == 1)
			helper_frames(op, buf, n);
		else if (op->frame_stream == 2)
			keep_errtail(op, buf, n);
		buf += n;
		len -= n;
	}
	op_leave(op);
}

static void
stream_response(void *arg, struct sbx_http_req *req, int status)
{
	struct eop *op = arg;
	struct sbx_err e;

	if (status != 101 && status != 200)
		return;          /* error answer: collected, reported at done */
	op->streaming = 1;
	op->got_stream = 1;
	if (op->has_stdin) {
		if (!sbx_http_req_upgraded(req)) {
			sbx_err_set(&e, SBX_E_RUNTIME, "runtime did not upgrade "
			    "the exec connection, so stdin cannot be sent");
			start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
			finish_err(op, &e);
			return;
		}
		if (op->kind == OP_WRITE && op->ftimer != NULL &&
		    sbx_http_req_bufferevent(req) != NULL)
			evbuffer_add_cb(bufferevent_get_output(
			    sbx_http_req_bufferevent(req)), write_drained, op);
		if (op->stdin_buf != NULL)
			sbx_http_req_write_buffer(req, op->stdin_buf);
		if (op->src != NULL)
			src_pump(op);     /* closes the write side at the end */
		else
			sbx_http_req_close_write(req);
	}
	if (op->kind == OP_EXEC && !op->stream_started) {
		op->stream_started = 1;
		op_enter(op);
		if (op->sink.start != NULL)
			op->sink.start(op->sink.arg, op->exec_id);
		op_leave(op);
	}
}

static void
stream_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct eop *op = arg;
	struct sbx_err e;
	json_t *body = NULL;
	int status = sbx_http_req_status(req);

	op->http = NULL;
	op->streaming = 0;
	if (err != NULL) {
		if (op->kind == OP_KILL) {
			kill_ended(op, err);
			return;
		}
		/* The exit record came: the command is reaped, its group dead;
		 * a stream broken after that loses nothing. */
		if (op->kind == OP_EXEC && op->got_exit) {
			exec_recorded(op);
			return;
		}
		/* Podman 4.3 resets the exec connection when the process exits
		 * while stdin is still being sent (measured: 5 of 5 runs of
		 * `exit 3` with 3 MB of stdin); the exit status is still
		 * there, so a reset of a running stream with stdin ends it. */
		if (op->got_stream && op->has_stdin &&
		    strcmp(err->code, SBX_E_RUNTIME) == 0) {
			exec_after_stream(op);
			return;
		}
		/* The stream broke: the processes may live on. */
		e = *err;
		start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
		finish_err(op, &e);
		return;
	}
	if (status != 101 && status != 200) {
		if (evbuffer_get_length(op->resp) > 0)
			body = json_loadb((const char *)evbuffer_pullup(op->resp, -1),
			    evbuffer_get_length(op->resp), 0, NULL);
		if (status == 404)
			sbx_err_set(&e, SBX_E_NOT_FOUND, "sandbox %s does not exist",
			    op->id);
		else if (status == 409)
			sbx_err_set(&e, SBX_E_NOT_RUNNING, "sandbox %s is not "
			    "running", op->id);
		else
			runtime_err(&e, status, body, "start the exec");
		json_decref(body);
		if (op->kind == OP_KILL)
			kill_ended(op, &e);
		else
			finish_err(op, &e);
		return;
	}
	if (op->kind == OP_EXEC && op->got_exit)
		exec_recorded(op);
	else
		exec_after_stream(op);   /* no record: the helper was killed */
}

static void
exec_start(struct eop *op)
{
	struct sbx_http_request q;
	struct sbx_http_opts o;
	struct sbx_http_cbs cbs;
	struct sbx_err err;
	char path[256];
	static const char body[] = "{\"Detach\":false,\"Tty\":false}";

	memset(&q, 0, sizeof(q));
	memset(&o, 0, sizeof(o));
	memset(&cbs, 0, sizeof(cbs));
	snprintf(path, sizeof(path), API "/exec/%s/start", op->rexec);
	q.method = "POST";
	q.path = path;
	q.content_type = "application/json";
	q.body = body;
	q.body_len = sizeof(body) - 1;
	q.upgrade = 1;
	o.peer_name = "the container runtime";
	o.header_timeout_ms = op->e->req_timeout_ms;
	cbs.response = stream_response;
	cbs.body = stream_body;
	cbs.done = stream_done;
	cbs.arg = op;
	evbuffer_drain(op->resp, evbuffer_get_length(op->resp));
	op->http = sbx_http_request(op->e->base.base, op->e->address, &q, &o,
	    &cbs, &err);
	if (op->http == NULL) {
		fail_later(op, &err);
		return;
	}
	if (op->paused)
		sbx_http_req_pause(op->http);
}

static void
exec_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;
	struct timeval tv;

	if (err != NULL) {
		if (op->kind == OP_KILL)
			kill_ended(op, err);
		else
			finish_err(op, err);
		return;
	}
	if (status == 404)
		sbx_err_set(&e, SBX_E_NOT_FOUND, "sandbox %s does not exist", op->id);
	else if (status == 409)
		sbx_err_set(&e, SBX_E_NOT_RUNNING, "sandbox %s is not running: "
		    "ensure it first", op->id);
	else if (status != 201)
		runtime_err(&e, status, body, "create the exec");
	if (status != 201) {
		if (op->kind == OP_KILL)
			kill_ended(op, &e);
		else
			finish_err(op, &e);
		return;
	}
	snprintf(op->rexec, sizeof(op->rexec), "%s", jstr(body, "Id"));
	if (!name_ok(op->rexec, sizeof(op->rexec) - 1)) {
		sbx_err_set(&e, SBX_E_RUNTIME, "runtime gave no exec id");
		if (op->kind == OP_KILL)
			kill_ended(op, &e);
		else
			finish_err(op, &e);
		return;
	}
	op->started_ms = now_ms();
	if (op->ftimer != NULL)
		file_progress(op);
	else if (op->timeout_ms > 0) {
		/* The driver's timer is authoritative (the helper's trails). */
		op->timer = evtimer_new(op->e->base.base, exec_timer_cb, op);
		tv.tv_sec = op->timeout_ms / 1000;
		tv.tv_usec = (op->timeout_ms % 1000) * 1000;
		if (op->timer == NULL || event_add(op->timer, &tv) < 0) {
			sbx_err_set(&e, SBX_E_INTERNAL, "cannot arm the exec timer");
			finish_err(op, &e);
			return;
		}
	}
	exec_start(op);
}

static void
exec_create(struct eop *op)
{
	struct sbx_err e;
	json_t *req;
	char path[256];

	req = json_pack("{s:b, s:b, s:b, s:b, s:s, s:s, s:o, s:O}",
	    "AttachStdin", op->has_stdin,
	    "AttachStdout", 1,
	    "AttachStderr", 1,
	    "Tty", 0,
	    "User", op->e->user,
	    "WorkingDir", WORK,
	    "Env", op->env != NULL ? json_incref(op->env) : json_array(),
	    "Cmd", op->cmd);
	if (req == NULL) {
		sbx_err_set(&e, SBX_E_INTERNAL, "out of memory");
		finish_err(op, &e);
		return;
	}
	snprintf(path, sizeof(path), API "/containers/%s/exec", op->cid);
	call(op, "POST", path, req, exec_created);
}

static void
exec_target_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_status st;
	struct sbx_err e;
	int r;

	if ((r = inspect_running(op, status, body, err, &st)) < 0)
		return;
	if (op->kind == OP_USAGE && usage_target(op, r, &st))
		return;
	if (r == 0 && op->kind == OP_RECOVER) {
		/* no container, or a stop killed everything: no process left */
		finish_done(op, NULL);
		return;
	}
	if (r == 0 && st.state == SBX_STATE_ABSENT) {
		sbx_err_set(&e, SBX_E_NOT_FOUND, "sandbox %s does not exist", op->id);
		finish_err(op, &e);
		return;
	}
	if (r == 0) {
		sbx_err_set(&e, SBX_E_NOT_RUNNING, "sandbox %s is not running: "
		    "ensure it first", op->id);
		finish_err(op, &e);
		return;
	}
	exec_create(op);
}

static void
exec_begin(struct eop *op)
{
	char path[256];

	if (op->errtail == NULL)
		op->errtail = evbuffer_new();
	if (op->out == NULL)
		op->out = evbuffer_new();
	if (op->resp == NULL)
		op->resp = evbuffer_new();
	if (op->exec_id[0] == '\0')
		new_exec_id(op->exec_id, sizeof(op->exec_id));
	if (op->kind == OP_KILL) {
		exec_create(op);   /* the parent checked the container */
		return;
	}
	inspect_path(op, path, sizeof(path));
	call(op, "GET", path, NULL, exec_target_inspected);
}

/* A helper exec op for sandbox id with mode and its arguments. */
static struct eop *
helper_op(struct engine *e, enum op_kind kind, const char *id,
    struct sbx_err *err)
{
	struct eop *op;

	if ((op = op_new(e, kind, id, err)) == NULL)
		return NULL;
	op->errtail = evbuffer_new();
	op->out = evbuffer_new();
	op->resp = evbuffer_new();
	if (op->errtail == NULL || op->out == NULL || op->resp == NULL) {
		op_free(op);
		sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
		return NULL;
	}
	new_exec_id(op->exec_id, sizeof(op->exec_id));
	return op;
}

static struct sbx_op *
eng_exec(struct sbx_driver *d, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op = NULL;
	const char *const *p;
	const char *cwd;
	int64_t timeout, cap;
	char num[32];

	if (!id_valid(id)) {
		sbx_err_set(err, SBX_E_INVALID_ID,
		    "sandbox id must match [a-z0-9][a-z0-9-]{0,62}");
		return NULL;
	}
	if (req == NULL || sink == NULL || req->argv == NULL ||
	    req->argv[0] == NULL || req->argv[0][0] == '\0') {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "exec needs a non-empty argv");
		return NULL;
	}
	cwd = req->cwd != NULL ? req->cwd : WORK;
	if (path_ok(cwd, err) < 0)
		return NULL;
	if (req->timeout_ms < 0 || req->timeout_ms > e->timeout.ceiling) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "timeout_ms must be between "
		    "0 and %" PRId64, e->timeout.ceiling);
		return NULL;
	}
	if (req->output_cap < 0 || req->output_cap > e->output_cap) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "output cap must be between "
		    "0 and %" PRId64 " bytes", e->output_cap);
		return NULL;
	}
	for (p = req->env; p != NULL && *p != NULL; p++) {
		if (strchr(*p, '=') == NULL || **p == '=') {
			sbx_err_set(err, SBX_E_BAD_REQUEST,
			    "env entries must be NAME=value");
			return NULL;
		}
	}
	timeout = req->timeout_ms > 0 ? req->timeout_ms : e->timeout.def;
	cap = req->output_cap > 0 ? req->output_cap : e->output_cap;
	if ((op = helper_op(e, OP_EXEC, id, err)) == NULL)
		return NULL;
	op->sink = *sink;
	op->timeout_ms = timeout;
	op->cap = cap;
	op->cmd = helper_cmd("exec");
	snprintf(num, sizeof(num), "%" PRId64, timeout + HELPER_GRACE_MS);
	json_array_append_new(op->cmd, json_string("--framed"));
	json_array_append_new(op->cmd, json_string("--id"));
	json_array_append_new(op->cmd, json_string(op->exec_id));
	json_array_append_new(op->cmd, json_string("--timeout-ms"));
	json_array_append_new(op->cmd, json_string(num));
	json_array_append_new(op->cmd, json_string("--cwd"));
	json_array_append_new(op->cmd, json_string(cwd));
	json_array_append_new(op->cmd, json_string("--"));
	for (p = req->argv; *p != NULL; p++)
		if (json_array_append_new(op->cmd, json_string(*p)) < 0)
			goto bad;
	if (req->env != NULL) {
		op->env = json_array();
		for (p = req->env; *p != NULL; p++)
			if (json_array_append_new(op->env, json_string(*p)) < 0)
				goto bad;
	}
	if (req->stdin_data != NULL) {
		op->has_stdin = 1;
		if ((op->stdin_buf = evbuffer_new()) == NULL ||
		    evbuffer_add(op->stdin_buf, req->stdin_data, req->stdin_len) < 0)
			goto oom;
	}
	exec_begin(op);
	return &op->base;
bad:
	/* json_string() refuses what is not UTF-8. */
	sbx_err_set(err, SBX_E_BAD_REQUEST, "argv and env must be valid UTF-8");
	op_free(op);
	return NULL;
oom:
	sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
	op_free(op);
	return NULL;
}

static struct sbx_op *
eng_read(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char num[32];

	if (!id_valid(id)) {
		sbx_err_set(err, SBX_E_INVALID_ID,
		    "sandbox id must match [a-z0-9][a-z0-9-]{0,62}");
		return NULL;
	}
	if (sink == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "read needs a sink");
		return NULL;
	}
	if (path_ok(path, err) < 0)
		return NULL;
	if ((op = helper_op(e, OP_READ, id, err)) == NULL)
		return NULL;
	op->sink = *sink;
	op->cap = e->file_max + 1;   /* the helper refuses above file_max */
	op->cmd = helper_cmd("read");
	snprintf(num, sizeof(num), "%" PRId64, e->file_max);
	if (json_array_append_new(op->cmd, json_string(path)) < 0) {
		op_free(op);
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "path must be UTF-8");
		return NULL;
	}
	json_array_append_new(op->cmd, json_string("--max"));
	json_array_append_new(op->cmd, json_string(num));
	json_array_append_new(op->cmd, json_string("--id"));
	json_array_append_new(op->cmd, json_string(op->exec_id));
	/* A timer on progress, not on the whole read: a slow reader may hold
	 * a paused stream (the timer stops while paused), a stalled helper
	 * may not. */
	if (file_timer_new(op) < 0) {
		op_free(op);
		sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
		return NULL;
	}
	exec_begin(op);
	return &op->base;
}

/* write (body whole) or write_stream (src, len bytes, arriving). */
static struct sbx_op *
write_common(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, struct evbuffer *src, uint64_t len,
    sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char num[32], mstr[16], snum[32];

	if (!id_valid(id)) {
		sbx_err_set(err, SBX_E_INVALID_ID,
		    "sandbox id must match [a-z0-9][a-z0-9-]{0,62}");
		return NULL;
	}
	if (path_ok(path, err) < 0)
		return NULL;
	if (mode == 0)
		mode = 0644;
	if (mode > 0777) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "mode must be at most 0777");
		return NULL;
	}
	if (body != NULL)
		len = evbuffer_get_length(body);
	if (len > (uint64_t)e->file_max) {
		sbx_err_set(err, SBX_E_TOO_LARGE, "file is larger than the cap of "
		    "%" PRId64 " bytes", e->file_max);
		return NULL;
	}
	if ((op = helper_op(e, OP_WRITE, id, err)) == NULL)
		return NULL;
	op->done_cb = cb;
	op->arg = arg;
	op->cap = ERRTAIL_MAX;
	op->timeout_ms = e->timeout.ceiling;
	op->has_stdin = 1;
	if ((op->stdin_buf = evbuffer_new()) == NULL) {
		op_free(op);
		sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
		return NULL;
	}
	if (body != NULL)
		evbuffer_add_buffer(op->stdin_buf, body);
	op->cmd = helper_cmd("write");
	snprintf(num, sizeof(num), "%" PRId64, e->file_max);
	snprintf(mstr, sizeof(mstr), "0%o", (unsigned)mode);
	if (json_array_append_new(op->cmd, json_string(path)) < 0) {
		op_free(op);
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "path must be UTF-8");
		return NULL;
	}
	json_array_append_new(op->cmd, json_string(mstr));
	json_array_append_new(op->cmd, json_string("--max"));
	json_array_append_new(op->cmd, json_string(num));
	json_array_append_new(op->cmd, json_string("--id"));
	json_array_append_new(op->cmd, json_string(op->exec_id));
	/* The helper renames only when exactly len bytes came (a body cut
	 * short never replaces the file). */
	snprintf(snum, sizeof(snum), "%" PRIu64, len);
	json_array_append_new(op->cmd, json_string("--size"));
	json_array_append_new(op->cmd, json_string(snum));
	if (file_timer_new(op) < 0) {
		op_free(op);
		sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
		return NULL;
	}
	if (src != NULL) {
		op->src = src;
		op->src_left = len;
		if ((op->src_ent = evbuffer_add_cb(src, src_added, op)) == NULL) {
			op->src = NULL;
			op_free(op);
			sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
			return NULL;
		}
	}
	exec_begin(op);
	return &op->base;
}

static struct sbx_op *
eng_write(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return write_common(d, id, path, mode, body, NULL, 0, cb, arg, err);
}

static struct sbx_op *
eng_write_stream(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *src, uint64_t len, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	return write_common(d, id, path, mode, NULL, src, len, cb, arg, err);
}

static struct sbx_op *
eng_list(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	size_t limit = page != NULL && page->limit > 0 ? page->limit :
	    SBX_HELPER_LIST_MAX, i, an;
	char num[32];

	if (!id_valid(id)) {
		sbx_err_set(err, SBX_E_INVALID_ID,
		    "sandbox id must match [a-z0-9][a-z0-9-]{0,62}");
		return NULL;
	}
	if (path_ok(path, err) < 0)
		return NULL;
	if (limit > SBX_HELPER_LIST_MAX)
		limit = SBX_HELPER_LIST_MAX;
	an = page != NULL && page->after != NULL ? strlen(page->after) : 0;
	if (page != NULL && page->after != NULL && (an == 0 || an > 255 ||
	    strchr(page->after, '/') != NULL)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "the cursor does not name a "
		    "directory entry");
		return NULL;
	}
	if ((op = helper_op(e, OP_LIST, id, err)) == NULL)
		return NULL;
	op->list_cb = cb;
	op->arg = arg;
	op->list_limit = limit;
	/* An entry line is at most ~1.4 KiB (255-byte name, escaped, and
	 * its base64): the page's output has a bound. */
	op->cap = (int64_t)limit * 1536 + 4096;
	op->cmd = helper_cmd("list");
	if (json_array_append_new(op->cmd, json_string(path)) < 0) {
		op_free(op);
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "path must be UTF-8");
		return NULL;
	}
	snprintf(num, sizeof(num), "%zu", limit);
	json_array_append_new(op->cmd, json_string("--limit"));
	json_array_append_new(op->cmd, json_string(num));
	if (an > 0) {
		for (i = 0; i < an; i++)
			snprintf(op->after_hex + 2 * i, 3, "%02x",
			    (unsigned char)page->after[i]);
		json_array_append_new(op->cmd, json_string("--after-hex"));
		json_array_append_new(op->cmd, json_string(op->after_hex));
	}
	json_array_append_new(op->cmd, json_string("--id"));
	json_array_append_new(op->cmd, json_string(op->exec_id));
	if (file_timer_new(op) < 0) {
		op_free(op);
		sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
		return NULL;
	}
	exec_begin(op);
	return &op->base;
}

/* ---------- status with /work usage (adr/0017) ---------- */

/* The container inspected (r: 1 running, 0 stopped or absent): keeps its
 * status for the walk; a sandbox not running is answered here, uncounted.
 * Returns 1 when op has been finished. */
static int
usage_target(struct eop *op, int r, const struct sbx_status *st)
{
	struct sbx_status a;

	if (r == 1) {
		op->ust = *st;
		return 0;
	}
	if (st->state == SBX_STATE_ABSENT) {
		absent_status(op, &a);
		st = &a;
	}
	finish_status(op, NULL, st);
	return 1;
}

/* The helper's one line (sbx_helper_proto.h, du) into u; untrusted. */
static int
usage_parse(struct eop *op, struct sbx_usage *u)
{
	struct sbx_err e;
	json_t *o;
	int rc;

	o = json_loadb((const char *)evbuffer_pullup(op->out, -1),
	    evbuffer_get_length(op->out), 0, NULL);
	rc = o != NULL && !json_is_null(o) ? sbx_usage_from_json(o, u, &e) : -1;
	json_decref(o);
	return rc;
}

static void
usage_exited(struct eop *op, int code)
{
	struct sbx_err e;

	if (code != 0) {
		helper_error(op, code, &e);
		finish_err(op, &e);
		return;
	}
	if (op->truncated || usage_parse(op, &op->ust.usage) < 0) {
		sbx_err_set(&e, SBX_E_RUNTIME, "sbx-helper du gave no usable "
		    "answer");
		finish_err(op, &e);
		return;
	}
	finish_status(op, NULL, &op->ust);
}

/* `sbx-helper du --max N --timeout-ms T`: the helper stops itself at T and
 * says partial; the driver's timer (T + grace) only catches a helper that
 * does not answer. */
static struct sbx_op *
eng_status_usage(struct sbx_driver *d, const char *id, sbx_status_cb cb,
    void *arg, struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char num[32];

	if (!id_valid(id)) {
		sbx_err_set(err, SBX_E_INVALID_ID,
		    "sandbox id must match [a-z0-9][a-z0-9-]{0,62}");
		return NULL;
	}
	if ((op = helper_op(e, OP_USAGE, id, err)) == NULL)
		return NULL;
	op->status_cb = cb;
	op->arg = arg;
	op->cap = ERRTAIL_MAX;
	op->timeout_ms = e->usage_timeout_ms + HELPER_GRACE_MS;
	op->cmd = helper_cmd(SBX_HELPER_MODE_DU);
	/* A kill handle: a cancel or the timer ends the walk too. */
	json_array_append_new(op->cmd, json_string("--id"));
	json_array_append_new(op->cmd, json_string(op->exec_id));
	snprintf(num, sizeof(num), "%" PRId64, e->usage_max);
	json_array_append_new(op->cmd, json_string("--max"));
	json_array_append_new(op->cmd, json_string(num));
	snprintf(num, sizeof(num), "%" PRId64, e->usage_timeout_ms);
	json_array_append_new(op->cmd, json_string("--timeout-ms"));
	json_array_append_new(op->cmd, json_string(num));
	exec_begin(op);
	return &op->base;
}

/* ---------- recover ---------- */

/* `sbx-helper killall`: SIGKILLs every exec group the helper recorded in
 * the sandbox's /tmp (sbx_helper_proto.h), i.e. execs of a broker that
 * died without cancelling them. */
static struct sbx_op *
eng_recover(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;

	if ((op = helper_op(e, OP_RECOVER, id, err)) == NULL)
		return NULL;
	op->done_cb = cb;
	op->arg = arg;
	op->cap = ERRTAIL_MAX;
	op->timeout_ms = KILL_TIMEOUT_MS;
	if ((op->cmd = helper_cmd("killall")) == NULL) {
		op_free(op);
		sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
		return NULL;
	}
	exec_begin(op);
	return &op->base;
}

/* ---------- handle control ---------- */

static void
eng_cancel(struct sbx_driver *d, struct sbx_op *o)
{
	struct eop *op = (struct eop *)o;

	(void)d;
	if (op == NULL || op->dead)
		return;
	/* An exec that may have been created is killed by its handle; the
	 * helper leaves a tombstone when the kill arrives first. */
	if ((op->kind == OP_EXEC || op->kind == OP_READ || op->kind == OP_WRITE ||
	    op->kind == OP_LIST || op->kind == OP_USAGE) && op->cid[0] != '\0' &&
	    !op->killing)
		start_kill(op->e, op->id, op->cid, op->exec_id, NULL);
	op_release(op);
}

static void
eng_pause(struct sbx_driver *d, struct sbx_op *o)
{
	struct eop *op = (struct eop *)o;

	(void)d;
	if (op == NULL || op->dead || (op->kind != OP_EXEC && op->kind != OP_READ))
		return;
	op->paused = 1;
	if (op->ftimer != NULL)
		event_del(op->ftimer);   /* the reader's choice, not a stall */
	if (op->streaming)
		sbx_http_req_pause(op->http);
}

static void
eng_resume(struct sbx_driver *d, struct sbx_op *o)
{
	struct eop *op = (struct eop *)o;

	(void)d;
	if (op == NULL || op->dead || !op->paused)
		return;
	op->paused = 0;
	file_progress(op);
	if (op->streaming)
		sbx_http_req_resume(op->http);
}

/* ---------- driver ---------- */

static void
eng_free(struct sbx_driver *d)
{
	struct engine *e = (struct engine *)d;
	struct eop *op;
	char **p;

	if (e == NULL)
		return;
	/* Callers must have ended their ops; kills still running are ours. */
	while ((op = TAILQ_FIRST(&e->ops)) != NULL)
		op_free(op);
	free(e->address);
	free(e->default_image);
	for (p = e->images; p != NULL && *p != NULL; p++)
		free(*p);
	free(e->images);
	free(e->user);
	free(e->helper_path);
	free(e->helper_tar);
	free(e->oci_runtime);
	free(e->bridge_prefix);
	free(e->prefix);
	free(e);
}

/* A ustar header for a regular file name of size bytes, mode 0755, root's. */
static void
tar_header(unsigned char *h, const char *name, size_t size)
{
	unsigned sum = 0;
	size_t i;

	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	snprintf((char *)h + 100, 8, "%07o", 0755);
	snprintf((char *)h + 108, 8, "%07o", 0);
	snprintf((char *)h + 116, 8, "%07o", 0);
	snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
	snprintf((char *)h + 136, 12, "%011o", 0);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	for (i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
}

/*
 * Reads the helper once: its bytes as the tar the helper volume is filled
 * with, its sha256 and the volume's name. A helper that cannot be read is
 * not fatal here: health says why, and every ensure that needs a new
 * container fails with that sentence. -1 with e->helper_err set.
 */
static int
helper_load(struct engine *e)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	struct stat st;
	size_t pad;
	ssize_t n;
	int fd;

	if ((fd = open(e->helper_path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(e->helper_err, sizeof(e->helper_err), "sbx-helper "
		    "cannot be read at %s: %s", e->helper_path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size > HELPER_MAX || (st.st_mode & 0111) == 0) {
		snprintf(e->helper_err, sizeof(e->helper_err), "sbx-helper at %s "
		    "is not a non-empty executable file of at most 64 MiB",
		    e->helper_path);
		close(fd);
		return -1;
	}
	e->helper_len = (size_t)st.st_size;
	pad = (512 - e->helper_len % 512) % 512;
	e->helper_tar_len = 512 + e->helper_len + pad + 1024;
	if ((e->helper_tar = calloc(1, e->helper_tar_len)) == NULL) {
		close(fd);
		snprintf(e->helper_err, sizeof(e->helper_err), "out of memory");
		return -1;
	}
	n = read(fd, e->helper_tar + 512, e->helper_len);
	close(fd);
	if (n < 0 || (size_t)n != e->helper_len) {
		free(e->helper_tar);
		e->helper_tar = NULL;
		snprintf(e->helper_err, sizeof(e->helper_err), "sbx-helper at %s "
		    "could not be read whole", e->helper_path);
		return -1;
	}
	tar_header(e->helper_tar, "sbx-helper", e->helper_len);
	crypto_hash_sha256(h, e->helper_tar + 512, e->helper_len);
	sodium_bin2hex(e->helper_sha, sizeof(e->helper_sha), h, sizeof(h));
	snprintf(e->helper_vol, sizeof(e->helper_vol), "%s-%.16s",
	    e->helper_stem, e->helper_sha);
	return 0;
}

static int
set_limit(struct sbx_engine_limit *out, const struct sbx_engine_limit *in,
    int64_t def, int64_t ceiling, const char *what, struct sbx_err *err)
{
	*out = *in;
	if (out->def == 0)
		out->def = def;
	if (out->ceiling == 0)
		out->ceiling = out->def > ceiling ? out->def : ceiling;
	if (out->def < 0 || out->ceiling < out->def)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: %s "
		    "default must be positive and not above its ceiling", what);
	return 0;
}

struct sbx_driver *
sbx_engine_driver_new(struct event_base *base, const struct sbx_engine_config *c,
    struct sbx_err *err)
{
	struct engine *e = NULL;
	const char *sock, *user;
	const char *const *p;
	size_t n = 0, i = 0;
	unsigned uid, gid;
	char extra;

	if (base == NULL || c == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config missing");
		return NULL;
	}
	if (sodium_init() < 0) {
		sbx_err_set(err, SBX_E_INTERNAL, "libsodium failed to initialise");
		return NULL;
	}
	if ((e = calloc(1, sizeof(*e))) == NULL)
		goto oom;
	e->base.ops = &sbx_engine_driver_ops;
	e->base.base = base;
	TAILQ_INIT(&e->ops);
	TAILQ_INIT(&e->hwait);
	sock = c->runtime_socket;
	if (sock != NULL && strncmp(sock, "unix://", 7) == 0)
		sock += 6;
	else if (sock != NULL && strncmp(sock, "unix:", 5) == 0)
		sock += 5;
	if (sock == NULL || sock[0] != '/' || strlen(sock) > 100) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: runtime socket "
		    "must be an absolute unix socket path");
		goto fail;
	}
	if (asprintf(&e->address, "unix:%s", sock) < 0) {
		e->address = NULL;
		goto oom;
	}
	if (!image_ok(c->default_image)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: default image "
		    "missing or malformed");
		goto fail;
	}
	for (p = c->images; p != NULL && *p != NULL; p++) {
		if (!image_ok(*p)) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: malformed "
			    "image in the allowlist");
			goto fail;
		}
		n++;
	}
	if ((e->images = calloc(n + 2, sizeof(*e->images))) == NULL)
		goto oom;
	if ((e->images[i++] = strdup(c->default_image)) == NULL)
		goto oom;
	for (p = c->images; p != NULL && *p != NULL; p++)
		if ((e->images[i++] = strdup(*p)) == NULL)
			goto oom;
	if ((e->default_image = strdup(c->default_image)) == NULL)
		goto oom;
	user = c->user != NULL ? c->user : "1000:1000";
	if (sscanf(user, "%u:%u%c", &uid, &gid, &extra) != 2 || uid == 0) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: user must be "
		    "a non-root uid:gid");
		goto fail;
	}
	if ((e->user = strdup(user)) == NULL)
		goto oom;
	e->uid = uid;
	e->gid = gid;
	if (set_limit(&e->mem, &c->memory_bytes, 512LL << 20, 2LL << 30,
	    "memory", err) < 0 ||
	    set_limit(&e->cpus, &c->nano_cpus, 1000000000LL, 2000000000LL,
	    "nano_cpus", err) < 0 ||
	    set_limit(&e->pids, &c->pids, 256, 1024, "pids", err) < 0 ||
	    set_limit(&e->timeout, &c->exec_timeout_ms, 30000, 600000,
	    "exec timeout", err) < 0)
		goto fail;
	e->tmp_bytes = c->tmp_bytes > 0 ? c->tmp_bytes : 64LL << 20;
	e->output_cap = c->exec_output_cap > 0 ? c->exec_output_cap : 16LL << 20;
	e->file_max = c->file_max_bytes > 0 ? c->file_max_bytes : 64LL << 20;
	e->file_timeout = c->file_timeout_ms > 0 ? c->file_timeout_ms : 30000;
	if (c->helper_path == NULL || c->helper_path[0] != '/' ||
	    strchr(c->helper_path, ':') != NULL ||
	    strchr(c->helper_path, ',') != NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: helper path "
		    "must be absolute (no ':' or ',')");
		goto fail;
	}
	if ((e->helper_path = strdup(c->helper_path)) == NULL)
		goto oom;
	if (c->helper_volume != NULL && c->helper_volume[0] != '\0')
		snprintf(e->helper_stem, sizeof(e->helper_stem), "%s",
		    c->helper_volume);
	else
		snprintf(e->helper_stem, sizeof(e->helper_stem), "%shelper",
		    c->name_prefix != NULL ? c->name_prefix : "sbx-");
	if (!name_ok(e->helper_stem, 48) ||
	    !isalnum((unsigned char)e->helper_stem[0])) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: helper volume "
		    "name must be 1-48 of [A-Za-z0-9_.-], starting with a letter "
		    "or digit");
		goto fail;
	}
	e->run_bytes = c->run_bytes > 0 ? c->run_bytes : RUN_SIZE_DEF;
	if (helper_load(e) < 0 && strcmp(e->helper_err, "out of memory") == 0)
		goto oom;
	if (c->oci_runtime != NULL && c->oci_runtime[0] != '\0') {
		if (!name_ok(c->oci_runtime, 64)) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: bad OCI "
			    "runtime name");
			goto fail;
		}
		if ((e->oci_runtime = strdup(c->oci_runtime)) == NULL)
			goto oom;
	}
	e->bridge_prefix = strdup(c->egress_bridge_prefix != NULL ?
	    c->egress_bridge_prefix : "sbxe");
	e->prefix = strdup(c->name_prefix != NULL ? c->name_prefix : "sbx-");
	if (e->bridge_prefix == NULL || e->prefix == NULL)
		goto oom;
	if (!name_ok(e->prefix, 32) || !isalnum((unsigned char)e->prefix[0])) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: name prefix "
		    "must be [A-Za-z0-9_.-], starting with a letter or digit");
		goto fail;
	}
	if (!bridge_prefix_ok(e->bridge_prefix)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "engine config: egress bridge "
		    "prefix must be 1 to 6 of [a-z0-9], starting with a letter");
		goto fail;
	}
	e->stop_timeout_s = c->stop_timeout_s > 0 ? c->stop_timeout_s : 2;
	e->usage_timeout_ms = c->usage_timeout_ms > 0 ? c->usage_timeout_ms : 5000;
	e->usage_max = c->usage_max_entries > 0 ? c->usage_max_entries : 200000;
	e->req_timeout_ms = c->request_timeout_ms > 0 ? c->request_timeout_ms :
	    60000;
	return &e->base;
oom:
	sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
fail:
	eng_free(e != NULL ? &e->base : NULL);
	return NULL;
}

const struct sbx_driver_ops sbx_engine_driver_ops = {
	.name = "engine",
	.ensure = eng_ensure,
	.status = eng_status,
	.exec = eng_exec,
	.read = eng_read,
	.write = eng_write,
	.write_stream = eng_write_stream,
	.list = eng_list,
	.stop = eng_stop,
	.destroy = eng_destroy,
	.list_sandboxes = eng_list_sandboxes,
	.health = eng_health,
	.recover = eng_recover,
	.reconcile = eng_reconcile,
	.status_usage = eng_status_usage,
	.cancel = eng_cancel,
	.pause = eng_pause,
	.resume = eng_resume,
	.free = eng_free,
};
