/* api_http.c - sandbox-api's public HTTP server: the route table, the checks every request passes before its handler (auth, route, limits, ownership, body), wake on use, the server's life (SPEC §8, adr/0035). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <jansson.h>
#include <sodium.h>

#include "api_browser.h"
#include "api_connect.h"
#include "api_e2b.h"
#include "api_e2b_process.h"
#include "api_e2b_fs.h"
#include "api_int.h"
#include "api_term.h"
#include "sbx_call.h"
#include "sbx_httpd.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_sqlite.h"
#include "sbx_time.h"
#include "sbx_usage.h"

#define API_PREFIX "/api/v1"
#define NPCS_PATH API_PREFIX "/npcs"
#define METRICS_PATH "/metrics"


static int events_auth(struct api_server *, const char *, const char *,
    const char *, const char *, int, struct api_principal *);
static int term_auth(struct api_server *, const char *, const char *,
    const char *, const char *, int, struct api_principal *);

/*
 * The route table (rows begin with the core's route, sbx_httpd.h): "{npc}"
 * is the NPC's name, "*" an exec id. Checks run in api_dispatch in this
 * order before any handler: auth, route, method, rate limit, NPC existence
 * and ownership (404 either way), operator-only, body size, JSON syntax;
 * then R_WAKES starts a stopped sandbox. A row names its audit action(s)
 * and, when the bearer key is not its credential, its own auth hook.
 */
#define NPC_PATH NPCS_PATH "/{npc}"
#define EXEC_PATH NPC_PATH "/sandbox/execs/*"
#define TERM_PATH NPC_PATH "/sandbox/terminals/*"
#define PORT_PATH NPC_PATH "/sandbox/ports/{port}"

/* The ports proxy takes every method a browser or a client sends. */
#define PROXY_ROWS(pattern, flags, act, hook) \
	{ { EVHTTP_REQ_GET, pattern }, api_h_port_proxy, flags, \
	    .action = act, .auth = hook }, \
	{ { EVHTTP_REQ_POST, pattern }, api_h_port_proxy, flags, \
	    .action = act, .auth = hook }, \
	{ { EVHTTP_REQ_PUT, pattern }, api_h_port_proxy, flags, \
	    .action = act, .auth = hook }, \
	{ { EVHTTP_REQ_DELETE, pattern }, api_h_port_proxy, flags, \
	    .action = act, .auth = hook }, \
	{ { EVHTTP_REQ_PATCH, pattern }, api_h_port_proxy, flags, \
	    .action = act, .auth = hook }, \
	{ { EVHTTP_REQ_HEAD, pattern }, api_h_port_proxy, flags, \
	    .action = act, .auth = hook }, \
	{ { EVHTTP_REQ_OPTIONS, pattern }, api_h_port_proxy, flags, \
	    .action = act, .auth = hook }
#define PROXY_FLAGS (R_NPC | R_PORT | R_WAKES)

