/* driver_vm_cg.c - makes, finds again (after a broker restart) and removes the vm driver's per-VM cgroups (adr/0069); touches only /sys/fs/cgroup/.../sbx-vm. */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "driver_vm_cg.h"

#define CG "/sys/fs/cgroup"
#define STEM "sbx-vm"

static int
put(const char *dir, const char *file, const char *val)
{
	char path[400];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
		return -1;
	n = write(fd, val, strlen(val));
	close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -1;
}

static int
mk(const char *path)
{
	return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static void
add(struct vm_cg *cg, const char *dir)
{
	snprintf(cg->procs[cg->n], sizeof(cg->procs[0]), "%s/cgroup.procs", dir);
	cg->join[cg->n] = cg->procs[cg->n];
	cg->n++;
	cg->join[cg->n] = NULL;
}

size_t
vm_cg_make(struct vm_cg *cg, const char *name, int64_t mem_bytes,
    int64_t pids, int cpus)
{
	char dir[280], v[64];
	size_t limited = 0;

	memset(cg, 0, sizeof(*cg));
	if (access(CG "/cgroup.controllers", F_OK) == 0) {
		/* v2: one directory, the controllers enabled above it. */
		put(CG, "cgroup.subtree_control", "+memory +pids +cpu");
		if (mk(CG "/" STEM) != 0)
			return 0;
		put(CG "/" STEM, "cgroup.subtree_control", "+memory +pids +cpu");
		snprintf(dir, sizeof(dir), CG "/" STEM "/%s", name);
		if (mk(dir) != 0)
			return 0;
		snprintf(v, sizeof(v), "%lld", (long long)mem_bytes);
		limited += put(dir, "memory.max", v) == 0;
		put(dir, "memory.swap.max", "0");
		snprintf(v, sizeof(v), "%lld", (long long)pids);
		limited += put(dir, "pids.max", v) == 0;
		snprintf(v, sizeof(v), "%d 100000", cpus * 100000);
		limited += put(dir, "cpu.max", v) == 0;
		if (limited > 0)
			add(cg, dir);
		else
			rmdir(dir);
		return limited;
	}
	/* v1: one directory per controller. */
	snprintf(dir, sizeof(dir), CG "/memory/" STEM "/%s", name);
	if (mk(CG "/memory/" STEM) == 0 && mk(dir) == 0) {
		snprintf(v, sizeof(v), "%lld", (long long)mem_bytes);
		if (put(dir, "memory.limit_in_bytes", v) == 0) {
			put(dir, "memory.memsw.limit_in_bytes", v);
			add(cg, dir);
			limited++;
		} else
			rmdir(dir);
	}
	snprintf(dir, sizeof(dir), CG "/pids/" STEM "/%s", name);
	if (mk(CG "/pids/" STEM) == 0 && mk(dir) == 0) {
		snprintf(v, sizeof(v), "%lld", (long long)pids);
		if (put(dir, "pids.max", v) == 0) {
			add(cg, dir);
			limited++;
		} else
			rmdir(dir);
	}
	snprintf(dir, sizeof(dir), CG "/cpu/" STEM "/%s", name);
	if (mk(CG "/cpu/" STEM) == 0 && mk(dir) == 0) {
		snprintf(v, sizeof(v), "%d", cpus * 100000);
		if (put(dir, "cpu.cfs_period_us", "100000") == 0 &&
		    put(dir, "cpu.cfs_quota_us", v) == 0) {
			add(cg, dir);
			limited++;
		} else
			rmdir(dir);
	}
	return limited;
}

size_t
vm_cg_find(struct vm_cg *cg, const char *name)
{
	static const char *const v1[] = { CG "/memory/" STEM, CG "/pids/" STEM,
	    CG "/cpu/" STEM };
	char dir[280];
	size_t i;

	memset(cg, 0, sizeof(*cg));
	if (access(CG "/cgroup.controllers", F_OK) == 0) {
		snprintf(dir, sizeof(dir), CG "/" STEM "/%s", name);
		if (access(dir, F_OK) == 0)
			add(cg, dir);
		return cg->n;
	}
	for (i = 0; i < sizeof(v1) / sizeof(v1[0]); i++) {
		snprintf(dir, sizeof(dir), "%s/%s", v1[i], name);
		if (access(dir, F_OK) == 0)
			add(cg, dir);
	}
	return cg->n;
}

void
vm_cg_remove(const char *name)
{
	static const char *const where[] = { CG "/" STEM, CG "/memory/" STEM,
	    CG "/pids/" STEM, CG "/cpu/" STEM };
	char dir[300];
	size_t i;

	for (i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
		snprintf(dir, sizeof(dir), "%s/%s", where[i], name);
		rmdir(dir);
	}
}
