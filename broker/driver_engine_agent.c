/*
 * driver_engine_agent.c - the engine driver's transport through each
 * sandbox's agent channel (adr/0025): the agent records (start, channel,
 * warm ensure) and one invocation as a stream. Its row is
 * eng_agent_transport; it calls down into the invocation's core
 * (driver_engine_run.c), the runtime call layer and the op lifecycle, and
 * reaches the kind only through its row.
 */
#include <unistd.h>

#include "driver_engine_direct.h"
#include "agent.h"

/*
 * One agent per running sandbox, started by one runtime exec of
 * `sbx-helper agent` whose hijacked stream is the channel (adr/0025). An
 * invocation (eng_helper_run with the agent on) opens a stream on the
 * sandbox's channel, starting the agent first when there is none or it
 * died; the stream's output, stdin and exit feed the same functions the
 * runtime exec fed (eng_run_output, the kind's exited and recorded), so the
 * kinds do not know which transport ran them.
 */

enum ag_state { AG_STARTING, AG_READY, AG_DEAD };

/* The channel's end when the agent's exec ended: it was killed (by the
 * sandbox user, a stop, a crash), and every stream's processes with it. */
#define AGENT_ENDED "the sandbox agent ended (killed, or its sandbox stopped); " \
	"the next operation starts it again"


struct eng_agent {
	TAILQ_ENTRY(eng_agent) link;
	struct engine *e;
	char id[64];
	char cid[80];                 /* the container the agent runs in */
	char rexec[80];               /* its runtime exec */
	enum ag_state state;
	int ever_ready;               /* a restart is a start after this */
	int retried;                  /* this channel's agent was started twice */
	int stale;                    /* its container went (eng_agent_retire) */
	unsigned going;               /* stops and destroys in flight (eng_agent_forget) */
	struct sbx_agent_chan *ch;
	struct sbx_http_req *http;    /* the exec start stream = the channel */
	struct eop *starter;          /* the runtime calls that start it */
	struct eng_demux demux;       /* the runtime's 8-byte stream frames */
	char refusal[512];            /* the exec start's error answer, for the log */
	size_t refusal_len;
	/* The direct channel (adr/0066): the socket volume's host
	 * mountpoint when the agent listens there, the connection once made,
	 * the retry while its socket is not there yet; via_stream 1 when the
	 * runtime exec stream carries the channel (fell back, or runtime). */
	char mnt[512];
	struct bufferevent *dbev;
	struct event *dtimer;
	uint64_t dstart_ms;
	int via_stream;
	/* What the last ensure saw (warm ensure, adr/0025). */
	int st_valid;
	struct sbx_status st;
	char helper_vol[96];
};

struct eop_agent {
	struct eop op;
	struct eng_agent *ag;
};

static void agent_fini(struct eop *op);

/* The runtime calls that start an agent: internal, nobody waits on them
 * (the streams opened on the channel hear its end). */
static const struct eng_kind agent_kind = {
	.name = "agent start",
	.fail = eng_fail_quiet,
	.fini = agent_fini,
};

static struct eop_agent *
ago(struct eop *op)
{
	return (struct eop_agent *)op;
}

static struct eng_agent *
agent_find(struct engine *e, const char *id)
{
	struct eng_agent *ag;

	TAILQ_FOREACH(ag, &e->agents, link)
		if (strcmp(ag->id, id) == 0)
			return ag;
	return NULL;
}

/* The transport goes; the channel fails with err (its streams hear it). */
static void
agent_down(struct eng_agent *ag, const struct sbx_err *err)
{
	struct sbx_agent_chan *ch = ag->ch;
	struct sbx_http_req *http = ag->http;

	ag->state = AG_DEAD;
	ag->http = NULL;
	if (ag->dtimer != NULL)
		event_del(ag->dtimer);
	if (ag->starter != NULL) {
		ago(ag->starter)->ag = NULL;
		eng_op_release(ag->starter);
		ag->starter = NULL;
	}
	if (ch != NULL && sbx_agent_chan_alive(ch))
		sbx_agent_chan_fail(ch, err);
	sbx_http_req_cancel(http);
}

