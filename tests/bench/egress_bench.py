#!/usr/bin/python3
# egress_bench.py - `make bench` figures of the egress proxy (adr/0026): added latency of an HTTP request through sbx-proxy vs direct (p50, p99) and the proxy's RSS idle and with 100 open tunnels.
#
#   egress_bench.py BUILD_DIR [N]   prints one JSON object
#
# Runs in a network namespace of its own (198.51.100.10 on its loopback, a
# test HTTP server and DNS from tests/integration/egress_world.py), the
# client there too; nothing leaves the namespace. Each request is a new TCP
# connection (HTTP/1.0), as a sandbox's wget or pip makes through a proxy.

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORLD = os.path.join(ROOT, "tests", "integration", "egress_world.py")
IP, DNS = "198.51.100.10", "198.51.100.53"

CLIENT = r'''
import json, socket, sys, time
port, n, ip = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def once(via):
    t = time.perf_counter()
    if via:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET http://allowed.test:8080/b HTTP/1.0\r\n\r\n")
    else:
        s = socket.create_connection((ip, 8080))
        s.sendall(b"GET /b HTTP/1.0\r\nHost: allowed.test:8080\r\n\r\n")
    b = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        b += c
    s.close()
    assert b"served-by" in b, b
    return (time.perf_counter() - t) * 1000
out = {"direct": [], "proxy": []}
for i in range(n):          # interleaved: the same load on both
    out["direct"].append(once(False))
    out["proxy"].append(once(True))
print(json.dumps(out))
'''

HOLD = r'''
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
ss = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"CONNECT allowed.test:8080 HTTP/1.1\r\n\r\n")
    assert b"200" in s.recv(100)
    ss.append(s)
print("held", flush=True)
sys.stdin.read()
'''


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1])
    return 0


def main():
    build = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    ns = "sbxpb-" + secrets.token_hex(3)
    d = tempfile.mkdtemp(prefix="sbxpb-")
    procs = []
    run = lambda *a, **kw: subprocess.run(["ip", "netns", "exec", ns] + list(a), check=True,
                                          capture_output=True, **kw)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        run("ip", "link", "set", "lo", "up")
        for a in (IP, DNS):
            run("ip", "addr", "add", a + "/32", "dev", "lo")
        with open(os.path.join(d, "zone.json"), "w") as f:
            json.dump({"allowed.test": [IP]}, f)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-keyout", os.path.join(d, "key.pem"), "-out", os.path.join(d, "cert.pem"),
                        "-subj", "/CN=allowed.test"], check=True, capture_output=True)
        w = subprocess.Popen(["ip", "netns", "exec", ns, "/usr/bin/python3", WORLD, "--dir", d,
                              "--dns", DNS, "--http", IP + ":8080"], stdout=subprocess.PIPE)
        procs.append(w)
        assert w.stdout.readline().strip() == b"ready"
        outp = os.path.join(d, "proxy.out")
        with open(outp, "wb") as out:
            p = subprocess.Popen(["ip", "netns", "exec", ns, os.path.join(build, "sbx-proxy"),
                                  "--listen", "127.0.0.1:0", "--resolver", DNS,
                                  "--allow", "allowed.test"], stdout=out)
        procs.append(p)
        port = None
        for _ in range(200):
            with open(outp) as f:
                l = f.readline()
            if l:
                port = json.loads(l)["port"]
                break
            time.sleep(0.05)
        # the proxy process itself (ip netns exec execs it: same pid)
        pid = p.pid
        idle = rss_kib(pid)
        r = run("/usr/bin/python3", "-c", CLIENT, str(port), str(n), IP)
        t = json.loads(r.stdout)
        after = rss_kib(pid)
        h = subprocess.Popen(["ip", "netns", "exec", ns, "/usr/bin/python3", "-c", HOLD, str(port),
                              "100"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        procs.append(h)
        assert h.stdout.readline().strip() == b"held"
        held = rss_kib(pid)
        h.stdin.close()
        print(json.dumps({
            "n": n,
            "direct_p50_ms": pct(t["direct"], 50), "proxy_p50_ms": pct(t["proxy"], 50),
            "direct_p99_ms": pct(t["direct"], 99), "proxy_p99_ms": pct(t["proxy"], 99),
            "rss_idle_kib": idle, "rss_after_kib": after, "rss_100_tunnels_kib": held,
        }))
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["ip", "netns", "del", ns])


if __name__ == "__main__":
    main()
