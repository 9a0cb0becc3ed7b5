"""runfix - the shared fixture of the `make run` suites (test_run.py on the runtime
under test, test_run_private_podman.py with run.sh's own Podman): a state
directory, an NPC name and a free api port per test, deploy/run.sh with the
test's environment, and the processes left behind found and killed.
"""

import os
import signal
import subprocess
import unittest

import sbxtest
from sbxtest import REPO

RUN_SH = os.path.join(REPO, "deploy", "run.sh")


def processes_mentioning(text):
    """(pid, command line) of live processes whose command line contains TEXT."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if text.encode() in cmd:
            found.append((int(pid), cmd.replace(b"\0", b" ").decode(errors="replace")))
    return found


class RunShTestCase(unittest.TestCase):
    """Each test gets self.dir (SBX_RUN_DIR, short, fresh), self.npc and
    self.env: the environment of base_env() with SBX_RUN_DIR, SBX_API_PORT
    and SBX_RUN_NPC set. cleanup() (registered by setUp) kills what still
    mentions self.dir; subclasses extend it."""

    dir_prefix = "sbxrun-"
    npc_prefix = "demo"

    def base_env(self):
        """The environment run.sh starts from (without the per-test names)."""
        raise NotImplementedError

    def setUp(self):
        self.dir = sbxtest.short_tmpdir(self.dir_prefix)
        self.npc = "%s%d" % (self.npc_prefix, os.getpid() % 100000)
        self.addCleanup(self.cleanup)
        env = self.base_env()
        env.update(SBX_RUN_DIR=self.dir, SBX_API_PORT=str(sbxtest.free_port()), SBX_RUN_NPC=self.npc)
        self.env = env

    def kill_leftovers(self):
        for pid, _ in processes_mentioning(self.dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def cleanup(self):
        self.kill_leftovers()

    def run_sh(self, *args, **extra):
        """deploy/run.sh ARGS with self.env plus EXTRA; the CompletedProcess."""
        return subprocess.run(["sh", RUN_SH] + list(args), env=dict(self.env, **extra),
                              cwd=REPO, capture_output=True, timeout=300)
