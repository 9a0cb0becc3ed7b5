"""kf_control - admission and the controllers of the fake cluster.

What a real control plane does around the store, reduced to what issue 27's
lessons name: create-time admission (ServiceAccount check, default tolerations,
pvc-protection finalizer, the new node's not-ready taint), graceful deletion,
and one loop that plays scheduler, node-lifecycle controller (NotReady,
unreachable taints, pods Ready=False, taint eviction), pvc-protection controller,
pod garbage collection of a deleted node's pods and finalizer garbage
collection. Touches only the store (kf_store).
"""

import copy
import datetime
import threading
import time
import uuid

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
PVC_PROTECTION = "kubernetes.io/pvc-protection"


class ApiError(Exception):
    """An error the REST layer answers with a Status object."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message}
        if self.reason:  # the real server leaves it out for some (error dialing backend)
            st["reason"] = self.reason
        st["code"] = self.code
        if self.details:
            st["details"] = self.details
        return st


def now_iso(t=None):
    t = time.time() if t is None else t
    return datetime.datetime.fromtimestamp(int(t), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def kind_details(kind, name):
    return {"name": name, "kind": kind}


def requests(pod):
    """[milli-CPUs, bytes] the pod's containers request (after defaulting)."""
    from kf_engine import quantity
    cpu = mem = 0
    for c in pod["spec"].get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += quantity(req["cpu"], cpu=True) // 10**6 if "cpu" in req else 0
        mem += quantity(req["memory"]) if "memory" in req else 0
    return [cpu, mem]


def allocatable(node):
    """[pods, milli-CPUs, bytes] of the node's status.allocatable (unset: no limit)."""
    from kf_engine import quantity
    a = (node.get("status") or {}).get("allocatable") or {}
    big = 1 << 62
    return [int(a["pods"]) if "pods" in a else big,
            quantity(a["cpu"], cpu=True) // 10**6 if "cpu" in a else big,
            quantity(a["memory"]) if "memory" in a else big]


