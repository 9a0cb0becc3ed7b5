#!/usr/bin/env python3
"""check_layers.py - the include rules of adr/0020 (code layout), cheap enough for every `make check`.

Fails (exit 1, one line per finding) when
  * a file in proto/ includes anything but proto/ headers and system headers
    (<...>): proto/ is the ground floor;
  * a file in broker/helper/ includes anything but broker/helper/ and proto/
    headers (sbx-helper is a static, libc-only binary);
  * the folders proto, common, broker, broker/helper, api, api/cli include
    each other in a cycle (folder A includes B and B, maybe through others,
    includes A), or a lower layer includes a higher one
    (proto < common < broker, api < api/cli);
  * a C source or header outside tests/ is over MAX_LINES (1,000) lines
    (issue 12: files you can read top to bottom).
A quoted include resolves as the compiler does: the including file's own
folder first, then the Makefile's -Icommon -Iproto -Ibroker -Iapi.
Usage: check_layers.py [ROOT]   (default: the repository holding this file)
"""
import os
import re
import sys

FOLDERS = ["proto", "common", "broker", "broker/helper", "api", "api/cli"]
SEARCH = ["common", "proto", "broker", "api"]          # the Makefile's -I order
# The layer of each folder: a folder may include only folders of a lower or
# equal rank (equal: itself only).
RANK = {"proto": 0, "common": 1, "broker/helper": 1, "broker": 2, "api": 2,
        "api/cli": 3}
ONLY = {"proto": {"proto"}, "broker/helper": {"broker/helper", "proto"}}
MAX_LINES = 1000
SKIP_DIRS = {".git", "build", "tests", "node_modules"}
INC = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def folder_of(rel):
    d = os.path.dirname(rel)
    return d if d in RANK else None


def resolve(root, rel, name):
    cands = [os.path.join(os.path.dirname(rel), name)] + \
        [os.path.join(d, name) for d in SEARCH]
    for c in cands:
        c = os.path.normpath(c)
        if os.path.isfile(os.path.join(root, c)):
            return c
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad = []
    edges = {}
    for f in FOLDERS:
        d = os.path.join(root, f)
        for n in sorted(os.listdir(d)):
            if not n.endswith((".c", ".h")):
                continue
            rel = os.path.join(f, n)
            text = open(os.path.join(root, rel), encoding="utf-8",
                        errors="replace").read()
            for name in INC.findall(text):
                tgt = resolve(root, rel, name)
                if tgt is None:
                    bad.append("%s: #include \"%s\" names no file of the tree"
                               % (rel, name))
                    continue
                tf = folder_of(tgt)
                if tf is None:
                    bad.append("%s: #include \"%s\" reaches %s, outside the "
                               "layered folders" % (rel, name, tgt))
                    continue
                if f in ONLY and tf not in ONLY[f]:
                    bad.append("%s: #include \"%s\" (%s): %s may include only "
                               "%s and system headers" % (
                                   rel, name, tgt, f, ", ".join(sorted(ONLY[f]))))
                if tf != f:
                    edges.setdefault(f, {}).setdefault(tf, []).append(
                        "%s -> %s" % (rel, tgt))
                    if RANK[tf] >= RANK[f]:
                        bad.append("%s: #include \"%s\" (%s): %s may not "
                                   "include %s (adr/0020)" % (rel, name, tgt, f, tf))
    # cycles between folders (depth-first search with colours)
    colour = {}
    stack = []

    def visit(a):
        colour[a] = 1
        stack.append(a)
        for b in sorted(edges.get(a, {})):
            if colour.get(b) == 1:
                cyc = stack[stack.index(b):] + [b]
                bad.append("include cycle between folders: %s (%s)" % (
                    " -> ".join(cyc), "; ".join(
                        edges[x][y][0] for x, y in zip(cyc, cyc[1:]))))
            elif colour.get(b) is None:
                visit(b)
        stack.pop()
        colour[a] = 2

    for f in FOLDERS:
        if colour.get(f) is None:
            visit(f)
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not (d == root and x in SKIP_DIRS))
        for n in sorted(files):
            if not n.endswith((".c", ".h")):
                continue
            path = os.path.join(d, n)
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = sum(1 for _ in fh)
            if lines > MAX_LINES:
                bad.append("%s: %d lines, over the %d of issue 12"
                           % (os.path.relpath(path, root), lines, MAX_LINES))
    for line in bad:
        print("check_layers: " + line)
    if bad:
        print("check_layers: %d finding(s); the rules are in adr/0020-code-layout.md"
              % len(bad))
        return 1
    print("check_layers: ok (%s)" % ", ".join(
        "%s -> %s" % (a, ",".join(sorted(edges[a]))) for a in sorted(edges)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
