/* driver_broker_op.c - one broker-client op's life: new, the request started, the HTTP client's callbacks passed on through the op's kind row (struct bkind), cancel, end and free. Knows no kind; calls the HTTP client, the write pump and the list scanner's free, never a per-kind file (driver_broker_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "driver_broker_int.h"
#include "driver_broker_list.h"
#include "driver_broker_pump.h"
#include "sbx_http_client.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"

#define JSON_BODY_MAX ((size_t)16 * 1024 * 1024)  /* list answers */
#define ERROR_BODY_MAX ((size_t)64 * 1024)

/* Lets go of a write_stream's source: no more bytes are taken from it. */
static void
src_detach(struct bop *b)
{
	bpump_free(b->pump);
	b->pump = NULL;
}

void
dbk_op_free(struct bop *b)
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
	if (b->kind->release != NULL)
		b->kind->release(b);
	free(b);
}

struct bop *
dbk_op_new(struct bdriver *d, const struct bkind *kind, const char *id,
    void *arg, struct sbx_err *err)
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
void
dbk_op_end(struct bop *b)
{
	b->dead = 1;
	src_detach(b);
	if (b->http != NULL) {
		sbx_http_req_cancel(b->http);
		b->http = NULL;
	}
	if (b->busy == 0)
		dbk_op_free(b);
}

json_t *
dbk_op_json(struct bop *b)
{
	size_t len = evbuffer_get_length(b->body);

	if (len == 0)
		return NULL;
	return json_loadb((const char *)evbuffer_pullup(b->body, -1), len, 0,
	    NULL);
}

/* The error of a plain answer into e: the transport's, else the broker's
 * (a status other than 2xx). Returns 0 for a 2xx answer (e clear), -1. */
int
dbk_op_answer_error(struct bop *b, const struct sbx_err *terr,
    struct sbx_err *e)
{
	sbx_err_clear(e);
	if (terr != NULL)
		dbk_error_from_transport(terr, e);
	else if (b->status < 200 || b->status > 299)
		dbk_error_from_body(b->status, b->body, e);
	return sbx_err_is_set(e) ? -1 : 0;
}

/* A 2xx answer's JSON body (the caller decrefs), or NULL with e set. */
json_t *
dbk_op_answer_json(struct bop *b, const struct sbx_err *terr, struct sbx_err *e)
{
	json_t *root;

	if (dbk_op_answer_error(b, terr, e) == -1)
		return NULL;
	if ((root = dbk_op_json(b)) == NULL)
		dbk_error_malformed(e);
	return root;
}

/*
 * The end of a stream op's answer, before its kind's own ending: a
 * transport error, or an answer that was no stream (the broker's error),
 * goes to the sink as its error. Returns 0 when the stream came and the
 * kind ends it, -1 when the sink has had its terminal error.
 */
int
dbk_op_stream_ended(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;

	sbx_err_clear(&e);
	if (terr != NULL) {
		dbk_error_from_transport(terr, &e);
		if (b->streaming && strcmp(e.code, SBX_E_BROKER_UNAVAILABLE) != 0 &&
		    strcmp(e.code, SBX_E_TIMEOUT) != 0)
			sbx_err_set(&e, SBX_E_BROKER_UNAVAILABLE, "The connection "
			    "to the sandbox broker broke off.");
	} else if (!b->streaming)
		dbk_error_from_body(b->status, b->body, &e);
	else
		return 0;
	b->sink.error(b->sink.arg, &e);
	return -1;
}

void
dbk_op_keep_exit(struct bop *b, const struct sbx_event *ev)
{
	b->have_exit = 1;
	b->exit.code = ev->code;
	b->exit.duration_ms = ev->duration_ms;
	b->exit.truncated = ev->truncated;
	snprintf(b->exit_signal, sizeof(b->exit_signal), "%s",
	    ev->signal != NULL ? ev->signal : "");
	b->exit.signal = ev->signal != NULL ? b->exit_signal : NULL;
}

/* ------------------------------------------------------------------ */
/* The HTTP client's callbacks: through the op's kind                  */

