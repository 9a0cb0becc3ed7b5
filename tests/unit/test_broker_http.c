/* test_broker_http.c - the broker's HTTP layer over real sockets on 127.0.0.1:0, with the fake driver. */
#include <sys/socket.h>
#include <sys/stat.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <jansson.h>
#include <sqlite3.h>

#include "broker.h"
#include "broker_reaper.h"
#include "driver_fake.h"
#include "sbx_log.h"
#include "sbx_proto.h"

#define TOKEN "canary-token-7f3a9c1e5b2d4f60"
#define WRONG "canary-wrong-0d9e8f7a6b5c4d3e"
#define AUTH "Bearer " TOKEN

/* ------------------------------------------------------------------ */
/* Fixture: one broker per test                                        */

static struct {
	struct event_base *base;
	struct sbx_driver *fake;
	struct broker_server *server;
	struct broker_config cfg;
	char dir[64];
	int port;
	int wake[2];            /* client threads poke the loop here */
	struct event *wake_ev;
	int logfd;
	char logpath[96];
} F;

static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
	char buf[64];

	(void)what;
	(void)arg;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	event_base_loopbreak(F.base);
}

static void
poke(void)
{
	ssize_t n = write(F.wake[1], "x", 1);
	(void)n;
}

/* Starts a broker with extra "--key value" arguments (NULL-terminated). */
static void
start(const char *const *extra)
{
	const char *argv[64] = { "test", "--listen", "127.0.0.1:0",
	    "--state-dir", NULL, "--image", "img-a", "--images", "img-b,img-c",
	    "--helper-path", "/nonexistent/sbx-helper" };
	int argc = 11;
	struct sbx_token tok;
	struct sbx_err err;

	memset(&F.cfg, 0, sizeof(F.cfg));
	snprintf(F.dir, sizeof(F.dir), "/tmp/sbx-broker-test.XXXXXX");
	assert_non_null(mkdtemp(F.dir));
	argv[4] = F.dir;
	while (extra != NULL && *extra != NULL)
		argv[argc++] = *extra++;
	assert_int_equal(sbx_config_load(broker_config_keys, &F.cfg, argc,
	    (char **)argv, NULL, &err), 0);
	assert_int_equal(broker_config_finish(&F.cfg, "/x/sandbox-broker",
	    &err), 0);
	assert_int_equal(sbx_token_set(&tok, TOKEN, strlen(TOKEN), &err), 0);

	F.base = event_base_new();
	assert_non_null(F.base);
	F.fake = sbx_fake_driver_new(F.base);
	assert_non_null(F.fake);
	F.server = broker_server_new(F.base, &F.cfg, F.fake, &tok, &err);
	assert_non_null(F.server);
	sbx_token_clear(&tok);
	assert_int_equal(broker_server_listen(F.server, &err), 0);
	F.port = broker_server_port(F.server);
	assert_true(F.port > 0);
	assert_int_equal(pipe2(F.wake, O_NONBLOCK | O_CLOEXEC), 0);
	F.wake_ev = event_new(F.base, F.wake[0], EV_READ | EV_PERSIST, wake_cb,
	    NULL);
	event_add(F.wake_ev, NULL);
}

static int
setup(void **state)
{
	(void)state;
	memset(&F, 0, sizeof(F));
	snprintf(F.logpath, sizeof(F.logpath), "/tmp/sbx-broker-test-log.XXXXXX");
	F.logfd = mkstemp(F.logpath);
	assert_true(F.logfd >= 0);
	sbx_log_init("test", F.logfd, SBX_LOG_DEBUG);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[128];

	(void)state;
	broker_server_free(F.server);
	sbx_driver_free(F.fake);
	if (F.wake_ev != NULL)
		event_free(F.wake_ev);
	if (F.base != NULL)
		event_base_free(F.base);
	close(F.wake[0]);
	close(F.wake[1]);
	sbx_config_free(broker_config_keys, &F.cfg);
	sbx_log_init("test", 2, SBX_LOG_WARN);
	close(F.logfd);
	unlink(F.logpath);
	if (F.dir[0] != '\0') {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", F.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", F.dir);
	}
	return 0;
}

/* Runs the loop until cond() holds or timeout_ms passes; returns cond(). */
static int
loop_until(int (*cond)(void *), void *arg, int timeout_ms)
{
	struct timeval tick = { 0, 10 * 1000 };
	int waited = 0;

	while (!cond(arg) && waited < timeout_ms) {
		/* The tick only bounds each turn; wake-ups come from events. */
		event_base_loopexit(F.base, &tick);
		event_base_dispatch(F.base);
		waited += 10;
	}
	return cond(arg);
}

/* ------------------------------------------------------------------ */
/* A tiny blocking HTTP/1.1 client, run in its own thread              */

struct resp {
	int status;
	char headers[4096];
	char *body;
	size_t len;
};

struct conn {
	int fd;
	char *buf;
	size_t len, cap;
};

static int
cl_connect(void)
{
	struct sockaddr_in sin;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)F.port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void
cl_send(int fd, const char *method, const char *path, const char *auth,
    const char *ctype, const char *body, size_t blen)
{
	char head[8192];
	int n;
	size_t off = 0;
	ssize_t w;

	n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: test\r\n"
	    "Connection: close\r\n%s%s%s%s%s%sContent-Length: %zu\r\n\r\n",
	    method, path, auth ? "Authorization: " : "", auth ? auth : "",
	    auth ? "\r\n" : "", ctype ? "Content-Type: " : "",
	    ctype ? ctype : "", ctype ? "\r\n" : "", blen);
	while (off < (size_t)n && (w = write(fd, head + off, n - off)) > 0)
		off += (size_t)w;
	off = 0;
	while (off < blen && (w = write(fd, body + off, blen - off)) > 0)
		off += (size_t)w;
}

/* Reads more; returns bytes read, 0 at EOF, -1 on error. */
static ssize_t
cl_more(struct conn *c)
{
	ssize_t n;

	if (c->cap - c->len < 65536) {
		c->cap = c->cap * 2 + 65536;
		c->buf = realloc(c->buf, c->cap + 1);
	}
	n = read(c->fd, c->buf + c->len, c->cap - c->len);
	if (n > 0) {
		c->len += (size_t)n;
		c->buf[c->len] = '\0';
	}
	return n;
}

static int
cl_read_until(struct conn *c, const char *needle)
{
	while (c->buf == NULL || memmem(c->buf, c->len, needle,
	    strlen(needle)) == NULL)
		if (cl_more(c) <= 0)
			return 0;
	return 1;
}

static void
cl_read_all(struct conn *c)
{
	while (cl_more(c) > 0)
		;
}

/* Parses status, headers and the (de-chunked) body of c->buf into r. */
static void
cl_parse(struct conn *c, struct resp *r)
{
	char *hend, *p, *out;
	size_t hl, n;

	memset(r, 0, sizeof(*r));
	if (c->buf == NULL || (hend = strstr(c->buf, "\r\n\r\n")) == NULL) {
		r->status = -1;
		return;
	}
	sscanf(c->buf, "HTTP/1.%*d %d", &r->status);
	hl = (size_t)(hend - c->buf);
	snprintf(r->headers, sizeof(r->headers), "%.*s",
	    (int)(hl < sizeof(r->headers) - 1 ? hl : sizeof(r->headers) - 1),
	    c->buf);
	p = hend + 4;
	r->body = calloc(1, c->len + 1);
	if (strcasestr(r->headers, "Transfer-Encoding: chunked") == NULL) {
		r->len = c->len - (size_t)(p - c->buf);
		memcpy(r->body, p, r->len);
		return;
	}
	out = r->body;
	while (p < c->buf + c->len) {
		n = strtoul(p, &p, 16);
		if ((p = strstr(p, "\r\n")) == NULL)
			break;
		p += 2;
		if (n == 0)
			break;
		memcpy(out + r->len, p, n);
		r->len += n;
		p += n + 2;
	}
}

struct call {
	const char *method, *path, *auth, *ctype, *body;
	size_t blen;
	struct resp r;
};

static void
do_call(struct call *k)
{
	struct conn c = { -1, NULL, 0, 0 };

	if ((c.fd = cl_connect()) == -1) {
		k->r.status = -1;
		return;
	}
	cl_send(c.fd, k->method, k->path, k->auth, k->ctype, k->body,
	    k->blen ? k->blen : (k->body ? strlen(k->body) : 0));
	cl_read_all(&c);
	cl_parse(&c, &k->r);
	close(c.fd);
	free(c.buf);
}

struct job {
	void (*fn)(void *);
	void *arg;
	atomic_int done;
};

static void *
job_main(void *arg)
{
	struct job *j = arg;

	j->fn(j->arg);
	atomic_store(&j->done, 1);
	poke();
	return NULL;
}

static int
job_done(void *arg)
{
	return atomic_load(&((struct job *)arg)->done);
}

/* Runs fn(arg) in a client thread while this thread runs the broker. */
static void
run_client(void (*fn)(void *), void *arg)
{
	struct job j = { fn, arg, 0 };
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, job_main, &j), 0);
	assert_true(loop_until(job_done, &j, 20000));
	pthread_join(t, NULL);
}

static void
call_fn(void *arg)
{
	do_call(arg);
}

/* One request; the returned body is owned by the caller (resp_free). */
static struct resp
req(const char *method, const char *path, const char *auth, const char *ctype,
    const char *body)
{
	struct call k = { method, path, auth, ctype, body, 0, { 0 } };

	run_client(call_fn, &k);
	return k.r;
}

static struct resp
jreq(const char *method, const char *path, const char *body)
{
	return req(method, path, AUTH, body ? SBX_CT_JSON : NULL, body);
}

