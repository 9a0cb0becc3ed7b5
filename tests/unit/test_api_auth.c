/* test_api_auth.c - sandbox-api's credential check comes before the request body: a bad or missing key is answered 401 before one body byte is read, a keyless CONNECT is 401 and closed (sbx_gate.h, adr/0008), and keyless connections cannot take a keyed client's slot (adr/0046). */
#include <sys/socket.h>

#include <errno.h>

#include "api_testutil.h"

#include "driver_fake.h"

static char KA[64], KB[64], KOP[64];   /* player alice, player bob, operator */

/*
 * Sends head (a request head announcing a body that never comes) and
 * reads what the api answers within ms milliseconds into buf (cap bytes,
 * NUL-terminated). Returns the bytes read (0: no answer in time).
 */
static size_t
head_only(const char *head, int ms, char *buf, size_t cap)
{
	size_t got = 0;
	ssize_t n;
	int fd = tu_raw_connect(), waited;

	assert_int_equal(write(fd, head, strlen(head)), (ssize_t)strlen(head));
	buf[0] = '\0';
	for (waited = 0; waited < ms && got < cap - 1; waited += 10) {
		tu_spin(10);
		n = recv(fd, buf + got, cap - 1 - got, MSG_DONTWAIT);
		if (n > 0) {
			got += (size_t)n;
			buf[got] = '\0';
			if (strstr(buf, "}\n") != NULL)
				break;
		} else if (n == 0)
			break;
	}
	close(fd);
	return got;
}

static void
test_bad_or_missing_key_is_401_before_the_body_is_read(void **state)
{
	char head[512], buf[2048];

	(void)state;
	tu_start_fake(KA, KB, KOP);
	tu_npc(KA, "n1");
	/* A file write of a million bytes with a wrong key: none is sent,
	 * the 401 comes at once (reading the body first would wait for it
	 * until the request timeout). */
	snprintf(head, sizeof(head), "PUT /api/v1/npcs/n1/sandbox/files?"
	    "path=/work/a HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
	    "not-a-key\r\nContent-Length: 1000000\r\n\r\n");
	assert_true(head_only(head, 2000, buf, sizeof(buf)) > 0);
	assert_memory_equal(buf, "HTTP/1.1 401", 12);
	assert_non_null(strstr(buf, "WWW-Authenticate: Bearer"));
	assert_non_null(strstr(buf, "\"unauthorized\""));
	/* A JSON route without any key: the same. */
	snprintf(head, sizeof(head), "POST /api/v1/npcs HTTP/1.1\r\nHost: t\r\n"
	    "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n");
	assert_true(head_only(head, 2000, buf, sizeof(buf)) > 0);
	assert_memory_equal(buf, "HTTP/1.1 401", 12);
	/* The control: with a good key the api waits for the body it was
	 * promised, so the answers above did not come from a body read. */
	snprintf(head, sizeof(head), "POST /api/v1/npcs HTTP/1.1\r\nHost: t\r\n"
	    "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
	    "Content-Length: 1000\r\n\r\n", KA);
	assert_int_equal(head_only(head, 300, buf, sizeof(buf)), 0);
	/* Nothing of the refused bodies reached the driver. */
	assert_int_equal(sbx_fake_stats(T.drv)->calls[SBX_FAKE_WRITE], 0);
}

/*
 * Sends head and reads until the api closes the connection or ms
 * milliseconds pass, into buf (cap bytes, NUL-terminated). Returns 1 when
 * the api closed it, 0 when it was still open at the end.
 */
static int
head_until_closed(const char *head, int ms, char *buf, size_t cap)
{
	size_t got = 0;
	ssize_t n;
	int fd = tu_raw_connect(), waited, closed = 0;

	assert_int_equal(write(fd, head, strlen(head)), (ssize_t)strlen(head));
	buf[0] = '\0';
	for (waited = 0; waited < ms; waited += 10) {
		tu_spin(10);
		n = recv(fd, buf + got, cap - 1 - got, MSG_DONTWAIT);
		if (n > 0) {
			got += (size_t)n;
			buf[got] = '\0';
		} else if (n == 0 || (n < 0 && errno != EAGAIN &&
		    errno != EWOULDBLOCK)) {
			closed = 1;
			break;
		}
	}
	close(fd);
	return closed;
}

static void
test_keyless_connect_is_401_and_closed(void **state)
{
	char buf[2048];

	(void)state;
	tu_start_fake(KA, KB, KOP);
	/* No key, and a wrong one: 401 with its sentence, then the api hangs
	 * up (a CONNECT is never a tunnel here, and a stranger gets no
	 * connection to keep). */
	assert_true(head_until_closed("CONNECT example.com:443 HTTP/1.1\r\n"
	    "Host: example.com:443\r\n\r\n", 2000, buf, sizeof(buf)));
	assert_memory_equal(buf, "HTTP/1.1 401", 12);
	assert_non_null(strstr(buf, "WWW-Authenticate: Bearer"));
	assert_non_null(strstr(buf, "\"unauthorized\""));
	assert_true(head_until_closed("CONNECT 127.0.0.1:22 HTTP/1.1\r\n"
	    "Host: t\r\nAuthorization: Bearer not-a-key\r\n\r\n", 2000, buf,
	    sizeof(buf)));
	assert_memory_equal(buf, "HTTP/1.1 401", 12);
}

/*
 * Issue 24 M1 without a key: more idle sockets than the keyless pool
 * (and than max_connections) that never send a byte; a keyed request still
 * gets 200, and the oldest idle ones were closed with 503 overloaded.
 */
static void
test_idle_keyless_sockets_leave_keyed_clients_room(void **state)
{
	int fds[12], pushed = 0;
	struct tu_res r;
	char buf[2048];
	ssize_t n;
	size_t i;

	(void)state;
	assert_int_equal(T.cfg.max_connections_keyless, 64);
	assert_int_equal(T.cfg.keyless_header_timeout, 5000);
	tu_set("max_connections", "8");
	tu_set("max_connections_keyless", "3");
	tu_start_fake(KA, KB, KOP);
	for (i = 0; i < 12; i++)
		fds[i] = tu_raw_connect();
	for (i = 0; i < 3; i++) {
		memset(&r, 0, sizeof(r));
		assert_int_equal(tu_req(&r, "GET", "/api/v1/npcs", KA, NULL),
		    200);
		tu_res_free(&r);
	}
	for (i = 0; i < 12; i++) {
		n = recv(fds[i], buf, sizeof(buf) - 1, MSG_DONTWAIT);
		if (n > 0) {
			buf[n] = '\0';
			pushed += strstr(buf, "HTTP/1.1 503") != NULL &&
			    strstr(buf, "without a credential") != NULL;
		}
		close(fds[i]);
	}
	/* 12 idle, a pool of 3: the 9 oldest were pushed out (the keyed
	 * requests' own connections pushed out more, before their key). */
	assert_true(pushed >= 9);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_bad_or_missing_key_is_401_before_the_body_is_read, tu_up,
		    tu_down),
		cmocka_unit_test_setup_teardown(
		    test_keyless_connect_is_401_and_closed, tu_up, tu_down),
		cmocka_unit_test_setup_teardown(
		    test_idle_keyless_sockets_leave_keyed_clients_room, tu_up,
		    tu_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
