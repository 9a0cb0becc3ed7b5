#!/usr/bin/python3
# test_broker_lifecycle.py - idle reaper, crash recovery, graceful shutdown and /metrics of sandbox-broker on a real runtime (SPEC §7, §9).
#
# Run by tests/run.sh once per runtime (SBX_TEST_RUNTIME, SBX_RUNTIME_HOST,
# SBX_TEST_IMAGE); the broker fixture is brokerfix.BrokerTestCase. By hand:
#   set -a; . DIR/env; set +a
#   SBX_TEST_RUNTIME=docker SBX_RUNTIME_HOST=$SBX_DOCKER_HOST \
#       /usr/bin/python3 tests/integration/test_broker_lifecycle.py

import http.client
import json
import os
import re
import secrets
import signal
import sqlite3
import subprocess
import threading
import time
import unittest

import brokerfix
from brokerfix import (BrokerTestCase, ExecStream, ID_LABEL, MANAGED_LABEL,
                       UnixHTTPConnection, wait_until)

PROMTOOL = "/usr/bin/promtool"


def configure(broker, extra):
    """Adds broker config keys (broker/broker_config.c) to broker's config file."""
    with open(broker.config) as f:
        cfg = json.load(f)
    cfg.update(extra)
    with open(broker.config, "w") as f:
        json.dump(cfg, f, indent=1)


class LifecycleCase(BrokerTestCase):
    """A BrokerTestCase whose broker gets the config keys in `config`."""

    config = {}

    @classmethod
    def start_broker(cls, limits=None, runtime_sock=None, name=None):
        b = brokerfix.Broker(runtime_sock or cls.runtime_sock, cls.image, limits,
                             name=name or cls.__name__)
        configure(b, cls.config)
        cls.brokers.append(b)
        b.start()
        return b

    def restart(self):
        """Starts the class's broker again on the same state dir and socket."""
        if self.broker.alive():
            self.broker.stop()
        else:
            self.broker.logf.close()
        self.broker.start()
        self.assertTrue(self.broker.alive())

    def audit_rows(self, op):
        db = sqlite3.connect(os.path.join(self.broker.state_dir, "broker.db"), timeout=5)
        try:
            return db.execute("SELECT id, outcome, reason FROM audit WHERE op = ?",
                              (op,)).fetchall()
        finally:
            db.close()

    def sleeps(self, sid, pattern):
        """Processes in the sandbox whose command line matches pattern (bytes regex)."""
        res = self.client.exec(sid, ["ps", "-o", "args"])
        self.assertEqual(res.code, 0, res)
        return [l for l in bytes(res.out).splitlines() if re.match(pattern, l)]


