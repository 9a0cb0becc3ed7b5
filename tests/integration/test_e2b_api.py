"""test_e2b_api - E2B's control plane at <api>/e2b (issue 23 items 1 and 3, adr/0059)
on a real sandbox-api and broker on the runtime under test, with python's stdlib as
the client, as E2B's SDK 2.51 calls it: create (templateID, timeout, metadata,
envVars, secure), list with the SDK's metadata filter, states and pagination
(X-Next-Token), get, kill, timeout, pause and connect (the /work files kept), metrics;
errors in E2B's {"code","message"} shape (a wrong key 401, a killed or another
player's sandbox 404, egress from a player 403 with sbx's sentence); deadlines the
api enforces (kill, or pause with autoPause) also across an api restart; envd routing
by E2b-Sandbox-Id/-Port and by the {port}-{id}.{e2b_domain} Host into a sandbox port.
"""

import json
import os
import time
import unittest
import urllib.parse

import sbxtest
from stackfix import Stack

DOMAIN = "e2b.sbx.test"
HTTP_PORT = 8000


def sdk_metadata_query(md):
    """The query value of GET /v2/sandboxes?metadata= as the SDK makes it:
    encodeURIComponent of key and value, URLSearchParams, then the query
    serializer's encodeURIComponent again."""
    pairs = {urllib.parse.quote(k, safe="-_.!~*'()"): urllib.parse.quote(v, safe="-_.!~*'()")
             for k, v in md.items()}
    inner = urllib.parse.urlencode(pairs)
    return urllib.parse.quote(inner, safe="-_.!~*'()")


