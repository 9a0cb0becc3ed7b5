/* cli_term_ws.c - sbxctl's side of a terminal attached by WebSocket (subprotocol sbx.v1, docs/api.md): the local terminal in raw mode and restored on every way out, stdin streamed with backpressure, output to stdout/stderr, SIGWINCH as resize, the detach key, the exit code. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>

#include "cli_http.h"
#include "sbx_bev.h"
#include "sbx_proto.h"
#include "sbx_ws.h"

#include "cli_int.h"

#define IN_CHUNK (64 * 1024)
/* Input queued for the api above which stdin is not read (the api reads
 * the socket only as fast as the terminal takes input). */
#define IN_HIGH ((size_t)1024 * 1024)
#define DETACH_KEY 0x1d     /* Ctrl-] */

struct tsess {
	struct event_base *base;
	struct sbx_ws *ws;
	const struct term_attach *t;
	struct event *in_ev;      /* stdin readable (a pipe, a tty, a socket) */
	struct event *in_pump;    /* stdin a regular file: read on each turn */
	struct event *sig[5];
	int in_on, in_eof, out_paused;
	int detach_armed;         /* Ctrl-] seen, the next key decides */
	int detached;
	int writer;               /* this viewer may write (writer message) */
	int writer_known;         /* the api's writer message came: stdin is
	                           * read from then on, so nothing typed or
	                           * piped is sent, or dropped, before sbxctl
	                           * knows whether it may write */
	int eof_sent;
	int pty;                  /* the terminal is a pty (hello) */
	int told_readonly;        /* the read-only note was printed */
	int have_exit, code;
	char signame[16];
	int rc;                   /* the exit code once decided (-1: not yet) */
	int closed;
	char id[64];
};

/* The local terminal's settings before raw mode; restored on every way
 * out (normal end, error, signals, exit). */
static struct termios saved_tio;
static int tio_saved;

static void
tty_restore(void)
{
	if (tio_saved) {
		tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_tio);
		tio_saved = 0;
	}
}

static int
tty_raw(void)
{
	static int registered;
	struct termios t;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tio) != 0)
		return 0;
	t = saved_tio;
	cfmakeraw(&t);
	if (tcsetattr(STDIN_FILENO, TCSADRAIN, &t) != 0)
		return 0;
	tio_saved = 1;
	if (!registered) {
		registered = 1;
		atexit(tty_restore);
	}
	return 1;
}

static void
winsize(int *cols, int *rows)
{
	struct winsize w;

	*cols = 80;
	*rows = 24;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 &&
	    w.ws_row > 0) {
		*cols = w.ws_col;
		*rows = w.ws_row;
	} else if (ioctl(STDIN_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 &&
	    w.ws_row > 0) {
		*cols = w.ws_col;
		*rows = w.ws_row;
	}
}

void
cli_term_size(int *cols, int *rows)
{
	winsize(cols, rows);
}

/* The local terminal's size as a resize message. */
static void
send_size(struct tsess *s)
{
	int cols, rows;

	winsize(&cols, &rows);
	(void)sbx_ws_send_json(s->ws, json_pack("{s:s,s:i,s:i}", "type",
	    "resize", "cols", cols, "rows", rows));
}

static void
stop(struct tsess *s)
{
	if (s->in_ev != NULL)
		event_del(s->in_ev);
	if (s->in_pump != NULL)
		event_del(s->in_pump);
	s->in_on = 0;
	event_base_loopbreak(s->base);
}

static void
input_set(struct tsess *s, int on)
{
	on = on && !s->in_eof && !s->closed && !s->detached &&
	    s->t->input && s->writer_known;
	if (on == s->in_on)
		return;
	s->in_on = on;
	if (s->in_ev != NULL) {
		if (on)
			event_add(s->in_ev, NULL);
		else
			event_del(s->in_ev);
	} else if (s->in_pump != NULL) {
		if (on)
			event_active(s->in_pump, 0, 0);
		else
			event_del(s->in_pump);
	}
}

/* Input to the terminal: only while this viewer is the writer (the api
 * closes a read-only viewer that types: 1008); said once otherwise. */
static void
keys(struct tsess *s, const unsigned char *p, size_t n)
{
	if (s->writer) {
		(void)sbx_ws_send(s->ws, 0, p, n, NULL, 0);
		return;
	}
	if (!s->told_readonly)
		fprintf(stderr, "\r\nsbxctl: another viewer is the writer of "
		    "this terminal; your keys are not sent (Ctrl-] d "
		    "detaches).\r\n");
	s->told_readonly = 1;
}

