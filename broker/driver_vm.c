/* driver_vm.c - the microVM driver's vtable (adr/0069): checks every call's id, paths and spec, then hands it to the VM registry (driver_vm_box.c) or the agent streams (driver_vm_io.c); status, health and the handle controls live here. */
#include <sys/stat.h>

#include <errno.h>
#include <pwd.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver_vm.h"
#include "driver_vm_box.h"
#include "driver_vm_egress.h"
#include "driver_vm_io.h"
#include "driver_vm_op.h"
#include "driver_vm_scan.h"
#include "driver_vm_sess.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"

static struct vmdrv *
vd(struct sbx_driver *d)
{
	return (struct vmdrv *)d;
}

static int
check_path(const char *path, struct sbx_err *err)
{
	return sbx_path_check(path, strlen(path), err);
}

static int
allowed(const struct vmdrv *d, const char *image)
{
	size_t i;

	for (i = 0; d->images[i] != NULL; i++)
		if (strcmp(d->images[i], image) == 0)
			return 1;
	return 0;
}

void
sbx_vm_root_disk(const char *vm_dir, const char *image, char *buf, size_t len)
{
	char key[256];
	size_t i;

	snprintf(key, sizeof(key), "%s", image);
	for (i = 0; key[i] != '\0'; i++)
		if (!((key[i] >= 'a' && key[i] <= 'z') || (key[i] >= 'A' && key[i] <= 'Z') ||
		    (key[i] >= '0' && key[i] <= '9') || key[i] == '.' || key[i] == '_' ||
		    key[i] == '-'))
			key[i] = '_';
	snprintf(buf, len, "%s/images/%s.ext4", vm_dir, key);
}

/* ---------------------------------------------------------------- ops */

