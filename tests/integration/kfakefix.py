"""kfakefix - start and stop the fake Kubernetes cluster of tests/k8s for a suite (stdlib only).

    fake = kfakefix.Fake(engine_host)     # starts tests/k8s/kfake.py, waits for a Ready node
    api = fake.client("broker")           # kf_client.Client with that token (admin, broker, narrow)
    fake.knob("watches/close", mode="reset")
    fake.stop()                           # SIGTERM, then checks nothing of it is left on the runtime

ENGINE_HOST None: the API server alone (no kubelet, pods stay Pending). Its
files (certificates, tokens, kubeconfig, logs) go to a fresh directory under
sbxtest.out_dir(). Touches: that directory, its child process, the runtime
(reads, and removes what the fake's kubelets left behind with its instance label).

SBX_KUBE_EXTERNAL=FILE (outside CI only, tests/k8s/README.md "Against a real API
server"): Fake() is then an External: no fake is started; FILE names a real
kube-apiserver, and the test kubelet of tests/k8s is started against it as one
node. Knobs the real server has no counterpart for skip the test that uses them.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import sbxtest

K8S = os.path.join(sbxtest.REPO, "tests", "k8s")
sys.path.insert(0, K8S)

from kf_client import Client, KubeError  # noqa: E402,F401


def leftovers(engine_host, instance):
    """Removes what the cluster instance left on the runtime (containers and
    volumes labelled io.kfake.instance=INSTANCE); returns their names."""
    left = []
    if engine_host:
        e = sbxtest.Engine(engine_host)
        label = "io.kfake.instance=" + instance
        for c in e.containers(label):
            left.append(c["Names"][0])
            e.remove(c["Id"], ok=None)
        for v in e.volumes(label):
            left.append(v["Name"])
            e.remove_volume(v["Name"])
    return left


def Fake(engine_host=None, *a, **kw):
    """The fake (FakeCluster), or an External when SBX_KUBE_EXTERNAL names a real server."""
    if os.environ.get("SBX_KUBE_EXTERNAL"):
        return External(os.environ["SBX_KUBE_EXTERNAL"], engine_host, kw.get("namespaces", ("sbx",)), fake_roles=True)
    return FakeCluster(engine_host, *a, **kw)


class FakeCluster:
    def __init__(self, engine_host=None, namespaces=("sbx",), node_grace=2.0, extra=(), ready_timeout=60):
        self.engine_host = engine_host
        self.dir = tempfile.mkdtemp(prefix="kfake-", dir=sbxtest.out_dir())
        cmd = [sys.executable, os.path.join(K8S, "kfake.py"), "--dir", self.dir,
               "--node-grace", str(node_grace)]
        for ns in namespaces:
            cmd += ["--namespace", ns]
        if engine_host:
            cmd += ["--engine", engine_host]
        cmd += list(extra)
        self.log = open(os.path.join(self.dir, "kfake.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        path = os.path.join(self.dir, "kfake.json")
        self.wait(lambda: os.path.exists(path), 30, "kfake.json")
        with open(path) as f:
            self.info = json.load(f)
        self.ns = self.info["namespace"]
        self.admin = self.client("admin")
        for n in self.info["nodes"]:
            self.wait(lambda: self.node_schedulable(n), ready_timeout, "node %s Ready and untainted" % n)

    def wait(self, pred, timeout, what, interval=0.1):
        """Poll PRED until true; AssertionError naming WHAT (with the fake's
        logs) after TIMEOUT s or as soon as the fake has exited."""
        deadline = time.monotonic() + timeout
        while not pred():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("%s while waiting for %s\n%s" % (
                    "kfake exited (%s)" % self.proc.returncode if self.proc.poll() is not None
                    else "timed out after %.0f s" % timeout, what, self.logs()))
            time.sleep(interval)

    def client(self, token="broker"):
        """A client with the named token (admin, broker, narrow) or a raw token."""
        tok = self.info["tokens"].get(token, token)
        return Client(self.info["server"], self.info["ca"], tok)

    def node_schedulable(self, name):
        st, node = self.admin.request("GET", "/api/v1/nodes/" + name)
        if st != 200:
            return False
        ready = [c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"]
        return bool(ready) and ready[0]["status"] == "True" and not node["spec"].get("taints")

    def knob(self, what, **body):
        return self.admin.post("/kfake/v1/" + what, body)

    def logs(self):
        out = []
        for n in sorted(os.listdir(self.dir)):
            if n.endswith(".log"):
                with open(os.path.join(self.dir, n), errors="replace") as f:
                    out.append("== %s\n%s" % (n, f.read()[-4000:]))
        return "\n".join(out)

    def stop(self):
        """Stop the fake; returns what it left on the runtime (removed now) as a list of names."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return leftovers(self.engine_host, self.info["instance"])


