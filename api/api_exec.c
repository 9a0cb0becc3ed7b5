/* api_exec.c - sandbox-api streams: exec as Server-Sent Events, file reads as bytes, backpressure and cancel (SPEC §5). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <sodium.h>

#include "api_int.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_sse.h"

#define EXEC_ARGV_MAX 4096
#define EXEC_ENV_MAX 4096

/* ------------------------------------------------------------------ */
/* NDJSON line -> SSE event                                            */

int
api_sse_from_ndjson_line(struct evbuffer *out, uint64_t id, const char *line,
    size_t len, struct sbx_err *err)
{
	static const char pre[] = "{\"type\":\"";
	char type[33], *data = NULL;
	size_t i, t, rest;
	int rc;

	if (len > 0 && line[len - 1] == '\n')
		len--;
	/* Fast path: the encoder writes "type" first and compact, so the
	 * object without it is "{" + what follows "\"type\":\"T\","; jansson
	 * would re-dump exactly those bytes (proto/sbx_ndjson.h). */
	if (len < sizeof(pre) + 2 || memcmp(line, pre, sizeof(pre) - 1) != 0)
		goto slow;
	i = sizeof(pre) - 1;
	for (t = 0; i < len && t < sizeof(type) - 1 &&
	    ((line[i] >= 'a' && line[i] <= 'z') ||
	    (t > 0 && ((line[i] >= '0' && line[i] <= '9') || line[i] == '_')));
	    i++, t++)
		type[t] = line[i];
	type[t] = '\0';
	if (t == 0 || i + 1 >= len || line[i] != '"' || line[len - 1] != '}')
		goto slow;
	i++;
	if (line[i] == '}' && i + 1 == len)
		return sbx_sse_event(out, id, type, "{}", 2) == 0 ? 0 :
		    sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	if (line[i] != ',')
		goto slow;
	rest = len - i - 1;
	if ((data = malloc(rest + 1)) == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	data[0] = '{';
	memcpy(data + 1, line + i + 1, rest);
	rc = sbx_sse_event(out, id, type, data, rest + 1);
	free(data);
	return rc == 0 ? 0 : sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
slow:
	return sbx_sse_from_ndjson(out, id, line, len, err);
}


/* ------------------------------------------------------------------ */
/* Exec -> SSE                                                         */

/* Maps the NDJSON lines in line (emptied) to SSE events in a->chunk. */
static int
sse_emit(struct areq *a, struct evbuffer *line)
{
	struct sbx_err err;
	size_t len = evbuffer_get_length(line);
	const char *p;

	sbx_err_clear(&err);
	if (len == 0)
		return -1;
	p = (const char *)evbuffer_pullup(line, -1);
	if (p == NULL || api_sse_from_ndjson_line(a->chunk, ++a->sse_id, p,
	    len, &err) == -1) {
		log_error("cannot map an exec event to SSE", "code", err.code,
		    NULL);
		evbuffer_drain(line, len);
		return -1;
	}
	evbuffer_drain(line, len);
	areq_ping_arm(a);    /* the heartbeat is for silence only */
	return 0;
}

static void
exec_start(void *arg, const char *exec_id)
{
	struct areq *a = arg;
	struct evbuffer *line = evbuffer_new();

	if (line == NULL || areq_stream_begin(a, SBX_CT_SSE) == -1) {
		if (line != NULL)
			evbuffer_free(line);
		/* Out of memory before anything was sent. */
		sbx_op_cancel(a->op);
		a->op = NULL;
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	log_debug("exec started", "npc", a->npc.name, "exec_id", exec_id, NULL);
	a->exec_started = 1;
	a->exec_started_ms = api_mono_ms();
	api_metrics_exec_started(&a->s->metrics);
	if (sbx_ndjson_start(line, exec_id, a->s->now_ms()) == 0)
		sse_emit(a, line);
	evbuffer_free(line);
	areq_stream_flush(a);
}

static void
exec_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct areq *a = arg;
	struct evbuffer *line;
	size_t n;

	/* Output before start breaks the vtable's order; keep the SSE
	 * stream well-formed anyway. */
	if (!a->streaming && a->req != NULL)
		exec_start(a, "");
	if (!a->streaming || a->req == NULL || (line = evbuffer_new()) == NULL)
		return;
	api_metrics_stream_bytes(&a->s->metrics, stream, len);
	while (len > 0) {
		n = len < SBX_NDJSON_MAX_CHUNK ? len : SBX_NDJSON_MAX_CHUNK;
		if (sbx_ndjson_output(line, stream, buf, n) == 0)
			sse_emit(a, line);
		buf += n;
		len -= n;
	}
	evbuffer_free(line);
	areq_stream_flush(a);
}

static void
exec_exit(void *arg, const struct sbx_exit *ex)
{
	struct areq *a = arg;
	struct evbuffer *line;

	a->op = NULL;
	if (!a->streaming) {
		areq_fail_code(a, SBX_E_INTERNAL, "The exec ended before it "
		    "started.");
		return;
	}
	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_exit(line, ex->code, ex->signal,
		    ex->duration_ms, ex->truncated) == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	areq_stream_end(a, "ok");
}

static void
exec_error(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;
	struct evbuffer *line;

	a->op = NULL;
	if (!a->streaming) {
		areq_fail_broker(a, err);
		return;
	}
	api_metrics_broker_error(&a->s->metrics, err->code);
	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_error(line, err->code, err->message[0] != '\0' ?
		    err->message : err->code) == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	areq_stream_end(a, err->code);
}

/* on_shutdown of an exec stream: a last SSE error event shutting_down,
 * then the stream ends normally. */
static void
exec_shutdown(struct areq *a)
{
	struct evbuffer *line;

	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_error(line, SBX_E_SHUTTING_DOWN, "The api is "
		    "shutting down; the exec was cancelled.") == 0)
			sse_emit(a, line);
		evbuffer_free(line);
	}
	areq_stream_end(a, SBX_E_SHUTTING_DOWN);
}

