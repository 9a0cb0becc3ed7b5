/* api_e2b_route.c - how a request reaches the E2B layer (adr/0059): its route rows, its credentials (X-API-Key for the control plane; a sandbox's access token for envd, E2b-Sandbox-Id/-Port or the {port}-{id}.{e2b_domain} Host), its error shape, and envd's port: 49983 is envd (api_envd.c), any other the ports proxy (adr/0053). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sodium.h>

#include "api_e2b_int.h"
#include "api_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

#define E2B_PREFIX "/e2b"
#define ENVD_PREFIX E2B_PREFIX "/envd"
#define SBX_PATH E2B_PREFIX "/sandboxes/{npc}"

#define MSG_NO_KEY "A valid API key is required (X-API-Key: an sbx API key)."
#define MSG_NO_TOKEN "The sandbox's access token is required " \
	"(X-Access-Token: envdAccessToken of create or connect)."

const char *const api_e2b_gate_fields[4] = {
	[API_E2B_FIELD_KEY] = "X-API-Key",
	[API_E2B_FIELD_TOKEN] = "X-Access-Token",
	[API_E2B_FIELD_ID] = "E2b-Sandbox-Id",
	[API_E2B_FIELD_PORT] = "E2b-Sandbox-Port",
};

/* envd and a sandbox's ports take every method a client sends. */
#define ENVD_ROW(m, pattern, act) \
	{ { m, pattern }, api_h_e2b_envd, ENVD_FLAGS, .action = act }
#define ENVD_ROWS(pattern, act) \
	ENVD_ROW(EVHTTP_REQ_GET, pattern, act), \
	ENVD_ROW(EVHTTP_REQ_POST, pattern, act), \
	ENVD_ROW(EVHTTP_REQ_PUT, pattern, act), \
	ENVD_ROW(EVHTTP_REQ_DELETE, pattern, act), \
	ENVD_ROW(EVHTTP_REQ_PATCH, pattern, act), \
	ENVD_ROW(EVHTTP_REQ_HEAD, pattern, act), \
	ENVD_ROW(EVHTTP_REQ_OPTIONS, pattern, act)
/* R_PORT: the body (up to port_body_max) goes on as it came. */
#define ENVD_FLAGS (R_ENVD | R_AUTH | R_NPC | R_PORT | R_WAKES)
#define CP (R_E2B | R_AUTH)

/* The control plane (E2B's OpenAPI, as the SDK 2.51 calls it) and the
 * envd path form. Checks are api_http.c's, in its order. */
static const struct api_route e2b_routes[] = {
	{ { EVHTTP_REQ_POST, E2B_PREFIX "/v2/sandboxes" }, api_h_e2b_create,
	    CP | R_JSON | R_MUTATING, .action = "e2b.create" },
	{ { EVHTTP_REQ_GET, E2B_PREFIX "/v2/sandboxes" }, api_h_e2b_list, CP,
	    .action = "e2b.list" },
	{ { EVHTTP_REQ_POST, E2B_PREFIX "/v2/sandboxes/{npc}/connect" },
	    api_h_e2b_connect, CP | R_NPC | R_JSON_OPT | R_MUTATING,
	    .action = "e2b.connect" },
	{ { EVHTTP_REQ_GET, SBX_PATH }, api_h_e2b_get, CP | R_NPC,
	    .action = "e2b.get" },
	{ { EVHTTP_REQ_DELETE, SBX_PATH }, api_h_e2b_kill,
	    CP | R_NPC | R_MUTATING, .action = "e2b.kill" },
	{ { EVHTTP_REQ_POST, SBX_PATH "/timeout" }, api_h_e2b_timeout,
	    CP | R_NPC | R_JSON_OPT | R_MUTATING, .action = "e2b.timeout" },
	{ { EVHTTP_REQ_POST, SBX_PATH "/pause" }, api_h_e2b_pause,
	    CP | R_NPC | R_JSON_OPT | R_MUTATING, .action = "e2b.pause" },
	{ { EVHTTP_REQ_GET, SBX_PATH "/metrics" }, api_h_e2b_metrics,
	    CP | R_NPC, .action = "e2b.metrics" },
	{ { EVHTTP_REQ_PUT, SBX_PATH "/network" }, api_h_e2b_refuse,
	    CP | R_NPC | R_JSON_OPT | R_MUTATING, .action = "e2b.network" },
	/* E2B's snapshot and fork calls: 501 with where sbx's are (api_snap.c). */
	{ { EVHTTP_REQ_POST, SBX_PATH "/snapshots" }, api_h_e2b_snap_refuse,
	    CP | R_NPC | R_JSON_OPT, .action = "e2b.snapshot" },
	{ { EVHTTP_REQ_POST, SBX_PATH "/fork" }, api_h_e2b_snap_refuse,
	    CP | R_NPC | R_JSON_OPT, .action = "e2b.fork" },
	ENVD_ROWS(ENVD_PREFIX "/**", "e2b.envd"),
};
#define NROUTES (sizeof(e2b_routes) / sizeof(e2b_routes[0]))

