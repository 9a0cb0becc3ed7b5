/* driver_vm_box.c - the vm driver's VMs (adr/0069): each sandbox's directory under STATE/vm, its qemu process and agent channel, boot, poweroff, destroy and adoption; touches only STATE/vm and processes it started or found in its pidfiles. */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver_vm_box.h"
#include "driver_vm_egress.h"
#include "driver_vm_op.h"
#include "driver_vm_proc.h"
#include "sbx_log.h"
#include "sbx_msg.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_time.h"

#define POLL_MS 20                 /* boot: look for agent.sock this often */
#define VM_TB_MIB "64"             /* TCG translation cache (qemu's default: 1 GiB) */
#define VM_OVERHEAD_BYTES (256LL << 20) /* qemu beside the guest's RAM: binary, cache, I/O */
#define ASK_AGAIN_MS 3000          /* no "ready" this long after "agent": ask again */
#define VM_PING_MS 5000            /* agent keepalive: a dead agent is noticed */
#define VM_QEMU_PIDS 256           /* qemu's own threads (its I/O pool has up to 64) */

static void boot(struct vm *v);
static void on_qemu_exit(void *arg, int status);
static void remove_dir(struct vm *v);
static void vm_free(struct vm *v);

static void
vpath(const struct vm *v, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", v->dir, name);
}

static void
dir_of(const struct vmdrv *d, const char *id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/vm/%s", d->cfg.state_dir, id);
}

static struct vm *
vm_find(struct vmdrv *d, const char *id)
{
	struct vm *v;

	TAILQ_FOREACH(v, &d->vms, link)
		if (strcmp(v->id, id) == 0)
			return v;
	return NULL;
}

static struct vm *
vm_new(struct vmdrv *d, const char *id)
{
	struct vm *v = calloc(1, sizeof(*v));

	if (v == NULL)
		return NULL;
	v->d = d;
	v->ctl = -1;
	snprintf(v->id, sizeof(v->id), "%s", id);
	dir_of(d, id, v->dir, sizeof(v->dir));
	TAILQ_INIT(&v->waiters);
	TAILQ_INSERT_TAIL(&d->vms, v, link);
	return v;
}

/* meta: "CREATED_MS IMAGE\n". */
static int
meta_read(struct vm *v)
{
	char path[600], line[400];
	long long ms;
	FILE *f;
	int ok = -1;

	vpath(v, "meta", path, sizeof(path));
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	if (fgets(line, sizeof(line), f) != NULL &&
	    sscanf(line, "%lld %255s", &ms, v->image) == 2) {
		v->created_ms = ms;
		ok = 0;
	}
	fclose(f);
	return ok;
}

static int
meta_write(struct vm *v)
{
	char path[600], tmp[600];
	FILE *f;

	vpath(v, "meta", path, sizeof(path));
	vpath(v, "meta.tmp", tmp, sizeof(tmp));
	if ((f = fopen(tmp, "we")) == NULL)
		return -1;
	fprintf(f, "%lld %s\n", (long long)v->created_ms, v->image);
	if (fclose(f) != 0 || rename(tmp, path) != 0)
		return -1;
	return 0;
}

struct vm *
vm_get(struct vmdrv *d, const char *id)
{
	struct vm *v;
	char dir[512];
	struct stat sb;

	if ((v = vm_find(d, id)) != NULL)
		return v;
	dir_of(d, id, dir, sizeof(dir));
	if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
		return NULL;
	if ((v = vm_new(d, id)) == NULL)
		return NULL;
	if (meta_read(v) != 0)
		v->created_ms = (int64_t)sb.st_mtime * 1000;
	vm_egress_load(v);
	return v;
}

void
vm_fill_status(const struct vm *v, const char *id, struct sbx_status *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->id, sizeof(st->id), "%s", id);
	if (v == NULL) {
		st->state = SBX_STATE_ABSENT;
		return;
	}
	/* An adopted VM runs while its agent is connected again: the broker's
	 * recovery records it running, as the engine's adopted containers. */
	st->state = v->state == VM_RUNNING || (v->state == VM_BOOTING &&
	    v->adopted) ? SBX_STATE_RUNNING : SBX_STATE_STOPPED;
	snprintf(st->image, sizeof(st->image), "%s", v->image);
	st->created_at_ms = v->created_ms;
	st->egress = v->allow != NULL;   /* by allowlist: the only egress a VM has */
	snprintf(st->stop_reason, sizeof(st->stop_reason), "%s",
	    st->state == SBX_STATE_RUNNING ? "" : v->stop_reason);
	/* Stable for the directory's life, as a container id is for a container. */
	snprintf(st->container_id, sizeof(st->container_id), "vm-%s-%lld", id,
	    (long long)v->created_ms);
}

