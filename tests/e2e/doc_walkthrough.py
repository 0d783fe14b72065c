# SPDX-License-Identifier: Apache-2.0
"""Follows docs/integration.md's "Your own set-up in ten minutes" as
written: each ```sh block's commands run in order, from the source tree,
in a shell of their own, and the ```text block after a block is what its
commands print. What a test must change it changes in the text before it
runs it, and nothing else:

- `~/rl-setup` is a directory of the test's own;
- `spoa-ratelimit` is the agent just built, and the one started listens
  on a port the kernel picked (the others are free ones picked at run
  time, put where the guide writes 8000, 8080, 9102 and 12345);
- the SPOE file's `timeout processing 50ms` becomes 1s once copied, so
  that a busy test machine cannot let a request through unchecked;
- `cd DIR` moves the following commands, `export` sets variables for
  them; `CMD &` starts a process that the harness stops, and the next
  command waits until it listens.

Used by tests/e2e/test_docs.py."""

import os
import re
import shlex
import subprocess

import harness
from harness import ROOT

SECTION = "## Your own set-up in ten minutes"


def blocks(text):
    start = text.index("\n%s\n" % SECTION)
    end = text.index("\n## ", start + 1)
    return re.findall(r"^```(\w+)\n(.*?)^```", text[start:end], re.S | re.M)


def run(h):
    with open(os.path.join(ROOT, "docs", "integration.md"), encoding="utf-8") as f:
        steps = blocks(f.read())
    kinds = [k for k, _ in steps]
    assert kinds == ["sh", "sh", "sh", "sh", "text", "sh", "sh", "text", "sh", "text"], kinds
    if harness.HAPROXY is None or not os.path.exists("/usr/bin/curl"):
        raise harness.Skip("haproxy or curl is not installed")
    setup = os.path.join(h.dir, "rl-setup")
    binary = os.path.join(harness.BUILD, "spoa-ratelimit")
    ports = {"8000": harness.free_port(), "8080": harness.free_port(),
             "9102": harness.free_port()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_")}
    env.update(RL_FRONTEND="127.0.0.1:%d" % ports["8080"],
               RL_APP="127.0.0.1:%d" % ports["8000"])
    state = {"cwd": ROOT, "agent": None}

    def rewrite(cmd):
        cmd = cmd.replace("~/rl-setup", setup)
        for old, new in ports.items():
            cmd = cmd.replace("127.0.0.1:%s" % old, "127.0.0.1:%d" % new)
            cmd = re.sub(r"(http\.server )%s\b" % old, r"\g<1>%d" % new, cmd)
        return re.sub(r"(^|\s)spoa-ratelimit\b", r"\g<1>" + binary, cmd)

    def background(cmd):
        argv = shlex.split(cmd)
        if argv[0] == binary:
            # kernel-picked port, read back from its log (harness.Agent),
            # which starts it in the test's directory: its files by path
            args = [os.path.join(state["cwd"], a) if os.path.exists(
                os.path.join(state["cwd"], a)) else a for a in argv[1:]]
            agent = h.agent(*args, name="walkthrough-agent")
            env["RL_AGENT"] = "127.0.0.1:%d" % agent.port
            state["agent"] = agent
            return
        if argv[0] == "haproxy":
            spoe = env["RL_SPOE_CONF"]
            with open(spoe) as f:
                text = f.read()
            assert text.count("timeout processing 50ms\n") == 1
            with open(spoe, "w") as f:
                f.write(text.replace("timeout processing 50ms\n", "timeout processing 1s\n"))
            argv[0] = harness.HAPROXY
        p = harness.Proc("walkthrough-%d" % len(h.procs), argv,
                         os.path.join(h.dir, "walkthrough-%d.log" % len(h.procs)),
                         env=env, cwd=state["cwd"])
        h.procs.append(p)
        port = ports["8000"] if "http.server" in cmd else ports["8080"]
        harness.wait_port(port, 10, p.popen)

    def foreground(cmd):
        m = re.fullmatch(r"cd (\S+)", cmd)
        if m:
            state["cwd"] = m.group(1)
            return ""
        if cmd.startswith("export "):
            # the variables for the commands that follow, as the shell has them
            r = subprocess.run(["bash", "-c", cmd + " && env -0"], cwd=state["cwd"], env=env,
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, (cmd, r)
            env.update(kv.split("=", 1) for kv in r.stdout.split("\0") if "=" in kv)
            return ""
        r = subprocess.run(["bash", "-c", cmd], cwd=state["cwd"], env=env,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (cmd, r)
        return r.stdout

    def wait_agent_up():
        # HAProxy forwards unchecked until its health check finds the agent
        # (a request from another address, which the steps never use)
        harness.wait_for(lambda: harness.http_get(
            ports["8080"], "/", source="127.0.0.9").headers.get("RateLimit-Policy"), 10,
            "haproxy to reach the agent")

    printed = None
    for kind, body in steps:
        if kind == "text":
            # (spaces at the end of a line are not seen on a terminal)
            printed = "\n".join(line.rstrip(" ") for line in printed.split("\n"))
            assert printed == body, "the guide shows:\n%s\nthe commands printed:\n%s" % (
                body, printed)
            continue
        printed = ""
        for line in body.strip("\n").split("\n"):
            cmd = rewrite(line)
            if cmd.endswith(" &"):
                background(cmd[:-2])
                if cmd.startswith("haproxy "):
                    wait_agent_up()
            else:
                out = foreground(cmd)
                # the versions of step 1 vary: only that they run
                if not line.endswith(" -v") and not line.endswith(" --version"):
                    printed += out
    assert state["agent"] is not None and state["agent"].alive()
    assert "warning" not in state["agent"].log(), state["agent"].log()
