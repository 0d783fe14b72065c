# SPDX-License-Identifier: Apache-2.0
"""Logs that journald and log shippers read: the sd-daemon "<N>" priority
prefix when stderr is the stream $JOURNAL_STREAM names (and only then),
and --log-format json, one object a line with time, level, msg and the
line's fields."""

import json
import os
import re
import signal

import harness
from harness import Proc, http_get, wait_for


def start(h, name, args, env_extra=None, journal=False):
    """The agent with stderr on h.dir/NAME.log; journal: JOURNAL_STREAM
    names that file."""
    log_path = os.path.join(h.dir, name + ".log")
    open(log_path, "wb").close()
    env = dict(os.environ)
    env.pop("JOURNAL_STREAM", None)
    if journal:
        st = os.stat(log_path)
        env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
    env.update(env_extra or {})
    argv = [os.path.join(harness.BUILD, "spoa-ratelimit"), "--listen", "127.0.0.1:0"] + args
    p = Proc(name, argv, log_path, env=env)
    h.procs.append(p)
    wait_for(lambda: "listening on" in p.log() or not p.alive(), 10, name + " to listen")
    assert p.alive(), p.log()
    return p


def rules_file(h, text):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_journal_priorities(h):
    path = rules_file(h, 'limits: ["10/1m"]\n')
    a = start(h, "journal", ["-f", path, "--redis-batch", "3"], journal=True)
    with open(path, "w") as f:
        f.write("limitz: 1\n")
    a.signal(signal.SIGHUP)
    wait_for(lambda: "reload failed" in a.log(), 10, "the failed reload")
    lines = a.log().splitlines()
    assert lines and all(re.match(r"<[3467]>(error|warning|info|debug): ", x) for x in lines), lines
    assert any(x.startswith("<6>info: listening on") for x in lines), lines
    assert any(x.startswith("<4>warning: --redis-batch") for x in lines), lines
    assert any(x.startswith("<3>error: reload failed") for x in lines), lines


def test_no_prefix_when_stderr_is_another_stream(h):
    other = os.stat(os.path.join(harness.ROOT, "README.md"))
    a = start(h, "plain", [], env_extra={
        "JOURNAL_STREAM": "%d:%d" % (other.st_dev, other.st_ino)})
    lines = a.log().splitlines()
    assert lines and all(re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z (info|warning): ", x)
                         for x in lines), lines


def test_json_lines(h):
    path = rules_file(h, 'limits: ["10/1m"]\n')
    mport = harness.free_port()
    a = start(h, "json", ["-f", path, "--log-format", "json", "--metrics",
                          "127.0.0.1:%d" % mport, "--admin"])
    a.signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in a.log(), 10, "the reload")
    r = http_get(mport, "/admin/reset?ip=192.0.2.7", method="POST")
    assert r.status == 200, r
    wait_for(lambda: "reset the buckets" in a.log(), 10, "the reset logged")
    objs = [json.loads(x) for x in a.log().splitlines()]
    for o in objs:
        assert {"time", "level", "msg"} <= set(o), o
        assert re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z$", o["time"]), o
        assert o["level"] in ("error", "warning", "info", "debug"), o
    reload = [o for o in objs if o["msg"].startswith("reloaded")]
    assert reload and reload[0]["file"] == path, reload
    reset = [o for o in objs if "reset the buckets" in o["msg"]]
    assert reset and reset[0]["identity"] == "ip" and reset[0]["client"] == "192.0.2.7", reset


def test_json_on_the_journal(h):
    a = start(h, "json-journal", ["--log-format", "json"], journal=True)
    for line in a.log().splitlines():
        m = re.match(r"<(\d)>(\{.*\})$", line)
        assert m, line
        o = json.loads(m.group(2))
        assert {"info": "6", "warning": "4", "error": "3"}[o["level"]] == m.group(1), line