/* ---------------------------------------------------------------- waiters */

static void
wait_on(struct vm *v, struct vmop *op)
{
	op->waiting = v;
	TAILQ_INSERT_TAIL(&v->waiters, op, wlink);
}

/* Answers the waiters of kind with err (NULL: success). */
static void
answer(struct vm *v, enum vmop_kind kind, const struct sbx_err *err)
{
	struct vmop *op, *next;
	struct sbx_status st;

	for (op = TAILQ_FIRST(&v->waiters); op != NULL; op = next) {
		next = TAILQ_NEXT(op, wlink);
		if (op->kind != kind)
			continue;
		TAILQ_REMOVE(&v->waiters, op, wlink);
		op->waiting = NULL;
		if (err != NULL)
			vmop_fail(op, err);
		else if (kind == VMOP_ENSURE) {
			vm_fill_status(v, v->id, &st);
			vmop_status(op, &st);
		} else
			vmop_done(op);
	}
}

static int
has_waiter(const struct vm *v, enum vmop_kind kind)
{
	const struct vmop *op;

	TAILQ_FOREACH(op, &v->waiters, wlink)
		if (op->kind == kind)
			return 1;
	return 0;
}

/* ---------------------------------------------------------------- channel */

static void
drop_channel(struct vm *v)
{
	if (v->ch != NULL) {
		sbx_agent_chan_free(v->ch);
		v->ch = NULL;
	}
	if (v->bev != NULL) {
		bufferevent_free(v->bev);
		v->bev = NULL;
	}
	if (v->ctl_ev != NULL) {
		event_free(v->ctl_ev);
		v->ctl_ev = NULL;
	}
	if (v->ctl >= 0) {
		close(v->ctl);
		v->ctl = -1;
	}
	v->awaiting = 0;
}

static void
on_ready(void *arg, const struct sbx_agent_hello *hello)
{
	struct vm *v = arg;

	(void)hello;
	if (v->state != VM_BOOTING)
		return;
	v->state = VM_RUNNING;
	v->adopted = 0;
	v->stop_reason[0] = '\0';
	event_del(v->timer);
	{
		char ms[24];

		snprintf(ms, sizeof(ms), "%lld", (long long)(sbx_mono_ms() -
		    (v->deadline_ms - v->d->cfg.boot_timeout_ms)));
		log_info("vm sandbox running", "id", v->id, "boot_ms", ms, NULL);
	}
	vm_egress_link(v);
	answer(v, VMOP_ENSURE, NULL);
}

static void
arm(struct vm *v, int64_t ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(v->timer, &tv);
}

/* The agent's channel ended while qemu runs: the agent died or the
 * connection broke. init starts a new agent; connect again (a new HELLO
 * comes on the new connection). Streams open on it have had their error. */
static void
on_closed(void *arg, const struct sbx_err *err)
{
	struct vm *v = arg;

	log_warn("vm agent channel ended", "id", v->id, "reason",
	    err != NULL ? err->message : "", NULL);
	if (v->bev != NULL) {
		bufferevent_free(v->bev);
		v->bev = NULL;
	}
	/* The channel itself is freed later: we are inside its callback. */
	v->awaiting = 0;
	if (v->state == VM_RUNNING) {
		v->state = VM_BOOTING;
		v->deadline_ms = sbx_mono_ms() + v->d->cfg.boot_timeout_ms;
	}
	if (v->state == VM_BOOTING)
		arm(v, POLL_MS);   /* ask init for a fresh agent */
}

