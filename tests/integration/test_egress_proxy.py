#!/usr/bin/python3
# test_egress_proxy.py - sbx-proxy itself (adr/0026) in a network namespace this suite makes: allowlist, refused ranges, rebinding, policy reload, fast denials, decision lines, no secret in its output.
#
# The namespace's loopback holds "public" TEST-NET-2 addresses
# (198.51.100.0/24: allowed.test, denied.test, the test DNS), a private one
# (10.77.0.1: "the host's private address") and 169.254.169.254 ("cloud
# metadata"), each with a test HTTP server (and HTTPS on allowed.test), all
# from tests/integration/egress_world.py. The proxy listens on the
# namespace's loopback and resolves through the test DNS only. No packet
# leaves the namespace. Clients are curl and wget, as in a sandbox.

import json
import os
import secrets
import signal
import subprocess
import time
import unittest

import sbxtest
from brokerfix import REPO, wait_until

SBX_ONCE = True

PROXY = os.path.join(REPO, "build", "out", "sbx-proxy")
WORLD = os.path.join(REPO, "tests", "integration", "egress_world.py")
ALLOWED = "198.51.100.10"
OTHER = "198.51.100.11"
DNS = "198.51.100.53"
PRIVATE = "10.77.0.1"
META = "169.254.169.254"
CANARY = "sbxcanary" + secrets.token_hex(6)

ZONE = {
    "allowed.test": [ALLOWED],
    "www.allowed.test": [ALLOWED],
    "denied.test": [OTHER],
    "other.test": [OTHER],
    "meta.test": [META],
    "private.test": [PRIVATE],
    "mixed.test": [ALLOWED, PRIVATE],
    "loop.test": ["127.0.0.1"],
    "flip.test": ["flip", [ALLOWED], [PRIVATE]],
}


def run(*argv, check=True, **kw):
    r = subprocess.run(list(argv), capture_output=True, timeout=60, **kw)
    if check and r.returncode != 0:
        raise AssertionError("%s -> %d: %s" % (" ".join(argv), r.returncode,
                                               r.stderr.decode(errors="replace")))
    return r


class Proxy:
    """One sbx-proxy in the namespace; stdout (decision lines) kept."""

    def __init__(self, ns, d, args, listen="127.0.0.1:0", head=(PROXY,)):
        self.out_path = os.path.join(d, "proxy-%s.out" % secrets.token_hex(3))
        self.err_path = self.out_path + ".err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.p = subprocess.Popen(["ip", "netns", "exec", ns] + list(head) +
                                      ["--listen", listen] + args, stdout=out, stderr=err)
        self.port = None
        if not wait_until(lambda: self._port() is not None or self.p.poll() is not None, 10) \
                or self.port is None:
            raise AssertionError("sbx-proxy did not listen: " + self.text())

    def _port(self):
        for l in self.lines():
            if l.get("event") == "listening":
                self.port = l.get("port", 0)
        return self.port

    def text(self):
        with open(self.out_path, "rb") as f:
            a = f.read()
        with open(self.err_path, "rb") as f:
            return (a + f.read()).decode(errors="replace")

    def lines(self):
        out = []
        with open(self.out_path) as f:
            for l in f:
                try:
                    out.append(json.loads(l))
                except ValueError:
                    raise AssertionError("not a JSON line from sbx-proxy: %r" % l)
        return out

    def decisions(self):
        return [l for l in self.lines() if l.get("event") in ("allow", "deny")]

    def stop(self):
        self.p.terminate()
        self.p.wait(10)


class EgressProxyTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not os.access(PROXY, os.X_OK):
            raise AssertionError("%s is missing: make all" % PROXY)
        for t in ("/usr/bin/curl", "/usr/bin/wget", "/usr/bin/openssl", "/usr/sbin/ip"):
            if not os.access(t, os.X_OK):
                raise AssertionError("%s is missing: run deploy/deps.sh" % t)
        cls.ns = "sbxpx-" + secrets.token_hex(3)
        cls.dir = sbxtest.short_tmpdir("sbxpx-")
        cls.world = None
        cls.proxies = []
        run("ip", "netns", "add", cls.ns)
        try:
            cls.nsrun("ip", "link", "set", "lo", "up")
            # Every address on the namespace's loopback: local, so nothing is
            # routed anywhere (the kernel here has no dummy interfaces).
            for a in (ALLOWED, OTHER, DNS, PRIVATE, META):
                cls.nsrun("ip", "addr", "add", a + "/32", "dev", "lo")
            with open(os.path.join(cls.dir, "zone.json"), "w") as f:
                json.dump(ZONE, f)
            run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-keyout", os.path.join(cls.dir, "key.pem"),
                "-out", os.path.join(cls.dir, "cert.pem"), "-subj", "/CN=allowed.test",
                "-addext", "subjectAltName=DNS:allowed.test")
            argv = ["ip", "netns", "exec", cls.ns, "/usr/bin/python3", WORLD, "--dir", cls.dir,
                    "--dns", DNS, "--https", ALLOWED + ":8443"]
            for ip in (ALLOWED, OTHER, PRIVATE, META, "127.0.0.1"):
                argv += ["--http", ip + ":8080"]
            with open(os.path.join(cls.dir, "world.err"), "wb") as err:
                cls.world = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
            if cls.world.stdout.readline().strip() != b"ready":
                raise AssertionError("egress_world did not start")
            cls.proxy = cls.start_proxy("--allow", "allowed.test", "--allow", "meta.test",
                                        "--allow", "private.test", "--allow", "mixed.test",
                                        "--allow", "flip.test", "--allow", META,
                                        "--allow", PRIVATE, "--allow", "loop.test")
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def start_proxy(cls, *args, **kw):
        p = Proxy(cls.ns, cls.dir, ["--resolver", DNS, "--head-timeout-ms", "1500"] + list(args),
                  **kw)
        cls.proxies.append(p)
        return p

    @classmethod
    def tearDownClass(cls):
        for p in cls.proxies:
            p.stop()
        if cls.world is not None:
            cls.world.terminate()
            cls.world.wait(10)
            cls.world.stdout.close()
        run("ip", "netns", "del", cls.ns, check=False)

    @classmethod
    def nsrun(cls, *argv, check=True, **kw):
        return run("ip", "netns", "exec", cls.ns, *argv, check=check, **kw)

    def curl(self, url, proxy=None, *extra):
        proxy = proxy or self.proxy
        t0 = time.monotonic()
        r = self.nsrun("curl", "-sS", "-m", "10", "-x", "http://127.0.0.1:%d" % proxy.port,
                       "-w", "\\n%{http_code}", "--cacert", os.path.join(self.dir, "cert.pem"),
                       *extra, url, check=False)
        out = r.stdout.decode(errors="replace")
        body, _, code = out.rpartition("\n")
        return code, body, time.monotonic() - t0, r

    def assertDenied(self, url, word, proxy=None):
        code, body, secs, r = self.curl(url, proxy)
        if url.startswith("https"):
            # curl reports the proxy's answer to CONNECT on stderr (code 000).
            self.assertIn(b"403", r.stderr, r)
        else:
            self.assertEqual(code, "403", (url, body))
            self.assertIn(word, body)
            self.assertTrue(body.startswith("sbx egress: "), body)
        self.assertLess(secs, 1.0, "a denial took %.2f s" % secs)
        d = (proxy or self.proxy).decisions()[-1]
        self.assertEqual(d["event"], "deny", d)
        self.assertIn(word, d["reason"])

    # ------------------------------------------------------------ allowlist

    def test_allowed_name_works_over_http_and_https(self):
        code, body, _, _ = self.curl("http://allowed.test:8080/x")
        self.assertEqual(code, "200", body)
        self.assertIn("served-by %s:8080" % ALLOWED, body)
        self.assertIn("host allowed.test:8080", body)   # the checked authority
        code, body, _, r = self.curl("https://allowed.test:8443/y")
        self.assertEqual(code, "200", (body, r.stderr))
        self.assertIn("served-by %s:8443" % ALLOWED, body)
        d = self.proxy.decisions()[-1]
        self.assertEqual((d["event"], d["host"], d["port"], d["addr"]),
                         ("allow", "allowed.test", 8443, ALLOWED))

    def test_wget_through_the_proxy_variables(self):
        env = dict(os.environ, http_proxy="http://127.0.0.1:%d" % self.proxy.port,
                   https_proxy="http://127.0.0.1:%d" % self.proxy.port)
        r = self.nsrun("wget", "-q", "-O-", "-T", "10", "http://allowed.test:8080/w",
                       env=env, check=False)
        self.assertIn(("served-by %s:8080" % ALLOWED).encode(), r.stdout, r)
        r = self.nsrun("wget", "-O-", "-T", "10", "http://denied.test:8080/w",
                       env=env, check=False)
        self.assertEqual(r.returncode, 8, r)      # GNU wget: "server issued an error"
        self.assertIn(b"403 Forbidden", r.stderr)

    def test_a_name_not_on_the_list_is_403_at_once_with_the_reason(self):
        self.assertDenied("http://denied.test:8080/", "denied.test:8080 is not in this "
                          "sandbox's allowlist")
        self.assertDenied("https://denied.test:8443/", "denied.test:8443 is not")
        # Not a suffix match without "*.", nor a look-alike.
        self.assertDenied("http://www.allowed.test:8080/", "not in this sandbox's allowlist")
        self.assertDenied("http://allowed.test.denied.test:8080/", "not in this")
        # The denied server is up: the 403 is the policy, not a dead host.
        r = self.nsrun("curl", "-sS", "-m", "5", "http://%s:8080/" % OTHER)
        self.assertIn(b"served-by", r.stdout)

    # ------------------------------------------------------- refused ranges

    def test_metadata_and_private_addresses_are_refused_even_by_an_allowed_name(self):
        self.assertDenied("http://meta.test:8080/", "169.254.169.254 in 169.254.0.0/16")
        self.assertDenied("http://%s:8080/latest/meta-data/" % META, "link-local")
        self.assertDenied("http://private.test:8080/", "10.77.0.1 in 10.0.0.0/8")
        self.assertDenied("https://private.test:8443/", "10.0.0.0/8")
        self.assertDenied("http://%s:8080/" % PRIVATE, "private")
        self.assertDenied("http://loop.test:8080/", "127.0.0.1 in 127.0.0.0/8")
        # Both servers answer a direct request: the refusal is the proxy's.
        for ip in (META, PRIVATE):
            r = self.nsrun("curl", "-sS", "-m", "5", "http://%s:8080/" % ip)
            self.assertIn(b"served-by", r.stdout)

    def test_rebinding_across_records_is_refused(self):
        # mixed.test answers a public and a private address at once.
        self.assertDenied("http://mixed.test:8080/", "10.77.0.1 in 10.0.0.0/8")

    def queries(self, name):
        path = os.path.join(self.dir, "queries")
        if not os.path.exists(path):
            return 0
        with open(path) as f:
            return f.read().count(name + "\n")

    def test_rebinding_across_queries_never_reaches_the_second_answer(self):
        # flip.test answers the public address first, then the private one.
        # The proxy resolves once per request and dials what it checked:
        # the first request reaches the public server, the next is refused;
        # no request ever reaches 10.77.0.1.
        before = self.queries("flip.test")
        code, body, _, _ = self.curl("http://flip.test:8080/")
        self.assertEqual(code, "200", body)
        self.assertIn("served-by %s:8080" % ALLOWED, body)
        for _ in range(3):
            code, body, _, _ = self.curl("http://flip.test:8080/")
            self.assertEqual(code, "403", body)
            self.assertNotIn("served-by %s" % PRIVATE, body)
        # One A query per request: the name is resolved once, not again for
        # the connection.
        self.assertEqual(self.queries("flip.test") - before, 4)

    def test_an_operator_cidr_opens_that_range_only(self):
        p = self.start_proxy("--allow", "private.test", "--allow", "meta.test",
                             "--cidr", "10.77.0.0/24")
        code, body, _, _ = self.curl("http://private.test:8080/", p)
        self.assertEqual(code, "200", body)
        self.assertIn("served-by %s:8080" % PRIVATE, body)
        self.assertDenied("http://meta.test:8080/", "link-local", p)

    # --------------------------------------------------------------- policy

    def test_policy_file_reload_widens_and_a_bad_file_allows_nothing(self):
        path = os.path.join(self.dir, "policy-%s" % secrets.token_hex(3))
        with open(path, "w") as f:
            f.write("allow allowed.test\n")
        p = self.start_proxy("--policy", path)
        self.assertEqual(self.curl("http://allowed.test:8080/", p)[0], "200")
        self.assertDenied("http://other.test:8080/", "not in this sandbox's allowlist", p)
        with open(path, "w") as f:
            f.write("allow allowed.test\nallow other.test:8080\n")
        p.p.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: any(l.get("event") == "policy" for l in p.lines()),
                                   10), p.text())
        code, body, _, _ = self.curl("http://other.test:8080/", p)
        self.assertEqual(code, "200", body)
        self.assertIn("served-by %s:8080" % OTHER, body)
        with open(path, "w") as f:
            f.write("allow allowed.test\nallow bad..name\n")
        p.p.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: sum(l.get("event") == "policy"
                                               for l in p.lines()) == 2, 10))
        self.assertDenied("http://allowed.test:8080/", "not in this sandbox's allowlist", p)

    def test_the_sandbox_side_relay_reaches_the_proxy_over_its_unix_socket_only(self):
        # adr/0026: the sandbox has loopback only; its relay passes bytes to
        # the proxy's socket in a volume both containers mount.
        sock = os.path.join(self.dir, "px-%s.sock" % secrets.token_hex(3))
        p = self.start_proxy("--allow", "allowed.test", listen="unix:" + sock)
        self.assertEqual(os.stat(sock).st_mode & 0o777, 0o666)
        relay = Proxy(self.ns, self.dir, ["--to", sock], head=(PROXY, "relay"))
        self.proxies.append(relay)
        code, body, _, _ = self.curl("http://allowed.test:8080/r", relay)
        self.assertEqual(code, "200", body)
        code, body, _, r = self.curl("https://allowed.test:8443/r", relay)
        self.assertEqual(code, "200", (body, r.stderr))
        self.assertIn("served-by %s:8443" % ALLOWED, body)
        # A half-closing client through the relay too (busybox nc does).
        half = ("import socket,sys;s=socket.create_connection(('127.0.0.1',%d));"
                "s.sendall(b'GET http://allowed.test:8080/h HTTP/1.0\\r\\n\\r\\n');"
                "s.shutdown(socket.SHUT_WR);s.settimeout(5);b=b''\n"
                "while True:\n c=s.recv(65536)\n if not c: break\n b+=c\n"
                "sys.stdout.buffer.write(b)" % relay.port)
        self.assertIn(b"served-by", self.nsrun("/usr/bin/python3", "-c", half).stdout)
        code, body, secs, _ = self.curl("http://denied.test:8080/", relay)
        self.assertEqual(code, "403", body)
        self.assertIn("denied.test:8080 is not in this sandbox's allowlist", body)
        self.assertLess(secs, 1.0)
        self.assertEqual([d["event"] for d in p.decisions()], ["allow", "allow", "allow", "deny"])
        self.assertEqual([d["event"] for d in relay.decisions()], [])   # the relay decides nothing
        # The proxy gone: the relay answers within its 2 s grace, it does not hang.
        p.stop()
        self.proxies.remove(p)
        code, body, secs, _ = self.curl("http://allowed.test:8080/", relay)
        self.assertEqual(code, "502", body)
        self.assertIn("egress proxy of this sandbox is not reachable", body)
        self.assertLess(secs, 5.0)

    # ------------------------------------------------- robustness, secrets

    def raw(self, data, wait=5.0):
        # The proxy listens in the namespace: the client runs there too.
        code = ("import socket,sys;s=socket.create_connection(('127.0.0.1',%d));"
                "s.settimeout(%f);s.sendall(sys.stdin.buffer.read());b=b''\n"
                "try:\n while True:\n  c=s.recv(65536)\n  if not c: break\n  b+=c\n"
                "except socket.timeout: b+=b'<timeout>'\n"
                "sys.stdout.buffer.write(b)" % (self.proxy.port, wait))
        t0 = time.monotonic()
        r = self.nsrun("/usr/bin/python3", "-c", code, input=data)
        return r.stdout, time.monotonic() - t0

    def test_a_client_that_half_closes_still_gets_the_whole_answer(self):
        # busybox nc shuts its sending side at the end of its input: the
        # answer must still come back (relay and proxy pass the end on).
        for p in (self.proxy,):
            code = ("import socket,sys;s=socket.create_connection(('127.0.0.1',%d));"
                    "s.sendall(b'GET http://allowed.test:8080/h HTTP/1.0\\r\\n\\r\\n');"
                    "s.shutdown(socket.SHUT_WR);s.settimeout(5);b=b''\n"
                    "while True:\n c=s.recv(65536)\n if not c: break\n b+=c\n"
                    "sys.stdout.buffer.write(b)" % p.port)
            r = self.nsrun("/usr/bin/python3", "-c", code)
            self.assertIn(("served-by %s:8080" % ALLOWED).encode(), r.stdout)

    def test_garbage_gets_a_400_and_the_proxy_stays_up(self):
        for junk in (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + os.urandom(64) + b"\r\n\r\n",
                     b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
                     b"GET http://user@allowed.test/ HTTP/1.1\r\n\r\n",
                     b"CONNECT allowed.test HTTP/1.1\r\n\r\n",
                     b"GET http://allowed.test/ HTTP/1.1\nHost: x\n\n"):
            out, secs = self.raw(junk, 3.0)
            self.assertTrue(out.startswith(b"HTTP/1.1 400 "), (junk, out))
            self.assertLess(secs, 2.5)
        self.assertEqual(self.curl("http://allowed.test:8080/")[0], "200")

    def test_an_unfinished_head_is_answered_408_not_left_hanging(self):
        out, secs = self.raw(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: x", 8.0)
        self.assertTrue(out.startswith(b"HTTP/1.1 408 "), out)
        self.assertLess(secs, 6.0)

    def test_an_oversized_head_is_431(self):
        out, _ = self.raw(b"GET http://allowed.test/ HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 431 "), out[:80])

    def test_paths_query_strings_and_credentials_never_reach_the_output(self):
        self.curl("http://allowed.test:8080/p/%s?token=%s" % (CANARY, CANARY), None,
                  "-H", "Proxy-Authorization: Basic " + CANARY, "-H", "X-Api-Key: " + CANARY)
        self.curl("http://denied.test:8080/%s" % CANARY, None, "-U", "u:" + CANARY)
        self.raw(b"GET http://allowed.test/" + CANARY.encode() + b"#x HTTP/1.1\r\n\r\n")
        self.assertNotIn(CANARY, self.proxy.text())
        # Proxy credentials are not passed upstream either.
        code, body, _, _ = self.curl("http://allowed.test:8080/", None,
                                     "-H", "Proxy-Authorization: Basic " + CANARY)
        self.assertEqual(code, "200")

    def test_decision_lines_carry_running_counts(self):
        p = self.start_proxy("--allow", "allowed.test")
        self.curl("http://allowed.test:8080/", p)
        self.curl("http://denied.test:8080/", p)
        self.curl("http://allowed.test:8080/", p)
        self.curl("http://meta.test:8080/", p)
        ds = p.decisions()
        self.assertEqual([d["event"] for d in ds], ["allow", "deny", "allow", "deny"])
        self.assertEqual((ds[-1]["allowed"], ds[-1]["denied"]), (2, 2))
        for d in ds:
            self.assertRegex(d["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


if __name__ == "__main__":
    unittest.main()
