/* api_e2b_process.c - E2B's process.Process on sbx's terminals (api_e2b_process.h, adr/0060): a process is a terminal of the sandbox's NPC with a pid and a tag; Start and Connect streams are viewers of it, the unary methods the owner's operations. Uses the terminals (api_term.h) and the Connect core (api_connect.h); called by api_envd.c's table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <sodium.h>

#include "api_connect.h"
#include "api_e2b.h"
#include "api_e2b_path.h"
#include "api_e2b_process.h"
#include "api_int.h"
#include "api_term.h"
#include "sbx_log.h"
#include "sbx_proto.h"


#define PID_FIRST 1000             /* the first pid handed out */
#define TAG_MAX 256                /* bytes of a tag */
#define ARGS_MAX 4096              /* arguments of one command */
#define ENVS_MAX 1024              /* variables of one command */
#define KEEPALIVE_DEFAULT_S 90     /* envd's, without Keepalive-Ping-Interval */
#define KEEPALIVE_MIN_S 1
#define KEEPALIVE_MAX_S 3600

/* "/bin/bash ARGS" where there is a bash, else "/bin/sh ARGS" ($0 is
 * "/bin/bash", "$@" the SDK's arguments). */
#define BASH_OR_SH "[ -x /bin/bash ] && exec /bin/bash \"$@\"; exec /bin/sh \"$@\""

/* The sentences of what sbx refuses (docs/e2b.md). */
#define MSG_ROOT "sbx runs every command as the sandbox user."

struct e2b_watch;

/* One process: a terminal of an NPC, known by pid (and tag). */
struct e2b_proc {
	struct api_server *s;
	char npc[API_NPC_NAME_MAX + 1];
	int64_t owner;
	uint32_t pid;
	char *tag;                   /* NULL: none */
	json_t *config;              /* ProcessConfig as List shows it */
	char term_id[40];            /* "" while its session opens */
	int pty;
	int stdin_open;              /* the request asked for stdin */
	int starting;                /* its session is opening */
	struct e2b_watch *starter;   /* the Start stream waiting, or NULL */
	struct e2b_proc *next;
};

/* One Start or Connect stream: a viewer of the process's terminal. */
struct e2b_watch {
	struct api_server *s;
	struct api_connect_call *c;
	struct e2b_proc *p;          /* while starting only (then NULL) */
	struct api_viewer *v;
	uint32_t pid;
	int pty;
	struct event *keepalive;
	int64_t keepalive_s;
};

/* ------------------------------------------------------------------ */
/* Records                                                             */

static void
proc_free(struct e2b_proc *p)
{
	if (p == NULL)
		return;
	free(p->tag);
	json_decref(p->config);
	free(p);
}

/* The running terminal of p, or NULL (ended, forgotten, still opening). */
static struct api_term *
proc_term(const struct e2b_proc *p)
{
	struct api_term *t;
	struct sbx_err e;

	if (p->starting || p->term_id[0] == '\0')
		return NULL;
	t = api_term_find(p->s, p->npc, p->term_id, &e);
	return t != NULL && api_term_running(t) ? t : NULL;
}

/* Forgets processes that ended (envd drops a process when it is waited
 * for): the list holds running and opening ones only. */
static void
procs_sweep(struct api_server *s)
{
	struct e2b_proc **pp = &s->e2b_procs, *p;

	while ((p = *pp) != NULL) {
		if (!p->starting && proc_term(p) == NULL) {
			*pp = p->next;
			proc_free(p);
		} else {
			pp = &p->next;
		}
	}
}

static void
proc_unlink(struct e2b_proc *p)
{
	struct e2b_proc **pp;

	for (pp = &p->s->e2b_procs; *pp != NULL; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			return;
		}
}

void
api_e2b_procs_close(struct api_server *s)
{
	struct e2b_proc *p;

	while ((p = s->e2b_procs) != NULL) {
		s->e2b_procs = p->next;
		proc_free(p);
	}
}

/* The process a selector ({"pid":N} or {"tag":"..."}) names in a's
 * sandbox, with its running terminal; NULL with err not_found (envd's
 * "process with pid N not found") or bad_request. */
static struct e2b_proc *
proc_select(struct areq *a, const json_t *sel, struct api_term **t,
    struct sbx_err *err)
{
	const json_t *pid = json_object_get(sel, "pid");
	const json_t *tag = json_object_get(sel, "tag");
	struct e2b_proc *p;

