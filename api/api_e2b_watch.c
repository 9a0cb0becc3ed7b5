/* api_e2b_watch.c - E2B's watches (api_e2b_fs.h, adr/0061): WatchDir streams and CreateWatcher/GetWatcherEvents/RemoveWatcher polling watchers, each the helper's inotify mode in a terminal session of the sandbox, its lines read as events into the stream or a bounded buffer. May touch the driver's sessions (sbx_driver.h), the Connect core (api_connect.h), the server's watch list and a principal's stream shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "api_connect.h"
#include "api_e2b_fs.h"
#include "api_e2b_fs_int.h"
#include "api_e2b_path.h"
#include "api_int.h"
#include "sbx_driver.h"
#include "sbx_helper_proto.h"
#include "sbx_path.h"

#define WATCH_LINE_MAX 8192     /* bytes of one watch line */
#define WATCH_HIGH_WATER (256 * 1024) /* bytes queued to a WatchDir client: pause */
#define WATCHER_ID_LEN 16       /* hex digits of a watcher id */

/* ------------------------------------------------------------------ */
/* Watches: WatchDir streams and CreateWatcher watchers                */

struct api_e2b_watch {
	struct api_server *s;
	struct api_e2b_watch *next;
	char sandbox[64];          /* the driver's sandbox id */
	int64_t owner;
	char id[WATCHER_ID_LEN + 1]; /* watchers; "" for a WatchDir stream */
	struct sbx_op *op;
	struct event *timer;       /* e2b_watch_timeout */
	struct api_connect_call *c; /* the stream, or CreateWatcher until started */
	struct evbuffer *buf;      /* stdout not yet a whole line */
	struct evbuffer *errb;
	int started;
	int paused;
	int stream_slot;           /* holds one of owner's streams */
	/* a watcher's buffer */
	json_t *events;
	int lost;                  /* the buffer or the kernel's queue overflowed */
	int ended;
	struct sbx_err end_err;    /* why it ended (code "" : the directory went) */
};

static unsigned
watches_of(const struct api_server *s, const char *sandbox)
{
	const struct api_e2b_watch *w;
	unsigned n = 0;

	for (w = s->e2b_watches; w != NULL; w = w->next)
		if (strcmp(w->sandbox, sandbox) == 0)
			n++;
	return n;
}

