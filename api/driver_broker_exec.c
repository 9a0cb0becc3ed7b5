/* driver_broker_exec.c - the broker-client exec: the request (sbx_wire_exec_encode) and its NDJSON event stream to the caller's sink (SPEC §3); calls the op's life (driver_broker_op.c) and the NDJSON parser. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "driver_broker_int.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

static int
on_event(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct bop *b = arg;

	if (b->dead)
		return 1;
	switch (ev->type) {
	case SBX_EVENT_START:
		b->started = 1;
		b->sink.start(b->sink.arg, ev->exec_id);
		break;
	case SBX_EVENT_STDOUT:
	case SBX_EVENT_STDERR:
		if (ev->len == 0)
			break;
		/* As received when the sink takes lines (adr/0028): the
		 * parser checked it without decoding it. */
		if (ev->undecoded)
			b->line(b->sink.arg, ev->stream, line, len, ev->len);
		else
			b->sink.output(b->sink.arg, ev->stream, ev->data,
			    ev->len);
		break;
	case SBX_EVENT_QUOTA:
		/* Goes out with the exit, just before it (adr/0057). */
		b->exit.work_bytes = ev->work_bytes;
		b->exit.work_quota = ev->work_quota;
		break;
	case SBX_EVENT_EXIT:
		/* Held until the stream ends: an error may still follow. */
		dbk_op_keep_exit(b, ev);
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

/* exec: a 200 answer is the NDJSON event stream (SPEC §3). */
static void
exec_begin(struct bop *b)
{
	struct sbx_err e;

	if (b->status != 200)
		return;
	b->streaming = 1;
	b->parser = sbx_ndjson_parser_new(0, on_event, b);
	if (b->parser != NULL && b->line != NULL)
		sbx_ndjson_parser_undecoded(b->parser, 1);
	if (b->parser == NULL) {
		sbx_err_oom(&e);
		b->sink.error(b->sink.arg, &e);
		dbk_op_end(b);
	}
}

static void
exec_feed(struct bop *b, const unsigned char *p, size_t n)
{
	struct sbx_err e;

	if (sbx_ndjson_parser_feed(b->parser, (const char *)p, n, &e) == -1 &&
	    !b->dead) {
		log_warn("malformed exec stream from the broker", "id", b->id,
		    "error", e.message, NULL);
		sbx_err_set(&e, SBX_E_BROKER_UNAVAILABLE, "The sandbox broker's "
		    "exec stream broke off or was malformed.");
		b->sink.error(b->sink.arg, &e);
		dbk_op_end(b);
	}
}

static void
finish_exec(struct bop *b, const struct sbx_err *terr)
{
	struct sbx_err e;

	if (dbk_op_stream_ended(b, terr) == -1)
		return;
	if (b->have_error) {
		/* "exit then error": only one terminal callback exists. */
		b->sink.error(b->sink.arg, &b->error);
		return;
	}
	if (sbx_ndjson_parser_finish(b->parser, &e) == -1 || !b->have_exit) {
		sbx_err_set(&e, SBX_E_BROKER_UNAVAILABLE, "The sandbox broker's "
		    "exec stream ended before the exec did.");
		b->sink.error(b->sink.arg, &e);
		return;
	}
	b->sink.exit(b->sink.arg, &b->exit);
}

static const struct bkind kind_exec = {
	.begin = exec_begin, .feed = exec_feed, .finish = finish_exec,
};

struct sbx_op *
dbk_exec_lines(struct sbx_driver *drv, const char *id,
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
	if ((b = dbk_op_new(d, &kind_exec, id, NULL, err)) == NULL)
		return NULL;
	b->sink = *sink;
	b->line = line;
	if ((o = sbx_wire_exec_encode(req, err)) == NULL) {
		dbk_op_free(b);
		return NULL;
	}
	return dbk_op_start_id(b, "POST", SBX_PATH_EXEC_SUFFIX, o, err);
}

struct sbx_op *
dbk_exec(struct sbx_driver *drv, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	return dbk_exec_lines(drv, id, req, sink, NULL, err);
}
