/* engine_cli.c - drive the engine driver by hand against a real runtime (not part of make all); it uses only the driver's public header (driver_engine.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "driver_engine.h"

/*
 * Usage: engine-cli [options] COMMAND [ARGS]
 *   health | sandboxes | ensure ID [egress|no [IMAGE]] | status ID | stop ID | destroy ID
 *   exec ID [-- ARGV...]   (stdin of this tool is sent when -i is given)
 *   read ID PATH           (bytes to stdout)
 *   write ID PATH [MODE]   (bytes from stdin)
 *   list ID PATH
 *   bench ensure|status|exec ID N  (N sequential ops; p50/p99 latency)
 * Options: -s SOCKET -H HELPER -I IMAGE -t TIMEOUT_MS -c OUTPUT_CAP -i -w CWD
 *   -p MS (pause the stream MS after each chunk: a slow reader)
 *   -C MS (cancel the operation after MS)
 * Environment: SBX_RUNTIME, SBX_HELPER, SBX_IMAGE as defaults.
 * Exit: an exec's exit code; 0 ok; 100 + n for an error (code printed).
 */

static struct event_base *base;
static struct sbx_driver *drv;
static struct sbx_op *cur;
static int rc = 0;
static long pause_ms;
static struct event *resume_ev;
static size_t total_out;
static int interrupted;

static void
print_err(const struct sbx_err *err)
{
	fprintf(stderr, "error: %s: %s\n", err->code, err->message);
	rc = 100;
}

static void
print_status(const struct sbx_status *st)
{
	printf("{\"id\":\"%s\",\"state\":\"%s\",\"image\":\"%s\",\"egress\":%d,"
	    "\"created_at\":%lld,\"stop_reason\":\"%s\",\"container\":\"%.12s\"}\n",
	    st->id, sbx_state_name(st->state), st->image, st->egress,
	    (long long)st->created_at_ms, st->stop_reason, st->container_id);
}

static void
status_cb(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	(void)arg;
	cur = NULL;
	if (err != NULL)
		print_err(err);
	else
		print_status(st);
	event_base_loopbreak(base);
}

static void
done_cb(void *arg, const struct sbx_err *err)
{
	(void)arg;
	cur = NULL;
	if (err != NULL)
		print_err(err);
	else
		printf("ok\n");
	event_base_loopbreak(base);
}

static void
sandboxes_cb(void *arg, const struct sbx_err *err, const struct sbx_status *sts,
    size_t n)
{
	size_t i;

	(void)arg;
	cur = NULL;
	if (err != NULL)
		print_err(err);
	for (i = 0; i < n; i++)
		print_status(&sts[i]);
	event_base_loopbreak(base);
}

static void
list_cb(void *arg, const struct sbx_err *err, const struct sbx_dirent *e,
    size_t n, int truncated)
{
	size_t i;

	(void)arg;
	(void)truncated;
	cur = NULL;
	if (err != NULL)
		print_err(err);
	for (i = 0; i < n; i++)
		printf("%s %s %lld 0%o %lld\n", e[i].type, e[i].name,
		    (long long)e[i].size, (unsigned)e[i].mode, (long long)e[i].mtime);
	event_base_loopbreak(base);
}

static void
health_cb(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	(void)arg;
	cur = NULL;
	if (err != NULL)
		print_err(err);
	else
		printf("{\"ok\":%d,\"status\":\"%s\",\"reason\":\"%s\","
		    "\"runtime\":\"%s\",\"api_version\":\"%s\"}\n", h->ok, h->status,
		    h->reason, h->runtime, h->api_version);
	event_base_loopbreak(base);
}

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	sbx_op_resume(cur);
}

static void
sink_start(void *arg, const char *exec_id)
{
	(void)arg;
	fprintf(stderr, "[start %s]\n", exec_id);
}

static void
sink_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct timeval tv;

	(void)arg;
	total_out += len;
	if (fwrite(buf, 1, len, stream == 2 ? stderr : stdout) != len)
		exit(99);
	if (pause_ms > 0) {
		sbx_op_pause(cur);
		tv.tv_sec = pause_ms / 1000;
		tv.tv_usec = (pause_ms % 1000) * 1000;
		evtimer_add(resume_ev, &tv);
	}
}

static void
sink_exit(void *arg, const struct sbx_exit *ex)
{
	(void)arg;
	cur = NULL;
	fflush(stdout);
	fprintf(stderr, "[exit code=%d signal=%s duration_ms=%lld truncated=%d "
	    "bytes=%zu]\n", ex->code, ex->signal != NULL ? ex->signal : "null",
	    (long long)ex->duration_ms, ex->truncated, total_out);
	rc = ex->code;
	event_base_loopbreak(base);
}

