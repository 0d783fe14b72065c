# SPDX-License-Identifier: Apache-2.0
"""The end-to-end benchmarks through a real HAProxy, run by bench/run.py in
the same invocation as the others (or alone with `--only haproxy`), on
every HAProxy binary `--haproxy` lists (comma-separated names or paths;
without it the one HAPROXY names, as for the end-to-end tests, else
Debian's), with a table per version.

Every run starts a fresh HAProxy (`nbthread 1`), a fresh agent `-t 1` and,
for R, a fresh redis-server, all on free loopback ports, then runs wrk
against HAProxy's frontend for a second (warm_up) and then for a bounded time and stops every process
whatever happens. The rows:

  H  HAProxy without the SPOE filter: what HAProxy alone costs (context)
  F  the SPOE floor: the shipped SPOE configuration with its message
     renamed `noop`, which the agent acknowledges without deciding (as it
     does every message it does not know): HAProxy's SPOE path and the
     agent's protocol and I/O, no decision, no variable. The reference.
  A  the shipped configuration (check-rate), the agent with
     --fixed-answer: every request gets the answer of the first one, no
     decision (kept to tell the answer's cost from the decision's)
  M  the shipped configuration (check-rate), the in-memory store deciding,
     a limit high enough that nothing is refused
  T  M with SPOP over TLS: the agent with --listen-tls-cert/-key, HAProxy's
     server line `ssl verify required ca-file` (certificates made by the
     `openssl` command for the run); M against T is what TLS costs. Run
     only when asked for: `bench/run.py --only haproxy --rows F,M,T`
  R  the same with a fresh redis-server, default batching
  S  no SPOE: the same per-client limit done by HAProxy itself with a
     stick table (`track-sc0 src`, `sc_http_req_rate(0)`, `deny
     deny_status 429`), what an operator compares the agent with

The targets compare M and R with F, and HAProxy's CPU per request in M
with F's. After the closed-loop rounds, an open loop (tools/http-open-loop,
a fixed rate at half of M's median requests/s) measures the latency of F,
M and R at the same rate.

The rows run round by round (H, F, A, M, R, S for each HAProxy, then
again), so that load from elsewhere on the machine falls on all of them
alike; the median run of each is shown with every run listed. The backend
answers inside HAProxy (`http-request return status 200` in backend
`app`): the request takes the whole path a forwarded request takes up to
the choice of a server, and no application server shares the CPUs. It is
the cheapest realistic backend, and it makes the SPOE's share of HAProxy's
work the largest it can be, so the ratios to F are the harshest.

run(ctx) returns the versions and their rows; report(ctx, result) returns
the Markdown lines.
"""

import contextlib
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import figures
import redis_bench

SPOE_CONF = os.path.join("spoe-conf", "ratelimit.conf")
MESSAGE = "check-rate"
NOOP = "noop"

WRK_THREADS, WRK_CONNS = 1, 50
# Clients by API key, in turn: the agent keeps (and Redis stores) a bucket
# per key, as for a real population of clients.
KEYS = 10000
WRK_TIMEOUT = "2s"

# Each a ratio within one run, against F.
TARGETS = (("M", 0.90), ("R", 0.85))
# HAProxy's CPU per request in M at most F's plus this many microseconds.
CPU_TARGET_US = 1.5
# A process at or above this share of one CPU is taken to set the pace.
PACE_CPU = 90
ORDER = ("H", "F", "A", "M", "R", "S")
# Rows run only when --rows names them (bench/run.py), until the committed
# report has them: T, after M.
EXTRA = ("T",)
# The open loop: these rows at this share of M's median requests/s.
LATENCY_ROWS = ("F", "M", "R")
LATENCY_SHARE = 0.5
# S refuses above this many requests per hour from one source: as high as
# the agent's --limit in M and R, so nothing is refused.
STICK_LIMIT = 1000000000


def floor_of(key):
    """The row every row is measured against: F, the SPOE floor."""
    return "F"

HAPROXY_START_S = 10.0
HAPROXY_STOP_S = 5.0

WRK_SCRIPT = """\
-- %(keys)d clients, one API key each, in turn; the requests are built
-- once, so the generator spends no time formatting them during the run.
local requests, n = {}, 0
function init(args)
   for k = 1, %(keys)d do
      requests[k] = wrk.format("GET", "/", {["X-Api-Key"] = string.format("k%%05d", k)})
   end
end
function request()
   n = n %% #requests + 1
   return requests[n]
end
"""

# The fields of haproxy.cfg that change per row and run are filled in by
# haproxy_cfg(). It follows haproxy-examples/basic.cfg less the logging
# (a line per request would measure the log) and with the application
# answered in place.
CFG_HEAD = """\
global
    nbthread 1

defaults
    mode http
    timeout connect 5s
    timeout client  30s
    timeout server  30s
    timeout http-request 10s

frontend web
    bind 127.0.0.1:%(port)d
"""

CFG_SPOE = """\
    filter spoe engine ratelimit config "%(spoe)s"
    http-request return status 429 content-type application/json lf-string '{"error":"rate_limited","retry_after":%%[var(txn.rl.retry_after)]}' hdr Retry-After "%%[var(txn.rl.retry_after)]" if { var(txn.rl.status) -m int eq 429 }
    http-request return status 503 content-type application/json lf-string '{"error":"unavailable","retry_after":%%[var(txn.rl.retry_after)]}' hdr Retry-After "%%[var(txn.rl.retry_after)]" if { var(txn.rl.status) -m int eq 503 }
    # The benchmark's own rule: a request the SPOE failed on (timeout,
    # agent error) goes on in the shipped configuration; here it gets a
    # 500, so that wrk counts it among the non-2xx answers.
    http-request return status 500 if { var(txn.rl.error) -m found }
    http-after-response set-header RateLimit-Policy "%%[var(txn.rl.policy)]" if { var(txn.rl.policy) -m found }
    http-after-response set-header RateLimit "%%[var(txn.rl.ratelimit)]" if { var(txn.rl.ratelimit) -m found }
"""

CFG_STICK = """\
    # S: the same per-client limit done by HAProxy itself, no SPOE.
    stick-table type ip size 100k expire 1h store http_req_rate(1h)
    http-request track-sc0 src
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt %(limit)d }
"""

CFG_APP = """\
    default_backend app

# The application, answered by HAProxy itself in place of a server.
backend app
    http-request return status 200 content-type text/plain string "ok"
"""

CFG_AGENTS = """
backend ratelimit-agents
    mode tcp
    balance roundrobin
    option spop-check
    timeout connect 5s
    timeout server 3m
    server agent1 127.0.0.1:%(agent_port)d check inter 2s%(ssl)s
"""


