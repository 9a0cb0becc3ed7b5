"""test_helper.py - sbx-helper run on the host as uid 1000 against a temporary --root (no runtime needed)."""
import base64
import hashlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILT = os.environ.get("SBX_HELPER_BIN") or os.path.join(REPO, "build", "out", "sbx-helper")
UID = GID = 1000
# What a sandbox exec has; the caller's PATH may hold directories uid 1000
# cannot search (execvp then reports EACCES instead of ENOENT).
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}

# Exit codes of proto/sbx_helper_proto.h.
EXIT_INTERNAL, EXIT_BAD_REQUEST, EXIT_OUTSIDE, EXIT_NOT_FOUND, EXIT_TOO_LARGE = 1, 2, 3, 4, 5
EXIT_FORBIDDEN = 6
EXEC_TIMEOUT, EXEC_FAILED, EXEC_NOTFOUND = 124, 125, 127
# exec --framed frames.
F_STDOUT, F_STDERR, F_EXIT, F_ERROR = 1, 2, 3, 4
PROTO = 2

BASE = None
BIN = None


def setUpModule():
    global BASE, BIN
    if os.geteuid() != 0:
        # A failure, not a skip: a skipped suite must never read as passed.
        raise RuntimeError("test_helper.py must run as root (it runs the helper as uid 1000)")
    if not os.path.exists(BUILT):
        subprocess.run(["make", "-s", "-C", REPO, "build/out/sbx-helper"], check=True)
    BASE = tempfile.mkdtemp(prefix="sbx-helper-test-")
    os.chmod(BASE, 0o755)
    # A private copy: the tests run exactly this binary, reachable by uid 1000.
    BIN = os.path.join(BASE, "sbx-helper")
    shutil.copy2(BUILT, BIN)
    os.chmod(BIN, 0o755)


def tearDownModule():
    if BASE:
        subprocess.run(["setpriv", "--reuid=%d" % UID, "--regid=%d" % GID, "--clear-groups",
                        BIN, "killall", "--state-dir", os.path.join(BASE, "state")],
                       capture_output=True, env=ENV)
        shutil.rmtree(BASE, ignore_errors=True)


def as_user(args):
    return ["setpriv", "--reuid=%d" % UID, "--regid=%d" % GID, "--clear-groups"] + args


def list_page(out):
    """sbx-helper list output: one JSON object per entry line, then the end
    line {"end":true,"truncated":B}. Returns (entries, truncated)."""
    lines = out.decode("utf-8").split("\n")
    assert lines[-1] == "", out[-80:]
    objs = [json.loads(l) for l in lines[:-1]]
    assert objs and objs[-1].get("end") is True, out[-200:]
    for o in objs[:-1]:
        assert "end" not in o
    return objs[:-1], objs[-1]["truncated"]


def list_entries(out):
    return list_page(out)[0]


