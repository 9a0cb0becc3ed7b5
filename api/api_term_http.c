/* api_term_http.c - sandbox-api terminal routes: create, list, get, delete, output as SSE from an offset, input, control, tickets (docs/api.md "Terminals", adr/0051). Above api_term.c: calls it through api_term_int.h; replies through the request layer. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <sodium.h>

#include "api_term_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_time.h"
#include "sbx_token.h"
#include "sbx_wire.h"

#define TERM_SSE_HIGH_WATER ((size_t)256 * 1024)
#define TERM_SSE_SNDBUF (128 * 1024)   /* SO_SNDBUF of an SSE viewer's socket */

/* ------------------------------------------------------------------ */
/* Create, list, get, delete                                           */

static const char *const create_fields[] = { "argv", "cwd", "env",
    "timeout_ms", "cols", "rows", "term", "pty", NULL };

/* An int member in lo..hi, or def when absent. */
static int
int_field(const json_t *body, const char *k, int def, int lo, int hi,
    int *out, struct sbx_err *err)
{
	const json_t *v = json_object_get(body, k);

	*out = def;
	if (v == NULL)
		return 0;
	if (!json_is_integer(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "%s must be an integer.",
		    k);
	if (json_integer_value(v) < lo || json_integer_value(v) > hi)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s must be %d to %d.",
		    k, lo, hi);
	*out = (int)json_integer_value(v);
	return 0;
}

static int
term_name_ok(const char *t)
{
	size_t n = strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789._+-");

	return n >= 1 && n <= 64 && t[n] == '\0';
}

/* The argv as one line of at most cap - 1 bytes, cut between characters. */
static void
argv_preview(const json_t *argv, char *out, size_t cap)
{
	size_t i, len = 0, n;
	const char *s;

	for (i = 0; i < json_array_size(argv) && len + 1 < cap; i++) {
		if ((s = json_string_value(json_array_get(argv, i))) == NULL)
			continue;
		if (i > 0)
			out[len++] = ' ';
		n = strlen(s);
		if (len + n >= cap) {
			n = cap - 1 - len;
			while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
				n--;
			memcpy(out + len, s, n);
			len += n;
			break;
		}
		memcpy(out + len, s, n);
		len += n;
	}
	out[len] = '\0';
}

int
api_h_terms_create(struct areq *a, struct sbx_err *err)
{
	struct sbx_session_req req;
	struct sbx_wire_exec x;
	json_t *body = a->body, *ex, *pty;
	const char *term = NULL, *bad;
	char preview[257];
	int rc = -1, no_argv;

	memset(&req, 0, sizeof(req));
	memset(&x, 0, sizeof(x));
	if (body == NULL) {
		/* No body: a login shell of 80x24. */
		if ((a->body = body = json_object()) == NULL)
			return sbx_err_oom(err);
	}
	if (sbx_wire_fields_check(body, create_fields, err) == -1)
		return -1;
	pty = json_object_get(body, "pty");
	if (pty != NULL && !json_is_boolean(pty))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "pty must be true or "
		    "false.");
	req.kind = pty == NULL || json_is_true(pty) ? SBX_SESSION_PTY :
	    SBX_SESSION_EXEC;
	no_argv = json_object_get(body, "argv") == NULL;
	if (no_argv && req.kind == SBX_SESSION_EXEC)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A terminal with pty "
		    "false needs an argv.");
	if (req.kind == SBX_SESSION_PTY) {
		if (int_field(body, "cols", 80, 1, 10000, &req.cols, err) == -1 ||
		    int_field(body, "rows", 24, 1, 10000, &req.rows, err) == -1)
			return -1;
		if (json_object_get(body, "term") != NULL) {
			term = json_string_value(json_object_get(body, "term"));
			if (term == NULL || !term_name_ok(term))
				return sbx_err_set(err, SBX_E_BAD_REQUEST, "term "
				    "must be 1 to 64 of A-Z a-z 0-9 . _ + -.");
		}
		req.term = term;
	} else if ((bad = json_object_get(body, "cols") != NULL ? "cols" :
	    json_object_get(body, "rows") != NULL ? "rows" :
	    json_object_get(body, "term") != NULL ? "term" : NULL) != NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s is for a pty "
		    "terminal only.", bad);
	/* argv, cwd, env, timeout_ms: the exec body's rules (sbx_wire.h). */
	if ((ex = json_object()) == NULL)
		return sbx_err_oom(err);
	json_object_set(ex, "argv", no_argv ? json_pack("[s]", "-") :
	    json_object_get(body, "argv"));
	if (no_argv)
		json_decref(json_object_get(ex, "argv"));
	if (json_object_get(body, "cwd") != NULL)
		json_object_set(ex, "cwd", json_object_get(body, "cwd"));
	if (json_object_get(body, "env") != NULL)
		json_object_set(ex, "env", json_object_get(body, "env"));
	if (json_object_get(body, "timeout_ms") != NULL)
		json_object_set(ex, "timeout_ms", json_object_get(body,
		    "timeout_ms"));
	if (sbx_wire_exec_decode(ex, &x, err) == -1)
		goto done;
	req.exec = x.req;
	if (no_argv)
		req.exec.argv = NULL;    /* the login shell */
	argv_preview(no_argv ? NULL : json_object_get(body, "argv"), preview,
	    sizeof(preview));
	rc = term_create(a, &req, no_argv ? "" : preview, err);
