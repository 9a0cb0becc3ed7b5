/* driver_broker.c - the broker-client SandboxDriver: every operation is one HTTP request to sandbox-broker. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "driver_broker.h"
#include "driver_broker_int.h"
#include "driver_broker_list.h"
#include "driver_broker_pump.h"
#include "sbx_http_client.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_token.h"
#include "sbx_wire.h"

#define JSON_BODY_MAX ((size_t)16 * 1024 * 1024)  /* list answers */
#define ERROR_BODY_MAX ((size_t)64 * 1024)
#define LSCAN_ENTRIES_MAX 100000 /* list_max_entries' ceiling at the broker */
/* write_stream's bytes queued for the broker, unless configured (adr/0030) */
#define WRITE_OUT_MAX ((size_t)256 * 1024)

enum bkind {
	BK_STATUS,      /* ensure, status, stop and destroy answer a status */
	BK_DONE,        /* write, stop, destroy: cb.done */
	BK_EXEC,
	BK_READ,
	BK_LIST,
	BK_SANDBOXES,
	BK_HEALTH,
	BK_JSON,        /* egress_stats: the answer's JSON text (adr/0026) */
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
	enum bkind kind;
	struct sbx_http_req *http;
	struct sbx_op_cb cb;          /* the caller's, of the op's kind */
	struct sbx_sink sink;
	sbx_line_cb line;           /* exec_lines: output lines as received */
	void *arg;
	char id[64];
	int status;                 /* HTTP status of the broker's answer */
	int streaming;              /* 200 on exec/read: body is the stream */
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
};

/* Lets go of a write_stream's source: no more bytes are taken from it. */
static void
src_detach(struct bop *b)
{
	bpump_free(b->pump);
	b->pump = NULL;
}

/* ------------------------------------------------------------------ */
/* Op life                                                             */

static void
bop_free(struct bop *b)
{
	struct bdriver *d = b->d;

	if (b->prev != NULL)
		b->prev->next = b->next;
	else
		d->live = b->next;
	if (b->next != NULL)
		b->next->prev = b->prev;
	src_detach(b);
	if (b->http != NULL)
		sbx_http_req_cancel(b->http);
	if (b->body != NULL)
		evbuffer_free(b->body);
	sbx_ndjson_parser_free(b->parser);
	lscan_free(b->lscan);
	free(b);
}

static struct bop *
bop_new(struct bdriver *d, enum bkind kind, const char *id, void *arg,
    struct sbx_err *err)
{
	struct bop *b;

	if (id != NULL && !sbx_id_valid(id)) {
		sbx_err_bad_id(err);
		return NULL;
	}
	if ((b = calloc(1, sizeof(*b))) == NULL ||
	    (b->body = evbuffer_new()) == NULL) {
		free(b);
		sbx_err_oom(err);
		return NULL;
	}
	b->op.driver = &d->base;
	b->d = d;
	b->kind = kind;
	b->arg = arg;
	snprintf(b->id, sizeof(b->id), "%s", id != NULL ? id : "");
	b->next = d->live;
	if (d->live != NULL)
		d->live->prev = b;
	d->live = b;
	return b;
}

/* The op ended (terminal callback made or cancelled): free when safe. */
static void
bop_end(struct bop *b)
{
	b->dead = 1;
	src_detach(b);
	if (b->http != NULL) {
		sbx_http_req_cancel(b->http);
		b->http = NULL;
	}
	if (b->busy == 0)
		bop_free(b);
}

/* ------------------------------------------------------------------ */
/* Decoding the broker's answers                                       */

static json_t *
body_json(struct bop *b)
{
	size_t len = evbuffer_get_length(b->body);

	if (len == 0)
		return NULL;
	return json_loadb((const char *)evbuffer_pullup(b->body, -1), len, 0,
	    NULL);
}

static void
malformed(struct sbx_err *e)
{
	sbx_err_set(e, SBX_E_BROKER_UNAVAILABLE, "The sandbox broker sent an "
	    "answer the api cannot read.");
}

