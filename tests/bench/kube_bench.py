"""kube_bench - driver = kubernetes against tests/k8s's fake (adr/0072), figures as
ratios measured in one run: sandboxes created per second (N ensures at once through
a real sandbox-broker), ensure -> first exec, and an exec's round trip over the
sandbox's ONE long-lived pods/exec (the agent channel, through the broker) against a
fresh pods/exec per operation (what a driver without the agent would pay; issue 27
lesson 7). Needs a runtime: SBX_RUNTIME_HOST (e.g. from tests/harness/runtimes.sh up),
SBX_TEST_IMAGE; knobs BENCH_KUBE_N (default 20), BENCH_KUBE_EXECS (default 40).
Prints one Markdown table. Touches only its fake cluster and what it makes on the runtime."""

import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
os.environ.setdefault("SBX_TEST_OUT", "/tmp/sbx-kube-bench")
os.makedirs(os.environ["SBX_TEST_OUT"], exist_ok=True)

import sbxtest  # noqa: E402
import test_kube_driver as tk  # noqa: E402


def main():
    n = int(os.environ.get("BENCH_KUBE_N", "20"))
    m = int(os.environ.get("BENCH_KUBE_EXECS", "40"))
    host = os.environ["SBX_RUNTIME_HOST"]
    tk.helper_image(sbxtest.Engine(host))
    fake = tk.Fake(host)
    broker = tk.KubeBroker(fake, sbxtest.test_image())
    broker.start()
    rows = []
    try:
        c = broker.client(timeout=300)
        ids = ["kb-%d-%d" % (os.getpid(), i) for i in range(n)]
        errs = []

        def ens(sid):
            r = broker.client(timeout=300).ensure(sid)
            if r.status != 200:
                errs.append((sid, r.status, r.body[:300]))

        t0 = time.monotonic()
        ths = [threading.Thread(target=ens, args=(s,)) for s in ids]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall = time.monotonic() - t0
        for e in errs:
            print("ensure failed: %r" % (e,), file=sys.stderr)
        rows.append(("create %d sandboxes at once (PVC+NetworkPolicy+Pod, to Running)" % n,
                     "%.1f s, %.2f sandboxes/s, %d failed" % (wall, n / wall, len(errs))))
        sid = "kb-first-%d" % os.getpid()
        t0 = time.monotonic()
        c.ensure(sid)
        t1 = time.monotonic()
        c.exec(sid, ["true"])
        t2 = time.monotonic()
        rows.append(("ensure -> first exec (new pod; first exec opens the channel)",
                     "ensure %.0f ms, first exec %.0f ms" % ((t1 - t0) * 1e3, (t2 - t1) * 1e3)))
        chan = []
        for _ in range(m):
            a = time.monotonic()
            assert c.exec(sid, ["true"]).code == 0
            chan.append((time.monotonic() - a) * 1e3)
        api = fake.admin.__class__(fake.info["server"], fake.info["ca"],
                                   fake.info["tokens"]["broker"])
        fresh = []
        for _ in range(m):
            a = time.monotonic()
            code = api.exec(fake.ns, "sbx-" + sid, ["true"], container="sandbox")[0]
            assert code == 0, code
            fresh.append((time.monotonic() - a) * 1e3)
        mc, mf = statistics.median(chan), statistics.median(fresh)
        rows.append(("exec `true` round trip, long-lived channel via the broker (median of %d)" % m,
                     "%.2f ms" % mc))
        rows.append(("exec `true` round trip, a fresh pods/exec per op (median of %d)" % m,
                     "%.2f ms" % mf))
        rows.append(("fresh / long-lived", "%.1fx" % (mf / mc)))
        for s in ids + [sid]:
            c.destroy(s)
    finally:
        broker.stop()
        broker.cleanup()
        fake.stop()
    print("| figure (driver = kubernetes on tests/k8s's fake, %s) | value |" %
          os.environ.get("SBX_TEST_RUNTIME", "runtime"))
    print("|---|---|")
    for k, v in rows:
        print("| %s | %s |" % (k, v))


if __name__ == "__main__":
    main()
