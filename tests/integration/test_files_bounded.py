#!/usr/bin/python3
# test_files_bounded.py - file operations bounded like execs: file_timeout, caps, list pages, text kept text (adr/0013, SPEC §4, §5).

import base64
import http.client
import json
import os
import threading
import time
import unittest
import urllib.parse

from brokerfix import BrokerTestCase, MiB, UnixHTTPConnection, qpath


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class Streamer(threading.Thread):
    """A steady exec stream (a line every 20 ms) in another sandbox; the
    arrival time of every output event is kept to find gaps."""

    def __init__(self, client, sid, lines=3000):
        super().__init__(daemon=True)
        self.client, self.sid = client, sid
        self.argv = ["sh", "-c", "i=0; while [ $i -lt %d ]; do echo t$i; sleep 0.02; "
                     "i=$((i+1)); done" % lines]
        self.times = []
        self.types = []
        self.error = None
        self.stop_flag = False

    def run(self):
        try:
            self.conn, resp = self.client.exec_open(self.sid, self.argv, timeout_ms=120000,
                                                    timeout=180)
            while not self.stop_flag:
                line = resp.readline()
                if not line:
                    break
                ev = json.loads(line)
                self.types.append(ev["type"])
                if ev["type"] in ("stdout", "stderr"):
                    self.times.append(time.monotonic())
                if ev["type"] in ("exit", "error"):
                    break
        except Exception as e:  # reported by the test
            if not self.stop_flag:
                self.error = e

    def wait_events(self, n, timeout=60):
        deadline = time.monotonic() + timeout
        while len(self.times) < n:
            if time.monotonic() > deadline or self.error:
                raise AssertionError("exec stream gave %d events: %r" % (len(self.times), self.error))
            time.sleep(0.05)

    def gaps(self, t0, t1):
        """Gaps between consecutive events that end inside [t0, t1], plus the
        time from the last event to t1 (a loop blocked at the end counts)."""
        ts = list(self.times)
        out = [b - a for a, b in zip(ts, ts[1:]) if t0 <= b <= t1]
        before = [t for t in ts if t <= t1]
        if before:
            out.append(t1 - before[-1])
        return out

    def close(self):
        self.stop_flag = True
        try:
            self.conn.hard_close()
        except Exception:
            pass


def raw_request(client, method, path, body=None, timeout=60):
    """One request on its own connection; returns (status, headers, body,
    outcome) where outcome is "ok" or "cut" (body ended early)."""
    conn = UnixHTTPConnection(client.sock_path, timeout)
    try:
        h = {"Authorization": "Bearer " + client.token}
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        headers = dict((k.lower(), v) for k, v in r.getheaders())
        try:
            data = r.read()
            return r.status, headers, data, "ok"
        except (http.client.IncompleteRead, ConnectionError):
            return r.status, headers, b"", "cut"
    except (http.client.RemoteDisconnected, ConnectionError) as e:
        return None, {}, str(e).encode(), "cut"
    finally:
        conn.close()


