/* api_e2b_files.c - envd's plain HTTP for E2B's SDK (api_e2b_fs.h, adr/0061): GET /files streamed from the driver's read, POST /files (octet-stream through api_write_stream; multipart parsed as it arrives into one spool file, then each part streamed to the driver's write), GET /health. Answers in E2B's error shape. May touch a request's reply and the driver (sbx_call.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "api_e2b_fs.h"
#include "api_e2b_multipart.h"
#include "api_e2b_path.h"
#include "api_int.h"
#include "sbx_call.h"
#include "sbx_gate.h"
#include "sbx_httpd.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"

#define READ_HIGH_WATER (1024 * 1024) /* bytes queued to the client: pause the read */

int
api_e2b_files_status(const struct sbx_err *err)
{
	if (strcmp(err->code, SBX_E_NOT_FOUND) == 0)
		return 404;
	if (strcmp(err->code, SBX_E_FORBIDDEN) == 0)
		return 403;
	if (strcmp(err->code, SBX_E_PATH_OUTSIDE_WORK) == 0 ||
	    strcmp(err->code, SBX_E_BAD_REQUEST) == 0)
		return 400;
	if (strcmp(err->code, SBX_E_NOT_RUNNING) == 0)
		return 502;
	return sbx_err_http_status(err);
}

/* The one error reply of these routes: {"code":STATUS,"message":...}.
 * An op still in flight is cancelled by areq_finish. */
static void
e2b_fail(struct areq *a, const struct sbx_err *err)
{
	int status = api_e2b_files_status(err);
	unsigned flags = SBX_HTTPD_NO_STORE;

	/* A body not read to its end cannot be followed on this connection. */
	if (a->gbody != NULL && (!sbx_gate_body_complete(a->gbody) ||
	    sbx_gate_body_failed(a->gbody) != SBX_GATE_PASS))
		flags |= SBX_HTTPD_CLOSE;
	if (a->h.streaming) {
		areq_stream_abort(a, err->code);
		return;
	}
	sbx_httpd_reply_json(&a->h, status, json_pack("{s:i, s:s}", "code", status,
	    "message", err->message), flags);
	areq_finish(a, status, err->code);
}

static void
e2b_fail_driver(struct areq *a, const struct sbx_err *in)
{
	struct sbx_err err = *in;

	if (strcmp(in->code, SBX_E_NOT_RUNNING) == 0)
		sbx_err_set(&err, SBX_E_NOT_RUNNING, "The sandbox is not running; "
		    "connect to it first (POST /sandboxes/{id}/connect).");
	/* A path that leaves /work through a symlink: 403 with the design's
	 * sentence first, as filesystem.Filesystem answers it. */
	if (strcmp(in->code, SBX_E_PATH_OUTSIDE_WORK) == 0)
		sbx_err_set(&err, SBX_E_FORBIDDEN, "%s (%s)", API_E2B_PATH_OUTSIDE,
		    in->message);
	api_metrics_broker_error(&a->s->metrics, in->code);
	e2b_fail(a, &err);
}

/* ?name= decoded once, mapped by api_e2b_path into out. Absent: "" (home). */
static int
query_e2b_path(struct areq *a, const char *name, char *out, size_t cap,
    struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	char *raw = NULL;
	size_t n = 0;
	int r;

	r = sbx_query_param(uri != NULL ? evhttp_uri_get_query(uri) : NULL, name, &raw,
	    &n, err);
	if (r == -1)
		return -1;
	if (r == 1 && strlen(raw) != n) {
		free(raw);
		return sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "The path has a "
		    "NUL byte.");
	}
	r = api_e2b_path(raw, out, cap, err);
	free(raw);
	return r;
}

static const char *
base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s != NULL ? s + 1 : path;
}

/* ------------------------------------------------------------------ */
/* GET /files                                                          */

static void
read_start(void *arg, const char *exec_id)
{
	(void)exec_id;
	(void)arg;
}

static void
read_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct areq *a = arg;

	(void)stream;
	areq_stream_bytes(a, buf, len, READ_HIGH_WATER);
}

