# SPDX-License-Identifier: Apache-2.0
"""Processes for the end-to-end tests: the agent, haproxy, a small HTTP
backend, on loopback ports picked at run time.

A Harness owns everything it starts and stops all of it in close(), which
the runner always calls; an atexit hook stops whatever a crash left behind.
Each process runs in its own process group, killed as a group.

The runner (run.py) runs several tests at once, each worker process with
a range of ports of its own (free_port), and sets TEST_DEADLINES: then an
agent on Redis gets --redis-timeout REDIS_TIMEOUT unless its test gives
one, and a HAProxy on a shipped SPOE file gets a copy of it whose `timeout
processing` is SPOE_PROCESSING, so that a busy machine does not turn
decisions into fail-open or skipped ones. A test that measures time or
load is marked @serial and runs alone.
"""

import atexit
import http.client
import http.server
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, "build")  # the runner sets it from --build
HAPROXY = os.environ.get("HAPROXY", "haproxy")
BASIC_CFG = os.path.join(ROOT, "haproxy-examples", "basic.cfg")
SPOE_CONF = os.path.join(ROOT, "spoe-conf", "ratelimit.conf")
TIERS_MAP = os.path.join(ROOT, "haproxy-examples", "tiers.map")

# Set by the runner: generous deadlines where a test gives none.
TEST_DEADLINES = False
REDIS_TIMEOUT = "1000"  # ms
SPOE_PROCESSING = "1s"
REDIS_OPTIONS = ("--redis", "--redis-cluster", "--redis-shards", "--redis-sentinel")

# Lines in a log that mean something went wrong, whatever the test checks.
SANITIZER_RE = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|"
                          r"runtime error:|ThreadSanitizer|Segmentation fault")


def tail_logs(procs, tail):
    """The last `tail` lines of each process's log, under a header naming
    it, for a failure report; a log that cannot be read is left out."""
    out = []
    for p in procs:
        try:
            lines = p.log().splitlines()
        except OSError:
            continue
        out.append("---- %s (%s), last %d lines:" % (p.name, p.log_path, tail))
        out.extend(lines[-tail:])
    return "\n".join(out)


class Skip(Exception):
    """Raised by a test that cannot run here."""


def serial(fn):
    """Marks a test that measures time or load, or needs the machine to
    itself: the runner runs it after the others, alone."""
    fn.e2e_serial = True
    return fn


_live = set()


def _kill_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _stop_all_left():
    for proc in list(_live):
        _kill_group(proc, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        _live.discard(proc)


# free_port's ports: below the kernel's ephemeral range (32768 and up on
# Linux), so that no client socket holds one, and below 20000, so that a
# Redis Cluster node's bus (its port + 10000) stays out of the range too.
# Each worker of the runner (E2E_WORKER of E2E_WORKERS) has a slice of its
# own.
PORT_LO, PORT_HI = 10000, 20000
_given = set()


def _port_slice():
    try:
        n = int(os.environ.get("E2E_WORKERS", "1"))
        i = int(os.environ.get("E2E_WORKER", "0"))
    except ValueError:
        n, i = 1, 0
    n = max(1, n)
    size = (PORT_HI - PORT_LO) // n
    lo = PORT_LO + (i % n) * size
    return lo, lo + size


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, from this
    worker's slice, not given before by this process (until the slice runs
    out)."""
    lo, hi = _port_slice()
    for _ in range(2 * (hi - lo)):
        if len(_given) >= (hi - lo) // 2:
            _given.clear()
        p = random.randrange(lo, hi)
        if p in _given:
            continue
        _given.add(p)
        if _bindable(p):
            return p
    raise RuntimeError("no free port in %d-%d" % (lo, hi))


def wait_port(port, timeout=10.0, proc=None, host="127.0.0.1"):
    """Waits until something accepts on host:port. Raises if it does not
    within timeout or if proc exits first."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("process exited with %s before accepting on port %d"
                               % (proc.returncode, port))
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("nothing accepts on %s:%d after %.0fs" % (host, port, timeout))
            time.sleep(0.02)


def series(mport, name, **labels):
    """The value of the series name{labels...}, or None when absent."""
    text = http_get(mport, "/metrics").text
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^%s\{([^}]*)\} (\d+)$" % re.escape(name), line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return int(m.group(2))
    return None