static int
connect_unix(const char *path)
{
	struct sockaddr_un sa;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	strcpy(sa.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* ctl said "ready": the old agent is gone; connect agent.sock, and init
 * starts a fresh agent whose HELLO is the first byte on it. */
static int
connect_agent(struct vm *v)
{
	struct sbx_agent_chan_cbs cbs = { on_ready, on_closed, v };
	char path[600];
	int fd;

	if (v->ch != NULL) {
		sbx_agent_chan_free(v->ch);
		v->ch = NULL;
	}
	if (v->bev != NULL) {
		bufferevent_free(v->bev);
		v->bev = NULL;
	}
	vpath(v, "agent.sock", path, sizeof(path));
	if ((fd = connect_unix(path)) < 0)
		return -1;
	evutil_make_socket_nonblocking(fd);
	if ((v->bev = bufferevent_socket_new(v->d->base.base, fd,
	    BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		close(fd);
		return -1;
	}
	if ((v->ch = sbx_agent_chan_new(v->d->base.base, &cbs)) == NULL) {
		bufferevent_free(v->bev);
		v->bev = NULL;
		return -1;
	}
	sbx_agent_chan_attach_bev(v->ch, v->bev);
	sbx_agent_chan_keepalive(v->ch, VM_PING_MS);
	return 0;
}

static void
on_ctl(evutil_socket_t fd, short what, void *arg)
{
	struct vm *v = arg;
	char buf[64];
	ssize_t r;

	(void)what;
	r = read(fd, buf, sizeof(buf) - 1);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r <= 0) {   /* qemu went (its exit is heard through the pidfd) */
		event_free(v->ctl_ev);
		v->ctl_ev = NULL;
		close(v->ctl);
		v->ctl = -1;
		v->awaiting = 0;
		return;
	}
	buf[r] = '\0';
	if (strstr(buf, "ready") != NULL && v->awaiting) {
		v->awaiting = 0;
		if (connect_agent(v) != 0)
			arm(v, POLL_MS);   /* on_timer asks again */
	}
}

/*
 * Asks init for a fresh agent (adr/0069): connects ctl.sock when needed and
 * writes "agent"; init kills the agent it runs, answers "ready", and starts
 * a new one once agent.sock has a client (on_ctl connects it). So the
 * first bytes on a new agent connection are always a new agent's HELLO,
 * whatever an earlier agent or broker left behind. 0, or -1 (qemu has not
 * made its sockets yet: try again).
 */
static int
try_connect(struct vm *v)
{
	char path[600];

	if (v->ctl < 0) {
		vpath(v, "ctl.sock", path, sizeof(path));
		if ((v->ctl = connect_unix(path)) < 0)
			return -1;
		evutil_make_socket_nonblocking(v->ctl);
		if ((v->ctl_ev = event_new(v->d->base.base, v->ctl, EV_READ | EV_PERSIST,
		    on_ctl, v)) == NULL || event_add(v->ctl_ev, NULL) != 0) {
			if (v->ctl_ev != NULL)
				event_free(v->ctl_ev);
			v->ctl_ev = NULL;
			close(v->ctl);
			v->ctl = -1;
			return -1;
		}
	}
	if (write(v->ctl, "agent\n", 6) != 6)
		return -1;
	v->awaiting = 1;
	return 0;
}

/* ---------------------------------------------------------------- boot */

static void
kill_qemu(struct vm *v, int sig)
{
	if (v->proc != NULL)
		vm_proc_kill(v->proc, sig);
}

/* Asks init for a clean poweroff (filesystems synced) with stop_timeout
 * before on_timer kills qemu; without a control port yet there is nothing
 * to sync: killed at once. */
static void
power_off(struct vmdrv *d, struct vm *v)
{
	if (v->ctl >= 0 && write(v->ctl, "poweroff\n", 9) == 9) {
		struct timeval tv = { d->cfg.stop_timeout_ms / 1000,
		    (d->cfg.stop_timeout_ms % 1000) * 1000 };

		evtimer_add(v->timer, &tv);
	} else
		kill_qemu(v, SIGKILL);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct vm *v = arg;
	struct sbx_err err;

	(void)fd;
	(void)what;
	if (v->state == VM_STOPPING) {
		log_warn("vm did not power off in time: killed", "id", v->id, NULL);
		kill_qemu(v, SIGKILL);
		return;
	}
	if (v->state != VM_BOOTING)
		return;
	if (sbx_mono_ms() > v->deadline_ms) {
		sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: the VM's agent did not "
		    "answer within %lld ms (see %s/console.log)", v->id,
		    (long long)v->d->cfg.boot_timeout_ms, v->dir);
		log_warn("vm boot timed out: killed", "id", v->id, NULL);
		answer(v, VMOP_ENSURE, &err);
		kill_qemu(v, SIGKILL);
		return;
	}
	if (v->bev == NULL && v->awaiting && sbx_mono_ms() - v->asked_ms > ASK_AGAIN_MS)
		v->awaiting = 0;   /* no "ready": the word or its answer was lost; ask again */
	if (v->bev == NULL && !v->awaiting) {
		if (try_connect(v) != 0) {
			arm(v, POLL_MS);
			return;
		}
		v->asked_ms = sbx_mono_ms();
	}
	/* Asked: "ready", then HELLO (on_ready); look again within a second. */
	arm(v, v->deadline_ms - sbx_mono_ms() + 1 < 1000 ? v->deadline_ms - sbx_mono_ms() + 1 : 1000);
}

static void
fail_boot(struct vm *v, const char *what, const struct sbx_err *e)
{
	struct sbx_err err;

	sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: %s: %s", v->id, what,
	    e != NULL ? e->message : strerror(errno));
	answer(v, VMOP_ENSURE, &err);
}

static void
boot(struct vm *v)
{
	struct vmdrv *d = v->d;
	char kernel[600], initrd[600], root[700], work[600], agent[600], ctl[600],
	    con[600], pidf[600], log[600], append[400], mem[32], smp[16],
	    drv_root[800], drv_work[700], ch_agent[700], ch_ctl[700], ch_con[700],
	    ch_egress[700], key[256];
	const char *argv[64];
	struct sbx_err err;
	size_t i;
	int n = 0;

	snprintf(key, sizeof(key), "%s", v->image);
	for (i = 0; key[i] != '\0'; i++)
		if (!((key[i] >= 'a' && key[i] <= 'z') || (key[i] >= 'A' && key[i] <= 'Z') ||
		    (key[i] >= '0' && key[i] <= '9') || key[i] == '.' || key[i] == '_' ||
		    key[i] == '-'))
			key[i] = '_';
	snprintf(kernel, sizeof(kernel), "%s/vmlinuz", d->cfg.vm_dir);
	snprintf(initrd, sizeof(initrd), "%s/initrd.img", d->cfg.vm_dir);
	snprintf(root, sizeof(root), "%s/images/%s.ext4", d->cfg.vm_dir, key);
	vpath(v, "work.img", work, sizeof(work));
	vpath(v, "agent.sock", agent, sizeof(agent));
	vpath(v, "ctl.sock", ctl, sizeof(ctl));
	vpath(v, "console.log", con, sizeof(con));
	vpath(v, "qemu.pid", pidf, sizeof(pidf));
	vpath(v, "qemu.log", log, sizeof(log));
	unlink(agent);
	unlink(ctl);
	unlink(con);
	unlink(log);
	snprintf(append, sizeof(append), "console=ttyS0 quiet panic=-1 "
	    "tsc_early_khz=%lu tsc=reliable no_timer_check sbx.user=%u:%u "
	    "sbx.pids=%lld", d->tsc_khz, d->uid, d->gid, (long long)d->cfg.pids);
	snprintf(mem, sizeof(mem), "%lldM", (long long)(d->cfg.memory_bytes >> 20));
	snprintf(smp, sizeof(smp), "%d", d->cfg.cpus);
	snprintf(drv_root, sizeof(drv_root), "id=root,file=%s,format=raw,if=none,readonly=on", root);
	snprintf(drv_work, sizeof(drv_work), "id=work,file=%s,format=raw,if=none,discard=unmap", work);
	snprintf(ch_agent, sizeof(ch_agent), "socket,id=agent,path=%s,server=on,wait=off", agent);
	snprintf(ch_ctl, sizeof(ch_ctl), "socket,id=ctl,path=%s,server=on,wait=off", ctl);
	snprintf(ch_con, sizeof(ch_con), "file,id=con,path=%s", con);
	argv[n++] = d->cfg.qemu;
	argv[n++] = "-M"; argv[n++] = "microvm";
	argv[n++] = "-accel";
	argv[n++] = strcmp(d->accel, "tcg") == 0 ? "tcg,tb-size=" VM_TB_MIB : d->accel;
	argv[n++] = "-cpu"; argv[n++] = strcmp(d->accel, "kvm") == 0 ? "host" : "max";
	argv[n++] = "-m"; argv[n++] = mem;
	argv[n++] = "-smp"; argv[n++] = smp;
	argv[n++] = "-nodefaults"; argv[n++] = "-no-user-config";
	argv[n++] = "-display"; argv[n++] = "none";
	argv[n++] = "-no-reboot";
	argv[n++] = "-sandbox";
	if (d->cfg.runas != NULL && d->cfg.runas[0] != '\0') {
		/* -runas drops to the user with setuid after the filter is in
		 * place, which elevateprivileges=deny would kill; once dropped,
		 * the kernel refuses any way back to root anyway. */
		argv[n++] = "on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny";
		argv[n++] = "-runas"; argv[n++] = d->cfg.runas;
	} else
		argv[n++] = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";
	argv[n++] = "-kernel"; argv[n++] = kernel;
	argv[n++] = "-initrd"; argv[n++] = initrd;
	argv[n++] = "-append"; argv[n++] = append;
	argv[n++] = "-drive"; argv[n++] = drv_root;
	argv[n++] = "-device"; argv[n++] = "virtio-blk-device,drive=root";
	argv[n++] = "-drive"; argv[n++] = drv_work;
	argv[n++] = "-device"; argv[n++] = "virtio-blk-device,drive=work";
	argv[n++] = "-device"; argv[n++] = "virtio-serial-device";
	argv[n++] = "-chardev"; argv[n++] = ch_agent;
	argv[n++] = "-device"; argv[n++] = "virtserialport,chardev=agent,name=sbx.agent";
	argv[n++] = "-chardev"; argv[n++] = ch_ctl;
	argv[n++] = "-device"; argv[n++] = "virtserialport,chardev=ctl,name=sbx.ctl";
	argv[n++] = "-chardev"; argv[n++] = ch_con;
	argv[n++] = "-serial"; argv[n++] = "chardev:con";
	argv[n++] = "-pidfile"; argv[n++] = pidf;
	n = vm_egress_qemu(v, argv, n, ch_egress, sizeof(ch_egress), append, sizeof(append));
	argv[n] = NULL;
	sbx_err_clear(&err);
	vm_cg_remove(v->id);
	if (vm_cg_make(&v->cg, v->id, d->cfg.memory_bytes + VM_OVERHEAD_BYTES,
	    VM_QEMU_PIDS, d->cfg.cpus) == 0 && !d->cg_said) {
		d->cg_said = 1;
		log_warn("vm driver: no cgroup for the VMs (not root, or the memory, "
		    "pids and cpu controllers are absent): each VM is bounded by its "
		    "-m and -smp only", NULL);
	}
	if (vm_egress_start(v, &err) != 0) {   /* in the VM's cgroup: after it */
		fail_boot(v, "no egress proxy", &err);
		return;
	}
	v->proc = vm_proc_start(d->base.base, argv, log, v->cg.join, on_qemu_exit, v,
	    &v->pid, &err);
	if (v->proc == NULL) {
		fail_boot(v, "cannot start qemu", &err);
		return;
	}
	v->state = VM_BOOTING;
	v->deadline_ms = sbx_mono_ms() + d->cfg.boot_timeout_ms;
	arm(v, POLL_MS);
}

static void
on_mkfs_exit(void *arg, int status)
{
	struct vm *v = arg;
	char tmp[600], work[600];
	struct sbx_err err;

	vm_proc_free(v->mkfs);
	v->mkfs = NULL;
	vpath(v, "work.img.new", tmp, sizeof(tmp));
	vpath(v, "work.img", work, sizeof(work));
	if (v->destroying) {
		remove_dir(v);
		answer(v, VMOP_DESTROY, NULL);
		sbx_err_set(&err, SBX_E_CONFLICT, "sandbox %s was destroyed meanwhile", v->id);
		answer(v, VMOP_ENSURE, &err);
		answer(v, VMOP_STOP, NULL);
		vm_free(v);
		return;
	}
	if (status != 0 || rename(tmp, work) != 0) {
		unlink(tmp);
		sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: mkfs.ext4 of /work failed "
		    "(see %s/qemu.log)", v->id, v->dir);
		answer(v, VMOP_ENSURE, &err);
		return;
	}
	answer(v, VMOP_STOP, NULL);
	if (has_waiter(v, VMOP_ENSURE))
		boot(v);
}

