# SPDX-License-Identifier: Apache-2.0
"""End to end through the real haproxy (haproxy-examples/basic.cfg with
spoe-conf/ratelimit.conf), the agent and an HTTP backend."""

import json
import math
import os
import re
import time

from harness import ROOT, http_get, wait_for

POLICY_5_10 = '"default";q=5;w=10'

# Agent log lines that mean trouble in a run where nothing should go wrong:
# the agent's error and warning levels ("...Z error: ", "...Z warning: "),
# any disconnect it sent, sanitizer reports, assertion failures.
BAD_LOG_RE = re.compile(r"\d\dZ (error|warning): |disconnect, status|Sanitizer|"
                        r"runtime error|Assertion|Segmentation|Abort")


# The API keys of these tests, added to the shipped map: the SPOE file
# sends a key only when its map lists it.
KEYS = ("k", "k1", "r", "alpha", "beta", "lg", "other", "one", "another")


def stack(h, *agent_args):
    """Agent, backend, haproxy; returns them once haproxy sees the agent UP."""
    agent = h.agent("--threads", "2", *agent_args)
    backend = h.backend()
    hp = h.haproxy(agent.port, backend.port, env={"RL_TIERS_MAP": h.tiers_map(*KEYS)})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    return agent, backend, hp


def get(hp, key=None, path="/", user=None, source=None):
    headers = {}
    if key is not None:
        headers["X-Api-Key"] = key
    if user is not None:
        headers["X-User"] = user
    return http_get(hp.port, path, headers=headers, source=source)


def assert_passed(r, policy, remaining, t):
    """t: the seconds until more quota (draft -10), for a token bucket its
    next token; not the seconds until full."""
    assert r.status == 200, r
    assert r.body == b"ok\n", r
    assert r.headers.get("RateLimit-Policy") == policy, r
    assert r.headers.get("RateLimit") == '"default";r=%d;t=%d' % (remaining, t), r
    assert r.headers.get("Retry-After") is None, r


def assert_limited(r, policy, retry_after, t):
    assert r.status == 429, r
    assert r.headers.get("Content-Type") == "application/json", r
    assert json.loads(r.body) == {"error": "rate_limited", "retry_after": retry_after}, r
    assert r.headers.get("Retry-After") == str(retry_after), r
    assert r.headers.get("RateLimit-Policy") == policy, r
    assert r.headers.get("RateLimit") == '"default";r=0;t=%d' % t, r


def assert_log_clean(agent):
    bad = [line for line in agent.log().splitlines() if BAD_LOG_RE.search(line)]
    assert not bad, "agent log has: %r" % bad[:5]


def exhaust_5_10(hp, **who):
    """Five requests pass counting down, the sixth is refused (5/10s: one
    token per 2 s, all within the first second). t is the next token's
    time, 2 s each time, while the bucket is full again only 2 s per
    request taken later (10 s once empty)."""
    for i in range(1, 6):
        assert_passed(get(hp, **who), POLICY_5_10, 5 - i, 2)
    assert_limited(get(hp, **who), POLICY_5_10, 2, 2)


def test_under_limit_then_429(h):
    agent, backend, hp = stack(h, "--limit", "5/10s")
    t0 = time.monotonic()
    exhaust_5_10(hp, key="k1")
    # A refused request never reaches the application.
    assert backend.count == 5, backend.count
    assert_limited(get(hp, key="k1"), POLICY_5_10, 2, 2)
    assert backend.count == 5, backend.count
    assert time.monotonic() - t0 < 1.0, "too slow for the exact values above"
    assert_log_clean(agent)


def test_api_keys_have_separate_buckets(h):
    agent, backend, hp = stack(h, "--limit", "5/10s")
    exhaust_5_10(hp, key="alpha")
    # Another key of the map starts full, and its use leaves alpha refused.
    assert_passed(get(hp, key="beta"), POLICY_5_10, 4, 2)
    assert_passed(get(hp, key="beta"), POLICY_5_10, 3, 2)
    assert_limited(get(hp, key="alpha"), POLICY_5_10, 2, 2)
    assert backend.count == 7, backend.count
    # A key the map does not list names nobody: the address is the client,
    # whatever key it makes up next.
    exhaust_5_10(hp, key="made-up-1", source="127.0.0.2")
    assert_limited(get(hp, key="made-up-2", source="127.0.0.2"), POLICY_5_10, 2, 2)
    assert_limited(get(hp, source="127.0.0.2"), POLICY_5_10, 2, 2)
    assert backend.count == 12, backend.count