def wait_for(pred, timeout, what, interval=0.05):
    """Polls pred() until it returns a true value, which it returns."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


class Proc:
    """A started process, its log file and its name."""

    def __init__(self, name, argv, log_path, env=None, cwd=None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.returncode = None
        self._log = open(log_path, "wb")
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                      start_new_session=True)
        _live.add(self.popen)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def signal(self, sig):
        self.popen.send_signal(sig)

    def stop(self, timeout=5.0):
        """SIGTERM to the group, SIGKILL after timeout. Returns the exit code
        of the main process (negative: killed by that signal)."""
        if self.popen.poll() is None:
            _kill_group(self.popen, signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(self.popen, signal.SIGKILL)
                self.popen.wait(timeout=5)
        # Children left in the group (old haproxy workers) go too.
        _kill_group(self.popen, signal.SIGKILL)
        _live.discard(self.popen)
        self._log.close()
        self.returncode = self.popen.returncode
        return self.returncode


class Agent(Proc):
    """The agent on a port the kernel picks (--listen 127.0.0.1:0), read back
    from its log: no window in which another process can take the port."""

    LISTEN_RE = re.compile(r"listening on 127\.0\.0\.1:(\d+)")

    def __init__(self, h, args, name, prefix=()):
        binary = os.path.join(BUILD, "spoa-ratelimit")
        if not os.access(binary, os.X_OK):
            raise RuntimeError("%s is missing: build it with `make agent`" % binary)
        args = list(args)
        if (TEST_DEADLINES and "--redis-timeout" not in args
                and any(a in REDIS_OPTIONS for a in args)):
            args += ["--redis-timeout", REDIS_TIMEOUT]
        argv = list(prefix) + [binary, "--listen", "127.0.0.1:0"] + args
        super().__init__(name, argv, os.path.join(h.dir, name + ".log"))
        wait_for(lambda: self.LISTEN_RE.search(self.log()) or not self.alive(), 10,
                 "%s to log 'listening on'" % name)
        m = self.LISTEN_RE.search(self.log())
        if not m:
            raise AssertionError("%s did not start:\n%s" % (name, self.log()))
        self.port = int(m.group(1))
        wait_port(self.port, 5, self.popen)


def sanitized_build():
    """Whether the agent under test is built with AddressSanitizer."""
    return "libasan" in subprocess.run(["ldd", os.path.join(BUILD, "spoa-ratelimit")],
                                       capture_output=True, text=True).stdout


def rss_kb(pid):
    """A process's resident memory, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def answer_ok(handler, status=200, headers=()):
    """What the tests' backends answer, from an http.server handler: status
    with the body "ok\\n" (none to a HEAD), and more headers (name, value)."""
    body = b"ok\n"
    handler.send_response(status)
    handler.send_header("Content-Type", "text/plain")
    handler.send_header("Content-Length", str(len(body)))
    for name, value in headers:
        handler.send_header(name, value)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


class HttpServer:
    """A test's HTTP server on a free loopback port, served by a thread of
    its own: serve() starts it with a handler class, stop() ends it."""

    def serve(self, handler, request_queue_size=5):
        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a client gone mid-request (haproxy stopping) is normal

        Server.request_queue_size = request_queue_size
        self.server = Server(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class Backend(HttpServer):
    """A threaded HTTP server answering 200 "ok\\n" to everything; counts
    requests per path. A path with a segment "slow-MS" answers after MS
    milliseconds; one with "status-NNN" answers with that status; one with
    "tokens-X" sets the response header x-tokens-used: X (what a request
    cost, for a charge). Counts the requests it serves at once (inflight,
    most_inflight)."""

    def __init__(self):
        self.count = 0
        self.paths = []
        self.inflight = 0
        self.most_inflight = 0
        self.lock = threading.Lock()
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self):
                with backend.lock:
                    backend.count += 1
                    backend.paths.append(self.path)
                    backend.inflight += 1
                    backend.most_inflight = max(backend.most_inflight, backend.inflight)
                status = 200
                tokens = None
                try:
                    for seg in self.path.split("?")[0].split("/"):
                        if seg.startswith("slow-"):
                            time.sleep(int(seg[5:]) / 1000.0)
                        elif seg.startswith("status-"):
                            status = int(seg[7:])
                        elif seg.startswith("tokens-"):
                            tokens = seg[7:]
                finally:
                    with backend.lock:
                        backend.inflight -= 1
                answer_ok(self, status,
                          [("x-tokens-used", tokens)] if tokens is not None else [])

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

            def log_message(self, *args):
                pass

        self.serve(Handler)