static void
read_exit(void *arg, const struct sbx_exit *ex)
{
	struct areq *a = arg;

	(void)ex;
	a->op = NULL;
	if (a->h.streaming) {
		areq_stream_end(a, "ok");
		return;
	}
	/* An empty file: a whole reply, "Content-Length: 0" (the SDK's
	 * read answers "" for it). */
	areq_reply_body(a, 200, SBX_CT_OCTET, NULL);
}

static void
read_error(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	a->op = NULL;
	if (a->h.streaming)
		log_warn("E2B file read failed mid-stream", "npc", a->npc.name,
		    "code", err->code, NULL);
	e2b_fail_driver(a, err);
}

int
api_e2b_files_get(struct areq *a, struct sbx_err *err)
{
	const struct sbx_sink sink = { .start = read_start, .output = read_output,
	    .exit = read_exit, .error = read_error, .arg = a };
	char path[SBX_PATH_MAX + 1];

	if (query_e2b_path(a, "path", path, sizeof(path), err) == -1 ||
	    api_fileop_admit(a, err) == -1) {
		e2b_fail(a, err);
		return 0;
	}
	if ((a->path = strdup(path)) == NULL) {
		sbx_err_oom(err);
		e2b_fail(a, err);
		return 0;
	}
	a->op = sbx_call_read(a->s->driver, a->npc.sandbox_id, a->path, &sink, err);
	if (a->op == NULL)
		e2b_fail_driver(a, err);
	return 0;
}

/* ------------------------------------------------------------------ */
/* POST /files                                                         */

/* One file of an upload: its bytes in the spool file at off. */
struct up_part {
	char path[SBX_PATH_MAX + 1];
	uint64_t off, len;
};

struct api_e2b_upload {
	struct areq *a;
	struct mp_parser *mp;
	int fd;                     /* the spool file (unnamed, state_dir) */
	int werr;                   /* errno of a failed spool write */
	struct sbx_err perr;        /* the parse's error */
	int failed;
	uint64_t taken;             /* body bytes fed to the parser */
	uint64_t spooled;
	char qpath[SBX_PATH_MAX + 1]; /* ?path=, mapped ("" when absent) */
	int has_qpath;
	struct up_part *parts;
	size_t nparts, cur;
	struct evbuffer *src;       /* the current part towards the driver */
	struct evbuffer_cb_entry *in_ent, *out_ent;
	uint64_t left;              /* bytes of the current part not yet in src */
	size_t window;
	int filling;
	struct event *go, *refill;
	json_t *answer;
};

static void
up_free(struct api_e2b_upload *u)
{
	if (u == NULL)
		return;
	if (u->in_ent != NULL && u->a->gbody != NULL)
		evbuffer_remove_cb_entry(sbx_gate_body_buffer(u->a->gbody), u->in_ent);
	if (u->src != NULL) {
		if (u->out_ent != NULL)
			evbuffer_remove_cb_entry(u->src, u->out_ent);
		evbuffer_free(u->src);
	}
	if (u->go != NULL)
		event_free(u->go);
	if (u->refill != NULL)
		event_free(u->refill);
	if (u->fd >= 0)
		close(u->fd);
	mp_free(u->mp);
	free(u->parts);
	json_decref(u->answer);
	free(u);
}

static void
up_end(struct areq *a)
{
	/* a->op was cancelled before this (areq_finish). */
	up_free(a->upload);
	a->upload = NULL;
}

static int
mp_part(void *arg, const char *name, const char *filename, struct sbx_err *err)
{
	struct api_e2b_upload *u = arg;
	struct up_part *p;

	(void)name;
	if (u->nparts >= (size_t)u->a->s->cfg->e2b_files_parts_max)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "An upload holds at "
		    "most %lld files (e2b_files_parts_max).",
		    u->a->s->cfg->e2b_files_parts_max);
	if ((p = realloc(u->parts, (u->nparts + 1) * sizeof(*p))) == NULL)
		return sbx_err_oom(err);
	u->parts = p;
	p = &u->parts[u->nparts];
	if (filename[0] != '\0') {
		if (api_e2b_path(filename, p->path, sizeof(p->path), err) == -1)
			return -1;
	} else if (u->has_qpath)
		memcpy(p->path, u->qpath, sizeof(p->path));
	else
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A part has no filename "
		    "and the request no ?path=: where should it go?");
	if (strcmp(p->path, SBX_WORK_DIR) == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "/work is a directory; "
		    "name a file in it.");
	p->off = u->spooled;
	p->len = 0;
	u->nparts++;
	return 0;
}

