/* driver_vm_box.h - the vm driver's VMs: directory, qemu process, agent channel, boot, poweroff, destroy, adoption after a restart (adr/0069). */
#ifndef DRIVER_VM_BOX_H
#define DRIVER_VM_BOX_H

#include "driver_vm_int.h"

/*
 * The VM of id: the one in memory, else one made from STATE/vm/<id>/ when
 * that directory exists (state stopped), else NULL (absent). id valid.
 */
struct vm *vm_get(struct vmdrv *d, const char *id);

/* What status answers for v (NULL: absent). */
void vm_fill_status(const struct vm *v, const char *id, struct sbx_status *st);

/*
 * ensure (op kind VMOP_ENSURE, op->image the allowlisted image, its root
 * disk present): answers op with the running VM's status once its agent
 * said HELLO, making the directory and work.img first when absent; ensures
 * of one id are serialised on its VM (they wait for the same boot).
 * Errors (op's status callback): runtime_error (mkfs or qemu failed, the
 * VM exited or stayed silent past boot_timeout_ms; console.log names why),
 * conflict (destroyed meanwhile), internal.
 */
void vm_ensure(struct vmdrv *d, struct vmop *op);

/* stop: clean poweroff (init syncs and unmounts /work), SIGKILL after
 * stop_timeout_ms; answers op (done) when qemu has exited. Absent:
 * not_found. */
void vm_stop(struct vmdrv *d, struct vmop *op);

/* destroy: SIGKILL, then the directory (work.img with it) removed; absent
 * is ok. */
void vm_destroy(struct vmdrv *d, struct vmop *op);

/* The agent channel of a running VM, or NULL (err: not_found when absent,
 * not_running when stopped or booting). */
struct sbx_agent_chan *vm_channel(struct vmdrv *d, const char *id, struct sbx_err *err);

/*
 * At driver start: for each STATE/vm/<id>/qemu.pid whose process is a qemu
 * started for that directory, adopt it (watch it, connect its agent:
 * running again); any other pidfile is stale and removed. Returns the
 * number adopted.
 */
int vm_adopt_all(struct vmdrv *d);

/* sbx_vm_close_idle (driver_vm.h): VMs without work leave the loop;
 * returns the busy ones. */
size_t vm_quiesce(struct vmdrv *d);

/* Frees every VM in memory; qemu processes keep running (adopted by the
 * next broker). */
void vm_free_all(struct vmdrv *d);

#endif
