"""test_kube_driver - driver = kubernetes (broker/driver_kube*.c, adr/0072)
against tests/k8s's fake kube-apiserver and test kubelet, whose pods run as
containers on this lane's runtime: the shared conformance suite
(tests/conform/conform.c, target "kube") with one test here per C test, and
the watch cut mid-stream plus a forced 410 through a real sandbox-broker:
no sandbox lost, none duplicated. Touches: a fake cluster of its own (files
under SBX_TEST_OUT), a helper image "localhost/sbx-kube-helper:latest" it imports, the
runtime's containers and volumes labelled with the fake's instance."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

import brokerfix
import kfakefix
import sbxtest

REPO = sbxtest.REPO
BUILD = sbxtest.BUILD
K8S = os.path.join(REPO, "tests", "k8s")
sys.path.insert(0, K8S)
from kf_client import Client  # noqa: E402

SRC = os.path.join(REPO, "tests", "conform", "conform.c")
# "localhost/": Podman resolves a bare name on docker.io
HELPER_IMAGE = "localhost/sbx-kube-helper:latest"   # Podman's import tags :latest whatever it is told
ABSENT_IMAGE = "localhost/sbx-kube-absent:none"   # allowlisted, never pulled


def c_tests():
    with open(SRC) as f:
        return re.findall(r"cmocka_unit_test\((test_\w+)\)", f.read())


def helper_image(engine):
    """Imports an image holding /sbx-helper (static) plus /.sbx and /work
    owned by the sandbox user, as deploy/kubernetes/README.md builds it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d in (".sbx", "work"):
            ti = tarfile.TarInfo(d)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o755
            ti.uid = ti.gid = 1000
            t.addfile(ti)
        t.add(os.path.join(BUILD, "sbx-helper"), arcname="sbx-helper")
    engine.call("POST", "/images/create", body=buf.getvalue(),
                params={"fromSrc": "-", "repo": "localhost/sbx-kube-helper", "tag": "latest"},
                timeout=120)


