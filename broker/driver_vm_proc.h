/* driver_vm_proc.h - processes of the vm driver (qemu, mkfs.ext4): started detached, their end heard through a pidfd on the event loop (adr/0069). */
#ifndef DRIVER_VM_PROC_H
#define DRIVER_VM_PROC_H

#include <sys/types.h>

#include "sbx_err.h"

struct event_base;
struct vm_proc;

/* status: the waitpid status (a child), or -1 when the process was not
 * ours to reap (adopted). */
typedef void (*vm_proc_cb)(void *arg, int status);

/*
 * Starts argv[0] (searched in PATH) with argv, stdin /dev/null, stdout and
 * stderr appended to log_path (created 0600), in a session of its own (a
 * signal to the broker's group does not reach it) and no descriptor of the
 * broker but those three. join: NULL, or cgroup.procs files (NULL-
 * terminated) it moves itself into before exec; one it cannot join ends
 * it (status 126) before it runs. cb runs once, from base, when it has exited
 * (reaped then). Returns the handle (*pid set), or NULL with err internal
 * (fork, pidfd_open or event failed; nothing is left running).
 */
struct vm_proc *vm_proc_start(struct event_base *base, const char *const *argv,
    const char *log_path, const char *const *join, vm_proc_cb cb, void *arg,
    pid_t *pid, struct sbx_err *err);

/* How vm_proc_spawn starts a process beyond vm_proc_start's rules. */
struct vm_proc_how {
	const char *exe;               /* the file run (PATH searched), NULL: argv[0] */
	const char *const *join;       /* as vm_proc_start's join */
	uid_t uid;                     /* != 0: setgid(gid), setuid(uid), no
	                                * supplementary groups, after joining */
	gid_t gid;
	int fds[2];                    /* descriptors it gets as 3 and 4 (the
	                                * caller's stay open in the broker), -1: none */
	int pdeath;                    /* 1: SIGKILLed when the broker dies
	                                * (PR_SET_PDEATHSIG, set after the uid
	                                * change; a broker already gone by then
	                                * ends it before it runs); 0: it outlives
	                                * the broker (qemu) */
};

/* vm_proc_start with how (borrowed for the call; see its members). Same
 * return and errors; a uid it cannot take ends it (status 126) before it
 * runs. */
struct vm_proc *vm_proc_spawn(struct event_base *base, const char *const *argv,
    const char *log_path, const struct vm_proc_how *how, vm_proc_cb cb, void *arg,
    pid_t *pid, struct sbx_err *err);

/* Reads /proc/PID/cmdline into buf (size > 1): its arguments, each ended
 * by a NUL, and one more NUL after them. Returns their length (> 0), or -1
 * when the process is gone, unreadable or has no command line (a kernel
 * thread). What does not fit is cut. */
ssize_t vm_proc_cmdline(pid_t pid, char *buf, size_t size);

/*
 * Watches a process this broker did not start (pid from a pidfile): cb when
 * it is gone. Returns NULL (errno ESRCH: not running) when it cannot be
 * watched.
 */
struct vm_proc *vm_proc_adopt(struct event_base *base, pid_t pid, vm_proc_cb cb,
    void *arg);

/* The process's pid (p not NULL). */
pid_t vm_proc_pid(const struct vm_proc *p);

/* Sends sig to the process (through its pidfd: never a recycled pid). */
void vm_proc_kill(struct vm_proc *p, int sig);

/* Ends the process now: SIGKILL, then waits for it (a child: reaped; an
 * adopted one: its pidfd, at most 1 s), so a cgroup it was in can be
 * removed right after; then as vm_proc_free (no callback). NULL ok. */
void vm_proc_end(struct vm_proc *p);

/* Stops watching: no callback after this. A child not reaped yet stays a
 * zombie until the broker exits, so callers free after the cb, or at the
 * broker's end (a VM left running on purpose). NULL ok. */
void vm_proc_free(struct vm_proc *p);

#endif
