/* api_execs_view.c - sandbox-api resource exec viewers: browser tickets, the resumable SSE event stream read from the log (ADR 0015) and the list of execs, encoded in slices (adr/0048). */
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
#include "sbx_time.h"
#include "api_execs_int.h"

static void viewer_pump(struct ax_viewer *v);

/* ------------------------------------------------------------------ */
/* Tickets                                                             */

static void
ticket_hash(const struct api_server *s, const char *t, size_t len,
    unsigned char out[32])
{
	crypto_generichash(out, 32, (const unsigned char *)t, len,
	    s->ticket_key, sizeof(s->ticket_key));
}

/* x's tickets file rewritten with its tickets (tmp + rename; none: the
 * file goes). A failure leaves the old file, whose expired lines the
 * loader skips. */
static void
tickets_rewrite(struct api_exec *x)
{
	char path[1024], tmp[1040], hex[65];
	const struct ticket *t;
	FILE *f = NULL;
	int fd, ok = 1;

	ax_exec_path(path, sizeof(path), x, "tickets");
	if (x->tickets == NULL) {
		unlink(path);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0 && (f = fdopen(fd, "w")) == NULL)
		close(fd);
	if (f == NULL)
		return;
	for (t = x->tickets; t != NULL && ok; t = t->next) {
		sodium_bin2hex(hex, sizeof(hex), t->hash, sizeof(t->hash));
		ok = fprintf(f, "%s %lld %s\n", hex, (long long)t->expires_ms,
		    t->principal) > 0;
	}
	sodium_memzero(hex, sizeof(hex));
	if (fclose(f) != 0 || !ok || rename(tmp, path) != 0)
		unlink(tmp);
}

/* Drops x's tickets that expired by now (wall ms), in memory and on
 * disk, so neither the table nor a lookup's scan outgrows ticket_ttl. */
static void
tickets_prune(struct api_exec *x, int64_t now)
{
	struct ticket **pp = &x->tickets, *t;
	int dropped = 0;

	while ((t = *pp) != NULL) {
		if (t->expires_ms > now) {
			pp = &t->next;
			continue;
		}
		*pp = t->next;
		sodium_memzero(t, sizeof(*t));
		free(t);
		dropped = 1;
	}
	if (dropped)
		tickets_rewrite(x);
}

/* Live tickets of x. */
static unsigned
tickets_count(const struct api_exec *x)
{
	const struct ticket *t;
	unsigned n = 0;

	for (t = x->tickets; t != NULL; t = t->next)
		n++;
	return n;
}

int
api_h_execs_ticket(struct areq *a, struct sbx_err *err)
{
	struct api_exec *x;
	struct ticket *t;
	char tok[SBX_TOKEN_GEN_LEN + 1], hex[65], path[1024], url[512];
	int64_t exp;
	FILE *f = NULL;
	int fd, ok;
	json_t *o;

	if ((x = ax_exec_of(a, err)) == NULL)
		return -1;
	tickets_prune(x, sbx_wall_ms());
	if (tickets_count(x) >= TICKETS_MAX)
		return sbx_err_set(err, SBX_E_TOO_MANY, "Exec %s already has %u "
		    "live tickets; reuse one, or ask again when one expires "
		    "(ticket_ttl).", x->id, TICKETS_MAX);
	if ((t = calloc(1, sizeof(*t))) == NULL ||
	    sbx_token_generate(tok, sizeof(tok)) == -1) {
		free(t);
		return sbx_err_oom(err);
	}
	exp = sbx_wall_ms() + a->s->cfg->ticket_ttl;
	ticket_hash(a->s, tok, strlen(tok), t->hash);
	t->expires_ms = exp;
	snprintf(t->principal, sizeof(t->principal), "%s", a->who.name);
	/* Persisted (as its keyed hash) so a ticket survives an api restart:
	 * a browser's EventSource reconnects with the same URL. */
	sodium_bin2hex(hex, sizeof(hex), t->hash, sizeof(t->hash));
	ax_exec_path(path, sizeof(path), x, "tickets");
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
		return sbx_err_set(err, SBX_E_INTERNAL, "The api cannot store "
		    "the ticket.");
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
	return 0;
}

