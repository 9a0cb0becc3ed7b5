/* api_envd.c - envd's methods as one table (docs/e2b.md, adr/0060): the Connect methods of process.Process (api_e2b_process.c) and filesystem.Filesystem, and envd's plain HTTP routes, found by the path of an envd request and handed to the Connect core (api_connect.c) or to their handler. Called by the route table (api_http.c's envd rows: a->npc and a->who are set); calls handlers, never called by them. */
#include <string.h>

#include <event2/http.h>

#include "api_connect.h"
#include "api_connect_wire.h"
#include "api_e2b.h"
#include "api_e2b_fs.h"
#include "api_e2b_process.h"
#include "api_int.h"
#include "sbx_proto.h"

/* One envd method: a Connect method (http NULL) of kind answered by fn,
 * or a plain HTTP route answered by http. Paths are envd's own (what
 * follows the sandbox URL). */
struct envd_row {
	const char *path;
	enum api_connect_kind kind;
	api_connect_fn fn;
	api_handler_fn http;
};

static const struct envd_row envd_rows[] = {
	{ "/process.Process/Start", API_CONNECT_SERVER_STREAM, api_e2b_proc_start, NULL },
	{ "/process.Process/Connect", API_CONNECT_SERVER_STREAM, api_e2b_proc_connect, NULL },
	{ "/process.Process/List", API_CONNECT_UNARY, api_e2b_proc_list, NULL },
	{ "/process.Process/SendInput", API_CONNECT_UNARY, api_e2b_proc_send_input, NULL },
	{ "/process.Process/SendSignal", API_CONNECT_UNARY, api_e2b_proc_send_signal, NULL },
	{ "/process.Process/CloseStdin", API_CONNECT_UNARY, api_e2b_proc_close_stdin, NULL },
	{ "/process.Process/Update", API_CONNECT_UNARY, api_e2b_proc_update, NULL },
	/* Client streaming: refused unimplemented by the core (adr/0060). */
	{ "/process.Process/StreamInput", API_CONNECT_CLIENT_STREAM, api_e2b_proc_send_input, NULL },
	{ "/filesystem.Filesystem/Stat", API_CONNECT_UNARY, api_e2b_fs_stat, NULL },
	{ "/filesystem.Filesystem/MakeDir", API_CONNECT_UNARY, api_e2b_fs_make_dir, NULL },
	{ "/filesystem.Filesystem/Move", API_CONNECT_UNARY, api_e2b_fs_move, NULL },
	{ "/filesystem.Filesystem/Remove", API_CONNECT_UNARY, api_e2b_fs_remove, NULL },
	{ "/filesystem.Filesystem/ListDir", API_CONNECT_UNARY, api_e2b_fs_list_dir, NULL },
	{ "/filesystem.Filesystem/WatchDir", API_CONNECT_SERVER_STREAM, api_e2b_fs_watch_dir, NULL },
	{ "/filesystem.Filesystem/CreateWatcher", API_CONNECT_UNARY, api_e2b_fs_create_watcher, NULL },
	{ "/filesystem.Filesystem/GetWatcherEvents", API_CONNECT_UNARY, api_e2b_fs_get_watcher_events, NULL },
	{ "/filesystem.Filesystem/RemoveWatcher", API_CONNECT_UNARY, api_e2b_fs_remove_watcher, NULL },
	/* envd's plain HTTP routes (api_e2b_files.c, adr/0061). */
	{ "/files", API_CONNECT_UNARY, NULL, api_e2b_files },
	{ "/health", API_CONNECT_UNARY, NULL, api_e2b_health },
};

/* Where the api serves envd when E2B_SANDBOX_URL is <api>/e2b/envd. */
#define API_ENVD_PREFIX "/e2b/envd"

/* The envd path of a's URI: after "/e2b/envd" when the request came under
 * the api's envd prefix, else the path itself (the {port}-{id}.{domain}
 * Host form). (api_e2b_route.c has the same rule; it calls this file, so
 * this file does not call it back.) */
static const char *
envd_path(struct areq *a)
{
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(a->h.req);
	const char *p = u != NULL ? evhttp_uri_get_path(u) : NULL;

	if (p == NULL || p[0] == '\0')
		return "/";
	if (strncmp(p, API_ENVD_PREFIX, sizeof(API_ENVD_PREFIX) - 1) == 0 &&
	    p[sizeof(API_ENVD_PREFIX) - 1] == '/')
		p += sizeof(API_ENVD_PREFIX) - 1;
	return p;
}

int
api_h_envd(struct areq *a, struct sbx_err *err)
{
	const char *path = envd_path(a);
	size_t i;

	for (i = 0; i < sizeof(envd_rows) / sizeof(envd_rows[0]); i++) {
		if (strcmp(envd_rows[i].path, path) != 0)
			continue;
		if (envd_rows[i].http != NULL)
			return envd_rows[i].http(a, err);
		return api_connect_serve(a, envd_rows[i].kind, envd_rows[i].fn,
		    err);
	}
	/* Like connect-go's mux: an unknown procedure is a 404; its body is
	 * Connect's error JSON so both kinds of client read a code. */
	{
		json_t *o = api_connect_error_json("unimplemented", "envd has "
		    "no such method here (sbx serves process.Process and "
		    "filesystem.Filesystem over Connect's JSON codec).");

		areq_reply_json(a, 404, o);
	}
	return 0;
}