class ReaperTest(LifecycleCase):
    """idle_timeout 2 s, reap_interval 500 ms."""

    config = {"idle_timeout": "2s", "reap_interval": "500ms"}

    def test_idle_sandbox_is_stopped_with_reason_idle_and_keeps_work(self):
        sid = self.new_id("idle")
        self.ensure_ok(sid)
        r = self.client.write(sid, "/work/keep.txt", b"still here\n")
        self.assertEqual(r.status, 200, r)
        last_use = time.monotonic()
        # Polling status is an observation, not use: it must not keep the
        # sandbox alive (adr/0006-idle-reaper.md).
        st = wait_until(lambda: self.client.status(sid).json()["state"] == "stopped"
                        and self.client.status(sid).json(), 20, 0.1)
        stopped_after = time.monotonic() - last_use
        self.assertTrue(st, "an idle sandbox was not stopped within 20 s")
        self.assertGreaterEqual(stopped_after, 1.9, "stopped before idle_timeout")
        # When the reaper acted, from the broker's own audit clock: the
        # decision must come within idle_timeout + reap_interval (+ slack) of
        # the last use. How long the runtime then takes to stop a container
        # depends on the machine's load, so wall time is only bounded loosely.
        db = sqlite3.connect(os.path.join(self.broker.state_dir, "broker.db"), timeout=5)
        try:
            used = db.execute("SELECT MAX(ts) FROM audit WHERE id = ? AND op = 'write'",
                              (sid,)).fetchone()[0]
            reap = db.execute("SELECT ts FROM audit WHERE id = ? AND op = 'reap'",
                              (sid,)).fetchone()
        finally:
            db.close()
        self.assertIsNotNone(reap, "no reap audit row")
        decided_after_ms = reap[0] - used   # both are start times (ms)
        self.assertLessEqual(decided_after_ms, 3000,
                             "the reaper acted %d ms after the last use (idle_timeout 2 s, "
                             "reap_interval 0.5 s; wall time to stopped %.2f s)"
                             % (decided_after_ms, stopped_after))
        self.assertGreaterEqual(decided_after_ms, 1900, "reaped before idle_timeout")
        self.assertEqual(st["stop_reason"], "idle", st)
        # stopped, not destroyed: the container and its volume stay
        self.assertEqual(len(self.engine.containers_of(sid)), 1)
        self.assertEqual(len(self.engine.volumes_of(sid)), 1)
        self.assertIn((sid, "ok", "idle"), self.audit_rows("reap"))
        self.assertIn('"msg":"reaped: idle sandbox stopped","id":"%s"' % sid,
                      self.broker.log_text())
        # ensure brings it back with /work intact
        self.assertEqual(self.ensure_ok(sid)["state"], "running")
        r = self.client.read(sid, "/work/keep.txt")
        self.assertEqual((r.status, r.body), (200, b"still here\n"), r)
        self.assertIsNone(self.client.status(sid).json()["stop_reason"])

    def test_sandbox_running_an_exec_is_not_reaped(self):
        sid = self.new_id("busy")
        self.ensure_ok(sid)
        t0 = time.monotonic()
        res = self.client.exec(sid, ["sh", "-c", "sleep 5; echo finished"])
        self.assertGreaterEqual(time.monotonic() - t0, 4.5)
        # A reaper that stopped it mid-exec would have killed the sleep.
        self.assertIsNone(res.error, res)
        self.assertEqual((res.code, bytes(res.out)), (0, b"finished\n"), res)
        st = self.client.status(sid).json()
        self.assertEqual(st["state"], "running", st)
        self.assertNotIn(sid, [row[0] for row in self.audit_rows("reap")])


