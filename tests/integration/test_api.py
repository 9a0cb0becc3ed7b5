"""test_api - sandbox-api in front of a real sandbox-broker, both real processes on
real sockets, on the runtime under test (SPEC §5, §8; docs/api.md): players,
operators and NPCs over the broker, exec streamed as Server-Sent Events.

The api runs as root with `--user nobody` (it drops privileges after binding), at
debug log level, so the checks on its logs, its file descriptors and its
database see the most it could leak.
"""

import base64
import http.client
import json
import os
import pwd
import re
import socket
import sqlite3
import subprocess
import time
import unittest
import urllib.parse

import sbxtest
from sbxtest import REPO
from stackfix import Stack

GOLDEN = os.environ.get("SBX_GOLDEN_DIR") or os.path.join(REPO, "proto", "golden")
API_USER = "nobody"

HELLO_SH = (b"#!/bin/sh\n"
            b"# one printf, one write: the output arrives as one chunk\n"
            b"printf 'hello from sh, uid %s: caf\\303\\251 \\342\\202\\254\\n' \"$(id -u)\"\n"
            b"exit 3\n")
HELLO_OUT = "hello from sh, uid 1000: caf\u00e9 \u20ac\n"
EGRESS_SENTENCE = ("Network egress is granted by an operator; ask an operator to run "
                   "`sbxctl egress grant alice`.")


# ------------------------------------------------------------ SPEC §5 mapping

def _members(line):
    """The top-level members of the JSON object text LINE as (key, raw text of
    the member) pairs, each member's bytes exactly as written."""
    dec = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")
    i = ws.match(line, 0).end()
    if line[i:i + 1] != "{":
        raise ValueError("not a JSON object: %r" % line[:80])
    i = ws.match(line, i + 1).end()
    out = []
    if line[i:i + 1] == "}":
        return out
    while True:
        start = i
        key, i = json.decoder.scanstring(line, i + 1) if line[i] == '"' else (None, -1)
        if key is None:
            raise ValueError("bad member at %d: %r" % (start, line[:80]))
        i = ws.match(line, i).end()
        if line[i] != ":":
            raise ValueError("no ':' at %d" % i)
        i = ws.match(line, i + 1).end()
        _, i = dec.raw_decode(line, i)
        out.append((key, line[start:i]))
        i = ws.match(line, i).end()
        if line[i] == "}":
            if line[i + 1:].strip():
                raise ValueError("text after the object")
            return out
        if line[i] != ",":
            raise ValueError("no ',' at %d" % i)
        i = ws.match(line, i + 1).end()


def sse_from_ndjson(ndjson, first_id=1):
    """SPEC §5: each NDJSON event line becomes `id: N`, `event: <type>`,
    `data: <the same JSON without "type">`, blank line. The other members keep
    their bytes and order. Returns bytes."""
    out = []
    n = first_id
    for raw in ndjson.split(b"\n"):
        if not raw:
            continue
        line = raw.decode("utf-8")
        members = _members(line)
        types = [json.loads(text.split(":", 1)[1]) for key, text in members if key == "type"]
        if len(types) != 1 or not isinstance(types[0], str):
            raise ValueError("event without one string type: %r" % line[:80])
        data = "{" + ",".join(text for key, text in members if key != "type") + "}"
        # The data line is the object minus "type", nothing else.
        want = json.loads(line)
        del want["type"]
        assert json.loads(data) == want
        out.append("id: %d\nevent: %s\ndata: %s\n\n" % (n, types[0], data))
        n += 1
    return "".join(out).encode("utf-8")


def parse_sse(body):
    """Our SSE (id/event/data per event, `: ` comments): [(id, event, data dict)]."""
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        fields = {}
        for ln in block.split("\n"):
            if not ln or ln.startswith(":"):
                continue
            k, _, v = ln.partition(": ")
            fields[k] = v
        if fields:
            events.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events


def normalise(sse):
    """What differs between two runs of one command: exec id, start time, duration."""
    sse = re.sub(rb'"exec_id":"[^"]*"', b'"exec_id":"E"', sse)
    sse = re.sub(rb'"ts":[0-9]+', b'"ts":0', sse)
    return re.sub(rb'"duration_ms":[0-9]+', b'"duration_ms":0', sse)


