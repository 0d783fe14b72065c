# SPDX-License-Identifier: Apache-2.0
"""What an installed system gets: the licence, and `make install` (which
the Debian package runs) with the guides and the integration under
share/doc/spoa-ratelimit, their paths those of an installed system, and
HAProxy accepting the installed examples. `make deb-docker-test` checks
the package itself the same way in a fresh Debian 12.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import harness

ROOT = harness.ROOT
DOCDIR = "/usr/share/doc/spoa-ratelimit"
CHECKER = os.path.join(ROOT, "scripts", "check-installed-paths.py")
DEBIAN_APACHE = "/usr/share/common-licenses/Apache-2.0"


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def make_install(dest, **variables):
    """`make install DESTDIR=dest PREFIX=/usr` from the source tree, with
    the agent as the suite built it: copied into a build directory of the
    test's own, which make takes as up to date (-o agent), so that nothing
    is compiled nor written into the suite's build directory."""
    build = os.path.join(dest, "_build")
    os.makedirs(build)
    shutil.copy(os.path.join(harness.BUILD, "spoa-ratelimit"), build)
    args = ["make", "-s", "-C", ROOT, "-o", "agent", "install", "BUILD=" + build,
            "DESTDIR=" + os.path.join(dest, "root"), "PREFIX=/usr"]
    args += ["%s=%s" % kv for kv in sorted(variables.items())]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "make install failed:\n" + r.stdout + r.stderr
    return os.path.join(dest, "root")


def shipped_integration():
    """Where `make install` puts each integration file of the source tree,
    relative to the documentation directory."""
    names = {}
    for f in glob.glob(os.path.join(ROOT, "examples", "*.yaml")):
        names["examples/" + os.path.basename(f)] = f
    for f in glob.glob(os.path.join(ROOT, "haproxy-examples", "*")):
        names["examples/haproxy/" + os.path.basename(f)] = f
    for f in glob.glob(os.path.join(ROOT, "spoe-conf", "*.conf")):
        names["examples/haproxy/spoe-" + os.path.basename(f)] = f
    for pattern in ("dashboards/*.json", "dashboards/provisioning/*", "alerts/*"):
        for f in glob.glob(os.path.join(ROOT, pattern)):
            names[os.path.relpath(f, ROOT)] = f
    return names


