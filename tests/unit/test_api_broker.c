/* test_api_broker.c - sandbox-api through its broker-client driver against a stub broker: golden SSE, errors, cancel, token. */
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <dirent.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "api_testutil.h"

#include "driver_broker.h"
#include "sbx_sse.h"

#define TOKEN "canary-broker-token-5e1f0a7b3c9d"

/* ------------------------------------------------------------------ */
/* A stub broker on 127.0.0.1:0                                        */

static struct {
	struct evhttp *http;
	int port;
	char *ndjson;              /* exec answer (owned) */
	size_t ndjson_len;
	int hang;                  /* exec: send the lines, never end */
	int fail_status;           /* != 0: every answer is this error */
	char fail_code[48];
	char last_method[8];
	char last_uri[512];
	char last_body[4096];
	size_t last_body_len;
	int bad_auth;
	int closed;                /* an exec connection was closed by the api */
	struct evhttp_request *held;
} B;

static void
stub_closed(struct evhttp_connection *conn, void *arg)
{
	(void)conn;
	(void)arg;
	B.closed++;
	if (B.held != NULL)
		evhttp_send_reply_end(B.held);   /* frees the detached request */
	B.held = NULL;
}

static void
stub_json(struct evhttp_request *req, int status, const char *json)
{
	struct evbuffer *out = evbuffer_new();

	evbuffer_add(out, json, strlen(json));
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "application/json");
	evhttp_send_reply(req, status, "X", out);
	evbuffer_free(out);
}

static void
stub_cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	const char *auth, *uri = evhttp_request_get_uri(req);
	struct evbuffer *out;
	char buf[512];
	size_t off, n;
	int m = evhttp_request_get_command(req);

	(void)arg;
	snprintf(B.last_method, sizeof(B.last_method), "%s",
	    m == EVHTTP_REQ_GET ? "GET" : m == EVHTTP_REQ_PUT ? "PUT" :
	    m == EVHTTP_REQ_POST ? "POST" : m == EVHTTP_REQ_DELETE ? "DELETE" :
	    "?");
	snprintf(B.last_uri, sizeof(B.last_uri), "%s", uri);
	B.last_body_len = evbuffer_get_length(in);
	n = B.last_body_len < sizeof(B.last_body) - 1 ? B.last_body_len :
	    sizeof(B.last_body) - 1;
	evbuffer_copyout(in, B.last_body, n);
	B.last_body[n] = '\0';
	auth = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Authorization");
	if (auth == NULL || strcmp(auth, "Bearer " TOKEN) != 0) {
		B.bad_auth++;
		stub_json(req, 401, "{\"error\":{\"code\":\"unauthorized\","
		    "\"message\":\"unauthorized\"}}");
		return;
	}
	if (B.fail_status != 0) {
		snprintf(buf, sizeof(buf), "{\"error\":{\"code\":\"%s\","
		    "\"message\":\"The broker says %s.\"}}", B.fail_code,
		    B.fail_code);
		stub_json(req, B.fail_status, buf);
		return;
	}
	if (strstr(uri, "/exec") != NULL) {
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "Content-Type", "application/x-ndjson");
		evhttp_send_reply_start(req, 200, "OK");
		out = evbuffer_new();
		/* Small pieces: lines arrive split anywhere. */
		for (off = 0; off < B.ndjson_len; off += 7) {
			n = B.ndjson_len - off < 7 ? B.ndjson_len - off : 7;
			evbuffer_add(out, B.ndjson + off, n);
			evhttp_send_reply_chunk(req, out);
		}
		evbuffer_free(out);
		if (B.hang) {
			B.held = req;
			evhttp_connection_set_closecb(
			    evhttp_request_get_connection(req), stub_closed, NULL);
			return;
		}
		evhttp_send_reply_end(req);
		return;
	}
	if (strstr(uri, "/files") != NULL && m == EVHTTP_REQ_GET) {
		out = evbuffer_new();
		evbuffer_add(out, "file\0bytes", 10);
		evhttp_send_reply(req, 200, "OK", out);
		evbuffer_free(out);
		return;
	}
	if (strstr(uri, "/files") != NULL) {
		stub_json(req, 200, "{\"path\":\"/work/a\",\"size\":3}");
		return;
	}
	if (strstr(uri, "/list") != NULL) {
		stub_json(req, 200, "[{\"name\":\"a.txt\",\"type\":\"file\","
		    "\"size\":3,\"mode\":420,\"mtime\":1764507600},"
		    "{\"name_b64\":\"/w==\",\"type\":\"other\",\"size\":0,"
		    "\"mode\":384,\"mtime\":1}]");
		return;
	}
	if (strcmp(uri, "/v1/sandboxes") == 0) {
		stub_json(req, 200, "[{\"id\":\"npc-a\",\"state\":\"running\","
		    "\"image\":\"img\",\"egress\":true,\"created_at\":5,"
		    "\"last_used_at\":null,\"stop_reason\":null},"
		    "{\"id\":\"npc-b\",\"state\":\"stopped\",\"image\":\"img\","
		    "\"egress\":false,\"created_at\":6,\"last_used_at\":7,"
		    "\"stop_reason\":\"idle\"}]");
		return;
	}
	if (strcmp(uri, "/v1/health") == 0) {
		stub_json(req, 200, "{\"status\":\"degraded\",\"reason\":"
		    "\"helper missing\",\"version\":\"0.1.0\",\"runtime\":"
		    "\"Podman Engine 4.3.1\",\"api_version\":\"1.41\"}");
		return;
	}
	snprintf(buf, sizeof(buf), "{\"id\":\"npc-alpha\",\"state\":\"%s\","
	    "\"image\":\"img\",\"egress\":%s,\"created_at\":1,"
	    "\"last_used_at\":2,\"stop_reason\":null}",
	    m == EVHTTP_REQ_DELETE ? "absent" : "running",
	    strstr(B.last_body, "\"egress\":true") != NULL ? "true" : "false");
	stub_json(req, 200, buf);
}