/* Every path of a {port}-{id}.{e2b_domain} Host is that sandbox's port. */
static const struct api_route host_routes[] = {
	ENVD_ROWS("/**", "e2b.envd_host"),
};
#define NHOST_ROUTES (sizeof(host_routes) / sizeof(host_routes[0]))

/* ------------------------------------------------------------------ */

static int
under(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	return path != NULL && strncmp(path, prefix, n) == 0 &&
	    (path[n] == '\0' || path[n] == '/');
}

/* The Host's {port}-{id} under e2b_domain (1), or 0. */
static int
host_form(const struct api_server *s, const char *host, size_t hostlen,
    int *port, char *id, size_t idcap)
{
	return api_e2b_host_parse(host, hostlen, s->cfg->e2b_domain, port, id,
	    idcap);
}

int
api_e2b_claims(const struct api_server *s, const char *path,
    const char *host, size_t hostlen)
{
	char id[API_NPC_NAME_MAX + 2];
	int port;

	return under(path, E2B_PREFIX) ||
	    host_form(s, host, hostlen, &port, id, sizeof(id));
}

/* A gate field as a NUL-terminated copy (cap bytes), or 0 when absent,
 * repeated or too long. */
static int
field_copy(const struct sbx_gate_head *h, int i, char *out, size_t cap)
{
	if (h->nfield[i] != 1 || h->fieldlen[i] >= cap)
		return 0;
	memcpy(out, h->field[i], h->fieldlen[i]);
	out[h->fieldlen[i]] = '\0';
	return 1;
}

enum sbx_gate_verdict
api_e2b_gate(struct api_server *s, const struct sbx_gate_head *h,
    const char *path, uint64_t *cap)
{
	struct api_principal who;
	struct api_e2b_sandbox sb;
	const struct api_route *r;
	char id[API_NPC_NAME_MAX + 2], tok[API_E2B_TOKEN_LEN + 2], key[256];
	struct sbx_err err;
	int port, ok;

	*cap = 0;
	sbx_err_clear(&err);
	if (host_form(s, h->host, h->hostlen, &port, id, sizeof(id)) ||
	    under(path, ENVD_PREFIX)) {
		if (!under(path, ENVD_PREFIX) || field_copy(h,
		    API_E2B_FIELD_ID, id, sizeof(id)))
			;
		else
			return h->nfield[API_E2B_FIELD_ID] > 1 ? SBX_GATE_PASS :
			    SBX_GATE_UNAUTHORIZED;   /* two: dispatch's 400 */
		ok = field_copy(h, API_E2B_FIELD_TOKEN, tok, sizeof(tok)) &&
		    api_e2b_lookup(s, id, tok, &sb, &err) == 0;
		sodium_memzero(tok, sizeof(tok));
		if (!ok)
			/* An unknown sandbox is dispatch's 404, with no body. */
			return strcmp(err.code, SBX_E_NOT_FOUND) == 0 ?
			    SBX_GATE_PASS : SBX_GATE_UNAUTHORIZED;
		*cap = api_e2b_gate_streams(s, h, path) ?
		    (uint64_t)s->cfg->file_size_max :
		    (uint64_t)s->cfg->port_body_max;
		return SBX_GATE_KEYED;
	}
	ok = field_copy(h, API_E2B_FIELD_KEY, key, sizeof(key)) &&
	    api_store_authenticate(s->store, key, strlen(key), &who) == 1;
	sodium_memzero(key, sizeof(key));
	sodium_memzero(&who, sizeof(who));
	if (!ok)
		return SBX_GATE_UNAUTHORIZED;
	r = sbx_httpd_route_find(e2b_routes, NROUTES, sizeof(e2b_routes[0]),
	    h->type, path, NULL, NULL, 0);
	if (r != NULL && (r->flags & (R_JSON | R_JSON_OPT)))
		*cap = (uint64_t)s->cfg->body_max;
	return SBX_GATE_KEYED;
}

