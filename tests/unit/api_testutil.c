/* api_testutil.c - the sandbox-api unit tests' shared fixture: a server on 127.0.0.1:0 and an in-loop HTTP client (api_testutil.h). */
#include "api_testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../driver_fake.h"

/* One server per test, on its own event base and state dir. */
struct tu_fixture T;

void
tu_setup_base(void)
{
	struct sbx_err err;

	memset(&T, 0, sizeof(T));
	snprintf(T.logpath, sizeof(T.logpath), "/tmp/sbx-api-test-log.XXXXXX");
	T.logfd = mkstemp(T.logpath);
	assert_true(T.logfd >= 0);
	sbx_log_init("test", T.logfd, SBX_LOG_DEBUG);
	snprintf(T.dir, sizeof(T.dir), "/tmp/sbx-api-test.XXXXXX");
	assert_non_null(mkdtemp(T.dir));
	assert_int_equal(api_config_defaults(&T.cfg, &err), 0);
	assert_int_equal(sbx_config_set(api_config_keys, &T.cfg, "listen",
	    "127.0.0.1:0", &err), 0);
	assert_int_equal(sbx_config_set(api_config_keys, &T.cfg, "state_dir",
	    T.dir, &err), 0);
	T.base = event_base_new();
	assert_non_null(T.base);
}

/* Sets one config key (before tu_start). */
void
tu_set(const char *key, const char *value)
{
	struct sbx_err err;

	assert_int_equal(sbx_config_set(api_config_keys, &T.cfg, key, value,
	    &err), 0);
}

void
tu_start(struct sbx_driver *drv)
{
	struct sbx_err err;

	sbx_err_clear(&err);
	T.drv = drv;
	T.srv = api_server_new(T.base, &T.cfg, drv, &err);
	if (T.srv == NULL)
		fail_msg("api_server_new: %s", err.message);
	T.port = api_server_port(T.srv);
	assert_true(T.port > 0);
}

void
tu_teardown(void)
{
	char cmd[128];

	api_server_free(T.srv);
	sbx_driver_free(T.drv);
	if (T.base != NULL)
		event_base_free(T.base);
	sbx_config_free(api_config_keys, &T.cfg);
	sbx_log_init("test", 2, SBX_LOG_WARN);
	sbx_log_clear_secrets();
	if (getenv("TU_DEBUG") != NULL) {
		snprintf(cmd, sizeof(cmd), "cat %s >&2", T.logpath);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot show the log\n");
	}
	close(T.logfd);
	unlink(T.logpath);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", T.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", T.dir);
}

/* A principal with a fresh key (written to key, >= 44 bytes). */
void
tu_principal(const char *name, enum api_role role, char *key)
{
	struct api_store *st;
	struct sbx_err err;

	st = api_store_open(T.dir, &err);
	assert_non_null(st);
	assert_int_equal(api_store_principal_create(st, name, role, key,
	    SBX_TOKEN_GEN_LEN + 1, &err), 0);
	api_store_close(st);
}

/* Runs the loop until cond(arg) or timeout_ms; returns cond(arg). */
int
tu_loop_until(int (*cond)(void *), void *arg, int timeout_ms)
{
	struct timeval tick = { 0, 5 * 1000 };
	int waited = 0;

	while (!cond(arg) && waited < timeout_ms) {
		event_base_loopexit(T.base, &tick);
		event_base_dispatch(T.base);
		waited += 5;
	}
	return cond(arg);
}

/* Runs the loop for ms milliseconds. */
void
tu_spin(int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(T.base, &tv);
	event_base_dispatch(T.base);
}

/* ------------------------------------------------------------------ */
/* In-loop client                                                      */


static void
tu_on_response(void *arg, struct sbx_http_req *req, int status)
{
	struct tu_res *r = arg;
	const char *v;

	r->status = status;
	if (r->pause_at_headers)
		sbx_http_req_pause(req);
	if ((v = sbx_http_req_header(req, "Retry-After")) != NULL)
		snprintf(r->retry_after, sizeof(r->retry_after), "%s", v);
	if ((v = sbx_http_req_header(req, "Content-Type")) != NULL)
		snprintf(r->ctype, sizeof(r->ctype), "%s", v);
	if ((v = sbx_http_req_header(req, "Cache-Control")) != NULL)
		snprintf(r->cache, sizeof(r->cache), "%s", v);
	if ((v = sbx_http_req_header(req, "X-Accel-Buffering")) != NULL)
		snprintf(r->accel, sizeof(r->accel), "%s", v);
}

