/* test_api_term_ws.c - the WebSocket attach of a terminal (api/api_term_ws.c, subprotocol sbx.v1, adr/0052) on the fake driver's sessions, with common/sbx_ws.c's client role as the viewer: hello and writer, typing echoed, resize and signal reach the session, refusals before the upgrade, 1008 and 1009 closes, the exit message, a second viewer read-only. */
#include <sys/socket.h>

#include <event2/bufferevent.h>

#include "api_testutil.h"
#include "driver_fake.h"
#include "sbx_ws.h"

static char KA[SBX_TOKEN_GEN_LEN + 1];
static char KB[SBX_TOKEN_GEN_LEN + 1];
static char KOP[SBX_TOKEN_GEN_LEN + 1];

/* One viewer as the test sees it. */
struct view {
	struct sbx_ws *ws;
	struct evbuffer *out;      /* output bytes, stream byte removed */
	json_t *texts;             /* every text message, parsed */
	int closed, code;
	char reason[128];
};

static void
v_message(void *arg, int text, const unsigned char *p, size_t n)
{
	struct view *v = arg;

	if (text)
		json_array_append_new(v->texts, json_loadb((const char *)p, n,
		    0, NULL));
	else if (n > 0)
		evbuffer_add(v->out, p + 1, n - 1);
}

static void
v_closed(void *arg, int code, const char *reason)
{
	struct view *v = arg;

	v->closed = 1;
	v->code = code;
	snprintf(v->reason, sizeof(v->reason), "%s", reason);
}

static const struct sbx_ws_ops vops = { v_message, NULL, v_closed, NULL };

static int
up(void **state)
{
	tu_up(state);
	tu_set("ws_message_max", "4k");
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "n1");
	return 0;
}

/* A terminal of n1 (pty or not); its id into id. */
static void
new_term(int pty, char *id, size_t cap)
{
	struct tu_res r;
	json_t *j;

	memset(&r, 0, sizeof(r));
	assert_int_equal(tu_req(&r, "POST", "/api/v1/npcs/n1/sandbox/terminals",
	    KA, pty ? "{\"pty\":true,\"cols\":80,\"rows\":24}" :
	    "{\"pty\":false,\"argv\":[\"cat\"]}"), 201);
	j = json_loads(tu_text(&r), 0, NULL);
	snprintf(id, cap, "%s", json_string_value(json_object_get(j, "id")));
	json_decref(j);
	tu_res_free(&r);
	tu_spin(20);
}

/* The answer's head to a handshake sent on a raw socket; the fd in *fd. */
static int
handshake(const char *id, const char *key, const char *proto, int *fd,
    char *head, size_t cap)
{
	char req[1024];
	size_t got = 0;
	ssize_t r;
	int i;

	*fd = tu_raw_connect();
	snprintf(req, sizeof(req), "GET /api/v1/npcs/n1/sandbox/terminals/%s/"
	    "attach HTTP/1.1\r\nHost: x\r\n%s%s%sUpgrade: websocket\r\n"
	    "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
	    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n%s%s%s\r\n", id,
	    key != NULL ? "Authorization: Bearer " : "", key != NULL ? key : "",
	    key != NULL ? "\r\n" : "", proto != NULL ?
	    "Sec-WebSocket-Protocol: " : "", proto != NULL ? proto : "",
	    proto != NULL ? "\r\n" : "");
	assert_int_equal(write(*fd, req, strlen(req)), (ssize_t)strlen(req));
	evutil_make_socket_nonblocking(*fd);
	head[0] = '\0';
	for (i = 0; i < 100 && strstr(head, "\r\n\r\n") == NULL; i++) {
		tu_spin(10);
		/* one byte at a time: the frames after the head stay */
		while (got < cap - 1 && strstr(head, "\r\n\r\n") == NULL &&
		    (r = read(*fd, head + got, 1)) == 1) {
			got++;
			head[got] = '\0';
		}
	}
	return atoi(head + 9);
}

