/* driver_vm_egress.c - egress of a vm sandbox with an allowlist (driver_vm_egress.h, adr/0069 amendment "egress"): the host sbx-proxy per sandbox, the egress link demultiplexed to it, the policy file and egress_stats; touches only the VM's directory, its proxy process and the link. */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>

#include "broker_egress.h"
#include "driver_vm_egress.h"
#include "driver_vm_op.h"
#include "driver_vm_proc.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_vmux_link.h"

#define LINK_RETRY_MS 1000
#define ARGV_MAX (8 + 2 * 256 + 4)   /* 256: egress_allow_max's ceiling */

static void
vpath(const struct vm *v, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", v->dir, name);
}

/* The unix address of the VM's file name; -1 (errno ENAMETOOLONG) when the
 * path does not fit (qemu's sockets would not either). */
static int
sock_addr(const struct vm *v, const char *name, struct sockaddr_un *sa)
{
	char path[700];

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	vpath(v, name, path, sizeof(path));
	if (strlen(path) >= sizeof(sa->sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sa->sun_path, path, strlen(path) + 1);
	return 0;
}

/* ---------------------------------------------------------------- policy */

void
vm_egress_load(struct vm *v)
{
	char path[600];
	struct stat sb;
	size_t got = 0;
	ssize_t r;
	int fd;

	free(v->allow);
	v->allow = NULL;
	vpath(v, VM_EG_ALLOW, path, sizeof(path));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return;
	if (fstat(fd, &sb) == 0 && sb.st_size > 0 && sb.st_size < (1 << 20) &&
	    (v->allow = malloc((size_t)sb.st_size + 1)) != NULL) {
		while (got < (size_t)sb.st_size &&
		    (r = read(fd, v->allow + got, (size_t)sb.st_size - got)) > 0)
			got += (size_t)r;
		v->allow[got] = '\0';
		if (got == 0) {
			free(v->allow);
			v->allow = NULL;
		}
	}
	close(fd);
}

int
vm_egress_change(const struct vm *v, const char *allow)
{
	if ((v->allow == NULL) != (allow == NULL))
		return 2;
	return allow != NULL && strcmp(v->allow, allow) != 0 ? 1 : 0;
}

int
vm_egress_set(struct vm *v, const char *allow)
{
	char path[600], tmp[600];
	char *copy = NULL;
	FILE *f;

	vpath(v, VM_EG_ALLOW, path, sizeof(path));
	if (allow == NULL) {
		if (unlink(path) != 0 && errno != ENOENT)
			return -1;
		free(v->allow);
		v->allow = NULL;
		return 0;
	}
	if ((copy = strdup(allow)) == NULL)
		return -1;
	vpath(v, VM_EG_ALLOW ".tmp", tmp, sizeof(tmp));
	if ((f = fopen(tmp, "we")) == NULL) {
		free(copy);
		return -1;
	}
	fputs(allow, f);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		free(copy);
		return -1;
	}
	free(v->allow);
	v->allow = copy;
	return 0;
}

int
vm_egress_qemu(struct vm *v, const char **argv, int n, char *buf, size_t len,
    char *append, size_t alen)
{
	char sock[600];
	size_t used;

	if (v->allow == NULL)
		return n;
	vpath(v, VM_EG_PORT_SOCK, sock, sizeof(sock));
	unlink(sock);
	used = strlen(append);
	snprintf(append + used, alen - used, " sbx.egress=%d", v->d->cfg.egress_conns);
	snprintf(buf, len, "socket,id=egress,path=%s,server=on,wait=off", sock);
	argv[n++] = "-chardev";
	argv[n++] = buf;
	argv[n++] = "-device";
	argv[n++] = "virtserialport,chardev=egress,name=sbx.egress";
	return n;
}

/* ---------------------------------------------------------------- proxy */

static void
on_proxy_exit(void *arg, int status)
{
	struct vm *v = arg;
	char st[16];

	snprintf(st, sizeof(st), "%d", status);
	log_warn("vm egress proxy exited (started again at the next ensure)", "id",
	    v->id, "status", st, NULL);
	vm_proc_free(v->proxy);
	v->proxy = NULL;
}

