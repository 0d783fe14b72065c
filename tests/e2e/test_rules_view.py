# SPDX-License-Identifier: Apache-2.0
"""What an operator reads of an agent's loaded configuration: GET
/admin/rules, spoa_rl_build_info, spoa_rl_rules_info, the process_* series,
and the arguments the rules read that HAProxy never sends
(spoa_rl_argument_missing)."""

import hashlib
import json
import os
import re
import signal
import subprocess
import time

import harness
import spop
from harness import http_get, wait_for
from redis_helper import RedisServer

RULES = """\
identity: [api_key, ip]
on_store_failure: closed
store:
  type: redis
  address: "127.0.0.1:{port}"
  agents: 4
override_argument: rl_limit
layers:
  per-ip:
    identity: ip
    limits: ["100/1s"]
tiers:
  argument: tier
  default: free
  free:
    limits: ["10/1m", {rate: 100/1h, algorithm: sliding}]
    max_override: "1000/1m"
  pro:
    limits: ["100/1m"]
    stack: [per-ip]
endpoints:
  - name: search
    match: { method: POST, path: /api/search, tier: [pro] }
    limits: ["20/1s"]
    delay: 250ms
priorities:
  default: 1
  classes:
    - priority: 0
      match: { path: /health }
    - priority: 3
      match: { args: { x_test: "1" } }
shedding:
  thresholds: { 2: 85%, 3: 60% }
"""


