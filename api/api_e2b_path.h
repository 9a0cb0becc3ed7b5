/* api_e2b_path.h - E2B's paths as sbx's: what E2B's SDK calls the home directory is /work (adr/0061); shared by the envd handlers (filesystem, /files, process cwd). */
#ifndef API_E2B_PATH_H
#define API_E2B_PATH_H

#include <stddef.h>

#include "sbx_err.h"

/* The sentence of a path outside /work (s8 design, docs/e2b.md). */
#define API_E2B_PATH_OUTSIDE "Only /work is reachable in an sbx sandbox " \
	"(E2B's home directory is /work)."

/*
 * Maps path, as an E2B client sent it (untrusted; NULL or "" is the home
 * directory), to the sbx path it names, into out (cap bytes, NUL-terminated).
 * The home directory is /work: "~", "~/x", "/home/user", "/home/user/x" and a
 * relative "x" become /work, /work/x; "/work" and "/work/x" stay. Then, as
 * envd's filepath.Clean does, empty and "." segments and a trailing '/' are
 * dropped and ".." takes the segment before it away. The result passes
 * sbx_path_check (SPEC §4).
 *
 * Returns 0, or -1 with err: SBX_E_FORBIDDEN and API_E2B_PATH_OUTSIDE for
 * any other absolute path or a ".." climbing out of /work (Connect
 * permission_denied, /files 403); SBX_E_PATH_OUTSIDE_WORK for a path
 * sbx_path_check refuses (too long, NUL, control or look-alike characters;
 * the sentence names the rule, never the path); SBX_E_BAD_REQUEST when out
 * is too small.
 */
int api_e2b_path(const char *path, char *out, size_t cap, struct sbx_err *err);

#endif
