# SPDX-License-Identifier: Apache-2.0
"""Redis topologies for the end-to-end tests, started with the real binaries
on loopback ports picked at run time: a Redis Cluster, a Sentinel set, and
independent shards.

    Cluster(masters=3, replicas_per_master=1)   --redis-cluster cluster.seeds()
    Sentinel(sentinels=3)                        --redis-sentinel s.sentinel_addrs()
                                                 --redis-master s.master_name
    Shards(n=3)                                  --redis-shards shards.addrs()

Setting one up takes seconds (a cluster's nodes must meet and agree, the
sentinels must find each other), so a test module shares one through a
module fixture (see run.py) and calls reset() at the start of each test:

    def fixture_cluster():
        return Cluster()

    def test_something(h, cluster):
        cluster.reset()
        ...

Each object owns a temporary directory with every process's log (dir,
logs()), starts its processes as harness.Proc (each in its own process
group, killed by harness's exit hook whatever happens) and kills them all
in close(). A constructor that fails kills what it had started before
raising; one that cannot run here (a binary missing) raises harness.Skip.
Waits have generous timeouts and say, when they expire, what they last saw.
"""

import collections
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import harness
from redis_helper import RedisServer
from resp import Client

SLOTS = 16384
HOST = "127.0.0.1"
# A cluster node also listens on its port + 10000 (the cluster bus).
CLUSTER_PORT_MAX = 65535 - 10000


