/* test_api_e2b_fs.c - E2B's filesystem surface, its pure parts (adr/0061): paths mapped to /work, the helper's entry lines as EntryInfo, the streaming multipart parser split anywhere, and the error mappings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <jansson.h>

#include "api_e2b_fs.h"
#include "api_e2b_fs_int.h"
#include "api_e2b_multipart.h"
#include "api_e2b_path.h"
#include "sbx_proto.h"

/* ---- paths ---- */

static void
path_maps(const char *in, const char *want)
{
	char out[SBX_PATH_MAX + 1];
	struct sbx_err err;

	sbx_err_clear(&err);
	if (api_e2b_path(in, out, sizeof(out), &err) != 0)
		fail_msg("%s: refused: %s", in != NULL ? in : "(null)", err.message);
	assert_string_equal(out, want);
}

static void
path_refused(const char *in, const char *code)
{
	char out[SBX_PATH_MAX + 1];
	struct sbx_err err;

	sbx_err_clear(&err);
	assert_int_equal(api_e2b_path(in, out, sizeof(out), &err), -1);
	assert_string_equal(err.code, code);
	if (strcmp(code, SBX_E_FORBIDDEN) == 0)
		assert_string_equal(err.message, API_E2B_PATH_OUTSIDE);
}

static void
test_path_home_is_work(void **state)
{
	(void)state;
	path_maps(NULL, "/work");
	path_maps("", "/work");
	path_maps("~", "/work");
	path_maps("~/", "/work");
	path_maps("~/a/b.txt", "/work/a/b.txt");
	path_maps("/home/user", "/work");
	path_maps("/home/user/", "/work");
	path_maps("/home/user/x", "/work/x");
	path_maps("file.txt", "/work/file.txt");
	path_maps("dir/sub/", "/work/dir/sub");
	path_maps("/work", "/work");
	path_maps("/work/a", "/work/a");
	path_maps("/work//a/./b/", "/work/a/b");
	path_maps("/home/user/a/../b", "/work/b");
	path_maps("a/..", "/work");
	path_maps("~user", "/work/~user");   /* not a home: a name */
	path_maps("/work/.hidden", "/work/.hidden");
}

static void
test_path_outside_work_refused_with_the_sentence(void **state)
{
	static char long_path[SBX_PATH_MAX + 16];

	(void)state;
	path_refused("/", SBX_E_FORBIDDEN);
	path_refused("/etc/passwd", SBX_E_FORBIDDEN);
	path_refused("/home/user2/x", SBX_E_FORBIDDEN);
	path_refused("/home", SBX_E_FORBIDDEN);
	path_refused("/workspace", SBX_E_FORBIDDEN);
	path_refused("/tmp", SBX_E_FORBIDDEN);
	path_refused("..", SBX_E_FORBIDDEN);
	path_refused("/work/..", SBX_E_FORBIDDEN);
	path_refused("/home/user/../../etc", SBX_E_FORBIDDEN);
	path_refused("a/../../etc", SBX_E_FORBIDDEN);
	/* sbx's own rules after the mapping */
	path_refused("/work/a\x01" "b", SBX_E_PATH_OUTSIDE_WORK);
	path_refused("/work/\xff", SBX_E_PATH_OUTSIDE_WORK);
	path_refused("/work/a\xe2\x80\xa4\xe2\x80\xa4", SBX_E_PATH_OUTSIDE_WORK);
	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[sizeof(long_path) - 1] = '\0';
	path_refused(long_path, SBX_E_PATH_OUTSIDE_WORK);
}

static void
test_path_small_buffer(void **state)
{
	char out[8];
	struct sbx_err err;

	(void)state;
	assert_int_equal(api_e2b_path("abcdefgh", out, sizeof(out), &err), -1);
	assert_string_equal(err.code, SBX_E_PATH_OUTSIDE_WORK);
	assert_int_equal(api_e2b_path("", out, 3, &err), -1);
}

/* ---- entries ---- */

static json_t *
entry_of(const char *line, const char *base)
{
	json_t *l = json_loads(line, 0, NULL), *e;

	assert_non_null(l);
	e = api_e2b_entry_json(l, base);
	json_decref(l);
	return e;
}

