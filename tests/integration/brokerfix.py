# brokerfix.py - fixture and clients for the sandbox-broker integration tests (real runtime).
#
# Python 3 stdlib only. Used by tests/integration/test_broker_*.py, which
# tests/run.sh runs once per runtime with SBX_TEST_RUNTIME=docker|podman,
# SBX_RUNTIME_HOST=unix://PATH and SBX_TEST_IMAGE set.
#
# By hand, against runtimes from `tests/harness/runtimes.sh up DIR`:
#   set -a; . DIR/env; set +a
#   SBX_TEST_RUNTIME=docker SBX_RUNTIME_HOST=$SBX_DOCKER_HOST \
#       /usr/bin/python3 tests/integration/test_broker_exec.py [-k NAME]
# (SBX_BUILD or SBX_BROKER_BIN point at another build.)
#
# BrokerTestCase starts one sandbox-broker per test class (temp state dir,
# 0600 canary token file, private unix socket, small limits), and on teardown
# destroys every sandbox the class made through the broker, stops the broker
# and checks through the raw Engine API that nothing labelled
# io.sbx.managed=true is left behind.

import base64
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

import engineapi
from engineapi import API, UnixHTTPConnection  # noqa: F401  (the one AF_UNIX HTTP client)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

CANARY = "canary-broker-token-XYZ123456789"
MANAGED_LABEL = "io.sbx.managed"
ID_LABEL = "io.sbx.id"

MiB = 1024 * 1024


def env_required(name):
    val = os.environ.get(name)
    if not val:
        raise RuntimeError("%s is not set: run this suite through tests/run.sh "
                           "(tests/harness/runtimes.sh up brings the runtimes)" % name)
    return val


def unix_path(url):
    """unix:///p, unix://p or unix:/p -> /p."""
    if url.startswith("unix://"):
        return url[len("unix://"):]
    if url.startswith("unix:"):
        return url[len("unix:"):]
    return url


def broker_binary():
    build = os.environ.get("SBX_BUILD", os.path.join(REPO, "build", "out"))
    path = os.environ.get("SBX_BROKER_BIN", os.path.join(build, "sandbox-broker"))
    if not os.access(path, os.X_OK):
        raise RuntimeError("sandbox-broker not found at %s: build it with `make all` "
                           "(or set SBX_BROKER_BIN)" % path)
    return path


def helper_binary():
    build = os.environ.get("SBX_BUILD", os.path.join(REPO, "build", "out"))
    return os.path.join(build, "sbx-helper")


def helper_volume(prefix="sbx-", helper=None):
    """Name of the read-only volume the broker delivers sbx-helper in
    (adr/0009): <prefix>helper-<first 16 hex digits of its sha256>. It is
    shared by every broker on the runtime with that helper, so it outlives
    a test's sandboxes; any other helper volume of the stem is a leftover."""
    import hashlib
    with open(helper or helper_binary(), "rb") as f:
        return "%shelper-%s" % (prefix, hashlib.sha256(f.read()).hexdigest()[:16])


# ---------------------------------------------------------------------------
# HTTP over a unix socket

class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def error_code(self):
        try:
            return self.json()["error"]["code"]
        except Exception:
            return None

    def __repr__(self):
        return "Reply(%d, %r)" % (self.status, self.body[:400])


def qpath(path):
    """Percent-encode a /work path for ?path= (keeps '/', encodes NUL as %00)."""
    return urllib.parse.quote(path, safe="/")


