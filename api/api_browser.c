/* api_browser.c - a headless Chromium per sandbox (issue 22, adr/0064): POST/GET/DELETE .../sandbox/browser each run one short exec of a shell script in the sandbox that starts the browser detached in its own session (so it outlives the request and is no session the reaper counts), reports it or stops it; the CDP endpoint is answered as a ports-route URL with a port ticket. Touches the driver's exec, the request it answers and its own table of the browsers it saw running. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <jansson.h>
#include <sodium.h>

#include "api_browser.h"
#include "api_int.h"
#include "api_ports.h"
#include "sbx_call.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_time.h"

/* Bytes of the script's answer kept: one short line is all it prints. */
#define OUT_MAX 4096
/* Extra time the exec gets beyond the wait for the browser, ms. */
#define EXEC_SLACK_MS 15000

/*
 * The script every route runs: sh -c SCRIPT sbx-browser ACTION PORT WAIT_S.
 * The browser runs under a wrapper shell (argv[3] "sbx-browser-wrapper",
 * started by setsid: its own session and process group) that writes its
 * group to D/pgid, the browser's pid to D/pid and, when the browser ends,
 * its exit status to D/exit; the browser's output goes to D/log (emptied
 * at each start before the launch, here: the launch's own redirection runs
 * in the background and a line of the last run could be read first). A start waits up to WAIT_S seconds for Chromium's line
 * "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID" there
 * (printed once its CDP server listens). The last line printed is the answer:
 *   state=running port=N path=/devtools/browser/ID
 *   state=starting | state=stopped | state=crashed exit=N | state=nobrowser
 * A stop asks the browser to close over CDP (Browser.close: cookies and
 * profile are written; one WebSocket frame sent with bash's /dev/tcp when
 * the image has bash), waits up to 10 s, then sends TERM (which ends
 * headless Chromium at once, unwritten cookies lost), waits 5 s more and
 * KILLs the group. D/stopping marks an end
 * asked for (stopped, not crashed). HTTPS_PROXY (set by the broker for an
 * allowlist, adr/0026) becomes --proxy-server.
 */
