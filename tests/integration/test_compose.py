"""test_compose - deploy/compose on the fixture's private Docker Engine, the way docs/deploy.md runs it.

Compose is Docker's: this suite runs once (SBX_ONCE), always against the
fixture's dockerd (SBX_DOCKER_HOST), whichever runtime tests/run.sh is looping
over (tests/run.sh runs it in the docker lane). It runs deploy/compose/up.sh, which builds the sbx-broker and sbx-api
images from this tree (deploy/image/daemons.sh: debootstrap once per cache,
then imports), writes the token files and runs `docker-compose up -d`; the
sandbox image is the fixture's busybox test image (SBX_SANDBOX_IMAGE). Then,
only through the port published on 127.0.0.1: a player and an NPC, ensure, an
exec streamed as SSE, a file written and read; `docker-compose down` + `up -d`
keeps the NPC and its /work file. The containers are inspected (api: no
runtime socket, no capability, non-root, read-only root; broker: no network)
and no token is in `docker inspect` output or the logs.

Everything carries a project name and a sandbox name prefix unique to this
run; tearDownClass removes the deployment, its volumes and images, and the
sandboxes, then checks that nothing of it is left in the engine.
"""

import http.client
import json
import os
import shutil
import socket
import subprocess
import time
import unittest

import sbxtest
from sbxtest import REPO

# Once, on the fixture's dockerd: tests/run.sh runs it in the docker lane.
SBX_ONCE = "docker"

COMPOSE_FILE = os.path.join(REPO, "deploy", "compose", "docker-compose.yml")
UP = os.path.join(REPO, "deploy", "compose", "up.sh")
HEALTH_TIMEOUT = 180


class ComposeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.host = sbxtest.env("SBX_DOCKER_HOST")
        cls.engine = sbxtest.Engine(cls.host)
        cls.docker = os.environ.get("SBX_DOCKER_CLI", "/usr/bin/docker")
        tag = "t%d" % os.getpid()
        cls.project = "sbxc%d" % os.getpid()
        cls.prefix = cls.project + "-"
        cls.tag = tag
        cls.port = sbxtest.free_port()
        cls.dir = os.path.join(sbxtest.out_dir(), "compose")
        shutil.rmtree(cls.dir, ignore_errors=True)
        os.makedirs(cls.dir)
        cls.envfile = os.path.join(cls.dir, "compose.env")
        cls.secrets = os.path.join(cls.dir, "secrets")
        # The base root filesystem is cached across the suites of a run
        # (and across runs in a work tree): tests/out is not cleaned.
        cache = os.path.join(REPO, "tests", "out", "image-cache")
        cls.env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_") or
                   k in ("SBX_DOCKER_CLI", "SBX_BUILD", "SBX_COMPOSE_OVERRIDE")}
        cls.env.update(DOCKER_HOST=cls.host, SBX_COMPOSE_PROJECT=cls.project,
                       SBX_API_PORT=str(cls.port), SBX_SANDBOX_IMAGE=sbxtest.test_image(),
                       SBX_SECRETS_DIR=cls.secrets, SBX_CACHE_DIR=cache, SBX_TAG=tag,
                       SBX_NAME_PREFIX=cls.prefix, SBX_COMPOSE_ENV_FILE=cls.envfile)
        # up.sh runs `make all`: not as a child of the make running the suites.
        for k in ("COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
            cls.env.pop(k, None)
        cls.npcs = []
        cls.up_log = ""
        try:
            t0 = time.monotonic()
            r = subprocess.run(["sh", UP], env=cls.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=900)
            cls.up_log = r.stdout.decode(errors="replace")
            cls.up_seconds = time.monotonic() - t0
            print("up.sh took %.1f s" % cls.up_seconds)
            if r.returncode != 0:
                raise AssertionError("up.sh failed (%d):\n%s" % (r.returncode, cls.up_log[-6000:]))
            with open(os.path.join(cls.secrets, "broker.token")) as f:
                cls.token = f.read().strip()
            cls.url_host = "127.0.0.1"
            cls.operator = cls.admin("create-operator", "op")
            cls.player = cls.admin("create-player", "pl")
        except BaseException:
            cls.tearDownClass()
            raise

    # ------------------------------------------------------------ helpers

    @classmethod
    def compose_files(cls):
        """The compose files up.sh recorded (COMPOSE_FILE in its env file)."""
        with open(cls.envfile) as f:
            for line in f:
                if line.startswith("COMPOSE_FILE="):
                    return line.strip().split("=", 1)[1].split(":")
        return [COMPOSE_FILE]

    @classmethod
    def compose(cls, *args, check=True, timeout=300):
        files = []
        for f in cls.compose_files():
            files += ["-f", f]
        r = subprocess.run(["docker-compose", "--env-file", cls.envfile, "-p", cls.project]
                           + files + list(args),
                           env=cls.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("docker-compose %s failed (%d): %s%s" % (
                " ".join(args), r.returncode, r.stdout.decode(errors="replace")[-3000:],
                r.stderr.decode(errors="replace")[-3000:]))
        return r

    @classmethod
    def admin(cls, cmd, name):
        r = cls.compose("exec", "-T", "api", "sandbox-api", "admin", cmd, name)
        key = r.stdout.decode().strip()
        if len(key) < 16:
            raise AssertionError("admin %s %s printed no key: %r" % (cmd, name, r.stderr))
        return key

    @classmethod
    def container(cls, service):
        out = cls.compose("ps", "-q", service).stdout.decode().split()
        if len(out) != 1:
            raise AssertionError("expected one %s container, got %r" % (service, out))
        return out[0]

    def assertNoSecret(self, secret, text, where):
        """Fails naming WHERE, never showing the secret or the text."""
        if secret in text:
            self.fail("a secret appears in %s (not shown)" % where)

    def inspect(self, service):
        return self.engine.inspect(self.container(service))

    def call(self, method, path, key, body=None, headers=None, timeout=120):
        hdrs = {"Authorization": "Bearer " + key}
        hdrs.update(headers or {})
        return sbxtest.tcp_http(self.url_host, self.port, method, path, body, hdrs, timeout)

    def sse(self, npc, argv, key):
        """Runs ARGV through the api; returns [(seconds since the request,
        event, data)] in arrival order, read as the stream arrives."""
        conn = http.client.HTTPConnection(self.url_host, self.port, timeout=120)
        body = json.dumps({"argv": argv}).encode()
        t0 = time.monotonic()
        conn.request("POST", "/api/v1/npcs/%s/sandbox/exec" % npc, body=body,
                     headers={"Authorization": "Bearer " + key,
                              "Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            self.fail("exec: HTTP %d %r" % (r.status, r.read()[:500]))
        self.assertTrue(r.getheader("Content-Type", "").startswith("text/event-stream"))
        events, ev, data = [], None, []
        while True:
            line = r.fp.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line == "":
                if ev is not None:
                    events.append((time.monotonic() - t0, ev, json.loads("\n".join(data))))
                    if ev in ("exit", "error"):
                        break
                ev, data = None, []
            elif line.startswith("event:"):
                ev = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        conn.close()
        return events

    @classmethod
    def wait_healthy(cls):
        deadline = time.monotonic() + HEALTH_TIMEOUT
        states = {}
        while time.monotonic() < deadline:
            states = {}
            for s in ("broker", "api"):
                ids = cls.compose("ps", "-q", s, check=False).stdout.decode().split()
                st = "missing"
                if ids:
                    st = (cls.engine.inspect(ids[0]).get("State", {}).get("Health") or {}).get(
                        "Status", "none")
                states[s] = st
            if all(v == "healthy" for v in states.values()):
                return
            time.sleep(0.5)
        raise AssertionError("not healthy after %d s: %r\n%s" % (
            HEALTH_TIMEOUT, states, cls.compose("logs", "--tail", "30", check=False).stdout.decode(
                errors="replace")))

    # ------------------------------------------------------------ tests

    def test_api_container_has_no_runtime_socket_no_capability_and_no_root(self):
        c = self.inspect("api")
        hc, cfg = c["HostConfig"], c["Config"]
        self.assertEqual(hc.get("CapDrop"), ["ALL"])
        self.assertFalse(hc.get("CapAdd"))
        self.assertFalse(hc.get("Privileged"))
        self.assertTrue(hc.get("ReadonlyRootfs"))
        self.assertIn("no-new-privileges:true", hc.get("SecurityOpt") or [])
        user = cfg.get("User") or ""
        self.assertNotIn(user.split(":")[0], ("", "0", "root"), "api runs as %r" % user)
        runtime_sock = sbxtest.socket_path(self.host)
        for m in c.get("Mounts") or []:
            self.assertNotIn("docker.sock", m.get("Source", "") + m.get("Destination", ""), m)
            self.assertNotEqual(m.get("Source"), runtime_sock, m)
        self.assertFalse([b for b in hc.get("Binds") or [] if "docker.sock" in b or runtime_sock in b])
        # And what the process really has: no capability in any set, uid 10001.
        code, out, err = self.engine.exec(c["Id"], ["cat", "/proc/1/status"])
        self.assertEqual(code, 0, err)
        status = dict(line.split(":\t", 1) for line in out.decode().splitlines() if ":\t" in line)
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            self.assertEqual(int(status[cap], 16), 0, "%s %s" % (cap, status[cap]))
        self.assertEqual(status["Uid"].split()[0], "10001")
        self.assertEqual(status["NoNewPrivs"].strip(), "1")
        # Nothing there speaks to the runtime: no socket file anywhere usual.
        code, out, _ = self.engine.exec(c["Id"], ["sh", "-c", "ls /var/run/docker.sock /run/docker.sock 2>&1; true"])
        self.assertIn(b"No such file", out)

    def test_api_is_published_on_loopback_only_and_broker_has_no_network(self):
        api = self.inspect("api")
        ports = api["NetworkSettings"]["Ports"]["8080/tcp"]
        self.assertEqual([(p["HostIp"], p["HostPort"]) for p in ports], [("127.0.0.1", str(self.port))])
        broker = self.inspect("broker")
        self.assertEqual(broker["HostConfig"]["NetworkMode"], "none")
        self.assertEqual(list(broker["NetworkSettings"]["Networks"].keys()), ["none"])
        self.assertFalse(broker["NetworkSettings"].get("Ports"))
        self.assertEqual(broker["HostConfig"].get("CapDrop"), ["ALL"])
        self.assertTrue(broker["HostConfig"].get("ReadonlyRootfs"))
        for c in (api, broker):
            self.assertEqual(c["HostConfig"]["RestartPolicy"]["Name"], "unless-stopped")

    def test_health_checks_pass_and_no_token_in_inspect_or_logs(self):
        self.wait_healthy()
        for service in ("broker", "api"):
            c = self.inspect(service)
            text = json.dumps(c)
            self.assertNoSecret(self.token, text, "docker inspect of %s" % service)
            self.assertNoSecret(self.token, json.dumps(self.engine.get(
                "/images/%s/json" % c["Config"]["Image"])), "the %s image" % service)
            health = c["State"]["Health"]
            self.assertEqual(health["Status"], "healthy")
            self.assertTrue(health["Log"], "no health check ran")
            self.assertIn("--health", c["Config"]["Healthcheck"]["Test"])
            self.assertTrue(all(entry["ExitCode"] == 0 for entry in health["Log"][-1:]),
                            health["Log"])
        logs = self.compose("logs", "--no-color").stdout.decode(errors="replace")
        self.assertIn("listening", logs)
        self.assertNoSecret(self.token, logs, "docker-compose logs")
        self.assertNoSecret(self.token, self.up_log, "up.sh output")
        self.assertNoSecret(self.token, self.compose("config").stdout.decode(),
                            "docker-compose config")
        for k in (self.operator, self.player):
            self.assertNoSecret(k, logs, "docker-compose logs (an API key)")
        # The token files: 0600, each to the uid of its reader.
        for name, uid in (("broker.token", 0), ("api-broker.token", 10001)):
            st = os.stat(os.path.join(self.secrets, name))
            self.assertEqual(st.st_mode & 0o777, 0o600, name)
            self.assertEqual(st.st_uid, uid, name)

    def test_player_npc_exec_stream_files_and_state_survive_down_up(self):
        npc = "n%d" % (os.getpid() % 100000)
        r = self.call("POST", "/api/v1/npcs", self.player, {"name": npc})
        self.assertEqual(r.status, 201, r.body)
        self.npcs.append(npc)
        r = self.call("PUT", "/api/v1/npcs/%s/sandbox" % npc, self.player, {})
        self.assertEqual(r.status, 200, r.body)
        st = r.json()
        self.assertEqual(st["state"], "running")
        # A sibling container in the same engine, made by the broker.
        sid = st["sandbox_id"]
        sib = [c for c in self.engine.containers(label="%s=%s" % (sbxtest.LABEL_ID, sid))
               if c["Names"][0].lstrip("/").startswith(self.prefix)]
        self.assertEqual(len(sib), 1, sib)

        events = self.sse(npc, ["sh", "-c", "echo one; sleep 2; echo two; id -u; exit 3"],
                          self.player)
        kinds = [e[1] for e in events]
        self.assertEqual(kinds[0], "start", events)
        self.assertEqual(kinds[-1], "exit", events)
        self.assertEqual(events[-1][2]["code"], 3)
        out = "".join(e[2].get("data", "") for e in events if e[1] == "stdout")
        self.assertEqual(out, "one\ntwo\n1000\n")
        first = next(t for t, k, d in events if k == "stdout" and "one" in d.get("data", ""))
        # Streamed, not buffered: "one" arrived well before the end (2 s later).
        self.assertGreater(events[-1][0] - first, 1.0, events)

        payload = b"kept across down/up \x00\xff\n"
        r = self.call("PUT", "/api/v1/npcs/%s/sandbox/files?path=/work/keep.bin" % npc,
                      self.player, payload)
        self.assertEqual(r.status, 200, r.body)
        r = self.call("GET", "/api/v1/npcs/%s/sandbox/files?path=/work/keep.bin" % npc, self.player)
        self.assertEqual((r.status, r.body), (200, payload))

        t0 = time.monotonic()
        self.compose("down")
        self.assertEqual(self.compose("ps", "-q").stdout.decode().split(), [])
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
        self.compose("up", "-d")
        self.wait_healthy()
        print("down + up -d until healthy: %.1f s" % (time.monotonic() - t0))

        r = self.call("GET", "/api/v1/npcs", self.player)
        self.assertEqual(r.status, 200, r.body)
        self.assertIn(npc, [n["name"] for n in r.json()])
        r = self.call("PUT", "/api/v1/npcs/%s/sandbox" % npc, self.player, {})
        self.assertEqual((r.status, r.json()["state"]), (200, "running"), r.body)
        r = self.call("GET", "/api/v1/npcs/%s/sandbox/files?path=/work/keep.bin" % npc, self.player)
        self.assertEqual((r.status, r.body), (200, payload))
        events = self.sse(npc, ["cat", "/work/keep.bin"], self.player)
        self.assertEqual(events[-1][1], "exit", events)
        self.assertEqual(events[-1][2]["code"], 0)

    def test_restart_policy_brings_killed_daemons_back(self):
        before = {s: self.inspect(s) for s in ("broker", "api")}
        for s, c in before.items():
            # A crash, as far as Docker can tell: SIGKILL from outside.
            os.kill(c["State"]["Pid"], 9)
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while time.monotonic() < deadline:
            now = {s: self.inspect(s) for s in before}
            if all(now[s]["RestartCount"] > before[s]["RestartCount"] and
                   now[s]["State"]["Running"] for s in before):
                break
            time.sleep(0.5)
        else:
            self.fail("not restarted: %r" % {s: (c["RestartCount"], c["State"]["Status"])
                                              for s, c in now.items()})
        self.wait_healthy()
        r = self.call("GET", "/api/v1/whoami", self.player)
        self.assertEqual((r.status, r.json()["name"]), (200, "pl"), r.body)

    def up(self, env):
        r = subprocess.run(["sh", UP], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=900)
        log = r.stdout.decode(errors="replace")
        self.assertEqual(r.returncode, 0, log[-6000:])
        self.assertNoSecret(self.token, log, "up.sh output")
        return log

    def images_of(self, ref):
        return [i["Id"] for i in self.engine.get("/images/json")
                if ref in (i.get("RepoTags") or [])]

    def test_up_again_keeps_settings_images_and_containers(self):
        # Runs last (u): it recreates the broker once, with an override.
        override = os.path.join(self.dir, "override.yml")
        with open(override, "w") as f:
            f.write("services:\n  broker:\n    environment:\n"
                    "      SBX_IMAGES: sbx-stock-busybox:1\n")
        with open(self.envfile, "a") as f:
            f.write("# mine\nOPERATOR_NOTE=keep me\n")
        self.up(dict(self.env, SBX_COMPOSE_OVERRIDE=override))
        # Again with none of the settings in the environment: the env file's
        # port, prefix, tag, sandbox image and override are this run's defaults.
        bare = {k: v for k, v in self.env.items() if k not in (
            "SBX_API_PORT", "SBX_NAME_PREFIX", "SBX_TAG", "SBX_SANDBOX_IMAGE",
            "SBX_COMPOSE_OVERRIDE")}
        before = {s: self.inspect(s) for s in ("broker", "api")}
        images = {t: self.images_of("%s:%s" % (t, self.tag)) for t in ("sbx-broker", "sbx-api")}
        log = self.up(bare)
        with open(self.envfile) as f:
            text = f.read()
        for line in ("SBX_API_PORT=%d" % self.port, "SBX_NAME_PREFIX=" + self.prefix,
                     "SBX_TAG=" + self.tag, "SBX_SANDBOX_IMAGE=" + sbxtest.test_image(),
                     "COMPOSE_FILE=%s:%s" % (COMPOSE_FILE, override), "# mine",
                     "OPERATOR_NOTE=keep me"):
            self.assertIn(line + "\n", text)
        self.assertEqual(text.count("OPERATOR_NOTE="), 1, text)
        after = {s: self.inspect(s) for s in ("broker", "api")}
        self.assertIn("SBX_IMAGES=sbx-stock-busybox:1", after["broker"]["Config"]["Env"])
        # Same content: not imported again, no container recreated.
        self.assertIn("image sbx-broker:%s unchanged" % self.tag, log)
        for s in ("broker", "api"):
            self.assertEqual(after[s]["Id"], before[s]["Id"], s + " was recreated")
        for t, ids in images.items():
            self.assertEqual(self.images_of("%s:%s" % (t, self.tag)), ids, t)
        dangling = [i["Id"] for i in self.engine.get(
            "/images/json", params={"filters": json.dumps({"dangling": ["true"]})})
            if (i.get("Labels") or {}).get("org.opencontainers.image.title") in (
                "sbx-broker", "sbx-api")]
        self.assertEqual(dangling, [])
        r = self.call("GET", "/api/v1/whoami", self.player)
        self.assertEqual((r.status, r.json()["name"]), (200, "pl"), r.body)

    # ------------------------------------------------------------ cleanup

    @classmethod
    def tearDownClass(cls):
        problems = []
        if os.path.exists(cls.envfile):
            for npc in cls.npcs:
                try:
                    sbxtest.tcp_http("127.0.0.1", cls.port, "DELETE", "/api/v1/npcs/%s/sandbox" % npc,
                                     headers={"Authorization": "Bearer " + cls.player}, timeout=60)
                except Exception as e:  # the engine sweep below removes it anyway
                    problems.append("destroy %s: %s" % (npc, e))
            r = cls.compose("down", "-v", "--rmi", "all", "--remove-orphans", check=False)
            if r.returncode != 0:
                problems.append("docker-compose down: %s" % r.stderr.decode(errors="replace")[-2000:])
        # Sweep what is left of this run, by name prefix and project label.
        proj = "com.docker.compose.project=%s" % cls.project
        for c in cls.engine.containers():
            name = c["Names"][0].lstrip("/")
            if name.startswith(cls.prefix) or c.get("Labels", {}).get(
                    "com.docker.compose.project") == cls.project:
                cls.engine.remove(c["Id"])
        for v in cls.engine.volumes():
            if v["Name"].startswith(cls.prefix) or v["Name"].startswith(cls.project + "_"):
                cls.engine.call("DELETE", "/volumes/%s" % v["Name"], params={"force": "1"},
                                ok=(204, 404))
        for n in cls.engine.get("/networks"):
            if n["Name"].startswith(cls.project + "_"):
                cls.engine.call("DELETE", "/networks/%s" % n["Id"], ok=(204, 404))
        for ref in ("sbx-broker:%s" % cls.tag, "sbx-api:%s" % cls.tag):
            cls.engine.call("DELETE", "/images/%s" % ref, params={"force": "1"}, ok=(200, 404))
        left = ([c["Names"] for c in cls.engine.containers(label=proj)] +
                [c["Names"] for c in cls.engine.containers()
                 if c["Names"][0].lstrip("/").startswith(cls.prefix)] +
                [v["Name"] for v in cls.engine.volumes()
                 if v["Name"].startswith(cls.prefix) or v["Name"].startswith(cls.project + "_")] +
                [n["Name"] for n in cls.engine.get("/networks") if n["Name"].startswith(cls.project)] +
                [i["RepoTags"] for i in cls.engine.get("/images/json")
                 if any(t.endswith(":" + cls.tag) for t in i.get("RepoTags") or [])])
        if left:
            problems.append("left in the engine: %r" % left)
        if problems:
            raise AssertionError("; ".join(problems))


if __name__ == "__main__":
    unittest.main()
