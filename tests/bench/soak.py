#!/usr/bin/python3
"""soak.py - the soak of `make bench` (not of `make check`): mixed load from
CLIENTS clients over SANDBOXES sandboxes through sandbox-api and
sandbox-broker for SECONDS, then the figures a leak or a drift would move.

Each client loops: pick one of the sandboxes (an NPC) at random, pick an
operation by weight (ensure, exec via SSE, resource exec with 1-3 viewers of
its events that drop after a random number of bytes, file write, file read,
list, status, stop, destroy, and "race": one of exec/rexec/write/read/list
with a DELETE of the same sandbox sent 0-60 ms after it) and run it on a
keep-alive connection (streams on their own). The broker's idle reaper is on
(idle_timeout 5s, reap_interval 1s: with ~0.5 uses a second per sandbox it
stops some). Every answer is counted by operation and by status + error code;
an error the operation can meet by design (exec on a sandbox another client
just stopped: 409 not_running, or destroyed: 404) is counted, not hidden.
The operation that raced a destroy must answer 2xx, 404 or 409 - never 502
(issue 24 item 10).

Reported (a section of the --out file between <!-- soak-RUNTIME --> markers,
replaced on each run): requests served, every answer other than success by
code, the race answers, RSS and open fds of both daemons at start and at the
end, both taken with the load paused and the daemons idle 5 s (start: after a
warm-up; end: after the load), their growth (target <= 10 %), and orphans:
after destroying every sandbox through the api, labelled containers and
volumes left in the runtime (target 0; the shared helper volume of adr/0009
is kept by design and not counted).

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
import shutil
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Bench, Conn, dial, log, proc_rss, req_bytes, stream  # noqa: E402
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
        self.go = threading.Event()             # cleared: clients pause
        self.go.set()
        self.active = 0                         # clients inside an operation
        self.reaped = 0                         # status replies saying "idle"

    def npc(self, i):
        return "soak-%d" % i

    def note(self, op, status, code):
        with self.lock:
            self.count[(op, status, code)] += 1

    def exec_sse(self, rng, base):
        auth = [("Authorization", "Bearer " + self.b.akey)]
        r = stream(self.b.api_addr, base + "/exec", auth,
                   {"argv": ["sh", "-c", "echo soak; head -c %d /dev/zero | wc -c"
                             % rng.randrange(1, 65536)]}, "sse")
        st = r["status"]
        code = "-" if st != 200 else (
            "exit0" if r["term"] and '"code":0' in r["term"] else "stream:" +
            (re.sub(r"\s+", " ", r["term"] or "none")[:60]))
        if st != 200:
            code = err_of(r["head"].split(b"\r\n\r\n", 1)[-1])
        return st, code

    def viewer(self, path, upto):
        """GET path (an exec's events) on its own socket, read up to upto
        bytes, then drop the connection without a goodbye; (status, code)."""
        s = dial(self.b.api_addr)
        try:
            s.settimeout(30)
            s.sendall(req_bytes("GET", path, [("Authorization", "Bearer " + self.b.akey)],
                                None, True))
            buf = b""
            while len(buf) < upto:
                c = s.recv(65536)
                if not c:
                    break
                buf += c
        finally:
            s.close()
        st = int(buf.split(b" ", 2)[1]) if buf.startswith(b"HTTP/") else 0
        return st, "-" if 200 <= st < 300 else err_of(buf.split(b"\r\n\r\n", 1)[-1])

    def rexec(self, rng, conn, base):
        """A resource exec (POST .../execs) printing a line every 20 ms for
        ~1 s, and 1-3 viewers of its events that drop after 200-4000 bytes;
        the exec runs on without them. Notes the viewers; returns the POST's."""
        st, body = conn.request("POST", base + "/execs", {"argv": [
            "sh", "-c", "i=0; while [ $i -lt 50 ]; do echo soak-$i; i=$((i+1)); sleep 0.02; done"]})
        if st != 201:
            return st, err_of(body)
        path = "%s/execs/%s/events" % (base, json.loads(body)["exec_id"])
        for _ in range(rng.randrange(1, 4)):
            try:
                vst, vcode = self.viewer(path, rng.randrange(200, 4000))
            except OSError as e:
                vst, vcode = 0, type(e).__name__
            self.note("viewer", vst, vcode)
        return st, "-"

    def one(self, op, rng, conn, base):
        """Run op on base; (status, code)."""
        if op == "exec":
            return self.exec_sse(rng, base)
        if op == "rexec":
            return self.rexec(rng, conn, base)
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
            if st == 200 and b'"stop_reason":"idle"' in body:
                with self.lock:
                    self.reaped += 1
        elif op == "stop":
            st, body = conn.request("POST", base + "/stop", b"")
        else:
            st, body = conn.request("DELETE", base)
        return st, "-" if st < 300 else err_of(body)

    def race(self, rng, conn, base):
        """One of exec/rexec/write/read/list on base with a DELETE of the
        same sandbox sent 0-60 ms later on another connection; notes both
        as race:OP and race:destroy."""
        op = rng.choice(["exec", "rexec", "write", "read", "list"])
        delay = rng.uniform(0, 0.06)
        res = {}

        def destroy():
            time.sleep(delay)
            c = Conn(self.b.api_addr, [("Authorization", "Bearer " + self.b.akey)])
            try:
                res["d"] = c.request("DELETE", base)
            except OSError as e:
                res["d"] = (0, type(e).__name__.encode())
            finally:
                c.close()
        t = threading.Thread(target=destroy)
        t.start()
        try:
            st, code = self.one(op, random.Random(rng.random()), conn, base)
        except (OSError, ValueError, IndexError) as e:
            conn.close()
            st, code = 0, type(e).__name__
        t.join()
        self.note("race:" + op, st, code)
        dst, dbody = res["d"]
        self.note("race:destroy", dst, "-" if 200 <= dst < 300 else
                  (err_of(dbody) if dst else dbody.decode()))

    def client(self, k):
        rng = random.Random(self.a.seed * 1000 + k)
        conn = Conn(self.b.api_addr, [("Authorization", "Bearer " + self.b.akey)])
        ops = (["ensure"] * 3 + ["exec"] * 5 + ["rexec"] * 2 + ["write"] * 3 + ["read"] * 3 +
               ["list"] * 3 + ["status"] * 3 + ["stop"] + ["destroy"] + ["race"])
        while not self.stop.is_set():
            if not self.go.is_set():
                conn.close()        # paused for the figures: hold no socket
                self.go.wait()
            n = self.npc(rng.randrange(self.a.sandboxes))
            base = "/api/v1/npcs/%s/sandbox" % n
            op = rng.choice(ops)
            with self.lock:
                self.active += 1
            try:
                if op == "race":
                    self.race(rng, conn, base)
                else:
                    self.note(op, *self.one(op, rng, conn, base))
            except (OSError, ValueError, IndexError) as e:
                conn.close()
                self.note(op, 0, type(e).__name__)
                time.sleep(0.1)
            finally:
                with self.lock:
                    self.active -= 1

    def quiet_figures(self):
        """Pause the clients, wait until none is inside an operation and the
        daemons idled 5 s, take the figures, resume."""
        self.go.clear()
        end = time.time() + 120
        while time.time() < end:
            with self.lock:
                if self.active == 0:
                    break
            time.sleep(0.1)
        time.sleep(5)
        f = self.figures()
        self.go.set()
        return f

    def count_log(self, what):
        try:
            with open(os.path.join(self.a.work, "broker.log"), errors="replace") as f:
                return sum(1 for ln in f if what in ln)
        except OSError:
            return -1

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
        start = self.quiet_figures()
        with self.lock:
            self.count.clear()
            self.reaped = 0
        log("soak: warm after %.0f s, start %r; running %d s" % (warm, start, self.a.seconds))
        t_load = time.time()
        self.samples = []                       # (s, broker RSS, api RSS) under load
        while time.time() - t_load < self.a.seconds:
            time.sleep(min(30, self.a.seconds))
            with self.lock:
                done = sum(self.count.values())
            f = self.figures()
            self.samples.append((time.time() - t_load, f["broker"][0], f["api"][0]))
            log("soak: %.0f s, %d requests, RSS broker %.1f MiB api %.1f MiB" % (
                time.time() - t_load, done, f["broker"][0] / 1048576, f["api"][0] / 1048576))
        self.stop.set()
        for t in threads:
            t.join(120)
        load_s = time.time() - t_load
        time.sleep(5)
        end = self.figures()
        self.reaped_log = self.count_log("reaped: idle sandbox stopped")
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
        race_ok = self.write(start, end, load_s, nconts, nvols, time.time() - t0)
        b.stop_daemons()
        growth_ok = all(end[d][0] <= start[d][0] * 1.10 and end[d][1] <= start[d][1] * 1.10
                        for d in start)
        return 0 if growth_ok and race_ok and nconts == 0 and nvols == 0 else 1

    def write(self, start, end, load_s, nconts, nvols, total_s):
        total = sum(self.count.values())
        by_op = collections.Counter()
        codes = collections.Counter()
        race = collections.Counter()
        for (op, st, code), n in self.count.items():
            by_op[op] += n
            if op.startswith("race:") and op != "race:destroy":
                race[st] += n
            if not (200 <= st < 300 and code in ("-", "exit0")):
                codes["%s %s %s" % (op, st, code)] += n
        race_n = sum(race.values())
        # 429: a per-principal cap (file ops, streams) the load reached, not
        # the race; what the target forbids is a 5xx (or no answer)
        race_ok = all(0 < st < 500 for st in race)
        lines = [
            "<!-- soak-%s -->" % self.a.runtime,
            "### Soak, %s (`make bench`, tests/bench/soak.py)" % self.a.runtime,
            "",
            "* Date: %s; runtime %s; %d clients over %d sandboxes through sandbox-api and"
            % (time.strftime("%Y-%m-%d %H:%M:%S %Z"), self.a.runtime, self.a.clients,
               self.a.sandboxes),
            "  sandbox-broker (idle reaper on: idle_timeout 5s, reap_interval 1s); load %.0f s"
            " (BENCH_SOAK_SECONDS=%d%s) after a warm-up; whole run %.0f s; seed %d."
            % (load_s, self.a.seconds, "" if self.a.seconds >= 1800 else
               ": a shortened soak, the full one is 1800 s", total_s, self.a.seed),
            "* Requests served: %d (%.1f/s): %s (viewer: SSE viewers of resource execs that"
            " dropped after 200-4000 bytes; race:OP: an operation with a DELETE of its sandbox"
            " sent 0-60 ms after it)." % (total, total / max(load_s, 1), ", ".join(
                "%s %d" % kv for kv in sorted(by_op.items()))),
            "* Sandboxes the idle reaper stopped: %d (broker log lines \"reaped: idle sandbox"
            " stopped\"); status replies that showed stop_reason idle: %d." % (
                self.reaped_log, self.reaped),
            "* Operations racing a destroy (target: 2xx, 404 or 409, never 502; 429 is a"
            " per-principal cap): %d, answered %s: %s."
            % (race_n, ", ".join("%d × %d" % (st, n) for st, n in sorted(race.items())) or "-",
               "yes" if race_ok else "NO"),
            "* Answers other than success, by operation, status and code (expected ones"
            " included: a client may exec on a sandbox another just stopped or destroyed):",
            "",
        ] + (["  * %s: %d" % kv for kv in sorted(codes.items())] or ["  * none"]) + [
            "",
            "RSS under load, every ~%d s (MiB): broker %s; api %s." % (
                max(1, int(len(self.samples) and self.samples[-1][0] / max(len(self.samples), 1))),
                " ".join("%.1f" % (x[1] / 1048576) for x in self.samples[::max(1, len(self.samples) // 12)]),
                " ".join("%.1f" % (x[2] / 1048576) for x in self.samples[::max(1, len(self.samples) // 12)])),
            "",
            "RSS and open fds, both taken with the load paused and the daemons idle 5 s"
            " (start: after the warm-up):",
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
            "<!-- /soak-%s -->" % self.a.runtime,
        ]
        section = "\n".join(lines) + "\n"
        print(section)
        text = open(self.a.out).read() if os.path.exists(self.a.out) else ""
        m = re.search(r"<!-- soak-%s -->.*?<!-- /soak-%s -->\n?" % (self.a.runtime, self.a.runtime),
                      text, re.S)
        text = text[:m.start()] + section + text[m.end():] if m else text.rstrip("\n") + "\n\n" + section
        with open(self.a.out, "w") as f:
            f.write(text)
        return race_ok


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
    # the idle reaper on, short enough to stop some of the sandboxes the
    # load leaves alone for 5 s; info level for its "reaped:" lines
    a.broker_extra = ["--idle-timeout", "5s", "--reap-interval", "1s", "--log-level", "info"]
    log("soak: seed %d (BENCH_SOAK_SEED repeats the choices)" % a.seed)
    s = Soak(a)
    try:
        return s.run()
    finally:
        s.b.stop_daemons(hard=True)
        keep = os.environ.get("BENCH_SOAK_KEEP")
        if keep:        # the daemons' logs outlive run.sh's work directory
            os.makedirs(keep, exist_ok=True)
            for n in ("broker.log", "api.log"):
                if os.path.exists(os.path.join(a.work, n)):
                    shutil.copy(os.path.join(a.work, n), os.path.join(keep, "%s-%s" % (a.runtime, n)))


if __name__ == "__main__":
    sys.exit(main())
