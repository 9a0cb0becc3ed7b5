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
};

static void
problem(struct check *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
problem(struct check *c, const char *fmt, ...)
{
	va_list ap;

	c->problems++;
	fputs("problem: ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
}

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

	c->status = sbx_http_req_status(req);
	if (err != NULL)
		c->err = *err;
	c->finished = 1;
	event_base_loopbreak(c->base);
}

/* One allowlisted image: present, Linux, the helper's architecture. */
static void
check_image(struct check *c, const char *runtime, const char *image,
    const char *helper_arch, int is_default)
{
	struct sbx_http_request q;
	struct sbx_http_opts o;
	struct sbx_http_cbs cbs;
	struct sbx_http_req *req;
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
	memset(&q, 0, sizeof(q));
	memset(&o, 0, sizeof(o));
	memset(&cbs, 0, sizeof(cbs));
	q.method = "GET";
	q.path = path;
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
	    &c->err)) == NULL) {
		problem(c, "image %s could not be checked: %s", image,
		    c->err.message);
		return;
	}
	while (!c->finished)
		if (event_base_dispatch(c->base) == -1)
			break;
	if (c->err.code[0] != '\0') {
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
	else
		printf("image: %s (%s/%s): ok\n", image, os != NULL ? os : "?",
		    arch != NULL ? arch : "?");
	json_decref(j);
}

/* --check: like a doctor, says what is wrong and exits 0 or 69. Nothing is
 * created: images without /work, a 0755 /tmp or no shell are fine. */
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