def haproxy_cfg(port, spoe=None, agent_port=None, stick=False, ca_file=None):
    """haproxy.cfg for one run; without spoe, no SPOE filter (rows H and
    S), with stick the stick-table limit (row S), with ca_file SPOP over
    TLS verified against it (row T)."""
    text = CFG_HEAD % {"port": port}
    if spoe:
        text += CFG_SPOE % {"spoe": spoe}
    if stick:
        text += CFG_STICK % {"limit": STICK_LIMIT}
    text += CFG_APP
    if spoe:
        ssl = ' ssl verify required ca-file "%s"' % ca_file if ca_file else ""
        text += CFG_AGENTS % {"agent_port": agent_port, "ssl": ssl}
    return text


def spoe_conf(root, message):
    """The shipped SPOE configuration, its message renamed when message is
    not check-rate; everything else as shipped."""
    with open(os.path.join(root, SPOE_CONF)) as f:
        text = f.read()
    if message == MESSAGE:
        return text
    text, n1 = re.subn(r"^(\s*messages\s+)%s\s*$" % MESSAGE, r"\g<1>" + message, text,
                       flags=re.M)
    text, n2 = re.subn(r"^(spoe-message\s+)%s\s*$" % MESSAGE, r"\g<1>" + message, text,
                       flags=re.M)
    if (n1, n2) != (1, 1):
        raise RuntimeError("%s no longer has one `messages %s` and one `spoe-message %s` "
                           "line" % (SPOE_CONF, MESSAGE, MESSAGE))
    return text


def essential_lines(text):
    """The lines of a configuration that are not comments or blank."""
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def http_status(port):
    """The status of one GET / on HAProxy's frontend, or None."""
    req = urllib.request.Request("http://127.0.0.1:%d/" % port,
                                 headers={"X-Api-Key": "warm-up"})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError):
        return None


class HAProxy(redis_bench.PortChild):
    """haproxy -db on a configuration written for a free loopback port,
    stopped on exit from `with`. Ready once a request through it is
    answered 200 and, with an agent, once the agent saw that request."""

    what, failure, clash, stop_s = "haproxy", "did not answer 200", "bind", HAPROXY_STOP_S

    def __init__(self, ctx, binary, workdir, make_cfg, agent=None):
        super().__init__(ctx)
        self.binary = binary
        self.workdir = workdir
        self.make_cfg = make_cfg
        self.agent = agent
        self.cfg_path = None
        self.cfg_text = None

    def argv(self):
        return [self.binary, "-db", "-f", self.cfg_path]

    def cmdline(self):
        return " ".join(self.argv())

    def _spawn(self):
        self.cfg_text = self.make_cfg(self.port)
        self.cfg_path = os.path.join(self.workdir, "haproxy-%d.cfg" % self.port)
        self.log_path = os.path.join(self.workdir, "haproxy-%d.log" % self.port)
        with open(self.cfg_path, "w") as f:
            f.write(self.cfg_text)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, cwd=self.ctx.root)

    def _ready(self):
        seen0 = self._notifies()
        deadline = time.monotonic() + HAPROXY_START_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            # The first requests may meet an SPOE connection still being
            # made (500 here): try again until one is answered.
            if http_status(self.port) == 200 and (
                    self.agent is None or self._notifies() > seen0):
                return True
            time.sleep(0.05)
        return False

    def _notifies(self):
        return self.agent.metrics().get("spoa_rl_notify_total", 0) if self.agent else 0


class MemoryAgent(redis_bench.RedisAgent):
    """The agent with --metrics and the in-memory store: ready once its
    metrics endpoint answers."""

    def _wait_ready(self):
        deadline = time.monotonic() + redis_bench.READY_S
        while time.monotonic() < deadline and self.agent.proc.poll() is None:
            try:
                if "spoa_rl_notify_total" in self.metrics():
                    return self.agent.proc.poll() is None
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        return False


UNIT_US = {"us": 1.0, "ms": 1000.0, "s": 1e6, "m": 6e7}


def _dur_us(text):
    m = re.match(r"^([\d.]+)(us|ms|s|m)$", text)
    return float(m.group(1)) * UNIT_US[m.group(2)] if m else None


def parse_wrk(out):
    """wrk --latency's report as a dict, or None when it has no rate."""
    m = re.search(r"^Requests/sec:\s+([\d.]+)", out, re.M)
    n = re.search(r"^\s*(\d+) requests in ([\d.]+\w+),", out, re.M)
    if not m or not n:
        return None
    res = {"rps": float(m.group(1)), "requests": int(n.group(1)), "non2xx": 0,
           "socket_errors": {}}
    for pct, key in (("50", "p50_us"), ("90", "p90_us"), ("99", "p99_us")):
        p = re.search(r"^\s*%s%%\s+(\S+)" % pct, out, re.M)
        res[key] = _dur_us(p.group(1)) if p else None
    e = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if e:
        res["socket_errors"] = {k: int(v) for k, v in zip(
            ("connect", "read", "write", "timeout"), e.groups()) if int(v)}
    x = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if x:
        res["non2xx"] = int(x.group(1))
    return res


def during(before, after, figure=lambda v: v):
    """{process: what its figure grew by} between two readings of each
    process; None for a process either reading missed."""
    return {k: (figure(after[k]) - figure(before[k])
                if before[k] is not None and after[k] is not None else None) for k in before}


def parse_open_loop(out):
    """tools/http-open-loop's JSON line as a result like parse_wrk's, or
    None."""
    import json
    lines = out.strip().splitlines()
    try:
        j = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    if not isinstance(j, dict) or "answered" not in j:
        return None
    errs = {k: v for k, v in (("lost", j["lost"]), ("errors", j["errors"])) if v}
    return dict(j, requests=j["answered"], socket_errors=errs)


def load_command(ctx, row, port, rate=None):
    """The load of one run: wrk (closed loop), or with rate the open loop at
    that many requests/s."""
    if rate is None:
        return ["wrk", "-t", str(WRK_THREADS), "-c", str(row["conns"]), "-d",
                "%gs" % ctx.duration, "--timeout", WRK_TIMEOUT, "--latency", "-s",
                ctx.wrk_script, "http://127.0.0.1:%d/" % port]
    return [ctx.open_loop_bin, "--addr", "127.0.0.1:%d" % port, "--rate", "%d" % rate,
            "--duration", "%g" % ctx.duration, "--conns", str(row["conns"]),
            "--keys", str(KEYS)]


def warm_up(ctx, row, port):
    """A second of the row's connections before it is measured: HAProxy
    opens its connections to the agent as requests find none idle, and
    over TLS each costs a handshake, so the first requests after a start
    can pass `timeout processing` on a busy machine (docs/integration.md,
    "SPOP over TLS"). The rows measure the steady cost of a request."""
    subprocess.run(["wrk", "-t", str(WRK_THREADS), "-c", str(row["conns"]), "-d", "1s",
                    "--timeout", WRK_TIMEOUT, "-s", ctx.wrk_script, "http://127.0.0.1:%d/" % port],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=30, cwd=ctx.root)


