/* helper_watch.c - sbx-helper watch mode (adr/0061): inotify on a directory beneath /work (and its subdirectories with --recursive), one JSON line per event, the kernel's bounded queue the only buffer. Calls helper_path.c and helper_util.c only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helper.h"

#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | \
	IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

/* One watched directory: its inotify descriptor and path below the base. */
struct wdir {
	int wd;
	char *rel;      /* "" for the base */
};

struct watch {
	const struct helper_ctx *ctx;
	const char *base; /* the watched directory relative to the root */
	int ifd;
	int recursive;
	struct wdir dirs[SBX_HELPER_WATCH_DIRS_MAX];
	size_t ndirs;
	int full;       /* a directory was not watched: the cap was reached */
	struct helper_out out;
};

/*
 * Watches directory fd (an open descriptor of it, resolved beneath the
 * root) as rel: inotify_add_watch on /proc/self/fd/N names exactly the
 * directory opened, whatever a symlink or rename does to its path later.
 */
static int
add_dir(struct watch *w, int fd, const char *rel)
{
	char proc[64];
	size_t i;
	int wd;

	if (w->ndirs >= SBX_HELPER_WATCH_DIRS_MAX) {
		w->full = 1;
		return -1;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if ((wd = inotify_add_watch(w->ifd, proc, WATCH_MASK)) < 0) {
		if (errno == ENOSPC)
			w->full = 1;
		return -1;
	}
	for (i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return 0; /* the same directory again (a move) */
	if ((w->dirs[w->ndirs].rel = strdup(rel)) == NULL)
		return -1;
	w->dirs[w->ndirs++].wd = wd;
	return 0;
}

/* rel's subdirectories, depth first, not through symlinks, bounded in depth. */
static void
add_tree(struct watch *w, int fd, const char *rel, unsigned depth)
{
	char sub[SBX_HELPER_PATH_MAX + 1];
	struct dirent *de;
	DIR *d;
	int dfd, cfd;

	if (depth > SBX_HELPER_DU_DEPTH_MAX || (dfd = dup(fd)) < 0)
		return;
	if (fcntl(dfd, F_SETFD, FD_CLOEXEC) < 0 || (d = fdopendir(dfd)) == NULL) {
		close(dfd);
		return;
	}
	while ((de = readdir(d)) != NULL && !w->full) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel != '\0' ? "/" : "",
		    de->d_name) >= sizeof(sub))
			continue;
		cfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		    O_NONBLOCK | O_CLOEXEC);
		if (cfd < 0)
			continue;
		if (add_dir(w, cfd, sub) == 0)
			add_tree(w, cfd, sub, depth + 1);
		close(cfd);
	}
	closedir(d);
}

static const struct wdir *
find_wd(const struct watch *w, int wd)
{
	size_t i;

	for (i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return &w->dirs[i];
	return NULL;
}

static void
put_event(struct watch *w, const char *rel, const char *name, const char *op)
{
	helper_out_str(&w->out, "{\"name\":");
	if (*rel != '\0') {
		char buf[SBX_HELPER_PATH_MAX + NAME_MAX + 2];
		int n = snprintf(buf, sizeof(buf), "%s/%s", rel, name);

		helper_out_json_str(&w->out, buf, n > 0 && (size_t)n < sizeof(buf) ?
		    (size_t)n : strlen(rel));
	} else
		helper_out_json_str(&w->out, name, strlen(name));
	helper_out_str(&w->out, ",\"op\":\"");
	helper_out_str(&w->out, op);
	helper_out_str(&w->out, "\"}\n");
}

/* A directory created (or moved in) below a recursive watch: watched too,
 * with what it holds already. Opened again beneath the root by its path. */
static void
follow_new_dir(struct watch *w, const struct wdir *parent, const char *name)
{
	char sub[SBX_HELPER_PATH_MAX + 1], full[SBX_HELPER_PATH_MAX + 1];
	struct helper_err e;
	int cfd;

	if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", parent->rel,
	    *parent->rel != '\0' ? "/" : "", name) >= sizeof(sub) ||
	    (size_t)snprintf(full, sizeof(full), "%s%s%s", w->base,
	    *w->base != '\0' ? "/" : "", sub) >= sizeof(full))
		return;
	memset(&e, 0, sizeof(e));
	if ((cfd = helper_open(w->ctx, full, O_RDONLY | O_DIRECTORY | O_NONBLOCK, &e)) < 0)
		return;
	if (add_dir(w, cfd, sub) == 0)
		add_tree(w, cfd, sub, 1);
	close(cfd);
}

/* A write's temporary file (helper_fs.c: ".sbx-helper-<16 hex>.tmp"):
 * sbx's own, never reported; its rename onto the target is the write. */
