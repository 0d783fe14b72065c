"""The end-to-end benchmarks through a real HAProxy, run by bench/run.py in
the same invocation as the others (or alone with `--only haproxy`).

Every run starts a fresh HAProxy (`nbthread 1`), a fresh agent `-t 1` and,
for R, a fresh redis-server, all on free loopback ports, then runs wrk
against HAProxy's frontend for a bounded time and stops every process
whatever happens. The rows:

  H  HAProxy without the SPOE filter: what HAProxy alone costs (context)
  F  the SPOE floor: the shipped SPOE configuration with its message
     renamed `noop`, which the agent acknowledges without deciding (as it
     does every message it does not know): HAProxy's SPOE path and the
     agent's protocol and I/O, no decision
  A  the answer floor: the shipped configuration (check-rate), the agent
     with --fixed-answer: every request gets the answer of the first one
     (the same variables M's answers set, for HAProxy to store and its
     rules to read), no decision
  M  the shipped configuration (check-rate), the in-memory store deciding,
     a limit high enough that nothing is refused
  R  the same with a fresh redis-server, default batching

The targets compare M and R with A, which differs from them only by the
decision; F, whose answer sets no variable, shows beside it what HAProxy's
own work on the variables costs.

The rows run round by round (H, F, A, M, R, then again), so that load from
elsewhere on the machine falls on all of them alike; the median run of each
is shown with every run listed. The backend answers inside HAProxy
(`http-request return status 200` in backend `app`): the request takes the
whole path a forwarded request takes up to the choice of a server, and no
application server shares the CPUs. It is the cheapest realistic backend,
and it makes the SPOE's share of HAProxy's work the largest it can be, so
the ratios to A and F are the harshest.

run(ctx) returns the rows; report(ctx, rows) returns the Markdown lines.
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
# The rows A, M and R again with this many connections: enough requests in
# flight for HAProxy's thread to set the pace with Redis too, where 50
# leave R's rate to its latency (a closed loop runs at connections over
# latency).
SAT_CONNS = 200
SAT = str(SAT_CONNS)
# Clients by API key, in turn: the agent keeps (and Redis stores) a bucket
# per key, as for a real population of clients.
KEYS = 10000
WRK_TIMEOUT = "2s"

TARGETS = (("M", 0.95), ("R", 0.8), ("M" + SAT, 0.95), ("R" + SAT, 0.8))
# A process at or above this share of one CPU is taken to set the pace.
PACE_CPU = 90
ORDER = ("H", "F", "A", "M", "R", "A" + SAT, "M" + SAT, "R" + SAT)


def floor_of(key):
    """The row key is measured against: A at its number of connections."""
    return "A" + key[1:]

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
    server agent1 127.0.0.1:%(agent_port)d check inter 2s
"""


def haproxy_cfg(port, spoe=None, agent_port=None):
    """haproxy.cfg for one run; without spoe, no SPOE filter (row H)."""
    text = CFG_HEAD % {"port": port}
    if spoe:
        text += CFG_SPOE % {"spoe": spoe}
    text += CFG_APP
    if spoe:
        text += CFG_AGENTS % {"agent_port": agent_port}
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


def once(ctx, row, workdir):
    """One run of a row: fresh Redis (R), agent (not H), HAProxy, then wrk.
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
        elif key == "A":
            ag = stack.enter_context(MemoryAgent(ctx, agent_args + ["--fixed-answer"]))
        if ag is None:
            make = haproxy_cfg
        else:
            spoe, aport = row["spoe_path"], ag.agent.port
            make = lambda port: haproxy_cfg(port, spoe, aport)
        hp = stack.enter_context(HAProxy(ctx, ctx.haproxy, workdir, make, ag))
        wrk = ["wrk", "-t", str(WRK_THREADS), "-c", str(row["conns"]), "-d", "%gs" % ctx.duration,
               "--timeout", WRK_TIMEOUT, "--latency", "-s", ctx.wrk_script,
               "http://127.0.0.1:%d/" % hp.port]
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
            return None, "wrk did not finish in %.0f s" % (ctx.duration + 30)
        wall = time.monotonic() - t0
        c1, w1, s1 = ({k: read(p) for k, p in pids.items()} for read in readers)
        g1, i1 = ctx.children_cpu_s(), redis_bench.machine_idle()
        m1 = ag.metrics() if ag else {}
        f1 = rd.command_stats() if rd else None
        res = parse_wrk(p.stdout)
        if res is None or p.returncode != 0:
            return None, "wrk exit %d, no result: %s" % (
                p.returncode, (p.stderr or p.stdout).strip()[-600:])
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
            redis_bench.quote([ctx.haproxy, "-db", "-f", hp.cfg_path]),
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
    elif key in ("M", "R"):
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
    """The CPU a request of row key costs against A's, and the rate it
    allows: the figures of the report's CPU line, or None. A closed loop
    runs at its CPU time per request over the CPUs it keeps busy, at
    best; so a row's ceiling at A's use of the CPUs, and at all of them,
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


