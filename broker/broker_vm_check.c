/*
 * broker_vm_check.c - sandbox-broker --check for driver = vm (adr/0069):
 * the host's qemu, accelerator, boot files, root disks and qemu's user,
 * looked at without making the driver. It calls the vm driver's two pure
 * helpers (root disk name, accelerator pick) and --check's problem line
 * (broker_check.c); broker.c calls it.
 */
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker_check.h"
#include "broker_vm_check.h"
#include "driver_vm.h"

/* The executable qemu is (a path, or a name found on PATH) into buf, 0;
 * -1 when there is none. */
static int
find_exec(const char *qemu, char *buf, size_t sz)
{
	const char *path = getenv("PATH"), *p, *e;
	size_t n;

	if (strchr(qemu, '/') != NULL) {
		snprintf(buf, sz, "%s", qemu);
		return access(qemu, X_OK) == 0 ? 0 : -1;
	}
	for (p = path != NULL ? path : "/usr/bin:/bin"; *p != '\0'; p = e) {
		e = strchr(p, ':');
		n = e != NULL ? (size_t)(e - p) : strlen(p);
		snprintf(buf, sz, "%.*s/%s", (int)n, n > 0 ? p : ".", qemu);
		if (access(buf, X_OK) == 0)
			return 0;
		if (e == NULL)
			break;
		e++;
	}
	snprintf(buf, sz, "%s", qemu);
	return -1;
}

static void
check_file(int *problems, const char *dir, const char *name)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (access(path, R_OK) == 0)
		printf("boot file: %s: ok\n", path);
	else
		broker_check_problem(problems, "%s is missing: make it with "
		    "deploy/vm/build.sh boot %s build/out/sbx-helper "
		    "build/out/sbx-vminit", path, dir);
}

int
broker_vm_check(const struct broker_config *cfg, const char *const *allow,
    const char *token_problem)
{
	int problems = 0;
	const char *qemu = cfg->vm_qemu != NULL ? cfg->vm_qemu :
	    "qemu-system-x86_64", *why, *accel;
	char path[PATH_MAX + 64];
	size_t i;

	printf("vm driver: vm_dir %s, state_dir %s\n",
	    cfg->vm_dir != NULL ? cfg->vm_dir : "(none)",
	    cfg->state_dir != NULL ? cfg->state_dir : "(none)");
	if (token_problem != NULL)
		broker_check_problem(&problems, "broker token: %s; the broker "
		    "would refuse to start (exit 78)", token_problem);
	if (find_exec(qemu, path, sizeof(path)) == 0)
		printf("qemu: %s: ok\n", path);
	else
		broker_check_problem(&problems, "qemu %s is not an executable%s "
		    "(apt-get install qemu-system-x86, or set vm_qemu)", path,
		    strchr(qemu, '/') != NULL ? "" : " on PATH");
	accel = sbx_vm_accel(cfg->vm_accel, &why);
	printf("accelerator: %s (%s)%s\n", accel, why,
	    strcmp(accel, "tcg") == 0 ? "; TCG boots in seconds and runs "
	    "code several times slower than KVM" : "");
	if (cfg->vm_dir == NULL || cfg->vm_dir[0] == '\0') {
		broker_check_problem(&problems, "vm_dir is not set: the driver "
		    "needs its boot files and root disks (deploy/vm/build.sh)");
	} else {
		check_file(&problems, cfg->vm_dir, "vmlinuz");
		check_file(&problems, cfg->vm_dir, "initrd.img");
		for (i = 0; allow != NULL && allow[i] != NULL; i++) {
			sbx_vm_root_disk(cfg->vm_dir, allow[i], path, sizeof(path));
			if (access(path, R_OK) == 0)
				printf("root disk of %s: %s: ok\n", allow[i], path);
			else
				broker_check_problem(&problems, "no root disk for "
				    "image %s (%s): make it with deploy/vm/build.sh "
				    "rootfs %s %s TAR|unix://SOCKET", allow[i], path,
				    cfg->vm_dir, allow[i]);
		}
	}
	if (cfg->vm_runas != NULL && cfg->vm_runas[0] != '\0') {
		if (geteuid() != 0)
			printf("vm_runas: ignored (the broker is not root): qemu "
			    "runs as the broker's user\n");
		else if (getpwnam(cfg->vm_runas) == NULL)
			broker_check_problem(&problems, SBX_VM_MSG_NO_RUNAS,
			    cfg->vm_runas, cfg->vm_runas);
		else
			printf("vm_runas: %s: ok\n", cfg->vm_runas);
	}
	printf("%d problem%s\n", problems, problems == 1 ? "" : "s");
	return problems > 0 ? BROKER_EXIT_UNAVAILABLE : BROKER_EXIT_OK;
}
