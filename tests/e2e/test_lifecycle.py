# SPDX-License-Identifier: Apache-2.0
"""A connection's life in the agent beyond single frames: idle ones closed
(--idle-timeout), frames begun and never finished cut off (--hello-timeout),
busy ones and ones owed an answer left alone; a flood of bad connections
logged in tens of lines, not one line each; SIGTERM answering every NOTIFY
read (decisions waiting for Redis too, within the grace time), then
AGENT-DISCONNECT on every connection and exit 0.

Timeouts here are short (1 s) so that the tests are quick; the bounds
checked are the guarantees (never closed before the timeout, closed within
a few seconds after it), never tighter.
"""

import re
import signal
import socket
import time

import spop
from harness import free_port, http_get, wait_for
from redis_helper import RedisServer
from spop import ACK, Conn

STOP_GRACE = 3.0  # SERVER_STOP_GRACE

GARBAGE = b"GET / HTTP/1.1\r\n\r\n"  # its first 4 bytes, as a length, are too big

SUMMARY_RE = re.compile(r'Z (\w+): (\d+) more like "(.*)" in the last \d+ s$')


def closed_after(port, data):
    """Connects, sends data, reads until the agent closes. Returns whether
    anything came back before the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        if data:
            s.sendall(data)
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return bool(got)
            got += chunk


def logged(log, pattern):
    """How many lines matched pattern: those written, plus the counts of
    the reports of lines held back that quote a line matching it."""
    n = 0
    for line in log.splitlines():
        m = SUMMARY_RE.search(line)
        if m:
            if re.search(pattern, m.group(3)):
                n += int(m.group(2))
        elif re.search(pattern, line):
            n += 1
    return n


def open_connections(mport):
    m = re.search(r"^spoa_rl_connections (\d+)$", http_get(mport, "/metrics").text, re.M)
    return int(m.group(1))


def test_bad_connections_log_tens_of_lines(h):
    mport = free_port()
    # One worker, so that connections held open fill it for sure.
    agent = h.agent("--threads", "1", "--max-conns", "4", "--metrics", "127.0.0.1:%d" % mport)
    # 1000 protocol errors, one after the other: each is answered with an
    # AGENT-DISCONNECT (too big) and closed.
    results = [closed_after(agent.port, GARBAGE) for _ in range(1000)]
    wait_for(lambda: open_connections(mport) == 0, 10, "the agent to close them all")
    # 1000 connections refused: the worker is full.
    held = [Conn(agent.port) for _ in range(4)]
    try:
        for c in held:
            c.handshake()
        results += [closed_after(agent.port, b"") for _ in range(1000)]
    finally:
        for c in held:
            c.close()
    # A connection answered got its DISCONNECT; one refused, nothing.
    answered = sum(results)
    refused = len(results) - answered
    assert answered > 900 and refused > 900, (answered, refused)
    assert h.stop(agent) == 0
    log = agent.log()
    lines = log.splitlines()
    assert len(lines) < 100, "%d log lines for 2000 bad connections:\n%s" % (
        len(lines), "\n".join(lines[:20]))
    # Nothing is lost: what was held back is counted in the reports.
    assert logged(log, r"disconnect, status 3 \(") == answered, log
    assert logged(log, r"connections, refusing another") == refused, log


# ---- idle connections, frames begun and not finished ------------------------------

def seconds_to_timeout(agent, data=b""):
    """After the handshake, sends data and then nothing; returns how long the
    agent took to send AGENT-DISCONNECT (timeout) and close."""
    with Conn(agent.port) as c:
        c.handshake()
        c.send(data)
        t0 = time.monotonic()
        c.expect_disconnect(spop.ST_TIMEOUT, timeout=10)
        return time.monotonic() - t0


def test_idle_connection_closed(h):
    agent = h.agent("--idle-timeout", "1s")
    waited = seconds_to_timeout(agent)
    assert waited >= 0.9, "closed after %.2f s, before the idle timeout" % waited
    assert "idle for" in agent.log()


def test_half_frame_cut_off(h):
    # The idle timeout is far away: only the frame's deadline can close it.
    agent = h.agent("--hello-timeout", "1s", "--idle-timeout", "1m")
    waited = seconds_to_timeout(agent, spop.check_rate(1, 1, api_key="slow")[:20])
    assert waited >= 0.9, "closed after %.2f s, before the frame's deadline" % waited
    assert "still incomplete" in agent.log()


def test_active_connection_stays_open(h):
    agent = h.agent("--idle-timeout", "1s", "--hello-timeout", "1s")
    with Conn(agent.port) as c:
        c.handshake()
        # 3 s of traffic, a request every 0.3 s: three idle timeouts long,
        # never idle for one. Each frame arrives in two pieces 0.1 s
        # apart, which restarts no deadline.
        for i in range(10):
            f = spop.check_rate(2 * i + 1, 1, api_key="busy")
            c.send(f[:15])
            time.sleep(0.1)
            c.send(f[15:])
            assert spop.as_read(c.expect(ACK).vars())["status"] == 0
            time.sleep(0.2)
        # and once quiet, it is idle like any other
        c.expect_disconnect(spop.ST_TIMEOUT, timeout=10)


def redis_agent(h, timeout, *args):
    """Redis and one agent (one worker) on it whose decisions wait up to
    `timeout` for Redis; returns both once the agent has loaded its script."""
    redis = RedisServer(h)
    agent = h.agent("--threads", "1", "--redis", redis.addr, "--redis-timeout", timeout,
                    "--answer", "full", *args)
    wait_for(lambda: "redis: worker 0 ready" in agent.log(), 5, "the agent to load its script")
    return redis, agent


def test_connection_owed_an_answer_is_not_idle(h):
    redis, agent = redis_agent(h, "10000", "--idle-timeout", "1s")
    with Conn(agent.port) as c:
        c.handshake()
        redis.pause()
        try:
            c.send(spop.check_rate(1, 1, api_key="owed"))
            time.sleep(2.0)  # twice the idle timeout, the answer still owed
        finally:
            redis.resume()
        f = c.expect(ACK, timeout=10)
        v = spop.as_read(f.vars())
        assert (v["status"], v["degraded"]) == (0, False), v


# ---- SIGTERM --------------------------------------------------------------------------

def pipeline(c, n, key):
    """Sends n check-rate NOTIFYs in one write; returns their (sid, fid)."""
    ids = [(2 * i + 1, 1) for i in range(n)]
    c.send(b"".join(spop.check_rate(sid, fid, api_key="%s-%d" % (key, sid)) for sid, fid in ids))
    return ids


def expect_acks_then_disconnect(c, ids, timeout=10):
    """Every ACK of ids, in any order, then AGENT-DISCONNECT (normal) and
    the close. Returns the ACKs' variables."""
    got = {}
    for _ in ids:
        f = c.expect(ACK, timeout=timeout)
        assert (f.sid, f.fid) in ids and (f.sid, f.fid) not in got, f
        got[(f.sid, f.fid)] = spop.as_read(f.vars())
    c.expect_disconnect(spop.ST_NORMAL, timeout=timeout)
    return list(got.values())