/* A new sparse work.img of work_bytes, made by mkfs.ext4 (root owned by the
 * sandbox user); boot follows. */
static void
make_work(struct vm *v)
{
	char tmp[600], log[600], owner[64], size[32];
	const char *argv[12];
	struct sbx_err err;
	pid_t pid;
	int fd;

	vpath(v, "work.img.new", tmp, sizeof(tmp));
	vpath(v, "qemu.log", log, sizeof(log));
	unlink(tmp);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0 ||
	    ftruncate(fd, (off_t)v->d->cfg.work_bytes) != 0) {
		if (fd >= 0)
			close(fd);
		fail_boot(v, "cannot make work.img", NULL);
		return;
	}
	close(fd);
	snprintf(owner, sizeof(owner), "root_owner=%u:%u", v->d->uid, v->d->gid);
	snprintf(size, sizeof(size), "%lldk", (long long)(v->d->cfg.work_bytes >> 10));
	argv[0] = "mkfs.ext4";
	argv[1] = "-q";
	argv[2] = "-F";
	argv[3] = "-L";
	argv[4] = "work";
	argv[5] = "-E";
	argv[6] = owner;
	argv[7] = tmp;
	argv[8] = size;
	argv[9] = NULL;
	sbx_err_clear(&err);
	if ((v->mkfs = vm_proc_start(v->d->base.base, argv, log, NULL, on_mkfs_exit,
	    v, &pid, &err)) == NULL)
		fail_boot(v, "cannot run mkfs.ext4", &err);
}

