"""test_kfake - the fake kube-apiserver and test kubelet of tests/k8s behave as issue 27's lessons say a real v1.24 does.

The fake is what the kubernetes driver is tested against in `make check`, so it
has to be evidence itself: this suite drives it with a plain Python client
(tests/k8s/kf_client.py) over TLS and WebSocket, the kubelet running real
containers on the fixture's dockerd. Lessons: 1 ServiceAccount 403; 2 graceful
delete and pvc-protection wait for a kubelet; 3 the not-ready taint of a new
node; 4 exec needs get+create on pods/exec; 5 v4.channel framing and the
NonZeroExitCode status; 6 exec dialled at the node's InternalIP:kubeletEndpoint;
8 NetworkPolicy stored; plus 410 Expired and BOOKMARKs on watches, a watch
killed mid-stream, a lost node and its kubelet's return (containers adopted).

Runs once, on the docker lane (SBX_ONCE = "docker"); the kubelet code is the
same on Podman and the driver's suites run it in both lanes.
"""

import os
import queue
import threading
import time
import unittest

import kfakefix
import sbxtest
from kfakefix import KubeError

SBX_ONCE = "docker"
EXTERNAL = bool(os.environ.get("SBX_KUBE_EXTERNAL"))  # kfakefix: a real API server instead

NS = "sbx"
IMAGE = sbxtest.test_image()


def pod_spec(name, pvc=None, init=False, toleration=None, cmd=("sleep", "3600")):
    spec = {"serviceAccountName": "sbx-sandbox", "automountServiceAccountToken": False,
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "sandbox", "image": IMAGE, "command": list(cmd), "workingDir": "/work",
                            "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                                "capabilities": {"drop": ["ALL"]}},
                            "resources": {"limits": {"memory": "128Mi", "cpu": "500m"}},
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
            "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}]}
    if pvc:
        spec["volumes"].append({"name": "work", "persistentVolumeClaim": {"claimName": pvc}})
        spec["containers"][0]["volumeMounts"].append({"name": "work", "mountPath": "/work"})
    if init:
        spec["volumes"].append({"name": "sbx", "emptyDir": {}})
        spec["initContainers"] = [{"name": "install", "image": IMAGE,
                                   "command": ["sh", "-c", "echo installed > /sbx/mark && echo init-was-here > /work/init"],
                                   "volumeMounts": [{"name": "sbx", "mountPath": "/sbx"},
                                                    {"name": "work", "mountPath": "/work"}]}]
        spec["containers"][0]["volumeMounts"].append({"name": "sbx", "mountPath": "/.sbx", "readOnly": True})
    if toleration is not None:
        spec["tolerations"] = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                "effect": "NoExecute", "tolerationSeconds": toleration}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"sbx.dev/id": name, "sbx.dev/managed": "true"}}, "spec": spec}


class KFakeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.fake = kfakefix.Fake(sbxtest.env("SBX_DOCKER_HOST"), namespaces=(NS, "bare"),
                                 extra=("--podgc-quarantine", "2"))
        cls.api = cls.fake.client("broker")
        cls.api.post("/api/v1/namespaces/%s/serviceaccounts" % NS,
                     {"metadata": {"name": "sbx-sandbox"}, "automountServiceAccountToken": False})

    @classmethod
    def tearDownClass(cls):
        left = cls.fake.stop()
        if left:
            raise AssertionError("the fake left on the runtime: %s" % left)

    # -- helpers -----------------------------------------------------------
    def path(self, res, name=None, ns=NS):
        base = "/apis/networking.k8s.io/v1" if res == "networkpolicies" else "/api/v1"
        return "%s/namespaces/%s/%s%s" % (base, ns, res, "/" + name if name else "")

    def get(self, res, name):
        st, obj = self.fake.admin.request("GET", self.path(res, name))
        return obj if st == 200 else None

    def wait(self, pred, what, timeout=60):
        self.fake.wait(pred, timeout, what)

    def run_pod(self, name, pvc=None, **kw):
        if pvc:
            self.api.post(self.path("persistentvolumeclaims"), {
                "metadata": {"name": pvc}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                   "resources": {"requests": {"storage": "1Gi"}}}})
        self.api.post(self.path("pods"), pod_spec(name, pvc, **kw))
        self.wait(lambda: (self.get("pods", name) or {}).get("status", {}).get("phase") == "Running",
                  "pod %s Running" % name)
        return self.get("pods", name)

    def watcher(self, client, path, params):
        """Events of a watch, read by a thread into a queue (None at the end)."""
        q = queue.Queue()

        def run():
            try:
                for ev in client.watch(path, params):
                    q.put(ev)
            except Exception as e:  # the stream was cut: that is an event here
                q.put(("CUT", repr(e)))
            q.put(None)
        threading.Thread(target=run, daemon=True).start()
        return q

    def next_event(self, q, want, timeout=30):
        """Skip events until one WANT(type, obj) accepts; return it."""
        while True:
            ev = q.get(timeout=timeout)
            if ev is None:
                self.fail("watch ended before the event wanted")
            if want(*ev):
                return ev

    # -- lessons 1 and 4 ------------------------------------------------------
    def test_serviceaccount_and_rbac(self):
        bare = self.path("pods", ns="bare")
        st, body = self.api.request("POST", bare, pod_spec("p-nosa"))
        self.assertEqual(st, 403)
        self.assertEqual(body["message"], 'pods "p-nosa" is forbidden: error looking up service account '
                                          'bare/sbx-sandbox: serviceaccount "sbx-sandbox" not found')
        if not EXTERNAL:  # a real cluster's serviceaccount controller makes "default" in every namespace
            spec = pod_spec("p-nosa")
            del spec["spec"]["serviceAccountName"]
            st, body = self.api.request("POST", bare, spec)
            self.assertEqual((st, body["reason"]), (403, "Forbidden"))
            self.assertIn('serviceaccount "default" not found', body["message"])

        # without a token: 401; a token outside its Role: 403 with the real sentence
        anon = self.fake.client("not-a-token")
        self.assertEqual(anon.request("GET", self.path("pods"))[0], 401)
        st, body = self.api.request("GET", "/api/v1/nodes")
        self.assertEqual(st, 403)
        self.assertIn('cannot list resource "nodes" in API group "" at the cluster scope', body["message"])

        # lesson 4 as v1.24 really does it (docs/kube-real-run.md): a WebSocket
        # exec is a GET and is authorized as `get` on pods/exec; `create` is what
        # a POST (SPDY) needs. Later servers check create on the upgrade too.
        self.run_pod("p-rbac")
        narrow = self.fake.client("narrow")
        code, out, _, _ = narrow.exec(NS, "p-rbac", ["echo", "get-is-enough"])
        self.assertEqual((code, out), (0, b"get-is-enough\n"))
        st, body = narrow.request("POST", self.path("pods", "p-rbac") + "/exec?command=true&stdout=true")
        self.assertEqual(st, 403)
        self.assertIn('cannot create resource "pods/exec" in API group "" in the namespace "sbx"', body["message"])
        tok = self.fake.knob("tokens", name="createonly", rules=[
            {"apiGroups": [""], "resources": ["pods", "pods/exec"], "verbs": ["create"]}])["token"]
        with self.assertRaises(KubeError) as cm:
            self.fake.client(tok).channel(NS, "p-rbac", "exec", {"command": ["true"], "stdout": "true"})
        self.assertIn('cannot get resource "pods/exec"', str(cm.exception))
        code, out, _, _ = self.api.exec(NS, "p-rbac", ["echo", "ok"])
        self.assertEqual((code, out), (0, b"ok\n"))

        # what `sandbox-broker --check` asks
        review = {"spec": {"resourceAttributes": {"namespace": NS, "verb": "create", "resource": "pods",
                                                  "subresource": "exec"}}}
        self.assertFalse(narrow.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)["status"]["allowed"])
        self.assertTrue(self.api.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)["status"]["allowed"])

    def test_scheduler_fits_requests(self):
        """A limit without a request requests it (API defaulting) and the
        scheduler fits pods on requests: more CPU than the node has stays
        Pending, worded as the real v1.24 scheduler does."""
        spec = pod_spec("p-huge")
        spec["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "100", "memory": "128Mi"}}
        self.api.post(self.path("pods"), spec)
        pod = self.get("pods", "p-huge")
        self.assertEqual(pod["spec"]["containers"][0]["resources"]["requests"], {"cpu": "100", "memory": "128Mi"})
        self.wait(lambda: any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                              and " Insufficient cpu." in c.get("message", "")
                              for c in self.get("pods", "p-huge")["status"].get("conditions") or []),
                  "p-huge Unschedulable: Insufficient cpu")
        self.assertNotIn("nodeName", self.get("pods", "p-huge")["spec"])
        self.api.delete(self.path("pods", "p-huge"))

    # -- lessons 5 and 6 ---------------------------------------------------------
    def test_exec_over_v4_channel(self):
        pod = self.run_pod("p-exec", pvc="work-exec", init=True)
        node = self.fake.admin.get("/api/v1/nodes/" + pod["spec"]["nodeName"])
        self.assertIn({"type": "InternalIP", "address": "127.0.0.1"}, node["status"]["addresses"])
        self.assertGreater(node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], 0)
        self.assertEqual(pod["spec"]["tolerations"][0]["tolerationSeconds"], 300)

        code, out, err, status = self.api.exec(NS, "p-exec", ["sh", "-c", "id -u; echo to-err >&2; exit 3"])
        self.assertEqual((code, out, err), (3, b"1000\n", b"to-err\n"))
        self.assertEqual(status["status"], "Failure")
        self.assertEqual(status["reason"], "NonZeroExitCode")
        self.assertEqual(status["details"], {"causes": [{"reason": "ExitCode", "message": "3"}]})
        code, out, _, status = self.api.exec(NS, "p-exec", ["head", "-c", "11"], stdin=b"hello world")
        self.assertEqual((code, out, status), (0, b"hello world", {"metadata": {}, "status": "Success"}))

        # the init container ran first, as uid 1000, on the PVC and an emptyDir
        code, out, _, _ = self.api.exec(NS, "p-exec", ["cat", "/work/init", "/.sbx/mark"])
        self.assertEqual((code, out), (0, b"init-was-here\ninstalled\n"))
        code, _, err, _ = self.api.exec(NS, "p-exec", ["touch", "/root-is-read-only"])
        self.assertNotEqual(code, 0, err)
        code, out, _, _ = self.api.exec(NS, "p-exec", ["grep", "-E", "^(CapEff|NoNewPrivs|Seccomp):", "/proc/self/status"])
        self.assertEqual(out.split(), [b"CapEff:", b"0000000000000000", b"NoNewPrivs:", b"1", b"Seccomp:", b"2"])
        cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[1]
        hc = sbxtest.Engine(self.fake.engine_host).inspect(cid)["HostConfig"]
        self.assertEqual((hc["Memory"], hc["NanoCpus"], hc["ReadonlyRootfs"]), (128 << 20, 500000000, True))

        # frames as they are: one stdout message, stream byte 1; stream 3 last
        ch = self.api.channel(NS, "p-exec", "exec", {"command": ["echo", "x"], "stdout": "true"})
        self.assertEqual(ch.protocol, "v4.channel.k8s.io")
        msgs = []
        while True:
            m = ch.recv(30)
            if m is None:
                break
            msgs.append(m)
        ch.close()
        self.assertEqual(msgs[:2], [(1, b""), (1, b"x\n")])  # the real server's empty hello first
        self.assertEqual(msgs[-1][0], 3)

        # errors as the real server words them
        with self.assertRaises(KubeError) as cm:
            self.api.channel(NS, "p-exec", "exec", {"command": ["true"], "container": "nope"})
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(KubeError) as cm:
            self.api.channel(NS, "p-exec", "exec", {"command": ["true"]}, protocols=("channel.k8s.io",))
        self.assertEqual(cm.exception.status, 400)

    def test_exit_and_attach(self):
        self.api.post(self.path("pods"), pod_spec("p-exit", cmd=("sh", "-c", "exit 7")))
        self.wait(lambda: (self.get("pods", "p-exit") or {}).get("status", {}).get("phase") == "Failed", "p-exit Failed")
        st = self.get("pods", "p-exit")["status"]["containerStatuses"][0]["state"]
        self.assertEqual(st["terminated"]["exitCode"], 7)
        # the real server has no phase check ("cannot exec into a container in a
        # completed pod" is kubectl's): it dials the kubelet, whose refusal comes back
        with self.assertRaises(KubeError) as cm:
            self.api.channel(NS, "p-exit", "exec", {"command": ["true"], "stdout": "true"})
        self.assertEqual(cm.exception.status, 500, cm.exception)
        self.assertNotIn("completed pod", str(cm.exception))
        self.api.delete(self.path("pods", "p-exit"))  # a finished pod goes at once, no grace
        self.assertIsNone(self.get("pods", "p-exit"))

        spec = pod_spec("p-attach", cmd=("cat",))
        spec["spec"]["containers"][0]["stdin"] = True
        self.api.post(self.path("pods"), spec)
        self.wait(lambda: (self.get("pods", "p-attach") or {}).get("status", {}).get("phase") == "Running",
                  "pod p-attach Running")
        for word in (b"one\n", b"two\n"):  # a second attach finds the same process
            ch = self.api.channel(NS, "p-attach", "attach", {"stdin": "true", "stdout": "true", "stderr": "true"})
            self.assertEqual(ch.recv(30), (1, b""))
            ch.send(0, word)
            self.assertEqual(ch.recv(30), (1, word))
            ch.close()
        narrow = self.fake.client(self.fake.knob("tokens", name="noattach", rules=[
            {"apiGroups": [""], "resources": ["pods/attach"], "verbs": ["create"]}])["token"])
        with self.assertRaises(KubeError) as cm:
            narrow.channel(NS, "p-attach", "attach", {"stdin": "true", "stdout": "true"})
        self.assertIn('cannot get resource "pods/attach"', str(cm.exception))

    # -- 410, bookmarks, a watch cut mid-stream; lesson 8 -------------------------
    def test_watch_410_bookmarks_and_cut(self):
        nps = self.path("networkpolicies")
        rv0 = self.api.get(nps)["metadata"]["resourceVersion"]
        q = self.watcher(self.api, nps, {"resourceVersion": rv0, "allowWatchBookmarks": "true"})
        policy = {"metadata": {"name": "np-a", "labels": {"sbx.dev/managed": "true"}},
                  "spec": {"podSelector": {"matchLabels": {"sbx.dev/id": "a"}}, "policyTypes": ["Ingress", "Egress"],
                           "ingress": [], "egress": [{"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}]}}
        self.api.post(nps, policy)
        _, added = self.next_event(q, lambda t, o: t == "ADDED")
        self.assertEqual(added["metadata"]["name"], "np-a")
        self.fake.knob("bookmark")
        _, bm = self.next_event(q, lambda t, o: t == "BOOKMARK")
        self.assertEqual(bm["kind"], "NetworkPolicy")
        self.assertGreaterEqual(int(bm["metadata"]["resourceVersion"]), int(added["metadata"]["resourceVersion"]))
        last = added["metadata"]["resourceVersion"]

        # cut every watch mid-stream (TCP reset); a change made meanwhile is not lost
        self.assertGreaterEqual(self.fake.knob("watches/close", mode="reset")["closed"], 1)
        self.next_event(q, lambda t, o: t == "CUT")
        self.api.post(nps, dict(policy, metadata={"name": "np-b", "labels": {"sbx.dev/managed": "true"}}))
        q = self.watcher(self.api, nps, {"resourceVersion": last, "timeoutSeconds": "2"})
        seen = []
        while True:
            ev = q.get(timeout=30)
            if ev is None:
                break
            seen.append((ev[0], ev[1]["metadata"]["name"]))
        self.assertEqual(seen, [("ADDED", "np-b")])

        # lesson 8: stored as sent, listed by label, patched; nothing enforces it here
        got = self.api.get(self.path("networkpolicies", "np-a"))
        self.assertEqual(got["spec"], policy["spec"])
        self.assertEqual(len(self.api.get(nps, params={"labelSelector": "sbx.dev/managed=true"})["items"]), 2)
        self.api.patch(self.path("networkpolicies", "np-a"), {"spec": {"egress": []}})
        self.assertEqual(self.api.get(self.path("networkpolicies", "np-a"))["spec"]["egress"], [])

        # history compacted: a watch from before answers 410 Expired; a relist recovers
        self.fake.knob("compact")
        q = self.watcher(self.api, nps, {"resourceVersion": last})
        etype, status = q.get(timeout=30)
        self.assertEqual((etype, status["code"], status["reason"]), ("ERROR", 410, "Expired"))
        self.assertIsNone(q.get(timeout=30))
        st, body = self.api.request("GET", nps, params={"resourceVersion": last, "resourceVersionMatch": "Exact"})
        self.assertEqual((st, body["reason"]), (410, "Expired"))
        self.assertEqual(sorted(o["metadata"]["name"] for o in self.api.get(nps)["items"]), ["np-a", "np-b"])

    def test_sweep_orphans_with_finalizers(self):
        """Lesson 2's way out: force the pod, or patch the PVC's finalizer away."""
        # a claim without accessModes is refused, as the real v1.24 does
        st, body = self.api.request("POST", self.path("persistentvolumeclaims"), {
            "metadata": {"name": "work-bad"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}})
        self.assertEqual((st, body["reason"]), (422, "Invalid"))
        self.assertEqual(body["message"], 'PersistentVolumeClaim "work-bad" is invalid: '
                                          'spec.accessModes: Required value: at least 1 access mode is required')
        for pvc in ("work-orph1", "work-orph2"):
            self.api.post(self.path("persistentvolumeclaims"), {"metadata": {"name": pvc, "labels": {"sbx.dev/managed": "true"}},
                                                                "spec": {"accessModes": ["ReadWriteOnce"],
                                                                         "resources": {"requests": {"storage": "1Gi"}}}})
        spec = pod_spec("p-orphan", pvc="work-orph1")
        spec["spec"]["volumes"].append({"name": "w2", "persistentVolumeClaim": {"claimName": "work-orph2"}})
        spec["spec"]["nodeName"] = "kfake-gone"  # bound to a node no kubelet serves
        self.api.post(self.path("pods"), spec)
        self.assertIn("deletionTimestamp", self.api.delete(self.path("pods", "p-orphan"))["metadata"])
        # exec on a pod whose node does not exist: the real server's odd wording
        with self.assertRaises(KubeError) as cm:
            self.api.channel(NS, "p-orphan", "exec", {"command": ["true"], "stdout": "true"})
        self.assertEqual((cm.exception.status, cm.exception.body["message"]), (404, 'pods "kfake-gone" not found'))
        sel = {"labelSelector": "sbx.dev/managed=true", "fieldSelector": "metadata.name!=work-keep"}
        for pvc in self.api.get(self.path("persistentvolumeclaims"), params=sel)["items"]:
            if pvc["metadata"]["name"].startswith("work-orph"):
                self.api.delete(self.path("persistentvolumeclaims", pvc["metadata"]["name"]))
        self.assertEqual(self.get("persistentvolumeclaims", "work-orph1")["metadata"]["finalizers"],
                         ["kubernetes.io/pvc-protection"])
        # the finalizer patched away: gone at once, pod or not
        gone = self.api.patch(self.path("persistentvolumeclaims", "work-orph2"), {"metadata": {"finalizers": None}})
        self.assertEqual(gone["metadata"]["name"], "work-orph2")
        self.assertIsNone(self.get("persistentvolumeclaims", "work-orph2"))
        # the pod forced: the pvc-protection controller lets the other go
        self.api.delete(self.path("pods", "p-orphan"), {"gracePeriodSeconds": 0})
        self.wait(lambda: self.get("persistentvolumeclaims", "work-orph1") is None, "work-orph1 released")

    # -- lessons 2 and 3, a lost node ----------------------------------------------
    def test_node_taint_loss_graceful_delete_and_pvc_protection(self):
        node = self.fake.info["nodes"][0]
        # lesson 3: the node was born with the not-ready taint; the controller took it off
        # (replayed from the fake's whole history; a real server's watch cache keeps a
        # window only: from resourceVersion 1 it answers 410)
        if not EXTERNAL:
            q = self.watcher(self.fake.admin, "/api/v1/nodes", {"resourceVersion": "1", "timeoutSeconds": "1"})
            evs = []
            while True:
                ev = q.get(timeout=30)
                if ev is None:
                    break
                evs.append(ev)
            self.assertEqual(evs[0][0], "ADDED")
            self.assertEqual(evs[0][1]["spec"]["taints"], [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
            self.assertTrue(any(not o["spec"].get("taints") for _, o in evs[1:]))

        keep = self.run_pod("p-keep", pvc="work-keep")
        self.api.exec(NS, "p-keep", ["sh", "-c", "echo kept > /work/f"])
        self.run_pod("p-del", pvc="work-del")
        self.run_pod("p-evict", toleration=1)

        # lose the only node: NotReady, pods not Ready, exec cannot dial. Every node
        # lost is a "full disruption" to the real node-lifecycle controller: the
        # unreachable NoSchedule taint only, no NoExecute, so no eviction
        self.fake.knob("nodes/%s/lose" % node)
        self.wait(lambda: any(t["key"] == "node.kubernetes.io/unreachable" and t["effect"] == "NoSchedule"
                              for t in self.fake.admin.get("/api/v1/nodes/" + node)["spec"].get("taints") or []),
                  "unreachable taint")
        ready = [c for c in self.fake.admin.get("/api/v1/nodes/" + node)["status"]["conditions"] if c["type"] == "Ready"]
        self.assertEqual(ready[0]["status"], "Unknown")
        self.wait(lambda: any(c["type"] == "Ready" and c["status"] == "False"
                              for c in self.get("pods", "p-keep")["status"]["conditions"]), "p-keep Ready=False")
        # as 1.24's MarkPodsNotReady: the one condition, phase and ContainersReady kept
        lost = self.get("pods", "p-keep")
        self.assertEqual(lost["status"]["phase"], "Running")
        self.assertEqual([c["status"] for c in lost["status"]["conditions"] if c["type"] == "ContainersReady"], ["True"])
        st, body = self.api.request("GET", self.path("pods", "p-keep") + "/exec?command=true")
        self.assertEqual(st, 400)  # not a WebSocket upgrade
        with self.assertRaises(KubeError) as cm:
            self.api.channel(NS, "p-keep", "exec", {"command": ["true"]})
        self.assertEqual(cm.exception.status, 500)
        self.assertIn("error dialing backend", str(cm.exception))
        self.assertIsNone(cm.exception.reason)  # the real Status has no reason here

        # a pod created now is not scheduled (NoSchedule taint)
        self.api.post(self.path("pods"), pod_spec("p-late"))
        self.wait(lambda: any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                              for c in self.get("pods", "p-late")["status"].get("conditions") or []), "p-late Unschedulable")

        # lesson 2: graceful delete waits with no kubelet; the PVC waits for the pod
        gone = self.api.delete(self.path("pods", "p-del"))
        self.assertIn("deletionTimestamp", gone["metadata"])
        pvc = self.api.delete(self.path("persistentvolumeclaims", "work-del"))
        self.assertIn("deletionTimestamp", pvc["metadata"])
        self.assertEqual(pvc["metadata"]["finalizers"], ["kubernetes.io/pvc-protection"])
        # full disruption: p-evict (tolerationSeconds 1) is not evicted
        time.sleep(3)
        self.assertNotIn("deletionTimestamp", self.get("pods", "p-evict")["metadata"])
        self.assertNotIn("NoExecute", [t["effect"] for t in self.fake.admin.get("/api/v1/nodes/" + node)["spec"]["taints"]])
        self.assertIsNotNone(self.get("pods", "p-del"))
        self.assertEqual(self.get("persistentvolumeclaims", "work-del")["metadata"]["finalizers"],
                         ["kubernetes.io/pvc-protection"])
        # force: gone at once
        self.api.delete(self.path("pods", "p-evict"), {"gracePeriodSeconds": 0})
        self.assertIsNone(self.get("pods", "p-evict"))

        # the kubelet comes back: finishes the delete, the PVC goes, the others run on
        self.fake.knob("nodes/%s/restore" % node)
        self.wait(lambda: self.get("pods", "p-del") is None, "p-del deleted by its kubelet")
        self.wait(lambda: self.get("persistentvolumeclaims", "work-del") is None, "work-del released")
        self.wait(lambda: self.fake.node_schedulable(node), "node Ready again")
        self.wait(lambda: self.get("pods", "p-late")["status"].get("phase") == "Running", "p-late Running")
        again = self.get("pods", "p-keep")
        self.assertEqual(again["status"]["containerStatuses"][0]["containerID"],
                         keep["status"]["containerStatuses"][0]["containerID"])
        self.wait(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                              for c in self.get("pods", "p-keep")["status"]["conditions"]), "p-keep Ready again")
        code, out, _, _ = self.api.exec(NS, "p-keep", ["cat", "/work/f"])
        self.assertEqual((code, out), (0, b"kept\n"))
        engine = sbxtest.Engine(self.fake.engine_host)
        self.wait(lambda: not engine.volumes("io.kfake.pvc-name=work-del"), "work-del's volume removed")

        # lesson 3 live: a node added now is born tainted, then the taint goes
        if EXTERNAL:
            return  # the real run registers a second test kubelet by hand (docs/kube-real-run.md)
        rv = self.fake.admin.get("/api/v1/nodes")["metadata"]["resourceVersion"]
        q = self.watcher(self.fake.admin, "/api/v1/nodes", {"resourceVersion": rv, "fieldSelector": "metadata.name=kfake-extra"})
        self.fake.knob("nodes", name="kfake-extra")
        _, born = self.next_event(q, lambda t, o: t == "ADDED")
        self.assertIn({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}, born["spec"]["taints"])
        self.next_event(q, lambda t, o: t == "MODIFIED" and not o["spec"].get("taints"))

        # a deleted node's pods: the pod garbage collector deletes them with
        # grace 0 after its quarantine (2 s here, 40 s on 1.24), nothing marked first
        spec = pod_spec("p-orphaned")
        spec["spec"]["nodeName"] = "kfake-deleted"
        self.api.post(self.path("pods"), spec)
        self.assertIsNotNone(self.get("pods", "p-orphaned"))
        self.wait(lambda: self.get("pods", "p-orphaned") is None, "p-orphaned collected", timeout=30)


if __name__ == "__main__":
    unittest.main()
