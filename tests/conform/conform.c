/* conform.c - the driver conformance suite: the rules block of sbx_driver.h asserted on the fake, the broker-client driver (real broker on the fake over a unix socket) and the engine driver (SBX_CONFORM_RUNTIME). */
#include <sys/stat.h>

#include <setjmp.h>
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

#include "broker.h"
#include "conform.h"
#include "driver_broker.h"
#include "driver_engine.h"
#include "driver_kube.h"
#include "driver_vm.h"
#include "sbx_call.h"
#include "sbx_config.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_token.h"

static const struct conform_target *T;
static struct event_base *B;
static struct sbx_driver *D;

/* What the callbacks saw. in_call: a driver call is running (a callback
 * then is too early). */
static struct {
	int in_call, early, terminals, started, after_start;
	struct sbx_err err;
	struct sbx_status st;
	struct sbx_exit ex;
	char out[4096];
	size_t outlen;
	int64_t total;
	struct sbx_dirent ents[16];
	size_t nents;
	int found;
	const char *want_id;
} R;

static void
reset(void)
{
	memset(&R, 0, sizeof(R));
}

static void
terminal(const struct sbx_err *err)
{
	if (R.in_call)
		R.early++;
	R.terminals++;
	if (err != NULL)
		R.err = *err;
}

static void
status_cb(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	(void)arg;
	if (st != NULL)
		R.st = *st;
	terminal(err);
}

static void
done_cb(void *arg, const struct sbx_err *err)
{
	(void)arg;
	terminal(err);
}

static void
list_cb(void *arg, const struct sbx_err *err, const struct sbx_dirent *e,
    size_t n, int truncated)
{
	(void)arg;
	(void)truncated;
	R.nents = n < 16 ? n : 16;
	if (e != NULL)
		memcpy(R.ents, e, R.nents * sizeof(*e));
	terminal(err);
}

static void
sandboxes_cb(void *arg, const struct sbx_err *err, const struct sbx_status *s,
    size_t n)
{
	size_t i;

	(void)arg;
	for (i = 0; i < n; i++)
		if (R.want_id != NULL && strcmp(s[i].id, R.want_id) == 0)
			R.found = 1;
	terminal(err);
}

static void
health_cb(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	(void)arg;
	if (h != NULL)
		R.found = h->ok;
	terminal(err);
}

static void
s_start(void *arg, const char *exec_id)
{
	(void)arg;
	(void)exec_id;
	if (R.in_call)
		R.early++;
	R.started++;
}

static void
s_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	(void)arg;
	(void)stream;
	if (R.in_call)
		R.early++;
	if (R.terminals > 0)
		R.after_start = -1;   /* output after the end */
	R.total += (int64_t)len;
	if (R.outlen + len < sizeof(R.out)) {
		memcpy(R.out + R.outlen, buf, len);
		R.outlen += len;
	}
}

static void
s_exit(void *arg, const struct sbx_exit *ex)
{
	(void)arg;
	R.ex = *ex;
	R.ex.signal = NULL;
	terminal(NULL);
}

static void
s_error(void *arg, const struct sbx_err *err)
{
	(void)arg;
	terminal(err);
}

static const struct sbx_sink SINK = { s_start, s_output, s_exit, s_error, NULL, NULL };

/* Runs the loop until a terminal callback came or the target's timeout. */
static void
wait_terminal(void)
{
	struct timeval tick = { 0, 10 * 1000 };
	int waited = 0;

	while (R.terminals == 0 && waited < T->timeout_ms) {
		event_base_loopexit(B, &tick);
		event_base_dispatch(B);
		waited += 10;
	}
	assert_int_equal(R.terminals, 1);
	assert_int_equal(R.early, 0);
}

static void
spin(int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(B, &tv);
	event_base_dispatch(B);
}

#define CALL(h, expr) do { R.in_call = 1; (h) = (expr); R.in_call = 0; } while (0)

