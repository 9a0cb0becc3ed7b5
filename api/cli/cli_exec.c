/* cli_exec.c - sbxctl exec and logs: an exec's event stream decoded and printed, resumed when the connection drops (docs/cli.md). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "cli_http.h"
#include "cli_print.h"
#include "cli_sse.h"
#include "sbx_config.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"

#include "cli_int.h"

/* ------------------------------------------------------------------ */
/* exec                                                                */

struct exec_state {
	struct sbx_ndjson_parser *nd;
	int exited, code, truncated;
	char err_code[48];
	char err_msg[256];
	int out_broken;  /* stdout or stderr closed (EPIPE) */
	struct sbx_err perr;
	char last_id[24];   /* id of the last event read: where a resume starts */
	int started;        /* a start event went into the decoder */
};

static int
on_event(void *arg, const struct sbx_event *ev, const char *line, size_t len)
{
	struct exec_state *s = arg;

	(void)line;
	(void)len;
	switch (ev->type) {
	case SBX_EVENT_STDOUT:
	case SBX_EVENT_STDERR:
		if (write_fd(ev->type == SBX_EVENT_STDOUT ? 1 : 2, ev->data,
		    ev->len) == -1) {
			s->out_broken = 1;
			return 1;
		}
		break;
	case SBX_EVENT_EXIT:
		s->exited = 1;
		s->code = ev->code;
		s->truncated = ev->truncated;
		break;
	case SBX_EVENT_QUOTA:
		/* the api's sentence (adr/0057), escaped like all server text */
		errmsg("%s", ev->err_message);
		break;
	case SBX_EVENT_ERROR:
		snprintf(s->err_code, sizeof(s->err_code), "%s", ev->err_code);
		snprintf(s->err_msg, sizeof(s->err_msg), "%s", ev->err_message);
		break;
	default:
		break;
	}
	return 0;
}

/* One SSE event: known exec events go through the NDJSON decoder, which
 * decodes data/data_b64 and checks the order; others are skipped. */
static int
on_sse(void *arg, const char *event, const char *data, size_t len,
    const char *id)
{
	static const char *const known[] = { SBX_EV_START, SBX_EV_STDOUT,
		SBX_EV_STDERR, SBX_EV_EXIT, SBX_EV_ERROR, SBX_EV_QUOTA, NULL };
	static const char start_line[] = "{\"type\":\"start\",\"exec_id\":\"\","
	    "\"ts\":0}\n";
	struct exec_state *s = arg;
	char *line;
	size_t n, i;
	int r;

	if (id != NULL && id[0] != '\0')
		snprintf(s->last_id, sizeof(s->last_id), "%s", id);
	if (strcmp(event, "reset") == 0) {
		/* The server no longer keeps some events: say so, go on. */
		json_t *j = json_loadb(data, len, 0, NULL);

		errmsg("some output is no longer kept by the server: %s",
		    json_string_value(json_object_get(j, "message")) ?
		    json_string_value(json_object_get(j, "message")) : "reset");
		json_decref(j);
		return 0;
	}
	for (i = 0; known[i] != NULL; i++)
		if (strcmp(known[i], event) == 0)
			break;
	if (known[i] == NULL)
		return 0;
	if (strcmp(event, SBX_EV_START) == 0) {
		if (s->started)
			return 0;
		s->started = 1;
	} else if (!s->started) {
		/* The log's start was dropped: the decoder wants one first. */
		s->started = 1;
		if (sbx_ndjson_parser_feed(s->nd, start_line,
		    sizeof(start_line) - 1, &s->perr) == -1)
			return 1;
	}
	if ((line = cli_sse_ndjson_line(event, data, len, &n)) == NULL) {
		sbx_err_set(&s->perr, SBX_E_BAD_REQUEST, "a malformed %s event "
		    "arrived.", event);
		return 1;
	}
	r = sbx_ndjson_parser_feed(s->nd, line, n, &s->perr);
	free(line);
	return r == -1 ? 1 : 0;
}

