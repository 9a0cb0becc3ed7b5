"""kf_auth - bearer tokens and RBAC rules of the fake API server.

Who a token is and what its (namespaced) Role allows, checked per request the way
kube-apiserver's RBAC authorizer does: apiGroup, resource[/subresource], verb,
namespace. Touches only memory (the tokens are written to files by kfake.py).
"""

import secrets
import threading

ALL = ["*"]

BROKER_RULES = [
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["get", "list", "watch", "create", "delete", "patch"]},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/attach"], "verbs": ["get", "create"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
     "verbs": ["get", "list", "watch", "create", "delete", "patch"]},
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "create", "delete"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
     "verbs": ["get", "list", "watch", "create", "delete", "patch"]},
]


def narrow_rules():
    """The broker's Role without `create` on pods/exec (a missing-RBAC check)."""
    out = []
    for r in BROKER_RULES:
        r = dict(r)
        if "pods/exec" in r["resources"]:
            out.append({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]})
            out.append({"apiGroups": [""], "resources": ["pods/attach"], "verbs": ["get", "create"]})
        else:
            out.append(r)
    return out


class User:
    def __init__(self, name, rules, namespaces, cluster=False):
        self.name = name
        self.rules = rules
        self.namespaces = namespaces  # None: every namespace
        self.cluster = cluster        # cluster-scoped resources allowed too

    def allowed(self, verb, group, resource, ns):
        """RBAC: RESOURCE is "pods" or "pods/exec"; NS None for cluster scope."""
        if ns is None and not self.cluster:
            return False
        if ns is not None and self.namespaces is not None and ns not in self.namespaces:
            return False
        for r in self.rules:
            if ("*" in r["apiGroups"] or group in r["apiGroups"]) and \
               ("*" in r["resources"] or resource in r["resources"]) and \
               ("*" in r["verbs"] or verb in r["verbs"]):
                return True
        return False


class Auth:
    def __init__(self, namespaces):
        self.lock = threading.Lock()
        self.tokens = {}
        self.namespaces = list(namespaces)
        star = [{"apiGroups": ALL, "resources": ALL, "verbs": ALL}]
        self.admin = self.add("admin", User("kfake:admin", star, None, cluster=True))
        sa = "system:serviceaccount:%s:sbx-broker" % self.namespaces[0]
        self.broker = self.add("broker", User(sa, BROKER_RULES, self.namespaces))
        self.narrow = self.add("narrow", User(sa, narrow_rules(), self.namespaces))
        self.named = {"admin": self.admin, "broker": self.broker, "narrow": self.narrow}

    def add(self, label, user):
        tok = "kfake-%s-%s" % (label, secrets.token_hex(16))
        with self.lock:
            self.tokens[tok] = user
        return tok

    def add_rules(self, name, rules):
        """A new token with RULES in every configured namespace; returns it."""
        for r in rules:
            for k in ("apiGroups", "resources", "verbs"):
                if not isinstance(r.get(k), list) or not all(isinstance(x, str) for x in r[k]):
                    raise ValueError("rule needs %s: a list of strings" % k)
        return self.add(name, User("kfake:%s" % name, rules, self.namespaces))

    def user(self, header):
        """The User of an Authorization header, or None."""
        if not header or not header.startswith("Bearer "):
            return None
        with self.lock:
            return self.tokens.get(header[len("Bearer "):].strip())