static const struct api_route routes[] = {
	{ { EVHTTP_REQ_POST, NPCS_PATH }, api_h_npc_create,
	    R_AUTH | R_JSON | R_MUTATING, .action = "npc.create" },
	{ { EVHTTP_REQ_GET, NPCS_PATH }, api_h_npc_list, R_AUTH,
	    .action = "npc.list" },
	{ { EVHTTP_REQ_GET, API_PREFIX "/whoami" }, api_h_whoami, R_AUTH,
	    .action = "whoami" },
	{ { EVHTTP_REQ_PUT, NPC_PATH "/sandbox" }, api_h_ensure,
	    R_AUTH | R_NPC | R_JSON_OPT | R_MUTATING,
	    .action = "sandbox.ensure" },
	{ { EVHTTP_REQ_GET, NPC_PATH "/sandbox" }, api_h_status,
	    R_AUTH | R_NPC, .action = "sandbox.status" },
	{ { EVHTTP_REQ_DELETE, NPC_PATH "/sandbox" }, api_h_destroy,
	    R_AUTH | R_NPC | R_MUTATING, .action = "sandbox.destroy" },
	{ { EVHTTP_REQ_POST, NPC_PATH "/sandbox/exec" }, api_h_exec,
	    R_AUTH | R_NPC | R_JSON | R_MUTATING | R_WAKES,
	    .action = "sandbox.exec" },
	{ { EVHTTP_REQ_GET, NPC_PATH "/sandbox/files" }, api_h_read,
	    R_AUTH | R_NPC | R_WAKES, .action = "files.read" },
	{ { EVHTTP_REQ_PUT, NPC_PATH "/sandbox/files" }, api_h_write,
	    R_AUTH | R_NPC | R_RAW | R_MUTATING | R_WAKES,
	    .action = "files.write" },
	{ { EVHTTP_REQ_GET, NPC_PATH "/sandbox/list" }, api_h_list,
	    R_AUTH | R_NPC | R_WAKES, .action = "files.list" },
	{ { EVHTTP_REQ_POST, NPC_PATH "/sandbox/stop" }, api_h_stop,
	    R_AUTH | R_NPC | R_JSON_OPT | R_MUTATING,
	    .action = "sandbox.stop" },
	{ { EVHTTP_REQ_PUT, NPC_PATH "/egress" }, api_h_egress,
	    R_AUTH | R_NPC | R_JSON | R_OPERATOR | R_MUTATING,
	    .action = "egress",
	    .audit = { "egress.revoke", "egress.grant" },
	    .forbidden = API_EGRESS_FORBIDDEN },
	{ { EVHTTP_REQ_GET, NPC_PATH "/egress" }, api_h_egress_get,
	    R_AUTH | R_NPC | R_OPERATOR, .action = "egress.show",
	    .forbidden = API_EGRESS_FORBIDDEN },
	/* Execs as resources (api_execs.c, ADR 0015). */
	{ { EVHTTP_REQ_POST, NPC_PATH "/sandbox/execs" }, api_h_execs_create,
	    R_AUTH | R_NPC | R_JSON | R_MUTATING, .action = "execs.create" },
	{ { EVHTTP_REQ_GET, NPC_PATH "/sandbox/execs" }, api_h_execs_list,
	    R_AUTH | R_NPC, .action = "execs.list" },
	{ { EVHTTP_REQ_GET, EXEC_PATH }, api_h_execs_get,
	    R_AUTH | R_NPC | R_EXEC,
	    .action = "execs.get" },
	{ { EVHTTP_REQ_DELETE, EXEC_PATH }, api_h_execs_delete,
	    R_AUTH | R_NPC | R_EXEC | R_MUTATING, .action = "execs.delete" },
	/* A browser's EventSource cannot send a key: ?ticket= (ADR 0015),
	 * checked by the gate before the body and again in step 1. */
	{ { EVHTTP_REQ_GET, EXEC_PATH "/events" }, api_h_execs_events,
	    R_AUTH | R_NPC | R_EXEC, .action = "execs.events",
	    .auth = events_auth },
	{ { EVHTTP_REQ_POST, EXEC_PATH "/ticket" }, api_h_execs_ticket,
	    R_AUTH | R_NPC | R_EXEC | R_JSON_OPT | R_MUTATING,
	    .action = "execs.ticket" },
	/* Terminals (api_term*.c, adr/0051): a key, or a ticket of that
	 * terminal for its output, input and control. */
	{ { EVHTTP_REQ_POST, NPC_PATH "/sandbox/terminals" }, api_h_terms_create,
	    R_AUTH | R_NPC | R_JSON_OPT | R_MUTATING | R_WAKES,
	    .action = "terminals.create" },
	{ { EVHTTP_REQ_GET, NPC_PATH "/sandbox/terminals" }, api_h_terms_list,
	    R_AUTH | R_NPC, .action = "terminals.list" },
	{ { EVHTTP_REQ_GET, TERM_PATH }, api_h_terms_get,
	    R_AUTH | R_NPC | R_EXEC, .action = "terminals.get" },
	{ { EVHTTP_REQ_DELETE, TERM_PATH }, api_h_terms_delete,
	    R_AUTH | R_NPC | R_EXEC | R_MUTATING, .action = "terminals.delete" },
	{ { EVHTTP_REQ_GET, TERM_PATH "/output" }, api_h_terms_output,
	    R_AUTH | R_NPC | R_EXEC, .action = "terminals.output",
	    .auth = term_auth },
	{ { EVHTTP_REQ_POST, TERM_PATH "/input" }, api_h_terms_input,
	    R_AUTH | R_NPC | R_EXEC | R_BYTES, .action = "terminals.input",
	    .auth = term_auth },
	{ { EVHTTP_REQ_POST, TERM_PATH "/control" }, api_h_terms_control,
	    R_AUTH | R_NPC | R_EXEC | R_JSON, .action = "terminals.control",
	    .auth = term_auth },
	{ { EVHTTP_REQ_GET, TERM_PATH "/attach" }, api_h_terms_attach,
	    R_AUTH | R_NPC | R_EXEC, .action = "terminals.attach",
	    .auth = term_auth },
	{ { EVHTTP_REQ_POST, TERM_PATH "/tickets" }, api_h_terms_ticket,
	    R_AUTH | R_NPC | R_EXEC | R_JSON_OPT | R_MUTATING,
	    .action = "terminals.ticket" },
	/* Ports (api_ports*.c, adr/0053): tickets, previews and tcp first,
	 * so those three names of a port's root are the api's. */
	{ { EVHTTP_REQ_POST, PORT_PATH "/tickets" }, api_h_port_ticket,
	    R_AUTH | R_NPC | R_JSON_OPT, .action = "ports.ticket" },
	{ { EVHTTP_REQ_POST, PORT_PATH "/previews" }, api_h_port_preview,
	    R_AUTH | R_NPC | R_JSON_OPT | R_MUTATING,
	    .action = "ports.preview" },
	{ { EVHTTP_REQ_GET, PORT_PATH "/tcp" }, api_h_port_tcp,
	    R_AUTH | PROXY_FLAGS, .action = "ports.tcp",
	    .auth = api_ports_auth },
	PROXY_ROWS(PORT_PATH "/**", R_AUTH | PROXY_FLAGS, "ports.proxy",
	    api_ports_auth),
	/* A preview link on the api's own origin: no key, the token is the
	 * credential (R_PREVIEW). */
	PROXY_ROWS("/p/{token}/**", R_PREVIEW | PROXY_FLAGS, "ports.preview_proxy",
	    NULL),
	/* The browser (api_browser.c, adr/0064). */
	{ { EVHTTP_REQ_POST, NPC_PATH "/sandbox/browser" }, api_h_browser_start,
	    R_AUTH | R_NPC | R_JSON_OPT | R_MUTATING | R_WAKES,
	    .action = "browser.start" },
	{ { EVHTTP_REQ_GET, NPC_PATH "/sandbox/browser" }, api_h_browser_status,
	    R_AUTH | R_NPC, .action = "browser.status" },
	{ { EVHTTP_REQ_DELETE, NPC_PATH "/sandbox/browser" }, api_h_browser_stop,
	    R_AUTH | R_NPC | R_MUTATING, .action = "browser.stop" },
	/* Watching the browser (api_browser_view.c, adr/0065): the view's
	 * WebSocket takes a key or a view ticket. */
	{ { EVHTTP_REQ_GET, NPC_PATH "/sandbox/browser/screenshot" },
	    api_h_browser_screenshot, R_AUTH | R_NPC,
	    .action = "browser.screenshot" },
	{ { EVHTTP_REQ_POST, NPC_PATH "/sandbox/browser/view/tickets" },
	    api_h_browser_view_ticket, R_AUTH | R_NPC | R_JSON_OPT,
	    .action = "browser.view_ticket" },
	{ { EVHTTP_REQ_GET, NPC_PATH "/sandbox/browser/view" },
	    api_h_browser_view, R_AUTH | R_NPC, .action = "browser.view",
	    .auth = api_browser_view_auth },
	{ { EVHTTP_REQ_GET, "/console" }, api_h_console, 0,
	    .action = "console" },
	/* Operators only: the figures are about every principal's use. */
	{ { EVHTTP_REQ_GET, METRICS_PATH }, api_h_metrics,
	    R_AUTH | R_OPERATOR, .action = "metrics" },
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

/* Every path of a preview Host (TOKEN.<preview_domain>) is that preview. */
static const struct api_route host_routes[] = {
	PROXY_ROWS("/**", R_PREVIEW | PROXY_FLAGS, "ports.preview_host", NULL),
};
#define NHOST_ROUTES (sizeof(host_routes) / sizeof(host_routes[0]))

/* ------------------------------------------------------------------ */
/* Limits                                                              */

/*
 * Token bucket: rate_per_minute tokens, refilled continuously. Returns 0
 * when the request may go on, else the seconds until one token is back.
 */
static long
limit_take(struct api_server *s, struct api_limit *l)
{
	double cap = (double)s->cfg->rate_per_minute;
	double per_ms = cap / 60000.0;
	int64_t now = sbx_mono_ms();
	long wait;

	l->tokens += (double)(now - l->refilled_ms) * per_ms;
	if (l->tokens > cap)
		l->tokens = cap;
	l->refilled_ms = now;
	if (l->tokens >= 1.0) {
		l->tokens -= 1.0;
		return 0;
	}
	wait = (long)((1.0 - l->tokens) / per_ms / 1000.0) + 1;
	return wait > 0 ? wait : 1;
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                            */

/* The bearer API key of an Authorization value (1, 0, -1 as api_auth_fn). */
static int
bearer_auth(struct api_server *s, const char *authz, struct api_principal *who)
{
	const char *key;
	size_t keylen = 0;

	key = sbx_gate_bearer(authz, &keylen);
	return key != NULL ? api_store_authenticate(s->store, key, keylen,
	    who) : 0;
}

/*
 * The events route's credential: the bearer key when an Authorization
 * header is present (then a ticket is not looked at), else ?ticket= of
 * that exec (api_execs_ticket_auth). Cheap enough for the gate.
 */
static int
events_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, const char *authz, int final, struct api_principal *who)
{
	(void)final;
	return authz != NULL ? bearer_auth(s, authz, who) :
	    api_execs_ticket_auth(s, npc, id, query, who);
}

/* A terminal route's credential: the bearer key when an Authorization
 * header is present, else ?ticket= of that terminal
 * (api_term_ticket_auth). */
static int
term_auth(struct api_server *s, const char *npc, const char *id,
    const char *query, const char *authz, int final, struct api_principal *who)
{
	(void)final;
	return authz != NULL ? bearer_auth(s, authz, who) :
	    api_term_ticket_auth(s, npc, id, query, who);
}

/*
 * The route of method + path (sbx_httpd_route_find): the NPC and the exec
 * id it names go to npc and id (npccap, idcap bytes; "" when absent or too
 * long: never valid). When none matches and allow is not NULL, allow gets
 * the methods the path takes ("" when the path is unknown).
 */
static const struct api_route *
route_find(const char *path, int method, char *npc, size_t npccap, char *id,
    size_t idcap, char *allow, size_t allowcap)
{
	const struct api_route *r;
	struct sbx_httpd_match m;

	r = sbx_httpd_route_find(routes, NROUTES, sizeof(routes[0]), method,
	    path, &m, allow, allowcap);
	snprintf(npc, npccap, "%s", m.ncap > 0 && strlen(m.cap[0]) < npccap ?
	    m.cap[0] : "");
	snprintf(id, idcap, "%s", m.ncap > 1 && strlen(m.cap[1]) < idcap ?
	    m.cap[1] : "");
	return r;
}

/* An exec id as a route takes it: [a-z0-9]{1,39}. */
static int
exec_id_ok(const char *id)
{
	size_t n = strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789");

	return n > 0 && n < 40 && id[n] == '\0';
}

/*
 * CORS (Fetch standard §3.2), off unless cors_origins lists the request's
 * Origin: then the answer names it. Returns 1 when req was a preflight
 * and has been answered (204, no body).
 */
static int
cors(struct api_server *s, struct evhttp_request *req)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	struct sbx_httpd_req h = { .req = req, .gate = s->gate };
	const char *origin = evhttp_find_header(in, "Origin");
	char **o;

	if (origin == NULL || s->cfg->cors_origins == NULL)
		return 0;
	for (o = s->cfg->cors_origins; *o != NULL; o++)
		if (strcmp(*o, origin) == 0)
			break;
	if (*o == NULL)
		return 0;
	sbx_httpd_header(&h, "Access-Control-Allow-Origin", origin);
	sbx_httpd_header(&h, "Vary", "Origin");
	sbx_httpd_header(&h, "Access-Control-Expose-Headers", "Location");
	if (evhttp_request_get_command(req) != EVHTTP_REQ_OPTIONS ||
	    evhttp_find_header(in, "Access-Control-Request-Method") == NULL)
		return 0;
	sbx_httpd_header(&h, "Access-Control-Allow-Methods",
	    "GET, POST, PUT, DELETE");
	sbx_httpd_header(&h, "Access-Control-Allow-Headers",
	    "Authorization, Content-Type, Last-Event-ID");
	sbx_httpd_header(&h, "Access-Control-Max-Age", "600");
	sbx_httpd_reply_body(&h, 204, NULL, NULL, 0);
	return 1;
}