/* Terminal callback of a non-stream op with a JSON (or no) body. */
static void
finish_plain(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;
	struct sbx_status st, *sts = NULL;
	struct sbx_dirent *ents = NULL;
	struct sbx_health h;
	json_t *root = NULL;
	size_t n = 0;
	int ok, list_trunc = 0;

	sbx_err_clear(&e);
	if (terr != NULL)
		dbk_error_from_transport(terr, &e);
	else if (b->status < 200 || b->status > 299)
		dbk_error_from_body(b->status, b->body, &e);
	else if (b->kind == BK_LIST && b->lscan != NULL) {
		if (lscan_finish(b->lscan, &root, &ents, &n) == -1)
			malformed(&e);
	} else if (b->kind != BK_DONE && (root = body_json(b)) == NULL)
		malformed(&e);
	if (!sbx_err_is_set(&e)) {
		/* The one decoding of each answer (sbx_wire.h); a body it
		 * refuses is an answer the api cannot read. */
		switch (b->kind) {
		case BK_STATUS:
			if (sbx_wire_status_decode(root, &st, &e) == -1)
				malformed(&e);
			break;
		case BK_LIST:
			if (b->lscan != NULL)
				/* decoded as it came; the shell has the rest */
				list_trunc = json_is_true(json_object_get(root,
				    "truncated"));
			else if (sbx_wire_list_decode(root, &ents, &n,
			    &list_trunc, &e) == -1 && strcmp(e.code,
			    SBX_E_INTERNAL) != 0)
				malformed(&e);
			break;
		case BK_SANDBOXES:
			if (sbx_wire_sandboxes_decode(root, &sts, &n, &e) == -1 &&
			    strcmp(e.code, SBX_E_INTERNAL) != 0)
				malformed(&e);
			break;
		case BK_HEALTH:
			if (sbx_wire_health_decode(root, &h, &e) == -1)
				malformed(&e);
			break;
		default:
			break;
		}
	}
	ok = !sbx_err_is_set(&e);
	b->busy++;
	switch (b->kind) {
	case BK_STATUS:
		b->cb.status(b->arg, ok ? NULL : &e, ok ? &st : NULL);
		break;
	case BK_DONE:
		b->cb.done(b->arg, ok ? NULL : &e);
		break;
	case BK_LIST:
		b->cb.list(b->arg, ok ? NULL : &e, ok ? ents : NULL, ok ? n : 0,
		    ok && list_trunc);
		break;
	case BK_SANDBOXES:
		b->cb.sandboxes(b->arg, ok ? NULL : &e, ok ? sts : NULL,
		    ok ? n : 0);
		break;
	case BK_HEALTH:
		b->cb.health(b->arg, ok ? NULL : &e, ok ? &h : NULL);
		break;
	case BK_JSON:
		if (ok && !json_is_object(root)) {
			malformed(&e);
			ok = 0;
		}
		if (ok) {
			char *text = json_dumps(root, JSON_COMPACT);

			if (text == NULL)
				sbx_err_oom(&e);
			b->cb.json(b->arg, text != NULL ? NULL : &e, text);
			free(text);
		} else {
			b->cb.json(b->arg, &e, NULL);
		}
		break;
	default:
		break;
	}
	b->busy--;
	free(ents);
	free(sts);
	json_decref(root);
}

/* ------------------------------------------------------------------ */
/* Streams: exec NDJSON and file bytes                                 */

static void
sink_error(struct bop *b, const struct sbx_err *e)
{
	b->busy++;
	b->sink.error(b->sink.arg, e);
	b->busy--;
}

