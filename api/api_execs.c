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
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"
#include "sbx_sse.h"
#include "sbx_token.h"

/*
 * On disk, state_dir/execs/ID/ holds:
 *   meta.json     the exec's record, rewritten (tmp + rename) at start, at
 *                 its end and when its log loses a segment;
 *   N.log         segments of the SSE event log: N (20 digits) is the id of
 *                 the segment's first event; each holds whole events,
 *                 exactly the bytes a viewer gets;
 *   tickets       one line per browser ticket: hex keyed hash, expiry (Unix
 *                 ms), principal name. Never the ticket itself.
 * Events are written with write() before any viewer sees them (they read
 * the files): a SIGKILL loses nothing written, a power loss can lose what
 * the page cache held (ADR 0015).
 */

#define EXEC_ID_LEN 25              /* "x" + 24 hex digits */
#define LOG_CHUNK ((size_t)64 * 1024)   /* output bytes per logged event */
#define SEG_MIN ((uint64_t)64 * 1024)
#define SEG_MAX ((uint64_t)1024 * 1024)
#define VIEW_HIGH_WATER ((size_t)256 * 1024)
#define VIEW_READ ((size_t)64 * 1024)
#define VIEW_SNDBUF (128 * 1024)   /* SO_SNDBUF of a viewer's socket */
#define LIST_DEFAULT 20
#define LIST_MAX 200
#define VIEW_TIMEOUT_S (24 * 3600)

struct seg {
	uint64_t first_id;
	uint64_t last_id;         /* 0 while empty */
	uint64_t bytes;
	struct seg *next;         /* newer */
};

struct ticket {
	unsigned char hash[32];
	int64_t expires_ms;
	char principal[API_NAME_MAX + 1];
	struct ticket *next;
};

struct api_exec {
	struct api_server *s;
	char id[EXEC_ID_LEN + 1];
	char npc[API_NPC_NAME_MAX + 1];
	int64_t owner_id;
	char sandbox_id[64];
	char by[API_NAME_MAX + 1];    /* principal who started it */
	json_t *argv;                 /* owned */
	char state[16];               /* running exited killed timeout failed */
	int code;
	char signal[16];
	int truncated;
	char reason[256];             /* why it ended, if not by itself */
	int64_t started_at, ended_at; /* Unix ms */
	uint64_t bytes_out;           /* stdout + stderr bytes */
	uint64_t dropped_bytes;       /* log bytes dropped (exec_log_max) */
	uint64_t dropped_events;
	char removed[32];             /* "" or why the whole log was removed */
	uint64_t last_id;
	uint64_t log_bytes;
	struct seg *segs, *cur;       /* oldest .. newest (cur: being written) */
	int fd;                       /* cur's file while running, else -1 */
	struct sbx_op *op;
	struct api_limit *lim;        /* counted in lim->execs while running */
	struct areq *creator;         /* POST waiting for the start event */
	int64_t counted_ms;           /* monotonic start, counted in metrics; 0 not */
	struct api_viewer *viewers;
	struct ticket *tickets;
	struct api_exec *prev, *next; /* s->execs, newest first */
};

struct api_viewer {
	struct areq *a;
	struct api_exec *x;
	uint64_t seg_first;           /* segment being read (its first id) */
	uint64_t seg_last;            /* its last id, kept if it is dropped */
	int fd;
	int follow;                   /* 0: end at the end of what is logged */
	int waiting;                  /* at the end of the log, waits for more */
	int blocked;                  /* output over the high-water mark */
	struct event *stall;
	struct api_viewer *next;
};

static void viewer_pump(struct api_viewer *v);
static void viewer_send(struct areq *a);
static void viewer_drained(struct evhttp_connection *, void *);
static void exec_end(struct api_exec *x, const char *state);

