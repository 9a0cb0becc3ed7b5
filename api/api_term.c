/* api_term.c - sandbox-api terminals as resources: the record and its session, viewers with one writer, input and control, the idle kill (adr/0051). Below the routes (api_term_http.c) and the loader (api_term_load.c), above the scrollback (api_term_ring.c); touches the driver only through the session wrappers of sbx_driver.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "api_term_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_time.h"

static void viewer_kick(struct api_viewer *v);
static void idle_arm(struct api_term *t);

/* ------------------------------------------------------------------ */
/* Small things                                                        */

int
term_ended(const struct api_term *t)
{
	return strcmp(t->state, "running") != 0;
}

const char *
api_term_id(const struct api_term *t)
{
	return t->id;
}

int
api_term_is_pty(const struct api_term *t)
{
	return t->pty;
}

uint64_t
api_term_offset(const struct api_term *t)
{
	return t->total;
}

void
term_path(char *buf, size_t cap, const struct api_term *t, const char *file)
{
	if (file != NULL)
		snprintf(buf, cap, "%s/%s/%s", t->s->terms_dir, t->id, file);
	else
		snprintf(buf, cap, "%s/%s", t->s->terms_dir, t->id);
}

json_t *
term_json(const struct api_term *t)
{
	json_t *o = json_object();

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "id", json_string(t->id));
	json_object_set_new(o, "npc", json_string(t->npc));
	json_object_set_new(o, "state", json_string(t->state));
	json_object_set_new(o, "pty", json_boolean(t->pty));
	if (t->pty) {
		json_object_set_new(o, "cols", json_integer(t->cols));
		json_object_set_new(o, "rows", json_integer(t->rows));
		json_object_set_new(o, "term", json_string(t->term));
	}
	json_object_set_new(o, "argv", json_string(t->argv_preview));
	json_object_set_new(o, "by", json_string(t->by));
	json_object_set_new(o, "created_at", json_integer(t->created_at));
	json_object_set_new(o, "ended_at", t->ended_at != 0 ?
	    json_integer(t->ended_at) : json_null());
	json_object_set_new(o, "exit_code", t->code >= 0 ?
	    json_integer(t->code) : json_null());
	json_object_set_new(o, "signal", t->signal[0] != '\0' ?
	    json_string(t->signal) : json_null());
	json_object_set_new(o, "reason", t->reason_code[0] != '\0' ?
	    json_string(t->reason_code) : json_null());
	json_object_set_new(o, "message", t->reason[0] != '\0' ?
	    json_string(t->reason) : json_null());
	json_object_set_new(o, "offset", json_integer((json_int_t)t->total));
	json_object_set_new(o, "viewers", json_integer(viewers_live(t)));
	return o;
}

/* Rewrites meta.json (tmp + rename); a failure is logged. */
static void
meta_write(struct api_term *t)
{
	char path[1024], tmp[1040];
	json_t *o = term_json(t);
	int fd;

	if (o == NULL)
		return;
	json_object_set_new(o, "owner_id", json_integer(t->owner_id));
	json_object_set_new(o, "sandbox_id", json_string(t->sandbox_id));
	json_object_del(o, "viewers");
	term_path(path, sizeof(path), t, "meta.json");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || json_dumpfd(o, fd, JSON_COMPACT) == -1 || close(fd) != 0 ||
	    rename(tmp, path) == -1) {
		if (fd >= 0)
			close(fd);
		log_warn("cannot write a terminal record", "terminal_id", t->id,
		    "error", strerror(errno), NULL);
	}
	json_decref(o);
}

/* ------------------------------------------------------------------ */
/* Viewers                                                             */

static void
viewer_free(struct api_viewer *v)
{
	if (v->catchup != NULL)
		event_free(v->catchup);
	free(v);
}

/* Frees the viewers detached while they were being called. */
static void
viewers_reap(struct api_term *t)
{
	struct api_viewer **pp = &t->viewers, *v;

	if (t->delivering > 0)
		return;
	while ((v = *pp) != NULL) {
		if (v->dead) {
			*pp = v->next;
			viewer_free(v);
		} else
			pp = &v->next;
	}
}

int
viewers_live(const struct api_term *t)
{
	const struct api_viewer *v;
	int n = 0;

	for (v = t->viewers; v != NULL; v = v->next)
		n += !v->dead;
	return n;
}

