"""kf_ws - WebSocket (RFC 6455) framing and the v4.channel.k8s.io layer, both ends.

Used by the test kubelet (server end of pods/exec and pods/attach) and by the
Python test client (client end). Touches nothing but the socket it is given:
no threads, no global state. Frames are written here (stdlib only).

v4.channel.k8s.io (issue 27, lesson 5): every binary message's first byte is
the stream: 0 stdin, 1 stdout, 2 stderr, 3 status (a Status JSON at the end),
4 resize ({"Width": W, "Height": H}).
"""

import base64
import hashlib
import json
import os
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PROTOCOL = "v4.channel.k8s.io"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
STDIN, STDOUT, STDERR, STATUS, RESIZE = 0, 1, 2, 3, 4


def accept_key(key):
    """Sec-WebSocket-Accept for the client's Sec-WebSocket-Key (str)."""
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def client_key():
    return base64.b64encode(os.urandom(16)).decode()


def encode(opcode, payload, mask):
    """One final frame. MASK: True on the client end (RFC 6455 5.3)."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    mbit = 0x80 if mask else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack(">H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + unmask(payload, key)


def unmask(payload, key):
    if not payload:
        return b""
    k = (key * (len(payload) // 4 + 1))[:len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(k, "big")).to_bytes(len(payload), "big")


class Parser:
    """Incremental frame parser: feed(bytes) -> list of (opcode, payload) of
    whole messages (continuations joined, control frames passed through).
    REQUIRE_MASK: the server end refuses unmasked client frames (ValueError)."""

    def __init__(self, require_mask=False, max_message=64 << 20):
        self.buf = bytearray()  # appended in place: a large frame arrives in many reads
        self.require_mask = require_mask
        self.max_message = max_message
        self.frag_op = None
        self.frag = []

    def feed(self, data):
        self.buf += data
        out = []
        while True:
            b = self.buf
            if len(b) < 2:
                return out
            fin, op = b[0] & 0x80, b[0] & 0x0F
            key = b""
            masked, n = b[1] & 0x80, b[1] & 0x7F
            i = 2
            if n == 126:
                if len(b) < 4:
                    return out
                n = struct.unpack(">H", bytes(b[2:4]))[0]
                i = 4
            elif n == 127:
                if len(b) < 10:
                    return out
                n = struct.unpack(">Q", bytes(b[2:10]))[0]
                i = 10
            if n > self.max_message:
                raise ValueError("websocket frame of %d bytes is over the limit" % n)
            if self.require_mask and not masked:
                raise ValueError("unmasked client frame")
            if masked:
                if len(b) < i + 4:
                    return out
                key = bytes(b[i:i + 4])
                i += 4
            if len(b) < i + n:
                return out
            payload = bytes(b[i:i + n])
            if masked:
                payload = unmask(payload, key)
            del self.buf[:i + n]
            if op >= 8:
                out.append((op, payload))
            elif op == OP_CONT:
                self.frag.append(payload)
                if fin:
                    out.append((self.frag_op, b"".join(self.frag)))
                    self.frag_op, self.frag = None, []
            elif fin:
                out.append((op, payload))
            else:
                self.frag_op, self.frag = op, [payload]


def channel(stream, data, mask):
    """A v4.channel message: binary frame, first byte the stream."""
    return encode(OP_BINARY, bytes([stream]) + data, mask)


def close_frame(code, mask, reason=b""):
    return encode(OP_CLOSE, struct.pack(">H", code) + reason, mask)


def exit_status(code):
    """The stream-3 Status JSON for an exit code (lesson 5), as bytes."""
    if code == 0:
        st = {"metadata": {}, "status": "Success"}
    else:
        st = {"metadata": {}, "status": "Failure",
              "message": "command terminated with non-zero exit code: error executing "
                         "command [exit %d], exit code %d" % (code, code),
              "reason": "NonZeroExitCode",
              "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
    return json.dumps(st).encode()


def error_status(message):
    """The stream-3 Status for a failure that is no exit code (exec could not start)."""
    return json.dumps({"metadata": {}, "status": "Failure", "message": message,
                       "reason": "InternalError"}).encode()
