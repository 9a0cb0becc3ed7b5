/* broker_vm_check.h - sandbox-broker --check for driver = vm (adr/0069): what a vm broker needs on this host, checked without making the driver. */
#ifndef BROKER_VM_CHECK_H
#define BROKER_VM_CHECK_H

#include "broker.h"

/*
 * --check for driver = vm. Prints one line per finding on stdout: the
 * qemu binary (vm_qemu; a name is looked up on PATH, it must be
 * executable), the accelerator a start would pick (sbx_vm_accel), the
 * boot files vm_dir/vmlinuz and vm_dir/initrd.img, each allowlisted
 * image's root disk (sbx_vm_root_disk), vm_runas when the broker runs as
 * root (the user must exist), token_problem (NULL: none); every "problem:"
 * line names the fix; then "N problems". Makes, adopts and kills nothing
 * (a vm driver made now would adopt and kill VMs of the state dir), so it
 * is safe beside a running broker. allow: the allowlist
 * (broker_config_allowlist), borrowed. Returns BROKER_EXIT_OK, or
 * BROKER_EXIT_UNAVAILABLE when a problem was found.
 */
int broker_vm_check(const struct broker_config *cfg, const char *const *allow,
    const char *token_problem);

#endif