static int
mp_data(void *arg, const unsigned char *buf, size_t len, struct sbx_err *err)
{
	struct api_e2b_upload *u = arg;
	size_t done = 0;
	ssize_t n;

	while (done < len && u->werr == 0) {
		n = write(u->fd, buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			u->werr = n < 0 ? errno : EIO;
		else
			done += (size_t)n;
	}
	if (u->werr != 0)
		return sbx_err_set(err, SBX_E_INTERNAL, "The api could not hold "
		    "your upload for the sandbox (its disk may be full); try "
		    "again later.");
	u->spooled += len;
	u->parts[u->nparts - 1].len += len;
	return 0;
}

static int
mp_end(void *arg, struct sbx_err *err)
{
	(void)arg;
	(void)err;
	return 0;
}

/* Body bytes arrived: through the parser into the spool file. */
static void
up_in(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct api_e2b_upload *u = arg;
	struct evbuffer_iovec v[8];
	int i, n;

	if (info->n_added == 0 || u->filling)
		return;
	u->filling = 1;
	while (evbuffer_get_length(buf) > 0) {
		n = evbuffer_peek(buf, -1, NULL, v, 8);
		if (n > 8)
			n = 8;
		for (i = 0; i < n; i++) {
			if (!u->failed && mp_feed(u->mp, v[i].iov_base, v[i].iov_len,
			    &u->perr) == -1)
				u->failed = 1;
			u->taken += v[i].iov_len;
			evbuffer_drain(buf, v[i].iov_len);
		}
	}
	u->filling = 0;
	/* A failed parse answers at once; a Content-Length body ends when its
	 * last byte was taken (a chunked one says so: up_ended). */
	if (u->failed || (u->a->gbody != NULL && !sbx_gate_body_chunked(u->a->gbody) &&
	    u->taken >= sbx_gate_body_length(u->a->gbody)))
		event_active(u->go, EV_TIMEOUT, 0);
}

static void
up_ended(struct sbx_gate_body *b, void *arg)
{
	struct api_e2b_upload *u = arg;

	(void)b;
	event_active(u->go, EV_TIMEOUT, 0);
}

/* The current part's next bytes into src, up to a window. */
static void
up_fill(struct api_e2b_upload *u)
{
	size_t have, want;
	int n;

	if (u->filling)
		return;
	u->filling = 1;
	while (u->left > 0 && (have = evbuffer_get_length(u->src)) < u->window) {
		want = u->window - have;
		if ((uint64_t)want > u->left)
			want = (size_t)u->left;
		if ((n = evbuffer_read(u->src, u->fd, (int)(want > (1 << 30) ?
		    (1 << 30) : want))) <= 0) {
			u->left = 0;   /* the write gets fewer bytes and fails */
			break;
		}
		u->left -= (uint64_t)n;
	}
	u->filling = 0;
}

static void
up_refill(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	up_fill(arg);
}

static void
up_out(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct api_e2b_upload *u = arg;

	(void)buf;
	if (info->n_deleted > 0 && u->left > 0)
		event_active(u->refill, EV_TIMEOUT, 0);
}

static void up_next(struct api_e2b_upload *u);

static void
up_written(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;
	struct api_e2b_upload *u = a->upload;
	const struct up_part *p = &u->parts[u->cur];

	a->op = NULL;
	if (err != NULL) {
		e2b_fail_driver(a, err);
		return;
	}
	json_array_append_new(u->answer, json_pack("{s:s, s:s, s:s}", "name",
	    base_name(p->path), "type", "file", "path", p->path));
	u->cur++;
	up_next(u);
}

/* The next part to the driver, or the answer after the last. */
static void
up_next(struct api_e2b_upload *u)
{
	struct areq *a = u->a;
	const struct up_part *p;
	struct sbx_err err;

	if (u->cur >= u->nparts) {
		json_t *ans = u->answer;

		u->answer = NULL;
		areq_trim_later(a->s);
		areq_reply_json(a, 200, ans);
		return;
	}
	p = &u->parts[u->cur];
	evbuffer_drain(u->src, evbuffer_get_length(u->src));
	if (lseek(u->fd, (off_t)p->off, SEEK_SET) != (off_t)p->off) {
		sbx_err_set(&err, SBX_E_INTERNAL, "The api could not read your "
		    "upload back; try again.");
		e2b_fail(a, &err);
		return;
	}
	u->left = p->len;
	u->window = (size_t)a->s->cfg->file_write_buffer;
	if (!sbx_call_supports(a->s->driver, SBX_CALL_WRITE_STREAM))
		u->window = p->len > 0 ? (size_t)p->len : 1;
	up_fill(u);
	sbx_err_clear(&err);
	a->op = sbx_call_write_stream(a->s->driver, a->npc.sandbox_id, p->path, 0,
	    u->src, p->len, up_written, a, &err);
	if (a->op == NULL)
		e2b_fail_driver(a, &err);
}

/* The body ended (or its parse failed), from the loop. */
static void
up_go(evutil_socket_t fd, short what, void *arg)
{
	struct api_e2b_upload *u = arg;
	struct areq *a = u->a;
	enum sbx_gate_verdict v = a->gbody != NULL ? sbx_gate_body_failed(a->gbody) :
	    SBX_GATE_PASS;
	struct sbx_err err;

	(void)fd;
	(void)what;
	if (u->in_ent != NULL) {
		evbuffer_remove_cb_entry(sbx_gate_body_buffer(a->gbody), u->in_ent);
		u->in_ent = NULL;
	}
	sbx_err_clear(&err);
	if (v != SBX_GATE_PASS) {
		sbx_gate_refusal(v, &err);
		if (v == SBX_GATE_TOO_LARGE)
			sbx_err_set(&err, SBX_E_TOO_LARGE, SBX_MSG_FILE_TOO_LARGE,
			    a->s->cfg->file_size_max);
		e2b_fail(a, &err);
		return;
	}
	if (u->failed) {
		e2b_fail(a, &u->perr);
		return;
	}
	if (mp_finish(u->mp, &err) == -1) {
		e2b_fail(a, &err);
		return;
	}
	if (u->nparts == 0) {
		sbx_err_set(&err, SBX_E_BAD_REQUEST, "The upload holds no file.");
		e2b_fail(a, &err);
		return;
	}
	up_next(u);
}

static int
post_multipart(struct areq *a, const char *ctype, struct sbx_err *err)
{
	const struct mp_callbacks cb = { mp_part, mp_data, mp_end, NULL };
	struct mp_callbacks c = cb;
	struct api_e2b_upload *u;
	struct evbuffer *in;
	struct evbuffer_cb_info added = { 0, 1, 0 };

	if ((u = calloc(1, sizeof(*u))) == NULL)
		return sbx_err_oom(err);
	u->a = a;
	u->fd = -1;
	a->upload = u;
	a->on_end = up_end;
	c.arg = u;
	if (query_e2b_path(a, "path", u->qpath, sizeof(u->qpath), err) == -1)
		return -1;
	u->has_qpath = strcmp(u->qpath, SBX_WORK_DIR) != 0;
	if ((u->mp = mp_new(ctype, &c, err)) == NULL)
		return -1;
	if ((u->fd = api_spool_open(a->s->cfg->state_dir)) < 0) {
		log_warn("cannot open a spool file", "dir", a->s->cfg->state_dir,
		    "error", strerror(errno), NULL);
		return sbx_err_set(err, SBX_E_INTERNAL, "The api cannot take an "
		    "upload now; try again later.");
	}
	if ((u->answer = json_array()) == NULL || (u->src = evbuffer_new()) == NULL ||
	    (u->go = event_new(a->s->base, -1, 0, up_go, u)) == NULL ||
	    (u->refill = event_new(a->s->base, -1, 0, up_refill, u)) == NULL ||
	    (u->out_ent = evbuffer_add_cb(u->src, up_out, u)) == NULL)
		return sbx_err_oom(err);
	if (a->gbody == NULL) {
		/* Gathered whole by the routing: parse it at once. */
		in = evhttp_request_get_input_buffer(a->h.req);
		up_in(in, &added, u);
		event_active(u->go, EV_TIMEOUT, 0);
		return 0;
	}
	in = sbx_gate_body_buffer(a->gbody);
	if ((u->in_ent = evbuffer_add_cb(in, up_in, u)) == NULL)
		return sbx_err_oom(err);
	sbx_gate_body_window(a->gbody, (size_t)a->s->cfg->file_write_buffer);
	sbx_gate_body_on_end(a->gbody, up_ended, u);
	up_in(in, &added, u);
	if (sbx_gate_body_complete(a->gbody) ||
	    sbx_gate_body_failed(a->gbody) != SBX_GATE_PASS)
		event_active(u->go, EV_TIMEOUT, 0);
	areq_watch(a);
	sbx_gate_body_kick(a->gbody);
	return 0;
}

static void
octet_written(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	a->op = NULL;
	if (err != NULL) {
		e2b_fail_driver(a, err);
		return;
	}
	areq_trim_later(a->s);
	areq_reply_json(a, 200, json_pack("[{s:s, s:s, s:s}]", "name",
	    base_name(a->path), "type", "file", "path", a->path));
}

static int
post_octet(struct areq *a, struct sbx_err *err)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(a->h.req);
	char path[SBX_PATH_MAX + 1];

	if (query_e2b_path(a, "path", path, sizeof(path), err) == -1)
		return -1;
	if (strcmp(path, SBX_WORK_DIR) == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "/work is a directory; "
		    "name a file in it (?path=).");
	if ((a->path = strdup(path)) == NULL)
		return sbx_err_oom(err);
	if (a->gbody != NULL)
		return api_write_stream(a, octet_written, err);
	a->op = sbx_call_write(a->s->driver, a->npc.sandbox_id, a->path, 0, in,
	    octet_written, a, err);
	if (a->op == NULL) {
		e2b_fail_driver(a, err);
		return 0;
	}
	return 0;
}