static void
chan_closed(void *arg, const struct sbx_err *err)
{
	struct eng_agent *ag = arg;

	if (ag->state != AG_DEAD)
		log_info("sandbox agent channel ended", "id", ag->id,
		    "reason", err->message, NULL);
	ag->state = AG_DEAD;
	if (ag->http != NULL) {
		struct sbx_http_req *http = ag->http;

		ag->http = NULL;
		sbx_http_req_cancel(http);
	}
}

static void
chan_ready(void *arg, const struct sbx_agent_hello *h)
{
	struct eng_agent *ag = arg;
	struct eop *op;

	(void)h;
	if (ag->ever_ready)
		sbx_agent_count_restart();
	ag->ever_ready = 1;
	ag->state = AG_READY;
	/* The agent runs: the execs waiting for it have started (before, a
	 * missing or stopped sandbox is still an error, not a stream). */
	TAILQ_FOREACH(op, &ag->e->ops, link)
		if ((op->kind->flags & (EK_FRAMED | EK_SESSION)) && !op->dead &&
		    xop(op)->ast != NULL &&
		    xop(op)->astart != NULL && strcmp(op->id, ag->id) == 0)
			event_active(xop(op)->astart, EV_TIMEOUT, 0);
}

/* The agent's exec stream: the runtime's 8-byte frames; stdout is the
 * channel, stderr only the agent's own words (dropped). */
static void
agent_body(void *arg, struct sbx_http_req *req, const unsigned char *buf, size_t len)
{
	struct eng_agent *ag = arg;
	const unsigned char *p;
	size_t n;
	int stream;

	if (sbx_http_req_status(req) >= 300) {
		/* The runtime's words for the log (agent_done). */
		n = sizeof(ag->refusal) - ag->refusal_len;
		n = len < n ? len : n;
		memcpy(ag->refusal + ag->refusal_len, buf, n);
		ag->refusal_len += n;
		return;
	}
	while (ag->via_stream && ag->ch != NULL && sbx_agent_chan_alive(ag->ch) &&
	    (p = eng_demux_next(&ag->demux, &buf, &len, SIZE_MAX, &n,
	    &stream)) != NULL)
		if (stream == 1 && sbx_agent_chan_input(ag->ch, p, n) < 0)
			return;   /* the channel failed (maybe freed with ag's streams) */
}

/* ---------- the direct channel (adr/0066) ---------- */

#define DIRECT_WAIT_MS 2000    /* for the agent's socket to appear */
#define DIRECT_OUT_WINDOW (1024 * 1024)   /* output credit of a bulk stream */
#define DIRECT_RETRY_MS 5

static void
bev_free_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	bufferevent_free(arg);
}

/* The connection goes once no callback can be inside it: from the loop
 * (now: only when nothing runs, at the driver's end). */
static void
direct_release(struct eng_agent *ag, int now)
{
	const struct timeval zero = { 0, 0 };
	struct bufferevent *bev = ag->dbev;

	ag->dbev = NULL;
	if (ag->dtimer != NULL)
		event_del(ag->dtimer);
	if (bev == NULL)
		return;
	if (now || event_base_once(ag->e->base.base, -1, EV_TIMEOUT, bev_free_cb, bev,
	    &zero) < 0)
		bufferevent_free(bev);
}

/* The runtime stream carries the channel after all; one line says why.
 * A PING makes the agent take its stdin and answer there (HELLO first). */
static void
direct_fallback(struct eng_agent *ag, const char *why)
{
	struct bufferevent *bev = sbx_http_req_bufferevent(ag->http);

	log_warn("sandbox agent direct channel not used; the runtime exec stream "
	    "carries it", "id", ag->id, "reason", why, NULL);
	sbx_agent_count_direct(0);
	if (bev == NULL)
		return;
	ag->via_stream = 1;
	sbx_agent_chan_set_output(ag->ch, bufferevent_get_output(bev));
	sbx_agent_chan_ping(ag->ch);
}

static void direct_retry_cb(evutil_socket_t fd, short what, void *arg);

