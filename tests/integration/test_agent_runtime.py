#!/usr/bin/python3
# test_agent_runtime.py - the conformance suite and the broker's file tests
# again with agent_channel = runtime (adr/0066): the default run covers the
# direct channel, this pass the runtime exec stream it falls back to, so
# both transports of the agent pass the same tests. One extra pass of two
# suites only (make check's time).

import os
import sys
import unittest

os.environ["SBX_TEST_AGENT_CHANNEL"] = "runtime"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_conform import *  # noqa: E402,F401,F403
from test_broker_files import *  # noqa: E402,F401,F403

if __name__ == "__main__":
    unittest.main(verbosity=2)