static void
on_response(void *arg, struct sbx_http_req *req, int status)
{
	struct bop *b = arg;

	(void)req;
	b->status = status;
	/* The broker answered a streamed write: the rest of the body is not
	 * wanted (an early error), or there is none left (done). */
	src_detach(b);
	if (b->kind->begin == NULL)
		return;
	b->busy++;
	b->kind->begin(b);
	b->busy--;
	if (b->dead && b->busy == 0)
		dbk_op_free(b);   /* begin ended it (or its sink cancelled) */
}

static void
on_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct bop *b = arg;
	size_t cap;

	(void)req;
	if (b->dead)
		return;
	if (!b->streaming) {
		cap = b->status >= 200 && b->status <= 299 ? JSON_BODY_MAX :
		    ERROR_BODY_MAX;
		if (evbuffer_get_length(b->body) + len <= cap)
			evbuffer_add(b->body, buf, len);
		return;
	}
	b->busy++;
	b->kind->feed(b, buf, len);
	b->busy--;
	if (b->dead && b->busy == 0)
		dbk_op_free(b);
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
			dbk_op_free(b);
		return;
	}
	b->busy++;
	b->kind->finish(b, err);
	b->busy--;
	dbk_op_end(b);
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
	hr.upgrade = b->upgrade != NULL;
	hr.upgrade_proto = b->upgrade;
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
		dbk_op_free(b);
		return NULL;
	}
	return &b->op;
}

struct sbx_op *
dbk_op_start(struct bop *b, const char *method, const char *path,
    const char *ctype, const void *body, size_t body_len, struct sbx_err *err)
{
	return start_req(b, method, path, ctype, body, body_len, 0, 0, err);
}

struct sbx_op *
dbk_op_start_stream(struct bop *b, const char *method, const char *path,
    const char *ctype, uint64_t len, struct sbx_err *err)
{
	return start_req(b, method, path, ctype, NULL, 0, 1, len, err);
}

static struct sbx_op *
start_json(struct bop *b, const char *method, const char *path, json_t *obj,
    struct sbx_err *err)
{
	struct sbx_op *op;
	char *text = NULL;

	if (obj != NULL && (text = json_dumps(obj, JSON_COMPACT)) == NULL) {
		json_decref(obj);
		dbk_op_free(b);
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The request cannot be "
		    "encoded as JSON (text must be UTF-8).");
		return NULL;
	}
	json_decref(obj);
	op = dbk_op_start(b, method, path, text != NULL ? SBX_CT_JSON : NULL,
	    text, text != NULL ? strlen(text) : 0, err);
	free(text);
	return op;
}

/* Starts method on SBX_PATH_SANDBOXES "/{id}{suffix}" of b, with obj
 * (owned; NULL: no body) as its JSON body. On failure b is freed. */
struct sbx_op *
dbk_op_start_id(struct bop *b, const char *method, const char *suffix,
    json_t *obj, struct sbx_err *err)
{
	char path[160];

	snprintf(path, sizeof(path), SBX_PATH_SANDBOXES "/%s%s", b->id, suffix);
	return start_json(b, method, path, obj, err);
}

/* ------------------------------------------------------------------ */
/* The caller's handle                                                 */

void
dbk_cancel(struct sbx_driver *drv, struct sbx_op *op)
{
	struct bop *b = (struct bop *)op;

	(void)drv;
	if (b->dead)
		return;
	/* Closing the connection is the cancel: the broker sees the
	 * disconnect and kills an exec's process tree. */
	dbk_op_end(b);
}

void
dbk_pause(struct sbx_driver *drv, struct sbx_op *op)
{
	struct bop *b = (struct bop *)op;

	(void)drv;
	if (!b->dead && b->kind->pause != NULL)
		b->kind->pause(b, 1);
	else if (!b->dead && b->http != NULL)
		sbx_http_req_pause(b->http);
}

void
dbk_resume(struct sbx_driver *drv, struct sbx_op *op)
{
	struct bop *b = (struct bop *)op;

	(void)drv;
	if (!b->dead && b->kind->pause != NULL)
		b->kind->pause(b, 0);
	else if (!b->dead && b->http != NULL)
		sbx_http_req_resume(b->http);
}
