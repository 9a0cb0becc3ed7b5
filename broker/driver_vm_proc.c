/* driver_vm_proc.c - starts and watches the vm driver's processes (qemu, mkfs.ext4) with pidfds on the event loop; touches only processes it started or was handed. */
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <poll.h>
#include <sys/wait.h>

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "driver_vm_proc.h"
#include "sbx_proto.h"

struct vm_proc {
	pid_t pid;
	int pidfd;
	int child;
	struct event *ev;
	vm_proc_cb cb;
	void *arg;
};

static void
on_exit_ev(evutil_socket_t fd, short what, void *arg)
{
	struct vm_proc *p = arg;
	int status = -1;

	(void)fd;
	(void)what;
	if (p->child) {
		if (waitpid(p->pid, &status, WNOHANG) == 0)
			return;   /* not yet (spurious) */
	}
	event_del(p->ev);
	p->cb(p->arg, status);
}

static struct vm_proc *
watch(struct event_base *base, pid_t pid, int child, vm_proc_cb cb, void *arg)
{
	struct vm_proc *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	p->pid = pid;
	p->child = child;
	p->cb = cb;
	p->arg = arg;
	p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (p->pidfd < 0 ||
	    (p->ev = event_new(base, p->pidfd, EV_READ | EV_PERSIST, on_exit_ev, p)) == NULL ||
	    event_add(p->ev, NULL) != 0) {
		if (p->pidfd >= 0)
			close(p->pidfd);
		if (p->ev != NULL)
			event_free(p->ev);
		free(p);
		return NULL;
	}
	return p;
}

struct vm_proc *
vm_proc_start(struct event_base *base, const char *const *argv,
    const char *log_path, const char *const *join, vm_proc_cb cb, void *arg,
    pid_t *pid, struct sbx_err *err)
{
	struct vm_proc_how how;

	memset(&how, 0, sizeof(how));
	how.join = join;
	how.fds[0] = how.fds[1] = -1;
	return vm_proc_spawn(base, argv, log_path, &how, cb, arg, pid, err);
}

struct vm_proc *
vm_proc_spawn(struct event_base *base, const char *const *argv,
    const char *log_path, const struct vm_proc_how *how, vm_proc_cb cb, void *arg,
    pid_t *pid, struct sbx_err *err)
{
	const char *const *join = how->join;
	struct vm_proc *p;
	pid_t c, parent = getpid();

	if ((c = fork()) < 0) {
		sbx_err_set(err, SBX_E_INTERNAL, "cannot start %s: fork failed", argv[0]);
		return NULL;
	}
	if (c == 0) {
		sigset_t none;
		int fd;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		setsid();
		if ((fd = open("/dev/null", O_RDONLY)) >= 0 && fd != 0) {
			dup2(fd, 0);
			close(fd);
		}
		if ((fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600)) >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			if (fd > 2)
				close(fd);
		}
		/* The handed descriptors become 3 and 4 (out of the way first). */
		int f3 = how->fds[0], f4 = how->fds[1];

		if ((f3 >= 0 && (f3 = fcntl(f3, F_DUPFD, 10)) < 0) ||
		    (f4 >= 0 && (f4 = fcntl(f4, F_DUPFD, 10)) < 0))
			_exit(126);
		if ((f3 >= 0 && dup2(f3, 3) != 3) || (f4 >= 0 && dup2(f4, 4) != 4))
			_exit(126);
		closefrom(f4 >= 0 ? 5 : f3 >= 0 ? 4 : 3);
		for (; join != NULL && *join != NULL; join++) {
			if ((fd = open(*join, O_WRONLY | O_CLOEXEC)) < 0 ||
			    write(fd, "0", 1) != 1)
				_exit(126);
			close(fd);
		}
		if (how->uid != 0 && (setgroups(0, NULL) != 0 || setgid(how->gid) != 0 ||
		    setuid(how->uid) != 0))
			_exit(126);
		/* After the uid change, which clears it; a parent gone before
		 * it was set has made us someone else's child. */
		if (how->pdeath && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
		    getppid() != parent))
			_exit(126);
		execvp(how->exe != NULL ? how->exe : argv[0], (char *const *)argv);
		_exit(127);
	}
	if ((p = watch(base, c, 1, cb, arg)) == NULL) {
		kill(c, SIGKILL);
		waitpid(c, NULL, 0);
		sbx_err_set(err, SBX_E_INTERNAL, "cannot watch %s (pidfd)", argv[0]);
		return NULL;
	}
	*pid = c;
	return p;
}

struct vm_proc *
vm_proc_adopt(struct event_base *base, pid_t pid, vm_proc_cb cb, void *arg)
{
	return watch(base, pid, 0, cb, arg);
}

pid_t
vm_proc_pid(const struct vm_proc *p)
{
	return p->pid;
}

void
vm_proc_kill(struct vm_proc *p, int sig)
{
	if (p != NULL)
		syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL, 0);
}

void
vm_proc_end(struct vm_proc *p)
{
	struct pollfd q;

	if (p == NULL)
		return;
	syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0);
	if (p->child)
		waitpid(p->pid, NULL, 0);
	else {
		q.fd = p->pidfd;
		q.events = POLLIN;
		poll(&q, 1, 1000);
	}
	vm_proc_free(p);
}

void
vm_proc_free(struct vm_proc *p)
{
	if (p == NULL)
		return;
	event_free(p->ev);
	close(p->pidfd);
	free(p);
}

ssize_t
vm_proc_cmdline(pid_t pid, char *buf, size_t size)
{
	char path[64];
	ssize_t r;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	r = read(fd, buf, size - 1);
	close(fd);
	if (r <= 0)
		return -1;
	buf[r] = '\0';
	return r;
}
