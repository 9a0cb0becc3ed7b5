"""test_helper_e2bfs.py - sbx-helper's modes behind E2B's filesystem service (adr/0061): stat, mkdir, move, remove, walk, watch, run on the host as uid 1000 against a temporary --root."""
import json
import os
import select
import subprocess
import time
import unittest

import test_helper
from test_helper import (EXIT_BAD_REQUEST, EXIT_INTERNAL, EXIT_NOT_FOUND, EXIT_OUTSIDE,
                         HelperCase, UID)

SBX_ONCE = True


def setUpModule():
    test_helper.setUpModule()


def tearDownModule():
    test_helper.tearDownModule()


class TestE2bFsModes(HelperCase):
    def ok(self, args):
        r = self.run_helper(args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [json.loads(x) for x in r.stdout.decode().splitlines()]

    def write(self, *parts, data=b"x"):
        with open(self.p(*parts), "wb") as f:
            f.write(data)
        os.chown(self.p(*parts), UID, UID)

    def test_stat_describes_a_file_a_symlink_and_work_itself(self):
        self.write("a.txt", data=b"hello")
        os.chmod(self.p("a.txt"), 0o640)
        os.symlink("/etc", self.p("out"))
        st = os.lstat(self.p("a.txt"))
        [e] = self.ok(["stat", self.p("a.txt")])
        self.assertEqual((e["name"], e["rel"], e["type"], e["size"], e["mode"], e["uid"]),
                         ("a.txt", "", "file", 5, 0o640, UID))
        self.assertEqual((e["mtime"], e["mtime_nsec"]), (int(st.st_mtime), st.st_mtime_ns % 10**9))
        self.assertIn("owner", e)
        # A symlink is itself, its target read, never followed (even out of the root).
        [e] = self.ok(["stat", self.p("out")])
        self.assertEqual((e["type"], e["target"]), ("symlink", "/etc"))
        [e] = self.ok(["stat", self.root])
        self.assertEqual((e["name"], e["type"]), ("work", "dir"))

    def test_stat_of_an_absent_path_is_not_found_and_outside_is_refused(self):
        r = self.run_helper(["stat", self.p("nope")])
        self.assertError(r, EXIT_NOT_FOUND, "not_found")
        self.assertIn("does not exist", r.stderr.decode())
        os.symlink("/etc", self.p("out"))
        self.assertError(self.run_helper(["stat", self.p("out", "passwd")]), EXIT_OUTSIDE,
                         "path_outside_work")
        self.assertError(self.run_helper(["stat", "/etc/passwd"]), EXIT_OUTSIDE,
                         "path_outside_work")

    def test_mkdir_makes_parents_and_says_when_it_exists(self):
        [e] = self.ok(["mkdir", self.p("a", "b", "c")])
        self.assertEqual((e["name"], e["type"]), ("c", "dir"))
        self.assertTrue(os.path.isdir(self.p("a", "b", "c")))
        r = self.run_helper(["mkdir", self.p("a", "b")])
        self.assertError(r, EXIT_INTERNAL, "conflict")
        self.write("f")
        self.assertError(self.run_helper(["mkdir", self.p("f")]), EXIT_BAD_REQUEST,
                         "bad_request")

    def test_move_renames_into_new_parents_and_answers_the_destination(self):
        self.write("src", data=b"12345")
        [e] = self.ok(["move", self.p("src"), self.p("x", "y", "dst")])
        self.assertEqual((e["name"], e["size"]), ("dst", 5))
        self.assertFalse(os.path.exists(self.p("src")))
        with open(self.p("x", "y", "dst"), "rb") as f:
            self.assertEqual(f.read(), b"12345")
        self.assertError(self.run_helper(["move", self.p("src"), self.p("z")]),
                         EXIT_NOT_FOUND, "not_found")
        self.assertError(self.run_helper(["move", self.root, self.p("z")]),
                         EXIT_BAD_REQUEST, "bad_request")

    def test_remove_takes_a_tree_without_following_a_symlink_out(self):
        outside = os.path.join(self.dir, "outside")
        os.mkdir(outside)
        with open(os.path.join(outside, "keep"), "w") as f:
            f.write("k")
        os.makedirs(self.p("t", "u", "v"))
        for d in ("t", "t/u", "t/u/v"):
            os.chown(self.p(d), UID, UID)
        self.write("t", "u", "v", "f")
        os.symlink(outside, self.p("t", "link"))
        r = self.run_helper(["remove", self.p("t")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"")
        self.assertFalse(os.path.lexists(self.p("t")))
        self.assertTrue(os.path.exists(os.path.join(outside, "keep")))
        self.assertError(self.run_helper(["remove", self.p("t")]), EXIT_NOT_FOUND,
                         "not_found")
        self.assertError(self.run_helper(["remove", self.root]), EXIT_BAD_REQUEST,
                         "bad_request")

    def test_walk_goes_to_its_depth_and_stops_at_its_limit(self):
        os.makedirs(self.p("d", "e", "f"))
        self.write("d", "1")
        self.write("d", "e", "2")
        self.write("d", "e", "f", "3")
        os.symlink("/", self.p("d", "root"))
        got = self.ok(["walk", self.p("d")])
        self.assertEqual(got[-1], {"end": True, "truncated": False})
        self.assertEqual(sorted(e["rel"] for e in got[:-1]), ["1", "e", "root"])
        got = self.ok(["walk", self.p("d"), "--depth", "2"])
        self.assertEqual(sorted(e["rel"] for e in got[:-1]), ["1", "e", "e/2", "e/f", "root"])
        got = self.ok(["walk", self.p("d"), "--depth", "9"])
        self.assertEqual(sorted(e["rel"] for e in got[:-1]),
                         ["1", "e", "e/2", "e/f", "e/f/3", "root"])
        got = self.ok(["walk", self.p("d"), "--depth", "9", "--limit", "2"])
        self.assertEqual(len(got), 3)
        self.assertEqual(got[-1], {"end": True, "truncated": True})
        self.assertError(self.run_helper(["walk", self.p("d", "1")]), EXIT_BAD_REQUEST,
                         "bad_request")
        self.assertError(self.run_helper(["walk", self.p("d"), "--depth", "0"]),
                         EXIT_BAD_REQUEST, "bad_request")

    def read_lines(self, proc, n, timeout=5):
        out, buf = [], b""
        deadline = time.time() + timeout
        while len(out) < n and time.time() < deadline:
            r, _, _ = select.select([proc.stdout], [], [], 0.2)
            if not r:
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                out.append(json.loads(line))
        return out

    def test_watch_reports_create_write_rename_remove_and_ends_when_the_directory_goes(self):
        os.mkdir(self.p("w"))
        os.chown(self.p("w"), UID, UID)
        p = self.spawn(["watch", self.p("w"), "--recursive"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
        self.assertEqual(self.read_lines(p, 1), [{"start": True}])
        os.mkdir(self.p("w", "sub"))
        time.sleep(0.2)   # the new directory is watched once its create is read
        self.write("w", "sub", "f", data=b"1")
        os.rename(self.p("w", "sub", "f"), self.p("w", "g"))
        os.unlink(self.p("w", "g"))
        got = self.read_lines(p, 8)
        pairs = [(e["name"], e["op"]) for e in got]
        for want in (("sub", "create"), ("sub/f", "create"), ("sub/f", "write"),
                     ("sub/f", "rename"), ("g", "create"), ("g", "remove")):
            self.assertIn(want, pairs)
        os.rmdir(self.p("w", "sub"))
        os.rmdir(self.p("w"))
        got = self.read_lines(p, 10)
        self.assertEqual(got[-1], {"gone": True})
        self.assertEqual(p.wait(timeout=5), 0)

    def test_watch_of_a_file_or_outside_is_refused(self):
        self.write("f")
        self.assertError(self.run_helper(["watch", self.p("f")]), EXIT_BAD_REQUEST,
                         "bad_request")
        os.symlink("/etc", self.p("out"))
        self.assertError(self.run_helper(["watch", self.p("out")]), EXIT_OUTSIDE,
                         "path_outside_work")


if __name__ == "__main__":
    unittest.main()
