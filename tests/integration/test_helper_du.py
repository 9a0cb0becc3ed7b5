"""test_helper_du.py - sbx-helper du (adr/0017) run on the host as uid 1000 against a temporary --root."""
import json
import os
import stat
import subprocess
import time
import unittest

import test_helper
from test_helper import EXIT_BAD_REQUEST, HelperCase, UID, GID

SBX_ONCE = True


def setUpModule():
    test_helper.setUpModule()


def tearDownModule():
    test_helper.tearDownModule()


def host_walk(root):
    """What du should report, computed here with lstat (no symlink followed)."""
    dev = os.lstat(root).st_dev
    got = {"bytes": os.lstat(root).st_blocks * 512, "apparent_bytes": 0, "files": 0,
           "dirs": 0, "entries": 0}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_dev != dev:
                continue
            got["entries"] += 1
            got["bytes"] += st.st_blocks * 512
            if stat.S_ISREG(st.st_mode):
                got["files"] += 1
                got["apparent_bytes"] += st.st_size
            elif stat.S_ISDIR(st.st_mode):
                got["dirs"] += 1
        dirnames[:] = [d for d in dirnames
                       if os.lstat(os.path.join(dirpath, d)).st_dev == dev]
    return got


class TestDu(HelperCase):
    def du(self, *extra):
        r = self.run_helper(["du"] + list(extra), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.endswith(b"}\n"))
        self.assertEqual(r.stdout.count(b"\n"), 1, "one line")
        return json.loads(r.stdout)

    def fill(self):
        for name, size in (("a", 1000), ("b", 20000), ("c", 300001)):
            with open(self.p(name), "wb") as f:
                f.write(os.urandom(size))
        os.symlink("/", self.p("root-link"))
        os.mkdir(self.p("many"))
        for i in range(1000):
            with open(self.p("many", "f%d" % i), "wb") as f:
                f.write(b"x")

    def test_counts_files_bytes_and_entries_without_following_a_symlink_to_root(self):
        self.fill()
        u = self.du()
        self.assertEqual(u["apparent_bytes"], 1000 + 20000 + 300001 + 1000)
        self.assertEqual(u["files"], 1003)
        self.assertEqual(u["dirs"], 1)
        self.assertEqual(u["entries"], 3 + 1 + 1 + 1000)  # files, link, dir, its files
        self.assertFalse(u["partial"])
        self.assertNotIn("partial_reason", u)
        self.assertEqual(u["skipped"], 0)
        # bytes are what the filesystem allocated, as lstat sees it here.
        want = host_walk(self.root)
        self.assertEqual(u["bytes"], want["bytes"])
        self.assertEqual({k: u[k] for k in want}, want)

    def test_symlink_to_a_directory_inside_is_not_entered(self):
        os.mkdir(self.p("d"))
        for i in range(10):
            with open(self.p("d", str(i)), "wb") as f:
                f.write(b"12345")
        os.symlink("d", self.p("alias"))
        u = self.du()
        self.assertEqual(u["files"], 10)
        self.assertEqual(u["apparent_bytes"], 50)
        self.assertEqual(u["entries"], 12)

    def test_max_entries_gives_partial(self):
        self.fill()
        u = self.du("--max", "10")
        self.assertTrue(u["partial"])
        self.assertEqual(u["partial_reason"], "max_entries")
        self.assertEqual(u["entries"], 10)

    def test_timeout_gives_partial(self):
        os.mkdir(self.p("big"))
        for i in range(40):
            os.mkdir(self.p("big", str(i)))
            for j in range(1000):
                open(self.p("big", str(i), str(j)), "wb").close()
        full = self.du()
        self.assertFalse(full["partial"])
        self.assertEqual(full["files"], 40000)
        u = self.du("--timeout-ms", "1")
        self.assertTrue(u["partial"], u)
        self.assertEqual(u["partial_reason"], "timeout")
        self.assertLess(u["entries"], 40040)

    def test_unreadable_directory_is_skipped_and_partial(self):
        os.mkdir(self.p("secret"))
        for i in range(5):
            open(self.p("secret", str(i)), "wb").close()
        os.chmod(self.p("secret"), 0o700)  # root's, not uid 1000's
        with open(self.p("open"), "wb") as f:
            f.write(b"abc")
        u = self.du()
        self.assertTrue(u["partial"])
        self.assertEqual(u["partial_reason"], "unreadable")
        self.assertEqual(u["skipped"], 1)
        self.assertEqual(u["files"], 1)
        self.assertEqual(u["dirs"], 1)

    def test_a_mount_below_the_root_is_not_crossed(self):
        os.mkdir(self.p("mnt"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0777", "tmpfs",
                        self.p("mnt")], check=True)
        try:
            for i in range(20):
                with open(self.p("mnt", str(i)), "wb") as f:
                    f.write(b"y" * 100)
            with open(self.p("here"), "wb") as f:
                f.write(b"z" * 7)
            u = self.du()
            self.assertEqual(u["files"], 1)
            self.assertEqual(u["apparent_bytes"], 7)
            self.assertEqual(u["skipped"], 1)
        finally:
            subprocess.run(["umount", self.p("mnt")], check=True)

    def test_bad_arguments_are_refused(self):
        for args in (["du", "/work"], ["du", "--max", "x"], ["du", "--timeout-ms", "-1"],
                     ["du", "--limit", "3"], ["du", "--id", "bad/id"]):
            self.assertError(self.run_helper(args), EXIT_BAD_REQUEST, "bad_request")

    def blocked_du(self, *extra):
        """du with its stdout a pipe we filled: its one line blocks, so it
        is caught alive. Returns (process, read end)."""
        rfd, wfd = os.pipe()
        os.set_blocking(wfd, False)
        try:
            while True:
                os.write(wfd, b"\0" * 4096)
        except BlockingIOError:
            pass
        os.set_blocking(wfd, True)
        p = subprocess.Popen(self.argv(["du"] + list(extra)), stdout=wfd,
                             stderr=subprocess.DEVNULL, env=test_helper.ENV)
        os.close(wfd)
        self.addCleanup(os.close, rfd)
        self.procs.append(p)

        def blocked():
            try:
                with open("/proc/%d/wchan" % p.pid) as f:
                    w = f.read()
                with open("/proc/%d/comm" % p.pid) as f:
                    comm = f.read().strip()
            except OSError:
                return None
            return comm == "sbx-helper" and "pipe" in w
        test_helper.wait_until(blocked, what="du blocked on its stdout")
        return p, rfd

    def test_du_is_not_dumpable(self):
        self.fill()
        p, rfd = self.blocked_du()
        # Non-dumpable: /proc/PID belongs to root, not to the sandbox user.
        self.assertEqual(os.stat("/proc/%d/fd" % p.pid).st_uid, 0)
        self.assertEqual(os.stat("/proc/%d/mem" % p.pid).st_uid, 0)
        data = b""
        while not data.endswith(b"\n"):
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            data += chunk
        p.wait(10)
        self.assertEqual(p.returncode, 0)
        self.assertEqual(json.loads(data.lstrip(b"\0"))["files"], 1003)

    def test_kill_by_id_ends_a_walk(self):
        self.fill()
        p, _ = self.blocked_du("--id", "du-1")
        self.assertTrue(os.path.exists(os.path.join(self.state, "du-1")))
        r = self.run_helper(["kill", "du-1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(p.wait(10), -9)


if __name__ == "__main__":
    unittest.main()