static struct sbx_op *
vm_ensure_op(struct sbx_driver *drv, const char *id, const struct sbx_spec *spec,
    sbx_status_cb cb, void *arg, struct sbx_err *err)
{
	struct vmdrv *d = vd(drv);
	const char *image = spec->image != NULL ? spec->image : d->cfg.default_image;
	struct vmop *op;
	char disk[600];
	struct sbx_err e;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (!allowed(d, image)) {
		sbx_err_set(err, SBX_E_IMAGE_NOT_ALLOWED, "image %.200s is not allowed", image);
		return NULL;
	}
	if (spec->egress && (spec->egress_allow == NULL ||
	    strcmp(spec->egress_allow, "*") == 0)) {
		sbx_err_set(err, SBX_E_UNSUPPORTED, "this sandbox driver (vm) does not "
		    "support full egress ([\"*\"]): a vm sandbox has no network device; "
		    "its only way out is its egress proxy, so give it an allowlist (adr/0069)");
		return NULL;
	}
	if (spec->egress && d->proxy_exe == NULL) {
		sbx_err_set(err, SBX_E_UNSUPPORTED, "this sandbox driver (vm) has no "
		    "sbx-proxy for egress (beside sbx-helper; adr/0069)");
		return NULL;
	}
	if (spec->memory_bytes > d->cfg.memory_bytes || spec->pids < 0 ||
	    spec->nano_cpus > (int64_t)d->cfg.cpus * 1000000000) {
		sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "a vm sandbox gets at most "
		    "%lld bytes of memory and %d CPUs (its VM's size)",
		    (long long)d->cfg.memory_bytes, d->cfg.cpus);
		return NULL;
	}
	if ((op = vmop_new(d, VMOP_ENSURE, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.status = cb;
	op->arg = arg;
	snprintf(op->image, sizeof(op->image), "%s", image);
	if (spec->egress && (op->allow = strdup(spec->egress_allow)) == NULL) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	sbx_vm_root_disk(d->cfg.vm_dir, image, disk, sizeof(disk));
	if (access(disk, R_OK) != 0) {
		sbx_err_set(&e, SBX_E_RUNTIME, "no VM root disk for image %.200s: "
		    "make it with deploy/vm/build.sh rootfs (adr/0069)", image);
		return vmop_fail_later(op, &e);
	}
	vm_ensure(d, op);
	return &op->op;
}

static void
status_now(struct vmop *op)
{
	struct sbx_status st;

	vm_fill_status(vm_get(op->d, op->id), op->id, &st);
	vmop_status(op, &st);
}

static struct sbx_op *
vm_status_op(struct sbx_driver *drv, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct vmop *op;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if ((op = vmop_new(vd(drv), VMOP_STATUS, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.status = cb;
	op->arg = arg;
	if (vmop_later(op, status_now) != 0) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	return &op->op;
}

static struct sbx_op *
vm_exec_op(struct sbx_driver *drv, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (req->argv == NULL || req->argv[0] == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "argv must not be empty");
		return NULL;
	}
	if (req->cwd != NULL && check_path(req->cwd, err) != 0)
		return NULL;
	return vm_io_exec(vd(drv), id, req, sink, err);
}

static struct sbx_op *
vm_read_op(struct sbx_driver *drv, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (check_path(path, err) != 0)
		return NULL;
	return vm_io_read(vd(drv), id, path, sink, err);
}

static struct sbx_op *
vm_write_op(struct sbx_driver *drv, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (check_path(path, err) != 0)
		return NULL;
	return vm_io_write(vd(drv), id, path, mode, body, cb, arg, err);
}

static struct sbx_op *
vm_write_stream_op(struct sbx_driver *drv, const char *id, const char *path,
    uint32_t mode, struct evbuffer *src, uint64_t len, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (check_path(path, err) != 0)
		return NULL;
	return vm_io_write_stream(vd(drv), id, path, mode, src, len, cb, arg, err);
}

static struct sbx_op *
vm_list_op(struct sbx_driver *drv, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err)
{
	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (check_path(path, err) != 0)
		return NULL;
	return vm_io_list(vd(drv), id, path, page, cb, arg, err);
}

static struct sbx_op *
vm_stop_op(struct sbx_driver *drv, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct vmop *op;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if ((op = vmop_new(vd(drv), VMOP_STOP, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.done = cb;
	op->arg = arg;
	vm_stop(vd(drv), op);
	return &op->op;
}

static struct sbx_op *
vm_destroy_op(struct sbx_driver *drv, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct vmop *op;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if ((op = vmop_new(vd(drv), VMOP_DESTROY, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.done = cb;
	op->arg = arg;
	vm_destroy(vd(drv), op);
	return &op->op;
}

static struct sbx_op *
vm_status_usage_op(struct sbx_driver *drv, const char *id, sbx_status_cb cb,
    void *arg, struct sbx_err *err)
{
	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	return vm_io_usage(vd(drv), id, cb, arg, err);
}

static void
list_now(struct vmop *op)
{
	struct sbx_status *sts;
	struct sbx_err err;
	size_t n;

	if (vm_list_all(op->d, &sts, &n) != 0) {
		sbx_err_oom(&err);
		vmop_fail(op, &err);
		return;
	}
	op->cb.sandboxes(op->arg, NULL, sts, n);
	free(sts);
	vmop_free(op);
}

static struct sbx_op *
vm_list_sandboxes_op(struct sbx_driver *drv, sbx_sandboxes_cb cb, void *arg,
    struct sbx_err *err)
{
	struct vmop *op;

	if ((op = vmop_new(vd(drv), VMOP_LIST_SBX, "")) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.sandboxes = cb;
	op->arg = arg;
	if (vmop_later(op, list_now) != 0) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	return &op->op;
}

/* ok when the boot files are readable and qemu is found. */
static void
health_now(struct vmop *op)
{
	struct vmdrv *d = op->d;
	struct sbx_health h;
	char path[600];

	memset(&h, 0, sizeof(h));
	snprintf(h.runtime, sizeof(h.runtime), "qemu microvm (%s)", d->accel);
	h.ok = 1;
	snprintf(path, sizeof(path), "%s/vmlinuz", d->cfg.vm_dir);
	if (access(path, R_OK) != 0) {
		h.ok = 0;
		snprintf(h.reason, sizeof(h.reason), "%.200s is missing", path);
	}
	snprintf(path, sizeof(path), "%s/initrd.img", d->cfg.vm_dir);
	if (h.ok && access(path, R_OK) != 0) {
		h.ok = 0;
		snprintf(h.reason, sizeof(h.reason), "%.200s is missing", path);
	}
	snprintf(h.status, sizeof(h.status), "%s", h.ok ? "ok" : "degraded");
	op->cb.health(op->arg, NULL, &h);
	vmop_free(op);
}

static struct sbx_op *
vm_health_op(struct sbx_driver *drv, sbx_health_cb cb, void *arg, struct sbx_err *err)
{
	struct vmop *op;

	if ((op = vmop_new(vd(drv), VMOP_HEALTH, "")) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.health = cb;
	op->arg = arg;
	if (vmop_later(op, health_now) != 0) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	return &op->op;
}

static struct sbx_op *
vm_session_op(struct sbx_driver *drv, const char *id, const struct sbx_session_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if (req->kind != SBX_SESSION_PORT && req->exec.cwd != NULL &&
	    check_path(req->exec.cwd, err) != 0)
		return NULL;
	if (req->kind == SBX_SESSION_EXEC &&
	    (req->exec.argv == NULL || req->exec.argv[0] == NULL)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "argv must not be empty");
		return NULL;
	}
	return vm_sess_open(vd(drv), id, req, sink, err);
}

static ssize_t
vm_session_write(struct sbx_driver *drv, struct sbx_op *op, struct evbuffer *src, size_t max)
{
	(void)drv;
	return vm_sess_write((struct vmop *)op, src, max);
}

static size_t
vm_session_room(struct sbx_driver *drv, struct sbx_op *op)
{
	(void)drv;
	return vm_sess_room((struct vmop *)op);
}

static void
vm_session_close_input(struct sbx_driver *drv, struct sbx_op *op)
{
	(void)drv;
	vm_sess_close_input((struct vmop *)op);
}

static int
vm_session_control(struct sbx_driver *drv, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err)
{
	(void)drv;
	return vm_sess_control((struct vmop *)op, c, err);
}

static struct sbx_op *
vm_egress_stats_op(struct sbx_driver *drv, const char *id, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	return vm_egress_stats(vd(drv), id, cb, arg, err);
}

static void
vm_cancel(struct sbx_driver *drv, struct sbx_op *op)
{
	(void)drv;
	vmop_free((struct vmop *)op);
}

static void
vm_pause(struct sbx_driver *drv, struct sbx_op *op)
{
	(void)drv;
	vm_io_pause((struct vmop *)op, 1);
}

static void
vm_resume(struct sbx_driver *drv, struct sbx_op *op)
{
	(void)drv;
	vm_io_pause((struct vmop *)op, 0);
}

static void
vm_free_drv(struct sbx_driver *drv)
{
	struct vmdrv *d = vd(drv);
	size_t i;

	vm_free_all(d);
	for (i = 0; d->images != NULL && d->images[i] != NULL; i++)
		free(d->images[i]);
	free(d->images);
	free((char *)d->cfg.state_dir);
	free((char *)d->cfg.vm_dir);
	free((char *)d->cfg.qemu);
	free((char *)d->cfg.runas);
	free((char *)d->cfg.default_image);
	free((char *)d->cfg.proxy_resolver);
	free(d->proxy_exe);
	free(d);
}

static const struct sbx_driver_ops vm_ops = {
	.name = "vm",
	.ensure = vm_ensure_op,
	.status = vm_status_op,
	.exec = vm_exec_op,
	.read = vm_read_op,
	.write = vm_write_op,
	.write_stream = vm_write_stream_op,
	.list = vm_list_op,
	.stop = vm_stop_op,
	.destroy = vm_destroy_op,
	.list_sandboxes = vm_list_sandboxes_op,
	.health = vm_health_op,
	.status_usage = vm_status_usage_op,
	.egress_stats = vm_egress_stats_op,
	.cancel = vm_cancel,
	.pause = vm_pause,
	.resume = vm_resume,
	.free = vm_free_drv,
	.session = vm_session_op,
	.session_write = vm_session_write,
	.session_room = vm_session_room,
	.session_close_input = vm_session_close_input,
	.session_control = vm_session_control,
};

size_t
sbx_vm_close_idle(struct sbx_driver *d)
{
	return vm_quiesce(vd(d));
}

/* ---------------------------------------------------------------- new */

const char *
sbx_vm_accel(const char *want, const char **why)
{
	int fd;

	if (want != NULL && (strcmp(want, "kvm") == 0 || strcmp(want, "tcg") == 0)) {
		*why = "vm_accel";
		return strcmp(want, "kvm") == 0 ? "kvm" : "tcg";
	}
	if (access("/sys/module/kvm_pvm", F_OK) == 0) {
		*why = "/dev/kvm is PVM (kvm_pvm loaded): stock kernels fail under it";
		return "tcg";
	}
	if ((fd = open("/dev/kvm", O_RDWR | O_CLOEXEC)) >= 0) {
		close(fd);
		*why = "/dev/kvm opens";
		return "kvm";
	}
	*why = "no usable /dev/kvm";
	return "tcg";
}

/* The accelerator (sbx_vm_accel), logged with why. */
static void
pick_accel(struct vmdrv *d, const char *want)
{
	const char *why;

	snprintf(d->accel, sizeof(d->accel), "%s", sbx_vm_accel(want, &why));
	log_info("vm driver accelerator", "accel", d->accel, "why", why, NULL);
}

/* The host's TSC in kHz ("cpu MHz" of /proc/cpuinfo): the guest's TSC
 * runs at it under both accelerators and the kernel wants it said
 * (tsc_early_khz; without it about one TCG boot in two hangs). */
static unsigned long
host_tsc_khz(void)
{
	char line[256];
	double mhz = 0;
	FILE *f;

	if ((f = fopen("/proc/cpuinfo", "re")) == NULL)
		return 1000000;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "cpu MHz : %lf", &mhz) == 1)
			break;
	fclose(f);
	return mhz > 1 ? (unsigned long)(mhz * 1000) : 1000000;
}

static char *
dup_or(const char *s, const char *def)
{
	return strdup(s != NULL && s[0] != '\0' ? s : def);
}

struct sbx_driver *
sbx_vm_driver_new(struct event_base *base, const struct sbx_vm_config *cfg,
    struct sbx_err *err)
{
	struct vmdrv *d;
	char path[600];
	size_t n = 0, i;

	if (cfg->state_dir == NULL || cfg->vm_dir == NULL || cfg->default_image == NULL) {
		sbx_err_set(err, SBX_E_CONFIG, "driver vm needs state_dir, vm_dir and image");
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/vmlinuz", cfg->vm_dir);
	if (access(path, R_OK) != 0) {
		sbx_err_set(err, SBX_E_CONFIG, "vm_dir: %.400s is missing (make it with "
		    "deploy/vm/build.sh boot)", path);
		return NULL;
	}
	/* A root broker never runs qemu as root for want of its user. */
	if (cfg->runas != NULL && cfg->runas[0] != '\0' && geteuid() == 0 &&
	    getpwnam(cfg->runas) == NULL) {
		sbx_err_set(err, SBX_E_CONFIG, SBX_VM_MSG_NO_RUNAS, cfg->runas, cfg->runas);
		return NULL;
	}
	if ((d = calloc(1, sizeof(*d))) == NULL)
		return sbx_err_oom(err), NULL;
	d->base.ops = &vm_ops;
	d->base.base = base;
	TAILQ_INIT(&d->vms);
	d->cfg = *cfg;
	snprintf(path, sizeof(path), "%s/vm", cfg->state_dir);
	d->cfg.state_dir = strdup(cfg->state_dir);
	d->cfg.vm_dir = strdup(cfg->vm_dir);
	d->cfg.qemu = dup_or(cfg->qemu, "qemu-system-x86_64");
	d->cfg.runas = cfg->runas != NULL ? strdup(cfg->runas) : NULL;
	d->cfg.default_image = strdup(cfg->default_image);
	d->cfg.images = NULL;
	d->cfg.accel = NULL;
	d->cfg.user = NULL;
	d->cfg.proxy_path = NULL;
	d->cfg.proxy_resolver = cfg->proxy_resolver != NULL ? strdup(cfg->proxy_resolver) : NULL;
	if (cfg->proxy_path != NULL && cfg->proxy_path[0] != '\0' &&
	    access(cfg->proxy_path, X_OK) == 0)
		d->proxy_exe = strdup(cfg->proxy_path);
	for (n = 0; cfg->images != NULL && cfg->images[n] != NULL; n++)
		;
	d->images = calloc(n + 2, sizeof(char *));
	if (d->images != NULL) {
		d->images[0] = strdup(cfg->default_image);
		for (i = 0; i < n; i++)
			d->images[i + 1] = strdup(cfg->images[i]);
	}
	if (d->cfg.state_dir == NULL || d->cfg.vm_dir == NULL || d->cfg.qemu == NULL ||
	    d->cfg.default_image == NULL || d->images == NULL ||
	    (cfg->runas != NULL && d->cfg.runas == NULL)) {
		vm_free_drv(&d->base);
		return sbx_err_oom(err), NULL;
	}
	if (sscanf(cfg->user != NULL ? cfg->user : "1000:1000", "%u:%u", &d->uid,
	    &d->gid) != 2 || d->uid == 0 || d->gid == 0) {
		vm_free_drv(&d->base);
		sbx_err_set(err, SBX_E_CONFIG, "user must be UID:GID, not root");
		return NULL;
	}
	if (d->cfg.memory_bytes <= 0)
		d->cfg.memory_bytes = 512LL << 20;
	if (d->cfg.cpus <= 0)
		d->cfg.cpus = 1;
	if (d->cfg.pids <= 0)
		d->cfg.pids = 256;
	if (d->cfg.work_bytes <= 0)
		d->cfg.work_bytes = 1LL << 30;
	if (d->cfg.boot_timeout_ms <= 0)
		d->cfg.boot_timeout_ms = 120000;
	if (d->cfg.stop_timeout_ms <= 0)
		d->cfg.stop_timeout_ms = 10000;
	if (d->cfg.exec_timeout_ms <= 0)
		d->cfg.exec_timeout_ms = 30000;
	if (d->cfg.exec_timeout_max_ms <= 0)
		d->cfg.exec_timeout_max_ms = 600000;
	if (d->cfg.exec_output_cap <= 0)
		d->cfg.exec_output_cap = 16LL << 20;
	if (d->cfg.file_max_bytes <= 0)
		d->cfg.file_max_bytes = 64LL << 20;
	if (d->cfg.file_timeout_ms <= 0)
		d->cfg.file_timeout_ms = 30000;
	if (d->cfg.usage_timeout_ms <= 0)
		d->cfg.usage_timeout_ms = 5000;
	if (d->cfg.usage_max_entries <= 0)
		d->cfg.usage_max_entries = 200000;
	if (d->cfg.egress_conns <= 0)
		d->cfg.egress_conns = 64;
	if (d->cfg.egress_conns > 1024) {
		vm_free_drv(&d->base);
		sbx_err_set(err, SBX_E_CONFIG, "vm_egress_conns must be 1..1024");
		return NULL;
	}
	if ((mkdir(d->cfg.state_dir, 0700) != 0 && errno != EEXIST) ||
	    (mkdir(path, 0700) != 0 && errno != EEXIST)) {
		sbx_err_set(err, SBX_E_CONFIG, "cannot make %.400s: %s", path, strerror(errno));
		vm_free_drv(&d->base);
		return NULL;
	}
	if (d->cfg.runas != NULL && (d->cfg.runas[0] == '\0' || geteuid() != 0)) {
		if (d->cfg.runas[0] != '\0')
			log_info("vm driver: vm_runas ignored (the broker is not root): "
			    "qemu runs as the broker's user", NULL);
		free((char *)d->cfg.runas);
		d->cfg.runas = NULL;
	}
	if (d->cfg.runas != NULL) {
		/* The egress proxies run as qemu's user. */
		struct passwd *pw = getpwnam(d->cfg.runas);

		if (pw == NULL || pw->pw_uid == 0) {
			sbx_err_set(err, SBX_E_CONFIG, "vm_runas: no such user (or root): %.100s",
			    d->cfg.runas);
			vm_free_drv(&d->base);
			return NULL;
		}
		d->px_uid = pw->pw_uid;
		d->px_gid = pw->pw_gid;
	}
	pick_accel(d, cfg->accel);
	d->tsc_khz = host_tsc_khz();
	vm_adopt_all(d);
	vm_kill_strays(d);
	return &d->base;
}
