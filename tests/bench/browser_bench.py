"""browser_bench.py - the `make bench` figures of issue 22 (the browser, adr/0064).

Imported by tests/bench/bench.py, which owns the daemons (a Bench: its api at
b.api_addr with operator key b.akey, the runtime at b.rsock of kind
b.a.runtime; its broker allowlists sbx-browser:bookworm). The image is built
here with deploy/image/build.sh --browser into the bench's runtime, its tars
cached in tests/out/image-cache (kept between runs, as test_compose.py's).

  browser_start  DELETE then POST .../sandbox/browser, until the first answer
                 of Chromium's CDP server through the ports route (GET
                 json/version): p50 of BENCH_BROWSER_STARTS [5] rounds.
  browser_rt     one CDP call, Runtime.evaluate("1+1") on a page target, sent
                 over the ports route's WebSocket (api -> broker -> agent ->
                 127.0.0.1:9222) vs the same call made inside the sandbox by
                 the same few lines of Python to its own loopback: p50 of
                 BENCH_BROWSER_RT [200] calls each, and the ratio.

Never asserts: a figure that misses is reported as missed.
"""

import http.client
import json
import os
import statistics
import subprocess
import time

from term_bench import WS, http_json

IMAGE = "sbx-browser:bookworm"
NPC = "bench-browser"
ROUTE = "/api/v1/npcs/%s/sandbox/ports/9222" % NPC
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STARTS = int(os.environ.get("BENCH_BROWSER_STARTS", "5"))
RT = int(os.environ.get("BENCH_BROWSER_RT", "200"))

# The in-sandbox side of browser_rt: argv PATH N; prints one line of N
# round-trip times in seconds. The same framing as term_bench.WS.
INSIDE = r'''
import base64, json, os, socket, struct, sys, time
path, n = sys.argv[1], int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", 9222))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
k = base64.b64encode(os.urandom(16)).decode()
s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1:9222\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, k)).encode())
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(65536)
buf = buf.partition(b"\r\n\r\n")[2]
def need(m):
    global buf
    while len(buf) < m:
        x = s.recv(65536)
        if not x:
            raise EOFError
        buf += x
def recv():
    global buf
    need(2)
    ln, i = buf[1] & 127, 2
    if ln == 126:
        need(4); ln = struct.unpack(">H", buf[2:4])[0]; i = 4
    elif ln == 127:
        need(10); ln = struct.unpack(">Q", buf[2:10])[0]; i = 10
    need(i + ln)
    d, buf = buf[i:i + ln], buf[i + ln:]
    return d
def send(d):
    m = os.urandom(4)
    h = bytes([0x81]) + (bytes([0x80 | len(d)]) if len(d) < 126 else bytes([0x80 | 126]) + struct.pack(">H", len(d)))
    s.sendall(h + m + bytes(b ^ m[i & 3] for i, b in enumerate(d)))
ts = []
for i in range(1, n + 1):
    t = time.perf_counter()
    send(json.dumps({"id": i, "method": "Runtime.evaluate", "params": {"expression": "1+1"}}).encode())
    while json.loads(recv()).get("id") != i:
        pass
    ts.append(time.perf_counter() - t)
print(" ".join("%.6f" % x for x in ts))
'''


def log(*a):
    import sys
    print("bench:", *a, file=sys.stderr, flush=True)