static void
stub_start(void)
{
	struct evhttp_bound_socket *bs;
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);

	memset(&B, 0, sizeof(B));
	B.http = evhttp_new(T.base);
	assert_non_null(B.http);
	evhttp_set_gencb(B.http, stub_cb, NULL);
	bs = evhttp_bind_socket_with_handle(B.http, "127.0.0.1", 0);
	assert_non_null(bs);
	assert_int_equal(getsockname(evhttp_bound_socket_get_fd(bs),
	    (struct sockaddr *)&sin, &sl), 0);
	B.port = ntohs(sin.sin_port);
}

static char KA[64], KOP[64];

/* The api with a broker driver to address (NULL: the stub). */
static void
start_api(const char *address)
{
	struct sbx_broker_config bc;
	struct sbx_driver *d;
	struct sbx_err err;
	char addr[64];
	struct tu_res r = { 0 };

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", B.port);
	memset(&bc, 0, sizeof(bc));
	bc.address = address != NULL ? address : addr;
	bc.token = TOKEN;
	bc.token_len = strlen(TOKEN);
	bc.header_timeout_ms = 2000;
	sbx_log_add_secret(TOKEN);
	d = sbx_broker_driver_new(T.base, &bc, &err);
	assert_non_null(d);
	tu_start(d);
	tu_principal("alice", API_ROLE_PLAYER, KA);
	tu_principal("op1", API_ROLE_OPERATOR, KOP);
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs", KA,
	    "{\"name\":\"alpha\"}"), 201);
	tu_res_free(&r);
}

static int
setup(void **state)
{
	(void)state;
	tu_setup_base();
	stub_start();
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	/* The api first: it closes its broker connections. */
	api_server_free(T.srv);
	T.srv = NULL;
	sbx_driver_free(T.drv);
	T.drv = NULL;
	evhttp_free(B.http);
	free(B.ndjson);
	tu_teardown();
	return 0;
}

static const char *
golden_dir(void)
{
	const char *d = getenv("SBX_GOLDEN_DIR");

	return d != NULL && *d != '\0' ? d : "proto/golden";
}

static int64_t golden_ts;

static int64_t
golden_clock(void)
{
	return golden_ts;
}

/*
 * What the api sends for an NDJSON transcript: each line mapped with ids
 * from 1, except an exit directly followed by an error (the driver vtable has
 * one terminal callback: the error wins).
 */
