"""What an installed system gets: the licence."""

import os
import re

import harness

ROOT = harness.ROOT
DEBIAN_APACHE = "/usr/share/common-licenses/Apache-2.0"


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


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
