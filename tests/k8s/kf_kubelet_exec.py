"""kf_kubelet_exec - the test kubelet's TLS server for exec and attach (what the API server dials).

`GET /exec/NS/POD/CONTAINER?command=..&input=1&output=1&error=1&tty=1` and `GET /attach/...`
with a WebSocket upgrade offering v4.channel.k8s.io: runs an Engine API exec
(or attach) on the pod's container and re-frames its bytes as v4.channel
(kf_ws); at the end of an exec, stream 3 carries the exit status (lesson 5).
Touches: its listening socket, the runtime through kf_engine, the kubelet's pod table.
"""

import http.server
import json
import socket
import socketserver
import threading
import urllib.parse

import kf_net
import kf_ws


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self, kubelet, ctx):
        self.kubelet, self.ctx = kubelet, ctx
        super().__init__(("127.0.0.1", 0), Handler)


def start(kubelet, ctx):
    srv = Server(kubelet, ctx)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # head and body are two writes
        self.request.settimeout(30)
        self.request = self.server.ctx.wrap_socket(self.request, server_side=True)
        self.request.settimeout(None)
        super().setup()

    def log_message(self, fmt, *args):
        pass

    def fail(self, code, text):
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        parts = u.path.split("/")[1:]
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        if len(parts) != 4 or parts[0] not in ("exec", "attach"):
            return self.fail(404, "404 page not found")
        kind, ns, pod, ctr = parts
        # the names the API server sends a kubelet (input/output/error/tty = "1"),
        # not the client's stdin/stdout/stderr: what a real apiserver dials with
        flag = lambda k: (q.get(k) or ["false"])[0] in ("1", "true")  # noqa: E731
        stdin, tty = flag("input"), flag("tty")
        protos = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",") if p.strip()]
        key = self.headers.get("Sec-WebSocket-Key")
        if (self.headers.get("Upgrade") or "").lower() != "websocket" or not key:
            return self.fail(400, "kfake kubelet: a WebSocket upgrade is required")
        if kf_ws.PROTOCOL not in protos:
            return self.fail(400, "kfake kubelet: subprotocol %s is required (offered: %s)" % (kf_ws.PROTOCOL, ", ".join(protos) or "none"))
        if not (stdin or flag("output") or flag("error")):
            return self.fail(400, "you must specify at least 1 of stdin, stdout, stderr")
        if tty and flag("error"):
            return self.fail(400, "stdout, stderr: tty and stderr cannot both be true")
        kl = self.server.kubelet
        cid, p = kl.find_container(ns, pod, ctr)
        if cid is None:
            return self.fail(500, 'container not found ("%s")' % ctr)
        try:
            if kind == "exec":
                cmd = q.get("command") or []
                if not cmd:
                    return self.fail(400, "you must specify at least one command for the container")
                eid, stream = kl.rt.exec_start(cid, cmd, stdin, tty)
            else:
                spec = next((c for c in p["spec"]["containers"] if c["name"] == ctr), {})
                if stdin and not spec.get("stdin"):
                    return self.fail(400, "stdin is not enabled for this container (spec.containers[].stdin)")
                eid, stream = None, kl.rt.attach(cid, stdin, bool(spec.get("tty")))
        except Exception as e:  # the runtime refused: the client sees why
            return self.fail(500, "kfake kubelet: %s" % e)
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", kf_ws.accept_key(key))
        self.send_header("Sec-WebSocket-Protocol", kf_ws.PROTOCOL)
        self.end_headers()
        self.close_connection = True
        try:
            # as the real streaming server (remotecommand's createWebSocketStreams):
            # an empty message on the lowest writable stream says the connection is up
            first = kf_ws.STDOUT if flag("output") else kf_ws.STDERR if flag("error") else kf_ws.STATUS
            self.connection.sendall(kf_ws.channel(first, b"", mask=False))
            self.pump(kl, eid, stream)
        finally:
            stream.close()

    def pump(self, kl, eid, stream):
        ws = self.connection
        ws.setblocking(False)
        parser = kf_ws.Parser(require_mask=True)
        client_closed = False
        while not stream.eof:
            ready = [stream.sock] if stream.pending else kf_net.wait_readable([ws, stream.sock], 5.0)
            for s in ready:
                if s is stream.sock:
                    for n, data in stream.read():
                        if data and not kf_net.send_all(ws, kf_ws.channel(n, data, mask=False)):
                            return
                    continue
                data = kf_net.recv_some(ws)
                if data is None:
                    continue
                if not data:
                    return
                try:
                    msgs = parser.feed(data)
                except ValueError:
                    kf_net.send_all(ws, kf_ws.close_frame(1002, mask=False))
                    return
                for op, payload in msgs:
                    if op == kf_ws.OP_CLOSE:
                        kf_net.send_all(ws, kf_ws.close_frame(1000, mask=False))
                        client_closed = True
                        return
                    if op == kf_ws.OP_PING:
                        kf_net.send_all(ws, kf_ws.encode(kf_ws.OP_PONG, payload, mask=False))
                    elif op == kf_ws.OP_BINARY and payload:
                        if payload[0] == kf_ws.STDIN:
                            stream.write(payload[1:])
                        elif payload[0] == kf_ws.RESIZE and eid:
                            try:
                                size = json.loads(payload[1:])
                                kl.rt.exec_resize(eid, size.get("Width", 80), size.get("Height", 24))
                            except (ValueError, OSError):
                                pass
        if eid is not None and not client_closed:
            try:
                code = kl.rt.exec_exit(eid)
                status = kf_ws.exit_status(code) if code is not None else kf_ws.error_status("exit code unknown")
            except Exception as e:  # report, do not hang the client
                status = kf_ws.error_status(str(e))
            kf_net.send_all(ws, kf_ws.channel(kf_ws.STATUS, status, mask=False))
        kf_net.send_all(ws, kf_ws.close_frame(1000, mask=False))
