/* driver_fake_session.c - the fake driver's sessions (driver_fake.h "Sessions"): cat, a pty's echo and a port's echo in memory, with the vtable's input room, pause and controls (tests only; called by driver_fake.c, calls nothing of it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "driver_fake_int.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

#define ECHO_PIECE ((size_t)16 * 1024)   /* echo bytes per output call */

enum end_kind { END_NONE, END_EXIT, END_ERROR };

struct fake_sess {
	struct fake_head head;      /* first: is_session 1 */
	TAILQ_ENTRY(fake_sess) link;
	struct fake_sessions *reg;
	struct event *ev;
	struct sbx_sink sink;
	enum sbx_session_kind kind;
	size_t window;
	struct evbuffer *in;        /* input not echoed yet (<= window) */
	struct evbuffer *queued;    /* scripted output: u8 stream, u32 len, bytes */
	int64_t cap, emitted;       /* EXEC output_cap (0: none) */
	unsigned n;                 /* exec id number */
	int started, paused, eof, in_cb, cancelled, failed_open;
	enum end_kind end;
	int end_code;
	char end_signal[16];
	struct sbx_err end_err;     /* END_ERROR, or the open's failure */
};

static struct fake_sess *
sess_of(struct sbx_op *op)
{
	return (struct fake_sess *)op;
}

static void
sess_free(struct fake_sess *s)
{
	TAILQ_REMOVE(&s->reg->live, s, link);
	s->reg->seen.live--;
	event_free(s->ev);
	evbuffer_free(s->in);
	evbuffer_free(s->queued);
	free(s);
}

static void
arm(struct fake_sess *s)
{
	if (!s->paused && !s->cancelled)
		event_active(s->ev, EV_TIMEOUT, 0);
}

/* The sink's terminal call: s is freed first (the handle is dead for the
 * caller, as the vtable says). */
static void
end_exit(struct fake_sess *s, int code, const char *signal, int truncated)
{
	struct sbx_sink sink = s->sink;
	struct sbx_exit ex;
	char sig[16] = "";

	memset(&ex, 0, sizeof(ex));
	ex.code = code;
	if (signal != NULL && signal[0] != '\0') {
		snprintf(sig, sizeof(sig), "%s", signal);
		ex.signal = sig;
	}
	ex.truncated = truncated;
	ex.duration_ms = 1;
	sess_free(s);
	sink.exit(sink.arg, &ex);
}

static void
end_error(struct fake_sess *s, const struct sbx_err *e)
{
	struct sbx_sink sink = s->sink;
	struct sbx_err copy = *e;

	sess_free(s);
	sink.error(sink.arg, &copy);
}

/* One output call; the cap as exec's. Returns 1 when s ended (freed). */
static int
emit(struct fake_sess *s, int stream, const unsigned char *p, size_t n)
{
	size_t fit = n;

	if (s->cap > 0 && s->emitted + (int64_t)n > s->cap)
		fit = (size_t)(s->cap - s->emitted);
	if (fit > 0) {
		s->emitted += (int64_t)fit;
		s->in_cb = 1;
		s->sink.output(s->sink.arg, stream, p, fit);
		s->in_cb = 0;
		if (s->cancelled) {
			sess_free(s);
			return 1;
		}
	}
	if (fit < n) {
		end_exit(s, 137, "KILL", 1);
		return 1;
	}
	return 0;
}

/* One echo piece of the input; PTY: "\r" goes back as "\r\n". */
static int
echo_piece(struct fake_sess *s)
{
	unsigned char buf[ECHO_PIECE];
	size_t n = evbuffer_remove(s->in, buf, sizeof(buf) / 2), i;
	unsigned char *out = buf;
	size_t m = n;

	if (s->kind == SBX_SESSION_PTY) {
		/* At most doubles: the second half of buf is the output. */
		out = buf + sizeof(buf) / 2;
		for (i = 0, m = 0; i < n; i++) {
			if (buf[i] == '\r' && m + 2 <= sizeof(buf) / 2) {
				out[m++] = '\r';
				out[m++] = '\n';
			} else
				out[m++] = buf[i];
		}
		if (m > sizeof(buf) / 2)
			m = sizeof(buf) / 2;
	}
	if (emit(s, 1, out, m))
		return 1;
	/* Room grew: tell a writer that waits. */
	if (s->sink.room != NULL) {
		s->in_cb = 1;
		s->sink.room(s->sink.arg);
		s->in_cb = 0;
		if (s->cancelled) {
			sess_free(s);
			return 1;
		}
	}
	return 0;
}

static int
queued_piece(struct fake_sess *s)
{
	unsigned char hdr[5], *p;
	size_t n;
	int stream, rc;

	evbuffer_remove(s->queued, hdr, sizeof(hdr));
	stream = hdr[0];
	n = (size_t)hdr[1] << 24 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 8 |
	    hdr[4];
	if ((p = malloc(n ? n : 1)) == NULL) {
		evbuffer_drain(s->queued, n);
		return 0;
	}
	evbuffer_remove(s->queued, p, n);
	rc = emit(s, stream, p, n);
	free(p);
	return rc;
}