class TextStaysTextTest(BrokerTestCase):
    """SPEC §5: a character cut by a read boundary still arrives as text."""

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("utf8")
        cls.ensure_ok(cls.sid)
        # 8191 ASCII bytes, then the euro sign (E2 82 AC) across offset 8192
        r = cls.client.sh(cls.sid, "head -c 8191 /dev/zero | tr '\\0' a > /work/euro; "
                                   "printf '\\342\\202\\254tail\\n' >> /work/euro")
        assert r.code == 0, r

    def test_euro_split_by_dd_blocks_always_arrives_inside_data(self):
        expect = b"a" * 8191 + "€".encode() + b"tail\n"
        # dd writes one 8 KiB block, pauses, then the rest: the helper reads
        # (and the broker gets) the euro's first byte apart from the others.
        one = ("dd if=/work/euro bs=8192 count=1 2>/dev/null %s; sleep 0.03; "
               "dd if=/work/euro bs=8192 skip=1 2>/dev/null %s; ")
        runs = 0
        for stream, redir in (("out", ""), ("err", ">&2")) * 2:
            script = "for i in $(seq 25); do " + one % (redir, redir) + "done"
            res = self.client.sh(self.sid, script, timeout_ms=60000)
            self.assertEqual(res.code, 0, res)
            data = bytes(res.out if stream == "out" else res.err)
            self.assertEqual(data, expect * 25)
            name = "stdout" if stream == "out" else "stderr"
            evs = [e for e in res.events if e["type"] == name]
            raw = []
            for l in bytes(res.raw_head).split(b"\n"):
                try:
                    raw.append(json.loads(l))
                except ValueError:
                    pass   # the cut last line of the kept head
            b64 = [e for e in raw if e.get("type") == name and "data_b64" in e]
            self.assertEqual(b64, [], "text went as data_b64")
            euros = sum(e["bytes"].count("€".encode()) for e in evs)
            self.assertEqual(euros, 25)
            runs += 25
            # the split really happened: the held first byte went out joined
            # with the next read's two, as one character of text
            self.assertTrue(any(e["bytes"] == "€".encode() for e in evs),
                            [len(e["bytes"]) for e in evs][:20])
        self.assertEqual(runs, 100)


class ListPagesTest(BrokerTestCase):
    """300,000 names in one directory: pages of list_max_entries (10,000)."""

    limits = {"memory": 256 * MiB, "pids": 128}
    N = 300000

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("lbig")
        cls.other = cls.new_id("lstream")
        cls.ensure_ok(cls.sid)
        cls.ensure_ok(cls.other)
        for lo in range(1, cls.N + 1, 100000):
            r = cls.client.sh(cls.sid, "mkdir -p /work/big && cd /work/big && "
                                       "seq %d %d | xargs touch" % (lo, lo + 99999),
                              timeout_ms=60000)
            assert r.code == 0, r

    def page(self, cursor):
        path = "/v1/sandboxes/%s/list?path=/work/big&cursor=%s" % (
            self.sid, urllib.parse.quote(cursor, safe=""))
        r = self.client.request("GET", path, timeout=120)
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_300k_names_in_pages_with_a_cursor_while_an_exec_streams(self):
        broker = self.broker
        s = Streamer(self.client, self.other)
        s.start()
        self.addCleanup(s.close)
        s.wait_events(20)
        rss0 = broker.rss_kib()
        peak = [rss0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], broker.rss_kib())
                except Exception:
                    pass
                time.sleep(0.02)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # a baseline window of the stream before listing
        b0 = time.monotonic()
        time.sleep(3)
        t0 = time.monotonic()
        names, pages, cursor = [], [], ""
        while True:
            p = self.page(cursor)
            self.assertEqual(set(p), {"entries", "truncated", "cursor"}, list(p))
            ents = p["entries"]
            self.assertLessEqual(len(ents), 10000)
            page_names = [e["name"] for e in ents]
            self.assertEqual(page_names, sorted(page_names))
            if names:
                self.assertGreater(page_names[0], names[-1])
            names += page_names
            pages.append(len(ents))
            if not p["truncated"]:
                self.assertIsNone(p["cursor"])
                break
            self.assertEqual(len(ents), 10000)
            cursor = p["cursor"]
            self.assertEqual(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)),
                             page_names[-1].encode())
            self.assertLess(len(pages), 40)
        t1 = time.monotonic()
        done.set()
        sampler.join()
        self.assertEqual(len(names), self.N)
        self.assertEqual(set(names), set(str(i) for i in range(1, self.N + 1)))
        self.assertEqual(pages[0], 10000)
        self.assertEqual(len(pages), 30)
        # a v1 client (no ?cursor=) gets the first page as the bare array
        r = self.client.list(self.sid, "/work/big", timeout=120)
        self.assertEqual(r.status, 200, r)
        self.assertIsInstance(r.json(), list)
        self.assertEqual(len(r.json()), 10000)
        self.assertEqual(r.headers.get("sbx-list-truncated"), "true")
        self.assertTrue(r.headers.get("sbx-list-cursor"))
        # The event loop never stalled: the other sandbox's stream kept
        # coming. A shared 2-core machine delays a 20 ms loop now and then
        # (measured in the baseline window); a blocked loop shows up as
        # gaps of seconds.
        during = s.gaps(t0, t1)
        base = s.gaps(b0, t0)
        self.assertTrue(during, "no stream events while listing")
        over = [g for g in during if g > 0.1]
        base_over = [g for g in base if g > 0.1]
        rate = len(base_over) / max(t0 - b0, 0.001)
        print("list pages: %.1f s for %d pages; stream max gap %.0f ms (%d over 100 ms; "
              "baseline max %.0f ms, %d over 100 ms in %.1f s); broker RSS %d -> peak %d KiB"
              % (t1 - t0, len(pages), 1000 * max(during), len(over), 1000 * max(base or [0]),
                 len(base_over), t0 - b0, rss0, peak[0]))
        self.assertLess(max(during), 1.0, "the broker's loop blocked")
        self.assertLessEqual(len(over), rate * (t1 - t0) * 2 + 3, over)
        self.assertLess(peak[0] - rss0, 32 * 1024, "broker RSS grew by %d KiB" % (peak[0] - rss0))
        self.assertIsNone(s.error)

    def test_a_bad_cursor_is_refused(self):
        for bad in ("%2F", "Lw", "AA", "!!", "x" * 400):
            r = self.client.request("GET", "/v1/sandboxes/%s/list?path=/work&cursor=%s" % (
                self.sid, bad))
            self.assertError(r, 400, "bad_request")