/* Reads the exec's stdin (-i) into memory, base64-encoded. */
static char *
stdin_b64(void)
{
	unsigned char *buf = NULL, *np;
	size_t used = 0, cap = 0, b64len;
	ssize_t r;
	char *out = NULL;

	for (;;) {
		if (cap - used < 65536) {
			cap += 65536 + cap;
			if (cap > STDIN_MAX + 65536 ||
			    (np = realloc(buf, cap)) == NULL)
				goto done;
			buf = np;
		}
		r = read(0, buf + used, cap - used);
		if (r < 0 && errno == EINTR && !cli_http_interrupted())
			continue;
		if (r < 0)
			goto done;
		if (r == 0)
			break;
		used += (size_t)r;
		if (used > STDIN_MAX)
			goto done;
	}
	b64len = sodium_base64_ENCODED_LEN(used, sodium_base64_VARIANT_ORIGINAL);
	if ((out = malloc(b64len)) != NULL)
		sodium_bin2base64(out, b64len, buf != NULL ? buf :
		    (const unsigned char *)"", used,
		    sodium_base64_VARIANT_ORIGINAL);
done:
	free(buf);
	return out;
}

static json_t *
exec_body(struct ctx *x, int with_stdin, int *rc)
{
	json_t *body = NULL, *argv = NULL, *env = NULL;
	char *end, *in = NULL;
	double secs;
	int i;

	*rc = CX_ERR;
	if ((body = json_object()) == NULL || (argv = json_array()) == NULL)
		goto oom;
	for (i = 0; x->o.rest[i] != NULL; i++)
		if (json_array_append_new(argv, json_string(x->o.rest[i])) == -1) {
			errmsg("argument %d is not valid UTF-8.", i + 1);
			*rc = CX_USAGE;
			goto fail;
		}
	json_object_set_new(body, "argv", argv);
	argv = NULL;
	if (x->o.cwd != NULL)
		json_object_set_new(body, "cwd", json_string(x->o.cwd));
	if (x->o.nenv > 0) {
		if ((env = json_array()) == NULL)
			goto oom;
		for (i = 0; i < x->o.nenv; i++) {
			if (strchr(x->o.env[i], '=') == NULL ||
			    x->o.env[i][0] == '=') {
				*rc = usage_err(NULL, "-e wants NAME=VALUE, not "
				    "\"%.40s\".", x->o.env[i]);
				goto fail;
			}
			json_array_append_new(env, json_string(x->o.env[i]));
		}
		json_object_set_new(body, "env", env);
		env = NULL;
	}
	if (x->o.timeout != NULL) {
		errno = 0;
		secs = strtod(x->o.timeout, &end);
		if (end == x->o.timeout || *end != '\0' || errno != 0 ||
		    secs <= 0 || secs > 86400 * 7) {
			*rc = usage_err(NULL, "-t wants seconds, e.g. -t 30 or "
			    "-t 0.5.");
			goto fail;
		}
		json_object_set_new(body, "timeout_ms",
		    json_integer((json_int_t)(secs * 1000 + 0.5)));
	}
	if (x->o.stdin_flag && with_stdin) {
		if ((in = stdin_b64()) == NULL) {
			errmsg("cannot read standard input (at most %zu MiB for "
			    "-i).", STDIN_MAX >> 20);
			goto fail;
		}
		json_object_set_new(body, "stdin", json_string(in));
		free(in);
	}
	return body;
oom:
	errmsg(SBX_MSG_OOM);
fail:
	json_decref(body);
	json_decref(argv);
	json_decref(env);
	return NULL;
}

static int
retryable(const char *code)
{
	return strcmp(code, CLI_E_IO) == 0 || strcmp(code, CLI_E_UNAVAILABLE) == 0;
}

/* Waits before reconnect number tries (0-based): 200 ms doubling, at most
 * 2 s. Returns -1 when a signal arrived meanwhile. */
static int
backoff(int tries)
{
	long ms = 200L << (tries < 4 ? tries : 4);
	struct timespec ts;

	if (ms > 2000)
		ms = 2000;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000L;
	nanosleep(&ts, NULL);
	return cli_http_interrupted() ? -1 : 0;
}

/*
 * rc: the exit code follow_events gives up with, its reason already
 * printed. When the server could not be reached (5) while following, the
 * exec goes on without us: say how to pick it up again (docs/cli.md).
 */
static int
gave_up(const char *npc, const char *id, int follow, int rc)
{
	if (rc == CX_UNAVAIL && follow)
		errmsg("the command may still be running (resume with: sbxctl "
		    "logs -f %s %s).", npc, id);
	return rc;
}