static void
test_entry_is_e2b_entry_info(void **state)
{
	json_t *e;

	(void)state;
	e = entry_of("{\"name\":\"b.txt\",\"rel\":\"a/b.txt\",\"type\":\"file\",\"size\":12,"
	    "\"mode\":420,\"uid\":1000,\"gid\":1000,\"owner\":\"user\",\"group\":\"user\","
	    "\"mtime\":1700000000,\"mtime_nsec\":5}", "/work/d");
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(e, "name")), "b.txt");
	assert_string_equal(json_string_value(json_object_get(e, "path")), "/work/d/a/b.txt");
	assert_string_equal(json_string_value(json_object_get(e, "type")), "FILE_TYPE_FILE");
	assert_string_equal(json_string_value(json_object_get(e, "size")), "12");
	assert_int_equal(json_integer_value(json_object_get(e, "mode")), 0644);
	assert_string_equal(json_string_value(json_object_get(e, "permissions")), "-rw-r--r--");
	assert_string_equal(json_string_value(json_object_get(e, "owner")), "user");
	assert_string_equal(json_string_value(json_object_get(e, "modifiedTime")),
	    "2023-11-14T22:13:20.000000005Z");
	assert_null(json_object_get(e, "symlinkTarget"));
	json_decref(e);

	e = entry_of("{\"name\":\"work\",\"rel\":\"\",\"type\":\"dir\",\"size\":4096,"
	    "\"mode\":493,\"uid\":0,\"gid\":0,\"owner\":\"\",\"group\":\"\","
	    "\"mtime\":0,\"mtime_nsec\":0}", "/work");
	assert_string_equal(json_string_value(json_object_get(e, "path")), "/work");
	assert_string_equal(json_string_value(json_object_get(e, "type")), "FILE_TYPE_DIRECTORY");
	assert_string_equal(json_string_value(json_object_get(e, "permissions")), "drwxr-xr-x");
	assert_string_equal(json_string_value(json_object_get(e, "modifiedTime")),
	    "1970-01-01T00:00:00Z");
	json_decref(e);

	e = entry_of("{\"name\":\"l\",\"rel\":\"l\",\"type\":\"symlink\",\"size\":1,"
	    "\"mode\":511,\"uid\":0,\"gid\":0,\"owner\":\"\",\"group\":\"\","
	    "\"mtime\":0,\"mtime_nsec\":0,\"target\":\"/etc\"}", "/work");
	assert_string_equal(json_string_value(json_object_get(e, "type")), "FILE_TYPE_SYMLINK");
	assert_string_equal(json_string_value(json_object_get(e, "symlinkTarget")), "/etc");
	json_decref(e);
}

static void
test_entry_refuses_what_is_not_an_entry(void **state)
{
	static const char *bad[] = {
		"{}",
		"{\"end\":true,\"truncated\":false}",
		"{\"name\":\"a\",\"rel\":\"a\",\"type\":\"file\",\"size\":-1,\"mode\":420,"
		"\"owner\":\"\",\"group\":\"\",\"mtime\":0,\"mtime_nsec\":0}",
		"{\"name\":\"a\",\"rel\":\"a\",\"type\":\"file\",\"size\":1,\"mode\":70000,"
		"\"owner\":\"\",\"group\":\"\",\"mtime\":0,\"mtime_nsec\":0}",
		"{\"name\":\"a\",\"rel\":\"a\",\"type\":\"file\",\"size\":1,\"mode\":420,"
		"\"owner\":\"\",\"group\":\"\",\"mtime\":0,\"mtime_nsec\":1000000000}",
		"{\"name\":1,\"rel\":\"a\",\"type\":\"file\",\"size\":1,\"mode\":420,"
		"\"owner\":\"\",\"group\":\"\",\"mtime\":0,\"mtime_nsec\":0}",
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_null(entry_of(bad[i], "/work"));
	assert_null(api_e2b_entry_json(NULL, "/work"));
}

/* ---- errors ---- */

static void
test_error_maps(void **state)
{
	static const struct { const char *code, *connect; int status; } m[] = {
		{ SBX_E_NOT_FOUND, "not_found", 404 },
		{ SBX_E_CONFLICT, "already_exists", 409 },
		{ SBX_E_BAD_REQUEST, "invalid_argument", 400 },
		{ SBX_E_FORBIDDEN, "permission_denied", 403 },
		{ SBX_E_PATH_OUTSIDE_WORK, "permission_denied", 400 },
		{ SBX_E_TOO_MANY, "resource_exhausted", 429 },
		{ SBX_E_NOT_RUNNING, "unavailable", 502 },
		{ SBX_E_TIMEOUT, "deadline_exceeded", 504 },
		{ SBX_E_INTERNAL, "internal", 500 },
	};
	struct sbx_err err;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		sbx_err_set(&err, m[i].code, "x");
		assert_string_equal(api_e2b_fs_code(&err), m[i].connect);
		assert_int_equal(api_e2b_files_status(&err), m[i].status);
	}
}

