# SPDX-License-Identifier: Apache-2.0
"""The Redis store's benchmarks, run by bench/run.py in the same invocation
as the in-memory ones so that their ratios hold on a noisy machine.

Every run starts a fresh redis-server on a free loopback port (no
persistence) and a fresh agent with --redis and --metrics, and stops both
whatever happens. The agent loads its function library
(agent/store/redis/ratelimit.lua, FUNCTION LOAD REPLACE) and decides with
FCALL rl8_decide (rl8_decide_cluster on a Cluster). The configurations:

  R1  the baseline: redis-benchmark running bench/naive_token_bucket.lua,
      the token bucket as it is usually written for Redis (one hash per
      client, one EVALSHA per decision), with the generator's concurrency:
      what one decision costs Redis the usual way, measured by Redis's
      own tool
  R2  the agent asking Redis once per decision (--redis-batch 1): one FCALL
      per decision
  R3  the agent batching decisions (default --redis-batch 64)
  R2t, R3t  R2 and R3 over TLS (the agent on Redis's --tls-port): what TLS
      costs the agent and Redis per decision, in the same rounds
  C3  R3 against a Redis Cluster of three masters (bench/cluster_bench.py),
      interleaved with R1 to R3: decisions per call next to R3's, Redis CPU
      per decision and decisions/s per Redis core
  R5  open loop at 50% of R3's throughput: the latency figures
  R6  the same at 25%
  N5, N6  the in-memory store (no Redis) on R5's and R6's timetables: what
      the machine, the generator and the SPOP path give by themselves
  L   one refused client flooding the agent, with and without the local
      refusal cache: decisions/s and the number of calls
  CL  100 clients at 100/1h flooding the agent on the cluster: exactly
      10000 pass, and every master holds keys
  M   Redis memory per tracked client, with one limit and with two

Redis's cost of a decision is taken two ways in every row: the time Redis
spent in the top-level command (INFO commandstats: cmdstat_evalsha for R1,
cmdstat_fcall for the agent; the commands a script calls are counted again
on their own lines, and left out here) and Redis's CPU (INFO cpu), each
divided by the decisions.

Runs of related rows are interleaved, so that load from elsewhere on the
machine falls on all of them alike. Besides throughput and latency, each run
records what explains them: decisions per call (the agent's metrics),
Redis's CPU and command time per decision, and how long Redis waited for a
CPU (/proc schedstat).

run(ctx) returns the rows; report(ctx, rows) returns the Markdown lines.
"""

import contextlib
import csv
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "e2e"))
import lua_scripts  # noqa: E402  (agent/store/redis/ratelimit.lua)
import cluster_bench  # noqa: E402  (bench/: the Redis Cluster rows' servers)
import figures  # noqa: E402  (bench/: the report's pictures)
from resp import Client, ProtocolError, RespError  # noqa: E402

NAIVE_SCRIPT = os.path.join("bench", "naive_token_bucket.lua")
LIBRARY = "agent/store/redis/ratelimit.lua"
LIBRARY_FIRST_LINE = b"#!lua name=" + lua_scripts.LIBRARY_NAME.encode()

# The generator's shape (8 connections, 20 NOTIFYs in flight on each) in
# redis-benchmark's terms: 8 clients, 20 commands pipelined on each.
RB_CLIENTS, RB_PIPELINE, RB_KEYSPACE = 8, 20, 100000
# redis-benchmark writes __rand_int__ as 12 decimal digits.
RB_KEY = "nv:{__rand_int__}"
RB_KEY_RE = re.compile(r"^nv:\{[0-9]{12}\}$")
# The naive script's bucket: so large and so quickly refilled that nothing
# is refused (1000000 per hour).
RB_CAPACITY = 1000000
RB_RATE = repr(RB_CAPACITY / 3600.0)
# The agent's keys: "{<client>}<limit>", 4 + 8 characters of URL-safe base64.
KEY_RE = re.compile(r"^\{[A-Za-z0-9_-]{4}\}[A-Za-z0-9_-]{8}$")

# Targets (the project's goals): Redis's time per decision against R1's, and
# Redis memory per tracked client with one limit.
TARGETS_VS_R1 = {"R2": 1.0, "R3": 0.4, "R2w": 1.0, "R3w": 0.4, "R2n": 1.0, "R3n": 0.4}
# The closed-loop rows' limit, high enough that nothing is refused, has an
# interval of 3.6 us per request (18/5 us: the bucket's state carries a
# remainder, the library's general path); R2w and R3w use one whose
# interval is a whole number of microseconds, as 100/1m, 1000/1h or 10/1s
# have (an integer state, written with INCRBY), still refusing nothing.
WHOLE_LIMIT = "1000000/1m"
MEM_TARGET, MEM_MOONSHOT = 100, 80

# A deadline far above any queueing on this machine, so that no decision
# is answered degraded (fail-open) and every figure is a Redis decision.
REDIS_TIMEOUT_MS = "1000"
KEYS = "10000"
CACHE_LIMIT, CACHE_QUOTA = "10/1h", 10
CLUSTER_KEYS, CLUSTER_QUOTA = 100, 100
MEM_CLIENTS = 100000
# A Redis that evicts keys without an expiry itself (--redis-expiry):
# far above what a run stores, so that nothing is evicted.
EVICTING = ["--maxmemory", "1gb", "--maxmemory-policy", "allkeys-lru"]
# key, title, the agent's arguments, whether its Redis evicts (the agent's
# default, --redis-expiry auto, then writes the keys without an expiry)
MEM_LIMITS = (("M1", "one limit (`--limit 100/1h`), a Redis without `maxmemory`: keys with "
               "an expiry", ["--limit", "100/1h"], False),
              ("M2", "two limits (`--limit 100/1m --limit 1000/1h`), the same Redis",
               ["--limit", "100/1m", "--limit", "1000/1h"], False),
              ("M1p", "one limit, packed buckets (`--limit 100/1h --redis-packed`)",
               ["--limit", "100/1h", "--redis-packed"], False),
              ("M1n", "one limit (`--limit 100/1h`, the same agent as M1), a Redis that "
               "evicts (`%s`): keys without an expiry" % " ".join(EVICTING),
               ["--limit", "100/1h"], True))
# A set of packed buckets: "{TT}~" and 8 characters of the limit.
SET_RE = re.compile(r"^\{[A-Za-z0-9_-]{2}\}~[A-Za-z0-9_-]{8}$")

REDIS_START_S = 5.0
REDIS_STOP_S = 5.0
READY_S = 10.0


def terminate(proc, timeout_s):
    """Stops a child: SIGTERM, then SIGKILL if it has not exited within
    timeout_s. Returns True when it had to be killed."""
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


def parse_cmdstat(line):
    """(calls, usec, failed + rejected) of an INFO commandstats line."""
    f = dict(p.partition("=")[::2] for p in line.split(",") if p)
    return (int(f.get("calls", 0)), int(f.get("usec", 0)),
            int(f.get("failed_calls", 0)) + int(f.get("rejected_calls", 0)))


class PortChild:
    """A child process on a free loopback port, logging to a file, stopped
    on exit from `with`. A port found free can be taken before the child
    binds it: then (the child's log saying so, `clash` in it) another port
    is tried, three at most. Subclasses give _spawn() (sets log_path and
    proc for self.port), _ready() (True once the child serves), cmdline(),
    `what` and `failure` (for errors), `clash` and `stop_s`."""

    what, failure, clash, stop_s = "child", "did not start", "in use", 5.0

    def __init__(self, ctx):
        self.ctx = ctx
        self.proc = None
        self.port = None
        self.log_path = None

    def log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-10:])
        except OSError:
            return ""

    def __enter__(self):
        for attempt in range(3):
            self.port = self.ctx.free_port()
            self._spawn()
            try:
                if self._ready():
                    return self
            except BaseException:
                self.stop()
                raise
            self.stop()
            tail = self.log_tail()
            if self.clash not in tail.lower() or attempt == 2:
                raise RuntimeError("%s %s: %s\n%s"
                                   % (self.what, self.failure, self.cmdline(), tail))
        raise RuntimeError("%s did not start" % self.what)

    def stop(self):
        if self.proc is None:
            return
        terminate(self.proc, self.stop_s)
        self.proc = None

    def __exit__(self, *exc):
        self.stop()
        return False


class RedisServer(PortChild):
    """A fresh redis-server on a free loopback port, no persistence, stopped
    on exit from `with`."""

    what, clash, stop_s = "redis-server", "in use", REDIS_STOP_S

    def __init__(self, ctx, extra=()):
        super().__init__(ctx)
        self.extra = list(extra)

    def argv(self):
        return ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", self.ctx.logdir] + self.extra

    def cmdline(self):
        return " ".join(shlex.quote(x) for x in self.argv()[:-2 - len(self.extra)]
                        + self.extra)

    def _spawn(self):
        self.log_path = os.path.join(self.ctx.logdir, "redis-%d.log" % self.port)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log)

    def _ready(self):
        deadline = time.monotonic() + REDIS_START_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                # the PONG must come from this server, not from one that
                # took the port first
                if (self.command("PING") == b"PONG" and
                        self.info("server").get("process_id") == str(self.proc.pid)):
                    return True
            except (OSError, ConnectionError, ProtocolError, RespError):
                time.sleep(0.02)
        return False

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def command(self, *args):
        with Client("127.0.0.1", self.port, timeout=10.0) as c:
            return c.command(*args)

    def info(self, section):
        out = {}
        for line in self.command("INFO", section).decode().splitlines():
            k, sep, v = line.partition(":")
            if sep and not k.startswith("#"):
                out[k] = v.strip()
        return out

    def cpu_s(self):
        i = self.info("cpu")
        return float(i["used_cpu_sys"]) + float(i["used_cpu_user"])

    def command_stats(self, name="fcall"):
        """(calls, usec, failed + rejected) of one top-level command so far
        (INFO commandstats: cmdstat_fcall for the agent, cmdstat_evalsha
        for R1; the commands a script calls have lines of their own)."""
        return parse_cmdstat(self.info("commandstats").get("cmdstat_" + name, ""))

    def library_code(self):
        """The code of the library spoa_ratelimit_v8 as this server holds it
        (FUNCTION LIST WITHCODE), or None when it has none."""
        reply = self.command("FUNCTION", "LIST", "LIBRARYNAME", lua_scripts.LIBRARY_NAME,
                             "WITHCODE")
        for lib in reply or []:
            f = dict(zip(lib[::2], lib[1::2]))
            if f.get(b"library_name") == lua_scripts.LIBRARY_NAME.encode():
                return f.get(b"library_code")
        return None

    def used_memory(self):
        return int(self.info("memory")["used_memory"])

    def sample_keys(self, count):
        cursor, keys = b"0", []
        while len(keys) < count:
            cursor, batch = self.command("SCAN", cursor, "COUNT", 100)
            keys.extend(k.decode(errors="replace") for k in batch)
            if cursor == b"0":
                break
        return keys[:count]

    def all_keys(self):
        cursor, keys = b"0", set()
        while True:
            cursor, batch = self.command("SCAN", cursor, "COUNT", 1000)
            keys.update(batch)
            if cursor == b"0":
                return sorted(keys)


