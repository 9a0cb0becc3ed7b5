"""test_console - GET /console in a real headless Chromium (Debian `chromium`,
driven by playwright-core from tests/e2e/node_modules), against a real api and
broker on the runtime under test (issue 14 item 6, ADR 0015).

The page is reached through a small TCP proxy that the test cuts while the
output streams: every connection the browser has (its EventSource included)
is closed, and the page must still end with every line exactly once.
"""

import json
import os
import re
import subprocess
import threading
import unittest

import sbxtest
from consolefix import E2E, NODE, CuttableProxy, browser_stack
from sbxtest import BUILD

LINES = 40
CMD = "for i in $(seq 1 %d); do echo line-$i; sleep 0.15; done; exit 5" % LINES


class ConsoleTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.stack, cls.host, cls.port = browser_stack("sbxcon", "eve")

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    def test_console_page_headers(self):
        r = sbxtest.tcp_http(self.host, self.port, "GET", "/console")
        self.assertEqual(r.status, 200)
        self.assertTrue(r.headers["Content-Type"].startswith("text/html"))
        csp = r.headers["Content-Security-Policy"]
        self.assertIn("default-src 'none'", csp)
        self.assertIn("script-src 'sha256-", csp)
        self.assertNotIn("unsafe", csp)
        self.assertIn("frame-ancestors 'none'", csp)
        self.assertEqual(r.headers.get("Referrer-Policy"), "no-referrer")
        self.assertIn(b"EventSource", r.body)
        # xterm.js is in the page, with its MIT notice (adr/0054); the one
        # <style> carries the nonce style-src names, a new one each reply.
        self.assertIn(b"The xterm.js authors", r.body)
        self.assertIn(b"Permission is hereby granted", r.body)
        nonce = re.search(r"style-src 'nonce-([A-Za-z0-9+/=]{24})'", csp).group(1)
        self.assertIn(('<style nonce="%s">' % nonce).encode(), r.body)
        r2 = sbxtest.tcp_http(self.host, self.port, "GET", "/console")
        nonce2 = re.search(r"'nonce-([^']+)'", r2.headers["Content-Security-Policy"]).group(1)
        self.assertNotEqual(nonce, nonce2)
        with open(os.path.join(BUILD, "gen", "console.html"), "rb") as f:
            self.assertEqual(r.body, f.read().replace(b"@STYLE_NONCE@", nonce.encode()))

    def test_chromium_runs_a_command_and_survives_cut_connections(self):
        proxy = CuttableProxy(self.port)
        self.addCleanup(proxy.close)
        env = dict(os.environ, SBX_CONSOLE_URL="http://127.0.0.1:%d" % proxy.port,
                   SBX_KEY=self.stack.player, SBX_NPC="eve", SBX_CMD=CMD)
        p = subprocess.Popen([NODE, os.path.join(E2E, "console.mjs")], cwd=E2E, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.kill)
        seen, result, cuts = [], None, []
        timer = threading.Timer(180, p.kill)
        timer.start()
        self.addCleanup(timer.cancel)
        for line in p.stdout:
            if line.startswith("LINES "):
                n = int(line.split()[1])
                seen.append(n)
                # Cut twice mid-stream: every connection of the page drops.
                if (n >= 10 and not cuts) or (n >= 25 and len(cuts) == 1):
                    cuts.append((n, proxy.cut()))
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
        p.wait(30)
        err = p.stderr.read()
        self.assertIsNotNone(result, err)
        self.assertNotIn("error", result, result.get("error"))
        self.assertEqual(result["status"], 200)
        self.assertNotIn("timeout", result, result)
        self.assertEqual(len(cuts), 2, (cuts, seen))
        self.assertTrue(all(n >= 1 for _, n in cuts), cuts)
        # Live: lines showed up one by one, not all at the end.
        self.assertGreater(len([n for n in seen if 0 < n < LINES]), 5, seen)
        self.assertEqual(result["text"], "".join("line-%d\n" % i for i in range(1, LINES + 1)))
        self.assertEqual(result["code"], "5")
        self.assertIn("exit code 5", result["exit"])
        # It reconnected (more than one events request) and no CSP violation.
        evreq = [r for r in result["requests"] if "/events" in r]
        self.assertGreaterEqual(len(evreq), 3, result["requests"])
        self.assertFalse([m for m in result["console"] if "Content Security Policy" in m],
                         result["console"])
        self.assertEqual(result["storage"], {"session": True, "local": 0, "cookie": ""})
        with open(self.stack.apis[0].log_path, errors="replace") as f:
            self.assertNotIn(self.stack.player, f.read())


if __name__ == "__main__":
    unittest.main()