def _need(*binaries):
    for b in binaries:
        if shutil.which(b) is None:
            raise harness.Skip("%s is not installed" % b)


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((HOST, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _wait(check, timeout, what, interval=0.05):
    """Polls check() -> (done, detail) until done; returns the detail. On
    timeout raises AssertionError naming what it waited for and the last
    detail, so a failure says which node was not there yet."""
    deadline = time.monotonic() + timeout
    while True:
        done, detail = check()
        if done:
            return detail
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0fs waiting for %s; last: %s"
                                 % (timeout, what, detail))
        time.sleep(interval)


def _info(text):
    """INFO or CLUSTER INFO text as a dict of strings."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep and not line.startswith("#"):
            out[k.strip()] = v.strip()
    return out


def _pairs(flat):
    """A flat [k1, v1, k2, v2, ...] reply as a dict of strings."""
    it = iter(x.decode() if isinstance(x, bytes) else str(x) for x in flat)
    return dict(zip(it, it))


# ------------------------------------------------------------ key slots

def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16-CCITT (XMODEM), the one Redis Cluster hashes keys with."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def key_slot(key):
    """The cluster slot of key (str or bytes): CRC16 of the key, or of its
    hash tag, the text between the first '{' and the next '}' when that is
    not empty."""
    if isinstance(key, str):
        key = key.encode()
    s = key.find(b"{")
    if s != -1:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key) % SLOTS


# ------------------------------------------------------------ processes

class Server:
    """One redis-server or redis-sentinel of a topology: argv, its whole
    command line, listens on 127.0.0.1:port; start() runs it again there
    (a new log, name-2.log, ...)."""

    def __init__(self, topo, name, port, argv, password=None, plain=False):
        """plain: no TLS to it, even in a topology on TLS."""
        self.topo = topo
        self.plain = plain
        self.name = name
        self.port = port
        self.argv = list(argv)
        self.password = password
        self.proc = None
        self._starts = 0
        self.start()

    @property
    def addr(self):
        return "%s:%d" % (HOST, self.port)

    def start(self, timeout=10.0):
        """Starts the process and waits until it answers PING."""
        if self.proc is not None and self.proc.alive():
            raise RuntimeError("%s is still running" % self.name)
        self._starts += 1
        name = self.name if self._starts == 1 else "%s-%d" % (self.name, self._starts)
        self.proc = harness.Proc(name, self.argv, os.path.join(self.topo.dir, name + ".log"))
        self.topo.procs.append(self.proc)

        def ready():
            if not self.proc.alive():
                raise RuntimeError("%s exited at start (port %d taken?): %s"
                                   % (name, self.port, self.proc.log()[-2000:]))
            try:
                with self.client(timeout=0.5) as c:
                    return c.command("PING") == b"PONG", "no PONG"
            except (OSError, ConnectionError) as e:
                return False, repr(e)
        _wait(ready, timeout, "%s to answer PING on port %d" % (name, self.port), 0.02)

    def alive(self):
        return self.proc is not None and self.proc.alive()

    def client(self, timeout=5.0):
        """A new RESP connection, authenticated when the server needs it."""
        tls = None if self.plain else self.topo.tls
        c = Client(HOST, self.port, timeout=timeout,
                   tls=tls.client_context() if tls is not None else None)
        try:
            if self.password is not None:
                c.command("AUTH", self.password)
        except BaseException:
            c.close()
            raise
        return c

    def command(self, *args, timeout=5.0):
        with self.client(timeout=timeout) as c:
            return c.command(*args)

    def info(self, section=None):
        return _info(self.command(*(("INFO", section) if section else ("INFO",))))

    def kill(self, sig=signal.SIGKILL):
        """Sends sig to the process group and waits until it has exited."""
        if self.proc is None:
            return None
        if self.proc.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return self.proc.stop()

    def pause(self):
        """SIGSTOP; reset() of the topology sends SIGCONT."""
        self.proc.signal(signal.SIGSTOP)

    def resume(self):
        if self.alive():
            self.proc.signal(signal.SIGCONT)


class _Topology:
    """A temporary directory and the processes started in it."""

    kind = "topology"

    def __init__(self, tls=None):
        """tls: a tls_certs.Certs: every server and sentinel then speaks TLS
        only, on its port (its bus and replication too), and the tests'
        clients and redis-cli with it."""
        self.dir = tempfile.mkdtemp(prefix="rl-e2e-%s-" % self.kind)
        self.procs = []  # every harness.Proc started, restarts included
        self.tls = tls

    def _tls_argv(self, argv, port):
        """A redis-server's argv ("--port", port first) on TLS, when tls."""
        if self.tls is None:
            return argv
        return (argv[:1] + ["--port", "0", "--tls-port", str(port)] + argv[3:]
                + self.tls.redis_args() + ["--tls-replication", "yes", "--tls-cluster", "yes"])

    def _cli_argv(self):
        return ["redis-cli"] + (self.tls.cli_args() if self.tls is not None else [])

    def _port(self, below=65536, taken=()):
        """A free loopback port below `below`, not in taken."""
        for _ in range(500):
            p = harness.free_port()
            if p < below and p not in taken:
                return p
        raise RuntimeError("no free port below %d" % below)

    def _on_free_port(self, start, taken, tries=5):
        """start(port) on a free port, again on another one when that port
        was taken in between; returns what start returned."""
        last = None
        for _ in range(tries):
            port = self._port(taken=taken)
            taken.add(port)
            try:
                return start(port)
            except RuntimeError as e:
                last = e
        raise RuntimeError("could not start on a free port: %s" % last)

    def close(self):
        """Kills every process (SIGKILL: nothing here is worth saving) and
        waits for them. Returns no problems; the directory stays (remove())."""
        for p in self.procs:
            if p.alive():
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self.procs:
            p.stop()
        return []

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.tls is not None:
            self.tls.remove()

    def _abandon(self, exc):
        """A constructor failed with exc: kills what was started; the logs
        go into exc's report unless the run was interrupted."""
        self.close()
        if isinstance(exc, (KeyboardInterrupt, SystemExit, harness.Skip)):
            self.remove()
        elif hasattr(exc, "add_note"):
            exc.add_note("logs kept in %s:\n%s" % (self.dir, self.logs(tail=10)))

    def logs(self, tail=15):
        """The last lines of every process's log, for a failure report."""
        return harness.tail_logs(self.procs, tail)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -------------------------------------------------------------- cluster

Member = collections.namedtuple("Member", "port id role master_id slots")
Member.__doc__ = """A node as the cluster sees it: role "master" or "replica";
master_id, a replica's master (None for a master); slots, a master's
(first, last) ranges, sorted."""


def _parse_nodes(text):
    """CLUSTER NODES as {id: dict(port, flags, master_id, slots, open)}."""
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        hostport = parts[1].split("@")[0].split(",")[0]
        slots, opened = [], []
        for s in parts[8:]:
            if s.startswith("["):
                opened.append(s)
            elif "-" in s:
                lo, hi = s.split("-")
                slots.append((int(lo), int(hi)))
            else:
                slots.append((int(s), int(s)))
        out[parts[0]] = {
            "port": int(hostport.rsplit(":", 1)[1] or 0),
            "flags": set(parts[2].split(",")),
            "master_id": None if parts[3] == "-" else parts[3],
            "slots": tuple(sorted(slots)),
            "open": opened,
        }
    return out


class Reshard:
    """A running `redis-cli --cluster reshard`: wait() for it, or running()."""

    def __init__(self, cluster, proc, what):
        self.cluster = cluster
        self.proc = proc
        self.what = what

    def running(self):
        return self.proc.alive()

    def output(self):
        """What redis-cli has printed so far."""
        return self.proc.log()

    def wait(self, timeout=60.0):
        """Waits for the reshard and for the cluster to agree on the slots'
        new owner; returns redis-cli's output. Raises if it failed."""
        try:
            self.proc.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s still running after %.0fs:\n%s"
                                 % (self.what, timeout, self.proc.log()[-3000:]))
        rc = self.proc.stop()
        out = self.proc.log()
        if rc != 0:
            raise AssertionError("%s exited with %s:\n%s" % (self.what, rc, out[-3000:]))
        self.cluster.wait_ok()
        return out

    def stop(self):
        self.proc.stop()