def run(ctx):
    """Runs the rows round by round; returns them for report(), or a dict
    with only "skipped" when HAProxy or wrk is missing."""
    ctx.haproxy, skipped = haproxy_binary(os.environ.get("HAPROXY"))
    if ctx.haproxy is None:
        return {"skipped": skipped}
    if tool("wrk") is None:
        return {"skipped": "wrk is not installed (Debian package wrk; "
                           "scripts/install-deps.sh installs it)"}
    try:
        v = subprocess.run([ctx.haproxy, "-v"], capture_output=True, text=True, timeout=10)
        m = re.search(r"version (\S+)", v.stdout)
        ctx.haproxy_version = "HAProxy " + m.group(1) if m else None
    except (OSError, subprocess.TimeoutExpired):
        ctx.haproxy_version = None
    workdir = os.path.join(ctx.logdir, "haproxy")
    os.makedirs(workdir, exist_ok=True)
    ctx.wrk_script = os.path.join(workdir, "clients.lua")
    with open(ctx.wrk_script, "w") as f:
        f.write(WRK_SCRIPT % {"keys": KEYS})

    rows = {
        "H": {"title": "HAProxy alone: no SPOE filter (context)"},
        "F": {"title": "SPOE floor: message `%s`, acknowledged without a decision" % NOOP,
              "message": NOOP},
        "A": {"title": "answer floor: `check-rate` answered with the first request's "
                       "answer, no decision (`--fixed-answer`)", "message": MESSAGE},
        "M": {"title": "`check-rate`, in-memory store, nothing refused", "message": MESSAGE},
        "R": {"title": "`check-rate`, Redis (fresh redis-server), default batching, "
                       "nothing refused", "message": MESSAGE},
    }
    for key in "AMR":
        rows[key + SAT] = dict(rows[key], title="%s with %d connections" % (key, SAT_CONNS))
    for key, row in rows.items():
        row.update(key=key, runs=[], conns=SAT_CONNS if key.endswith(SAT) else WRK_CONNS)
        if "message" in row:
            row["spoe_text"] = spoe_conf(ctx.root, row["message"])
            row["spoe_path"] = os.path.join(workdir, "ratelimit-%s.conf" % row["message"])
            with open(row["spoe_path"], "w") as f:
                f.write(row["spoe_text"])
    if shutil.which("redis-server") is None:
        rows["R"]["skipped"] = rows["R" + SAT]["skipped"] = "redis-server is not installed"
        ctx.problems.append("HAProxy R: skipped, redis-server is not installed")

    for r in range(ctx.runs):
        for key in ORDER:
            row = rows[key]
            if row.get("skipped"):
                continue
            label = "[HAProxy %s] run %d/%d" % (key, r + 1, ctx.runs)
            try:
                res, err = once(ctx, row, workdir)
            except (RuntimeError, OSError, ConnectionError) as e:
                res, err = None, str(e)
            if res is None:
                ctx.problems.append("%s: %s" % (label, err))
                print("%s: %s" % (label, err), flush=True)
                continue
            res["round"] = r
            bad = checks(row, res)
            for b in bad:
                ctx.problems.append("%s: %s" % (label, b))
            row["runs"].append(res)
            print("%s: %.0f requests/s p50 %s us p99 %s us, %d requests, CPU HAProxy / "
                  "agent / Redis / wrk %s, machine idle %s%s" % (
                      label, res["rps"], _us(ctx, res["p50_us"]), _us(ctx, res["p99_us"]),
                      res["requests"], cpu_text(res), _pct(res["idle"]),
                "" if not bad else "  PROBLEM: " + "; ".join(bad)), flush=True)
            if bad:
                print(res["wrk_out"].strip(), flush=True)
    for row in rows.values():
        if row["runs"]:
            row["median"] = ctx.pick_median(row["runs"], False)
    return rows


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


