#!/usr/bin/python3
# test_agent.py - the sandbox agent (adr/0025, issue 13): restart after a kill from inside, a hostile sandbox, a slow reader among many execs, broker SIGKILL; protocol 4 (adr/0049) in a real container: a terminal, stdin streamed into cat, a port.

import os
import re
import signal
import socket
import struct
import sys
import threading
import time
import unittest

from brokerfix import API, BrokerTestCase, ExecStream, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import agentproto as ap  # noqa: E402  (protocol 4's frames, shared with the measurements)


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
            bad = [r for r in results if r is None or r.code != 0]
            if bad:
                # Say whether the sandbox's cgroup killed for memory.
                ev = self.client.exec(sid, ["sh", "-c", "cat /sys/fs/cgroup/memory.events "
                                            "/sys/fs/cgroup/memory.peak 2>&1; true"])
                self.fail("%d of 49 failed, first %r; cgroup: %r" % (
                    len(bad), bad[0], bytes(ev.out)))
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


class RawAgent:
    """A second `sbx-helper agent` in a sandbox's container, with its own
    --state-dir (so the broker's agent and its kill handle are untouched),
    started by one runtime exec as the broker starts its own (adr/0025) and
    spoken to in protocol 4 (tests/harness/agentproto.py) by the test: the
    agent's side of sessions in a real container, before any broker route."""

    def __init__(self, engine, cid):
        body = {"AttachStdin": True, "AttachStdout": True, "AttachStderr": True, "Tty": False,
                "Cmd": ["/.sbx/sbx-helper", "--state-dir", "/run/sbx/t-agent", "agent",
                        "--idle-ms", "60000"], "WorkingDir": "/work"}
        eid = engine.post("/containers/%s/exec" % cid, body)["Id"]
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(30)
        self.s.connect(engine.path)
        b = b'{"Detach":false,"Tty":false}'
        self.s.sendall(("POST %s/exec/%s/start HTTP/1.1\r\nHost: d\r\nContent-Type: "
                        "application/json\r\nContent-Length: %d\r\nConnection: Upgrade\r\n"
                        "Upgrade: tcp\r\n\r\n" % (API, eid, len(b))).encode() + b)
        head = b""
        while b"\r\n\r\n" not in head:
            c = self.s.recv(4096)
            assert c, "the runtime closed the agent's exec"
            head += c
        head, rest = head.split(b"\r\n\r\n", 1)
        assert int(head.split()[1]) in (101, 200), head
        self.r8, self.dec = ap.Runtime8(), ap.Decoder()
        self.streams = {}
        self.next_id = 1
        self.slow = set()   # streams whose output credit is held back
        self.frames(rest)
        self.until(lambda: self.hello)

    hello = False

    def frames(self, data):
        for typ, flags, sid, p in self.dec.feed(self.r8.feed(data).get(1, b"")):
            if typ == ap.T_HELLO:
                self.hello = True
                continue
            st = self.streams.get(sid)
            if st is None:
                continue
            if typ == ap.T_DATA:
                st["out"][flags] += p
                st["owed"] += len(p)
            elif typ == ap.T_WINDOW:
                st["room"] += struct.unpack(">I", p)[0]
            elif typ == ap.T_EXIT:
                st["exit"] = (p[0], p[1], p[2])
            elif typ == ap.T_REFUSE:
                st["exit"] = ("refused", p)
        for sid, st in self.streams.items():
            if st["owed"] and sid not in self.slow:
                self.s.sendall(ap.frame(ap.T_WINDOW, sid, struct.pack(">I", st["owed"]), 1))
                st["owed"] = 0

    def pump(self, timeout=0.05):
        self.s.settimeout(timeout)
        try:
            c = self.s.recv(1 << 20)
        except socket.timeout:
            return
        finally:
            # sendall's timeout again: left at the pump's 10-50 ms, a send
            # into a full socket buffer timed out under load (a slow agent
            # reading its stdin), which no agent fault caused
            self.s.settimeout(30)
        assert c, "the agent's channel closed"
        self.frames(c)

    def until(self, pred, timeout=20):
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, "timed out"
            self.pump()

    def open(self, argv, stdin=False, ctrl=False):
        sid = self.next_id
        self.next_id += 1
        self.streams[sid] = {"out": {1: b"", 2: b""}, "owed": 0, "room": ap.WINDOW,
                             "exit": None}
        self.s.sendall(ap.open_frame(sid, argv, (), stdin, ctrl))
        return sid

    def write(self, sid, data):
        """Sends data as stdin within the stream's credit, pumping for more."""
        st = self.streams[sid]
        while data:
            self.until(lambda: st["room"] > 0 or st["exit"] is not None)
            assert st["exit"] is None, st
            n = min(len(data), st["room"], 65536)
            self.s.sendall(ap.frame(ap.T_DATA, sid, data[:n]))
            st["room"] -= n
            data = data[n:]

    def send(self, frame):
        self.s.sendall(frame)

    def out(self, sid, fd=1):
        return self.streams[sid]["out"][fd]

    def wait_exit(self, sid, timeout=20):
        self.until(lambda: self.streams[sid]["exit"] is not None, timeout)
        return self.streams[sid]["exit"]

    def close(self):
        self.s.close()


