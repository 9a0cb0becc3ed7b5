#!/usr/bin/python3
# test_usage.py - /work usage in status (adr/0017) on a real runtime: broker GET ?usage=1, api GET ?usage=1, sbxctl status --usage.
#
# One stack (broker + api) with usage_max_entries 12000: a sandbox holding
# three files of known size, a symlink to /, and a directory of 1,000
# one-byte files is counted exactly (and the symlink is not followed);
# one holding 15,000 files says partial; a player sees the figures of its
# own NPC only. Also prints what one walk of 10,000 files costs.

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
MAX_ENTRIES = 12000
SIZES = (1000, 20000, 300001)


class UsageStackTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxu%d-" % os.getpid()
        cls.stack = Stack(cls.prefix, broker_args=["--usage-max-entries", str(MAX_ENTRIES),
                                                   "--usage-timeout", "60s"])
        u = urllib.parse.urlsplit(cls.stack.url)
        cls.host, cls.port = u.hostname, u.port
        cls.broker = BrokerClient(cls.stack.sock, cls.stack.token, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    def req(self, key, method, path, body=None):
        hdrs = {"Authorization": "Bearer " + key}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        return sbxtest.tcp_http(self.host, self.port, method, path, data, hdrs, 120)

    def sandbox(self, key, name):
        """An NPC of key's principal with a running sandbox; its sandbox id."""
        r = self.req(key, "POST", "/api/v1/npcs", {"name": name})
        self.assertEqual(r.status, 201, r)
        r = self.req(key, "PUT", "/api/v1/npcs/%s/sandbox" % name)
        self.assertEqual(r.status, 200, r)
        return json.loads(r.body)["sandbox_id"]

    def sh(self, sid, script):
        res = self.broker.sh(sid, script, timeout_ms=120000)
        self.assertEqual(res.code, 0, res)
        return bytes(res.out)

    def usage(self, key, npc):
        r = self.req(key, "GET", "/api/v1/npcs/%s/sandbox?usage=1" % npc)
        self.assertEqual(r.status, 200, r)
        return json.loads(r.body)

    def test_counts_known_files_and_does_not_follow_a_symlink_to_root(self):
        pl = self.stack.player
        sid = self.sandbox(pl, "u-known")
        script = ["cd /work"]
        for name, size in zip("abc", SIZES):
            script.append("dd if=/dev/zero of=%s bs=%d count=1 2>/dev/null" % (name, size))
        script += ["ln -s / rootlink", "mkdir many", "cd many",
                   "i=0; while [ $i -lt 1000 ]; do printf x > f$i; i=$((i+1)); done",
                   # what the filesystem allocated, as the sandbox user sees it
                   "du -s -k /work | cut -f1"]
        du_kib = int(self.sh(sid, "\n".join(script)).split()[-1])
        st = self.usage(pl, "u-known")
        self.assertEqual(st["state"], "running")
        u = st["usage"]
        self.assertEqual(u["apparent_bytes"], sum(SIZES) + 1000, u)
        self.assertEqual(u["files"], 1003, u)
        self.assertEqual(u["dirs"], 1, u)
        # 3 files + the symlink + the directory + its 1000 files; following
        # the link would have counted the whole root filesystem.
        self.assertEqual(u["entries"], 1005, u)
        self.assertFalse(u["partial"], u)
        # busybox du counts st_blocks too (in KiB, rounded up per entry).
        self.assertLessEqual(abs(u["bytes"] - du_kib * 1024), 1024 * 8, (u, du_kib))
        self.assertGreaterEqual(u["bytes"], u["apparent_bytes"] - 1000, u)
        # The broker gives the same figures on its own route.
        r = self.broker.request("GET", "/v1/sandboxes/%s?usage=1" % sid)
        self.assertEqual(r.status, 200, r)
        b = r.json()["usage"]
        self.assertEqual({k: b[k] for k in ("apparent_bytes", "files", "entries", "bytes")},
                         {k: u[k] for k in ("apparent_bytes", "files", "entries", "bytes")})
        # Growth is seen: one more 4 KiB file.
        self.sh(sid, "dd if=/dev/zero of=/work/d bs=4096 count=1 2>/dev/null")
        u2 = self.usage(pl, "u-known")["usage"]
        self.assertEqual(u2["apparent_bytes"], u["apparent_bytes"] + 4096)
        self.assertEqual(u2["files"], 1004)
        # sbxctl status --usage prints it.
        env = {"PATH": "/usr/bin:/bin", "SBX_URL": self.stack.url, "SBX_KEY": pl,
               "HOME": "/nonexistent"}
        r = subprocess.run([SBXCTL, "status", "u-known", "--usage"], capture_output=True,
                           env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r)
        line = [ln for ln in r.stdout.decode().splitlines() if ln.startswith("/work:")]
        self.assertEqual(len(line), 1, r.stdout)
        self.assertIn("%d bytes in 1004 files, 1006 entries" % u2["apparent_bytes"], line[0])
        self.assertNotIn("PARTIAL", line[0])
        r = subprocess.run([SBXCTL, "status", "u-known", "--usage", "--json"],
                           capture_output=True, env=env, timeout=120)
        self.assertEqual(json.loads(r.stdout)["usage"]["files"], 1004)
        r = subprocess.run([SBXCTL, "status", "u-known"], capture_output=True, env=env,
                           timeout=120)
        self.assertNotIn(b"/work:", r.stdout)

    def test_a_tree_over_usage_max_entries_is_partial(self):
        op = self.stack.operator
        sid = self.sandbox(op, "u-huge")
        self.sh(sid, "mkdir -p /work/h && cd /work/h && i=0; "
                     "while [ $i -lt 15000 ]; do : > f$i; i=$((i+1)); done")
        u = self.usage(op, "u-huge")["usage"]
        self.assertTrue(u["partial"], u)
        self.assertEqual(u["partial_reason"], "max_entries")
        self.assertEqual(u["entries"], MAX_ENTRIES)

    def test_usage_is_opt_in_bounded_to_own_npcs_and_null_when_stopped(self):
        pl, other, op = self.stack.player, self.stack.other, self.stack.operator
        self.sandbox(pl, "u-own")
        # Without ?usage=1 no walk and no member.
        r = self.req(pl, "GET", "/api/v1/npcs/u-own/sandbox")
        self.assertEqual(r.status, 200, r)
        self.assertNotIn("usage", json.loads(r.body))
        r = self.req(pl, "GET", "/api/v1/npcs/u-own/sandbox?usage=0")
        self.assertNotIn("usage", json.loads(r.body))
        # A bad flag is 400 on both listeners.
        for bad in ("2", "yes", ""):
            r = self.req(pl, "GET", "/api/v1/npcs/u-own/sandbox?usage=" + bad)
            self.assertEqual(r.status, 400, r)
            self.assertEqual(json.loads(r.body)["error"]["code"], "bad_request")
        r = self.req(pl, "GET", "/api/v1/npcs/u-own/sandbox?usage=1&usage=1")
        self.assertEqual(r.status, 400, r)
        sid = json.loads(self.req(pl, "GET", "/api/v1/npcs/u-own/sandbox").body)["sandbox_id"]
        r = self.broker.request("GET", "/v1/sandboxes/%s?usage=x" % sid)
        self.assertEqual(r.status, 400, r)
        # Another player: 404, as for every other route of a foreign NPC.
        r = self.req(other, "GET", "/api/v1/npcs/u-own/sandbox?usage=1")
        self.assertEqual(r.status, 404, r)
        self.assertNotIn(b"usage\"", r.body)
        # An operator may look.
        self.assertIn("usage", self.usage(op, "u-own"))
        # Stopped: no exec, usage null (the volume is not reachable).
        r = self.req(pl, "POST", "/api/v1/npcs/u-own/sandbox/stop")
        self.assertEqual(r.status, 200, r)
        st = self.usage(pl, "u-own")
        self.assertEqual(st["state"], "stopped")
        self.assertIsNone(st["usage"])
        # Absent on the broker: state absent, usage null.
        r = self.broker.request("GET", "/v1/sandboxes/nosuchsandbox%d?usage=1" % os.getpid())
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["state"], "absent")
        self.assertIsNone(r.json()["usage"])

    def test_zz_measure_one_walk_of_10000_files(self):
        op = self.stack.operator
        sid = self.sandbox(op, "u-measure")
        self.sh(sid, "cd /work && for d in 0 1 2 3 4 5 6 7 8 9; do mkdir $d; cd $d; i=0; "
                     "while [ $i -lt 1000 ]; do printf y > f$i; i=$((i+1)); done; cd ..; done")
        # Figures, not assertions (docs: speed targets go in make bench).
        plain, counted = [], []
        for _ in range(5):
            t = time.monotonic()
            self.assertEqual(self.broker.status(sid).status, 200)
            plain.append(time.monotonic() - t)
            t = time.monotonic()
            r = self.broker.request("GET", "/v1/sandboxes/%s?usage=1" % sid)
            counted.append(time.monotonic() - t)
            self.assertEqual(r.status, 200, r)
        u = r.json()["usage"]
        self.assertFalse(u["partial"], u)
        self.assertEqual(u["files"], 10000)
        plain.sort()
        counted.sort()
        print("\n[usage] %s: status p50 %.1f ms; status?usage=1 p50 %.1f ms "
              "(walk of %d entries: %d ms in the helper)"
              % (sbxtest.runtime(), plain[2] * 1000, counted[2] * 1000, u["entries"],
                 u["elapsed_ms"]), flush=True)


if __name__ == "__main__":
    unittest.main()
