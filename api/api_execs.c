/* api_execs.c - sandbox-api execs as resources: a durable, bounded, segmented SSE event log per exec, resumable viewers, browser tickets (SPEC §8; ADR 0015). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <sodium.h>

#include "api_int.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"
#include "sbx_sse.h"
#include "sbx_token.h"
#include "sbx_time.h"
#include "api_execs_int.h"

static void exec_end(struct api_exec *x, const char *state);
static void creator_end(struct areq *a);

/* Viewers waiting at the end of x's log read on. A pump may end its
 * viewer (freed then): the next one is taken first. */
static void
wake_viewers(struct api_exec *x)
{
	struct ax_viewer *v, *next;

	for (v = x->viewers; v != NULL; v = next) {
		next = v->next;
		if (v->waiting) {
			v->waiting = 0;
			v->pump(v);
		}
	}
}


static uint64_t
seg_size(const struct api_server *s)
{
	uint64_t z = (uint64_t)s->cfg->exec_log_max / 8;

	return z < SEG_MIN ? SEG_MIN : z > SEG_MAX ? SEG_MAX : z;
}

void
ax_exec_path(char *buf, size_t cap, const struct api_exec *x, const char *file)
{
	snprintf(buf, cap, "%s/%s%s%s", x->s->execs_dir, x->id,
	    file != NULL ? "/" : "", file != NULL ? file : "");
}

void
ax_seg_path(char *buf, size_t cap, const struct api_exec *x, uint64_t first)
{
	char name[32];

	snprintf(name, sizeof(name), "%020" PRIu64 ".log", first);
	ax_exec_path(buf, cap, x, name);
}

/* ------------------------------------------------------------------ */
/* Records                                                             */

json_t *
ax_exec_json(const struct api_exec *x)
{
	json_t *o;
	char url[256];
	int ended = strcmp(x->state, "running") != 0;

	snprintf(url, sizeof(url), "/api/v1/npcs/%s/sandbox/execs/%s/events",
	    x->npc, x->id);
	o = json_pack("{s:s,s:s,s:s,s:s,s:b,s:s,s:I,s:o}",
	    "exec_id", x->id, "npc", x->npc, "state", x->state,
	    "argv_preview", x->argv_preview, "argv_truncated", x->argv_cut,
	    "events_url", url, "started_at",
	    (json_int_t)x->started_at, "ended_at", x->ended_at != 0 ?
	    json_integer(x->ended_at) : json_null());
	if (o == NULL)
		return NULL;
	json_object_set_new(o, "by", json_string(x->by));
	json_object_set_new(o, "exit_code", ended &&
	    strcmp(x->state, "exited") == 0 ? json_integer(x->code) :
	    json_null());
	json_object_set_new(o, "signal", x->signal[0] != '\0' ?
	    json_string(x->signal) : json_null());
	json_object_set_new(o, "truncated", json_boolean(x->truncated));
	json_object_set_new(o, "reason", x->reason[0] != '\0' ?
	    json_string(x->reason) : json_null());
	json_object_set_new(o, "bytes_out", json_integer((json_int_t)x->bytes_out));
	json_object_set_new(o, "log", json_pack("{s:I,s:I,s:I,s:I,s:b,s:o}",
	    "bytes", (json_int_t)x->log_bytes, "first_id",
	    (json_int_t)(x->segs != NULL ? x->segs->first_id : 0),
	    "last_id", (json_int_t)x->last_id,
	    "dropped_bytes", (json_int_t)x->dropped_bytes,
	    "output_dropped", x->dropped_bytes > 0 || x->removed[0] != '\0',
	    "removed", x->removed[0] != '\0' ? json_string(x->removed) :
	    json_null()));
	return o;
}

/* The reply about one exec (POST, GET one, DELETE): ax_exec_json and the
 * whole argv, read back from argv.json (null, logged, when unreadable). */
static json_t *
exec_json_one(const struct api_exec *x)
{
	json_t *o = ax_exec_json(x), *argv;
	char path[1024];

	if (o == NULL)
		return NULL;
	ax_exec_path(path, sizeof(path), x, "argv.json");
	if ((argv = json_load_file(path, 0, NULL)) == NULL)
		log_warn("cannot read an exec's argv", "exec_id", x->id, NULL);
	json_object_set_new(o, "argv", argv != NULL ? argv : json_null());
	return o;
}