class HAProxy(Proc):
    """haproxy -W -db on a configuration whose addresses come from RL_*
    environment variables (see haproxy-examples/basic.cfg), with a master
    CLI socket that tells when the master can take a reload signal."""

    def __init__(self, h, agent_port, app_port, cfg=BASIC_CFG, env=None, name="haproxy"):
        self.port = free_port()
        self.stats_port = free_port()
        self.master_sock = os.path.join(h.dir, name + "-master.sock")
        e = dict(os.environ)
        e.update({
            "RL_FRONTEND": "127.0.0.1:%d" % self.port,
            "RL_APP": "127.0.0.1:%d" % app_port,
            "RL_AGENT": "127.0.0.1:%d" % agent_port,
            "RL_SPOE_CONF": SPOE_CONF,
            "RL_TIERS_MAP": TIERS_MAP,
            "RL_STATS": "127.0.0.1:%d" % self.stats_port,
            "RL_CHECK_INTER": "200ms",
        })
        e.update(env or {})
        if shutil.which(HAPROXY) is None:
            raise Skip("haproxy is not installed")
        if TEST_DEADLINES:
            e["RL_SPOE_CONF"] = generous_spoe(h, e["RL_SPOE_CONF"])
        super().__init__(name, [HAPROXY, "-W", "-db", "-S", self.master_sock, "-f", cfg],
                         os.path.join(h.dir, name + ".log"), env=e, cwd=h.dir)
        wait_port(self.port, 10, self.popen)
        wait_port(self.stats_port, 10, self.popen)
        self._wait_master(lambda n: n is not None, "the haproxy master to be ready")

    def master_cli(self, cmd, timeout=3.0):
        """One command on the master CLI; returns its output."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect(self.master_sock)
            s.sendall(cmd.encode() + b"\n")
            s.shutdown(socket.SHUT_WR)
            out = bytearray()
            while True:
                data = s.recv(65536)
                if not data:
                    return out.decode("utf-8", "replace")
                out += data
        finally:
            s.close()

    def master_reloads(self):
        """The master's reload count, or None while the master cannot
        answer. After "Loading success" the 2.6 master re-executes itself
        and ignores SIGUSR2 until it answers on its CLI again."""
        try:
            out = self.master_cli("show proc", timeout=1.0)
        except OSError:
            return None
        m = re.search(r"^\d+\s+master\s+(\d+)\s+\[failed: (\d+)\]", out, re.M)
        if not m or not re.search(r"^\d+\s+worker\s", out, re.M):
            return None
        if int(m.group(2)):
            raise AssertionError("haproxy reports a failed reload:\n" + out)
        return int(m.group(1))

    def _wait_master(self, pred, what, timeout=10.0):
        def ready():
            if not self.alive():
                raise AssertionError("haproxy exited while waiting for %s" % what)
            return pred(self.master_reloads())
        wait_for(ready, timeout, what)

    def reload(self):
        """SIGUSR2 to the master; returns when the master has reloaded,
        the new worker serves and the master can take another signal."""
        before = self.master_reloads()
        if before is None:
            raise AssertionError("haproxy master not ready for a reload")
        self.signal(signal.SIGUSR2)
        self._wait_master(lambda n: n is not None and n > before, "haproxy to reload")
        wait_port(self.port, 5, self.popen)

    def stats(self):
        return stats_rows(self.stats_port)

    def server_stat(self, backend, server):
        return stats_row(self.stats_port, backend, server)


def generous_spoe(h, path):
    """path, or a copy of it in h.dir with `timeout processing
    SPOE_PROCESSING` when it is a shipped SPOE file (of spoe-conf/ or
    tools/demo/; a test's own copy is its own business). A relative path
    is taken from the test's directory (haproxy's cwd), else the sources."""
    full = path if os.path.isabs(path) else os.path.join(h.dir, path)
    if not os.path.exists(full):
        full = os.path.join(ROOT, path)
    full = os.path.realpath(full)
    shipped = [os.path.join(ROOT, "spoe-conf"), os.path.join(ROOT, "tools", "demo")]
    if not any(full.startswith(d + os.sep) for d in shipped) or not os.path.exists(full):
        return path
    with open(full, encoding="utf-8") as f:
        text = f.read()
    text, n = re.subn(r"(?m)^(\s*timeout processing\s+)\S+", r"\g<1>" + SPOE_PROCESSING, text)
    if not n:
        return path
    copy = os.path.join(h.dir, "generous-" + os.path.basename(full))
    with open(copy, "w", encoding="utf-8") as f:
        f.write(text)
    return copy


def stats_rows(port):
    """The CSV statistics of the HAProxy whose statistics page (/stats) is
    on 127.0.0.1:port, as a list of dicts."""
    r = http_get(port, "/stats;csv")
    if r.status != 200:
        raise AssertionError("stats page answered %d" % r.status)
    lines = r.text.splitlines()
    head = lines[0].lstrip("# ").split(",")
    return [dict(zip(head, line.split(","))) for line in lines[1:] if line]


def stats_row(port, backend, server):
    """The statistics of one server (or BACKEND, FRONTEND) of one proxy."""
    for row in stats_rows(port):
        if row.get("pxname") == backend and row.get("svname") == server:
            return row
    raise AssertionError("no stats for %s/%s" % (backend, server))


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # http.client.HTTPMessage: case-insensitive get()
        self.body = body

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def __repr__(self):
        return "Response(%d, %r, %r)" % (self.status, dict(self.headers.items()), self.body)


def http_get(port, path="/", headers=None, method="GET", timeout=5.0, source=None):
    """One request on a new connection to 127.0.0.1:port, from the loopback
    address `source` when given (e.g. "127.0.0.2")."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        body = r.read()
        return Response(r.status, r.headers, body)
    finally:
        conn.close()


