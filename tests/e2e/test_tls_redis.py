# SPDX-License-Identifier: Apache-2.0
"""The agent to Redis over TLS (--redis-tls*, store.tls), against Debian's
redis-server and redis-sentinel built with TLS, on certificates the tests
make with `openssl` (tests/e2e/tls_certs.py):

- exact decisions over TLS from two agents: a standalone server asking for
  client certificates, Sentinel (sentinels and servers on TLS, or plain
  sentinels with store.sentinel_tls: false), a Cluster (tls-cluster yes,
  made with redis-cli --tls --cluster create), shards;
- each handshake failure (a CA not trusted, a wrong name, an expired
  certificate, a server without TLS, no client certificate) logs the
  server's address and OpenSSL's reason, and decisions go to the failure
  policy;
- certificate and key files that cannot be used stop the start and fail
  --check, naming the file; --redis-tls-no-verify is warned about;
- a client certificate renewed and taken by a reload (SIGHUP) under traffic:
  the server then trusts only the new one's CA, and the agent's new
  connections present it;
- a TLS Cluster master killed under load; its slots resharded under load
  (MOVED) and a slot caught mid-migration (ASK), exact.
"""

import json
import os
import re
import signal
import subprocess

import fleet
import harness
from harness import http_get, wait_for
from redis_helper import RedisServer
from redis_topology import Cluster, Sentinel, Shards
from tls_certs import Certs

# Agent log lines that mean trouble in a run where Redis stays healthy.
BAD_LOG_RE = re.compile(r"\d\dZ (error|warning): |Sanitizer|runtime error")


def fixture_certs():
    return Certs()


# (a topology's certificates are its own: topology.tls)
def fixture_tls_sentinel():
    return Sentinel(sentinels=3, tls=Certs())


def fixture_plain_sentinels():
    return Sentinel(sentinels=3, tls=Certs(), tls_sentinels=False)


def fixture_tls_cluster():
    return Cluster(masters=3, replicas_per_master=1, tls=Certs())


def fixture_tls_shards():
    return Shards(3, tls=Certs())


def run(*args):
    return subprocess.run([os.path.join(harness.BUILD, "spoa-ratelimit")] + list(args),
                          capture_output=True, text=True, timeout=30)


def ready_workers(a):
    return len(set(re.findall(r"redis: worker (\d+) ready", a.log())))


READY_RE = re.compile(r"redis: worker \d+ ready")
# a Cluster's nodes are connected to as decisions need them
MAPPED_RE = re.compile(r"cluster: worker \d+: 3 masters serve 16384 of 16384 slots")


def start(h, topology, *args, threads=2, name=None, ready=True, nodes=1, ready_re=READY_RE):
    """An agent on `topology` (the options naming the servers), with
    `args`; with ready, once ready_re is logged by every worker for each
    of `nodes`."""
    full = () if ("-f" in args or "--rules" in args) else ("--answer", "full")
    a = h.agent("--threads", str(threads), *topology, "--hash-key-file", h.hash_key_file(),
                "--redis-timeout", "1000", *full, *args, name=name)
    if ready:
        wait_for(lambda: len(ready_re.findall(a.log())) >= threads * nodes or not a.alive(),
                 15, "%s's workers to be ready" % a.name)
        assert a.alive(), a.log()
    return a


def keys(n, tag):
    return ["%s-%03d" % (tag, i) for i in range(n)]


def assert_exact(agents, tag, n=50, quota=4, per_key=6):
    got = fleet.counts(fleet.burst([a.port for a in agents], keys(n, tag), per_key=per_key))
    wrong = {k: c for k, c in got.items() if c != (quota, per_key - quota, 0)}
    assert not wrong, sorted(wrong.items())[:5]


def assert_log_clean(a):
    bad = [line for line in a.log().splitlines() if BAD_LOG_RE.search(line)]
    assert not bad, "%s log has: %r" % (a.name, bad[:5])


# ---------------------------------------------------------------- standalone


