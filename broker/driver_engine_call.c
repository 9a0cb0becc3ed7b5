/*
 * driver_engine_call.c - the engine driver's runtime call layer: one
 * Engine API v1.41 request and its answer over the runtime's socket (JSON,
 * bytes, an attached exec's start), the common checks of an answer, and
 * inspect parsing. Below every job file; it calls only the op lifecycle
 * (driver_engine_op.c) to end an op whose call failed.
 */
#include <ctype.h>
#include <stdarg.h>
#include <time.h>

#include "driver_engine_int.h"

/* ---------- small utilities ---------- */

int
eng_name_ok(const char *s, size_t max)
{
	size_t n;

	if (s == NULL || (n = strlen(s)) == 0 || n > max)
		return 0;
	for (; *s != '\0'; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' &&
		    *s != '.')
			return 0;
	return 1;
}

/* The shared rules of SPEC §4 (proto/sbx_path.h): a caller of the vtable
 * may skip its own check, so the driver keeps this one. */
int
eng_id_check(const char *id, struct sbx_err *err)
{
	if (sbx_id_valid(id))
		return 0;
	return sbx_err_bad_id(err);
}

/* The helper checks again, with symlinks, at use time (openat2
 * RESOLVE_BENEATH). */
int
eng_path_check(const char *p, struct sbx_err *err)
{
	return sbx_path_check(p, p != NULL ? strlen(p) : 0, err);
}

void
eng_urlencode(const char *in, char *out, size_t outsz)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *in != '\0' && o + 4 < outsz; in++) {
		unsigned char c = (unsigned char)*in;

		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
}

/* RFC 3339 with optional fraction and a Z or +hh:mm offset -> Unix ms. */
static int64_t
parse_time_ms(const char *s)
{
	struct tm tm;
	const char *p;
	int64_t ms = 0, scale = 100, t;
	int sign, oh, om;

	if (s == NULL)
		return 0;
	memset(&tm, 0, sizeof(tm));
	p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (p == NULL)
		return 0;
	if (*p == '.') {
		for (p++; isdigit((unsigned char)*p); p++) {
			ms += (*p - '0') * scale;
			scale /= 10;
		}
	}
	t = (int64_t)timegm(&tm) * 1000 + ms;
	if (*p == '+' || *p == '-') {
		sign = *p == '-' ? -1 : 1;
		if (sscanf(p + 1, "%2d:%2d", &oh, &om) == 2)
			t -= sign * ((int64_t)oh * 3600 + om * 60) * 1000;
	}
	return t;
}

const char *
eng_jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "";
}

const char *
eng_label(json_t *labels, const char *key)
{
	return json_string_value(json_object_get(labels, key));
}

int
eng_managed(json_t *labels)
{
	const char *v = eng_label(labels, L_MANAGED);

	return v != NULL && strcmp(v, "true") == 0;
}

int
eng_sandbox_of(const struct engine *e, json_t *labels, const char *name,
    char *id, size_t sz)
{
	const char *v;
	size_t pl = strlen(e->prefix);

	if (!eng_managed(labels))
		return 0;
	if ((v = eng_label(labels, L_ID)) == NULL) {
		/* Born a pool member (adr/0067): the name is the truth. */
		if (eng_label(labels, L_POOL) == NULL || name == NULL)
			return 0;
		if (name[0] == '/')
			name++;
		if (strncmp(name, e->prefix, pl) != 0)
			return 0;
		v = name + pl;
	}
	if (v[0] == '\0' || strlen(v) >= sz)
		return 0;
	snprintf(id, sz, "%s", v);
	return 1;
}

/* A runtime error answer: {"message":"..."} (Docker and Podman). */
void
eng_runtime_err(struct sbx_err *err, int status, json_t *body, const char *what)
{
	const char *m = json_string_value(json_object_get(body, "message"));
	char code[16];

	/* The runtime's words name host paths (an overlay's merged directory,
	 * a volume's mount point) and its internals: the log keeps them, the
	 * caller gets what failed and where to look (issue 24 item 9). */
	snprintf(code, sizeof(code), "%d", status);
	log_warn("runtime refused", "what", what, "status", code, "message",
	    m != NULL ? m : "", NULL);
	sbx_err_set(err, SBX_E_RUNTIME, "the container runtime refused to %s "
	    "(HTTP %d); the broker's log has its answer", what, status);
}

