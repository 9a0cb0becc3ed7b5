# vmfix.py - what the vm driver's suites share (adr/0069): the boot files and
# the test image's root disk made by deploy/vm/build.sh, and a sweep that
# kills every qemu a suite's state directory still names.
#
# Python 3 stdlib only. The root disk comes from the harness's image tar
# (SBX_TEST_IMAGE_TAR, tests/harness/runtimes.sh): no runtime is needed.

import glob
import os
import signal
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("SBX_BUILD", os.path.join(REPO, "build", "out"))


def build_vm_dir(parent=None):
    """A fresh vm_dir (vmlinuz, initrd.img, images/<image>.ext4) for the
    harness's test image; returns (path, image)."""
    image = os.environ.get("SBX_TEST_IMAGE", "sbx-test:latest")
    tar = os.environ.get("SBX_TEST_IMAGE_TAR")
    if not tar or not os.path.exists(tar):
        raise RuntimeError("SBX_TEST_IMAGE_TAR is not set: run this suite "
                           "through tests/run.sh")
    d = tempfile.mkdtemp(prefix="sbx-vmdir-", dir=parent)
    script = os.path.join(REPO, "deploy", "vm", "build.sh")
    subprocess.run(["sh", script, "boot", d, os.path.join(BUILD, "sbx-helper"),
                    os.path.join(BUILD, "sbx-vminit")], check=True)
    subprocess.run(["sh", script, "rootfs", d, image, tar], check=True)
    return d, image


def qemu_pids(state_dir):
    """pids of the qemu processes whose pidfile is under state_dir and
    whose command line names it."""
    pids = []
    for pf in glob.glob(os.path.join(state_dir, "vm", "*", "qemu.pid")):
        try:
            pid = int(open(pf).read().strip())
            cmd = open("/proc/%d/cmdline" % pid, "rb").read()
        except (OSError, ValueError):
            continue
        if state_dir.encode() in cmd:
            pids.append(pid)
    return pids


def sweep(state_dir):
    """Kills what a failed test left running under state_dir; returns how
    many it killed (0 after a clean run)."""
    pids = qemu_pids(state_dir)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.time() + 10
    while pids and time.time() < deadline and any(
            os.path.exists("/proc/%d" % p) for p in pids):
        time.sleep(0.05)
    return len(pids)
