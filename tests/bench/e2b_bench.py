"""e2b_bench.py - the `make bench` figures of issue 23: the real npm `e2b` SDK
(tests/e2b/bench.mjs, installed by `npm ci` in tests/e2b: make bench does)
against sbx's own exec route, in the same run.

Imported by tests/bench/bench.py, which owns the daemons (a Bench: its api at
b.api_addr with operator key b.akey; b.exec_npc runs argv through the api's
exec route). The SDK is configured with E2B_API_URL, E2B_SANDBOX_URL and
E2B_API_KEY only, as a platform would.

  e2b   commands.run('true') through the SDK (Connect server stream on
        /e2b/envd) vs POST …/sandbox/exec (SSE) of the same sandbox, in
        alternating rounds: p50, paired ratio (target ≤ 2×); then cold
        starts: Sandbox.create + the first commands.run('true') of a new
        sandbox, p50 (target ≤ 0.3 s).

Knobs: BENCH_E2B_ROUNDS [30] warm rounds per side, BENCH_E2B_COLD [8] cold
starts. Never asserts: a figure that misses is reported as missed.
"""

import json
import os
import statistics
import subprocess

E2B = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "e2b"))
NODE = "/usr/bin/node"


def env_int(name, dflt):
    v = os.environ.get(name, "")
    return int(v) if v.strip() else dflt


def p50(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100.0
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


class SDK:
    """tests/e2b/bench.mjs as a child: one request word in, one JSON line out."""

    def __init__(self, b):
        if not os.path.exists(os.path.join(E2B, "node_modules", "e2b")):
            raise RuntimeError("tests/e2b/node_modules is missing: make bench runs npm ci there")
        base = "http://%s:%d" % b.api_addr
        env = {"PATH": "/usr/bin:/bin", "HOME": b.work,
               "E2B_API_URL": base + "/e2b", "E2B_SANDBOX_URL": base + "/e2b/envd",
               "E2B_API_KEY": b.akey}
        self.p = subprocess.Popen([NODE, os.path.join(E2B, "bench.mjs")], cwd=E2B, env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(os.path.join(b.work, "e2b-bench.stderr"), "w"),
                                  text=True)

    def ask(self, word):
        self.p.stdin.write(word + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("bench.mjs exited (%s) on %r" % (self.p.poll(), word))
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError("bench.mjs %s: %s" % (word, r["error"]))
        return r

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def fig_e2b(b, check_exit0):
    rounds = env_int("BENCH_E2B_ROUNDS", 6 if os.environ.get("BENCH_QUICK") else 30)
    colds = env_int("BENCH_E2B_COLD", 8)
    sdk = SDK(b)
    try:
        npc = sdk.ask("create")["id"]

        def api_rt():
            r = b.exec_npc(npc, ["true"])
            check_exit0(r, "api exec in E2B sandbox %s" % npc)
            return r["ns"] / 1e6
        methods = [("sdk", lambda: sdk.ask("run")["ms"]), ("api", api_rt)]
        res = {"sdk": [], "api": []}
        for r in range(rounds + 2):
            order = methods if r % 2 == 0 else methods[::-1]   # alternate: drift cancels
            for m, fn in order:
                t = fn()
                if r >= 2:
                    res[m].append(t)
        sdk.ask("kill")
        ratio = p50([a / c for a, c in zip(res["sdk"], res["api"])])
        b.row("E2B SDK `commands.run('true')` (Connect stream via /e2b/envd; start → exit)",
              "%.1f ms (p99 %.1f)" % (p50(res["sdk"]), pct(res["sdk"], 99)),
              "sbx exec route (SSE), same sandbox, %.1f ms (p99 %.1f)"
              % (p50(res["api"]), pct(res["api"], 99)),
              "%.2f× (paired; of medians %.2f×)" % (ratio, p50(res["sdk"]) / p50(res["api"])),
              "≤ 2 × sbx's exec route", ratio <= 2.0)
        cold = [sdk.ask("cold") for _ in range(colds)]
        tot = [c["ms"] for c in cold]
        b.row("E2B SDK create → first command (`Sandbox.create` + `commands.run('true')`, "
              "a new sandbox each), %d rounds" % colds,
              "%.0f ms (p99 %.0f)" % (p50(tot), pct(tot, 99)), "—", "—",
              "p50 ≤ 0.3 s cold", p50(tot) <= 300.0)
        b.note("E2B create → first command, split (medians): Sandbox.create %.0f ms, first "
               "commands.run('true') %.0f ms; warm commands.run('true') %.1f ms. For reference "
               "(issue 23): ComputeSDK's 2026 leaderboard, Daytona 0.11 s, E2B 0.44 s."
               % (p50([c["create_ms"] for c in cold]), p50([c["first_ms"] for c in cold]),
                  p50(res["sdk"])))
    finally:
        sdk.close()


FIGURES = [("e2b", fig_e2b)]
