# test_images.py - any allowlisted image works (issue 10 item 1) and the helper's volume delivery (item 2; adr/0009), on a real runtime.
#
# The suite builds its own images from busybox-static, as a platform team's
# stock image would be: no /work, /tmp 0755 root, no passwd entry for uid
# 1000 ("bare"); the same with a root-owned /work that ships a file
# ("rootwork"); no shell and no /etc at all, only the busybox binary under
# /opt/tools/busybox ("noshell": execs name that binary, whose sh finds
# its applets without PATH); and three an operator must not be able to
# use (adr/0045): /.sbx a link into /work with a program planted at
# /work/sub/sbx-helper ("sbxlink"), /work a regular file ("workfile"), /work
# a link to /etc ("worklink"). It also runs the
# harness's test image and the default Debian image of deploy/image/build.sh
# (debootstrap: built once per run into the runtimes' directory and imported
# into each runtime from that cached tar).

import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import unittest

import brokerfix
from brokerfix import BrokerTestCase, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUSYBOX = "/bin/busybox"
BB = "/opt/tools/busybox"   # named busybox: it then runs argv[1] as the applet
DEFAULT_IMAGE = "sbx-default:bookworm"
# What Docker grants by default; Podman reports CapDrop ALL as this list.
DEFAULT_CAPS = {"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID",
                "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL",
                "AUDIT_WRITE"}
IMAGES = {"bare": "sbx-imgtest-bare:1", "rootwork": "sbx-imgtest-rootwork:1",
          "noshell": "sbx-imgtest-noshell:1", "sbxlink": "sbx-imgtest-sbxlink:1",
          "workfile": "sbx-imgtest-workfile:1", "worklink": "sbx-imgtest-worklink:1"}
# What the planted program would do if it ever ran as the sandbox's idle
# process or agent: leave a mark in /work (the sandbox's volume), then idle.
PLANTED = b"#!/bin/sh\necho planted-ran >> /work/planted-ran\nexec sleep 100000\n"
# Text no reply to a player may carry: host paths of the runtimes.
HOST_TEXT = ("/var/lib", "overlay", "/containers/storage", "/volumes/")


def _add(t, name, kind, mode=0o755, data=None, uid=0, link=None):
    ti = tarfile.TarInfo(name)
    ti.mode, ti.uid, ti.gid, ti.mtime = mode, uid, uid, int(time.time())
    if kind == "dir":
        ti.type = tarfile.DIRTYPE
        t.addfile(ti)
    elif kind == "link":
        ti.type, ti.linkname = tarfile.SYMTYPE, link
        t.addfile(ti)
    else:
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))


def rootfs_tar(kind):
    """The tar of one test image's root filesystem (made here, as root 0:0)."""
    with open(BUSYBOX, "rb") as f:
        bb = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        _add(t, ".", "dir")
        _add(t, "tmp", "dir", 0o755)          # not 1777: the broker must cope
        for d in ("proc", "sys", "dev"):
            _add(t, d, "dir")
        if kind == "noshell":
            _add(t, "opt", "dir")
            _add(t, "opt/tools", "dir")
            _add(t, "opt/tools/busybox", "file", 0o755, bb)
        else:
            _add(t, "bin", "dir")
            _add(t, "bin/busybox", "file", 0o755, bb)
            applets = subprocess.run([BUSYBOX, "--list"], capture_output=True,
                                     check=True).stdout.decode().split()
            for a in applets:
                if a != "busybox":
                    _add(t, "bin/" + a, "link", link="busybox")
            _add(t, "etc", "dir")
            _add(t, "etc/passwd", "file", 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
            _add(t, "etc/group", "file", 0o644, b"root:x:0:\n")
        if kind == "rootwork":
            _add(t, "work", "dir", 0o755)
            _add(t, "work/shipped", "file", 0o644, b"from the image\n")
        elif kind == "sbxlink":
            _add(t, ".sbx", "link", link="/work/sub")
            _add(t, "work", "dir", 0o777)
            _add(t, "work/sub", "dir", 0o755)
            _add(t, "work/sub/sbx-helper", "file", 0o755, PLANTED)
        elif kind == "workfile":
            _add(t, "work", "file", 0o644, b"not a directory\n")
        elif kind == "worklink":
            _add(t, "work", "link", link="/etc")
    return buf.getvalue()


def foreign_arch_archive(name, arch="arm64"):
    """A docker-archive (docker save format) of the bare rootfs whose
    config says ARCH: an image the amd64 helper cannot run in."""
    layer = rootfs_tar("bare")
    diff = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": arch, "os": "linux",
                         "config": {"Env": ["PATH=/bin"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff]},
                         "history": [{"created_by": "test_images.py"}]}).encode()
    cname = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": cname, "RepoTags": [name],
                            "Layers": ["layer/layer.tar"]}]).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        _add(t, "layer", "dir")
        _add(t, "layer/layer.tar", "file", 0o644, layer)
        _add(t, cname, "file", 0o644, config)
        _add(t, "manifest.json", "file", 0o644, manifest)
    return buf.getvalue()


