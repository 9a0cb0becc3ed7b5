"""test_api_ws - terminals attached by WebSocket (issue 21 items 3, 4 and 7;
docs/api.md "Terminals over WebSocket: subprotocol sbx.v1", adr/0052): a real
sandbox-api in front of a real broker on the runtime under test, Debian's
python3-websockets as the client. Typing into a shell, two viewers and one
writer, resize and message-size refusals as close codes, another player's
terminal refused before the upgrade, a viewer that never reads, reattach from
an offset; and sbxctl's exec -i, shell and detach under a real pty.
"""

import asyncio
import base64
import json
import os
import pty
import select
import signal
import shutil
import socket
import subprocess
import tarfile
import io
import threading
import time
import unittest

import websockets
import websockets.exceptions

import sbxtest
from sbxtest import BUILD
from stackfix import Stack, clean_env

SBX = os.path.join(BUILD, "sbxctl")
PROTO = "sbx.v1"


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class WSTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxws%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix, api_args=["--requests-per-minute", "100000",
                                                "--ws-message-max", "64k",
                                                "--ws-output-high", "256k"])
        st = cls.stack
        cls.url = st.url
        cls.host, port = st.url.split("//", 1)[1].split(":")
        cls.port = int(port)
        cls.home = sbxtest.short_tmpdir("sbxwshome-")
        for key, npc in ((st.player, "alice"), (st.other, "bob")):
            r = cls.call(key, "POST", "/api/v1/npcs", {"name": npc})
            assert r.status == 201, r.body
            r = cls.call(key, "PUT", "/api/v1/npcs/%s/sandbox" % npc)
            assert r.status == 200, r.body

    @classmethod
    def tearDownClass(cls):
        try:
            for key, npc in ((cls.stack.player, "alice"), (cls.stack.other, "bob")):
                cls.call(key, "DELETE", "/api/v1/npcs/%s/sandbox" % npc)
        finally:
            cls.stack.close()
            shutil.rmtree(cls.home, True)

    @classmethod
    def call(cls, key, method, path, body=None, headers=None):
        h = dict(headers or {})
        if key:
            h["Authorization"] = "Bearer " + key
        return sbxtest.tcp_http(cls.host, cls.port, method, path, body, h, 120)

    def term(self, argv=("sh",), pty_=True, npc="alice", key=None, **extra):
        body = {"argv": list(argv), "pty": pty_}
        if pty_:
            body.update({"cols": 80, "rows": 24})
        body.update(extra)
        r = self.call(key or self.stack.player, "POST",
                      "/api/v1/npcs/%s/sandbox/terminals" % npc, body)
        self.assertEqual(r.status, 201, r.body)
        t = r.json()
        self.addCleanup(self.call, key or self.stack.player, "DELETE",
                        "/api/v1/npcs/%s/sandbox/terminals/%s" % (npc, t["id"]))
        return t

    def ws_url(self, t, npc="alice", offset=None, ticket=None):
        u = "ws://%s:%d/api/v1/npcs/%s/sandbox/terminals/%s/attach" % (
            self.host, self.port, npc, t["id"])
        q = []
        if offset is not None:
            q.append("offset=%d" % offset)
        if ticket is not None:
            q.append("ticket=" + ticket)
        return u + ("?" + "&".join(q) if q else "")

    def connect(self, t, key=None, **kw):
        hdrs = {"Authorization": "Bearer " + (key or self.stack.player)}
        if kw.pop("nokey", False):
            hdrs = {}
        return websockets.connect(self.ws_url(t, **kw), subprotocols=[PROTO],
                                  extra_headers=hdrs, compression=None,
                                  max_size=4 << 20)

    @staticmethod
    async def hello(ws):
        h = json.loads(await ws.recv())
        w = json.loads(await ws.recv())
        assert h["type"] == "hello", h
        assert w["type"] == "writer", w
        return h, w

    @staticmethod
    async def read_until(ws, needle, limit=10.0):
        """Output bytes (stream 1 and 2) until needle is in them."""
        out = b""
        end = time.monotonic() + limit
        while needle not in out:
            m = await asyncio.wait_for(ws.recv(), max(0.1, end - time.monotonic()))
            if isinstance(m, bytes):
                out += m[1:]
        return out

    # ------------------------------------------------------------ typing

    def test_typing_echo_hi_into_a_shell_shows_hi(self):
        t = self.term()

        async def go():
            async with self.connect(t) as ws:
                self.assertEqual(ws.subprotocol, PROTO)
                h, w = await self.hello(ws)
                self.assertEqual(h["id"], t["id"])
                self.assertTrue(h["pty"])
                self.assertTrue(w["you"])
                await ws.send(b"echo h''i\r")
                out = await self.read_until(ws, b"hi\r\n")
                self.assertIn(b"hi\r\n", out)
                await ws.send(b"exit 3\r")
                msgs = []
                try:
                    while True:
                        m = await ws.recv()
                        if isinstance(m, str):
                            msgs.append(json.loads(m))
                except websockets.exceptions.ConnectionClosed as e:
                    return msgs, e.code
        msgs, code = run(go())
        self.assertEqual(code, 1000)
        self.assertEqual(msgs[-1]["type"], "exit")
        self.assertEqual(msgs[-1]["code"], 3)

    def test_two_viewers_see_the_same_bytes_only_the_first_writes(self):
        t = self.term(argv=("cat",), pty_=False)

        async def go():
            async with self.connect(t) as a, self.connect(t) as b:
                _, wa = await self.hello(a)
                _, wb = await self.hello(b)
                self.assertTrue(wa["you"])
                self.assertFalse(wb["you"])
                await a.send(b"onetwo\n")
                oa = await self.read_until(a, b"onetwo\n")
                ob = await self.read_until(b, b"onetwo\n")
                self.assertEqual(oa, ob)
                await b.send(b"nope\n")
                with self.assertRaises(websockets.exceptions.ConnectionClosed) as cm:
                    while True:
                        await b.recv()
                self.assertEqual(cm.exception.code, 1008)
                self.assertIn("writer", cm.exception.reason)
                # the writer goes on, and "nope" never reached the command
                await a.send(b"still\n")
                oa = await self.read_until(a, b"still\n")
                self.assertNotIn(b"nope", oa)
        run(go())

    def test_resize_0x0_or_over_10000_closes_1008_with_a_sentence(self):
        t = self.term(argv=("cat",), pty_=False)

        async def go(cols, rows):
            async with self.connect(t) as ws:
                await self.hello(ws)
                await ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))
                with self.assertRaises(websockets.exceptions.ConnectionClosed) as cm:
                    while True:
                        await ws.recv()
                return cm.exception
        for cols, rows in ((0, 0), (10001, 24)):
            e = run(go(cols, rows))
            self.assertEqual(e.code, 1008)
            self.assertIn("1 to 10000", e.reason)

    def test_a_resize_reaches_stty_size(self):
        t = self.term()

        async def go():
            async with self.connect(t) as ws:
                await self.hello(ws)
                await ws.send(json.dumps({"type": "resize", "cols": 132, "rows": 43}))
                await ws.send(b"stty size\r")
                await self.read_until(ws, b"43 132")
        run(go())

    def test_a_message_over_the_cap_closes_1009(self):
        t = self.term(argv=("cat",), pty_=False)

        async def go():
            async with self.connect(t) as ws:
                await self.hello(ws)
                await ws.send(b"x" * (64 * 1024 + 1))
                with self.assertRaises(websockets.exceptions.ConnectionClosed) as cm:
                    while True:
                        await ws.recv()
                return cm.exception
        e = run(go())
        self.assertEqual(e.code, 1009)
        self.assertIn("ws_message_max", e.reason)

    # ------------------------------------------------------------ refusals

    # ------------------------------------------------------------ broker gone (last)

    def test_zz_a_broker_sigkill_closes_4002_and_leaves_no_process(self):
        t = self.term(argv=("sh", "-c", "echo ready-$((400+19)); sleep 4194; echo never"))
        st = self.stack

        async def go():
            async with self.connect(t) as ws:
                await self.hello(ws)
                await self.read_until(ws, b"ready-419")
                st.broker.stop(sig=9)
                with self.assertRaises(websockets.exceptions.ConnectionClosed) as cm:
                    while True:
                        await ws.recv()
                return cm.exception
        e = run(go())
        self.assertEqual(e.code, 4002, e)
        self.assertIn("broker went away", e.reason)
        r = self.call(st.player, "GET", "/api/v1/npcs/alice/sandbox/terminals/" + t["id"])
        self.assertEqual((r.json()["state"], r.json()["reason"]),
                         ("failed", "broker_unavailable"), r.body)
        st.start_broker()

        def left():
            r = self.call(st.player, "POST", "/api/v1/npcs/alice/sandbox/exec",
                          {"argv": ["ps", "-o", "args"]})
            if r.status != 200:
                return None
            return [ln for ln in r.body.split(b"\\n") if b"sleep 4194" in ln]
        sbxtest.wait_until(lambda: left() == [], 15, "no process of the terminal left",
                           interval=0.5)

    def test_another_players_terminal_is_404_before_the_upgrade(self):
        t = self.term()

        async def go(**kw):
            try:
                async with self.connect(t, **kw):
                    return 101
            except websockets.exceptions.InvalidStatusCode as e:
                return e.status_code
        # bob's owner asking for alice's terminal, under either NPC name
        self.assertEqual(run(go(key=self.stack.other)), 404)
        self.assertEqual(run(go(key=self.stack.other, npc="bob")), 404)
        self.assertEqual(run(go(nokey=True)), 401)

    def test_a_handshake_without_sbx_v1_is_400_and_a_ticket_attaches(self):
        t = self.term()
        s = socket.create_connection((self.host, self.port), timeout=10)
        s.sendall(("GET /api/v1/npcs/alice/sandbox/terminals/%s/attach HTTP/1.1\r\n"
                   "Host: x\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" %
                   (t["id"], self.stack.player)).encode())
        head = s.recv(65536)
        s.close()
        self.assertTrue(head.startswith(b"HTTP/1.1 400"), head[:200])
        self.assertIn(b"sbx.v1", head)
        self.assertNotIn(self.stack.player.encode(), head)
        r = self.call(self.stack.player, "POST",
                      "/api/v1/npcs/alice/sandbox/terminals/%s/tickets" % t["id"], {})
        self.assertIn(r.status, (200, 201), r.body)
        tk = r.json()["ticket"]

        async def go():
            async with self.connect(t, nokey=True, ticket=tk) as ws:
                h, _ = await self.hello(ws)
                return h
        self.assertEqual(run(go())["id"], t["id"])

    def test_two_keys_are_400_and_a_subprotocol_in_a_second_field_attaches(self):
        """RFC 6455 §11.3.1: Sec-WebSocket-Key appears once (two, even equal,
        were upgraded with the first one's answer); §11.3.4: several
        Sec-WebSocket-Protocol fields are one list (sbx.v1 in the second was
        400 "Offer the subprotocol")."""
        t = self.term()

        def handshake(fields):
            s = socket.create_connection((self.host, self.port), timeout=10)
            s.sendall(("GET /api/v1/npcs/alice/sandbox/terminals/%s/attach HTTP/1.1\r\n"
                       "Host: x\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n%s\r\n" %
                       (t["id"], self.stack.player, "".join(f + "\r\n" for f in fields))
                       ).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                b = s.recv(65536)
                if not b:
                    break
                head += b
            s.close()
            return head
        k1, k2 = "dGhlIHNhbXBsZSBub25jZQ==", "AQIDBAUGBwgJCgsMDQ4PEA=="
        for keys in ((k1, k1), (k1, k2)):
            head = handshake(["Sec-WebSocket-Key: " + k for k in keys]
                             + ["Sec-WebSocket-Protocol: sbx.v1"])
            self.assertTrue(head.startswith(b"HTTP/1.1 400"), head[:300])
            self.assertIn(b"Sec-WebSocket-Key", head)
        head = handshake(["Sec-WebSocket-Key: " + k1, "Sec-WebSocket-Protocol: chat",
                          "Sec-WebSocket-Protocol: sbx.v1"])
        self.assertTrue(head.startswith(b"HTTP/1.1 101"), head[:300])
        self.assertIn(b"Sec-WebSocket-Protocol: sbx.v1\r\n", head)

    # ------------------------------------------------------------ bounds

    def test_a_viewer_that_never_reads_does_not_grow_the_apis_memory(self):
        t = self.term(argv=("sh", "-c", "while :; do echo 0123456789abcdef0123456789abcdef; done"),
                      pty_=False)
        pid = self.stack.api.pid

        def rss():
            with open("/proc/%d/status" % pid) as f:
                for ln in f:
                    if ln.startswith("VmRSS:"):
                        return int(ln.split()[1]) * 1024
        before = rss()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(10)
        s.connect((self.host, self.port))
        s.sendall(("GET /api/v1/npcs/alice/sandbox/terminals/%s/attach HTTP/1.1\r\n"
                   "Host: x\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                   "Sec-WebSocket-Protocol: sbx.v1\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" %
                   (t["id"], self.stack.player)).encode())
        self.assertTrue(s.recv(12).startswith(b"HTTP/1.1 101"))
        # never read again; the command writes as fast as it can
        peak = 0
        for _ in range(30):
            time.sleep(0.2)
            peak = max(peak, rss())
        r = self.call(self.stack.player, "GET",
                      "/api/v1/npcs/alice/sandbox/terminals/%s" % t["id"])
        s.close()
        self.assertEqual(r.status, 200, r.body)
        # ws_output_high (256 KiB here) + the scrollback ring (1 MiB) +
        # slack; the command writes 16 MiB (its output cap) within ~1 s
        self.assertLess(peak - before, 6 << 20,
                        "api RSS grew %d bytes under a viewer that never reads" %
                        (peak - before))

    def test_reattach_with_the_offset_gets_every_byte_once(self):
        t = self.term(argv=("sh", "-c", "i=0; while [ $i -lt 400 ]; do "
                            "echo line-$i; i=$((i+1)); sleep 0.005; done"),
                      pty_=False)

        async def part(offset, stop_after):
            got = b""
            async with self.connect(t, offset=offset) as ws:
                h, _ = await self.hello(ws)
                self.assertEqual(h["offset"], offset)
                try:
                    while stop_after is None or len(got) < stop_after:
                        m = await ws.recv()
                        if isinstance(m, bytes):
                            got += m[1:]
                except websockets.exceptions.ConnectionClosed:
                    pass
            return got

        first = run(part(0, 1000))
        # line boundaries are no escape or UTF-8: the cut is where we left
        rest = run(part(len(first), None))
        want = b"".join(b"line-%d\n" % i for i in range(400))
        self.assertEqual(first + rest, want)

    # ------------------------------------------------------------ sbxctl

    def sbx(self, *args, **kw):
        env = clean_env()
        env["HOME"] = self.home
        env["SBX_URL"] = self.url
        env["SBX_KEY"] = self.stack.player
        return subprocess.run([SBX] + list(args), env=env, capture_output=True,
                              timeout=kw.pop("timeout", 120), **kw)

    def test_sbxctl_terminals_lists_the_detached_and_kills_one(self):
        # A newcomer's detached shells ran on unseen: only `sbxctl stop` got
        # rid of them. Now they are listed, and one is killed by its id.
        t1 = self.term(argv=("sleep", "4197"), pty_=False)
        t2 = self.term(argv=("sleep", "4198"), pty_=False)
        r = self.sbx("terminals", "alice")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.decode().splitlines()
        self.assertTrue(lines[0].startswith("ID "), lines)
        row = {ln.split()[0]: ln.split() for ln in lines[1:]}
        self.assertEqual(row[t1["id"]][1], "running")
        self.assertIn("sleep 4198", r.stdout.decode())
        self.assertLess(lines.index([ln for ln in lines if t2["id"] in ln][0]),
                        lines.index([ln for ln in lines if t1["id"] in ln][0]))  # newest first
        r = self.sbx("terminals", "alice", "kill", t1["id"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"killed", r.stdout)
        st = self.call(self.stack.player, "GET",
                       "/api/v1/npcs/alice/sandbox/terminals/" + t1["id"]).json()
        self.assertEqual(st["state"], "killed")
        r = self.sbx("terminals", "alice", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(t2["id"], [x["id"] for x in json.loads(r.stdout)["terminals"]])
        self.assertEqual(self.sbx("terminals", "alice", "kill", "Not-an-id!").returncode, 2)
        self.assertEqual(self.sbx("terminals", "alice", "kill", "t0123").returncode, 4)
        self.assertEqual(self.sbx("terminals", "nobody-here").returncode, 4)

    def test_a_missing_working_directory_is_exit_4_with_and_without_i(self):
        # docs/cli.md: a -w directory that does not exist is exit 4; with -i
        # (a terminal underneath) it was 1.
        for extra in ([], ["-i"]):
            r = self.sbx("exec", "-w", "/work/no-such-dir", *extra, "alice", "--", "pwd",
                         stdin=subprocess.DEVNULL)
            self.assertEqual(r.returncode, 4, (extra, r.stderr))
            self.assertIn(b"does not exist", r.stderr)

    def test_sbxctl_exec_i_round_trips_a_tar_byte_exact(self):
        src = io.BytesIO()
        files = {}
        with tarfile.open(fileobj=src, mode="w") as tf:
            for i in range(6):
                data = os.urandom(600 * 1024 + i)
                files["d/f%d" % i] = data
                ti = tarfile.TarInfo("d/f%d" % i)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
        tarball = src.getvalue()
        r = self.sbx("exec", "-i", "alice", "--", "sh", "-c",
                     "rm -rf /work/rt && mkdir /work/rt && tar -C /work/rt -x "
                     "&& echo done >&2", input=tarball)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, b"done\n")
        r = self.sbx("exec", "alice", "--", "tar", "-C", "/work/rt", "-c", "d")
        self.assertEqual(r.returncode, 0, r.stderr)
        with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tf:
            back = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}
        self.assertEqual(back, files)

    def test_sbxctl_exec_i_stdin_end_is_eof_and_the_code_comes_back(self):
        r = self.sbx("exec", "-i", "alice", "--", "sh", "-c", "wc -c; exit 4",
                     input=b"x" * 1000)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertEqual(r.stdout.strip(), b"1000")

    def _pty_sbx(self, args, script):
        """sbxctl under a pty: writes script's (delay, bytes) and returns
        (exit code, output, stty -g before, after)."""
        env = clean_env()
        env.update(HOME=self.home, SBX_URL=self.url, SBX_KEY=self.stack.player,
                   TERM="xterm")
        env["STTY_B"] = os.path.join(self.home, "stty")
        env["STTY_A"] = os.path.join(self.home, "stty.after")
        pid, fd = pty.fork()
        if pid == 0:
            os.execve("/bin/sh", ["sh", "-c", 'stty -g > "$STTY_B"; "$@"; rc=$?; '
                                  'stty -g > "$STTY_A"; exit $rc', "sh", SBX] +
                      list(args), env)
        out = b""
        try:
            for delay, data in script:
                end = time.monotonic() + delay
                while time.monotonic() < end:
                    r, _, _ = select.select([fd], [], [], 0.05)
                    if r:
                        try:
                            out += os.read(fd, 65536)
                        except OSError:
                            break
                if data == b"SIGTERM":
                    # to sbxctl itself, the wrapper shell's child
                    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                        os.kill(int(f.read().split()[0]), signal.SIGTERM)
                    continue
                os.write(fd, data)
            end = time.monotonic() + 30
            while time.monotonic() < end:
                r, _, _ = select.select([fd], [], [], 0.1)
                if r:
                    try:
                        c = os.read(fd, 65536)
                    except OSError:
                        break
                    if not c:
                        break
                    out += c
                wpid, st = os.waitpid(pid, os.WNOHANG)
                if wpid:
                    pid = 0
                    break
            if pid:
                _, st = os.waitpid(pid, 0)
        finally:
            os.close(fd)
        with open(os.path.join(self.home, "stty")) as f:
            before = f.read()
        with open(os.path.join(self.home, "stty.after")) as f:
            after = f.read()
        return os.waitstatus_to_exitcode(st), out, before, after

    def test_sbxctl_shell_exits_with_the_shells_code_and_restores_the_terminal(self):
        rc, out, before, after = self._pty_sbx(
            ["shell", "alice", "--", "sh"], [(2.0, b"echo in''side\r"), (1.0, b"exit 5\r")])
        self.assertEqual(rc, 5, out)
        self.assertIn(b"inside", out)
        self.assertEqual(before, after)

    def test_sbxctl_attach_in_raw_mode_exits_with_the_code_and_restores(self):
        # a pty:false terminal: sbxctl's own raw mode and restore, without
        # the sandbox's pty
        t = self.term(argv=("sh", "-c", "read x; echo got-$x; exit 5"), pty_=False)
        rc, out, before, after = self._pty_sbx(
            ["attach", "alice", t["id"]], [(1.0, b"go\n")])
        self.assertEqual(rc, 5, out)
        self.assertIn(b"got-go", out)
        self.assertEqual(before, after)
        # the local terminal was raw meanwhile: "go\n" was not echoed by it
        self.assertNotIn(b"go\r\n", out.replace(b"got-go", b""))

    def test_sbxctl_killed_by_sigterm_restores_the_terminal_and_leaves_it_running(self):
        t = self.term(argv=("cat",), pty_=False)
        rc, out, before, after = self._pty_sbx(
            ["attach", "alice", t["id"]], [(1.0, b"abc\n"), (1.0, b"SIGTERM")])
        self.assertEqual(rc, 128 + 15, out)
        self.assertEqual(before, after)
        self.assertIn(("sbxctl attach alice %s" % t["id"]).encode(), out)
        r = self.call(self.stack.player, "GET",
                      "/api/v1/npcs/alice/sandbox/terminals/%s" % t["id"])
        self.assertEqual(r.json()["state"], "running")

    def test_sbxctl_attach_detach_key_leaves_a_terminal_running(self):
        t = self.term(argv=("cat",), pty_=False)
        rc, out, before, after = self._pty_sbx(
            ["attach", "alice", t["id"]], [(1.0, b"abc\n"), (1.0, b"\x1dd")])
        self.assertEqual(rc, 0, out)
        self.assertEqual(before, after)
        self.assertIn(b"abc", out)
        self.assertIn(("sbxctl attach alice %s" % t["id"]).encode(), out)
        r = self.call(self.stack.player, "GET",
                      "/api/v1/npcs/alice/sandbox/terminals/%s" % t["id"])
        self.assertEqual(r.json()["state"], "running")

    def test_a_second_sbxctl_attach_stays_beside_the_writer_read_only(self):
        # A newcomer's second `sbxctl attach` exited at once with 2: it sent
        # its window size before the api's writer message said it was
        # read-only, and the api closes a read-only viewer's control (1008).
        t = self.term()
        ready, done, seen = threading.Event(), threading.Event(), []

        def writer():
            async def go():
                async with self.connect(t) as a:
                    _, w = await self.hello(a)
                    seen.append(w["you"])
                    ready.set()
                    await a.send(b"echo from-the-wri''ter\r")
                    while not done.is_set():
                        try:
                            await asyncio.wait_for(a.recv(), 0.2)
                        except asyncio.TimeoutError:
                            pass
            run(go(), 120)
        th = threading.Thread(target=writer, daemon=True)
        th.start()
        self.assertTrue(ready.wait(30))
        try:
            rc, out, before, after = self._pty_sbx(
                ["attach", "alice", t["id"]], [(2.0, b"x"), (1.0, b"\x1dd")])
        finally:
            done.set()
            th.join(30)
        self.assertEqual(seen, [True])
        self.assertEqual(rc, 0, out)                      # detached, not thrown off
        self.assertIn(b"from-the-writer", out)           # the same bytes as the writer
        self.assertIn(b"another viewer is the writer", out)
        self.assertEqual(before, after)

    def test_sbxctl_detach_key_leaves_the_terminal_running_and_attach_returns(self):
        rc, out, before, after = self._pty_sbx(
            ["shell", "alice", "--", "sh"],
            [(2.0, b"echo mark''er\r"), (1.0, b"\x1dd")])
        self.assertEqual(rc, 0, out)
        self.assertEqual(before, after)
        i = out.find(b"sbxctl attach alice ")
        self.assertGreater(i, 0, out)
        tid = out[i + len(b"sbxctl attach alice "):].split(b")")[0].decode()
        r = self.call(self.stack.player, "GET",
                      "/api/v1/npcs/alice/sandbox/terminals/%s" % tid)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["state"], "running")
        rc, out, before, after = self._pty_sbx(
            ["attach", "alice", tid], [(2.0, b"exit 6\r")])
        self.assertEqual(rc, 6, out)
        self.assertIn(b"marker", out)       # the scrollback came first
        self.assertEqual(before, after)


if __name__ == "__main__":
    unittest.main()