static char *
expected_sse(const char *nd, size_t len)
{
	struct evbuffer *out = evbuffer_new();
	struct sbx_err err;
	const char *p = nd, *e, *next;
	uint64_t id = 1;
	char *res;
	size_t n;

	while (p < nd + len) {
		e = memchr(p, '\n', (size_t)(nd + len - p));
		assert_non_null(e);
		next = e + 1;
		if (strncmp(p, "{\"type\":\"exit\"", 14) == 0 && next < nd + len &&
		    strncmp(next, "{\"type\":\"error\"", 15) == 0) {
			p = next;
			continue;
		}
		assert_int_equal(sbx_sse_from_ndjson(out, id++, p,
		    (size_t)(e - p), &err), 0);
		p = next;
	}
	n = evbuffer_get_length(out);
	res = malloc(n + 1);
	evbuffer_remove(out, res, n);
	res[n] = '\0';
	evbuffer_free(out);
	return res;
}

static void
test_sse_of_every_golden_transcript_through_the_broker_driver(void **state)
{
	struct tu_res r = { 0 };
	struct dirent *de;
	DIR *dir;
	char path[512], *sse, *want;
	const char *ts;
	size_t len, slen, nlen;
	int count = 0, exact = 0;

	(void)state;
	start_api(NULL);
	api_server_set_clock(T.srv, golden_clock);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	dir = opendir(golden_dir());
	if (dir == NULL)
		fail_msg("no golden dir %s (run from the repository root or set "
		    "SBX_GOLDEN_DIR)", golden_dir());
	while ((de = readdir(dir)) != NULL) {
		nlen = strlen(de->d_name);
		if (nlen < 7 || strcmp(de->d_name + nlen - 7, ".ndjson") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", golden_dir(), de->d_name);
		free(B.ndjson);
		B.ndjson = tu_slurp(path, &B.ndjson_len);
		assert_non_null(B.ndjson);
		ts = strstr(B.ndjson, "\"ts\":");
		assert_non_null(ts);
		golden_ts = strtoll(ts + 5, NULL, 10);
		snprintf(path, sizeof(path), "%s/%.*s.sse", golden_dir(),
		    (int)(nlen - 7), de->d_name);
		sse = tu_slurp(path, &slen);
		assert_non_null(sse);
		assert_int_equal(tu_req(&r, "POST",
		    "/api/v1/npcs/alpha/sandbox/exec", KA,
		    "{\"argv\":[\"sh\",\"-c\",\"x\"]}"), 200);
		assert_string_equal(r.ctype, "text/event-stream");
		want = expected_sse(B.ndjson, B.ndjson_len);
		if (strcmp(want, sse) == 0) {
			/* Byte for byte the golden .sse file. */
			exact++;
			assert_int_equal(evbuffer_get_length(r.body), slen);
		}
		if (strcmp(tu_text(&r), want) != 0)
			fail_msg("%s: SSE differs:\n%s\n--- want ---\n%s",
			    de->d_name, tu_text(&r), want);
		free(want);
		free(sse);
		count++;
	}
	closedir(dir);
	assert_true(count >= 7);
	assert_true(exact >= count - 1);
	assert_string_equal(B.last_method, "POST");
	assert_string_equal(B.last_uri, "/v1/sandboxes/npc-alpha/exec");
	assert_string_equal(B.last_body, "{\"argv\":[\"sh\",\"-c\",\"x\"]}");
	(void)len;
	tu_res_free(&r);
}

static void
test_broker_error_bodies_map_to_the_same_codes(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	start_api(NULL);
	B.fail_status = 409;
	snprintf(B.fail_code, sizeof(B.fail_code), "not_running");
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"true\"]}"), 409);
	assert_string_equal(tu_code(&r), "not_running");
	assert_non_null(strstr(tu_text(&r), "The broker says not_running."));
	B.fail_status = 404;
	snprintf(B.fail_code, sizeof(B.fail_code), "not_found");
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/x", KA, NULL), 404);
	assert_string_equal(tu_code(&r), "not_found");
	B.fail_status = 400;
	snprintf(B.fail_code, sizeof(B.fail_code), "image_not_allowed");
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    "{\"image\":\"evil\"}"), 400);
	assert_string_equal(tu_code(&r), "image_not_allowed");
	assert_non_null(strstr(B.last_body, "\"image\":\"evil\""));
	B.fail_status = 503;
	snprintf(B.fail_code, sizeof(B.fail_code), "runtime_unavailable");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 503);
	assert_string_equal(tu_code(&r), "runtime_unavailable");
	/* The broker refusing the api's token is not the player's 401. */
	B.fail_status = 401;
	snprintf(B.fail_code, sizeof(B.fail_code), "unauthorized");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 503);
	assert_string_equal(tu_code(&r), "broker_unavailable");
	tu_res_free(&r);
}