static int
on_event(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct bop *b = arg;

	if (b->dead)
		return 1;
	switch (ev->type) {
	case SBX_EVENT_START:
		b->started = 1;
		b->busy++;
		b->sink.start(b->sink.arg, ev->exec_id);
		b->busy--;
		break;
	case SBX_EVENT_STDOUT:
	case SBX_EVENT_STDERR:
		if (ev->len == 0)
			break;
		b->busy++;
		/* As received when the sink takes lines (adr/0028): the
		 * parser checked it without decoding it. */
		if (ev->undecoded)
			b->line(b->sink.arg, ev->stream, line, len, ev->len);
		else
			b->sink.output(b->sink.arg, ev->stream, ev->data,
			    ev->len);
		b->busy--;
		break;
	case SBX_EVENT_EXIT:
		/* Held until the stream ends: an error may still follow. */
		b->have_exit = 1;
		b->exit.code = ev->code;
		b->exit.duration_ms = ev->duration_ms;
		b->exit.truncated = ev->truncated;
		snprintf(b->exit_signal, sizeof(b->exit_signal), "%s",
		    ev->signal != NULL ? ev->signal : "");
		b->exit.signal = ev->signal != NULL ? b->exit_signal : NULL;
		break;
	case SBX_EVENT_ERROR:
		b->have_error = 1;
		sbx_err_clear(&b->error);
		snprintf(b->error.code, sizeof(b->error.code), "%s",
		    ev->err_code);
		snprintf(b->error.message, sizeof(b->error.message), "%s",
		    ev->err_message);
		break;
	}
	return b->dead ? 1 : 0;
}

static void
on_response(void *arg, struct sbx_http_req *req, int status)
{
	struct bop *b = arg;

	(void)req;
	b->status = status;
	/* The broker answered a streamed write: the rest of the body is not
	 * wanted (an early error), or there is none left (done). */
	src_detach(b);
	/* A list page is decoded as it arrives (NULL: whole, at the end); a
	 * broker that sends more than asked is malformed. */
	if (b->kind == BK_LIST && status >= 200 && status <= 299 &&
	    b->lscan == NULL)
		b->lscan = lscan_new(b->list_limit > 0 &&
		    b->list_limit < LSCAN_ENTRIES_MAX ? b->list_limit :
		    LSCAN_ENTRIES_MAX);
	if (status != 200 || (b->kind != BK_EXEC && b->kind != BK_READ))
		return;
	b->streaming = 1;
	if (b->kind == BK_EXEC) {
		b->parser = sbx_ndjson_parser_new(0, on_event, b);
		if (b->parser != NULL && b->line != NULL)
			sbx_ndjson_parser_undecoded(b->parser, 1);
		if (b->parser == NULL) {
			struct sbx_err e;

			sbx_err_oom(&e);
			sink_error(b, &e);
			bop_end(b);
		}
	} else {
		b->started = 1;
		b->busy++;
		b->sink.start(b->sink.arg, "");
		b->busy--;
		if (b->dead && b->busy == 0)
			bop_free(b);
	}
}

static void
on_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct bop *b = arg;
	struct sbx_err e;
	size_t cap;

	(void)req;
	if (b->dead)
		return;
	if (b->lscan != NULL && b->status >= 200 && b->status <= 299) {
		lscan_feed(b->lscan, buf, len);
		return;
	}
	if (!b->streaming) {
		cap = b->status >= 200 && b->status <= 299 ? JSON_BODY_MAX :
		    ERROR_BODY_MAX;
		if (evbuffer_get_length(b->body) + len <= cap)
			evbuffer_add(b->body, buf, len);
		return;
	}
	b->busy++;
	if (b->kind == BK_READ) {
		b->sink.output(b->sink.arg, 1, buf, len);
	} else if (sbx_ndjson_parser_feed(b->parser, (const char *)buf, len,
	    &e) == -1 && !b->dead) {
		log_warn("malformed exec stream from the broker", "id", b->id,
		    "error", e.message, NULL);
		sbx_err_set(&e, SBX_E_BROKER_UNAVAILABLE, "The sandbox broker's "
		    "exec stream broke off or was malformed.");
		b->sink.error(b->sink.arg, &e);
		b->busy--;
		bop_end(b);
		return;
	}
	b->busy--;
	if (b->dead && b->busy == 0)
		bop_free(b);
}