void
ax_argv_preview(struct api_exec *x, const json_t *argv)
{
	size_t i, len, n = 0;
	const char *str;
	json_t *v;

	x->argv_cut = 0;
	json_array_foreach(argv, i, v) {
		if ((str = json_string_value(v)) == NULL)
			continue;
		if (i > 0 && n == ARGV_PREVIEW) {
			x->argv_cut = 1;
			break;
		}
		if (i > 0)
			x->argv_preview[n++] = ' ';
		len = strlen(str);
		if (len > ARGV_PREVIEW - n) {
			x->argv_cut = 1;
			len = ARGV_PREVIEW - n;
			/* A cut inside a character takes the whole character. */
			while (len > 0 && ((unsigned char)str[len] & 0xC0) == 0x80)
				len--;
		}
		memcpy(x->argv_preview + n, str, len);
		n += len;
		if (x->argv_cut)
			break;
	}
	x->argv_preview[n] = '\0';
}

int
ax_argv_write(const struct api_exec *x, const json_t *argv)
{
	char path[1024];
	int fd;

	ax_exec_path(path, sizeof(path), x, "argv.json");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || json_dumpfd(argv, fd, JSON_COMPACT) == -1 ||
	    close(fd) != 0) {
		if (fd >= 0)
			close(fd);
		log_error("cannot write an exec's argv", "exec_id", x->id,
		    "error", strerror(errno), NULL);
		return -1;
	}
	return 0;
}

void
ax_bounds_soon(struct api_server *s)
{
	struct timeval now = { 0, 0 };

	if (s->sweep_ev != NULL)
		evtimer_add(s->sweep_ev, &now);
}

void
ax_meta_write(struct api_exec *x)
{
	char path[1024], tmp[1040];
	json_t *o = ax_exec_json(x);
	int fd;

	if (o == NULL)
		return;
	json_object_set_new(o, "owner_id", json_integer(x->owner_id));
	json_object_set_new(o, "sandbox_id", json_string(x->sandbox_id));
	json_object_set_new(o, "dropped_events",
	    json_integer((json_int_t)x->dropped_events));
	ax_exec_path(path, sizeof(path), x, "meta.json");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || json_dumpfd(o, fd, JSON_COMPACT) == -1 || close(fd) != 0 ||
	    rename(tmp, path) == -1) {
		if (fd >= 0)
			close(fd);
		log_warn("cannot write an exec record", "exec_id", x->id,
		    "error", strerror(errno), NULL);
	}
	json_decref(o);
}

static void
segs_free(struct api_exec *x)
{
	struct seg *g;

	while ((g = x->segs) != NULL) {
		x->segs = g->next;
		free(g);
	}
	x->cur = NULL;
}

static void
tickets_free(struct api_exec *x)
{
	struct ticket *t;

	while ((t = x->tickets) != NULL) {
		x->tickets = t->next;
		sodium_memzero(t, sizeof(*t));
		free(t);
	}
}

void
ax_exec_unlink(struct api_exec *x)
{
	struct api_server *s = x->s;

	if (x->prev != NULL)
		x->prev->next = x->next;
	else
		s->execs = x->next;
	if (x->next != NULL)
		x->next->prev = x->prev;
	x->prev = x->next = NULL;
	s->nexecs--;
}

/* Frees x (already unlinked, no viewer, not running). */
void
ax_exec_free(struct api_exec *x)
{
	if (x->fd >= 0)
		close(x->fd);
	segs_free(x);
	tickets_free(x);
	free(x);
}

void
ax_log_remove(struct api_exec *x, const char *why)
{
	char path[1024];
	struct seg *g;

	for (g = x->segs; g != NULL; g = g->next) {
		ax_seg_path(path, sizeof(path), x, g->first_id);
		unlink(path);
	}
	x->s->log_total -= x->log_bytes;
	x->log_bytes = 0;
	segs_free(x);
	snprintf(x->removed, sizeof(x->removed), "%s", why);
	ax_meta_write(x);
	log_info("exec log removed", "exec_id", x->id, "reason", why, NULL);
}