static void
sink_error(void *arg, const struct sbx_err *err)
{
	(void)arg;
	cur = NULL;
	fflush(stdout);
	print_err(err);
	event_base_loopbreak(base);
}

static void
cancel_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (cur != NULL) {
		fprintf(stderr, "[cancelled]\n");
		sbx_op_cancel(cur);
		cur = NULL;
		interrupted = 1;
		rc = 98;
		event_base_loopbreak(base);
	}
}

/* Sequential latency of one operation kind, measured in the loop. */
static int bench_left, bench_n;
static const char *bench_kind, *bench_id;
static double *bench_ms;
static struct timespec bench_t0;

static void bench_next(void);

static double
since_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void
bench_record(const struct sbx_err *err)
{
	if (err != NULL) {
		print_err(err);
		event_base_loopbreak(base);
		return;
	}
	bench_ms[bench_n - bench_left] = since_ms(&bench_t0);
	if (--bench_left == 0) {
		event_base_loopbreak(base);
		return;
	}
	bench_next();
}

static void
bench_status_cb(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	(void)arg;
	(void)st;
	bench_record(err);
}

static void
bench_exit(void *arg, const struct sbx_exit *ex)
{
	(void)arg;
	(void)ex;
	bench_record(NULL);
}

static void
bench_error(void *arg, const struct sbx_err *err)
{
	(void)arg;
	bench_record(err);
}