static void
direct_try(struct eng_agent *ag)
{
	const struct timeval retry = { 0, DIRECT_RETRY_MS * 1000 };
	char why[256];
	int fd;

	if (ag->state == AG_DEAD || ag->ch == NULL || !sbx_agent_chan_alive(ag->ch))
		return;
	fd = eng_direct_connect(ag->mnt, ag->e->uid, why, sizeof(why));
	if (fd >= 0) {
		if ((ag->dbev = bufferevent_socket_new(ag->e->base.base, fd,
		    BEV_OPT_CLOSE_ON_FREE)) == NULL) {
			close(fd);
			direct_fallback(ag, "out of memory");
			return;
		}
		bufferevent_set_max_single_read(ag->dbev, 4 * SBX_AGENT_DATA_MAX);
		bufferevent_set_max_single_write(ag->dbev, 4 * SBX_AGENT_DATA_MAX);
		(void)sbx_agent_chan_attach_bev(ag->ch, ag->dbev);
		sbx_agent_count_direct(1);
		return;
	}
	if (fd == -1 && (uint64_t)sbx_mono_ms() - ag->dstart_ms < DIRECT_WAIT_MS) {
		if (ag->dtimer == NULL && (ag->dtimer = evtimer_new(ag->e->base.base,
		    direct_retry_cb, ag)) == NULL) {
			direct_fallback(ag, "out of memory");
			return;
		}
		evtimer_add(ag->dtimer, &retry);
		return;
	}
	direct_fallback(ag, why);
}

static void
direct_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	direct_try(arg);
}

/* What ag's start holds (its runtime calls, the exec stream, a direct
 * socket) goes; the channel stays, for agent_get or agent_lost. */
static void
transport_drop(struct eng_agent *ag)
{
	struct sbx_http_req *http = ag->http;

	ag->http = NULL;
	if (ag->starter != NULL) {
		ago(ag->starter)->ag = NULL;
		eng_op_release(ag->starter);
		ag->starter = NULL;
	}
	sbx_agent_chan_detach_bev(ag->ch);
	direct_release(ag, 0);
	ag->via_stream = 0;
	ag->mnt[0] = '\0';
	memset(&ag->demux, 0, sizeof(ag->demux));
	ag->refusal_len = 0;
	sbx_http_req_cancel(http);
}

static int agent_start(struct eng_agent *ag, struct sbx_err *err);

/*
 * ag's start or its exec stream failed with err. Before the HELLO, the
 * first time, when the runtime failed (runtime_error, runtime_unavailable:
 * a call cut or refused, the stream reset or closed; not its answer that
 * the sandbox is missing or stopped) and no stop or destroy of the sandbox
 * is under way (adr/0056): the agent is started once more on the same
 * channel, the streams waiting on it kept with what they queued
 * (sbx_agent_chan_restart). Podman under load can drop the attach of an
 * exec it started (adr/0025, amendment session 11). Else the channel fails.
 */
static void
agent_lost(struct eng_agent *ag, const struct sbx_err *err)
{
	struct sbx_err e;

	if (ag->state == AG_STARTING && ag->ch != NULL && ag->going == 0 &&
	    (strcmp(err->code, SBX_E_RUNTIME) == 0 ||
	    strcmp(err->code, SBX_E_RUNTIME_UNAVAILABLE) == 0)) {
		if (!ag->retried && sbx_agent_chan_restart(ag->ch) == 0) {
			ag->retried = 1;
			log_warn("sandbox agent did not start; starting it once more",
			    "id", ag->id, "reason", err->message, NULL);
			transport_drop(ag);
			if (agent_start(ag, &e) == 0)
				return;
			err = &e;
		} else if (ag->retried) {
			sbx_err_set(&e, err->code, "the sandbox agent did not start, twice: %s",
			    err->message);
			err = &e;
		}
	}
	agent_down(ag, err);
}

static void
agent_response(void *arg, struct sbx_http_req *req, int status)
{
	struct eng_agent *ag = arg;
	struct bufferevent *bev;
	struct sbx_err e;

	if (status != 101 && status != 200)
		return;
	if (!sbx_http_req_upgraded(req) || (bev = sbx_http_req_bufferevent(req)) == NULL) {
		sbx_err_set(&e, SBX_E_RUNTIME, "the runtime did not upgrade the agent's "
		    "exec connection");
		agent_lost(ag, &e);
		return;
	}
	if (ag->mnt[0] != '\0') {
		/* The agent listens in its volume: the stream is its lifeline
		 * and the fallback (adr/0066). */
		ag->dstart_ms = (uint64_t)sbx_mono_ms();
		direct_try(ag);
		return;
	}
	ag->via_stream = 1;
	sbx_agent_chan_set_output(ag->ch, bufferevent_get_output(bev));
}

