/* driver_vm.h - the microVM driver (adr/0069): one qemu -M microvm per sandbox, sbx-helper's agent on a virtio-serial port. */
#ifndef DRIVER_VM_H
#define DRIVER_VM_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_driver.h"

/*
 * vm driver configuration. Every pointer is borrowed for the duration of
 * sbx_vm_driver_new() only. Zero or NULL fields take the default in
 * brackets.
 *
 * What it does (adr/0069): a sandbox is a directory STATE/vm/<id>/ holding
 * work.img (a sparse raw ext4 image of work_bytes, /work in the guest),
 * meta (created time and image) and, while it runs, qemu.pid, agent.sock,
 * ctl.sock and console.log. ensure starts qemu-system-x86_64 -M microvm
 * with -nodefaults -no-user-config -sandbox on, no network device, the
 * read-only root disk vm_dir/images/KEY.ext4 of the image (KEY: the image
 * name with every byte outside [A-Za-z0-9._-] as '_'; deploy/vm/build.sh
 * makes it), vm_dir/vmlinuz and vm_dir/initrd.img (init: broker/vm/
 * sbx_vminit.c), and is running once the agent's HELLO arrives on
 * agent.sock. Operations are agent streams running sbx-helper modes as the
 * sandbox user, exactly as in the engine driver's containers. stop writes
 * "poweroff" to ctl.sock (init kills everything, syncs, unmounts /work and
 * powers off) and SIGKILLs qemu after stop_timeout_ms; destroy SIGKILLs it
 * and removes the directory.
 */
struct sbx_vm_config {
	const char *state_dir;        /* STATE above (required) */
	const char *vm_dir;           /* vmlinuz, initrd.img, images/ (required) */
	const char *qemu;             /* qemu binary ["qemu-system-x86_64"] */
	const char *accel;            /* "auto", "kvm" or "tcg" ["auto": kvm when
	                               * /dev/kvm opens and a KVM_CREATE_VM works,
	                               * else tcg; logged] */
	const char *runas;            /* user qemu drops to (-runas) [NULL or "":
	                               * none; ignored unless the broker is root;
	                               * a root broker refuses a name that is no
	                               * user of the host: config_error] */
	const char *default_image;    /* (required) */
	const char *const *images;    /* NULL-terminated allowlist [only default] */
	const char *user;             /* "uid:gid" of the sandbox user ["1000:1000"] */
	int64_t memory_bytes;         /* guest RAM (-m) [512 MiB] */
	int cpus;                     /* guest CPUs (-smp) [1] */
	int64_t pids;                 /* processes and threads the sandbox user
	                               * may have at once inside the guest
	                               * (RLIMIT_NPROC, set by init: sbx.pids=N
	                               * on the kernel command line) [256] */
	int64_t work_bytes;           /* size of a new work.img [1 GiB] */
	int64_t boot_timeout_ms;      /* HELLO within this after qemu starts [120 s] */
	int64_t stop_timeout_ms;      /* clean poweroff within this, else SIGKILL [10 s] */
	int64_t exec_timeout_ms;      /* exec default [30 s] */
	int64_t exec_timeout_max_ms;  /* exec ceiling [10 min] */
	int64_t exec_output_cap;      /* default and ceiling [16 MiB] */
	int64_t file_max_bytes;       /* read/write cap [64 MiB] */
	int64_t file_timeout_ms;      /* read/write/list end within [30 s] */
	int64_t usage_timeout_ms;     /* status_usage: the helper's du walk [5 s] */
	int64_t usage_max_entries;    /* status_usage: entries walked at most [200000] */
	/* egress with an allowlist (adr/0069, amendment "egress") */
	const char *proxy_path;       /* the static sbx-proxy run on the host per
	                               * sandbox with an allowlist (as vm_runas)
	                               * [NULL: no egress; ensure with an
	                               * allowlist is then unsupported] */
	const char *proxy_resolver;   /* its --resolver IP[:PORT] [NULL: the
	                               * host's /etc/resolv.conf] */
	int egress_conns;             /* connections one sandbox may have open
	                               * through its relay at once [64, 1..1024] */
};

/* The sentence for a vm_runas that is no user of the host (a root broker's
 * config_error, a --check problem): the name for both %s. adr/0069's
 * amendment of session 11: qemu gets a user of its own (sbx-vm). */
#define SBX_VM_MSG_NO_RUNAS "vm_runas %s is not a user of this host, and qemu " \
	"must not run as root: create it with useradd --system --no-create-home " \
	"--shell /usr/sbin/nologin %s (deploy/deps.sh does for sbx-vm), or set vm_runas"

/*
 * A vm driver on base (borrowed, must outlive it). Checks that vm_dir holds
 * vmlinuz and initrd.img and, when the caller is root, that cfg->runas is
 * a user of the host; creates STATE/vm (0700). Returns the driver
 * (free with sbx_driver_free: running VMs are left running, their qemu
 * processes are not children that die with the broker), or NULL with err:
 * config_error (a missing file, a missing vm_runas user or a bad value,
 * naming it; nothing made), internal.
 */
struct sbx_driver *sbx_vm_driver_new(struct event_base *base,
    const struct sbx_vm_config *cfg, struct sbx_err *err);

/*
 * The read-only root disk of image under vm_dir: buf gets
 * "VM_DIR/images/KEY.ext4", KEY the image name with every byte outside
 * [A-Za-z0-9._-] as '_' (deploy/vm/build.sh rootfs makes it), cut to len.
 * No error.
 */
void sbx_vm_root_disk(const char *vm_dir, const char *image, char *buf,
    size_t len);

/*
 * The accelerator a driver made now would use for want (vm_accel: "kvm"
 * or "tcg" as given; else "tcg" when the kvm_pvm module is loaded, stock
 * kernels fail under it (adr/0069), "kvm" when /dev/kvm opens read-write,
 * else "tcg"). *why gets a static sentence saying which case. Touches
 * nothing; no error.
 */
const char *sbx_vm_accel(const char *want, const char **why);

/*
 * For a broker that is stopping (d: a vm driver): each VM with no
 * operation in flight leaves the event loop — its agent channel closed
 * (the guest's agent sees the end; init starts another for the next
 * broker), its qemu no longer watched (it keeps running, adopted by the
 * next broker). Returns how many VMs are still busy (a stream, a boot, a
 * stop); call again once the loop has run. No error.
 */
size_t sbx_vm_close_idle(struct sbx_driver *d);

#endif
