# SPDX-License-Identifier: Apache-2.0
"""Traffic for the store topology tests: many clients' check-rate NOTIFYs
sent to one or more agents over raw SPOP, with every answer kept.

- burst(): each client's requests, pipelined over a few connections spread
  over the agents, all at once; returns the answers by client.
- Steady: clients asked in turn, one request in flight per connection, in
  background threads, until stopped (bounded by a duration): every answer
  with the time it came back, so a test can tell when answers were
  degraded and when they were exact again.
"""

import collections
import threading
import time

import spop
from spop import ACK, Conn


def _send_all(port, keys, timeout):
    """One connection: every (key) of keys as a NOTIFY, pipelined; returns
    [(key, vars)] in the order of keys."""
    with Conn(port, timeout=timeout) as c:
        c.handshake()
        c.send(b"".join(spop.check_rate(sid, 1, api_key=k)
                        for sid, k in enumerate(keys, start=1)))
        got = {}
        for _ in keys:
            f = c.expect(ACK, timeout=timeout)
            assert f.fid == 1 and 1 <= f.sid <= len(keys) and f.sid not in got, f
            got[f.sid] = spop.as_read(f.vars())
    return [(k, got[sid]) for sid, k in enumerate(keys, start=1)]


def burst(ports, keys, per_key, conns=8, timeout=15.0):
    """per_key requests of every client in keys, over `conns` connections
    spread over the agents at `ports`, all sent at once. Returns
    {key: [vars, ...]}."""
    plan = [k for _ in range(per_key) for k in keys]
    shares = [plan[i::conns] for i in range(conns)]
    out = collections.defaultdict(list)
    errors, lock = [], threading.Lock()
    barrier = threading.Barrier(conns)

    def run(i):
        try:
            barrier.wait(timeout=timeout)
            got = _send_all(ports[i % len(ports)], shares[i], timeout)
            with lock:
                for k, v in got:
                    out[k].append(v)
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 2)
    assert not any(t.is_alive() for t in threads), "connections still waiting"
    assert not errors, errors[:3]
    return out


def counts(answers):
    """{key: (allowed by the store, refused, degraded)} of burst()'s answers."""
    out = {}
    for k, vs in answers.items():
        allowed = sum(1 for v in vs if v["status"] == 0 and not v["degraded"])
        refused = sum(1 for v in vs if v["status"] == 429)
        degraded = sum(1 for v in vs if v["degraded"])
        out[k] = (allowed, refused, degraded)
    return out


class Steady:
    """Clients asked in turn by `conns` connections (one request in flight
    each, spread over the agents) until stop() or `duration` seconds.
    answers: [(monotonic time of the answer, key, vars)]; latencies: the
    seconds each took, in the same order."""

    def __init__(self, ports, keys, conns=4, duration=60.0, pause=0.0, timeout=5.0):
        self.answers = []
        self.latencies = []
        self.errors = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._deadline = time.monotonic() + duration
        self._threads = [threading.Thread(
            target=self._run, args=(ports[i % len(ports)], keys[i::conns], pause, timeout),
            daemon=True) for i in range(conns)]
        for t in self._threads:
            t.start()

    def _run(self, port, keys, pause, timeout):
        sid = 0
        try:
            with Conn(port, timeout=timeout) as c:
                c.handshake()
                while not self._stop.is_set() and time.monotonic() < self._deadline:
                    for k in keys:
                        if self._stop.is_set():
                            break
                        sid += 1
                        t0 = time.monotonic()
                        c.send(spop.check_rate(sid, 1, api_key=k))
                        f = c.expect(ACK, timeout=timeout)
                        assert (f.sid, f.fid) == (sid, 1), f
                        t1 = time.monotonic()
                        with self._lock:
                            self.answers.append((t1, k, spop.as_read(f.vars())))
                            self.latencies.append(t1 - t0)
                        if pause:
                            time.sleep(pause)
        except Exception as e:  # noqa: BLE001 - reported by stop()
            with self._lock:
                self.errors.append(repr(e))

    def count(self):
        with self._lock:
            return len(self.answers)

    def stop(self):
        """Stops the clients; returns the answers (asserting none failed)."""
        self._stop.set()
        for t in self._threads:
            t.join(30)
        assert not any(t.is_alive() for t in self._threads), "clients still running"
        assert not self.errors, self.errors[:3]
        return list(self.answers)


def last_degraded(answers):
    """The time of the last degraded answer, or None."""
    ts = [t for t, _, v in answers if v["degraded"]]
    return max(ts) if ts else None


def allowed_by_key(answers):
    """{key: answers allowed by the store (status 0, not degraded)}."""
    out = collections.Counter()
    for _, k, v in answers:
        if v["status"] == 0 and not v["degraded"]:
            out[k] += 1
    return out


def wait_recovered(steady, window, min_answers, timeout, what):
    """Waits until the answers of the last `window` seconds are at least
    min_answers, none degraded."""
    from harness import wait_for

    def recovered():
        now = time.monotonic()
        with steady._lock:
            recent = [v for t, _, v in steady.answers if t > now - window]
        return len(recent) > min_answers and not any(v["degraded"] for v in recent)
    wait_for(recovered, timeout, what)