static void
agent_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct eng_agent *ag = arg;
	struct sbx_err e;
	int status = sbx_http_req_status(req);

	ag->http = NULL;
	if (err != NULL)
		e = *err;
	else if (status == 404)
		sbx_err_set(&e, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX, ag->id);
	else if (status == 409)
		sbx_err_set(&e, SBX_E_NOT_RUNNING, SBX_MSG_NOT_RUNNING, ag->id);
	else if (status != 101 && status != 200) {
		json_t *j = json_loadb(ag->refusal, ag->refusal_len, 0, NULL);

		eng_runtime_err(&e, status, j, "start the sandbox agent's exec");
		json_decref(j);
	} else
		sbx_err_set(&e, SBX_E_RUNTIME, AGENT_ENDED);
	agent_lost(ag, &e);
}

static void
agent_start_exec(struct eng_agent *ag)
{
	const struct sbx_http_cbs cbs = { .response = agent_response,
	    .body = agent_body, .done = agent_done, .arg = ag };
	struct sbx_err err;

	ag->http = eng_exec_start_stream(ag->e, ag->rexec, &cbs, &err);
	if (ag->http == NULL)
		agent_lost(ag, &err);
}

/* The starter's last call: it goes, the agent's stream stays. */
static void
starter_end(struct eng_agent *ag)
{
	struct eop *op = ag->starter;

	ag->starter = NULL;
	if (op != NULL) {
		ago(op)->ag = NULL;
		eng_op_release(op);
	}
}

static void
agent_created(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eng_agent *ag = ago(op)->ag;
	struct sbx_err e;

	if (ag == NULL)
		return;
	if (eng_exec_created_id(op, status, body, err, "create the sandbox "
	    "agent's exec", ag->rexec, sizeof(ag->rexec), &e) == 0) {
		starter_end(ag);
		agent_start_exec(ag);
		return;
	}
	agent_lost(ag, &e);
}

static void
agent_inspected(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eng_agent *ag = ago(op)->ag;
	struct sbx_status st;
	struct sbx_err e;
	json_t *cmd;
	const char *mnt;
	char idle[32];
	int rc;

	if (ag == NULL)
		return;
	if (err != NULL) {
		agent_lost(ag, err);
		return;
	}
	if (status == 404 || eng_gone(status, body)) {
		sbx_err_set(&e, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX, op->id);
		agent_lost(ag, &e);
		return;
	}
	if (status != 200) {
		eng_runtime_err(&e, status, body, "inspect the container");
		agent_lost(ag, &e);
		return;
	}
	if (eng_status_from_inspect(op, body, &st, &e) < 0) {
		agent_lost(ag, &e);
		return;
	}
	if (st.state != SBX_STATE_RUNNING) {
		sbx_err_set(&e, SBX_E_NOT_RUNNING, SBX_MSG_NOT_RUNNING, op->id);
		agent_lost(ag, &e);
		return;
	}
	/* A start in the same container after one that was ready is a
	 * restart (the agent was killed or crashed); another container is a
	 * new sandbox life. */
	if (strcmp(ag->cid, op->cid) != 0)
		ag->ever_ready = 0;
	snprintf(ag->cid, sizeof(ag->cid), "%s", op->cid);
	snprintf(idle, sizeof(idle), "%" PRId64, ag->e->agent_idle_ms);
	/* The direct channel when the container mounts the socket volume
	 * (adr/0066); its mountpoint is the runtime's word, not the sandbox's. */
	mnt = ag->e->agent_direct ? eng_direct_mountpoint(ag->e, op->id, body) : NULL;
	snprintf(ag->mnt, sizeof(ag->mnt), "%s", mnt != NULL && strlen(mnt) <
	    sizeof(ag->mnt) ? mnt : "");
	cmd = ag->mnt[0] != '\0' ? json_pack("[s,s,s,s,s,s]", SBX_HELPER_PATH,
	    SBX_AGENT_MODE, "--idle-ms", idle, "--listen", SBX_AGENT_LISTEN_DIR) :
	    json_pack("[s,s,s,s]", SBX_HELPER_PATH, SBX_AGENT_MODE, "--idle-ms", idle);
	rc = cmd != NULL ? eng_exec_create(op, 1, NULL, cmd, agent_created) : -1;
	json_decref(cmd);
	if (rc < 0) {
		sbx_err_oom(&e);
		agent_down(ag, &e);
	}
}