/* A unique id per test and target run. */
static const char *
tid(const char *stem)
{
	static char id[64];

	snprintf(id, sizeof(id), "conf-%s-%ld", stem, (long)getpid());
	return id;
}

static void
ensure_ok(const char *id)
{
	struct sbx_spec spec;
	struct sbx_err err;
	struct sbx_op *op;

	memset(&spec, 0, sizeof(spec));
	reset();
	sbx_err_clear(&err);
	CALL(op, D->ops->ensure(D, id, &spec, status_cb, NULL, &err));
	assert_non_null(op);
	wait_terminal();
	assert_string_equal(R.err.code, "");
	assert_int_equal(R.st.state, SBX_STATE_RUNNING);
}

static void
destroy_quiet(const char *id)
{
	struct sbx_err err;
	struct sbx_op *op;

	reset();
	CALL(op, D->ops->destroy(D, id, done_cb, NULL, &err));
	if (op != NULL)
		wait_terminal();
}

/* Starts an exec of argv (a fake is scripted with steps instead). */
static struct sbx_op *
exec_start(const char *id, const char *const *argv, int64_t cap,
    const struct sbx_fake_step *steps, size_t n)
{
	struct sbx_exec_req req;
	struct sbx_err err;
	struct sbx_op *op;

	if (T->script != NULL)
		T->script(steps, n);
	memset(&req, 0, sizeof(req));
	req.argv = argv;
	req.output_cap = cap;
	reset();
	sbx_err_clear(&err);
	CALL(op, D->ops->exec(D, id, &req, &SINK, &err));
	if (op == NULL)
		R.err = err;
	return op;
}

/* ---------------------------------------------------------------- tests */

static const char *const bad_ids[] = { "", "A", "-a", "a_b", "a/b", "a b",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL };

/* Rules block: a bad id is refused at the call (NULL, invalid_id, the one
 * sentence of the id rule), with no callback ever. */
static void
test_bad_ids_refused(void **state)
{
	const char *argv[] = { "true", NULL };
	struct sbx_exec_req req = { .argv = argv };
	struct sbx_list_page page = { NULL, 10 };
	struct evbuffer *body = evbuffer_new();
	struct sbx_spec spec;
	struct sbx_err err;
	struct sbx_op *op;
	size_t i, k;

	(void)state;
	memset(&spec, 0, sizeof(spec));
	reset();
	for (i = 0; bad_ids[i] != NULL; i++) {
		for (k = 0; k < 8; k++) {
			const char *id = bad_ids[i];

			sbx_err_clear(&err);
			R.in_call = 1;
			switch (k) {
			case 0: op = D->ops->ensure(D, id, &spec, status_cb, NULL, &err); break;
			case 1: op = D->ops->status(D, id, status_cb, NULL, &err); break;
			case 2: op = D->ops->exec(D, id, &req, &SINK, &err); break;
			case 3: op = D->ops->read(D, id, "/work/f", &SINK, &err); break;
			case 4: op = D->ops->write(D, id, "/work/f", 0644, body, done_cb, NULL, &err); break;
			case 5: op = D->ops->list(D, id, "/work", &page, list_cb, NULL, &err); break;
			case 6: op = D->ops->stop(D, id, done_cb, NULL, &err); break;
			default: op = D->ops->destroy(D, id, done_cb, NULL, &err); break;
			}
			R.in_call = 0;
			if (op != NULL || strcmp(err.code, SBX_E_INVALID_ID) != 0 ||
			    strcmp(err.message, SBX_MSG_BAD_ID) != 0)
				fail_msg("%s: op %zu with id \"%s\": %s (%s: %s)",
				    T->name, k, id, op ? "accepted" : "refused",
				    err.code, err.message);
		}
	}
	spin(50);
	assert_int_equal(R.terminals + R.started, 0);
	evbuffer_free(body);
}

