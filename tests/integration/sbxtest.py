"""sbxtest - shared helpers for the integration suites (stdlib only).

The suites run once per runtime; tests/run.sh sets, from tests/harness/runtimes.sh:
  SBX_TEST_RUNTIME    docker | podman (the runtime under test)
  SBX_RUNTIME_HOST    unix://... Engine API socket of that runtime
  DOCKER_HOST         same as SBX_RUNTIME_HOST (for the docker CLI)
  SBX_DOCKER_HOST, SBX_PODMAN_HOST   both sockets
  SBX_TEST_IMAGE      sbx-test:latest (busybox-static rootfs, user sbx 1000:1000,
                      /work owned by it, /.sbx mount point, PATH=/bin:/usr/bin)
  SBX_TEST_IMAGE_TAR  that rootfs as a tar (to import elsewhere)
  SBX_DOCKER_CLI, SBX_PODMAN_CLI     /usr/bin/docker, /usr/bin/podman
  CONTAINERS_CONF, CONTAINERS_STORAGE_CONF  make the podman CLI use the private service's storage
  SBX_RUNTIMES_DIR, SBX_RUNTIMES_RUN  the fixture's directories
  SBX_TEST_OUT        a directory for this suite's scratch files (under tests/out)
Everything here speaks the Engine API v1.41 over the unix socket, as the broker does.
A suite that needs no runtime puts a line `SBX_ONCE = True` at module level: tests/run.sh
then runs it once instead of once per runtime.
"""

import contextlib
import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import unittest
import urllib.parse

API = "/v1.41"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SBX_BUILD", os.path.join(REPO, "build", "out"))
LABEL_MANAGED = "io.sbx.managed"
LABEL_ID = "io.sbx.id"


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
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


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
        self.host = host or runtime_host()
        self.path = socket_path(self.host)
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

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.call("POST", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.call("DELETE", path, **kw)

    def version(self):
        return self.get("/version")

    def containers(self, label=None, all=True):
        """List containers, optionally only those with LABEL ('k' or 'k=v')."""
        params = {"all": "1" if all else "0"}
        if label:
            params["filters"] = json.dumps({"label": [label]})
        return self.get("/containers/json", params=params)

    def volumes(self, label=None):
        params = {}
        if label:
            params["filters"] = json.dumps({"label": [label]})
        return self.get("/volumes", params=params).get("Volumes") or []

    def inspect(self, cid):
        return self.get("/containers/%s/json" % cid)

    def create(self, image=None, cmd=None, name=None, user=None, labels=None,
               host_config=None, **extra):
        """Create a container; returns its id. HOST_CONFIG defaults to
        NetworkMode none (no-egress sandboxes use that)."""
        body = {"Image": image or test_image(), "Labels": labels or {},
                "HostConfig": host_config or {"NetworkMode": "none"}}
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

    def remove(self, cid, volumes=True):
        """Force-remove a container (no error if it is already gone)."""
        self.call("DELETE", "/containers/%s" % cid,
                  params={"force": "1", "v": "1" if volumes else "0"}, ok=(200, 204, 404))

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


# ------------------------------------------------------------ processes

def out_dir():
    """Scratch directory for this suite run (created)."""
    d = os.environ.get("SBX_TEST_OUT") or os.path.join(REPO, "tests", "out", "scratch")
    os.makedirs(d, exist_ok=True)
    return d


@contextlib.contextmanager
def tmpdir(prefix="sbx-"):
    """A fresh directory under out_dir(), removed afterwards. Keep unix socket
    paths short: prefer tempfile.mkdtemp(dir='/tmp') for sockets."""
    d = tempfile.mkdtemp(prefix=prefix, dir=out_dir())
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def short_tmpdir(prefix="sbx-"):
    """A fresh short directory in /tmp (for unix sockets); caller removes it
    (use TestCase.addCleanup(shutil.rmtree, d, True))."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


class Process:
    """A started child process with its output in a log file."""

    def __init__(self, argv, env=None, log_path=None, cwd=None):
        self.argv = list(argv)
        self.log_path = log_path or tempfile.mktemp(prefix="proc-", suffix=".log", dir=out_dir())
        self.log = open(self.log_path, "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                                     start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def output(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=15, timeout=10):
        """Signal the process (SIGTERM default), SIGKILL after TIMEOUT s; returns exit status."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def wait(self, timeout=None):
        return self.proc.wait(timeout)


def start_process(argv, env=None, log_path=None, cwd=None):
    """Start ARGV (own session, stdout+stderr to a log file); returns a Process.
    The caller stops it (TestCase.addCleanup(p.stop))."""
    return Process(argv, env, log_path, cwd)


def wait_until(pred, timeout=10.0, what="condition", proc=None, interval=0.01):
    """Poll PRED until true; raise AssertionError naming WHAT after TIMEOUT s,
    or as soon as PROC (a Process) has exited, with its output."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return
        if proc is not None and not proc.alive():
            raise AssertionError("%s: process exited (%s) before %s; output:\n%s"
                                 % (proc.argv[0], proc.proc.returncode, what, proc.output()[-4000:]))
        if time.monotonic() > deadline:
            extra = "; output:\n" + proc.output()[-4000:] if proc is not None else ""
            raise AssertionError("timed out after %.1fs waiting for %s%s" % (timeout, what, extra))
        time.sleep(interval)


def _unix_connects(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def wait_for_unix_socket(path, timeout=10.0, proc=None):
    """Wait until a unix stream socket at PATH accepts connections."""
    wait_until(lambda: _unix_connects(path), timeout, "unix socket %s" % path, proc)


def _tcp_connects(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_for_tcp(host, port, timeout=10.0, proc=None):
    """Wait until HOST:PORT accepts TCP connections."""
    wait_until(lambda: _tcp_connects(host, port), timeout, "tcp %s:%d" % (host, port), proc)


def unix_http(path, method, url, body=None, headers=None, timeout=30):
    """One HTTP request over the unix socket PATH; returns a Response."""
    return http_request(UnixHTTPConnection(path, timeout), method, url, body, headers)


def tcp_http(host, port, method, url, body=None, headers=None, timeout=30):
    """One HTTP request over TCP; returns a Response."""
    return http_request(http.client.HTTPConnection(host, port, timeout=timeout),
                        method, url, body, headers)


class EngineTestCase(unittest.TestCase):
    """Base class: self.engine for the runtime under test; containers made with
    self.run_container() are removed after each test."""

    @classmethod
    def setUpClass(cls):
        cls.engine = Engine()

    def run_container(self, cmd=("sleep", "3600"), **kw):
        cid = self.engine.run(cmd, **kw)
        self.addCleanup(self.engine.remove, cid)
        return cid
