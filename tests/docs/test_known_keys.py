# SPDX-License-Identifier: Apache-2.0
"""The recipe "known keys by plan, unknown or missing keys per address"
(docs/integration.md) through a real HAProxy: haproxy-examples/known-keys.cfg
with spoe-conf/ratelimit-known-keys.conf and haproxy-examples/plans.map,
examples/rules-known-keys.yaml.

A key plans.map lists is a client of its own under its plan; any other key,
or none, is its address under the anonymous plan, so a made-up key per
request gets no fresh bucket, and a header naming a plan changes nothing."""

import os
import shutil

import harness
from harness import ROOT, http_get, wait_for
from test_examples import VERIFIED_KEY_RE, assert_log_clean, message_args

EXAMPLES = os.path.join(ROOT, "haproxy-examples")
RULES = os.path.join(ROOT, "examples", "rules-known-keys.yaml")
SPOE = os.path.join(ROOT, "spoe-conf", "ratelimit-known-keys.conf")

ANONYMOUS = '"anonymous";q=5;w=60'
FREE = '"free-1m";q=20;w=60, "free-1d";q=1000;w=86400'
PRO = '"pro";q=100;w=60'


def start(h):
    """The agent, an application, and haproxy on the example's files from
    the repository root, as the file's header says to run it by hand, but
    for the ports and a `timeout processing` that a busy test machine
    cannot miss."""
    agent = h.agent("-f", RULES, "--threads", "2")
    app = h.backend()
    with open(SPOE) as f:
        spoe = f.read()
    assert spoe.count("timeout processing 50ms\n") == 1
    spoe_copy = os.path.join(h.dir, "ratelimit-known-keys.conf")
    with open(spoe_copy, "w") as f:
        f.write(spoe.replace("timeout processing 50ms\n", "timeout processing 1s\n"))
    if shutil.which(harness.HAPROXY) is None:
        raise harness.Skip("haproxy is not installed")
    front = harness.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_")}
    env.update(RL_FRONTEND="127.0.0.1:%d" % front, RL_APP="127.0.0.1:%d" % app.port,
               RL_AGENT="127.0.0.1:%d" % agent.port, RL_SPOE_CONF=spoe_copy)
    hp = harness.Proc("haproxy", [harness.HAPROXY, "-db", "-f",
                                  os.path.join(EXAMPLES, "known-keys.cfg")],
                      os.path.join(h.dir, "haproxy.log"), env=env, cwd=ROOT)
    h.procs.append(hp)
    harness.wait_port(front, 10, hp.popen)
    return agent, app, front


def get(front, key=None, source=None, headers=None):
    hdrs = dict(headers or {})
    if key is not None:
        hdrs["X-Api-Key"] = key
    return http_get(front, "/", headers=hdrs, source=source)


def test_known_keys_by_plan_others_per_address(h):
    agent, app, front = start(h)
    # the agent is UP once an answer carries its policy (a request before
    # that is forwarded unchecked: HAProxy has no server to ask yet)
    wait_for(lambda: get(front, source="127.0.0.9").headers.get("RateLimit-Policy") == ANONYMOUS,
             10, "haproxy to reach the agent")
    # No key: anonymous, 5 a minute for the address.
    for _ in range(5):
        r = get(front)
        assert r.status == 200 and r.headers.get("RateLimit-Policy") == ANONYMOUS, r
    r = get(front)
    assert r.status == 429 and int(r.headers.get("Retry-After")) >= 1, r
    # A key the map does not list, a prefix of a listed one, a plan named
    # in a header: the same address, the same anonymous bucket.
    for key, extra in (("made-up-1", None), ("made-up-2", None), ("k-pro-000", None),
                       (None, {"X-Tier": "pro", "X-Plan": "pro"})):
        r = get(front, key, headers=extra)
        assert r.status == 429 and r.headers.get("RateLimit-Policy") == ANONYMOUS, (key, r)
    # Another address has a bucket of its own.
    r = get(front, "made-up-3", source="127.0.0.2")
    assert r.status == 200 and r.headers.get("RateLimit-Policy") == ANONYMOUS, r
    # A listed key, from the refused address: its own bucket, its plan.
    for _ in range(12):
        r = get(front, "k-pro-0002")
        assert r.status == 200 and r.headers.get("RateLimit-Policy") == PRO, r
    r = get(front, "k-free-0001")
    assert r.status == 200 and r.headers.get("RateLimit-Policy") == FREE, r
    assert r.headers.get("RateLimit", "").startswith('"free-1m";r=19;'), r
    assert_log_clean(agent)


def test_known_keys_files_follow_the_identity_rules():
    """The example sends a key only once the map verified it, the address
    as an IPv6 client's /64, and no header the client chooses but host."""
    args = message_args(SPOE)
    assert args["ip"] == "src,ipmask(32,64)" and args["path"] == "path", args
    assert VERIFIED_KEY_RE.fullmatch(args["api_key"]), args["api_key"]
    assert args["tier"] == 'req.hdr(x-api-key),map(${RL_PLANS_MAP-haproxy-examples/plans.map},anonymous)', args
    assert set(args) == {"ip", "method", "path", "host", "api_key", "tier"}, args