static void
tick(evutil_socket_t fd, short what, void *arg)
{
	struct fake_sess *s = arg;
	char exec_id[32];

	(void)fd;
	(void)what;
	if (s->paused || s->cancelled)
		return;
	if (s->failed_open) {
		end_error(s, &s->end_err);
		return;
	}
	if (!s->started) {
		s->started = 1;
		s->reg->seen.opened++;
		if (s->kind == SBX_SESSION_PORT)
			exec_id[0] = '\0';
		else
			snprintf(exec_id, sizeof(exec_id), "fake-exec-%u", s->n);
		s->in_cb = 1;
		s->sink.start(s->sink.arg, exec_id);
		s->in_cb = 0;
		if (s->cancelled) {
			sess_free(s);
			return;
		}
	} else if (evbuffer_get_length(s->queued) > 0) {
		if (queued_piece(s))
			return;
	} else if (s->end == END_EXIT) {
		end_exit(s, s->end_code, s->end_signal, 0);
		return;
	} else if (s->end == END_ERROR) {
		end_error(s, &s->end_err);
		return;
	} else if (evbuffer_get_length(s->in) > 0) {
		if (echo_piece(s))
			return;
	} else if (s->eof && s->kind != SBX_SESSION_PTY) {
		end_exit(s, 0, NULL, 0);   /* cat / the peer saw EOF */
		return;
	} else
		return;                    /* idle until input or a hook */
	arm(s);
}

void
fake_join(char *dst, size_t cap, const char *const *v, const char *sep)
{
	size_t i;

	dst[0] = '\0';
	for (i = 0; v != NULL && v[i] != NULL; i++) {
		if (i > 0)
			strncat(dst, sep, cap - strlen(dst) - 1);
		strncat(dst, v[i], cap - strlen(dst) - 1);
	}
}

/* The vtable's refusals of a session request (sbx_driver.h): the wire's
 * own checks (kind, argv, cols/rows, term, port), then cwd. */
static int
req_check(const struct sbx_session_req *req, struct sbx_err *err)
{
	json_t *o;

	if (req == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "No session request.");
	if ((o = sbx_wire_session_encode(req, err)) == NULL)
		return -1;
	json_decref(o);
	if (req->kind != SBX_SESSION_PORT && req->exec.cwd != NULL &&
	    sbx_path_check(req->exec.cwd, strlen(req->exec.cwd), err) == -1)
		return -1;
	return 0;
}

static void
remember(struct fake_sessions *reg, const char *id,
    const struct sbx_session_req *req)
{
	struct sbx_fake_session_seen *v = &reg->seen;

	v->kind = req->kind;
	snprintf(v->id, sizeof(v->id), "%s", id != NULL ? id : "");
	fake_join(v->argv, sizeof(v->argv), req->exec.argv, " ");
	fake_join(v->env, sizeof(v->env), req->exec.env, ";");
	snprintf(v->cwd, sizeof(v->cwd), "%s",
	    req->exec.cwd != NULL ? req->exec.cwd : "");
	v->timeout_ms = req->exec.timeout_ms;
	v->output_cap = req->exec.output_cap;
	v->cols = req->cols;
	v->rows = req->rows;
	snprintf(v->term, sizeof(v->term), "%s",
	    req->term != NULL ? req->term : "");
	v->port = req->port;
}

void
fake_sessions_init(struct fake_sessions *reg)
{
	memset(reg, 0, sizeof(*reg));
	TAILQ_INIT(&reg->live);
	reg->window = SBX_FAKE_SESSION_WINDOW;
}

void
fake_sessions_free(struct fake_sessions *reg)
{
	struct fake_sess *s;

	while ((s = TAILQ_FIRST(&reg->live)) != NULL)
		sess_free(s);
}

struct sbx_op *
fake_session_new(struct sbx_driver *d, struct fake_sessions *reg,
    const char *id, const struct sbx_session_req *req,
    const struct sbx_sink *sink, const struct sbx_err *fail,
    struct sbx_err *err)
{
	struct fake_sess *s;

	if (req_check(req, err) == -1)
		return NULL;
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    (s->in = evbuffer_new()) == NULL ||
	    (s->queued = evbuffer_new()) == NULL ||
	    (s->ev = event_new(d->base, -1, 0, tick, s)) == NULL) {
		if (s != NULL) {
			if (s->in != NULL)
				evbuffer_free(s->in);
			if (s->queued != NULL)
				evbuffer_free(s->queued);
			free(s);
		}
		sbx_err_oom(err);
		return NULL;
	}
	s->head.base.driver = d;
	s->head.is_session = 1;
	s->reg = reg;
	s->sink = *sink;
	s->kind = req->kind;
	s->window = reg->window;
	s->cap = req->kind == SBX_SESSION_EXEC ? req->exec.output_cap : 0;
	s->n = ++reg->seq;
	if (fail != NULL && sbx_err_is_set(fail)) {
		s->failed_open = 1;
		s->end_err = *fail;
	}
	remember(reg, id, req);
	TAILQ_INSERT_TAIL(&reg->live, s, link);
	reg->seen.live++;
	arm(s);
	return &s->head.base;
}

