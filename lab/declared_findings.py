"""The papers' findings we test, declared as data and checked when loaded, so a typo or a renamed row or run is a
one-line error, never a finding that reads nothing:
- conf/ablate/<spec>.yaml `findings` read the spec's ablation rows (lab.ablate_head.load_spec checks them);
- conf/reproduce/findings.yaml reads the runs of make reproduce's plan (lab.reproduce_plan.EXPERIMENTS).
lab.findings judges both by one evaluator (lab.finding_rules.evaluate).

Keys of both:
- claim: the finding as the page states it; section: the page section that shows it;
- effect: how our number is made from the figures read, a name of lab.finding_rules.MEASURES;
- paper: the published effect it is set against, a key of lab.published.PAPER_EFFECTS;
- rule: larger (the default), at_most or near (with `tolerance`): lab.verdict's rule over the paper's effect;
- labels: the names the effect's text gives its figures; note: the reason the page gives once all is measured.
An ablation finding reads `rows` ([a, b]; keeps_rising: `small` and `large`), each row's `figure` (a column of the
ablation file, lab.ablation_file; tau when not given) and, for gain, `also` a second figure whose change it adds.
A run finding reads `read`: figures of runs, each "<run> <method> <figure>[ on <bench>][ at batch <n|largest>]"
(RUN_FIGURES); names the result files in `from`, each "<run> (what)…"; and may give `because`: {text, of}, a reason
formatted with the figures `of` (each a figure, or [a, b] for b / a; {batch}: the last figure's batch) once all are
measured; `bins`, `bucket`, `min_count`: the parameters of the measures that take them.
The same file's `sections` say what each section's detail table and plots read (`section_runs`), so no run is named
in code.
"""
from __future__ import annotations

import re
from pathlib import Path

from omegaconf import OmegaConf

from eagle_infer.errors import EagleError
from eval.metrics import ALL
from lab.ablation_file import FIGURES
from lab.declaration import Declared, Ref
from lab.finding_rules import MEASURES, RULES
from lab.published import PAPER_EFFECTS
from lab.reproduce_plan import BY_NAME

SECTIONS = ("figure8", "table6", "eagle3")  # lab.findings' sections that read ablation rows
RUN_SECTIONS = ("table2", "table1", "table5", "table7", "eagle2")  # ... and those that read make reproduce's runs
RUN_FINDINGS = Path(__file__).resolve().parent.parent / "conf" / "reproduce" / "findings.yaml"
EFFECTS = {"gain": ("rows",), "difference": ("rows", "labels"), "keeps_rising": ("small", "large")}
# A run's figures: its summary row's (eval.metrics.Row), n-α and the chains reaching position n over its pooled
# cycles, a cycle's draft + verify ms, its answer records; a throughput run's at a batch size.
RUN_FIGURES = ("tau", "tok_s", "speedup_vs_vanilla", "cycle_ms", "records", r"alpha_\d+", r"reached_\d+")
BATCH_FIGURES = ("speedup", "tok_s", "tau")
REF = re.compile(r"(?P<run>\S+) (?P<method>\S+) (?P<figure>\S+)"
                 r"(?: on (?P<bench>\S+))?(?: at batch (?P<batch>\d+|largest))?")
RUN_METHOD = re.compile(r"(?P<run>\S+) (?P<method>\S+)(?: on (?P<bench>\S+))?")  # a section's role
FORMS = {REF: "<run> <method> <figure>[ on <bench>][ at batch <n|largest>]", RUN_METHOD: "<run> <method>[ on <bench>]"}


COMMON = {"claim", "section", "effect", "paper"}
OPTIONAL = {"rule", "tolerance", "labels", "note"}


def check_finding(path: Path, finding: dict, names: list[str]) -> Declared:
    """The declaration `finding` of the ablation spec at `path` (rows `names`); a one-line error naming the claim when
    it names an unknown section, effect, published effect, rule, figure or row, or lacks or adds a key."""
    claim, effect = finding.get("claim", "?"), finding.get("effect")
    if effect not in EFFECTS:
        raise EagleError(f"{path}: finding {claim!r} has effect {effect!r}: expected one of {', '.join(EFFECTS)}")
    needed = COMMON | set(EFFECTS[effect])
    _check_keys(path, finding, needed, needed | OPTIONAL | {"figure", "also"})
    _check_common(path, finding, SECTIONS)
    for key in ("figure", "also"):
        _known(path, f"finding {claim!r}", key, finding.get(key, "tau"), FIGURES)
    for key in EFFECTS[effect]:
        values = finding[key]
        if len(values) != 2 or (key != "labels" and any(v not in names for v in values)):
            raise EagleError(f"{path}: finding {claim!r} has {key} {values}: expected two "
                             + ("labels" if key == "labels" else f"of {', '.join(names)}"))
    return Declared(**{k: tuple(v) if isinstance(v, list) else v for k, v in finding.items()})


def declared(spec: dict, section: str) -> list[Declared]:
    """The ablation spec's findings shown in `section`, in the spec's order (load_spec has checked them)."""
    return [Declared(**{k: tuple(v) if isinstance(v, list) else v for k, v in f.items()})
            for f in spec.get("findings", []) if f["section"] == section]