class StalledHelpersTest(BrokerTestCase):
    """A sandbox that SIGSTOPs its own helpers: every file request still ends
    within file_timeout, nothing stays held, other sandboxes go on."""

    limits = {"file_timeout_ms": 2000, "max_file_ops": 40}
    TIMEOUT = 2.0

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("stall")
        cls.other = cls.new_id("calm")
        cls.ensure_ok(cls.sid)
        cls.ensure_ok(cls.other)
        r = cls.client.sh(cls.sid, "mkdir -p /work/d /work/w && cd /work/d && seq 1 20000 | "
                                   "xargs touch && head -c 12582912 /dev/zero > /work/big.bin",
                          timeout_ms=60000)
        assert r.code == 0, r

    def one(self, i, out):
        t = time.monotonic()
        if i % 3 == 0:
            res = raw_request(self.client, "GET", "/v1/sandboxes/%s/list?path=/work/d" % self.sid)
        elif i % 3 == 1:
            res = raw_request(self.client, "GET", "/v1/sandboxes/%s/files?path=/work/big.bin"
                              % self.sid)
        else:
            res = raw_request(self.client, "PUT", "/v1/sandboxes/%s/files?path=%s" % (
                self.sid, qpath("/work/w/f%d" % i)), body=b"w" * (256 * 1024))
        out[i] = (time.monotonic() - t,) + res

    def test_50_requests_to_stopped_helpers_end_within_file_timeout(self):
        pid = self.broker.proc.pid
        # warm up (first-use allocations), then the baseline
        self.assertEqual(self.client.list(self.sid, "/work/w").status, 200)
        self.assertEqual(self.client.read(self.sid, "/work/big.bin").status, 200)
        time.sleep(0.5)
        fd0, rss0 = fd_count(pid), self.broker.rss_kib()
        # The sandbox's own code stops every helper it sees but its own
        # exec's (its parent), for 25 s, with shell builtins only.
        stopper = ("end=$(($(date +%s)+25)); while [ $(date +%s) -lt $end ]; do "
                   "for p in /proc/[0-9]*; do read -r st < $p/stat 2>/dev/null || continue; "
                   "case \"$st\" in *'(sbx-helper)'*) q=${st%% *}; "
                   "[ \"$q\" = \"$PPID\" ] || kill -STOP $q 2>/dev/null;; esac; done; done")
        sconn, sresp = self.client.exec_open(self.sid, ["sh", "-c", stopper], timeout_ms=40000)
        self.addCleanup(sconn.hard_close)
        self.assertEqual(sresp.status, 200)
        time.sleep(1.0)
        s = Streamer(self.client, self.other)
        s.start()
        self.addCleanup(s.close)
        s.wait_events(10)
        out = {}
        threads = [threading.Thread(target=self.one, args=(i, out)) for i in range(50)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        t1 = time.monotonic()
        self.assertEqual(len(out), 50)
        kinds = {}
        for i, (took, status, headers, body, how) in sorted(out.items()):
            if status == 429:
                kind = "too_many"
                self.assertEqual(headers.get("retry-after"), "1")
                self.assertEqual(json.loads(body)["error"]["code"], "too_many")
            elif status == 504:
                kind = "timeout"
                err = json.loads(body)["error"]
                self.assertEqual(err["code"], "timeout")
                self.assertIn("file_timeout", err["message"])
            elif status == 200 and how == "cut":
                kind = "cut"     # a read stopped mid-stream: the body ends short
            elif status == 200:
                kind = "done"    # this helper finished before it was caught
            else:
                self.fail("request %d: %r %r %r" % (i, status, how, body[:200]))
            kinds[kind] = kinds.get(kind, 0) + 1
            # every one ends within file_timeout (plus the runtime's own
            # exec start on a loaded machine)
            self.assertLess(took, self.TIMEOUT + 5.0, (i, kind, took))
        print("50 file requests to stopped helpers: %r in %.1f s" % (kinds, t1 - t0))
        self.assertGreaterEqual(kinds.get("timeout", 0) + kinds.get("cut", 0), 20, kinds)
        self.assertGreaterEqual(kinds.get("too_many", 0), 1, kinds)
        # the other sandbox's exec went on meanwhile
        self.assertLess(max(s.gaps(t0, t1)), 1.5)
        self.assertIsNone(s.error)
        s.close()
        sconn.hard_close()
        # Nothing stays held: runtime connections closed at once, the kills
        # (stopped too) end at their own 10 s bound.
        deadline = time.monotonic() + 45
        while fd_count(pid) > fd0 + 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        self.assertLessEqual(fd_count(pid), fd0 + 2, os.listdir("/proc/%d/fd" % pid))
        self.assertLess(self.broker.rss_kib() - rss0, 16 * 1024)
        # and the broker still answers file requests of calm sandboxes
        self.assertEqual(self.client.list(self.other, "/work").status, 200)

    def test_a_client_gone_before_the_reply_cancels_the_operation(self):
        pid = self.broker.proc.pid
        self.assertEqual(self.client.list(self.other, "/work").status, 200)
        fd0 = fd_count(pid)
        # a list of a sandbox whose helper stalls; the client hangs up at once
        stopper = ("end=$(($(date +%s)+8)); while [ $(date +%s) -lt $end ]; do "
                   "for p in /proc/[0-9]*; do read -r st < $p/stat 2>/dev/null || continue; "
                   "case \"$st\" in *'(sbx-helper)'*) q=${st%% *}; "
                   "[ \"$q\" = \"$PPID\" ] || kill -STOP $q 2>/dev/null;; esac; done; done")
        sconn, sresp = self.client.exec_open(self.sid, ["sh", "-c", stopper], timeout_ms=20000)
        self.addCleanup(sconn.hard_close)
        time.sleep(1.0)
        for _ in range(5):
            conn = UnixHTTPConnection(self.client.sock_path, 10)
            conn.request("GET", "/v1/sandboxes/%s/list?path=/work/d" % self.sid,
                         headers={"Authorization": "Bearer " + self.client.token})
            time.sleep(0.3)
            conn.hard_close()
        # the broker noticed: the audit says cancelled long before file_timeout
        time.sleep(1.0)
        r = self.client.metrics()
        self.assertEqual(r.status, 200)
        self.assertIn("cancelled", self.broker.log_text())
        sconn.hard_close()
        deadline = time.monotonic() + 30
        while fd_count(pid) > fd0 + 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        self.assertLessEqual(fd_count(pid), fd0 + 2)


if __name__ == "__main__":
    unittest.main()