void
eng_image_missing(struct sbx_err *err, const char *image)
{
	sbx_err_set(err, SBX_E_RUNTIME, "image %s is not present in the "
	    "runtime (nothing can be pulled here: build or import it; "
	    "deploy/image/build.sh builds sbx-default:bookworm, with --browser "
	    "sbx-browser:bookworm)", image);
}

int
eng_reply_bad(struct eop *op, void (*fail)(struct eop *,
    const struct sbx_err *), const struct sbx_err *err, int status,
    json_t *body, const char *what, const int *ok)
{
	struct sbx_err e;

	if (fail == NULL)
		fail = eng_finish_err;
	if (err != NULL) {
		fail(op, err);
		return 1;
	}
	for (; *ok != 0; ok++)
		if (status == *ok)
			return 0;
	eng_runtime_err(&e, status, body, what);
	fail(op, &e);
	return 1;
}

/* A create that lost a race with a concurrent one: Docker answers 409,
 * Podman 4.3 answers 500 "... is already in use" / "already exists". */
int
eng_name_taken(int status, json_t *body)
{
	const char *m = json_string_value(json_object_get(body, "message"));

	return status == 409 || (status == 500 && m != NULL &&
	    (strstr(m, "already in use") != NULL ||
	    strstr(m, "already exists") != NULL));
}

int
eng_gone(int status, json_t *body)
{
	const char *m = json_string_value(json_object_get(body, "message"));

	return status == 500 && m != NULL &&
	    (strstr(m, "no such container") != NULL ||
	    strstr(m, "does not exist") != NULL);
}

int
eng_ghost(int status, json_t *body, char *id, size_t sz)
{
	static const char pre[] = "getting container from store \"";
	const char *m = json_string_value(json_object_get(body, "message"));
	const char *p;
	size_t n;

	if (status != 500 || m == NULL || (p = strstr(m, pre)) == NULL)
		return 0;
	p += sizeof(pre) - 1;
	for (n = 0; n < 64 && isxdigit((unsigned char)p[n]); n++)
		;
	if (n != 64 || strncmp(p + n, "\": container not known", 23) != 0)
		return 0;
	if (id != NULL) {
		if (sz < 65)
			return 0;
		memcpy(id, p, 64);
		id[64] = '\0';
	}
	return 1;
}

int
eng_ghost_removing(json_t *inspect)
{
	const char *s = json_string_value(json_object_get(json_object_get(
	    inspect, "State"), "Status"));

	return s != NULL && strcmp(s, "removing") == 0;
}

/* ---------- one JSON call to the runtime ---------- */

static void
call_response(void *arg, struct sbx_http_req *req, int status)
{
	(void)arg;
	(void)req;
	(void)status;
}

void
eng_call_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct eop *op = arg;

	(void)req;
	if (op->resp_over || evbuffer_get_length(op->resp) + len > RESP_MAX) {
		op->resp_over = 1;
		return;
	}
	evbuffer_add(op->resp, buf, len);
}

static void
call_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct eop *op = arg;
	json_t *body = NULL;
	json_error_t jerr;
	struct sbx_err e;
	size_t n;
	int status = sbx_http_req_status(req);
	cont_fn cont = op->cont;
	const char *ps = sbx_http_req_header(req, "X-Docker-Container-Path-Stat");

	op->http = NULL;
	op->cont = NULL;
	free(op->pstat);
	op->pstat = ps != NULL ? strdup(ps) : NULL;
	if (err != NULL) {
		e = *err;
		if (strcmp(e.code, SBX_E_RUNTIME_UNAVAILABLE) == 0)
			snprintf(e.message, sizeof(e.message),
			    "container runtime unreachable at %s: is dockerd or "
			    "the podman service running?", op->e->address);
		cont(op, 0, NULL, &e);
		return;
	}
	if (op->resp_over) {
		sbx_err_set(&e, SBX_E_RUNTIME, "runtime answer too large");
		cont(op, status, NULL, &e);
		return;
	}
	n = evbuffer_get_length(op->resp);
	if (op->raw) {
		/* The continuation reads op->resp itself (a tar, a log, not
		 * JSON) and may end the op: op is not touched after it (the next
		 * call drains resp first). */
		op->raw = 0;
		cont(op, status, NULL, NULL);
		return;
	}
	if (n > 0) {
		body = json_loadb((const char *)evbuffer_pullup(op->resp, -1), n,
		    JSON_DECODE_ANY, &jerr);
		/* Some answers are text ("OK", plain errors): keep the text. */
		if (body == NULL)
			body = json_pack("{s:s%}", "message",
			    (const char *)evbuffer_pullup(op->resp, -1),
			    n > 200 ? (size_t)200 : n);
	}
	evbuffer_drain(op->resp, n);
	cont(op, status, body, NULL);
	json_decref(body);
}

