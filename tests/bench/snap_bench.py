"""snap_bench.py - the `make bench` figure of issue 25 item 4: snapshots of /work (adr/0068).

Imported by tests/bench/bench.py, which owns the daemons (a Bench: its api at
b.api_addr with operator key b.akey, b.aconn). One figure, measured in the same
run as its baseline:

  snap   an NPC's /work filled with BENCH_SNAP_BYTES (1 GiB: 64 files of
         16 MiB written by dd in the sandbox), then per round: a snapshot
         (POST …/sandbox/snapshots), a new sandbox from it (PUT …/sandbox
         {"from_snapshot","from_npc"}: copy + ensure), a fork of the live
         sandbox (POST …/sandbox/fork), each against `cp -a` of the same tree
         on the host (the volume's mountpoint to a directory on the same
         filesystem) in the same round; medians of BENCH_SNAP_ROUNDS [2]
         rounds, ratio sbx/cp (1.0: as fast as the plain copy).

Never asserts: the figure is reported, as the others are.
"""

import json
import os
import shutil
import statistics
import subprocess
import time

MiB = 1024 * 1024


def env_int(name, dflt):
    v = os.environ.get(name, "")
    return int(v) if v.isdigit() else dflt


def fig_snap(b):
    total = env_int("BENCH_SNAP_BYTES", 1024 * MiB)
    rounds = env_int("BENCH_SNAP_ROUNDS", 2)
    files = 64
    each = max(total // files // MiB, 1)
    c = b.aconn
    c.json("POST", "/api/v1/npcs", {"name": "snap-src"}, ok=(201, 409))
    c.json("PUT", "/api/v1/npcs/snap-src/sandbox")
    r = b.exec_npc("snap-src", ["sh", "-c", "i=0; while [ $i -lt %d ]; do "
                   "dd if=/dev/zero of=/work/f$i bs=1M count=%d 2>/dev/null || exit 1; "
                   "i=$((i+1)); done; sync" % (files, each)])
    term = r["term"].decode() if isinstance(r["term"], bytes) else str(r["term"])
    if r["status"] != 200 or '"code":0' not in term:
        raise RuntimeError("filling /work failed: %r" % r["term"])
    vol = c.json("GET", "/api/v1/npcs/snap-src/sandbox")["sandbox_id"]
    mnt = subprocess.run(["curl", "-s", "--unix-socket", b.rsock,
                          "http://x/v1.41/volumes/sbx-%s-work" % vol],
                         capture_output=True, text=True, timeout=30).stdout
    mnt = json.loads(mnt)["Mountpoint"]
    dst = os.path.join(os.path.dirname(os.path.dirname(mnt)), "sbx-bench-cp")
    t_snap, t_from, t_fork, t_cp = [], [], [], []
    for i in range(rounds):
        shutil.rmtree(dst, True)
        subprocess.run(["sync"])
        t0 = time.monotonic()
        subprocess.run(["cp", "-a", mnt + "/.", dst], check=True)
        t_cp.append(time.monotonic() - t0)
        shutil.rmtree(dst, True)
        subprocess.run(["sync"])
        name = "b%d" % i
        t0 = time.monotonic()
        c.json("POST", "/api/v1/npcs/snap-src/sandbox/snapshots", {"name": name}, ok=(201,))
        t_snap.append(time.monotonic() - t0)
        npc = "snap-from-%d" % i
        c.json("POST", "/api/v1/npcs", {"name": npc}, ok=(201,))
        t0 = time.monotonic()
        c.json("PUT", "/api/v1/npcs/%s/sandbox" % npc, {"from_snapshot": name,
                                                         "from_npc": "snap-src"})
        t_from.append(time.monotonic() - t0)
        t0 = time.monotonic()
        c.json("POST", "/api/v1/npcs/snap-src/sandbox/fork", {"npc": "snap-fork-%d" % i},
               ok=(201,))
        t_fork.append(time.monotonic() - t0)
        for n in (npc, "snap-fork-%d" % i):
            c.json("DELETE", "/api/v1/npcs/%s/sandbox" % n)
        c.json("DELETE", "/api/v1/npcs/snap-src/sandbox/snapshots/" + name)
    c.json("DELETE", "/api/v1/npcs/snap-src/sandbox")
    base = statistics.median(t_cp)
    for what, xs in (("snapshot of a %d MiB /work (POST …/snapshots)" % (files * each), t_snap),
                     ("a new sandbox from that snapshot (copy + ensure)", t_from),
                     ("fork of the live sandbox (copy + ensure)", t_fork)):
        m = statistics.median(xs)
        b.row(what, "%.2f s" % m, "host `cp -a` of the tree %.2f s" % base,
              "%.2f×" % (m / base), "cost of a full copy (ext4: no reflink), adr/0068")
    b.notes.append("snap: %d rounds; the sbx figures include pausing the source, a "
                   "container start for the copy (and one for du), the API hops; "
                   "cp runs on the host with warm caches; neither side syncs inside its "
                   "timing (a sync before each)" % rounds)


FIGURES = [("snap", fig_snap)]
