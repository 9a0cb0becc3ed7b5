"""test_e2b - issue 23's must-show: the real npm `e2b` SDK (tests/e2b, pinned by
its package-lock.json and installed by `npm ci`: make check does) runs
tests/e2b/scenario.mjs against a real sandbox-api and broker on the runtime
under test, configured with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
(a player's key), all on 127.0.0.1.

The scenario prints one TAP line per named case; each case is one test here
(`node scenario.mjs --list` names them when this module loads), so a failure
says which case and why. The scenario runs once, in setUpClass; a case it did
not report fails too. A missing node or node_modules fails every test loudly
(deploy/deps.sh and `make check` install them): nothing is skipped.
"""

import os
import re
import subprocess
import tempfile
import time
import unittest

import sbxtest
from sbxtest import REPO
from stackfix import Stack

E2B = os.path.join(REPO, "tests", "e2b")
NODE = "/usr/bin/node"
SCENARIO = os.path.join(E2B, "scenario.mjs")
TIMEOUT = 420  # s for the whole scenario (it takes well under a minute)


def need_tools():
    """AssertionError naming what is missing when node or the SDK is not there."""
    for path in (NODE, os.path.join(E2B, "node_modules", "e2b", "package.json")):
        if not os.path.exists(path):
            raise AssertionError("%s is missing: run deploy/deps.sh and `npm ci` in tests/e2b "
                                 "(make check does both)" % path)


def case_names():
    need_tools()
    r = subprocess.run([NODE, SCENARIO, "--list"], cwd=E2B, capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin"})
    if r.returncode != 0 or not r.stdout.strip():
        raise AssertionError("scenario.mjs --list failed: %s" % r.stderr[-2000:])
    return r.stdout.splitlines()


TAP = re.compile(r"^(ok|not ok) (\d+) - (.*?)(?: # (.*))?$")


class E2BScenarioTest(unittest.TestCase):
    """One test per case of scenario.mjs (added below, in the scenario's order)."""

    @classmethod
    def setUpClass(cls):
        need_tools()
        cls.stack = Stack("sbxe2b%d-" % (os.getpid() % 100000))
        try:
            cls.run_scenario()
        except BaseException:
            cls.stack.close()
            raise

    @classmethod
    def run_scenario(cls):
        st = cls.stack
        home = tempfile.mkdtemp(prefix="sbxe2b-home-", dir=sbxtest.out_dir())
        # Only the three settings (and what node itself needs to start).
        env = {"PATH": "/usr/bin:/bin", "HOME": home,
               "E2B_API_URL": st.url + "/e2b", "E2B_SANDBOX_URL": st.url + "/e2b/envd",
               "E2B_API_KEY": st.player}
        t0 = time.monotonic()
        try:
            r = subprocess.run([NODE, SCENARIO], cwd=E2B, env=env, capture_output=True,
                               text=True, timeout=TIMEOUT)
            out, err, rc = r.stdout, r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            rc = "timeout after %d s" % TIMEOUT
        cls.seconds = time.monotonic() - t0
        cls.stdout, cls.stderr, cls.rc = out, err, rc
        cls.results = {}
        for line in out.splitlines():
            m = TAP.match(line)
            if m:
                cls.results[m.group(3)] = (m.group(1) == "ok", m.group(4) or "")
        # The whole output in the suite's log: timings and stacks of failures.
        print("\n--- scenario.mjs (exit %s, %.1f s)\n%s%s---" % (rc, cls.seconds, out, err))

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    def check_case(self, name):
        self.assertIn(name, self.results, "case not reported (scenario exit %s); stderr:\n%s"
                      % (self.rc, self.stderr[-3000:]))
        ok, why = self.results[name]
        self.assertTrue(ok, why)

    def test_zz_exit_status_and_no_secret_in_output(self):
        self.assertEqual(self.rc, 0 if all(ok for ok, _ in self.results.values()) else 1,
                         self.stderr[-2000:])
        self.assertNotIn(self.stack.player, self.stdout + self.stderr)
        with open(self.stack.apis[0].log_path, errors="replace") as f:
            self.assertNotIn(self.stack.player, f.read())


def _add_cases():
    try:
        names = case_names()
    except Exception as e:  # loading the suite must not hide why: one failing test
        def test_scenario_loads(self, e=e):
            raise AssertionError(str(e))
        E2BScenarioTest.test_00_scenario_loads = test_scenario_loads
        return
    for i, name in enumerate(names, 1):
        slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:60]

        def t(self, name=name):
            self.check_case(name)
        t.__doc__ = name
        setattr(E2BScenarioTest, "test_%02d_%s" % (i, slug), t)


_add_cases()


if __name__ == "__main__":
    unittest.main()
