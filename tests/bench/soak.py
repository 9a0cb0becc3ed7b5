#!/usr/bin/python3
"""soak.py - the soak of `make bench` (not of `make check`): mixed load from
CLIENTS clients over SANDBOXES sandboxes through sandbox-api and
sandbox-broker for SECONDS, then the figures a leak or a drift would move.

Each client loops: pick one of the sandboxes (an NPC) at random, pick an
operation by weight (ensure, exec via SSE, file write, file read, list,
status, stop, destroy) and run it on a keep-alive connection (exec on its
own). Every answer is counted by operation and by status + error code; an
error the operation can meet by design (exec on a sandbox another client just
stopped: 409 not_running, or destroyed: 404) is counted, not hidden.

Reported (a section of docs/bench.md between <!-- soak --> markers, replaced
on each run): requests served, errors by code, RSS and open fds of both
daemons at start (after set-up) and at the end (after the load stopped and
the daemons idled 5 s), their growth (target <= 10 %), and orphans: after
destroying every sandbox through the api, labelled containers and volumes
left in the runtime (target 0; the shared helper volume of adr/0009 is kept
by design and not counted).

Environment: BENCH_SOAK_SECONDS (1800), BENCH_SOAK_CLIENTS (20),
BENCH_SOAK_SANDBOXES (20). Usage: see tests/bench/run.sh (BENCH_SOAK=only
runs the soak alone, BENCH_SOAK=0 skips it).
"""

import argparse
import collections
import json
import os
import random
import re
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Bench, Conn, log, proc_rss, stream  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from engineapi import Engine  # noqa: E402


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def env_int(name, dflt):
    v = os.environ.get(name)
    return int(v) if v else dflt


def err_of(body):
    try:
        return json.loads(body)["error"]["code"]
    except Exception:
        return "-"


