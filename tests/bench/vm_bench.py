"""vm_bench.py - the `make bench` figures of issue 26: the vm driver (adr/0069) beside the container driver, in the same run.

Imported by tests/bench/bench.py, which owns the container side (a Bench: its
broker at b.bsock and api at b.api_addr with operator key b.akey, sandboxes
bench-0..9 on the runtime at b.rsock). This module starts a second
sandbox-broker with `--driver vm` (its own state directory under b.work, the
same token) and a second sandbox-api in front of it, makes the boot files
and the image's root disk with deploy/vm/build.sh (exported through the
runtime), then measures, alternating vm and container:

  vm_boot    ensure of a new sandbox through the api until `exec true` in it
             has exited (vm: qemu boots; container: create + start), p50
  vm_rt      `exec true` round trip through the api, p50
  vm_stream  256 MiB of stdout (`head -c`) through the api, MiB/s
  vm_idle    RSS of one idle sandbox: the qemu process (vm) against the
             container's processes (its init, sbx-helper idle and agent)

Knobs: BENCH_VM_BOOTS [5], BENCH_ROUNDS (bench.py's) for vm_rt,
BENCH_STREAM_BYTES (bench.py's), BENCH_VM_ACCEL [auto]. Never asserts: TCG
here (this machine's /dev/kvm is PVM), so the vm figures are TCG's.
"""

import glob
import os
import signal
import socket
import statistics
import subprocess
import time

MiB = 1 << 20
BOOTS = int(os.environ.get("BENCH_VM_BOOTS", "5"))


def log(*a):
    import sys
    print("bench:", *a, file=sys.stderr, flush=True)


def p50(xs):
    return statistics.median(xs) if xs else float("nan")


