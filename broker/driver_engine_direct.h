/* driver_engine_direct.h - the engine driver's direct agent channel (adr/0066): the socket volume's steps in ensure, destroy and reconcile, and the secure connect (driver_engine_direct.c). */
#ifndef DRIVER_ENGINE_DIRECT_H
#define DRIVER_ENGINE_DIRECT_H

#include "driver_engine_int.h"

/* Ensure's step before the container create: when the direct channel is
 * on and this ensure has not done it yet, makes the agent's socket volume
 * "<prefix><op->id>-agent" (labelled io.sbx.managed and io.sbx.agent-of,
 * a warm pool member's also io.sbx.pool; its root the sandbox user's,
 * 0700), sets ens(op)->agent_vol to 1, or to 2 when it cannot (one log
 * line; the sandbox then runs without a direct channel), then then(op),
 * and returns 1; else returns 0 at once (then not called). Never fails op. */
int eng_direct_volume(struct eop *op, void (*then)(struct eop *));
/* Appends the mount of the socket volume at SBX_AGENT_LISTEN_DIR to the
 * container's HostConfig.Mounts when ens(op)->agent_vol is 1. 0, or -1
 * out of memory. */
int eng_direct_mount(struct eop *op, json_t *mounts);
/* Destroy's step: removes op's socket volume when sbx made it for op->id
 * or for the pool member op's sandbox was claimed from (its name has the
 * stem of op->vname, the work volume destroy found; adr/0067). Absent or
 * not sbx's is fine (left alone). Then then(op) (uses op->then); a
 * runtime failure ends op. */
void eng_direct_drop(struct eop *op, void (*then)(struct eop *));
/* Reconcile's step (rco(op)->rsbx filled): removes each agent socket
 * volume sbx made whose sandbox has no container (ensure makes it again),
 * then then(op); a runtime failure ends op. */
void eng_direct_reconcile(struct eop *op, void (*then)(struct eop *));
/* The host mountpoint of the socket volume in a container inspect answer
 * (its Mounts entry at SBX_AGENT_LISTEN_DIR, of a volume named
 * eng_agent_volume_name of id, or, for a sandbox claimed from the warm
 * pool, of the stem of the volume mounted at /work: "X-work" → "X-agent";
 * adr/0067), or NULL (borrowed from body). */
const char *eng_direct_mountpoint(struct engine *e, const char *id, json_t *body);
/*
 * Connects to the agent's socket in the volume whose host mountpoint is
 * mnt without following any path the sandbox controls: the directory by
 * O_PATH|O_DIRECTORY|O_NOFOLLOW, the socket by openat2 RESOLVE_BENEATH|
 * RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV|RESOLVE_NO_MAGICLINKS beneath it, then
 * fstat (a socket, owned by uid, no bits for group or others) and connect
 * through /proc/self/fd/N of that O_PATH descriptor. Returns the
 * connected socket (non-blocking, close-on-exec), -1 not there yet (no
 * such name, or nothing listening: worth a retry), -2 refused (anything
 * else: a symlink, another type, owner or mode, the directory out of
 * reach); why gets one sentence naming what was found.
 */
int eng_direct_connect(const char *mnt, unsigned uid, char *why, size_t whysz);

#endif
