#!/usr/bin/python3
# test_broker_security.py - auth, secrets, container confinement, runtime outage (SPEC §4, §6, §9).

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from brokerfix import (CANARY, ID_LABEL, MANAGED_LABEL, MiB, Broker, BrokerTestCase,
                       SocketRelay, wait_until)

DOCKER_DEFAULT_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                       "MKNOD", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP",
                       "SETUID", "SYS_CHROOT"}


class AuthTest(BrokerTestCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("auth")
        cls.ensure_ok(cls.sid)

    def endpoints(self, sid):
        return [("GET", "/v1/health", None), ("GET", "/metrics", None),
                ("GET", "/v1/sandboxes", None),
                ("PUT", "/v1/sandboxes/" + sid, {"egress": False}),
                ("GET", "/v1/sandboxes/" + sid, None),
                ("POST", "/v1/sandboxes/%s/exec" % sid, {"argv": ["touch", "/work/pwned"]}),
                ("GET", "/v1/sandboxes/%s/files?path=/work/a" % sid, None),
                ("PUT", "/v1/sandboxes/%s/files?path=/work/pwned2" % sid, b"x"),
                ("GET", "/v1/sandboxes/%s/list?path=/work" % sid, None),
                ("POST", "/v1/sandboxes/%s/stop" % sid, b""),
                ("DELETE", "/v1/sandboxes/" + sid, None),
                ("GET", "/v1/no-such-route", None)]

    def test_401_without_or_with_wrong_token(self):
        fresh = self.new_id("noauth")
        wrong = [None, "", "wrong", CANARY[:-1], CANARY[:-1] + "0", CANARY + "0",
                 CANARY.upper(), CANARY + " x"]
        for sid in (self.sid, fresh):
            for method, path, body in self.endpoints(sid):
                for tok in wrong:
                    with self.subTest(method=method, path=path, token=tok):
                        r = self.client.request(method, path, body, token=tok)
                        self.assertEqual(r.status, 401, r)
                        self.assertEqual(r.headers.get("www-authenticate", "").split(" ")[0], "Bearer", r.headers)
                        self.assertEqual(r.error_code(), "unauthorized", r)
                        self.assertNotIn(CANARY.encode(), r.body)
                for hdr in ("Basic " + CANARY, CANARY, "Bearer", "Bearer" + CANARY, "Token " + CANARY):
                    with self.subTest(method=method, path=path, header=hdr):
                        r = self.client.request(method, path, body, token=None,
                                                headers={"Authorization": hdr})
                        self.assertEqual(r.status, 401, r)
        # nothing happened
        self.assertEqual(self.engine.containers_of(fresh), [])
        self.assertEqual(self.engine.volumes_of(fresh), [])
        st = self.client.status(self.sid)
        self.assertEqual(st.json()["state"], "running")
        res = self.client.exec(self.sid, ["ls", "/work"])
        self.assertNotIn(b"pwned", bytes(res.out))

    def test_auth_comes_before_body_size(self):
        big = b"\0" * (self.broker.limits["file_cap"] + 1024 * 1024)
        r = self.client.request("PUT", "/v1/sandboxes/%s/files?path=/work/big" % self.sid, big,
                                token=None)
        self.assertEqual(r.status, 401, r)
        r = self.client.request("PUT", "/v1/sandboxes/%s" % self.sid, b"{" + b" " * (9 << 20) + b"}",
                                token="wrong")
        self.assertEqual(r.status, 401, r)

    def test_wrong_method(self):
        for method, path in (("POST", "/v1/health"), ("DELETE", "/v1/sandboxes"),
                             ("GET", "/v1/sandboxes/%s/exec" % self.sid)):
            with self.subTest(method=method, path=path):
                r = self.client.request(method, path)
                self.assertError(r, 405, "method_not_allowed")
                self.assertTrue(r.headers.get("allow"), r.headers)

    def test_right_token_works(self):
        r = self.client.health()
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json().get("status"), "ok", r)
        r = self.client.metrics()
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers.get("content-type", "").startswith("text/plain"), r.headers)
        self.assertRegex(r.body.decode(), r"(?m)^[a-z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [0-9.eE+-]+$")

    def test_zz_canary_never_appears(self):
        # after everything above: responses, log, state dir
        for body in self.client.seen:
            self.assertNotIn(CANARY.encode(), body)
        self.assertNotIn(CANARY, self.broker.log_text())
        for root, _, files in os.walk(self.broker.state_dir):
            for f in files:
                p = os.path.join(root, f)
                if os.path.isfile(p):
                    with open(p, "rb") as fh:
                        self.assertNotIn(CANARY.encode(), fh.read(), p)

    def test_print_config_redacts_token(self):
        b = self.broker
        for env_token in (False, True):
            env = dict(os.environ)
            argv = b.argv() + ["--print-config"]
            if env_token:
                i = argv.index("--token-file")
                del argv[i:i + 2]
                env["SBX_BROKER_TOKEN"] = CANARY
            p = subprocess.run(argv, capture_output=True, timeout=20, env=env)
            self.assertEqual(p.returncode, 0, p)
            self.assertTrue(p.stdout.strip(), p)
            self.assertNotIn(CANARY.encode(), p.stdout + p.stderr)

    def test_short_token_refused_at_start(self):
        d = tempfile.mkdtemp(prefix="sbx-bt-short-")
        self.addCleanup(shutil.rmtree, d, True)
        tf = os.path.join(d, "token")
        fd = os.open(tf, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"short-token-15c\n")
        os.close(fd)
        argv = [self.broker.bin, "--listen", "unix:" + os.path.join(d, "s.sock"),
                "--runtime", "unix:" + self.runtime_sock, "--token-file", tf,
                "--state-dir", d, "--image", self.image]
        p = subprocess.run(argv, capture_output=True, timeout=20)
        self.assertEqual(p.returncode, 78, p)
        msg = p.stderr.decode().strip()
        self.assertTrue(msg, p)
        self.assertNotIn("short-token-15c", msg + p.stdout.decode())
        self.assertFalse(os.path.exists(os.path.join(d, "s.sock")))
        env = dict(os.environ, SBX_BROKER_TOKEN="0123456789abcde")
        del argv[argv.index("--token-file"):argv.index("--token-file") + 2]
        p = subprocess.run(argv, capture_output=True, timeout=20, env=env)
        self.assertEqual(p.returncode, 78, p)