	procs_sweep(a->s);
	if (!json_is_object(sel) || (pid == NULL) == (tag == NULL) ||
	    (pid != NULL && !json_is_integer(pid)) ||
	    (tag != NULL && !json_is_string(tag))) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "process must name a pid or a "
		    "tag.");
		return NULL;
	}
	for (p = a->s->e2b_procs; p != NULL; p = p->next) {
		if (strcmp(p->npc, a->npc.name) != 0 || p->owner != a->npc.owner_id)
			continue;
		if (pid != NULL && (json_int_t)p->pid != json_integer_value(pid))
			continue;
		if (tag != NULL && (p->tag == NULL ||
		    strcmp(p->tag, json_string_value(tag)) != 0))
			continue;
		if ((*t = proc_term(p)) != NULL)
			return p;
	}
	if (pid != NULL)
		sbx_err_set(err, SBX_E_NOT_FOUND, "process with pid %lld not found",
		    (long long)json_integer_value(pid));
	else
		sbx_err_set(err, SBX_E_NOT_FOUND, "process with tag %.64s not "
		    "found", json_string_value(tag));
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Events                                                              */

static json_t *
event_of(const char *kind, json_t *body)
{
	return json_pack("{s:{s:o}}", "event", kind, body != NULL ? body :
	    json_object());
}

