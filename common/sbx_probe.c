/* sbx_probe.c - `--health`: one GET to a daemon's own listener, for container and service health checks. */
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "sbx_http_client.h"
#include "sbx_probe.h"
#include "sbx_proto.h"
#include "sbx_token.h"

#define PROBE_BODY_MAX (64 * 1024)  /* a health reply is a few hundred bytes */
#define PROBE_MEMBER_MAX 200

struct probe {
	struct event_base *base;
	char body[PROBE_BODY_MAX];
	size_t len;
	int overflow;
	int status;
	int done;
	struct sbx_err err;
};

static void
probe_response(void *arg, struct sbx_http_req *req, int status)
{
	struct probe *p = arg;

	(void)req;
	p->status = status;
}

static void
probe_body(void *arg, struct sbx_http_req *req, const unsigned char *buf,
    size_t len)
{
	struct probe *p = arg;
	size_t n = len;

	(void)req;
	if (n > sizeof(p->body) - 1 - p->len) {
		n = sizeof(p->body) - 1 - p->len;
		p->overflow = 1;
	}
	memcpy(p->body + p->len, buf, n);
	p->len += n;
}

static void
probe_done(void *arg, struct sbx_http_req *req, const struct sbx_err *err)
{
	struct probe *p = arg;

	(void)req;
	if (err != NULL)
		p->err = *err;
	p->done = 1;
	event_base_loopbreak(p->base);
}

/* A JSON string member for the log: at most PROBE_MEMBER_MAX bytes, no
 * control characters (one line). */
static void
member(json_t *o, const char *name, char *out, size_t outsz)
{
	const char *v = json_string_value(json_object_get(o, name));
	size_t i;

	snprintf(out, outsz, "%.*s", PROBE_MEMBER_MAX, v != NULL ? v : "");
	for (i = 0; out[i] != '\0'; i++)
		if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
			out[i] = ' ';
}

/* The listen address as a client reaches it: wildcard hosts on loopback. */
static int
probe_address(const char *listen, char *out, size_t outsz)
{
	const char *colon;
	size_t hostlen;

	if (listen == NULL || listen[0] == '\0')
		return -1;
	if (strncmp(listen, "unix:", 5) == 0) {
		snprintf(out, outsz, "%s", listen);
		return 0;
	}
	if ((colon = strrchr(listen, ':')) == NULL || strcmp(colon + 1, "0") == 0)
		return -1;
	hostlen = (size_t)(colon - listen);
	if ((hostlen == 7 && strncmp(listen, "0.0.0.0", 7) == 0) || hostlen == 0)
		snprintf(out, outsz, "127.0.0.1%s", colon);
	else if ((hostlen == 4 && strncmp(listen, "[::]", 4) == 0))
		snprintf(out, outsz, "[::1]%s", colon);
	else
		snprintf(out, outsz, "%s", listen);
	return 0;
}

int
sbx_probe_health(const char *address, const char *path, const char *token,
    size_t token_len, int64_t timeout_ms, char *detail, size_t detailsz)
{
	static struct probe p;  /* 64 KiB: not on the stack */
	const char *headers[2] = { NULL, NULL };
	const struct sbx_http_request rq = { .method = "GET", .path = path,
	    .headers = headers };
	const struct sbx_http_opts opts = {
		.unavailable_code = SBX_E_BROKER_UNAVAILABLE,
		.protocol_code = SBX_E_BAD_REQUEST,
		.peer_name = "the daemon",
		.header_timeout_ms = timeout_ms,
		.timeout_ms = timeout_ms,
	};
	const struct sbx_http_cbs cbs = { .response = probe_response,
	    .body = probe_body, .done = probe_done, .arg = &p };
	struct sbx_http_req *req = NULL;
	char addr[512], status[PROBE_MEMBER_MAX + 1], reason[PROBE_MEMBER_MAX + 1];
	char auth[SBX_TOKEN_MAX_LEN + 32];
	char scratch[8];
	json_t *o = NULL;
	int rc = SBX_PROBE_UNHEALTHY;

	if (detail == NULL || detailsz == 0) {
		detail = scratch;
		detailsz = sizeof(scratch);
	}
	detail[0] = '\0';
	memset(&p, 0, sizeof(p));
	if (probe_address(address, addr, sizeof(addr)) == -1) {
		snprintf(detail, detailsz, "listen address %s cannot be probed "
		    "(want unix:PATH or HOST:PORT with a port other than 0)",
		    address != NULL ? address : "(none)");
		return rc;
	}
	if (timeout_ms <= 0 || path == NULL || path[0] != '/' ||
	    (token != NULL && token_len > SBX_TOKEN_MAX_LEN)) {
		snprintf(detail, detailsz, "bad probe arguments");
		return rc;
	}
	if ((p.base = event_base_new()) == NULL) {
		snprintf(detail, detailsz, "cannot create an event base");
		return rc;
	}
	if (token != NULL) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %.*s",
		    (int)token_len, token);
		headers[0] = auth;
	}
	req = sbx_http_request(p.base, addr, &rq, &opts, &cbs, &p.err);
	/* The request is serialised by now: the header copy is not needed. */
	sodium_memzero(auth, sizeof(auth));
	if (req == NULL) {
		snprintf(detail, detailsz, "cannot probe %s: %s", addr,
		    p.err.message);
		goto done;
	}
	while (!p.done)
		if (event_base_dispatch(p.base) != 0 && !p.done) {
			snprintf(detail, detailsz, "event loop failed");
			sbx_http_req_cancel(req);
			goto done;
		}
	if (sbx_err_is_set(&p.err)) {
		if (strcmp(p.err.code, SBX_E_TIMEOUT) == 0)
			snprintf(detail, detailsz, "timed out after %lld ms "
			    "probing %s", (long long)timeout_ms, addr);
		else if (strcmp(p.err.code, SBX_E_BROKER_UNAVAILABLE) == 0)
			snprintf(detail, detailsz, "%s", p.err.message);
		else
			snprintf(detail, detailsz, "bad reply from %s: %s", addr,
			    p.err.message);
		goto done;
	}
	p.body[p.len] = '\0';
	if (token != NULL && token_len > 0 &&
	    memmem(p.body, p.len, token, token_len) != NULL) {
		snprintf(detail, detailsz, "HTTP %d; the reply contains the "
		    "token (not shown)", p.status);
		goto done;
	}
	if (p.status != 200) {
		snprintf(detail, detailsz, "HTTP %d from %s", p.status, addr);
		goto done;
	}
	if (p.overflow || (o = json_loadb(p.body, p.len, 0, NULL)) == NULL ||
	    !json_is_object(o)) {
		snprintf(detail, detailsz, "HTTP 200 from %s but the body is not "
		    "a JSON object", addr);
		goto done;
	}
	member(o, "status", status, sizeof(status));
	member(o, "reason", reason, sizeof(reason));
	if (strcmp(status, "ok") == 0) {
		snprintf(detail, detailsz, "ok");
		rc = SBX_PROBE_HEALTHY;
	} else
		snprintf(detail, detailsz, "status %s%s%s",
		    status[0] != '\0' ? status : "missing",
		    reason[0] != '\0' ? ": " : "", reason);
done:
	json_decref(o);
	if (p.base != NULL)
		event_base_free(p.base);
	sodium_memzero(&p, sizeof(p));
	return rc;
}
