"""test_nginx - deploy/nginx/sbx.conf: Debian's nginx in front of a real sandbox-api
and sandbox-broker on the runtime under test.

The test starts nginx on a free loopback port with a main config like Debian's
(default buffering, gzip on) that includes the site generated from the snippet
(only its listen and upstream addresses changed). The daemons read the broker
token as a systemd credential ($CREDENTIALS_DIRECTORY/broker-token), as the
units in deploy/systemd/ give it to them.

The client asks for gzip, as a browser's EventSource does. A second server in
the same nginx serves the snippet with its exec location undone (buffering on,
X-Accel-Buffering ignored, gzip for text/event-stream): that nginx holds the
events back, and the timing measure must tell the two apart, so it fails when
nginx buffers. (Measured with nginx 1.22: proxy_buffering on alone still
passes small events on promptly to a fast client; gzip holds them all to the
end.)
"""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import time
import unittest
import zlib

import sbxtest
from sbxtest import BUILD, REPO
from stackfix import Stack

SNIPPET = os.path.join(REPO, "deploy", "nginx", "sbx.conf")
NGINX = "/usr/sbin/nginx"
FIVE = "for i in 1 2 3 4 5; do echo $i; sleep 1; done"


def site(snippet, port, api_port, upstream="sbx_api"):
    """The snippet served on 127.0.0.1:PORT in front of the api on API_PORT."""
    text = snippet.replace("server 127.0.0.1:8080;", "server 127.0.0.1:%d;" % api_port)
    text = text.replace("    listen [::]:80;\n", "")
    # every server block (the api and the preview host) on the one port
    text = text.replace("    listen 80;\n", "    listen 127.0.0.1:%d;\n" % port)
    text = text.replace("sbx_api", upstream)
    assert "127.0.0.1:%d;" % port in text and "127.0.0.1:%d;" % api_port in text, text
    return text


