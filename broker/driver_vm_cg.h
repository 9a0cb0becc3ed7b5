/* driver_vm_cg.h - a cgroup per VM for the vm driver (adr/0069): memory, pids and CPU of the qemu process, v2 or v1, when the host lets the broker make one. */
#ifndef DRIVER_VM_CG_H
#define DRIVER_VM_CG_H

#include <stddef.h>
#include <stdint.h>

#define VM_CG_JOIN_MAX 4

/* A VM's cgroups: the cgroup.procs files its qemu joins (NULL-terminated). */
struct vm_cg {
	char procs[VM_CG_JOIN_MAX][300];
	const char *join[VM_CG_JOIN_MAX + 1];
	size_t n;
};

/*
 * Makes the cgroup(s) of VM name ("<id>") under "sbx-vm": cgroup v2
 * (/sys/fs/cgroup/cgroup.controllers exists; memory, pids and cpu enabled
 * in the subtree) or v1 (/sys/fs/cgroup/{memory,pids,cpu}/sbx-vm/NAME),
 * with memory.max (v1 memory.limit_in_bytes) mem_bytes, pids.max pids and
 * a CPU quota of cpus CPUs (cpu.max, v1 cfs_quota_us over a 100 ms
 * period). Returns the number of controllers limited (0: no cgroup could
 * be made, e.g. not root, controllers absent: the caller logs it and runs
 * the VM bounded by -m and -smp only); cg->join names what the process
 * must join (vm_proc_start's join).
 */
size_t vm_cg_make(struct vm_cg *cg, const char *name, int64_t mem_bytes,
    int64_t pids, int cpus);

/*
 * The cgroup(s) an earlier broker made for VM name (vm_cg_make's
 * directories that still exist, v2 or v1), into cg->join, limits untouched
 * (qemu, adopted, still runs in them): so a process started for an adopted
 * VM (its egress proxy) joins qemu's cgroup as at the first boot. Returns
 * how many (0: none exists; cg->join then names nothing).
 */
size_t vm_cg_find(struct vm_cg *cg, const char *name);

/* Removes the cgroup directories of VM name, v2 and v1 alike (their
 * processes have exited; one made by an earlier broker too); idempotent. */
void vm_cg_remove(const char *name);

#endif
