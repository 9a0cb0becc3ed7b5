"""test_api_ports - ports without a network (issue 21 item 6, adr/0053): a real
sandbox-api and broker on the runtime under test, servers started inside a sandbox
WITHOUT egress (the test image's busybox: httpd with CGI scripts for the echo and
the SSE stream, nc for an Upgrade echo), reached only through
.../sandbox/ports/{port}/... and preview links. Byte-exact GET, a 5 MiB POST
echoed, SSE events one by one, a WebSocket upgrade both ways, 400/404/502,
tickets, previews by path and by Host (ttl 1 s), the 33rd connection 429,
sbxctl port-forward with concurrent connections (GET .../tcp) and refusing an NPC
it cannot reach before it listens, a half-closing client that still gets the
whole answer (through sbxctl, and a raw WebSocket sending {"type":"eof"}, with
its refusals), and a reaped sandbox woken by the first request.
"""

import asyncio
import hashlib
import http.client
import os
import signal
import socket
import subprocess
import threading
import time
import unittest

import websockets
import websockets.exceptions

import sbxtest
from sbxtest import BUILD
from stackfix import Stack, clean_env

SBXCTL = os.path.join(BUILD, "sbxctl")

HTTP_PORT = 8000
WS_PORT = 9001
DRAIN_PORT = 8002
PREVIEW_DOMAIN = "preview.sbx.test"

ECHO_CGI = b"""#!/bin/sh
printf 'Content-Type: application/octet-stream\\r\\n\\r\\n'
exec cat
"""

SSE_CGI = b"""#!/bin/sh
printf 'Content-Type: text/event-stream\\r\\n\\r\\n'
echo 'data: one'; echo
sleep 2
echo 'data: two'; echo
"""

HOLD_CGI = b"""#!/bin/sh
printf 'Content-Type: text/event-stream\\r\\n\\r\\n'
echo 'data: held'; echo
sleep 60
"""

# An Upgrade answered with 101, then every byte echoed (RFC 6455 frames pass as
# bytes: the proxy never looks inside).
WS_SH = b"""#!/bin/sh
cr=$(printf '\\r')
while IFS= read -r line; do
  line=${line%"$cr"}
  [ -z "$line" ] && break
done
printf 'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n'
exec cat
"""

# Answers only after its client's EOF (what a half-close is for): how many bytes
# came, then the 3 MiB file.
DRAIN_SH = b"""#!/bin/sh
n=$(cat | wc -c)
printf 'got %d\\n' $n
exec cat /work/www/f.bin
"""

SERVERS = ("mkdir -p /work/www/cgi-bin && "
           "busybox httpd -f -p 127.0.0.1:%d -h /work/www & "
           "busybox nc -ll -p %d -e /work/ws.sh & "
           "busybox nc -ll -p %d -e /work/drain.sh & wait"
           % (HTTP_PORT, WS_PORT, DRAIN_PORT))


def raw_request(url, head, body=b"", until=None, timeout=20):
    """Sends HEAD (and BODY) on a new TCP connection to the api; reads until
    the peer closes, or until UNTIL (bytes) is in what came; returns
    (socket or None when closed, bytes)."""
    host, port = url.split("//", 1)[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.sendall(head.encode() + body)
    got = b""
    while until is None or until not in got:
        b = s.recv(65536)
        if not b:
            s.close()
            return None, got
        got += b
    return s, got


def split_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, head.decode("latin-1"), body


def ws_frame(payload, opcode=1):
    """A masked client frame (RFC 6455 §5.2), text unless OPCODE says,
    payload < 126 bytes."""
    mask = os.urandom(4)
    data = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + data


def ws_until_close(s, rest=b""):
    """The server's frames on socket S (REST: bytes already read) until its
    close frame: (binary payloads joined, close code, reason)."""
    buf, data = rest, b""
    while True:
        if len(buf) >= 2:
            n, hl = buf[1] & 0x7f, 2
            if n == 126:
                n, hl = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127:
                n, hl = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) >= hl + n and len(buf) >= hl:
                op, payload, buf = buf[0] & 0x0f, buf[hl:hl + n], buf[hl + n:]
                if op == 8:
                    return (data, int.from_bytes(payload[:2], "big"),
                            payload[2:].decode())
                if op == 2:
                    data += payload
                continue
        b = s.recv(1 << 20)
        if not b:
            raise AssertionError("closed without a close frame")
        buf += b


class PortsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxpt%d-" % (os.getpid() % 100000)
        # The broker's defaults: port sessions have their own limit
        # (max_port_sessions_per_sandbox, 32), apart from the 8 execs.
        cls.stack = Stack(cls.prefix, broker_args=["--idle-timeout", "4s",
                                                   "--reap-interval", "300ms"],
                          api_args=["--preview-domain", PREVIEW_DOMAIN,
                                    "--requests-per-minute", "100000",
                                    "--ticket-ttl", "30s"])
        st = cls.stack
        cls.url = st.url
        cls.key = st.player
        for k, n in ((st.player, "web"), (st.other, "bobs")):
            r = cls.call(k, "POST", "/api/v1/npcs", {"name": n})
            assert r.status == 201, r.body
            r = cls.call(k, "PUT", "/api/v1/npcs/%s/sandbox" % n)
            assert r.status == 200, r.body
        cls.file_bytes = os.urandom(3 * 1024 * 1024 + 17)
        cls.put("/work/www/f.bin", cls.file_bytes)
        cls.put("/work/www/cgi-bin/echo", ECHO_CGI, "755")
        cls.put("/work/www/cgi-bin/sse", SSE_CGI, "755")
        cls.put("/work/www/cgi-bin/hold", HOLD_CGI, "755")
        cls.put("/work/ws.sh", WS_SH, "755")
        cls.put("/work/drain.sh", DRAIN_SH, "755")
        cls.start_servers()

    @classmethod
    def start_servers(cls):
        r = cls.call(cls.key, "POST", "/api/v1/npcs/web/sandbox/execs",
                     {"argv": ["sh", "-c", SERVERS], "timeout_ms": 300000})
        assert r.status == 201, r.body

        def up():
            r = cls.call(cls.key, "GET", cls.port_path(HTTP_PORT, "/f.bin"))
            return r.status == 200
        sbxtest.wait_until(up, 30, "busybox httpd in the sandbox", interval=0.3)

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    @classmethod
    def call(cls, key, method, path, body=None, headers=None):
        host, port = cls.url.split("//", 1)[1].split(":")
        h = dict(headers or {})
        if key:
            h["Authorization"] = "Bearer " + key
        return sbxtest.tcp_http(host, int(port), method, path, body, h, 60)

    @classmethod
    def put(cls, path, data, mode=None):
        q = "?path=" + path + ("&mode=" + mode if mode else "")
        r = cls.call(cls.key, "PUT", "/api/v1/npcs/web/sandbox/files" + q, data)
        assert r.status in (200, 201, 204), (path, r.status, r.body)

    @staticmethod
    def port_path(port, rest, npc="web"):
        return "/api/v1/npcs/%s/sandbox/ports/%d%s" % (npc, port, rest)

    def keyed_head(self, method, rest, extra="", port=HTTP_PORT):
        return ("%s %s HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n%s\r\n"
                % (method, self.port_path(port, rest), self.key, extra))

    # ------------------------------------------------------------ bytes

    def test_01_get_is_byte_exact_and_the_sandbox_has_no_egress(self):
        r = self.call(self.key, "GET", self.port_path(HTTP_PORT, "/f.bin"))
        self.assertEqual(r.status, 200)
        self.assertEqual(hashlib.sha256(r.body).hexdigest(),
                         hashlib.sha256(self.file_bytes).hexdigest())
        st = self.call(self.key, "GET", "/api/v1/npcs/web/sandbox").json()
        self.assertFalse(st["egress"])

    def test_02_post_of_5_mib_is_echoed(self):
        body = os.urandom(5 * 1024 * 1024)
        r = self.call(self.key, "POST", self.port_path(HTTP_PORT, "/cgi-bin/echo"), body,
                      {"Content-Type": "application/octet-stream"})
        self.assertEqual(r.status, 200, r.body[:200])
        self.assertEqual(len(r.body), len(body))
        self.assertTrue(r.body == body)

    def test_03_sse_events_arrive_one_by_one(self):
        t0 = time.monotonic()
        s, got = raw_request(self.url, self.keyed_head("GET", "/cgi-bin/sse"),
                             until=b"data: one")
        first = time.monotonic() - t0
        self.assertIsNotNone(s)
        self.assertNotIn(b"data: two", got)
        while b"data: two" not in got:
            b = s.recv(65536)
            self.assertTrue(b, "closed before the second event")
            got += b
        second = time.monotonic() - t0
        s.close()
        # The script sleeps 2 s between the events: the first came alone.
        self.assertGreater(second - first, 1.5, (first, second))

    def test_04_websocket_upgrade_echoes_both_ways(self):
        head = self.keyed_head("GET", "/ws", "Connection: Upgrade\r\nUpgrade: websocket\r\n"
                               "Sec-WebSocket-Version: 13\r\n"
                               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", WS_PORT)
        s, got = raw_request(self.url, head, until=b"\r\n\r\n")
        self.assertIsNotNone(s, got)
        self.assertTrue(got.startswith(b"HTTP/1.1 101"), got)
        rest = got.split(b"\r\n\r\n", 1)[1]
        for msg in (b"hello", b"second message"):
            f = ws_frame(msg)
            s.sendall(f)
            while len(rest) < len(f):
                b = s.recv(65536)
                self.assertTrue(b)
                rest += b
            self.assertEqual(rest[:len(f)], f)
            rest = rest[len(f):]
        s.close()

    def test_04b_bytes_sent_with_an_upgrade_request_reach_the_server(self):
        """A client that sends its first bytes right behind the upgrade
        request (before the 101) gets them echoed: they used to wait in the
        api until the client sent something more."""
        head = self.keyed_head("GET", "/ws", "Connection: Upgrade\r\nUpgrade: tunnel\r\n",
                               WS_PORT)
        s, got = raw_request(self.url, head, body=b"early bytes", until=b"early bytes",
                             timeout=10)
        self.assertIsNotNone(s, got)
        self.assertTrue(got.startswith(b"HTTP/1.1 101"), got)
        self.assertTrue(got.endswith(b"\r\n\r\nearly bytes"), got)
        s.close()

    # ------------------------------------------------------------ refusals

    def test_05_bad_port_other_player_closed_port(self):
        for p in ("0", "70000"):
            r = self.call(self.key, "GET", "/api/v1/npcs/web/sandbox/ports/%s/" % p)
            self.assertEqual(r.status, 400, (p, r.body))
        r = self.call(self.stack.other, "GET", self.port_path(HTTP_PORT, "/f.bin"))
        self.assertEqual(r.status, 404)
        r = self.call(self.key, "GET", self.port_path(HTTP_PORT, "/f.bin", npc="bobs"))
        self.assertEqual(r.status, 404)
        r = self.call(None, "GET", self.port_path(HTTP_PORT, "/f.bin"))
        self.assertEqual(r.status, 401)
        r = self.call(self.key, "GET", self.port_path(8999, "/"))
        self.assertEqual(r.status, 502, r.body)
        e = r.json()["error"]
        self.assertEqual(e["code"], "port_closed")
        self.assertIn("nothing listens on port 8999 in the sandbox", e["message"])

    # ------------------------------------------------------------ tickets, previews

    def test_06_ticket_and_preview_links(self):
        r = self.call(self.key, "POST", self.port_path(HTTP_PORT, "/tickets"))
        self.assertEqual(r.status, 200, r.body)
        t = r.json()
        r = self.call(None, "GET", t["url"].replace("/?", "/f.bin?"))
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), len(self.file_bytes))
        r = self.call(self.key, "POST", self.port_path(HTTP_PORT, "/previews"), {"ttl_s": 1})
        self.assertEqual(r.status, 201, r.body)
        p = r.json()
        self.assertTrue(p["url"].startswith("https://"), p)
        tok = p["path"].split("/")[2]
        self.assertEqual(p["url"], "https://%s.%s/" % (tok, PREVIEW_DOMAIN))
        r = self.call(None, "GET", p["path"] + "f.bin")
        self.assertEqual(r.status, 200)
        self.assertTrue(r.body == self.file_bytes)
        r = self.call(None, "GET", "/f.bin", headers={"Host": "%s.%s" % (tok, PREVIEW_DOMAIN)})
        self.assertEqual(r.status, 200)
        self.assertTrue(r.body == self.file_bytes)
        time.sleep(2.1)
        r = self.call(None, "GET", p["path"] + "f.bin")
        self.assertEqual(r.status, 404)
        r = self.call(None, "GET", "/f.bin", headers={"Host": "%s.%s" % (tok, PREVIEW_DOMAIN)})
        self.assertEqual(r.status, 404)
        # Another player cannot make one.
        r = self.call(self.stack.other, "POST", self.port_path(HTTP_PORT, "/previews"), {})
        self.assertEqual(r.status, 404)

    # ------------------------------------------------------------ limits

    def test_07_the_33rd_connection_is_429(self):
        held = []
        try:
            for _ in range(32):
                s, got = raw_request(self.url, self.keyed_head("GET", "/cgi-bin/hold"),
                                     until=b"data: held")
                self.assertIsNotNone(s, got)
                held.append(s)
            r = self.call(self.key, "GET", self.port_path(HTTP_PORT, "/f.bin"))
            self.assertEqual(r.status, 429, r.body)
            self.assertEqual(r.headers.get("Retry-After"), "1")
            self.assertIn("port_connections_per_sandbox", r.json()["error"]["message"])
        finally:
            for s in held:
                s.close()

        def again():
            return self.call(self.key, "GET", self.port_path(HTTP_PORT, "/f.bin")).status == 200
        sbxtest.wait_until(again, 20, "a connection once the held ones closed", interval=0.3)
        r = self.call(self.stack.operator, "GET", "/metrics")
        self.assertIn('sbx_api_port_bytes_total{sandbox="npc-web",direction="out"}',
                      r.body.decode())

    def test_08_sbxctl_port_forward_carries_concurrent_connections(self):
        local = sbxtest.free_port()
        env = clean_env()
        env.update({"SBX_URL": self.url, "SBX_KEY": self.key, "HOME": "/nonexistent"})
        p = subprocess.Popen([SBXCTL, "port-forward", "web", "%d:%d" % (local, HTTP_PORT)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            sbxtest.wait_for_tcp("127.0.0.1", local, 10)
            got, errors = {}, []

            def fetch(i):
                try:
                    c = http.client.HTTPConnection("127.0.0.1", local, timeout=60)
                    c.request("GET", "/f.bin")
                    r = c.getresponse()
                    got[i] = (r.status, r.read())
                    c.close()
                except Exception as e:   # reported below
                    errors.append(e)
            ts = [threading.Thread(target=fetch, args=(i,)) for i in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(90)
            self.assertEqual(errors, [])
            for i in range(4):
                self.assertEqual(got[i][0], 200)
                self.assertTrue(got[i][1] == self.file_bytes, i)
        finally:
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=20)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn(b"Forwarding 127.0.0.1:%d" % local, err)

    def test_09_sbxctl_port_forward_refuses_what_it_cannot_reach_before_listening(self):
        # A typo, or an NPC whose sandbox nobody started, fails at once with
        # the reason, not at the first forwarded connection.
        env = clean_env()
        env.update({"SBX_URL": self.url, "SBX_KEY": self.key, "HOME": "/nonexistent"})
        r = self.call(self.key, "POST", "/api/v1/npcs", {"name": "bare"})
        self.assertIn(r.status, (200, 201), r.body)
        for npc, code, words in (("no-such-npc", 4, b"no NPC"),
                                 ("bare", 1, b"sbxctl up bare")):
            local = sbxtest.free_port()
            p = subprocess.run([SBXCTL, "port-forward", npc, "%d:%d" % (local, HTTP_PORT)],
                               env=env, capture_output=True, timeout=20)
            self.assertEqual(p.returncode, code, p.stderr)
            self.assertIn(words, p.stderr)
            self.assertNotIn(b"Forwarding", p.stderr)

    # ------------------------------------------------------------ half-close

    def test_10_sbxctl_port_forward_a_half_closing_client_gets_the_whole_answer(self):
        """The tester's reproduction: write the request, shutdown(SHUT_WR), read
        to EOF. The server answers only after its EOF; all 3 MiB come back (sbxctl
        used to end the tunnel at the local EOF: about 1 MiB came)."""
        local = sbxtest.free_port()
        env = clean_env()
        env.update({"SBX_URL": self.url, "SBX_KEY": self.key, "HOME": "/nonexistent"})
        p = subprocess.Popen([SBXCTL, "port-forward", "web", "%d:%d" % (local, DRAIN_PORT)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            sbxtest.wait_for_tcp("127.0.0.1", local, 10)
            req = os.urandom(100000)
            for _ in range(2):
                s = socket.create_connection(("127.0.0.1", local), timeout=60)
                s.sendall(req)
                s.shutdown(socket.SHUT_WR)
                got = b""
                while True:
                    b = s.recv(1 << 20)
                    if not b:
                        break
                    got += b
                s.close()
                want = b"got %d\n" % len(req) + self.file_bytes
                self.assertEqual(len(got), len(want))
                self.assertTrue(got == want)
        finally:
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=20)
        self.assertEqual(p.returncode, 0, err)
        self.assertNotIn(b"port ", err.split(b"\n", 1)[1], err)

    def tcp_ws(self):
        return websockets.connect(
            "ws://%s/api/v1/npcs/web/sandbox/ports/%d/tcp" % (self.url.split("//", 1)[1],
                                                              DRAIN_PORT),
            extra_headers={"Authorization": "Bearer " + self.key},
            compression=None, max_size=None)

    @staticmethod
    async def until_closed(ws):
        """Binary messages until the close; (bytes, the close)."""
        got = b""
        try:
            while True:
                m = await ws.recv()
                assert isinstance(m, bytes), m
                got += m
        except websockets.exceptions.ConnectionClosed as e:
            return got, e

    def test_11_tcp_websocket_eof_message_half_closes_and_the_rest_comes(self):
        async def go():
            async with self.tcp_ws() as ws:
                await ws.send(b"x" * 70000)
                await ws.send(b"y" * 5)
                await ws.send('{"type":"eof"}')
                return await self.until_closed(ws)
        got, e = asyncio.run(asyncio.wait_for(go(), 60))
        self.assertEqual(e.code, 1000, e.reason)
        want = b"got 70005\n" + self.file_bytes
        self.assertEqual(len(got), len(want))
        self.assertTrue(got == want)

    def test_12_tcp_websocket_after_eof_a_message_is_1008_as_any_other_text(self):
        eof = ws_frame(b'{"type":"eof"}')
        head = self.keyed_head("GET", "/tcp", "Connection: Upgrade\r\nUpgrade: websocket\r\n"
                               "Sec-WebSocket-Version: 13\r\n"
                               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", DRAIN_PORT)
        # Each list in one write: the api reads what follows the eof before
        # the sandbox's server can answer it.
        for frames, words in (([ws_frame(b"req", 2), eof, ws_frame(b"late", 2)],
                               "input was closed"),
                              ([eof, eof], "input was closed"),
                              ([ws_frame(b"hello")], "the one text message is"),
                              ([ws_frame(b'{"type":"close"}')], "the one text message is")):
            s, got = raw_request(self.url, head, until=b"\r\n\r\n")
            self.assertIsNotNone(s, got)
            self.assertTrue(got.startswith(b"HTTP/1.1 101"), got)
            s.sendall(b"".join(frames))
            data, code, reason = ws_until_close(s, got.split(b"\r\n\r\n", 1)[1])
            s.close()
            self.assertEqual(code, 1008, (frames, reason))
            self.assertIn(words, reason)
            # the server's answer (after its EOF) did not come through
            self.assertNotIn(b"got ", data)

    def test_99_a_reaped_sandbox_is_woken_by_the_first_request(self):
        def reaped():
            st = self.call(self.key, "GET", "/api/v1/npcs/web/sandbox").json()
            return st["state"] == "stopped" and st.get("stop_reason") == "idle"
        # The servers ran as an exec: stop it so the reaper sees an idle sandbox.
        r = self.call(self.key, "GET", "/api/v1/npcs/web/sandbox/execs")
        for x in r.json()["execs"] if isinstance(r.json(), dict) else r.json():
            if x.get("state") == "running":
                self.call(self.key, "DELETE", "/api/v1/npcs/web/sandbox/execs/" + x["exec_id"])
        sbxtest.wait_until(reaped, 60, "the reaper's idle stop", interval=0.3)
        # Woken: the sandbox runs again (its servers did not survive the stop,
        # so the port answers that nothing listens).
        r = self.call(self.key, "GET", self.port_path(HTTP_PORT, "/f.bin"))
        self.assertEqual(r.status, 502, r.body)
        st = self.call(self.key, "GET", "/api/v1/npcs/web/sandbox").json()
        self.assertEqual(st["state"], "running")


if __name__ == "__main__":
    unittest.main()
