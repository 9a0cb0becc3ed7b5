#!/usr/bin/python3
# test_broker_ensure.py - sandbox lifecycle through the broker against a real runtime (SPEC §4, §6).

import threading
import time
import unittest

from brokerfix import BrokerTestCase, CANARY, ID_LABEL, MANAGED_LABEL, MiB


class EnsureTest(BrokerTestCase):

    def test_ensure_twice_makes_one_container(self):
        sid = self.new_id("twice")
        st1 = self.ensure_ok(sid)
        self.assertEqual(st1["id"], sid)
        self.assertEqual(st1["state"], "running")
        self.assertIs(st1["egress"], False)
        for key in ("image", "created_at", "last_used_at"):
            self.assertIn(key, st1)
        cont = self.engine.containers_of(sid)
        self.assertEqual(len(cont), 1, cont)
        st2 = self.ensure_ok(sid)
        self.assertEqual(st2["state"], "running")
        cont2 = self.engine.containers_of(sid)
        self.assertEqual([c["Id"] for c in cont2], [cont[0]["Id"]])
        self.assertEqual(cont2[0]["Labels"].get(MANAGED_LABEL), "true")
        self.assertEqual(len(self.engine.volumes_of(sid)), 1)
        # status and the sandbox list agree
        r = self.client.status(sid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["state"], "running")
        r = self.client.sandboxes()
        self.assertEqual(r.status, 200, r)
        body = r.json()
        items = body if isinstance(body, list) else body.get("sandboxes")
        ids = [s["id"] for s in items]
        self.assertIn(sid, ids, body)
        self.assertEqual(ids, sorted(ids))

    def test_concurrent_ensures_of_one_id(self):
        sid = self.new_id("conc")
        replies = [None] * 20
        barrier = threading.Barrier(20)

        def one(i):
            c = self.broker.client(timeout=120)
            barrier.wait()
            replies[i] = c.ensure(sid)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        self.assertEqual([r.status for r in replies], [200] * 20, [r for r in replies if r.status != 200][:3])
        for r in replies:
            self.assertEqual(r.json()["state"], "running", r)
        cont = self.engine.containers_of(sid)
        self.assertEqual(len(cont), 1, [c["Names"] for c in cont])
        self.assertEqual(len(self.engine.volumes_of(sid)), 1)

    def test_egress_flip_replaces_container_and_keeps_work(self):
        sid = self.new_id("egress")
        self.ensure_ok(sid, egress=False)
        old = self.engine.containers_of(sid)
        self.assertEqual(len(old), 1)
        r = self.client.write(sid, "/work/keep.txt", b"kept across replacement\n")
        self.assertIn(r.status, (200, 201, 204), r)
        res = self.client.exec(sid, ["ip", "route"])
        self.assertEqual(res.code, 0, res)
        self.assertNotIn(b"default", bytes(res.out), res)

        st = self.ensure_ok(sid, egress=True)
        self.assertIs(st["egress"], True)
        self.assertEqual(st["state"], "running")
        new = self.engine.containers_of(sid)
        self.assertEqual(len(new), 1, [c["Names"] for c in new])
        self.assertNotEqual(new[0]["Id"], old[0]["Id"], "egress change must replace the container")
        self.assertIsNone(self.engine.inspect(old[0]["Id"]), "old container still exists")
        self.assertEqual(len(self.engine.volumes_of(sid)), 1)
        r = self.client.read(sid, "/work/keep.txt")
        self.assertEqual((r.status, r.body), (200, b"kept across replacement\n"))
        res = self.client.exec(sid, ["ip", "route"])
        self.assertEqual(res.code, 0, res)
        self.assertIn(b"default", bytes(res.out), res)
        r = self.client.status(sid)
        self.assertIs(r.json()["egress"], True)

        # and back: no route out again, same volume, still the file
        self.ensure_ok(sid, egress=False)
        res = self.client.exec(sid, ["ip", "route"])
        self.assertNotIn(b"default", bytes(res.out), res)
        r = self.client.read(sid, "/work/keep.txt")
        self.assertEqual((r.status, r.body), (200, b"kept across replacement\n"))

    def test_stop_start_destroy(self):
        sid = self.new_id("life")
        self.ensure_ok(sid)
        r = self.client.write(sid, "/work/d/state.bin", b"\x00\x01persist")
        self.assertIn(r.status, (200, 201, 204), r)
        cid = self.engine.containers_of(sid)[0]["Id"]

        r = self.client.stop(sid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual((r.json()["state"], r.json()["stop_reason"]), ("stopped", "operator"), r)
        r = self.client.stop(sid)
        self.assertEqual(r.status, 200, r)
        r = self.client.status(sid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["state"], "stopped", r)
        self.assertFalse(self.engine.inspect(cid)["State"]["Running"])
        self.assertEqual(len(self.engine.volumes_of(sid)), 1)

        st = self.ensure_ok(sid)
        self.assertEqual(st["state"], "running")
        r = self.client.read(sid, "/work/d/state.bin")
        self.assertEqual((r.status, r.body), (200, b"\x00\x01persist"))

        r = self.client.destroy(sid)
        self.assertIn(r.status, (200, 204), r)
        r = self.client.status(sid)
        if r.status == 200:
            self.assertEqual(r.json()["state"], "absent", r)
        else:
            self.assertError(r, 404, "not_found")
        self.assertEqual(self.engine.containers_of(sid), [])
        self.assertEqual(self.engine.volumes_of(sid), [], "destroy must remove the volume")
        self.assertIsNone(self.engine.inspect(cid))
        # recreated from scratch: the old file is gone
        self.ensure_ok(sid)
        r = self.client.read(sid, "/work/d/state.bin")
        self.assertEqual(r.status, 404, r)

    def test_unlabelled_container_with_our_name_is_never_touched(self):
        sid = self.new_id("foreign")
        name = "sbx-" + sid
        cid = self.engine.create(name=name, image=self.image, cmd=["sleep", "600"],
                                 labels={"owner": "someone-else"}, host_config={})
        try:
            self.engine.start(cid)
            before = self.engine.inspect(cid)
            r = self.client.ensure(sid)
            self.assertError(r, 409, "conflict")
            after = self.engine.inspect(cid)
            self.assertIsNotNone(after, "the foreign container was removed")
            self.assertEqual(after["Id"], before["Id"])
            self.assertTrue(after["State"]["Running"], "the foreign container was stopped")
            self.assertEqual(after["State"].get("StartedAt"), before["State"].get("StartedAt"))
            self.assertEqual(after["Config"].get("Labels"), before["Config"].get("Labels"))
            self.assertEqual(self.engine.containers_of(sid), [])
            # stop and destroy of that id do not touch it either
            self.client.stop(sid)
            self.assertError(self.client.destroy(sid), 409, "conflict")
            after = self.engine.inspect(cid)
            self.assertIsNotNone(after, "destroy removed a container the broker did not create")
            self.assertTrue(after["State"]["Running"], "stop stopped a foreign container")
            # the broker does not list it
            r = self.client.sandboxes()
            body = r.json()
            items = body if isinstance(body, list) else body.get("sandboxes")
            states = {s["id"]: s.get("state") for s in items}
            self.assertIn(states.get(sid), (None, "absent"), body)
        finally:
            self.engine.remove(cid)


class ParallelEnsureTest(BrokerTestCase):
    """Ensures of different ids run in parallel. Wall time cannot show it
    (Podman serialises container creation itself), so the test looks at the
    broker's side: how many runtime connections it holds open at once."""

    via_relay = True

    def test_ensures_of_different_ids_run_in_parallel(self):
        one = self.new_id("par-one")
        t0 = time.monotonic()
        self.ensure_ok(one)
        single = time.monotonic() - t0
        ids = [self.new_id("par%d" % i) for i in range(5)]
        replies = {}
        barrier = threading.Barrier(5)

        def cold(sid):
            c = self.broker.client(timeout=120)
            barrier.wait()
            replies[sid] = c.ensure(sid)

        threads = [threading.Thread(target=cold, args=(s,)) for s in ids]
        base = self.relay.reset_max()
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        wall = time.monotonic() - t0
        peak = self.relay.max_active - base
        for sid in ids:
            self.assertEqual(replies[sid].status, 200, replies[sid])
            self.assertEqual(len(self.engine.containers_of(sid)), 1)
        self.assertGreaterEqual(
            peak, 3, "5 concurrent cold ensures of different ids never had more than %d "
            "runtime request(s) in flight at once (wall %.2fs, one ensure %.2fs): "
            "ensures are serialised across ids" % (peak, wall, single))


class StrictBodyTest(BrokerTestCase):
    """Refused requests must not reach the runtime at all: the broker talks to
    it through a relay that counts connections."""

    via_relay = True

    def setUp(self):
        # The agent (adr/0025) is started in the background after an ensure;
        # its runtime calls are not the test's: count from a quiet relay.
        deadline = time.monotonic() + 30
        last = self.relay.total
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if self.relay.total == last:
                break
            last = self.relay.total
        self.runtime_calls = self.relay.total

    def assertRuntimeUntouched(self):
        self.assertEqual(self.relay.total, self.runtime_calls,
                         "a refused request reached the runtime")

    @classmethod
    def setUpSandboxes(cls):
        cls.sid = cls.new_id("strict")
        cls.ensure_ok(cls.sid)
        cls.client.exec(cls.sid, ["true"])  # the agent is up: no call left in flight

    def assertNothingCreated(self, sid):
        self.assertRuntimeUntouched()
        self.assertEqual(self.engine.containers_of(sid), [])
        self.assertEqual(self.engine.volumes_of(sid), [])
        self.assertEqual([c for c in self.engine.containers(MANAGED_LABEL + "=true")
                          if c["Labels"].get(ID_LABEL) not in self.ids], [])

    def test_ensure_unknown_fields(self):
        for extra in ({"HostConfig": {"Privileged": True}}, {"Privileged": True},
                      {"Binds": ["/:/host"]}, {"Cmd": ["sh"]}, {"user": "0:0"}):
            sid = self.new_id("uf")
            body = {"egress": False}
            body.update(extra)
            with self.subTest(extra=extra):
                r = self.client.ensure(sid, body=body)
                self.assertError(r, 400, "unknown_field")
                self.assertIn(list(extra)[0], r.json()["error"]["message"])
                self.assertNothingCreated(sid)

    def test_ensure_wrong_types(self):
        for body in ({"egress": "yes"}, {"egress": 1}, {"egress": None},
                     {"egress": False, "image": 7}, {"egress": False, "image": ["x"]}):
            sid = self.new_id("wt")
            with self.subTest(body=body):
                r = self.client.ensure(sid, body=body)
                self.assertError(r, 400, "wrong_type")
                self.assertNothingCreated(sid)

    def test_ensure_not_an_object(self):
        for raw in (b"[]", b"\"egress\"", b"{\"egress\": fal", b"\xff\xfe", b"{\"egress\":false}{}",
                    b"{\"egress\":false,\"egress\":true}", b"", b"{}", b"{\"image\":null}"):
            sid = self.new_id("nj")
            with self.subTest(raw=raw):
                r = self.client.request("PUT", "/v1/sandboxes/" + sid, raw,
                                        headers={"Content-Type": "application/json"})
                self.assertEqual(r.status, 400, r)
                self.assertIn(r.error_code(), ("bad_request", "wrong_type"), r)
                self.assertNothingCreated(sid)

    def test_ensure_image_outside_allowlist(self):
        for image in ("busybox:latest", "docker.io/library/alpine", self.image + "-other",
                      "../" + self.image):
            sid = self.new_id("img")
            with self.subTest(image=image):
                r = self.client.ensure(sid, image=image)
                self.assertError(r, 400, "image_not_allowed")
                self.assertNothingCreated(sid)
        sid = self.new_id("imgok")
        st = self.ensure_ok_image(sid)
        self.assertEqual(st["state"], "running")

    def ensure_ok_image(self, sid):
        r = self.client.ensure(sid, image=self.image)
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_invalid_ids(self):
        for sid in ("UPPER", "-lead", "a_b", "a.b", "a" * 64, "%2e%2e", "sp%20ace"):
            with self.subTest(sid=sid):
                r = self.client.ensure(sid)
                self.assertEqual(r.status, 400, r)
                self.assertEqual(r.error_code(), "invalid_id", r)
                self.assertRuntimeUntouched()
        self.assertNothingCreated("a" * 64)
        # the longest valid id works
        sid = "z" + "0" * 62
        type(self).ids.append(sid)
        self.ensure_ok(sid)

    def test_exec_strict_body(self):
        cases = [({"argv": "touch /work/m1"}, "wrong_type"),
                 ({"argv": ["touch", 1]}, "wrong_type"),
                 ({"argv": ["touch", "/work/m2"], "Privileged": True}, "unknown_field"),
                 ({"argv": ["touch", "/work/m3"], "User": "root"}, "unknown_field"),
                 ({"argv": ["touch", "/work/m4"], "timeout_ms": "5"}, "wrong_type"),
                 ({"argv": ["touch", "/work/m5"], "env": "A=1"}, "wrong_type"),
                 ({"argv": ["touch", "/work/m6"], "stdin": 5}, "wrong_type"),
                 ({"argv": ["touch", "/work/m7"], "timeout_ms": -1}, "wrong_type"),
                 ({"argv": ["touch", "/work/m8"], "output_cap": -5}, "wrong_type")]
        for body, code in cases:
            with self.subTest(body=body):
                r = self.client.request("POST", "/v1/sandboxes/%s/exec" % self.sid, body)
                self.assertError(r, 400, code)
                self.assertRuntimeUntouched()
        res = self.client.exec(self.sid, ["ls", "/work"])
        self.assertEqual(res.code, 0, res)
        names = bytes(res.out).split()
        for m in (b"m1", b"m2", b"m3", b"m4", b"m5", b"m6", b"m7", b"m8"):
            self.assertNotIn(m, names, "a refused exec ran: %r" % res)


if __name__ == "__main__":
    unittest.main(verbosity=2)
