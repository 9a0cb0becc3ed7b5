/* api_e2b_path.c - E2B's paths mapped to /work and cleaned as envd's filepath.Clean would (adr/0061). Pure: touches nothing but its arguments. */
#include <string.h>

#include "api_e2b_path.h"
#include "sbx_path.h"

#define HOME "/home/user"

/* s starts with prefix as a whole path segment (then '\0' or '/'): the rest, else NULL. */
static const char *
under(const char *s, const char *prefix)
{
	size_t n = strlen(prefix);

	if (strncmp(s, prefix, n) != 0 || (s[n] != '\0' && s[n] != '/'))
		return NULL;
	return s + n;
}

int
api_e2b_path(const char *path, char *out, size_t cap, struct sbx_err *err)
{
	const char *rest, *p, *seg;
	size_t len, root = sizeof(SBX_WORK_DIR) - 1, n;

	if (path == NULL)
		path = "";
	if (cap < root + 1)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The path does not fit.");
	if (path[0] == '~' && (path[1] == '\0' || path[1] == '/'))
		rest = path + 1;
	else if (path[0] != '/')
		rest = path;               /* relative: below home */
	else if ((rest = under(path, HOME)) == NULL &&
	    (rest = under(path, SBX_WORK_DIR)) == NULL)
		return sbx_err_set(err, SBX_E_FORBIDDEN, "%s", API_E2B_PATH_OUTSIDE);
	memcpy(out, SBX_WORK_DIR, root);
	len = root;
	for (p = rest;;) {
		while (*p == '/')
			p++;
		if (*p == '\0')
			break;
		seg = p;
		while (*p != '\0' && *p != '/')
			p++;
		n = (size_t)(p - seg);
		if (n == 1 && seg[0] == '.')
			continue;
		if (n == 2 && seg[0] == '.' && seg[1] == '.') {
			if (len == root)
				return sbx_err_set(err, SBX_E_FORBIDDEN, "%s",
				    API_E2B_PATH_OUTSIDE);
			while (out[len - 1] != '/')
				len--;
			len--;
			continue;
		}
		if (len + 1 + n + 1 > cap)
			return sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
			    "The path is longer than %d bytes.", SBX_PATH_MAX);
		out[len++] = '/';
		memcpy(out + len, seg, n);
		len += n;
	}
	out[len] = '\0';
	return sbx_path_check(out, len, err);
}