static int64_t
wall_now(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static uint64_t
seg_size(const struct api_server *s)
{
	uint64_t z = (uint64_t)s->cfg->exec_log_max / 8;

	return z < SEG_MIN ? SEG_MIN : z > SEG_MAX ? SEG_MAX : z;
}

static void
exec_path(char *buf, size_t cap, const struct api_exec *x, const char *file)
{
	snprintf(buf, cap, "%s/%s%s%s", x->s->execs_dir, x->id,
	    file != NULL ? "/" : "", file != NULL ? file : "");
}

static void
seg_path(char *buf, size_t cap, const struct api_exec *x, uint64_t first)
{
	char name[32];

	snprintf(name, sizeof(name), "%020" PRIu64 ".log", first);
	exec_path(buf, cap, x, name);
}

/* ------------------------------------------------------------------ */
/* Records                                                             */

static json_t *
exec_json(const struct api_exec *x)
{
	json_t *o;
	char url[256];
	int ended = strcmp(x->state, "running") != 0;

	snprintf(url, sizeof(url), "/api/v1/npcs/%s/sandbox/execs/%s/events",
	    x->npc, x->id);
	o = json_pack("{s:s,s:s,s:s,s:O,s:s,s:I,s:o}",
	    "exec_id", x->id, "npc", x->npc, "state", x->state, "argv",
	    x->argv, "events_url", url, "started_at",
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

/* Rewrites meta.json (tmp + rename). A failure is logged: the log stays. */
static void
meta_write(struct api_exec *x)
{
	char path[1024], tmp[1040];
	json_t *o = exec_json(x);
	int fd;

	if (o == NULL)
		return;
	json_object_set_new(o, "owner_id", json_integer(x->owner_id));
	json_object_set_new(o, "sandbox_id", json_string(x->sandbox_id));
	json_object_set_new(o, "dropped_events",
	    json_integer((json_int_t)x->dropped_events));
	exec_path(path, sizeof(path), x, "meta.json");
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

static void
exec_unlink(struct api_exec *x)
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
static void
exec_free(struct api_exec *x)
{
	if (x->fd >= 0)
		close(x->fd);
	segs_free(x);
	tickets_free(x);
	json_decref(x->argv);
	free(x);
}

/* Removes every segment file of x from disk. */
static void
log_remove(struct api_exec *x, const char *why)
{
	char path[1024];
	struct seg *g;

	for (g = x->segs; g != NULL; g = g->next) {
		seg_path(path, sizeof(path), x, g->first_id);
		unlink(path);
	}
	x->s->log_total -= x->log_bytes;
	x->log_bytes = 0;
	segs_free(x);
	snprintf(x->removed, sizeof(x->removed), "%s", why);
	meta_write(x);
	log_info("exec log removed", "exec_id", x->id, "reason", why, NULL);
}

/* Forgets x entirely (record and files). Not for running execs. */
static void
exec_forget(struct api_exec *x)
{
	char path[1024];
	struct api_viewer *v;

	if (x->segs != NULL)
		log_remove(x, "forgotten");
	exec_path(path, sizeof(path), x, "meta.json");
	unlink(path);
	exec_path(path, sizeof(path), x, "tickets");
	unlink(path);
	exec_path(path, sizeof(path), x, NULL);
	rmdir(path);
	/* Viewers of a forgotten exec end (they get 404 on their reconnect). */
	while ((v = x->viewers) != NULL) {
		x->viewers = v->next;
		v->x = NULL;
		v->next = NULL;
		if (v->a->req != NULL)
			viewer_pump(v);
	}
	exec_unlink(x);
	exec_free(x);
}

static int
ended(const struct api_exec *x)
{
	return strcmp(x->state, "running") != 0;
}

/*
 * Keeps the bounds: exec_records_max records, exec_log_total bytes,
 * exec_retention for ended logs. Oldest ended execs go first.
 */
static void
enforce_bounds(struct api_server *s)
{
	struct api_exec *x, *prev;
	int64_t now = wall_now();

	for (x = s->execs; x != NULL && x->next != NULL; x = x->next)
		;
	/* x: the oldest. Walk towards the newest. */
	for (; x != NULL; x = prev) {
		prev = x->prev;
		if (!ended(x) || x->viewers != NULL)
			continue;
		if ((long long)s->nexecs > s->cfg->exec_records_max) {
			exec_forget(x);
			continue;
		}
		if (x->segs != NULL && (s->log_total >
		    (uint64_t)s->cfg->exec_log_total ||
		    now - x->ended_at > s->cfg->exec_retention))
			log_remove(x, s->log_total >
			    (uint64_t)s->cfg->exec_log_total ? "total_cap" :
			    "retention");
	}
}

static void
sweep_fire(evutil_socket_t fd, short what, void *arg)
{
	struct api_server *s = arg;
	struct timeval tv = { 1, 0 };

	(void)fd;
	(void)what;
	enforce_bounds(s);
	if (s->cfg->exec_retention > 10000)
		tv.tv_sec = 10;
	evtimer_add(s->sweep_ev, &tv);
}

/* ------------------------------------------------------------------ */
/* The log writer                                                      */

/* Drops the oldest segment of x (never cur). */
static void
seg_drop_oldest(struct api_exec *x)
{
	struct seg *g = x->segs;
	struct api_viewer *v;
	char path[1024];

	if (g == NULL || g == x->cur)
		return;
	for (v = x->viewers; v != NULL; v = v->next)
		if (v->seg_first == g->first_id)
			v->seg_last = g->last_id;
	seg_path(path, sizeof(path), x, g->first_id);
	unlink(path);
	x->segs = g->next;
	x->log_bytes -= g->bytes;
	x->s->log_total -= g->bytes;
	x->dropped_bytes += g->bytes;
	x->dropped_events += g->last_id - g->first_id + 1;
	free(g);
	meta_write(x);
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
	struct api_viewer *v;
	struct seg *g;
	char path[1024];
	const unsigned char *p;
	ssize_t w;
	size_t off;

	if (x->cur == NULL || x->fd < 0 || x->cur->bytes >= seg_size(s)) {
		if ((g = calloc(1, sizeof(*g))) == NULL)
			goto fail;
		g->first_id = x->last_id + 1;
		seg_path(path, sizeof(path), x, g->first_id);
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
	for (v = x->viewers; v != NULL; v = v->next)
		if (v->waiting) {
			v->waiting = 0;
			viewer_pump(v);
		}
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
	x->counted_ms = api_mono_ms();
	x->creator = NULL;
	if (a != NULL) {
		a->op = NULL;
		snprintf(loc, sizeof(loc), "/api/v1/npcs/%s/sandbox/execs/%s",
		    x->npc, x->id);
		if (a->req != NULL)
			evhttp_add_header(evhttp_request_get_output_headers(
			    a->req), "Location", loc);
		o = exec_json(x);
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
		if (sbx_ndjson_exit(line, ex->code, ex->signal,
		    ex->duration_ms, ex->truncated) == 0)
			log_line(x, line);
		evbuffer_free(line);
	}
	exec_end(x, "exited");
}

/* Ends x with an error event (code, message) as its terminal event. */
static void
end_with_error(struct api_exec *x, const char *state, const char *code,
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
		exec_forget(x);
		areq_fail_broker(a, err);
		return;
	}
	api_metrics_broker_error(&x->s->metrics, err->code);
	end_with_error(x, strcmp(err->code, SBX_E_TIMEOUT) == 0 ? "timeout" :
	    "failed", err->code, err->message[0] != '\0' ? err->message :
	    err->code);
}

static void
exec_end(struct api_exec *x, const char *state)
{
	struct api_viewer *v;

	snprintf(x->state, sizeof(x->state), "%s", state);
	x->ended_at = wall_now();
	if (x->fd >= 0) {
		close(x->fd);
		x->fd = -1;
	}
	if (x->lim != NULL && x->lim->execs > 0)
		x->lim->execs--;
	x->lim = NULL;
	if (x->counted_ms != 0)
		api_metrics_exec_finished(&x->s->metrics, api_mono_ms() -
		    x->counted_ms);
	x->counted_ms = 0;
	meta_write(x);
	log_info("exec ended", "exec_id", x->id, "npc", x->npc, "state",
	    state, NULL);
	for (v = x->viewers; v != NULL; v = v->next)
		if (v->waiting) {
			v->waiting = 0;
			viewer_pump(v);
		}
}

/* ------------------------------------------------------------------ */
/* Loading after a restart                                             */

/* Scans segment fd (size bytes): the last id of a whole event, the length
 * of the whole events. */
static int
seg_scan(int fd, uint64_t *last_id, uint64_t *whole)
{
	struct stat st;
	char *buf;
	size_t len, pos = 0, end;
	const char *nn;
	unsigned long long id;

	*last_id = 0;
	*whole = 0;
	if (fstat(fd, &st) == -1)
		return -1;
	len = (size_t)st.st_size;
	if ((buf = malloc(len + 1)) == NULL)
		return -1;
	if (pread(fd, buf, len, 0) != (ssize_t)len) {
		free(buf);
		return -1;
	}
	buf[len] = '\0';
	while (pos < len) {
		if (sscanf(buf + pos, "id: %llu\n", &id) != 1)
			break;
		nn = memmem(buf + pos, len - pos, "\n\n", 2);
		if (nn == NULL)
			break;
		end = (size_t)(nn - buf) + 2;
		*last_id = id;
		*whole = end;
		pos = end;
	}
	free(buf);
	return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void
tickets_load(struct api_exec *x)
{
	char path[1024], line[256], hex[65], who[API_NAME_MAX + 1];
	long long exp;
	struct ticket *t;
	FILE *f;
	size_t bl;

	exec_path(path, sizeof(path), x, "tickets");
	if ((f = fopen(path, "re")) == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "%64s %lld %63s", hex, &exp, who) != 3 ||
		    exp < wall_now())
			continue;
		if ((t = calloc(1, sizeof(*t))) == NULL)
			break;
		if (sodium_hex2bin(t->hash, sizeof(t->hash), hex, 64, NULL, &bl,
		    NULL) != 0 || bl != 32) {
			free(t);
			continue;
		}
		t->expires_ms = exp;
		snprintf(t->principal, sizeof(t->principal), "%s", who);
		t->next = x->tickets;
		x->tickets = t;
	}
	sodium_memzero(hex, sizeof(hex));
	fclose(f);
}

/* Loads one exec directory; a running one becomes failed (api_restarted). */
static struct api_exec *
exec_load(struct api_server *s, const char *id)
{
	struct api_exec *x = NULL;
	json_t *m = NULL, *v, *log;
	char path[1024];
	uint64_t *firsts = NULL, last, whole;
	size_t nf = 0, capf = 0, i;
	struct dirent *de;
	struct seg *g;
	DIR *d = NULL;
	int fd;

	if ((x = calloc(1, sizeof(*x))) == NULL)
		return NULL;
	x->s = s;
	x->fd = -1;
	snprintf(x->id, sizeof(x->id), "%s", id);
	exec_path(path, sizeof(path), x, "meta.json");
	if ((m = json_load_file(path, 0, NULL)) == NULL ||
	    !json_is_string(json_object_get(m, "npc")) ||
	    !json_is_string(json_object_get(m, "state")))
		goto fail;
	snprintf(x->npc, sizeof(x->npc), "%s",
	    json_string_value(json_object_get(m, "npc")));
	snprintf(x->state, sizeof(x->state), "%s",
	    json_string_value(json_object_get(m, "state")));
	snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s",
	    json_string_value(json_object_get(m, "sandbox_id")) ?: "");
	snprintf(x->by, sizeof(x->by), "%s",
	    json_string_value(json_object_get(m, "by")) ?: "");
	snprintf(x->signal, sizeof(x->signal), "%s",
	    json_string_value(json_object_get(m, "signal")) ?: "");
	snprintf(x->reason, sizeof(x->reason), "%s",
	    json_string_value(json_object_get(m, "reason")) ?: "");
	x->owner_id = json_integer_value(json_object_get(m, "owner_id"));
	x->argv = json_incref(json_object_get(m, "argv"));
	if (x->argv == NULL)
		x->argv = json_array();
	v = json_object_get(m, "exit_code");
	x->code = json_is_integer(v) ? (int)json_integer_value(v) : 0;
	x->truncated = json_is_true(json_object_get(m, "truncated"));
	x->started_at = json_integer_value(json_object_get(m, "started_at"));
	x->ended_at = json_integer_value(json_object_get(m, "ended_at"));
	x->bytes_out = (uint64_t)json_integer_value(json_object_get(m,
	    "bytes_out"));
	x->dropped_events = (uint64_t)json_integer_value(json_object_get(m,
	    "dropped_events"));
	log = json_object_get(m, "log");
	x->dropped_bytes = (uint64_t)json_integer_value(json_object_get(log,
	    "dropped_bytes"));
	snprintf(x->removed, sizeof(x->removed), "%s",
	    json_string_value(json_object_get(log, "removed")) ?: "");
	/* The segments. */
	exec_path(path, sizeof(path), x, NULL);
	if ((d = opendir(path)) == NULL)
		goto fail;
	while ((de = readdir(d)) != NULL) {
		unsigned long long n;
		char tail[8];

		if (strlen(de->d_name) != 24 ||
		    sscanf(de->d_name, "%20llu%7s", &n, tail) != 2 ||
		    strcmp(tail, ".log") != 0 || n == 0)
			continue;
		if (nf == capf) {
			uint64_t *nfi;

			capf = capf ? capf * 2 : 16;
			if ((nfi = realloc(firsts, capf * sizeof(*nfi))) == NULL)
				goto fail;
			firsts = nfi;
		}
		firsts[nf++] = n;
	}
	qsort(firsts, nf, sizeof(*firsts), cmp_u64);
	for (i = 0; i < nf; i++) {
		struct stat st;

		if ((g = calloc(1, sizeof(*g))) == NULL)
			goto fail;
		g->first_id = firsts[i];
		seg_path(path, sizeof(path), x, g->first_id);
		if (stat(path, &st) == 0)
			g->bytes = (uint64_t)st.st_size;
		if (i + 1 < nf)
			g->last_id = firsts[i + 1] - 1;
		if (x->cur != NULL)
			x->cur->next = g;
		else
			x->segs = g;
		x->cur = g;
	}
	if (x->cur != NULL) {
		/* The newest segment may end in a torn event (power loss). */
		seg_path(path, sizeof(path), x, x->cur->first_id);
		if ((fd = open(path, O_RDWR | O_CLOEXEC)) >= 0) {
			if (seg_scan(fd, &last, &whole) == 0) {
				if (whole < x->cur->bytes &&
				    ftruncate(fd, (off_t)whole) == 0)
					log_warn("exec log: cut a torn last "
					    "event", "exec_id", x->id, NULL);
				x->cur->bytes = whole;
				x->cur->last_id = last != 0 ? last :
				    x->cur->first_id - 1;
			}
			close(fd);
		}
		x->last_id = x->cur->last_id;
	} else
		x->last_id = (uint64_t)json_integer_value(json_object_get(log,
		    "last_id"));
	for (g = x->segs; g != NULL; g = g->next)
		x->log_bytes += g->bytes;
	s->log_total += x->log_bytes;
	tickets_load(x);
	if (!ended(x)) {
		/* Its broker connection died with the old api process, and
		 * the broker kills an exec whose client is gone (SPEC §5). */
		end_with_error(x, "failed", "api_restarted", "The api "
		    "restarted while the exec ran; the broker killed it when "
		    "the api's connection to it closed.");
		x->cur = NULL;
	}
	x->cur = NULL;  /* nothing is appended to a loaded exec */
	free(firsts);
	closedir(d);
	json_decref(m);
	return x;
fail:
	free(firsts);
	if (d != NULL)
		closedir(d);
	json_decref(m);
	if (x != NULL)
		exec_free(x);
	log_warn("ignoring an unreadable exec record", "exec_id", id, NULL);
	return NULL;
}

static int
cmp_started(const void *a, const void *b)
{
	const struct api_exec *x = *(struct api_exec *const *)a;
	const struct api_exec *y = *(struct api_exec *const *)b;

	/* Newest first; ids break ties. */
	if (x->started_at != y->started_at)
		return x->started_at > y->started_at ? -1 : 1;
	return strcmp(y->id, x->id);
}

static int
load_ticket_key(struct api_server *s, struct sbx_err *err)
{
	char path[1024];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/ticket.key", s->cfg->state_dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		randombytes_buf(s->ticket_key, sizeof(s->ticket_key));
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, s->ticket_key, sizeof(s->ticket_key)) !=
		    (ssize_t)sizeof(s->ticket_key)) {
			if (fd >= 0)
				close(fd);
			return sbx_err_set(err, SBX_E_CONFIG, "Cannot create "
			    "%s: %s.", path, strerror(errno));
		}
		close(fd);
		return 0;
	}
	if (fd < 0 || fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) ||
	    (st.st_mode & 077) != 0 || st.st_size != 32 ||
	    read(fd, s->ticket_key, 32) != 32) {
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_E_CONFIG, "%s must be a regular "
		    "file of 32 bytes, mode 0600.", path);
	}
	close(fd);
	return 0;
}

