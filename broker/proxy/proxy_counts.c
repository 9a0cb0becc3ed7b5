/* proxy_counts.c - the egress proxy's allowed/denied totals kept in a file of the socket volume, so they survive its restarts and replacements (adr/0027). Calls libc only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "proxy_counts.h"

int
proxy_counts_open(const char *path, unsigned long *allowed, unsigned long *denied)
{
	int fd;

	*allowed = *denied = 0;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -1;
	return proxy_counts_read(fd, allowed, denied);
}

int
proxy_counts_read(int fd, unsigned long *allowed, unsigned long *denied)
{
	char b[PROXY_COUNTS_LEN + 1], *end;
	unsigned long a, d;
	ssize_t n;

	*allowed = *denied = 0;
	n = pread(fd, b, PROXY_COUNTS_LEN, 0);
	if (n != PROXY_COUNTS_LEN || b[PROXY_COUNTS_LEN - 1] != '\n' || b[20] != ' ')
		return fd;
	b[PROXY_COUNTS_LEN - 1] = '\0';
	b[20] = '\0';
	errno = 0;
	a = strtoul(b, &end, 10);
	if (errno != 0 || *end != '\0')
		return fd;
	d = strtoul(b + 21, &end, 10);
	if (errno != 0 || *end != '\0')
		return fd;
	*allowed = a;
	*denied = d;
	return fd;
}

int
proxy_counts_save(int fd, unsigned long allowed, unsigned long denied)
{
	char b[PROXY_COUNTS_LEN + 1];

	if (fd < 0)
		return 0;
	snprintf(b, sizeof(b), "%020lu %020lu\n", allowed, denied);
	return pwrite(fd, b, PROXY_COUNTS_LEN, 0) == PROXY_COUNTS_LEN ? 0 : -1;
}