/* The helper's error line found in what it wrote on stderr (untrusted). */
static void
helper_err_of(const char *text, int code, struct sbx_err *err)
{
	struct evbuffer *b = evbuffer_new();

	assert_non_null(b);
	evbuffer_add(b, text, strlen(text));
	sbx_err_clear(err);
	api_e2b_helper_error(b, code, err);
	evbuffer_free(b);
}

static void
test_helper_error_lines(void **state)
{
	struct sbx_err err;

	(void)state;
	helper_err_of("noise\n{\"sbx_helper\":2,\"error\":{\"code\":\"not_found\","
	    "\"message\":\"/work/a does not exist; check the name.\"}}\n", 4, &err);
	assert_string_equal(err.code, SBX_E_NOT_FOUND);
	assert_string_equal(err.message, "/work/a does not exist; check the name.");
	assert_string_equal(api_e2b_fs_code(&err), "not_found");
	/* A symlink out of /work: the design's sentence first. */
	helper_err_of("{\"sbx_helper\":2,\"error\":{\"code\":\"path_outside_work\","
	    "\"message\":\"open: the path leaves /work\"}}", 3, &err);
	assert_string_equal(err.code, SBX_E_FORBIDDEN);
	assert_non_null(strstr(err.message, API_E2B_PATH_OUTSIDE));
	helper_err_of("{\"sbx_helper\":2,\"error\":{\"code\":\"conflict\",\"message\":"
	    "\"/work/d exists already.\"}}\n", 1, &err);
	assert_string_equal(api_e2b_fs_code(&err), "already_exists");
	/* No line (or a broken one): the exit status alone. */
	helper_err_of("", 127, &err);
	assert_string_equal(err.code, SBX_E_INTERNAL);
	assert_non_null(strstr(err.message, "could not run"));
	helper_err_of("{\"sbx_helper\":2,\"error\":{\"code\":1}}", 1, &err);
	assert_string_equal(err.code, SBX_E_INTERNAL);
	assert_non_null(strstr(err.message, "exit 1"));
	helper_err_of("{\"sbx_helper\":2,\"error\":{\"code\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"message\":\"x\"}}", 1, &err);
	assert_string_equal(err.code, SBX_E_INTERNAL);
}

/* ---- multipart ---- */

struct got {
	char text[4096];
	size_t len;
	int parts, ends;
	int fail_at_part;    /* 0: never */
};

static int
g_part(void *arg, const char *name, const char *filename, struct sbx_err *err)
{
	struct got *g = arg;

	g->parts++;
	if (g->fail_at_part == g->parts)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "stop");
	g->len += (size_t)snprintf(g->text + g->len, sizeof(g->text) - g->len,
	    "[%s|%s]", name, filename);
	return 0;
}

static int
g_data(void *arg, const unsigned char *buf, size_t len, struct sbx_err *err)
{
	struct got *g = arg;

	(void)err;
	assert_true(len > 0);
	assert_true(g->len + len < sizeof(g->text));
	memcpy(g->text + g->len, buf, len);
	g->len += len;
	return 0;
}

static int
g_end(void *arg, struct sbx_err *err)
{
	struct got *g = arg;

	(void)err;
	g->ends++;
	g->len += (size_t)snprintf(g->text + g->len, sizeof(g->text) - g->len, "$");
	return 0;
}

/* Parses body with content type ct, fed in pieces of step bytes (0: at once). */
static int
parse(const char *ct, const char *body, size_t n, size_t step, struct got *g,
    struct sbx_err *err)
{
	const struct mp_callbacks cb = { g_part, g_data, g_end, g };
	struct mp_parser *p = mp_new(ct, &cb, err);
	size_t off = 0, k;
	int rc = 0;

	if (p == NULL)
		return -2;
	g->len = 0;
	g->text[0] = '\0';
	while (off < n && rc == 0) {
		k = step == 0 || n - off < step ? n - off : step;
		rc = mp_feed(p, (const unsigned char *)body + off, k, err);
		off += k;
	}
	if (rc == 0)
		rc = mp_finish(p, err);
	g->text[g->len] = '\0';
	mp_free(p);
	return rc;
}