static void
finish_stream(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;
	struct sbx_exit ex;

	sbx_err_clear(&e);
	if (terr != NULL) {
		dbk_error_from_transport(terr, &e);
		if (b->streaming && strcmp(e.code, SBX_E_BROKER_UNAVAILABLE) != 0 &&
		    strcmp(e.code, SBX_E_TIMEOUT) != 0)
			sbx_err_set(&e, SBX_E_BROKER_UNAVAILABLE, "The connection "
			    "to the sandbox broker broke off.");
		sink_error(b, &e);
		return;
	}
	if (!b->streaming) {
		dbk_error_from_body(b->status, b->body, &e);
		sink_error(b, &e);
		return;
	}
	if (b->kind == BK_READ) {
		memset(&ex, 0, sizeof(ex));
		b->busy++;
		b->sink.exit(b->sink.arg, &ex);
		b->busy--;
		return;
	}
	if (b->have_error) {
		/* "exit then error": only one terminal callback exists. */
		sink_error(b, &b->error);
		return;
	}
	if (sbx_ndjson_parser_finish(b->parser, &e) == -1 || !b->have_exit) {
		sbx_err_set(&e, SBX_E_BROKER_UNAVAILABLE, "The sandbox broker's "
		    "exec stream ended before the exec did.");
		sink_error(b, &e);
		return;
	}
	b->busy++;
	b->sink.exit(b->sink.arg, &b->exit);
	b->busy--;
}

static void
on_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct bop *b = arg;

	(void)req;
	src_detach(b);
	b->http = NULL;         /* freed by the client after we return */
	if (b->dead) {
		if (b->busy == 0)
			bop_free(b);
		return;
	}
	if (b->kind == BK_EXEC || b->kind == BK_READ)
		finish_stream(b, err);
	else
		finish_plain(b, err);
	bop_end(b);
}

/* ------------------------------------------------------------------ */
/* Starting requests                                                   */

/* stream 1: a body of stream_len the caller streams, else body copied. */
static struct sbx_op *
start_req(struct bop *b, const char *method, const char *path,
    const char *ctype, const void *body, size_t body_len, int stream,
    uint64_t stream_len, struct sbx_err *err)
{
	struct bdriver *d = b->d;
	struct sbx_http_request hr;
	struct sbx_http_opts opts;
	struct sbx_http_cbs cbs;
	const char *headers[2];

	memset(&hr, 0, sizeof(hr));
	memset(&opts, 0, sizeof(opts));
	memset(&cbs, 0, sizeof(cbs));
	headers[0] = d->auth;
	headers[1] = NULL;
	hr.method = method;
	hr.path = path;
	hr.headers = headers;
	hr.content_type = ctype;
	hr.body = body;
	hr.body_len = body_len;
	hr.body_stream = stream;
	hr.stream_len = stream_len;
	opts.unavailable_code = SBX_E_BROKER_UNAVAILABLE;
	opts.protocol_code = SBX_E_BROKER_UNAVAILABLE;
	opts.peer_name = "the sandbox broker";
	opts.header_timeout_ms = d->header_timeout_ms;
	/* a broker that does not answer in time is unavailable (503) */
	opts.header_timeout_code = SBX_E_BROKER_UNAVAILABLE;
	cbs.response = on_response;
	cbs.body = on_body;
	cbs.done = on_done;
	cbs.arg = b;
	b->http = sbx_http_request(d->base.base, d->address, &hr, &opts, &cbs,
	    err);
	if (b->http == NULL) {
		bop_free(b);
		return NULL;
	}
	return &b->op;
}

static struct sbx_op *
start(struct bop *b, const char *method, const char *path, const char *ctype,
    const void *body, size_t body_len, struct sbx_err *err)
{
	return start_req(b, method, path, ctype, body, body_len, 0, 0, err);
}

static struct sbx_op *
start_json(struct bop *b, const char *method, const char *path, json_t *obj,
    struct sbx_err *err)
{
	struct sbx_op *op;
	char *text = NULL;

	if (obj != NULL && (text = json_dumps(obj, JSON_COMPACT)) == NULL) {
		json_decref(obj);
		bop_free(b);
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The request cannot be "
		    "encoded as JSON (text must be UTF-8).");
		return NULL;
	}
	json_decref(obj);
	op = start(b, method, path, text != NULL ? SBX_CT_JSON : NULL, text,
	    text != NULL ? strlen(text) : 0, err);
	free(text);
	return op;
}

/* Starts method on SBX_PATH_SANDBOXES "/{id}{suffix}" of b, with obj
 * (owned; NULL: no body) as its JSON body. On failure b is freed. */
static struct sbx_op *
start_id(struct bop *b, const char *method, const char *suffix, json_t *obj,
    struct sbx_err *err)
{
	char path[160];

