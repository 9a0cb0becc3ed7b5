/* api_e2b_fs.c - E2B's filesystem.Filesystem unary Connect methods (api_e2b_fs.h, adr/0061): each runs an sbx-helper mode in the sandbox through the driver's exec and answers its JSON lines as E2B's messages (the watches are api_e2b_watch.c). May touch the driver (sbx_call.h), the Connect core (api_connect.h) and a request's limits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "api_connect.h"
#include "api_e2b_fs.h"
#include "api_e2b_fs_int.h"
#include "api_e2b_path.h"
#include "api_int.h"
#include "sbx_call.h"
#include "sbx_helper_proto.h"
#include "sbx_path.h"

#define ENTRY_LINE_MAX 16384    /* bytes of one entry line (two paths and names) */
/* Bytes of a ListDir's lines at most (e2b_fs_list_max entries of a few
 * hundred bytes; within the broker's default output_cap of 16 MiB). */
#define LIST_OUT_MAX (8 * 1024 * 1024)

/* ------------------------------------------------------------------ */
/* Entries                                                             */

const char *
api_e2b_jstr(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

static int
jint(const json_t *o, const char *k, json_int_t *out)
{
	const json_t *v = json_object_get(o, k);

	if (!json_is_integer(v))
		return -1;
	*out = json_integer_value(v);
	return 0;
}

json_t *
api_e2b_entry_json(const json_t *line, const char *base)
{
	const char *name = api_e2b_jstr(line, "name"), *rel = api_e2b_jstr(line, "rel");
	const char *type = api_e2b_jstr(line, "type"), *owner = api_e2b_jstr(line, "owner");
	const char *group = api_e2b_jstr(line, "group"), *target = api_e2b_jstr(line, "target");
	const char *ptype;
	json_int_t size, mode, mtime, nsec;
	char perm[11], when[64], num[32], *path;
	struct tm tm;
	time_t t;
	json_t *e;
	int i;

	if (name == NULL || rel == NULL || type == NULL || owner == NULL ||
	    group == NULL || jint(line, "size", &size) == -1 ||
	    jint(line, "mode", &mode) == -1 || jint(line, "mtime", &mtime) == -1 ||
	    jint(line, "mtime_nsec", &nsec) == -1 || mode < 0 || mode > 07777 ||
	    nsec < 0 || nsec > 999999999 || size < 0)
		return NULL;
	if (strcmp(type, "file") == 0) {
		ptype = "FILE_TYPE_FILE";
		perm[0] = '-';
	} else if (strcmp(type, "dir") == 0) {
		ptype = "FILE_TYPE_DIRECTORY";
		perm[0] = 'd';
	} else if (strcmp(type, "symlink") == 0) {
		ptype = "FILE_TYPE_SYMLINK";
		perm[0] = 'L';  /* Go's FileMode.String, as envd's "permissions" */
	} else {
		ptype = "FILE_TYPE_UNSPECIFIED";
		perm[0] = '?';
	}
	for (i = 0; i < 9; i++)
		perm[1 + i] = (mode & (0400 >> i)) ? "rwxrwxrwx"[i] : '-';
	perm[10] = '\0';
	t = (time_t)mtime;
	if (gmtime_r(&t, &tm) == NULL)
		return NULL;
	if (nsec != 0)
		snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ",
		    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		    tm.tm_sec, (long long)nsec);
	else
		snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02dZ",
		    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		    tm.tm_sec);
	if (asprintf(&path, "%s%s%s", base, rel[0] != '\0' ? "/" : "", rel) < 0)
		return NULL;
	snprintf(num, sizeof(num), "%lld", (long long)size);
	/* int64 is a string in protobuf's JSON; uint32 a number. */
	e = json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:s}",
	    "name", name, "type", ptype, "path", path, "size", num,
	    "mode", (json_int_t)mode, "permissions", perm, "owner", owner,
	    "group", group, "modifiedTime", when);
	free(path);
	if (e != NULL && target != NULL &&
	    json_object_set_new(e, "symlinkTarget", json_string(target)) == -1) {
		json_decref(e);
		return NULL;
	}
	return e;
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */

const char *
api_e2b_fs_code(const struct sbx_err *err)
{
	static const struct { const char *sbx, *connect; } map[] = {
		{ SBX_E_NOT_FOUND, "not_found" },
		{ SBX_E_CONFLICT, "already_exists" },
		{ SBX_E_BAD_REQUEST, "invalid_argument" },
		{ SBX_E_PATH_OUTSIDE_WORK, "permission_denied" },
		{ SBX_E_FORBIDDEN, "permission_denied" },
		{ SBX_E_TOO_MANY, "resource_exhausted" },
		{ SBX_E_RATE_LIMITED, "resource_exhausted" },
		{ SBX_E_TOO_LARGE, "resource_exhausted" },
		{ SBX_E_LIMIT_EXCEEDED, "resource_exhausted" },
		{ SBX_E_NOT_RUNNING, "unavailable" },
		{ SBX_E_TIMEOUT, "deadline_exceeded" },
		{ SBX_E_CANCELLED, "canceled" },
		{ SBX_E_RUNTIME_UNAVAILABLE, "unavailable" },
		{ SBX_E_BROKER_UNAVAILABLE, "unavailable" },
		{ SBX_E_SHUTTING_DOWN, "unavailable" },
	};
	size_t i;

	for (i = 0; err != NULL && i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(err->code, map[i].sbx) == 0)
			return map[i].connect;
	return "internal";
}

/* The helper's error line (sbx_helper_proto.h) in what it wrote on stderr,
 * else an error from its exit status alone. */
void
api_e2b_helper_error(struct evbuffer *errb, int code, struct sbx_err *err)
{
	const char *msg, *c;
	size_t n = evbuffer_get_length(errb);
	char *text = (char *)evbuffer_pullup(errb, -1);
	const char *line = NULL, *p;
	json_t *o = NULL, *e;

	for (p = text; p != NULL && p < text + n;) {
		if ((size_t)(text + n - p) > 13 && memcmp(p, "{\"sbx_helper\":", 14) == 0)
			line = p;
		if ((p = memchr(p, '\n', (size_t)(text + n - p))) != NULL)
			p++;
	}
	if (line != NULL) {
		p = memchr(line, '\n', (size_t)(text + n - line));
		o = json_loadb(line, p != NULL ? (size_t)(p - line) :
		    (size_t)(text + n - line), 0, NULL);
	}
	e = json_object_get(o, "error");
	c = api_e2b_jstr(e, "code");
	msg = api_e2b_jstr(e, "message");
	if (c != NULL && msg != NULL && strlen(c) < sizeof(err->code)) {
		sbx_err_set(err, c, "%s", msg);
		/* "/work/x does not exist" is the answer; "the path leaves /work
		 * (through a symlink)" gets the design's sentence first. */
		if (strcmp(c, SBX_E_PATH_OUTSIDE_WORK) == 0)
			sbx_err_set(err, SBX_E_FORBIDDEN, "%s (%s)",
			    API_E2B_PATH_OUTSIDE, msg);
	} else if (code == 126 || code == 127)
		sbx_err_set(err, SBX_E_INTERNAL, "The sandbox's sbx-helper could "
		    "not run (exit %d); recreate the sandbox.", code);
	else
		sbx_err_set(err, SBX_E_INTERNAL, "The sandbox's sbx-helper failed "
		    "(exit %d) without saying why.", code);
	json_decref(o);
}

/* A driver's error of a helper run, in E2B's terms. */
void
api_e2b_run_error(const struct sbx_err *in, struct sbx_err *err)
{
	*err = *in;
	if (strcmp(in->code, SBX_E_NOT_RUNNING) == 0 ||
	    strcmp(in->code, SBX_E_NOT_FOUND) == 0)
		sbx_err_set(err, SBX_E_NOT_RUNNING, "The sandbox is not running; "
		    "connect to it first (POST /sandboxes/{id}/connect).");
}