static void
watch_unlink_free(struct api_e2b_watch *w)
{
	struct api_e2b_watch **pp;

	for (pp = &w->s->e2b_watches; *pp != NULL; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	if (w->op != NULL)
		sbx_op_cancel(w->op);
	if (w->timer != NULL)
		event_free(w->timer);
	if (w->stream_slot)
		api_streams_put(w->s, w->owner);
	if (w->buf != NULL)
		evbuffer_free(w->buf);
	if (w->errb != NULL)
		evbuffer_free(w->errb);
	json_decref(w->events);
	free(w);
}

static const char *
event_type(const char *op)
{
	if (strcmp(op, "create") == 0)
		return "EVENT_TYPE_CREATE";
	if (strcmp(op, "write") == 0)
		return "EVENT_TYPE_WRITE";
	if (strcmp(op, "remove") == 0)
		return "EVENT_TYPE_REMOVE";
	if (strcmp(op, "rename") == 0)
		return "EVENT_TYPE_RENAME";
	if (strcmp(op, "chmod") == 0)
		return "EVENT_TYPE_CHMOD";
	return NULL;
}

/* The watch's timer: e2b_watch_timeout from now. */
static void
watch_arm(struct api_e2b_watch *w)
{
	struct timeval tv;

	tv.tv_sec = (time_t)(w->s->cfg->e2b_watch_timeout / 1000);
	tv.tv_usec = (suseconds_t)(w->s->cfg->e2b_watch_timeout % 1000) * 1000;
	evtimer_add(w->timer, &tv);
}

/* The call of a stream or a CreateWatcher not answered yet ends with err. */
static void
watch_call_fail(struct api_e2b_watch *w, const struct sbx_err *err)
{
	struct api_connect_call *c = w->c;

	w->c = NULL;
	if (c == NULL)
		return;
	api_connect_on_cancel(c, NULL, NULL);
	if (w->id[0] == '\0' && w->started)
		api_connect_end(c, err->code[0] != '\0' ? api_e2b_fs_code(err) : NULL,
		    err->code[0] != '\0' ? err->message : NULL);
	else
		api_connect_error(c, api_e2b_fs_code(err), err->message);
}

/* The watch ended (err: why; code "" when its directory went). */
static void
watch_ended(struct api_e2b_watch *w, const struct sbx_err *err)
{
	w->op = NULL;
	if (w->id[0] != '\0' && w->started) {
		/* A watcher stays until GetWatcherEvents has taken its events,
		 * or e2b_watch_timeout more has passed. */
		w->ended = 1;
		w->end_err = *err;
		watch_arm(w);
		return;
	}
	watch_call_fail(w, err);
	watch_unlink_free(w);
}

/* One line of the helper's watch mode. Returns -1 when w was freed. */
static int
watch_line(struct api_e2b_watch *w, const char *line, size_t n)
{
	json_t *o = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL), *ev;
	const char *name = api_e2b_jstr(o, "name"), *op = api_e2b_jstr(o, "op");
	const char *type = op != NULL ? event_type(op) : NULL;
	struct sbx_err err;
	int rc = 0;

	sbx_err_clear(&err);
	if (json_is_true(json_object_get(o, "start")) && !w->started) {
		w->started = 1;
		if (w->id[0] != '\0') {
			api_connect_on_cancel(w->c, NULL, NULL);
			api_connect_reply(w->c, json_pack("{s:s}", "watcherId", w->id));
			w->c = NULL;
		} else if (api_connect_send(w->c, json_pack("{s:{}}", "start")) == -1)
			rc = -1;
	} else if (json_is_true(json_object_get(o, "overflow"))) {
		w->lost = 1;
		if (w->id[0] == '\0') {
			sbx_err_set(&err, SBX_E_TOO_MANY, "Events were lost: the "
			    "sandbox's inotify queue overflowed; watch again.");
			sbx_op_cancel(w->op);
			watch_ended(w, &err);
			rc = -1;
		}
	} else if (name != NULL && type != NULL && w->started) {
		ev = json_pack("{s:s, s:s}", "name", name, "type", type);
		if (w->id[0] == '\0') {
			if (api_connect_send(w->c, json_pack("{s:o}", "filesystem", ev)) == -1)
				rc = -1;
			else if (!w->paused &&
			    api_connect_queued(w->c) > WATCH_HIGH_WATER) {
				w->paused = 1;
				sbx_op_pause(w->op);
			}
		} else if (json_array_size(w->events) >=
		    (size_t)w->s->cfg->e2b_watcher_events_max) {
			w->lost = 1;
			json_decref(ev);
		} else
			json_array_append_new(w->events, ev);
	}
	json_decref(o);
	return rc;
}

static void
watch_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct api_e2b_watch *w = arg;
	struct sbx_err err;
	char *line;
	size_t n;

	if (stream != 1) {
		if (evbuffer_get_length(w->errb) + len <= ERR_MAX)
			evbuffer_add(w->errb, buf, len);
		return;
	}
	evbuffer_add(w->buf, buf, len);
	/* A terminal's lines (ONLCR: "\r\n"); the helper's error line comes
	 * on the same stream. */
	while ((line = evbuffer_readln(w->buf, &n, EVBUFFER_EOL_CRLF)) != NULL) {
		int gone = 0;

		if (n > 13 && memcmp(line, "{\"sbx_helper\":", 14) == 0) {
			if (evbuffer_get_length(w->errb) + n + 1 <= ERR_MAX) {
				evbuffer_add(w->errb, line, n);
				evbuffer_add(w->errb, "\n", 1);
			}
		} else if (n <= WATCH_LINE_MAX)
			gone = watch_line(w, line, n);
		free(line);
		if (gone == -1)
			return;   /* w is freed, or its stream's client left */
	}
	if (evbuffer_get_length(w->buf) > WATCH_LINE_MAX) {
		sbx_err_set(&err, SBX_E_INTERNAL, "The sandbox's sbx-helper "
		    "wrote a watch line longer than %d bytes.", WATCH_LINE_MAX);
		sbx_op_cancel(w->op);
		watch_ended(w, &err);
	}
}

