/*
 * fuzz_broker_reply.c - libFuzzer target: the api's broker-client driver
 * (api/driver_broker.c over common/sbx_http_client.c) reading everything
 * the broker answers: status objects, lists, health, JSON errors, the NDJSON
 * exec stream and file bytes, for every driver operation.
 *
 * Input: one byte picks the operation (status, ensure, exec, read, write,
 * list, stop, destroy, list_sandboxes, health, recover); the rest is a
 * sequence of raw HTTP responses separated by "\n--next--\n", served in
 * order, one per connection the driver makes, from a thread on a unix socket
 * (after the last one each connection is closed unanswered). Seeds: the
 * broker's replies for each route and proto's golden NDJSON transcripts.
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - exactly one terminal callback per operation, within 10 s (the driver's
 *    request timeout is 1 s here), never before the starting call returned;
 *  - a status or list reports only states absent/running/stopped and ids
 *    that pass the id rule; an exec's exit code is 0..255;
 *  - the token never appears in an error message (unless a reply held it).
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/un.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "driver_broker.h"
#include "fuzz.h"
#include "reply_server.h"
#include "sbx_driver.h"
#include "sbx_log.h"
#include "sbx_path.h"

#define TOKEN "fuzz-broker-token-9d2e6b1a7c4f"

static char sock_path[108];
static struct event_base *base;
static struct sbx_driver *drv;
static int reply_has_token;

struct got {
	int terminal, started_returned, early;
};

static void
on_status(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct got *g = arg;

	g->terminal++;
	if (!g->started_returned)
		g->early = 1;
	if (err == NULL) {
		FUZZ_ASSERT(st != NULL);
		FUZZ_ASSERT(st->state == SBX_STATE_ABSENT ||
		    st->state == SBX_STATE_RUNNING ||
		    st->state == SBX_STATE_STOPPED);
	}
}

static void
on_done(void *arg, const struct sbx_err *err)
{
	struct got *g = arg;

	/* (unless a reply carried it: the driver may relay what the broker
	 * said) */
	if (err != NULL && !reply_has_token)
		FUZZ_ASSERT(strstr(err->message, TOKEN) == NULL);
	g->terminal++;
	if (!g->started_returned)
		g->early = 1;
}

static void
on_list(void *arg, const struct sbx_err *err, const struct sbx_dirent *e,
    size_t n, int truncated)
{
	(void)e;
	(void)n;
	(void)truncated;
	on_done(arg, err);
}

static void
on_sandboxes(void *arg, const struct sbx_err *err,
    const struct sbx_status *sts, size_t n)
{
	size_t i;

	if (err == NULL)
		for (i = 0; i < n; i++)
			FUZZ_ASSERT(sbx_id_valid(sts[i].id));
	on_done(arg, err);
}

static void
on_health(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	(void)h;
	on_done(arg, err);
}

static void
on_start(void *arg, const char *exec_id)
{
	struct got *g = arg;

	FUZZ_ASSERT(exec_id != NULL && g->terminal == 0);
}

static void
on_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct got *g = arg;

	FUZZ_ASSERT((stream == 1 || stream == 2) && buf != NULL && len > 0);
	FUZZ_ASSERT(g->terminal == 0);
}

static void
on_exit_(void *arg, const struct sbx_exit *ex)
{
	FUZZ_ASSERT(ex->code >= 0 && ex->code <= 255);
	on_done(arg, NULL);
}

static void
on_error(void *arg, const struct sbx_err *err)
{
	FUZZ_ASSERT(err != NULL && err->code[0] != '\0');
	on_done(arg, err);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sbx_broker_config cfg;
	struct sbx_err err;

	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	sbx_log_init("fuzz", open("/dev/null", O_WRONLY | O_CLOEXEC),
	    SBX_LOG_ERROR);
	reply_serve(reply_listen("broker", 64, sock_path, sizeof(sock_path)));
	char addr[120];

	snprintf(addr, sizeof(addr), "unix:%s", sock_path);
	memset(&cfg, 0, sizeof(cfg));
	cfg.address = addr;
	cfg.token = TOKEN;
	cfg.token_len = strlen(TOKEN);
	cfg.header_timeout_ms = 1000;
	base = event_base_new();
	FUZZ_ASSERT(base != NULL);
	drv = sbx_broker_driver_new(base, &cfg, &err);
	FUZZ_ASSERT(drv != NULL);
	return 0;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static const char *const argv[] = { "sh", "-c", "echo hi", NULL };
	struct sbx_sink sink = { on_start, on_output, on_exit_, on_error, NULL };
	struct sbx_exec_req xr;
	struct sbx_spec spec;
	struct sbx_list_page page = { NULL, 100 };
	struct evbuffer *body = NULL;
	struct sbx_op *op = NULL;
	struct sbx_err err;
	struct got g;
	struct timespec t0, t1;
	int which, turns;

	if (size == 0)
		return 0;
	which = data[0] % 11;
	reply_load(data + 1, size - 1);
	reply_has_token = memmem(data, size, TOKEN, strlen(TOKEN)) != NULL;
	memset(&g, 0, sizeof(g));
	sink.arg = &g;
	memset(&spec, 0, sizeof(spec));
	memset(&xr, 0, sizeof(xr));
	xr.argv = argv;
	xr.timeout_ms = 1000;
	sbx_err_clear(&err);
	switch (which) {
	case 0: op = drv->ops->status(drv, "fz", on_status, &g, &err); break;
	case 1: op = drv->ops->ensure(drv, "fz", &spec, on_status, &g, &err); break;
	case 2: op = drv->ops->exec(drv, "fz", &xr, &sink, &err); break;
	case 3: op = drv->ops->read(drv, "fz", "/work/a", &sink, &err); break;
	case 4:
		body = evbuffer_new();
		evbuffer_add(body, "data", 4);
		op = drv->ops->write(drv, "fz", "/work/a", 0644, body, on_done,
		    &g, &err);
		break;
	case 5: op = drv->ops->list(drv, "fz", "/work", &page, on_list, &g, &err); break;
	case 6: op = drv->ops->stop(drv, "fz", on_done, &g, &err); break;
	case 7: op = drv->ops->destroy(drv, "fz", on_done, &g, &err); break;
	case 8: op = drv->ops->list_sandboxes(drv, on_sandboxes, &g, &err); break;
	case 9: op = drv->ops->health(drv, on_health, &g, &err); break;
	default:
		if (drv->ops->recover == NULL)
			return 0;
		op = drv->ops->recover(drv, "fz", on_done, &g, &err);
		break;
	}
	g.started_returned = 1;
	if (op == NULL) {
		FUZZ_ASSERT(err.code[0] != '\0' && g.terminal == 0);
	} else {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (turns = 0; g.terminal == 0; turns++) {
			event_base_loop(base, EVLOOP_ONCE);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			FUZZ_ASSERT(t1.tv_sec - t0.tv_sec < 10);
		}
		FUZZ_ASSERT(g.terminal == 1 && !g.early);
	}
	/* what the op left (a cancelled connection) ends in a few turns */
	for (turns = 0; turns < 8; turns++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	FUZZ_ASSERT(g.terminal <= 1);
	if (body != NULL)
		evbuffer_free(body);
	return 0;
}