static const char *const bad_paths[] = { "/etc/passwd", "/work/../etc",
    "/workspace", "/work/", "work/a", "/work//a", "/work/./a", "/work/a\001b",
    "/work/\xe2\x80\xa4\xe2\x80\xa4", "", NULL };

/* SPEC §4 path rules: refused at the call with path_outside_work. */
static void
test_bad_paths_refused(void **state)
{
	const char *argv[] = { "true", NULL };
	struct sbx_exec_req req = { .argv = argv };
	struct sbx_list_page page = { NULL, 10 };
	struct evbuffer *body = evbuffer_new();
	const char *id = tid("paths");
	struct sbx_err err;
	struct sbx_op *op;
	size_t i, k;

	(void)state;
	reset();
	for (i = 0; bad_paths[i] != NULL; i++) {
		for (k = 0; k < 4; k++) {
			const char *p = bad_paths[i];

			sbx_err_clear(&err);
			req.cwd = p;
			R.in_call = 1;
			switch (k) {
			case 0: op = D->ops->read(D, id, p, &SINK, &err); break;
			case 1: op = D->ops->write(D, id, p, 0644, body, done_cb, NULL, &err); break;
			case 2: op = D->ops->list(D, id, p, &page, list_cb, NULL, &err); break;
			default: op = D->ops->exec(D, id, &req, &SINK, &err); break;
			}
			R.in_call = 0;
			if (op != NULL || strcmp(err.code, SBX_E_PATH_OUTSIDE_WORK) != 0)
				fail_msg("%s: op %zu with path #%zu: %s (%s)", T->name,
				    k, i, op ? "accepted" : "refused", err.code);
		}
	}
	spin(50);
	assert_int_equal(R.terminals + R.started, 0);
	evbuffer_free(body);
}

/* status of an unknown id: state absent, no error. */
static void
test_status_unknown_is_absent(void **state)
{
	struct sbx_err err;
	struct sbx_op *op;

	(void)state;
	reset();
	R.st.state = SBX_STATE_RUNNING;
	CALL(op, D->ops->status(D, tid("nobody"), status_cb, NULL, &err));
	assert_non_null(op);
	wait_terminal();
	assert_string_equal(R.err.code, "");
	assert_int_equal(R.st.state, SBX_STATE_ABSENT);
}

/* ensure is idempotent: twice gives the same running sandbox. */
static void
test_ensure_idempotent(void **state)
{
	const char *id = tid("ens");
	char cid[72];
	int64_t created;

	(void)state;
	ensure_ok(id);
	snprintf(cid, sizeof(cid), "%s", R.st.container_id);
	created = R.st.created_at_ms;
	ensure_ok(id);
	assert_string_equal(R.st.id, id);
	assert_string_equal(R.st.container_id, cid);
	assert_true(R.st.created_at_ms == created);
	destroy_quiet(id);
}

/* exec: start, output, exactly one exit with the process's status. */
static void
test_exec_exit_code(void **state)
{
	const char *id = tid("exec");
	const char *argv[] = { "sh", "-c", "printf hello; exit 3", NULL };
	const struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "hello" },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 3 },
	};

	(void)state;
	ensure_ok(id);
	assert_non_null(exec_start(id, argv, 0, steps, 2));
	wait_terminal();
	assert_string_equal(R.err.code, "");
	assert_int_equal(R.started, 1);
	assert_int_equal(R.ex.code, 3);
	assert_int_equal(R.ex.truncated, 0);
	assert_int_equal(R.outlen, 5);
	assert_memory_equal(R.out, "hello", 5);
	spin(50);
	assert_int_equal(R.terminals, 1);
	assert_int_equal(R.after_start, 0);
	destroy_quiet(id);
}

