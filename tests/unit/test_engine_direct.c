/* test_engine_direct.c - eng_direct_connect (adr/0066) in a temporary directory standing for a socket volume's mountpoint: only a listening socket of the right owner and mode at the name is connected; a symlink (to a live socket outside), a FIFO, a file, a directory, a wrong mode or owner are refused without touching what they point at; a missing name or a socket without a listener is "not yet". Also eng_direct_mountpoint: the socket volume is found by the sandbox's name or, for a sandbox claimed from the warm pool (adr/0067), by its /work volume's stem, and no other mount at the listen directory is taken. */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
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
#include <jansson.h>

#include "driver_engine_direct.h"

struct fx {
	char dir[64];        /* the "mountpoint" */
	char out[64];        /* a directory outside it */
	char sock[128];      /* dir/agent.sock */
};

static int
listener(const char *path, mode_t mode)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);

	assert_true(fd >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(chmod(path, mode), 0);
	return fd;
}

/* 1 when a connection is waiting on lfd (then taken). */
static int
was_connected(int lfd)
{
	int c = accept(lfd, NULL, NULL);

	if (c < 0)
		return 0;
	close(c);
	return 1;
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/sbx-utdirect-XXXXXX");
	snprintf(f->out, sizeof(f->out), "/tmp/sbx-utdirect-out-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_non_null(mkdtemp(f->out));
	snprintf(f->sock, sizeof(f->sock), "%s/" SBX_AGENT_SOCK_NAME, f->dir);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %s %s", f->dir, f->out);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static void
test_connects_to_the_agents_socket(void **state)
{
	struct fx *f = *state;
	char why[256] = "";
	int lfd = listener(f->sock, 0600), fd;

	fd = eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why));
	assert_true(fd >= 0);
	assert_true(was_connected(lfd));
	close(fd);
	close(lfd);
}

static void
test_not_yet(void **state)
{
	struct fx *f = *state;
	char why[256] = "";
	int lfd;

	/* no name */
	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why)), -1);
	/* a socket nobody listens on any more */
	lfd = listener(f->sock, 0600);
	close(lfd);
	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why)), -1);
}

static void
test_symlink_to_a_live_socket_is_refused(void **state)
{
	struct fx *f = *state;
	char target[160], why[256] = "";
	int lfd;

	snprintf(target, sizeof(target), "%s/victim.sock", f->out);
	lfd = listener(target, 0600);
	assert_int_equal(symlink(target, f->sock), 0);
	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why)), -2);
	assert_non_null(strstr(why, "symlink"));
	assert_false(was_connected(lfd));
	close(lfd);
	/* a symlink to a directory holding the socket: the same */
	assert_int_equal(unlink(f->sock), 0);
	assert_int_equal(symlink(f->out, f->sock), 0);
	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why)), -2);
}

static void
test_other_types_are_refused(void **state)
{
	struct fx *f = *state;
	char why[256] = "";
	int fd;

	assert_int_equal(mkfifo(f->sock, 0600), 0);   /* O_PATH: never blocks on it */
	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why)), -2);
	assert_non_null(strstr(why, "not a socket"));
	assert_int_equal(unlink(f->sock), 0);
	assert_true((fd = open(f->sock, O_CREAT | O_WRONLY, 0600)) >= 0);
	close(fd);
	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why)), -2);
	assert_int_equal(unlink(f->sock), 0);
	assert_int_equal(mkdir(f->sock, 0700), 0);
	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why)), -2);
	assert_non_null(strstr(why, "not a socket"));
}

static void
test_owner_and_mode_are_checked(void **state)
{
	struct fx *f = *state;
	char why[256] = "";
	int lfd = listener(f->sock, 0666);

	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid(), why, sizeof(why)), -2);
	assert_non_null(strstr(why, "mode"));
	assert_false(was_connected(lfd));
	assert_int_equal(chmod(f->sock, 0600), 0);
	assert_int_equal(eng_direct_connect(f->dir, (unsigned)getuid() + 1, why, sizeof(why)), -2);
	assert_non_null(strstr(why, "owner"));
	assert_false(was_connected(lfd));
	close(lfd);
}

static void
test_mountpoint_that_is_a_symlink_is_refused(void **state)
{
	struct fx *f = *state;
	char link[160], why[256] = "";
	int lfd = listener(f->sock, 0600);

	snprintf(link, sizeof(link), "%s/mnt", f->out);
	assert_int_equal(symlink(f->dir, link), 0);
	assert_int_equal(eng_direct_connect(link, (unsigned)getuid(), why, sizeof(why)), -2);
	assert_false(was_connected(lfd));
	close(lfd);
}

static json_t *
inspect_with(const char *work, const char *agent)
{
	return json_pack("{s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}]}", "Mounts",
	    "Destination", "/work", "Name", work, "Source", "/v/work/_data",
	    "Destination", "/run/sbx-agent", "Name", agent, "Source", "/v/agent/_data");
}

static void
test_mountpoint_by_name_or_by_the_claimed_members_stem(void **state)
{
	struct engine e;
	json_t *b;

	(void)state;
	memset(&e, 0, sizeof(e));
	e.prefix = "sbx-";
	/* a sandbox made for its id */
	b = inspect_with("sbx-alice-work", "sbx-alice-agent");
	assert_string_equal(eng_direct_mountpoint(&e, "alice", b), "/v/agent/_data");
	json_decref(b);
	/* claimed from the pool: both volumes keep the member's name */
	b = inspect_with("sbx-pool.0123abcd-work", "sbx-pool.0123abcd-agent");
	assert_string_equal(eng_direct_mountpoint(&e, "alice", b), "/v/agent/_data");
	json_decref(b);
	/* another member's, or anyone else's volume at the listen directory */
	b = inspect_with("sbx-pool.0123abcd-work", "sbx-pool.99999999-agent");
	assert_null(eng_direct_mountpoint(&e, "alice", b));
	json_decref(b);
	b = inspect_with("sbx-alice-work", "sbx-bob-agent");
	assert_null(eng_direct_mountpoint(&e, "alice", b));
	json_decref(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_connects_to_the_agents_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_yet, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_to_a_live_socket_is_refused, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_other_types_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_owner_and_mode_are_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mountpoint_that_is_a_symlink_is_refused, setup,
		    teardown),
		cmocka_unit_test(test_mountpoint_by_name_or_by_the_claimed_members_stem),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