static json_t *
b64_string(const unsigned char *p, size_t n)
{
	size_t cap = sodium_base64_ENCODED_LEN(n,
	    sodium_base64_VARIANT_ORIGINAL);
	char *b = malloc(cap);
	json_t *s;

	if (b == NULL)
		return NULL;
	sodium_bin2base64(b, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
	s = json_string(b);
	free(b);
	return s;
}

/* Bytes of a proto3 JSON "bytes" value: standard or URL-safe base64,
 * padded or not. Returns a malloc'ed buffer (*n bytes) or NULL. */
static unsigned char *
b64_decode(const char *s, size_t *n)
{
	static const int variants[] = { sodium_base64_VARIANT_ORIGINAL,
	    sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
	    sodium_base64_VARIANT_URLSAFE,
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING };
	size_t len = strlen(s), i;
	unsigned char *b = malloc(len / 4 * 3 + 3);

	if (b == NULL)
		return NULL;
	for (i = 0; i < sizeof(variants) / sizeof(variants[0]); i++)
		if (sodium_base642bin(b, len / 4 * 3 + 3, s, len, NULL, n, NULL,
		    variants[i]) == 0)
			return b;
	free(b);
	return NULL;
}

/* What Go's os.ProcessState.String() says of a signal (envd's status). */
static const char *
signal_words(const char *sig)
{
	static const struct { const char *name, *words; } sigs[] = {
		{ "KILL", "killed" }, { "TERM", "terminated" },
		{ "INT", "interrupt" }, { "HUP", "hangup" }, { "QUIT", "quit" },
		{ "PIPE", "broken pipe" }, { "ABRT", "aborted" },
		{ "SEGV", "segmentation fault" }, { "ALRM", "alarm clock" },
		{ "USR1", "user defined signal 1" },
		{ "USR2", "user defined signal 2" },
	};
	size_t i;

	if (strncmp(sig, "SIG", 3) == 0)
		sig += 3;
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (strcmp(sigs[i].name, sig) == 0)
			return sigs[i].words;
	return sig;
}

/* envd's EndEvent: exitCode (-1 when a signal ended it), exited, status
 * ("exit status N" / "signal: killed"), error (the status when not 0). */
static json_t *
end_event(int code, const char *signal)
{
	char status[96];
	json_t *e = json_object();

	if (e == NULL)
		return NULL;
	if (signal != NULL) {
		snprintf(status, sizeof(status), "signal: %s",
		    signal_words(signal));
		json_object_set_new(e, "exitCode", json_integer(-1));
		json_object_set_new(e, "exited", json_false());
	} else {
		snprintf(status, sizeof(status), "exit status %d", code);
		json_object_set_new(e, "exitCode", json_integer(code));
		json_object_set_new(e, "exited", json_true());
	}
	json_object_set_new(e, "status", json_string(status));
	if (signal != NULL || code != 0)
		json_object_set_new(e, "error", json_string(status));
	return event_of("end", e);
}

/* ------------------------------------------------------------------ */
/* Streams: a watch is one viewer of a process's terminal               */

static void
watch_free(struct e2b_watch *w)
{
	if (w->p != NULL && w->p->starter == w)
		w->p->starter = NULL;
	if (w->v != NULL)
		api_viewer_detach(w->v);
	if (w->keepalive != NULL)
		event_free(w->keepalive);
	free(w);
}

/* The client went (or the api drains): the process goes on. */
static void
watch_cancel(void *arg)
{
	watch_free(arg);
}

static void
watch_drain(void *arg)
{
	struct e2b_watch *w = arg;

	if (w->v != NULL)
		api_viewer_pause(w->v, 0);
}

static void
keepalive_arm(struct e2b_watch *w)
{
	struct timeval tv = { (time_t)w->keepalive_s, 0 };

	if (w->keepalive != NULL)
		evtimer_add(w->keepalive, &tv);
}

/* Sends ev (stolen) on w's stream. 0, or -1 when w is gone (freed by its
 * cancel hook: do not touch it). */
static int
watch_send(struct e2b_watch *w, json_t *ev)
{
	if (ev == NULL) {
		api_connect_end(w->c, "internal", "Out of memory.");
		watch_free(w);
		return -1;
	}
	if (api_connect_send(w->c, ev) == -1)
		return -1;
	if (api_connect_paused(w->c) && w->v != NULL)
		api_viewer_pause(w->v, 1);
	keepalive_arm(w);
	return 0;
}

/* envd sends a KeepAlive event after an interval without data. */
static void
keepalive_fire(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	watch_send(arg, event_of("keepalive", NULL));
}

static void
w_output(void *arg, int stream, uint64_t offset, const unsigned char *p,
    size_t n)
{
	struct e2b_watch *w = arg;
	const char *kind = w->pty ? "pty" : stream == 2 ? "stderr" : "stdout";
	json_t *data = b64_string(p, n);

	(void)offset;
	watch_send(w, data == NULL ? NULL : event_of("data",
	    json_pack("{s:o}", kind, data)));
}

static void
w_ended(void *arg, const char *state, int code, const char *signal,
    const struct sbx_err *err)
{
	struct e2b_watch *w = arg;

	if (strcmp(state, "exited") == 0 || strcmp(state, "killed") == 0) {
		if (watch_send(w, end_event(code, signal)) == -1)
			return;
		api_connect_end(w->c, NULL, NULL);
	} else if (strcmp(state, "timeout") == 0) {
		/* envd: the context of Connect-Timeout-Ms killed it. */
		api_connect_end(w->c, "deadline_exceeded", "The process ran past "
		    "its timeout (timeoutMs) and was killed.");
	} else if (err != NULL) {
		api_connect_fail(w->c, err);
	} else {
		api_connect_end(w->c, "unknown", "The process ended without an "
		    "exit status.");
	}
	/* Ended, so no cancel hook comes: the watch goes now (a viewer's
	 * callback may detach it). */
	watch_free(w);
}

static const struct api_viewer_ops watch_ops = {
	.output = w_output, .ended = w_ended,
};

/* A new watch of c (not attached yet); NULL with the call ended. */
static struct e2b_watch *
watch_new(struct areq *a, struct api_connect_call *c)
{
	struct evkeyvalq *hs = evhttp_request_get_input_headers(a->h.req);
	const char *ka = evhttp_find_header(hs, "Keepalive-Ping-Interval");
	struct e2b_watch *w = calloc(1, sizeof(*w));
	long long s = KEEPALIVE_DEFAULT_S;

	if (w == NULL || (w->keepalive = evtimer_new(a->s->base,
	    keepalive_fire, w)) == NULL) {
		free(w);
		api_connect_end(c, "internal", "Out of memory.");
		return NULL;
	}
	if (ka != NULL && ka[0] != '\0' && strspn(ka, "0123456789") ==
	    strlen(ka) && strlen(ka) < 10)
		s = atoll(ka);
	w->keepalive_s = s < KEEPALIVE_MIN_S ? KEEPALIVE_MIN_S :
	    s > KEEPALIVE_MAX_S ? KEEPALIVE_MAX_S : s;
	w->s = a->s;
	w->c = c;
	api_connect_on_cancel(c, watch_cancel, w);
	api_connect_on_drain(c, watch_drain, w);
	return w;
}

/* Attaches w to t from offset and sends the start event. 0, or -1 with
 * the call ended and w freed. */
static int
watch_attach(struct e2b_watch *w, struct api_term *t, uint64_t offset)
{
	struct sbx_err e;
	uint64_t start;

	sbx_err_clear(&e);
	w->pty = api_term_is_pty(t);
	w->v = api_term_attach(w->s, t, offset, &watch_ops, w, &start, &e);
	if (w->v == NULL) {
		api_connect_fail(w->c, &e);
		watch_free(w);
		return -1;
	}
	return watch_send(w, event_of("start", json_pack("{s:I}", "pid",
	    (json_int_t)w->pid)));
}

/* ------------------------------------------------------------------ */
/* Start                                                               */

/* The terminal of p started (t) or was refused (err). */
static void
proc_started(void *arg, struct api_term *t, const struct sbx_err *err)
{
	struct e2b_proc *p = arg;
	struct e2b_watch *w = p->starter;

	p->starter = NULL;
	if (w != NULL)
		w->p = NULL;
	if (t == NULL) {
		proc_unlink(p);
		proc_free(p);
		if (w != NULL) {
			api_connect_fail(w->c, err);
			watch_free(w);
		}
		return;
	}
	p->starting = 0;
	snprintf(p->term_id, sizeof(p->term_id), "%s", api_term_id(t));
	/* envd gives a command without stdin /dev/null: EOF at once. */
	if (!p->pty && !p->stdin_open)
		api_term_close_input(t);
	if (w != NULL)
		watch_attach(w, t, 0);
}

/* The user of an E2B request: envd's Basic credentials "user:" (the SDK
 * sends them when a user is given). Only "root" is refused. */
static int
user_check(struct areq *a, struct sbx_err *err)
{
	struct evkeyvalq *hs = evhttp_request_get_input_headers(a->h.req);
	const char *v = evhttp_find_header(hs, "Authorization");
	unsigned char user[128];
	size_t n = 0;

	if (v == NULL || strncasecmp(v, "Basic ", 6) != 0)
		return 0;
	v += 6;
	if (sodium_base642bin(user, sizeof(user) - 1, v, strlen(v), NULL, &n,
	    NULL, sodium_base64_VARIANT_ORIGINAL) != 0)
		return 0;
	user[n] = '\0';
	if (strncmp((char *)user, "root", 4) == 0 &&
	    (user[4] == ':' || user[4] == '\0'))
		return sbx_err_set(err, SBX_E_FORBIDDEN, MSG_ROOT);
	return 0;
}

/* The variables of a process: the sandbox's envVars, then the request's
 * (a later value wins, as in envd). A new object, or NULL with err. */
static json_t *
envs_merge(struct areq *a, const json_t *req_envs, struct sbx_err *err)
{
	json_t *all = NULL;
	struct evkeyvalq *hs = evhttp_request_get_input_headers(a->h.req);
	struct api_e2b_sandbox sb;
	json_error_t jerr;

	if (api_e2b_lookup(a->s, a->npc.name, evhttp_find_header(hs,
	    "X-Access-Token"), &sb, err) == 0 && sb.env_json != NULL)
		all = json_loads(sb.env_json, 0, &jerr);
	sbx_err_clear(err);
	if (!json_is_object(all)) {
		json_decref(all);
		all = json_object();
	}
	if (all == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	if (req_envs != NULL && json_object_update(all, (json_t *)req_envs) == -1) {
		json_decref(all);
		sbx_err_oom(err);
		return NULL;
	}
	return all;
}

/* The checked parts of a StartRequest. */
struct start_req {
	const json_t *process, *args, *envs, *pty, *tag;
	const char *cmd, *cwd;
	int stdin_open, cols, rows;
};

static int
start_parse(const json_t *msg, struct start_req *r, struct sbx_err *err)
{
	const json_t *v, *size;
	size_t i;
	const char *k;

	memset(r, 0, sizeof(*r));
	r->process = json_object_get(msg, "process");
	if (!json_is_object(r->process))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "process must be an "
		    "object with a cmd.");
	v = json_object_get(r->process, "cmd");
	if (!json_is_string(v) || json_string_length(v) == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "process.cmd must be a "
		    "non-empty string.");
	r->cmd = json_string_value(v);
	r->args = json_object_get(r->process, "args");
	if (r->args != NULL && !json_is_null(r->args)) {
		if (!json_is_array(r->args) || json_array_size(r->args) >
		    ARGS_MAX)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "process.args "
			    "must be a list of at most %d strings.", ARGS_MAX);
		json_array_foreach(r->args, i, v)
			if (!json_is_string(v))
				return sbx_err_set(err, SBX_E_BAD_REQUEST,
				    "process.args must be strings.");
	} else {
		r->args = NULL;
	}
	r->envs = json_object_get(r->process, "envs");
	if (r->envs != NULL && !json_is_null(r->envs)) {
		if (!json_is_object(r->envs) || json_object_size(r->envs) >
		    ENVS_MAX)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "process.envs "
			    "must be an object of at most %d strings.", ENVS_MAX);
		json_object_foreach((json_t *)r->envs, k, v)
			if (!json_is_string(v) || k[0] == '\0' ||
			    strchr(k, '=') != NULL)
				return sbx_err_set(err, SBX_E_BAD_REQUEST,
				    "process.envs must map names without '=' to "
				    "strings.");
	} else {
		r->envs = NULL;
	}
	v = json_object_get(r->process, "cwd");
	if (v != NULL && !json_is_null(v) && !json_is_string(v))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "process.cwd must be a "
		    "string.");
	r->cwd = json_is_string(v) ? json_string_value(v) : NULL;
	r->tag = json_object_get(msg, "tag");
	if (r->tag != NULL && (!json_is_string(r->tag) ||
	    json_string_length(r->tag) > TAG_MAX))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "tag must be a string "
		    "of at most %d bytes.", TAG_MAX);
	v = json_object_get(msg, "stdin");
	r->stdin_open = json_is_true(v);
	r->pty = json_object_get(msg, "pty");
	if (r->pty != NULL && json_is_null(r->pty))
		r->pty = NULL;
	if (r->pty != NULL) {
		size = json_object_get(r->pty, "size");
		r->cols = (int)json_integer_value(json_object_get(size, "cols"));
		r->rows = (int)json_integer_value(json_object_get(size, "rows"));
		if (!json_is_object(r->pty) || r->cols < 0 || r->rows < 0 ||
		    r->cols > 10000 || r->rows > 10000)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "pty.size must "
			    "have cols and rows of 1 to 10000.");
		if (r->cols == 0)
			r->cols = 80;
		if (r->rows == 0)
			r->rows = 24;
	}
	return 0;
}

