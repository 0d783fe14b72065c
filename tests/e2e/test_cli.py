# SPDX-License-Identifier: Apache-2.0
"""The command line's small conventions: `--check -q` says nothing when
the file is good; an unknown option is one line and a pointer to --help;
options that do nothing are warned about; --redis-timeout takes a unit
(a bare number is milliseconds); HEAD on the operations listener's GET
endpoints; --listen and --metrics on Unix sockets (unix@PATH, as HAProxy
writes them), the SPOP one used by HAProxy's `server x unix@PATH`; the
bash completion knows every option --help lists."""

import http.client
import os
import re
import signal
import socket
import subprocess

import harness
from harness import Proc, http_get, wait_for


def agent_bin():
    return os.path.join(harness.BUILD, "spoa-ratelimit")


def run(*args):
    return subprocess.run([agent_bin()] + list(args), capture_output=True, text=True,
                          timeout=30)


def write(h, name, text):
    path = os.path.join(h.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_check_quiet_is_silent_on_success(h):
    good = write(h, "good.yaml", 'limits: ["3/1m"]\n')
    r = run("-f", good, "--check", "-q")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    r = run("-f", good, "--check")
    assert r.returncode == 0 and "ok, 1 rule(s)" in r.stdout, r
    bad = write(h, "bad.yaml", 'limits: ["3/1m"]\nlimitz: 1\n')
    r = run("-f", bad, "--check", "-q")
    assert r.returncode == 1 and "limitz" in r.stderr and r.stdout == "", r


def test_unknown_option_is_one_line_and_a_pointer(h):
    for args in (["--no-such-option"], ["-Z"], ["--listen"]):
        r = run(*args)
        assert r.returncode == 2, r
        lines = r.stderr.splitlines()
        assert len(lines) == 2, r.stderr
        assert lines[1] == "Try 'spoa-ratelimit --help' for the options.", r.stderr
        assert r.stdout == ""


def test_options_that_do_nothing_are_warned_about(h):
    cases = [
        (["--redis-timeout", "50"], "--redis-timeout: an option of the Redis store"),
        (["--no-local-cache"], "--no-local-cache: an option of the Redis store"),
        (["--redis", "127.0.0.1:1", "--redis-master", "m"],
         "--redis-master: the master's name in Sentinel, without --redis-sentinel"),
        (["--limit", "3/1m", "--limit", "100/1h", "--burst", "10"],
         "--burst 10: the capacity of each of the 2 token limits alike"),
        (["--limit", "3/1m:sliding", "--burst", "10"],
         "--burst: the capacity of token buckets; the sliding limit 3/1m"),
    ]
    for args, warning in cases:
        r = run(*(args + ["--check"]))
        assert r.returncode == 0 and warning in r.stderr, (args, r)
    # meaningful, so no warning
    for args in (["--limit", "3/1m", "--burst", "10"],
                 ["--redis", "127.0.0.1:1", "--redis-timeout", "50"]):
        r = run(*(args + ["--check"]))
        assert r.returncode == 0 and "warning" not in r.stderr, (args, r)


def test_redis_timeout_takes_a_unit(h):
    for good in ("20", "250ms", "1s", "60000", "60s"):
        r = run("--redis", "127.0.0.1:1", "--redis-timeout", good, "--check", "-q")
        assert r.returncode == 0, (good, r)
    for bad in ("0", "0ms", "61s", "2m", "fast", "20 ms", "-5"):
        r = run("--redis", "127.0.0.1:1", "--redis-timeout", bad, "--check")
        assert r.returncode == 2 and "--redis-timeout" in r.stderr, (bad, r)


def unix_get(path, target, method="GET"):
    """One request over the Unix socket at path."""
    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(5)
            self.sock.connect(path)

    c = Conn("localhost")
    try:
        c.request(method, target)
        r = c.getresponse()
        return r.status, r.headers, r.read()
    finally:
        c.close()


def test_head_on_get_endpoints(h):
    mport = harness.free_port()
    h.agent("--metrics", "127.0.0.1:%d" % mport, "--admin")
    for path in ("/metrics", "/healthz", "/admin/client?key=abc"):
        got = http_get(mport, path)
        head = http_get(mport, path, method="HEAD")
        assert head.status == got.status, (path, got, head)
        assert head.body == b"", (path, head)
        assert head.headers.get("Content-Type") == got.headers.get("Content-Type"), path
        if path != "/metrics":  # the metrics move between two requests
            assert head.headers.get("Content-Length") == str(len(got.body)), (path, head)
    r = http_get(mport, "/healthz", method="PUT")
    assert r.status == 405 and r.headers.get("Allow") == "GET, HEAD", r


def start_on_unix(h, spop_path, *args):
    argv = [agent_bin(), "--listen", "unix@" + spop_path] + list(args)
    agent = Proc("agent-unix", argv, os.path.join(h.dir, "agent-unix.log"))
    h.procs.append(agent)
    wait_for(lambda: "listening on unix@%s" % spop_path in agent.log() or not agent.alive(),
             10, "the agent to listen")
    assert agent.alive(), agent.log()
    return agent


def test_listen_and_metrics_on_unix_sockets(h):
    spop_path = os.path.join(h.dir, "spop.sock")
    metrics_path = os.path.join(h.dir, "metrics.sock")
    # a socket file left by an agent that is gone is replaced
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(spop_path)
    stale.close()
    agent = start_on_unix(h, spop_path, "--limit", "3/1m", "--metrics", "unix@" + metrics_path,
                          "--admin")
    status, _, body = unix_get(metrics_path, "/healthz")
    assert (status, body) == (200, b"ok\n")
    backend = h.backend()
    hp = h.haproxy(0, backend.port, env={"RL_AGENT": "unix@" + spop_path})
    statuses = [http_get(hp.port, "/").status for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429], statuses
    status, _, body = unix_get(metrics_path, "/metrics")
    m = re.search(rb"^spoa_rl_connections (\d+)$", body, re.M)
    assert status == 200 and m and int(m.group(1)) >= 1, body[:300]
    hp.stop()
    agent.signal(signal.SIGTERM)
    assert agent.popen.wait(timeout=15) == 0, agent.log()


def test_unix_listen_never_replaces_another_file(h):
    path = write(h, "not-a-socket", "keep me\n")
    r = subprocess.run([agent_bin(), "--listen", "unix@" + path], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and "cannot listen on unix@" in r.stderr, r
    with open(path) as f:
        assert f.read() == "keep me\n"


def help_options():
    r = run("--help")
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b", r.stdout))


def test_bash_completion_knows_every_option():
    path = os.path.join(harness.ROOT, "dist", "spoa-ratelimit.bash-completion")
    with open(path) as f:
        text = f.read()
    words = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b", text))
    opts = help_options()
    assert opts and opts <= words, "completion lacks %s" % sorted(opts - words)
    r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def complete(*words):
    """What the completion offers for the last of words."""
    path = os.path.join(harness.ROOT, "dist", "spoa-ratelimit.bash-completion")
    script = ('source "$1"; shift; COMP_WORDS=(spoa-ratelimit "$@"); '
              'COMP_CWORD=$#; _spoa_ratelimit; printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "-c", script, "bash", path] + list(words),
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_bash_completion_completes():
    assert complete("--redis-ti") == ["--redis-timeout"]
    assert complete("--redis-tls-k") == ["--redis-tls-key"]
    assert complete("--redis-expiry", "n") == ["never"]
    assert complete("--listen", "unix") == ["unix@"]