/* Tells the session whether t has a viewer when that changed: the broker's
 * reaper counts a terminal without one as use of its sandbox only while it
 * moves bytes (adr/0051 amendment). */
static void
viewers_tell(struct api_term *t)
{
	struct sbx_session_ctl c;
	struct sbx_err e;
	int on = viewers_live(t) > 0;

	if (t->op == NULL || t->creator != NULL || on == t->told_viewers)
		return;
	memset(&c, 0, sizeof(c));
	c.kind = SBX_SESSION_VIEWERS;
	c.viewers = on;
	if (sbx_session_control(t->op, &c, &e) == 0)
		t->told_viewers = on;
}

/* Tells v the end once it has every byte. */
static void
viewer_maybe_end(struct api_viewer *v)
{
	struct api_term *t = v->t;
	struct sbx_err e;

	if (t == NULL || v->dead || v->ended_sent || !term_ended(t) ||
	    v->pos < t->total)
		return;
	v->ended_sent = 1;
	sbx_err_clear(&e);
	if (t->reason_code[0] != '\0')
		sbx_err_set(&e, t->reason_code, "%s", t->reason);
	t->delivering++;
	v->ops->ended(v->arg, t->state, t->code, t->signal[0] != '\0' ?
	    t->signal : NULL, t->reason_code[0] != '\0' ? &e : NULL);
	t->delivering--;
}

/*
 * The replay: bytes from v->pos out of the ring, TERM_CATCHUP per turn,
 * until v is caught up (it then gets the live output as it comes) or
 * paused. A viewer behind the ring's start is told what it missed.
 */
static void
viewer_catchup(evutil_socket_t fd, short what, void *arg)
{
	struct api_viewer *v = arg;
	struct api_term *t = v->t;
	const struct tblock *b;
	uint64_t from;
	size_t sent = 0, at, k;

	(void)fd;
	(void)what;
	if (t == NULL || v->dead)
		return;
	t->delivering++;
	while (!v->paused && !v->dead && v->pos < t->total &&
	    sent < TERM_CATCHUP) {
		if (v->pos < ring_start(t)) {
			from = v->pos;
			v->pos = ring_cut(t, ring_start(t));
			if (v->ops->skipped != NULL)
				v->ops->skipped(v->arg, from, v->pos);
			continue;
		}
		for (b = t->head; b != NULL && b->off + b->len <= v->pos;
		    b = b->next)
			;
		if (b == NULL) {
			v->pos = t->total;   /* lost to an allocation failure */
			break;
		}
		if (b->off > v->pos) {
			v->pos = b->off;
			continue;
		}
		at = (size_t)(v->pos - b->off);
		k = b->len - at;
		v->pos += k;
		sent += k;
		v->ops->output(v->arg, b->stream, b->off + at, b->data + at, k);
	}
	t->delivering--;
	if (!v->dead && !v->paused && v->pos < t->total)
		viewer_kick(v);
	else
		viewer_maybe_end(v);
	viewers_reap(t);
}

/* Runs v's replay on the next turn of the loop. */
static void
viewer_kick(struct api_viewer *v)
{
	static const struct timeval now = { 0, 0 };

	if (!v->dead && !v->paused)
		evtimer_add(v->catchup, &now);
}

/* The live output: each viewer that is caught up and not paused gets it
 * now; the others read it from the ring later. */
static void
viewers_deliver(struct api_term *t, int stream, uint64_t off,
    const unsigned char *p, size_t n)
{
	struct api_viewer *v;

	t->delivering++;
	for (v = t->viewers; v != NULL; v = v->next) {
		if (v->dead || v->paused || v->pos != off ||
		    evtimer_pending(v->catchup, NULL))
			continue;
		v->pos = off + n;
		v->ops->output(v->arg, stream, off, p, n);
	}
	t->delivering--;
	viewers_reap(t);
}

struct api_viewer *
term_attach(struct api_term *t, uint64_t offset, int can_write,
    const struct api_viewer_ops *ops, void *arg, uint64_t *start,
    struct sbx_err *err)
{
	struct api_viewer *v, **pp;

