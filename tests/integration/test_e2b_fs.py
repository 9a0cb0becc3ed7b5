"""test_e2b_fs - E2B's envd filesystem on a real sandbox (issue 23 item 2, adr/0061),
with python's stdlib as the client, as E2B's SDK 2.51 calls it through
E2B_SANDBOX_URL=<api>/e2b/envd: GET/POST /files (octet-stream and multipart with
several files, 50 MiB with equal SHA-256 and the api's memory bounded), /health,
filesystem.Filesystem over Connect's JSON codec (Stat, ListDir with depth, MakeDir,
Move, Remove; WatchDir as a server stream seeing a create and a write; the polling
watcher), paths outside /work refused with sbx's sentence in E2B's shapes.
"""

import hashlib
import http.client
import json
import os
import struct
import threading
import time
import unittest
import urllib.parse

import sbxtest
from stackfix import Stack

SENTENCE = "Only /work is reachable in an sbx sandbox (E2B's home directory is /work)."
BIG = 50 * 1024 * 1024


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class E2BFsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxe2f%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix, api_args=[
            "--e2b-templates", "base=", "--requests-per-minute", "100000",
            "--e2b-watcher-events-max", "20"])
        cls.host, port = cls.stack.url.split("//", 1)[1].split(":")
        cls.port = int(port)
        r = sbxtest.tcp_http(cls.host, cls.port, "POST", "/e2b/v2/sandboxes",
                             {"templateID": "base", "timeout": 600},
                             {"X-API-Key": cls.stack.player}, 120)
        assert r.status == 201, r.body
        sb = r.json()
        cls.sid, cls.tok = sb["sandboxID"], sb["envdAccessToken"]

    @classmethod
    def tearDownClass(cls):
        sbxtest.tcp_http(cls.host, cls.port, "DELETE", "/e2b/sandboxes/" + cls.sid, None,
                         {"X-API-Key": cls.stack.player}, 60)
        cls.stack.close()

    # ------------------------------------------------------------ helpers

    def hdr(self, extra=None):
        h = {"E2b-Sandbox-Id": self.sid, "X-Access-Token": self.tok}
        h.update(extra or {})
        return h

    def envd(self, method, path, body=None, headers=None, timeout=120):
        return sbxtest.tcp_http(self.host, self.port, method, "/e2b/envd" + path, body,
                                self.hdr(headers), timeout)

    def rpc(self, name, msg):
        return self.envd("POST", "/filesystem.Filesystem/" + name, json.dumps(msg).encode(),
                         {"Content-Type": "application/json", "Connect-Protocol-Version": "1"})

    def rpc_ok(self, name, msg):
        r = self.rpc(name, msg)
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def rpc_err(self, name, msg, code, status):
        r = self.rpc(name, msg)
        self.assertEqual(r.status, status, r.body)
        self.assertEqual(r.json()["code"], code, r.body)
        return r.json()["message"]

    def write(self, path, data):
        r = self.envd("POST", "/files?" + urllib.parse.urlencode({"path": path, "username": "user"}),
                      data, {"Content-Type": "application/octet-stream"})
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def read(self, path):
        return self.envd("GET", "/files?" + urllib.parse.urlencode({"path": path}))

    def multipart(self, files, boundary="----formdata-undici-041217365089"):
        out = b""
        for name, data in files:
            out += (b"--" + boundary.encode() + b"\r\nContent-Disposition: form-data; "
                    b"name=\"file\"; filename=\"" + name.encode().replace(b'"', b"%22") +
                    b"\"\r\nContent-Type: application/octet-stream\r\n\r\n" + data + b"\r\n")
        out += b"--" + boundary.encode() + b"--\r\n"
        return out, "multipart/form-data; boundary=" + boundary

    # ------------------------------------------------------------ /files, /health

    def test_health(self):
        r = self.envd("GET", "/health")
        self.assertEqual(r.status, 204, r.body)

    def test_files_round_trip_text_bytes_and_several_files_at_once(self):
        got = self.write("~/notes/hello.txt", "héllo\n".encode())
        self.assertEqual(got, [{"name": "hello.txt", "type": "file", "path": "/work/notes/hello.txt"}])
        r = self.read("/home/user/notes/hello.txt")
        self.assertEqual((r.status, r.body), (200, "héllo\n".encode()))
        self.assertEqual(self.read("notes/hello.txt").body, "héllo\n".encode())
        # An empty file reads as an empty body with Content-Length 0 (the SDK's "").
        self.write("empty", b"")
        r = self.read("empty")
        self.assertEqual((r.status, r.body, r.headers.get("Content-Length")), (200, b"", "0"))
        # The SDK's files.write([...]): one multipart body, one part per file,
        # each named by its filename; binary bytes and a CRLF-heavy body intact.
        blob = bytes(range(256)) * 64 + b"\r\n------formdata-undici-04121736508\r\n"
        body, ct = self.multipart([("/home/user/m/a.bin", blob), ("m/b.txt", b"b\r\n\r\n"),
                                   ("m/\"q\".txt", b"q")])
        r = self.envd("POST", "/files", body, {"Content-Type": ct})
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual([f["path"] for f in r.json()],
                         ["/work/m/a.bin", "/work/m/b.txt", "/work/m/\"q\".txt"])
        self.assertEqual(self.read("m/a.bin").body, blob)
        self.assertEqual(self.read("m/b.txt").body, b"b\r\n\r\n")
        self.assertEqual(self.read("/work/m/\"q\".txt").body, b"q")
        # One file without a filename goes to ?path=.
        body, ct = self.multipart([("", b"by query")])
        r = self.envd("POST", "/files?path=m/byq", body, {"Content-Type": ct})
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.read("m/byq").body, b"by query")

    def test_files_errors_have_e2bs_shape(self):
        r = self.read("nope/missing.txt")
        self.assertEqual(r.status, 404, r.body)
        e = r.json()
        self.assertEqual(e["code"], 404)
        self.assertIn("/work/nope/missing.txt", e["message"])
        for path in ("/etc/passwd", "/home/user/../../etc/passwd", "/tmp/x"):
            r = self.read(path)
            self.assertEqual(r.status, 403, r.body)
            self.assertEqual(r.json(), {"code": 403, "message": SENTENCE})
            r = self.envd("POST", "/files?" + urllib.parse.urlencode({"path": path}), b"x",
                          {"Content-Type": "application/octet-stream"})
            self.assertEqual((r.status, r.json()["message"]), (403, SENTENCE))
        self.write("adir/f", b"x")
        r = self.read("adir")
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json()["code"], 400)
        body, ct = self.multipart([("/etc/evil", b"x")])
        r = self.envd("POST", "/files", body, {"Content-Type": ct})
        self.assertEqual((r.status, r.json()["message"]), (403, SENTENCE))
        r = self.envd("POST", "/files", b"--b\r\nX: y\r\n\r\nz\r\n--b--",
                      {"Content-Type": "multipart/form-data; boundary=b"})
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(r.json()["code"], 400)

    def upload_big(self, multipart):
        data = os.urandom(1024 * 1024) * (BIG // (1024 * 1024))
        want = hashlib.sha256(data).hexdigest()
        api = self.stack.api.pid
        before = rss_kib(api)
        peak = [before]
        done = threading.Event()

        def watch():
            while not done.is_set():
                peak[0] = max(peak[0], rss_kib(api))
                time.sleep(0.05)
        t = threading.Thread(target=watch)
        t.start()
        try:
            if multipart:
                body, ct = self.multipart([("big/m.bin", data)])
                r = self.envd("POST", "/files", body, {"Content-Type": ct}, timeout=300)
                path = "big/m.bin"
            else:
                r = self.envd("POST", "/files?path=big/o.bin", data,
                              {"Content-Type": "application/octet-stream"}, timeout=300)
                path = "big/o.bin"
            self.assertEqual(r.status, 200, r.body)
            r = self.read(path)
        finally:
            done.set()
            t.join()
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), BIG)
        self.assertEqual(hashlib.sha256(r.body).hexdigest(), want)
        # Streamed both ways: the api never held the file (the broker's
        # windows and the spool file hold it), far below its 50 MiB.
        self.assertLess(peak[0] - before, 24 * 1024, "api grew %d KiB" % (peak[0] - before))

    def test_files_50mib_octet_stream_equal_sha256_bounded_memory(self):
        self.upload_big(False)

    def test_files_50mib_multipart_equal_sha256_bounded_memory(self):
        self.upload_big(True)

    # ------------------------------------------------------------ Connect unary

    def test_stat_mkdir_list_move_remove(self):
        self.assertEqual(self.rpc_ok("MakeDir", {"path": "~/tree/a/b"})["entry"]["type"],
                         "FILE_TYPE_DIRECTORY")
        # A directory there already: already_exists (the SDK's makeDir -> false).
        self.rpc_err("MakeDir", {"path": "/home/user/tree/a/b"}, "already_exists", 409)
        self.write("tree/a/f.txt", b"12345")
        e = self.rpc_ok("Stat", {"path": "tree/a/f.txt"})["entry"]
        self.assertEqual((e["name"], e["type"], e["path"], e["size"], e["permissions"]),
                         ("f.txt", "FILE_TYPE_FILE", "/work/tree/a/f.txt", "5", "-rw-r--r--"))
        self.assertTrue(e["modifiedTime"].endswith("Z"))
        self.assertTrue(e["owner"])
        # exists(): a missing path is not_found.
        self.rpc_err("Stat", {"path": "tree/none"}, "not_found", 404)
        got = self.rpc_ok("ListDir", {"path": "tree", "depth": 1})["entries"]
        self.assertEqual([x["path"] for x in got], ["/work/tree/a"])
        got = self.rpc_ok("ListDir", {"path": "tree", "depth": 3})["entries"]
        self.assertEqual([x["path"] for x in got],
                         ["/work/tree/a", "/work/tree/a/b", "/work/tree/a/f.txt"])
        got = self.rpc_ok("ListDir", {"path": "~/tree"})["entries"]
        self.assertEqual(len(got), 1)
        self.rpc_err("ListDir", {"path": "tree/a/f.txt"}, "invalid_argument", 400)
        e = self.rpc_ok("Move", {"source": "tree/a/f.txt", "destination": "tree/c/g.txt"})["entry"]
        self.assertEqual((e["path"], e["size"]), ("/work/tree/c/g.txt", "5"))
        self.assertEqual(self.read("tree/c/g.txt").body, b"12345")
        self.rpc_err("Move", {"source": "tree/a/f.txt", "destination": "tree/x"}, "not_found", 404)
        self.assertEqual(self.rpc_ok("Remove", {"path": "tree"}), {})
        self.rpc_err("Stat", {"path": "tree"}, "not_found", 404)
        self.rpc_err("Remove", {"path": "tree"}, "not_found", 404)

    def test_connect_paths_outside_work_are_permission_denied(self):
        for name, msg in (("Stat", {"path": "/etc"}), ("ListDir", {"path": "/"}),
                          ("MakeDir", {"path": "/tmp/x"}), ("Remove", {"path": "/home/user/.."}),
                          ("Move", {"source": "/etc/passwd", "destination": "p"}),
                          ("Move", {"source": "p", "destination": "/etc/p"}),
                          ("CreateWatcher", {"path": "/proc"})):
            self.assertEqual(self.rpc_err(name, msg, "permission_denied", 403), SENTENCE)

    # ------------------------------------------------------------ watches

    def open_stream(self, name, msg):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        payload = json.dumps(msg).encode()
        conn.request("POST", "/e2b/envd/filesystem.Filesystem/" + name,
                     struct.pack(">BI", 0, len(payload)) + payload,
                     self.hdr({"Content-Type": "application/connect+json",
                               "Connect-Protocol-Version": "1"}))
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        self.addCleanup(conn.close)
        return r

    @staticmethod
    def next_msg(r):
        head = r.read(5)
        if len(head) < 5:
            return None, None
        flags, n = struct.unpack(">BI", head)
        return flags, json.loads(r.read(n))

    def test_watch_dir_sees_a_create_and_a_write(self):
        self.rpc_ok("MakeDir", {"path": "watched"})
        r = self.open_stream("WatchDir", {"path": "/home/user/watched", "recursive": False})
        flags, m = self.next_msg(r)
        self.assertEqual((flags, m), (0, {"start": {}}))
        self.write("watched/new.txt", b"1")
        seen = set()
        deadline = time.time() + 20
        while not {("new.txt", "EVENT_TYPE_CREATE"), ("new.txt", "EVENT_TYPE_WRITE")} <= seen:
            self.assertLess(time.time(), deadline, seen)
            flags, m = self.next_msg(r)
            self.assertEqual(flags, 0, m)
            if "filesystem" in m:
                seen.add((m["filesystem"]["name"], m["filesystem"]["type"]))
        # The watched directory removed: the stream ends, ok.
        self.rpc_ok("Remove", {"path": "watched"})
        while True:
            flags, m = self.next_msg(r)
            self.assertIsNotNone(flags, "the stream ended without its end message")
            if flags & 2:
                self.assertEqual(m, {})
                break

    def test_watcher_polls_then_overflows_into_an_error_then_is_gone(self):
        self.rpc_ok("MakeDir", {"path": "polled"})
        wid = self.rpc_ok("CreateWatcher", {"path": "polled"})["watcherId"]
        self.write("polled/a", b"1")
        evs, deadline = [], time.time() + 20
        while len(evs) < 2:
            self.assertLess(time.time(), deadline, evs)
            evs += self.rpc_ok("GetWatcherEvents", {"watcherId": wid}).get("events", [])
            time.sleep(0.1)
        # sbx's write replaces the file whole (a temporary file renamed over
        # it, never reported): a create and a write of the file itself.
        self.assertEqual(evs, [{"name": "a", "type": "EVENT_TYPE_CREATE"},
                               {"name": "a", "type": "EVENT_TYPE_WRITE"}])
        self.assertEqual(self.rpc_ok("RemoveWatcher", {"watcherId": wid}), {})
        self.rpc_err("GetWatcherEvents", {"watcherId": wid}, "not_found", 404)
        # More events than e2b_watcher_events_max (20) waiting: never a silent
        # gap, the watcher answers resource_exhausted once its events are taken.
        wid = self.rpc_ok("CreateWatcher", {"path": "polled"})["watcherId"]
        for i in range(15):
            self.write("polled/f%d" % i, b"x")   # a create and a write each
        time.sleep(1)
        self.assertEqual(len(self.rpc_ok("GetWatcherEvents", {"watcherId": wid})["events"]), 20)
        self.rpc_err("GetWatcherEvents", {"watcherId": wid}, "resource_exhausted", 429)
        self.rpc_err("GetWatcherEvents", {"watcherId": wid}, "not_found", 404)


if __name__ == "__main__":
    unittest.main()