class RedisAgent:
    """The agent with --redis and --metrics, ready once its worker has the
    function library loaded and the metrics endpoint answers."""

    def __init__(self, ctx, args, cluster=False):
        self.ctx = ctx
        self.args = args
        self.cluster = cluster
        self.agent = None
        self.mport = None
        self.library = None

    def __enter__(self):
        # The metrics port can be taken too; the agent then exits after
        # "listening on", which the generic start does not notice.
        for attempt in range(3):
            self.mport = self.ctx.free_port()
            self.agent = self.ctx.Agent(
                self.ctx.agent_bin,
                self.args + ["--metrics", "127.0.0.1:%d" % self.mport],
                self.ctx.logdir)
            self.agent.__enter__()
            try:
                if self._wait_ready():
                    return self
            except BaseException:
                self.agent.stop()
                raise
            tail = self.agent.log_tail()
            self.agent.stop()
            if "in use" not in tail.lower() or attempt == 2:
                raise RuntimeError("agent not ready with Redis: %s\n%s"
                                   % (" ".join(self.agent.cmdline()), tail))
        raise RuntimeError("agent not ready")

    def _wait_ready(self):
        if self.cluster:
            # no library before the first decision (see cluster_bench.wait_map)
            if not cluster_bench.wait_map(self.agent, READY_S):
                return False
            try:
                return "spoa_rl_redis_calls_total" in self.metrics()
            except (OSError, ValueError):
                return False
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline and self.agent.proc.poll() is None:
            with open(self.agent.log_path, errors="replace") as f:
                m = re.search(r"ready \(library ([^)]*)\)", f.read())
            if m:
                try:
                    ours = "spoa_rl_redis_calls_total" in self.metrics()
                except (OSError, ValueError):
                    ours = False
                if ours and self.agent.proc.poll() is None:
                    self.library = m.group(1)
                    return True
            time.sleep(0.02)
        return False

    def __exit__(self, *exc):
        self.agent.stop()
        return False

    def histogram(self, name):
        """A histogram's cumulative counts, {upper bound in seconds: count}
        with +Inf as float("inf")."""
        url = "http://127.0.0.1:%d/metrics" % self.mport
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        return {float(m.group(1)): int(m.group(2)) for m in re.finditer(
            r'^%s_bucket\{le="([^"]+)"\} (\d+)$' % re.escape(name), text, re.M)}

    def metrics(self):
        """The agent's counters, summed over labels."""
        return agent_metrics(self.mport)


def agent_metrics(mport):
    """The counters of the agent whose metrics are at mport, summed over
    labels."""
    url = "http://127.0.0.1:%d/metrics" % mport
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        name = name.split("{", 1)[0]
        out[name] = out.get(name, 0) + float(value)
    return out


def thread_files(pid, name):
    """The text of /proc/PID/task/*/NAME, for each thread of a process in
    turn; OSError when the process or the file is not there."""
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/%s" % (pid, tid, name)) as f:
            yield f.read()


def sched_s(pid):
    """(seconds on a CPU, seconds runnable but waiting for one) of every
    thread of a process so far, from /proc/PID/task/*/schedstat; None when
    the kernel does not keep them."""
    run = wait = 0
    try:
        for text in thread_files(pid, "schedstat"):
            r, w = text.split()[:2]
            run += int(r)
            wait += int(w)
    except (OSError, ValueError):
        return None
    return run / 1e9, wait / 1e9


def sleeps(pid):
    """How many times the threads of a process have gone to sleep so far
    (each then woken to go on: `voluntary_ctxt_switches` in
    /proc/PID/task/*/status); None when it cannot be read."""
    n = 0
    try:
        for text in thread_files(pid, "status"):
            for line in text.splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    n += int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return n


def machine_idle():
    """(idle, stolen, total) jiffies of all CPUs so far (/proc/stat); stolen
    is the time a virtual machine's host ran something else instead."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return v[3] + v[4], v[7], sum(v)


class Window:
    """What happened on the machine between start() and stop(): CPU of Redis
    (INFO cpu), how long Redis's threads waited for a CPU while runnable,
    and how much of the machine's CPU time was idle."""

    def __init__(self, rd):
        self.rd = rd

    def _sched(self):
        # a cluster has several processes: their threads are summed
        pids = self.rd.pids() if hasattr(self.rd, "pids") else [self.rd.proc.pid]
        per = [sched_s(pid) for pid in pids]
        if any(x is None for x in per):
            return None
        return sum(x[0] for x in per), sum(x[1] for x in per)

    def start(self):
        self.c0 = self.rd.cpu_s()
        self.s0 = self._sched()
        self.i0 = machine_idle()
        self.t0 = time.monotonic()

    def stop(self, res):
        wall = time.monotonic() - self.t0
        c1, s1, i1 = self.rd.cpu_s(), self._sched(), machine_idle()
        res["redis_cpu"] = 100 * (c1 - self.c0) / wall
        res["redis_cpu_s"] = c1 - self.c0
        res["redis_wait"] = (100 * (s1[1] - self.s0[1]) / wall
                             if s1 is not None and self.s0 is not None else None)
        ok = i1 is not None and self.i0 is not None and i1[2] > self.i0[2]
        res["idle"] = 100 * (i1[0] - self.i0[0]) / (i1[2] - self.i0[2]) if ok else None
        res["steal"] = 100 * (i1[1] - self.i0[1]) / (i1[2] - self.i0[2]) if ok else None


def embedded_library(binary):
    """The function library as built into the agent (the Makefile turns
    ratelimit.lua into a C string, byte for byte), or None when it cannot
    be told: the binary unreadable, or the library's first line found
    other than exactly once."""
    try:
        with open(binary, "rb") as f:
            data = f.read()
    except OSError:
        return None
    start = data.find(LIBRARY_FIRST_LINE)
    end = data.find(b"\0", start)
    if start < 0 or end < 0 or data.find(LIBRARY_FIRST_LINE, start + 1) >= 0:
        return None
    return data[start:end]


def quote(argv):
    return " ".join(shlex.quote(x) for x in argv)


def command_block(key, title, lines):
    """One row of a report's commands, as Markdown: "KEY. TITLE", then
    lines (commands and # comments) in a code block indented under it;
    lines None when the row had no successful run."""
    L = ["%s. %s" % (key, title), "", "   ```"]
    L += ["   " + c for c in lines] if lines is not None else ["   (no successful run)"]
    return L + ["   ```", ""]




# ---- R1: redis-benchmark ---------------------------------------------------

def rb_argv(port, n, sha):
    # KEYS[1] the client's hash, ARGV capacity and refill rate per second
    return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
            "-c", str(RB_CLIENTS), "-P", str(RB_PIPELINE), "-n", str(n),
            "-r", str(RB_KEYSPACE), "--csv",
            "EVALSHA", sha, "1", RB_KEY, str(RB_CAPACITY), RB_RATE]


def rb_once(ctx, n, inspect=None):
    """One redis-benchmark run on a fresh server. Returns (result, None) or
    (None, error)."""
    with RedisServer(ctx) as rd:
        sha = rd.command("SCRIPT", "LOAD", ctx.naive_script).decode()
        argv = rb_argv(rd.port, n, sha)
        win = Window(rd)
        s0, g0 = rd.command_stats("evalsha"), ctx.children_cpu_s()
        win.start()
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=max(60, n / 1000.0))
        except subprocess.TimeoutExpired:
            return None, "redis-benchmark did not finish"
        wall = time.monotonic() - win.t0
        s1, g1 = rd.command_stats("evalsha"), ctx.children_cpu_s()
        cpu = {}
        win.stop(cpu)
        extra = inspect(rd) if inspect else {}
        redis_cmd = rd.cmdline()
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    if p.returncode != 0 or not rows or "rps" not in rows[-1]:
        return None, "redis-benchmark exit %d: %s" % (
            p.returncode, (p.stderr or p.stdout).strip()[-400:])
    row = rows[-1]
    calls, usec, failed = (s1[0] - s0[0], s1[1] - s0[1], s1[2] - s0[2])
    res = {
        "rps": float(row["rps"]),
        "p50_us": 1000 * float(row["p50_latency_ms"]),
        "p99_us": 1000 * float(row["p99_latency_ms"]),
        "p999_us": None,
        "requests": n,
        "calls": calls,
        "replies": calls,
        "cmd_calls": calls,
        "failed": failed,
        "degraded": 0,
        "usec_per_decision": usec / calls if calls else None,
        "gen_cpu": 100 * (g1 - g0) / wall,
        "agent_cpu": None,
        "sha": sha,
        "cmds": [redis_cmd,
                 "redis-cli -p %d -x SCRIPT LOAD < %s   # -> %s"
                 % (int(argv[4]), NAIVE_SCRIPT, sha),
                 quote(argv)],
    }
    res.update(extra)
    res.update(cpu)
    res["cpu_per_decision"] = 1e6 * res["redis_cpu_s"] / calls if calls else None
    return res, None


def baseline_size(ctx, row):
    """A first, short redis-benchmark run, to check that __rand_int__ was
    expanded inside the key, that every call succeeded and decided "allowed"
    (each sampled hash has spent tokens), and that the keys are the
    script's hashes. Its rate sizes the measured runs, since
    redis-benchmark stops on a request count, not on a time. Returns that
    count, or None."""
    if shutil.which("redis-benchmark") is None:
        ctx.problems.append("R1: redis-benchmark is not installed (Debian redis-tools)")
        return None
    n0 = 5000 if ctx.quick else 20000

    def inspect(rd):
        sample = rd.sample_keys(5)
        return {"dbsize": rd.command("DBSIZE"), "sample": sample,
                "types": [rd.command("TYPE", k).decode() for k in sample],
                "tokens": [(rd.command("HGET", k, "tokens") or b"").decode() or None
                           for k in sample]}

    label = "[R1] redis-benchmark check run"
    try:
        res, err = rb_once(ctx, n0, inspect)
    except (RuntimeError, OSError, ConnectionError, ProtocolError, RespError) as e:
        res, err = None, str(e)
    if res is None:
        ctx.problems.append("%s: %s" % (label, err))
        print("%s: %s" % (label, err), flush=True)
        return None
    # n0 draws from RB_KEYSPACE values: about 18000 distinct for 20000
    expect = RB_KEYSPACE * (1 - (1 - 1.0 / RB_KEYSPACE) ** n0)
    bad = [k for k, t in zip(res["sample"], res["types"])
           if not RB_KEY_RE.match(k) or t != "hash"]
    spent = [t for t in res["tokens"]
             if t is None or not float(t) < RB_CAPACITY]
    row["check"] = {"n": n0, "dbsize": res["dbsize"], "expect": expect,
                    "sample": res["sample"][:2]}
    if res["calls"] != n0 or res["failed"]:
        ctx.problems.append("%s: %d EVALSHA of %d, %d failed"
                            % (label, res["calls"], n0, res["failed"]))
    if bad or spent or abs(res["dbsize"] - expect) > 0.05 * expect:
        ctx.problems.append("%s: %d keys after %d calls (about %.0f expected), "
                            "sample %s of types %s, tokens %s"
                            % (label, res["dbsize"], n0, expect, res["sample"],
                               res["types"], res["tokens"]))
    print("%s: %.0f/s, %d keys after %d calls (about %.0f expected), e.g. %s (%s, %s tokens)"
          % (label, res["rps"], res["dbsize"], n0, expect,
             res["sample"][0] if res["sample"] else "?",
             res["types"][0] if res["types"] else "?",
             res["tokens"][0] if res["tokens"] else "?"), flush=True)
    return int(min(10000000, max(10000, round(res["rps"] * ctx.duration, -3))))


