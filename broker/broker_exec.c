/* broker_exec.c - POST /v1/sandboxes/{id}/exec: the body checked, the exec started, its NDJSON stream (SPEC §5, proto/broker-api.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>
#include <sodium.h>

#include "broker_int.h"
#include "broker_metrics.h"
#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"

#define MAX_ARGV 4096
#define MAX_ENV 1024

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

static void
exec_exit(void *arg, const struct sbx_exit *ex)
{
	struct breq *b = arg;

	b->op = NULL;
	if (!b->h.streaming) {
		/* An exit without start breaks the driver contract. */
		breq_fail_code(b, SBX_E_INTERNAL, "The driver ended the exec "
		    "before it started.");
		return;
	}
	exec_output_end(b);
	sbx_ndjson_exit(b->h.chunk, ex->code, ex->signal, ex->duration_ms,
	    ex->truncated);
	breq_stream_end(b, "ok");
}

static void
exec_error(void *arg, const struct sbx_err *err)
{
	struct breq *b = arg;

	b->op = NULL;
	if (!b->h.streaming) {
		breq_fail(b, err);
		return;
	}
	if (broker_is_runtime_code(err->code))
		broker_metrics_runtime_error(b->s->metrics, err->code);
	exec_output_end(b);
	sbx_ndjson_error(b->h.chunk, err->code, err->message);
	breq_stream_end(b, err->code);
}