class Nginx:
    """nginx -p DIR with a Debian-like main config including SITES."""

    def __init__(self, sites):
        self.dir = sbxtest.short_tmpdir("sbxngx-")
        os.chmod(self.dir, 0o755)        # the workers (user nobody) use the temp dirs
        with open(os.path.join(self.dir, "sites.conf"), "w") as f:
            f.write("\n".join(sites))
        d = self.dir
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write("""
worker_processes 1;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log info;
daemon off;
events { worker_connections 256; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    gzip on;
    access_log %(d)s/access.log;
    client_body_temp_path %(d)s/client_body;
    proxy_temp_path %(d)s/proxy;
    fastcgi_temp_path %(d)s/fastcgi;
    uwsgi_temp_path %(d)s/uwsgi;
    scgi_temp_path %(d)s/scgi;
    include %(d)s/sites.conf;
}
""" % {"d": d})
        r = subprocess.run([NGINX, "-t", "-e", d + "/error.log", "-p", d, "-c", d + "/nginx.conf"],
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr.decode()
        self.proc = sbxtest.start_process(
            [NGINX, "-e", d + "/error.log", "-p", d, "-c", d + "/nginx.conf"],
            log_path=os.path.join(sbxtest.out_dir(), "nginx-%s.log" % os.path.basename(d)))

    def log(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        self.proc.stop()
        shutil.rmtree(self.dir, True)


class SSE:
    """POST an exec and read its SSE answer as it arrives: (time, event, data)."""

    def __init__(self, port, key, npc, argv, timeout_ms=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        body = {"argv": argv}
        if timeout_ms:
            body["timeout_ms"] = timeout_ms
        self.conn.request("POST", "/api/v1/npcs/%s/sandbox/exec" % npc,
                          body=json.dumps(body).encode(),
                          headers={"Authorization": "Bearer " + key,
                                   "Content-Type": "application/json",
                                   "Accept-Encoding": "gzip"})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.gzip = self.resp.getheader("Content-Encoding") == "gzip"
        self.inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.buf = b""
        self.raw = b""
        self.comments = 0

    def events(self):
        while True:
            while b"\n\n" not in self.buf:
                chunk = self.resp.read1(65536)
                if not chunk:
                    return
                if self.gzip:
                    chunk = self.inflate.decompress(chunk)
                self.raw += chunk
                self.buf += chunk
            block, self.buf = self.buf.split(b"\n\n", 1)
            ev, data = None, []
            for line in block.split(b"\n"):
                if line.startswith(b":"):
                    self.comments += 1
                elif line.startswith(b"event:"):
                    ev = line[6:].strip().decode()
                elif line.startswith(b"data:"):
                    data.append(line[5:].lstrip(b" "))
            if ev is not None:
                yield time.monotonic(), ev, json.loads(b"\n".join(data) or b"null")

    def close(self):
        self.conn.close()


class NginxTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack("sbxngx%d-" % (os.getpid() % 100000), credentials=True)
        try:
            api_port = int(cls.stack.url.rsplit(":", 1)[1])
            with open(SNIPPET) as f:
                cls.snippet = f.read()
            for attempt in range(3):
                cls.port, cls.buffered_port = sbxtest.free_port(), sbxtest.free_port()
                buffered = site(cls.snippet, cls.buffered_port, api_port, "sbx_api_buffered")
                buffered = buffered.replace(
                    "proxy_buffering off;",
                    "proxy_buffering on;\n        proxy_ignore_headers X-Accel-Buffering;")
                buffered = buffered.replace(
                    "gzip off;", "gzip on;\n        gzip_types text/event-stream;")
                assert "gzip_types text/event-stream" in buffered and "ignore_headers" in buffered
                cls.nginx = Nginx([site(cls.snippet, cls.port, api_port), buffered])
                try:
                    for p in (cls.port, cls.buffered_port):
                        sbxtest.wait_for_tcp("127.0.0.1", p, 10, cls.nginx.proc)
                    break
                except Exception:
                    log = cls.nginx.log()
                    cls.nginx.close()
                    if "Address already in use" not in log or attempt == 2:
                        raise AssertionError("nginx did not start: " + log)
            cls.key = cls.stack.player
            r = cls.call("POST", "/api/v1/npcs", {"name": "ngx"})
            assert r.status == 201, (r.status, r.body)
            r = cls.call("PUT", "/api/v1/npcs/ngx/sandbox", None, timeout=120)
            assert r.status == 200, (r.status, r.body)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            if getattr(cls, "key", None):
                cls.call("DELETE", "/api/v1/npcs/ngx/sandbox", None, timeout=60)
        finally:
            if getattr(cls, "nginx", None) is not None:
                cls.nginx.close()
            cls.stack.close()

    @classmethod
    def call(cls, method, path, body, port=None, timeout=60, headers=None):
        h = {"Authorization": "Bearer " + cls.key}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        return sbxtest.tcp_http("127.0.0.1", port or cls.port, method, path, body, h, timeout)

    def five_lines(self, port, gzip=False):
        """Arrival times of the lines 1..5 and of the exit event, via PORT."""
        s = SSE(port, self.key, "ngx", ["sh", "-c", FIVE])
        self.addCleanup(s.close)
        self.assertEqual(s.status, 200)
        self.assertEqual(s.gzip, gzip)
        self.assertEqual(s.resp.getheader("Content-Type"), "text/event-stream")
        got = [(t, ev, d) for t, ev, d in s.events()]
        lines = [(t, d["data"]) for t, ev, d in got if ev == "stdout"]
        self.assertEqual("".join(d for _, d in lines), "1\n2\n3\n4\n5\n", s.raw)
        self.assertEqual([(ev, d.get("code")) for _, ev, d in got if ev == "exit"], [("exit", 0)])
        return [t for t, _ in lines], got

    # ------------------------------------------------------------ SSE live

    def test_each_line_arrives_within_a_second_of_being_printed(self):
        times, got = self.five_lines(self.port)
        # One event per line (the program prints a line a second).
        self.assertEqual(len(times), 5)
        start = [t for t, ev, _ in got if ev == "start"][0]
        gaps = [b - a for a, b in zip(times, times[1:])]
        print("via nginx: line i arrived at %s s after start; gaps %s"
              % (["%.2f" % (t - start) for t in times], ["%.2f" % g for g in gaps]))
        # Line i is printed 1 s after line i-1; it arrives within 1 s of that,
        # so the spacing of arrivals follows the printing: a buffered stream
        # delivers them together (gaps ~0). Measured as spacing, not as
        # absolute times, so a loaded machine (slow exec start) does not fail it.
        for i, g in enumerate(gaps):
            self.assertGreater(g, 0.5, "line %d came %.2f s after line %d: held back" % (i + 2, g, i + 1))
            self.assertLess(g, 2.0, "line %d came %.2f s after line %d" % (i + 2, g, i + 1))
        self.assertLess(times[0] - start, 1.5, "the first line came %.2f s after start" % (times[0] - start))
        exit_t = [t for t, ev, _ in got if ev == "exit"][0]
        self.assertLess(exit_t - times[-1], 2.0)

    def test_the_measure_fails_when_nginx_buffers(self):
        """Control: the same snippet with buffering forced on holds lines back,
        and the spacing measure sees it."""
        times, _ = self.five_lines(self.buffered_port, gzip=True)
        gaps = [b - a for a, b in zip(times, times[1:])]
        print("via a buffering nginx: gaps %s" % ["%.2f" % g for g in gaps])
        self.assertLess(min(gaps), 0.5, "a buffering proxy should have bunched the lines")

    def test_a_command_silent_for_90s_survives_proxy_read_timeout_60s(self):
        self.assertIn("proxy_read_timeout 60s;", self.snippet)
        t0 = time.monotonic()
        s = SSE(self.port, self.key, "ngx", ["sh", "-c", "sleep 90; echo done"],
                timeout_ms=150000)
        self.addCleanup(s.close)
        self.assertEqual(s.status, 200)
        got = [(t, ev, d) for t, ev, d in s.events()]
        took = time.monotonic() - t0
        print("silent 90 s exec via nginx: %d heartbeat comments, %.1f s" % (s.comments, took))
        self.assertEqual([d["data"] for _, ev, d in got if ev == "stdout"], ["done\n"], s.raw)
        self.assertEqual([d.get("code") for _, ev, d in got if ev == "exit"], [0], s.raw)
        self.assertGreaterEqual(took, 89)
        self.assertGreaterEqual(s.comments, 5)     # 90 s / 15 s heartbeat
        self.assertNotIn("upstream timed out", self.nginx.log())

    # ------------------------------------------------------------ WebSockets

    def test_terminals_attach_by_websocket_through_nginx(self):
        """sbxctl exec -i and shell attach their terminal by WebSocket
        (GET .../terminals/ID/attach): through the site they must be upgraded,
        not answered 400 "send 'Upgrade: websocket'" as when /api/ dropped the
        client's Upgrade."""
        env = dict(os.environ, SBX_URL="http://127.0.0.1:%d" % self.port, SBX_KEY=self.key)
        data = os.urandom(3 * 1024 * 1024)
        r = subprocess.run([os.path.join(BUILD, "sbxctl"), "exec", "-i", "ngx", "--",
                            "sh", "-c", "cat; exit 3"], input=data, env=env,
                           capture_output=True, timeout=120)
        self.assertEqual(r.stderr, b"")
        self.assertEqual((r.returncode, len(r.stdout)), (3, len(data)))
        self.assertEqual(r.stdout, data)
        # A browser's terminal: a raw handshake with a ticket, as /console does.
        t = self.call("POST", "/api/v1/npcs/ngx/sandbox/terminals", {"argv": ["sh"]})
        self.assertEqual(t.status, 201, t.body)
        tid = t.json()["id"]
        tk = self.call("POST", "/api/v1/npcs/ngx/sandbox/terminals/%s/tickets" % tid, None)
        self.assertEqual(tk.status, 200, tk.body)
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        self.addCleanup(s.close)
        s.sendall(("GET %s HTTP/1.1\r\nHost: sbx.example.org\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "Sec-WebSocket-Protocol: sbx.v1\r\n\r\n" % tk.json()["attach_url"]).encode())
        got = b""
        while b"\r\n\r\n" not in got or b'"hello"' not in got:
            b = s.recv(65536)
            if not b:
                break
            got += b
        self.assertTrue(got.startswith(b"HTTP/1.1 101 "), got[:300])
        self.assertIn(b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", got)
        self.assertIn(b'{"type":"hello"', got)
        self.call("DELETE", "/api/v1/npcs/ngx/sandbox/terminals/%s" % tid, None)

    # ------------------------------------------------------------ body size, rest

    def test_upload_limit_is_the_apis_file_cap(self):
        m = re.search(r"\n\s*client_max_body_size (\d+)m;", self.snippet)
        self.assertIsNotNone(m)
        r = subprocess.run([os.path.join(BUILD, "sandbox-api"), "--print-config"],
                           capture_output=True, timeout=30)
        cap = json.loads(r.stdout)["file_size_max"]
        self.assertEqual(int(m.group(1)) * 1024 * 1024, cap)
        # 8 MiB (nginx's default would refuse anything over 1 MiB) goes through
        # and comes back byte for byte.
        data = os.urandom(8 * 1024 * 1024)
        r = self.call("PUT", "/api/v1/npcs/ngx/sandbox/files?path=/work/big.bin", data,
                      headers={"Content-Type": "application/octet-stream"}, timeout=120)
        self.assertEqual(r.status, 200, r.body[:300])
        r = self.call("GET", "/api/v1/npcs/ngx/sandbox/files?path=/work/big.bin", None, timeout=120)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, data)
        # Over the cap: refused before the body is sent.
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.addCleanup(c.close)
        c.putrequest("PUT", "/api/v1/npcs/ngx/sandbox/files?path=/work/huge.bin")
        c.putheader("Authorization", "Bearer " + self.key)
        c.putheader("Content-Length", str(cap + 1))
        c.endheaders()
        self.assertEqual(c.getresponse().status, 413)

    def test_json_routes_and_errors_pass_through(self):
        r = self.call("GET", "/api/v1/whoami", None)
        self.assertEqual((r.status, r.json()["name"]), (200, "pl"))
        r = self.call("GET", "/api/v1/whoami", None, headers={"Authorization": "Bearer nope"})
        self.assertEqual(r.status, 401)
        self.assertIn("error", r.json())

    def test_the_console_is_served_and_nothing_else_outside_api(self):
        r = sbxtest.tcp_http("127.0.0.1", self.port, "GET", "/console", None, {}, 60)
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers.get("Content-Type", "").startswith("text/html"), r.headers)
        self.assertIn("script-src", r.headers.get("Content-Security-Policy", ""))
        self.assertEqual(r.headers.get("Referrer-Policy"), "no-referrer")
        # The very page the api serves, unchanged on its way, but for the
        # style nonce each reply draws afresh (adr/0054): the one in the
        # body through nginx is the one its own CSP header names.
        direct = sbxtest.tcp_http("127.0.0.1", int(self.stack.url.rsplit(":", 1)[1]), "GET",
                                  "/console", None, {}, 60)
        self.assertEqual(direct.status, 200)
        nonce = re.compile(rb'nonce="([A-Za-z0-9+/=]+)"')
        got = nonce.findall(r.body)
        self.assertTrue(got, "no style nonce in the page")
        self.assertIn("'nonce-%s'" % got[0].decode(),
                      r.headers.get("Content-Security-Policy", ""))
        self.assertEqual(nonce.sub(b'nonce=""', r.body), nonce.sub(b'nonce=""', direct.body))
        for path in ("/consolex", "/console/x", "/healthz", "/"):
            r = sbxtest.tcp_http("127.0.0.1", self.port, "GET", path, None, {}, 60)
            self.assertEqual(r.status, 404, path)


if __name__ == "__main__":
    unittest.main()
