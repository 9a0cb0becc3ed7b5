#!/usr/bin/python3
# test_direct_channel.py - the agent's direct channel (adr/0066, issue 25
# items 1-2): the broker reaches each sandbox's agent through a unix socket
# in the sandbox's socket volume, via the volume's host mountpoint, and
# never follows a path the sandbox controls. A hostile sandbox replaces its
# socket with symlinks (to the runtime's socket, the broker's socket,
# /etc/shadow and a canary socket of the test's), a FIFO, a regular file and
# a directory, and renames directories in a loop while the broker
# reconnects (the agent killed from inside, the broker restarted): the
# broker never connects or opens outside the volume (the canary hears
# nothing, /etc/shadow's access time stays), says why in one log line,
# falls back to the runtime exec stream, and every exec still works. Bulk
# bytes (files of 16 MiB) go whole over the direct channel.

import hashlib
import os
import re
import socket
import tempfile
import threading

from brokerfix import BrokerTestCase, wait_until

LISTEN_DIR = "/run/sbx-agent"
SOCK = LISTEN_DIR + "/agent.sock"
FALLBACK_LINE = "sandbox agent direct channel not used"


def direct_counts(client):
    r = client.metrics()
    assert r.status == 200, r
    out = {}
    for res in ("connected", "fallback"):
        m = re.search(rb'^sbx_broker_agent_direct_total\{result="%s"\} (\d+)$' % res.encode(),
                      r.body, re.M)
        assert m, "no sbx_broker_agent_direct_total{result=%s} in /metrics" % res
        out[res] = int(m.group(1))
    return out


def agent_pid(client, sid):
    res = client.exec(sid, ["ps", "-o", "pid,ppid,args"])
    assert res.code == 0, res
    procs = {}
    for line in bytes(res.out).decode(errors="replace").splitlines():
        m = re.match(r"^\s*(\d+)\s+(\d+)\s+/\.sbx/sbx-helper agent\b", line)
        if m:
            procs[int(m.group(1))] = int(m.group(2))
    top = sorted(p for p, pp in procs.items() if pp not in procs)
    assert len(top) == 1, top
    return top[0]


