"""One declared finding of the papers' that we test, and a figure of a run it reads, as data (lab.declared_findings
reads and checks the declarations; lab.finding_rules judges them)."""
from __future__ import annotations

from dataclasses import dataclass

from eval.metrics import ALL


@dataclass(frozen=True)
class Ref:
    """One figure of one run: its method's, over one benchmark (ALL: every one), at a batch size (throughput)."""

    run: str
    method: str
    figure: str
    bench: str = ALL
    batch: int | str | None = None  # an int, "largest" (the largest the run measured) or None


@dataclass(frozen=True)
class Declared:
    """One declared finding (the module docstring)."""

    claim: str
    section: str
    effect: str
    paper: str
    rule: str = "larger"
    tolerance: float | None = None
    rows: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    small: tuple[str, ...] = ()
    large: tuple[str, ...] = ()
    figure: str = "tau"  # the figure the effect's text names (a run finding's: its first figure's)
    also: str | None = None
    note: str = ""
    read: tuple[Ref, ...] = ()
    sources: tuple[str, ...] = ()  # `from`
    because: tuple[str, tuple] | None = None  # (text, figures: each a Ref or a (Ref, Ref) ratio)
    bins: int | None = None
    bucket: str | None = None
    min_count: int | None = None

    @property
    def named_rows(self) -> tuple[str, ...]:
        """Every row an ablation finding reads, in the order a pending reason names them."""
        return (*self.rows, *self.small, *self.large)

    @property
    def runs(self) -> set[str]:
        """Every run a run finding reads or names."""
        because = [r for item in (self.because[1] if self.because else ()) for r in
                   (item if isinstance(item, tuple) else (item,))]
        return {r.run for r in (*self.read, *because)} | {s.split()[0] for s in self.sources}