int
api_e2b_gate_streams(const struct api_server *s, const struct sbx_gate_head *h,
    const char *path)
{
	char id[API_NPC_NAME_MAX + 2];
	const char *p;
	int port;

	if (h->type != EVHTTP_REQ_POST || path == NULL)
		return 0;
	if (host_form(s, h->host, h->hostlen, &port, id, sizeof(id)))
		p = path;
	else if (under(path, ENVD_PREFIX)) {
		p = path + strlen(ENVD_PREFIX);
		port = API_E2B_ENVD_PORT;
		if (h->nfield[API_E2B_FIELD_PORT] > 1)
			return 0;
		if (h->nfield[API_E2B_FIELD_PORT] == 1 &&
		    (h->fieldlen[API_E2B_FIELD_PORT] != 5 ||
		    memcmp(h->field[API_E2B_FIELD_PORT], "49983", 5) != 0))
			return 0;
	} else
		return 0;
	return port == API_E2B_ENVD_PORT && strcmp(p, "/files") == 0;
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                            */

/* The one value of header name, or NULL (absent); *n gets how many. */
static const char *
header_one(struct areq *a, const char *name, unsigned *n)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(a->h.req);
	struct evkeyval *kv;
	const char *v = NULL;

	*n = 0;
	TAILQ_FOREACH(kv, in, next)
		if (evutil_ascii_strcasecmp(kv->key, name) == 0 && (*n)++ == 0)
			v = kv->value;
	return v;
}

/* Is path a Connect call (process.Process, filesystem.Filesystem)? */
static int
connect_path(const char *p)
{
	return strncmp(p, "/process.", 9) == 0 ||
	    strncmp(p, "/filesystem.", 12) == 0;
}

/* An envd request: the sandbox from the headers or the Host, its token. */
static int
route_envd(struct areq *a, const char *path, int hport, const char *hid,
    char *npc, size_t npccap, char *allow, size_t allowcap,
    struct sbx_err *err)
{
	struct api_e2b_sandbox sb;
	const char *id = hid, *ps, *tok;
	unsigned n;
	char *end;
	long port = hport;
	int r;

	if (id == NULL) {
		if ((id = header_one(a, "E2b-Sandbox-Id", &n)) == NULL || n != 1)
			return sbx_err_set(err, n > 1 ? SBX_E_BAD_REQUEST :
			    SBX_E_NOT_FOUND, n > 1 ? "Exactly one E2b-Sandbox-Id "
			    "header names the sandbox." : "No sandbox named "
			    "(E2b-Sandbox-Id).");
		ps = header_one(a, "E2b-Sandbox-Port", &n);
		port = ps == NULL ? API_E2B_ENVD_PORT : strtol(ps, &end, 10);
		if (n > 1 || (ps != NULL && (*ps == '\0' || *end != '\0')) ||
		    port < 1 || port > 65535)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "E2b-Sandbox-Port "
			    "must be one port number, 1 to 65535.");
	}
	/* Before api_e2b_envd_path: it skips the path's prefix by it. */
	a->port_skip = hid != NULL ? 0 : strlen(ENVD_PREFIX);
	if (port != API_E2B_ENVD_PORT || !connect_path(api_e2b_envd_path(a)))
		a->err_encode = api_e2b_error_json;
	tok = header_one(a, "X-Access-Token", &n);
	if (api_e2b_lookup(a->s, id, n == 1 ? tok : NULL, &sb, err) == -1)
		return -1;
	r = api_store_principal_get_id(a->s->store, sb.owner, &a->who, err);
	if (r == -1)
		return -1;
	if (r == 0 || a->who.revoked_at != 0)
		return sbx_err_set(err, SBX_E_UNAUTHORIZED, "The sandbox's owner "
		    "has no active key.");
	a->authed = 1;
	snprintf(npc, npccap, "%s", sb.id);
	a->port = (int)port;
	snprintf(a->exec_id, sizeof(a->exec_id), "%ld", port);
	a->port_route = 1;
	a->route = hid != NULL ? sbx_httpd_route_find(host_routes, NHOST_ROUTES,
	    sizeof(host_routes[0]), evhttp_request_get_command(a->h.req), path,
	    NULL, allow, allowcap) : sbx_httpd_route_find(e2b_routes, NROUTES,
	    sizeof(e2b_routes[0]), evhttp_request_get_command(a->h.req), path,
	    NULL, allow, allowcap);
	return 0;
}