static void
resp_free(struct resp *r)
{
	free(r->body);
	r->body = NULL;
}

/* Asserts r is a JSON error with code; frees r. */
static void
expect_error(struct resp *r, int status, const char *code)
{
	json_t *j, *e;

	if (r->status != status || r->body == NULL)
		fprintf(stderr, "got %d: %s\n", r->status,
		    r->body ? r->body : "(none)");
	assert_int_equal(r->status, status);
	assert_non_null(strcasestr(r->headers, "Content-Type: application/json"));
	j = json_loadb(r->body, r->len, 0, NULL);
	assert_non_null(j);
	e = json_object_get(j, "error");
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(e, "code")), code);
	assert_true(json_is_string(json_object_get(e, "message")));
	json_decref(j);
	resp_free(r);
}

static json_t *
body_json(struct resp *r)
{
	json_t *j = json_loadb(r->body, r->len, 0, NULL);

	assert_non_null(j);
	return j;
}

static unsigned
calls(enum sbx_fake_op op)
{
	return sbx_fake_stats(F.fake)->calls[op];
}

static unsigned
all_calls(void)
{
	unsigned i, n = 0;

	for (i = 0; i < SBX_FAKE_NOPS; i++)
		n += calls(i);
	return n;
}

static void
ensure_ok(const char *id)
{
	char path[128];
	struct resp r;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	r = jreq("PUT", path, "{\"egress\":false}");
	assert_int_equal(r.status, 200);
	resp_free(&r);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */

static const struct {
	const char *method, *path;
} every_route[] = {
	{ "GET", "/v1/sandboxes" },
	{ "PUT", "/v1/sandboxes/a1" },
	{ "GET", "/v1/sandboxes/a1" },
	{ "DELETE", "/v1/sandboxes/a1" },
	{ "POST", "/v1/sandboxes/a1/exec" },
	{ "GET", "/v1/sandboxes/a1/files?path=/work/x" },
	{ "PUT", "/v1/sandboxes/a1/files?path=/work/x" },
	{ "GET", "/v1/sandboxes/a1/list?path=/work" },
	{ "POST", "/v1/sandboxes/a1/stop" },
	{ "GET", "/v1/health" },
	{ "GET", "/metrics" },
	{ "GET", "/no/such/route" },
	{ "PATCH", "/v1/sandboxes/a1" },
};

static void
test_every_route_requires_the_token(void **state)
{
	static const char *const bad[] = { NULL, "Bearer " WRONG,
	    "Basic " TOKEN, "Bearer", "Bearer " TOKEN "x",
	    "bearer canary-token-7f3a9c1e5b2d4f6" };
	struct resp r;
	size_t i, k;

	(void)state;
	start(NULL);
	for (i = 0; i < sizeof(every_route) / sizeof(every_route[0]); i++)
		for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
			r = req(every_route[i].method, every_route[i].path,
			    bad[k], SBX_CT_JSON, "{\"argv\":[\"true\"]}");
			assert_non_null(strstr(r.headers, "WWW-Authenticate"));
			expect_error(&r, 401, SBX_E_UNAUTHORIZED);
		}
	assert_int_equal(all_calls(), 0);
	/* The right token opens the same door. */
	r = req("GET", "/v1/health", AUTH, NULL, NULL);
	assert_int_equal(r.status, 200);
	resp_free(&r);
}

static void
test_health_reports_degraded_runtime(void **state)
{
	struct resp r;
	json_t *j;

	(void)state;
	start(NULL);
	r = jreq("GET", "/v1/health", NULL);
	assert_int_equal(r.status, 200);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
	assert_string_equal(json_string_value(json_object_get(j, "version")),
	    BROKER_VERSION);
	json_decref(j);
	resp_free(&r);

	sbx_fake_set_health(F.fake, "runtime socket refused the connection");
	r = jreq("GET", "/v1/health", NULL);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "status")),
	    "degraded");
	assert_string_equal(json_string_value(json_object_get(j, "reason")),
	    "runtime socket refused the connection");
	json_decref(j);
	resp_free(&r);
}

static void
test_routing_errors(void **state)
{
	struct resp r;
	char path[160];

	(void)state;
	start(NULL);
	r = jreq("PATCH", "/v1/sandboxes/a1", NULL);
	assert_non_null(strstr(r.headers, "Allow: PUT, GET, DELETE"));
	expect_error(&r, 405, SBX_E_METHOD_NOT_ALLOWED);
	r = jreq("GET", "/v1/nothing", NULL);
	expect_error(&r, 404, SBX_E_NOT_FOUND);
	r = jreq("GET", "/v1/sandboxes/", NULL);
	expect_error(&r, 404, SBX_E_NOT_FOUND);
	r = jreq("GET", "/v1/sandboxes/Upper", NULL);
	expect_error(&r, 400, SBX_E_INVALID_ID);
	r = jreq("GET", "/v1/sandboxes/-lead", NULL);
	expect_error(&r, 400, SBX_E_INVALID_ID);
	r = jreq("POST", "/v1/sandboxes/a%2Fb/exec", "{\"argv\":[\"true\"]}");
	expect_error(&r, 400, SBX_E_INVALID_ID);
	memset(path, 0, sizeof(path));
	strcpy(path, "/v1/sandboxes/");
	memset(path + strlen(path), 'a', 64);
	r = jreq("GET", path, NULL);
	expect_error(&r, 400, SBX_E_INVALID_ID);
	path[strlen("/v1/sandboxes/") + 63] = '\0';   /* 63: fine */
	r = jreq("GET", path, NULL);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	assert_int_equal(all_calls(), 1);
}

static void
test_ensure_body_is_parsed_strictly(void **state)
{
	static const struct {
		const char *body, *code, *field;
	} cases[] = {
		{ "{\"HostConfig\":{\"Privileged\":true}}", SBX_E_UNKNOWN_FIELD, "HostConfig" },
		{ "{\"Privileged\":true}", SBX_E_UNKNOWN_FIELD, "Privileged" },
		{ "{\"egress\":false,\"Binds\":[\"/:/host\"]}", SBX_E_UNKNOWN_FIELD, "Binds" },
		{ "{\"egress\":\"yes\"}", SBX_E_WRONG_TYPE, "egress" },
		{ "{\"egress\":null}", SBX_E_WRONG_TYPE, "egress" },
		{ "{}", SBX_E_BAD_REQUEST, "egress" },
		{ "", SBX_E_BAD_REQUEST, "egress" },
		{ "{\"egress\":false,\"image\":5}", SBX_E_WRONG_TYPE, "image" },
		{ "{\"egress\":false,\"memory_bytes\":\"1g\"}", SBX_E_WRONG_TYPE, "memory_bytes" },
		{ "{\"egress\":false,\"pids\":1.5}", SBX_E_WRONG_TYPE, "pids" },
		{ "{\"egress\":false,\"image\":\"evil:latest\"}", SBX_E_IMAGE_NOT_ALLOWED, NULL },
		{ "{\"egress\":false,\"memory_bytes\":4294967296}", SBX_E_LIMIT_EXCEEDED, "memory_bytes" },
		{ "{\"egress\":false,\"pids\":100000}", SBX_E_LIMIT_EXCEEDED, "pids" },
		{ "{\"egress\":false,\"nano_cpus\":-1}", SBX_E_WRONG_TYPE, "nano_cpus" },
		/* the broker's member is egress_allow (the api's is allow) */
		{ "{\"egress\":true,\"egress_allow\":\"a.test\"}", SBX_E_WRONG_TYPE,
		    "\"egress_allow must be an array" },
		{ "{\"egress\":true,\"egress_allow\":[1]}", SBX_E_WRONG_TYPE,
		    "\"egress_allow[0] must be a string" },
		{ "{\"egress\":true,\"egress_allow\":[]}", SBX_E_BAD_REQUEST,
		    "\"egress_allow is empty" },
		{ "[1]", SBX_E_BAD_REQUEST, NULL },
		{ "{\"egress\":true", SBX_E_BAD_REQUEST, NULL },
		{ "{\"egress\":true,\"egress\":false}", SBX_E_BAD_REQUEST, NULL },
		{ "{} trailing", SBX_E_BAD_REQUEST, NULL },
	};
	struct resp r;
	size_t i;

	(void)state;
	start(NULL);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		r = jreq("PUT", "/v1/sandboxes/s1", cases[i].body);
		if (cases[i].field != NULL)
			assert_non_null(strstr(r.body, cases[i].field));
		expect_error(&r, 400, cases[i].code);
	}
	assert_int_equal(all_calls(), 0);

	/* An allowlisted image and limits within the ceiling pass through. */
	r = jreq("PUT", "/v1/sandboxes/s1", "{\"image\":\"img-b\",\"egress\":true,"
	    "\"memory_bytes\":1048576,\"pids\":10}");
	assert_int_equal(r.status, 200);
	resp_free(&r);
	assert_int_equal(calls(SBX_FAKE_ENSURE), 1);
	/* The body decides, not the Content-Type (proto/broker-api.md). */
	r = req("PUT", "/v1/sandboxes/s1", AUTH, "text/plain",
	    "{\"egress\":true}");
	assert_int_equal(r.status, 200);
	resp_free(&r);
}