int
api_execs_open(struct api_server *s, struct sbx_err *err)
{
	struct api_exec **all = NULL, *x;
	size_t n = 0, cap = 0, i;
	struct dirent *de;
	struct timeval tv = { 1, 0 };
	DIR *d;

	if (load_ticket_key(s, err) == -1)
		return -1;
	if ((s->execs_dir = malloc(strlen(s->cfg->state_dir) + 8)) == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	sprintf(s->execs_dir, "%s/execs", s->cfg->state_dir);
	if (mkdir(s->execs_dir, 0700) == -1 && errno != EEXIST)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot create %s: %s.",
		    s->execs_dir, strerror(errno));
	if ((d = opendir(s->execs_dir)) == NULL)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot read %s: %s.",
		    s->execs_dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] != 'x' || strlen(de->d_name) != EXEC_ID_LEN)
			continue;
		if ((x = exec_load(s, de->d_name)) == NULL)
			continue;
		if (n == cap) {
			struct api_exec **na;

			cap = cap ? cap * 2 : 64;
			if ((na = realloc(all, cap * sizeof(*na))) == NULL) {
				exec_free(x);
				break;
			}
			all = na;
		}
		all[n++] = x;
	}
	closedir(d);
	if (n > 0)
		qsort(all, n, sizeof(*all), cmp_started);
	for (i = n; i > 0; i--) {
		x = all[i - 1];
		x->next = s->execs;
		if (s->execs != NULL)
			s->execs->prev = x;
		s->execs = x;
		s->nexecs++;
	}
	free(all);
	if ((s->sweep_ev = evtimer_new(s->base, sweep_fire, s)) == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
	evtimer_add(s->sweep_ev, &tv);
	enforce_bounds(s);
	return 0;
}

