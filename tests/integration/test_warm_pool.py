#!/usr/bin/python3
# test_warm_pool.py - the engine driver's warm pool (issue 25 item 3, adr/0067):
# a claim answers with a sandbox that shows nothing of an earlier one, the
# pool refills, a restart sweeps unclaimed members and adopts claimed ones,
# warm_pool = 0 drains and ensures cold, destroy of a claimed sandbox
# leaves nothing. Runs on both runtimes.

import re
import signal
import unittest

from brokerfix import (BrokerTestCase, ExecStream, ID_LABEL, MANAGED_LABEL, wait_until,
                       write_config)

POOL_LABEL = "io.sbx.pool"
WANT = 2


def direct(text):
    """sbx_broker_agent_direct_total by result (adr/0066)."""
    return {res: metric(text, "sbx_broker_agent_direct_total", '{result="%s"}' % res)
            for res in ("connected", "fallback")}


def metric(text, name, labels=""):
    m = re.search(r"^%s%s (\d+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return int(m.group(1)) if m else None


class WarmPoolTest(BrokerTestCase):
    limits = {"warm_pool": WANT}

    def figures(self):
        r = self.client.metrics()
        self.assertEqual(r.status, 200, r)
        text = r.body.decode()
        return {
            "ready": metric(text, "sbx_broker_warm_pool_members", '{state="ready"}'),
            "wanted": metric(text, "sbx_broker_warm_pool_members", '{state="wanted"}'),
            "claims": metric(text, "sbx_broker_warm_pool_claims_total"),
            "spec": metric(text, "sbx_broker_warm_pool_misses_total", '{reason="spec"}'),
            "direct": direct(text),
        }

    def unclaimed(self, makes=False):
        """Names of the pool members no sandbox has claimed (runtime's view);
        makes: also the probe and init containers of a member's make."""
        out = []
        for c in self.engine.containers(MANAGED_LABEL + "=true"):
            name = c["Names"][0].lstrip("/")
            if re.match(r"^sbx-pool\.[0-9a-f]+$" if not makes else r"^sbx-pool\.", name):
                out.append(name)
        return sorted(out)

    def warns(self):
        """The broker's warn and error lines, their messages only: short
        enough to stay in CI's excerpt of a failure."""
        out = []
        for line in self.broker.log_text().splitlines():
            if '"level":"warn"' in line or '"level":"error"' in line:
                out.append(line[line.find('"msg"'):][:300])
        return "broker warnings:\n" + "\n".join(out[-12:])

    def orphans(self):
        """Pool volumes (io.sbx.pool) no container mounts: a member's whose
        container went. A claimed sandbox's volume (another test's too) is
        mounted, so it is not one."""
        used = set()
        for c in self.engine.containers(MANAGED_LABEL + "=true"):
            ins = self.engine.inspect(c["Id"])
            for m in (ins or {}).get("Mounts") or []:
                if m.get("Name"):
                    used.add(m["Name"])
        return sorted(v["Name"] for v in self.engine.volumes(POOL_LABEL)
                      if v["Name"] not in used)

    def wait_full(self, n=WANT):
        ok = wait_until(lambda: self.figures()["ready"] == n and len(self.unclaimed()) == n,
                        180, 0.2)
        self.assertTrue(ok, "the pool did not fill to %d: %r, runtime %r\n%s" % (
            n, self.figures(), self.unclaimed(), self.broker.log_text()[-2000:]))

    def work_volume(self, sid):
        c = self.engine.inspect("sbx-" + sid)
        self.assertIsNotNone(c, sid)
        vols = [m["Name"] for m in c["Mounts"] if m["Destination"] == "/work"]
        self.assertEqual(len(vols), 1, c["Mounts"])
        return c, vols[0]

    def restart(self, limits):
        self.broker.stop()
        self.broker.limits.update(limits)
        write_config(self.broker.config, self.broker.limits)
        self.broker.start()
        self.client = self.broker.client()

    @classmethod
    def tearDownClass(cls):
        # The members outlive a stopped broker until its next start: a start
        # with warm_pool = 0 sweeps them, then the usual teardown checks.
        b = cls.broker
        if b is not None and b.alive():
            b.stop()
            b.limits["warm_pool"] = 0
            write_config(b.config, b.limits)
            b.start()
            cls.client = b.client()
            wait_until(lambda: not [c for c in cls.engine.containers(POOL_LABEL)
                                    if c["Names"][0].startswith("/sbx-pool.")] and not [
                v for v in cls.engine.volumes(POOL_LABEL) if v["Name"].startswith("sbx-pool.")
                and v["Name"] not in [m["Name"] for c in cls.engine.containers(POOL_LABEL)
                                      for m in cls.engine.inspect(c["Id"])["Mounts"]]], 120, 0.2)
        super().tearDownClass()

    def test_1_claims_show_nothing_of_before(self):
        self.wait_full()
        before = self.figures()
        members = self.unclaimed()
        a = self.new_id("pa")
        st = self.ensure_ok(a)
        self.assertEqual(st["state"], "running", st)
        self.assertEqual(self.figures()["claims"], before["claims"] + 1,
                         "%r %r\n%s" % (before, self.figures(), self.warns()))
        c, vol_a = self.work_volume(a)
        # the member it was: renamed, its volume kept
        self.assertIn(POOL_LABEL, c["Config"]["Labels"])
        self.assertNotIn(ID_LABEL, c["Config"]["Labels"])
        self.assertIn(vol_a[:-len("-work")], members)
        # its agent came up over the member's own socket volume (adr/0066),
        # not the runtime's exec stream
        agent_vol = vol_a[:-len("-work")] + "-agent"
        self.assertIn(agent_vol, [m.get("Name") for m in c["Mounts"]
                                  if m["Destination"] == "/run/sbx-agent"], c["Mounts"])
        self.assertEqual(self.client.exec(a, ["true"]).code, 0)
        self.assertTrue(wait_until(lambda: self.figures()["direct"]["connected"] ==
                                   before["direct"]["connected"] + 1, 30, 0.1),
                        "%r %r\n%s" % (before, self.figures(), self.warns()))
        self.assertEqual(self.figures()["direct"]["fallback"], before["direct"]["fallback"])
        listed = [s["id"] for s in self.client.sandboxes().json()]
        self.assertIn(a, listed)
        self.assertFalse([i for i in listed if i.startswith("pool.")], listed)
        # leave traces: files in /work and /tmp, a process still running
        res = self.client.sh(a, "echo secret > /work/left; mkdir /work/d; echo t > /tmp/t")
        self.assertEqual(res.code, 0, res)
        st = ExecStream(self.client, a, ["sleep", "4242"])
        try:
            self.assertEqual(st.resp.status, 200)
            st.wait_for("start")
            self.assertTrue(wait_until(lambda: b"sleep 4242" in bytes(
                self.client.exec(a, ["ps", "-o", "args"]).out), 30, 0.1))
            r = self.client.destroy(a)
            self.assertIn(r.status, (200, 204), r)
        finally:
            st.close()
        # destroy of a claimed sandbox: container and its member's volume gone
        self.assertIsNone(self.engine.inspect("sbx-" + a))
        left = [v["Name"] for v in self.engine.volumes(MANAGED_LABEL + "=true")]
        self.assertNotIn(vol_a, left)
        self.assertNotIn(agent_vol, left)
        # the pool refilled behind the claim
        self.wait_full()
        # claim again, the same id and a new one: nothing of before is visible
        b = self.new_id("pb")
        for sid in (a, b):
            self.assertEqual(self.ensure_ok(sid)["state"], "running")
            res = self.client.exec(sid, ["ls", "-A", "/work", "/tmp"])
            self.assertEqual(res.code, 0, res)
            self.assertEqual(bytes(res.out), b"/tmp:\n\n/work:\n", "%s %r" % (sid, res))
            ps = bytes(self.client.exec(sid, ["ps", "-o", "args"]).out)
            self.assertNotIn(b"sleep 4242", ps)
            self.assertEqual(self.client.read(sid, "/work/left").status, 404)
        self.assertEqual(self.figures()["claims"], before["claims"] + 3,
                         "%r %r\n%s" % (before, self.figures(), self.warns()))
        # egress is never claimed: made cold, with its own labels
        e = self.new_id("pe")
        spec = self.figures()["spec"]
        self.assertEqual(self.ensure_ok(e, egress=True)["egress"], True)
        self.assertEqual(self.figures()["spec"], spec + 1)
        labels = self.engine.inspect("sbx-" + e)["Config"]["Labels"]
        self.assertEqual(labels.get(ID_LABEL), e)
        self.assertNotIn(POOL_LABEL, labels)
        for sid in (a, b, e):
            self.assertIn(self.client.destroy(sid).status, (200, 204))

    def test_2_restart_sweeps_and_adopts(self):
        self.wait_full()
        kept = self.new_id("pk")
        self.ensure_ok(kept)
        self.assertEqual(self.client.sh(kept, "echo mine > /work/mine").code, 0)
        # SIGKILL while the refill makes a member (its probe, init or
        # container may be half made), then a start: the claimed sandbox is
        # adopted, everything of the earlier start's pool goes, new members come
        self.assertTrue(wait_until(lambda: len(self.unclaimed(makes=True)) > WANT - 1, 60, 0.01))
        old = self.unclaimed(makes=True)
        self.broker.proc.send_signal(signal.SIGKILL)
        self.broker.proc.wait(10)
        old = sorted(set(old) | set(self.unclaimed(makes=True)))
        self.restart({})
        self.assertTrue(wait_until(lambda: not set(old) & set(self.unclaimed(makes=True)), 120, 0.2),
                        "members of the earlier start stayed: %r" % self.unclaimed(makes=True))
        self.wait_full()
        self.assertIn(kept, [s["id"] for s in self.client.sandboxes().json()])
        r = self.client.read(kept, "/work/mine")
        self.assertEqual((r.status, r.body), (200, b"mine\n"), r)
        # warm_pool = 0: the pool drains, an ensure is made cold as before
        self.restart({"warm_pool": 0})
        _, vol = self.work_volume(kept)
        self.assertTrue(wait_until(lambda: self.unclaimed(makes=True) == [] and
                                   self.orphans() == [], 120, 0.2),
                        "warm_pool = 0 left members %r and volumes no container mounts %r"
                        % (self.unclaimed(makes=True), self.orphans()))
        self.assertIn(vol, [v["Name"] for v in self.engine.volumes(POOL_LABEL)])
        f = self.figures()
        self.assertEqual((f["wanted"], f["ready"]), (0, 0), f)
        cold = self.new_id("pc")
        self.ensure_ok(cold)
        labels = self.engine.inspect("sbx-" + cold)["Config"]["Labels"]
        self.assertEqual(labels.get(ID_LABEL), cold)
        self.assertEqual(self.figures()["claims"], 0)
        r = self.client.read(kept, "/work/mine")
        self.assertEqual((r.status, r.body), (200, b"mine\n"), r)
        # nothing of the pool left but claimed sandboxes' containers and volumes
        # (kept's, and those of an earlier test of the class that failed
        # before its destroys)
        self.assertEqual(self.orphans(), [])
        self.assertEqual(self.unclaimed(makes=True), [])
        self.assertIn(vol, [v["Name"] for v in self.engine.volumes(POOL_LABEL)])
        self.assertIn("/sbx-" + kept, [c["Names"][0] for c in self.engine.containers(POOL_LABEL)])


if __name__ == "__main__":
    unittest.main(verbosity=2)
