#!/usr/bin/python3
# test_fair.py - one player cannot crowd out another at the api's shared pools (issue 24 M1, M2; adr/0056), directly and through the shipped nginx site.
#
# M2: a chunked file-write body is admitted by max_file_ops_per_principal
# before a byte of it is held, and goes through a spool file a window at a
# time: 16 unfinished chunked uploads of one player keep the api's RSS flat,
# the 17th is refused with 429, and RSS comes back after big requests.

import hashlib
import http.client
import json
import os
import socket
import time
import unittest
import urllib.parse

import sbxtest
from stackfix import Stack
from test_nginx import SNIPPET, Nginx, site

MiB = 1 << 20


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def chunk(data):
    return b"%x\r\n" % len(data) + data + b"\r\n"


class FairBase(unittest.TestCase):
    """A broker and an api (file ops per principal: 16), and nginx in front
    with the shipped site."""

    FILE_OPS = 16

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack("sbxfair%d-" % (os.getpid() % 100000),
                          api_args=["--max-file-ops-per-principal", str(cls.FILE_OPS),
                                    "--requests-per-minute", "100000"])
        try:
            cls.api_port = int(cls.stack.url.rsplit(":", 1)[1])
            with open(SNIPPET) as f:
                snippet = f.read()
            for attempt in range(3):
                cls.ngx_port = sbxtest.free_port()
                cls.nginx = Nginx([site(snippet, cls.ngx_port, cls.api_port)])
                try:
                    sbxtest.wait_for_tcp("127.0.0.1", cls.ngx_port, 10, cls.nginx.proc)
                    break
                except Exception:
                    log = cls.nginx.log()
                    cls.nginx.close()
                    cls.nginx = None
                    if "Address already in use" not in log or attempt == 2:
                        raise AssertionError("nginx did not start: " + log)
            for key, npc in ((cls.stack.player, "fairpl"), (cls.stack.other, "fairot")):
                r = cls.call(key, "POST", "/api/v1/npcs", json.dumps({"name": npc}).encode())
                assert r.status == 201, (r.status, r.body)
                r = cls.call(key, "PUT", "/api/v1/npcs/%s/sandbox" % npc, timeout=120)
                assert r.status == 200, (r.status, r.body)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "nginx", None) is not None:
            cls.nginx.close()
        cls.stack.close()

    @classmethod
    def call(cls, key, method, path, body=None, port=None, timeout=60, headers=None):
        h = {"Authorization": "Bearer " + key}
        h.update(headers or {})
        return sbxtest.tcp_http("127.0.0.1", port or cls.api_port, method, path, body, h,
                                timeout)

    @staticmethod
    def files_path(npc, path):
        return "/api/v1/npcs/%s/sandbox/files?path=%s" % (npc, urllib.parse.quote(path, safe=""))