static void
attach(struct view *v, const char *id, const char *key)
{
	char head[2048];
	struct bufferevent *bev;
	int fd;

	memset(v, 0, sizeof(*v));
	v->out = evbuffer_new();
	v->texts = json_array();
	assert_int_equal(handshake(id, key, "sbx.v1", &fd, head, sizeof(head)),
	    101);
	assert_non_null(strstr(head, "Sec-WebSocket-Accept: "
	    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
	assert_non_null(strstr(head, "Sec-WebSocket-Protocol: sbx.v1\r\n"));
	bev = bufferevent_socket_new(T.base, fd, BEV_OPT_CLOSE_ON_FREE);
	v->ws = sbx_ws_new(bev, SBX_WS_CLIENT, NULL, &vops, v, NULL);
	assert_non_null(v->ws);
}

static void
view_free(struct view *v)
{
	sbx_ws_free(v->ws);
	evbuffer_free(v->out);
	json_decref(v->texts);
}

static int
has_out(void *arg)
{
	struct view *v = arg;
	struct evbuffer_ptr p;

	p = evbuffer_search(v->out, "hi\r\n", 4, NULL);
	return p.pos >= 0;
}

static int
is_closed(void *arg)
{
	return ((struct view *)arg)->closed;
}

static int
ntexts(void *arg)
{
	return json_array_size(((struct view *)arg)->texts) >= 2;
}

static const char *
text_type(struct view *v, size_t i)
{
	return json_string_value(json_object_get(json_array_get(v->texts, i),
	    "type"));
}

static void
send_text(struct view *v, const char *t)
{
	assert_int_equal(sbx_ws_send(v->ws, 1, t, strlen(t), NULL, 0), 0);
}

static void
test_typing_is_echoed_after_hello_and_writer(void **state)
{
	struct view v;
	char id[64];

	(void)state;
	new_term(1, id, sizeof(id));
	attach(&v, id, KA);
	assert_true(tu_loop_until(ntexts, &v, 2000));
	assert_string_equal(text_type(&v, 0), "hello");
	assert_string_equal(json_string_value(json_object_get(json_array_get(
	    v.texts, 0), "id")), id);
	assert_true(json_is_true(json_object_get(json_array_get(v.texts, 0),
	    "pty")));
	assert_string_equal(text_type(&v, 1), "writer");
	assert_true(json_is_true(json_object_get(json_array_get(v.texts, 1),
	    "you")));
	assert_int_equal(sbx_ws_send(v.ws, 0, "echo hi\r", 8, NULL, 0), 0);
	assert_true(tu_loop_until(has_out, &v, 2000));
	send_text(&v, "{\"type\":\"resize\",\"cols\":132,\"rows\":43}");
	send_text(&v, "{\"type\":\"signal\",\"signal\":\"INT\"}");
	tu_spin(100);
	assert_int_equal(sbx_fake_session_seen(T.drv)->last_cols, 132);
	assert_int_equal(sbx_fake_session_seen(T.drv)->last_rows, 43);
	assert_int_equal(sbx_fake_session_seen(T.drv)->last_signo, 2);
	/* the command exits: exit message, then close 1000 */
	assert_int_equal(sbx_fake_session_exit(sbx_fake_session_latest(T.drv),
	    3, NULL), 0);
	assert_true(tu_loop_until(is_closed, &v, 3000));
	assert_int_equal(v.code, SBX_WS_NORMAL);
	assert_string_equal(text_type(&v, json_array_size(v.texts) - 1),
	    "exit");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(
	    v.texts, json_array_size(v.texts) - 1), "code")), 3);
	view_free(&v);
}

static void
test_bad_resizes_and_unknown_messages_close_1008(void **state)
{
	static const char *bad[] = {
		"{\"type\":\"resize\",\"cols\":0,\"rows\":0}",
		"{\"type\":\"resize\",\"cols\":10001,\"rows\":5}",
		"{\"type\":\"resize\",\"cols\":\"80\",\"rows\":5}",
		"{\"type\":\"signal\",\"signal\":\"NOPE\"}",
		"{\"type\":\"dance\"}",
		"[1,2]",
	};
	struct view v;
	char id[64];
	size_t i;

	(void)state;
	new_term(1, id, sizeof(id));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		attach(&v, id, KA);
		assert_true(tu_loop_until(ntexts, &v, 2000));
		send_text(&v, bad[i]);
		assert_true(tu_loop_until(is_closed, &v, 3000));
		assert_int_equal(v.code, SBX_WS_POLICY);
		assert_true(strlen(v.reason) > 10);
		view_free(&v);
	}
	assert_int_equal(sbx_fake_session_seen(T.drv)->resizes, 0);
}