def test_exact_over_tls_with_a_client_certificate(h, certs):
    redis = RedisServer(h, tls=certs, extra=["--tls-auth-clients", "yes"])
    agents = [start(h, ("--redis", redis.addr), "--limit", "4/1h",
                    *certs.agent_args(client_cert=True), name="agent%d" % i) for i in (1, 2)]
    assert_exact(agents, "t")
    assert len(redis.rl_keys()) == 50
    # the agents' connections are TLS ones: the server has no plain port
    assert redis.command("CONFIG", "GET", "port")[1] == b"0"
    for a in agents:
        assert_log_clean(a)


def test_leases_and_drain_over_tls(h, certs):
    """--lease over TLS: the leases grow with the client's demand, the
    answers count down as Redis's would, and at SIGTERM the unspent
    tokens go back to the server before the agent exits (rl8_return over
    the TLS connection)."""
    from test_lease import leased_25, Client

    redis = RedisServer(h, tls=certs)
    a = start(h, ("--redis", redis.addr), "--limit", "1000/1h", "--lease", "1s",
              *certs.agent_args(), threads=1)
    got = leased_25(a.port)
    assert [v["remaining"] for v in got] == list(range(999, 974, -1)), got
    assert h.stop(a) == 0
    plain = start(h, ("--redis", redis.addr), "--limit", "1000/1h", *certs.agent_args(),
                  threads=1, name="after")
    c = Client(plain.port)
    assert c.ask()["remaining"] in (974, 975)
    c.close()
    for x in (a, plain):
        assert_log_clean(x)


def test_localhost_verified_by_name_and_the_system_store_refuses_a_private_ca(h, certs):
    redis = RedisServer(h, tls=certs)
    a = start(h, ("--redis", "localhost:%d" % redis.port), "--limit", "4/1h",
              *certs.agent_args(), threads=1)
    assert_exact([a], "n", n=10)
    # --redis-tls alone: the system's store, which does not hold the test CA
    b = start(h, ("--redis", redis.addr), "--redis-tls", "--limit", "4/1h", threads=1,
              ready=False, name="system-store")
    wait_for(lambda: "TLS: certificate verify failed" in b.log(), 10, "the refusal")
    assert "self-signed certificate in certificate chain" in b.log(), b.log()


def failure_case(h, redis, agent_args, reason, name):
    """An agent whose handshakes with `redis` fail: the worker's log line
    names the address and `reason`; decisions follow the failure policy
    (open by default: allowed, degraded)."""
    addr = agent_args[agent_args.index("--redis") + 1]
    a = start(h, agent_args, "--limit", "2/1h", threads=1, ready=False, name=name)
    line_re = re.compile(r"redis: worker 0:? (cannot connect to |lost its connection to )?%s: "
                         r"TLS: .*%s" % (re.escape(addr), re.escape(reason)))
    wait_for(lambda: line_re.search(a.log()) or not a.alive(), 10,
             "%s: the worker's line with the address and '%s'" % (name, reason))
    assert a.alive(), a.log()
    got = fleet.counts(fleet.burst([a.port], keys(3, name), per_key=4))
    assert all(c == (0, 0, 4) for c in got.values()), got
    assert redis.rl_keys() == []
    assert "ready" not in a.log(), a.log()
    h.stop(a)
    return a