/*
 * Reads exec id's events (GET .../execs/ID/events) into s, from where s
 * stopped (s->last_id, sent as ?last_event_id=), reconnecting when the
 * connection drops before the terminal event (docs/cli.md). follow 0: up
 * to the end of what the server has logged. Returns CX_OK once the stream
 * is complete, CX_INTR on a signal, 141 when our output was closed, or
 * another exit code after printing why.
 */
static int
follow_events(struct ctx *x, const char *npc, const char *id, int follow,
    struct exec_state *s)
{
	char target[8192], suffix[256], before[24], buf[65536];
	struct cli_resp r;
	struct cli_conn *c;
	struct cli_sse *sse;
	struct sbx_err err;
	ssize_t n;
	int tries = 0, rc;

	cli_http_set_idle_timeout(60000);   /* heartbeats come every 15 s */
	for (;;) {
		snprintf(suffix, sizeof(suffix), "/sandbox/execs/%s/events?"
		    "follow=%d%s%s", id, follow, s->last_id[0] != '\0' ?
		    "&last_event_id=" : "", s->last_id);
		if (npc_target(target, sizeof(target), npc, suffix, NULL) == -1) {
			errmsg("the NPC name or exec id is too long.");
			return CX_USAGE;
		}
		snprintf(before, sizeof(before), "%s", s->last_id);
		sbx_err_clear(&err);
		c = cli_http_request(&x->url, "GET", target, x->key, NULL, &r,
		    &err);
		if (c == NULL) {
			if (strcmp(err.code, CLI_E_INTERRUPTED) == 0)
				return CX_INTR;
			if (retryable(err.code) && tries < RESUME_TRIES) {
				if (backoff(tries++) == -1)
					return CX_INTR;
				continue;
			}
			return gave_up(npc, id, follow, fail_err(&err));
		}
		if (r.status == 204) {      /* nothing after the last event */
			cli_http_close(c);
			return CX_OK;
		}
		if (r.status != 200) {
			if ((r.status == 502 || r.status == 503 ||
			    r.status == 504) && tries < RESUME_TRIES) {
				cli_http_close(c);
				if (backoff(tries++) == -1)
					return CX_INTR;
				continue;
			}
			rc = fail_resp(c, &r);
			cli_http_close(c);
			return gave_up(npc, id, follow, rc);
		}
		if (strncmp(r.content_type, SBX_CT_SSE, strlen(SBX_CT_SSE)) != 0) {
			errmsg("the server answered with %s, not an event "
			    "stream.", r.content_type[0] != '\0' ?
			    r.content_type : "no type");
			cli_http_close(c);
			return CX_ERR;
		}
		if ((sse = cli_sse_new(0, on_sse, s)) == NULL) {
			cli_http_close(c);
			errmsg(SBX_MSG_OOM);
			return CX_ERR;
		}
		rc = -1;
		for (;;) {
			n = cli_http_read(c, buf, sizeof(buf), &err);
			if (n <= 0)
				break;
			if (cli_sse_feed(sse, buf, (size_t)n, &err) == -1) {
				if (s->out_broken)
					rc = 141;   /* like a shell's SIGPIPE death */
				else {
					errmsg("bad event stream from the server: "
					    "%s", sbx_err_is_set(&s->perr) ?
					    s->perr.message : err.message);
					rc = CX_ERR;
				}
				break;
			}
		}
		cli_sse_free(sse);
		cli_http_close(c);
		if (rc != -1)
			return rc;
		if (n < 0 && strcmp(err.code, CLI_E_INTERRUPTED) == 0)
			return CX_INTR;
		if (s->exited || s->err_code[0] != '\0' || (!follow && n == 0))
			return CX_OK;
		/* Cut before the end: resume after the last event read. */
		if (strcmp(before, s->last_id) != 0)
			tries = 0;
		if (tries >= RESUME_TRIES) {
			errmsg("the event stream broke %d times without progress; "
			    "giving up (resume with: sbxctl logs -f %s %s).",
			    RESUME_TRIES, npc, id);
			return CX_UNAVAIL;
		}
		if (backoff(tries++) == -1)
			return CX_INTR;
	}
}

/* The exit code for a complete exec stream (s), after printing why it
 * did not simply exit. */