static void
tu_on_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct tu_res *r = arg;
	size_t n;

	evbuffer_add(r->body, buf, len);
	if (r->stop_when != NULL) {
		n = evbuffer_get_length(r->body);
		if (memmem(evbuffer_pullup(r->body, -1), n, r->stop_when,
		    strlen(r->stop_when)) != NULL) {
			sbx_http_req_cancel(req);
			r->req = NULL;
			r->stopped = 1;
			r->done = 1;
		}
	}
}

static void
tu_on_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct tu_res *r = arg;

	(void)req;
	r->req = NULL;
	r->done = 1;
	if (err != NULL) {
		r->failed = 1;
		r->err = *err;
	}
}

int
tu_is_done(void *arg)
{
	return ((struct tu_res *)arg)->done;
}

/* Starts a request (key NULL: no Authorization header). */
void
tu_start_req(struct tu_res *r, const char *method, const char *path,
    const char *key, const void *body, size_t blen)
{
	struct sbx_http_request hr;
	struct sbx_http_cbs cbs;
	struct sbx_err err;
	char addr[64], auth[128];
	const char *hdrs[2] = { NULL, NULL };

	if (r->body == NULL)
		r->body = evbuffer_new();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", T.port);
	memset(&hr, 0, sizeof(hr));
	hr.method = method;
	hr.path = path;
	if (key != NULL) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
		hdrs[0] = auth;
		hr.headers = hdrs;
	}
	hr.body = body;
	hr.body_len = blen;
	hr.content_type = body != NULL ? "application/json" : NULL;
	memset(&cbs, 0, sizeof(cbs));
	cbs.response = tu_on_response;
	cbs.body = tu_on_body;
	cbs.done = tu_on_done;
	cbs.arg = r;
	r->req = sbx_http_request(T.base, addr, &hr, NULL, &cbs, &err);
	assert_non_null(r->req);
}

void tu_res_free(struct tu_res *r);

/* Sends a request and waits (up to 5 s) for its end. body is a C string or NULL. */
int
tu_req(struct tu_res *r, const char *method, const char *path,
    const char *key, const char *body)
{
	tu_res_free(r);
	tu_start_req(r, method, path, key, body, body != NULL ? strlen(body) : 0);
	assert_true(tu_loop_until(tu_is_done, r, 5000));
	return r->status;
}

/* The body as a NUL-terminated string (owned by r). */
const char *
tu_text(struct tu_res *r)
{
	evbuffer_add(r->body, "", 1);
	return (const char *)evbuffer_pullup(r->body, -1);
}

/* error.code of a JSON error body, "" if none. */
const char *
tu_code(struct tu_res *r)
{
	static char code[64];
	json_t *root = json_loads(tu_text(r), 0, NULL);
	json_t *c = json_object_get(json_object_get(root, "error"), "code");

	snprintf(code, sizeof(code), "%s", json_is_string(c) ?
	    json_string_value(c) : "");
	json_decref(root);
	return code;
}

void
tu_res_free(struct tu_res *r)
{
	if (r->req != NULL)
		sbx_http_req_cancel(r->req);
	if (r->body != NULL)
		evbuffer_free(r->body);
	memset(r, 0, sizeof(*r));
}

/* Contents of a whole file (malloc'd, *len set), NULL if absent. */
char *
tu_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	*len = 0;
	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	*len = fread(buf, 1, (size_t)n, f);
	buf[*len] = '\0';
	fclose(f);
	return buf;
}


int
tu_up(void **state)
{
	(void)state;
	tu_setup_base();
	return 0;
}

int
tu_down(void **state)
{
	(void)state;
	tu_teardown();
	return 0;
}

void
tu_start_fake(char *ka, char *kb, char *kop)
{
	struct sbx_driver *fake = sbx_fake_driver_new(T.base);

	assert_non_null(fake);
	tu_start(fake);
	tu_principal("alice", API_ROLE_PLAYER, ka);
	tu_principal("bob", API_ROLE_PLAYER, kb);
	tu_principal("op1", API_ROLE_OPERATOR, kop);
}

void
tu_npc(const char *key, const char *name)
{
	struct tu_res r = { 0 };
	char body[128], path[128];

	snprintf(body, sizeof(body), "{\"name\":\"%s\"}", name);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", key, body), 201);
	snprintf(path, sizeof(path), "/api/v1/npcs/%s/sandbox", name);
	assert_int_equal(tu_req(&r, "PUT", path, key, NULL), 200);
	tu_res_free(&r);
}

int
tu_raw_connect(void)
{
	struct sockaddr_in sin;
	int fd;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)T.port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	/* Let the server accept it before anything else happens. */
	tu_spin(50);
	return fd;
}
