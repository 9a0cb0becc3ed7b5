"""kf_client - a small Kubernetes REST client (stdlib only) for the test kubelet and the suites.

REST calls (JSON, bearer token, the test CA), a watch iterator over the chunked
JSON-lines stream, and the client end of pods/exec and pods/attach over WebSocket
with v4.channel.k8s.io (kf_ws). Touches only the connections it opens.
"""

import http.client
import json
import socket
import threading
import urllib.parse

import kf_net
import kf_ws


class KubeError(Exception):
    def __init__(self, method, path, status, body):
        self.status, self.body = status, body
        self.reason = body.get("reason") if isinstance(body, dict) else None
        msg = body.get("message") if isinstance(body, dict) else body
        super().__init__("%s %s -> %d %s: %s" % (method, path, status, self.reason, msg))


class Channel:
    """An open v4.channel WebSocket (client end)."""

    def __init__(self, sock, rest):
        self.sock = sock
        self.parser = kf_ws.Parser()
        self.pending = list(self.parser.feed(rest))
        self.closed = False

    def send(self, stream, data):
        self.sock.sendall(kf_ws.channel(stream, data, mask=True))

    def recv(self, timeout=None):
        """Next (stream, bytes); None once the peer closed the WebSocket."""
        while not self.pending:
            if self.closed:
                return None
            self.sock.settimeout(timeout)
            data = self.sock.recv(65536)
            if not data:
                self.closed = True
                return None
            self.pending.extend(self.parser.feed(data))
        while self.pending:
            op, payload = self.pending.pop(0)
            if op == kf_ws.OP_CLOSE:
                self.closed = True
                try:
                    self.sock.sendall(kf_ws.close_frame(1000, mask=True))
                except OSError:
                    pass
                return None
            if op == kf_ws.OP_PING:
                self.sock.sendall(kf_ws.encode(kf_ws.OP_PONG, payload, mask=True))
                continue
            if op == kf_ws.OP_BINARY and payload:
                return payload[0], payload[1:]
        return self.recv(timeout)

    def close(self):
        try:
            self.sock.sendall(kf_ws.close_frame(1000, mask=True))
        except OSError:
            pass
        kf_net.shutdown(self.sock)


class Client:
    def __init__(self, server, ca, token, timeout=30):
        u = urllib.parse.urlsplit(server)
        self.host, self.port = u.hostname, u.port
        self.ctx = kf_net.client_context(ca)
        self.token = token
        self.timeout = timeout
        self.local = threading.local()

    def _conn(self, fresh=False):
        c = getattr(self.local, "conn", None)
        if c is None or fresh:
            if c is not None:
                c.close()
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=self.timeout)
            c.connect()
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.local.conn = c
        return c

    def request(self, method, path, body=None, params=None, ctype="application/json"):
        """-> (status, decoded JSON or text)."""
        if params:
            path += "?" + urllib.parse.urlencode(params, doseq=True)
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        if data is not None:
            hdrs["Content-Type"] = ctype
        for attempt in (0, 1):
            c = self._conn(fresh=attempt == 1)
            try:
                c.request(method, path, body=data, headers=hdrs)
                r = c.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, OSError):
                if attempt:
                    raise
        if r.getheader("Connection", "").lower() == "close":
            self._conn(fresh=True)
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode(errors="replace")

    def call(self, method, path, body=None, params=None, ok=(200, 201), ctype="application/json"):
        st, obj = self.request(method, path, body, params, ctype)
        if st not in ok:
            raise KubeError(method, path, st, obj)
        return obj

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.call("POST", path, body, **kw)

    def patch(self, path, body, **kw):
        return self.call("PATCH", path, body, ctype="application/merge-patch+json", **kw)

    def delete(self, path, body=None, **kw):
        return self.call("DELETE", path, body, **kw)

    def watch(self, path, params=None, timeout=None):
        """Yield (type, object) from a watch until the stream ends cleanly;
        ConnectionError when it is cut (EOF before the last chunk)."""
        params = dict(params or {})
        params["watch"] = "1"
        raw = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock = self.ctx.wrap_socket(raw, server_hostname=self.host)
        try:
            sock.sendall(("GET %s?%s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n"
                          "Accept: application/json\r\n\r\n" % (path, urllib.parse.urlencode(params),
                                                                 self.host, self.port, self.token)).encode())
            head, rest = kf_net.read_head(sock)
            status, hdrs = kf_net.parse_head(head)
            if status != 200:
                n = int(hdrs.get("content-length") or 0)
                while len(rest) < n:
                    more = sock.recv(65536)
                    if not more:
                        break
                    rest += more
                raise KubeError("GET", path, status, json.loads(rest[:n] or b"null"))
            sock.settimeout(timeout)
            dc, buf = kf_net.Dechunker(), b""
            data = rest
            while True:
                buf += dc.feed(data)
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        ev = json.loads(line)
                        yield ev["type"], ev["object"]
                if dc.done:
                    return
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("watch stream cut before its last chunk")
        finally:
            kf_net.shutdown(sock)

    def channel(self, ns, pod, sub="exec", params=None, protocols=(kf_ws.PROTOCOL,)):
        """Open pods/exec or pods/attach; returns a Channel. Raises KubeError
        with the Status when the server does not upgrade."""
        path = "/api/v1/namespaces/%s/pods/%s/%s?%s" % (ns, pod, sub, urllib.parse.urlencode(params or {}, doseq=True))
        raw = socket.create_connection((self.host, self.port), timeout=self.timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = self.ctx.wrap_socket(raw, server_hostname=self.host)
        key = kf_ws.client_key()
        head = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Protocol: %s\r\n\r\n" % (path, self.host, self.port, self.token, key, ", ".join(protocols)))
        sock.sendall(head.encode())
        h, rest = kf_net.read_head(sock)
        status, hdrs = kf_net.parse_head(h)
        if status != 101:
            n = int(hdrs.get("content-length") or 0)
            while len(rest) < n:
                more = sock.recv(65536)
                if not more:
                    break
                rest += more
            kf_net.shutdown(sock)
            try:
                body = json.loads(rest[:n])
            except ValueError:
                body = rest.decode(errors="replace")
            raise KubeError("GET", path, status, body)
        if hdrs.get("sec-websocket-accept") != kf_ws.accept_key(key):
            raise KubeError("GET", path, status, "bad Sec-WebSocket-Accept")
        ch = Channel(sock, rest)
        ch.protocol = hdrs.get("sec-websocket-protocol")
        return ch

    def exec(self, ns, pod, command, container=None, stdin=None, tty=False, timeout=60):
        """Run COMMAND (list) in the pod; returns (exit code, stdout, stderr, status dict)."""
        params = {"command": list(command), "stdout": "true", "stderr": "false" if tty else "true",
                  "stdin": "true" if stdin is not None else "false", "tty": "true" if tty else "false"}
        if container:
            params["container"] = container
        ch = self.channel(ns, pod, "exec", params)
        out, err, status = [], [], None
        try:
            if stdin:
                ch.send(kf_ws.STDIN, stdin)
            while True:
                m = ch.recv(timeout)
                if m is None:
                    break
                stream, data = m
                if stream == kf_ws.STDOUT:
                    out.append(data)
                elif stream == kf_ws.STDERR:
                    err.append(data)
                elif stream == kf_ws.STATUS and data:
                    status = json.loads(data)
        finally:
            ch.close()
        code = None
        if status is not None:
            if status.get("status") == "Success":
                code = 0
            else:
                for c in (status.get("details") or {}).get("causes") or []:
                    if c.get("reason") == "ExitCode":
                        code = int(c["message"])
        return code, b"".join(out), b"".join(err), status
