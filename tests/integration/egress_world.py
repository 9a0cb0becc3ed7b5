#!/usr/bin/python3
# egress_world.py - "the internet" for the egress proxy tests: HTTP/HTTPS servers on the addresses given and a test DNS server; run inside a network namespace the test made (adr/0026).
#
#   egress_world.py --dir DIR --dns IP --http IP:PORT... --https IP:PORT...
#
# Every HTTP(S) server answers any GET/POST with "served-by IP:PORT path-len N\n"
# (never the path itself). The DNS server (UDP, port 53 of --dns) answers
# A queries from DIR/zone.json ({"name": ["ip", ...]} ; a name with a list of
# lists ["flip", [first...], [then...]] answers the first list to the first
# query and the second to every later one: DNS rebinding), AAAA with no
# answer, unknown names NXDOMAIN, TTL 0; every A query is appended to
# DIR/queries as "NAME\n". The zone is re-read at each query. Prints
# "ready" on stdout once everything listens; stops on SIGTERM.

import argparse
import http.server
import json
import os
import signal
import socket
import socketserver
import ssl
import struct
import sys
import threading


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        host, port = self.server.server_address[:2]
        body = ("served-by %s:%d path-len %d host %s\n" % (
            host, port, len(self.path), self.headers.get("Host", "-"))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = reply
    do_POST = reply


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self):
        # Not HTTPServer.server_bind: that looks the address up in DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def serve(addr, ctx=None):
    ip, port = addr.rsplit(":", 1)
    s = Server((ip, int(port)), Handler)
    if ctx is not None:
        s.socket = ctx.wrap_socket(s.socket, server_side=True)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s


def dns(ip, d):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((ip, 53))
    seen = {}

    def loop():
        while True:
            q, peer = sock.recvfrom(2048)
            try:
                sock.sendto(answer(q), peer)
            except Exception as e:     # a bad query: no answer, keep serving
                print("dns: %r" % e, file=sys.stderr)

    def answer(q):
        qid, flags, qd = struct.unpack("!HHH", q[:6])
        i, labels = 12, []
        while q[i] != 0:
            labels.append(q[i + 1:i + 1 + q[i]].decode())
            i += 1 + q[i]
        qtype, _ = struct.unpack("!HH", q[i + 1:i + 5])
        question = q[12:i + 5]
        name = ".".join(labels).lower()
        with open(os.path.join(d, "zone.json")) as f:
            zone = json.load(f)
        rec = zone.get(name)
        head = lambda rcode, an: struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1, an, 0, 0)
        if rec is None:
            return head(3, 0) + question
        if qtype != 1:
            return head(0, 0) + question
        with open(os.path.join(d, "queries"), "a") as f:
            f.write(name + "\n")
        if rec and rec[0] == "flip":
            n = seen.get(name, 0)
            seen[name] = n + 1
            rec = rec[1] if n == 0 else rec[2]
        out = head(0, len(rec)) + question
        for a in rec:
            out += struct.pack("!HHHIH", 0xc00c, 1, 1, 0, 4) + socket.inet_aton(a)
        return out

    threading.Thread(target=loop, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--dns", required=True)
    p.add_argument("--http", action="append", default=[])
    p.add_argument("--https", action="append", default=[])
    a = p.parse_args()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(a.dir, "cert.pem"), os.path.join(a.dir, "key.pem"))
    for h in a.http:
        serve(h)
    for h in a.https:
        serve(h, ctx)
    dns(a.dns, a.dir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()


if __name__ == "__main__":
    main()