def test_each_handshake_failure_is_logged_with_its_reason(h, certs):
    good = RedisServer(h, tls=certs, name="good")
    failure_case(h, good, ["--redis", good.addr, "--redis-tls-ca", certs.wrong_ca],
                 # (Redis sends its CA with its certificate)
                 "certificate verify failed: self-signed certificate in certificate chain",
                 "unknown-ca")
    failure_case(h, good, ["--redis", "localhost:%d" % good.port, "--redis-tls-ca", certs.ca,
                           "--redis-tls-server-name", "other.example"],
                 "hostname mismatch (other.example)", "wrong-name")
    # an IP address is verified as one: 127.0.0.2 is not on the certificate
    failure_case(h, good, ["--redis", good.addr, "--redis-tls-ca", certs.ca,
                           "--redis-tls-server-name", "127.0.0.2"],
                 "IP address mismatch (127.0.0.2)", "wrong-ip")
    expired = RedisServer(h, tls=certs, name="expired",
                          extra=["--tls-cert-file", certs.expired,
                                 "--tls-key-file", certs.expired_key])
    failure_case(h, expired, ["--redis", expired.addr, "--redis-tls-ca", certs.ca],
                 "certificate has expired", "expired")
    plain = RedisServer(h, name="plain")
    # (Redis takes the ClientHello for an inline command without its end)
    failure_case(h, plain, ["--redis", plain.addr, "--redis-tls-ca", certs.ca],
                 "no answer to the handshake within 1 s (a server without TLS?)", "no-tls")
    strict = RedisServer(h, tls=certs, name="strict", extra=["--tls-auth-clients", "yes"])
    failure_case(h, strict, ["--redis", strict.addr, "--redis-tls-ca", certs.ca],
                 "certificate required", "no-client-cert")


def test_no_verify_is_warned_about_and_accepts_any_certificate(h, certs):
    expired = RedisServer(h, tls=certs, extra=["--tls-cert-file", certs.expired,
                                               "--tls-key-file", certs.expired_key])
    a = start(h, ("--redis", expired.addr), "--redis-tls-no-verify", "--limit", "4/1h",
              threads=1)
    assert "--redis-tls-no-verify: the Redis servers are not verified" in a.log(), a.log()
    assert_exact([a], "v", n=5)


def test_unusable_files_stop_the_start_and_fail_check(h, certs):
    missing = os.path.join(h.dir, "missing.pem")
    cases = [
        (["--redis-tls-ca", missing], "Redis TLS CA file %s: No such file" % missing),
        (["--redis-tls-cert", certs.client, "--redis-tls-key", missing],
         "Redis TLS key file %s: No such file" % missing),
        (["--redis-tls-cert", missing, "--redis-tls-key", certs.client_key],
         "Redis TLS certificate file %s: No such file" % missing),
        (["--redis-tls-cert", certs.client, "--redis-tls-key", certs.server_key],
         "Redis TLS key file %s: does not match the certificate %s"
         % (certs.server_key, certs.client)),
        (["--redis-tls-cert", certs.client], "a client certificate needs its key too"),
        (["--redis-tls-ca", certs.client_key], "Redis TLS CA file %s: " % certs.client_key),
    ]
    for args, why in cases:
        r = run("--redis", "127.0.0.1:1", *args, "--check", "-q")
        assert r.returncode == 1 and why in r.stderr and r.stdout == "", (args, r)
        r = run("--redis", "127.0.0.1:1", *args)
        assert r.returncode == 2 and why in r.stderr, (args, r)
    path = os.path.join(h.dir, "bad.yaml")
    with open(path, "w") as f:
        f.write('store:\n  type: redis\n  address: "127.0.0.1:1"\n'
                '  tls: { ca: "%s" }\n' % missing)
    r = run("-f", path, "--check")
    assert r.returncode == 1 and "Redis TLS CA file %s" % missing in r.stderr, r
    r = run("--redis", "127.0.0.1:1", *certs.agent_args(client_cert=True), "--check", "-q")
    assert r.returncode == 0, r


def test_rules_file_tls(h, certs):
    redis = RedisServer(h, tls=certs, extra=["--tls-auth-clients", "yes"])
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write('store:\n  type: redis\n  address: "localhost:%d"\n'
                '  tls: { ca: "%s", cert: "%s", key: "%s", server_name: localhost }\n'
                '  hash_key_file: "%s"\nanswer: full\nlimits: ["4/1h"]\n'
                % (redis.port, certs.ca, certs.client, certs.client_key, h.hash_key_file()))
    a = start(h, (), "-f", path, threads=1)
    assert_exact([a], "r", n=10)


