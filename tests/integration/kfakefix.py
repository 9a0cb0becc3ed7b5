"""kfakefix - start and stop the fake Kubernetes cluster of tests/k8s for a suite (stdlib only).

    fake = kfakefix.Fake(engine_host)     # starts tests/k8s/kfake.py, waits for a Ready node
    api = fake.client("broker")           # kf_client.Client with that token (admin, broker, narrow)
    fake.knob("watches/close", mode="reset")
    fake.stop()                           # SIGTERM, then checks nothing of it is left on the runtime

ENGINE_HOST None: the API server alone (no kubelet, pods stay Pending). Its
files (certificates, tokens, kubeconfig, logs) go to a fresh directory under
sbxtest.out_dir(). Touches: that directory, its child process, the runtime
(reads, and removes what the fake's kubelets left behind with its instance label).
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


class Fake:
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
        left = []
        if self.engine_host:
            e = sbxtest.Engine(self.engine_host)
            label = "io.kfake.instance=" + self.info["instance"]
            for c in e.containers(label):
                left.append(c["Names"][0])
                e.remove(c["Id"], ok=None)
            for v in e.volumes(label):
                left.append(v["Name"])
                e.remove_volume(v["Name"])
        return left