/* Output cap: exactly cap bytes, then killed, truncated 1. */
static void
test_exec_output_cap(void **state)
{
	const char *id = tid("cap");
	const char *argv[] = { "sh", "-c", "yes 0123456789abcdef | head -c 100000", NULL };
	const struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1,
		  .data = "0123456789abcdef\n", .repeat = 6000 },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};

	(void)state;
	ensure_ok(id);
	assert_non_null(exec_start(id, argv, 1000, steps, 2));
	wait_terminal();
	assert_string_equal(R.err.code, "");
	assert_int_equal(R.total, 1000);
	assert_int_equal(R.ex.truncated, 1);
	destroy_quiet(id);
}

/* exec in an absent sandbox: not_found through sink->error. */
static void
test_exec_absent_not_found(void **state)
{
	const char *argv[] = { "true", NULL };
	const struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};

	(void)state;
	assert_non_null(exec_start(tid("absent"), argv, 0, steps, 1));
	wait_terminal();
	assert_string_equal(R.err.code, SBX_E_NOT_FOUND);
	assert_int_equal(R.started, 0);
}

/* cancel: no callback afterwards. */
static void
test_exec_cancel_silences(void **state)
{
	const char *id = tid("cancel");
	const char *argv[] = { "sh", "-c", "echo x; sleep 30", NULL };
	const struct sbx_fake_step steps[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "x\n" },
		{ .kind = SBX_FAKE_STEP_HANG },
	};
	struct timeval tick = { 0, 10 * 1000 };
	struct sbx_op *op;
	int waited = 0;

	(void)state;
	ensure_ok(id);
	op = exec_start(id, argv, 0, steps, 2);
	assert_non_null(op);
	while (R.total == 0 && R.terminals == 0 && waited < T->timeout_ms) {
		event_base_loopexit(B, &tick);
		event_base_dispatch(B);
		waited += 10;
	}
	assert_int_equal(R.terminals, 0);
	assert_int_equal(R.total, 2);
	sbx_op_cancel(op);
	spin(300);
	assert_int_equal(R.terminals, 0);
	assert_int_equal(R.total, 2);
	destroy_quiet(id);
}

/* write then read and list: the same bytes, mode and size. */
static void
test_write_read_list(void **state)
{
	const char *id = tid("files");
	struct sbx_list_page page = { NULL, 10 };
	struct evbuffer *body = evbuffer_new();
	struct sbx_err err;
	struct sbx_op *op;

	(void)state;
	ensure_ok(id);
	evbuffer_add(body, "conformance\n", 12);
	reset();
	CALL(op, D->ops->write(D, id, "/work/d/f.txt", 0600, body, done_cb, NULL,
	    &err));
	assert_non_null(op);
	wait_terminal();
	assert_string_equal(R.err.code, "");
	evbuffer_free(body);

	reset();
	CALL(op, D->ops->read(D, id, "/work/d/f.txt", &SINK, &err));
	assert_non_null(op);
	wait_terminal();
	assert_string_equal(R.err.code, "");
	assert_int_equal(R.ex.code, 0);
	assert_int_equal(R.outlen, 12);
	assert_memory_equal(R.out, "conformance\n", 12);

	reset();
	CALL(op, D->ops->list(D, id, "/work/d", &page, list_cb, NULL, &err));
	assert_non_null(op);
	wait_terminal();
	assert_string_equal(R.err.code, "");
	assert_int_equal(R.nents, 1);
	assert_string_equal(R.ents[0].name, "f.txt");
	assert_string_equal(R.ents[0].type, "file");
	assert_int_equal(R.ents[0].size, 12);
	assert_int_equal(R.ents[0].mode, 0600);
	destroy_quiet(id);
}

/* read of a missing file: not_found. */
static void
test_read_missing_not_found(void **state)
{
	const char *id = tid("nofile");
	struct sbx_err err;
	struct sbx_op *op;

	(void)state;
	ensure_ok(id);
	reset();
	CALL(op, D->ops->read(D, id, "/work/none", &SINK, &err));
	assert_non_null(op);
	wait_terminal();
	assert_string_equal(R.err.code, SBX_E_NOT_FOUND);
	assert_int_equal(R.outlen, 0);
	destroy_quiet(id);
}