done:
	sbx_wire_exec_free(&x);
	json_decref(ex);
	return rc;
}

int
api_h_terms_list(struct areq *a, struct sbx_err *err)
{
	json_t *arr = json_array(), *o;
	struct api_term *t;

	if (arr == NULL)
		return sbx_err_oom(err);
	for (t = a->s->terms; t != NULL; t = t->next)
		if (strcmp(t->npc, a->npc.name) == 0 &&
		    t->owner_id == a->npc.owner_id &&
		    (o = term_json(t)) != NULL)
			json_array_append_new(arr, o);
	areq_reply_json(a, 200, json_pack("{s:o}", "terminals", arr));
	return 0;
}

int
api_h_terms_get(struct areq *a, struct sbx_err *err)
{
	struct api_term *t;

	if ((t = term_of(a, err)) == NULL)
		return -1;
	areq_reply_json(a, 200, term_json(t));
	return 0;
}

int
api_h_terms_delete(struct areq *a, struct sbx_err *err)
{
	struct api_term *t;

	if ((t = term_of(a, err)) == NULL)
		return -1;
	term_kill(t, a->who.name);
	areq_reply_json(a, 200, term_json(t));
	return 0;
}

/* ------------------------------------------------------------------ */
/* Output as SSE                                                       */

/* One SSE event (no id when id is 0... ids are offsets: always given
 * for output, which ends at id). */
static void
sse_event(struct areq *a, const char *type, uint64_t id, json_t *o)
{
	char *t = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	if (t == NULL)
		return;
	if (id != UINT64_MAX)
		evbuffer_add_printf(a->h.chunk, "id: %" PRIu64 "\n", id);
	evbuffer_add_printf(a->h.chunk, "event: %s\ndata: %s\n\n", type, t);
	free(t);
}

static int
utf8_valid(const unsigned char *p, size_t n)
{
	json_t *s = json_stringn((const char *)p, n);
	int ok = s != NULL;

	json_decref(s);
	return ok;
}

/* An SSE viewer: its request, and the end of a UTF-8 character that the
 * last piece began and did not complete, held back (at most 3 bytes) so
 * that text goes out as "data", not cut into base64 pieces. */
struct sse_view {
	struct areq *a;
	unsigned char hold[4];
	size_t nhold;
	uint64_t hold_off;
	int hold_stream;
};

/* Bytes at the end of p (n bytes) that begin a UTF-8 character p does
 * not complete (RFC 3629 lead bytes); 0 when none. */
static size_t
utf8_tail(const unsigned char *p, size_t n)
{
	size_t i, want;
	unsigned char c;

	for (i = 1; i <= 3 && i <= n; i++) {
		c = p[n - i];
		if ((c & 0xC0) == 0x80)
			continue;
		want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 :
		    c >= 0xF0 && c <= 0xF4 ? 4 : 0;
		return want > i ? i : 0;
	}
	return 0;
}