	snprintf(path, sizeof(path), SBX_PATH_SANDBOXES "/%s%s", b->id, suffix);
	return start_json(b, method, path, obj, err);
}

/*
 * The callbacks are stored before start() so a failing start frees the op;
 * start never calls back synchronously (sbx_http_client.h).
 */
static struct sbx_op *
b_status_op(struct sbx_driver *drv, const char *method, const char *id,
    const char *suffix, json_t *obj, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b;

	if ((b = bop_new((struct bdriver *)drv, BK_STATUS, id, arg, err)) ==
	    NULL) {
		json_decref(obj);
		return NULL;
	}
	b->cb.status = cb;
	return start_id(b, method, suffix, obj, err);
}

static struct sbx_op *
b_ensure(struct sbx_driver *drv, const char *id, const struct sbx_spec *spec,
    sbx_status_cb cb, void *arg, struct sbx_err *err)
{
	return b_status_op(drv, "PUT", id, "", sbx_wire_spec_encode(spec), cb,
	    arg, err);
}

static struct sbx_op *
b_status(struct sbx_driver *drv, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	return b_status_op(drv, "GET", id, "", NULL, cb, arg, err);
}

/* GET /v1/sandboxes/{id}?usage=1: the status with its "usage" member. */
static struct sbx_op *
b_status_usage(struct sbx_driver *drv, const char *id, sbx_status_cb cb,
    void *arg, struct sbx_err *err)
{
	return b_status_op(drv, "GET", id, "?" SBX_QUERY_USAGE "=1", NULL, cb,
	    arg, err);
}

/* GET /v1/sandboxes/{id}/egress (adr/0026). */
static struct sbx_op *
b_egress_stats(struct sbx_driver *drv, const char *id, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b;

	if ((b = bop_new((struct bdriver *)drv, BK_JSON, id, arg, err)) == NULL)
		return NULL;
	b->cb.json = cb;
	return start_id(b, "GET", "/egress", NULL, err);
}

static struct sbx_op *
b_done_op(struct sbx_driver *drv, const char *method, const char *id,
    const char *suffix, sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct bop *b;

	if ((b = bop_new((struct bdriver *)drv, BK_DONE, id, arg, err)) == NULL)
		return NULL;
	b->cb.done = cb;
	return start_id(b, method, suffix, NULL, err);
}

static struct sbx_op *
b_stop(struct sbx_driver *drv, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return b_done_op(drv, "POST", id, SBX_PATH_STOP_SUFFIX, cb, arg, err);
}

static struct sbx_op *
b_destroy(struct sbx_driver *drv, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return b_done_op(drv, "DELETE", id, "", cb, arg, err);
}

static struct sbx_op *
b_exec_lines(struct sbx_driver *drv, const char *id,
    const struct sbx_exec_req *req, const struct sbx_sink *sink,
    sbx_line_cb line, struct sbx_err *err)
{
	struct bdriver *d = (struct bdriver *)drv;
	struct bop *b;
	json_t *o;

	if (req == NULL || req->argv == NULL || req->argv[0] == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_NO_ARGV);
		return NULL;
	}
	if (req->cwd != NULL && sbx_path_check(req->cwd, strlen(req->cwd),
	    err) == -1)
		return NULL;
	if ((b = bop_new(d, BK_EXEC, id, NULL, err)) == NULL)
		return NULL;
	b->sink = *sink;
	b->line = line;
	if ((o = sbx_wire_exec_encode(req, err)) == NULL) {
		bop_free(b);
		return NULL;
	}
	return start_id(b, "POST", SBX_PATH_EXEC_SUFFIX, o, err);
}

static struct sbx_op *
b_exec(struct sbx_driver *drv, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	return b_exec_lines(drv, id, req, sink, NULL, err);
}

/* A new op of kind with its target, SBX_PATH_SANDBOXES "/{id}{suffix}"
 * "?path=..." (dbk_path_url: path checked; mode 0: no &mode=), in *url
 * (malloc'ed, the caller frees). NULL with err (*url NULL) on failure. */