/* Sends n input bytes, taking the detach key out in raw mode. */
static void
send_input(struct tsess *s, const unsigned char *p, size_t n)
{
	static const unsigned char dk = DETACH_KEY;
	size_t i, from = 0;

	if (!s->t->raw) {
		keys(s, p, n);
		return;
	}
	for (i = 0; i < n; i++) {
		if (s->detach_armed) {
			s->detach_armed = 0;
			if (p[i] == 'd' || p[i] == 'D') {
				s->detached = 1;
				sbx_ws_close(s->ws, SBX_WS_NORMAL, "detach");
				stop(s);
				return;
			}
			if (p[i] != DETACH_KEY)
				keys(s, &dk, 1);
			from = i;
			continue;
		}
		if (p[i] == DETACH_KEY) {
			if (i > from)
				keys(s, p + from, i - from);
			s->detach_armed = 1;
			from = i + 1;
		}
	}
	if (n > from)
		keys(s, p + from, n - from);
}

/* stdin's end, once, and only from the writer: a read-only viewer's
 * would be refused (1008); one that becomes the writer sends it then. */
static void
send_eof(struct tsess *s)
{
	if (!s->writer || !s->in_eof || s->eof_sent)
		return;
	s->eof_sent = 1;
	(void)sbx_ws_send_json(s->ws, json_pack("{s:s}", "type", "eof"));
}

static void
read_stdin(struct tsess *s)
{
	unsigned char buf[IN_CHUNK];
	ssize_t r;

	r = read(STDIN_FILENO, buf, sizeof(buf));
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (r <= 0) {
		/* End of input: a pty:false terminal's stdin closes; a pty
		 * ignores it (^D is a byte). */
		s->in_eof = 1;
		input_set(s, 0);
		send_eof(s);
		return;
	}
	send_input(s, buf, (size_t)r);
	if (sbx_ws_output_len(s->ws) > IN_HIGH)
		input_set(s, 0);  /* on again when it drained (pause 0) */
}

static void
in_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	read_stdin(arg);
}

static void
pump_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tsess *s = arg;

	(void)fd;
	(void)what;
	read_stdin(s);
	if (s->in_on)
		event_active(s->in_pump, 0, 0);
}

static void
ws_pause(void *arg, int on)
{
	struct tsess *s = arg;

	s->out_paused = on;
	input_set(s, !on);
}

/* 128 + the number of a signal name ("KILL"), or 1 for one not known. */
static int
sig_exit(const char *name)
{
	static const struct { const char *n; int v; } t[] = {
		{ "HUP", 1 }, { "INT", 2 }, { "QUIT", 3 }, { "ILL", 4 },
		{ "TRAP", 5 }, { "ABRT", 6 }, { "BUS", 7 }, { "FPE", 8 },
		{ "KILL", 9 }, { "USR1", 10 }, { "SEGV", 11 }, { "USR2", 12 },
		{ "PIPE", 13 }, { "ALRM", 14 }, { "TERM", 15 },
	};
	size_t i;

	if (strncmp(name, "SIG", 3) == 0)
		name += 3;
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (strcmp(t[i].n, name) == 0)
			return 128 + t[i].v;
	return CX_ERR;
}

static void
on_text(struct tsess *s, const unsigned char *p, size_t n)
{
	json_t *o = json_loadb((const char *)p, n, 0, NULL);
	const char *type = jraw(o, "type");
	json_t *v;

	if (strcmp(type, "hello") == 0) {
		snprintf(s->id, sizeof(s->id), "%s", jraw(o, "id"));
		/* a pty gets the local size once this viewer is the writer
		 * (below); a pty:false terminal has none */
		s->pty = json_is_true(json_object_get(o, "pty"));
	} else if (strcmp(type, "writer") == 0) {
		int was = s->writer;

		/* Controls (a resize, stdin's eof) go only from the writer: the
		 * api closes a read-only viewer that sends one (1008). A viewer
		 * that becomes the writer sends the local size then. */
		v = json_object_get(o, "you");
		s->writer = json_is_true(v);
		if (s->writer && !was && s->pty && s->t->raw)
			send_size(s);
		send_eof(s);
		if (!s->writer_known) {
			s->writer_known = 1;
			input_set(s, 1);
		}

	} else if (strcmp(type, "exit") == 0) {
		s->have_exit = 1;
		v = json_object_get(o, "code");
		s->code = json_is_integer(v) ? (int)json_integer_value(v) : -1;
		snprintf(s->signame, sizeof(s->signame), "%s",
		    jraw(o, "signal"));
	} else if (strcmp(type, "error") == 0) {
		tty_restore();
		errmsg("%s", jstr(o, "message"));
		/* not_found: a -w directory that is not there (as `sbxctl
		 * exec -w` without -i answers), or the sandbox gone */
		s->rc = strcmp(jraw(o, "code"), SBX_E_TIMEOUT) == 0 ?
		    CX_TIMEOUT : strcmp(jraw(o, "code"), SBX_E_NOT_FOUND) == 0 ?
		    CX_NOTFOUND : CX_ERR;
	}
	json_decref(o);
}

