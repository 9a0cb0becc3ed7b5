/* helper_path.c - sbx-helper path rules and resolution beneath /work (openat2, else an O_NOFOLLOW walk). Calls helper_util.c only. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helper.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

#define SEGMENT_MAX 255

/* Set once openat2 answered ENOSYS: the kernel will not grow it later. */
static int openat2_missing;

int
helper_path_check(const struct helper_ctx *ctx, const char *path, const char **rel,
    struct helper_err *err)
{
	const char *p, *seg;
	size_t len, n;

	if (path == NULL)
		return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "No path was given.");
	len = strnlen(path, SBX_HELPER_PATH_MAX + 1);
	if (len > SBX_HELPER_PATH_MAX)
		return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "The path is longer than %d bytes.",
		    SBX_HELPER_PATH_MAX);
	if (path[0] != '/')
		return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "The path is not absolute (start with /work).");
	if (strncmp(path, ctx->root, ctx->root_len) != 0 ||
	    (path[ctx->root_len] != '\0' && path[ctx->root_len] != '/'))
		return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "The path must be /work or start with /work/.");
	p = path + ctx->root_len;
	if (*p == '\0') {
		*rel = p;
		return 0;
	}
	p++; /* the '/' after the root */
	*rel = p;
	for (;;) {
		seg = p;
		while (*p != '\0' && *p != '/')
			p++;
		n = (size_t)(p - seg);
		if (n == 0)
			return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
			    "The path has an empty segment ('//' or a trailing '/').");
		if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
			    "The path has a '.' or '..' segment.");
		if (n > SEGMENT_MAX)
			return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
			    "The path has a segment longer than %d bytes.", SEGMENT_MAX);
		if (*p == '\0')
			return 0;
		p++;
	}
}

/*
 * The walk for kernels without openat2: each directory opened with
 * O_PATH|O_NOFOLLOW from the previous one; any symlink, wherever it points,
 * is refused since without RESOLVE_BENEATH we cannot prove it stays inside.
 */
static int
open_walk(const struct helper_ctx *ctx, const char *rel, int flags, struct helper_err *err)
{
	char buf[SBX_HELPER_PATH_MAX + 1];
	char *seg, *slash;
	int dfd = -1, nfd = -1, fd = -1, saved;
	struct stat st;

	if (*rel == '\0') {
		if ((fd = openat(ctx->rootfd, ".", flags | O_CLOEXEC)) < 0)
			return helper_err_errno(err, errno, "open");
		return fd;
	}
	if (strlen(rel) >= sizeof(buf))
		return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "path too long");
	memcpy(buf, rel, strlen(rel) + 1);
	seg = buf;
	if ((dfd = dup(ctx->rootfd)) < 0) {
		helper_err_errno(err, errno, "dup");
		goto fail;
	}
	while ((slash = strchr(seg, '/')) != NULL) {
		*slash = '\0';
		nfd = openat(dfd, seg, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0) {
			helper_err_errno(err, errno, "open");
			goto fail;
		}
		if (fstat(nfd, &st) < 0) {
			helper_err_errno(err, errno, "fstat");
			goto fail;
		}
		if (S_ISLNK(st.st_mode)) {
			helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
			    "path goes through a symlink (refused without openat2)");
			goto fail;
		}
		if (!S_ISDIR(st.st_mode)) {
			helper_err_errno(err, ENOTDIR, "open");
			goto fail;
		}
		close(dfd);
		dfd = nfd;
		nfd = -1;
		seg = slash + 1;
	}
	fd = openat(dfd, seg, flags | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		saved = errno;
		if ((saved == ELOOP || saved == ENOTDIR) &&
		    fstatat(dfd, seg, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
			helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
			    "path is a symlink (refused without openat2)");
			goto fail;
		}
		helper_err_errno(err, saved, "open");
		goto fail;
	}
	/* O_PATH|O_NOFOLLOW opens the link itself instead of failing. */
	if (fstat(fd, &st) < 0) {
		helper_err_errno(err, errno, "fstat");
		goto fail;
	}
	if (S_ISLNK(st.st_mode)) {
		helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
		    "path is a symlink (refused without openat2)");
		goto fail;
	}
	close(dfd);
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	if (nfd >= 0)
		close(nfd);
	if (dfd >= 0)
		close(dfd);
	return -1;
}