class ChunkedUploadsTest(FairBase):
    """M2: chunked write bodies are admitted first and spooled, never held."""

    def open_chunked(self, port, npc, path, key=None):
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(("PUT %s HTTP/1.1\r\nHost: sbx\r\nAuthorization: Bearer %s\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n"
                   % (self.files_path(npc, path), key or self.stack.player)).encode())
        return s

    def reply_of(self, s, timeout=30):
        """Reads one reply (status, body) from a raw socket."""
        s.settimeout(timeout)
        r = http.client.HTTPResponse(s)
        r.begin()
        return r.status, r.read()

    def put_chunked(self, port, npc, path, blocks):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        h = hashlib.sha256()
        try:
            conn.putrequest("PUT", self.files_path(npc, path))
            conn.putheader("Authorization", "Bearer " + self.stack.player)
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            for b in blocks:
                h.update(b)
                conn.send(chunk(b))
            conn.send(b"0\r\n\r\n")
            r = conn.getresponse()
            return r.status, r.read(), h.hexdigest()
        finally:
            conn.close()

    def sha_of(self, npc, path):
        r = self.call(self.stack.player, "GET", self.files_path(npc, path), timeout=120)
        self.assertEqual(r.status, 200, r.body[:300])
        return hashlib.sha256(r.body).hexdigest(), len(r.body)

    def crowd(self, port, per_upload_mib):
        """FILE_OPS unfinished chunked uploads of per_upload_mib MiB each (of a
        60 MiB file), then the next refused; returns (rss before, peak)."""
        pid = self.stack.api.pid
        # warm up (first-use allocations), then the baseline
        self.assertEqual(self.put_chunked(port, "fairpl", "/work/warm", [b"w" * MiB])[0], 200)
        time.sleep(0.5)
        rss0 = peak = rss_kib(pid)
        socks = []
        block = chunk(os.urandom(MiB))
        try:
            for i in range(self.FILE_OPS):
                s = self.open_chunked(port, "fairpl", "/work/up%d" % i)
                socks.append(s)
                for _ in range(per_upload_mib):
                    s.sendall(block)
                peak = max(peak, rss_kib(pid))
            time.sleep(1.0)
            peak = max(peak, rss_kib(pid))
            # the next one is refused before its body is read
            s = self.open_chunked(port, "fairpl", "/work/up-next")
            s.sendall(block + b"0\r\n\r\n")
            status, body = self.reply_of(s)
            s.close()
            self.assertEqual(status, 429, body)
            self.assertIn("You already run %d file operations; try again when one has "
                          "ended." % self.FILE_OPS, json.loads(body)["error"]["message"])
            # another player writes meanwhile
            r = self.call(self.stack.other, "PUT", self.files_path("fairot", "/work/o"),
                          b"other\n", port=port)
            self.assertEqual(r.status, 200, r.body)
            peak = max(peak, rss_kib(pid))
        finally:
            for s in socks:
                s.close()
        return rss0, peak

    def check_crowd(self, port, label):
        rss0, peak = self.crowd(port, 8)
        print("%s: %d unfinished chunked uploads of 8 MiB: api RSS %d -> peak %d KiB"
              % (label, self.FILE_OPS, rss0, peak))
        # Held whole before (adr/0056): 16 x 8 MiB = 128 MiB.
        self.assertLess(peak - rss0, 40 * 1024, "api RSS grew by %d KiB" % (peak - rss0))
        # their slots come back: a whole 60 MiB chunked upload goes through
        blocks = [os.urandom(MiB) for _ in range(60)]
        status, body, sent = self.put_chunked(port, "fairpl", "/work/whole", blocks)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.sha_of("fairpl", "/work/whole"), (sent, 60 * MiB))
        # and RSS comes back after the big requests (malloc_trim)
        pid = self.stack.api.pid
        deadline = time.monotonic() + 5
        while rss_kib(pid) > rss0 + 16 * 1024 and time.monotonic() < deadline:
            time.sleep(0.2)
        after = rss_kib(pid)
        print("%s: api RSS %d KiB after the 60 MiB upload" % (label, after))
        self.assertLess(after - rss0, 16 * 1024, "api RSS stayed %d KiB up" % (after - rss0))

    def test_a_players_chunked_uploads_are_capped_and_not_held_direct(self):
        self.check_crowd(self.api_port, "direct")

    def test_a_players_chunked_uploads_are_capped_and_not_held_through_nginx(self):
        self.check_crowd(self.ngx_port, "nginx")

    def test_a_chunked_body_over_file_size_max_is_413_and_closes(self):
        s = self.open_chunked(self.api_port, "fairpl", "/work/huge")
        s.sendall(b"%x\r\n" % (65 * MiB))
        status, body = self.reply_of(s)
        self.assertEqual(status, 413, body)
        self.assertIn("The file is larger than", json.loads(body)["error"]["message"])
        s.close()
        r = self.call(self.stack.player, "GET", self.files_path("fairpl", "/work/huge"))
        self.assertEqual(r.status, 404, r.body)


