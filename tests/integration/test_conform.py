"""test_conform - the driver conformance suite (tests/conform/conform.c,
adr/0024) against the engine driver on this run's runtime (the harness's
private dockerd or podman): the C binary runs its "engine" group with the
runtime socket; each of its cmocka tests is one test here, so a rule of
sbx_driver.h the engine driver breaks fails by name."""

import os
import re
import subprocess
import unittest

import sbxtest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SBX_BUILD", os.path.join(REPO, "build", "out"))
BIN = os.path.join(BUILD, "tests", "test_conform")
SRC = os.path.join(REPO, "tests", "conform", "conform.c")


def c_tests():
    """The test names of conform_run(), in order, read from the source."""
    with open(SRC) as f:
        return re.findall(r"cmocka_unit_test\((test_\w+)\)", f.read())


class Conform(unittest.TestCase):
    tap = None

    @classmethod
    def setUpClass(cls):
        env = dict(os.environ)
        env.update({
            "SBX_CONFORM_TARGETS": "engine",
            "SBX_CONFORM_RUNTIME": os.environ["SBX_RUNTIME_HOST"],
            "SBX_CONFORM_HELPER": os.path.join(BUILD, "sbx-helper"),
            "CMOCKA_MESSAGE_OUTPUT": "TAP",
            # adr/0066: test_agent_runtime.py runs this suite again with
            # SBX_TEST_AGENT_CHANNEL=runtime.
            "SBX_CONFORM_AGENT_CHANNEL": os.environ.get("SBX_TEST_AGENT_CHANNEL", "direct"),
        })
        p = subprocess.run([BIN], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=800)
        cls.tap = p.stdout.decode("utf-8", "replace")
        print(cls.tap)

    @classmethod
    def tearDownClass(cls):
        # The engine target's driver fills its own helper volume
        # (sbxconf-helper-<sha>, kept by design: adr/0009); it belongs to
        # this suite only, so the next suite must not find it.
        engine = sbxtest.Engine()
        for v in engine.volumes():
            name = v.get("Name", "")
            if name.startswith("sbxconf-helper-"):
                engine.delete("/volumes/" + name, params={"force": "1"})

    def check(self, name):
        if re.search(r"^ok \d+ - %s$" % name, self.tap, re.M):
            return
        m = re.search(r"^not ok \d+ - %s$((?:\n#.*)*)" % name, self.tap, re.M)
        self.fail("%s: %s" % (name, m.group(1).strip() if m else
                              "not reported:\n" + self.tap[-2000:]))


def _make(name):
    return lambda self: self.check(name)


for _n in c_tests():
    setattr(Conform, _n, _make(_n))

if __name__ == "__main__":
    unittest.main()
