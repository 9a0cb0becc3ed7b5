#!/usr/bin/env python3
"""check_layers.py - the layout rules of adr/0020 and adr/0040, cheap enough for every `make check`.

Fails (exit 1, one line per finding) when
  * a file in proto/ includes anything but proto/ headers and system headers
    (<...>): proto/ is the ground floor;
  * a file in broker/helper/ includes anything but broker/helper/ and proto/
    headers (sbx-helper is a static, libc-only binary);
  * a file in broker/proxy/ includes anything but broker/proxy/ headers,
    common/proxy_policy.h, common/sbx_time.h, common/sbx_vmux_link.h and
    proto/sbx_msg.h (sbx-proxy
    is static and links only those files of common/, see the Makefile's
    PROXY_SRC and STATIC_COMMON_SRC; sbx_msg.h is macros only, adr/0041);
  * the folders proto, common, broker, broker/helper, broker/proxy, api,
    api/cli include each other in a cycle (folder A includes B and B, maybe
    through others, includes A), or a lower layer includes a higher one
    (proto < common < broker, broker/proxy; api < api/cli);
  * two or more C files of those folders form a circle in the file-level
    include-and-call graph (adr/0040): an arrow A -> B means A.c (or the
    macros and inline bodies of its own header A.h) names a function or
    variable that B.c defines without `static`, through a declaration A
    can see (a header A includes, maybe through others, or A's own
    prototype or `extern` line); the names tie the arrow. Members (x.name,
    p->name), comments, strings and names A defines itself are no use of B.
    A function a header declares and no file defines in plain sight (a macro
    writes it) is the header's own .c's.
    A header is part of the .c of the same name; a header with no .c of its
    own (api_int.h, driver_engine_int.h, ...) is no node: it only declares
    what several files define, and including a header for its types alone
    draws no arrow (a type has no file to call back into). Every circle is
    printed with the names that tie each of its arrows. There is no
    exceptions list: the tree must have 0 circles.
  * a C source or header outside tests/ is over MAX_LINES (1,000) lines and
    its first comment does not say why (it must say "one seam" or
    "1,000 lines": a file that stays whole because cutting it would cut a
    seam says so, the style guide's "Files follow seams").
A quoted include resolves as the compiler does: the including file's own
folder first, then the Makefile's -Icommon -Iproto -Ibroker -Iapi.
Tests (tests/, including the fuzzers that include .c files) are out of scope.
Usage: check_layers.py [ROOT]   (default: the repository holding this file)
       check_layers.py --self-test   (the checks on a small tree built to fail)
"""
import os
import re
import sys

FOLDERS = ["proto", "common", "broker", "broker/helper", "broker/proxy", "api",
           "api/cli"]
SEARCH = ["common", "proto", "broker", "api"]          # the Makefile's -I order
# The layer of each folder: a folder may include only folders of a lower
# rank, and itself.
RANK = {"proto": 0, "common": 1, "broker/helper": 1, "broker": 2,
        "broker/proxy": 2, "api": 2, "api/cli": 3}
# Folders that may include only these folders (or single files).
ONLY = {"proto": {"proto"},
        "broker/helper": {"broker/helper", "proto"},
        "broker/proxy": {"broker/proxy", "common/proxy_policy.h",
                         "common/sbx_time.h", "common/sbx_vmux_link.h",
                         "proto/sbx_msg.h"}}
MAX_LINES = 1000
WHY_LONG = re.compile(r"one seam|1,000 lines", re.I)
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


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
        return fh.read()


def sources(root):
    """Every .c and .h of the layered folders, as paths relative to root."""
    out = []
    for f in FOLDERS:
        d = os.path.join(root, f)
        if not os.path.isdir(d):
            continue
        for n in sorted(os.listdir(d)):
            if n.endswith((".c", ".h")):
                out.append(os.path.join(f, n))
    return out


# ------------------------------------------------------------ folder rules

def include_rules(root, files, bad):
    """The include rules between folders; returns {folder: {folder: [why]}}."""
    edges = {}
    for rel in files:
        f = os.path.dirname(rel)
        for name in INC.findall(read(root, rel)):
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
            if f in ONLY and tf not in ONLY[f] and tgt not in ONLY[f]:
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
    return edges


# ------------------------------------------------------------ file graph

KEYWORDS = set("""auto break case char const continue default do double else enum
extern float for goto if inline int long register restrict return short signed
sizeof static struct switch typedef union unsigned void volatile while _Bool
_Noreturn _Static_assert _Alignas _Alignof _Atomic _Thread_local __attribute__
__attribute __typeof__ typeof __extension__ __inline__ __restrict bool""".split())
IDENT = re.compile(r"[A-Za-z_]\w*")


