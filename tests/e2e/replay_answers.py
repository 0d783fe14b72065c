#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Replays one seeded stream of NOTIFY frames against agents and compares
what they answer, byte for byte.

    python3 tests/e2e/replay_answers.py --agent OLD --agent NEW [--frames 5000] [--seed 1]
    python3 tests/e2e/replay_answers.py --agent build/spoa-ratelimit   (a digest only)
    python3 tests/e2e/replay_answers.py --agent OLD --agent-full NEW

A change that is meant to make answers cheaper, not different, is checked
by running the agent built before it and the agent built after it on the
same stream: every byte each connection receives must be the same. The
stream covers the shapes of a check-rate message HAProxy can send and some
it never would: arguments in any order, of any type, NULL, empty, repeated,
unknown, more than the rules read; no message, unknown messages, several
check-rate messages; and, on connections of their own, broken NOTIFYs that
end with a DISCONNECT. It runs under three sets of rules: the defaults,
a file whose conditions read method, path and host only, and one whose
conditions read any argument (the agent then keeps them all).

Answers must not depend on timing: every token bucket here refills one
token in a whole number of seconds (at least 1), and the run takes well
under a second per client key, so `remaining`, `reset` and `retry_after`
come out the same on every run. Shedding has no ramp, so it does not draw
random numbers. Exits 1 when two agents differ (the first difference is
printed), 0 otherwise.

--agent-full runs an agent whose answers carry every variable (`answer:
full` in its rules, `--answer full` without a file): what every agent
answered before 0.3, whose default answer carries fewer. An agent of 0.3
run so gives the digests of 0.2's answers; run plainly, digests of its
own.
"""

import argparse
import hashlib
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import spop  # noqa: E402
from harness import free_port, wait_port  # noqa: E402

RULES_PLAIN = """
identity: [api_key, user, ip, uid]
cost_argument: cost
tiers:
  argument: tier
  default: free
  free: { limits: ["3/3s", "8/1m"] }
  pro: { limits: ["20/20s"], cost: 2 }
  gold: { limits: [{ rate: "2/1h", burst: 6 }], shadow: true }
  none: { limits: [] }
endpoints:
  - name: search
    match: { method: POST, path: /api/search }
    limits: ["4/4s"]
  - name: host-only
    match: { host: [API.Example.com, "other.test:8080"] }
    limits: ["5/5s", "60/1h"]
  - name: odd.name
    match: { path: /odd/ }
    limits: ["1/1s"]
priorities:
  default: 2
  classes:
    - priority: 0
      match: { path: /api/payments }
    - priority: 1
      match: { method: [POST, PUT] }
    - priority: 3
      match: { host: test.example.com }
shedding:
  in_use: be_in_use
  free: be_free
  thresholds: { 1: 90%, 2: 80%, 3: 50% }
  retry_after: 2s
"""

RULES_ARGS = """
identity: [user, api_key, ip]
tiers:
  argument: plan
  default: basic
  basic: { limits: ["2/2s", "30/1h"] }
  plus: { limits: ["10/10s"] }
endpoints:
  - name: flagged
    match: { args: { flag: ["1", "true", "10.0.0.7"] } }
    limits: ["1/1s"]
  - name: by-method
    match: { method: DELETE }
    limits: ["3/3s"]
    shadow: true
priorities:
  default: 1
  classes:
    - priority: 3
      match: { args: { test: ["1", "yes"] } }
    - priority: 0
      match: { path: /health }
shedding:
  in_use: busy
  free: idle
  thresholds: { 1: 95%, 2: 60%, 3: 40% }
  shadow: true