class SharesTest(FairBase):
    """M1: one player's open SSE viewers of a quiet exec take at most its
    share of streams and connections; another principal is still served."""

    VIEWERS = 512

    def viewers(self, port, path, n):
        """n raw GETs of path; returns (open sockets answered 200, statuses of
        the others with the first refusal's body)."""
        codes, refusal = {}, None
        head = ("GET %s HTTP/1.1\r\nHost: sbx\r\nAuthorization: Bearer %s\r\n"
                "Accept: text/event-stream\r\n\r\n" % (path, self.stack.player)).encode()
        opened = []
        # One after another, each answered before the next: connections
        # opened faster than their heads arrive are the keyless pool's
        # (adr/0046, 503), not what this measures.
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(head)
            s.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                got = s.recv(65536)
                if not got:
                    break
                data += got
            status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
            codes[status] = codes.get(status, 0) + 1
            if status == 200:
                opened.append(s)
            else:
                if refusal is None:
                    refusal = data
                s.close()
        return opened, codes, refusal

    def check_shares(self, port, n, label):
        r = self.call(self.stack.player, "POST", "/api/v1/npcs/fairpl/sandbox/execs",
                      json.dumps({"argv": ["sleep", "600"]}).encode(), port=port,
                      headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 201, r.body)
        xid = json.loads(r.body)["exec_id"]
        path = "/api/v1/npcs/fairpl/sandbox/execs/%s/events" % xid
        opened, codes, refusal = self.viewers(port, path, n)
        try:
            print("%s: %d viewers of one player: %r" % (label, n, codes))
            self.assertEqual(len(opened), 64, codes)       # streams_per_principal
            self.assertEqual(codes.get(429), n - 64, codes)
            self.assertIn(b"Retry-After: 1", refusal)
            self.assertRegex(refusal.decode(errors="replace"),
                             "You already hold 64 (open streams|connections)")
            # another principal: 10 of 10
            ok = 0
            for i in range(10):
                r = self.call(self.stack.other, "GET", "/api/v1/npcs/fairot/sandbox",
                              port=port, timeout=30)
                ok += r.status == 200
            self.assertEqual(ok, 10)
            # the player itself is refused another stream while it holds 64
            r = self.call(self.stack.player, "GET", path, port=port, timeout=30)
            self.assertEqual(r.status, 429, r.body)
        finally:
            for s in opened:
                s.close()
            self.call(self.stack.player, "DELETE", "/api/v1/npcs/fairpl/sandbox/execs/%s" % xid,
                      port=port)
        # the slots come back when the viewers close
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = self.call(self.stack.player, "GET", path + "?follow=0", port=port, timeout=30)
            if r.status != 429:
                break
            time.sleep(0.2)
        self.assertNotEqual(r.status, 429, r.body)

    def test_one_players_idle_connections_are_capped_direct(self):
        # connections_per_principal (max_connections/8 = 64): keep-alive
        # connections left open after a request count until they close.
        conns = []
        try:
            for i in range(64):
                c = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=30)
                c.request("GET", "/api/v1/npcs",
                          headers={"Authorization": "Bearer " + self.stack.player})
                r = c.getresponse()
                r.read()
                self.assertEqual(r.status, 200)
                conns.append(c)
            c = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=30)
            c.request("GET", "/api/v1/npcs",
                      headers={"Authorization": "Bearer " + self.stack.player})
            r = c.getresponse()
            body = r.read()
            self.assertEqual(r.status, 429, body)
            self.assertEqual(r.getheader("Retry-After"), "1")
            self.assertEqual(r.getheader("Connection"), "close")
            self.assertIn("You already hold 64 connections to the api",
                          json.loads(body)["error"]["message"])
            c.close()
            # the same connections serve the player on, others are served
            conns[0].request("GET", "/api/v1/npcs",
                             headers={"Authorization": "Bearer " + self.stack.player})
            r = conns[0].getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            r = self.call(self.stack.other, "GET", "/api/v1/npcs")
            self.assertEqual(r.status, 200, r.body)
        finally:
            for c in conns:
                c.close()
        # closed connections give their slots back
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = self.call(self.stack.player, "GET", "/api/v1/npcs")
            if r.status == 200:
                break
            time.sleep(0.2)
        self.assertEqual(r.status, 200, r.body)

    def test_one_players_viewers_leave_others_served_direct(self):
        self.check_shares(self.api_port, self.VIEWERS, "direct")

    def test_one_players_viewers_leave_others_served_through_nginx(self):
        # nginx in the test runs 256 worker connections: two per proxied viewer
        self.check_shares(self.ngx_port, 100, "nginx")


if __name__ == "__main__":
    unittest.main()
