"""test_browser_view - watching a sandbox's browser (issue 22 item 4, adr/0065):
GET .../sandbox/browser/screenshot and /console's live view, against a real api
and broker on the runtime under test, with Debian's chromium in the sandbox
(the browser image of deploy/image/build.sh --browser) and on the host
(playwright-core of tests/e2e, as test_console_term.py).

One sandbox, one browser, in order:
  * no browser yet: the screenshot is 404 with a sentence, the view too;
  * the browser (started by POST .../sandbox/browser) loads a page served
    inside the sandbox by a few lines of python3 (driven over CDP through the
    api's ports route by playwright-core);
  * the screenshot is a PNG of the page's size, not one colour, and its
    colours are the page's;
  * another player's key gets 404; a view without a credential 401;
  * /console's live view in headless chromium on the host draws a frame,
    and the drawing changes each time the page does (four times: more than
    the two frames Chromium sends without acks);
  * a second api with browser_shot_max 1k refuses the same screenshot with
    502 and a sentence naming the key;
  * the browser stops: the console's view ends, the screenshot is 404 again.
"""

import json
import os
import struct
import subprocess
import threading
import time
import unittest
import zlib

import sbxtest
from consolefix import E2E, NODE
from stackfix import Stack
from test_browser import IMAGE as BROWSER_IMAGE, build_browser_image

NPC = "vic"
SITE_PORT = 8000
PAGE = ("<!doctype html><html><head><title>sbx view</title></head>"
        "<body style='margin:0;background:rgb(200,30,30)'>"
        "<h1 style='color:#fff;font:48px sans-serif;margin:40px'>sbx browser view</h1>"
        "<div style='width:200px;height:120px;background:rgb(20,40,220)'></div>"
        "</body></html>")
# The sandbox's web server: one page, Python's socket module only (the
# browser image's python3-minimal has no http.server).
SERVER = """import socket
body = open('/work/site/index.html', 'rb').read()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', %d))
s.listen(16)
while True:
    c, _ = s.accept()
    try:
        c.recv(65536)
        c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Type: text/html\\r\\nContent-Length: %%d\\r\\n'
                  b'Connection: close\\r\\n\\r\\n' %% len(body) + body)
    except OSError:
        pass
    c.close()
""" % SITE_PORT


def png_decode(data):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB/RGBA,
    non-interlaced PNG (RFC 2083), or AssertionError."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, ihdr
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    prev, rows, at = bytearray(stride), [], 0
    for _ in range(h):
        f, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        at += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
    return w, h, rows