def test_renewed_client_certificate_taken_at_reload_under_traffic(h, certs):
    # The server trusts both CAs at first; the agent presents a certificate
    # of the first.
    both = os.path.join(h.dir, "both-cas.crt")
    with open(both, "w") as out:
        for p in (certs.ca, certs.wrong_ca):
            with open(p) as f:
                out.write(f.read())
    redis = RedisServer(h, tls=certs, extra=["--tls-auth-clients", "yes",
                                             "--tls-ca-cert-file", both])
    cert, key = os.path.join(h.dir, "agent.crt"), os.path.join(h.dir, "agent.key")
    certs.copy_client(cert, key)
    a = start(h, ("--redis", redis.addr), "--limit", "100000/1h", "--redis-tls-ca", certs.ca,
              "--redis-tls-cert", cert, "--redis-tls-key", key, threads=2)
    steady = fleet.Steady([a.port], keys(20, "rot"), conns=4, duration=60)
    try:
        wait_for(lambda: steady.count() > 50, 10, "traffic")
        # renewed by another CA, in place; the server then trusts that CA only
        certs.issue_client(cert, key, ca="wrong")
        a.signal(signal.SIGHUP)
        wait_for(lambda: "read again" in a.log() or "reload failed" in a.log(), 10, "the reload")
        assert "reload failed" not in a.log(), a.log()
        readies = len(re.findall(r"redis: worker \d+ ready", a.log()))
        with redis.client() as c:  # (whose certificate the server will refuse)
            c.command("CONFIG", "SET", "tls-ca-cert-file", certs.wrong_ca)
            c.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        # new connections: the renewed certificate, which only the new CA
        # signed, else the server would refuse them
        wait_for(lambda: len(re.findall(r"redis: worker \d+ ready", a.log())) >= readies + 2,
                 15, "the workers to connect again")
        n = steady.count()
        wait_for(lambda: steady.count() > n + 50, 10, "traffic after the reconnection")
    finally:
        answers = steady.stop()
    late = [v for (_, _, v) in answers[n:]]
    assert late and not any(v["degraded"] for v in late), late[:3]
    assert "certificate" not in "".join(
        line for line in a.log().splitlines() if "cannot connect" in line), a.log()


def test_reconnections_resume_their_tls_session(h, certs):
    """A connection made again to the same server resumes the TLS session of
    the one before (no key exchange, no certificate check; the server asks
    for client certificates here); a reload forgets the sessions, so the
    first handshake after it is a full one, with the files read again."""
    redis = RedisServer(h, tls=certs, extra=["--tls-auth-clients", "yes"])
    mport = harness.free_port()
    a = start(h, ("--redis", redis.addr), "--limit", "4/1h", "--metrics",
              "127.0.0.1:%d" % mport, *certs.agent_args(client_cert=True), threads=1)
    assert_exact([a], "s1", n=10)
    # (the connections of a start may resume the first one's session)
    full = unlabelled(mport, "spoa_rl_redis_tls_handshakes_total")
    first = unlabelled(mport, "spoa_rl_redis_tls_resumed_total")
    assert full >= 1 and first < full, (full, first)

    def reconnect():
        readies = len(READY_RE.findall(a.log()))
        with redis.client() as c:
            c.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        wait_for(lambda: len(READY_RE.findall(a.log())) > readies, 15, "the worker to reconnect")
        return (unlabelled(mport, "spoa_rl_redis_tls_handshakes_total"),
                unlabelled(mport, "spoa_rl_redis_tls_resumed_total"))

    handshakes, resumed = reconnect()
    assert handshakes > full and resumed > first, (full, first, handshakes, resumed)
    assert_exact([a], "s2", n=10)
    a.signal(signal.SIGHUP)
    wait_for(lambda: "read again" in a.log() or "reload failed" in a.log(), 10, "the reload")
    assert "reload failed" not in a.log(), a.log()
    handshakes2, resumed2 = reconnect()
    # at least one full handshake: the first after the reload had no session
    assert resumed2 - resumed < handshakes2 - handshakes, (handshakes, resumed, handshakes2,
                                                          resumed2)
    assert_exact([a], "s3", n=10)