static void
test_exec_body_is_parsed_strictly(void **state)
{
	static const struct {
		const char *body, *code;
	} cases[] = {
		{ "{\"argv\":[\"id\"],\"User\":\"root\"}", SBX_E_UNKNOWN_FIELD },
		{ "{\"argv\":[\"id\"],\"Privileged\":true}", SBX_E_UNKNOWN_FIELD },
		{ "{\"argv\":\"id\"}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":[\"id\",1]}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":[]}", SBX_E_BAD_REQUEST },
		{ "{\"cwd\":\"/work\"}", SBX_E_BAD_REQUEST },
		{ "{\"argv\":[\"a\\u0000b\"]}", SBX_E_BAD_REQUEST },
		{ "{\"argv\":[\"id\"],\"cwd\":\"/etc\"}", SBX_E_PATH_OUTSIDE_WORK },
		{ "{\"argv\":[\"id\"],\"cwd\":\"/work/../etc\"}", SBX_E_PATH_OUTSIDE_WORK },
		{ "{\"argv\":[\"id\"],\"cwd\":7}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":[\"id\"],\"env\":\"A=1\"}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":[\"id\"],\"env\":{\"A\":1}}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":[\"id\"],\"env\":[\"NOEQUALS\"]}", SBX_E_BAD_REQUEST },
		{ "{\"argv\":[\"id\"],\"env\":[\"1A=x\"]}", SBX_E_BAD_REQUEST },
		{ "{\"argv\":[\"id\"],\"env\":{\"A-B\":\"x\"}}", SBX_E_BAD_REQUEST },
		{ "{\"argv\":[\"id\"],\"timeout_ms\":-5}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":null}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":[\"id\"],\"stdin\":\"***\"}", SBX_E_BAD_REQUEST },
		{ "{\"argv\":[\"id\"],\"stdin\":5}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":[\"id\"],\"timeout_ms\":\"5\"}", SBX_E_WRONG_TYPE },
		{ "{\"argv\":[\"id\"],\"timeout_ms\":600001}", SBX_E_LIMIT_EXCEEDED },
		{ "{\"argv\":[\"id\"],\"output_cap\":16777217}", SBX_E_LIMIT_EXCEEDED },
	};
	struct resp r;
	size_t i;

	(void)state;
	start(NULL);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		r = jreq("POST", "/v1/sandboxes/s1/exec", cases[i].body);
		expect_error(&r, 400, cases[i].code);
	}
	assert_int_equal(all_calls(), 0);
}

static void
test_paths_are_checked_before_the_driver(void **state)
{
	static const char *const bad[] = { "/etc/passwd", "/work/../etc",
	    "/work/%2e%2e/x", "%2Fwork%2F..", "/work//x", "/work/", "/workspace",
	    "work/x", "/work/a%00b", "/work/./x" };
	static const char *const routes[] = { "files", "list" };
	struct resp r;
	char path[256];
	size_t i, k;

	(void)state;
	start(NULL);
	for (k = 0; k < 2; k++)
		for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			snprintf(path, sizeof(path), "/v1/sandboxes/s1/%s?path=%s",
			    routes[k], bad[i]);
			r = jreq("GET", path, NULL);
			expect_error(&r, 400, SBX_E_PATH_OUTSIDE_WORK);
		}
	snprintf(path, sizeof(path), "/v1/sandboxes/s1/files?path=/work/../x");
	r = req("PUT", path, AUTH, "application/octet-stream", "data");
	expect_error(&r, 400, SBX_E_PATH_OUTSIDE_WORK);
	r = jreq("GET", "/v1/sandboxes/s1/files", NULL);
	expect_error(&r, 400, SBX_E_BAD_REQUEST);
	r = jreq("GET", "/v1/sandboxes/s1/files?path=/work/a&path=/work/b", NULL);
	expect_error(&r, 400, SBX_E_BAD_REQUEST);
	r = req("PUT", "/v1/sandboxes/s1/files?path=/work/x&mode=999", AUTH,
	    "application/octet-stream", "data");
	expect_error(&r, 400, SBX_E_BAD_REQUEST);
	r = req("PUT", "/v1/sandboxes/s1/files?path=/work/x&mode=4755", AUTH,
	    "application/octet-stream", "data");
	expect_error(&r, 400, SBX_E_BAD_REQUEST);
	r = req("PUT", "/v1/sandboxes/s1/files?path=/work/x&mode=00644", AUTH,
	    "application/octet-stream", "data");
	expect_error(&r, 400, SBX_E_BAD_REQUEST);
	r = req("PUT", "/v1/sandboxes/s1/files?path=/work", AUTH,
	    "application/octet-stream", "data");
	expect_error(&r, 400, SBX_E_BAD_REQUEST);
	assert_int_equal(all_calls(), 0);
}

struct race {
	int n;
	const char *id;
	int status[32];
	char body[32][512];
};

static void
race_fn(void *arg)
{
	struct race *rc = arg;
	struct conn c[32];
	struct resp r;
	char path[128];
	int i;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", rc->id);
	/* Every request is on the wire before any answer is read. */
	for (i = 0; i < rc->n; i++) {
		memset(&c[i], 0, sizeof(c[i]));
		c[i].fd = cl_connect();
		cl_send(c[i].fd, "PUT", path, AUTH, SBX_CT_JSON, "{\"egress\":false}",
		    16);
	}
	for (i = 0; i < rc->n; i++) {
		cl_read_all(&c[i]);
		cl_parse(&c[i], &r);
		rc->status[i] = r.status;
		snprintf(rc->body[i], sizeof(rc->body[i]), "%s",
		    r.body ? r.body : "");
		free(r.body);
		free(c[i].buf);
		close(c[i].fd);
	}
}

static void
test_ensure_is_serialised_under_race(void **state)
{
	struct race rc = { .n = 20, .id = "race-1" };
	const struct sbx_fake_stats *st;
	json_t *j;
	int i;

	(void)state;
	start(NULL);
	sbx_fake_set_delay_ms(F.fake, 5);
	run_client(race_fn, &rc);
	for (i = 0; i < rc.n; i++) {
		assert_int_equal(rc.status[i], 200);
		j = json_loads(rc.body[i], 0, NULL);
		assert_non_null(j);
		assert_string_equal(json_string_value(json_object_get(j, "state")),
		    "running");
		json_decref(j);
	}
	st = sbx_fake_stats(F.fake);
	assert_int_equal(st->calls[SBX_FAKE_ENSURE], 20);
	assert_int_equal(st->max_mutating_per_id, 1);
	assert_int_equal(st->containers_created, 1);
}

static void
test_ensure_status_stop_destroy(void **state)
{
	struct resp r;
	json_t *j;

	(void)state;
	start(NULL);
	r = jreq("GET", "/v1/sandboxes/s2", NULL);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "absent");
	assert_true(json_is_null(json_object_get(j, "image")));
	assert_true(json_is_false(json_object_get(j, "egress")));
	assert_true(json_is_null(json_object_get(j, "created_at")));
	assert_true(json_is_null(json_object_get(j, "last_used_at")));
	assert_true(json_is_null(json_object_get(j, "stop_reason")));
	json_decref(j);
	resp_free(&r);

	r = jreq("PUT", "/v1/sandboxes/s2", "{\"image\":\"img-c\",\"egress\":true}");
	assert_int_equal(r.status, 200);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "id")), "s2");
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "running");
	assert_string_equal(json_string_value(json_object_get(j, "image")),
	    "img-c");
	assert_true(json_is_true(json_object_get(j, "egress")));
	assert_true(json_integer_value(json_object_get(j, "created_at")) > 0);
	assert_true(json_integer_value(json_object_get(j, "last_used_at")) > 0);
	json_decref(j);
	resp_free(&r);

	r = jreq("POST", "/v1/sandboxes/s2/stop", NULL);
	assert_int_equal(r.status, 200);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "stopped");
	assert_string_equal(json_string_value(json_object_get(j, "image")),
	    "img-c");
	assert_string_equal(json_string_value(json_object_get(j, "stop_reason")),
	    "operator");
	json_decref(j);
	resp_free(&r);
	r = jreq("GET", "/v1/sandboxes/s2", NULL);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "stopped");
	assert_string_equal(json_string_value(json_object_get(j, "stop_reason")),
	    "operator");
	json_decref(j);
	resp_free(&r);

	r = jreq("POST", "/v1/sandboxes/s2/exec", "{\"argv\":[\"true\"]}");
	expect_error(&r, 409, SBX_E_NOT_RUNNING);

	ensure_ok("s0");
	ensure_ok("s9");
	r = jreq("GET", "/v1/sandboxes", NULL);
	j = body_json(&r);
	assert_int_equal(json_array_size(j), 3);
	assert_string_equal(json_string_value(json_object_get(
	    json_array_get(j, 0), "id")), "s0");
	assert_string_equal(json_string_value(json_object_get(
	    json_array_get(j, 1), "id")), "s2");
	assert_string_equal(json_string_value(json_object_get(
	    json_array_get(j, 2), "id")), "s9");
	json_decref(j);
	resp_free(&r);

	r = jreq("DELETE", "/v1/sandboxes/s2", NULL);
	assert_int_equal(r.status, 200);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "absent");
	assert_true(json_is_null(json_object_get(j, "created_at")));
	json_decref(j);
	resp_free(&r);
	assert_int_equal(sbx_fake_state(F.fake, "s2"), SBX_STATE_ABSENT);
	r = jreq("POST", "/v1/sandboxes/s2/stop", "{}");
	expect_error(&r, 404, SBX_E_NOT_FOUND);
	r = jreq("POST", "/v1/sandboxes/s2/stop", "{\"force\":true}");
	expect_error(&r, 400, SBX_E_UNKNOWN_FIELD);
}

