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
    arrival time of every output event is kept to find gaps, and each line
    carries the sandbox's /proc/uptime (the host's CLOCK_BOOTTIME, 10 ms
    steps) so its delay on the way (runtime, broker, this client) is known
    apart from how late the loop itself ran."""

    def __init__(self, client, sid, lines=1500, timeout_ms=60000):
        super().__init__(daemon=True)
        self.client, self.sid, self.timeout_ms = client, sid, timeout_ms
        self.argv = ["sh", "-c", "i=0; while [ $i -lt %d ]; do read u _ < /proc/uptime; "
                     "echo $u; sleep 0.02; i=$((i+1)); done" % lines]
        self.times = []
        self.delays = []   # (arrival, seconds on the way) per line
        self.types = []
        self.error = None
        self.stop_flag = False

    def run(self):
        try:
            self.conn, resp = self.client.exec_open(self.sid, self.argv, timeout_ms=self.timeout_ms,
                                                    timeout=180)
            if resp.status != 200:
                raise AssertionError("stream exec answered %d %r" % (resp.status, resp.read()[:300]))
            while not self.stop_flag:
                line = resp.readline()
                if not line:
                    break
                ev = json.loads(line)
                self.types.append(ev["type"])
                if ev["type"] in ("stdout", "stderr"):
                    now = time.monotonic()
                    boot = time.clock_gettime(time.CLOCK_BOOTTIME)
                    self.times.append(now)
                    for l in ev.get("data", "").split():
                        try:
                            self.delays.append((now, boot - float(l)))
                        except ValueError:
                            pass
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

    def delays_in(self, t0, t1):
        return [d for t, d in self.delays if t0 <= t <= t1]

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
        one = ("dd if=/work/euro bs=8192 count=1 status=none %s; sleep 0.03; "
               "dd if=/work/euro bs=8192 skip=1 status=none %s; ")
        runs = 0
        for stream, redir in (("out", ""), ("err", ">&2")) * 2:
            script = "for i in $(seq 25); do " + one % (redir, redir) + "done"
            res = self.client.exec(self.sid, ["sh", "-c", script], timeout_ms=60000, timeout=120)
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

    limits = {"memory": 256 * MiB, "pids": 128, "exec_timeout_max_ms": 300000}
    N = 300000

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("lbig")
        cls.other = cls.new_id("lstream")
        cls.ensure_ok(cls.sid)
        cls.ensure_ok(cls.other)
        # 300,000 creates through a busybox exec take minutes on this
        # shared machine; the host (root) fills the sandbox's volume directly:
        # what is under test is the listing, which runs in the sandbox.
        r = cls.client.sh(cls.sid, "mkdir -p /work/big")
        assert r.code == 0, r
        vols = cls.engine.volumes_of(cls.sid)
        assert len(vols) == 1, vols
        mp = vols[0].get("Mountpoint")
        assert mp and os.path.isdir(os.path.join(mp, "big")), vols
        big = os.path.join(mp, "big")
        for i in range(1, cls.N + 1):
            os.close(os.open(os.path.join(big, str(i)), os.O_CREAT | os.O_WRONLY, 0o644))
        r = cls.client.sh(cls.sid, "ls /work/big | wc -l")
        assert bytes(r.out).strip() == str(cls.N).encode(), r

    def page(self, cursor):
        path = "/v1/sandboxes/%s/list?path=/work/big&cursor=%s" % (
            self.sid, urllib.parse.quote(cursor, safe=""))
        r = self.client.request("GET", path, timeout=120)
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_300k_names_in_pages_with_a_cursor_while_an_exec_streams(self):
        broker = self.broker
        # it outlasts the listing (about 30-40 s here): at most 5 min
        s = Streamer(self.client, self.other, lines=15000, timeout_ms=300000)
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
        self.assertTrue(s.is_alive(), "the exec stream ended before the listing did")
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
        # coming, and no line waited long on its way (a line's delay from the
        # sandbox to this client grows by however long the broker's loop is
        # blocked; how late the sandbox's own loop runs on a loaded machine
        # does not count). Printed for the record; asserted: never a second.
        during = s.gaps(t0, t1)
        base = s.gaps(b0, t0)
        dl, bdl = s.delays_in(t0, t1), s.delays_in(b0, t0)
        self.assertTrue(during and dl, "no stream events while listing")
        print("list pages: %.1f s for %d pages; stream: max gap %.0f ms (baseline %.0f ms), "
              "line delay max %.0f ms, %d of %d over 100 ms (baseline max %.0f ms); "
              "broker RSS %d -> peak %d KiB"
              % (t1 - t0, len(pages), 1000 * max(during), 1000 * max(base or [0]),
                 1000 * max(dl), len([d for d in dl if d > 0.1]), len(dl),
                 1000 * max(bdl or [0]), rss0, peak[0]))
        self.assertLess(max(during), 2.0, "the stream stopped")
        self.assertLess(max(dl), 1.0, "a line waited %.2f s: the broker's loop blocked" % max(dl))
        # "Late" is relative to this run's own baseline window: on a loaded
        # machine (a full make check, 4 lanes on 2 cores) the baseline's lines
        # are already late by up to a few hundred ms, and a fixed 100 ms failed.
        late = max(0.1, 2 * max(bdl or [0]))
        self.assertLessEqual(len([d for d in dl if d > late]), max(3, len(dl) // 10),
                             "lines later than %.0f ms (twice the baseline's worst)" % (1000 * late))
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
        r = cls.client.exec(cls.sid, ["sh", "-c", "mkdir -p /work/d /work/w && cd /work/d && "
                                              "seq 1 20000 | xargs touch && "
                                              "head -c 12582912 /dev/zero > /work/big.bin"],
                            timeout_ms=60000, timeout=120)
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
