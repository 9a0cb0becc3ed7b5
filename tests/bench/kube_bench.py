"""kube_bench - driver = kubernetes against tests/k8s's fake (adr/0072), figures as
ratios measured in one run: sandboxes created per second (N ensures at once through
a real sandbox-broker), ensure -> first exec, and an exec's round trip over the
sandbox's ONE long-lived pods/exec (the agent channel, through the broker) against a
fresh pods/exec per operation (what a driver without the agent would pay; issue 27
lesson 7). Needs a runtime: SBX_RUNTIME_HOST (e.g. from tests/harness/runtimes.sh up),
SBX_TEST_IMAGE; knobs BENCH_KUBE_N (default 20; 0: skip the figures that need a
runtime), BENCH_KUBE_EXECS (default 40). First, with no runtime: BENCH_KUBE_CREATE
(default 200; 0: skip) ensures at once through a broker on a fake with no kubelet,
timed until the API server holds every sandbox's PVC, NetworkPolicy and Pod (issue
27: "200 sandboxes (PVC + Pod) were created at 50/s" on the real server).
Prints one Markdown table. Touches only its fake clusters and what it makes on the runtime."""

import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
os.environ.setdefault("SBX_TEST_OUT", "/tmp/sbx-kube-bench")
os.makedirs(os.environ["SBX_TEST_OUT"], exist_ok=True)

import brokerfix  # noqa: E402
import sbxtest  # noqa: E402
import test_kube_driver as tk  # noqa: E402


class APIOnly(tk.Fake):
    """tests/k8s/kfake.py with no kubelet: pods stay Pending (no node)."""

    def __init__(self):
        import json
        import subprocess
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="kfake-api-", dir=sbxtest.out_dir())
        self.log = open(os.path.join(self.dir, "kfake.log"), "ab")
        self.proc = subprocess.Popen([sys.executable, os.path.join(tk.K8S, "kfake.py"), "--dir", self.dir],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        path = os.path.join(self.dir, "kfake.json")
        sbxtest.wait_until(lambda: os.path.exists(path), 60, "kfake.json")
        with open(path) as f:
            self.info = json.load(f)
        self.ns = self.info["namespace"]
        self.admin = tk.Client(self.info["server"], self.info["ca"], self.info["tokens"]["admin"])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)
        self.log.close()


def create_rate(n):
    """n ensures at once; seconds until n pods, n PVCs and n policies exist."""
    fake = APIOnly()
    broker = tk.KubeBroker(fake, "localhost/sbx-kube-bench:none")
    broker.limits["max_sandboxes"] = max(n, 40)
    brokerfix.write_config(broker.config, broker.limits)
    broker.start()
    base = "/api/v1/namespaces/%s/" % fake.ns
    counts = {}

    def count():
        for what, path in (("pods", base + "pods"), ("pvcs", base + "persistentvolumeclaims"),
                           ("policies", "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies" % fake.ns)):
            counts[what] = len(fake.admin.get(path + "?labelSelector=sbx.dev%2Fmanaged%3Dtrue")["items"])
        return counts["pods"] >= n and counts["pvcs"] >= n and counts["policies"] >= n

    try:
        ids = ["kc-%d-%d" % (os.getpid(), i) for i in range(n)]
        ths = [threading.Thread(target=lambda s=s: broker.client(timeout=300).ensure(s), daemon=True)
               for s in ids]
        t0 = time.monotonic()
        for t in ths:
            t.start()
        sbxtest.wait_until(count, 300, "%d sandboxes' objects" % n, interval=0.02)
        wall = time.monotonic() - t0
    finally:
        broker.stop()
        broker.cleanup()
        fake.stop()
    return ("create %d sandboxes at once through the broker (PVC + NetworkPolicy + Pod "
            "created; API server only, no kubelet)" % n,
            "%.2f s, %.1f sandboxes/s" % (wall, n / wall))


def pool_claims(fake, k):
    """warm_pool = 2: k ensures of new ids, each once the pool is full again."""
    broker = tk.KubeBroker(fake, sbxtest.test_image())
    argv = broker.argv
    broker.argv = lambda: argv() + ["--warm-pool", "2"]
    broker.start()
    sel = "/api/v1/namespaces/%s/pods?labelSelector=sbx.dev%%2Fpool%%3Dtrue" % fake.ns

    def full():
        items = fake.admin.get(sel)["items"]
        return len(items) == 2 and all(i["status"].get("phase") == "Running" for i in items)

    ms, refill, ids = [], [], []
    try:
        c = broker.client(timeout=300)
        for i in range(k):
            sbxtest.wait_until(full, 300, "the pool full", interval=0.05)
            sid = "kw-%d-%d" % (os.getpid(), i)
            a = time.monotonic()
            assert c.ensure(sid).status == 200
            ms.append((time.monotonic() - a) * 1e3)
            ids.append(sid)
            a = time.monotonic()
            sbxtest.wait_until(full, 300, "the pool refilled", interval=0.05)
            refill.append(time.monotonic() - a)
        for sid in ids:
            c.destroy(sid)
    finally:
        broker.stop()
        broker.cleanup()
    return ("ensure of a new sandbox claiming a warm pool member (warm_pool = 2, median of %d)" % k,
            "%.0f ms (pool full again %.1f s later)" % (statistics.median(ms), statistics.median(refill)))


def main():
    n = int(os.environ.get("BENCH_KUBE_N", "20"))
    m = int(os.environ.get("BENCH_KUBE_EXECS", "40"))
    nc = int(os.environ.get("BENCH_KUBE_CREATE", "200"))
    pre = [create_rate(nc)] if nc > 0 else []
    if n == 0:
        print_rows(pre)
        return
    host = os.environ["SBX_RUNTIME_HOST"]
    tk.helper_image(sbxtest.Engine(host))
    ext = os.environ.get("SBX_KUBE_EXTERNAL")  # a real API server (tests/k8s/README.md)
    fake = tk.External(ext, host) if ext else tk.Fake(host)
    broker = tk.KubeBroker(fake, sbxtest.test_image())
    broker.start()
    rows = pre
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
    try:
        rows.append(pool_claims(fake, int(os.environ.get("BENCH_KUBE_CLAIMS", "3"))))
    finally:
        fake.stop()
    print_rows(rows)


def print_rows(rows):
    where = ("a real API server (SBX_KUBE_EXTERNAL; a create-at-once row without a runtime is "
             "the API-only fake's)" if os.environ.get("SBX_KUBE_EXTERNAL") else "tests/k8s's fake")
    print("| figure (driver = kubernetes on %s, %s) | value |" % (
          where, os.environ.get("SBX_TEST_RUNTIME", "runtime")))
    print("|---|---|")
    for k, v in rows:
        print("| %s | %s |" % (k, v))


if __name__ == "__main__":
    main()
