/* helper_e2bfs.c - sbx-helper modes behind E2B's filesystem service (adr/0061): stat, mkdir, move, remove and a depth-bounded walk, each printing entries as JSON lines. Calls helper_path.c and helper_util.c only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helper.h"

#define NAME_CACHE 16        /* uid/gid -> name pairs kept per run */
#define NAME_MAX_LEN 64      /* a user or group name printed at most */

/* One id's name from an /etc/passwd-shaped file (name:x:id:...): "" when absent. */
struct id_name {
	unsigned id;
	char name[NAME_MAX_LEN + 1];
};

static struct id_name cache[2][NAME_CACHE];
static size_t ncache[2];

static const char *
id_lookup(int group, unsigned id)
{
	static char line[1024];
	struct id_name *slot;
	FILE *f;
	size_t i, n;

	for (i = 0; i < ncache[group]; i++)
		if (cache[group][i].id == id)
			return cache[group][i].name;
	slot = &cache[group][ncache[group] < NAME_CACHE ? ncache[group]++ : NAME_CACHE - 1];
	slot->id = id;
	slot->name[0] = '\0';
	if ((f = fopen(group ? "/etc/group" : "/etc/passwd", "re")) == NULL)
		return slot->name;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *c1 = strchr(line, ':'), *c2, *end;
		unsigned long v;

		if (c1 == NULL || (c2 = strchr(c1 + 1, ':')) == NULL)
			continue;
		errno = 0;
		v = strtoul(c2 + 1, &end, 10);
		if (errno != 0 || end == c2 + 1 || *end != ':' || v != id)
			continue;
		n = (size_t)(c1 - line);
		if (n > NAME_MAX_LEN)
			n = NAME_MAX_LEN;
		memcpy(slot->name, line, n);
		slot->name[n] = '\0';
		break;
	}
	fclose(f);
	return slot->name;
}