const char *
api_e2b_begin(struct areq *a, const char *path)
{
	const char *host = evhttp_find_header(evhttp_request_get_input_headers(
	    a->h.req), "Host");
	char id[API_NPC_NAME_MAX + 2];
	int port;

	if (host_form(a->s, host, host != NULL ? strlen(host) : 0, &port, id,
	    sizeof(id)) || under(path, ENVD_PREFIX)) {
		a->err_encode = api_e2b_envd_error_json;
		return MSG_NO_TOKEN;
	}
	a->err_encode = api_e2b_error_json;
	return MSG_NO_KEY;
}

int
api_e2b_route(struct areq *a, const char *path, char *npc, size_t npccap,
    char *allow, size_t allowcap, struct sbx_err *err)
{
	const char *host = evhttp_find_header(evhttp_request_get_input_headers(
	    a->h.req), "Host"), *key;
	char id[API_NPC_NAME_MAX + 2];
	struct sbx_httpd_match m;
	unsigned n;
	int port, r;

	allow[0] = '\0';
	npc[0] = '\0';
	if (host_form(a->s, host, host != NULL ? strlen(host) : 0, &port, id,
	    sizeof(id)))
		return route_envd(a, path, port, id, npc, npccap, allow,
		    allowcap, err);
	if (under(path, ENVD_PREFIX))
		return route_envd(a, path, 0, NULL, npc, npccap, allow, allowcap,
		    err);
	key = header_one(a, "X-API-Key", &n);
	r = key != NULL && n == 1 ? api_store_authenticate(a->s->store, key,
	    strlen(key), &a->who) : 0;
	if (r == -1)
		return sbx_err_set(err, SBX_E_INTERNAL, "The api's database "
		    "failed.");
	if (r == 0)
		return sbx_err_set(err, SBX_E_UNAUTHORIZED, MSG_NO_KEY);
	a->authed = 1;
	a->route = sbx_httpd_route_find(e2b_routes, NROUTES,
	    sizeof(e2b_routes[0]), evhttp_request_get_command(a->h.req), path,
	    &m, allow, allowcap);
	snprintf(npc, npccap, "%s", m.ncap > 0 && strlen(m.cap[0]) < npccap ?
	    m.cap[0] : "");
	return 0;
}

const char *
api_e2b_envd_path(const struct areq *a)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(a->h.req);
	const char *p = uri != NULL ? evhttp_uri_get_path(uri) : NULL;

	if (p == NULL)
		return "/";
	p += a->port_skip <= strlen(p) ? a->port_skip : strlen(p);
	return p[0] != '\0' ? p : "/";
}

/* ------------------------------------------------------------------ */
/* envd's port, or another                                             */

int
api_h_e2b_envd(struct areq *a, struct sbx_err *err)
{
	struct api_e2b_rec *r = api_e2b_find(a->s, a->npc.name);

	if (r == NULL)
		return sbx_err_set(err, SBX_E_NOT_FOUND, "Sandbox %s not found.",
		    a->npc.name);
	/* A paused sandbox is resumed by connect, never by traffic (E2B's
	 * autoResume is not offered). */
	if (r->paused)
		return sbx_err_set(err, SBX_E_PAUSED, "Sandbox %s is "
		    "paused; connect first (POST /v2/sandboxes/%s/connect).",
		    r->id, r->id);
	if (a->port == API_E2B_ENVD_PORT)
		return api_h_envd(a, err);
	return api_h_port_proxy(a, err);
}
