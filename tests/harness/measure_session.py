#!/usr/bin/env python3
"""measure_session.py - adr/0049's figures: protocol 4's session modes through one agent on the host.

Starts `sbx-helper agent` (BUILD, default build/out) over a socketpair, no
runtime, and measures from this client:
  * keystroke echo on a terminal: one byte into `pty -- cat`, until it comes back;
  * a resize record until `stty size` run next sees it (resize + newline, until the answer);
  * 64 MiB into `exec --framed -- cat > /dev/null` as stdin within the credit;
  * a request/answer over `connect` to a local TCP echo server (one connection each).
Prints medians and p99 in ms, and MiB/s. Not a test: numbers for the ADR.
"""
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agentproto as ap  # noqa: E402

BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(os.path.dirname(__file__), "..", "..",
                                                             "build", "out")))
N = int(os.environ.get("N", "200"))


class Agent:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-msess-")
        os.mkdir(os.path.join(self.dir, "w"))
        a, b = socket.socketpair()
        self.p = subprocess.Popen([os.path.join(BUILD, "sbx-helper"), "--root",
                                   os.path.join(self.dir, "w"), "--state-dir",
                                   os.path.join(self.dir, "s"), "agent", "--idle-ms", "60000"],
                                  stdin=b.fileno(), stdout=b.fileno())
        b.close()
        self.s, self.dec, self.next = a, ap.Decoder(), 1
        self.st = {}
        self.until(lambda f: f[0] == ap.T_HELLO)

    def until(self, pred):
        while True:
            for f in self.frames():
                if pred(f):
                    return f

    def frames(self):
        c = self.s.recv(1 << 20)
        if not c:
            raise EOFError
        out = self.dec.feed(c)
        for typ, flags, sid, p in out:
            if typ == ap.T_DATA:   # the reader keeps up: credit back at once
                self.s.sendall(ap.frame(ap.T_WINDOW, sid, struct.pack(">I", len(p)), 1))
            if typ == ap.T_WINDOW:
                self.st[sid] = self.st.get(sid, 0) + struct.unpack(">I", p)[0]
        return out

    def open(self, argv, stdin=True, ctrl=False):
        sid = self.next
        self.next += 1
        self.st[sid] = ap.WINDOW
        self.s.sendall(ap.open_frame(sid, argv, (), stdin, ctrl))
        return sid


def summary(xs):
    xs = sorted(xs)
    return "p50 %.3f ms, p99 %.3f ms (n=%d)" % (statistics.median(xs),
                                                xs[min(len(xs) - 1, int(len(xs) * 0.99))], len(xs))


def main():
    ag = Agent()
    # keystroke echo: raw mode cat, so one byte comes back as one byte
    t = ag.open(["pty", "--id", "k1", "--", "sh", "-c", "stty raw -echo; echo R; exec cat"], True, True)
    ag.until(lambda f: f[0] == ap.T_DATA and b"R" in f[3])
    lat = []
    for i in range(N):
        c = bytes([97 + i % 26])
        t0 = time.perf_counter()
        ag.s.sendall(ap.frame(ap.T_DATA, t, c))
        ag.until(lambda f: f[0] == ap.T_DATA and f[2] == t and c in f[3])
        lat.append((time.perf_counter() - t0) * 1000)
    print("keystroke echo through pty + cat:", summary(lat))
    ag.s.sendall(ap.frame(ap.T_CANCEL, t))
    # resize until stty sees it
    t = ag.open(["pty", "--id", "k2", "--", "sh", "-c", "while read x; do stty size; done"],
                True, True)
    lat = []
    for i in range(N // 4):
        cols = 81 + i
        t0 = time.perf_counter()
        ag.s.sendall(ap.resize_frame(t, cols, 40) + ap.frame(ap.T_DATA, t, b"\r"))
        want = b"40 %d\r\n" % cols
        buf = [b""]

        def seen(f):
            if f[0] == ap.T_DATA and f[2] == t:
                buf[0] += f[3]
            return want in buf[0]
        ag.until(seen)
        lat.append((time.perf_counter() - t0) * 1000)
    print("resize, then stty size agrees (incl. a fork of stty):", summary(lat))
    ag.s.sendall(ap.frame(ap.T_CANCEL, t))
    # 64 MiB of stdin into cat > /dev/null
    size = 64 << 20
    x = ag.open(["exec", "--framed", "--id", "big", "--", "sh", "-c", "cat > /dev/null"])
    chunk = os.urandom(65536)
    sent, t0 = 0, time.perf_counter()
    while sent < size:
        while ag.st[x] < len(chunk):
            ag.frames()
        ag.s.sendall(ap.frame(ap.T_DATA, x, chunk))
        ag.st[x] -= len(chunk)
        sent += len(chunk)
    ag.s.sendall(ap.frame(ap.T_EOF, x))
    ag.until(lambda f: f[0] == ap.T_EXIT and f[2] == x)
    dt = time.perf_counter() - t0
    print("64 MiB of stdin into exec cat: %.2f s, %.0f MiB/s" % (dt, 64 / dt))
    # connect round trips to a local echo server
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)

    def serve():
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            d = c.recv(65536)
            c.sendall(d)
            c.close()
    threading.Thread(target=serve, daemon=True).start()
    port = str(ls.getsockname()[1])
    lat = []
    for i in range(N // 4):
        t0 = time.perf_counter()
        c = ag.open(["connect", "--port", port])
        ag.s.sendall(ap.frame(ap.T_DATA, c, b"ping") + ap.frame(ap.T_EOF, c))
        ag.until(lambda f: f[0] == ap.T_EXIT and f[2] == c)
        lat.append((time.perf_counter() - t0) * 1000)
    print("connect: open, request, answer, exit:", summary(lat))
    ls.close()
    ag.s.close()
    ag.p.wait(10)
    subprocess.run(["rm", "-rf", ag.dir])


if __name__ == "__main__":
    main()