/* "K=V" strings of envs (an object of strings), NULL-terminated; the
 * strings are in one block after the pointers: free the result only. */
static const char **
env_list(const json_t *envs)
{
	size_t n = json_object_size(envs), bytes = (n + 1) * sizeof(char *);
	const char *k, **out;
	json_t *v;
	char *q;
	size_t i = 0;

	json_object_foreach((json_t *)envs, k, v)
		bytes += strlen(k) + json_string_length(v) + 2;
	if ((out = malloc(bytes)) == NULL)
		return NULL;
	q = (char *)(out + n + 1);
	json_object_foreach((json_t *)envs, k, v) {
		out[i++] = q;
		q += sprintf(q, "%s=%s", k, json_string_value(v)) + 1;
	}
	out[i] = NULL;
	return out;
}

void
api_e2b_proc_start(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	struct api_server *s = a->s;
	struct sbx_session_req req;
	struct start_req r;
	struct e2b_proc *p = NULL;
	struct e2b_watch *w = NULL;
	struct sbx_err e;
	json_t *envs = NULL, *v;
	const char **argv = NULL, **env = NULL;
	char cwd[4096], preview[256];
	size_t i, j, used;

	sbx_err_clear(&e);
	procs_sweep(s);
	if (user_check(a, &e) == -1 || start_parse(msg, &r, &e) == -1 ||
	    api_e2b_path(r.cwd, cwd, sizeof(cwd), &e) == -1 ||
	    (envs = envs_merge(a, r.envs, &e)) == NULL)
		goto fail;
	argv = calloc(json_array_size(r.args) + 5, sizeof(*argv));
	env = env_list(envs);
	p = calloc(1, sizeof(*p));
	if (argv == NULL || env == NULL || p == NULL ||
	    (r.tag != NULL && (p->tag = strdup(json_string_value(r.tag))) ==
	    NULL) || (p->config = json_object()) == NULL) {
		sbx_err_oom(&e);
		goto fail;
	}
	used = (size_t)snprintf(preview, sizeof(preview), "%s", r.cmd);
	j = 0;
	if (strcmp(r.cmd, "/bin/bash") == 0) {
		/* The SDK runs everything as /bin/bash (commands: -l -c CMD,
		 * pty: -i -l); an image without bash gets /bin/sh with the
		 * same arguments (adr/0060). */
		argv[j++] = "/bin/sh";
		argv[j++] = "-c";
		argv[j++] = BASH_OR_SH;
	}
	argv[j++] = r.cmd;
	json_array_foreach(r.args, i, v) {
		argv[j++] = json_string_value(v);
		if (used < sizeof(preview))
			used += (size_t)snprintf(preview + used, sizeof(preview) -
			    used, " %s", json_string_value(v));
	}
	/* What List shows: envd's ProcessConfig as it was asked. */
	json_object_set_new(p->config, "cmd", json_string(r.cmd));
	json_object_set_new(p->config, "args", r.args != NULL ?
	    json_deep_copy(r.args) : json_array());
	json_object_set_new(p->config, "envs", r.envs != NULL ?
	    json_deep_copy(r.envs) : json_object());
	if (r.cwd != NULL)
		json_object_set_new(p->config, "cwd", json_string(r.cwd));
	p->s = s;
	snprintf(p->npc, sizeof(p->npc), "%s", a->npc.name);
	p->owner = a->npc.owner_id;
	if (s->e2b_next_pid < PID_FIRST)
		s->e2b_next_pid = PID_FIRST;
	p->pid = s->e2b_next_pid++;
	p->pty = r.pty != NULL;
	p->stdin_open = r.stdin_open;
	p->starting = 1;
	if ((w = watch_new(a, c)) == NULL)
		goto done;
	w->pid = p->pid;
	w->p = p;
	p->starter = w;
	memset(&req, 0, sizeof(req));
	req.kind = p->pty ? SBX_SESSION_PTY : SBX_SESSION_EXEC;
	req.exec.argv = argv;
	req.exec.cwd = cwd;
	req.exec.env = env;
	/* envd kills the process at the call's deadline, not when the
	 * stream goes: the session's timeout is that deadline. */
	req.exec.timeout_ms = api_connect_timeout_ms(c);
	req.cols = r.cols;
	req.rows = r.rows;
	p->next = s->e2b_procs;
	s->e2b_procs = p;
	if (api_term_open(a, &req, preview, proc_started, p, &e) == -1) {
		proc_unlink(p);
		w->p = NULL;
		api_connect_fail(c, &e);
		watch_free(w);
		goto done;
	}
	p = NULL;   /* the list's; proc_started finishes it */
	goto done;
fail:
	api_connect_fail(c, &e);
done:
	proc_free(p);
	json_decref(envs);
	free(argv);
	free(env);
}