def load_archive(runtime, host, data):
    r = subprocess.run(cli(runtime, host) + ["load"], input=data, capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("load: %s" % r.stderr.decode(errors="replace"))


def cli(runtime, host):
    if runtime == "docker":
        return [os.environ.get("SBX_DOCKER_CLI", "/usr/bin/docker"), "-H", host]
    return [os.environ.get("SBX_PODMAN_CLI", "/usr/bin/podman"), "--remote", "--url", host]


def import_image(runtime, host, name, tar_bytes):
    flag = "-c" if runtime == "docker" else "--change"
    r = subprocess.run(cli(runtime, host) + ["import", flag, "ENV PATH=/bin:/usr/bin", "-", name],
                       input=tar_bytes, capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("import %s: %s" % (name, r.stderr.decode(errors="replace")))


def build_default_image(runtime, host):
    """deploy/image/build.sh into this runtime; the debootstrap tar is cached
    in the runtimes' directory, so the second runtime only imports it."""
    cache = os.path.join(brokerfix.env_required("SBX_RUNTIMES_DIR"), "default-image-cache")
    os.makedirs(cache, exist_ok=True)
    t0 = time.monotonic()
    # The docker and podman lanes run at once: one debootstraps into the
    # cache while the other waits, then only imports the tar.
    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(["sh", os.path.join(REPO, "deploy", "image", "build.sh"), runtime,
                            host, cache, DEFAULT_IMAGE], capture_output=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError("deploy/image/build.sh failed:\n%s" % r.stderr.decode(errors="replace")[-3000:])
    print("default image ready on %s in %.1f s" % (runtime, time.monotonic() - t0))


class ImagesBase(BrokerTestCase):
    """One broker whose allowlist holds every image under test."""

    extra_config = {}

    @classmethod
    def setUpClass(cls):
        rt = brokerfix.env_required("SBX_TEST_RUNTIME")
        host = brokerfix.env_required("SBX_RUNTIME_HOST")
        if not getattr(ImagesBase, "_built_" + rt, False):
            for kind, name in IMAGES.items():
                import_image(rt, host, name, rootfs_tar(kind))
            build_default_image(rt, host)
            setattr(ImagesBase, "_built_" + rt, True)
        super().setUpClass()

    @classmethod
    def start_broker(cls, limits=None, runtime_sock=None, name=None):
        b = brokerfix.Broker(runtime_sock or cls.runtime_sock, cls.image, limits,
                             name=name or cls.__name__)
        with open(b.config) as f:
            cfg = json.load(f)
        cfg["images"] = list(IMAGES.values()) + [DEFAULT_IMAGE]
        cfg.update(cls.extra_config)
        with open(b.config, "w") as f:
            json.dump(cfg, f)
        cls.brokers.append(b)
        b.start()
        return b

    def container(self, sid):
        cs = self.engine.containers_of(sid)
        self.assertEqual(len(cs), 1, cs)
        return self.engine.inspect(cs[0]["Id"])


class TestAnyImage(ImagesBase):
    """ensure, exec, files and capabilities on images sbx did not prepare."""

    def check_image(self, image, argv0=()):
        argv0 = list(argv0)
        sid = self.new_id("img")
        r = self.client.ensure(sid, image=image)
        self.assertEqual(r.status, 200, r)
        self.assertEqual((r.json()["state"], r.json()["image"]), ("running", image), r)

        res = self.client.exec(sid, argv0 + ["sh", "-c", "echo x > /work/a && id -u"])
        self.assertEqual((bytes(res.out), res.code), (b"1000\n", 0), res)

        data = bytes(range(256)) * 64
        r = self.client.write(sid, "/work/dir/f.bin", data)
        self.assertEqual(r.status, 200, r)
        r = self.client.read(sid, "/work/dir/f.bin")
        self.assertEqual((r.status, r.body), (200, data))
        r = self.client.list(sid, "/work")
        self.assertEqual(r.status, 200, r)
        names = {e["name"]: e["type"] for e in r.json()}
        self.assertEqual((names.get("a"), names.get("dir")), ("file", "dir"), names)

        res = self.client.exec(sid, argv0 + ["cat", "/proc/self/status"])
        self.assertEqual(res.code, 0, res)
        caps = dict(line.split(":\t", 1) for line in bytes(res.out).decode().splitlines()
                    if line.startswith(("CapEff", "CapBnd", "CapPrm", "NoNewPrivs")))
        self.assertEqual(caps.get("CapEff"), "0000000000000000", caps)
        self.assertEqual(caps.get("CapBnd"), "0000000000000000", caps)
        self.assertEqual(caps.get("NoNewPrivs"), "1", caps)

        # /tmp is usable whatever the image's /tmp mode is
        res = self.client.exec(sid, argv0 + ["sh", "-c", "echo t > /tmp/t && cat /tmp/t"])
        self.assertEqual((bytes(res.out), res.code), (b"t\n", 0), res)
        # the running container holds no capability either (inspected)
        h = self.container(sid)["HostConfig"]
        self.assertFalse(h.get("CapAdd"), h.get("CapAdd"))
        dropped = {c.upper().replace("CAP_", "") for c in h.get("CapDrop") or []}
        self.assertTrue("ALL" in dropped or DEFAULT_CAPS <= dropped, dropped)
        return sid

    def test_bare_image_without_work_tmp_0755_no_passwd_entry(self):
        self.check_image(IMAGES["bare"])

    def test_image_with_root_owned_work_keeps_its_files(self):
        sid = self.check_image(IMAGES["rootwork"])
        r = self.client.read(sid, "/work/shipped")
        self.assertEqual((r.status, r.body), (200, b"from the image\n"))

    def test_image_without_a_shell(self):
        self.check_image(IMAGES["noshell"], argv0=[BB])
        sid = self.ids[-1]
        res = self.client.exec(sid, ["sh", "-c", "true"])
        self.assertEqual(res.code, 127, res)   # there really is no shell

    def test_the_harness_test_image(self):
        self.check_image(brokerfix.env_required("SBX_TEST_IMAGE"))

    def test_the_default_debootstrap_image(self):
        self.check_image(DEFAULT_IMAGE)

    def test_stop_then_ensure_keeps_work_writable(self):
        sid = self.check_image(IMAGES["bare"])
        self.assertEqual(self.client.stop(sid).status, 200)
        self.assertEqual(self.client.ensure(sid, image=IMAGES["bare"]).status, 200)
        res = self.client.sh(sid, "echo y >> /work/a && cat /work/a")
        self.assertEqual((bytes(res.out), res.code), (b"x\ny\n", 0), res)


    def test_image_change_keeps_work_as_the_user_left_it(self):
        # An existing volume is not prepared again: replacing the container
        # (another image) neither re-chowns /work nor copies the new image's
        # /work into it.
        sid = self.check_image(IMAGES["bare"])
        res = self.client.sh(sid, "chmod 0750 /work && stat -c '%a %u' /work")
        self.assertEqual(bytes(res.out), b"750 1000\n", res)
        old = self.engine.containers_of(sid)[0]["Id"]
        r = self.client.ensure(sid, image=IMAGES["rootwork"])
        self.assertEqual((r.status, r.json()["image"]), (200, IMAGES["rootwork"]), r)
        self.assertNotEqual(self.engine.containers_of(sid)[0]["Id"], old)
        res = self.client.sh(sid, "stat -c '%a %u' /work; ls /work")
        self.assertEqual(bytes(res.out).decode().split(), ["750", "1000", "a", "dir"], res)

    def test_an_op_right_after_a_replacing_ensure_reaches_the_new_container(self):
        # The agent channel of the replaced container may still look alive
        # when ensure answers: the next exec and read must start a new agent
        # in the new container, never be reset on the old one (adr/0045).
        sid = self.check_image(IMAGES["bare"])
        n = int(os.environ.get("SBX_REPLACE_ROUNDS", "12"))
        for i in range(n):
            image = IMAGES["rootwork" if i % 2 == 0 else "bare"]
            r = self.client.ensure(sid, image=image)
            self.assertEqual((r.status, r.json().get("image")), (200, image), r)
            if i % 3 == 2:      # a stop and a start: the same container again
                self.assertEqual(self.client.stop(sid).status, 200)
                self.assertEqual(self.client.ensure(sid, image=image).status, 200)
            res = self.client.sh(sid, "echo %d" % i)
            self.assertEqual((bytes(res.out), res.code), (b"%d\n" % i, 0), (i, res))
            r = self.client.read(sid, "/work/a")
            self.assertEqual((r.status, r.body), (200, b"x\n"), (i, r))


class TestMountPaths(ImagesBase):
    """An image cannot redirect a mount (adr/0045): /.sbx or /work a link
    or a file is refused at ensure with one sentence, before anything is
    made, and the planted program never runs."""

    def assertRefused(self, r, image, path, what):
        self.assertError(r, 400, "image_not_allowed")
        msg = r.json()["error"]["message"]
        self.assertIn("image %s cannot be used: its %s is %s" % (image, path, what), msg)
        self.assertIn("rebuild the image with %s a directory or without it" % path, msg)
        body = r.body.decode(errors="replace")
        for t in HOST_TEXT + (os.environ.get("SBX_RUNTIMES_DIR", "/nonexistent-dir"), REPO):
            self.assertNotIn(t, body)

    def assertNothingOf(self, sid):
        self.assertEqual(self.engine.containers_of(sid), [])
        self.assertEqual(self.engine.volumes_of(sid), [])
        self.assertEqual(self.engine.containers("io.sbx.role=image-probe"), [])
        r = self.client.sandboxes()
        self.assertEqual(r.status, 200, r)
        self.assertNotIn(sid, json.dumps(r.json()))

    def test_a_linked_helper_dir_is_refused_and_the_planted_program_never_runs(self):
        image = IMAGES["sbxlink"]
        n = int(os.environ.get("SBX_L1_ENSURES", "50"))
        sid = self.new_id("l1")
        for i in range(n):
            r = self.client.ensure(sid, image=image)
            self.assertRefused(r, image, "/.sbx", "a symbolic link")
            self.assertNothingOf(sid)
        # A sandbox of a good image stays good when asked for the bad one:
        # refused before its container is replaced, its /work untouched.
        other = self.new_id("l1ok")
        self.assertEqual(self.client.ensure(other, image=IMAGES["bare"]).status, 200)
        self.assertEqual(self.client.write(other, "/work/keep", b"kept\n").status, 200)
        cid = self.engine.containers_of(other)[0]["Id"]
        for i in range(3):
            self.assertRefused(self.client.ensure(other, image=image), image, "/.sbx",
                               "a symbolic link")
        self.assertEqual(self.engine.containers_of(other)[0]["Id"], cid)
        res = self.client.sh(other, "cat /work/keep; ls /work")
        self.assertEqual(bytes(res.out).decode().split(), ["kept", "keep"], res)

    def test_work_a_file_or_a_link_is_refused_alike_and_leaves_nothing(self):
        for kind, what in (("workfile", "a file, not a directory"),
                           ("worklink", "a symbolic link")):
            image = IMAGES[kind]
            sid = self.new_id(kind)
            for i in range(3):     # every ensure alike: refused, never a 502
                self.assertRefused(self.client.ensure(sid, image=image), image, "/work", what)
                self.assertNothingOf(sid)
            # the id is free: a good image works at once
            self.assertEqual(self.client.ensure(sid, image=IMAGES["bare"]).status, 200)


class TestHelperVolume(ImagesBase):
    """sbx-helper arrives in a read-only named volume named by its hash."""

    def test_helper_volume_is_read_only_and_no_host_path_is_mounted(self):
        sid = self.new_id("hv")
        self.assertEqual(self.client.ensure(sid, image=IMAGES["bare"]).status, 200)
        d = self.container(sid)
        mounts = {m.get("Destination"): m for m in d.get("Mounts") or []}
        self.assertNotIn("bind", [m.get("Type") for m in mounts.values()], mounts)
        m = mounts.get("/.sbx")
        self.assertIsNotNone(m, mounts)
        self.assertEqual((m.get("Type"), m.get("Name"), m.get("RW")),
                         ("volume", brokerfix.helper_volume(), False), m)
        self.assertEqual(d["Config"]["Labels"].get("io.sbx.helper"), brokerfix.helper_volume())
        res = self.client.sh(sid, "echo x > /.sbx/sbx-helper; touch /.sbx/new; "
                                  "ls /.sbx; sha256sum /.sbx/sbx-helper")
        err = bytes(res.err).decode()
        self.assertEqual(err.count("Read-only file system"), 2, res)
        with open(brokerfix.helper_binary(), "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(bytes(res.out).decode().split(), ["sbx-helper", want, "/.sbx/sbx-helper"])

    def test_changed_helper_reaches_an_existing_sandbox_after_a_restart(self):
        sid = self.new_id("hc")
        other = self.new_id("hk")
        for s in (sid, other):
            self.assertEqual(self.client.ensure(s).status, 200)
        self.assertEqual(self.client.write(sid, "/work/keep", b"kept\n").status, 200)
        old_cid = self.engine.containers_of(sid)[0]["Id"]
        # A rebuilt helper: the same program with other bytes (a trailer).
        d = tempfile.mkdtemp(prefix="sbx-helper-changed-")
        self.addCleanup(shutil.rmtree, d, True)
        changed = os.path.join(d, "sbx-helper")
        shutil.copyfile(brokerfix.helper_binary(), changed)
        with open(changed, "ab") as f:
            f.write(b"\0rebuilt %d\n" % time.time_ns())
        os.chmod(changed, 0o755)
        with open(changed, "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()
        new_vol = brokerfix.helper_volume(helper=changed)

        # The documented step: restart the broker with the new helper.
        self.restart_with(helper_path=changed)
        r = self.client.ensure(sid)
        self.assertEqual(r.status, 200, r)
        new_cid = self.engine.containers_of(sid)[0]["Id"]
        self.assertNotEqual(new_cid, old_cid, "the container was not replaced")
        res = self.client.sh(sid, "sha256sum /.sbx/sbx-helper; cat /work/keep; id -u")
        self.assertEqual(bytes(res.out).decode().split(), [want, "/.sbx/sbx-helper", "kept", "1000"], res)
        self.assertEqual(self.engine.inspect(new_cid)["Config"]["Labels"].get("io.sbx.helper"), new_vol)
        # the old volume is still mounted by `other`: kept
        self.assertIn(brokerfix.helper_volume(), self.helper_volumes())

        # Back to the original helper: both sandboxes get it on their next
        # ensure, and the changed helper's volume, unused, is removed.
        self.restart_with(helper_path=None)
        for s in (sid, other):
            self.assertEqual(self.client.ensure(s).status, 200)
        gone = wait_until(lambda: new_vol not in self.helper_volumes(), 15, 0.2)
        self.assertTrue(gone, "unused helper volume %s was not removed: %r" % (new_vol, self.helper_volumes()))
        res = self.client.sh(sid, "cat /work/keep")
        self.assertEqual(bytes(res.out), b"kept\n", res)

    def helper_volumes(self):
        return [v["Name"] for v in self.engine.volumes("io.sbx.helper-stem=sbx-helper")]

    def restart_with(self, helper_path):
        b = self.broker
        b.stop()
        with open(b.config) as f:
            cfg = json.load(f)
        if helper_path is None:
            cfg.pop("helper_path", None)
        else:
            cfg["helper_path"] = helper_path
        with open(b.config, "w") as f:
            json.dump(cfg, f)
        b.start()
        self.assertTrue(b.alive())


class TestCheck(unittest.TestCase):
    """sandbox-broker --check: one sentence per problem, exit 0 or 69."""

    @classmethod
    def setUpClass(cls):
        cls.rt = brokerfix.env_required("SBX_TEST_RUNTIME")
        cls.host = brokerfix.env_required("SBX_RUNTIME_HOST")
        for kind in ("bare", "sbxlink", "workfile", "worklink"):
            import_image(cls.rt, cls.host, IMAGES[kind], rootfs_tar(kind))
        load_archive(cls.rt, cls.host, foreign_arch_archive("sbx-imgtest-arm64:1"))
        cls.dir = tempfile.mkdtemp(prefix="sbx-check-")
        cls.token = os.path.join(cls.dir, "token")
        fd = os.open(cls.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (brokerfix.CANARY + "\n").encode())
        os.close(fd)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)

    def check(self, images, helper=None, token="default", runtime=None):
        argv = [brokerfix.broker_binary(), "--check", "--runtime",
                runtime or "unix:" + brokerfix.unix_path(self.host),
                "--state-dir", os.path.join(self.dir, "state"), "--image", images[0]]
        if token is not None:
            argv += ["--token-file", self.token if token == "default" else token]
        if len(images) > 1:
            argv += ["--images", ",".join(images[1:])]
        if helper is not None:
            argv += ["--helper-path", helper]
        env = dict(os.environ)
        env.pop("SBX_BROKER_TOKEN", None)
        env.pop("CREDENTIALS_DIRECTORY", None)
        r = subprocess.run(argv, capture_output=True, timeout=120, env=env)
        out = r.stdout.decode()
        self.assertNotIn(brokerfix.CANARY, out + r.stderr.decode())
        return r.returncode, out, [l[len("problem: "):] for l in out.splitlines()
                                   if l.startswith("problem: ")]

    def test_usable_images_pass(self):
        rc, out, problems = self.check([IMAGES["bare"], brokerfix.env_required("SBX_TEST_IMAGE")])
        self.assertEqual((rc, problems), (0, []), out)
        self.assertIn("image: %s (linux/amd64): ok" % IMAGES["bare"], out)
        self.assertIn("0 problems", out)

    def test_absent_and_foreign_architecture_images_are_problems(self):
        rc, out, problems = self.check([IMAGES["bare"], "sbx-imgtest-absent:1", "sbx-imgtest-arm64:1"])
        self.assertEqual(rc, 69, out)
        self.assertEqual(len(problems), 2, out)
        self.assertIn("image sbx-imgtest-absent:1 is not in the runtime", problems[0])
        self.assertIn("image sbx-imgtest-arm64:1 is for arm64 but sbx-helper is built for amd64",
                      problems[1])
        self.assertIn("2 problems", out)

    def test_linked_or_file_mount_paths_are_problems(self):
        rc, out, problems = self.check([IMAGES["bare"], IMAGES["sbxlink"], IMAGES["workfile"],
                                        IMAGES["worklink"]])
        self.assertEqual(rc, 69, out)
        self.assertEqual(problems, [
            "image %s cannot be used: its /.sbx is a symbolic link, which the runtime would "
            "follow when it mounts there; rebuild the image with /.sbx a directory or without "
            "it." % IMAGES["sbxlink"],
            "image %s cannot be used: its /work is a file, not a directory, and the sandbox "
            "mounts there; rebuild the image with /work a directory or without it."
            % IMAGES["workfile"],
            "image %s cannot be used: its /work is a symbolic link, which the runtime would "
            "follow when it mounts there; rebuild the image with /work a directory or without "
            "it." % IMAGES["worklink"]], out)
        self.assertIn("image: %s (linux/amd64): ok" % IMAGES["bare"], out)
        for t in HOST_TEXT:
            self.assertNotIn(t, out)
        # its probe containers are gone
        r = subprocess.run(cli(self.rt, self.host) + ["ps", "-aq", "--filter",
                           "label=io.sbx.role=image-probe"], capture_output=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, b""), r)

    def test_a_dynamic_helper_is_a_problem(self):
        rc, out, problems = self.check([IMAGES["bare"]], helper="/bin/true")
        self.assertEqual(rc, 69, out)
        self.assertEqual(len(problems), 1, out)
        self.assertIn("dynamically linked", problems[0])

    def test_no_token_is_needed(self):
        # An operator checking a host by hand has no token: --check still
        # checks (0 when all is well), and reports the runtime's problems.
        rc, out, problems = self.check([IMAGES["bare"]], token=None)
        self.assertEqual((rc, problems), (0, []), out)
        self.assertIn("0 problems", out)
        rc, out, problems = self.check([IMAGES["bare"]], token=None,
                                       runtime="unix:" + os.path.join(self.dir, "none.sock"))
        self.assertEqual(rc, 69, out)
        self.assertIn("container runtime unreachable", problems[0])
        self.assertFalse(any("token" in p for p in problems), out)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "state")))

    def test_a_configured_short_token_is_one_problem(self):
        short = os.path.join(self.dir, "short.token")
        fd = os.open(short, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b"tooshort\n")
        os.close(fd)
        rc, out, problems = self.check([IMAGES["bare"]], token=short)
        self.assertEqual(rc, 69, out)
        self.assertEqual(len(problems), 1, out)
        self.assertIn("broker token", problems[0])
        self.assertIn("at least 16", problems[0])
        self.assertNotIn("tooshort", out)
        self.assertIn("image: %s (linux/amd64): ok" % IMAGES["bare"], out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
