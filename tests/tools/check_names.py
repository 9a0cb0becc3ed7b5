#!/usr/bin/env python3
"""check_names.py - the docs name only what the tree holds (adr/0040).

Reads README.md, docs/**/*.md and adr/*.md. In each inline code span
(`...` or ``...``; fenced ``` blocks are examples and are not read) whose
trimmed text is one of these shapes, the name must exist in the tree:

  1. a tree path: no blank, holds a `/`, and its first part is a folder of
     the repository's root (api/ broker/ common/ proto/ tests/ docs/ adr/
     deploy/ ...): `broker/broker_req.c`, `tests/fuzz/regress/`. A trailing
     `:LINE` or `:FROM-TO` is dropped; `*`, `?`, `[ch]` and `{h,c}` match as in
     a shell. It must name a file or folder of the tree, or lie below a
     root-anchored entry of .gitignore (`tests/out/...` is made by the runs).
  2. a file name: no `/`, ending in .c .h .py .sh .md .html (`broker_http.c`,
     `sbx_wire.[ch]`; a bare `.c` is an extension, not a name): some file of
     the tree has that name (same globbing).
  3. a function: `name(...)` where name holds a `_`, anything or nothing
     between the parentheses (`sbx_call()`, `sbx_env_scrub(name)`): `name`
     occurs as a word in the tree's code. One-word functions (`rate()`,
     `ioctl()`, `fetch()`) are PromQL, libc or JavaScript as often as ours
     and are not read; a manual page reference `name(7)` is no function.
  4. a name of ours: an identifier (`*` allowed) that starts with one of
     PREFIXES (`sbx_`, `eng_`, `breq_`, `areq_`, `api_`, `broker_`, `dbk_`,
     ...) and goes on after it: it occurs as a word in the tree's code. The SBX_* environment
     variables are built from config keys at run time and are not read.
"The tree's code" is every file of the repository except the .md files, the
fuzz corpora, what .gitignore names and tests/tools/check_*.py (their
self-test trees hold made-up names), with C comments removed: a name that
survives only in a comment (or in these docs) does not exist. Strings count,
so metric names and config keys (`sbx_broker_requests_total`) exist.

A name that rightly names something since gone (an ADR's history) is
followed on the same line by "(since removed" or "(since renamed", e.g.
`broker/driver_engine_exec.c` (since removed, split by adr/0021): such a
span is not checked. Nothing else is exempt.

Usage: check_names.py [ROOT]     prints `file:line: name: why` per broken
                                 name; exit 0 when none
       check_names.py --self-test  breaks names on purpose in a small tree
"""
import fnmatch
import glob
import os
import re
import sys

DOC_GLOBS = ["README.md", "docs/**/*.md", "adr/*.md"]
EXTS = (".c", ".h", ".py", ".sh", ".md", ".html")
PREFIXES = ("sbx_", "eng_", "eop_", "breq_", "bsbx_", "areq_", "api_", "ax_",
            "broker_", "dbk_", "helper_", "proxy_", "cli_", "driver_")
SINCE = re.compile(r"\s*\(since (removed|renamed)")
SPAN = re.compile(r"(`+)(.+?)\1")
WORD = re.compile(r"[A-Za-z_]\w*")
SKIP_DIRS = {".git", "corpus", "node_modules", "__pycache__"}


def ignored_prefixes(root):
    """Root-anchored .gitignore entries (`/tests/out/`) as path prefixes."""
    out = []
    try:
        with open(os.path.join(root, ".gitignore")) as fh:
            for line in fh:
                line = line.strip()
                if line.startswith("/") and not line.startswith("#"):
                    out.append(line[1:].rstrip("/"))
    except OSError:
        pass
    return out


def strip_c_comments(text):
    """C comments removed, strings kept (a metric name lives in a string)."""
    return re.sub(r'/\*.*?\*/|//[^\n]*|("(?:\\.|[^"\\\n])*")',
                  lambda m: m.group(1) or " ", text, flags=re.S)


class Tree:
    """The files, folders and code words of the repository at root."""

    def __init__(self, root):
        self.root = root
        self.ignored = ignored_prefixes(root)
        self.paths = set()          # files and folders, relative, no slash at end
        self.basenames = set()
        self.words = set()
        self.top = set()
        for d, dirs, files in os.walk(root):
            rel_d = os.path.relpath(d, root)
            rel_d = "" if rel_d == "." else rel_d
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS
                             and not self.is_ignored(os.path.join(rel_d, x)))
            for x in dirs:
                self.paths.add(os.path.join(rel_d, x))
                if not rel_d:
                    self.top.add(x)
            for n in files:
                rel = os.path.join(rel_d, n)
                if self.is_ignored(rel):
                    continue
                self.paths.add(rel)
                self.basenames.add(n)
                if n.endswith(".md") or re.fullmatch(r"tests/tools/check_\w+\.py", rel):
                    continue            # the docs, and these checks' own test trees
                try:
                    with open(os.path.join(d, n), encoding="utf-8") as fh:
                        text = fh.read()
                except (UnicodeDecodeError, OSError):
                    continue
                if n.endswith((".c", ".h")):
                    text = strip_c_comments(text)
                self.words.update(WORD.findall(text))

    def is_ignored(self, rel):
        return any(rel == p or rel.startswith(p + "/") for p in self.ignored)

    def has_path(self, pat):
        pat = pat.rstrip("/")
        if self.is_ignored(pat):
            return True
        if not re.search(r"[*?\[]", pat):
            return pat in self.paths
        return any(fnmatch.fnmatchcase(p, pat) for p in self.paths)

    def has_basename(self, pat):
        if not re.search(r"[*?\[]", pat):
            return pat in self.basenames
        return any(fnmatch.fnmatchcase(b, pat) for b in self.basenames)

    def has_word(self, pat):
        if "*" not in pat:
            return pat in self.words
        return any(fnmatch.fnmatchcase(w, pat) for w in self.words)