# ---- agent runs --------------------------------------------------------------

class _Flushed:
    """A cluster_bench.ClusterRedis emptied for one run (FLUSHALL on every
    master), in place of a fresh redis-server; it outlives the run."""

    def __init__(self, cluster):
        self.cluster = cluster

    def __enter__(self):
        self.cluster.flush()
        return self.cluster

    def __exit__(self, *exc):
        return False


def tls_certs_or_none(ctx):
    """Certificates for the TLS rows, made once in the run's log directory
    with the openssl command (None without it: the rows are left out)."""
    import tls_certs
    try:
        return tls_certs.Certs(ctx.logdir, "tls")
    except Exception as e:  # (no openssl: harness.Skip; a failing one: RuntimeError)
        ctx.problems.append("R2t, R3t: no certificates (%s)" % e)
        return None


def agent_cpu_per_decision(m):
    """The agent's CPU microseconds per decision of a median run."""
    if not m or m.get("agent_cpu") is None or not m.get("rps"):
        return None
    return m["agent_cpu"] / 100.0 / m["rps"] * 1e6


TLS_AGENT_CPU_TARGET = 1.3  # R3t's agent CPU per decision against R3's


def tls_verdicts(med):
    """TLS against plaintext in the same rounds: the agent's and Redis's
    CPU per decision."""
    out = []
    for plain, tls, what in (("R2", "R2t", "one FCALL per decision"),
                             ("R3", "R3t", "batched")):
        p, t = med(plain), med(tls)
        ap, at = agent_cpu_per_decision(p), agent_cpu_per_decision(t)
        if not ap or not at:
            continue
        v = ("%s (%s over TLS): the agent's CPU per decision %.2f us against %.2f us in "
             "plaintext (%s), %.2fx" % (tls, what, at, ap, plain, at / ap))
        if tls == "R3t":
            v += ("; the target of <= %.1fx is %s" % (
                TLS_AGENT_CPU_TARGET,
                # (the ratio as shown: the text cannot contradict its figure)
                "met" if round(at / ap, 2) <= TLS_AGENT_CPU_TARGET else "NOT met"))
        if p.get("cpu_per_decision") and t.get("cpu_per_decision"):
            v += ("; Redis's CPU per decision %.1f us against %.1f us, %.2fx" % (
                t["cpu_per_decision"], p["cpu_per_decision"],
                t["cpu_per_decision"] / p["cpu_per_decision"]))
        out.append(v + ".")
    return out


def agent_once(ctx, agent_args, gen, duration, redis_extra=(), before=None, after=None,
               cluster=None, tls=None):
    """One run: fresh Redis (or the cluster, flushed), fresh agent, the
    generator. Returns (result, None) or (None, error). tls (a
    tls_certs.Certs): Redis also listens with TLS on a port of its own, and
    the agent decides through that one (the run's own INFO and commandstats
    go to the plain port)."""
    tls_port = ctx.free_port() if tls is not None else None
    if tls is not None:
        redis_extra = list(redis_extra) + ["--tls-port", str(tls_port)] + tls.redis_args()
    with (_Flushed(cluster) if cluster is not None else RedisServer(ctx, redis_extra)) as rd:
        if before:
            before(rd)
        where = (["--redis-cluster", rd.seeds()] if cluster is not None
                 else ["--redis", "127.0.0.1:%d" % tls_port] + tls.agent_args()
                 if tls is not None else ["--redis", rd.addr])
        if cluster is not None:
            e0 = rd.fcall_per_master()
        with RedisAgent(ctx, agent_args + where, cluster=cluster is not None) as ag:
            m0 = ag.metrics()
            mem0 = rd.used_memory()
            win = Window(rd)
            s0 = rd.command_stats("fcall")
            a0 = sched_s(ag.agent.proc.pid)
            win.start()
            res, err = ctx.run_bench(ctx.bench_bin, ag.agent.proc.pid, ag.agent.port,
                                     gen, duration)
            if res is None:
                return None, err
            win.stop(res)
            a1 = sched_s(ag.agent.proc.pid)
            s1 = rd.command_stats("fcall")
            res["agent_wait"] = (100 * (a1[1] - a0[1]) / (time.monotonic() - win.t0)
                                 if a0 is not None and a1 is not None else None)
            m1 = ag.metrics()
            for key, name in (("decision_hist", "spoa_rl_redis_decision_duration_seconds"),
                              ("call_hist", "spoa_rl_redis_call_duration_seconds")):
                res[key] = ag.histogram(name)
            res["agent_cmd"] = quote(ag.agent.cmdline())
            res["bench_cmd"] = quote([ctx.rel(ctx.bench_bin), "--addr",
                                      "127.0.0.1:%d" % ag.agent.port] + gen + ["--json"])
            res["library"] = ag.library
            # what the server runs (every master of a cluster alike): the
            # library the agent loaded
            res["library_code"] = rd.library_code()
            if after:
                res.update(after(rd))
            res["mem_before"] = mem0
        res["agent_exit"] = ag.agent.exit_code
        if cluster is not None:
            e1 = rd.fcall_per_master()
            res["per_master"] = {p: e1[p][0] - e0[p][0] for p in e1}
            res["redis_cmds"] = rd.cmdlines()
            res["redis_port"] = None
        else:
            res["redis_cmd"] = rd.cmdline()
            res["redis_port"] = rd.port
    d = {k: m1.get(k, 0) - m0.get(k, 0) for k in m1}
    res["calls"] = int(d.get("spoa_rl_redis_calls_total", 0))
    res["replies"] = int(d.get("spoa_rl_redis_replies_total", 0))
    res["local"] = int(d.get("spoa_rl_local_refusals_total", 0))
    res["degraded"] = int(d.get("spoa_rl_degraded_total", 0))
    res["timeouts"] = int(d.get("spoa_rl_redis_timeouts_total", 0))
    res["unavailable"] = int(d.get("spoa_rl_redis_unavailable_total", 0))
    res["redis_errors"] = int(d.get("spoa_rl_redis_errors_total", 0))
    res["moved"] = int(d.get("spoa_rl_redis_moved_total", 0))
    res["topology_changes"] = int(d.get("spoa_rl_redis_topology_changes_total", 0))
    res["library_missing"] = int(d.get("spoa_rl_redis_library_missing_total", 0))
    res["cmd_calls"] = s1[0] - s0[0]
    res["failed"] = s1[2] - s0[2]
    res["usec_per_decision"] = ((s1[1] - s0[1]) / res["replies"]
                                if res["replies"] else None)
    res["cpu_per_decision"] = (1e6 * res["redis_cpu_s"] / res["replies"]
                               if res["replies"] else None)
    return res, None


def memory_once(ctx, gen, duration):
    """One run of the in-memory store (no Redis) with the generator `gen`:
    the same path as the Redis rows but for Redis, as a reference."""
    with ctx.Agent(ctx.agent_bin, ["-t", "1", "--limit", ctx.high_limit], ctx.logdir) as ag:
        i0 = machine_idle()
        res, err = ctx.run_bench(ctx.bench_bin, ag.proc.pid, ag.port, gen, duration)
        i1 = machine_idle()
        if res is None:
            return None, err
        res["agent_cmd"] = quote(ag.cmdline())
        res["bench_cmd"] = quote([ctx.rel(ctx.bench_bin), "--addr", "127.0.0.1:%d" % ag.port]
                                 + gen + ["--json"])
    res["agent_exit"] = ag.exit_code
    res.update(calls=0, replies=0, local=0, redis_cpu=None, redis_wait=None,
               cpu_per_decision=None, usec_per_decision=None, degraded=0)
    if i0 and i1 and i1[2] > i0[2]:
        res["idle"] = 100 * (i1[0] - i0[0]) / (i1[2] - i0[2])
        res["steal"] = 100 * (i1[1] - i0[1]) / (i1[2] - i0[2])
    return res, None


def within(hist, bound_s):
    """Share (0..1) of a histogram's observations at or below bound_s, or
    None without observations."""
    total = hist.get(float("inf"), 0)
    return hist.get(bound_s, 0) / total if total else None


def redis_checks(res, expect_local=False, library=None):
    """What every agent run must show; `library` the text of ratelimit.lua,
    which the server must hold after a standalone run."""
    bad = []
    if res["agent_exit"] != 0:
        bad.append("agent exit status on SIGTERM: %s" % res["agent_exit"])
    if res["degraded"] or res["timeouts"] or res["unavailable"] or res["redis_errors"]:
        bad.append("%d decisions degraded (%d past the deadline, %d without Redis, "
                   "%d error replies)" % (res["degraded"], res["timeouts"],
                                          res["unavailable"], res["redis_errors"]))
    if res["failed"]:
        bad.append("%d FCALL failed in Redis" % res["failed"])
    if res["cmd_calls"] != res["calls"]:
        bad.append("the agent counts %d calls, Redis %d FCALL"
                   % (res["calls"], res["cmd_calls"]))
    if res["library_missing"]:
        bad.append("%d calls found no library in Redis (spoa_rl_redis_library_missing_total)"
                   % res["library_missing"])
    if res.get("library") is not None and res["library"] != lua_scripts.LIBRARY_NAME:
        bad.append("the agent says it loaded library %r, not %r"
                   % (res["library"], lua_scripts.LIBRARY_NAME))
    if library is not None and "library_code" in res and res["library_code"] != library:
        bad.append("the library Redis holds after the run (FUNCTION LIST WITHCODE%s) is not "
                   "the text of %s%s" % (
                       ", on every master" if res.get("per_master") is not None else "",
                       LIBRARY, "" if res["library_code"] else
                       ": none, or not the same on every master"))
    if res["replies"] + res["local"] != res["requests"]:
        bad.append("%d answers, but %d from Redis and %d local"
                   % (res["requests"], res["replies"], res["local"]))
    if res["local"] and not expect_local:
        bad.append("%d local refusals where nothing is refused" % res["local"])
    return bad