void
fake_session_cancel(struct sbx_op *op)
{
	struct fake_sess *s = sess_of(op);

	if (s->cancelled)
		return;
	s->reg->seen.cancels++;
	s->cancelled = 1;
	if (!s->in_cb)
		sess_free(s);   /* else freed once the callback returned */
}

void
fake_session_pause(struct sbx_op *op)
{
	struct fake_sess *s = sess_of(op);

	if (s->paused || s->cancelled)
		return;
	s->reg->seen.pauses++;
	s->paused = 1;
}

void
fake_session_resume(struct sbx_op *op)
{
	struct fake_sess *s = sess_of(op);

	if (!s->paused || s->cancelled)
		return;
	s->reg->seen.resumes++;
	s->paused = 0;
	arm(s);
}

size_t
fake_session_room(struct sbx_driver *d, struct sbx_op *op)
{
	struct fake_sess *s = sess_of(op);
	size_t have = evbuffer_get_length(s->in);

	(void)d;
	if (s->eof || s->cancelled || s->failed_open || s->end != END_NONE)
		return 0;
	return have < s->window ? s->window - have : 0;
}

ssize_t
fake_session_write(struct sbx_driver *d, struct sbx_op *op,
    struct evbuffer *src, size_t max)
{
	struct fake_sess *s = sess_of(op);
	size_t n = fake_session_room(d, op);

	if (s->eof || s->cancelled)
		return -1;
	if (n > max)
		n = max;
	if (n > evbuffer_get_length(src))
		n = evbuffer_get_length(src);
	if (n == 0)
		return 0;
	if (evbuffer_remove_buffer(src, s->in, n) != (int)n)
		return -1;
	s->reg->seen.bytes_in += n;
	arm(s);
	return (ssize_t)n;
}

void
fake_session_close_input(struct sbx_driver *d, struct sbx_op *op)
{
	struct fake_sess *s = sess_of(op);

	(void)d;
	if (s->eof || s->cancelled)
		return;
	s->eof = 1;
	s->reg->seen.eofs++;
	arm(s);
}

int
fake_session_control(struct sbx_driver *d, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err)
{
	struct fake_sess *s = sess_of(op);
	struct sbx_fake_session_seen *v = &s->reg->seen;

	(void)d;
	if (c == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "No control.");
	if (c->kind == SBX_SESSION_RESIZE) {
		if (s->kind != SBX_SESSION_PTY)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "Only a "
			    "terminal has a size.");
		if (c->cols < 1 || c->cols > 10000 || c->rows < 1 ||
		    c->rows > 10000)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "cols and "
			    "rows must be 1 to 10000.");
		v->last_cols = c->cols;
		v->last_rows = c->rows;
		v->resizes++;
		return 0;
	}
	if (c->kind == SBX_SESSION_SIGNAL) {
		if (s->kind == SBX_SESSION_PORT)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "A port "
			    "connection takes no signal.");
		if (c->signo < 1 || c->signo > 64)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "signal must "
			    "be 1 to 64.");
		v->last_signo = c->signo;
		v->signals++;
		return 0;
	}
	if (c->kind == SBX_SESSION_VIEWERS) {
		v->last_viewers = c->viewers;
		v->viewer_changes++;
		return 0;
	}
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "Unknown control.");
}

/* ------------------------------------------------------------------ */
/* Test hooks on a handle (driver_fake.h)                              */

static int
live(struct fake_sess *s)
{
	return !s->cancelled && !s->failed_open && s->end == END_NONE;
}

int
sbx_fake_session_output(struct sbx_op *op, int stream, const void *data,
    size_t len)
{
	struct fake_sess *s = sess_of(op);
	unsigned char hdr[5];

	if (!live(s) || (stream != 1 && stream != 2) || len == 0 ||
	    len > 0xffffffffu)
		return -1;
	hdr[0] = (unsigned char)stream;
	hdr[1] = (unsigned char)(len >> 24);
	hdr[2] = (unsigned char)(len >> 16);
	hdr[3] = (unsigned char)(len >> 8);
	hdr[4] = (unsigned char)len;
	if (evbuffer_add(s->queued, hdr, sizeof(hdr)) == -1 ||
	    evbuffer_add(s->queued, data, len) == -1)
		return -1;
	arm(s);
	return 0;
}

int
sbx_fake_session_exit(struct sbx_op *op, int code, const char *signal)
{
	struct fake_sess *s = sess_of(op);

	if (!live(s))
		return -1;
	s->end = END_EXIT;
	s->end_code = code;
	snprintf(s->end_signal, sizeof(s->end_signal), "%s",
	    signal != NULL ? signal : "");
	arm(s);
	return 0;
}

int
sbx_fake_session_fail(struct sbx_op *op, const char *code, const char *message)
{
	struct fake_sess *s = sess_of(op);

	if (!live(s) || code == NULL)
		return -1;
	s->end = END_ERROR;
	sbx_err_set(&s->end_err, code, "%s", message != NULL ? message :
	    "The fake was told to fail.");
	arm(s);
	return 0;
}