/* stop keeps the sandbox (stopped); destroy is idempotent; stop of an
 * absent sandbox is not_found. */
static void
test_stop_destroy_idempotent(void **state)
{
	const char *id = tid("life");
	struct sbx_err err;
	struct sbx_op *op;
	int i;

	(void)state;
	ensure_ok(id);
	reset();
	CALL(op, D->ops->stop(D, id, done_cb, NULL, &err));
	assert_non_null(op);
	wait_terminal();
	assert_string_equal(R.err.code, "");
	reset();
	CALL(op, D->ops->status(D, id, status_cb, NULL, &err));
	assert_non_null(op);
	wait_terminal();
	assert_int_equal(R.st.state, SBX_STATE_STOPPED);
	for (i = 0; i < 2; i++) {
		reset();
		CALL(op, D->ops->destroy(D, id, done_cb, NULL, &err));
		assert_non_null(op);
		wait_terminal();
		assert_string_equal(R.err.code, "");
	}
	reset();
	CALL(op, D->ops->status(D, id, status_cb, NULL, &err));
	assert_non_null(op);
	wait_terminal();
	assert_int_equal(R.st.state, SBX_STATE_ABSENT);
	reset();
	CALL(op, D->ops->stop(D, id, done_cb, NULL, &err));
	if (op != NULL)
		wait_terminal();
	else
		R.err = err;
	assert_string_equal(R.err.code, SBX_E_NOT_FOUND);
}

/* list_sandboxes names an ensured sandbox; health answers ok. */
static void
test_list_sandboxes_and_health(void **state)
{
	const char *id = tid("ls");
	struct sbx_err err;
	struct sbx_op *op;

	(void)state;
	ensure_ok(id);
	reset();
	R.want_id = id;
	CALL(op, D->ops->list_sandboxes(D, sandboxes_cb, NULL, &err));
	assert_non_null(op);
	wait_terminal();
	assert_string_equal(R.err.code, "");
	assert_int_equal(R.found, 1);
	reset();
	CALL(op, D->ops->health(D, health_cb, NULL, &err));
	assert_non_null(op);
	wait_terminal();
	assert_int_equal(R.found, 1);
	destroy_quiet(id);
}

/* The call layer checks before the driver: a bad id never reaches it. */
static void
test_call_layer_checks_once(void **state)
{
	struct sbx_call_counts c0, c1;
	struct sbx_err err;
	struct sbx_op *op;

	(void)state;
	sbx_call_counts(&c0);
	reset();
	CALL(op, sbx_call_status(D, "Bad", status_cb, NULL, &err));
	assert_null(op);
	assert_string_equal(err.code, SBX_E_INVALID_ID);
	assert_string_equal(err.message, SBX_MSG_BAD_ID);
	CALL(op, sbx_call_read(D, tid("x"), "/work/..", &SINK, &err));
	assert_null(op);
	assert_string_equal(err.code, SBX_E_PATH_OUTSIDE_WORK);
	sbx_call_counts(&c1);
	assert_true(c1.checks_failed == c0.checks_failed + 2);
	assert_true(c1.calls[SBX_CALL_STATUS] == c0.calls[SBX_CALL_STATUS] + 1);
	spin(20);
	assert_int_equal(R.terminals, 0);
}

static int
group_up(void **state)
{
	(void)state;
	return T->up(&B, &D);
}

static int
group_down(void **state)
{
	(void)state;
	T->down();
	B = NULL;
	D = NULL;
	return 0;
}