/* Everything under /api/v1 and /metrics needs a principal. */
static int
path_needs_auth(const char *path)
{
	return strncmp(path, API_PREFIX "/", sizeof(API_PREFIX)) == 0 ||
	    strcmp(path, METRICS_PATH) == 0;
}

/*
 * Who asks on method + path: the route's own hook (api_auth_fn) when the
 * route has one (with the NPC and exec id the path names and query, the
 * request's query string, not decoded, NULL when none), else the bearer
 * API key of authz (path NULL: a CONNECT's authority, no route: the key
 * only). final 0 in the gate, 1 in api_dispatch. Returns 1 with
 * *who, 0 when not authenticated, -1 on a database error.
 */
static int
api_authenticate(struct api_server *s, int method, const char *path,
    const char *query, const char *authz, int final,
    struct api_principal *who)
{
	const struct api_route *r;
	char npc[API_NPC_NAME_MAX + 2], id[40];
	const char *key;
	size_t keylen = 0;
	api_auth_fn hook;

	r = path != NULL ? route_find(path, method, npc, sizeof(npc), id,
	    sizeof(id), NULL, 0) : NULL;
	if ((hook = r != NULL ? r->auth : NULL) != NULL)
		return hook(s, npc, id, query, authz, final, who);
	key = sbx_gate_bearer(authz, &keylen);
	return key != NULL ? api_store_authenticate(s->store, key, keylen,
	    who) : 0;
}