def cpu_text(res):
    pct = lambda v: "?" if v is None else "%.0f%%" % v
    return "CPU Redis %s agent %s generator %s, Redis waited %s, machine idle %s" % (
        pct(res["redis_cpu"]), pct(res.get("agent_cpu")), pct(res["gen_cpu"]),
        pct(res.get("redis_wait")), pct(res.get("idle")))


def do_run(ctx, row, r, runs):
    """One run of a row: appends the result or records the failure."""
    label = "[%s] %s, run %d/%d" % (row["key"], row["short"], r + 1, runs)
    try:
        res, err = row["once"]()
    except (RuntimeError, OSError, ConnectionError, ProtocolError, RespError) as e:
        res, err = None, str(e)
    if res is None:
        ctx.problems.append("%s: %s" % (label, err))
        print("%s: %s" % (label, err), flush=True)
        return
    bad = row["checks"](res)
    for b in bad:
        ctx.problems.append("%s: %s" % (label, b))
    row["runs"].append(res)
    print("%s: %.0f/s p50 %s us p99 %s us, %s%d calls (%.1f decisions per call, %s us in "
          "the command and %s us of Redis CPU per decision), %s%s" % (
              label, res["rps"], ctx.fmt_us(res["p50_us"]), ctx.fmt_us(res["p99_us"]),
              "" if "limited" not in res else "429 %d of %d, " % (res["limited"],
                                                                  res["requests"]),
              res["calls"], res["replies"] / res["calls"] if res["calls"] else 0,
              "%.1f" % res["usec_per_decision"] if res.get("usec_per_decision") else "?",
              "%.1f" % res["cpu_per_decision"] if res.get("cpu_per_decision") else "?",
              cpu_text(res), "" if not bad else "  PROBLEM: " + "; ".join(bad)),
          flush=True)
    if bad and res.get("stderr"):
        print(res["stderr"], flush=True)


def interleave(ctx, rows, runs, one=None):
    """Run 1 of every row, then run 2 of every row, ...: a spell of load from
    elsewhere on the machine then hits every row alike instead of one.
    one(row, r) makes run r of a row (do_run() unless given)."""
    for r in range(runs):
        for row in rows:
            if one:
                one(row, r)
            else:
                do_run(ctx, row, r, runs)
    for row in rows:
        if row["runs"]:
            row["median"] = ctx.pick_median(row["runs"], row["open"])


@contextlib.contextmanager
def cluster_or_none(ctx, row):
    """`with cluster_or_none(ctx, row) as cl`: a running ClusterRedis, closed
    on exit, or None (the problem recorded) when none could be made."""
    try:
        cl = cluster_bench.ClusterRedis().__enter__()
    except RuntimeError as e:
        ctx.problems.append("%s: skipped: %s" % (row, e))
        print("[%s] skipped: %s" % (row, e), flush=True)
        yield None
        return
    try:
        print("[%s] Redis Cluster of %d masters on ports %s, created in %.1f s"
              % (row, len(cl.ports), ", ".join(str(p) for p in cl.ports), cl.create_s or 0),
              flush=True)
        yield cl
    finally:
        cl.close()


def every_master_called(res):
    """A cluster run: every master must have run FCALLs."""
    per = res.get("per_master", {})
    if not per or min(per.values()) == 0:
        return ["FCALL calls per master %s: some master got none" % per]
    return []


