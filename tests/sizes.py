#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The C sources of agent/ stay readable: no file over 1,000 lines, no
function over 120 (from the line that names it to its closing brace).
A file that grows past the bound holds several modules: cut it at a
seam, not in the middle (docs/development.md). `make test` runs this.

    python3 tests/sizes.py            # exit 1, naming what is over

Functions are found as the project writes them: the body's braces at
the start of a line, the name on the line of the opening parenthesis.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE_MAX = 1000
FUNCTION_MAX = 120

# Over the bound until they are cut at their seams. An entry no longer
# over it fails the check, so that the list only shrinks.
PENDING = set()

NAME = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def sources():
    for d, _, files in os.walk(os.path.join(ROOT, "agent")):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(d, f), ROOT)


def functions(lines):
    """(name, first line, length) of each function body in a file."""
    out = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("{") and i > 0:
            # back to the line that opens the signature's parentheses
            j = i - 1
            while j > 0 and not NAME.search(lines[j]) and lines[j].strip():
                j -= 1
            while j > 0 and lines[j].startswith(("\t", " ")) and lines[j - 1].strip():
                j -= 1
            m = NAME.search(lines[j])
            k = i + 1
            while k < len(lines) and not lines[k].startswith("}"):
                k += 1
            if m:
                out.append((m.group(1), j + 1, k - j + 1))
            i = k
        i += 1
    return out


def main():
    bad = []
    for path in sources():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            lines = f.read().split("\n")
        n = len(lines) - (lines[-1] == "")
        if path in PENDING:
            if n <= FILE_MAX:
                bad.append("%s: %d lines, within the bound now: take it out of PENDING"
                           % (path, n))
        elif n > FILE_MAX:
            bad.append("%s: %d lines (at most %d)" % (path, n, FILE_MAX))
        for name, line, length in functions(lines):
            if length > FUNCTION_MAX:
                bad.append("%s:%d: %s() is %d lines (at most %d)"
                           % (path, line, name, length, FUNCTION_MAX))
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
