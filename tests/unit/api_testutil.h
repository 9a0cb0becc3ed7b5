/* api_testutil.h - shared fixture of the sandbox-api unit tests (tests/unit/api_testutil.c): a server on 127.0.0.1:0 and an in-loop HTTP client. */
#ifndef API_TESTUTIL_H
#define API_TESTUTIL_H

#include <sys/stat.h>

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "api.h"
#include "api_store.h"
#include "sbx_http_client.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_token.h"

/* The one fixture of a test (tests/unit/api_testutil.c). */
struct tu_fixture {
	struct event_base *base;
	struct sbx_driver *drv;
	struct api_server *srv;
	struct api_config cfg;
	char dir[64];
	char logpath[96];
	int logfd;
	int port;
};
extern struct tu_fixture T;

/* One request's outcome, filled by the in-loop client. */
struct tu_res {
	int status;
	char retry_after[32];
	char ctype[64];
	char cache[32];
	char accel[16];
	struct evbuffer *body;
	int done;
	int failed;
	struct sbx_err err;
	struct sbx_http_req *req;
	const char *stop_when;   /* cancel (disconnect) once the body holds this */
	int pause_at_headers;    /* stop reading the body once headers are in */
	int stopped;
};

/* Fresh T: a log file at debug level, a state dir, api defaults with
 * listen 127.0.0.1:0, a new event base (asserts on failure). */
void tu_setup_base(void);

/* cmocka setup and teardown of one test: tu_setup_base() / tu_teardown();
 * return 0 (failures assert). */
int tu_up(void **state);
int tu_down(void **state);

/* Sets one config key (before tu_start). */
void tu_set(const char *key, const char *value);

/* Starts the api server on drv (T owns drv from now on) and records its port. */
void tu_start(struct sbx_driver *drv);

/* tu_start() on a new fake driver (tests/driver_fake.h) with players alice
 * and bob and operator op1, their fresh keys written to ka, kb, kop
 * (>= 44 bytes each, as tu_principal). */
void tu_start_fake(char *ka, char *kb, char *kop);

/* With key: POST /api/v1/npcs {"name":name} (asserts 201), then PUT its
 * sandbox (asserts 200). name: a valid NPC name, < 64 bytes. */
void tu_npc(const char *key, const char *name);

/* Frees the server, driver, base and config; removes the state dir and log. */
void tu_teardown(void);

/* A principal with a fresh key (written to key, >= 44 bytes). */
void tu_principal(const char *name, enum api_role role, char *key);

/* Runs the loop until cond(arg) or timeout_ms; returns cond(arg). */
int tu_loop_until(int (*cond)(void *), void *arg, int timeout_ms);

/* 1 when the request of tu_res arg ended (a tu_loop_until condition). */
int tu_is_done(void *arg);

/* Runs the loop for ms milliseconds. */
void tu_spin(int ms);

/* Starts a request (key NULL: no Authorization header). */
void tu_start_req(struct tu_res *r, const char *method, const char *path,
    const char *key, const void *body, size_t blen);

/* Sends a request and waits (up to 5 s) for its end. body is a C string or NULL.
 * Returns the HTTP status (0 when the request failed). */
int tu_req(struct tu_res *r, const char *method, const char *path,
    const char *key, const char *body);

/* The body as a NUL-terminated string (owned by r). */
const char *tu_text(struct tu_res *r);

/* error.code of a JSON error body, "" if none. */
const char *tu_code(struct tu_res *r);

/* Frees r's body and cancels a request still running. */
void tu_res_free(struct tu_res *r);

/* A raw TCP connection to the api of T (127.0.0.1:T.port), accepted by
 * the server before it returns (the loop ran 50 ms); asserts on failure. */
int tu_raw_connect(void);

/* Contents of a whole file (malloc'd, *len set), NULL if absent. */
char *tu_slurp(const char *path, size_t *len);

#endif