/*
 * A preview's head in the gate (a preview Host, or /p/TOKEN/...): a live
 * token takes the connection out of the keyless pool (1) and its body may
 * be port_body_max; a dead one passes (2: dispatch answers 404) with no
 * body. 0: no preview; the usual checks go on.
 */
static int
gate_preview(struct api_server *s, const struct sbx_gate_head *h,
    const char *path, uint64_t *cap)
{
	struct api_principal who;
	char host[256], npc[API_NPC_NAME_MAX + 2];
	const char *tok = NULL;
	size_t n = 0;
	int port, r;

	if (h->host != NULL && h->hostlen < sizeof(host)) {
		memcpy(host, h->host, h->hostlen);
		host[h->hostlen] = '\0';
		tok = api_ports_host_token(s, host, &n);
	}
	if (tok == NULL && strncmp(path, "/p/", 3) == 0) {
		tok = path + 3;
		n = strcspn(tok, "/");
	}
	if (tok == NULL)
		return 0;
	r = api_ports_preview_resolve(s, tok, n, &who, npc, sizeof(npc), &port);
	sodium_memzero(&who, sizeof(who));
	if (r != 1)
		return 2;
	*cap = (uint64_t)s->cfg->port_body_max;
	return 1;
}

/*
 * The gate's check (common/sbx_gate.h), before any body byte is read: the
 * credential (the same lookup as api_dispatch's step 1) and the route's
 * body cap. A database error lets the head through with cap 0, so a body
 * is still refused unread and dispatch answers 500.
 */