def test_admin_and_overrides_over_tls(h, certs):
    """The admin's look and reset, and an override set through one agent
    and polled by another: their own connections are TLS ones too."""
    from test_override import Spop, admin, rules_file

    redis = RedisServer(h, tls=certs, extra=["--tls-auth-clients", "yes"])
    args = ("--rules", rules_file(h), "--redis", redis.addr, "--hash-key-file",
            h.hash_key_file(), *certs.agent_args(client_cert=True))
    mport = harness.free_port()
    a = h.agent("--metrics", "127.0.0.1:%d" % mport, "--admin", *args)
    a.mport = mport
    b = h.agent(*args, name="agent-b")
    wait_for(lambda: "ready" in a.log() and "ready" in b.log(), 10, "both agents' workers")
    sb = Spop(b.port)
    assert sb.ask("f1")["limit"] == 3
    st, body = admin(a, "PUT", "api_key=f1&limit=8/1h")
    assert st == 200 and body["store"] == "redis", body
    wait_for(lambda: sb.ask("f1")["limit"] == 8, 3, "agent b to apply the override")
    look = json.loads(http_get(a.mport, "/admin/client?api_key=f1").body)
    assert look["rules"][0]["fields"], look
    r = http_get(a.mport, "/admin/reset?api_key=f1", method="POST")
    assert r.status == 200 and json.loads(r.body)["rules"][0]["deleted"] == 1, r.body
    sb.close()
    for x in (a, b):
        assert_log_clean(x)


# ---------------------------------------------------------------- topologies


def test_sentinel_over_tls(h, tls_sentinel):
    certs = tls_sentinel.tls
    tls_sentinel.reset()
    agents = [start(h, ("--redis-sentinel", tls_sentinel.sentinel_addrs(), "--redis-master",
                        tls_sentinel.master_name), "--limit", "4/1h", *certs.agent_args(),
                    name="agent%d" % i) for i in (1, 2)]
    assert_exact(agents, "s")
    with tls_sentinel.client() as c:
        assert len(c.command("KEYS", "{????}????????")) == 50
    for a in agents:
        assert_log_clean(a)


def test_sentinel_failover_over_tls(h, tls_sentinel):
    s = tls_sentinel
    s.reset()
    a = start(h, ("--redis-sentinel", s.sentinel_addrs(), "--redis-master", s.master_name),
              "--limit", "100000/1h", "--redis-timeout", "200", *s.tls.agent_args())
    old = s.master_port()
    steady = fleet.Steady([a.port], keys(20, "f"), conns=4, duration=60)
    try:
        wait_for(lambda: steady.count() > 200, 20, "traffic to flow")
        s.kill_master()
        new_port, _ = s.wait_failover()
        assert new_port != old
        fleet.wait_recovered(steady, 0.5, 20, 30, "decisions from the new master")
    finally:
        steady.stop()
    # decided by the new master, reached over TLS: its keys
    with s.client(new_port) as c:
        assert len(c.command("KEYS", "{????}????????")) == 20


def test_sentinel_tls_false_reaches_plain_sentinels(h, plain_sentinels):
    # the sentinels listen plain only, the servers TLS only
    s = plain_sentinels
    s.reset()
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write('store:\n  type: sentinel\n  sentinels: [%s]\n  master: %s\n'
                '  tls: { ca: "%s" }\n  sentinel_tls: false\n  hash_key_file: "%s"\n'
                'answer: full\nlimits: ["4/1h"]\n'
                % (", ".join('"%s"' % x for x in s.sentinel_addrs().split(",")),
                   s.master_name, s.tls.ca, h.hash_key_file()))
    a = start(h, (), "-f", path)
    assert_exact([a], "p", n=20)
    assert_log_clean(a)


def test_cluster_over_tls(h, tls_cluster):
    certs = tls_cluster.tls
    tls_cluster.reset()
    agents = [start(h, ("--redis-cluster", tls_cluster.seeds()), "--limit", "4/1h",
                    *certs.agent_args(client_cert=True), name="agent%d" % i,
                    ready_re=MAPPED_RE) for i in (1, 2)]
    assert_exact(agents, "c", n=100)
    held = [len(v) for v in tls_cluster.keys_by_master().values()]
    assert sum(held) == 100 and len(held) == 3 and min(held) > 0, held


