#!/usr/bin/python3
# test_files_stream.py - file write bodies stream from the client to the helper, at the broker (adr/0018) and through the public api (adr/0030): memory per write bounded, a cut body never replaces the file.

import hashlib
import http.client
import json
import os
import socket
import threading
import time
import unittest
import urllib.parse

import sbxtest
from brokerfix import BrokerTestCase, MiB, qpath
from stackfix import Stack


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for %d" % (key, pid))


class StreamedWritesTest(BrokerTestCase):
    """PUT /files bodies go to the helper as they arrive (adr/0018)."""

    limits = {"file_cap": 64 * MiB, "memory": 256 * MiB, "file_timeout_ms": 3000,
              "max_file_ops": 16}
    TIMEOUT = 3.0
    SIZE = 60 * MiB

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("wstream")
        cls.ensure_ok(cls.sid)
        r = cls.client.sh(cls.sid, "mkdir -p /work/s /work/cut /work/stall")
        assert r.code == 0, r

    def raw_conn(self, path, length):
        """A socket that has sent the head of a PUT of length bytes."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60)
        s.connect(self.client.sock_path)
        s.sendall(("PUT %s HTTP/1.1\r\nHost: sbx\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: %d\r\n\r\n" % (path, self.client.token, length)).encode())
        return s

    def tmp_files(self, d):
        r = self.client.sh(self.sid, "ls -a %s" % d)
        self.assertEqual(r.code, 0, r)
        return [n for n in bytes(r.out).decode().split() if n not in (".", "..", "old")]

    def test_8_concurrent_60_mib_writes_keep_broker_memory_bounded(self):
        pid = self.broker.proc.pid
        # warm up (first-use allocations), then the baseline
        self.assertEqual(self.client.write(self.sid, "/work/s/warm", b"w" * MiB).status, 200)
        time.sleep(0.5)
        rss0 = self.broker.rss_kib()
        fd0 = fd_count(pid)
        bodies = []
        for i in range(8):
            block = os.urandom(MiB)
            bodies.append(bytes([i]) * 7 + block * 60 + b"tail%d" % i)
        bodies = [b[:self.SIZE] for b in bodies]
        peak = [rss0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], self.broker.rss_kib())
                except Exception:
                    pass
                time.sleep(0.01)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        out = {}

        def one(i):
            r = self.client.write(self.sid, "/work/s/f%d" % i, bodies[i], timeout=300)
            out[i] = (r.status, r.body)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        took = time.monotonic() - t0
        done.set()
        sampler.join()
        hwm = status_kib(pid, "VmHWM")
        for i in range(8):
            self.assertIn(i, out)
            self.assertEqual(out[i][0], 200, out[i])
            self.assertEqual(json.loads(out[i][1])["size"], self.SIZE)
        print("8 x 60 MiB writes: %.1f s; broker RSS %d KiB -> sampled peak %d KiB, VmHWM %d KiB"
              % (took, rss0, peak[0], hwm))
        self.assertLess(peak[0] - rss0, 32 * 1024)
        self.assertLess(hwm - rss0, 32 * 1024)
        r = self.client.sh(self.sid, "sha256sum /work/s/f*")
        self.assertEqual(r.code, 0, r)
        got = {}
        for line in bytes(r.out).decode().splitlines():
            h, name = line.split()
            got[name] = h
        for i in range(8):
            self.assertEqual(got.get("/work/s/f%d" % i), hashlib.sha256(bodies[i]).hexdigest(), i)
        deadline = time.monotonic() + 20
        while fd_count(pid) > fd0 + 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertLessEqual(fd_count(pid), fd0 + 2)

    def test_half_a_body_then_gone_leaves_the_old_file(self):
        old = b"old content\n" * 1000
        self.assertEqual(self.client.write(self.sid, "/work/cut/old", old).status, 200)
        path = "/v1/sandboxes/%s/files?path=%s" % (self.sid, qpath("/work/cut/old"))
        for n in (8 * MiB, 40 * MiB):
            s = self.raw_conn(path, n)
            s.sendall(b"N" * (n // 2))
            time.sleep(0.5)
            s.close()
        # cancelled at once: the helper is killed, the temporary file goes
        deadline = time.monotonic() + 15
        while self.tmp_files("/work/cut") and time.monotonic() < deadline:
            time.sleep(0.3)
        self.assertEqual(self.tmp_files("/work/cut"), [])
        r = self.client.read(self.sid, "/work/cut/old")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, old)
        self.assertIn("cancelled", self.broker.log_text())
        # the same connection shape with the whole body still works
        s = self.raw_conn(path, 3 * MiB)
        s.sendall(b"M" * (3 * MiB))
        reply = s.recv(4096)
        s.close()
        self.assertIn(b" 200 ", reply.split(b"\r\n")[0])
        self.assertEqual(self.client.read(self.sid, "/work/cut/old").body, b"M" * (3 * MiB))

    def test_a_stalled_body_ends_within_file_timeout(self):
        pid = self.broker.proc.pid
        self.assertEqual(self.client.write(self.sid, "/work/stall/old", b"keep").status, 200)
        time.sleep(0.3)
        fd0 = fd_count(pid)
        path = "/v1/sandboxes/%s/files?path=%s" % (self.sid, qpath("/work/stall/old"))
        socks = []
        t0 = time.monotonic()
        for _ in range(3):
            s = self.raw_conn(path, 10 * MiB)
            s.sendall(b"S" * (3 * MiB))    # then nothing more
            socks.append(s)
        for s in socks:
            s.settimeout(self.TIMEOUT + 20)
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
            took = time.monotonic() - t0
            head, _, body = reply.partition(b"\r\n\r\n")
            self.assertIn(b" 504 ", head.split(b"\r\n")[0], reply[:300])
            self.assertIn(b"connection: close", head.lower())
            self.assertEqual(json.loads(body)["error"]["code"], "timeout")
            self.assertLess(took, self.TIMEOUT + 10.0)
            # the broker closes the connection after the reply
            s.settimeout(10)
            rest = s.recv(4096)
            self.assertEqual(rest, b"")
            s.close()
        self.assertEqual(self.client.read(self.sid, "/work/stall/old").body, b"keep")
        deadline = time.monotonic() + 20
        while fd_count(pid) > fd0 + 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        self.assertLessEqual(fd_count(pid), fd0 + 2, os.listdir("/proc/%d/fd" % pid))
        deadline = time.monotonic() + 15
        while self.tmp_files("/work/stall") and time.monotonic() < deadline:
            time.sleep(0.3)
        self.assertEqual(self.tmp_files("/work/stall"), [])


class Sampler(threading.Thread):
    """The highest VmRSS of pid, sampled every 10 ms until stop()."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, status_kib(pid, "VmRSS"), threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                self.peak = max(self.peak, status_kib(self.pid, "VmRSS"))
            except Exception:
                pass
            time.sleep(0.01)

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