static void
agent_fini(struct eop *op)
{
	if (ago(op)->ag != NULL)
		ago(op)->ag->starter = NULL;
}

/* Starts ag's agent on its channel: inspect, exec create, hijacked start
 * (agent_inspected on). Returns 0, or -1 with err. */
static int
agent_start(struct eng_agent *ag, struct sbx_err *err)
{
	struct eop *op;
	char path[256];

	if ((op = eng_op_new(ag->e, &agent_kind, ag->id, sizeof(struct eop_agent),
	    err)) == NULL)
		return -1;
	ago(op)->ag = ag;
	ag->starter = op;
	ag->state = AG_STARTING;
	eng_inspect_path(op, path, sizeof(path));
	eng_call(op, "GET", path, NULL, agent_inspected);
	return 0;
}

/* The sandbox's live channel, or a new one whose agent is being started
 * (streams may be opened on it at once: their frames wait for its HELLO). */
static struct eng_agent *
agent_get(struct engine *e, const char *id, struct sbx_err *err)
{
	struct sbx_agent_chan_cbs cbs = { .ready = chan_ready,
	    .closed = chan_closed };
	struct eng_agent *ag = agent_find(e, id);

	if (ag != NULL && !ag->stale && ag->state != AG_DEAD && ag->ch != NULL &&
	    sbx_agent_chan_alive(ag->ch))
		return ag;
	if (ag != NULL && ag->stale) {
		struct sbx_err gone;

		/* The channel runs in a container that was stopped or replaced
		 * and has not heard its end yet: a stream opened on it now
		 * would be reset. Its streams end as a killed exec's do. */
		ag->stale = 0;
		if (ag->ch != NULL && sbx_agent_chan_alive(ag->ch)) {
			sbx_err_set(&gone, SBX_E_RUNTIME, AGENT_ENDED);
			agent_down(ag, &gone);
		}
	}
	if (ag == NULL) {
		if ((ag = calloc(1, sizeof(*ag))) == NULL)
			goto oom;
		ag->e = e;
		snprintf(ag->id, sizeof(ag->id), "%s", id);
		TAILQ_INSERT_TAIL(&e->agents, ag, link);
	}
	transport_drop(ag);
	sbx_agent_chan_free(ag->ch);   /* its streams have all ended */
	ag->ch = NULL;
	ag->retried = 0;
	cbs.arg = ag;
	if ((ag->ch = sbx_agent_chan_new(e->base.base, &cbs)) == NULL)
		goto oom;
	if (e->agent_ping_ms > 0 && sbx_agent_chan_keepalive(ag->ch,
	    (uint64_t)e->agent_ping_ms) < 0)
		goto oom;
	return agent_start(ag, err) == 0 ? ag : NULL;
oom:
	sbx_err_oom(err);
	return NULL;
}

/* ---------- one invocation as a stream ---------- */

static void agent_pump(struct eop *op);

/* An exec's start goes before its first output or end; the caller holds
 * op (eng_op_enter). 0 when the sink ended op from inside start. */
static int
ensure_started(struct eop *op)
{
	if (op->kind->flags & (EK_FRAMED | EK_SESSION))
		eng_exec_announce(op);
	return !op->dead;
}

static void
st_output(void *arg, int fd, const unsigned char *buf, size_t len)
{
	struct eop *op = arg;
	struct eop_exec *x = xop(op);

	if (!x->streaming)
		return;
	eng_op_enter(op);
	if (ensure_started(op) && x->streaming)
		eng_run_output(op, fd, buf, len);
	eng_op_leave(op);
}

