"""stackfix - a real sandbox-broker and sandbox-api, as processes on real sockets,
on the runtime under test (SBX_RUNTIME_HOST, SBX_TEST_IMAGE); shared by the
suites that drive the whole stack (test_cli.py, test_api.py).

    stack = Stack("sbxfoo%d-" % os.getpid())       # broker + api, three keys
    stack = Stack(prefix, api_user="nobody")       # api started as root, --user nobody
    stack = Stack(prefix, credentials=True)        # token as a systemd credential
    stack.close()                                  # stop both, remove what is left

Everything the broker makes carries the name prefix PREFIX, so close() (and a
test) can find and remove exactly this stack's containers and volumes.
"""

import base64
import json
import os
import pwd
import re
import shutil
import subprocess

import brokerfix
import sbxtest
from sbxtest import BUILD

BROKER = os.path.join(BUILD, "sandbox-broker")
API = os.path.join(BUILD, "sandbox-api")


def gen_token():
    """A fresh random token (base64 without /+=, about 43 characters)."""
    return base64.b64encode(os.urandom(32)).decode().translate(
        {ord(c): None for c in "/+="})


def clean_env():
    """The environment without SBX_* settings a daemon or the CLI would read."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("SBX_") and k not in ("SBX_TEST_RUNTIME", "SBX_RUNTIME_HOST",
                                              "SBX_TEST_IMAGE", "SBX_TEST_OUT"):
            del env[k]
    return env


class Stack:
    """A broker on the runtime under test and an api on 127.0.0.1:0, with
    their state in one short directory; an operator ("op") and two player
    keys ("pl", "other").

    api_user: start the api as root with `--user API_USER` (it drops to that
    user after binding); the directory is then given to the user's primary
    group with the setgid bit, so the broker's socket (mode 0660) is in that
    group and the api can reach it. broker_args / api_args: extra flags.
    credentials: no token flag; both daemons get CREDENTIALS_DIRECTORY with a
    0400 file broker-token, as systemd's LoadCredential= makes it."""

    def __init__(self, prefix, api_user=None, broker_args=(), api_args=(), credentials=False):
        self.prefix = prefix
        self.api_user = api_user
        self.credentials = credentials
        self.broker_args = list(broker_args)
        self.dir = sbxtest.short_tmpdir("sbxstack-")
        self.broker = None
        self.api = None
        self.apis = []
        self.broker_logs = []
        try:
            if api_user is not None:
                gid = pwd.getpwnam(api_user).pw_gid
                os.chown(self.dir, 0, gid)
                os.chmod(self.dir, 0o2750)
            self.token = gen_token()
            self.token_file = os.path.join(self.dir, "broker.token")
            with open(os.open(self.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(self.token)
            if credentials:
                self.cred_dir = os.path.join(self.dir, "credentials")
                os.mkdir(self.cred_dir, 0o700)
                cred = os.path.join(self.cred_dir, "broker-token")
                with open(os.open(cred, os.O_WRONLY | os.O_CREAT, 0o400), "w") as f:
                    f.write(self.token + "\n")
                os.chmod(self.cred_dir, 0o500)
            self.sock = os.path.join(self.dir, "broker.sock")
            self.start_broker()
            self.api_state = os.path.join(self.dir, "api")
            self.api, self.url = self.start_api(self.api_state, api_args, "api")
            self.operator = self.admin("create-operator", "op")
            self.player = self.admin("create-player", "pl")
            self.other = self.admin("create-player", "other")
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ processes

    def start_broker(self):
        """Start (or restart) the broker on self.sock; waits until it answers."""
        self.broker = sbxtest.start_process(
            [BROKER, "--listen", "unix:" + self.sock, "--runtime", sbxtest.runtime_host()]
            + self.token_args("--token-file") + ["--state-dir", os.path.join(self.dir, "broker"),
             "--image", sbxtest.test_image(), "--name-prefix", self.prefix,
             "--exec-timeout-max", "5m"] + self.broker_args,
            env=self.daemon_env(), log_path=self.next_broker_log())
        sbxtest.wait_for_unix_socket(self.sock, 20, self.broker)
        return self.broker

    def token_args(self, flag):
        """The token flag, or none when the token is a credential."""
        return [] if self.credentials else [flag, self.token_file]

    def daemon_env(self):
        env = clean_env()
        env.pop("CREDENTIALS_DIRECTORY", None)
        if self.credentials:
            env["CREDENTIALS_DIRECTORY"] = self.cred_dir
        return env

    def next_broker_log(self):
        """PREFIXbroker.log for the first start, PREFIXbroker.N.log after."""
        self.broker_logs.append(os.path.join(
            sbxtest.out_dir(), self.prefix + ("broker.%d.log" % (len(self.broker_logs) + 1)
                                              if self.broker_logs else "broker.log")))
        return self.broker_logs[-1]

    def start_api(self, state_dir, extra_args=(), name="api"):
        """Start another api on 127.0.0.1:0 against this broker, with its own
        STATE_DIR; returns (Process, url). Stopped by close()."""
        argv = [API, "--listen", "127.0.0.1:0", "--broker", "unix:" + self.sock] \
            + self.token_args("--broker-token-file") + ["--state-dir", state_dir]
        if self.api_user is not None:
            argv += ["--user", self.api_user]
        p = sbxtest.start_process(argv + list(extra_args), env=self.daemon_env(),
                                  log_path=os.path.join(sbxtest.out_dir(),
                                                        self.prefix + name + ".log"))
        self.apis.append(p)
        port = []

        def listening():
            m = re.search(r'"msg":"listening".*?"port":"(\d+)"', p.output())
            if m:
                port.append(int(m.group(1)))
            return bool(port)
        sbxtest.wait_until(listening, 20, "sandbox-api listening", p)
        return p, "http://127.0.0.1:%d" % port[0]

    def admin(self, what, name, state_dir=None):
        """`sandbox-api admin WHAT NAME` (as the api's user); returns the key
        printed for create-*, else stdout."""
        argv = [API, "--state-dir", state_dir or self.api_state, "admin", what, name]
        if self.api_user is not None:
            argv = ["runuser", "-u", self.api_user, "--"] + argv
        r = subprocess.run(argv, env=clean_env(), capture_output=True, timeout=30)
        if r.returncode != 0:
            raise AssertionError("admin %s: %s" % (what, r.stderr.decode()))
        out = r.stdout.decode().strip()
        if what.startswith("create-"):
            assert len(out) >= 32, "no key printed"
        return out

    # ------------------------------------------------------------ runtime view

    def managed(self):
        """Containers the broker made (its labels and our name prefix)."""
        eng = sbxtest.Engine()
        return [c for c in eng.containers(label=sbxtest.LABEL_MANAGED + "=true")
                if any(n.lstrip("/").startswith(self.prefix) for n in c.get("Names", []))]

    def managed_volumes(self, helper=False):
        """Volumes the broker made (its labels and our name prefix); the
        current helper volume (shared, adr/0009) only with HELPER."""
        keep = None if helper else brokerfix.helper_volume(self.prefix)
        return [v for v in sbxtest.Engine().volumes(label=sbxtest.LABEL_MANAGED + "=true")
                if v["Name"].startswith(self.prefix) and v["Name"] != keep]

    def close(self):
        for p in self.apis:
            p.stop()
        if self.broker is not None:
            self.broker.stop()
        # Whatever a failed test left: remove it straight on the runtime.
        eng = sbxtest.Engine()
        for c in self.managed():
            eng.remove(c["Id"])
        for v in self.managed_volumes(helper=True):
            eng.call("DELETE", "/volumes/%s" % v["Name"], params={"force": "1"},
                     ok=(200, 204, 404, 409))
        for n in eng.call("GET", "/networks", params={
                "filters": json.dumps({"label": ["io.sbx.managed=true"]})}) or []:
            if n.get("Name", "").startswith(self.prefix):
                eng.call("DELETE", "/networks/%s" % n["Id"], ok=(200, 204, 404))
        shutil.rmtree(self.dir, True)
