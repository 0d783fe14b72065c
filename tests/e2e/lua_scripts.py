# SPDX-License-Identifier: Apache-2.0
"""The Redis function library that decides (agent/store/redis/ratelimit.lua)
as the tests load it: the whole text for FUNCTION LOAD, and its code
without the registration for EVAL scripts that drive its local functions.
"""

import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# one file, loaded whole (the Makefile's LUA_LIBRARY)
LIBRARY = os.path.join(ROOT, "agent", "store", "redis", "ratelimit.lua")
LIBRARY_NAME = "spoa_ratelimit_v8"
FUNCTIONS = ("rl8_decide", "rl8_decide_cluster")
REFUNDS = ("rl8_refund", "rl8_refund_cluster")
RETURNS = ("rl8_return", "rl8_return_cluster")
RELEASES = ("rl8_release", "rl8_release_cluster")

# Where the code that an EVAL script can run starts (after the "#!lua"
# line and the header comment) and where the registration starts: Redis
# offers redis.register_function only to FUNCTION LOAD.
_CODE_START = "\nlocal floor, "
_REGISTRATION = "\nlocal function register("


def library():
    """The text of the library, for FUNCTION LOAD REPLACE."""
    with open(LIBRARY) as f:
        return f.read()


def library_code():
    """The library's locals and functions, from its first declaration to
    the registration (excluded): an EVAL script made of this and a driver
    reaches eval_token(), muldiv() and the rest. The driver must call
    bind() first, as the registered functions do."""
    text = library()
    a = text.index(_CODE_START) + 1
    b = text.index(_REGISTRATION)
    assert a < b, "ratelimit.lua: declarations after the registration"
    return text[a:b]