class Harness:
    """The fixture: a temporary directory and everything started in it."""

    def __init__(self, name="test"):
        self.dir = tempfile.mkdtemp(prefix="rl-e2e-%s-" % name)
        self.procs = []
        self.backends = []
        self.agents = []
        self._n = 0

    def agent(self, *args, name=None, prefix=()):
        """An agent started with args; prefix is a command to run it under
        (e.g. faketime)."""
        self._n += 1
        a = Agent(self, args, name or "agent%d" % self._n, prefix=prefix)
        self.procs.append(a)
        self.agents.append(a)
        return a

    def hash_key_file(self):
        """A secret file for --hash-key-file, the same for every agent of
        this test (a fleet shares it), readable by its owner only."""
        path = os.path.join(self.dir, "hash.key")
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("e2e-test-secret-%s\n" % os.path.basename(self.dir))
        return path

    def tiers_map(self, *keys, tier="free"):
        """A map of API keys for the SPOE files' RL_TIERS_MAP: the shipped
        one (haproxy-examples/tiers.map) and these keys, of `tier`. The
        shipped files send a key only when the map lists it (else the
        address is the client), so a test that wants clients of their
        own keys lists them here."""
        path = os.path.join(self.dir, "tiers-%d.map" % len(os.listdir(self.dir)))
        with open(TIERS_MAP) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text + "".join("%s %s\n" % (k, tier) for k in keys))
        return path

    def backend(self):
        b = Backend()
        self.backends.append(b)
        return b

    def haproxy(self, agent_port, app_port, **kw):
        hp = HAProxy(self, agent_port, app_port, **kw)
        self.procs.append(hp)
        return hp

    def stop(self, proc):
        rc = proc.stop()
        return rc

    def close(self):
        """Stops everything; returns a list of problems found in the agents'
        exit codes and logs (sanitizer reports, unclean exits)."""
        problems = []
        for p in reversed(self.procs):
            was_running = p.returncode is None and p.alive()
            rc = p.stop()
            if isinstance(p, Agent):
                if was_running and rc != 0:
                    problems.append("%s exited with %s on SIGTERM" % (p.name, rc))
                m = SANITIZER_RE.search(p.log())
                if m:
                    problems.append("%s log has %r" % (p.name, m.group(0)))
        for b in self.backends:
            b.stop()
        return problems

    def logs(self, tail=40):
        """The last lines of every log, for a failure report."""
        return tail_logs(self.procs, tail)

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)