void
api_execs_close(struct api_server *s)
{
	struct api_exec *x;
	struct sbx_op *op;

	while ((x = s->execs) != NULL) {
		if (!ended(x)) {
			op = x->op;
			x->op = NULL;
			sbx_op_cancel(op);
			if (x->creator != NULL)
				x->creator = NULL;
			end_with_error(x, "failed", SBX_E_SHUTTING_DOWN, "The "
			    "api shut down; the exec was cancelled.");
		}
		while (x->viewers != NULL) {
			struct api_viewer *v = x->viewers;

			x->viewers = v->next;
			v->x = NULL;
		}
		exec_unlink(x);
		exec_free(x);
	}
	if (s->sweep_ev != NULL)
		event_free(s->sweep_ev);
	s->sweep_ev = NULL;
	free(s->execs_dir);
	s->execs_dir = NULL;
	sodium_memzero(s->ticket_key, sizeof(s->ticket_key));
}

/* ------------------------------------------------------------------ */
/* Handlers                                                            */

/* Exec id of the NPC of a (by name and by owner, so a record can never
 * pass to another owner's NPC of the same name). */
static struct api_exec *
exec_find(struct areq *a, const char *id)
{
	struct api_exec *x;

	for (x = a->s->execs; x != NULL; x = x->next)
		if (strcmp(x->id, id) == 0 && strcmp(x->npc, a->npc.name) == 0 &&
		    x->owner_id == a->npc.owner_id)
			return x;
	return NULL;
}

/* The exec of the route, or NULL after a 404. */
static struct api_exec *
exec_of(struct areq *a)
{
	struct api_exec *x = exec_find(a, a->exec_id);

	if (x == NULL)
		areq_fail_code(a, SBX_E_NOT_FOUND, "That NPC has no exec with "
		    "that id.");
	return x;
}

