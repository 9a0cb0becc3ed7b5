/* broker_check.c - sandbox-broker --check and --health (SPEC §9, docs/broker.md). */
#include <sys/stat.h>

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "broker_check.h"
#include "driver_engine.h"
#include "sbx_call.h"
#include "sbx_http_client.h"
#include "sbx_log.h"
#include "sbx_probe.h"
#include "sbx_proto.h"
#include "sbx_token.h"

/* --check: one line per finding; "problem: " lines say what would fail. */
struct check {
	struct event_base *base;
	int problems;
	int status;                /* of the image request */
	struct evbuffer *body;
	int over;
	int finished;
	struct sbx_err err;
	char *pstat;               /* X-Docker-Container-Path-Stat, or NULL */
};

void
broker_check_problem(int *problems, const char *fmt, ...)
{
	va_list ap;

	(*problems)++;
	fputs("problem: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
}

#define problem(c, ...) broker_check_problem(&(c)->problems, __VA_ARGS__)

static void
check_done(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	struct check *c = arg;

	if (err != NULL)
		problem(c, "the runtime cannot be used: %s", err->message);
	else if (!h->ok && (strncmp(h->reason, "sbx-helper", 10) == 0 ||
	    strncmp(h->reason, "default image", 13) == 0))
		/* said below, with the helper and each image */
		printf("runtime: %s (API %s): ok\n", h->runtime, h->api_version);
	else if (!h->ok)
		problem(c, "%s%s", h->reason, h->runtime[0] ? "" :
		    " (no sandbox can be created or used)");
	else
		printf("runtime: %s (API %s): ok\n", h->runtime, h->api_version);
	c->finished = 1;
	event_base_loopbreak(c->base);
}

/*
 * The helper's ELF header: the architecture it runs on (Engine API names:
 * amd64, arm64, ...) or NULL after printing the problem. It must be a
 * static executable: sandboxes share no library with the broker.
 */
static const char *
check_helper(struct check *c, const char *path)
{
	static const struct { int machine; const char *arch; } arches[] = {
		{ EM_X86_64, "amd64" }, { EM_AARCH64, "arm64" },
		{ EM_386, "386" }, { EM_ARM, "arm" }, { EM_PPC64, "ppc64le" },
		{ EM_S390, "s390x" }, { EM_RISCV, "riscv64" },
	};
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	const char *arch = NULL;
	size_t i;
	int fd, dynamic = 0;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		problem(c, "sbx-helper cannot be read at %s (%s): no sandbox can "
		    "be created; set helper_path.", path, strerror(errno));
		return NULL;
	}
	if (read(fd, &eh, sizeof(eh)) != (ssize_t)sizeof(eh) ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)) {
		close(fd);
		problem(c, "sbx-helper at %s is not a 64-bit ELF executable: "
		    "sandboxes could not run it; rebuild it with make.", path);
		return NULL;
	}
	for (i = 0; i < eh.e_phnum; i++) {
		if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff +
		    i * eh.e_phentsize)) != (ssize_t)sizeof(ph))
			break;
		if (ph.p_type == PT_INTERP)
			dynamic = 1;
	}
	close(fd);
	if (dynamic) {
		problem(c, "sbx-helper at %s is dynamically linked: it cannot run "
		    "in images without its libraries; build it static (make).",
		    path);
		return NULL;
	}
	if (access(path, X_OK) == -1) {
		problem(c, "sbx-helper at %s is not executable: %s.", path,
		    strerror(errno));
		return NULL;
	}
	for (i = 0; i < sizeof(arches) / sizeof(arches[0]); i++)
		if (arches[i].machine == eh.e_machine)
			arch = arches[i].arch;
	if (arch == NULL)
		arch = "unknown";
	printf("helper: %s (static, %s): ok\n", path, arch);
	return arch;
}

static void
img_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct check *c = arg;

	(void)req;
	if (c->over || evbuffer_get_length(c->body) + len > 4 * 1024 * 1024) {
		c->over = 1;
		return;
	}
	evbuffer_add(c->body, buf, len);
}

static void
img_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct check *c = arg;

	const char *ps = sbx_http_req_header(req, "X-Docker-Container-Path-Stat");

	c->status = sbx_http_req_status(req);
	free(c->pstat);
	c->pstat = ps != NULL ? strdup(ps) : NULL;
	if (err != NULL)
		c->err = *err;
	c->finished = 1;
	event_base_loopbreak(c->base);
}

/*
 * One runtime request, waited for: method path with the JSON text body (or
 * NULL); the status and answer land in c. -1 after a transport error
 * (c->err set).
 */