class E2BApiTest(unittest.TestCase):

    @classmethod
    def api_args(cls):
        return ["--e2b-templates", "base=,busybox=" + sbxtest.test_image(),
                "--e2b-domain", DOMAIN, "--e2b-reap-interval", "200ms",
                "--e2b-list-max", "50", "--requests-per-minute", "100000"]

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxe2%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix, api_args=cls.api_args())
        cls.url = cls.stack.url
        cls.key = cls.stack.player

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    # ------------------------------------------------------------ helpers

    @classmethod
    def call(cls, key, method, path, body=None, headers=None):
        host, port = cls.url.split("//", 1)[1].split(":")
        h = dict(headers or {})
        if key:
            h["X-API-Key"] = key
        return sbxtest.tcp_http(host, int(port), method, path, body, h, 60)

    @classmethod
    def sbx(cls, method, path, body=None, key=None):
        host, port = cls.url.split("//", 1)[1].split(":")
        return sbxtest.tcp_http(host, int(port), method, path, body,
                                {"Authorization": "Bearer " + (key or cls.key)}, 60)

    def create(self, key=None, **body):
        body.setdefault("templateID", "base")
        r = self.call(key or self.key, "POST", "/e2b/v2/sandboxes", body)
        self.assertEqual(r.status, 201, r.body)
        sb = r.json()
        self.addCleanup(self.call, key or self.key, "DELETE", "/e2b/sandboxes/" + sb["sandboxID"])
        return sb

    def assertE2BError(self, r, status):
        self.assertEqual(r.status, status, r.body)
        e = r.json()
        self.assertEqual(e["code"], status, e)
        self.assertIsInstance(e["message"], str)
        self.assertTrue(e["message"])
        return e

    def info(self, sid, key=None):
        return self.call(key or self.key, "GET", "/e2b/sandboxes/" + sid)

    def ids(self, query):
        r = self.call(self.key, "GET", "/e2b/v2/sandboxes" + query)
        self.assertEqual(r.status, 200, r.body)
        return [s["sandboxID"] for s in r.json()], r

    def write_work(self, sid, name, data):
        r = self.sbx("PUT", "/api/v1/npcs/%s/sandbox/files?path=/work/%s" % (sid, name), data)
        self.assertEqual(r.status, 200, r.body)

    def read_work(self, sid, name):
        return self.sbx("GET", "/api/v1/npcs/%s/sandbox/files?path=/work/%s" % (sid, name))

    # ------------------------------------------------------------ tests

    def test_01_create_get_list_as_the_sdk(self):
        sb = self.create(timeout=120, metadata={"app": "t1", "who": "a b&c=d%"},
                         envVars={"A": "1"}, secure=True, autoPause=False)
        sid = sb["sandboxID"]
        self.assertRegex(sid, r"^e2b[a-z0-9]{17}$")
        self.assertEqual(len(sb["envdAccessToken"]), 43)
        self.assertEqual(sb["templateID"], "base")
        self.assertEqual(sb["domain"], DOMAIN)
        self.assertGreaterEqual(tuple(int(x) for x in sb["envdVersion"].split(".")), (0, 1, 0))
        r = self.info(sid)
        self.assertEqual(r.status, 200, r.body)
        d = r.json()
        self.assertEqual(d["state"], "running")
        self.assertEqual(d["metadata"], {"app": "t1", "who": "a b&c=d%"})
        self.assertEqual(d["envdAccessToken"], sb["envdAccessToken"])
        self.assertEqual(d["lifecycle"], {"autoResume": False, "onTimeout": "kill"})
        left = (time.mktime(time.strptime(d["endAt"][:19], "%Y-%m-%dT%H:%M:%S"))
                - time.mktime(time.strptime(d["startedAt"][:19], "%Y-%m-%dT%H:%M:%S")))
        self.assertAlmostEqual(left, 120, delta=2)
        # The sandbox is an NPC of the key's owner, run by the sbx API's paths.
        st = self.sbx("GET", "/api/v1/npcs/%s/sandbox" % sid).json()
        self.assertEqual((st["owner"], st["state"]), ("pl", "running"))
        got, _ = self.ids("?metadata=" + sdk_metadata_query({"who": "a b&c=d%", "app": "t1"}))
        self.assertEqual(got, [sid])
        got, _ = self.ids("?metadata=" + sdk_metadata_query({"app": "other"}))
        self.assertEqual(got, [])
        got, _ = self.ids("?state=paused&metadata=" + sdk_metadata_query({"app": "t1"}))
        self.assertEqual(got, [])
        got, _ = self.ids("?state=running,paused&metadata=" + sdk_metadata_query({"app": "t1"}))
        self.assertEqual(got, [sid])
        # The other player sees nothing of it.
        r = self.call(self.stack.other, "GET", "/e2b/v2/sandboxes")
        self.assertNotIn(sid, [s["sandboxID"] for s in r.json()])

    def test_02_a_wrong_or_missing_key_is_401_in_e2b_shape(self):
        for key in ("not-a-key", None):
            r = self.call(key, "GET", "/e2b/v2/sandboxes")
            self.assertE2BError(r, 401)
            r = self.call(key, "POST", "/e2b/v2/sandboxes", {"templateID": "base"})
            self.assertE2BError(r, 401)
        # An sbx bearer key is not E2B's header.
        r = self.call(None, "GET", "/e2b/v2/sandboxes", headers={
            "Authorization": "Bearer " + self.key})
        self.assertE2BError(r, 401)

    def test_03_another_players_sandbox_is_404(self):
        sid = self.create()["sandboxID"]
        o = self.stack.other
        for m, p in (("GET", ""), ("DELETE", ""), ("POST", "/pause"), ("POST", "/timeout"),
                     ("GET", "/metrics")):
            body = {"timeout": 5} if p == "/timeout" else None
            self.assertE2BError(self.call(o, m, "/e2b/sandboxes/" + sid + p, body), 404)
        self.assertE2BError(self.call(o, "POST", "/e2b/v2/sandboxes/%s/connect" % sid, {}), 404)
        # A plain NPC is no E2B sandbox.
        self.assertEqual(self.sbx("POST", "/api/v1/npcs", {"name": "plain"}).status, 201)
        self.assertE2BError(self.info("plain"), 404)
        self.assertEqual(self.info(sid).json()["state"], "running")

    def test_04_refusals_have_sbx_sentences(self):
        r = self.call(self.key, "POST", "/e2b/v2/sandboxes", {"templateID": "nope"})
        self.assertIn("e2b_templates", self.assertE2BError(r, 400)["message"])
        for net in ({"allow_internet_access": True}, {"network": {"allowOut": ["1.1.1.1"]}}):
            body = dict(net, templateID="base")
            e = self.assertE2BError(self.call(self.key, "POST", "/e2b/v2/sandboxes", body), 403)
            self.assertIn("granted by an operator", e["message"])
        r = self.call(self.key, "POST", "/e2b/v2/sandboxes", {"templateID": "base",
                                                              "metadata": {"k": "v" * 5000}})
        self.assertIn("e2b_metadata_max", self.assertE2BError(r, 400)["message"])
        r = self.call(self.key, "POST", "/e2b/v2/sandboxes", {"templateID": "base",
                                                              "timeout": 10 ** 9})
        self.assertE2BError(r, 400)
        self.assertE2BError(self.call(self.key, "GET", "/e2b/v2/sandboxes?limit=51"), 400)
        self.assertE2BError(self.call(self.key, "GET", "/e2b/v2/sandboxes?state=gone"), 400)
        self.assertE2BError(self.call(self.key, "GET", "/e2b/nothing/here"), 404)
        sid = self.create()["sandboxID"]
        e = self.assertE2BError(self.call(self.key, "PUT", "/e2b/sandboxes/%s/network" % sid,
                                          {"allowOut": ["0.0.0.0/0"]}), 403)
        self.assertIn("sbxctl egress grant " + sid, e["message"])

    def test_05_pages_follow_x_next_token(self):
        made = [self.create(templateID="busybox", metadata={"group": "pg"})["sandboxID"]
                for _ in range(3)]
        q = "?metadata=" + sdk_metadata_query({"group": "pg"})
        first, r = self.ids(q + "&limit=2")
        tok = r.headers.get("X-Next-Token")
        self.assertTrue(tok)
        rest, r = self.ids(q + "&limit=2&nextToken=" + tok)
        self.assertIsNone(r.headers.get("X-Next-Token"))
        self.assertEqual(sorted(first + rest), sorted(made))
        self.assertEqual(first, made[::-1][:2])   # newest first
        asc, _ = self.ids(q + "&order=asc")
        self.assertEqual(asc, made)
        self.assertE2BError(self.call(self.key, "GET", "/e2b/v2/sandboxes?nextToken=zz!"), 400)

    def test_06_pause_then_connect_keeps_work_files(self):
        sb = self.create(timeout=300)
        sid = sb["sandboxID"]
        self.write_work(sid, "keep.txt", b"kept across a pause\n")
        r = self.call(self.key, "POST", "/e2b/sandboxes/%s/pause" % sid, {})
        self.assertEqual(r.status, 204, r.body)
        self.assertEqual(self.info(sid).json()["state"], "paused")
        self.assertEqual(self.sbx("GET", "/api/v1/npcs/%s/sandbox" % sid).json()["state"],
                         "stopped")
        got, _ = self.ids("?state=paused")
        self.assertIn(sid, got)
        # Again: 409 (the SDK's pause() returns false).
        self.assertE2BError(self.call(self.key, "POST", "/e2b/sandboxes/%s/pause" % sid), 409)
        # Traffic does not resume it.
        r = self.call(None, "GET", "/e2b/envd/x", headers={
            "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(HTTP_PORT),
            "X-Access-Token": sb["envdAccessToken"]})
        self.assertIn("connect first", self.assertE2BError(r, 502)["message"])
        r = self.call(self.key, "POST", "/e2b/v2/sandboxes/%s/connect" % sid, {"timeout": 60})
        self.assertEqual(r.status, 201, r.body)
        self.assertEqual(r.json()["envdAccessToken"], sb["envdAccessToken"])
        self.assertEqual(self.info(sid).json()["state"], "running")
        r = self.read_work(sid, "keep.txt")
        self.assertEqual((r.status, r.body), (200, b"kept across a pause\n"))
        # Connecting a running one: 200, the deadline only extended.
        end = self.info(sid).json()["endAt"]
        r = self.call(self.key, "POST", "/e2b/v2/sandboxes/%s/connect" % sid, {"timeout": 1})
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.info(sid).json()["endAt"], end)

    def test_07_the_deadline_kills_or_pauses(self):
        kill = self.create(timeout=1)["sandboxID"]
        pause = self.create(timeout=1, autoPause=True)["sandboxID"]
        self.assertEqual(self.info(pause).json()["lifecycle"]["onTimeout"], "pause")

        def enforced():
            return (self.info(kill).status == 404 and
                    self.info(pause).json().get("state") == "paused")
        sbxtest.wait_until(enforced, 30, "the E2B deadlines", interval=0.3)
        self.assertE2BError(self.call(self.key, "DELETE", "/e2b/sandboxes/" + kill), 404)
        self.assertEqual(self.sbx("GET", "/api/v1/npcs/%s/sandbox" % kill).json()["state"],
                         "absent")
        self.assertEqual(self.sbx("GET", "/api/v1/npcs/%s/sandbox" % pause).json()["state"],
                         "stopped")

    def test_08_set_timeout_moves_the_deadline(self):
        sid = self.create(timeout=300)["sandboxID"]
        r = self.call(self.key, "POST", "/e2b/sandboxes/%s/timeout" % sid, {"timeout": 1})
        self.assertEqual(r.status, 204, r.body)
        sbxtest.wait_until(lambda: self.info(sid).status == 404, 30, "the new deadline",
                           interval=0.3)

    def test_09_kill_then_404(self):
        sid = self.create()["sandboxID"]
        r = self.call(self.key, "DELETE", "/e2b/sandboxes/" + sid)
        self.assertEqual((r.status, r.body), (204, b""))
        self.assertE2BError(self.info(sid), 404)
        self.assertE2BError(self.call(self.key, "DELETE", "/e2b/sandboxes/" + sid), 404)
        self.assertE2BError(self.call(self.key, "POST", "/e2b/v2/sandboxes/%s/connect" % sid,
                                      {}), 404)
        self.assertEqual(self.sbx("GET", "/api/v1/npcs/%s/sandbox" % sid).json()["state"],
                         "absent")

    def test_10_metrics_one_sample(self):
        sid = self.create()["sandboxID"]
        self.write_work(sid, "m.bin", os.urandom(256 * 1024))
        r = self.call(self.key, "GET", "/e2b/sandboxes/%s/metrics" % sid)
        self.assertEqual(r.status, 200, r.body)
        (m,) = r.json()
        for k in ("timestamp", "timestampUnix", "cpuUsedPct", "cpuCount", "memUsed",
                  "memTotal", "memCache", "diskUsed", "diskTotal"):
            self.assertIn(k, m)
        self.assertGreaterEqual(m["diskUsed"], 256 * 1024)

    def test_11_envd_routing_reaches_a_sandbox_port(self):
        sb = self.create(timeout=300)
        sid, tok = sb["sandboxID"], sb["envdAccessToken"]
        self.write_work(sid, "www/hello.txt", b"hello through e2b\n")
        r = self.sbx("POST", "/api/v1/npcs/%s/sandbox/execs" % sid, {
            "argv": ["busybox", "httpd", "-f", "-p", "127.0.0.1:%d" % HTTP_PORT, "-h",
                     "/work/www"], "timeout_ms": 300000})
        self.assertEqual(r.status, 201, r.body)
        hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(HTTP_PORT),
               "X-Access-Token": tok}

        def up():
            return self.call(None, "GET", "/e2b/envd/hello.txt", headers=hdr).status == 200
        sbxtest.wait_until(up, 30, "busybox httpd in the sandbox", interval=0.3)
        r = self.call(None, "GET", "/e2b/envd/hello.txt", headers=hdr)
        self.assertEqual(r.body, b"hello through e2b\n")
        # The SDK's getHost(port): {port}-{id}.{domain}, the same token.
        r = self.call(None, "GET", "/hello.txt", headers={
            "Host": "%d-%s.%s" % (HTTP_PORT, sid, DOMAIN), "X-Access-Token": tok})
        self.assertEqual((r.status, r.body), (200, b"hello through e2b\n"))
        # Without the token, with another's, or naming two sandboxes.
        r = self.call(None, "GET", "/e2b/envd/hello.txt", headers=dict(hdr, **{
            "X-Access-Token": "x" * 43}))
        self.assertEqual(r.status, 401, r.body)
        r = self.call(None, "GET", "/hello.txt", headers={
            "Host": "%d-%s.%s" % (HTTP_PORT, sid, DOMAIN)})
        self.assertEqual(r.status, 401, r.body)
        r = self.call(self.key, "GET", "/e2b/envd/hello.txt", headers={
            "E2b-Sandbox-Id": "e2bnosuchsandbox0000", "X-Access-Token": tok})
        self.assertEqual(r.status, 404, r.body)
        # Port 49983 is envd (api_envd.c): a Connect call with the token is
        # answered by it; without, Connect's error shape.
        envd = dict(hdr, **{"E2b-Sandbox-Port": "49983"})
        r = self.call(None, "POST", "/e2b/envd/process.Process/List", {}, headers=envd)
        self.assertEqual(r.status, 200, r.body)
        self.assertIn("processes", r.json())
        r = self.call(None, "POST", "/e2b/envd/process.Process/List", {}, headers=dict(
            envd, **{"X-Access-Token": "bad"}))
        self.assertEqual(r.status, 401, r.body)
        self.assertEqual(r.json()["code"], "unauthenticated")

    def test_12_an_api_restart_keeps_records_and_deadlines(self):
        keep = self.create(timeout=300, metadata={"r": "1"})
        short = self.create(timeout=4)["sandboxID"]
        st = self.stack
        st.api.stop(sig=9)
        st.apis.remove(st.api)
        st.api, st.url = st.start_api(st.api_state, self.api_args(), "api.%d" % len(st.apis))
        type(self).url = st.url
        d = self.info(keep["sandboxID"]).json()
        self.assertEqual((d["state"], d["metadata"], d["envdAccessToken"]),
                         ("running", {"r": "1"}, keep["envdAccessToken"]))
        sbxtest.wait_until(lambda: self.info(short).status == 404, 30,
                           "a deadline enforced by the restarted api", interval=0.3)


if __name__ == "__main__":
    unittest.main()