/* Splits an NDJSON body into lines (modifies it); returns the count. */
static int
lines_of(char *body, char **lines, int max)
{
	int n = 0;
	char *p = body, *nl;

	while (n < max && (nl = strchr(p, '\n')) != NULL) {
		*nl = '\0';
		lines[n++] = p;
		p = nl + 1;
	}
	assert_string_equal(p, "");   /* every line ends with \n */
	return n;
}

static void
test_exec_streams_ndjson_as_scripted(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "hello\n" },
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 2, .data = "\xff\xfe",
		    .len = 2 },
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "a\0b", .len = 3 },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 3 },
	};
	const struct sbx_fake_exec_seen *seen;
	struct resp r;
	char *lines[16];
	json_t *j;
	int n;

	(void)state;
	start(NULL);
	ensure_ok("x1");
	assert_int_equal(sbx_fake_set_exec_script(F.fake, script, 4), 0);
	r = jreq("POST", "/v1/sandboxes/x1/exec", "{\"argv\":[\"sh\",\"-c\","
	    "\"echo hi\"],\"cwd\":\"/work/sub\",\"env\":{\"A\":\"1\"},"
	    "\"stdin\":\"aGVsbG8=\"}");
	assert_int_equal(r.status, 200);
	assert_non_null(strcasestr(r.headers, "Content-Type: application/x-ndjson"));
	n = lines_of(r.body, lines, 16);
	assert_int_equal(n, 5);
	j = json_loads(lines[0], 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "type")), "start");
	assert_true(json_is_string(json_object_get(j, "exec_id")));
	assert_true(json_integer_value(json_object_get(j, "ts")) > 0);
	json_decref(j);
	assert_string_equal(lines[1], "{\"type\":\"stdout\",\"data\":\"hello\\n\"}");
	assert_string_equal(lines[2], "{\"type\":\"stderr\",\"data_b64\":\"//4=\"}");
	/* valid UTF-8, but \u0000 makes it longer than base64 (adr/0028) */
	assert_string_equal(lines[3], "{\"type\":\"stdout\",\"data_b64\":\"YQBi\"}");
	assert_string_equal(lines[4], "{\"type\":\"exit\",\"code\":3,"
	    "\"signal\":null,\"duration_ms\":1,\"truncated\":false}");
	resp_free(&r);

	seen = sbx_fake_last_exec(F.fake);
	assert_string_equal(seen->argv, "sh -c echo hi");
	assert_string_equal(seen->cwd, "/work/sub");
	assert_string_equal(seen->env, "A=1");
	assert_int_equal(seen->stdin_len, 5);
	assert_string_equal(seen->stdin_data, "hello");
	/* Limits the caller left out are the broker's defaults. */
	assert_int_equal(seen->timeout_ms, 60000);
	assert_int_equal(seen->output_cap, 16 * 1024 * 1024);
}

static void
test_exec_errors_before_and_after_start(void **state)
{
	static const struct sbx_fake_step early[] = {
		{ .kind = SBX_FAKE_STEP_ERROR, .err_code = SBX_E_RUNTIME_UNAVAILABLE,
		    .err_message = "The runtime socket does not answer." },
	};
	static const struct sbx_fake_step late[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "x" },
		{ .kind = SBX_FAKE_STEP_ERROR, .err_code = SBX_E_TIMEOUT,
		    .err_message = "The exec ran longer than 5 ms." },
	};
	struct resp r;
	char *lines[8];

	(void)state;
	start(NULL);
	r = jreq("POST", "/v1/sandboxes/nobody/exec", "{\"argv\":[\"true\"]}");
	expect_error(&r, 404, SBX_E_NOT_FOUND);
	ensure_ok("x2");
	sbx_fake_set_exec_script(F.fake, early, 1);
	r = jreq("POST", "/v1/sandboxes/x2/exec", "{\"argv\":[\"true\"]}");
	expect_error(&r, 503, SBX_E_RUNTIME_UNAVAILABLE);
	sbx_fake_set_exec_script(F.fake, late, 2);
	r = jreq("POST", "/v1/sandboxes/x2/exec", "{\"argv\":[\"true\"],"
	    "\"timeout_ms\":5}");
	assert_int_equal(r.status, 200);
	assert_int_equal(lines_of(r.body, lines, 8), 3);
	assert_string_equal(lines[2], "{\"type\":\"error\",\"code\":\"timeout\","
	    "\"message\":\"The exec ran longer than 5 ms.\"}");
	resp_free(&r);
	assert_int_equal(sbx_fake_last_exec(F.fake)->timeout_ms, 5);
}

struct disc {
	int got_tick;
};

static void
disconnect_fn(void *arg)
{
	struct disc *d = arg;
	struct conn c = { -1, NULL, 0, 0 };
	const char *body = "{\"argv\":[\"sleep\",\"1000\"]}";

	c.fd = cl_connect();
	cl_send(c.fd, "POST", "/v1/sandboxes/x3/exec", AUTH, SBX_CT_JSON, body,
	    strlen(body));
	d->got_tick = cl_read_until(&c, "tick");
	close(c.fd);
	free(c.buf);
}

static int
exec_cancelled(void *arg)
{
	(void)arg;
	return sbx_fake_stats(F.fake)->exec_cancels == 1;
}

static int
nothing_in_flight(void *arg)
{
	(void)arg;
	return broker_server_inflight(F.server) == 0;
}

static void
test_client_disconnect_cancels_exec(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "tick\n" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct disc d = { 0 };

	(void)state;
	start(NULL);
	ensure_ok("x3");
	sbx_fake_set_exec_script(F.fake, script, 2);
	run_client(disconnect_fn, &d);
	assert_true(d.got_tick);
	assert_true(loop_until(exec_cancelled, NULL, 5000));
	assert_true(loop_until(nothing_in_flight, NULL, 5000));
	assert_int_equal(sbx_fake_stats(F.fake)->execs_live, 0);
}

static void
early_close_fn(void *arg)
{
	const char *body = "{\"argv\":[\"sleep\",\"1000\"]}";
	int fd = cl_connect();

	(void)arg;
	cl_send(fd, "POST", "/v1/sandboxes/x3/exec", AUTH, SBX_CT_JSON, body,
	    strlen(body));
	close(fd);
}

static void
test_client_gone_before_start_cancels_exec(void **state)
{
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "tick\n" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};

	(void)state;
	start(NULL);
	ensure_ok("x3");
	sbx_fake_set_exec_script(F.fake, script, 2);
	sbx_fake_set_delay_ms(F.fake, 100);
	run_client(early_close_fn, NULL);
	assert_true(loop_until(exec_cancelled, NULL, 5000));
	assert_true(loop_until(nothing_in_flight, NULL, 5000));
	assert_int_equal(sbx_fake_stats(F.fake)->execs_live, 0);
}

struct slow {
	sem_t go;
	size_t bytes;
	int lines, exit_seen;
};

static void
slow_fn(void *arg)
{
	struct slow *s = arg;
	struct conn c = { -1, NULL, 0, 0 };
	const char *body = "{\"argv\":[\"yes\"]}";
	struct resp r;
	char *p;

	c.fd = cl_connect();
	cl_send(c.fd, "POST", "/v1/sandboxes/x4/exec", AUTH, SBX_CT_JSON, body,
	    strlen(body));
	sem_wait(&s->go);       /* the broker has paused the producer */
	cl_read_all(&c);
	cl_parse(&c, &r);
	for (p = r.body; p != NULL && (p = strchr(p, '\n')) != NULL; p++)
		s->lines++;
	s->exit_seen = r.body && strstr(r.body, "{\"type\":\"exit\"") != NULL;
	s->bytes = r.len;
	free(r.body);
	free(c.buf);
	close(c.fd);
}

static int
paused_once(void *arg)
{
	(void)arg;
	return sbx_fake_stats(F.fake)->pauses >= 1;
}

static void
test_slow_client_pauses_the_producer(void **state)
{
	static char chunk[65536];
	struct sbx_fake_step script[2];
	struct slow s;
	struct job j;
	pthread_t t;

	(void)state;
	start(NULL);
	ensure_ok("x4");
	memset(chunk, 'y', sizeof(chunk));
	memset(script, 0, sizeof(script));
	script[0].kind = SBX_FAKE_STEP_OUTPUT;
	script[0].stream = 1;
	script[0].data = chunk;
	script[0].len = sizeof(chunk);
	script[0].repeat = 200;          /* 12.5 MiB: more than any socket
	                                  * buffer, under the 16 MiB output cap */
	script[1].kind = SBX_FAKE_STEP_EXIT;
	sbx_fake_set_exec_script(F.fake, script, 2);
	memset(&s, 0, sizeof(s));
	sem_init(&s.go, 0, 0);
	j.fn = slow_fn;
	j.arg = &s;
	j.done = 0;
	assert_int_equal(pthread_create(&t, NULL, job_main, &j), 0);
	assert_true(loop_until(paused_once, NULL, 20000));
	/* While paused the producer stays paused: nothing is buffered past it. */
	sem_post(&s.go);
	assert_true(loop_until(job_done, &j, 60000));
	pthread_join(t, NULL);
	sem_destroy(&s.go);
	assert_true(s.exit_seen);
	assert_int_equal(s.lines, 200 + 2);
	assert_true(sbx_fake_stats(F.fake)->resumes >= 1);
}

struct busy {
	int third_status;
	char third_body[256];
	int started;
};

