"""test_edges - both listeners (the broker's unix socket, the api's TCP port) behind
the one request gate (common/sbx_gate.c, adr/0012), tried as an attacker and a
careless client would: bodies refused unread, smuggling, trickled and oversized
heads; secrets out of /proc/PID/environ; the broker's errors reaching players with
their meaning; a sandbox the reaper stopped woken by its next use. Real broker, real
api, on the runtime under test.
"""

import base64
import json
import os
import select
import socket
import subprocess
import threading
import time
import unittest
import urllib.parse

import sbxtest
from stackfix import API, BROKER, Stack, clean_env, gen_token

MiB = 1 << 20
HEADER_TIMEOUT_S = 3


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def read_answer(s, timeout=15.0):
    """Everything the server sends until it closes (or TIMEOUT s): (bytes, closed)."""
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out, True
            out += chunk
    except socket.timeout:
        return out, False
    except (ConnectionResetError, BrokenPipeError):
        return out, True


def status_of(answer):
    line = answer.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else None


def error_of(answer):
    """The JSON error body of a (non-chunked) answer: (code, message)."""
    body = answer.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in answer else b""
    e = json.loads(body.decode()).get("error", {})
    return e.get("code"), e.get("message")


class Listener:
    """How to reach one listener raw: connect(), a credential, a route that takes
    a big body, and a request line + head that would destroy the sandbox."""

    def __init__(self, name, connect, auth, upload, destroy, probe):
        self.name, self.connect, self.auth = name, connect, auth
        self.upload, self.destroy, self.probe = upload, destroy, probe

    def exchange(self, data, timeout=15.0):
        s = self.connect()
        try:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return read_answer(s, timeout)
        finally:
            s.close()