static enum sbx_gate_verdict
gate_check(void *arg, const struct sbx_gate_head *h, const char *path,
    uint64_t *cap)
{
	struct api_server *s = arg;
	const struct api_route *r;
	struct api_principal who;
	char npc[API_NPC_NAME_MAX + 2], id[40], *target = NULL, *authz = NULL;
	const char *query;
	int ok = 1, keyed = 0;

	*cap = 0;
	/* A CONNECT has no path: without a good key it is refused here, so
	 * the stranger gets 401 and the connection closes. */
	if (path == NULL && h->type != EVHTTP_REQ_CONNECT)
		return SBX_GATE_PASS;   /* api_dispatch: 400 */
	/* A CORS preflight carries no credential by design (Fetch §4.8);
	 * api_dispatch answers it (cors) or asks for a key; no body. */
	if (h->type == EVHTTP_REQ_OPTIONS)
		return SBX_GATE_PASS;
	if (api_e2b_claims(s, path, h->host, h->hostlen))
		return api_e2b_gate(s, h, path, cap);
	if (path != NULL && (ok = gate_preview(s, h, path, cap)) != 0)
		return ok == 1 ? SBX_GATE_KEYED : SBX_GATE_PASS;
	r = path != NULL ? route_find(path, h->type, npc, sizeof(npc), id,
	    sizeof(id), NULL, 0) : NULL;
	if (path == NULL || path_needs_auth(path)) {
		target = strndup(h->target, h->tlen);
		/* A copy of exactly alen bytes: the value may hold a NUL, and
		 * strndup would then allocate less than the alen bytes the
		 * memzero below clears (a heap overrun fuzz_api_http found). */
		if (h->auth != NULL && (authz = malloc(h->alen + 1)) != NULL) {
			memcpy(authz, h->auth, h->alen);
			authz[h->alen] = '\0';
		}
		query = target != NULL ? strchr(target, '?') : NULL;
		ok = target == NULL || (h->auth != NULL && authz == NULL) ? 0 :
		    api_authenticate(s, h->type, path, query != NULL ? query + 1 :
		    NULL, authz, 0, &who);
		sodium_memzero(&who, sizeof(who));
		if (authz != NULL)
			sodium_memzero(authz, h->alen + 1);
		free(authz);
		free(target);
		if (ok == 0)
			return SBX_GATE_UNAUTHORIZED;
		if (ok == -1)
			return SBX_GATE_PASS;
	}
	keyed = ok == 1 && path != NULL && path_needs_auth(path);
	if (r != NULL && (r->flags & R_RAW))
		*cap = (uint64_t)s->cfg->file_size_max;
	else if (r != NULL && (r->flags & (R_JSON | R_JSON_OPT)))
		*cap = (uint64_t)s->cfg->body_max;
	else if (r != NULL && (r->flags & R_BYTES))
		*cap = (uint64_t)s->cfg->terminal_input_max;
	else if (r != NULL && (r->flags & R_PORT))
		*cap = (uint64_t)s->cfg->port_body_max;
	/* A verified key takes the connection out of the keyless pool. */
	return keyed ? SBX_GATE_KEYED : SBX_GATE_PASS;
}

/* The gate's streaming hook: a file write's body goes to its handler as
 * it arrives, not gathered whole (adr/0030; the broker's adr/0018). Runs
 * only for a head that passed gate_check (authenticated). */
static int
gate_stream(void *arg, const struct sbx_gate_head *h, const char *path)
{
	const struct api_route *r;
	char npc[API_NPC_NAME_MAX + 2], id[40];

	if (path == NULL)
		return 0;
	/* envd's POST /files (adr/0061). */
	if (api_e2b_claims(arg, path, h->host, h->hostlen))
		return api_e2b_gate_streams(arg, h, path);
	r = route_find(path, h->type, npc, sizeof(npc), id, sizeof(id), NULL, 0);
	return r != NULL && (r->flags & R_RAW);
}

/* ------------------------------------------------------------------ */
/* Wake on use: a stopped sandbox is started before it is used         */

static void
wake_ensured(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;

	(void)st;
	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	areq_run(a, a->route->handler);
}

/* The sandbox's state: stopped by the idle reaper (stop_reason "idle") is
 * ensured first, as adr/0006 says the api does, so an idle NPC's next exec
 * runs. Running, absent, or stopped on purpose (POST .../stop, oom, exited)
 * goes straight on: the handler's broker call answers 404 or 409. */
static void
wake_status(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct areq *a = arg;
	struct sbx_spec spec;
	struct sbx_err e2;

	a->op = NULL;
	if (err != NULL) {
		areq_fail_broker(a, err);
		return;
	}
	if (st == NULL || st->state != SBX_STATE_STOPPED ||
	    strcmp(st->stop_reason, "idle") != 0) {
		areq_run(a, a->route->handler);
		return;
	}
	sbx_err_clear(&e2);
	memset(&spec, 0, sizeof(spec));
	/* The same spec as PUT .../sandbox without a body: the NPC's image
	 * and its stored egress grant, so nothing is replaced. */
	spec.image = a->npc.image[0] != '\0' ? a->npc.image : NULL;
	spec.egress = a->npc.egress;
	log_info("waking a stopped sandbox", "npc", a->npc.name, "reason",
	    st->stop_reason, NULL);
	a->op = sbx_call_ensure(a->s->driver, a->npc.sandbox_id,
	    &spec, wake_ensured, a, &e2);
	if (a->op == NULL)
		areq_fail_broker(a, &e2);
}

/* Reads the status first, then runs the handler (wake_status). */
static int
wake_then_run(struct areq *a, struct sbx_err *err)
{
	a->op = sbx_call_status(a->s->driver, a->npc.sandbox_id,
	    wake_status, a, err);
	return a->op == NULL ? areq_broker_err(a) : 0;
}

/* a->wake of a request that ran before any status read: the handler's
 * first run is undone (limits it counted, stdin, path) and the request
 * goes the wake-on-use way (adr/0006, adr/0033). Its second not_running
 * is the answer (409). */
static void
wake_retry(struct areq *a)
{
	if (a->exec_counted && a->lim != NULL && a->lim->execs > 0)
		a->lim->execs--;
	if (a->fileop_counted && a->lim != NULL && a->lim->fileops > 0)
		a->lim->fileops--;
	a->exec_counted = a->fileop_counted = 0;
	if (a->stdin_data != NULL) {
		sodium_memzero(a->stdin_data, a->stdin_len);
		free(a->stdin_data);
		a->stdin_data = NULL;
		a->stdin_len = 0;
	}
	free(a->path);
	a->path = NULL;
	a->sse = 0;
	a->on_shutdown = NULL;
	areq_run(a, wake_then_run);
}

/* ------------------------------------------------------------------ */
/* Dispatch: the checks every request passes once, before any handler  */

/* 1. Who asks. Authentication first, so nobody unauthenticated learns
 * which routes or NPCs exist. */
