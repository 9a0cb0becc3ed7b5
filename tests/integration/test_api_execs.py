"""test_api_execs - execs as resources (SPEC §8, issue 14, ADR 0015): a real
sandbox-api in front of a real broker on the runtime under test. Resumable SSE
with Last-Event-ID (no gap, no duplicate), reset when an id is no longer kept,
the durable log across SIGKILL and restart, a bounded log, 100 viewers with one
stalled, browser tickets and CORS.
"""

import base64
import http.client
import json
import os
import re
import socket
import threading
import time
import unittest

import sbxtest
from stackfix import Stack

SEQ50 = "for i in $(seq 1 50); do echo $i; sleep 0.2; done"
LOG_MAX = 1024 * 1024


# ------------------------------------------------------------ SSE client

def parse_blocks(raw):
    """SSE bytes -> [(id or None, event, data dict, block bytes)]; comments
    and retry-only blocks are skipped."""
    out = []
    blocks = raw.split(b"\n\n")
    for block in blocks[:-1]:     # the last one is not complete yet
        if not block:
            continue
        fields = {}
        for ln in block.split(b"\n"):
            if not ln or ln.startswith(b":"):
                continue
            k, _, v = ln.decode().partition(": ")
            fields[k] = v
        if "data" in fields:
            out.append((int(fields["id"]) if "id" in fields else None,
                        fields.get("event", "message"), json.loads(fields["data"]),
                        block + b"\n\n"))
    return out


def stdout_text(events):
    # either member: the api forwards the broker's choice (adr/0028)
    return "".join(d["data"] if "data" in d else
                   base64.b64decode(d["data_b64"]).decode(errors="replace")
                   for _, t, d, _ in events if t == "stdout")


class Events:
    """GET .../events, read as it arrives."""

    def __init__(self, url, path, key=None, last=None, header=True, rcvbuf=None):
        u = url.split("//", 1)[1]
        host, port = u.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60) \
            if rcvbuf is None else self._small(host, int(port), rcvbuf)
        hdrs = ["GET %s HTTP/1.1" % path, "Host: x", "Accept: text/event-stream"]
        if key:
            hdrs.append("Authorization: Bearer " + key)
        if last is not None and header:
            hdrs.append("Last-Event-ID: %s" % last)
        self.sock.sendall(("\r\n".join(hdrs) + "\r\n\r\n").encode())
        self.buf = b""
        self.head = b""
        while b"\r\n\r\n" not in self.buf:
            c = self.sock.recv(65536)
            if not c:
                break
            self.buf += c
        self.head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.status = int(self.head.split(b" ")[1]) if self.head else 0
        if self.status != 200:
            self.close()
        self.chunked = b"transfer-encoding: chunked" in self.head.lower()
        self.raw = b""          # de-chunked body so far
        self.done = False

    @staticmethod
    def _small(host, port, rcvbuf):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(60)
        s.connect((host, port))
        return s

    def _dechunk(self):
        while True:
            if not self.chunked:
                self.raw += self.buf
                self.buf = b""
                return
            i = self.buf.find(b"\r\n")
            if i < 0:
                return
            n = int(self.buf[:i].split(b";")[0], 16)
            if len(self.buf) < i + 2 + n + 2:
                return
            if n == 0:
                self.done = True
                self.buf = b""
                return
            self.raw += self.buf[i + 2:i + 2 + n]
            self.buf = self.buf[i + 2 + n + 2:]

    def pump(self):
        """Reads once; False at the end of the stream."""
        self._dechunk()
        if self.done or self.sock.fileno() < 0:
            return False
        try:
            c = self.sock.recv(1 << 20)
        except (ConnectionResetError, socket.timeout):
            c = b""
        if not c:
            self.done = True
            return False
        self.buf += c
        self._dechunk()
        return not self.done

    def until(self, pred, timeout=60):
        t0 = time.monotonic()
        while not pred(parse_blocks(self.raw)):
            if time.monotonic() - t0 > timeout:
                raise AssertionError("timed out; got %r" % self.raw[-400:])
            if not self.pump():
                break
        return parse_blocks(self.raw)

    def all(self, timeout=120):
        t0 = time.monotonic()
        while self.pump():
            if time.monotonic() - t0 > timeout:
                raise AssertionError("stream did not end; got %r" % self.raw[-400:])
        self.close()
        return parse_blocks(self.raw)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.done = True


