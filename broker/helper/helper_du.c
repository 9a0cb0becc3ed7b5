/* helper_du.c - sbx-helper du mode: how much /work holds, walked beneath the root, bounded in entries and time. Calls helper_util.c only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "helper.h"

#define DU_CLOCK_EVERY 256 /* entries between two looks at the clock */

/* Opens name in dir as a directory without following a symlink, and only
 * when it is still the directory fstatat saw (same st_dev and st_ino). */
static DIR *
open_sub(int dfd, const char *name, const struct stat *seen)
{
	struct stat st;
	DIR *d;
	int fd;

	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || st.st_dev != seen->st_dev || st.st_ino != seen->st_ino) {
		close(fd);
		errno = ESTALE;
		return NULL;
	}
	if ((d = fdopendir(fd)) == NULL)
		close(fd);
	return d;
}

int
helper_du(const struct helper_ctx *ctx, uint64_t max_entries, uint64_t timeout_ms, int outfd,
    struct helper_err *err)
{
	static DIR *stack[SBX_HELPER_DU_DEPTH_MAX];
	static struct helper_out out;
	struct helper_out *o = &out;
	struct helper_du_result r;
	const char *reason = NULL;
	struct dirent *de;
	struct stat st, rst;
	uint64_t t0, deadline = 0;
	size_t depth = 0;
	int fd = -1, rc = -1;
	/* The answer's members, in order (the first opens the object). */
	const struct { const char *key; const uint64_t *v; } fields[] = {
		{ "{\"bytes\":", &r.bytes },
		{ ",\"apparent_bytes\":", &r.apparent_bytes },
		{ ",\"files\":", &r.files },
		{ ",\"dirs\":", &r.dirs },
		{ ",\"entries\":", &r.entries },
		{ ",\"skipped\":", &r.skipped },
		{ ",\"elapsed_ms\":", &r.elapsed_ms },
	};
	size_t i;

	/* The sandbox's own code runs as the same user: keep it out of /proc/PID. */
	(void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	memset(&r, 0, sizeof(r));
	helper_out_init(o, outfd);
	t0 = helper_mono_ms();
	if (timeout_ms > 0)
		deadline = t0 + timeout_ms;
	fd = openat(ctx->rootfd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &rst) < 0) {
		helper_err_errno(err, errno, "open /work");
		goto done;
	}
	r.bytes = (uint64_t)rst.st_blocks * 512;
	if ((stack[0] = fdopendir(fd)) == NULL) {
		helper_err_errno(err, errno, "fdopendir");
		goto done;
	}
	fd = -1;
	depth = 1;
	while (depth > 0 && reason == NULL) {
		errno = 0;
		if ((de = readdir(stack[depth - 1])) == NULL) {
			if (errno != 0)
				reason = "unreadable";
			closedir(stack[--depth]);
			continue;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (r.entries >= max_entries) {
			reason = "max_entries";
			break;
		}
		if (deadline != 0 && r.entries % DU_CLOCK_EVERY == 0 && helper_mono_ms() >= deadline) {
			reason = "timeout";
			break;
		}
		if (fstatat(dirfd(stack[depth - 1]), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT) /* ENOENT: removed since readdir */
				r.skipped++;
			continue;
		}
		/* Another filesystem (a mount point) is not /work's to count. */
		if (st.st_dev != rst.st_dev) {
			r.skipped++;
			continue;
		}
		r.entries++;
		r.bytes += (uint64_t)st.st_blocks * 512;
		if (S_ISREG(st.st_mode)) {
			r.files++;
			r.apparent_bytes += (uint64_t)st.st_size;
		} else if (S_ISDIR(st.st_mode)) {
			r.dirs++;
			if (depth == SBX_HELPER_DU_DEPTH_MAX) {
				r.skipped++;
				continue;
			}
			if ((stack[depth] = open_sub(dirfd(stack[depth - 1]), de->d_name,
			    &st)) == NULL) {
				if (errno != ENOENT)
					r.skipped++;
				continue;
			}
			depth++;
		}
	}
	while (depth > 0)
		closedir(stack[--depth]);
	if (reason == NULL && r.skipped > 0)
		reason = "unreadable";
	r.elapsed_ms = helper_mono_ms() - t0;
	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		helper_out_str(o, fields[i].key);
		helper_out_u64(o, *fields[i].v);
	}
	if (reason != NULL) {
		helper_out_str(o, ",\"partial\":true,\"partial_reason\":\"");
		helper_out_str(o, reason);
		helper_out_str(o, "\"}\n");
	} else
		helper_out_str(o, ",\"partial\":false}\n");
	if (helper_out_flush(o) < 0) {
		helper_err_errno(err, errno, "write");
		goto done;
	}
	rc = 0;
done:
	if (fd >= 0)
		close(fd);
	return rc;
}
