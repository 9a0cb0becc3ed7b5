#!/usr/bin/python3
# test_egress_policy.py - egress by allowlist through the broker (adr/0026) on a real runtime: the sandbox has no route, its relay reaches its own proxy container, which checks names and addresses.
#
# The runtime of this suite runs in a network namespace it makes
# (tests/harness/runtimes.sh with SBX_RUNTIME_NETNS, as test_egress.py's
# EgressIsolationTest), next to a second namespace standing for the
# internet: "public" TEST-NET-2 addresses (198.51.100.10 allowed.test,
# .11 other.test/denied.test, .53 the test DNS) served by
# tests/integration/egress_world.py. "The host's private address" 10.77.0.1
# and "cloud metadata" 169.254.169.254 are addresses of the runtime's
# namespace with servers of their own. The broker's egress proxies ask the
# test DNS (egress_proxy_resolver). No packet leaves the two namespaces.

import json
import os
import sys
import re
import secrets
import shutil
import sqlite3
import subprocess
import threading
import time
import unittest
import urllib.parse

import sbxtest
from brokerfix import BrokerTestCase, Engine, REPO, unix_path, wait_until
from stackfix import Stack

RUNTIMES = os.path.join(REPO, "tests", "harness", "runtimes.sh")
WORLD = os.path.join(REPO, "tests", "integration", "egress_world.py")
WAN_IP = "198.51.100.1"
RT_IP = "198.51.100.2"
ALLOWED = "198.51.100.10"
OTHER = "198.51.100.11"
DNS = "198.51.100.53"
PRIVATE = "10.77.0.1"
META = "169.254.169.254"
ZONE = {
    "allowed.test": [ALLOWED],
    "other.test": [OTHER],
    "denied.test": [OTHER],
    "meta.test": [META],
    "private.test": [PRIVATE],
    "mixed.test": [ALLOWED, PRIVATE],
}


def run(*argv, check=True, **kw):
    r = subprocess.run(list(argv), capture_output=True, timeout=120, **kw)
    if check and r.returncode != 0:
        raise AssertionError("%s -> %d: %s %s" % (" ".join(argv), r.returncode,
                                                  r.stdout.decode(errors="replace")[-2000:],
                                                  r.stderr.decode(errors="replace")[-2000:]))
    return r