void
ax_exec_forget(struct api_exec *x)
{
	char path[1024];
	struct ax_viewer *v;

	if (x->segs != NULL)
		ax_log_remove(x, "forgotten");
	ax_exec_path(path, sizeof(path), x, "meta.json");
	unlink(path);
	ax_exec_path(path, sizeof(path), x, "tickets");
	unlink(path);
	ax_exec_path(path, sizeof(path), x, "argv.json");
	unlink(path);
	ax_exec_path(path, sizeof(path), x, NULL);
	rmdir(path);
	/* Viewers of a forgotten exec end (they get 404 on their reconnect). */
	while ((v = x->viewers) != NULL) {
		x->viewers = v->next;
		v->x = NULL;
		v->next = NULL;
		if (v->a->h.req != NULL)
			v->pump(v);
	}
	ax_exec_unlink(x);
	ax_exec_free(x);
}

int
ax_ended(const struct api_exec *x)
{
	return strcmp(x->state, "running") != 0;
}

/* ------------------------------------------------------------------ */
/* The log writer                                                      */

/* Drops the oldest segment of x (never cur). */
static void
seg_drop_oldest(struct api_exec *x)
{
	struct seg *g = x->segs;
	struct ax_viewer *v;
	char path[1024];

	if (g == NULL || g == x->cur)
		return;
	for (v = x->viewers; v != NULL; v = v->next)
		if (v->seg_first == g->first_id)
			v->seg_last = g->last_id;
	ax_seg_path(path, sizeof(path), x, g->first_id);
	unlink(path);
	x->segs = g->next;
	x->log_bytes -= g->bytes;
	x->s->log_total -= g->bytes;
	x->dropped_bytes += g->bytes;
	x->dropped_events += g->last_id - g->first_id + 1;
	free(g);
	ax_meta_write(x);
}

/*
 * Appends one SSE event (ev, emptied) with id x->last_id + 1 to the log,
 * then wakes the viewers waiting for it. Returns 0 or -1 (logged).
 */
static int
log_append(struct api_exec *x, struct evbuffer *ev)
{
	struct api_server *s = x->s;
	size_t len = evbuffer_get_length(ev);
	struct seg *g;
	char path[1024];
	const unsigned char *p;
	ssize_t w;
	size_t off;

	if (x->cur == NULL || x->fd < 0 || x->cur->bytes >= seg_size(s)) {
		if ((g = calloc(1, sizeof(*g))) == NULL)
			goto fail;
		g->first_id = x->last_id + 1;
		ax_seg_path(path, sizeof(path), x, g->first_id);
		if (x->fd >= 0)
			close(x->fd);
		x->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND |
		    O_CLOEXEC, 0600);
		if (x->fd < 0) {
			free(g);
			goto fail;
		}
		if (x->cur != NULL)
			x->cur->next = g;
		else
			x->segs = g;
		x->cur = g;
	}
	while (x->log_bytes + len > (uint64_t)s->cfg->exec_log_max &&
	    x->segs != x->cur)
		seg_drop_oldest(x);
	p = evbuffer_pullup(ev, -1);
	for (off = 0; off < len; off += (size_t)w) {
		w = write(x->fd, p + off, len - off);
		if (w < 0 && errno == EINTR) {
			w = 0;
			continue;
		}
		if (w <= 0) {
			/* Cut what was written: the file holds whole events. */
			if (off > 0 && ftruncate(x->fd, (off_t)x->cur->bytes) == -1)
				log_warn("cannot cut a torn event", NULL);
			goto fail;
		}
	}
	evbuffer_drain(ev, len);
	x->last_id++;
	x->cur->last_id = x->last_id;
	x->cur->bytes += len;
	x->log_bytes += len;
	s->log_total += len;
	wake_viewers(x);
	return 0;
fail:
	log_error("cannot write an exec event log", "exec_id", x->id, "error",
	    strerror(errno), NULL);
	evbuffer_drain(ev, len);
	return -1;
}

