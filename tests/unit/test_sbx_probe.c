/* test_sbx_probe.c - the --health probe against an evhttp server in a child process (127.0.0.1:0 and a unix socket), and sbx_token_read. */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
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
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "sbx_probe.h"
#include "sbx_token.h"

#define TOKEN "probe-Token-0123456789-abcdefgh"

static pid_t child = -1;
static int port;
static char tmpdir[64];
static char unix_addr[160];

/* ---------- the server (child process) ---------- */

static void
reply(struct evhttp_request *r, int code, const char *body)
{
	struct evbuffer *b = evbuffer_new();

	evbuffer_add(b, body, strlen(body));
	evhttp_add_header(evhttp_request_get_output_headers(r), "Content-Type",
	    "application/json");
	evhttp_send_reply(r, code, code == 200 ? "OK" : "No", b);
	evbuffer_free(b);
}

static void
route(struct evhttp_request *r, void *arg)
{
	const char *uri = evhttp_request_get_uri(r);
	const char *auth = evhttp_find_header(evhttp_request_get_input_headers(r),
	    "Authorization");
	char buf[512];

	(void)arg;
	if (strcmp(uri, "/ok") == 0)
		reply(r, 200, "{\"status\":\"ok\",\"version\":\"1\"}");
	else if (strcmp(uri, "/degraded") == 0)
		reply(r, 200, "{\"status\":\"degraded\",\"reason\":\"runtime "
		    "unreachable\\nsecond line\"}");
	else if (strcmp(uri, "/auth") == 0) {
		if (auth != NULL && strcmp(auth, "Bearer " TOKEN) == 0)
			reply(r, 200, "{\"status\":\"ok\"}");
		else
			reply(r, 401, "{\"error\":{\"code\":\"unauthorized\"}}");
	} else if (strcmp(uri, "/echo") == 0) {
		snprintf(buf, sizeof(buf), "{\"status\":\"bad\",\"reason\":\"%s\"}",
		    auth != NULL ? auth : "");
		reply(r, 200, buf);
	} else if (strcmp(uri, "/notjson") == 0)
		reply(r, 200, "hello");
	else if (strcmp(uri, "/slow") == 0)
		; /* never answered: the probe's timeout ends it */
	else
		reply(r, 404, "{}");
}

static void
serve(int wfd)
{
	struct event_base *base = event_base_new();
	struct evhttp *http = evhttp_new(base);
	struct evhttp_bound_socket *bs;
	struct evconnlistener *ul;
	struct sockaddr_un sun;
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	int p;

	evhttp_set_gencb(http, route, NULL);
	bs = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
	if (bs == NULL)
		_exit(2);
	getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sin, &sl);
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%.100s", unix_addr + 5);
	ul = evconnlistener_new_bind(base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE, 16,
	    (struct sockaddr *)&sun, sizeof(sun));
	if (ul == NULL || evhttp_bind_listener(http, ul) == NULL)
		_exit(3);
	p = ntohs(sin.sin_port);
	if (write(wfd, &p, sizeof(p)) != sizeof(p))
		_exit(4);
	close(wfd);
	event_base_dispatch(base);
	_exit(0);
}

static int
group_setup(void **state)
{
	int fds[2];

	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sbx-test-probe-XXXXXX");
	if (mkdtemp(tmpdir) == NULL || pipe(fds) == -1)
		return -1;
	snprintf(unix_addr, sizeof(unix_addr), "unix:%s/s.sock", tmpdir);
	if ((child = fork()) == -1)
		return -1;
	if (child == 0) {
		close(fds[0]);
		serve(fds[1]);
	}
	close(fds[1]);
	if (read(fds[0], &port, sizeof(port)) != sizeof(port))
		return -1;
	close(fds[0]);
	return 0;
}