	if (offset > t->total) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "offset %" PRIu64 " is beyond "
		    "this terminal's output (%" PRIu64 " bytes so far).", offset,
		    t->total);
		return NULL;
	}
	if ((v = calloc(1, sizeof(*v))) == NULL ||
	    (v->catchup = evtimer_new(t->s->base, viewer_catchup, v)) == NULL) {
		free(v);
		sbx_err_oom(err);
		return NULL;
	}
	ring_load(t);
	if (offset < ring_start(t))
		offset = ring_start(t);
	v->pos = ring_cut(t, offset);
	*start = v->pos;
	v->t = t;
	v->ops = ops;
	v->arg = arg;
	v->can_write = can_write;
	for (pp = &t->viewers; *pp != NULL; pp = &(*pp)->next)
		;
	*pp = v;
	if (can_write && t->writer == NULL && !term_ended(t))
		t->writer = v;
	if (t->idle_ev != NULL)
		event_del(t->idle_ev);
	viewers_tell(t);
	viewer_kick(v);
	return v;
}

struct api_viewer *
api_term_attach(struct api_server *a, struct api_term *t, uint64_t offset,
    const struct api_viewer_ops *ops, void *arg, uint64_t *start,
    struct sbx_err *err)
{
	(void)a;
	return term_attach(t, offset, 1, ops, arg, start, err);
}

void
api_viewer_detach(struct api_viewer *v)
{
	struct api_term *t;
	struct api_viewer *w, **pp;

	if (v == NULL)
		return;
	if ((t = v->t) == NULL) {
		viewer_free(v);
		return;
	}
	v->dead = 1;
	event_del(v->catchup);
	if (t->writer == v) {
		t->writer = NULL;
		for (w = t->viewers; w != NULL; w = w->next)
			if (!w->dead && w->can_write)
				break;
		if (w != NULL && !term_ended(t)) {
			t->writer = w;
			t->delivering++;
			w->ops->writer(w->arg, 1);
			t->delivering--;
		}
	}
	if (t->delivering == 0) {
		for (pp = &t->viewers; *pp != NULL; pp = &(*pp)->next)
			if (*pp == v) {
				*pp = v->next;
				break;
			}
		viewer_free(v);
	}
	viewers_tell(t);
	if (viewers_live(t) == 0) {
		t->active_ms = sbx_mono_ms();
		if (term_ended(t) && t->delivering == 0)
			ring_free(t);
		else
			idle_arm(t);
	}
}

void
api_viewer_pause(struct api_viewer *v, int on)
{
	if (v == NULL || v->dead)
		return;
	v->paused = on != 0;
	if (!v->paused)
		viewer_kick(v);
}

int
api_viewer_is_writer(const struct api_viewer *v)
{
	return v != NULL && v->t != NULL && v->t->writer == v;
}

/* ------------------------------------------------------------------ */
/* Input and control                                                   */

/* Sends what the input queue holds, as far as the session takes it. */
static void
input_flush(struct api_term *t)
{
	struct api_viewer *v;
	size_t before = evbuffer_get_length(t->inq);
	ssize_t w;

	while (t->op != NULL && evbuffer_get_length(t->inq) > 0) {
		w = sbx_session_write(t->op, t->inq, evbuffer_get_length(t->inq));
		if (w <= 0)
			break;
		/* The driver drains what it moved (the contract); a driver
		 * that copies instead is drained here. */
		if (evbuffer_get_length(t->inq) == before)
			evbuffer_drain(t->inq, (size_t)w);
		before = evbuffer_get_length(t->inq);
	}
	if (t->op != NULL && t->eof_asked && evbuffer_get_length(t->inq) == 0)
		sbx_session_close_input(t->op);
	if (evbuffer_get_length(t->inq) == 0) {
		t->delivering++;
		for (v = t->viewers; v != NULL; v = v->next)
			if (!v->dead && v->ops->room != NULL)
				v->ops->room(v->arg);
		t->delivering--;
		viewers_reap(t);
	}
}

