/* test_api_ports_proxy.c - the ports proxy end to end in one process (ports_rig.h): bytes, a 5 MiB echo, SSE one by one, an Upgrade, refusals, tickets, previews by path and Host, the cap, the idle timeout (adr/0053). */
#include "ports_rig.h"

/* ------------------------------------------------------------------ */
/* Tests                                                               */

static void
test_get_and_post_pass_byte_exact(void **state)
{
	char head[512];
	struct evbuffer *b;
	unsigned char *big;
	const unsigned char *body;
	size_t n, blen = (size_t)5 << 20;

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/file"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n",
	    up_port, ka);
	b = exchange(head, NULL, 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 200", 12);
	body = body_of(b, &n);
	assert_int_equal(n, sizeof(file_bytes));
	assert_memory_equal(body, file_bytes, n);
	evbuffer_free(b);
	/* What the sandbox's server saw: the path without the prefix, no
	 * key, the proxy's own fields. */
	assert_non_null(strstr(last_head, "GET /file\n"));
	assert_null(strstr(last_head, ka));
	assert_null(strcasestr(last_head, "Authorization"));
	assert_non_null(strstr(last_head, "X-Forwarded-Host: api.test\n"));
	assert_non_null(strstr(last_head, "X-Forwarded-For: 127.0.0.1\n"));
	assert_non_null(strstr(last_head, "X-Forwarded-Prefix: "
	    "/api/v1/npcs/n1/sandbox/ports/"));
	assert_non_null(strstr(last_head, "Connection: close\n"));
	/* 5 MiB echoed. */
	big = malloc(blen);
	randombytes_buf(big, blen);
	snprintf(head, sizeof(head), "POST /api/v1/npcs/n1/sandbox/ports/%d/echo"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Content-Length: %zu\r\n\r\n", up_port, ka, blen);
	b = exchange(head, big, blen);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 200", 12);
	body = body_of(b, &n);
	assert_int_equal(n, blen);
	assert_memory_equal(body, big, blen);
	evbuffer_free(b);
	free(big);
}

static int
sse_ready(void *arg)
{
	(void)arg;
	return sse_req != NULL;
}

static void
test_sse_events_arrive_one_by_one(void **state)
{
	char head[512];
	struct evbuffer *b = evbuffer_new(), *more = evbuffer_new();
	int fd = tu_raw_connect();

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/sse"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n",
	    up_port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "data: one", 5000), 0);
	assert_true(evbuffer_search(b, "data: one", 9, NULL).pos >= 0);
	/* The second event is sent only now: the first came alone. */
	assert_true(tu_loop_until(sse_ready, NULL, 2000));
	assert_true(evbuffer_search(b, "data: two", 9, NULL).pos < 0);
	evbuffer_add_printf(more, "data: two\n\n");
	evhttp_send_reply_chunk(sse_req, more);
	assert_int_equal(raw_read(fd, b, 0, "data: two", 5000), 0);
	evhttp_send_reply_end(sse_req);
	close(fd);
	evbuffer_free(b);
	evbuffer_free(more);
}

static void
test_upgrade_echoes_both_ways(void **state)
{
	char head[512];
	struct evbuffer *b = evbuffer_new();
	int fd = tu_raw_connect();

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/ws"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n", ws_port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "\r\n\r\n", 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 101", 12);
	evbuffer_drain(b, evbuffer_get_length(b));
	raw_send(fd, "ping-1", 6);
	assert_int_equal(raw_read(fd, b, 6, NULL, 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 6), "ping-1", 6);
	raw_send(fd, "ping-2", 6);
	assert_int_equal(raw_read(fd, b, 12, NULL, 5000), 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "ping-1ping-2", 12);
	close(fd);
	evbuffer_free(b);
}