static void
test_unreachable_broker_is_503_and_the_api_stays_up(void **state)
{
	struct tu_res r = { 0 };
	char addr[128];

	(void)state;
	snprintf(addr, sizeof(addr), "unix:%s/no-broker.sock", T.dir);
	start_api(addr);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 503);
	assert_string_equal(tu_code(&r), "broker_unavailable");
	assert_non_null(strstr(tu_text(&r), "Sandbox broker unavailable"));
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"true\"]}"), 503);
	assert_string_equal(tu_code(&r), "broker_unavailable");
	/* Still serving what needs no broker. */
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL), 200);
	assert_int_equal(tu_req(&r, "GET", "/healthz", NULL, NULL), 200);
	tu_res_free(&r);
}

static int
stub_saw_close(void *arg)
{
	(void)arg;
	return B.closed > 0;
}

static int
got_stdout(void *arg)
{
	struct tu_res *r = arg;
	size_t n = evbuffer_get_length(r->body);

	return n > 0 && memmem(evbuffer_pullup(r->body, -1), n, "event: stdout", 13) !=
	    NULL;
}

static void
test_client_disconnect_closes_the_broker_connection(void **state)
{
	static const char lines[] =
	    "{\"type\":\"start\",\"exec_id\":\"ex-9\",\"ts\":1}\n"
	    "{\"type\":\"stdout\",\"data\":\"tick\\n\"}\n";
	struct tu_res r = { 0 };
	const char *body = "{\"argv\":[\"sleep\",\"1000\"]}";

	(void)state;
	start_api(NULL);
	B.ndjson = strdup(lines);
	B.ndjson_len = strlen(lines);
	B.hang = 1;
	tu_start_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/exec", KA, body,
	    strlen(body));
	assert_true(tu_loop_until(got_stdout, &r, 5000));
	/* Streaming, and the broker connection stays open meanwhile. */
	tu_spin(100);
	assert_int_equal(B.closed, 0);
	assert_false(r.done);
	sbx_http_req_cancel(r.req);
	r.req = NULL;
	/* The player hung up: the api cancels, the broker sees its
	 * connection close (and would kill the process tree). */
	assert_true(tu_loop_until(stub_saw_close, NULL, 5000));
	tu_res_free(&r);
}

static void
test_files_list_and_egress_reach_the_broker(void **state)
{
	struct tu_res r = { 0 };
	const char *t;

	(void)state;
	start_api(NULL);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_string_equal(B.last_body, "{\"egress\":false}");
	assert_int_equal(tu_req(&r, "PUT",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/a%20b&mode=0640", KA,
	    "abc"), 200);
	assert_string_equal(B.last_uri,
	    "/v1/sandboxes/npc-alpha/files?path=/work/a%20b&mode=0640");
	assert_string_equal(B.last_body, "abc");
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/files?path=/work/a", KA, NULL), 200);
	assert_int_equal(evbuffer_get_length(r.body), 10);
	assert_memory_equal(evbuffer_pullup(r.body, -1), "file\0bytes", 10);
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/alpha/sandbox/list?path=/work", KA, NULL), 200);
	/* the page object is asked for (adr/0013) */
	assert_string_equal(B.last_uri,
	    "/v1/sandboxes/npc-alpha/list?path=/work&cursor=");
	t = tu_text(&r);
	assert_non_null(strstr(t, "\"name\":\"a.txt\""));
	assert_non_null(strstr(t, "\"name_b64\":\"/w==\""));
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/egress", KOP,
	    "{\"enabled\":true}"), 200);
	assert_string_equal(B.last_method, "PUT");
	assert_string_equal(B.last_uri, "/v1/sandboxes/npc-alpha");
	assert_non_null(strstr(B.last_body, "\"egress\":true"));
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/alpha/sandbox/stop",
	    KA, NULL), 200);
	assert_string_equal(B.last_uri, "/v1/sandboxes/npc-alpha/stop");
	assert_int_equal(tu_req(&r, "DELETE", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_string_equal(B.last_method, "DELETE");
	assert_int_equal(B.bad_auth, 0);
	tu_res_free(&r);
}

static void
test_broker_token_never_appears_in_logs_or_answers(void **state)
{
	struct tu_res r = { 0 };
	char *log;
	size_t len;

	(void)state;
	start_api(NULL);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	assert_null(strstr(tu_text(&r), TOKEN));
	B.fail_status = 401;
	snprintf(B.fail_code, sizeof(B.fail_code), "unauthorized");
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 503);
	assert_null(strstr(tu_text(&r), TOKEN));
	assert_int_equal(B.bad_auth, 0);
	log = tu_slurp(T.logpath, &len);
	assert_non_null(log);
	assert_non_null(strstr(log, "refused our token"));
	assert_null(memmem(log, len, TOKEN, strlen(TOKEN)));
	assert_null(memmem(log, len, "5e1f0a7b", 8));
	free(log);
	tu_res_free(&r);
}

