"""runner - run one integration suite (a test_*.py file) and print its counts.

usage: python3 runner.py tests/integration/test_x.py
Prints unittest's verbose output, then one last line:
  SBXTEST-COUNTS passed=N failed=N
where a skip, an expected failure, an unexpected success and an error all count
as failed. Exit status 0 only if failed == 0 and at least one test ran.
"""

import importlib.util
import os
import sys
import unittest


def main(argv):
    if len(argv) != 2:
        print("usage: runner.py SUITE.py", file=sys.stderr)
        return 2
    path = os.path.abspath(argv[1])
    sys.path.insert(0, os.path.dirname(path))
    name = os.path.splitext(os.path.basename(path))[0]
    failed = 0
    passed = 0
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    except Exception as e:  # an unloadable suite is one failure, not zero tests
        import traceback
        traceback.print_exc()
        print("SBXTEST-COUNTS passed=0 failed=1")
        return 1
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2)
    result = runner.run(suite)
    bad = (len(result.failures) + len(result.errors) + len(result.skipped)
           + len(result.expectedFailures) + len(result.unexpectedSuccesses))
    for test, reason in result.skipped:
        print("SKIPPED COUNTS AS FAILED: %s: %s" % (test.id(), reason))
    # testsRun counts each test once; errors in setUpClass count without a run.
    passed = max(result.testsRun - len(result.failures) - len(result.errors)
                 - len(result.skipped) - len(result.expectedFailures)
                 - len(result.unexpectedSuccesses), 0)
    failed = bad
    if passed + failed == 0:
        print("no tests ran: counted as one failure")
        failed = 1
    sys.stdout.flush()
    print("SBXTEST-COUNTS passed=%d failed=%d" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