class Fake:
    """tests/k8s/kfake.py on this lane's runtime (README there)."""

    def __init__(self, engine_host):
        self.dir = tempfile.mkdtemp(prefix="kfake-", dir=sbxtest.out_dir())
        self.log = open(os.path.join(self.dir, "kfake.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(K8S, "kfake.py"), "--dir", self.dir,
             "--engine", engine_host, "--node-grace", "3",
             "--podgc-quarantine", "2"],
            stdout=self.log, stderr=subprocess.STDOUT)
        path = os.path.join(self.dir, "kfake.json")
        sbxtest.wait_until(lambda: os.path.exists(path), 60, "kfake.json")
        with open(path) as f:
            self.info = json.load(f)
        self.ns = self.info["namespace"]
        self.admin = Client(self.info["server"], self.info["ca"],
                            self.info["tokens"]["admin"])
        sbxtest.wait_until(self.schedulable, 60, "a Ready node", interval=0.2)

    def schedulable(self):
        st, nodes = self.admin.request("GET", "/api/v1/nodes")
        for n in (nodes or {}).get("items", []) if st == 200 else []:
            ready = [c for c in n["status"].get("conditions") or []
                     if c["type"] == "Ready"]
            if ready and ready[0]["status"] == "True" and not n["spec"].get("taints"):
                return True
        return False

    def node_ready(self, name):
        st, n = self.admin.request("GET", "/api/v1/nodes/" + name)
        ready = [c for c in (n or {}).get("status", {}).get("conditions") or []
                 if c["type"] == "Ready"] if st == 200 else []
        return bool(ready) and ready[0]["status"] == "True" and not n["spec"].get("taints")

    def knob(self, what, **body):
        return self.admin.post("/kfake/v1/" + what, body)

    def env(self, token="broker"):
        return {
            "SBX_CONFORM_KUBE_SERVER": self.info["server"],
            "SBX_CONFORM_KUBE_CA": self.info["ca"],
            "SBX_CONFORM_KUBE_TOKEN_FILE": self.info["token_files"][token],
            "SBX_CONFORM_KUBE_NAMESPACE": self.ns,
            "SBX_CONFORM_KUBE_HELPER_IMAGE": HELPER_IMAGE,
        }

    def logs(self):
        with open(os.path.join(self.dir, "kfake.log"), errors="replace") as f:
            return f.read()[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        e = sbxtest.Engine(os.environ["SBX_RUNTIME_HOST"])
        label = "io.kfake.instance=" + self.info.get("instance", "")
        for c in e.containers(label):
            e.remove(c["Id"], ok=None)
        for v in e.volumes(label):
            e.remove_volume(v["Name"])


class External(kfakefix.External):
    """SBX_KUBE_EXTERNAL (kfakefix): a real API server, the test kubelet its node."""
    env = Fake.env

    def schedulable(self):
        return self.node_schedulable(self.info["nodes"][0])


FAKE = None


def setUpModule():
    global FAKE
    host = os.environ["SBX_RUNTIME_HOST"]
    helper_image(sbxtest.Engine(host))
    ext = os.environ.get("SBX_KUBE_EXTERNAL")
    FAKE = External(ext, host) if ext else Fake(host)


def tearDownModule():
    if FAKE is not None:
        FAKE.stop()


class KubeDriver(unittest.TestCase):
    tap = None
    fake = None

    @classmethod
    def setUpClass(cls):
        cls.fake = FAKE
        env = dict(os.environ)
        env.update(cls.fake.env())
        env.update({"SBX_CONFORM_TARGETS": "kube", "CMOCKA_MESSAGE_OUTPUT": "TAP"})
        p = subprocess.run([os.path.join(BUILD, "tests", "test_conform")], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
        cls.tap = p.stdout.decode("utf-8", "replace")
        print(cls.tap)

    def check(self, name):
        if re.search(r"^ok \d+ - %s$" % name, self.tap, re.M):
            return
        m = re.search(r"^not ok \d+ - %s$((?:\n#.*)*)" % name, self.tap, re.M)
        self.fail("%s: %s\n%s" % (name, m.group(1).strip() if m else
                                  "not reported:\n" + self.tap[-2000:],
                                  self.fake.logs()))


class KubeBroker(brokerfix.Broker):
    """sandbox-broker with driver = kubernetes on the fake."""

    def __init__(self, fake, image):
        super().__init__("/nonexistent.sock", image, name="kube")
        self.fake = fake

    def argv(self):
        i = self.fake.info
        return super().argv() + [
            "--driver", "kubernetes", "--kube-server", i["server"],
            "--kube-ca-file", i["ca"], "--kube-token-file", i["token_files"]["broker"],
            "--kube-namespace", self.fake.ns, "--kube-helper-image", HELPER_IMAGE,
            "--kube-force-after", "5s", "--images", ABSENT_IMAGE]


def listed(log):
    """The driver's "kubernetes pods listed" lines, as dicts."""
    out = []
    for line in log.splitlines():
        if "kubernetes pods listed" in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


class KubeWatch(unittest.TestCase):
    """The watch cut mid-stream (TCP reset) while a pod goes behind the
    driver's back and the history is compacted: the re-watch from the last
    resourceVersion gets 410 Expired, the driver relists, and its cache
    holds every sandbox exactly once and not the one that went; the new
    watch then carries an ensure to Running."""

    def test_cut_watch_and_410_lose_nothing(self):
        if os.environ.get("SBX_KUBE_EXTERNAL"):
            self.skipTest("cuts and compaction are fake-only knobs")
        fake = FAKE
        broker = KubeBroker(fake, sbxtest.test_image())
        broker.start()
        try:
            c = broker.client(timeout=120)
            ids = ["kw-a-%d" % os.getpid(), "kw-b-%d" % os.getpid(), "kw-c-%d" % os.getpid()]
            for sid in ids:
                r = c.ensure(sid)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(c.exec(sid, ["echo", sid]).code, 0)
            gone = ids[1]
            # bookmarks arrive once a second on the driver's watch
            time.sleep(2.5)
            self.assertEqual(fake.knob("watches/close", mode="reset").get("closed", 0) >= 1, True)
            fake.admin.delete("/api/v1/namespaces/%s/pods/sbx-%s" % (fake.ns, gone),
                              {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
            fake.knob("compact")
            sbxtest.wait_until(lambda: any(int(x.get("after_410", "0")) >= 1
                                           for x in listed(broker.log_text())),
                               60, "a relist after 410", interval=0.2)
            after = [x for x in listed(broker.log_text()) if int(x["after_410"]) >= 1][0]
            got = after["ids"].split(",") if after["ids"] else []
            self.assertEqual(sorted(got), sorted([ids[0], ids[2]]), after)
            self.assertGreaterEqual(int(after["bookmarks"]), 1, after)
            for sid in (ids[0], ids[2]):
                self.assertEqual(c.exec(sid, ["echo", "after"]).code, 0)
            try:
                r = c.exec(gone, ["echo", "x"])
            except AssertionError as e:   # refused before the stream
                self.assertIn("not_", str(e))
            else:
                self.assertIn("error", r.types(), r)
            # the new watch works: an ensure waits on it for Running
            new = "kw-d-%d" % os.getpid()
            r = c.ensure(new)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(c.exec(new, ["echo", new]).code, 0)
            # an image the node cannot get: the ensure fails at once with
            # the kubelet's reason, not after kube_start_timeout
            bad = "kw-e-%d" % os.getpid()
            r = c.ensure(bad, image=ABSENT_IMAGE)
            self.assertEqual(r.status, 502, r)
            self.assertIn("ErrImagePull", r.json()["error"]["message"], r)
            for sid in ids + [new, bad]:
                c.destroy(sid)
        finally:
            broker.stop()
            print(broker.log_text()[-3000:])
            broker.cleanup()


class KubeYNodeLoss(unittest.TestCase):
    """Issue 27 item 2: two sandboxes on a node that is then lost (its
    kubelet killed: the node goes Ready=Unknown, the node-lifecycle
    controller marks its pods Ready=False) are reported stopped with
    stop_reason "lost" and an exec is refused with not_running. The first
    is ensured at once: the old pod, still Running on the lost node, is
    deleted with grace 0 and a new one runs on the spare node with the same
    PVC. The second waits until the lost node is deleted and the pod
    garbage collector takes its pod: still "lost" (gone without the
    broker deleting it), and its ensure brings it back the same way. The
    files in /work are still there. The node is restored at the end."""

    def test_node_lost_then_ensure_brings_it_back_with_work(self):
        fake = FAKE
        spare = "kfake-spare-%d" % os.getpid()
        broker = KubeBroker(fake, sbxtest.test_image())
        broker.start()
        node = None
        pod_url = "/api/v1/namespaces/%s/pods/sbx-" % fake.ns
        try:
            c = broker.client(timeout=120)
            sids = ["kn-a-%d" % os.getpid(), "kn-b-%d" % os.getpid()]
            pods = {}
            for sid in sids:   # both on the one node there is yet
                self.assertEqual(c.ensure(sid).status, 200)
                self.assertEqual(c.sh(sid, "echo kept-%s > /work/f" % sid).code, 0)
                pods[sid] = fake.admin.get(pod_url + sid)
            node = pods[sids[0]]["spec"]["nodeName"]
            self.assertEqual(pods[sids[1]]["spec"]["nodeName"], node)
            fake.knob("nodes", name=spare)
            sbxtest.wait_until(lambda: fake.node_ready(spare), 60, spare + " Ready", interval=0.2)
            fake.knob("nodes/%s/lose" % node)

            def lost(sid):
                st = c.status(sid).json()
                return st["state"] == "stopped" and st["stop_reason"] == "lost"
            for sid in sids:
                sbxtest.wait_until(lambda: lost(sid), 60, "status lost", interval=0.2)
            # the pod is still there, Running on the lost node, as a real
            # cluster shows it for 300 s (the unreachable toleration)
            again = fake.admin.get(pod_url + sids[0])
            self.assertEqual(again["status"]["phase"], "Running")
            self.assertEqual(again["metadata"]["uid"], pods[sids[0]]["metadata"]["uid"])
            got = sorted((x["id"], x["state"], x["stop_reason"]) for x in c.sandboxes().json() if x["id"] in sids)
            self.assertEqual(got, [(sid, "stopped", "lost") for sid in sids])
            with self.assertRaises(AssertionError) as cm:
                c.exec(sids[0], ["true"])
            self.assertIn("not_running", str(cm.exception))
            self.assertIn("lost", str(cm.exception))

            # the first: ensured while its old pod is there
            self.assertEqual(c.ensure(sids[0]).json()["state"], "running")
            self.assertIn("replacing a sandbox's pod on a lost node", broker.log_text())
            # the second: the node deleted, the pod garbage collector takes its pod
            fake.admin.request("DELETE", "/api/v1/nodes/" + node)
            sbxtest.wait_until(lambda: fake.admin.request("GET", pod_url + sids[1])[0] == 404,
                               60, "the pod of a deleted node collected", interval=0.2)
            self.assertTrue(lost(sids[1]), c.status(sids[1]).json())
            self.assertEqual(c.ensure(sids[1]).json()["state"], "running")
            for sid in sids:
                now = fake.admin.get(pod_url + sid)
                self.assertNotEqual(now["metadata"]["uid"], pods[sid]["metadata"]["uid"])
                self.assertEqual(now["spec"]["nodeName"], spare)
                res = c.exec(sid, ["cat", "/work/f"])
                self.assertEqual((res.code, bytes(res.out)), (0, b"kept-%s\n" % sid.encode()))
                st = c.status(sid).json()
                self.assertEqual((st["state"], st["stop_reason"]), ("running", None))
                self.assertEqual(c.destroy(sid).status, 200)
        finally:
            broker.stop()
            broker.cleanup()
            if node is not None:
                fake.knob("nodes/%s/restore" % node)
                sbxtest.wait_until(lambda: fake.node_ready(node), 60, node + " Ready again", interval=0.2)


class KubeZLostNode(unittest.TestCase):
    """Issue 27 lesson 2: a node that died never finishes a graceful delete
    and the PVC waits on pvc-protection; destroy deletes the pod again with
    grace 0 after kube_force_after and both go. Runs last (its node stays
    lost: "KubeZLostNode" sorts after the other classes)."""

    def test_destroy_on_a_lost_node_forces(self):
        fake = FAKE
        broker = KubeBroker(fake, sbxtest.test_image())
        broker.start()
        try:
            c = broker.client(timeout=120)
            sid = "kl-%d" % os.getpid()
            self.assertEqual(c.ensure(sid).status, 200)
            self.assertEqual(c.exec(sid, ["echo", "x"]).code, 0)
            node = fake.admin.get("/api/v1/namespaces/%s/pods/sbx-%s" % (fake.ns, sid))["spec"]["nodeName"]
            fake.knob("nodes/%s/lose" % node)
            sbxtest.wait_until(lambda: not fake.node_ready(node), 60, "the node NotReady", interval=0.2)
            r = c.destroy(sid, timeout=120)
            self.assertEqual(r.status, 200, r)
            self.assertIn("deleting it with grace 0", broker.log_text())
            for path in ("pods/sbx-", "persistentvolumeclaims/work-"):
                url = "/api/v1/namespaces/%s/%s%s" % (fake.ns, path, sid)
                sbxtest.wait_until(lambda: fake.admin.request("GET", url)[0] == 404,
                                   30, url + " gone", interval=0.2)
        finally:
            broker.stop()
            broker.cleanup()


class KubeUnschedulable(unittest.TestCase):
    """A sandbox asking for more CPUs than any node has: its pod stays
    Pending (the scheduler fits requests, real and fake) and the ensure fails
    after kube_start_timeout with the scheduler's own words."""

    def test_unschedulable_names_why(self):
        fake = FAKE

        class Big(KubeBroker):
            def argv(self):
                return super().argv() + ["--cpus", "100", "--cpus-max", "100", "--kube-start-timeout", "4s"]
        broker = Big(fake, sbxtest.test_image())
        broker.start()
        # The start line names the kube-apiserver, not an Engine socket
        # the driver never uses (a newcomer read "runtime" there).
        up = [json.loads(ln) for ln in broker.log_text().splitlines()
              if '"msg":"listening"' in ln]
        self.assertEqual(len(up), 1, broker.log_text()[-2000:])
        self.assertEqual((up[0].get("driver"), up[0].get("kube_server"),
                          up[0].get("kube_namespace")),
                         ("kubernetes", fake.info["server"], fake.ns), up[0])
        self.assertNotIn("runtime", up[0])
        sid = "ku-%d" % os.getpid()
        c = broker.client(timeout=60)
        try:
            r = c.ensure(sid)
            self.assertNotEqual(r.status, 200, r)
            msg = r.json()["error"]["message"]
            self.assertIn("was not scheduled within kube_start_timeout", msg)
            self.assertIn("Insufficient cpu", msg)
        finally:
            c.destroy(sid)  # a Pending pod has no node: it goes at once
            broker.stop()
            broker.cleanup()


class KubeSweep(unittest.TestCase):
    """The broker's start sweeps a PVC of ours left Terminating on a
    finalizer with no pod (issue 27 lesson 2), and leaves alone one that is
    not ours; --check names the missing RBAC permission, one sentence."""

    def pvc(self, name, labels):
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "labels": labels,
                             "finalizers": ["example.com/hold"]},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}

    def test_start_sweeps_stuck_pvcs_and_check_names_rbac(self):
        fake = FAKE
        base = "/api/v1/namespaces/%s/persistentvolumeclaims" % fake.ns
        sid = "ks-%d" % os.getpid()
        ours, theirs = "work-" + sid, "other-%d" % os.getpid()
        fake.admin.post(base, self.pvc(ours, {"sbx.dev/id": sid, "sbx.dev/managed": "true"}))
        fake.admin.post(base, self.pvc(theirs, {"app": "x"}))
        for n in (ours, theirs):
            fake.admin.request("DELETE", base + "/" + n)
            st, obj = fake.admin.request("GET", base + "/" + n)
            self.assertEqual(st, 200)
            self.assertIn("deletionTimestamp", obj["metadata"])
        broker = KubeBroker(fake, sbxtest.test_image())
        broker.start()
        try:
            sbxtest.wait_until(lambda: fake.admin.request("GET", base + "/" + ours)[0] == 404,
                               60, "the stuck PVC swept", interval=0.2)
            self.assertEqual(fake.admin.request("GET", base + "/" + theirs)[0], 200)
        finally:
            broker.stop()
            broker.cleanup()
            fake.admin.patch(base + "/" + theirs, {"metadata": {"finalizers": None}})
        # --check with the narrow token (no create on pods/exec) and the full one
        for token, problems in (("narrow", 1), ("broker", 0)):
            b = KubeBroker(fake, sbxtest.test_image())
            argv = [a if a != fake.info["token_files"]["broker"] else fake.info["token_files"][token]
                    for a in b.argv()] + ["--check"]
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            out = p.stdout.decode()
            b.cleanup()
            self.assertIn("%d problem" % problems, out, out)
            if problems:
                self.assertIn("the broker cannot create pods/exec in namespace %s" % fake.ns, out)
                self.assertEqual(p.returncode, 69, out)
            else:
                self.assertEqual(p.returncode, 0, out)
            self.assertNotIn(fake.info["tokens"][token], out)


def _make(name):
    return lambda self: self.check(name)


for _n in c_tests():
    setattr(KubeDriver, "test_conform_" + _n[5:], _make(_n))

if __name__ == "__main__":
    unittest.main()