static const char SCRIPT[] =
"set -u\n"
"act=$1 port=$2 wait_s=$3\n"
"D=/work/.sbx-browser\n"
"P=$D/profile\n"
"alive() {\n"
"  [ -s \"$D/pgid\" ] || return 1\n"
"  g=$(cat \"$D/pgid\")\n"
"  case $g in ''|*[!0-9]*) return 1 ;; esac\n"
"  [ \"$(tr '\\000' '\\n' 2>/dev/null <\"/proc/$g/cmdline\" | sed -n 4p)\" = sbx-browser-wrapper ]\n"
"}\n"
"report() {\n"
"  if [ -s \"$D/exit\" ] && [ ! -e \"$D/stopping\" ]; then\n"
"    echo \"state=crashed exit=$(cat \"$D/exit\")\"\n"
"  else\n"
"    echo state=stopped\n"
"  fi\n"
"}\n"
"ready() {\n"
"  i=0\n"
"  while :; do\n"
"    u=$(sed -n 's|^DevTools listening on ws://127\\.0\\.0\\.1:\\([0-9]*\\)\\(/devtools/browser/[A-Za-z0-9-]*\\)$|port=\\1 path=\\2|p' \"$D/log\" 2>/dev/null | head -n 1)\n"
"    if [ -n \"$u\" ]; then echo \"state=running $u\"; return 0; fi\n"
"    if [ -s \"$D/exit\" ] || { [ -s \"$D/pgid\" ] && ! alive; }; then report; return 0; fi\n"
"    if [ \"$i\" -ge $((wait_s * 10)) ]; then echo state=starting; return 0; fi\n"
"    sleep 0.1\n"
"    i=$((i + 1))\n"
"  done\n"
"}\n"
"start() {\n"
"  if alive; then ready; return 0; fi\n"
"  bin=''\n"
"  for b in chromium chromium-browser google-chrome-stable google-chrome; do\n"
"    if command -v \"$b\" >/dev/null 2>&1; then bin=$b; break; fi\n"
"  done\n"
"  if [ -z \"$bin\" ]; then echo state=nobrowser; return 0; fi\n"
"  mkdir -p \"$P\" || exit 1\n"
"  rm -f \"$D/pgid\" \"$D/pid\" \"$D/exit\" \"$D/stopping\" \\\n"
"    \"$P/SingletonLock\" \"$P/SingletonSocket\" \"$P/SingletonCookie\"\n"
"  set --\n"
"  if [ -n \"${HTTPS_PROXY:-}\" ]; then set -- \"--proxy-server=$HTTPS_PROXY\"; fi\n"
"  : >\"$D/log\"\n"
"  setsid sh -c 'd=$1; shift; echo $$ >\"$d/pgid\"; \"$@\" & c=$!; echo $c >\"$d/pid\"; wait $c; echo $? >\"$d/exit\"' \\\n"
"    sbx-browser-wrapper \"$D\" \"$bin\" --headless=new --no-sandbox --disable-gpu \\\n"
"    --disable-dev-shm-usage --no-first-run --no-default-browser-check \\\n"
"    --disable-background-networking --disable-component-update --disable-sync \\\n"
"    --remote-debugging-address=127.0.0.1 \"--remote-debugging-port=$port\" \\\n"
"    \"--user-data-dir=$P\" \"$@\" about:blank </dev/null >>\"$D/log\" 2>&1 &\n"
"  ready\n"
"}\n"
"stop() {\n"
"  if alive; then\n"
"    : >\"$D/stopping\"\n"
"    g=$(cat \"$D/pgid\")\n"
"    u=$(sed -n 's|^DevTools listening on ws://127\\.0\\.0\\.1:[0-9]*\\(/devtools/browser/[A-Za-z0-9-]*\\)$|\\1|p' \"$D/log\" 2>/dev/null | head -n 1)\n"
"    if [ -n \"$u\" ] && command -v bash >/dev/null 2>&1; then\n"
"      bash -c 'exec 3<>\"/dev/tcp/127.0.0.1/$1\" || exit 1\n"
"        printf \"GET %s HTTP/1.1\\r\\nHost: 127.0.0.1:%s\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Key: c2J4LWJyb3dzZXItc3RvcA==\\r\\nSec-WebSocket-Version: 13\\r\\n\\r\\n\" \"$2\" \"$1\" >&3\n"
"        while IFS= read -r -t 5 l <&3; do [ ${#l} -le 1 ] && break; done\n"
"        printf \"\\201\\241\\0\\0\\0\\0{\\\"id\\\":1,\\\"method\\\":\\\"Browser.close\\\"}\" >&3\n"
"        sleep 0.5' sbx-browser-close \"$port\" \"$u\" 2>/dev/null\n"
"      i=0\n"
"      while alive && [ \"$i\" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done\n"
"    fi\n"
"    alive && [ -s \"$D/pid\" ] && kill -TERM \"$(cat \"$D/pid\")\" 2>/dev/null\n"
"    i=0\n"
"    while alive && [ \"$i\" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done\n"
"    kill -KILL \"-$g\" 2>/dev/null\n"
"  fi\n"
"  echo state=stopped\n"
"}\n"
"case $act in\n"
"start) start ;;\n"
"stop) stop ;;\n"
"*) if alive; then wait_s=0; ready; else report; fi ;;\n"
"esac\n";

/* A browser this api saw running. */
struct api_browser_rec {
	int64_t npc_id;
	char npc[API_NPC_NAME_MAX + 1];
	unsigned port;
	struct api_browser_rec *next;
};

struct api_browsers {
	struct api_browser_rec *recs;
};

enum act { ACT_START = 1, ACT_STATUS, ACT_STOP };

/* One route's exec in flight (a->bcall until it ends). */
struct api_bcall {
	struct areq *a;
	enum act act;
	unsigned port;
	struct evbuffer *out;
	int over;                  /* more than OUT_MAX bytes came */
};

/* ------------------------------------------------------------------ */
/* The table of running browsers                                       */

static struct api_browser_rec **
rec_find(struct api_server *s, const char *npc)
{
	struct api_browser_rec **r;

	if (s->browsers == NULL)
		return NULL;
	for (r = &s->browsers->recs; *r != NULL; r = &(*r)->next)
		if (strcmp((*r)->npc, npc) == 0)
			return r;
	return NULL;
}

/* Remembers (port > 0) or forgets (0) npc's browser. Out of memory: not
 * remembered (api_browser_port then answers not_found). */