def terminal(evs):
    return [e for e in evs if e[1] in ("exit", "error")]


# ------------------------------------------------------------ the suite

class ExecResourceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxxt%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix, broker_args=["--output-cap", "3g", "--exec-timeout-max", "15m"],
                          api_args=cls.api_args())
        st = cls.stack
        cls.url = st.url
        cls.key = st.player
        r = cls.call(st.player, "POST", "/api/v1/npcs", {"name": "alice"})
        assert r.status == 201, r.body
        r = cls.call(st.other, "POST", "/api/v1/npcs", {"name": "bob"})
        assert r.status == 201, r.body
        for k, n in ((st.player, "alice"), (st.other, "bob")):
            r = cls.call(k, "PUT", "/api/v1/npcs/%s/sandbox" % n)
            assert r.status == 200, r.body

    @staticmethod
    def api_args():
        return ["--exec-log-max", str(LOG_MAX), "--ticket-ttl", "3s",
                "--viewer-stall", "3s", "--max-execs-per-principal", "8",
                "--requests-per-minute", "100000", "--log-level", "debug"]

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    @classmethod
    def call(cls, key, method, path, body=None, headers=None, url=None):
        u = (url or cls.url).split("//", 1)[1]
        host, port = u.split(":")
        h = dict(headers or {})
        if key:
            h["Authorization"] = "Bearer " + key
        return sbxtest.tcp_http(host, int(port), method, path, body, h, 120)

    def start(self, script, key=None, npc="alice", url=None, **extra):
        body = {"argv": ["sh", "-c", script]}
        body.update(extra)
        r = self.call(key or self.key, "POST", "/api/v1/npcs/%s/sandbox/execs" % npc,
                      body, url=url)
        self.assertEqual(r.status, 201, r.body)
        j = r.json()
        self.assertEqual(r.headers.get("Location"),
                         "/api/v1/npcs/%s/sandbox/execs/%s" % (npc, j["exec_id"]))
        self.assertEqual(j["state"], "running")
        return j

    def status(self, x, key=None, npc="alice", url=None):
        r = self.call(key or self.key, "GET", "/api/v1/npcs/%s/sandbox/execs/%s" %
                      (npc, x["exec_id"]), url=url)
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def wait_ended(self, x, timeout=120, url=None, npc="alice", key=None):
        st = {}

        def ended():
            st.update(self.status(x, url=url, npc=npc, key=key))
            return st["state"] != "running"
        sbxtest.wait_until(ended, timeout, "exec ended", interval=0.2)
        return st

    def events(self, x, last=None, header=True, url=None, key=None, query=""):
        path = x["events_url"] + query
        if last is not None and not header:
            path += ("&" if "?" in path else "?") + "last_event_id=%s" % last
        return Events(url or self.url, path, self.key if key is None else key, last, header)

    # -------------------------------------------------------- Last-Event-ID

    def test_01_resume_after_20_gives_exactly_21_to_50(self):
        x = self.start(SEQ50)
        e = self.events(x)
        self.assertEqual(e.status, 200)
        self.assertIn(b"text/event-stream", e.head)
        self.assertIn(b"retry: ", e.raw + e.buf)
        evs = e.until(lambda evs: any(t == "stdout" and "20\n" in d.get("data", "")
                                      for _, t, d, _ in evs))
        e.close()
        cut = next(i for i, d in ((i, d) for i, t, d, _ in evs if t == "stdout")
                   if "20\n" in d.get("data", ""))
        first = [ev for ev in evs if ev[0] is not None and ev[0] <= cut]
        # Every durable event carries an id, in order from 1.
        self.assertEqual([ev[0] for ev in first], list(range(1, cut + 1)))
        e2 = self.events(x, last=cut)
        rest = e2.all()
        self.assertEqual(e2.status, 200)
        self.assertTrue(all(ev[0] is not None for ev in rest), rest[:3])
        self.assertEqual([ev[0] for ev in rest], list(range(cut + 1, cut + 1 + len(rest))))
        self.assertEqual(stdout_text(rest), "".join("%d\n" % i for i in range(21, 51)))
        self.assertEqual(len(terminal(rest)), 1)
        self.assertEqual(rest[-1][1], "exit")
        self.assertEqual(rest[-1][2]["code"], 0)
        # No id: the whole stream, the same bytes as the two parts.
        whole = self.events(x).all()
        self.assertEqual(b"".join(b for *_, b in whole),
                         b"".join(b for *_, b in first) + b"".join(b for *_, b in rest))
        self.assertEqual(stdout_text(whole), "".join("%d\n" % i for i in range(1, 51)))
        # ?last_event_id= works like the header.
        q = self.events(x, last=cut, header=False).all()
        self.assertEqual([ev[3] for ev in q], [ev[3] for ev in rest])
        # After the terminal event: 204, so an EventSource stops.
        self.assertEqual(self.events(x, last=whole[-1][0]).status, 204)
        st = self.status(x)
        self.assertEqual((st["state"], st["exit_code"], st["log"]["output_dropped"]),
                         ("exited", 0, False))
        self.assertEqual(st["bytes_out"], len("".join("%d\n" % i for i in range(1, 51))))
        # The log is private to the api's user.
        d = os.path.join(self.stack.api_state, "execs")
        self.assertEqual(os.stat(d).st_mode & 0o777, 0o700)
        self.assertEqual(os.stat(os.path.join(d, x["exec_id"])).st_mode & 0o777, 0o700)
        for f in os.listdir(os.path.join(d, x["exec_id"])):
            self.assertEqual(os.stat(os.path.join(d, x["exec_id"], f)).st_mode & 0o777, 0o600, f)

    def test_02_malformed_or_unknown_id_is_400(self):
        x = self.start("echo hi")
        self.wait_ended(x)
        for bad in ("abc", "-1", "1.5", "+1", "1e3", "99999999999999999999", "1000"):
            e = self.events(x, last=bad)
            self.assertEqual(e.status, 400, bad)
            self.assertIn(b"Last-Event-ID", e.raw + e.buf)
            e.close()
        e = self.events(x, last="x1", header=False)
        self.assertEqual(e.status, 400)
        e.close()

    def test_03_unknown_exec_and_other_players_exec_are_404(self):
        x = self.start("echo hi")
        r = self.call(self.key, "GET", "/api/v1/npcs/alice/sandbox/execs/x0000")
        self.assertEqual(r.status, 404)
        r = self.call(self.stack.other, "GET", "/api/v1/npcs/alice/sandbox/execs/%s" %
                      x["exec_id"])
        self.assertEqual(r.status, 404)
        r = self.call(self.stack.other, "GET", x["events_url"])
        self.assertEqual(r.status, 404)
        # The exec id is bound to its NPC.
        r = self.call(self.stack.other, "GET", "/api/v1/npcs/bob/sandbox/execs/%s" %
                      x["exec_id"])
        self.assertEqual(r.status, 404)
        # Bad bodies are refused and start nothing.
        n = len(self.call(self.key, "GET", "/api/v1/npcs/alice/sandbox/execs?limit=200")
                .json()["execs"])
        for body in ({}, {"argv": []}, {"argv": "ls"}, {"argv": ["ls"], "nope": 1}):
            r = self.call(self.key, "POST", "/api/v1/npcs/alice/sandbox/execs", body)
            self.assertEqual(r.status, 400, body)
        self.assertEqual(len(self.call(self.key, "GET",
                                       "/api/v1/npcs/alice/sandbox/execs?limit=200")
                             .json()["execs"]), n)

    def test_04_list_newest_first_paginated_and_delete_kills(self):
        xs = [self.start("echo %d" % i) for i in range(3)]
        r = self.call(self.key, "GET", "/api/v1/npcs/alice/sandbox/execs?limit=2")
        self.assertEqual(r.status, 200, r.body)
        page = r.json()
        self.assertEqual([e["exec_id"] for e in page["execs"]],
                         [xs[2]["exec_id"], xs[1]["exec_id"]])
        r = self.call(self.key, "GET", "/api/v1/npcs/alice/sandbox/execs?limit=1&after=" +
                      page["next"])
        self.assertEqual(r.json()["execs"][0]["exec_id"], xs[0]["exec_id"])
        self.assertEqual(self.call(self.key, "GET", "/api/v1/npcs/alice/sandbox/execs?"
                                   "limit=0").status, 400)
        # DELETE kills the process tree.
        x = self.start("echo started; sleep 300 # MARK_DEL")
        e = self.events(x)
        e.until(lambda evs: stdout_text(evs))
        r = self.call(self.key, "DELETE", "/api/v1/npcs/alice/sandbox/execs/%s" % x["exec_id"])
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json()["state"], "killed")
        evs = e.all(30)
        self.assertEqual(terminal(evs)[-1][1], "error")
        self.assertEqual(terminal(evs)[-1][2]["code"], "cancelled")

        def gone():
            out = self.broker_ps("alice")
            return "MARK_DEL" not in out
        sbxtest.wait_until(gone, 30, "deleted exec gone", interval=0.5)

    def broker_ps(self, npc):
        r = sbxtest.unix_http(self.stack.sock, "POST", "/v1/sandboxes/npc-%s/exec" % npc,
                              {"argv": ["ps", "-o", "pid,args"]},
                              {"Authorization": "Bearer " + self.stack.token})
        out = ""
        for ln in r.body.splitlines():
            ev = json.loads(ln)
            out += ev["data"] if "data" in ev else \
                base64.b64decode(ev.get("data_b64", "")).decode(errors="replace")
        return out

    # -------------------------------------------------------- bounds

    def test_05_two_gib_keeps_at_most_the_cap_on_disk(self):
        # The whole 2 GiB, however long it takes (30-130 s here, with the load
        # of other jobs; the broker's default timeout is 60 s).
        t0 = time.monotonic()
        x = self.start("head -c 2147483648 /dev/zero | tr '\\0' x", timeout_ms=900000)
        d = os.path.join(self.stack.api_state, "execs", x["exec_id"])
        peak = 0
        while True:
            # A sample counts only when no segment came or went while its
            # files were measured: otherwise a dropped segment's size and
            # bytes written after the drop add up (race-free peak).
            names = sorted(f for f in os.listdir(d) if f.endswith(".log"))
            size, whole = 0, True
            for f in names:
                try:
                    size += os.path.getsize(os.path.join(d, f))
                except FileNotFoundError:
                    whole = False    # a segment dropped meanwhile
            if whole and sorted(f for f in os.listdir(d) if f.endswith(".log")) == names:
                peak = max(peak, size)
            st = self.status(x)
            if st["state"] != "running":
                break
            time.sleep(0.1)
        print("2 GiB through a resource exec: %.1f s, peak log on disk %d bytes"
              % (time.monotonic() - t0, peak))
        self.assertEqual((st["state"], st["exit_code"], st["truncated"]), ("exited", 0, False))
        self.assertEqual(st["bytes_out"], 2 << 30)
        self.assertGreater(peak, 0, "no whole sample of the log on disk")
        self.assertLessEqual(peak, LOG_MAX)
        self.assertLessEqual(st["log"]["bytes"], LOG_MAX)
        self.assertTrue(st["log"]["output_dropped"])
        self.assertGreater(st["log"]["dropped_bytes"], (2 << 30) - LOG_MAX)
        self.assertGreater(st["log"]["first_id"], 1)
        # An id that was dropped: an explicit reset, then the kept events.
        evs = self.events(x, last=1).all()
        self.assertEqual(evs[0][1], "reset")
        self.assertIsNone(evs[0][0])
        self.assertEqual(evs[0][2]["reason"], "dropped")
        self.assertEqual(evs[1][0], st["log"]["first_id"])
        self.assertEqual(evs[-1][1], "exit")
        # No id: a reset too, never a silent start in the middle.
        evs = self.events(x).all()
        self.assertEqual(evs[0][1], "reset")

    def test_06_retention_drops_the_log_and_a_reconnect_gets_reset(self):
        state = os.path.join(self.stack.dir, "api-ret")
        p, url = self.stack.start_api(state, self.api_args() + ["--exec-retention", "1s"],
                                      "api-ret")
        key = self.stack.admin("create-player", "ret", state_dir=state)
        r = self.call(key, "POST", "/api/v1/npcs", {"name": "carol"}, url=url)
        self.assertEqual(r.status, 201, r.body)
        self.assertEqual(self.call(key, "PUT", "/api/v1/npcs/carol/sandbox", url=url).status, 200)
        r = self.call(key, "POST", "/api/v1/npcs/carol/sandbox/execs",
                      {"argv": ["sh", "-c", "echo 1; echo 2"]}, url=url)
        x = r.json()
        self.wait_ended(x, url=url, npc="carol", key=key)

        def removed():
            return self.status(x, key=key, npc="carol", url=url)["log"]["removed"]
        sbxtest.wait_until(removed, 30, "log removed", interval=0.3)
        st = self.status(x, key=key, npc="carol", url=url)
        self.assertEqual(st["log"]["removed"], "retention")
        self.assertFalse([f for f in os.listdir(os.path.join(state, "execs", x["exec_id"]))
                          if f.endswith(".log")])
        for last in (1, None):
            e = Events(url, x["events_url"], key, last)
            evs = e.all()
            self.assertEqual(e.status, 200)
            self.assertEqual([ev[1] for ev in evs], ["reset"], evs)
            self.assertEqual(evs[0][2]["reason"], "retention")
        p.stop()

    # -------------------------------------------------------- restarts

    def restart_api(self, sig=9):
        st = self.stack
        st.api.stop(sig=sig)
        st.apis.remove(st.api)
        st.api, st.url = st.start_api(st.api_state, self.api_args(), "api.%d" % len(st.apis))
        type(self).url = st.url

    def test_07_sigkill_after_the_end_replays_byte_exact(self):
        x = self.start("for i in $(seq 1 200); do echo line $i; printf '\\377\\376 bin\\n' >&2;"
                       " done; exit 7")
        self.wait_ended(x)
        before = self.events(x).all()
        st0 = self.status(x)
        self.restart_api(9)
        after = self.events(x).all()
        self.assertEqual(b"".join(b for *_, b in after), b"".join(b for *_, b in before))
        self.assertEqual(after[-1][2]["code"], 7)
        st1 = self.status(x)
        self.assertEqual(st1, st0)
        # A resume after a restart: exactly the events after the id.
        mid = before[len(before) // 2][0]
        self.assertEqual([ev[3] for ev in self.events(x, last=mid).all()],
                         [ev[3] for ev in before if ev[0] > mid])

    def test_08_restart_while_running_fails_the_exec_and_keeps_the_log(self):
        x = self.start("for i in $(seq 1 300); do echo $i; sleep 0.1; done # MARK_RUN")
        e = self.events(x)
        e.until(lambda evs: "10\n" in stdout_text(evs))
        e.close()
        self.restart_api(9)
        st = self.status(x)
        self.assertEqual(st["state"], "failed")
        self.assertIn("api_restarted", st["reason"])
        evs = self.events(x).all()
        out = stdout_text(evs)
        n = out.count("\n")
        self.assertGreaterEqual(n, 10)
        self.assertEqual(out, "".join("%d\n" % i for i in range(1, n + 1)))
        self.assertEqual([ev[0] for ev in evs], list(range(1, len(evs) + 1)))
        self.assertEqual(evs[-1][1], "error")
        self.assertEqual(evs[-1][2]["code"], "api_restarted")
        self.assertEqual(len(terminal(evs)), 1)

        # Documented (docs/api.md): the broker killed the process when the
        # api's connection to it closed.
        sbxtest.wait_until(lambda: "MARK_RUN" not in self.broker_ps("alice"), 30,
                           "exec killed by the broker", interval=0.5)

    # -------------------------------------------------------- viewers

    def test_09_hundred_viewers_one_stalled(self):
        script = ("i=0; while [ $i -lt 40 ]; do head -c 49152 /dev/zero | tr '\\0' v; "
                  "echo; sleep 0.25; i=$((i+1)); done")

        def duration(evs):
            return [d for _, t, d, _ in evs if t == "exit"][0]["duration_ms"]
        # An api whose log holds the whole output (2 MB), so a viewer has
        # all of it to read; its own player and NPC.
        state = os.path.join(self.stack.dir, "api-view")
        # 100 viewers of one player: above its default share of streams
        # and connections (64 each, adr/0056), raised here; and connected at
        # once, above the keyless pool a new connection starts in (adr/0046).
        p, url = self.stack.start_api(state, ["--viewer-stall", "3s",
                                              "--requests-per-minute", "100000",
                                              "--streams-per-principal", "128",
                                              "--connections-per-principal", "128",
                                              "--max-connections-keyless", "128"],
                                      "api-view")
        self.addCleanup(p.stop)
        key = self.stack.admin("create-player", "viewed", state_dir=state)
        self.assertEqual(self.call(key, "POST", "/api/v1/npcs", {"name": "dave"},
                                   url=url).status, 201)
        self.assertEqual(self.call(key, "PUT", "/api/v1/npcs/dave/sandbox", url=url).status,
                         200)
        self.url, self.key = url, key

        def start():
            r = self.call(key, "POST", "/api/v1/npcs/dave/sandbox/execs",
                          {"argv": ["sh", "-c", script]}, url=url)
            self.assertEqual(r.status, 201, r.body)
            return r.json()
        base = start()
        self.wait_ended(base, npc="dave", url=url, key=key)
        base_ms = duration(self.events(base).all())
        x = start()
        stalled = Events(self.url, x["events_url"], self.key, rcvbuf=4096)
        results = [None] * 99
        errors = []

        def viewer(i):
            try:
                e = self.events(x)
                e.all(300)
                results[i] = e.raw
            except Exception as ex:  # reported below
                errors.append(repr(ex))
        ts = [threading.Thread(target=viewer, args=(i,)) for i in range(99)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)
        self.assertEqual(errors, [])
        st = self.wait_ended(x, npc="dave", url=url, key=key)
        full = self.events(x).all()
        want = b"".join(b for *_, b in full)
        for i, raw in enumerate(results):
            got = b"".join(b for *_, b in parse_blocks(raw))
            self.assertEqual(len(got), len(want), "viewer %d" % i)
            self.assertEqual(got, want, "viewer %d" % i)
        ms = duration(full)
        self.assertEqual(st["bytes_out"], 40 * 49153)
        print("exec duration: %d ms with 100 viewers (one stalled), %d ms with none" % (ms, base_ms))
        # The stalled viewer held nothing up: a producer it held would wait
        # for the whole viewer_stall (3 s) before the viewer is cut off, so
        # the exec would take at least that much longer than the one with no
        # viewer. The margin below it absorbs the load of the other lanes of
        # `make check` (adr/0039): 10% + 50 ms failed once at +3 ms there.
        self.assertLess(ms, base_ms + 2000, (ms, base_ms))
        # It was cut off (viewer_stall) and can resume where it stopped.
        sbxtest.wait_until(lambda: not stalled.pump(), 60, "stalled viewer cut off")
        have = parse_blocks(stalled.raw)
        self.assertLess(sum(len(ev[3]) for ev in have), len(want))
        last = max([ev[0] for ev in have if ev[0] is not None] or [0])
        rest = self.events(x, last=last).all() if last else self.events(x).all()
        self.assertEqual(b"".join(ev[3] for ev in have) + b"".join(ev[3] for ev in rest),
                         want)

    # -------------------------------------------------------- tickets

    def ticket(self, x, key=None, npc="alice"):
        r = self.call(key or self.key, "POST", "/api/v1/npcs/%s/sandbox/execs/%s/ticket" %
                      (npc, x["exec_id"]))
        self.assertEqual(r.status, 200, r.body)
        return r.json()

    def test_10_tickets(self):
        x = self.start("echo ticketed")
        y = self.start("echo other")
        bx = self.start("echo bob", key=self.stack.other, npc="bob")
        self.wait_ended(x)
        t = self.ticket(x)
        ty = self.ticket(y)
        tb = self.ticket(bx, key=self.stack.other, npc="bob")
        seen = [t["ticket"], ty["ticket"], tb["ticket"]]
        self.assertTrue(t["events_url"].startswith(x["events_url"] + "?ticket="))
        # Accepted without a key on that exec's events URL.
        e = Events(self.url, t["events_url"], key="")
        evs = e.all()
        self.assertEqual(e.status, 200)
        self.assertEqual(stdout_text(evs), "ticketed\n")
        # For another exec of the same NPC: refused.
        e = Events(self.url, x["events_url"] + "?ticket=" + ty["ticket"], key="")
        self.assertEqual(e.status, 401)
        # For another player's NPC: refused, on that URL or with our NPC in it.
        e = Events(self.url, x["events_url"] + "?ticket=" + tb["ticket"], key="")
        self.assertEqual(e.status, 401)
        e = Events(self.url, "/api/v1/npcs/bob/sandbox/execs/%s/events?ticket=%s" %
                   (x["exec_id"], t["ticket"]), key="")
        self.assertEqual(e.status, 401)
        # Only on the events URL: not as a key elsewhere, not as a header.
        r = self.call("", "GET", "/api/v1/npcs/alice/sandbox/execs/%s?ticket=%s" %
                      (x["exec_id"], t["ticket"]))
        self.assertEqual(r.status, 401)
        r = self.call(t["ticket"], "GET", x["events_url"])
        self.assertEqual(r.status, 401)
        # A canary ticket and the real ones never reach the logs.
        canary = "CANARYTICKET" + os.urandom(12).hex()
        e = Events(self.url, x["events_url"] + "?ticket=" + canary, key="")
        self.assertEqual(e.status, 401)
        seen.append(canary)
        # Expired (ticket_ttl 3s): refused.
        time.sleep(3.5)
        e = Events(self.url, t["events_url"], key="")
        self.assertEqual(e.status, 401)
        logs = ""
        for p in self.stack.apis:
            with open(p.log_path, errors="replace") as f:
                logs += f.read()
        for s in seen:
            self.assertNotIn(s, logs)
        for root, _, files in os.walk(self.stack.api_state):
            for f in files:
                with open(os.path.join(root, f), "rb") as fh:
                    data = fh.read()
                for s in seen:
                    self.assertNotIn(s.encode(), data, f)

    def test_11_cors_off_by_default_and_configurable(self):
        r = self.call(self.key, "GET", "/api/v1/npcs", headers={"Origin": "http://evil.test"})
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.headers.get("Access-Control-Allow-Origin"))
        state = os.path.join(self.stack.dir, "api-cors")
        p, url = self.stack.start_api(state, self.api_args() + [
            "--cors-origins", "http://console.test"], "api-cors")
        key = self.stack.admin("create-player", "corsy", state_dir=state)
        r = self.call(key, "GET", "/api/v1/npcs", headers={"Origin": "http://console.test"},
                      url=url)
        self.assertEqual(r.headers.get("Access-Control-Allow-Origin"), "http://console.test")
        r = self.call(key, "GET", "/api/v1/npcs", headers={"Origin": "http://evil.test"},
                      url=url)
        self.assertIsNone(r.headers.get("Access-Control-Allow-Origin"))
        r = self.call(None, "OPTIONS", "/api/v1/npcs", url=url, headers={
            "Origin": "http://console.test", "Access-Control-Request-Method": "POST"})
        self.assertEqual(r.status, 204)
        self.assertIn("Authorization", r.headers.get("Access-Control-Allow-Headers"))
        p.stop()


    # -------------------------------------------------------- fair shares

    def test_12_a_heavy_player_loses_only_his_own_oldest_records(self):
        # Issue 24 M4: one player's many short execs made another player's
        # records answer 404. Eight records in all; bob's two stay.
        state = os.path.join(self.stack.dir, "api-fair")
        p, url = self.stack.start_api(state, self.api_args() + [
            "--exec-records-max", "8"], "api-fair")
        keys = {}
        for who, npc in (("fairbob", "fair-bob"), ("fairann", "fair-ann")):
            keys[npc] = self.stack.admin("create-player", who, state_dir=state)
            r = self.call(keys[npc], "POST", "/api/v1/npcs", {"name": npc}, url=url)
            self.assertEqual(r.status, 201, r.body)
            self.assertEqual(self.call(keys[npc], "PUT", "/api/v1/npcs/%s/sandbox" % npc,
                                       url=url).status, 200)

        def run(npc, n):
            xs = []
            for _ in range(n):
                r = self.call(keys[npc], "POST", "/api/v1/npcs/%s/sandbox/execs" % npc,
                              {"argv": ["true"]}, url=url)
                self.assertEqual(r.status, 201, r.body)
                xs.append(r.json())
                self.wait_ended(xs[-1], url=url, npc=npc, key=keys[npc])
            return xs

        def listed(npc):
            r = self.call(keys[npc], "GET", "/api/v1/npcs/%s/sandbox/execs?limit=200" % npc,
                          url=url)
            self.assertEqual(r.status, 200, r.body)
            return [e["exec_id"] for e in r.json()["execs"]]

        bob = run("fair-bob", 2)
        ann = run("fair-ann", 15)
        sbxtest.wait_until(lambda: len(listed("fair-ann")) == 6, 10, "ann down to 6",
                           interval=0.2)
        self.assertEqual(listed("fair-bob"), [x["exec_id"] for x in reversed(bob)])
        for x in bob:
            self.assertEqual(self.status(x, key=keys["fair-bob"], npc="fair-bob",
                                         url=url)["state"], "exited")
        self.assertEqual(listed("fair-ann"), [x["exec_id"] for x in reversed(ann[9:])])
        r = self.call(keys["fair-ann"], "GET", "/api/v1/npcs/fair-ann/sandbox/execs/%s"
                      % ann[0]["exec_id"], url=url)
        self.assertEqual(r.status, 404, r.body)
        p.stop()

    def test_13_a_record_keeps_a_preview_in_memory_and_the_argv_on_disk(self):
        # Issue 24 L2: a list shows the first 256 bytes of the joined argv;
        # GET one, the whole argv (read from the record on disk).
        tail = "é" * 60000
        argv = ["sh", "-c", "true", "arg0", tail]
        r = self.call(self.key, "POST", "/api/v1/npcs/alice/sandbox/execs", {"argv": argv})
        self.assertEqual(r.status, 201, r.body)
        x = r.json()
        self.assertEqual(x["argv"], argv)
        st = self.wait_ended(x)
        self.assertEqual(st["argv"], argv)
        self.assertTrue(st["argv_truncated"])
        pv = st["argv_preview"]
        self.assertTrue(pv.startswith("sh -c true arg0 é"), pv[:40])
        self.assertLessEqual(len(pv.encode()), 256)
        self.assertGreater(len(pv.encode()), 250)
        r = self.call(self.key, "GET", "/api/v1/npcs/alice/sandbox/execs?limit=200")
        item = [e for e in r.json()["execs"] if e["exec_id"] == x["exec_id"]][0]
        self.assertNotIn("argv", item)
        self.assertEqual((item["argv_preview"], item["argv_truncated"]), (pv, True))
        d = os.path.join(self.stack.api_state, "execs", x["exec_id"])
        self.assertLess(os.path.getsize(os.path.join(d, "meta.json")), 4096)
        with open(os.path.join(d, "argv.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f), argv)
        r = self.call(self.key, "POST", "/api/v1/npcs/alice/sandbox/execs",
                      {"argv": ["echo", "short"]})
        x = r.json()
        self.assertEqual((x["argv_preview"], x["argv_truncated"]), ("echo short", False))

    # -------------------------------------------------------- list in slices

    def test_14_a_200_record_list_does_not_hold_up_another_player(self):
        # Issue 24 L2: another player's whoami waited behind 200-record
        # lists built in one piece (median 370 ms). Alice fills 200 records
        # with 64 KiB argvs; while lists of them run back to back, bob's
        # requests are answered (adr/0048). The latencies are printed, not
        # asserted: this machine's load is not the api's.
        argv = ["sh", "-c", "true", "x" * 65536]
        errors = []

        def fill(n):
            for _ in range(n):
                while True:
                    r = self.call(self.key, "POST", "/api/v1/npcs/alice/sandbox/execs",
                                  {"argv": argv})
                    if r.status != 429:
                        break
                    time.sleep(0.1)
                if r.status != 201:
                    errors.append(r.body)
                    return
                self.wait_ended(r.json())
        ts = [threading.Thread(target=fill, args=(34,)) for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])

        def whoami(n):
            out = []
            for _ in range(n):
                t0 = time.monotonic()
                r = self.call(self.stack.other, "GET", "/api/v1/whoami")
                out.append((r.status, time.monotonic() - t0))
                time.sleep(0.005)
            return out
        base = whoami(20)
        lists, done = [], threading.Event()

        def lister():
            while not done.is_set() or len(lists) < 10:
                t0 = time.monotonic()
                r = self.call(self.key, "GET", "/api/v1/npcs/alice/sandbox/execs?limit=200")
                lists.append((r.status, len(r.body), time.monotonic() - t0,
                              len(r.json()["execs"]) if r.status == 200 else 0))
        lt = threading.Thread(target=lister)
        lt.start()
        sbxtest.wait_until(lambda: len(lists) > 0 or not lt.is_alive(), 60, "a first list",
                           interval=0.01)
        during = whoami(100)
        done.set()
        lt.join()
        self.assertEqual([s for s, _ in during], [200] * len(during))
        self.assertEqual({(s, n) for s, _, _, n in lists}, {(200, 200)})

        def ms(xs):
            xs = sorted(x * 1000 for x in xs)
            return "median %.1f ms, max %.1f ms" % (xs[len(xs) // 2], xs[-1])
        print("\n# whoami alone: %s; during %d lists of 200 (%d KB each, %s): %s"
              % (ms([d for _, d in base]), len(lists), lists[0][1] // 1000,
                 ms([d for _, _, d, _ in lists]), ms([d for _, d in during])))


if __name__ == "__main__":
    unittest.main()