int
term_input(struct api_term *t, const unsigned char *p, size_t n,
    struct sbx_err *err)
{
	if (term_ended(t) || t->op == NULL || t->eof_asked)
		return sbx_err_set(err, SBX_E_CONFLICT, "Terminal %s has ended "
		    "or its input was closed.", t->id);
	if (evbuffer_get_length(t->inq) + n >
	    (size_t)t->s->cfg->terminal_input_max)
		return sbx_err_set(err, SBX_E_TOO_MANY, "Terminal %s has %zu "
		    "bytes of input waiting for the sandbox (terminal_input_max "
		    "is %lld); send again in a moment.", t->id,
		    evbuffer_get_length(t->inq), t->s->cfg->terminal_input_max);
	if (n > 0 && evbuffer_add(t->inq, p, n) == -1)
		return sbx_err_oom(err);
	input_flush(t);
	return 0;
}

int
term_control(struct api_term *t, const struct sbx_session_ctl *c,
    struct sbx_err *err)
{
	if (c->kind == SBX_SESSION_RESIZE) {
		if (!t->pty)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "Only a pty "
			    "terminal has a size.");
		if (c->cols < 1 || c->cols > 10000 || c->rows < 1 ||
		    c->rows > 10000)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "cols and rows "
			    "must be 1 to 10000.");
	} else if (c->kind == SBX_SESSION_SIGNAL) {
		if (c->signo < 1 || c->signo > 64)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "signal must be "
			    "1 to 64.");
	} else
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Unknown control.");
	if (term_ended(t) || t->op == NULL)
		return sbx_err_set(err, SBX_E_CONFLICT, "Terminal %s has ended.",
		    t->id);
	if (sbx_session_control(t->op, c, err) == -1)
		return -1;
	if (c->kind == SBX_SESSION_RESIZE) {
		t->cols = c->cols;
		t->rows = c->rows;
	}
	return 0;
}

int
term_eof(struct api_term *t)
{
	if (term_ended(t) || t->op == NULL)
		return -1;
	if (!t->pty)
		t->eof_asked = 1;
	input_flush(t);
	return 0;
}

static int
writer_check(struct api_viewer *v, struct sbx_err *err)
{
	if (v == NULL || v->dead || v->t == NULL)
		return sbx_err_set(err, SBX_E_CONFLICT, "This viewer is detached.");
	if (v->t->writer != v)
		return sbx_err_set(err, SBX_E_FORBIDDEN, "Another viewer is this "
		    "terminal's writer; this one is read-only until it leaves.");
	return 0;
}

int
api_term_input(struct api_viewer *v, const unsigned char *p, size_t n,
    struct sbx_err *err)
{
	if (writer_check(v, err) == -1)
		return -1;
	return term_input(v->t, p, n, err);
}

int
api_term_control(struct api_viewer *v, const struct sbx_session_ctl *c,
    struct sbx_err *err)
{
	if (writer_check(v, err) == -1)
		return -1;
	return term_control(v->t, c, err);
}

int
api_term_eof(struct api_viewer *v)
{
	struct sbx_err e;

	sbx_err_clear(&e);
	if (writer_check(v, &e) == -1)
		return -1;
	return term_eof(v->t);
}

/* ------------------------------------------------------------------ */
/* The session's sink                                                  */

static void
t_start(void *arg, const char *exec_id)
{
	struct api_term *t = arg;
	struct areq *a = t->creator;
	char loc[256];

	(void)exec_id;
	t->creator = NULL;
	if (a != NULL) {
		a->tcreate = NULL;
		snprintf(loc, sizeof(loc), "/api/v1/npcs/%s/sandbox/terminals/%s",
		    t->npc, t->id);
		sbx_httpd_header(&a->h, "Location", loc);
		areq_reply_json(a, 201, term_json(t));
	}
	if (t->started != NULL) {
		api_term_started_fn fn = t->started;

		t->started = NULL;
		fn(t->started_arg, t, NULL);
	}
	idle_arm(t);
	viewers_tell(t);
	log_info("terminal started", "terminal_id", t->id, "npc", t->npc, NULL);
}

static void
t_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct api_term *t = arg;
	struct term_cut before;
	uint64_t off = t->total;

	if (len == 0 || (stream != 1 && stream != 2))
		return;
	if (t->creator != NULL || t->started != NULL)
		t_start(t, "");
	api_metrics_stream_bytes(&t->s->metrics, stream, len);
	before = t->cut_live[stream - 1];
	log_append(t, stream, buf, len, &before);
	if (!t->ring_in)
		t->ring_in = 1;
	ring_append(t, stream, off, buf, len, &before);
	term_cut_feed(&t->cut_live[stream - 1], buf, len);
	t->total += len;
	t->active_ms = sbx_mono_ms();
	viewers_deliver(t, stream, off, buf, len);
}

