/* driver_vm_egress.h - egress of a vm sandbox with an allowlist (adr/0069, amendment "egress"): its policy file, the host sbx-proxy per sandbox, the link on the egress virtio-serial port, egress_stats. */
#ifndef DRIVER_VM_EGRESS_H
#define DRIVER_VM_EGRESS_H

#include "driver_vm_int.h"

/* Files in the VM's directory: the allowlist ('\n'-joined, present only
 * with egress), the proxy's listening socket, pidfile, decision log (its
 * stdout) and counts (adr/0027's record), qemu's egress port socket. */
#define VM_EG_ALLOW "egress.allow"
#define VM_EG_PROXY_SOCK "egress-proxy.sock"
#define VM_EG_PROXY_PID "egress-proxy.pid"
#define VM_EG_LOG "egress.log"
#define VM_EG_COUNTS "egress.counts"
#define VM_EG_PORT_SOCK "egress.sock"
/* The decision log is cut to its last VM_EG_LOG_KEEP bytes once it is past
 * VM_EG_LOG_MAX (at an egress_stats read). */
#define VM_EG_LOG_MAX (1 << 20)
#define VM_EG_LOG_KEEP (64 << 10)

/* Reads v's VM_EG_ALLOW into v->allow (absent or empty: NULL). */
void vm_egress_load(struct vm *v);

/*
 * What an ensure asking for allow (NULL: none) means for v: 0 nothing
 * changes, 1 the list changes (the proxy is replaced, the VM stays), 2
 * egress is switched on or off (the VM's devices change: it reboots).
 */
int vm_egress_change(const struct vm *v, const char *allow);

/* Records allow (NULL: none) as v's policy, in memory and in
 * VM_EG_ALLOW. 0, or -1 with errno (the file cannot be written). */
int vm_egress_set(struct vm *v, const char *allow);

/*
 * qemu's side of egress for a VM with an allowlist: appends to argv (from
 * index n) a unix-socket chardev on VM_EG_PORT_SOCK and the virtserialport
 * "sbx.egress" on it (chardev and device strings written into buf, len
 * bytes); appends " sbx.egress=N" (the connection cap) to the kernel
 * command line in append (alen bytes). Returns the new n; without an
 * allowlist n, nothing added.
 */
int vm_egress_qemu(struct vm *v, const char **argv, int n, char *buf, size_t len,
    char *append, size_t alen);

/*
 * Starts v's proxy when v has an allowlist and none runs: sbx-proxy with
 * --allow/--cidr per entry (the engine's argv), argv[0]
 * "sbx-proxy:<v->dir>" (how vm_kill_strays knows it), listening on a
 * socket the broker bound (VM_EG_PROXY_SOCK, handed over as fd 3), counts
 * on fd 4, stdout and stderr to VM_EG_LOG, as the vm_runas user, in the
 * VM's cgroup (v->cg: call after it is made or found), killed by the
 * kernel when the broker dies (PR_SET_PDEATHSIG); pid in VM_EG_PROXY_PID.
 * 0, or -1 with err runtime_error (the socket, the files or the process).
 */
int vm_egress_start(struct vm *v, struct sbx_err *err);

/* A policy change on a running VM: the proxy is ended (its connections
 * cut) and started again with v->allow; the link and the VM stay. 0, or
 * -1 with err as vm_egress_start. */
int vm_egress_replace(struct vm *v, struct sbx_err *err);

/* The VM is running: connect the egress link (qemu's VM_EG_PORT_SOCK) and
 * serve it; a link that ends is connected again after a second while the
 * VM runs. Nothing without an allowlist. */
void vm_egress_link(struct vm *v);

/* Ends v's egress now: the link (every connection through it cut), the
 * proxy (killed and waited for), its socket and pidfile, and, when
 * qemu_gone, qemu's egress port socket too (a broker that stops while the
 * VM runs on leaves that for the next broker's link: removing it cut the
 * adopted VM's egress for good). */
void vm_egress_end(struct vm *v, int qemu_gone);

/* After a broker restart (VM adopted, v->cg found again): a proxy
 * VM_EG_PROXY_PID names that is this VM's (normally gone with the old
 * broker already) is killed (its connections went with the old broker's
 * link anyway) and a new one started in the VM's cgroup; any other is
 * vm_kill_strays's. */
void vm_egress_adopt(struct vm *v);

/*
 * egress_stats (sbx_driver.h): {"proxy","allowed","denied","denials"}
 * from VM_EG_COUNTS and the tail of VM_EG_LOG (egress_log_scan), answered
 * after the call returns. Errors: invalid_id; internal (out of memory).
 */
struct sbx_op *vm_egress_stats(struct vmdrv *d, const char *id, sbx_json_cb cb,
    void *arg, struct sbx_err *err);

#endif
