#!/usr/bin/env python3
"""measure_agent.py - adr/0025's figures: how the broker reaches a sandbox's agent.

Per runtime socket (argv: unix socket paths), with the helper bind-mounted
read-only from BUILD (default build/out) into a busybox test container:
  * raw Engine API exec of `true` (create, start with Upgrade, read to EOF, inspect);
  * agent start by one runtime exec (create + hijacked start until HELLO);
  * exec `true` round trip through the agent channel of that exec;
  * PING round trip on the channel;
  * the same agent as the container's main process reached through
    POST /containers/{id}/attach (OpenStdin), its exec `true` round trip,
    and what restarting it costs (a container restart).
Prints medians and p99 in ms. Not a test: numbers for the ADR.
"""
import json, os, socket, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agentproto import *

BUILD = os.environ.get("BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build", "out"))
BUILD = os.path.abspath(BUILD)
IMAGE = os.environ.get("SBX_TEST_IMAGE", "sbx-test:latest")
N = int(os.environ.get("N", "30"))


def conn(sock):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    return s


def http(sock, method, path, body=None, upgrade=False):
    s = conn(sock)
    data = json.dumps(body).encode() if body is not None else b""
    hdr = "%s /v1.41%s HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (method, path, len(data))
    hdr += "Connection: Upgrade\r\nUpgrade: tcp\r\n" if upgrade else "Connection: close\r\n"
    s.sendall(hdr.encode() + b"\r\n" + data)
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(65536)
        if not c:
            break
        buf += c
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    if upgrade:
        return status, s, rest
    while True:
        c = s.recv(65536)
        if not c:
            break
        rest += c
    s.close()
    if b"chunked" in head.lower():
        out, r = b"", rest
        while r:
            line, _, r = r.partition(b"\r\n")
            n = int(line, 16)
            if n == 0:
                break
            out += r[:n]
            r = r[n + 2:]
        rest = out
    return status, (json.loads(rest) if rest.strip() else None), None


def ms(f):
    t = time.perf_counter()
    r = f()
    return (time.perf_counter() - t) * 1000, r


def summary(xs):
    xs = sorted(xs)
    return "p50 %.2f ms, p99 %.2f ms (n=%d)" % (statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))], len(xs))


def raw_exec(sock, cid):
    st, b, _ = http(sock, "POST", "/containers/%s/exec" % cid, {"AttachStdout": True, "AttachStderr": True, "Cmd": ["true"], "User": "1000:1000"})
    eid = b["Id"]
    st, s, rest = http(sock, "POST", "/exec/%s/start" % eid, {"Detach": False, "Tty": False}, upgrade=True)
    while s.recv(65536):
        pass
    s.close()
    while True:
        st, b, _ = http(sock, "GET", "/exec/%s/json" % eid)
        if not b["Running"]:
            return b["ExitCode"]
        time.sleep(0.002)


class Chan:
    def __init__(self, s, rest, mux):
        self.s, self.mux, self.d, self.r8 = s, mux, Decoder(), Runtime8()
        self.pending = [] 
        self.sid = 0
        self.frames = []
        if rest:
            self.push(rest)

    def push(self, data):
        if self.mux:
            data = self.r8.feed(data).get(1, b"")
        self.frames += self.d.feed(data)

    def until(self, pred):
        while True:
            for i, f in enumerate(self.frames):
                if pred(f):
                    del self.frames[:i + 1]
                    return f
            c = self.s.recv(65536)
            if not c:
                raise EOFError("channel closed")
            self.push(c)

    def exec_true(self):
        self.sid += 1
        sid = self.sid
        self.s.sendall(open_frame(sid, ["exec", "--framed", "--id", "m%d" % sid, "--", "true"]))
        f = self.until(lambda f: f[0] in (T_EXIT, T_REFUSE) and f[2] == sid)
        assert f[0] == T_EXIT and f[3] == b"\x01\x00\x00\x00", f

    def ping(self):
        self.s.sendall(frame(T_PING, 0, b"abcdefgh"))
        self.until(lambda f: f[0] == T_PONG)


def start_agent_exec(sock, cid):
    st, b, _ = http(sock, "POST", "/containers/%s/exec" % cid, {"AttachStdin": True, "AttachStdout": True, "AttachStderr": True, "Tty": False, "Cmd": ["/.sbx/sbx-helper", "agent", "--idle-ms", "60000"], "User": "1000:1000", "WorkingDir": "/work"})
    st, s, rest = http(sock, "POST", "/exec/%s/start" % b["Id"], {"Detach": False, "Tty": False}, upgrade=True)
    assert st in (101, 200), st
    ch = Chan(s, rest, True)
    ch.until(lambda f: f[0] == T_HELLO)
    return ch


def container(sock, name, cmd, stdin=False):
    http(sock, "DELETE", "/containers/%s?force=1" % name)
    body = {"Image": IMAGE, "Cmd": cmd, "User": "1000:1000", "WorkingDir": "/work",
            "OpenStdin": stdin, "StdinOnce": False, "AttachStdin": stdin, "AttachStdout": stdin, "AttachStderr": stdin,
            "HostConfig": {"Binds": ["%s:/.sbx:ro" % BUILD], "Init": True, "NetworkMode": "none",
                           "Tmpfs": {"/run/sbx": "size=1m,mode=1777", "/work": "mode=1777"}}}
    st, b, _ = http(sock, "POST", "/containers/create?name=%s" % name, body)
    assert st == 201, (st, b)
    return b["Id"]


def main():
    for sock in sys.argv[1:]:
        print("== %s" % sock)
        cid = container(sock, "agent-measure", ["/.sbx/sbx-helper", "idle"])
        http(sock, "POST", "/containers/%s/start" % cid)
        raw_exec(sock, cid)
        raws = [ms(lambda: raw_exec(sock, cid))[0] for _ in range(N)]
        print("raw Engine API exec true:", summary(raws))
        starts, chans = [], []
        for _ in range(5):
            t, ch = ms(lambda: start_agent_exec(sock, cid))
            starts.append(t)
            chans.append(ch)
        for ch in chans[:-1]:
            ch.s.close()
        print("agent start by runtime exec (create + start until HELLO):", summary(starts))
        ch = chans[-1]
        ch.exec_true()
        print("exec true through the agent (exec channel):", summary([ms(ch.exec_true)[0] for _ in range(N * 10)]))
        print("PING round trip (exec channel):", summary([ms(ch.ping)[0] for _ in range(N * 10)]))
        ch.s.close()
        # The container's main process reached through attach.
        cid2 = container(sock, "agent-measure-attach", ["/.sbx/sbx-helper", "agent"], stdin=True)
        st, s, rest = http(sock, "POST", "/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1" % cid2, upgrade=True)
        assert st in (101, 200), st
        t0 = time.perf_counter()
        http(sock, "POST", "/containers/%s/start" % cid2)
        ach = Chan(s, rest, True)
        ach.until(lambda f: f[0] == T_HELLO)
        print("agent as main process: start + attach until HELLO: %.1f ms" % ((time.perf_counter() - t0) * 1000))
        ach.exec_true()
        print("exec true through the agent (attach channel):", summary([ms(ach.exec_true)[0] for _ in range(N * 10)]))
        s.close()
        t, _ = ms(lambda: http(sock, "POST", "/containers/%s/restart?t=0" % cid2))
        print("restarting it = container restart: %.1f ms (every process in the sandbox dies)" % t)
        http(sock, "DELETE", "/containers/%s?force=1" % cid2)
        http(sock, "DELETE", "/containers/%s?force=1" % cid)


if __name__ == "__main__":
    main()
