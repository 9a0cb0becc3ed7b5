"""kf_engine - what the test kubelet asks of the container runtime (Engine API v1.41).

Built on tests/integration/engineapi.py (the fixtures' one Engine API client):
volumes, containers of a pod, the runtime-side translation of a container spec,
and the hijacked exec/attach streams (their 8-byte multiplexed frames, or raw
bytes with a TTY, possibly inside HTTP chunking on Podman). Touches only the
runtime socket it is given.
"""

import json
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

from engineapi import API, APIError, Engine  # noqa: E402,F401

import kf_net  # noqa: E402


def quantity(text, cpu=False):
    """A Kubernetes quantity -> bytes (memory) or nano-CPUs (cpu)."""
    s = str(text).strip()
    if cpu:
        if s.endswith("m"):
            return int(float(s[:-1]) * 1e6)
        return int(float(s) * 1e9)
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for u in sorted(units, key=len, reverse=True):
        if s.endswith(u):
            return int(float(s[:-len(u)]) * units[u])
    return int(float(s))


class Stream:
    """A hijacked exec/attach connection: write() stdin, read() -> list of
    (stream 1|2, bytes), b"" list and .eof at the end."""

    def __init__(self, sock, tty, chunked, rest):
        self.sock, self.tty = sock, tty
        self.dechunk = kf_net.Dechunker() if chunked else None
        self.buf = bytearray()
        self.eof = False
        self.pending = self._parse(rest)

    def _parse(self, data):
        if self.dechunk:
            data = self.dechunk.feed(data)
        if self.tty:
            return [(1, data)] if data else []
        self.buf += data
        out = []
        while len(self.buf) >= 8:
            stream, n = self.buf[0], struct.unpack(">I", bytes(self.buf[4:8]))[0]
            if len(self.buf) < 8 + n:
                break
            out.append((2 if stream == 2 else 1, bytes(self.buf[8:8 + n])))
            del self.buf[:8 + n]
        return out

    def read(self):
        """Non-blocking: frames ready now (maybe none); sets .eof at the end."""
        out, self.pending = self.pending, []
        data = kf_net.recv_some(self.sock)
        if data is None:
            return out
        if not data:
            self.eof = True
            return out
        return out + self._parse(data)

    def write(self, data):
        return kf_net.send_all(self.sock, data)

    def close(self):
        kf_net.shutdown(self.sock)


class Runtime:
    def __init__(self, host):
        self.engine = Engine(host, timeout=120)
        self.path = self.engine.path

    def hijack(self, path, body, tty):
        """POST PATH (Upgrade: tcp) and return a Stream."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self.path)
        data = json.dumps(body).encode() if body is not None else b""
        req = ("POST %s%s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n" % (API, path, len(data)))
        s.sendall(req.encode() + data)
        head, rest = kf_net.read_head(s)
        status, hdrs = kf_net.parse_head(head)
        if status not in (101, 200):
            s.close()
            raise APIError("POST", path, status, rest.decode(errors="replace"))
        s.settimeout(None)
        s.setblocking(False)
        return Stream(s, tty, "chunked" in hdrs.get("transfer-encoding", "").lower(), rest)

    def exec_start(self, cid, cmd, stdin, tty, env=None, user=None):
        """-> (exec id, Stream)."""
        body = {"Cmd": list(cmd), "AttachStdin": bool(stdin), "AttachStdout": True,
                "AttachStderr": True, "Tty": bool(tty)}
        if user:
            body["User"] = user
        eid = self.engine.post("/containers/%s/exec" % cid, body)["Id"]
        return eid, self.hijack("/exec/%s/start" % eid, {"Detach": False, "Tty": bool(tty)}, tty)

    def exec_exit(self, eid, tries=200):
        """The exit code of a finished exec (None if it still runs after ~10 s)."""
        for _ in range(tries):
            info = self.engine.get("/exec/%s/json" % eid)
            if not info.get("Running"):
                return info.get("ExitCode")
            time.sleep(0.05)
        return None

    def exec_resize(self, eid, width, height):
        self.engine.fetch("POST", "/exec/%s/resize" % eid, params={"h": int(height), "w": int(width)})

    def attach(self, cid, stdin, tty):
        q = "stream=1&stdout=1&stderr=1&stdin=%d" % (1 if stdin else 0)
        return self.hijack("/containers/%s/attach?%s" % (cid, q), None, tty)

    def volume(self, name, labels):
        """Create volume NAME if missing; True when it was created now."""
        st, _ = self.engine.fetch("GET", "/volumes/%s" % name)
        if st == 200:
            return False
        self.engine.post("/volumes/create", {"Name": name, "Labels": labels})
        return True