class ConfinementTest(BrokerTestCase):

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("conf")
        cls.other = cls.new_id("bystander")
        cls.ensure_ok(cls.sid)
        cls.ensure_ok(cls.other)

    def inspect(self, sid):
        conts = self.engine.containers_of(sid)
        self.assertEqual(len(conts), 1)
        return self.engine.inspect(conts[0]["Id"])

    def test_host_config(self):
        d = self.inspect(self.sid)
        h = d["HostConfig"]
        caps = {c.upper().replace("CAP_", "") for c in (h.get("CapDrop") or [])}
        self.assertTrue("ALL" in caps or DOCKER_DEFAULT_CAPS <= caps, h.get("CapDrop"))
        self.assertFalse(h.get("CapAdd"), h.get("CapAdd"))
        self.assertFalse(h.get("Privileged"))
        self.assertIs(h.get("ReadonlyRootfs"), True)
        self.assertEqual(h.get("PidsLimit"), self.broker.limits["pids"])
        self.assertEqual(h.get("Memory"), self.broker.limits["memory"])
        self.assertGreater(h.get("MemorySwap") or 0, 0, "swap is unlimited")
        self.assertLessEqual(h.get("MemorySwap"), 2 * self.broker.limits["memory"])
        self.assertTrue(h.get("NanoCpus") or (h.get("CpuQuota") or 0) > 0, "no CPU limit")
        nnp = [o for o in (h.get("SecurityOpt") or []) if o.startswith("no-new-privileges")]
        self.assertTrue(nnp and not nnp[0].endswith("false"), h.get("SecurityOpt"))
        user = d["Config"].get("User") or ""
        self.assertNotIn(user.split(":")[0], ("", "0", "root"), "runs as root: %r" % user)
        self.assertIs(h.get("Init"), True)
        mode = h.get("NetworkMode")
        if mode != "none":
            net = self.engine.network(mode)
            self.assertIsNotNone(net, mode)
            self.assertIs(net.get("Internal"), True, "network %s has a way out" % mode)
        labels = d["Config"].get("Labels") or {}
        self.assertEqual(labels.get(MANAGED_LABEL), "true")
        self.assertEqual(labels.get(ID_LABEL), self.sid)
        for m in d.get("Mounts") or []:
            self.assertNotRegex(m.get("Source") or "", r"docker\.sock|podman\.sock", m)
            if m.get("Type") == "bind":
                self.assertIs(m.get("RW"), False, "writable host path: %r" % m)
        work = [m for m in d.get("Mounts") or [] if m.get("Destination") == "/work"]
        self.assertEqual(len(work), 1, d.get("Mounts"))
        self.assertEqual(work[0].get("Type"), "volume")
        # sbx-helper comes in a read-only named volume, no host path (adr/0009)
        self.assertEqual([m for m in d.get("Mounts") or [] if m.get("Type") == "bind"], [])
        helper = [m for m in d.get("Mounts") or [] if m.get("Destination") == "/.sbx"]
        self.assertEqual(len(helper), 1, d.get("Mounts"))
        self.assertEqual((helper[0].get("Type"), helper[0].get("RW")), ("volume", False), helper)
        tmp = (h.get("Tmpfs") or {}).get("/tmp")
        self.assertIsNotNone(tmp, h.get("Tmpfs"))
        self.assertIn("noexec", tmp)
        self.assertIn("size=", tmp)

    def test_inside(self):
        res = self.client.sh(self.sid, "id -u; grep CapEff /proc/self/status; grep CapBnd /proc/self/status; "
                                       "grep NoNewPrivs /proc/self/status")
        lines = bytes(res.out).decode().splitlines()
        self.assertNotEqual(lines[0], "0")
        self.assertEqual(lines[1].split()[1], "0000000000000000", lines)
        self.assertEqual(lines[2].split()[1], "0000000000000000", lines)
        self.assertEqual(lines[3].split()[1], "1", lines)
        for script, why in (("touch /rootfs-write", "Read-only file system"),
                            ("echo x > /etc/passwd", "Read-only file system"),
                            ("mkdir /newdir", "Read-only file system"),
                            ("cp /bin/busybox /tmp/bb && /tmp/bb true", "Permission denied"),
                            ("ls /var/run/docker.sock /run/docker.sock /run/podman/podman.sock",
                             "No such file or directory")):
            with self.subTest(script=script):
                res = self.client.sh(self.sid, script)
                self.assertNotEqual(res.code, 0, res)
                self.assertIn(why, bytes(res.err).decode("utf-8", "replace"), res)
        res = self.client.sh(self.sid, "echo ok > /tmp/t && cat /tmp/t && echo ok > /work/t && cat /work/t")
        self.assertEqual(bytes(res.out), b"ok\nok\n", res)
        res = self.client.sh(self.sid, "grep -E 'docker.sock|podman.sock' /proc/mounts; true")
        self.assertEqual(bytes(res.out), b"")

    def bystander_answers_while(self, work):
        """Runs work() in a thread; meanwhile the other sandbox's status must answer fast."""
        out = {}
        t = threading.Thread(target=lambda: out.update(res=work()))
        t.start()
        lat = []
        while t.is_alive() and len(lat) < 100:
            t0 = time.monotonic()
            r = self.broker.client(timeout=10).status(self.other)
            lat.append(time.monotonic() - t0)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["state"], "running")
            time.sleep(0.2)
        t.join(120)
        self.assertFalse(t.is_alive())
        self.assertTrue(lat, "the work ended before the broker was asked anything")
        self.assertLess(max(lat), 2.0, "broker stalled: status took %.2fs" % max(lat))
        return out["res"]

    def test_fork_bomb_stopped_by_pids_limit(self):
        script = "i=0; while [ $i -lt 200 ]; do sleep 3 & i=$((i+1)); done; wait"
        res = self.bystander_answers_while(
            lambda: self.broker.client(timeout=90).sh(self.sid, script, timeout_ms=30000))
        self.assertRegex(bytes(res.err).decode("utf-8", "replace"),
                         r"can't fork|Resource temporarily unavailable|Cannot allocate", res)
        # the sandbox recovers once the sleeps are gone
        def calm():
            try:
                res = self.client.sh(self.sid, "ps -o args | grep -c '^sleep 3$'; true")
            except AssertionError:
                return False
            return res.code == 0 and bytes(res.out).strip() == b"0"
        self.assertTrue(wait_until(calm, 15, 0.5), "the sleeps of the fork bomb never went away")

    def test_memory_hog_is_oom_killed(self):
        res = self.bystander_answers_while(
            lambda: self.broker.client(timeout=90).sh(self.sid, "head -c 200m /dev/zero | tail",
                                                      timeout_ms=30000))
        oom = (res.error is not None and res.error.get("code") == "oom")
        self.assertTrue(oom or b"Killed" in bytes(res.err) or (res.exit or {}).get("code") == 137
                        or (res.exit or {}).get("signal") in (9, "SIGKILL", "KILL"), res)
        res = self.client.exec(self.sid, ["true"])
        self.assertEqual(res.code, 0, res)
        st = self.client.status(self.sid)
        self.assertEqual(st.json()["state"], "running")