static void
ws_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct tsess *s = arg;

	if (text) {
		on_text(s, p, n);
		return;
	}
	if (n < 1 || s->detached)
		return;
	if (write_fd(p[0] == 2 ? STDERR_FILENO : STDOUT_FILENO, p + 1,
	    n - 1) == -1 && errno == EPIPE) {
		s->rc = 141;
		sbx_ws_close(s->ws, SBX_WS_NORMAL, "stdout closed");
		stop(s);
	}
}

static void
ws_closed(void *arg, int code, const char *reason)
{
	struct tsess *s = arg;

	s->closed = 1;
	stop(s);
	if (s->detached || s->rc != -1)
		return;
	tty_restore();
	if (s->have_exit) {
		s->rc = s->code >= 0 ? s->code : s->signame[0] != '\0' ?
		    sig_exit(s->signame) : CX_ERR;
		return;
	}
	/* The api's drain (api_term.h TERM_MSG_SHUTDOWN): the api ends its
	 * terminals with it, there is nothing to reattach to. */
	if (code == SBX_WS_GOING_AWAY && strncmp(reason, "The api is shutting "
	    "down", 24) == 0) {
		errmsg("%s", reason);
		errmsg("the terminal %s ended with the api (it is shutting "
		    "down); start a new one when the api is back.", s->t->id);
		s->rc = CX_UNAVAIL;
		return;
	}
	if (code == SBX_WS_ABNORMAL || code == SBX_WS_GOING_AWAY ||
	    code == 4002) {
		if (reason[0] != '\0')
			errmsg("%s", reason);
		errmsg("the connection to the api was lost; the terminal may "
		    "still run (reattach with: sbxctl attach %s %s).",
		    s->t->npc, s->t->id);
		s->rc = CX_UNAVAIL;
		return;
	}
	errmsg("%s", reason[0] != '\0' ? reason : "the api closed the "
	    "terminal's connection.");
	s->rc = code == SBX_WS_POLICY ? CX_USAGE : CX_ERR;
}

static const struct sbx_ws_ops tops = { ws_message, ws_pause, ws_closed,
    NULL };

static void
sig_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tsess *s = arg;

	(void)what;
	if (fd == SIGWINCH) {
		if (s->pty && s->writer)
			send_size(s);
		return;
	}
	/* SIGINT (not raw: Ctrl-C), SIGTERM, SIGHUP, SIGQUIT: leave. */
	tty_restore();
	s->rc = 128 + (int)fd;
	if (s->t->cancel_on_signal)
		s->rc = CX_INTR;
	else
		errmsg("left the terminal; it still runs (reattach with: "
		    "sbxctl attach %s %s).", s->t->npc, s->t->id);
	if (!s->closed)
		sbx_ws_close(s->ws, SBX_WS_NORMAL, "left");
	s->detached = 1;
	stop(s);
}

/* The api's answer to the upgrade: the socket and what followed the head,
 * or the exit code after printing why. */
static int
ws_open(struct ctx *x, const struct term_attach *t, int *fd, char **left,
    size_t *leftn)
{
	char target[1024], hdrs[512], key[SBX_WS_KEY_LEN + 1], suffix[256];
	struct cli_resp resp;
	struct cli_conn *c;
	struct sbx_err err;

	snprintf(suffix, sizeof(suffix), "/sandbox/terminals/%s/attach"
	    "?offset=%llu", t->id, (unsigned long long)t->offset);
	if (npc_target(target, sizeof(target), t->npc, suffix, NULL) == -1)
		return usage_err(NULL, "the NPC name is too long.");
	sbx_ws_client_key(key);
	snprintf(hdrs, sizeof(hdrs), "Upgrade: websocket\r\n"
	    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n"
	    "Sec-WebSocket-Protocol: " SBX_WS_PROTOCOL "\r\n", key);
	sbx_err_clear(&err);
	if ((c = cli_http_upgrade(&x->url, target, x->key, hdrs, &resp,
	    &err)) == NULL)
		return fail_err(&err);
	if (resp.status != 101)
		return fail_resp(c, &resp);
	if (sbx_ws_client_check(resp.status, resp.upgrade, resp.connection,
	    resp.ws_accept, resp.ws_protocol, key, SBX_WS_PROTOCOL,
	    &err) == -1) {
		cli_http_close(c);
		return fail_err(&err);
	}
	if ((*fd = cli_http_detach(c, left, leftn)) == -1) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	return CX_OK;
}