def test_licence_is_apache_2_0():
    licence = read("LICENSE")
    assert "Apache License\n                           Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence
    if os.path.exists(DEBIAN_APACHE):
        with open(DEBIAN_APACHE, encoding="utf-8") as f:
            assert licence == f.read(), "LICENSE is not the Apache License 2.0 text"

    # DEP-5: every file under Apache-2.0, its short form pointing at
    # Debian's copy of the text.
    copyright = read("debian", "copyright")
    paragraphs = [p for p in copyright.split("\n\n") if p.strip()]
    assert paragraphs[0].startswith(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
    files = [p for p in paragraphs if p.startswith("Files:")]
    assert files and all(re.search(r"^License: Apache-2\.0$", p, re.M) for p in files), files
    assert re.search(r"^Files: \*$", files[0], re.M), files[0]
    standalone = [p for p in paragraphs if p.startswith("License: Apache-2.0\n")]
    assert len(standalone) == 1, "no standalone License: Apache-2.0 paragraph"
    assert DEBIAN_APACHE in standalone[0]
    assert 'Licensed under the Apache License, Version 2.0 (the "License")' in standalone[0]

    readme = read("README.md")
    section = readme[readme.index("\n## Licence\n"):]
    assert "[Apache License, Version 2.0](LICENSE)" in section, section


def test_install_ships_the_guides_and_the_integration():
    tmp = tempfile.mkdtemp(prefix="rl-install-")
    try:
        root = make_install(tmp)
        doc = root + DOCDIR
        want = ["README.md", "BENCHMARKS.md"]
        want += ["docs/" + os.path.basename(f) for f in glob.glob(os.path.join(ROOT, "docs", "*.md"))]
        want += ["bench-figures/" + os.path.basename(f)
                 for f in glob.glob(os.path.join(ROOT, "bench-figures", "*.svg"))]
        want += list(shipped_integration())
        missing = [w for w in want if not os.path.isfile(os.path.join(doc, w))]
        assert not missing, "not installed under %s: %s" % (DOCDIR, missing)
        for w in want[:2] + [w for w in want if w.startswith("docs/")]:
            with open(os.path.join(doc, w), encoding="utf-8") as f:
                assert f.read() == read(w), "%s is not the guide" % w

        # No path of the source tree, nothing HAProxy would open relative
        # to its directory, every file it opens from /etc/haproxy shipped.
        r = subprocess.run([sys.executable, CHECKER, doc, "/etc/haproxy"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, "installed examples:\n" + r.stdout + r.stderr
        basic = open(os.path.join(doc, "examples/haproxy/basic.cfg"), encoding="utf-8").read()
        assert 'config "${RL_SPOE_CONF-/etc/haproxy/spoe-ratelimit.conf}"' in basic
        spoe = open(os.path.join(doc, "examples/haproxy/spoe-ratelimit.conf"), encoding="utf-8").read()
        assert 'map("${RL_TIERS_MAP-/etc/haproxy/tiers.map}"' in spoe

        # The man page says where they are.
        man = read("dist", "spoa-ratelimit.8")
        see_also = man[man.index(".SH SEE ALSO"):]
        assert "/usr/share/doc/spoa\\-ratelimit/" in see_also
        for name in ("README.md", "docs/", "examples/", "examples/haproxy/", "dashboards/", "alerts/"):
            assert name in see_also, "SEE ALSO does not name %s" % name

        r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall", "BUILD=" + os.path.join(tmp, "_build"),
                            "DESTDIR=" + root, "PREFIX=/usr"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not os.path.exists(doc), "make uninstall left %s" % DOCDIR
    finally:
        shutil.rmtree(tmp)


def test_installed_examples_pass_haproxy_check():
    """Each installed haproxy.cfg, with the SPOE files and maps copied into
    the HAProxy directory as the man page says (here one in a temporary
    directory, HAPROXYDIR), is valid for the HAProxy installed."""
    if not shutil.which(harness.HAPROXY):
        raise harness.Skip("haproxy is not installed")
    tmp = tempfile.mkdtemp(prefix="rl-install-")
    try:
        haproxydir = os.path.join(tmp, "etc", "haproxy")
        os.makedirs(haproxydir)
        doc = make_install(tmp, HAPROXYDIR=haproxydir) + DOCDIR
        shipped = os.path.join(doc, "examples", "haproxy")
        for f in glob.glob(os.path.join(shipped, "spoe-ratelimit*.conf")) + \
                glob.glob(os.path.join(shipped, "*.map")):
            shutil.copy(f, haproxydir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RL_")}
        cfgs = sorted(glob.glob(os.path.join(shipped, "*.cfg")))
        assert len(cfgs) == len(glob.glob(os.path.join(ROOT, "haproxy-examples", "*.cfg"))), \
            "installed haproxy.cfg examples: %s" % [os.path.basename(c) for c in cfgs]
        for cfg in cfgs:
            # from a directory where no relative path could resolve
            r = subprocess.run([harness.HAPROXY, "-c", "-f", cfg], capture_output=True, text=True,
                               timeout=30, env=env, cwd=tmp)
            assert r.returncode == 0, "haproxy -c -f %s:\n%s%s" % (
                os.path.basename(cfg), r.stdout, r.stderr)
            # every SPOE file it names is read from HAPROXYDIR
            m = re.search(r'config "\$\{RL_SPOE_CONF-([^}]*)\}"', open(cfg, encoding="utf-8").read())
            assert m and os.path.dirname(m.group(1)) == haproxydir, (cfg, m and m.group(1))
    finally:
        shutil.rmtree(tmp)