/* Sends method path with len bytes of data (ctype; data may be NULL) and
 * continues in cont with the status and the answer: parsed JSON, or with
 * op->raw set the raw bytes left in op->resp. Failing to start ends the op. */
void
eng_call_bytes(struct eop *op, const char *method, const char *path,
    const char *ctype, const void *data, size_t len, cont_fn cont)
{
	struct sbx_http_request q;
	struct sbx_http_opts o;
	struct sbx_http_cbs cbs;
	struct sbx_err err;

	memset(&q, 0, sizeof(q));
	memset(&o, 0, sizeof(o));
	memset(&cbs, 0, sizeof(cbs));
	sbx_err_clear(&err);
	if (op->resp == NULL && (op->resp = evbuffer_new()) == NULL) {
		sbx_err_oom(&err);
		eng_fail_later(op, &err);
		return;
	}
	op->resp_over = 0;
	evbuffer_drain(op->resp, evbuffer_get_length(op->resp));
	q.method = method;
	q.path = path;
	if (data != NULL) {
		q.content_type = ctype;
		q.body = data;
		q.body_len = len;
	}
	o.peer_name = "the container runtime";
	/* An answer cut off (a /wait's headers come at once) is the daemon
	 * going away, as a refused connection is. */
	o.cut_code = SBX_E_RUNTIME_UNAVAILABLE;
	o.timeout_ms = op->e->req_timeout_ms;
	cbs.response = call_response;
	cbs.body = eng_call_body;
	cbs.done = call_done;
	cbs.arg = op;
	op->cont = cont;
	op->http = sbx_http_request(op->e->base.base, op->e->address, &q, &o,
	    &cbs, &err);
	if (op->http == NULL)
		eng_fail_later(op, &err);
}

/* Sends method path (with body, stolen, or NULL) and continues in cont with
 * the status and parsed answer, or with err. Failing to start ends the op. */
void
eng_call(struct eop *op, const char *method, const char *path, json_t *body,
    cont_fn cont)
{
	struct sbx_err err;
	char *text = NULL;

	if (body != NULL) {
		text = json_dumps(body, JSON_COMPACT);
		json_decref(body);
		if (text == NULL) {
			sbx_err_oom(&err);
			eng_fail_later(op, &err);
			return;
		}
	}
	eng_call_bytes(op, method, path, "application/json", text,
	    text != NULL ? strlen(text) : 0, cont);
	free(text);
}

