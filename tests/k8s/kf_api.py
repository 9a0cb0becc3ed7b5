"""kf_api - the fake API server's HTTP layer: REST routes, watch streams,
exec/attach proxy to the kubelet, and the fault knobs.

Parses paths and verbs, authenticates and authorizes (kf_auth), reads and writes
the store (kf_store) through admission and deletion rules (kf_control), and
answers Status objects on errors. Touches: its listening socket, the kubelet's
socket for pods/exec and pods/attach, and the knob hooks kfake.py gives it.
"""

import copy
import http.server
import json
import socket
import socketserver
import struct
import threading
import time
import urllib.parse

import kf_net
from kf_control import ApiError, condition, kind_details
from kf_store import BadSelector, Gone, parse_fields, parse_labels

# resource -> (group, version, kind, namespaced)
RESOURCES = {
    "pods": ("", "v1", "Pod", True),
    "persistentvolumeclaims": ("", "v1", "PersistentVolumeClaim", True),
    "serviceaccounts": ("", "v1", "ServiceAccount", True),
    "nodes": ("", "v1", "Node", False),
    "namespaces": ("", "v1", "Namespace", False),
    "networkpolicies": ("networking.k8s.io", "v1", "NetworkPolicy", True),
}
SUBRESOURCES = {("pods", "status"), ("pods", "exec"), ("pods", "attach"), ("pods", "log"), ("nodes", "status")}


def api_version(resource):
    g, v, _, _ = RESOURCES[resource]
    return v if not g else "%s/%s" % (g, v)


