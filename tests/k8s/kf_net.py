"""kf_net - TLS contexts, HTTP head reading and byte relays for the fake cluster.

Used by the API server (exec/attach proxy to the kubelet), the kubelet (Engine
API hijack) and the test client. Touches only the sockets it is given and the
certificate files it is pointed at.
"""

import select
import socket
import ssl


def server_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def client_context(ca):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    return ctx


def read_head(sock, limit=65536):
    """Read an HTTP head from SOCK; returns (head bytes without the blank line,
    bytes already read past it). Raises ConnectionError on EOF first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("connection closed before the HTTP head ended")
        buf += chunk
        if len(buf) > limit:
            raise ConnectionError("HTTP head over %d bytes" % limit)
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head, rest


def parse_head(head):
    """-> (status int, {lower name: value})"""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    hdrs = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
    return status, hdrs


class Dechunker:
    """Incremental HTTP/1.1 chunked decoding: feed(bytes) -> payload bytes;
    .done once the last chunk has been seen."""

    def __init__(self):
        self.buf = bytearray()
        self.need = None
        self.done = False

    def feed(self, data):
        self.buf += data
        out = []
        while not self.done:
            if self.need is None:
                j = self.buf.find(b"\r\n")
                if j < 0:
                    break
                n = int(bytes(self.buf[:j]).split(b";")[0] or b"0", 16)
                del self.buf[:j + 2]
                if n == 0:
                    self.done = True
                    break
                self.need = n
            if len(self.buf) < self.need + 2:
                break
            out.append(bytes(self.buf[:self.need]))
            del self.buf[:self.need + 2]
            self.need = None
        return b"".join(out)


def recv_some(sock, n=65536):
    """One non-blocking read: bytes, b"" at EOF, None when nothing is ready."""
    try:
        return sock.recv(n)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
        return None
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError):
        return b""


def send_all(sock, data, timeout=30.0):
    """sendall on a non-blocking (maybe TLS) socket; False when the peer is gone."""
    view = memoryview(data)
    while view:
        try:
            n = sock.send(view)
            view = view[n:]
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            r, w, _ = select.select([sock], [sock], [], timeout)
            if not r and not w:
                return False
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError):
            return False
    return True


def wait_readable(socks, timeout):
    """Sockets of SOCKS with bytes to read (TLS-buffered ones count)."""
    ready = [s for s in socks if isinstance(s, ssl.SSLSocket) and s.pending()]
    if ready:
        return ready
    r, _, _ = select.select(socks, [], [], timeout)
    return r


def relay(a, b, first_to_a=b"", first_to_b=b""):
    """Copy bytes both ways between A and B until either side ends; closes
    neither. Both are made non-blocking."""
    a.setblocking(False)
    b.setblocking(False)
    if first_to_a and not send_all(a, first_to_a):
        return
    if first_to_b and not send_all(b, first_to_b):
        return
    peer = {a: b, b: a}
    while True:
        for s in wait_readable([a, b], 5.0):
            data = recv_some(s)
            if data is None:
                continue
            if not data or not send_all(peer[s], data):
                return


def shutdown(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
