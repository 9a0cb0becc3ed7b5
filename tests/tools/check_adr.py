#!/usr/bin/env python3
"""check_adr.py - every ADR says whether it holds (adr/0040).

Fails (exit 1, one line per ADR) when a file adr/NNNN-*.md has no line that
starts `Status: accepted` or `Status: superseded by NNNN` (more may follow on
the line: a date, the issue, the contract's files), when it names itself in
its own superseded line, when NNNN is no ADR of the tree, or when two ADRs
share a number.

Usage: check_adr.py [ROOT]      (default: the repository holding this file)
       check_adr.py --self-test  (ADRs broken on purpose in a small tree)
"""
import os
import re
import sys

NAME = re.compile(r"^(\d{4})-[\w.-]+\.md$")
STATUS = re.compile(r"^Status: (accepted\b|superseded by (\d{4})\b)", re.M)


def check(root):
    d = os.path.join(root, "adr")
    adrs = {}
    bad = []
    for n in sorted(os.listdir(d)):
        m = NAME.match(n)
        if not m:
            continue
        if m.group(1) in adrs:
            bad.append("adr/%s: number %s is also adr/%s" % (n, m.group(1),
                                                           adrs[m.group(1)]))
        adrs.setdefault(m.group(1), n)
    for num, n in sorted(adrs.items()):
        with open(os.path.join(d, n), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        m = STATUS.search(text)
        if m is None:
            bad.append("adr/%s: no line `Status: accepted` or `Status: "
                       "superseded by NNNN`" % n)
        elif m.group(2) is not None and (m.group(2) == num or
                                         m.group(2) not in adrs):
            bad.append("adr/%s: superseded by %s, which is %s" % (
                n, m.group(2), "itself" if m.group(2) == num else "no ADR"))
    return bad, len(adrs)


def self_test():
    import tempfile
    files = {
        "0001-a.md": "# 0001\n\nStatus: accepted (2026-11-30)\n",
        "0002-b.md": "# 0002\n\nStatus: superseded by 0001\n",
        "0003-c.md": "# 0003\n\nDate: x. Status: accepted.\n",
        "0004-d.md": "# 0004\n\nStatus: superseded by 0009\n",
        "0005-e.md": "# 0005\n\nThe status: accepted\n",
        "0005-f.md": "# 0005\n\nStatus: accepted\n",
    }
    want = [
        "adr/0005-f.md: number 0005 is also adr/0005-e.md",
        "adr/0003-c.md: no line `Status: accepted` or `Status: superseded by NNNN`",
        "adr/0004-d.md: superseded by 0009, which is no ADR",
        "adr/0005-e.md: no line `Status: accepted` or `Status: superseded by NNNN`",
    ]
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "adr"))
        for n, text in files.items():
            with open(os.path.join(root, "adr", n), "w") as fh:
                fh.write(text)
        bad, _ = check(root)
    ok = bad == want
    if not ok:
        print("check_adr self-test: expected:\n  " + "\n  ".join(want) +
              "\ngot:\n  " + "\n  ".join(bad))
    print("check_adr self-test: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad, n = check(root)
    for line in bad:
        print("check_adr: " + line)
    if bad:
        print("check_adr: %d of %d ADRs without a valid Status line" % (len(bad), n))
        return 1
    print("check_adr: ok, %d ADRs, each accepted or superseded" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
