/* helper_fs.c - sbx-helper file modes: read, write (atomic, parents created) and list as JSON. Calls helper_path.c and helper_util.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helper.h"
#include "sbx_msg.h"

#define COPY_CHUNK 65536
#define SYMLINK_DEPTH 8 /* symlinks followed at the last segment of a write */

static char copybuf[COPY_CHUNK];

int
helper_read_file(const struct helper_ctx *ctx, const char *path, uint64_t max, int outfd,
    struct helper_err *err)
{
	const char *rel = NULL;
	struct stat st;
	uint64_t total = 0;
	ssize_t r;
	int fd = -1, rc = -1, use_sendfile = 1;

	if (helper_path_check(ctx, path, &rel, err) < 0)
		goto done;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	fd = helper_open(ctx, rel, O_RDONLY | O_NOCTTY | O_NONBLOCK, err);
	if (fd < 0)
		goto done;
	if (fstat(fd, &st) < 0) {
		helper_err_errno(err, errno, "fstat");
		goto done;
	}
	if (S_ISDIR(st.st_mode)) {
		helper_err_is_dir(err, rel);
		goto done;
	}
	if (!S_ISREG(st.st_mode)) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "/work/%.150s is not a "
		    "regular file (a device, FIFO or socket); only files can be "
		    "read.", rel);
		goto done;
	}
	if ((uint64_t)st.st_size > max) {
		helper_err_set(err, SBX_E_TOO_LARGE, "file is %lld bytes, over the %llu byte limit",
		    (long long)st.st_size, (unsigned long long)max);
		goto done;
	}
	if (fcntl(fd, F_SETFL, 0) < 0) {
		helper_err_errno(err, errno, "fcntl");
		goto done;
	}
	/* The file may grow while we stream: never send more than max. */
	for (;;) {
		size_t want = COPY_CHUNK;

		if (max - total < want)
			want = (size_t)(max - total) + 1;
		if (use_sendfile) {
			r = sendfile(outfd, fd, NULL, want);
			if (r < 0 && (errno == EINVAL || errno == ENOSYS)) {
				use_sendfile = 0;
				continue;
			}
		} else
			r = read(fd, copybuf, want);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			helper_err_errno(err, errno, use_sendfile ? "sendfile" : "read");
			goto done;
		}
		if (r == 0)
			break;
		if ((uint64_t)r > max - total) {
			/* sendfile already sent it; the exit status says it is cut. */
			helper_err_set(err, SBX_E_TOO_LARGE, "file grew over the %llu byte limit",
			    (unsigned long long)max);
			goto done;
		}
		if (!use_sendfile && helper_write_all(outfd, copybuf, (size_t)r) < 0) {
			helper_err_errno(err, errno, "write");
			goto done;
		}
		total += (uint64_t)r;
	}
	rc = 0;
done:
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Parses an octal permission string: 1 to 4 digits, no bits beyond 0777. */
static int
parse_mode(const char *s, mode_t *mode, struct helper_err *err)
{
	unsigned long v = 0;
	size_t i, n;

	n = s != NULL ? strlen(s) : 0;
	if (n == 0 || n > 4)
		return helper_err_set(err, SBX_E_BAD_REQUEST, "mode must be 1 to 4 octal digits");
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return helper_err_set(err, SBX_E_BAD_REQUEST, "mode must be octal");
		v = v * 8 + (unsigned long)(s[i] - '0');
	}
	if (v & ~0777UL)
		return helper_err_set(err, SBX_E_BAD_REQUEST,
		    "mode may not set setuid, setgid or sticky bits");
	*mode = (mode_t)v;
	return 0;
}

/*
 * The last segment of a write target is a symlink: follow it beneath the
 * root (an escape is refused) and rewrite *relp to the target's path.
 * Needs openat2 and /proc (the kernel's name of the resolved descriptor);
 * the result is checked and resolved again by the caller, so a racing
 * rename can at worst make the write fail.
 */