static void
remove_dir(struct vm *v)
{
	char path[800];
	struct dirent *e;
	DIR *dh;

	if ((dh = opendir(v->dir)) != NULL) {
		while ((e = readdir(dh)) != NULL) {
			if (e->d_name[0] == '.' && (e->d_name[1] == '\0' ||
			    (e->d_name[1] == '.' && e->d_name[2] == '\0')))
				continue;
			snprintf(path, sizeof(path), "%s/%s", v->dir, e->d_name);
			unlink(path);
		}
		closedir(dh);
	}
	rmdir(v->dir);
}

static void
vm_free(struct vm *v)
{
	struct vmop *op;

	while ((op = TAILQ_FIRST(&v->waiters)) != NULL) {
		TAILQ_REMOVE(&v->waiters, op, wlink);
		op->waiting = NULL;
		vmop_free(op);
	}
	drop_channel(v);
	vm_egress_end(v, 0);   /* the next broker starts it again at adoption */
	free(v->allow);
	if (v->timer != NULL)
		event_free(v->timer);
	vm_proc_free(v->proc);
	vm_proc_free(v->mkfs);
	TAILQ_REMOVE(&v->d->vms, v, link);
	free(v);
}

static void
on_qemu_exit(void *arg, int status)
{
	struct vm *v = arg;
	enum vm_state was = v->state;
	char path[600];
	struct sbx_err err;

	vm_proc_free(v->proc);
	v->proc = NULL;
	v->pid = 0;
	vm_egress_end(v, 1);   /* out of the cgroup before it goes */
	vm_cg_remove(v->id);
	drop_channel(v);
	event_del(v->timer);
	vpath(v, "qemu.pid", path, sizeof(path));
	unlink(path);
	vpath(v, "agent.sock", path, sizeof(path));
	unlink(path);
	vpath(v, "ctl.sock", path, sizeof(path));
	unlink(path);
	v->state = VM_STOPPED;
	v->adopted = 0;
	{
		char stx[16];

		snprintf(stx, sizeof(stx), "%d", status);
		log_info("vm exited", "id", v->id, "status", stx, NULL);
	}
	if (v->destroying) {
		remove_dir(v);
		answer(v, VMOP_DESTROY, NULL);
		sbx_err_set(&err, SBX_E_CONFLICT, "sandbox %s was destroyed meanwhile", v->id);
		answer(v, VMOP_ENSURE, &err);
		answer(v, VMOP_STOP, NULL);
		vm_free(v);
		return;
	}
	snprintf(v->stop_reason, sizeof(v->stop_reason), "%s",
	    was == VM_STOPPING ? "operator" : "exited");
	answer(v, VMOP_STOP, NULL);
	if (was == VM_BOOTING) {
		sbx_err_set(&err, SBX_E_RUNTIME, "sandbox %s: the VM exited while "
		    "booting (see %s/console.log and qemu.log)", v->id, v->dir);
		answer(v, VMOP_ENSURE, &err);
	} else if (has_waiter(v, VMOP_ENSURE))
		boot(v);   /* an ensure came while it stopped */
}