static int
check_auth(struct areq *a, const char *path, struct sbx_err *err)
{
	struct evhttp_request *req = a->h.req;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	int r;

	if (!path_needs_auth(path))
		return 0;
	r = api_authenticate(a->s, evhttp_request_get_command(req), path,
	    evhttp_uri_get_query(uri), evhttp_find_header(
	    evhttp_request_get_input_headers(req), SBX_HDR_AUTHORIZATION), 1,
	    &a->who);
	if (r == -1)
		return sbx_err_set(err, SBX_E_INTERNAL, "The api's database "
		    "failed.");
	/* Logged, not audited: without a key anybody could grow the audit
	 * table. */
	if (r == 0)
		return sbx_err_set(err, SBX_E_UNAUTHORIZED, "A valid API key is "
		    "required (Authorization: Bearer KEY).");
	a->authed = 1;
	return 0;
}

/* 2b. A preview's token (R_PREVIEW): its maker is the principal, its NPC
 * and port are the request's. A dead or foreign token is no preview. */
static int
check_preview(struct areq *a, const char *tok, size_t n, char *npc,
    size_t npccap, struct sbx_err *err)
{
	int r;

	if (tok == NULL || n >= sizeof(a->preview))
		r = 0;
	else
		r = api_ports_preview_resolve(a->s, tok, n, &a->who, npc,
		    npccap, &a->port);
	if (r == -1)
		return sbx_err_set(err, SBX_E_INTERNAL, "The api's database "
		    "failed.");
	if (r == 0)
		return sbx_err_set(err, SBX_E_NOT_FOUND, "No such preview: the "
		    "link is wrong or has expired.");
	snprintf(a->preview, sizeof(a->preview), "%.*s", (int)n, tok);
	a->authed = 1;
	return 0;
}

/* 3. Requests per minute. A port's connections have their own cap. */
static int
check_rate(struct areq *a, struct sbx_err *err)
{
	struct api_server *s = a->s;
	char ra[24];
	long wait;

	if (!a->authed || ((a->route->flags & R_PORT) &&
	    !(a->route->flags & R_ENVD)))
		return 0;
	if ((a->lim = api_limit_get(s, a->who.id)) == NULL)
		return sbx_err_oom(err);
	if ((wait = limit_take(s, a->lim)) == 0)
		return 0;
	snprintf(ra, sizeof(ra), "%ld", wait);
	sbx_httpd_header(&a->h, "Retry-After", ra);
	api_metrics_rejected(&s->metrics, 0);
	return sbx_err_set(err, SBX_E_RATE_LIMITED, "Too many requests: at "
	    "most %lld per minute.", s->cfg->rate_per_minute);
}

/* 4. The NPC exists and is the caller's (or the caller operates): another
 * player's NPC answers exactly like an absent one. 5. Operator-only
 * actions. */
static int
check_npc(struct areq *a, const char *npc, struct sbx_err *err)
{
	int r;

	if (a->route->flags & R_NPC) {
		r = api_npc_name_valid(npc) ? api_store_npc_get(a->s->store,
		    npc, &a->npc, err) : 0;
		if (r == -1)
			return -1;
		if (r == 0 || (a->who.role != API_ROLE_OPERATOR &&
		    a->npc.owner_id != a->who.id)) {
			memset(&a->npc, 0, sizeof(a->npc));
			return sbx_err_set(err, SBX_E_NOT_FOUND, "You have no NPC "
			    "with that name.");
		}
		a->has_npc = 1;
	}
	if (!(a->route->flags & R_OPERATOR) ||
	    a->who.role == API_ROLE_OPERATOR)
		return 0;
	if (a->route->forbidden != NULL)
		return sbx_err_set(err, SBX_E_FORBIDDEN, a->route->forbidden,
		    a->npc.name);
	return sbx_err_set(err, SBX_E_FORBIDDEN, "Only an operator may do "
	    "this.");
}

/* 6. Body size and syntax. The gate refused a body over the cap unread
 * (too_large). */
static int
check_body(struct areq *a, int too_large, struct sbx_err *err)
{
	const struct api_config *cfg = a->s->cfg;
	struct evbuffer *in = evhttp_request_get_input_buffer(a->h.req);
	unsigned flags = a->route->flags;
	json_error_t jerr;
	size_t blen;

	blen = too_large ? SIZE_MAX : a->gbody != NULL ?
	    (size_t)sbx_gate_body_length(a->gbody) : evbuffer_get_length(in);
	/* envd's POST /files, streamed within file_size_max (adr/0061). */
	if ((flags & R_PORT) && a->gbody != NULL)
		return too_large ? sbx_err_set(err, SBX_E_TOO_LARGE,
		    SBX_MSG_FILE_TOO_LARGE, cfg->file_size_max) : 0;
	if ((flags & R_PORT) && blen > (size_t)cfg->port_body_max)
		return sbx_err_set(err, SBX_E_TOO_LARGE, "The request body is "
		    "larger than %lld bytes (port_body_max).",
		    cfg->port_body_max);
	if (flags & R_PORT)
		return 0;   /* forwarded as it is */
	if (!(flags & (R_JSON | R_JSON_OPT | R_RAW | R_BYTES)) && blen > 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "This route takes no "
		    "body.");
	if ((flags & R_BYTES) && blen > (size_t)cfg->terminal_input_max)
		return sbx_err_set(err, SBX_E_TOO_LARGE, "Input is at most %lld "
		    "bytes per request (terminal_input_max).",
		    cfg->terminal_input_max);
	if (!(flags & (R_RAW | R_BYTES)) && blen > (size_t)cfg->body_max)
		return sbx_err_set(err, SBX_E_TOO_LARGE, "The request body is "
		    "larger than %lld bytes.", cfg->body_max);
	if ((flags & R_RAW) && blen > (size_t)cfg->file_size_max)
		return sbx_err_set(err, SBX_E_TOO_LARGE, SBX_MSG_FILE_TOO_LARGE,
		    cfg->file_size_max);
	if (!(flags & (R_JSON | R_JSON_OPT)) ||
	    (blen == 0 && !(flags & R_JSON)))
		return 0;
	a->body = json_loadb((const char *)evbuffer_pullup(in, -1), blen,
	    JSON_REJECT_DUPLICATES, &jerr);
	if (a->body == NULL || !json_is_object(a->body))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The body must be one "
		    "JSON object.");
	return 0;
}