void
api_h_execs_create(struct areq *a)
{
	struct api_server *s = a->s;
	struct sbx_exec_req er;
	struct sbx_sink sink;
	struct sbx_err err;
	const char **argv = NULL, **env = NULL;
	struct api_exec *x = NULL;
	unsigned char rnd[12];
	char path[1024];

	sbx_err_clear(&err);
	if (api_exec_parse(a, &er, &argv, &env) == -1)
		return;
	if ((x = calloc(1, sizeof(*x))) == NULL) {
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		goto done;
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
	x->argv = json_deep_copy(json_object_get(a->body, "argv"));
	snprintf(x->state, sizeof(x->state), "running");
	x->started_at = wall_now();
	exec_path(path, sizeof(path), x, NULL);
	if (mkdir(path, 0700) == -1) {
		log_error("cannot create an exec directory", "error",
		    strerror(errno), NULL);
		exec_free(x);
		areq_fail_code(a, SBX_E_INTERNAL, "The api cannot store the "
		    "exec's log.");
		goto done;
	}
	x->next = s->execs;
	if (s->execs != NULL)
		s->execs->prev = x;
	s->execs = x;
	s->nexecs++;
	meta_write(x);
	if (a->lim != NULL) {
		a->lim->execs++;
		x->lim = a->lim;
	}
	x->creator = a;
	memset(&sink, 0, sizeof(sink));
	sink.start = x_start;
	sink.output = x_output;
	sink.exit = x_exit;
	sink.error = x_error;
	sink.arg = x;
	/* The op belongs to x, not to the request: the exec outlives it.
	 * a->op stays NULL so a drain does not cancel it through a. */
	x->op = s->driver->ops->exec(s->driver, x->sandbox_id, &er, &sink,
	    &err);
	if (x->op == NULL) {
		x->creator = NULL;
		if (x->lim != NULL && x->lim->execs > 0)
			x->lim->execs--;
		x->lim = NULL;
		snprintf(x->state, sizeof(x->state), "failed");
		exec_forget(x);
		areq_fail_broker(a, &err);
		goto done;
	}
	enforce_bounds(s);
done:
	free(argv);
	free(env);
}

void
api_h_execs_list(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct evkeyvalq q;
	const char *lim, *after;
	struct api_exec *x;
	json_t *arr, *o;
	long n = LIST_DEFAULT;
	char *end;
	int started;

	memset(&q, 0, sizeof(q));
	if (evhttp_parse_query_str(evhttp_uri_get_query(uri) ?
	    evhttp_uri_get_query(uri) : "", &q) == -1) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, "Bad query string.");
		return;
	}
	lim = evhttp_find_header(&q, "limit");
	after = evhttp_find_header(&q, "after");
	if (lim != NULL) {
		n = strtol(lim, &end, 10);
		if (*lim == '\0' || *end != '\0' || n < 1 || n > LIST_MAX) {
			evhttp_clear_headers(&q);
			areq_fail_code(a, SBX_E_BAD_REQUEST, "limit must be 1 to "
			    "%d.", LIST_MAX);
			return;
		}
	}
	if (after != NULL && exec_find(a, after) == NULL) {
		evhttp_clear_headers(&q);
		areq_fail_code(a, SBX_E_BAD_REQUEST, "after must name an exec "
		    "of this NPC (the \"next\" of the previous page).");
		return;
	}
	arr = json_array();
	started = after == NULL;
	for (x = a->s->execs; x != NULL && n > 0; x = x->next) {
		if (strcmp(x->npc, a->npc.name) != 0 ||
		    x->owner_id != a->npc.owner_id)
			continue;
		if (!started) {
			started = strcmp(x->id, after) == 0;
			continue;
		}
		json_array_append_new(arr, exec_json(x));
		n--;
	}
	/* A next page exists when an exec of this NPC follows. */
	for (; x != NULL; x = x->next)
		if (strcmp(x->npc, a->npc.name) == 0 &&
		    x->owner_id == a->npc.owner_id)
			break;
	o = json_pack("{s:o,s:o}", "execs", arr, "next", x != NULL &&
	    json_array_size(arr) > 0 ? json_string(json_string_value(
	    json_object_get(json_array_get(arr, json_array_size(arr) - 1),
	    "exec_id"))) : json_null());
	evhttp_clear_headers(&q);
	areq_reply_json(a, 200, o);
}

void
api_h_execs_get(struct areq *a)
{
	struct api_exec *x = exec_of(a);

	if (x != NULL)
		areq_reply_json(a, 200, exec_json(x));
}

void
api_h_execs_delete(struct areq *a)
{
	struct api_exec *x = exec_of(a);
	struct sbx_op *op;
	char msg[128];

	if (x == NULL)
		return;
	if (!ended(x) && x->creator == NULL) {
		op = x->op;
		x->op = NULL;
		/* Cancelling closes the broker connection: the broker kills
		 * the exec's process tree (SPEC §6). */
		sbx_op_cancel(op);
		snprintf(msg, sizeof(msg), "Killed by %s (DELETE).", a->who.name);
		snprintf(x->signal, sizeof(x->signal), "KILL");
		end_with_error(x, "killed", SBX_E_CANCELLED, msg);
	}
	areq_reply_json(a, 200, exec_json(x));
}

/* ------------------------------------------------------------------ */
/* Tickets                                                             */

static void
ticket_hash(const struct api_server *s, const char *t, size_t len,
    unsigned char out[32])
{
	crypto_generichash(out, 32, (const unsigned char *)t, len,
	    s->ticket_key, sizeof(s->ticket_key));
}