static void
test_refusals(void **state)
{
	struct tu_res r = { 0 };
	char path[128];

	(void)state;
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/n1/sandbox/ports/0/",
	    ka, NULL), 400);
	assert_int_equal(tu_req(&r, "GET",
	    "/api/v1/npcs/n1/sandbox/ports/70000/x", ka, NULL), 400);
	assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs/n1/sandbox/ports/x/",
	    ka, NULL), 400);
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/file",
	    up_port);
	assert_int_equal(tu_req(&r, "GET", path, kb, NULL), 404);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 401);
	/* Nothing listens on the port: 502 and the sentence. */
	evhttp_free(up_http);
	up_http = evhttp_new(T.base);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 502);
	assert_string_equal(tu_code(&r), SBX_E_PORT_CLOSED);
	assert_non_null(strstr(tu_text(&r), "nothing listens on port"));
	tu_res_free(&r);
}

static void
test_ticket_and_preview_without_key(void **state)
{
	struct tu_res r = { 0 };
	char path[256], tok[64], url[128];
	json_t *o;
	struct evbuffer *b;
	char head[512];

	(void)state;
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/tickets",
	    up_port);
	assert_int_equal(tu_req(&r, "POST", path, ka, NULL), 200);
	o = json_loads(tu_text(&r), 0, NULL);
	snprintf(tok, sizeof(tok), "%s", json_string_value(json_object_get(o,
	    "ticket")));
	json_decref(o);
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/x?a=1&"
	    "sbx_ticket=%s", up_port, tok);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 200);
	assert_non_null(strstr(last_head, "GET /x?a=1\n"));
	/* A ticket of another port is no credential here. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/x?"
	    "sbx_ticket=%s", ws_port, tok);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 401);
	/* A preview: 1 s, no key, then gone. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/previews",
	    up_port);
	assert_int_equal(tu_req(&r, "POST", path, kb, "{\"ttl_s\":1}"), 404);
	assert_int_equal(tu_req(&r, "POST", path, ka, "{\"ttl_s\":90000}"), 400);
	assert_int_equal(tu_req(&r, "POST", path, ka, "{\"ttl_s\":1}"), 201);
	o = json_loads(tu_text(&r), 0, NULL);
	snprintf(url, sizeof(url), "%s", json_string_value(json_object_get(o,
	    "path")));
	assert_non_null(strstr(json_string_value(json_object_get(o, "url")),
	    ".preview.example.test/"));
	json_decref(o);
	snprintf(path, sizeof(path), "%sfile", url);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 200);
	assert_int_equal(evbuffer_get_length(r.body), sizeof(file_bytes));
	assert_non_null(strstr(last_head, "GET /file\n"));
	/* The same preview on its own origin: the Host names it. */
	snprintf(head, sizeof(head), "GET /file HTTP/1.1\r\nHost: %.*s."
	    "preview.example.test\r\n\r\n", (int)API_PORTS_TOKEN_LEN, url + 3);
	b = exchange(head, NULL, 0);
	assert_memory_equal(evbuffer_pullup(b, 12), "HTTP/1.1 200", 12);
	evbuffer_free(b);
	/* ... and the api itself is not served there. */
	snprintf(head, sizeof(head), "GET /api/v1/whoami HTTP/1.1\r\nHost: "
	    "%.*s.preview.example.test\r\nAuthorization: Bearer %s\r\n\r\n",
	    (int)API_PORTS_TOKEN_LEN, url + 3, ka);
	b = exchange(head, NULL, 0);
	assert_null(strstr(last_head, ka));
	evbuffer_free(b);
	tu_spin(2100);
	assert_int_equal(tu_req(&r, "GET", path, NULL, NULL), 404);
	tu_res_free(&r);
}