class Cluster(_Topology):
    """A Redis Cluster of `masters` masters each with `replicas_per_master`
    replicas, built with `redis-cli --cluster create`, every node with
    --cluster-node-timeout node_timeout_ms (small, so a failover takes
    seconds), no persistence and a password when given.

    Nodes are named by port. Every method that changes the cluster returns
    once every live node agrees on the new layout (wait_ok())."""

    kind = "cluster"

    def __init__(self, masters=3, replicas_per_master=1, node_timeout_ms=1000,
                 password=None, timeout=60.0, tls=None):
        _need("redis-server", "redis-cli")
        super().__init__(tls)
        self.node_timeout_ms = node_timeout_ms
        self.password = password
        self._shape = (masters, replicas_per_master)
        self.rebuilds = 0
        self.nodes = {}  # port -> Server, every node not removed
        self.ids = {}  # port -> node id (kept across restarts: nodes.conf)
        self._killed = {}  # port -> (monotonic time, id, slots, replica ports)
        self._bg = []  # Reshard handles
        self._n = 0
        self.create_seconds = None
        try:
            t0 = time.monotonic()
            self._create(timeout)
            self.create_seconds = time.monotonic() - t0
        except BaseException as e:
            self._abandon(e)
            raise

    def _create(self, timeout):
        masters, replicas_per_master = self._shape
        ports = [self._start_node() for _ in range(masters * (1 + replicas_per_master))]
        self._cli("create", *["%s:%d" % (HOST, p) for p in ports],
                  "--cluster-replicas", str(replicas_per_master), "--cluster-yes",
                  timeout=timeout)
        self.wait_ok(timeout)

    def _rebuild(self, timeout):
        """Kills every node and makes the cluster anew, of the first shape."""
        for port, node in sorted(self.nodes.items()):
            node.kill(signal.SIGKILL)
        self.nodes, self.ids, self._killed, self._bg = {}, {}, {}, []
        self.rebuilds += 1
        self._create(timeout)

    # ---- processes

    def _start_node(self):
        taken = set()
        for port in self.nodes:
            taken.update((port, port + 10000, port - 10000))
        for _ in range(20):
            port = self._port(CLUSTER_PORT_MAX, taken)
            if not _bindable(port + 10000):
                taken.add(port)
                continue
            self._n += 1
            ndir = os.path.join(self.dir, "node-%d" % port)
            os.makedirs(ndir, exist_ok=True)
            argv = ["redis-server", "--port", str(port), "--bind", HOST,
                    "--daemonize", "no", "--dir", ndir, "--save", "", "--appendonly", "no",
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--repl-diskless-sync-delay", "0"]
            if self.password is not None:
                argv += ["--requirepass", self.password, "--masterauth", self.password]
            argv = self._tls_argv(argv, port)
            try:
                node = Server(self, "node-%d" % port, port, argv, password=self.password)
            except RuntimeError:  # the port went in between: another one
                taken.add(port)
                continue
            self.nodes[port] = node
            self.ids[port] = node.command("CLUSTER", "MYID").decode()
            return port
        raise RuntimeError("could not start a cluster node")

    def _cli(self, *args, timeout=60.0, check=True):
        """redis-cli --cluster ARGS; returns its output. Raises when it fails."""
        argv = self._cli_argv()
        if self.password is not None:
            argv += ["-a", self.password, "--no-auth-warning"]
        argv += ["--cluster"] + list(args)
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        out = r.stdout.decode("utf-8", "replace")
        with open(os.path.join(self.dir, "redis-cli.log"), "a") as f:
            f.write("$ %s\n%s\n" % (" ".join(argv), out))
        if check and (r.returncode != 0 or "[ERR]" in out):
            raise AssertionError("redis-cli --cluster %s failed (%d):\n%s"
                                 % (args[0], r.returncode, out[-3000:]))
        return out

    def _live(self):
        return [p for p, n in sorted(self.nodes.items()) if n.alive()]

    def _any(self):
        live = self._live()
        if not live:
            raise AssertionError("no cluster node is running")
        return live[0]

    def _view(self, port):
        return _parse_nodes(self.nodes[port].command("CLUSTER", "NODES"))

    def _layout(self, view):
        """(id, role, master_id, slots) of every live node in a view."""
        out = []
        for port in self._live():
            nid = self.ids[port]
            e = view[nid]
            if "master" in e["flags"]:
                out.append((nid, "master", None, e["slots"]))
            else:
                out.append((nid, "replica", e["master_id"], ()))
        return tuple(out)

    def _health(self):
        """(True, layout) when every live node says cluster_state:ok with all
        slots served, knows every live node as healthy, has no slot half
        migrated, all views agree, and every replica's link is up."""
        live = self._live()
        if not live:
            return False, "no node running"
        layouts = {}
        try:
            for port in live:
                node = self.nodes[port]
                ci = _info(node.command("CLUSTER", "INFO", timeout=2.0))
                if ci.get("cluster_state") != "ok" or ci.get("cluster_slots_ok") != str(SLOTS):
                    return False, "node %d: cluster_state:%s cluster_slots_ok:%s" % (
                        port, ci.get("cluster_state"), ci.get("cluster_slots_ok"))
                view = _parse_nodes(node.command("CLUSTER", "NODES", timeout=2.0))
                for other in live:
                    e = view.get(self.ids[other])
                    if e is None:
                        return False, "node %d does not know node %d" % (port, other)
                    bad = e["flags"] & {"fail", "fail?", "handshake", "noaddr"}
                    if bad:
                        return False, "node %d sees node %d as %s" % (port, other, ",".join(bad))
                me = view[self.ids[port]]
                if me["open"]:
                    return False, "node %d has open slots %s" % (port, me["open"])
                layouts[port] = self._layout(view)
                if "slave" in me["flags"]:
                    ri = node.info("replication")
                    if ri.get("master_link_status") != "up":
                        return False, "replica %d: master_link_status:%s" % (
                            port, ri.get("master_link_status"))
        except (OSError, ConnectionError) as e:
            return False, "a node does not answer: %r" % e
        except Exception as e:  # noqa: BLE001 - e.g. LOADING: retried
            return False, "a node answered %r" % e
        if len(set(layouts.values())) != 1:
            return False, "nodes disagree on the layout"
        return True, next(iter(layouts.values()))

    def wait_ok(self, timeout=60.0):
        """Waits until the cluster is healthy and every live node agrees on
        it (see _health); returns the number of seconds that took. Halfway,
        a node left with a stale owner for some slot (seen after a slot went
        there and back and its old owner failed over: that node then says
        cluster_state:fail forever) is told the owner the others agree on."""
        t0 = time.monotonic()
        try:
            _wait(self._health, timeout / 2, "the cluster to be ok on every node", 0.05)
        except AssertionError:
            self._repair_stale_slots()
            _wait(self._health, timeout / 2, "the cluster to be ok on every node", 0.05)
        return time.monotonic() - t0

    def _repair_stale_slots(self):
        """CLUSTER SETSLOT s NODE owner on each live node whose view of slot
        s differs from the owner most nodes see."""
        owners = {}
        views = {}
        for port in self._live():
            try:
                view = _parse_nodes(self.nodes[port].command("CLUSTER", "NODES", timeout=2.0))
            except Exception:  # noqa: BLE001 - a node not answering: skipped
                continue
            views[port] = view
            for nid, e in view.items():
                if "master" in e["flags"] and not e["flags"] & {"fail", "fail?"}:
                    for lo, hi in e["slots"]:
                        for slot in range(lo, hi + 1):
                            owners.setdefault(slot, collections.Counter())[nid] += 1
        for port, view in views.items():
            mine = {}
            for nid, e in view.items():
                for lo, hi in e["slots"]:
                    for slot in range(lo, hi + 1):
                        mine[slot] = nid
            for slot, votes in owners.items():
                best, _ = votes.most_common(1)[0]
                if mine.get(slot) != best:
                    try:
                        self.nodes[port].command("CLUSTER", "SETSLOT", slot, "NODE", best,
                                                 timeout=2.0)
                    except Exception:  # noqa: BLE001 - the next wait says
                        pass

    # ---- what the cluster looks like

    def seeds(self, n=None):
        """'127.0.0.1:P,127.0.0.1:Q,...': the live nodes (the first n), what
        the agent's --redis-cluster takes."""
        ports = self._live()[:n]
        return ",".join("%s:%d" % (HOST, p) for p in ports)

    def members(self):
        """Every live node as a Member, as the first live node sees it now."""
        view = self._view(self._any())
        out = []
        for port in self._live():
            e = view.get(self.ids[port])
            if e is None:
                continue
            if "master" in e["flags"]:
                out.append(Member(port, self.ids[port], "master", None, e["slots"]))
            else:
                out.append(Member(port, self.ids[port], "replica", e["master_id"], ()))
        return out

    def masters(self):
        """The live masters (Member), by port."""
        return [m for m in self.members() if m.role == "master"]

    def replicas(self):
        """The live replicas (Member), by port."""
        return [m for m in self.members() if m.role == "replica"]

    def port_of(self, node_id):
        for port, nid in self.ids.items():
            if nid == node_id:
                return port
        raise KeyError(node_id)

    def client(self, port):
        """A new RESP connection to the node on port (no redirections)."""
        return self.nodes[port].client()

    def command(self, port, *args):
        return self.nodes[port].command(*args)

    @staticmethod
    def slot_of(key):
        return key_slot(key)

    def node_for_slot(self, slot):
        """The port of the live master serving slot, as the first live node
        sees it."""
        for m in self.masters():
            if any(lo <= slot <= hi for lo, hi in m.slots):
                return m.port
        raise AssertionError("no live master serves slot %d" % slot)

    def node_for_key(self, key):
        return self.node_for_slot(key_slot(key))

    @contextlib.contextmanager
    def migrating(self, key, finish=True):
        """The slot of key caught mid-migration: IMPORTING on another
        master, MIGRATING on its own; yields (slot, source port,
        destination port). On leaving, the slot is the destination's
        (finish: the keys written meanwhile are there) or stays the
        source's (STABLE)."""
        slot = key_slot(key)
        src = self.node_for_slot(slot)
        dst = next(m.port for m in self.masters() if m.port != src)
        try:
            assert self.command(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING",
                                self.ids[src]) == b"OK"
            assert self.command(src, "CLUSTER", "SETSLOT", slot, "MIGRATING",
                                self.ids[dst]) == b"OK"
            yield slot, src, dst
        finally:
            for port in (dst, src):
                if finish:
                    self.command(port, "CLUSTER", "SETSLOT", slot, "NODE", self.ids[dst])
                else:
                    self.command(port, "CLUSTER", "SETSLOT", slot, "STABLE")

    def keys_by_master(self, pattern="{????}????????"):
        """{master port: sorted keys matching pattern} (SCAN on each live
        master; keys as str). The default matches the agent's keys."""
        out = {}
        for m in self.masters():
            keys, cursor = set(), b"0"
            with self.client(m.port) as c:
                while True:
                    cursor, batch = c.command("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
                    keys.update(k.decode() for k in batch)
                    if cursor == b"0":
                        break
            out[m.port] = sorted(keys)
        return out

    # ---- failures and changes

    def kill_master(self, port):
        """SIGKILLs the master on port (its replicas then elect one of them
        after node_timeout_ms; see wait_promoted)."""
        m = {x.port: x for x in self.members()}.get(port)
        if m is None or m.role != "master":
            raise AssertionError("node %d is not a live master" % port)
        reps = [r.port for r in self.replicas() if r.master_id == m.id]
        self._killed[port] = (time.monotonic(), m.id, m.slots, reps)
        self.nodes[port].kill(signal.SIGKILL)

    def kill_node(self, port, sig=signal.SIGKILL):
        """Sends sig to any node (no bookkeeping for wait_promoted)."""
        self.nodes[port].kill(sig)

    def wait_promoted(self, old_master_port, timeout=60.0):
        """Waits until a replica of the killed master serves its slots and
        the cluster is ok again; returns (new master port, seconds since
        kill_master)."""
        t_kill, old_id, old_slots, reps = self._killed[old_master_port]
        if not old_slots:
            raise AssertionError("node %d served no slots: nothing to promote" % old_master_port)
        first = old_slots[0][0]

        def promoted():
            ok, detail = self._health()
            if not ok:
                return False, detail
            try:
                port = self.node_for_slot(first)
            except AssertionError as e:  # the nodes still agree on no one
                return False, str(e)
            if port not in reps:
                return False, "slot %d is served by %d, not by a replica of %d %s" % (
                    first, port, old_master_port, reps)
            return True, port
        new = _wait(promoted, timeout, "a replica of %d to take over its slots" % old_master_port)
        return new, time.monotonic() - t_kill

    def restart_node(self, port, timeout=60.0):
        """Starts a stopped node again, same port and node id; a master that
        lost its slots meanwhile rejoins as a replica. Returns its Member
        once the cluster is ok."""
        self.nodes[port].start()
        self._killed.pop(port, None)
        self.wait_ok(timeout)
        return {m.port: m for m in self.members()}[port]

    def reshard(self, from_port, to_port, nslots, background=False, timeout=60.0):
        """Moves nslots slots (and their keys) from one master to another with
        `redis-cli --cluster reshard`. Returns a Reshard; unless background,
        it has been waited for (and the cluster agrees on the new owners)."""
        argv = self._cli_argv()
        if self.password is not None:
            argv += ["-a", self.password, "--no-auth-warning"]
        argv += ["--cluster", "reshard", "%s:%d" % (HOST, from_port),
                 "--cluster-from", self.ids[from_port], "--cluster-to", self.ids[to_port],
                 "--cluster-slots", str(nslots), "--cluster-yes"]
        self._n += 1
        name = "reshard-%d" % self._n
        proc = harness.Proc(name, argv, os.path.join(self.dir, name + ".log"))
        self.procs.append(proc)
        handle = Reshard(self, proc, "reshard of %d slots %d -> %d" % (nslots, from_port, to_port))
        self._bg.append(handle)
        if not background:
            handle.wait(timeout)
        return handle

    def add_master(self, timeout=60.0):
        """Starts a node and adds it as a master with no slots; returns its
        port once every node knows it."""
        member = self._any()  # before the new node, which may come first
        port = self._start_node()
        self._cli("add-node", "%s:%d" % (HOST, port), "%s:%d" % (HOST, member))
        self.wait_ok(timeout)
        return port

    def remove_node(self, port, timeout=60.0):
        """Removes a replica or a master with no slots from the cluster
        (`redis-cli --cluster del-node`) and stops it."""
        m = {x.port: x for x in self.members()}.get(port)
        if m is None:
            raise AssertionError("node %d is not live" % port)
        if m.slots:
            raise AssertionError("node %d still serves slots %s: reshard them first"
                                 % (port, m.slots))
        other = [p for p in self._live() if p != port][0]
        self._cli("del-node", "%s:%d" % (HOST, other), self.ids[port])
        node = self.nodes.pop(port)
        node.kill(signal.SIGKILL)
        self.ids.pop(port)
        self.wait_ok(timeout)

    def reset(self, timeout=60.0):
        """Back to a clean state for the next test: no reshard running, every
        node running and not paused, no slot half migrated, every slot
        served, every node agreeing, and no key anywhere (FLUSHALL on each
        master, waited for by its replicas). The layout stays as it is
        (which nodes are masters, added nodes, slot ranges), except when the
        cluster does not come back within half of timeout: then it is made
        anew. (A replica promoted after a reshard there and back can keep a
        slot of the move on its old master, now a replica, and nothing a
        test may send repairs that without breaking something else: the
        cluster stays failed.)"""
        try:
            self._reset(timeout / 2)
        except AssertionError:
            self._rebuild(timeout)
            self._reset(timeout)

    def _reset(self, timeout):
        for r in self._bg:
            if r.running():
                r.stop()
        self._bg = []
        for port, node in sorted(self.nodes.items()):
            if node.alive():
                node.resume()
        for port, node in sorted(self.nodes.items()):
            if not node.alive():
                node.start()
        self._killed.clear()

        def open_slots():
            try:
                return True, any(self._view(p)[self.ids[p]]["open"] for p in self._live())
            except Exception as e:  # noqa: BLE001 - not answering yet (LOADING...)
                return False, "a node does not answer CLUSTER NODES: %r" % e
        if _wait(open_slots, timeout, "every node to answer CLUSTER NODES"):
            self._cli("fix", "%s:%d" % (HOST, self._any()), "--cluster-yes", check=False)
        self.wait_ok(timeout)
        for m in self.masters():
            with self.nodes[m.port].client(timeout=15.0) as c:
                c.command("FLUSHALL")
                nrep = sum(1 for r in self.replicas() if r.master_id == m.id)
                if nrep:
                    acked = c.command("WAIT", nrep, 10000)
                    if acked < nrep:
                        raise AssertionError("FLUSHALL on %d reached %d of %d replicas"
                                             % (m.port, acked, nrep))

    def close(self):
        for r in self._bg:
            if r.running():
                r.stop()
        return super().close()


# ------------------------------------------------------------- sentinel

class Sentinel(_Topology):
    """A master, one replica and `sentinels` redis-sentinel processes
    monitoring the master as master_name with a majority quorum,
    down-after-milliseconds down_after_ms and failover-timeout
    failover_timeout_ms.

    password: requirepass and masterauth on both servers (the sentinels get
    it as auth-pass). sentinel_password: requirepass on the sentinels (and
    sentinel-pass, so that they can talk to each other).

    down_after_ms stays above 1000: after a switch a sentinel reconnects to
    the new master up to 1 s later (its reconnections to the dead one are
    spaced by 1 s, and the spacing carries over), so with 1000 it may find
    the new master down before its first PING is answered and start a
    second, needless failover."""

    kind = "sentinel"

    def __init__(self, sentinels=3, master_name="mymaster", password=None,
                 sentinel_password=None, down_after_ms=2000, failover_timeout_ms=3000,
                 timeout=60.0, tls=None, tls_sentinels=True):
        _need("redis-server", "redis-sentinel")
        super().__init__(tls)
        self.tls_sentinels = tls_sentinels
        self.master_name = master_name
        self.password = password
        self.sentinel_password = sentinel_password
        self.quorum = sentinels // 2 + 1
        self.servers = {}  # port -> Server (redis-server)
        self.sentinels = []  # Server (redis-sentinel)
        self._killed = None  # (monotonic time, port)
        try:
            taken = set()
            mport = self._on_free_port(lambda p: self._server("master", p, None), taken).port
            self._on_free_port(lambda p: self._server("replica", p, mport), taken)
            self._wait_replicas(mport, timeout)
            for _ in range(sentinels):
                self.sentinels.append(self._on_free_port(
                    lambda p: self._sentinel(p, mport, down_after_ms, failover_timeout_ms),
                    taken))
            self._wait_sentinels(timeout)
        except BaseException as e:
            self._abandon(e)
            raise

    def _server_argv(self, port, master_port):
        argv = ["redis-server", "--port", str(port), "--bind", HOST, "--daemonize", "no",
                "--dir", self.dir, "--dbfilename", "dump-%d.rdb" % port, "--save", "",
                "--appendonly", "no", "--repl-diskless-sync-delay", "0"]
        if self.password is not None:
            argv += ["--requirepass", self.password, "--masterauth", self.password]
        if master_port is not None:
            argv += ["--replicaof", HOST, str(master_port)]
        return self._tls_argv(argv, port)

    def _server(self, name, port, master_port):
        s = Server(self, "%s-%d" % (name, port), port, self._server_argv(port, master_port),
                   password=self.password)
        self.servers[port] = s
        return s

    def _sentinel(self, port, master_port, down_after_ms, failover_timeout_ms):
        sdir = os.path.join(self.dir, "sentinel-%d" % port)
        os.makedirs(sdir, exist_ok=True)
        conf = os.path.join(sdir, "sentinel.conf")
        lines = [
            "port %d" % port,
            "bind %s" % HOST,
            "daemonize no",
            'logfile ""',
            "dir %s" % sdir,
            "sentinel monitor %s %s %d %d" % (self.master_name, HOST, master_port, self.quorum),
            "sentinel down-after-milliseconds %s %d" % (self.master_name, down_after_ms),
            "sentinel failover-timeout %s %d" % (self.master_name, failover_timeout_ms),
            "sentinel parallel-syncs %s 1" % self.master_name,
        ]
        if self.password is not None:
            lines.append("sentinel auth-pass %s %s" % (self.master_name, self.password))
        if self.sentinel_password is not None:
            lines.append("requirepass %s" % self.sentinel_password)
            lines.append("sentinel sentinel-pass %s" % self.sentinel_password)
        if self.tls is not None:
            # TLS to the servers; on its own port too unless tls_sentinels is False
            lines += ["tls-replication yes"] + self.tls.conf_lines()
            if self.tls_sentinels:
                lines[0] = "port 0"
                lines.append("tls-port %d" % port)
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        return Server(self, "sentinel-%d" % port, port, ["redis-sentinel", conf],
                      password=self.sentinel_password, plain=not self.tls_sentinels)

    # ---- waits

    def _wait_replicas(self, master_port, timeout):
        """Until every live server other than master_port replicates it with
        its link up, and the master reports them all connected."""
        def synced():
            try:
                reps = [p for p, s in self.servers.items() if p != master_port and s.alive()]
                for p in reps:
                    ri = self.servers[p].info("replication")
                    if ri.get("role") != "slave" or ri.get("master_port") != str(master_port):
                        return False, "server %d: role:%s master_port:%s" % (
                            p, ri.get("role"), ri.get("master_port"))
                    if ri.get("master_link_status") != "up":
                        return False, "replica %d: master_link_status:%s" % (
                            p, ri.get("master_link_status"))
                mi = self.servers[master_port].info("replication")
                if mi.get("role") != "master" or mi.get("connected_slaves") != str(len(reps)):
                    return False, "master %d: role:%s connected_slaves:%s" % (
                        master_port, mi.get("role"), mi.get("connected_slaves"))
                return True, None
            except (OSError, ConnectionError) as e:
                return False, "a server does not answer: %r" % e
            except Exception as e:  # noqa: BLE001 - e.g. LOADING: retried
                return False, "a server answered %r" % e
        _wait(synced, timeout, "the replicas of %d to be in sync" % master_port)

    def _sentinel_state(self, sentinel):
        """(master port, master flags, other sentinels, [(replica port, flags)])."""
        with sentinel.client(timeout=2.0) as c:
            addr = c.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
            m = _pairs(c.command("SENTINEL", "MASTER", self.master_name))
            reps = [_pairs(r) for r in c.command("SENTINEL", "REPLICAS", self.master_name)]
        port = int(addr[1]) if addr else None
        return (port, m.get("flags"), int(m.get("num-other-sentinels", 0)),
                sorted((int(r["port"]), r["flags"]) for r in reps))

    def _agreed(self):
        """(True, master port) when every live sentinel names the same master,
        sees it healthy (flags 'master' only), knows every other sentinel and
        every live server as a healthy replica."""
        live = [s for s in self.sentinels if s.alive()]
        ports = set()
        try:
            for s in live:
                port, flags, others, reps = self._sentinel_state(s)
                if flags != "master":
                    return False, "sentinel %d: master %s flags %s" % (s.port, port, flags)
                if others != len(self.sentinels) - 1:
                    return False, "sentinel %d knows %d other sentinels" % (s.port, others)
                want = sorted(p for p, srv in self.servers.items() if srv.alive() and p != port)
                healthy = sorted(p for p, f in reps if f == "slave")
                if healthy != want:
                    return False, "sentinel %d sees replicas %s, wants %s healthy" % (
                        s.port, reps, want)
                ports.add(port)
        except (OSError, ConnectionError) as e:
            return False, "a sentinel does not answer: %r" % e
        except Exception as e:  # noqa: BLE001
            return False, "a sentinel answered %r" % e
        if len(ports) != 1:
            return False, "sentinels name masters %s" % sorted(ports)
        return True, ports.pop()

    def _wait_sentinels(self, timeout):
        return _wait(self._agreed, timeout, "the sentinels to agree on a healthy %s"
                     % self.master_name, 0.1)

    # ---- what it looks like

    def sentinel_addrs(self):
        """'127.0.0.1:P,127.0.0.1:Q,127.0.0.1:R', what --redis-sentinel takes."""
        return ",".join(s.addr for s in self.sentinels)

    def sentinel_ports(self):
        return [s.port for s in self.sentinels]

    def master_port(self):
        """The master's port as the first sentinel that answers names it now."""
        last = None
        for s in self.sentinels:
            if not s.alive():
                continue
            try:
                addr = s.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
                return int(addr[1])
            except (OSError, ConnectionError) as e:
                last = e
        raise AssertionError("no sentinel answers: %r" % last)

    def replica_ports(self):
        """The live servers that are not the master the sentinels name."""
        mport = self.master_port()
        return sorted(p for p, s in self.servers.items() if p != mport and s.alive())

    def server(self, port):
        return self.servers[port]

    def client(self, port=None):
        """A new connection to a server (default: the current master)."""
        return self.servers[self.master_port() if port is None else port].client()

    def sentinel_client(self, i=0):
        return self.sentinels[i].client()

    # ---- failures

    def kill_master(self):
        """SIGKILLs the current master; returns its port."""
        port = self.master_port()
        self._killed = (time.monotonic(), port)
        self.servers[port].kill(signal.SIGKILL)
        return port

    def wait_failover(self, timeout=60.0):
        """Waits until every live sentinel names the same new master and that
        server says role:master; returns (its port, seconds since
        kill_master)."""
        if self._killed is None:
            raise AssertionError("kill_master() was not called")
        t_kill, old = self._killed

        def switched():
            ports = set()
            try:
                for s in self.sentinels:
                    if s.alive():
                        addr = s.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                         self.master_name, timeout=2.0)
                        ports.add(int(addr[1]))
                if len(ports) != 1 or old in ports:
                    return False, "sentinels name %s" % sorted(ports)
                port = ports.pop()
                role = self.servers[port].info("replication").get("role")
                if role != "master":
                    return False, "server %d says role:%s" % (port, role)
                return True, port
            except (OSError, ConnectionError) as e:
                return False, "no answer: %r" % e
        new = _wait(switched, timeout, "the sentinels to promote a replica of %d" % old)
        return new, time.monotonic() - t_kill

    def reset(self, timeout=60.0):
        """Back to a clean state: every server and sentinel running and not
        paused (a server that was down comes back as a replica of the current
        master), replicas in sync, the sentinels agreeing on a healthy master
        and its replicas, and no key (FLUSHALL, waited for by the replicas).
        The master stays the one the sentinels name."""
        for s in list(self.servers.values()) + self.sentinels:
            s.resume()
        for s in self.sentinels:
            if not s.alive():
                s.start()
        mport = self.master_port()
        if not self.servers[mport].alive():
            if any(s.alive() for s in self.servers.values()):
                # A failover under way (or about to be): let it end.
                def named_alive():
                    p = self.master_port()
                    return self.servers[p].alive(), p
                mport = _wait(named_alive, timeout, "the sentinels to name a running master")
            else:
                self.servers[mport].argv = self._server_argv(mport, None)
                self.servers[mport].start()
        for port, s in sorted(self.servers.items()):
            if not s.alive():
                s.argv = self._server_argv(port, mport)
                s.start()
        self._killed = None
        self._wait_replicas(mport, timeout)
        self._wait_sentinels(timeout)
        with self.servers[mport].client(timeout=15.0) as c:
            c.command("FLUSHALL")
            nrep = len(self.servers) - 1
            acked = c.command("WAIT", nrep, 10000)
            if acked < nrep:
                raise AssertionError("FLUSHALL reached %d of %d replicas" % (acked, nrep))


# --------------------------------------------------------------- shards

class Shards(_Topology):
    """n independent redis-servers (redis_helper.RedisServer, so each has
    stop(), restart(), pause(), rl_keys()...), no persistence. extra and
    password as for RedisServer."""

    kind = "shards"

    def __init__(self, n=3, extra=(), password=None, tls=None):
        _need("redis-server")
        super().__init__(tls)
        self.servers = []
        try:
            pw = ["--requirepass", password] if password is not None else []
            for i in range(n):
                # RedisServer takes a harness: it uses dir and procs only.
                self.servers.append(RedisServer(self, extra=list(extra) + pw,
                                                password=password, name="shard%d" % i,
                                                tls=tls))
        except BaseException as e:
            self._abandon(e)
            raise

    def addrs(self):
        """'127.0.0.1:P,...' in shard order, what --redis-shards takes."""
        return ",".join(s.addr for s in self.servers)

    def ports(self):
        return [s.port for s in self.servers]

    def client(self, i):
        return self.servers[i].client()

    def reset(self):
        """Every shard running, not paused, and empty."""
        for s in self.servers:
            s.resume()
            if not s.proc.alive():
                s.restart()
            s.command("FLUSHALL")

