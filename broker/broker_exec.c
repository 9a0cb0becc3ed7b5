/* broker_exec.c - POST /v1/sandboxes/{id}/exec: the body checked within the broker's ceilings, the exec started through the call layer, its NDJSON stream (SPEC §5, proto/broker-api.md); a handler that reaches the request layer through broker_int.h only (adr/0036). */
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "broker_int.h"
#include "broker_metrics.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_wire.h"

static void
exec_start(void *arg, const char *exec_id)
{
	struct breq *b = arg;

	snprintf(b->exec_id, sizeof(b->exec_id), "%s", exec_id);
	if (breq_stream_begin(b, SBX_CT_NDJSON) == -1)
		return;
	broker_metrics_exec_started(b->s->metrics);
	b->exec_counted = 1;
	b->exec_t0 = sbx_mono_ms();
	sbx_ndjson_start(b->h.chunk, exec_id, sbx_wall_ms());
	breq_stream_flush(b);
}

static void
exec_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct breq *b = arg;

	if (!b->h.streaming)
		return;
	broker_metrics_exec_output(b->s->metrics, stream, len);
	if (stream == SBX_STREAM_STDOUT || stream == SBX_STREAM_STDERR)
		sbx_ndjson_output_held(b->h.chunk, &b->hold[stream - 1], stream, buf,
		    len);
	breq_stream_flush(b);
}

/* The characters still held at the end of the output go as they are. */
static void
exec_output_end(struct breq *b)
{
	sbx_ndjson_output_flush(b->h.chunk, &b->hold[0], SBX_STREAM_STDOUT);
	sbx_ndjson_output_flush(b->h.chunk, &b->hold[1], SBX_STREAM_STDERR);
}

/* The end of the stream: the quota event when ex says so (adr/0057),
 * then the exit event. */
static void
exec_end(struct breq *b, const struct sbx_exit *ex)
{
	if (ex->work_quota > 0)
		sbx_ndjson_quota(b->h.chunk, ex->work_bytes, ex->work_quota);
	sbx_ndjson_exit(b->h.chunk, ex->code, ex->signal, ex->duration_ms,
	    ex->truncated);
	breq_stream_end(b, "ok");
}

/* /work counted at the exec's end: the held exit goes out, with the
 * quota event when this count finds /work over the quota since the
 * owner was last told. A failed count only loses the event. */
static void
exec_counted(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct breq *b = arg;
	struct sbx_exit ex = b->held_exit;

	b->op = NULL;
	if (err == NULL && st->usage.present) {
		broker_quota_counted(b->s->quota, b->id, sbx_mono_ms(),
		    st->usage.bytes);
		if (broker_quota_tell(b->s->quota, b->id)) {
			ex.work_bytes = st->usage.bytes;
			ex.work_quota = broker_quota_bytes(b->s->quota);
		}
	} else if (err != NULL) {
		log_warn("work quota: /work not counted at an exec's end", "id",
		    b->id, "code", err->code, NULL);
	}
	exec_end(b, &ex);
}

static void
exec_exit(void *arg, const struct sbx_exit *ex)
{
	struct breq *b = arg;
	struct sbx_err e;

	b->op = NULL;
	if (!b->h.streaming) {
		/* An exit without start breaks the driver contract. */
		breq_fail_code(b, SBX_E_INTERNAL, "The driver ended the exec "
		    "before it started.");
		return;
	}
	exec_output_end(b);
	breq_stream_flush(b);
	/* With a work_quota, /work is counted unless a count ended after
	 * this exec began (adr/0057); the exit waits for it. */
	if (broker_quota_exit_needs_count(b->s->quota, b->id, b->exec_t0) &&
	    sbx_call_supports(b->s->driver, SBX_CALL_STATUS_USAGE)) {
		b->held_exit = *ex;
		b->held_exit.work_bytes = b->held_exit.work_quota = 0;
		snprintf(b->held_signal, sizeof(b->held_signal), "%s",
		    ex->signal != NULL ? ex->signal : "");
		b->held_exit.signal = ex->signal != NULL ? b->held_signal : NULL;
		b->op = sbx_call_status_usage(b->s->driver, b->id,
		    exec_counted, b, &e);
		if (b->op != NULL)
			return;
		log_warn("work quota: /work not counted at an exec's end", "id",
		    b->id, "code", e.code, NULL);
	}
	exec_end(b, ex);
}

static void
exec_error(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;
	struct sbx_err tmp;

	b->op = NULL;
	if (!b->h.streaming) {
		breq_fail(b, err);
		return;
	}
	err = breq_err_why(b, err, &tmp);   /* it ran: a stop may be why */
	if (broker_is_runtime_code(err->code))
		broker_metrics_runtime_error(b->s->metrics, err->code);
	exec_output_end(b);
	sbx_ndjson_error(b->h.chunk, err->code, err->message);
	breq_stream_end(b, err->code);
}

/* The exec body (proto/broker-api.md, sbx_wire.h) into b->x, within the
 * broker's ceilings, defaults applied. */
static int
exec_parse(struct breq *b, struct sbx_err *err)
{
	const struct broker_config *cfg = b->s->cfg;

	if (broker_body_object(b, sbx_wire_exec_fields, 0, &b->body,
	    err) == -1 ||
	    sbx_wire_exec_decode(b->body, &b->x, err) == -1 ||
	    broker_within(b->x.req.timeout_ms, cfg->exec_timeout_max,
	    "timeout_ms", err) == -1 ||
	    broker_within(b->x.req.output_cap, cfg->output_cap, "output_cap",
	    err) == -1)
		return -1;
	if (b->x.req.timeout_ms == 0)
		b->x.req.timeout_ms = cfg->exec_timeout;
	if (b->x.req.output_cap == 0)
		b->x.req.output_cap = cfg->output_cap;
	return 0;
}

int
h_exec(struct breq *b, struct sbx_err *err)
{
	const struct broker_config *cfg = b->s->cfg;
	const struct sbx_sink sink = { .start = exec_start,
	    .output = exec_output, .exit = exec_exit, .error = exec_error,
	    .arg = b };

	if (exec_parse(b, err) == -1)
		return -1;
	if (b->sbx->execs >= (unsigned long long)cfg->max_execs_per_sandbox)
		return sbx_err_set(err, SBX_E_TOO_MANY, BROKER_MSG_COMMANDS_FULL,
		    b->id, cfg->max_execs_per_sandbox);
	if ((b->h.chunk = evbuffer_new()) == NULL)
		return sbx_err_oom(err);
	b->sbx->execs++;
	b->holds_exec = 1;
	b->is_exec = 1;
	b->op = sbx_call_exec(b->s->driver, b->id, &b->x.req, &sink,
	    err);
	return b->op == NULL ? -1 : 0;
}
