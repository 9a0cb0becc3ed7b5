/* sbx_path.h - sandbox ids and /work paths: checked, never normalised (SPEC §4). */
#ifndef SBX_PATH_H
#define SBX_PATH_H

#include <stddef.h>

#include "sbx_err.h"
#include "sbx_proto.h"

#define SBX_ID_MAX SBX_ID_MAX_LEN /* bytes of a sandbox id */
#define SBX_WORK_ROOT SBX_WORK_DIR /* older name of the one "/work" */

/* Returns 1 when id matches [a-z0-9][a-z0-9-]{0,62} exactly, else 0 (NULL: 0). */
int sbx_id_valid(const char *id);

/*
 * Checks a sandbox path of len bytes (len counts embedded NULs; path need not
 * be NUL-terminated). Acceptable, in the order checked:
 *   - at most SBX_PATH_MAX (4096) bytes, not empty;
 *   - no NUL byte;
 *   - valid UTF-8 (no overlong forms, surrogates or values above U+10FFFF);
 *   - no control character (U+0000..U+001F, U+007F, U+0080..U+009F);
 *   - no Unicode look-alike of '.' or '/': every code point whose NFKC form
 *     contains '.' or '/' (U+2024 ONE DOT LEADER, U+2025, U+2026, U+FE52,
 *     U+FF0E, U+FF0F, U+2488..U+249B, ...; Unicode 14 table) plus the slash
 *     confusables U+2044 FRACTION SLASH, U+2215 DIVISION SLASH, U+2571,
 *     U+29F8 BIG SOLIDUS — a normaliser downstream could turn them into "..";
 *   - absolute: starts with '/';
 *   - equal to "/work" or starting with "/work/" ("/workspace" is refused);
 *   - no empty segment ("//", and a trailing '/': "/work/" is refused);
 *   - no "." or ".." segment ("a..b" and ".hidden" are fine);
 *   - each segment at most SBX_PATH_SEGMENT_MAX (255) bytes.
 * Returns 0 when acceptable, else -1 with err code SBX_E_PATH_OUTSIDE_WORK and
 * a sentence naming the rule broken (never echoing the path).
 */
int sbx_path_check(const char *path, size_t len, struct sbx_err *err);

/*
 * Extracts parameter name from a raw URI query string (the part after '?',
 * not yet decoded; NULL is an empty query), percent-decoding it exactly once
 * ('+' becomes a space, "%XX" the byte XX, so "%00" is an embedded NUL that
 * the check then refuses), and checks the result with sbx_path_check so a
 * caller cannot forget to. Decoding happens once only:
 * "path=%2Fwork%2F%2e%2e" decodes to "/work/.." and is refused, while
 * "path=/work/%252e%252e" decodes to "/work/%2e%2e", a harmless file named
 * "%2e%2e" that nothing decodes again.
 *
 * On success returns 0, *out is a malloc'd NUL-terminated copy (free()) and
 * *outlen its length (outlen may be NULL). On failure returns -1, *out NULL:
 * SBX_E_BAD_REQUEST when the parameter is absent, given more than once
 * (ambiguous) or badly percent-encoded; SBX_E_PATH_OUTSIDE_WORK when the
 * decoded path breaks a rule of sbx_path_check; SBX_E_INTERNAL out of memory.
 */
int sbx_query_path(const char *query, const char *name, char **out, size_t *outlen,
    struct sbx_err *err);

/*
 * Like sbx_query_path for any parameter, without the path check: returns 1
 * with *out and *outlen set (malloc'd, decoded once, NUL-terminated, may contain
 * NULs) when present, 0 with *out NULL when absent, -1 with SBX_E_BAD_REQUEST
 * (given twice, bad encoding) or SBX_E_INTERNAL. Names in the query are
 * decoded before being compared with name.
 */
int sbx_query_param(const char *query, const char *name, char **out, size_t *outlen,
    struct sbx_err *err);

/*
 * Percent-decodes len bytes once ('+' -> ' ' when plus_is_space). Returns a
 * malloc'd NUL-terminated buffer with its length in *outlen, or NULL on a bad
 * escape ('%' not followed by two hex digits) or out of memory (errno EINVAL
 * / ENOMEM).
 */
char *sbx_percent_decode(const char *s, size_t len, int plus_is_space, size_t *outlen);

/*
 * Percent-encodes len bytes for a query value: everything except
 * [A-Za-z0-9-._~/] becomes "%XX" (so '+' is "%2B" and ' ' is "%20").
 * Returns a malloc'd NUL-terminated string, or NULL when out of memory.
 */
char *sbx_query_encode(const char *s, size_t len);

#endif