static void
test_broker_token_file_rules(void **state)
{
	struct sbx_err err;
	char path[128], *tok = NULL;
	size_t len = 0;
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/token", T.dir);
	f = fopen(path, "w");
	fprintf(f, "%s\n", TOKEN);
	fclose(f);
	chmod(path, 0644);
	assert_int_equal(sbx_broker_token_read(path, NULL, &tok, &len, &err), -1);
	assert_string_equal(err.code, "bad_token");
	assert_non_null(strstr(err.message, "0600"));
	assert_null(strstr(err.message, TOKEN));
	chmod(path, 0600);
	assert_int_equal(sbx_broker_token_read(path, NULL, &tok, &len, &err), 0);
	assert_string_equal(tok, TOKEN);
	assert_int_equal(len, strlen(TOKEN));
	sbx_broker_token_free(tok);
	assert_int_equal(sbx_broker_token_read(NULL, "short", &tok, &len, &err),
	    -1);
	assert_null(strstr(err.message, "short"));
	assert_int_equal(sbx_broker_token_read(NULL, NULL, &tok, &len, &err), -1);
	assert_non_null(strstr(err.message, "SBX_BROKER_TOKEN"));
	assert_int_equal(sbx_broker_token_read(NULL, TOKEN, &tok, &len, &err), 0);
	sbx_broker_token_free(tok);
}

static struct {
	int calls;
	size_t n;
	struct sbx_status st[2];
	struct sbx_health h;
	struct sbx_err err;
	int has_err;
} D;

static void
d_sandboxes(void *arg, const struct sbx_err *err, const struct sbx_status *sts,
    size_t n)
{
	(void)arg;
	D.calls++;
	D.has_err = err != NULL;
	D.n = n;
	if (n >= 2)
		memcpy(D.st, sts, sizeof(D.st));
}

static void
d_health(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	(void)arg;
	D.calls++;
	D.has_err = err != NULL;
	if (h != NULL)
		D.h = *h;
}

static void
d_status(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	(void)arg;
	(void)st;
	D.calls++;
	if (err != NULL)
		D.err = *err;
}

static int
d_called(void *arg)
{
	return D.calls >= *(int *)arg;
}

static void
test_driver_lists_sandboxes_health_and_cancels_quietly(void **state)
{
	struct sbx_driver *d;
	struct sbx_err err;
	struct sbx_op *op;
	int want = 1;

	(void)state;
	start_api(NULL);
	d = T.drv;
	memset(&D, 0, sizeof(D));
	assert_non_null(d->ops->list_sandboxes(d, d_sandboxes, NULL, &err));
	assert_true(tu_loop_until(d_called, &want, 3000));
	assert_false(D.has_err);
	assert_int_equal(D.n, 2);
	assert_string_equal(D.st[0].id, "npc-a");
	assert_int_equal(D.st[0].state, SBX_STATE_RUNNING);
	assert_int_equal(D.st[0].egress, 1);
	assert_int_equal(D.st[0].last_used_at_ms, 0);
	assert_int_equal(D.st[1].state, SBX_STATE_STOPPED);
	assert_string_equal(D.st[1].stop_reason, "idle");
	want = 2;
	assert_non_null(d->ops->health(d, d_health, NULL, &err));
	assert_true(tu_loop_until(d_called, &want, 3000));
	assert_false(D.h.ok);
	assert_string_equal(D.h.status, "degraded");
	assert_string_equal(D.h.reason, "helper missing");
	assert_string_equal(D.h.api_version, "1.41");
	/* A bad id is refused at once, without a callback. */
	assert_null(d->ops->status(d, "Bad/Id", d_status, NULL, &err));
	assert_string_equal(err.code, "invalid_id");
	assert_null(d->ops->read(d, "npc-a", "/etc/passwd", &(struct sbx_sink){
	    0 }, &err));
	assert_string_equal(err.code, "path_outside_work");
	/* Cancelled: no callback ever. */
	op = d->ops->status(d, "npc-a", d_status, NULL, &err);
	assert_non_null(op);
	sbx_op_cancel(op);
	tu_spin(200);
	assert_int_equal(D.calls, 2);
}

