# SPDX-License-Identifier: Apache-2.0
"""The compose stack (docker-compose.yml, docker/) without a Docker engine:
`docker-compose config` when docker-compose is installed, and checks that
need no Docker at all: the files it references exist, the HAProxy
configuration it mounts passes `haproxy -c` with the stack's environment,
the addresses of the agent, HAProxy and Prometheus's targets agree, the
ports are published on loopback only, each by the variable
tests/compose/run.py sets, and every image is built from debian:12 with
Debian packages that scripts/install-deps.sh lists (Prometheus's own
excepted: nothing outside its container needs it). `make compose-test`
(tests/compose/run.py) builds and runs the stack for real.

docker-compose.yml is read with a few patterns, not a YAML parser (the
standard library has none); they expect the layout of that file: two-space
indentation, one service per block, commands as flow sequences of
double-quoted strings (["a", "b"]).
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess

import harness

ROOT = harness.ROOT
COMPOSE = os.path.join(ROOT, "docker-compose.yml")
INSTALL_DEPS = os.path.join(ROOT, "scripts", "install-deps.sh")
SERVICES = ["agent", "backend", "haproxy", "prometheus", "redis"]
# The Debian packages each image installs.
IMAGE_PACKAGES = {
    "agent": ["build-essential", "libev-dev", "libhiredis-dev", "libssl-dev", "libyaml-dev",
              "pkg-config"],
    "backend": ["python3"],
    "haproxy": ["haproxy"],
    "prometheus": ["prometheus"],
    "redis": ["redis-server"],
}
# Installed in its image only: no build, test or demo on the host runs it.
IMAGE_ONLY_PACKAGES = {"prometheus"}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def services():
    """{name: text of its block} for every service of docker-compose.yml."""
    text = read(COMPOSE)
    m = re.search(r"^services:\n", text, re.M)
    assert m, "no services: in docker-compose.yml"
    body = text[m.end():]
    end = re.search(r"^\S", body, re.M)  # the next top-level key
    if end:
        body = body[:end.start()]
    out = {}
    parts = re.split(r"^  ([A-Za-z0-9_.-]+):[ \t]*\n", body, flags=re.M)
    for name, block in zip(parts[1::2], parts[2::2]):
        out[name] = block
    return out


def volumes(block):
    """[(host path, container path)] of a service's bind mounts; a host path
    given by a variable (${RL_RULES_DIR:-./tools/demo}) is its default."""
    return [(os.path.normpath(os.path.join(ROOT, src)), dst)
            for src, dst in re.findall(r"^\s+- (?:\$\{[A-Z_]+:-)?(\./[^:}\s]+)\}?:(/[^:\s]+)(?::ro)?\s*$",
                                       block, re.M)]


def build(block):
    """(context directory, Dockerfile path) of a service's image."""
    context = re.search(r"^\s+context: (\S+)\s*$", block, re.M).group(1)
    dockerfile = re.search(r"^\s+dockerfile: (\S+)\s*$", block, re.M).group(1)
    ctx = os.path.normpath(os.path.join(ROOT, context))
    return ctx, os.path.join(ctx, dockerfile)


def published(block):
    """[(variable, its default, container port)] of a service's ports,
    which must all have the form "127.0.0.1:${VAR:-N}:N"."""
    m = re.search(r"^\s+ports:\n((?:\s+- .*\n)+)", block, re.M)
    out = []
    for line in m.group(1).splitlines() if m else []:
        p = re.fullmatch(r'\s+- "127\.0\.0\.1:\$\{([A-Z_]+):-(\d+)\}:(\d+)"', line)
        assert p, "not published on loopback by a variable: " + line
        out.append((p.group(1), int(p.group(2)), int(p.group(3))))
    return out


def environment(block):
    return dict(re.findall(r"^\s+(RL_[A-Z_]+): \"([^\"]*)\"\s*$", block, re.M))


def command(block):
    m = re.search(r"^\s+command: (\[.*?\])\s*$", block, re.M | re.S)
    assert m, "no command in:\n" + block
    return json.loads(m.group(1))