def strip_c(text):
    """Comments, string and character literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def blank_preprocessor(code):
    """Preprocessor lines (with their continuations) blanked."""
    lines = code.split("\n")
    cont = False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            lines[k] = ""
    return "\n".join(lines)


def declarator_name(decl):
    """The name a declarator declares: `*x[3]` -> x, `(*fn)(int)` -> fn."""
    m = re.search(r"\(\s*\*\s*(?:const\s+)?([A-Za-z_]\w*)", decl)
    if m:
        return m.group(1)
    decl = re.sub(r"\[[^\]]*\]", " ", decl)
    names = [x for x in IDENT.findall(decl) if x not in KEYWORDS]
    return names[-1] if names else None


def split_depth0(s, sep):
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def function_name(head):
    """The name of the function whose definition or prototype head is, or
    None: the last name at depth 0 before a parameter list (so a macro
    line above it, `LOG_FN(log_info, ...)`, does not count)."""
    depth = 0
    name = None
    for m in re.finditer(r"[A-Za-z_]\w*|[()]", head):
        t = m.group(0)
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
        elif depth == 0 and t not in KEYWORDS and \
                re.match(r"\s*\(", head[m.end():]):
            name = t
    return name


def top_level(code):
    """(defined, declared) names at file scope of preprocessed-free code.

    defined: {name: is_static} for function and variable definitions;
    declared: names of prototypes and extern declarations.
    """
    defined, declared = {}, set()
    head = []
    depth = 0
    pending_var = False      # inside `x = { ... }` or `struct {..} x`
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if depth == 0 and c == "{":
            h = "".join(head)
            toks = IDENT.findall(h)
            is_static = "static" in toks
            if "=" in h:                          # initialised variable
                for d in split_depth0(h.split("=", 1)[0], ","):
                    name = declarator_name(d)
                    if name and "extern" not in toks and "typedef" not in toks:
                        defined[name] = is_static
                pending_var = True
            elif "(" in h and not re.search(r"\b(struct|union|enum)\s+\w*\s*$", h):
                name = function_name(h)
                if name:
                    defined[name] = is_static
                head = []
            else:                                 # struct/union/enum body
                pending_var = True
            depth = 1
            i += 1
            continue
        if depth > 0:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    if pending_var:
                        head.append("{}")
                    else:
                        head = []
            i += 1
            continue
        if c == ";":
            h = "".join(head)
            toks = IDENT.findall(h)
            if pending_var:
                # `struct x {...} a, b;` or the tail of an initialiser
                tail = h[h.rfind("}") + 1:] if "}" in h else ""
                if "=" not in h.split("{", 1)[0] and tail.strip() and \
                        "typedef" not in toks:
                    for d in split_depth0(tail, ","):
                        name = declarator_name(d)
                        if name:
                            defined[name] = "static" in toks
            elif toks and "typedef" not in toks:
                is_extern = "extern" in toks
                for d in split_depth0(h, ","):
                    d = d.split("=", 1)[0]
                    if "(" in d and not re.search(r"\(\s*\*", d):
                        name = function_name(d)   # a prototype
                        if name:
                            declared.add(name)
                        continue
                    name = declarator_name(d)
                    if not name:
                        continue
                    if is_extern:
                        declared.add(name)
                    else:
                        defined[name] = "static" in toks
            head = []
            pending_var = False
            i += 1
            continue
        head.append(c)
        i += 1
    return defined, declared


# Member operators, numbers (so 1.5 is no member access), names, and any
# other character (so `...)` ends a member access).
TOKEN = re.compile(r"->|\.|\d[\w.]*|[A-Za-z_]\w*|[^\s\w]")


def prev_tok(prev, tok):
    """The state after tok: "dot" after . or ->, "member" for the name that
    follows one, else None."""
    if tok in ("->", "."):
        return "dot"
    return "member" if prev == "dot" else None


def header_uses(code):
    """The parts of a header that can use another file: macro definitions
    and brace bodies (static inline functions, initialisers); its
    prototypes and declarations at file scope are blanked."""
    out = []
    depth = 0
    in_define = False
    for line in code.split("\n"):
        if depth == 0 and (in_define or re.match(r"\s*#\s*define\b", line)):
            out.append(line)
            in_define = line.rstrip().endswith("\\")
            continue
        kept = []
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            kept.append(ch if depth > 0 else " ")
        out.append("".join(kept))
    return "\n".join(out)


def file_graph(root, files):
    """{node: {node: set(tie)}} over the C files; a node is a .c file, or a
    header that has no .c of its own only as a carrier of declarations."""
    fileset = set(files)

    def node(rel):
        if rel.endswith(".h") and rel[:-2] + ".c" in fileset:
            return rel[:-2] + ".c"
        return rel if rel.endswith(".c") else None

    code = {}
    incs = {}
    for rel in files:
        raw = read(root, rel)
        code[rel] = strip_c(raw)
        incs[rel] = [t for t in (resolve(root, rel, x) for x in INC.findall(raw))
                     if t in fileset]
    # what each file sees: the headers it includes, transitively
    seen_cache = {}

    def seen(rel):
        if rel in seen_cache:
            return seen_cache[rel]
        seen_cache[rel] = set()
        out = set()
        todo = list(incs[rel])
        while todo:
            h = todo.pop()
            if h in out:
                continue
            out.add(h)
            todo.extend(incs[h])
        seen_cache[rel] = out
        return out

    decl_names = {}           # header -> identifiers it names
    defs = {}                 # name -> [defining .c]
    own = {}                  # .c -> names it defines (static or not)
    declared = {}             # file -> its own prototypes / extern lines
    for rel in files:
        d, dcl = top_level(blank_preprocessor(code[rel]))
        declared[rel] = dcl
        if rel.endswith(".h"):
            decl_names[rel] = set(IDENT.findall(code[rel]))
            continue
        own[rel] = set(d)
        for name, is_static in d.items():
            if not is_static:
                defs.setdefault(name, []).append(rel)

    # A function its header declares but no definition names (one a macro
    # generates, as common/sbx_log.c's LOG_FN) is the header's own file's.
    for rel in files:
        b = node(rel)
        if rel.endswith(".h") and b is not None:
            for name in declared[rel]:
                if name not in defs:
                    defs[name] = [b]
                    own[b].add(name)

    graph = {}

    def arrow(a, b, tie):
        if a and b and a != b:
            graph.setdefault(a, {}).setdefault(b, set()).add(tie)

    for rel in files:
        a = node(rel)
        if a is None:
            continue            # a header with no .c: no node
        visible = set(declared[rel])
        for h in seen(rel) | ({rel[:-2] + ".h"} & fileset):
            visible |= decl_names[h]
        body = code[rel]
        if rel.endswith(".h"):
            body = header_uses(body)    # its prototypes are no use
        body = re.sub(r"^\s*#\s*include\b.*$", "", body, flags=re.M)
        mine = own.get(a, set())
        prev = None
        for m in TOKEN.finditer(body):
            name, prev = m.group(0), prev_tok(prev, m.group(0))
            if prev == "member":
                continue        # a member: x.name, p->name
            if name in mine or name not in defs or name not in visible:
                continue
            for b in defs[name]:
                arrow(a, b, name)
    return graph


def circles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = sorted(set(graph) | {b for a in graph for b in graph[a]})

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return sorted(out, key=lambda c: (c[0], len(c)))


def file_circles(root, files, bad):
    graph = file_graph(root, files)
    found = circles(graph)
    for k, comp in enumerate(found, 1):
        bad.append("circle %d of %d between files (%d files): %s" % (
            k, len(found), len(comp), ", ".join(comp)))
        for a in comp:
            for b in sorted(graph.get(a, {})):
                if b in comp:
                    ties = sorted(graph[a][b], key=lambda t: (t.startswith("#"), t))
                    bad.append("  %s -> %s: %s" % (a, b, ", ".join(ties)))
    narrows = sum(len(v) for v in graph.values())
    return len(found), sum(1 for f in files if f.endswith(".c")), narrows


# ------------------------------------------------------------ line bound

def first_comment(text):
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    return m.group(1) if m else ""


def line_bound(root, bad):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not (d == root and x in SKIP_DIRS))
        for n in sorted(files):
            if not n.endswith((".c", ".h")):
                continue
            path = os.path.join(d, n)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            if lines > MAX_LINES and not WHY_LONG.search(first_comment(text)):
                bad.append("%s: %d lines, over the %d of issue 12, and its "
                           "first comment does not say why it is one seam"
                           % (os.path.relpath(path, root), lines, MAX_LINES))


def check(root):
    """Every finding for the tree at root, and the summary numbers."""
    bad = []
    files = sources(root)
    edges = include_rules(root, files, bad)
    ncirc, nfiles, narrows = file_circles(root, files, bad)
    line_bound(root, bad)
    return bad, edges, ncirc, nfiles, narrows


SELF_TREE = {
    # a.c calls b_run (b.c), b.c calls a_done (a.c): one circle, tied by both.
    "broker/a.h": "int a_done(int x);\n",
    "broker/a.c": "/* a.c */\n#include \"a.h\"\n#include \"b.h\"\n#include \"e.h\"\n"
                  "int\na_done(int x)\n{\n\treturn b_run(x) + e_run();\n}\n",
    # e.c's local a_done is not a.c's: a.h is not visible to it.
    "broker/e.h": "int e_run(void);\n",
    "broker/e.c": "#include \"e.h\"\nint e_run(void) { int a_done = 2; return a_done; }\n",
    "broker/b.h": "int b_run(int x);\n",
    "broker/b.c": "#include \"a.h\"\n#include \"b.h\"\n"
                  "int b_run(int x) { return x ? a_done(x - 1) : 0; }\n",
    # c.c names a_done only as a member and in a comment, and has its own
    # static d_run: no arrow to a.c or d.c.
    "broker/c.c": "#include \"a.h\"\nstruct s { int a_done; };\n"
                  "/* a_done() */\nstatic int d_run(void) { return 0; }\n"
                  "int c_run(struct s *p) { return p->a_done + d_run(); }\n",
    "broker/d.c": "#include \"a.h\"\nint d_run(void);\n"
                  "int d_run(void) { return a_done(1); }\n",
    # including a header for its types alone draws no arrow
    "common/sbx_t.h": "struct sbx_t { int n; };\nint sbx_t_get(void);\n",
    "common/sbx_t.c": "#include \"sbx_t.h\"\n#include \"sbx_u.h\"\n"
                      "int sbx_t_get(void) { return sbx_u_get(); }\n",
    "common/sbx_u.h": "#include \"sbx_t.h\"\nint sbx_u_get(void);\n",
    "common/sbx_u.c": "#include \"sbx_u.h\"\n#include \"p.h\"\n"
                      "int sbx_u_get(void) { struct sbx_t t = {1}; return t.n; }\n",
    # proto/ includes something of ours
    "proto/p.c": "#include \"sbx_t.h\"\n",
    "proto/p.h": "#define P 1\n",
    # 1,001 lines: one says why, one does not
    "api/long_ok.c": "/* long_ok.c - over 1,000 lines: one seam. */\n" + "\n" * 1000,
    "api/long_bad.c": "/* long_bad.c - a file. */\n" + "\n" * 1000,
}


def self_test():
    """Run the checks on SELF_TREE; exit 0 when each finding is the expected one."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for f in FOLDERS:
            os.makedirs(os.path.join(root, f), exist_ok=True)
        for rel, text in SELF_TREE.items():
            with open(os.path.join(root, rel), "w") as fh:
                fh.write(text)
        bad, _, ncirc, _, _ = check(root)
    want = [
        "circle 1 of 1 between files (2 files): broker/a.c, broker/b.c",
        "  broker/a.c -> broker/b.c: b_run",
        "  broker/b.c -> broker/a.c: a_done",
        "proto/p.c: #include \"sbx_t.h\" (common/sbx_t.h): proto may include "
        "only proto and system headers",
        "proto/p.c: #include \"sbx_t.h\" (common/sbx_t.h): proto may not "
        "include common (adr/0020)",
        "include cycle between folders: proto -> common -> proto",
        "api/long_bad.c: 1001 lines",
    ]
    ok = True
    for w in want:
        if not any(b.startswith(w) for b in bad):
            print("check_layers self-test: missing finding: " + w)
            ok = False
    for b in bad:
        if not any(b.startswith(w) for w in want):
            print("check_layers self-test: unexpected finding: " + b)
            ok = False
    print("check_layers self-test: %s (%d findings, %d circle)"
          % ("ok" if ok else "FAILED", len(bad), ncirc))
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad, edges, ncirc, nfiles, narrows = check(root)
    for line in bad:
        print("check_layers: " + line)
    if bad:
        print("check_layers: %d finding(s), %d circle(s) between files; the "
              "rules are in adr/0020-code-layout.md and "
              "adr/0040-no-circles-between-files.md" % (
                  sum(1 for x in bad if not x.startswith("  ")), ncirc))
        return 1
    print("check_layers: ok, 0 circles between %d files (%d arrows); folders: %s"
          % (nfiles, narrows, ", ".join(
              "%s -> %s" % (a, ",".join(sorted(edges[a]))) for a in sorted(edges))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
