/*
 * fuzz_broker_reply.c - libFuzzer target: the api's broker-client driver
 * (api/driver_broker.c over common/sbx_http_client.c) reading everything
 * the broker answers: status objects, lists, health, JSON errors, the NDJSON
 * exec stream and file bytes, for every driver operation.
 *
 * Input: one byte picks the operation (status, ensure, exec, read, write,
 * list, stop, destroy, list_sandboxes, health, recover: the byte mod 11;
 * 0xf0 and above: a session, whose upgraded stream is agent frames, with
 * input, a resize and EOF sent while it runs, adr/0055); the rest is a
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

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "driver_broker.h"
#include "fuzz.h"
#include "driver_checks.h"
#include "reply_server.h"
#include "sbx_driver.h"
#include "sbx_log.h"
#include "sbx_path.h"

#define TOKEN "fuzz-broker-token-9d2e6b1a7c4f"

static char sock_path[108];
static struct event_base *base;
static struct sbx_driver *drv;

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
	dc_secret = TOKEN;
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
	struct sbx_sink sink = { dc_start, dc_output, dc_exit, dc_error, NULL, NULL };
	struct sbx_exec_req xr;
	struct sbx_session_req sr;
	struct sbx_session_ctl ctl = { SBX_SESSION_RESIZE, 100, 30, 0, 0 };
	struct sbx_spec spec;
	struct sbx_list_page page = { NULL, 100 };
	struct evbuffer *body = NULL;
	struct sbx_op *op = NULL;
	struct sbx_err err;
	struct dc_got g;
	struct timespec t0, t1;
	int which, turns;

	if (size == 0)
		return 0;
	which = data[0] >= 0xf0 ? 11 : data[0] % 11;
	reply_load(data + 1, size - 1);
	dc_secret_in_reply = memmem(data, size, TOKEN, strlen(TOKEN)) != NULL;
	memset(&g, 0, sizeof(g));
	sink.arg = &g;
	memset(&spec, 0, sizeof(spec));
	memset(&xr, 0, sizeof(xr));
	xr.argv = argv;
	xr.timeout_ms = 1000;
	sbx_err_clear(&err);
	switch (which) {
	case 0: op = drv->ops->status(drv, "fz", dc_status, &g, &err); break;
	case 1: op = drv->ops->ensure(drv, "fz", &spec, dc_status, &g, &err); break;
	case 2: op = drv->ops->exec(drv, "fz", &xr, &sink, &err); break;
	case 3: op = drv->ops->read(drv, "fz", "/work/a", &sink, &err); break;
	case 4:
		body = evbuffer_new();
		evbuffer_add(body, "data", 4);
		op = drv->ops->write(drv, "fz", "/work/a", 0644, body, dc_done,
		    &g, &err);
		break;
	case 5: op = drv->ops->list(drv, "fz", "/work", &page, dc_list, &g, &err); break;
	case 6: op = drv->ops->stop(drv, "fz", dc_done, &g, &err); break;
	case 7: op = drv->ops->destroy(drv, "fz", dc_done, &g, &err); break;
	case 8: op = drv->ops->list_sandboxes(drv, dc_sandboxes, &g, &err); break;
	case 9: op = drv->ops->health(drv, dc_health, &g, &err); break;
	case 11:
		memset(&sr, 0, sizeof(sr));
		sr.kind = (enum sbx_session_kind)(1 + data[0] % 3);
		sr.exec = xr;
		sr.cols = 80;
		sr.rows = 24;
		sr.port = 8080;
		body = evbuffer_new();
		evbuffer_add(body, "input", 5);
		op = sbx_session_open(drv, "fz", &sr, &sink, &err);
		break;
	default:
		if (drv->ops->recover == NULL)
			return 0;
		op = drv->ops->recover(drv, "fz", dc_done, &g, &err);
		break;
	}
	g.started_returned = 1;
	if (op == NULL) {
		FUZZ_ASSERT(err.code[0] != '\0' && g.terminal == 0);
	} else {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (turns = 0; g.terminal == 0; turns++) {
			if (which == 11 && turns == 1) {
				/* the handle lives until the terminal callback */
				sbx_session_write(op, body, SIZE_MAX);
				(void)sbx_session_control(op, &ctl, &err);
				sbx_session_close_input(op);
			}
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
