#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Sends a SPOP HAPROXY-HELLO to an agent on a loopback port and prints its
AGENT-HELLO: the check that an installed agent answers (scripts/deb-test.sh,
scripts/deb-docker-test.sh). Exit status 1 when it does not.

    python3 scripts/spop-hello.py PORT
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "e2e"))
import spop  # noqa: E402


def main():
    with spop.Conn(int(sys.argv[1]), timeout=5) as c:
        c.send(spop.hello())
        f = c.recv_frame()
        if f is None or f.type != spop.AGENT_HELLO:
            print("spop-hello: no AGENT-HELLO: %r" % (f,), file=sys.stderr)
            return 1
        kv = spop.decode_kv(f.payload)
        print("  AGENT-HELLO:", {k: kv[k] for k in ("version", "max-frame-size", "capabilities")
                                 if k in kv})
    return 0


if __name__ == "__main__":
    sys.exit(main())
