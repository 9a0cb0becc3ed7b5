"""test_deploy_units - `make install DESTDIR=...` and the systemd units of deploy/systemd/.

This machine has no systemd as PID 1, so the units are checked offline against
the installed tree: `systemd-analyze verify --root=TREE` (the DESTDIR tree plus a
copy of the system's own units, so sysinit.target & co. resolve; ExecStart
binaries are looked up inside TREE), `systemd-analyze security --offline=yes
--root=TREE` for the exposure scores, and `systemd-sysusers --root=TREE` for the
users. No runtime needed.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

import sbxtest
from sbxtest import REPO

SBX_ONCE = True

UNITS = ("sandbox-broker.service", "sandbox-api.service")
MAX_SCORE = {"sandbox-api.service": 2.0, "sandbox-broker.service": 4.0}


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, timeout=300, **kw)


def make_install(dest, *vars):
    r = run(["make", "-s", "-C", REPO, "install", "DESTDIR=" + dest] + list(vars))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def unit_tree(root):
    """DESTDIR tree ROOT made verifiable: the host's system units copied in."""
    shutil.copytree("/usr/lib/systemd/system", os.path.join(root, "usr/lib/systemd/system"),
                    symlinks=True, dirs_exist_ok=True)
    os.makedirs(os.path.join(root, "etc/systemd/system"), exist_ok=True)


def verify(root, *units):
    return run(["systemd-analyze", "verify", "--man=no", "--root=" + root] + list(units))


def exposure(root, unit):
    r = run(["systemd-analyze", "security", "--offline=yes", "--root=" + root, unit])
    out = r.stdout.decode() + r.stderr.decode()
    m = re.search(r"Overall exposure level for %s: (\d+\.\d+)" % re.escape(unit), out)
    assert m, out
    return float(m.group(1)), out


class DeployUnitsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="sbx-units-", dir=sbxtest.out_dir())
        make_install(cls.root)
        unit_tree(cls.root)
        cls.unitdir = os.path.join(cls.root, "usr/local/lib/systemd/system")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, True)

    # ------------------------------------------------------------ make install

    def test_make_install_puts_binaries_helper_units_and_no_sbx(self):
        for rel in ("usr/local/bin/sandbox-broker", "usr/local/bin/sandbox-api",
                    "usr/local/bin/sbxctl", "usr/local/libexec/sbx/sbx-helper"):
            path = os.path.join(self.root, rel)
            self.assertTrue(os.path.isfile(path) and os.access(path, os.X_OK), rel)
        for u in UNITS:
            self.assertEqual(os.stat(os.path.join(self.unitdir, u)).st_mode & 0o777, 0o644, u)
        self.assertTrue(os.path.isfile(os.path.join(self.root, "usr/local/lib/sysusers.d/sbx.conf")))
        # `command -v sbx` finds nothing on a PATH of the installed bin dirs; sbxctl runs.
        path = ":".join(os.path.join(self.root, d) for d in
                        ("usr/local/bin", "usr/local/sbin", "usr/bin", "usr/sbin"))
        r = run(["/bin/sh", "-c", "command -v sbx"], env={"PATH": path})
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertEqual(r.stdout, b"")
        r = run(["/bin/sh", "-c", "sbxctl --version"], env={"PATH": path})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(b"sbxctl "), r.stdout)
        found = [os.path.join(d, f) for d, _, fs in os.walk(self.root) for f in fs
                 if f == "sbx" and not d.startswith(os.path.join(self.root, "usr/lib/systemd"))]
        self.assertEqual(found, [])

    def test_install_rewrites_unit_paths_to_prefix_and_uninstall_removes_everything(self):
        root = tempfile.mkdtemp(prefix="sbx-units-usr-", dir=sbxtest.out_dir())
        self.addCleanup(shutil.rmtree, root, True)
        make_install(root, "PREFIX=/usr", "LIBEXECDIR=/usr/lib/sbx")
        with open(os.path.join(root, "usr/lib/systemd/system/sandbox-broker.service")) as f:
            broker = f.read()
        with open(os.path.join(root, "usr/lib/systemd/system/sandbox-api.service")) as f:
            api = f.read()
        self.assertIn("\nExecStart=/usr/bin/sandbox-broker --helper-path /usr/lib/sbx/sbx-helper\n", broker)
        self.assertIn("\nExecStart=/usr/bin/sandbox-api\n", api)
        self.assertNotIn("/usr/local/bin/", broker + api)
        self.assertTrue(os.path.isfile(os.path.join(root, "usr/lib/sbx/sbx-helper")))
        unit_tree(root)
        r = verify(root, *UNITS)
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, b""))
        r = run(["make", "-s", "-C", REPO, "uninstall", "DESTDIR=" + root, "PREFIX=/usr",
                 "LIBEXECDIR=/usr/lib/sbx"])
        self.assertEqual(r.returncode, 0, r.stderr)
        left = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                if not d.startswith(os.path.join(root, "usr/lib/systemd/system"))
                or f in UNITS]
        self.assertEqual(left, [])

    # ------------------------------------------------------------ systemd-analyze

    def test_every_unit_passes_systemd_analyze_verify(self):
        r = verify(self.root, *UNITS)
        # Unknown keys and unsafe settings are warnings with exit 0: any output fails.
        self.assertEqual((r.returncode, (r.stdout + r.stderr).decode()), (0, ""))

    def test_verify_is_real_it_fails_a_broken_unit(self):
        """The check above can fail: a misspelled key and a missing binary are reported."""
        d = os.path.join(self.root, "etc/systemd/system")
        with open(os.path.join(self.unitdir, "sandbox-api.service")) as f:
            text = f.read()
        bad = os.path.join(d, "sbx-broken.service")
        self.addCleanup(os.unlink, bad)
        with open(bad, "w") as f:
            f.write(text.replace("ProtectSystem=strict", "ProtectSystm=strict"))
        r = verify(self.root, "sbx-broken.service")
        self.assertIn(b"Unknown key", r.stdout + r.stderr)
        with open(bad, "w") as f:
            f.write(text.replace("/usr/local/bin/sandbox-api", "/usr/local/bin/sandbox-nope"))
        r = verify(self.root, "sbx-broken.service")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"not executable", r.stdout + r.stderr)

    def test_security_exposure_api_at_most_2_broker_at_most_4(self):
        scores = {}
        for u in UNITS:
            scores[u], out = exposure(self.root, u)
            print("systemd-analyze security --offline=yes %s: %.1f (limit %.1f)"
                  % (u, scores[u], MAX_SCORE[u]))
        for u in UNITS:
            self.assertLessEqual(scores[u], MAX_SCORE[u], u)
        # The measure is real: the api unit without its sandboxing scores far worse.
        with open(os.path.join(self.unitdir, "sandbox-api.service")) as f:
            lines = f.read().splitlines()
        keep = ("[", "#", "Description", "Wants", "After", "Type", "ExecStart", "Restart",
                "Timeout", "Limit", "LoadCredential", "StateDirectory", "WantedBy")
        bare = os.path.join(self.root, "etc/systemd/system/sbx-bare.service")
        self.addCleanup(os.unlink, bare)
        with open(bare, "w") as f:
            f.write("\n".join(l for l in lines if not l or l.startswith(keep)) + "\n")
        score, _ = exposure(self.root, "sbx-bare.service")
        print("the same api unit without its sandboxing lines: %.1f" % score)
        self.assertGreater(score, 5.0)

    # ------------------------------------------------------------ what the units promise

    def read_unit(self, name):
        with open(os.path.join(self.unitdir, name)) as f:
            text = f.read()
        settings = {}
        for line in text.splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                settings.setdefault(k, []).append(v)
        return settings

    def test_units_run_as_their_own_users_with_credentials_not_environment(self):
        api = self.read_unit("sandbox-api.service")
        broker = self.read_unit("sandbox-broker.service")
        self.assertEqual(api["User"], ["sbx-api"])
        self.assertEqual(broker["User"], ["sbx-broker"])
        for s in (api, broker):
            self.assertEqual(s["LoadCredential"], ["broker-token:/etc/sbx/broker-token"])
            self.assertEqual(s["CapabilityBoundingSet"], [""])
            self.assertEqual(s["ProtectSystem"], ["strict"])
            self.assertEqual(s["NoNewPrivileges"], ["yes"])
            for k in s:
                self.assertFalse(k.startswith("Environment"), k)
        self.assertEqual(broker["StateDirectory"], ["sbx"])
        self.assertEqual(broker["RuntimeDirectory"], ["sbx"])
        self.assertEqual(api["StateDirectory"], ["sbx-api"])
        self.assertEqual(api["SupplementaryGroups"], ["sbx-broker"])
        self.assertEqual(broker["RestrictAddressFamilies"], ["AF_UNIX"])
        # The api's built-in defaults are what the broker unit provides.
        r = run([os.path.join(self.root, "usr/local/bin/sandbox-api"), "--print-config"],
                env={"PATH": "/usr/bin:/bin"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, rb'"broker": *"unix:/run/sbx/broker.sock"')
        self.assertRegex(r.stdout, rb'"state_dir": *"/var/lib/sbx-api"')
        r = run([os.path.join(self.root, "usr/local/bin/sandbox-broker"), "--print-config"],
                env={"PATH": "/usr/bin:/bin"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, rb'"listen": *"unix:/run/sbx/broker.sock"')
        self.assertRegex(r.stdout, rb'"state_dir": *"/var/lib/sbx"')

    def test_units_bound_memory_and_tasks_as_documented(self):
        with open(os.path.join(REPO, "docs", "operations.md")) as f:
            row = [l for l in f.read().splitlines() if l.startswith("| memory, tasks |")]
        self.assertEqual(len(row), 1, "docs/operations.md has no memory, tasks row")
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        for unit, cell in (("sandbox-broker.service", cells[1]),
                           ("sandbox-api.service", cells[2])):
            s = self.read_unit(unit)
            self.assertEqual(len(s.get("MemoryMax", [])), 1, unit)
            self.assertEqual(len(s.get("TasksMax", [])), 1, unit)
            mem, tasks = s["MemoryMax"][0], s["TasksMax"][0]
            # A real bound: bytes with a unit, not infinity or a percentage.
            self.assertRegex(mem, r"^[0-9]+[KMG]$", unit)
            self.assertRegex(tasks, r"^[0-9]+$", unit)
            self.assertLessEqual(int(tasks), 256, unit)
            # What the docs say is what the unit does.
            self.assertEqual(cell, "`MemoryMax=%s`, `TasksMax=%s`" % (mem, tasks), unit)
            # And systemd reads it so (a typo would be ignored with a warning).
            r = run(["systemd-analyze", "verify", "--man=no", "--root=" + self.root, unit])
            self.assertNotIn(b"MemoryMax", r.stderr + r.stdout, unit)
            self.assertNotIn(b"TasksMax", r.stderr + r.stdout, unit)

    def test_sysusers_creates_the_users_and_puts_the_broker_in_group_docker(self):
        root = tempfile.mkdtemp(prefix="sbx-sysusers-", dir=sbxtest.out_dir())
        self.addCleanup(shutil.rmtree, root, True)
        make_install(root)
        # A host where Docker's package made its group already.
        os.makedirs(os.path.join(root, "etc"))
        with open(os.path.join(root, "etc/passwd"), "w") as f:
            f.write("root:x:0:0:root:/root:/bin/sh\n")
        with open(os.path.join(root, "etc/group"), "w") as f:
            f.write("root:x:0:\ndocker:x:998:\n")
        r = run(["systemd-sysusers", "--root=" + root])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(root, "etc/passwd")) as f:
            users = {l.split(":")[0]: l.split(":") for l in f.read().splitlines()}
        with open(os.path.join(root, "etc/group")) as f:
            groups = {l.split(":")[0]: l.split(":") for l in f.read().splitlines()}
        for u, home in (("sbx-broker", "/var/lib/sbx"), ("sbx-api", "/var/lib/sbx-api"),
                        ("sbx-vm", "/nonexistent")):
            self.assertIn(u, users)
            self.assertNotEqual(users[u][2], "0")
            self.assertEqual(users[u][5], home)
            self.assertIn(u, groups)
        self.assertEqual(users["sbx-vm"][6], "/usr/sbin/nologin")   # qemu's (vm_runas)
        self.assertEqual(groups["docker"][2], "998")
        self.assertIn("sbx-broker", groups["docker"][3].split(","))
        self.assertNotIn("sbx-api", groups["docker"][3].split(","))


if __name__ == "__main__":
    unittest.main()
