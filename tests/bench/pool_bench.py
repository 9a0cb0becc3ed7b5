"""pool_bench.py - the `make bench` figure of issue 25 item 3 (the warm pool, adr/0067).

Imported by tests/bench/bench.py, which owns the runtime and its broker
(b.bconn, cold ensures there). This figure starts a second sandbox-broker
on the same runtime with `warm_pool` members of the default image and its
own name prefix ("pb-", so neither broker's sweep or list sees the other's),
and alternates, in the same run:

  pool   PUT /v1/sandboxes/NEW on the pool broker once its pool is full
         (a claim: the member's container renamed), against
         PUT /v1/sandboxes/NEW on the bench's broker (a cold ensure: volume,
         /work owner step, create, start), both at the broker's socket with
         a keep-alive client; p50 of each and the ratio. Each claimed and
         each cold sandbox is destroyed after its round; the next claim waits
         for the refill (never timed).

At the end the pool broker is started once more with warm_pool 0, which
removes its members (the drain), and stopped.

Knobs: BENCH_POOL_ROUNDS [10; 4 with BENCH_QUICK], BENCH_POOL_SIZE [2].
BENCH_WARM_POOL=N (bench.py) starts the bench's own broker with warm_pool N,
so the other figures' new sandboxes (the e2b create rows) claim; this figure
then notes that broker's claims and misses instead of measuring (its cold
baseline would be claims too).
Never asserts: a figure that misses is reported as missed.
"""

import os
import re
import signal
import subprocess
import time

POOL_PREFIX = "pb-"


def _env_int(name, dflt):
    v = os.environ.get(name, "")
    return int(v) if v.strip() else dflt


def _ready(conn):
    st, out = conn.request("GET", "/metrics")
    if st != 200:
        raise RuntimeError("pool broker /metrics: %d" % st)
    m = re.search(rb'^sbx_broker_warm_pool_members\{state="ready"\} (\d+)$', out, re.M)
    return int(m.group(1)) if m else -1


def _claims(conn):
    st, out = conn.request("GET", "/metrics")
    m = re.search(rb"^sbx_broker_warm_pool_claims_total (\d+)$", out, re.M)
    return int(m.group(1)) if m else -1


def _wait(pred, what, limit=180):
    end = time.time() + limit
    while not pred():
        if time.time() > end:
            raise RuntimeError("pool bench: %s did not happen within %d s" % (what, limit))
        time.sleep(0.05)


def _start(b, size, conn_cls):
    w = b.work
    args = [os.path.join(b.build, "sandbox-broker"),
            "--listen", "unix:" + os.path.join(w, "pbroker.sock"),
            "--runtime", "unix:" + b.rsock,
            "--token-file", os.path.join(w, "token"),
            "--state-dir", os.path.join(w, "pbstate"),
            "--image", "sbx-test:latest", "--name-prefix", POOL_PREFIX,
            "--pids", "1024", "--pids-max", "1024", "--max-sandboxes", "50",
            "--warm-pool", str(size),
            "--log-level", "warn", "--log-file", os.path.join(w, "pbroker.log")]
    b.spawn("pbroker", args)
    conn = conn_cls(os.path.join(w, "pbroker.sock"), [("Authorization", "Bearer " + b.token)])
    b.wait_ok(lambda: conn.json("GET", "/v1/health"), "pbroker")
    return conn


def _stop(b):
    p = b.procs.pop("pbroker", None)
    if p is not None and p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def fig_pool(b, conn_cls, med, pct):
    if os.environ.get("BENCH_WARM_POOL"):
        # The bench's own broker ran with a pool (BENCH_WARM_POOL): say how
        # many of its new sandboxes (setup, e2b creates, ...) were claims.
        st, out = b.bconn.request("GET", "/metrics")
        got = dict((k.decode(), int(v)) for k, v in re.findall(
            rb'^(sbx_broker_warm_pool_(?:claims_total|misses_total\{reason="\w+"\})) (\d+)$',
            out, re.M))
        b.note("BENCH_WARM_POOL=%s on the bench's broker: %r" % (os.environ["BENCH_WARM_POOL"], got))
        # Its ensures are claims now, not the cold baseline this figure needs.
        b.row("warm pool claim vs cold ensure", "not measured: BENCH_WARM_POOL is set (the "
              "bench's broker claims too)", "—", "—", "—")
        return
    quick = bool(os.environ.get("BENCH_QUICK"))
    rounds = _env_int("BENCH_POOL_ROUNDS", 4 if quick else 10)
    size = _env_int("BENCH_POOL_SIZE", 2)
    pc = _start(b, size, conn_cls)
    # A connection of its own to the bench's broker for the cold ensures:
    # the bench's b.bconn may have been closed as idle during an earlier
    # long figure (a stream), which then fails with EPIPE here.
    bc = conn_cls(b.bsock, [("Authorization", "Bearer " + b.token)])
    claim, cold = [], []
    try:
        for i in range(rounds + 1):
            _wait(lambda: _ready(pc) == size, "the pool's refill")
            for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                name = "pool-%d-%d" % (i, which)
                conn = pc if which == 0 else bc
                before = _claims(pc)
                t0 = time.perf_counter_ns()
                conn.json("PUT", "/v1/sandboxes/" + name, {"egress": False})
                t = (time.perf_counter_ns() - t0) / 1e6
                if which == 0 and _claims(pc) != before + 1:
                    raise RuntimeError("pool bench: ensure %s was not a claim" % name)
                conn.json("DELETE", "/v1/sandboxes/" + name)
                if i >= 1:   # the first round warms
                    (claim if which == 0 else cold).append(t)
    finally:
        bc.close()
        _stop(b)
        # The drain: a start with warm_pool 0 removes the members.
        try:
            pc = _start(b, 0, conn_cls)
            _wait(lambda: _ready(pc) == 0 and not [
                c for c in b.rawq({"op": "req", "method": "GET",
                                   "path": "/v1.41/containers/json?all=1"}).get("body") or []
                if any(n.startswith("/" + POOL_PREFIX + "pool.") for n in c.get("Names", []))],
                "the drain", 120)
        except Exception as e:  # reported, never hides the figure
            b.note("pool bench: the drain did not finish: %s" % e)
        _stop(b)
    p50, q50 = med(claim), med(cold)
    b.row("ensure of a new sandbox claimed from the warm pool (warm_pool %d, container "
          "renamed; adr/0067) vs a cold ensure, at the broker, %d rounds" % (size, rounds),
          "p50 %.1f ms, p99 %.1f ms" % (p50, pct(claim, 99)),
          "cold ensure p50 %.0f ms, p99 %.0f ms" % (q50, pct(cold, 99)),
          "%.3f×" % (p50 / q50), "claim p50 ≤ 50 ms", p50 <= 50.0)