/* ---------------------------------------------------------------- ops */

static int
vm_timer(struct vm *v)
{
	if (v->timer == NULL)
		v->timer = evtimer_new(v->d->base.base, on_timer, v);
	return v->timer != NULL ? 0 : -1;
}

/* A warm ensure: the running VM's status, after the call returned. */
static void
answer_running(struct vmop *op)
{
	struct vm *v = vm_find(op->d, op->id);
	struct sbx_status st;
	struct sbx_err err;

	if (v == NULL || v->state != VM_RUNNING) {
		sbx_err_set(&err, SBX_E_CONFLICT, "sandbox %s stopped meanwhile", op->id);
		vmop_fail(op, &err);
		return;
	}
	vm_fill_status(v, v->id, &st);
	vmop_status(op, &st);
}

void
vm_ensure(struct vmdrv *d, struct vmop *op)
{
	struct vm *v = vm_get(d, op->id);
	struct sbx_err err;
	char path[600];
	struct stat sb;
	int change;

	if (v == NULL) {
		if (mkdir(d->cfg.state_dir, 0700) != 0 && errno != EEXIST)
			goto fail;
		dir_of(d, op->id, path, sizeof(path));
		if (mkdir(path, 0700) != 0 && errno != EEXIST)
			goto fail;
		if ((v = vm_new(d, op->id)) == NULL)
			goto fail;
		v->created_ms = sbx_wall_ms();
		snprintf(v->image, sizeof(v->image), "%s", op->image);
		if (meta_write(v) != 0 || vm_egress_set(v, op->allow) != 0)
			goto fail;
	}
	if (vm_timer(v) != 0)
		goto fail;
	if (v->destroying) {
		sbx_err_set(&err, SBX_E_CONFLICT, "sandbox %s is being destroyed", op->id);
		vmop_fail_later(op, &err);
		return;
	}
	change = vm_egress_change(v, op->allow);
	if (change != 0 && v->state != VM_RUNNING && v->state != VM_STOPPED) {
		sbx_err_set(&err, SBX_E_CONFLICT, "sandbox %s is starting or stopping: "
		    "ask again for its new egress policy", op->id);
		vmop_fail_later(op, &err);
		return;
	}
	if (change != 0 && vm_egress_set(v, op->allow) != 0)
		goto fail;
	if (v->state == VM_RUNNING && change == 2) {
		/* Egress on or off changes the VM's devices: a clean reboot,
		 * /work kept (the engine replaces its container the same way). */
		wait_on(v, op);
		v->state = VM_STOPPING;
		power_off(d, v);
		return;
	}
	if (v->state == VM_RUNNING) {
		/* A new list replaces the proxy; a proxy that died is started
		 * again (as the engine's ensure starts a stopped one). */
		if ((change == 1 || v->proxy == NULL) &&
		    (change == 1 ? vm_egress_replace(v, &err) : vm_egress_start(v, &err)) != 0) {
			vmop_fail_later(op, &err);
			return;
		}
		vmop_later(op, answer_running);
		return;
	}
	wait_on(v, op);
	if (v->state != VM_STOPPED || v->mkfs != NULL)
		return;   /* the boot under way (or the stop, then a boot) answers it */
	vpath(v, "work.img", path, sizeof(path));
	if (stat(path, &sb) != 0)
		make_work(v);
	else
		boot(v);
	return;
fail:
	sbx_err_set(&err, SBX_E_INTERNAL, "sandbox %s: cannot make its directory: %s",
	    op->id, strerror(errno));
	vmop_fail_later(op, &err);
}