/* Logs one NDJSON line (emptied) as the next SSE event. */
static void
log_line(struct api_exec *x, struct evbuffer *line)
{
	struct evbuffer *ev = evbuffer_new();
	struct sbx_err err;
	size_t len = evbuffer_get_length(line);

	sbx_err_clear(&err);
	if (ev != NULL && len > 0 && sbx_sse_from_own_ndjson(ev, x->last_id + 1,
	    (const char *)evbuffer_pullup(line, -1), len, &err) == 0)
		log_append(x, ev);
	evbuffer_drain(line, len);
	if (ev != NULL)
		evbuffer_free(ev);
}

/* ------------------------------------------------------------------ */
/* The exec's sink                                                     */

static void
x_start(void *arg, const char *exec_id)
{
	struct api_exec *x = arg;
	struct evbuffer *line = evbuffer_new();
	struct areq *a = x->creator;
	json_t *o;
	char loc[256];

	if (line != NULL && sbx_ndjson_start(line, exec_id, x->s->now_ms()) == 0)
		log_line(x, line);
	if (line != NULL)
		evbuffer_free(line);
	api_metrics_exec_started(&x->s->metrics);
	x->counted_ms = sbx_mono_ms();
	x->creator = NULL;
	if (a != NULL) {
		a->op = NULL;
		snprintf(loc, sizeof(loc), "/api/v1/npcs/%s/sandbox/execs/%s",
		    x->npc, x->id);
		sbx_httpd_header(&a->h, "Location", loc);
		o = exec_json_one(x);
		areq_reply_json(a, 201, o);
	}
	log_info("exec started", "exec_id", x->id, "npc", x->npc, NULL);
}

static void
x_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct api_exec *x = arg;
	struct evbuffer *line;
	size_t n, back;

	if (x->last_id == 0)
		x_start(x, "");
	if ((line = evbuffer_new()) == NULL)
		return;
	api_metrics_stream_bytes(&x->s->metrics, stream, len);
	x->bytes_out += len;
	/* Small events keep segments fine-grained and a resume cheap. */
	while (len > 0) {
		n = len < LOG_CHUNK ? len : LOG_CHUNK;
		/* Split between characters, so UTF-8 text stays text (SPEC §5). */
		for (back = 0; n < len && back < 3 && (buf[n] & 0xC0) == 0x80;
		    back++)
			n--;
		if (back == 3 && (buf[n] & 0xC0) == 0x80)
			n += 3;
		if (sbx_ndjson_output(line, stream, buf, n) == 0)
			log_line(x, line);
		buf += n;
		len -= n;
	}
	evbuffer_free(line);
}

/* An output event as the broker sent it (sbx_call_exec_lines, adr/0028):
 * logged as the next SSE event by copying, not decoded and re-encoded.
 * Its size is the broker's piece (at most SBX_NDJSON_MAX_CHUNK bytes of
 * output), not LOG_CHUNK. */
static void
x_output_line(void *arg, int stream, const char *line, size_t len,
    size_t nbytes)
{
	struct api_exec *x = arg;
	struct evbuffer *ev;
	struct sbx_err err;

	if (x->last_id == 0)
		x_start(x, "");
	if ((ev = evbuffer_new()) == NULL)
		return;
	api_metrics_stream_bytes(&x->s->metrics, stream, nbytes);
	x->bytes_out += nbytes;
	sbx_err_clear(&err);
	if (sbx_sse_from_output_line(ev, x->last_id + 1, line, len, &err) == 0)
		log_append(x, ev);
	evbuffer_free(ev);
	if (err.code[0] != '\0') {
		/* The driver checked it; refused again here, the exec ends
		 * as one whose broker sent garbage. */
		log_warn("refused an exec event from the broker", "exec_id",
		    x->id, "error", err.message, NULL);
		sbx_op_cancel(x->op);
		x->op = NULL;
		api_metrics_broker_error(&x->s->metrics,
		    SBX_E_BROKER_UNAVAILABLE);
		ax_end_with_error(x, "failed", SBX_E_BROKER_UNAVAILABLE,
		    "The sandbox broker's exec stream broke off or was "
		    "malformed.");
	}
}

