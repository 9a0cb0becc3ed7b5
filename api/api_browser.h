/* api_browser.h - a headless Chromium per sandbox (issue 22, adr/0064): the routes POST/GET/DELETE .../sandbox/browser and the port of the browser a sandbox runs, for the files that reach it (the screenshot route and live view, api_browser_view*.c). */
#ifndef API_BROWSER_H
#define API_BROWSER_H

#include "sbx_err.h"

struct api_server;
struct areq;

/*
 * The sandbox-local CDP port of the browser running in NPC npc's sandbox
 * (the name, NUL-terminated, borrowed), as this api last saw it: a start
 * or a status that answered "running" and no stop, crash or stopped
 * status since. *port gets 1..65535 (the config key browser_port at that
 * start). Reach it through a PORT session (sbx_session_open, kind
 * SBX_SESSION_PORT), as the ports proxy does. Returns 0, or -1 with err
 * not_found "no browser is running in this sandbox" (never started, seen
 * stopped or crashed, or this api restarted since: a GET of the status
 * route learns it again). A stale answer (the browser died unseen) shows
 * as the session's port_closed. No I/O; s, npc, port and err not NULL.
 */
int api_browser_port(struct api_server *s, const char *npc, unsigned *port,
    struct sbx_err *err);

/* The handlers (api_handler_fn, rows of api_http.c's route table):
 * POST starts (or answers the running one's endpoint), GET answers the
 * state, DELETE stops; docs/api.md "Browser". */
int api_h_browser_start(struct areq *a, struct sbx_err *err);
int api_h_browser_status(struct areq *a, struct sbx_err *err);
int api_h_browser_stop(struct areq *a, struct sbx_err *err);

/* Frees what the server knows of browsers (server close). NULL safe. */
void api_browser_close(struct api_server *s);

#endif