void
eng_callf(struct eop *op, const char *method, json_t *body, cont_fn cont,
    const char *fmt, ...)
{
	char path[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	eng_call(op, method, path, body, cont);
}

/* ---------- an image's mount paths (adr/0045) ---------- */

const char *const sbx_engine_mount_paths[] = {
	SBX_HELPER_DIR, SBX_WORK_DIR, "/tmp", "/run", SBX_HELPER_RUN_DIR,
	"/run/sbx-egress", NULL,
};

#define GO_MODE_DIR (1LL << 31)        /* Go's os.ModeDir */
#define GO_MODE_SYMLINK (1LL << 27)    /* os.ModeSymlink */
#define GO_MODE_TYPE 0x8F280000LL      /* os.ModeType: every type bit */

int
sbx_engine_mount_path_judge(const char *image, const char *path,
    const char *stat, struct sbx_err *err)
{
	unsigned char bin[2048];
	size_t n = 0;
	json_t *j;
	json_int_t mode;
	const char *link, *what;

	if (stat == NULL)
		return 0;
	if (sodium_base642bin(bin, sizeof(bin) - 1, stat, strlen(stat), "\n\r",
	    &n, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    (j = json_loadb((const char *)bin, n, 0, NULL)) == NULL)
		return sbx_err_set(err, SBX_E_IMAGE_NOT_ALLOWED, "image %s cannot "
		    "be used: the runtime did not say what its %s is; check the "
		    "image with sandbox-broker --check.", image, path);
	mode = json_integer_value(json_object_get(j, "mode"));
	link = json_string_value(json_object_get(j, "linkTarget"));
	/* Docker gives linkTarget only for a link; Podman gives every path's
	 * resolved name, the path itself when it is no link. */
	if ((mode & GO_MODE_SYMLINK) != 0 || (link != NULL && link[0] != '\0' &&
	    strcmp(link, path) != 0))
		what = "a symbolic link, which the runtime would follow when it "
		    "mounts there";
	else if ((mode & GO_MODE_DIR) != 0 && (mode & GO_MODE_TYPE &
	    ~GO_MODE_DIR) == 0)
		what = NULL;
	else if ((mode & GO_MODE_TYPE) == 0)
		what = "a file, not a directory, and the sandbox mounts there";
	else
		what = "not a directory, and the sandbox mounts there";
	json_decref(j);
	if (what == NULL)
		return 0;
	return sbx_err_set(err, SBX_E_IMAGE_NOT_ALLOWED, "image %s cannot be "
	    "used: its %s is %s; rebuild the image with %s a directory or "
	    "without it.", image, path, what, path);
}

/* ---------- status from an inspect answer ---------- */

int
eng_status_from_inspect(struct eop *op, json_t *c, struct sbx_status *st,
    struct sbx_err *err)
{
	json_t *cfg = json_object_get(c, "Config");
	json_t *labels = json_object_get(cfg, "Labels");
	json_t *state = json_object_get(c, "State");
	const char *v;
	char id[sizeof(op->id)];

	if (!eng_sandbox_of(op->e, labels, eng_jstr(c, "Name"), id, sizeof(id)) ||
	    strcmp(id, op->id) != 0)
		return eng_not_ours(err, "container", op->cname);
	memset(st, 0, sizeof(*st));
	snprintf(st->id, sizeof(st->id), "%s", op->id);
	st->state = json_is_true(json_object_get(state, "Running")) ?
	    SBX_STATE_RUNNING : SBX_STATE_STOPPED;
	v = eng_label(labels, L_IMAGE);
	snprintf(st->image, sizeof(st->image), "%s",
	    v != NULL ? v : eng_jstr(cfg, "Image"));
	v = eng_label(labels, L_EGRESS);
	st->egress = v != NULL && (strcmp(v, "1") == 0 || strcmp(v, "proxy") == 0);
	st->created_at_ms = parse_time_ms(eng_jstr(c, "Created"));
	if (st->state == SBX_STATE_STOPPED)
		snprintf(st->stop_reason, sizeof(st->stop_reason), "%s",
		    json_is_true(json_object_get(state, "OOMKilled")) ? "oom" :
		    "exited");
	snprintf(st->container_id, sizeof(st->container_id), "%s",
	    eng_jstr(c, "Id"));
	snprintf(op->cid, sizeof(op->cid), "%s", eng_jstr(c, "Id"));
	if (op->cid[0] == '\0' || !eng_name_ok(op->cid, sizeof(op->cid) - 1))
		return sbx_err_set(err, SBX_E_RUNTIME,
		    "runtime gave no usable container id for %s", op->cname);
	return 0;
}

void
eng_absent_status(struct eop *op, struct sbx_status *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->id, sizeof(st->id), "%s", op->id);
	st->state = SBX_STATE_ABSENT;
}

void
eng_inspect_path(struct eop *op, char *path, size_t sz)
{
	snprintf(path, sz, API "/containers/%s/json", op->cname);
}

/*
 * Classifies a container inspect answer for an operation that acts on a
 * running sandbox: 1 running, 0 absent (st->state ABSENT) or not running,
 * -1 when op has already been finished with the error (transport, runtime
 * or label). st is filled for 0 and 1.
 */
int
eng_inspect_running(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, struct sbx_status *st)
{
	int r;

	if ((r = eng_inspect_found(op, status, body, err, st, NULL)) <= 0)
		return r;
	return st->state == SBX_STATE_RUNNING;
}

int
eng_ended(struct eop *op, const struct sbx_err *err)
{
	if (err == NULL)
		return 0;
	eng_finish_err(op, err);
	return 1;
}

int
eng_not_ours(struct sbx_err *e, const char *kind, const char *name)
{
	return sbx_err_set(e, SBX_E_CONFLICT, "a %s named %s exists that sbx "
	    "does not manage; it was left alone", kind, name);
}

int
eng_not_found(const struct eop *op, struct sbx_err *e)
{
	return sbx_err_set(e, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX,
	    op->id);
}

int
eng_finish_if_absent(struct eop *op, int r, const struct sbx_status *st)
{
	struct sbx_err e;

	if (r != 0 || st->state != SBX_STATE_ABSENT)
		return 0;
	eng_not_found(op, &e);
	eng_finish_err(op, &e);
	return 1;
}

/*
 * A container inspect answer: 1 found (st filled, and *helper, when helper
 * is not NULL, its L_HELPER label, NULL without one; it lives in body),
 * 0 absent (404), -1 when op has already been finished with the error
 * (transport, runtime or label).
 */
int
eng_inspect_found(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, struct sbx_status *st, const char **helper)
{
	struct sbx_err e;

	memset(st, 0, sizeof(*st));
	if (err != NULL) {
		eng_finish_err(op, err);
		return -1;
	}
	if (status == 404 || eng_gone(status, body))
		return 0;
	if (REPLY_BAD(op, NULL, NULL, status, body, "inspect the container",
	    200))
		return -1;
	if (eng_status_from_inspect(op, body, st, &e) < 0) {
		eng_finish_err(op, &e);
		return -1;
	}
	if (helper != NULL)
		*helper = eng_label(json_object_get(json_object_get(body,
		    "Config"), "Labels"), L_HELPER);
	return 1;
}

int
eng_exec_create(struct eop *op, int with_stdin, json_t *env, json_t *cmd,
    cont_fn cont)
{
	json_t *req;

	req = json_pack("{s:b, s:b, s:b, s:b, s:s, s:s, s:o, s:O}",
	    "AttachStdin", with_stdin,
	    "AttachStdout", 1,
	    "AttachStderr", 1,
	    "Tty", 0,
	    "User", op->e->user,
	    "WorkingDir", SBX_WORK_DIR,
	    "Env", env != NULL ? json_incref(env) : json_array(),
	    "Cmd", cmd);
	if (req == NULL)
		return -1;
	eng_callf(op, "POST", req, cont, API "/containers/%s/exec", op->cid);
	return 0;
}

int
eng_exec_created_id(const struct eop *op, int status, json_t *body,
    const struct sbx_err *err, const char *what, char *rexec, size_t sz,
    struct sbx_err *e)
{
	if (err != NULL) {
		*e = *err;
		return -1;
	}
	if (status == 404 || eng_gone(status, body))
		return eng_not_found(op, e);
	/* Podman answers an exec in a container that stopped meanwhile with
	 * 500 "... container state improper" where Docker answers 409. */
	if (status == 409 || (status == 500 && strstr(eng_jstr(body, "message"),
	    "container state improper") != NULL))
		return sbx_err_set(e, SBX_E_NOT_RUNNING, SBX_MSG_NOT_RUNNING,
		    op->id);
	if (status != 201) {
		eng_runtime_err(e, status, body, what);
		return -1;
	}
	snprintf(rexec, sz, "%s", eng_jstr(body, "Id"));
	if (!eng_name_ok(rexec, sz - 1))
		return sbx_err_set(e, SBX_E_RUNTIME, "runtime gave no exec id");
	return 0;
}

struct sbx_http_req *
eng_exec_start_stream(struct engine *e, const char *rexec,
    const struct sbx_http_cbs *cbs, struct sbx_err *err)
{
	static const char body[] = "{\"Detach\":false,\"Tty\":false}";
	struct sbx_http_request q;
	struct sbx_http_opts o;
	char path[256];

	memset(&q, 0, sizeof(q));
	memset(&o, 0, sizeof(o));
	snprintf(path, sizeof(path), API "/exec/%s/start", rexec);
	q.method = "POST";
	q.path = path;
	q.content_type = "application/json";
	q.body = body;
	q.body_len = sizeof(body) - 1;
	q.upgrade = 1;
	o.peer_name = "the container runtime";
	o.cut_code = SBX_E_RUNTIME_UNAVAILABLE;
	o.header_timeout_ms = e->req_timeout_ms;
	return sbx_http_request(e->base.base, e->address, &q, &o, cbs, err);
}