class EdgeTest(unittest.TestCase):
    """One broker and one api (header_timeout 3 s on both), an NPC "edge" of the
    player with a running sandbox."""

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxedge%d-" % (os.getpid() % 100000)
        ht = ["--header-timeout", "%ds" % HEADER_TIMEOUT_S]
        cls.stack = st = Stack(cls.prefix, broker_args=ht, api_args=ht)
        u = urllib.parse.urlsplit(st.url)
        cls.host, cls.port = u.hostname, u.port
        r = cls.api_req("POST", "/api/v1/npcs", {"name": "edge"})
        assert r.status == 201, r.body
        r = cls.api_req("PUT", "/api/v1/npcs/edge/sandbox")
        assert r.status == 200, r.body
        cls.sid = r.json()["sandbox_id"]

        def tcp():
            return socket.create_connection((cls.host, cls.port), timeout=15)

        def unix():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(15)
            s.connect(st.sock)
            return s
        cls.listeners = [
            Listener("api", tcp, "Bearer " + st.player,
                     "PUT /api/v1/npcs/edge/sandbox/files?path=/work/big HTTP/1.1",
                     "DELETE /api/v1/npcs/edge/sandbox HTTP/1.1",
                     ("GET", "/api/v1/whoami")),
            Listener("broker", unix, "Bearer " + st.token,
                     "PUT /v1/sandboxes/%s/files?path=/work/big HTTP/1.1" % cls.sid,
                     "DELETE /v1/sandboxes/%s HTTP/1.1" % cls.sid,
                     ("GET", "/v1/health")),
        ]
        cls.pids = {"api": st.api.pid, "broker": st.broker.pid}

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    @classmethod
    def api_req(cls, method, path, body=None, key=None, headers=None):
        h = dict(headers or {})
        h["Authorization"] = "Bearer " + (key or cls.stack.player)
        return sbxtest.tcp_http("127.0.0.1", urllib.parse.urlsplit(cls.stack.url).port,
                                method, path, body, h, 60)

    def authed_probe(self, li):
        method, path = li.probe
        data = ("%s %s HTTP/1.1\r\nHost: t\r\nAuthorization: %s\r\nConnection: close\r\n\r\n"
                % (method, path, li.auth)).encode()
        ans, _ = li.exchange(data)
        return status_of(ans)

    def sandbox_exists(self):
        r = sbxtest.unix_http(self.stack.sock, "GET", "/v1/sandboxes/" + self.sid, None,
                              {"Authorization": "Bearer " + self.stack.token})
        return r.status == 200 and r.json()["state"] != "absent"

    # ---------------------------------------------------------------- bodies

    def test_01_keyless_60mib_uploads_refused_unread(self):
        for li in self.listeners:
            with self.subTest(listener=li.name):
                pid = self.pids[li.name]
                base = rss_kib(pid)
                peak = [base]
                stop = threading.Event()

                def sample():
                    while not stop.is_set():
                        peak[0] = max(peak[0], rss_kib(pid))
                        time.sleep(0.01)
                sampler = threading.Thread(target=sample)
                sampler.start()
                head = ("%s\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
                        % (li.upload, 60 * MiB)).encode()
                socks = []
                try:
                    for _ in range(50):
                        s = li.connect()
                        s.sendall(head)
                        socks.append(s)
                    # Another client is answered while the 50 are open.
                    self.assertEqual(self.authed_probe(li), 200)
                    answers = []
                    for s in socks:
                        # No body byte sent yet: the answer comes regardless.
                        ans, closed = read_answer(s, 15)
                        answers.append((status_of(ans), closed, ans))
                    # Then each pushes its body anyway: the server has closed.
                    chunk = b"x" * MiB
                    pushed = []
                    for s in socks:
                        n = 0
                        try:
                            while n < 60 * MiB:
                                s.sendall(chunk)
                                n += len(chunk)
                        except (BrokenPipeError, ConnectionResetError, socket.timeout):
                            pass
                        pushed.append(n)
                finally:
                    for s in socks:
                        s.close()
                    stop.set()
                    sampler.join()
                for st, closed, ans in answers:
                    self.assertEqual(st, 401, ans[:300])
                    self.assertEqual(error_of(ans)[0], "unauthorized")
                    self.assertTrue(closed, ans[:300])
                self.assertTrue(all(n < 60 * MiB for n in pushed), pushed)
                print("\n  %s: RSS base %d KiB, peak %d KiB; most body bytes one client "
                      "got into the socket before the close: %d" % (li.name, base, peak[0],
                                                                    max(pushed)))
                self.assertLess(peak[0], 32 * 1024, "%s RSS %d KiB (base %d)"
                                % (li.name, peak[0], base))
                self.assertEqual(self.authed_probe(li), 200)

    # ---------------------------------------------------------------- smuggling

    def test_02_ambiguous_framing_is_400_and_close(self):
        for li in self.listeners:
            smuggled = ("%s\r\nHost: t\r\nAuthorization: %s\r\n\r\n"
                        % (li.destroy, li.auth)).encode()
            variants = {
                "two Content-Length": b"Content-Length: 5\r\nContent-Length: %d\r\n"
                                      % (5 + len(smuggled)),
                "CL+TE": b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                "gzip, chunked": b"Transfer-Encoding: gzip, chunked\r\n",
                "obs-fold": b"X-Note: a\r\n folded\r\nContent-Length: 5\r\n",
            }
            for name, framing in variants.items():
                with self.subTest(listener=li.name, framing=name):
                    data = (("%s\r\nHost: t\r\nAuthorization: %s\r\n" % (li.upload, li.auth))
                            .encode() + framing + b"\r\n" + b"hello" + b"0\r\n\r\n"
                            + smuggled)
                    ans, closed = li.exchange(data)
                    self.assertEqual(status_of(ans), 400, ans[:400])
                    self.assertEqual(error_of(ans)[0], "bad_request")
                    self.assertEqual(ans.count(b"HTTP/1.1 "), 1, ans[:600])
                    self.assertTrue(closed)
                    self.assertTrue(self.sandbox_exists(), "the smuggled DELETE ran")
        # The api and the broker still serve, and the sandbox is there.
        r = self.api_req("GET", "/api/v1/npcs/edge/sandbox")
        self.assertEqual(r.status, 200)
        self.assertNotEqual(r.json()["state"], "absent")

    # ---------------------------------------------------------------- heads

    def test_03_head_limits(self):
        for li in self.listeners:
            method, path = li.probe
            auth = "Authorization: %s\r\n" % li.auth
            many = "".join("X-H%d: v\r\n" % i for i in range(101))
            cases = [
                ("101 headers", "%s %s HTTP/1.1\r\n%s%s\r\n" % (method, path, auth, many),
                 431, "head_too_large"),
                ("20 KiB request line", "%s %s?%s HTTP/1.1\r\n%s\r\n"
                 % (method, path, "q" * 20480, auth), 414, "uri_too_long"),
                ("two Authorization", "%s %s HTTP/1.1\r\n%s%s\r\n" % (method, path, auth, auth),
                 400, "bad_request"),
            ]
            for name, text, want, code in cases:
                with self.subTest(listener=li.name, case=name):
                    ans, closed = li.exchange(text.encode())
                    self.assertEqual(status_of(ans), want, ans[:300])
                    self.assertEqual(error_of(ans)[0], code)
                    self.assertNotIn(b"<html", ans.lower())
                    self.assertTrue(closed)
            # A body over the route's cap, with the right credential: JSON 413
            # from the head alone (never libevent's HTML page).
            with self.subTest(listener=li.name, case="over the cap"):
                ans, closed = li.exchange(("%s\r\nHost: t\r\nAuthorization: %s\r\n"
                                           "Content-Length: %d\r\n\r\n"
                                           % (li.upload, li.auth, 65 * MiB)).encode())
                self.assertEqual(status_of(ans), 413, ans[:300])
                self.assertEqual(error_of(ans)[0], "too_large")
                self.assertNotIn(b"<html", ans.lower())
                self.assertTrue(closed)
            # Methods evhttp does not serve or know: JSON too.
            for text, want in (("TRACE %s HTTP/1.1\r\n%sConnection: close\r\n\r\n" % (path, auth), (404, 405)),
                               ("BREW %s HTTP/1.1\r\n%s\r\n" % (path, auth), (400,))):
                with self.subTest(listener=li.name, case=text.split(" ")[0]):
                    ans, _ = li.exchange(text.encode())
                    self.assertIn(status_of(ans), want, ans[:300])
                    self.assertIsNotNone(error_of(ans)[0])
            # 100 headers are fine.
            ok = "%s %s HTTP/1.1\r\n%s%sConnection: close\r\n\r\n" % (
                method, path, auth + "Host: t\r\n", "".join("X-H%d: v\r\n" % i for i in range(97)))
            ans, _ = li.exchange(ok.encode())
            self.assertEqual(status_of(ans), 200, ans[:300])

    def test_04_trickled_head_meets_header_timeout(self):
        results = {}

        def trickle(li):
            method, path = li.probe
            head = ("%s %s HTTP/1.1\r\nAuthorization: %s\r\nX-Slow: %s\r\n\r\n"
                    % (method, path, li.auth, "z" * 40)).encode()
            s = li.connect()
            t0 = time.monotonic()
            sent = 0
            ans, closed = b"", False
            try:
                while sent < len(head):
                    s.sendall(head[sent:sent + 1])
                    sent += 1
                    r, _, _ = select.select([s], [], [], 2.0)   # one byte every 2 s
                    if r:
                        ans, closed = read_answer(s, 10)
                        break
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            finally:
                s.close()
            results[li.name] = (time.monotonic() - t0, sent, len(head), ans, closed)

        threads = [threading.Thread(target=trickle, args=(li,)) for li in self.listeners]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for li in self.listeners:
            took, sent, total, ans, closed = results[li.name]
            with self.subTest(listener=li.name):
                self.assertTrue(closed, "still open after %.1f s" % took)
                self.assertLess(sent, total)
                self.assertGreaterEqual(took, HEADER_TIMEOUT_S - 0.5)
                self.assertLess(took, HEADER_TIMEOUT_S + 6)
                self.assertEqual(status_of(ans), 408, ans[:300])
                self.assertEqual(error_of(ans)[0], "request_timeout")

    # ---------------------------------------------------------------- meaning

    def test_05_broker_forbidden_reaches_the_player_as_403(self):
        r = self.api_req("POST", "/api/v1/npcs/edge/sandbox/exec", {"argv": [
            "sh", "-c", "echo secret > /work/locked && chmod 000 /work/locked"]})
        self.assertEqual(r.status, 200, r.body)
        self.assertIn(b'"code":0', r.body)
        direct = sbxtest.unix_http(self.stack.sock, "GET",
                                   "/v1/sandboxes/%s/files?path=/work/locked" % self.sid, None,
                                   {"Authorization": "Bearer " + self.stack.token})
        self.assertEqual(direct.status, 403, direct.body)
        broker_msg = direct.json()["error"]["message"]
        r = self.api_req("GET", "/api/v1/npcs/edge/sandbox/files?path=/work/locked")
        self.assertEqual(r.status, 403, r.body)
        self.assertEqual(r.json()["error"]["code"], "forbidden")
        self.assertEqual(r.json()["error"]["message"], broker_msg)
        self.assertNotIn("refused the api", r.json()["error"]["message"])


