/* api_e2b_fs.h - E2B's envd filesystem surface (adr/0061): the Connect methods of filesystem.Filesystem, the plain HTTP /files and /health, and the pieces of them that are pure (entry shape, multipart). Called by api_envd.c's method table and api_http.c's server life; calls the driver through sbx_call.h. */
#ifndef API_E2B_FS_H
#define API_E2B_FS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api_connect.h"
#include "sbx_err.h"

struct areq;
struct api_server;

/*
 * The Connect methods of filesystem.Filesystem (E2B's envd, JSON codec; the
 * message shapes of the SDK's filesystem.proto): api_connect_fn handlers for
 * api_envd.c's rows. a is an envd request with a->npc the sandbox and a->who
 * its owner (the routing of the s8 design). Every path goes through
 * api_e2b_path (api_e2b_path.h); the work runs as sbx-helper modes in the
 * sandbox through the driver's exec (sbx_helper_proto.h stat, mkdir, move,
 * remove, walk, watch). Errors are Connect codes with sbx's sentences:
 * not_found, already_exists (MakeDir of an existing directory),
 * invalid_argument, permission_denied (outside /work), resource_exhausted
 * (caps below, file-op and stream shares), unavailable (the sandbox is not
 * running), deadline_exceeded, internal.
 *
 *   Stat {path} -> {entry}            MakeDir {path} -> {entry}
 *   Move {source,destination} -> {entry}   Remove {path} -> {}
 *   ListDir {path,depth} -> {entries} (depth 0 is 1; at most e2b_fs_list_max
 *       entries, sorted by path; more: resource_exhausted)
 *   WatchDir {path,recursive} -> stream: {start:{}} once the watches are in
 *       place, then {filesystem:{name,type}}; ends when the directory goes
 *       (ok), after e2b_watch_timeout, or with resource_exhausted when the
 *       sandbox's inotify queue overflowed
 *   CreateWatcher {path,recursive} -> {watcherId} (once watching)
 *   GetWatcherEvents {watcherId} -> {events} (taken from its buffer of
 *       e2b_watcher_events_max; an overflowed or ended watcher answers its
 *       error once its events are taken, and is gone)
 *   RemoveWatcher {watcherId} -> {}
 * Watch streams and watchers of one sandbox: at most e2b_watchers_per_sandbox.
 */
void api_e2b_fs_stat(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_fs_make_dir(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_fs_move(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_fs_remove(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_fs_list_dir(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_fs_watch_dir(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_fs_create_watcher(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_fs_get_watcher_events(struct areq *a, struct api_connect_call *c, json_t *msg);
void api_e2b_fs_remove_watcher(struct areq *a, struct api_connect_call *c, json_t *msg);

/* Server life: drain stops every watch of s, their execs cancelled, a
 * WatchDir stream or a CreateWatcher not answered yet ended with
 * unavailable (watchers are not kept across a restart); close does the same
 * without answering (the server is being freed). Both idempotent. */
void api_e2b_fs_drain(struct api_server *s);
void api_e2b_fs_close(struct api_server *s);

/*
 * envd's plain HTTP (api_e2b_files.c), api_handler_fn handlers for
 * api_envd.c's rows, a routed as above. They always answer themselves, in
 * E2B's error shape {"code":STATUS,"message":"..."} (404 not found, 403
 * outside /work, 400, 413, 429, 502 not running, 500), and return 0.
 *
 * GET /files?path=P[&username=U]: the file's bytes, streamed
 * (application/octet-stream).
 * POST /files?path=P: application/octet-stream: the body is the file (as
 * PUT .../files, streamed, at most file_size_max); multipart/form-data: each
 * part is one file, written to its filename (else P), parts spooled to one
 * unnamed file in state_dir as they arrive, then written one after the
 * other; at most e2b_files_parts_max parts and file_size_max bytes in all.
 * Answers [{"name","type":"file","path"}...] in the parts' order.
 * GET /health: 204 (the envd of an sbx sandbox is the api itself).
 * The body of POST /files is streamed by the gate when the request is
 * envd's (api_e2b_gate_streams, api_e2b.h): a->gbody; else it is in
 * evhttp's input buffer, whole.
 */
struct sbx_err;
/* /files by method: GET, POST, else 405 with Allow. */
int api_e2b_files(struct areq *a, struct sbx_err *err);
int api_e2b_files_get(struct areq *a, struct sbx_err *err);
int api_e2b_files_post(struct areq *a, struct sbx_err *err);
int api_e2b_health(struct areq *a, struct sbx_err *err);

/*
 * One entry line of the helper (sbx_helper_proto.h stat/walk: name, rel,
 * type, size, mode, uid, gid, owner, group, mtime, mtime_nsec, target) as
 * E2B's EntryInfo in protobuf JSON: {"name","type":"FILE_TYPE_*","path",
 * "size":"N","mode","permissions":"-rw-r--r--","owner","group",
 * "modifiedTime":RFC 3339[,"symlinkTarget"]}. base is the /work path the
 * helper was asked about; path is base, or base + "/" + rel. Returns a new
 * reference, or NULL when line is not such an entry (untrusted: it came
 * from inside the sandbox).
 */
json_t *api_e2b_entry_json(const json_t *line, const char *base);

/* The HTTP status of err in E2B's /files error shape (above). */
int api_e2b_files_status(const struct sbx_err *err);

/* The Connect code of an sbx error of the filesystem methods (above). */
const char *api_e2b_fs_code(const struct sbx_err *err);

#endif
