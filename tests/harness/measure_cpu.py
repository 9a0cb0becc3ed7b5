#!/usr/bin/env python3
"""measure_cpu.py - where the CPU of N concurrent execs goes, per process name.

usage: measure_cpu.py BROKER_SOCK TOKEN_FILE SID[,SID...] [N]

Starts N execs of 4 MiB of text (`yes ... | head -c 4194304`) through the
broker's unix socket at once, spread over the sandboxes named, reads every
stream to its end, and prints the elapsed time, the aggregate throughput and
the CPU seconds (utime+stime from /proc/PID/stat, before and after) of every
process on the host, summed by process name (sandbox-broker, dockerd,
containerd-shim, sbx-helper, ...). Not a test: the profile behind the
"what dominates" notes of docs/bench.md (issue 13). Run it on a private
runtime (tests/harness/runtimes.sh up) with nothing else busy; the whole
host is counted.
"""
import json
import os
import selectors
import socket
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
ARGV = ["sh", "-c", "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
        " | head -c 4194304"]


def cpu_all():
    d = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        d[(int(p), name)] = (int(f[11]) + int(f[12])) / TICK
    return d


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    sock = sys.argv[1]
    with open(sys.argv[2]) as f:
        tok = f.read().strip()
    sids = sys.argv[3].split(",")
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    c0 = cpu_all()
    t0 = time.time()
    sel = selectors.DefaultSelector()
    body = json.dumps({"argv": ARGV}).encode()
    for j in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(("POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer %s\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                   % (sids[j % len(sids)], tok, len(body))).encode() + body)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    left, wire = n, 0
    while left:
        for k, _ in sel.select(5):
            try:
                got = len(k.fileobj.recv(1 << 20))
            except BlockingIOError:
                continue
            if got == 0:
                sel.unregister(k.fileobj)
                k.fileobj.close()
                left -= 1
            wire += got
    el = time.time() - t0
    c1 = cpu_all()
    by = {}
    for k, v in c1.items():
        dv = v - c0.get(k, 0)
        if dv > 0:
            by[k[1]] = by.get(k[1], 0) + dv
    print("elapsed %.2f s, %d MiB of output, %.0f MB/s, %.0f MiB on the wire"
          % (el, n * 4, n * 4 * 1.048576 / el, wire / 1048576))
    for name, v in sorted(by.items(), key=lambda x: -x[1])[:12]:
        print("  %-24s %.2f s CPU" % (name, v))


if __name__ == "__main__":
    main()