static int
open_beneath(const struct helper_ctx *ctx, const char *rel, int flags, struct helper_err *err)
{
	struct open_how how;
	int fd, tries;

	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
		return helper_err_set(err, SBX_E_INTERNAL, "helper_open cannot create");
	if (ctx->no_openat2 || openat2_missing)
		return open_walk(ctx, rel, flags, err);
	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(flags | O_CLOEXEC);
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
	/* EAGAIN: a concurrent rename or mount was seen during the walk. */
	for (tries = 0; tries < 32; tries++) {
		fd = (int)syscall(SYS_openat2, ctx->rootfd, *rel != '\0' ? rel : ".", &how,
		    sizeof(how));
		if (fd >= 0)
			return fd;
		if (errno != EAGAIN && errno != EINTR)
			break;
	}
	if (errno == ENOSYS) {
		openat2_missing = 1;
		return open_walk(ctx, rel, flags, err);
	}
	return helper_err_errno(err, errno, "open");
}

int
helper_open(const struct helper_ctx *ctx, const char *rel, int flags, struct helper_err *err)
{
	int fd = open_beneath(ctx, rel, flags, err);

	/* "open: no such file or directory" tells nobody which path. */
	if (fd < 0 && err != NULL)
		helper_err_name_path(err, rel);
	return fd;
}

int
helper_open_parent(const struct helper_ctx *ctx, const char *rel, int create,
    const char **name, struct helper_err *err)
{
	char buf[SBX_HELPER_PATH_MAX + 1];
	const char *last;
	char *p;
	int fd = -1, pfd = -1;
	size_t len;

	len = strlen(rel);
	if (len == 0 || len >= sizeof(buf))
		return helper_err_set(err, SBX_E_BAD_REQUEST, "path names /work itself");
	last = strrchr(rel, '/');
	*name = last != NULL ? last + 1 : rel;
	if (last == NULL)
		return helper_open(ctx, "", O_PATH | O_DIRECTORY, err);
	memcpy(buf, rel, (size_t)(last - rel));
	buf[last - rel] = '\0';
	fd = helper_open(ctx, buf, O_PATH | O_DIRECTORY, err);
	if (fd >= 0 || !create || err->errnum != ENOENT)
		return fd;

	/*
	 * Create what is missing one directory at a time, each mkdirat in a
	 * descriptor that was itself resolved beneath the root: nothing can be
	 * created outside, whatever symlinks appear meanwhile.
	 */
	if ((pfd = helper_open(ctx, "", O_PATH | O_DIRECTORY, err)) < 0)
		goto fail;
	p = buf;
	for (;;) {
		char *slash = strchr(p, '/');
		const char *seg;

		if (slash != NULL)
			*slash = '\0';
		seg = strrchr(buf, '/') != NULL ? strrchr(buf, '/') + 1 : buf;
		fd = helper_open(ctx, buf, O_PATH | O_DIRECTORY, err);
		if (fd < 0 && err->errnum == ENOENT) {
			if (mkdirat(pfd, seg, 0755) < 0 && errno != EEXIST) {
				helper_err_errno(err, errno, "mkdir");
				goto fail;
			}
			fd = helper_open(ctx, buf, O_PATH | O_DIRECTORY, err);
		}
		if (fd < 0)
			goto fail;
		close(pfd);
		pfd = fd;
		fd = -1;
		if (slash == NULL)
			break;
		*slash = '/';
		p = slash + 1;
	}
	return pfd;
fail:
	if (fd >= 0)
		close(fd);
	if (pfd >= 0)
		close(pfd);
	return -1;
}