static struct bop *
path_op_new(struct bdriver *d, enum bkind kind, const char *id,
    const char *suffix, const char *path, uint32_t mode, void *arg,
    char **url, struct sbx_err *err)
{
	struct bop *b;

	*url = NULL;
	if ((b = bop_new(d, kind, id, arg, err)) == NULL)
		return NULL;
	if ((*url = dbk_path_url(id, suffix, path, mode, err)) == NULL) {
		bop_free(b);
		return NULL;
	}
	return b;
}

static struct sbx_op *
b_read(struct sbx_driver *drv, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct bdriver *d = (struct bdriver *)drv;
	struct bop *b;
	struct sbx_op *op;
	char *url;

	if ((b = path_op_new(d, BK_READ, id, SBX_PATH_FILES_SUFFIX, path, 0,
	    NULL, &url, err)) == NULL)
		return NULL;
	b->sink = *sink;
	op = start(b, "GET", url, NULL, NULL, 0, err);
	free(url);
	return op;
}

static struct sbx_op *
b_write(struct sbx_driver *drv, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bdriver *d = (struct bdriver *)drv;
	struct bop *b;
	struct sbx_op *op;
	char *url;
	size_t len = body != NULL ? evbuffer_get_length(body) : 0;

	if ((b = path_op_new(d, BK_DONE, id, SBX_PATH_FILES_SUFFIX, path, mode,
	    arg, &url, err)) == NULL)
		return NULL;
	b->cb.done = cb;
	/* The client copies the body before returning; the evbuffer is
	 * drained as the vtable says. */
	op = start(b, "PUT", url, SBX_CT_OCTET,
	    len > 0 ? evbuffer_pullup(body, -1) : NULL, len, err);
	if (op != NULL && body != NULL)
		evbuffer_drain(body, len);
	free(url);
	return op;
}

/* PUT .../files, Content-Length len, the body streamed from src (adr/0030):
 * a source that stops is the broker's file_timeout (504); a cancel closes
 * the connection mid-body, so the helper leaves the file as it was. */
static struct sbx_op *
b_write_stream(struct sbx_driver *drv, const char *id, const char *path,
    uint32_t mode, struct evbuffer *src, uint64_t len, sbx_done_cb cb,
    void *arg, struct sbx_err *err)
{
	struct bdriver *d = (struct bdriver *)drv;
	struct bop *b;
	struct sbx_op *op;
	char *url;

	if (src == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "write_stream needs a source.");
		return NULL;
	}
	if ((b = path_op_new(d, BK_DONE, id, SBX_PATH_FILES_SUFFIX, path, mode,
	    arg, &url, err)) == NULL)
		return NULL;
	b->cb.done = cb;
	op = start_req(b, "PUT", url, SBX_CT_OCTET, NULL, 0, 1, len, err);
	free(url);
	if (op == NULL)
		return NULL;
	if ((b->pump = bpump_new(src, len, d->write_out_max, b->http)) ==
	    NULL) {
		bop_free(b);
		sbx_err_oom(err);
		return NULL;
	}
	return op;
}

static struct sbx_op *
b_list(struct sbx_driver *drv, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bdriver *d = (struct bdriver *)drv;
	struct bop *b;
	struct sbx_op *op;
	char *url, *full = NULL, cur[SBX_WIRE_CURSOR_MAX + 1] = "";
	size_t an = page != NULL && page->after != NULL ? strlen(page->after) : 0;

	if (an > 255) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The cursor names no entry.");
		return NULL;
	}
	/* The broker's cursor is the base64url of the last name: the same
	 * value names the same place on both sides (adr/0013). */
	if (an > 0)
		sbx_wire_cursor_encode(page->after, cur, sizeof(cur));
	if ((b = path_op_new(d, BK_LIST, id, SBX_PATH_LIST_SUFFIX, path, 0, arg,
	    &url, err)) == NULL)
		return NULL;
	b->cb.list = cb;
	b->list_limit = page != NULL ? page->limit : 0;
	if (asprintf(&full, "%s&" SBX_QUERY_CURSOR "=%s", url, cur) == -1) {
		free(url);
		bop_free(b);
		sbx_err_oom(err);
		return NULL;
	}
	op = start(b, "GET", full, NULL, NULL, 0, err);
	free(url);
	free(full);
	return op;
}