class CrashRecoveryTest(LifecycleCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("crash")
        cls.ensure_ok(cls.sid)

    def test_sigkill_mid_exec_then_restart_leaves_no_orphan(self):
        st = ExecStream(self.client, self.sid, ["sleep", "300"])
        try:
            self.assertEqual(st.resp.status, 200)
            st.wait_for("start")
            self.assertTrue(wait_until(lambda: self.sleeps(self.sid, rb"^sleep 300$"), 5, 0.1),
                            "the exec's sleep never showed up")
            self.broker.proc.send_signal(signal.SIGKILL)
            self.broker.proc.wait(5)
        finally:
            st.close()
        # The process outlives the broker until the new one recovers.
        self.restart()
        # Recovery runs before the broker serves: the first exec already
        # sees no sleep (and no helper of the old exec).
        self.assertEqual(self.sleeps(self.sid, rb"^(sleep 300|.*sbx-helper exec .* sleep 300)$"), [])
        st = self.client.status(self.sid).json()
        self.assertEqual((st["state"], st["stop_reason"]), ("running", None), st)
        listed = {s["id"]: s for s in self.client.sandboxes().json()}
        self.assertEqual(listed[self.sid]["state"], "running")
        # Every labelled container is one the broker lists.
        for c in self.engine.containers(MANAGED_LABEL + "=true"):
            self.assertIn(c["Labels"].get(ID_LABEL), listed, c["Names"])
        self.assertIn((self.sid, "ok", "killed"), self.audit_rows("recover"))

    def test_labelled_container_made_while_down_is_recorded_unlabelled_untouched(self):
        lost = self.new_id("lost")
        stranger = "sbx-%s-x" % lost      # our prefix, but no labels
        self.broker.stop()
        cid = self.engine.create(name="sbx-" + lost, image=self.image, cmd=["sleep", "3600"],
                                 labels={MANAGED_LABEL: "true", ID_LABEL: lost}, host_config={})
        self.engine.start(cid)
        other = self.engine.create(name=stranger, image=self.image, cmd=["sleep", "3600"], host_config={})
        self.addCleanup(self.engine.remove, other)
        self.engine.start(other)
        before = self.engine.inspect(other)["State"]
        self.restart()
        listed = {s["id"]: s for s in self.client.sandboxes().json()}
        self.assertIn(lost, listed)
        self.assertEqual(listed[lost]["state"], "running", listed[lost])
        self.assertEqual(self.client.status(lost).json()["state"], "running")
        self.assertIn((lost, "ok", "recorded"), self.audit_rows("recover"))
        self.assertNotIn(stranger[len("sbx-"):], listed)
        after = self.engine.inspect(other)
        self.assertIsNotNone(after, "the unlabelled container was removed")
        self.assertEqual((after["State"]["Status"], after["State"]["StartedAt"],
                          after["State"]["Pid"]),
                         (before["Status"], before["StartedAt"], before["Pid"]))
        self.assertEqual(after["Config"]["Labels"] or {}, {})


class DrainTest(LifecycleCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("drain")
        cls.ensure_ok(cls.sid)

    def test_sigterm_lets_the_exec_finish_and_refuses_new_ones(self):
        # A keep-alive connection opened before the signal.
        keep = UnixHTTPConnection(self.broker.sock, 30)
        auth = {"Authorization": "Bearer " + self.broker.token}
        keep.request("GET", "/v1/health", headers=auth)
        r = keep.getresponse()
        r.read()
        self.assertEqual(r.status, 200)
        st = ExecStream(self.client, self.sid, ["sh", "-c", "sleep 3; echo done"])
        try:
            self.assertEqual(st.resp.status, 200)
            st.wait_for("start")
            t_signal = time.monotonic()
            self.broker.proc.send_signal(signal.SIGTERM)
            # The listener goes away, so a new connection cannot even start...
            self.assertTrue(wait_until(lambda: not os.path.exists(self.broker.sock), 2, 0.02))
            with self.assertRaises(OSError):
                self.client.exec(self.sid, ["true"])
            # ...and on an open connection a second exec gets 503.
            body = json.dumps({"argv": ["true"]}).encode()
            keep.request("POST", "/v1/sandboxes/%s/exec" % self.sid, body=body,
                         headers=dict(auth, **{"Content-Type": "application/json"}))
            r = keep.getresponse()
            data = r.read()
            self.assertEqual(r.status, 503, data)
            self.assertEqual(json.loads(data)["error"]["code"], "shutting_down")
            while True:
                ev = st.read_event()
                if ev is None or ev["type"] in ("exit", "error"):
                    break
        finally:
            st.close()
            keep.close()
        self.assertIsNone(st.result.error, st.result)
        self.assertEqual(st.result.code, 0, st.result)
        self.assertEqual(bytes(st.result.out), b"done\n")
        self.assertEqual(self.broker.proc.wait(15), 0, "the broker did not exit 0 after draining")
        self.assertLess(time.monotonic() - t_signal, 8, "drain waited for the grace period")
        # The exec's agent channel stays open after it: the loop still
        # settled (closed it) instead of waiting out its 3 s deadline.
        with open(self.broker.log, "rb") as f:
            stopped = [json.loads(line) for line in f
                       if line.startswith(b"{") and b'"msg":"stopped"' in line]
        self.assertEqual(stopped[-1].get("events_left"), "0", stopped[-1])
        self.restart()   # teardown destroys through the broker
        self.assertEqual(self.client.status(self.sid).json()["state"], "running")


def parse_metrics(text):
    """Prometheus text -> {"name{labels}": float} (HELP/TYPE lines skipped)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, val = line.rsplit(" ", 1)
        out[key] = float(val)
    return out


class MetricsTest(LifecycleCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("metrics")
        cls.ensure_ok(cls.sid)

    def metrics(self):
        r = self.client.metrics()
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.headers)
        return r.body.decode()

    def test_metrics_pass_promtool_and_count_a_scripted_sequence(self):
        text = self.metrics()
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout.decode() + "\n---\n" + text)
        for family, kind in (("sbx_broker_requests_total", "counter"),
                             ("sbx_broker_request_duration_seconds", "histogram"),
                             ("sbx_broker_execs_running", "gauge"),
                             ("sbx_broker_execs_started_total", "counter"),
                             ("sbx_broker_execs_finished_total", "counter"),
                             ("sbx_broker_exec_duration_seconds", "histogram"),
                             ("sbx_broker_exec_output_bytes_total", "counter"),
                             ("sbx_broker_sandboxes", "gauge"),
                             ("sbx_broker_reaped_total", "counter"),
                             ("sbx_broker_runtime_errors_total", "counter"),
                             ("sbx_broker_recovered_total", "counter")):
            self.assertIn("# TYPE %s %s\n" % (family, kind), text)
            self.assertIn("# HELP %s " % family, text)
        self.assertNotIn(self.sid, text, "a sandbox id in a label")
        a = parse_metrics(text)
        for _ in range(3):
            res = self.client.exec(self.sid, ["sh", "-c", "printf abc; printf de >&2"])
            self.assertEqual(res.code, 0, res)
        r = self.client.write(self.sid, "/work/m.txt", b"x")
        self.assertEqual(r.status, 200)
        r = self.client.status("absent-" + self.sid)
        self.assertEqual(r.json()["state"], "absent")
        b = parse_metrics(self.metrics())

        def delta(k):
            return b.get(k, 0) - a.get(k, 0)
        self.assertEqual(delta("sbx_broker_execs_started_total"), 3)
        self.assertEqual(delta("sbx_broker_execs_finished_total"), 3)
        self.assertEqual(b["sbx_broker_execs_running"], 0)
        self.assertEqual(delta("sbx_broker_exec_duration_seconds_count"), 3)
        self.assertEqual(delta('sbx_broker_exec_duration_seconds_bucket{le="+Inf"}'), 3)
        self.assertEqual(delta('sbx_broker_exec_output_bytes_total{stream="stdout"}'), 9)
        self.assertEqual(delta('sbx_broker_exec_output_bytes_total{stream="stderr"}'), 6)
        self.assertEqual(delta('sbx_broker_requests_total{op="exec",code="200"}'), 3)
        self.assertEqual(delta('sbx_broker_requests_total{op="write",code="200"}'), 1)
        self.assertEqual(delta('sbx_broker_requests_total{op="status",code="200"}'), 1)
        self.assertEqual(delta('sbx_broker_requests_total{op="metrics",code="200"}'), 1)
        self.assertEqual(delta('sbx_broker_request_duration_seconds_count{op="exec"}'), 3)
        self.assertEqual(b['sbx_broker_sandboxes{state="running"}'], 1)
        self.assertEqual(delta('sbx_broker_runtime_errors_total{code="runtime_error"}'), 0)
        # stopping by hand is not the reaper's doing
        r = self.client.stop(self.sid)
        self.assertEqual((r.status, r.json()["stop_reason"]), (200, "operator"), r)
        c = parse_metrics(self.metrics())
        self.assertEqual(c['sbx_broker_sandboxes{state="stopped"}'], 1)
        self.assertEqual(c['sbx_broker_sandboxes{state="running"}'], 0)
        self.assertEqual(c['sbx_broker_reaped_total{action="stop"}'], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