static void
x_exit(void *arg, const struct sbx_exit *ex)
{
	struct api_exec *x = arg;
	struct evbuffer *line;

	x->op = NULL;
	if (x->last_id == 0)
		x_start(x, "");
	x->code = ex->code;
	x->truncated = ex->truncated;
	snprintf(x->signal, sizeof(x->signal), "%s", ex->signal != NULL ?
	    ex->signal : "");
	if ((line = evbuffer_new()) != NULL) {
		/* /work crossed its quota: the owner is told (adr/0057) */
		if (ex->work_quota > 0 && sbx_ndjson_quota(line, ex->work_bytes,
		    ex->work_quota) == 0)
			log_line(x, line);
		if (sbx_ndjson_exit(line, ex->code, ex->signal,
		    ex->duration_ms, ex->truncated) == 0)
			log_line(x, line);
		evbuffer_free(line);
	}
	exec_end(x, "exited");
}

/* Ends x with an error event (code, message) as its terminal event. */
void
ax_end_with_error(struct api_exec *x, const char *state, const char *code,
    const char *message)
{
	struct evbuffer *line;

	snprintf(x->reason, sizeof(x->reason), "%s: %s", code, message);
	if ((line = evbuffer_new()) != NULL) {
		if (sbx_ndjson_error(line, code, message) == 0)
			log_line(x, line);
		evbuffer_free(line);
	}
	exec_end(x, state);
}

static void
x_error(void *arg, const struct sbx_err *err)
{
	struct api_exec *x = arg;
	struct areq *a = x->creator;

	x->op = NULL;
	if (a != NULL) {
		/* Refused before it started (sandbox absent, stopped, limits):
		 * the POST gets the error and no record is kept. */
		x->creator = NULL;
		a->op = NULL;
		if (x->lim != NULL && x->lim->execs > 0)
			x->lim->execs--;
		x->lim = NULL;
		snprintf(x->state, sizeof(x->state), "failed");
		ax_exec_forget(x);
		areq_fail_broker(a, err);
		return;
	}
	api_metrics_broker_error(&x->s->metrics, err->code);
	ax_end_with_error(x, strcmp(err->code, SBX_E_TIMEOUT) == 0 ? "timeout" :
	    "failed", err->code, err->message[0] != '\0' ? err->message :
	    err->code);
}

static void
exec_end(struct api_exec *x, const char *state)
{

	snprintf(x->state, sizeof(x->state), "%s", state);
	x->ended_at = sbx_wall_ms();
	if (x->fd >= 0) {
		close(x->fd);
		x->fd = -1;
	}
	if (x->lim != NULL && x->lim->execs > 0)
		x->lim->execs--;
	x->lim = NULL;
	if (x->counted_ms != 0)
		api_metrics_exec_finished(&x->s->metrics, sbx_mono_ms() -
		    x->counted_ms);
	x->counted_ms = 0;
	ax_meta_write(x);
	log_info("exec ended", "exec_id", x->id, "npc", x->npc, "state",
	    state, NULL);
	wake_viewers(x);
	ax_bounds_soon(x->s);
}

/* on_end of a POST that created an exec: the exec forgets it (a start
 * event after the POST ended replies to nobody). */
static void
creator_end(struct areq *a)
{
	struct api_exec *x;

	for (x = a->s->execs; x != NULL; x = x->next)
		if (x->creator == a)
			x->creator = NULL;
}

/* ------------------------------------------------------------------ */
/* Handlers                                                            */

/* Exec id of the NPC of a (by name and by owner, so a record can never
 * pass to another owner's NPC of the same name). */
struct api_exec *
ax_exec_find(struct areq *a, const char *id)
{
	struct api_exec *x;

	for (x = a->s->execs; x != NULL; x = x->next)
		if (strcmp(x->id, id) == 0 && strcmp(x->npc, a->npc.name) == 0 &&
		    x->owner_id == a->npc.owner_id)
			return x;
	return NULL;
}

/* The exec of the route, or NULL after a 404. */
struct api_exec *
ax_exec_of(struct areq *a, struct sbx_err *err)
{
	struct api_exec *x = ax_exec_find(a, a->exec_id);

	if (x == NULL)
		sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_EXEC);
	return x;
}

/* A new record of an exec of a's NPC (argv from a->body), linked into
 * s->execs, its directory made; NULL with err (internal). */