def run_findings(path: Path = RUN_FINDINGS) -> list[Declared]:
    """conf/reproduce/findings.yaml's findings, checked: every run, method, benchmark and figure they read exists in
    make reproduce's plan (lab.reproduce_plan)."""
    return [_run_finding(path, f) for f in OmegaConf.to_container(OmegaConf.load(path))["findings"]]


def section_runs(path: Path = RUN_FINDINGS) -> dict[str, dict]:
    """conf/reproduce/findings.yaml's `sections`: what each section's detail table and plots read, by role: a Ref
    (run, method, benchmark; no figure) or, one level down, such Refs by row label; checked against the plan."""
    sections = OmegaConf.to_container(OmegaConf.load(path))["sections"]
    if sorted(sections) != sorted(RUN_SECTIONS):
        raise EagleError(f"{path}: sections {', '.join(sections)}: expected {', '.join(RUN_SECTIONS)}")

    def role(name: str, value):
        if isinstance(value, dict):
            return {label: role(name, text) for label, text in value.items()}
        return _ref(path, f"section {name!r}", value, RUN_METHOD)

    return {name: {key: role(name, value) for key, value in roles.items()} for name, roles in sections.items()}


def _run_finding(path: Path, finding: dict) -> Declared:
    what = f"finding {finding.get('claim', '?')!r}"
    _known(path, what, "effect", finding.get("effect"), list(MEASURES))
    _check_keys(path, finding, COMMON | {"read", "from"},
                COMMON | OPTIONAL | {"read", "from", "because", "bins", "bucket", "min_count"})
    _check_common(path, finding, RUN_SECTIONS)
    read = tuple(_ref(path, what, text) for text in finding["read"])
    because = None
    if "because" in finding:
        of = tuple(tuple(_ref(path, what, t) for t in item) if isinstance(item, list) else _ref(path, what, item)
                   for item in finding["because"]["of"])
        because = (finding["because"]["text"], of)
    for source in finding["from"]:
        _known(path, what, "from", source.split()[0], list(BY_NAME))
    plain = {k: tuple(v) if isinstance(v, list) else v for k, v in finding.items()
             if k not in ("read", "from", "because")}
    return Declared(**plain, figure=read[0].figure, read=read, sources=tuple(finding["from"]), because=because)


def _ref(path: Path, what: str, text: str, grammar: re.Pattern = REF) -> Ref:
    """A figure of a run ("<run> <method> <figure>[ on <bench>][ at batch <n|largest>]"; with `grammar` RUN_METHOD
    a method's answers, "<run> <method>[ on <bench>]"), checked against the plan."""
    match = grammar.fullmatch(text)
    if not match:
        raise EagleError(f"{path}: {what} reads {text!r}: expected {FORMS[grammar]!r}")
    parts = match.groupdict()
    run, method, figure, bench, batch = (parts.get(k) for k in ("run", "method", "figure", "bench", "batch"))
    _known(path, what, "run", run, list(BY_NAME))
    experiment = BY_NAME[run]
    _known(path, what, f"method (of run {run})", method, experiment.methods)
    if bench is not None:
        _known(path, what, f"benchmark (of run {run})", bench, experiment.benches)
    if grammar is RUN_METHOD:
        return Ref(run, method, "", bench or ALL)
    if (batch is not None) != experiment.throughput:
        raise EagleError(f"{path}: {what} reads {text!r}: expected 'at batch <n|largest>' exactly when the run is a "
                         "throughput run")
    figures = BATCH_FIGURES if batch is not None else RUN_FIGURES
    if not any(re.fullmatch(pattern, figure) for pattern in figures):
        raise EagleError(f"{path}: {what} reads figure {figure!r}: expected one of {', '.join(figures)}")
    size = None if batch is None else batch if batch == "largest" else int(batch)
    return Ref(run, method, figure, bench or ALL, size)


def _check_keys(path: Path, finding: dict, needed: set[str], allowed: set[str]) -> None:
    if not needed <= set(finding) <= allowed:
        raise EagleError(f"{path}: finding {finding.get('claim', '?')!r} has keys {sorted(finding)}: expected "
                         f"{sorted(needed)} for {finding.get('effect')}, and optionally {sorted(allowed - needed)}")


def _check_common(path: Path, finding: dict, sections: tuple[str, ...]) -> None:
    """The section, published effect and rule a finding names exist; near has a tolerance; a rule with a bound has the
    paper's figure."""
    claim, rule = finding["claim"], finding.get("rule", "larger")
    _known(path, f"finding {claim!r}", "section", finding["section"], sections)
    _known(path, f"finding {claim!r}", "paper", finding["paper"], list(PAPER_EFFECTS))
    _known(path, f"finding {claim!r}", "rule", rule, list(RULES))
    if (rule == "near") != ("tolerance" in finding):
        raise EagleError(f"{path}: finding {claim!r} has rule {rule} and tolerance {finding.get('tolerance')}: "
                         "expected a tolerance exactly with rule near")
    if rule != "larger" and PAPER_EFFECTS[finding["paper"]][1] is None:
        raise EagleError(f"{path}: finding {claim!r} has rule {rule} against {finding['paper']!r}, which has no "
                         "figure: expected a published effect with one")


def _known(path: Path, what: str, key: str, value, known) -> None:
    """A one-line error unless `value` (the `key` of `what`: "finding '<claim>'", "section '<name>'") is `known`."""
    if value not in known:
        raise EagleError(f"{path}: {what} has {key} {value!r}: expected one of {', '.join(map(str, known))}")
