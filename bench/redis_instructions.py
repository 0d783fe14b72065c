#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Counts the instructions Redis runs per decision, with callgrind.

    python3 bench/redis_instructions.py [--json]

Redis's time per decision moves by tens of percent between runs on a
shared machine; the instructions it runs hardly move, so they show what a
change to agent/store/redis/ratelimit.lua costs Redis. A redis-server runs
under `valgrind --tool=callgrind`; this script loads the library and the
naive token bucket (bench/naive_token_bucket.lua), then measures each
configuration after a warm-up of the same calls: the counters are zeroed
(callgrind_control -z), the calls are sent (16 in flight on one
connection), the counters dumped (callgrind_control -d), and the total is
divided by the decisions. Everything the server does for them is in it:
reading the commands, the Lua, the commands Lua calls, the replies.

Configurations: the naive script, one EVALSHA per decision (the baseline
of `make bench`'s R1); the library, one FCALL per decision and in calls of
40; each with a limit whose interval is a whole number of microseconds
(1000000/1m) and one whose interval carries a remainder (1000000000/1h);
and, with the first, decisions of three rules (a client's limit and two
layers: one key shared by every decision, one per address of 50), and
packed buckets (--redis-packed: the clients' buckets as members of 256
sets).
A pool of 200 clients, so that clients come back while their keys live
(under valgrind time runs slower, so fewer writes keep their expiry than
at full speed: the counts are a little above what Redis does at speed).

Exit status: 0, 1 when a call failed, 2 when valgrind or redis-server is
missing (the reason on stderr).
"""

import argparse
import glob
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import lua_scripts  # noqa: E402
import mpack  # noqa: E402
from resp import Client, RespError, encode  # noqa: E402

NAIVE = os.path.join(ROOT, "bench", "naive_token_bucket.lua")
DEPTH = 16
POOL = 200
CALLS_ONE, CALLS_BATCH, BATCH = 2000, 100, 40
LIMITS = (("whole", 0, 1000000, 60000000), ("remainder", 0, 1000000000, 3600000000))
START_S = 60.0
# the library's EPOCH (2024-01-01) in seconds, and the members other than
# the pool's in each set of the configuration of larger sets
EPOCH_S = 1704067200
FILL = 10


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """redis-server under callgrind on a free loopback port."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.port = free_port()
        self.out = os.path.join(workdir, "callgrind.%p")
        self.log = open(os.path.join(workdir, "redis.log"), "wb")
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + self.out,
             "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + START_S
        while True:
            try:
                self.c = Client("127.0.0.1", self.port, timeout=60.0)
                if self.c.command("PING") == b"PONG":
                    break
            except (OSError, ConnectionError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server under callgrind did not start: see %s"
                                   % self.log.name)
            time.sleep(0.2)

    def control(self, flag):
        subprocess.run(["callgrind_control", flag, str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def total(self):
        """Dumps the counters since the last zeroing; their total."""
        for f in glob.glob(self.out.replace("%p", "%d*" % self.proc.pid)):
            os.unlink(f)
        self.control("-d")
        tot = 0
        for f in glob.glob(self.out.replace("%p", "%d*" % self.proc.pid)):
            with open(f, errors="replace") as fh:
                for line in fh:
                    if line.startswith(("totals:", "summary:")):
                        tot = max(tot, int(line.split()[1]))
        return tot

    def send(self, cmds):
        for i in range(0, len(cmds), DEPTH):
            chunk = cmds[i:i + DEPTH]
            self.c.send(b"".join(encode(x) for x in chunk))
            for _ in chunk:
                r = self.c.read_reply()
                if isinstance(r, RespError):
                    raise r

    def per_decision(self, cmds, decisions):
        self.send(cmds)  # the warm-up: rules known, keys there
        self.control("-z")
        self.send(cmds)
        return self.total() / decisions

    def stop(self):
        try:
            self.c.close()
        except OSError:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(START_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def fcalls(rng, pool, limit, batch, ncalls):
    rule = mpack.packb([list(limit)])
    out = []
    for _ in range(ncalls):
        keys = rng.sample(pool, batch)
        req = struct.pack(">H", 1) + b"".join(struct.pack(">IIH", j + 1, 1, 1)
                                               for j in range(batch))
        out.append(("FCALL", "rl8_decide", 0, req, rule) + tuple(keys))
    return out


def fcalls_stacked(rng, pool, addrs, glob, limit, batch, ncalls):
    """Decisions of three rules (the client's limit, a global one, one per
    address, each a key of its own): the agent's layout for a rule with
    two layers, the keys of the call named once through the keymap."""
    rule = mpack.packb([list(limit)] * 3)
    out = []
    for _ in range(ncalls):
        keys, index, posmap = [], {}, []
        for k in rng.sample(pool, batch):
            for key in (k, glob, rng.choice(addrs)):
                if key not in index:
                    keys.append(key)
                    index[key] = len(keys)
                posmap.append(index[key])
        req = struct.pack(">H", 0x8001) + b"".join(struct.pack(">IIH", 3 * j + 1, 1, 1)
                                                   for j in range(batch))
        keymap = b"".join(struct.pack(">I", x) for x in posmap)
        out.append(("FCALL", "rl8_decide", 0, req, rule, keymap) + tuple(keys))
    return out


def measure():
    rng = random.Random(1)
    workdir = tempfile.mkdtemp(prefix="rl-redis-instr-")
    srv = Server(workdir)
    try:
        srv.c.command("FUNCTION", "LOAD", "REPLACE", lua_scripts.library())
        with open(NAIVE) as f:
            naive = srv.c.command("SCRIPT", "LOAD", f.read()).decode()
        npool = ["nv:{%012x}" % rng.getrandbits(48) for _ in range(POOL)]
        out = {"naive": srv.per_decision(
            [("EVALSHA", naive, 1, rng.choice(npool), 1000000, 1000000 / 3600)
             for _ in range(CALLS_ONE)], CALLS_ONE)}
        for name, algo, quota, period in LIMITS:
            pool = ["{%s}%s" % (("%06x" % rng.getrandbits(24))[:4], "%08x" % rng.getrandbits(32))
                    for _ in range(POOL)]
            lim = (algo, quota, period, 0)
            out["one per call, " + name] = srv.per_decision(
                fcalls(rng, pool, lim, 1, CALLS_ONE), CALLS_ONE)
            out["%d per call, %s" % (BATCH, name)] = srv.per_decision(
                fcalls(rng, pool, lim, BATCH, CALLS_BATCH), BATCH * CALLS_BATCH)
            if name != "whole":
                continue
            # keys without an expiry (--redis-no-expiry: kept 2), keys of
            # their own
            npool = [k + "n" for k in pool]
            out["%d per call, whole, no expiry" % BATCH] = srv.per_decision(
                fcalls(rng, npool, lim + (2,), BATCH, CALLS_BATCH), BATCH * CALLS_BATCH)
            addrs = ["{%s}a%07x" % (("%06x" % rng.getrandbits(24))[:4], i) for i in range(50)]
            glob = "{glob}everyone"
            out["three rules, one per call, " + name] = srv.per_decision(
                fcalls_stacked(rng, pool, addrs, glob, lim, 1, CALLS_ONE), CALLS_ONE)
            out["three rules, %d per call, %s" % (BATCH, name)] = srv.per_decision(
                fcalls_stacked(rng, pool, addrs, glob, lim, BATCH, CALLS_BATCH),
                BATCH * CALLS_BATCH)
        # packed buckets (--redis-packed): the whole limit, its set per tag
        # ("{TT}~" and the limit's 8 characters) and the client's member
        ppool = ["{%02x}~limit001%010x" % (rng.getrandbits(8), rng.getrandbits(40))
                 for _ in range(POOL)]
        lim = (0, 1000000, 60000000, 0, 1)
        out["one per call, whole, packed"] = srv.per_decision(
            fcalls(rng, ppool, lim, 1, CALLS_ONE), CALLS_ONE)
        out["%d per call, whole, packed" % BATCH] = srv.per_decision(
            fcalls(rng, ppool, lim, BATCH, CALLS_BATCH), BATCH * CALLS_BATCH)
        # the same in 4 sets of about 60 members: the pool's 50 each, and
        # 10 of other clients whose buckets stay in use (a day away)
        tags = ["{%02x}" % (0xf0 + i) for i in range(4)]
        fpool = ["%s~limit001%010x" % (tags[i % 4], rng.getrandbits(40)) for i in range(POOL)]
        busy = "%d" % ((int(time.time()) + 86400 - EPOCH_S) * 1000000)
        for t in tags:
            srv.c.command("ZADD", t + "~limit001",
                          *[x for j in range(FILL) for x in (busy, "busy%06d" % j)])
        out["%d per call, whole, packed, sets of %d" % (BATCH, POOL // 4 + FILL)] = (
            srv.per_decision(fcalls(rng, fpool, lim, BATCH, CALLS_BATCH), BATCH * CALLS_BATCH))
        return out
    finally:
        srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def report_lines():
    """The Markdown section of BENCHMARKS.md (bench/run.py): every
    configuration against the naive script, or why it was not measured."""
    L = ["## Redis instructions per decision (callgrind)", ""]
    for tool in ("valgrind", "callgrind_control", "redis-server"):
        if shutil.which(tool) is None:
            return L + ["Not measured: %s is missing." % tool, ""], None
    try:
        res = measure()
    except (RespError, RuntimeError, OSError) as e:
        return L + ["Not measured: %s." % e, ""], str(e)
    base = res["naive"]
    L += ["| configuration | instructions | vs naive |", "|---|---:|---:|"]
    for k, v in res.items():
        L.append("| %s | %.0f | %.2fx |" % (k, v, v / base))
    one, three = res["one per call, whole"], res["three rules, one per call, whole"]
    b1, b3 = res["%d per call, whole" % BATCH], res["three rules, %d per call, whole" % BATCH]
    L += ["", "A decision of three rules (a client's limit, a global layer, a layer per "
          "address: three keys, the global one shared by every decision of a call) costs "
          "Redis %.2fx a one-rule decision one per call, %.2fx in calls of %d. "
          "redis-server under `valgrind --tool=callgrind`, the counters zeroed after a "
          "warm-up of the same calls, %d calls in flight, a pool of %d clients; "
          "measured by `python3 bench/redis_instructions.py`."
          % (three / one, b3 / b1, BATCH, DEPTH, POOL)]
    p1, pb = res["one per call, whole, packed"], res["%d per call, whole, packed" % BATCH]
    L += ["", "Packed buckets (`--redis-packed`) cost Redis %.2fx the instructions of "
          "keys one per call and %.2fx in calls of %d: a ZSCORE and a ZADD of each "
          "bucket's own, where keys share the call's one MGET. In sets of %d members "
          "(4 sets, where the other configurations' 200 clients spread over 256), "
          "%.2fx that of small sets: each read and write scans its set."
          % (p1 / one, pb / b1, BATCH, POOL // 4 + FILL,
             res["%d per call, whole, packed, sets of %d" % (BATCH, POOL // 4 + FILL)] / pb),
          "", "Keys without an expiry (`--redis-no-expiry`) cost Redis %.2fx the "
          "instructions of keys with one in calls of %d: no expiry to set or keep, "
          "and one MSET for the call's writes where keys with an expiry need a "
          "command each."
          % (res["%d per call, whole, no expiry" % BATCH] / b1, BATCH), ""]
    return L, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control", "redis-server"):
        if shutil.which(tool) is None:
            print("redis_instructions: %s is missing" % tool, file=sys.stderr)
            return 2
    try:
        res = measure()
    except (RespError, RuntimeError, OSError) as e:
        print("redis_instructions: %s" % e, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res, sort_keys=True))
        return 0
    base = res["naive"]
    print("Redis instructions per decision (callgrind), against the naive script")
    for k, v in res.items():
        print("  %-36s %8.0f  %.2fx" % (k, v, v / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
