/* agent_rig.c - the agent channel tests' rig (contract in agent_rig.h): a real agent child on a socketpair, and a stream's recording callbacks. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "agent_rig.h"

const char *
helper_bin(void)
{
	static char path[4200];
	const char *e = getenv("SBX_HELPER_BIN");
	char self[4096], *slash;
	ssize_t n;

	if (e != NULL)
		return e;
	if (access("build/out/sbx-helper", X_OK) == 0)
		return "build/out/sbx-helper";
	/* build/<kind>/tests/test_agent -> build/out/sbx-helper */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		if ((slash = strstr(self, "/build/")) != NULL) {
			*slash = '\0';
			snprintf(path, sizeof(path), "%s/build/out/sbx-helper", self);
			return path;
		}
	}
	return "build/out/sbx-helper";
}

static void
on_closed(void *arg, const struct sbx_err *err)
{
	struct rig *r = arg;

	r->closed++;
	snprintf(r->closed_code, sizeof(r->closed_code), "%s", err->code);
}

static void
on_ready(void *arg, const struct sbx_agent_hello *h)
{
	struct rig *r = arg;

	(void)h;
	r->ready++;
}

/* Starts `sbx-helper agent` (or, with fake_fd, gives the test the other end). */
void
rig_up(struct rig *r, int *fake_fd)
{
	struct sbx_agent_chan_cbs cbs = { on_ready, on_closed, r };
	int sv[2];

	memset(r, 0, sizeof(*r));
	snprintf(r->root, sizeof(r->root), "/tmp/sbx-agent-w-XXXXXX");
	snprintf(r->state, sizeof(r->state), "/tmp/sbx-agent-s-XXXXXX");
	assert_non_null(mkdtemp(r->root));
	assert_non_null(mkdtemp(r->state));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	if (fake_fd != NULL) {
		*fake_fd = sv[1];
		r->pid = -1;
	} else {
		assert_return_code(access(helper_bin(), X_OK), errno);
		r->pid = fork();
		assert_true(r->pid >= 0);
		if (r->pid == 0) {
			dup2(sv[1], 0);
			dup2(sv[1], 1);
			execl(helper_bin(), "sbx-helper", "--root", r->root, "--state-dir", r->state,
			    "agent", "--idle-ms", "60000", (char *)NULL);
			_exit(127);
		}
		close(sv[1]);
	}
	r->base = event_base_new();
	r->bev = bufferevent_socket_new(r->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	r->ch = sbx_agent_chan_new(r->base, &cbs);
	assert_non_null(r->ch);
	assert_int_equal(sbx_agent_chan_attach_bev(r->ch, r->bev), 0);
}

void
run_until(struct rig *r, int *flag, int want, int ms)
{
	struct timeval tv = { 0, 10000 };
	int i;

	for (i = 0; i < ms / 10 && *flag < want; i++) {
		event_base_loopexit(r->base, &tv);
		event_base_dispatch(r->base);
	}
}

void
rig_down(struct rig *r)
{
	char cmd[256];
	int st;

	sbx_agent_chan_free(r->ch);
	bufferevent_free(r->bev);
	event_base_free(r->base);
	if (r->pid > 0) {
		/* The channel closed: the agent must end by itself. */
		int i;

		for (i = 0; i < 500 && waitpid(r->pid, &st, WNOHANG) == 0; i++)
			usleep(10000);
		if (i == 500) {
			kill(r->pid, SIGKILL);
			waitpid(r->pid, &st, 0);
			fail_msg("the agent did not exit when its channel closed");
		}
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s %s", r->root, r->state);
	if (system(cmd) != 0)
		fail_msg("cannot remove %s", r->root);
}

static void
g_output(void *arg, int fd, const unsigned char *buf, size_t len)
{
	struct got *g = arg;

	assert_true(fd == 1 || fd == 2);
	if (g->count_only) {
		g->len[fd] += len;
		if (g->pause_after > 0 && g->len[fd] >= (size_t)g->pause_after)
			sbx_agent_pause(g->st, 1);
		return;
	}
	g->out[fd] = realloc(g->out[fd], g->len[fd] + len + 1);
	memcpy(g->out[fd] + g->len[fd], buf, len);
	g->len[fd] += len;
	g->out[fd][g->len[fd]] = '\0';
	if (g->pause_after > 0 && g->len[fd] >= (size_t)g->pause_after)
		sbx_agent_pause(g->st, 1);
}

static void
g_exit(void *arg, const struct sbx_agent_exit *ex)
{
	struct got *g = arg;

	g->exits++;
	g->status = ex->how == SBX_AGENT_EXIT_EXITED ? ex->status : -1;
	g->sig = ex->sig;
}

static void
g_error(void *arg, const struct sbx_err *err)
{
	struct got *g = arg;

	g->errors++;
	snprintf(g->code, sizeof(g->code), "%s", err->code);
}

static void
g_room(void *arg)
{
	struct got *g = arg;

	g->rooms++;
}

void
got_free(struct got *g)
{
	int i;

	for (i = 0; i < 3; i++)
		free(g->out[i]);
}

struct sbx_agent_stream *
open_got(struct rig *r, struct got *g, const char *const *argv, int with_stdin)
{
	return open_flags(r, g, argv, with_stdin ? SBX_AGENT_OPEN_STDIN : 0);
}

/* Payloads of protocol 2 frames (exec --framed) of one type, concatenated. */
size_t
p2_payload(const struct got *g, int type, char *out, size_t cap)
{
	size_t off = 0, n = 0, plen;
	const unsigned char *b = g->out[1];

	while (b != NULL && off + 8 <= g->len[1]) {
		plen = (size_t)b[off + 4] << 24 | (size_t)b[off + 5] << 16 |
		    (size_t)b[off + 6] << 8 | b[off + 7];
		if (b[off] == type && n + plen < cap) {
			memcpy(out + n, b + off + 8, plen);
			n += plen;
		}
		off += 8 + plen;
	}
	out[n] = '\0';
	return n;
}

struct sbx_agent_stream *
open_flags(struct rig *r, struct got *g, const char *const *argv, unsigned flags)
{
	struct sbx_agent_stream_cbs cbs = { g_output, g_exit, g_error, g_room, g };
	struct sbx_err err;

	memset(g, 0, sizeof(*g));
	g->st = sbx_agent_open2(r->ch, argv, NULL, flags, &cbs, &err);
	assert_non_null(g->st);
	return g->st;
}

/* Runs the loop until fd's raw output holds needle (or the stream ended). */
int
saw(struct rig *r, struct got *g, int fd, const char *needle, int ms)
{
	int i;

	for (i = 0; i < ms / 10; i++) {
		if (g->out[fd] != NULL && strstr((char *)g->out[fd], needle) != NULL)
			return 1;
		if (g->exits + g->errors > 0)
			break;
		run_until(r, &g->exits, 1, 10);
	}
	if (g->out[fd] != NULL && strstr((char *)g->out[fd], needle) != NULL)
		return 1;
	print_message("no %s in: %s\n", needle, g->out[fd] != NULL ? (char *)g->out[fd] : "");
	return 0;
}

