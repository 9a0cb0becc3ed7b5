"""direct_bench.py - the `make bench` figure of issue 25 item 1 (adr/0066): the
agent's direct channel against the runtime exec stream it replaces, in one run.

Imported by tests/bench/bench.py, which owns the daemons (a Bench: its broker
at b.bsock with b.token, agent channel BENCH_AGENT_CHANNEL, default direct).
This figure starts a second broker on the same runtime with
`--agent-channel runtime` and its own name prefix (so neither adopts the
other's sandboxes), makes one sandbox in each, and streams `head -c N
/dev/zero` (BENCH_STREAM_BYTES, default 1 GiB) through each broker's NDJSON
exec route, alternating, STREAM_ROUNDS rounds after a 16 MiB warm-up. Per
GiB it reports each broker's CPU and the CPU of the runtime's own
processes (dockerd, containerd and the shims, or the podman service and
conmon: every process whose command line names the runtime's directory or
its run directory) — the copy the direct channel takes out. Never asserts.

  direct   throughput direct vs runtime (paired median), CPU per GiB of the
           broker and of the runtime's processes on each.
"""

import glob
import hashlib
import os
import time


def _runtime_cpu(marks):
    tick = os.sysconf("SC_CLK_TCK")
    t = 0
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cmdline", "rb") as f:
                cmd = f.read().decode("utf-8", "replace")
            if "sandbox-broker" in cmd or not any(m in cmd for m in marks):
                continue
            with open(d + "/stat") as f:
                s = f.read()
            fl = s[s.rindex(")") + 2:].split()
            t += int(fl[11]) + int(fl[12])
        except (OSError, ValueError):
            pass
    return t / tick


def fig_direct(b, check_exit0, stream, proc_cpu, Conn, stream_bytes, rounds):
    """bench.py's helpers are passed in (it runs as __main__)."""
    mib = 1 << 20
    n = stream_bytes
    rdir = os.path.dirname(os.path.dirname(b.rsock))
    marks = [rdir, "/run/sbx-rt-" + hashlib.sha256(rdir.encode()).hexdigest()[:12],
             "/tmp/sbx-rt-" + hashlib.sha256(rdir.encode()).hexdigest()[:12]]
    w = os.path.join(b.work, "rtbroker")
    os.makedirs(w, exist_ok=True)
    sock = os.path.join(w, "broker.sock")
    args = [os.path.join(b.build, "sandbox-broker"),
            "--listen", "unix:" + sock, "--runtime", "unix:" + b.rsock,
            "--token-file", os.path.join(b.work, "token"), "--state-dir", os.path.join(w, "state"),
            "--image", "sbx-test:latest", "--output-cap", "2g", "--exec-timeout", "10m",
            "--exec-timeout-max", "10m", "--name-prefix", "sbxrt-", "--agent-channel", "runtime",
            "--log-level", "warn", "--log-file", os.path.join(w, "broker.log")]
    b.spawn("broker_rt", args)
    hdr = [("Authorization", "Bearer " + b.token)]
    try:
        rc = Conn(sock, hdr)
        b.wait_ok(lambda: rc.json("GET", "/v1/health"), "broker_rt")
        rc.json("PUT", "/v1/sandboxes/npc-bench-rt", {"egress": False})
        rc.close()
        b.bconn.json("PUT", "/v1/sandboxes/npc-bench-direct", {"egress": False})
        ways = {"direct": (b.bsock, "npc-bench-direct", b.pid("broker")),
                "runtime": (sock, "npc-bench-rt", b.pid("broker_rt"))}
        res = {k: {"mbs": [], "broker": [], "runtime": []} for k in ways}
        for r in range(rounds + 1):
            order = ["direct", "runtime"] if r % 2 == 0 else ["runtime", "direct"]
            for k in order:
                addr, sid, pid = ways[k]
                size = n if r > 0 else 16 * mib
                c0, r0 = proc_cpu(pid), _runtime_cpu(marks)
                x = stream(addr, "/v1/sandboxes/%s/exec" % sid, hdr,
                           {"argv": ["head", "-c", str(size), "/dev/zero"]}, "ndjson")
                c1, r1 = proc_cpu(pid), _runtime_cpu(marks)
                check_exit0(x, "%s stream" % k)
                if r == 0:
                    continue
                gib = size / float(1 << 30)
                res[k]["mbs"].append(size / (x["ns"] / 1e9) / 1e6)
                res[k]["broker"].append((c1 - c0) / gib)
                res[k]["runtime"].append((r1 - r0) / gib)
    finally:
        p = b.procs.pop("broker_rt", None)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def med(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if xs else float("nan")
    size = "%d MiB" % (n // mib) if n < (1 << 30) else "%g GiB" % (n / float(1 << 30))
    paired = med([a / c for a, c in zip(res["direct"]["mbs"], res["runtime"]["mbs"])])
    b.row("%s of `head -c %s /dev/zero` via broker: agent channel direct vs runtime exec stream "
          "(paired, same run)" % (size, size),
          "%.0f MB/s" % med(res["direct"]["mbs"]), "runtime stream %.0f MB/s" % med(res["runtime"]["mbs"]),
          "%.2f×" % paired, "— (adr/0066)")
    b.row("CPU seconds per GiB of that stream, the runtime's processes (dockerd, containerd, shim / "
          "podman service, conmon)", "%.2f s (direct)" % med(res["direct"]["runtime"]),
          "%.2f s (runtime stream)" % med(res["runtime"]["runtime"]), "—", "— (adr/0066)")
    b.row("CPU seconds per GiB of that stream, sandbox-broker",
          "%.2f s (direct)" % med(res["direct"]["broker"]),
          "%.2f s (runtime stream)" % med(res["runtime"]["broker"]), "—", "— (adr/0066)")