static int
check_call(struct check *c, const char *runtime, const char *method,
    const char *path, const char *body)
{
	struct sbx_http_request q;
	struct sbx_http_opts o;
	struct sbx_http_cbs cbs;
	struct sbx_http_req *req;

	memset(&q, 0, sizeof(q));
	memset(&o, 0, sizeof(o));
	memset(&cbs, 0, sizeof(cbs));
	q.method = method;
	q.path = path;
	if (body != NULL) {
		q.content_type = "application/json";
		q.body = body;
		q.body_len = strlen(body);
	}
	o.timeout_ms = 30000;
	o.peer_name = "the container runtime";
	cbs.body = img_body;
	cbs.done = img_done;
	cbs.arg = c;
	c->finished = 0;
	c->over = 0;
	c->status = 0;
	sbx_err_clear(&c->err);
	evbuffer_drain(c->body, evbuffer_get_length(c->body));
	if ((req = sbx_http_request(c->base, runtime, &q, &o, &cbs,
	    &c->err)) == NULL)
		return -1;
	while (!c->finished)
		if (event_base_dispatch(c->base) == -1)
			break;
	return c->err.code[0] != '\0' ? -1 : 0;
}

/*
 * The image's mount paths (adr/0045), as ensure judges them: a container
 * of it with no mount, created and never started, an archive HEAD per
 * path, removed. 1 when each passed, 0 after printing the problem.
 */
static int
check_mounts(struct check *c, const char *runtime, const char *image)
{
	struct sbx_err err;
	char path[1024], id[80] = "", *body;
	json_t *j;
	size_t i;
	int ok = 1;

	body = json_dumps(j = json_pack("{s:s, s:[s], s:{s:s, s:s}, s:b,"
	    " s:{s:s, s:[s]}}", "Image", image, "Entrypoint", "/.sbx/sbx-helper",
	    "Labels", "io.sbx.managed", "true", "io.sbx.role", "image-probe",
	    "NetworkDisabled", 1, "HostConfig", "NetworkMode", "none",
	    "CapDrop", "ALL"), JSON_COMPACT);
	json_decref(j);
	if (body == NULL || check_call(c, runtime, "POST",
	    "/v1.41/containers/create", body) < 0 || c->status != 201 ||
	    (j = json_loadb((const char *)evbuffer_pullup(c->body, -1),
	    evbuffer_get_length(c->body), 0, NULL)) == NULL) {
		free(body);
		problem(c, "image %s could not be checked: the runtime did not "
		    "create a container of it (HTTP %d).", image, c->status);
		return 0;
	}
	free(body);
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(j,
	    "Id")) != NULL ? json_string_value(json_object_get(j, "Id")) : "");
	json_decref(j);
	for (i = 0; id[0] != '\0' && sbx_engine_mount_paths[i] != NULL; i++) {
		snprintf(path, sizeof(path), "/v1.41/containers/%s/archive?path=%s",
		    id, sbx_engine_mount_paths[i]);
		sbx_err_clear(&err);
		if (check_call(c, runtime, "HEAD", path, NULL) < 0 ||
		    (c->status != 200 && c->status != 404)) {
			problem(c, "image %s could not be checked: the runtime did "
			    "not stat its %s (HTTP %d).", image,
			    sbx_engine_mount_paths[i], c->status);
			ok = 0;
			break;
		}
		if (sbx_engine_mount_path_judge(image, sbx_engine_mount_paths[i],
		    c->status == 404 ? NULL : c->pstat, &err) < 0) {
			problem(c, "%s", err.message);
			ok = 0;
			break;
		}
	}
	if (id[0] != '\0') {
		snprintf(path, sizeof(path), "/v1.41/containers/%s?force=1&v=0", id);
		(void)check_call(c, runtime, "DELETE", path, NULL);
	}
	return ok;
}

/* One allowlisted image: present, Linux, the helper's architecture, its
 * mount paths directories (or absent). */
