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
The Engine API client (Engine, UnixHTTPConnection, http_request...) lives in engineapi.py
and is re-exported here; it speaks the Engine API v1.41 over the unix socket, as the broker does.
A suite that needs no runtime puts a line `SBX_ONCE = True` at module level: tests/run.sh
then runs it once instead of once per runtime, in its lane of such suites; one that runs
once against one fixture runtime names it (`SBX_ONCE = "docker"`) and runs in that
runtime's lane. Suites of different lanes run at the same time (adr/0039): a suite keeps
its files under SBX_TEST_OUT or a mkdtemp directory, binds ports 0, and names what it
makes in the host's namespaces (network namespaces, interfaces) uniquely.
"""

import contextlib
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from engineapi import (API, APIError, Engine, Response, UnixHTTPConnection,  # noqa: F401
                       dechunk, demux, env, http_request, runtime, runtime_host,
                       socket_path, test_image)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SBX_BUILD", os.path.join(REPO, "build", "out"))
LABEL_MANAGED = "io.sbx.managed"
LABEL_ID = "io.sbx.id"


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


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


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
