"""consolefix - what the browser tests of /console share (test_console.py, test_console_term.py).

browser_stack() checks that node, Debian's chromium and tests/e2e's
playwright-core are there and brings up an api and broker (stackfix.Stack)
with one NPC whose sandbox is running; CuttableProxy is a TCP proxy on
127.0.0.1:0 the tests cut: every open connection of a page drops at once.
"""

import os
import select
import socket
import threading

import sbxtest
from sbxtest import REPO
from stackfix import Stack

E2E = os.path.join(REPO, "tests", "e2e")
NODE = "/usr/bin/node"


def browser_stack(prefix, npc):
    """A Stack (its player's key in .player) with NPC npc and its sandbox up;
    AssertionError naming what is missing when the browser tools are not."""
    for path in (NODE, "/usr/bin/chromium", os.path.join(E2E, "node_modules", "playwright-core")):
        if not os.path.exists(path):
            raise AssertionError("%s is missing: run deploy/deps.sh (make check does)" % path)
    st = Stack("%s%d-" % (prefix, os.getpid() % 100000))
    try:
        host, port = "127.0.0.1", int(st.url.rsplit(":", 1)[1])
        r = sbxtest.tcp_http(host, port, "POST", "/api/v1/npcs", {"name": npc},
                             {"Authorization": "Bearer " + st.player})
        assert r.status == 201, r.body
        r = sbxtest.tcp_http(host, port, "PUT", "/api/v1/npcs/%s/sandbox" % npc, None,
                             {"Authorization": "Bearer " + st.player}, 120)
        assert r.status == 200, r.body
    except BaseException:
        st.close()
        raise
    return st, host, port


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
