"""test_kube_pool - the kubernetes driver's warm pool (warm_pool, adr/0072
amendment of session 11) against tests/k8s's fake API server and test
kubelet through a real sandbox-broker: members are made ahead (pods and
PVCs labelled sbx.dev/pool, no sbx.dev/id), an ensure of a new sandbox
claims one (fast: no pod start), a claimed sandbox shows no file or
process of a sandbox before it, the pool refills, a claimed sandbox's
stop keeps its /work (its PVC found by label) and destroy removes it, the
pool's figures are the engine pool's /metrics names, and a broker
restarted with warm_pool = 0 deletes every unclaimed member and the pool's
NetworkPolicy sbx-pool.
Touches: a fake cluster of its own (files under SBX_TEST_OUT), the helper
image test_kube_driver imports, the runtime's containers and volumes
labelled with the fake's instance."""

import os
import re
import time
import unittest

import sbxtest
import test_kube_driver as tkd
from brokerfix import ExecStream

POOL = "sbx.dev%2Fpool%3Dtrue"
FAKE = None


def setUpModule():
    global FAKE
    host = os.environ["SBX_RUNTIME_HOST"]
    tkd.helper_image(sbxtest.Engine(host))
    FAKE = tkd.Fake(host)


def tearDownModule():
    if FAKE is not None:
        FAKE.stop()


class PoolBroker(tkd.KubeBroker):
    def __init__(self, fake, pool):
        super().__init__(fake, sbxtest.test_image())
        self.pool = pool

    def argv(self):
        return super().argv() + ["--warm-pool", str(self.pool)]


def figures(c):
    """The warm pool's /metrics figures (the engine pool's names, adr/0067)."""
    r = c.metrics()
    assert r.status == 200, r
    text = r.body.decode()
    out = {}
    for key, name, labels in (("ready", "members", '{state="ready"}'),
                              ("wanted", "members", '{state="wanted"}'),
                              ("claims", "claims_total", ""),
                              ("empty", "misses_total", '{reason="empty"}'),
                              ("spec", "misses_total", '{reason="spec"}'),
                              ("made", "made_total", '{result="ok"}'),
                              ("failed", "made_total", '{result="failed"}')):
        m = re.search(r"^sbx_broker_warm_pool_%s%s (\d+)$" % (name, re.escape(labels)), text, re.M)
        out[key] = int(m.group(1)) if m else None
    return out


def netpol(name):
    """The status of a GET of NetworkPolicy name."""
    st, _ = FAKE.admin.request("GET", "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/%s"
                               % (FAKE.ns, name))
    return st