def raw_get(b, path):
    """GET path on the api with the key; (status, body bytes). Read by its
    Content-Length: Chromium's DevTools server may keep the connection."""
    c = http.client.HTTPConnection(*b.api_addr, timeout=30)
    try:
        c.request("GET", path, headers={"Authorization": "Bearer " + b.akey})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def setup(b):
    """The browser image in the bench's runtime and NPC bench-browser's sandbox on it."""
    cache = os.path.join(REPO, "tests", "out", "image-cache")
    os.makedirs(cache, exist_ok=True)
    t0 = time.time()
    r = subprocess.run(["sh", os.path.join(REPO, "deploy", "image", "build.sh"), "--browser",
                        b.a.runtime, "unix://" + b.rsock, cache, IMAGE],
                       capture_output=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("build.sh --browser: %s" % r.stderr.decode(errors="replace")[-300:])
    b.note("browser image (deploy/image/build.sh --browser, tars cached in tests/out/image-cache) "
           "ready in %.0f s" % (time.time() - t0))
    log("browser image ready in %.0f s" % (time.time() - t0))
    st, _ = http_json(b.api_addr, b.akey, "POST", "/api/v1/npcs", {"name": NPC})
    log("npc create: %d" % st)
    if st not in (201, 409):
        raise RuntimeError("npc create: %d" % st)
    st, j = http_json(b.api_addr, b.akey, "PUT", "/api/v1/npcs/%s/sandbox" % NPC,
                      {"image": IMAGE}, timeout=300)
    log("ensure on %s: %d" % (IMAGE, st))
    if st != 200:
        raise RuntimeError("ensure on %s: %d %r" % (IMAGE, st, j))


def fig_browser_start(b):
    setup(b)
    ts = []
    for _ in range(STARTS):
        http_json(b.api_addr, b.akey, "DELETE", "/api/v1/npcs/%s/sandbox/browser" % NPC)
        t0 = time.perf_counter()
        st, j = http_json(b.api_addr, b.akey, "POST", "/api/v1/npcs/%s/sandbox/browser" % NPC)
        log("browser start: %d %.2f s" % (st, time.perf_counter() - t0))
        if st != 200 or j.get("state") != "running":
            raise RuntimeError("browser start: %d %r" % (st, j))
        end = time.time() + 60
        while raw_get(b, ROUTE + "/json/version")[0] != 200:
            if time.time() > end:
                raise RuntimeError("no CDP answer 60 s after the start")
            time.sleep(0.01)
        ts.append(time.perf_counter() - t0)
    b.row("browser start (POST …/sandbox/browser, headless Chromium in the sandbox) to its "
          "first CDP answer through the ports route, p50 of %d" % STARTS,
          "%.2f s" % statistics.median(ts), "—", "—", "— (recorded)")


def fig_browser_rt(b):
    st, body = raw_get(b, ROUTE + "/json/list")
    pages = [t for t in json.loads(body) if t.get("type") == "page"] if st == 200 else []
    if not pages:
        raise RuntimeError("no page target (json/list: %d)" % st)
    path = "/devtools/page/" + pages[0]["id"]
    ws = WS(b.api_addr, ROUTE + path, b.akey)
    sbx = []
    try:
        for i in range(1, RT + 1):
            t = time.perf_counter()
            ws.send(1, json.dumps({"id": i, "method": "Runtime.evaluate",
                                   "params": {"expression": "1+1"}}).encode())
            while True:
                op, d = ws.recv()
                if op == 1 and json.loads(d).get("id") == i:
                    break
            sbx.append(time.perf_counter() - t)
    finally:
        ws.close()
    r = subprocess.run([os.path.join(b.build, "sbxctl"), "exec", NPC, "--", "python3", "-c",
                        INSIDE, path, str(RT)], capture_output=True, timeout=300,
                       env=dict(os.environ, SBX_URL="http://%s:%d" % b.api_addr, SBX_KEY=b.akey))
    if r.returncode != 0:
        raise RuntimeError("inside: %s" % r.stderr.decode(errors="replace")[-300:])
    inside = [float(x) for x in r.stdout.split()]
    p_sbx, p_in = statistics.median(sbx), statistics.median(inside)
    b.row("CDP round trip Runtime.evaluate('1+1') through the api (WebSocket on the ports route) "
          "vs the same call inside the sandbox, p50 of %d" % RT,
          "%.2f ms" % (p_sbx * 1000), "inside %.2f ms" % (p_in * 1000),
          "%.1f×" % (p_sbx / p_in), "— (recorded)")


FIGURES = [("browser_start", fig_browser_start), ("browser_rt", fig_browser_rt)]
