#!/usr/bin/python3
# test_snapshots.py - snapshots and forks of /work (adr/0068) on a real runtime, through the api as players use it: a snapshot taken during a stream of writes holds only whole files, from_snapshot and fork start sandboxes on copies that then live apart, delete removes the volume, another player reaches nothing, bad input changes nothing, the owner's count limit.
#
# One stack (broker + api, max_snapshots_per_player 3). The writer runs as
# one exec in a thread while the snapshot is taken; it stops when /work/stop
# appears.

import json
import os
import subprocess
import threading
import time
import unittest
import urllib.parse

import sbxtest
from brokerfix import REPO, BrokerClient
from stackfix import Stack

SBXCTL = os.path.join(REPO, "build", "out", "sbxctl")

# The writer: whole files by rename (64 KiB of x, a newline, "END n") and
# two logs in two directories, each appended one line per write(2), a/ first
# then z/; both directories hold a 24 MiB ballast file, so a copy that does
# not see one moment (no freeze) reads them far apart in time.
WRITER = (
    "mkdir -p /work/w /work/a /work/z; "
    "dd if=/dev/zero of=/work/a/ballast bs=1M count=24 2>/dev/null; "
    "cp /work/a/ballast /work/z/ballast; i=0; "
    "while [ ! -e /work/stop ]; do i=$((i+1)); "
    "head -c 65536 /dev/zero | tr '\\0' x > /work/w/.tmp; "
    "echo >> /work/w/.tmp; echo \"END $i\" >> /work/w/.tmp; "
    "mv /work/w/.tmp /work/w/f$((i % 40)); "
    "echo $i >> /work/a/log; echo $i >> /work/z/log; done; echo stopped $i")

# Checks a /work that the writer wrote: every f* whole and named by its
# number, each log whole lines 1..n, and all of one moment: the newest file
# is a/log's last line or the one renamed just before it was appended, and
# z/log is a/log or one line behind. Prints "OK files lines" or what is wrong.
CHECK = (
    "cd /work || exit 1; n=0; m=0; bad=''; "
    "for f in w/f*; do [ -e \"$f\" ] || continue; n=$((n+1)); "
    "s=$(wc -c < \"$f\"); l=$(tail -n 1 \"$f\"); "
    "j=${l#END }; [ \"$j\" -gt \"$m\" ] 2>/dev/null && m=$j; "
    "[ \"f$((j % 40))\" = \"${f#w/}\" ] || bad=\"$bad $f:name$j\"; "
    "x=$(head -c 65536 \"$f\" | tr -d x | wc -c); "
    "case \"$l\" in 'END '*) ;; *) bad=\"$bad $f:tail\";; esac; "
    "[ \"$x\" = 0 ] || bad=\"$bad $f:body\"; "
    "[ \"$s\" = $((65536 + 1 + ${#l} + 1)) ] || bad=\"$bad $f:size$s\"; done; "
    "for d in a z; do c=0; while read -r v; do c=$((c+1)); [ \"$v\" = \"$c\" ] || "
    "bad=\"$bad $d/log:$c:$v\"; done < $d/log; eval k$d=$c; "
    "[ -z \"$(tail -c 1 $d/log)\" ] || bad=\"$bad $d/log:partial\"; done; "
    "[ \"$m\" = \"$ka\" ] || [ \"$m\" = $((ka + 1)) ] || bad=\"$bad moment:f$m/a$ka\"; "
    "[ \"$kz\" = \"$ka\" ] || [ \"$kz\" = $((ka - 1)) ] || bad=\"$bad moment:a$ka/z$kz\"; "
    "if [ -n \"$bad\" ]; then echo \"BAD$bad\"; else echo \"OK $n $ka\"; fi")


def parse_sse(body):
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


class SnapshotTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxsn%d-" % os.getpid()
        # A warm pool of 1: sn-a is a claimed member, whose /work volume keeps
        # the member's name (adr/0067): the snapshot must copy that one.
        cls.stack = Stack(cls.prefix, api_args=["--max-snapshots-per-player", "3"],
                          broker_args=["--warm-pool", "1"])
        u = urllib.parse.urlsplit(cls.stack.url)
        cls.host, cls.port = u.hostname, u.port

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    def req(self, method, path, body=None, key=None, raw=None):
        hdrs = {"Authorization": "Bearer " + (key or self.stack.player)}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        return sbxtest.tcp_http(self.host, self.port, method, path, data, hdrs, 180)

    def ok(self, r, status=200):
        self.assertEqual(r.status, status, r.body[:500])
        return json.loads(r.body) if r.body else None

    def npc(self, name, up=True):
        self.ok(self.req("POST", "/api/v1/npcs", {"name": name}), 201)
        if up:
            self.ok(self.req("PUT", "/api/v1/npcs/%s/sandbox" % name))

    def sh(self, npc, script):
        r = self.req("POST", "/api/v1/npcs/%s/sandbox/exec" % npc,
                     {"argv": ["sh", "-c", script], "timeout_ms": 120000})
        self.assertEqual(r.status, 200, r.body[:500])
        evs = parse_sse(r.body)
        self.assertEqual(evs[-1][0], "exit", evs)
        return "".join(d.get("data", "") for e, d in evs if e == "stdout")

    def snap_volumes(self):
        return sorted(v["Name"] for v in self.stack.managed_volumes() if ".snap." in v["Name"])

    def snaps(self, npc):
        return [s["name"] for s in self.ok(self.req(
            "GET", "/api/v1/npcs/%s/sandbox/snapshots" % npc))["snapshots"]]

    def pool_ready(self):
        text = BrokerClient(self.stack.sock, self.stack.token).metrics().body.decode()
        return 'sbx_broker_warm_pool_members{state="ready"} 1' in text

    def test_a_snapshot_during_writes_from_snapshot_fork_delete(self):
        deadline = time.time() + 120
        while not self.pool_ready():
            self.assertLess(time.time(), deadline, "the warm pool did not fill")
            time.sleep(0.2)
        self.npc("sn-a")
        c = sbxtest.Engine().inspect(self.prefix + "npc-sn-a")
        vol = [m["Name"] for m in c["Mounts"] if m["Destination"] == "/work"]
        self.assertNotEqual(vol, [self.prefix + "npc-sn-a-work"], "not a claimed member")
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("w", self.sh("sn-a", WRITER)))
        t.start()
        try:
            # Let the writer get going (a few files renamed into place).
            deadline = time.time() + 60
            while time.time() < deadline:
                n = self.sh("sn-a", "wc -l < /work/a/log 2>/dev/null || echo 0").strip()
                if int(n or 0) >= 20:
                    break
                time.sleep(0.2)
            snap = self.ok(self.req("POST", "/api/v1/npcs/sn-a/sandbox/snapshots",
                                    {"name": "mid-write"}), 201)
            self.assertEqual(snap["name"], "mid-write")
            self.assertEqual(snap["npc"], "sn-a")
            self.assertEqual(snap["owner"], "pl")
            self.assertGreater(snap["size_bytes"], 20 * 65536 - 1)
            # The writer went on after the copy (the sandbox was unpaused).
            n1 = int(self.sh("sn-a", "wc -l < /work/a/log").strip())
            deadline = time.time() + 60
            while int(self.sh("sn-a", "wc -l < /work/a/log").strip()) <= n1 + 5:
                self.assertLess(time.time(), deadline, "the writer did not go on")
                time.sleep(0.2)
        finally:
            self.req("PUT", "/api/v1/npcs/sn-a/sandbox/files?path=/work/stop", raw=b"")
            t.join(120)
        self.assertIn("stopped", out.get("w", ""))
        self.assertEqual(self.snaps("sn-a"), ["mid-write"])
        self.assertEqual(len(self.snap_volumes()), 1)

        # from_snapshot: a new sandbox of another NPC of the owner on the
        # copy; only whole files and whole log lines in it.
        self.npc("sn-b", up=False)
        st = self.ok(self.req("PUT", "/api/v1/npcs/sn-b/sandbox",
                              {"from_snapshot": "mid-write", "from_npc": "sn-a"}))
        self.assertEqual(st["state"], "running")
        res = self.sh("sn-b", CHECK).strip()
        self.assertTrue(res.startswith("OK "), res)
        _, files, lines = res.split()
        self.assertGreaterEqual(int(lines), 20)
        self.assertEqual(self.sh("sn-b", "ls -ld /work | cut -c1-10; stat -c %u /work/a/log"
                                 ).split(), ["drwxr-xr-x", "1000"])
        self.assertFalse(self.sh("sn-b", "ls /work").count("stop"))
        # On a sandbox that exists: refused, nothing changed.
        r = self.req("PUT", "/api/v1/npcs/sn-b/sandbox", {"from_snapshot": "mid-write",
                                                          "from_npc": "sn-a"})
        self.assertEqual(r.status, 409, r.body)
        self.assertTrue(self.sh("sn-b", CHECK).startswith("OK "))

        # Fork: the same /work now, then each lives apart.
        sum_a = self.sh("sn-a", "cd /work && find . | sort | xargs md5sum 2>/dev/null")
        f = self.ok(self.req("POST", "/api/v1/npcs/sn-a/sandbox/fork", {"npc": "sn-c"}), 201)
        self.assertEqual((f["npc"], f["state"], f["forked_from"]), ("sn-c", "running", "sn-a"))
        self.assertEqual(self.sh("sn-c", "cd /work && find . | sort | xargs md5sum 2>/dev/null"),
                         sum_a)
        self.sh("sn-a", "echo a > /work/only-a")
        self.sh("sn-c", "echo c > /work/only-c; echo changed >> /work/a/log")
        self.assertEqual(self.sh("sn-a", "ls /work/only-c /work/only-a 2>/dev/null"),
                         "/work/only-a\n")
        self.assertEqual(self.sh("sn-c", "ls /work/only-c /work/only-a 2>/dev/null"),
                         "/work/only-c\n")
        self.assertNotIn("changed", self.sh("sn-a", "tail -n 1 /work/a/log"))
        # A fork onto an NPC that has a sandbox: refused.
        r = self.req("POST", "/api/v1/npcs/sn-a/sandbox/fork", {"npc": "sn-b"})
        self.assertEqual(r.status, 409, r.body)

        # The snapshot outlives its sandbox; the owner's list shows it.
        self.ok(self.req("DELETE", "/api/v1/npcs/sn-a/sandbox"))
        allmine = self.ok(self.req("GET", "/api/v1/snapshots"))["snapshots"]
        self.assertEqual([(s["npc"], s["name"]) for s in allmine], [("sn-a", "mid-write")])
        # ... and restores the NPC's own sandbox.
        self.ok(self.req("PUT", "/api/v1/npcs/sn-a/sandbox", {"from_snapshot": "mid-write"}))
        self.assertTrue(self.sh("sn-a", CHECK).startswith("OK "))
        # Delete: the volume goes.
        d = self.ok(self.req("DELETE", "/api/v1/npcs/sn-a/sandbox/snapshots/mid-write"))
        self.assertEqual(d["state"], "deleted")
        self.assertEqual(self.snaps("sn-a"), [])
        self.assertEqual(self.snap_volumes(), [])
        r = self.req("DELETE", "/api/v1/npcs/sn-a/sandbox/snapshots/mid-write")
        self.assertEqual(r.status, 404, r.body)

    def test_b_others_bad_input_and_the_count_limit(self):
        self.npc("sn-d")
        other = self.stack.other
        before = self.snap_volumes()
        # Another player's sandbox: 404 for every route, nothing made.
        for method, path, body in (
                ("POST", "/api/v1/npcs/sn-d/sandbox/snapshots", {"name": "x"}),
                ("GET", "/api/v1/npcs/sn-d/sandbox/snapshots", None),
                ("DELETE", "/api/v1/npcs/sn-d/sandbox/snapshots/x", None),
                ("POST", "/api/v1/npcs/sn-d/sandbox/fork", {"npc": "sn-other"})):
            r = self.req(method, path, body, key=other)
            self.assertEqual(r.status, 404, (path, r.body))
        self.assertEqual(self.ok(self.req("GET", "/api/v1/snapshots", key=other))["snapshots"], [])
        # from_npc of another owner: 404 too.
        self.ok(self.req("POST", "/api/v1/npcs", {"name": "sn-o"}, key=other), 201)
        r = self.req("PUT", "/api/v1/npcs/sn-o/sandbox",
                     {"from_snapshot": "x", "from_npc": "sn-d"}, key=other)
        self.assertEqual(r.status, 404, r.body)
        # Bad names: 400 before anything changes.
        for name in ("Bad", "-x", "a" * 33, "a_b", "", "a/b", 7):
            r = self.req("POST", "/api/v1/npcs/sn-d/sandbox/snapshots", {"name": name})
            self.assertEqual(r.status, 400, (name, r.body))
        r = self.req("POST", "/api/v1/npcs/sn-d/sandbox/snapshots", {"name": "ok", "x": 1})
        self.assertEqual(r.status, 400, r.body)
        r = self.req("DELETE", "/api/v1/npcs/sn-d/sandbox/snapshots/Bad")
        self.assertEqual(r.status, 400, r.body)
        r = self.req("POST", "/api/v1/npcs/sn-d/sandbox/fork", {"npc": "Bad Name"})
        self.assertEqual(r.status, 400, r.body)
        self.npc("sn-e", up=False)
        r = self.req("PUT", "/api/v1/npcs/sn-e/sandbox", {"from_snapshot": "Nope"})
        self.assertEqual(r.status, 400, r.body)
        r = self.req("PUT", "/api/v1/npcs/sn-e/sandbox", {"from_snapshot": "nope"})
        self.assertEqual(r.status, 404, r.body)
        self.assertEqual(self.ok(self.req("GET", "/api/v1/npcs/sn-e/sandbox"))["state"], "absent")
        self.assertEqual(self.snap_volumes(), before)
        names = [n["name"] for n in self.ok(self.req("GET", "/api/v1/npcs"))]
        self.assertNotIn("Bad Name", names)
        # E2B's snapshot and fork calls: 501 with a sentence, nothing made.
        for tail in ("snapshots", "fork"):
            r = sbxtest.tcp_http(self.host, self.port, "POST",
                                 "/e2b/sandboxes/sn-d/" + tail, b"{}",
                                 {"X-API-Key": self.stack.player,
                                  "Content-Type": "application/json"}, 60)
            self.assertEqual(r.status, 501, r.body)
            self.assertIn("/api/v1/npcs/sn-d/sandbox/snapshots", json.loads(r.body)["message"])
        self.assertEqual(self.snap_volumes(), before)
        # A stopped sandbox is copied as it lies; the same name twice: 409.
        self.ok(self.req("POST", "/api/v1/npcs/sn-d/sandbox/stop", {}))
        self.ok(self.req("POST", "/api/v1/npcs/sn-d/sandbox/snapshots", {"name": "s1"}), 201)
        r = self.req("POST", "/api/v1/npcs/sn-d/sandbox/snapshots", {"name": "s1"})
        self.assertEqual(r.status, 409, r.body)
        # The owner's count (3 here, test_a deleted its own).
        for n in ("s2", "s3"):
            self.ok(self.req("POST", "/api/v1/npcs/sn-d/sandbox/snapshots", {"name": n}), 201)
        r = self.req("POST", "/api/v1/npcs/sn-d/sandbox/snapshots", {"name": "s4"})
        self.assertEqual(r.status, 429, r.body)
        self.assertIn("max_snapshots_per_player", json.loads(r.body)["error"]["message"])
        self.assertEqual(self.snaps("sn-d"), ["s1", "s2", "s3"])
        for n in ("s1", "s2", "s3"):
            self.ok(self.req("DELETE", "/api/v1/npcs/sn-d/sandbox/snapshots/" + n))
        self.assertEqual(self.snap_volumes(), before)
        # sbxctl snapshot and fork.
        env = dict(os.environ, SBX_URL=self.stack.url, SBX_KEY=self.stack.player,
                   HOME=self.stack.dir)
        env.pop("SBX_CLI_CONFIG", None)

        def cli(*args):
            r = subprocess.run([SBXCTL] + list(args), env=env, capture_output=True,
                               text=True, timeout=120)
            return r.returncode, r.stdout + r.stderr
        rc, out = cli("snapshot", "sn-d", "create", "c1")
        self.assertEqual(rc, 0, out)
        self.assertIn("snapshot c1 taken", out)
        rc, out = cli("snapshot", "sn-d", "list")
        self.assertEqual((rc, out.split()[:4]), (0, ["NAME", "BYTES", "CREATED", "c1"]), out)
        rc, out = cli("fork", "sn-d", "sn-g")
        self.assertEqual(rc, 0, out)
        self.assertIn("sn-g: forked from sn-d", out)
        rc, out = cli("snapshot", "sn-d", "delete", "Bad")
        self.assertEqual(rc, 2, out)
        rc, out = cli("snapshot", "sn-d", "delete", "c1")
        self.assertEqual(rc, 0, out)
        rc, out = cli("snapshot", "sn-d", "delete", "c1")
        self.assertEqual(rc, 4, out)
        self.assertEqual(self.snap_volumes(), before)

    def test_c_a_restart_clears_what_a_cut_copy_left(self):
        # What a broker killed mid-copy leaves, made by hand: its sandbox
        # paused, a copy container with the volume it was filling.
        self.npc("sn-f")
        eng = sbxtest.Engine()
        cname = self.prefix + "npc-sn-f"
        half = self.prefix + "npc-sn-f.snap.half"
        eng.call("POST", "/volumes/create", {"Name": half, "Labels": {
            "io.sbx.managed": "true", "io.sbx.snapshot": "half",
            "io.sbx.snapshot-of": "npc-sn-f"}})
        aux = eng.create(cmd=["sleep", "600"], name=cname + ".snapcp",
                         labels={"io.sbx.managed": "true", "io.sbx.role": "snapshot-copy"},
                         host_config={"NetworkMode": "none", "Mounts": [
                             {"Type": "volume", "Source": half, "Target": "/to"}]})
        eng.start(aux)
        eng.call("POST", "/containers/%s/pause" % cname)
        self.assertTrue(eng.inspect(cname)["State"]["Paused"])
        self.stack.broker.stop()
        self.stack.start_broker()

        def aux_gone():
            # Podman answers 500 "no such container" while it removes one.
            st, _ = eng.fetch("GET", "/containers/%s/json" % aux)
            return st in (404, 500)
        deadline = time.time() + 60
        while time.time() < deadline and (not aux_gone() or
                                          eng.inspect(cname)["State"]["Paused"] or
                                          half in self.snap_volumes()):
            time.sleep(0.2)
        self.assertTrue(aux_gone())
        self.assertFalse(eng.inspect(cname)["State"]["Paused"])
        self.assertNotIn(half, self.snap_volumes())
        self.assertEqual(self.sh("sn-f", "echo alive"), "alive\n")
        log = open(self.stack.broker_logs[-1]).read()
        self.assertIn("snapshot copies cut by a broker restart cleared", log)


if __name__ == "__main__":
    unittest.main()