static int
group_teardown(void **state)
{
	char path[200];

	(void)state;
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	snprintf(path, sizeof(path), "%s/s.sock", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/tok", tmpdir);
	unlink(path);
	rmdir(tmpdir);
	return 0;
}

static int
probe(const char *host, const char *path, const char *token, int64_t ms,
    char *detail, size_t dsz)
{
	char addr[200];

	if (strncmp(host, "unix:", 5) == 0)
		snprintf(addr, sizeof(addr), "%s", host);
	else
		snprintf(addr, sizeof(addr), "%s:%d", host, port);
	return sbx_probe_health(addr, path, token, token != NULL ?
	    strlen(token) : 0, ms, detail, dsz);
}

/* ---------- tests ---------- */

static void
test_probe_status_ok_is_healthy_on_tcp_unix_and_wildcard(void **state)
{
	char d[256];

	(void)state;
	assert_int_equal(probe("127.0.0.1", "/ok", NULL, 5000, d, sizeof(d)),
	    SBX_PROBE_HEALTHY);
	assert_string_equal(d, "ok");
	/* A daemon listening on 0.0.0.0 is probed on its loopback. */
	assert_int_equal(probe("0.0.0.0", "/ok", NULL, 5000, d, sizeof(d)),
	    SBX_PROBE_HEALTHY);
	assert_int_equal(probe(unix_addr, "/ok", NULL, 5000, d, sizeof(d)),
	    SBX_PROBE_HEALTHY);
	assert_string_equal(d, "ok");
}

static void
test_probe_degraded_is_unhealthy_with_reason_on_one_line(void **state)
{
	char d[256];

	(void)state;
	assert_int_equal(probe("127.0.0.1", "/degraded", NULL, 5000, d,
	    sizeof(d)), SBX_PROBE_UNHEALTHY);
	assert_string_equal(d, "status degraded: runtime unreachable second line");
	assert_null(strchr(d, '\n'));
}

static void
test_probe_sends_the_bearer_token(void **state)
{
	char d[256];

	(void)state;
	assert_int_equal(probe("127.0.0.1", "/auth", TOKEN, 5000, d, sizeof(d)),
	    SBX_PROBE_HEALTHY);
	assert_int_equal(probe("127.0.0.1", "/auth", "wrong-token-0123456789",
	    5000, d, sizeof(d)), SBX_PROBE_UNHEALTHY);
	assert_non_null(strstr(d, "HTTP 401"));
	assert_int_equal(probe("127.0.0.1", "/auth", NULL, 5000, d, sizeof(d)),
	    SBX_PROBE_UNHEALTHY);
}

static void
test_probe_never_copies_a_reply_that_echoes_the_token(void **state)
{
	char d[512];

	(void)state;
	assert_int_equal(probe("127.0.0.1", "/echo", TOKEN, 5000, d, sizeof(d)),
	    SBX_PROBE_UNHEALTHY);
	assert_null(strstr(d, TOKEN));
	assert_null(strstr(d, "probe-Token"));
	assert_non_null(strstr(d, "contains the token"));
}

static void
test_probe_fails_on_bad_body_refusal_timeout_and_port_zero(void **state)
{
	char d[256];

	(void)state;
	assert_int_equal(probe("127.0.0.1", "/notjson", NULL, 5000, d,
	    sizeof(d)), SBX_PROBE_UNHEALTHY);
	assert_non_null(strstr(d, "not a JSON object"));
	assert_int_equal(probe("127.0.0.1", "/nothere", NULL, 5000, d,
	    sizeof(d)), SBX_PROBE_UNHEALTHY);
	assert_non_null(strstr(d, "HTTP 404"));
	assert_int_equal(probe("127.0.0.1", "/slow", NULL, 300, d, sizeof(d)),
	    SBX_PROBE_UNHEALTHY);
	assert_non_null(strstr(d, "timed out after 300 ms"));
	assert_int_equal(sbx_probe_health("127.0.0.1:1", "/ok", NULL, 0, 5000,
	    d, sizeof(d)), SBX_PROBE_UNHEALTHY);
	assert_non_null(strstr(d, "refused"));
	assert_int_equal(sbx_probe_health("0.0.0.0:0", "/ok", NULL, 0, 5000,
	    d, sizeof(d)), SBX_PROBE_UNHEALTHY);
	assert_non_null(strstr(d, "cannot be probed"));
	assert_int_equal(sbx_probe_health(NULL, "/ok", NULL, 0, 5000, NULL, 0),
	    SBX_PROBE_UNHEALTHY);
}

static void
write_file(const char *path, const char *content, mode_t mode)
{
	int fd;

	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)),
	    (ssize_t)strlen(content));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

static void
test_token_read_follows_the_loading_rules(void **state)
{
	char path[200], out[SBX_TOKEN_MAX_LEN + 1], small[16];
	struct sbx_err err;
	size_t len = 99;

	(void)state;
	snprintf(path, sizeof(path), "%s/tok", tmpdir);
	write_file(path, TOKEN "\n", 0600);
	assert_int_equal(sbx_token_read(path, NULL, out, sizeof(out), &len,
	    &err), 0);
	assert_string_equal(out, TOKEN);
	assert_int_equal(len, strlen(TOKEN));
	/* The file wins over the environment, as in sbx_token_load. */
	assert_int_equal(sbx_token_read(path, "env-token-0123456789", out,
	    sizeof(out), &len, &err), 0);
	assert_string_equal(out, TOKEN);
	assert_int_equal(sbx_token_read(NULL, "env-token-0123456789 ", out,
	    sizeof(out), &len, &err), 0);
	assert_string_equal(out, "env-token-0123456789");

	write_file(path, TOKEN, 0640);
	memset(out, 'x', sizeof(out));
	assert_int_equal(sbx_token_read(path, NULL, out, sizeof(out), &len,
	    &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_TOKEN);
	assert_non_null(strstr(err.message, "0640"));
	assert_null(strstr(err.message, TOKEN));
	assert_int_equal(len, 0);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[sizeof(out) - 1], 0);

	write_file(path, "short\n", 0600);
	assert_int_equal(sbx_token_read(path, NULL, out, sizeof(out), &len,
	    &err), -1);
	assert_non_null(strstr(err.message, "at least 16"));
	assert_int_equal(sbx_token_read(NULL, NULL, out, sizeof(out), &len,
	    &err), -1);
	assert_int_equal(sbx_token_read(NULL, TOKEN, small, sizeof(small), &len,
	    &err), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_probe_status_ok_is_healthy_on_tcp_unix_and_wildcard),
		cmocka_unit_test(test_probe_degraded_is_unhealthy_with_reason_on_one_line),
		cmocka_unit_test(test_probe_sends_the_bearer_token),
		cmocka_unit_test(test_probe_never_copies_a_reply_that_echoes_the_token),
		cmocka_unit_test(test_probe_fails_on_bad_body_refusal_timeout_and_port_zero),
		cmocka_unit_test(test_token_read_follows_the_loading_rules),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