class EnvSecretTest(unittest.TestCase):
    """SBX_BROKER_TOKEN given in the environment of both daemons."""

    def test_token_from_env_is_not_in_proc_environ(self):
        canary = "canary" + gen_token()
        d = sbxtest.short_tmpdir("sbxenv-")
        prefix = "sbxenv%d-" % (os.getpid() % 100000)
        sock = os.path.join(d, "broker.sock")
        env = clean_env()
        env["SBX_BROKER_TOKEN"] = canary
        broker = sbxtest.start_process(
            [BROKER, "--listen", "unix:" + sock, "--runtime", sbxtest.runtime_host(),
             "--state-dir", os.path.join(d, "broker"), "--image", sbxtest.test_image(),
             "--name-prefix", prefix], env=env,
            log_path=os.path.join(sbxtest.out_dir(), prefix + "broker.log"))
        self.addCleanup(broker.stop)
        sbxtest.wait_for_unix_socket(sock, 20, broker)
        api = sbxtest.start_process(
            [API, "--listen", "127.0.0.1:0", "--broker", "unix:" + sock,
             "--state-dir", os.path.join(d, "api")], env=env,
            log_path=os.path.join(sbxtest.out_dir(), prefix + "api.log"))
        self.addCleanup(api.stop)
        sbxtest.wait_until(lambda: '"msg":"listening"' in api.output(), 20, "api listening", api)
        # The broker took the token from the environment: it verifies.
        r = sbxtest.unix_http(sock, "GET", "/v1/health", None,
                              {"Authorization": "Bearer " + canary})
        self.assertEqual(r.status, 200, r.body)
        for name, p in (("broker", broker), ("api", api)):
            with open("/proc/%d/environ" % p.pid, "rb") as f:
                block = f.read()
            self.assertGreater(len(block), 0)
            self.assertNotIn(canary.encode(), block, name)
            self.assertNotIn(b"SBX_BROKER_TOKEN=", block, name)
            self.assertNotIn(canary, p.output(), name)


