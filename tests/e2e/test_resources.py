# SPDX-License-Identifier: Apache-2.0
"""The agent's own resources under clients that misbehave or are merely
small: answers that must fit a small negotiated max-frame-size, peers that
never read what the agent writes, the operations listener held open by
half-sent requests. Each must cost the agent a bounded amount and leave
other clients served.
"""

import os
import re
import selectors
import shutil
import socket
import threading
import time

import harness
import spop
from harness import http_get, wait_for
from spop import ACK, Conn

LONG = "r" * 31  # the longest rule name

# Sixteen limits of a long-named rule: its RateLimit-Policy takes some
# 700 bytes, far over the 256 HAProxy may announce as its max-frame-size.
BIG_POLICY_RULES = "answer: full\ntiers:\n  argument: tier\n  default: %s\n  %s:\n    limits: [%s]\n" % (
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


def open_half_heads(port, n, seconds=3.0):
    """n connections to 127.0.0.1:port, each sent the start of a request
    head and nothing more, as far as the listener takes them within
    `seconds`. Returns every socket (the caller closes them)."""
    socks = []
    sel = selectors.DefaultSelector()
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
        sel.register(s, selectors.EVENT_WRITE)
    left = n
    deadline = time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        for key, _ in sel.select(0.1):
            sel.unregister(key.fileobj)
            left -= 1
            try:
                key.fileobj.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass
    sel.close()
    return socks


class HalfHeads:
    """Clients that keep opening connections to the operations port and
    send each the start of a request head, never the end: `first` at
    once, then more every 50 ms, until stop()."""

    def __init__(self, port, first=600, more=20, most=3000):
        self.port = port
        self.socks = open_half_heads(port, first)
        self.more = more
        self.most = most
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping.wait(0.05) and len(self.socks) < self.most:
            self.socks += open_half_heads(self.port, self.more, seconds=0.05)

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()


def descriptors(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def test_operations_port_leaves_descriptors_for_spop(h):
    """With 512 descriptors, clients that keep connecting to the operations
    port and never finish a request hold at most a sixteenth of them (32
    connections): new SPOP connections are all served meanwhile, and
    /metrics answers again once those clients have gone."""
    if not shutil.which("prlimit"):
        raise harness.Skip("prlimit is not installed")
    mport = harness.free_port()
    a = h.agent("--metrics", "127.0.0.1:%d" % mport, "--threads", "1",
                prefix=("prlimit", "--nofile=512:512", "--"))
    base = descriptors(a.pid)
    attack = HalfHeads(mport)
    try:
        wait_for(lambda: descriptors(a.pid) - base >= 30, 5,
                 "the operations port to hold 30 connections (%d held, base %d)"
                 % (descriptors(a.pid) - base, base))
        served = held = 0
        errors = []
        for i in range(20):
            try:
                with Conn(a.port, timeout=2.0) as c:
                    c.handshake()
                    v = c.check_rate(1, 1, api_key="k%d" % i)
                    served += v["status"] == 0
            except (OSError, AssertionError, spop.ProtocolError) as e:
                errors.append(repr(e))
            held = max(held, descriptors(a.pid) - base)
        assert served == 20, (served, held, errors)
        assert held <= 32 + 1, held
        assert "http: 32 connections open, the most there may be" in a.log()
    finally:
        attack.stop()
    wait_for(lambda: metric_or_none(mport, "spoa_rl_hellos_total") == 20, 15,
             "/metrics to answer again")


def metric_or_none(port, name):
    try:
        return metric(port, name)
    except OSError:
        return None


class Flood:
    """SPOP peers that complete the handshake, then send check-rate NOTIFYs
    as fast as the agent takes them and never read an answer."""

    def __init__(self, port, n):
        self.blob = b"".join(spop.check_rate(1 + i, 1, api_key="flood%d" % (i % 50))
                             for i in range(400))
        self.socks = []
        for _ in range(n):
            c = Conn(port, timeout=5)
            c.handshake()
            c.sock.setblocking(False)
            self.socks.append(c.sock)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        sel = selectors.DefaultSelector()
        left = {}
        for s in self.socks:
            sel.register(s, selectors.EVENT_WRITE)
        while not self.stopping.is_set() and sel.get_map():
            for key, _ in sel.select(0.05):
                s = key.fileobj
                data = left.get(s) or self.blob
                try:
                    n = s.send(data)
                    left[s] = data[n:]  # whole frames: the rest goes next
                except BlockingIOError:
                    pass
                except OSError:
                    sel.unregister(s)  # closed by the agent
        sel.close()

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()


def test_a_new_agent_takes_memory_as_its_store_fills(h):
    """The memory store's 1,000,000 clients (the default) take memory as
    they come, not at start: a new agent is small and starts at once (it
    wrote 72 MB of free lists before it listened, a quarter of a second);
    a client's decision takes an entry all the same."""
    a = h.agent("--limit", "10/1m", "--threads", "2")
    # a sanitizer's shadow memory alone takes about 90 MB
    assert harness.rss_kb(a.pid) < (300 if harness.sanitized_build() else 32) * 1024, \
        harness.rss_kb(a.pid)
    c = Conn(a.port, timeout=5)
    c.handshake()
    for sid in range(1, 12):
        v = c.check_rate(sid, 1, api_key="first")
        assert v["status"] == (0 if sid <= 10 else 429), (sid, v)
    c.close()


def test_peers_that_never_read_are_bounded_then_closed(h):
    """700 peers send NOTIFYs and never read: each holds at most 48 KiB of
    answers beyond its first 16 KiB, and all of them together at most
    32 MiB (the agent stops reading them); all are closed within seconds
    of their last write, and a client that reads is answered throughout."""
    n = 700
    mport = harness.free_port()
    a = h.agent("--metrics", "127.0.0.1:%d" % mport, "--threads", "2",
                "--limit", "1000000000/1h")
    normal = Conn(a.port, timeout=5)
    normal.handshake()
    flood = Flood(a.port, n)
    try:
        grown = 0
        sid = 0
        deadline = time.monotonic() + 20
        while metric(mport, "spoa_rl_connections") > 1:
            assert time.monotonic() < deadline, "peers that never read are still open"
            sid += 1
            v = normal.check_rate(sid, 1, api_key="reader")
            assert v["status"] == 0, v
            grown = max(grown, metric(mport, "spoa_rl_output_grown_bytes") or 0)
            time.sleep(0.05)
    finally:
        flood.stop()
    assert 0 < grown <= min(n * 48 * 1024, 32 * 1024 * 1024), grown
    # closed for reading nothing; or, on a machine too busy to let the
    # flood send a frame's end in time, for that
    stalls = metric(mport, "spoa_rl_write_stalls_total")
    m = re.search(r'^spoa_rl_disconnects_total\{status="2"\} (\d+)$',
                  http_get(mport, "/metrics").text, re.M)
    assert stalls > 0 and stalls + (int(m.group(1)) if m else 0) == n, (stalls, m)
    assert metric(mport, "spoa_rl_output_grown_bytes") == 0
    v = normal.check_rate(sid + 1, 1, api_key="reader")
    assert v["status"] == 0, v
    normal.close()