static void
t_exit(void *arg, const struct sbx_exit *ex)
{
	struct api_term *t = arg;

	t->op = NULL;
	if (t->creator != NULL || t->started != NULL)
		t_start(t, "");
	t->code = ex->code;
	snprintf(t->signal, sizeof(t->signal), "%s", ex->signal != NULL ?
	    ex->signal : "");
	term_end(t, "exited", NULL, NULL);
}

static void
t_error(void *arg, const struct sbx_err *err)
{
	struct api_term *t = arg;
	struct areq *a = t->creator;

	t->op = NULL;
	if (t->started != NULL) {
		/* Refused before it started: its opener is told, no record. */
		api_term_started_fn fn = t->started;
		void *sarg = t->started_arg;

		t->started = NULL;
		snprintf(t->state, sizeof(t->state), "failed");
		term_forget(t);
		fn(sarg, NULL, err);
		return;
	}
	if (a != NULL) {
		/* Refused before it started: the POST gets the error (a
		 * not_running wakes the sandbox and runs the POST again,
		 * adr/0033) and no record is kept. */
		t->creator = NULL;
		a->tcreate = NULL;
		snprintf(t->state, sizeof(t->state), "failed");
		term_forget(t);
		areq_fail_broker(a, err);
		return;
	}
	api_metrics_broker_error(&t->s->metrics, err->code);
	term_end(t, strcmp(err->code, SBX_E_TIMEOUT) == 0 ? "timeout" :
	    "failed", err->code, err->message[0] != '\0' ? err->message :
	    err->code);
}

static void
t_room(void *arg)
{
	input_flush(arg);
}

/* ------------------------------------------------------------------ */
/* Life                                                                */

void
term_end(struct api_term *t, const char *state, const char *code,
    const char *message)
{
	static const struct timeval soon = { 0, 0 };
	struct api_viewer *v;

	snprintf(t->state, sizeof(t->state), "%s", state);
	if (code != NULL) {
		snprintf(t->reason_code, sizeof(t->reason_code), "%s", code);
		snprintf(t->reason, sizeof(t->reason), "%s", message);
	}
	t->ended_at = sbx_wall_ms();
	if (t->fd >= 0) {
		close(t->fd);
		t->fd = -1;
	}
	evbuffer_drain(t->inq, evbuffer_get_length(t->inq));
	t->writer = NULL;
	if (t->idle_ev != NULL)
		event_del(t->idle_ev);
	meta_write(t);
	log_info("terminal ended", "terminal_id", t->id, "npc", t->npc,
	    "state", state, NULL);
	for (v = t->viewers; v != NULL; v = v->next)
		if (!v->dead && !v->paused && !evtimer_pending(v->catchup, NULL))
			viewer_maybe_end(v);
	viewers_reap(t);
	if (viewers_live(t) == 0)
		ring_free(t);
	/* The record bounds may remove an older ended terminal now. */
	if (t->s->terms_sweep != NULL)
		evtimer_add(t->s->terms_sweep, &soon);
}

void
term_kill(struct api_term *t, const char *who)
{
	struct sbx_op *op = t->op;
	char msg[160];

	if (term_ended(t) || t->creator != NULL || t->started != NULL)
		return;
	t->op = NULL;
	/* Cancelling closes the session: the broker kills the process tree. */
	sbx_op_cancel(op);
	snprintf(msg, sizeof(msg), "Killed by %s (DELETE).", who);
	snprintf(t->signal, sizeof(t->signal), "KILL");
	term_end(t, "killed", SBX_E_CANCELLED, msg);
}

/* terminal_idle without a viewer and without output: killed. */
static void
idle_fire(evutil_socket_t fd, short what, void *arg)
{
	struct api_term *t = arg;
	struct sbx_op *op;
	int64_t left = t->s->cfg->terminal_idle - (sbx_mono_ms() - t->active_ms);
	char ms[32];

	(void)fd;
	(void)what;
	if (term_ended(t) || viewers_live(t) > 0)
		return;
	if (left > 0) {
		struct timeval tv = { left / 1000, (left % 1000) * 1000 };

		evtimer_add(t->idle_ev, &tv);
		return;
	}
	snprintf(ms, sizeof(ms), "%lld", t->s->cfg->terminal_idle);
	log_info("terminal idle; killed", "terminal_id", t->id,
	    "terminal_idle_ms", ms, NULL);
	op = t->op;
	t->op = NULL;
	sbx_op_cancel(op);
	term_end(t, "ended", "idle", "No viewer and no output for "
	    "terminal_idle; the terminal was killed.");
}