static void
bench_next(void)
{
	static const char *const argv_true[] = { "true", NULL };
	struct sbx_exec_req xr;
	struct sbx_sink sk;
	struct sbx_spec spec;
	struct sbx_err err;

	memset(&xr, 0, sizeof(xr));
	memset(&sk, 0, sizeof(sk));
	memset(&spec, 0, sizeof(spec));
	clock_gettime(CLOCK_MONOTONIC, &bench_t0);
	if (strcmp(bench_kind, "ensure") == 0)
		cur = drv->ops->ensure(drv, bench_id, &spec, bench_status_cb, NULL,
		    &err);
	else if (strcmp(bench_kind, "status") == 0)
		cur = drv->ops->status(drv, bench_id, bench_status_cb, NULL, &err);
	else {
		xr.argv = argv_true;
		sk.exit = bench_exit;
		sk.error = bench_error;
		cur = drv->ops->exec(drv, bench_id, &xr, &sk, &err);
	}
	if (cur == NULL) {
		print_err(&err);
		event_base_loopbreak(base);
	}
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
bench_report(void)
{
	int done = bench_n - bench_left;

	if (done <= 0)
		return;
	qsort(bench_ms, (size_t)done, sizeof(double), cmp_double);
	printf("%s x%d: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", bench_kind, done,
	    bench_ms[done / 2], bench_ms[(done * 99) / 100 < done ?
	    (done * 99) / 100 : done - 1], bench_ms[done - 1]);
}

static struct evbuffer *
read_stdin(void)
{
	struct evbuffer *b = evbuffer_new();

	while (evbuffer_read(b, 0, 65536) > 0)
		;
	return b;
}

int
main(int argc, char **argv)
{
	struct sbx_engine_config cfg;
	struct sbx_exec_req xr;
	struct sbx_sink sink;
	struct sbx_err err;
	struct sbx_spec spec;
	struct evbuffer *in = NULL;
	struct event *cancel_ev = NULL;
	const char *cmd;
	long cancel_ms = 0;
	int ch, use_stdin = 0;

	signal(SIGPIPE, SIG_IGN);   /* as in the broker: EPIPE, not death */
	memset(&cfg, 0, sizeof(cfg));
	memset(&xr, 0, sizeof(xr));
	cfg.runtime_socket = getenv("SBX_RUNTIME");
	cfg.helper_path = getenv("SBX_HELPER");
	cfg.default_image = getenv("SBX_IMAGE");
	while ((ch = getopt(argc, argv, "+s:H:I:t:c:ip:C:w:")) != -1) {
		switch (ch) {
		case 's': cfg.runtime_socket = optarg; break;
		case 'H': cfg.helper_path = optarg; break;
		case 'I': cfg.default_image = optarg; break;
		case 't': xr.timeout_ms = atoll(optarg); break;
		case 'c': xr.output_cap = atoll(optarg); break;
		case 'i': use_stdin = 1; break;
		case 'p': pause_ms = atol(optarg); break;
		case 'C': cancel_ms = atol(optarg); break;
		case 'w': xr.cwd = optarg; break;
		default: return 2;
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1) {
		fprintf(stderr, "usage: engine-cli [opts] COMMAND [ARGS]\n");
		return 2;
	}
	cmd = argv[0];
	cfg.exec_timeout_ms.ceiling = 600000;
	cfg.exec_output_cap = 1LL << 40;
	cfg.file_max_bytes = 1LL << 32;
	base = event_base_new();
	resume_ev = evtimer_new(base, resume_cb, NULL);
	if ((drv = sbx_engine_driver_new(base, &cfg, &err)) == NULL) {
		print_err(&err);
		return 100;
	}
	memset(&sink, 0, sizeof(sink));
	sink.start = sink_start;
	sink.output = sink_output;
	sink.exit = sink_exit;
	sink.error = sink_error;
	memset(&spec, 0, sizeof(spec));
	if (strcmp(cmd, "health") == 0) {
		cur = drv->ops->health(drv, health_cb, NULL, &err);
	} else if (strcmp(cmd, "sandboxes") == 0) {
		cur = drv->ops->list_sandboxes(drv, sandboxes_cb, NULL, &err);
	} else if (argc < 2) {
		fprintf(stderr, "missing ID\n");
		return 2;
	} else if (strcmp(cmd, "bench") == 0 && argc > 3) {
		bench_kind = argv[1];
		bench_id = argv[2];
		bench_n = bench_left = atoi(argv[3]);
		if (bench_n <= 0 || (bench_ms = calloc((size_t)bench_n,
		    sizeof(double))) == NULL)
			return 2;
		bench_next();
		if (cur == NULL)
			return 100;
		event_base_dispatch(base);
		bench_report();
		free(bench_ms);
		sbx_driver_free(drv);
		event_free(resume_ev);
		event_base_free(base);
		return rc;
	} else if (strcmp(cmd, "ensure") == 0) {
		spec.egress = argc > 2 && strcmp(argv[2], "egress") == 0;
		spec.image = argc > 3 ? argv[3] : NULL;
		cur = drv->ops->ensure(drv, argv[1], &spec, status_cb, NULL, &err);
	} else if (strcmp(cmd, "status") == 0) {
		cur = drv->ops->status(drv, argv[1], status_cb, NULL, &err);
	} else if (strcmp(cmd, "stop") == 0) {
		cur = drv->ops->stop(drv, argv[1], done_cb, NULL, &err);
	} else if (strcmp(cmd, "destroy") == 0) {
		cur = drv->ops->destroy(drv, argv[1], done_cb, NULL, &err);
	} else if (strcmp(cmd, "exec") == 0) {
		xr.argv = (const char *const *)argv + 2;
		if (argc > 2 && strcmp(argv[2], "--") == 0)
			xr.argv++;
		if (use_stdin) {
			in = read_stdin();
			xr.stdin_len = evbuffer_get_length(in);
			xr.stdin_data = evbuffer_pullup(in, -1);
			if (xr.stdin_data == NULL)
				xr.stdin_data = (const unsigned char *)"";
		}
		cur = drv->ops->exec(drv, argv[1], &xr, &sink, &err);
	} else if (strcmp(cmd, "read") == 0 && argc > 2) {
		cur = drv->ops->read(drv, argv[1], argv[2], &sink, &err);
	} else if (strcmp(cmd, "write") == 0 && argc > 2) {
		in = read_stdin();
		cur = drv->ops->write(drv, argv[1], argv[2],
		    argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 8) : 0, in, done_cb,
		    NULL, &err);
	} else if (strcmp(cmd, "list") == 0 && argc > 2) {
		cur = drv->ops->list(drv, argv[1], argv[2], NULL, list_cb, NULL, &err);
	} else {
		fprintf(stderr, "unknown command\n");
		return 2;
	}
	if (cur == NULL) {
		print_err(&err);
		return 100;
	}
	if (cancel_ms > 0) {
		struct timeval tv = { cancel_ms / 1000, (cancel_ms % 1000) * 1000 };

		cancel_ev = evtimer_new(base, cancel_cb, NULL);
		evtimer_add(cancel_ev, &tv);
	}
	event_base_dispatch(base);
	if (interrupted) {
		/* Let the fire-and-forget kill exec finish before leaving. */
		struct timeval tv = { 3, 0 };

		event_base_loopexit(base, &tv);
		event_base_dispatch(base);
	}
	if (cancel_ev != NULL)
		event_free(cancel_ev);
	event_free(resume_ev);
	sbx_driver_free(drv);
	if (in != NULL)
		evbuffer_free(in);
	event_base_free(base);
	return rc;
}
