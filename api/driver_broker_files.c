/* driver_broker_files.c - the broker-client file ops: read (a byte stream to the sink), write, write_stream (adr/0030) and list (decoded as it arrives), on SBX_PATH_SANDBOXES "/{id}/files|list?path=..."; calls the op's life, the list scanner and the write pump. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "driver_broker_int.h"
#include "driver_broker_list.h"
#include "driver_broker_pump.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

#define LSCAN_ENTRIES_MAX 100000 /* list_max_entries' ceiling at the broker */

/* "/v1/sandboxes/ID/SUFFIX?path=ENCODED[&mode=M]" (path checked by
 * sbx_path_check; mode 0: no &mode=, else "%04o" of it), malloc'ed, or NULL
 * with err (path_outside_work, internal). */
static char *
path_url(const char *id, const char *suffix, const char *path,
    uint32_t mode, struct sbx_err *err)
{
	char *enc = NULL, *url = NULL, mstr[8];

	if (sbx_path_check(path, strlen(path), err) == -1)
		return NULL;
	if ((enc = sbx_query_encode(path, strlen(path))) == NULL ||
	    asprintf(&url, SBX_PATH_SANDBOXES "/%s%s?" SBX_QUERY_PATH "=%s%s%s",
	    id, suffix, enc, mode != 0 ? "&" SBX_QUERY_MODE "=" : "",
	    mode != 0 ? sbx_wire_mode_encode(mode, mstr) : "") == -1) {
		url = NULL;
		sbx_err_oom(err);
	}
	free(enc);
	return url;
}

/* A new op of kind with its target, SBX_PATH_SANDBOXES "/{id}{suffix}"
 * "?path=..." (path_url: path checked; mode 0: no &mode=), in *url
 * (malloc'ed, the caller frees). NULL with err (*url NULL) on failure. */
static struct bop *
path_op_new(struct bdriver *d, const struct bkind *kind, const char *id,
    const char *suffix, const char *path, uint32_t mode, void *arg,
    char **url, struct sbx_err *err)
{
	struct bop *b;

	*url = NULL;
	if ((b = dbk_op_new(d, kind, id, arg, err)) == NULL)
		return NULL;
	if ((*url = path_url(id, suffix, path, mode, err)) == NULL) {
		dbk_op_free(b);
		return NULL;
	}
	return b;
}

/* read: a 200 answer's body is the file's bytes, as stdout. */
static void
read_begin(struct bop *b)
{
	if (b->status != 200)
		return;
	b->streaming = 1;
	b->started = 1;
	b->sink.start(b->sink.arg, "");
}

static void
read_feed(struct bop *b, const unsigned char *p, size_t n)
{
	b->sink.output(b->sink.arg, 1, p, n);
}

static void
finish_read(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_exit ex;

	if (dbk_op_stream_ended(b, terr) == -1)
		return;
	memset(&ex, 0, sizeof(ex));
	b->sink.exit(b->sink.arg, &ex);
}

static const struct bkind kind_read = {
	.begin = read_begin, .feed = read_feed, .finish = finish_read,
};

/* list: a 2xx page is decoded as it arrives (driver_broker_list.h); a
 * broker that sends more than asked is malformed. Without memory for the
 * scanner the page is buffered and decoded whole at the end. */
static void
list_begin(struct bop *b)
{
	if (b->status < 200 || b->status > 299 || b->lscan != NULL)
		return;
	b->lscan = lscan_new(b->list_limit > 0 &&
	    b->list_limit < LSCAN_ENTRIES_MAX ? b->list_limit :
	    LSCAN_ENTRIES_MAX);
	b->streaming = b->lscan != NULL;
}

static void
list_feed(struct bop *b, const unsigned char *p, size_t n)
{
	lscan_feed(b->lscan, p, n);
}