def body_blocks(n_mib, seed):
    """n_mib MiB of bytes that differ per MiB (a random block, its index)."""
    block = os.urandom(MiB - 8)
    for i in range(n_mib):
        yield b"%08d" % (i ^ seed) + block


class ApiStreamedWritesTest(unittest.TestCase):
    """PUT /api/v1/npcs/{npc}/sandbox/files: the api streams the body on to the
    broker as it arrives (adr/0030) instead of buffering it whole."""

    SIZE_MIB = 200

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxfsa%d-" % (os.getpid() % 100000)
        cap = ["--file-size-max", "256m"]
        cls.stack = Stack(cls.prefix, broker_args=cap, api_args=cap)
        u = urllib.parse.urlsplit(cls.stack.url)
        cls.host, cls.port = u.hostname, u.port
        r = cls.req("POST", "/api/v1/npcs", json.dumps({"name": "writer"}).encode())
        assert r.status in (200, 201), r.body
        r = cls.req("PUT", "/api/v1/npcs/writer/sandbox", timeout=120)
        assert r.status == 200, r.body

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    @classmethod
    def req(cls, method, path, body=None, timeout=60):
        return sbxtest.tcp_http(cls.host, cls.port, method, path, body,
                                {"Authorization": "Bearer " + cls.stack.player}, timeout)

    def files_path(self, path):
        return "/api/v1/npcs/writer/sandbox/files?path=" + urllib.parse.quote(path, safe="")

    def put_stream(self, path, blocks, length):
        """PUT a body of length bytes from an iterator of blocks; returns
        (status, body, sha256 of what was sent)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        h = hashlib.sha256()
        try:
            conn.putrequest("PUT", self.files_path(path))
            conn.putheader("Authorization", "Bearer " + self.stack.player)
            conn.putheader("Content-Length", str(length))
            conn.endheaders()
            for b in blocks:
                h.update(b)
                conn.send(b)
            r = conn.getresponse()
            return r.status, r.read(), h.hexdigest()
        finally:
            conn.close()

    def get_sha256(self, path):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        h, n = hashlib.sha256(), 0
        try:
            conn.request("GET", self.files_path(path),
                         headers={"Authorization": "Bearer " + self.stack.player})
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            while True:
                chunk = r.read(1 << 16)
                if not chunk:
                    break
                h.update(chunk)
                n += len(chunk)
            return h.hexdigest(), n
        finally:
            conn.close()

    def test_a_200_mib_write_keeps_api_memory_bounded_and_bytes_exact(self):
        pid = self.stack.api.pid
        # warm up (first-use allocations), then the baseline
        status, body, _ = self.put_stream("/work/warm", body_blocks(1, 1), MiB)
        self.assertEqual(status, 200, body)
        time.sleep(0.5)
        rss0 = status_kib(pid, "VmRSS")
        hwm0 = status_kib(pid, "VmHWM")
        sampler = Sampler(pid)
        sampler.start()
        t0 = time.monotonic()
        status, body, sent = self.put_stream("/work/big.bin", body_blocks(self.SIZE_MIB, 7),
                                             self.SIZE_MIB * MiB)
        took = time.monotonic() - t0
        peak = sampler.stop()
        hwm = status_kib(pid, "VmHWM")
        self.assertEqual(status, 200, body)
        got, n = self.get_sha256("/work/big.bin")
        print("api write of %d MiB: %.1f s; api RSS %d KiB -> sampled peak %d KiB, "
              "VmHWM %d -> %d KiB" % (self.SIZE_MIB, took, rss0, peak, hwm0, hwm))
        self.assertEqual(n, self.SIZE_MIB * MiB)
        self.assertEqual(got, sent)
        self.assertLess(peak - rss0, 32 * 1024, "api RSS grew by %d KiB" % (peak - rss0))
        self.assertLess(hwm - rss0, 32 * 1024, "api VmHWM %d KiB over its RSS before" % (hwm - rss0))

    def tmp_files(self, d):
        r = self.req("GET", "/api/v1/npcs/writer/sandbox/list?path=" + urllib.parse.quote(d, safe=""))
        self.assertEqual(r.status, 200, r.body)
        return [e["name"] for e in json.loads(r.body) if e["name"] != "old"]

    def test_a_client_gone_mid_body_leaves_the_old_file(self):
        old = b"old content\n" * 1000
        self.assertEqual(self.put_stream("/work/cut/old", [old], len(old))[0], 200)
        n = 64 * MiB
        s = socket.create_connection((self.host, self.port), timeout=60)
        s.sendall(("PUT %s HTTP/1.1\r\nHost: sbx\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: %d\r\n\r\n" % (self.files_path("/work/cut/old"),
                                                   self.stack.player, n)).encode())
        blk = b"N" * MiB
        for _ in range(n // MiB // 2):
            s.sendall(blk)
        time.sleep(1.0)   # the broker's helper holds half of it in its temporary
        s.close()
        # the api closes its broker connection: the broker cancels, the helper
        # is killed, its temporary goes, the file stays as it was
        deadline = time.monotonic() + 20
        while self.tmp_files("/work/cut") and time.monotonic() < deadline:
            time.sleep(0.3)
        self.assertEqual(self.tmp_files("/work/cut"), [])
        got, _ = self.get_sha256("/work/cut/old")
        self.assertEqual(got, hashlib.sha256(old).hexdigest())
        with open(self.stack.broker_logs[-1], "rb") as f:
            blog = f.read().decode(errors="replace")
        self.assertIn("cancelled", blog)
        alog = self.stack.api.output()
        self.assertRegex(alog, r'"action":"files.write".*"outcome":"cancelled"')
        # and the next whole write on that path goes through
        body = os.urandom(3 * MiB)
        self.assertEqual(self.put_stream("/work/cut/old", [body], len(body))[0], 200)
        self.assertEqual(self.get_sha256("/work/cut/old")[0], hashlib.sha256(body).hexdigest())


if __name__ == "__main__":
    unittest.main()