static struct api_exec *
exec_new(struct areq *a, struct sbx_err *err)
{
	struct api_server *s = a->s;
	struct api_exec *x;
	unsigned char rnd[12];
	char path[1024];

	if ((x = calloc(1, sizeof(*x))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	x->s = s;
	x->fd = -1;
	randombytes_buf(rnd, sizeof(rnd));
	x->id[0] = 'x';
	sodium_bin2hex(x->id + 1, sizeof(x->id) - 1, rnd, sizeof(rnd));
	snprintf(x->npc, sizeof(x->npc), "%s", a->npc.name);
	snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", a->npc.sandbox_id);
	snprintf(x->by, sizeof(x->by), "%s", a->who.name);
	x->owner_id = a->npc.owner_id;
	ax_argv_preview(x, json_object_get(a->body, "argv"));
	snprintf(x->state, sizeof(x->state), "running");
	x->started_at = sbx_wall_ms();
	ax_exec_path(path, sizeof(path), x, NULL);
	if (mkdir(path, 0700) == -1 ||
	    ax_argv_write(x, json_object_get(a->body, "argv")) == -1) {
		log_error("cannot create an exec directory", "error",
		    strerror(errno), NULL);
		ax_exec_path(path, sizeof(path), x, "argv.json");
		unlink(path);
		ax_exec_path(path, sizeof(path), x, NULL);
		rmdir(path);
		ax_exec_free(x);
		sbx_err_set(err, SBX_E_INTERNAL, "The api cannot store the "
		    "exec's log.");
		return NULL;
	}
	x->next = s->execs;
	if (s->execs != NULL)
		s->execs->prev = x;
	s->execs = x;
	s->nexecs++;
	ax_meta_write(x);
	return x;
}

int
api_h_execs_create(struct areq *a, struct sbx_err *err)
{
	struct api_server *s = a->s;
	struct sbx_exec_req er;
	struct sbx_sink sink;
	const char **argv = NULL, **env = NULL;
	struct api_exec *x = NULL;
	int rc = -1;

	if (api_exec_parse(a, &er, &argv, &env, err) == -1)
		return -1;
	if ((x = exec_new(a, err)) == NULL)
		goto done;
	if (a->lim != NULL) {
		a->lim->execs++;
		x->lim = a->lim;
	}
	x->creator = a;
	a->on_end = creator_end;
	sink = (struct sbx_sink){ .start = x_start, .output = x_output,
	    .exit = x_exit, .error = x_error, .arg = x };
	/* The op belongs to x, not to the request: the exec outlives it.
	 * a->op stays NULL so a drain does not cancel it through a. */
	x->op = sbx_call_exec_lines(s->driver, x->sandbox_id, &er, &sink,
	    x_output_line, err);
	if (x->op == NULL) {
		x->creator = NULL;
		if (x->lim != NULL && x->lim->execs > 0)
			x->lim->execs--;
		x->lim = NULL;
		snprintf(x->state, sizeof(x->state), "failed");
		ax_exec_forget(x);
		rc = areq_broker_err(a);
		goto done;
	}
	ax_bounds_soon(s);
	rc = 0;
done:
	free(argv);
	free(env);
	return rc;
}

int
api_h_execs_get(struct areq *a, struct sbx_err *err)
{
	struct api_exec *x;

	if ((x = ax_exec_of(a, err)) == NULL)
		return -1;
	areq_reply_json(a, 200, exec_json_one(x));
	return 0;
}

int
api_h_execs_delete(struct areq *a, struct sbx_err *err)
{
	struct api_exec *x;
	struct sbx_op *op;
	char msg[128];

	if ((x = ax_exec_of(a, err)) == NULL)
		return -1;
	if (!ax_ended(x) && x->creator == NULL) {
		op = x->op;
		x->op = NULL;
		/* Cancelling closes the broker connection: the broker kills
		 * the exec's process tree (SPEC §6). */
		sbx_op_cancel(op);
		snprintf(msg, sizeof(msg), "Killed by %s (DELETE).", a->who.name);
		snprintf(x->signal, sizeof(x->signal), "KILL");
		ax_end_with_error(x, "killed", SBX_E_CANCELLED, msg);
	}
	areq_reply_json(a, 200, exec_json_one(x));
	return 0;
}
