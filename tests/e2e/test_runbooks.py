# SPDX-License-Identifier: Apache-2.0
"""Every alert of alerts/spoa-ratelimit.rules.yml links its section of the
operations guide: a runbook_url of the form operations.md#ANCHOR, where
ANCHOR is the anchor of a heading of docs/operations.md as Markdown
renderers make them (lower case, punctuation dropped, spaces as dashes),
and that section is under "Runbook"."""

import os
import re

from harness import ROOT

RULES = os.path.join(ROOT, "alerts", "spoa-ratelimit.rules.yml")
GUIDE = os.path.join(ROOT, "docs", "operations.md")


def anchor(heading):
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_alert_links_its_runbook_section():
    with open(RULES, encoding="utf-8") as f:
        rules = f.read()
    with open(GUIDE, encoding="utf-8") as f:
        guide = f.read()
    runbook = guide.split("\n## Runbook\n", 1)
    assert len(runbook) == 2, "docs/operations.md has no Runbook section"
    section = runbook[1].split("\n## ", 1)[0]
    anchors = {anchor(h) for h in re.findall(r"^### (.+)$", section, re.M)}
    blocks = rules.split("\n      - alert: ")[1:]
    assert len(blocks) >= 15, len(blocks)
    for block in blocks:
        name = block.split("\n", 1)[0]
        m = re.search(r'\n          runbook_url: "operations\.md#([\w-]+)"\n', block)
        assert m, "%s has no runbook_url" % name
        assert m.group(1) == anchor(name) and m.group(1) in anchors, (name, m.group(1))
    # and the guide's own links to them resolve
    all_anchors = {anchor(h) for h in re.findall(r"^#+ (.+)$", guide, re.M)}
    for link in re.findall(r"\]\(#([\w-]+)\)", guide):
        assert link in all_anchors, "docs/operations.md links #%s, which is no heading" % link