void
vm_stop(struct vmdrv *d, struct vmop *op)
{
	struct vm *v = vm_get(d, op->id);
	struct sbx_err err;

	if (v == NULL) {
		sbx_err_set(&err, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX, op->id);
		vmop_fail_later(op, &err);
		return;
	}
	if (v->state == VM_STOPPED && v->mkfs == NULL) {
		vmop_later(op, vmop_done);
		return;
	}
	if (vm_timer(v) != 0) {
		sbx_err_oom(&err);
		vmop_fail_later(op, &err);
		return;
	}
	wait_on(v, op);
	if (v->state == VM_STOPPING || v->state == VM_STOPPED)
		return;   /* mkfs under way: answered when it ends */
	sbx_err_set(&err, SBX_E_CONFLICT, "sandbox %s was stopped while it booted", v->id);
	answer(v, VMOP_ENSURE, &err);
	v->state = VM_STOPPING;
	power_off(d, v);
}

void
vm_destroy(struct vmdrv *d, struct vmop *op)
{
	struct vm *v = vm_get(d, op->id);

	if (v == NULL) {
		vmop_later(op, vmop_done);
		return;
	}
	if (v->proc == NULL && v->mkfs == NULL) {
		remove_dir(v);
		vm_free(v);
		vmop_later(op, vmop_done);
		return;
	}
	wait_on(v, op);
	if (!v->destroying) {
		v->destroying = 1;
		kill_qemu(v, SIGKILL);
	}
}