/* Every request in order (the comment of the route table), then its
 * handler: the first step of areq_run, as a handler is. */
static int
dispatch_checks(struct areq *a, struct sbx_err *err)
{
	struct api_server *s = a->s;
	struct evhttp_request *req = a->h.req;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
	enum sbx_gate_verdict refused;
	char npc[API_NPC_NAME_MAX + 2], allow[128];
	const char *host, *tok = NULL, *no_key = "A valid API key is required "
	    "(Authorization: Bearer KEY).";
	size_t tn = 0;
	int e2b;

	/* What the gate refused before any body byte was read: a head too
	 * long or too slow, too many connections, framing (after the
	 * credential verified), an ambiguous or a bad credential. A body over
	 * the cap is answered at step 6, in order. */
	host = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Host");
	/* The E2B layer's requests answer in E2B's shapes (adr/0059). */
	if ((e2b = api_e2b_claims(s, path, host, host != NULL ? strlen(host) :
	    0)))
		no_key = api_e2b_begin(a, path);
	refused = sbx_gate_refused(s->gate, req);
	if (refused != SBX_GATE_PASS && refused != SBX_GATE_TOO_LARGE) {
		sbx_gate_refusal(refused, err);
		if (refused == SBX_GATE_UNAUTHORIZED)
			snprintf(err->message, sizeof(err->message), "%s", no_key);
		return -1;
	}
	/* A file write's body the gate keeps for the handler (adr/0030):
	 * owned by a from here, given back in areq_finish. */
	a->gbody = sbx_gate_body_take(s->gate, req);
	if (path == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Bad request target.");
	if (strcmp(path, "/healthz") == 0 &&
	    evhttp_request_get_command(req) == EVHTTP_REQ_GET) {
		a->label = "healthz";
		areq_reply_json(a, 200, json_pack("{s:s}", "status",
		    s->draining ? "draining" : "ok"));
		return 0;
	}
	if (s->draining)
		return sbx_err_set(err, SBX_E_SHUTTING_DOWN,
		    SBX_MSG_API_DRAINING);
	/* A preview Host is that preview, whatever the path (its own
	 * origin, adr/0053); nothing of the api is served there. */
	if (e2b) {
		if (api_e2b_route(a, path, npc, sizeof(npc), allow,
		    sizeof(allow), err) == -1)
			return -1;
	} else if ((tok = api_ports_host_token(s, host, &tn)) != NULL) {
		a->preview_host = 1;
		a->route = sbx_httpd_route_find(host_routes, NHOST_ROUTES,
		    sizeof(host_routes[0]), evhttp_request_get_command(req),
		    path, NULL, allow, sizeof(allow));
	} else {
		if (check_auth(a, path, err) == -1)
			return -1;
		/* 2. Route and method. */
		a->route = route_find(path, evhttp_request_get_command(req),
		    npc, sizeof(npc), a->exec_id, sizeof(a->exec_id), allow,
		    sizeof(allow));
		if (a->route != NULL && (a->route->flags & R_PREVIEW)) {
			tok = path + 3;
			tn = strcspn(tok, "/");
		}
	}
	if (a->route == NULL && allow[0] != '\0') {
		sbx_httpd_header(&a->h, "Allow", allow);
		return sbx_err_set(err, SBX_E_METHOD_NOT_ALLOWED, "Method not "
		    "allowed on this path.");
	}
	if (a->route == NULL)
		return sbx_err_set(err, SBX_E_NOT_FOUND, "No such route.");
	if ((a->route->flags & R_PREVIEW) &&
	    check_preview(a, tok, tn, npc, sizeof(npc), err) == -1)
		return -1;
	if ((a->route->flags & R_AUTH) && !a->authed)
		return sbx_err_set(err, SBX_E_UNAUTHORIZED, "A valid API key is "
		    "required.");
	if (check_rate(a, err) == -1 || api_conns_admit(a, err) == -1 ||
	    check_npc(a, npc, err) == -1)
		return -1;
	/* An exec id of another form names no exec (the route's "*"). */
	if ((a->route->flags & R_EXEC) && !exec_id_ok(a->exec_id))
		return sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_EXEC);
	if (check_body(a, refused == SBX_GATE_TOO_LARGE, err) == -1)
		return -1;
	/* 7. A stopped sandbox is started before it is used. A request
	 * without a body to forward runs at once and is woken only if the
	 * broker says not_running (a->wake): the common case, a running
	 * sandbox, costs no status round trip (adr/0033). A write streams its
	 * body to the broker, which cannot be sent twice: it reads the status
	 * first. */
	if (a->has_npc && (a->route->flags & R_WAKES)) {
		if (a->route->flags & R_RAW)
			return wake_then_run(a, err);
		a->wake = wake_retry;
	}
	return a->route->handler(a, err);
}

