"""measure_stream - 1 GiB of exec stdout through sandbox-broker's NDJSON stream, per runtime.

usage: measure_stream.py ENVFILE [ROUNDS] [RUNTIMES]
  ENVFILE   DIR/env from `tests/harness/runtimes.sh up DIR`
  ROUNDS    runs per runtime (default 3)
  RUNTIMES  comma list (default: every runtime in ENVFILE)
SBX_BUILDS (comma list of build dirs, default build/out) picks the builds.
Per runtime, starts one broker per build (output cap 2 GiB, the helper next
to its broker), ensures a sandbox for each, then ROUNDS times runs
`head -c 1073741824 /dev/urandom` through each build in turn (interleaved,
so a noisy shared machine hits both alike), reads the NDJSON until EOF
counting raw bytes, checks the last event is exit 0 without truncation and
prints wall seconds, MiB/s of payload and the broker's CPU seconds.
Used for adr/0007.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import brokerfix  # noqa: E402

GIB = 1 << 30


def load_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            if k:
                env[k] = v
    return env


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(client, sid):
    t0 = time.monotonic()
    conn, r = client.exec_open(sid, ["head", "-c", str(GIB), "/dev/urandom"],
                               timeout_ms=300000, timeout=600)
    if r.status != 200:
        raise RuntimeError("exec -> %d %r" % (r.status, r.read()[:300]))
    raw = 0
    tail = b""
    while True:
        data = r.read1(1 << 20)
        if not data:
            break
        raw += len(data)
        tail = (tail + data)[-4096:]
    took = time.monotonic() - t0
    conn.close()
    last = json.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    if last.get("type") != "exit" or last.get("code") != 0 or last.get("truncated"):
        raise RuntimeError("stream did not end in a clean exit: %r" % last)
    return took, raw


def main():
    env = load_env(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rts = sys.argv[3].split(",") if len(sys.argv) > 3 else env["SBX_RUNTIMES"].split(",")
    builds = os.environ.get("SBX_BUILDS", os.path.join(brokerfix.REPO, "build", "out")).split(",")
    for rt in rts:
        sock = brokerfix.unix_path(env["SBX_%s_HOST" % rt.upper()])
        runs = []
        try:
            for i, build in enumerate(builds):
                os.environ["SBX_BUILD"] = build
                b = brokerfix.Broker(sock, env["SBX_TEST_IMAGE"],
                                     limits={"output_cap": 2 * GIB,
                                             "exec_timeout_max_ms": 600000,
                                             "memory": 256 * brokerfix.MiB},
                                     name="measure")
                b.start()
                c = b.client(timeout=600)
                sid = "measure-%d-%d" % (os.getpid(), i)
                runs.append((build, b, c, sid))
                r = c.ensure(sid)
                if r.status != 200:
                    raise RuntimeError("ensure -> %r" % r)
            for n in range(rounds):
                for build, b, c, sid in runs:
                    cpu0 = cpu_s(b.proc.pid)
                    took, raw = one_round(c, sid)
                    cpu = cpu_s(b.proc.pid) - cpu0
                    print("%-6s %-12s round %d: %6.2f s, %4.0f MiB/s payload, broker CPU %5.2f s"
                          " (%.0f MiB NDJSON)"
                          % (rt, os.path.basename(build.rstrip("/")), n + 1, took,
                             GIB / took / (1 << 20), cpu, raw / (1 << 20)), flush=True)
        finally:
            for build, b, c, sid in runs:
                c.destroy(sid)
                b.stop()
                b.cleanup()

if __name__ == "__main__":
    main()