static void
rec_set(struct api_server *s, const struct api_npc *n, unsigned port)
{
	struct api_browser_rec **r = rec_find(s, n->name), *x;

	if (port == 0) {
		if (r != NULL) {
			x = *r;
			*r = x->next;
			free(x);
		}
		return;
	}
	if (r != NULL) {
		(*r)->port = port;
		return;
	}
	if (s->browsers == NULL &&
	    (s->browsers = calloc(1, sizeof(*s->browsers))) == NULL)
		return;
	if ((x = calloc(1, sizeof(*x))) == NULL)
		return;
	x->npc_id = n->id;
	snprintf(x->npc, sizeof(x->npc), "%s", n->name);
	x->port = port;
	x->next = s->browsers->recs;
	s->browsers->recs = x;
}

int
api_browser_port(struct api_server *s, const char *npc, unsigned *port,
    struct sbx_err *err)
{
	struct api_browser_rec **r = rec_find(s, npc);

	*port = 0;
	if (r == NULL)
		return sbx_err_set(err, SBX_E_NOT_FOUND, "no browser is running "
		    "in this sandbox");
	*port = (*r)->port;
	return 0;
}

void
api_browser_close(struct api_server *s)
{
	struct api_browser_rec *r, *next;

	if (s == NULL || s->browsers == NULL)
		return;
	for (r = s->browsers->recs; r != NULL; r = next) {
		next = r->next;
		free(r);
	}
	free(s->browsers);
	s->browsers = NULL;
}

/* ------------------------------------------------------------------ */
/* The answer                                                          */

/* The Host a client reached the api by, when it is a plain host[:port]
 * (letters, digits, '.', '-', ':', '[', ']'); else NULL. */
static const char *
host_of(struct areq *a)
{
	const char *h = evhttp_find_header(evhttp_request_get_input_headers(
	    a->h.req), "Host");
	size_t i;

	if (h == NULL || h[0] == '\0' || strlen(h) > 255)
		return NULL;
	for (i = 0; h[i] != '\0'; i++)
		if (!((h[i] >= 'a' && h[i] <= 'z') || (h[i] >= 'A' &&
		    h[i] <= 'Z') || (h[i] >= '0' && h[i] <= '9') ||
		    strchr(".-:[]", h[i]) != NULL))
			return NULL;
	return h;
}

/* path is "/devtools/browser/" and 1..64 of [A-Za-z0-9-]. */
static int
path_ok(const char *p)
{
	static const char pre[] = "/devtools/browser/";
	size_t i, n = strlen(p);

	if (n <= sizeof(pre) - 1 || n > sizeof(pre) - 1 + 64 ||
	    strncmp(p, pre, sizeof(pre) - 1) != 0)
		return 0;
	for (i = sizeof(pre) - 1; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' &&
		    p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '-'))
			return 0;
	return 1;
}

/* The running browser's endpoint: its WebSocket rewritten to this api's
 * ports route, with a port ticket (docs/api.md "Browser"). */
static json_t *
endpoint(struct areq *a, unsigned port, const char *path)
{
	struct api_ports_token t = { API_PORTS_TICKET, 0, 0, 0, 0 };
	const char *host = host_of(a);
	const char *xfp = evhttp_find_header(evhttp_request_get_input_headers(
	    a->h.req), "X-Forwarded-Proto");
	int tls = xfp != NULL && strcmp(xfp, "https") == 0;
	char tok[API_PORTS_TOKEN_LEN + 1], route[256], ws[640], http[512];
	char self[64];
	int64_t exp_ms = sbx_wall_ms() + a->s->cfg->ticket_ttl;
	json_t *o;

	if (host == NULL) {
		snprintf(self, sizeof(self), "127.0.0.1:%d", a->s->port);
		host = self;
	}
	t.expires = (uint32_t)((exp_ms + 999) / 1000);
	t.port = (uint16_t)port;
	t.npc_id = (uint32_t)a->npc.id;
	t.principal_id = (uint32_t)a->who.id;
	if (api_ports_token_make(a->s->port_key, &t, tok, sizeof(tok)) == -1)
		return NULL;
	snprintf(route, sizeof(route), "/api/v1/npcs/%s/sandbox/ports/%u",
	    a->npc.name, port);
	snprintf(ws, sizeof(ws), "%s://%s%s%s?" API_PORTS_TICKET_PARAM "=%s",
	    tls ? "wss" : "ws", host, route, path, tok);
	snprintf(http, sizeof(http), "%s://%s%s/", tls ? "https" : "http",
	    host, route);
	o = json_pack("{s:s,s:s,s:s,s:s,s:I}", "ws_url", ws, "ws_path",
	    path, "route", route, "http_url", http, "ticket_expires_at",
	    (json_int_t)t.expires * 1000);
	sodium_memzero(tok, sizeof(tok));
	sodium_memzero(ws, sizeof(ws));
	return o;
}

