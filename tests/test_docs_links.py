"""Every relative link in the README and docs/ leads somewhere: the file exists and,
for `file.md#anchor`, the file has a heading with that GitHub slug."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "CHANGELOG.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "bench").glob("*.md"),
    ]
)

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) or [text](target "title"); an image's ![alt](target) too
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, code spans blanked."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case,
    punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    """The relative link targets of a markdown file (not http(s), mailto)."""
    targets: list[str] = []
    for line in _prose_lines(path.read_text()):
        for target in _LINK.findall(line):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, ...
                targets.append(target)
    return targets


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def broken(path: Path) -> list[str]:
    """The links of a markdown file that lead nowhere, each with why."""
    wrong: list[str] = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            wrong.append(f"{target}: {_shown(dest)} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            wrong.append(f"{target}: {_shown(dest)} has no heading #{anchor}")
    return wrong


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_lead_somewhere(doc: Path) -> None:
    wrong = broken(doc)
    assert not wrong, f"{_shown(doc)}:\n" + "\n".join(wrong)


def test_the_checker_finds_links_and_anchors(tmp_path: Path) -> None:
    # The checker itself: a link it cannot see would pass unchecked.
    (tmp_path / "b.md").write_text(
        "# Where a trace's time goes\n\n## `pytest-lbr vm` *(addition)*\n"
    )
    doc = tmp_path / "a.md"
    doc.write_text(
        "See [b](b.md#where-a-traces-time-goes), [vm](b.md#pytest-lbr-vm-addition),\n"
        "[gone](c.md), [no heading](b.md#nowhere), [web](https://example.com/x.md),\n"
        "`[code](d.md)`, and [self](#a).\n\n```\n[fenced](e.md)\n```\n# A\n"
    )
    assert links(doc) == [
        "b.md#where-a-traces-time-goes",
        "b.md#pytest-lbr-vm-addition",
        "c.md",
        "b.md#nowhere",
        "#a",
    ]
    assert anchors(tmp_path / "b.md") == {"where-a-traces-time-goes", "pytest-lbr-vm-addition"}
    assert [w.split(":")[0] for w in broken(doc)] == ["c.md", "b.md#nowhere"]


def test_docs_have_links_to_check() -> None:
    assert any(links(doc) for doc in DOCS), "no relative link found: is the link pattern wrong?"