class BrokerClient:
    """Talks to the broker over its unix socket. Every body it receives is
    kept in .seen (bounded) so tests can assert the token never leaks."""

    def __init__(self, sock_path, token, timeout=60):
        self.sock_path = sock_path
        self.token = token
        self.timeout = timeout
        self.seen = []
        self._lock = threading.Lock()

    def _headers(self, token, extra):
        h = {}
        if token is not None:
            h["Authorization"] = "Bearer " + token
        if extra:
            h.update(extra)
        return h

    def _remember(self, headers, body):
        with self._lock:
            self.seen.append(str(headers).encode() + b"\n" + body[:4 * MiB])

    def request(self, method, path, body=None, token=..., headers=None, timeout=None):
        if token is ...:
            token = self.token
        if isinstance(body, (dict, list)) or (body is not None and not isinstance(body, (bytes, bytearray))):
            body = json.dumps(body).encode()
            headers = dict(headers or {})
            headers.setdefault("Content-Type", "application/json")
        conn = UnixHTTPConnection(self.sock_path, timeout or self.timeout)
        try:
            try:
                conn.request(method, path, body=body, headers=self._headers(token, headers))
                r = conn.getresponse()
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer (413, 401...) and close before it has
                # read the whole body: read the answer it sent.
                if conn.sock is None:
                    raise
                r = http.client.HTTPResponse(conn.sock, method=method)
                r.begin()
            data = r.read()
            self._remember(r.getheaders(), data)
            return Reply(r.status, dict((k.lower(), v) for k, v in r.getheaders()), data)
        finally:
            conn.close()

    # --- API operations (SPEC §4) ---
    def ensure(self, sid, egress=False, image=None, body=None, **kw):
        if body is None:
            body = {"egress": egress}
            if image is not None:
                body["image"] = image
        return self.request("PUT", "/v1/sandboxes/" + sid, body, **kw)

    def status(self, sid, **kw):
        return self.request("GET", "/v1/sandboxes/" + sid, **kw)

    def sandboxes(self, **kw):
        return self.request("GET", "/v1/sandboxes", **kw)

    def stop(self, sid, **kw):
        return self.request("POST", "/v1/sandboxes/%s/stop" % sid, b"", **kw)

    def destroy(self, sid, **kw):
        return self.request("DELETE", "/v1/sandboxes/" + sid, **kw)

    def read(self, sid, path, **kw):
        return self.request("GET", "/v1/sandboxes/%s/files?path=%s" % (sid, qpath(path)), **kw)

    def write(self, sid, path, data, mode=None, **kw):
        q = "path=" + qpath(path)
        if mode is not None:
            q += "&mode=" + mode
        return self.request("PUT", "/v1/sandboxes/%s/files?%s" % (sid, q), bytes(data),
                            headers={"Content-Type": "application/octet-stream"}, **kw)

    def list(self, sid, path, **kw):
        return self.request("GET", "/v1/sandboxes/%s/list?path=%s" % (sid, qpath(path)), **kw)

    def health(self, **kw):
        return self.request("GET", "/v1/health", **kw)

    def metrics(self, **kw):
        return self.request("GET", "/metrics", **kw)

    # --- exec ---
    def exec_open(self, sid, argv, timeout_ms=None, extra=None, body=None, timeout=None):
        """Starts an exec and returns (conn, response) with the response
        headers read. The caller reads and closes (see ExecStream)."""
        if body is None:
            body = {"argv": argv}
            if timeout_ms is not None:
                body["timeout_ms"] = timeout_ms
            if extra:
                body.update(extra)
        raw = json.dumps(body).encode()
        conn = UnixHTTPConnection(self.sock_path, timeout or self.timeout)
        conn.request("POST", "/v1/sandboxes/%s/exec" % sid, body=raw,
                     headers=self._headers(self.token, {"Content-Type": "application/json"}))
        r = conn.getresponse()
        return conn, r

    def exec(self, sid, argv, timeout_ms=None, extra=None, body=None, timeout=None):
        """Runs an exec to its end; returns an ExecResult (raises if not 200)."""
        conn, r = self.exec_open(sid, argv, timeout_ms, extra, body, timeout)
        try:
            if r.status != 200:
                data = r.read()
                self._remember(r.getheaders(), data)
                raise AssertionError("exec %r -> %d %r" % (argv, r.status, data[:400]))
            res = ExecResult()
            buf = b""
            while True:
                data = r.read1(1 << 20)
                if not data:
                    break
                buf += data
                if b"\n" not in data:
                    continue
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    res.feed_line(line + b"\n")
            if buf:
                res.feed_line(buf)  # fails: a line without its newline
            with self._lock:
                self.seen.append(bytes(res.raw_head))
            return res
        finally:
            conn.close()

    def sh(self, sid, script, timeout_ms=None):
        return self.exec(sid, ["sh", "-c", script], timeout_ms=timeout_ms)


