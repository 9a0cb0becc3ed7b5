/* cli_files.c - sbxctl cp, cat and ls: files in and out of a sandbox, directory listings (docs/cli.md). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "cli_http.h"
#include "cli_print.h"
#include "cli_sse.h"
#include "sbx_config.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"

#include "cli_int.h"

/* ------------------------------------------------------------------ */
/* Files                                                               */

/* Streams the body of a GET files answer to fd. */
static int
download(struct ctx *x, const char *npc, const char *path, int fd)
{
	struct cli_resp r;
	struct cli_conn *c = NULL;
	struct sbx_err err;
	char target[8192], *buf = NULL;
	ssize_t n;
	int rc = CX_ERR;

	sbx_err_clear(&err);
	if (npc_target(target, sizeof(target), npc, "/sandbox/files",
	    path) == -1)
		return usage_err(NULL, "the NPC name or path is too long.");
	if ((buf = malloc(65536)) == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	if ((c = cli_http_request(&x->url, "GET", target, x->key, NULL, &r,
	    &err)) == NULL) {
		rc = fail_err(&err);
		goto done;
	}
	if (r.status != 200) {
		rc = fail_resp(c, &r);
		goto done;
	}
	for (;;) {
		if ((n = cli_http_read(c, buf, 65536, &err)) < 0) {
			rc = fail_err(&err);
			goto done;
		}
		if (n == 0)
			break;
		if (write_fd(fd, (unsigned char *)buf, (size_t)n) == -1) {
			errmsg("writing the local file failed: %s.",
			    strerror(errno));
			goto done;
		}
	}
	rc = CX_OK;
done:
	free(buf);
	cli_http_close(c);
	return rc;
}

int
c_cat(struct ctx *x)
{
	const char *path;
	char npc[128];

	if (!remote_spec(x->o.pos[0], npc, sizeof(npc), &path))
		return usage_err(x->cmd, "expected NPC:/work/PATH, not "
		    "\"%.80s\".", x->o.pos[0]);
	return download(x, npc, path, 1);
}

/* Fills in the file name when the destination names a directory. */
static int
dest_path(char *dst, size_t cap, const char *dir_or_file, const char *src,
    int is_dir)
{
	char tmp[PATH_MAX];
	const char *base;
	size_t l = strlen(dir_or_file);

	if (!is_dir)
		return snprintf(dst, cap, "%s", dir_or_file) < (int)cap ? 0 : -1;
	snprintf(tmp, sizeof(tmp), "%s", src);
	base = basename(tmp);
	if (base[0] == '\0' || strcmp(base, "/") == 0 ||
	    strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return -1;
	return snprintf(dst, cap, "%s%s%s", dir_or_file,
	    l > 0 && dir_or_file[l - 1] == '/' ? "" : "/", base) < (int)cap ?
	    0 : -1;
}

static int
cp_from(struct ctx *x, const char *npc, const char *rpath, const char *local)
{
	char dst[PATH_MAX], tmp[PATH_MAX + 32], dir[PATH_MAX];
	const char *parent;
	struct stat st;
	mode_t um;
	int fd = -1, rc;

	if (strcmp(local, "-") == 0)
		return download(x, npc, rpath, 1);
	if (dest_path(dst, sizeof(dst), local, rpath, stat(local, &st) == 0 &&
	    S_ISDIR(st.st_mode)) == -1)
		return usage_err(NULL, "cannot name the local file for %s.", rpath);
	/* Into a temporary file beside the destination, renamed when the
	 * whole file arrived: a failed copy leaves the old file alone. */
	snprintf(dir, sizeof(dir), "%s", dst);
	parent = dirname(dir);
	snprintf(tmp, sizeof(tmp), "%s/.sbx-cp-XXXXXX", parent);
	if ((fd = mkstemp(tmp)) == -1) {
		errmsg("cannot create a file in %s: %s.", parent,
		    strerror(errno));
		return errno == ENOENT ? CX_NOTFOUND : CX_ERR;
	}
	um = umask(0);
	umask(um);
	fchmod(fd, 0666 & ~um);
	rc = download(x, npc, rpath, fd);
	if (close(fd) == -1 && rc == CX_OK) {
		errmsg("writing %s failed: %s.", dst, strerror(errno));
		rc = CX_ERR;
	}
	if (rc == CX_OK && rename(tmp, dst) == -1) {
		errmsg("cannot rename into %s: %s.", dst, strerror(errno));
		rc = CX_ERR;
	}
	if (rc != CX_OK)
		unlink(tmp);
	return rc;
}

/* Reads all of stdin into memory (for "sbxctl cp - NPC:/work/F"). */
static char *
slurp_stdin(size_t *len)
{
	char *buf = NULL, *np;
	size_t used = 0, cap = 0;
	ssize_t r;

	for (;;) {
		if (cap - used < 65536) {
			cap = cap * 2 + 65536;
			if ((np = realloc(buf, cap)) == NULL)
				goto fail;
			buf = np;
		}
		r = read(0, buf + used, cap - used);
		if (r < 0 && errno == EINTR && !cli_http_interrupted())
			continue;
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		used += (size_t)r;
		if (used > STDIN_MAX)
			goto fail;
	}
	*len = used;
	return buf != NULL ? buf : strdup("");
fail:
	free(buf);
	return NULL;
}

static int
cp_to(struct ctx *x, const char *local, const char *npc, const char *rpath)
{
	struct cli_body b = { SBX_CT_OCTET, NULL, 0, -1 };
	struct stat st;
	char dst[4096], target[16384], modeq[16], *mem = NULL, *end;
	size_t rl = strlen(rpath);
	unsigned long mode;
	int rc = CX_ERR;

	if (strcmp(local, "-") == 0) {
		if ((mem = slurp_stdin(&b.len)) == NULL) {
			errmsg("cannot read standard input (at most %zu MiB).",
			    STDIN_MAX >> 20);
			return CX_ERR;
		}
		b.data = mem;
		mode = 0644;
	} else {
		if ((b.fd = open(local, O_RDONLY | O_CLOEXEC)) == -1 ||
		    fstat(b.fd, &st) == -1) {
			errmsg("cannot open %s: %s.", local, strerror(errno));
			rc = errno == ENOENT ? CX_NOTFOUND : CX_ERR;
			goto done;
		}
		if (!S_ISREG(st.st_mode)) {
			rc = usage_err(NULL, "%s is not a regular file (sbxctl cp "
			    "copies one file).", local);
			goto done;
		}
		b.len = (size_t)st.st_size;
		mode = st.st_mode & 0777;
	}
	if (x->o.mode != NULL) {
		errno = 0;
		mode = strtoul(x->o.mode, &end, 8);
		if (*end != '\0' || end == x->o.mode || errno != 0 ||
		    mode > 0777) {
			rc = usage_err(NULL, "--mode wants octal permission bits "
			    "such as 0644.");
			goto done;
		}
	}
	if (dest_path(dst, sizeof(dst), rpath, local, rl > 0 &&
	    rpath[rl - 1] == '/') == -1) {
		rc = usage_err(NULL, "name the file in the sandbox: "
		    "NPC:/work/DIR/FILE.");
		goto done;
	}
	if (npc_target(target, sizeof(target) - 16, npc, "/sandbox/files",
	    dst) == -1) {
		rc = usage_err(NULL, "the NPC name or path is too long.");
		goto done;
	}
	snprintf(modeq, sizeof(modeq), "&mode=%04lo", mode);
	strcat(target, modeq);
	/* The answer (JSON) is read and dropped. */
	rc = call_body(x, "PUT", target, &b, NULL);
done:
	free(mem);
	if (b.fd != -1)
		close(b.fd);
	return rc;
}

int
c_cp(struct ctx *x)
{
	const char *a = x->o.pos[0], *b = x->o.pos[1], *path;
	char npc[128];
	int ra, rb;

	ra = remote_spec(a, npc, sizeof(npc), &path);
	rb = !ra && remote_spec(b, npc, sizeof(npc), &path);
	if (ra == rb)
		return usage_err(x->cmd, "exactly one side must be "
		    "NPC:/work/PATH.");
	if (ra && remote_spec(b, npc, sizeof(npc), &path))
		return usage_err(x->cmd, "exactly one side must be "
		    "NPC:/work/PATH.");
	if (ra) {
		remote_spec(a, npc, sizeof(npc), &path);
		return cp_from(x, npc, path, b);
	}
	return cp_to(x, a, npc, path);
}

static void
mode_string(char *out, const char *type, long long mode)
{
	static const char rwx[] = "rwxrwxrwx";
	int i;

	out[0] = strcmp(type, "dir") == 0 ? 'd' : strcmp(type, "symlink") == 0 ?
	    'l' : strcmp(type, "file") == 0 ? '-' : '?';
	for (i = 0; i < 9; i++)
		out[i + 1] = (mode & (0400 >> i)) ? rwx[i] : '-';
	out[10] = '\0';
}

/* One directory entry as a line: mode, size, mtime, escaped name. */
static void
print_dirent(json_t *e)
{
	char ms[16], tb[40], name[1100], raw[300];
	json_t *nm = json_object_get(e, "name");
	const char *b64 = json_string_value(json_object_get(e, "name_b64"));
	json_t *mt = json_object_get(e, "mtime");
	size_t rl = 0;

	mode_string(ms, jraw(e, "type"),
	    json_integer_value(json_object_get(e, "mode")));
	if (json_is_integer(mt))
		cli_time(json_integer_value(mt), 0, tb, sizeof(tb));
	else
		snprintf(tb, sizeof(tb), "%-16s", "-");
	if (json_is_string(nm))
		cli_escape(json_string_value(nm), json_string_length(nm), name,
		    sizeof(name));
	else if (b64 != NULL && sodium_base642bin((unsigned char *)raw,
	    sizeof(raw), b64, strlen(b64), NULL, &rl, NULL,
	    sodium_base64_VARIANT_ORIGINAL) == 0)
		cli_escape(raw, rl, name, sizeof(name));
	else
		snprintf(name, sizeof(name), "(no name)");
	printf("%s %10lld %s %s%s\n", ms,
	    (long long)json_integer_value(json_object_get(e, "size")), tb, name,
	    strcmp(jraw(e, "type"), "dir") == 0 ? "/" : "");
}

/* Pages of a listing at most this many: 100 x list_max_entries. */
#define LS_PAGES_MAX 1000

int
c_ls(struct ctx *x)
{
	const char *path, *cur;
	char npc[128], target[8192], *cursor = NULL, *enc;
	json_t *j = NULL, *e, *ents, *all = NULL;
	size_t i, pages = 0;
	int rc = CX_OK;

	if (!remote_spec(x->o.pos[0], npc, sizeof(npc), &path))
		return usage_err(x->cmd, "expected NPC:/work/DIR, not "
		    "\"%.80s\".", x->o.pos[0]);
	if (npc_target(target, sizeof(target), npc, "/sandbox/list",
	    path) == -1)
		return usage_err(NULL, "the NPC name or path is too long.");
	if (x->o.json && (all = json_array()) == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	/* Pages ({"entries","truncated","cursor"}, proto/broker-api.md)
	 * until the last one; sorted by the server, printed as they come. */
	for (;;) {
		size_t tl = strlen(target);

		enc = cursor != NULL ? cursor : "";
		if (snprintf(target + tl, sizeof(target) - tl, "&cursor=%s",
		    enc) >= (int)(sizeof(target) - tl)) {
			errmsg("the listing's cursor is too long.");
			rc = CX_ERR;
			break;
		}
		rc = call_json(x, "GET", target, NULL, &j);
		target[tl] = '\0';
		if (rc != CX_OK)
			break;
		ents = json_is_array(j) ? j : json_object_get(j, "entries");
		if (!json_is_array(ents)) {
			errmsg("the server's listing is not a list of entries.");
			rc = CX_ERR;
			break;
		}
		json_array_foreach(ents, i, e) {
			if (!json_is_object(e))
				continue;
			if (all != NULL)
				json_array_append(all, e);
			else
				print_dirent(e);
		}
		cur = json_string_value(json_object_get(j, "cursor"));
		free(cursor);
		cursor = NULL;
		if (!json_is_object(j) ||
		    !json_is_true(json_object_get(j, "truncated")) || cur == NULL ||
		    cur[0] == '\0' || ++pages >= LS_PAGES_MAX)
			break;
		/* base64url: nothing to percent-encode, but check it is that */
		if (strspn(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789-_") != strlen(cur) || (cursor = strdup(cur)) == NULL) {
			errmsg("the server sent a cursor sbxctl cannot use.");
			rc = CX_ERR;
			break;
		}
		json_decref(j);
		j = NULL;
	}
	if (rc == CX_OK && all != NULL)
		rc = print_json(all);
	free(cursor);
	json_decref(j);
	json_decref(all);
	return rc;
}
