#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the integration files as installed (by `make install` or the
package) under DOCDIR: examples/, dashboards/ and alerts/ name no path of
the source tree (spoe-conf/..., haproxy-examples/..., examples/...), which
HAProxy would open relative to the directory it starts in, and every file
an example haproxy.cfg or SPOE file reads is named by an absolute path;
one it reads from HAPROXYDIR (a SPOE file, a map) is shipped under that
name in examples/haproxy/, where the operator copies it from.

    scripts/check-installed-paths.py DOCDIR [HAPROXYDIR]

HAPROXYDIR is /etc/haproxy unless given. Prints each problem, exits 1 when
there is any.
"""

import os
import re
import sys

# A directory of the source tree whose files are installed, or build/ (the
# agent as built), at the start of a path: at the start of a line, after a
# character no path has, or as the default of an environment variable
# ("${RL_SPOE_CONF-spoe-conf/ratelimit.conf}"). The installed name is
# absolute.
SOURCE_DIRS = ("spoe-conf", "haproxy-examples", "examples", "docs", "dashboards",
               "alerts", "bench-figures", "build")
SOURCE_PATH_RE = re.compile(r"(?:^|[^-\w./]|\{RL_\w+-)((?:%s)/[-\w./]*)"
                            % "|".join(re.escape(d) for d in SOURCE_DIRS), re.M)
# "${NAME-default}": HAProxy's environment variable with a default.
ENV_DEFAULT_RE = re.compile(r"\$\{(\w+)-([^}]*)\}")
# What HAProxy opens: the SPOE file of a filter, a map of a converter.
SPOE_CONFIG_RE = re.compile(r"^\s*filter\s+spoe\b.*\bconfig\s+(\S+)", re.M)
MAP_RE = re.compile(r"\bmap(?:_\w+)?\(([^,)]+)")


def resolve(arg):
    """An argument as HAProxy reads it with no RL_* variable set: quotes
    dropped, "${NAME-default}" as its default."""
    return ENV_DEFAULT_RE.sub(lambda m: m.group(2), arg.strip().strip('"'))


def uncommented(text):
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def check(docdir, haproxydir="/etc/haproxy"):
    problems = []
    shipped = os.path.join(docdir, "examples", "haproxy")
    found = 0
    for sub in ("examples", "dashboards", "alerts"):
        top = os.path.join(docdir, sub)
        if not os.path.isdir(top):
            problems.append("%s: missing" % top)
            continue
        for dirpath, _, names in os.walk(top):
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, docdir)
                found += 1
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for m in SOURCE_PATH_RE.finditer(text):
                    line = text.count("\n", 0, m.start(1)) + 1
                    problems.append("%s:%d: a path of the source tree: %s" % (rel, line, m.group(1)))
                for m in ENV_DEFAULT_RE.finditer(text):
                    if "/" in m.group(2) and not m.group(2).startswith("/"):
                        problems.append("%s: ${%s-%s}: a relative default" % (rel, m.group(1), m.group(2)))
                if not name.endswith((".cfg", ".conf")):
                    continue
                code = uncommented(text)
                opened = [resolve(a) for a in SPOE_CONFIG_RE.findall(code)]
                opened += [resolve(a) for a in MAP_RE.findall(code)]
                for target in opened:
                    if not target.startswith("/"):
                        problems.append("%s: opens %s, a path relative to HAProxy's directory"
                                        % (rel, target))
                    elif os.path.dirname(target) == haproxydir.rstrip("/") and \
                            not os.path.isfile(os.path.join(shipped, os.path.basename(target))):
                        problems.append("%s: opens %s, not shipped in examples/haproxy/"
                                        % (rel, target))
    if not found:
        problems.append("%s: no integration files" % docdir)
    return problems


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    problems = check(*argv[1:])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