EVENT_TYPES = ("start", "stdout", "stderr", "exit", "error", "quota")  # quota: adr/0057


class ExecResult:
    """Decoded NDJSON exec events: .events (list of dicts, data decoded
    into "bytes"), .out/.err (exact bytes per stream), .exit, .error."""

    def __init__(self):
        self.events = []
        self.out = bytearray()
        self.err = bytearray()
        self.exit = None
        self.error = None
        self.raw_bytes = 0
        self.raw_head = bytearray()  # the first 256 KiB of raw lines, for leak checks

    def feed_line(self, line):
        self.raw_bytes += len(line)
        if len(self.raw_head) < 256 * 1024:
            self.raw_head += line[:256 * 1024]
        if not line.endswith(b"\n"):
            raise AssertionError("NDJSON line without its newline: %r" % line[:200])
        ev = json.loads(line.decode("utf-8"))
        if not isinstance(ev, dict) or ev.get("type") not in EVENT_TYPES:
            raise AssertionError("bad exec event %r" % (line[:200],))
        t = ev["type"]
        if t in ("stdout", "stderr"):
            if ("data" in ev) == ("data_b64" in ev):
                raise AssertionError("output event needs exactly one of data/data_b64: %r"
                                     % line[:200])
            if "data" in ev:
                b = ev["data"].encode("utf-8")  # strict: a lone surrogate fails here
            else:
                b = base64.b64decode(ev["data_b64"], validate=True)
            ev = {"type": t, "bytes": b}
            (self.out if t == "stdout" else self.err).extend(b)
        elif t == "exit":
            self.exit = ev
        elif t == "error":
            self.error = ev
        self.events.append(ev)
        return ev

    def types(self):
        """Event types with consecutive output events of one stream merged."""
        out = []
        for e in self.events:
            if out and out[-1] == e["type"] and e["type"] in ("stdout", "stderr"):
                continue
            out.append(e["type"])
        return out

    @property
    def code(self):
        return None if self.exit is None else self.exit.get("code")

    def __repr__(self):
        return "ExecResult(types=%r, exit=%r, error=%r, out=%r, err=%r)" % (
            self.types(), self.exit, self.error, bytes(self.out[:300]), bytes(self.err[:300]))


class ExecStream:
    """An exec read by hand: slowly, in chunks, or abandoned midway."""

    def __init__(self, client, sid, argv, timeout_ms=None):
        self.conn, self.resp = client.exec_open(sid, argv, timeout_ms)
        self.buf = b""
        self.result = ExecResult()
        self.bytes_read = 0

    def read_chunk(self, n=65536):
        """Reads up to n raw bytes of the stream; returns how many (0 = end)."""
        data = self.resp.read1(n) if hasattr(self.resp, "read1") else self.resp.read(n)
        self.bytes_read += len(data)
        return len(data)

    def read_event(self):
        """Reads and decodes the next event line (None at the end)."""
        line = self.resp.readline()
        if not line:
            return None
        return self.result.feed_line(line)

    def wait_for(self, etype, limit=100):
        for _ in range(limit):
            ev = self.read_event()
            if ev is None:
                raise AssertionError("stream ended before a %r event: %r" % (etype, self.result))
            if ev["type"] == etype:
                return ev
        raise AssertionError("no %r event in %d events" % (etype, limit))

    def close(self):
        try:
            self.resp.close()
        finally:
            self.conn.hard_close()


# ---------------------------------------------------------------------------
# Raw Engine API (Docker and Podman's compat API), for checking the runtime.

