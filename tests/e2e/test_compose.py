"""The compose stack (docker-compose.yml, docker/Dockerfile.agent) without a
Docker engine: `docker-compose config` when docker-compose is installed, and
checks that need no Docker at all: the files it references exist, the
HAProxy configuration it mounts passes `haproxy -c` with the stack's
environment, the agent's and HAProxy's addresses agree, and the image is
built from Debian packages that scripts/install-deps.sh lists.

docker-compose.yml is read with a few patterns, not a YAML parser (the
standard library has none); they expect the layout of that file: two-space
indentation, one service per block, commands as flow sequences of
double-quoted strings (["a", "b"]).
"""

import json
import os
import re
import shutil
import subprocess

import harness

ROOT = harness.ROOT
COMPOSE = os.path.join(ROOT, "docker-compose.yml")
INSTALL_DEPS = os.path.join(ROOT, "scripts", "install-deps.sh")
SERVICES = ["agent", "backend", "haproxy", "redis"]


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
    """[(host path, container path)] of a service's bind mounts."""
    return [(os.path.normpath(os.path.join(ROOT, src)), dst)
            for src, dst in re.findall(r"^\s+- (\./[^:\s]+):(/[^:\s]+)(?::ro)?\s*$", block, re.M)]


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
    # rules.yaml, backend.py, haproxy.cfg, spoe.conf, tiers.map
    assert len(mounts) == 5, mounts
    for src, dst in mounts:
        assert os.path.isfile(src), "%s (mounted at %s) does not exist" % (src, dst)
    agent = svc["agent"]
    context = re.search(r"^\s+context: (\S+)\s*$", agent, re.M).group(1)
    dockerfile = re.search(r"^\s+dockerfile: (\S+)\s*$", agent, re.M).group(1)
    assert dockerfile == "docker/Dockerfile.agent", dockerfile
    ctx = os.path.normpath(os.path.join(ROOT, context))
    assert ctx == ROOT, ctx
    assert os.path.isfile(os.path.join(ctx, dockerfile)), dockerfile
    # What the Dockerfile copies from the context.
    copies = re.findall(r"^COPY (?!--from)(\S+) \S+\s*$", read(os.path.join(ctx, dockerfile)), re.M)
    assert copies == ["Makefile", "agent/", "tools/demo/rules.yaml"], copies
    for src in copies:
        assert os.path.exists(os.path.join(ctx, src)), src


def haproxy_files_and_env():
    """The host path of the mounted haproxy.cfg and the environment of the
    haproxy service, with container paths replaced by the mounted host files
    and service names and 0.0.0.0 by 127.0.0.1 (they do not resolve here)."""
    svc = services()
    block = svc["haproxy"]
    mounts = dict((dst, src) for src, dst in volumes(block))
    cfg = mounts.get("/usr/local/etc/haproxy/haproxy.cfg")
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
        "RL_SPOE_CONF": "/usr/local/etc/haproxy/spoe.conf",
        "RL_TIERS_MAP": "/usr/local/etc/haproxy/tiers.map",
        "RL_STATS": "0.0.0.0:8404",
        "RL_CHECK_INTER": "2s",
    }, env
    # Every variable the mounted configuration reads is set by the stack, so
    # no loopback default of the files applies inside the containers.
    used = set()
    for path in mounts.values():
        used.update(re.findall(r"\$\{(RL_[A-Z_]+)", read(path)))
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
    agent_mounts = dict((dst, src) for src, dst in volumes(svc["agent"]))
    assert agent_mounts == {rules: os.path.join(ROOT, "tools", "demo", "rules.yaml")}, agent_mounts
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
    m = re.search(r'^PKGS="([^"]*)"', read(INSTALL_DEPS), re.M)
    assert m, "no PKGS=\"...\" in scripts/install-deps.sh"
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


def test_dockerfile_uses_only_listed_debian_packages():
    text = read(os.path.join(ROOT, "docker", "Dockerfile.agent"))
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["debian:12", "debian:12-slim"], text
    pkgs = dockerfile_apt_packages(text)
    assert sorted(pkgs) == ["build-essential", "libev-dev", "libhiredis-dev",
                            "libyaml-dev", "pkg-config"], pkgs
    listed = install_deps_packages()
    assert not set(pkgs) - listed, "not in scripts/install-deps.sh: %s" % sorted(set(pkgs) - listed)
    assert re.search(r"^RUN make .*\bagent\b", text, re.M), "no `make agent` step"
    # The parser finds packages where they are, and only there.
    sample = ("RUN apt-get update \\\n    && DEBIAN_FRONTEND=noninteractive apt-get install -y "
              "--no-install-recommends a b \\\n    c && rm -rf x\nRUN echo apt-get install d\n")
    assert dockerfile_apt_packages(sample) == ["a", "b", "c"], dockerfile_apt_packages(sample)
