#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a Redis failover costs the agent in exactness, measured.

    python3 bench/failover.py --build build [--topology cluster|sentinel|both]
        [--reps 3] [--rate 2000] [--clients 64] [--before 4] [--after 6]
        [--control] [--no-full-coverage] [--output FILE] [--json FILE]

Each repetition builds the topology on loopback ports (tests/e2e/
redis_topology.py: a Redis Cluster of 3 masters with one replica each, or a
master, a replica and 3 sentinels), starts a fresh agent on it (`-t 1`, the
default `--redis-timeout` of 20 ms, one limit of LIMIT per client, which no
client comes near) and sends a steady load of check-rate requests from
`--clients` clients (api_key fo-0000, ...) at `--rate` requests/s over 4
SPOP connections. After `--before` seconds it SIGKILLs a master (cluster:
each repetition the next master by port; sentinel: the master), waits until
the replica is promoted, keeps the load up `--after` more seconds, then
stops and counts, per client whose key lived on the killed master:

  allowed   decisions the agent answered from Redis (not degraded), all
            status 0: the limit is never reached
  taken     what the bucket now shows as taken, on the promoted replica:
            from Redis (the bucket's theoretical arrival time, HGET + TIME)
            and, as a cross-check, from the lowest `remaining` the agent
            returned after the promotion (quota - remaining)
  lost      allowed - taken: decisions whose write died with the master
            (a token the client got that the bucket no longer counts)

and the times, from the SIGKILL: the first and last degraded answer (the
ACK's `degraded`: answered without Redis), the promotion (seen from the
Redis side by redis_topology), and "exact again": the first answer from
Redis after which no answer was degraded. After that point, every client's
`remaining` values must all differ (no token given twice).

--control runs the same repetitions without the kill (what degrades
anyway on this machine); --no-full-coverage sets cluster-require-full-
coverage no on every cluster node (by default a cluster with a failed
master refuses every command, on every master, until the promotion).

Every server runs on this machine: a SIGKILLed master has handed every
write it made to the kernel, which still delivers it to the replica over
loopback, so what is lost here is only what the master had not yet written
to the replica's socket. Across machines, add what the network held.

Nothing here runs in `make bench`. Every wait is bounded; each repetition
takes about 20 s, and the run stops by itself (--max-seconds). All traffic
stays on 127.0.0.1. Exit status: 0 when every repetition completed and
recovered, 1 otherwise, 2 on bad usage.
"""

import argparse
import json
import os
import re
import select
import shlex
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

# One token bucket per client that no client comes near in a run: quota Q
# over the longest period the agent takes, so a token comes back every
# 316 s and a run of a minute refills a fifth of one (the counts below are
# exact integers as long as that stays under 1).
QUOTA = 100000
PERIOD = "366d"
PERIOD_US = 366 * 86400 * 1000000
LIMIT = "%d/%s" % (QUOTA, PERIOD)
FIELD = "t%d/%d/0" % (QUOTA, PERIOD_US)
TOKEN_US = PERIOD_US // QUOTA

CONNS = 4
WINDOW = 32               # requests in flight per connection at most
PROMOTE_TIMEOUT = 30.0
DRAIN_S = 3.0

# ---- the SPOP client: tests/e2e/spop.py ------------------------------------------

from spop import (ACK, AGENT_DISCONNECT, AGENT_HELLO, NOTIFY,  # noqa: E402
                  ack_vars, check_rate_args, decode_varint, frame, hello)
from spop import notify_payload as spop_notify_payload  # noqa: E402


def notify_payload(client):
    """A check-rate message as HAProxy sends it, for client number `client`."""
    ip = "10.9.%d.%d" % (client >> 8 & 255, client & 255)
    return spop_notify_payload([("check-rate", check_rate_args(
        ip=ip, method="GET", path="/api/items", host="api.example.com",
        api_key=api_key(client), be_in_use=10, be_free=90))])


def api_key(client):
    return "fo-%04d" % client


class Loader(threading.Thread):
    """One SPOP connection sending at `rate` requests/s on a fixed timetable
    (at most WINDOW in flight; a stall drops the missed sends rather than
    bursting them out after), client j, j + n, j + 2n, ... of `clients`.
    Each answer is kept as (time received, client, status, degraded,
    remaining or None)."""

    def __init__(self, j, nconns, port, nclients, rate, payloads):
        super().__init__(daemon=True)
        self.j, self.nconns, self.port = j, nconns, port
        self.nclients, self.rate, self.payloads = nclients, rate, payloads
        self.records = []
        self.error = None
        self.unanswered = 0
        self.stop_at = None

    def stop(self):
        self.stop_at = time.monotonic()

    def run(self):
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            self.error = "%s: %s" % (type(e).__name__, e)

    def _frames(self, buf):
        while len(buf) >= 4:
            n = struct.unpack(">I", buf[:4])[0]
            if len(buf) < 4 + n:
                return
            body = bytes(buf[4:4 + n])
            del buf[:4 + n]
            sid, pos = decode_varint(body, 5)
            fid, pos = decode_varint(body, pos)
            yield body[0], sid, body[pos:]

    def _run(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        sock.sendall(hello())
        deadline = time.monotonic() + 5
        while True:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("closed before AGENT-HELLO")
            buf += data
            got = list(self._frames(buf))
            if got:
                if got[0][0] != AGENT_HELLO:
                    raise ConnectionError("frame %d instead of AGENT-HELLO" % got[0][0])
                break
            if time.monotonic() > deadline:
                raise TimeoutError("no AGENT-HELLO")
        sock.setblocking(False)
        inflight, sid, n = {}, 1, 0
        interval = 1.0 / self.rate
        next_t = time.monotonic()
        while True:
            now = time.monotonic()
            if self.stop_at is not None:
                if not inflight:
                    break
                if now > self.stop_at + DRAIN_S:
                    self.unanswered = len(inflight)
                    break
            out = []
            if self.stop_at is None:
                if next_t < now - 0.05:
                    next_t = now  # behind: no catch-up burst
                while len(inflight) < WINDOW and next_t <= now:
                    c = (n * self.nconns + self.j) % self.nclients
                    n += 1
                    out.append(frame(NOTIFY, self.payloads[c], sid=sid, fid=1))
                    inflight[sid] = c
                    sid += 2
                    next_t += interval
            if out:
                data = b"".join(out)
                while data:
                    try:
                        k = sock.send(data)
                        data = data[k:]
                    except BlockingIOError:
                        select.select([], [sock], [], 0.1)
            wait = 0.05 if self.stop_at is not None else max(0.0, min(next_t - time.monotonic(),
                                                                      0.05))
            r, _, _ = select.select([sock], [], [], wait)
            if not r:
                continue
            try:
                data = sock.recv(262144)
            except BlockingIOError:
                continue
            if not data:
                raise ConnectionError("the agent closed the connection")
            buf += data
            t = time.monotonic()
            for ftype, fsid, payload in self._frames(buf):
                if ftype == AGENT_DISCONNECT:
                    raise ConnectionError("AGENT-DISCONNECT")
                if ftype != ACK:
                    continue
                c = inflight.pop(fsid, None)
                if c is None:
                    raise ValueError("ACK for unknown stream %d" % fsid)
                v = ack_vars(payload)
                self.records.append((t, c, v.get("status"), bool(v.get("degraded")),
                                     v.get("remaining")))
        sock.close()


# ---- processes ----------------------------------------------------------------------

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agent:
    def __init__(self, binary, args, logdir):
        self.binary, self.args, self.logdir = binary, args, logdir
        self.proc = None

    def __enter__(self):
        for attempt in range(3):
            self.port, self.mport = free_port(), free_port()
            self.log_path = os.path.join(self.logdir, "agent-%d.log" % self.port)
            self.argv = [self.binary, "-l", "127.0.0.1:%d" % self.port] + self.args + [
                "--metrics", "127.0.0.1:%d" % self.mport, "--admin"]
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=log, cwd=ROOT)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                if "listening on" in self.log():
                    try:
                        self.metrics()
                        return self
                    except OSError:
                        pass
                time.sleep(0.05)
            self.stop()
            if "in use" not in self.log().lower() or attempt == 2:
                raise RuntimeError("agent did not start: %s\n%s"
                                   % (self.cmdline(), self.log()[-1500:]))
        raise RuntimeError("agent did not start")

    def cmdline(self):
        return " ".join(shlex.quote(x) for x in
                        [os.path.relpath(self.argv[0], ROOT)] + self.argv[1:])

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.mport, path),
                                    timeout=5) as r:
            return r.read().decode()

    def metrics(self):
        out = {}
        for line in self._get("/metrics").splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                k = k.split("{", 1)[0]
                out[k] = out.get(k, 0) + float(v)
        return out

    def key_of(self, client):
        """The client's Redis key, as the agent's admin endpoint names it.
        Until a worker has learned where the keys live (the slot map, the
        master) it answers 502: asked again for up to 5 s."""
        path = "/admin/client?" + urllib.parse.urlencode({"api_key": api_key(client)})
        deadline = time.monotonic() + 5
        while True:
            try:
                return json.loads(self._get(path))["rules"][0]["key"]
            except urllib.error.HTTPError as e:
                if e.code != 502 or time.monotonic() > deadline:
                    raise
                self.admin_502 = getattr(self, "admin_502", 0) + 1
                time.sleep(0.05)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode
        self.proc = None

    def __exit__(self, *exc):
        self.stop()
        return False


def bucket_taken(client_of_port, port, key):
    """Tokens taken from a client's bucket as the server on `port` holds it
    now: (theoretical arrival time - now) / token interval, rounded up."""
    with client_of_port(port) as c:
        tat, now = c.pipeline([("HGET", key, FIELD), ("TIME",)])
    if tat is None:
        return 0
    now_us = int(now[0]) * 1000000 + int(now[1])
    ahead = int(tat) - now_us
    return max(0, -(-ahead // TOKEN_US))


# ---- one repetition ---------------------------------------------------------------

class Topo:
    """What a repetition needs of a topology, cluster or sentinel."""

    def __init__(self, kind, rep, full_coverage=True):
        import redis_topology  # noqa: E402  (tests/e2e)
        self.kind = kind
        self.full_coverage = full_coverage
        t0 = time.monotonic()
        if kind == "cluster":
            self.t = redis_topology.Cluster(masters=3, replicas_per_master=1)
            if not full_coverage:
                # the masters that are up keep serving their slots while
                # some slot has no master
                for port in list(self.t.nodes):
                    self.t.command(port, "CONFIG", "SET", "cluster-require-full-coverage", "no")
            masters = sorted(m.port for m in self.t.masters())
            self.victim = masters[rep % len(masters)]
        else:
            self.t = redis_topology.Sentinel(sentinels=3)
            self.victim = self.t.master_port()
        self.setup_s = time.monotonic() - t0

    def agent_args(self):
        if self.kind == "cluster":
            return ["--redis-cluster", self.t.seeds()]
        return ["--redis-sentinel", self.t.sentinel_addrs(), "--redis-master",
                self.t.master_name]

    def describe(self):
        if self.kind == "cluster":
            ms = self.t.masters()
            return "%d masters %s, replicas %s%s" % (
                len(ms), [m.port for m in ms],
                {r.port: self.t.port_of(r.master_id) for r in self.t.replicas()},
                "" if self.full_coverage else ", cluster-require-full-coverage no")
        return "master %d, replica %s, sentinels %s" % (
            self.t.master_port(), self.t.replica_ports(), self.t.sentinel_ports())

    def on_victim(self, key):
        if self.kind == "cluster":
            return self.t.node_for_key(key) == self.victim
        return True

    def kill(self):
        if self.kind == "cluster":
            self.t.kill_master(self.victim)
        else:
            self.t.kill_master()

    def wait_promoted(self):
        """(new master's port, seconds since the kill)."""
        if self.kind == "cluster":
            return self.t.wait_promoted(self.victim, timeout=PROMOTE_TIMEOUT)
        return self.t.wait_failover(timeout=PROMOTE_TIMEOUT)

    def master_of(self, key):
        if self.kind == "cluster":
            return self.t.node_for_key(key)
        return self.t.master_port()

    def client(self, port):
        if self.kind == "cluster":
            return self.t.client(port)
        return self.t.server(port).client()

    def close(self):
        self.t.close()
        self.t.remove()


def one_rep(a, kind, rep, logdir):
    out = {"kind": kind, "rep": rep + 1, "problems": [], "control": a.control}
    topo = Topo(kind, rep, full_coverage=not a.no_full_coverage)
    try:
        out["topology"] = topo.describe()
        out["victim"] = topo.victim
        out["setup_s"] = topo.setup_s
        args = ["-t", "1", "--limit", LIMIT] + topo.agent_args()
        with Agent(a.agent_bin, args, logdir) as ag:
            out["agent_cmd"] = ag.cmdline()
            keys = {c: ag.key_of(c) for c in range(a.clients)}
            out["admin_502"] = getattr(ag, "admin_502", 0)
            affected = {c for c, k in keys.items() if topo.on_victim(k)}
            out["clients"], out["affected"] = a.clients, len(affected)
            payloads = [notify_payload(c) for c in range(a.clients)]
            m0 = ag.metrics()
            log0 = len(ag.log())
            loaders = [Loader(j, CONNS, ag.port, a.clients, a.rate / CONNS, payloads)
                       for j in range(CONNS)]
            for ld in loaders:
                ld.start()
            try:
                time.sleep(a.before)
                t_kill = time.monotonic()
                if a.control:
                    # the same run without the kill: what degrades anyway
                    out["promote_s"] = None
                    time.sleep(a.after + 3)
                else:
                    topo.kill()
                    try:
                        new, promote_s = topo.wait_promoted()
                        out["new_master"], out["promote_s"] = new, promote_s
                    except AssertionError as e:
                        out["problems"].append("no promotion: %s" % str(e)[:300])
                        out["promote_s"] = None
                    time.sleep(a.after)
            finally:
                for ld in loaders:
                    ld.stop()
                for ld in loaders:
                    ld.join(DRAIN_S + 5)
            m1 = ag.metrics()
            out["agent_log"] = [l for l in ag.log()[log0:].splitlines()
                                if " info: " not in l or "redis" in l]
            for ld in loaders:
                if ld.error:
                    out["problems"].append("connection %d: %s" % (ld.j, ld.error))
                if ld.unanswered:
                    out["problems"].append("connection %d: %d requests unanswered"
                                           % (ld.j, ld.unanswered))
            recs = sorted(r for ld in loaders for r in ld.records)
            # the bucket on the server that holds the key now
            taken = {}
            for c in affected:
                try:
                    taken[c] = bucket_taken(topo.client, topo.master_of(keys[c]), keys[c])
                except Exception as e:  # noqa: BLE001
                    out["problems"].append("bucket of %s: %r" % (api_key(c), e))
            analyse(out, recs, t_kill, affected, taken, m0, m1)
        out["agent_exit"] = ag.exit_code
        if ag.exit_code != 0:
            out["problems"].append("agent exit status on SIGTERM: %s" % ag.exit_code)
    finally:
        topo.close()
    return out


EPISODE_GAP_S = 0.5


def episodes(deg, rel, affected):
    """Degraded answers grouped into episodes (a gap of EPISODE_GAP_S with
    none ends one): [start s, end s, count, of them the killed master's
    clients]."""
    out = []
    for r in deg:
        t = rel(r[0])
        if out and t - out[-1][1] < EPISODE_GAP_S:
            e = out[-1]
            e[1] = t
        else:
            e = [t, t, 0, 0]
            out.append(e)
        e[2] += 1
        if r[1] in affected:
            e[3] += 1
    return out


def analyse(out, recs, t_kill, affected, taken, m0, m1):
    """The figures of one repetition from its answers (time, client,
    status, degraded, remaining), t_kill (None: no kill), the clients on the
    killed master and their buckets after."""
    rel = lambda t: t - t_kill
    out["answers"] = len(recs)
    before = [r for r in recs if r[0] < t_kill]
    out["rate"] = len(before) / (before[-1][0] - before[0][0]) if len(before) > 1 else None
    statuses = {}
    for r in recs:
        statuses[r[2]] = statuses.get(r[2], 0) + 1
    out["statuses"] = statuses
    deg = [r for r in recs if r[3]]
    out["degraded"] = len(deg)
    out["degraded_affected"] = sum(1 for r in deg if r[1] in affected)
    out["degraded_other"] = len(deg) - out["degraded_affected"]
    eps = episodes(deg, rel, affected)
    out["episodes"] = [[round(e[0], 3), round(e[1], 3), e[2], e[3]] for e in eps]
    # The failover's episode: the first that ends after the kill. Others
    # (before the kill, or after it ended) are reported apart.
    fo = next((e for e in eps if e[1] >= 0), None)
    out["failover_episode"] = out["episodes"][eps.index(fo)] if fo else None
    out["other_episodes"] = [e for e in out["episodes"] if e != out["failover_episode"]]
    if fo:
        out["first_degraded_s"], out["last_degraded_s"] = fo[0], fo[1]
        out["degraded_in_failover"] = fo[2]
        others = [rel(r[0]) for r in deg if r[1] not in affected and fo[0] <= rel(r[0]) <= fo[1]]
        out["others_degraded"] = len(others)
        out["others_degraded_s"] = (others[0], others[-1]) if others else None
    # exact again: the first answer from Redis for a client of the killed
    # master after the failover's episode
    end = t_kill + (fo[1] if fo else 0)
    first = next((r for r in recs if r[0] > end and not r[3] and r[1] in affected), None)
    out["exact_s"] = rel(first[0]) if first else None
    # the killed master's clients: decisions allowed from Redis vs the
    # bucket after; the agent's own view (quota - the lowest remaining it
    # sent after the episode) must agree with Redis's
    allowed = {c: 0 for c in affected}
    low_after, seen, dup_after = {}, {}, 0
    for t, c, status, degraded, remaining in recs:
        if c not in affected or degraded:
            continue
        if status == 0:
            allowed[c] += 1
        if t > end and remaining is not None:
            low_after[c] = min(low_after.get(c, QUOTA), remaining)
            got = seen.setdefault(c, set())
            if remaining in got:
                dup_after += 1
            got.add(remaining)
    lost = {c: allowed[c] - taken[c] for c in taken}
    out["allowed_affected"] = sum(allowed.values())
    out["taken_affected"] = sum(taken.values())
    out["lost"] = sum(v for v in lost.values() if v > 0)
    out["extra"] = -sum(v for v in lost.values() if v < 0)
    out["clients_with_loss"] = sum(1 for v in lost.values() if v > 0)
    out["lost_max_client"] = max(lost.values()) if lost else 0
    out["ack_vs_redis"] = sum(1 for c in low_after
                              if c in taken and QUOTA - low_after[c] != taken[c])
    out["dup_after"] = dup_after
    # what happened when, in steps of 0.25 s from the kill (negative:
    # before): [start s, answers, degraded for the killed master's
    # clients, degraded for the others]
    steps = {}
    for t, c, status, degraded, remaining in recs:
        e = steps.setdefault(int(rel(t) // 0.25), [0, 0, 0])
        e[0] += 1
        if degraded:
            e[1 if c in affected else 2] += 1
    out["timeline"] = [[k * 0.25] + steps[k] for k in sorted(steps)]
    d = {k: m1.get(k, 0) - m0.get(k, 0) for k in m1}
    out["metrics"] = {k.replace("spoa_rl_", ""): int(v) for k, v in sorted(d.items())
                      if v and k.startswith("spoa_rl_") and "duration" not in k
                      and "_bucket" not in k}
    if affected and out["exact_s"] is None:
        out["problems"].append("no answer from Redis for the killed master's clients after "
                               "the failover's degraded answers")
    if dup_after:
        out["problems"].append("%d remaining values given twice after recovery" % dup_after)
    if out["ack_vs_redis"]:
        out["problems"].append("%d clients: the lowest remaining sent and the bucket in Redis "
                               "disagree" % out["ack_vs_redis"])


# ---- report ---------------------------------------------------------------------------

def spread(vals, fmt="%.2f"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    if len(vals) == 1:
        return fmt % vals[0]
    return (fmt + " (" + fmt + " to " + fmt + ")") % (statistics.median(vals), min(vals),
                                                       max(vals))


def _s(v):
    return "-" if v is None else "%.2f" % v


def rep_line(r):
    """One repetition in a line, for the console."""
    fo = r.get("failover_episode")
    return ("%s %d%s: %d of %d clients on the killed master, %.0f/s, promoted after %s s; "
            "degraded %s to %s s (%d answers, %d of other masters' clients%s); exact again at "
            "%s s; allowed %d, taken %d: lost %d, extra %d; other degraded episodes %s%s" % (
                r["kind"], r["rep"], " (control, no kill)" if r.get("control") else "",
                r["affected"], r["clients"], r["rate"] or 0, _s(r.get("promote_s")),
                _s(fo[0] if fo else None), _s(fo[1] if fo else None), fo[2] if fo else 0,
                r.get("others_degraded", 0),
                " from %.2f to %.2f s" % tuple(r["others_degraded_s"])
                if r.get("others_degraded_s") else "",
                _s(r.get("exact_s")), r["allowed_affected"], r["taken_affected"], r["lost"],
                r["extra"], r["other_episodes"] or "none",
                "" if not r["problems"] else "; PROBLEMS: " + "; ".join(r["problems"])))


def report(a, results, meta):
    L = ["# Redis failover under load: what it costs in exactness", ""]
    L.append("Generated by `%s` on %s; machine: %s; host steal over the run: %s." % (
        meta["cmd"], meta["date"], meta["machine"],
        "%.1f%%" % meta["steal"] if meta.get("steal") is not None else "?"))
    L.append("")
    L.append("Each repetition: a fresh topology and agent (`-t 1`, `--redis-timeout` 20 ms, the "
             "default); %d clients at `--limit %s` (never reached) send %g requests/s in all "
             "over %d SPOP connections (at most %d in flight each); after %g s %s; the load "
             "goes on until %g s after the promotion. Times are seconds from the SIGKILL. A "
             "degraded episode is a run of degraded answers (ACK `degraded`) with no gap of "
             "%g s; the failover's is the first that ends after the kill. \"Exact again\": "
             "the first answer from Redis for the killed master's clients after that episode. "
             "Writes lost: per client of the killed master, decisions allowed from Redis minus "
             "the tokens its bucket on the promoted replica shows as taken (HGET of the "
             "bucket's theoretical arrival time and TIME on that server), summed over the "
             "clients that lost any; extra taken is the opposite (decided in Redis but "
             "answered degraded)."
             % (a.clients, LIMIT, a.rate, CONNS, WINDOW, a.before,
                "nothing is killed (control run)" if a.control else "a master gets SIGKILL",
                a.after, EPISODE_GAP_S))
    L.append("")
    for kind in ("cluster", "sentinel"):
        rs = [r for r in results if r["kind"] == kind and "answers" in r]
        if not rs:
            continue
        L.append("## %s" % ("Redis Cluster: 3 masters, 1 replica each, cluster-node-timeout "
                            "1000 ms" if kind == "cluster" else
                            "Sentinel: master, replica, 3 sentinels, down-after-milliseconds "
                            "2000"))
        L.append("")
        L.append("| rep | clients on the killed master | rate/s | promoted after s | failover "
                 "episode: degraded from - to s | degraded answers (other masters' clients, "
                 "from - to s) | exact again s | allowed from Redis | taken (bucket after) "
                 "| writes lost (clients) | extra taken | other degraded episodes [from, to, "
                 "answers, killed master's] | problems |")
        L.append("|---:|---:|---:|---:|---|---|---:|---:|---:|---|---:|---|---|")
        for r in rs:
            fo = r.get("failover_episode")
            L.append("| %d | %d of %d | %.0f | %s | %s | %s | %s | %d | %d | %d (%d) | %d | %s "
                     "| %s |" % (
                         r["rep"], r["affected"], r["clients"], r["rate"] or 0,
                         _s(r.get("promote_s")),
                         "%.2f - %.2f" % (fo[0], fo[1]) if fo else "-",
                         "%d (%d%s)" % (fo[2], r.get("others_degraded", 0),
                                        ", %.2f - %.2f" % tuple(r["others_degraded_s"])
                                        if r.get("others_degraded_s") else "") if fo else "0",
                         _s(r.get("exact_s")),
                         r["allowed_affected"], r["taken_affected"], r["lost"],
                         r["clients_with_loss"], r["extra"],
                         "; ".join(str(e) for e in r["other_episodes"]) or "none",
                         "; ".join(r["problems"]) or "none"))
        L.append("")
        L.append("Median (min to max) over %d repetitions: promoted after %s s; the failover's "
                 "degraded answers from %s s to %s s; exact again after %s s; writes lost %s; "
                 "degraded answers in the failover's episode %s, of them other masters' "
                 "clients %s." % (
                     len(rs), spread([r.get("promote_s") for r in rs]),
                     spread([r.get("first_degraded_s") for r in rs]),
                     spread([r.get("last_degraded_s") for r in rs]),
                     spread([r.get("exact_s") for r in rs]),
                     spread([r["lost"] for r in rs], "%d"),
                     spread([(r.get("failover_episode") or [0, 0, 0])[2] for r in rs], "%d"),
                     spread([r.get("others_degraded", 0) for r in rs], "%d")))
        L.append("")
        L.append("Agent counters over the runs (sum of the repetitions' differences): " +
                 ", ".join("%s %d" % (k, sum(r["metrics"].get(k, 0) for r in rs))
                           for k in sorted({k for r in rs for k in r["metrics"]})) + ".")
        L.append("")
        L.append("Commands of repetition 1:")
        L.append("")
        L.append("    " + rs[0]["agent_cmd"])
        L.append("    # topology: %s; %s" % (
            rs[0]["topology"], "no kill" if a.control else "SIGKILL of %d" % rs[0]["victim"]))
        L.append("")
        logs = {}
        for r in rs:
            for line in r["agent_log"]:
                msg = re.sub(r"^\S+ ", "", line)
                msg = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", msg)
                msg = re.sub(r"127\.0\.0\.1 \d+", "127.0.0.1 PORT", msg)
                logs[msg] = logs.get(msg, 0) + 1
        if logs:
            L.append("Agent log lines after the load started (all repetitions, ports "
                     "masked, with their counts):")
            L.append("")
            for msg, n in sorted(logs.items(), key=lambda kv: -kv[1])[:25]:
                L.append("    %4d  %s" % (n, msg[:200]))
            L.append("")
    for r in results:
        if "answers" not in r:
            L.append("- %s repetition %d failed: %s" % (r["kind"], r["rep"],
                                                        "; ".join(r["problems"])))
    return "\n".join(L) + "\n"


def steal_jiffies():
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return v[7], sum(v)
    except (OSError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--topology", choices=("cluster", "sentinel", "both"), default="both")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rate", type=float, default=2000.0, help="requests/s in all")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--before", type=float, default=4.0, help="seconds of load before the kill")
    ap.add_argument("--after", type=float, default=6.0,
                    help="seconds of load after the promotion")
    ap.add_argument("--control", action="store_true",
                    help="the same runs without killing anything: what degrades anyway")
    ap.add_argument("--no-full-coverage", action="store_true",
                    help="cluster: CONFIG SET cluster-require-full-coverage no on every node")
    ap.add_argument("--max-seconds", type=float, default=900.0,
                    help="no new repetition after this long")
    ap.add_argument("--output", help="Markdown report (default: stdout only)")
    ap.add_argument("--json", help="every repetition's figures as JSON")
    a = ap.parse_args()
    if (not 1 <= a.reps <= 50 or not 0 < a.rate <= 50000 or not 1 <= a.clients <= 65535
            or not 0 <= a.before <= 120 or not 0 <= a.after <= 120):
        ap.error("--reps 1..50, --rate up to 50000, --clients 1..65535, "
                 "--before and --after 0..120 s")
    build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
    a.agent_bin = os.path.join(build, "spoa-ratelimit")
    if not os.access(a.agent_bin, os.X_OK):
        print("failover: %s is missing; run `make agent` first" % a.agent_bin, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import tempfile
    kinds = ("cluster", "sentinel") if a.topology == "both" else (a.topology,)
    results = []
    t_start = time.monotonic()
    s0 = steal_jiffies()
    with tempfile.TemporaryDirectory(prefix="spoa-failover-") as logdir:
        for rep in range(a.reps):
            for kind in kinds:
                if time.monotonic() - t_start > a.max_seconds:
                    results.append({"kind": kind, "rep": rep + 1,
                                    "problems": ["not run: --max-seconds reached"]})
                    continue
                try:
                    r = one_rep(a, kind, rep, logdir)
                except Exception as e:  # noqa: BLE001 - one repetition's failure
                    r = {"kind": kind, "rep": rep + 1,
                         "problems": ["%s: %s" % (type(e).__name__, str(e)[-800:])]}
                results.append(r)
                if "answers" in r:
                    print(rep_line(r), flush=True)
                else:
                    print("%s %d: FAILED: %s" % (kind, rep + 1, "; ".join(r["problems"])),
                          flush=True)
    s1 = steal_jiffies()
    import datetime
    import platform
    meta = {"cmd": "python3 bench/failover.py " + " ".join(shlex.quote(x) for x in sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": "%d CPUs, Linux %s" % (os.cpu_count(), platform.release()),
            "steal": (100 * (s1[0] - s0[0]) / (s1[1] - s0[1])
                      if s0 and s1 and s1[1] > s0[1] else None)}
    text = report(a, results, meta)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    print()
    print(text)
    ok = all("answers" in r and not r["problems"] for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