def once(ctx, binary, row, workdir, rate=None):
    """One run of a row on one HAProxy binary: fresh Redis (R), agent (not
    H or S), HAProxy, then wrk, or the open loop at rate requests/s.
    Returns (result, None) or (None, error)."""
    key = row["key"][0]
    with contextlib.ExitStack() as stack:
        rd = ag = None
        agent_args = ["-t", "1", "--limit", ctx.high_limit]
        if key == "R":
            rd = stack.enter_context(redis_bench.RedisServer(ctx))
            ag = stack.enter_context(redis_bench.RedisAgent(ctx, agent_args + ["--redis",
                                                                                rd.addr]))
        elif key in ("F", "M"):
            ag = stack.enter_context(MemoryAgent(ctx, agent_args))
        elif key == "T":
            ag = stack.enter_context(MemoryAgent(ctx, agent_args + ctx.tls_agent_args))
        elif key == "A":
            ag = stack.enter_context(MemoryAgent(ctx, agent_args + ["--fixed-answer"]))
        if ag is None:
            make = lambda port: haproxy_cfg(port, stick=key == "S")
        else:
            spoe, aport = row["spoe_path"], ag.agent.port
            ca = ctx.tls_ca if key == "T" else None
            make = lambda port: haproxy_cfg(port, spoe, aport, ca_file=ca)
        hp = stack.enter_context(HAProxy(ctx, binary, workdir, make, ag))
        wrk = load_command(ctx, row, hp.port, rate)
        warm_up(ctx, row, hp.port)
        pids = {"haproxy": hp.proc.pid}
        if ag:
            pids["agent"] = ag.agent.proc.pid
        if rd:
            pids["redis"] = rd.proc.pid
        m0 = ag.metrics() if ag else {}
        f0 = rd.command_stats() if rd else None
        # each process's (user, system) CPU seconds, (on a CPU, waiting for
        # one) seconds and sleeps so far
        readers = (ctx.proc_times_s, redis_bench.sched_s, redis_bench.sleeps)
        c0, w0, s0 = ({k: read(p) for k, p in pids.items()} for read in readers)
        g0, i0, t0 = ctx.children_cpu_s(), redis_bench.machine_idle(), time.monotonic()
        try:
            p = subprocess.run(wrk, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=ctx.duration + 30, cwd=ctx.root)
        except subprocess.TimeoutExpired:
            return None, "%s did not finish in %.0f s" % (os.path.basename(wrk[0]),
                                                           ctx.duration + 30)
        wall = time.monotonic() - t0
        c1, w1, s1 = ({k: read(p) for k, p in pids.items()} for read in readers)
        g1, i1 = ctx.children_cpu_s(), redis_bench.machine_idle()
        m1 = ag.metrics() if ag else {}
        f1 = rd.command_stats() if rd else None
        res = parse_wrk(p.stdout) if rate is None else parse_open_loop(p.stdout)
        # the open loop's exit status 1 (a request without a 2xx answer) is
        # in its counts, which the checks report
        if res is None or p.returncode not in (0, 0 if rate is None else 1):
            return None, "%s exit %d, no result: %s" % (
                os.path.basename(wrk[0]), p.returncode, (p.stderr or p.stdout).strip()[-600:])
        cpu_s = during(c0, c1, sum)
        res["cpu"] = {k: 100 * v / wall if v is not None else None for k, v in cpu_s.items()}
        # of that, the kernel's: system time
        res["sys"] = {k: 100 * v / wall if v is not None else None
                      for k, v in during(c0, c1, lambda v: v[1]).items()}
        res["cpu"]["wrk"] = 100 * (g1 - g0) / wall
        # seconds each process was runnable without a CPU during the run
        res["waited"] = during(w0, w1, lambda v: v[1])
        # times each process went to sleep and was woken during the run
        res["sleeps"] = during(s0, s1)
        res["wall"] = wall
        ok = i0 is not None and i1 is not None and i1[2] > i0[2]
        res["idle"] = 100 * (i1[0] - i0[0]) / (i1[2] - i0[2]) if ok else None
        res["steal"] = 100 * (i1[1] - i0[1]) / (i1[2] - i0[2]) if ok else None
        hcpu = cpu_s["haproxy"]
        res["haproxy_us"] = (1e6 * hcpu / res["requests"]
                             if hcpu is not None and res["requests"] else None)
        res["metrics"] = {k: m1.get(k, 0) - m0.get(k, 0) for k in m1}
        # R: Redis's own time in the calls (cmdstat_fcall usec), beside
        # the agent's time from sending a call to its answer
        res["fcall"] = ((f1[0] - f0[0], f1[1] - f0[1]) if f0 and f1 else None)
        res["cmds"] = ([rd.cmdline()] if rd else []) + (
            [redis_bench.quote(ag.agent.cmdline())] if ag else []) + [
            redis_bench.quote([binary, "-db", "-f", hp.cfg_path]),
            redis_bench.quote(wrk)]
        res["cfg"] = hp.cfg_text
        res["wrk_out"] = p.stdout
    res["agent_exit"] = ag.agent.exit_code if ag else 0
    return res, None


def checks(row, res):
    """The problems with one run's result."""
    key, conns = row["key"][0], row["conns"]
    bad = []
    if res["requests"] == 0:
        bad.append("no request answered")
    if res["non2xx"]:
        bad.append("%d answers were not 2xx (nothing is refused here: HAProxy answers "
                   "500 when the SPOE failed or passed its `timeout processing`)"
                   % res["non2xx"])
    if res["socket_errors"]:
        bad.append("socket errors: %s" % ", ".join(
            "%s %d" % kv for kv in sorted(res["socket_errors"].items())))
    if res["agent_exit"] != 0:
        bad.append("agent exit status on SIGTERM: %s" % res["agent_exit"])
    d = res["metrics"]
    n = res["requests"]
    decisions = int(d.get("spoa_rl_decisions_total", 0))
    notifies = int(d.get("spoa_rl_notify_total", 0))
    if key == "A":
        # The warm-up request's decision is the answer kept; none after it.
        if decisions or notifies < n:
            bad.append("the agent made %d decisions and saw %d NOTIFYs for %d requests "
                       "(expected none after the warm-up, and at least as many)"
                       % (decisions, notifies, n))
    elif key == "F":
        if decisions or notifies < n:
            bad.append("the agent made %d decisions and saw %d NOTIFYs for %d requests "
                       "(expected none and at least as many)" % (decisions, notifies, n))
    elif key in ("M", "T", "R"):
        # Every request wrk counted had its decision; requests still in flight
        # when wrk stopped may have had one too.
        if not n <= decisions <= n + conns:
            bad.append("%d decisions for %d requests (expected %d to %d)"
                       % (decisions, n, n, n + conns))
        for name in ("spoa_rl_limited_total", "spoa_rl_degraded_total",
                     "spoa_rl_redis_timeouts_total", "spoa_rl_redis_unavailable_total",
                     "spoa_rl_redis_errors_total"):
            if d.get(name):
                bad.append("%s went up by %d" % (name, d[name]))
    return bad


