"""test_api_terminals - terminals as resources (issue 21 item 3, adr/0051): a
real sandbox-api in front of a real broker on the runtime under test, the
client python's http.client (SSE out, POST in; the WebSocket attach is
test_api_ws's). Typed input comes back and the exit code is reported;
controls are checked and eof closes stdin; a detach and a reattach from the
offset seen get every byte once; an api restart ends a running terminal
failed/api_restarted with its scrollback still replayed; a sandbox stopped by
the idle reaper is woken by a new terminal, and a terminal in use keeps the
reaper off while an unwatched, silent one lets it stop the sandbox; a viewer
that never reads costs the api no memory past its bounds; a broker SIGKILLed
under a running terminal ends it failed/broker_unavailable with a sentence to
the viewer, and the broker started again leaves no process of it.
"""

import base64
import http.client
import json
import os
import socket
import time
import unittest

import sbxtest
from stackfix import Stack


class SSE:
    """GET .../output?offset=N read as it arrives (http.client, chunked)."""

    def __init__(self, url, path, key):
        host, port = url.split("//", 1)[1].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        h = {"Accept": "text/event-stream"}
        if key:
            h["Authorization"] = "Bearer " + key
        self.conn.request("GET", path, headers=h)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.raw = b""
        self.events = []     # (id or None, event, data)
        self.done = self.status != 200
        if self.done:
            self.body = self.resp.read()

    def _parse(self):
        while b"\n\n" in self.raw:
            block, _, self.raw = self.raw.partition(b"\n\n")
            f = {}
            for ln in block.split(b"\n"):
                if ln and not ln.startswith(b":"):
                    k, _, v = ln.decode().partition(": ")
                    f[k] = v
            if "data" in f:
                self.events.append((int(f["id"]) if "id" in f else None,
                                    f.get("event", "message"), json.loads(f["data"])))

    def until(self, pred, timeout=20):
        t0 = time.monotonic()
        while not pred(self):
            if self.done or time.monotonic() - t0 > timeout:
                raise AssertionError("timed out or ended; got %r" % self.text()[-400:])
            try:
                c = self.resp.read1(65536)
            except (TimeoutError, OSError):
                c = b""
            if not c:
                self.done = True
            self.raw += c
            self._parse()
        return self

    def output(self):
        """Output bytes in order, with each piece's offset checked."""
        out = b""
        for _, ev, d in self.events:
            if ev == "output":
                b = d["data"].encode() if "data" in d else base64.b64decode(d["data_b64"])
                out += b
        return out

    def text(self):
        return self.output().decode(errors="replace")

    def last_offset(self):
        ids = [i for i, ev, _ in self.events if ev == "output"]
        return ids[-1] if ids else None

    def kinds(self):
        return [ev for _, ev, _ in self.events]

    def close(self):
        self.conn.close()


class TerminalTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxtm%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix, broker_args=["--idle-timeout", "4s",
                                                   "--reap-interval", "300ms"],
                          api_args=cls.api_args())
        st = cls.stack
        cls.url = st.url
        cls.key = st.player
        for n in ("alice", "carol"):
            r = cls.call("POST", "/api/v1/npcs", {"name": n})
            assert r.status == 201, r.body

    @staticmethod
    def api_args():
        return ["--requests-per-minute", "100000", "--log-level", "debug",
                "--terminals-per-principal", "64"]

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    @classmethod
    def call(cls, method, path, body=None, raw=None, key=None):
        host, port = cls.url.split("//", 1)[1].split(":")
        h = {"Authorization": "Bearer " + (key or cls.key)}
        if raw is not None:
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            c.request(method, path, body=raw, headers=h)
            r = c.getresponse()
            r.body = r.read()
            c.close()
            return r
        return sbxtest.tcp_http(host, int(port), method, path, body, h, 60)

    def base(self, t, npc="alice"):
        return "/api/v1/npcs/%s/sandbox/terminals/%s" % (npc, t["id"])

    def create(self, npc="alice", **body):
        r = self.call("POST", "/api/v1/npcs/%s/sandbox/terminals" % npc, body or None)
        self.assertEqual(r.status, 201, r.body)
        t = r.json()
        self.assertEqual(r.headers.get("Location"), self.base(t, npc))
        self.assertEqual(t["state"], "running")
        return t

    def type(self, t, s, npc="alice"):
        r = self.call("POST", self.base(t, npc) + "/input", raw=s.encode())
        self.assertEqual(r.status, 200, r.body)

    def output(self, t, offset=0, npc="alice"):
        return SSE(self.url, self.base(t, npc) + "/output?offset=%d" % offset, self.key)

    def get(self, t, npc="alice"):
        r = self.call("GET", self.base(t, npc))
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def test_01_input_comes_back_and_exit_code_is_reported(self):
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        t = self.create(argv=["/bin/sh"], pty=False)
        o = self.output(t)
        self.assertEqual(o.status, 200)
        self.type(t, "echo hi-$((40+2))\n")
        o.until(lambda o: "hi-42\n" in o.text())
        self.type(t, "echo oops >&2; exit 3\n")
        o.until(lambda o: "exit" in o.kinds())
        streams = [d["stream"] for _, ev, d in o.events if ev == "output"]
        self.assertIn(2, streams)
        ex = [d for _, ev, d in o.events if ev == "exit"][0]
        self.assertEqual((ex["state"], ex["code"]), ("exited", 3))
        st = self.get(t)
        self.assertEqual((st["state"], st["exit_code"]), ("exited", 3))
        o.close()
        # Another player's terminal is not found; input to an ended one is 409.
        r = self.call("GET", self.base(t), key=self.stack.other)
        self.assertEqual(r.status, 404)
        r = self.call("POST", self.base(t) + "/input", raw=b"x")
        self.assertEqual(r.status, 409)

    def test_02_control_is_checked_and_eof_closes_stdin(self):
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        t = self.create(argv=["sh", "-c", "echo ready; while read l; do echo \"read:$l\"; "
                              "done; echo stdin-closed"], pty=False)
        o = self.output(t)
        o.until(lambda o: "ready\n" in o.text())
        for bad in ({"type": "resize", "cols": 0, "rows": 0},
                    {"type": "resize", "cols": 10001, "rows": 40},
                    {"type": "resize", "cols": 80, "rows": 24},     # no pty: no size
                    {"type": "signal", "signal": "NOPE"}, {"type": "signal", "signal": 65},
                    {"type": "dance"}):
            r = self.call("POST", self.base(t) + "/control", bad)
            self.assertEqual(r.status, 400, (bad, r.body))
        r = self.call("POST", self.base(t) + "/input", raw=b"x" * (64 * 1024 + 1))
        self.assertEqual(r.status, 413, r.body)
        self.type(t, "one\n")
        o.until(lambda o: "read:one\n" in o.text())
        r = self.call("POST", self.base(t) + "/control", {"type": "eof"})
        self.assertEqual(r.status, 200, r.body)
        o.until(lambda o: "exit" in o.kinds())
        self.assertIn("stdin-closed\n", o.text())
        o.close()
        # DELETE kills a running one.
        t = self.create(argv=["sleep", "300"], pty=False)
        r = self.call("DELETE", self.base(t))
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["state"], "killed")

    def test_03_detach_and_reattach_from_the_offset_gets_every_byte_once(self):
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        t = self.create(argv=["sh", "-c", "for i in $(seq 1 400); do echo line-$i; "
                              "sleep 0.005; done; sleep 1"], pty=False)
        self.assertFalse(t["pty"])
        a = self.output(t)
        a.until(lambda o: "line-100\n" in o.text())
        cut = a.last_offset()
        first = a.output()
        self.assertEqual(len(first), cut)
        a.close()
        b = self.output(t, cut)
        b.until(lambda o: "exit" in o.kinds(), 30)
        rest = b.output()
        whole = first + rest
        self.assertEqual(whole.decode(),
                         "".join("line-%d\n" % i for i in range(1, 401)))
        b.close()
        # From 0 again: the same bytes in one piece.
        c = self.output(t, 0)
        c.until(lambda o: "exit" in o.kinds())
        self.assertEqual(c.output(), whole)
        c.close()

    def test_03b_a_viewer_that_never_reads_holds_no_memory(self):
        # Issue 21 item 7: 32 MiB through a terminal with a viewer that
        # never reads: the terminal is not slowed (it ends with every byte
        # counted), and the api grows by its bounds only (the 1 MiB ring,
        # the viewer's high-water mark), not by the output.
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        api_pid = self.stack.api.pid

        def rss_kib():
            with open("/proc/%d/status" % api_pid) as f:
                return int([l for l in f if l.startswith("VmRSS:")][0].split()[1])
        n = 32 * 1024 * 1024
        # A pty: an exec's output_cap does not apply to it.
        t = self.create(argv=["sh", "-c", "read go; yes 0123456789abcdef | head -c %d" % n],
                        cols=80, rows=24)
        host, port = self.url.split("//", 1)[1].split(":")
        stuck = socket.create_connection((host, int(port)), timeout=10)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.sendall(("GET %s/output?offset=0 HTTP/1.1\r\nHost: x\r\nAuthorization: "
                       "Bearer %s\r\n\r\n" % (self.base(t), self.key)).encode())
        time.sleep(0.5)
        before = rss_kib()
        self.type(t, "go\r")

        def ended():
            return self.get(t)["state"] == "exited"
        sbxtest.wait_until(ended, 60, "32 MiB through the terminal", interval=0.2)
        grew = rss_kib() - before
        stuck.close()
        self.assertGreaterEqual(self.get(t)["offset"], n)   # the pty adds \r's
        print("api RSS grew %d KiB for 32 MiB past a viewer that never reads" % grew)
        self.assertLess(grew, 8 * 1024)

    def test_04_api_restart_fails_a_running_terminal_and_replays_it(self):
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        t = self.create(argv=["/bin/sh"], pty=False)
        o = self.output(t)
        self.type(t, "echo before-$((1+1))-restart\n")
        o.until(lambda o: "before-2-restart" in o.text())
        seen = o.output()
        o.close()
        st = self.stack
        st.api.stop(sig=9)
        st.apis.remove(st.api)
        st.api, st.url = st.start_api(st.api_state, self.api_args(), "api.%d" % len(st.apis))
        type(self).url = st.url
        s = self.get(t)
        self.assertEqual((s["state"], s["reason"], s["offset"]),
                         ("failed", "api_restarted", len(seen)))
        o = self.output(t)
        o.until(lambda o: "error" in o.kinds())
        self.assertEqual(o.output()[:len(seen)], seen)
        err = [d for _, ev, d in o.events if ev == "error"][0]
        self.assertEqual(err["code"], "api_restarted")
        o.close()

    def test_05_a_reaped_sandbox_is_woken_by_a_new_terminal(self):
        r = self.call("PUT", "/api/v1/npcs/carol/sandbox")
        self.assertEqual(r.status, 200, r.body)

        def reaped():
            j = self.call("GET", "/api/v1/npcs/carol/sandbox").json()
            return j["state"] == "stopped" and j.get("stop_reason") == "idle"
        sbxtest.wait_until(reaped, 20, "carol's sandbox reaped", interval=0.3)
        t = self.create("carol", argv=["/bin/sh"], pty=False)
        self.assertEqual(self.call("GET", "/api/v1/npcs/carol/sandbox").json()["state"],
                         "running")
        o = self.output(t, npc="carol")
        self.type(t, "echo awake-$((6*7))\n", npc="carol")
        o.until(lambda o: "awake-42" in o.text())
        # A terminal in use keeps the reaper off: past idle_timeout it runs.
        time.sleep(5)
        self.assertEqual(self.get(t, "carol")["state"], "running")
        self.assertEqual(self.call("GET", "/api/v1/npcs/carol/sandbox").json()["state"],
                         "running")
        self.assertEqual(self.call("DELETE", self.base(t, "carol")).status, 200)
        o.close()

    def test_05b_an_unwatched_silent_terminal_lets_the_reaper_stop_it(self):
        # adr/0051 amendment: no viewer and no output is no use of the
        # sandbox; the terminal ends with the reaper's reason, and a new
        # terminal wakes the sandbox again.
        r = self.call("PUT", "/api/v1/npcs/carol/sandbox")
        self.assertEqual(r.status, 200, r.body)
        t0 = time.monotonic()
        t = self.create("carol", argv=["/bin/sh"], pty=False)

        def reaped():
            j = self.call("GET", "/api/v1/npcs/carol/sandbox").json()
            return j["state"] == "stopped" and j.get("stop_reason") == "idle"
        sbxtest.wait_until(reaped, 20, "carol's sandbox reaped under a silent terminal",
                           interval=0.3)
        # idle_timeout (4 s) after the session last moved: not earlier.
        self.assertGreaterEqual(time.monotonic() - t0, 3.5)
        st = self.get(t, "carol")
        self.assertEqual((st["state"], st["reason"]), ("failed", "not_running"), st)
        self.assertIn("idle reaper", st["message"])
        o = self.output(t, npc="carol")
        o.until(lambda o: "error" in o.kinds())
        o.close()
        t2 = self.create("carol", argv=["/bin/sh"], pty=False)
        self.assertEqual(self.call("GET", "/api/v1/npcs/carol/sandbox").json()["state"],
                         "running")
        self.assertEqual(self.call("DELETE", self.base(t2, "carol")).status, 200)


    # -------------------------------------------------------- a pty

    def test_06_pty_typed_echo_comes_back(self):
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        t = self.create(argv=["/bin/sh"], cols=80, rows=24)
        o = self.output(t)
        self.type(t, "echo hi-$((40+2))\r")
        o.until(lambda o: "hi-42\r\n" in o.text())
        # The command line itself was echoed by the pty.
        self.assertIn("echo hi-$((40+2))", o.text())
        self.type(t, "exit 3\r")
        o.until(lambda o: "exit" in o.kinds())
        ex = [d for _, ev, d in o.events if ev == "exit"][0]
        self.assertEqual((ex["state"], ex["code"]), ("exited", 3))
        o.close()

    def test_07_pty_stty_size_agrees_with_the_size_and_a_resize(self):
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        # No line editor (an interactive shell asks the terminal where the
        # cursor is after a resize, and no terminal answers here).
        t = self.create(argv=["sh", "-c", "stty size; read x; stty size; read x"],
                        cols=100, rows=30)
        o = self.output(t)
        o.until(lambda o: "30 100\r\n" in o.text())
        for bad in ({"cols": 0, "rows": 0}, {"cols": 10001, "rows": 40}):
            bad["type"] = "resize"
            r = self.call("POST", self.base(t) + "/control", bad)
            self.assertEqual(r.status, 400, r.body)
        r = self.call("POST", self.base(t) + "/control",
                      {"type": "resize", "cols": 120, "rows": 40})
        self.assertEqual(r.status, 200, r.body)
        self.type(t, "\r")
        o.until(lambda o: "40 120\r\n" in o.text())
        self.assertEqual((self.get(t)["cols"], self.get(t)["rows"]), (120, 40))
        self.assertEqual(self.call("DELETE", self.base(t)).status, 200)
        o.close()

    def test_08_signal_reaches_the_foreground_process_group(self):
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        t = self.create(argv=["/bin/sh"])
        o = self.output(t)
        self.type(t, "sleep 100; echo after-$((2*4))\r")
        time.sleep(0.5)
        r = self.call("POST", self.base(t) + "/control", {"type": "signal", "signal": "INT"})
        self.assertEqual(r.status, 200, r.body)
        self.type(t, "echo alive-$((3*3))\r")
        o.until(lambda o: "alive-9\r\n" in o.text())
        self.assertEqual(self.call("DELETE", self.base(t)).status, 200)
        o.close()
    # -------------------------------------------------------- broker gone

    def test_09_broker_sigkill_ends_the_terminal_and_leaves_no_process(self):
        self.call("PUT", "/api/v1/npcs/alice/sandbox")
        t = self.create(argv=["sh", "-c", "echo ready-$((400+19)); sleep 4193; echo never"],
                        cols=80, rows=24)
        o = self.output(t)
        o.until(lambda o: "ready-419" in o.text())
        st = self.stack
        st.broker.stop(sig=9)
        # The viewer hears why, in a sentence; the terminal ends failed.
        o.until(lambda o: "error" in o.kinds())
        err = [d for _, ev, d in o.events if ev == "error"][0]
        self.assertEqual(err["code"], "broker_unavailable", err)
        self.assertIn("broker went away", err["message"])
        o.close()
        s = self.get(t)
        self.assertEqual((s["state"], s["reason"]), ("failed", "broker_unavailable"), s)
        # The broker started again kills what the dead one left running.
        st.start_broker()

        def left():
            r = self.call("POST", "/api/v1/npcs/alice/sandbox/exec",
                          {"argv": ["ps", "-o", "args"]})
            if r.status != 200:
                return None
            return [ln for ln in r.body.split(b"\\n") if b"sleep 4193" in ln]
        sbxtest.wait_until(lambda: left() == [], 15, "no process of the terminal left",
                           interval=0.5)

    def test_09b_the_ninth_command_of_a_sandbox_is_refused_in_the_players_words(self):
        # The broker's max_execs_per_sandbox (8) counts terminals and execs
        # together; the refusal names the NPC, not the broker's "npc-dora",
        # and says that terminals count (a newcomer's 8 detached shells).
        r = self.call("POST", "/api/v1/npcs", {"name": "dora"})
        self.assertIn(r.status, (200, 201), r.body)
        self.assertEqual(self.call("PUT", "/api/v1/npcs/dora/sandbox").status, 200)
        made = []
        try:
            for _ in range(8):
                made.append(self.create("dora", argv=["sleep", "4196"], pty=False))
            r = self.call("POST", "/api/v1/npcs/dora/sandbox/terminals",
                          {"argv": ["sleep", "4196"], "pty": False})
            self.assertEqual(r.status, 429, r.body)
            self.assertEqual(r.json()["error"]["message"],
                             "dora's sandbox already runs its maximum of 8 commands (execs "
                             "and terminals together); one has to end first.")
            r = self.call("POST", "/api/v1/npcs/dora/sandbox/exec", {"argv": ["true"]})
            self.assertEqual(r.status, 429, r.body)
            self.assertIn("dora's sandbox already runs", r.json()["error"]["message"])
        finally:
            for t in made:
                self.call("DELETE", self.base(t, "dora"))
        self.call("DELETE", "/api/v1/npcs/dora/sandbox")

    def test_10_a_stop_or_destroy_request_is_the_reason_a_terminal_and_an_exec_give(self):
        # Before, they ended with the driver's "sandbox npc-… is not running:
        # ensure it first", the sentence for a request, not for an ending.
        for how, words in (("stop", "stopped by a stop request"), ("destroy", "destroyed")):
            self.assertEqual(self.call("PUT", "/api/v1/npcs/alice/sandbox").status, 200)
            t = self.create(argv=["sh", "-c", "echo up-$((6*7)); sleep 4194"], cols=80, rows=24)
            o = self.output(t)
            o.until(lambda o: "up-42" in o.text())
            r = self.call("POST", "/api/v1/npcs/alice/sandbox/execs", {"argv": ["sleep", "4195"]})
            self.assertEqual(r.status, 201, r.body)
            x = r.json()["exec_id"]
            if how == "stop":
                r = self.call("POST", "/api/v1/npcs/alice/sandbox/stop")
            else:
                r = self.call("DELETE", "/api/v1/npcs/alice/sandbox")
            self.assertEqual(r.status, 200, r.body)
            o.until(lambda o: "error" in o.kinds())
            err = [d for _, ev, d in o.events if ev == "error"][0]
            self.assertIn(words, err["message"], err)
            o.close()
            st = self.get(t)
            self.assertEqual(st["state"], "failed", st)
            self.assertIn(words, st["message"], st)

            def ended():
                return self.call("GET", "/api/v1/npcs/alice/sandbox/execs/" + x).json()[
                    "state"] != "running"
            sbxtest.wait_until(ended, 20, "the exec's end", interval=0.3)
            j = self.call("GET", "/api/v1/npcs/alice/sandbox/execs/" + x).json()
            self.assertIn(words, j["reason"] or "", j)


if __name__ == "__main__":
    unittest.main()
