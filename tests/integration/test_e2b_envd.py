"""test_e2b_envd - envd's process.Process over the Connect protocol (issue 23 item 2,
adr/0060) on a real sandbox-api and broker on the runtime under test, with python's
stdlib as the client, speaking Connect's JSON codec as the e2b SDK's connect-web
transport does: unary calls (application/json) and server streams
(application/connect+json, 5-byte envelopes, the end-of-stream message). Start with
stdout/stderr/exit code, envs and cwd as E2B maps them, refusals (root, a cwd outside
/work, a binary codec, StreamInput), a background process found again by tag and pid
(List, Connect) and killed, stdin and its end, a pty resized, a deadline
(Connect-Timeout-Ms) that kills, keepalives.
"""

import base64
import http.client
import json
import os
import struct
import time
import unittest

from stackfix import Stack

ENVD = "/e2b/envd"


class Stream:
    """A server stream being read: next() gives each message (a dict), then
    the end-of-stream message's error (None when ok) as .error, .done."""

    def __init__(self, conn, resp):
        self.conn = conn
        self.resp = resp
        self.error = None
        self.done = False

    def next(self):
        head = self.resp.read(5)
        if len(head) < 5:
            raise AssertionError("stream cut without an end-of-stream message")
        flags, n = struct.unpack(">BI", head)
        body = json.loads(self.resp.read(n) or b"{}")
        if flags & 2:
            self.error = body.get("error")
            self.done = True
            self.conn.close()
            return None
        return body

    def events(self, until=None):
        """Every message to the end (or until until(msg) is true), as a list."""
        out = []
        while True:
            m = self.next()
            if m is None:
                return out
            out.append(m)
            if until is not None and until(m):
                return out

    def close(self):
        self.conn.close()


class EnvdTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxev%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix, api_args=["--e2b-templates", "base=",
                                                "--requests-per-minute", "100000"])
        cls.host, port = cls.stack.url.split("//", 1)[1].split(":")
        cls.port = int(port)
        r = cls.e2b("POST", "/e2b/v2/sandboxes", {"templateID": "base", "timeout": 300,
                                                  "envVars": {"SBOX": "from-sandbox",
                                                              "OVER": "sandbox"}})
        assert r.status == 201, r.read()
        sb = json.loads(r.read())
        cls.sid, cls.token = sb["sandboxID"], sb["envdAccessToken"]

    @classmethod
    def tearDownClass(cls):
        try:
            cls.e2b("DELETE", "/e2b/sandboxes/" + cls.sid).read()
        finally:
            cls.stack.close()

    # ------------------------------------------------------------ client

    @classmethod
    def e2b(cls, method, path, body=None):
        c = http.client.HTTPConnection(cls.host, cls.port, timeout=60)
        h = {"X-API-Key": cls.stack.player}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, data, h)
        return c.getresponse()

    def heads(self, extra=None):
        h = {"E2b-Sandbox-Id": self.sid, "E2b-Sandbox-Port": "49983",
             "X-Access-Token": self.token, "Connect-Protocol-Version": "1"}
        h.update(extra or {})
        return h

    def unary(self, method, msg, headers=None, ctype="application/json"):
        """(status, body dict) of a unary call."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=60)
        h = self.heads(headers)
        h["Content-Type"] = ctype
        c.request("POST", ENVD + "/process.Process/" + method, json.dumps(msg).encode(), h)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, json.loads(body or b"{}")

    def stream(self, method, msg, headers=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=60)
        h = self.heads(headers)
        h["Content-Type"] = "application/connect+json"
        data = json.dumps(msg).encode()
        c.request("POST", ENVD + "/process.Process/" + method,
                  struct.pack(">BI", 0, len(data)) + data, h)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("Content-Type"), "application/connect+json")
        return Stream(c, r)

    def start(self, cmd, headers=None, **kw):
        msg = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}}
        msg["process"].update(kw.pop("process", {}))
        msg.update(kw)
        return self.stream("Start", msg, headers)

    @staticmethod
    def output(events, kind):
        return b"".join(base64.b64decode(e["event"]["data"][kind]) for e in events
                        if "data" in e["event"] and kind in e["event"]["data"])

    @staticmethod
    def end(events):
        ends = [e["event"]["end"] for e in events if "end" in e["event"]]
        return ends[-1] if ends else None

    def run_cmd(self, cmd, **kw):
        s = self.start(cmd, **kw)
        ev = s.events()
        self.assertIsNone(s.error, s.error)
        self.assertIn("start", ev[0]["event"], ev[0])
        return ev

    # ------------------------------------------------------------ tests

    def test_01_start_streams_stdout_stderr_and_the_exit(self):
        ev = self.run_cmd("echo out; echo err >&2; exit 3")
        self.assertIsInstance(ev[0]["event"]["start"]["pid"], int)
        self.assertEqual(self.output(ev, "stdout"), b"out\n")
        self.assertEqual(self.output(ev, "stderr"), b"err\n")
        end = self.end(ev)
        self.assertEqual(end["exitCode"], 3)
        self.assertEqual(end["status"], "exit status 3")
        self.assertEqual(end["error"], "exit status 3")
        ev = self.run_cmd("true")
        end = self.end(ev)
        self.assertEqual(end.get("exitCode", 0), 0)
        self.assertNotIn("error", end)

    def test_02_envs_and_cwd_as_e2b_maps_them(self):
        ev = self.run_cmd('echo "$SBOX $OVER $REQ"; pwd',
                          process={"envs": {"OVER": "request", "REQ": "r"}, "cwd": "/home/user"})
        self.assertEqual(self.output(ev, "stdout"), b"from-sandbox request r\n/work\n")
        ev = self.run_cmd("mkdir -p /work/d1 && cd /work/d1 && pwd")
        ev = self.run_cmd("pwd", process={"cwd": "d1"})
        self.assertEqual(self.output(ev, "stdout"), b"/work/d1\n")

    def test_03_refusals(self):
        s = self.start("pwd", process={"cwd": "/etc"})
        self.assertEqual(s.events(), [])
        self.assertEqual(s.error["code"], "permission_denied")
        self.assertIn("Only /work is reachable", s.error["message"])
        s = self.start("id", headers={"Authorization": "Basic " +
                                      base64.b64encode(b"root:").decode()})
        self.assertEqual(s.events(), [])
        self.assertEqual(s.error["code"], "permission_denied")
        self.assertEqual(s.error["message"], "sbx runs every command as the sandbox user.")
        # The user E2B names by default is accepted (and ignored).
        ev = self.run_cmd("true", headers={"Authorization": "Basic " +
                                           base64.b64encode(b"user:").decode()})
        self.assertEqual(self.end(ev).get("exitCode", 0), 0)
        st, body = self.unary("List", {}, ctype="application/proto")
        self.assertEqual((st, body["code"]), (501, "unimplemented"))
        st, body = self.unary("StreamInput", {})
        self.assertEqual((st, body["code"]), (501, "unimplemented"))
        st, body = self.unary("NoSuchMethod", {})
        self.assertEqual((st, body["code"]), (404, "unimplemented"))
        st, body = self.unary("List", {}, headers={"Connect-Timeout-Ms": "soon"})
        self.assertEqual((st, body["code"]), (400, "invalid_argument"))
        st, body = self.unary("SendSignal", {"process": {"pid": 1}, "signal": "SIGNAL_SIGKILL"})
        self.assertEqual((st, body["code"]), (404, "not_found"))

    def test_04_background_list_connect_kill(self):
        s = self.start("echo started; sleep 60", tag="bg1")
        first = s.next()
        pid = first["event"]["start"]["pid"]
        s.close()   # the stream goes; the process stays (envd's rule)
        time.sleep(0.3)
        st, body = self.unary("List", {})
        self.assertEqual(st, 200, body)
        mine = [p for p in body["processes"] if p["pid"] == pid]
        self.assertEqual(len(mine), 1, body)
        self.assertEqual(mine[0]["tag"], "bg1")
        self.assertEqual(mine[0]["config"]["cmd"], "/bin/bash")
        self.assertEqual(mine[0]["config"]["args"], ["-l", "-c", "echo started; sleep 60"])
        c = self.stream("Connect", {"process": {"tag": "bg1"}})
        self.assertEqual(c.next()["event"]["start"]["pid"], pid)
        st, body = self.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        self.assertEqual(st, 200, body)
        ev = c.events()
        self.assertIsNone(c.error)
        end = self.end(ev)
        self.assertEqual(end["exitCode"], -1)
        self.assertEqual(end["status"], "signal: killed")
        self.assertFalse(end.get("exited", False))
        st, body = self.unary("List", {})
        self.assertEqual([p for p in body["processes"] if p["pid"] == pid], [])
        st, body = self.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        self.assertEqual((st, body["code"]), (404, "not_found"))
        s = self.stream("Connect", {"process": {"pid": pid}})
        self.assertEqual(s.events(), [])
        self.assertEqual(s.error["code"], "not_found")

    def test_05_stdin_then_its_end(self):
        s = self.start("cat; echo done", stdin=True)
        pid = s.next()["event"]["start"]["pid"]
        st, body = self.unary("SendInput", {"process": {"pid": pid}, "input": {
            "stdin": base64.b64encode(b"hello\n").decode()}})
        self.assertEqual(st, 200, body)
        got = s.events(until=lambda m: b"hello" in self.output([m], "stdout"))
        self.assertIn(b"hello\n", self.output(got, "stdout"))
        st, body = self.unary("CloseStdin", {"process": {"pid": pid}})
        self.assertEqual(st, 200, body)
        ev = s.events()
        self.assertEqual(self.output(ev, "stdout"), b"done\n")
        self.assertEqual(self.end(ev).get("exitCode", 0), 0)
        # Without stdin (the SDK's default), cat sees EOF at once.
        ev = self.run_cmd("cat; echo eof")
        self.assertEqual(self.output(ev, "stdout"), b"eof\n")

    def test_06_pty_input_and_resize(self):
        s = self.stream("Start", {"process": {"cmd": "/bin/bash", "args": ["-i", "-l"],
                                              "envs": {"TERM": "xterm-256color"}},
                                  "pty": {"size": {"cols": 80, "rows": 24}}})
        pid = s.next()["event"]["start"]["pid"]

        def typed(text, want):
            st, body = self.unary("SendInput", {"process": {"pid": pid}, "input": {
                "pty": base64.b64encode(text).decode()}})
            self.assertEqual(st, 200, body)
            seen = b""
            while want not in seen:
                m = s.next()
                self.assertIsNotNone(m, "pty stream ended before %r" % want)
                seen += self.output([m], "pty")
            return seen

        typed(b"stty size\r", b"24 80")
        st, body = self.unary("Update", {"process": {"pid": pid},
                                         "pty": {"size": {"cols": 100, "rows": 30}}})
        self.assertEqual(st, 200, body)
        typed(b"stty size\r", b"30 100")
        typed(b"exit 4\r", b"exit")
        ev = s.events()
        self.assertEqual(self.end(ev)["exitCode"], 4)

    def test_07_deadline_kills_and_ends_deadline_exceeded(self):
        t0 = time.monotonic()
        s = self.start("sleep 30", headers={"Connect-Timeout-Ms": "1500"})
        pid = s.next()["event"]["start"]["pid"]
        s.events()
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(s.error["code"], "deadline_exceeded")
        st, body = self.unary("List", {})
        self.assertEqual([p for p in body["processes"] if p["pid"] == pid], [])

    def test_08_keepalive_while_silent(self):
        ev = self.run_cmd("sleep 2.5; echo x", headers={"Keepalive-Ping-Interval": "1"})
        kinds = [list(e["event"].keys())[0] for e in ev]
        self.assertIn("keepalive", kinds[:kinds.index("data")], kinds)
        self.assertEqual(self.output(ev, "stdout"), b"x\n")


if __name__ == "__main__":
    unittest.main()