static void
st_exit(void *arg, const struct sbx_agent_exit *ex)
{
	struct eop *op = arg;
	struct eop_exec *x = xop(op);
	int code = ex->how == SBX_AGENT_EXIT_EXITED ? ex->status : 128 + ex->sig;

	x->ast = NULL;
	x->streaming = 0;
	if (x->killing)
		return;   /* the kill's end reports (exec_after_kill) */
	eng_op_enter(op);
	if (!ensure_started(op))
		;
	else if (eng_run_recorded(op))
		;
	else {
		if (x->timer != NULL)
			event_del(x->timer);
		op->kind->exited(op, code);
	}
	eng_op_leave(op);
}

/*
 * The runtime answers (the container stopped, or runs on without the
 * agent the sandbox user killed): the exec's processes were SIGKILLed with
 * the agent (a stop kills the container; an agent gone makes its modes
 * kill their groups), so it ended as a killed exec (137 KILL), as a runtime
 * exec's inspect said. No answer (the runtime died): an error, and a kill
 * for when it is back (the next agent's start kills the old one too).
 */
static void
ended_inspected(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		eng_start_kill(op->e, op->id, op->cid, xop(op)->exec_id, NULL);
		eng_finish_err(op, err);
		return;
	}
	if (status != 200 && status != 404) {
		eng_runtime_err(&e, status, body, "inspect the container");
		eng_finish_err(op, &e);
		return;
	}
	op->kind->exited(op, 128 + 9);
}

static void
st_error(void *arg, const struct sbx_err *err)
{
	struct eop *op = arg;
	struct eop_exec *x = xop(op);

	x->ast = NULL;
	x->streaming = 0;
	if (x->killing)
		return;
	if (eng_run_recorded(op))
		return;
	/* The agent's exec ended under a running exec: ask the runtime, as a
	 * runtime exec without an exit record did (ended_inspected). */
	if ((op->kind->flags & (EK_FRAMED | EK_SESSION)) && x->stream_started &&
	    strcmp(err->message, AGENT_ENDED) == 0) {
		char path[256];

		if (x->timer != NULL)
			event_del(x->timer);
		eng_inspect_path(op, path, sizeof(path));
		eng_call(op, "GET", path, NULL, ended_inspected);
		return;
	}
	/* The channel went, and the agent kills every stream's processes
	 * when it does: nothing to kill from here. */
	eng_finish_err(op, err);
}

static void
st_room(void *arg)
{
	struct eop *op = arg;
	struct eop_exec *x = xop(op);

	if (op->kind->flags & EK_SESSION) {
		/* The session's input is the caller's: tell it of the room. */
		if (x->sink.room == NULL || op->dead)
			return;
		eng_op_enter(op);
		x->sink.room(x->sink.arg);
		eng_op_leave(op);
		return;
	}
	eng_file_progress(op);
	agent_pump(op);
}

/* Moves op's stdin (stdin_buf, then a lent source) within the stream's
 * credit; closes it once all went. */
static void
agent_pump(struct eop *op)
{
	struct eop_exec *x = xop(op);
	size_t room;

	if (x->ast == NULL || !x->has_stdin || (op->kind->flags & EK_SESSION))
		return;
	if (x->stdin_buf != NULL && evbuffer_get_length(x->stdin_buf) > 0) {
		(void)sbx_agent_write_buffer(x->ast, x->stdin_buf,
		    evbuffer_get_length(x->stdin_buf));
		if (evbuffer_get_length(x->stdin_buf) > 0)
			return;
	}
	if (x->src != NULL) {
		ssize_t n;

		room = sbx_agent_stdin_room(x->ast);
		if ((uint64_t)room > x->src_left)
			room = (size_t)x->src_left;
		if (room > 0 && (n = sbx_agent_write_buffer(x->ast, x->src, room)) > 0) {
			x->src_left -= (uint64_t)n;
			eng_file_progress(op);
		}
		if (x->src_left > 0)
			return;
		eng_src_detach(op);
	}
	sbx_agent_close_stdin(x->ast);
}

/* The stream's start reaches the sink from the loop, never before the
 * call that started the op has returned. */
static void
started_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	eng_exec_announce(arg);
}