def call_split(res):
    """(decisions per call, agent us per call, Redis us per call, the
    difference) of a run with Redis, or None without its figures."""
    d, f = res.get("metrics", {}), res.get("fcall")
    calls = d.get("spoa_rl_redis_call_duration_seconds_count", 0)
    if not f or not f[0] or not calls:
        return None
    agent_us = 1e6 * d.get("spoa_rl_redis_call_duration_seconds_sum", 0) / calls
    redis_us = f[1] / f[0]
    return (d.get("spoa_rl_decisions_total", 0) / calls, agent_us, redis_us,
            agent_us - redis_us)


def cpu_waits(res):
    """(HAProxy's share of the run spent waiting for a CPU in percent, the
    agent's and Redis's waits per Redis call in us) of a run with Redis,
    or None without their figures (a kernel without schedstat)."""
    w, calls = res.get("waited") or {}, res.get("metrics", {}).get(
        "spoa_rl_redis_call_duration_seconds_count", 0)
    if not calls or not res.get("wall") or any(w.get(k) is None
                                                for k in ("haproxy", "agent", "redis")):
        return None
    return (100 * w["haproxy"] / res["wall"], 1e6 * w["agent"] / calls,
            1e6 * w["redis"] / calls)


PROCS = ("haproxy", "agent", "redis", "wrk")


def sleeps_per_request(rows, keys=("A", "M", "R")):
    """[(row, {process: sleeps per request})] of the rows' median runs that
    have them, for HAProxy, the agent and Redis: under one, a process
    handles several requests each time it wakes; about one or more, it
    pays a wake-up (mostly the kernel's) per request."""
    out = []
    for key in keys:
        m = (rows.get(key) or {}).get("median")
        if not m or not m.get("requests"):
            continue
        s = m.get("sleeps") or {}
        per = {k: s[k] / m["requests"] for k in PROCS[:3] if s.get(k) is not None}
        if "haproxy" in per and "agent" in per:
            out.append((key, per))
    return out


def kernel_per_request(rows, keys=("A", "M", "R")):
    """[(row, {process: (us of CPU, us of it the kernel's) per request})]
    of the rows' median runs that have both, for HAProxy, the agent and
    Redis; and (us, us of it the kernel's) that the agent spends per
    request in R beyond M, or None without both rows."""
    out, per_row = [], {}
    for key in keys:
        m = (rows.get(key) or {}).get("median")
        if not m or not m.get("rps"):
            continue
        cpu, sys_ = m.get("cpu") or {}, m.get("sys") or {}
        per = {k: (1e4 * cpu[k] / m["rps"], 1e4 * sys_[k] / m["rps"]) for k in PROCS[:3]
               if cpu.get(k) is not None and sys_.get(k) is not None}
        if "haproxy" in per and "agent" in per:
            out.append((key, per))
            per_row[key] = per
    extra = None
    if "M" in per_row and "R" in per_row:
        r, m = per_row["R"]["agent"], per_row["M"]["agent"]
        extra = (r[0] - m[0], r[1] - m[1])
    return out, extra


def per_request_us(m):
    """{process: us of CPU per request} of a run, or None when a share
    is missing."""
    cpu = m.get("cpu") or {}
    if not m.get("rps") or cpu.get("haproxy") is None or cpu.get("wrk") is None:
        return None
    return {k: (1e4 * cpu[k] / m["rps"] if cpu.get(k) is not None else 0.0) for k in PROCS}


def cpu_budget(rows, key, ncpu=None):
    """The CPU a request of row key costs against F's, and the rate it
    allows: the figures of the report's CPU line, or None. A closed loop
    runs at its CPU time per request over the CPUs it keeps busy, at
    best; so a row's ceiling at F's use of the CPUs, and at all of them,
    says whether latency or CPU holds it under its target."""
    m, a = rows[key].get("median"), rows[floor_of(key)].get("median")
    target = dict(TARGETS).get(key)
    if not (m and a and target):
        return None
    pm, pa = per_request_us(m), per_request_us(a)
    if not (pm and pa):
        return None
    ncpu = ncpu or os.cpu_count() or 1
    tm, ta = sum(pm.values()), sum(pa.values())
    busy = ta * a["rps"] / 1e6  # CPUs A's processes kept busy
    want = target * a["rps"]

    def text(p):
        return "%s = %.1f" % (" + ".join("-" if not p[k] else "%.1f" % p[k] for k in PROCS),
                              sum(p.values()))
    return (text(pa), text(pm), busy, ncpu, 1e6 * busy / tm, busy / tm * 1e6 / a["rps"],
            1e6 * ncpu / tm, ncpu / tm * 1e6 / a["rps"], target, want * tm / 1e6,
            100 * want * tm / 1e6 / ncpu, 1e6 * busy / want - pm["haproxy"] - pm["wrk"],
            pm["agent"] + pm["redis"])


def tool(name, fallback=None):
    path = shutil.which(name)
    if path is None and fallback and os.access(fallback, os.X_OK):
        path = fallback
    return path


def haproxy_binary(named):
    """The HAProxy to measure and None, or None and why there is none: the
    one HAPROXY names (as for the end-to-end tests), else Debian's. A name
    that finds nothing is not replaced by another HAProxy: the report would
    show the wrong one's figures under the version asked for."""
    if named:
        path = tool(named)
        return (path, None) if path else (None, "HAPROXY=%s: not found" % named)
    path = tool("haproxy", "/usr/sbin/haproxy")
    return (path, None) if path else (None, "haproxy is not installed (Debian package haproxy)")


def haproxy_names(option, env):
    """The HAProxy binaries to measure, in order: those --haproxy lists
    (comma-separated), else the one HAPROXY names, else Debian's (None)."""
    if option:
        names = [n.strip() for n in option.split(",") if n.strip()]
        return names or [None]
    return [env or None]


def haproxy_version(binary):
    """"HAProxy 2.6.12-1+deb12u4" from `haproxy -v`, or None."""
    try:
        v = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10)
        m = re.search(r"version (\S+)", v.stdout)
        return "HAProxy " + m.group(1) if m else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def make_rows(ctx, workdir):
    """The rows of one HAProxy, without runs."""
    rows = {
        "H": {"title": "HAProxy alone: no SPOE filter (context)"},
        "F": {"title": "SPOE floor: message `%s`, acknowledged without a decision" % NOOP,
              "message": NOOP},
        "A": {"title": "`check-rate` answered with the first request's answer, no "
                       "decision (`--fixed-answer`, for diagnosis)", "message": MESSAGE},
        "M": {"title": "`check-rate`, in-memory store, nothing refused", "message": MESSAGE},
        "T": {"title": "`check-rate`, in-memory store, SPOP over TLS (HAProxy "
                       "verifies the agent's certificate), nothing refused",
              "message": MESSAGE},
        "R": {"title": "`check-rate`, Redis (fresh redis-server), default batching, "
                       "nothing refused", "message": MESSAGE},
        "S": {"title": "no SPOE: the limit in a stick table (`track-sc0 src`, "
                       "`sc_http_req_rate`, `deny` 429), nothing refused"},
    }
    for key, row in rows.items():
        row.update(key=key, runs=[], conns=WRK_CONNS)
        if "message" in row:
            row["spoe_text"] = spoe_conf(ctx.root, row["message"])
            row["spoe_path"] = os.path.join(workdir, "ratelimit-%s.conf" % row["message"])
            with open(row["spoe_path"], "w") as f:
                f.write(row["spoe_text"])
    if shutil.which("redis-server") is None:
        rows["R"]["skipped"] = "redis-server is not installed"
    if not getattr(ctx, "tls_ca", None):
        rows["T"]["skipped"] = getattr(ctx, "tls_skipped", "no certificates")
    asked = getattr(ctx, "rows", None)
    for key in rows:
        if (asked and key not in asked) or (not asked and key in EXTRA):
            rows[key]["skipped"] = "not asked for (--rows)"
    return rows