static int
follow_last_symlink(const struct helper_ctx *ctx, const char **relp, char *buf, size_t bufsz,
    struct helper_err *err)
{
	char proc[64];
	ssize_t n;
	int fd = -1, rc = -1;

	if (ctx->no_openat2) {
		helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
		    "path is a symlink (refused without openat2)");
		goto done;
	}
	fd = helper_open(ctx, *relp, O_PATH, err);
	if (fd < 0) {
		if (err->errnum == ENOENT)
			helper_err_set(err, SBX_E_NOT_FOUND, "path is a symlink to nothing");
		goto done;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, buf, bufsz - 1);
	if (n < 0 || (size_t)n >= bufsz - 1) {
		helper_err_set(err, SBX_E_INTERNAL, "cannot name the symlink's target (/proc)");
		goto done;
	}
	buf[n] = '\0';
	if (helper_path_check(ctx, buf, relp, err) < 0)
		goto done;
	rc = 0;
done:
	if (fd >= 0)
		close(fd);
	return rc;
}

/*
 * After a failed write, reads and drops the rest of the input (at most
 * left + 1 bytes): the caller's upload then completes, and the runtime's
 * exec stream does not lose our error line when we exit with input still
 * unread (seen on podman 4.3: "connection reset by peer", stderr lost).
 */
static void
drain(int infd, uint64_t left)
{
	ssize_t r;
	size_t want;

	for (;;) {
		want = left < COPY_CHUNK ? (size_t)left + 1 : COPY_CHUNK;
		r = read(infd, copybuf, want);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || (uint64_t)r > left)
			return;
		left -= (uint64_t)r;
	}
}

