# SPDX-License-Identifier: Apache-2.0
"""End to end through the real haproxy with each example of
haproxy-examples/ as it is (addresses from RL_* variables), its SPOE file
(with a longer processing timeout, see spoe_copy) and its rules file from
examples/:

    tiers-map.cfg   spoe-conf/ratelimit-tiers.conf     examples/rules-tiers.yaml
    jwt.cfg         spoe-conf/ratelimit-jwt.conf       examples/rules-tiers.yaml
    shedding.cfg    spoe-conf/ratelimit-shedding.conf  examples/rules-shedding.yaml
    problem-json.cfg  spoe-conf/ratelimit-shedding.conf  examples/rules-problem-json.yaml
    legacy-headers.cfg  spoe-conf/ratelimit.conf       --limit 3/1m
    login-bruteforce.cfg  spoe-conf/ratelimit-penalty.conf  examples/rules-login.yaml
    concurrency.cfg  spoe-conf/ratelimit-concurrency.conf  examples/rules-concurrency.yaml

and basic.cfg with test-only changes (a PROXY protocol bind, a header
that shows the rule that decided) for the clients' addresses and paths;
then what every shipped SPOE file and haproxy.cfg sends.
"""

import base64
import glob
import hashlib
import hmac
import http.client
import http.server
import json
import math
import os
import re
import shlex
import subprocess
import threading
import time

import harness
from harness import http_get, wait_for

EXAMPLES = os.path.join(harness.ROOT, "haproxy-examples")
SPOE_DIR = os.path.join(harness.ROOT, "spoe-conf")
RULES_DIR = os.path.join(harness.ROOT, "examples")

BAD_LOG_RE = re.compile(r"\d\dZ (error|warning): |disconnect, status|Sanitizer|"
                        r"runtime error|Assertion|Segmentation|Abort")

# examples/rules-tiers.yaml
FREE_POLICY = '"free-1m";q=10;w=60, "free-1d";q=100;w=86400'
PRO_POLICY = '"pro";q=100;w=60'
ENTERPRISE_POLICY = '"enterprise";q=1000;w=60'
EXPORT_POLICY = '"export-free";q=2;w=60'


def assert_log_clean(agent):
    bad = [line for line in agent.log().splitlines() if BAD_LOG_RE.search(line)]
    assert not bad, "agent log has: %r" % bad[:5]


def spoe_copy(h, name, timeout="1s"):
    """The example's SPOE file with a longer `timeout processing`: its 50 ms
    suit a production agent, not a test machine busy with other work, where
    a late answer would let a request through unchecked. Nothing else
    changes."""
    with open(os.path.join(SPOE_DIR, name)) as f:
        text = f.read()
    line = "    timeout processing 50ms\n"
    assert text.count(line) == 1, "%s: no single %r" % (name, line)
    path = os.path.join(h.dir, name)
    with open(path, "w") as f:
        f.write(text.replace(line, "    timeout processing %s\n" % timeout))
    return path


def start(h, cfg, spoe, rules, backend=None, env=None):
    """The agent on the example's rules, a backend, haproxy on the example's
    configuration and SPOE file; returns them once haproxy sees the agent
    UP."""
    agent = h.agent("--threads", "2", "-f", os.path.join(RULES_DIR, rules))
    if backend is None:
        backend = h.backend()
    e = {"RL_SPOE_CONF": spoe_copy(h, spoe)}
    e.update(env or {})
    hp = h.haproxy(agent.port, backend.port, cfg=os.path.join(EXAMPLES, cfg), env=e)
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    return agent, backend, hp