class SSEMappingTest(unittest.TestCase):
    """The Python mapping the stack test relies on is SPEC §5's: it reproduces
    every golden transcript of proto/golden byte for byte."""

    def test_mapping_reproduces_every_golden_transcript(self):
        names = sorted(f[:-len(".ndjson")] for f in os.listdir(GOLDEN) if f.endswith(".ndjson"))
        self.assertGreaterEqual(len(names), 7, names)
        for name in names:
            with open(os.path.join(GOLDEN, name + ".ndjson"), "rb") as f:
                nd = f.read()
            with open(os.path.join(GOLDEN, name + ".sse"), "rb") as f:
                sse = f.read()
            self.assertEqual(sse_from_ndjson(nd), sse, name)


# ------------------------------------------------------------ clients

class Client:
    """HTTP/1.1 to one api URL with one key."""

    def __init__(self, url, key):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.key = u.hostname, u.port, key

    def req(self, method, path, body=None, key=None, headers=None, timeout=60):
        hdrs = dict(headers or {})
        k = self.key if key is None else key
        if k:
            hdrs["Authorization"] = "Bearer " + k
        return sbxtest.tcp_http(self.host, self.port, method, path, body, hdrs, timeout)

    def stream(self, path, body, key=None):
        return SSEStream(self, path, body, key)


class SSEStream:
    """A POST whose SSE answer is read as it arrives, each event stamped with
    the monotonic time it was read."""

    def __init__(self, client, path, body, key=None):
        self.conn = http.client.HTTPConnection(client.host, client.port, timeout=30)
        data = json.dumps(body).encode()
        self.conn.request("POST", path, body=data, headers={
            "Authorization": "Bearer " + (key or client.key),
            "Content-Type": "application/json"})
        self.sock = self.conn.sock
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.buf = b""
        self.raw = b""
        self.events = []     # (monotonic time, event, data dict)

    def next_event(self):
        """The next event (time, type, data); None at the end of the stream."""
        while b"\n\n" not in self.buf:
            chunk = self.resp.read1(65536)
            if not chunk:
                return None
            self.raw += chunk
            self.buf += chunk
        block, self.buf = self.buf.split(b"\n\n", 1)
        ev = parse_sse(block + b"\n\n")
        if not ev:
            return self.next_event()    # a comment (heartbeat)
        e = (time.monotonic(), ev[0][1], ev[0][2])
        self.events.append(e)
        return e

    def close(self):
        """Drop the connection at once (the client going away)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.resp.close()
        self.conn.close()


def err_code(r):
    return (r.json() or {}).get("error", {}).get("code")


def err_message(r):
    return (r.json() or {}).get("error", {}).get("message")


# ------------------------------------------------------------ /proc views

def socket_inodes(pid):
    """Inodes of the unix/inet sockets PID holds (from /proc/PID/fd)."""
    out = set()
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            link = os.readlink(os.path.join(d, fd))
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]$", link)
        if m:
            out.add(int(m.group(1)))
    return out


def unix_paths():
    """inode -> path of every bound unix socket (/proc/net/unix); accepted
    connections carry their listener's path."""
    out = {}
    with open("/proc/net/unix") as f:
        next(f)
        for ln in f:
            parts = ln.split()
            if len(parts) >= 8:
                out[int(parts[6])] = parts[7]
    return out


def unix_peers():
    """inode -> peer inode of every connected unix socket (ss -x)."""
    r = subprocess.run(["ss", "-xaH"], capture_output=True, text=True, timeout=30)
    out = {}
    for ln in r.stdout.splitlines():
        parts = ln.split()
        if len(parts) >= 4 and parts[-1].isdigit() and parts[-3].isdigit():
            out[int(parts[-3])] = int(parts[-1])
    return out


def unix_paths_reached(pid):
    """Paths of the unix sockets PID holds, its own and its peers'."""
    paths, peers = unix_paths(), unix_peers()
    out = set()
    for ino in socket_inodes(pid):
        for i in (ino, peers.get(ino)):
            if i in paths:
                out.add(paths[i])
    return out


# ------------------------------------------------------------ the stack