class KubePool(unittest.TestCase):

    def members(self, what="pods"):
        """Unclaimed members: (name, phase or None), sorted."""
        body = FAKE.admin.get("/api/v1/namespaces/%s/%s?labelSelector=%s" % (FAKE.ns, what, POOL))
        return sorted((o["metadata"]["name"], (o.get("status") or {}).get("phase"))
                      for o in body["items"] if "deletionTimestamp" not in o["metadata"])

    def ready(self, n):
        m = self.members()
        return len(m) == n and all(p == "Running" for _, p in m) and len(self.members("persistentvolumeclaims")) == n

    def pod_of(self, sid):
        items = FAKE.admin.get("/api/v1/namespaces/%s/pods?labelSelector=sbx.dev%%2Fid%%3D%s"
                               % (FAKE.ns, sid))["items"]
        self.assertEqual(len(items), 1, items)
        return items[0]

    def test_claim_refill_nothing_carried_over_and_drain(self):
        pid = os.getpid()
        broker = PoolBroker(FAKE, 2)
        broker.start()
        keep = "kp-keep-%d" % pid
        try:
            c = broker.client(timeout=120)
            sbxtest.wait_until(lambda: self.ready(2), 120, "2 members Running", interval=0.2)
            before = [n for n, _ in self.members()]
            self.assertTrue(all(n.startswith("sbx-pool.") for n in before), before)
            self.assertIn("sbx-sandbox", FAKE.admin.get("/api/v1/namespaces/%s/serviceaccounts/sbx-sandbox"
                                                        % FAKE.ns)["metadata"]["name"])
            netpol_ = FAKE.admin.get("/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/sbx-pool" % FAKE.ns)
            self.assertEqual(netpol_["spec"]["podSelector"], {"matchLabels": {"sbx.dev/pool": "true"}})
            # the figures the engine's pool exports, for this pool
            sbxtest.wait_until(lambda: figures(c)["ready"] == 2, 30, "ready 2 in /metrics", interval=0.2)
            f = figures(c)
            self.assertEqual((f["wanted"], f["ready"], f["claims"], f["spec"]), (2, 2, 0, 0), f)
            self.assertGreaterEqual(f["made"], 2, f)

            # a claim: the sandbox is one of the members made before
            a = "kp-a-%d" % pid
            t0 = time.monotonic()
            r = c.ensure(a)
            claim_s = time.monotonic() - t0
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["state"], "running")
            pod = self.pod_of(a)
            self.assertIn(pod["metadata"]["name"], before)
            self.assertNotIn("sbx.dev/pool", pod["metadata"]["labels"])
            pvc = FAKE.admin.get("/api/v1/namespaces/%s/persistentvolumeclaims?labelSelector=sbx.dev%%2Fid%%3D%s"
                                 % (FAKE.ns, a))["items"]
            self.assertEqual([p["metadata"]["name"] for p in pvc],
                             [pod["metadata"]["name"].replace("sbx-", "work-", 1)])
            FAKE.admin.get("/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/sbx-%s" % (FAKE.ns, a))
            # a cold ensure for comparison: another image is never claimed
            cold = "kp-cold-%d" % pid
            t0 = time.monotonic()
            self.assertEqual(c.ensure(cold, body={"egress": False, "memory_bytes": 32 << 20}).status, 200)
            cold_s = time.monotonic() - t0
            self.assertFalse(self.pod_of(cold)["metadata"]["name"].startswith("sbx-pool."))
            f = figures(c)
            self.assertEqual((f["wanted"], f["claims"], f["spec"], f["empty"]), (2, 1, 1, 0), f)
            self.assertLessEqual(f["ready"], 2, f)
            print("claim %.3f s, cold ensure %.3f s" % (claim_s, cold_s))
            self.assertLess(claim_s, cold_s)
            self.assertLess(claim_s, 2.0)

            # a leaves a file in /work and /tmp and runs a process to its destroy
            self.assertEqual(c.sh(a, "echo secret > /work/left; echo secret > /tmp/left").code, 0)
            st = ExecStream(c, a, ["sleep", "7777"])
            try:
                sbxtest.wait_until(lambda: b"sleep 7777" in bytes(c.sh(
                    a, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").out), 30, "sleep running")
                self.assertEqual(c.destroy(a).status, 200)
            finally:
                st.close()

            # the pool refilled (two members again, none of them a's)
            sbxtest.wait_until(lambda: self.ready(2), 120, "the pool refilled", interval=0.2)
            self.assertNotIn(pod["metadata"]["name"], [n for n, _ in self.members()])

            # b claims a member: nothing of a, nothing but the helper's processes
            b = "kp-b-%d" % pid
            self.assertEqual(c.ensure(b).status, 200)
            self.assertTrue(self.pod_of(b)["metadata"]["name"].startswith("sbx-pool."))
            res = c.sh(b, "ls -A /work /tmp; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
            self.assertEqual(res.code, 0)
            out = bytes(res.out).decode()
            self.assertNotIn("left", out)
            self.assertNotIn("sleep 7777", out)
            self.assertIn("sbx-helper", out)

            # a claimed sandbox's stop keeps its /work; its ensure mounts it again
            sbxtest.wait_until(lambda: self.ready(2), 120, "the pool refilled again", interval=0.2)
            self.assertEqual(c.ensure(keep).status, 200)
            member_pvc = self.pod_of(keep)["spec"]["volumes"]
            claim = [v["persistentVolumeClaim"]["claimName"] for v in member_pvc if v["name"] == "work"][0]
            self.assertTrue(claim.startswith("work-pool."), claim)
            self.assertEqual(c.sh(keep, "echo kept > /work/f").code, 0)
            self.assertEqual(c.stop(keep).status, 200)
            st = c.status(keep).json()
            self.assertEqual((st["state"], st["stop_reason"]), ("stopped", "operator"))
            self.assertEqual(c.ensure(keep).status, 200)
            again = self.pod_of(keep)
            self.assertEqual(again["metadata"]["name"], "sbx-" + keep)
            self.assertEqual([v["persistentVolumeClaim"]["claimName"] for v in again["spec"]["volumes"]
                              if v["name"] == "work"], [claim])
            res = c.exec(keep, ["cat", "/work/f"])
            self.assertEqual((res.code, bytes(res.out)), (0, b"kept\n"))
            listed = sorted(x["id"] for x in c.sandboxes().json())
            self.assertEqual(listed, sorted([b, cold, keep]))

            # destroy of a claimed sandbox removes its (member-named) PVC
            self.assertEqual(c.destroy(b).status, 200)
            sbxtest.wait_until(lambda: not FAKE.admin.get(
                "/api/v1/namespaces/%s/persistentvolumeclaims?labelSelector=sbx.dev%%2Fid%%3D%s"
                % (FAKE.ns, b))["items"], 60, "b's PVC gone", interval=0.2)
            self.assertEqual(c.destroy(cold).status, 200)
            sbxtest.wait_until(lambda: self.ready(2), 120, "the pool full before the restart", interval=0.2)
            sbxtest.wait_until(lambda: figures(c)["ready"] == 2, 30, "ready 2 in /metrics", interval=0.2)
            f = figures(c)
            self.assertEqual((f["wanted"], f["claims"], f["spec"]), (2, 3, 1), f)
        finally:
            broker.stop()
            print(broker.log_text()[-3000:])
            broker.cleanup()

        # a restart with warm_pool = 0 deletes every unclaimed member (and
        # their PVCs); the claimed sandbox stays
        self.assertEqual(len(self.members()), 2)   # members outlive the broker
        broker = PoolBroker(FAKE, 0)
        broker.start()
        try:
            c = broker.client(timeout=120)
            sbxtest.wait_until(lambda: not self.members() and not self.members("persistentvolumeclaims"),
                               60, "no unclaimed member left", interval=0.2)
            # the pool's deny-all policy goes with its members (it was left
            # behind for good before: a newcomer found it after a drain)
            sbxtest.wait_until(lambda: netpol("sbx-pool") == 404, 30, "sbx-pool NetworkPolicy deleted",
                               interval=0.2)
            self.assertEqual(netpol("sbx-" + keep), 200)   # a sandbox's own stays
            f = figures(c)
            self.assertEqual((f["wanted"], f["ready"], f["claims"]), (0, 0, 0), f)
            self.assertEqual(c.status(keep).json()["state"], "running")
            res = c.exec(keep, ["cat", "/work/f"])
            self.assertEqual((res.code, bytes(res.out)), (0, b"kept\n"))
            time.sleep(2)
            self.assertEqual(self.members(), [])
            self.assertEqual(c.destroy(keep).status, 200)
        finally:
            broker.stop()
            broker.cleanup()


if __name__ == "__main__":
    unittest.main()
