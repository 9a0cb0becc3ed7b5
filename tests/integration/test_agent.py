#!/usr/bin/python3
# test_agent.py - the sandbox agent (adr/0025, issue 13): restart after a kill from inside, a hostile sandbox, a slow reader among many execs, broker SIGKILL.

import re
import signal
import threading
import time
import unittest

from brokerfix import BrokerTestCase, ExecStream, wait_until


def agent_pids(client, sid):
    """Pids of `sbx-helper agent` processes in the sandbox (ps from an exec);
    the agent's children (a mode running, same command line: they fork and
    do not exec) are left out."""
    res = client.exec(sid, ["ps", "-o", "pid,ppid,args"])
    assert res.code == 0, res
    procs = {}
    for line in bytes(res.out).decode(errors="replace").splitlines():
        m = re.match(r"^\s*(\d+)\s+(\d+)\s+/\.sbx/sbx-helper agent\b", line)
        if m:
            procs[int(m.group(1))] = int(m.group(2))
    return sorted(p for p, pp in procs.items() if pp not in procs)


def restarts(client):
    r = client.metrics()
    assert r.status == 200, r
    m = re.search(rb"^sbx_broker_agent_restarts_total (\d+)$", r.body, re.M)
    assert m, "no sbx_broker_agent_restarts_total in /metrics"
    return int(m.group(1))


class AgentTest(BrokerTestCase):
    limits = {"max_execs": 64, "pids": 512, "memory": 256 << 20}

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("agent")
        cls.ensure_ok(cls.sid)

    def test_one_agent_serves_every_operation(self):
        self.assertEqual(self.client.exec(self.sid, ["true"]).code, 0)
        before = agent_pids(self.client, self.sid)
        self.assertEqual(len(before), 1, before)
        for i in range(20):
            self.assertEqual(self.client.exec(self.sid, ["echo", str(i)]).code, 0)
        w = self.client.write(self.sid, "/work/a.txt", b"abc")
        self.assertIn(w.status, (200, 204), w)
        self.assertEqual(self.client.read(self.sid, "/work/a.txt").body, b"abc")
        self.assertEqual(self.client.list(self.sid, "/work").status, 200)
        # the same agent answered all of it: no runtime exec per operation
        self.assertEqual(agent_pids(self.client, self.sid), before)

    def test_agent_killed_from_inside_restarts_on_next_exec(self):
        sid = self.new_id("agkill")
        self.ensure_ok(sid)
        self.assertEqual(self.client.exec(sid, ["true"]).code, 0)
        base = restarts(self.client)
        pids = agent_pids(self.client, sid)
        self.assertEqual(len(pids), 1, pids)
        # The sandbox user kills its own agent (same user): that exec loses
        # its channel; its answer does not matter.
        self.client.exec(sid, ["kill", "-9", str(pids[0])])
        res = self.client.exec(sid, ["echo", "back"])
        self.assertEqual(res.code, 0, res)
        self.assertEqual(bytes(res.out), b"back\n")
        self.assertEqual(restarts(self.client) - base, 1)
        new = agent_pids(self.client, sid)
        self.assertEqual(len(new), 1, new)
        self.assertNotEqual(new, pids)

    def test_garbage_everywhere_cannot_crash_or_grow_the_broker(self):
        sid = self.new_id("aggarb")
        self.ensure_ok(sid)
        self.assertEqual(self.client.exec(sid, ["true"]).code, 0)
        rss0 = self.broker.rss_kib()
        # Every descriptor this process can reach, its own and every other
        # process's it may open, and every unix socket it can find: garbage.
        script = r"""
        for f in /proc/[0-9]*/fd/*; do
          head -c 65536 /dev/urandom > "$f" 2>/dev/null &
        done
        for s in $(find / -xdev -type s 2>/dev/null); do
          head -c 65536 /dev/urandom | nc -U "$s" 2>/dev/null &
        done
        head -c 1048576 /dev/urandom
        head -c 1048576 /dev/urandom >&2
        wait
        exit 0
        """
        for _ in range(3):
            self.client.exec(sid, ["sh", "-c", script], timeout_ms=20000)
        self.assertTrue(self.broker.alive(), "the broker died")
        res = self.client.exec(sid, ["echo", "fine"])
        self.assertEqual(res.code, 0, res)
        self.assertEqual(bytes(res.out), b"fine\n")
        # bounded: 3 MiB of garbage output and what it tried on the channel
        # did not grow the broker by more than its buffers
        self.assertLess(self.broker.rss_kib() - rss0, 32 * 1024, (rss0, self.broker.rss_kib()))

    def test_slow_reader_does_not_stall_49_other_execs(self):
        sid = self.new_id("agslow")
        self.ensure_ok(sid)
        slow = ExecStream(self.client, sid, ["sh", "-c", "head -c 20000000 /dev/zero; echo end"])
        try:
            self.assertEqual(slow.resp.status, 200)
            slow.wait_for("start")
            slow.read_chunk(1024)
            results = [None] * 49
            errors = []

            def run(i):
                try:
                    results[i] = self.client.exec(sid, ["head", "-c", "200000", "/dev/urandom"])
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(49)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            # the slow client keeps reading at 1 KiB/s meanwhile
            while any(t.is_alive() for t in threads) and time.monotonic() - t0 < 120:
                slow.read_chunk(1024)
                time.sleep(1)
            for t in threads:
                t.join(1)
            self.assertEqual(errors, [])
            for r in results:
                self.assertIsNotNone(r)
                self.assertEqual(r.code, 0, r)
                self.assertEqual(len(bytes(r.out)), 200000)
            # ... while the slow one is still far from its end
            self.assertLess(slow.bytes_read, 1000000)
            print("49 execs beside a 1 KiB/s reader: %.1f s" % (time.monotonic() - t0))
        finally:
            slow.close()


class AgentRecoveryTest(BrokerTestCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sids = [cls.new_id("agrec") for _ in range(3)]
        for sid in cls.sids:
            cls.ensure_ok(sid)

    def test_broker_sigkill_with_running_execs(self):
        streams = []
        try:
            for i, sid in enumerate(self.sids):
                st = ExecStream(self.client, sid, ["sh", "-c", "sleep 40%d & sleep 41%d" % (i, i)])
                self.assertEqual(st.resp.status, 200)
                st.wait_for("start")
                streams.append(st)
            self.broker.proc.send_signal(signal.SIGKILL)
            self.broker.proc.wait(5)
        finally:
            for st in streams:
                st.close()
        self.broker.start()
        self.client = self.broker.client()
        for i, sid in enumerate(self.sids):
            res = self.client.exec(sid, ["echo", "alive"])
            self.assertEqual(res.code, 0, res)

            def left(sid=sid, i=i):
                out = bytes(self.client.exec(sid, ["ps", "-o", "args"]).out)
                return [l for l in out.splitlines() if re.match(rb"^sleep 4[01]%d$" % i, l)]

            self.assertTrue(wait_until(lambda: not left(), 10, 0.25),
                            "an exec from before the SIGKILL survives in %s: %r" % (sid, left()))
            self.assertEqual(len(agent_pids(self.client, sid)), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
