"""agentproto.py - a small client of helper protocol 4 (proto/sbx_agent.h) for tests and measurements."""
import struct

PROTO = 4
HDR = 12
T_HELLO, T_PING, T_PONG, T_OPEN, T_DATA, T_EOF, T_WINDOW, T_CANCEL, T_EXIT, T_REFUSE, T_CTRL, T_EVENT = range(1, 13)
OPEN_STDIN, OPEN_CTRL = 1, 2
EXIT_EXITED, EXIT_SIGNALED = 1, 2
CTRL_RESIZE, CTRL_SIGNAL = 1, 2
WINDOW = 256 * 1024


def frame(typ, stream=0, payload=b"", flags=0):
    return struct.pack(">BBBBII", typ, PROTO, flags, 0, stream, len(payload)) + payload


def open_frame(stream, argv, env=(), stdin=False, ctrl=False):
    body = struct.pack(">II", len(argv), len(env))
    for s in list(argv) + list(env):
        body += s.encode() + b"\0"
    return frame(T_OPEN, stream, body, (OPEN_STDIN if stdin else 0) | (OPEN_CTRL if ctrl else 0))


def resize_frame(stream, cols, rows):
    return frame(T_CTRL, stream, struct.pack(">IHH", CTRL_RESIZE, cols, rows))


def signal_frame(stream, signo):
    return frame(T_CTRL, stream, struct.pack(">II", CTRL_SIGNAL, signo))


class Decoder:
    """Feeds bytes, yields (type, flags, stream, payload)."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        out = []
        while len(self.buf) >= HDR:
            typ, ver, flags, zero, stream, n = struct.unpack(">BBBBII", self.buf[:HDR])
            if ver != PROTO or zero != 0:
                raise ValueError("bad header %r" % self.buf[:HDR])
            if len(self.buf) < HDR + n:
                break
            out.append((typ, flags, stream, self.buf[HDR:HDR + n]))
            self.buf = self.buf[HDR + n:]
        return out


class Runtime8:
    """Demultiplexes the Engine API's 8-byte framed attach stream."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        out = {1: b"", 2: b""}
        while len(self.buf) >= 8:
            st = self.buf[0]
            n = struct.unpack(">I", self.buf[4:8])[0]
            if len(self.buf) < 8 + n:
                break
            out[st] = out.get(st, b"") + self.buf[8:8 + n]
            self.buf = self.buf[8 + n:]
        return out