class WakeTest(unittest.TestCase):
    """A broker whose reaper stops sandboxes idle for 2 s."""

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack("sbxwake%d-" % (os.getpid() % 100000),
                          broker_args=["--idle-timeout", "2s", "--reap-interval", "300ms"])

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    def req(self, method, path, body=None, raw=None):
        h = {"Authorization": "Bearer " + self.stack.player}
        port = urllib.parse.urlsplit(self.stack.url).port
        return sbxtest.tcp_http("127.0.0.1", port, method, path,
                                raw if raw is not None else body, h, 60)

    def wait_idle_stop(self):
        def stopped():
            st = self.req("GET", "/api/v1/npcs/sleepy/sandbox").json()
            return st["state"] == "stopped" and st.get("stop_reason") == "idle"
        sbxtest.wait_until(stopped, 30, "the reaper's idle stop", interval=0.2)

    def test_use_after_idle_stop_wakes_the_sandbox(self):
        self.assertEqual(self.req("POST", "/api/v1/npcs", {"name": "sleepy"}).status, 201)
        self.assertEqual(self.req("PUT", "/api/v1/npcs/sleepy/sandbox").status, 200)
        self.wait_idle_stop()
        r = self.req("POST", "/api/v1/npcs/sleepy/sandbox/exec",
                     {"argv": ["sh", "-c", "echo awake > /work/w; cat /work/w"]})
        self.assertEqual(r.status, 200, r.body)
        self.assertIn(b"awake", r.body)
        self.assertIn(b'"code":0', r.body)
        self.assertEqual(self.req("GET", "/api/v1/npcs/sleepy/sandbox").json()["state"],
                         "running")
        # A file write and a list wake it too, and /work is intact.
        self.wait_idle_stop()
        r = self.req("PUT", "/api/v1/npcs/sleepy/sandbox/files?path=/work/n", raw=b"note")
        self.assertEqual(r.status, 200, r.body)
        self.wait_idle_stop()
        r = self.req("GET", "/api/v1/npcs/sleepy/sandbox/list?path=/work")
        self.assertEqual(r.status, 200, r.body)
        names = sorted(e["name"] for e in r.json())
        self.assertEqual(names, ["n", "w"])
        # A sandbox stopped on purpose stays stopped: 409, ensure first.
        self.assertEqual(self.req("POST", "/api/v1/npcs/sleepy/sandbox/stop").status, 200)
        r = self.req("POST", "/api/v1/npcs/sleepy/sandbox/exec", {"argv": ["true"]})
        self.assertEqual(r.status, 409, r.body)


if __name__ == "__main__":
    unittest.main()
