#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`make compose-test`: the compose stack (docker-compose.yml) built and
started for real, then checked through the ports it publishes on loopback:

  1. the demo's traffic, by tools/demo.py's own steps: the free key reaches
     429 with Retry-After, a pro key passes, and under load P3 and P2 are
     shed with 503 while P1 and P0 pass;
  2. a reload: the rules file the agent mounts (a copy in a temporary
     directory, never the repository's) gets a smaller free limit,
     `docker-compose kill -s HUP agent`, and the answers follow it;
  3. Prometheus scrapes the agent (up == 1 and spoa_rl_ series) and
     HAProxy's own exporter.

Whatever happens (a failure, Ctrl-C, SIGTERM), everything it made is
removed at the end: containers, network, the images it built
(`docker-compose down --rmi local -v`) and the layers a build leaves
untagged (the agent's build stage; those of a build stopped half-way,
once Docker has finished its step). Every wait has a timeout. Needs a running Docker engine and the
debian:12 image: the Makefile target sees to both first
(scripts/docker-engine.sh, scripts/docker-base.sh).

    python3 tests/compose/run.py

Published ports: RL_HTTP_PORT, RL_STATS_PORT, RL_METRICS_PORT and
RL_PROMETHEUS_PORT when set, otherwise ports Docker picks free (0). The
compose project has a name of its own per run, so a stack an operator runs
from the same files is left alone.
"""

import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

import harness  # noqa: E402

COMPOSE_FILE = os.path.join(ROOT, "docker-compose.yml")
RULES = os.path.join(ROOT, "tools", "demo", "rules.yaml")
# The label of every image docker/ builds, and of every layer such a build
# leaves untagged (docker/Dockerfile.agent says why).
IMAGE_LABEL = "spoa-ratelimit.image"

# The published ports: variable of docker-compose.yml -> (service, port
# inside the container).
PORTS = {
    "RL_HTTP_PORT": ("haproxy", 8080),
    "RL_STATS_PORT": ("haproxy", 8404),
    "RL_METRICS_PORT": ("agent", 9102),
    "RL_PROMETHEUS_PORT": ("prometheus", 9090),
}

BUILD_TIMEOUT = 480      # seconds: every image, from debian:12
UP_TIMEOUT = 120
READY_TIMEOUT = 60       # the agent UP in HAProxy, Redis answering
SCRAPE_TIMEOUT = 60      # Prometheus scrapes every 5 s (docker/prometheus.yml)
DOWN_TIMEOUT = 180
BUILDS_TIMEOUT = 120     # a build stopped half-way finishes its step first

# The reload: the free tier's minute limit of tools/demo/rules.yaml, then
# the one the copy gets.
FREE_LIMITS = 'limits: ["10/1m", "100/1h"]'
FREE_LIMITS_RELOADED = 'limits: ["3/1m", "100/1h"]'
FREE_POLICY = '"free-1m";q=10;w=60'
FREE_POLICY_RELOADED = '"free-1m";q=3;w=60'


def load_demo():
    """tools/demo.py as a module: its steps run here unchanged."""
    spec = importlib.util.spec_from_file_location("demo", os.path.join(ROOT, "tools", "demo.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Published:
    """HAProxy as the stack publishes it, with what tools/demo.py asks of a
    harness.HAProxy: the port clients connect to, and the statistics."""

    def __init__(self, port, stats_port):
        self.port = port
        self.stats_port = stats_port

    def server_stat(self, backend, server):
        return harness.stats_row(self.stats_port, backend, server)


class Stack:
    """One compose project: docker-compose run with its name and
    environment, logs in a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="spoa-compose-test.")
        self.project = "spoarltest%d" % os.getpid()
        # The agent (user nobody) reads the rules through the mount.
        self.rules_dir = os.path.join(self.dir, "rules")
        os.mkdir(self.rules_dir)
        os.chmod(self.rules_dir, 0o755)
        self.rules = os.path.join(self.rules_dir, "rules.yaml")
        shutil.copyfile(RULES, self.rules)
        os.chmod(self.rules, 0o644)
        self.env = dict(os.environ, RL_RULES_DIR=self.rules_dir,
                        # The classic builder through Docker's API,
                        # whatever docker CLI is on the PATH: from 23 on,
                        # the CLI builds with BuildKit only through the
                        # buildx plugin, which Debian 12 does not package.
                        COMPOSE_DOCKER_CLI_BUILD="0", DOCKER_BUILDKIT="0")
        for var in PORTS:
            self.env.setdefault(var, "0")
        self.ports = {}

    def compose(self, *args, timeout, log=None):
        """Runs docker-compose ARGS; returns its output. Output goes to the
        file `log` in the temporary directory when named. Raises when it
        fails or runs out of time."""
        argv = ["docker-compose", "--ansi", "never", "-f", COMPOSE_FILE,
                "-p", self.project] + list(args)
        out = open(os.path.join(self.dir, log), "ab") if log else subprocess.PIPE
        try:
            run = subprocess.run(argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        finally:
            if log:
                out.close()
        text = run.stdout.decode("utf-8", "replace") if run.stdout else ""
        if run.returncode != 0:
            where = ("; the end of %s:\n%s" % (log, self.tail(log))) if log else ":\n" + text
            raise RuntimeError("docker-compose %s exited %d%s" % (args[0], run.returncode, where))
        return text

    def tail(self, log, lines=30):
        with open(os.path.join(self.dir, log), encoding="utf-8", errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])

    def published(self, var):
        """The loopback port Docker published for one of PORTS."""
        service, port = PORTS[var]
        out = self.compose("port", service, str(port), timeout=30).strip()
        m = re.fullmatch(r"127\.0\.0\.1:(\d+)", out)
        if not m:
            raise RuntimeError("%s:%d is published at %r, not on 127.0.0.1" % (service, port, out))
        return int(m.group(1))

    def teardown(self):
        """Removes what the run made: containers, network, volumes, the
        images built for this project, then the layers builds left
        untagged. Returns the problems met."""
        problems = []
        try:
            self.compose("down", "--rmi", "local", "-v", "--remove-orphans", "--timeout", "10",
                         timeout=DOWN_TIMEOUT, log="down.log")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            problems.append(str(e))
        try:
            # Docker finishes the step of a build whose client is gone and
            # commits it, and an image stays in use until the container of
            # that step is gone: prune until no build runs and nothing of
            # theirs is left.
            def pruned():
                docker("image", "prune", "-f", "--filter", "label=" + IMAGE_LABEL)
                return not building() and not untagged()
            harness.wait_for(pruned, BUILDS_TIMEOUT, "the layers of stopped builds removed",
                             interval=1)
            left = docker("ps", "-a", "-q", "--filter",
                          "label=com.docker.compose.project=" + self.project).split()
            left += docker("images", "-q", "--filter", "reference=%s_*" % self.project).split()
            left += untagged()
            if left:
                problems.append("left behind: %s" % " ".join(left))
        except (RuntimeError, subprocess.TimeoutExpired, AssertionError) as e:
            problems.append(str(e))
        return problems


