#!/usr/bin/python3
# test_files_stream.py - file write bodies stream from the client to the helper: broker memory per write bounded, a cut body never replaces the file (adr/0018).

import hashlib
import json
import os
import socket
import threading
import time
import unittest

from brokerfix import BrokerTestCase, MiB, qpath


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


if __name__ == "__main__":
    unittest.main()