"""

SETUPS = (
    ("defaults", None, ["--limit", "3/3s", "--limit", "12/1m"]),
    ("plain", RULES_PLAIN, []),
    ("args", RULES_ARGS, []),
)

NAMES = ["ip", "method", "path", "host", "api_key", "user", "tier", "plan", "cost",
         "be_in_use", "be_free", "busy", "idle", "flag", "test", "uid", "x", "api_kez",
         "be_in_usf", "", "a_very_long_argument_name_over_16"]
METHODS = ["GET", "POST", "PUT", "DELETE", "get", ""]
PATHS = ["/", "/api/search", "/api/search/x", "/api/searches", "/api/payments", "/odd/",
         "/odd/1", "/health", "/api/search?q=1", ""]
HOSTS = ["api.example.com", "API.EXAMPLE.COM:443", "other.test:8080", "other.test",
         "test.example.com", "[::1]:80", "x"]
TIERS = ["free", "pro", "gold", "none", "plus", "basic", "unknown", ""]


def rand_value(rng, name):
    """A typed value for an argument, mostly of the type HAProxy sends."""
    r = rng.random()
    if r < 0.08:
        return None
    if r < 0.12:
        kind = rng.choice(["i32", "u32", "i64", "u64", "bool", "v4", "v6", "bin", "str"])
        return {
            "i32": lambda: spop.Typed(spop.T_INT32, rng.randint(-5, 300)),
            "u32": lambda: spop.Typed(spop.T_UINT32, rng.randint(0, 70000)),
            "i64": lambda: rng.choice([-1, 0, 7, 2**40, -(2**63)]),
            "u64": lambda: spop.Typed(spop.T_UINT64, rng.choice([0, 3, 2**64 - 1])),
            "bool": lambda: rng.random() < 0.5,
            "v4": lambda: spop.Typed(spop.T_IPV4, "10.0.0.%d" % rng.randint(1, 9)),
            "v6": lambda: spop.Typed(spop.T_IPV6, "2001:db8::%x" % rng.randint(1, 9)),
            "bin": lambda: spop.Typed(spop.T_BIN, bytes([rng.randint(0, 255)] * 3)),
            "str": lambda: "s" * rng.randint(0, 300),
        }[kind]()
    if name == "ip":
        return spop.Typed(spop.T_IPV4, "10.0.%d.%d" % (rng.randint(0, 3), rng.randint(1, 50)))
    if name == "method":
        return rng.choice(METHODS)
    if name == "path":
        return rng.choice(PATHS)
    if name == "host":
        return rng.choice(HOSTS)
    if name in ("api_key", "user", "uid"):
        return rng.choice(["", "k%d" % rng.randint(0, 150), "user-%d" % rng.randint(0, 40)])
    if name in ("tier", "plan"):
        return rng.choice(TIERS)
    if name == "cost":
        return rng.choice([1, 2, 0, -3, "3", "x", "0004", "99999999999"])
    if name in ("be_in_use", "busy"):
        return rng.choice([0, 10, 50, 85, 92, 97, 100])
    if name in ("be_free", "idle"):
        return rng.choice([0, 3, 8, 15, 50, 90])
    if name in ("flag", "test"):
        return rng.choice(["1", "yes", "0", True, 1, spop.Typed(spop.T_IPV4, "10.0.0.7")])
    return "v%d" % rng.randint(0, 99)


def rand_args(rng):
    n = rng.choice([0, 1, 3, 6, 9, 9, 9, 12, 14])
    names = NAMES[:15] if rng.random() < 0.7 else NAMES
    args = []
    for _ in range(n):
        name = rng.choice(names)
        args.append((name, rand_value(rng, name)))
    if rng.random() < 0.1:
        # more arguments than the agent looks at
        args += [("pad%d" % i, i) for i in range(70)]
        args.append(("api_key", "late"))
    return args


def rand_messages(rng):
    r = rng.random()
    if r < 0.03:
        return []
    msgs = [("check-rate", rand_args(rng))]
    if r < 0.08:
        msgs.insert(0, ("unknown", rand_args(rng)))
    elif r < 0.12:
        msgs.append(("check-rate", rand_args(rng)))
    elif r < 0.15:
        msgs = [("check-ratf", rand_args(rng))]
    return msgs


def break_frame(rng, payload):
    """A NOTIFY payload damaged the ways a broken peer could."""
    how = rng.randrange(4)
    if how == 0 and len(payload) > 1:
        return payload[:rng.randrange(1, len(payload))]
    if how == 1 and payload:
        b = bytearray(payload)
        b[rng.randrange(len(b))] = rng.choice([0x0A, 0x0F, 0xFF, 0x21, 0xF0])
        return bytes(b)
    if how == 2:
        return payload + bytes([rng.randint(1, 40)])
    return payload + b"\x05" + b"\x0acheck-rate" + b"\x09\x02ip"


def stream(seed, frames):
    """The frames of the run: (pipelined NOTIFYs, broken connections)."""
    rng = random.Random(seed)
    good = []
    for i in range(frames):
        sid = rng.choice([1, 2 * i + 1, 2**40 + i])
        fid = rng.choice([1, i + 1, 300])
        good.append(spop.notify(sid, fid, rand_messages(rng)))
    bad = []
    for i in range(60):
        payload = spop.notify_payload(rand_messages(rng))
        bad.append(spop.frame(spop.NOTIFY, break_frame(rng, payload), sid=1, fid=1))
    return good, bad


def recv_all(sock, deadline):
    out = bytearray()
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except socket.timeout:
            continue
        if not chunk:
            break
        out += chunk
    return bytes(out)


def run_conn(port, frames):
    """Sends HELLO and frames on one connection; returns every byte after
    the AGENT-HELLO, until the agent closes (or the answers stop)."""
    with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
        s.sendall(spop.hello())
        head = b""
        while len(head) < 4 or len(head) < 4 + struct.unpack(">I", head[:4])[0]:
            head += s.recv(4096)
        n = 4 + struct.unpack(">I", head[:4])[0]
        out = bytearray(head[n:])
        batch = 200
        for i in range(0, len(frames), batch):
            s.sendall(b"".join(frames[i:i + batch]))
            want = min(i + batch, len(frames))
            deadline = time.monotonic() + 5
            while count_frames(out) < want and time.monotonic() < deadline:
                try:
                    chunk = s.recv(1 << 16)
                except socket.timeout:
                    continue
                if not chunk:
                    return bytes(out)
                out += chunk
        # A broken frame ends the connection; one that came out valid
        # after all is answered, then the DISCONNECT ends it.
        try:
            s.sendall(spop.frame(spop.HAPROXY_DISCONNECT, spop.disconnect_payload()))
        except OSError:
            pass
        out += recv_all(s, time.monotonic() + 3)
        return bytes(out)


def count_frames(buf):
    n = pos = 0
    while len(buf) - pos >= 4:
        length = struct.unpack(">I", buf[pos:pos + 4])[0]
        if len(buf) - pos - 4 < length:
            break
        pos += 4 + length
        n += 1
    return n


def run_agent(agent, rules_text, extra, good, bad, workdir):
    """Everything the agent answered, one bytes object per connection;
    agent is (binary, full): full, with every variable in its answers."""
    agent, full = agent
    port = free_port()
    cmd = [agent, "-t", "1", "-q", "--listen", "127.0.0.1:%d" % port] + extra
    if full and rules_text is not None:
        rules_text = "answer: full\n" + rules_text
    elif full:
        cmd += ["--answer", "full"]
    if rules_text is not None:
        path = os.path.join(workdir, "rules.yaml")
        with open(path, "w") as f:
            f.write(rules_text)
        cmd += ["--rules", path]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    try:
        wait_port(port, proc=proc)
        answers = [run_conn(port, good)]
        for f in bad:
            answers.append(run_conn(port, [f]))
        return answers
    finally:
        proc.terminate()
        proc.wait(10)


def split_frames(buf):
    out, pos = [], 0
    while len(buf) - pos >= 4:
        length = struct.unpack(">I", buf[pos:pos + 4])[0]
        out.append(buf[pos:pos + 4 + length])
        pos += 4 + length
    if pos < len(buf):
        out.append(buf[pos:])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agent", dest="agents", action="append", type=lambda p: (p, False),
                    help="agent binary (1 or 2 agents in all)")
    ap.add_argument("--agent-full", dest="agents", action="append", type=lambda p: (p, True),
                    help="agent binary run with answer: full")
    ap.add_argument("--frames", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not a.agents or len(a.agents) > 2:
        ap.error("give one or two agents (--agent, --agent-full)")
    good, bad = stream(a.seed, a.frames)
    failed = False
    with tempfile.TemporaryDirectory(prefix="spoa-replay-") as workdir:
        for name, rules_text, extra in SETUPS:
            runs = [run_agent(agent, rules_text, extra, good, bad, workdir)
                    for agent in a.agents]
            digest = [hashlib.sha256(b"|".join(r)).hexdigest()[:16] for r in runs]
            nframes = sum(count_frames(c) for c in runs[0])
            print("%-9s %d frames answered, %d bytes, sha256 %s" % (
                name, nframes, sum(len(c) for c in runs[0]), " ".join(digest)))
            if len(runs) < 2 or runs[0] == runs[1]:
                continue
            failed = True
            for ci, (x, y) in enumerate(zip(runs[0], runs[1])):
                fx, fy = split_frames(x), split_frames(y)
                for fi in range(max(len(fx), len(fy))):
                    gx = fx[fi] if fi < len(fx) else b""
                    gy = fy[fi] if fi < len(fy) else b""
                    if gx != gy:
                        print("  connection %d, frame %d differs:\n    %s\n    %s"
                              % (ci, fi, gx.hex(), gy.hex()))
                        break
                else:
                    continue
                break
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