void
api_h_execs_ticket(struct areq *a)
{
	struct api_exec *x = exec_of(a);
	struct ticket *t;
	char tok[SBX_TOKEN_GEN_LEN + 1], hex[65], path[1024], url[512];
	int64_t exp;
	FILE *f = NULL;
	int fd, ok;
	json_t *o;

	if (x == NULL)
		return;
	if ((t = calloc(1, sizeof(*t))) == NULL ||
	    sbx_token_generate(tok, sizeof(tok)) == -1) {
		free(t);
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	exp = wall_now() + a->s->cfg->ticket_ttl;
	ticket_hash(a->s, tok, strlen(tok), t->hash);
	t->expires_ms = exp;
	snprintf(t->principal, sizeof(t->principal), "%s", a->who.name);
	/* Persisted (as its keyed hash) so a ticket survives an api restart:
	 * a browser's EventSource reconnects with the same URL. */
	sodium_bin2hex(hex, sizeof(hex), t->hash, sizeof(t->hash));
	exec_path(path, sizeof(path), x, "tickets");
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd >= 0 && (f = fdopen(fd, "a")) == NULL)
		close(fd);
	ok = f != NULL && fprintf(f, "%s %lld %s\n", hex, (long long)exp,
	    t->principal) > 0;
	if (f != NULL && fclose(f) != 0)
		ok = 0;
	if (!ok) {
		free(t);
		sodium_memzero(tok, sizeof(tok));
		areq_fail_code(a, SBX_E_INTERNAL, "The api cannot store the "
		    "ticket.");
		return;
	}
	t->next = x->tickets;
	x->tickets = t;
	snprintf(url, sizeof(url), "/api/v1/npcs/%s/sandbox/execs/%s/events"
	    "?ticket=%s", x->npc, x->id, tok);
	o = json_pack("{s:s,s:I,s:s}", "ticket", tok, "expires_at",
	    (json_int_t)exp, "events_url", url);
	sodium_memzero(tok, sizeof(tok));
	sodium_memzero(url, sizeof(url));
	areq_reply_json(a, 200, o);
}

int
api_execs_ticket_auth(struct api_server *s, const char *target,
    struct api_principal *who)
{
	static const char pre[] = "/api/v1/npcs/";
	struct api_principal p;
	struct api_npc n;
	struct api_exec *x;
	struct evkeyvalq q;
	struct ticket *t;
	struct sbx_err err;
	unsigned char h[32];
	char npc[API_NPC_NAME_MAX + 1], id[EXEC_ID_LEN + 1];
	const char *rest, *qs, *tok;
	size_t nl;
	int r, found = 0;

	sbx_err_clear(&err);
	memset(&q, 0, sizeof(q));
	/* /api/v1/npcs/NPC/sandbox/execs/ID/events?QUERY */
	if (strncmp(target, pre, sizeof(pre) - 1) != 0)
		return 0;
	rest = target + sizeof(pre) - 1;
	nl = strcspn(rest, "/");
	if (nl == 0 || nl > API_NPC_NAME_MAX)
		return 0;
	memcpy(npc, rest, nl);
	npc[nl] = '\0';
	rest += nl;
	if (strncmp(rest, "/sandbox/execs/", 15) != 0)
		return 0;
	rest += 15;
	nl = strcspn(rest, "/");
	if (nl != EXEC_ID_LEN || strncmp(rest + nl, "/events?", 8) != 0)
		return 0;
	memcpy(id, rest, nl);
	id[nl] = '\0';
	qs = rest + nl + 8;
	if (!api_npc_name_valid(npc) || evhttp_parse_query_str(qs, &q) == -1 ||
	    (tok = evhttp_find_header(&q, "ticket")) == NULL) {
		evhttp_clear_headers(&q);
		return 0;
	}
	if ((r = api_store_npc_get(s->store, npc, &n, &err)) != 1) {
		evhttp_clear_headers(&q);
		return r;
	}
	for (x = s->execs; x != NULL; x = x->next)
		if (strcmp(x->id, id) == 0 && strcmp(x->npc, npc) == 0 &&
		    x->owner_id == n.owner_id)
			break;
	if (x != NULL) {
		ticket_hash(s, tok, strlen(tok), h);
		for (t = x->tickets; t != NULL; t = t->next)
			if (sodium_memcmp(t->hash, h, sizeof(h)) == 0 &&
			    t->expires_ms > wall_now()) {
				found = 1;
				break;
			}
	}
	evhttp_clear_headers(&q);
	if (!found)
		return 0;
	/* A ticket is no stronger than its principal's key is now. */
	if ((r = api_store_principal_get(s->store, t->principal, &p,
	    &err)) != 1)
		return r;
	if (p.revoked_at != 0 || (p.role != API_ROLE_OPERATOR &&
	    p.id != n.owner_id))
		return 0;
	*who = p;
	return 1;
}

/* ------------------------------------------------------------------ */
/* Viewers                                                             */

static void
viewer_detach(struct api_viewer *v)
{
	struct api_viewer **pp;

	if (v->x != NULL)
		for (pp = &v->x->viewers; *pp != NULL; pp = &(*pp)->next)
			if (*pp == v) {
				*pp = v->next;
				break;
			}
	v->x = NULL;
	if (v->fd >= 0)
		close(v->fd);
	v->fd = -1;
}

void
api_execs_areq_end(struct areq *a)
{
	struct api_viewer *v = a->viewer;
	struct api_exec *x;

	for (x = a->s->execs; x != NULL; x = x->next)
		if (x->creator == a)
			x->creator = NULL;
	if (v == NULL)
		return;
	viewer_detach(v);
	if (v->stall != NULL)
		event_free(v->stall);
	a->viewer = NULL;
	free(v);
}

static void
viewer_end(struct api_viewer *v, const char *outcome)
{
	struct areq *a = v->a;
	struct timeval tv = { 10, 0 };

	viewer_detach(v);
	if (a->req != NULL) {
		if (evbuffer_get_length(a->chunk) > 0)
			viewer_send(a);
		sbx_gate_watch(a->s->gate, a->conn, NULL, NULL);
		evhttp_connection_set_timeout_tv(a->conn, &tv);
		evhttp_send_reply_end(a->req);
		a->req = NULL;
	}
	areq_finish(a, 200, outcome);
}

static void
viewer_closed(struct evhttp_connection *conn, void *arg)
{
	struct areq *a = arg;

	(void)conn;
	if (a->req != NULL)
		evhttp_send_reply_end(a->req);
	a->req = NULL;
	a->conn = NULL;
	if (a->viewer != NULL)
		viewer_detach(a->viewer);
	areq_finish(a, 200, SBX_E_CANCELLED);
}

static void
viewer_drained(struct evhttp_connection *conn, void *arg)
{
	struct api_viewer *v = arg;

	(void)conn;
	if (v->stall != NULL)
		event_del(v->stall);
	if (v->blocked) {
		v->blocked = 0;
		viewer_pump(v);
	}
}

