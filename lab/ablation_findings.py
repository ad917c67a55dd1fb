"""The published findings an ablation spec tests, declared in it (conf/ablate/<spec>.yaml `findings`) as data:
which rows, which figure, which effect, which published effect and rule. `check_finding` refuses a bad declaration
when the spec loads (lab.ablate_head.load_spec); lab.findings evaluates them, one evaluator for every declaration.

A declaration's keys:
- claim: the finding as the page states it; section: the page section that shows it (one of SECTIONS);
- effect: how our number is made from the rows' `figure` (a column of the ablation file, lab.ablation_file; tau
  when not given):
  - gain: rows [a, b], b / a − 1; `also` names a second figure whose change the text adds;
  - difference: rows [a, b], a − b, shown with `labels` [a's, b's];
  - keeps_rising: τ's gain from small[0] to large[0] (with the factor) minus that from small[1] to large[1];
- paper: the published effect it is set against, a key of lab.published.PAPER_EFFECTS; the verdict is
  lab.verdict.Larger(that effect), or, with `near: [value, tolerance]`, lab.verdict.Near(value, tolerance);
- note (optional): the reason the page gives once every row is measured.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from eagle_infer.errors import EagleError
from lab.ablation_file import FIGURES
from lab.published import PAPER_EFFECTS

SECTIONS = ("figure8", "table6", "eagle3")  # lab.findings' sections that read ablation rows
EFFECTS = {"gain": ("rows",), "difference": ("rows", "labels"), "keeps_rising": ("small", "large")}


@dataclass(frozen=True)
class Declared:
    """One declared finding (the module docstring)."""

    claim: str
    section: str
    effect: str
    paper: str
    rows: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    small: tuple[str, ...] = ()
    large: tuple[str, ...] = ()
    figure: str = "tau"
    also: str | None = None
    near: tuple[float, float] | None = None
    note: str = ""

    @property
    def named_rows(self) -> tuple[str, ...]:
        """Every row the finding reads, in the order a pending reason names them."""
        return (*self.rows, *self.small, *self.large)


KEYS = {f.name for f in fields(Declared)}
REQUIRED = {"claim", "section", "effect", "paper"}


def check_finding(path: Path, finding: dict, names: list[str]) -> Declared:
    """The declaration `finding` of the spec at `path` (rows `names`); a one-line error naming the claim when it
    names an unknown section, effect, published effect, figure or row, or lacks or adds a key."""
    claim, effect = finding.get("claim", "?"), finding.get("effect")
    if effect not in EFFECTS:
        raise EagleError(f"{path}: finding {claim!r} has effect {effect!r}: expected one of {', '.join(EFFECTS)}")
    needed = REQUIRED | set(EFFECTS[effect])
    allowed = needed | {"figure", "also", "near", "note"}
    if not needed <= set(finding) <= allowed:
        raise EagleError(f"{path}: finding {claim!r} has keys {sorted(finding)}: expected {sorted(needed)} for "
                         f"{effect}, and optionally {sorted(allowed - needed)}")
    checks = [("section", finding["section"], SECTIONS), ("paper", finding["paper"], list(PAPER_EFFECTS)),
              *((key, finding[key], FIGURES) for key in ("figure", "also") if key in finding)]
    for key, value, known in checks:
        if value not in known:
            raise EagleError(f"{path}: finding {claim!r} has {key} {value!r}: expected one of {', '.join(known)}")
    for key in EFFECTS[effect]:
        values = finding[key]
        if len(values) != 2 or (key != "labels" and any(v not in names for v in values)):
            raise EagleError(f"{path}: finding {claim!r} has {key} {values}: expected two "
                             + ("labels" if key == "labels" else f"of {', '.join(names)}"))
    if "near" in finding and len(finding["near"]) != 2:
        raise EagleError(f"{path}: finding {claim!r} has near {finding['near']}: expected [value, tolerance]")
    return _declared(finding)


def _declared(finding: dict) -> Declared:
    return Declared(**{k: tuple(v) if isinstance(v, list) else v for k, v in finding.items()})


def declared(spec: dict, section: str) -> list[Declared]:
    """The spec's findings shown in `section`, in the spec's order (load_spec has checked them)."""
    return [d for d in map(_declared, spec.get("findings", [])) if d.section == section]