/*
 * sbx_driver.h: an op may be cancelled at any time before its terminal
 * callback, also from inside one of its own sink's callbacks. The op must
 * then be gone quietly: no later callback, no use of freed memory (the
 * sanitizer build runs this too).
 */
static struct {
	struct sbx_op *op;
	int cancel_in;        /* 1: in start, 2: in the first output */
	int start, output, end;
} C;

static void
c_start(void *arg, const char *exec_id)
{
	(void)arg;
	(void)exec_id;
	if (C.start++ == 0 && C.cancel_in == 1)
		sbx_op_cancel(C.op);
}

static void
c_output(void *arg, int stream, const unsigned char *p, size_t n)
{
	(void)arg;
	(void)stream;
	(void)p;
	(void)n;
	if (C.output++ == 0 && C.cancel_in == 2)
		sbx_op_cancel(C.op);
}

static void
c_exit(void *arg, const struct sbx_exit *ex)
{
	(void)arg;
	(void)ex;
	C.end++;
}

static void
c_error(void *arg, const struct sbx_err *e)
{
	(void)arg;
	(void)e;
	C.end++;
}

static int
c_started(void *arg)
{
	(void)arg;
	return C.start > 0;
}

static void
test_a_sink_that_cancels_from_its_own_callback_hears_nothing_more(
    void **state)
{
	static const char nd[] = "{\"type\":\"start\",\"exec_id\":\"e1\","
	    "\"ts\":1}\n{\"type\":\"stdout\",\"data\":\"a\"}\n"
	    "{\"type\":\"stdout\",\"data\":\"b\"}\n{\"type\":\"exit\","
	    "\"code\":0,\"signal\":null,\"duration_ms\":1,"
	    "\"truncated\":false}\n";
	struct sbx_sink sink = { c_start, c_output, c_exit, c_error, NULL, NULL };
	struct sbx_exec_req req;
	const char *const argv[] = { "true", NULL };
	struct sbx_driver *d;
	struct sbx_err err;

	(void)state;
	start_api(NULL);
	d = T.drv;
	/* read: cancelled in start, the file's bytes never reach the sink */
	memset(&C, 0, sizeof(C));
	C.cancel_in = 1;
	C.op = d->ops->read(d, "npc-a", "/work/a", &sink, &err);
	assert_non_null(C.op);
	assert_true(tu_loop_until(c_started, NULL, 3000));
	tu_spin(200);
	assert_int_equal(C.start, 1);
	assert_int_equal(C.output, 0);
	assert_int_equal(C.end, 0);
	/* exec: cancelled at its first output line, the second never comes */
	free(B.ndjson);
	B.ndjson = strdup(nd);
	B.ndjson_len = strlen(nd);
	memset(&C, 0, sizeof(C));
	memset(&req, 0, sizeof(req));
	req.argv = argv;
	C.cancel_in = 2;
	C.op = d->ops->exec(d, "npc-a", &req, &sink, &err);
	assert_non_null(C.op);
	assert_true(tu_loop_until(c_started, NULL, 3000));
	tu_spin(200);
	assert_int_equal(C.output, 1);
	assert_int_equal(C.end, 0);
}