/* Parses the script's last line into the reply; NULL with err when the
 * line is not one the script prints. */
static json_t *
answer(struct api_bcall *c, char *line, struct sbx_err *err)
{
	struct areq *a = c->a;
	char state[16] = "", path[128] = "";
	unsigned port = 0;
	int code = 0;
	json_t *o, *ep;

	if (sscanf(line, "state=%15[a-z] port=%u path=%127s", state, &port,
	    path) < 1)
		goto bad;
	if (strcmp(state, "running") == 0) {
		if (port != c->port || !path_ok(path))
			goto bad;
		rec_set(a->s, &a->npc, port);
		if ((ep = endpoint(a, port, path)) == NULL) {
			sbx_err_oom(err);
			return NULL;
		}
		return json_pack("{s:s,s:I,s:o}", "state", "running", "port",
		    (json_int_t)port, "endpoint", ep);
	}
	rec_set(a->s, &a->npc, 0);
	if (strcmp(state, "nobrowser") == 0) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The sandbox's image has no "
		    "chromium (or chromium-browser, google-chrome): use an image "
		    "that has one, e.g. sbx-browser:bookworm (deploy/image/build.sh "
		    "--browser).");
		return NULL;
	}
	if (strcmp(state, "starting") == 0) {
		if (c->act == ACT_START) {
			sbx_err_set(err, SBX_E_TIMEOUT, "The browser did not open "
			    "its DevTools port within browser_start_timeout; it "
			    "may still come up (GET .../sandbox/browser).");
			return NULL;
		}
		return json_pack("{s:s}", "state", "starting");
	}
	if (strcmp(state, "stopped") == 0)
		return json_pack("{s:s}", "state", "stopped");
	if (strcmp(state, "crashed") == 0) {
		if (sscanf(line, "state=crashed exit=%d", &code) != 1)
			goto bad;
		if (c->act == ACT_START) {
			sbx_err_set(err, SBX_E_INTERNAL, "The browser exited during "
			    "its start (exit status %d); its output is in "
			    "/work/.sbx-browser/log.", code);
			return NULL;
		}
		o = json_pack("{s:s,s:i}", "state", "crashed", "exit_code", code);
		return o;
	}
bad:
	sbx_err_set(err, SBX_E_INTERNAL, "The sandbox answered the browser's "
	    "script with a line it does not print.");
	return NULL;
}

/* ------------------------------------------------------------------ */
/* The exec                                                            */

static void
bcall_free(struct api_bcall *c)
{
	if (c == NULL)
		return;
	if (c->a != NULL && c->a->bcall == c) {
		c->a->bcall = NULL;
		c->a->on_end = NULL;
	}
	if (c->out != NULL)
		evbuffer_free(c->out);
	free(c);
}

static void
b_start(void *arg, const char *exec_id)
{
	(void)arg;
	(void)exec_id;
}

static void
b_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct api_bcall *c = arg;

	if (stream != 1 || c->over)
		return;
	if (evbuffer_get_length(c->out) + len > OUT_MAX) {
		c->over = 1;
		return;
	}
	evbuffer_add(c->out, buf, len);
}

static void
b_exit(void *arg, const struct sbx_exit *ex)
{
	struct api_bcall *c = arg;
	struct areq *a = c->a;
	struct sbx_err err;
	char buf[OUT_MAX + 1], *line, *nl;
	size_t n;
	int r;
	json_t *o;

	a->op = NULL;
	sbx_err_clear(&err);
	r = evbuffer_remove(c->out, buf, OUT_MAX);
	n = r > 0 ? (size_t)r : 0;
	buf[n] = '\0';
	/* The last non-empty line. */
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	line = (nl = strrchr(buf, '\n')) != NULL ? nl + 1 : buf;
	if (c->over || ex->code != 0 || line[0] == '\0') {
		sbx_err_set(&err, SBX_E_INTERNAL, "The browser's script in the "
		    "sandbox failed (exit status %d%s%s); is /work writable?",
		    ex->code, ex->signal != NULL ? ", signal " : "",
		    ex->signal != NULL ? ex->signal : "");
		bcall_free(c);
		areq_fail(a, &err);
		return;
	}
	o = answer(c, line, &err);
	bcall_free(c);
	if (o == NULL)
		areq_fail(a, &err);
	else
		areq_reply_json(a, 200, o);
}