def pgid_members(pgid):
    """Pids of live (non-zombie) processes whose process group is pgid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(b")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            out.append(int(d))
    return out


def wait_until(pred, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.01)


def parse_frames(data):
    """Splits exec --framed output into [(type, payload)], checking every
    header as strictly as the broker does."""
    frames = []
    i = 0
    while i < len(data):
        if len(data) - i < 8:
            raise AssertionError("half a frame header at %d" % i)
        t, v, z1, z2, n = struct.unpack(">BBBBI", data[i:i + 8])
        if v != PROTO or z1 or z2 or t not in (1, 2, 3, 4):
            raise AssertionError("bad frame header %r" % data[i:i + 8])
        if t in (1, 2) and not 1 <= n <= 1 << 20 or t == 3 and n != 8 or \
                t == 4 and not 1 <= n <= 4096:
            raise AssertionError("bad length %d for type %d" % (n, t))
        if frames and frames[-1][0] == F_EXIT:
            raise AssertionError("a frame after the exit record")
        if len(data) - i - 8 < n:
            raise AssertionError("truncated payload")
        frames.append((t, data[i + 8:i + 8 + n]))
        i += 8 + n
    return frames


class Framed:
    """Decoded exec --framed output."""

    def __init__(self, data):
        self.frames = parse_frames(data)
        self.out = b"".join(p for t, p in self.frames if t == F_STDOUT)
        self.err = b"".join(p for t, p in self.frames if t == F_STDERR)
        errs = [p for t, p in self.frames if t == F_ERROR]
        self.error = json.loads(errs[0]) if errs else None
        self.exit = None
        if self.frames and self.frames[-1][0] == F_EXIT:
            how, code, sig, flags, rest = struct.unpack(">BBBBI", self.frames[-1][1])
            assert rest == 0 and how in (1, 2), self.frames[-1]
            self.exit = {"how": how, "code": code, "signal": sig, "timeout": bool(flags & 1)}
            assert flags & ~1 == 0

    def order(self):
        """Stream types in order, runs merged."""
        out = []
        for t, _ in self.frames:
            if t in (F_STDOUT, F_STDERR) and (not out or out[-1] != t):
                out.append(t)
        return out


class HelperCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=BASE)
        os.chmod(self.dir, 0o755)
        self.root = os.path.join(self.dir, "root")
        self.state = os.path.join(self.dir, "home", "state")
        os.mkdir(self.root)
        os.mkdir(os.path.join(self.dir, "home"))
        os.chown(self.root, UID, GID)
        os.chown(os.path.join(self.dir, "home"), UID, GID)
        self.procs = []

    def tearDown(self):
        self.run_helper(["killall"])
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()

    def p(self, *parts):
        return os.path.join(self.root, *parts)

    def argv(self, args, no_openat2=False):
        g = ["--root", self.root, "--state-dir", self.state]
        if no_openat2:
            g.append("--no-openat2")
        return as_user([BIN] + g + args)

    def run_helper(self, args, stdin=b"", no_openat2=False, timeout=10):
        return subprocess.run(self.argv(args, no_openat2), input=stdin, capture_output=True,
                              timeout=timeout, env=ENV)

    def spawn(self, args, **kw):
        p = subprocess.Popen(self.argv(args), env=ENV, **kw)
        self.procs.append(p)
        return p

    def assertError(self, r, exit_code, code):
        self.assertEqual(r.returncode, exit_code, r.stderr)
        lines = r.stderr.decode().strip().split("\n")
        err = json.loads(lines[-1])
        self.assertEqual(err["sbx_helper"], 2)
        self.assertEqual(err["error"]["code"], code)
        self.assertTrue(err["error"]["message"])

    def handle(self, exec_id):
        """Waits for the kill handle of exec_id and returns its pgid."""
        path = os.path.join(self.state, exec_id)

        def read():
            try:
                with open(path) as f:
                    line = f.read()
            except FileNotFoundError:
                return None
            return int(line.split("pgid=")[1].split()[0]) if "pgid=" in line else None
        return wait_until(read, what="kill handle " + exec_id)


class TestContainerModes(HelperCase):
    """idle (a sandbox's main process) and initwork (the init container's
    chown of /work, run as root there: adr/0009)."""

    def test_idle_waits_then_exits_0_on_sigterm(self):
        p = self.spawn(["idle"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.3)
        self.assertIsNone(p.poll(), "idle returned on its own")
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(5), 0)

    def initwork(self, owner, root=None, caps="+chown,+fowner"):
        # As in the init container: root with only CAP_CHOWN and CAP_FOWNER.
        argv = ["setpriv", "--inh-caps=-all", "--bounding-set=-all," + caps, BIN,
                "--root", root or self.root, "initwork", owner]
        return subprocess.run(argv, capture_output=True, timeout=10, env=ENV)

    def test_initwork_chowns_the_root_only(self):
        os.chown(self.root, 0, 0)
        os.chmod(self.root, 0o500)
        inner = self.p("shipped")
        with open(inner, "w") as f:
            f.write("x")
        os.chown(inner, 0, 0)
        r = self.initwork("1000:1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        st = os.stat(self.root)
        self.assertEqual((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)), (1000, 1000, 0o700))
        self.assertEqual(os.stat(inner).st_uid, 0, "the contents changed owner")
        # and the sandbox user can now write there
        r = self.run_helper(["write", self.p("new"), "0644"], stdin=b"y")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_initwork_is_idempotent_and_needs_chown(self):
        self.assertEqual(self.initwork("1000:1000").returncode, 0)
        os.chown(self.root, 0, 0)
        r = self.initwork("1000:1000", caps="+fowner")
        self.assertError(r, EXIT_FORBIDDEN, "forbidden")

    def test_initwork_refuses_bad_owners_and_a_symlink_root(self):
        for owner in ("0:0", "1000", "x:1", "1000:", "1000:1000:1", "99999999999:1"):
            with self.subTest(owner=owner):
                self.assertError(self.initwork(owner), EXIT_BAD_REQUEST, "bad_request")
        link = os.path.join(self.dir, "link")
        os.symlink(self.root, link)
        r = self.initwork("1000:1000", root=link)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(os.stat(self.root).st_uid, 1000)


class TestVersion(HelperCase):
    def test_version_prints_protocol(self):
        r = self.run_helper(["version"])
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, b"sbx-helper 2\n")

    def test_unknown_mode_is_bad_request(self):
        self.assertError(self.run_helper(["frobnicate"]), EXIT_BAD_REQUEST, "bad_request")
        self.assertError(self.run_helper(["read"]), EXIT_BAD_REQUEST, "bad_request")


class TestFiles(HelperCase):
    def test_write_then_read_5mib_exact_owned_by_user(self):
        data = os.urandom(5 * 1024 * 1024)
        target = self.p("new", "deep", "dir", "blob.bin")
        r = self.run_helper(["write", target, "640"], stdin=data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"")
        st = os.stat(target)
        self.assertEqual((st.st_uid, st.st_gid), (UID, GID))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o640)
        for d in ("new", "new/deep", "new/deep/dir"):
            dst = os.stat(self.p(d))
            self.assertTrue(stat.S_ISDIR(dst.st_mode))
            self.assertEqual(dst.st_uid, UID)
            self.assertEqual(stat.S_IMODE(dst.st_mode), 0o755)
        self.assertEqual(os.listdir(self.p("new", "deep", "dir")), ["blob.bin"])
        r = self.run_helper(["read", target])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(hashlib.sha256(r.stdout).hexdigest(), hashlib.sha256(data).hexdigest())

    def test_write_replaces_a_root_owned_file(self):
        target = self.p("f")
        with open(target, "wb") as f:
            f.write(b"old content that is longer")
        r = self.run_helper(["write", target, "600"], stdin=b"new")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"new")
        st = os.stat(target)
        self.assertEqual(st.st_uid, UID)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)

    def test_write_refuses_special_mode_bits(self):
        for mode in ("4755", "2755", "1777", "999", "", "0x1ff", "07777"):
            r = self.run_helper(["write", self.p("m"), mode], stdin=b"x")
            self.assertError(r, EXIT_BAD_REQUEST, "bad_request")
        self.assertFalse(os.path.lexists(self.p("m")))

    def test_write_onto_directory_is_bad_request(self):
        os.mkdir(self.p("d"))
        self.assertError(self.run_helper(["write", self.p("d"), "644"], stdin=b"x"),
                         EXIT_BAD_REQUEST, "bad_request")
        self.assertError(self.run_helper(["write", self.root, "644"], stdin=b"x"),
                         EXIT_BAD_REQUEST, "bad_request")

    def test_read_directory_and_fifo_are_bad_request(self):
        os.mkdir(self.p("d"))
        os.mkfifo(self.p("fifo"))
        self.assertError(self.run_helper(["read", self.p("d")]), EXIT_BAD_REQUEST, "bad_request")
        # Must not block waiting for a writer.
        self.assertError(self.run_helper(["read", self.p("fifo")], timeout=5),
                         EXIT_BAD_REQUEST, "bad_request")

    def test_read_missing_is_not_found(self):
        self.assertError(self.run_helper(["read", self.p("nope")]), EXIT_NOT_FOUND, "not_found")
        self.assertError(self.run_helper(["list", self.p("nope")]), EXIT_NOT_FOUND, "not_found")

    def test_errno_errors_are_sentences_naming_the_path(self):
        def message(args, exit_code, code):
            r = self.run_helper(args, stdin=b"x")
            self.assertError(r, exit_code, code)
            return json.loads(r.stderr.decode().strip().split("\n")[-1])["error"]["message"]
        os.mkdir(self.p("d"))
        with open(self.p("f"), "wb") as f:
            f.write(b"x")
        dir_says = "/work/d is a directory; read or write a file in it, or list it."
        self.assertEqual(message(["read", self.p("d")], EXIT_BAD_REQUEST, "bad_request"),
                         dir_says)
        self.assertEqual(message(["write", self.p("d"), "644"], EXIT_BAD_REQUEST,
                                 "bad_request"), dir_says)
        gone_says = "/work/nope.txt does not exist; check the name, or list its directory."
        self.assertEqual(message(["read", self.p("nope.txt")], EXIT_NOT_FOUND, "not_found"),
                         gone_says)
        self.assertEqual(message(["list", self.p("nope.txt")], EXIT_NOT_FOUND, "not_found"),
                         gone_says)
        self.assertEqual(message(["list", self.p("f")], EXIT_BAD_REQUEST, "bad_request"),
                         "/work/f is a file, not a directory; read it, or list a directory.")
        self.assertEqual(message(["read", self.p("f", "x")], EXIT_NOT_FOUND, "not_found"),
                         "/work/f/x is not a directory, or a part of that path is a file; "
                         "check the path.")
        self.assertEqual(message(["read", self.root + "/d/../f"], EXIT_OUTSIDE, "path_outside_work"),
                         "The path has a '.' or '..' segment.")
        r = self.run_helper(["exec", "--id", "cwd9", "--cwd", self.p("nope"), "--", "true"])
        self.assertIn(b"/work/nope does not exist", r.stderr)

    def test_read_over_max_is_too_large_and_sends_nothing(self):
        with open(self.p("f"), "wb") as f:
            f.write(b"x" * 1000)
        r = self.run_helper(["read", self.p("f"), "--max", "999"])
        self.assertError(r, EXIT_TOO_LARGE, "too_large")
        self.assertEqual(r.stdout, b"")
        r = self.run_helper(["read", self.p("f"), "--max", "1000"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"x" * 1000)

    def test_write_over_max_is_too_large_and_leaves_nothing(self):
        os.mkdir(self.p("d"))
        os.chown(self.p("d"), UID, GID)
        r = self.run_helper(["write", self.p("d", "f"), "644", "--max", "65536"],
                            stdin=os.urandom(200000))
        self.assertError(r, EXIT_TOO_LARGE, "too_large")
        self.assertEqual(os.listdir(self.p("d")), [])
        r = self.run_helper(["write", self.p("d", "f"), "644", "--max", "3"], stdin=b"abc")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.p("d", "f"), "rb") as f:
            self.assertEqual(f.read(), b"abc")

    def test_list_fields(self):
        with open(self.p("file"), "wb") as f:
            f.write(b"12345")
        os.chmod(self.p("file"), 0o604)
        os.utime(self.p("file"), (1700000000, 1700000000))
        os.mkdir(self.p("dir"), 0o750)
        os.chmod(self.p("dir"), 0o750)
        os.chown(self.p("dir"), UID, GID)
        os.symlink("/etc", self.p("link"))
        os.mkfifo(self.p("fifo"))
        r = self.run_helper(["list", self.root])
        self.assertEqual(r.returncode, 0, r.stderr)
        entries = {e["name"]: e for e in list_entries(r.stdout)}
        self.assertEqual(set(entries), {"file", "dir", "link", "fifo"})
        self.assertEqual(entries["file"], {"name": "file", "type": "file", "size": 5,
                                           "mode": 0o604, "mtime": 1700000000})
        self.assertEqual(entries["dir"]["type"], "dir")
        self.assertEqual(entries["dir"]["mode"], 0o750)
        # Not followed: the link itself, not /etc.
        self.assertEqual(entries["link"]["type"], "symlink")
        self.assertEqual(entries["link"]["size"], len("/etc"))
        self.assertEqual(entries["fifo"]["type"], "other")
        self.assertEqual(self.run_helper(["list", self.p("dir")]).stdout,
                         b'{"end":true,"truncated":false}\n')
        self.assertError(self.run_helper(["list", self.p("file")]), EXIT_BAD_REQUEST,
                         "bad_request")

    def test_list_pages_are_sorted_bounded_and_continue_after_a_name(self):
        names = sorted(["b%04d" % i for i in range(250)] + ["a", "\u00e9t\u00e9", "Z", "b"])
        for n in names:
            open(os.path.join(self.root, n), "wb").close()
        seen, after, pages = [], None, 0
        while True:
            args = ["list", self.root, "--limit", "100"]
            if after is not None:
                args += ["--after-hex", after.encode().hex()]
            r = self.run_helper(args)
            self.assertEqual(r.returncode, 0, r.stderr)
            ents, trunc = list_page(r.stdout)
            self.assertLessEqual(len(ents), 100)
            page = [e["name"] for e in ents]
            self.assertEqual(page, sorted(page, key=lambda n: n.encode()))
            seen += page
            pages += 1
            if not trunc:
                break
            self.assertEqual(len(ents), 100)
            after = page[-1]
        self.assertEqual(pages, 3)
        self.assertEqual(seen, sorted(names, key=lambda n: n.encode()))
        # a cursor past everything: an empty last page
        r = self.run_helper(["list", self.root, "--after-hex", b"\xff".hex()])
        self.assertEqual(list_page(r.stdout), ([], False))
        for bad in (["--limit", "0"], ["--limit", "100001"], ["--after-hex", "2f"],
                    ["--after-hex", "00"], ["--after-hex", "abc"], ["--after-hex", "GG"]):
            self.assertError(self.run_helper(["list", self.root] + bad), EXIT_BAD_REQUEST,
                             "bad_request")

    def test_file_modes_are_not_dumpable(self):
        # The sandbox's code runs as the same user: only a non-dumpable
        # helper keeps it out of /proc/HELPER (fds, environ, memory).
        with open(self.p("big"), "wb") as f:
            f.write(b"x" * (4 << 20))
        for n in range(3000):
            open(self.p("n%05d" % n), "wb").close()
        control = subprocess.Popen(as_user(["sleep", "30"]), env=ENV)
        self.procs.append(control)
        probe = ["sh", "-c", 'cat /proc/$0/environ >/dev/null 2>&1 && echo open || echo refused']
        def is_sleep():
            with open("/proc/%d/comm" % control.pid) as f:
                return f.read().strip() == "sleep"
        wait_until(is_sleep, what="sleep")
        r = subprocess.run(as_user(probe + [str(control.pid)]), capture_output=True, env=ENV)
        self.assertEqual(r.stdout, b"open\n")   # the probe can read a dumpable process
        cases = [(["write", self.p("w"), "644"], dict(stdin=subprocess.PIPE)),
                 (["read", self.p("big")], dict(stdout=subprocess.PIPE)),
                 (["list", self.root], dict(stdout=subprocess.PIPE))]
        for args, kw in cases:
            # write waits for stdin; read and list block on a full stdout pipe
            p = self.spawn(args + ["--id", "dump-" + args[0]], **kw)
            time.sleep(0.5)
            self.assertIsNone(p.poll(), args)
            r = subprocess.run(as_user(probe + [str(p.pid)]), capture_output=True, env=ENV)
            self.assertEqual(r.stdout, b"refused\n", args)
            # the kill handle names it: kill ends it even when stopped
            os.kill(p.pid, signal.SIGSTOP)
            r = self.run_helper(["kill", "dump-" + args[0]])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(p.wait(10), -signal.SIGKILL, args)

    def test_list_escapes_names_and_marks_invalid_utf8(self):
        names = [b'q"uote', b"back\\slash", b"new\nline", b"ctl\x01\x1f\x7f", b"caf\xc3\xa9",
                 b"emoji\xf0\x9f\x98\x80", b"bad\xff", b"surrogate\xed\xa0\x80",
                 b"overlong\xc0\xaf", b"trunc\xe2\x82"]
        for n in names:
            open(os.path.join(self.root.encode(), n), "wb").close()
        r = self.run_helper(["list", self.root])
        self.assertEqual(r.returncode, 0, r.stderr)
        entries = list_entries(r.stdout)
        got = {}
        for e in entries:
            raw = base64.b64decode(e["name_b64"]) if "name_b64" in e else e["name"].encode()
            got[raw] = e
        self.assertEqual(set(got), set(names))
        for n in names:
            try:
                text = n.decode("utf-8")
            except UnicodeDecodeError:
                self.assertIn("name_b64", got[n])
                self.assertIn("\ufffd", got[n]["name"])
            else:
                self.assertEqual(got[n]["name"], text)
                self.assertNotIn("name_b64", got[n])


class TestPaths(HelperCase):
    def setUp(self):
        super().setUp()
        # A decoy outside the root that uid 1000 *could* write: an escape would show.
        self.decoy = os.path.join(self.dir, "decoy")
        os.mkdir(self.decoy)
        with open(os.path.join(self.decoy, "target"), "wb") as f:
            f.write(b"decoy")
        os.chown(self.decoy, UID, GID)
        os.chown(os.path.join(self.decoy, "target"), UID, GID)
        os.symlink("/etc", self.p("e"))
        os.symlink("/etc/passwd", self.p("p"))
        os.symlink(self.decoy, self.p("d"))
        os.symlink(os.path.join(self.decoy, "target"), self.p("dt"))
        os.symlink("../decoy", self.p("rel"))
        os.symlink("../decoy/target", self.p("relt"))

    def decoy_untouched(self):
        self.assertEqual(sorted(os.listdir(self.decoy)), ["target"])
        with open(os.path.join(self.decoy, "target"), "rb") as f:
            self.assertEqual(f.read(), b"decoy")

    def test_read_through_escaping_symlinks_is_refused(self):
        for args in (["read", self.p("e", "passwd")], ["read", self.p("p")],
                     ["read", self.p("d", "target")], ["read", self.p("relt")],
                     ["list", self.p("e")], ["list", self.p("rel")]):
            for fallback in (False, True):
                r = self.run_helper(args, no_openat2=fallback)
                self.assertError(r, EXIT_OUTSIDE, "path_outside_work")
                self.assertEqual(r.stdout, b"")

    def test_write_through_escaping_symlinks_is_refused(self):
        before = os.listdir("/etc")
        for path in (self.p("e", "sbx-helper-test"), self.p("p"), self.p("d", "new"),
                     self.p("d", "target"), self.p("dt"), self.p("rel", "new"),
                     self.p("relt"), self.p("d", "sub", "dir", "new"),
                     self.p("rel", "sub", "new")):
            for fallback in (False, True):
                r = self.run_helper(["write", path, "644"], stdin=b"pwned", no_openat2=fallback)
                self.assertError(r, EXIT_OUTSIDE, "path_outside_work")
                self.decoy_untouched()
        self.assertEqual(os.listdir("/etc"), before)
        # The links themselves were not replaced either.
        self.assertEqual(os.readlink(self.p("p")), "/etc/passwd")
        self.assertEqual(os.readlink(self.p("dt")), os.path.join(self.decoy, "target"))

    def test_refused_write_still_consumes_its_input(self):
        # Podman's exec stream drops the error line when the process exits
        # with input unread, so a refused write reads (and drops) its body.
        p = self.spawn(["write", self.p("d", "x"), "644", "--max", str(4 << 20)],
                       stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(os.urandom(2 << 20))  # BrokenPipeError if the helper quit early
        p.stdin.close()
        self.assertEqual(p.wait(timeout=5), EXIT_OUTSIDE)
        self.assertIn(b"path_outside_work", p.stderr.read())
        self.decoy_untouched()

    def test_exec_cwd_through_escaping_symlink_is_refused(self):
        r = self.run_helper(["exec", "--id", "cwd1", "--cwd", self.p("d"), "--", "pwd"])
        self.assertError(r, EXEC_FAILED, "path_outside_work")
        self.assertEqual(r.stdout, b"")

    def test_symlinks_that_stay_inside_are_followed(self):
        os.makedirs(self.p("real", "sub"))
        with open(self.p("real", "sub", "f"), "wb") as f:
            f.write(b"inside")
        os.symlink("real", self.p("in"))
        os.symlink("real/sub/f", self.p("inf"))
        r = self.run_helper(["read", self.p("in", "sub", "f")])
        self.assertEqual((r.returncode, r.stdout), (0, b"inside"), r.stderr)
        os.chown(self.p("real", "sub"), UID, GID)
        r = self.run_helper(["write", self.p("inf"), "644"], stdin=b"through")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.readlink(self.p("inf")), "real/sub/f")
        with open(self.p("real", "sub", "f"), "rb") as f:
            self.assertEqual(f.read(), b"through")

    def test_fallback_refuses_every_symlink_but_works_without(self):
        os.makedirs(self.p("real"))
        with open(self.p("real", "f"), "wb") as f:
            f.write(b"inside")
        os.symlink("real", self.p("in"))
        r = self.run_helper(["read", self.p("in", "f")], no_openat2=True)
        self.assertError(r, EXIT_OUTSIDE, "path_outside_work")
        r = self.run_helper(["read", self.p("real", "f")], no_openat2=True)
        self.assertEqual((r.returncode, r.stdout), (0, b"inside"))
        data = os.urandom(100000)
        r = self.run_helper(["write", self.p("a", "b", "c"), "600"], stdin=data, no_openat2=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.run_helper(["read", self.p("a", "b", "c")], no_openat2=True)
        self.assertEqual(r.stdout, data)
        r = self.run_helper(["list", self.p("a")], no_openat2=True)
        self.assertEqual([e["name"] for e in list_entries(r.stdout)], ["b"])

    def test_bad_paths_are_refused(self):
        bad = ["relative/path", "", "/etc/passwd", self.root + "x/f", self.root + "/../x",
               self.root + "/./x", self.root + "//x", self.root + "/x/", self.root + "/a/..",
               self.root + "/" + "n" * 256, self.root + "/" + "a/" * 2100 + "f"]
        for path in bad:
            for mode in (["read", path], ["write", path, "644"], ["list", path]):
                r = self.run_helper(mode, stdin=b"x")
                self.assertError(r, EXIT_OUTSIDE, "path_outside_work")
        self.decoy_untouched()
        self.assertFalse(os.path.exists(self.root + "x"))


class TestExec(HelperCase):
    def test_exit_code_passthrough(self):
        r = self.run_helper(["exec", "--id", "e1", "--", "sh", "-c", "exit 42"])
        self.assertEqual(r.returncode, 42)
        self.assertEqual(r.stderr, b"")
        r = self.run_helper(["exec", "--id", "e2", "--", "sh", "-c", "kill -TERM $$"])
        self.assertEqual(r.returncode, 128 + signal.SIGTERM)

    def test_exit_code_survives_an_inherited_ignored_sigchld(self):
        r = subprocess.run(self.argv(["exec", "--id", "ign", "--", "sh", "-c", "exit 5"]),
                           env=ENV, capture_output=True, timeout=10,
                           preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN))
        self.assertEqual(r.returncode, 5, r.stderr)

    def test_runs_as_the_user_in_cwd(self):
        os.mkdir(self.p("w"))
        r = self.run_helper(["exec", "--id", "e3", "--cwd", self.p("w"), "--", "sh", "-c",
                             "id -u; pwd"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode().split(), [str(UID), self.p("w")])

    def test_stdio_passthrough_is_binary_exact(self):
        blob = bytes(range(256)) * 64 + b"\x00\xff\r\n" + os.urandom(4096)
        with open(self.p("blob"), "wb") as f:
            f.write(blob)
        r = self.run_helper(["exec", "--id", "e4", "--", "sh", "-c",
                             'cat "$1"; cat "$1" >&2; cat', "sh", self.p("blob")],
                            stdin=blob[::-1])
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, blob + blob[::-1])
        self.assertEqual(r.stderr, blob)

    def test_command_not_found(self):
        r = self.run_helper(["exec", "--id", "e5", "--", "no-such-command-sbx"])
        self.assertError(r, EXEC_NOTFOUND, "not_found")
        self.assertFalse(os.path.exists(os.path.join(self.state, "e5")))

    def test_bad_exec_ids_and_usage(self):
        for bad in ("", "a/b", "a.b", "..", "x" * 65, "sp ace", "é"):
            r = self.run_helper(["exec", "--id", bad, "--", "true"])
            self.assertError(r, EXEC_FAILED, "bad_request")
            r = self.run_helper(["kill", bad])
            self.assertError(r, EXIT_BAD_REQUEST, "bad_request")
        self.assertError(self.run_helper(["exec", "--id", "ok", "--"]), EXEC_FAILED,
                         "bad_request")
        self.assertError(self.run_helper(["exec", "--", "true"]), EXEC_FAILED, "bad_request")
        r = self.run_helper(["exec", "--id", "x" * 64, "--", "true"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def start_tree(self, exec_id, extra=()):
        """Starts sh with a background and a foreground sleep; returns (proc, pgid)."""
        p = self.spawn(["exec", "--id", exec_id] + list(extra) +
                       ["--", "sh", "-c", "sleep 300 & sleep 300"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        pgid = self.handle(exec_id)
        # sh plus both sleeps, all in the exec's own group.
        wait_until(lambda: len(pgid_members(pgid)) >= 3, what="process tree")
        self.assertNotEqual(pgid, os.getpgid(0))
        return p, pgid

    def assertTreeGone(self, pgid):
        wait_until(lambda: not pgid_members(pgid), what="group %d to die" % pgid)

    def test_kill_from_another_process_kills_background_jobs(self):
        p, pgid = self.start_tree("k1")
        r = self.run_helper(["kill", "k1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(p.wait(timeout=5), 128 + signal.SIGKILL)
        self.assertTreeGone(pgid)
        self.assertFalse(os.path.exists(os.path.join(self.state, "k1")))
        # Idempotent.
        self.assertEqual(self.run_helper(["kill", "k1"]).returncode, 0)

    def test_kill_reaches_the_group_when_the_helper_died(self):
        p, pgid = self.start_tree("orphan")
        p.kill()  # the helper itself, e.g. by the sandbox's own code or OOM
        p.wait(timeout=5)
        self.assertTrue(pgid_members(pgid))
        r = self.run_helper(["kill", "orphan"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTreeGone(pgid)
        # The stale handle is retired.
        self.assertFalse(os.path.exists(os.path.join(self.state, "orphan")))

    def test_leftover_background_jobs_die_with_the_command(self):
        r = self.run_helper(["exec", "--id", "bg", "--", "sh", "-c",
                             "sleep 300 & echo $$; exit 3"])
        self.assertEqual(r.returncode, 3)
        self.assertTreeGone(int(r.stdout))

    def test_timeout_backstop_kills_the_tree(self):
        p, pgid = self.start_tree("t1", ["--timeout-ms", "400"])
        self.assertEqual(p.wait(timeout=5), EXEC_TIMEOUT)
        err = json.loads(p.stderr.read().decode().strip().split("\n")[-1])
        self.assertEqual(err["error"]["code"], "timeout")
        self.assertTreeGone(pgid)

    def test_sigterm_to_helper_is_forwarded_to_the_group(self):
        p, pgid = self.start_tree("s1")
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=5), 128 + signal.SIGTERM)
        self.assertTreeGone(pgid)

    def test_killall_kills_every_exec(self):
        p1, g1 = self.start_tree("a1")
        p2, g2 = self.start_tree("a2")
        r = self.run_helper(["killall"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(p1.wait(timeout=5), 128 + signal.SIGKILL)
        self.assertEqual(p2.wait(timeout=5), 128 + signal.SIGKILL)
        self.assertTreeGone(g1)
        self.assertTreeGone(g2)
        self.assertEqual(os.listdir(self.state), [])

    def test_killall_with_no_state_is_fine(self):
        r = self.run_helper(["killall"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_kill_before_start_cancels_the_exec(self):
        self.assertEqual(self.run_helper(["kill", "early"]).returncode, 0)
        r = self.run_helper(["exec", "--id", "early", "--", "sh", "-c",
                             "touch " + self.p("ran")])
        self.assertError(r, EXEC_FAILED, "cancelled")
        self.assertFalse(os.path.exists(self.p("ran")))

    def test_exec_id_in_use_is_refused(self):
        p, pgid = self.start_tree("dup")
        r = self.run_helper(["exec", "--id", "dup", "--", "sh", "-c", "touch " + self.p("ran")])
        self.assertError(r, EXEC_FAILED, "bad_request")
        self.assertFalse(os.path.exists(self.p("ran")))
        self.assertTrue(pgid_members(pgid))
        self.run_helper(["kill", "dup"])
        self.assertEqual(p.wait(timeout=5), 128 + signal.SIGKILL)

    def test_state_dir_is_private(self):
        self.run_helper(["exec", "--id", "p1", "--", "true"])
        st = os.lstat(self.state)
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
        self.assertEqual(st.st_uid, UID)


class TestFramedExec(HelperCase):
    """exec --framed: the command's output and the helper's records as frames on stdout."""

    def framed(self, exec_id, cmd, stdin=b"", extra=(), timeout=20):
        r = self.run_helper(["exec", "--framed", "--id", exec_id] + list(extra) + ["--"] + cmd,
                            stdin=stdin, timeout=timeout)
        return r, Framed(r.stdout)

    def test_stdout_comes_before_stderr_every_time(self):
        for i in range(50):
            r, f = self.framed("o%d" % i, ["sh", "-c", "echo out; echo err >&2; exit 3"])
            self.assertEqual(f.order(), [F_STDOUT, F_STDERR], f.frames)
            self.assertEqual((f.out, f.err), (b"out\n", b"err\n"))
            self.assertEqual(f.exit, {"how": 1, "code": 3, "signal": 0, "timeout": False})
            self.assertEqual(r.returncode, 3)
            self.assertEqual(r.stderr, b"")

    def test_interleaved_writes_keep_their_order(self):
        script = "echo 1; echo 2 >&2; sleep 0.05; echo 3; sleep 0.05; echo 4 >&2"
        r, f = self.framed("il", ["sh", "-c", script])
        self.assertEqual(f.order(), [F_STDOUT, F_STDERR, F_STDOUT, F_STDERR], f.frames)

    def test_binary_bytes_exact_both_streams_and_stdin(self):
        blob = bytes(range(256)) * 64 + b"\x00\xff\r\n" + os.urandom(300 * 1024)
        with open(self.p("blob"), "wb") as fh:
            fh.write(blob)
        r, f = self.framed("bin", ["sh", "-c", 'cat "$1"; cat "$1" >&2; cat', "sh",
                                   self.p("blob")], stdin=blob[::-1])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(f.out == blob + blob[::-1], "stdout bytes differ")
        self.assertTrue(f.err == blob, "stderr bytes differ")
        self.assertTrue(all(len(p) <= 65536 for t, p in f.frames if t in (1, 2)))
        self.assertEqual(f.exit["code"], 0)

    def test_exit_record_code_and_signal(self):
        r, f = self.framed("x1", ["sh", "-c", "exit 42"])
        self.assertEqual(f.exit, {"how": 1, "code": 42, "signal": 0, "timeout": False})
        r, f = self.framed("x2", ["sh", "-c", "kill -TERM $$"])
        self.assertEqual(f.exit, {"how": 2, "code": 0, "signal": signal.SIGTERM,
                                  "timeout": False})
        self.assertEqual(r.returncode, 128 + signal.SIGTERM)
        # A code that looks like a signal stays a code.
        r, f = self.framed("x3", ["sh", "-c", "exit 137"])
        self.assertEqual(f.exit, {"how": 1, "code": 137, "signal": 0, "timeout": False})
        self.assertIsNone(f.error)

    def test_timeout_record_after_the_tree_is_gone(self):
        t0 = time.monotonic()
        r, f = self.framed("tm", ["sh", "-c", "echo $$; sleep 300 & sleep 300"],
                           extra=["--timeout-ms", "400"])
        self.assertLess(time.monotonic() - t0, 3.0)
        self.assertEqual(r.returncode, EXEC_TIMEOUT)
        self.assertEqual(f.exit, {"how": 2, "code": 0, "signal": signal.SIGKILL, "timeout": True})
        self.assertEqual(f.error["sbx_helper"], PROTO)
        self.assertEqual(f.error["error"]["code"], "timeout")
        self.assertEqual([t for t, _ in f.frames][-2:], [F_ERROR, F_EXIT])
        self.assertFalse(pgid_members(int(f.out)))

    def test_helper_errors_are_records_not_stderr(self):
        r, f = self.framed("nf", ["no-such-command-sbx"])
        self.assertEqual(r.returncode, EXEC_NOTFOUND)
        self.assertEqual(r.stderr, b"")
        self.assertEqual(f.error["error"]["code"], "not_found")
        self.assertEqual(f.exit, {"how": 1, "code": EXEC_NOTFOUND, "signal": 0, "timeout": False})
        r, f = self.framed("cw", ["true"], extra=["--cwd", "/etc"])
        self.assertEqual(r.returncode, EXEC_FAILED)
        self.assertEqual(f.error["error"]["code"], "path_outside_work")
        self.assertEqual(f.exit["code"], EXEC_FAILED)

    def test_command_cannot_forge_frames_through_proc(self):
        # The helper's stdout is a pipe the sandbox user owns (created by a
        # shell of that user), so only the helper being not dumpable keeps
        # the command from opening /proc/HELPER/fd/1 and writing frames.
        forge = ("printf '\\003\\002\\0\\0\\0\\0\\0\\010\\001\\0\\0\\0\\0\\0\\0\\0' "
                 ">/proc/$PPID/fd/1 && echo forged || echo refused; exit 5")
        args = [BIN, "--root", self.root, "--state-dir", self.state, "exec", "--framed",
                "--id", "fg", "--", "sh", "-c", forge]
        r = subprocess.run(as_user(["sh", "-c", '"$0" "$@" | cat'] + args),
                           capture_output=True, timeout=20, env=ENV)
        f = Framed(r.stdout)
        self.assertEqual(f.out, b"refused\n", f.frames)
        self.assertEqual(f.exit["code"], 5)

    def test_a_process_that_left_the_group_does_not_hold_the_exec(self):
        t0 = time.monotonic()
        r, f = self.framed("esc", ["sh", "-c", "setsid sleep 317 & echo $!; exit 4"])
        took = time.monotonic() - t0
        pid = int(f.out)
        try:
            self.assertLess(took, 2.0)
            self.assertEqual(f.exit["code"], 4)
        finally:
            os.kill(pid, signal.SIGKILL)

    def test_reader_gone_kills_the_group(self):
        # Whether the command writes (EPIPE) or stays silent (POLLERR on
        # the helper's stdout): the exec ends with its reader.
        for exec_id, cmd in (("rg1", "yes"), ("rg2", "sleep 300 & sleep 300")):
            p = self.spawn(["exec", "--framed", "--id", exec_id, "--", "sh", "-c", cmd],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            pgid = self.handle(exec_id)
            if exec_id == "rg1":
                p.stdout.read(8)
            else:
                wait_until(lambda: len(pgid_members(pgid)) >= 3, what="process tree")
            p.stdout.close()
            p.wait(timeout=5)
            self.assertTreeGone(pgid)

    def test_backstop_holds_when_nobody_reads(self):
        p = self.spawn(["exec", "--framed", "--id", "st", "--timeout-ms", "500", "--", "yes"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        pgid = self.handle("st")
        t0 = time.monotonic()
        self.assertEqual(p.wait(timeout=10), EXEC_TIMEOUT)
        self.assertLess(time.monotonic() - t0, 3.0)
        self.assertTreeGone(pgid)

    def assertTreeGone(self, pgid):
        wait_until(lambda: not pgid_members(pgid), what="group %d to die" % pgid)


if __name__ == "__main__":
    unittest.main()