class Engine(engineapi.Engine):
    """The one Engine API client (engineapi.Engine) plus the broker's labels."""

    def containers_of(self, sid):
        return self.containers("%s=%s" % (ID_LABEL, sid))

    def volumes_of(self, sid):
        return self.volumes("%s=%s" % (ID_LABEL, sid))

    def managed_leftovers(self):
        """Managed containers and volumes, except the current helper volume."""
        keep = helper_volume()
        return (self.containers(MANAGED_LABEL + "=true"),
                [v for v in self.volumes(MANAGED_LABEL + "=true") if v.get("Name") != keep])

    def managed_networks(self):
        """Networks labelled io.sbx.managed=true (the egress networks, ADR 0014)."""
        return self.fetch("GET", "/networks", params={
            "filters": json.dumps({"label": [MANAGED_LABEL + "=true"]})})[1] or []


# ---------------------------------------------------------------------------
# The broker process

# Limits the tests rely on, by meaning. write_config() maps them to the
# broker's config keys (broker/broker_config.c, docs/broker.md).
DEFAULT_LIMITS = {
    "output_cap": 2 * MiB,         # bytes of exec output per exec
    "exec_timeout_max_ms": 60000,  # exec timeout ceiling
    "memory": 64 * MiB,            # bytes
    "pids": 64,
    "cpus": 1.0,
    "tmp_size": 16 * MiB,
    "file_cap": 16 * MiB,
    "max_execs": 16,               # concurrent execs per sandbox
    "max_sandboxes": 40,
}


def write_config(path, limits):
    """Writes the broker's JSON config file (keys: broker/broker_config.c)."""
    cfg = {
        "output_cap": limits["output_cap"],
        "exec_timeout": min(30000, limits["exec_timeout_max_ms"]),
        "exec_timeout_max": limits["exec_timeout_max_ms"],
        "memory": limits["memory"],
        "pids": limits["pids"],
        "cpus": str(limits["cpus"]),
        "tmp_size": limits["tmp_size"],
        "file_size_max": limits["file_cap"],
        "max_execs_per_sandbox": limits["max_execs"],
        "max_sandboxes": limits["max_sandboxes"],
        "log_level": "debug",
        # the idle reaper is not under test here: keep it out of the way
        "idle_timeout": 3600000,
        "reap_interval": 3600000,
    }
    # Bounded file operations (adr/0013): only when a suite sets them.
    for key, name in (("file_timeout_ms", "file_timeout"), ("list_max_entries", "list_max_entries"),
                      ("max_file_ops", "max_file_ops_per_sandbox"),
                      ("egress_proxy_resolver", "egress_proxy_resolver"),
                      ("egress_stats_interval", "egress_stats_interval"),
                      ("idle_timeout_ms", "idle_timeout"), ("reap_interval_ms", "reap_interval"),
                      ("shutdown_grace_ms", "shutdown_grace"),
                      ("warm_pool", "warm_pool")):
        if key in limits:
            cfg[name] = limits[key]
    # The agent's channel (adr/0066): a suite's own choice, else the run's
    # (SBX_TEST_AGENT_CHANNEL=runtime|direct: test_agent_runtime.py), else
    # the broker's default (direct).
    chan = limits.get("agent_channel") or os.environ.get("SBX_TEST_AGENT_CHANNEL")
    if chan:
        cfg["agent_channel"] = chan
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)