int
cli_term_run(struct ctx *x, const struct term_attach *t)
{
	static const int sigs[5] = { SIGWINCH, SIGINT, SIGTERM, SIGHUP,
	    SIGQUIT };
	struct tsess s;
	struct bufferevent *bev = NULL;
	struct sbx_err err;
	struct stat st;
	char *left = NULL;
	size_t leftn = 0;
	int fd = -1, rc, i;

	memset(&s, 0, sizeof(s));
	s.t = t;
	s.rc = -1;
	s.writer = 0;   /* until the api's writer message says */
	sbx_bev_heap();   /* stdin streams through 256 KiB chains */
	if ((rc = ws_open(x, t, &fd, &left, &leftn)) != CX_OK)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	if ((s.base = event_base_new()) == NULL ||
	    (bev = bufferevent_socket_new(s.base, fd, BEV_OPT_CLOSE_ON_FREE))
	    == NULL) {
		if (fd != -1 && bev == NULL)
			close(fd);
		errmsg(SBX_MSG_OOM);
		rc = CX_ERR;
		goto done;
	}
	/* 64 KiB of stdin a message: more than libevent's 16 KiB a turn. */
	bufferevent_set_max_single_read(bev, SBX_BEV_IO_MAX);
	bufferevent_set_max_single_write(bev, SBX_BEV_IO_MAX);
	/* A socket bufferevent's input takes bytes only at its front
	 * (libevent freezes its end for the socket's own reads). */
	if (leftn > 0 && evbuffer_prepend(bufferevent_get_input(bev), left,
	    leftn) != 0) {
		bufferevent_free(bev);
		errmsg(SBX_MSG_OOM);
		rc = CX_ERR;
		goto done;
	}
	sbx_err_clear(&err);
	if ((s.ws = sbx_ws_new(bev, SBX_WS_CLIENT, NULL, &tops, &s, &err)) ==
	    NULL) {
		rc = fail_err(&err);
		goto done;
	}
	for (i = 0; i < 5; i++) {
		if (sigs[i] == SIGWINCH && !t->raw)
			continue;
		s.sig[i] = evsignal_new(s.base, sigs[i], sig_cb, &s);
		if (s.sig[i] != NULL)
			event_add(s.sig[i], NULL);
	}
	if (t->input) {
		/* epoll takes pipes, sockets and terminals; a file or
		 * /dev/null is read on each turn instead */
		if (fstat(STDIN_FILENO, &st) != 0 || !(S_ISFIFO(st.st_mode) ||
		    S_ISSOCK(st.st_mode) || isatty(STDIN_FILENO)))
			s.in_pump = event_new(s.base, -1, 0, pump_cb, &s);
		else {
			evutil_make_socket_nonblocking(STDIN_FILENO);
			s.in_ev = event_new(s.base, STDIN_FILENO,
			    EV_READ | EV_PERSIST, in_cb, &s);
		}
	}
	if (t->raw)
		(void)tty_raw();
	input_set(&s, 1);
	event_base_dispatch(s.base);
	tty_restore();
	if (s.detached && s.rc == -1) {
		/* the close went out; let it reach the api */
		if (!s.closed) {
			struct timeval tv = { 2, 0 };

			event_base_loopexit(s.base, &tv);
			event_base_dispatch(s.base);
		}
		fprintf(stderr, "\r\nsbxctl: detached; terminal %s of %s still "
		    "runs (reattach with: sbxctl attach %s %s)\n", t->id,
		    t->npc, t->npc, t->id);
		rc = CX_OK;
	} else
		rc = s.rc == -1 ? CX_ERR : s.rc;
done:
	tty_restore();
	if (t->input && s.in_ev != NULL) {
		int fl = fcntl(STDIN_FILENO, F_GETFL);

		if (fl != -1)
			fcntl(STDIN_FILENO, F_SETFL, fl & ~O_NONBLOCK);
	}
	sbx_ws_free(s.ws);
	for (i = 0; i < 5; i++)
		if (s.sig[i] != NULL)
			event_free(s.sig[i]);
	if (s.in_ev != NULL)
		event_free(s.in_ev);
	if (s.in_pump != NULL)
		event_free(s.in_pump);
	if (s.base != NULL)
		event_base_free(s.base);
	free(left);
	return rc;
}
