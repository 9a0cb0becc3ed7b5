"""measure_exec - time a trivial exec (`true`) through the Engine API vs the CLIs.

usage: measure_exec.py ENVFILE [ROUNDS]   (ENVFILE: DIR/env from runtimes.sh up)
For each runtime: one running container of the test image, then ROUNDS of
  api-inproc  Engine API from this process (POST exec create + start, one
              keep-alive-less unix socket request each; what the broker does)
  api-curl    the same two calls with curl --unix-socket (2 processes)
  docker-cli  /usr/bin/docker exec (DOCKER_HOST = the runtime's socket)
  podman-cli  /usr/bin/podman exec (podman only, private storage)
and prints median / p90 / min in ms. Used for adr/0001.
"""

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import sbxtest  # noqa: E402


def load_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            if k:
                env[k] = v
    return env


def timed(fn, rounds):
    fn()  # warm-up
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    env = load_env(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    os.environ.update(env)
    print("%-8s %-11s %8s %8s %8s" % ("runtime", "method", "median", "p90", "min"))
    for rt in env["SBX_RUNTIMES"].split(","):
        host = env["SBX_%s_HOST" % rt.upper()]
        sock = sbxtest.socket_path(host)
        eng = sbxtest.Engine(host)
        cid = eng.run(("sleep", "3600"), image=env["SBX_TEST_IMAGE"])
        try:
            def api_inproc():
                code, _, _ = eng.exec(cid, ["true"], user="1000")
                assert code == 0

            def api_curl():
                r = subprocess.run(
                    ["curl", "-sf", "--unix-socket", sock, "-H", "Content-Type: application/json",
                     "-d", '{"Cmd":["true"],"User":"1000","AttachStdout":true,"AttachStderr":true}',
                     "http://localhost/v1.41/containers/%s/exec" % cid],
                    check=True, capture_output=True)
                eid = r.stdout.decode().split('"Id":"')[1].split('"')[0]
                subprocess.run(
                    ["curl", "-sf", "--unix-socket", sock, "-H", "Content-Type: application/json",
                     "-d", '{"Detach":false,"Tty":false}',
                     "http://localhost/v1.41/exec/%s/start" % eid],
                    check=True, capture_output=True)

            def docker_cli():
                subprocess.run([env["SBX_DOCKER_CLI"], "-H", host, "exec", "-u", "1000", cid, "true"],
                               check=True, capture_output=True, timeout=60)

            def podman_cli():
                subprocess.run([env["SBX_PODMAN_CLI"], "exec", "-u", "1000", cid, "true"],
                               check=True, capture_output=True, timeout=60)

            methods = [("api-inproc", api_inproc), ("api-curl", api_curl), ("docker-cli", docker_cli)]
            if rt == "podman":
                methods.append(("podman-cli", podman_cli))
            for name, fn in methods:
                try:
                    ms = timed(fn, rounds)
                except Exception as e:  # report, keep measuring the others
                    print("%-8s %-11s failed: %s" % (rt, name, e))
                    continue
                ms.sort()
                print("%-8s %-11s %8.1f %8.1f %8.1f" % (rt, name, statistics.median(ms),
                                                       ms[int(len(ms) * 0.9) - 1], ms[0]))
        finally:
            eng.remove(cid)


if __name__ == "__main__":
    main()
