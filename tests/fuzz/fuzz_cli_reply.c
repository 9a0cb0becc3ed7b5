/*
 * fuzz_cli_reply.c - libFuzzer target: the sbx CLI's handling of every
 * server reply (api/cli/cli.c commands over api/cli/cli_http.c: status line,
 * headers, Content-Length and chunked bodies, JSON answers and errors, the
 * exec SSE stream through cli_sse.c and the NDJSON checks behind it).
 *
 * The target includes cli.c with its main() renamed, serves the fuzz bytes
 * (after the first, which picks the command) as the reply to every
 * connection from a thread on 127.0.0.1, and runs the command in-process.
 * The CLI's stdout and stderr go to a memory file for the run (set
 * FUZZ_CLI_STDERR=1 to see them when reproducing).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour, whatever the server sends;
 *  - no hang: the server closes after its reply, so every command ends
 *    (libFuzzer's -timeout reports one that does not);
 *  - the exit code is one the CLI documents: 0-5, 124, 130, 141 (exec may
 *    also pass on any 0-255 exit code the stream reports);
 *  - the API key never appears in anything the CLI prints (unless the
 *    reply itself held it).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>

int cli_main(int argc, char **argv);

#define main cli_main
#include "../../api/cli/cli.c"
#undef main

#include "fuzz.h"

#define KEY "fuzzkey_2f6c1a9e5d7b3f0e8a4c6d2b9e1f7a3c5d8b0e2"

static int lfd = -1, port;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *reply;
static size_t reply_len;
static int outfd = -1;

static void *
serve(void *arg)
{
	char buf[65536];
	struct pollfd pfd;
	int c;

	(void)arg;
	for (;;) {
		c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		/* the request's head (and whatever body came with it) */
		pfd.fd = c;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, 200) > 0 && read(c, buf, sizeof(buf)) < 0)
			buf[0] = '\0';
		pthread_mutex_lock(&mu);
		if (reply_len > 0 && write(c, reply, reply_len) < 0)
			buf[0] = '\0';
		pthread_mutex_unlock(&mu);
		shutdown(c, SHUT_WR);
		/* let the client read it all before the socket goes */
		while (poll(&pfd, 1, 1000) > 0 && read(c, buf, sizeof(buf)) > 0)
			;
		close(c);
	}
	return NULL;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	pthread_t t;
	char url[64], home[64];

	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	FUZZ_ASSERT(lfd >= 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	FUZZ_ASSERT(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
	FUZZ_ASSERT(listen(lfd, 16) == 0);
	FUZZ_ASSERT(getsockname(lfd, (struct sockaddr *)&sin, &sl) == 0);
	port = ntohs(sin.sin_port);
	FUZZ_ASSERT(pthread_create(&t, NULL, serve, NULL) == 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	setenv("SBX_URL", url, 1);
	setenv("SBX_KEY", KEY, 1);
	snprintf(home, sizeof(home), "/tmp/sbx-fuzz-cli-home.XXXXXX");
	FUZZ_ASSERT(mkdtemp(home) != NULL);
	setenv("HOME", home, 1);
	unsetenv("SBX_CLI_CONFIG");
	unsetenv("XDG_CONFIG_HOME");
	outfd = memfd_create("fuzz-cli-out", MFD_CLOEXEC);
	FUZZ_ASSERT(outfd >= 0);
	return 0;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static char *const cmds[][8] = {
		{ "sbx", "whoami", NULL },
		{ "sbx", "whoami", "--json", NULL },
		{ "sbx", "npc", "ls", NULL },
		{ "sbx", "npc", "create", "bob", NULL },
		{ "sbx", "status", "bob", NULL },
		{ "sbx", "up", "bob", NULL },
		{ "sbx", "stop", "bob", NULL },
		{ "sbx", "rm", "bob", NULL },
		{ "sbx", "exec", "bob", "--", "echo", "hi", NULL },
		{ "sbx", "cat", "bob:/work/a", NULL },
		{ "sbx", "ls", "bob:/work", NULL },
		{ "sbx", "ls", "bob:/work", "--json", NULL },
		{ "sbx", "egress", "grant", "bob", NULL },
		{ "sbx", "npc", "ls", "--json", NULL },
		{ "sbx", "status", "bob", "--json", NULL },
	};
	const size_t ncmds = sizeof(cmds) / sizeof(cmds[0]);
	char *const *argv;
	int argc, rc, saved1, saved2, is_exec, show;
	char *out;
	off_t olen;

	if (size == 0)
		return 0;
	argv = cmds[data[0] % ncmds];
	is_exec = strcmp(argv[1], "exec") == 0;
	for (argc = 0; argv[argc] != NULL; argc++)
		;
	pthread_mutex_lock(&mu);
	free(reply);
	reply = malloc(size);
	FUZZ_ASSERT(reply != NULL);
	memcpy(reply, data + 1, size - 1);
	reply_len = size - 1;
	pthread_mutex_unlock(&mu);

	show = getenv("FUZZ_CLI_STDERR") != NULL;
	fflush(stdout);
	fflush(stderr);
	saved1 = dup(1);
	saved2 = dup(2);
	FUZZ_ASSERT(ftruncate(outfd, 0) == 0 && lseek(outfd, 0, SEEK_SET) == 0);
	dup2(outfd, 1);
	if (!show)
		dup2(outfd, 2);
	cli_http_set_idle_timeout(5000);
	hint_npc = NULL;
	rc = cli_main(argc, (char **)argv);
	fflush(stdout);
	fflush(stderr);
	dup2(saved1, 1);
	dup2(saved2, 2);
	close(saved1);
	close(saved2);

	if (is_exec)
		FUZZ_ASSERT(rc >= 0 && rc <= 255);
	else
		FUZZ_ASSERT((rc >= 0 && rc <= 5) || rc == 124 || rc == 130 ||
		    rc == 141);
	/* (unless the reply itself carried the key: the CLI may quote what
	 * the server said) */
	olen = lseek(outfd, 0, SEEK_END);
	if (olen > 0 && memmem(data, size, KEY, strlen(KEY)) == NULL) {
		out = mmap(NULL, (size_t)olen, PROT_READ, MAP_SHARED, outfd, 0);
		FUZZ_ASSERT(out != MAP_FAILED);
		FUZZ_ASSERT(memmem(out, (size_t)olen, KEY, strlen(KEY)) == NULL);
		munmap(out, (size_t)olen);
	}
	return 0;
}
