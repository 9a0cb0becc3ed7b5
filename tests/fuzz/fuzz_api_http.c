/*
 * fuzz_api_http.c - libFuzzer target: everything sandbox-api does with the
 * bytes of a player's or operator's connection (api/api_http.c, api_exec.c):
 * evhttp's parser, authentication, routing, NPC names and ownership, rate
 * limits, the id, path and query rules, and the request-body parsers (npc
 * create, ensure, exec, egress, stop, file write), with the fake driver
 * (tests/driver_fake.c) in place of the broker; exec answers stream SSE.
 *
 * Input: raw bytes sent on one connection; "@P@" stands for a player's key,
 * "@O@" for an operator's (so "Authorization: Bearer @P@" authenticates).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - every connection ends: the server answers or closes, never hangs;
 *  - the first reply is a well-formed status line and never a 500;
 *  - neither key ever appears in what the api sends back;
 *  - bounded allocation: bodies over body_max / file_size_max are refused
 *    (ASan's -malloc_limit_mb catches growth with the input).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "api.h"
#include "api_store.h"
#include "driver_fake.h"
#include "fuzz.h"
#include "sbx_config.h"
#include "sbx_log.h"
#include "sbx_token.h"
#include "server_incl.h"

static struct event_base *base;
static struct sbx_driver *fake;
static struct api_server *server;
static struct api_config cfg;
static char dir[64];
static char player_key[SBX_TOKEN_GEN_LEN + 1];
static char operator_key[SBX_TOKEN_GEN_LEN + 1];
static int port;
static unsigned runs;

static void
set(const char *k, const char *v)
{
	struct sbx_err err;

	FUZZ_ASSERT(sbx_config_set(api_config_keys, &cfg, k, v, &err) == 0);
}

static void
start(void)
{
	struct api_store *st;
	struct sbx_err err;

	snprintf(dir, sizeof(dir), "/tmp/sbx-fuzz-api.XXXXXX");
	FUZZ_ASSERT(mkdtemp(dir) != NULL);
	FUZZ_ASSERT(api_config_defaults(&cfg, &err) == 0);
	set("listen", "127.0.0.1:0");
	set("state_dir", dir);
	set("body_max", "65536");
	set("file_size_max", "65536");
	st = api_store_open(dir, &err);
	FUZZ_ASSERT(st != NULL);
	FUZZ_ASSERT(api_store_principal_create(st, "player", API_ROLE_PLAYER,
	    player_key, sizeof(player_key), &err) == 0);
	FUZZ_ASSERT(api_store_principal_create(st, "ops", API_ROLE_OPERATOR,
	    operator_key, sizeof(operator_key), &err) == 0);
	api_store_close(st);
	fake = sbx_fake_driver_new(base);
	FUZZ_ASSERT(fake != NULL);
	server = api_server_new(base, &cfg, fake, &err);
	if (server == NULL)
		fprintf(stderr, "api_server_new: %s\n", err.message);
	FUZZ_ASSERT(server != NULL);
	port = api_server_port(server);
}

static void
stop(void)
{
	char cmd[128];

	api_server_free(server);
	sbx_driver_free(fake);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	sbx_config_free(api_config_keys, &cfg);
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
	static const char *const marks[] = { "@P@", "@O@", NULL };
	const char *values[] = { player_key, operator_key, NULL };
	const char *secrets[] = { player_key, operator_key, NULL };
	struct evbuffer *req = evbuffer_new(), *resp = evbuffer_new();

	FUZZ_ASSERT(req != NULL && resp != NULL);
	/* a fresh api now and then: NPCs and sandboxes of earlier inputs
	 * would otherwise fill every limit */
	if (++runs % 500 == 0) {
		stop();
		start();
	}
	fz_subst(data, size, marks, values, req);
	fz_exchange(base, port, req, resp);
	/* File reads and lists give back bytes and names an input wrote (this
	 * one, or an earlier one: the token in a file's name), as in
	 * fuzz_broker_http.c. */
	fz_check_replies(resp, secrets, memmem(data, size, "files", 5) != NULL ||
	    memmem(data, size, "list", 4) != NULL);
	evbuffer_free(req);
	evbuffer_free(resp);
	return 0;
}
