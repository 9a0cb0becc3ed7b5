#!/usr/bin/python3
# test_broker_exec.py - exec through the broker: NDJSON events, binary safety, timeout, disconnect, caps (SPEC §5, §6).

import base64
import json
import os
import re
import time
import unittest

from brokerfix import BrokerTestCase, ExecStream, MiB, wait_until


def procs(client, sid, pattern):
    """Process lines of `ps` in the sandbox matching pattern (regex on bytes)."""
    res = client.exec(sid, ["ps", "-o", "pid,args"])
    assert res.code == 0, res
    rx = re.compile(pattern)
    return [l for l in bytes(res.out).splitlines() if rx.search(l) and b"ps -o" not in l]


def stdout_lines(res):
    """The stdout events of res's kept head, as sent (the last one may be cut)."""
    outs = []
    for l in bytes(res.raw_head).split(b"\n"):
        if l.startswith(b'{"type":"stdout"'):
            try:
                outs.append(json.loads(l))
            except ValueError:
                pass   # the cut last line of the kept head
    return outs


class ExecTest(BrokerTestCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("exec")
        cls.ensure_ok(cls.sid)

    def test_events_in_order(self):
        # Five times: the order across stdout and stderr must hold every time,
        # not by luck (the runtime copies the two pipes independently).
        for _ in range(5):
            res = self.client.exec(self.sid, ["sh", "-c", "echo out; echo err >&2; exit 3"])
            self.assertEqual(res.types(), ["start", "stdout", "stderr", "exit"], res)
        start = res.events[0]
        self.assertIsInstance(start.get("exec_id"), str)
        self.assertTrue(start["exec_id"])
        self.assertIsInstance(start.get("ts"), (int, float))
        self.assertEqual(bytes(res.out), b"out\n")
        self.assertEqual(bytes(res.err), b"err\n")
        self.assertEqual(res.exit["code"], 3)
        self.assertIsNone(res.exit.get("signal"))
        self.assertIs(res.exit["truncated"], False)
        self.assertIsInstance(res.exit["duration_ms"], (int, float))
        self.assertIsNone(res.error)

    def test_exit_code_zero_and_no_output(self):
        res = self.client.exec(self.sid, ["true"])
        self.assertEqual(res.types(), ["start", "exit"], res)
        self.assertEqual(res.code, 0)

    def test_runs_as_sandbox_user_in_work(self):
        res = self.client.exec(self.sid, ["sh", "-c", "id -u; pwd"])
        uid, cwd = bytes(res.out).split()
        self.assertNotEqual(uid, b"0")
        self.assertEqual(cwd, b"/work")

    def test_binary_bytes_exact(self):
        res = self.client.exec(self.sid, ["printf", r"\377\376\000\r\n"])
        self.assertEqual(res.code, 0, res)
        self.assertEqual(bytes(res.out), b"\xff\xfe\x00\r\n")
        # the same on stderr
        res = self.client.exec(self.sid, ["sh", "-c", r"printf '\377\376\000\r\n' >&2"])
        self.assertEqual(bytes(res.err), b"\xff\xfe\x00\r\n")
        self.assertEqual(bytes(res.out), b"")
        # encoded surrogate half (invalid UTF-8) and a valid multibyte character
        res = self.client.exec(self.sid, ["printf", r"\355\240\200|\303\251|\000"])
        self.assertEqual(bytes(res.out), b"\xed\xa0\x80|\xc3\xa9|\x00")

    def test_wire_rule_nul_heavy_goes_as_data_b64_text_as_data(self):
        # adr/0028: valid UTF-8 goes as data only when its escaping is no
        # longer than base64; NULs cost 6 bytes as \u0000, 1.33 as base64
        res = self.client.exec(self.sid, ["head", "-c", "262144", "/dev/zero"])
        self.assertEqual(res.code, 0, res)
        self.assertEqual(bytes(res.out), b"\0" * 262144)
        outs = stdout_lines(res)
        self.assertTrue(outs)
        self.assertEqual([o for o in outs if "data" in o], [], "NULs went as data")
        self.assertLess(res.raw_bytes, 1.4 * 262144, "wire bytes per byte of NUL output")
        # text, and text with a few escapes, stays data (a colour escape
        # costs 5 more bytes: 2 in 56 bytes are well under base64's 76)
        line = b"tab\there \x1b[1mbold\x1b[0m and then some plain words to read\n"
        res = self.client.exec(self.sid, ["sh", "-c", "seq 1 3000; printf 'tab\\there "
                                          "\\033[1mbold\\033[0m and then some plain words to read\\n'"])
        self.assertEqual(res.code, 0, res)
        self.assertTrue(bytes(res.out).endswith(line), res)
        outs = stdout_lines(res)
        self.assertEqual([o for o in outs if "data_b64" in o], [], "text went as data_b64")

    def test_one_mib_line(self):
        res = self.client.exec(self.sid, ["sh", "-c", "head -c 1048576 /dev/zero | tr '\\000' a; echo"])
        self.assertEqual(res.code, 0, res)
        self.assertIs(res.exit["truncated"], False)
        self.assertEqual(len(res.out), MiB + 1)
        self.assertEqual(bytes(res.out), b"a" * MiB + b"\n")

    def test_random_bytes_roundtrip_through_cat(self):
        data = os.urandom(300 * 1024)
        r = self.client.write(self.sid, "/work/rand.bin", data)
        self.assertIn(r.status, (200, 201, 204), r)
        res = self.client.exec(self.sid, ["cat", "/work/rand.bin"])
        self.assertEqual(res.code, 0, res)
        self.assertEqual(len(res.out), len(data))
        self.assertTrue(bytes(res.out) == data, "stdout differs from the file's bytes")
        # multibyte characters split across reads stay exact
        res = self.client.exec(self.sid, ["sh", "-c", "i=0; while [ $i -lt 20000 ]; do printf '\\342\\202\\254\\303\\251x'; i=$((i+1)); done"])
        self.assertEqual(bytes(res.out), "€éx".encode() * 20000)

    def test_stdin_and_cwd(self):
        payload = b"line1\n\x00\xffbin\n"
        res = self.client.exec(self.sid, ["cat"], extra={"stdin": base64.b64encode(payload).decode()})
        self.assertEqual(res.code, 0, res)
        self.assertEqual(bytes(res.out), payload)
        self.client.exec(self.sid, ["mkdir", "-p", "/work/sub"])
        res = self.client.exec(self.sid, ["pwd"], extra={"cwd": "/work/sub"})
        self.assertEqual(bytes(res.out), b"/work/sub\n")

    def test_timeout_kills_process_tree(self):
        t0 = time.monotonic()
        res = self.client.exec(self.sid, ["sh", "-c", "sleep 301 & sleep 302"], timeout_ms=500, timeout=30)
        took = time.monotonic() - t0
        self.assertIsNotNone(res.error, res)
        self.assertEqual(res.error["code"], "timeout", res)
        self.assertEqual(res.types()[-1], "error", res)
        self.assertLess(took, 2.0, "timeout reported after %.2fs" % took)
        self.assertEqual(procs(self.client, self.sid, rb"sleep 30[12]"), [],
                         "the exec's process tree survived its timeout")

    def test_disconnect_kills_process_tree(self):
        st = ExecStream(self.client, self.sid, ["sh", "-c", "sleep 303 & sleep 304"])
        self.assertEqual(st.resp.status, 200)
        st.wait_for("start")
        both = wait_until(lambda: len(procs(self.client, self.sid, rb"^\s*\d+\s+sleep 30[34]")) == 2, 3.0, 0.1)
        self.assertTrue(both, "the exec did not start its two sleeps")
        st.close()
        t0 = time.monotonic()
        left = wait_until(lambda: not procs(self.client, self.sid, rb"sleep 30[34]"), 2.0, 0.1)
        self.assertTrue(left, "sleep still running %.1fs after the client went away"
                        % (time.monotonic() - t0))

    def test_output_cap_truncates(self):
        cap = self.broker.limits["output_cap"]
        res = self.client.exec(self.sid, ["yes"], timeout=20)
        self.assertIsNotNone(res.exit, res)
        self.assertIs(res.exit["truncated"], True, res)
        total = len(res.out) + len(res.err)
        self.assertLessEqual(total, cap)
        self.assertGreaterEqual(total, cap * 0.9)
        self.assertEqual(bytes(res.out[:6]), b"y\ny\ny\n")
        self.assertEqual(procs(self.client, self.sid, rb"(^|\s)yes$"), [], "yes still runs after the cap")

    def test_exec_in_absent_and_stopped_sandbox(self):
        conn, r = self.client.exec_open("never-made-" + self.sid, ["true"])
        body = r.read()
        conn.close()
        self.assertEqual(r.status, 404, body)
        sid = self.new_id("stopped")
        self.ensure_ok(sid)
        self.assertIn(self.client.stop(sid).status, (200, 204))
        conn, r = self.client.exec_open(sid, ["true"])
        body = r.read()
        conn.close()
        self.assertEqual(r.status, 409, body)
        self.assertIn(b"not_running", body)
        self.client.destroy(sid)


class ExecBackpressureTest(BrokerTestCase):
    """A slow reader of a huge stream must not make the broker buffer it."""

    limits = {"output_cap": 1024 * MiB}

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("slow")
        cls.ensure_ok(cls.sid)

    def test_broker_memory_bounded_with_slow_reader(self):
        base = self.broker.rss_kib()
        st = ExecStream(self.client, self.sid, ["head", "-c", str(300 * MiB), "/dev/zero"])
        self.assertEqual(st.resp.status, 200)
        peak = base
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < 4.0:
                if st.read_chunk(65536) == 0:
                    break
                time.sleep(0.01)
                peak = max(peak, self.broker.rss_kib())
        finally:
            st.close()
        # wire bytes: NULs are 1.33 a byte since adr/0028 (6 before), so
        # 512 KiB of wire is ~384 KiB of output, more than 2 MiB was then
        self.assertGreater(st.bytes_read, 512 * 1024, "the stream hardly moved")
        self.assertLess(peak - base, 64 * 1024,
                        "broker RSS grew by %d KiB while a client read %d bytes slowly"
                        % (peak - base, st.bytes_read))
        gone = wait_until(lambda: not procs(self.client, self.sid, rb"head -c"), 2.0, 0.1)
        self.assertTrue(gone, "head still runs after the client went away")


if __name__ == "__main__":
    unittest.main(verbosity=2)
