#!/usr/bin/python3
# test_destroy_race.py - operations racing a destroy of their sandbox answer 404 or 409 (or succeed), never 502 (issue 24 item 10), at the broker on a real runtime.

import json
import threading
import time
import unittest

from brokerfix import BrokerTestCase

OPS = 50
ROUNDS = 3


class DestroyRaceTest(BrokerTestCase):
    """50 execs, writes, reads and lists started at once with a destroy."""

    limits = {"max_file_ops": 64, "max_execs": 64, "pids": 1024}

    messages = {}

    @classmethod
    def note(cls, e):
        if e.get("code") not in ("not_found", "not_running"):
            k = "%s: %s" % (e.get("code"), e.get("message"))
            cls.messages[k] = cls.messages.get(k, 0) + 1

    def one(self, sid, i, out):
        kind = ("exec", "write", "read", "list")[i % 4]
        try:
            if kind == "exec":
                conn, r = self.client.exec_open(sid, ["sh", "-c", "echo %d" % i], timeout=60)
                try:
                    data = r.read()
                finally:
                    conn.close()
                if r.status != 200:
                    e = json.loads(data)["error"]
                    out.append((kind, r.status, e["code"]))
                    self.note(e)
                    return
                last = json.loads(data.strip().split(b"\n")[-1])
                if last.get("type") == "error":
                    self.note(last)
                    out.append((kind, "event", last.get("code") or last.get("error", {}).get("code")))
                else:
                    out.append((kind, 200, last.get("type")))
                return
            if kind == "write":
                r = self.client.write(sid, "/work/f%d" % i, b"x" * 1000, timeout=60)
            elif kind == "read":
                r = self.client.read(sid, "/work/seed", timeout=60)
            else:
                r = self.client.list(sid, "/work", timeout=60)
            code = None
            if r.status >= 300:
                e = json.loads(r.body)["error"]
                code = e["code"]
                self.note(e)
            out.append((kind, r.status, code))
        except Exception as ex:  # reported by the test
            out.append((kind, "exception", repr(ex)))

    def test_ops_racing_a_destroy_are_404_or_409_never_502(self):
        seen = {}
        for rnd in range(ROUNDS):
            sid = self.new_id("race")
            self.ensure_ok(sid)
            self.assertEqual(self.client.write(sid, "/work/seed", b"seed").status, 200)
            out = []
            gone = threading.Event()

            def loop(i):
                # ops one after another until one after the destroy answered
                while True:
                    mine = []
                    self.one(sid, i, mine)
                    out.extend(mine)
                    if gone.is_set() and mine[0][1] != 200:
                        return
                    if gone.is_set() and len(out) > 40 * OPS:
                        return
            ts = [threading.Thread(target=loop, args=(i,)) for i in range(OPS)]
            for t in ts:
                t.start()
            time.sleep(0.3 + 0.2 * rnd)   # the destroy lands at different points
            r = self.client.destroy(sid, timeout=120)
            gone.set()
            self.assertIn(r.status, (200, 204), r.body)
            for t in ts:
                t.join(120)
            for kind, status, code in out:
                key = "%s %s %s" % (kind, status, code)
                seen[key] = seen.get(key, 0) + 1
        print("outcomes of %d ops racing a destroy: %s" % (sum(seen.values()),
                                                          json.dumps(seen, sort_keys=True)))
        refused = {}
        for line in self.broker.log_text().splitlines():
            if '"runtime refused"' in line or '"level":"error"' in line:
                j = json.loads(line)
                k = "%s %s %s" % (j.get("what"), j.get("status"), (j.get("message") or j.get("msg"))[:80])
                refused[k] = refused.get(k, 0) + 1
        print("the other answers' sentences: %s" % json.dumps(self.messages, sort_keys=True))
        print("the broker's runtime refusals meanwhile: %s" % json.dumps(refused, sort_keys=True))
        # A read whose 200 had started streaming when its sandbox went can
        # only be cut (its status was sent): allowed, and said in docs/api.md.
        bad = {k: n for k, n in seen.items()
               if (" 502 " in k or "runtime_error" in k or "exception" in k or " 500 " in k
                   or " 503 " in k) and not k.startswith("read exception IncompleteRead")}
        self.assertEqual(bad, {}, seen)


if __name__ == "__main__":
    unittest.main()