static void
b_error(void *arg, const struct sbx_err *in)
{
	struct api_bcall *c = arg;
	struct areq *a = c->a;
	enum act act = c->act;

	a->op = NULL;
	bcall_free(c);
	/* A stopped sandbox runs no browser: a status or a stop says so. */
	if (act != ACT_START && strcmp(in->code, SBX_E_NOT_RUNNING) == 0) {
		rec_set(a->s, &a->npc, 0);
		areq_reply_json(a, 200, json_pack("{s:s}", "state", "stopped"));
		return;
	}
	areq_fail_broker(a, in);
}

/* a ended before its exec did (client gone, shutdown): the request layer
 * cancelled a->op; the call goes too. */
static void
bcall_ended(struct areq *a)
{
	struct api_bcall *c = a->bcall;

	if (c != NULL) {
		c->a = NULL;
		a->bcall = NULL;
		bcall_free(c);
	}
}

/* Another request of this api is starting a's NPC's browser: two
 * scripts at once would each find no browser and start one. */
static int
start_in_flight(const struct areq *a)
{
	const struct areq *x;

	for (x = a->s->live; x != NULL; x = x->next)
		if (x != a && x->bcall != NULL && x->bcall->act == ACT_START &&
		    x->npc.id == a->npc.id)
			return 1;
	return 0;
}

/* Runs the script for act in a's sandbox; the reply comes from b_exit. */
static int
run(struct areq *a, enum act act, struct sbx_err *err)
{
	const struct api_config *cfg = a->s->cfg;
	char port[16], wait_s[24];
	const char *argv[] = { "/bin/sh", "-c", SCRIPT, "sbx-browser",
	    act == ACT_START ? "start" : act == ACT_STOP ? "stop" : "status",
	    port, wait_s, NULL };
	struct sbx_exec_req req;
	struct sbx_sink sink;
	struct api_bcall *c;

	if (a->body != NULL && json_object_size(a->body) > 0)
		return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "The browser routes "
		    "take no fields.");
	if (act == ACT_START && start_in_flight(a))
		return sbx_err_set(err, SBX_E_CONFLICT, "A start of %s's browser "
		    "is already in progress; ask again when it has answered.",
		    a->npc.name);
	if ((c = calloc(1, sizeof(*c))) == NULL ||
	    (c->out = evbuffer_new()) == NULL) {
		bcall_free(c);
		return sbx_err_oom(err);
	}
	c->a = a;
	c->act = act;
	c->port = (unsigned)cfg->browser_port;
	snprintf(port, sizeof(port), "%u", c->port);
	snprintf(wait_s, sizeof(wait_s), "%lld",
	    (cfg->browser_start_timeout + 999) / 1000);
	memset(&req, 0, sizeof(req));
	req.argv = argv;
	req.timeout_ms = cfg->browser_start_timeout + EXEC_SLACK_MS;
	req.output_cap = OUT_MAX * 2;
	memset(&sink, 0, sizeof(sink));
	sink.start = b_start;
	sink.output = b_output;
	sink.exit = b_exit;
	sink.error = b_error;
	sink.arg = c;
	if ((a->op = sbx_call_exec(a->s->driver, a->npc.sandbox_id, &req,
	    &sink, err)) == NULL) {
		bcall_free(c);
		return areq_broker_err(a);
	}
	a->bcall = c;
	a->on_end = bcall_ended;
	areq_watch(a);
	return 0;
}

int
api_h_browser_start(struct areq *a, struct sbx_err *err)
{
	return run(a, ACT_START, err);
}

int
api_h_browser_status(struct areq *a, struct sbx_err *err)
{
	return run(a, ACT_STATUS, err);
}

int
api_h_browser_stop(struct areq *a, struct sbx_err *err)
{
	return run(a, ACT_STOP, err);
}