/* A JSON array of strings without NUL into a NULL-terminated vector. */
static const char **
string_vector(json_t *arr, const char *name, size_t max, int need_one,
    struct sbx_err *err)
{
	const char **v;
	json_t *e;
	size_t i, n;

	if (!json_is_array(arr)) {
		sbx_err_set(err, SBX_E_WRONG_TYPE, "Member \"%s\" must be an "
		    "array of strings.", name);
		return NULL;
	}
	n = json_array_size(arr);
	if ((need_one && n == 0) || n > max) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"%s\" must hold "
		    "%s%zu strings.", name, need_one ? "1 to " : "at most ", max);
		return NULL;
	}
	if ((v = calloc(n + 1, sizeof(*v))) == NULL) {
		sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		return NULL;
	}
	json_array_foreach(arr, i, e) {
		if (!json_is_string(e) ||
		    strlen(json_string_value(e)) != json_string_length(e)) {
			free(v);
			sbx_err_set(err, SBX_E_WRONG_TYPE, "Member \"%s\" must "
			    "hold strings without NUL.", name);
			return NULL;
		}
		v[i] = json_string_value(e);
	}
	return v;
}

static int
opt_nonneg(json_t *body, const char *name, int64_t *out,
    struct sbx_err *err)
{
	json_t *v = json_object_get(body, name);

	*out = 0;
	if (v == NULL)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		sbx_err_set(err, SBX_E_WRONG_TYPE, "Member \"%s\" must be an "
		    "integer of at least 0.", name);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

int
api_exec_parse(struct areq *a, struct sbx_exec_req *er, const char ***argvp,
    const char ***envp, struct sbx_err *err)
{
	static const char *const allowed[] = { "argv", "cwd", "env", "stdin",
	    "timeout_ms", "output_cap", NULL };
	const char **argv = NULL, **env = NULL;
	const char *k, *sin;
	json_t *v;
	size_t i, slen, blen;

	memset(er, 0, sizeof(*er));
	*argvp = *envp = NULL;
	json_object_foreach(a->body, k, v) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(allowed[i], k) == 0)
				break;
		if (allowed[i] == NULL) {
			sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "Member \"%.64s\" "
			    "is not accepted here.", k);
			goto fail;
		}
	}
	if ((v = json_object_get(a->body, "argv")) == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"argv\" is "
		    "required.");
		goto fail;
	}
	if ((argv = string_vector(v, "argv", EXEC_ARGV_MAX, 1, err)) == NULL)
		goto fail;
	if (argv[0][0] == '\0') {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "argv[0] must not be "
		    "empty.");
		goto fail;
	}
	er->argv = argv;
	if ((v = json_object_get(a->body, "cwd")) != NULL) {
		if (!json_is_string(v)) {
			sbx_err_set(err, SBX_E_WRONG_TYPE, "Member \"cwd\" must "
			    "be a string.");
			goto fail;
		}
		if (sbx_path_check(json_string_value(v), json_string_length(v),
		    err) == -1)
			goto fail;
		er->cwd = json_string_value(v);
	}
	if ((v = json_object_get(a->body, "env")) != NULL) {
		if ((env = string_vector(v, "env", EXEC_ENV_MAX, 0, err)) == NULL)
			goto fail;
		for (i = 0; env[i] != NULL; i++)
			if (strchr(env[i], '=') == NULL || env[i][0] == '=') {
				sbx_err_set(err, SBX_E_BAD_REQUEST, "Each env "
				    "entry must be NAME=value.");
				goto fail;
			}
		er->env = env;
	}
	if ((v = json_object_get(a->body, "stdin")) != NULL) {
		if (!json_is_string(v)) {
			sbx_err_set(err, SBX_E_WRONG_TYPE, "Member \"stdin\" "
			    "must be a base64 string.");
			goto fail;
		}
		sin = json_string_value(v);
		slen = json_string_length(v);
		if ((a->stdin_data = malloc(slen / 4 * 3 + 3)) == NULL) {
			sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
			goto fail;
		}
		if (sodium_base642bin(a->stdin_data, slen / 4 * 3 + 3, sin,
		    slen, NULL, &blen, NULL,
		    sodium_base64_VARIANT_ORIGINAL) != 0) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"stdin\" "
			    "must be standard base64 with padding.");
			goto fail;
		}
		a->stdin_len = blen;
		er->stdin_data = a->stdin_data;
		er->stdin_len = blen;
	}
	if (opt_nonneg(a->body, "timeout_ms", &er->timeout_ms, err) == -1 ||
	    opt_nonneg(a->body, "output_cap", &er->output_cap, err) == -1)
		goto fail;
	/* Concurrent execs of this principal (streams and resource execs). */
	if (a->lim != NULL && a->lim->execs >= (unsigned)a->s->cfg->max_execs) {
		api_metrics_rejected(&a->s->metrics, 1);
		sbx_err_set(err, SBX_E_TOO_MANY, "You already run %lld execs; "
		    "wait for one to end.", a->s->cfg->max_execs);
		goto fail;
	}
	*argvp = argv;
	*envp = env;
	return 0;