class APIStackTest(unittest.TestCase):
    """One broker and one api (as nobody), shared; tests run in name order and
    the last ones destroy everything and read the logs."""

    @classmethod
    def setUpClass(cls):
        cls.prefix = "sbxapit%d-" % (os.getpid() % 100000)
        cls.stack = Stack(cls.prefix, api_user=API_USER,
                          broker_args=["--log-level", "debug"],
                          api_args=["--log-level", "debug"])
        st = cls.stack
        cls.keys = [st.operator, st.player, st.other]
        cls.a = Client(st.url, st.player)
        cls.b = Client(st.url, st.other)
        cls.op = Client(st.url, st.operator)
        cls.canary = "CANARYKEY" + base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
        cls.limits_api = None
        # A player creates an NPC and ensures its sandbox (test_01 checks the answers).
        cls.created = cls.a.req("POST", "/api/v1/npcs", {"name": "alice"})
        cls.ensured = cls.a.req("PUT", "/api/v1/npcs/alice/sandbox")

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    # -------------------------------------------------------- helpers

    def broker_exec(self, sid, argv):
        """Exec ARGV in sandbox SID straight on the broker; returns (status,
        content type, NDJSON bytes)."""
        r = sbxtest.unix_http(self.stack.sock, "POST", "/v1/sandboxes/%s/exec" % sid,
                              {"argv": argv}, {"Authorization": "Bearer " + self.stack.token})
        return r.status, r.headers.get("Content-Type"), r.body

    def broker_stdout(self, sid, argv):
        status, _, body = self.broker_exec(sid, argv)
        self.assertEqual(status, 200, body)
        out = b""
        for ln in body.splitlines():
            ev = json.loads(ln)
            if ev["type"] == "stdout":
                out += ev["data"].encode() if "data" in ev else base64.b64decode(ev["data_b64"])
        return out.decode(errors="replace")

    def api_stdout(self, client, npc, argv):
        """Exec through the api; returns (stdout text, exit code)."""
        r = client.req("POST", "/api/v1/npcs/%s/sandbox/exec" % npc, {"argv": argv})
        self.assertEqual(r.status, 200, r.body)
        evs = parse_sse(r.body)
        # either member: the api forwards the broker's choice (adr/0028)
        out = "".join(d["data"] if "data" in d else
                      base64.b64decode(d["data_b64"]).decode(errors="replace")
                      for _, t, d in evs if t == "stdout")
        ex = [d for _, t, d in evs if t == "exit"]
        self.assertEqual(len(ex), 1, r.body)
        return out, ex[0]["code"]

    def container_of(self, sid):
        cs = [c for c in self.stack.managed()
              if c.get("Labels", {}).get(sbxtest.LABEL_ID) == sid]
        self.assertEqual(len(cs), 1, "containers of %s: %r" % (sid, cs))
        return cs[0]["Id"]

    def db(self, state_dir=None):
        path = os.path.join(state_dir or self.stack.api_state, "api.db")
        return sqlite3.connect("file:%s?mode=ro" % path, uri=True)

    def wait_no_process(self, sid, needle, within):
        """Poll `ps` in SID (through the broker) until NEEDLE is gone; returns
        the seconds it took, or fails after WITHIN s."""
        t0 = time.monotonic()
        while True:
            ps = self.broker_stdout(sid, ["ps", "-o", "pid,args"])
            took = time.monotonic() - t0
            if needle not in ps:
                return took
            if took > within:
                self.fail("%r still runs %.1f s later:\n%s" % (needle, took, ps))

    def wait_process(self, sid, needle):
        sbxtest.wait_until(lambda: needle in self.broker_stdout(sid, ["ps", "-o", "pid,args"]),
                           10, "%r to run in %s" % (needle, sid), interval=0.05)

    # -------------------------------------------------------- exec over SSE

    def test_01_player_exec_streams_stdout_then_exit_as_the_brokers_ndjson_mapped(self):
        self.assertEqual(self.created.status, 201, self.created.body)
        self.assertEqual(self.created.json()["sandbox_id"], "npc-alice")
        self.assertEqual(self.ensured.status, 200, self.ensured.body)
        self.assertEqual(self.ensured.json()["state"], "running")
        r = self.a.req("PUT", "/api/v1/npcs/alice/sandbox/files?path=/work/hello.sh&mode=0755",
                       HELLO_SH)
        self.assertEqual(r.status, 200, r.body)
        r = self.a.req("GET", "/api/v1/npcs/alice/sandbox/files?path=/work/hello.sh")
        self.assertEqual((r.status, r.body), (200, HELLO_SH))

        argv = ["sh", "/work/hello.sh"]
        r = self.a.req("POST", "/api/v1/npcs/alice/sandbox/exec", {"argv": argv})
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.headers.get("Content-Type"), "text/event-stream")
        self.assertEqual(r.headers.get("Cache-Control"), "no-cache")
        self.assertEqual(r.headers.get("X-Accel-Buffering"), "no")
        evs = parse_sse(r.body)
        self.assertEqual([(i, t) for i, t, _ in evs], [(1, "start"), (2, "stdout"), (3, "exit")],
                         r.body)
        self.assertTrue(evs[0][2]["exec_id"])
        self.assertEqual(evs[1][2], {"data": HELLO_OUT})
        self.assertEqual((evs[2][2]["code"], evs[2][2]["signal"], evs[2][2]["truncated"]),
                         (3, None, False))

        # The same exec straight on the broker: its NDJSON, mapped as SPEC §5
        # says (the mapping the golden transcripts pin), is the api's SSE but
        # for what differs between two runs (exec id, start ts, duration).
        status, ctype, nd = self.broker_exec("npc-alice", argv)
        self.assertEqual((status, ctype), (200, "application/x-ndjson"), nd)
        self.assertEqual([json.loads(ln)["type"] for ln in nd.splitlines()],
                         ["start", "stdout", "exit"], nd)
        self.assertEqual(normalise(r.body), normalise(sse_from_ndjson(nd)))

    def test_02_output_reaches_the_client_while_the_command_runs(self):
        s = self.a.stream("/api/v1/npcs/alice/sandbox/exec",
                          {"argv": ["sh", "-c", "echo a; sleep 2; echo b"]})
        self.addCleanup(s.close)
        self.assertEqual(s.status, 200)
        start = s.next_event()
        a = s.next_event()
        b = s.next_event()
        end = s.next_event()
        self.assertEqual([e[1] for e in (start, a, b, end)], ["start", "stdout", "stdout", "exit"],
                         s.raw)
        self.assertEqual((a[2], b[2]), ({"data": "a\n"}, {"data": "b\n"}))
        self.assertLess(a[0] - start[0], 1.0, "`a` came %.2f s after start" % (a[0] - start[0]))
        self.assertGreater(b[0] - a[0], 1.5, "`a` was held back until `b`")
        self.assertIsNone(s.next_event())

    # -------------------------------------------------------- who may do what

    ROUTES = [
        ("PUT", "/sandbox", None),
        ("GET", "/sandbox", None),
        ("DELETE", "/sandbox", None),
        ("POST", "/sandbox/exec", {"argv": ["sh", "-c", "echo pwned > /work/hello.sh"]}),
        ("GET", "/sandbox/files?path=/work/hello.sh", None),
        ("PUT", "/sandbox/files?path=/work/hello.sh", b"pwned"),
        ("GET", "/sandbox/list?path=/work", None),
        ("POST", "/sandbox/stop", None),
        ("PUT", "/egress", {"enabled": True}),
    ]

    def test_03_another_players_npc_is_not_found_on_every_route(self):
        cid = self.container_of("npc-alice")
        for method, sub, body in self.ROUTES:
            theirs = self.b.req(method, "/api/v1/npcs/alice" + sub, body)
            absent = self.b.req(method, "/api/v1/npcs/nosuchnpc" + sub, body)
            self.assertEqual(theirs.status, 404, (method, sub, theirs.body))
            self.assertEqual(err_code(theirs), "not_found")
            self.assertEqual(theirs.body, absent.body, (method, sub))
        r = self.b.req("GET", "/api/v1/npcs")
        self.assertEqual((r.status, r.json()), (200, []))
        # Nothing happened to alice's sandbox.
        self.assertEqual(self.container_of("npc-alice"), cid)
        r = self.a.req("GET", "/api/v1/npcs/alice/sandbox")
        self.assertEqual((r.json()["state"], r.json()["egress_granted"]), ("running", False))
        r = self.a.req("GET", "/api/v1/npcs/alice/sandbox/files?path=/work/hello.sh")
        self.assertEqual(r.body, HELLO_SH)

    def test_04_no_key_wrong_key_and_revoked_key_get_401(self):
        routes = [(m, "/api/v1/npcs/alice" + sub, b) for m, sub, b in self.ROUTES]
        routes += [("GET", "/api/v1/npcs", None), ("POST", "/api/v1/npcs", {"name": "x1"}),
                   ("GET", "/api/v1/whoami", None)]
        gone = self.stack.admin("create-player", "gone")
        self.keys.append(gone)
        r = self.a.req("GET", "/api/v1/whoami", key=gone)
        self.assertEqual((r.status, r.json()), (200, {"name": "gone", "role": "player"}))
        self.stack.admin("revoke", "gone")
        for key in ("", self.canary, gone, self.stack.player[:-1]):
            for method, path, body in routes:
                r = self.a.req(method, path, body, key=key if key else "")
                self.assertEqual(r.status, 401, (key == gone, method, path, r.body))
                self.assertEqual(err_code(r), "unauthorized")
                self.assertTrue(r.headers.get("WWW-Authenticate", "").startswith("Bearer"))
        r = self.a.req("GET", "/api/v1/npcs", headers={"Authorization": "Basic Zm9vOmJhcg=="},
                       key="")
        self.assertEqual(r.status, 401)
        r = self.op.req("GET", "/api/v1/npcs")
        self.assertEqual([n["name"] for n in r.json()], ["alice"])

    # -------------------------------------------------------- egress

    def test_05_player_egress_is_403_with_the_reason_and_changes_nothing(self):
        cid = self.container_of("npc-alice")
        r = self.a.req("PUT", "/api/v1/npcs/alice/egress", {"enabled": True})
        self.assertEqual(r.status, 403, r.body)
        self.assertEqual(r.json(), {"error": {"code": "forbidden", "message": EGRESS_SENTENCE}})
        self.assertEqual(self.container_of("npc-alice"), cid)
        st = self.a.req("GET", "/api/v1/npcs/alice/sandbox").json()
        self.assertEqual((st["state"], st["egress"], st["egress_granted"]), ("running", False, False))
        npc = self.a.req("GET", "/api/v1/npcs").json()[0]
        self.assertEqual((npc["egress"], npc["egress_by"]), (False, None))
        out, _ = self.api_stdout(self.a, "alice", ["ip", "route"])
        self.assertNotIn("default", out)
        with self.db() as db:
            rows = db.execute("SELECT principal, outcome FROM audit WHERE npc='alice' "
                              "AND action LIKE 'egress%'").fetchall()
        self.assertEqual(rows, [("pl", "forbidden")])

    def test_06_operator_egress_replaces_the_container_and_keeps_work(self):
        r = self.a.req("PUT", "/api/v1/npcs/alice/sandbox/files?path=/work/keep/me.txt",
                       b"kept across the replacement\n")
        self.assertEqual(r.status, 200, r.body)
        old = self.container_of("npc-alice")
        eng = sbxtest.Engine()
        self.assertEqual(eng.inspect(old)["Config"]["Labels"].get("io.sbx.egress"), "0")
        out, _ = self.api_stdout(self.a, "alice", ["ip", "route"])
        self.assertNotIn("default", out)

        t0 = int(time.time() * 1000)
        r = self.op.req("PUT", "/api/v1/npcs/alice/egress", {"enabled": True})
        self.assertEqual(r.status, 200, r.body)
        st = r.json()
        self.assertEqual((st["state"], st["egress"], st["egress_granted"], st["applied"]),
                         ("running", True, True, True))
        new = self.container_of("npc-alice")
        self.assertNotEqual(new, old)
        eng.call("GET", "/containers/%s/json" % old, ok=(404,))
        info = eng.inspect(new)
        self.assertEqual(info["Config"]["Labels"].get("io.sbx.egress"), "1")
        self.assertTrue(info["State"]["Running"])
        out, _ = self.api_stdout(self.a, "alice", ["ip", "route"])
        self.assertIn("default", out)
        r = self.a.req("GET", "/api/v1/npcs/alice/sandbox/files?path=/work/keep/me.txt")
        self.assertEqual((r.status, r.body), (200, b"kept across the replacement\n"))
        r = self.a.req("GET", "/api/v1/npcs/alice/sandbox/files?path=/work/hello.sh")
        self.assertEqual(r.body, HELLO_SH)
        with self.db() as db:
            rows = db.execute("SELECT principal, outcome, ts FROM audit WHERE npc='alice' "
                              "AND action='egress.grant' AND outcome='ok'").fetchall()
            grant = db.execute("SELECT egress, egress_by FROM npcs WHERE name='alice'").fetchone()
        self.assertEqual([x[:2] for x in rows], [("op", "ok")])
        self.assertGreaterEqual(rows[0][2], t0 - 1000)
        self.assertEqual(grant, (1, "op"))
        npc = self.a.req("GET", "/api/v1/npcs").json()[0]
        self.assertEqual((npc["egress"], npc["egress_by"]), (True, "op"))

    # -------------------------------------------------------- disconnect

    def test_07_closing_the_stream_kills_the_process_within_2s(self):
        s = self.a.stream("/api/v1/npcs/alice/sandbox/exec", {"argv": ["sleep", "300"]})
        self.assertEqual(s.status, 200)
        self.assertEqual(s.next_event()[1], "start")
        self.wait_process("npc-alice", "sleep 300")
        s.close()
        took = self.wait_no_process("npc-alice", "sleep 300", 2.0)
        self.assertLess(took, 2.0)

    # -------------------------------------------------------- broker down

    def test_08_broker_down_is_503_the_api_stays_up_and_recovers(self):
        st = self.stack
        # Whatever fails below, later tests get a broker back.
        self.addCleanup(lambda: st.broker.alive() or st.start_broker())
        for sig in (15, 9):
            st.broker.stop(sig)
            for r in (self.a.req("GET", "/api/v1/npcs/alice/sandbox"),
                      self.a.req("POST", "/api/v1/npcs/alice/sandbox/exec", {"argv": ["true"]})):
                self.assertEqual(r.status, 503, (sig, r.body))
                self.assertEqual(err_code(r), "broker_unavailable")
                self.assertRegex(err_message(r), r"(?i)broker")
            self.assertTrue(st.api.alive())
            r = self.a.req("GET", "/healthz", key="")
            self.assertEqual((r.status, r.json()), (200, {"status": "ok"}))
            r = self.a.req("GET", "/api/v1/npcs")
            self.assertEqual([n["name"] for n in r.json()], ["alice"])
            st.start_broker()
            r = self.a.req("GET", "/api/v1/npcs/alice/sandbox")
            self.assertEqual((r.status, r.json()["state"]), (200, "running"), r.body)
            self.assertEqual(self.api_stdout(self.a, "alice", ["echo", "back"]), ("back\n", 0))

    # -------------------------------------------------------- privilege separation

    def test_09_api_is_unprivileged_holds_no_runtime_socket_and_no_plain_key(self):
        st = self.stack
        pw = pwd.getpwnam(API_USER)
        with open("/proc/%d/status" % st.api.pid) as f:
            status = f.read()
        uids = re.search(r"^Uid:\s+(.*)$", status, re.M).group(1).split()
        gids = re.search(r"^Gid:\s+(.*)$", status, re.M).group(1).split()
        self.assertEqual(uids, [str(pw.pw_uid)] * 4)
        self.assertEqual(gids, [str(pw.pw_gid)] * 4)
        self.assertNotEqual(pw.pw_uid, 0)

        runtime_sock = sbxtest.socket_path(sbxtest.runtime_host())
        s = self.a.stream("/api/v1/npcs/alice/sandbox/exec", {"argv": ["sleep", "30"]})
        self.addCleanup(s.close)
        self.assertEqual(s.next_event()[1], "start")
        # While an exec streams: the api reaches the broker's socket (so the
        # view works) and never the runtime's; the broker does reach it.
        api_paths = unix_paths_reached(st.api.pid)
        broker_paths = unix_paths_reached(st.broker.pid)
        s.close()
        self.assertIn(st.sock, api_paths)
        self.assertIn(runtime_sock, broker_paths)
        self.assertNotIn(runtime_sock, api_paths)
        for p in api_paths:
            self.assertNotEqual(os.path.realpath(p), os.path.realpath(runtime_sock))

        # The database and its journals hold no key in plain or decoded form.
        blob = b""
        for suffix in ("", "-wal", "-shm"):
            path = os.path.join(st.api_state, "api.db" + suffix)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    blob += f.read()
        self.assertEqual(os.stat(os.path.join(st.api_state, "api.db")).st_uid, pw.pw_uid)
        self.assertIn(b"alice", blob)       # it is the database we think it is
        for n, key in enumerate(self.keys):
            raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
            self.assertEqual(len(raw), 32)
            self.assertFalse(key.encode() in blob, "key #%d is in api.db" % n)
            self.assertFalse(raw in blob, "key #%d, decoded, is in api.db" % n)
        with self.db() as db:
            hashes = [h for (h,) in db.execute("SELECT key_hash FROM principals")]
        self.assertEqual(len(hashes), 4)

    # -------------------------------------------------------- limits

    def test_10_limits_concurrent_execs_429_and_body_size_413(self):
        st = self.stack
        state = os.path.join(st.dir, "api-limits")
        p, url = st.start_api(state, ["--max-execs-per-principal", "1", "--body-max", "1k",
                                      "--file-size-max", "4k", "--log-level", "debug"],
                              "api-limits")
        key = st.admin("create-player", "lim", state_dir=state)
        # Destroyed through the api below; if a check fails first, through the broker.
        self.addCleanup(sbxtest.unix_http, st.sock, "DELETE", "/v1/sandboxes/npc-lim", None,
                        {"Authorization": "Bearer " + st.token})
        self.keys.append(key)
        c = Client(url, key)
        self.assertEqual(c.req("POST", "/api/v1/npcs", {"name": "lim"}).status, 201)
        r = c.req("PUT", "/api/v1/npcs/lim/sandbox")
        self.assertEqual(r.status, 200, r.body)

        held = c.stream("/api/v1/npcs/lim/sandbox/exec", {"argv": ["sleep", "299"]})
        self.addCleanup(held.close)
        self.assertEqual(held.next_event()[1], "start")
        r = c.req("POST", "/api/v1/npcs/lim/sandbox/exec", {"argv": ["true"]})
        self.assertEqual(r.status, 429, r.body)
        self.assertEqual(err_code(r), "too_many")
        self.assertEqual(r.headers.get("Retry-After"), "1")
        held.close()
        # The slot comes back once the held exec is gone.
        self.wait_no_process("npc-lim", "sleep 299", 5)
        sbxtest.wait_until(lambda: c.req("POST", "/api/v1/npcs/lim/sandbox/exec",
                                         {"argv": ["true"]}).status == 200,
                           5, "the exec slot to be free again")

        big = {"argv": ["echo", "x" * 2000]}
        r = c.req("POST", "/api/v1/npcs/lim/sandbox/exec", big)
        self.assertEqual(r.status, 413, r.body)
        r = c.req("POST", "/api/v1/npcs", {"name": "y" * 10, "pad": "x" * 2000})
        self.assertEqual(r.status, 413, r.body)
        r = c.req("PUT", "/api/v1/npcs/lim/sandbox/files?path=/work/big", b"z" * 4097)
        self.assertEqual(r.status, 413, r.body)
        r = c.req("PUT", "/api/v1/npcs/lim/sandbox/files?path=/work/big", b"z" * 4096)
        self.assertEqual(r.status, 200, r.body)
        r = c.req("DELETE", "/api/v1/npcs/lim/sandbox")
        self.assertEqual((r.status, r.json()["state"]), (200, "absent"), r.body)
        self.assertTrue(p.alive())

    # -------------------------------------------------------- the end

    def test_11_output_goes_to_sse_as_the_broker_sent_it(self):
        # adr/0028: the api copies the broker's output line into the SSE
        # event; control-heavy text is data_b64 there, plain text data
        cases = [(r"\000\001\002 NUL and controls\r\n", "data_b64"),
                 (r"plain text, nothing to escape\n", "data")]
        for fmt, member in cases:
            argv = ["printf", fmt]
            r = self.a.req("POST", "/api/v1/npcs/alice/sandbox/exec", {"argv": argv})
            self.assertEqual(r.status, 200, r.body)
            evs = parse_sse(r.body)
            outs = [d for _, t, d in evs if t == "stdout"]
            self.assertEqual([list(d) for d in outs], [[member]], r.body)
            status, _, nd = self.broker_exec("npc-alice", argv)
            self.assertEqual(status, 200, nd)
            self.assertEqual(normalise(r.body), normalise(sse_from_ndjson(nd)))
        # 256 KiB of NULs: base64 on the api's wire too, not 6 bytes a byte
        r = self.a.req("POST", "/api/v1/npcs/alice/sandbox/exec",
                       {"argv": ["head", "-c", "262144", "/dev/zero"]})
        self.assertEqual(r.status, 200, r.body[:300])
        evs = parse_sse(r.body)
        outs = [d for _, t, d in evs if t == "stdout"]
        self.assertEqual([d for d in outs if "data" in d], [])
        self.assertEqual(b"".join(base64.b64decode(d["data_b64"]) for d in outs), b"\0" * 262144)
        self.assertLess(len(r.body), 1.4 * 262144)
        self.assertEqual(evs[-1][1], "exit")

    def test_12_an_api_that_dropped_to_its_user_keeps_exec_logs_and_terminals(self):
        # Started as root with --user: the execs/ and terms/ directories it
        # made before the switch are its user's (they stayed root's, and a
        # resource exec answered 500 "cannot store the exec's log").
        pw = pwd.getpwnam(API_USER)
        for sub in ("execs", "terms", "ticket.key"):
            self.assertEqual(os.stat(os.path.join(self.stack.api_state, sub)).st_uid,
                             pw.pw_uid, sub)
        r = self.a.req("POST", "/api/v1/npcs/alice/sandbox/execs",
                       {"argv": ["sh", "-c", "echo kept-$((20+1))"]})
        self.assertEqual(r.status, 201, r.body)
        x = r.json()["exec_id"]
        sbxtest.wait_until(lambda: self.a.req("GET", "/api/v1/npcs/alice/sandbox/execs/" + x)
                           .json()["state"] != "running", 20, "the exec's end", interval=0.2)
        r = self.a.req("GET", "/api/v1/npcs/alice/sandbox/execs/" + x + "/events")
        self.assertIn(b"kept-21", r.body)
        r = self.a.req("POST", "/api/v1/npcs/alice/sandbox/terminals",
                       {"argv": ["true"], "cols": 80, "rows": 24})
        self.assertEqual(r.status, 201, r.body)

    def test_98_destroy_leaves_nothing_on_the_runtime(self):
        r = self.a.req("DELETE", "/api/v1/npcs/alice/sandbox")
        self.assertEqual((r.status, r.json()["state"]), (200, "absent"), r.body)
        r = self.a.req("GET", "/api/v1/npcs/alice/sandbox")
        self.assertEqual((r.status, r.json()["state"]), (200, "absent"))
        self.assertEqual(self.stack.managed(), [])
        self.assertEqual(self.stack.managed_volumes(), [])
        eng = sbxtest.Engine()
        self.assertEqual([c["Names"] for c in eng.containers(label=sbxtest.LABEL_MANAGED)
                          if any(self.prefix in n for n in c["Names"])], [])
        # Every route then says, in the player's words, that alice has no
        # sandbox and how to start one (not the broker's "sandbox npc-alice
        # does not exist"); a file that is missing is a different sentence.
        for method, sub, body in (("POST", "/sandbox/exec", {"argv": ["true"]}),
                                  ("POST", "/sandbox/execs", {"argv": ["true"]}),
                                  ("GET", "/sandbox/files?path=/work/x", None),
                                  ("GET", "/sandbox/list?path=/work", None),
                                  ("POST", "/sandbox/terminals", {"cols": 80, "rows": 24}),
                                  ("GET", "/sandbox/ports/8000/", None)):
            r = self.a.req(method, "/api/v1/npcs/alice" + sub, body)
            self.assertEqual(r.status, 404, (sub, r.body))
            self.assertEqual(r.json()["error"]["message"],
                             "alice has no sandbox yet: start it with PUT "
                             "/api/v1/npcs/alice/sandbox (sbxctl up alice).", sub)

    def test_99_logs_never_hold_a_key_or_the_broker_token(self):
        st = self.stack
        texts = {p.log_path: p.output() for p in st.apis}
        self.assertGreaterEqual(len(texts), 2)
        for path in st.broker_logs:
            with open(path, errors="replace") as f:
                texts[path] = f.read()
        for path, text in texts.items():
            self.assertIn('"msg":"listening"', text, path)   # a log we can read
            for n, secret in enumerate(self.keys + [self.canary, st.token]):
                # Never print the secret or the log in the failure message.
                self.assertFalse(secret[:16] in text, "secret #%d appears in %s" % (n, path))


if __name__ == "__main__":
    unittest.main()