def test_shards_over_tls(h, tls_shards):
    certs = tls_shards.tls
    tls_shards.reset()
    agents = [start(h, ("--redis-shards", tls_shards.addrs()), "--limit", "4/1h",
                    *certs.agent_args(), name="agent%d" % i, nodes=3) for i in (1, 2)]
    assert_exact(agents, "h", n=60)
    assert sum(len(s.rl_keys()) for s in tls_shards.servers) == 60


def test_tls_cluster_master_killed(h, tls_cluster):
    certs = tls_cluster.tls
    tls_cluster.reset()
    a = start(h, ("--redis-cluster", tls_cluster.seeds()), "--limit", "100000/1h",
              "--redis-timeout", "200", *certs.agent_args(), ready_re=MAPPED_RE)
    steady = fleet.Steady([a.port], keys(30, "k"), conns=4, duration=90)
    try:
        wait_for(lambda: steady.count() > 100, 10, "traffic")
        victim = tls_cluster.masters()[0].port
        tls_cluster.kill_master(victim)
        tls_cluster.wait_promoted(victim)
        fleet.wait_recovered(steady, 1.0, 50, 30, "decisions not degraded again")
    finally:
        steady.stop()
    # fresh clients, on every master: exact over TLS again
    got = fleet.counts(fleet.burst([a.port], keys(30, "after"), per_key=3))
    assert all(c == (3, 0, 0) for c in got.values()), got


def unlabelled(mport, name):
    m = re.search(r"^%s (\d+)$" % name, http_get(mport, "/metrics").text, re.M)
    return int(m.group(1)) if m else -1


def test_tls_cluster_reshard_under_load_and_asking(h, tls_cluster):
    """Over TLS as in plaintext (test_cluster): slots resharded under load
    there and back, the decisions follow them (MOVED, or the slot map read
    again) with no client over its limit; then a client's slot in the middle of a migration is decided on
    the importing master after ASKING, exactly."""
    certs = tls_cluster.tls
    tls_cluster.reset()
    mport = harness.free_port()
    a = start(h, ("--redis-cluster", tls_cluster.seeds()), "--limit", "20/1h",
              "--metrics", "127.0.0.1:%d" % mport, "--admin", *certs.agent_args(),
              ready_re=MAPPED_RE)
    masters = tls_cluster.masters()
    steady = fleet.Steady([a.port], keys(100, "r"), conns=4, duration=60)
    try:
        wait_for(lambda: steady.count() > 500, 20, "traffic to flow")
        tls_cluster.reshard(masters[0].port, masters[1].port, 2000, background=True).wait(60)
        tls_cluster.reshard(masters[1].port, masters[0].port, 2000, background=True).wait(60)
        n = steady.count()
        wait_for(lambda: steady.count() > n + 500, 20, "traffic after the reshard")
    finally:
        answers = steady.stop()
    over = {k: c for k, c in fleet.allowed_by_key(answers).items() if c > 20}
    assert not over, "clients over their limit: %s" % sorted(over.items())[:5]
    degraded = sum(1 for _, _, v in answers if v["degraded"])
    assert degraded < 0.05 * len(answers), (degraded, len(answers))

    # a slot IMPORTING on one master, MIGRATING on another
    (key,) = json.loads(http_get(mport, "/admin/client?api_key=moving").text)["rules"][0][
        "keys"].values()
    with tls_cluster.migrating(key) as (_, _, dst):
        got = fleet.burst([a.port], ["moving"], per_key=22, conns=1)["moving"]
        assert [(v["status"], v["degraded"]) for v in got] == \
            [(0, False)] * 20 + [(429, False)] * 2, got
        assert unlabelled(mport, "spoa_rl_redis_asking_total") >= 20
        with tls_cluster.client(dst) as c:
            c.command("ASKING")
            assert c.command("EXISTS", key) == 1
    assert_log_clean(a)