def option(argv, name):
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


def test_compose_config_is_valid():
    exe = shutil.which("docker-compose")
    if exe is None:
        raise harness.Skip("docker-compose is not installed (scripts/install-deps.sh installs it)")
    run = subprocess.run([exe, "-f", COMPOSE, "config", "-q"], cwd=ROOT, timeout=60,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert run.returncode == 0, run.stdout.decode("utf-8", "replace")
    assert run.stdout == b"", run.stdout
    run = subprocess.run([exe, "-f", COMPOSE, "config", "--services"], cwd=ROOT, timeout=60,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert run.returncode == 0, run.stdout.decode("utf-8", "replace")
    assert sorted(run.stdout.decode().split()) == SERVICES, run.stdout


def test_compose_files_exist():
    svc = services()
    assert sorted(svc) == SERVICES, sorted(svc)
    mounts = [m for block in svc.values() for m in volumes(block)]
    # tools/demo (the rules' directory), backend.py, haproxy.cfg, spoe.conf,
    # tiers.map, prometheus.yml
    assert len(mounts) == 6, mounts
    for src, dst in mounts:
        assert os.path.exists(src), "%s (mounted at %s) does not exist" % (src, dst)
    # Every image is built here, each from its own Dockerfile in docker/;
    # only the agent's needs the repository as its context.
    for name, block in svc.items():
        assert not re.search(r"^\s+image:", block, re.M), \
            "%s names an image: `down --rmi local` would keep it" % name
        ctx, dockerfile = build(block)
        assert dockerfile == os.path.join(ROOT, "docker", "Dockerfile." + name), dockerfile
        assert ctx == (ROOT if name == "agent" else os.path.join(ROOT, "docker")), (name, ctx)
        assert os.path.isfile(dockerfile), dockerfile
        # What the Dockerfile copies from the context.
        copies = re.findall(r"^COPY (?!--from)(\S+) \S+\s*$", read(dockerfile), re.M)
        want = ["Makefile", "agent/", "tools/demo/rules.yaml"] if name == "agent" else []
        assert copies == want, (name, copies)
        for src in copies:
            assert os.path.exists(os.path.join(ctx, src)), src


def haproxy_files_and_env():
    """The host path of the mounted haproxy.cfg and the environment of the
    haproxy service, with container paths replaced by the mounted host files
    and service names and 0.0.0.0 by 127.0.0.1 (they do not resolve here)."""
    svc = services()
    block = svc["haproxy"]
    mounts = dict((dst, src) for src, dst in volumes(block))
    cfg = mounts.get("/etc/haproxy/haproxy.cfg")
    assert cfg is not None, mounts
    env = environment(block)
    local = {}
    for name, value in env.items():
        if value.startswith("/"):
            assert value in mounts, "%s=%s is not a mounted file" % (name, value)
            value = mounts[value]
        else:
            m = re.fullmatch(r"([A-Za-z0-9_.-]+):(\d+)", value)
            if m and (m.group(1) in svc or m.group(1) == "0.0.0.0"):
                value = "127.0.0.1:" + m.group(2)
        local[name] = value
    return cfg, env, local, mounts


def haproxy_check(cfg, env):
    if shutil.which(harness.HAPROXY) is None:
        raise harness.Skip("haproxy is not installed")
    e = dict(os.environ)
    for name in list(e):
        if name.startswith("RL_"):
            del e[name]
    e.update(env)
    # A directory far from the repository, so that no relative default path
    # of the configuration can be found by chance. -V: from 3.0 on, -c says
    # "Configuration file is valid" only when verbose (2.6 says it either way).
    run = subprocess.run([harness.HAPROXY, "-c", "-V", "-f", cfg], cwd="/", env=e, timeout=30,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return run.returncode, run.stdout.decode("utf-8", "replace")


def test_compose_haproxy_config_passes_haproxy_check():
    cfg, env, local, mounts = haproxy_files_and_env()
    assert env == {
        "RL_FRONTEND": "0.0.0.0:8080",
        "RL_APP": "backend:8000",
        "RL_AGENT": "agent:12345",
        "RL_SPOE_CONF": "/etc/haproxy/spoe.conf",
        "RL_TIERS_MAP": "/etc/haproxy/tiers.map",
        "RL_STATS": "0.0.0.0:8404",
        "RL_CHECK_INTER": "2s",
    }, env
    # Every variable the mounted configuration reads is set by the stack, so
    # no loopback default of the files applies inside the containers.
    used = set()
    for path in mounts.values():
        used.update(re.findall(r"\$\{(RL_[A-Z_]+)", read(path)))
    # HAProxy's Prometheus exporter, which the stack's Prometheus scrapes.
    assert re.search(r"^\s+http-request use-service prometheus-exporter if \{ path /metrics \}$",
                     read(cfg), re.M), cfg
    assert used == set(env), (sorted(used), sorted(env))
    rc, out = haproxy_check(cfg, local)
    assert rc == 0, out
    assert "Configuration file is valid" in out, out
    # The check does read the mounted map through the environment: a map
    # that is not there fails it.
    broken = dict(local, RL_TIERS_MAP=local["RL_TIERS_MAP"] + ".missing")
    rc, out = haproxy_check(cfg, broken)
    assert rc != 0, out
    assert "tiers.map.missing" in out, out


def test_compose_addresses_agree():
    svc = services()
    agent_argv = command(svc["agent"])
    assert option(agent_argv, "--listen") == "0.0.0.0:12345", agent_argv
    assert option(agent_argv, "--redis") == "redis:6379", agent_argv
    rules = option(agent_argv, "-f")
    assert rules == "/etc/spoa-ratelimit/rules.yaml", agent_argv
    # The rules' directory is mounted, so that a file renamed over the
    # old one (as editors save) is what the agent reads on SIGHUP.
    agent_mounts = dict((dst, src) for src, dst in volumes(svc["agent"]))
    assert agent_mounts == {os.path.dirname(rules): os.path.join(ROOT, "tools", "demo")}, \
        agent_mounts
    assert re.search(r"^\s+- \$\{RL_RULES_DIR:-\./tools/demo\}:", svc["agent"], re.M), svc["agent"]
    backend_argv = command(svc["backend"])
    assert option(backend_argv, "--listen") == "0.0.0.0:8000", backend_argv
    backend_mounts = dict((dst, src) for src, dst in volumes(svc["backend"]))
    assert backend_mounts == {backend_argv[1]: os.path.join(ROOT, "tools", "demo", "backend.py")}, \
        backend_mounts
    env = environment(svc["haproxy"])
    # HAProxy reaches the agent and the application at their service names
    # and the ports they listen on.
    assert env["RL_AGENT"] == "agent:" + option(agent_argv, "--listen").rsplit(":", 1)[1], env
    assert env["RL_APP"] == "backend:" + option(backend_argv, "--listen").rsplit(":", 1)[1], env
    # The Dockerfile's default command is the compose one without metrics.
    cmd = re.search(r"^CMD (\[.*\])\s*$", read(os.path.join(ROOT, "docker", "Dockerfile.agent")),
                    re.M)
    assert json.loads(cmd.group(1)) == agent_argv[:6], (cmd.group(1), agent_argv)
    # Prometheus scrapes the agent's --metrics port and HAProxy's statistics
    # frontend, where its exporter answers.
    prom_mounts = dict((dst, src) for src, dst in volumes(svc["prometheus"]))
    prom = read(prom_mounts["/etc/prometheus/prometheus.yml"])
    targets = dict(re.findall(r"- job_name: (\S+)\n(?:.*\n)*?\s+- targets: \[\"([^\"]+)\"\]", prom))
    metrics_port = option(agent_argv, "--metrics").rsplit(":", 1)[1]
    assert targets == {"spoa-ratelimit": "agent:" + metrics_port,
                       "haproxy": "haproxy:" + env["RL_STATS"].rsplit(":", 1)[1]}, targets


def load_compose_test():
    path = os.path.join(ROOT, "tests", "compose", "run.py")
    spec = importlib.util.spec_from_file_location("compose_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_compose_ports_are_loopback_and_configurable():
    svc = services()
    ports = {}
    for name, block in svc.items():
        for var, default, inside in published(block):
            assert default == inside, (name, var, default, inside)
            ports[var] = (name, inside)
    # The ports `make compose-test` moves (to ports Docker picks) are all
    # the published ones.
    assert ports == load_compose_test().PORTS, ports
    env = environment(svc["haproxy"])
    agent_argv = command(svc["agent"])
    assert ports["RL_HTTP_PORT"][1] == int(env["RL_FRONTEND"].rsplit(":", 1)[1]), env
    assert ports["RL_STATS_PORT"][1] == int(env["RL_STATS"].rsplit(":", 1)[1]), env
    assert ports["RL_METRICS_PORT"][1] == int(option(agent_argv, "--metrics").rsplit(":", 1)[1])


def test_compose_rules_pass_the_agent_check():
    binary = os.path.join(harness.BUILD, "spoa-ratelimit")
    if not os.access(binary, os.X_OK):
        raise harness.Skip("%s is missing" % binary)
    rules = os.path.join(ROOT, "tools", "demo", "rules.yaml")
    run = subprocess.run([binary, "-f", rules, "--listen", "0.0.0.0:12345",
                          "--redis", "redis:6379", "--check"], timeout=30,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = run.stdout.decode("utf-8", "replace")
    assert run.returncode == 0, out
    assert out.strip() == "%s: ok, 6 rule(s)" % rules, out


def install_deps_packages():
    # The list of the default case (`all)`), which `make test` installs.
    m = re.search(r'^all\)\s*PKGS="([^"]*)"', read(INSTALL_DEPS), re.M)
    assert m, "no all) PKGS=\"...\" in scripts/install-deps.sh"
    return set(m.group(1).split())


def dockerfile_apt_packages(text):
    """Every package named by an `apt-get install` of a RUN instruction."""
    text = re.sub(r"\\\n", " ", text)  # continuation lines
    pkgs = []
    for run in re.findall(r"^RUN (.*)$", text, re.M):
        for segment in re.split(r"&&|;|\|", run):
            words = segment.split()
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value
                words.pop(0)
            if words[:2] != ["apt-get", "install"]:
                continue
            pkgs.extend(w for w in words[2:] if not w.startswith("-"))
    return pkgs


def test_dockerfiles_use_only_listed_debian_packages():
    listed = install_deps_packages()
    for name, want in IMAGE_PACKAGES.items():
        text = read(os.path.join(ROOT, "docker", "Dockerfile." + name))
        # debian:12 alone, which scripts/docker-base.sh makes from Debian's
        # archive where no registry can be reached.
        froms = re.findall(r"^FROM (\S+)", text, re.M)
        assert froms == ["debian:12"] * (2 if name == "agent" else 1), (name, froms)
        # Each stage labelled at once, so that every layer it leaves
        # untagged can be found (make compose-test removes them).
        labels = re.findall(r"^FROM \S+(?: AS \S+)?\nLABEL spoa-ratelimit\.image=(\S+)$", text, re.M)
        assert labels == (["agent-build", "agent"] if name == "agent" else [name]), (name, labels)
        pkgs = dockerfile_apt_packages(text)
        assert sorted(pkgs) == want, (name, pkgs)
        unlisted = set(pkgs) - listed - IMAGE_ONLY_PACKAGES
        assert not unlisted, "%s: not in scripts/install-deps.sh: %s" % (name, sorted(unlisted))
    text = read(os.path.join(ROOT, "docker", "Dockerfile.agent"))
    assert re.search(r"^RUN make .*\bagent\b", text, re.M), "no `make agent` step"
    # The parser finds packages where they are, and only there.
    sample = ("RUN apt-get update \\\n    && DEBIAN_FRONTEND=noninteractive apt-get install -y "
              "--no-install-recommends a b \\\n    c && rm -rf x\nRUN echo apt-get install d\n")
    assert dockerfile_apt_packages(sample) == ["a", "b", "c"], dockerfile_apt_packages(sample)
