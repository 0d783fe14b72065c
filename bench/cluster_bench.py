# SPDX-License-Identifier: Apache-2.0
"""A Redis Cluster for the Redis store's benchmarks (bench/redis_bench.py):
three masters, no replicas, built by tests/e2e/redis_topology.Cluster on
loopback ports below 55535 (a node also listens on its port + 10000).

ClusterRedis stands where redis_bench.RedisServer stands in a run: the
figures a run takes from Redis (CPU, FCALL calls and time, memory, the
threads' scheduling) are summed over the masters, and per master where the
spread matters (every master must get its share of the clients).

One cluster serves the runs of a block (R1 to R3 and C3, or L1, L2 and CL);
each run starts with FLUSHALL on every master and a fresh agent, so buckets
start full as with a fresh redis-server.
"""

import os
import shlex
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "e2e"))
import lua_scripts  # noqa: E402

MASTERS = 3


def _info(text):
    out = {}
    for line in text.decode(errors="replace").splitlines():
        k, sep, v = line.partition(":")
        if sep and not k.startswith("#"):
            out[k] = v.strip()
    return out


class ClusterRedis:
    """A Redis Cluster of MASTERS masters and no replica, closed (every node
    killed, its directory removed) on exit from `with`."""

    def __init__(self, masters=MASTERS):
        self.nmasters = masters
        self.cl = None
        self.ports = []
        self.create_s = None

    def __enter__(self):
        try:
            import redis_topology  # noqa: E402  (tests/e2e)
        except Exception as e:  # noqa: BLE001 - any import failure: no cluster rows
            raise RuntimeError("cannot import tests/e2e/redis_topology.py: %r" % e)
        try:
            self.cl = redis_topology.Cluster(masters=self.nmasters, replicas_per_master=0)
        except Exception as e:  # noqa: BLE001 - Skip (no redis-cli), AssertionError...
            raise RuntimeError("Redis Cluster not created: %s: %s"
                               % (type(e).__name__, str(e)[-600:]))
        try:
            self.create_s = self.cl.create_seconds
            self.ports = sorted(m.port for m in self.cl.masters())
            if len(self.ports) != self.nmasters:
                raise RuntimeError("the cluster has %d masters, not %d"
                                   % (len(self.ports), self.nmasters))
        except BaseException:
            self.close()
            raise
        return self

    def close(self):
        if self.cl is not None:
            self.cl.close()
            self.cl.remove()
            self.cl = None

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- what a run reads, summed over the masters

    def seeds(self):
        return self.cl.seeds()

    def command(self, port, *args):
        return self.cl.command(port, *args)

    def info(self, port, section):
        return _info(self.command(port, "INFO", section))

    def pids(self):
        return [self.cl.nodes[p].proc.pid for p in self.ports]

    def cpu_s(self):
        total = 0.0
        for p in self.ports:
            i = self.info(p, "cpu")
            total += float(i["used_cpu_sys"]) + float(i["used_cpu_user"])
        return total

    def fcall_per_master(self, name="fcall"):
        """{port: (calls, usec, failed + rejected)} of the top-level command
        `name` (INFO commandstats cmdstat_<name>) so far; the commands the
        agent's functions call are counted on their own lines, left out."""
        out = {}
        for p in self.ports:
            line = self.info(p, "commandstats").get("cmdstat_" + name, "")
            f = dict(x.partition("=")[::2] for x in line.split(",") if x)
            out[p] = (int(f.get("calls", 0)), int(f.get("usec", 0)),
                      int(f.get("failed_calls", 0)) + int(f.get("rejected_calls", 0)))
        return out

    def command_stats(self, name="fcall"):
        """(calls, usec, failed + rejected) of `name`, summed over the masters."""
        per = self.fcall_per_master(name).values()
        return tuple(sum(v[i] for v in per) for i in range(3))

    def library_code(self, name=lua_scripts.LIBRARY_NAME):
        """The code of library `name` (FUNCTION LIST WITHCODE) when every
        master holds it, the same; else None."""
        codes = set()
        for p in self.ports:
            code = None
            for lib in self.command(p, "FUNCTION", "LIST", "LIBRARYNAME", name,
                                    "WITHCODE") or []:
                f = dict(zip(lib[::2], lib[1::2]))
                if f.get(b"library_name") == name.encode():
                    code = f.get(b"library_code")
            codes.add(code)
        return codes.pop() if len(codes) == 1 else None

    def used_memory(self):
        return sum(int(self.info(p, "memory")["used_memory"]) for p in self.ports)

    def dbsizes(self):
        return {p: self.command(p, "DBSIZE") for p in self.ports}

    def flush(self):
        for p in self.ports:
            self.command(p, "FLUSHALL")

    # ---- how it was made, for the report

    def cmdlines(self):
        """The nodes' command lines and the cluster's creation, as run."""
        out = [" ".join(shlex.quote(x) for x in self.cl.nodes[p].argv) for p in self.ports]
        out.append("redis-cli --cluster create %s --cluster-replicas 0 --cluster-yes"
                   % " ".join("127.0.0.1:%d" % p for p in self.ports))
        return out


def wait_map(agent, timeout_s=10.0):
    """Until the agent's log says its worker learned a map covering every
    slot (the agent connects to a master, and loads its library there, on
    the first decision routed to it, so there is no "ready" line before
    traffic)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and agent.proc.poll() is None:
        with open(agent.log_path, errors="replace") as f:
            if "serve 16384 of 16384 slots" in f.read():
                return True
        time.sleep(0.02)
    return False