def run(ctx):
    """Runs every Redis configuration; returns the rows for report()."""
    rows = {}
    if shutil.which("redis-server") is None:
        ctx.problems.append("Redis configurations skipped: redis-server is not installed")
        return rows
    # R1 runs the naive script from its file. The agent runs the library
    # built into it: when the binary's copy can be found it must be the
    # file's text, or the figures would not describe ratelimit.lua. Every
    # standalone run also checks the library Redis holds after it.
    with open(os.path.join(ctx.root, NAIVE_SCRIPT), "rb") as f:
        ctx.naive_script = f.read()
    library = lua_scripts.library().encode()
    built = embedded_library(ctx.agent_bin)
    ctx.library_note = None
    if built is None:
        ctx.library_note = ("the library's text was not found once in %s (no \"%s\" line, "
                            "or more than one): only the runs' FUNCTION LIST compares it"
                            % (ctx.rel(ctx.agent_bin), LIBRARY_FIRST_LINE.decode()))
        print("note: " + ctx.library_note, flush=True)
    elif built != library:
        ctx.problems.append("%s embeds another version of %s than the file holds: "
                            "rebuild the agent" % (ctx.rel(ctx.agent_bin), LIBRARY))
        print("PROBLEM: " + ctx.problems[-1], flush=True)
    common = ["--requests", ctx.max_requests] + ctx.gen_args
    base_args = ["-t", "1", "--redis-timeout", REDIS_TIMEOUT_MS]
    high = base_args + ["--limit", ctx.high_limit]
    gen = common + ["--keys", KEYS, "--duration", "%g" % ctx.duration]

    def agent_row(key, short, title, agent_args, gen_args, duration, expect="pass",
                  expect_local=False, more_checks=None, open_loop=False, **kw):
        def once():
            return agent_once(ctx, agent_args, gen_args, duration, **kw)

        def checks(res):
            bad = ctx.check(res, expect) + redis_checks(res, expect_local, library)
            return bad + (more_checks(res) if more_checks else [])

        rows[key] = {"key": key, "short": short, "title": title, "runs": [],
                     "open": open_loop, "once": once, "checks": checks}
        return rows[key]

    # R1 to R3, interleaved
    r1 = {"key": "R1", "short": "redis-benchmark", "open": False, "runs": [],
          "title": "baseline: redis-benchmark, EVALSHA of the naive token bucket "
                   "(`%s`), 1 decision per call, -c %d -P %d"
                   % (NAIVE_SCRIPT, RB_CLIENTS, RB_PIPELINE)}
    rows["R1"] = r1
    n = baseline_size(ctx, r1)
    closed = []
    if n:
        r1["once"] = lambda: rb_once(ctx, n)
        r1["checks"] = lambda res: (
            [] if res["calls"] == n and not res["failed"] else
            ["%d EVALSHA of %d, %d failed" % (res["calls"], n, res["failed"])])
        closed.append(r1)
    closed.append(agent_row(
        "R2", "batch 1", "agent -t 1, one FCALL per decision (`--redis-batch 1 "
        "--redis-pipeline 1024`: every decision its own call, as many in flight as come)",
        high + ["--redis-batch", "1", "--redis-pipeline", "1024"], gen, ctx.duration))
    closed.append(agent_row(
        "R3", "batch 64", "agent -t 1, batched (`--redis-batch 64`, the default)", high, gen,
        ctx.duration))
    whole = base_args + ["--limit", WHOLE_LIMIT]
    closed.append(agent_row(
        "R2w", "batch 1 whole", "R2 with `--limit %s` (60 us per request: a whole number)"
        % WHOLE_LIMIT, whole + ["--redis-batch", "1", "--redis-pipeline", "1024"], gen,
        ctx.duration))
    closed.append(agent_row(
        "R3w", "batch 64 whole", "R3 with `--limit %s` (60 us per request: a whole number)"
        % WHOLE_LIMIT, whole, gen, ctx.duration))
    # packed buckets (--redis-packed): their cost beside R2w's and R3w's
    closed.append(agent_row(
        "R2p", "batch 1 packed", "R2w with packed buckets (`--redis-packed`)",
        whole + ["--redis-batch", "1", "--redis-pipeline", "1024", "--redis-packed"], gen,
        ctx.duration))
    closed.append(agent_row(
        "R3p", "batch 64 packed", "R3w with packed buckets (`--redis-packed`)",
        whole + ["--redis-packed"], gen, ctx.duration))
    # keys without an expiry (--redis-no-expiry), Redis evicting them
    closed.append(agent_row(
        "R2n", "batch 1 no expiry", "R2 with keys without an expiry (`--redis-no-expiry`; "
        "Redis `%s`)" % " ".join(EVICTING),
        high + ["--redis-batch", "1", "--redis-pipeline", "1024", "--redis-no-expiry"], gen,
        ctx.duration, redis_extra=EVICTING))
    closed.append(agent_row(
        "R3n", "batch 64 no expiry", "R3 with keys without an expiry (`--redis-no-expiry`; "
        "Redis `%s`)" % " ".join(EVICTING), high + ["--redis-no-expiry"], gen, ctx.duration,
        redis_extra=EVICTING))
    # TLS to Redis: R2's and R3's runs with the agent on Redis's TLS port
    certs = tls_certs_or_none(ctx)
    if certs is not None:
        closed.append(agent_row(
            "R2t", "batch 1 TLS", "R2 over TLS (`--redis-tls-ca`; Redis `--tls-port`, "
            "RSA 2048, TLS 1.3)", high + ["--redis-batch", "1", "--redis-pipeline", "1024"],
            gen, ctx.duration, tls=certs))
        closed.append(agent_row(
            "R3t", "batch 64 TLS", "R3 over TLS (`--redis-tls-ca`; Redis `--tls-port`, "
            "RSA 2048, TLS 1.3)", high, gen, ctx.duration, tls=certs))
    # C3: R3 against a Redis Cluster of three masters, in the same rounds,
    # so that its figures stand next to standalone's from the same minutes
    with cluster_or_none(ctx, "C3") as cl:
        if cl is not None:
            closed.insert(closed.index(rows["R3"]) + 1, agent_row(
                "C3", "cluster batch 64",
                "agent -t 1, batched (`--redis-batch 64`), Redis Cluster of %d "
                "masters (`--redis-cluster`)" % cluster_bench.MASTERS,
                high, gen, ctx.duration,
                more_checks=every_master_called, cluster=cl))
        interleave(ctx, closed, ctx.runs)

    # R5, R6: open loop at a share of R3's throughput
    opened = []
    for key, share in (("R5", 0.5), ("R6", 0.25)):
        if not rows["R3"].get("median"):
            ctx.problems.append("%s: skipped, R3 has no result" % key)
            continue
        rate = max(1, round(rows["R3"]["median"]["rps"] * share))
        # with the whole latency histogram, for the figure
        ogen = common + ["--keys", KEYS, "--rate", str(rate), "--histogram",
                         "--duration", "%g" % ctx.duration]
        opened.append(agent_row(
            key, "open loop %.0f%%" % (100 * share),
            "agent -t 1, defaults (batched): open loop at %.0f%% of R3" % (100 * share),
            high, ogen, ctx.duration, open_loop=True))
        # the same timetable without Redis: what the machine, the generator
        # and the SPOP path give at this rate by themselves
        ngen = ogen
        nkey = "N" + key[1:]
        rows[nkey] = {
            "key": nkey, "short": "in memory at %s's rate" % key, "open": True, "runs": [],
            "title": "agent -t 1, in-memory store (no Redis): open loop at %s's rate" % key,
            "once": (lambda g: lambda: memory_once(ctx, g, ctx.duration))(ngen),
            "checks": lambda res: ctx.check(res, "pass") + (
                [] if res["agent_exit"] == 0 else
                ["agent exit status on SIGTERM: %s" % res["agent_exit"]])}
        opened.append(rows[nkey])
    interleave(ctx, opened, ctx.runs)

    # One client over its limit: everything after the first CACHE_QUOTA
    # requests is 429, answered by Redis or by the agent's cache.
    def cache_counts(res):
        n = res["requests"]
        allowed = min(n, CACHE_QUOTA)
        if res["passed"] != allowed or res["limited"] != n - allowed:
            return ["expected %d passed and %d limited, got %d and %d"
                    % (allowed, n - allowed, res["passed"], res["limited"])]
        return []

    flood = common + ["--keys", "1", "--duration", "%g" % (ctx.duration / 2)]
    cache_rows = [
        agent_row("L1", "flood, cache", "one refused client, local refusal cache (default)",
                  base_args + ["--limit", CACHE_LIMIT], flood, ctx.duration / 2, "any",
                  expect_local=True, more_checks=cache_counts),
        agent_row("L2", "flood, no cache", "one refused client, `--no-local-cache`",
                  base_args + ["--limit", CACHE_LIMIT, "--no-local-cache"], flood,
                  ctx.duration / 2, "any", more_checks=cache_counts)]

    # CL: exactness on the cluster. CLUSTER_KEYS clients at CLUSTER_QUOTA/1h
    # flood it (their keys spread over the masters' slots): exactly
    # CLUSTER_KEYS * CLUSTER_QUOTA pass, and every master holds keys after.
    def cluster_counts(res):
        bad = []
        n = res["requests"]
        allowed = min(n, CLUSTER_KEYS * CLUSTER_QUOTA)
        if res["passed"] != allowed or res["limited"] != n - allowed:
            bad.append("expected %d passed and %d limited, got %d and %d"
                       % (allowed, n - allowed, res["passed"], res["limited"]))
        keys = res.get("keys_per_master", {})
        if sum(keys.values()) != CLUSTER_KEYS or min(keys.values() or [0]) == 0:
            bad.append("keys per master %s: expected %d in all, some on every master"
                       % (keys, CLUSTER_KEYS))
        return bad + every_master_called(res)

    with cluster_or_none(ctx, "CL") as cl:
        if cl is not None:
            cache_rows.append(agent_row(
                "CL", "cluster exactness",
                "Redis Cluster of %d masters: %d clients at `--limit %d/1h` flood it"
                % (cluster_bench.MASTERS, CLUSTER_KEYS, CLUSTER_QUOTA),
                base_args + ["--limit", "%d/1h" % CLUSTER_QUOTA],
                common + ["--keys", str(CLUSTER_KEYS), "--duration", "%g" % (ctx.duration / 2)],
                ctx.duration / 2, "any", expect_local=True, more_checks=cluster_counts,
                cluster=cl, after=lambda rd: {"keys_per_master": rd.dbsizes()}))
        interleave(ctx, cache_rows, ctx.runs)

    # Memory: every request names a new client, so every key is created
    # once (one key per limit of a client). Active expiry is paused: with
    # 100/1m a key's state is needed for only 0.6 s after its request, and
    # the figure wanted is the size of a live client, not how fast Redis
    # expires them.
    nkeys = MEM_CLIENTS
    mem_gen = ctx.gen_args + ["--keys", str(nkeys), "--requests", str(nkeys),
                              "--duration", "120"]

    def pause_expiry(rd):
        rd.command("DEBUG", "SET-ACTIVE-EXPIRE", "0")

    def measure(rd):
        # before SCAN: it deletes the expired keys it walks over
        out = {"mem_after": rd.used_memory(), "dbsize": rd.command("DBSIZE"),
               "clients": nkeys}
        db0 = rd.info("keyspace").get("db0", "")
        out["expires"] = int(re.search(r"expires=(\d+)", db0).group(1)) if db0 else 0
        sample = rd.sample_keys(5)
        out["key_sample"] = sample
        out["key_types"] = [rd.command("TYPE", k).decode() for k in sample]
        # a string's bytes; a packed buckets' set's members
        out["key_strlen"] = [rd.command("ZCARD", k) if t == "zset" else
                             rd.command("STRLEN", k)
                             for k, t in zip(sample, out["key_types"])]
        usage = [rd.command("MEMORY", "USAGE", k, "SAMPLES", "0") for k in sample]
        out["key_usage"] = usage[0] if usage else None
        if sample and out["key_types"][0] == "zset":
            out["key_value"] = rd.command("ZRANGE", sample[0], -1, -1, "WITHSCORES")[1]
            out["members"] = sum(rd.command("ZCARD", k) for k in rd.all_keys())
        elif sample:
            out["key_value"] = rd.command("GET", sample[0])
        return out

    def mem_counts(nlimits, packed, evicting):
        def check(res):
            bad = []
            # keys without an expiry exactly where the server evicts them
            want = 0 if evicting else res["dbsize"]
            if res.get("expires") != want:
                bad.append("%s of %d keys with an expiry, where %d were expected"
                           % (res.get("expires"), res["dbsize"], want))
            if res["requests"] != nkeys or res["passed"] != nkeys:
                bad.append("expected %d requests, all passed; got %d, %d passed"
                           % (nkeys, res["requests"], res["passed"]))
            if packed and res.get("members") != nkeys:
                bad.append("%s members in the packed buckets' sets after %d distinct "
                           "clients" % (res.get("members"), nkeys))
            if packed and not 0 < res["dbsize"] <= 4096:
                bad.append("DBSIZE %d: not 1 to 4096 sets" % res["dbsize"])
            if not packed and res["dbsize"] != nkeys * nlimits:
                bad.append("DBSIZE %d after %d distinct clients with %d limit%s"
                           % (res["dbsize"], nkeys, nlimits, "s" if nlimits > 1 else ""))
            want_re, want_type = (SET_RE, "zset") if packed else (KEY_RE, "string")
            shape = [(k, t) for k, t in zip(res["key_sample"], res["key_types"])
                     if not want_re.match(k) or t != want_type]
            if not res["key_sample"] or shape:
                bad.append("keys not of the agent's shape (%s): sample %s" % (
                    "sorted sets \"{TT}~IIIIIIII\"" if packed else
                    "14-byte string keys \"{TTTT}LLLLLLLL\"",
                    list(zip(res["key_sample"], res["key_types"]))))
            return bad
        return check

    mem_rows = [agent_row(key, "memory %s" % key, title, base_args + limits, mem_gen,
                          120, more_checks=mem_counts(limits.count("--limit"),
                                                      "--redis-packed" in limits, evicting),
                          redis_extra=["--enable-debug-command", "local"] + (
                              EVICTING if evicting else []),
                          before=pause_expiry, after=measure)
                for key, title, limits, evicting in MEM_LIMITS]
    interleave(ctx, mem_rows, 1)
    ctx.key_floor, why = key_floor(ctx, nkeys)
    if why:
        ctx.problems.append("the floor of a key with an expiry: %s" % why)
    else:
        print("[M0] a key of the agent's shape holding %s with an expiry, without the "
              "agent: %.0f bytes" % (FLOOR_VALUE, ctx.key_floor), flush=True)
    ctx.cluster_rows = any(rows.get(k, {}).get("runs") for k in ("C3", "CL"))
    return rows


# ---- report ----------------------------------------------------------------------

CLUSTER_PER_CALL_TARGET = 0.7


def per_core(m):
    """Decisions/s per Redis core: decisions/s over Redis CPU seconds per
    second (summed over a cluster's masters), or None."""
    if not m or not m.get("redis_cpu"):
        return None
    return m["rps"] / (m["redis_cpu"] / 100.0)


