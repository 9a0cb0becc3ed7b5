/* test_api_auth.c - sandbox-api's credential check comes before the request body: a bad or missing key is answered 401 before one body byte is read (sbx_gate.h, adr/0008). */
#include <sys/socket.h>

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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_bad_or_missing_key_is_401_before_the_body_is_read, tu_up,
		    tu_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
