"""test_vm - sandbox-broker with `driver = vm` (adr/0069) through its HTTP API:
one microVM (qemu -M microvm, TCG) carries exec, files, the user, the missing
network, a clean stop, a broker restart that adopts the running VM, and
destroy; a second one egress through an allowlist (two boots), a third
egress across a broker SIGKILL (one boot). One VM for the whole suite where the asserts allow (boots cost
seconds under TCG); the tests run in order (names numbered)."""

import base64
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

import vmfix
from engineapi import UnixHTTPConnection
from test_broker_session import Session

SBX_ONCE = True

ID = "vm-%d" % os.getpid()


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int([ln for ln in f if ln.startswith("VmRSS:")][0].split()[1])


def alive(pid):
    """Running: /proc/PID exists and is no zombie (a qemu adopted after a
    broker restart is reaped by whoever inherited it, maybe later)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class VmBroker(unittest.TestCase):
    broker = None

    @classmethod
    def setUpClass(cls):
        cls.vm_dir, cls.image = vmfix.build_vm_dir()
        cls.dir = tempfile.mkdtemp(prefix="sbx-vmb-")
        cls.state = os.path.join(cls.dir, "state")
        cls.sock = os.path.join(cls.dir, "b.sock")
        cls.token = "vmtest-" + secrets.token_hex(16)
        cls.log = open(os.path.join(cls.dir, "broker.log"), "ab")
        cls.start_broker()

    @classmethod
    def start_broker(cls):
        env = dict(os.environ, SBX_BROKER_TOKEN=cls.token)
        env.pop("SBX_CONFIG", None)
        cls.broker = subprocess.Popen(
            [os.path.join(vmfix.BUILD, "sandbox-broker"),
             "--driver", "vm", "--listen", "unix:" + cls.sock,
             "--state-dir", cls.state, "--image", cls.image,
             "--vm-dir", cls.vm_dir, "--vm-accel", "tcg",
             "--memory", "256m", "--work-size", "128m", "--pids", "200",
             "--stop-timeout", "30s", "--vm-boot-timeout", "150s", "--file-timeout", "10s",
             "--idle-timeout", "0"],
            env=env, stdout=cls.log, stderr=cls.log)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                st, _ = cls.call("GET", "/v1/health")
                if st == 200:
                    return
            except OSError:
                pass
            if cls.broker.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("sandbox-broker --driver vm did not come up: %s" %
                           open(cls.log.name).read()[-3000:])

    @classmethod
    def stop_broker(cls):
        if cls.broker is not None and cls.broker.poll() is None:
            cls.broker.send_signal(signal.SIGTERM)
            cls.broker.wait(timeout=60)
        cls.broker = None

    @classmethod
    def tearDownClass(cls):
        try:
            cls.call("DELETE", "/v1/sandboxes/" + ID)
        except OSError:
            pass
        cls.stop_broker()
        vmfix.sweep(cls.state)
        cls.log.close()
        with open(cls.log.name, "rb") as f:   # the suite's log keeps the broker's end
            print(b"".join(f.readlines()[-40:]).decode("utf-8", "replace"))
        if os.environ.get("SBX_KEEP"):
            print("kept", cls.dir)
            return
        shutil.rmtree(cls.dir, ignore_errors=True)
        shutil.rmtree(cls.vm_dir, ignore_errors=True)

    @classmethod
    def call(cls, method, path, body=None, timeout=200, raw=False):
        c = UnixHTTPConnection(cls.sock, timeout=timeout)
        try:
            headers = {"Authorization": "Bearer " + cls.token}
            if body is not None and not isinstance(body, bytes):
                body = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            if raw:
                return r.status, data
            try:
                return r.status, json.loads(data) if data else None
            except ValueError:
                return r.status, data
        finally:
            c.close()

    def ensure(self):
        st, js = self.call("PUT", "/v1/sandboxes/" + ID, {"egress": False})
        self.assertEqual(st, 200, js)
        self.assertEqual(js["state"], "running", js)
        return js

    def run_(self, argv, stdin=None):
        body = {"argv": argv, "timeout_ms": 60000}
        if stdin is not None:
            body["stdin"] = base64.b64encode(stdin).decode()
        st, data = self.call("POST", "/v1/sandboxes/%s/exec" % ID, body, raw=True)
        self.assertEqual(st, 200, data)
        out, err, code = b"", b"", None
        for line in data.decode().splitlines():
            ev = json.loads(line)
            if ev["type"] == "stdout":
                out += ev["data"].encode() if "data" in ev else base64.b64decode(ev["data_b64"])
            elif ev["type"] == "stderr":
                err += ev["data"].encode() if "data" in ev else base64.b64decode(ev["data_b64"])
            elif ev["type"] == "exit":
                code = ev["code"]
            elif ev["type"] == "error":
                self.fail("exec error event: %s" % line)
        return code, out, err

    def qemu_pid(self):
        with open(os.path.join(self.state, "vm", ID, "qemu.pid")) as f:
            return int(f.read().strip())

    def test_1_exec_files_user_network(self):
        """ensure boots a VM; exec, stdin, write/read/list behave as in a
        container; the command runs as the sandbox user under the VM's
        own kernel (its command line) with no network but lo."""
        self.ensure()
        code, out, err = self.run_(["sh", "-c", "echo out; echo err >&2; exit 4"])
        self.assertEqual((code, out, err), (4, b"out\n", b"err\n"))
        code, out, _ = self.run_(["cat"], stdin=b"fed through stdin")
        self.assertEqual((code, out), (0, b"fed through stdin"))
        code, out, _ = self.run_(["sh", "-c", "id -u; id -g; pwd"])
        self.assertEqual(out, b"1000\n1000\n/work\n")
        code, out, _ = self.run_(["cat", "/proc/cmdline"])
        self.assertIn(b"sbx.user=1000:1000", out)   # the guest's kernel, not the host's
        code, out, _ = self.run_(["ls", "/sys/class/net"])
        self.assertEqual(out.split(), [b"lo"])
        st, js = self.call("PUT", "/v1/sandboxes/%s/files?path=%s&mode=0640" %
                           (ID, urllib.parse.quote("/work/d/n.txt")), b"persist me\n")
        self.assertEqual(st, 200, js)
        st, data = self.call("GET", "/v1/sandboxes/%s/files?path=/work/d/n.txt" % ID,
                             raw=True)
        self.assertEqual((st, data), (200, b"persist me\n"))
        st, js = self.call("GET", "/v1/sandboxes/%s/list?path=/work/d" % ID)
        self.assertEqual(st, 200, js)
        ents = js if isinstance(js, list) else js["entries"]
        self.assertEqual([(e["name"], e["type"], e["size"], e["mode"]) for e in ents],
                         [("n.txt", "file", 11, 0o640)])
        st, js = self.call("GET", "/v1/sandboxes/%s/files?path=/work/none" % ID)
        self.assertEqual(st, 404, js)
        code, out, _ = self.run_(["stat", "-c", "%u %a", "/work/d/n.txt"])
        self.assertEqual(out, b"1000 640\n")
        st, js = self.call("GET", "/v1/sandboxes/%s?usage=1" % ID)
        self.assertEqual(st, 200, js)
        u = js["usage"]
        self.assertGreaterEqual(u["files"], 1, u)     # n.txt, counted in the guest
        self.assertGreaterEqual(u["apparent_bytes"], 11, u)
        self.assertFalse(u["partial"], u)

    def test_1b_qemu_in_its_own_cgroup(self):
        """The VM's qemu runs as the unprivileged vm_runas user (default sbx-vm, a
        system user of its own that deps.sh and tests/run.sh make), in a
        cgroup of its own (sbx-vm/ID) whose memory limit is the guest's RAM
        plus 256 MiB for qemu, with a pids and a CPU limit (cgroup v2, or v1
        as on this machine)."""
        self.ensure()
        pid = self.qemu_pid()
        with open("/proc/%d/status" % pid) as f:
            uids = [ln.split()[1:] for ln in f if ln.startswith("Uid:")][0]
        want = pwd.getpwnam("sbx-vm")
        self.assertNotIn(want.pw_uid, (0, 65534))
        self.assertEqual(set(uids), {str(want.pw_uid)})   # real, effective, saved, fs
        with open("/proc/%d/cgroup" % pid) as f:
            lines = [ln.strip().split(":", 2) for ln in f]
        paths = {c: p for _, cs, p in lines for c in (cs.split(",") if cs else [""])}
        want = str((256 + 256) * 1024 * 1024)
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            d = "/sys/fs/cgroup" + paths[""]
            self.assertTrue(d.endswith("/sbx-vm/" + ID), d)
            limits = [("memory.max", want), ("pids.max", "256"), ("cpu.max", "100000 100000")]
        else:
            for c in ("memory", "pids", "cpu"):
                self.assertTrue(paths.get(c, "").endswith("/sbx-vm/" + ID), paths)
            d = "/sys/fs/cgroup"
            limits = [("memory" + paths["memory"] + "/memory.limit_in_bytes", want),
                      ("pids" + paths["pids"] + "/pids.max", "256"),
                      ("cpu" + paths["cpu"] + "/cpu.cfs_quota_us", "100000")]
        for f, v in limits:
            with open(os.path.join(d, f)) as fh:
                self.assertEqual(fh.read().strip(), v, f)

    def check(self, *extra):
        """sandbox-broker --check --driver vm with this class's settings (no
        token, as an operator runs it); (exit status, stdout)."""
        env = dict(os.environ)
        env.pop("SBX_CONFIG", None)
        env.pop("SBX_BROKER_TOKEN", None)
        p = subprocess.run(
            [os.path.join(vmfix.BUILD, "sandbox-broker"), "--check",
             "--driver", "vm", "--state-dir", self.state, "--image", self.image,
             "--vm-dir", self.vm_dir, "--vm-accel", "tcg"] + list(extra),
            env=env, capture_output=True, timeout=60)
        return p.returncode, p.stdout.decode()

    def test_1b2_check_beside_a_running_vm(self):
        """--check for driver = vm (it crashed before: the kubernetes check
        ran on a vm driver): qemu, the accelerator, the boot files and each
        allowlisted image's root disk, one line each; exit 0 with nothing
        missing, 69 and the fix's command for an image with no root disk;
        a VM of the state dir it looks at keeps running."""
        self.ensure()
        pid = self.qemu_pid()
        code, out = self.check()
        self.assertEqual(code, 0, out)
        self.assertIn("qemu: ", out)
        self.assertIn("accelerator: tcg (vm_accel)", out)
        self.assertIn("boot file: %s/vmlinuz: ok" % self.vm_dir, out)
        self.assertIn("root disk of %s: " % self.image, out)
        self.assertTrue(out.endswith("0 problems\n"), out)
        code, out = self.check("--images", "sbx-nodisk:1")
        self.assertEqual(code, 69, out)
        self.assertIn("problem: no root disk for image sbx-nodisk:1 (%s/images/"
                      "sbx-nodisk_1.ext4): make it with deploy/vm/build.sh rootfs"
                      % self.vm_dir, out)
        self.assertTrue(out.endswith("1 problem\n"), out)
        os.kill(pid, 0)   # still there: nothing was adopted or killed
        self.assertEqual(self.qemu_pid(), pid)
        self.assertEqual(self.run_(["echo", "alive"])[:2], (0, b"alive\n"))

    def test_1b2b_missing_runas_user_is_named_and_refused(self):
        """A vm_runas that is no user of the host: --check names it and the
        command that makes it (one problem line, exit 69); a root broker
        refuses to start (exit 78, config error) instead of running qemu
        as root, and makes nothing in its state dir."""
        self.assertEqual(os.geteuid(), 0)
        ghost = "sbx-nouser-%d" % os.getpid()
        code, out = self.check("--vm-runas", ghost)
        self.assertEqual(code, 69, out)
        fix = ("vm_runas %s is not a user of this host, and qemu must not run as root: "
               "create it with useradd --system --no-create-home --shell "
               "/usr/sbin/nologin %s" % (ghost, ghost))
        self.assertEqual([ln for ln in out.splitlines() if ln.startswith("problem:")],
                         ["problem: " + fix + " (deploy/deps.sh does for sbx-vm), or set "
                          "vm_runas"], out)
        self.assertTrue(out.endswith("1 problem\n"), out)
        d = tempfile.mkdtemp(prefix="sbx-vmghost-")
        self.addCleanup(shutil.rmtree, d, True)
        p = subprocess.run(
            [os.path.join(vmfix.BUILD, "sandbox-broker"), "--driver", "vm",
             "--listen", "unix:" + os.path.join(d, "b.sock"),
             "--state-dir", os.path.join(d, "state"), "--image", self.image,
             "--vm-dir", self.vm_dir, "--vm-accel", "tcg", "--vm-runas", ghost],
            env=dict(os.environ, SBX_BROKER_TOKEN=self.token), capture_output=True,
            timeout=30)
        self.assertEqual(p.returncode, 78, p.stderr)
        self.assertIn(fix, p.stderr.decode())
        self.assertFalse(os.path.exists(os.path.join(d, "state", "vm")))
        self.assertFalse(os.path.exists(os.path.join(d, "b.sock")))

    def test_1b3_pids_limit_inside_the_guest(self):
        """The broker's pids limit (200 here) holds inside the guest: init
        sets RLIMIT_NPROC on the agent and all it starts (sbx.pids on the
        kernel command line), so the sandbox user cannot start more."""
        self.ensure()
        code, out, err = self.run_(["sh", "-c", "ulimit -u"])
        self.assertEqual((code, out.strip()), (0, b"200"), err)
        # sleep 60: under TCG 250 forks can take longer than a short sleep,
        # whose processes would end before the count reached the limit; the
        # exec's end kills its whole process group (helper_exec.c)
        code, out, err = self.run_(["sh", "-c",
                                    "sh -c 'i=0; while [ $i -lt 250 ]; do sleep 60 & "
                                    "i=$((i+1)); done; echo started $i' 2>/dev/null; "
                                    "echo rc=$?"])
        self.assertEqual(code, 0, err)
        self.assertNotIn(b"started 250", out)
        self.assertNotIn(b"rc=0", out)
        self.assertEqual(self.run_(["echo", "after"])[:2], (0, b"after\n"))

    def test_1c_sessions(self):
        """Sessions as in containers (adr/0050): an exec whose stdin is
        streamed echoes 1 MiB byte-exact; a terminal gets a pty of the size
        asked; a port nothing listens on is port_closed."""
        self.ensure()
        data = os.urandom(1 << 20)
        s = Session(self.sock, self.token, ID, {"kind": "exec", "argv": ["cat"]}, timeout=120)
        try:
            self.assertEqual(s.status, 101)
            s.send(data, timeout=120)
            s.eof()
            last = s.wait_end(timeout=120)
            self.assertEqual((last["type"], last.get("code")), ("exit", 0), s.events)
            self.assertTrue(bytes(s.out[1]) == data, "stdout differs from the input")
        finally:
            s.close()
        s = Session(self.sock, self.token, ID, {"kind": "pty", "cols": 91, "rows": 17,
                                                "argv": ["sh", "-c", "tty; stty size"]})
        try:
            self.assertEqual(s.status, 101)
            last = s.wait_end(timeout=60)
            self.assertEqual((last["type"], last.get("code")), ("exit", 0), s.events)
            self.assertIn(b"/dev/pts/", bytes(s.out[1]))
            self.assertIn(b"17 91", bytes(s.out[1]))
        finally:
            s.close()
        s = Session(self.sock, self.token, ID, {"kind": "port", "port": 9})
        try:
            self.assertEqual(s.status, 101)
            last = s.wait_end(timeout=60)
            self.assertEqual((last["type"], last.get("code")), ("error", "port_closed"),
                             s.events)
        finally:
            s.close()

    def test_1d_upload_streams_with_bounded_memory(self):
        """A 64 MiB PUT /files to a vm sandbox streams to the guest as it
        takes the bytes (write_stream, adr/0018): it arrives byte-exact and
        the broker never holds the body (its RSS grows by far less than
        the file; a driver without write_stream had the body gathered)."""
        self.ensure()
        size = 64 << 20
        data = os.urandom(1 << 20) * 64
        path = "/v1/sandboxes/%s/files?path=%s" % (ID, urllib.parse.quote("/work/big"))
        # warm up (first-use allocations), then the baseline
        self.assertEqual(self.call("PUT", path, b"w" * (1 << 20))[0], 200)
        rss0 = rss_kib(self.broker.pid)
        peak, done = [rss0], threading.Event()

        def sample():
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], rss_kib(self.broker.pid))
                except (OSError, IndexError):
                    pass
                time.sleep(0.01)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.monotonic()
        try:
            st, js = self.call("PUT", path, data, timeout=600)
        finally:
            done.set()
            sampler.join()
        took = time.monotonic() - t0
        self.assertEqual(st, 200, js)
        self.assertEqual(js["size"], size, js)
        print("64 MiB upload to a vm sandbox: %.1f s; broker RSS %d KiB -> peak %d KiB"
              % (took, rss0, peak[0]))
        self.assertLess(peak[0] - rss0, 24 * 1024, (rss0, peak[0]))
        code, out, err = self.run_(["sha256sum", "/work/big"])
        self.assertEqual(code, 0, err)
        self.assertEqual(out.split()[0].decode(), hashlib.sha256(data).hexdigest())
        self.assertEqual(self.run_(["rm", "/work/big"])[0], 0)

    def put_head(self, path, length):
        """A socket that has sent the head of a PUT /files of length bytes."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60)
        s.connect(self.sock)
        s.sendall(("PUT /v1/sandboxes/%s/files?path=%s HTTP/1.1\r\nHost: sbx\r\n"
                   "Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
                   % (ID, urllib.parse.quote(path), self.token, length)).encode())
        return s

    def test_1e_cut_or_stalled_upload_keeps_the_old_file(self):
        """A streamed upload whose client goes away halfway is cancelled (the
        helper killed, its temporary file gone); one whose body stops ends
        with 504 timeout after file_timeout (10 s here); either way the old
        file stays as it was and the next write works."""
        self.ensure()
        self.assertEqual(self.run_(["sh", "-c", "mkdir -p /work/cut && echo keep > "
                                    "/work/cut/old"])[0], 0)
        s = self.put_head("/work/cut/old", 8 << 20)
        s.sendall(b"N" * (2 << 20))
        time.sleep(0.5)
        s.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            names = self.run_(["ls", "-A", "/work/cut"])[1].split()
            if names == [b"old"]:
                break
            time.sleep(0.3)
        self.assertEqual(names, [b"old"])
        s = self.put_head("/work/cut/old", 8 << 20)
        s.sendall(b"S" * (1 << 20))    # then nothing more
        t0 = time.monotonic()
        reply = b""
        while not reply.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
        s.close()
        head, _, body = reply.partition(b"\r\n\r\n")
        self.assertIn(b" 504 ", head.split(b"\r\n")[0], reply[:300])
        self.assertEqual(json.loads(body)["error"]["code"], "timeout")
        self.assertLess(time.monotonic() - t0, 10 + 15)
        st, data = self.call("GET", "/v1/sandboxes/%s/files?path=/work/cut/old" % ID,
                             raw=True)
        self.assertEqual((st, data), (200, b"keep\n"))
        st, js = self.call("PUT", "/v1/sandboxes/%s/files?path=/work/cut/old" % ID, b"new")
        self.assertEqual(st, 200, js)
        self.assertEqual(self.run_(["cat", "/work/cut/old"])[1], b"new")

    def test_2_stop_is_clean_and_work_persists(self):
        """stop powers the guest off cleanly (init syncs and unmounts /work:
        e2fsck finds the image clean), status says stopped, and the next
        ensure boots it again with /work as it was."""
        self.ensure()
        pid = self.qemu_pid()
        st, js = self.call("POST", "/v1/sandboxes/%s/stop" % ID)
        self.assertIn(st, (200, 204), js)
        self.assertFalse(alive(pid))
        st, js = self.call("GET", "/v1/sandboxes/" + ID)
        self.assertEqual(js["state"], "stopped", js)
        with open(os.path.join(self.state, "vm", ID, "console.log"), "rb") as f:
            log = f.read()
        self.assertIn(b"reboot: Power down", log)   # the guest's poweroff, not a kill
        fsck = subprocess.run(["e2fsck", "-fn", os.path.join(self.state, "vm", ID,
                                                             "work.img")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(fsck.returncode, 0, fsck.stdout.decode())
        self.ensure()
        code, out, _ = self.run_(["cat", "/work/d/n.txt"])
        self.assertEqual((code, out), (0, b"persist me\n"))

    def test_3_broker_restart_adopts_the_running_vm(self):
        """A broker restart leaves the VM running and the new broker adopts
        it (pidfile + sockets): same qemu, exec works, no new boot; a qemu
        of its state directory that no sandbox accounts for is killed. The
        new broker records and logs it running (a newcomer read "sandbox
        adopted","state":"stopped" for a running VM) and its "listening"
        line names the VM directory, not an Engine socket."""
        self.ensure()
        pid = self.qemu_pid()
        self.run_(["sh", "-c", "echo before > /work/restart"])
        self.stop_broker()
        self.assertTrue(alive(pid))
        # A stray: a "qemu" whose sockets are under the state directory
        # but that no sandbox directory accounts for. The new broker kills it.
        stray = subprocess.Popen(
            ["python3", "-c", "import time; time.sleep(600)", "qemu-system-x86_64",
             "path=%s/vm/ghost/agent.sock," % self.state])
        self.log.flush()
        mark = os.path.getsize(self.log.name)
        self.start_broker()
        st, js = self.call("GET", "/v1/sandboxes/" + ID)
        self.assertEqual((st, js.get("state")), (200, "running"), js)   # at once
        with open(self.log.name, "rb") as f:
            f.seek(mark)
            lines = [json.loads(ln) for ln in f.read().decode("utf-8", "replace").splitlines()
                     if ln.startswith("{")]
        adopted = [x for x in lines if x.get("msg") == "sandbox adopted" and x.get("id") == ID]
        self.assertEqual([x.get("state") for x in adopted], ["running"], lines)
        up = [x for x in lines if x.get("msg") == "listening"]
        self.assertEqual([(x.get("driver"), x.get("vm_dir")) for x in up], [("vm", self.vm_dir)], up)
        self.assertNotIn("runtime", up[0])
        # An ensure waits until the adopted VM's agent is back.
        st, js = self.call("PUT", "/v1/sandboxes/" + ID, {"egress": False})
        if js.get("state") != "running":   # what the guest's init said
            with open(os.path.join(self.state, "vm", ID, "console.log"), "rb") as f:
                js["console"] = f.read()[-3000:].decode("utf-8", "replace")
        self.assertEqual((st, js["state"]), (200, "running"), js)
        self.assertEqual(self.qemu_pid(), pid)
        code, out, _ = self.run_(["cat", "/work/restart"])
        self.assertEqual((code, out), (0, b"before\n"))
        self.assertEqual(stray.wait(timeout=30), -signal.SIGKILL)

    def test_4_destroy_removes_everything(self):
        """destroy kills the VM and removes its directory (work.img with
        it); destroy again is fine; status is absent."""
        self.ensure()
        pid = self.qemu_pid()
        for _ in range(2):
            st, js = self.call("DELETE", "/v1/sandboxes/" + ID)
            self.assertIn(st, (200, 204), js)
        self.assertFalse(alive(pid))
        self.assertFalse(os.path.exists(os.path.join(self.state, "vm", ID)))
        st, js = self.call("GET", "/v1/sandboxes/" + ID)
        self.assertEqual(js["state"], "absent", js)

    def egress_fetch(self, sid, url):
        """An HTTP/1.0 GET of url through $http_proxy from inside sid (the
        test image's busybox wget cannot resolve anything: nc speaks HTTP,
        as in test_egress_policy.py)."""
        body = {"argv": ["sh", "-c",
                         "p=${http_proxy#http://}; printf 'GET %s HTTP/1.0\\r\\n\\r\\n' "
                         "| nc -w 20 ${p%%:*} ${p##*:}; true" % url],
                "timeout_ms": 60000}
        st, data = self.call("POST", "/v1/sandboxes/%s/exec" % sid, body, raw=True)
        self.assertEqual(st, 200, data)
        out = b""
        for line in data.decode().splitlines():
            ev = json.loads(line)
            if ev["type"] == "stdout":
                out += ev["data"].encode() if "data" in ev else base64.b64decode(ev["data_b64"])
        return out

    def proxy_pid(self, sid):
        try:
            with open(os.path.join(self.state, "vm", sid, "egress-proxy.pid")) as f:
                return int(f.read().strip())
        except OSError:
            return None

    def test_5_egress_allowlist_through_the_relay(self):
        """A vm sandbox with an allowlist reaches an allowed host through
        the relay on 127.0.0.1:3128, a virtio-serial port and the sbx-proxy
        the broker runs for it on the host (as vm_runas); a name not in
        the list gets the proxy's 403; the guest still has only lo; the
        counts and denials read back; a stop and a start keep it working;
        full egress is refused; destroy leaves no proxy behind."""
        import http.server
        import threading

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                b = b"hello through the relay\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def log_message(self, *a):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        sid = ID + "-eg"
        url = "http://127.0.0.1:%d/page" % srv.server_address[1]
        try:
            st, js = self.call("PUT", "/v1/sandboxes/" + sid,
                               {"egress": True, "egress_allow": ["*"]})
            self.assertEqual(st, 501, js)
            self.assertIn("only way out is its egress proxy", js["error"]["message"])
            st, js = self.call("PUT", "/v1/sandboxes/" + sid,
                               {"egress": True, "egress_allow": ["127.0.0.1", "127.0.0.0/8"]})
            self.assertEqual((st, js.get("state")), (200, "running"), js)
            js0 = js
            # status says egress as the engine's does for an allowlist
            self.assertIs(js.get("egress"), True, js)
            self.assertIs(self.call("GET", "/v1/sandboxes/" + sid)[1].get("egress"), True)
            out = self.egress_fetch(sid, url)
            self.assertIn(b"200", out.split(b"\r\n")[0], out)
            self.assertTrue(out.endswith(b"hello through the relay\n"), out)
            out = self.egress_fetch(sid, "http://denied.test/")
            self.assertIn(b"403", out.split(b"\r\n")[0], out)
            self.assertIn(b"not in this sandbox's allowlist", out)
            code, out, _ = self.run_in(sid, ["ls", "/sys/class/net"])
            self.assertEqual(out.split(), [b"lo"])     # no other way out
            pid = self.proxy_pid(sid)
            self.assertIsNotNone(pid)
            with open("/proc/%d/status" % pid) as f:
                uids = [ln.split()[1:] for ln in f if ln.startswith("Uid:")][0]
            self.assertEqual(set(uids), {str(pwd.getpwnam("sbx-vm").pw_uid)})   # vm_runas
            st, js = self.call("GET", "/v1/sandboxes/%s/egress" % sid)
            self.assertEqual(st, 200, js)
            self.assertTrue(js["proxy"], js)
            self.assertGreaterEqual((js["allowed"], js["denied"]), (1, 1), js)
            self.assertIn("denied.test", [d["host"] for d in js["denials"]], js)
            # Only the list changes: the same VM (its created_at, which the
            # api's "change" compares, and its qemu) and a new proxy.
            born = js0["created_at"]
            with open(os.path.join(self.state, "vm", sid, "qemu.pid")) as f:
                qemu = int(f.read().strip())
            st, js = self.call("PUT", "/v1/sandboxes/" + sid,
                               {"egress": True, "egress_allow": ["127.0.0.1", "127.0.0.0/8",
                                                                 "other.test"]})
            self.assertEqual((st, js.get("state"), js.get("egress"), js.get("created_at")),
                             (200, "running", True, born), js)
            with open(os.path.join(self.state, "vm", sid, "qemu.pid")) as f:
                self.assertEqual(int(f.read().strip()), qemu)
            self.assertFalse(alive(pid))
            pid = self.proxy_pid(sid)
            self.assertIsNotNone(pid)
            st, js = self.call("POST", "/v1/sandboxes/%s/stop" % sid)
            self.assertIn(st, (200, 204), js)
            self.assertFalse(alive(pid))
            self.assertIsNone(self.proxy_pid(sid))
            st, js = self.call("PUT", "/v1/sandboxes/" + sid,
                               {"egress": True, "egress_allow": ["127.0.0.1", "127.0.0.0/8"]})
            self.assertEqual((st, js.get("state")), (200, "running"), js)
            out = self.egress_fetch(sid, url)
            self.assertTrue(out.endswith(b"hello through the relay\n"), out)
            pid = self.proxy_pid(sid)
            st, js = self.call("DELETE", "/v1/sandboxes/" + sid)
            self.assertIn(st, (200, 204), js)
            self.assertFalse(alive(pid))
            left = [p for p in os.listdir("/proc") if p.isdigit() and
                    self.cmdline(int(p)).startswith(b"sbx-proxy:" + self.state.encode())]
            self.assertEqual(left, [])
        finally:
            srv.shutdown()
            self.call("DELETE", "/v1/sandboxes/" + sid)

    def proxies(self):
        """pids of the running sbx-proxy processes named for this state dir."""
        return sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and
                      alive(int(p)) and
                      self.cmdline(int(p)).startswith(b"sbx-proxy:" + self.state.encode()))

    @staticmethod
    def cgroups(pid):
        """{controller: path} of pid's memory, pids and cpu cgroups (v1), or
        {"": path} (v2)."""
        with open("/proc/%d/cgroup" % pid) as f:
            lines = [ln.strip().split(":", 2) for ln in f]
        paths = {c: p for _, cs, p in lines for c in (cs.split(",") if cs else [""])}
        keys = [""] if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else \
            ["memory", "pids", "cpu"]
        return {k: paths.get(k) for k in keys}

    def test_6_egress_survives_a_broker_kill(self):
        """A vm sandbox with an allowlist and a broker SIGKILLed: its egress
        proxy dies with the broker (nothing serves it without the broker's
        link) while the VM runs on; the new broker adopts the VM, kills
        sbx-proxy processes named for its state dir that no running VM
        accounts for (one for this sandbox no pidfile names, one for a
        sandbox that is gone), and runs exactly one new proxy for it, in
        the VM's cgroup as at its first boot; a fetch through the relay
        works again, and again after a graceful (SIGTERM) restart; destroy
        leaves no proxy (one boot)."""
        import http.server

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                b = b"hello after the restart\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def log_message(self, *a):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        sid = ID + "-egr"
        url = "http://127.0.0.1:%d/page" % srv.server_address[1]
        vdir = os.path.join(self.state, "vm", sid)
        strays = []
        try:
            st, js = self.call("PUT", "/v1/sandboxes/" + sid,
                               {"egress": True, "egress_allow": ["127.0.0.1", "127.0.0.0/8"]})
            self.assertEqual((st, js.get("state")), (200, "running"), js)
            self.assertTrue(self.egress_fetch(sid, url).endswith(b"hello after the restart\n"))
            with open(os.path.join(vdir, "qemu.pid")) as f:
                qemu = int(f.read().strip())
            old = self.proxy_pid(sid)
            self.assertEqual(self.proxies(), [old])
            self.assertEqual(self.cgroups(old), self.cgroups(qemu))
            self.broker.kill()
            self.broker.wait(timeout=30)
            type(self).broker = None
            deadline = time.time() + 10
            while time.time() < deadline and alive(old):
                time.sleep(0.05)
            self.assertFalse(alive(old))         # gone with the broker
            self.assertTrue(alive(qemu))         # the VM runs on
            self.assertEqual(self.proxies(), [])
            # Strays a new broker must account for: a proxy of this sandbox
            # whose pidfile was never written, one of a sandbox that is gone.
            sock_dir = tempfile.mkdtemp(prefix="sbx-vmstray-")
            self.addCleanup(shutil.rmtree, sock_dir, True)
            for i, name in enumerate((vdir, os.path.join(self.state, "vm", "ghost"))):
                strays.append(subprocess.Popen(
                    ["sbx-proxy:" + name, "--listen",
                     "unix:%s/s%d.sock" % (sock_dir, i), "--allow", "127.0.0.1"],
                    executable=os.path.join(vmfix.BUILD, "sbx-proxy"),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            deadline = time.time() + 10
            while time.time() < deadline and len(self.proxies()) < 2:
                time.sleep(0.05)
            self.assertEqual(self.proxies(), sorted(p.pid for p in strays))
            self.start_broker()
            # adopted: running at once; an ensure waits for its agent
            st, js = self.call("PUT", "/v1/sandboxes/" + sid,
                               {"egress": True, "egress_allow": ["127.0.0.1", "127.0.0.0/8"]})
            self.assertEqual((st, js.get("state")), (200, "running"), js)
            deadline = time.time() + 30
            while time.time() < deadline and any(p.poll() is None for p in strays):
                time.sleep(0.05)
            self.assertEqual([p.poll() for p in strays], [-signal.SIGKILL] * 2)
            with open(os.path.join(vdir, "qemu.pid")) as f:
                self.assertEqual(int(f.read().strip()), qemu)   # adopted, no new boot
            new = self.proxy_pid(sid)
            self.assertIsNotNone(new)
            self.assertEqual(self.proxies(), [new])
            self.assertNotEqual(new, old)
            want = self.cgroups(qemu)
            for path in want.values():
                self.assertTrue(path.endswith("/sbx-vm/" + sid), want)
            self.assertEqual(self.cgroups(new), want)
            out = self.egress_fetch(sid, url)
            self.assertIn(b"200", out.split(b"\r\n")[0], out)
            self.assertTrue(out.endswith(b"hello after the restart\n"), out)
            # A graceful restart (SIGTERM) too: the stopping broker ends its
            # proxy and link but leaves qemu's egress port for the next one
            # (a newcomer found egress dead for good after one).
            self.stop_broker()
            self.assertTrue(alive(qemu))
            self.start_broker()
            # adopted: running at once; an ensure waits for its agent
            st, js = self.call("PUT", "/v1/sandboxes/" + sid,
                               {"egress": True, "egress_allow": ["127.0.0.1", "127.0.0.0/8"]})
            self.assertEqual((st, js.get("state")), (200, "running"), js)
            out = self.egress_fetch(sid, url)
            self.assertIn(b"200", out.split(b"\r\n")[0], out)
            self.assertTrue(out.endswith(b"hello after the restart\n"), out)
            new = self.proxy_pid(sid)
            self.assertEqual(self.proxies(), [new])
            st, js = self.call("DELETE", "/v1/sandboxes/" + sid)
            self.assertIn(st, (200, 204), js)
            self.assertFalse(alive(qemu))
            self.assertFalse(alive(new))
            self.assertEqual(self.proxies(), [])
        finally:
            srv.shutdown()
            for p in strays:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if self.broker is None:
                self.start_broker()
            self.call("DELETE", "/v1/sandboxes/" + sid)

    @staticmethod
    def cmdline(pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def run_in(self, sid, argv):
        st, data = self.call("POST", "/v1/sandboxes/%s/exec" % sid,
                             {"argv": argv, "timeout_ms": 60000}, raw=True)
        self.assertEqual(st, 200, data)
        out, code = b"", None
        for line in data.decode().splitlines():
            ev = json.loads(line)
            if ev["type"] == "stdout":
                out += ev["data"].encode() if "data" in ev else base64.b64decode(ev["data_b64"])
            elif ev["type"] == "exit":
                code = ev["code"]
        return code, out, b""


if __name__ == "__main__":
    unittest.main()
