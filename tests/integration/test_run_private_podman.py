"""test_run_private_podman - `make run` with its own private Podman service, then
`deploy/run.sh --purge`: everything in that Podman (containers, volumes, the
image make run imported, storage, runroot) and the state directory go, and no
process or mount is left.

The fixture's runtimes are not used (SBX_RUN_RUNTIME=podman makes run.sh start
its own service); the default image comes from a cached root filesystem (the
busybox test rootfs), so no Debian mirror is needed. Runs once.
"""

import hashlib
import os
import shutil
import subprocess
import time
import unittest

import sbxtest
from runfix import RunShTestCase, processes_mentioning

SBX_ONCE = True


def mounts_under(path):
    with open("/proc/mounts") as f:
        return [l.split()[1] for l in f if l.split()[1].startswith(path + "/")]


class PrivatePodmanPurgeTest(RunShTestCase):

    dir_prefix = "sbxrunpp-"
    npc_prefix = "pp"

    def base_env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SBX_", "DOCKER_", "CONTAINERS_"))}
        env.update(SBX_RUN_RUNTIME="podman")
        return env

    def setUp(self):
        super().setUp()
        self.runroot = "/run/sbx-run-" + hashlib.sha256(self.dir.encode()).hexdigest()[:12]

    def cleanup(self):
        self.kill_leftovers()
        for m in sorted(mounts_under(self.dir), reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        shutil.rmtree(self.dir, True)
        shutil.rmtree(self.runroot, True)

    def test_purge_empties_the_private_podman_and_leaves_no_process_or_mount(self):
        os.makedirs(os.path.join(self.dir, "image"))
        shutil.copy(sbxtest.env("SBX_TEST_IMAGE_TAR"),
                    os.path.join(self.dir, "image", "sbx-default-bookworm.tar"))
        r = self.run_sh(SBX_RUN_DEMO_ONLY="1")
        out = r.stdout.decode() + r.stderr.decode()
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("runtime: starting Podman's API service", out)
        self.assertIn("    sum(1..100) = 5050\n", out)
        self.assertTrue(os.path.isdir(os.path.join(self.dir, "podman", "storage")))
        # The demo's container keeps running after make run stops.
        self.assertNotEqual(processes_mentioning(self.dir), [])

        r = self.run_sh("--purge")
        out = r.stdout.decode()
        print(out)
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        self.assertIn("(private Podman)", out)
        self.assertIn("removed container sbx-npc-%s\n" % self.npc, out)
        self.assertIn("removed volume sbx-npc-%s-work\n" % self.npc, out)
        self.assertRegex(out, r"removed image \S*sbx-default:bookworm ")
        self.assertIn("removed Podman's runroot %s\n" % self.runroot, out)
        self.assertIn("removed the state directory %s " % self.dir, out)
        self.assertFalse(os.path.exists(self.dir))
        self.assertFalse(os.path.exists(self.runroot))
        self.assertEqual(mounts_under(self.dir), [])
        # Exec sessions' conmon processes end after podman's exit_command_delay
        # (60 s in make run's containers.conf); nothing else is left.
        deadline = time.monotonic() + 120
        while processes_mentioning(self.dir) and time.monotonic() < deadline:
            time.sleep(1)
        self.assertEqual(processes_mentioning(self.dir), [])


if __name__ == "__main__":
    unittest.main()