class RuntimeOutageTest(BrokerTestCase):
    """The broker talks to the runtime through a relay the test can cut."""

    via_relay = True

    def test_runtime_gone_then_back(self):
        sid = self.new_id("outage")
        sid2 = self.new_id("outage2")
        self.ensure_ok(sid)
        self.relay.stop()
        try:
            for name, call in (("ensure", lambda: self.client.ensure(sid2)),
                               ("ensure-existing", lambda: self.client.ensure(sid)),
                               ("exec", lambda: self.client.request(
                                   "POST", "/v1/sandboxes/%s/exec" % sid, {"argv": ["true"]})),
                               ("list", lambda: self.client.list(sid, "/work"))):
                with self.subTest(op=name):
                    t0 = time.monotonic()
                    r = call()
                    self.assertLess(time.monotonic() - t0, 10, "%s hung" % name)
                    self.assertError(r, 503, "runtime_unavailable")
                    self.assertIn("runtime", r.json()["error"]["message"].lower(), r)
            r = self.client.health()
            self.assertIn(r.status, (200, 503), r)
            self.assertEqual(r.json().get("status"), "degraded", r)
            self.assertTrue(self.broker.alive(), "the broker died with the runtime")
        finally:
            self.relay.start()
        ok = wait_until(lambda: self.client.ensure(sid2).status == 200, 15, 0.25)
        self.assertTrue(ok, "broker does not serve again after the runtime came back: %r"
                        % self.client.ensure(sid2))
        res = self.client.exec(sid, ["echo", "back"])
        self.assertEqual(bytes(res.out), b"back\n")
        self.assertEqual(self.client.health().json().get("status"), "ok")
        self.assertEqual(len(self.engine.containers_of(sid2)), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