int
api_ticket_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, api_ticket_find_fn find, struct api_principal *who)
{
	struct api_principal p;
	struct api_npc n;
	struct evkeyvalq q;
	struct sbx_err err;
	char principal[API_NAME_MAX + 1];
	const char *tok;
	int r, found;

	sbx_err_clear(&err);
	memset(&q, 0, sizeof(q));
	if (query == NULL || !api_npc_name_valid(npc) ||
	    evhttp_parse_query_str(query, &q) == -1 ||
	    (tok = evhttp_find_header(&q, "ticket")) == NULL) {
		evhttp_clear_headers(&q);
		return 0;
	}
	if ((r = api_store_npc_get(s->store, npc, &n, &err)) != 1) {
		evhttp_clear_headers(&q);
		return r;
	}
	found = find(s, npc, n.owner_id, id, tok, principal, sizeof(principal));
	evhttp_clear_headers(&q);
	if (!found)
		return 0;
	/* A ticket is no stronger than its principal's key is now. */
	if ((r = api_store_principal_get(s->store, principal, &p, &err)) != 1)
		return r;
	if (p.revoked_at != 0 || (p.role != API_ROLE_OPERATOR &&
	    p.id != n.owner_id))
		return 0;
	*who = p;
	return 1;
}

/* api_ticket_find_fn of exec events: a live ticket tok of exec id. */
static int
exec_ticket_find(struct api_server *s, const char *npc, int64_t owner_id,
    const char *id, const char *tok, char *principal, size_t cap)
{
	struct api_exec *x;
	struct ticket *t;
	unsigned char h[32];

	for (x = s->execs; x != NULL; x = x->next)
		if (strcmp(x->id, id) == 0 && strcmp(x->npc, npc) == 0 &&
		    x->owner_id == owner_id)
			break;
	if (x == NULL)
		return 0;
	tickets_prune(x, sbx_wall_ms());
	ticket_hash(s, tok, strlen(tok), h);
	for (t = x->tickets; t != NULL; t = t->next)
		if (sodium_memcmp(t->hash, h, sizeof(h)) == 0 &&
		    t->expires_ms > sbx_wall_ms()) {
			snprintf(principal, cap, "%s", t->principal);
			return 1;
		}
	return 0;
}

int
api_execs_ticket_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, struct api_principal *who)
{
	return api_ticket_auth(s, npc, id, query, exec_ticket_find, who);
}

/* ------------------------------------------------------------------ */
/* Viewers                                                             */