int
conform_run(const struct conform_target *t)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_ids_refused),
		cmocka_unit_test(test_bad_paths_refused),
		cmocka_unit_test(test_status_unknown_is_absent),
		cmocka_unit_test(test_ensure_idempotent),
		cmocka_unit_test(test_exec_exit_code),
		cmocka_unit_test(test_exec_output_cap),
		cmocka_unit_test(test_exec_absent_not_found),
		cmocka_unit_test(test_exec_cancel_silences),
		cmocka_unit_test(test_write_read_list),
		cmocka_unit_test(test_read_missing_not_found),
		cmocka_unit_test(test_stop_destroy_idempotent),
		cmocka_unit_test(test_list_sandboxes_and_health),
		cmocka_unit_test(test_call_layer_checks_once),
	};

	T = t;
	return _cmocka_run_group_tests(t->name, tests,
	    sizeof(tests) / sizeof(tests[0]), group_up, group_down);
}

/* ---------------------------------------------------------------- targets */

/* 1: the fake itself. */
static struct event_base *fk_base;
static struct sbx_driver *fk_drv;

static void
fake_script(const struct sbx_fake_step *steps, size_t n)
{
	sbx_fake_set_exec_script(fk_drv, steps, n);
}

static int
fake_up(struct event_base **base, struct sbx_driver **drv)
{
	if ((fk_base = event_base_new()) == NULL ||
	    (fk_drv = sbx_fake_driver_new(fk_base)) == NULL)
		return -1;
	*base = fk_base;
	*drv = fk_drv;
	return 0;
}

static void
fake_down(void)
{
	sbx_driver_free(fk_drv);
	event_base_free(fk_base);
	fk_drv = NULL;
	fk_base = NULL;
}

/* 2: the broker-client driver against a real broker (this process, unix
 * socket) that runs on the fake. */
#define BTOKEN "conform-broker-token-3c1d9e7f5a2b"
static struct broker_config bk_cfg;
static struct broker_server *bk_server;
static struct sbx_driver *bk_client;
static char bk_dir[64];

static int
broker_up(struct event_base **base, struct sbx_driver **drv)
{
	char listen[128];
	const char *argv[] = { "conform", "--listen", listen, "--state-dir",
	    bk_dir, "--image", "img-a", "--helper-path",
	    "/nonexistent/sbx-helper" };
	struct sbx_broker_config bc;
	struct sbx_token tok;
	struct sbx_err err;
	char addr[140];

	if (fake_up(base, drv) != 0)
		return -1;
	snprintf(bk_dir, sizeof(bk_dir), "/tmp/sbx-conform.XXXXXX");
	if (mkdtemp(bk_dir) == NULL)
		return -1;
	snprintf(listen, sizeof(listen), "unix:%s/broker.sock", bk_dir);
	memset(&bk_cfg, 0, sizeof(bk_cfg));
	if (sbx_config_load(broker_config_keys, &bk_cfg, 9, (char **)argv,
	    NULL, &err) != 0 ||
	    broker_config_finish(&bk_cfg, "/x/sandbox-broker", &err) != 0 ||
	    sbx_token_set(&tok, BTOKEN, strlen(BTOKEN), &err) != 0)
		goto fail;
	bk_server = broker_server_new(fk_base, &bk_cfg, fk_drv, &tok, &err);
	sbx_token_clear(&tok);
	if (bk_server == NULL || broker_server_listen(bk_server, &err) != 0)
		goto fail;
	snprintf(addr, sizeof(addr), "unix:%s/broker.sock", bk_dir);
	memset(&bc, 0, sizeof(bc));
	bc.address = addr;
	bc.token = BTOKEN;
	bc.token_len = strlen(BTOKEN);
	if ((bk_client = sbx_broker_driver_new(fk_base, &bc, &err)) == NULL)
		goto fail;
	*drv = bk_client;
	return 0;
fail:
	fprintf(stderr, "broker target: %s: %s\n", err.code, err.message);
	return -1;
}

static void
broker_down(void)
{
	char cmd[128];

	sbx_driver_free(bk_client);
	broker_server_free(bk_server);
	sbx_config_free(broker_config_keys, &bk_cfg);
	bk_client = NULL;
	bk_server = NULL;
	fake_down();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", bk_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", bk_dir);
}