/* Creates an empty 0600 temporary file next to name in pfd; its name goes to tmp. */
static int
create_temp(int pfd, char *tmp, size_t tmpsz, struct helper_err *err)
{
	unsigned char rnd[8];
	int fd, tries;

	for (tries = 0; tries < 16; tries++) {
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return helper_err_errno(err, errno, "getrandom");
		snprintf(tmp, tmpsz, ".sbx-helper-%02x%02x%02x%02x%02x%02x%02x%02x.tmp", rnd[0],
		    rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
		fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return helper_err_errno(err, errno, "create temporary file");
	}
	return helper_err_set(err, SBX_E_INTERNAL, "cannot pick a temporary file name");
}

int
helper_write_file(const struct helper_ctx *ctx, const char *path, const char *modestr,
    uint64_t max, uint64_t size, int infd, struct helper_err *err)
{
	char target[SBX_HELPER_PATH_MAX + 1];
	char tmp[64];
	const char *rel = NULL, *name = NULL;
	struct stat st;
	uint64_t total = 0;
	mode_t mode = 0, oldmask;
	ssize_t r;
	int pfd = -1, tfd = -1, dfd = -1, rc = -1, depth, have_tmp = 0;

	oldmask = umask(022);
	if (parse_mode(modestr, &mode, err) < 0)
		goto done;
	if (helper_path_check(ctx, path, &rel, err) < 0)
		goto done;
	for (depth = 0;; depth++) {
		if (*rel == '\0') {
			helper_err_is_dir(err, rel);
			goto done;
		}
		if ((pfd = helper_open_parent(ctx, rel, 1, &name, err)) < 0)
			goto done;
		if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				break;
			helper_err_errno(err, errno, "stat");
			goto done;
		}
		if (S_ISDIR(st.st_mode)) {
			helper_err_is_dir(err, rel);
			goto done;
		}
		if (!S_ISLNK(st.st_mode))
			break;
		if (depth == SYMLINK_DEPTH) {
			helper_err_set(err, SBX_E_BAD_REQUEST, "too many levels of symbolic links");
			goto done;
		}
		if (follow_last_symlink(ctx, &rel, target, sizeof(target), err) < 0)
			goto done;
		close(pfd);
		pfd = -1;
	}
	if ((tfd = create_temp(pfd, tmp, sizeof(tmp), err)) < 0)
		goto done;
	have_tmp = 1;
	for (;;) {
		size_t want = COPY_CHUNK;

		/* Read at most max + 1 bytes: enough to know it is too large. */
		if (max - total < want)
			want = (size_t)(max - total) + 1;
		r = read(infd, copybuf, want);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			helper_err_errno(err, errno, "read stdin");
			goto done;
		}
		if (r == 0)
			break;
		if (size != UINT64_MAX && (uint64_t)r > size - total) {
			helper_err_set(err, SBX_E_BAD_REQUEST, "input longer than the "
			    "%llu bytes announced", (unsigned long long)size);
			goto done;
		}
		if ((uint64_t)r > max - total) {
			helper_err_set(err, SBX_E_TOO_LARGE, "input over the %llu byte limit",
			    (unsigned long long)max);
			goto done;
		}
		if (helper_write_all(tfd, copybuf, (size_t)r) < 0) {
			helper_err_errno(err, errno, "write");
			goto done;
		}
		total += (uint64_t)r;
	}
	/* A body cut short (the client left, the stream broke) never replaces
	 * the file: the temporary goes (adr/0018). */
	if (size != UINT64_MAX && total != size) {
		helper_err_set(err, SBX_E_CANCELLED, "input ended after %llu of the "
		    "%llu bytes announced", (unsigned long long)total,
		    (unsigned long long)size);
		goto done;
	}
	if (fsync(tfd) < 0) {
		helper_err_errno(err, errno, "fsync");
		goto done;
	}
	if (fchmod(tfd, mode) < 0) {
		helper_err_errno(err, errno, "fchmod");
		goto done;
	}
	if (close(tfd) < 0) {
		tfd = -1;
		helper_err_errno(err, errno, "close");
		goto done;
	}
	tfd = -1;
	if (renameat(pfd, tmp, pfd, name) < 0) {
		helper_err_errno(err, errno, "rename");
		goto done;
	}
	have_tmp = 0;
	/* Make the new directory entry durable too; a failure here is not fatal. */
	if ((dfd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
		(void)fsync(dfd);
	rc = 0;
done:
	if (rc < 0 && total <= max)
		drain(infd, max - total);
	if (tfd >= 0)
		close(tfd);
	if (have_tmp)
		(void)unlinkat(pfd, tmp, 0);
	if (dfd >= 0)
		close(dfd);
	if (pfd >= 0)
		close(pfd);
	umask(oldmask);
	return rc;
}

static const char *
type_name(mode_t m)
{
	if (S_ISREG(m))
		return "file";
	if (S_ISDIR(m))
		return "dir";
	if (S_ISLNK(m))
		return "symlink";
	return "other";
}

/* A max-heap of the smallest names seen (bytewise), at most cap of them. */
struct name_heap {
	char **v;
	size_t n, cap;
};

static void
heap_sift_down(struct name_heap *h, size_t i)
{
	size_t l, r, m;
	char *t;

	for (;;) {
		l = 2 * i + 1;
		r = l + 1;
		m = i;
		if (l < h->n && strcmp(h->v[l], h->v[m]) > 0)
			m = l;
		if (r < h->n && strcmp(h->v[r], h->v[m]) > 0)
			m = r;
		if (m == i)
			return;
		t = h->v[i];
		h->v[i] = h->v[m];
		h->v[m] = t;
		i = m;
	}
}

/* Offers name; keeps it when it is among the cap smallest. -1: no memory. */
static int
heap_offer(struct name_heap *h, const char *name)
{
	size_t i, p;
	char *t, *c;

	if (h->cap == 0)
		return 0;
	if (h->n == h->cap) {
		if (strcmp(name, h->v[0]) >= 0)
			return 0;
		if ((c = strdup(name)) == NULL)
			return -1;
		free(h->v[0]);
		h->v[0] = c;
		heap_sift_down(h, 0);
		return 0;
	}
	if ((c = strdup(name)) == NULL)
		return -1;
	i = h->n++;
	h->v[i] = c;
	while (i > 0) {
		p = (i - 1) / 2;
		if (strcmp(h->v[p], h->v[i]) >= 0)
			break;
		t = h->v[p];
		h->v[p] = h->v[i];
		h->v[i] = t;
		i = p;
	}
	return 0;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
helper_list_dir(const struct helper_ctx *ctx, const char *path, const char *after,
    uint64_t limit, int outfd, struct helper_err *err)
{
	static struct helper_out out;
	struct helper_out *o = &out;
	struct name_heap h = { NULL, 0, 0 };
	const char *rel = NULL;
	struct dirent *de;
	struct stat st;
	DIR *d = NULL;
	uint64_t more = 0;
	size_t nlen, i;
	int fd = -1, rc = -1;

	helper_out_init(o, outfd);
	if (limit == 0 || limit > SBX_HELPER_LIST_MAX) {
		helper_err_set(err, SBX_E_BAD_REQUEST, "--limit must be 1 to %d",
		    SBX_HELPER_LIST_MAX);
		goto done;
	}
	h.cap = (size_t)limit;
	if ((h.v = calloc(h.cap, sizeof(*h.v))) == NULL) {
		helper_err_set(err, SBX_E_INTERNAL, SBX_MSG_OOM);
		goto done;
	}
	if (helper_path_check(ctx, path, &rel, err) < 0)
		goto done;
	fd = helper_open(ctx, rel, O_RDONLY | O_DIRECTORY | O_NONBLOCK, err);
	if (fd < 0) {
		if (err->errnum == ENOTDIR) {
			/* The last segment exists but is no directory. */
			int probe = helper_open(ctx, rel, O_PATH, NULL);

			if (probe >= 0) {
				close(probe);
				helper_err_set(err, SBX_E_BAD_REQUEST, "/work/%.150s is "
				    "a file, not a directory; read it, or list a "
				    "directory.", rel);
			}
		}
		goto done;
	}
	if ((d = fdopendir(fd)) == NULL) {
		helper_err_errno(err, errno, "fdopendir");
		goto done;
	}
	fd = -1;
	/* Names only first: the directory may hold millions; only the
	 * page's entries are stat'ed and printed (memory: limit names). */
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			if (errno != 0) {
				helper_err_errno(err, errno, "readdir");
				goto done;
			}
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (after != NULL && strcmp(de->d_name, after) <= 0)
			continue;
		more++;
		if (heap_offer(&h, de->d_name) < 0) {
			helper_err_set(err, SBX_E_INTERNAL, SBX_MSG_OOM);
			goto done;
		}
	}
	qsort(h.v, h.n, sizeof(*h.v), name_cmp);
	for (i = 0; i < h.n; i++) {
		if (fstatat(dirfd(d), h.v[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT) /* removed since readdir */
				continue;
			helper_err_errno(err, errno, "stat");
			goto done;
		}
		nlen = strlen(h.v[i]);
		helper_out_str(o, "{\"name\":");
		if (!helper_out_json_str(o, h.v[i], nlen)) {
			helper_out_str(o, ",\"name_b64\":");
			helper_out_json_b64(o, (const unsigned char *)h.v[i], nlen);
		}
		helper_out_str(o, ",\"type\":\"");
		helper_out_str(o, type_name(st.st_mode));
		helper_out_str(o, "\",\"size\":");
		helper_out_i64(o, (int64_t)st.st_size);
		helper_out_str(o, ",\"mode\":");
		helper_out_u64(o, (uint64_t)(st.st_mode & 07777));
		helper_out_str(o, ",\"mtime\":");
		helper_out_i64(o, (int64_t)st.st_mtim.tv_sec);
		helper_out_str(o, "}\n");
	}
	helper_out_str(o, more > limit ? "{\"end\":true,\"truncated\":true}\n" :
	    "{\"end\":true,\"truncated\":false}\n");
	if (helper_out_flush(o) < 0) {
		helper_err_errno(err, errno, "write");
		goto done;
	}
	rc = 0;
done:
	for (i = 0; i < h.n; i++)
		free(h.v[i]);
	free(h.v);
	if (d != NULL)
		closedir(d);
	if (fd >= 0)
		close(fd);
	return rc;
}