def test_no_api_key_falls_back_to_ip(h):
    agent, backend, hp = stack(h, "--limit", "5/10s")
    # No key, no user: the client address is the identity.
    exhaust_5_10(hp)
    # Keys of the map are buckets of their own, not the address's; a key
    # it does not list is no key.
    assert_passed(get(hp, key="k1"), POLICY_5_10, 4, 2)
    assert_limited(get(hp, key="not-listed"), POLICY_5_10, 2, 2)
    # A user header names nobody: the SPOE file sends a user only where
    # HAProxy verified it (a JWT), so this is still the address.
    assert_limited(get(hp, user="alice"), POLICY_5_10, 2, 2)
    # Another client address has its own bucket; 127.0.0.1 stays refused.
    assert_passed(get(hp, source="127.0.0.2"), POLICY_5_10, 4, 2)
    assert_limited(get(hp), POLICY_5_10, 2, 2)
    # An empty key header counts as no key.
    assert_limited(get(hp, key=""), POLICY_5_10, 2, 2)
    assert backend.count == 7, backend.count


# examples/rules-tiers.yaml
FREE_POLICY = '"free-1m";q=10;w=60, "free-1d";q=100;w=86400'
PRO_POLICY = '"pro";q=100;w=60'


def test_client_headers_do_not_choose_the_tier(h):
    """The tier comes from the map over the API key (haproxy-examples/
    tiers.map): a client that asks for another in a header keeps its own."""
    agent, backend, hp = stack(h, "-f", os.path.join(ROOT, "examples", "rules-tiers.yaml"))
    lift = {"X-Tier": "enterprise", "X-Plan": "enterprise", "X-User": "admin"}

    def send(key=None, source=None):
        headers = dict(lift)
        if key is not None:
            headers["X-Api-Key"] = key
        return http_get(hp.port, "/", headers=headers, source=source)

    # A key missing from the map is free (and no client: the address is):
    # ten pass, the eleventh is refused.
    for _ in range(10):
        r = send("not-in-the-map")
        assert r.status == 200 and r.headers.get("RateLimit-Policy") == FREE_POLICY, r
    r = send("not-in-the-map")
    assert r.status == 429 and r.headers.get("RateLimit-Policy") == FREE_POLICY, r
    # A pro key stays pro, a client without a key free.
    r = send("pro-key-1111")
    assert r.status == 200 and r.headers.get("RateLimit-Policy") == PRO_POLICY, r
    r = send(source="127.0.0.2")
    assert r.status == 200 and r.headers.get("RateLimit-Policy") == FREE_POLICY, r
    assert backend.count == 12, backend.count
    assert_log_clean(agent)


def test_health_checks(h):
    agent, backend, hp = stack(h, "--limit", "100/1m")
    # inter 200ms: about ten checks, each a HELLO with healthcheck set.
    time.sleep(2.0)
    st = hp.server_stat("ratelimit-agents", "agent1")
    assert st["status"] == "UP", st
    # The stats put "* " before the status while a check is running.
    assert st["check_status"] in ("L7OK", "* L7OK"), st
    assert st["chkfail"] == "0", st
    assert st["chkdown"] == "0", st
    assert agent.alive()
    r = get(hp, key="k1")
    assert_passed(r, '"default";q=100;w=60', 99, 1)
    assert_log_clean(agent)


def test_reload_keeps_working_and_buckets_persist(h):
    # 5/1m: one token per 12 s, so no token comes back during the test; the
    # reset time shrinks by the seconds elapsed since the first request.
    agent, backend, hp = stack(h, "--limit", "5/1m")
    policy = '"default";q=5;w=60'
    t0 = time.monotonic()

    def check(status, remaining):
        # t: the next token (one per 12 s) whatever was taken, not the
        # bucket's refill (12 s per token taken)
        r = get(hp, key="r")
        late = math.ceil(time.monotonic() - t0)
        assert r.status == status, r
        assert r.headers.get("RateLimit-Policy") == policy, r
        m = re.fullmatch(r'"default";r=(\d+);t=(\d+)', r.headers.get("RateLimit", ""))
        assert m, r
        assert int(m.group(1)) == remaining, r
        assert 12 - late <= int(m.group(2)) <= 12, (r, late)
        return r

    check(200, 4)
    check(200, 3)
    hp.reload()
    check(200, 2)
    # The old worker goes away with its agent connections.
    wait_for(lambda: "Former worker" in hp.log(), 10, "the old haproxy worker to exit")
    check(200, 1)
    hp.reload()
    check(200, 0)
    r = check(429, 0)
    late = math.ceil(time.monotonic() - t0)
    assert 12 - late <= int(r.headers["Retry-After"]) <= 12, r
    assert json.loads(r.body) == {"error": "rate_limited",
                                  "retry_after": int(r.headers["Retry-After"])}, r
    assert agent.alive()
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP after the reloads")
    assert backend.count == 5, backend.count
    assert_log_clean(agent)