def framed_stdout(data):
    """stdout of exec --framed (protocol 2 frames) out of its stream's bytes."""
    out, i = [], 0
    while i + 8 <= len(data):
        t, n = data[i], struct.unpack(">I", data[i + 4:i + 8])[0]
        if t == 1:
            out.append(data[i + 8:i + 8 + n])
        i += 8 + n
    return b"".join(out)


class AgentSessionTest(BrokerTestCase):
    """Protocol 4's modes in a sandbox container of this run's runtime."""

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("agsess")
        cls.ensure_ok(cls.sid)
        cls.cid = cls.engine.containers_of(cls.sid)[0]["Id"]

    def setUp(self):
        self.agent = RawAgent(self.engine, self.cid)
        self.addCleanup(self.agent.close)

    def test_terminal_size_term_resize_signal_and_exit(self):
        a = self.agent
        t1 = a.open(["pty", "--id", "tp1", "--cols", "100", "--rows", "30", "--term", "vt100",
                     "--", "sh", "-c", "stty size; echo T=$TERM; exit 3"], True, True)
        self.assertEqual(a.wait_exit(t1), (ap.EXIT_EXITED, 3, 0))
        self.assertIn(b"30 100\r\n", a.out(t1))
        self.assertIn(b"T=vt100\r\n", a.out(t1))
        self.assertEqual(a.out(t1, 2), b"")
        # resize, then stty agrees
        t2 = a.open(["pty", "--id", "tp2", "--", "sh", "-c", "stty size; read x; stty size"],
                    True, True)
        a.until(lambda: b"24 80\r\n" in a.out(t2))
        a.send(ap.resize_frame(t2, 132, 50))
        a.write(t2, b"go\r")
        self.assertEqual(a.wait_exit(t2), (ap.EXIT_EXITED, 0, 0))
        self.assertIn(b"50 132\r\n", a.out(t2))
        # ^C as a signal record reaches the foreground sleep of an
        # interactive shell, which lives on
        t3 = a.open(["pty", "--id", "tp3", "--", "sh", "-i"], True, True)
        a.write(t3, b"echo go; sleep 100\r")
        a.until(lambda: b"go\r\n" in a.out(t3))
        time.sleep(0.3)
        t0 = time.monotonic()
        a.send(ap.signal_frame(t3, signal.SIGINT))
        a.write(t3, b"echo alive; exit 4\r")
        self.assertEqual(a.wait_exit(t3), (ap.EXIT_EXITED, 4, 0))
        self.assertLess(time.monotonic() - t0, 10)
        self.assertIn(b"alive\r\n", a.out(t3))

    def test_stdin_through_cat_with_a_slow_reader(self):
        a = self.agent
        data = os.urandom(4 << 20)
        sid = a.open(["exec", "--framed", "--id", "cat1", "--", "cat"], stdin=True)
        a.slow.add(sid)   # output credit comes back in bursts, after pauses
        sent, last = 0, 0
        st = a.streams[sid]
        while sent < len(data):
            n = min(len(data) - sent, st["room"], 65536)
            if n:
                a.send(ap.frame(ap.T_DATA, sid, data[sent:sent + n]))
                st["room"] -= n
                sent += n
            a.pump(0.01)
            got = len(st["out"][1])
            if got - last >= 512 << 10:   # every 512 KiB: stop reading a while
                time.sleep(0.2)
                last = got
            if st["owed"] and (st["room"] == 0 or got - last < 256 << 10):
                a.send(ap.frame(ap.T_WINDOW, sid, struct.pack(">I", st["owed"]), 1))
                st["owed"] = 0
        a.send(ap.frame(ap.T_EOF, sid))
        a.slow.discard(sid)
        a.frames(b"")   # what is owed goes
        self.assertEqual(a.wait_exit(sid, 60), (ap.EXIT_EXITED, 0, 0))
        self.assertEqual(framed_stdout(a.out(sid)), data)

    def test_port_connection_and_closed_port(self):
        a = self.agent
        w = self.client.write(self.sid, "/work/hello.txt", b"hello through connect\n")
        self.assertIn(w.status, (200, 204), w)
        srv = a.open(["exec", "--framed", "--id", "httpd1", "--", "httpd", "-f", "-p",
                      "127.0.0.1:18080", "-h", "/work"])
        deadline = time.monotonic() + 10
        while True:
            c = a.open(["connect", "--port", "18080"], stdin=True)
            a.write(c, b"GET /hello.txt HTTP/1.0\r\n\r\n")
            a.send(ap.frame(ap.T_EOF, c))
            code = a.wait_exit(c)
            if code[1] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)   # httpd not listening yet
        self.assertEqual(code, (ap.EXIT_EXITED, 0, 0), a.out(c, 2))
        self.assertTrue(a.out(c).startswith(b"HTTP/1.") and b" 200 " in a.out(c)[:20],
                        a.out(c)[:200])
        self.assertTrue(a.out(c).endswith(b"\r\n\r\nhello through connect\n"), a.out(c)[-100:])
        a.send(ap.frame(ap.T_CANCEL, srv))
        a.wait_exit(srv)
        c = a.open(["connect", "--port", "18081"], stdin=True)
        self.assertEqual(a.wait_exit(c), (ap.EXIT_EXITED, 8, 0))
        self.assertIn(b'"code":"port_closed"', a.out(c, 2))



if __name__ == "__main__":
    unittest.main(verbosity=2)
