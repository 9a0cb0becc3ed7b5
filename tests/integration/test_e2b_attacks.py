"""test_e2b_attacks - the E2B layer (issue 23, adr/0059-0061) tried as an attacker
and a careless client would, on a real api and broker on the runtime under test,
with python's stdlib as the client: another player's sandbox and processes out of
reach with one's own token (and an operator is not handed a player's access
token), paths that leave /work through a symlink a command
made refused in E2B's shapes with sbx's sentence (nothing read or written
outside), a paused sandbox's Connect calls answered in Connect's shape, a
multipart filename cut short by a NUL refused, and a refused token on
the {port}-{id}.{e2b_domain} Host answered in envd's shape, not sbx's.
"""

import base64
import json
import os
import struct
import threading
import unittest
import urllib.parse

import sbxtest
from stackfix import Stack

SENTENCE = "Only /work is reachable in an sbx sandbox (E2B's home directory is /work)."
DOMAIN = "e2b.red.test"


class E2BAttacksTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack("sbxe2r%d-" % (os.getpid() % 100000), api_args=[
            "--e2b-templates", "base=", "--e2b-domain", DOMAIN,
            "--requests-per-minute", "100000"])
        try:
            cls.host, port = cls.stack.url.split("//", 1)[1].split(":")
            cls.port = int(port)
            cls.a = cls.create(cls.stack.player)
            cls.b = cls.create(cls.stack.other)
        except BaseException:
            cls.stack.close()
            raise

    @classmethod
    def create(cls, key):
        r = sbxtest.tcp_http(cls.host, cls.port, "POST", "/e2b/v2/sandboxes",
                             {"templateID": "base", "timeout": 600}, {"X-API-Key": key}, 120)
        assert r.status == 201, r.body
        sb = r.json()
        return sb["sandboxID"], sb["envdAccessToken"]

    @classmethod
    def tearDownClass(cls):
        for (sid, _), key in ((cls.a, cls.stack.player), (cls.b, cls.stack.other)):
            sbxtest.tcp_http(cls.host, cls.port, "DELETE", "/e2b/sandboxes/" + sid, None,
                             {"X-API-Key": key}, 60)
        cls.stack.close()

    # ------------------------------------------------------------ helpers

    def envd(self, sb, method, path, body=None, headers=None, timeout=60):
        h = {"E2b-Sandbox-Id": sb[0], "X-Access-Token": sb[1]}
        h.update(headers or {})
        return sbxtest.tcp_http(self.host, self.port, method, "/e2b/envd" + path, body, h,
                                timeout)

    def rpc(self, sb, name, msg, headers=None):
        h = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
        h.update(headers or {})
        return self.envd(sb, "POST", "/" + name, json.dumps(msg).encode(), h)

    def run_sh(self, sb, script, timeout=60):
        """Runs sh -c script through process.Process/Start; its stdout."""
        b = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
        r = self.envd(sb, "POST", "/process.Process/Start", struct.pack(">BI", 0, len(b)) + b,
                      {"Content-Type": "application/connect+json"}, timeout)
        self.assertEqual(r.status, 200, r.body)
        out, body = b"", r.body
        while len(body) >= 5:
            _, n = struct.unpack(">BI", body[:5])
            ev = json.loads(body[5:5 + n]).get("event", {})
            body = body[5 + n:]
            if "data" in ev and "stdout" in ev["data"]:
                out += base64.b64decode(ev["data"]["stdout"])
        return out.decode()

    # ------------------------------------------------------------ reach

    def test_another_players_sandbox_and_processes_are_out_of_reach(self):
        stat = {"path": "/work"}
        for tok in (self.a[1], "", None):
            h = {"X-Access-Token": tok} if tok is not None else {}
            r = sbxtest.tcp_http(self.host, self.port, "POST",
                                 "/e2b/envd/filesystem.Filesystem/Stat", json.dumps(stat).encode(),
                                 dict(h, **{"E2b-Sandbox-Id": self.b[0],
                                            "Content-Type": "application/json"}), 30)
            self.assertEqual(r.status, 401, r.body)
        for m, p in (("GET", ""), ("DELETE", ""), ("POST", "/pause"), ("GET", "/metrics")):
            r = sbxtest.tcp_http(self.host, self.port, m, "/e2b/sandboxes/" + self.b[0] + p,
                                 None, {"X-API-Key": self.stack.player}, 30)
            self.assertEqual(r.status, 404, (m, p, r.body))
        # B's background process: A's token on A's sandbox cannot name it.
        done = threading.Event()

        def sleeper():
            try:
                b = json.dumps({"process": {"cmd": "/bin/sleep", "args": ["60"]},
                                "tag": "bsleep"}).encode()
                self.envd(self.b, "POST", "/process.Process/Start",
                          struct.pack(">BI", 0, len(b)) + b,
                          {"Content-Type": "application/connect+json"}, 90)
            except Exception:
                pass
            done.set()
        threading.Thread(target=sleeper, daemon=True).start()
        procs = []
        sbxtest.wait_until(lambda: procs.extend(self.rpc(self.b, "process.Process/List", {})
                                                .json()["processes"]) or procs, 30, "B's sleep")
        pid = procs[0]["pid"]
        for sel in ({"pid": pid}, {"tag": "bsleep"}):
            r = self.rpc(self.a, "process.Process/SendSignal",
                         {"process": sel, "signal": "SIGNAL_SIGKILL"})
            self.assertEqual((r.status, r.json()["code"]), (404, "not_found"), r.body)
        self.assertEqual(len(self.rpc(self.b, "process.Process/List", {}).json()["processes"]), 1)
        r = self.rpc(self.b, "process.Process/SendSignal",
                     {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        self.assertEqual(r.status, 200, r.body)
        self.assertTrue(done.wait(30))

    def test_an_operator_never_sees_a_players_access_token(self):
        # envd acts under the owner's name: the token stays the owner's.
        for m, p, body in (("GET", "/e2b/sandboxes/" + self.b[0], None),
                           ("POST", "/e2b/v2/sandboxes/" + self.b[0] + "/connect",
                            {"timeout": 600})):
            r = sbxtest.tcp_http(self.host, self.port, m, p, body,
                                 {"X-API-Key": self.stack.operator}, 60)
            self.assertIn(r.status, (200, 201), r.body)
            self.assertIsNone(r.json()["envdAccessToken"], r.body)
            self.assertNotIn(self.b[1].encode(), r.body)
            r = sbxtest.tcp_http(self.host, self.port, m, p, body,
                                 {"X-API-Key": self.stack.other}, 60)
            self.assertEqual(r.json()["envdAccessToken"], self.b[1], r.body)

    def test_host_form_refusal_is_envds_shape(self):
        # A wrong or absent token on the {port}-{id}.{domain} Host: envd's
        # Connect error with the token sentence, not sbx's Bearer one.
        for tok in ("x" * 43, None):
            h = {"Host": "49983-%s.%s" % (self.a[0], DOMAIN), "Content-Type": "application/json"}
            if tok is not None:
                h["X-Access-Token"] = tok
            r = sbxtest.tcp_http(self.host, self.port, "POST", "/filesystem.Filesystem/Stat",
                                 b'{"path":"/work"}', h, 30)
            self.assertEqual(r.status, 401, r.body)
            self.assertEqual(r.json()["code"], "unauthenticated", r.body)
            self.assertIn("X-Access-Token", r.json()["message"])
        h = {"Host": "49983-%s.%s" % (self.a[0], DOMAIN), "X-Access-Token": self.a[1]}
        r = sbxtest.tcp_http(self.host, self.port, "GET", "/health", None, h, 30)
        self.assertEqual(r.status, 204, r.body)

    def test_paused_sandbox_answers_connect_calls_in_connects_shape(self):
        key = {"X-API-Key": self.stack.player}
        r = sbxtest.tcp_http(self.host, self.port, "POST", "/e2b/sandboxes/%s/pause" % self.a[0],
                             None, key, 120)
        self.assertEqual(r.status, 204, r.body)
        try:
            r = self.rpc(self.a, "filesystem.Filesystem/Stat", {"path": "/work"})
            self.assertEqual(r.status, 502, r.body)
            self.assertEqual(r.json()["code"], "unavailable", r.body)
            self.assertIn("connect first", r.json()["message"])
            # /files is plain HTTP: E2B's {"code": 502} shape.
            r = self.envd(self.a, "GET", "/files?path=x")
            self.assertEqual((r.status, r.json()["code"]), (502, 502), r.body)
        finally:
            r = sbxtest.tcp_http(self.host, self.port, "POST",
                                 "/e2b/v2/sandboxes/%s/connect" % self.a[0], {"timeout": 600},
                                 key, 120)
            self.assertEqual(r.status, 201, r.body)

    # ------------------------------------------------------------ paths

    def test_symlinks_out_of_work_refused_in_e2bs_shapes(self):
        self.run_sh(self.a, "mkdir -p /work/s && ln -sfn /etc /work/s/etc && "
                            "ln -sfn /etc/passwd /work/s/pw && ln -sfn /tmp /work/s/tmp")
        for p in ("/work/s/pw", "/home/user/s/etc/passwd", "s/etc/hostname"):
            r = self.envd(self.a, "GET", "/files?" + urllib.parse.urlencode({"path": p}))
            self.assertEqual(r.status, 403, (p, r.body))
            self.assertEqual(r.json()["code"], 403)
            self.assertTrue(r.json()["message"].startswith(SENTENCE), r.body)
            self.assertNotIn(b"root:", r.body)
        for p in ("/work/s/tmp/planted", "/work/s/pw"):
            r = self.envd(self.a, "POST", "/files?" + urllib.parse.urlencode({"path": p}),
                          b"planted", {"Content-Type": "application/octet-stream"})
            self.assertEqual(r.status, 403, (p, r.body))
            self.assertTrue(r.json()["message"].startswith(SENTENCE), r.body)
        for name, msg in (("Stat", {"path": "/work/s/etc/passwd"}),
                          ("ListDir", {"path": "/work/s/tmp", "depth": 3}),
                          ("MakeDir", {"path": "/work/s/tmp/d"}),
                          ("Move", {"source": "/work/s/etc/hostname", "destination": "/work/h"}),
                          ("Move", {"source": "/work/s/pw", "destination": "/work/s/tmp/z"}),
                          ("Remove", {"path": "/work/s/etc/hostname"})):
            r = self.rpc(self.a, "filesystem.Filesystem/" + name, msg)
            self.assertEqual((r.status, r.json()["code"]), (403, "permission_denied"),
                             (name, r.body))
            self.assertTrue(r.json()["message"].startswith(SENTENCE), r.body)
        # Nothing was written, moved or removed outside /work.
        self.assertEqual(self.run_sh(self.a, "ls -A /tmp; test -f /etc/hostname && echo kept"),
                         "kept\n")

    def test_multipart_filename_cut_by_a_nul_is_refused(self):
        body = (b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"nul\x00b\""
                b"\r\n\r\nx\r\n--XX--\r\n")
        r = self.envd(self.a, "POST", "/files", body,
                      {"Content-Type": "multipart/form-data; boundary=XX"})
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json()["code"], 400)
        r = self.rpc(self.a, "filesystem.Filesystem/Stat", {"path": "/work/nul"})
        self.assertEqual(r.status, 404, r.body)


if __name__ == "__main__":
    unittest.main()
