# SPDX-License-Identifier: Apache-2.0
"""Secrets from files, as systemd hands them over (LoadCredential=): the
Redis password from --redis-password-file or store.password_file, the
sentinels' from --redis-sentinel-password-file or
store.sentinel_password_file; read at start (a file missing or empty
stops the start, and --check, with the reason) and again at each reload
(unreadable: the reload fails; changed: said)."""

import os
import re
import signal
import subprocess

import harness
from harness import wait_for
from redis_helper import RedisServer

PASSWORD = "correct horse battery"


def secret(h, name, text, mode=0o600):
    path = os.path.join(h.dir, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def rules(h, text):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def ready(agent):
    wait_for(lambda: re.search(r"redis: worker \d+ ready|\((WRONGPASS|NOAUTH)\)", agent.log())
             or not agent.alive(), 10, "the agent's Redis worker")
    return "ready" in agent.log() and "WRONGPASS" not in agent.log()


def run(*args):
    return subprocess.run([os.path.join(harness.BUILD, "spoa-ratelimit")] + list(args),
                          capture_output=True, text=True, timeout=30)


def test_password_file_on_the_command_line(h):
    redis = RedisServer(h, extra=["--requirepass", PASSWORD], password=PASSWORD)
    good = secret(h, "pw", PASSWORD + "\n")
    a = h.agent("--threads", "1", "--redis", redis.addr, "--hash-key-file",
                h.hash_key_file(), "--redis-password-file", good)
    assert ready(a), a.log()
    wrong = secret(h, "wrong", "not it\n")
    b = h.agent("--threads", "1", "--redis", redis.addr, "--hash-key-file",
                h.hash_key_file(), "--redis-password-file", wrong)
    assert not ready(b), b.log()


def test_password_file_in_the_rules_file(h):
    redis = RedisServer(h, extra=["--requirepass", PASSWORD], password=PASSWORD)
    pw = secret(h, "pw", PASSWORD)  # no final newline: taken as is
    path = rules(h, 'store:\n  type: redis\n  address: "%s"\n  password_file: "%s"\n'
                 '  hash_key_file: "%s"\nlimits: ["10/1m"]\n'
                 % (redis.addr, pw, h.hash_key_file()))
    a = h.agent("--threads", "1", "-f", path)
    assert ready(a), a.log()
    # read again at reload: unreadable fails the reload, the rules stay
    os.rename(pw, pw + ".gone")
    a.signal(signal.SIGHUP)
    wait_for(lambda: "reload failed" in a.log(), 10, "the failed reload")
    assert "Redis password file: %s: cannot open" % pw in a.log(), a.log()
    # changed: said
    secret(h, "pw", "another one\n")
    a.signal(signal.SIGHUP)
    wait_for(lambda: "reloaded " in a.log(), 10, "the reload")
    assert "the password file holds a new password" in a.log()
    assert a.alive()


def test_password_files_checked(h):
    missing = os.path.join(h.dir, "missing")
    empty = secret(h, "empty", "\n")
    two = secret(h, "two", "a\nb\n")
    for path, why in ((missing, "cannot open"), (empty, "empty"),
                      (two, "more than one line")):
        r = run("--redis", "127.0.0.1:1", "--redis-password-file", path, "--check", "-q")
        assert r.returncode == 1 and why in r.stderr and r.stdout == "", (path, r)
        r = run("--redis", "127.0.0.1:1", "--redis-password-file", path)
        assert r.returncode == 2 and why in r.stderr, (path, r)
    r = run("--redis-sentinel", "127.0.0.1:1", "--redis-master", "m",
            "--redis-sentinel-password-file", missing, "--check")
    assert r.returncode == 1 and "Sentinel password file: %s: cannot open" % missing in r.stderr, r
    r = run("--redis", "127.0.0.1:1", "--redis-password", "x", "--redis-password-file", empty)
    assert r.returncode == 2 and "not both" in r.stderr, r
    both = rules(h, 'store:\n  type: redis\n  address: "127.0.0.1:1"\n  password: x\n'
                 '  password_file: "%s"\n' % empty)
    r = run("-f", both, "--check")
    assert r.returncode == 1 and "store.password_file: give password or password_file" \
        in r.stderr, r
    sentinel = rules(h, 'store:\n  type: sentinel\n  sentinels: ["127.0.0.1:1"]\n'
                     '  master: m\n  sentinel_password_file: "%s"\n' % missing)
    r = run("-f", sentinel, "--check")
    assert r.returncode == 1 and "Sentinel password file" in r.stderr, r


def test_password_file_readable_by_others_is_warned_about(h):
    loose = secret(h, "loose", PASSWORD + "\n", mode=0o644)
    r = run("--redis", "127.0.0.1:1", "--redis-password-file", loose, "--check")
    assert r.returncode == 0 and "can be read by group or others" in r.stderr, r
