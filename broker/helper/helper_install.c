/* helper_install.c - sbx-helper's install mode: copies its own binary (/proc/self/exe) into a directory, for a Kubernetes init container (adr/0072). Calls helper_util.c only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helper.h"

int
helper_install(const char *dir, struct helper_err *err)
{
	char dst[4096], tmp[4096], buf[65536];
	int in = -1, out = -1, rc = -1;
	ssize_t n;

	if (dir[0] != '/' || strlen(dir) > 4000)
		return helper_err_set(err, "bad_request", "install needs an "
		    "absolute directory");
	snprintf(dst, sizeof(dst), "%s/sbx-helper", dir);
	snprintf(tmp, sizeof(tmp), "%s/.sbx-helper.tmp", dir);
	if ((in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC)) < 0)
		return helper_err_errno(err, errno, "open /proc/self/exe");
	if ((out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC |
	    O_NOFOLLOW, 0555)) < 0) {
		helper_err_errno(err, errno, "create the copy");
		goto done;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		char *p = buf;

		while (n > 0) {
			ssize_t w = write(out, p, (size_t)n);

			if (w < 0) {
				if (errno == EINTR)
					continue;
				helper_err_errno(err, errno, "write the copy");
				goto done;
			}
			p += w;
			n -= w;
		}
	}
	if (n < 0) {
		helper_err_errno(err, errno, "read /proc/self/exe");
		goto done;
	}
	if (fchmod(out, 0555) != 0 || fsync(out) != 0) {
		helper_err_errno(err, errno, "finish the copy");
		goto done;
	}
	if (rename(tmp, dst) != 0) {
		helper_err_errno(err, errno, "rename the copy");
		goto done;
	}
	rc = 0;
done:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	if (rc != 0)
		unlink(tmp);
	return rc;
}
