"""The README and docs hold no obvious staleness: no path that exists on one machine only (a home or work directory),
no notes about how a machine was borrowed, and no head other than the shipped one called "shipped" (the shipped
head is the ablation row its card names; an earlier head may be named as shipped then, at a commit, or until
another replaced it)."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCAL_PATH = re.compile(r"(?<![\w.~$<])/(?:work|root|home|Users|mnt)/[\w.-]")
NOTEBOOK = re.compile(r"lent session|64 MiB|this session", re.I)
SHIPPED = re.compile(r"shipped(?: row| head)?,? \(?`?(?:the ablation row )?([\w.-]+)`?\)?(.{0,40})", re.I)
THEN = re.compile(r"\b(?:then|until|at the time|at commit|before|earlier|previous|replaced)\b", re.I)


def pages(root: Path = ROOT) -> list[Path]:
    """The user-facing text: README, CONTRIBUTING, CHANGELOG and every page under docs/."""
    return [p for p in (root / "README.md", root / "CONTRIBUTING.md", root / "CHANGELOG.md") if p.exists()] + sorted(
        (root / "docs").rglob("*.md"))


def head_names(root: Path = ROOT) -> set[str]:
    """Every ablation row a head can come from (the committed ablation files' rows)."""
    names = set()
    for path in (root / "docs" / "results" / "data" / "ablation").glob("*.csv"):
        with path.open(newline="", encoding="utf-8") as f:
            names |= {row["row"] for row in csv.DictReader(f)}
    return names


def shipped_rows(root: Path = ROOT) -> set[str]:
    return {json.loads(p.read_text()).get("ablation_row") for p in (root / "eagle_infer" / "shipped_heads").glob("*/card.json")}


def stale_lines(text: str, heads: set[str], shipped: set[str], history: bool = False) -> list[str]:
    """The lines of `text` with a one-machine path or borrowed-machine notes, and (unless `history`, a changelog's
    past releases) those calling another head than `shipped` "shipped" without saying it was then."""
    found = []
    for line in text.splitlines():
        if LOCAL_PATH.search(line) or NOTEBOOK.search(line):
            found.append(line)
        elif not history and any(m.group(1) in heads - shipped and not THEN.search(m.group(2))
                                 for m in SHIPPED.finditer(line)):
            found.append(line)
    return found


def test_docs_hold_no_one_machine_paths_and_no_stale_shipped_head():
    heads, shipped = head_names(), shipped_rows()
    assert shipped and shipped <= heads, shipped  # the card names a row of the ablation file
    stale = {str(p.relative_to(ROOT)): lines for p in pages()
             if (lines := stale_lines(p.read_text(encoding="utf-8"), heads, shipped, p.name == "CHANGELOG.md"))}
    assert not stale, stale


def test_the_check_sees_stale_lines():
    heads, shipped = {"old-row", "new-row"}, {"new-row"}
    text = "\n".join([
        "Benchmarks live in /work/shared/data/benchmarks.",  # one machine's path
        "the shipped row (`old-row`: two layers)",  # an old head called shipped
        "with the shipped (old-row) head",
        "The first lent session found it slow.",
        "the shipped row (`new-row`)",  # fine: the shipped head
        "old-row, shipped until new-row replaced it; the shipped head old-row (shipped then)",  # fine: history
        "pip install --target /tmp/site; `~/.cache/eagle-toolkit`",  # fine: paths any machine has
    ])
    assert stale_lines(text, heads, shipped) == text.splitlines()[:4]


def test_design_module_map_is_the_code_s():
    """docs/design.md's module map is what lab.module_map renders from the modules' docstrings: a module added,
    moved or redescribed without `python -m lab.module_map` fails here."""
    from lab import module_map

    doc = module_map.DOC.read_text()
    assert module_map.BEGIN in doc and module_map.END in doc
    assert doc == module_map.with_map(doc), "run python -m lab.module_map"
