"""Every relative link in the README, CONTRIBUTING, CHANGELOG and docs resolves: files exist, and #anchors name a
heading of the target page (GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (outside code blocks)."""
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def broken_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links inside code blocks are code
    broken = []
    for href in LINK.findall(text):
        if re.match(r"[a-z]+:", href):  # http(s), mailto: not checked offline
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(href)
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(href)
    return broken


def test_readme_and_docs_links_resolve():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = {str(p.relative_to(ROOT)): b for p in pages if (b := broken_links(p))}
    assert not broken, broken


def test_the_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n[ok](#a-title) [gone](missing.md) [no anchor](#nowhere) [web](https://x.y)\n")
    assert broken_links(page) == ["missing.md", "#nowhere"]