/* The argv of the runtime exec minus the helper's path: the mode first. */
static const char **
mode_argv(json_t *cmd, json_t *env, const char ***envp)
{
	size_t n = json_array_size(cmd), m = json_array_size(env), i;
	const char **v = calloc(n + m + 2, sizeof(*v));

	if (v == NULL || n < 2)
		goto bad;
	for (i = 1; i < n; i++)
		if ((v[i - 1] = json_string_value(json_array_get(cmd, i))) == NULL)
			goto bad;
	v[n - 1] = NULL;
	*envp = v + n;
	for (i = 0; i < m; i++)
		if (((*envp)[i] = json_string_value(json_array_get(env, i))) == NULL)
			goto bad;
	(*envp)[m] = NULL;
	return v;
bad:
	free(v);
	return NULL;
}

static void
agent_run(struct eop *op)
{
	struct eop_exec *x = xop(op);
	const struct sbx_agent_stream_cbs cbs = { .output = st_output,
	    .exit = st_exit, .error = st_error, .stdin_room = st_room,
	    .arg = op };
	struct eng_agent *ag;
	const char **argv, **env = NULL;
	struct sbx_err e;

	if ((ag = agent_get(op->e, op->id, &e)) == NULL)
		goto fail;
	if ((argv = mode_argv(x->cmd, x->env, &env)) == NULL) {
		sbx_err_set(&e, SBX_E_INTERNAL, "cannot pass the helper's arguments");
		goto fail;
	}
	x->ast = sbx_agent_open2(ag->ch, argv, env, (x->has_stdin ?
	    SBX_AGENT_OPEN_STDIN : 0) | x->open_flags, &cbs, &e);
	free(argv);
	if (x->ast == NULL)
		goto fail;
	/* Bulk output (exec, file reads, port connections): a window of
	 * DIRECT_OUT_WINDOW, not one round trip's 256 KiB (adr/0066, adr/0053
	 * amendment of session 11); terminals and exec sessions keep theirs. */
	if (!(op->kind->flags & EK_SESSION) || (op->kind->flags & EK_BULK_OUT))
		(void)sbx_agent_grow_output(x->ast, DIRECT_OUT_WINDOW - SBX_AGENT_WINDOW);
	if (ag->cid[0] != '\0' && op->cid[0] == '\0')
		snprintf(op->cid, sizeof(op->cid), "%s", ag->cid);
	if (op->cid[0] == '\0')   /* kills go through the agent: any mark will do */
		snprintf(op->cid, sizeof(op->cid), "agent");
	x->streaming = 1;
	x->got_stream = 1;
	x->started_ms = sbx_mono_ms();
	if (x->paused)
		sbx_agent_pause(x->ast, 1);
	if (eng_exec_clock(op, &e) < 0)
		goto fail;
	if (op->kind->flags & (EK_FRAMED | EK_SESSION)) {
		if ((x->astart = event_new(op->e->base.base, -1, 0, started_cb, op)) == NULL) {
			sbx_err_oom(&e);
			goto fail;
		}
		if (ag->state == AG_READY)
			event_active(x->astart, EV_TIMEOUT, 0);
	}
	agent_pump(op);
	return;
fail:
	eng_fail_later(op, &e);
}

static void
agent_end(struct eop *op)
{
	struct eop_exec *x = xop(op);

	if (x->astart != NULL) {
		event_free(x->astart);
		x->astart = NULL;
	}
	if (x->ast != NULL) {
		sbx_agent_cancel(x->ast);
		x->ast = NULL;
	}
}

const struct eng_transport eng_agent_transport = {
	.name = "agent",
	.run = agent_run,
	.pump = agent_pump,
	.end = agent_end,
};

void
eng_agent_forget(struct engine *e, const char *id)
{
	struct eng_agent *ag = agent_find(e, id);

	/* A record without a channel holds the count when there is none. */
	if (ag == NULL && (ag = calloc(1, sizeof(*ag))) != NULL) {
		ag->e = e;
		ag->state = AG_DEAD;
		snprintf(ag->id, sizeof(ag->id), "%s", id);
		TAILQ_INSERT_TAIL(&e->agents, ag, link);
	}
	if (ag == NULL)
		return;
	/* Its channel ends by itself when the container stops (streams end
	 * as a killed exec's did); what goes now is what it stood for. */
	ag->ever_ready = 0;
	ag->st_valid = 0;
	ag->going++;
}

