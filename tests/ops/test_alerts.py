# SPDX-License-Identifier: Apache-2.0
"""The Prometheus alerting rules (alerts/spoa-ratelimit.rules.yml):

- `promtool check rules` accepts them;
- `promtool test rules` passes their unit tests
  (alerts/spoa-ratelimit.rules.test.yml), which test every alert both
  firing and silent;
- those tests catch a broken expression: for each alert, a copy of the
  rules where its expression never fires, and one where its comparisons
  no longer filter (`>` made `> bool`, so every series it reads fires),
  must each fail them, on that alert;
- every metric the rules name is one an agent on Redis serves (a
  histogram through its _bucket series), scraped from a real agent.

promtool comes with Debian's prometheus package; without it the first
three skip. Everything listens on loopback ports picked at run time.
"""

import concurrent.futures
import os
import re
import shutil
import subprocess

import harness
from harness import ROOT, http_get, wait_for
from redis_helper import RedisServer
from spop import Conn

ALERTS = os.path.join(ROOT, "alerts")
RULES = os.path.join(ALERTS, "spoa-ratelimit.rules.yml")
TESTS = os.path.join(ALERTS, "spoa-ratelimit.rules.test.yml")

COMPARISON_RE = re.compile(r" (>=|<=|==|!=|>|<) ")


def promtool():
    path = shutil.which("promtool")
    if path is None:
        raise harness.Skip("promtool is not installed (Debian package prometheus)")
    return path


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def alerts(text):
    """{alert name: (first, last)}: the lines of its expression (after
    the `expr: |` line, up to its `for:`), as indices into
    text.split("\\n")."""
    lines = text.split("\n")
    out = {}
    name = None
    for i, line in enumerate(lines):
        m = re.match(r"^      - alert: (\w+)$", line)
        if m:
            name = m.group(1)
            assert name not in out, "alert %s twice" % name
            assert lines[i + 1] == "        expr: |", "%s: expr must follow, as a block" % name
            end = i + 2
            while not lines[end].startswith("        for: "):
                assert lines[end].startswith("          "), (name, lines[end])
                end += 1
            out[name] = (i + 2, end - 1)
    return out


def mutated(text, name, how):
    """The rules with the expression of alert `name` broken: "never"
    returns nothing, "bool" keeps every series its comparisons would have
    filtered out."""
    lines = text.split("\n")
    first, last = alerts(text)[name]
    if how == "never":
        lines[first:last + 1] = ["          vector(1) < 0"]
    else:
        n = 0
        for i in range(first, last + 1):
            lines[i], k = COMPARISON_RE.subn(r" \1 bool ", lines[i])
            n += k
        assert n, "%s: no comparison to make bool" % name
    return "\n".join(lines)


def run_tests(tool, test_file):
    r = subprocess.run([tool, "test", "rules", test_file], capture_output=True, text=True,
                       timeout=60, cwd=os.path.dirname(test_file))
    return r.returncode, r.stdout + r.stderr


def test_alert_rules_pass_promtool_check():
    tool = promtool()
    names = alerts(read(RULES))
    assert len(names) >= 10, names
    r = subprocess.run([tool, "check", "rules", RULES], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, "promtool check rules: exit %d\n%s%s" % (
        r.returncode, r.stdout, r.stderr)
    assert "SUCCESS: %d rules found" % len(names) in r.stdout, r.stdout
    # What every alert carries (promtool checks that the templates parse).
    for block in read(RULES).split("\n      - alert: ")[1:]:
        name = block.split("\n", 1)[0]
        for key in ("\n        for: ", "\n          summary: ", "\n          description: "):
            assert key in block, "%s has no %s" % (name, key.strip())
        assert re.search(r"\n          severity: (warning|critical)\n", block), name


def test_alert_rules_unit_tests():
    tool = promtool()
    rc, out = run_tests(tool, TESTS)
    assert rc == 0 and "SUCCESS" in out, "promtool test rules: exit %d\n%s" % (rc, out)
    # Each alert is tested firing and silent.
    tests = read(TESTS)
    cases = re.findall(r"alertname: (\w+)\n\s+exp_alerts:( \[\])?", tests)
    for name in alerts(read(RULES)):
        fired = [c for c in cases if c[0] == name and not c[1]]
        silent = [c for c in cases if c[0] == name and c[1]]
        assert fired and silent, "%s: %d firing and %d silent checks" % (
            name, len(fired), len(silent))


def groups_of(tests_text, name):
    """The unit tests' file with only the groups that test alert `name`
    (a group starts at a "  - " line under "tests:")."""
    head, _, body = tests_text.partition("\ntests:\n")
    groups = re.split(r"(?m)^(?=  - )", body)
    keep = [g for g in groups if "alertname: %s\n" % name in g]
    assert keep, "no unit test group for %s" % name
    return head + "\ntests:\n" + "".join(keep)


def test_alert_rules_tests_catch_broken_expressions(h):
    tool = promtool()
    text = read(RULES)
    tests_text = read(TESTS)

    def check(case):
        """The unit tests against one broken copy, in a directory of its
        own; returns what they missed, or None."""
        name, how = case
        d = os.path.join(h.dir, "%s-%s" % (name, how))
        os.mkdir(d)
        # (the alert's own groups: a broken expression must fail them)
        test_file = os.path.join(d, os.path.basename(TESTS))
        with open(test_file, "w", encoding="utf-8") as f:
            f.write(groups_of(tests_text, name))
        with open(os.path.join(d, os.path.basename(RULES)), "w", encoding="utf-8") as f:
            f.write(mutated(text, name, how))
        rc, out = run_tests(tool, test_file)
        if rc == 0 or "alertname: %s," % name not in out:
            return "%s (%s): exit %d" % (name, how, rc)
        return None
    cases = [(name, how) for name in alerts(text) for how in ("never", "bool")]
    # a few promtools at once: each waits as much as it computes
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        missed = [m for m in pool.map(check, cases) if m]
    assert not missed, "the unit tests miss a broken expression: %s" % missed


def test_alert_rules_name_served_metrics(h):
    """Every spoa_rl_ name of the rules (expressions and annotations) is
    a series of an agent on Redis, after one decision."""
    redis = RedisServer(h)
    mport = harness.free_port()
    a = h.agent("--threads", "1", "--redis", redis.addr, "--hash-key-file", h.hash_key_file(),
                "--metrics", "127.0.0.1:%d" % mport)
    wait_for(lambda: "redis: worker 0 ready" in a.log() or not a.alive(), 5,
             "the agent's worker to be ready with Redis")
    assert a.alive(), a.log()
    with Conn(a.port, timeout=5) as c:
        c.handshake()
        assert c.check_rate(1, 1, api_key="alerts")["status"] == 0
    # the server's memory and keys, read a second after the start
    wait_for(lambda: "spoa_rl_redis_used_memory_bytes{" in http_get(mport, "/metrics").text,
             10, "Redis's memory read")
    text = http_get(mport, "/metrics").text
    served = set(re.findall(r"^(spoa_rl_[a-z0-9_]+)[{ ]", text, re.M))
    named = set(re.findall(r"\bspoa_rl_[a-z0-9_]+", read(RULES)))
    assert len(named) >= 15, named
    missing = sorted(n for n in named if n not in served and n + "_bucket" not in served)
    assert not missing, "the rules name series the agent does not serve: %s\n%s" % (
        missing, text)