static const char *
type_name(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

/*
 * One entry line: {"name","rel","type","size","mode","uid","gid","owner",
 * "group","mtime","mtime_nsec"[,"target"]}. rel is the entry's path
 * relative to what the mode was asked about ("" for that itself); a
 * symlink's target is read in dfd by name.
 */
static void
put_entry_at(struct helper_out *o, int dfd, const char *name, const char *rel,
    const struct stat *st)
{
	static char target[SBX_HELPER_PATH_MAX];
	const char *id;
	ssize_t n;

	helper_out_str(o, "{\"name\":");
	helper_out_json_str(o, name, strlen(name));
	helper_out_str(o, ",\"rel\":");
	helper_out_json_str(o, rel, strlen(rel));
	helper_out_str(o, ",\"type\":\"");
	helper_out_str(o, type_name(st->st_mode));
	helper_out_str(o, "\",\"size\":");
	helper_out_i64(o, (int64_t)st->st_size);
	helper_out_str(o, ",\"mode\":");
	helper_out_u64(o, (uint64_t)(st->st_mode & 07777));
	helper_out_str(o, ",\"uid\":");
	helper_out_u64(o, (uint64_t)st->st_uid);
	helper_out_str(o, ",\"gid\":");
	helper_out_u64(o, (uint64_t)st->st_gid);
	helper_out_str(o, ",\"owner\":");
	id = id_lookup(0, (unsigned)st->st_uid);
	helper_out_json_str(o, id, strlen(id));
	helper_out_str(o, ",\"group\":");
	id = id_lookup(1, (unsigned)st->st_gid);
	helper_out_json_str(o, id, strlen(id));
	helper_out_str(o, ",\"mtime\":");
	helper_out_i64(o, (int64_t)st->st_mtim.tv_sec);
	helper_out_str(o, ",\"mtime_nsec\":");
	helper_out_i64(o, (int64_t)st->st_mtim.tv_nsec);
	if (S_ISLNK(st->st_mode) && dfd >= 0 &&
	    (n = readlinkat(dfd, name, target, sizeof(target) - 1)) >= 0) {
		helper_out_str(o, ",\"target\":");
		helper_out_json_str(o, target, (size_t)n);
	}
	helper_out_str(o, "}\n");
}

/* The entry of rel (lstat: a symlink is itself), name its last segment. */
static int
stat_rel(const struct helper_ctx *ctx, const char *rel, int *pfd, const char **name,
    struct stat *st, struct helper_err *err)
{
	*pfd = -1;
	if (*rel == '\0') {
		*name = "work";
		if (fstatat(ctx->rootfd, "", st, AT_EMPTY_PATH) < 0)
			return helper_err_errno(err, errno, "stat");
		return 0;
	}
	if ((*pfd = helper_open_parent(ctx, rel, 0, name, err)) < 0)
		return -1;
	if (fstatat(*pfd, *name, st, AT_SYMLINK_NOFOLLOW) < 0) {
		helper_err_errno(err, errno, "stat");
		helper_err_name_path(err, rel);
		close(*pfd);
		*pfd = -1;
		return -1;
	}
	return 0;
}

static int
print_one(const struct helper_ctx *ctx, const char *rel, int outfd, struct helper_err *err)
{
	static struct helper_out out;
	struct stat st;
	const char *name;
	int pfd, rc;

	if (stat_rel(ctx, rel, &pfd, &name, &st, err) < 0)
		return -1;
	helper_out_init(&out, outfd);
	put_entry_at(&out, pfd, name, "", &st);
	if (pfd >= 0)
		close(pfd);
	rc = helper_out_flush(&out);
	if (rc < 0)
		return helper_err_errno(err, errno, "write");
	return 0;
}

int
helper_fs_stat(const struct helper_ctx *ctx, const char *path, int outfd,
    struct helper_err *err)
{
	const char *rel;

	if (helper_path_check(ctx, path, &rel, err) < 0)
		return -1;
	return print_one(ctx, rel, outfd, err);
}

int
helper_fs_mkdir(const struct helper_ctx *ctx, const char *path, int outfd,
    struct helper_err *err)
{
	const char *rel, *name;
	struct stat st;
	int pfd;

	if (helper_path_check(ctx, path, &rel, err) < 0)
		return -1;
	if (*rel == '\0')
		return helper_err_set(err, SBX_E_CONFLICT, "/work exists already.");
	if ((pfd = helper_open_parent(ctx, rel, 1, &name, err)) < 0)
		return -1;
	if (mkdirat(pfd, name, 0755) < 0) {
		int e = errno;

		if (e == EEXIST && fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISDIR(st.st_mode)) {
			close(pfd);
			return helper_err_set(err, SBX_E_CONFLICT,
			    "/work/%.150s exists already.", rel);
		}
		close(pfd);
		if (e == EEXIST)
			return helper_err_set(err, SBX_E_BAD_REQUEST, "/work/%.150s exists "
			    "and is not a directory; remove it first or pick another "
			    "name.", rel);
		helper_err_errno(err, e, "mkdir");
		return helper_err_name_path(err, rel);
	}
	close(pfd);
	return print_one(ctx, rel, outfd, err);
}

int
helper_fs_move(const struct helper_ctx *ctx, const char *src, const char *dst, int outfd,
    struct helper_err *err)
{
	const char *srel, *drel, *sname, *dname;
	int spfd = -1, dpfd = -1, rc = -1;

	if (helper_path_check(ctx, src, &srel, err) < 0 ||
	    helper_path_check(ctx, dst, &drel, err) < 0)
		return -1;
	if (*srel == '\0' || *drel == '\0')
		return helper_err_set(err, SBX_E_BAD_REQUEST,
		    "/work itself cannot be moved or replaced; move what is in it.");
	if ((spfd = helper_open_parent(ctx, srel, 0, &sname, err)) < 0)
		goto done;
	if ((dpfd = helper_open_parent(ctx, drel, 1, &dname, err)) < 0)
		goto done;
	if (renameat(spfd, sname, dpfd, dname) < 0) {
		int e = errno;

		helper_err_errno(err, e, "rename");
		if (e == ENOENT)
			helper_err_name_path(err, srel);
		else if (e == ENOTEMPTY || e == EEXIST || e == EISDIR || e == ENOTDIR ||
		    e == EINVAL)
			helper_err_set(err, e == EINVAL ? SBX_E_BAD_REQUEST : SBX_E_CONFLICT,
			    "/work/%.120s cannot be moved to /work/%.120s (%s).", srel, drel,
			    strerror(e));
		goto done;
	}
	rc = print_one(ctx, drel, outfd, err);
done:
	if (spfd >= 0)
		close(spfd);
	if (dpfd >= 0)
		close(dpfd);
	return rc;
}

/* Empties directory name of dfd (not following symlinks), then removes it. */
static int
rm_tree(int dfd, const char *name, unsigned depth, struct helper_err *err)
{
	struct dirent *de;
	DIR *d;
	int fd, rc = 0;

	if (depth > SBX_HELPER_DU_DEPTH_MAX)
		return helper_err_set(err, SBX_E_BAD_REQUEST,
		    "The tree is deeper than %d directories; remove its lower part first.",
		    SBX_HELPER_DU_DEPTH_MAX);
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : helper_err_errno(err, errno, "open");
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return helper_err_errno(err, errno, "fdopendir");
	}
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno != 0)
				rc = helper_err_errno(err, errno, "readdir");
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0 || errno == ENOENT)
			continue;
		if (errno != EISDIR && errno != EPERM) {
			rc = helper_err_errno(err, errno, "unlink");
			break;
		}
		if ((rc = rm_tree(dirfd(d), de->d_name, depth + 1, err)) < 0)
			break;
	}
	closedir(d);
	if (rc < 0)
		return -1;
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return helper_err_errno(err, errno, "rmdir");
	return 0;
}