void
eng_agent_forget_end(struct engine *e, const char *id)
{
	struct eng_agent *ag = agent_find(e, id);

	if (ag != NULL && ag->going > 0)
		ag->going--;
}

int
eng_agent_going(struct engine *e, const char *id)
{
	struct eng_agent *ag = agent_find(e, id);

	return ag != NULL && ag->going > 0;
}

void
eng_agent_retire(struct engine *e, const char *id)
{
	struct eng_agent *ag = agent_find(e, id);

	if (ag == NULL)
		return;
	/* The channel may run on in the container's last life until the
	 * runtime tells its end, which can come after the container was made
	 * or started again: the next stream starts a new agent instead
	 * (agent_get), never lands on it. */
	ag->ever_ready = 0;
	ag->st_valid = 0;
	ag->stale = 1;
}

/* Takes ag out of e's table and frees it with its channel and its
 * runtime call; a starter op still pointing at it is told it is gone. */
static void
agent_free(struct engine *e, struct eng_agent *ag, int now)
{
	TAILQ_REMOVE(&e->agents, ag, link);
	if (ag->starter != NULL) {
		ago(ag->starter)->ag = NULL;
		ag->starter = NULL;
	}
	sbx_http_req_cancel(ag->http);
	sbx_agent_chan_detach_bev(ag->ch);
	sbx_agent_chan_free(ag->ch);
	direct_release(ag, now);
	if (ag->dtimer != NULL)
		event_free(ag->dtimer);
	free(ag);
}

void
eng_agents_free(struct engine *e)
{
	struct eng_agent *ag;

	while ((ag = TAILQ_FIRST(&e->agents)) != NULL)
		agent_free(e, ag, 1);
}

size_t
sbx_engine_agents_close_idle(struct sbx_driver *d)
{
	struct engine *e = (struct engine *)d;
	struct eng_agent *ag, *next;
	size_t busy = 0;

	for (ag = TAILQ_FIRST(&e->agents); ag != NULL; ag = next) {
		next = TAILQ_NEXT(ag, link);
		if (ag->starter != NULL || ag->state == AG_STARTING ||
		    (ag->ch != NULL && sbx_agent_chan_streams(ag->ch) > 0)) {
			busy++;
			continue;
		}
		agent_free(e, ag, 0);
	}
	return busy;
}

size_t
sbx_engine_agents_live(const struct sbx_driver *d)
{
	const struct engine *e = (const struct engine *)d;
	const struct eng_agent *ag;
	size_t n = 0;

	TAILQ_FOREACH(ag, &e->agents, link)
		n += ag->state == AG_READY;
	return n;
}

/* ---------- warm ensure from the live channel ---------- */

void
eng_agent_note_status(struct engine *e, const struct sbx_status *st, const char *helper_vol)
{
	struct eng_agent *ag;
	struct sbx_err err;

	if (!e->agent_on || st->state != SBX_STATE_RUNNING)
		return;
	/* Started now, in the background: the first exec finds it up. */
	if ((ag = agent_get(e, st->id, &err)) == NULL)
		return;
	ag->st = *st;
	snprintf(ag->helper_vol, sizeof(ag->helper_vol), "%s", helper_vol);
	ag->st_valid = 1;
}

int
eng_agent_warm(struct engine *e, const char *id, const char *image, int egress,
    struct sbx_status *st)
{
	struct eng_agent *ag = agent_find(e, id);
	uint64_t ms;

	if (ag == NULL || !ag->st_valid || ag->state != AG_READY || ag->ch == NULL ||
	    !sbx_agent_chan_alive(ag->ch) || e->agent_fresh_ms <= 0)
		return 0;
	if (strcmp(ag->st.image, image) != 0 || ag->st.egress != egress ||
	    strcmp(ag->helper_vol, e->helper_vol) != 0)
		return 0;
	ms = (uint64_t)sbx_mono_ms();
	if (ms - sbx_agent_chan_last_rx_ms(ag->ch) > (uint64_t)e->agent_fresh_ms)
		return 0;
	*st = ag->st;
	return 1;
}