static void
api_dispatch(struct evhttp_request *req, void *arg)
{
	struct api_server *s = arg;
	struct areq *a;

	if (cors(s, req))
		return;
	if ((a = areq_new(s, req)) == NULL) {
		evhttp_send_error(req, 500, NULL);
		return;
	}
	areq_run(a, dispatch_checks);
}

/* ------------------------------------------------------------------ */
/* Server life                                                         */

struct api_server *
api_server_new(struct event_base *base, const struct api_config *cfg,
    struct sbx_driver *driver, struct sbx_err *err)
{
	struct api_server *s = NULL;
	struct sbx_httpd_config hc;

	if (api_config_check(cfg, err) == -1)
		return NULL;
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	s->base = base;
	s->cfg = cfg;
	s->driver = driver;
	s->now_ms = sbx_wall_ms;
	memset(&hc, 0, sizeof(hc));
	if ((s->store = api_store_open(cfg->state_dir, err)) == NULL ||
	    api_store_defer_on(s->store, base, err) == -1 ||
	    sbx_sqlite_cache(api_store_db(s->store), cfg->db_cache,
	    err) == -1)
		goto fail;
	if (api_execs_open(s, err) == -1 || api_terms_open(s, err) == -1 ||
	    api_ports_open(s, err) == -1 || api_e2b_open(s, err) == -1)
		goto fail;
	if (api_console_init(s) == -1) {
		sbx_err_oom(err);
		goto fail;
	}
	/* The body cap is a backstop only: the gate refuses bodies over the
	 * route's cap with JSON, after authentication, before they are read.
	 * Every method reaches api_dispatch (JSON 404/405). */
	hc.max_body = cfg->file_size_max > cfg->body_max ? cfg->file_size_max :
	    cfg->body_max;
	hc.timeout_s = (int)((cfg->request_timeout + 999) / 1000);
	hc.gate.head_max = (size_t)cfg->head_max;
	hc.gate.headers_max = (unsigned)cfg->headers_max;
	hc.gate.header_timeout_ms = cfg->header_timeout;
	hc.gate.max_connections = (unsigned)cfg->max_connections;
	hc.gate.max_connections_keyless =
	    (unsigned)cfg->max_connections_keyless;
	hc.gate.keyless_header_timeout_ms = cfg->keyless_header_timeout;
	memcpy(hc.gate.fields, api_e2b_gate_fields, sizeof(api_e2b_gate_fields));
	hc.check = gate_check;
	hc.stream = gate_stream;
	hc.dispatch = api_dispatch;
	hc.arg = s;
	if ((s->http = sbx_httpd_server_new(base, &hc, &s->gate, err)) == NULL)
		goto fail;
	/* A principal's connection slot comes back when it closes. */
	sbx_gate_set_unmark(s->gate, api_conns_unmark);
	/* HOST:PORT (a name, IPv4 or [IPv6]; port 0: any, read back). */
	if (sbx_httpd_listen(s->http, base, cfg->listen, 0, 0, &s->listener,
	    err) == -1)
		goto fail;
	s->port = s->listener.port;
	return s;
fail:
	api_server_free(s);
	return NULL;
}

int
api_server_port(const struct api_server *s)
{
	return s->port;
}

unsigned
api_server_inflight(const struct api_server *s)
{
	return s->inflight;
}

void
api_server_set_clock(struct api_server *s, int64_t (*now)(void))
{
	s->now_ms = now != NULL ? now : sbx_wall_ms;
}

void
api_server_drain(struct api_server *s, void (*done)(void *), void *arg)
{
	char n[16];

	if (s->draining)
		return;
	s->draining = 1;
	sbx_httpd_unlisten(s->http, &s->listener);
	/* Viewers of resource execs end now: they resume later. So do
	 * proxied port connections. */
	api_execs_drain(s);
	api_terms_drain(s);
	api_connect_drain(s);
	api_ports_drain(s);
	api_term_ws_drain(s);
	api_browser_view_drain(s);
	api_e2b_fs_drain(s);
	snprintf(n, sizeof(n), "%u", s->inflight);
	log_info("draining", "in_flight", n, NULL);
	/* Cannot wait politely (no memory for the events): cancelled now. */
	sbx_httpd_drain_start(&s->drain, s->base, s->cfg->shutdown_grace,
	    api_req_in_flight, api_req_grace_over, s, done, arg);
}

void
api_server_free(struct api_server *s)
{
	struct api_limit *l;

	if (s == NULL)
		return;
	/* Requests still open: stop their driver work; evhttp_free below
	 * closes their connections. */
	api_e2b_fs_close(s);     /* before its calls are abandoned */
	api_req_abandon_all(s);
	api_e2b_close(s);
	api_ports_close(s);
	api_browser_close(s);
	api_execs_close(s);
	api_term_ws_free_all(s);
	api_browser_view_free_all(s);
	api_e2b_procs_close(s);
	api_terms_close(s);
	api_req_trim_close(s);
	free(s->console_csp);
	if (s->http != NULL)
		evhttp_free(s->http);   /* frees every bound gate connection */
	sbx_httpd_listener_free(&s->listener);
	sbx_gate_free(s->gate);
	sbx_httpd_drain_free(&s->drain);
	while ((l = s->limits) != NULL) {
		s->limits = l->next;
		free(l);
	}
	api_store_close(s->store);
	free(s);
}