fail:
	free(argv);
	free(env);
	return -1;
}

void
api_h_exec(struct areq *a)
{
	struct sbx_exec_req er;
	struct sbx_sink sink;
	struct sbx_err err;
	const char **argv = NULL, **env = NULL;

	sbx_err_clear(&err);
	if (api_exec_parse(a, &er, &argv, &env, &err) == -1) {
		areq_fail(a, &err);
		goto done;
	}
	if (a->lim != NULL) {
		a->lim->execs++;
		a->exec_counted = 1;
	}
	a->sse = 1;
	a->on_shutdown = exec_shutdown;
	memset(&sink, 0, sizeof(sink));
	sink.start = exec_start;
	sink.output = exec_output;
	sink.exit = exec_exit;
	sink.error = exec_error;
	sink.arg = a;
	a->op = a->s->driver->ops->exec(a->s->driver, a->npc.sandbox_id, &er,
	    &sink, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
done:
	free(argv);
	free(env);
}

/* ------------------------------------------------------------------ */
/* File read -> bytes                                                  */

static void
read_start(void *arg, const char *exec_id)
{
	struct areq *a = arg;

	(void)exec_id;
	if (areq_stream_begin(a, SBX_CT_OCTET) == -1) {
		sbx_op_cancel(a->op);
		a->op = NULL;
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
	}
}

static void
read_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct areq *a = arg;

	(void)stream;
	/* A driver may skip start for reads (the engine driver does). */
	if (!a->streaming && a->req != NULL &&
	    areq_stream_begin(a, SBX_CT_OCTET) == -1) {
		sbx_op_cancel(a->op);
		a->op = NULL;
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	if (a->req == NULL)
		return;
	api_metrics_stream_bytes(&a->s->metrics, 0, len);
	evbuffer_add(a->chunk, buf, len);
	areq_stream_flush(a);
}

static void
read_exit(void *arg, const struct sbx_exit *ex)
{
	struct areq *a = arg;

	(void)ex;
	a->op = NULL;
	if (!a->streaming && areq_stream_begin(a, SBX_CT_OCTET) == -1) {
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	areq_stream_end(a, "ok");
}

static void
read_error(void *arg, const struct sbx_err *err)
{
	struct areq *a = arg;

	a->op = NULL;
	if (!a->streaming) {
		areq_fail_broker(a, err);
		return;
	}
	api_metrics_broker_error(&a->s->metrics, err->code);
	log_warn("file read failed mid-stream", "npc", a->npc.name, "code",
	    err->code, NULL);
	areq_stream_abort(a, err->code);
}

void
api_h_read(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct sbx_sink sink;
	struct sbx_err err;

	sbx_err_clear(&err);
	if (sbx_query_path(evhttp_uri_get_query(uri), SBX_QUERY_PATH, &a->path,
	    NULL, &err) == -1 || api_fileop_admit(a, &err) == -1) {
		areq_fail(a, &err);
		return;
	}
	memset(&sink, 0, sizeof(sink));
	sink.start = read_start;
	sink.output = read_output;
	sink.exit = read_exit;
	sink.error = read_error;
	sink.arg = a;
	a->op = a->s->driver->ops->read(a->s->driver, a->npc.sandbox_id,
	    a->path, &sink, &err);
	if (a->op == NULL)
		areq_fail_broker(a, &err);
}
