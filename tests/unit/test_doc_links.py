"""Every relative link of README.md and docs/*.md points at a file or directory of the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# [text](target) and [text](target "title"); images too. Code spans and fenced blocks are not links.
LINK_RE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE_RE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_RE = re.compile(r"`[^`\n]*`")
EXTERNAL = ("http://", "https://", "mailto:")


def links(text: str) -> list[str]:
    text = CODE_RE.sub("", FENCE_RE.sub("", text))
    return [m.group(1) for m in LINK_RE.finditer(text)]


def broken(doc: Path) -> list[str]:
    out = []
    for target in links(doc.read_text()):
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(REPO) or not path.exists():
            out.append(target)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_resolves_inside_the_repository(doc: Path) -> None:
    assert broken(doc) == []


def test_a_broken_or_outside_link_is_found(tmp_path: Path) -> None:
    assert links("[a](x.md) `[b](y.md)` ![c](img.png \"t\")\n```\n[d](z.md)\n```\n") == ["x.md", "img.png"]
    doc = REPO / "docs" / "architecture.md"
    assert (doc.parent / "../README.md").resolve().exists()
    fake = tmp_path / "doc.md"
    fake.write_text("[gone](nowhere.md) [out](../../etc/passwd) [web](https://example.org) [here](#top)")
    assert broken(fake) == ["nowhere.md", "../../etc/passwd"]