def make_certificates(ctx, workdir):
    """A CA and the agent's certificate for 127.0.0.1, for row T: sets
    ctx.tls_ca and ctx.tls_agent_args, or ctx.tls_skipped."""
    if shutil.which("openssl") is None:
        ctx.tls_skipped = "openssl is not installed"
        return
    d = os.path.join(workdir, "tls")
    os.makedirs(d, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    with open(os.path.join(d, "agent.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    for cmd in (["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                                        "-subj", "/CN=bench CA"],
                ["req"] + ec + ["-keyout", "agent.key", "-out", "agent.csr",
                                "-subj", "/CN=127.0.0.1"],
                ["x509", "-req", "-in", "agent.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "agent.ext",
                 "-out", "agent.pem"]):
        p = subprocess.run(["openssl"] + cmd, cwd=d, capture_output=True, text=True)
        if p.returncode != 0:
            ctx.tls_skipped = "openssl %s: %s" % (cmd[0], p.stderr.strip()[-300:])
            return
    ctx.tls_ca = os.path.join(d, "ca.pem")
    ctx.tls_agent_args = ["--listen-tls-cert", os.path.join(d, "agent.pem"),
                          "--listen-tls-key", os.path.join(d, "agent.key")]


def _measure(ctx, v, row, workdir, label, rate=None):
    """One run of row on version v, checked: the result, or None (its
    problem recorded)."""
    try:
        res, err = once(ctx, v["binary"], row, workdir, rate)
    except (RuntimeError, OSError, ConnectionError) as e:
        res, err = None, str(e)
    if res is None:
        ctx.problems.append("%s: %s" % (label, err))
        print("%s: %s" % (label, err), flush=True)
        return None
    bad = checks(row, res)
    for b in bad:
        ctx.problems.append("%s: %s" % (label, b))
    print("%s: %.0f requests/s p50 %s us p99 %s us%s, %d requests, CPU HAProxy / agent / "
          "Redis / load %s, machine idle %s%s" % (
              label, res["rps"], _us(ctx, res["p50_us"]), _us(ctx, res["p99_us"]),
              "" if rate is None else " p99.9 %s us" % _us(ctx, res["p999_us"]),
              res["requests"], cpu_text(res), _pct(res["idle"]),
              "" if not bad else "  PROBLEM: " + "; ".join(bad)), flush=True)
    if bad:
        print(res["wrk_out"].strip(), flush=True)
    return res


def run(ctx):
    """Runs every HAProxy's rows, round by round across the versions, then
    the open loop of each; returns {"versions": [...]} for report(), or a
    dict with only "skipped" when no HAProxy or wrk is there."""
    names = haproxy_names(getattr(ctx, "haproxy_list", None), os.environ.get("HAPROXY"))
    if tool("wrk") is None:
        return {"skipped": "wrk is not installed (Debian package wrk; "
                           "scripts/install-deps.sh installs it)"}
    workdir = os.path.join(ctx.logdir, "haproxy")
    os.makedirs(workdir, exist_ok=True)
    ctx.wrk_script = os.path.join(workdir, "clients.lua")
    with open(ctx.wrk_script, "w") as f:
        f.write(WRK_SCRIPT % {"keys": KEYS})
    ctx.open_loop_bin = os.path.join(os.path.dirname(ctx.bench_bin), "http-open-loop")
    make_certificates(ctx, workdir)
    versions = []
    for name in names:
        binary, why = haproxy_binary(name)
        if binary is None:
            # Not replaced by another HAProxy: its figures would stand under
            # the version asked for.
            ctx.problems.append("HAProxy %s: skipped, %s" % (name, why))
            versions.append({"name": name, "binary": None, "skipped": why})
            continue
        versions.append({"name": name, "binary": binary,
                         "version": haproxy_version(binary) or "HAProxy (%s)" % binary,
                         "rows": make_rows(ctx, workdir), "latency": {}})
    live = [v for v in versions if v["binary"]]
    if not live:
        return {"skipped": "; ".join(v["skipped"] for v in versions)}
    for v in live:
        if "T" in (getattr(ctx, "rows", None) or ()) and v["rows"]["T"].get("skipped"):
            ctx.problems.append("%s T: skipped, %s" % (v["version"], v["rows"]["T"]["skipped"]))
        if v["rows"]["R"].get("skipped") and not getattr(ctx, "rows", None):
            ctx.problems.append("%s R: skipped, redis-server is not installed" % v["version"])

    for r in range(ctx.runs):
        for v in live:
            for key in ORDER[:4] + EXTRA + ORDER[4:]:
                row = v["rows"][key]
                if row.get("skipped"):
                    continue
                label = "[%s %s] run %d/%d" % (v["version"], key, r + 1, ctx.runs)
                res = _measure(ctx, v, row, workdir, label)
                if res is not None:
                    res["round"] = r
                    row["runs"].append(res)
    for v in live:
        for row in v["rows"].values():
            if row["runs"]:
                row["median"] = ctx.pick_median(row["runs"], False)
    # The open loop, after every closed loop: at half of M's median rate.
    if not os.access(ctx.open_loop_bin, os.X_OK):
        ctx.latency_skipped = "%s is missing (`make tools`)" % ctx.rel(ctx.open_loop_bin)
        ctx.problems.append("HAProxy latency rows: skipped, " + ctx.latency_skipped)
        return {"versions": versions}
    for v in live:
        m = v["rows"]["M"].get("median")
        if not m:
            v["latency_skipped"] = "M has no result"
            continue
        v["latency_rate"] = max(1, round(m["rps"] * LATENCY_SHARE))
        for key in LATENCY_ROWS:
            row = v["rows"][key]
            if row.get("skipped"):
                continue
            label = "[%s %s] open loop at %d/s" % (v["version"], key, v["latency_rate"])
            res = _measure(ctx, v, row, workdir, label, v["latency_rate"])
            if res is not None:
                v["latency"][key] = res
    return {"versions": versions}


def _us(ctx, v):
    return "-" if v is None else ctx.fmt_us(v)


def _pct(v):
    return "-" if v is None else "%.0f%%" % v


def cpu_text(res):
    return " / ".join(_pct(res["cpu"].get(k)) for k in ("haproxy", "agent", "redis", "wrk"))


def per_round(rows, key):
    """key's requests/s over its floor's, round by round (runs of the same
    round)."""
    f = {r["round"]: r["rps"] for r in rows[floor_of(key)]["runs"]}
    return ["%.2fx" % (r["rps"] / f[r["round"]]) for r in rows[key]["runs"]
            if f.get(r["round"])]


def ratio_text(x, target=None):
    """A ratio as "0.92x"; with three decimals where two would show a
    ratio under its target as the target itself."""
    if target is not None and x < target and "%.2f" % x == "%.2f" % target:
        return "%.3fx" % x
    return "%.2fx" % x


def target_lines(rows):
    """[(what, figure, target, met)] of one HAProxy's rows: M and R against
    F, and HAProxy's CPU per request in M against F's; met is None when a
    row has no result."""
    f = rows["F"].get("median")
    out = []
    for key, target in TARGETS:
        m = rows[key].get("median")
        if not (m and f):
            out.append(("%s against F" % key, "not measured", ">= %.2fx" % target, None))
            continue
        x = m["rps"] / f["rps"]
        out.append(("%s against F" % key, "%s (%.0f against %.0f requests/s)"
                    % (ratio_text(x, target), m["rps"], f["rps"]), ">= %.2fx" % target,
                    x >= target))
    m = rows["M"].get("median")
    if m and f and m["haproxy_us"] is not None and f["haproxy_us"] is not None:
        d = m["haproxy_us"] - f["haproxy_us"]
        out.append(("HAProxy CPU per request in M", "%.1f us against F's %.1f (%+.1f us)"
                    % (m["haproxy_us"], f["haproxy_us"], d),
                    "<= F's + %.1f us" % CPU_TARGET_US, d <= CPU_TARGET_US))
    else:
        out.append(("HAProxy CPU per request in M", "not measured",
                    "<= F's + %.1f us" % CPU_TARGET_US, None))
    return out


def met_text(met):
    return "not measured" if met is None else ("met" if met else "not met")


def row_target(rows, key):
    """The target cell of a row of the table."""
    for what, _, target, met in target_lines(rows):
        if what.startswith(key + " against"):
            return "%s: %s" % (target, met_text(met))
    return ""


def agent_us(m):
    """The agent's CPU per request of a run, in us."""
    cpu = (m.get("cpu") or {}).get("agent")
    return 1e4 * cpu / m["rps"] if cpu is not None and m.get("rps") else float("nan")


def version_section(ctx, v):
    """One HAProxy's table, its targets, the notes on it and its latency
    rows."""
    rows = v["rows"]
    L = ["### %s (`%s`)" % (v["version"], v["binary"]), ""]
    L.append("| # | configuration | requests/s | vs F | vs F, round by round | target "
             "| HAProxy CPU us per request | p50 us | p99 us "
             "| CPU HAProxy / agent / Redis / wrk | machine idle "
             "| non-2xx, socket errors (all runs) | all runs (requests/s) |")
    L.append("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
    f = rows["F"].get("median")
    extra = tuple(k for k in EXTRA if (rows.get(k) or {}).get("runs"))
    for key in ORDER[:4] + extra + ORDER[4:]:
        row = rows[key]
        m = row.get("median")
        if not m:
            L.append("| %s | %s | %s | | | | | | | | | | |"
                     % (key, row["title"], "skipped: " + row["skipped"]
                        if row.get("skipped") else "failed"))
            continue
        vs = ratio_text(m["rps"] / f["rps"], dict(TARGETS).get(key)) \
            if f and key != "F" else "-"
        rounds = ", ".join(per_round(rows, key)) if f and key != "F" else "-"
        errs = sum(sum(r["socket_errors"].values()) for r in row["runs"])
        L.append("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %d, %d | %s |"
                 % (key, row["title"], m["rps"], vs, rounds, row_target(rows, key) or "-",
                    "-" if m["haproxy_us"] is None else "%.1f" % m["haproxy_us"],
                    _us(ctx, m["p50_us"]), _us(ctx, m["p99_us"]), cpu_text(m),
                    _pct(m["idle"]), sum(r["non2xx"] for r in row["runs"]), errs,
                    ", ".join("%.0f" % r["rps"] for r in row["runs"])))
    L.append("")
    for what, figure, target, met in target_lines(rows):
        L.append("- %s: %s; the target (%s) is %s." % (what, figure, target, met_text(met)))
    h, a, mm, st = (rows[k].get("median") for k in ("H", "A", "M", "S"))
    if h and f:
        L.append("- The SPOE floor itself: F answers %.2fx of H's requests/s (HAProxy "
                 "without the filter), and HAProxy spends %s us of CPU per request with "
                 "it against %s us without." % (
                     f["rps"] / h["rps"], "-" if f["haproxy_us"] is None
                     else "%.1f" % f["haproxy_us"],
                     "-" if h["haproxy_us"] is None else "%.1f" % h["haproxy_us"]))
    if st and mm and h and st["haproxy_us"] is not None and mm["haproxy_us"] is not None:
        L.append("- S, the limit in HAProxy's own stick table: %.0f requests/s, %.2fx of H, "
                 "%.1f us of HAProxy's CPU per request; M answers %.2fx of S's requests/s "
                 "at %.1f us." % (st["rps"], st["rps"] / h["rps"], st["haproxy_us"],
                                  mm["rps"] / st["rps"], mm["haproxy_us"]))
    if mm and f and a and mm["haproxy_us"] and f["haproxy_us"] and a["haproxy_us"]:
        L.append("- HAProxy's CPU per request is %.1f us in M, %.1f us in A (the same "
                 "answer, no decision) and %.1f us in F, whose agent answers without "
                 "variables: F to A is HAProxy's own work on the variables of the "
                 "answer (and on the rules and headers that read them), A to M what "
                 "the decision changes in HAProxy's work (when its answers come)."
                 % (mm["haproxy_us"], a["haproxy_us"], f["haproxy_us"]))
    t = (rows.get("T") or {}).get("median")
    if t and mm and t["haproxy_us"] is not None and mm["haproxy_us"] is not None:
        L.append("- SPOP over TLS: T answers %.2fx of M's requests/s (%s, round by round); "
                 "HAProxy spends %.1f us of CPU per request against %.1f us in M, the agent "
                 "%.1f us against %.1f us." % (
                     t["rps"] / mm["rps"], ", ".join(
                         "%.2fx" % (x["rps"] / y["rps"]) for x in rows["T"]["runs"]
                         for y in rows["M"]["runs"] if x["round"] == y["round"]),
                     t["haproxy_us"], mm["haproxy_us"], agent_us(t), agent_us(mm)))
    r = rows["R"].get("median")
    if r and r["cpu"].get("haproxy") is not None and r["cpu"]["haproxy"] < PACE_CPU:
        L.append("- In R HAProxy used %.0f%% of a CPU (machine idle %s): in a closed loop "
                 "the rate is the %d connections over the latency (%d / %s us at p50 = "
                 "%.0f/s), and R's latency holds a round trip to Redis and the wait for a "
                 "batch." % (r["cpu"]["haproxy"], _pct(r["idle"]), WRK_CONNS, WRK_CONNS,
                             _us(ctx, r["p50_us"]), 1e6 * WRK_CONNS / r["p50_us"]))
    split = call_split(r) if r else None
    if split:
        L.append("- Where R's round trip goes: the agent's calls carried %.1f decisions "
                 "each and took %.0f us from sent to answered on average "
                 "(`spoa_rl_redis_call_duration_seconds`), of which Redis ran the call "
                 "for %.0f us (`cmdstat_fcall` usec per call): the rest, %.0f us, is "
                 "the hops between the agent and Redis." % split)
    budget = cpu_budget(rows, "R")
    if budget:
        L.append("- What a request costs the CPUs (us of CPU per request, HAProxy + agent "
                 "+ Redis + wrk): F %s, R %s. F kept %.2f of the machine's %d CPUs busy "
                 "with its processes; at that R's cost allows %.0f requests/s (%.2fx of "
                 "F), and %.0f (%.2fx) with all of them busy. The target of %.2fx needs R's "
                 "processes to keep %.2f CPUs busy (%.0f%% of the machine), or, at F's "
                 "use, the agent and Redis to spend %.1f us per request between them "
                 "where they spend %.1f." % budget)
    kernel, _ = kernel_per_request(rows, ("F", "M", "R"))
    if kernel:
        L.append("- Of that CPU, the kernel's (system time, `/proc/PID/stat` stime), us "
                 "per request, HAProxy / agent / Redis: %s." % "; ".join(
                     "%s %s" % (key, " / ".join("%.1f of %.1f" % (per[k][1], per[k][0])
                                                if k in per else "-" for k in PROCS[:3]))
                     for key, per in kernel))
    slept = sleeps_per_request(rows, ("F", "M", "R"))
    if slept:
        L.append("- Sleeps per request (voluntary context switches over the requests, "
                 "`/proc/PID/task/*/status`), HAProxy / agent / Redis: %s. Under one, a "
                 "process handles several requests each time it wakes." % "; ".join(
                     "%s %s" % (key, " / ".join("%.2f" % per[k] if k in per else "-"
                                                for k in PROCS[:3]))
                     for key, per in slept))
    paced = [key for key in ORDER if rows[key].get("median") and
             (rows[key]["median"]["cpu"].get("haproxy") or 0) >= PACE_CPU]
    if paced:
        L.append("- HAProxy's thread used %d%% of a CPU or more in %s: there the figure is "
                 "HAProxy's limit on this machine." % (PACE_CPU, ", ".join(paced)))
    if any(met is False for *_, met in target_lines(rows)):
        L.append("- Where HAProxy's CPU goes, per function, M against F (callgrind on "
                 "HAProxy's side, a fixed number of requests): `python3 "
                 "bench/haproxy_profile.py --build %s --haproxy %s`." % (
                     ctx.rel(os.path.dirname(ctx.bench_bin)), v["binary"]))
    L.append("")
    L += latency_lines(ctx, v)
    return L


def latency_lines(ctx, v):
    """One HAProxy's open-loop table."""
    if getattr(ctx, "latency_skipped", None) or v.get("latency_skipped"):
        return ["Latency at a set rate: skipped, %s." % (
            getattr(ctx, "latency_skipped", None) or v["latency_skipped"]), ""]
    L = ["Latency at a set rate (open loop, `tools/http-open-loop`): %d requests/s, half "
         "of M's median above, for %g s, over %d connections, each time taken from when "
         "the request was due:" % (v["latency_rate"], ctx.duration, WRK_CONNS), ""]
    L.append("| # | requests/s sent | p50 us | p90 us | p99 us | p99.9 us | max us "
             "| latest send, us | HAProxy CPU us per request | CPU HAProxy / agent / Redis "
             "/ generator |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in LATENCY_ROWS:
        res = v["latency"].get(key)
        if not res:
            L.append("| %s | %s | | | | | | | | |" % (
                key, "skipped" if v["rows"][key].get("skipped") else "failed"))
            continue
        L.append("| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            key, res["rps"], _us(ctx, res["p50_us"]), _us(ctx, res["p90_us"]),
            _us(ctx, res["p99_us"]), _us(ctx, res["p999_us"]), _us(ctx, res["max_us"]),
            _us(ctx, res["max_send_lag_us"]),
            "-" if res["haproxy_us"] is None else "%.1f" % res["haproxy_us"],
            cpu_text(res)))
    L.append("")
    f, m = v["latency"].get("F"), v["latency"].get("M")
    if f and m:
        L.append("- At the same rate, M's p50 is %s us against F's %s, its p99 %s "
                 "against %s: the difference is what the decision adds to a request's "
                 "time through HAProxy (one run each, so within that run's noise)."
                 % (_us(ctx, m["p50_us"]), _us(ctx, f["p50_us"]), _us(ctx, m["p99_us"]),
                    _us(ctx, f["p99_us"])))
        L.append("")
    return L


def summary_lines(ctx, live):
    """One line per HAProxy: the ratios and the targets."""
    L = ["| HAProxy | H req/s | F req/s | M vs F | R vs F | S vs F | A vs F "
         "| HAProxy CPU us/req F / M / S | targets met |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for v in live:
        rows = v["rows"]
        med = {k: rows[k].get("median") for k in ORDER}
        f = med["F"]
        ratio = lambda k: ratio_text(med[k]["rps"] / f["rps"], dict(TARGETS).get(k)) \
            if med[k] and f else "-"
        cpu = lambda k: "%.1f" % med[k]["haproxy_us"] if med[k] and \
            med[k]["haproxy_us"] is not None else "-"
        t = target_lines(rows)
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %d of %d |" % (
            v["version"][len("HAProxy "):] if v["version"].startswith("HAProxy ")
            else v["version"], "%.0f" % med["H"]["rps"] if med["H"] else "-",
            "%.0f" % f["rps"] if f else "-", ratio("M"), ratio("R"), ratio("S"), ratio("A"),
            " / ".join(cpu(k) for k in ("F", "M", "S")),
            sum(1 for *_, met in t if met), len(t)))
    L.append("")
    return L


def report(ctx, result):
    """The "Through HAProxy" section of BENCHMARKS.md, as a list of lines."""
    L = ["## Through HAProxy", ""]
    if "skipped" in result:
        L += ["Skipped: %s." % result["skipped"], ""]
        return L
    versions = result["versions"]
    live = [v for v in versions if v["binary"]]
    if not any(r["runs"] for v in live for r in v["rows"].values()):
        L += ["No run succeeded (see Checks).", ""]
        return L
    L.append("End to end: wrk sends HTTP requests to HAProxy (`nbthread 1`), whose SPOE "
             "filter asks the agent (`-t 1`) about each one, on each HAProxy below (%s). "
             "Every run starts a fresh HAProxy, agent and (R) redis-server on free "
             "loopback ports, and a second of the same load before the measured one "
             "(HAProxy opens its connections to the agent as requests find none idle: "
             "its start is not what a row measures); the rows run round by round (%s of each HAProxy, then "
             "again), %d rounds of %g s, and the median run of each row is shown; then "
             "F, M and R once each in an open loop at half of M's rate. HAProxy, the "
             "agent, Redis and wrk share the machine's CPUs, so compare rows within a "
             "table; every row is compared with F, the SPOE floor, and the targets are "
             "ratios within the run: M >= %.2fx F, R >= %.2fx F (%d connections), "
             "HAProxy's CPU per request in M at most F's + %.1f us."
             % (", ".join(v["version"] for v in live), ", ".join(ORDER), ctx.runs,
                ctx.duration, dict(TARGETS)["M"], dict(TARGETS)["R"], WRK_CONNS,
                CPU_TARGET_US))
    L.append("")
    for v in versions:
        if not v["binary"]:
            L += ["### %s" % v["name"], "", "Skipped: %s." % v["skipped"], ""]
    L += summary_lines(ctx, live)
    L.extend(figures.links(getattr(ctx, "figures", None), "haproxy-throughput"))
    for v in live:
        L += version_section(ctx, v)

    L.append("### How to read it")
    L.append("")
    L.append("- H is HAProxy with no SPOE filter, for context. F, the floor every row is "
             "measured against, is the shipped SPOE file (`%s`) with its message renamed "
             "`%s` (`messages %s`, `spoe-message %s`), which the agent acknowledges with "
             "one action and no variable, as it does every message it does not know: "
             "HAProxy's SPOE work and the agent's SPOP and I/O, no variable, no decision. "
             "M sends `%s` and the agent decides with its in-memory store; R decides "
             "with a fresh redis-server (`--redis`, default batching). Both run "
             "`--limit %s`, so nothing is refused. A, kept for diagnosis, is M's "
             "configuration with the agent started with `--fixed-answer`: every request "
             "gets the warm-up request's answer without a decision, so F to A is what "
             "the answer's variables cost HAProxy and A to M what the decision changes. "
             "S is HAProxy alone with the same limit in a stick table (`http-request "
             "track-sc0 src`, `sc_http_req_rate(0)`, `http-request deny deny_status "
             "429`, at %d requests an hour): what an operator compares the agent with. "
             "wrk's connections all come from 127.0.0.1, so S's table holds one entry."
             % (SPOE_CONF, NOOP, NOOP, NOOP, MESSAGE, ctx.high_limit, STICK_LIMIT))
    L.append("- The backend answers inside HAProxy (`http-request return status 200` in "
             "backend `app`): each request goes through the frontend, the SPOE filter, "
             "the rate-limit rules and the backend, as a forwarded request does up to "
             "the choice of a server, and no application server competes for the CPUs. "
             "That is the cheapest realistic backend, and it makes the SPOE's share of "
             "HAProxy's work the largest it can be: with a real application behind "
             "HAProxy the ratios to F would be closer to 1.")
    L.append("- wrk: %d thread, %d connections kept alive, %g s per run, `--latency` "
             "(p50 and p99 are wrk's, from the send of a request to its answer, in "
             "microseconds), %d clients by `X-Api-Key` in turn (a bucket each, in the "
             "agent or in Redis). It is a closed loop: a row runs at its connections "
             "over its latency, mostly queueing once a process sets the pace. The open "
             "loop (`build/http-open-loop`, built from `tools/http-open-loop.c`) sends "
             "on a timetable fixed before the run, the requests taking the %d "
             "connections in turn (pipelined behind a late answer), and times each "
             "answer from when its request was due, so that a late send counts; "
             "\"latest send\" says how far behind its timetable it fell (a figure near "
             "the latencies means the generator, not HAProxy, was short of a CPU)."
             % (WRK_THREADS, WRK_CONNS, ctx.duration, KEYS, WRK_CONNS))
    L.append("- \"vs F\" compares medians; \"round by round\" divides each run by F's run "
             "of the same round, which shows how much the machine moved between rounds. "
             "CPU is percent of one CPU during the run (/proc/PID/stat utime + stime for "
             "HAProxy, the agent and Redis; rusage of the finished child for wrk). "
             "\"HAProxy CPU us per request\" is its CPU time over the requests counted, "
             "what the SPOE and the answer cost HAProxy itself whatever the pace. "
             "\"Machine idle\" is the idle share of all CPUs (/proc/stat).")
    L.append("- Checks, every run: no non-2xx answer and no socket error (the "
             "configuration turns an SPOE error or timeout into a 500, so a request that "
             "went on without a decision is counted); the agent's metrics show no "
             "decision in F and A and a NOTIFY per request, and in M and R a decision per "
             "request (between the requests counted and as many more as there are "
             "connections, those in flight at the end), none refused, none degraded; "
             "every agent stopped cleanly on SIGTERM. A run that fails a check is listed "
             "under Checks and the exit status is 1.")
    L.append("")

    L.append("### Configuration and commands")
    L.append("")
    first = live[0]["rows"]
    m = next((first[k]["median"] for k in ("M", "R", "F") if first[k].get("median")), None)
    if m:
        L.append("haproxy.cfg of M's median run on %s, written to a temporary directory "
                 "(A's is the same, F's differs only in the SPOE file it names, H's has no "
                 "`filter spoe`, rate-limit rules or agents' backend; every HAProxy runs "
                 "the same):" % live[0]["version"])
        L.append("")
        L.append("```")
        L.extend(m["cfg"].rstrip("\n").splitlines())
        L.append("```")
        L.append("")
    L.append("S's frontend has, in place of the SPOE filter and the rules that read its "
             "answer:")
    L.append("")
    L.append("```")
    L.extend((CFG_STICK % {"limit": STICK_LIMIT}).rstrip("\n").splitlines())
    L.append("```")
    L.append("")
    spoe = first["M"].get("spoe_text")
    if spoe:
        L.append("The SPOE file A, M and R load: `%s` as shipped, without its comments:"
                 % SPOE_CONF)
        L.append("")
        L.append("```")
        L.extend(essential_lines(spoe))
        L.append("```")
        L.append("")
        L.append("F's is the same with `messages %s` and `spoe-message %s`. wrk's script "
                 "(`clients.lua`):" % (NOOP, NOOP))
        L.append("")
        L.append("```lua")
        L.extend((WRK_SCRIPT % {"keys": KEYS}).rstrip("\n").splitlines())
        L.append("```")
        L.append("")
    L.append("The median run's exact commands on %s (ports are picked free at run time, "
             "files are in a temporary directory; on the other HAProxy binaries only the "
             "binary differs), then the open loop's:" % live[0]["version"])
    L.append("")
    for key in ORDER[:4] + tuple(k for k in EXTRA if (first.get(k) or {}).get("median")) + \
            ORDER[4:]:
        row = first[key]
        L += redis_bench.command_block(key, row["title"], row["median"]["cmds"]
                                       if row.get("median") else None)
    for key in LATENCY_ROWS:
        res = live[0]["latency"].get(key)
        L += redis_bench.command_block("%s, open loop" % key, first[key]["title"],
                                       res["cmds"] if res else None)
    return L