static void
busy_fn(void *arg)
{
	struct busy *b = arg;
	struct conn c[2];
	const char *body = "{\"argv\":[\"sleep\",\"9\"]}";
	struct call k = { "POST", "/v1/sandboxes/x5/exec", AUTH, SBX_CT_JSON,
	    NULL, 0, { 0 } };
	int i;

	for (i = 0; i < 2; i++) {
		memset(&c[i], 0, sizeof(c[i]));
		c[i].fd = cl_connect();
		cl_send(c[i].fd, "POST", "/v1/sandboxes/x5/exec", AUTH,
		    SBX_CT_JSON, body, strlen(body));
		b->started += cl_read_until(&c[i], "\"start\"");
	}
	k.body = body;
	do_call(&k);
	b->third_status = k.r.status;
	snprintf(b->third_body, sizeof(b->third_body), "%s",
	    k.r.body ? k.r.body : "");
	free(k.r.body);
	for (i = 0; i < 2; i++) {
		close(c[i].fd);
		free(c[i].buf);
	}
}

static int
two_cancelled(void *arg)
{
	(void)arg;
	return sbx_fake_stats(F.fake)->exec_cancels == 2;
}

static void
test_exec_limit_per_sandbox(void **state)
{
	static const char *const extra[] = { "--max-execs-per-sandbox", "2",
	    NULL };
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct busy b;

	(void)state;
	start(extra);
	ensure_ok("x5");
	sbx_fake_set_exec_script(F.fake, script, 1);
	memset(&b, 0, sizeof(b));
	run_client(busy_fn, &b);
	assert_int_equal(b.started, 2);
	assert_int_equal(b.third_status, 429);
	assert_non_null(strstr(b.third_body, SBX_E_TOO_MANY));
	assert_int_equal(calls(SBX_FAKE_EXEC), 2);
	assert_true(loop_until(two_cancelled, NULL, 5000));
}

static void
test_max_sandboxes(void **state)
{
	static const char *const extra[] = { "--max-sandboxes", "2", NULL };
	struct resp r;

	(void)state;
	start(extra);
	ensure_ok("m1");
	ensure_ok("m2");
	r = jreq("PUT", "/v1/sandboxes/m3", "{\"egress\":false}");
	expect_error(&r, 429, SBX_E_TOO_MANY);
	assert_int_equal(calls(SBX_FAKE_ENSURE), 2);
	ensure_ok("m1");              /* an existing one is still fine */
	r = jreq("DELETE", "/v1/sandboxes/m2", NULL);
	resp_free(&r);
	ensure_ok("m3");              /* room again */
}

/* A page longer than SBX_LIST_SLICE (500) is encoded over several turns of the
 * loop (adr/0030): the same JSON, every entry once, in order, both forms. */
static void
test_list_page_in_slices_is_whole_json(void **state)
{
	struct resp r;
	json_t *j, *ents;
	char path[64], name[16];
	size_t i, n = 1234;

	(void)state;
	start(NULL);
	ensure_ok("ls1");
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/work/many/f%05zu", i);
		assert_int_equal(sbx_fake_put_file(F.fake, "ls1", path, "x", 1), 0);
	}
	r = jreq("GET", "/v1/sandboxes/ls1/list?path=/work/many&cursor=", NULL);
	assert_int_equal(r.status, 200);
	j = body_json(&r);
	assert_non_null(j);
	ents = json_object_get(j, "entries");
	assert_int_equal(json_array_size(ents), n);
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "f%05zu", i);
		assert_string_equal(json_string_value(json_object_get(
		    json_array_get(ents, i), "name")), name);
	}
	assert_true(json_is_false(json_object_get(j, "truncated")));
	assert_true(json_is_null(json_object_get(j, "cursor")));
	json_decref(j);
	resp_free(&r);
	r = jreq("GET", "/v1/sandboxes/ls1/list?path=/work/many", NULL);
	assert_int_equal(r.status, 200);
	j = body_json(&r);
	assert_int_equal(json_array_size(j), n);
	assert_string_equal(json_string_value(json_object_get(
	    json_array_get(j, n - 1), "name")), "f01233");
	json_decref(j);
	resp_free(&r);
}

static void
test_files_roundtrip_and_size_caps(void **state)
{
	static const char *const extra[] = { "--file-size-max", "16",
	    "--body-max", "64", NULL };
	/* Bodies over the route's cap: JSON 413 too_large (the gate). */
	struct resp r;
	json_t *j, *e;
	char buf[64];
	char big[128];

	(void)state;
	start(extra);
	ensure_ok("f1");
	r = req("PUT", "/v1/sandboxes/f1/files?path=/work/d/a.txt&mode=0600",
	    AUTH, "application/octet-stream", "some bytes");
	assert_int_equal(r.status, 200);
	resp_free(&r);
	assert_int_equal(sbx_fake_get_file(F.fake, "f1", "/work/d/a.txt", buf,
	    sizeof(buf)), 10);
	assert_memory_equal(buf, "some bytes", 10);

	r = jreq("GET", "/v1/sandboxes/f1/files?path=/work/d/a.txt", NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(strcasestr(r.headers,
	    "Content-Type: application/octet-stream"));
	assert_int_equal(r.len, 10);
	assert_memory_equal(r.body, "some bytes", 10);
	resp_free(&r);

	assert_int_equal(sbx_fake_put_file(F.fake, "f1", "/work/empty", "", 0), 0);
	r = jreq("GET", "/v1/sandboxes/f1/files?path=/work/empty", NULL);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.len, 0);
	resp_free(&r);

	r = jreq("GET", "/v1/sandboxes/f1/files?path=/work/d/none", NULL);
	expect_error(&r, 404, SBX_E_NOT_FOUND);

	assert_int_equal(sbx_fake_put_file(F.fake, "f1", "/work/e/\xff\xfe", "",
	    0), 0);
	r = jreq("GET", "/v1/sandboxes/f1/list?path=/work/e", NULL);
	assert_int_equal(r.status, 200);
	j = body_json(&r);
	assert_int_equal(json_array_size(j), 1);
	e = json_array_get(j, 0);
	assert_null(json_object_get(e, "name"));
	assert_string_equal(json_string_value(json_object_get(e, "name_b64")),
	    "//4=");
	json_decref(j);
	resp_free(&r);

	r = jreq("GET", "/v1/sandboxes/f1/list?path=/work/d", NULL);
	assert_int_equal(r.status, 200);
	j = body_json(&r);
	assert_int_equal(json_array_size(j), 1);
	e = json_array_get(j, 0);
	assert_string_equal(json_string_value(json_object_get(e, "name")), "a.txt");
	assert_string_equal(json_string_value(json_object_get(e, "type")), "file");
	assert_int_equal(json_integer_value(json_object_get(e, "size")), 10);
	assert_int_equal(json_integer_value(json_object_get(e, "mode")), 0600);
	json_decref(j);
	resp_free(&r);

	memset(big, 'z', sizeof(big));
	big[sizeof(big) - 1] = '\0';
	r = req("PUT", "/v1/sandboxes/f1/files?path=/work/big", AUTH,
	    "application/octet-stream", "0123456789abcdefX");
	expect_error(&r, 413, SBX_E_TOO_LARGE);
	/* Over body_max on exec: JSON 413 too. */
	snprintf(big, sizeof(big), "{\"argv\":[\"%060d\"]}", 0);
	assert_true(strlen(big) > 64);
	r = jreq("POST", "/v1/sandboxes/f1/exec", big);
	assert_int_equal(r.status, 413);
	resp_free(&r);
	assert_int_equal(calls(SBX_FAKE_WRITE), 1);
	assert_int_equal(calls(SBX_FAKE_EXEC), 0);
}

static int
count_rows(const char *sql)
{
	char path[128];
	sqlite3 *db = NULL;
	sqlite3_stmt *q = NULL;
	int n = -1;

	snprintf(path, sizeof(path), "%s/broker.db", F.dir);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
	if (sqlite3_step(q) == SQLITE_ROW)
		n = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return n;
}

static void
test_audit_rows_and_last_used(void **state)
{
	struct resp r;

	(void)state;
	start(NULL);
	ensure_ok("au1");
	r = jreq("POST", "/v1/sandboxes/au1/exec", "{\"argv\":[\"true\"]}");
	assert_int_equal(r.status, 200);
	resp_free(&r);
	r = jreq("POST", "/v1/sandboxes/au1/exec", "{\"argv\":[\"true\"],"
	    "\"Privileged\":true}");
	expect_error(&r, 400, SBX_E_UNKNOWN_FIELD);
	r = jreq("GET", "/v1/sandboxes/au1/list?path=/etc", NULL);
	expect_error(&r, 400, SBX_E_PATH_OUTSIDE_WORK);
	r = jreq("POST", "/v1/sandboxes/au1/stop", NULL);
	resp_free(&r);

	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE op='ensure'"
	    " AND id='au1' AND outcome='ok' AND duration_ms >= 0 AND ts > 0"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE op='exec'"
	    " AND id='au1' AND outcome='ok'"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE op='exec'"
	    " AND id='au1' AND outcome='unknown_field'"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE op='list'"
	    " AND outcome='path_outside_work'"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE op='stop'"
	    " AND outcome='ok'"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id='au1' AND state='stopped' AND stop_reason='operator' AND "
	    "last_used_at >= created_at AND volume='sbx-au1-work'"), 1);
	r = jreq("GET", "/v1/health", NULL);
	resp_free(&r);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE "
	    "op='health' AND id='' AND outcome='ok'"), 1);
	r = jreq("GET", "/v1/sandboxes/BAD", NULL);
	resp_free(&r);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE "
	    "op='status' AND outcome='invalid_id'"), 1);
	/* Requests that never authenticated leave no audit row. */
	r = req("GET", "/v1/sandboxes/au1", NULL, NULL, NULL);
	resp_free(&r);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE "
	    "op='status' OR outcome='unauthorized'"), 1);
}