/* ------------------------------------------------------------------ */
/* One helper run of a unary method                                    */

struct fs_call;
typedef void (*fs_done_fn)(struct fs_call *f, json_t *lines);

struct fs_call {
	struct areq *a;
	struct api_connect_call *c;
	struct sbx_op *op;
	struct evbuffer *out, *errb;
	size_t out_max;
	int over;                  /* stdout passed out_max */
	fs_done_fn done;           /* every stdout line decoded, in order */
	char path[SBX_PATH_MAX + 1];
	uint64_t limit;            /* ListDir: entries at most */
};

static void
fs_free(struct fs_call *f)
{
	if (f == NULL)
		return;
	if (f->out != NULL)
		evbuffer_free(f->out);
	if (f->errb != NULL)
		evbuffer_free(f->errb);
	free(f);
}

static void
fs_fail(struct fs_call *f, const struct sbx_err *err)
{
	api_connect_error(f->c, api_e2b_fs_code(err), err->message);
	fs_free(f);
}

static void
fs_cancelled(void *arg)
{
	struct fs_call *f = arg;

	sbx_op_cancel(f->op);
	fs_free(f);
}

static void
fs_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct fs_call *f = arg;

	if (stream == 1) {
		if (evbuffer_get_length(f->out) + len > f->out_max)
			f->over = 1;
		else
			evbuffer_add(f->out, buf, len);
	} else if (evbuffer_get_length(f->errb) + len <= ERR_MAX)
		evbuffer_add(f->errb, buf, len);
}

static void
fs_exit(void *arg, const struct sbx_exit *ex)
{
	struct fs_call *f = arg;
	struct sbx_err err;
	json_t *lines;
	char *line;
	size_t n;

	f->op = NULL;
	api_connect_on_cancel(f->c, NULL, NULL);
	sbx_err_clear(&err);
	if (ex->code != 0 || ex->signal != NULL) {
		api_e2b_helper_error(f->errb, ex->code, &err);
		fs_fail(f, &err);
		return;
	}
	if (f->over || ex->truncated) {
		sbx_err_set(&err, SBX_E_TOO_MANY, "The answer is larger than the "
		    "api takes (%zu bytes); ask for less (a smaller depth).",
		    f->out_max);
		fs_fail(f, &err);
		return;
	}
	if ((lines = json_array()) == NULL) {
		sbx_err_oom(&err);
		fs_fail(f, &err);
		return;
	}
	while ((line = evbuffer_readln(f->out, &n, EVBUFFER_EOL_LF)) != NULL) {
		json_t *o = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);

		free(line);
		if (!json_is_object(o) || json_array_append_new(lines, o) == -1) {
			json_decref(lines);
			sbx_err_set(&err, SBX_E_INTERNAL, "The sandbox's sbx-helper "
			    "answered a line that is not its JSON.");
			fs_fail(f, &err);
			return;
		}
	}
	f->done(f, lines);
	json_decref(lines);
}

static void
fs_error(void *arg, const struct sbx_err *in)
{
	struct fs_call *f = arg;
	struct sbx_err err;

	f->op = NULL;
	api_connect_on_cancel(f->c, NULL, NULL);
	api_e2b_run_error(in, &err);
	fs_fail(f, &err);
}

void
api_e2b_no_start(void *arg, const char *exec_id)
{
	(void)arg;
	(void)exec_id;
}

