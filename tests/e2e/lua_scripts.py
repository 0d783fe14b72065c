"""The decision scripts as Redis runs them: decide.lua as it is, and
decide_plain.lua with decide.lua's core put in place of its "CORE" line,
the way the Makefile builds them into the agent."""

import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT_MP = os.path.join(ROOT, "agent", "store", "redis", "decide.lua")
SCRIPT_PLAIN = os.path.join(ROOT, "agent", "store", "redis", "decide_plain.lua")
CORE_MARK = "-- ==== CORE ====\n"


def core(text):
    """The lines of decide.lua from BEGIN CORE to END CORE, both included."""
    a = text.index("-- ==== BEGIN CORE")
    b = text.index("\n", text.index("-- ==== END CORE ====")) + 1
    return text[a:b]


def msgpack_script():
    with open(SCRIPT_MP) as f:
        return f.read()


def plain_script():
    with open(SCRIPT_PLAIN) as f:
        plain = f.read()
    assert plain.count(CORE_MARK) == 1, "decide_plain.lua needs one CORE line"
    return plain.replace(CORE_MARK, core(msgpack_script()))
