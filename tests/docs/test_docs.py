# SPDX-License-Identifier: Apache-2.0
"""The documentation stays true: the rules example of docs/rules.md is
examples/rules.yaml and passes --check, every metric the docs name is
served, every option docs/operations.md lists is accepted and the man page
documents each, the layout of docs/development.md names every module, the
README's minimal HAProxy integration runs as shown, every relative link
and anchor leads somewhere, and the README stays a front door of at most
300 lines."""

import os
import re
import shutil
import subprocess

import harness
from harness import http_get

README = os.path.join(harness.ROOT, "README.md")


def readme():
    with open(README, encoding="utf-8") as f:
        return f.read()


def doc(name):
    """A documentation file by its path from the repository's root."""
    with open(os.path.join(harness.ROOT, name), encoding="utf-8") as f:
        return f.read()


def agent_bin():
    return os.path.join(harness.BUILD, "spoa-ratelimit")


def test_rules_example_is_the_example_file_and_valid():
    text = doc("docs/rules.md")
    m = re.search(r"^## The example\n.*?```yaml\n(.*?)```", text, re.S | re.M)
    assert m, "docs/rules.md: no yaml block under '## The example'"
    path = os.path.join(harness.ROOT, "examples", "rules.yaml")
    with open(path, encoding="utf-8") as f:
        assert m.group(1).rstrip("\n") == f.read().rstrip("\n"), \
            "docs/rules.md's example differs from examples/rules.yaml"
    r = subprocess.run([agent_bin(), "-f", path, "--check"], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(path + ": ok, "), r.stdout


def docs_files():
    """README.md, BENCHMARKS.md and every docs/*.md, by path from the root."""
    docs = os.path.join(harness.ROOT, "docs")
    return ["README.md", "BENCHMARKS.md"] + sorted(
        "docs/" + f for f in os.listdir(docs) if f.endswith(".md"))


def test_docs_metrics_exist(h):
    """Every metric the documentation names is one the agent serves."""
    names = set()
    for name in docs_files():
        names.update(re.findall(r"`(spoa_rl_[a-z_]+)", doc(name)))
    assert len(names) > 20, names
    mport = harness.free_port()
    # Redis metrics appear with a Redis store; none needs to be reachable.
    h.agent("--metrics", "127.0.0.1:%d" % mport, "--redis", "127.0.0.1:1",
            "--redis-timeout", "5")
    served = set(re.findall(r"^# TYPE (spoa_rl_[a-z_]+) ", http_get(mport, "/metrics").text, re.M))
    missing = sorted(n for n in names if n not in served)
    assert not missing, "the docs name metrics the agent does not serve: %s" % missing


def test_operations_options_are_accepted():
    text = doc("docs/operations.md")
    table = text[text.index("| option | default | meaning |"):]
    table = table[:table.index("\n\n")]
    opts = set(re.findall(r"^\| `[^|]*?(--[a-z][a-z-]*)", table, re.M))
    assert "--redis-timeout" in opts and "--rules" in opts, opts
    r = subprocess.run([agent_bin(), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    missing = sorted(o for o in opts if o not in r.stdout)
    assert not missing, "docs/operations.md lists options --help does not know: %s" % missing


def layout_layers():
    """[(folder, its description)] of docs/development.md's layout, from
    the ground up."""
    text = doc("docs/development.md")
    layout = text[text.index("## Layout of the sources\n"):]
    layout = layout[layout.index("\n    agent/"):]
    layout = layout[:layout.index("\n\n", 1)]
    blocks = re.split(r"^    (agent/[a-z/]*)", layout, flags=re.M)
    return [(blocks[i].rstrip("/"), blocks[i + 1]) for i in range(1, len(blocks) - 1, 2)]


def agent_folders():
    """Every folder of agent/ that holds sources, agent/ itself included."""
    out = []
    for d, _, files in os.walk(os.path.join(harness.ROOT, "agent")):
        if any(f.endswith((".c", ".h")) for f in files):
            out.append(os.path.relpath(d, harness.ROOT))
    return sorted(out)


def test_layers_include_only_downwards():
    """A file includes headers of its own folder and of the folders below
    it in docs/development.md's layout, never of one above: the include
    graph between folders has no cycle."""
    order = [f for f, _ in layout_layers()]
    assert sorted(order) == agent_folders(), "the layout's folders are not agent/'s"
    rank = {f: i for i, f in enumerate(order)}
    where = {}
    for folder in order:
        for f in os.listdir(os.path.join(harness.ROOT, folder)):
            if f.endswith(".h"):
                where.setdefault(f, folder)
    bad = []
    for folder in order:
        for f in sorted(os.listdir(os.path.join(harness.ROOT, folder))):
            if not f.endswith((".c", ".h")):
                continue
            with open(os.path.join(harness.ROOT, folder, f), encoding="utf-8") as fh:
                for inc in re.findall(r'^#include "([^"]+)"', fh.read(), flags=re.M):
                    dest = where.get(inc)
                    if dest is not None and rank[dest] > rank[folder]:
                        bad.append("%s/%s includes %s (%s)" % (folder, f, inc, dest))
    assert not bad, "includes upwards:\n" + "\n".join(bad)


def test_layout_names_every_module():
    """The layout section of docs/development.md names every folder of
    agent/ and every module in the folder it lives in."""
    text = doc("docs/development.md")
    described = dict(layout_layers())
    missing = []
    for folder in agent_folders():
        assert folder in described, "the layout has no entry for %s/" % folder
        for f in sorted(os.listdir(os.path.join(harness.ROOT, folder))):
            name, ext = os.path.splitext(f)
            if ext != ".c" or name.endswith("_int"):
                continue
            if not re.search(r"\b%s\b" % re.escape(name), described[folder]):
                missing.append("%s/%s" % (folder, f))
    assert not missing, "the layout does not name: %s" % missing


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


def readme_section(title):
    text = readme()
    start = text.index("\n## %s\n" % title)
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_readme_integration_runs_as_shown(h):
    """The README's minimal integration, its two files as they stand (but
    for the ports, picked free, and a `timeout processing` that a busy
    test machine cannot miss), gives the answers the README shows."""
    blocks = re.findall(r"^```(\w+)\n(.*?)^```", readme_section("A minimal HAProxy integration"),
                        re.S | re.M)
    kinds = [k for k, _ in blocks]
    assert kinds == ["sh", "haproxy", "haproxy", "sh", "text"], kinds
    agent_cmd, spoe, cfg, commands, shown = (b for _, b in blocks)
    argv = agent_cmd.split()
    assert argv[0] == "build/spoa-ratelimit", argv
    agent = h.agent(*argv[1:])
    app = h.backend()
    front = harness.free_port()
    for addr, port in (("127.0.0.1:12345", agent.port), ("127.0.0.1:8000", app.port),
                       ("127.0.0.1:8080", front)):
        assert addr in cfg + commands, addr
        cfg = cfg.replace(addr, "127.0.0.1:%d" % port)
    assert spoe.count("timeout processing 50ms\n") == 1
    spoe = spoe.replace("timeout processing 50ms\n", "timeout processing 1s\n")
    assert "config ratelimit.conf\n" in cfg and "haproxy -db -f haproxy.cfg &" in commands
    for name, text in (("ratelimit.conf", spoe), ("haproxy.cfg", cfg)):
        with open(os.path.join(h.dir, name), "w", encoding="utf-8") as f:
            f.write(text)
    if shutil.which(harness.HAPROXY) is None:
        raise harness.Skip("haproxy is not installed")
    hp = harness.Proc("haproxy", [harness.HAPROXY, "-db", "-f", "haproxy.cfg"],
                      os.path.join(h.dir, "haproxy.log"), cwd=h.dir)
    h.procs.append(hp)
    harness.wait_port(front, 10, hp.popen)

    codes_line, status_line, *header_lines = shown.strip("\n").split("\n")
    key = {"X-Api-Key": "k1"}
    codes = [str(harness.http_get(front, "/", key).status) for _ in range(6)]
    assert " ".join(codes) == codes_line.strip(), (codes, codes_line)
    r = harness.http_get(front, "/", key)
    assert status_line.split()[1] == str(r.status) == "429", (status_line, r)
    shown_headers = dict(line.split(": ", 1) for line in header_lines)
    assert r.headers.get("ratelimit-policy") == shown_headers["ratelimit-policy"], r
    # Seconds until the next token: what is shown, or less on a slow machine.
    assert 1 <= int(r.headers.get("retry-after")) <= int(shown_headers["retry-after"]), r
    m = re.fullmatch(r'("default";r=0;t=)(\d+)', r.headers.get("ratelimit"))
    shown_m = re.fullmatch(r'("default";r=0;t=)(\d+)', shown_headers["ratelimit"])
    assert m and shown_m and 1 <= int(m.group(2)) <= int(shown_m.group(2)), r


def markdown_anchors(path):
    """The anchors GitHub gives the headings of a Markdown file: lower case,
    punctuation dropped, spaces made hyphens, -1, -2, ... on repeats."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen, anchors = {}, set()
    for line in re.sub(r"^```.*?^```", "", text, flags=re.S | re.M).split("\n"):
        m = re.match(r"^#{1,6} (.*?)\s*#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
    return anchors


def test_docs_links_resolve():
    """Every relative link of README.md, BENCHMARKS.md and docs/*.md names a
    file of the tree, and every #anchor a heading of the file it names."""
    bad = []
    for name in docs_files():
        path = os.path.join(harness.ROOT, name)
        text = re.sub(r"^```.*?^```", "", doc(name), flags=re.S | re.M)
        text = re.sub(r"`[^`\n]*`", "", text)
        text = re.sub(r"^    .*$", "", text, flags=re.M)  # indented code
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                bad.append("%s: %s: no such file" % (name, target))
            elif anchor and anchor not in markdown_anchors(dest):
                bad.append("%s: %s: no such heading" % (name, target))
    assert not bad, "\n".join(bad)


def test_readme_is_a_front_door():
    """The README stays short: the two commands first, the rest in docs/."""
    lines = readme().split("\n")
    if lines[-1] == "":
        lines.pop()
    assert len(lines) <= 300, "README.md has %d lines, more than 300" % len(lines)
    commands = [line.split()[:2] for line in lines if line.startswith("    make ")]
    assert commands[:2] == [["make", "demo"], ["make", "test"]], commands[:2]
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


def test_integration_message_is_the_shipped_one():
    """The check-rate message the integration guide shows is spoe-conf/ratelimit.conf's,
    line for line, and it sends the path as spelt, which the guide says
    the agent normalises."""
    text = doc("docs/integration.md")
    block = text[text.index("```\nspoe-message check-rate\n") + 4:]
    block = block[:block.index("```")]
    shown = block.rstrip("\n").splitlines()
    with open(harness.SPOE_CONF, encoding="utf-8") as f:
        spoe = f.read()
    message = spoe[spoe.index("spoe-message check-rate"):].rstrip("\n").splitlines()
    assert shown == message, "docs/integration.md's message differs from spoe-conf/ratelimit.conf"
    assert any(line.strip().startswith("args ") and " path=path " in line + " "
               for line in message), "the message does not send path=path"
    assert "(`path=path`)" in section(text, "### Identity and paths"), \
        "the guide does not say how the path is sent"


def test_docs_say_why_clients_and_paths_cannot_be_chosen():
    """The integration guide says why a client must not choose its name,
    how an IPv6 client and an API key are named, that the agent matches
    the path normalised and what that assumes of the application; beside
    request_id, that a reused id shares one place, so the id is HAProxy's
    own. docs/rules.md says what the normal form is; no document shows
    the regular expressions HAProxy no longer needs."""
    text = doc("docs/integration.md")
    ident = section(text, "### Identity and paths")
    for words in ("ipmask(32,64)", "/64", "a map has found it", "made-up key per request",
                  "decoded once", "lower case", "RFC 3986", "%2F", "paths: raw",
                  "How paths are matched", "identity: ip"):
        assert words in ident, "docs/integration.md's Identity and paths says nothing of %r" % words
    for name in docs_files():
        for words in ("regsub", "txn.rl_path", "deny_status 400", "PCRE"):
            assert words not in doc(name), "%s still shows %r" % (name, words)
    rel = section(text, "## The release and response messages")
    assert "unique-id-format %[uuid()]" in rel, "docs/integration.md's concurrency example"
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
    paths = section(rules, "### How paths are matched")
    for words in ("%2F", "remove_dot_segments", ";params", "`paths: raw`", "decodes"):
        assert words in paths, "docs/rules.md's How paths are matched says nothing of %r" % words


def test_docs_show_no_client_chosen_identity():
    """What the README and the docs show HAProxy sending is what the
    shipped files send: no address whole, no API key without the map."""
    docs = ["README.md"] + [os.path.join("docs", n) for n in sorted(os.listdir(
        os.path.join(harness.ROOT, "docs"))) if n.endswith(".md")]
    for name in docs:
        text = doc(name)
        assert not re.search(r"ip=src(?!,ipmask\(32,64\))", text), name
        assert not re.search(r"api_key=req\.hdr\(x-api-key\)(?!,set-var)", text), name


def test_integration_walkthrough_runs_as_shown(h):
    """docs/integration.md's own set-up, followed as written
    (doc_walkthrough.py), prints what the guide shows; its recipe's
    arguments are the shipped SPOE file's."""
    import doc_walkthrough

    doc_walkthrough.run(h)
    text = doc("docs/integration.md")
    recipe = section(text, "## Known keys by plan, others per address")
    shown = re.search(r"^```\n(args .*?)^```", recipe, re.S | re.M).group(1).splitlines()
    with open(os.path.join(harness.ROOT, "spoe-conf", "ratelimit-known-keys.conf")) as f:
        spoe = [line.strip() for line in f]
    assert shown and all(line in spoe for line in shown), shown


def source_files():
    """The project's files of code, as git tracks them (else as the tree
    holds them, without build output)."""
    r = subprocess.run(["git", "-C", harness.ROOT, "ls-files"], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout:
        names = r.stdout.split()
    else:
        names = [os.path.relpath(os.path.join(d, f), harness.ROOT)
                 for d, dirs, files in os.walk(harness.ROOT)
                 if not os.path.relpath(d, harness.ROOT).startswith(("build", ".git"))
                 for f in files]
    code = (".c", ".h", ".py", ".sh", ".lua", ".mk", ".sed", ".in", ".8", ".bash-completion")
    for name in names:
        base = os.path.basename(name)
        if (name.endswith(code) or base in ("Makefile", "run") or
                base.startswith("Dockerfile") or name == "debian/rules"):
            yield name


def test_every_source_file_names_its_licence():
    """LICENSE is the Apache License 2.0, and every file of code says so
    with its SPDX line near the top, as debian/copyright does in DEP-5."""
    with open(os.path.join(harness.ROOT, "LICENSE")) as f:
        assert "Apache License" in f.read(500)
    with open(os.path.join(harness.ROOT, "debian", "copyright")) as f:
        text = f.read()
    assert text.startswith("Format: https://www.debian.org/doc/packaging-manuals/"
                           "copyright-format/1.0/") and "License: Apache-2.0" in text
    names = list(source_files())
    assert len(names) > 200, len(names)
    lacking = []
    for name in names:
        with open(os.path.join(harness.ROOT, name), errors="replace") as f:
            head = "".join(f.readline() for _ in range(3))
        if "SPDX-License-Identifier: Apache-2.0" not in head:
            lacking.append(name)
    assert not lacking, "no SPDX line: %s" % lacking[:20]