static void
test_connection_cap_and_idle_timeout(void **state)
{
	char head[512];
	struct evbuffer *b = evbuffer_new();
	struct tu_res r = { 0 };
	char path[128];
	int fd[3], i;

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/ws"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n", ws_port, ka);
	for (i = 0; i < 3; i++) {
		fd[i] = tu_raw_connect();
		raw_send(fd[i], head, strlen(head));
		evbuffer_drain(b, evbuffer_get_length(b));
		assert_int_equal(raw_read(fd[i], b, 0, "\r\n\r\n", 5000), 0);
	}
	/* The 4th of port_connections_per_sandbox 3. */
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/file",
	    up_port);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 429);
	assert_string_equal(r.retry_after, "1");
	assert_non_null(strstr(tu_text(&r), "port_connections_per_sandbox"));
	for (i = 0; i < 3; i++)
		close(fd[i]);
	tu_spin(100);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 200);
	/* Bytes counted per sandbox. */
	assert_int_equal(tu_req(&r, "GET", "/metrics", kop, NULL), 200);
	assert_non_null(strstr(tu_text(&r), "sbx_api_port_bytes_total{sandbox="
	    "\"npc-n1\",direction=\"out\"}"));
	tu_res_free(&r);
	evbuffer_free(b);
}

/* A connection is one of its principal's streams_per_principal (adr/0056)
 * from its request to its close, proxy and tcp alike (one port_open). */
static void
test_a_connection_is_one_of_its_principals_streams(void **state)
{
	char head[512], path[128];
	struct evbuffer *b = evbuffer_new();
	struct tu_res r = { 0 };
	int fd;

	(void)state;
	tu_set("streams_per_principal", "1");   /* the server reads T.cfg */
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/ws"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n", ws_port, ka);
	fd = tu_raw_connect();
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "\r\n\r\n", 5000), 0);
	snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/file",
	    up_port);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 429);
	assert_string_equal(tu_code(&r), "too_many");
	assert_string_equal(r.retry_after, "1");
	assert_non_null(strstr(tu_text(&r), "open streams"));
	close(fd);
	tu_spin(100);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 200);
	/* That GET's connection gave its stream back too. */
	tu_spin(100);
	assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 200);
	tu_res_free(&r);
	evbuffer_free(b);
}

/* port_idle_timeout (1 s here): an idle tunnel is closed, a busy one is
 * not. */
static void
test_idle_connection_is_closed(void **state)
{
	char head[512];
	struct evbuffer *b = evbuffer_new();
	int fd = tu_raw_connect(), i;

	(void)state;
	snprintf(head, sizeof(head), "GET /api/v1/npcs/n1/sandbox/ports/%d/ws"
	    " HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n"
	    "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n", ws_port, ka);
	raw_send(fd, head, strlen(head));
	assert_int_equal(raw_read(fd, b, 0, "\r\n\r\n", 5000), 0);
	for (i = 0; i < 4; i++) {   /* 2 s of traffic every 0.5 s */
		evbuffer_drain(b, evbuffer_get_length(b));
		raw_send(fd, "x", 1);
		assert_int_equal(raw_read(fd, b, 1, NULL, 2000), 0);
		tu_spin(500);
	}
	/* Then silence: closed within about a second. */
	assert_int_equal(raw_read(fd, b, 1000000, NULL, 2500), 1);
	close(fd);
	/* A server that never answers: the request itself times out (504). */
	{
		struct tu_res r = { 0 };
		char path[128];

		snprintf(path, sizeof(path), "/api/v1/npcs/n1/sandbox/ports/%d/"
		    "never", up_port);
		assert_int_equal(tu_req(&r, "GET", path, ka, NULL), 504);
		assert_non_null(strstr(tu_text(&r), "port_idle_timeout"));
		tu_res_free(&r);
	}
	evbuffer_free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_get_and_post_pass_byte_exact,
		    up_start, up_stop),
		cmocka_unit_test_setup_teardown(test_sse_events_arrive_one_by_one,
		    up_start, up_stop),
		cmocka_unit_test_setup_teardown(test_upgrade_echoes_both_ways,
		    up_start, up_stop),
		cmocka_unit_test_setup_teardown(test_refusals, up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_ticket_and_preview_without_key, up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_connection_cap_and_idle_timeout, up_start, up_stop),
		cmocka_unit_test_setup_teardown(
		    test_a_connection_is_one_of_its_principals_streams, up_start,
		    up_stop),
		cmocka_unit_test_setup_teardown(test_idle_connection_is_closed,
		    up_start, up_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