def test_passes_again_after_retry_after(h):
    agent, backend, hp = stack(h, "--limit", "2/2s")
    policy = '"default";q=2;w=2'
    assert_passed(get(hp, key="k"), policy, 1, 1)
    assert_passed(get(hp, key="k"), policy, 0, 1)
    r = get(hp, key="k")
    assert_limited(r, policy, 1, 1)
    # (the next token is 1 s away; the bucket is full again in 2)
    time.sleep(int(r.headers["Retry-After"]))
    # One token came back and this request takes it: the next in under 1 s.
    r = get(hp, key="k")
    assert r.status == 200, r
    assert r.headers.get("RateLimit") == '"default";r=0;t=1', r
    assert backend.count == 3, backend.count


def test_log_in_memory(h):
    """A sliding log in the in-memory store (two workers share it): 5/10s
    takes five, refuses the sixth until the first is 10 s old, and says so:
    t and Retry-After are the first request's age subtracted from 10 s."""
    agent, backend, hp = stack(h, "--limit", "5/10s:log")
    t0 = time.monotonic()
    for i in range(1, 6):
        # more quota only when the first leaves: t is 10 s, rounded up
        assert_passed(get(hp, key="lg"), POLICY_5_10, 5 - i, 10)
    r = get(hp, key="lg")
    assert_limited(r, POLICY_5_10, 10, 10)
    assert time.monotonic() - t0 < 1.0, "too slow for the exact values above"
    assert backend.count == 5, backend.count
    # another client has a log of its own
    assert_passed(get(hp, key="other"), POLICY_5_10, 4, 10)
    assert_log_clean(agent)


def test_fixed_answer_repeats_the_first_decision(h):
    """--fixed-answer (the floor of the HAProxy benchmark): the first
    request is decided, every later one, whoever sends it and whichever
    worker reads it (two here), gets the same answer without a decision;
    refused with Redis."""
    import subprocess

    import harness
    mport = harness.free_port()
    agent, _, hp = stack(h, "--limit", "5/10s", "--fixed-answer",
                         "--metrics", "127.0.0.1:%d" % mport)
    # Ten requests of one client: without the option the sixth is refused.
    for _ in range(10):
        assert_passed(get(hp, key="one"), POLICY_5_10, 4, 2)
    assert_passed(get(hp, key="another"), POLICY_5_10, 4, 2)
    text = http_get(mport, "/metrics").text
    decisions = sum(int(v) for v in re.findall(r"^spoa_rl_decisions_total\{[^}]*\} (\d+)$",
                                               text, re.M))
    notifies = int(re.search(r"^spoa_rl_notify_total (\d+)$", text, re.M).group(1))
    # The first request's decision, whichever worker made it; a NOTIFY
    # per request.
    assert decisions == 1, text
    assert notifies >= 11, text
    assert_log_clean(agent)
    r = subprocess.run([os.path.join(harness.BUILD, "spoa-ratelimit"), "--fixed-answer",
                        "--redis", "127.0.0.1:1", "--check"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1, r
    assert "--fixed-answer: with the in-memory store only" in r.stderr, r


def test_answer_carries_what_the_setting_chooses(h):
    """The variables an ACK sets, on the wire: by default what HAProxy's
    rules read (a forwarded request the RateLimit fields, a refused one
    also status, retry_after, reason and rule), `answer: full` every one,
    a list exactly those listed; a reload applies a new `answer`."""
    import signal

    import spop
    from spop import ACK, Conn

    def names(port, key, n):
        """The variable names of n answers to one client, in order."""
        with Conn(port) as c:
            c.handshake()
            out = []
            for sid in range(1, 2 * n, 2):
                c.send(spop.check_rate(sid, 1, api_key=key))
                out.append([a[2] for a in c.expect(ACK).actions()])
            return out

    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write('limits: ["2/1h"]\n')
    agent = h.agent("--threads", "1", "-f", path)
    read = ["policy", "ratelimit"]
    refused = ["status", "retry_after", "reason", "rule", "policy", "ratelimit"]
    assert names(agent.port, "k1", 3) == [read, read, refused]
    with open(path, "w") as f:
        f.write('limits: ["2/1h"]\nanswer: [remaining, status]\n')
    agent.signal(signal.SIGHUP)
    wait_for(lambda: agent.log().count("reloaded") == 1, 5, "the reload")
    assert names(agent.port, "k2", 3) == [["status", "remaining"]] * 3
    with open(path, "w") as f:
        f.write('limits: ["2/1h"]\nanswer: full\n')
    agent.signal(signal.SIGHUP)
    wait_for(lambda: agent.log().count("reloaded") == 2, 5, "the second reload")
    full = ["status", "retry_after", "limit", "remaining", "reset", "priority", "reason", "rule",
            "policy", "ratelimit", "shadow", "degraded"]
    assert names(agent.port, "k3", 1) == [full]
    assert_log_clean(agent)