static int
is_write_tmp(const char *name)
{
	size_t n = strlen(name);

	return n == 12 + 16 + 4 && strncmp(name, ".sbx-helper-", 12) == 0 &&
	    strcmp(name + 28, ".tmp") == 0;
}

static int
relay(struct watch *w, struct helper_err *err)
{
	static char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event *ev;
	const struct wdir *d;
	uint32_t cookie = 0;   /* of the last sbx write's rename away */
	ssize_t n;
	char *p;

	for (;;) {
		n = read(w->ifd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return helper_err_errno(err, n < 0 ? errno : EIO, "read inotify");
		for (p = buf; p < buf + n; p += sizeof(*ev) + ev->len) {
			ev = (const struct inotify_event *)p;
			if (ev->mask & IN_Q_OVERFLOW) {
				helper_out_str(&w->out, "{\"overflow\":true}\n");
				continue;
			}
			if ((d = find_wd(w, ev->wd)) == NULL)
				continue;
			if ((ev->mask & IN_IGNORED) && *d->rel != '\0') {
				/* A subdirectory gone: its slot is free again. */
				size_t i = (size_t)(d - w->dirs);

				free(w->dirs[i].rel);
				w->dirs[i] = w->dirs[--w->ndirs];
				continue;
			}
			if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) && *d->rel == '\0') {
				helper_out_str(&w->out, "{\"gone\":true}\n");
				(void)helper_out_flush(&w->out);
				return 0;
			}
			if (ev->len == 0 || ev->name[0] == '\0')
				continue;
			if (is_write_tmp(ev->name)) {
				if (ev->mask & IN_MOVED_FROM)
					cookie = ev->cookie;
				continue;
			}
			if ((ev->mask & IN_MOVED_TO) && cookie != 0 && ev->cookie == cookie) {
				/* An sbx write replaced the file whole: what a
				 * writer in place would have caused. */
				cookie = 0;
				put_event(w, d->rel, ev->name, "create");
				put_event(w, d->rel, ev->name, "write");
				continue;
			}
			if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
				put_event(w, d->rel, ev->name, "create");
				if (w->recursive && (ev->mask & IN_ISDIR))
					follow_new_dir(w, d, ev->name);
			}
			if (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE))
				put_event(w, d->rel, ev->name, "write");
			if (ev->mask & IN_DELETE)
				put_event(w, d->rel, ev->name, "remove");
			if (ev->mask & IN_MOVED_FROM)
				put_event(w, d->rel, ev->name, "rename");
			if (ev->mask & IN_ATTRIB)
				put_event(w, d->rel, ev->name, "chmod");
		}
		if (helper_out_flush(&w->out) < 0)
			return helper_err_errno(err, errno, "write");
	}
}

int
helper_fs_watch(const struct helper_ctx *ctx, const char *path, int recursive, int outfd,
    struct helper_err *err)
{
	static struct watch w;
	struct stat st;
	const char *rel;
	int fd, rc;

	(void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (helper_path_check(ctx, path, &rel, err) < 0)
		return -1;
	if ((fd = helper_open(ctx, rel, O_RDONLY | O_NONBLOCK, err)) < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		close(fd);
		return helper_err_set(err, SBX_E_BAD_REQUEST, "/work%s%.150s is not a "
		    "directory; only a directory can be watched.", *rel != '\0' ? "/" : "",
		    rel);
	}
	memset(&w, 0, sizeof(w));
	w.recursive = recursive;
	w.ctx = ctx;
	w.base = rel;
	helper_out_init(&w.out, outfd);
	if ((w.ifd = inotify_init1(IN_CLOEXEC)) < 0) {
		close(fd);
		return helper_err_errno(err, errno, "inotify_init1");
	}
	if (add_dir(&w, fd, "") < 0) {
		helper_err_set(err, SBX_E_TOO_MANY, "The sandbox cannot watch more "
		    "directories now (inotify: %s).", strerror(errno));
		close(fd);
		close(w.ifd);
		return -1;
	}
	if (recursive)
		add_tree(&w, fd, "", 1);
	/* The start line: the watches are in place, events from now on count. */
	helper_out_str(&w.out, w.full ? "{\"start\":true,\"partial\":true}\n" :
	    "{\"start\":true}\n");
	/* Not held open while watching: an open descriptor would keep a
	 * removed directory alive and its IN_DELETE_SELF from coming. */
	close(fd);
	if (helper_out_flush(&w.out) < 0)
		rc = helper_err_errno(err, errno, "write");
	else
		rc = relay(&w, err);
	close(w.ifd);
	return rc;
}