static void
test_a_message_over_ws_message_max_closes_1009(void **state)
{
	static char big[4097];
	struct view v;
	char id[64];

	(void)state;
	new_term(0, id, sizeof(id));
	attach(&v, id, KA);
	assert_true(tu_loop_until(ntexts, &v, 2000));
	memset(big, 'x', sizeof(big));
	assert_int_equal(sbx_ws_send(v.ws, 0, big, sizeof(big), NULL, 0), 0);
	assert_true(tu_loop_until(is_closed, &v, 3000));
	assert_int_equal(v.code, SBX_WS_TOO_BIG);
	assert_non_null(strstr(v.reason, "ws_message_max"));
	assert_int_equal(sbx_fake_session_seen(T.drv)->bytes_in, 0);
	view_free(&v);
}

static void
test_a_second_viewer_reads_and_may_not_write(void **state)
{
	struct view a, b;
	char id[64];

	(void)state;
	new_term(1, id, sizeof(id));
	attach(&a, id, KA);
	attach(&b, id, KA);
	assert_true(tu_loop_until(ntexts, &a, 2000));
	assert_true(tu_loop_until(ntexts, &b, 2000));
	assert_false(json_is_true(json_object_get(json_array_get(b.texts, 1),
	    "you")));
	assert_int_equal(sbx_ws_send(a.ws, 0, "echo hi\r", 8, NULL, 0), 0);
	assert_true(tu_loop_until(has_out, &a, 2000));
	assert_true(tu_loop_until(has_out, &b, 2000));
	assert_int_equal(sbx_ws_send(b.ws, 0, "x", 1, NULL, 0), 0);
	assert_true(tu_loop_until(is_closed, &b, 3000));
	assert_int_equal(b.code, SBX_WS_POLICY);
	assert_non_null(strstr(b.reason, "writer"));
	view_free(&b);
	/* the writer leaves: a new viewer becomes the writer */
	view_free(&a);
	tu_spin(50);
	attach(&b, id, KA);
	assert_true(tu_loop_until(ntexts, &b, 2000));
	assert_true(json_is_true(json_object_get(json_array_get(b.texts, 1),
	    "you")));
	view_free(&b);
}

/* streams_per_principal (adr/0056): an attached WebSocket holds one of
 * its principal's streams until it closes; beyond, 429 + Retry-After
 * before the upgrade. */
static void
test_an_attach_is_one_of_its_principals_streams(void **state)
{
	struct view a, b;
	char id[64], head[2048];
	int fd;

	(void)state;
	tu_set("streams_per_principal", "1");   /* the server reads T.cfg */
	new_term(1, id, sizeof(id));
	attach(&a, id, KA);
	assert_true(tu_loop_until(ntexts, &a, 2000));
	assert_int_equal(handshake(id, KA, "sbx.v1", &fd, head, sizeof(head)),
	    429);
	assert_non_null(strstr(head, "Retry-After: 1\r\n"));
	close(fd);
	view_free(&a);
	tu_spin(50);
	attach(&b, id, KA);
	assert_true(tu_loop_until(ntexts, &b, 2000));
	view_free(&b);
}

static void
test_refusals_come_before_the_upgrade(void **state)
{
	char id[64], head[2048];
	int fd;

	(void)state;
	new_term(1, id, sizeof(id));
	/* no subprotocol: 400 with the sentence, JSON */
	assert_int_equal(handshake(id, KA, NULL, &fd, head, sizeof(head)), 400);
	close(fd);
	assert_int_equal(handshake(id, KA, "chat", &fd, head, sizeof(head)),
	    400);
	close(fd);
	/* another player: 404 (not theirs), no key: 401 */
	assert_int_equal(handshake(id, KB, "sbx.v1", &fd, head, sizeof(head)),
	    404);
	close(fd);
	assert_int_equal(handshake(id, NULL, "sbx.v1", &fd, head, sizeof(head)),
	    401);
	close(fd);
	assert_int_equal(handshake("t0000000000000000000000ff", KA, "sbx.v1",
	    &fd, head, sizeof(head)), 404);
	close(fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_typing_is_echoed_after_hello_and_writer, up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_bad_resizes_and_unknown_messages_close_1008, up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_a_message_over_ws_message_max_closes_1009, up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_a_second_viewer_reads_and_may_not_write, up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_an_attach_is_one_of_its_principals_streams, up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_refusals_come_before_the_upgrade, up, tu_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