static int
exec_outcome(const struct exec_state *s)
{
	if (s->err_code[0] != '\0') {
		errmsg("%s", s->err_msg[0] != '\0' ? s->err_msg : s->err_code);
		if (strcmp(s->err_code, SBX_E_TIMEOUT) == 0)
			return CX_TIMEOUT;
		/* A working directory that does not exist: 4, as cat's. */
		return strcmp(s->err_code, SBX_E_NOT_FOUND) == 0 ? CX_NOTFOUND :
		    CX_ERR;
	}
	if (!s->exited) {
		errmsg("the event stream ended before the command's exit status "
		    "arrived.");
		return CX_ERR;
	}
	if (s->truncated)
		errmsg("the output reached the server's cap; the command was "
		    "ended and its output truncated.");
	return s->code;
}

int
c_exec(struct ctx *x)
{
	struct exec_state s;
	char target[8192], suffix[256];
	const char *id;
	json_t *body = NULL, *ans = NULL, *gone = NULL;
	int rc = CX_ERR;

	memset(&s, 0, sizeof(s));
	if (x->o.rest == NULL || x->o.rest[0] == NULL)
		return usage_err(x->cmd, "exec needs a command after the NPC "
		    "(sbxctl exec NPC -- CMD ...).");
	if (npc_target(target, sizeof(target), x->o.pos[0], "/sandbox/execs",
	    NULL) == -1)
		return usage_err(NULL, "the NPC name is too long.");
	/* -i without -d: stdin streamed through a pty:false terminal */
	if (x->o.stdin_flag && !x->o.detach) {
		if ((body = exec_body(x, 0, &rc)) == NULL)
			return rc;
		if ((rc = cli_exec_stream(x, body)) != CX_NO_TERMINALS)
			return rc;
		/* an api without terminals: stdin read whole, sent along */
	}
	if ((body = exec_body(x, 1, &rc)) == NULL)
		return rc;
	/* A resource exec (docs/api.md): it outlives this connection, so a
	 * dropped connection is resumed, not fatal. */
	if ((rc = call_json(x, "POST", target, body, &ans)) != CX_OK)
		goto done;
	rc = CX_ERR;
	id = json_string_value(json_object_get(ans, "exec_id"));
	if (id == NULL || strlen(id) > 64 || strspn(id,
	    "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(id)) {
		errmsg("the server's answer has no exec id.");
		goto done;
	}
	if (x->o.detach) {
		printf("%s\n", id);
		rc = CX_OK;
		goto done;
	}
	if ((s.nd = sbx_ndjson_parser_new(0, on_event, &s)) == NULL) {
		errmsg(SBX_MSG_OOM);
		goto done;
	}
	rc = follow_events(x, x->o.pos[0], id, 1, &s);
	if (rc == CX_INTR || rc == 141) {
		/* We are going away: so does the command (DELETE kills its
		 * process tree). */
		cli_http_clear_interrupt();
		snprintf(suffix, sizeof(suffix), "/sandbox/execs/%s", id);
		(void)npc_call(x, "DELETE", x->o.pos[0], suffix, NULL, &gone);
		if (rc == CX_INTR)
			errmsg("interrupted; the command was cancelled.");
		goto done;
	}
	if (rc == CX_OK)
		rc = exec_outcome(&s);
done:
	sbx_ndjson_parser_free(s.nd);
	json_decref(body);
	json_decref(ans);
	json_decref(gone);
	return rc;
}

int
c_logs(struct ctx *x)
{
	struct exec_state s;
	const char *id = x->o.pos[1];
	int rc;

	memset(&s, 0, sizeof(s));
	if (strlen(id) == 0 || strlen(id) > 64 || strspn(id,
	    "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(id))
		return usage_err(x->cmd, "EXEC_ID is what 'sbxctl exec -d' "
		    "printed (letters and digits).");
	if ((s.nd = sbx_ndjson_parser_new(0, on_event, &s)) == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	rc = follow_events(x, x->o.pos[0], id, x->o.follow, &s);
	if (rc == CX_INTR)
		errmsg("interrupted.");
	else if (rc == CX_OK && (s.exited || s.err_code[0] != '\0'))
		rc = exec_outcome(&s);   /* ended: its exit code, like exec */
	sbx_ndjson_parser_free(s.nd);
	return rc;
}
