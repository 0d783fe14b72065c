# SPDX-License-Identifier: Apache-2.0
"""Raw SPOP against the agent: bad frames, bad handshakes, abrupt closes.

Every bad case must end in the AGENT-DISCONNECT with the matching status and
a closed connection (FIN within 2 s), and must not disturb a healthy
connection opened before it, which still gets exact ACKs afterwards. Each
case runs as its own test against a fresh agent, and all of them run once
more, one after the other, against a single agent that must survive them.
"""

import itertools
import socket
import time

import spop
from spop import (ACK, AGENT_HELLO, FLAG_FIN, HAPROXY_DISCONNECT, HAPROXY_HELLO,
                  HEALTHCHECK_HELLO, NOTIFY, OMIT, Conn, frame)

LIMIT = "1000/1m"
_keys = itertools.count(1)


def fresh_vars(quota=1000, window=60, t=1):
    """What the agent answers to the first request of a client (the default
    answer, as HAProxy's rules read it): the next token (t) one token's time
    away."""
    return spop.as_read({
        "policy": '"default";q=%d;w=%d' % (quota, window),
        "ratelimit": '"default";r=%d;t=%d' % (quota - 1, t),
    })


def new_key():
    return "key-%d-%d" % (time.monotonic_ns(), next(_keys))


def assert_answers(port):
    """A new connection: handshake and one exact ACK."""
    with Conn(port) as c:
        c.handshake()
        v = c.check_rate(1, 1, api_key=new_key())
        assert v == fresh_vars(), v


class Healthy:
    """A connection that stays open across a bad case and must keep working."""

    def __init__(self, port):
        self.c = Conn(port)
        kv = self.c.handshake()
        assert kv["max-frame-size"] == 16380, kv
        self.n = 0
        self.check()

    def check(self):
        # Stream-ids as HAProxy 3.1+ makes them: odd, growing, frame-id 1.
        self.n += 1
        sid = 2 * self.n - 1
        v = self.c.check_rate(sid, 1, api_key=new_key())
        assert v == fresh_vars(), v

    def close(self):
        self.c.close()


