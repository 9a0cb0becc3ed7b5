"""test_run - `make run` (deploy/run.sh) on the runtime under test, non-interactively.

run.sh is pointed at the fixture's runtime with DOCKER_HOST and at the busybox
test image with SBX_RUN_IMAGE, so no test waits for the ~30 s debootstrap of
the default image (deploy/image/build.sh; docs/cli.md says so). The busybox
image has no python3: the demo then runs its shell version of the program,
whose output lines and result file are the same.
"""

import os
import shutil
import signal
import socket
import subprocess
import unittest

import sbxtest
from sbxtest import REPO


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def processes_mentioning(text):
    """PIDs of live processes whose command line contains TEXT."""
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


class RunTest(unittest.TestCase):

    def setUp(self):
        self.dir = sbxtest.short_tmpdir("sbxrun-")
        self.npc = "demo%d" % (os.getpid() % 100000)
        self.addCleanup(self.cleanup)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SBX_") or k in ("SBX_TEST_OUT",)}
        env.update(DOCKER_HOST=sbxtest.runtime_host(), SBX_RUN_IMAGE=sbxtest.test_image(),
                   SBX_RUN_DIR=self.dir, SBX_API_PORT=str(free_port()), SBX_RUN_NPC=self.npc)
        self.env = env

    def cleanup(self):
        for pid, _ in processes_mentioning(self.dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        eng = sbxtest.Engine()
        label = "io.sbx.id=npc-" + self.npc
        for c in eng.containers(label=label):
            eng.remove(c["Id"])
        for v in eng.volumes(label=label):
            eng.call("DELETE", "/volumes/%s" % v["Name"], params={"force": "1"},
                     ok=(200, 204, 404, 409))
        shutil.rmtree(self.dir, True)

    def run_sh(self, **extra):
        env = dict(self.env, **extra)
        return subprocess.run(["sh", os.path.join(REPO, "deploy", "run.sh")], env=env,
                              cwd=REPO, capture_output=True, timeout=300)

    def assertNoDaemons(self):
        left = processes_mentioning(self.dir)
        self.assertEqual(left, [], "processes left running")

    def assertKeysSafe(self, out):
        for name in ("operator", "player"):
            path = os.path.join(self.dir, name + ".key")
            self.assertEqual(os.stat(path).st_mode & 0o777, 0o600, path)
            with open(path) as f:
                key = f.read().strip()
            self.assertGreaterEqual(len(key), 32)
            self.assertNotIn(key, out)
        self.assertEqual(os.stat(os.path.join(self.dir, "broker.token")).st_mode & 0o777, 0o600)

    def test_demo_streams_the_program_reads_back_its_file_and_stops_the_daemons(self):
        r = self.run_sh(SBX_RUN_DEMO_ONLY="1")
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        # The SSE events of the program, shown as they arrived.
        self.assertIn("| event: start", out)
        self.assertIn('| data: {"data":"tick 1 from ', out)
        self.assertIn('| data: {"data":"wrote /work/result.txt\\n"}', out)
        self.assertRegex(out, r'\| data: \{"code":0,')
        # The file the program wrote, read back through the api.
        self.assertIn("    sum(1..100) = 5050\n", out)
        # What to try next.
        self.assertIn("export SBX_URL=http://127.0.0.1:%s" % self.env["SBX_API_PORT"], out)
        self.assertIn('export SBX_KEY="$(cat %s/player.key)"' % self.dir, out)
        # The CLI is sbxctl (Docker ships an `sbx`): no line tells to run `sbx`.
        self.assertIn("    sbxctl exec %s -- " % self.npc, out)
        self.assertNotRegex(out, r"(^|[\s$'`])sbx (npc|up|exec|cp|cat|ls|status|egress|rm|--help)\b")
        self.assertKeysSafe(out + r.stderr.decode())
        self.assertNoDaemons()
        # The sandbox and its volume stay.
        eng = sbxtest.Engine()
        self.assertEqual(len(eng.containers(label="io.sbx.id=npc-" + self.npc)), 1)

        # Again in the same directory: keys, NPC and /work are reused; then
        # it stays up until SIGINT (Ctrl-C) and stops both daemons.
        p = subprocess.Popen(["sh", os.path.join(REPO, "deploy", "run.sh")], env=self.env,
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        lines = []
        for line in p.stdout:
            lines.append(line.decode())
            if line.startswith(b"Press Ctrl-C"):
                break
        text = "".join(lines)
        self.assertIn("NPC %s exists already" % self.npc, text)
        self.assertIn("    sum(1..100) = 5050\n", text)
        pids = [int(open(os.path.join(self.dir, f)).read()) for f in ("api.pid", "broker.pid")]
        for pid in pids:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                self.assertRegex(f.read(), rb"sandbox-(api|broker)\0")
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, rest.decode())
        self.assertIn(b"stopped. Sandboxes and their /work volumes stay", rest)
        for pid in pids:
            self.assertFalse(os.path.exists("/proc/%d" % pid), "daemon %d still runs" % pid)
        self.assertNoDaemons()

    def test_a_failed_step_says_what_and_how_to_fix_and_leaves_nothing(self):
        r = self.run_sh(SBX_RUN_DEMO_ONLY="1", SBX_RUN_IMAGE="sbx-no-such-image:x")
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAILED: SBX_RUN_IMAGE=sbx-no-such-image:x is not in the runtime", err)
        self.assertIn("fix: ", err)
        self.assertNoDaemons()


if __name__ == "__main__":
    unittest.main()