struct sbx_agent_chan *
vm_channel(struct vmdrv *d, const char *id, struct sbx_err *err)
{
	struct vm *v = vm_get(d, id);

	if (v == NULL) {
		sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX, id);
		return NULL;
	}
	if (v->state != VM_RUNNING || v->ch == NULL || !sbx_agent_chan_alive(v->ch)) {
		sbx_err_set(err, SBX_E_NOT_RUNNING, SBX_MSG_NOT_RUNNING, id);
		return NULL;
	}
	return v->ch;
}

/* 1 when /proc/PID/cmdline names this VM's agent socket (a qemu of ours). */
static int
is_our_qemu(const struct vm *v, pid_t pid)
{
	char want[600], buf[8192];
	ssize_t r, i;

	if ((r = vm_proc_cmdline(pid, buf, sizeof(buf))) < 0)
		return 0;
	for (i = 0; i < r; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[r] = '\0';
	snprintf(want, sizeof(want), "path=%s/agent.sock,", v->dir);
	return strstr(buf, want) != NULL;
}

int
vm_adopt_all(struct vmdrv *d)
{
	char dir[512], path[700];
	struct dirent *e;
	struct vm *v;
	long pid;
	int adopted = 0;
	FILE *f;
	DIR *dh;

	snprintf(dir, sizeof(dir), "%s/vm", d->cfg.state_dir);
	if ((dh = opendir(dir)) == NULL)
		return 0;
	while ((e = readdir(dh)) != NULL) {
		if (!sbx_id_valid(e->d_name) || (v = vm_get(d, e->d_name)) == NULL)
			continue;
		vpath(v, "qemu.pid", path, sizeof(path));
		pid = 0;
		if ((f = fopen(path, "re")) != NULL) {
			if (fscanf(f, "%ld", &pid) != 1)
				pid = 0;
			fclose(f);
		}
		if (pid <= 1)
			continue;
		if (!is_our_qemu(v, (pid_t)pid) || vm_timer(v) != 0 ||
		    (v->proc = vm_proc_adopt(d->base.base, (pid_t)pid, on_qemu_exit, v)) == NULL) {
			unlink(path);
			continue;
		}
		v->pid = (pid_t)pid;
		v->state = VM_BOOTING;
		v->adopted = 1;
		v->deadline_ms = sbx_mono_ms() + d->cfg.boot_timeout_ms;
		arm(v, 0);
		snprintf(path, sizeof(path), "%ld", pid);
		log_info("vm adopted", "id", v->id, "pid", path, NULL);
		/* qemu's cgroup, for the processes started for it from now on
		 * (the egress proxy) */
		vm_cg_find(&v->cg, v->id);
		vm_egress_adopt(v);
		adopted++;
	}
	closedir(dh);
	return adopted;
}

size_t
vm_quiesce(struct vmdrv *d)
{
	struct vm *v, *next;
	size_t busy = 0;

	for (v = TAILQ_FIRST(&d->vms); v != NULL; v = next) {
		next = TAILQ_NEXT(v, link);
		if (!TAILQ_EMPTY(&v->waiters) || v->mkfs != NULL ||
		    (v->state != VM_RUNNING && v->state != VM_STOPPED) ||
		    (v->ch != NULL && sbx_agent_chan_streams(v->ch) > 0)) {
			busy++;
			continue;
		}
		vm_free(v);   /* qemu keeps running: not ours to end here */
	}
	return busy;
}

void
vm_free_all(struct vmdrv *d)
{
	struct vm *v;

	while ((v = TAILQ_FIRST(&d->vms)) != NULL)
		vm_free(v);
}
