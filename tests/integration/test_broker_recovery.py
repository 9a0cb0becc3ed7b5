#!/usr/bin/python3
# test_broker_recovery.py - SIGTERM drains, SIGKILL + restart leaves no orphans and adopts its sandboxes (SPEC §7).

import os
import re
import signal
import time
import unittest

from brokerfix import BrokerTestCase, ExecStream, ID_LABEL, MANAGED_LABEL, wait_until


def sleeps(client, sid, marker):
    res = client.exec(sid, ["ps", "-o", "args"])
    assert res.code == 0, res
    return [l for l in bytes(res.out).splitlines() if re.match(rb"^sleep %s$" % marker, l)]


class RecoveryTest(BrokerTestCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("recov")
        cls.ensure_ok(cls.sid)

    def restart(self):
        self.broker.stop()
        self.broker.start()
        self.assertTrue(self.broker.alive())

    def test_sigterm_drains_inflight_exec(self):
        st = ExecStream(self.client, self.sid, ["sh", "-c", "sleep 1; echo drained"])
        try:
            self.assertEqual(st.resp.status, 200)
            st.wait_for("start")
            self.broker.proc.send_signal(signal.SIGTERM)
            ev = None
            while True:
                ev = st.read_event()
                if ev is None or ev["type"] in ("exit", "error"):
                    break
        finally:
            st.close()
        self.assertEqual(bytes(st.result.out), b"drained\n", st.result)
        self.assertIsNotNone(st.result.exit, st.result)
        self.assertEqual(st.result.exit["code"], 0)
        self.assertEqual(self.broker.proc.wait(15), 0, "the broker did not exit 0 after draining")
        self.restart()
        r = self.client.status(self.sid)
        self.assertEqual(r.json()["state"], "running", r)

    def test_sigkill_mid_exec_then_restart(self):
        st = ExecStream(self.client, self.sid, ["sh", "-c", "sleep 305 & sleep 306"])
        try:
            self.assertEqual(st.resp.status, 200)
            st.wait_for("start")
            self.assertTrue(wait_until(lambda: len(sleeps(self.client, self.sid, b"30[56]")) == 2, 3, 0.1))
            self.broker.proc.send_signal(signal.SIGKILL)
            self.broker.proc.wait(5)
        finally:
            st.close()
        self.restart()
        # adopted: listed, usable; its exec's processes are gone
        r = self.client.sandboxes()
        self.assertIn(self.sid, [s["id"] for s in r.json()], r)
        gone = wait_until(lambda: not sleeps(self.client, self.sid, b"30[56]"), 10, 0.25)
        self.assertTrue(gone, "the exec started before the SIGKILL still runs after the restart")
        # nothing unknown in the runtime: every managed container is one of ours
        for c in self.engine.containers(MANAGED_LABEL + "=true"):
            self.assertIn(c["Labels"].get(ID_LABEL), self.ids, c["Names"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