def bookmark_object(kind, apiv, rv):
    """A BOOKMARK's object as a real v1.24 sends it (docs/kube-real-run.md):
    the kind's zero value with only metadata.resourceVersion set."""
    obj = {"kind": kind, "apiVersion": apiv, "metadata": {"resourceVersion": rv, "creationTimestamp": None}}
    if kind == "Pod":
        obj.update({"spec": {"containers": None}, "status": {}})
    elif kind == "PersistentVolumeClaim":  # the two seen; other kinds: metadata only
        obj.update({"spec": {"resources": {}}, "status": {}})
    return obj


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("bad JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    """RFC 6902: add, remove, replace, test, copy, move."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise ValueError("a JSON patch is a list of operations")

    def walk(parts):
        cur = doc
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur, parts[-1]

    def get(parts):
        cur = doc
        for p in parts:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur

    for op in ops:
        kind, parts = op.get("op"), _pointer(op.get("path", ""))
        try:
            if kind == "test":
                if get(parts) != op.get("value"):
                    raise ValueError("test operation failed at %s" % op.get("path"))
                continue
            if kind in ("copy", "move"):
                val = copy.deepcopy(get(_pointer(op["from"])))
                if kind == "move":
                    par, last = walk(_pointer(op["from"]))
                    par.pop(int(last)) if isinstance(par, list) else par.pop(last)
                kind, op = "add", {"value": val}
            par, last = walk(parts)
            if kind == "add":
                if isinstance(par, list):
                    par.insert(len(par) if last == "-" else int(last), copy.deepcopy(op["value"]))
                else:
                    par[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                par.pop(int(last)) if isinstance(par, list) else par.pop(last)
            elif kind == "replace":
                if isinstance(par, list):
                    par[int(last)] = copy.deepcopy(op["value"])
                else:
                    if last not in par:
                        raise KeyError(last)
                    par[last] = copy.deepcopy(op["value"])
            else:
                raise ValueError("unknown JSON patch op %r" % kind)
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError("JSON patch %s %s: no such path (%s)" % (kind, op.get("path"), e))
    return doc


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, ctx, store, cluster, auth, kubelet_ca, knobs, bookmark_interval):
        self.ctx = ctx
        self.store, self.cluster, self.auth = store, cluster, auth
        self.kubelet_ctx = kf_net.client_context(kubelet_ca)
        self.knobs = knobs  # object with notready(name), lose(name), restore(name), add(name)
        self.bookmark_interval = bookmark_interval
        super().__init__(addr, Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kfake"
    sys_version = ""

    def setup(self):
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # head and body are two writes
        self.request.settimeout(30)
        self.request = self.server.ctx.wrap_socket(self.request, server_side=True)
        self.request.settimeout(None)
        super().setup()

    def finish(self):
        super().finish()
        if getattr(self, "kf_reset", False):
            self.request.close()

    def log_message(self, fmt, *args):
        pass

    # -- plumbing ------------------------------------------------------
    def send_json(self, code, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_error_status(self, e):
        self.send_json(e.code, e.status())

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > 8 << 20:
            raise ApiError(413, "RequestEntityTooLarge", "request entity too large: limit is 8388608")
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown format: %s" % e)

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        u = urllib.parse.urlsplit(self.path)
        self.query = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        path = u.path.rstrip("/") or "/"
        try:
            if path in ("/healthz", "/livez", "/readyz"):
                body = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(body)
                return
            self.user = self.server.auth.user(self.headers.get("Authorization"))
            if self.user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if path == "/version":
                return self.send_json(200, {"major": "1", "minor": "24", "gitVersion": "v1.24.0-kfake", "platform": "linux/amd64"})
            if path.startswith("/kfake/v1/"):
                return self.knob(method, path[len("/kfake/v1/"):])
            if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
                return self.access_review()
            self.route(method, path)
        except ApiError as e:
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def q1(self, name, default=None):
        v = self.query.get(name)
        return v[0] if v else default

    # -- routing -------------------------------------------------------
    def route(self, method, path):
        parts = path.split("/")[1:]
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, rest = parts[1], parts[3:]
            if (group, parts[2]) != ("networking.k8s.io", "v1"):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in RESOURCES or RESOURCES[rest[0]][0] != group:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub and (resource, sub) not in SUBRESOURCES):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespaced = RESOURCES[resource][3]
        if not namespaced and ns is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespaced and ns is None and name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub in ("exec", "attach"):
            return self.exec_proxy(ns, name, sub)
        verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        if name is None:
            if method == "GET":
                verb = "watch" if self.q1("watch") in ("1", "true") else "list"
            elif method == "DELETE":
                verb = "deletecollection"
            elif method != "POST":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        elif method == "POST":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        self.authorize(verb, group, resource + ("/" + sub if sub else ""), ns if namespaced else None, name)
        if verb == "watch":
            return self.watch(resource, ns)
        if verb == "list":
            return self.list(resource, ns)
        if verb == "create":
            return self.create(resource, ns)
        if verb == "deletecollection":
            return self.delete_collection(resource, ns)
        if sub == "log":
            return self.log(ns, name)
        if verb == "get":
            obj = self.server.store.get(resource, ns, name)
            if obj is None:
                raise self.not_found(resource, name)
            return self.send_json(200, self.out(resource, obj))
        if verb == "delete":
            return self.delete(resource, ns, name)
        return self.update(method, resource, ns, name, sub)

    def authorize(self, verb, group, resource, ns, name):
        if not self.user.allowed(verb, group, resource, ns):
            what = resource.split("/")[0]
            subj = '%s "%s"' % (what, name) if name else what
            where = ' in the namespace "%s"' % ns if ns else " at the cluster scope"
            raise ApiError(403, "Forbidden", '%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s"%s'
                           % (subj, self.user.name, verb, resource, group, where),
                           kind_details(what, name or ""))

    def not_found(self, resource, name):
        return ApiError(404, "NotFound", '%s "%s" not found' % (resource, name), kind_details(resource, name))

    def out(self, resource, obj):
        obj["apiVersion"] = api_version(resource)
        obj["kind"] = RESOURCES[resource][2]
        return obj

    def selectors(self):
        try:
            return parse_labels(self.q1("labelSelector", "")), parse_fields(self.q1("fieldSelector", ""))
        except BadSelector as e:
            raise ApiError(400, "BadRequest", str(e))

    # -- verbs ---------------------------------------------------------
    def list(self, resource, ns):
        labels, fields = self.selectors()
        st = self.server.store
        with st.lock:
            rv = self.q1("resourceVersion", "")
            if rv not in ("", "0") and self.q1("resourceVersionMatch") == "Exact":
                try:
                    st.check_rv(int(rv))
                except Gone as e:
                    raise ApiError(410, "Expired", str(e))
            items, cur = st.list(resource, ns, labels, fields)
        self.send_json(200, {"kind": RESOURCES[resource][2] + "List", "apiVersion": api_version(resource),
                             "metadata": {"resourceVersion": str(cur)},
                             "items": [self.out(resource, o) for o in items]})

    def create(self, resource, ns):
        obj = self.body()
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        kind = RESOURCES[resource][2]
        st = self.server.store
        with st.lock:
            self.server.cluster.admit_create(resource, kind, ns, obj)
            name = obj["metadata"]["name"]
            if st.get(resource, ns, name) is not None:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (resource, name), kind_details(resource, name))
            obj = st.put(resource, obj)
        self.send_json(201, self.out(resource, obj))

    def delete_options(self):
        opts = self.body() or {}
        grace = opts.get("gracePeriodSeconds")
        if self.q1("gracePeriodSeconds") is not None:
            grace = int(self.q1("gracePeriodSeconds"))
        uid = (opts.get("preconditions") or {}).get("uid")
        return grace, uid

    def delete(self, resource, ns, name):
        grace, uid = self.delete_options()
        obj = self.server.cluster.delete(resource, ns, name, grace, uid)
        self.send_json(200, self.out(resource, obj))

    def delete_collection(self, resource, ns):
        grace, _ = self.delete_options()
        labels, fields = self.selectors()
        items, _ = self.server.store.list(resource, ns, labels, fields)
        out = []
        for o in items:
            try:
                out.append(self.out(resource, self.server.cluster.delete(resource, o["metadata"].get("namespace"), o["metadata"]["name"], grace)))
            except ApiError:
                pass
        self.send_json(200, {"kind": RESOURCES[resource][2] + "List", "apiVersion": api_version(resource),
                             "metadata": {}, "items": out})

    def update(self, method, resource, ns, name, sub):
        body = self.body()
        st, cl = self.server.store, self.server.cluster
        with st.lock:
            cur = st.get(resource, ns, name)
            if cur is None:
                raise self.not_found(resource, name)
            if method == "PUT":
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
                want = (body.get("metadata") or {}).get("resourceVersion")
                if want and want != cur["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been modified; '
                                   'please apply your changes to the latest version and try again' % (resource, name),
                                   kind_details(resource, name))
                new = body
            else:
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                try:
                    if ctype == "application/json-patch+json":
                        new = json_patch(cur, body)
                    elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                        new = merge_patch(cur, body)
                    else:
                        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types include: "
                                       "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json")
                except ValueError as e:
                    raise ApiError(422, "Invalid", str(e))
            if not isinstance(new, dict):
                raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
            md, old_md = new.setdefault("metadata", {}), cur["metadata"]
            if md.get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the URL (%s)" % (md.get("name"), name))
            for k in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if k in old_md:
                    md[k] = old_md[k]
                else:
                    md.pop(k, None)
            if sub == "status":
                cur["status"] = new.get("status") or {}
                new = cur
            elif resource in ("pods", "persistentvolumeclaims", "nodes", "namespaces"):
                new["status"] = cur.get("status") or {}
            if resource == "nodes" and sub == "status":
                if (condition(new, "Ready") or {}).get("status") == "True":
                    cl.heartbeat(name)
            if resource == "pods" and (new.get("spec") or {}).get("nodeName") != (cur.get("spec") or {}).get("nodeName") \
                    and sub != "status" and (cur.get("spec") or {}).get("nodeName"):
                raise ApiError(422, "Invalid", 'Pod "%s" is invalid: spec: Forbidden: pod updates may not change fields other than ...' % name)
            new["kind"] = RESOURCES[resource][2]
            obj = st.put(resource, new)
            obj = cl.finish_if_done(resource, obj)
        self.send_json(200, self.out(resource, obj))

    def log(self, ns, name):
        pod = self.server.store.get("pods", ns, name)
        if pod is None:
            raise self.not_found("pods", name)
        raise ApiError(400, "BadRequest", "kfake does not serve pods/log (see tests/k8s/README.md)")

    def access_review(self):
        body = self.body() or {}
        ra = (body.get("spec") or {}).get("resourceAttributes") or {}
        res = ra.get("resource", "") + ("/" + ra["subresource"] if ra.get("subresource") else "")
        ok = self.user.allowed(ra.get("verb", ""), ra.get("group", ""), res, ra.get("namespace") or None)
        body.setdefault("metadata", {})
        body.update({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                     "status": {"allowed": ok, **({} if ok else {"reason": "no RBAC rule allows it"})}})
        self.send_json(201, body)

    # -- watch ---------------------------------------------------------
    def watch(self, resource, ns):
        labels, fields = self.selectors()
        rv = self.q1("resourceVersion", "")
        bookmarks = self.q1("allowWatchBookmarks") in ("1", "true")
        timeout = self.q1("timeoutSeconds")
        deadline = time.monotonic() + float(timeout) if timeout else None
        st = self.server.store
        kind, apiv = RESOURCES[resource][2], api_version(resource)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(etype, obj):
            line = json.dumps({"type": etype, "object": obj}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        try:
            w, backlog = st.open_watch(resource, ns, labels, fields, None if rv in ("", "0") else int(rv))
        except Gone as e:
            emit("ERROR", ApiError(410, "Expired", str(e)).status())
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True
            return
        except ValueError:
            raise ApiError(400, "BadRequest", "invalid resourceVersion %r" % rv)
        try:
            for etype, obj in backlog:
                emit(etype, self.out(resource, obj))
            while True:
                wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if wait <= 0:
                    break
                try:
                    ev = w.q.get(timeout=wait)
                except Exception:
                    continue
                if ev is None:
                    if w.closed == "reset":
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        self.kf_reset = True  # finish() closes: with linger 0 the peer gets an RST
                        self.close_connection = True
                        return
                    break
                etype, obj = ev
                if etype == "BOOKMARK":
                    if bookmarks:
                        emit("BOOKMARK", bookmark_object(kind, apiv, obj))
                    continue
                emit(etype, self.out(resource, obj))
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            st.close_watch(w)

    # -- exec / attach -------------------------------------------------
    def exec_proxy(self, ns, name, sub):
        if self.command != "GET" and self.command != "POST":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        # v1.24 authorizes the verb of the HTTP method: a WebSocket upgrade is a
        # GET (`get`), SPDY a POST (`create`); docs/kube-real-run.md
        self.authorize("get" if self.command == "GET" else "create", "", "pods/" + sub, ns, name)
        pod = self.server.store.get("pods", ns, name)
        if pod is None:
            raise self.not_found("pods", name)
        if (self.headers.get("Upgrade") or "").lower() != "websocket":
            raise ApiError(400, "BadRequest", "Upgrade request required (kfake serves pods/%s over WebSocket only)" % sub)
        # no phase check: "cannot exec into a container in a completed pod" is
        # kubectl's, client side; the real server dials the kubelet, which refuses
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        ctr = self.q1("container")
        if not ctr:
            if len(names) != 1:
                raise ApiError(400, "BadRequest", "a container name must be specified for pod %s, choose one of: [%s]" % (name, " ".join(names)))
            ctr = names[0]
        if ctr not in names:
            raise ApiError(400, "BadRequest", "container %s is not valid for pod %s" % (ctr, name))
        node_name = pod["spec"].get("nodeName")
        if not node_name:
            raise ApiError(400, "BadRequest", "pod %s does not have a host assigned" % name)
        node = self.server.store.get("nodes", None, node_name)
        if node is None:  # worded so by the real v1.24: kind pods, the node's name
            raise ApiError(404, "NotFound", 'pods "%s" not found' % node_name, kind_details("pods", node_name))
        st = node.get("status") or {}
        ip = next((a["address"] for a in st.get("addresses") or [] if a.get("type") == "InternalIP"), None)
        port = ((st.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        if not ip or not port:
            raise ApiError(500, None, "error dialing backend: node %s has no InternalIP or kubelet port" % node_name)
        try:
            raw = socket.create_connection((ip, int(port)), timeout=5)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            kube = self.server.kubelet_ctx.wrap_socket(raw, server_hostname=ip)
        except OSError as e:
            raise ApiError(500, None, "error dialing backend: dial tcp %s:%s: %s" % (ip, port, e))
        target = "/%s/%s/%s/%s?%s" % (sub, ns, name, ctr, self.kubelet_query(sub))
        head = ["GET %s HTTP/1.1" % target, "Host: %s:%s" % (ip, port)]
        for k, v in self.headers.items():
            if k.lower() in ("upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
                             "sec-websocket-protocol", "origin"):
                head.append("%s: %s" % (k, v))
        kube.settimeout(None)
        self.close_connection = True
        try:
            kf_net.relay(self.connection, kube, first_to_b=("\r\n".join(head) + "\r\n\r\n").encode())
        finally:
            kf_net.shutdown(kube)

    def kubelet_query(self, sub):
        """The query the kubelet gets, as the real server's streamParams
        (pkg/registry/core/pod/strategy.go, v1.24) builds it from the client's
        PodExecOptions: input/output/error/tty=1 for each one asked, then every
        command; nothing else (the container is in the path)."""
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query, keep_blank_values=True)
        on = lambda k: (q.get(k) or ["false"])[0].lower() not in ("", "0", "f", "false", "n", "no")  # noqa: E731
        out = [(kube, "1") for client, kube in (("stdin", "input"), ("stdout", "output"),
                                                ("stderr", "error"), ("tty", "tty")) if on(client)]
        if sub == "exec":
            out += [("command", c) for c in q.get("command") or []]
        return urllib.parse.urlencode(out)

    # -- knobs ---------------------------------------------------------
    def knob(self, method, what):
        if self.user is not self.server.auth.tokens.get(self.server.auth.admin):
            raise ApiError(403, "Forbidden", "the kfake knobs need the admin token")
        st, kn = self.server.store, self.server.knobs
        body = (self.body() if method == "POST" else None) or {}
        if what == "stats" and method == "GET":
            with st.lock:
                return self.send_json(200, {"resourceVersion": st.rv, "oldest": st.compacted,
                                            "watches": len(st.watches), "objects": len(st.objects)})
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", "knobs are POST")
        if what == "watches/close":
            mode = body.get("mode", "end")
            if mode not in ("end", "reset"):
                raise ApiError(400, "BadRequest", "mode is end or reset")
            return self.send_json(200, {"closed": st.close_all_watches(mode)})
        if what == "compact":
            return self.send_json(200, {"resourceVersion": st.compact()})
        if what == "bookmark":
            st.bookmark_all()
            return self.send_json(200, {})
        if what == "tokens":
            try:
                return self.send_json(200, {"token": self.server.auth.add_rules(str(body.get("name", "x")), body.get("rules") or [])})
            except ValueError as e:
                raise ApiError(400, "BadRequest", str(e))
        if what == "nodes":
            if not body.get("name"):
                raise ApiError(400, "BadRequest", "name is required")
            kn.add(body["name"])
            return self.send_json(200, {})
        parts = what.split("/")
        if len(parts) == 3 and parts[0] == "nodes" and parts[2] in ("notready", "lose", "restore"):
            try:
                getattr(kn, parts[2])(parts[1])
            except KeyError:
                raise ApiError(404, "NotFound", "no kubelet for node %s" % parts[1])
            return self.send_json(200, {})
        raise ApiError(404, "NotFound", "no such knob: %s" % what)


def serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
