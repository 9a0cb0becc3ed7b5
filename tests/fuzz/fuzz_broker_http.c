/*
 * fuzz_broker_http.c - libFuzzer target: everything sandbox-broker does with
 * the bytes of a connection (broker/broker_http.c): the request gate of
 * adr/0008 (head parse, authentication before anything else, body caps,
 * chunked bodies), evhttp's parser behind it, routing, the id, path and query
 * rules and the request-body parsers (ensure, exec, stop, write, session),
 * a session's upgrade and the frames of its link (broker/broker_session.c),
 * with the fake driver (tests/driver_fake.c) behind them.
 *
 * Input: raw bytes sent on one connection; "@T@" stands for the broker's
 * bearer token (so "Authorization: Bearer @T@" authenticates).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - every connection ends: the server answers or closes, never hangs;
 *  - the first reply is a well-formed status line and never a 500;
 *  - the token never appears in what the broker sends back;
 *  - bounded allocation: bodies over their cap are refused before being
 *    read (ASan's -malloc_limit_mb catches growth with the input).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "broker.h"
#include "driver_fake.h"
#include "fuzz.h"
#include "sbx_config.h"
#include "sbx_log.h"
#include "sbx_token.h"
#include "server_incl.h"

/* Not a valid sandbox id ('_'): an input that learns the token (libFuzzer's
 * CMP dictionary does) and makes a sandbox named after it would otherwise
 * have the list echo its own id back as a "leaked" secret. */
#define TOKEN "fuzz_token_4b1d9e7c2a6f3058e1d7"

static struct event_base *base;
static struct sbx_driver *fake;
static struct broker_server *server;
static struct broker_config cfg;
static int port;
static unsigned runs;

static void
start(void)
{
	static char dir[64];
	const char *argv[] = { "fuzz", "--listen", "127.0.0.1:0",
	    "--state-dir", dir, "--image", "img-a", "--images", "img-b,img-c",
	    "--helper-path", "/nonexistent/sbx-helper", "--body-max", "65536",
	    "--file-size-max", "65536", "--max-sandboxes", "20", NULL };
	struct sbx_token tok;
	struct sbx_err err;

	snprintf(dir, sizeof(dir), "/tmp/sbx-fuzz-broker.XXXXXX");
	FUZZ_ASSERT(mkdtemp(dir) != NULL);
	memset(&cfg, 0, sizeof(cfg));
	FUZZ_ASSERT(sbx_config_load(broker_config_keys, &cfg, 17,
	    (char **)argv, NULL, &err) == 0);
	FUZZ_ASSERT(broker_config_finish(&cfg, "/x/sandbox-broker", &err) == 0);
	FUZZ_ASSERT(sbx_token_set(&tok, TOKEN, strlen(TOKEN), &err) == 0);
	fake = sbx_fake_driver_new(base);
	FUZZ_ASSERT(fake != NULL);
	server = broker_server_new(base, &cfg, fake, &tok, &err);
	if (server == NULL)
		fprintf(stderr, "broker_server_new: %s\n", err.message);
	FUZZ_ASSERT(server != NULL);
	sbx_token_clear(&tok);
	FUZZ_ASSERT(broker_server_listen(server, &err) == 0);
	port = broker_server_port(server);
}

static void
stop(void)
{
	char cmd[128];

	broker_server_free(server);
	sbx_driver_free(fake);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cfg.state_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", cfg.state_dir);
	sbx_config_free(broker_config_keys, &cfg);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	sbx_log_init("fuzz", open("/dev/null", O_WRONLY | O_CLOEXEC),
	    SBX_LOG_ERROR);
	base = event_base_new();
	FUZZ_ASSERT(base != NULL);
	start();
	atexit(stop);
	return 0;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static const char *const marks[] = { "@T@", NULL };
	static const char *const values[] = { TOKEN, NULL };
	static const char *const secrets[] = { TOKEN, NULL };
	struct evbuffer *req = evbuffer_new(), *resp = evbuffer_new();

	FUZZ_ASSERT(req != NULL && resp != NULL);
	/* a fresh broker now and then: sandboxes made by earlier inputs
	 * would otherwise fill max_sandboxes */
	if (++runs % 500 == 0) {
		stop();
		start();
	}
	fz_subst(data, size, marks, values, req);
	fz_exchange(base, port, req, resp);
	/* File reads, lists and sessions (the fake's cat and ls, a port's
	 * echo) give back bytes an input sent: this one, or an earlier one
	 * that wrote a file whose name holds the token (a list of /work then
	 * names it; seen in CI's smoke, crash-a89066810678). */
	fz_check_replies(resp, secrets, memmem(data, size, "files", 5) != NULL ||
	    memmem(data, size, "list", 4) != NULL ||
	    memmem(data, size, "session", 7) != NULL);
	evbuffer_free(req);
	evbuffer_free(resp);
	return 0;
}
