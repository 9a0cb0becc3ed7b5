#!/usr/bin/env python3
"""kfake - start the fake kube-apiserver and its test kubelets (tests/k8s/README.md).

The process: makes a test CA and one serving certificate with `openssl`, starts
the API server (kf_api) on 127.0.0.1:0 with its store, auth and controllers,
writes DIR/kfake.json (+ tokens, kubeconfig, in-cluster serviceaccount files),
and runs one kf_kubelet.py process per node, which the knobs pause, kill and
restart. Touches: DIR, its listening socket, its child processes (and through
them the Engine API socket given with --engine).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kf_api  # noqa: E402
import kf_net  # noqa: E402
from kf_auth import Auth  # noqa: E402
from kf_control import Cluster  # noqa: E402
from kf_store import Store  # noqa: E402


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_certs(d):
    """DIR/ca.crt (+key) and DIR/server.crt (+key) for 127.0.0.1 and localhost."""
    ca_key, ca, key, csr, crt, ext = (os.path.join(d, n) for n in
                                       ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt", "server.ext"))
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", ca_key, "-out", ca, "-days", "3", "-subj", "/CN=kfake-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", csr, "-subj", "/CN=kfake")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-out", crt, "-days", "3", "-extfile", ext)
    return ca, crt, key


def write(path, text, mode=0o600):
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
        f.write(text)
    os.rename(tmp, path)


class Kubelets:
    """The knob hooks: one kf_kubelet.py process per node."""

    def __init__(self, args, url, ca, crt, key, token):
        self.args, self.url, self.ca, self.crt, self.key, self.token = args, url, ca, crt, key, token
        self.procs = {}
        self.instance = "%d-%d" % (os.getpid(), int(time.time()))

    def add(self, name):
        if not self.args.engine:
            raise KeyError(name)
        if name in self.procs and self.procs[name].poll() is None:
            return
        log = open(os.path.join(self.args.dir, "kubelet-%s.log" % name), "ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "kf_kubelet.py"), "--server", self.url, "--ca", self.ca,
             "--cert", self.crt, "--key", self.key, "--token-file", self.token, "--engine", self.args.engine,
             "--node", name, "--instance", self.instance],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _proc(self, name):
        p = self.procs[name]
        return p

    def notready(self, name):
        p = self._proc(name)
        if p.poll() is None:
            p.send_signal(signal.SIGUSR1)

    def lose(self, name):
        p = self._proc(name)
        if p.poll() is None:
            p.kill()
            p.wait()

    def restore(self, name):
        p = self._proc(name)
        if p.poll() is None:
            p.send_signal(signal.SIGUSR2)
        else:
            self.add(name)

    def stop_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.args.engine:  # a lost node's kubelet could not clean up: do it for it
            from kf_engine import Engine
            e = Engine(self.args.engine)
            label = "io.kfake.instance=" + self.instance
            for c in e.containers(label):
                e.remove(c["Id"], ok=None)
            for v in e.volumes(label):
                e.remove_volume(v["Name"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--engine", default="")
    ap.add_argument("--namespace", action="append")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--node-grace", type=float, default=3.0)
    ap.add_argument("--podgc-quarantine", type=float, default=40.0)
    ap.add_argument("--bookmark-interval", type=float, default=1.0)
    ap.add_argument("--history", type=int, default=100000)
    args = ap.parse_args()
    namespaces = args.namespace or ["sbx"]
    d = os.path.abspath(args.dir)
    args.dir = d
    os.makedirs(d, exist_ok=True)
    ca, crt, key = make_certs(d)

    store = Store(history=args.history)
    cluster = Cluster(store, node_grace=args.node_grace, podgc_quarantine=args.podgc_quarantine)
    auth = Auth(namespaces)
    for ns in namespaces:
        obj = {"metadata": {"name": ns}}
        cluster.admit_create("namespaces", "Namespace", None, obj)
        store.put("namespaces", obj)

    knobs_holder = {}

    class Knobs:
        def __getattr__(self, name):
            return getattr(knobs_holder["k"], name)

    srv = kf_api.Server(("127.0.0.1", 0), kf_net.server_context(crt, key), store, cluster, auth, ca,
                        Knobs(), args.bookmark_interval)
    url = "https://127.0.0.1:%d" % srv.server_address[1]

    token_files = {}
    for label, tok in (("admin", auth.admin), ("broker", auth.broker), ("narrow", auth.narrow)):
        token_files[label] = os.path.join(d, "token-" + label)
        write(token_files[label], tok)
    sa = os.path.join(d, "serviceaccount")
    os.makedirs(sa, exist_ok=True)
    write(os.path.join(sa, "token"), auth.broker)
    write(os.path.join(sa, "namespace"), namespaces[0], 0o644)
    with open(ca) as f:
        write(os.path.join(sa, "ca.crt"), f.read(), 0o644)
    write(os.path.join(d, "kubeconfig"), "\n".join([
        "apiVersion: v1", "kind: Config", "current-context: kfake",
        "clusters:", "- name: kfake", "  cluster:", "    server: %s" % url, "    certificate-authority: %s" % ca,
        "users:", "- name: sbx-broker", "  user:", "    token: %s" % auth.broker,
        "contexts:", "- name: kfake", "  context:", "    cluster: kfake", "    user: sbx-broker",
        "    namespace: %s" % namespaces[0], ""]))

    kubelets = Kubelets(args, url, ca, crt, key, token_files["admin"])
    knobs_holder["k"] = kubelets
    kf_api.serve(srv)
    threading.Thread(target=cluster.run, daemon=True).start()

    def bookmarks():
        while not cluster.stop.wait(args.bookmark_interval):
            store.bookmark_all()
    threading.Thread(target=bookmarks, daemon=True).start()

    nodes = ["kfake-node-%d" % i for i in range(args.nodes)] if args.engine else []
    write(os.path.join(d, "kfake.json"), json.dumps({
        "server": url, "ca": ca, "namespace": namespaces[0], "namespaces": namespaces,
        "tokens": {"admin": auth.admin, "broker": auth.broker, "narrow": auth.narrow},
        "token_files": token_files, "kubeconfig": os.path.join(d, "kubeconfig"),
        "serviceaccount": sa, "nodes": nodes, "instance": kubelets.instance, "pid": os.getpid()}, indent=1))
    print("kfake: serving %s, namespaces %s, nodes %s" % (url, namespaces, nodes), flush=True)
    for n in nodes:
        kubelets.add(n)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(1.0):
        pass
    cluster.stop.set()
    kubelets.stop_all()
    print("kfake: stopped", flush=True)


if __name__ == "__main__":
    main()
