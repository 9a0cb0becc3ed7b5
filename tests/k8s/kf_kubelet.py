#!/usr/bin/env python3
"""kf_kubelet - the test kubelet: one node of the fake cluster, its pods as real containers.

Registers its Node (InternalIP 127.0.0.1, kubeletEndpoint = its own TLS port),
posts heartbeats (SIGUSR1 pauses them, SIGUSR2 resumes), watches the pods bound
to it and runs each on the Engine API runtime (kf_engine): volumes, init
containers, containers, status, graceful stop, final delete. Serves exec/attach
through kf_kubelet_exec. Touches: the API server (REST), the runtime socket
(containers and volumes labelled io.kfake.node / io.kfake.instance), its port.
SIGTERM removes every container and volume of its instance.
"""

import argparse
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kf_kubelet_exec  # noqa: E402
import kf_net  # noqa: E402
from kf_client import Client, KubeError  # noqa: E402
from kf_control import now_iso  # noqa: E402
from kf_engine import APIError, Runtime, quantity  # noqa: E402

L_NODE, L_INST, L_POD, L_CTR = "io.kfake.node", "io.kfake.instance", "io.kfake.pod-uid", "io.kfake.container"


def log(*a):
    print("kubelet:", *a, flush=True)


class PodWorker:
    """One pod's life on this node (a thread, like the real kubelet's pod workers)."""

    def __init__(self, kl, uid):
        self.kl, self.uid = kl, uid
        self.pod = None
        self.wake = threading.Event()
        self.cids = {}          # container name -> engine id
        self.restarts = {}
        self.started = False
        self.final = None       # terminal phase once reached
        self.waiting = None     # (reason, message) while containers cannot start
        self.init_status = []
        self.sent = None
        self.start_time = None
        self.terminating = False
        self.states = {}        # container name -> its Kubernetes state, last seen
        threading.Thread(target=self.run, daemon=True).start()

    def update(self, pod):
        self.pod = pod
        self.wake.set()

    def run(self):
        while not self.kl.stopping.is_set():
            self.wake.wait(1.0)
            self.wake.clear()
            pod = self.pod
            try:
                if pod is None:
                    self.teardown(0)
                    self.kl.forget(self.uid)
                    return
                if pod["metadata"].get("deletionTimestamp"):
                    if not self.terminating:
                        self.terminating = True
                        self.teardown(int(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
                        self.kl.final_delete(pod)
                    continue
                if self.final:
                    continue
                if not self.started:
                    self.start(pod)
                else:
                    self.monitor(pod)
            except (APIError, KubeError, OSError) as e:
                log("pod %s: %s" % (pod and pod["metadata"]["name"], e))

    # -- start ---------------------------------------------------------
    def cname(self, pod, c):
        md = pod["metadata"]
        return "kfake-%s-%s-%s-%s" % (md["namespace"], md["name"], c, self.uid[:8])

    def volumes(self, pod):
        """-> {volume name: mount source} or None while a PVC is missing."""
        rt, md = self.kl.rt, pod["metadata"]
        out = {}
        fs_group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        for v in pod["spec"].get("volumes") or []:
            labels = {L_INST: self.kl.instance, L_NODE: self.kl.node}
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                st, pvc = self.kl.api.request("GET", "/api/v1/namespaces/%s/persistentvolumeclaims/%s" % (md["namespace"], claim))
                if st != 200:
                    self.waiting = ("ContainerCreating", 'persistentvolumeclaim "%s" not found' % claim)
                    return None
                name = "kfake-pvc-" + pvc["metadata"]["uid"]
                labels.update({"io.kfake.pvc-uid": pvc["metadata"]["uid"], "io.kfake.pvc-ns": md["namespace"],
                               "io.kfake.pvc-name": claim})
                out[v["name"]] = ("volume", name, rt.volume(name, labels))
            elif "emptyDir" in v:
                if (v["emptyDir"] or {}).get("medium") == "Memory":
                    out[v["name"]] = ("tmpfs", None, False)
                    continue
                name = "kfake-ed-%s-%s" % (self.uid[:8], v["name"])
                labels[L_POD] = self.uid
                out[v["name"]] = ("volume", name, rt.volume(name, labels))
            else:
                self.fail("UnsupportedVolume", "kfake supports persistentVolumeClaim and emptyDir volumes, not %s" % v["name"])
                return None
        fresh = [name for kind, name, new in out.values() if new]
        if fresh and fs_group is not None:
            self.chgrp(pod, fresh, int(fs_group))
        return out

    def chgrp(self, pod, volumes, gid):
        """fsGroup: the new volumes' files get group GID, group-writable, setgid
        dirs (one short root container of the pod's image for all of them)."""
        image = pod["spec"]["containers"][0]["image"]
        e = self.kl.rt.engine
        dirs = " ".join("/v%d" % i for i in range(len(volumes)))
        cid = e.create(image=image, cmd=["sh", "-c", "chgrp -R %d %s && chmod -R g+rwX %s && chmod g+s %s"
                                         % (gid, dirs, dirs, dirs)],
                       user="0", labels={L_INST: self.kl.instance, L_NODE: self.kl.node},
                       host_config={"NetworkMode": "none",
                                    "Mounts": [{"Type": "volume", "Source": v, "Target": "/v%d" % i}
                                               for i, v in enumerate(volumes)]},
                       Entrypoint=[])
        try:
            e.start(cid)
            e.post("/containers/%s/wait" % cid, timeout=300)
        finally:
            e.remove(cid, ok=None)

    def check_user(self, pod, c):
        """runAsNonRoot: None or the CreateContainerConfigError message."""
        psc, csc = pod["spec"].get("securityContext") or {}, c.get("securityContext") or {}
        non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        if not non_root:
            return None
        if uid is not None:
            return "container's runAsUser breaks non-root policy" if int(uid) == 0 else None
        st, img = self.kl.rt.engine.fetch("GET", "/images/%s/json" % c["image"])
        user = ((img or {}).get("Config") or {}).get("User") or "" if st == 200 else ""
        u = user.split(":")[0]
        if u in ("", "root", "0"):
            return "container has runAsNonRoot and image will run as root"
        if not u.isdigit():
            return "container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root" % u
        return None

    def create(self, pod, c, vols, init=False):
        psc, csc = pod["spec"].get("securityContext") or {}, c.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup"))
        hc = {"NetworkMode": "none", "Mounts": [], "Tmpfs": {}}
        for m in c.get("volumeMounts") or []:
            kind, src, _ = vols[m["name"]]
            if kind == "tmpfs":
                hc["Tmpfs"][m["mountPath"]] = "%s,exec,nosuid,nodev,mode=1777" % ("ro" if m.get("readOnly") else "rw")
            else:
                hc["Mounts"].append({"Type": "volume", "Source": src, "Target": m["mountPath"],
                                     "ReadOnly": bool(m.get("readOnly"))})
        if csc.get("readOnlyRootFilesystem"):
            hc["ReadonlyRootfs"] = True
        if csc.get("allowPrivilegeEscalation") is False:
            hc["SecurityOpt"] = ["no-new-privileges"]
        if csc.get("privileged"):
            hc["Privileged"] = True
        caps = csc.get("capabilities") or {}
        if caps.get("drop"):
            hc["CapDrop"] = list(caps["drop"])
        if caps.get("add"):
            hc["CapAdd"] = list(caps["add"])
        seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp == "Unconfined":
            hc.setdefault("SecurityOpt", []).append("seccomp=unconfined")
        if psc.get("fsGroup") is not None:
            hc["GroupAdd"] = [str(psc["fsGroup"])]
        lim = (c.get("resources") or {}).get("limits") or {}
        if lim.get("memory"):
            hc["Memory"] = quantity(lim["memory"])
        if lim.get("cpu"):
            hc["NanoCpus"] = quantity(lim["cpu"], cpu=True)
        extra = {"Hostname": pod["metadata"]["name"][:63], "Tty": bool(c.get("tty")),
                 "OpenStdin": bool(c.get("stdin")), "StdinOnce": bool(c.get("stdinOnce")),
                 "Env": ["%s=%s" % (e["name"], e.get("value", "")) for e in c.get("env") or []]}
        if c.get("command"):
            extra["Entrypoint"] = list(c["command"])
        if c.get("workingDir"):
            extra["WorkingDir"] = c["workingDir"]
        user = None
        if uid is not None:
            user = str(uid) + (":%s" % gid if gid is not None else "")
        labels = {L_INST: self.kl.instance, L_NODE: self.kl.node, L_POD: self.uid, L_CTR: c["name"],
                  "io.kfake.init": "1" if init else "0"}
        name = self.cname(pod, c["name"])
        self.kl.rt.engine.remove(name, ok=None)
        return self.kl.rt.engine.create(image=c["image"], cmd=list(c["args"]) if c.get("args") else None,
                                        name=name, user=user, labels=labels, host_config=hc, **extra)

    def adopt(self, pod):
        found = {}
        for ct in self.kl.rt.engine.containers("%s=%s" % (L_POD, self.uid)):
            found[ct["Labels"].get(L_CTR)] = (ct["Id"], ct["Labels"].get("io.kfake.init") == "1")
        names = [c["name"] for c in pod["spec"]["containers"]]
        if names and all(n in found and not found[n][1] for n in names):
            self.cids = {n: found[n][0] for n in names}
            return True
        for cid, _ in found.values():
            self.kl.rt.engine.remove(cid, ok=None)
        return False

    def start(self, pod):
        self.start_time = self.start_time or now_iso()
        if self.adopt(pod):
            self.started = True
            log("pod %s: adopted its containers" % pod["metadata"]["name"])
            return self.monitor(pod)
        for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
            msg = self.check_user(pod, c)
            if msg:
                if self.waiting != ("CreateContainerConfigError", msg):
                    log("pod %s: %s" % (pod["metadata"]["name"], msg))
                self.waiting = ("CreateContainerConfigError", msg)
                return self.report(pod)
        vols = self.volumes(pod)
        if vols is None:
            return self.report(pod)
        e = self.kl.rt.engine
        self.init_status = []
        for c in pod["spec"].get("initContainers") or []:
            try:
                cid = self.create(pod, c, vols, init=True)
            except APIError as err:
                self.waiting = ("ErrImagePull" if err.status == 404 else "CreateContainerError", str(err))
                return self.report(pod)
            e.start(cid)
            code = e.post("/containers/%s/wait" % cid, timeout=3600).get("StatusCode")
            e.remove(cid, ok=None)
            self.init_status.append({"name": c["name"], "image": c["image"], "ready": code == 0, "restartCount": 0,
                                     "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}})
            if code != 0:
                return self.fail("Init:Error", "init container %s exited %s" % (c["name"], code))
        for c in pod["spec"]["containers"]:
            try:
                self.cids[c["name"]] = self.create(pod, c, vols)
            except APIError as err:
                self.waiting = ("ErrImagePull" if err.status == 404 else "CreateContainerError", str(err))
                log("pod %s: container %s: %s" % (pod["metadata"]["name"], c["name"], err))
                for cid in self.cids.values():
                    e.remove(cid, ok=None)
                self.cids = {}
                return self.report(pod)
        for cid in self.cids.values():
            e.start(cid)
        log("pod %s/%s (%s): started %s" % (pod["metadata"]["namespace"], pod["metadata"]["name"],
                                           self.uid[:8], ", ".join(sorted(self.cids))))
        self.waiting = None
        self.started = True
        self.monitor(pod)

    # -- running ---------------------------------------------------------
    def monitor(self, pod):
        e = self.kl.rt.engine
        policy = pod["spec"].get("restartPolicy", "Always")
        states = {}
        for name, cid in self.cids.items():
            prev = self.states.get(name)
            if self.kl.states.get(cid) == "running" and prev and "running" in prev:
                states[name] = prev
                continue
            info = e.inspect(cid)
            if info is None:
                states[name] = {"terminated": {"exitCode": 137, "reason": "ContainerGone"}}
                continue
            s = info["State"]
            if s.get("Running"):
                states[name] = {"running": {"startedAt": s.get("StartedAt", "")[:19] + "Z"}}
                continue
            code = s.get("ExitCode", 0)
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                self.restarts[name] = self.restarts.get(name, 0) + 1
                e.start(cid)
                states[name] = {"running": {"startedAt": now_iso()}}
                continue
            states[name] = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                           "finishedAt": s.get("FinishedAt", "")[:19] + "Z"}}
        self.states = states
        if states and all("terminated" in s for s in states.values()):
            self.final = "Succeeded" if all(s["terminated"]["exitCode"] == 0 for s in states.values()) else "Failed"
        self.report(pod)

    def fail(self, reason, message):
        self.final = "Failed"
        self.waiting = (reason, message)
        self.report(self.pod)

    def report(self, pod):
        running = self.states if self.started else {}
        cs = []
        for c in pod["spec"]["containers"]:
            st = running.get(c["name"])
            if st is None:
                st = {"waiting": {"reason": (self.waiting or ("ContainerCreating",))[0]}}
                if self.waiting and len(self.waiting) > 1:
                    st["waiting"]["message"] = self.waiting[1]
            cs.append({"name": c["name"], "image": c["image"], "imageID": "", "ready": "running" in st,
                       "started": "running" in st, "restartCount": self.restarts.get(c["name"], 0), "state": st,
                       **({"containerID": "docker://" + self.cids[c["name"]]} if c["name"] in self.cids else {})})
        ready = bool(cs) and all(x["ready"] for x in cs)
        phase = self.final or ("Running" if self.started else "Pending")
        t = lambda b: "True" if b else "False"  # noqa: E731
        status = {"phase": phase, "hostIP": "127.0.0.1", "startTime": self.start_time, "qosClass": "BestEffort",
                  "conditions": [{"type": "Initialized", "status": t(self.started or self.final)},
                                 {"type": "Ready", "status": t(ready)},
                                 {"type": "ContainersReady", "status": t(ready)},
                                 {"type": "PodScheduled", "status": "True"}],
                  "containerStatuses": cs, "initContainerStatuses": self.init_status}
        if self.final and self.waiting:
            status["reason"], status["message"] = self.waiting[0], self.waiting[1]
        if status == self.sent:
            return
        md = pod["metadata"]
        body = dict(status)
        body["conditions"] = [dict(c, lastTransitionTime=now_iso()) for c in status["conditions"]]
        st, _ = self.kl.api.request("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (md["namespace"], md["name"]),
                                    {"status": body}, ctype="application/merge-patch+json")
        if st == 200:
            self.sent = status

    def teardown(self, grace):
        e = self.kl.rt.engine
        for cid in list(self.cids.values()):
            e.fetch("POST", "/containers/%s/stop" % cid, params={"t": max(0, grace)}, timeout=grace + 60)
            e.remove(cid, ok=None)
        self.cids = {}
        for ct in e.containers("%s=%s" % (L_POD, self.uid)):
            e.remove(ct["Id"], ok=None)
        for v in e.volumes("%s=%s" % (L_POD, self.uid)):
            e.remove_volume(v["Name"])

    def container(self, name):
        return self.cids.get(name)


class Kubelet:
    def __init__(self, args):
        self.node, self.instance = args.node, args.instance
        with open(args.token_file) as f:
            self.api = Client(args.server, args.ca, f.read().strip())
        self.rt = Runtime(args.engine)
        self.workers = {}
        self.states = {}  # engine id -> State ("running", "exited", ...), from one list a second
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.heartbeat_paused = threading.Event()
        self.exec_server = kf_kubelet_exec.start(self, kf_net.server_context(args.cert, args.key))
        self.port = self.exec_server.server_address[1]

    # the exec server asks these
    def find_container(self, ns, name, ctr):
        with self.lock:
            for w in self.workers.values():
                p = w.pod
                if p and p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name:
                    return w.container(ctr), p
        return None, None

    def forget(self, uid):
        with self.lock:
            self.workers.pop(uid, None)

    def final_delete(self, pod):
        md = pod["metadata"]
        log("pod %s/%s (%s): stopped, deleting it" % (md["namespace"], md["name"], md["uid"][:8]))
        self.api.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (md["namespace"], md["name"]),
                         {"gracePeriodSeconds": 0, "preconditions": {"uid": md["uid"]}})

    def node_status(self):
        return {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                                "lastHeartbeatTime": now_iso(), "lastTransitionTime": now_iso()}],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.node}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
                # a large node: the scheduler fits pods by requests (real and fake); the
                # runtime enforces each container's own limits on the shared host
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "250"},
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250"},
                "nodeInfo": {"kubeletVersion": "v1.24.0-kfake", "containerRuntimeVersion": "engine://" + self.rt.path,
                             "operatingSystem": "linux", "architecture": "amd64"}}

    def register(self):
        st, body = self.api.request("POST", "/api/v1/nodes", {
            "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux"}},
            "spec": {}, "status": self.node_status()})
        if st not in (201, 409):
            raise KubeError("POST", "/api/v1/nodes", st, body)
        self.beat()

    def beat(self):
        self.api.request("PATCH", "/api/v1/nodes/%s/status" % self.node, {"status": self.node_status()},
                         ctype="application/merge-patch+json")

    def heartbeats(self):
        while not self.stopping.wait(1.0):
            if not self.heartbeat_paused.is_set():
                try:
                    self.beat()
                except OSError as e:
                    log("heartbeat: %s" % e)

    def dispatch(self, pod, deleted=False):
        uid = pod["metadata"]["uid"]
        with self.lock:
            w = self.workers.get(uid)
            if w is None:
                if deleted:
                    return
                w = self.workers[uid] = PodWorker(self, uid)
        w.update(None if deleted else pod)

    def sync_pods(self):
        path, sel = "/api/v1/pods", {"fieldSelector": "spec.nodeName=" + self.node}
        first = True
        while not self.stopping.is_set():
            try:
                lst = self.api.get(path, params=sel)
                seen = {p["metadata"]["uid"] for p in lst["items"]}
                with self.lock:
                    gone = [w for uid, w in self.workers.items() if uid not in seen]
                for w in gone:
                    w.update(None)
                for p in lst["items"]:
                    self.dispatch(p)
                if first:
                    self.sweep(seen)
                    first = False
                rv = lst["metadata"]["resourceVersion"]
                for etype, obj in self.api.watch(path, dict(sel, resourceVersion=rv, allowWatchBookmarks="true")):
                    if etype == "ERROR":
                        break
                    if etype == "BOOKMARK":
                        continue
                    self.dispatch(obj, deleted=etype == "DELETED")
            except (OSError, KubeError, ValueError) as e:
                log("pod watch: %s; relisting" % e)
                time.sleep(0.5)

    def sweep(self, live_uids):
        """At start: containers of this node whose pods are gone."""
        for ct in self.rt.engine.containers("%s=%s" % (L_NODE, self.node), "%s=%s" % (L_INST, self.instance)):
            if ct["Labels"].get(L_POD) not in live_uids:
                self.rt.engine.remove(ct["Id"], ok=None)

    def volume_gc(self):
        while not self.stopping.wait(3.0):
            try:
                for v in self.rt.engine.volumes("io.kfake.pvc-uid", "%s=%s" % (L_INST, self.instance)):
                    lb = v.get("Labels") or {}
                    st, pvc = self.api.request("GET", "/api/v1/namespaces/%s/persistentvolumeclaims/%s"
                                               % (lb.get("io.kfake.pvc-ns"), lb.get("io.kfake.pvc-name")))
                    if st == 404 or (st == 200 and pvc["metadata"]["uid"] != lb.get("io.kfake.pvc-uid")):
                        self.rt.engine.remove_volume(v["Name"])
            except (OSError, APIError) as e:
                log("volume gc: %s" % e)

    def poll_states(self):
        while not self.stopping.wait(1.0):
            try:
                cts = self.rt.engine.containers("%s=%s" % (L_INST, self.instance), "%s=%s" % (L_NODE, self.node))
                self.states = {ct["Id"]: ct.get("State") for ct in cts}
            except (OSError, APIError) as e:
                log("container list: %s" % e)

    def cleanup(self):
        e = self.rt.engine
        for ct in e.containers("%s=%s" % (L_INST, self.instance), "%s=%s" % (L_NODE, self.node)):
            e.remove(ct["Id"], ok=None)
        for v in e.volumes("%s=%s" % (L_INST, self.instance)):
            e.remove_volume(v["Name"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for a in ("--server", "--ca", "--cert", "--key", "--token-file", "--engine", "--node", "--instance"):
        ap.add_argument(a, required=True)
    kl = Kubelet(ap.parse_args())
    signal.signal(signal.SIGUSR1, lambda *_: kl.heartbeat_paused.set())
    signal.signal(signal.SIGUSR2, lambda *_: (kl.heartbeat_paused.clear(), kl.beat()))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    kl.register()
    log("node %s registered, kubelet port %d" % (kl.node, kl.port))
    for fn in (kl.heartbeats, kl.sync_pods, kl.volume_gc, kl.poll_states):
        threading.Thread(target=fn, daemon=True).start()
    while not done.wait(1.0):
        pass
    kl.stopping.set()
    kl.cleanup()
    log("stopped")


if __name__ == "__main__":
    main()
