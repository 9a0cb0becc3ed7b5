/* driver_vm_scan.h - the vm driver's walks of STATE/vm and of /proc (adr/0069). */
#ifndef DRIVER_VM_SCAN_H
#define DRIVER_VM_SCAN_H

#include "driver_vm_int.h"

/* Every sandbox directory: fills *sts (malloc'd, caller frees) and *n;
 * 0, or -1 out of memory. */
int vm_list_all(struct vmdrv *d, struct sbx_status **sts, size_t *n);

/*
 * After vm_adopt_all: SIGKILLs every qemu process whose command line names
 * a socket under STATE/vm/ and that no VM in memory accounts for (its
 * directory was removed, its pidfile lost), and every egress proxy whose
 * argv[0] is "sbx-proxy:STATE/vm/..." that is not the proxy of a VM in
 * memory (its VM gone or not adopted, a pidfile never written, one an
 * earlier broker left): nothing of ours is orphaned. Returns how many.
 */
int vm_kill_strays(struct vmdrv *d);

#endif