def cluster_section(ctx, rows):
    """R3 and C3 side by side, the batching target, CL's exactness."""
    c3row, clrow = rows.get("C3"), rows.get("CL")
    if not c3row and not clrow:
        return []
    med = lambda k: rows.get(k, {}).get("median")
    r3, c3, cl = med("R3"), med("C3"), med("CL")
    L = ["### Redis Cluster", ""]
    L.append("C3 is R3 with the agent on a Redis Cluster of %d masters and no replicas "
             "(`--redis-cluster`, built by `tests/e2e/redis_topology.Cluster`, every node "
             "on this machine), in the same rounds as R1 to R3: its runs alternate with "
             "R3's. The cluster is made once for the rounds and emptied (FLUSHALL on every "
             "master) before each run; it stays up, idle, during the other rows' runs. "
             "Calls are `cmdstat_fcall` calls summed over the masters (INFO "
             "commandstats), Redis CPU is `used_cpu_sys + used_cpu_user` summed over the "
             "masters (INFO cpu), both as a difference over the run; decisions/s per "
             "Redis core is decisions/s divided by Redis CPU seconds per second. In the "
             "table above, C3's Redis CPU and Redis waiting for a CPU are likewise sums "
             "over the masters, so they can pass 100%%."
             % cluster_bench.MASTERS)
    L.append("")
    L.append("| # | store | decisions/s | calls (FCALL, all masters) | decisions "
             "per call | Redis CPU us per decision | Redis CPU (% of one CPU) "
             "| decisions/s per Redis core | FCALL calls per master | degraded | moved "
             "| all runs (decisions/s; decisions per call) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for key, store in (("R3", "one redis-server"),
                       ("C3", "cluster, %d masters" % cluster_bench.MASTERS)):
        row = rows.get(key)
        m = med(key)
        if not row:
            continue
        if not m:
            L.append("| %s | %s | failed | | | | | | | | | |" % (key, store))
            continue
        pc = per_core(m)
        per = m.get("per_master")
        L.append("| %s | %s | %.0f | %d | %.1f | %s | %s | %s | %s | %d | %s | %s |" % (
            key, store, m["rps"], m["cmd_calls"],
            m["replies"] / m["cmd_calls"] if m["cmd_calls"] else 0,
            "%.1f" % m["cpu_per_decision"] if m.get("cpu_per_decision") else "-",
            _cpu(m["redis_cpu"]), "%.0f" % pc if pc else "-",
            " / ".join("%d" % per[p] for p in sorted(per)) if per else "-",
            m["degraded"], m.get("moved", "-") if key == "C3" else "-",
            ", ".join("%.0f; %.1f" % (r["rps"], r["replies"] / r["cmd_calls"]
                                      if r["cmd_calls"] else 0) for r in row["runs"])))
    L.append("")
    if r3 and c3 and r3["cmd_calls"] and c3["cmd_calls"]:
        p3, pc3 = r3["replies"] / r3["cmd_calls"], c3["replies"] / c3["cmd_calls"]
        x = pc3 / p3
        pairs = [(c["replies"] / c["cmd_calls"]) / (r["replies"] / r["cmd_calls"])
                 for r, c in zip(rows["R3"]["runs"], rows["C3"]["runs"])
                 if r["cmd_calls"] and c["cmd_calls"]]
        v = ("At the peak the cluster's batches carried %.1f decisions per call "
             "against %.1f on one redis-server: %.2fx (round by round: %s). The target, "
             "batching within %.1fx of standalone's decisions per call, is %s. "
             % (pc3, p3, x, ", ".join("%.2fx" % y for y in pairs), CLUSTER_PER_CALL_TARGET,
                "met" if x >= CLUSTER_PER_CALL_TARGET else "NOT met"))
        v += ("The agent keeps --redis-pipeline calls in flight across all %d masters, "
              "not per master, the one whose oldest decision has waited longest sending "
              "next: while calls are out, decisions for every master gather, so a call "
              "carries nearly what one call to a single server would. "
              % cluster_bench.MASTERS)
        c_r3, c_c3 = r3.get("cpu_per_decision"), c3.get("cpu_per_decision")
        if c_r3 and c_c3:
            v += ("Redis CPU per decision, summed over the masters, is %.1f us against "
                  "%.1f us (%.2fx): %.0f decisions/s per Redis core on the cluster against "
                  "%.0f on one server. " % (c_c3, c_r3, c_c3 / c_r3, per_core(c3) or 0,
                                           per_core(r3) or 0))
        v += ("Decisions/s: %.0f on the cluster, %.0f on one server (%.2fx), with Redis "
              "using %s of one CPU against %s (machine idle %s against %s): three masters "
              "can run on all of this machine's %d CPUs where one redis-server runs on one, "
              "but here they share them with the agent and the generator%s." % (
                  c3["rps"], r3["rps"], c3["rps"] / r3["rps"], _cpu(c3["redis_cpu"]),
                  _cpu(r3["redis_cpu"]), _cpu(c3.get("idle")), _cpu(r3.get("idle")),
                  os.cpu_count() or 1,
                  ", and each decision costs them more" if c_r3 and c_c3 and c_c3 > c_r3
                  else ""))
        L.append("- " + v)
    if cl:
        keys = cl.get("keys_per_master", {})
        L.append("- Exactness on the cluster (CL, every run checked): %d clients at "
                 "`--limit %d/1h` flood the agent (closed loop, %g s): exactly %d of %d "
                 "requests passed, %d answered by Redis in %d calls and %d refused "
                 "locally; keys per master after the run: %s (all %d clients, every master "
                 "holding some); FCALL calls per master: %s." % (
                     CLUSTER_KEYS, CLUSTER_QUOTA, ctx.duration / 2, cl["passed"],
                     cl["requests"], cl["replies"], cl["calls"], cl["local"],
                     " / ".join("%d" % keys[p] for p in sorted(keys)), CLUSTER_KEYS,
                     " / ".join("%d" % cl["per_master"][p] for p in sorted(cl["per_master"]))))
    elif clrow:
        L.append("- CL (exactness on the cluster): no successful run.")
    L.append("")
    return L


def _cpu(v):
    return "-" if v is None else "%.0f%%" % v


def _us(ctx, v):
    return "-" if v is None else ctx.fmt_us(v)


def ratio(m, r1, key):
    """m[key] / r1[key], or None."""
    if not m or not r1 or not m.get(key) or not r1.get(key):
        return None
    return m[key] / r1[key]


def vs_target(x, target):
    """A ratio against R1 with its target beside it."""
    if x is None:
        return "-"
    if target is None:
        return "%.2fx" % x
    # (three digits where two would round a miss onto the target)
    shown = "%.3fx" % x if round(x, 2) <= target < x else "%.2fx" % x
    return "%s (target <= %.1fx: %s)" % (shown, target, "met" if x <= target else "NOT met")


# What any key of the agent's shape with an expiry costs Redis, whatever it
# holds: `FLOOR_VALUE` is under 10,000, so Redis shares one of its integer
# objects for it (on a server without maxmemory) and allocates none.
FLOOR_VALUE, FLOOR_PX = "5", 3600000


def floor_command(n):
    """The same measurement by hand, as the report gives it."""
    return ("python3 -c 'for i in range(%d): print(\"SET {%%04d}%%08d %s PX %d\" %% "
            "(i %% 10000, i))' | redis-cli -p PORT --pipe" % (n, FLOOR_VALUE, FLOOR_PX))


def key_floor(ctx, n):
    """Bytes per key of n keys of the agent's shape ({TTTT}LLLLLLLL, 14
    bytes) holding FLOOR_VALUE with an expiry, written without the agent
    to a fresh redis-server: used_memory after over before. (None, why)
    when it cannot be measured."""
    try:
        with RedisServer(ctx) as rd:
            before = rd.used_memory()
            with Client("127.0.0.1", rd.port, timeout=30.0) as c:
                for i0 in range(0, n, 1000):
                    replies = c.pipeline([("SET", "{%04d}%08d" % (i % 10000, i), FLOOR_VALUE,
                                           "PX", FLOOR_PX)
                                          for i in range(i0, min(n, i0 + 1000))])
                    if any(r != b"OK" for r in replies):
                        return None, "a SET failed: %r" % [r for r in replies if r != b"OK"][0]
            size = rd.command("DBSIZE")
            if size != n:
                return None, "DBSIZE %d after %d SETs" % (size, n)
            return (rd.used_memory() - before) / n, None
    except (RuntimeError, OSError, ConnectionError, ProtocolError, RespError) as e:
        return None, str(e)


def floor_line(floor, m1):
    """The report's line on key_floor()'s figure, beside M1's bytes per
    client (or None)."""
    return ("- The floor of a key of the agent's shape with an expiry on this Redis: "
            "%d keys `{TTTT}LLLLLLLL` holding `%s`, a value under 10,000 that shares "
            "Redis's integer objects and has none of its own, each with `PX %d`, "
            "written without the agent to a fresh redis-server, cost %.0f bytes each "
            "(`%s`, used_memory before and after). %s%s." % (
                MEM_CLIENTS, FLOOR_VALUE, FLOOR_PX, floor, floor_command(MEM_CLIENTS),
                ("So no layout of a key per client with an expiry meets the target of "
                 "<= %d here" if floor > MEM_TARGET else
                 "So a key per client with an expiry can meet the target of <= %d here "
                 "only with a value that takes no object of its own") % MEM_TARGET,
                "" if m1 is None else "; M1 holds %.0f, %.0f bytes more (its value, a "
                "bucket's state, takes an object of its own)" % (m1, m1 - floor)))


def mem_per_client(m):
    return (m["mem_after"] - m["mem_before"]) / m["clients"] if m.get("clients") else None


