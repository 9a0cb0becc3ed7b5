"""test_vm_conform - the driver conformance suite (tests/conform/conform.c,
adr/0024) against the vm driver (adr/0069): its "vm" group boots qemu
-M microvm guests under TCG (this machine's /dev/kvm is PVM, on which stock
kernels fail) from the harness's test image; each cmocka test is one test
here. Needs no fixture runtime: the root disk comes from the image tar."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

import vmfix

SBX_ONCE = True

BIN = os.path.join(vmfix.BUILD, "tests", "test_conform")
SRC = os.path.join(vmfix.REPO, "tests", "conform", "conform.c")


def c_tests():
    with open(SRC) as f:
        return re.findall(r"cmocka_unit_test\((test_\w+)\)", f.read())


class VmConform(unittest.TestCase):
    tap = None

    @classmethod
    def setUpClass(cls):
        cls.vm_dir, image = vmfix.build_vm_dir()
        cls.state = tempfile.mkdtemp(prefix="sbx-vmconf-")
        env = dict(os.environ)
        env.update({
            "SBX_CONFORM_TARGETS": "vm",
            "SBX_CONFORM_VM_DIR": cls.vm_dir,
            "SBX_CONFORM_VM_STATE": cls.state,
            "SBX_CONFORM_VM_ACCEL": "tcg",
            "SBX_TEST_IMAGE": image,
            "CMOCKA_MESSAGE_OUTPUT": "TAP",
        })
        try:
            p = subprocess.run([BIN], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=800)
            cls.tap = p.stdout.decode("utf-8", "replace")
        finally:
            cls.left = vmfix.sweep(cls.state)
        print(cls.tap)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.state, ignore_errors=True)
        shutil.rmtree(cls.vm_dir, ignore_errors=True)

    def check(self, name):
        if re.search(r"^ok \d+ - %s$" % name, self.tap, re.M):
            return
        m = re.search(r"^not ok \d+ - %s$((?:\n#.*)*)" % name, self.tap, re.M)
        self.fail("%s: %s" % (name, m.group(1).strip() if m else
                              "not reported:\n" + self.tap[-2000:]))

    def test_zz_nothing_left_running(self):
        """Every VM the suite booted was destroyed: no qemu left."""
        self.assertEqual(self.left, 0)


def _make(name):
    return lambda self: self.check(name)


for _n in c_tests():
    setattr(VmConform, _n, _make(_n))

if __name__ == "__main__":
    unittest.main()
