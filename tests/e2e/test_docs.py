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


def test_readme_layout_names_every_module():
    """The layout section names every folder of agent/ and every module in
    the folder it lives in."""
    text = readme()
    layout = text[text.index("Layout:\n"):]
    layout = layout[:layout.index("\n\n", layout.index("agent/"))]
    blocks = re.split(r"^    (agent/[a-z/]*)", layout, flags=re.M)
    described = {blocks[i].rstrip("/"): blocks[i + 1] for i in range(1, len(blocks) - 1, 2)}
    agent = os.path.join(harness.ROOT, "agent")
    folders = ["agent"] + ["agent/" + d for d in sorted(os.listdir(agent))
                           if os.path.isdir(os.path.join(agent, d))]
    missing = []
    for folder in folders:
        if folder == "agent/store/redis" or folder.endswith("/redis"):
            continue
        assert folder in described, "README layout has no entry for %s/" % folder
        for f in sorted(os.listdir(os.path.join(harness.ROOT, folder))):
            name, ext = os.path.splitext(f)
            if ext != ".c" or name.endswith("_int"):
                continue
            if not re.search(r"\b%s\b" % re.escape(name), described[folder]):
                missing.append("%s/%s" % (folder, f))
    assert not missing, "README layout does not name: %s" % missing


MAN_PAGE = os.path.join(harness.ROOT, "dist", "spoa-ratelimit.8")


def help_options():
    """Every option --help lists, short and long."""
    r = subprocess.run([agent_bin(), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    opts = set()
    for line in r.stdout.splitlines():
        m = re.match(r"^\s+((?:-[A-Za-z], )?--[a-z][a-z-]*)", line)
        if m:
            opts.update(re.findall(r"--?[A-Za-z][a-z-]*", m.group(1)))
    return opts


def man_text():
    """The man page's source with troff's escaped hyphens plain."""
    with open(MAN_PAGE, encoding="utf-8") as f:
        return f.read().replace("\\-", "-")


def test_man_page_documents_every_option():
    opts = help_options()
    assert {"--rules", "-f", "--redis-timeout", "--check", "-h", "--help"} <= opts, opts
    text = man_text()
    # An option is documented where it starts a tagged paragraph (.TP).
    entries = "\n".join(re.findall(r"^\.TP\n(.*)$", text, re.M))
    missing = sorted(o for o in opts
                     if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), entries))
    assert not missing, "the man page has no entry for: %s" % missing


def test_man_page_and_package_carry_the_agent_version():
    r = subprocess.run([agent_bin(), "--version"], capture_output=True, text=True, timeout=10)
    version = r.stdout.split()[-1]
    m = re.search(r'^\.TH \S+ 8 "[^"]*" "spoa-ratelimit ([^"]+)"', man_text(), re.M)
    assert m and m.group(1) == version, "man page .TH: %s, agent: %s" % (
        m and m.group(1), version)
    with open(os.path.join(harness.ROOT, "debian", "changelog"), encoding="utf-8") as f:
        m = re.match(r"spoa-ratelimit \(([^)]+)-[^-)]+\)", f.readline())
    assert m and m.group(1) == version, "debian/changelog: %s, agent: %s" % (
        m and m.group(1), version)


def test_man_page_renders_without_warnings():
    import shutil
    if not shutil.which("groff"):
        raise harness.Skip("groff is not installed (scripts/install-deps.sh installs groff-base)")
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", MAN_PAGE],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and not r.stderr, r.stderr


def section(text, heading):
    """A Markdown section: from its heading to the next heading of its
    level or above, outside fenced code (whose comments start with #)."""
    level = len(heading.split(" ")[0])
    lines = text[text.index(heading + "\n"):].splitlines(keepends=True)
    out, fenced = [lines[0]], False
    for line in lines[1:]:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,%d} " % level, line):
            break
        out.append(line)
    return "".join(out)


def test_readme_message_is_the_shipped_one():
    """The check-rate message the README shows is spoe-conf/ratelimit.conf's,
    line for line, and so is the path expression it explains."""
    text = readme()
    intro = "as `spoe-conf/ratelimit.conf` has it:\n\n"
    block = text[text.index(intro) + len(intro):]
    block = block[:block.index("\n\n")]
    shown = [line[4:] for line in block.splitlines()]
    with open(harness.SPOE_CONF, encoding="utf-8") as f:
        spoe = f.read()
    message = spoe[spoe.index("spoe-message check-rate"):].rstrip("\n").splitlines()
    assert shown == message, "README's message differs from spoe-conf/ratelimit.conf"
    path_arg = [line.strip() for line in message if line.strip().startswith("args path=")]
    assert len(path_arg) == 1 and ("\n    %s\n" % path_arg[0]) in \
        section(text, "### Identity and paths"), "the path expression explained is not the file's"


def test_docs_say_why_clients_and_paths_cannot_be_chosen():
    """The integration guide says why a client must not choose its name,
    how an IPv6 client and an API key are named, how the path is
    normalised and what is refused; beside request_id, that a reused id
    shares one place, so the id is HAProxy's own."""
    text = readme()
    ident = section(text, "### Identity and paths")
    for words in ("ipmask(32,64)", "/64", "a map has found it", "made-up key per request",
                  "url_dec", "lower case", "txn.rl_path", "deny_status 400",
                  "normalize-uri", "PCRE", "identity: ip"):
        assert words in ident, "README's Identity and paths says nothing of %r" % words
    conc = section(text, "## Concurrency: requests in flight")
    assert "unique-id-format %[uuid()]" in conc, "README's concurrency example"
    assert "share one place" in conc and "x-request-id" in conc, \
        "README's concurrency section does not say why request_id is HAProxy's own"
    with open(os.path.join(harness.ROOT, "docs", "rules.md"), encoding="utf-8") as f:
        rules = f.read()
    conc = section(rules, "## Concurrency")
    assert "share **one**" in conc and "x-request-id" in conc, \
        "docs/rules.md's concurrency section does not say why request_id is HAProxy's own"
    ident = rules[rules.index("**`identity`**"):rules.index("**`cost_argument`**")]
    assert "/64" in ident and "map" in ident, "docs/rules.md's identity"
    match = section(rules, "## Match conditions")
    assert "normalize-uri" not in match and "lower case" in match, \
        "docs/rules.md's match conditions do not say how the path comes"


def test_docs_show_no_client_chosen_identity():
    """What the README and docs/rules.md show HAProxy sending is what the
    shipped files send: no address whole, no API key without the map."""
    for doc in ("README.md", os.path.join("docs", "rules.md")):
        with open(os.path.join(harness.ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        assert not re.search(r"ip=src(?!,ipmask\(32,64\))", text), doc
        assert not re.search(r"api_key=req\.hdr\(x-api-key\)(?!,set-var)", text), doc