/* Starts argv (the helper and its mode) for f; on any failure f is answered. */
static void
fs_run(struct fs_call *f, const char *const *argv, int64_t timeout_ms)
{
	struct sbx_exec_req req;
	struct sbx_sink sink;
	struct sbx_err err;

	sbx_err_clear(&err);
	memset(&req, 0, sizeof(req));
	memset(&sink, 0, sizeof(sink));
	req.argv = argv;
	req.timeout_ms = timeout_ms;
	req.output_cap = (int64_t)(f->out_max + ERR_MAX + 1);
	sink.start = api_e2b_no_start;
	sink.output = fs_output;
	sink.exit = fs_exit;
	sink.error = fs_error;
	sink.arg = f;
	if (api_fileop_admit(f->a, &err) == -1) {
		fs_fail(f, &err);
		return;
	}
	f->op = sbx_call_exec(f->a->s->driver, f->a->npc.sandbox_id, &req, &sink, &err);
	if (f->op == NULL) {
		struct sbx_err e2;

		api_e2b_run_error(&err, &e2);
		fs_fail(f, &e2);
		return;
	}
	api_connect_on_cancel(f->c, fs_cancelled, f);
}

/* A new call for a's method c, its path from msg's member key mapped into
 * f->path. NULL when answered (bad path, out of memory). */
static struct fs_call *
fs_new(struct areq *a, struct api_connect_call *c, const json_t *msg, const char *key,
    fs_done_fn done, size_t out_max)
{
	const json_t *v = json_object_get(msg, key);
	struct fs_call *f;
	struct sbx_err err;

	sbx_err_clear(&err);
	if (v != NULL && !json_is_string(v)) {
		api_connect_error(c, "invalid_argument", "The path must be a string.");
		return NULL;
	}
	if ((f = calloc(1, sizeof(*f))) == NULL ||
	    (f->out = evbuffer_new()) == NULL || (f->errb = evbuffer_new()) == NULL) {
		fs_free(f);
		api_connect_error(c, "internal", "Out of memory.");
		return NULL;
	}
	f->a = a;
	f->c = c;
	f->done = done;
	f->out_max = out_max;
	if (api_e2b_path(v != NULL ? json_string_value(v) : NULL, f->path,
	    sizeof(f->path), &err) == -1) {
		fs_fail(f, &err);
		return NULL;
	}
	return f;
}

/* The one entry line of stat/mkdir/move answered as {"entry": ...}. */
static void
reply_entry(struct fs_call *f, json_t *lines)
{
	json_t *e = api_e2b_entry_json(json_array_get(lines, 0), f->path);
	struct sbx_err err;

	if (e == NULL) {
		sbx_err_set(&err, SBX_E_INTERNAL, "The sandbox's sbx-helper "
		    "answered no entry.");
		fs_fail(f, &err);
		return;
	}
	api_connect_reply(f->c, json_pack("{s:o}", "entry", e));
	fs_free(f);
}

static void
reply_empty(struct fs_call *f, json_t *lines)
{
	(void)lines;
	api_connect_reply(f->c, json_object());
	fs_free(f);
}

void
api_e2b_fs_stat(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	struct fs_call *f = fs_new(a, c, msg, "path", reply_entry, ENTRY_LINE_MAX);
	const char *argv[] = { SBX_HELPER_PATH, SBX_HELPER_MODE_STAT, NULL, NULL };

	if (f == NULL)
		return;
	argv[2] = f->path;
	fs_run(f, argv, 0);
}

void
api_e2b_fs_make_dir(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	struct fs_call *f = fs_new(a, c, msg, "path", reply_entry, ENTRY_LINE_MAX);
	const char *argv[] = { SBX_HELPER_PATH, SBX_HELPER_MODE_MKDIR, NULL, NULL };

	if (f == NULL)
		return;
	argv[2] = f->path;
	fs_run(f, argv, 0);
}

void
api_e2b_fs_remove(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	struct fs_call *f = fs_new(a, c, msg, "path", reply_empty, 0);
	const char *argv[] = { SBX_HELPER_PATH, SBX_HELPER_MODE_REMOVE, NULL, NULL };

	if (f == NULL)
		return;
	argv[2] = f->path;
	fs_run(f, argv, 0);
}