/* The proxy's listening socket, bound and listening; -1 with errno. */
static int
proxy_socket(struct vm *v)
{
	struct sockaddr_un sa;
	int fd;

	if (sock_addr(v, VM_EG_PROXY_SOCK, &sa) != 0)
		return -1;
	unlink(sa.sun_path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 128) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int
vm_egress_start(struct vm *v, struct sbx_err *err)
{
	struct vmdrv *d = v->d;
	const char *argv[ARGV_MAX];
	char name[600], log[600], path[600], pidtxt[24], *list = NULL, *e, *next;
	struct vm_proc_how how;
	pid_t pid = 0;
	int n = 0, lfd = -1, cfd = -1, rc = -1;
	FILE *f;

	if (v->allow == NULL || v->proxy != NULL)
		return 0;
	if (d->proxy_exe == NULL) {
		sbx_err_set(err, SBX_E_UNSUPPORTED, "sandbox %s: no sbx-proxy for the vm "
		    "driver's egress (adr/0069)", v->id);
		return -1;
	}
	/* argv[0] names the VM's directory: adoption knows its own proxy. */
	snprintf(name, sizeof(name), "sbx-proxy:%s", v->dir);
	argv[n++] = name;
	argv[n++] = "--listen";
	argv[n++] = "fd:3";
	argv[n++] = "--counts-fd";
	argv[n++] = "4";
	if ((list = strdup(v->allow)) == NULL)
		goto oom;
	for (e = list; e != NULL && *e != '\0' && n + 4 < ARGV_MAX; e = next) {
		if ((next = strchr(e, '\n')) != NULL)
			*next++ = '\0';
		argv[n++] = strchr(e, '/') != NULL ? "--cidr" : "--allow";
		argv[n++] = e;
	}
	if (d->cfg.proxy_resolver != NULL && d->cfg.proxy_resolver[0] != '\0') {
		argv[n++] = "--resolver";
		argv[n++] = d->cfg.proxy_resolver;
	}
	argv[n] = NULL;
	vpath(v, VM_EG_COUNTS, path, sizeof(path));
	if ((lfd = proxy_socket(v)) < 0 ||
	    (cfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0 ||
	    (d->px_uid != 0 && fchown(cfd, d->px_uid, d->px_gid) != 0)) {
		sbx_err_set(err, SBX_E_RUNTIME, "sandbox %s: cannot make the egress "
		    "proxy's socket or counts file: %s", v->id, strerror(errno));
		goto done;
	}
	memset(&how, 0, sizeof(how));
	how.exe = d->proxy_exe;
	how.join = v->cg.join;
	how.uid = d->px_uid;
	how.gid = d->px_gid;
	how.fds[0] = lfd;
	how.fds[1] = cfd;
	/* Its only clients come through this broker's link, which dies with
	 * the broker: it dies too (a new broker starts a fresh one). */
	how.pdeath = 1;
	vpath(v, VM_EG_LOG, log, sizeof(log));
	if ((v->proxy = vm_proc_spawn(d->base.base, argv, log, &how, on_proxy_exit, v,
	    &pid, err)) == NULL)
		goto done;
	vpath(v, VM_EG_PROXY_PID, path, sizeof(path));
	snprintf(pidtxt, sizeof(pidtxt), "%ld", (long)pid);
	if ((f = fopen(path, "we")) != NULL) {
		fprintf(f, "%s\n", pidtxt);
		fclose(f);
	}
	log_info("vm egress proxy started", "id", v->id, "pid", pidtxt, NULL);
	rc = 0;
	goto done;
oom:
	sbx_err_oom(err);
done:
	if (lfd >= 0)
		close(lfd);
	if (cfd >= 0)
		close(cfd);
	free(list);
	return rc;
}

int
vm_egress_replace(struct vm *v, struct sbx_err *err)
{
	if (v->proxy != NULL) {
		/* Its connections end; the guest's clients see them closed. */
		vm_proc_end(v->proxy);
		v->proxy = NULL;
	}
	return vm_egress_start(v, err);
}

/* ---------------------------------------------------------------- link */

static void link_connect(struct vm *v);

/* An OPEN from the guest: a connection to the proxy's socket. */
static struct bufferevent *
open_proxy(void *arg)
{
	struct vm *v = arg;
	struct bufferevent *bev;
	struct sockaddr_un sa;

	if (v->proxy == NULL)
		return NULL;
	if (sock_addr(v, VM_EG_PROXY_SOCK, &sa) != 0)
		return NULL;
	if ((bev = bufferevent_socket_new(v->d->base.base, -1, BEV_OPT_CLOSE_ON_FREE)) == NULL)
		return NULL;
	if (bufferevent_socket_connect(bev, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		bufferevent_free(bev);
		return NULL;
	}
	return bev;
}

static void
on_link_end(void *arg, const char *why)
{
	struct vm *v = arg;
	struct timeval tv = { LINK_RETRY_MS / 1000, (LINK_RETRY_MS % 1000) * 1000 };

	/* Bytes that are no frames are the guest's fault (or a half frame of a
	 * broker that died mid-write): cut, and start clean; the guest's relay
	 * sees the end and starts clean too. */
	log_warn("vm egress link ended", "id", v->id, "why", why, NULL);
	vmux_free(v->mux);
	v->mux = NULL;
	if (v->state == VM_RUNNING && v->eg_timer != NULL)
		evtimer_add(v->eg_timer, &tv);
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	link_connect(arg);
}

static void
link_connect(struct vm *v)
{
	struct timeval tv = { LINK_RETRY_MS / 1000, (LINK_RETRY_MS % 1000) * 1000 };
	struct bufferevent *bev = NULL;
	struct sockaddr_un sa;
	int fd = -1;

	if (v->allow == NULL || v->mux != NULL || v->state != VM_RUNNING)
		return;
	if (sock_addr(v, VM_EG_PORT_SOCK, &sa) != 0 ||
	    (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    (bev = bufferevent_socket_new(v->d->base.base, fd, BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		if (fd >= 0)
			close(fd);
		if (v->eg_timer != NULL)
			evtimer_add(v->eg_timer, &tv);
		return;
	}
	if ((v->mux = vmux_new(bev, v->d->cfg.egress_conns, open_proxy, on_link_end, v)) == NULL &&
	    v->eg_timer != NULL)
		evtimer_add(v->eg_timer, &tv);
}

void
vm_egress_link(struct vm *v)
{
	if (v->allow == NULL)
		return;
	if (v->eg_timer == NULL &&
	    (v->eg_timer = evtimer_new(v->d->base.base, on_retry, v)) == NULL)
		return;
	link_connect(v);
}

void
vm_egress_end(struct vm *v, int qemu_gone)
{
	char path[600];

	if (v->eg_timer != NULL) {
		event_free(v->eg_timer);
		v->eg_timer = NULL;
	}
	vmux_free(v->mux);
	v->mux = NULL;
	if (v->proxy != NULL) {
		vm_proc_end(v->proxy);
		v->proxy = NULL;
		log_info("vm egress proxy stopped", "id", v->id, NULL);
	}
	vpath(v, VM_EG_PROXY_PID, path, sizeof(path));
	unlink(path);
	vpath(v, VM_EG_PROXY_SOCK, path, sizeof(path));
	unlink(path);
	/* qemu's end of the port: only once qemu is gone. A broker that stops
	 * leaves it for the next one's link to a VM that runs on. */
	if (qemu_gone) {
		vpath(v, VM_EG_PORT_SOCK, path, sizeof(path));
		unlink(path);
	}
}

/* 1 when /proc/PID/cmdline's argv[0] is this VM's proxy name. */
static int
is_our_proxy(const struct vm *v, pid_t pid)
{
	char want[600], buf[700];

	if (vm_proc_cmdline(pid, buf, sizeof(buf)) < 0)
		return 0;
	snprintf(want, sizeof(want), "sbx-proxy:%s", v->dir);
	return strcmp(buf, want) == 0;
}

void
vm_egress_adopt(struct vm *v)
{
	struct sbx_err err;
	char path[600];
	struct vm_proc *old;
	long pid = 0;
	FILE *f;

	vpath(v, VM_EG_PROXY_PID, path, sizeof(path));
	if ((f = fopen(path, "re")) != NULL) {
		if (fscanf(f, "%ld", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	if (pid > 1 && is_our_proxy(v, (pid_t)pid) &&
	    (old = vm_proc_adopt(v->d->base.base, (pid_t)pid, on_proxy_exit, v)) != NULL)
		vm_proc_end(old);
	unlink(path);
	sbx_err_clear(&err);
	if (vm_egress_start(v, &err) != 0)
		log_warn("vm egress proxy not started after adoption", "id", v->id,
		    "error", err.message, NULL);
}

/* ---------------------------------------------------------------- stats */

/* The last VM_EG_LOG_KEEP bytes of the log into buf (*got set); a log
 * past VM_EG_LOG_MAX is cut to them (a line the proxy appends meanwhile
 * may be lost: the counts are in their own file). */
static void
log_tail(const char *dir, unsigned char *buf, size_t *got)
{
	char path[600];
	struct stat sb;
	off_t from;
	ssize_t r;
	int fd;

	*got = 0;
	snprintf(path, sizeof(path), "%s/%s", dir, VM_EG_LOG);
	if ((fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return;
	if (fstat(fd, &sb) == 0) {
		from = sb.st_size > VM_EG_LOG_KEEP ? sb.st_size - VM_EG_LOG_KEEP : 0;
		if ((r = pread(fd, buf, VM_EG_LOG_KEEP, from)) > 0)
			*got = (size_t)r;
		if (sb.st_size > VM_EG_LOG_MAX && pwrite(fd, buf, *got, 0) == (ssize_t)*got &&
		    ftruncate(fd, (off_t)*got) != 0)
			log_warn("vm egress log not cut", "path", path, NULL);
	}
	close(fd);
}

static void
stats_now(struct vmop *op)
{
	struct vm *v = NULL, *it;
	struct egress_stats st;
	unsigned long a, dn;
	unsigned char *buf = NULL;
	char dir[512], path[600], rec[64], *text = NULL;
	struct sbx_err err;
	json_t *out = NULL;
	size_t got = 0;
	FILE *f;

	TAILQ_FOREACH(it, &op->d->vms, link)
		if (strcmp(it->id, op->id) == 0)
			v = it;
	/* From the files: a stopped VM need not be in memory. */
	snprintf(dir, sizeof(dir), "%s/vm/%s", op->d->cfg.state_dir, op->id);
	snprintf(path, sizeof(path), "%s/%s", dir, VM_EG_ALLOW);
	memset(&st, 0, sizeof(st));
	if (access(path, F_OK) != 0) {
		if ((st.denials = json_array()) == NULL)
			goto oom;
	} else {
		if ((buf = malloc(VM_EG_LOG_KEEP)) == NULL)
			goto oom;
		log_tail(dir, buf, &got);
		if (egress_log_scan(buf, got, &st) != 0)
			goto oom;
		snprintf(path, sizeof(path), "%s/%s", dir, VM_EG_COUNTS);
		if ((f = fopen(path, "re")) != NULL) {
			if (fgets(rec, sizeof(rec), f) != NULL &&
			    sscanf(rec, "%lu %lu", &a, &dn) == 2) {
				st.allowed = a;
				st.denied = dn;
			}
			fclose(f);
		}
	}
	out = json_pack("{s:b, s:I, s:I, s:o}", "proxy", v != NULL && v->proxy != NULL,
	    "allowed", (json_int_t)st.allowed, "denied", (json_int_t)st.denied,
	    "denials", st.denials);
	st.denials = NULL;
	if (out == NULL || (text = json_dumps(out, JSON_COMPACT)) == NULL)
		goto oom;
	op->cb.json(op->arg, NULL, text);
	vmop_free(op);
	goto done;
oom:
	egress_stats_clear(&st);
	sbx_err_oom(&err);
	vmop_fail(op, &err);
done:
	json_decref(out);
	free(text);
	free(buf);
}

struct sbx_op *
vm_egress_stats(struct vmdrv *d, const char *id, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	struct vmop *op;

	if (!sbx_id_valid(id))
		return sbx_err_bad_id(err), NULL;
	if ((op = vmop_new(d, VMOP_EGRESS, id)) == NULL)
		return sbx_err_oom(err), NULL;
	op->cb.json = cb;
	op->arg = arg;
	if (vmop_later(op, stats_now) != 0) {
		vmop_free(op);
		return sbx_err_oom(err), NULL;
	}
	return &op->op;
}