def write(h, name, text):
    path = os.path.join(h.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def metrics(mport):
    r = http_get(mport, "/metrics")
    assert r.status == 200, r
    return r.text


def series(text, name):
    """{labels: value} of every sample of name."""
    out = {}
    for m in re.finditer(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M):
        out[m.group(1) or ""] = float(m.group(2))
    return out


def test_admin_rules_shows_what_decides(h):
    redis = RedisServer(h)
    text = RULES.replace("{port}", str(redis.port))
    path = write(h, "rules.yaml", text)
    mport = harness.free_port()
    a = h.agent("--rules", path, "--metrics", "127.0.0.1:%d" % mport, "--admin", "-t", "1")
    r = http_get(mport, "/admin/rules")
    assert r.status == 200 and r.headers.get("Content-Type") == "application/json", r
    doc = json.loads(r.text)
    with open(path, "rb") as f:
        assert doc["sha256"] == hashlib.sha256(f.read()).hexdigest(), doc
    assert doc["source"] == path and doc["generation"] == 1, doc
    assert doc["identity"] == ["api_key", "ip"] and doc["default_tier"] == "free", doc
    assert doc["on_store_failure"] == "closed" and doc["agents"] == 4, doc
    assert doc["default_priority"] == 1, doc
    assert doc["override_argument"] == "rl_limit", doc
    rules = {x["name"]: x for x in doc["rules"]}
    assert [x["name"] for x in doc["rules"]] == ["free", "pro", "search", "per-ip"], doc
    free = rules["free"]
    assert free["kind"] == "tier" and free["max_override"] == "1000/1m", free
    # each limit as applied, with the local failure mode's share (/ agents)
    assert free["limits"] == [
        {"limit": "10/1m", "algorithm": "token", "local": "2/1m"},
        {"limit": "100/1h", "algorithm": "sliding", "local": "25/1h"}], free
    assert rules["pro"]["stack"] == ["per-ip"], rules["pro"]
    assert rules["per-ip"]["kind"] == "layer" and rules["per-ip"]["scope"] == "arguments", rules
    assert rules["per-ip"]["identity"] == ["ip"], rules["per-ip"]
    assert rules["search"]["match"] == {"method": ["POST"], "path": ["/api/search"],
                                        "tier": ["pro"]}, rules["search"]
    assert rules["search"]["policy"] == '"search";q=20;w=1', rules["search"]
    # a refusal held instead (`delay`), and the file's bound on held requests
    assert rules["search"]["delay"] == "250ms" and free["delay"] is None, rules
    assert doc["max_delayed"] == 1024, doc
    assert doc["priorities"] == [
        {"priority": 0, "match": {"path": ["/health"]}},
        {"priority": 3, "match": {"args": {"x_test": ["1"]}}}], doc["priorities"]
    sh = doc["shedding"]
    assert sh["thresholds"]["P2"] == 0.85 and sh["thresholds"]["P3"] == 0.6, sh
    assert sh["in_use"] == "be_in_use" and sh["free"] == "be_free", sh
    assert doc["overrides"] == [] and doc["arguments_missing"] == [], doc
    # an override in force shows, under the client's hashed key
    r = http_get(mport, "/admin/override?api_key=k1&limit=500/1m&ttl=1h", method="PUT")
    assert r.status == 200, r
    # (with Redis, the agents learn the set by polling it)
    wait_for(lambda: json.loads(http_get(mport, "/admin/rules").text)["overrides"], 10,
             "the override to be in force")
    (ov,) = json.loads(http_get(mport, "/admin/rules").text)["overrides"]
    assert ov["limit"] == "500/1m" and re.fullmatch(r"[0-9a-f]{32}", ov["key"]), ov
    assert ov["expires_ms"] > 0, ov
    # a reload shows the new file, digest and generation
    path2 = write(h, "rules.yaml", text.replace("agents: 4", "agents: 2"))
    a.signal(signal.SIGHUP)
    wait_for(lambda: json.loads(http_get(mport, "/admin/rules").text)["generation"] == 2, 10,
             "the reload")
    doc = json.loads(http_get(mport, "/admin/rules").text)
    with open(path2, "rb") as f:
        assert doc["sha256"] == hashlib.sha256(f.read()).hexdigest(), doc
    assert doc["rules"][0]["limits"][0]["local"] == "5/1m", doc
    # only GET
    assert http_get(mport, "/admin/rules", method="POST").status == 404


def test_admin_rules_needs_the_token(h):
    token = "e2e-admin-token-0123456789abcdef"
    tf = write(h, "admin.token", token + "\n")
    os.chmod(tf, 0o600)
    mport = harness.free_port()
    h.agent("--metrics", "127.0.0.1:%d" % mport, "--admin", "--admin-token-file", tf)
    r = http_get(mport, "/admin/rules")
    assert r.status == 401 and "rules" not in json.loads(r.text), r
    r = http_get(mport, "/admin/rules", headers={"Authorization": "Bearer " + token})
    assert r.status == 200 and json.loads(r.text)["source"] == "(defaults)", r
    # without --admin there is no such endpoint
    mport2 = harness.free_port()
    h.agent("--metrics", "127.0.0.1:%d" % mport2)
    assert http_get(mport2, "/admin/rules").status == 404


def test_build_rules_and_process_metrics(h):
    path = write(h, "rules.yaml", "limits: [\"5/1m\"]\n")
    mport = harness.free_port()
    before = time.time()
    a = h.agent("--rules", path, "--metrics", "127.0.0.1:%d" % mport)
    text = metrics(mport)
    version = subprocess.run([os.path.join(harness.BUILD, "spoa-ratelimit"), "--version"],
                             capture_output=True, text=True, timeout=10).stdout.split()[-1]
    assert series(text, "spoa_rl_build_info") == {'{version="%s"}' % version: 1.0}, text
    digest = hashlib.sha256(b'limits: ["5/1m"]\n').hexdigest()
    assert series(text, "spoa_rl_rules_info") == {'{sha256="%s"}' % digest: 1.0}, text
    # two agents of one file agree; another file shows another digest
    mport2 = harness.free_port()
    h.agent("--rules", path, "--metrics", "127.0.0.1:%d" % mport2)
    assert series(metrics(mport2), "spoa_rl_rules_info") == series(text, "spoa_rl_rules_info")
    write(h, "rules.yaml", "limits: [\"6/1m\"]\n")
    a.signal(signal.SIGHUP)
    wait_for(lambda: series(metrics(mport), "spoa_rl_rules_generation")[""] == 2, 10,
             "the reload")
    digest2 = hashlib.sha256(b'limits: ["6/1m"]\n').hexdigest()
    assert series(metrics(mport), "spoa_rl_rules_info") == {'{sha256="%s"}' % digest2: 1.0}
    # process_*: as /proc tells of the agent's pid
    text = metrics(mport)
    for name in ("process_open_fds", "process_max_fds", "process_resident_memory_bytes",
                 "process_cpu_seconds_total", "process_start_time_seconds"):
        assert re.search(r"^# TYPE %s (gauge|counter)$" % name, text, re.M), name
    fds = series(text, "process_open_fds")[""]
    assert 3 <= fds <= len(os.listdir("/proc/%d/fd" % a.pid)) + 2, fds
    with open("/proc/%d/limits" % a.pid) as f:
        soft = re.search(r"^Max open files\s+(\d+)", f.read(), re.M).group(1)
    assert series(text, "process_max_fds")[""] == float(soft), text
    with open("/proc/%d/statm" % a.pid) as f:
        resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert 0.5 * resident < series(text, "process_resident_memory_bytes")[""] < 2 * resident
    start = series(text, "process_start_time_seconds")[""]
    assert before - 2 <= start <= time.time() + 1, (before, start)
    assert series(text, "process_cpu_seconds_total")[""] > 0


def send(c, n, sid, **args):
    """n check-rate messages on c, each answered."""
    for _ in range(n):
        c.send(spop.notify(sid, 1, [("check-rate", spop.check_rate_args(**args))]))
        c.expect(spop.ACK)
        sid += 2
    return sid


MISSING_RE = re.compile(r"warning: argument (\S+): the rules read it, but none of the first "
                        r"1000 check-rate messages carried it")


def test_misspelt_identity_argument_is_named(h):
    # `apikey` is what the file says; HAProxy sends api_key: every key
    # behind one address would share the address's bucket.
    path = write(h, "rules.yaml", "identity: [apikey, ip]\nlimits: [\"100000/1m\"]\n"
                 "endpoints:\n  - name: admin\n    match: { args: { x_area: [admin] } }\n"
                 "    limits: [\"5/1m\"]\n")
    mport = harness.free_port()
    a = h.agent("--rules", path, "--metrics", "127.0.0.1:%d" % mport, "--admin", "-t", "1")
    c = spop.Conn(a.port)
    c.handshake()
    sid = send(c, 999, 1, api_key="k1")
    # not judged before the 1,000th message
    assert series(metrics(mport), "spoa_rl_argument_missing") == {}
    assert not MISSING_RE.search(a.log()), a.log()
    sid = send(c, 1, sid, api_key="k1")
    wait_for(lambda: MISSING_RE.search(a.log()), 10, "the warning")
    assert series(metrics(mport), "spoa_rl_argument_missing") == {
        '{name="apikey"}': 1.0, '{name="x_area"}': 1.0}
    assert json.loads(http_get(mport, "/admin/rules").text)["arguments_missing"] == [
        "apikey", "x_area"]
    # once per name: more traffic, no more lines
    send(c, 1000, sid, api_key="k1")
    assert sorted(MISSING_RE.findall(a.log())) == ["apikey", "x_area"], a.log()
    c.close()


def test_arguments_sent_are_not_named(h):
    # the names the file wrote are all sent; defaults it did not write
    # (the default identity's `user`, the tier argument without tiers)
    # are not judged at all
    path = write(h, "rules.yaml", "identity: [api_key, ip]\nlimits: [\"100000/1m\"]\n"
                 "shedding:\n  thresholds: { 3: 70% }\n")
    mport = harness.free_port()
    a = h.agent("--rules", path, "--metrics", "127.0.0.1:%d" % mport, "-t", "1")
    c = spop.Conn(a.port)
    c.handshake()
    # api_key sent as NULL (HAProxy's header absent) is sent all the same
    send(c, 1000, 1, api_key=None)
    text = metrics(mport)
    assert series(text, "spoa_rl_argument_missing") == {}, text
    assert "# TYPE spoa_rl_argument_missing gauge" in text
    assert not MISSING_RE.search(a.log()), a.log()
    c.close()
    # the defaults: nothing written, nothing judged
    mport = harness.free_port()
    a = h.agent("--metrics", "127.0.0.1:%d" % mport, "-t", "1")
    c = spop.Conn(a.port)
    c.handshake()
    send(c, 1000, 1, api_key=None, user=None, tier=None)
    assert series(metrics(mport), "spoa_rl_argument_missing") == {}
    c.close()


LIMITS = ('limits: ["3/1m", {rate: 10/1h, algorithm: sliding}, '
          '{rate: 20/1d, algorithm: fixed}]\n')


def look(mport, key):
    r = http_get(mport, "/admin/client?api_key=" + key)
    assert r.status == 200, r
    (rule,) = json.loads(r.text)["rules"]
    return rule


def test_admin_client_with_redis_reads_like_memory(h):
    """/admin/client with Redis shows each limit's remaining requests and
    the seconds until it is full again, read from the values Redis holds,
    as the in-memory store shows its own after the same requests."""
    redis = RedisServer(h)
    mem_rules = write(h, "memory.yaml", LIMITS)
    redis_rules = write(h, "redis.yaml", LIMITS + "store: {type: redis, address: \"%s\"}\n"
                        % redis.addr)
    looks = {}
    for name, path in (("memory", mem_rules), ("redis", redis_rules)):
        mport = harness.free_port()
        a = h.agent("-f", path, "--metrics", "127.0.0.1:%d" % mport, "--admin", "-t", "1",
                    "--hash-key-file", h.hash_key_file())
        if name == "redis":
            # (a decision before the library is loaded is degraded, not counted)
            wait_for(lambda: "redis: worker 0 ready" in a.log(), 10, "the worker ready")
        c = spop.Conn(a.port)
        c.handshake()
        answers = [c.check_rate(sid, 1, api_key="k1") for sid in (1, 3)]
        assert not any(v.get("degraded") for v in answers), answers
        assert [v["status"] for v in answers] == [0, 0], answers
        looks[name] = (look(mport, "k1"), look(mport, "nobody"))
        c.close()
    (mem, mem_fresh), (red, red_fresh) = looks["memory"], looks["redis"]
    assert [(l["limit"], l["remaining"]) for l in red["limits"]] == [
        ("3/1m", 1), ("10/1h", 8), ("20/1d", 18)], red
    assert [l["remaining"] for l in red["limits"]] == [l["remaining"] for l in mem["limits"]]
    # the token bucket: the same seconds until full, on either clock
    assert abs(red["limits"][0]["reset"] - mem["limits"][0]["reset"]) <= 1, (red, mem)
    assert 39 <= red["limits"][0]["reset"] <= 40, red
    # windows start where each store's clock puts them: Redis's on the
    # wall clock (the fixed window ends at U, its value "U:C"), the
    # memory store's on the agent's monotonic one
    (fixed,) = [v for k, v in red["fields"].items() if k.startswith("f")]
    end_us, count = (int(x) for x in fixed.split(":"))
    assert count == 2, red
    assert abs(red["limits"][2]["reset"] - (end_us / 1e6 - time.time())) <= 2, (red, fixed)
    assert 0 < red["limits"][1]["reset"] <= 7200, red
    # the raw values stay beside them
    assert len(red["fields"]) == 3 and "ttl_ms" in red, red
    # a client without keys: full buckets
    assert [(l["remaining"], l["reset"]) for l in red_fresh["limits"]] == [
        (3, 0), (10, 0), (20, 0)], red_fresh
    assert red_fresh["limits"] == mem_fresh["limits"], (red_fresh, mem_fresh)


def test_admin_client_reads_a_packed_bucket(h):
    """A packed bucket (--redis-packed: a member of a sorted set, its score
    the bucket's integer state) reads as a key does."""
    redis = RedisServer(h)
    mport = harness.free_port()
    a = h.agent("--redis", redis.addr, "--redis-packed", "--limit", "4/1h", "--metrics",
                "127.0.0.1:%d" % mport, "--admin", "-t", "1", "--hash-key-file",
                h.hash_key_file())
    wait_for(lambda: "redis: worker 0 ready" in a.log(), 10, "the worker ready with Redis")
    c = spop.Conn(a.port)
    c.handshake()
    for sid in (1, 3, 5):
        assert c.check_rate(sid, 1, api_key="p1")["status"] == 0
    rule = look(mport, "p1")
    (limit,) = rule["limits"]
    # a token every 15 minutes: three taken, 45 minutes until full
    assert (limit["limit"], limit["remaining"]) == ("4/1h", 1), rule
    assert 2699 <= limit["reset"] <= 2700, rule
    c.close()
