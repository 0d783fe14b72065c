"""The agent's own resources under clients that misbehave or are merely
small: answers that must fit a small negotiated max-frame-size, peers that
never read what the agent writes, the operations listener held open by
half-sent requests. Each must cost the agent a bounded amount and leave
other clients served.
"""

import os
import re

import harness
import spop
from harness import http_get, wait_for
from spop import ACK, Conn

LONG = "r" * 31  # the longest rule name

# Sixteen limits of a long-named rule: its RateLimit-Policy takes some
# 700 bytes, far over the 256 HAProxy may announce as its max-frame-size.
BIG_POLICY_RULES = "tiers:\n  argument: tier\n  default: %s\n  %s:\n    limits: [%s]\n" % (
    LONG, LONG, ", ".join('"%d/%dm"' % (1000 + i, i + 1) for i in range(16)))


def rules_file(h, text, name="rules.yaml"):
    path = os.path.join(h.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def metric(port, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), http_get(port, "/metrics").text, re.M)
    return int(m.group(1)) if m else None


def test_answer_over_a_small_max_frame_size_drops_optional_variables(h):
    """HAProxy may announce a max-frame-size of 256: an answer that does
    not fit goes without policy (and ratelimit if need be), counted, and
    the connection stays; with room, the same answer is whole."""
    mport = harness.free_port()
    a = h.agent("--rules", rules_file(h, BIG_POLICY_RULES), "--metrics", "127.0.0.1:%d" % mport)
    with Conn(a.port) as c:
        c.handshake()
        v = c.check_rate(1, 1, api_key="roomy")
        assert len(v["policy"]) > 256 and v["rule"] == LONG, v
    with Conn(a.port) as c:
        kv = c.handshake(max_frame_size=256)
        assert kv["max-frame-size"] == 256, kv
        for sid in (1, 2, 3):
            c.send(spop.check_rate(sid, 1, api_key="small"))
            f = c.expect(ACK)
            assert len(f.raw) <= 256, len(f.raw)
            v = f.vars()
            assert "policy" not in v, v
            assert v["status"] == 0 and v["rule"] == LONG, v
            assert v["limit"] == 1000 and v["remaining"] == 1000 - sid, v
    assert metric(mport, "spoa_rl_answers_trimmed_total") == 3
    assert "status=\"3\"" not in http_get(mport, "/metrics").text