static void
finish_list(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;
	struct sbx_dirent *ents = NULL;
	json_t *root = NULL;
	size_t n = 0;
	int ok, trunc = 0;

	if (dbk_op_answer_error(b, terr, &e) == -1)
		goto done;
	if (b->lscan != NULL) {
		/* decoded as it came; the shell has the rest */
		if (lscan_finish(b->lscan, &root, &ents, &n) == -1)
			dbk_error_malformed(&e);
		else
			trunc = json_is_true(json_object_get(root, "truncated"));
	} else if ((root = dbk_op_json(b)) == NULL)
		dbk_error_malformed(&e);
	else if (sbx_wire_list_decode(root, &ents, &n, &trunc, &e) == -1 &&
	    strcmp(e.code, SBX_E_INTERNAL) != 0)
		dbk_error_malformed(&e);
done:
	ok = !sbx_err_is_set(&e);
	b->cb.list(b->arg, dbk_err_or_null(&e), ok ? ents : NULL, ok ? n : 0,
	    ok && trunc);
	free(ents);
	json_decref(root);
}

static const struct bkind kind_list = {
	.begin = list_begin, .feed = list_feed, .finish = finish_list,
};

struct sbx_op *
dbk_read(struct sbx_driver *drv, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct bdriver *d = (struct bdriver *)drv;
	struct bop *b;
	struct sbx_op *op;
	char *url;

	if ((b = path_op_new(d, &kind_read, id, SBX_PATH_FILES_SUFFIX, path, 0,
	    NULL, &url, err)) == NULL)
		return NULL;
	b->sink = *sink;
	op = dbk_op_start(b, "GET", url, NULL, NULL, 0, err);
	free(url);
	return op;
}

struct sbx_op *
dbk_write(struct sbx_driver *drv, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct bdriver *d = (struct bdriver *)drv;
	struct bop *b;
	struct sbx_op *op;
	char *url;
	size_t len = body != NULL ? evbuffer_get_length(body) : 0;

	if ((b = path_op_new(d, &dbk_kind_done, id, SBX_PATH_FILES_SUFFIX,
	    path, mode, arg, &url, err)) == NULL)
		return NULL;
	b->cb.done = cb;
	/* The client copies the body before returning; the evbuffer is
	 * drained as the vtable says. */
	op = dbk_op_start(b, "PUT", url, SBX_CT_OCTET,
	    len > 0 ? evbuffer_pullup(body, -1) : NULL, len, err);
	if (op != NULL && body != NULL)
		evbuffer_drain(body, len);
	free(url);
	return op;
}

/* PUT .../files, Content-Length len, the body streamed from src (adr/0030):
 * a source that stops is the broker's file_timeout (504); a cancel closes
 * the connection mid-body, so the helper leaves the file as it was. */
struct sbx_op *
dbk_write_stream(struct sbx_driver *drv, const char *id, const char *path,
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
	if ((b = path_op_new(d, &dbk_kind_done, id, SBX_PATH_FILES_SUFFIX,
	    path, mode, arg, &url, err)) == NULL)
		return NULL;
	b->cb.done = cb;
	op = dbk_op_start_stream(b, "PUT", url, SBX_CT_OCTET, len, err);
	free(url);
	if (op == NULL)
		return NULL;
	if ((b->pump = bpump_new(src, len, d->write_out_max, b->http)) ==
	    NULL) {
		dbk_op_free(b);
		sbx_err_oom(err);
		return NULL;
	}
	return op;
}

struct sbx_op *
dbk_list(struct sbx_driver *drv, const char *id, const char *path,
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
	if ((b = path_op_new(d, &kind_list, id, SBX_PATH_LIST_SUFFIX, path, 0, arg,
	    &url, err)) == NULL)
		return NULL;
	b->cb.list = cb;
	b->list_limit = page != NULL ? page->limit : 0;
	if (asprintf(&full, "%s&" SBX_QUERY_CURSOR "=%s", url, cur) == -1) {
		free(url);
		dbk_op_free(b);
		sbx_err_oom(err);
		return NULL;
	}
	op = dbk_op_start(b, "GET", full, NULL, NULL, 0, err);
	free(url);
	free(full);
	return op;
}