static void
test_metrics_count_requests(void **state)
{
	struct resp r;

	(void)state;
	start(NULL);
	ensure_ok("me1");
	r = jreq("POST", "/v1/sandboxes/me1/exec", "{\"argv\":[\"true\"]}");
	resp_free(&r);
	r = req("GET", "/metrics", "Bearer " WRONG, NULL, NULL);
	resp_free(&r);
	r = jreq("GET", "/metrics", NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(strcasestr(r.headers, "Content-Type: text/plain"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_requests_total{op=\"ensure\",code=\"200\"} 1\n"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_requests_total{op=\"unknown\",code=\"401\"} 1\n"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_request_duration_seconds_count{op=\"exec\"} 1\n"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_request_duration_seconds_bucket{op=\"exec\",le=\"+Inf\"} 1\n"));
	assert_non_null(strstr(r.body, "sbx_broker_execs_started_total 1\n"));
	assert_non_null(strstr(r.body, "sbx_broker_execs_finished_total 1\n"));
	assert_non_null(strstr(r.body, "sbx_broker_execs_running 0\n"));
	assert_non_null(strstr(r.body, "sbx_broker_exec_output_bytes_total{stream=\"stdout\"} 6\n"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_sandboxes{state=\"running\"} 1\n"));
	resp_free(&r);
}

static void
test_canary_token_never_leaks(void **state)
{
	struct resp r;
	char logs[1 << 16];
	ssize_t n;
	int i;

	(void)state;
	start(NULL);
	for (i = 0; i < (int)(sizeof(every_route) / sizeof(every_route[0])); i++) {
		r = req(every_route[i].method, every_route[i].path, AUTH,
		    SBX_CT_JSON, "{\"argv\":[\"" TOKEN "\"]}");
		assert_null(strstr(r.headers, TOKEN));
		assert_true(r.body == NULL || strstr(r.body, TOKEN) == NULL);
		resp_free(&r);
		r = req(every_route[i].method, every_route[i].path,
		    "Bearer " WRONG, SBX_CT_JSON, "{}");
		assert_null(strstr(r.headers, WRONG));
		assert_true(r.body == NULL || strstr(r.body, WRONG) == NULL);
		resp_free(&r);
	}
	n = pread(F.logfd, logs, sizeof(logs) - 1, 0);
	assert_true(n > 0);          /* requests were logged ... */
	logs[n] = '\0';
	assert_non_null(strstr(logs, "\"route\":\"exec\""));
	assert_null(strstr(logs, TOKEN));   /* ... without either token */
	assert_null(strstr(logs, WRONG));
	assert_null(strstr(logs, "canary"));
}

/* ------------------------------------------------------------------ */
/* The gate: heads are checked before a body is read                   */

/* Raw bytes sent on one connection, then everything read until EOF. */
struct raw {
	const char *out;
	size_t outlen;
	size_t junk;          /* then this many more bytes, errors ignored */
	size_t junk_sent;
	struct conn c;
};

static void
raw_fn(void *arg)
{
	static char junk[65536];
	struct raw *x = arg;
	struct timeval tv = { 10, 0 };
	size_t off = 0, n;
	ssize_t w;

	if ((x->c.fd = cl_connect()) == -1)
		return;
	/* A broker that waits for the body never answers: fail, not hang. */
	setsockopt(x->c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(x->c.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (off < x->outlen && (w = send(x->c.fd, x->out + off,
	    x->outlen - off, MSG_NOSIGNAL)) > 0)
		off += (size_t)w;
	memset(junk, 'j', sizeof(junk));
	while (x->junk_sent < x->junk) {
		n = x->junk - x->junk_sent;
		if (n > sizeof(junk))
			n = sizeof(junk);
		if ((w = send(x->c.fd, junk, n, MSG_NOSIGNAL)) <= 0)
			break;   /* the broker answered and closed */
		x->junk_sent += (size_t)w;
	}
	cl_read_all(&x->c);
	close(x->c.fd);
}

/* Sends out (+ junk filler bytes); returns what came back until EOF. */
static struct conn
raw(const char *out, size_t junk, size_t *junk_sent)
{
	struct raw x;

	memset(&x, 0, sizeof(x));
	x.out = out;
	x.outlen = strlen(out);
	x.junk = junk;
	x.c.fd = -1;
	run_client(raw_fn, &x);
	if (junk_sent != NULL)
		*junk_sent = x.junk_sent;
	return x.c;
}

/*
 * Splits the responses in c (each with a Content-Length, as evhttp sends
 * them) into rs; returns how many there were.
 */
static int
split_responses(struct conn *c, struct resp *rs, int max)
{
	struct conn one;
	const char *p = c->buf, *end = c->buf + c->len, *hend, *cl;
	size_t blen;
	int n = 0;

	while (p != NULL && p < end && n < max) {
		if ((hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4)) == NULL)
			break;
		cl = strcasestr(p, "\r\nContent-Length:");
		blen = cl != NULL && cl < hend ? strtoul(cl + 17, NULL, 10) : 0;
		one.buf = strndup(p, (size_t)(hend + 4 - p) + blen);
		one.len = strlen(one.buf);
		cl_parse(&one, &rs[n++]);
		free(one.buf);
		p = hend + 4 + blen;
	}
	return n;
}

#define BIG_CL "Content-Length: 100000000\r\n"

static void
test_unauthenticated_big_body_gets_401_unread(void **state)
{
	static const char *const heads[] = {
		/* no token, no body sent at all: the answer comes anyway */
		"PUT /v1/sandboxes/g1/files?path=/work/big HTTP/1.1\r\n"
		    "Host: t\r\n" BIG_CL "\r\n",
		"PUT /v1/sandboxes/g1 HTTP/1.1\r\nHost: t\r\n"
		    "Authorization: Bearer " WRONG "\r\n" BIG_CL "\r\n",
		"POST /v1/sandboxes/g1/exec HTTP/1.1\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n",
		"PUT /v1/sandboxes/g1/files?path=/work/big HTTP/1.1\r\n"
		    "Authorization: Bearer " WRONG "\r\n"
		    "Expect: 100-continue\r\n" BIG_CL "\r\n",
		/* a bad framing from a stranger is still a 401 */
		"PUT /v1/sandboxes/g1 HTTP/1.1\r\nContent-Length: 1\r\n"
		    "Content-Length: 2\r\n\r\n",
	};
	struct conn c;
	struct resp r[2];
	size_t i, sent;

	(void)state;
	start(NULL);
	for (i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		c = raw(heads[i], 0, NULL);
		assert_int_equal(split_responses(&c, r, 2), 1);
		assert_non_null(strcasestr(r[0].headers, "Connection: close"));
		assert_non_null(strcasestr(r[0].headers, "WWW-Authenticate: Bearer"));
		assert_null(strstr(r[0].headers, "100 Continue"));
		expect_error(&r[0], 401, SBX_E_UNAUTHORIZED);
		free(c.buf);
	}
	/* A client that sends the body all the same: 401, and the broker
	 * closes rather than reading 64 MiB from a stranger. */
	c = raw(heads[0], (size_t)64 << 20, &sent);
	assert_int_equal(split_responses(&c, r, 2), 1);
	expect_error(&r[0], 401, SBX_E_UNAUTHORIZED);
	assert_true(sent < (size_t)32 << 20);
	free(c.buf);
	assert_int_equal(all_calls(), 0);
}

static void
test_authenticated_body_over_cap_gets_413_unread(void **state)
{
	static const char *const extra[] = { "--file-size-max", "16",
	    "--body-max", "64", NULL };
	struct conn c;
	struct resp r[2];
	json_t *j;

	(void)state;
	start(extra);
	ensure_ok("g2");
	/* Content-Length over the file cap: 413 before any body byte. */
	c = raw("PUT /v1/sandboxes/g2/files?path=/work/big HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\n" BIG_CL "\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 2), 1);
	assert_non_null(strcasestr(r[0].headers, "Connection: close"));
	expect_error(&r[0], 413, SBX_E_TOO_LARGE);
	free(c.buf);
	/* Over the JSON body cap on exec, with 100-continue: 413, no 100. */
	c = raw("POST /v1/sandboxes/g2/exec HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\nExpect: 100-continue\r\n"
	    "Content-Length: 65\r\n\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 2), 1);
	expect_error(&r[0], 413, SBX_E_TOO_LARGE);
	free(c.buf);
	/* A route that takes no body: 400, unread. */
	c = raw("GET /v1/sandboxes/g2 HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\n" BIG_CL "\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 2), 1);
	expect_error(&r[0], 400, SBX_E_BAD_REQUEST);
	free(c.buf);
	/* An unknown endpoint stays a 404 whatever its body. */
	c = raw("PUT /v1/nothing HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\n" BIG_CL "\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 2), 1);
	expect_error(&r[0], 404, SBX_E_NOT_FOUND);
	free(c.buf);
	/* Chunked over the cap (10 + 7 > 16): 413 once the cap is passed. */
	c = raw("PUT /v1/sandboxes/g2/files?path=/work/ch HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "a\r\n0123456789\r\n7\r\nabcdefg\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 2), 1);
	expect_error(&r[0], 413, SBX_E_TOO_LARGE);
	free(c.buf);
	/* Chunk syntax the gate does not take (an extension): 400. */
	c = raw("PUT /v1/sandboxes/g2/files?path=/work/ch HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "3;x=y\r\nabc\r\n0\r\n\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 2), 1);
	expect_error(&r[0], 400, SBX_E_BAD_REQUEST);
	free(c.buf);
	assert_int_equal(calls(SBX_FAKE_WRITE), 0);
	assert_int_equal(calls(SBX_FAKE_EXEC), 0);
	/* Chunked within the cap, then a second request on the same
	 * connection: both answered, the file holds the 16 bytes. */
	c = raw("PUT /v1/sandboxes/g2/files?path=/work/ch HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "a\r\n0123456789\r\n6\r\nabcdef\r\n0\r\n\r\n"
	    "GET /v1/sandboxes/g2 HTTP/1.1\r\nAuthorization: " AUTH "\r\n"
	    "Connection: close\r\n\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 2), 2);
	assert_int_equal(r[0].status, 200);
	j = body_json(&r[0]);
	assert_int_equal(json_integer_value(json_object_get(j, "size")), 16);
	json_decref(j);
	assert_int_equal(r[1].status, 200);
	resp_free(&r[0]);
	resp_free(&r[1]);
	free(c.buf);
	{
		char buf[32];

		assert_int_equal(sbx_fake_get_file(F.fake, "g2", "/work/ch", buf,
		    sizeof(buf)), 16);
		assert_memory_equal(buf, "0123456789abcdef", 16);
	}
	/* The gate's verdict header planted by a client counts for nothing. */
	c = raw("GET /v1/health HTTP/1.1\r\nAuthorization: " AUTH "\r\n"
	    "X-Sbx-Refused: 00000000000000000000000000000000 too_large\r\n"
	    "Connection: close\r\n\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 2), 1);
	assert_int_equal(r[0].status, 200);
	resp_free(&r[0]);
	free(c.buf);
}

static void
test_content_length_smaller_than_sent(void **state)
{
	static const char *const extra[] = { "--file-size-max", "16", NULL };
	struct conn c;
	struct resp r[3];
	char buf[32];
	json_t *j;

	(void)state;
	start(extra);
	ensure_ok("g3");
	/* 4 bytes declared, more sent: the rest is the next request, and
	 * that one carries no token of its own. */
	c = raw("PUT /v1/sandboxes/g3/files?path=/work/a HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\nContent-Length: 4\r\n\r\n"
	    "abcdPUT /v1/sandboxes/g3/files?path=/work/evil HTTP/1.1\r\n"
	    "Content-Length: 3\r\n\r\nxyz", 0, NULL);
	assert_int_equal(split_responses(&c, r, 3), 2);
	assert_int_equal(r[0].status, 200);
	j = body_json(&r[0]);
	assert_int_equal(json_integer_value(json_object_get(j, "size")), 4);
	json_decref(j);
	resp_free(&r[0]);
	expect_error(&r[1], 401, SBX_E_UNAUTHORIZED);
	free(c.buf);
	assert_int_equal(sbx_fake_get_file(F.fake, "g3", "/work/a", buf,
	    sizeof(buf)), 4);
	assert_memory_equal(buf, "abcd", 4);
	assert_true(sbx_fake_get_file(F.fake, "g3", "/work/evil", buf,
	    sizeof(buf)) < 0);
	/* The rest is garbage: an answer (401: no credentials), then close. */
	c = raw("PUT /v1/sandboxes/g3/files?path=/work/b HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\nContent-Length: 2\r\n\r\n"
	    "xyGARBAGE\r\n\r\n", 0, NULL);
	assert_int_equal(split_responses(&c, r, 3), 2);
	assert_int_equal(r[0].status, 200);
	resp_free(&r[0]);
	expect_error(&r[1], 401, SBX_E_UNAUTHORIZED);
	free(c.buf);
	/* An authenticated follower over the cap: 200, then 413, then close. */
	c = raw("PUT /v1/sandboxes/g3/files?path=/work/c HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\nContent-Length: 1\r\n\r\n"
	    "zPUT /v1/sandboxes/g3/files?path=/work/d HTTP/1.1\r\n"
	    "Authorization: " AUTH "\r\nContent-Length: 17\r\n\r\n"
	    "01234567890123456", 0, NULL);
	assert_int_equal(split_responses(&c, r, 3), 2);
	assert_int_equal(r[0].status, 200);
	resp_free(&r[0]);
	expect_error(&r[1], 413, SBX_E_TOO_LARGE);
	free(c.buf);
	assert_int_equal(calls(SBX_FAKE_WRITE), 3);
}

static int drained_flag;

static void
drained_cb(void *arg)
{
	(void)arg;
	drained_flag = 1;
}

static int
is_drained(void *arg)
{
	(void)arg;
	return drained_flag;
}

struct hang {
	struct resp r;
};

static void
hang_fn(void *arg)
{
	struct hang *h = arg;
	struct call k = { "POST", "/v1/sandboxes/d1/exec", AUTH, SBX_CT_JSON,
	    "{\"argv\":[\"sleep\",\"9\"]}", 0, { 0 } };

	do_call(&k);
	h->r = k.r;
}

static int
output_sent(void *arg)
{
	(void)arg;
	return sbx_fake_stats(F.fake)->outputs >= 1;
}

static void
test_drain_cancels_after_grace(void **state)
{
	static const char *const extra[] = { "--shutdown-grace", "50ms", NULL };
	static const struct sbx_fake_step script[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "up\n" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct hang h;
	struct job j = { hang_fn, &h, 0 };
	pthread_t t;
	char *lines[8];

	(void)state;
	start(extra);
	ensure_ok("d1");
	sbx_fake_set_exec_script(F.fake, script, 2);
	memset(&h, 0, sizeof(h));
	drained_flag = 0;
	assert_int_equal(pthread_create(&t, NULL, job_main, &j), 0);
	assert_true(loop_until(output_sent, NULL, 5000));
	broker_server_drain(F.server, drained_cb, NULL);
	assert_true(loop_until(is_drained, NULL, 5000));
	assert_true(loop_until(job_done, &j, 5000));
	pthread_join(t, NULL);
	assert_int_equal(h.r.status, 200);
	assert_int_equal(lines_of(h.r.body, lines, 8), 3);
	assert_string_equal(lines[2], "{\"type\":\"error\",\"code\":"
	    "\"shutting_down\",\"message\":\"The broker is shutting down.\"}");
	resp_free(&h.r);
	assert_int_equal(sbx_fake_stats(F.fake)->exec_cancels, 1);
}

/* ------------------------------------------------------------------ */
/* Reaper and recovery (broker_reaper.c)                               */

static void
sql_exec(const char *sql)
{
	char path[128];
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/broker.db", F.dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

static void
test_status_reads_are_not_use(void **state)
{
	struct resp r;

	(void)state;
	start(NULL);
	ensure_ok("u1");
	sql_exec("UPDATE sandboxes SET last_used_at = 1000 WHERE id = 'u1'");
	r = jreq("GET", "/v1/sandboxes/u1", NULL);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	r = jreq("GET", "/v1/sandboxes", NULL);
	resp_free(&r);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'u1' AND last_used_at = 1000"), 1);
	r = jreq("GET", "/v1/sandboxes/u1/list?path=/work", NULL);
	resp_free(&r);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'u1' AND last_used_at > 1000"), 1);
}

struct open_exec {
	struct conn c;
	int started;
};

/* Starts an exec on r2 and keeps its connection open. */
static void
open_exec_fn(void *arg)
{
	struct open_exec *o = arg;
	const char *body = "{\"argv\":[\"make\"]}";

	memset(&o->c, 0, sizeof(o->c));
	o->c.fd = cl_connect();
	cl_send(o->c.fd, "POST", "/v1/sandboxes/r2/exec", AUTH, SBX_CT_JSON,
	    body, strlen(body));
	o->started = cl_read_until(&o->c, "\"start\"");
}

struct pair {
	struct call ensure, exec;
};

static void *
call_thread(void *arg)
{
	do_call(arg);
	return NULL;
}

/* An ensure of r3 and an exec on r1, at the same time. */
static void
pair_fn(void *arg)
{
	struct pair *p = arg;
	pthread_t t;

	p->ensure = (struct call){ "PUT", "/v1/sandboxes/r3", AUTH, SBX_CT_JSON,
	    "{\"egress\":false}", 0, { 0 } };
	p->exec = (struct call){ "POST", "/v1/sandboxes/r1/exec", AUTH,
	    SBX_CT_JSON, "{\"argv\":[\"true\"]}", 0, { 0 } };
	if (pthread_create(&t, NULL, call_thread, &p->exec) != 0)
		return;
	do_call(&p->ensure);
	pthread_join(t, NULL);
}

static int
r1_stopped(void *arg)
{
	(void)arg;
	return sbx_fake_state(F.fake, "r1") == SBX_STATE_STOPPED &&
	    broker_server_inflight(F.server) == 1;  /* the open exec */
}

static void
test_reaper_stops_idle_spares_busy_and_never_loses_an_ensure(void **state)
{
	static const char *const extra[] = { "--idle-timeout", "1ms",
	    "--reap-interval", "1h", NULL };
	static const struct sbx_fake_step hang[] = {
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct broker_reaper *reaper;
	struct open_exec o;
	struct pair p;
	struct sbx_err err;
	struct resp r;
	json_t *j;

	(void)state;
	start(extra);
	ensure_ok("r1");
	ensure_ok("r2");
	ensure_ok("r3");
	sbx_fake_set_exec_script(F.fake, hang, 1);
	run_client(open_exec_fn, &o);
	assert_true(o.started);
	sql_exec("UPDATE sandboxes SET last_used_at = 1000");
	/* Slow driver: the reaper's jobs are still running when the ensure
	 * of r3 arrives, so it must queue behind them, not be lost. */
	sbx_fake_set_delay_ms(F.fake, 100);
	reaper = broker_reaper_new(F.server, &err);
	assert_non_null(reaper);
	broker_reaper_scan(reaper);
	memset(&p, 0, sizeof(p));
	run_client(pair_fn, &p);
	assert_int_equal(p.ensure.r.status, 200);
	j = body_json(&p.ensure.r);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "running");
	json_decref(j);
	resp_free(&p.ensure.r);
	/* The exec arrived while r1 was being stopped: it waited for the
	 * stop instead of racing it, and was told to ensure first. */
	expect_error(&p.exec.r, 409, SBX_E_NOT_RUNNING);
	assert_true(loop_until(r1_stopped, NULL, 5000));
	assert_int_equal(sbx_fake_state(F.fake, "r2"), SBX_STATE_RUNNING);
	assert_int_equal(sbx_fake_state(F.fake, "r3"), SBX_STATE_RUNNING);
	assert_int_equal(sbx_fake_stats(F.fake)->max_mutating_per_id, 1);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'r1' AND state = 'stopped' AND stop_reason = 'idle' AND "
	    "stopped_at > 0"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'r3' AND state = 'running' AND stop_reason = ''"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE "
	    "op = 'reap' AND id = 'r1' AND outcome = 'ok' AND reason = 'idle'"),
	    1);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE "
	    "op = 'reap' AND id = 'r2'"), 0);
	r = jreq("GET", "/v1/sandboxes/r1", NULL);
	assert_non_null(strstr(r.body, "\"stop_reason\":\"idle\""));
	resp_free(&r);
	sbx_fake_set_delay_ms(F.fake, 0);
	r = jreq("GET", "/metrics", NULL);
	assert_non_null(strstr(r.body,
	    "sbx_broker_reaped_total{action=\"stop\"} "));
	assert_null(strstr(r.body,
	    "sbx_broker_reaped_total{action=\"stop\"} 0\n"));
	resp_free(&r);
	close(o.c.fd);
	free(o.c.buf);
	assert_true(loop_until(exec_cancelled, NULL, 5000));
	broker_reaper_free(reaper);
}

static void
test_reaper_destroys_after_destroy_after(void **state)
{
	static const char *const extra[] = { "--idle-timeout", "0",
	    "--destroy-after", "1s", "--reap-interval", "1h", NULL };
	struct broker_reaper *reaper;
	struct sbx_err err;
	struct resp r;

	(void)state;
	start(extra);
	ensure_ok("k1");
	ensure_ok("k2");
	r = jreq("POST", "/v1/sandboxes/k1/stop", NULL);
	resp_free(&r);
	r = jreq("POST", "/v1/sandboxes/k2/stop", NULL);
	resp_free(&r);
	sql_exec("UPDATE sandboxes SET stopped_at = 1000, last_used_at = 1000"
	    " WHERE id = 'k1'");
	reaper = broker_reaper_new(F.server, &err);
	assert_non_null(reaper);
	broker_reaper_scan(reaper);
	assert_true(loop_until(nothing_in_flight, NULL, 5000));
	assert_int_equal(sbx_fake_state(F.fake, "k1"), SBX_STATE_ABSENT);
	assert_int_equal(sbx_fake_state(F.fake, "k2"), SBX_STATE_STOPPED);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE "
	    "op = 'reap_destroy' AND id = 'k1' AND reason = 'destroy_after'"),
	    1);
	broker_reaper_free(reaper);
}

static int recovered_flag;

static void
recovered_cb(void *arg, const struct sbx_err *err)
{
	(void)arg;
	recovered_flag = err == NULL ? 1 : -1;
}

static int
is_recovered(void *arg)
{
	(void)arg;
	return recovered_flag != 0;
}

static void
test_recovery_adopts_records_and_marks_absent(void **state)
{
	struct broker_recovery *rec;
	struct sbx_err err;
	struct resp r;

	(void)state;
	start(NULL);
	ensure_ok("a1");
	ensure_ok("a2");
	ensure_ok("a3");
	r = jreq("POST", "/v1/sandboxes/a3/stop", NULL);
	resp_free(&r);
	/* The state lost a2, still thinks a3 runs, and knows a ghost. */
	sql_exec("DELETE FROM sandboxes WHERE id = 'a2';"
	    "UPDATE sandboxes SET state = 'running', stop_reason = ''"
	    " WHERE id = 'a3';"
	    "INSERT INTO sandboxes(id, state) VALUES('ghost', 'running')");
	recovered_flag = 0;
	rec = broker_recover(F.server, recovered_cb, NULL, &err);
	assert_non_null(rec);
	assert_true(loop_until(is_recovered, NULL, 5000));
	assert_int_equal(recovered_flag, 1);
	broker_recovery_free(rec);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'a1' AND state = 'running'"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'a2' AND state = 'running' AND last_used_at > 0"), 1);
	/* a stop the state missed takes the runtime's reason (the fake's) */
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'a3' AND state = 'stopped' AND stop_reason = 'operator' AND "
	    "stopped_at > 0"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'ghost' AND state = 'absent'"), 1);
	/* The execs of the two running ones were cleaned up. */
	assert_int_equal(calls(SBX_FAKE_RECOVER), 2);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE "
	    "op = 'recover' AND reason = 'recorded' AND id = 'a2'"), 1);
	assert_int_equal(count_rows("SELECT count(*) FROM audit WHERE "
	    "op = 'recover' AND reason = 'absent' AND id = 'ghost'"), 1);
	r = jreq("GET", "/metrics", NULL);
	assert_non_null(strstr(r.body,
	    "sbx_broker_recovered_total{result=\"adopted\"} 2\n"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_recovered_total{result=\"recorded\"} 1\n"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_sandboxes{state=\"absent\"} 1\n"));
	resp_free(&r);
}

/*
 * A status or a list learns what the runtime did behind the broker's back
 * and records it, so the reaper, /metrics and the next status see it: a
 * stop the state missed (oom, init exited), a start it missed, a sandbox
 * that is gone.
 */
static void
test_status_and_list_record_what_changed_behind_the_broker(void **state)
{
	struct resp r;
	json_t *j;

	(void)state;
	start(NULL);
	ensure_ok("c1");
	ensure_ok("c2");
	r = jreq("POST", "/v1/sandboxes/c1/stop", NULL);
	resp_free(&r);
	sql_exec("UPDATE sandboxes SET state = 'running', stop_reason = '',"
	    " stopped_at = 0 WHERE id = 'c1';"
	    "UPDATE sandboxes SET state = 'stopped', stop_reason = 'idle'"
	    " WHERE id = 'c2';"
	    "INSERT INTO sandboxes(id, state) VALUES('ghost', 'running')");

	r = jreq("GET", "/v1/sandboxes/c1", NULL);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "stopped");
	json_decref(j);
	resp_free(&r);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'c1' AND state = 'stopped' AND stop_reason = 'operator' AND "
	    "stopped_at > 0"), 1);

	r = jreq("GET", "/v1/sandboxes", NULL);
	assert_int_equal(r.status, 200);
	resp_free(&r);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'c2' AND state = 'running'"), 1);

	r = jreq("GET", "/v1/sandboxes/ghost", NULL);
	j = body_json(&r);
	assert_string_equal(json_string_value(json_object_get(j, "state")),
	    "absent");
	json_decref(j);
	resp_free(&r);
	assert_int_equal(count_rows("SELECT count(*) FROM sandboxes WHERE "
	    "id = 'ghost' AND state = 'absent'"), 1);

	r = jreq("GET", "/metrics", NULL);
	assert_non_null(strstr(r.body,
	    "sbx_broker_sandboxes{state=\"running\"} 1\n"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_sandboxes{state=\"stopped\"} 1\n"));
	assert_non_null(strstr(r.body,
	    "sbx_broker_sandboxes{state=\"absent\"} 1\n"));
	resp_free(&r);
}

static void
test_recovery_reports_an_unreachable_runtime(void **state)
{
	struct broker_recovery *rec;
	struct sbx_err err;

	(void)state;
	start(NULL);
	sbx_fake_fail_next(F.fake, SBX_FAKE_LIST_SANDBOXES,
	    SBX_E_RUNTIME_UNAVAILABLE, 0);
	recovered_flag = 0;
	rec = broker_recover(F.server, recovered_cb, NULL, &err);
	assert_non_null(rec);
	assert_true(loop_until(is_recovered, NULL, 5000));
	assert_int_equal(recovered_flag, -1);
	broker_recovery_free(rec);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_every_route_requires_the_token, setup, teardown),
		cmocka_unit_test_setup_teardown(test_health_reports_degraded_runtime, setup, teardown),
		cmocka_unit_test_setup_teardown(test_routing_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ensure_body_is_parsed_strictly, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_body_is_parsed_strictly, setup, teardown),
		cmocka_unit_test_setup_teardown(test_paths_are_checked_before_the_driver, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ensure_is_serialised_under_race, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ensure_status_stop_destroy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_streams_ndjson_as_scripted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_errors_before_and_after_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_disconnect_cancels_exec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_gone_before_start_cancels_exec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_client_pauses_the_producer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_limit_per_sandbox, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_sandboxes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_files_roundtrip_and_size_caps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_page_in_slices_is_whole_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_audit_rows_and_last_used, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics_count_requests, setup, teardown),
		cmocka_unit_test_setup_teardown(test_canary_token_never_leaks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drain_cancels_after_grace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_reads_are_not_use, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reaper_stops_idle_spares_busy_and_never_loses_an_ensure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reaper_destroys_after_destroy_after, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovery_adopts_records_and_marks_absent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_and_list_record_what_changed_behind_the_broker, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovery_reports_an_unreachable_runtime, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unauthenticated_big_body_gets_401_unread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_authenticated_body_over_cap_gets_413_unread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_content_length_smaller_than_sent, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