/* ------------------------------------------------------------------ */
/* Connect, List and the unary operations                              */

void
api_e2b_proc_connect(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	struct api_term *t = NULL;
	struct e2b_proc *p;
	struct e2b_watch *w;
	struct sbx_err e;

	sbx_err_clear(&e);
	p = proc_select(a, json_object_get(msg, "process"), &t, &e);
	if (p == NULL) {
		api_connect_fail(c, &e);
		return;
	}
	if ((w = watch_new(a, c)) == NULL)
		return;
	w->pid = p->pid;
	/* envd's Connect sends what comes from now on. */
	watch_attach(w, t, api_term_offset(t));
}

void
api_e2b_proc_list(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	json_t *list = json_array(), *o;
	struct e2b_proc *p;

	(void)msg;
	procs_sweep(a->s);
	for (p = a->s->e2b_procs; list != NULL && p != NULL; p = p->next) {
		if (strcmp(p->npc, a->npc.name) != 0 ||
		    p->owner != a->npc.owner_id || proc_term(p) == NULL)
			continue;
		o = json_pack("{s:O,s:I}", "config", p->config, "pid",
		    (json_int_t)p->pid);
		if (o != NULL && p->tag != NULL)
			json_object_set_new(o, "tag", json_string(p->tag));
		json_array_append_new(list, o);
	}
	if (list == NULL) {
		api_connect_error(c, "internal", "Out of memory.");
		return;
	}
	api_connect_reply(c, json_pack("{s:o}", "processes", list));
}