/* An environment name: [A-Za-z_][A-Za-z0-9_]*, len bytes. */
static int
env_name_ok(const char *name, size_t len)
{
	size_t i;

	if (len == 0 || (name[0] >= '0' && name[0] <= '9'))
		return 0;
	for (i = 0; i < len; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') ||
		    (name[i] >= 'A' && name[i] <= 'Z') ||
		    (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
			return 0;
	return 1;
}

/* Parses "env": {"K":"V"} or ["K=V"] into b->env. */
static int
parse_env(struct breq *b, json_t *v, struct sbx_err *err)
{
	const char *key, *val;
	json_t *e;
	size_t i, n;

	if (!json_is_object(v) && !json_is_array(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"env\" must be "
		    "an object of strings or an array of \"K=V\" strings.");
	n = json_is_object(v) ? json_object_size(v) : json_array_size(v);
	if (n > MAX_ENV)
		return sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "Field \"env\" has "
		    "more than %d entries.", MAX_ENV);
	if ((b->env = calloc(n + 1, sizeof(*b->env))) == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	if (json_is_object(v)) {
		json_object_foreach(v, key, e) {
			if (broker_plain_string(e, "env", &val, err) == -1)
				return -1;
			if (!env_name_ok(key, strlen(key)))
				return sbx_err_set(err, SBX_E_BAD_REQUEST, "Env "
				    "names are [A-Za-z_][A-Za-z0-9_]*.");
			if (asprintf(&b->env[b->nenv], "%s=%s", key, val) == -1) {
				b->env[b->nenv] = NULL;
				return sbx_err_set(err, SBX_E_INTERNAL,
				    "Out of memory.");
			}
			b->nenv++;
		}
		return 0;
	}
	json_array_foreach(v, i, e) {
		if (broker_plain_string(e, "env", &val, err) == -1)
			return -1;
		if (strchr(val, '=') == NULL ||
		    !env_name_ok(val, (size_t)(strchr(val, '=') - val)))
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "Each env entry "
			    "must be \"NAME=value\", NAME [A-Za-z_][A-Za-z0-9_]*.");
		if ((b->env[b->nenv] = strdup(val)) == NULL)
			return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		b->nenv++;
	}
	return 0;
}

/* "argv": 1 to MAX_ARGV strings, the first not empty. */
static int
parse_argv(struct breq *b, json_t *v, struct sbx_err *err)
{
	json_t *e;
	size_t i, n;

	if (v == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    "Field \"argv\" is required.");
	if (!json_is_array(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"argv\" must be "
		    "an array of strings.");
	if ((n = json_array_size(v)) == 0 || n > MAX_ARGV)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"argv\" must "
		    "hold 1 to %d strings.", MAX_ARGV);
	if ((b->argv = calloc(n + 1, sizeof(*b->argv))) == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	json_array_foreach(v, i, e)
		if (broker_plain_string(e, "argv", &b->argv[i], err) == -1)
			return -1;
	if (b->argv[0][0] == '\0')
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    "argv[0] must not be empty.");
	b->xreq.argv = b->argv;
	return 0;
}

/* "stdin": base64 into b->stdin_buf. */
static int
parse_stdin(struct breq *b, json_t *v, struct sbx_err *err)
{
	size_t blen;

	if (!json_is_string(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"stdin\" must "
		    "be a base64 string.");
	blen = json_string_length(v);
	if ((b->stdin_buf = malloc(blen / 4 * 3 + 3)) == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	if (sodium_base642bin(b->stdin_buf, blen / 4 * 3 + 3,
	    json_string_value(v), blen, NULL, &b->xreq.stdin_len, NULL,
	    sodium_base64_VARIANT_ORIGINAL) != 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"stdin\" is "
		    "not valid base64.");
	b->xreq.stdin_data = b->stdin_buf;
	return 0;
}

/* The exec body (proto/broker-api.md) into b->xreq, defaults applied. */
static int
exec_parse(struct breq *b, struct sbx_err *err)
{
	static const char *const allowed[] = { "argv", "cwd", "env", "stdin",
	    "timeout_ms", "output_cap", NULL };
	const struct broker_config *cfg = b->s->cfg;
	const char *str;
	json_t *v;

	if (broker_body_object(b, allowed, 0, &b->body, err) == -1 ||
	    parse_argv(b, json_object_get(b->body, "argv"), err) == -1)
		return -1;
	if ((v = json_object_get(b->body, "cwd")) != NULL) {
		if (broker_plain_string(v, "cwd", &str, err) == -1 ||
		    sbx_path_check(str, strlen(str), err) == -1)
			return -1;
		b->xreq.cwd = str;
	}
	if ((v = json_object_get(b->body, "env")) != NULL) {
		if (parse_env(b, v, err) == -1)
			return -1;
		b->xreq.env = (const char *const *)b->env;
	}
	if ((v = json_object_get(b->body, "stdin")) != NULL &&
	    parse_stdin(b, v, err) == -1)
		return -1;
	if (broker_opt_int(b->body, "timeout_ms", &b->xreq.timeout_ms,
	    err) == -1 ||
	    broker_opt_int(b->body, "output_cap", &b->xreq.output_cap,
	    err) == -1 ||
	    broker_within(b->xreq.timeout_ms, cfg->exec_timeout_max,
	    "timeout_ms", err) == -1 ||
	    broker_within(b->xreq.output_cap, cfg->output_cap, "output_cap",
	    err) == -1)
		return -1;
	if (b->xreq.timeout_ms == 0)
		b->xreq.timeout_ms = cfg->exec_timeout;
	if (b->xreq.output_cap == 0)
		b->xreq.output_cap = cfg->output_cap;
	return 0;
}

int
h_exec(struct breq *b, struct sbx_err *err)
{
	const struct broker_config *cfg = b->s->cfg;
	struct sbx_sink sink = { exec_start, exec_output, exec_exit, exec_error,
	    b };

	if (exec_parse(b, err) == -1)
		return -1;
	if (b->sbx->execs >= (unsigned long long)cfg->max_execs_per_sandbox)
		return sbx_err_set(err, SBX_E_TOO_MANY, "Sandbox %s already runs "
		    "its maximum of %lld execs.", b->id,
		    cfg->max_execs_per_sandbox);
	if ((b->h.chunk = evbuffer_new()) == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	b->sbx->execs++;
	b->holds_exec = 1;
	b->is_exec = 1;
	b->op = b->s->driver->ops->exec(b->s->driver, b->id, &b->xreq, &sink,
	    err);
	return b->op == NULL ? -1 : 0;
}