def braces(pat):
    """`a.{h,c}` -> [`a.h`, `a.c`] (one level, as the docs write it)."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", pat)
    if not m:
        return [pat]
    return [x for alt in m.group(1).split(",")
            for x in braces(pat[:m.start()] + alt + pat[m.end():])]


def judge(tree, span):
    """None when span names nothing we check or names what exists, else why."""
    s = span.strip()
    if not s or re.search(r"\s", s):
        return None
    m = re.match(r"([A-Za-z_]\w*)\((.*)\)$", s)
    if m and "_" in m.group(1).strip("_"):
        if re.fullmatch(r"\d\w*", m.group(2)):
            return None                          # environ(7): a manual page
        if tree.has_word(m.group(1)):
            return None
        return "no function or word %s in the code" % m.group(1)
    if "/" in s:
        if "://" in s or s.startswith(("/", "~", "$", ".")):
            return None
        p = re.sub(r":\d+(-\d+)?$", "", s)
        first = p.split("/", 1)[0]
        if first not in tree.top:
            return None
        if not re.fullmatch(r"[\w.*?\[\]{},/+-]+", p):
            return None
        if all(tree.has_path(x) for x in braces(p)):
            return None
        return "no such file or folder in the tree"
    name = re.sub(r":\d+(-\d+)?$", "", s)
    if re.fullmatch(r"[\w*?\[\]{}+-][\w.*?\[\]{},+-]*", name) and \
            any(x.endswith(EXTS) for x in braces(re.sub(r"\[(\w+)\]$", "h", name))):
        if all(tree.has_basename(x) for x in braces(name)):
            return None
        return "no file of that name in the tree"
    if re.fullmatch(r"[A-Za-z_][\w*]*", s) and \
            any(s.startswith(p) and len(s) > len(p) for p in PREFIXES):
        if tree.has_word(s):
            return None
        return "no such name in the code"
    return None


def doc_files(root):
    out = []
    for g in DOC_GLOBS:
        out.extend(sorted(glob.glob(os.path.join(root, g), recursive=True)))
    return out


def check(root):
    tree = Tree(root)
    bad = []
    for path in doc_files(root):
        rel = os.path.relpath(path, root)
        fence = False
        with open(path, encoding="utf-8", errors="replace") as fh:
            for no, line in enumerate(fh, 1):
                if line.lstrip().startswith(("```", "~~~")):
                    fence = not fence
                    continue
                if fence:
                    continue
                for m in SPAN.finditer(line):
                    if SINCE.match(line, m.end()):
                        continue
                    why = judge(tree, m.group(2))
                    if why:
                        bad.append("%s:%d: `%s`: %s" % (rel, no, m.group(2).strip(), why))
    return bad


SELF_TREE = {
    "broker/broker_req.c": "/* breq_gone is only named here */\n"
                           "int breq_run(void) { return 0; }\n"
                           "const char *m = \"sbx_broker_requests_total\";\n",
    "broker/proto.h": "int sbx_x(void);\n",
    "deploy/run.sh": "SBX_RUN_IMAGE=x\n",
    ".gitignore": "/tests/out/\n",
    "docs/ok.md": "`broker/broker_req.c` `broker/broker_req.c:12-20` `broker/*.c`\n"
                  "`broker/{broker_req.c,proto.h}` `broker_req.c` `broker/` `proto.[ch]`\n"
                  "`breq_run()` `breq_run` `sbx_broker_requests_total` `rate(x[5m])`\n"
                  "`environ(7)` `/v1/sandboxes/{id}` `application/json` `tests/out/logs`\n"
                  "`make check` `state_dir/x` `breq_gone` (since removed in 0040) `.c` `sbx_`\n"
                  "```\n`broker/in_a_fence.c`\n```\n",
    "adr/0001-x.md": "`broker/gone.c`\n`gone.h`\n`breq_gone()`\n`breq_gone`\n"
                     "`sbx_nope*` `broker/broker_{req,gone}.c`\n",
}
SELF_WANT = [
    "adr/0001-x.md:1: `broker/gone.c`: no such file or folder in the tree",
    "adr/0001-x.md:2: `gone.h`: no file of that name in the tree",
    "adr/0001-x.md:3: `breq_gone()`: no function or word breq_gone in the code",
    "adr/0001-x.md:4: `breq_gone`: no such name in the code",
    "adr/0001-x.md:5: `sbx_nope*`: no such name in the code",
    "adr/0001-x.md:5: `broker/broker_{req,gone}.c`: no such file or folder in the tree",
]


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for rel, text in SELF_TREE.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as fh:
                fh.write(text)
        os.makedirs(os.path.join(root, "tests"))
        bad = check(root)
    ok = bad == SELF_WANT
    if not ok:
        print("check_names self-test: expected:\n  " + "\n  ".join(SELF_WANT))
        print("got:\n  " + "\n  ".join(bad))
    print("check_names self-test: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad = check(root)
    for line in bad:
        print(line)
    if bad:
        print("check_names: %d broken name(s) in README.md, docs/ and adr/; the "
              "rule is in tests/tools/check_names.py and adr/0040" % len(bad))
        return 1
    print("check_names: ok, every file and function the docs name exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