def building():
    """The containers of builds of docker/'s images, running a step or not
    yet removed: they carry the images' label, but no compose project's."""
    out = docker("ps", "-a", "--filter", "label=" + IMAGE_LABEL, "--format", "{{.ID}} {{.Labels}}")
    return [line.split()[0] for line in out.splitlines()
            if "com.docker.compose.project=" not in line]


def untagged():
    """The untagged images (and layers) of docker/'s builds."""
    return docker("images", "-q", "--filter", "dangling=true",
                  "--filter", "label=" + IMAGE_LABEL).split()


def docker(*args):
    """Runs docker ARGS; returns its output, raises when it fails."""
    run = subprocess.run(["docker"] + list(args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = run.stdout.decode("utf-8", "replace")
    if run.returncode != 0:
        raise RuntimeError("docker %s exited %d: %s" % (args[0], run.returncode, out.strip()))
    return out


def answers(pred):
    """pred(), or False while what it asks through a published port cannot
    answer yet (a container still starting, or restarting)."""
    try:
        return pred()
    except (OSError, http.client.HTTPException, AssertionError, KeyError, ValueError):
        return False


def agent_metric(port, name):
    """The value of an unlabelled series of the agent's /metrics, or None."""
    r = harness.http_get(port, "/metrics")
    m = re.search(r"^%s (\S+)$" % re.escape(name), r.text, re.M)
    return float(m.group(1)) if m else None


def prometheus_query(port, query):
    """The result vector of an instant query: [(labels, value)]."""
    r = harness.http_get(port, "/api/v1/query?query=" + urllib.parse.quote(query))
    doc = json.loads(r.body)
    if r.status != 200 or doc.get("status") != "success":
        raise AssertionError("Prometheus answered %d: %s" % (r.status, r.text[:200]))
    return [(s["metric"], float(s["value"][1])) for s in doc["data"]["result"]]


class Check:
    def __init__(self, stack):
        self.stack = stack
        self.t0 = time.monotonic()
        self.demo = None

    def step(self, what):
        print("\n== %s (%.0f s)" % (what, time.monotonic() - self.t0))

    def start(self):
        s = self.stack
        self.step("docker-compose build (project %s; log %s/build.log)" % (s.project, s.dir))
        s.compose("build", "--parallel", "--force-rm", timeout=BUILD_TIMEOUT, log="build.log")
        self.step("docker-compose up -d")
        s.compose("up", "-d", "--no-build", timeout=UP_TIMEOUT, log="up.log")
        s.ports = {var: s.published(var) for var in PORTS}
        print("published on 127.0.0.1: HAProxy %(RL_HTTP_PORT)d, statistics and its exporter"
              " %(RL_STATS_PORT)d, the agent's metrics %(RL_METRICS_PORT)d, Prometheus"
              " %(RL_PROMETHEUS_PORT)d" % s.ports)
        hp = Published(s.ports["RL_HTTP_PORT"], s.ports["RL_STATS_PORT"])
        harness.wait_for(lambda: answers(lambda: hp.server_stat("ratelimit-agents", "agent1")
                                         ["status"] == "UP"),
                         READY_TIMEOUT, "the agent UP in HAProxy's statistics", interval=0.5)
        # The agent connects to Redis on its own schedule; until Redis has
        # decided once, answers would be the fail-open ones. The enterprise
        # key of tools/demo/tiers.map asks: a key the map does not list
        # would count against the address, the reload step's new client.
        def redis_decides():
            harness.http_get(hp.port, "/api/items", {"X-Api-Key": "key-ent-loadgen"})
            return (agent_metric(s.ports["RL_METRICS_PORT"], "spoa_rl_redis_replies_total")
                    or 0) > 0
        harness.wait_for(lambda: answers(redis_decides), READY_TIMEOUT,
                         "a decision answered by Redis", interval=0.5)
        print("ready: the agent is UP in HAProxy and Redis decides")
        return hp

    def traffic(self, hp):
        self.step("the demo's traffic, through the published ports")
        demo = load_demo()
        self.demo = demo.Demo(None)
        self.demo.hp = hp
        self.demo.step_limits()
        self.demo.step_shedding()
        self.demo.summary()
        if self.demo.problems:
            raise AssertionError("%d unexpected answer(s): %s"
                                 % (len(self.demo.problems), "; ".join(self.demo.problems)))

    def policy_of_new_client(self, hp, key):
        # A key tools/demo/tiers.map does not list names nobody: the client
        # is the address, which nothing else here counts against.
        r = harness.http_get(hp.port, "/api/items", {"X-Api-Key": key})
        return r.status, r.headers.get("RateLimit-Policy", "")

    def reload(self, hp):
        s = self.stack
        self.step("reload: a smaller free limit in %s, then docker-compose kill -s HUP agent"
                  % s.rules)
        metrics = s.ports["RL_METRICS_PORT"]
        status, policy = self.policy_of_new_client(hp, "key-before-reload")
        assert status == 200 and FREE_POLICY in policy, (status, policy)
        print("before: a new free client gets %d, RateLimit-Policy: %s" % (status, policy))
        with open(s.rules, encoding="utf-8") as f:
            text = f.read()
        assert text.count(FREE_LIMITS) == 1, "%s no longer says %s" % (RULES, FREE_LIMITS)
        # A new file renamed over the old, as editors save: the agent sees
        # it because the directory is mounted, not the file.
        with open(s.rules + ".new", "w", encoding="utf-8") as f:
            f.write(text.replace(FREE_LIMITS, FREE_LIMITS_RELOADED))
        os.chmod(s.rules + ".new", 0o644)
        os.replace(s.rules + ".new", s.rules)
        generation = agent_metric(metrics, "spoa_rl_rules_generation")
        s.compose("kill", "-s", "HUP", "agent", timeout=30)
        harness.wait_for(lambda: agent_metric(metrics, "spoa_rl_rules_generation") == generation + 1,
                         10, "spoa_rl_rules_generation %d" % (generation + 1), interval=0.2)
        statuses = []
        policy = None
        for _ in range(5):
            status, p = self.policy_of_new_client(hp, "key-after-reload")
            statuses.append(status)
            policy = policy or p
        print("after: spoa_rl_rules_generation %d; a new free client gets %s,"
              " RateLimit-Policy: %s" % (generation + 1, " ".join(map(str, statuses)), policy))
        assert FREE_POLICY_RELOADED in policy, policy
        assert statuses == [200, 200, 200, 429, 429], statuses

    def prometheus(self):
        s = self.stack
        self.step("Prometheus scrapes the agent and HAProxy")
        port = s.ports["RL_PROMETHEUS_PORT"]
        found = {}

        def scraped(job, prefix):
            up = prometheus_query(port, 'up{job="%s"}' % job)
            series = prometheus_query(port, 'count({__name__=~"%s.+", job="%s"})'
                                      % (prefix, job))
            if up and up[0][1] == 1 and series and series[0][1] > 0:
                found[job] = (up[0][1], series[0][1])
                return True
            return False
        for job, prefix in (("spoa-ratelimit", "spoa_rl_"), ("haproxy", "haproxy_")):
            harness.wait_for(lambda: answers(lambda: scraped(job, prefix)), SCRAPE_TIMEOUT,
                             'up{job="%s"} == 1 and %s series in Prometheus' % (job, prefix),
                             interval=1)
            print('up{job="%s"} %d, %d %s series' % (job, found[job][0], found[job][1], prefix))

    def logs(self):
        try:
            print(self.stack.compose("logs", "--no-color", "--tail", "15", timeout=60))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print("docker-compose logs: %s" % e)


def main():
    sys.stdout.reconfigure(line_buffering=True)
    if shutil.which("docker-compose") is None or shutil.which("docker") is None:
        print("compose-test: docker and docker-compose are needed (scripts/docker-engine.sh)",
              file=sys.stderr)
        return 1
    # Stopped from outside: unwind as for Ctrl-C, so that teardown runs.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    stack = Stack()
    check = Check(stack)
    rc = 1
    try:
        hp = check.start()
        check.traffic(hp)
        check.reload(hp)
        check.prometheus()
        rc = 0
    except KeyboardInterrupt:
        print("\ncompose-test: interrupted")
        rc = 130
    except SystemExit as e:
        print("\ncompose-test: stopped")
        rc = e.code if isinstance(e.code, int) else 1
    except Exception as e:  # noqa: BLE001 - report, then take everything down
        print("\ncompose-test: FAILED: %s: %s" % (type(e).__name__, e))
        check.logs()
    finally:
        # A second Ctrl-C must not stop the clean-up half-way.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if check.demo is not None:
            check.demo.stop_load.set()
        check.step("docker-compose down --rmi local -v")
        problems = stack.teardown()
        for p in problems:
            print("compose-test: teardown: " + p, file=sys.stderr)
        if rc == 0 and not problems:
            shutil.rmtree(stack.dir, ignore_errors=True)
            print("compose-test: ok in %.0f s: 429 for the free client, 200 for pro, 503 for P3"
                  " and P2 under load while P1 and P0 passed, a reload seen in the answers,"
                  " Prometheus scraping the agent and HAProxy; nothing left behind"
                  % (time.monotonic() - check.t0))
        else:
            rc = rc or 1
            print("compose-test: %s after %.0f s; logs kept in %s"
                  % ("stopped" if rc in (130, 128 + signal.SIGTERM) else "FAILED",
                     time.monotonic() - check.t0, stack.dir))
    return rc


if __name__ == "__main__":
    sys.exit(main())
