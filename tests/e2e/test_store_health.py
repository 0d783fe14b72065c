# SPDX-License-Identifier: Apache-2.0
"""A Redis store an operator can see: spoa_rl_redis_up{node} following the
server, failures counted by kind (spoa_rl_redis_errors_total{node,kind}),
the cause of a misconfiguration in one log line, logged once; a server of
the wrong kind (a Cluster node for --redis, a standalone one for
--redis-cluster) refused; GET /readyz; spoa_rl_redis_eviction_risk; and a
password file changed before a reload used by the next connections."""

import os
import signal

import harness
from harness import http_get, series, wait_for
from redis_helper import RedisServer
from test_redis import Spop, degraded, ok, start_agent

PASSWORD = "correct horse battery"


def metrics_port():
    return harness.free_port()


def answers(mport):
    try:
        return http_get(mport, "/healthz").status == 200
    except OSError:
        return False


def readyz(mport, method="GET"):
    return http_get(mport, "/readyz", method=method)


def secret(h, name, text):
    path = os.path.join(h.dir, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def error_lines(agent, text):
    return [x for x in agent.log().splitlines() if text in x and "error: " in x]


def test_readyz_with_the_memory_store(h):
    mport = metrics_port()
    a = h.agent("--limit", "10/1m", "--metrics", "127.0.0.1:%d" % mport)
    wait_for(lambda: answers(mport), 5, "the metrics listener")
    r = readyz(mport)
    assert (r.status, r.text) == (200, "ready\n"), r
    head = readyz(mport, "HEAD")
    assert head.status == 200 and head.body == b"", head
    assert http_get(mport, "/healthz").status == 200
    # no Redis, no Redis series
    assert "spoa_rl_redis_up" not in http_get(mport, "/metrics").text
    assert a.alive()


@harness.serial
def test_redis_up_and_readyz_follow_the_server(h):
    redis = RedisServer(h)
    mport = metrics_port()
    a = start_agent(h, redis, "--limit", "10/1m", "--metrics", "127.0.0.1:%d" % mport)
    node = redis.addr
    wait_for(lambda: series(mport, "spoa_rl_redis_up", node=node) == 1, 5, "redis_up 1")
    assert readyz(mport).status == 200
    assert series(mport, "spoa_rl_redis_errors_total", node=node, kind="connect") == 0
    redis.stop()
    wait_for(lambda: series(mport, "spoa_rl_redis_up", node=node) == 0, 10, "redis_up 0")
    r = readyz(mport)
    assert r.status == 503 and node in r.text and "no connection" in r.text, r
    assert readyz(mport, "HEAD").status == 503
    wait_for(lambda: series(mport, "spoa_rl_redis_errors_total", node=node,
                            kind="connect") > 0, 10, "connect errors counted")
    # liveness is not readiness
    assert http_get(mport, "/healthz").status == 200
    redis.restart()
    wait_for(lambda: series(mport, "spoa_rl_redis_up", node=node) == 1, 10, "redis_up 1 again")
    assert readyz(mport).status == 200
    assert Spop(a.port).ask("back") == ok(10, 60, 9, 6, 6)


@harness.serial
def test_a_missing_password_said_once_and_counted(h):
    redis = RedisServer(h, extra=["--requirepass", PASSWORD], password=PASSWORD)
    mport = metrics_port()
    a = start_agent(h, redis, "--limit", "10/1m", "--metrics", "127.0.0.1:%d" % mport,
                    ready=False)
    node = redis.addr
    # several connections tried and refused...
    wait_for(lambda: (series(mport, "spoa_rl_redis_errors_total", node=node, kind="auth")
                      or 0) >= 3, 10, "auth errors counted at each reconnection")
    # ...and the cause said once, in one line that names the cure
    lines = error_lines(a, "(NOAUTH)")
    assert len(lines) == 1, a.log()
    assert ("Redis at %s requires a password (NOAUTH): set --redis-password-file" % node
            in lines[0]), lines
    assert "unauthenticated bulk length" not in a.log(), a.log()
    assert series(mport, "spoa_rl_redis_up", node=node) == 0
    r = readyz(mport)
    assert r.status == 503 and "authentication failed" in r.text, r
    assert Spop(a.port).ask("noauth") == degraded(10, 60)
    assert redis.rl_keys() == []


def cluster_node(h):
    """A single Redis Cluster node serving every slot: enough to look like
    one."""
    redis = RedisServer(h, extra=["--cluster-enabled", "yes", "--cluster-config-file",
                                  os.path.join(h.dir, "nodes.conf")], name="cluster-node")
    redis.command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
    return redis


@harness.serial
def test_redis_at_a_cluster_node_is_refused(h):
    redis = cluster_node(h)
    mport = metrics_port()
    a = start_agent(h, redis, "--limit", "3/1m", "--metrics", "127.0.0.1:%d" % mport,
                    ready=False)
    node = redis.addr
    wait_for(lambda: (series(mport, "spoa_rl_redis_errors_total", node=node,
                              kind="cluster_mismatch") or 0) >= 2, 10,
             "the mismatch counted at each connection")
    lines = error_lines(a, "is a Cluster node")
    assert len(lines) == 1 and "use --redis-cluster" in lines[0], a.log()
    assert "ready" not in " ".join(x for x in a.log().splitlines() if "worker" in x)
    r = readyz(mport)
    assert r.status == 503 and "use --redis-cluster" in r.text, r
    # no decision goes through it: the failure policy answers, 5 of 5
    s = Spop(a.port)
    for _ in range(5):
        assert s.ask("cluster") == degraded(3, 60)
    assert redis.command("DBSIZE") == 0


@harness.serial
def test_redis_cluster_at_a_standalone_server_is_refused(h):
    redis = RedisServer(h)
    mport = metrics_port()
    a = h.agent("--threads", "1", "--redis-cluster", redis.addr, "--hash-key-file",
                h.hash_key_file(), "--answer", "full", "--limit", "3/1m",
                "--metrics", "127.0.0.1:%d" % mport)
    node = redis.addr
    wait_for(lambda: (series(mport, "spoa_rl_redis_errors_total", node=node,
                              kind="cluster_mismatch") or 0) >= 2, 10,
             "the mismatch counted at each question")
    lines = error_lines(a, "is not a Cluster node")
    assert len(lines) == 1 and "use --redis" in lines[0], a.log()
    r = readyz(mport)
    assert r.status == 503 and "not a Cluster node: use --redis" in r.text, r
    v = Spop(a.port).ask("standalone")
    assert v == degraded(3, 60), v
    assert redis.rl_keys() == []


def test_eviction_risk(h):
    risky = RedisServer(h, extra=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"],
                        name="risky")
    volatile = RedisServer(h, extra=["--maxmemory", "64mb", "--maxmemory-policy",
                                     "volatile-lru"], name="volatile")
    safe = RedisServer(h, extra=["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"],
                       name="safe")
    ports = [metrics_port() for _ in range(4)]

    def agent(redis, port, *args, name):
        return start_agent(h, redis, "--limit", "10/1m", "--metrics", "127.0.0.1:%d" % port,
                           *args, name=name)

    # keys with an expiry on an allkeys policy, or on a volatile one: warned
    a = agent(risky, ports[0], "--redis-expiry", "always", name="agent-always")
    b = agent(volatile, ports[1], name="agent-volatile")
    # keys without an expiry, which count on the eviction: said at info level
    c = agent(risky, ports[2], name="agent-auto")
    d = agent(safe, ports[3], name="agent-safe")
    for x, redis, port, level in ((a, risky, ports[0], "warning"),
                                  (b, volatile, ports[1], "warning"),
                                  (c, risky, ports[2], "info")):
        assert series(port, "spoa_rl_redis_eviction_risk", node=redis.addr) == 1, x.log()
        lines = [y for y in x.log().splitlines() if "can evict the limiter's keys" in y]
        assert len(lines) == 1 and ("%s: " % level) in lines[0], (x.name, lines)
    assert series(ports[3], "spoa_rl_redis_eviction_risk", node=safe.addr) == 0
    assert "can evict" not in d.log()


@harness.serial
def test_a_new_password_file_is_used_after_a_reload(h):
    redis = RedisServer(h, extra=["--requirepass", PASSWORD], password=PASSWORD)
    pw = secret(h, "pw", PASSWORD + "\n")
    mport = metrics_port()
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write('limits: ["10/1m"]\nanswer: full\n')
    a = start_agent(h, redis, "-f", path, "--redis-password-file", pw,
                    "--metrics", "127.0.0.1:%d" % mport)
    node = redis.addr
    s = Spop(a.port)
    assert s.ask("pw") == ok(10, 60, 9, 6, 6)
    # the server's password changes, then the file, then the agent reloads
    redis.command("CONFIG", "SET", "requirepass", "the new one")
    redis.password = "the new one"
    redis.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    wait_for(lambda: (series(mport, "spoa_rl_redis_errors_total", node=node, kind="auth")
                      or 0) >= 1, 10, "the old password refused")
    secret(h, "pw", "the new one\n")
    a.signal(signal.SIGHUP)
    wait_for(lambda: "reloaded " in a.log(), 10, "the reload")
    wait_for(lambda: series(mport, "spoa_rl_redis_up", node=node) == 1, 10,
             "connected again with the new password")
    assert readyz(mport).status == 200
    v = Spop(a.port).ask("pw")
    assert (v["status"], v["remaining"], v["degraded"]) == (0, 8, False), v
    assert "answers decisions again" in a.log(), a.log()