/* One output event (not sent yet): text when p is UTF-8, else base64. */
static void
sse_piece(struct areq *a, int stream, uint64_t offset, const unsigned char *p,
    size_t n)
{
	json_t *o;
	char *b64;
	size_t cap;

	if (n == 0)
		return;
	if (utf8_valid(p, n))
		o = json_pack("{s:I,s:i,s:s%}", "offset", (json_int_t)offset,
		    "stream", stream, "data", (const char *)p, n);
	else {
		cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
		if ((b64 = malloc(cap)) == NULL)
			return;
		sodium_bin2base64(b64, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
		o = json_pack("{s:I,s:i,s:s}", "offset", (json_int_t)offset,
		    "stream", stream, "data_b64", b64);
		free(b64);
	}
	sse_event(a, "output", offset + n, o);
}

/* The held bytes as they are (the character never completed). */
static void
sse_hold_out(struct sse_view *sv)
{
	if (sv->nhold > 0)
		sse_piece(sv->a, sv->hold_stream, sv->hold_off, sv->hold,
		    sv->nhold);
	sv->nhold = 0;
}

static void
sse_output(void *arg, int stream, uint64_t offset, const unsigned char *p,
    size_t n)
{
	struct sse_view *sv = arg;
	struct areq *a = sv->a;
	unsigned char *buf = NULL;
	const unsigned char *q = p;
	uint64_t at = offset;
	size_t m = n, tail;

	if (sv->nhold > 0 && (sv->hold_stream != stream ||
	    sv->hold_off + sv->nhold != offset))
		sse_hold_out(sv);
	if (sv->nhold > 0) {
		if ((buf = malloc(sv->nhold + n)) == NULL)
			return;
		memcpy(buf, sv->hold, sv->nhold);
		memcpy(buf + sv->nhold, p, n);
		q = buf;
		m = sv->nhold + n;
		at = sv->hold_off;
		sv->nhold = 0;
	}
	tail = utf8_tail(q, m);
	sse_piece(a, stream, at, q, m - tail);
	memcpy(sv->hold, q + m - tail, tail);
	sv->nhold = tail;
	sv->hold_off = at + m - tail;
	sv->hold_stream = stream;
	free(buf);
	areq_ping_arm(a);
	areq_stream_flush(a);   /* may end a (and free sv): nothing after this */
}

static void
sse_ended(void *arg, const char *state, int code, const char *signal,
    const struct sbx_err *err)
{
	struct sse_view *sv = arg;
	struct areq *a = sv->a;

	sse_hold_out(sv);
	if (err != NULL && strcmp(state, "exited") != 0)
		sse_event(a, "error", UINT64_MAX, json_pack("{s:s,s:s,s:s}",
		    "state", state, "code", err->code, "message", err->message));
	else
		sse_event(a, "exit", UINT64_MAX, json_pack("{s:s,s:o,s:o}",
		    "state", state, "code", code >= 0 ? json_integer(code) :
		    json_null(), "signal", signal != NULL ? json_string(signal) :
		    json_null()));
	areq_stream_end(a, "ok");   /* sse_end detaches and frees sv */
}

static void
sse_writer(void *arg, int you)
{
	(void)arg;
	(void)you;   /* an SSE viewer never writes */
}

static void
sse_skipped(void *arg, uint64_t from, uint64_t to)
{
	struct sse_view *sv = arg;

	sse_hold_out(sv);
	sse_event(sv->a, "reset", UINT64_MAX, json_pack("{s:I,s:I,s:s}", "from",
	    (json_int_t)from, "to", (json_int_t)to, "message", "This viewer "
	    "fell behind the scrollback (terminal_scrollback); the bytes "
	    "between from and to are no longer kept."));
}

static const struct api_viewer_ops sse_ops = {
	.output = sse_output,
	.ended = sse_ended,
	.writer = sse_writer,
	.skipped = sse_skipped,
};

/* on_end of an SSE viewer's request: detached, its state freed. */
static void
sse_end(struct areq *a)
{
	struct sse_view *sv = a->tviewer != NULL ? a->tviewer->arg : NULL;

	api_viewer_detach(a->tviewer);
	a->tviewer = NULL;
	free(sv);
}

static void
sse_pause(struct areq *a, int on)
{
	api_viewer_pause(a->tviewer, on);
}

/* ?offset= (else Last-Event-ID: the offset after the last event seen). */
int
api_term_offset_query(struct areq *a, uint64_t *off, struct sbx_err *err)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	struct evkeyvalq q;
	const char *v;
	char *end;
	int rc = 0;

	memset(&q, 0, sizeof(q));
	*off = 0;
	if (evhttp_parse_query_str(evhttp_uri_get_query(uri) ?
	    evhttp_uri_get_query(uri) : "", &q) == -1)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_BAD_QUERY);
	v = evhttp_find_header(evhttp_request_get_input_headers(a->h.req),
	    "Last-Event-ID");
	if (v == NULL)
		v = evhttp_find_header(&q, "offset");
	if (v != NULL) {
		errno = 0;
		*off = strtoull(v, &end, 10);
		if (*v < '0' || *v > '9' || *end != '\0' || errno != 0 ||
		    strlen(v) > 19)
			rc = sbx_err_set(err, SBX_E_BAD_REQUEST, "offset must be a "
			    "decimal byte offset.");
	}
	evhttp_clear_headers(&q);
	return rc;
}

