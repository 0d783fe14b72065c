# SPDX-License-Identifier: Apache-2.0
"""A redis-server for one end-to-end test, on a loopback port or a Unix
socket picked at run time, with no persistence.

The server is a harness.Proc added to the harness's process list, so the
runner stops it with everything else whatever happens; restarts on the same
port add one more Proc. pause()/resume() send SIGSTOP/SIGCONT; callers put
resume() in a finally (a stopped server would only die on SIGKILL).
"""

import os
import re
import shutil
import signal
import socket
import time

import harness
from resp import Client


class UnixClient(Client):
    """resp.Client over a Unix socket."""

    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self.rf = self.sock.makefile("rb")


class RedisServer:
    """redis-server --port P --bind 127.0.0.1 --save "" --appendonly no.

    extra: more server arguments (e.g. ["--requirepass", "secret"]).
    unixsocket: a path; the server then listens there only (--port 0).
    password / user: what client() authenticates with.
    tls: a tls_certs.Certs: the server then speaks TLS only, on its port
    (--port 0 --tls-port P, the certificates' files; extra may override
    them, e.g. --tls-auth-clients yes)."""

    def __init__(self, h, extra=(), unixsocket=None, password=None, user=None,
                 name="redis", tls=None):
        if shutil.which("redis-server") is None:
            raise harness.Skip("redis-server is not installed")
        self.h = h
        self.extra = list(extra)
        self.unixsocket = unixsocket
        self.password = password
        self.user = user
        self.name = name
        self.tls = tls
        self.dir = os.path.join(h.dir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.port = None
        self.proc = None
        self._starts = 0
        last = None
        for _ in range(3):
            self.port = 0 if unixsocket else harness.free_port()
            try:
                self._start()
                break
            except RuntimeError as e:  # the port was taken in between: again
                last = e
        else:
            raise RuntimeError("redis-server did not start: %s" % last)

    @property
    def addr(self):
        """What the agent's --redis takes."""
        return self.unixsocket if self.unixsocket else "127.0.0.1:%d" % self.port

    def _argv(self):
        argv = ["redis-server", "--port", str(self.port), "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", self.dir]
        if self.unixsocket:
            argv += ["--unixsocket", self.unixsocket]
        else:
            argv += ["--bind", "127.0.0.1"]
        if self.tls is not None:
            argv[1:3] = ["--port", "0", "--tls-port", str(self.port)]
            argv += self.tls.redis_args()
        return argv + self.extra

    def _start(self):
        self._starts += 1
        name = self.name if self._starts == 1 else "%s-%d" % (self.name, self._starts)
        self.proc = harness.Proc(name, self._argv(), os.path.join(self.h.dir, name + ".log"))
        self.h.procs.append(self.proc)
        try:
            harness.wait_for(self._ready, 5, "%s to answer PING" % name, interval=0.02)
        except AssertionError as e:
            self.proc.stop()
            raise RuntimeError("%s; its log: %s" % (e, self.proc.log()[-2000:]))
        if not self.proc.alive():
            raise RuntimeError("%s exited: %s" % (name, self.proc.log()[-2000:]))

    def _ready(self):
        if not self.proc.alive():
            raise RuntimeError("%s exited at start: %s" % (self.proc.name, self.proc.log()[-2000:]))
        try:
            with self.client(timeout=0.5) as c:
                return c.command("PING") == b"PONG"
        except (OSError, ConnectionError):
            return False

    def client(self, timeout=5.0):
        """A new RESP connection, authenticated when the server needs it."""
        if self.unixsocket:
            c = UnixClient(self.unixsocket, timeout=timeout)
        else:
            c = Client("127.0.0.1", self.port, timeout=timeout,
                       tls=self.tls.client_context() if self.tls is not None else None)
        try:
            if self.password is not None:
                if self.user is not None:
                    c.command("AUTH", self.user, self.password)
                else:
                    c.command("AUTH", self.password)
        except BaseException:
            c.close()
            raise
        return c

    def command(self, *args):
        with self.client() as c:
            return c.command(*args)

    def now_us(self):
        """Redis's clock (TIME), the one the decision library reads."""
        sec, usec = self.command("TIME")
        return int(sec) * 1000000 + int(usec)

    def decision_calls(self):
        """How many FCALL commands (decision calls) the server has run
        (INFO commandstats)."""
        info = self.command("INFO", "commandstats").decode()
        for line in info.splitlines():
            if line.startswith("cmdstat_fcall:"):
                for part in line.split(":", 1)[1].split(","):
                    k, _, v = part.partition("=")
                    if k == "calls":
                        return int(v)
        return 0

    def rl_keys(self):
        """Every key the agent names, "{TTTT}LLLLLLLL", sorted (SCAN, not
        KEYS)."""
        out, cursor = set(), b"0"
        with self.client() as c:
            while True:
                cursor, batch = c.command("SCAN", cursor, "MATCH", "{????}????????", "COUNT", 1000)
                out.update(k.decode() for k in batch)
                if cursor == b"0":
                    return sorted(out)

    def stop(self, sig=signal.SIGTERM, timeout=5.0):
        """Sends sig and waits until the server has exited (SIGKILL after
        timeout). Returns the exit code."""
        if self.proc.alive():
            self.proc.signal(sig)
            deadline = time.monotonic() + timeout
            while self.proc.alive() and time.monotonic() < deadline:
                time.sleep(0.01)
        return self.proc.stop()

    def restart(self):
        """Starts the server again, same port or socket, same arguments (an
        empty data set: nothing is saved)."""
        if self.proc.alive():
            raise RuntimeError("%s is still running" % self.proc.name)
        last = None
        for _ in range(50):  # the old socket may linger for a moment
            try:
                self._start()
                return
            except RuntimeError as e:
                last = e
                time.sleep(0.1)
        raise RuntimeError("redis-server did not start again: %s" % last)

    def pause(self):
        self.proc.signal(signal.SIGSTOP)

    def resume(self):
        if self.proc.alive():
            self.proc.signal(signal.SIGCONT)


def redis_agent(h, redis, *args, **kw):
    """An agent on redis, with the run's hash key, once its Redis workers say
    they are ready."""
    a = h.agent(*args, "--redis", redis.addr, "--hash-key-file", h.hash_key_file(), **kw)
    harness.wait_for(lambda: "ready" in a.log(), 5, "the agent's Redis workers")
    return a


def metrics_agent(h, *args, redis=None):
    """One worker with --metrics on a port of its own (a.mport); on redis
    (a RedisServer) when given, as redis_agent()."""
    mport = harness.free_port()
    args = ("--threads", "1", "--metrics", "127.0.0.1:%d" % mport) + args
    a = redis_agent(h, redis, *args) if redis else h.agent(*args)
    a.mport = mport
    return a


def cluster_metrics_agent(h, cluster, *args):
    """metrics_agent() on a redis_topology.Cluster of 3 masters, once its
    worker has the slot map."""
    a = metrics_agent(h, *args, "--redis-cluster", cluster.seeds(2), "--hash-key-file",
                      h.hash_key_file())
    harness.wait_for(lambda: re.search(r"cluster: worker \d+: 3 masters serve 16384", a.log()),
                     10, "the worker to have the slot map")
    return a


def sentinel_metrics_agent(h, sentinel, *args):
    """metrics_agent() on the master a redis_topology.Sentinel names, once
    its worker is ready there."""
    a = metrics_agent(h, *args, "--redis-sentinel", sentinel.sentinel_addrs(), "--redis-master",
                      sentinel.master_name, "--hash-key-file", h.hash_key_file())
    harness.wait_for(lambda: re.search(r"redis: worker \d+ ready", a.log()), 10,
                     "the worker to be ready on the master")
    return a
