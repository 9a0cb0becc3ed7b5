"""engineapi - the one Engine API client of the Python fixtures (stdlib only).

Every fixture and suite that talks to the runtime's socket (Docker, or Podman's
compat API) goes through this module: sbxtest, brokerfix, stackfix, the
harness scripts and the bench/soak drivers. It also holds the HTTP-over-AF_UNIX
connection the broker and api clients are built on.

  UnixHTTPConnection   http.client over a unix stream socket
  http_request         one request on a connection -> Response
  Engine               Engine API v1.41 (the version the broker speaks,
                       SPEC and broker/driver_engine*.c); works on Docker and Podman
  demux, dechunk       the multiplexed exec stream framing and HTTP chunking

Environment (set by tests/run.sh): SBX_RUNTIME_HOST unix://PATH of the runtime
under test, SBX_TEST_IMAGE the test image.
"""

import http.client
import json
import os
import socket
import struct
import time
import urllib.parse

API = "/v1.41"


def env(name):
    """Return the environment variable NAME; fail the test run if it is unset."""
    v = os.environ.get(name)
    if not v:
        raise RuntimeError("%s is not set: run the suites through tests/run.sh" % name)
    return v


def runtime():
    """The runtime under test: 'docker' or 'podman'."""
    return env("SBX_TEST_RUNTIME")


def runtime_host():
    """unix://PATH of the runtime under test."""
    return env("SBX_RUNTIME_HOST")


def test_image():
    return os.environ.get("SBX_TEST_IMAGE", "sbx-test:latest")


def socket_path(host):
    """unix://PATH or unix:PATH -> PATH."""
    if host.startswith("unix://"):
        return host[len("unix://"):]
    if host.startswith("unix:"):
        return host[len("unix:"):]
    raise ValueError("not a unix socket address: %r" % host)