def test_sigterm_answers_then_disconnects(h):
    agent = h.agent("--threads", "2")
    conns = [Conn(agent.port) for _ in range(4)]
    waiting = Conn(agent.port)  # no HELLO yet
    try:
        sent = []
        for i, c in enumerate(conns):
            c.handshake()
            sent.append(pipeline(c, 20, "term%d" % i))
        agent.signal(signal.SIGTERM)
        for c, ids in zip(conns, sent):
            for v in expect_acks_then_disconnect(c, ids):
                assert (v["status"], v["degraded"]) == (0, False), v
            c.close()
        waiting.expect_disconnect(spop.ST_NORMAL, timeout=10)
        waiting.close()
        t0 = time.monotonic()
        rc = agent.popen.wait(timeout=STOP_GRACE + 10)
        took = time.monotonic() - t0
    finally:
        for c in conns + [waiting]:
            c.close()
    assert rc == 0, rc
    assert took < STOP_GRACE + 5, took


def sigterm_while_redis_paused(h, redis_timeout, pause_after_signal=None):
    """Pipelines 10 NOTIFYs to an agent whose Redis is paused, sends SIGTERM,
    and resumes Redis pause_after_signal seconds later (None: once the agent
    has exited). Returns the ACKs' variables, which come before the
    agent's AGENT-DISCONNECT, its exit code, and the seconds from SIGTERM
    to its exit."""
    redis, agent = redis_agent(h, redis_timeout)
    with Conn(agent.port) as c:
        c.handshake()
        redis.pause()
        try:
            ids = pipeline(c, 10, "term")
            time.sleep(0.2)  # the decisions wait for Redis
            agent.signal(signal.SIGTERM)
            t0 = time.monotonic()
            if pause_after_signal is not None:
                time.sleep(pause_after_signal)
                redis.resume()
            answers = expect_acks_then_disconnect(c, ids, timeout=STOP_GRACE + 10)
            c.close()  # as HAProxy does on a DISCONNECT
            rc = agent.popen.wait(timeout=STOP_GRACE + 10)
            return answers, rc, time.monotonic() - t0
        finally:
            redis.resume()


def test_sigterm_waits_for_redis(h):
    # Redis back well within the grace time: it decides every one.
    answers, rc, _ = sigterm_while_redis_paused(h, "10000", 0.5)
    for v in answers:
        assert (v["status"], v["degraded"], v["remaining"]) == (0, False, 99), v
    assert rc == 0, rc


def test_sigterm_grace_is_bounded(h):
    # Redis never answers: at the end of the grace time the rule's failure
    # policy (open) does, then the DISCONNECT.
    answers, rc, took = sigterm_while_redis_paused(h, "60000")
    for v in answers:
        assert (v["status"], v["degraded"]) == (0, True), v
    assert rc == 0, rc
    assert took < STOP_GRACE + 5, took