/* 3: the engine driver on the runtime at SBX_CONFORM_RUNTIME
 * ("unix:///path", as the harness's SBX_RUNTIME_HOST). */
static struct event_base *en_base;
static struct sbx_driver *en_drv;

static int
engine_up(struct event_base **base, struct sbx_driver **drv)
{
	const char *rt = getenv("SBX_CONFORM_RUNTIME");
	const char *image = getenv("SBX_TEST_IMAGE");
	const char *helper = getenv("SBX_CONFORM_HELPER");
	struct sbx_engine_config cfg;
	struct sbx_err err;

	if (rt == NULL || helper == NULL) {
		fprintf(stderr, "engine target: SBX_CONFORM_RUNTIME and "
		    "SBX_CONFORM_HELPER are required\n");
		return -1;
	}
	if (strncmp(rt, "unix://", 7) == 0)
		rt += 7;
	memset(&cfg, 0, sizeof(cfg));
	cfg.runtime_socket = rt;
	cfg.default_image = image != NULL ? image : "sbx-test:latest";
	cfg.helper_path = helper;
	cfg.name_prefix = "sbxconf-";
	/* SBX_CONFORM_AGENT_CHANNEL=runtime: the agent's runtime exec stream
	 * only (adr/0066); else the direct channel where reachable. */
	cfg.agent_runtime_only = getenv("SBX_CONFORM_AGENT_CHANNEL") != NULL &&
	    strcmp(getenv("SBX_CONFORM_AGENT_CHANNEL"), "runtime") == 0;
	if ((en_base = event_base_new()) == NULL)
		return -1;
	if ((en_drv = sbx_engine_driver_new(en_base, &cfg, &err)) == NULL) {
		fprintf(stderr, "engine target: %s: %s\n", err.code, err.message);
		return -1;
	}
	*base = en_base;
	*drv = en_drv;
	return 0;
}

static void
engine_down(void)
{
	sbx_driver_free(en_drv);
	event_base_free(en_base);
	en_drv = NULL;
	en_base = NULL;
}

/* 4: the vm driver (adr/0069): boot files and root disks in
 * SBX_CONFORM_VM_DIR (deploy/vm/build.sh), sandboxes under a fresh state
 * directory, the image SBX_TEST_IMAGE; SBX_CONFORM_VM_ACCEL forces one. */
static struct event_base *vm_base;
static struct sbx_driver *vm_drv;
static char vm_state[256];

static int
vm_up(struct event_base **base, struct sbx_driver **drv)
{
	const char *dir = getenv("SBX_CONFORM_VM_DIR");
	const char *image = getenv("SBX_TEST_IMAGE");
	struct sbx_vm_config cfg;
	struct sbx_err err;

	if (dir == NULL) {
		fprintf(stderr, "vm target: SBX_CONFORM_VM_DIR is required\n");
		return -1;
	}
	/* SBX_CONFORM_VM_STATE: the caller's (it kills what a failed test
	 * left running there); else a fresh one removed by vm_down. */
	if (getenv("SBX_CONFORM_VM_STATE") != NULL)
		snprintf(vm_state, sizeof(vm_state), "%s", getenv("SBX_CONFORM_VM_STATE"));
	else {
		snprintf(vm_state, sizeof(vm_state), "/tmp/sbx-conform-vm.XXXXXX");
		if (mkdtemp(vm_state) == NULL)
			return -1;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.state_dir = vm_state;
	cfg.vm_dir = dir;
	cfg.default_image = image != NULL ? image : "sbx-test:latest";
	cfg.accel = getenv("SBX_CONFORM_VM_ACCEL");
	cfg.runas = "sbx-vm";   /* the broker's default (deps.sh, tests/run.sh make it) */
	cfg.memory_bytes = 256LL << 20;
	cfg.work_bytes = 256LL << 20;
	cfg.stop_timeout_ms = 20000;
	cfg.boot_timeout_ms = 150000;
	if ((vm_base = event_base_new()) == NULL)
		return -1;
	if ((vm_drv = sbx_vm_driver_new(vm_base, &cfg, &err)) == NULL) {
		fprintf(stderr, "vm target: %s: %s\n", err.code, err.message);
		return -1;
	}
	*base = vm_base;
	*drv = vm_drv;
	return 0;
}

static void
vm_down(void)
{
	char cmd[300];

	sbx_driver_free(vm_drv);
	event_base_free(vm_base);
	vm_drv = NULL;
	vm_base = NULL;
	if (getenv("SBX_CONFORM_VM_STATE") != NULL)
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", vm_state);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", vm_state);
}