class Broker:
    """One sandbox-broker process with its own temp dir, token and socket."""

    def __init__(self, runtime_sock, image, limits=None, token=CANARY, name="broker"):
        self.bin = broker_binary()
        self.dir = tempfile.mkdtemp(prefix="sbx-bt-%s-" % name)
        os.chmod(self.dir, 0o700)
        self.state_dir = os.path.join(self.dir, "state")
        os.mkdir(self.state_dir, 0o700)
        self.sock = os.path.join(self.dir, "broker.sock")
        self.token_file = os.path.join(self.dir, "token")
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (token + "\n").encode())
        os.close(fd)
        self.config = os.path.join(self.dir, "broker.conf")
        self.limits = dict(DEFAULT_LIMITS)
        self.limits.update(limits or {})
        write_config(self.config, self.limits)
        self.log = os.path.join(self.dir, "broker.log")
        self.runtime_sock = runtime_sock
        self.image = image
        self.token = token
        self.proc = None

    def argv(self):
        return [self.bin,
                "--listen", "unix:" + self.sock,
                "--runtime", "unix:" + self.runtime_sock,
                "--token-file", self.token_file,
                "--state-dir", self.state_dir,
                "--image", self.image,
                "--config", self.config]

    def start(self, wait=30):
        env = dict(os.environ)
        env.pop("SBX_BROKER_TOKEN", None)
        env.pop("DOCKER_HOST", None)
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=self.logf, stderr=self.logf, env=env)
        # Ready = the server answers HTTP (without a token: 401), whatever
        # the runtime does.
        client = BrokerClient(self.sock, None, timeout=10)
        deadline = time.monotonic() + wait
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("sandbox-broker exited with %d at start:\n%s"
                                   % (self.proc.returncode, self.log_text()[-3000:]))
            if os.path.exists(self.sock):
                try:
                    r = client.health()
                    if r.status != 401:
                        raise RuntimeError("unauthenticated /v1/health answered %r" % r)
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError("sandbox-broker did not answer on %s within %ds:\n%s"
                                   % (self.sock, wait, self.log_text()[-3000:]))
            time.sleep(0.05)

    def client(self, timeout=30):
        return BrokerClient(self.sock, self.token, timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS for the broker")

    def stop(self):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.logf.close()
        return self.proc.returncode

    def log_text(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class BrokerTestCase(unittest.TestCase):
    """Base class: one broker per test class. Subclasses may set `limits`
    (overrides of DEFAULT_LIMITS). Use self.new_id() for every sandbox id so
    teardown destroys it."""

    limits = None
    via_relay = False  # True: the broker reaches the runtime through cls.relay (SocketRelay)
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.runtime = env_required("SBX_TEST_RUNTIME")
        cls.runtime_sock = unix_path(env_required("SBX_RUNTIME_HOST"))
        cls.image = env_required("SBX_TEST_IMAGE")
        cls.engine = Engine(cls.runtime_sock)
        cls.ids = []
        cls.brokers = []
        cls.broker = None
        try:
            cls.broker = cls.start_broker(cls.limits)
            cls.client = cls.broker.client()
            cls.setUpSandboxes()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def setUpSandboxes(cls):
        pass

    @classmethod
    def start_broker(cls, limits=None, runtime_sock=None, name=None):
        if runtime_sock is None and cls.via_relay:
            if getattr(cls, "relay", None) is None:
                cls.relay_dir = tempfile.mkdtemp(prefix="sbx-bt-relay-")
                cls.relay = SocketRelay(os.path.join(cls.relay_dir, "runtime.sock"),
                                        cls.runtime_sock)
                cls.relay.start()
            runtime_sock = cls.relay.path
        b = Broker(runtime_sock or cls.runtime_sock, cls.image, limits,
                   name=name or cls.__name__)
        cls.brokers.append(b)
        b.start()
        return b

    @classmethod
    def new_id(cls, stem="t"):
        sid = "%s-%s" % (stem, secrets.token_hex(3))
        cls.ids.append(sid)
        return sid

    @classmethod
    def ensure_ok(cls, sid, egress=False, client=None):
        r = (client or cls.client).ensure(sid, egress)
        if r.status != 200:
            raise AssertionError("ensure %s -> %r" % (sid, r))
        return r.json()

    @classmethod
    def tearDownClass(cls):
        problems = []
        b = cls.broker
        relay = getattr(cls, "relay", None)
        if relay is not None and relay.lsock is None:
            relay.start()  # a test took the runtime away: give it back for cleanup
        # Destroy every sandbox through the broker (the one under test).
        if b is not None and b.alive():
            c = b.client(timeout=60)
            for sid in cls.ids:
                try:
                    r = c.destroy(sid)
                    if r.status not in (200, 204, 404):
                        problems.append("destroy %s -> %r" % (sid, r))
                except OSError as e:
                    problems.append("destroy %s: %s" % (sid, e))
        elif b is not None:
            problems.append("broker was not running at teardown (exit %r):\n%s"
                            % (b.proc.returncode if b.proc else None, b.log_text()[-2000:]))
        logs = []
        for br in cls.brokers:
            br.stop()
            logs.append(br.log_text())
        if relay is not None:
            relay.stop()
            shutil.rmtree(cls.relay_dir, ignore_errors=True)
            cls.relay = None
        # Nothing managed may remain; clean it up anyway so the next class starts clean.
        conts, vols = cls.engine.managed_leftovers()
        if conts or vols:
            problems.append("left in the runtime: containers %r volumes %r" % (
                [c.get("Names") for c in conts], [v.get("Name") for v in vols]))
            for c in conts:
                cls.engine.remove(c["Id"], ok=None)
            for v in vols:
                cls.engine.remove_volume(v["Name"])
        nets = cls.engine.managed_networks()
        if nets:
            problems.append("left in the runtime: networks %r" % [n.get("Name") for n in nets])
            for n in nets:
                cls.engine.fetch("DELETE", "/networks/%s" % n["Id"])
        seen = getattr(cls, "client", None)
        if seen is not None and any(CANARY.encode() in body for body in seen.seen):
            problems.append("the token appears in a response body")
        for i, text in enumerate(logs):
            if CANARY in text:
                problems.append("the token appears in the log of broker %d" % i)
        if problems:
            sys_log = cls.brokers[0].log_text()[-3000:] if cls.brokers else ""
            for br in cls.brokers:
                br.cleanup()
            raise AssertionError("teardown of %s:\n%s\n--- broker log tail ---\n%s"
                                 % (cls.__name__, "\n".join(problems), sys_log))
        for br in cls.brokers:
            br.cleanup()

    # --- assertion helpers ---
    def assertError(self, reply, status, code):
        self.assertEqual(reply.status, status, reply)
        try:
            body = reply.json()
        except ValueError:
            self.fail("error reply is not the JSON error object of SPEC §4: %r" % reply)
        self.assertIsInstance(body.get("error"), dict, reply)
        self.assertEqual(body["error"].get("code"), code, reply)
        self.assertIsInstance(body["error"].get("message"), str, reply)
        self.assertTrue(body["error"]["message"], reply)

    def assertExecOrder(self, res):
        """start first, exit (or error) last, nothing after."""
        t = res.types()
        self.assertEqual(t[0], "start", res)
        self.assertIn(t[-1], ("exit", "error"), res)
        self.assertLessEqual(t.count("exit"), 1, res)


def wait_until(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            return v
        time.sleep(step)


class SocketRelay:
    """A unix-socket relay in front of the runtime socket, to take the
    runtime away from a broker (stop) and give it back (start)."""

    def __init__(self, path, upstream):
        self.path = path
        self.upstream = upstream
        self.lsock = None
        self.conns = []
        self.lock = threading.Lock()
        self.thread = None
        self.total = 0       # connections relayed since start
        self.active = 0      # relayed connections open now
        self.max_active = 0  # most open at once since reset_max()

    def start(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lsock.bind(self.path)
        self.lsock.listen(64)
        self.thread = threading.Thread(target=self._accept, args=(self.lsock,), daemon=True)
        self.thread.start()

    def _accept(self, lsock):
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                u.connect(self.upstream)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
                self.total += 1
                self.active += 1
                self.max_active = max(self.max_active, self.active)
            done = [2]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b, done), daemon=True).start()

    def reset_max(self):
        with self.lock:
            self.max_active = self.active
            return self.active

    def _pump(self, a, b, done):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        with self.lock:
            done[0] -= 1
            if done[0] == 0:
                self.active -= 1
                for s in (a, b):
                    if s in self.conns:
                        self.conns.remove(s)
                    s.close()

    def stop(self):
        """Closes the listener and every relayed connection; the socket path goes away."""
        if self.lsock is not None:
            try:
                self.lsock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.lsock.close()
            self.lsock = None
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
        if self.thread is not None:
            self.thread.join(5)