class Driver:
    """tests/e2e/browser_view.mjs: one command in, one RESULT out."""

    def __init__(self, env):
        self.p = subprocess.Popen([NODE, os.path.join(E2E, "browser_view.mjs")], cwd=E2E,
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.timer = threading.Timer(240, self.p.kill)
        self.timer.start()

    def do(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        for out in self.p.stdout:
            if out.startswith("RESULT "):
                return json.loads(out[len("RESULT "):])
        raise AssertionError("the driver ended: %s" % self.p.stderr.read()[-3000:])

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
            self.p.wait(30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.p.kill()
        self.timer.cancel()


class BrowserViewTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        for path in (NODE, "/usr/bin/chromium", os.path.join(E2E, "node_modules", "playwright-core")):
            if not os.path.exists(path):
                raise AssertionError("%s is missing: run deploy/deps.sh (make check does)" % path)
        build_browser_image(sbxtest.runtime(), sbxtest.runtime_host())
        cls.stack = Stack("sbxbview%d-" % (os.getpid() % 100000),
                          broker_args=["--image", BROWSER_IMAGE])
        try:
            cls.port = int(cls.stack.url.rsplit(":", 1)[1])
            r = cls.call(cls.stack.player, "POST", "/api/v1/npcs", {"name": NPC})
            assert r.status == 201, r.body
            r = cls.call(cls.stack.player, "PUT", "/api/v1/npcs/%s/sandbox" % NPC, timeout=120)
            assert r.status == 200, r.body
        except BaseException:
            cls.stack.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    @classmethod
    def call(cls, key, method, path, body=None, headers=None, timeout=60, port=None):
        h = {"Authorization": "Bearer " + key} if key else {}
        h.update(headers or {})
        return sbxtest.tcp_http("127.0.0.1", port or cls.port, method, path, body, h, timeout)

    def base(self):
        return "/api/v1/npcs/%s/sandbox" % NPC

    def start_browser(self, key, port=None):
        r = self.call(key, "POST", self.base() + "/browser", {}, timeout=90, port=port)
        self.assertEqual(r.status, 200, r.body)
        return json.loads(r.body)

    def test_screenshot_and_live_view(self):
        key = self.stack.player
        # No browser yet: 404 with a sentence, for the screenshot and the view.
        r = self.call(key, "GET", self.base() + "/browser/screenshot")
        self.assertEqual(r.status, 404, r.body)
        self.assertIn("browser", json.loads(r.body)["error"]["message"])
        r = self.call(key, "GET", self.base() + "/browser/view",
                      headers={"Upgrade": "websocket", "Connection": "Upgrade",
                               "Sec-WebSocket-Version": "13",
                               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        self.assertEqual(r.status, 404, r.body)

        # The page, served inside the sandbox.
        r = self.call(key, "PUT", "/api/v1/npcs/%s/sandbox/files?path=/work/site/index.html" % NPC,
                      PAGE.encode(), {"Content-Type": "application/octet-stream"})
        self.assertIn(r.status, (200, 201, 204), r.body)
        r = self.call(key, "POST", self.base() + "/execs",
                      {"argv": ["python3", "-c", SERVER], "timeout_ms": 280000})
        self.assertIn(r.status, (200, 201), r.body)
        server = self.base() + "/execs/" + json.loads(r.body)["exec_id"]

        b = self.start_browser(key)
        d = Driver(dict(os.environ, SBX_CDP_URL=b["endpoint"]["ws_url"],
                        SBX_CONSOLE_URL="http://127.0.0.1:%d" % self.port,
                        SBX_KEY=key, SBX_NPC=NPC))
        self.addCleanup(d.close)
        # The server listens once the api's ports route reaches it.
        deadline = time.monotonic() + 90
        while True:
            r = self.call(key, "GET", self.base() + "/ports/%d/" % SITE_PORT)
            if r.status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if r.status != 200:
            x = self.call(key, "GET", server)
            ev = self.call(key, "GET", server + "/events", timeout=10) if b'"running"' not in x.body else x
            self.fail("the page's server: %s %s / %s" % (r.body, x.body, ev.body[-1500:]))
        g = d.do("goto http://127.0.0.1:%d/" % SITE_PORT)
        self.assertEqual(g.get("title"), "sbx view", g)

        # The screenshot: a PNG of the page's size, in the page's colours.
        t0 = time.monotonic()
        r = self.call(key, "GET", self.base() + "/browser/screenshot")
        print("screenshot: %d bytes in %.0f ms (not asserted)" % (len(r.body),
                                                                 (time.monotonic() - t0) * 1000))
        self.assertEqual(r.status, 200, r.body[:300])
        self.assertEqual(r.headers.get("Content-Type"), "image/png")
        w, h, rows = png_decode(r.body)
        self.assertEqual((w, h), (g["w"], g["h"]))
        colours = {px for row in rows[::7] for px in row[::7]}
        self.assertGreater(len(colours), 2, "the screenshot is one colour")
        self.assertEqual(rows[h - 5][w - 5], (200, 30, 30))       # the background
        self.assertEqual(rows[200][30], (20, 40, 220))          # the box, below the heading
        self.assertEqual(r.headers.get("Sbx-Image-Size"), "%dx%d" % (w, h))

        # Another player's key: 404 (not yours); a view without a credential: 401.
        r = self.call(self.stack.other, "GET", self.base() + "/browser/screenshot")
        self.assertEqual(r.status, 404, r.body)
        r = self.call(None, "GET", self.base() + "/browser/view?ticket=" + "a" * 50,
                      headers={"Upgrade": "websocket", "Connection": "Upgrade",
                               "Sec-WebSocket-Version": "13",
                               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        self.assertEqual(r.status, 401, r.body)

        # /console's live view draws the page, and follows it.
        t0 = time.monotonic()
        v = d.do("console")
        print("console: first frame %dx%d drawn %.0f ms after the page opened (not asserted)"
              % (v.get("width", 0), v.get("height", 0), (time.monotonic() - t0) * 1000))
        self.assertNotIn("error", v, v)
        self.assertEqual(v["http"], 200)
        self.assertGreater(v["drawn"], 0, v)
        self.assertGreater(v["width"], 0, v)
        self.assertGreater(v["height"], 0, v)
        self.assertEqual(v["state"], "live", v)
        # Each change shows: more than the two frames CDP sends unacked
        # (the api acks each frame once its client took it).
        for i, colour in enumerate(("rgb(10,160,40)", "rgb(240,240,20)", "rgb(90,0,120)",
                                    "rgb(0,200,200)")):
            self.assertEqual(d.do("color " + colour), {"ok": True})
            c = d.do("view-changes")
            self.assertNotIn("error", c, c)
            self.assertNotEqual(c["sum"], c["before"])
            self.assertGreaterEqual(c["drawn"], i + 2, c)
        self.assertFalse([m for m in c["console"] if "Content Security Policy" in m
                          or "pageerror" in m], c["console"])

        # A second api whose screenshot bound is 1k: the same page is too big.
        self.second_api_refuses_a_big_screenshot()

        # The browser stops: the view ends and the console says so.
        r = self.call(key, "DELETE", self.base() + "/browser", timeout=90)
        self.assertEqual(r.status, 200, r.body)
        e = d.do("view-ended")
        self.assertNotIn("error", e, e)
        self.assertRegex(e["status"], r"^(view closed \(1000|error: port_closed)", e)
        r = self.call(key, "GET", self.base() + "/browser/screenshot")
        self.assertEqual(r.status, 404, r.body)

    def second_api_refuses_a_big_screenshot(self):
        state = os.path.join(self.stack.dir, "api2")
        _, url = self.stack.start_api(state, ["--browser-shot-max", "1k"], "api2")
        port = int(url.rsplit(":", 1)[1])
        key = self.stack.admin("create-player", "pl2", state_dir=state)
        r = self.call(key, "POST", "/api/v1/npcs", {"name": NPC}, port=port)
        self.assertEqual(r.status, 201, r.body)
        r = self.call(key, "PUT", "/api/v1/npcs/%s/sandbox" % NPC, timeout=120, port=port)
        self.assertEqual(r.status, 200, r.body)
        self.start_browser(key, port)    # the running one: this api learns its port
        r = self.call(key, "GET", self.base() + "/browser/screenshot", port=port)
        self.assertEqual(r.status, 502, r.body)
        self.assertIn("browser_shot_max", json.loads(r.body)["error"]["message"])


if __name__ == "__main__":
    unittest.main()
