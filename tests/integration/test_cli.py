"""test_cli - the `sbxctl` command-line client against a real sandbox-api and
sandbox-broker on the runtime under test (SBX_RUNTIME_HOST, SBX_TEST_IMAGE).

Everything the user sees is asserted: stdout, stderr, exit codes (docs/cli.md).
"""

import json
import os
import shutil
import signal
import subprocess
import time
import unittest

import sbxtest
from sbxtest import BUILD
from stackfix import Stack, clean_env

SBX = os.path.join(BUILD, "sbxctl")


class CLITest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxclit%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix)
        cls.home = sbxtest.short_tmpdir("sbxclihome-")
        # One NPC with a running sandbox, shared by the tests.
        r = cls.sbx_as(cls.stack.player, "npc", "create", "alice")
        assert r.returncode == 0, r.stderr
        r = cls.sbx_as(cls.stack.player, "up", "alice")
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        try:
            for npc in ("alice", "bob", "cara"):
                cls.sbx_as(cls.stack.operator, "rm", npc)
            left = cls.stack.managed()
        finally:
            cls.stack.close()
            shutil.rmtree(cls.home, True)
        assert not left, "sandboxes left after sbxctl rm: %r" % left

    @classmethod
    def sbx_as(cls, key, *args, url=None, input=None, timeout=120, extra_env=None):
        env = clean_env()
        env["HOME"] = cls.home
        env["SBX_URL"] = url or cls.stack.url
        if key is not None:
            env["SBX_KEY"] = key
        env.update(extra_env or {})
        return subprocess.run([SBX] + list(args), env=env, capture_output=True,
                              input=input, timeout=timeout)

    def sbx(self, *args, **kw):
        return self.sbx_as(self.stack.player, *args, **kw)

    def assertNoKey(self, r):
        for k in (self.stack.player, self.stack.operator):
            self.assertNotIn(k.encode(), r.stdout + r.stderr)

    # ------------------------------------------------------------ exec

    def test_exec_splits_stdout_stderr_and_exits_with_the_commands_code(self):
        r = self.sbx("exec", "alice", "--", "sh", "-c", "echo a; echo b >&2; exit 7")
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertEqual(r.stdout, b"a\n")
        self.assertEqual(r.stderr, b"b\n")
        self.assertNoKey(r)

    def test_exec_output_is_binary_exact_and_streamed_before_exit(self):
        data = os.urandom(200000) + b"\x00\xff\r\n\xed\xa0\x80"
        r = self.sbx("exec", "-i", "alice", "--", "cat", input=data)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, data)
        # Output arrives while the command still runs: the first line is
        # read long before the command ends.
        env = clean_env()
        env.update(HOME=self.home, SBX_URL=self.stack.url, SBX_KEY=self.stack.player)
        p = subprocess.Popen([SBX, "exec", "alice", "--", "sh", "-c", "echo first; sleep 3; echo last"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        t0 = time.monotonic()
        first = p.stdout.readline()
        took = time.monotonic() - t0
        rest, _ = p.communicate(timeout=30)
        self.assertEqual(first, b"first\n")
        self.assertLess(took, 2.5, "first line came only after the command ended")
        self.assertEqual(rest, b"last\n")
        self.assertEqual(p.returncode, 0)

    def test_exec_timeout_exits_124_with_the_servers_sentence(self):
        r = self.sbx("exec", "-t", "1", "alice", "--", "sleep", "30")
        self.assertEqual(r.returncode, 124, r.stderr)
        self.assertIn(b"timeout", r.stderr.lower())

    def test_exec_timeout_over_the_ceiling_is_said_in_seconds(self):
        # the broker names its wire field in milliseconds; the player typed -t
        r = self.sbx("exec", "-t", "100000", "alice", "--", "true")
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, rb"-t asks for more than the server allows: at most \d+ s "
                         rb"\(its exec_timeout_max\)")
        self.assertNotIn(b"timeout_ms", r.stderr)

    def test_ctrl_c_cancels_the_exec_and_kills_its_processes(self):
        env = clean_env()
        env.update(HOME=self.home, SBX_URL=self.stack.url, SBX_KEY=self.stack.player)
        p = subprocess.Popen([SBX, "exec", "alice", "--", "sh", "-c", "echo up; exec sleep 1234"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual(p.stdout.readline(), b"up\n")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn(b"cancelled", err)

        def gone():
            r = self.sbx("exec", "alice", "--", "ps")
            return r.returncode == 0 and b"sleep 1234" not in r.stdout
        sbxtest.wait_until(gone, 15, "the cancelled exec's processes to be gone")

    def test_exec_detach_prints_the_id_and_logs_follows_it(self):
        r = self.sbx("exec", "-d", "alice", "--", "sh", "-c",
                     "for i in 1 2 3; do echo out $i; sleep 1; done; echo err >&2; exit 4")
        self.assertEqual(r.returncode, 0, r.stderr)
        xid = r.stdout.decode().strip()
        self.assertRegex(xid, r"^x[0-9a-f]{24}$")
        # Without -f: what is logged so far, at once; exit 0 while it runs.
        t0 = time.monotonic()
        r = self.sbx("logs", "alice", xid)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(time.monotonic() - t0, 2.5)
        self.assertTrue(b"out 1\n".startswith(r.stdout) or r.stdout.startswith(b"out 1\n"),
                        r.stdout)
        # -f: to the end, with the command's exit code.
        r = self.sbx("logs", "-f", "alice", xid)
        self.assertEqual((r.returncode, r.stdout, r.stderr),
                         (4, b"out 1\nout 2\nout 3\n", b"err\n"))
        # Once ended, without -f too.
        r = self.sbx("logs", "alice", xid)
        self.assertEqual((r.returncode, r.stdout), (4, b"out 1\nout 2\nout 3\n"))
        r = self.sbx("logs", "alice", "x0000")
        self.assertEqual(r.returncode, 4)
        r = self.sbx_as(self.stack.other, "logs", "alice", xid)
        self.assertEqual(r.returncode, 4)

    def test_exec_resumes_by_itself_when_its_connection_drops(self):
        import test_console   # its cuttable proxy (a module, so no tests of it run here)
        proxy = test_console.CuttableProxy(int(self.stack.url.rsplit(":", 1)[1]))
        self.addCleanup(proxy.close)
        env = clean_env()
        env.update(HOME=self.home, SBX_URL="http://127.0.0.1:%d" % proxy.port,
                   SBX_KEY=self.stack.player)
        p = subprocess.Popen([SBX, "exec", "alice", "--", "sh", "-c",
                              "for i in $(seq 1 30); do echo l$i; sleep 0.1; done; exit 6"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = p.stdout.readline()
        self.assertGreaterEqual(proxy.cut(), 1)
        rest, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 6, err)
        self.assertEqual(first + rest, b"".join(b"l%d\n" % i for i in range(1, 31)))
        self.assertEqual(err, b"")

    # ------------------------------------------------------------ files

    def test_cp_round_trips_a_3mib_binary_file_byte_exact(self):
        d = sbxtest.short_tmpdir("sbxclicp-")
        self.addCleanup(shutil.rmtree, d, True)
        src = os.path.join(d, "in.bin")
        back = os.path.join(d, "back.bin")
        data = os.urandom(3 * 1024 * 1024)
        with open(src, "wb") as f:
            f.write(data)
        r = self.sbx("cp", src, "alice:/work/cp/in.bin")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.sbx("cp", "alice:/work/cp/in.bin", back)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(back, "rb") as f:
            self.assertEqual(f.read(), data)
        # Into a directory: the file keeps its name.
        r = self.sbx("cp", "alice:/work/cp/in.bin", d + "/")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.sbx("ls", "alice:/work/cp", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        ents = json.loads(r.stdout)
        self.assertEqual([(e["name"], e["type"], e["size"]) for e in ents],
                         [("in.bin", "file", len(data))])
        r = self.sbx("ls", "alice:/work/cp")
        self.assertRegex(r.stdout.decode(), r"^-rw.* %d .* in\.bin\n$" % len(data))

    def test_cp_of_a_missing_file_exits_4_and_leaves_no_local_file(self):
        d = sbxtest.short_tmpdir("sbxclicp-")
        self.addCleanup(shutil.rmtree, d, True)
        r = self.sbx("cp", "alice:/work/no/such/file", os.path.join(d, "x"))
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertTrue(r.stderr.startswith(b"sbxctl: "))
        self.assertEqual(os.listdir(d), [])

    def test_path_outside_work_is_refused_as_bad_usage(self):
        r = self.sbx("ls", "alice:/etc")
        self.assertEqual((r.returncode, r.stderr),
                         (2, b"sbxctl: The path must be /work or start with /work/.\n"))

    def test_errno_errors_name_the_path_and_what_to_do(self):
        r = self.sbx("exec", "alice", "--", "mkdir", "-p", "/work/errdir")
        self.assertEqual(r.returncode, 0, r.stderr)
        d = sbxtest.short_tmpdir("sbxclierr-")
        self.addCleanup(shutil.rmtree, d, True)
        r = self.sbx("cp", "alice:/work/errdir", os.path.join(d, "x"))
        self.assertEqual((r.returncode, r.stderr), (2, b"sbxctl: /work/errdir is a directory; "
                                                    b"read or write a file in it, or list it.\n"))
        self.assertEqual(os.listdir(d), [])
        for args in (("cat", "alice:/work/nope.txt"), ("ls", "alice:/work/nope.txt")):
            r = self.sbx(*args)
            self.assertEqual((r.returncode, r.stderr),
                             (4, b"sbxctl: /work/nope.txt does not exist; check the name, "
                                 b"or list its directory.\n"), args)
        r = self.sbx("exec", "-w", "/work/nope", "alice", "--", "true")
        self.assertIn(b"/work/nope does not exist", r.stderr)
        self.assertEqual(r.returncode, 4, r.stderr)   # not found, as cat's

    # ------------------------------------------------------------ read commands

    def test_read_commands_print_json_with_json(self):
        r = self.sbx("npc", "ls", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        names = [n["name"] for n in json.loads(r.stdout)]
        self.assertIn("alice", names)
        r = self.sbx("status", "alice", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        st = json.loads(r.stdout)
        self.assertEqual((st["npc"], st["state"]), ("alice", "running"))
        r = self.sbx("status", "alice")
        self.assertIn(b"state:      running", r.stdout)

    def test_another_players_npc_is_not_found(self):
        r = self.sbx_as(self.stack.other, "status", "alice")
        self.assertEqual(r.returncode, 4, r.stderr)
        r = self.sbx_as(self.stack.other, "exec", "alice", "--", "true")
        self.assertEqual(r.returncode, 4, r.stderr)

    # ------------------------------------------------------------ roles

    def test_egress_grant_as_a_player_exits_3_with_the_servers_sentence(self):
        r = self.sbx("egress", "grant", "alice")
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stdout, b"")
        self.assertIn(b"operator", r.stderr)
        self.assertIn(b"sbxctl egress grant alice", r.stderr)
        self.assertNoKey(r)

    def test_egress_grant_with_allow_and_show_as_an_operator(self):
        op = self.stack.operator
        r = self.sbx_as(op, "npc", "create", "cara", "--owner", "pl")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.sbx("up", "cara").returncode, 0)
        r = self.sbx_as(op, "egress", "grant", "cara", "--allow", "pypi.org",
                        "--allow", "*.pythonhosted.org")
        self.assertEqual((r.returncode, r.stderr), (0, b""))
        self.assertEqual(r.stdout, b"cara: egress granted (sandbox replaced, /work kept)\n")
        # Only the allowlist changes: the sandbox stays and only its egress
        # proxy starts again, and the sentence says so (a newcomer was told
        # "sandbox replaced" for a sandbox that stayed).
        born = json.loads(self.sbx("status", "cara", "--json").stdout)["created_at"]
        r = self.sbx_as(op, "egress", "grant", "cara", "--allow", "pypi.org")
        self.assertEqual((r.returncode, r.stderr), (0, b""))
        self.assertEqual(r.stdout, b"cara: egress allowlist applied; the sandbox's proxy was "
                                   b"restarted (sandbox and /work kept)\n")
        self.assertEqual(json.loads(self.sbx("status", "cara", "--json").stdout)["created_at"], born)
        r = self.sbx_as(op, "egress", "grant", "cara", "--allow", "pypi.org")
        self.assertEqual(r.stdout, b"cara: egress granted; nothing to change (the sandbox "
                                   b"already had it)\n")
        r = self.sbx_as(op, "egress", "grant", "cara", "--allow", "pypi.org",
                        "--allow", "*.pythonhosted.org", "--json")
        self.assertEqual((r.returncode, r.stderr), (0, b""))
        self.assertEqual((json.loads(r.stdout)["applied"], json.loads(r.stdout)["change"]),
                         (True, "proxy"))
        r = self.sbx_as(op, "egress", "show", "cara")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertIn("egress:     on\n", out)
        self.assertIn("allow:      pypi.org *.pythonhosted.org\n", out)
        self.assertRegex(out, r"granted by: op at \d{4}-\d\d-\d\d \d\d:\d\d")
        self.assertIn("proxy:      0 allowed, 0 denied\n", out)
        r = self.sbx_as(op, "egress", "show", "cara", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        e = json.loads(r.stdout)
        self.assertEqual((e["enabled"], e["allow"], e["granted_by"]),
                         (True, ["pypi.org", "*.pythonhosted.org"], "op"))
        # A bad --allow value: exit 2, the server's sentence naming it, nothing changed.
        for bad, word in (("bad..name", b"allow[1]"), ("10.0.0.0/33", b"allow[1]"),
                          ("*", b"stands alone")):
            r = self.sbx_as(op, "egress", "grant", "cara", "--allow", "pypi.org", "--allow", bad)
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
            self.assertEqual(r.stdout, b"")
            self.assertTrue(r.stderr.startswith(b"sbxctl: "), r.stderr)
            self.assertIn(word, r.stderr)
            self.assertEqual(r.stderr.count(b"\n"), 1, r.stderr)
        r = self.sbx_as(op, "egress", "grant", "cara", "--allow")
        self.assertEqual((r.returncode, r.stdout), (2, b""), r.stderr)
        self.assertIn(b"--allow", r.stderr)
        e = json.loads(self.sbx_as(op, "egress", "show", "cara", "--json").stdout)
        self.assertEqual(e["allow"], ["pypi.org", "*.pythonhosted.org"])
        # Only operators see it.
        r = self.sbx("egress", "show", "cara")
        self.assertEqual((r.returncode, r.stdout), (3, b""), r.stderr)
        self.assertNoKey(r)

    def test_operator_manages_a_players_npc(self):
        r = self.sbx_as(self.stack.operator, "npc", "create", "bob", "--owner", "pl")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.sbx("npc", "ls")
        self.assertRegex(r.stdout.decode(), r"(?m)^bob +pl ")
        r = self.sbx_as(self.stack.operator, "up", "bob")
        self.assertEqual((r.returncode, r.stdout), (0, b"bob: running\n"), r.stderr)
        r = self.sbx_as(self.stack.operator, "stop", "bob")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.sbx("status", "bob", "--json")
        self.assertEqual(json.loads(r.stdout)["state"], "stopped")
        self.assertEqual(json.loads(r.stdout)["stop_reason"], "operator")
        # ... said in words: any stop request, not an operator's only
        r = self.sbx("status", "bob")
        self.assertIn(b"\nstopped:    by a stop request (sbxctl stop, or POST "
                      b".../sandbox/stop)\n", r.stdout)
        r = self.sbx("exec", "bob", "--", "true")
        self.assertEqual((r.returncode, r.stderr), (1, b"sbxctl: bob's sandbox is not "
                                                    b"running (start it with: sbxctl up bob).\n"))

    def test_a_wrong_key_exits_3(self):
        r = self.sbx_as("x" * 43, "npc", "ls")
        self.assertEqual(r.returncode, 3)
        self.assertIn(b"key", r.stderr.lower())

    # ------------------------------------------------------------ configuration

    def test_config_file_is_used_and_refused_when_others_can_read_it(self):
        d = sbxtest.short_tmpdir("sbxclicfg-")
        self.addCleanup(shutil.rmtree, d, True)
        cfg = os.path.join(d, "config")
        with open(cfg, "w") as f:
            f.write("# sbx\nurl = %s\nkey = %s\n" % (self.stack.url, self.stack.player))
        os.chmod(cfg, 0o600)
        env = {"SBX_CLI_CONFIG": cfg}
        r = self.sbx_as(None, "whoami", url="", extra_env=env)
        self.assertEqual((r.returncode, r.stdout), (0, b"pl (player)\n"), r.stderr)
        os.chmod(cfg, 0o644)
        r = self.sbx_as(None, "whoami", url="", extra_env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"chmod 600", r.stderr)
        self.assertNoKey(r)
        # The default place: ~/.config/sbxctl/config.
        os.makedirs(os.path.join(self.home, ".config", "sbxctl"), exist_ok=True)
        home_cfg = os.path.join(self.home, ".config", "sbxctl", "config")
        shutil.copy(cfg, home_cfg)
        os.chmod(home_cfg, 0o600)
        self.addCleanup(os.unlink, home_cfg)
        r = self.sbx_as(None, "whoami", url="")
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, b"pl (player)\n", b""))

    def test_old_config_place_is_read_with_one_deprecation_line(self):
        # The CLI was called sbx: ~/.config/sbx/config still works, with one
        # warning line naming the new place; the new place wins, silently.
        old_dir = os.path.join(self.home, ".config", "sbx")
        os.makedirs(old_dir, exist_ok=True)
        old_cfg = os.path.join(old_dir, "config")
        with open(old_cfg, "w") as f:
            f.write("url = %s\nkey = %s\n" % (self.stack.url, self.stack.player))
        os.chmod(old_cfg, 0o600)
        self.addCleanup(os.unlink, old_cfg)
        r = self.sbx_as(None, "whoami", url="")
        self.assertEqual((r.returncode, r.stdout), (0, b"pl (player)\n"), r.stderr)
        new_cfg = os.path.join(self.home, ".config", "sbxctl", "config")
        self.assertEqual(r.stderr, ("sbxctl: warning: reading %s, the old place (deprecated); "
                                    "move it to %s.\n" % (old_cfg, new_cfg)).encode())
        self.assertNoKey(r)
        # A bad old file is refused like a bad new one (chmod 600 rule).
        os.chmod(old_cfg, 0o644)
        r = self.sbx_as(None, "whoami", url="")
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"chmod 600", r.stderr)
        os.chmod(old_cfg, 0o600)
        # The new place wins: its key is the operator's, and no warning.
        os.makedirs(os.path.dirname(new_cfg), exist_ok=True)
        with open(new_cfg, "w") as f:
            f.write("url = %s\nkey = %s\n" % (self.stack.url, self.stack.operator))
        os.chmod(new_cfg, 0o600)
        self.addCleanup(os.unlink, new_cfg)
        r = self.sbx_as(None, "whoami", url="")
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, b"op (operator)\n", b""))

    def test_no_server_exits_5(self):
        r = self.sbx("npc", "ls", url="http://127.0.0.1:1")
        self.assertEqual(r.returncode, 5)
        self.assertIn(b"Cannot connect", r.stderr)
        r = self.sbx("exec", "alice", "--", "true", url="http://127.0.0.1:1")
        self.assertEqual(r.returncode, 5)

    def test_help_version_and_bad_usage(self):
        for args in (["--help"], ["exec", "--help"], ["npc", "ls", "--help"]):
            r = self.sbx_as(None, *args)
            self.assertEqual(r.returncode, 0, args)
            self.assertIn(b"usage: sbxctl ", r.stdout)
        r = self.sbx_as(None, "--help")
        self.assertIn(b"Exit codes", r.stdout)
        # Every usage line names the command the user types (ADR 0011).
        self.assertNotRegex(r.stdout, rb"(?m)^\s*sbx ", r.stdout)
        self.assertRegex(r.stdout, rb"(?m)^  sbxctl npc create ")
        # a two-word command's first word with --help: the usage of each
        # (a newcomer's `sbxctl egress --help` said "unknown command")
        r = self.sbx_as(None, "egress", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        for cmd in (b"egress grant NPC", b"egress show NPC", b"egress revoke NPC"):
            self.assertIn(b"usage: sbxctl " + cmd, r.stdout)
        r = self.sbx_as(None, "--version")
        self.assertEqual(r.returncode, 0)
        self.assertTrue(r.stdout.startswith(b"sbxctl "))
        for args in (["shell", "--help"], ["attach", "--help"]):
            r = self.sbx_as(None, *args)
            self.assertEqual(r.returncode, 0, args)
            # the exit-code table names them as docs/cli.md's does
            self.assertIn(b"sbxctl exec, shell, attach", r.stdout)
        for args in ([], ["frobnicate"], ["exec", "alice"], ["status"],
                     ["status", "a", "b"], ["ls", "--bogus", "alice:/work"],
                     ["cp", "a", "b"], ["npc"]):
            r = self.sbx(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(b"sbxctl", r.stderr)


    # ------------------------------------------------------------ shell

    def pty_sbx(self, args, act):
        """sbxctl ARGS under a real pty; act(fd, out, prompt) is called as
        output comes (prompt: the shell's prompt came, or 3 s went by) and
        returns True once it has acted. Returns (exit code, output)."""
        import pty
        import select
        env = clean_env()
        env.update(HOME=self.home, SBX_URL=self.stack.url,
                   SBX_KEY=self.stack.player, TERM="xterm")
        pid, fd = pty.fork()
        if pid == 0:
            os.execve(SBX, [SBX] + list(args), env)
        out, done, t0 = b"", False, time.monotonic()
        try:
            while time.monotonic() < t0 + 60:
                r, _, _ = select.select([fd], [], [], 0.1)
                if r:
                    try:
                        c = os.read(fd, 65536)
                    except OSError:
                        c = b""
                    if not c:
                        break
                    out += c
                if not done:
                    done = act(fd, out, out.rstrip().endswith((b"$", b"#")) or
                               time.monotonic() > t0 + 3)
            _, st = os.waitpid(pid, 0)
        finally:
            os.close(fd)
        return os.waitstatus_to_exitcode(st), out

    def test_shell_without_a_command_is_the_login_shell(self):
        # `sbxctl shell NPC`, nothing after: the sandbox user's login shell
        # on a real pty; `exit 4` typed there is sbxctl's exit code.
        def act(fd, out, prompt):
            if prompt:
                os.write(fd, b"exit 4\r")
            return prompt
        rc, out = self.pty_sbx(["shell", "alice"], act)
        self.assertEqual(rc, 4, out)
        self.assertNotIn(b"usage", out)

    def test_shell_says_the_terminal_ended_with_an_api_that_shuts_down(self):
        st = self.stack

        def act(fd, out, prompt):
            if prompt:
                st.api.stop()       # SIGTERM: the api drains
            return prompt
        try:
            rc, out = self.pty_sbx(["shell", "alice"], act)
        finally:
            st.apis.remove(st.api)
            st.api, st.url = st.start_api(st.api_state, (), "api.%d" % len(st.apis))
        self.assertEqual(rc, 5, out)
        self.assertIn(b"ended with the api", out)
        self.assertNotIn(b"reattach", out)

class FakeAPI:
    """A scripted HTTP server on 127.0.0.1:0: each request gets the raw bytes
    the test queued (status line, headers, body), written in pieces."""

    def __init__(self):
        import http.server
        import threading
        self.replies = []
        self.seen = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one_request(self):
                self.raw_requestline = self.rfile.readline(65537)
                if not self.raw_requestline or not self.parse_request():
                    return
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.seen.append((self.command, self.path, dict(self.headers), body))
                try:
                    for piece in outer.replies.pop(0):
                        self.wfile.write(piece)
                        self.wfile.flush()
                        time.sleep(0.01)
                except OSError:
                    pass  # the client left early: that is its right
                self.close_connection = True

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def chunked(*parts):
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in parts] + [b"0\r\n\r\n"]


SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
CREATED = b'{"exec_id":"x1","state":"running"}'
CREATED_REPLY = [b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(CREATED), CREATED]


class CLIAgainstScriptedServerTest(unittest.TestCase):
    """What the CLI makes of answers our api does not send but a proxy or a
    future server may: other SSE spellings, cut streams, bare error pages."""

    KEY = "k" * 43

    def setUp(self):
        self.api = FakeAPI()
        self.addCleanup(self.api.close)

    def sbx(self, *args, input=None):
        env = clean_env()
        env.update(SBX_URL=self.api.url, SBX_KEY=self.KEY, HOME="/nonexistent")
        return subprocess.run([SBX] + list(args), env=env, capture_output=True,
                              input=input, timeout=60)

    def test_any_valid_sse_spelling_is_decoded_byte_exact(self):
        stream = (b"\xef\xbb\xbf: ping\r\n\r\n"
                  b"event: start\r\ndata: {\"exec_id\":\"e1\",\"ts\":1}\r\n\r\n"
                  b"id: 2\revent: stdout\rdata: {\"data\":\"a\\u0000b\\n\"}\r\r"
                  b"event: progress\ndata: {\"whatever\":1}\n\n"
                  b"event: stderr\ndata: {\"data_b64\":\n"
                  b"data: \"/w==\"}\n\n"
                  b"event: exit\ndata: {\"code\":9,\"signal\":null,\"duration_ms\":1,\"truncated\":false}\n\n")
        pieces = [stream[i:i + 7] for i in range(0, len(stream), 7)]
        self.api.replies.append(CREATED_REPLY)
        self.api.replies.append([SSE_HEAD] + chunked(*pieces))
        r = self.sbx("exec", "-e", "A=1", "-w", "/work/x", "-t", "2.5", "npc1", "--", "echo", "hi there")
        self.assertEqual(r.returncode, 9, r.stderr)
        self.assertEqual(r.stdout, b"a\x00b\n")
        self.assertEqual(r.stderr, b"\xff")
        self.assertEqual(self.api.seen[1][:2], ("GET", "/api/v1/npcs/npc1/sandbox/execs/x1/"
                                                        "events?follow=1"))
        method, path, headers, body = self.api.seen[0]
        self.assertEqual((method, path), ("POST", "/api/v1/npcs/npc1/sandbox/execs"))
        self.assertEqual(headers["Authorization"], "Bearer " + self.KEY)
        self.assertEqual(json.loads(body), {"argv": ["echo", "hi there"], "cwd": "/work/x",
                                            "env": ["A=1"], "timeout_ms": 2500})

    def test_a_stream_cut_before_exit_is_resumed_after_the_last_id(self):
        self.api.replies.append(CREATED_REPLY)
        self.api.replies.append([SSE_HEAD] + chunked(
            b"retry: 2000\n\nid: 1\nevent: start\ndata: {\"exec_id\":\"e\",\"ts\":1}\n\n",
            b"id: 2\nevent: stdout\ndata: {\"data\":\"partial \"}\n\n")[:-1])
        self.api.replies.append([SSE_HEAD] + chunked(
            b"id: 3\nevent: stdout\ndata: {\"data\":\"rest\"}\n\n"
            b"id: 4\nevent: exit\ndata: {\"code\":3,\"signal\":null,\"duration_ms\":1,"
            b"\"truncated\":false}\n\n"))
        r = self.sbx("exec", "npc1", "--", "true")
        self.assertEqual((r.returncode, r.stdout, r.stderr), (3, b"partial rest", b""))
        self.assertEqual(self.api.seen[2][:2], ("GET", "/api/v1/npcs/npc1/sandbox/execs/x1/"
                                                        "events?follow=1&last_event_id=2"))

    def test_a_stream_cut_that_cannot_be_resumed_is_an_error(self):
        self.api.replies.append(CREATED_REPLY)
        self.api.replies.append([SSE_HEAD] + chunked(
            b"event: start\ndata: {\"exec_id\":\"e\",\"ts\":1}\n\n",
            b"event: stdout\ndata: {\"data\":\"partial\"}\n\n")[:-1])
        self.api.replies.append([b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"])
        r = self.sbx("exec", "npc1", "--", "true")
        self.assertEqual(r.returncode, 4)
        self.assertEqual(r.stdout, b"partial")
        self.assertTrue(r.stderr.startswith(b"sbxctl: "), r.stderr)

    def test_error_event_after_exit_is_reported(self):
        self.api.replies.append(CREATED_REPLY)
        self.api.replies.append([SSE_HEAD] + chunked(
            b"event: start\ndata: {\"exec_id\":\"e\",\"ts\":1}\n\n"
            b"event: exit\ndata: {\"code\":137,\"signal\":\"KILL\",\"duration_ms\":1,\"truncated\":false}\n\n"
            b"event: error\ndata: {\"code\":\"timeout\",\"message\":\"exec ran too long\"}\n\n"))
        r = self.sbx("exec", "npc1", "--", "sleep", "9")
        self.assertEqual(r.returncode, 124)
        self.assertEqual(r.stderr, b"sbxctl: exec ran too long\n")

    def test_bare_gateway_errors_exit_5_and_json_errors_show_the_sentence(self):
        self.api.replies.append([b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 5\r\n\r\noops!"])
        r = self.sbx("npc", "ls")
        self.assertEqual(r.returncode, 5)
        self.assertIn(b"HTTP 502", r.stderr)
        body = b'{"error":{"code":"conflict","message":"An NPC has that name."}}'
        self.api.replies.append([b"HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(body), body])
        r = self.sbx("npc", "create", "x")
        self.assertEqual((r.returncode, r.stderr), (1, b"sbxctl: An NPC has that name.\n"))
        self.api.replies.append([b"SSH-2.0-OpenSSH\r\n"])
        r = self.sbx("npc", "ls")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"not HTTP", r.stderr)

    def test_exec_that_cannot_reach_the_server_again_says_how_to_resume(self):
        self.api.replies.append(CREATED_REPLY)
        for _ in range(9):  # the first try and 8 retries (about 11 s of waits)
            self.api.replies.append([b"HTTP/1.1 503 Service Unavailable\r\n"
                                     b"Content-Length: 0\r\n\r\n"])
        r = self.sbx("exec", "npc1", "--", "true")
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertEqual(len(self.api.seen), 10)
        self.assertTrue(r.stderr.endswith(b"sbxctl: the command may still be running "
                                          b"(resume with: sbxctl logs -f npc1 x1).\n"),
                        r.stderr)

    def test_a_stopped_sandbox_is_one_sentence_naming_the_npc_and_the_command(self):
        body = (b'{"error":{"code":"not_running","message":'
                b'"sandbox npc-alice is not running: ensure it first"}}')
        self.api.replies.append([b"HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(body), body])
        r = self.sbx("exec", "alice", "--", "true")
        self.assertEqual((r.returncode, r.stdout), (1, b""))
        self.assertEqual(r.stderr, b"sbxctl: alice's sandbox is not running "
                                   b"(start it with: sbxctl up alice).\n")

    def test_paths_are_percent_encoded_and_uploads_carry_the_mode(self):
        ok = b'{"npc":"n","path":"/work/a b"}'
        self.api.replies.append([b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ok), ok])
        r = self.sbx("cp", "--mode", "0750", "-", "n:/work/a b/c&d=%.txt", input=b"\x00\x01")
        self.assertEqual(r.returncode, 0, r.stderr)
        method, path, headers, body = self.api.seen[0]
        self.assertEqual(method, "PUT")
        self.assertEqual(path, "/api/v1/npcs/n/sandbox/files?path=/work/a%20b/c%26d%3D%25.txt&mode=0750")
        self.assertEqual(body, b"\x00\x01")


    @staticmethod
    def json_reply(obj, status=200):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        return [b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % (status, len(body)) + body]

    def test_ls_survives_int64_mtime_and_escapes_control_bytes(self):
        ents = [{"name": "evil\x1b[2J\x1b]0;pwned\x07name\n", "type": "file", "size": 1,
                 "mode": 420, "mtime": 9223372036854775807},
                {"name_b64": "/xtbMzFt", "type": "file", "size": 2, "mode": 420,
                 "mtime": -9223372036854775808},
                {"name": "c1\u009b2J", "type": "dir", "size": 3, "mode": 493, "mtime": 0}]
        self.api.replies.append(self.json_reply({"entries": ents, "truncated": False,
                                                 "cursor": None}))
        r = self.sbx("ls", "npc1:/work")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout + r.stderr
        self.assertNotIn(b"\x1b", out)
        self.assertNotIn(b"\x07", out)
        self.assertNotIn(b"\xc2\x9b", out)
        lines = r.stdout.decode().splitlines()
        self.assertEqual(len(lines), 3, r.stdout)
        self.assertIn("@9223372036854775807", lines[0])
        self.assertIn("evil\\x1b[2J\\x1b]0;pwned\\x07name\\x0a", lines[0])
        self.assertIn("@-9223372036854775808", lines[1])
        self.assertIn("\\xff\\x1b[31m", lines[1])      # name_b64 decoded, escaped
        self.assertIn("c1\\xc2\\x9b2J/", lines[2])
        self.assertIn("1970-01-01 00:00", lines[2])
        self.assertIn("cursor=", self.api.seen[0][1])

    def test_ls_follows_the_cursor_and_reads_the_old_array(self):
        self.api.replies.append(self.json_reply({"entries": [{"name": "a", "type": "file", "size": 1,
                                                              "mode": 420, "mtime": 1}],
                                                 "truncated": True, "cursor": "Yg"}))
        self.api.replies.append(self.json_reply({"entries": [{"name": "c", "type": "file", "size": 1,
                                                              "mode": 420, "mtime": 1}],
                                                 "truncated": False, "cursor": None}))
        r = self.sbx("ls", "npc1:/work")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([l.split()[-1] for l in r.stdout.decode().splitlines()], ["a", "c"])
        self.assertTrue(self.api.seen[0][1].endswith("&cursor="), self.api.seen[0][1])
        self.assertTrue(self.api.seen[1][1].endswith("&cursor=Yg"), self.api.seen[1][1])
        # a server of before the pages: the bare array
        self.api.replies.append(self.json_reply([{"name": "z", "type": "dir", "size": 1,
                                                  "mode": 493, "mtime": 1}]))
        r = self.sbx("ls", "npc1:/work")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.decode().rstrip().endswith("z/"), r.stdout)

    def test_ls_never_crashes_on_odd_replies(self):
        odd = [b"\"just a string\"", b"{\"entries\":7}", b"null", b"[1,\"x\",null,[]]",
               json.dumps({"entries": [{"name": 5, "mtime": "soon", "size": "big", "type": 3,
                                        "mode": None}], "truncated": True,
                           "cursor": "../../etc"}).encode(),
               json.dumps({"entries": [{"name_b64": "!!!", "mtime": 1e300}],
                           "truncated": True, "cursor": None}).encode(),
               b"{\"entries\":[{\"name\":\"" + b"\\u001b" * 5000 + b"\"}]}"]
        for body in odd:
            self.api.replies.append(self.json_reply(body))
            r = self.sbx("ls", "npc1:/work")
            self.assertIn(r.returncode, (0, 1), (body[:80], r.returncode, r.stderr))
            self.assertNotIn(b"\x1b", r.stdout + r.stderr)

if __name__ == "__main__":
    unittest.main()