int
api_h_terms_output(struct areq *a, struct sbx_err *err)
{
	struct api_term *t;
	struct sse_view *sv;
	struct bufferevent *bev;
	uint64_t off, start;
	int sfd, sndbuf = TERM_SSE_SNDBUF;

	if ((t = term_of(a, err)) == NULL || api_term_offset_query(a, &off, err) == -1)
		return -1;
	/* One of its principal's open streams (adr/0056), given back in
	 * areq_finish. */
	if (a->authed) {
		if (api_streams_take(a->s, a->who.id, err) == -1)
			return -1;
		a->stream_counted = 1;
	}
	if ((sv = calloc(1, sizeof(*sv))) == NULL)
		return sbx_err_oom(err);
	sv->a = a;
	if ((a->tviewer = term_attach(t, off, 0, &sse_ops, sv, &start, err)) ==
	    NULL) {
		free(sv);
		return -1;
	}
	a->on_end = sse_end;
	a->on_pause = sse_pause;
	a->sse = 1;
	if (areq_stream_begin(a, SBX_CT_SSE, TERM_SSE_HIGH_WATER) == -1)
		return 0;   /* a ended (sse_end) */
	/* A fixed kernel send buffer: a viewer that stops reading holds at
	 * most TERM_SSE_SNDBUF there plus TERM_SSE_HIGH_WATER here. */
	bev = evhttp_connection_get_bufferevent(a->h.conn);
	if (bev != NULL && (sfd = bufferevent_getfd(bev)) >= 0 &&
	    setsockopt(sfd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) == -1)
		log_debug("cannot set a viewer's send buffer", NULL);
	evbuffer_add_printf(a->h.chunk, "retry: %lld\n\n", a->s->cfg->sse_retry);
	sse_event(a, "hello", UINT64_MAX, json_pack("{s:s,s:I,s:b,s:s}", "id",
	    t->id, "offset", (json_int_t)start, "pty", t->pty, "state",
	    t->state));
	areq_ping_arm(a);
	areq_stream_flush(a);
	return 0;
}

void
api_terms_drain(struct api_server *s)
{
	struct api_term *t;
	struct api_viewer *v;
	struct areq *a;
	int again = 1;

	/* SSE viewers end now with a last error event shutting_down, as an
	 * exec stream does (a terminal does not outlive the api). */
	while (again) {
		again = 0;
		for (t = s->terms; t != NULL && !again; t = t->next)
			for (v = t->viewers; v != NULL; v = v->next)
				if (!v->dead && v->ops == &sse_ops) {
					a = ((struct sse_view *)v->arg)->a;
					sse_hold_out(v->arg);
					sse_event(a, "error", UINT64_MAX, json_pack(
					    "{s:s,s:s,s:s}", "state", t->state,
					    "code", SBX_E_SHUTTING_DOWN, "message",
					    TERM_MSG_SHUTDOWN));
					sse_end(a);
					areq_stream_end(a, SBX_E_SHUTTING_DOWN);
					again = 1;
					break;
				}
	}
}

