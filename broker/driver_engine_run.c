/* driver_engine_run.c - the engine driver's one sbx-helper invocation: a runtime exec of /.sbx/sbx-helper, its stream, exit and kill (adr/0002). */
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

#include "driver_engine_int.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_usage.h"

/* A kill the runtime could not take (unreachable: a restarting daemon) is
 * tried again once a second this many times, so an exec cut off by the
 * runtime's crash does not run on until its timeout (test_faults.py). */
#define KILL_RETRIES 60

static void exec_after_kill(struct eop *op);

/* ---------- helper execs: exec, read, write, list, kill ---------- */

json_t *
eng_helper_cmd(const char *mode)
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

/* Frees what a helper op holds (its kind's part included). */
static void
exec_fini(struct eop *op)
{
	struct eop_exec *x = xop(op);

	eng_agent_stream_end(op);
	if (x->kill != NULL)
		xop(x->kill)->parent = NULL;  /* the kill runs on alone */
	if (x->parent != NULL)
		xop(x->parent)->kill = NULL;
	if (x->timer != NULL)
		event_free(x->timer);
	if (x->ftimer != NULL)
		event_free(x->ftimer);
	if (x->stdin_buf != NULL)
		evbuffer_free(x->stdin_buf);
	if (x->out != NULL)
		evbuffer_free(x->out);
	if (x->errtail != NULL)
		evbuffer_free(x->errtail);
	json_decref(x->cmd);
	json_decref(x->env);
	if (op->kind == OP_LIST)
		free(lso(op)->ents);
	if (op->kind == OP_KILL && kio(op)->retry != NULL)
		event_free(kio(op)->retry);
}

static void
kill_exited(struct eop *k, int code)
{
	struct sbx_err e;

	if (code != 0) {
		eng_helper_error(k, code, &e);
		eng_kill_ended(k, &e);
	} else {
		eng_kill_ended(k, NULL);
	}
}

/* A kill op of sandbox id for the helper exec exec_id in container cid. */
static struct eop *
kill_op_new(struct engine *e, const char *id, const char *cid,
    const char *exec_id, struct sbx_err *err)
{
	struct eop *k;

	if ((k = eng_op_new(e, OP_KILL, id, sizeof(struct eop_kill),
	    err)) == NULL)
		return NULL;
	k->fini = exec_fini;
	snprintf(k->cid, sizeof(k->cid), "%s", cid);
	xop(k)->cmd = eng_helper_cmd("kill");
	json_array_append_new(xop(k)->cmd, json_string(exec_id));
	xop(k)->timeout_ms = KILL_TIMEOUT_MS;
	xop(k)->cap = ERRTAIL_MAX;
	xop(k)->exited = kill_exited;
	return k;
}

int
eng_start_kill(struct engine *e, const char *id, const char *cid,
    const char *exec_id, struct eop *parent)
{
	struct eop *k;
	struct sbx_err err;

	if ((k = kill_op_new(e, id, cid, exec_id, &err)) == NULL) {
		if (parent != NULL)
			xop(parent)->kerr = err;
		return -1;
	}
	xop(k)->parent = parent;
	if (parent != NULL) {
		xop(parent)->kill = k;
		xop(parent)->killing = 1;
	}
	eng_helper_run(k);
	return 0;
}

/* Stops talking to the runtime's stream and kills the exec's processes;
 * op continues in eng_kill_ended() -> exec_after_kill(). */
static void
kill_exec(struct eop *op)
{
	struct eop_exec *x = xop(op);
	sbx_http_req_cancel(op->http);
	op->http = NULL;
	x->streaming = 0;
	if (x->timer != NULL)
		event_del(x->timer);
	if (eng_start_kill(op->e, op->id, op->cid, x->exec_id, op) < 0)
		exec_after_kill(op);
}

/* The timeout's kill has ended: report the timeout. */
static void
exec_after_kill(struct eop *op)
{
	struct sbx_err e;

	sbx_err_set(&e, SBX_E_TIMEOUT, "exec ran longer than its timeout "
	    "of %" PRId64 " ms; its processes were killed", xop(op)->timeout_ms);
	eng_finish_err(op, &e);
}

static void
kill_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	eng_helper_run(arg);
}

/* Queues a fresh kill op like k (no parent: whoever waited has its answer)
 * for a second from now. Out of memory: the helper's backstop remains. */
