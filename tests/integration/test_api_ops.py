"""test_api_ops - sandbox-api operations against a real sandbox-broker on the
runtime under test: SIGTERM drain with shutdown_grace (an exec finishes, or is
cancelled with an SSE error shutting_down and killed), SIGHUP log reopen,
/metrics (operator key, counter deltas, promtool), stop_reason in the status.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
import unittest

import sbxtest
from stackfix import API, Stack, clean_env

PROMTOOL = "/usr/bin/promtool"
NPC = "ops"


def slurp(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class SSE:
    """One exec over SSE, read event by event (http.client handles chunks)."""

    def __init__(self, url, key, argv, timeout=60):
        host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        self.conn.request("POST", "/api/v1/npcs/%s/sandbox/exec" % NPC,
                          body=json.dumps({"argv": argv}),
                          headers={"Authorization": "Bearer " + key,
                                   "Content-Type": "application/json"})
        self.resp = self.conn.getresponse()
        self.events = []

    def next(self):
        """The next (event, data-as-JSON), or None at the end of the stream."""
        ev, data = None, []
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.decode().rstrip("\n")
            if line == "":
                if ev is not None:
                    e = (ev, json.loads("\n".join(data)))
                    self.events.append(e)
                    return e
                continue
            if line.startswith(":"):
                continue
            k, _, v = line.partition(":")
            v = v[1:] if v.startswith(" ") else v
            if k == "event":
                ev = v
            elif k == "data":
                data.append(v)

    def until(self, kind):
        while True:
            e = self.next()
            if e is None:
                raise AssertionError("stream ended before %s: %r" % (kind, self.events))
            if e[0] == kind:
                return e

    def rest(self):
        while self.next() is not None:
            pass
        return self.events

    def close(self):
        self.conn.close()


class APIOpsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxopst%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix)
        try:
            r = cls.call(cls.stack.url, "POST", "/api/v1/npcs", cls.stack.player,
                         {"name": NPC})
            assert r.status == 201, r.body
        except Exception:
            cls.stack.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.call(cls.stack.url, "DELETE", "/api/v1/npcs/%s/sandbox" % NPC,
                     cls.stack.operator)
        finally:
            cls.stack.close()

    @staticmethod
    def call(url, method, path, key=None, body=None, timeout=120):
        host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
        headers = {}
        if key is not None:
            headers["Authorization"] = "Bearer " + key
        data = json.dumps(body).encode() if body is not None else None
        return sbxtest.tcp_http(host, int(port), method, path, data, headers, timeout)

    def setUp(self):
        r = self.call(self.stack.url, "PUT", "/api/v1/npcs/%s/sandbox" % NPC,
                      self.stack.player)
        self.assertEqual(r.status, 200, r.body)

    def start_api(self, *extra, log_file=None):
        """Another sandbox-api on the same broker and state (so the same
        keys), on 127.0.0.1:0, with EXTRA flags (logging to LOG_FILE when
        given); returns (process, url)."""
        n = len([x for x in os.listdir(sbxtest.out_dir()) if x.startswith(self.prefix)])
        p = sbxtest.start_process(
            [API, "--listen", "127.0.0.1:0", "--broker", "unix:" + self.stack.sock,
             "--broker-token-file", self.stack.token_file,
             "--state-dir", self.stack.api_state] + list(extra)
            + (["--log-file", log_file] if log_file else []),
            env=clean_env(),
            log_path=os.path.join(sbxtest.out_dir(), "%sapi-%d.log" % (self.prefix, n)))
        self.addCleanup(p.stop, signal.SIGKILL)
        port = []

        def listening():
            m = re.search(r'"msg":"listening".*?"port":"(\d+)"',
                          slurp(log_file) if log_file else p.output())
            if m:
                port.append(int(m.group(1)))
            return bool(port)
        sbxtest.wait_until(listening, 20, "sandbox-api listening", p)
        return p, "http://127.0.0.1:%d" % port[0]

    def assert_refuses_connections(self, url, proc):
        host, port = url.rsplit("/", 1)[1].rsplit(":", 1)

        def refused():
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return False
            except OSError:
                return True
        sbxtest.wait_until(refused, 5, "the api to stop accepting connections")
        self.assertTrue(proc.alive(), "the api exited before the open stream ended")

    def scrape(self, key=None):
        r = self.call(self.stack.url, "GET", "/metrics", key or self.stack.operator)
        self.assertEqual(r.status, 200, r.body)
        return r.body.decode()

    @staticmethod
    def metric(text, series):
        for line in text.splitlines():
            if line.startswith(series + " "):
                return float(line.split(" ", 1)[1])
        return None

    # ------------------------------------------------------------ SIGTERM

    def test_sigterm_during_a_3s_exec_lets_it_exit_and_the_api_exits_0(self):
        api, url = self.start_api("--shutdown-grace", "30s")
        s = SSE(url, self.stack.player, ["sh", "-c", "echo begin; sleep 3; echo end"])
        self.addCleanup(s.close)
        self.assertEqual(s.resp.status, 200)
        self.assertEqual(s.until("stdout")[1], {"data": "begin\n"})
        t0 = time.monotonic()
        api.proc.send_signal(signal.SIGTERM)
        # No new connection while the exec runs on.
        self.assert_refuses_connections(url, api)
        events = s.rest()
        kinds = [e[0] for e in events]
        self.assertEqual(kinds[-1], "exit", events)
        self.assertEqual(events[-1][1]["code"], 0, events)
        self.assertIn(("stdout", {"data": "end\n"}), events)
        self.assertNotIn("error", kinds)
        self.assertEqual(api.wait(30), 0, api.output()[-2000:])
        took = time.monotonic() - t0
        self.assertGreater(took, 1.5, "the api did not wait for the exec")
        self.assertIn('"msg":"draining"', api.output())

    def test_sigterm_with_a_short_grace_ends_sleep_300_with_shutting_down(self):
        api, url = self.start_api("--shutdown-grace", "1s")
        s = SSE(url, self.stack.player, ["sh", "-c", "echo up; exec sleep 300"])
        self.addCleanup(s.close)
        self.assertEqual(s.until("stdout")[1], {"data": "up\n"})
        t0 = time.monotonic()
        api.proc.send_signal(signal.SIGTERM)
        events = s.rest()
        took = time.monotonic() - t0
        self.assertEqual(events[-1][0], "error", events)
        self.assertEqual(events[-1][1]["code"], "shutting_down", events)
        self.assertIn("shutting down", events[-1][1]["message"])
        self.assertNotIn("exit", [e[0] for e in events])
        self.assertGreater(took, 0.8, "the grace period was not given")
        self.assertLess(took, 15)
        self.assertEqual(api.wait(30), 0, api.output()[-2000:])
        self.assertIn("shutdown grace period over", api.output())

        # The cancel reached the broker: the sleep is gone from the sandbox.
        def gone():
            r = self.call(self.stack.url, "POST", "/api/v1/npcs/%s/sandbox/exec" % NPC,
                          self.stack.player, {"argv": ["ps"]})
            return r.status == 200 and b"sleep 300" not in r.body
        sbxtest.wait_until(gone, 20, "the cancelled exec's sleep to be killed")

    def test_sighup_reopens_the_log_file(self):
        d = sbxtest.short_tmpdir("sbxopslog-")
        log = os.path.join(d, "api.log")
        api, url = self.start_api(log_file=log)
        os.rename(log, log + ".1")
        api.proc.send_signal(signal.SIGHUP)
        sbxtest.wait_until(lambda: os.path.exists(log), 10, "a new log file", api)
        r = self.call(url, "GET", "/healthz")
        self.assertEqual(r.status, 200)
        sbxtest.wait_until(lambda: '"msg":"request"' in slurp(log), 10,
                           "the request logged in the new file", api)
        self.assertIn("logs reopened", slurp(log))
        self.assertNotIn('"msg":"request"', slurp(log + ".1"))
        api.proc.send_signal(signal.SIGTERM)
        self.assertEqual(api.wait(30), 0)
        subprocess.run(["rm", "-rf", d])

    # ------------------------------------------------------------ metrics

    def test_metrics_need_an_operator_key(self):
        r = self.call(self.stack.url, "GET", "/metrics")
        self.assertEqual(r.status, 401)
        r = self.call(self.stack.url, "GET", "/metrics", self.stack.player)
        self.assertEqual(r.status, 403)
        self.assertEqual(r.json()["error"]["code"], "forbidden")

    def test_metrics_pass_promtool_and_count_an_exec(self):
        before = self.scrape()
        r = self.call(self.stack.url, "POST", "/api/v1/npcs/%s/sandbox/exec" % NPC,
                      self.stack.player, {"argv": ["sh", "-c", "printf 12345; printf ab >&2"]})
        self.assertEqual(r.status, 200, r.body)
        self.assertIn(b"event: exit", r.body)
        r = self.call(self.stack.url, "GET", "/api/v1/npcs/nobody/sandbox", self.stack.player)
        self.assertEqual(r.status, 404)
        after = self.scrape()

        def delta(series):
            b = self.metric(before, series) or 0
            a = self.metric(after, series)
            self.assertIsNotNone(a, "%s missing:\n%s" % (series, after))
            return a - b
        self.assertEqual(delta("sbx_api_execs_started_total"), 1)
        self.assertEqual(delta("sbx_api_execs_finished_total"), 1)
        self.assertEqual(delta("sbx_api_exec_duration_seconds_count"), 1)
        self.assertEqual(delta('sbx_api_stream_bytes_total{stream="stdout"}'), 5)
        self.assertEqual(delta('sbx_api_stream_bytes_total{stream="stderr"}'), 2)
        self.assertEqual(delta('sbx_api_http_requests_total{route="sandbox.exec",code="200"}'), 1)
        self.assertEqual(delta('sbx_api_http_requests_total{route="sandbox.status",code="404"}'), 1)
        self.assertEqual(delta('sbx_api_http_requests_total{route="metrics",code="200"}'), 1)
        self.assertEqual(self.metric(after, "sbx_api_execs_running"), 0)
        self.assertEqual(self.metric(after, "sbx_api_sse_clients"), 0)
        self.assertNotIn(NPC + '"', after)
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=after.encode(),
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr).decode() + after)

    # ------------------------------------------------------------ stop_reason

    def test_status_shows_the_brokers_stop_reason(self):
        path = "/api/v1/npcs/%s/sandbox" % NPC
        r = self.call(self.stack.url, "GET", path, self.stack.player)
        self.assertEqual(r.json()["state"], "running")
        self.assertIsNone(r.json()["stop_reason"])
        r = self.call(self.stack.url, "POST", path + "/stop", self.stack.player)
        self.assertEqual(r.status, 200, r.body)
        r = self.call(self.stack.url, "GET", path, self.stack.player)
        self.assertEqual(r.json()["state"], "stopped")
        self.assertEqual(r.json()["stop_reason"], "operator")
        r = self.call(self.stack.url, "PUT", path, self.stack.player)
        self.assertEqual(r.json()["state"], "running")
        self.assertIsNone(r.json()["stop_reason"])


if __name__ == "__main__":
    unittest.main()
