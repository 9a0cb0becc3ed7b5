"""test_console_term - /console's terminal (xterm.js, adr/0054) in a real headless
Chromium (Debian `chromium`, driven by playwright-core from tests/e2e) against
a real api and broker on the runtime under test (issue 21 item 5).

One browser session (tests/e2e/console_term.mjs) opens a terminal for an NPC
over the api's WebSocket (subprotocol sbx.v1, docs/api.md) and shows, as a
user would see it:
  * `echo hi` answers `hi`;
  * `stty size` in the sandbox says the page's rows and columns, before and
    after the window shrinks;
  * `seq 1 2000`, slowed down, while this test cuts every connection of the
    page twice (a TCP proxy between browser and api): every line shows once,
    in order, after at least two reconnects from the last offset seen;
  * `top` draws full-screen; a screenshot of the terminal is kept as
    tests/out/artifacts/console-top-RUNTIME.png (docs/testing.md);
  * `exit 3` ends the terminal and the page says "exit code 3";
and the page breaks no Content-Security-Policy rule doing it.
"""

import json
import os
import subprocess
import threading
import unittest

from consolefix import E2E, NODE, CuttableProxy, browser_stack
from sbxtest import REPO

SEQ = 2000
ARTIFACTS = os.path.join(REPO, "tests", "out", "artifacts")


class ConsoleTerminalTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.stack, cls.host, cls.port = browser_stack("sbxterm", "tess")

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    def test_terminal_types_resizes_survives_cuts_and_draws_full_screen(self):
        proxy = CuttableProxy(self.port)
        self.addCleanup(proxy.close)
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, "console-top-%s.png"
                            % os.environ.get("SBX_TEST_RUNTIME", "docker"))
        if os.path.exists(shot):
            os.unlink(shot)
        env = dict(os.environ, SBX_CONSOLE_URL="http://127.0.0.1:%d" % proxy.port,
                   SBX_KEY=self.stack.player, SBX_NPC="tess", SBX_SEQ=str(SEQ),
                   SBX_SCREENSHOT=shot)
        p = subprocess.Popen([NODE, os.path.join(E2E, "console_term.mjs")], cwd=E2E, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.kill)
        timer = threading.Timer(300, p.kill)
        timer.start()
        self.addCleanup(timer.cancel)
        result, cuts, seen, steps = None, [], [], []
        for line in p.stdout:
            if line.startswith("SEQ "):
                n = int(line.split()[1])
                seen.append(n)
                # Cut twice mid-stream: every connection of the page drops.
                if (n >= 500 and not cuts) or (n >= 1200 and len(cuts) == 1):
                    cuts.append((n, proxy.cut()))
            elif line.startswith("STEP "):
                steps.append(line.split()[1])
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
        p.wait(30)
        err = p.stderr.read()
        self.assertIsNotNone(result, err)
        self.assertNotIn("error", result, (result.get("error"), result.get("screen"),
                                           result.get("panel"), steps))
        self.assertEqual(result["status"], 200)
        st = result["steps"]
        # echo hi -> hi
        self.assertEqual(st["echo"], ["hi"], st["echo"])
        # stty size in the sandbox is the page's rows and columns
        for k in ("size1", "size2"):
            self.assertEqual(st[k]["stty"], "%d %d" % (st[k]["page"]["rows"], st[k]["page"]["cols"]),
                             st[k])
        self.assertLess(st["size2"]["page"]["cols"], st["size1"]["page"]["cols"])
        # every line of the stream once, in order, across two cuts
        self.assertEqual(len(cuts), 2, (cuts, seen[-5:]))
        self.assertTrue(all(n >= 1 for _, n in cuts), cuts)
        self.assertEqual(st["seq"], [str(i) for i in range(1, SEQ + 1)],
                         "lines missing or repeated")
        self.assertGreaterEqual(st["reconnects"], 2, st)
        self.assertGreaterEqual(result["sockets"], 3, result)
        # top drew; its picture is kept
        # the screen from its first row: top's header, the process table with top in it
        top = st["top"]
        self.assertRegex(top[0], r"^(Mem|top|Tasks|CPU)", top)
        self.assertTrue(any("PID" in l for l in top[:6]), top)
        self.assertTrue(any(l.rstrip().endswith("top") for l in top), top)
        self.assertGreater(os.path.getsize(shot), 1000)
        # exit 3 ends it
        self.assertEqual(st["end"]["state"], "ended", st["end"])
        self.assertEqual(st["end"]["exit"], "exit code 3", st["end"])
        self.assertFalse([m for m in result["console"] if "Content Security Policy" in m
                          or "pageerror" in m], result["console"])
        self.assertEqual(result["storage"], {"session": True, "local": 0, "cookie": ""})
        with open(self.stack.apis[0].log_path, errors="replace") as f:
            self.assertNotIn(self.stack.player, f.read())


if __name__ == "__main__":
    unittest.main()