/* ------------------------------------------------------------------ */
/* Input and control                                                   */

int
api_h_terms_input(struct areq *a, struct sbx_err *err)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(a->h.req);
	struct api_term *t;
	size_t n = evbuffer_get_length(in);

	if ((t = term_of(a, err)) == NULL)
		return -1;
	if (term_input(t, evbuffer_pullup(in, -1), n, err) == -1) {
		if (strcmp(err->code, SBX_E_TOO_MANY) == 0)
			sbx_httpd_header(&a->h, "Retry-After", "1");
		return -1;
	}
	areq_reply_json(a, 200, json_pack("{s:I}", "bytes", (json_int_t)n));
	return 0;
}

static const struct {
	const char *name;
	int signo;
} signals[] = {
	{ "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT },
	{ "KILL", SIGKILL }, { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 },
	{ "TERM", SIGTERM }, { "CONT", SIGCONT }, { "STOP", SIGSTOP },
	{ "TSTP", SIGTSTP }, { "WINCH", SIGWINCH }, { "ALRM", SIGALRM },
};

int
api_term_ctl_parse(const json_t *o, struct sbx_session_ctl *c, int *eof,
    struct sbx_err *err)
{
	const char *type, *name;
	const json_t *sig;
	size_t i;

	memset(c, 0, sizeof(*c));
	*eof = 0;
	type = json_string_value(json_object_get(o, "type"));
	if (type == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "type must be "
		    "\"resize\", \"signal\" or \"eof\".");
	if (strcmp(type, "eof") == 0) {
		*eof = 1;
	} else if (strcmp(type, "resize") == 0) {
		c->kind = SBX_SESSION_RESIZE;
		if (!json_is_integer(json_object_get(o, "cols")) ||
		    !json_is_integer(json_object_get(o, "rows")))
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "A resize needs "
			    "integers cols and rows (1 to 10000).");
		if (json_integer_value(json_object_get(o, "cols")) < 1 ||
		    json_integer_value(json_object_get(o, "cols")) > 10000 ||
		    json_integer_value(json_object_get(o, "rows")) < 1 ||
		    json_integer_value(json_object_get(o, "rows")) > 10000)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "cols and rows "
			    "must be 1 to 10000.");
		c->cols = (int)json_integer_value(json_object_get(o, "cols"));
		c->rows = (int)json_integer_value(json_object_get(o, "rows"));
	} else if (strcmp(type, "signal") == 0) {
		c->kind = SBX_SESSION_SIGNAL;
		sig = json_object_get(o, "signal");
		if (json_is_integer(sig) && json_integer_value(sig) >= 1 &&
		    json_integer_value(sig) <= 64)
			c->signo = (int)json_integer_value(sig);
		else if ((name = json_string_value(sig)) != NULL) {
			if (strncmp(name, "SIG", 3) == 0)
				name += 3;
			for (i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
				if (strcmp(signals[i].name, name) == 0)
					c->signo = signals[i].signo;
		}
		if (c->signo == 0)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "signal must be "
			    "a number 1 to 64 or a name (INT, TERM, HUP, KILL, "
			    "QUIT, USR1, USR2, CONT, STOP, TSTP, WINCH, ALRM).");
	} else
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "type must be "
		    "\"resize\", \"signal\" or \"eof\".");
	return 0;
}

int
api_h_terms_control(struct areq *a, struct sbx_err *err)
{
	static const char *const fields[] = { "type", "cols", "rows", "signal",
	    NULL };
	struct sbx_session_ctl c;
	struct api_term *t;
	int eof;

	if ((t = term_of(a, err)) == NULL ||
	    sbx_wire_fields_check(a->body, fields, err) == -1 ||
	    api_term_ctl_parse(a->body, &c, &eof, err) == -1)
		return -1;
	if (eof) {
		if (term_eof(t) == -1)
			return sbx_err_set(err, SBX_E_CONFLICT, "Terminal %s has "
			    "ended.", t->id);
	} else if (term_control(t, &c, err) == -1)
		return -1;
	areq_reply_json(a, 200, term_json(t));
	return 0;
}

