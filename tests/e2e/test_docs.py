"""The README stays true: its rules example is examples/rules.yaml and
passes --check, every metric it names is served, every option it lists is
accepted."""

import os
import re
import subprocess

import harness
from harness import http_get

README = os.path.join(harness.ROOT, "README.md")


def readme():
    with open(README, encoding="utf-8") as f:
        return f.read()


def agent_bin():
    return os.path.join(harness.BUILD, "spoa-ratelimit")


def test_readme_example_is_the_example_file_and_valid():
    text = readme()
    m = re.search(r"### The example\n.*?```yaml\n(.*?)```", text, re.S)
    assert m, "no yaml block under '### The example'"
    path = os.path.join(harness.ROOT, "examples", "rules.yaml")
    with open(path, encoding="utf-8") as f:
        assert m.group(1).rstrip("\n") == f.read().rstrip("\n"), \
            "README's example differs from examples/rules.yaml"
    r = subprocess.run([agent_bin(), "-f", path, "--check"], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(path + ": ok, "), r.stdout


def test_readme_metrics_exist(h):
    names = set(re.findall(r"`(spoa_rl_[a-z_]+)", readme()))
    assert len(names) > 20, names
    mport = harness.free_port()
    # Redis metrics appear with a Redis store; none needs to be reachable.
    h.agent("--metrics", "127.0.0.1:%d" % mport, "--redis", "127.0.0.1:1",
            "--redis-timeout", "5")
    served = set(re.findall(r"^# TYPE (spoa_rl_[a-z_]+) ", http_get(mport, "/metrics").text, re.M))
    missing = sorted(n for n in names if n not in served)
    assert not missing, "README names metrics the agent does not serve: %s" % missing


def test_readme_options_are_accepted():
    text = readme()
    table = text[text.index("| option | default | meaning |"):]
    table = table[:table.index("\n\n")]
    opts = set(re.findall(r"^\| `[^|]*?(--[a-z][a-z-]*)", table, re.M))
    assert "--redis-timeout" in opts and "--rules" in opts, opts
    r = subprocess.run([agent_bin(), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    missing = sorted(o for o in opts if o not in r.stdout)
    assert not missing, "README lists options --help does not know: %s" % missing