class Bucket:
    """The expected state of one client's bucket under one rule: the
    RateLimit header of each answer is checked against what `quota` per
    `period_s` allows, given the tokens taken so far and the time since the
    bucket's first request (tokens come back while the test runs, so the
    values are exact for a fast run and stay right for a slow one)."""

    def __init__(self, rule, policy, name, quota, period_s):
        self.rule = rule
        self.policy = policy
        self.name = name  # the policy item that the RateLimit header names
        self.quota = quota
        self.per_us = period_s * 1000000 // quota
        self.used = 0
        self.t0 = None

    def request(self, send, status=200):
        """send() and checks the answer; 200 and 401 take a token, 429
        does not. Returns the response."""
        if self.t0 is None:
            self.t0 = time.monotonic()
        r = send()
        assert r.status == status, r
        if status != 429:
            self.used += 1
        elapsed_us = int((time.monotonic() - self.t0) * 1e6) + 1
        # the agent names the rule when it refuses (the default answer)
        assert r.headers.get("X-RL-Rule") == (self.rule if status == 429 else None), r
        assert r.headers.get("RateLimit-Policy") == self.policy, r
        m = re.fullmatch(r'"([^"]+)";r=(\d+);t=(\d+)', r.headers.get("RateLimit", ""))
        assert m and m.group(1) == self.name, r
        remaining, t = int(m.group(2)), int(m.group(3))
        lo = self.quota - self.used
        hi = min(self.quota, lo + elapsed_us // self.per_us)
        assert lo <= remaining <= hi, (r, lo, hi)
        # t (draft -10): until the next token, never more than one token's
        # time whatever was taken (the time until full grows with it);
        # with no token back yet, one token's time less what has passed
        t_hi = -(-self.per_us // 1000000)
        t_lo = 1
        if remaining == lo:
            t_lo = max(1, -(-(self.per_us - elapsed_us) // 1000000))
        assert t_lo <= t <= t_hi, (r, t_lo, t_hi)
        if status == 200:
            assert r.body == b"ok\n", r
            assert r.headers.get("Retry-After") is None, r
        elif status == 429:
            retry = int(r.headers.get("Retry-After", "-1"))
            assert -(-(self.per_us - elapsed_us) // 1000000) <= retry <= \
                -(-self.per_us // 1000000), (r, elapsed_us)
            # a request of weight 1 passes when the next token comes
            assert retry == t, r
            assert json.loads(r.body) == {"error": "rate_limited", "retry_after": retry}, r
        return r


def free():
    # The minute limit is the tighter one: it names the RateLimit header.
    return Bucket("free", FREE_POLICY, "free-1m", 10, 60)


def pro():
    return Bucket("pro", PRO_POLICY, "pro", 100, 60)


def enterprise():
    return Bucket("enterprise", ENTERPRISE_POLICY, "enterprise", 1000, 60)


def use_free_tier(send):
    """Ten requests pass, the eleventh is refused."""
    b = free()
    for _ in range(10):
        b.request(send)
    b.request(send, 429)
    return b


# ---- tiers-map.cfg -------------------------------------------------------------------

def key_get(hp, key=None, path="/", source=None):
    return http_get(hp.port, path, headers={"X-Api-Key": key} if key is not None else {},
                    source=source)


def test_tiers_map(h):
    agent, backend, hp = start(h, "tiers-map.cfg", "ratelimit-tiers.conf", "rules-tiers.yaml",
                               env={"RL_TIERS_MAP": os.path.join(EXAMPLES, "tiers.map")})
    # A key missing from the map: map(...,free), the free tier, and no
    # client: the address is.
    b = use_free_tier(lambda: key_get(hp, "not-in-the-map"))
    # So another made-up key, none, or a prefix of a pro key (map keys
    # match whole and exactly) is the same client, refused.
    b.request(lambda: key_get(hp, "made-up-2"), 429)
    b.request(lambda: key_get(hp), 429)
    b.request(lambda: key_get(hp, "pro-key-111"), 429)
    # A pro key of the map passes the same eleven requests, and more.
    p = pro()
    for _ in range(12):
        p.request(lambda: key_get(hp, "pro-key-1111"))
    # Keys of the map are buckets of their own, whatever their tier.
    pro().request(lambda: key_get(hp, "pro-key-2222"))
    enterprise().request(lambda: key_get(hp, "ent-key-3333"))
    # Another address has its own bucket, with a made-up key or none.
    free().request(lambda: key_get(hp, "other-free-key", source="127.0.0.2"))
    # The endpoint of the free tier only: exports, 2 per minute.
    ex = Bucket("export-free", EXPORT_POLICY, "export-free", 2, 60)
    ex.request(lambda: key_get(hp, "exporter", "/api/export/all", source="127.0.0.3"))
    ex.request(lambda: key_get(hp, "exporter", "/api/export", source="127.0.0.3"))
    ex.request(lambda: key_get(hp, "exporter", "/api/export/all", source="127.0.0.3"), 429)
    # A bucket of its own: the client's tier limits are untouched, and
    # /api/exports is not below /api/export.
    f = free()
    f.request(lambda: key_get(hp, "exporter", source="127.0.0.3"))
    f.request(lambda: key_get(hp, "exporter", "/api/exports", source="127.0.0.3"))
    # A pro key on the same path keeps its tier's limits.
    p.request(lambda: key_get(hp, "pro-key-1111", "/api/export/all"))
    # Requests refused never reach the application.
    assert backend.count == 10 + 12 + 3 + 2 + 2 + 1, backend.count
    assert_log_clean(agent)


# ---- jwt.cfg -------------------------------------------------------------------------

JWT_SECRET = "e2e-secret-0123456789"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims, secret=JWT_SECRET, alg="HS256", exp_in=3600):
    """An HS256 token signed with secret; exp is now + exp_in unless the
    claims set it (None: no exp claim)."""
    claims = dict(claims)
    if exp_in is not None and "exp" not in claims:
        claims["exp"] = int(time.time()) + exp_in
    head = b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = b64url(json.dumps(claims).encode())
    signing_input = ("%s.%s" % (head, body)).encode()
    sig = hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()
    return "%s.%s.%s" % (head, body, b64url(sig) if alg == "HS256" else "")


def bearer_get(hp, token=None, path="/"):
    headers = {"Authorization": "Bearer " + token} if token is not None else {}
    return http_get(hp.port, path, headers=headers)


def assert_unauthorized(r):
    assert r.status == 401, r
    assert json.loads(r.body) == {"error": "invalid_token"}, r
    assert r.headers.get("WWW-Authenticate") == 'Bearer error="invalid_token"', r


def test_jwt(h):
    try:
        vv = subprocess.run([harness.HAPROXY, "-vv"], capture_output=True, text=True, timeout=10)
    except OSError:
        raise harness.Skip("haproxy is not installed")
    if not re.search(r"^Feature list :.* \+OPENSSL\b", vv.stdout, re.M):
        raise harness.Skip("%s is built without OpenSSL: no jwt_* converters" % harness.HAPROXY)
    agent, backend, hp = start(h, "jwt.cfg", "ratelimit-jwt.conf", "rules-tiers.yaml",
                               env={"RL_JWT_SECRET": JWT_SECRET})
    bob = jwt({"sub": "bob", "plan": "free"})
    alice = jwt({"sub": "alice", "plan": "pro"})
    # bob's bucket: ten pass, the eleventh is refused.
    b = use_free_tier(lambda: bearer_get(hp, bob))
    # alice, on the same address: her own bucket, her plan's limits.
    a = pro()
    for _ in range(12):
        a.request(lambda: bearer_get(hp, alice))
    # Another free user is not bob; another token of bob is still bob.
    free().request(lambda: bearer_get(hp, jwt({"sub": "carol", "plan": "free"})))
    b.request(lambda: bearer_get(hp, jwt({"sub": "bob", "plan": "free"}, exp_in=7200)), 429)
    # The plan claim picks the tier; an unknown or missing plan is free.
    enterprise().request(lambda: bearer_get(hp, jwt({"sub": "dave", "plan": "enterprise"})))
    free().request(lambda: bearer_get(hp, jwt({"sub": "erin", "plan": "gold"})))
    free().request(lambda: bearer_get(hp, jwt({"sub": "frank"})))
    # A token signed with another secret, an expired one, an unsigned one,
    # one without exp: 401, counted against the client address.
    ip = free()
    forged = jwt({"sub": "alice", "plan": "enterprise"}, secret="not-the-secret")
    for token in (forged,
                  jwt({"sub": "alice", "plan": "pro"}, exp_in=-10),
                  jwt({"sub": "alice", "plan": "pro"}, alg="none"),
                  jwt({"sub": "alice", "plan": "pro"}, exp_in=None)):
        assert_unauthorized(ip.request(lambda: bearer_get(hp, token), 401))
    # Without a token the address is the client: the same bucket.
    for _ in range(6):
        ip.request(lambda: bearer_get(hp))
    ip.request(lambda: bearer_get(hp), 429)
    # The address refused, a forged token meets the limit first.
    ip.request(lambda: bearer_get(hp, forged), 429)
    # Users keep their own buckets.
    a.request(lambda: bearer_get(hp, alice))
    # Refused requests (429 and 401) never reach the application.
    assert backend.count == 10 + 12 + 1 + 3 + 6 + 1, backend.count
    assert_log_clean(agent)


# ---- shedding.cfg ------------------------------------------------------------------------

class HoldingBackend(harness.HttpServer):
    """An HTTP server that answers 200 "ok\\n" at once, except requests with
    an X-Hold header, which it holds until release() (at most 15 s): they
    keep a connection of haproxy's backend busy."""

    def __init__(self):
        self.count = 0
        self.held = 0
        self.seen = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self):
                hold = self.headers.get("X-Hold") is not None
                with backend.lock:
                    backend.count += 1
                    backend.seen.append((self.command, self.path, hold))
                    if hold:
                        backend.held += 1
                if hold:
                    backend.gate.wait(15)
                    with backend.lock:
                        backend.held -= 1
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                harness.answer_ok(self)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.serve(Handler, request_queue_size=64)

    def release(self):
        self.gate.set()

    def stop(self):
        self.gate.set()
        super().stop()


def app_busy(hp):
    """Connections of backend app in use, as be_conn counts them."""
    for row in hp.stats():
        if row.get("pxname") == "app" and row.get("svname") == "BACKEND":
            return int(row["scur"])
    raise AssertionError("no stats for backend app")


def test_shedding(h):
    backend = HoldingBackend()
    h.backends.append(backend)  # stopped by the harness whatever happens
    agent, backend, hp = start(h, "shedding.cfg", "ratelimit-shedding.conf",
                               "rules-shedding.yaml", backend=backend)
    holders = []
    results = []

    def hold_one():
        # A payment (P0): never shed, so the filling never fails.
        r = http_get(hp.port, "/api/payments/slow", method="POST",
                     headers={"X-Hold": "1", "Content-Length": "0"}, timeout=20)
        with backend.lock:
            results.append(r)

    def fill_to(n):
        while len(holders) < n:
            t = threading.Thread(target=hold_one, daemon=True)
            t.start()
            holders.append(t)
        wait_for(lambda: backend.held == n, 5, "%d requests held by the backend" % n)
        # haproxy's count, with the requests of the checks gone.
        wait_for(lambda: app_busy(hp) == n, 5, "be_conn(app) == %d" % n)

    def send(priority, path="/", method="GET", test=False):
        headers = {"X-Test": "1"} if test else {}
        if method == "POST":
            headers["Content-Length"] = "0"
        r = http_get(hp.port, path, method=method, headers=headers)
        assert r.headers.get("X-RL-Priority") == str(priority), r
        return r

    def passes(priority, **kw):
        r = send(priority, **kw)
        assert r.status == 200, r
        assert r.body == b"ok\n", r
        assert r.headers.get("X-RL-Reason") == "ok", r
        assert r.headers.get("RateLimit-Policy") == '"default";q=600;w=60', r
        # the request leaves its connection before the next check
        wait_for(lambda: app_busy(hp) == len(holders), 5, "be_conn(app) back to the held")

    def shed(priority, **kw):
        before = backend.count
        r = send(priority, **kw)
        assert r.status == 503, r
        assert r.headers.get("Retry-After") == "2", r
        assert r.headers.get("X-RL-Reason") == "shed", r
        assert json.loads(r.body) == {"error": "unavailable", "reason": "shed",
                                      "retry_after": 2}, r
        assert backend.count == before, "a shed request reached the application"

    try:
        # Idle: every priority passes, test traffic too.
        passes(3, test=True)
        passes(2)
        passes(1, method="POST")
        passes(0, path="/api/payments")
        # 7 of the 10 connections busy, load 70%: P3 is shed, and only P3.
        fill_to(7)
        shed(3, test=True)
        shed(3, method="POST", test=True)
        passes(2)
        passes(1, method="POST")
        passes(0, path="/api/payments", test=True)
        # 80%: P2 too.
        fill_to(8)
        shed(3, test=True)
        shed(2)
        passes(1, method="POST")
        passes(0, path="/api/payments")
        # 90%: P1 too; payments still pass.
        fill_to(9)
        shed(2)
        shed(1, method="POST")
        passes(0, path="/api/payments", method="POST")
        # 100%: a payment is not shed; it waits in haproxy's queue for a
        # connection and is served when one frees up.
        fill_to(10)
        shed(1, method="POST")
        queued = []
        t = threading.Thread(target=lambda: queued.append(
            http_get(hp.port, "/api/payments", headers={"X-Test": "1"}, timeout=20)),
            daemon=True)
        t.start()
        time.sleep(0.5)
        assert not queued, queued
        assert backend.count == 4 + 10 + 3 + 2 + 1, backend.count
    finally:
        backend.release()
    t.join(20)
    assert len(queued) == 1, "the queued payment got no answer"
    r = queued[0]
    assert r.status == 200, r
    assert r.headers.get("X-RL-Priority") == "0", r
    for t in holders:
        t.join(20)
    assert len(results) == 10 and all(r.status == 200 for r in results), results
    assert all(r.headers.get("X-RL-Priority") == "0" for r in results), results
    assert backend.count == 4 + 10 + 3 + 2 + 1 + 1, backend.count
    assert_log_clean(agent)


# ---- problem-json.cfg --------------------------------------------------------------------

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
REDUCED_CAPACITY = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"


def test_problem_json(h):
    """429 and 503 as problem details (RFC 9457) of the types of
    draft-ietf-httpapi-ratelimit-headers-10, through the real haproxy: the
    bodies parse as JSON and carry the retry time of Retry-After; the
    RateLimit header's t is the next token's time (5/1m: 12 s)."""
    backend = HoldingBackend()
    h.backends.append(backend)  # stopped by the harness whatever happens
    # One connection for the application: one held request is a load of
    # 100%, over every threshold.
    agent, backend, hp = start(h, "problem-json.cfg", "ratelimit-shedding.conf",
                               "rules-problem-json.yaml", backend=backend,
                               env={"RL_APP_MAXCONN": "1"})
    key = {"X-Api-Key": "problem"}  # sent by no argument: the address is the client
    t0 = time.monotonic()
    for remaining in (4, 3, 2, 1, 0):
        r = http_get(hp.port, "/", headers=key)
        late = math.ceil(time.monotonic() - t0)
        assert r.status == 200 and r.body == b"ok\n", r
        assert r.headers.get("RateLimit-Policy") == '"default";q=5;w=60', r
        m = re.fullmatch(r'"default";r=(\d+);t=(\d+)', r.headers.get("RateLimit", ""))
        assert m and int(m.group(1)) == remaining, r
        assert 12 - late <= int(m.group(2)) <= 12, (r, late)
        # the one connection free again before the next request, which
        # would be shed otherwise
        wait_for(lambda: app_busy(hp) == 0, 5, "be_conn(app) back to 0")
    r = http_get(hp.port, "/", headers=key)
    late = math.ceil(time.monotonic() - t0)
    assert r.status == 429, r
    assert r.headers.get("Content-Type") == "application/problem+json", r
    retry = int(r.headers.get("Retry-After", "-1"))
    assert 12 - late <= retry <= 12, (r, late)
    # the next token is when a request passes again: t is Retry-After
    assert r.headers.get("RateLimit") == '"default";r=0;t=%d' % retry, r
    assert json.loads(r.body) == {
        "type": QUOTA_EXCEEDED, "title": "Quota Exceeded", "status": 429,
        "detail": 'Too many requests under policy "default"; retry after %d s' % retry,
        "violated-policies": ["default"], "retry_after": retry}, r
    assert backend.count == 5, backend.count

    # 503: a payment (P0, never shed) of another client (address) holds
    # the one connection; a read (P2) of a third is shed.
    held = []
    t = threading.Thread(target=lambda: held.append(http_get(
        hp.port, "/api/payments/slow", method="POST",
        headers={"X-Hold": "1", "Content-Length": "0"}, timeout=20, source="127.0.0.2")),
        daemon=True)
    t.start()
    try:
        wait_for(lambda: backend.held == 1, 5, "the payment held by the backend")
        wait_for(lambda: app_busy(hp) == 1, 5, "be_conn(app) == 1")
        r = http_get(hp.port, "/", source="127.0.0.3")
        assert r.status == 503, r
        assert r.headers.get("Content-Type") == "application/problem+json", r
        assert r.headers.get("Retry-After") == "2", r
        assert json.loads(r.body) == {
            "type": REDUCED_CAPACITY, "title": "Temporary Reduced Capacity", "status": 503,
            "detail": "Capacity is reduced for now (shed); retry after 2 s",
            "retry_after": 2}, r
    finally:
        backend.release()
    t.join(20)
    assert len(held) == 1 and held[0].status == 200, held
    assert backend.count == 6, backend.count
    assert_log_clean(agent)


# ---- legacy-headers.cfg ------------------------------------------------------------------

def legacy(r):
    """The X-RateLimit-* headers of a response, as integers (None: absent)."""
    return tuple(None if r.headers.get(h) is None else int(r.headers.get(h))
                 for h in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"))


def test_legacy_headers(h):
    """X-RateLimit-Limit, -Remaining and -Reset from txn.rl.limit,
    remaining and reset, and Retry-After on a 429, through the real
    haproxy: 3/1m is a token every 20 s, so the limit is full again 20,
    40, then 60 s after the first, second and third request, and the
    fourth waits 20 s. Then the file's commented alternative, the Unix
    time of the reset."""
    agent = h.agent("--threads", "2", "--limit", "3/1m",
                    "--answer", "status,retry_after,limit,remaining,reset")
    backend = h.backend()
    cfg = os.path.join(EXAMPLES, "legacy-headers.cfg")
    spoe = spoe_copy(h, "ratelimit.conf")
    hp = h.haproxy(agent.port, backend.port, cfg=cfg, env={"RL_SPOE_CONF": spoe})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    key = {"X-Api-Key": "legacy"}
    t0 = time.monotonic()
    for n, remaining in enumerate((2, 1, 0), 1):
        r = http_get(hp.port, "/", headers=key)
        late = math.ceil(time.monotonic() - t0)
        assert r.status == 200 and r.body == b"ok\n", r
        limit, rem, reset = legacy(r)
        assert (limit, rem) == (3, remaining), r
        # n tokens taken: full again n * 20 s after the first request
        assert 20 * n - late <= reset <= 20 * n, (r, late)
        assert r.headers.get("Retry-After") is None, r
    r = http_get(hp.port, "/", headers=key)
    late = math.ceil(time.monotonic() - t0)
    assert r.status == 429, r
    limit, rem, reset = legacy(r)
    assert (limit, rem) == (3, 0), r
    assert 60 - late <= reset <= 60, (r, late)
    retry = int(r.headers.get("Retry-After", "-1"))
    assert 20 - late <= retry <= 20, (r, late)
    assert json.loads(r.body) == {"error": "rate_limited", "retry_after": retry}, r
    # another client (a key of the map) has its own bucket
    r = http_get(hp.port, "/", headers={"X-Api-Key": "pro-key-1111"})
    assert r.status == 200 and legacy(r)[:2] == (3, 2), r
    assert backend.count == 4, backend.count

    # The alternative line: the reset as a Unix time.
    with open(cfg) as f:
        text = f.read()
    delta = '    http-after-response set-header X-RateLimit-Reset "%[var(txn.rl.reset)]"'
    epoch = '    # http-after-response set-header X-RateLimit-Reset "%[date,add(txn.rl.reset)]"'
    assert text.count(delta) == 1 and text.count(epoch) == 1, "legacy-headers.cfg changed"
    text = text.replace(delta, "    #" + delta[4:]).replace(epoch, epoch.replace("# ", "", 1))
    cfg_epoch = os.path.join(h.dir, "legacy-headers-epoch.cfg")
    with open(cfg_epoch, "w") as f:
        f.write(text)
    hp2 = h.haproxy(agent.port, backend.port, cfg=cfg_epoch, env={"RL_SPOE_CONF": spoe},
                    name="haproxy-epoch")
    wait_for(lambda: hp2.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in the second haproxy's stats")
    before = int(time.time())
    r = http_get(hp2.port, "/", source="127.0.0.4")
    after = int(time.time())
    assert r.status == 200, r
    limit, rem, reset = legacy(r)
    assert (limit, rem) == (3, 2), r
    # the first request: full again 20 s later (19 if a second turned
    # between HAProxy's clock and the agent's)
    assert before + 19 <= reset <= after + 20, (r, before, after)
    assert_log_clean(agent)


# ---- identity and paths: what every shipped file sends ------------------------------------

def cfg_copy(h, name, *changes):
    """The example haproxy.cfg with test-only changes, each (old, new) with
    old found once; returns its path."""
    with open(os.path.join(EXAMPLES, name)) as f:
        text = f.read()
    for old, new in changes:
        assert text.count(old) == 1, "%s: no single %r" % (name, old)
        text = text.replace(old, new)
    path = os.path.join(h.dir, "test-" + name)
    with open(path, "w") as f:
        f.write(text)
    return path


class ProxiedConnection(http.client.HTTPConnection):
    """A connection that opens with a PROXY protocol v1 line naming `src`
    as the client, as a load balancer in front of HAProxy would: HAProxy's
    src is then that address, IPv4 or IPv6."""

    def __init__(self, port, src, **kw):
        super().__init__("127.0.0.1", port, **kw)
        self.src = src

    def connect(self):
        super().connect()
        if ":" in self.src:
            line = "PROXY TCP6 %s ::1 40000 80\r\n" % self.src
        else:
            line = "PROXY TCP4 %s 127.0.0.1 40000 80\r\n" % self.src
        self.sock.sendall(line.encode())


def proxied_get(port, src, path="/", headers=None):
    conn = ProxiedConnection(port, src, timeout=5)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return harness.Response(r.status, r.headers, r.read())
    finally:
        conn.close()


def ratelimit_remaining(r):
    m = re.fullmatch(r'"[^"]+";r=(\d+);t=\d+', r.headers.get("RateLimit", ""))
    assert m, r
    return int(m.group(1))


def test_ipv6_clients_are_their_64(h):
    """basic.cfg with spoe-conf/ratelimit.conf, behind a load balancer that
    speaks the PROXY protocol (test-only: accept-proxy on the bind), so the
    test can send from any address: every address of an IPv6 /64 is one
    client, as a host that holds the /64 could send each request from
    another of them; another /64 is another client; IPv4 addresses are
    whole, an IPv4-mapped IPv6 one its IPv4."""
    cfg = cfg_copy(h, "basic.cfg", ('    bind "${RL_FRONTEND-127.0.0.1:8080}"\n',
                                    '    bind "${RL_FRONTEND-127.0.0.1:8080}" accept-proxy\n'))
    agent = h.agent("--threads", "2", "--limit", "5/1m")
    backend = h.backend()
    hp = h.haproxy(agent.port, backend.port, cfg=cfg,
                   env={"RL_SPOE_CONF": spoe_copy(h, "ratelimit.conf")})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")

    def get(src, status=200):
        r = proxied_get(hp.port, src)
        assert r.status == status, (src, r)
        return r

    # five addresses of one /64 take its five requests; a sixth is refused
    for n, src in enumerate(("2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:0:ffff::9",
                             "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::5"), 1):
        assert ratelimit_remaining(get(src)) == 5 - n, src
    get("2001:db8:1:2:ffff:ffff:ffff:ffff", 429)
    # the next /64 is another client
    assert ratelimit_remaining(get("2001:db8:1:3::1")) == 4
    # IPv4: each address its own; an IPv4-mapped address is that IPv4 one
    assert ratelimit_remaining(get("192.0.2.1")) == 4
    assert ratelimit_remaining(get("192.0.2.2")) == 4
    assert ratelimit_remaining(get("::ffff:192.0.2.1")) == 3
    assert backend.count == 9, backend.count
    assert_log_clean(agent)


# Spellings of a path, each sent through HAProxy as it is (the shipped
# files send path=path) and the path the agent matches: as an
# application reads it (decoded once, lower case, without ;params, with
# dot segments resolved however deep), docs/rules.md's "How paths are
# matched".
PATHS = [
    ("/login", "/login"),
    ("/%6cogin", "/login"),
    ("/%6Cogin", "/login"),
    ("//login", "/login"),
    ("/./login", "/login"),
    ("/x/../login", "/login"),
    ("/login;jsessionid=1", "/login"),
    ("/LOGIN", "/login"),
    ("/login%2f", "/login/"),
    ("/login?next=/x", "/login"),
    ("/a/b/../../login", "/login"),
    ("/a/b/../c/../../login", "/login"),
    ("/a/../../b/../login", "/login"),
    ("/../login", "/login"),
    ("/%2e%2e/login", "/login"),
    ("/x/%2E%2E/login", "/login"),
    ("/x/..%2flogin", "/login"),
    ("/x/..;/login", "/login"),
    ("/login%3bx=1", "/login"),
    ("/%zz/../login", "/login"),
    ("/a/./b/./../c", "/a/c"),
    ("/a/b/..", "/a/"),
    ("/api/export/../export/x", "/api/export/x"),
    ("/a/.../login", "/a/.../login"),
    ("/a/..b/../login", "/a/login"),
    ("/login%", "/login%"),
    ("/login%252f", "/login%252f"),
    ("/loginx", "/loginx"),
    ("/.", "/"),
    ("/..", "/"),
    ("/", "/"),
    ("/" + "a/" * 100 + "../" * 100 + "login", "/login"),
    ("/." * 3000 + "/login", "/login"),
    ("/login" + "/." * 3000, "/login/"),
    # nested deeper than any regex engine goes
    ("/a" * 600 + "/.." * 600 + "/login", "/login"),
    ("/a/b/.." * 1000 + "/login", "/a" * 1000 + "/login"),
]

# An endpoint per path of PATHS, the more specific first (the first that
# matches decides); a path none matches is the catch-all's, "default".
PATH_ENDPOINTS = (("login", "/login"), ("a-dots", "/a/.../login"), ("a-login", "/a/login"),
                  ("a-c", "/a/c"), ("a-dir", "/a/"), ("export-x", "/api/export/x"),
                  ("login-pct", "/login%"))
PATH_RULES = 'limits: ["1000/1m"]\nendpoints:\n' + "".join(
    '  - { name: %s, match: { path: "%s" }, limits: ["1000/1m"] }\n' % e
    for e in PATH_ENDPOINTS)


def path_rule(path):
    """The rule of a normalised path: a path condition holds for its
    value and below it, at a segment boundary (docs/rules.md)."""
    for name, value in PATH_ENDPOINTS:
        if path == value or (path.startswith(value) and
                             (value.endswith("/") or path[len(value)] in "/?")):
            return name
    return "default"


def test_paths_are_normalised(h):
    """basic.cfg with spoe-conf/ratelimit.conf (test-only: a header shows
    txn.rl.rule): each spelling of a path is the rule of the path an
    application reads, however deep its dot segments; HAProxy forwards
    every one to the application."""
    cfg = cfg_copy(h, "basic.cfg", ("    default_backend app\n",
                                    '    http-after-response set-header X-RL-Rule '
                                    '"%[var(txn.rl.rule)]"\n    default_backend app\n'))
    rules = os.path.join(h.dir, "rules-paths.yaml")
    with open(rules, "w") as f:
        # (the rule with every answer, not only with a refusal)
        f.write("answer: full\n" + PATH_RULES)
    agent = h.agent("--threads", "2", "-f", rules)
    backend = h.backend()
    hp = h.haproxy(agent.port, backend.port, cfg=cfg,
                   env={"RL_SPOE_CONF": spoe_copy(h, "ratelimit.conf")})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    wrong = []
    assert {path_rule(normal) for _, normal in PATHS} == \
        {name for name, _ in PATH_ENDPOINTS} | {"default"}, "a rule no path tests"
    for raw, normal in PATHS:
        want = path_rule(normal)
        r = http_get(hp.port, raw)
        if r.status != 200 or r.headers.get("X-RL-Rule") != want:
            wrong.append((raw[:60], r.status, r.headers.get("X-RL-Rule"), want))
    assert not wrong, wrong
    assert backend.count == len(PATHS), backend.count
    assert_log_clean(agent)


class FailingBackend(harness.HttpServer):
    """An HTTP server that answers 401 to every request but `/` (200), as
    a login form does to wrong passwords; counts them."""

    def __init__(self):
        self.count = 0
        self.lock = threading.Lock()
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                with backend.lock:
                    backend.count += 1
                body = b"ok\n" if self.path == "/" else b"no\n"
                self.send_response(200 if self.path == "/" else 401)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.serve(Handler)


LOGIN_POLICY = '"login";q=10;w=60'
LOGIN_SPELLINGS = ("/login", "/%6cogin", "/%6Cogin", "//login", "/./login", "/x/../login",
                   "/login;jsessionid=1", "/LOGIN", "/login%2f",
                   "/a" * 600 + "/.." * 600 + "/login")


def test_login_bruteforce(h):
    """login-bruteforce.cfg with spoe-conf/ratelimit-penalty.conf and
    examples/rules-login.yaml, against a login that refuses every
    password: each spelling of /login is the login rule, and the fifth
    failure bans the address from all of them; a new API key for every
    attempt changes nothing; a victim's key sent by a guesser bans the
    guesser, not the victim."""
    backend = FailingBackend()
    h.backends.append(backend)  # stopped by the harness whatever happens
    agent, backend, hp = start(h, "login-bruteforce.cfg", "ratelimit-penalty.conf",
                               "rules-login.yaml", backend=backend)

    def attempt(path, source, key=None):
        return http_get(hp.port, path, headers={"X-Api-Key": key} if key else {},
                        source=source)

    def failed(r):
        return r.status == 401 and r.headers.get("RateLimit-Policy") == LOGIN_POLICY

    def banned(r):
        return (r.status == 403 and json.loads(r.body)["error"] == "banned" and
                890 <= int(r.headers["Retry-After"]) <= 900)

    def banned_soon(path, source, key=None):
        # The fifth failure's response event counts once it has gone by.
        wait_for(lambda: banned(attempt(path, source, key)), 3,
                 "%s banned from %s" % (source, path))

    # Every spelling is the login rule: five failures, then a ban.
    guesser = "127.0.1.1"
    answers = [attempt(path, guesser) for path in LOGIN_SPELLINGS]
    assert all(failed(r) for r in answers[:5]), answers[:5]
    assert all(failed(r) or banned(r) for r in answers[5:]), answers[5:]
    banned_soon("/x/../login", guesser)
    bad = [(p, r) for p in LOGIN_SPELLINGS for r in [attempt(p, guesser)] if not banned(r)]
    assert not bad, bad
    # The rest of the site stays open to the address.
    assert attempt("/", guesser).status == 200

    # A new key for every attempt: still the address.
    rotator = "127.0.1.2"
    for n in range(5):
        r = attempt("/login", rotator, key="guess-%d" % n)
        assert failed(r), (n, r)
    keys = iter(range(5, 1000))
    banned_soon("/login", rotator, key="guess-%d" % next(keys))

    # A victim's key, sent by a guesser: the guesser is banned.
    stranger, victim = "127.0.1.3", "127.0.1.4"
    for _ in range(5):
        assert failed(attempt("/login", stranger, key="victim-key"))
    banned_soon("/login", stranger, key="victim-key")
    r = attempt("/login", victim, key="victim-key")
    assert failed(r), r
    assert_log_clean(agent)


def test_concurrency_ids_are_haproxy_s(h):
    """concurrency.cfg with spoe-conf/ratelimit-concurrency.conf and
    examples/rules-concurrency.yaml (/api/export: one request of a client
    in flight): requests that share an id share one place, so the id is
    HAProxy's own; a client that sends the same X-Request-ID (and
    X-Unique-ID) with every request still gets one place, not all."""
    agent, backend, hp = start(h, "concurrency.cfg", "ratelimit-concurrency.conf",
                               "rules-concurrency.yaml")
    same = {"X-Request-ID": "one-id-for-all", "X-Unique-ID": "one-id-for-all"}
    out = []

    def get():
        r = http_get(hp.port, "/api/export/slow-700", headers=same, timeout=10)
        with backend.lock:
            out.append(r)

    threads = [threading.Thread(target=get) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(r.status for r in out) == [200, 429, 429], out
    assert all(b'"error":"concurrency"' in r.body for r in out if r.status == 429), out
    assert backend.most_inflight == 1, backend.most_inflight
    # The response gave its place back: the next request passes (polled
    # slowly: the endpoint takes 10 an hour).
    wait_for(lambda: http_get(hp.port, "/api/export", headers=same).status == 200, 3,
             "the place given back", interval=0.5)
    assert_log_clean(agent)


SPOE_FILES = sorted(glob.glob(os.path.join(SPOE_DIR, "*.conf"))) + [
    os.path.join(harness.ROOT, "tools", "demo", "spoe.conf")]
CFG_FILES = sorted(glob.glob(os.path.join(EXAMPLES, "*.cfg"))) + [
    os.path.join(harness.ROOT, "tools", "demo", "haproxy.cfg")]
VERIFIED_KEY_RE = re.compile(r'req\.hdr\(x-api-key\),set-var\(txn\.rl_key\),map\([^,()]+\),'
                             r'concat\(\|,txn\.rl_key\),field\(2,\|,0\)')


def message_args(path, message="check-rate"):
    """The arguments of a spoe-message, name -> expression, its `args`
    lines split as HAProxy splits them (quotes removed)."""
    args = {}
    inside = False
    with open(path) as f:
        for line in f:
            if not line.startswith(" "):
                inside = line.split() == ["spoe-message", message]
            elif inside and line.split()[:1] == ["args"]:
                for word in shlex.split(line)[1:]:
                    name, _, expr = word.partition("=")
                    assert name not in args, (path, name)
                    args[name] = expr
    assert args, "%s: no spoe-message %s" % (path, message)
    return args


def test_shipped_files_name_clients_by_what_they_cannot_choose():
    """Every shipped SPOE file and haproxy.cfg: the address goes as an IPv6
    client's /64; an API key only once a map has found it; a user only
    from a claim HAProxy verified; the path as spelt (the agent
    normalises it: HAProxy needs no regular expression, nor a rule to
    refuse what one could not resolve); a request's unique-id made by
    HAProxy, never from the request."""
    for path in SPOE_FILES:
        args = message_args(path)
        name = os.path.relpath(path, harness.ROOT)
        assert args.get("ip") == "src,ipmask(32,64)", (name, args.get("ip"))
        assert args.get("path") == "path", (name, args.get("path"))
        with open(path) as f:
            assert "rl_path" not in f.read(), name
        if "api_key" in args:
            assert VERIFIED_KEY_RE.fullmatch(args["api_key"]), (name, args["api_key"])
        if "user" in args:
            assert args["user"] == "var(txn.jwt_sub)", (name, args["user"])
        # Headers as they come only where the client gains nothing: the
        # host it asks for, test traffic (shed first).
        for arg, expr in args.items():
            if arg not in ("host", "test") and "req.hdr(" in expr and "map(" not in expr:
                raise AssertionError("%s: %s=%s is a header the client chooses"
                                     % (name, arg, expr))
    for path in CFG_FILES:
        name = os.path.relpath(path, harness.ROOT)
        with open(path) as f:
            text = f.read()
        assert "rl_path" not in text and "regsub" not in text, name
        for line in text.splitlines():
            if line.split()[:1] == ["unique-id-format"]:
                assert line.split()[1:] == ["%[uuid()]"], (name, line)


def test_shipped_spoe_files_log_only_failed_messages():
    """Every shipped SPOE agent section sets option dontlog-normal: HAProxy
    otherwise logs a line for each message answered, which costs it CPU
    on every request (docs/integration.md)."""
    for path in SPOE_FILES:
        with open(path) as f:
            sections = re.split(r"(?m)^(?=spoe-\w+ )", f.read())
        agents = [s for s in sections if s.startswith("spoe-agent ")]
        assert agents, path
        for sec in agents:
            opts = [l.split() for l in sec.splitlines()]
            assert ["option", "dontlog-normal"] in opts, \
                (os.path.relpath(path, harness.ROOT), sec.splitlines()[0])
