# SPDX-License-Identifier: Apache-2.0
"""The agent under systemd, measured without one: the notify protocol
(Type=notify) against a datagram socket the test owns as $NOTIFY_SOCKET
(READY=1 once listening, RELOADING=1 with MONOTONIC_USEC then READY=1
around a reload, STOPPING=1 on SIGTERM), the signals an HAProxy operator
sends (SIGUSR2 reloads as SIGHUP does, SIGUSR1 is logged and ignored), and
the exit status that tells systemd not to restart a bad configuration
(RestartPreventExitStatus=2)."""

import os
import signal
import socket
import subprocess
import time

import harness
from harness import wait_for

RULES = 'limits: ["50/10s"]\n'


class NotifySocket:
    """A Unix datagram socket standing in for systemd's."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(10)

    def read(self):
        """The next datagram, as {KEY: VALUE}."""
        data = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.split("\n") if line)

    def close(self):
        self.sock.close()


def agent_notifying(h, notify, *args):
    old = os.environ.get("NOTIFY_SOCKET")
    os.environ["NOTIFY_SOCKET"] = notify.path
    try:
        return h.agent(*args)
    finally:
        if old is None:
            del os.environ["NOTIFY_SOCKET"]
        else:
            os.environ["NOTIFY_SOCKET"] = old


def rules_file(h, text=RULES):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_notify_ready_reloading_stopping(h):
    notify = NotifySocket(os.path.join(h.dir, "notify"))
    try:
        agent = agent_notifying(h, notify, "-f", rules_file(h))
        first = notify.read()
        assert first.get("READY") == "1", first
        # ready means listening: a connection is taken at once
        socket.create_connection(("127.0.0.1", agent.port), timeout=5).close()
        for sig in (signal.SIGHUP, signal.SIGUSR2):
            before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            agent.signal(sig)
            reloading = notify.read()
            assert reloading.get("RELOADING") == "1", reloading
            usec = int(reloading["MONOTONIC_USEC"])
            after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            assert before <= usec <= after, (before, usec, after)
            ready = notify.read()
            assert ready.get("READY") == "1", ready
        wait_for(lambda: agent.log().count("reloaded ") == 2, 10, "two reloads logged")
        agent.signal(signal.SIGTERM)
        stopping = notify.read()
        assert stopping.get("STOPPING") == "1", stopping
        assert agent.popen.wait(timeout=15) == 0
    finally:
        notify.close()


def test_failed_reload_still_says_ready(h):
    notify = NotifySocket(os.path.join(h.dir, "notify"))
    try:
        path = rules_file(h)
        agent = agent_notifying(h, notify, "-f", path)
        assert notify.read().get("READY") == "1"
        with open(path, "w") as f:
            f.write("limits: [\"nonsense\"]\n")
        agent.signal(signal.SIGHUP)
        assert notify.read().get("RELOADING") == "1"
        assert notify.read().get("READY") == "1"
        assert "reload failed" in agent.log()
        assert agent.alive()
    finally:
        notify.close()


def test_sigusr1_is_logged_and_ignored(h):
    agent = h.agent("-f", rules_file(h))
    agent.signal(signal.SIGUSR1)
    wait_for(lambda: "SIGUSR1: ignored" in agent.log(), 10, "SIGUSR1 logged")
    assert agent.alive()
    socket.create_connection(("127.0.0.1", agent.port), timeout=5).close()
    assert "reloaded" not in agent.log()


def test_sigusr2_reloads_the_rules(h):
    path = rules_file(h)
    agent = h.agent("-f", path)
    with open(path, "w") as f:
        f.write('limits: ["3/1m", "100/1h"]\n')
    agent.signal(signal.SIGUSR2)
    wait_for(lambda: "reloaded %s: " % path in agent.log(), 10, "the reload")
    assert agent.alive()


def test_bad_configuration_exits_2(h):
    """systemd's RestartPreventExitStatus=2: an invalid rules file or
    option is not restarted in a loop."""
    binary = os.path.join(harness.BUILD, "spoa-ratelimit")
    bad = rules_file(h, 'limits: ["nonsense"]\n')
    for argv in (["-f", bad], ["-f", os.path.join(h.dir, "missing.yaml")],
                 ["--threads", "0"]):
        r = subprocess.run([binary, "--listen", "127.0.0.1:0"] + argv,
                           capture_output=True, timeout=30)
        assert r.returncode == 2, (argv, r.returncode, r.stderr)


def test_unit_file(h):
    """The unit tells systemd what the agent does."""
    with open(os.path.join(harness.ROOT, "dist", "spoa-ratelimit.service.in")) as f:
        unit = f.read()
    lines = [line.strip() for line in unit.splitlines()]
    assert "Type=notify" in lines
    assert "RestartPreventExitStatus=2" in lines
    reloads = [line for line in lines if line.startswith("ExecReload=")]
    assert len(reloads) == 2, reloads
    assert "--check" in reloads[0] and " -q" in reloads[0]
    assert "$MAINPID" in reloads[1]