class EgressPolicyTest(BrokerTestCase):

    @classmethod
    def setUpClass(cls):
        cls.tag = secrets.token_hex(3)
        cls.rt_ns = "sbxep-%s-rt" % cls.tag
        cls.wan_ns = "sbxep-%s-wan" % cls.tag
        cls.procs = []
        cls.rtdir = None
        cls.made_ns = []
        cls.ids = []
        cls.brokers = []
        cls.broker = None
        cls.runtime = os.environ.get("SBX_TEST_RUNTIME")
        if cls.runtime not in ("docker", "podman"):
            raise AssertionError("SBX_TEST_RUNTIME must be docker or podman")
        try:
            cls.setup_namespaces()
            cls.setup_world()
            cls.setup_runtime()
            # The counts of /metrics are read every second here (adr/0027).
            cls.broker = cls.start_broker({"egress_proxy_resolver": DNS,
                                           "egress_stats_interval": 1000},
                                          runtime_sock=cls.runtime_sock)
            cls.client = cls.broker.client(timeout=120)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def ns(cls, name, *argv, check=True):
        return run("ip", "netns", "exec", name, *argv, check=check)

    @classmethod
    def setup_namespaces(cls):
        va, vb = "epv%sa" % cls.tag, "epv%sb" % cls.tag
        for n in (cls.rt_ns, cls.wan_ns):
            run("ip", "netns", "add", n)
            cls.made_ns.append(n)
            cls.ns(n, "ip", "link", "set", "lo", "up")
        run("ip", "link", "add", va, "netns", cls.rt_ns, "type", "veth", "peer",
            "name", vb, "netns", cls.wan_ns)
        cls.ns(cls.rt_ns, "ip", "addr", "add", RT_IP + "/24", "dev", va)
        cls.ns(cls.rt_ns, "ip", "link", "set", va, "up")
        cls.ns(cls.rt_ns, "ip", "route", "add", "default", "via", WAN_IP)
        cls.ns(cls.rt_ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for a in (PRIVATE, META):
            cls.ns(cls.rt_ns, "ip", "addr", "add", a + "/32", "dev", "lo")
        cls.ns(cls.wan_ns, "ip", "addr", "add", WAN_IP + "/24", "dev", vb)
        for a in (ALLOWED, OTHER, DNS):
            cls.ns(cls.wan_ns, "ip", "addr", "add", a + "/32", "dev", vb)
        cls.ns(cls.wan_ns, "ip", "link", "set", vb, "up")
        # back to unmasqueraded containers: Docker takes networks from
        # 172.17-31.0.0/16 and then 192.168.0.0/16 (its default pools, in
        # turn, not reusing a freed one at once), Podman from 10.89.0.0/16
        for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"):
            cls.ns(cls.wan_ns, "ip", "route", "add", net, "via", RT_IP)

    @classmethod
    def setup_world(cls):
        cls.wdir = sbxtest.short_tmpdir("sbxep-")
        with open(os.path.join(cls.wdir, "zone.json"), "w") as f:
            json.dump(ZONE, f)
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", os.path.join(cls.wdir, "key.pem"),
            "-out", os.path.join(cls.wdir, "cert.pem"), "-subj", "/CN=allowed.test")
        for n, dns, http, https in ((cls.wan_ns, DNS, [ALLOWED, OTHER], [ALLOWED]),
                                    (cls.rt_ns, PRIVATE, [PRIVATE, META], [])):
            argv = ["ip", "netns", "exec", n, "/usr/bin/python3", WORLD, "--dir", cls.wdir,
                    "--dns", dns]
            for ip in http:
                argv += ["--http", ip + ":8080"]
            for ip in https:
                argv += ["--https", ip + ":8443"]
            with open(os.path.join(cls.wdir, "world-%s.err" % n), "wb") as err:
                p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
            cls.procs.append(p)
            if p.stdout.readline().strip() != b"ready":
                raise AssertionError("egress_world did not start in " + n)

    @classmethod
    def setup_runtime(cls):
        cls.rtdir = os.path.join(sbxtest.out_dir(), "rt-ep-" + cls.tag)
        env = dict(os.environ, SBX_RUNTIME_NETNS=cls.rt_ns, SBX_RUNTIMES_ONLY=cls.runtime)
        run("bash", RUNTIMES, "up", cls.rtdir, env=env)
        with open(os.path.join(cls.rtdir, "env")) as f:
            vals = dict(l.strip().split("=", 1) for l in f if "=" in l)
        cls.runtime_sock = unix_path(vals["SBX_%s_HOST" % cls.runtime.upper()])
        cls.engine = Engine(cls.runtime_sock)
        cls.image = vals["SBX_TEST_IMAGE"]

    @classmethod
    def tearDownClass(cls):
        problems = []
        try:
            if getattr(cls, "brokers", None):
                BrokerTestCase.tearDownClass.__func__(cls)
        except AssertionError as e:
            problems.append(str(e))
        finally:
            for p in cls.procs:
                p.terminate()
                p.wait(10)
                p.stdout.close()
            if cls.rtdir is not None:
                env = dict(os.environ, SBX_RUNTIME_NETNS=cls.rt_ns)
                run("bash", RUNTIMES, "down", cls.rtdir, env=env, check=False)
                r = run("bash", RUNTIMES, "gone", cls.rtdir, check=False)
                if r.returncode != 0:
                    problems.append("runtime left behind: " + r.stderr.decode())
            for n in cls.made_ns:
                run("ip", "netns", "del", n, check=False)
            if getattr(cls, "wdir", None):
                shutil.rmtree(cls.wdir, True)
        if problems:
            raise AssertionError("\n".join(problems))

    # -------------------------------------------------------------- helpers

    def ensure_allow(self, sid, allow, expect=200):
        r = self.client.ensure(sid, body={"egress": True, "egress_allow": allow})
        self.assertEqual(r.status, expect, r)
        return r

    def get(self, sid, url):
        """GET url in the sandbox through its proxy variables (the test
        image's busybox wget crashes on any URL here, so nc speaks HTTP):
        (status, whole answer, seconds)."""
        t0 = time.monotonic()
        r = self.client.sh(sid, "p=${http_proxy#http://}; printf 'GET %s HTTP/1.0\\r\\n\\r\\n' "
                                "| nc -w 20 ${p%%:*} ${p##*:}; true" % url, timeout_ms=60000)
        out = bytes(r.out)
        status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.") else 0
        if status not in (200, 403):
            # What a failing assertion cannot say: the answer and the proxy's state.
            px = self.proxy(sid)
            print("get %s: %r; proxy %s" % (url, out[-300:], json.dumps(
                px["State"]) if px else "absent"), file=sys.stderr)
        return status, out, time.monotonic() - t0

    def raw(self, sid, data):
        r = self.client.sh(sid, "printf '%s' | nc -w 5 127.0.0.1 3128; true" % data,
                           timeout_ms=60000)
        return bytes(r.out)

    def proxy(self, sid):
        return self.engine.inspect("sbx-%s-proxy" % sid)

    def running(self, name):
        c = self.engine.inspect(name)
        return None if c is None else bool(c["State"]["Running"])

    def egress_counts(self, sid):
        """(allowed, denied) of sid in the broker's /metrics, or None."""
        r = self.client.metrics()
        self.assertEqual(r.status, 200, r)
        got = {}
        for dec, n in re.findall(r'^sbx_broker_egress_connections_total\{id="%s",'
                                 r'decision="(allowed|denied)"\} (\d+)$' % re.escape(sid),
                                 r.body.decode(), re.M):
            got[dec] = int(n)
        return (got["allowed"], got["denied"]) if len(got) == 2 else None

    def wait_counts(self, sid, want, what):
        """Polls /metrics (bounded) until sid's counts are want."""
        seen = []
        ok = wait_until(lambda: seen.append(self.egress_counts(sid)) or seen[-1] == want, 60, 0.2)
        self.assertTrue(ok, "%s: /metrics shows %r for %s, want %r" % (what, seen[-1], sid, want))

    def restart_broker(self, **limits):
        b = self.broker
        self.assertEqual(b.stop(), 0, b.log_text()[-2000:])
        if limits:
            b.limits.update(limits)
            from brokerfix import write_config
            write_config(b.config, b.limits)
        b.start(wait=120)
        type(self).client = b.client(timeout=120)

    def vol_status(self, name):
        """HTTP status of a volume inspect."""
        return self.engine.fetch("GET", "/volumes/" + name)[0]

    # ---------------------------------------------------------------- tests

    def test_1_allowed_name_works_others_are_403_with_the_reason(self):
        sid = self.new_id("epa")
        self.ensure_allow(sid, ["allowed.test"])
        code, out, _ = self.get(sid, "http://allowed.test:8080/x")
        self.assertEqual(code, 200, out)
        self.assertIn(("served-by %s:8080" % ALLOWED).encode(), out)
        code, out, secs = self.get(sid, "http://denied.test:8080/")
        self.assertEqual(code, 403, out)
        self.assertLess(secs, 5.0, "a denial took %.1f s (nc waits 20 s)" % secs)
        out = self.raw(sid, "GET http://denied.test:8080/ HTTP/1.0\\r\\n\\r\\n")
        self.assertIn(b"HTTP/1.1 403 Forbidden", out)
        self.assertIn(b"sbx egress: denied.test:8080 is not in this sandbox's allowlist", out)
        # CONNECT (what HTTPS clients send) to the allowed name is tunnelled.
        out = self.raw(sid, "CONNECT allowed.test:8443 HTTP/1.1\\r\\n\\r\\n")
        self.assertIn(b"HTTP/1.1 200 Connection established", out)
        out = self.raw(sid, "CONNECT denied.test:8443 HTTP/1.1\\r\\n\\r\\n")
        self.assertIn(b"403", out)
        # The proxy variables are set for every process of the sandbox.
        r = self.client.sh(sid, "echo $HTTP_PROXY $https_proxy $NO_PROXY")
        self.assertEqual(bytes(r.out).split(), [b"http://127.0.0.1:3128",
                                               b"http://127.0.0.1:3128",
                                               b"localhost,127.0.0.1,::1"])

    def test_2_metadata_and_private_addresses_are_refused_even_by_name(self):
        sid = self.new_id("epm")
        self.ensure_allow(sid, ["meta.test", "private.test", "mixed.test", META, PRIVATE])
        for url, word in (("http://meta.test:8080/", b"169.254.0.0/16"),
                          ("http://%s:8080/latest/meta-data/" % META, b"link-local"),
                          ("http://private.test:8080/", b"10.0.0.0/8"),
                          ("http://%s:8080/" % PRIVATE, b"private"),
                          # rebinding across records: public and private at once
                          ("http://mixed.test:8080/", b"10.77.0.1")):
            out = self.raw(sid, "GET %s HTTP/1.0\\r\\n\\r\\n" % url)
            self.assertIn(b"HTTP/1.1 403 Forbidden", out, url)
            self.assertIn(word, out, url)
        # The servers are there: the runtime's namespace reaches them.
        r = self.ns(self.rt_ns, "curl", "-sS", "-m", "5", "http://%s:8080/" % META)
        self.assertIn(b"served-by", r.stdout)

    def test_3_a_direct_connection_has_no_route(self):
        sid = self.new_id("epd")
        self.ensure_allow(sid, ["allowed.test"])
        r = self.client.sh(sid, "ip route; nc -w 3 %s 8080 </dev/null; echo rc=$?" % ALLOWED)
        out = bytes(r.out)
        self.assertIn(b"rc=1", out)
        self.assertNotIn(b"default", out)
        info = self.engine.inspect("sbx-" + sid)
        self.assertEqual(info["HostConfig"]["NetworkMode"], "none")
        # The proxy listens on no network at all: only its unix socket.
        px = self.proxy(sid)
        self.assertIsNotNone(px)
        self.assertFalse(px["Config"].get("ExposedPorts"))
        # Docker echoes "ALL"; Podman lists every capability it dropped.
        caps = px["HostConfig"]["CapDrop"] or []
        self.assertTrue(caps == ["ALL"] or {"CHOWN", "DAC_OVERRIDE", "SETUID", "SETGID",
                                            "NET_BIND_SERVICE"} <= set(caps), caps)
        self.assertFalse(px["HostConfig"].get("CapAdd"))

    def test_4_widening_the_policy_keeps_the_sandbox_and_its_work(self):
        sid = self.new_id("epw")
        self.ensure_allow(sid, ["allowed.test"])
        self.assertEqual(self.client.write(sid, "/work/keep.txt", b"kept").status // 100, 2)
        box = self.engine.inspect("sbx-" + sid)["Id"]
        px = self.proxy(sid)["Id"]
        self.assertEqual(self.get(sid, "http://other.test:8080/")[0], 403)
        self.ensure_allow(sid, ["allowed.test", "other.test"])
        code, out, _ = self.get(sid, "http://other.test:8080/")
        self.assertEqual(code, 200, out)
        self.assertIn(("served-by %s:8080" % OTHER).encode(), out)
        self.assertEqual(self.engine.inspect("sbx-" + sid)["Id"], box, "the sandbox was replaced")
        self.assertNotEqual(self.proxy(sid)["Id"], px, "the proxy kept the old policy")
        self.assertEqual(self.client.read(sid, "/work/keep.txt").body, b"kept")
        # The same policy again: nothing replaced.
        px = self.proxy(sid)["Id"]
        self.ensure_allow(sid, ["allowed.test", "other.test"])
        self.assertEqual(self.proxy(sid)["Id"], px)

    def test_5_two_sandboxes_see_only_their_own_allowlist(self):
        a, b = self.new_id("ep2a"), self.new_id("ep2b")
        self.ensure_allow(a, ["allowed.test"])
        self.ensure_allow(b, ["other.test"])
        self.assertEqual(self.get(a, "http://allowed.test:8080/")[0], 200)
        self.assertEqual(self.get(a, "http://other.test:8080/")[0], 403)
        self.assertEqual(self.get(b, "http://other.test:8080/")[0], 200)
        self.assertEqual(self.get(b, "http://allowed.test:8080/")[0], 403)

    def test_6_revoking_and_destroying_remove_the_proxy_and_its_volume(self):
        sid = self.new_id("epr")
        self.ensure_allow(sid, ["allowed.test"])
        self.client.write(sid, "/work/keep.txt", b"kept")
        self.assertIsNotNone(self.proxy(sid))
        st = self.ensure_ok(sid, egress=False)
        self.assertIs(st["egress"], False)
        self.assertIsNone(self.proxy(sid))
        self.assertEqual(self.vol_status("sbx-%s-egsock" % sid), 404)
        self.assertEqual(self.client.read(sid, "/work/keep.txt").body, b"kept")
        self.ensure_allow(sid, ["allowed.test"])
        self.assertEqual(self.get(sid, "http://allowed.test:8080/")[0], 200)
        self.assertIn(self.client.destroy(sid).status, (200, 204))
        self.assertIsNone(self.proxy(sid))
        self.assertEqual(self.vol_status("sbx-%s-egsock" % sid), 404)
        self.assertIsNone(self.engine.network("sbx-%s-egress" % sid))

    def test_8_the_broker_shows_counts_and_the_last_denials(self):
        sid = self.new_id("eps")
        self.ensure_allow(sid, ["allowed.test"])
        self.assertEqual(self.get(sid, "http://allowed.test:8080/")[0], 200)
        for host in ("denied.test", "meta.test"):
            self.assertEqual(self.get(sid, "http://%s:8080/secret-path?k=v" % host)[0], 403)
        r = self.client.request("GET", "/v1/sandboxes/%s/egress" % sid)
        self.assertEqual(r.status, 200, r)
        st = r.json()
        self.assertEqual((st["proxy"], st["allowed"], st["denied"]), (True, 1, 2), st)
        self.assertEqual([d["host"] for d in st["denials"]], ["denied.test", "meta.test"])
        self.assertIn("is not in this sandbox's allowlist", st["denials"][0]["reason"])
        self.assertNotIn("secret-path", r.body.decode())
        # A sandbox without a proxy: nothing counted, not an error.
        other = self.new_id("epn")
        self.ensure_ok(other, egress=False)
        st = self.client.request("GET", "/v1/sandboxes/%s/egress" % other).json()
        self.assertEqual((st["proxy"], st["allowed"], st["denied"], st["denials"]),
                         (False, 0, 0, []))

    def test_9a_metrics_show_allowed_and_denied_counts_per_sandbox(self):
        # Read by the broker's timer (egress_stats_interval), no GET .../egress.
        sid, other = self.new_id("epc"), self.new_id("epo")
        self.ensure_allow(sid, ["allowed.test"])
        self.ensure_allow(other, ["other.test"])
        self.assertEqual(self.get(sid, "http://allowed.test:8080/")[0], 200)
        self.assertEqual(self.get(sid, "http://denied.test:8080/")[0], 403)
        self.assertEqual(self.get(other, "http://other.test:8080/")[0], 200)
        self.wait_counts(sid, (1, 1), "one allowed, one denied")
        self.wait_counts(other, (1, 0), "the other sandbox counts its own")
        # A new policy replaces the proxy: its counts go on from where they were.
        px = self.proxy(sid)["Id"]
        self.ensure_allow(sid, ["allowed.test", "other.test"])
        self.assertNotEqual(self.proxy(sid)["Id"], px, "the proxy was not replaced")
        self.wait_counts(sid, (1, 1), "after the proxy's replacement")
        self.assertEqual(self.get(sid, "http://denied.test:8080/")[0], 403)
        self.assertEqual(self.get(sid, "http://other.test:8080/")[0], 200)
        self.wait_counts(sid, (2, 2), "counted on after the replacement")
        r = self.client.request("GET", "/v1/sandboxes/%s/egress" % sid).json()
        self.assertEqual((r["allowed"], r["denied"]), (2, 2), r)
        # Destroyed: its series go.
        self.assertIn(self.client.destroy(sid).status, (200, 204))
        self.assertIsNone(self.egress_counts(sid))

    def test_9b_stop_stops_the_proxy_and_ensure_starts_it_again(self):
        sid = self.new_id("ept")
        self.ensure_allow(sid, ["allowed.test"])
        self.assertTrue(self.running("sbx-%s-proxy" % sid))
        self.assertEqual(self.client.stop(sid).status, 200)
        self.assertFalse(self.running("sbx-" + sid))
        self.assertFalse(self.running("sbx-%s-proxy" % sid), "the proxy runs on after stop")
        # Stopping a stopped sandbox: fine, its proxy stays stopped.
        self.assertEqual(self.client.stop(sid).status, 200)
        self.ensure_allow(sid, ["allowed.test"])
        self.assertTrue(self.running("sbx-%s-proxy" % sid), "ensure did not start the proxy")
        self.assertEqual(self.get(sid, "http://allowed.test:8080/")[0], 200)
        # Destroy removes both (and the socket volume).
        self.assertIn(self.client.destroy(sid).status, (200, 204))
        self.assertIsNone(self.engine.inspect("sbx-" + sid))
        self.assertIsNone(self.proxy(sid))
        self.assertEqual(self.vol_status("sbx-%s-egsock" % sid), 404)

    def test_x_a_broker_killed_mid_ensure_leaves_no_orphan_proxy(self):
        sid = self.new_id("epk")
        b = self.broker
        done = []
        t = threading.Thread(target=lambda: done.append(self._ensure_quietly(sid)))
        t.start()
        # The proxy is made before its sandbox: kill the broker once it exists.
        self.assertTrue(wait_until(lambda: self.proxy(sid) is not None, 120, 0.02),
                        "no proxy appeared")
        b.proc.kill()
        b.proc.wait(10)
        b.logf.close()
        t.join(60)
        b.start(wait=120)
        type(self).client = b.client(timeout=120)
        box = self.engine.inspect("sbx-" + sid)
        print("killed with the sandbox container %s" % ("made" if box else "not made yet"))
        if box is None:
            self.assertIsNone(self.proxy(sid), "a crash left an orphan proxy")
            self.assertEqual(self.vol_status("sbx-%s-egsock" % sid), 404)
        else:
            self.assertIsNotNone(self.proxy(sid))
            self.assertEqual(bool(self.running("sbx-%s-proxy" % sid)),
                             bool(box["State"]["Running"]))
        # Whatever the crash left, an ensure makes it whole.
        self.ensure_allow(sid, ["allowed.test"])
        self.assertEqual(self.get(sid, "http://allowed.test:8080/")[0], 200)

    def _ensure_quietly(self, sid):
        try:
            return self.client.ensure(sid, body={"egress": True,
                                                 "egress_allow": ["allowed.test"]}).status
        except Exception as e:        # the broker was killed under it (reset, EOF)
            return e

    def test_y_a_broker_restart_removes_orphan_proxies_and_stops_idle_ones(self):
        gone, stopped = self.new_id("epg"), self.new_id("eph")
        self.ensure_allow(gone, ["allowed.test"])
        self.ensure_allow(stopped, ["allowed.test"])
        self.assertEqual(self.get(stopped, "http://denied.test:8080/")[0], 403)
        self.wait_counts(stopped, (0, 1), "before the restart")
        b = self.broker
        self.assertEqual(b.stop(), 0, b.log_text()[-2000:])
        # What a crash leaves: a proxy whose sandbox container is gone, and
        # one whose sandbox stopped while its proxy ran on.
        self.engine.remove("sbx-" + gone, volumes=False)
        self.engine.post("/containers/sbx-%s/stop" % stopped, params={"t": "1"})
        self.assertTrue(self.running("sbx-%s-proxy" % stopped))
        self.assertIsNotNone(self.proxy(gone))
        b.start(wait=120)
        type(self).client = b.client(timeout=120)
        self.assertIsNone(self.proxy(gone), "an orphan proxy survived the restart")
        self.assertEqual(self.vol_status("sbx-%s-egsock" % gone), 404)
        self.assertIsNone(self.engine.network("sbx-%s-egress" % gone))
        self.assertFalse(self.running("sbx-%s-proxy" % stopped))
        self.assertEqual(self.vol_status("sbx-%s-egsock" % stopped), 200)
        # The restarted broker reads the counts back (they live in the
        # socket volume), and the stopped one comes back with its proxy.
        self.wait_counts(stopped, (0, 1), "after the restart")
        self.ensure_allow(stopped, ["allowed.test"])
        code, out, _ = self.get(stopped, "http://allowed.test:8080/")
        self.assertEqual(code, 200, (out, self.broker.log_text()[-3000:]))
        self.wait_counts(stopped, (1, 1), "after the restart and a new request")

    def test_z_the_idle_reaper_stops_the_proxy_with_its_sandbox(self):
        # Last: the reaper stops every idle sandbox of the class.
        sid = self.new_id("epi")
        self.restart_broker(idle_timeout_ms=5000, reap_interval_ms=500)
        self.ensure_allow(sid, ["allowed.test"])
        self.assertTrue(wait_until(lambda: self.running("sbx-" + sid) is False, 90, 0.2),
                        "the reaper did not stop the sandbox")
        self.assertTrue(wait_until(lambda: self.running("sbx-%s-proxy" % sid) is False, 30, 0.2),
                        "the proxy runs on after the reaper stopped its sandbox")
        self.assertEqual(self.client.status(sid).json()["stop_reason"], "idle")
        self.ensure_allow(sid, ["allowed.test"])
        self.assertTrue(self.running("sbx-%s-proxy" % sid))

    def test_7_a_bad_allowlist_is_400_and_makes_nothing(self):
        sid = self.new_id("epb")
        for allow, word in ((["bad..name"], "allow[0]"), ([], "at least one"),
                            (["*", "pypi.org"], "stands alone"), ("pypi.org", "array")):
            r = self.ensure_allow(sid, allow, 400)
            self.assertIn(word, json.loads(r.body)["error"]["message"])
        r = self.client.ensure(sid, body={"egress": False, "egress_allow": ["a.test"]})
        self.assertEqual(r.status, 400, r)
        self.assertEqual(self.engine.containers_of(sid), [])
        self.assertIsNone(self.proxy(sid))


class EgressGrantApiTest(unittest.TestCase):
    """The grant through sandbox-api on the harness runtime: operator only,
    audited, stored, passed on to the broker, widened in place."""

    SENTENCE = ("Network egress is granted by an operator; ask an operator to run "
                "`sbxctl egress grant %s`.")

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxeg%d-" % os.getpid()
        cls.stack = Stack(cls.prefix)
        u = urllib.parse.urlsplit(cls.stack.url)
        cls.host, cls.port = u.hostname, u.port

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    def req(self, key, method, path, body=None):
        hdrs = {"Authorization": "Bearer " + key}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        return sbxtest.tcp_http(self.host, self.port, method, path, data, hdrs, 120)

    def inspect(self, name):
        try:
            return sbxtest.Engine().inspect(name)
        except sbxtest.APIError as e:
            if e.status == 404:
                return None
            raise

    def box(self, npc):
        return self.inspect(self.prefix + "npc-" + npc)

    def proxy(self, npc):
        return self.inspect(self.prefix + "npc-%s-proxy" % npc)

    def settled(self):
        """The api writes a request's audit row in the loop turn after its
        reply (adr/0033): once a later request is answered, the rows of
        every earlier one are in the database."""
        self.assertEqual(self.req(self.stack.operator, "GET", "/healthz").status, 200)

    def audit(self, npc):
        self.settled()
        path = os.path.join(self.stack.api_state, "api.db")
        with sqlite3.connect("file:%s?mode=ro" % path, uri=True) as db:
            return db.execute("SELECT principal, action, outcome FROM audit WHERE npc=? AND "
                              "action LIKE 'egress%' ORDER BY id", (npc,)).fetchall()

    def details(self, npc):
        """(action, outcome, detail) of npc's egress audit rows that record
        what was asked (adr/0027)."""
        self.settled()
        path = os.path.join(self.stack.api_state, "api.db")
        with sqlite3.connect("file:%s?mode=ro" % path, uri=True) as db:
            return [(a, o, json.loads(d)) for a, o, d in db.execute(
                "SELECT a.action, a.outcome, d.detail FROM audit a JOIN audit_details d "
                "ON d.audit_id = a.id WHERE a.npc=? AND a.action LIKE 'egress%' ORDER BY a.id",
                (npc,))]

    def test_grant_with_an_allowlist_is_operator_only_audited_and_widened_in_place(self):
        pl, op = self.stack.player, self.stack.operator
        npc = "egp" + secrets.token_hex(2)
        self.assertEqual(self.req(pl, "POST", "/api/v1/npcs", {"name": npc}).status, 201)
        r = self.req(pl, "PUT", "/api/v1/npcs/%s/sandbox" % npc)
        self.assertEqual(r.status, 200, r.body)
        r = sbxtest.tcp_http(self.host, self.port, "PUT",
                             "/api/v1/npcs/%s/sandbox/files?path=/work/k.txt" % npc, b"kept",
                             {"Authorization": "Bearer " + pl}, 60)
        self.assertEqual(r.status, 200, r.body)
        cid = self.box(npc)["Id"]
        # A player asking: 403 with the sentence, nothing changed.
        r = self.req(pl, "PUT", "/api/v1/npcs/%s/egress" % npc,
                     {"enabled": True, "allow": ["allowed.test"]})
        self.assertEqual(r.status, 403, r)
        self.assertEqual(json.loads(r.body)["error"]["message"], self.SENTENCE % npc)
        self.assertEqual(self.box(npc)["Id"], cid)
        self.assertIsNone(self.proxy(npc))
        self.assertEqual(self.audit(npc), [("pl", "egress", "forbidden")])
        # A bad list: 400 before anything is stored.
        r = self.req(op, "PUT", "/api/v1/npcs/%s/egress" % npc,
                     {"enabled": True, "allow": ["bad..name"]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("allow[0]", json.loads(r.body)["error"]["message"])
        r = self.req(op, "PUT", "/api/v1/npcs/%s/egress" % npc,
                     {"enabled": False, "allow": ["allowed.test"]})
        self.assertEqual(r.status, 400, r)
        npcs = {n["name"]: n for n in json.loads(self.req(op, "GET", "/api/v1/npcs").body)}
        self.assertIs(npcs[npc]["egress"], False)
        # The operator: the sandbox goes to proxy mode (/work kept).
        r = self.req(op, "PUT", "/api/v1/npcs/%s/egress" % npc,
                     {"enabled": True, "allow": ["allowed.test"]})
        self.assertEqual(r.status, 200, r)
        box = self.box(npc)
        self.assertEqual(box["HostConfig"]["NetworkMode"], "none")
        self.assertIn("HTTP_PROXY=http://127.0.0.1:3128", box["Config"]["Env"])
        self.assertIsNotNone(self.proxy(npc))
        npcs = {n["name"]: n for n in json.loads(self.req(op, "GET", "/api/v1/npcs").body)}
        self.assertEqual((npcs[npc]["egress_allow"], npcs[npc]["egress_by"]),
                         (["allowed.test"], "op"))
        # Widened: the sandbox stays, the proxy is replaced, /work kept.
        cid, px = box["Id"], self.proxy(npc)["Id"]
        r = self.req(op, "PUT", "/api/v1/npcs/%s/egress" % npc,
                     {"enabled": True, "allow": ["allowed.test", "*.pythonhosted.org"]})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.box(npc)["Id"], cid)
        self.assertNotEqual(self.proxy(npc)["Id"], px)
        self.assertIn("--allow", self.proxy(npc)["Config"]["Cmd"])
        self.assertIn("*.pythonhosted.org", self.proxy(npc)["Config"]["Cmd"])
        r = sbxtest.tcp_http(self.host, self.port, "GET",
                             "/api/v1/npcs/%s/sandbox/files?path=/work/k.txt" % npc, None,
                             {"Authorization": "Bearer " + op}, 60)
        self.assertEqual(r.body, b"kept")
        rows = self.audit(npc)
        print("audit rows:", rows)
        self.assertEqual(rows[0], ("pl", "egress", "forbidden"))
        self.assertEqual([r for r in rows if r[2] == "ok"], [("op", "egress.grant", "ok")] * 2)
        self.assertEqual(len([r for r in rows if r[0] == "op" and r[2] != "ok"]), 2, rows)
        # The audit rows of the grants say what was granted (adr/0027).
        self.assertEqual([d for d in self.details(npc) if d[1] == "ok"], [
            ("egress.grant", "ok", {"enabled": True, "allow": ["allowed.test"]}),
            ("egress.grant", "ok", {"enabled": True,
                                    "allow": ["allowed.test", "*.pythonhosted.org"]})])
        # {"enabled": true} alone is full egress (ADR 0014): no proxy any more.
        r = self.req(op, "PUT", "/api/v1/npcs/%s/egress" % npc, {"enabled": True})
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(self.proxy(npc))
        # Podman says "bridge" in NetworkMode: the network is the key.
        self.assertEqual(list(self.box(npc)["NetworkSettings"]["Networks"]),
                         [self.prefix + "npc-%s-egress" % npc])
        npcs = {n["name"]: n for n in json.loads(self.req(op, "GET", "/api/v1/npcs").body)}
        self.assertEqual(npcs[npc]["egress_allow"], ["*"])
        self.assertEqual(self.details(npc)[-1],
                         ("egress.grant", "ok", {"enabled": True, "allow": ["*"]}))
        r = self.req(op, "PUT", "/api/v1/npcs/%s/egress" % npc, {"enabled": False})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.details(npc)[-1], ("egress.revoke", "ok", {"enabled": False}))

    def test_get_egress_shows_policy_and_grant_to_operators_only(self):
        pl, op = self.stack.player, self.stack.operator
        npc = "egs" + secrets.token_hex(2)
        self.assertEqual(self.req(pl, "POST", "/api/v1/npcs", {"name": npc}).status, 201)
        r = self.req(pl, "PUT", "/api/v1/npcs/%s/sandbox" % npc)
        self.assertEqual(r.status, 200, r.body)
        r = self.req(op, "PUT", "/api/v1/npcs/%s/egress" % npc,
                     {"enabled": True, "allow": ["pypi.org", "*.pythonhosted.org"]})
        self.assertEqual(r.status, 200, r)
        r = self.req(op, "GET", "/api/v1/npcs/%s/egress" % npc)
        self.assertEqual(r.status, 200, r.body)
        e = json.loads(r.body)
        self.assertEqual((e["enabled"], e["allow"], e["granted_by"]),
                         (True, ["pypi.org", "*.pythonhosted.org"], "op"))
        self.assertIsInstance(e["granted_at"], int)
        self.assertEqual(e["proxy"]["running"], True)
        self.assertEqual(e["denials"], [])
        r = self.req(pl, "GET", "/api/v1/npcs/%s/egress" % npc)
        self.assertEqual(r.status, 403, r)
        # sbxctl egress show: one denial is one line (the proxy's reason names
        # the host once; it was printed twice), and the grant has its time.
        r = self.req(pl, "POST", "/api/v1/npcs/%s/sandbox/exec" % npc, {"argv": [
            "sh", "-c", "p=${http_proxy#http://}; printf 'GET http://denied.test:8080/ "
            "HTTP/1.0\\r\\n\\r\\n' | nc -w 20 ${p%%:*} ${p##*:}; true"]})
        self.assertEqual(r.status, 200, r.body)
        env = dict(os.environ, SBX_URL=self.stack.url, SBX_KEY=op, HOME="/nonexistent")
        env.pop("SBX_CLI_CONFIG", None)
        out = subprocess.run([os.path.join(sbxtest.BUILD, "sbxctl"), "egress", "show", npc],
                             env=env, capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        text = out.stdout.decode()
        self.assertRegex(text, r"granted by: op at \d{4}-\d\d-\d\d \d\d:\d\d")
        denied = [ln for ln in text.splitlines() if ln.startswith("denied:")]
        self.assertEqual(len(denied), 1, text)
        self.assertEqual(denied[0].count("denied.test"), 1, denied)
        self.assertIn("is not in this sandbox's allowlist", denied[0])


if __name__ == "__main__":
    unittest.main()