/* A viewer that read nothing for viewer_stall while events waited. */
static void
viewer_stalled(evutil_socket_t fd, short what, void *arg)
{
	struct api_viewer *v = arg;
	struct areq *a = v->a;

	(void)fd;
	(void)what;
	log_info("exec viewer stalled; cut off", "npc", a->npc.name, NULL);
	viewer_detach(v);
	if (a->req != NULL) {
		sbx_gate_watch(a->s->gate, a->conn, NULL, NULL);
		evhttp_connection_free(a->conn);
		a->req = NULL;
		a->conn = NULL;
	}
	areq_finish(a, 200, "stalled");
}

/* Sends a->chunk; the drain callback stays set (a plain send clears it). */
static void
viewer_send(struct areq *a)
{
	evhttp_send_reply_chunk_with_cb(a->req, a->chunk, viewer_drained,
	    a->viewer);
}

static void
ping_fire(evutil_socket_t fd, short what, void *arg)
{
	struct areq *a = arg;
	struct timeval tv;

	(void)fd;
	(void)what;
	if (a->req == NULL)
		return;
	sbx_sse_comment(a->chunk, SBX_SSE_PING);
	viewer_send(a);
	tv.tv_sec = a->s->cfg->heartbeat / 1000;
	tv.tv_usec = (a->s->cfg->heartbeat % 1000) * 1000;
	evtimer_add(a->ping, &tv);
}

static void
ping_rearm(struct areq *a)
{
	struct timeval tv;

	tv.tv_sec = a->s->cfg->heartbeat / 1000;
	tv.tv_usec = (a->s->cfg->heartbeat % 1000) * 1000;
	evtimer_add(a->ping, &tv);
}

static void
send_reset(struct areq *a, const char *reason, const char *message,
    uint64_t next_id)
{
	json_t *o = json_pack("{s:s,s:s,s:I}", "reason", reason, "message",
	    message, "next_id", (json_int_t)next_id);
	char *t = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

	/* No id: a reset is about the log, not an event of it. */
	if (t != NULL)
		evbuffer_add_printf(a->chunk, "event: reset\ndata: %s\n\n", t);
	free(t);
	json_decref(o);
}

static struct seg *
seg_find(struct api_exec *x, uint64_t first)
{
	struct seg *g;

	for (g = x->segs; g != NULL; g = g->next)
		if (g->first_id == first)
			return g;
	return NULL;
}

static int
seg_open(struct api_viewer *v, uint64_t first)
{
	char path[1024];

	seg_path(path, sizeof(path), v->x, first);
	if (v->fd >= 0)
		close(v->fd);
	v->seg_first = first;
	v->seg_last = 0;
	v->fd = open(path, O_RDONLY | O_CLOEXEC);
	return v->fd < 0 ? -1 : 0;
}

/*
 * Sends what the log holds beyond the viewer's position, at the pace of
 * its connection: at most VIEW_HIGH_WATER bytes wait in its output, then
 * it waits for them to drain. Never touches the exec or other viewers.
 */
static void
viewer_pump(struct api_viewer *v)
{
	struct areq *a = v->a;
	struct api_exec *x = v->x;
	struct bufferevent *bev;
	struct seg *g, *nx;
	struct timeval tv;
	char buf[VIEW_READ];
	uint64_t last;
	ssize_t n;

	if (a->req == NULL)
		return;
	if (x == NULL) {
		viewer_end(v, "forgotten");
		return;
	}
	for (;;) {
		bev = evhttp_connection_get_bufferevent(a->conn);
		if (bev != NULL && evbuffer_get_length(bufferevent_get_output(
		    bev)) > VIEW_HIGH_WATER) {
			v->blocked = 1;
			viewer_send(a);
			tv.tv_sec = a->s->cfg->viewer_stall / 1000;
			tv.tv_usec = (a->s->cfg->viewer_stall % 1000) * 1000;
			evtimer_add(v->stall, &tv);
			return;
		}
		n = v->fd >= 0 ? read(v->fd, buf, sizeof(buf)) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0) {
			evbuffer_add(a->chunk, buf, (size_t)n);
			viewer_send(a);
			ping_rearm(a);
			continue;
		}
		/* End of this segment's file. */
		g = seg_find(x, v->seg_first);
		if (v->fd >= 0 && g != NULL && g->next == NULL) {
			/* The newest segment: wait for more, or the end. */
			if (!ended(x) && v->follow) {
				v->waiting = 1;
				return;
			}
			viewer_end(v, "ok");
			return;
		}
		last = g != NULL ? g->last_id : v->seg_last;
		for (nx = x->segs; nx != NULL && nx->first_id <= v->seg_first;
		    nx = nx->next)
			;
		if (nx == NULL) {
			/* Everything was dropped meanwhile (total cap). */
			if (v->fd < 0 && x->segs == NULL) {
				viewer_end(v, "ok");
				return;
			}
			send_reset(a, x->removed[0] != '\0' ? x->removed :
			    "dropped", "The rest of this exec's log is no longer "
			    "kept.", x->last_id + 1);
			viewer_end(v, "reset");
			return;
		}
		if (v->fd >= 0 && nx->first_id != last + 1)
			send_reset(a, "dropped", "Events were dropped from this "
			    "exec's log (exec_log_max) before this viewer read "
			    "them.", nx->first_id);
		if (seg_open(v, nx->first_id) == -1) {
			viewer_end(v, "io_error");
			return;
		}
	}
}

/* Parses a Last-Event-ID value: decimal, no sign, at most 19 digits. */
static int
parse_event_id(const char *t, uint64_t *out)
{
	size_t i, n = strlen(t);

	*out = 0;
	if (n == 0 || n > 19)
		return -1;
	for (i = 0; i < n; i++) {
		if (t[i] < '0' || t[i] > '9')
			return -1;
		*out = *out * 10 + (uint64_t)(t[i] - '0');
	}
	return 0;
}