int
helper_fs_remove(const struct helper_ctx *ctx, const char *path, struct helper_err *err)
{
	const char *rel, *name;
	struct stat st;
	int pfd, rc = -1;

	if (helper_path_check(ctx, path, &rel, err) < 0)
		return -1;
	if (*rel == '\0')
		return helper_err_set(err, SBX_E_BAD_REQUEST,
		    "/work itself cannot be removed; remove what is in it.");
	if ((pfd = helper_open_parent(ctx, rel, 0, &name, err)) < 0)
		return -1;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		helper_err_errno(err, errno, "stat");
		helper_err_name_path(err, rel);
	} else if (S_ISDIR(st.st_mode))
		rc = rm_tree(pfd, name, 0, err);
	else if (unlinkat(pfd, name, 0) < 0)
		helper_err_errno(err, errno, "unlink");
	else
		rc = 0;
	close(pfd);
	return rc;
}

/* The walk's state: one output, entries left, the path being walked. */
struct walk {
	struct helper_out out;
	uint64_t left;
	int truncated;
	char rel[SBX_HELPER_PATH_MAX + 1];
};

static int
walk_dir(struct walk *w, int fd, size_t rlen, uint64_t depth, struct helper_err *err)
{
	struct dirent *de;
	struct stat st;
	DIR *d;
	int rc = 0;

	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return helper_err_errno(err, errno, "fdopendir");
	}
	while (rc == 0 && !w->truncated) {
		size_t n;
		int sub;

		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno != 0)
				rc = helper_err_errno(err, errno, "readdir");
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone since readdir */
		n = strlen(de->d_name);
		if (rlen + (rlen > 0) + n > SBX_HELPER_PATH_MAX)
			continue;
		if (w->left == 0) {
			w->truncated = 1;
			break;
		}
		w->left--;
		if (rlen > 0)
			w->rel[rlen] = '/';
		memcpy(w->rel + rlen + (rlen > 0), de->d_name, n + 1);
		put_entry_at(&w->out, dirfd(d), de->d_name, w->rel, &st);
		if (S_ISDIR(st.st_mode) && depth > 1) {
			sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			    O_NONBLOCK | O_CLOEXEC);
			if (sub >= 0)
				rc = walk_dir(w, sub, rlen + (rlen > 0) + n, depth - 1, err);
		}
		w->rel[rlen] = '\0';
	}
	closedir(d);
	return rc;
}

int
helper_fs_walk(const struct helper_ctx *ctx, const char *path, uint64_t depth, uint64_t limit,
    int outfd, struct helper_err *err)
{
	static struct walk w;
	struct stat st;
	const char *rel;
	int fd;

	if (helper_path_check(ctx, path, &rel, err) < 0)
		return -1;
	if (depth == 0 || depth > SBX_HELPER_DU_DEPTH_MAX)
		return helper_err_set(err, SBX_E_BAD_REQUEST, "--depth must be 1 to %d",
		    SBX_HELPER_DU_DEPTH_MAX);
	if ((fd = helper_open(ctx, rel, O_RDONLY | O_NONBLOCK, err)) < 0)
		return -1;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return helper_err_errno(err, errno, "fstat");
	}
	if (!S_ISDIR(st.st_mode)) {
		close(fd);
		return helper_err_set(err, SBX_E_BAD_REQUEST, "/work%s%.150s is not a "
		    "directory; only a directory can be listed.", *rel != '\0' ? "/" : "",
		    rel);
	}
	helper_out_init(&w.out, outfd);
	w.left = limit;
	w.truncated = 0;
	w.rel[0] = '\0';
	if (walk_dir(&w, fd, 0, depth, err) < 0)
		return -1;
	helper_out_str(&w.out, w.truncated ? "{\"end\":true,\"truncated\":true}\n" :
	    "{\"end\":true,\"truncated\":false}\n");
	if (helper_out_flush(&w.out) < 0)
		return helper_err_errno(err, errno, "write");
	return 0;
}