static void
idle_arm(struct api_term *t)
{
	long long ms = t->s->cfg->terminal_idle;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (t->idle_ev != NULL && !term_ended(t) && t->creator == NULL &&
	    t->started == NULL && viewers_live(t) == 0)
		evtimer_add(t->idle_ev, &tv);
}

static void
tickets_free(struct api_term *t)
{
	struct tticket *k;

	while ((k = t->tickets) != NULL) {
		t->tickets = k->next;
		sodium_memzero(k, sizeof(*k));
		free(k);
	}
}

/* Frees t (unlinked, not running); its viewers are left detached. */
void
term_free(struct api_term *t)
{
	struct api_viewer *v;

	while ((v = t->viewers) != NULL) {
		t->viewers = v->next;
		v->t = NULL;
		v->next = NULL;
		if (v->dead)
			viewer_free(v);
	}
	if (t->fd >= 0)
		close(t->fd);
	ring_free(t);
	tickets_free(t);
	if (t->idle_ev != NULL)
		event_free(t->idle_ev);
	if (t->inq != NULL)
		evbuffer_free(t->inq);
	free(t);
}

void
term_unlink(struct api_term *t)
{
	if (t->prev != NULL)
		t->prev->next = t->next;
	else
		t->s->terms = t->next;
	if (t->next != NULL)
		t->next->prev = t->prev;
	t->prev = t->next = NULL;
}

/* Removes t's files and record. Its viewers get ended (if not yet) and
 * are left detached (their transports free them). */
void
term_forget(struct api_term *t)
{
	char path[1024];
	struct api_viewer *v;
	struct sbx_err e;
	DIR *d;
	struct dirent *de;

	sbx_err_clear(&e);
	sbx_err_set(&e, SBX_E_NOT_FOUND, "The terminal's record was removed "
	    "(terminal_retention, terminal_records_per_principal).");
	t->delivering++;   /* a callback that detaches does not free yet */
	for (v = t->viewers; v != NULL; v = v->next)
		if (!v->dead && !v->ended_sent) {
			v->ended_sent = 1;
			v->ops->ended(v->arg, t->state, t->code, NULL, &e);
		}
	t->delivering--;
	viewers_reap(t);
	term_path(path, sizeof(path), t, NULL);
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			term_path(path, sizeof(path), t, de->d_name);
			unlink(path);
		}
		closedir(d);
	}
	term_path(path, sizeof(path), t, NULL);
	rmdir(path);
	term_unlink(t);
	term_free(t);
}

unsigned
term_running_of(struct api_server *s, const char *by)
{
	struct api_term *t;
	unsigned n = 0;

	for (t = s->terms; t != NULL; t = t->next)
		if (!term_ended(t) && strcmp(t->by, by) == 0)
			n++;
	return n;
}

/* A new record in memory (not linked). */
struct api_term *
term_alloc(struct api_server *s)
{
	struct api_term *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	t->s = s;
	t->fd = -1;
	t->told_viewers = -1;
	t->code = -1;
	t->seg_cur = t->seg_prev = UINT64_MAX;
	if ((t->inq = evbuffer_new()) == NULL ||
	    (t->idle_ev = evtimer_new(s->base, idle_fire, t)) == NULL) {
		term_free(t);
		return NULL;
	}
	return t;
}

void
term_link(struct api_term *t)
{
	struct api_server *s = t->s;

	t->next = s->terms;
	if (s->terms != NULL)
		s->terms->prev = t;
	s->terms = t;
}

/* on_end of the creating POST: the terminal forgets it. */
static void
creator_end(struct areq *a)
{
	if (a->tcreate != NULL)
		a->tcreate->creator = NULL;
	a->tcreate = NULL;
}

