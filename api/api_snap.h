/* api_snap.h - the route rows of sandbox-api's snapshot handlers (api_snap.c, adr/0068), kept here so api_http.c's route table stays one seam under its size bound; api_http.c puts them in its table. */
#ifndef API_SNAP_H
#define API_SNAP_H

/*
 * The rows (struct api_route, api_int.h) of POST/GET …/sandbox/snapshots,
 * DELETE …/sandbox/snapshots/{name} (the name is the "*" capture, checked
 * by the handler), POST …/sandbox/fork and GET /api/v1/snapshots; NPC is
 * the "/api/v1/npcs/{npc}" pattern, PREFIX "/api/v1". Handlers and their
 * contracts: api_int.h.
 */
#define API_SNAP_ROUTES(NPC, PREFIX) \
	{ { EVHTTP_REQ_POST, NPC "/sandbox/snapshots" }, api_h_snap_create, \
	    R_AUTH | R_NPC | R_JSON | R_MUTATING, .action = "snapshot.create" }, \
	{ { EVHTTP_REQ_GET, NPC "/sandbox/snapshots" }, api_h_snap_list, \
	    R_AUTH | R_NPC, .action = "snapshot.list" }, \
	{ { EVHTTP_REQ_DELETE, NPC "/sandbox/snapshots/*" }, \
	    api_h_snap_delete, R_AUTH | R_NPC | R_MUTATING, \
	    .action = "snapshot.delete" }, \
	{ { EVHTTP_REQ_POST, NPC "/sandbox/fork" }, api_h_snap_fork, \
	    R_AUTH | R_NPC | R_JSON | R_MUTATING, .action = "sandbox.fork" }, \
	{ { EVHTTP_REQ_GET, PREFIX "/snapshots" }, api_h_snap_all, R_AUTH, \
	    .action = "snapshot.list" }

#endif