/* ------------------------------------------------------------------ */
/* Tickets                                                             */

static void
ticket_hash(const struct api_server *s, const char *tok, unsigned char out[32])
{
	/* A key of its own purpose: "term" hashed with the exec ticket key,
	 * so an exec ticket's hash never matches a terminal's. */
	unsigned char key[32];

	crypto_generichash(key, sizeof(key), (const unsigned char *)"sbx term "
	    "tickets", 17, s->ticket_key, sizeof(s->ticket_key));
	crypto_generichash(out, 32, (const unsigned char *)tok, strlen(tok),
	    key, sizeof(key));
	sodium_memzero(key, sizeof(key));
}

static void
tickets_prune(struct api_term *t, int64_t now)
{
	struct tticket **pp = &t->tickets, *k;

	while ((k = *pp) != NULL) {
		if (k->expires_ms > now) {
			pp = &k->next;
			continue;
		}
		*pp = k->next;
		sodium_memzero(k, sizeof(*k));
		free(k);
	}
}

int
api_h_terms_ticket(struct areq *a, struct sbx_err *err)
{
	struct api_term *t;
	struct tticket *k;
	char tok[SBX_TOKEN_GEN_LEN + 1], base[256], url[512], wsurl[512];
	unsigned n = 0;
	int64_t exp;
	json_t *o;

	if ((t = term_of(a, err)) == NULL)
		return -1;
	tickets_prune(t, sbx_wall_ms());
	for (k = t->tickets; k != NULL; k = k->next)
		n++;
	if (n >= TERM_TICKETS_MAX)
		return sbx_err_set(err, SBX_E_TOO_MANY, "Terminal %s already has "
		    "%u live tickets; reuse one, or ask again when one expires "
		    "(ticket_ttl).", t->id, n);
	if ((k = calloc(1, sizeof(*k))) == NULL ||
	    sbx_token_generate(tok, sizeof(tok)) == -1) {
		free(k);
		return sbx_err_oom(err);
	}
	exp = sbx_wall_ms() + a->s->cfg->ticket_ttl;
	ticket_hash(a->s, tok, k->hash);
	k->expires_ms = exp;
	snprintf(k->principal, sizeof(k->principal), "%s", a->who.name);
	k->next = t->tickets;
	t->tickets = k;
	snprintf(base, sizeof(base), "/api/v1/npcs/%s/sandbox/terminals/%s",
	    t->npc, t->id);
	snprintf(url, sizeof(url), "%s/output?ticket=%s", base, tok);
	snprintf(wsurl, sizeof(wsurl), "%s/attach?ticket=%s", base, tok);
	o = json_pack("{s:s,s:I,s:s,s:s}", "ticket", tok, "expires_at",
	    (json_int_t)exp, "output_url", url, "attach_url", wsurl);
	sodium_memzero(tok, sizeof(tok));
	sodium_memzero(url, sizeof(url));
	sodium_memzero(wsurl, sizeof(wsurl));
	areq_reply_json(a, 200, o);
	return 0;
}

/* api_ticket_find_fn of terminals: a live ticket tok of terminal id. */
static int
term_ticket_find(struct api_server *s, const char *npc, int64_t owner_id,
    const char *id, const char *tok, char *principal, size_t cap)
{
	struct api_term *t;
	struct tticket *k;
	unsigned char h[32];

	for (t = s->terms; t != NULL; t = t->next)
		if (strcmp(t->id, id) == 0 && strcmp(t->npc, npc) == 0 &&
		    t->owner_id == owner_id)
			break;
	if (t == NULL)
		return 0;
	tickets_prune(t, sbx_wall_ms());
	ticket_hash(s, tok, h);
	for (k = t->tickets; k != NULL; k = k->next)
		if (sodium_memcmp(k->hash, h, sizeof(h)) == 0) {
			snprintf(principal, cap, "%s", k->principal);
			return 1;
		}
	return 0;
}

int
api_term_ticket_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, struct api_principal *who)
{
	return api_ticket_auth(s, npc, id, query, term_ticket_find, who);
}
