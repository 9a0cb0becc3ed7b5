#!/usr/bin/python3
# test_quota.py - the soft /work quota (work_quota, adr/0057) on a real runtime, through the api as a player uses it: writes past it refused 507 with a sentence and nothing written, the quota event of an exec that crossed it (SSE and sbxctl), usage and quota in status.
#
# One stack (broker + api) with work_quota 8m. Neither runtime can bound a
# volume on this machine (adr/0057, "What was measured"), so a `dd` past the
# quota succeeds: the owner is told in that exec's stream, and writes through
# the api are refused from then on until files are removed.

import json
import os
import subprocess
import time
import unittest
import urllib.parse

import sbxtest
from brokerfix import BrokerClient, REPO
from stackfix import Stack

SBXCTL = os.path.join(REPO, "build", "out", "sbxctl")
MIB = 1024 * 1024
QUOTA = 8 * MIB


def parse_sse(body):
    """Our SSE (id/event/data per event, `: ` comments): [(event, data dict)]."""
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        fields = {}
        for ln in block.split("\n"):
            if not ln or ln.startswith(":"):
                continue
            k, _, v = ln.partition(": ")
            fields[k] = v
        if fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


class QuotaStackTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxq%d-" % os.getpid()
        cls.stack = Stack(cls.prefix, broker_args=["--work-quota", "8m",
                                                   "--work-quota-stale", "10s"])
        u = urllib.parse.urlsplit(cls.stack.url)
        cls.host, cls.port = u.hostname, u.port
        cls.broker = BrokerClient(cls.stack.sock, cls.stack.token, timeout=120)
        cls.key = cls.stack.player

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    def req(self, method, path, body=None, raw=None):
        hdrs = {"Authorization": "Bearer " + self.key}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        return sbxtest.tcp_http(self.host, self.port, method, path, data, hdrs, 120)

    def sandbox(self, name):
        """An NPC of the player with a running sandbox; its sandbox id."""
        r = self.req("POST", "/api/v1/npcs", {"name": name})
        self.assertEqual(r.status, 201, r)
        r = self.req("PUT", "/api/v1/npcs/%s/sandbox" % name)
        self.assertEqual(r.status, 200, r)
        return json.loads(r.body)["sandbox_id"]

    def put(self, npc, path, size):
        return self.req("PUT", "/api/v1/npcs/%s/sandbox/files?path=%s" % (npc, path),
                        raw=b"q" * size)

    def exec_sse(self, npc, script):
        r = self.req("POST", "/api/v1/npcs/%s/sandbox/exec" % npc,
                     {"argv": ["sh", "-c", script], "timeout_ms": 60000})
        self.assertEqual(r.status, 200, r)
        evs = parse_sse(r.body)
        self.assertEqual(evs[-1][0], "exit", evs)
        return evs

    def status(self, npc):
        r = self.req("GET", "/api/v1/npcs/%s/sandbox" % npc)
        self.assertEqual(r.status, 200, r)
        return json.loads(r.body)

    def assert_refused(self, r, path_bytes):
        self.assertEqual(r.status, 507, r)
        err = json.loads(r.body)["error"]
        self.assertEqual(err["code"], "quota_exceeded")
        self.assertIn("would pass its quota of %d bytes" % QUOTA, err["message"])
        self.assertIn("writing %d more" % path_bytes, err["message"])
        self.assertIn("Remove files from /work", err["message"])

    def test_a_write_past_the_quota_is_refused_and_writes_nothing(self):
        npc = "q-write"
        self.sandbox(npc)
        r = self.put(npc, "/work/five", 5 * MIB)
        self.assertEqual(r.status, 200, r)
        # 5 MiB + 4 MiB > 8 MiB: refused before a byte reaches /work.
        r = self.put(npc, "/work/four", 4 * MIB)
        self.assert_refused(r, 4 * MIB)
        r = self.req("GET", "/api/v1/npcs/%s/sandbox/files?path=/work/four" % npc)
        self.assertEqual(r.status, 404, r)
        # An overwrite counts its whole size too: the old file stays as it was.
        r = self.put(npc, "/work/five", 4 * MIB)
        self.assert_refused(r, 4 * MIB)
        r = self.req("GET", "/api/v1/npcs/%s/sandbox/files?path=/work/five" % npc)
        self.assertEqual((r.status, len(r.body)), (200, 5 * MIB))
        # What fits still goes in.
        r = self.put(npc, "/work/two", 2 * MIB)
        self.assertEqual(r.status, 200, r)
        evs = self.exec_sse(npc, "ls /work; du -sk /work | cut -f1")
        out = "".join(d.get("data", "") for e, d in evs if e == "stdout")
        self.assertEqual(sorted(out.split()[:-1]), ["five", "two"], out)
        # Bytes a command wrote count as well, once counted at its end.
        self.exec_sse(npc, "rm /work/five /work/two && "
                           "dd if=/dev/zero of=/work/seven bs=1M count=7 2>/dev/null")
        r = self.put(npc, "/work/two", 2 * MIB)
        self.assert_refused(r, 2 * MIB)

    def test_a_dd_past_the_quota_tells_its_owner_once_and_status_shows_it(self):
        npc = "q-dd"
        sid = self.sandbox(npc)
        st = self.status(npc)
        self.assertEqual(st["quota"]["bytes"], QUOTA)
        evs = self.exec_sse(npc, "dd if=/dev/zero of=/work/big bs=1M count=12 2>&1")
        # Not bounded by the storage here (adr/0057): dd succeeds ...
        self.assertEqual(evs[-1][1]["code"], 0, evs)
        # ... and the stream says so just before its exit.
        self.assertEqual(evs[-2][0], "quota", evs)
        q = evs[-2][1]
        self.assertEqual(q["quota"], QUOTA)
        self.assertGreaterEqual(q["bytes"], 12 * MIB)
        self.assertIn("over its quota of %d bytes" % QUOTA, q["message"])
        self.assertIn("writes through the API are refused", q["message"])
        # Status (api and broker): the quota and the figure of that count.
        st = self.status(npc)
        self.assertEqual(st["quota"]["bytes"], QUOTA)
        self.assertEqual(st["quota"]["used"], q["bytes"])
        self.assertGreaterEqual(st["quota"]["age_ms"], 0)
        b = self.broker.status(sid).json()
        self.assertEqual(b["quota"]["bytes"], QUOTA)
        self.assertEqual(b["quota"]["used"], q["bytes"])
        # Told once per crossing: the next exec says nothing more.
        evs = self.exec_sse(npc, "true")
        self.assertEqual([e for e, _ in evs], ["start", "exit"])
        # Over: even a small write is refused, nothing written.
        r = self.put(npc, "/work/small", 10)
        self.assert_refused(r, 10)
        env = {"PATH": "/usr/bin:/bin", "SBX_URL": self.stack.url, "SBX_KEY": self.key,
               "HOME": "/nonexistent"}
        r = subprocess.run([SBXCTL, "cp", "-", npc + ":/work/small"], input=b"0123456789",
                           capture_output=True, env=env, timeout=120)
        self.assertEqual(r.returncode, 1, r)
        self.assertIn(b"writing 10 more would pass its quota", r.stderr)
        # Cleaned up: writes go in again, and crossing again tells again.
        self.exec_sse(npc, "rm /work/big")
        self.assertEqual(self.put(npc, "/work/small", 10).status, 200)
        r = subprocess.run([SBXCTL, "exec", npc, "--", "sh", "-c",
                            "dd if=/dev/zero of=/work/big bs=1M count=9 2>/dev/null"],
                           capture_output=True, env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn(b"sbxctl: /work holds ", r.stderr)
        self.assertIn(b"over its quota of %d bytes" % QUOTA, r.stderr)

    def test_broker_stream_carries_the_quota_event_before_exit(self):
        sid = self.prefix + "b1"
        self.assertEqual(self.broker.ensure(sid).status, 200)
        self.addCleanup(self.broker.request, "DELETE", "/v1/sandboxes/" + sid)
        res = self.broker.sh(sid, "dd if=/dev/zero of=/work/big bs=1M count=9 2>/dev/null",
                             timeout_ms=60000)
        types = [e["type"] for e in res.events]
        self.assertEqual(types[-2:], ["quota", "exit"], types)
        self.assertEqual(res.events[-2]["quota"], QUOTA)
        self.assertGreaterEqual(res.events[-2]["bytes"], 9 * MIB)
        # The broker's own write route refuses the same way.
        r = self.broker.request("PUT", "/v1/sandboxes/%s/files?path=/work/x" % sid,
                                body=b"x")
        self.assertEqual(r.status, 507, r)

    def test_zz_measure_what_counting_at_each_exec_end_costs(self):
        """Figures, not assertions: exec p50 with work_quota (one walk of /work at
        each exec's end) and without (a second broker, same runtime)."""
        other = Stack("sbxqn%d-" % os.getpid())
        try:
            fig = []
            for stack, name in ((self.stack, "with work_quota"), (other, "without")):
                b = BrokerClient(stack.sock, stack.token, timeout=120)
                sid = stack.prefix + "m1"
                self.assertEqual(b.ensure(sid).status, 200)
                b.sh(sid, "mkdir /work/m && cd /work/m && i=0; "
                          "while [ $i -lt 1000 ]; do : > f$i; i=$((i+1)); done")
                times = []
                for _ in range(7):
                    t = time.monotonic()
                    self.assertEqual(b.sh(sid, "true").code, 0)
                    times.append(time.monotonic() - t)
                b.request("DELETE", "/v1/sandboxes/" + sid)
                times.sort()
                fig.append("%s p50 %.1f ms" % (name, times[3] * 1000))
            print("\n[quota] %s: exec of `true`, /work of 1,000 files: %s"
                  % (sbxtest.runtime(), "; ".join(fig)), flush=True)
        finally:
            other.close()


if __name__ == "__main__":
    unittest.main()