static void
watch_exit(void *arg, const struct sbx_exit *ex)
{
	struct api_e2b_watch *w = arg;
	struct sbx_err err;

	sbx_err_clear(&err);
	if (ex->code != 0 || ex->signal != NULL)
		api_e2b_helper_error(w->errb, ex->code, &err);
	else if (!w->started)
		sbx_err_set(&err, SBX_E_INTERNAL, "The sandbox's sbx-helper ended "
		    "the watch before it started.");
	watch_ended(w, &err);
}

static void
watch_error(void *arg, const struct sbx_err *in)
{
	struct api_e2b_watch *w = arg;
	struct sbx_err err;

	api_e2b_run_error(in, &err);
	watch_ended(w, &err);
}

static void
watch_timed_out(evutil_socket_t fd, short what, void *arg)
{
	struct api_e2b_watch *w = arg;
	struct sbx_err err;

	(void)fd;
	(void)what;
	if (w->ended) {
		watch_unlink_free(w);   /* nobody took its events */
		return;
	}
	sbx_err_set(&err, SBX_E_TIMEOUT, "The watch reached its time limit "
	    "(e2b_watch_timeout); watch again.");
	sbx_op_cancel(w->op);
	watch_ended(w, &err);
}

/* The client of a stream, or of a CreateWatcher not answered, left. */
static void
watch_cancelled(void *arg)
{
	struct api_e2b_watch *w = arg;

	w->c = NULL;
	watch_unlink_free(w);
}

static void
watch_drained(void *arg)
{
	struct api_e2b_watch *w = arg;

	if (w->paused && w->op != NULL) {
		w->paused = 0;
		sbx_op_resume(w->op);
	}
}

static void
watch_start(struct areq *a, struct api_connect_call *c, json_t *msg, int watcher)
{
	const json_t *p = json_object_get(msg, "path"), *r = json_object_get(msg, "recursive");
	char path[SBX_PATH_MAX + 1];
	const char *argv[] = { SBX_HELPER_PATH, SBX_HELPER_MODE_WATCH, path, NULL, NULL };
	struct api_e2b_watch *w;
	struct sbx_session_req req;
	struct sbx_sink sink;
	struct sbx_err err;
	unsigned char rnd[WATCHER_ID_LEN / 2];

	sbx_err_clear(&err);
	if ((p != NULL && !json_is_string(p)) || (r != NULL && !json_is_boolean(r))) {
		api_connect_error(c, "invalid_argument", "path must be a string and "
		    "recursive a boolean.");
		return;
	}
	if (api_e2b_path(p != NULL ? json_string_value(p) : NULL, path, sizeof(path),
	    &err) == -1) {
		api_connect_error(c, api_e2b_fs_code(&err), err.message);
		return;
	}
	if (json_is_true(r))
		argv[3] = "--recursive";
	if (watches_of(a->s, a->npc.sandbox_id) >=
	    (unsigned)a->s->cfg->e2b_watchers_per_sandbox) {
		api_connect_error(c, "resource_exhausted", "This sandbox has as many "
		    "watches open as it may (e2b_watchers_per_sandbox); stop one "
		    "first.");
		return;
	}
	if ((w = calloc(1, sizeof(*w))) == NULL || (w->buf = evbuffer_new()) == NULL ||
	    (w->errb = evbuffer_new()) == NULL ||
	    (watcher && (w->events = json_array()) == NULL)) {
		if (w != NULL) {
			if (w->buf != NULL)
				evbuffer_free(w->buf);
			if (w->errb != NULL)
				evbuffer_free(w->errb);
			free(w);
		}
		api_connect_error(c, "internal", "Out of memory.");
		return;
	}
	w->s = a->s;
	w->owner = a->who.id;
	w->c = c;
	snprintf(w->sandbox, sizeof(w->sandbox), "%s", a->npc.sandbox_id);
	if (watcher) {
		randombytes_buf(rnd, sizeof(rnd));
		sodium_bin2hex(w->id, sizeof(w->id), rnd, sizeof(rnd));
	}
	w->next = a->s->e2b_watches;
	a->s->e2b_watches = w;
	/* A watcher outlives its request: one of the owner's streams (a
	 * WatchDir's was taken by the Connect core for the request). */
	if (watcher) {
		if (api_streams_take(a->s, a->who.id, &err) == -1) {
			watch_call_fail(w, &err);
			watch_unlink_free(w);
			return;
		}
		w->stream_slot = 1;
	}
	if ((w->timer = evtimer_new(a->s->base, watch_timed_out, w)) == NULL) {
		sbx_err_oom(&err);
		watch_call_fail(w, &err);
		watch_unlink_free(w);
		return;
	}
	/* A terminal session: the only exec without the broker's exec
	 * timeout (its ceiling may be shorter than a watch) or output cap;
	 * the api's own timer bounds its life (adr/0061). */
	memset(&req, 0, sizeof(req));
	memset(&sink, 0, sizeof(sink));
	req.kind = SBX_SESSION_PTY;
	req.exec.argv = argv;
	req.cols = 80;
	req.rows = 24;
	sink.start = api_e2b_no_start;
	sink.output = watch_output;
	sink.exit = watch_exit;
	sink.error = watch_error;
	sink.arg = w;
	w->op = sbx_session_open(a->s->driver, a->npc.sandbox_id, &req, &sink, &err);
	if (w->op == NULL) {
		struct sbx_err e2;

		api_e2b_run_error(&err, &e2);
		watch_call_fail(w, &e2);
		watch_unlink_free(w);
		return;
	}
	watch_arm(w);
	api_connect_on_cancel(c, watch_cancelled, w);
	if (!watcher)
		api_connect_on_drain(c, watch_drained, w);
}

