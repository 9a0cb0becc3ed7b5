#!/usr/bin/python3
"""embed.py - build step of /console (adr/0054): api/console.html + xterm.js from npm -> one page.

    embed.py TEMPLATE NODE_MODULES OUT

Reads the page template (api/console.html) and the packages `npm ci` installed
from api/console/package-lock.json, and writes OUT (build/.../gen/console.html),
which the Makefile turns into the C array sandbox-api serves (api/api_console.c).
The template holds three placeholders, each alone on its line:

  <!--@XTERM_LICENSES@-->  the MIT notices of @xterm/xterm and @xterm/addon-fit
  /*@XTERM_CSS@*/          css/xterm.css, inside the page's one <style> element
  /*@XTERM_JS@*/           lib/xterm.js and lib/addon-fit.js (UMD builds: they set
                           window.Terminal and window.FitAddon), inside the page's
                           one <script> element, before the page's own code

Nothing is fetched: the input is what is on disk. Fails (exit 1, one line
naming the file) when a package is missing or not the version the lockfile
pins, when a placeholder is not there exactly once, or when an inserted file
holds text that would end or confuse its element (`</script`, `<script`,
`<!--`, `</style`): the api hashes the script element's text for its
Content-Security-Policy, so the element must end where the template ends it.
Source map comments are dropped (the maps are not served).
"""

import json
import os
import re
import sys

PKGS = (("@xterm/xterm", "lib/xterm.js", "css/xterm.css"),
        ("@xterm/addon-fit", "lib/addon-fit.js", None))
BAD = re.compile(r"</script|<script|<!--|</style", re.I)
MAP = re.compile(r"^//# sourceMappingURL=.*$", re.M)


def fail(msg):
    sys.stderr.write("embed.py: %s\n" % msg)
    sys.exit(1)


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        fail("%s: %s (run `npm ci` in api/console; the Makefile does)" % (path, e.strerror))


def pinned(modules):
    """The versions package-lock.json (next to NODE_MODULES) pins."""
    lock = json.loads(read(os.path.join(os.path.dirname(os.path.abspath(modules)),
                                        "package-lock.json")))
    return {name: lock["packages"]["node_modules/" + name]["version"] for name, _, _ in PKGS}


def insert(text, mark, body, what, before="", after=""):
    if text.count(mark) != 1:
        fail("the template must hold %s exactly once" % mark)
    m = BAD.search(body)
    if m:
        fail("%s holds %r, which would end or confuse its element" % (what, m.group(0)))
    return text.replace(mark, before + body + after)


def main():
    if len(sys.argv) != 4:
        fail("usage: embed.py TEMPLATE NODE_MODULES OUT")
    template, modules, out = sys.argv[1:]
    want = pinned(modules)
    js, css, notices = [], "", []
    for name, lib, style in PKGS:
        d = os.path.join(modules, name)
        have = json.loads(read(os.path.join(d, "package.json"))).get("version")
        if have != want[name]:
            fail("%s is %s, the lockfile pins %s (run `npm ci` in api/console)"
                 % (name, have, want[name]))
        js.append(MAP.sub("", read(os.path.join(d, lib))).rstrip() + "\n")
        if style:
            css = read(os.path.join(d, style)).rstrip()
        lic = read(os.path.join(d, "LICENSE")).rstrip()
        notices.append("%s %s (MIT licence, from npm; adr/0054):\n\n%s" % (name, have, lic))
    page = read(template)
    page = insert(page, "<!--@XTERM_LICENSES@-->", "\n\n".join(notices).replace("--", "- -"),
                  "a LICENSE", "<!--\n", "\n-->")
    page = insert(page, "/*@XTERM_CSS@*/", css, "xterm.css")
    page = insert(page, "/*@XTERM_JS@*/", "".join(js).rstrip(), "xterm.js")
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