class Canary:
    """A unix socket of the test's on the host: a broker that followed a
    symlink to it would connect, and it would count."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-dc-canary-")
        self.path = os.path.join(self.dir, "canary.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o666)
        self.sock.listen(16)
        self.hits = 0
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.hits += 1
                c.close()
            except socket.timeout:
                continue
            except OSError:
                return

    def close(self):
        self.stop = True
        self.t.join(5)
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


class DirectChannelTest(BrokerTestCase):
    limits = {"max_execs": 32, "pids": 256, "memory": 256 << 20}

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("direct")
        cls.ensure_ok(cls.sid)

    def fallback_lines(self, broker=None):
        return [l for l in (broker or self.broker).log_text().splitlines() if FALLBACK_LINE in l]

    def test_direct_channel_carries_bulk_bytes(self):
        sid = self.new_id("dbulk")
        self.ensure_ok(sid)
        before = direct_counts(self.client)
        res = self.client.exec(sid, ["true"])
        self.assertEqual(res.code, 0, res)
        after = direct_counts(self.client)
        self.assertEqual(after["connected"] - before["connected"], 1, (before, after))
        self.assertEqual(after["fallback"], before["fallback"])
        # The socket volume is sbx's, labelled, mounted at LISTEN_DIR; the
        # agent took its connection and its socket name went with it.
        vols = [v["Name"] for v in self.engine.volumes("io.sbx.agent-of=%s" % sid)]
        self.assertTrue(any(v.endswith(sid + "-agent") for v in vols), vols)
        res = self.client.sh(sid, "ls -a %s; stat -c '%%u %%a' %s" % (LISTEN_DIR, LISTEN_DIR))
        self.assertEqual(res.code, 0, res)
        self.assertNotIn(b"agent.sock", bytes(res.out))
        # Bulk: 16 MiB each way, byte for byte, in one channel.
        data = os.urandom(16 << 20)
        w = self.client.write(sid, "/work/bulk.bin", data)
        self.assertIn(w.status, (200, 204), w)
        r = self.client.read(sid, "/work/bulk.bin")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(hashlib.sha256(r.body).hexdigest(), hashlib.sha256(data).hexdigest())
        res = self.client.sh(sid, "sha256sum /work/bulk.bin")
        self.assertEqual(bytes(res.out).split()[0].decode(), hashlib.sha256(data).hexdigest())
        res = self.client.sh(sid, "head -c 1048576 /dev/zero | wc -c")
        self.assertEqual(bytes(res.out).strip(), b"1048576", res)
        # Still one direct channel: nothing fell back.
        self.assertEqual(direct_counts(self.client)["fallback"], before["fallback"])

    def test_traps_in_place_of_the_socket(self):
        """Each trap is set while the socket volume's root is read-only to
        the sandbox user (so the new agent cannot replace it), then the
        agent is killed: the next exec starts one, the broker finds the
        trap, refuses it with one line, and the exec runs over the stream."""
        canary = Canary()
        shadow_atime = os.stat("/etc/shadow").st_atime_ns
        traps = [
            ("symlink to the runtime's socket", "ln -s %s agent.sock" % self.runtime_sock,
             "symlink"),
            ("symlink to the broker's socket", "ln -s %s agent.sock" % self.broker.sock,
             "symlink"),
            ("symlink to /etc/shadow", "ln -s /etc/shadow agent.sock", "symlink"),
            ("symlink to a canary socket", "ln -s %s agent.sock" % canary.path, "symlink"),
            ("symlink to a directory", "ln -s / agent.sock", "symlink"),
            ("FIFO", "mkfifo agent.sock", "not a socket"),
            ("regular file", "echo x > agent.sock", "not a socket"),
            ("directory", "mkdir -p agent.sock/d", "not a socket"),
        ]
        try:
            for what, make, reason in traps:
                with self.subTest(trap=what):
                    self.client.exec(self.sid, ["true"])
                    pid = agent_pid(self.client, self.sid)
                    lines = len(self.fallback_lines())
                    counts = direct_counts(self.client)
                    script = ("cd %s && chmod 700 . && rm -rf agent.sock && %s && chmod 500 . "
                              "&& kill -9 %d" % (LISTEN_DIR, make, pid))
                    self.client.sh(self.sid, script)   # dies with its agent
                    res = self.client.exec(self.sid, ["echo", "back"])
                    self.assertEqual(res.code, 0, res)
                    self.assertEqual(bytes(res.out), b"back\n")
                    new = self.fallback_lines()[lines:]
                    self.assertEqual(len(new), 1, new)
                    self.assertIn(self.sid, new[0])
                    self.assertIn(reason, new[0])
                    after = direct_counts(self.client)
                    self.assertEqual(after["fallback"] - counts["fallback"], 1)
                    self.assertEqual(after["connected"], counts["connected"])
            self.client.sh(self.sid, "chmod 700 %s && rm -rf %s" % (LISTEN_DIR, SOCK))
            self.assertEqual(canary.hits, 0, "the broker followed a symlink to the canary")
            self.assertEqual(os.stat("/etc/shadow").st_atime_ns, shadow_atime)
        finally:
            canary.close()

    def test_renames_and_swaps_while_the_broker_reconnects(self):
        """A loop in the sandbox swaps the socket's name between symlinks,
        a FIFO, a file and renamed directories, as fast as it can, while
        the agent is killed again and again and the broker restarted: every
        exec works, the canary hears nothing, and each agent start either
        connected to the real agent or fell back with its line."""
        canary = Canary()
        sid = self.new_id("dswap")
        self.ensure_ok(sid)
        loop = ("cd %s; i=0; while [ ! -e /tmp/stop ]; do i=$((i+1)); "
                "rm -rf agent.sock d1 d2; ln -s %s agent.sock; rm -f agent.sock; "
                "ln -s %s agent.sock; rm -f agent.sock; ln -s /etc/shadow agent.sock; "
                "rm -f agent.sock; mkfifo agent.sock; rm -f agent.sock; echo x > agent.sock; "
                "rm -f agent.sock; mkdir -p d1/d; mv d1 d2; mv d2 agent.sock; "
                "mv agent.sock d1; done" % (LISTEN_DIR, canary.path, self.runtime_sock))
        try:
            self.assertEqual(self.client.exec(sid, ["true"]).code, 0)
            # Outside the exec's group: it outlives the agents killed below.
            res = self.client.sh(sid, "setsid sh -c '%s' >/dev/null 2>&1 </dev/null &" % loop)
            self.assertEqual(res.code, 0, res)
            for i in range(4):
                before = direct_counts(self.client)
                lines = len(self.fallback_lines())
                self.client.sh(sid, "kill -9 %d" % agent_pid(self.client, sid))
                res = self.client.exec(sid, ["echo", str(i)])
                self.assertEqual(res.code, 0, res)
                self.assertEqual(bytes(res.out), b"%d\n" % i)
                after = direct_counts(self.client)
                took = (after["connected"] - before["connected"]) + \
                    (after["fallback"] - before["fallback"])
                self.assertEqual(took, 1, (before, after))
                self.assertEqual(len(self.fallback_lines()) - lines,
                                 after["fallback"] - before["fallback"])
            # A broker restart: the new broker's first exec starts a new
            # agent under the same loop.
            b2 = self.start_broker(name="direct2")
            c2 = b2.client()
            res = c2.exec(sid, ["echo", "again"])
            self.assertEqual(res.code, 0, res)
            self.assertEqual(bytes(res.out), b"again\n")
            self.assertEqual(len(self.fallback_lines(b2)), direct_counts(c2)["fallback"])
            c2.sh(sid, "touch /tmp/stop")
            b2.stop()
            self.assertTrue(wait_until(lambda: self.client.sh(
                sid, "pgrep -f 'while \\[' || true").out == b"", 30))
            self.assertEqual(canary.hits, 0, "the broker followed a symlink to the canary")
        finally:
            canary.close()

    def test_reconcile_removes_orphaned_socket_volumes(self):
        """A socket volume whose sandbox has no container (a broker killed
        mid-destroy, a container removed behind sbx's back) goes at the next
        broker start; one that is not sbx's (no io.sbx.managed) stays."""
        gone = "orph-%s" % os.urandom(3).hex()
        other = "notours-%s" % os.urandom(3).hex()
        self.engine.post("/volumes/create", {"Name": "sbx-%s-agent" % gone, "Labels": {
            "io.sbx.managed": "true", "io.sbx.agent-of": gone}})
        self.engine.post("/volumes/create", {"Name": "sbx-%s-agent" % other, "Labels": {
            "io.sbx.agent-of": other}})
        try:
            b = self.start_broker(name="reconcile")
            names = lambda: [v["Name"] for v in self.engine.volumes()]
            self.assertTrue(wait_until(lambda: "sbx-%s-agent" % gone not in names(), 30), names())
            self.assertIn("sbx-%s-agent" % other, names())
            # the live sandbox's own volume stays
            self.assertTrue(any(n.endswith(self.sid + "-agent") for n in names()))
            self.assertEqual(b.client().exec(self.sid, ["true"]).code, 0)
            b.stop()
        finally:
            self.engine.remove_volume("sbx-%s-agent" % other)

    def test_runtime_setting_keeps_the_stream(self):
        b = self.start_broker(limits={"agent_channel": "runtime"}, name="rtonly")
        c = b.client()
        sid = self.new_id("drt")
        r = c.ensure(sid)
        self.assertEqual(r.status, 200, r)
        res = c.exec(sid, ["echo", "stream"])
        self.assertEqual(bytes(res.out), b"stream\n")
        self.assertEqual(direct_counts(c), {"connected": 0, "fallback": 0})
        # No socket volume either: the sandbox was made without it.
        self.assertEqual(self.engine.volumes("io.sbx.agent-of=%s" % sid), [])
        self.assertIn(c.destroy(sid).status, (200, 204))
        b.stop()


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