def report(ctx, rows):
    """The "Through HAProxy" section of BENCHMARKS.md, as a list of lines."""
    L = ["## Through HAProxy", ""]
    if "skipped" in rows:
        L += ["Skipped: %s." % rows["skipped"], ""]
        return L
    if not any(r["runs"] for r in rows.values()):
        L += ["No run succeeded (see Checks).", ""]
        return L
    L.append("End to end: wrk sends HTTP requests to HAProxy (%s, `nbthread 1`), whose "
             "SPOE filter asks the agent (`-t 1`) about each one. Every run starts a "
             "fresh HAProxy, agent and (R) redis-server on free loopback ports; the rows "
             "run round by round (%s, then again), %d rounds of %g s, and the "
             "median run of each row is shown. HAProxy, the agent, Redis and wrk share "
             "the machine's CPUs. wrk keeps %d connections busy, and %d in A%s, M%s "
             "and R%s (the same rows with enough requests in flight for HAProxy to set "
             "R's pace too); each row is compared with A at its number of connections."
             % (getattr(ctx, "haproxy_version", None) or "haproxy", ", ".join(ORDER),
                ctx.runs, ctx.duration, WRK_CONNS, SAT_CONNS, SAT, SAT, SAT))
    L.append("")
    L.append("| # | configuration | requests/s | vs A | vs A, round by round | vs F "
             "| p50 us | p99 us "
             "| HAProxy CPU us per request | CPU HAProxy / agent / Redis / wrk "
             "| machine idle | stolen by the host | non-2xx, socket errors (all runs) "
             "| all runs (requests/s) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    f = rows["F"].get("median")
    for key in ORDER:
        row = rows[key]
        m = row.get("median")
        base = floor_of(key)
        fm = rows[base].get("median")  # the floor at this row's connections
        if not m:
            L.append("| %s | %s | %s | | | | | | | | | | | |"
                     % (key, row["title"], "skipped: " + row["skipped"]
                        if row.get("skipped") else "failed"))
            continue
        vs = "%.2fx" % (m["rps"] / fm["rps"]) if fm and key != base else "-"
        rounds = ", ".join(per_round(rows, key)) if fm and key != base else "-"
        vs_f = "%.2fx" % (m["rps"] / f["rps"]) if f and key[0] != "F" else "-"
        errs = sum(sum(r["socket_errors"].values()) for r in row["runs"])
        L.append("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d, %d | %s |"
                 % (key, row["title"], m["rps"], vs, rounds, vs_f, _us(ctx, m["p50_us"]),
            _us(ctx, m["p99_us"]),
            "-" if m["haproxy_us"] is None else "%.1f" % m["haproxy_us"], cpu_text(m),
            _pct(m["idle"]), _pct(m["steal"]),
            sum(r["non2xx"] for r in row["runs"]), errs,
            ", ".join("%.0f" % r["rps"] for r in row["runs"])))
    L.append("")
    for key, target in TARGETS:
        m = rows[key].get("median")
        base = floor_of(key)
        fm = rows[base].get("median")
        if not (m and fm):
            L.append("- %s >= %.2fx of %s: not measured." % (key, target, base))
            continue
        x = m["rps"] / fm["rps"]
        conns = rows[key]["conns"]
        L.append("- %s against %s (%d connections): %.2fx (%.0f against %.0f requests/s); "
                 "the target of at least %.2fx is %s.%s" % (
                     key, base, conns, x, m["rps"], fm["rps"], target,
                     "met" if x >= target else "NOT met",
                     " Against F, whose answer sets no variable: %.2fx." % (m["rps"] / f["rps"])
                     if f and conns == WRK_CONNS else ""))
    a = rows["A"].get("median")
    h = rows["H"].get("median")
    if h and f:
        L.append("- The SPOE floor itself: F answers %.2fx of H's requests/s (HAProxy "
                 "without the filter), and HAProxy spends %s us of CPU per request with "
                 "it against %s us without." % (
                     f["rps"] / h["rps"],
                     "-" if f["haproxy_us"] is None else "%.1f" % f["haproxy_us"],
                     "-" if h["haproxy_us"] is None else "%.1f" % h["haproxy_us"]))
    mm = rows["M"].get("median")
    if mm and f and a and mm["haproxy_us"] and f["haproxy_us"] and a["haproxy_us"]:
        L.append("- HAProxy's CPU per request is %.1f us in M, %.1f us in A (the same "
                 "answer, no decision) and %.1f us in F, whose agent answers without "
                 "variables: F to A is HAProxy's own work on the variables of the "
                 "answer (and on the rules and headers that read them), A to M what "
                 "the decision changes in HAProxy's work (its answers come later)."
                 % (mm["haproxy_us"], a["haproxy_us"], f["haproxy_us"]))
    r = rows["R"].get("median")
    if r and r["cpu"].get("haproxy") is not None and r["cpu"]["haproxy"] < PACE_CPU:
        L.append("- In R HAProxy used %.0f%% of a CPU (machine idle %s): "
                 "in a closed loop the rate is the %d connections over the latency "
                 "(%d / %s us at p50 = %.0f/s), and R's latency holds a round trip to "
                 "Redis and the wait for a batch." % (
                     r["cpu"]["haproxy"], _pct(r["idle"]), WRK_CONNS, WRK_CONNS,
                     _us(ctx, r["p50_us"]), 1e6 * WRK_CONNS / r["p50_us"]))
        split = call_split(r)
        if split:
            L.append("- Where R's round trip goes: the agent's calls carried %.1f decisions "
                     "each and took %.0f us from sent to answered on average "
                     "(`spoa_rl_redis_call_duration_seconds`), of which Redis ran the call "
                     "for %.0f us (`cmdstat_fcall` usec per call): the rest, %.0f us, is "
                     "the hops between the agent and Redis, processes that share the "
                     "machine's CPUs with HAProxy and wrk." % split)
        waits = cpu_waits(r)
        if waits:
            a = rows["A"].get("median")
            aw = (a.get("waited") or {}).get("haproxy") if a else None
            L.append("- Waiting for a CPU (runnable, not running: `/proc/PID/task/*/schedstat`) "
                     "in the same run: HAProxy %.0f%% of the run%s; the agent %.0f us and "
                     "Redis %.0f us per call on average, each woken by the other's write "
                     "while HAProxy and wrk hold the CPUs." % (
                         waits[0], " (%.0f%% in A)" % (100 * aw / a["wall"])
                         if aw is not None and a.get("wall") else "", waits[1], waits[2]))
    budget = cpu_budget(rows, "R")
    if budget:
        L.append("- What a request costs the CPUs (us of CPU per request, HAProxy + agent "
                 "+ Redis + wrk): A %s, R %s. A kept %.2f of the machine's %d CPUs busy "
                 "with its processes; at that R's cost allows %.0f requests/s (%.2fx of "
                 "A), and %.0f (%.2fx) with all of them busy. The target of %.2fx needs R's "
                 "processes to keep %.2f CPUs busy (%.0f%% of the machine), or, at A's "
                 "use, the agent and Redis to spend %.1f us per request between them "
                 "where they spend %.1f." % budget)
    kernel, extra = kernel_per_request(rows)
    if kernel:
        L.append("- Of that CPU, the kernel's (system time, `/proc/PID/stat` stime), us "
                 "per request, HAProxy / agent / Redis: %s.%s" % ("; ".join(
                     "%s %s" % (key, " / ".join("%.1f of %.1f" % (per[k][1], per[k][0]) if k in per
                                                else "-" for k in PROCS[:3]))
                     for key, per in kernel),
                     " The agent's CPU per request in R differs from M's by %+.1f us, its "
                     "kernel time by %+.1f us." % extra if extra else ""))
    slept = sleeps_per_request(rows)
    if slept:
        L.append("- Sleeps per request (each a wake-up: voluntary context switches of a "
                 "process's threads over the requests, `/proc/PID/task/*/status`), "
                 "HAProxy / agent / Redis: %s. Under one, a process handles several "
                 "requests each time it wakes (HAProxy's SPOE hands the agent several "
                 "NOTIFYs per read); near one, it pays a wake-up, mostly the kernel's "
                 "work, for nearly every request." % "; ".join(
                     "%s %s" % (key, " / ".join("%.2f" % per[k] if k in per else "-"
                                                for k in PROCS[:3]))
                     for key, per in slept))
    rs = rows["R" + SAT].get("median")
    if r and rs and rs["cpu"].get("haproxy") is not None:
        L.append("- With %d connections R%s answered %.0f requests/s with HAProxy at %.0f%% "
                 "of a CPU, against %.0f with %d: more requests in flight cover Redis's "
                 "round trip, at the price of queueing (p50 %s us against %s)." % (
                     SAT_CONNS, SAT, rs["rps"], rs["cpu"]["haproxy"], r["rps"], WRK_CONNS,
                     _us(ctx, rs["p50_us"]), _us(ctx, r["p50_us"])))
    for key in ORDER:
        m = rows[key].get("median")
        if not m:
            continue
        # Who set the pace, when one process had a CPU to itself.
        for who, name in (("wrk", "wrk"), ("haproxy", "HAProxy's thread")):
            v = m["cpu"].get(who)
            if v is not None and v >= PACE_CPU:
                L.append("- In %s's median run %s used %.0f%% of a CPU: the figure is "
                         "%s's limit on this machine as much as anything else's."
                         % (key, name, v, name))
    L.append("")
    L.extend(figures.links(getattr(ctx, "figures", None), "haproxy-throughput"))

    L.append("### How to read it")
    L.append("")
    L.append("- H is HAProxy with no SPOE filter, for context. A is the floor the agent "
             "is measured against: the same HAProxy configuration and SPOE file as M and "
             "R, and the agent started with `--fixed-answer`, which decides the first "
             "`%s` (the warm-up request) and answers every later one with that answer "
             "without deciding: HAProxy's SPOE work, the variables it sets and the rules "
             "and headers that read them, the agent's SPOP and I/O, no decision. F, for "
             "comparison, is the shipped SPOE file (`%s`) with its message renamed `%s` "
             "(`messages %s`, `spoe-message %s`), which the agent acknowledges with "
             "one action and no variable, as it does every message it does not know. "
             "M sends `%s` and the agent decides with its in-memory store; R decides "
             "with a fresh redis-server (`--redis`, default batching). Both run "
             "`--limit %s`, so nothing is refused." % (
                 MESSAGE, SPOE_CONF, NOOP, NOOP, NOOP, MESSAGE, ctx.high_limit))
    L.append("- The backend answers inside HAProxy (`http-request return status 200` in "
             "backend `app`): each request goes through the frontend, the SPOE filter, "
             "the rate-limit rules and the backend, as a forwarded request does up to "
             "the choice of a server, and no application server competes for the CPUs. "
             "That is the cheapest realistic backend, and it makes the SPOE's share of "
             "HAProxy's work the largest it can be: with a real application behind "
             "HAProxy the ratios to A and F would be closer to 1.")
    L.append("- wrk: %d thread, %d connections kept alive (%d in the rows marked %s), "
             "%g s per run, `--latency` "
             "(p50 and p99 are wrk's, from the send of a request to its answer, in "
             "microseconds), %d clients by `X-Api-Key` in turn (a bucket each, in the "
             "agent or in Redis). It is a closed loop: a row runs at its connections "
             "over its latency, which is mostly queueing behind the requests in flight "
             "once a process sets the pace; where none does (R with %d connections), "
             "the latency of a decision sets the rate, and the rows with %d show what "
             "HAProxy can do when enough requests are in flight to cover it."
             % (WRK_THREADS, WRK_CONNS, SAT_CONNS, SAT, ctx.duration, KEYS, WRK_CONNS,
                SAT_CONNS))
    L.append("- \"vs A\" and \"vs F\" compare medians (A%s for the rows with %d "
             "connections); \"round by round\" divides each run by A's run "
             "of the same round, which shows how much the machine moved between rounds. "
             "CPU is percent of one CPU during the run (/proc/PID/stat utime + stime for "
             "HAProxy, the agent and Redis; rusage of the finished child for wrk). "
             "HAProxy near 100%% means HAProxy's single thread set the pace; \"HAProxy "
             "CPU us per request\" is its CPU time over the requests wrk counted, what "
             "the SPOE (and the variables of the agent's answer, which the rules read) "
             "costs HAProxy itself whatever the pace. \"Machine idle\" is the idle "
             "share of all CPUs and \"stolen by the host\" the share the virtual "
             "machine's host gave to something else (/proc/stat)." % (SAT, SAT_CONNS))
    L.append("- Checks, every run: wrk saw no non-2xx answer and no socket error (the "
             "configuration turns an SPOE error or timeout into a 500, so a request that "
             "went on without a decision is counted); the agent's metrics show no "
             "decision in F and A and a NOTIFY per request, and in M and R a decision per "
             "request (between the requests wrk counted and as many more as it has "
             "connections, those in flight at the end), none refused, none degraded; "
             "every agent stopped cleanly on SIGTERM. A run that fails a check is listed "
             "under Checks and the exit status is 1.")
    L.append("")

    L.append("### Configuration and commands")
    L.append("")
    m = next((rows[k]["median"] for k in ("M", "R", "F") if rows[k].get("median")), None)
    if m:
        L.append("haproxy.cfg of M's median run, written to a temporary directory (A's "
                 "is the same, F's differs only in the SPOE file it names, H's has no `filter spoe`, "
                 "rate-limit rules or agents' backend):")
        L.append("")
        L.append("```")
        L.extend(m["cfg"].rstrip("\n").splitlines())
        L.append("```")
        L.append("")
    spoe = rows["M"].get("spoe_text")
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
    L.append("The median run's exact commands (ports are picked free at run time, files "
             "are in a temporary directory):")
    L.append("")
    for key in ORDER:
        row = rows[key]
        L += redis_bench.command_block(key, row["title"], row["median"]["cmds"]
                                       if row.get("median") else None)
    return L
