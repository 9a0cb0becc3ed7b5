#!/usr/bin/python3
# egress_counts_bench.py - what `sbx-proxy --counts FILE` (adr/0027) costs per decision: N denials through the proxy's unix socket, one connection each, without and with the counts file; then a second proxy on the same file starts from the first one's totals.
#
#   egress_counts_bench.py BUILD_DIR [N]   prints one JSON object
#
# Denials need no DNS and no upstream: nothing leaves the machine.

import json
import os
import socket
import subprocess
import sys
import tempfile
import time


def run(proxy, d, counts, n):
    sock = os.path.join(d, "p.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    argv = [proxy, "--listen", "unix:" + sock, "--allow", "allowed.test"]
    if counts:
        argv += ["--counts", os.path.join(d, "counts")]
    out = os.path.join(d, "out")
    with open(out, "wb") as f:                        # a pipe would fill and block it
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.DEVNULL)
    while not os.path.exists(sock) or os.path.getsize(out) == 0:
        time.sleep(0.01)
    with open(out) as f:
        first = json.loads(f.readline())              # the "listening" line
    t0 = time.monotonic()
    for i in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(b"GET http://denied%d.test/ HTTP/1.0\r\n\r\n" % i)
        b = b""
        while True:
            x = s.recv(4096)
            if not x:
                break
            b += x
        s.close()
        if not b.startswith(b"HTTP/1.1 403"):
            raise SystemExit("not a denial: %r" % b[:80])
    dt = time.monotonic() - t0
    p.terminate()
    p.wait(10)
    return dt / n * 1e6, first


def main():
    proxy = os.path.join(sys.argv[1], "sbx-proxy")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    d = tempfile.mkdtemp(prefix="sbxcb-")
    plain, _ = run(proxy, d, False, n)
    counted, _ = run(proxy, d, True, n)
    _, again = run(proxy, d, True, 1)
    with open(os.path.join(d, "counts")) as f:
        left = f.read()
    print(json.dumps({"decisions": n, "us_per_denial_plain": round(plain, 1),
                      "us_per_denial_counts": round(counted, 1),
                      "second_proxy_started_from": [again.get("allowed"), again.get("denied")],
                      "counts_file": left.strip()}))


if __name__ == "__main__":
    main()