/* Runs one exec through the stub with nd as the broker's answer; r gets the SSE. */
static void
exec_with(struct tu_res *r, const char *nd)
{
	free(B.ndjson);
	B.ndjson = strdup(nd);
	B.ndjson_len = strlen(nd);
	tu_res_free(r);
	assert_int_equal(tu_req(r, "POST", "/api/v1/npcs/alpha/sandbox/exec",
	    KA, "{\"argv\":[\"sh\",\"-c\",\"x\"]}"), 200);
	assert_string_equal(r->ctype, "text/event-stream");
}

/*
 * adr/0028: the api puts the broker's output line into the SSE event as it
 * came. A broker may spell a piece either way (an older one sends NULs as
 * \u0000 text); decoding and re-encoding would have turned the first into
 * data_b64 and the second into data.
 */
static void
test_output_lines_are_forwarded_as_received(void **state)
{
	struct tu_res r = { 0 };

	(void)state;
	start_api(NULL);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	exec_with(&r, "{\"type\":\"start\",\"exec_id\":\"e1\",\"ts\":1}\n"
	    "{\"type\":\"stdout\",\"data\":\"\\u0000\\u0000\"}\n"
	    "{\"type\":\"stderr\",\"data_b64\":\"aGk=\"}\n"
	    "{\"type\":\"exit\",\"code\":0,\"signal\":null,\"duration_ms\":1,"
	    "\"truncated\":false}\n");
	assert_non_null(strstr(tu_text(&r), "id: 2\nevent: stdout\n"
	    "data: {\"data\":\"\\u0000\\u0000\"}\n\n"
	    "id: 3\nevent: stderr\ndata: {\"data_b64\":\"aGk=\"}\n\n"
	    "id: 4\nevent: exit\n"));
	tu_res_free(&r);
}

/*
 * Untrusted input still: a line that is not a valid event ends the stream
 * with broker_unavailable and none of its bytes reach the player, whether
 * it looks like the encoder's spelling (base64 with stray bits, a bad
 * escape, an overlong UTF-8 form) or not.
 */
static void
test_invalid_output_lines_are_refused(void **state)
{
	static const char *bad[] = {
		"{\"type\":\"stdout\",\"data_b64\":\"QUJ=\"}",      /* unused bits */
		"{\"type\":\"stdout\",\"data_b64\":\"QUJDR===\"}",  /* bad padding */
		"{\"type\":\"stdout\",\"data_b64\":\"QUJ\"}",       /* length */
		"{\"type\":\"stdout\",\"data\":\"\\u00zz\"}",       /* escape */
		"{\"type\":\"stdout\",\"data\":\"\xC0\xAF\"}",      /* overlong */
		"{\"type\":\"stdout\",\"data\":\"x\",\"data\":\"y\"}",
		"{\"type\":\"stdoux\",\"data\":\"QUJD\"}",
	};
	struct tu_res r = { 0 };
	char nd[512];
	size_t i;

	(void)state;
	start_api(NULL);
	assert_int_equal(tu_req(&r, "PUT", "/api/v1/npcs/alpha/sandbox", KA,
	    NULL), 200);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(nd, sizeof(nd), "{\"type\":\"start\",\"exec_id\":\"e1\","
		    "\"ts\":1}\n%s\n{\"type\":\"exit\",\"code\":0,\"signal\":null,"
		    "\"duration_ms\":1,\"truncated\":false}\n", bad[i]);
		exec_with(&r, nd);
		if (strstr(tu_text(&r), "event: error\n") == NULL ||
		    strstr(tu_text(&r), "broker_unavailable") == NULL ||
		    strstr(tu_text(&r), "event: stdout") != NULL ||
		    strstr(tu_text(&r), "event: exit") != NULL)
			fail_msg("line %zu accepted: %s", i, tu_text(&r));
	}
	tu_res_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_sse_of_every_golden_transcript_through_the_broker_driver,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_sink_that_cancels_from_its_own_callback_hears_nothing_more,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_broker_error_bodies_map_to_the_same_codes, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_unreachable_broker_is_503_and_the_api_stays_up, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_client_disconnect_closes_the_broker_connection, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_files_list_and_egress_reach_the_broker, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_broker_token_never_appears_in_logs_or_answers, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_broker_token_file_rules,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_driver_lists_sandboxes_health_and_cancels_quietly, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_output_lines_are_forwarded_as_received, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_invalid_output_lines_are_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