def rss_of(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def container_rss(b, name):
    """Sum of VmRSS of the processes in container name's cgroup."""
    cid = subprocess.run([b.docker, "inspect", "-f", "{{.Id}}", name], env=b.denv,
                         capture_output=True, text=True, check=True).stdout.strip()
    total = 0
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cgroup") as f:
                if cid not in f.read():
                    continue
        except OSError:
            continue
        total += rss_of(int(d[6:]))
    return total


class VmSide:
    """The vm broker and api of this run."""

    def __init__(self, b):
        import bench
        self.b = b
        self.w = os.path.join(b.work, "vm")
        os.makedirs(self.w, exist_ok=True)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.vm_dir = os.path.join(self.w, "boot")
        script = os.path.join(root, "deploy", "vm", "build.sh")
        subprocess.run(["sh", script, "boot", self.vm_dir, os.path.join(b.build, "sbx-helper"),
                        os.path.join(b.build, "sbx-vminit")], check=True)
        subprocess.run(["sh", script, "rootfs", self.vm_dir, bench.IMAGE, "unix://" + b.rsock],
                       check=True)
        tf = os.path.join(b.work, "token")
        self.state = os.path.join(self.w, "state")
        self.bsock = os.path.join(self.w, "broker.sock")
        b.spawn("vmbroker", [os.path.join(b.build, "sandbox-broker"), "--driver", "vm",
                             "--listen", "unix:" + self.bsock, "--token-file", tf,
                             "--state-dir", self.state, "--image", bench.IMAGE,
                             "--vm-dir", self.vm_dir,
                             "--vm-accel", os.environ.get("BENCH_VM_ACCEL", "auto"),
                             "--memory", "256m", "--work-size", "512m",
                             "--output-cap", "2g", "--exec-timeout", "10m",
                             "--exec-timeout-max", "10m", "--idle-timeout", "0",
                             "--log-level", "warn",
                             "--log-file", os.path.join(self.w, "broker.log")])
        self.bconn = bench.Conn(self.bsock, [("Authorization", "Bearer " + b.token)])
        b.wait_ok(lambda: self.bconn.json("GET", "/v1/health"), "vmbroker")
        api = os.path.join(b.build, "sandbox-api")
        st = os.path.join(self.w, "astate")
        os.makedirs(st, mode=0o700, exist_ok=True)
        self.akey = subprocess.run([api, "--state-dir", st, "admin", "create-operator", "vmbench"],
                                   check=True, capture_output=True, text=True).stdout.strip()
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        self.api_addr = ("127.0.0.1", port)
        b.spawn("vmapi", [api, "--listen", "127.0.0.1:%d" % port, "--broker", "unix:" + self.bsock,
                          "--broker-token-file", tf, "--state-dir", st,
                          "--max-execs-per-principal", "100000",
                          "--requests-per-minute", "100000000",
                          "--broker-timeout", "600s", "--log-level", "warn",
                          "--log-file", os.path.join(self.w, "api.log")])
        self.aconn = bench.Conn(self.api_addr, [("Authorization", "Bearer " + self.akey)])
        b.wait_ok(lambda: self.aconn.json("GET", "/api/v1/whoami"), "vmapi")

    def exec_npc(self, npc, argv):
        import bench
        return bench.stream(self.api_addr, "/api/v1/npcs/%s/sandbox/exec" % npc,
                            [("Authorization", "Bearer " + self.akey)], {"argv": argv}, "sse")

    def stop(self):
        for name in ("vmapi", "vmbroker"):
            p = self.b.procs.pop(name, None)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        # The broker leaves VMs running by design: end this run's.
        for pf in glob.glob(os.path.join(self.state, "vm", "*", "qemu.pid")):
            try:
                os.kill(int(open(pf).read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def boot_to_exec(conn, exec_npc, npc):
    """ensure + exec true in a new NPC's sandbox, then its destroy; seconds."""
    import bench
    conn.json("POST", "/api/v1/npcs", {"name": npc})
    t0 = time.perf_counter()
    conn.json("PUT", "/api/v1/npcs/%s/sandbox" % npc)
    r = exec_npc(npc, ["true"])
    dt = time.perf_counter() - t0
    bench.check_exit0(r, "exec true after ensure")
    conn.json("DELETE", "/api/v1/npcs/%s/sandbox" % npc)
    return dt


def fig_vm(b):
    import bench
    if not b.has_api:
        raise RuntimeError("sandbox-api is not built")
    vm = VmSide(b)
    try:
        # Boot (ensure) to the first exec's exit.
        vmt, ct = [], []
        for k in range(BOOTS):
            vmt.append(boot_to_exec(vm.aconn, vm.exec_npc, "vmboot-%d" % k))
            ct.append(boot_to_exec(b.aconn, b.exec_npc, "ctboot-%d" % k))
        b.row("vm driver: ensure of a new sandbox to `exec true` done, p50 (%d each)" % BOOTS,
              "%.2f s" % p50(vmt), "container %.2f s" % p50(ct),
              "%.1f×" % (p50(vmt) / p50(ct)), "reported (TCG here)")
        # One resident VM for the rest.
        vm.aconn.json("POST", "/api/v1/npcs", {"name": "vm-0"})
        vm.aconn.json("PUT", "/api/v1/npcs/vm-0/sandbox")
        bench.check_exit0(vm.exec_npc("vm-0", ["true"]), "warm-up")
        vrt, crt = [], []
        for _ in range(bench.ROUNDS):
            r = vm.exec_npc("vm-0", ["true"])
            bench.check_exit0(r, "vm exec true")
            vrt.append(r["ns"] / 1e6)
            r = b.exec_api(0, ["true"])
            bench.check_exit0(r, "container exec true")
            crt.append(r["ns"] / 1e6)
        b.row("vm driver: `exec true` round trip through the api, p50 (%d each)" % bench.ROUNDS,
              "%.1f ms" % p50(vrt), "container %.1f ms" % p50(crt),
              "%.2f×" % (p50(vrt) / p50(crt)), "reported")
        n = bench.STREAM_BYTES
        vs, cs = [], []
        for _ in range(bench.STREAM_ROUNDS):
            r = vm.exec_npc("vm-0", ["head", "-c", str(n), "/dev/zero"])
            bench.check_exit0(r, "vm stream")
            vs.append(n / MiB / (r["ns"] / 1e9))
            r = b.exec_api(0, ["head", "-c", str(n), "/dev/zero"])
            bench.check_exit0(r, "container stream")
            cs.append(n / MiB / (r["ns"] / 1e9))
        b.row("vm driver: %d MiB of stdout through the api (median of %d)" %
              (n // MiB, bench.STREAM_ROUNDS),
              "%.0f MiB/s" % p50(vs), "container %.0f MiB/s" % p50(cs),
              "%.2f×" % (p50(vs) / p50(cs)), "reported")
        time.sleep(3)
        pf = glob.glob(os.path.join(vm.state, "vm", "*", "qemu.pid"))
        qrss = rss_of(int(open(pf[0]).read())) if pf else 0
        crss = container_rss(b, b.cname(0))
        b.row("vm driver: idle RSS of one sandbox (qemu, -m 256M / the container's processes)",
              "%.0f MiB" % (qrss / MiB), "container %.1f MiB" % (crss / MiB),
              "%.0f×" % (qrss / crss) if crss else "—", "reported")
        b.note("vm driver rows: accelerator %s (this machine's /dev/kvm is PVM: tcg); "
               "hosts with KVM boot in well under a second (expected, not measured)." %
               ("auto" if not os.environ.get("BENCH_VM_ACCEL") else os.environ["BENCH_VM_ACCEL"]))
    finally:
        vm.stop()


FIGURES = [("vm", fig_vm)]