def tolerates(tolerations, taint):
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists" and not t.get("key"):
            return True
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def condition(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def set_condition(obj, ctype, status, reason=None, message=None):
    """Set a condition; True when anything changed."""
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    c = condition(obj, ctype)
    if c and c.get("status") == status and c.get("reason") == reason:
        return False
    if not c:
        c = {"type": ctype}
        conds.append(c)
    c["status"] = status
    c["lastTransitionTime"] = now_iso()
    for k, v in (("reason", reason), ("message", message)):
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return True


class Cluster:
    def __init__(self, store, node_grace=3.0, taint_delay=1.0, podgc_quarantine=40.0):
        self.store = store
        self.podgc_quarantine = podgc_quarantine
        self.orphans = {}      # pod uid -> monotonic time its node was first seen missing
        self.node_grace = node_grace
        self.taint_delay = taint_delay
        self.heartbeats = {}   # node name -> monotonic time of the last Ready=True status write
        self.ready_since = {}  # node name -> monotonic time Ready=True was first seen again
        self.unreachable_at = {}  # node name -> wall time its unreachable NoExecute taint was added
        self.stop = threading.Event()

    # -- admission -----------------------------------------------------
    @staticmethod
    def _validate_pvc(kind, name, spec):
        """The two checks of v1.24's ValidatePersistentVolumeClaimSpec a client
        meets first (seen on a real server: docs/kube-real-run.md)."""
        causes = []
        if not spec.get("accessModes"):
            causes.append("spec.accessModes: Required value: at least 1 access mode is required")
        if "storage" not in ((spec.get("resources") or {}).get("requests") or {}):
            causes.append("spec.resources[storage]: Required value")
        if causes:
            msg = '%s "%s" is invalid: %s' % (kind, name, causes[0] if len(causes) == 1 else "[" + ", ".join(causes) + "]")
            raise ApiError(422, "Invalid", msg, {"name": name, "kind": "persistentvolumeclaims"})

    def admit_create(self, resource, kind, ns, obj):
        md = obj.setdefault("metadata", {})
        if not md.get("name"):
            if md.get("generateName"):
                md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise ApiError(422, "Invalid", "%s.metadata.name: Required value: name or generateName is required" % kind)
        if ns is not None:
            if md.get("namespace") and md["namespace"] != ns:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
            md["namespace"] = ns
            if self.store.get("namespaces", None, ns) is None:
                raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns, kind_details("namespaces", ns))
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_iso()
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            md.pop(k, None)
        obj["kind"] = kind
        if resource == "pods":
            self._admit_pod(ns, obj)
        elif resource == "persistentvolumeclaims":
            self._validate_pvc(kind, md["name"], obj.get("spec") or {})
            fin = md.setdefault("finalizers", [])
            if PVC_PROTECTION not in fin:
                fin.append(PVC_PROTECTION)
            obj["status"] = {"phase": "Bound", "accessModes": (obj.get("spec") or {}).get("accessModes") or ["ReadWriteOnce"],
                             "capacity": ((obj.get("spec") or {}).get("resources") or {}).get("requests") or {}}
            obj.setdefault("spec", {})["volumeName"] = "pvc-" + md["uid"]
        elif resource == "nodes":
            taints = obj.setdefault("spec", {}).setdefault("taints", [])
            if not any(t.get("key") == NOT_READY for t in taints):
                taints.append({"key": NOT_READY, "effect": "NoSchedule"})
        elif resource == "namespaces":
            obj["status"] = {"phase": "Active"}

    def _admit_pod(self, ns, pod):
        spec = pod.setdefault("spec", {})
        name = pod["metadata"]["name"]
        sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        if self.store.get("serviceaccounts", ns, sa) is None:
            raise ApiError(403, "Forbidden",
                           'pods "%s" is forbidden: error looking up service account %s/%s: '
                           'serviceaccount "%s" not found' % (name, ns, sa, sa),
                           kind_details("pods", name))
        spec["serviceAccountName"] = sa
        spec["serviceAccount"] = sa
        if not spec.get("containers"):
            raise ApiError(422, "Invalid", 'Pod "%s" is invalid: spec.containers: Required value' % name)
        for c in spec["containers"] + (spec.get("initContainers") or []):
            res = c.get("resources") or {}
            if res.get("limits"):  # API defaulting: a limit without a request requests it
                res["requests"] = dict(res["limits"], **(res.get("requests") or {}))
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        tol = spec.setdefault("tolerations", [])
        for key in (NOT_READY, UNREACHABLE):
            if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tol):
                tol.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}

    # -- deletion ------------------------------------------------------
    def delete(self, resource, ns, name, grace=None, uid=None, kind=""):
        """Graceful delete; returns the object as the API answers it."""
        with self.store.lock:
            obj = self.store.get(resource, ns, name)
            if obj is None:
                raise ApiError(404, "NotFound", '%s "%s" not found' % (resource, name), kind_details(resource, name))
            md = obj["metadata"]
            if uid and md.get("uid") != uid:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": Precondition failed: UID in precondition: %s, UID in object meta: %s'
                               % (resource, name, uid, md.get("uid")), kind_details(resource, name))
            if resource == "pods":
                spec, phase = obj.get("spec") or {}, (obj.get("status") or {}).get("phase")
                if grace is None:
                    grace = md.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30))
                if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                    grace = 0
                if grace > 0:
                    if md.get("deletionTimestamp") and md.get("deletionGracePeriodSeconds", 1 << 30) <= grace:
                        return obj
                    md.setdefault("deletionTimestamp", now_iso(time.time() + grace))
                    md["deletionGracePeriodSeconds"] = grace
                    return self.store.put(resource, obj)
            if md.get("finalizers"):
                if not md.get("deletionTimestamp"):
                    md["deletionTimestamp"] = now_iso()
                    md["deletionGracePeriodSeconds"] = 0
                    return self.store.put(resource, obj)
                return obj
            return self.store.remove(resource, ns, name)

    def finish_if_done(self, resource, obj):
        """After a write: an object being deleted with no finalizers left goes."""
        md = obj["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers") and resource != "pods":
            return self.store.remove(resource, md.get("namespace"), md["name"])
        return obj

    # -- controllers ---------------------------------------------------
    def heartbeat(self, node):
        now = time.monotonic()
        if node not in self.heartbeats or now - self.heartbeats[node] > self.node_grace:
            self.ready_since[node] = now
        self.heartbeats[node] = now

    def run(self, period=0.2):
        while not self.stop.wait(period):
            try:
                self.tick()
            except Exception as e:  # a controller bug must show, not kill the loop
                print("kfake: controller: %r" % (e,), flush=True)

    def tick(self):
        with self.store.lock:
            self._nodes()
            self._podgc()
            self._schedule()
            self._pvc_protection()

    def _nodes(self):
        now = time.monotonic()
        nodes, _ = self.store.list("nodes")
        lost = [n for n in nodes if now - self.heartbeats.setdefault(n["metadata"]["name"], now) > self.node_grace]
        # every node lost: v1.24's node-lifecycle controller enters "master disruption
        # mode" (docs/kube-real-run.md): no NoExecute taint, no eviction, only NoSchedule
        disrupted = bool(nodes) and len(lost) == len(nodes)
        for node in nodes:
            name = node["metadata"]["name"]
            hb = self.heartbeats.setdefault(name, now)
            ready = condition(node, "Ready") or {}
            taints = node.setdefault("spec", {}).setdefault("taints", [])
            before = copy.deepcopy(node)
            if now - hb > self.node_grace:
                if ready.get("status") != "Unknown":
                    set_condition(node, "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
                    self.ready_since.pop(name, None)
                taints[:] = [t for t in taints if t.get("key") != NOT_READY]
                if disrupted:
                    taints[:] = [t for t in taints if not (t.get("key") == UNREACHABLE and t.get("effect") == "NoExecute")]
                    self.unreachable_at.pop(name, None)
                for eff in ("NoSchedule",) if disrupted else ("NoSchedule", "NoExecute"):
                    if not any(t.get("key") == UNREACHABLE and t.get("effect") == eff for t in taints):
                        t = {"key": UNREACHABLE, "effect": eff}
                        if eff == "NoExecute":
                            t["timeAdded"] = now_iso()
                            self.unreachable_at[name] = time.time()
                        taints.append(t)
                self._pods_not_ready(name)
                self._evict(name, taints)
            elif ready.get("status") == "True":
                taints[:] = [t for t in taints if t.get("key") != UNREACHABLE]
                self.unreachable_at.pop(name, None)
                since = self.ready_since.setdefault(name, now)
                if now - since >= self.taint_delay:
                    taints[:] = [t for t in taints if t.get("key") != NOT_READY]
            elif not any(t.get("key") == NOT_READY for t in taints):
                taints.append({"key": NOT_READY, "effect": "NoSchedule"})
            if node != before:
                self.store.put("nodes", node)

    def _pods_not_ready(self, node):
        pods, _ = self.store.list("pods", fields=[("spec.nodeName", "=", (node,))])
        for pod in pods:
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                # as 1.24's MarkPodsNotReady: Ready=False, reason and message kept
                c = condition(pod, "Ready")
                if c is not None and c.get("status") != "False":
                    c["status"] = "False"
                    c["lastTransitionTime"] = now_iso()
                    self.store.put("pods", pod)

    def _evict(self, node, taints):
        taint = next((t for t in taints if t.get("key") == UNREACHABLE and t.get("effect") == "NoExecute"), None)
        if not taint:
            return
        pods, _ = self.store.list("pods", fields=[("spec.nodeName", "=", (node,))])
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            tol = [t for t in pod["spec"].get("tolerations") or [] if tolerates([t], taint)]
            if tol and all(t.get("tolerationSeconds") is None for t in tol):
                continue
            secs = min([t["tolerationSeconds"] for t in tol if t.get("tolerationSeconds") is not None] or [0])
            if time.time() >= self.unreachable_at.get(node, time.time()) + secs:
                self.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _podgc(self):
        """1.24's pod garbage collector, gcOrphaned: a pod bound to a node
        that no longer exists, still missing after the quarantine (40 s
        there), is deleted with grace 0 — the only way a pod of a deleted
        node goes; nothing marks it first (DisruptionTarget is 1.26+)."""
        now = time.monotonic()
        names = {n["metadata"]["name"] for n in self.store.list("nodes")[0]}
        seen = set()
        for pod in self.store.list("pods")[0]:
            node, uid = pod["spec"].get("nodeName"), pod["metadata"]["uid"]
            if not node or node in names:
                continue
            seen.add(uid)
            since = self.orphans.setdefault(uid, now)
            if now - since >= self.podgc_quarantine:
                self.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], grace=0)
        for uid in list(self.orphans):
            if uid not in seen:
                del self.orphans[uid]

    def _schedule(self):
        pods, _ = self.store.list("pods", fields=[("spec.nodeName", "=", ("",))])
        if not pods:
            return
        nodes, _ = self.store.list("nodes")
        load = {}   # node -> [pods, milli-CPUs, bytes] requested by the pods bound to it
        for p in self.store.list("pods")[0]:
            n = p["spec"].get("nodeName")
            if n and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                load[n] = [a + b for a, b in zip(load.get(n, [0, 0, 0]), [1] + requests(p))]
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            ready = [n for n in nodes
                     if (condition(n, "Ready") or {}).get("status") == "True"
                     and all(tolerates(pod["spec"].get("tolerations"), t)
                             for t in n["spec"].get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute"))]
            want = [1] + requests(pod)
            short = {}
            fit = []
            for n in ready:  # the real scheduler's NodeResourcesFit, on requests
                have = allocatable(n)
                used = load.get(n["metadata"]["name"], [0, 0, 0])
                lack = [what for what, h, u, w in zip(("pods", "cpu", "memory"), have, used, want) if u + w > h]
                for what in lack:
                    short[what] = short.get(what, 0) + 1
                if not lack:
                    fit.append(n)
            if not fit:
                if short:  # worded as v1.24's scheduler (docs/kube-real-run.md)
                    msg = "0/%d nodes are available: %s. preemption: 0/%d nodes are available: %d No preemption " \
                          "victims found for incoming pod." % (len(nodes), ", ".join(
                              "%d Insufficient %s" % (v, k) if k != "pods" else "%d Too many pods" % v
                              for k, v in sorted(short.items())), len(nodes), len(nodes))
                else:
                    msg = "0/%d nodes are available: %d node(s) had untolerated taint or were not ready." % (len(nodes), len(nodes))
                if set_condition(pod, "PodScheduled", "False", "Unschedulable", msg):
                    self.store.put("pods", pod)
                continue
            best = min(fit, key=lambda n: (load.get(n["metadata"]["name"], [0])[0], n["metadata"]["name"]))
            name = best["metadata"]["name"]
            load[name] = [a + b for a, b in zip(load.get(name, [0, 0, 0]), want)]
            pod["spec"]["nodeName"] = name
            set_condition(pod, "PodScheduled", "True")
            self.store.put("pods", pod)

    def _pvc_protection(self):
        for pvc in self.store.list("persistentvolumeclaims")[0]:
            md = pvc["metadata"]
            if not md.get("deletionTimestamp"):
                continue
            if PVC_PROTECTION in (md.get("finalizers") or []):
                if self.pvc_in_use(md["namespace"], md["name"]):
                    continue
                md["finalizers"] = [f for f in md["finalizers"] if f != PVC_PROTECTION]
                if not md["finalizers"]:
                    del md["finalizers"]
                pvc = self.store.put("persistentvolumeclaims", pvc)
            self.finish_if_done("persistentvolumeclaims", pvc)

    def pvc_in_use(self, ns, name):
        for pod in self.store.list("pods", ns)[0]:
            for v in pod["spec"].get("volumes") or []:
                if (v.get("persistentVolumeClaim") or {}).get("claimName") == name:
                    return True
        return False
