#!/usr/bin/python3
# test_broker_files.py - read, write, list through the broker: exact bytes, owner, path rules, symlinks (SPEC §4).

import hashlib
import os
import time
import unittest

from brokerfix import BrokerTestCase, MiB

BAD_PATHS = ["../x", "/etc/passwd", "/work/../etc/passwd", "work/x", "/work//x",
             "/work/./x", "/work/x\x00y", "/work/..", "/workx/a", "", "/work/a/../../etc/passwd",
             "/work/" + "a" * 5000, "/work/x/", "/workspace/x", "/work/x\ny", "/work/\x7f",
             "/work/\uff0e\uff0e/etc/passwd", "/work/a\u2215..\u2215etc", "/work/" + "b" * 256]


def entries(reply):
    body = reply.json()
    return body if isinstance(body, list) else body.get("entries")


class FilesTest(BrokerTestCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("files")
        cls.ensure_ok(cls.sid)
        res = cls.client.exec(cls.sid, ["id", "-u"])
        cls.uid = bytes(res.out).strip().decode()

    def sh(self, script):
        res = self.client.sh(self.sid, script)
        self.assertEqual(res.code, 0, res)
        return bytes(res.out)

    def test_write_read_5mib_binary(self):
        data = os.urandom(5 * MiB)
        t_before = time.time()
        r = self.client.write(self.sid, "/work/big/nested/f.bin", data)
        self.assertIn(r.status, (200, 201, 204), r)
        r = self.client.read(self.sid, "/work/big/nested/f.bin")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("content-type"), "application/octet-stream")
        self.assertEqual(len(r.body), len(data))
        self.assertEqual(hashlib.sha256(r.body).hexdigest(), hashlib.sha256(data).hexdigest())
        # the same bytes as seen inside, owned by the sandbox's user
        out = self.sh("sha256sum /work/big/nested/f.bin; stat -c '%u %g' /work/big/nested/f.bin /work/big/nested /work/big")
        lines = out.decode().splitlines()
        self.assertEqual(lines[0].split()[0], hashlib.sha256(data).hexdigest())
        self.assertNotEqual(self.uid, "0")
        for line in lines[1:]:
            self.assertEqual(line.split()[0], self.uid, out)
        self.assertEqual(self.sh("stat -c %a /work/big /work/big/nested").split(), [b"755", b"755"])
        # list
        r = self.client.list(self.sid, "/work/big/nested")
        self.assertEqual(r.status, 200, r)
        ents = entries(r)
        self.assertEqual([e["name"] for e in ents], ["f.bin"], ents)
        e = ents[0]
        self.assertEqual(e["type"], "file")
        self.assertEqual(e["size"], 5 * MiB)
        self.assertIn("mode", e)
        self.assertIn("mtime", e)
        mtime = e["mtime"]
        if isinstance(mtime, (int, float)):
            secs = mtime / 1000.0 if mtime > 1e11 else mtime
            self.assertLess(abs(secs - t_before), 120, e)
        else:
            self.assertIsInstance(mtime, str)
            self.assertTrue(mtime[:4].isdigit(), e)
        r = self.client.list(self.sid, "/work/big")
        self.assertEqual([(x["name"], x["type"]) for x in entries(r)], [("nested", "dir")])

    def test_write_mode_and_overwrite(self):
        r = self.client.write(self.sid, "/work/m.txt", b"first version, long\n", mode="0600")
        self.assertIn(r.status, (200, 201, 204), r)
        self.assertEqual(self.sh("stat -c %a /work/m.txt").strip(), b"600")
        ent = [e for e in entries(self.client.list(self.sid, "/work")) if e["name"] == "m.txt"][0]
        mode = ent["mode"]
        mode = int(mode, 8) if isinstance(mode, str) else mode
        self.assertEqual(mode & 0o777, 0o600, ent)
        r = self.client.write(self.sid, "/work/m.txt", b"short\n", mode="0640")
        self.assertIn(r.status, (200, 201, 204), r)
        r = self.client.read(self.sid, "/work/m.txt")
        self.assertEqual(r.body, b"short\n")
        self.assertEqual(self.sh("stat -c %a /work/m.txt").strip(), b"640")
        for bad in ("abc", "0999", "01777", "-1", "4755"):
            with self.subTest(mode=bad):
                r = self.client.write(self.sid, "/work/m.txt", b"x", mode=bad)
                self.assertEqual(r.status, 400, r)
        self.assertEqual(self.client.read(self.sid, "/work/m.txt").body, b"short\n")
        # empty file
        r = self.client.write(self.sid, "/work/empty", b"")
        self.assertIn(r.status, (200, 201, 204), r)
        r = self.client.read(self.sid, "/work/empty")
        self.assertEqual((r.status, r.body), (200, b""))

    def test_list_types(self):
        self.sh("mkdir -p /work/kinds/d && echo x > /work/kinds/f && ln -s f /work/kinds/l && mkfifo /work/kinds/p")
        r = self.client.list(self.sid, "/work/kinds")
        self.assertEqual(r.status, 200, r)
        got = sorted((e["name"], e["type"]) for e in entries(r))
        self.assertEqual(got, [("d", "dir"), ("f", "file"), ("l", "symlink"), ("p", "other")])

    def test_missing_file(self):
        r = self.client.read(self.sid, "/work/no/such/file")
        self.assertError(r, 404, "not_found")
        r = self.client.list(self.sid, "/work/no-such-dir")
        self.assertError(r, 404, "not_found")

    def test_file_size_cap(self):
        cap = self.broker.limits["file_cap"]
        r = self.client.write(self.sid, "/work/huge.bin", b"\0" * (cap + MiB))
        self.assertError(r, 413, "too_large")
        names = [e["name"] for e in entries(self.client.list(self.sid, "/work"))]
        self.assertNotIn("huge.bin", names, "a refused write left a file behind")

    def snapshot(self):
        listing = sorted((e["name"], e["type"], e["size"]) for e in entries(self.client.list(self.sid, "/work")))
        inside = self.sh("ls -laR /work | grep -v '^total'; sha256sum /etc/passwd; ls -la /tmp | grep -v '[.]sbx-exec$'")
        return listing, inside

    def test_paths_outside_work_refused(self):
        self.sh("echo keep > /work/x")
        before = self.snapshot()
        for p in BAD_PATHS:
            with self.subTest(path=p[:40]):
                self.assertError(self.client.read(self.sid, p), 400, "path_outside_work")
                self.assertError(self.client.write(self.sid, p, b"pwned\n"), 400, "path_outside_work")
                self.assertError(self.client.list(self.sid, p), 400, "path_outside_work")
        # percent-encoded dot segments are dot segments all the same
        for raw in ("%2Fwork%2F%2E%2E%2Fetc%2Fpasswd", "/work/%2e%2e/etc/passwd", "/work/x%00",
                    "/work/%ff"):
            with self.subTest(raw=raw):
                r = self.client.request("GET", "/v1/sandboxes/%s/files?path=%s" % (self.sid, raw))
                self.assertError(r, 400, "path_outside_work")
                r = self.client.request("PUT", "/v1/sandboxes/%s/files?path=%s" % (self.sid, raw), b"pwned\n")
                self.assertError(r, 400, "path_outside_work")
        r = self.client.request("GET", "/v1/sandboxes/%s/files" % self.sid)
        self.assertError(r, 400, "bad_request")
        r = self.client.request("GET", "/v1/sandboxes/%s/files?path=/work/x&path=/etc/passwd" % self.sid)
        self.assertError(r, 400, "bad_request")
        r = self.client.request("PUT", "/v1/sandboxes/%s/files?path=/work/y&path=/etc/y" % self.sid, b"pwned\n")
        self.assertError(r, 400, "bad_request")
        r = self.client.write(self.sid, "/work", b"pwned\n")
        self.assertEqual(r.status, 400, r)
        self.assertEqual(self.snapshot(), before)
        self.assertEqual(self.client.read(self.sid, "/work/x").body, b"keep\n")

    def test_symlinks_out_of_work_refused(self):
        self.sh("ln -s /etc /work/e && ln -s /etc/passwd /work/p && ln -s /tmp /work/t && "
                "ln -s /tmp/target /work/q && ln -s ../etc /work/rel && echo topsecret > /tmp/secret")
        before = self.snapshot()
        for p in ("/work/e/passwd", "/work/p", "/work/t/secret", "/work/rel/passwd"):
            with self.subTest(read=p):
                r = self.client.read(self.sid, p)
                self.assertTrue(400 <= r.status < 500, r)
                self.assertNotIn(b"root:", r.body)
                self.assertNotIn(b"topsecret", r.body)
        for p in ("/work/e", "/work/t", "/work/rel"):
            with self.subTest(list=p):
                r = self.client.list(self.sid, p)
                self.assertTrue(400 <= r.status < 500, r)
                self.assertNotIn(b"passwd", r.body)
                self.assertNotIn(b"secret", r.body)
        for p in ("/work/e/x", "/work/p", "/work/t/x", "/work/q", "/work/t/new/dir/f", "/work/rel/x"):
            with self.subTest(write=p):
                r = self.client.write(self.sid, p, b"pwned\n")
                self.assertTrue(400 <= r.status < 500, r)
        self.assertEqual(self.snapshot(), before)
        out = self.sh("for l in /work/p /work/q /work/t; do readlink $l; done; cat /tmp/secret; "
                      "for f in /tmp/target /tmp/x /tmp/new; do [ -e $f ] && echo LEAK $f; done; true")
        self.assertEqual(out, b"/etc/passwd\n/tmp/target\n/tmp\ntopsecret\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