int
term_open(struct areq *a, const struct sbx_session_req *req,
    const char *argv_preview, api_term_started_fn started, void *arg,
    struct sbx_err *err)
{
	struct api_server *s = a->s;
	struct api_term *t;
	struct sbx_sink sink;
	unsigned char rnd[12];
	char path[1024];

	if (term_running_of(s, a->who.name) >=
	    (unsigned)s->cfg->terminals_per_principal)
		return sbx_err_set(err, SBX_E_TOO_MANY, "You have %lld terminals "
		    "running (terminals_per_principal); end one (DELETE "
		    ".../terminals/ID) before starting another.",
		    s->cfg->terminals_per_principal);
	if ((t = term_alloc(s)) == NULL)
		return sbx_err_oom(err);
	randombytes_buf(rnd, sizeof(rnd));
	t->id[0] = 't';
	sodium_bin2hex(t->id + 1, sizeof(t->id) - 1, rnd, sizeof(rnd));
	snprintf(t->npc, sizeof(t->npc), "%s", a->npc.name);
	snprintf(t->sandbox_id, sizeof(t->sandbox_id), "%s", a->npc.sandbox_id);
	snprintf(t->by, sizeof(t->by), "%s", a->who.name);
	t->owner_id = a->npc.owner_id;
	snprintf(t->argv_preview, sizeof(t->argv_preview), "%s", argv_preview);
	t->pty = req->kind == SBX_SESSION_PTY;
	t->cols = req->cols;
	t->rows = req->rows;
	snprintf(t->term, sizeof(t->term), "%s", req->term != NULL ? req->term :
	    "xterm-256color");
	snprintf(t->state, sizeof(t->state), "running");
	t->created_at = sbx_wall_ms();
	t->active_ms = sbx_mono_ms();
	t->ring_in = 1;
	term_path(path, sizeof(path), t, NULL);
	if (mkdir(path, 0700) == -1) {
		log_error("cannot create a terminal directory", "error",
		    strerror(errno), NULL);
		term_free(t);
		return sbx_err_set(err, SBX_E_INTERNAL, "The api cannot store the "
		    "terminal's scrollback.");
	}
	term_link(t);
	meta_write(t);
	if (started == NULL) {
		t->creator = a;
		a->tcreate = t;
		a->on_end = creator_end;
	} else {
		t->started = started;
		t->started_arg = arg;
	}
	sink = (struct sbx_sink){ .start = t_start, .output = t_output,
	    .exit = t_exit, .error = t_error, .arg = t, .room = t_room };
	/* The op belongs to t, not to the request: the terminal outlives it. */
	t->op = sbx_session_open(s->driver, t->sandbox_id, req, &sink, err);
	if (t->op == NULL) {
		t->creator = NULL;
		t->started = NULL;
		if (started == NULL)
			a->tcreate = NULL;
		snprintf(t->state, sizeof(t->state), "failed");
		term_forget(t);
		return started == NULL ? areq_broker_err(a) : -1;
	}
	return 0;
}

int
term_create(struct areq *a, const struct sbx_session_req *req,
    const char *argv_preview, struct sbx_err *err)
{
	return term_open(a, req, argv_preview, NULL, NULL, err);
}

struct api_term *
api_term_find(struct api_server *s, const char *npc, const char *id,
    struct sbx_err *err)
{
	struct api_npc n;
	struct api_term *t;
	int r = api_npc_name_valid(npc) ? api_store_npc_get(s->store, npc, &n,
	    err) : 0;

	if (r == -1)
		return NULL;
	for (t = s->terms; r == 1 && t != NULL; t = t->next)
		if (strcmp(t->id, id) == 0 && strcmp(t->npc, npc) == 0 &&
		    t->owner_id == n.owner_id)
			return t;
	sbx_err_set(err, SBX_E_NOT_FOUND, "That NPC has no terminal with that "
	    "id.");
	return NULL;
}

struct api_term *
term_of(struct areq *a, struct sbx_err *err)
{
	struct api_term *t;

	for (t = a->s->terms; t != NULL; t = t->next)
		if (strcmp(t->id, a->exec_id) == 0 &&
		    strcmp(t->npc, a->npc.name) == 0 &&
		    t->owner_id == a->npc.owner_id)
			return t;
	sbx_err_set(err, SBX_E_NOT_FOUND, "That NPC has no terminal with that "
	    "id.");
	return NULL;
}

