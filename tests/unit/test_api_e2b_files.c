/* test_api_e2b_files.c - envd's plain HTTP for E2B's files (api/api_e2b_files.c, adr/0061) through the api's real envd route on the fake driver's files: an octet-stream write streamed through the gate and read back, a multipart upload of several files split into its parts, /health, and refusals in E2B's {"code","message"} shape (outside /work 403 with sbx's sentence, a missing file 404, a bad multipart 400, a bad method 405), Connect's filesystem methods refusing outside /work before the driver is asked. */
#include "api_e2b_path.h"
#include "api_testutil.h"
#include "driver_fake.h"
#include "sbx_driver.h"
#include "sbx_http_client.h"

static char KA[SBX_TOKEN_GEN_LEN + 1];
static char KB[SBX_TOKEN_GEN_LEN + 1];
static char KOP[SBX_TOKEN_GEN_LEN + 1];
static char SID[64], TOKEN[128];

static void
on_response(void *arg, struct sbx_http_req *req, int status)
{
	struct tu_res *r = arg;
	const char *v;

	r->status = status;
	if ((v = sbx_http_req_header(req, "Content-Type")) != NULL)
		snprintf(r->ctype, sizeof(r->ctype), "%s", v);
}

static void
on_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	(void)req;
	evbuffer_add(((struct tu_res *)arg)->body, buf, len);
}

static void
on_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct tu_res *r = arg;

	(void)req;
	r->req = NULL;
	r->done = 1;
	if (err != NULL)
		r->failed = 1;
}

/* One envd request: method, path (under /e2b/envd), body, its type. */
static void
envd(struct tu_res *r, const char *method, const char *path, const char *ctype,
    const void *body, size_t blen)
{
	struct sbx_http_request hr;
	struct sbx_http_cbs cbs;
	struct sbx_err err;
	char addr[64], id[128], tok[192], full[512];
	const char *hdrs[4];

	tu_res_free(r);
	r->body = evbuffer_new();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", T.port);
	snprintf(full, sizeof(full), "/e2b/envd%s", path);
	snprintf(id, sizeof(id), "E2b-Sandbox-Id: %s", SID);
	snprintf(tok, sizeof(tok), "X-Access-Token: %s", TOKEN);
	hdrs[0] = id;
	hdrs[1] = tok;
	hdrs[2] = NULL;
	memset(&hr, 0, sizeof(hr));
	hr.method = method;
	hr.path = full;
	hr.headers = hdrs;
	hr.body = body;
	hr.body_len = blen;
	hr.content_type = ctype;
	memset(&cbs, 0, sizeof(cbs));
	cbs.response = on_response;
	cbs.body = on_body;
	cbs.done = on_done;
	cbs.arg = r;
	r->req = sbx_http_request(T.base, addr, &hr, NULL, &cbs, &err);
	assert_non_null(r->req);
	assert_true(tu_loop_until(tu_is_done, r, 10000));
}

/* An error reply in E2B's shape: {"code":status,"message":...}; its message. */
static void
assert_e2b_error(struct tu_res *r, int status, const char *message)
{
	json_t *o = json_loads(tu_text(r), 0, NULL);

	assert_int_equal(r->status, status);
	assert_non_null(o);
	assert_int_equal(json_integer_value(json_object_get(o, "code")), status);
	if (message != NULL)
		assert_string_equal(json_string_value(json_object_get(o, "message")),
		    message);
	else
		assert_true(json_string_length(json_object_get(o, "message")) > 0);
	json_decref(o);
}

/* ------------------------------------------------------------------ */
/* Fixture                                                             */

static int
up(void **state)
{
	struct tu_res r = { 0 };
	json_t *o;
	const char *hdr[2];
	char key[128];

	tu_up(state);
	tu_start_fake(KA, KB, KOP);
	/* An E2B sandbox of alice, with envVars. */
	snprintf(key, sizeof(key), "X-API-Key: %s", KA);
	hdr[0] = key;
	hdr[1] = NULL;
	{
		struct sbx_http_request hr;
		struct sbx_http_cbs cbs;
		struct sbx_err err;
		char addr[64];
		const char *body = "{\"templateID\":\"base\"}";

		r.body = evbuffer_new();
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", T.port);
		memset(&hr, 0, sizeof(hr));
		hr.method = "POST";
		hr.path = "/e2b/v2/sandboxes";
		hr.headers = hdr;
		hr.body = body;
		hr.body_len = strlen(body);
		hr.content_type = "application/json";
		memset(&cbs, 0, sizeof(cbs));
		cbs.response = on_response;
		cbs.body = on_body;
		cbs.done = on_done;
		cbs.arg = &r;
		r.req = sbx_http_request(T.base, addr, &hr, NULL, &cbs, &err);
		assert_non_null(r.req);
		assert_true(tu_loop_until(tu_is_done, &r, 5000));
	}
	assert_int_equal(r.status, 201);
	o = json_loads(tu_text(&r), 0, NULL);
	assert_non_null(o);
	snprintf(SID, sizeof(SID), "%s", json_string_value(json_object_get(o,
	    "sandboxID")));
	snprintf(TOKEN, sizeof(TOKEN), "%s", json_string_value(
	    json_object_get(o, "envdAccessToken")));
	json_decref(o);
	tu_res_free(&r);
	return 0;
}