def report(ctx, rows):
    """The "Redis store" section of BENCHMARKS.md, as a list of lines."""
    L = ["## Redis store", ""]
    if not rows:
        L += ["Not run (see Checks).", ""]
        return L
    med = lambda k: rows.get(k, {}).get("median")
    r1, r2, r3 = med("R1"), med("R2"), med("R3")
    f1 = lambda v: "-" if not v else "%.1f" % v
    L.append("Each run: a fresh `redis-server` (no persistence) on a free loopback port, "
             "a fresh agent `-t 1 --redis-timeout %s` and the same generator as above "
             "(%s, %s keys). The agent loads its function library (`%s`, `FUNCTION LOAD "
             "REPLACE`) and decides with `FCALL rl8_decide` (`rl8_decide_cluster` on a "
             "Cluster). Redis, the agent and the generator share the machine's CPUs. "
             "The runs of R1 to R3 and C3 (a Redis Cluster, see below) are interleaved "
             "(the first run of each, then the second of each, ...), likewise R5, N5, R6 "
             "and N6, and L1, L2 and CL, so that a spell "
             "of load from elsewhere on the machine hits them alike; the median run of "
             "each is shown."
             % (REDIS_TIMEOUT_MS, " ".join(ctx.gen_args), KEYS, LIBRARY))
    L.append("")

    L.append("### What a decision costs Redis")
    L.append("")
    L.append("R1 is the baseline: the token bucket as it is usually written for Redis "
             "(`%s`: one hash per client, TIME, HMGET, HSET, PEXPIRE), one EVALSHA per "
             "decision, driven by `redis-benchmark`. \"Redis us per decision\" is the "
             "time Redis spent in the top-level command (INFO commandstats: "
             "`cmdstat_evalsha` usec for R1, `cmdstat_fcall` usec for the agent; the "
             "commands a script calls are counted again on their own lines, which are "
             "left out) divided by the decisions; \"Redis CPU us per decision\" is "
             "Redis's CPU time over the run (INFO cpu `used_cpu_sys + used_cpu_user`) "
             "divided by the decisions. Targets against R1's us per decision: R2 (one "
             "FCALL per decision) <= %.1fx, R3 (batched) <= %.1fx; the same ratios of "
             "CPU per decision are shown beside them. R2 and R3 use `--limit %s`, whose "
             "interval (3.6 us per request, 18/5) is not a whole number of microseconds: "
             "each bucket's state carries a remainder (`A+R`), the library's general path. "
             "R2w and R3w repeat them with `--limit %s`, 60 us per request, as limits "
             "people write mostly are (100/1m, 1000/1h, 10/1s): an integer state, "
             "written with INCRBY when its expiry stays." % (
                 NAIVE_SCRIPT, TARGETS_VS_R1["R2"], TARGETS_VS_R1["R3"], ctx.high_limit,
                 WHOLE_LIMIT))
    L.append("")
    L.append("| # | configuration | decisions/s | vs R1 | decisions per call "
             "| Redis us per decision (top-level command) | vs R1 | Redis CPU us per "
             "decision | vs R1 | p50 us | p99 us | CPU Redis / agent / generator "
             "| Redis waiting for a CPU | machine idle | stolen by the host | degraded "
             "| all runs (decisions/s) |")
    L.append("|---|---|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for key in ("R1", "R2", "R2w", "R3", "R3w", "R2p", "R3p", "R2n", "R3n", "R2t", "R3t",
                "C3"):
        row = rows.get(key)
        if not row:
            continue
        m = row.get("median")
        if not m:
            L.append("| %s | %s | failed | | | | | | | | | | | | | | |" % (key, row["title"]))
            continue
        target = TARGETS_VS_R1.get(key)
        L.append("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s "
                 "| %s | %s | %s |" % (
                     key, row["title"], m["rps"],
                     "%.2fx" % (m["rps"] / r1["rps"]) if r1 else "-",
                     "%.1f" % (m["replies"] / m["calls"]) if m["calls"] else "-",
                     f1(m.get("usec_per_decision")),
                     "-" if key == "R1" else vs_target(ratio(m, r1, "usec_per_decision"),
                                                       target),
                     f1(m.get("cpu_per_decision")),
                     "-" if key == "R1" else vs_target(ratio(m, r1, "cpu_per_decision"),
                                                       target),
                     _us(ctx, m["p50_us"]), _us(ctx, m["p99_us"]),
                     "%s / %s / %s" % (_cpu(m["redis_cpu"]), _cpu(m["agent_cpu"]),
                                       _cpu(m["gen_cpu"])),
                     _cpu(m.get("redis_wait")), _cpu(m.get("idle")), _cpu(m.get("steal")),
                     "-" if key == "R1" else m["degraded"],
                     ", ".join("%.0f" % r["rps"] for r in row["runs"])))
    L.append("")

    # verdicts, computed so the text cannot drift from the figures
    verdicts = []
    if r1:
        verdicts.append(
            "R1, the naive script: %s us of Redis time in EVALSHA and %s us of Redis CPU "
            "per decision, %.0f decisions/s with Redis at %s of one CPU." % (
                f1(r1.get("usec_per_decision")), f1(r1.get("cpu_per_decision")), r1["rps"],
                _cpu(r1["redis_cpu"])))
    for key, what in (("R2", "one FCALL per decision"), ("R3", "batched"),
                      ("R2w", "one FCALL per decision, whole interval"),
                      ("R3w", "batched, whole interval"),
                      ("R2n", "one FCALL per decision, keys without an expiry"),
                      ("R3n", "batched, keys without an expiry")):
        m = med(key)
        if not m or not r1:
            continue
        target = TARGETS_VS_R1[key]
        xu, xc = ratio(m, r1, "usec_per_decision"), ratio(m, r1, "cpu_per_decision")
        if xu is None:
            continue
        v = ("%s (%s, %.1f decisions per call): %s us per decision in FCALL, %.2fx R1's: "
             "the target of <= %.1fx is %s." % (
                 key, what, m["replies"] / m["calls"] if m["calls"] else 0,
                 f1(m["usec_per_decision"]), xu, target, "met" if xu <= target else "NOT met"))
        if xc is not None:
            v += (" Counted in Redis CPU per decision (everything Redis did for it: "
                  "reading the command, the call, replying) it is %s us, %.2fx R1's (%s "
                  "by that measure)." % (f1(m["cpu_per_decision"]), xc,
                                        "met" if xc <= target else "NOT met"))
        verdicts.append(v)
    if r2 and r3:
        v = ("Batching (R3) answers %.2fx the decisions/s of one FCALL per decision (R2)"
             % (r3["rps"] / r2["rps"]))
        if r1:
            v += " and %.2fx those of the baseline R1" % (r3["rps"] / r1["rps"])
        v += "."
        if r3.get("redis_wait") is not None and r3["agent_cpu"] is not None:
            v += (" In R3 Redis was running %.0f%% and waiting for a CPU %.0f%% of the "
                  "time while the agent used %.0f%% of one%s."
                  % (r3["redis_cpu"], r3["redis_wait"], r3["agent_cpu"],
                     ": Redis, with the CPU share this machine gave it, set the pace"
                     if r3["redis_cpu"] + r3["redis_wait"] >= 90 else ""))
        verdicts.append(v)
    verdicts.extend(tls_verdicts(med))
    for v in verdicts:
        L.append("- " + v)
    if verdicts:
        L.append("")
    L.extend(figures.links(getattr(ctx, "figures", None), "redis-throughput", "redis-cost"))

    L.append("### Latency at a set rate")
    L.append("")
    L.append("Open loop: the generator sends on a fixed timetable at a share of R3's "
             "decisions/s and counts latency from the scheduled time. N5 and N6 run the "
             "same timetables against the in-memory store (no Redis), interleaved with "
             "R5 and R6. Redis CPU is percent of one CPU over the run (INFO cpu).")
    L.append("")
    L.append("| # | configuration | decisions/s | p50 us | p99 us | p99.9 us | Redis CPU "
             "(% of one CPU) | Redis waiting for a CPU | decisions per call | Redis us per "
             "decision (FCALL) | Redis CPU us per decision | CPU agent / generator "
             "| machine idle | stolen by the host | degraded | all runs (decisions/s, p99 us) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for key in ("R5", "N5", "R6", "N6"):
        row = rows.get(key)
        if not row:
            continue
        m = row.get("median")
        if not m:
            L.append("| %s | %s | failed | | | | | | | | | | | | | |" % (key, row["title"]))
            continue
        redis = key.startswith("R")
        L.append("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s "
                 "| %s | %s | %s |" % (
                     key, row["title"], m["rps"], _us(ctx, m["p50_us"]),
                     _us(ctx, m["p99_us"]), _us(ctx, m["p999_us"]), _cpu(m["redis_cpu"]),
                     _cpu(m.get("redis_wait")),
                     "%.1f" % (m["replies"] / m["calls"]) if m["calls"] else "-",
                     f1(m.get("usec_per_decision")), f1(m.get("cpu_per_decision")),
                     _cpu(m.get("agent_cpu")), _cpu(m.get("gen_cpu")), _cpu(m.get("idle")),
                     _cpu(m.get("steal")), m["degraded"] if redis else "-",
                     ", ".join("%.0f (p99 %s)" % (r["rps"], ctx.fmt_us(r["p99_us"]))
                               for r in row["runs"])))
    L.append("")
    verdicts = []
    for ol in (med("R5"), med("R6")):
        if not ol:
            continue
        half = ol is med("R5")
        v = ("At %s of R3's peak (open loop, %.0f/s) p50 is %s us and p99 %s us with Redis "
             "at %s of one CPU%s." % (
                 "half" if half else "a quarter", ol["rps"], ctx.fmt_us(ol["p50_us"]),
                 ctx.fmt_us(ol["p99_us"]), _cpu(ol["redis_cpu"]),
                 (": the target of p99 under 1 ms is %s"
                  % ("met" if ol["p99_us"] < 1000 else "NOT met")) if half else ""))
        if ol["calls"] and ol.get("cpu_per_decision") and r3:
            per_call = ol["replies"] / ol["calls"]
            r3_call = r3["replies"] / r3["calls"] if r3["calls"] else None
            v += (" %s (%.1f decisions per call against %s in R3, %.1f us of Redis CPU per "
                  "decision against %s)%s." % (
                      "Requests arriving one at a time make smaller batches"
                      if r3_call and per_call < 0.5 * r3_call else "Batches",
                      per_call, f1(r3_call), ol["cpu_per_decision"],
                      f1(r3.get("cpu_per_decision")),
                      "" if ol.get("redis_wait") is None else
                      "; Redis waited for a CPU %.0f%% of the time (machine idle %s)"
                      % (ol["redis_wait"], _cpu(ol.get("idle")))))
        ref = med("N5" if half else "N6")
        mem = getattr(ctx, "memory", {}).get("half" if half else "quarter")
        if ref:
            v += (" In the same runs (interleaved), the in-memory store on the same "
                  "timetable (%s, no Redis) had p50 %s us and p99 %s us: what the machine, "
                  "the generator and the SPOP path give at this rate by themselves." % (
                      "N5" if half else "N6", ctx.fmt_us(ref["p50_us"]),
                      ctx.fmt_us(ref["p99_us"])))
        elif mem:
            v += (" Without Redis, the in-memory store's open loop at %s of its own peak "
                  "(configuration %d above) had p50 %s us and p99 %s us in the same "
                  "invocation%s." % (
                      "half" if half else "a quarter", 5 if half else 6,
                      ctx.fmt_us(mem["p50_us"]), ctx.fmt_us(mem["p99_us"]),
                      ": the agent misses 1 ms at p99 on this machine even without "
                      "Redis, so this tail says more about the shared CPUs than about "
                      "Redis"
                      if mem["p99_us"] >= 1000 else
                      ": the part above that is the Redis path"))
        d1 = within(ol.get("decision_hist", {}), 0.001)
        c1 = within(ol.get("call_hist", {}), 0.001)
        if d1 is not None and c1 is not None:
            v += (" The agent's histograms for that run: %.1f%% of decisions had Redis's "
                  "answer within 1 ms of being submitted (%.1f%% within 250 us), and %.1f%% "
                  "of calls came back within 1 ms." % (
                      100 * d1, 100 * within(ol["decision_hist"], 0.00025), 100 * c1))
        verdicts.append(v)
    for v in verdicts:
        L.append("- " + v)
    if verdicts:
        L.append("")
    L.extend(figures.links(getattr(ctx, "figures", None), "redis-latency"))

    L.extend(cluster_section(ctx, rows))

    L.append("### Local answer for a refused client")
    L.append("")
    L.append("One client (`--keys 1`) at `--limit %s` floods the agent: %d requests pass, "
             "every later one is 429 (checked exactly). Closed loop, %g s per run."
             % (CACHE_LIMIT, CACHE_QUOTA, ctx.duration / 2))
    L.append("")
    L.append("| # | configuration | decisions/s | p50 us | p99 us | 429 answers | answered locally "
             "| calls (agent) | FCALL calls (Redis) | CPU Redis / agent | all runs |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for key in ("L1", "L2"):
        row = rows.get(key)
        if not row:
            continue
        m = row.get("median")
        if not m:
            L.append("| %s | %s | failed | | | | | | | | |" % (key, row["title"]))
            continue
        L.append("| %s | %s | %.0f | %s | %s | %d of %d | %d | %d | %d | %s / %s | %s |" % (
            key, row["title"], m["rps"], _us(ctx, m["p50_us"]), _us(ctx, m["p99_us"]),
            m["limited"], m["requests"], m["local"], m["calls"], m["cmd_calls"],
            _cpu(m["redis_cpu"]), _cpu(m["agent_cpu"]),
            ", ".join("%.0f" % r["rps"] for r in row["runs"])))
    L.append("")
    l1, l2 = med("L1"), med("L2")
    if l1 and l2:
        L.append("With the cache, %d call%s carried the first %d decisions (the "
                 "requests already in flight before the first refusal came back; the "
                 "generator keeps %s) and the agent answered the other %d itself: %.1fx "
                 "the decisions/s of asking Redis every time (L2: %d calls of about %.0f "
                 "decisions each)." % (
                     l1["calls"], "s" if l1["calls"] != 1 else "", l1["replies"],
                     "%s x %s" % (ctx.gen_args[ctx.gen_args.index("--conns") + 1],
                                  ctx.gen_args[ctx.gen_args.index("--inflight") + 1]),
                     l1["local"], l1["rps"] / l2["rps"], l2["calls"],
                     l2["replies"] / l2["calls"] if l2["calls"] else 0))
        L.append("")

    L.append("### Redis memory per tracked client")
    L.append("")
    L.append("One run each. The agent keeps one string key per limit of a client "
             "(`{TTTT}LLLLLLLL`, 14 bytes); with `--redis-packed` (M1p) a token bucket is a "
             "member of its limit's sorted set for the clients of its 12-bit tag "
             "(`{TT}~IIIIIIII`: 4096 sets per limit); in a Redis that evicts (`%s`, M1n) the "
             "agent's default (`--redis-expiry auto`) writes the keys of M1 without an "
             "expiry. `used_memory` (INFO memory) "
             "after the agent "
             "connected and loaded its library, and after it decided for %d distinct "
             "clients (one request each, all allowed); bytes per client is the "
             "difference divided by the clients, bytes per key the same divided by "
             "DBSIZE. Active expiry is paused for the measurement (`DEBUG "
             "SET-ACTIVE-EXPIRE 0`): with `100/1m` a key's state is needed only 0.6 s "
             "after its request, and the figure wanted is the size of a live client. "
             "`MEMORY USAGE` of one key is shown for comparison (it leaves out the key's "
             "share of the keyspace and expiry tables). Target with one limit: <= %d "
             "bytes per client (moonshot %d)." % (" ".join(EVICTING), MEM_CLIENTS, MEM_TARGET,
                                                   MEM_MOONSHOT))
    L.append("")
    L.append("| # | limits | clients | keys (DBSIZE) | used_memory before | after "
             "| bytes per client | target | bytes per key | MEMORY USAGE of one key "
             "| key type, value bytes (sample) | decisions/s of the fill |")
    L.append("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|---:|")
    for key in ("M1", "M2", "M1p", "M1n"):
        row = rows.get(key)
        if not row:
            continue
        m = row.get("median")
        if not m:
            L.append("| %s | %s | failed | | | | | | | | | |" % (key, row["title"]))
            continue
        pc = mem_per_client(m)
        target = "-"
        if key in ("M1", "M1p", "M1n") and pc is not None:
            target = "<= %d: %s (moonshot %d: %s)" % (
                MEM_TARGET, "met" if pc <= MEM_TARGET else "NOT met",
                MEM_MOONSHOT, "met" if pc <= MEM_MOONSHOT else "not met")
        per_key = (m["mem_after"] - m["mem_before"]) / m["dbsize"] if m["dbsize"] else None
        L.append("| %s | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s | %.0f |" % (
            key, row["title"], m["clients"], m["dbsize"], m["mem_before"], m["mem_after"],
            "-" if pc is None else "%.0f" % pc, target,
            "-" if per_key is None else "%.0f" % per_key,
            m["key_usage"] if m["key_usage"] is not None else "-",
            ", ".join("%s %s" % (t, n) for t, n in
                      zip(m["key_types"][:3], m["key_strlen"][:3])) or "-",
            m["rps"]))
    L.append("")
    for key, what in (("M1", "one key per client"),
                      ("M1p", "packed buckets (`--redis-packed`)"),
                      ("M1n", "keys without an expiry (a Redis that evicts them)")):
        m1 = med(key)
        if not m1 or mem_per_client(m1) is None:
            continue
        pc = mem_per_client(m1)
        L.append("- %s, with one limit and %s, Redis holds %.0f bytes per tracked client: "
                 "the target of <= %d is %s, the moonshot of %d %s. A sample key: `%s` = "
                 "`%s`%s, `MEMORY USAGE` %s bytes." % (
                     key, what, pc, MEM_TARGET, "met" if pc <= MEM_TARGET else "NOT met",
                     MEM_MOONSHOT, "met" if pc <= MEM_MOONSHOT else "not met",
                     m1["key_sample"][0] if m1["key_sample"] else "?",
                     (m1["key_value"] or b"").decode(errors="replace"),
                     " (a sorted set of %d buckets: the value is one's score)"
                     % m1["key_strlen"][0] if m1["key_types"][:1] == ["zset"] else "",
                     m1["key_usage"] if m1["key_usage"] is not None else "?"))
    floor = getattr(ctx, "key_floor", None)
    if floor is not None:
        m1 = med("M1")
        L.append(floor_line(floor, mem_per_client(m1) if m1 else None))
    r3w, r3p = med("R3w"), med("R3p")
    if r3w and r3p and r3w.get("usec_per_decision") and r3p.get("usec_per_decision"):
        L.append("- Packed buckets cost Redis %s us per batched decision in FCALL against "
                 "%s for keys (R3p against R3w, %.2fx; R1's %s: %.2fx), for the memory "
                 "above." % (f1(r3p["usec_per_decision"]), f1(r3w["usec_per_decision"]),
                             r3p["usec_per_decision"] / r3w["usec_per_decision"],
                             f1(r1["usec_per_decision"]) if r1 else "-",
                             r3p["usec_per_decision"] / r1["usec_per_decision"]
                             if r1 and r1.get("usec_per_decision") else 0))
    L.append("")

    L.append("### How to read it")
    L.append("")
    L.append("- R1 is Redis alone, measured by its own tool: `redis-benchmark` sends "
             "`EVALSHA` of `%s` (KEYS[1] a hash, capacity %d, refill %s per second, so "
             "nothing is refused) for one decision per call, %d clients x %d pipelined, "
             "keys `%s` drawn from %d. No agent, no SPOP. It decides less than the "
             "agent's library (one limit, no weights, Retry-After or reset); it is the "
             "usual way, the one the agent's cost per decision is compared with."
             % (NAIVE_SCRIPT, RB_CAPACITY, RB_RATE, RB_CLIENTS, RB_PIPELINE, RB_KEY,
                RB_KEYSPACE))
    L.append("- R2 asks Redis once per decision (still pipelined: every call of a loop "
             "iteration leaves in one write). R3 puts up to 64 decisions of one "
             "loop iteration in one FCALL; \"decisions per call\" is "
             "`spoa_rl_redis_replies_total / spoa_rl_redis_calls_total`, so the batches "
             "actually sent, not the maximum.")
    L.append("- \"Redis CPU us per decision\" is Redis's CPU time during the run (INFO "
             "cpu) divided by the decisions it made: everything Redis did for one "
             "decision (reading, the function, replying, expiring keys), and 1e6 divided "
             "by it is what Redis would sustain with a whole CPU. \"Redis us per decision "
             "(top-level command)\" is `cmdstat_evalsha` (R1) or `cmdstat_fcall` (the "
             "agent) usec (INFO commandstats) divided by the decisions: running the script "
             "or function, the commands it calls included, but not reading and parsing "
             "the command or sending the reply; it is wall time, so it grows when Redis "
             "is preempted on a busy machine. "
             "CPU columns are percent of one CPU during the run (Redis: INFO cpu "
             "`used_cpu_sys + used_cpu_user`; agent: /proc; generator: rusage). Redis "
             "near 100% means Redis is the bottleneck. \"Redis waiting for a CPU\" is "
             "the time its threads were runnable but not running (/proc/PID/task/*/"
             "schedstat), in percent of the run, and \"machine idle\" the idle share "
             "of all CPUs (/proc/stat); \"stolen by the host\" is the share of the "
             "virtual CPUs' time the host gave to something else (steal in /proc/stat), "
             "time in which nothing on this machine ran. Redis below 100% with a large wait and an idle "
             "machine near 0% means the machine, not Redis, set the figure (other "
             "processes, the agent and the generator took the CPUs).")
    L.append("- degraded counts decisions answered without Redis (deadline passed, no "
             "connection): it must be 0 for the row to measure Redis, and every run "
             "checks that, that the agent's calls equal Redis's FCALL count, that no call "
             "found the library missing, that the library Redis holds after a run is the "
             "text of `%s`, and that every answer came from Redis or the local cache."
             % LIBRARY)
    L.append("- R5 and R6 send on a fixed timetable and count latency from the scheduled "
             "time, like configurations 5 and 6 above; a latency includes a round trip "
             "to Redis and the wait for the loop iteration's batch. When Redis running "
             "plus Redis waiting for a CPU is near 100%, Redis had work queued the whole "
             "run: the rate was at or above what it could serve with the CPU it got, and "
             "latency is queueing. The shares within 1 ms come from the agent's histograms "
             "(`spoa_rl_redis_decision_duration_seconds`: submission to Redis's answer; "
             "`spoa_rl_redis_call_duration_seconds`: one call), which start empty "
             "with each run's fresh agent.")
    L.append("- L1 / L2: with the cache, Redis only sees the requests that arrived before "
             "the first refusal came back (the first batches in flight); after that the "
             "agent answers locally until the client's exact retry time. Without it, "
             "every request reaches Redis, batched.")
    L.append("")

    L.append("### Commands")
    L.append("")
    L.append("The median run's exact commands (ports are picked free at run time):")
    L.append("")
    for key in ("R1", "R2", "R3", "R2p", "R3p", "R2n", "R3n", "C3", "R5", "N5", "R6", "N6",
                "L1", "L2", "CL", "M1", "M2", "M1p", "M1n"):
        row = rows.get(key)
        if not row:
            continue
        m = row.get("median")
        lines = None
        if not m:
            pass
        elif key == "R1":
            lines = m["cmds"] + ["# Redis time: INFO commandstats (cmdstat_evalsha) before "
                                 "and after; CPU: INFO cpu"]
        elif key.startswith("C"):
            lines = m["redis_cmds"] + [
                "# each run: FLUSHALL on every master, then", m["agent_cmd"], m["bench_cmd"],
                "# calls per master: INFO commandstats (cmdstat_fcall) before and after; "
                "CPU: INFO cpu"]
        elif key.startswith("N"):
            lines = [m["agent_cmd"], m["bench_cmd"]]
        elif key.startswith("M"):
            cli = "redis-cli -p %d" % m["redis_port"]
            lines = [m["redis_cmd"], "%s DEBUG SET-ACTIVE-EXPIRE 0" % cli, m["agent_cmd"],
                     "%s INFO memory   # used_memory before" % cli, m["bench_cmd"],
                     "%s INFO memory; %s DBSIZE; %s SCAN 0 COUNT 100   # then TYPE, "
                     "STRLEN, MEMORY USAGE KEY SAMPLES 0 of a few keys" % (cli, cli, cli)]
        else:
            cli = "redis-cli -p %d" % m["redis_port"]
            lines = [m["redis_cmd"], m["agent_cmd"], m["bench_cmd"],
                     "# Redis time: INFO commandstats (cmdstat_fcall) before and after; "
                     "CPU: INFO cpu; %s FUNCTION LIST LIBRARYNAME %s WITHCODE after"
                     % (cli, lua_scripts.LIBRARY_NAME)]
        L += command_block(key, row["title"], lines)
    if getattr(ctx, "library_note", None):
        L.append("Note: %s." % ctx.library_note)
        L.append("")
    chk = rows.get("R1", {}).get("check")
    if chk:
        L.append("R1's key expansion was checked by a first run of %d calls: %d distinct "
                 "hashes (about %.0f expected from %d values), e.g. `%s`, each with tokens "
                 "spent." % (chk["n"], chk["dbsize"], chk["expect"], RB_KEYSPACE,
                            chk["sample"][0] if chk["sample"] else "?"))
        L.append("")
    return L