void
api_e2b_fs_watch_dir(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	watch_start(a, c, msg, 0);
}

void
api_e2b_fs_create_watcher(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	watch_start(a, c, msg, 1);
}

/* The watcher msg names, of a's sandbox; NULL after answering not_found. */
static struct api_e2b_watch *
watcher_find(struct areq *a, struct api_connect_call *c, const json_t *msg)
{
	const char *id = api_e2b_jstr(msg, "watcherId");
	struct api_e2b_watch *w;

	for (w = a->s->e2b_watches; id != NULL && w != NULL; w = w->next)
		if (w->id[0] != '\0' && w->started &&
		    strcmp(w->id, id) == 0 && strcmp(w->sandbox, a->npc.sandbox_id) == 0)
			return w;
	api_connect_error(c, "not_found", "No such watcher in this sandbox (it "
	    "was removed, or it ended and its events were taken).");
	return NULL;
}

void
api_e2b_fs_get_watcher_events(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	struct api_e2b_watch *w = watcher_find(a, c, msg);
	struct sbx_err err;
	json_t *evs;

	if (w == NULL)
		return;
	if (json_array_size(w->events) == 0 && (w->lost || w->ended)) {
		if (w->lost)
			sbx_err_set(&err, SBX_E_TOO_MANY, "Events were lost: more than "
			    "%lld waited (e2b_watcher_events_max) or the sandbox's "
			    "inotify queue overflowed; create a new watcher.",
			    a->s->cfg->e2b_watcher_events_max);
		else if (w->end_err.code[0] != '\0')
			err = w->end_err;
		else
			sbx_err_set(&err, SBX_E_NOT_FOUND, "The watched directory "
			    "is gone; the watcher ended.");
		api_connect_error(c, api_e2b_fs_code(&err), err.message);
		watch_unlink_free(w);
		return;
	}
	evs = w->events;
	if ((w->events = json_array()) == NULL) {
		w->events = evs;
		api_connect_error(c, "internal", "Out of memory.");
		return;
	}
	api_connect_reply(c, json_pack("{s:o}", "events", evs));
}

void
api_e2b_fs_remove_watcher(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	struct api_e2b_watch *w = watcher_find(a, c, msg);

	if (w == NULL)
		return;
	watch_unlink_free(w);
	api_connect_reply(c, json_object());
}

static void
watches_stop(struct api_server *s, int answer)
{
	struct api_e2b_watch *w;
	struct sbx_err err;

	sbx_err_set(&err, SBX_E_SHUTTING_DOWN, "The api is shutting down; "
	    "watch again in a moment.");
	while ((w = s->e2b_watches) != NULL) {
		/* The request layer ends the calls still open (abandon or
		 * drain): their hooks must not run into a freed watch. */
		if (answer)
			watch_call_fail(w, &err);
		else if (w->c != NULL)
			api_connect_on_cancel(w->c, NULL, NULL);
		w->c = NULL;
		watch_unlink_free(w);
	}
}

void
api_e2b_fs_drain(struct api_server *s)
{
	watches_stop(s, 1);
}

void
api_e2b_fs_close(struct api_server *s)
{
	watches_stop(s, 0);
}