static void
check_image(struct check *c, const char *runtime, const char *image,
    const char *helper_arch, int is_default)
{
	char path[1024], enc[800];
	const char *arch, *os;
	json_t *j = NULL;
	size_t i, k = 0;

	for (i = 0; image[i] != '\0' && k + 4 < sizeof(enc); i++) {
		unsigned char ch = (unsigned char)image[i];

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("-_.:/@", ch) != NULL)
			enc[k++] = (char)ch;
		else
			k += (size_t)snprintf(enc + k, 4, "%%%02X", ch);
	}
	enc[k] = '\0';
	snprintf(path, sizeof(path), "/v1.41/images/%s/json", enc);
	if (check_call(c, runtime, "GET", path, NULL) < 0) {
		problem(c, "image %s could not be checked: %s", image,
		    c->err.message);
		return;
	}
	if (c->status == 404) {
		problem(c, "image %s is not in the runtime: every ensure %s fails "
		    "(nothing can be pulled: build or import it).", image,
		    is_default ? "that names no image" : "asking for it");
		return;
	}
	if (c->status != 200 || c->over || (j = json_loadb((const char *)
	    evbuffer_pullup(c->body, -1), evbuffer_get_length(c->body), 0,
	    NULL)) == NULL) {
		problem(c, "image %s could not be inspected (HTTP %d).", image,
		    c->status);
		return;
	}
	arch = json_string_value(json_object_get(j, "Architecture"));
	os = json_string_value(json_object_get(j, "Os"));
	if (os != NULL && os[0] != '\0' && strcmp(os, "linux") != 0)
		problem(c, "image %s is for %s, not linux: its sandboxes cannot "
		    "start.", image, os);
	else if (helper_arch != NULL && arch != NULL && arch[0] != '\0' &&
	    strcmp(arch, helper_arch) != 0)
		problem(c, "image %s is for %s but sbx-helper is built for %s: "
		    "its sandboxes cannot run the helper (ensure fails).", image,
		    arch, helper_arch);
	else if (check_mounts(c, runtime, image))
		printf("image: %s (%s/%s): ok\n", image, os != NULL ? os : "?",
		    arch != NULL ? arch : "?");
	json_decref(j);
}

/* --check: like a doctor, says what is wrong and exits 0 or 69. Nothing is
 * left (each image's probe container is removed): images without /work, a
 * 0755 /tmp or no shell are fine; mount paths that are links or files are
 * not (adr/0045). */
int
broker_run_check(struct event_base *base, struct sbx_driver *driver,
    const struct broker_config *cfg, const char *token_problem)
{
	struct check c;
	struct sbx_err err;
	struct sbx_op *op;
	const char *harch;
	const char **allow;
	size_t i;

	memset(&c, 0, sizeof(c));
	c.base = base;
	if ((c.body = evbuffer_new()) == NULL)
		return BROKER_EXIT_INTERNAL;
	printf("runtime socket: %s\n", cfg->runtime);
	if (token_problem != NULL)
		problem(&c, "broker token: %s; the broker would refuse to "
		    "start (exit 78)", token_problem);
	harch = check_helper(&c, cfg->helper_path);
	sbx_err_clear(&err);
	op = sbx_call_health(driver, check_done, &c, &err);
	if (op == NULL)
		problem(&c, "the runtime cannot be used: %s", err.message);
	else
		while (!c.finished)
			if (event_base_dispatch(base) == -1)
				break;
	if ((allow = broker_config_allowlist(cfg)) == NULL) {
		evbuffer_free(c.body);
		return BROKER_EXIT_INTERNAL;
	}
	for (i = 0; allow[i] != NULL; i++)
		check_image(&c, cfg->runtime, allow[i], harch, i == 0);
	free(allow);
	free(c.pstat);
	evbuffer_free(c.body);
	printf("%d problem%s\n", c.problems, c.problems == 1 ? "" : "s");
	return c.problems > 0 ? BROKER_EXIT_UNAVAILABLE : BROKER_EXIT_OK;
}

/*
 * --health: GET /v1/health from the broker that serves cfg->listen, with the
 * token of token_file (or SBX_BROKER_TOKEN); one line on stdout, 0 or 1.
 */
int
broker_run_health(const struct broker_config *cfg)
{
	char tok[SBX_TOKEN_MAX_LEN + 1], detail[512];
	struct sbx_err err;
	size_t len = 0;
	int rc;

	sbx_err_clear(&err);
	if (sbx_token_read(cfg->token_file, getenv("SBX_BROKER_TOKEN"), tok,
	    sizeof(tok), &len, &err) == -1) {
		printf("unhealthy: %s\n", err.message);
		return SBX_PROBE_UNHEALTHY;
	}
	rc = sbx_probe_health(cfg->listen, SBX_PATH_HEALTH, tok, len, 5000,
	    detail, sizeof(detail));
	sodium_memzero(tok, sizeof(tok));
	printf("%s: %s\n", rc == SBX_PROBE_HEALTHY ? "healthy" : "unhealthy",
	    detail);
	return rc;
}

