"""cutproxy - a TCP proxy the browser tests cut: every open connection of a page drops at once.

Shared by tests/integration/test_console.py and test_console_term.py; binds
127.0.0.1:0 and forwards byte for byte to one local port.
"""

import select
import socket
import threading


class CuttableProxy:
    """127.0.0.1:0 -> TARGET, byte for byte; cut() closes every open
    connection (new ones are accepted as before)."""

    def __init__(self, target_port):
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.pairs = []
        self.cuts = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            with self.lock:
                self.pairs.append((c, u))
            threading.Thread(target=self._pipe, args=(c, u), daemon=True).start()

    def _pipe(self, c, u):
        socks = [c, u]
        try:
            while True:
                r, _, _ = select.select(socks, [], [], 1.0)
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        raise OSError("closed")
                    (u if s is c else c).sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            for s in socks:
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self):
        with self.lock:
            pairs, self.pairs = self.pairs, []
            self.cuts += 1
        for c, u in pairs:
            for s in (c, u):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        return len(pairs)

    def close(self):
        self.closed = True
        self.lsock.close()
        self.cut()