int
api_e2b_files_post(struct areq *a, struct sbx_err *err)
{
	const char *ct = evhttp_find_header(evhttp_request_get_input_headers(a->h.req),
	    "Content-Type");
	int r;

	if (api_fileop_admit(a, err) == -1) {
		e2b_fail(a, err);
		return 0;
	}
	if (ct != NULL && strncasecmp(ct, "multipart/", 10) == 0)
		r = post_multipart(a, ct, err);
	else
		r = post_octet(a, err);
	if (r == -1)
		e2b_fail(a, err);
	return 0;
}

int
api_e2b_files(struct areq *a, struct sbx_err *err)
{
	switch (evhttp_request_get_command(a->h.req)) {
	case EVHTTP_REQ_GET:
		return api_e2b_files_get(a, err);
	case EVHTTP_REQ_POST:
		return api_e2b_files_post(a, err);
	default:
		sbx_httpd_header(&a->h, "Allow", "GET, POST");
		sbx_err_set(err, SBX_E_METHOD_NOT_ALLOWED, "/files takes GET "
		    "(download) and POST (upload).");
		e2b_fail(a, err);
		return 0;
	}
}

/* ------------------------------------------------------------------ */
/* GET /health                                                         */

int
api_e2b_health(struct areq *a, struct sbx_err *err)
{
	if (evhttp_request_get_command(a->h.req) != EVHTTP_REQ_GET) {
		sbx_httpd_header(&a->h, "Allow", "GET");
		sbx_err_set(err, SBX_E_METHOD_NOT_ALLOWED, "/health takes GET.");
		e2b_fail(a, err);
		return 0;
	}
	areq_reply_body(a, 204, NULL, NULL);
	return 0;
}
