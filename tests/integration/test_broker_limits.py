#!/usr/bin/python3
# test_broker_limits.py - limits from the broker's config, last_used_at and the audit table (SPEC §4).

import os
import sqlite3
import time
import unittest

from brokerfix import BrokerTestCase, ExecStream, wait_until


class LimitsTest(BrokerTestCase):

    limits = {"exec_timeout_max_ms": 3000, "max_execs": 2, "max_sandboxes": 3,
              "output_cap": 64 * 1024}

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("lim")
        cls.ensure_ok(cls.sid)

    def test_exec_asks_for_more_time_or_output_than_allowed(self):
        r = self.client.request("POST", "/v1/sandboxes/%s/exec" % self.sid,
                                {"argv": ["true"], "timeout_ms": 60000})
        self.assertError(r, 400, "limit_exceeded")
        r = self.client.request("POST", "/v1/sandboxes/%s/exec" % self.sid,
                                {"argv": ["true"], "output_cap": 10 * 1024 * 1024})
        self.assertError(r, 400, "limit_exceeded")
        # less is fine and is what applies
        res = self.client.exec(self.sid, ["yes"], extra={"output_cap": 1000}, timeout=20)
        self.assertIs(res.exit["truncated"], True, res)
        self.assertLessEqual(len(res.out), 1000)
        self.assertGreaterEqual(len(res.out), 900)
        # no timeout given: the configured default, never above the ceiling
        t0 = time.monotonic()
        res = self.client.exec(self.sid, ["sleep", "30"], timeout=20)
        took = time.monotonic() - t0
        self.assertIsNotNone(res.error, res)
        self.assertEqual(res.error["code"], "timeout")
        self.assertLess(took, 6, "an exec outlived the 3 s ceiling: %.1fs" % took)

    def test_concurrent_execs_per_sandbox(self):
        streams = []
        try:
            for i in range(2):
                st = ExecStream(self.client, self.sid, ["sleep", "2%d" % i])
                self.assertEqual(st.resp.status, 200)
                st.wait_for("start")
                streams.append(st)
            r = self.client.request("POST", "/v1/sandboxes/%s/exec" % self.sid, {"argv": ["true"]})
            self.assertError(r, 429, "too_many")
        finally:
            for st in streams:
                st.close()
        ok = wait_until(lambda: self.client.request(
            "POST", "/v1/sandboxes/%s/exec" % self.sid, {"argv": ["true"]}).status == 200, 5, 0.2)
        self.assertTrue(ok, "exec slots were not given back after the clients left")

    def test_max_sandboxes(self):
        a, b, c = self.new_id("lim-a"), self.new_id("lim-b"), self.new_id("lim-c")
        self.ensure_ok(a)
        self.ensure_ok(b)
        r = self.client.ensure(c)
        self.assertError(r, 429, "too_many")
        self.assertEqual(self.engine.containers_of(c), [])
        # an existing one is still ensured; destroying one frees a slot
        self.ensure_ok(a)
        self.assertIn(self.client.destroy(b).status, (200, 204))
        self.ensure_ok(c)
        self.client.destroy(a)
        self.client.destroy(c)

    def test_ensure_asks_for_more_than_allowed(self):
        sid = self.new_id("lim-big")
        r = self.client.ensure(sid, body={"egress": False, "pids": 100000})
        self.assertError(r, 400, "limit_exceeded")
        r = self.client.ensure(sid, body={"egress": False, "memory_bytes": 1 << 40})
        self.assertError(r, 400, "limit_exceeded")
        self.assertEqual(self.engine.containers_of(sid), [])
        # asking for less applies
        r = self.client.ensure(sid, body={"egress": False, "pids": 32, "memory_bytes": 32 << 20})
        self.assertEqual(r.status, 200, r)
        h = self.engine.inspect(self.engine.containers_of(sid)[0]["Id"])["HostConfig"]
        self.assertEqual((h["PidsLimit"], h["Memory"]), (32, 32 << 20))
        self.client.destroy(sid)

    def test_last_used_at_and_audit(self):
        sid = self.new_id("lim-audit")
        self.addCleanup(self.client.destroy, sid)   # a failure must not hold a slot
        t_begin = int(time.time() * 1000)
        st0 = self.ensure_ok(sid)
        for key in ("created_at", "last_used_at"):
            self.assertIsInstance(st0[key], (int, float), st0)
        seen = [st0["last_used_at"]]
        ops = [lambda: self.client.exec(sid, ["true"]),
               lambda: self.client.write(sid, "/work/a", b"a"),
               lambda: self.client.read(sid, "/work/a"),
               lambda: self.client.list(sid, "/work")]
        for op in ops:
            time.sleep(0.01)
            op()
            st = self.client.status(sid).json()
            self.assertEqual(st["created_at"], st0["created_at"])
            seen.append(st["last_used_at"])
        self.assertEqual(seen, sorted(seen), seen)
        self.assertEqual(len(set(seen)), len(seen), "an operation did not update last_used_at: %r" % seen)
        # refusals are audited with their code: one by a limit, one by the sandbox
        r = self.client.request("POST", "/v1/sandboxes/%s/exec" % sid,
                                {"argv": ["true"], "timeout_ms": 60000})
        self.assertError(r, 400, "limit_exceeded")
        self.assertError(self.client.read(sid, "/work/never-written"), 404, "not_found")
        self.assertIn(self.client.stop(sid).status, (200, 204))
        self.assertIn(self.client.destroy(sid).status, (200, 204))
        t_end = int(time.time() * 1000)
        db = os.path.join(self.broker.state_dir, "broker.db")

        def audit():
            con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=10)
            try:
                return con.execute("SELECT ts, op, outcome, duration_ms FROM audit WHERE id = ? "
                                   "ORDER BY ts, rowid", (sid,)).fetchall()
            finally:
                con.close()
        # A request's row is written right after its reply went out, in the
        # broker's next loop turn (adr/0033): the last one may lag the reply.
        self.assertTrue(wait_until(lambda: any(r[1] == "destroy" for r in audit()), 10),
                        "no destroy audit row 10 s after the reply")
        rows = audit()
        # one row per request, in the order they were made, with its outcome
        self.assertEqual([(op, outcome) for ts, op, outcome, dur in rows if op != "status"],
                         [("ensure", "ok"), ("exec", "ok"), ("write", "ok"), ("read", "ok"),
                          ("list", "ok"), ("exec", "limit_exceeded"), ("read", "not_found"),
                          ("stop", "ok"), ("destroy", "ok")], rows)
        self.assertEqual([outcome for ts, op, outcome, dur in rows if op == "status"],
                         ["ok"] * len(ops), rows)
        # when each request came (Unix ms) and how long it took, within the test's span
        for ts, op, outcome, dur in rows:
            self.assertTrue(t_begin <= ts <= t_end, (t_begin, t_end, rows))
            self.assertTrue(0 <= dur <= t_end - t_begin, (t_begin, t_end, rows))


if __name__ == "__main__":
    unittest.main(verbosity=2)