def half_notify():
    f = spop.check_rate(7, 1, api_key="half")
    return f[:len(f) // 2]


def notify_of_length(length, sid=5, fid=1):
    """A check-rate NOTIFY whose LENGTH field is exactly `length`."""
    pad = length
    while True:
        f = spop.check_rate(sid, fid, api_key=new_key(), path="/" + "p" * pad)
        n = len(f) - 4
        if n == length:
            return f
        pad -= n - length


# ---- the cases: each takes the agent's port ----------------------------------

def case_frame_over_negotiated_size(port):
    with Conn(port) as c:
        kv = c.handshake(max_frame_size=4096)
        assert kv["max-frame-size"] == 4096, kv
        # A frame of exactly the negotiated size is fine.
        c.send(notify_of_length(4096, sid=3, fid=9))
        f = c.expect(ACK)
        assert (f.sid, f.fid) == (3, 9), f
        assert spop.as_read(f.vars()) == fresh_vars(), f.vars()
        # One byte more is refused from the length alone, before the body.
        c.send((4097).to_bytes(4, "big") + bytes([NOTIFY]) + b"\x00\x00\x00\x01\x05\x01")
        c.expect_disconnect(spop.ST_TOO_BIG)


def case_frame_over_own_size_before_hello(port):
    with Conn(port) as c:
        c.send((16385).to_bytes(4, "big") + bytes([HAPROXY_HELLO]) + b"\x00\x00\x00\x01\x00\x00")
        c.expect_disconnect(spop.ST_TOO_BIG)


def case_unknown_frame_type(port):
    with Conn(port) as c:
        c.handshake()
        c.send(frame(42, b"", sid=1, fid=1))
        c.expect_disconnect(spop.ST_INVALID)


def case_truncated_frame_then_close(port):
    c = Conn(port)
    c.handshake()
    c.send(half_notify())
    c.close()


def case_bad_version(port):
    with Conn(port) as c:
        c.send(spop.hello(versions="1.0"))
        c.expect_disconnect(spop.ST_BAD_VERSION)


def case_missing_supported_versions(port):
    with Conn(port) as c:
        c.send(spop.hello(versions=OMIT))
        c.expect_disconnect(spop.ST_NO_VERSION)


def case_missing_max_frame_size(port):
    with Conn(port) as c:
        c.send(spop.hello(max_frame_size=OMIT))
        c.expect_disconnect(spop.ST_NO_FRAME_SIZE)


def case_missing_capabilities(port):
    with Conn(port) as c:
        c.send(spop.hello(capabilities=OMIT))
        c.expect_disconnect(spop.ST_NO_CAPABILITIES)


def case_max_frame_size_too_small(port):
    with Conn(port) as c:
        c.send(spop.hello(max_frame_size=100))
        c.expect_disconnect(spop.ST_BAD_FRAME_SIZE)


def case_notify_before_hello(port):
    with Conn(port) as c:
        c.send(spop.check_rate(1, 1, api_key="early"))
        c.expect_disconnect(spop.ST_INVALID)


def case_frame_without_fin(port):
    with Conn(port) as c:
        c.handshake()
        c.send(spop.notify(1, 1, [("check-rate", spop.check_rate_args(api_key="x"))], flags=0))
        c.expect_disconnect(spop.ST_NO_FRAGMENTATION)


def case_garbage_http(port):
    # "GET " read as a length is far over any frame size.
    with Conn(port) as c:
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        c.expect_disconnect(spop.ST_TOO_BIG)


def case_garbage_hello_payload(port):
    # A HELLO whose first key claims 32 bytes and has 3.
    with Conn(port) as c:
        c.send(frame(HAPROXY_HELLO, b"\x20abc"))
        c.expect_disconnect(spop.ST_INVALID)


def case_varint_11_bytes(port):
    with Conn(port) as c:
        c.handshake()
        c.send(frame(NOTIFY, b"", raw_ids=bytes.fromhex("f0" + "ff" * 9 + "00") + b"\x01"))
        c.expect_disconnect(spop.ST_INVALID)


def case_healthcheck_hello(port):
    with Conn(port) as c:
        assert len(HEALTHCHECK_HELLO) == 82
        c.send(HEALTHCHECK_HELLO)
        f = c.expect(AGENT_HELLO)
        assert f.raw[1:5] == b"\x00\x00\x00\x01", f
        assert (f.sid, f.fid) == (0, 0), f
        kv = f.kv()
        assert "capabilities" in kv, kv
        assert kv.get("version") == "2.0", kv
        assert kv.get("max-frame-size") == 16380, kv
        c.expect_closed()


def case_haproxy_disconnect(port):
    with Conn(port) as c:
        c.handshake()
        c.send(frame(HAPROXY_DISCONNECT, spop.disconnect_payload(0, "stopping")))
        c.expect_disconnect(spop.ST_NORMAL)


def case_notify_without_messages(port):
    with Conn(port) as c:
        c.handshake()
        c.send(spop.notify(3, 4, []))
        f = c.expect(ACK)
        assert (f.sid, f.fid, f.flags) == (3, 4, FLAG_FIN), f
        assert f.actions() == [(spop.ACT_UNSET_VAR, "txn", "status", None)], f
        # The connection goes on.
        assert c.check_rate(5, 1, api_key=new_key()) == fresh_vars()


def case_notify_unknown_message(port):
    with Conn(port) as c:
        c.handshake()
        c.send(spop.notify(3, 4, [("check-something-else", [("ip", "x"), ("n", 7)])]))
        f = c.expect(ACK)
        assert (f.sid, f.fid, f.flags) == (3, 4, FLAG_FIN), f
        assert f.actions() == [(spop.ACT_UNSET_VAR, "txn", "status", None)], f
        assert c.check_rate(5, 1, api_key=new_key()) == fresh_vars()


def case_pipelined_notifies(port):
    with Conn(port) as c:
        c.handshake()
        want = {}
        data = bytearray()
        for i in range(20):
            sid, fid = 2 * i + 1, 100 + i
            want[(sid, fid)] = True
            data += spop.check_rate(sid, fid, api_key=new_key())
        c.send(bytes(data))  # one write
        got = {}
        for _ in range(20):
            f = c.expect(ACK)
            assert (f.sid, f.fid) not in got, "second ACK for %r" % (f,)
            got[(f.sid, f.fid)] = spop.as_read(f.vars())
        assert set(got) == set(want), sorted(got)
        for v in got.values():
            assert v == fresh_vars(), v


def case_negotiated_frame_size(port):
    for announced, expected in ((100000, 16384), (4096, 4096), (16380, 16380), (16384, 16384)):
        with Conn(port) as c:
            c.send(spop.hello(max_frame_size=announced))
            f = c.expect(AGENT_HELLO)
            assert f.flags == FLAG_FIN, f
            kv = f.kv()
            assert kv.get("max-frame-size") == expected, (announced, kv)


def case_capabilities(port):
    with Conn(port) as c:
        # HAProxy 2.6 offers async too; the answer is pipelining alone.
        kv = c.handshake(capabilities="pipelining,async")
        assert kv == {"version": "2.0", "max-frame-size": 16380,
                      "capabilities": "pipelining"}, kv


def case_rst_mid_frame(port):
    c = Conn(port)
    c.handshake()
    c.send(half_notify())
    time.sleep(0.05)
    c.reset()


def case_fin_mid_frame(port):
    with Conn(port) as c:
        c.handshake()
        c.send(half_notify())
        c.sock.shutdown(socket.SHUT_WR)
        # The frame can never complete: the agent closes, with or without
        # an AGENT-DISCONNECT first.
        f = c.recv_frame(timeout=2.0)
        if f is not None:
            assert f.type == spop.AGENT_DISCONNECT, f
            c.expect_closed()


def case_many_dropped_connections(port):
    t0 = time.monotonic()
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        kind = i % 4
        if kind == 1:
            s.sendall(spop.hello()[:9])
        elif kind == 2:
            s.sendall(spop.hello())
        if kind in (2, 3):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    assert time.monotonic() - t0 < 20


CASES = [(name[5:], fn) for name, fn in list(globals().items()) if name.startswith("case_")]


def run_case(port, fn, healthy):
    healthy.check()
    fn(port)
    healthy.check()
    assert_answers(port)


def _make_test(fn):
    def test(h):
        agent = h.agent("--threads", "2", "--limit", LIMIT)
        healthy = Healthy(agent.port)
        try:
            run_case(agent.port, fn, healthy)
        finally:
            healthy.close()
        assert agent.alive(), "agent exited with %s" % agent.popen.poll()
    return test


for _name, _fn in CASES:
    globals()["test_" + _name] = _make_test(_fn)


def test_spop_codec_vectors():
    spop.self_test()


def test_all_cases_against_one_agent(h):
    agent = h.agent("--threads", "2", "--limit", LIMIT)
    healthy = Healthy(agent.port)
    try:
        for name, fn in CASES:
            try:
                run_case(agent.port, fn, healthy)
            except Exception as e:
                raise AssertionError("case %s: %s" % (name, e)) from e
            assert agent.alive(), "agent died in case %s" % name
    finally:
        healthy.close()
    assert_answers(agent.port)
    rc = h.stop(agent)
    assert rc == 0, "agent exited with %s on SIGTERM" % rc