void
api_e2b_proc_send_input(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	const json_t *in = json_object_get(msg, "input");
	const json_t *b = json_object_get(in, "stdin");
	struct api_term *t = NULL;
	unsigned char *bytes = NULL;
	struct sbx_err e;
	size_t n = 0;

	sbx_err_clear(&e);
	if (b == NULL)
		b = json_object_get(in, "pty");
	if (!json_is_string(b)) {
		api_connect_error(c, "invalid_argument", "input must hold stdin "
		    "or pty bytes (base64).");
		return;
	}
	if (proc_select(a, json_object_get(msg, "process"), &t, &e) == NULL) {
		api_connect_fail(c, &e);
		return;
	}
	if ((bytes = b64_decode(json_string_value(b), &n)) == NULL) {
		api_connect_error(c, "invalid_argument", "input bytes must be "
		    "base64.");
		return;
	}
	if (n > 0 && api_term_write(t, bytes, n, &e) == -1)
		api_connect_fail(c, &e);
	else
		api_connect_reply(c, json_object());
	sodium_memzero(bytes, n);
	free(bytes);
}

void
api_e2b_proc_send_signal(struct areq *a, struct api_connect_call *c,
    json_t *msg)
{
	const json_t *sig = json_object_get(msg, "signal");
	struct sbx_session_ctl ctl;
	struct api_term *t = NULL;
	struct sbx_err e;
	int signo = 0;

	sbx_err_clear(&e);
	/* process.Signal: SIGNAL_SIGKILL = 9, SIGNAL_SIGTERM = 15 (a name
	 * in proto3 JSON, a number accepted too). */
	if (json_is_integer(sig))
		signo = (int)json_integer_value(sig);
	else if (json_is_string(sig) && strcmp(json_string_value(sig),
	    "SIGNAL_SIGKILL") == 0)
		signo = 9;
	else if (json_is_string(sig) && strcmp(json_string_value(sig),
	    "SIGNAL_SIGTERM") == 0)
		signo = 15;
	if (signo != 9 && signo != 15) {
		api_connect_error(c, "unimplemented", "Only SIGNAL_SIGKILL and "
		    "SIGNAL_SIGTERM are sent.");
		return;
	}
	if (proc_select(a, json_object_get(msg, "process"), &t, &e) == NULL) {
		api_connect_fail(c, &e);
		return;
	}
	if (signo == 9) {
		/* The session closes: the broker kills the process tree. */
		api_term_kill(t, a->who.name);
		api_connect_reply(c, json_object());
		return;
	}
	memset(&ctl, 0, sizeof(ctl));
	ctl.kind = SBX_SESSION_SIGNAL;
	ctl.signo = signo;
	if (api_term_ctl(t, &ctl, &e) == -1)
		api_connect_fail(c, &e);
	else
		api_connect_reply(c, json_object());
}

