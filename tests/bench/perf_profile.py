"""perf_profile.py - where the CPU goes while one `make bench` figure runs.

With BENCH_PERF=1 (tests/bench/run.sh passes the environment through),
the figures that ask for it (Phases: exec round trip, files, streams, ports)
record each measured method apart — sbx's rounds in one system-wide
`perf record -e cpu-clock -a -g` (software clock: this machine's VM has no
hardware counters), the baseline's in another, enabled only while that
method runs; BENCH_PERF=figures records every figure whole instead. Each
recording appends to BENCH_PERF_OUT (default WORK/profile.md) the share of
every process name in its samples, then the hottest symbols of sbx's own
processes (sandbox-broker, sandbox-api, sbx-helper). Shares are
of all samples, idle included, so "idle" says how much of the two cores
the figure left unused. Only reads /proc-visible processes of this machine;
writes only under the bench's work directory and the output file.

Issue 25 asks, for a bench row it misses, "by how much and what dominates,
with a profile": this is that profile, reproducible with
  BENCH_PERF=1 BENCH_ONLY=stream,files,rt BENCH_SOAK=0 make bench
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time

OURS = ("sandbox-broker", "sandbox-api", "sbx-helper")


def enabled():
    return os.environ.get("BENCH_PERF", "") not in ("", "0") and shutil.which("perf")


class Recording:
    """A perf record of the whole machine from start() to stop()."""

    def __init__(self, work, name):
        self.data = os.path.join(work, "perf-%s.data" % name)
        self.name = name
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-a", "-g",
             "-o", self.data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def report(self, sort, comms=None, limit=12):
        """Rows (percent, key) of `perf report --sort SORT`, self time."""
        argv = ["perf", "report", "-i", self.data, "--no-children", "--stdio",
                "-g", "none", "--percent-limit", "0.5", "--sort", sort]
        if comms:
            argv += ["--comms", ",".join(comms)]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=300).stdout
        except (OSError, subprocess.TimeoutExpired):
            return []
        rows = []
        for line in out.splitlines():
            m = re.match(r"^\s+([0-9.]+)%\s+(.*\S)\s*$", line)
            if m:
                rows.append((float(m.group(1)), re.sub(r"\s+", " ", m.group(2))))
        return rows[:limit]

    def summary(self, runtime):
        lines = ["### `%s` on %s (`perf record -e cpu-clock -a -g`, all CPUs)" %
                 (self.name, runtime), "",
                 "| share of all samples | process |", "|---|---|"]
        for pct, key in self.report("comm"):
            lines.append("| %.1f %% | %s |" % (pct, "idle" if key == "swapper" else key))
        hot = self.report("comm,dso,sym", comms=OURS, limit=15)
        if hot:
            lines += ["", "Hottest symbols of sbx's processes (share of all samples):", "",
                      "| share | process, object, symbol |", "|---|---|"]
            lines += ["| %.1f %% | %s |" % (pct, key.replace("|", "/")) for pct, key in hot]
        try:
            os.unlink(self.data)
        except OSError:
            pass
        return "\n".join(lines) + "\n\n"


class _Held(Recording):
    """A recording started disabled (perf record -D -1) and enabled only
    inside phase(): one per measured method, so a row's profile holds its
    own rounds and none of its baseline's, which alternate with it."""

    def start(self):
        self.ctl_r, self.ctl_w = os.pipe()
        self.ack_r, self.ack_w = os.pipe()
        self.proc = subprocess.Popen(
            ["perf", "record", "-q", "-D", "-1", "--control",
             "fd:%d,%d" % (self.ctl_r, self.ack_w), "-e", "cpu-clock", "-F", "2999", "-a",
             "-g", "-o", self.data], pass_fds=(self.ctl_r, self.ack_w),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(self.ctl_r)
        os.close(self.ack_w)

    def command(self, word):
        os.write(self.ctl_w, word.encode() + b"\n")
        os.read(self.ack_r, 16)   # "ack\n": the events are (en|dis)abled

    def stop(self):
        super().stop()   # SIGINT first: a closed control fd cuts the file short
        os.close(self.ctl_w)
        os.close(self.ack_r)


class Phases:
    """Per-method profiles inside one figure (BENCH_PERF=1): bench.py
    wraps each measured call in phase(KEY); close() appends one summary
    per KEY to out. Without BENCH_PERF, phase() does nothing."""

    def __init__(self, work, out, runtime, figure):
        self.work, self.out, self.runtime, self.figure = work, out, runtime, figure
        self.recs = {}

    @contextlib.contextmanager
    def phase(self, key):
        if not enabled() or os.environ.get("BENCH_PERF") == "figures":
            yield
            return
        rec = self.recs.get(key)
        if rec is None:
            rec = _Held(self.work, "%s-%d" % (self.figure, len(self.recs)))
            rec.name = "%s: %s" % (self.figure, key)
            rec.start()
            time.sleep(0.5)   # perf up and listening on its control fd
            self.recs[key] = rec
        rec.command("enable")
        try:
            yield
        finally:
            rec.command("disable")

    def close(self):
        for rec in self.recs.values():
            rec.stop()
            with open(self.out, "a") as f:
                f.write(rec.summary(self.runtime))
        self.recs = {}


def around(work, out, runtime, name, fn):
    """Runs fn(); with BENCH_PERF=figures, under a recording of the whole
    figure (baselines included) whose summary is appended to out."""
    if os.environ.get("BENCH_PERF") != "figures" or not enabled():
        return fn()
    rec = Recording(work, name)
    rec.start()
    try:
        return fn()
    finally:
        rec.stop()
        with open(out, "a") as f:
            f.write(rec.summary(runtime))