#define CT "multipart/form-data; boundary=----formdata-undici-0123456789"
#define DL "------formdata-undici-0123456789"

static const char body_two[] =
    "preamble to ignore\r\n"
    DL "\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "hello\r\n-- not a boundary\r\n" DL "x is data too? no: it starts a delimiter\r\n"
    "\r\n"
    DL "\r\n"
    "content-disposition: form-data; filename=\"/home/user/d/%22q%22.bin\"; name=file\r\n"
    "\r\n"
    "\r\n\r\nbytes\x00\xff"
    "\r\n" DL "--\r\n"
    "epilogue";

static void
test_multipart_parts_whatever_the_split(void **state)
{
	struct got g, ref;
	struct sbx_err err;
	size_t n = sizeof(body_two) - 1, step;

	(void)state;
	memset(&ref, 0, sizeof(ref));
	/* "DLx..." after CRLF is a delimiter followed by junk: refused. */
	assert_int_equal(parse(CT, body_two, n, 0, &ref, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);

	{
		static const char ok[] =
		    DL "\r\n"
		    "Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
		    "\r\n"
		    "hello\r\n-- not a boundary\r\n--" "----formdata-undici-01234 nor this\r\n"
		    "\r\n" DL "  \r\n"
		    "content-disposition: form-data; filename=\"/home/user/d/%22q%22.bin\"; name=file\r\n"
		    "\r\n"
		    "\r\n\r\nbytes\x00\xff"
		    "\r\n" DL "--\r\n"
		    "epilogue";
		size_t on = sizeof(ok) - 1;
		static const char want[] =
		    "[file|a.txt]hello\r\n-- not a boundary\r\n------formdata-undici-01234 "
		    "nor this\r\n$[file|/home/user/d/\"q\".bin]\r\n\r\nbytes\x00\xff$";

		memset(&ref, 0, sizeof(ref));
		assert_int_equal(parse(CT, ok, on, 0, &ref, &err), 0);
		assert_int_equal(ref.parts, 2);
		assert_int_equal(ref.ends, 2);
		assert_int_equal(ref.len, sizeof(want) - 1);
		assert_memory_equal(ref.text, want, sizeof(want) - 1);
		for (step = 1; step <= on; step++) {
			memset(&g, 0, sizeof(g));
			assert_int_equal(parse(CT, ok, on, step, &g, &err), 0);
			assert_int_equal(g.len, ref.len);
			assert_memory_equal(g.text, ref.text, ref.len);
		}
	}
}

static void
test_multipart_refusals(void **state)
{
	struct got g;
	struct sbx_err err;
	char *big;
	size_t n;

	(void)state;
	memset(&g, 0, sizeof(g));
	/* content types */
	assert_int_equal(parse("application/json", "", 0, 0, &g, &err), -2);
	assert_int_equal(parse("multipart/form-data", "", 0, 0, &g, &err), -2);
	assert_int_equal(parse("multipart/form-data; boundary=", "", 0, 0, &g, &err), -2);
	assert_int_equal(parse("multipart/form-data; boundary=\"" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", "", 0, 0, &g, &err), -2);
	assert_int_equal(parse("multipart/form-datax; boundary=b", "", 0, 0, &g, &err), -2);
	assert_int_equal(parse("Multipart/Form-Data; charset=x; boundary=\"b c\"",
	    "--b c--", 7, 0, &g, &err), 0);
	/* ended early */
	assert_int_equal(parse("multipart/form-data; boundary=b",
	    "--b\r\nContent-Disposition: form-data; name=f\r\n\r\nabc", 46, 0, &g, &err), -1);
	assert_non_null(strstr(err.message, "ended"));
	/* no Content-Disposition */
	assert_int_equal(parse("multipart/form-data; boundary=b",
	    "--b\r\nX: y\r\n\r\nabc\r\n--b--", 23, 0, &g, &err), -1);
	assert_int_equal(parse("multipart/form-data; boundary=b",
	    "--b\r\n\r\nabc\r\n--b--", 17, 0, &g, &err), -1);
	/* A NUL in a part's headers would cut its filename short ("a\0b"
	 * written as /work/a): refused, whole. */
	memset(&g, 0, sizeof(g));
	assert_int_equal(parse("multipart/form-data; boundary=b",
	    "--b\r\nContent-Disposition: form-data; name=f; filename=\"a\0b\"\r\n\r\n"
	    "x\r\n--b--", 71, 0, &g, &err), -1);
	assert_string_equal(err.code, SBX_E_BAD_REQUEST);
	assert_int_equal(g.parts, 0);
	/* headers too long */
	n = MP_HEADERS_MAX + 100;
	big = malloc(n + 16);
	assert_non_null(big);
	memcpy(big, "--b\r\nX: ", 8);
	memset(big + 8, 'a', n - 8);
	assert_int_equal(parse("multipart/form-data; boundary=b", big, n, 0, &g, &err), -1);
	assert_non_null(strstr(err.message, "longer"));
	free(big);
	/* a callback's refusal stops the parse and is the error */
	memset(&g, 0, sizeof(g));
	g.fail_at_part = 1;
	assert_int_equal(parse("multipart/form-data; boundary=b",
	    "--b\r\nContent-Disposition: form-data; name=f\r\n\r\nabc\r\n--b--", 55, 3, &g,
	    &err), -1);
	assert_string_equal(err.message, "stop");
}

/* A sink that checks bytes against the pattern as they come. */
struct big {
	const unsigned char *want;
	size_t pos, max_call;
	int parts, ends;
};

static int
b_part(void *arg, const char *name, const char *filename, struct sbx_err *err)
{
	struct big *b = arg;

	(void)err;
	assert_string_equal(name, "file");
	assert_string_equal(filename, "big");
	b->parts++;
	return 0;
}

static int
b_data(void *arg, const unsigned char *buf, size_t len, struct sbx_err *err)
{
	struct big *b = arg;

	(void)err;
	assert_memory_equal(buf, b->want + b->pos, len);
	b->pos += len;
	if (len > b->max_call)
		b->max_call = len;
	return 0;
}

static int
b_end(void *arg, struct sbx_err *err)
{
	struct big *b = arg;

	(void)err;
	b->ends++;
	return 0;
}

static void
test_multipart_big_part_streams_in_bounded_pieces(void **state)
{
	/* 1 MiB of data full of near-delimiters, fed 64 KiB at a time: every
	 * byte comes out once, in order, in calls no bigger than the hold. */
	const size_t n = 1 << 20;
	static const char head[] = "--bnd\r\nContent-Disposition: form-data; name=file; "
	    "filename=big\r\n\r\n";
	static const char tail[] = "\r\n--bnd--\r\n";
	size_t total = sizeof(head) - 1 + n + sizeof(tail) - 1, i, off, k;
	unsigned char *body = malloc(total);
	struct big b;
	struct mp_callbacks cb = { b_part, b_data, b_end, &b };
	struct mp_parser *p;
	struct sbx_err err;

	(void)state;
	assert_non_null(body);
	memcpy(body, head, sizeof(head) - 1);
	for (i = 0; i < n; i++)
		body[sizeof(head) - 1 + i] = (unsigned char)("\r\n--bn"[i % 6] + (i % 97 == 0));
	memcpy(body + sizeof(head) - 1 + n, tail, sizeof(tail) - 1);
	memset(&b, 0, sizeof(b));
	b.want = body + sizeof(head) - 1;
	assert_non_null(p = mp_new("multipart/form-data; boundary=bnd", &cb, &err));
	for (off = 0; off < total; off += k) {
		k = total - off < 65536 ? total - off : 65536;
		assert_int_equal(mp_feed(p, body + off, k, &err), 0);
	}
	assert_int_equal(mp_finish(p, &err), 0);
	assert_int_equal(b.pos, n);
	assert_int_equal(b.parts, 1);
	assert_int_equal(b.ends, 1);
	assert_true(b.max_call <= MP_HEADERS_MAX + 4 + 4096);
	mp_free(p);
	free(body);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path_home_is_work),
		cmocka_unit_test(test_path_outside_work_refused_with_the_sentence),
		cmocka_unit_test(test_path_small_buffer),
		cmocka_unit_test(test_entry_is_e2b_entry_info),
		cmocka_unit_test(test_entry_refuses_what_is_not_an_entry),
		cmocka_unit_test(test_error_maps),
		cmocka_unit_test(test_helper_error_lines),
		cmocka_unit_test(test_multipart_parts_whatever_the_split),
		cmocka_unit_test(test_multipart_refusals),
		cmocka_unit_test(test_multipart_big_part_streams_in_bounded_pieces),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