static void
kill_later(struct eop *k)
{
	struct timeval tv = { 1, 0 };
	struct sbx_err err;
	struct eop *n;

	if ((n = kill_op_new(k->e, k->id, k->cid, "", &err)) == NULL)
		return;
	json_decref(xop(n)->cmd);
	xop(n)->cmd = json_deep_copy(xop(k)->cmd);
	kio(n)->retries = kio(k)->retries + 1;
	kio(n)->retry = evtimer_new(k->e->base.base, kill_retry_cb, n);
	if (xop(n)->cmd == NULL || kio(n)->retry == NULL ||
	    event_add(kio(n)->retry, &tv) < 0)
		eng_op_release(n);
}

void
eng_kill_ended(struct eop *k, const struct sbx_err *err)
{
	struct eop *p = xop(k)->parent;

	if (err != NULL && strcmp(err->code, SBX_E_RUNTIME_UNAVAILABLE) == 0 &&
	    kio(k)->retries < KILL_RETRIES)
		kill_later(k);

	if (p != NULL) {
		xop(k)->parent = NULL;
		xop(p)->kill = NULL;
		xop(p)->killing = 0;
		if (err != NULL)
			xop(p)->kerr = *err;
	}
	eng_op_release(k);
	if (p != NULL)
		exec_after_kill(p);
}

int
eng_helper_failed(struct eop *op, int code)
{
	struct sbx_err e;

	if (code == 0)
		return 0;
	eng_helper_error(op, code, &e);
	eng_finish_err(op, &e);
	return 1;
}

void
eng_exec_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct eop *op = arg;

	(void)fd;
	(void)what;
	if (op->kind == OP_KILL) {
		struct sbx_err e;

		sbx_err_set(&e, SBX_E_TIMEOUT, "kill exec did not finish");
		eng_kill_ended(op, &e);
		return;
	}
	if (xop(op)->killing)
		return;
	xop(op)->timed_out = 1;
	kill_exec(op);
}

/* The helper's error line, {"sbx_helper":1,"error":{"code":..,"message":..}},
 * the last line of stderr. Returns 1 with code and msg filled, else 0. */
int
eng_helper_line(struct eop *op, char *code, size_t csz, char *msg, size_t msz)
{
	struct eop_exec *x = xop(op);
	const char *nl, *start, *text;
	json_t *line, *err;
	size_t n;
	int ok = 0;

	n = x->errtail != NULL ? evbuffer_get_length(x->errtail) : 0;
	if (n == 0)
		return 0;
	text = (const char *)evbuffer_pullup(x->errtail, -1);
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
		snprintf(code, csz, "%s", eng_jstr(err, "code"));
		snprintf(msg, msz, "%s", eng_jstr(err, "message"));
		ok = 1;
	}
	json_decref(line);
	return ok;
}

/* The error of a helper mode that exited with status code: the code comes
 * from the exit status (sbx_helper_proto.h), the sentence from the helper's
 * line when that line agrees. */
void
eng_helper_error(struct eop *op, int code, struct sbx_err *e)
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
	if (eng_helper_line(op, lcode, sizeof(lcode), msg, sizeof(msg)) &&
	    strcmp(lcode, ecode) == 0 && msg[0] != '\0')
		sbx_err_set(e, ecode, "%s", msg);
	else if (say != NULL)
		sbx_err_set(e, ecode, "%s", say);
	else
		sbx_err_set(e, ecode, "sbx-helper failed with exit status %d", code);
}


void
eng_helper_run(struct eop *op)
{
	struct eop_exec *x = xop(op);

	if (x->errtail == NULL)
		x->errtail = evbuffer_new();
	if (x->out == NULL)
		x->out = evbuffer_new();
	if (op->resp == NULL)
		op->resp = evbuffer_new();
	if (x->exec_id[0] == '\0')
		new_exec_id(x->exec_id, sizeof(x->exec_id));
	/* The usage walk answers the container's status too, running or not
	 * (adr/0017), so it keeps its runtime exec after an inspect. */
	if (op->e->agent_on && op->kind != OP_USAGE)
		(void)eng_agent_run(op);   /* adr/0025 */
	else
		eng_rexec_run(op);         /* agent: false */
}

/* A helper exec op for sandbox id with mode and its arguments. */
struct eop *
eng_helper_op(struct engine *e, enum op_kind kind, const char *id,
    size_t size, struct sbx_err *err)
{
	struct eop *op;

	if ((op = eng_op_new(e, kind, id, size, err)) == NULL)
		return NULL;
	op->fini = exec_fini;
	xop(op)->errtail = evbuffer_new();
	xop(op)->out = evbuffer_new();
	op->resp = evbuffer_new();
	if (xop(op)->errtail == NULL || xop(op)->out == NULL || op->resp == NULL) {
		eng_op_free(op);
		sbx_err_set(err, SBX_E_INTERNAL, "out of memory");
		return NULL;
	}
	new_exec_id(xop(op)->exec_id, sizeof(xop(op)->exec_id));
	return op;
}
