/* driver_vm_scan.c - the vm driver's walks over what is on disk and running: every sandbox directory (list_sandboxes) and every qemu and egress proxy process of its state directory (strays killed at start); reads the VM registry, signals only qemu and sbx-proxy processes naming that directory. */
#include <sys/syscall.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver_vm_box.h"
#include "driver_vm_proc.h"
#include "driver_vm_scan.h"
#include "sbx_log.h"
#include "sbx_path.h"

int
vm_list_all(struct vmdrv *d, struct sbx_status **sts, size_t *n)
{
	struct sbx_status *out = NULL, *grown;
	size_t have = 0, cap = 0;
	char dir[512];
	struct dirent *e;
	struct vm *v;
	DIR *dh;

	*sts = NULL;
	*n = 0;
	snprintf(dir, sizeof(dir), "%s/vm", d->cfg.state_dir);
	if ((dh = opendir(dir)) == NULL)
		return 0;
	while ((e = readdir(dh)) != NULL) {
		if (!sbx_id_valid(e->d_name) || (v = vm_get(d, e->d_name)) == NULL)
			continue;
		if (have == cap) {
			cap = cap ? cap * 2 : 16;
			if ((grown = realloc(out, cap * sizeof(*out))) == NULL) {
				free(out);
				closedir(dh);
				return -1;
			}
			out = grown;
		}
		vm_fill_status(v, v->id, &out[have++]);
	}
	closedir(dh);
	*sts = out;
	*n = have;
	return 0;
}

/* 1 when pid is the qemu or the egress proxy of a VM in memory. */
static int
accounted(struct vmdrv *d, pid_t pid)
{
	struct vm *v;

	TAILQ_FOREACH(v, &d->vms, link)
		if ((v->pid == pid && v->proc != NULL) ||
		    (v->proxy != NULL && vm_proc_pid(v->proxy) == pid))
			return 1;
	return 0;
}

int
vm_kill_strays(struct vmdrv *d)
{
	char want[600], proxy[600], buf[8192];
	struct dirent *e;
	int killed = 0, fd, is_proxy;
	ssize_t r, i;
	DIR *dh;
	pid_t pid;

	snprintf(want, sizeof(want), "path=%s/vm/", d->cfg.state_dir);
	/* argv[0] of every egress proxy the driver starts (driver_vm_egress.c) */
	snprintf(proxy, sizeof(proxy), "sbx-proxy:%s/vm/", d->cfg.state_dir);
	if ((dh = opendir("/proc")) == NULL)
		return 0;
	while ((e = readdir(dh)) != NULL) {
		if ((pid = (pid_t)atoi(e->d_name)) <= 1 || pid == getpid() ||
		    accounted(d, pid))
			continue;
		if ((r = vm_proc_cmdline(pid, buf, sizeof(buf))) < 0)
			continue;
		is_proxy = strncmp(buf, proxy, strlen(proxy)) == 0;
		for (i = 0; i < r; i++)
			if (buf[i] == '\0')
				buf[i] = ' ';
		buf[r] = '\0';
		if (!is_proxy && (strstr(buf, "qemu") == NULL || strstr(buf, want) == NULL))
			continue;
		/* Through a pidfd: the pid cannot be another process by then. */
		if ((fd = (int)syscall(SYS_pidfd_open, pid, 0)) >= 0) {
			syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
			close(fd);
			log_warn(is_proxy ? "vm: killed an egress proxy no running VM "
			    "accounts for" : "vm: killed a qemu no sandbox directory accounts for",
			    "pid", e->d_name, NULL);
			killed++;
		}
	}
	closedir(dh);
	return killed;
}