static int
down(void **state)
{
	return tu_down(state);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */

static void
test_octet_stream_written_and_read_back(void **state)
{
	struct tu_res r = { 0 };
	static unsigned char data[300000];
	size_t i;
	json_t *o;

	(void)state;
	for (i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7 + i / 256);
	envd(&r, "POST", "/files?path=~/d/data.bin&username=user",
	    "application/octet-stream", data, sizeof(data));
	assert_int_equal(r.status, 200);
	o = json_loads(tu_text(&r), 0, NULL);
	assert_true(json_is_array(o) && json_array_size(o) == 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(o, 0),
	    "path")), "/work/d/data.bin");
	assert_string_equal(json_string_value(json_object_get(json_array_get(o, 0),
	    "name")), "data.bin");
	json_decref(o);
	envd(&r, "GET", "/files?path=/home/user/d/data.bin", NULL, NULL, 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.ctype, "application/octet-stream");
	assert_int_equal(evbuffer_get_length(r.body), sizeof(data));
	assert_memory_equal(evbuffer_pullup(r.body, -1), data, sizeof(data));
	tu_res_free(&r);
}

static void
test_multipart_writes_each_part_to_its_filename(void **state)
{
	static const char body[] =
	    "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m/a.txt\"\r\n"
	    "Content-Type: application/octet-stream\r\n\r\n"
	    "alpha\r\n--X\r\n"
	    "\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
	    "filename=\"/home/user/m/b.txt\"\r\n\r\n"
	    "beta"
	    "\r\n--XyZ--\r\n";
	struct tu_res r = { 0 };
	json_t *o;

	(void)state;
	envd(&r, "POST", "/files", "multipart/form-data; boundary=XyZ", body,
	    sizeof(body) - 1);
	assert_int_equal(r.status, 200);
	o = json_loads(tu_text(&r), 0, NULL);
	assert_int_equal(json_array_size(o), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(o, 0),
	    "path")), "/work/m/a.txt");
	assert_string_equal(json_string_value(json_object_get(json_array_get(o, 1),
	    "path")), "/work/m/b.txt");
	json_decref(o);
	envd(&r, "GET", "/files?path=m/a.txt", NULL, NULL, 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(tu_text(&r), "alpha\r\n--X\r\n");
	envd(&r, "GET", "/files?path=m/b.txt", NULL, NULL, 0);
	assert_string_equal(tu_text(&r), "beta");
	tu_res_free(&r);
}

static void
test_refusals_in_e2bs_shape(void **state)
{
	struct tu_res r = { 0 };
	static const char bad[] = "--b\r\nX: y\r\n\r\nz\r\n--b--\r\n";
	static const char evil[] = "--b\r\nContent-Disposition: form-data; name=file; "
	    "filename=\"/etc/evil\"\r\n\r\nx\r\n--b--\r\n";

	(void)state;
	envd(&r, "GET", "/files?path=/etc/passwd", NULL, NULL, 0);
	assert_e2b_error(&r, 403, API_E2B_PATH_OUTSIDE);
	envd(&r, "POST", "/files?path=/home/user/../../etc/x", "application/octet-stream",
	    "x", 1);
	assert_e2b_error(&r, 403, API_E2B_PATH_OUTSIDE);
	envd(&r, "POST", "/files", "multipart/form-data; boundary=b", evil,
	    sizeof(evil) - 1);
	assert_e2b_error(&r, 403, API_E2B_PATH_OUTSIDE);
	envd(&r, "GET", "/files?path=nope.txt", NULL, NULL, 0);
	assert_e2b_error(&r, 404, NULL);
	envd(&r, "POST", "/files", "multipart/form-data; boundary=b", bad, sizeof(bad) - 1);
	assert_e2b_error(&r, 400, NULL);
	envd(&r, "POST", "/files", "multipart/form-data", bad, sizeof(bad) - 1);
	assert_e2b_error(&r, 400, NULL);
	envd(&r, "DELETE", "/files?path=x", NULL, NULL, 0);
	assert_e2b_error(&r, 405, NULL);
	envd(&r, "GET", "/health", NULL, NULL, 0);
	assert_int_equal(r.status, 204);
	tu_res_free(&r);
}

static void
test_connect_methods_refuse_outside_work_before_the_driver(void **state)
{
	static const char *calls[][2] = {
		{ "Stat", "{\"path\":\"/etc\"}" },
		{ "ListDir", "{\"path\":\"/\",\"depth\":2}" },
		{ "MakeDir", "{\"path\":\"/tmp/x\"}" },
		{ "Remove", "{\"path\":\"..\"}" },
		{ "Move", "{\"source\":\"a\",\"destination\":\"/etc/a\"}" },
		{ "CreateWatcher", "{\"path\":\"/proc\"}" },
	};
	struct tu_res r = { 0 };
	unsigned before = sbx_fake_stats(T.drv)->calls[SBX_FAKE_EXEC];
	char path[128];
	json_t *o;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		snprintf(path, sizeof(path), "/filesystem.Filesystem/%s", calls[i][0]);
		envd(&r, "POST", path, "application/json", calls[i][1],
		    strlen(calls[i][1]));
		assert_int_equal(r.status, 403);
		o = json_loads(tu_text(&r), 0, NULL);
		assert_string_equal(json_string_value(json_object_get(o, "code")),
		    "permission_denied");
		assert_string_equal(json_string_value(json_object_get(o, "message")),
		    API_E2B_PATH_OUTSIDE);
		json_decref(o);
	}
	assert_int_equal(sbx_fake_stats(T.drv)->calls[SBX_FAKE_EXEC], before);
	tu_res_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_octet_stream_written_and_read_back,
		    up, down),
		cmocka_unit_test_setup_teardown(
		    test_multipart_writes_each_part_to_its_filename, up, down),
		cmocka_unit_test_setup_teardown(test_refusals_in_e2bs_shape, up, down),
		cmocka_unit_test_setup_teardown(
		    test_connect_methods_refuse_outside_work_before_the_driver, up, down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