static struct sbx_op *
b_list_sandboxes(struct sbx_driver *drv, sbx_sandboxes_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b = NULL;
	struct bdriver *d = (struct bdriver *)drv;

	if ((b = bop_new(d, BK_SANDBOXES, NULL, arg, err)) == NULL)
		return NULL;
	b->cb.sandboxes = cb;
	return start(b, "GET", SBX_PATH_SANDBOXES, NULL, NULL, 0, err);
}

static struct sbx_op *
b_health(struct sbx_driver *drv, sbx_health_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bop *b = NULL;
	struct bdriver *d = (struct bdriver *)drv;

	if ((b = bop_new(d, BK_HEALTH, NULL, arg, err)) == NULL)
		return NULL;
	b->cb.health = cb;
	return start(b, "GET", SBX_PATH_HEALTH, NULL, NULL, 0, err);
}

static void
b_cancel(struct sbx_driver *drv, struct sbx_op *op)
{
	struct bop *b = (struct bop *)op;

	(void)drv;
	if (b->dead)
		return;
	/* Closing the connection is the cancel: the broker sees the
	 * disconnect and kills an exec's process tree. */
	bop_end(b);
}

static void
b_pause(struct sbx_driver *drv, struct sbx_op *op)
{
	struct bop *b = (struct bop *)op;

	(void)drv;
	if (!b->dead && b->http != NULL)
		sbx_http_req_pause(b->http);
}

static void
b_resume(struct sbx_driver *drv, struct sbx_op *op)
{
	struct bop *b = (struct bop *)op;

	(void)drv;
	if (!b->dead && b->http != NULL)
		sbx_http_req_resume(b->http);
}

static void
b_free(struct sbx_driver *drv)
{
	struct bdriver *d = (struct bdriver *)drv;

	while (d->live != NULL)
		bop_free(d->live);
	free(d->address);
	if (d->auth != NULL)
		sodium_free(d->auth);
	free(d);
}

static const struct sbx_driver_ops broker_driver_ops = {
	.name = "broker",
	.ensure = b_ensure,
	.status = b_status,
	.exec_lines = b_exec_lines,
	.status_usage = b_status_usage,
	.egress_stats = b_egress_stats,
	.exec = b_exec,
	.read = b_read,
	.write = b_write,
	.write_stream = b_write_stream,
	.list = b_list,
	.stop = b_stop,
	.destroy = b_destroy,
	.list_sandboxes = b_list_sandboxes,
	.health = b_health,
	.cancel = b_cancel,
	.pause = b_pause,
	.resume = b_resume,
	.free = b_free,
};

struct sbx_driver *
sbx_broker_driver_new(struct event_base *base,
    const struct sbx_broker_config *cfg, struct sbx_err *err)
{
	struct sbx_token check;
	struct bdriver *d;
	size_t alen;

	memset(&check, 0, sizeof(check));
	if (cfg == NULL || cfg->address == NULL || cfg->address[0] == '\0') {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The broker address is "
		    "missing.");
		return NULL;
	}
	if (cfg->token == NULL || sbx_token_set(&check, cfg->token,
	    cfg->token_len, err) == -1)
		return NULL;
	sbx_token_clear(&check);
	if (sodium_init() < 0 || (d = calloc(1, sizeof(*d))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	d->base.ops = &broker_driver_ops;
	d->base.base = base;
	d->header_timeout_ms = cfg->header_timeout_ms;
	d->write_out_max = cfg->write_out_max > 0 ? cfg->write_out_max :
	    WRITE_OUT_MAX;
	alen = strlen(SBX_HDR_AUTHORIZATION ": " SBX_AUTH_BEARER) +
	    cfg->token_len + 1;
	if ((d->address = strdup(cfg->address)) == NULL ||
	    (d->auth = sodium_malloc(alen)) == NULL) {
		b_free(&d->base);
		sbx_err_oom(err);
		return NULL;
	}
	snprintf(d->auth, alen, SBX_HDR_AUTHORIZATION ": " SBX_AUTH_BEARER "%.*s",
	    (int)cfg->token_len, cfg->token);
	return &d->base;
}