/* 5: the kubernetes driver on the API server SBX_CONFORM_KUBE_SERVER
 * (CA, token file and namespace beside it; tests/k8s's fake in
 * tests/integration/test_kube_driver.py), pods of SBX_TEST_IMAGE with
 * the helper from SBX_CONFORM_KUBE_HELPER_IMAGE (adr/0072). */
static struct event_base *ku_base;
static struct sbx_driver *ku_drv;

static int
kube_up(struct event_base **base, struct sbx_driver **drv)
{
	const char *image = getenv("SBX_TEST_IMAGE");
	struct sbx_kube_config cfg;
	struct sbx_err err;

	memset(&cfg, 0, sizeof(cfg));
	cfg.server = getenv("SBX_CONFORM_KUBE_SERVER");
	cfg.ca_file = getenv("SBX_CONFORM_KUBE_CA");
	cfg.token_file = getenv("SBX_CONFORM_KUBE_TOKEN_FILE");
	cfg.namespace_ = getenv("SBX_CONFORM_KUBE_NAMESPACE");
	cfg.helper_image = getenv("SBX_CONFORM_KUBE_HELPER_IMAGE");
	cfg.default_image = image != NULL ? image : "sbx-test:latest";
	cfg.force_after_ms = 5000;
	if ((ku_base = event_base_new()) == NULL)
		return -1;
	if ((ku_drv = sbx_kube_driver_new(ku_base, &cfg, &err)) == NULL) {
		fprintf(stderr, "kube target: %s: %s\n", err.code, err.message);
		return -1;
	}
	*base = ku_base;
	*drv = ku_drv;
	return 0;
}

static void
kube_down(void)
{
	sbx_driver_free(ku_drv);
	event_base_free(ku_base);
	ku_drv = NULL;
	ku_base = NULL;
}

static const struct conform_target targets[] = {
	{ "conform/fake", fake_up, fake_down, fake_script, 5000 },
	{ "conform/broker-client", broker_up, broker_down, fake_script, 10000 },
	{ "conform/engine", engine_up, engine_down, NULL, 180000 },
	{ "conform/vm", vm_up, vm_down, NULL, 180000 },
	{ "conform/kube", kube_up, kube_down, NULL, 180000 },
};

/*
 * SBX_CONFORM_TARGETS: comma-separated of "fake", "broker", "engine", "vm", "kube"
 * (default "fake,broker": what `make unit` can run without a runtime;
 * tests/integration/test_conform.py runs "engine" on each runtime).
 */
int
main(void)
{
	const char *want = getenv("SBX_CONFORM_TARGETS");
	int failed = 0;

	sbx_log_init("conform", 2, SBX_LOG_ERROR);
	if (want == NULL || *want == '\0')
		want = "fake,broker";
	if (strstr(want, "fake") != NULL)
		failed += conform_run(&targets[0]);
	if (strstr(want, "broker") != NULL)
		failed += conform_run(&targets[1]);
	if (strstr(want, "engine") != NULL)
		failed += conform_run(&targets[2]);
	if (strstr(want, "vm") != NULL)
		failed += conform_run(&targets[3]);
	if (strstr(want, "kube") != NULL)
		failed += conform_run(&targets[4]);
	return failed != 0;
}