static void
viewer_detach(struct ax_viewer *v)
{
	struct ax_viewer **pp;

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

/* on_end of a request that views an exec: its viewer is detached from
 * the exec and freed. */
static void
viewer_free(struct areq *a)
{
	struct ax_viewer *v = a->viewer;

	if (v == NULL)
		return;
	viewer_detach(v);
	if (v->stall != NULL)
		event_free(v->stall);
	a->viewer = NULL;
	free(v);
}

/* Ends v's stream normally (what is queued is sent first); a is freed. */
static void
viewer_end(struct ax_viewer *v, const char *outcome)
{
	viewer_detach(v);
	areq_stream_end(v->a, outcome);
}

/* on_pause of a viewer (the core's backpressure): over the high water
 * mark, the pump stops and the stall timer runs; drained, it reads on. */
static void
viewer_pause(struct areq *a, int on)
{
	struct ax_viewer *v = a->viewer;
	struct timeval tv;

	if (v == NULL)
		return;
	if (on) {
		v->blocked = 1;
		tv.tv_sec = a->s->cfg->viewer_stall / 1000;
		tv.tv_usec = (a->s->cfg->viewer_stall % 1000) * 1000;
		evtimer_add(v->stall, &tv);
		return;
	}
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
	struct ax_viewer *v = arg;
	struct areq *a = v->a;

	(void)fd;
	(void)what;
	log_info("exec viewer stalled; cut off", "npc", a->npc.name, NULL);
	viewer_detach(v);
	areq_stream_abort(a, "stalled");
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
		evbuffer_add_printf(a->h.chunk, "event: reset\ndata: %s\n\n", t);
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
seg_open(struct ax_viewer *v, uint64_t first)
{
	char path[1024];

	ax_seg_path(path, sizeof(path), v->x, first);
	if (v->fd >= 0)
		close(v->fd);
	v->seg_first = first;
	v->seg_last = 0;
	v->fd = open(path, O_RDONLY | O_CLOEXEC);
	return v->fd < 0 ? -1 : 0;
}

/*
 * Sends what the log holds beyond the viewer's position, at the pace of
 * its connection: once more than VIEW_HIGH_WATER bytes wait in its output
 * the core pauses it (viewer_pause) until they drain. Never touches the
 * exec or other viewers.
 */
static void
viewer_pump(struct ax_viewer *v)
{
	struct areq *a = v->a;
	struct api_exec *x = v->x;
	struct seg *g, *nx;
	char buf[VIEW_READ];
	uint64_t last;
	ssize_t n;

	if (a->h.req == NULL)
		return;
	if (x == NULL) {
		viewer_end(v, "forgotten");
		return;
	}
	while (!v->blocked) {
		n = v->fd >= 0 ? read(v->fd, buf, sizeof(buf)) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0) {
			evbuffer_add(a->h.chunk, buf, (size_t)n);
			areq_ping_arm(a);
			areq_stream_flush(a);
			continue;
		}
		/* End of this segment's file. */
		g = seg_find(x, v->seg_first);
		if (v->fd >= 0 && g != NULL && g->next == NULL) {
			/* The newest segment: wait for more, or the end. */
			if (!ax_ended(x) && v->follow) {
				v->waiting = 1;
				areq_stream_flush(a);
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
seek_event(struct ax_viewer *v, struct seg *g, uint64_t want)
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

/* ?follow= and the position (Last-Event-ID, else ?last_event_id=) of a
 * viewer of x: *follow, *last (0: from the start), *resumed (a position
 * was given). */
static int
events_query(struct areq *a, const struct api_exec *x, int *follow,
    uint64_t *last, int *resumed, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	struct evkeyvalq q;
	const char *lei, *fol;
	int rc = 0;

	memset(&q, 0, sizeof(q));
	*last = 0;
	*follow = 1;
	*resumed = 0;
	if (evhttp_parse_query_str(evhttp_uri_get_query(uri) ?
	    evhttp_uri_get_query(uri) : "", &q) == -1)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_BAD_QUERY);
	lei = evhttp_find_header(evhttp_request_get_input_headers(a->h.req),
	    "Last-Event-ID");
	if (lei == NULL)
		lei = evhttp_find_header(&q, "last_event_id");
	fol = evhttp_find_header(&q, "follow");
	*resumed = lei != NULL;
	*follow = fol == NULL || strcmp(fol, "1") == 0;
	if (lei != NULL && (parse_event_id(lei, last) == -1 ||
	    *last > x->last_id))
		rc = sbx_err_set(err, SBX_E_BAD_REQUEST, "Last-Event-ID must be "
		    "the decimal id of an event this exec sent (its last is %"
		    PRIu64 ").", x->last_id);
	else if (fol != NULL && strcmp(fol, "0") != 0 && strcmp(fol, "1") != 0)
		rc = sbx_err_set(err, SBX_E_BAD_REQUEST, "follow must be 0 or "
		    "1.");
	evhttp_clear_headers(&q);
	return rc;
}

/* Where v starts: the segment holding event last + 1 (a reset event when
 * it was dropped). Ends v's request when there is nothing to read. */
static void
viewer_start(struct ax_viewer *v, uint64_t last)
{
	struct areq *a = v->a;
	struct api_exec *x = v->x;
	struct seg *g, *at = NULL;

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

int
api_h_execs_events(struct areq *a, struct sbx_err *err)
{
	struct ax_viewer *v = NULL;
	struct api_exec *x;
	struct bufferevent *bev;
	uint64_t last;
	int follow, resumed, sfd, sndbuf = VIEW_SNDBUF;

	/* A ticket was checked before (api_execs_ticket_auth). */
	if ((x = ax_exec_of(a, err)) == NULL ||
	    events_query(a, x, &follow, &last, &resumed, err) == -1)
		return -1;
	if (ax_ended(x) && last == x->last_id && resumed) {
		/* Nothing after the terminal event: 204 tells an EventSource
		 * to stop reconnecting (WHATWG HTML §9.2). */
		areq_reply_body(a, 204, NULL, NULL);
		return 0;
	}
	/* A viewer is one of its principal's open streams (adr/0056);
	 * given back in areq_finish. */
	if (a->authed) {
		if (api_streams_take(a->s, a->who.id, err) == -1)
			return -1;
		a->stream_counted = 1;
	}
	if ((v = calloc(1, sizeof(*v))) == NULL ||
	    (v->stall = evtimer_new(a->s->base, viewer_stalled, v)) == NULL) {
		free(v);
		return sbx_err_oom(err);
	}
	v->a = a;
	v->pump = viewer_pump;
	v->x = x;
	v->fd = -1;
	v->follow = follow;
	a->viewer = v;
	a->on_end = viewer_free;
	a->on_pause = viewer_pause;
	a->sse = 1;
	v->next = x->viewers;
	x->viewers = v;
	if (areq_stream_begin(a, SBX_CT_SSE, VIEW_HIGH_WATER) == -1)
		return 0;   /* a ended (viewer_free) */
	/* A fixed kernel send buffer: what a stalled viewer can hold is
	 * VIEW_SNDBUF there plus VIEW_HIGH_WATER here, never more. */
	bev = evhttp_connection_get_bufferevent(a->h.conn);
	if (bev != NULL && (sfd = bufferevent_getfd(bev)) >= 0 &&
	    setsockopt(sfd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) == -1)
		log_debug("cannot set a viewer's send buffer", NULL);
	evbuffer_add_printf(a->h.chunk, "retry: %lld\n\n", a->s->cfg->sse_retry);
	viewer_start(v, last);
	return 0;
}

/* ?limit= and ?after= of a list of execs into *n and after (cap bytes;
 * "" when absent). */
static int
list_query(struct areq *a, long *n, char *after, size_t cap,
    struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	struct evkeyvalq q;
	const char *lim, *aft;
	char *end;
	int rc = 0;

	memset(&q, 0, sizeof(q));
	after[0] = '\0';
	if (evhttp_parse_query_str(evhttp_uri_get_query(uri) ?
	    evhttp_uri_get_query(uri) : "", &q) == -1)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_BAD_QUERY);
	lim = evhttp_find_header(&q, "limit");
	aft = evhttp_find_header(&q, "after");
	if (lim != NULL) {
		*n = strtol(lim, &end, 10);
		if (*lim == '\0' || *end != '\0' || *n < 1 || *n > LIST_MAX)
			rc = sbx_err_set(err, SBX_E_BAD_REQUEST, "limit must be "
			    "1 to %d.", LIST_MAX);
	}
	if (rc == 0 && aft != NULL && (strlen(aft) >= cap ||
	    ax_exec_find(a, aft) == NULL))
		rc = sbx_err_set(err, SBX_E_BAD_REQUEST, "after must name an "
		    "exec of this NPC (the \"next\" of the previous page).");
	if (rc == 0 && aft != NULL)
		snprintf(after, cap, "%s", aft);
	evhttp_clear_headers(&q);
	return rc;
}

/* ------------------------------------------------------------------ */
/* The list, encoded in slices (adr/0048)                              */

/* A record as it was when the list was asked: a copy whose pointers are
 * cleared (segs points at the copy of its first segment), so nothing the
 * loop does to the records meanwhile (an exec ending, bounds forgetting
 * one) reaches the reply. */
struct list_row {
	struct api_exec x;
	struct seg first;
};

struct ax_list_out {
	struct areq *a;
	struct list_row *rows;
	size_t n, done;
	char next[EXEC_ID_LEN + 1];   /* "" when no page follows */
	struct evbuffer *text;        /* the reply so far */
	struct event *ev;             /* the next slice (a 0 s timer: after I/O) */
};

static void
list_out_free(struct ax_list_out *lo)
{
	if (lo == NULL)
		return;
	if (lo->ev != NULL)
		event_free(lo->ev);
	if (lo->text != NULL)
		evbuffer_free(lo->text);
	free(lo->rows);
	free(lo);
}

/* on_end of a list request: its encoding stops (a client gone meanwhile,
 * a drain) or is done; either way it is freed with a. */
static void
list_end(struct areq *a)
{
	list_out_free(a->xlist);
	a->xlist = NULL;
}

static void
list_row_copy(struct list_row *r, const struct api_exec *x)
{
	r->x = *x;
	if (x->segs != NULL) {
		r->first = *x->segs;
		r->first.next = NULL;
		r->x.segs = &r->first;
	}
	r->x.cur = NULL;
	r->x.op = NULL;
	r->x.lim = NULL;
	r->x.creator = NULL;
	r->x.viewers = NULL;
	r->x.tickets = NULL;
	r->x.prev = r->x.next = NULL;
}

/*
 * Encodes LIST_SLICE records, then waits for the next turn of the loop
 * (a 0 s timer: event_active would run it in the same turn), so requests
 * on other connections are served between slices; after the last,
 * replies with the whole text (Content-Length): the bytes
 * json_dumps(JSON_COMPACT) gives for {"execs":[...],"next":...} in one
 * piece (adr/0048). Ends a (and frees lo) after the last slice or when
 * out of memory.
 */
static void
list_slice(evutil_socket_t fd, short what, void *arg)
{
	static const struct timeval now = { 0, 0 };
	struct ax_list_out *lo = arg;
	struct areq *a = lo->a;
	size_t end = lo->done + LIST_SLICE;
	json_t *o;
	char *t;
	int r;

	(void)fd;
	(void)what;
	if (end > lo->n)
		end = lo->n;
	for (; lo->done < end; lo->done++) {
		o = ax_exec_json(&lo->rows[lo->done].x);
		t = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);
		r = t == NULL || (lo->done > 0 &&
		    evbuffer_add(lo->text, ",", 1) < 0) ||
		    evbuffer_add(lo->text, t, strlen(t)) < 0;
		free(t);
		if (r)
			goto oom;
	}
	if (lo->done < lo->n) {
		evtimer_add(lo->ev, &now);
		return;
	}
	if ((lo->next[0] != '\0' ? evbuffer_add_printf(lo->text,
	    "],\"next\":\"%s\"}", lo->next) : evbuffer_add_printf(lo->text,
	    "],\"next\":null}")) < 0)
		goto oom;
	areq_reply_json_text(a, 200, lo->text);   /* frees lo (list_end) */
	return;
oom:
	areq_fail_code(a, SBX_E_INTERNAL, "%s", SBX_MSG_OOM);
}

int
api_h_execs_list(struct areq *a, struct sbx_err *err)
{
	struct ax_list_out *lo;
	struct api_exec *x, *first = NULL;
	long n = LIST_DEFAULT, k = 0;
	char after[EXEC_ID_LEN + 1];
	int started;

	if (list_query(a, &n, after, sizeof(after), err) == -1)
		return -1;
	/* The page's records: from the one after ?after=, at most n. */
	started = after[0] == '\0';
	for (x = a->s->execs; x != NULL && k < n; x = x->next) {
		if (strcmp(x->npc, a->npc.name) != 0 ||
		    x->owner_id != a->npc.owner_id)
			continue;
		if (!started) {
			started = strcmp(x->id, after) == 0;
			continue;
		}
		if (first == NULL)
			first = x;
		k++;
	}
	if ((lo = calloc(1, sizeof(*lo))) == NULL ||
	    (k > 0 && (lo->rows = calloc((size_t)k, sizeof(*lo->rows))) ==
	    NULL) || (lo->text = evbuffer_new()) == NULL ||
	    (lo->ev = evtimer_new(a->s->base, list_slice, lo)) == NULL ||
	    evbuffer_add(lo->text, "{\"execs\":[", 10) < 0) {
		list_out_free(lo);
		return sbx_err_oom(err);
	}
	for (x = first; x != NULL && lo->n < (size_t)k; x = x->next)
		if (strcmp(x->npc, a->npc.name) == 0 &&
		    x->owner_id == a->npc.owner_id)
			list_row_copy(&lo->rows[lo->n++], x);
	/* A next page exists when an exec of this NPC follows. */
	for (; x != NULL; x = x->next)
		if (strcmp(x->npc, a->npc.name) == 0 &&
		    x->owner_id == a->npc.owner_id)
			break;
	if (x != NULL && lo->n > 0)
		snprintf(lo->next, sizeof(lo->next), "%s",
		    lo->rows[lo->n - 1].x.id);
	lo->a = a;
	a->xlist = lo;
	a->on_end = list_end;
	/* A client gone before the last slice ends a (499) and frees lo. */
	if (lo->n > LIST_SLICE)
		areq_watch(a);
	list_slice(-1, 0, lo);
	return 0;
}

void
api_execs_drain(struct api_server *s)
{
	struct api_exec *x;
	struct ax_viewer *v;

	for (x = s->execs; x != NULL; x = x->next)
		while ((v = x->viewers) != NULL)
			viewer_end(v, SBX_E_SHUTTING_DOWN);
}