class External:
    """A real API server named by FILE (JSON: server, ca, namespace, token_files
    {admin, broker, narrow}, kubelet_cert, kubelet_key) with the test kubelet as
    its node "kreal-node-PID". Same face as FakeCluster."""

    def __init__(self, path, engine_host, namespaces=("sbx",), fake_roles=False):
        """FAKE_ROLES: tokens "broker" and "narrow" get the fake's own Roles
        (kf_auth) in every namespace, not the ones FILE names (the deploy Role)."""
        with open(path) as f:
            cfg = json.load(f)
        self.engine_host, self.cfg = engine_host, cfg
        self.dir = tempfile.mkdtemp(prefix="kreal-", dir=sbxtest.out_dir())
        tokens = {}
        for name, tf in cfg["token_files"].items():
            with open(tf) as f:
                tokens[name] = f.read().strip()
        self.info = {"server": cfg["server"], "ca": cfg["ca"], "namespace": cfg["namespace"],
                     "tokens": tokens, "token_files": cfg["token_files"], "nodes": [],
                     "instance": "kreal-%d-%d" % (os.getpid(), int(time.time()))}
        self.ns = cfg["namespace"]
        self.admin = self.client("admin")
        self.namespaces = list(namespaces)
        for ns in namespaces:
            self.admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        if fake_roles:
            import kf_auth
            for name, rules in (("broker", kf_auth.BROKER_RULES), ("narrow", kf_auth.narrow_rules())):
                tokens[name] = self.knob("tokens", name=name, rules=rules)["token"]
                self.info["token_files"] = dict(self.info["token_files"], **{name: self.token_file(name, tokens[name])})
        self.fake_roles = fake_roles
        self.kubelets = {}   # node name -> its kf_kubelet.py process
        self.proc = None
        if engine_host:
            self.info["nodes"] = ["kreal-node-%d" % os.getpid()]
            self.start_kubelet(self.info["nodes"][0])
            self.wait(lambda: self.node_schedulable(self.info["nodes"][0]), 120, "the node Ready and untainted")

    def token_file(self, name, token):
        path = os.path.join(self.dir, "token-" + name)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(token)
        return path

    def start_kubelet(self, node):
        with open(os.path.join(self.dir, "kubelet-%s.log" % node), "ab") as log:
            self.kubelets[node] = subprocess.Popen(
                [sys.executable, os.path.join(K8S, "kf_kubelet.py"), "--server", self.cfg["server"],
                 "--ca", self.cfg["ca"], "--cert", self.cfg["kubelet_cert"], "--key", self.cfg["kubelet_key"],
                 "--token-file", self.cfg["token_files"]["admin"], "--engine", self.engine_host,
                 "--node", node, "--instance", self.info["instance"]],
                stdout=log, stderr=subprocess.STDOUT)
        self.proc = self.proc or self.kubelets[node]

    def wait(self, pred, timeout, what, interval=0.1):
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.0f s while waiting for %s\n%s" % (timeout, what, self.logs()))
            time.sleep(interval)

    client = FakeCluster.client
    node_schedulable = node_ready = FakeCluster.node_schedulable
    logs = FakeCluster.logs

    def knob(self, what, **body):
        """The knobs a real cluster has a counterpart for: tokens (a ServiceAccount,
        Role, RoleBinding and a TokenRequest), nodes (one more test kubelet),
        nodes/N/lose and /restore (kill and restart its kubelet). Any other
        skips the calling test."""
        import unittest
        parts = what.split("/")
        if what == "tokens":   # the ServiceAccount in the first namespace, its Role in each
            name, home = "kt-" + body["name"], self.ns
            self.admin.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % home,
                               {"metadata": {"name": name, "namespace": home}})
            for ns in self.namespaces:
                meta = {"name": name, "namespace": ns}
                rb = "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/" % ns
                self.admin.request("DELETE", rb + "roles/" + name)
                self.admin.request("POST", rb + "roles", {"metadata": meta, "rules": body["rules"]})
                self.admin.request("POST", rb + "rolebindings", {
                    "metadata": meta, "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": home}],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}})
            tr = self.admin.post("/api/v1/namespaces/%s/serviceaccounts/%s/token" % (home, name),
                                 {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
            time.sleep(1.0)  # the RBAC authorizer reads bindings from its informer cache
            return {"token": tr["status"]["token"]}
        if what == "nodes" and self.engine_host:
            self.start_kubelet(body["name"])
            return {}
        if len(parts) == 3 and parts[0] == "nodes" and parts[1] in self.kubelets and parts[2] == "lose":
            self.kubelets[parts[1]].kill()
            self.kubelets[parts[1]].wait()
            return {}
        if len(parts) == 3 and parts[0] == "nodes" and parts[1] in self.kubelets and parts[2] == "restore":
            if self.kubelets[parts[1]].poll() is not None:
                self.start_kubelet(parts[1])
            return {}
        raise unittest.SkipTest("knob %s is fake-only (SBX_KUBE_EXTERNAL)" % what)

    def stop(self):
        """Stop the kubelet (it removes its containers), delete its Node; returns
        what was left on the runtime (removed now)."""
        if self.fake_roles:  # test_kfake's objects: a real cluster keeps them
            for ns in self.namespaces:
                for base, res in (("/api/v1", "pods"), ("/api/v1", "persistentvolumeclaims"),
                                  ("/apis/networking.k8s.io/v1", "networkpolicies")):
                    st, lst = self.admin.request("GET", "%s/namespaces/%s/%s" % (base, ns, res))
                    for o in (lst or {}).get("items", []) if st == 200 else []:
                        url = "%s/namespaces/%s/%s/%s" % (base, ns, res, o["metadata"]["name"])
                        self.admin.request("PATCH", url, {"metadata": {"finalizers": None}},
                                           ctype="application/merge-patch+json")
                        self.admin.request("DELETE", url, {"gracePeriodSeconds": 0})
        for p in self.kubelets.values():
            if p.poll() is None:
                p.terminate()
        for p in self.kubelets.values():
            try:
                p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for n in self.kubelets:
            self.admin.request("DELETE", "/api/v1/nodes/" + n)
        return leftovers(self.engine_host, self.info["instance"])