class Soak:
    def __init__(self, a):
        self.a = a
        self.b = Bench(a)
        self.count = collections.Counter()      # (op, status, code) -> n
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def npc(self, i):
        return "soak-%d" % i

    def note(self, op, status, code):
        with self.lock:
            self.count[(op, status, code)] += 1

    def client(self, k):
        rng = random.Random(self.a.seed * 1000 + k)
        conn = Conn(self.b.api_addr, [("Authorization", "Bearer " + self.b.akey)])
        ops = (["ensure"] * 3 + ["exec"] * 6 + ["write"] * 3 + ["read"] * 3 +
               ["list"] * 3 + ["status"] * 3 + ["stop"] + ["destroy"])
        auth = [("Authorization", "Bearer " + self.b.akey)]
        while not self.stop.is_set():
            n = self.npc(rng.randrange(self.a.sandboxes))
            base = "/api/v1/npcs/%s/sandbox" % n
            op = rng.choice(ops)
            try:
                if op == "exec":
                    r = stream(self.b.api_addr, base + "/exec", auth,
                               {"argv": ["sh", "-c", "echo soak; head -c %d /dev/zero | wc -c"
                                         % rng.randrange(1, 65536)]}, "sse")
                    st = r["status"]
                    code = "-" if st != 200 else (
                        "exit0" if r["term"] and '"code":0' in r["term"] else "stream:" +
                        (re.sub(r"\s+", " ", r["term"] or "none")[:60]))
                    body = r["head"].split(b"\r\n\r\n", 1)[-1]
                    if st != 200:
                        code = err_of(body)
                    self.note(op, st, code)
                    continue
                if op == "ensure":
                    st, body = conn.request("PUT", base, b"")
                elif op == "write":
                    st, body = conn.request("PUT", base + "/files?path=/work/f%d" % rng.randrange(4),
                                            os.urandom(rng.randrange(1, 32768)),
                                            "application/octet-stream")
                elif op == "read":
                    st, body = conn.request("GET", base + "/files?path=/work/f%d" % rng.randrange(4))
                elif op == "list":
                    st, body = conn.request("GET", base + "/list?path=" + urllib.parse.quote("/work"))
                elif op == "status":
                    st, body = conn.request("GET", base)
                elif op == "stop":
                    st, body = conn.request("POST", base + "/stop", b"")
                else:
                    st, body = conn.request("DELETE", base)
                self.note(op, st, "-" if st < 300 else err_of(body))
            except (OSError, ValueError, IndexError) as e:
                conn.close()
                self.note(op, 0, type(e).__name__)
                time.sleep(0.1)

    def figures(self):
        b = self.b
        out = {}
        for name in ("broker", "api"):
            pid = b.pid(name)
            out[name] = (proc_rss(pid), fds(pid))
        return out

    def orphans(self):
        eng = Engine(self.a.runtime_sock)
        conts = eng.containers("io.sbx.managed=true")
        vols = eng.volumes("io.sbx.managed=true")
        # the helper volume (adr/0009) is shared by every sandbox and kept
        # by design: not an orphan
        vols = [v for v in vols if "io.sbx.helper-sha256" not in (v.get("Labels") or {})]
        return len(conts), len(vols)

    def run(self):
        b = self.b
        t0 = time.time()
        b.start_daemons()
        for i in range(self.a.sandboxes):
            b.aconn.json("POST", "/api/v1/npcs", {"name": self.npc(i)})
            b.aconn.json("PUT", "/api/v1/npcs/%s/sandbox" % self.npc(i))
        # warm-up: a minute of load (or a tenth of the soak) before "start"
        warm = min(60, self.a.seconds / 10)
        threads = [threading.Thread(target=self.client, args=(k,), daemon=True)
                   for k in range(self.a.clients)]
        for t in threads:
            t.start()
        time.sleep(warm)
        start = self.figures()
        with self.lock:
            self.count.clear()
        log("soak: warm after %.0f s, start %r; running %d s" % (warm, start, self.a.seconds))
        t_load = time.time()
        while time.time() - t_load < self.a.seconds:
            time.sleep(min(30, self.a.seconds))
            with self.lock:
                done = sum(self.count.values())
            log("soak: %.0f s, %d requests" % (time.time() - t_load, done))
        self.stop.set()
        for t in threads:
            t.join(120)
        load_s = time.time() - t_load
        time.sleep(5)
        end = self.figures()
        # destroy everything through the api, then look in the runtime
        # (a fresh connection: the set-up one idled past the api's timeout)
        conn = Conn(b.api_addr, [("Authorization", "Bearer " + b.akey)])
        for i in range(self.a.sandboxes):
            for attempt in range(3):
                try:
                    st, body = conn.request("DELETE", "/api/v1/npcs/%s/sandbox" % self.npc(i))
                    break
                except (OSError, ConnectionError):
                    conn.close()
            else:
                raise RuntimeError("cannot destroy %s" % self.npc(i))
            if st != 200:
                raise RuntimeError("destroy %s -> %d %r" % (self.npc(i), st, body[:200]))
        nconts, nvols = self.orphans()
        self.write(start, end, load_s, nconts, nvols, time.time() - t0)
        b.stop_daemons()
        growth_ok = all(end[d][0] <= start[d][0] * 1.10 and end[d][1] <= start[d][1] * 1.10
                        for d in start)
        return 0 if growth_ok and nconts == 0 and nvols == 0 else 1

    def write(self, start, end, load_s, nconts, nvols, total_s):
        total = sum(self.count.values())
        by_op = collections.Counter()
        codes = collections.Counter()
        for (op, st, code), n in self.count.items():
            by_op[op] += n
            if not (200 <= st < 300 and code in ("-", "exit0")):
                codes["%s %s %s" % (op, st, code)] += n
        lines = [
            "<!-- soak -->",
            "## Soak (`make bench`, tests/bench/soak.py)",
            "",
            "* Date: %s; runtime %s; %d clients over %d sandboxes through sandbox-api and"
            % (time.strftime("%Y-%m-%d %H:%M:%S %Z"), self.a.runtime, self.a.clients,
               self.a.sandboxes),
            "  sandbox-broker; load %.0f s (BENCH_SOAK_SECONDS=%d%s) after a warm-up; whole run %.0f s."
            % (load_s, self.a.seconds, "" if self.a.seconds >= 1800 else
               ": a shortened soak, the full one is 1800 s", total_s),
            "* Requests served: %d (%.1f/s): %s." % (total, total / max(load_s, 1), ", ".join(
                "%s %d" % kv for kv in sorted(by_op.items()))),
            "* Answers other than success, by operation, status and code (expected ones"
            " included: a client may exec on a sandbox another just stopped or destroyed):",
            "",
        ] + (["  * %s: %d" % kv for kv in sorted(codes.items())] or ["  * none"]) + [
            "",
            "| daemon | RSS start | RSS end | growth | fds start | fds end | growth | target |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for d in ("broker", "api"):
            (r0, f0), (r1, f1) = start[d], end[d]
            ok = r1 <= r0 * 1.10 and f1 <= f0 * 1.10
            lines.append("| %s | %.1f MiB | %.1f MiB | %+.1f %% | %d | %d | %+.1f %% | ≤ 10 %%: %s |" % (
                d, r0 / 1048576, r1 / 1048576, 100.0 * (r1 - r0) / r0, f0, f1,
                100.0 * (f1 - f0) / f0, "yes" if ok else "NO"))
        lines += [
            "",
            "* Orphans after destroying every sandbox through the api: %d containers, %d volumes"
            " labelled io.sbx.managed, the shared helper volume not counted (target 0): %s." % (
                nconts, nvols, "yes" if nconts == 0 and nvols == 0 else "NO"),
            "<!-- /soak -->",
        ]
        section = "\n".join(lines) + "\n"
        print(section)
        text = open(self.a.out).read() if os.path.exists(self.a.out) else ""
        m = re.search(r"<!-- soak -->.*?<!-- /soak -->\n?", text, re.S)
        text = text[:m.start()] + section + text[m.end():] if m else text.rstrip("\n") + "\n\n" + section
        with open(self.a.out, "w") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--runtime-sock", required=True)
    ap.add_argument("--runtime", default="podman")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    a.seconds = env_int("BENCH_SOAK_SECONDS", 1800)
    a.clients = env_int("BENCH_SOAK_CLIENTS", 20)
    a.sandboxes = env_int("BENCH_SOAK_SANDBOXES", 20)
    a.seed = env_int("BENCH_SOAK_SEED", int(time.time()))
    log("soak: seed %d (BENCH_SOAK_SEED repeats the choices)" % a.seed)
    s = Soak(a)
    try:
        return s.run()
    finally:
        s.b.stop_daemons(hard=True)


if __name__ == "__main__":
    sys.exit(main())