void
api_e2b_proc_close_stdin(struct areq *a, struct api_connect_call *c,
    json_t *msg)
{
	struct api_term *t = NULL;
	struct sbx_err e;

	sbx_err_clear(&e);
	if (proc_select(a, json_object_get(msg, "process"), &t, &e) == NULL) {
		api_connect_fail(c, &e);
		return;
	}
	api_term_close_input(t);
	api_connect_reply(c, json_object());
}

void
api_e2b_proc_update(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	const json_t *size = json_object_get(json_object_get(msg, "pty"),
	    "size");
	struct sbx_session_ctl ctl;
	struct api_term *t = NULL;
	struct sbx_err e;

	sbx_err_clear(&e);
	if (proc_select(a, json_object_get(msg, "process"), &t, &e) == NULL) {
		api_connect_fail(c, &e);
		return;
	}
	if (size == NULL) {
		api_connect_reply(c, json_object());
		return;
	}
	memset(&ctl, 0, sizeof(ctl));
	ctl.kind = SBX_SESSION_RESIZE;
	ctl.cols = (int)json_integer_value(json_object_get(size, "cols"));
	ctl.rows = (int)json_integer_value(json_object_get(size, "rows"));
	if (api_term_ctl(t, &ctl, &e) == -1)
		api_connect_fail(c, &e);
	else
		api_connect_reply(c, json_object());
}