class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client connection over a unix stream socket."""

    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s

    def hard_close(self):
        """Close the connection at once (the peer sees EOF/RST)."""
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.close()


class APIError(Exception):
    def __init__(self, method, path, status, body):
        super().__init__("%s %s -> %d: %s" % (method, path, status, body[:500]))
        self.status = status
        self.body = body


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body) if self.body else None


def http_request(conn, method, path, body=None, headers=None):
    """One request on CONN (an HTTPConnection); returns a Response.
    BODY: bytes, str, or a JSON-able object (sent as application/json)."""
    hdrs = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    if isinstance(body, str):
        body = body.encode()
    try:
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, r.headers, data)
    finally:
        conn.close()


class Engine:
    """Minimal Docker Engine API (v1.41) client; works on Docker and Podman."""

    def __init__(self, host=None, timeout=60):
        """HOST: unix://PATH, unix:PATH or a plain socket PATH; default
        SBX_RUNTIME_HOST. TIMEOUT: seconds per request."""
        self.host = host or runtime_host()
        self.path = self.host if self.host.startswith("/") else socket_path(self.host)
        self.timeout = timeout

    def conn(self, timeout=None):
        return UnixHTTPConnection(self.path, timeout or self.timeout)

    def request(self, method, path, body=None, headers=None, params=None, timeout=None):
        """Raw request; PATH is relative to /v1.41. Returns a Response."""
        if params:
            path += "?" + urllib.parse.urlencode(params)
        return http_request(self.conn(timeout), method, API + path, body, headers)

    def call(self, method, path, body=None, params=None, ok=(200, 201, 204, 304), timeout=None):
        """Request expecting a status in OK; returns the decoded JSON (or None)."""
        r = self.request(method, path, body=body, params=params, timeout=timeout)
        if r.status not in ok:
            raise APIError(method, path, r.status, r.body.decode(errors="replace"))
        ctype = r.headers.get("Content-Type", "")
        if r.body and "json" in ctype:
            return r.json()
        return r.body

    def fetch(self, method, path, body=None, params=None, timeout=None):
        """Request that never raises on the HTTP status; returns (status, decoded
        JSON, or the raw bytes when the reply is not JSON)."""
        r = self.request(method, path, body=body, params=params, timeout=timeout)
        ctype = r.headers.get("Content-Type", "")
        if r.body.strip() and "json" in ctype:
            return r.status, r.json()
        return r.status, r.body

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.call("POST", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.call("DELETE", path, **kw)

    def version(self):
        return self.get("/version")

    @staticmethod
    def _labels(labels, label):
        return list(labels) + ([label] if label else [])

    def containers(self, *labels, label=None, all=True):
        """List containers, optionally only those with every label given
        ('k' or 'k=v'), positionally or as LABEL."""
        params = {"all": "1" if all else "0"}
        labels = self._labels(labels, label)
        if labels:
            params["filters"] = json.dumps({"label": labels})
        return self.get("/containers/json", params=params)

    def volumes(self, *labels, label=None):
        """List volumes, filtered like containers()."""
        params = {}
        labels = self._labels(labels, label)
        if labels:
            params["filters"] = json.dumps({"label": labels})
        return self.get("/volumes", params=params).get("Volumes") or []

    def inspect(self, cid):
        """Inspect container CID (id or name); None when it does not exist (404)."""
        st, body = self.fetch("GET", "/containers/%s/json" % cid)
        if st == 404:
            return None
        if st != 200:
            raise APIError("GET", "/containers/%s/json" % cid, st, repr(body))
        return body

    def network(self, name):
        """Inspect network NAME; None when it does not exist."""
        st, body = self.fetch("GET", "/networks/%s" % urllib.parse.quote(name, safe=""))
        return body if st == 200 else None

    def create(self, image=None, cmd=None, name=None, user=None, labels=None,
               host_config=None, **extra):
        """Create a container; returns its id. HOST_CONFIG defaults to
        NetworkMode none (no-egress sandboxes use that)."""
        body = {"Image": image or test_image(), "Labels": labels or {},
                "HostConfig": {"NetworkMode": "none"} if host_config is None else host_config}
        if cmd is not None:
            body["Cmd"] = cmd
        if user is not None:
            body["User"] = user
        body.update(extra)
        params = {"name": name} if name else None
        return self.post("/containers/create", body, params=params)["Id"]

    def start(self, cid):
        self.post("/containers/%s/start" % cid)

    def run(self, cmd=("sleep", "3600"), **kw):
        """Create and start a long-running container; returns its id."""
        cid = self.create(cmd=list(cmd), **kw)
        self.start(cid)
        return cid

    def remove(self, cid, volumes=True, ok=(200, 204, 404)):
        """Force-remove a container (no error if it is already gone); returns
        the status. OK=None: never raise (teardown)."""
        path = "/containers/%s" % cid
        st, body = self.fetch("DELETE", path, params={"force": "1", "v": "1" if volumes else "0"})
        if ok is not None and st not in ok:
            raise APIError("DELETE", path, st, repr(body))
        return st

    def remove_volume(self, name):
        """Force-remove volume NAME; returns the status, never raises on it."""
        return self.fetch("DELETE", "/volumes/%s" % name, params={"force": "1"})[0]

    def exec(self, cid, argv, user=None, env=None, workdir=None, stdin=None, timeout=None):
        """Run ARGV in container CID; returns (exit_code, stdout bytes, stderr bytes).
        STDIN: bytes sent then half-closed (needs the raw socket, so it hijacks)."""
        body = {"Cmd": list(argv), "AttachStdout": True, "AttachStderr": True,
                "AttachStdin": stdin is not None, "Tty": False}
        if user is not None:
            body["User"] = user
        if env is not None:
            body["Env"] = ["%s=%s" % kv for kv in env.items()]
        if workdir is not None:
            body["WorkingDir"] = workdir
        eid = self.post("/containers/%s/exec" % cid, body)["Id"]
        raw = self._exec_start(eid, stdin, timeout)
        out, err = demux(raw)
        info = self.get("/exec/%s/json" % eid)
        deadline = time.monotonic() + 10
        while info.get("Running") and time.monotonic() < deadline:
            time.sleep(0.02)
            info = self.get("/exec/%s/json" % eid)
        return info.get("ExitCode"), out, err

    def _exec_start(self, eid, stdin, timeout):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout or self.timeout)
        s.connect(self.path)
        try:
            body = json.dumps({"Detach": False, "Tty": False}).encode()
            req = ("POST %s/exec/%s/start HTTP/1.1\r\nHost: localhost\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n"
                   "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n" % (API, eid, len(body)))
            s.sendall(req.encode() + body)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    raise APIError("POST", "/exec/%s/start" % eid, 0, "connection closed")
                head += chunk
            head, rest = head.split(b"\r\n\r\n", 1)
            status = int(head.split(b" ", 2)[1])
            if status not in (101, 200):
                raise APIError("POST", "/exec/%s/start" % eid, status, (head + rest).decode(errors="replace"))
            if stdin is not None:
                s.sendall(stdin)
                s.shutdown(socket.SHUT_WR)
            chunks = [rest]
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
            data = b"".join(chunks)
            if status == 200 and b"chunked" in head.lower():
                data = dechunk(data)
            return data
        finally:
            s.close()


def demux(raw):
    """Split Engine API multiplexed stream frames (8-byte header: stream, 0,0,0,
    big-endian length) into (stdout, stderr)."""
    out, err, i = [], [], 0
    while i + 8 <= len(raw):
        stream, length = raw[i], struct.unpack(">I", raw[i + 4:i + 8])[0]
        payload = raw[i + 8:i + 8 + length]
        (err if stream == 2 else out).append(payload)
        i += 8 + length
    return b"".join(out), b"".join(err)


def dechunk(data):
    out, i = [], 0
    while True:
        j = data.find(b"\r\n", i)
        if j < 0:
            break
        n = int(data[i:j].split(b";")[0], 16)
        if n == 0:
            break
        out.append(data[j + 2:j + 2 + n])
        i = j + 2 + n + 2
    return b"".join(out)
