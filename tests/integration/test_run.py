"""test_run - `make run` (deploy/run.sh) on the runtime under test, non-interactively.

run.sh is pointed at the fixture's runtime with DOCKER_HOST and at the busybox
test image with SBX_RUN_IMAGE, so no test waits for the ~30 s debootstrap of
the default image (deploy/image/build.sh; docs/cli.md says so). The busybox
image has no python3: the demo then runs its shell version of the program,
whose output lines and result file are the same.
"""

import os
import re
import shutil
import signal
import subprocess
import time
import unittest

import sbxtest
from runfix import RunShTestCase, processes_mentioning
from sbxtest import REPO


class RunTest(RunShTestCase):

    def base_env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SBX_") or k in ("SBX_TEST_OUT",)}
        env.update(DOCKER_HOST=sbxtest.runtime_host(), SBX_RUN_IMAGE=sbxtest.test_image())
        return env

    def cleanup(self):
        self.kill_leftovers()
        eng = sbxtest.Engine()
        label = "io.sbx.id=npc-" + self.npc
        for c in eng.containers(label=label):
            eng.remove(c["Id"])
        for v in eng.volumes(label=label):
            eng.call("DELETE", "/volumes/%s" % v["Name"], params={"force": "1"},
                     ok=(200, 204, 404, 409))
        shutil.rmtree(self.dir, True)

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

    def test_purge_removes_what_make_run_made_and_says_so(self):
        eng = sbxtest.Engine()
        default = "sbx-default:bookworm"
        had_default = eng.request("GET", "/images/%s/json" % default).status == 200
        if not had_default:
            # The first build's second half: a cached root filesystem
            # imported as the default image (the test image's rootfs; the
            # debootstrap half needs a Debian mirror, see the progress test).
            os.makedirs(os.path.join(self.dir, "image"))
            shutil.copy(sbxtest.env("SBX_TEST_IMAGE_TAR"),
                        os.path.join(self.dir, "image", "sbx-default-bookworm.tar"))
            self.addCleanup(eng.call, "DELETE", "/images/" + default, ok=(200, 404, 409))
        # Another broker's sandbox on the same runtime, labelled like ours.
        other = "sbx-otherbroker%d" % os.getpid()
        cid = eng.create(image=sbxtest.test_image(), cmd=["sleep", "3600"], name=other,
                         labels={sbxtest.LABEL_MANAGED: "true", sbxtest.LABEL_ID: "npc-x" + self.npc})
        self.addCleanup(eng.remove, cid)
        eng.start(cid)
        other_vol = other + "-work"
        eng.call("POST", "/volumes/create", {"Name": other_vol, "Labels": {
            sbxtest.LABEL_MANAGED: "true", sbxtest.LABEL_ID: "npc-x" + self.npc}}, ok=(200, 201))
        self.addCleanup(eng.call, "DELETE", "/volumes/" + other_vol, params={"force": "1"},
                        ok=(200, 204, 404, 409))
        env = {k: v for k, v in self.env.items() if k != "SBX_RUN_IMAGE"}
        r = subprocess.run(["sh", os.path.join(REPO, "deploy", "run.sh")], env=dict(env, SBX_RUN_DEMO_ONLY="1"),
                           cwd=REPO, capture_output=True, timeout=300)
        out = r.stdout.decode() + r.stderr.decode()
        self.assertEqual(r.returncode, 0, out)
        label = "io.sbx.id=npc-" + self.npc
        self.assertEqual(len(eng.containers(label=label)), 1, out)
        self.assertEqual(len(eng.volumes(label=label)), 1, out)

        secrets = []
        for f in ("operator.key", "player.key", "broker.token"):
            with open(os.path.join(self.dir, f)) as fh:
                secrets.append(fh.read().strip())
        r = subprocess.run(["sh", os.path.join(REPO, "deploy", "run.sh"), "--purge"], env=env,
                           cwd=REPO, capture_output=True, timeout=300)
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        print(out)
        for secret in secrets:
            self.assertNotIn(secret, out + r.stderr.decode())
        self.assertRegex(out, r"removed sandbox npc-%s: container \S+" % self.npc)
        self.assertRegex(out, r"removed sandbox npc-%s: volume \S+-work" % self.npc)
        helper = re.search(r"removed helper volume (sbx-helper-[0-9a-f]{16})\n", out)
        self.assertIsNotNone(helper, out)
        self.assertEqual(eng.request("GET", "/volumes/" + helper.group(1)).status, 404)
        self.assertIn("removed the state directory %s " % self.dir, out)
        self.assertEqual(eng.containers(label=label), [])
        self.assertEqual(eng.volumes(label=label), [])
        self.assertFalse(os.path.exists(self.dir))
        if had_default:
            self.assertNotIn("removed image", out)    # not built by make run: kept
            self.assertEqual(eng.request("GET", "/images/%s/json" % default).status, 200)
        else:
            self.assertIn("removed image %s (built by make run)" % default, out)
            self.assertEqual(eng.request("GET", "/images/%s/json" % default).status, 404)
        # The test image (SBX_RUN_IMAGE elsewhere, never built here) and the
        # other broker's sandbox are untouched.
        self.assertEqual(eng.request("GET", "/images/%s/json" % sbxtest.test_image()).status, 200)
        self.assertEqual(eng.inspect(cid)["State"]["Running"], True)
        self.assertEqual(eng.request("GET", "/volumes/" + other_vol).status, 200)
        self.assertNotIn(other, out)
        # Again: nothing left to do.
        r = subprocess.run(["sh", os.path.join(REPO, "deploy", "run.sh"), "--purge"], env=env,
                           cwd=REPO, capture_output=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout.decode()),
                         (0, "==> nothing to purge: %s does not exist\n" % self.dir))

    def test_purge_refuses_while_make_run_runs_and_keeps_everything(self):
        p = subprocess.Popen(["sh", os.path.join(REPO, "deploy", "run.sh")], env=self.env,
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for line in p.stdout:
            if line.startswith(b"Press Ctrl-C"):
                break
        try:
            r = subprocess.run(["sh", os.path.join(REPO, "deploy", "run.sh"), "--purge"],
                               env=self.env, cwd=REPO, capture_output=True, timeout=60)
            self.assertEqual(r.returncode, 1)
            self.assertIn(b"is using %s" % self.dir.encode(), r.stderr)
            self.assertIn(b"fix: stop it with Ctrl-C first", r.stderr)
            self.assertTrue(os.path.exists(os.path.join(self.dir, "player.key")))
            label = "io.sbx.id=npc-" + self.npc
            self.assertEqual(len(sbxtest.Engine().containers(label=label)), 1)
        finally:
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=60)

    def test_first_image_build_shows_progress_while_debootstrap_runs(self):
        """build.sh with a stand-in debootstrap (no Debian mirror here) that
        takes ~6 s and logs like the real one: progress lines arrive while
        it runs, not only at the end."""
        stub = os.path.join(self.dir, "stub")
        os.makedirs(stub)
        with open(os.path.join(stub, "debootstrap"), "w") as f:
            f.write("""#!/bin/sh
# args: --variant=minbase --include=... SUITE ROOT MIRROR
root=$4
echo "I: Retrieving InRelease"
echo "I: Retrieving Packages"
for p in adduser apt base-files bash coreutils dash; do echo "I: Retrieving $p 1.0"; sleep 0.3; done
for p in adduser apt base-files bash coreutils dash; do echo "I: Extracting $p..."; sleep 0.3; done
for p in adduser apt base-files bash coreutils dash; do echo "I: Unpacking $p..."; sleep 0.3; done
for p in adduser apt base-files bash coreutils dash; do echo "I: Configuring $p..."; sleep 0.3; done
mkdir -p "$root/etc" "$root/bin"
touch "$root/etc/shadow"
tar -C "$root" -xf "$SBX_TEST_IMAGE_TAR"
date +%s.%N > "$root/.finished"
echo "I: Base system installed successfully."
""")
        os.chmod(os.path.join(stub, "debootstrap"), 0o755)
        image = "sbx-progress-test%d:x" % os.getpid()
        eng = sbxtest.Engine()
        self.addCleanup(eng.call, "DELETE", "/images/" + image, ok=(200, 404, 409))
        kind = sbxtest.runtime()
        env = dict(os.environ, PATH=stub + ":" + os.environ["PATH"],
                   SBX_IMAGE_MIRROR="http://127.0.0.1:9/debian")
        t0 = time.monotonic()
        p = subprocess.Popen(["sh", os.path.join(REPO, "deploy", "image", "build.sh"), kind,
                              sbxtest.runtime_host(), os.path.join(self.dir, "cache"), image],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lines = []
        for line in p.stderr:
            lines.append((time.monotonic() - t0, line.decode().rstrip()))
        self.assertEqual(p.wait(timeout=120), 0, lines)
        text = "\n".join("%.1f %s" % l for l in lines)
        print(text)
        progress = [(t, l) for t, l in lines if re.match(r"build.sh: debootstrap \d+ s: ", l)]
        phases = [l.split(": ", 2)[2].split(" (")[0] for _, l in progress]
        for ph in ("downloading packages", "extracting packages", "unpacking packages",
                   "configuring packages"):
            self.assertIn(ph, phases, text)
        # While it ran: the first progress line long before debootstrap ended.
        done = [t for t, l in lines if l.startswith("build.sh: debootstrap done")][0]
        self.assertGreater(done - progress[0][0], 3.0, text)
        self.assertEqual(eng.request("GET", "/images/%s/json" % image).status, 200)

    def test_a_failed_step_says_what_and_how_to_fix_and_leaves_nothing(self):
        r = self.run_sh(SBX_RUN_DEMO_ONLY="1", SBX_RUN_IMAGE="sbx-no-such-image:x")
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 1)
        self.assertIn("FAILED: SBX_RUN_IMAGE=sbx-no-such-image:x is not in the runtime", err)
        self.assertIn("fix: ", err)
        self.assertNoDaemons()


if __name__ == "__main__":
    unittest.main()
