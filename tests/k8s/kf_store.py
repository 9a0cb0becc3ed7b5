"""kf_store - the fake API server's object store, resourceVersion, history and watches.

One global revision (like etcd's), a bounded history of change events, and the
open watches, each with its own queue. Selectors (label and field) are parsed
and matched here. Touches only memory; the REST layer (kf_api) and the
controllers (kf_control) call it with `store.lock` held for read-modify-write.
"""

import collections
import copy
import queue
import re
import threading


class Gone(Exception):
    """A resourceVersion older than the kept history (410 Expired)."""

    def __init__(self, rv, oldest):
        super().__init__("too old resource version: %d (%d)" % (rv, oldest))


class BadSelector(ValueError):
    pass


_REQ = re.compile(r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9_.-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$")


def parse_labels(text):
    """labelSelector -> list of (key, op, values); op in = != exists !exists in notin."""
    reqs = []
    if not text:
        return reqs
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for p in parts:
        m = _REQ.match(p)
        if not m:
            raise BadSelector("unable to parse requirement: %r" % p)
        neg, key, op, val, setop, setvals = m.groups()
        if neg:
            if op or setop:
                raise BadSelector("unable to parse requirement: %r" % p)
            reqs.append((key, "!exists", ()))
        elif op:
            reqs.append((key, "!=" if op == "!=" else "=", (val,)))
        elif setop:
            reqs.append((key, setop, tuple(v.strip() for v in setvals.split(",") if v.strip())))
        else:
            reqs.append((key, "exists", ()))
    return reqs


FIELDS = {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"}


def parse_fields(text):
    reqs = []
    if not text:
        return reqs
    for p in text.split(","):
        m = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", p)
        if not m:
            raise BadSelector("invalid field selector: %r" % p)
        key, op, val = m.groups()
        if key not in FIELDS:
            raise BadSelector('field label not supported: %s' % key)
        reqs.append((key, "!=" if op == "!=" else "=", (val,)))
    return reqs


def field_value(obj, key):
    cur = obj
    for k in key.split("."):
        cur = (cur or {}).get(k) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def matches(obj, labels, fields):
    have = (obj.get("metadata") or {}).get("labels") or {}
    for key, op, vals in labels:
        v = have.get(key)
        if op == "=" and v != vals[0]:
            return False
        if op == "!=" and v == vals[0]:
            return False
        if op == "exists" and v is None:
            return False
        if op == "!exists" and v is not None:
            return False
        if op == "in" and v not in vals:
            return False
        if op == "notin" and v in vals:
            return False
    for key, op, vals in fields:
        v = field_value(obj, key)
        if (v == vals[0]) != (op == "="):
            return False
    return True


class Watch:
    """One open watch: RESOURCE in namespace NS (None: all), selectors."""

    def __init__(self, resource, ns, labels, fields):
        self.resource, self.ns, self.labels, self.fields = resource, ns, labels, fields
        self.q = queue.Queue()
        self.closed = None  # None, "end" or "reset"

    def wants(self, resource, obj):
        if resource != self.resource:
            return False
        return self.ns is None or obj["metadata"].get("namespace") == self.ns

    def translate(self, etype, old, new):
        """(type, object) this watch sees for a change, or None (selector
        transitions become ADDED/DELETED, as the real watch cache does)."""
        if etype == "ADDED":
            return ("ADDED", new) if matches(new, self.labels, self.fields) else None
        if etype == "DELETED":
            return ("DELETED", new) if matches(old, self.labels, self.fields) else None
        was, now = matches(old, self.labels, self.fields), matches(new, self.labels, self.fields)
        if was and now:
            return ("MODIFIED", new)
        if now:
            return ("ADDED", new)
        if was:
            return ("DELETED", new)
        return None


class Store:
    def __init__(self, history=100000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1
        self.compacted = 1  # every event after this revision is kept
        self.history = history
        self.events = collections.deque()  # (rv, resource, type, old, new)
        self.objects = {}  # (resource, ns or "", name) -> object
        self.watches = set()

    # -- reads ---------------------------------------------------------
    def get(self, resource, ns, name):
        o = self.objects.get((resource, ns or "", name))
        return copy.deepcopy(o) if o is not None else None

    def list(self, resource, ns=None, labels=(), fields=()):
        with self.lock:
            out = [copy.deepcopy(o) for (r, n, _), o in sorted(self.objects.items())
                   if r == resource and (ns is None or n == ns) and matches(o, labels, fields)]
            return out, self.rv

    def check_rv(self, rv):
        """Raise Gone when history after RV is no longer kept."""
        if rv < self.compacted:
            raise Gone(rv, self.compacted)

    # -- writes (caller holds the lock for read-modify-write) ----------
    def _record(self, resource, etype, old, new):
        self.events.append((self.rv, resource, etype, old, new))
        while len(self.events) > self.history:
            self.compacted = self.events.popleft()[0]
        for w in list(self.watches):
            if w.wants(resource, new):
                ev = w.translate(etype, old, new)
                if ev:
                    w.q.put((ev[0], copy.deepcopy(ev[1])))
        self.changed.notify_all()

    def put(self, resource, obj):
        """Create or replace; bumps the revision; returns a copy of what is stored."""
        with self.lock:
            md = obj["metadata"]
            key = (resource, md.get("namespace") or "", md["name"])
            old = self.objects.get(key)
            self.rv += 1
            md["resourceVersion"] = str(self.rv)
            new = copy.deepcopy(obj)
            self.objects[key] = new
            self._record(resource, "MODIFIED" if old else "ADDED", old, new)
            return copy.deepcopy(new)

    def remove(self, resource, ns, name):
        with self.lock:
            old = self.objects.pop((resource, ns or "", name), None)
            if old is None:
                return None
            self.rv += 1
            new = copy.deepcopy(old)
            new["metadata"]["resourceVersion"] = str(self.rv)
            self._record(resource, "DELETED", old, new)
            return copy.deepcopy(new)

    def compact(self):
        with self.lock:
            self.events.clear()
            self.compacted = self.rv
            return self.rv

    # -- watches -------------------------------------------------------
    def open_watch(self, resource, ns, labels, fields, rv):
        """Register a watch; returns (watch, backlog list of (type, obj)).
        RV None: synthetic ADDED for every current match. Raises Gone."""
        with self.lock:
            w = Watch(resource, ns, labels, fields)
            backlog = []
            if rv is None:
                for (r, n, _), o in sorted(self.objects.items()):
                    if r == resource and (ns is None or n == ns) and matches(o, labels, fields):
                        backlog.append(("ADDED", copy.deepcopy(o)))
            else:
                self.check_rv(rv)
                for erv, r, etype, old, new in self.events:
                    if erv > rv and w.wants(r, new):
                        ev = w.translate(etype, old, new)
                        if ev:
                            backlog.append((ev[0], copy.deepcopy(ev[1])))
            self.watches.add(w)
            return w, backlog

    def close_watch(self, w):
        with self.lock:
            self.watches.discard(w)

    def close_all_watches(self, mode):
        with self.lock:
            n = 0
            for w in list(self.watches):
                w.closed = mode
                w.q.put(None)
                n += 1
            return n

    def bookmark_all(self):
        with self.lock:
            for w in list(self.watches):
                w.q.put(("BOOKMARK", str(self.rv)))