/* Positions v just before event want (>= the segment's first id). */
static int
seek_event(struct api_viewer *v, struct seg *g, uint64_t want)
{
	char *buf;
	size_t pos = 0;
	const char *nn;
	unsigned long long id;
	ssize_t r;

	if (seg_open(v, g->first_id) == -1)
		return -1;
	if (want <= g->first_id)
		return 0;
	if ((buf = malloc(g->bytes + 1)) == NULL)
		return -1;
	r = pread(v->fd, buf, g->bytes, 0);
	if (r < 0) {
		free(buf);
		return -1;
	}
	buf[r] = '\0';
	while (pos < (size_t)r) {
		if (sscanf(buf + pos, "id: %llu\n", &id) != 1 || id >= want)
			break;
		nn = memmem(buf + pos, (size_t)r - pos, "\n\n", 2);
		if (nn == NULL)
			break;
		pos = (size_t)(nn - buf) + 2;
	}
	free(buf);
	return lseek(v->fd, (off_t)pos, SEEK_SET) < 0 ? -1 : 0;
}

void
api_h_execs_events(struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->req);
	struct evkeyvalq q;
	struct evkeyvalq *h = evhttp_request_get_output_headers(a->req);
	struct timeval tv = { VIEW_TIMEOUT_S, 0 };
	const char *lei, *fol;
	struct api_viewer *v = NULL;
	struct api_exec *x;
	struct seg *g, *at;
	struct bufferevent *bev;
	uint64_t last = 0;
	int sfd, sndbuf = VIEW_SNDBUF;

	memset(&q, 0, sizeof(q));
	if (evhttp_parse_query_str(evhttp_uri_get_query(uri) ?
	    evhttp_uri_get_query(uri) : "", &q) == -1) {
		areq_fail_code(a, SBX_E_BAD_REQUEST, "Bad query string.");
		return;
	}
	/* A ticket was checked before (api_execs_ticket_auth). */
	x = exec_find(a, a->exec_id);
	if (x == NULL) {
		evhttp_clear_headers(&q);
		areq_fail_code(a, SBX_E_NOT_FOUND, "That NPC has no exec with "
		    "that id.");
		return;
	}
	lei = evhttp_find_header(evhttp_request_get_input_headers(a->req),
	    "Last-Event-ID");
	if (lei == NULL)
		lei = evhttp_find_header(&q, "last_event_id");
	fol = evhttp_find_header(&q, "follow");
	if (lei != NULL && (parse_event_id(lei, &last) == -1 ||
	    last > x->last_id)) {
		evhttp_clear_headers(&q);
		areq_fail_code(a, SBX_E_BAD_REQUEST, "Last-Event-ID must be the "
		    "decimal id of an event this exec sent (its last is %" PRIu64
		    ").", x->last_id);
		return;
	}
	if (fol != NULL && strcmp(fol, "0") != 0 && strcmp(fol, "1") != 0) {
		evhttp_clear_headers(&q);
		areq_fail_code(a, SBX_E_BAD_REQUEST, "follow must be 0 or 1.");
		return;
	}
	if (ended(x) && last == x->last_id && lei != NULL) {
		/* Nothing after the terminal event: 204 tells an EventSource
		 * to stop reconnecting (WHATWG HTML §9.2). */
		evhttp_clear_headers(&q);
		evhttp_send_reply(a->req, 204, "No Content", NULL);
		a->req = NULL;
		areq_finish(a, 204, "ok");
		return;
	}
	if ((v = calloc(1, sizeof(*v))) == NULL ||
	    (a->chunk = evbuffer_new()) == NULL ||
	    (a->ping = evtimer_new(a->s->base, ping_fire, a)) == NULL ||
	    (v->stall = evtimer_new(a->s->base, viewer_stalled, v)) == NULL) {
		free(v);
		evhttp_clear_headers(&q);
		areq_fail_code(a, SBX_E_INTERNAL, "Out of memory.");
		return;
	}
	v->a = a;
	v->x = x;
	v->fd = -1;
	v->follow = fol == NULL || strcmp(fol, "1") == 0;
	evhttp_clear_headers(&q);
	a->viewer = v;
	v->next = x->viewers;
	x->viewers = v;
	evhttp_add_header(h, "Content-Type", SBX_CT_SSE);
	evhttp_add_header(h, "Cache-Control", "no-cache");
	evhttp_add_header(h, "X-Accel-Buffering", "no");
	a->conn = evhttp_request_get_connection(a->req);
	/* A fixed kernel send buffer: what a stalled viewer can hold is
	 * VIEW_SNDBUF there plus VIEW_HIGH_WATER here, never more. */
	bev = evhttp_connection_get_bufferevent(a->conn);
	if (bev != NULL && (sfd = bufferevent_getfd(bev)) >= 0 &&
	    setsockopt(sfd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) == -1)
		log_debug("cannot set a viewer's send buffer", NULL);
	evhttp_connection_set_timeout_tv(a->conn, &tv);
	sbx_gate_watch(a->s->gate, a->conn, viewer_closed, a);
	evhttp_send_reply_start(a->req, 200, "OK");
	a->streaming = 1;
	a->sse_counted = 1;
	api_metrics_sse(&a->s->metrics, 1);
	evbuffer_add_printf(a->chunk, "retry: %lld\n\n", a->s->cfg->sse_retry);
	ping_rearm(a);
	/* Where to start: the segment holding event last + 1. */
	at = NULL;
	for (g = x->segs; g != NULL && g->first_id <= last + 1; g = g->next)
		at = g;
	if (x->segs == NULL) {
		if (x->last_id > last) {
			send_reset(a, x->removed[0] != '\0' ? x->removed :
			    "dropped", "This exec's log is no longer kept.",
			    x->last_id + 1);
			viewer_end(v, "reset");
			return;
		}
		viewer_pump(v);
		return;
	}
	if (at == NULL) {
		send_reset(a, "dropped", "The events after that id were dropped "
		    "from this exec's log (exec_log_max); the log goes on with "
		    "the first event kept.", x->segs->first_id);
		at = x->segs;
	}
	if (seek_event(v, at, last + 1) == -1) {
		viewer_end(v, "io_error");
		return;
	}
	viewer_pump(v);
}

void
api_execs_drain(struct api_server *s)
{
	struct api_exec *x;
	struct api_viewer *v;

	for (x = s->execs; x != NULL; x = x->next)
		while ((v = x->viewers) != NULL)
			viewer_end(v, SBX_E_SHUTTING_DOWN);
}