void
api_e2b_fs_move(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	struct fs_call *f = fs_new(a, c, msg, "destination", reply_entry, ENTRY_LINE_MAX);
	const char *argv[] = { SBX_HELPER_PATH, SBX_HELPER_MODE_MOVE, NULL, NULL, NULL };
	const json_t *v = json_object_get(msg, "source");
	char src[SBX_PATH_MAX + 1];
	struct sbx_err err;

	if (f == NULL)
		return;
	if (v != NULL && !json_is_string(v)) {
		api_connect_error(c, "invalid_argument", "The source must be a string.");
		fs_free(f);
		return;
	}
	if (api_e2b_path(v != NULL ? json_string_value(v) : NULL, src, sizeof(src),
	    &err) == -1) {
		fs_fail(f, &err);
		return;
	}
	argv[2] = src;
	argv[3] = f->path;
	fs_run(f, argv, 0);
}

static int
by_path(const void *x, const void *y)
{
	const char *a = api_e2b_jstr(*(json_t *const *)x, "path");
	const char *b = api_e2b_jstr(*(json_t *const *)y, "path");

	return strcmp(a != NULL ? a : "", b != NULL ? b : "");
}

static void
reply_entries(struct fs_call *f, json_t *lines)
{
	size_t n = json_array_size(lines), i, k = 0;
	const json_t *end = n > 0 ? json_array_get(lines, n - 1) : NULL;
	json_t **v = NULL, *arr;
	struct sbx_err err;

	if (end == NULL || !json_is_true(json_object_get(end, "end"))) {
		sbx_err_set(&err, SBX_E_INTERNAL, "The sandbox's sbx-helper ended "
		    "its listing early.");
		fs_fail(f, &err);
		return;
	}
	if (json_is_true(json_object_get(end, "truncated"))) {
		sbx_err_set(&err, SBX_E_TOO_MANY, "%s holds more than %llu entries "
		    "at that depth (e2b_fs_list_max); list a smaller depth or a "
		    "directory below it.", f->path, (unsigned long long)f->limit);
		fs_fail(f, &err);
		return;
	}
	if (n > 1 && (v = calloc(n - 1, sizeof(*v))) == NULL) {
		sbx_err_oom(&err);
		fs_fail(f, &err);
		return;
	}
	for (i = 0; i + 1 < n; i++)
		if ((v[k] = api_e2b_entry_json(json_array_get(lines, i), f->path)) != NULL)
			k++;
	if (k > 1)
		qsort(v, k, sizeof(*v), by_path);
	arr = json_array();
	for (i = 0; i < k; i++)
		if (arr == NULL || json_array_append_new(arr, v[i]) == -1)
			json_decref(v[i]);
	free(v);
	if (arr == NULL) {
		sbx_err_oom(&err);
		fs_fail(f, &err);
		return;
	}
	api_connect_reply(f->c, json_pack("{s:o}", "entries", arr));
	fs_free(f);
}

void
api_e2b_fs_list_dir(struct areq *a, struct api_connect_call *c, json_t *msg)
{
	const json_t *d = json_object_get(msg, "depth");
	long long max = a->s->cfg->e2b_fs_list_max;
	char depth[24], limit[24];
	const char *argv[] = { SBX_HELPER_PATH, SBX_HELPER_MODE_WALK, NULL, "--depth",
	    depth, "--limit", limit, NULL };
	json_int_t dv = 1;
	struct fs_call *f;

	if (d != NULL && !json_is_null(d)) {
		if (!json_is_integer(d) || json_integer_value(d) < 0) {
			api_connect_error(c, "invalid_argument", "depth must be a "
			    "whole number, at least 1.");
			return;
		}
		dv = json_integer_value(d) == 0 ? 1 : json_integer_value(d);
	}
	if (dv > SBX_HELPER_DU_DEPTH_MAX)
		dv = SBX_HELPER_DU_DEPTH_MAX;
	if ((f = fs_new(a, c, msg, "path", reply_entries, LIST_OUT_MAX)) == NULL)
		return;
	f->limit = (uint64_t)max;
	snprintf(depth, sizeof(depth), "%lld", (long long)dv);
	snprintf(limit, sizeof(limit), "%lld", max);
	argv[2] = f->path;
	fs_run(f, argv, 0);
}

